/*
 * outbuf.h - capture of one output stream: keeps the first `cap` bytes, counts all.
 * Memory grows with what is kept, never beyond cap, whatever the command prints.
 *
 * A pooled outbuf (outbuf_init_pooled) keeps its first `base` bytes as any, and takes what it
 * keeps beyond them from a pool shared by every command: many commands that print a lot at
 * once then hold at most the pool between them beyond their base, whatever each may keep.
 */
#ifndef SBXD_OUTBUF_H
#define SBXD_OUTBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes that outbufs may hold beyond their base, all together. Zeroed with a limit is
 * empty. */
struct outbuf_pool {
    size_t limit;
    size_t used; /* atomic */
};

struct outbuf {
    uint8_t *data;
    size_t len;               /* bytes kept */
    size_t alloc;             /* bytes allocated */
    size_t cap;               /* most bytes kept */
    uint64_t total;           /* bytes seen */
    struct outbuf_pool *pool; /* NULL: not pooled */
    size_t base;              /* bytes kept without the pool */
    size_t charged;           /* bytes taken from the pool */
    bool starved;             /* the pool ran dry: cap was lowered to what it gave */
};

void outbuf_init(struct outbuf *ob, size_t cap);
/* Keep up to cap bytes, those beyond base (when cap is more) from pool. */
void outbuf_init_pooled(struct outbuf *ob, size_t cap, size_t base, struct outbuf_pool *pool);
/* Frees the bytes and gives back what was taken from the pool. */
void outbuf_free(struct outbuf *ob);

/* Keep what fits under cap and count everything. Returns -1 if memory ran out (the bytes are
 * still counted; what is kept stops growing). */
int outbuf_append(struct outbuf *ob, const void *data, size_t n);

/* Append sbxd's own words (a note on how the command ended) after what is kept: past cap if
 * need be, as they are not the command's bytes and must not be cut. Counted in total too, so
 * outbuf_truncated still says whether the command's own bytes were cut. -1 if memory ran out
 * (nothing appended). */
int outbuf_note(struct outbuf *ob, const void *text, size_t n);

static inline bool outbuf_truncated(const struct outbuf *ob)
{
    return ob->total > ob->len;
}

#endif
