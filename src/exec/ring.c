#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"

#define RING_FIRST_ALLOC (64 * 1024)
#define RING_FIRST_SEGS  64

void ring_init(struct ring *r, size_t cap)
{
    memset(r, 0, sizeof(*r));
    r->cap = cap ? cap : 1;
    /* A run is at least one byte; allowing one per 256 kept keeps the list at 1/16 of the
     * ring's size even for output that alternates streams byte by byte. */
    r->seg_max = r->cap / 256 + RING_FIRST_SEGS;
}

void ring_free(struct ring *r)
{
    free(r->buf);
    free(r->segs);
    memset(r, 0, sizeof(*r));
}

static struct ring_seg *seg_at(const struct ring *r, size_t i)
{
    return &r->segs[(r->seg_head + i) % r->seg_alloc];
}

static void seg_pop_front(struct ring *r)
{
    r->seg_head = (r->seg_head + 1) % r->seg_alloc;
    r->nseg--;
}

/* Runs that end at or before start are of no use any more. */
static void segs_trim(struct ring *r)
{
    while (r->nseg >= 2 && seg_at(r, 1)->off <= r->start)
        seg_pop_front(r);
}

static void seg_push(struct ring *r, uint64_t off, int stream)
{
    if (r->nseg == r->seg_alloc && r->seg_alloc < r->seg_max) {
        size_t na = r->seg_alloc ? r->seg_alloc * 2 : RING_FIRST_SEGS;
        if (na > r->seg_max)
            na = r->seg_max;
        struct ring_seg *ns = malloc(na * sizeof(*ns));
        if (ns) {
            for (size_t i = 0; i < r->nseg; i++)
                ns[i] = *seg_at(r, i);
            free(r->segs);
            r->segs = ns;
            r->seg_alloc = na;
            r->seg_head = 0;
        }
    }
    if (r->seg_alloc == 0)
        return; /* no memory at all: append drops the bytes */
    if (r->nseg == r->seg_alloc) {
        /* Too many runs: the oldest goes, and its bytes with it. */
        seg_pop_front(r);
        if (r->nseg && seg_at(r, 0)->off > r->start)
            r->start = seg_at(r, 0)->off;
        if (!r->nseg)
            r->start = off;
    }
    *seg_at(r, r->nseg) = (struct ring_seg){.off = off, .stream = stream};
    r->nseg++;
}

/* Grow the buffer while nothing has wrapped (every offset kept is then its own index); the
 * first allocation may come after bytes were passed over (an append larger than cap). */
static void grow(struct ring *r, size_t want)
{
    if (r->alloc >= r->cap || (r->alloc && r->end > r->alloc) || want <= r->alloc)
        return;
    size_t na = r->alloc ? r->alloc : RING_FIRST_ALLOC;
    while (na < want && na < r->cap)
        na *= 2;
    if (na > r->cap)
        na = r->cap;
    uint8_t *nb = realloc(r->buf, na);
    if (!nb) {
        /* Keep what fits in what we have. */
        r->cap = r->alloc ? r->alloc : 1;
        return;
    }
    r->buf = nb;
    r->alloc = na;
}

void ring_append(struct ring *r, int stream, const void *data, size_t n)
{
    if (!n)
        return;
    const uint8_t *p = data;
    if (n > r->cap) {
        /* Only the last cap bytes can be kept: the rest is passed over. */
        size_t skip = n - r->cap;
        r->end += skip;
        p += skip;
        n = r->cap;
    }
    grow(r, (size_t)r->end + n);
    if (!r->alloc) {
        r->end += n;
        r->start = r->end;
        return;
    }
    if (!r->nseg || seg_at(r, r->nseg - 1)->stream != stream)
        seg_push(r, r->end, stream);
    if (n > r->alloc) {
        r->end += n - r->alloc;
        p += n - r->alloc;
        n = r->alloc;
    }
    size_t at = (size_t)(r->end % r->alloc);
    size_t first = r->alloc - at < n ? r->alloc - at : n;
    memcpy(r->buf + at, p, first);
    memcpy(r->buf, p + first, n - first);
    r->end += n;
    if (r->end - r->start > r->alloc)
        r->start = r->end - r->alloc;
    segs_trim(r);
}

size_t ring_read(const struct ring *r, uint64_t off, void *out, size_t max, int *stream)
{
    if (off < r->start || off >= r->end || !r->nseg || !max)
        return 0;
    /* The last run that begins at or before off. */
    size_t lo = 0, hi = r->nseg - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (seg_at(r, mid)->off <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint64_t run_end = lo + 1 < r->nseg ? seg_at(r, lo + 1)->off : r->end;
    uint64_t n = run_end - off;
    if (n > max)
        n = max;
    *stream = seg_at(r, lo)->stream;
    size_t at = (size_t)(off % r->alloc);
    size_t first = r->alloc - at < n ? r->alloc - at : (size_t)n;
    memcpy(out, r->buf + at, first);
    memcpy((uint8_t *)out + first, r->buf, (size_t)n - first);
    return (size_t)n;
}
