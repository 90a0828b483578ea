#include <stdlib.h>
#include <string.h>

#include "sbxd/outbuf.h"

/* Past its base a pooled outbuf grows by this much at a time: what it takes from the pool is
 * what it keeps, give or take a step (a large realloc moves pages, it copies no bytes). */
#define OUTBUF_POOL_STEP (1024 * 1024)

void outbuf_init(struct outbuf *ob, size_t cap)
{
    memset(ob, 0, sizeof(*ob));
    ob->cap = cap;
}

void outbuf_init_pooled(struct outbuf *ob, size_t cap, size_t base, struct outbuf_pool *pool)
{
    outbuf_init(ob, cap);
    ob->pool = pool;
    ob->base = base < cap ? base : cap;
}

/* Up to want bytes from the pool: what it had, maybe less. */
static size_t pool_take(struct outbuf_pool *p, size_t want)
{
    size_t used = __atomic_load_n(&p->used, __ATOMIC_RELAXED);
    for (;;) {
        size_t got = used < p->limit ? p->limit - used : 0;
        if (got > want)
            got = want;
        if (!got)
            return 0;
        if (__atomic_compare_exchange_n(&p->used, &used, used + got, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return got;
    }
}

void outbuf_free(struct outbuf *ob)
{
    free(ob->data);
    ob->data = NULL;
    ob->len = ob->alloc = 0;
    if (ob->pool && ob->charged)
        __atomic_sub_fetch(&ob->pool->used, ob->charged, __ATOMIC_ACQ_REL);
    ob->charged = 0;
}

/* The allocation to grow to for `need` bytes kept (need <= cap), the pool's share taken; less
 * than need when the pool has not enough (cap is then lowered to it). */
static size_t grow_size(struct outbuf *ob, size_t need)
{
    /* Grow geometrically from a small start, never past cap: a command that prints "hi" costs
     * a few bytes, one that floods costs at most cap. */
    size_t want = ob->alloc ? ob->alloc * 2 : 4096;
    while (want < need)
        want *= 2;
    if (!ob->pool || want <= ob->base) {
        return want > ob->cap ? ob->cap : want;
    }
    /* Past the base: step by step, each step from the pool. */
    if (need <= ob->base)
        return ob->base;
    want =
        ob->base + (need - ob->base + OUTBUF_POOL_STEP - 1) / OUTBUF_POOL_STEP * OUTBUF_POOL_STEP;
    if (want > ob->cap)
        want = ob->cap;
    size_t held = ob->base + ob->charged;
    if (want > held) {
        size_t got = pool_take(ob->pool, want - held);
        ob->charged += got;
        if (got < want - held) {
            /* The pool is dry: this stream keeps what it holds, and is told it was cut for
             * that (starved) rather than for its cap. */
            want = held + got;
            ob->cap = want > ob->alloc ? want : ob->alloc;
            ob->starved = true;
        }
    }
    return want;
}

int outbuf_append(struct outbuf *ob, const void *data, size_t n)
{
    ob->total += n;
    size_t room = ob->len < ob->cap ? ob->cap - ob->len : 0; /* (a note may pass cap) */
    size_t keep = n < room ? n : room;
    if (keep == 0)
        return 0;
    if (ob->len + keep > ob->alloc) {
        size_t want = grow_size(ob, ob->len + keep);
        if (want > ob->alloc) {
            uint8_t *nd = realloc(ob->data, want);
            if (!nd)
                return -1;
            ob->data = nd;
            ob->alloc = want;
        }
        if (ob->len + keep > ob->alloc)
            keep = ob->alloc - ob->len; /* what the pool allowed */
        if (!keep)
            return 0;
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
