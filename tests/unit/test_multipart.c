/* The streaming multipart parser, fed in every possible split, and path percent-decoding. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/multipart.h"
#include "sbxd/urldecode.h"
#include "suites.h"

struct sink {
    char buf[4096];
    size_t len;
};

static int collect(void *arg, const char *d, size_t n)
{
    struct sink *s = arg;
    ck_assert(s->len + n < sizeof(s->buf));
    memcpy(s->buf + s->len, d, n);
    s->len += n;
    return 0;
}

static const char body[] = "preamble\r\n"
                           "--b0undary\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\n"
                           "not this\r\n"
                           "--b0undary  \r\n"
                           "Content-Disposition: form-data; name=\"file\"; filename=\"d/x.bin\"\r\n"
                           "Content-Type: application/octet-stream\r\n\r\n"
                           "\r\r\n-\r\n--b0und\r\n--b0undar\r\n-b0undary\0tail"
                           "\r\n--b0undary--\r\nepilogue";
static const char want[] = "\r\r\n-\r\n--b0und\r\n--b0undar\r\n-b0undary\0tail";

START_TEST(whole_and_split_at_every_point)
{
    size_t n = sizeof(body) - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        struct multipart mp;
        struct sink s = {.len = 0};
        ck_assert_int_eq(
            mp_init(&mp, "multipart/form-data; boundary=b0undary", "file", collect, &s), 0);
        ck_assert_int_eq(mp_feed(&mp, body, cut), 0);
        ck_assert_int_eq(mp_feed(&mp, body + cut, n - cut), 0);
        ck_assert_int_eq(mp_finish(&mp), 0);
        ck_assert(mp.found);
        ck_assert_str_eq(mp.filename, "d/x.bin");
        ck_assert_msg(s.len == sizeof(want) - 1 && memcmp(s.buf, want, s.len) == 0,
                      "split at %zu: %zu bytes", cut, s.len);
    }
    /* One byte at a time. */
    struct multipart mp;
    struct sink s = {.len = 0};
    mp_init(&mp, "multipart/form-data; boundary=\"b0undary\"", "file", collect, &s);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(mp_feed(&mp, body + i, 1), 0);
    ck_assert_int_eq(mp_finish(&mp), 0);
    ck_assert(s.len == sizeof(want) - 1 && memcmp(s.buf, want, s.len) == 0);
}
END_TEST

START_TEST(malformed_bodies_and_headers)
{
    struct multipart mp;
    struct sink s = {.len = 0};
    ck_assert_int_eq(mp_init(&mp, "text/plain", "file", collect, &s), -1);
    ck_assert_int_eq(mp_init(&mp, "multipart/form-data", "file", collect, &s), -1);
    ck_assert_int_eq(mp_init(&mp, "multipart/form-data; boundary=", "file", collect, &s), -1);
    char longb[128];
    snprintf(longb, sizeof(longb), "multipart/form-data; boundary=%071d", 0);
    ck_assert_int_eq(mp_init(&mp, longb, "file", collect, &s), -1);
    /* Cut before the closing delimiter. */
    mp_init(&mp, "multipart/form-data; boundary=q", "file", collect, &s);
    const char cut[] = "--q\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc";
    ck_assert_int_eq(mp_feed(&mp, cut, sizeof(cut) - 1), 0);
    ck_assert_int_eq(mp_finish(&mp), -1);
    ck_assert_ptr_nonnull(strstr(mp.error, "closing boundary"));
    /* Garbage after a delimiter. */
    mp_init(&mp, "multipart/form-data; boundary=q", "file", collect, &s);
    ck_assert_int_eq(mp_feed(&mp, "--qZ", 4), -1);
    /* The wanted part absent. */
    mp_init(&mp, "multipart/form-data; boundary=q", "file", collect, &s);
    const char none[] = "--q\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nv\r\n--q--";
    ck_assert_int_eq(mp_feed(&mp, none, sizeof(none) - 1), 0);
    ck_assert_int_eq(mp_finish(&mp), 0);
    ck_assert(!mp.found);
    ck_assert(mp_is_multipart("Multipart/Form-Data; boundary=x"));
    ck_assert(!mp_is_multipart("multipart/form-dataX"));
}
END_TEST

/* Attack: a filename whose quoted value holds ";name=file;" must not make its part the
 * "file" part (parameters are split outside quoted strings only). */
START_TEST(quoted_semicolons_are_not_separators)
{
    static const char tricky[] =
        "--b\r\nContent-Disposition: form-data; filename=\"x;name=file;\"; name=\"other\"\r\n\r\n"
        "wrong\r\n"
        "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\\\";b\"\r\n\r\n"
        "right\r\n--b--\r\n";
    struct sink s = {0};
    struct multipart mp;
    ck_assert_int_eq(mp_init(&mp, "multipart/form-data; boundary=b", "file", collect, &s), 0);
    ck_assert_int_eq(mp_feed(&mp, tricky, sizeof(tricky) - 1), 0);
    ck_assert_int_eq(mp_finish(&mp), 0);
    ck_assert(mp.found);
    ck_assert_uint_eq(s.len, 5);
    ck_assert_int_eq(memcmp(s.buf, "right", 5), 0);
}
END_TEST

START_TEST(url_decoding)
{
    char s[64];
    struct sbxd_err err = {0};
    snprintf(s, sizeof(s), "a%%2Fb%%2e%%2E/c%%20d+e");
    ck_assert_int_eq(http_url_decode(s, &err), 0);
    ck_assert_str_eq(s, "a/b../c d+e");
    const char *bad[] = {"a%00b", "%", "%4", "%zz", "a%G1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(s, sizeof(s), "%s", bad[i]);
        ck_assert_msg(http_url_decode(s, &err) == -1, "%s", bad[i]);
        ck_assert_int_eq(err.kind, SBXD_E_INVALID);
    }
}
END_TEST

Suite *multipart_suite(void)
{
    Suite *s = suite_create("multipart");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, whole_and_split_at_every_point);
    tcase_add_test(tc, malformed_bodies_and_headers);
    tcase_add_test(tc, quoted_semicolons_are_not_separators);
    tcase_add_test(tc, url_decoding);
    suite_add_tcase(s, tc);
    return s;
}
