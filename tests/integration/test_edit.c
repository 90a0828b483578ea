/* GET /files/{path}?lines= and POST /files/{path}?edit: a coding agent's read of part of a
 * file and its exact edit, over real HTTP, with the forbidden cases tried. */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

static struct http_resp put(const char *path, const char *body)
{
    struct http_resp r;
    char url[512];
    snprintf(url, sizeof(url), "/files/%s", path);
    http_request(&g_sbxd, "PUT", url, "application/octet-stream", body, strlen(body), 30000, &r);
    ck_assert_msg(r.status == 200 || r.status == 201, "PUT %s: %ld %s", path, r.status, r.body);
    return r;
}

static struct http_resp get(const char *url)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", url, NULL, NULL, 0, 30000, &r);
    return r;
}

/* POST /files/PATH?edit with body, and header (NULL: none). */
static struct http_resp edit(const char *path, const char *body, const char *header)
{
    struct http_resp r;
    char url[512];
    snprintf(url, sizeof(url), "/files/%s?edit", path);
    http_request_with(&g_sbxd, "POST", url, header, "application/json", body, strlen(body), 30000,
                      &r);
    return r;
}

/* The file's content now, through a whole-file GET. */
static void assert_content(const char *path, const char *want)
{
    char url[512];
    snprintf(url, sizeof(url), "/files/%s", path);
    struct http_resp r = get(url);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(r.len == strlen(want) && memcmp(r.body, want, r.len) == 0,
                  "%s is '%.*s', want '%s'", path, (int)r.len, r.body, want);
    http_resp_free(&r);
}

static void run_ok(const char *cmd)
{
    char body[2048];
    snprintf(body, sizeof(body), "{\"command\":\"%s\"}", cmd);
    cJSON *r = execute(&g_sbxd, body);
    ck_assert_msg(jnum(r, "exit_code") == 0, "%s: %s", cmd, jstr(r, "stderr"));
    cJSON_Delete(r);
}

static int temp_files(void)
{
    cJSON *r = execute(&g_sbxd, "{\"command\":\"find . -name '.sbxd-upload-*' | wc -l\"}");
    int n = atoi(jstr(r, "stdout"));
    cJSON_Delete(r);
    return n;
}

START_TEST(lines_reads_a_range_with_numbers_and_the_etag)
{
    struct http_resp r = put("ln/a.txt", "one\ntwo\nthree\nfour\nfive");
    http_resp_free(&r);
    char etag[128], whole[128], first[32];
    r = get("/files/ln/a.txt");
    http_resp_header(&r, "ETag", whole, sizeof(whole));
    http_resp_free(&r);
    static const struct {
        const char *q, *want, *first;
    } cases[] = {
        {"2:3", "two\nthree\n", "2"}, {"4:", "four\nfive", "4"},
        {":2", "one\ntwo\n", "1"},    {"-2:", "four\nfive", "4"},
        {"3", "three\n", "3"},        {"-3:-2", "three\nfour\n", "3"},
        {"5:99", "five", "5"},        {"1:", "one\ntwo\nthree\nfour\nfive", "1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char url[256];
        snprintf(url, sizeof(url), "/files/ln/a.txt?lines=%s", cases[i].q);
        r = get(url);
        ck_assert_msg(r.status == 200, "%s: %ld %s", url, r.status, r.body);
        ck_assert_msg(r.len == strlen(cases[i].want) && !memcmp(r.body, cases[i].want, r.len),
                      "%s: '%.*s'", url, (int)r.len, r.body);
        ck_assert_str_eq(http_resp_header(&r, "ETag", etag, sizeof(etag)), whole);
        ck_assert_str_eq(http_resp_header(&r, "X-First-Line", first, sizeof(first)),
                         cases[i].first);
        http_resp_free(&r);
    }
    r = get("/files/ln/a.txt?lines=2:3&numbers=true");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "     2\ttwo\n     3\tthree\n");
    http_resp_free(&r);
    /* Past the end: 416 with the line count; malformed: 400. */
    r = get("/files/ln/a.txt?lines=-1:2");
    assert_error(&r, 416, "RANGE_NOT_SATISFIABLE");
    http_resp_free(&r);
    r = get("/files/ln/a.txt?lines=6:");
    assert_error(&r, 416, "RANGE_NOT_SATISFIABLE");
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "message"), "5 lines"));
    http_resp_free(&r);
    static const char *const bad[] = {"0:3", "3:1", "x", ":", "1:2:3", "--1", "1:x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char url[256];
        snprintf(url, sizeof(url), "/files/ln/a.txt?lines=%s", bad[i]);
        r = get(url);
        ck_assert_msg(r.status == 400, "%s: %ld", url, r.status);
        assert_error(&r, 400, "INVALID_ARGUMENT");
        http_resp_free(&r);
    }
    r = get("/files/ln/a.txt?lines=1:2&numbers=maybe");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    /* A binary file has no lines; a directory neither; an empty file has none, and that is
     * no error. */
    struct http_resp b;
    http_request(&g_sbxd, "PUT", "/files/ln/bin", "application/octet-stream", "ab\0cd\n", 6, 30000,
                 &b);
    http_resp_free(&b);
    r = get("/files/ln/bin?lines=1:");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    r = get("/files/ln?lines=1:");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    r = put("ln/empty", "");
    http_resp_free(&r);
    r = get("/files/ln/empty?lines=1:");
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(r.len, 0);
    http_resp_free(&r);
    r = get("/files/ln/missing?lines=1:");
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
}
END_TEST

START_TEST(lines_of_a_50_mb_file_in_bounded_memory)
{
    run_ok("mkdir -p ln && seq 1 7000000 > ln/big.log");
    rss_sampling_start(&g_sbxd);
    double t0 = now_ms();
    struct http_resp r = get("/files/ln/big.log?lines=6999999:7000001&numbers=true");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "6999999\t6999999\n7000000\t7000000\n");
    http_resp_free(&r);
    r = get("/files/ln/big.log?lines=-2:");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "6999999\n7000000\n");
    http_resp_free(&r);
    r = get("/files/ln/big.log?lines=3500000:3500001");
    ck_assert_str_eq(r.body, "3500000\n3500001\n");
    http_resp_free(&r);
    long base, peak = rss_sampling_stop(&base);
    fprintf(stderr, "lines of a %d MB file: %.0f ms, RSS %ld -> %ld KiB\n", 54, now_ms() - t0, base,
            peak);
    ck_assert_msg(peak - base < 8 * 1024, "RSS grew by %ld KiB", peak - base);
    run_ok("rm ln/big.log");
}
END_TEST

START_TEST(edit_replaces_exactly_once_and_answers_etag_and_lines)
{
    struct http_resp r = put("ed/a.py", "def f():\n    return 1\n\nprint(f())\n");
    http_resp_free(&r);
    run_ok("chmod 0751 ed/a.py");
    r = edit("ed/a.py", "{\"old\":\"    return 1\\n\",\"new\":\"    x = 2\\n    return x\\n\"}",
             NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_int_eq((int)jnum(r.json, "replacements"), 1);
    const cJSON *lines = cJSON_GetObjectItem(r.json, "lines");
    ck_assert_int_eq(cJSON_GetArraySize(lines), 1);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(lines, 0), "start"), 2);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(lines, 0), "end"), 3);
    char etag[128], now[128];
    http_resp_header(&r, "ETag", etag, sizeof(etag));
    ck_assert_str_eq(jstr(r.json, "etag"), etag);
    http_resp_free(&r);
    assert_content("ed/a.py", "def f():\n    x = 2\n    return x\n\nprint(f())\n");
    r = get("/files/ed/a.py");
    ck_assert_str_eq(http_resp_header(&r, "ETag", now, sizeof(now)), etag);
    http_resp_free(&r);
    /* Mode and owner kept. */
    r = get("/files/ed/a.py?stat=true");
    ck_assert_str_eq(jstr(r.json, "mode"), "0751");
    http_resp_free(&r);
    /* The owner is the command user's still: that of a file it writes now. */
    r = put("ed/owner-ref", "x");
    http_resp_free(&r);
    struct http_resp ref = get("/files/ed/owner-ref?stat=true");
    r = get("/files/ed/a.py?stat=true");
    ck_assert_int_eq((int)jnum(r.json, "uid"), (int)jnum(ref.json, "uid"));
    ck_assert_int_eq((int)jnum(r.json, "gid"), (int)jnum(ref.json, "gid"));
    http_resp_free(&ref);
    http_resp_free(&r);
    /* The long key names and several edits at once, each on the result of the one before. */
    r = edit("ed/a.py",
             "{\"edits\":[{\"old_string\":\"x = 2\",\"new_string\":\"y = 3\"},"
             "{\"old\":\"return x\",\"new\":\"return y\"},"
             "{\"old\":\"f()\",\"new\":\"g()\",\"replace_all\":true}]}",
             NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_int_eq((int)jnum(r.json, "replacements"), 4);
    lines = cJSON_GetObjectItem(r.json, "lines");
    ck_assert_int_eq(cJSON_GetArraySize(lines), 2); /* 1-3 (adjacent lines are one), 5 */
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(lines, 0), "start"), 1);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(lines, 0), "end"), 3);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(lines, 1), "start"), 5);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(lines, 1), "end"), 5);
    http_resp_free(&r);
    assert_content("ed/a.py", "def g():\n    y = 3\n    return y\n\nprint(g())\n");
    /* The standardized face takes it too. */
    struct http_resp v;
    http_request(&g_sbxd, "POST", "/v1/files/ed/a.py?edit=true", "application/json",
                 "{\"old\":\"y = 3\",\"new\":\"y = 4\"}", 29, 30000, &v);
    ck_assert_int_eq(v.status, 200);
    http_resp_free(&v);
    ck_assert_int_eq(temp_files(), 0);
}
END_TEST

START_TEST(edit_refuses_what_does_not_apply_and_changes_nothing)
{
    const char *text = "a = 1\na = 1\na = 1\nb = 2\n";
    struct http_resp r = put("ed/r.txt", text);
    http_resp_free(&r);
    r = edit("ed/r.txt", "{\"old\":\"a = 1\",\"new\":\"a = 9\"}", NULL);
    assert_error(&r, 409, "CONFLICT");
    ck_assert_msg(strstr(jstr(r.json, "message"), "3 times"), "%s", r.body);
    http_resp_free(&r);
    r = edit("ed/r.txt", "{\"old\":\"c = 3\",\"new\":\"c = 4\"}", NULL);
    assert_error(&r, 404, "NOT_FOUND");
    ck_assert_msg(strstr(jstr(r.json, "message"), "old text was not found"), "%s", r.body);
    http_resp_free(&r);
    r = edit("ed/nothere.txt", "{\"old\":\"c\",\"new\":\"d\"}", NULL);
    assert_error(&r, 404, "NOT_FOUND");
    ck_assert_msg(strstr(jstr(r.json, "message"), "does not exist"), "%s", r.body);
    http_resp_free(&r);
    /* All or nothing: the second edit misses, the first is not made. */
    r = edit("ed/r.txt",
             "{\"edits\":[{\"old\":\"b = 2\",\"new\":\"b = 3\"},{\"old\":\"zz\",\"new\":\"y\"}]}",
             NULL);
    assert_error(&r, 404, "NOT_FOUND");
    ck_assert_msg(strstr(jstr(r.json, "message"), "edit 2 of 2"), "%s", r.body);
    http_resp_free(&r);
    static const char *const bad[] = {
        "{\"old\":\"\",\"new\":\"x\"}",
        "{\"old\":\"a\"}",
        "{\"old\":\"a\",\"new\":1}",
        "{\"old\":\"a\",\"new\":\"b\",\"replace_all\":\"yes\"}",
        "{\"old\":\"a\",\"new\":\"b\",\"extra\":1}",
        "{\"edits\":[]}",
        "{\"edits\":[{\"old\":\"a\",\"new\":\"b\"}],\"old\":\"a\"}",
        "[1]",
        "{not json",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        r = edit("ed/r.txt", bad[i], NULL);
        ck_assert_msg(r.status == 400, "%s: %ld %s", bad[i], r.status, r.body);
        assert_error(&r, 400, "INVALID_ARGUMENT");
        http_resp_free(&r);
    }
    assert_content("ed/r.txt", text);
    r = edit("ed/r.txt", "{\"old\":\"a = 1\",\"new\":\"a = 9\",\"replace_all\":true}", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq((int)jnum(r.json, "replacements"), 3);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "lines"), 0), "end"),
                     3);
    http_resp_free(&r);
    assert_content("ed/r.txt", "a = 9\na = 9\na = 9\nb = 2\n");
    /* A binary file, a directory, a file over the cap. */
    http_request(&g_sbxd, "PUT", "/files/ed/bin", "application/octet-stream", "a\0b", 3, 30000, &r);
    http_resp_free(&r);
    r = edit("ed/bin", "{\"old\":\"a\",\"new\":\"c\"}", NULL);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    ck_assert_msg(strstr(jstr(r.json, "message"), "binary"), "%s", r.body);
    http_resp_free(&r);
    r = edit("ed", "{\"old\":\"a\",\"new\":\"c\"}", NULL);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    run_ok("head -c 17000000 /dev/zero | tr '\\\\0' a > ed/huge");
    r = edit("ed/huge", "{\"old\":\"aaaa\",\"new\":\"b\"}", NULL);
    assert_error(&r, 413, "PAYLOAD_TOO_LARGE");
    http_resp_free(&r);
    run_ok("rm ed/huge");
    /* Not JSON: 415. */
    http_request(&g_sbxd, "POST", "/files/ed/r.txt?edit", "text/plain", "{}", 2, 30000, &r);
    ck_assert_int_eq(r.status, 415);
    http_resp_free(&r);
    ck_assert_int_eq(temp_files(), 0);
}
END_TEST

START_TEST(edit_honours_if_match)
{
    struct http_resp r = put("ed/m.txt", "v1\n");
    char etag[128], hdr[200];
    http_resp_header(&r, "ETag", etag, sizeof(etag));
    http_resp_free(&r);
    r = get("/files/ed/m.txt");
    http_resp_header(&r, "ETag", etag, sizeof(etag));
    http_resp_free(&r);
    /* Another writer changed the file since it was read: the edit made on the old read is
     * refused, and the other writer's content stays. */
    run_ok("sleep 0.01; echo v2 > ed/m.txt");
    snprintf(hdr, sizeof(hdr), "If-Match: %s", etag);
    r = edit("ed/m.txt", "{\"old\":\"v\",\"new\":\"w\"}", hdr);
    assert_error(&r, 412, "FAILED_PRECONDITION");
    http_resp_free(&r);
    assert_content("ed/m.txt", "v2\n");
    r = get("/files/ed/m.txt?lines=1:");
    http_resp_header(&r, "ETag", etag, sizeof(etag));
    http_resp_free(&r);
    snprintf(hdr, sizeof(hdr), "If-Match: %s", etag);
    r = edit("ed/m.txt", "{\"old\":\"v\",\"new\":\"w\"}", hdr);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    assert_content("ed/m.txt", "w2\n");
}
END_TEST

START_TEST(edit_stays_in_the_workspace_and_within_the_users_rights)
{
    run_ok("mkdir -p ed/s && echo inside > ed/s/f && ln -s /etc/passwd ed/s/out && "
           "ln -s ../../.. ed/s/up && ln -s f ed/s/in");
    static const struct {
        const char *path;
        long status;
    } cases[] = {
        {"../etc/passwd", 403},
        {"ed/s/out", 403},
        {"ed/s/up/etc/passwd", 403},
        {"..%2F..%2Fetc%2Fhostname", 403},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct http_resp r = edit(cases[i].path, "{\"old\":\"root\",\"new\":\"toor\"}", NULL);
        ck_assert_msg(r.status == cases[i].status, "%s: %ld %s", cases[i].path, r.status, r.body);
        http_resp_free(&r);
    }
    /* A symlink inside the workspace is not replaced by a file: the edit is refused. */
    struct http_resp r = edit("ed/s/in", "{\"old\":\"inside\",\"new\":\"outside\"}", NULL);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    r = get("/files/ed/s/out?lines=1");
    assert_error(&r, 403, "PERMISSION_DENIED");
    http_resp_free(&r);
    assert_content("ed/s/f", "inside\n");
    /* A file the command user may read but not write (root's, 0644) is not replaced, though
     * the user may write its directory. */
    if (geteuid() == 0 && !under_gvisor()) {
        char p[600];
        snprintf(p, sizeof(p), "%s/ed/s/roots", g_sbxd.ws);
        FILE *f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fputs("root = 1\n", f);
        fclose(f);
        chmod(p, 0644);
        r = edit("ed/s/roots", "{\"old\":\"root\",\"new\":\"user\"}", NULL);
        assert_error(&r, 403, "PERMISSION_DENIED");
        http_resp_free(&r);
        assert_content("ed/s/roots", "root = 1\n");
        struct stat st;
        ck_assert_int_eq(stat(p, &st), 0);
        ck_assert_int_eq(st.st_uid, 0);
        unlink(p);
    } else {
        run_ok("echo ro > ed/s/ro && chmod 0444 ed/s/ro");
        r = edit("ed/s/ro", "{\"old\":\"ro\",\"new\":\"rw\"}", NULL);
        ck_assert_int_eq(r.status, 403);
        http_resp_free(&r);
    }
    ck_assert_int_eq(temp_files(), 0);
}
END_TEST

/*
 * A hostile command swaps links under the tools while they run: rc/d is a directory, then a
 * symlink to a directory outside the workspace holding a secret; rc/t a file, then a symlink
 * to a file outside that the command user owns and could write itself. Searches and edits
 * meanwhile never read the secret nor write the outside file, whatever moment they hit.
 */
START_TEST(a_command_swapping_links_leads_neither_search_nor_edit_out)
{
    char out[] = "/tmp/sbxd-race-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(out));
    cJSON *id = execute(&g_sbxd, "{\"command\":\"id -u\"}");
    uid_t uid = (uid_t)atoi(jstr(id, "stdout"));
    cJSON_Delete(id);
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/secret", out);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("RACE-SECRET here\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/target", out);
    f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("old-text\n", f);
    fclose(f);
    ck_assert_int_eq(chown(p, uid, uid), 0);
    chmod(out, 0755);
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"command\":\"mkdir -p rc; for i in $(seq 100000); do rm -rf rc/d rc/t; "
             "mkdir rc/d; echo nothing > rc/d/f; echo old-text > rc/t; rm -rf rc/d rc/t; "
             "ln -s %s rc/d; ln -s %s/target rc/t; done\"}",
             out, out);
    struct http_resp r;
    http_request(&g_sbxd, "POST", "/processes", "application/json", body, strlen(body), 10000, &r);
    ck_assert_msg(r.status == 201, "%s", r.body);
    cJSON *pj = cJSON_Parse(r.body);
    char kill_url[128];
    snprintf(kill_url, sizeof(kill_url), "/processes/%s", jstr(pj, "id"));
    cJSON_Delete(pj);
    http_resp_free(&r);
    int searches = 0, edits = 0, edited = 0, leaks = 0;
    double t0 = now_ms();
    while (now_ms() - t0 < 2000 * SLOW) {
        r = get("/files/rc?grep=RACE-SECRET&max_matches=10");
        searches += r.status == 200;
        leaks += r.body && strstr(r.body, "\"type\":\"match\"") != NULL;
        http_resp_free(&r);
        r = get("/files/rc/d?grep=RACE-SECRET");
        leaks += r.body && strstr(r.body, "\"type\":\"match\"") != NULL;
        http_resp_free(&r);
        r = get("/files/rc?glob=**/secret");
        leaks += r.body && strstr(r.body, "secret\"") != NULL;
        http_resp_free(&r);
        r = edit("rc/t", "{\"old\":\"old-text\",\"new\":\"pwned\"}", NULL);
        edits++;
        edited += r.status == 200;
        http_resp_free(&r);
    }
    http_request(&g_sbxd, "DELETE", kill_url, NULL, NULL, 0, 10000, &r);
    http_resp_free(&r);
    f = fopen(p, "r");
    char text[64] = "";
    ck_assert_ptr_nonnull(f);
    if (!fgets(text, sizeof(text), f))
        text[0] = '\0';
    fclose(f);
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", out);
    ck_assert_int_eq(system(rm), 0);
    fprintf(stderr, "link swaps: %d searches, %d edits (%d applied inside)\n", searches, edits,
            edited);
    ck_assert_msg(leaks == 0, "the outside secret was found %d times", leaks);
    ck_assert_msg(strcmp(text, "old-text\n") == 0, "the file outside was edited: %s", text);
    ck_assert_int_gt(searches, 0);
    run_ok("rm -rf rc");
    ck_assert_int_eq(temp_files(), 0);
}
END_TEST

struct reader {
    volatile int stop;
    int torn, reads;
    size_t size;
};

static void *read_loop(void *arg)
{
    struct reader *rd = arg;
    while (!rd->stop) {
        struct http_resp r = get("/files/ed/big.txt");
        rd->reads++;
        /* Old or new, never a mixture: the same size, and one marker or the other. */
        if (r.status != 200 || r.len != rd->size ||
            (!memmem(r.body, r.len, "MARK-A", 6) == !memmem(r.body, r.len, "MARK-B", 6)))
            rd->torn++;
        http_resp_free(&r);
    }
    return NULL;
}

START_TEST(edits_are_atomic_for_readers)
{
    run_ok("mkdir -p ed && { head -c 524288 /dev/zero | tr '\\\\0' x; echo MARK-A; "
           "head -c 524288 /dev/zero | tr '\\\\0' y; } > ed/big.txt");
    struct reader rd = {.size = 524288 * 2 + 7};
    pthread_t th;
    pthread_create(&th, NULL, read_loop, &rd);
    double t0 = now_ms();
    for (int i = 0; i < 40; i++) {
        struct http_resp r = edit("ed/big.txt",
                                  i % 2 ? "{\"old\":\"MARK-B\",\"new\":\"MARK-A\"}"
                                        : "{\"old\":\"MARK-A\",\"new\":\"MARK-B\"}",
                                  NULL);
        ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
        http_resp_free(&r);
    }
    double ms = now_ms() - t0;
    rd.stop = 1;
    pthread_join(th, NULL);
    fprintf(stderr, "40 edits of a 1 MiB file: %.1f ms each; %d reads, %d torn\n", ms / 40,
            rd.reads, rd.torn);
    ck_assert_int_eq(rd.torn, 0);
    ck_assert_int_eq(temp_files(), 0);
    run_ok("rm ed/big.txt");
}
END_TEST

Suite *edit_suite(void)
{
    Suite *s = suite_create("edit");
    TCase *tc = tcase_create("edit");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, lines_reads_a_range_with_numbers_and_the_etag);
    tcase_add_test(tc, lines_of_a_50_mb_file_in_bounded_memory);
    tcase_add_test(tc, edit_replaces_exactly_once_and_answers_etag_and_lines);
    tcase_add_test(tc, edit_refuses_what_does_not_apply_and_changes_nothing);
    tcase_add_test(tc, edit_honours_if_match);
    tcase_add_test(tc, edit_stays_in_the_workspace_and_within_the_users_rights);
    tcase_add_test(tc, edits_are_atomic_for_readers);
    tcase_add_test(tc, a_command_swapping_links_leads_neither_search_nor_edit_out);
    suite_add_tcase(s, tc);
    return s;
}
