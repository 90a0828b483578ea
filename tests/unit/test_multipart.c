/* The streaming multipart parser, fed in every possible split, and path percent-decoding. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multipart_internal.h"
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

/* A body fed in pieces of the given sizes (used in turn; the last piece takes the rest). */
struct result {
    int feed; /* the first failing mp_feed's -1, else 0 */
    int finish;
    bool found;
    char filename[256];
    char error[128];
    char content[8192];
    size_t len;
    unsigned calls;      /* callbacks */
    unsigned copied;     /* callbacks whose bytes were not in the fed pieces */
    const char *lo, *hi; /* the body being fed, for the test above */
};

static int record(void *arg, const char *d, size_t n)
{
    struct result *r = arg;
    ck_assert_uint_gt(n, 0);
    ck_assert(r->len + n <= sizeof(r->content));
    memcpy(r->content + r->len, d, n);
    r->len += n;
    r->calls++;
    if (d < r->lo || d + n > r->hi)
        r->copied++;
    return 0;
}

static void run_pieces(const char *ct, const char *b, size_t n, const size_t *sizes, size_t nsizes,
                       struct result *r)
{
    memset(r, 0, sizeof(*r));
    r->lo = b;
    r->hi = b + n;
    struct multipart mp;
    ck_assert_int_eq(mp_init(&mp, ct, "file", record, r), 0);
    size_t off = 0;
    for (size_t k = 0; off < n; k++) {
        size_t len = nsizes ? sizes[k % nsizes] : n;
        if (len > n - off || (nsizes && k == nsizes - 1 && nsizes > 1 && sizes[k] == 0))
            len = n - off;
        if (mp_feed(&mp, b + off, len) < 0 && r->feed == 0)
            r->feed = -1;
        off += len;
    }
    r->finish = mp_finish(&mp);
    r->found = mp.found;
    snprintf(r->filename, sizeof(r->filename), "%s", mp.filename);
    snprintf(r->error, sizeof(r->error), "%s", mp.error);
}

static void assert_same(const struct result *a, const struct result *b, const char *what)
{
    ck_assert_msg(a->feed == b->feed && a->finish == b->finish && a->found == b->found,
                  "%s: outcome differs (%d/%d/%d vs %d/%d/%d)", what, a->feed, a->finish, a->found,
                  b->feed, b->finish, b->found);
    ck_assert_msg(strcmp(a->error, b->error) == 0, "%s: error \"%s\" vs \"%s\"", what, a->error,
                  b->error);
    ck_assert_str_eq(a->filename, b->filename);
    ck_assert_msg(a->len == b->len && memcmp(a->content, b->content, a->len) == 0,
                  "%s: content differs (%zu vs %zu bytes)", what, a->len, b->len);
}

#define CT_B0 "multipart/form-data; boundary=b0undary"

/* Every pair of cuts: each delimiter, CRLF and header line split at every position of two
 * piece edges, including empty pieces. */
START_TEST(every_pair_of_cuts)
{
    size_t n = sizeof(body) - 1;
    struct result whole, r;
    run_pieces(CT_B0, body, n, NULL, 0, &whole);
    ck_assert_int_eq(whole.finish, 0);
    ck_assert_uint_eq(whole.len, sizeof(want) - 1);
    for (size_t i = 0; i <= n; i++)
        for (size_t j = i; j <= n; j++) {
            size_t sizes[3] = {i, j - i, 0};
            run_pieces(CT_B0, body, n, sizes, 3, &r);
            char what[64];
            snprintf(what, sizeof(what), "cuts at %zu and %zu", i, j);
            assert_same(&r, &whole, what);
        }
}
END_TEST

/* Pieces of every size from 1 to past a delimiter's length, so that piece edges fall at
 * every offset of every delimiter, preamble and epilogue included. */
START_TEST(every_piece_size)
{
    size_t n = sizeof(body) - 1;
    struct result whole, r;
    run_pieces(CT_B0, body, n, NULL, 0, &whole);
    for (size_t k = 1; k <= 2 * sizeof("\r\n--b0undary") + 1; k++) {
        run_pieces(CT_B0, body, n, &k, 1, &r);
        char what[32];
        snprintf(what, sizeof(what), "pieces of %zu", k);
        assert_same(&r, &whole, what);
    }
}
END_TEST

/* What a body of one part "file" with this content yields, whole and in every two-piece
 * split: the content back, byte for byte. */
static void roundtrip(const char *content, size_t clen)
{
    static const char head[] =
        "--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n";
    static const char tail[] = "\r\n--b0undary--\r\n";
    char buf[1024];
    size_t n = 0;
    ck_assert(sizeof(head) + clen + sizeof(tail) < sizeof(buf));
    memcpy(buf, head, sizeof(head) - 1);
    n += sizeof(head) - 1;
    memcpy(buf + n, content, clen);
    n += clen;
    memcpy(buf + n, tail, sizeof(tail) - 1);
    n += sizeof(tail) - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        size_t sizes[2] = {cut, 0};
        struct result r;
        run_pieces(CT_B0, buf, n, sizes, 2, &r);
        ck_assert_msg(r.feed == 0 && r.finish == 0 && r.found, "cut %zu: %s", cut, r.error);
        ck_assert_msg(r.len == clen && memcmp(r.content, content, clen) == 0,
                      "cut %zu: %zu bytes for %zu", cut, r.len, clen);
    }
}

/* Content made of the delimiter's own pieces: CRs, LFs, dashes and boundary prefixes right
 * before the real delimiter, at the start, and alone. */
START_TEST(crlf_edge_cases)
{
    static const char *const cases[] = {
        "",
        "\r",
        "\n",
        "\r\n",
        "\r\r",
        "\r\n\r\n",
        "\r\n-",
        "\r\n--",
        "\r\n--b",
        "\r\n--b0undar",
        "\r\n--b0undarx",
        "--b0undary", /* not at a line start: content */
        "x\r\n-b0undary",
        "\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r",
        "\n\r\n\r\n\r\n\r\n-\r\n--\r\n--b\r\n--b0\r\n--b0u",
        "a\r\n--b0undar\r\n--b0undar\r",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        roundtrip(cases[i], strlen(cases[i]));
    /* Bytes of every value, the NUL included. */
    char all[256];
    for (size_t i = 0; i < sizeof(all); i++)
        all[i] = (char)i;
    roundtrip(all, sizeof(all));
}
END_TEST

/* Content of random bytes from the delimiter's alphabet, in random pieces: the parser must
 * give it back whole, and chunking must not matter. */
START_TEST(random_content_random_pieces)
{
    static const char alphabet[] = "\r\n-b0undary";
    unsigned seed = 12345;
    for (int iter = 0; iter < 3000; iter++) {
        char content[200];
        size_t clen = (size_t)(rand_r(&seed) % sizeof(content));
        for (size_t i = 0; i < clen; i++)
            content[i] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
        char buf[512];
        int n =
            snprintf(buf, sizeof(buf),
                     "pre\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n");
        size_t start = (size_t)n;
        memcpy(buf + n, content, clen);
        n += (int)clen;
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "\r\n--b0undary--epi\r\n--b0undary");
        /* The content's first delimiter (if it holds one) ends the part early: the expected
         * content is what precedes it. */
        const char *d = memmem(buf + start, (size_t)n - start, "\r\n--b0undary", 12);
        ck_assert_ptr_nonnull(d);
        size_t expect = (size_t)(d - (buf + start));
        size_t sizes[4];
        for (size_t k = 0; k < 4; k++)
            sizes[k] = (size_t)(rand_r(&seed) % 16);
        struct result whole, r;
        run_pieces(CT_B0, buf, (size_t)n, NULL, 0, &whole);
        run_pieces(CT_B0, buf, (size_t)n, sizes, 4, &r);
        assert_same(&r, &whole, "random pieces");
        if (whole.finish == 0) {
            ck_assert(whole.found);
            ck_assert_uint_eq(whole.len, expect);
            ck_assert_int_eq(memcmp(whole.content, buf + start, expect), 0);
        }
        if (expect == clen) /* the content held no delimiter: it all came back */
            ck_assert_msg(whole.finish == 0 && whole.len == clen, "iter %d: %s", iter, whole.error);
    }
}
END_TEST

struct counter {
    size_t len, calls, copied;
    const char *lo, *hi; /* the fed body */
    const char *want;    /* the content expected */
};

static int count(void *arg, const char *d, size_t len)
{
    struct counter *k = arg;
    ck_assert_int_eq(memcmp(d, k->want + k->len, len), 0);
    k->len += len;
    k->calls++;
    if (d < k->lo || d + len > k->hi)
        k->copied++;
    return 0;
}

/* A large part fed as a server gets it: one callback per piece, each pointing into the
 * piece itself (no copy), but for the few bytes held back at a piece's end. */
START_TEST(one_callback_per_piece_no_copy)
{
    static const char head[] =
        "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n";
    static const char tail[] = "\r\n--b0undary--\r\n";
    size_t clen = 1 << 20, piece = 65536;
    size_t n = sizeof(head) - 1 + clen + sizeof(tail) - 1;
    char *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, head, sizeof(head) - 1);
    char *c = buf + sizeof(head) - 1;
    for (size_t i = 0; i < clen; i++)
        c[i] = (char)(i * 131 + 7); /* a CR every 256 bytes */
    /* A piece that ends in a delimiter's start, which turns out to be content. */
    memcpy(buf + 3 * piece - 5, "\r\n--b", 5);
    memcpy(c + clen, tail, sizeof(tail) - 1);

    struct counter k = {0, 0, 0, buf, buf + n, c};
    struct multipart mp;
    ck_assert_int_eq(mp_init(&mp, CT_B0, "file", count, &k), 0);
    size_t pieces = 0;
    for (size_t off = 0; off < n; off += piece, pieces++)
        ck_assert_int_eq(mp_feed(&mp, buf + off, n - off < piece ? n - off : piece), 0);
    ck_assert_int_eq(mp_finish(&mp), 0);
    ck_assert(mp.found);
    ck_assert_uint_eq(k.len, clen);
    ck_assert_uint_le(k.calls, pieces + 1);
    ck_assert_uint_eq(k.copied, 1); /* the 5 held-back bytes */
    free(buf);
}
END_TEST

/* The preamble and epilogue are ignored, whatever they hold; a body may start with its
 * first delimiter or have a preamble line; parts without headers are parts. */
START_TEST(preamble_and_epilogue)
{
    static const char *const bodies[] = {
        "--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nX\r\n--b0undary--",
        "\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nX\r\n--b0undary--",
        "x--b0undary\r\n--b0undar\r\n\r\n--b0undary\r\nContent-Disposition: form-data; "
        "name=\"file\"\r\n\r\nX\r\n--b0undary--\r\nepilogue\r\n--b0undary\r\n garbage",
        "--b0undary\r\n\r\nnot named\r\n--b0undary\t \r\nContent-Disposition: form-data; "
        "name=\"file\"\r\n\r\nX\r\n--b0undary--",
        /* A second "file" part: the first is the one. */
        "--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nX\r\n--b0undary\r\n"
        "Content-Disposition: form-data; name=\"file\"\r\n\r\nsecond\r\n--b0undary--",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        size_t n = strlen(bodies[i]);
        for (size_t cut = 0; cut <= n; cut++) {
            size_t sizes[2] = {cut, 0};
            struct result r;
            run_pieces(CT_B0, bodies[i], n, sizes, 2, &r);
            ck_assert_msg(r.feed == 0 && r.finish == 0 && r.found, "body %zu cut %zu: %s", i, cut,
                          r.error);
            ck_assert_msg(r.len == 1 && r.content[0] == 'X', "body %zu cut %zu", i, cut);
        }
    }
}
END_TEST

/* Bodies that must fail, whole and in every split, and with what. */
START_TEST(bad_bodies)
{
    static const struct {
        const char *body, *error;
        bool at_feed;
    } bad[] = {
        {"", "closing boundary", false},
        {"--b0undary", "closing boundary", false},
        {"--b0undary-", "closing boundary", false},
        {"--b0undary-x", "malformed", true},
        {"--b0undary\rx", "malformed", true},
        {"--b0undary\n", "malformed", true},
        {"--b0undaryx\r\n", "malformed", true},
        {"--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc",
         "closing boundary", false},
        {"--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--b0und",
         "closing boundary", false},
        {"--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--b0undary",
         "closing boundary", false},
        {"--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--b0undary-"
         "-",
         NULL, false}, /* complete: the control */
        {"--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n", "closing boundary",
         false},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = strlen(bad[i].body);
        for (size_t cut = 0; cut <= n; cut++) {
            size_t sizes[2] = {cut, 0};
            struct result r;
            run_pieces(CT_B0, bad[i].body, n, sizes, 2, &r);
            if (!bad[i].error) {
                ck_assert_int_eq(r.finish, 0);
                continue;
            }
            ck_assert_msg(r.finish == -1 && r.feed == (bad[i].at_feed ? -1 : 0), "body %zu cut %zu",
                          i, cut);
            ck_assert_msg(strstr(r.error, bad[i].error), "body %zu cut %zu: %s", i, cut, r.error);
        }
    }
}
END_TEST

/* A part's header block may be up to 1023 bytes, blank line included; one more fails. */
START_TEST(header_block_limit)
{
    for (size_t total = 1020; total <= 1025; total++) {
        char b[2048];
        static const char cd[] = "Content-Disposition: form-data; name=\"file\"\r\nX-Pad: ";
        size_t n = (size_t)snprintf(b, sizeof(b), "--b0undary\r\n%s", cd);
        size_t pad = total - (sizeof(cd) - 1) - 4;
        memset(b + n, 'p', pad);
        n += pad;
        n += (size_t)snprintf(b + n, sizeof(b) - n, "\r\n\r\nX\r\n--b0undary--");
        for (size_t cut = 0; cut <= n; cut += 7) {
            size_t sizes[2] = {cut, 0};
            struct result r;
            run_pieces(CT_B0, b, n, sizes, 2, &r);
            if (total <= 1023)
                ck_assert_msg(r.finish == 0 && r.found, "%zu bytes: %s", total, r.error);
            else
                ck_assert_msg(r.finish == -1 && strstr(r.error, "too long"), "%zu bytes", total);
        }
    }
}
END_TEST

static int refuse(void *arg, const char *d, size_t n)
{
    (void)arg;
    (void)d;
    (void)n;
    return -1;
}

/* A callback that cannot store (a full disk) ends the parse with an error that stays. */
START_TEST(callback_failure_is_final)
{
    struct multipart mp;
    ck_assert_int_eq(mp_init(&mp, CT_B0, "file", refuse, NULL), 0);
    static const char b[] =
        "--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--b0undary--";
    ck_assert_int_eq(mp_feed(&mp, b, sizeof(b) - 1), -1);
    ck_assert_ptr_nonnull(strstr(mp.error, "could not be stored"));
    ck_assert_int_eq(mp_feed(&mp, "x", 1), -1);
    ck_assert_int_eq(mp_finish(&mp), -1);
    /* A part nobody wants is never handed to it. */
    ck_assert_int_eq(mp_init(&mp, CT_B0, "file", refuse, NULL), 0);
    static const char other[] =
        "--b0undary\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nabc\r\n--b0undary--";
    ck_assert_int_eq(mp_feed(&mp, other, sizeof(other) - 1), 0);
    ck_assert_int_eq(mp_finish(&mp), 0);
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
    tcase_add_test(tc, every_pair_of_cuts);
    tcase_add_test(tc, every_piece_size);
    tcase_add_test(tc, crlf_edge_cases);
    tcase_add_test(tc, random_content_random_pieces);
    tcase_add_test(tc, one_callback_per_piece_no_copy);
    tcase_add_test(tc, preamble_and_epilogue);
    tcase_add_test(tc, bad_bodies);
    tcase_add_test(tc, header_block_limit);
    tcase_add_test(tc, callback_failure_is_final);
    tcase_add_test(tc, url_decoding);
    suite_add_tcase(s, tc);
    return s;
}
