#include <check.h>
#include <string.h>

#include "sbxd/outbuf.h"
#include "suites.h"

START_TEST(keeps_head_counts_all)
{
    struct outbuf ob;
    outbuf_init(&ob, 10);
    ck_assert_int_eq(outbuf_append(&ob, "hello ", 6), 0);
    ck_assert(!outbuf_truncated(&ob));
    ck_assert_int_eq(outbuf_append(&ob, "world, again", 12), 0);
    ck_assert_uint_eq(ob.len, 10);
    ck_assert_uint_eq(ob.total, 18);
    ck_assert_mem_eq(ob.data, "hello worl", 10);
    ck_assert(outbuf_truncated(&ob));
    ck_assert_int_eq(outbuf_append(&ob, "more", 4), 0);
    ck_assert_uint_eq(ob.total, 22);
    ck_assert_uint_eq(ob.len, 10);
    outbuf_free(&ob);
}
END_TEST

START_TEST(memory_bounded_by_cap)
{
    struct outbuf ob;
    outbuf_init(&ob, 100000);
    char chunk[65536];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 1000; i++) /* 64 MB offered */
        ck_assert_int_eq(outbuf_append(&ob, chunk, sizeof(chunk)), 0);
    ck_assert_uint_eq(ob.len, 100000);
    ck_assert_uint_le(ob.alloc, 100000);
    ck_assert_uint_eq(ob.total, 1000ULL * 65536);
    outbuf_free(&ob);
}
END_TEST

START_TEST(small_output_small_buffer)
{
    struct outbuf ob;
    outbuf_init(&ob, 1 << 20);
    ck_assert_int_eq(outbuf_append(&ob, "hi\n", 3), 0);
    ck_assert_uint_le(ob.alloc, 4096);
    ck_assert(!outbuf_truncated(&ob));
    outbuf_free(&ob);
}
END_TEST

/* Two streams share a pool for what they keep beyond their base: the first takes what it
 * needs, the second what is left, and is starved (cut at what it got); freeing gives it back. */
START_TEST(pool_shared_and_given_back)
{
    enum { MIB = 1 << 20 };
    struct outbuf_pool pool = {.limit = 3 * MIB};
    struct outbuf a, b;
    outbuf_init_pooled(&a, 4 * MIB, MIB, &pool);
    outbuf_init_pooled(&b, 4 * MIB, MIB, &pool);
    static char chunk[65536];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 48; i++) /* 3 MiB each */
        ck_assert_int_eq(outbuf_append(&a, chunk, sizeof(chunk)), 0);
    ck_assert_uint_eq(a.len, 3 * MIB);
    ck_assert(!outbuf_truncated(&a) && !a.starved);
    ck_assert_uint_eq(__atomic_load_n(&pool.used, __ATOMIC_RELAXED), 2 * MIB);
    for (int i = 0; i < 48; i++)
        ck_assert_int_eq(outbuf_append(&b, chunk, sizeof(chunk)), 0);
    ck_assert_uint_eq(b.len, 2 * MIB); /* its base and the pool's last MiB */
    ck_assert(outbuf_truncated(&b) && b.starved);
    ck_assert_uint_eq(__atomic_load_n(&pool.used, __ATOMIC_RELAXED), 3 * MIB);
    outbuf_free(&a);
    outbuf_free(&b);
    ck_assert_uint_eq(__atomic_load_n(&pool.used, __ATOMIC_RELAXED), 0);
}
END_TEST

/* A note goes past cap whole; the command's bytes stay cut (and counted) as before it. */
START_TEST(note_passes_cap)
{
    struct outbuf ob;
    outbuf_init(&ob, 4);
    ck_assert_int_eq(outbuf_append(&ob, "abcdef", 6), 0);
    ck_assert_int_eq(outbuf_note(&ob, "|note", 5), 0);
    ck_assert_uint_eq(ob.len, 9);
    ck_assert(memcmp(ob.data, "abcd|note", 9) == 0);
    ck_assert(outbuf_truncated(&ob));
    ck_assert_int_eq(outbuf_append(&ob, "x", 1), 0); /* past cap: counted, not kept */
    ck_assert_uint_eq(ob.len, 9);
    outbuf_free(&ob);
    outbuf_init(&ob, 16);
    ck_assert_int_eq(outbuf_note(&ob, "only", 4), 0);
    ck_assert(!outbuf_truncated(&ob));
    outbuf_free(&ob);
}
END_TEST

Suite *outbuf_suite(void)
{
    Suite *s = suite_create("outbuf");
    TCase *tc = tcase_create("capping");
    tcase_add_test(tc, keeps_head_counts_all);
    tcase_add_test(tc, memory_bounded_by_cap);
    tcase_add_test(tc, small_output_small_buffer);
    tcase_add_test(tc, pool_shared_and_given_back);
    tcase_add_test(tc, note_passes_cap);
    suite_add_tcase(s, tc);
    return s;
}
