/* Content and name search: GET /files/{dir}?grep= and ?glob=, streamed as NDJSON (or SSE)
 * then a summary; confined to the workspace, as the command user, in bounded time and memory
 * whatever a hostile tree holds. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define SH(command) run_sh(&g_sbxd, command)

/* The events of a search: the results in order, then the summary (asserted last). */
struct found {
    cJSON *ev[256];
    int n;
    cJSON *summary;
};

static void found_free(struct found *f)
{
    for (int i = 0; i < f->n; i++)
        cJSON_Delete(f->ev[i]);
    cJSON_Delete(f->summary);
}

/* GET of a printf-formatted path that answers 200 with an NDJSON stream. */
__attribute__((format(printf, 2, 3))) static void search(struct found *f, const char *fmt, ...)
{
    char path[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    struct http_resp r;
    ck_assert_int_eq(http_request(&g_sbxd, "GET", path, NULL, NULL, 0, 10000, &r), 0);
    ck_assert_msg(r.status == 200, "%s: %ld %s", path, r.status, r.body);
    ck_assert_msg(strstr(r.headers, "application/x-ndjson") != NULL, "%s", r.headers);
    memset(f, 0, sizeof(*f));
    for (char *line = r.body, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        cJSON *j = cJSON_Parse(line);
        ck_assert_msg(j != NULL, "%s: not JSON: %.200s", path, line);
        ck_assert_msg(!f->summary, "%s: an event after the summary", path);
        const cJSON *type = cJSON_GetObjectItem(j, "type");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "summary") == 0)
            f->summary = j;
        else if (f->n < 256)
            f->ev[f->n++] = j;
        else
            cJSON_Delete(j);
    }
    ck_assert_msg(f->summary != NULL, "%s: no summary in %.300s", path, r.body);
    http_resp_free(&r);
}

static const cJSON *match_in(const struct found *f, const char *path)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(jstr(f->ev[i], "path"), path) == 0)
            return f->ev[i];
    return NULL;
}

static const char *nth(const cJSON *m, const char *key, int i)
{
    const cJSON *a = cJSON_GetObjectItem(m, key);
    ck_assert_msg(cJSON_IsArray(a), "%s is not an array", key);
    const cJSON *s = cJSON_GetArrayItem(a, i);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

START_TEST(grep_streams_matches_with_context_then_a_summary)
{
    SH("rm -rf sr && mkdir -p sr/pkg sr/.git sr/node && "
       "printf 'one\\ntwo\\nx = f(a.b) $HOME\\nfour\\nfive\\n' > sr/pkg/a.py && "
       "printf 'f(a.b) $HOME in git\\n' > sr/.git/config && "
       "printf 'f(a.b) $HOME\\0binary\\n' > sr/blob.bin && "
       "printf 'f(a.b) $HOME in c\\n' > sr/pkg/m.c && printf 'f(a.b) $HOME\\n' > sr/node/n.py && "
       "printf 'f(aXb) $HOME\\n' > sr/pkg/not.py");
    struct found f;
    /* Literal by default: the dot, the parentheses and the dollar are themselves. */
    search(&f, "/files/sr?grep=f(a.b)%%20%%24HOME&context=2");
    ck_assert_int_eq(f.n, 3);
    const cJSON *m = match_in(&f, "sr/pkg/a.py");
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq((int)jnum(m, "line"), 3);
    ck_assert_int_eq((int)jnum(m, "column"), 5);
    ck_assert_str_eq(jstr(m, "type"), "match");
    ck_assert_str_eq(jstr(m, "text"), "x = f(a.b) $HOME");
    ck_assert_str_eq(nth(m, "before", 0), "one");
    ck_assert_str_eq(nth(m, "before", 1), "two");
    ck_assert_str_eq(nth(m, "after", 0), "four");
    ck_assert_str_eq(nth(m, "after", 1), "five");
    ck_assert_ptr_nonnull(match_in(&f, "sr/pkg/m.c"));
    ck_assert_ptr_nonnull(match_in(&f, "sr/node/n.py"));
    /* .git and a file with a NUL in its first block are passed over, as ripgrep does. */
    ck_assert_int_eq((int)jnum(f.summary, "matches"), 3);
    ck_assert_int_eq((int)jnum(f.summary, "files_scanned"), 5);
    ck_assert_int_eq((int)jnum(f.summary, "skipped_binary"), 1);
    ck_assert_int_gt((int)jnum(f.summary, "bytes_read"), 60);
    ck_assert(!jbool(f.summary, "truncated"));
    found_free(&f);
    search(&f, "/files/sr?grep=%%24HOME&include_git=true&binary=true");
    ck_assert_int_eq(f.n, 6);
    ck_assert_ptr_nonnull(match_in(&f, "sr/.git/config"));
    ck_assert_ptr_nonnull(match_in(&f, "sr/blob.bin"));
    found_free(&f);
    /* A type shorthand, an include glob and an exclude glob (a directory not entered). */
    search(&f, "/files/sr?grep=HOME&type=py&exclude=node");
    ck_assert_int_eq(f.n, 2);
    ck_assert_ptr_nonnull(match_in(&f, "sr/pkg/a.py"));
    ck_assert_ptr_nonnull(match_in(&f, "sr/pkg/not.py"));
    found_free(&f);
    search(&f, "/files/sr?grep=HOME&glob=pkg/*.c");
    ck_assert_int_eq(f.n, 1);
    ck_assert_ptr_nonnull(match_in(&f, "sr/pkg/m.c"));
    found_free(&f);
    /* A regular expression, and case folded. */
    search(&f, "/files/sr/pkg?grep=%%5Ef%%5C(A.B%%5C)&regex=true&ignore_case=true");
    ck_assert_int_eq(f.n, 2);
    ck_assert_ptr_nonnull(match_in(&f, "sr/pkg/m.c"));
    ck_assert_ptr_nonnull(match_in(&f, "sr/pkg/not.py"));
    found_free(&f);
    /* SSE when the client accepts it. */
    struct http_resp r;
    ck_assert_int_eq(http_request_with(&g_sbxd, "GET", "/files/sr/pkg?grep=four",
                                       "Accept: text/event-stream", NULL, NULL, 0, 10000, &r),
                     0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(
        strstr(r.body, "event: match\ndata: {\"type\":\"match\",\"path\":\"sr/pkg/a.py\""));
    ck_assert_ptr_nonnull(strstr(r.body, "event: summary\ndata: {\"type\":\"summary\""));
    http_resp_free(&r);
}
END_TEST

START_TEST(glob_streams_names_with_type_and_size)
{
    SH("rm -rf sg && mkdir -p sg/a/b sg/.git && printf 12345 > sg/top.py && "
       "printf 1 > sg/a/b/deep.py && printf 1 > sg/a/x.txt && printf 1 > sg/.git/h.py && "
       "mkdir sg/dir.py");
    struct found f;
    search(&f, "/files/sg?glob=**/*.py");
    ck_assert_int_eq(f.n, 3);
    const cJSON *e = match_in(&f, "sg/top.py");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(jstr(e, "type"), "file");
    ck_assert_int_eq((int)jnum(e, "size"), 5);
    ck_assert_ptr_nonnull(match_in(&f, "sg/a/b/deep.py"));
    ck_assert_str_eq(jstr(match_in(&f, "sg/dir.py"), "type"), "directory");
    ck_assert_int_eq((int)jnum(f.summary, "entries"), 3);
    found_free(&f);
    search(&f, "/files/sg?glob=a/*");
    ck_assert_int_eq(f.n, 2); /* a/b and a/x.txt: '*' stays within a directory */
    found_free(&f);
    search(&f, "/files/sg?glob=*.py&exclude=b&max_matches=1");
    ck_assert_int_eq(f.n, 1);
    ck_assert(jbool(f.summary, "truncated"));
    found_free(&f);
}
END_TEST

START_TEST(search_never_leaves_the_workspace)
{
    SH("rm -rf sx && mkdir sx && ln -s /etc sx/etc && ln -s /etc/passwd sx/pw && "
       "ln -s .. sx/up && printf 'root:x:0\\n' > sx/mine");
    struct found f;
    /* Symlinks are not followed: not /etc, not the workspace again through "..". */
    search(&f, "/files/sx?grep=root:x:0");
    ck_assert_int_eq(f.n, 1);
    ck_assert_str_eq(jstr(f.ev[0], "path"), "sx/mine");
    found_free(&f);
    search(&f, "/files/sx?glob=*");
    ck_assert_int_eq(f.n, 4);
    ck_assert_str_eq(jstr(match_in(&f, "sx/etc"), "type"), "symlink");
    found_free(&f);
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/sx/etc?grep=root");
    assert_error(&r, 403, "PERMISSION_DENIED");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/..%%2F..%%2Fetc?grep=root");
    ck_assert_msg(r.status == 403 || r.status == 404, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/sx/mine?grep=root");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
}
END_TEST

START_TEST(search_skips_what_the_command_user_cannot_read)
{
    if (geteuid() != 0)
        return; /* files are read with the user's rights only when sbxd can switch */
    SH("rm -rf su && mkdir -p su/closed && printf 'secret\\n' > su/shut && chmod 000 su/shut && "
       "printf 'secret\\n' > su/closed/f && chmod 000 su/closed && printf 'secret\\n' > su/open");
    struct found f;
    search(&f, "/files/su?grep=secret");
    ck_assert_int_eq(f.n, 1);
    ck_assert_str_eq(jstr(f.ev[0], "path"), "su/open");
    ck_assert_int_eq((int)jnum(f.summary, "skipped_unreadable"), 2);
    found_free(&f);
    SH("chmod 700 su/closed");
}
END_TEST

START_TEST(search_bounds_a_huge_line_and_a_pathological_pattern)
{
    SH("rm -rf sh && mkdir sh && head -c 3000000 /dev/zero | tr '\\0' x > sh/huge && "
       "printf 'needle\\nafter\\n' >> sh/huge && head -c 40 /dev/zero | tr '\\0' a > sh/evil && "
       "printf 'b\\n' >> sh/evil");
    struct found f;
    search(&f, "/files/sh?grep=needle&context=1");
    ck_assert_int_eq(f.n, 1);
    const cJSON *m = f.ev[0];
    ck_assert_int_eq((int)jnum(m, "line"), 1);
    ck_assert_int_eq((int)jnum(m, "column"), 3000001);
    ck_assert(jbool(m, "text_cut"));
    ck_assert_int_le((int)strlen(jstr(m, "text")), 2048);
    ck_assert_str_eq(nth(m, "after", 0), "after");
    ck_assert_int_eq((int)jnum(f.summary, "lines_cut"), 1);
    found_free(&f);
    /* (a+)+$ backtracks exponentially on a run of a's that does not end the line: PCRE2's
     * match limit ends it, the file is counted, the answer comes at once. */
    double t0 = now_ms();
    search(&f, "/files/sh?grep=(a%%2B)%%2B%%24&regex=true");
    ck_assert_double_lt(now_ms() - t0, 5000 * SLOW);
    ck_assert_int_eq(f.n, 0);
    ck_assert_int_eq((int)jnum(f.summary, "skipped_match_limit"), 1);
    found_free(&f);
}
END_TEST

static int by_place(const void *x, const void *y)
{
    const cJSON *a = *(const cJSON *const *)x, *b = *(const cJSON *const *)y;
    int c = strcmp(jstr(a, "path"), jstr(b, "path"));
    if (c)
        return c;
    double d = jnum(a, "line") - jnum(b, "line");
    if (d == 0)
        d = jnum(a, "column") - jnum(b, "column");
    return d < 0 ? -1 : d > 0;
}

/* The results by path, line and column. */
static void found_sort(struct found *f)
{
    qsort(f->ev, (size_t)f->n, sizeof(f->ev[0]), by_place);
}

/* %-escape s for a query value into out. */
static void qesc(const char *s, char *out, size_t len)
{
    size_t n = 0;
    for (; *s && n + 4 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, len - n, "%%%02X", c);
    }
    out[n] = '\0';
}

/*
 * A regex that begins with a literal is searched by that literal first (memmem), each place
 * it occurs then tried by PCRE2 anchored there: it finds exactly what PCRE2 alone finds (the
 * same pattern in a group, which has no such beginning), the places where the literal occurs
 * without a match, overlapping ones, a quantifier on its last letter and an alternative too.
 */
START_TEST(a_regex_that_begins_with_a_literal_finds_what_pcre2_alone_finds)
{
    SH("rm -rf sp && mkdir sp && printf '"
       "needle_ needle_12\\nneeneedle_7\\nneedle_x needle_3\\nneedle_5 \\nabce abcde\\nabcd\\n"
       "fooobar foobar\\nxyzz\\nxyz\\nat the end\\nthe end is near\\nneedle_\\n"
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\\n' > sp/t && cp sp/t sp/u");
    static const char *const patterns[] = {
        "needle_[0-9]+$",
        "needle_[0-9]",
        "abcd?e",
        "fooo*bar",
        "xyz{2}",
        "the end$",
        "the end( is)?",
        "ab|needle_1",
        "needle_\\b",
        /* \\E alone is nothing: the ? quantifies the d; \\K moves the match's start. */
        "abcd\\E?e",
        "needle_\\K[0-9]+",
    };
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
        char plain[256], grouped[256], q1[600], q2[600];
        snprintf(plain, sizeof(plain), "%s", patterns[i]);
        snprintf(grouped, sizeof(grouped), "(?:%s)", patterns[i]);
        qesc(plain, q1, sizeof(q1));
        qesc(grouped, q2, sizeof(q2));
        struct found a, b;
        search(&a, "/files/sp?grep=%s&regex=true", q1);
        search(&b, "/files/sp?grep=%s&regex=true", q2);
        found_sort(&a); /* (files come in no fixed order when several threads search) */
        found_sort(&b);
        ck_assert_msg(a.n == b.n && a.n > 0, "%s: %d matches, %d without the literal first",
                      patterns[i], a.n, b.n);
        for (int k = 0; k < a.n; k++)
            ck_assert_msg(strcmp(jstr(a.ev[k], "path"), jstr(b.ev[k], "path")) == 0 &&
                              jnum(a.ev[k], "line") == jnum(b.ev[k], "line") &&
                              jnum(a.ev[k], "column") == jnum(b.ev[k], "column"),
                          "%s: match %d: %s:%.0f:%.0f, without the literal first %s:%.0f:%.0f",
                          patterns[i], k, jstr(a.ev[k], "path"), jnum(a.ev[k], "line"),
                          jnum(a.ev[k], "column"), jstr(b.ev[k], "path"), jnum(b.ev[k], "line"),
                          jnum(b.ev[k], "column"));
        found_free(&a);
        found_free(&b);
    }
    /* A pathological pattern behind a literal is bounded as well. */
    struct found f;
    double t0 = now_ms();
    search(&f, "/files/sp?grep=aaa(a%%2B)%%2B%%24&regex=true");
    ck_assert_double_lt(now_ms() - t0, 5000 * SLOW);
    ck_assert_int_eq(f.n, 0);
    ck_assert_int_eq((int)jnum(f.summary, "skipped_match_limit"), 2);
    found_free(&f);
}
END_TEST

START_TEST(search_stops_at_max_matches)
{
    SH("rm -rf sm && mkdir sm && seq 1 1500 | sed 's/^/hit /' > sm/many");
    struct found f;
    search(&f, "/files/sm?grep=hit&max_matches=10");
    ck_assert_int_eq(f.n, 10);
    ck_assert_int_eq((int)jnum(f.ev[9], "line"), 10);
    ck_assert(jbool(f.summary, "truncated"));
    ck_assert_int_eq((int)jnum(f.summary, "max_matches"), 10);
    found_free(&f);
    search(&f, "/files/sm?grep=hit"); /* the default cap: 1000 */
    ck_assert_int_eq((int)jnum(f.summary, "matches"), 1000);
    ck_assert(jbool(f.summary, "truncated"));
    found_free(&f);
}
END_TEST

START_TEST(search_refuses_bad_requests)
{
    SH("mkdir -p sb");
    static const char *const bad[] = {
        "/files/sb?grep=(a&regex=true",
        "/files/sb?grep=",
        "/files/sb?grep=a&context=99",
        "/files/sb?grep=a&type=cobol",
        "/files/sb?grep=a&max_matches=0",
        "/files/sb?grep=a&regex=maybe",
        "/files/sb?glob=%5B",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct http_resp r;
        http_reqf(&g_sbxd, &r, "GET", NULL, "%s", bad[i]);
        assert_error(&r, 400, "INVALID_ARGUMENT");
        http_resp_free(&r);
    }
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/nowhere?grep=a");
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
}
END_TEST

Suite *search_suite(void)
{
    Suite *s = suite_create("search");
    TCase *tc = tcase_create("search");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, grep_streams_matches_with_context_then_a_summary);
    tcase_add_test(tc, glob_streams_names_with_type_and_size);
    tcase_add_test(tc, search_never_leaves_the_workspace);
    tcase_add_test(tc, search_skips_what_the_command_user_cannot_read);
    tcase_add_test(tc, search_bounds_a_huge_line_and_a_pathological_pattern);
    tcase_add_test(tc, search_stops_at_max_matches);
    tcase_add_test(tc, a_regex_that_begins_with_a_literal_finds_what_pcre2_alone_finds);
    tcase_add_test(tc, search_refuses_bad_requests);
    suite_add_tcase(s, tc);
    return s;
}
