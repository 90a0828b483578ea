/*
 * fuzz_multipart - the streaming multipart/form-data parser (src/http/multipart.c).
 *
 * Input layout:
 *   the Content-Type header value, up to the first '\n'
 *   one control byte C:
 *     bits 0-2  how many chunk sizes follow (0: the body is fed whole)
 *     bit 3     the data callback refuses content past (C >> 4) * 8 bytes (a full disk)
 *   the chunk sizes, one byte each (0 is an empty feed), used in turn until the body ends
 *   the body
 * The body is fed once in those chunks and once whole to a second parser: both must end the
 * same way with the same content, so a boundary split across chunks changes nothing. The
 * content delivered is a piece of the body, never more bytes than it has; a part reported
 * complete is followed in the body by the delimiter.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multipart_internal.h"

#include "fuzz.h"

struct sink {
    char *buf;
    size_t len, cap; /* cap: the body's length */
    size_t refuse_after;
};

static int collect(void *arg, const char *data, size_t n)
{
    struct sink *s = arg;
    check(n > 0 && data != NULL);
    if (s->len + n > s->refuse_after)
        return -1;
    check(s->len + n <= s->cap);
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    return 0;
}

struct outcome {
    bool feed_failed;
    int finish;
};

static void run(struct multipart *mp, const char *body, size_t blen, const uint8_t *sizes,
                size_t nsizes, struct outcome *o)
{
    size_t off = 0, k = 0, zeros = 0;
    o->feed_failed = false;
    do {
        size_t n = nsizes ? sizes[k++ % nsizes] : blen;
        if (n == 0 && ++zeros > nsizes)
            n = 1; /* every size is 0: go on byte by byte */
        if (n)
            zeros = 0;
        if (n > blen - off)
            n = blen - off;
        int rc = mp_feed(mp, body + off, n);
        if (o->feed_failed)
            check(rc < 0); /* an error is final */
        if (rc < 0) {
            check(mp->state == MP_ERROR && mp->error[0]);
            o->feed_failed = true;
        }
        off += n;
    } while (off < blen);
    o->finish = mp_finish(mp);
    if (o->finish == 0)
        check(!o->feed_failed && mp->state == MP_DONE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t ctlen = nl ? (size_t)(nl - data) : size;
    char *ct = malloc(ctlen + 1);
    check(ct != NULL);
    memcpy(ct, data, ctlen);
    ct[ctlen] = '\0';
    size_t pos = nl ? ctlen + 1 : size;
    uint8_t ctl = pos < size ? data[pos++] : 0;
    size_t nsizes = ctl & 7;
    if (nsizes > size - pos)
        nsizes = size - pos;
    const uint8_t *sizes = data + pos;
    pos += nsizes;
    const char *body = (const char *)data + pos;
    size_t blen = size - pos;

    struct sink sa = {malloc(blen + 1), 0, blen, SIZE_MAX};
    struct sink sb = {malloc(blen + 1), 0, blen, SIZE_MAX};
    check(sa.buf && sb.buf);
    if (ctl & 8)
        sa.refuse_after = sb.refuse_after = (size_t)(ctl >> 4) * 8;

    bool is_mp = mp_is_multipart(ct);
    struct multipart *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    check(a && b);
    if (mp_init(a, ct, "file", collect, &sa) < 0) {
        check(a->state == MP_ERROR && a->error[0]);
        check(mp_feed(a, body, blen) < 0);
        check(mp_finish(a) < 0);
        goto out;
    }
    check(is_mp);
    check(a->dlen == strlen(a->delim) && a->dlen >= 5 && a->dlen <= 74);
    check(mp_init(b, ct, "file", collect, &sb) == 0);

    struct outcome oa, ob;
    run(a, body, blen, sizes, nsizes, &oa);
    run(b, body, blen, NULL, 0, &ob);

    /* Chunking must not matter. */
    check(oa.feed_failed == ob.feed_failed && oa.finish == ob.finish);
    check(a->state == b->state && a->found == b->found);
    check(strcmp(a->filename, b->filename) == 0 && strcmp(a->error, b->error) == 0);
    if (ctl & 8) /* how much a refusing callback took first depends on the pieces */
        check(memcmp(sa.buf, sb.buf, sa.len < sb.len ? sa.len : sb.len) == 0);
    else
        check(sa.len == sb.len && memcmp(sa.buf, sb.buf, sa.len) == 0);

    /* The content is a piece of the body; a complete part ends at a delimiter. */
    if (sa.len)
        check(memmem(body, blen, sa.buf, sa.len) != NULL);
    if (a->found) {
        char *whole = malloc(sa.len + a->dlen);
        check(whole != NULL);
        memcpy(whole, sa.buf, sa.len);
        memcpy(whole + sa.len, a->delim, a->dlen);
        check(memmem(body, blen, whole, sa.len + a->dlen) != NULL);
        free(whole);
    }
out:
    free(a);
    free(b);
    free(sa.buf);
    free(sb.buf);
    free(ct);
    return 0;
}
