/* The workspace's entries: ?stat=true, POST ?move_to= and ?copy_to=, and PUT with If-Match
 * and If-None-Match, on both faces (/files and /v1/files). */
#include <arpa/inet.h>
#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define SH(command) run_sh(&g_sbxd, command)

static const char *const faces[] = {"/files", "/v1/files"};

/* A command's stdout (its exit status 0). */
static char *sh_out(const char *command)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "command", command);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    cJSON *r = execute(&g_sbxd, body);
    free(body);
    char *out = strdup(jstr(r, "stdout"));
    cJSON_Delete(r);
    return out;
}

/* A raw request (head lines after the request line, and a body), its status; the answer's
 * body into *resp when not NULL. */
static long raw(const char *method, const char *path, const char *headers, const char *body,
                char **resp)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_sbxd.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[4096];
    int n =
        snprintf(req, sizeof(req),
                 "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\nConnection: close\r\n"
                 "\r\n%s",
                 method, path, headers ? headers : "", body ? strlen(body) : 0, body ? body : "");
    ck_assert_int_eq(send(s, req, (size_t)n, MSG_NOSIGNAL), n);
    char *out = read_until_close(s, NULL);
    close(s);
    long status = 0;
    sscanf(out, "HTTP/1.1 %ld", &status);
    if (resp) {
        const char *b = strstr(out, "\r\n\r\n");
        *resp = strdup(b ? b + 4 : "");
    }
    free(out);
    return status;
}

/* GET of a printf-formatted path: asserts the status, returns the JSON (to free). */
__attribute__((format(printf, 2, 3))) static cJSON *get_json(long want, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "%s", path);
    ck_assert_msg(r.status == want, "GET %s: %ld %s", path, r.status, r.body);
    cJSON *o = r.json;
    r.json = NULL;
    http_resp_free(&r);
    return o;
}

START_TEST(stat_describes_every_type)
{
    SH("mkdir -p st/dir && printf hello > st/f && chmod 0640 st/f && ln -s f st/link && "
       "ln -s ../../outside st/escape && mkfifo st/fifo && "
       "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"st/sock\")'");
    /* A device node (made here, as root: a command cannot make one), where its stat can be
     * seen (gVisor's gofer does not serve the host's device nodes). */
    bool device = !under_gvisor() && geteuid() == 0;
    if (device) {
        char dev[PATH_MAX];
        snprintf(dev, sizeof(dev), "%s/st/null", g_sbxd.ws);
        ck_assert_int_eq(mknod(dev, S_IFCHR | 0666, makedev(1, 3)), 0);
    }
    char *ids = sh_out("printf '%s %s' $(id -u) $(id -g)");
    unsigned uid, gid;
    ck_assert_int_eq(sscanf(ids, "%u %u", &uid, &gid), 2);
    free(ids);
    for (int f = 0; f < 2; f++) {
        cJSON *o = get_json(200, "%s/st/f?stat=true", faces[f]);
        ck_assert_str_eq(jstr(o, "path"), "st/f");
        ck_assert_str_eq(jstr(o, "name"), "f");
        ck_assert_str_eq(jstr(o, "type"), "file");
        ck_assert_int_eq((int)jnum(o, "size"), 5);
        ck_assert_str_eq(jstr(o, "mode"), "0640");
        ck_assert_int_eq((unsigned)jnum(o, "uid"), uid);
        ck_assert_int_eq((unsigned)jnum(o, "gid"), gid);
        ck_assert_ptr_nonnull(strstr(jstr(o, "modified_at"), "T"));
        char etag[128];
        snprintf(etag, sizeof(etag), "%s", jstr(o, "etag"));
        cJSON_Delete(o);
        /* The ETag is the one GET serves. */
        struct http_resp r;
        http_reqf(&g_sbxd, &r, "GET", NULL, "%s/st/f", faces[f]);
        char hdr[160];
        snprintf(hdr, sizeof(hdr), "ETag: %s", etag);
        ck_assert_msg(strstr(r.headers, hdr), "%s not in %s", hdr, r.headers);
        http_resp_free(&r);
        /* A symlink: followed by default, described with follow=false. */
        o = get_json(200, "%s/st/link?stat=true", faces[f]);
        ck_assert_str_eq(jstr(o, "type"), "file");
        ck_assert_int_eq((int)jnum(o, "size"), 5);
        cJSON_Delete(o);
        o = get_json(200, "%s/st/link?stat=true&follow=false", faces[f]);
        ck_assert_str_eq(jstr(o, "type"), "symlink");
        ck_assert_str_eq(jstr(o, "symlink_target"), "f");
        cJSON_Delete(o);
        /* One that leaves the workspace: described, never followed. */
        o = get_json(200, "%s/st/escape?stat=true&follow=false", faces[f]);
        ck_assert_str_eq(jstr(o, "symlink_target"), "../../outside");
        cJSON_Delete(o);
        cJSON_Delete(get_json(403, "%s/st/escape?stat=true", faces[f]));
        const char *types[][2] = {
            {"dir", "directory"}, {"fifo", "fifo"}, {"sock", "socket"}, {"null", "device"}};
        for (int i = 0; i < (device ? 4 : 3); i++) {
            o = get_json(200, "%s/st/%s?stat=true", faces[f], types[i][0]);
            ck_assert_str_eq(jstr(o, "type"), types[i][1]);
            ck_assert_ptr_null(cJSON_GetObjectItem(o, "etag"));
            cJSON_Delete(o);
        }
        o = get_json(200, "%s/?stat=true", faces[f]);
        ck_assert_str_eq(jstr(o, "type"), "directory");
        cJSON_Delete(o);
        cJSON_Delete(get_json(404, "%s/st/missing?stat=true", faces[f]));
        o = get_json(403, "%s/../etc/passwd?stat=true", faces[f]);
        cJSON_Delete(o);
        cJSON_Delete(get_json(400, "%s/st/f?stat=yes", faces[f]));
        cJSON_Delete(get_json(400, "%s/st/f?stat=true&follow=no", faces[f]));
    }
}
END_TEST

START_TEST(move_renames_atomically_and_refuses_to_replace)
{
    SH("mkdir -p mv && printf one > mv/a && printf two > mv/b && mkdir -p mv/d/sub && "
       "printf in > mv/d/sub/x && mkdir mv/empty");
    char *body = NULL;
    /* Over an existing file: 409 without overwrite, nothing changed. */
    ck_assert_int_eq(raw("POST", "/files/mv/a?move_to=mv/b", NULL, NULL, &body), 409);
    ck_assert_msg(strstr(body, "\"CONFLICT\"") && strstr(body, "overwrite=true"), "%s", body);
    free(body);
    char *both = sh_out("cat mv/a; echo; cat mv/b");
    ck_assert_str_eq(both, "one\ntwo");
    free(both);
    ck_assert_int_eq(raw("POST", "/v1/files/mv/a?move_to=mv/b&overwrite=true", NULL, NULL, &body),
                     200);
    cJSON *o = cJSON_Parse(body);
    ck_assert_str_eq(jstr(o, "from"), "mv/a");
    ck_assert_str_eq(jstr(o, "path"), "mv/b");
    ck_assert_str_eq(jstr(o, "type"), "file");
    cJSON_Delete(o);
    free(body);
    both = sh_out("test ! -e mv/a && cat mv/b");
    ck_assert_str_eq(both, "one");
    free(both);
    /* A directory, into parents made on the way; then over an empty directory only. */
    ck_assert_int_eq(raw("POST", "/files/mv/d?move_to=mv/new/place/d", NULL, NULL, NULL), 200);
    both = sh_out("cat mv/new/place/d/sub/x; test ! -e mv/d && echo gone");
    ck_assert_str_eq(both, "ingone\n");
    free(both);
    ck_assert_int_eq(
        raw("POST", "/files/mv/new/place/d?move_to=mv/empty&overwrite=true", NULL, NULL, NULL),
        200);
    SH("mkdir -p mv/full/x");
    ck_assert_int_eq(
        raw("POST", "/files/mv/empty?move_to=mv/full&overwrite=true", NULL, NULL, &body), 409);
    free(body);
    /* Into itself, out of the workspace, from nothing, the root, bad arguments. */
    ck_assert_int_eq(raw("POST", "/files/mv/empty?move_to=mv/empty/sub/in", NULL, NULL, NULL), 400);
    ck_assert_int_eq(raw("POST", "/files/mv/b?move_to=../outside", NULL, NULL, NULL), 403);
    ck_assert_int_eq(raw("POST", "/files/mv/b?move_to=/../../x", NULL, NULL, NULL), 403);
    ck_assert_int_eq(raw("POST", "/files/mv/nothing?move_to=mv/c", NULL, NULL, NULL), 404);
    ck_assert_int_eq(raw("POST", "/files/?move_to=mv/root", NULL, NULL, NULL), 400);
    ck_assert_int_eq(raw("POST", "/files/mv/b?move_to=mv/c&copy_to=mv/d", NULL, NULL, NULL), 400);
    ck_assert_int_eq(raw("POST", "/files/mv/b", NULL, NULL, NULL), 400);
    ck_assert_int_eq(raw("POST", "/files/mv/b?move_to=mv/c&overwrite=maybe", NULL, NULL, NULL),
                     400);
    both = sh_out("cat mv/b");
    ck_assert_str_eq(both, "one");
    free(both);
}
END_TEST

START_TEST(copy_makes_a_whole_tree_or_nothing)
{
    SH("mkdir -p cp/src/sub/deeper cp/src/emptydir && printf abc > cp/src/f && "
       "chmod 0750 cp/src/sub && printf xyz > cp/src/sub/deeper/g && chmod 0600 "
       "cp/src/sub/deeper/g "
       "&& ln -s ../f cp/src/sub/up && ln -s /etc/passwd cp/src/abs && mkfifo cp/src/fifo && "
       "printf s > cp/src/suid && chmod 4755 cp/src/suid");
    char *body = NULL;
    ck_assert_int_eq(raw("POST", "/files/cp/src?copy_to=cp/dst", NULL, NULL, &body), 200);
    cJSON *o = cJSON_Parse(body);
    ck_assert_str_eq(jstr(o, "type"), "directory");
    ck_assert_int_eq((int)jnum(o, "files"), 3);
    ck_assert_int_eq((int)jnum(o, "directories"), 3);
    ck_assert_int_eq((int)jnum(o, "symlinks"), 2);
    ck_assert_int_eq((int)jnum(o, "bytes"), 7);
    ck_assert_int_eq((int)jnum(o, "skipped"), 1);
    cJSON_Delete(o);
    free(body);
    char *got = sh_out(
        "cd cp/dst && cat f sub/deeper/g sub/up; echo; find sub sub/deeper/g suid "
        "emptydir -maxdepth 0 -printf '%m %p\\n'; readlink abs; test ! -e fifo && echo nofifo; "
        "ls -a ../ | grep -c sbxd-copy");
    ck_assert_str_eq(got, "abcxyzabc\n750 sub\n600 sub/deeper/g\n755 suid\n755 emptydir\n"
                          "/etc/passwd\nnofifo\n0\n");
    free(got);
    /* A file; then over what is there: 409, or replaced whole with overwrite. */
    ck_assert_int_eq(raw("POST", "/v1/files/cp/src/f?copy_to=cp/one", NULL, NULL, NULL), 200);
    ck_assert_int_eq(raw("POST", "/files/cp/src/f?copy_to=cp/one", NULL, NULL, &body), 409);
    free(body);
    SH("printf old > cp/dst/only-in-old");
    ck_assert_int_eq(raw("POST", "/files/cp/src?copy_to=cp/dst", NULL, NULL, NULL), 409);
    ck_assert_int_eq(raw("POST", "/files/cp/src?copy_to=cp/dst&overwrite=true", NULL, NULL, NULL),
                     200);
    got = sh_out("test ! -e cp/dst/only-in-old && cat cp/dst/f; ls -a cp | grep -c sbxd-copy");
    ck_assert_str_eq(got, "abc0\n");
    free(got);
    /* A file over a directory, into itself, out of the workspace. */
    ck_assert_int_eq(raw("POST", "/files/cp/src/f?copy_to=cp/dst&overwrite=true", NULL, NULL, NULL),
                     409);
    ck_assert_int_eq(raw("POST", "/files/cp/src?copy_to=cp/src&overwrite=true", NULL, NULL, NULL),
                     400);
    ck_assert_int_eq(raw("POST", "/files/cp/src/f?copy_to=../x", NULL, NULL, NULL), 403);
    ck_assert_int_eq(raw("POST", "/files/cp/src/abs?copy_to=cp/leak", NULL, NULL, NULL), 403);
    ck_assert_int_eq(raw("POST", "/files/cp/src/fifo?copy_to=cp/fifo2", NULL, NULL, NULL), 400);
}
END_TEST

START_TEST(conditional_put_refuses_a_stale_or_existing_target)
{
    for (int f = 0; f < 2; f++) {
        char path[128], p[160], hdr[512];
        snprintf(path, sizeof(path), "%s/cond/file%d", faces[f], f);
        ck_assert_int_ge(raw("PUT", path, NULL, "v1", NULL), 200);
        cJSON *o = get_json(200, "%s?stat=true", path);
        char etag[128];
        snprintf(etag, sizeof(etag), "%s", jstr(o, "etag"));
        cJSON_Delete(o);
        /* The version one read: replaced; the same tag again: that version is gone, 412. */
        snprintf(hdr, sizeof(hdr), "If-Match: %s\r\n", etag);
        long st = raw("PUT", path, hdr, "v2", NULL);
        ck_assert_int_eq(st, f ? 204 : 200);
        char *body = NULL;
        ck_assert_int_eq(raw("PUT", path, hdr, "v3", &body), 412);
        ck_assert_msg(strstr(body, "FAILED_PRECONDITION"), "%s", body);
        free(body);
        snprintf(hdr, sizeof(hdr), "If-Match: \"x\", W/%s, %s\r\n", etag, etag);
        ck_assert_int_eq(raw("PUT", path, hdr, "v3", NULL), 412); /* weak never matches */
        snprintf(hdr, sizeof(hdr), "If-Match: *\r\n");
        ck_assert_int_eq(raw("PUT", path, hdr, "v4", NULL), f ? 204 : 200);
        ck_assert_int_eq(raw("PUT", "/files/cond/none", hdr, "v", NULL), 412);
        /* If-None-Match: * creates only. */
        snprintf(hdr, sizeof(hdr), "If-None-Match: *\r\n");
        ck_assert_int_eq(raw("PUT", path, hdr, "v5", NULL), 412);
        snprintf(p, sizeof(p), "%s/cond/new%d", faces[f], f);
        ck_assert_int_eq(raw("PUT", p, hdr, "fresh", NULL), f ? 204 : 201);
    }
    char *got = sh_out("cat cond/file0 cond/file1 cond/new0 cond/new1; test ! -e cond/none && "
                       "echo; ls -a cond | grep -c sbxd-upload");
    ck_assert_str_eq(got, "v4v4freshfresh\n0\n");
    free(got);
}
END_TEST

/* The condition is checked again right before the rename: a change made while the body was
 * on its way is not overwritten. */
START_TEST(conditional_put_checks_again_at_the_end)
{
    ck_assert_int_ge(raw("PUT", "/files/race/f", NULL, "orig", NULL), 200);
    cJSON *o = get_json(200, "/files/race/f?stat=true");
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "PUT /files/race/f HTTP/1.1\r\nHost: x\r\nIf-Match: %s\r\n"
                     "Content-Length: 10\r\nConnection: close\r\n\r\nfirst",
                     jstr(o, "etag"));
    cJSON_Delete(o);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_sbxd.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(send(s, head, (size_t)n, MSG_NOSIGNAL), n);
    usleep(200 * 1000);
    SH("printf 'theirs!' > race/f.new && mv race/f.new race/f");
    ck_assert_int_eq(send(s, "-half", 5, MSG_NOSIGNAL), 5);
    char *out = read_until_close(s, NULL);
    close(s);
    ck_assert_msg(strncmp(out, "HTTP/1.1 412", 12) == 0, "%s", out);
    free(out);
    char *got = sh_out("cat race/f; ls -a race | grep -c sbxd-upload");
    ck_assert_str_eq(got, "theirs!0\n");
    free(got);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Watch                                                                                */

struct stream {
    int s;
    char buf[1 << 20];
    size_t have;
};

static void stream_open(struct stream *st, const struct daemon *d, const char *path)
{
    st->s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(st->s, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[512];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    ck_assert_int_eq(send(st->s, req, (size_t)n, MSG_NOSIGNAL), n);
    st->have = 0;
    st->buf[0] = '\0';
}

/* Read until needle is in what came (after `from`), at most ms: where it is, or NULL. */
static const char *stream_wait(struct stream *st, const char *from, const char *needle, int ms)
{
    double end = now_ms() + ms * SLOW;
    for (;;) {
        const char *at = strstr(from ? from : st->buf, needle);
        if (at)
            return at;
        double left = end - now_ms();
        if (left <= 0)
            return NULL;
        struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
        setsockopt(st->s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        size_t off = from ? (size_t)(from - st->buf) : 0;
        ssize_t k = recv(st->s, st->buf + st->have, sizeof(st->buf) - 1 - st->have, 0);
        if (k == 0)
            return strstr(st->buf + off, needle);
        if (k > 0) {
            st->have += (size_t)k;
            st->buf[st->have] = '\0';
        }
        if (from)
            from = st->buf + off;
    }
}

static uint64_t offset_in(const char *at)
{
    const char *o = strstr(at, "\"offset\":");
    ck_assert_ptr_nonnull(o);
    return strtoull(o + 9, NULL, 10);
}

START_TEST(watch_reports_changes_in_new_subdirectories)
{
    SH("mkdir -p w/old && printf 1 > w/old/kept");
    struct stream *rec = malloc(sizeof(*rec)), *flat = malloc(sizeof(*flat));
    stream_open(rec, &g_sbxd, "/files/w?watch=true&recursive=true");
    stream_open(flat, &g_sbxd, "/v1/files/w?watch=true");
    ck_assert_ptr_nonnull(stream_wait(rec, NULL, "{\"type\":\"watching\",\"path\":\"w\"", 5000));
    ck_assert_ptr_nonnull(stream_wait(flat, NULL, "{\"type\":\"watching\"", 5000));
    /* Directories made after the watch began: followed. (What is written in one before sbxd
     * watches it is reported as created, not also as written: wait for them first.) */
    SH("mkdir -p w/n1/n2");
    const char *at =
        stream_wait(rec, NULL, "\"type\":\"create\",\"path\":\"w/n1\",\"is_dir\":true", 5000);
    ck_assert_msg(at, "%s", rec->buf);
    at = stream_wait(rec, at, "\"type\":\"create\",\"path\":\"w/n1/n2\",\"is_dir\":true", 5000);
    ck_assert_msg(at, "%s", rec->buf);
    usleep(100 * 1000);
    SH("printf data > w/n1/n2/f && printf more >> w/old/kept && chmod 600 w/old/kept && "
       "mv w/n1/n2/f w/n1/n2/g");
    const char *seq[] = {"\"type\":\"create\",\"path\":\"w/n1/n2/f\",\"is_dir\":false",
                         "\"type\":\"write\",\"path\":\"w/n1/n2/f\"",
                         "\"type\":\"write\",\"path\":\"w/old/kept\"",
                         "\"type\":\"attrib\",\"path\":\"w/old/kept\"",
                         "\"type\":\"rename\",\"path\":\"w/n1/n2/g\",\"from\":\"w/n1/n2/f\""};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        const char *next = stream_wait(rec, at, seq[i], 5000);
        ck_assert_msg(next, "no %s after %s in:\n%s", seq[i], at, rec->buf);
        at = next;
    }
    /* sbxd's own move, across directories; a delete. */
    ck_assert_int_eq(raw("POST", "/files/w/n1/n2/g?move_to=w/old/g2", NULL, NULL, NULL), 200);
    SH("rm -r w/n1");
    const char *seq2[] = {"\"type\":\"rename\",\"path\":\"w/old/g2\",\"from\":\"w/n1/n2/g\"",
                          "\"type\":\"remove\",\"path\":\"w/n1/n2\",\"is_dir\":true",
                          "\"type\":\"remove\",\"path\":\"w/n1\",\"is_dir\":true"};
    for (size_t i = 0; i < sizeof(seq2) / sizeof(seq2[0]); i++) {
        const char *next = stream_wait(rec, at, seq2[i], 5000);
        ck_assert_msg(next, "no %s in:\n%s", seq2[i], rec->buf);
        at = next;
    }
    /* Not recursive: w's own entries only. */
    ck_assert_ptr_nonnull(stream_wait(flat, NULL, "\"type\":\"create\",\"path\":\"w/n1\"", 5000));
    ck_assert_ptr_nonnull(stream_wait(flat, NULL, "\"type\":\"remove\",\"path\":\"w/n1\"", 5000));
    ck_assert_ptr_null(strstr(flat->buf, "w/n1/n2"));
    ck_assert_ptr_null(strstr(flat->buf, "w/old/kept"));
    /* The watched directory removed: "gone", and the stream ends. */
    SH("rm -r w");
    ck_assert_ptr_nonnull(stream_wait(rec, NULL, "{\"type\":\"gone\",\"path\":\"w\"", 5000));
    ck_assert_ptr_nonnull(stream_wait(flat, NULL, "{\"type\":\"gone\",\"path\":\"w\"", 5000));
    close(rec->s);
    close(flat->s);
    free(rec);
    free(flat);
}
END_TEST

START_TEST(watch_resumes_from_an_offset_and_reports_overflow)
{
    SH("mkdir -p wr");
    struct stream *st = malloc(sizeof(*st));
    stream_open(st, &g_sbxd, "/files/wr?watch=true");
    ck_assert_ptr_nonnull(stream_wait(st, NULL, "\"type\":\"watching\"", 5000));
    SH("printf a > wr/a");
    const char *at = stream_wait(st, NULL, "\"path\":\"wr/a\"", 5000);
    ck_assert_ptr_nonnull(at);
    uint64_t first = offset_in(at);
    close(st->s);
    /* While nobody reads: b and c. Back from the offset after a's events: nothing lost. */
    SH("printf b > wr/b && printf c > wr/c");
    usleep(100 * 1000);
    char path[128];
    snprintf(path, sizeof(path), "/files/wr?watch=true&since=%llu", (unsigned long long)first);
    stream_open(st, &g_sbxd, path);
    at = stream_wait(st, NULL, "\"path\":\"wr/c\"", 5000);
    ck_assert_msg(at, "%s", st->buf);
    const char *b = strstr(st->buf, "\"path\":\"wr/b\"");
    const char *a = strstr(st->buf, "\"path\":\"wr/a\"");
    ck_assert_msg(a && b && a < b && b < at, "%s", st->buf);
    ck_assert_ptr_null(strstr(st->buf, "overflow"));
    close(st->s);
    /* More than the ring holds while away: one overflow event says how many were missed. */
    /* (one rm for all: a command per file is seconds under gVisor's ptrace platform) */
    SH("cd wr && for i in $(seq 1 2500); do : > f$i; done && rm -f f*");
    stream_open(st, &g_sbxd, path);
    at = stream_wait(st, NULL, "{\"type\":\"overflow\"", 5000);
    ck_assert_msg(at, "%.2000s", st->buf);
    ck_assert_msg(strstr(at, "\"missed\":") && !strstr(at, "\"missed\":null"), "%.300s", at);
    ck_assert_ptr_nonnull(stream_wait(st, at, "\"type\":\"remove\"", 5000));
    close(st->s);
    /* An offset from before this hub began: the overflow cannot say how many. */
    stream_open(st, &g_sbxd, "/files/wr?watch=true&since=1");
    at = stream_wait(st, NULL, "{\"type\":\"overflow\"", 5000);
    ck_assert_msg(at && strstr(at, "\"missed\":null"), "%.500s", st->buf);
    close(st->s);
    free(st);
}
END_TEST

START_TEST(watch_refusals_and_limits)
{
    SH("mkdir -p wl && printf x > wl/file");
    struct http_resp r;
    const struct {
        const char *path;
        long status;
    } refused[] = {{"/files/wl/nothing?watch=true", 404},
                   {"/files/wl/file?watch=true", 400},
                   {"/files/../etc?watch=true", 403},
                   {"/files/wl?watch=true&since=x", 400},
                   {"/files/wl?watch=true&recursive=1", 400}};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        http_reqf(&g_sbxd, &r, "GET", NULL, "%s", refused[i].path);
        ck_assert_msg(r.status == refused[i].status, "%s: %ld %s", refused[i].path, r.status,
                      r.body);
        http_resp_free(&r);
    }
    struct daemon d;
    const char *args[] = {"--max-watchers", "8", NULL};
    daemon_start(&d, args, NULL);
    enum { NWATCH = 8 };
    struct stream *st = malloc(NWATCH * sizeof(*st));
    for (int i = 0; i < NWATCH; i++) {
        stream_open(&st[i], &d, i % 2 ? "/files/?watch=true&recursive=true" : "/files/?watch=true");
        ck_assert_ptr_nonnull(stream_wait(&st[i], NULL, "\"type\":\"watching\"", 5000));
    }
    http_reqf(&d, &r, "GET", NULL, "/files/?watch=true");
    ck_assert_int_eq(r.status, 429);
    ck_assert_ptr_nonnull(strstr(r.body, "--max-watchers"));
    http_resp_free(&r);
    /* A stop ends each stream at once, and each gets its "gone" before the server closes
     * (it once closed a stream now and then before the event was written: 1 run in 30). */
    double t0 = now_ms();
    ck_assert(daemon_stop_clean(&d, 10000));
    ck_assert_msg(now_ms() - t0 < 3000 * SLOW, "stop took %.0f ms", now_ms() - t0);
    int without = 0;
    for (int i = 0; i < NWATCH; i++) {
        without += stream_wait(&st[i], NULL, "\"type\":\"gone\"", 2000) == NULL;
        close(st[i].s);
    }
    free(st);
    ck_assert_msg(without == 0, "%d of %d watch streams ended without \"gone\"", without, NWATCH);
}
END_TEST

Suite *entries_suite(void)
{
    Suite *s = suite_create("entries");
    TCase *tc = tcase_create("entries");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, stat_describes_every_type);
    tcase_add_test(tc, move_renames_atomically_and_refuses_to_replace);
    tcase_add_test(tc, copy_makes_a_whole_tree_or_nothing);
    tcase_add_test(tc, conditional_put_refuses_a_stale_or_existing_target);
    tcase_add_test(tc, conditional_put_checks_again_at_the_end);
    tcase_add_test(tc, watch_reports_changes_in_new_subdirectories);
    tcase_add_test(tc, watch_resumes_from_an_offset_and_reports_overflow);
    tcase_add_test(tc, watch_refusals_and_limits);
    suite_add_tcase(s, tc);
    return s;
}
