#include <stdlib.h>
#include <string.h>

#include "sbxd/outbuf.h"

void outbuf_init(struct outbuf *ob, size_t cap)
{
    memset(ob, 0, sizeof(*ob));
    ob->cap = cap;
}

void outbuf_free(struct outbuf *ob)
{
    free(ob->data);
    ob->data = NULL;
    ob->len = ob->alloc = 0;
}

int outbuf_append(struct outbuf *ob, const void *data, size_t n)
{
    ob->total += n;
    size_t room = ob->len < ob->cap ? ob->cap - ob->len : 0; /* (a note may pass cap) */
    size_t keep = n < room ? n : room;
    if (keep == 0)
        return 0;
    if (ob->len + keep > ob->alloc) {
        /* Grow geometrically from a small start, never past cap: a command that prints
         * "hi" costs a few bytes, one that floods costs at most cap. */
        size_t want = ob->alloc ? ob->alloc * 2 : 4096;
        while (want < ob->len + keep)
            want *= 2;
        if (want > ob->cap)
            want = ob->cap;
        uint8_t *nd = realloc(ob->data, want);
        if (!nd)
            return -1;
        ob->data = nd;
        ob->alloc = want;
    }
    memcpy(ob->data + ob->len, data, keep);
    ob->len += keep;
    return 0;
}

int outbuf_note(struct outbuf *ob, const void *text, size_t n)
{
    if (!n)
        return 0;
    if (ob->len + n > ob->alloc) {
        uint8_t *nd = realloc(ob->data, ob->len + n);
        if (!nd)
            return -1;
        ob->data = nd;
        ob->alloc = ob->len + n;
    }
    memcpy(ob->data + ob->len, text, n);
    ob->len += n;
    ob->total += n;
    return 0;
}
