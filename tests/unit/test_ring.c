#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"
#include "suites.h"

/* Everything from off to the end, with the stream of each byte, as ring_read hands it out
 * (in reads of at most max). */
static size_t read_all(const struct ring *r, uint64_t off, size_t max, uint8_t *out, int *streams)
{
    size_t n = 0;
    uint8_t buf[65536];
    for (;;) {
        int st = 0;
        size_t k = ring_read(r, off, buf, max, &st);
        if (!k)
            return n;
        memcpy(out + n, buf, k);
        for (size_t i = 0; i < k; i++)
            streams[n + i] = st;
        n += k;
        off += k;
    }
}

START_TEST(keeps_everything_under_cap)
{
    struct ring r;
    ring_init(&r, 1000);
    ring_append(&r, 1, "hello ", 6);
    ring_append(&r, 2, "oops", 4);
    ring_append(&r, 1, "world", 5);
    ck_assert_uint_eq(r.start, 0);
    ck_assert_uint_eq(r.end, 15);
    uint8_t out[64];
    int st[64];
    ck_assert_uint_eq(read_all(&r, 0, 100, out, st), 15);
    ck_assert_mem_eq(out, "hello oopsworld", 15);
    ck_assert_int_eq(st[0], 1);
    ck_assert_int_eq(st[6], 2);
    ck_assert_int_eq(st[9], 2);
    ck_assert_int_eq(st[10], 1);
    /* A read stops where the stream changes, and at max. */
    int s = 0;
    ck_assert_uint_eq(ring_read(&r, 2, out, 100, &s), 4);
    ck_assert_int_eq(s, 1);
    ck_assert_uint_eq(ring_read(&r, 7, out, 2, &s), 2);
    ck_assert_mem_eq(out, "op", 2);
    ck_assert_int_eq(s, 2);
    ck_assert_uint_eq(ring_read(&r, 15, out, 100, &s), 0);
    ring_free(&r);
}
END_TEST

/* Past the cap, the oldest bytes go; offsets stay absolute and what is kept is exact. */
START_TEST(wraps_with_absolute_offsets)
{
    enum { CAP = 100000, TOTAL = 1000003 };
    struct ring r;
    ring_init(&r, CAP);
    uint8_t *all = malloc(TOTAL);
    for (size_t i = 0; i < TOTAL; i++)
        all[i] = (uint8_t)(i * 7 + i / 251);
    size_t off = 0, step = 1;
    while (off < TOTAL) {
        size_t n = step < TOTAL - off ? step : TOTAL - off;
        ring_append(&r, (int)(1 + (off / 5000) % 2), all + off, n);
        off += n;
        step = step * 3 % 7919 + 1; /* odd sizes, some over 4 KiB */
    }
    ck_assert_uint_eq(r.end, TOTAL);
    ck_assert_uint_eq(r.end - r.start, CAP);
    ck_assert_uint_le(r.alloc, CAP);
    uint8_t *out = malloc(CAP);
    int *st = malloc(CAP * sizeof(int));
    ck_assert_uint_eq(read_all(&r, r.start, 4096, out, st), CAP);
    ck_assert_mem_eq(out, all + r.start, CAP);
    /* Streams as appended, run by run (whole appends switch streams every 5000 bytes). */
    int s = 0;
    uint8_t b[16];
    ck_assert_uint_gt(ring_read(&r, TOTAL - 1, b, 16, &s), 0);
    ck_assert_int_eq(b[0], all[TOTAL - 1]);
    /* Below start: nothing. */
    ck_assert_uint_eq(ring_read(&r, r.start - 1, b, 16, &s), 0);
    free(all);
    free(out);
    free(st);
    ring_free(&r);
}
END_TEST

START_TEST(append_larger_than_cap)
{
    struct ring r;
    ring_init(&r, 10);
    ring_append(&r, 1, "abc", 3);
    ring_append(&r, 2, "0123456789ABCDEF", 16);
    ck_assert_uint_eq(r.end, 19);
    ck_assert_uint_eq(r.start, 9);
    uint8_t out[32];
    int st[32];
    ck_assert_uint_eq(read_all(&r, 9, 100, out, st), 10);
    ck_assert_mem_eq(out, "6789ABCDEF", 10);
    ck_assert_int_eq(st[0], 2);
    ring_free(&r);
}
END_TEST

/* The very first append larger than the ring: its last cap bytes are kept. */
START_TEST(first_append_larger_than_cap)
{
    struct ring r;
    ring_init(&r, 4096);
    uint8_t big[20000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 13);
    ring_append(&r, 1, big, sizeof(big));
    ck_assert_uint_eq(r.end, 20000);
    ck_assert_uint_eq(r.start, 20000 - 4096);
    uint8_t out[4096];
    int st[4096];
    ck_assert_uint_eq(read_all(&r, r.start, 1000, out, st), 4096);
    ck_assert_mem_eq(out, big + 20000 - 4096, 4096);
    ring_append(&r, 2, "xy", 2);
    ck_assert_uint_eq(read_all(&r, r.start, 8192, out, st), 4096);
    ck_assert_mem_eq(out + 4094, "xy", 2);
    ck_assert_int_eq(st[4095], 2);
    ck_assert_int_eq(st[0], 1);
    ring_free(&r);
}
END_TEST

/* Output that alternates streams byte by byte: the list of runs stays bounded, and what is
 * still held is labelled right. */
START_TEST(runs_are_bounded)
{
    enum { CAP = 4096 };
    struct ring r;
    ring_init(&r, CAP);
    for (unsigned i = 0; i < 100000; i++) {
        uint8_t c = (uint8_t)i;
        ring_append(&r, 1 + (int)(i % 2), &c, 1);
    }
    ck_assert_uint_eq(r.end, 100000);
    ck_assert_uint_le(r.nseg, r.seg_max);
    ck_assert_uint_le(r.seg_alloc, r.seg_max);
    ck_assert_uint_gt(r.end - r.start, 0);
    uint8_t out[CAP];
    int st[CAP];
    size_t n = read_all(&r, r.start, 100, out, st);
    ck_assert_uint_eq(n, r.end - r.start);
    for (size_t i = 0; i < n; i++) {
        uint64_t o = r.start + i;
        ck_assert_int_eq(out[i], (uint8_t)o);
        ck_assert_int_eq(st[i], 1 + (int)(o % 2));
    }
    ring_free(&r);
}
END_TEST

Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, keeps_everything_under_cap);
    tcase_add_test(tc, wraps_with_absolute_offsets);
    tcase_add_test(tc, append_larger_than_cap);
    tcase_add_test(tc, first_append_larger_than_cap);
    tcase_add_test(tc, runs_are_bounded);
    suite_add_tcase(s, tc);
    return s;
}
