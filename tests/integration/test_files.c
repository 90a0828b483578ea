/* /files: every operation over real HTTP, confinement, atomic writes, limits, concurrency. */
#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

static struct http_resp req(const struct daemon *d, const char *method, const char *path,
                            const char *ctype, const void *body, size_t len)
{
    struct http_resp r;
    http_request(d, method, path, ctype, body, len, 60000, &r);
    return r;
}

/* A request with one extra header (e.g. Range). */
static struct http_resp req_h(const struct daemon *d, const char *method, const char *path,
                              const char *header)
{
    struct http_resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    char url[PATH_MAX + 64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", d->port, path);
    struct curl_slist *h = curl_slist_append(NULL, header);
    FILE *bf = open_memstream(&r.body, &r.len);
    char *hb = NULL;
    size_t hl = 0;
    FILE *hf = open_memstream(&hb, &hl);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, bf);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, hf);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    fclose(bf);
    fclose(hf);
    r.headers = hb;
    r.json = cJSON_ParseWithLength(r.body, r.len);
    return r;
}

static cJSON *run(const struct daemon *d, const char *cmd)
{
    char body[1024];
    snprintf(body, sizeof(body), "{\"command\":\"%s\"}", cmd);
    return execute(d, body);
}

/* Temporary upload files left in the workspace (by name), counted from inside. */
static int temp_files(const struct daemon *d)
{
    cJSON *r = run(d, "find . -name '.sbxd-upload-*' | wc -l");
    int n = atoi(jstr(r, "stdout"));
    cJSON_Delete(r);
    return n;
}

START_TEST(put_get_head_round_trip_binary)
{
    char data[1024];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 7); /* every byte value, NULs included */
    struct http_resp r = req(&g_sbxd, "PUT", "/files/rt/bin/data.bin", "application/octet-stream",
                             data, sizeof(data));
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(jstr(r.json, "path"), "rt/bin/data.bin");
    ck_assert_str_eq(jstr(r.json, "type"), "file");
    ck_assert_int_eq((int)jnum(r.json, "size"), 1024);
    ck_assert_str_eq(jstr(r.json, "mode"), "0644");
    http_resp_free(&r);
    /* Again: replaced, 200. */
    r = req(&g_sbxd, "PUT", "/files/rt/bin/data.bin", "application/octet-stream", data,
            sizeof(data));
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/rt/bin/data.bin", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, sizeof(data));
    ck_assert(memcmp(r.body, data, sizeof(data)) == 0);
    char v[128], etag[128], lm[128];
    ck_assert_str_eq(http_resp_header(&r, "Content-Type", v, sizeof(v)),
                     "application/octet-stream");
    ck_assert_str_eq(http_resp_header(&r, "Content-Length", v, sizeof(v)), "1024");
    ck_assert_str_eq(http_resp_header(&r, "Accept-Ranges", v, sizeof(v)), "bytes");
    http_resp_header(&r, "ETag", etag, sizeof(etag));
    http_resp_header(&r, "Last-Modified", lm, sizeof(lm));
    ck_assert(etag[0] == '"' && strlen(lm) == 29 && strcmp(lm + 25, " GMT") == 0);
    http_resp_free(&r);
    r = req(&g_sbxd, "HEAD", "/files/rt/bin/data.bin", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
    ck_assert_str_eq(http_resp_header(&r, "Content-Length", v, sizeof(v)), "1024");
    ck_assert_str_eq(http_resp_header(&r, "ETag", v, sizeof(v)), etag);
    http_resp_free(&r);
    r = req(&g_sbxd, "HEAD", "/files/rt/nope", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    http_resp_free(&r);
    /* An empty file. */
    r = req(&g_sbxd, "PUT", "/files/rt/empty", "application/octet-stream", "", 0);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/rt/empty", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
    http_resp_free(&r);
    /* Everything made belongs to the command user, none of it to root; no temporary left. */
    cJSON *x = run(&g_sbxd, "find rt -printf '%U:%G\\\\n' | sort -u");
    if (geteuid() == 0)
        ck_assert_str_eq(jstr(x, "stdout"), "1000:1000\n");
    cJSON_Delete(x);
    ck_assert_int_eq(temp_files(&g_sbxd), 0);
}
END_TEST

START_TEST(ranges)
{
    struct http_resp r =
        req(&g_sbxd, "PUT", "/files/range.txt", "application/octet-stream", "0123456789", 10);
    http_resp_free(&r);
    char v[64];
    r = req_h(&g_sbxd, "GET", "/files/range.txt", "Range: bytes=2-5");
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.len, 4);
    ck_assert(memcmp(r.body, "2345", 4) == 0);
    ck_assert_str_eq(http_resp_header(&r, "Content-Range", v, sizeof(v)), "bytes 2-5/10");
    http_resp_free(&r);
    r = req_h(&g_sbxd, "GET", "/files/range.txt", "Range: bytes=-3");
    ck_assert_int_eq(r.status, 206);
    ck_assert(r.len == 3 && memcmp(r.body, "789", 3) == 0);
    http_resp_free(&r);
    r = req_h(&g_sbxd, "GET", "/files/range.txt", "Range: bytes=7-100");
    ck_assert_int_eq(r.status, 206);
    ck_assert(r.len == 3 && memcmp(r.body, "789", 3) == 0);
    ck_assert_str_eq(http_resp_header(&r, "Content-Range", v, sizeof(v)), "bytes 7-9/10");
    http_resp_free(&r);
    r = req_h(&g_sbxd, "GET", "/files/range.txt", "Range: bytes=10-");
    ck_assert_int_eq(r.status, 416);
    ck_assert_str_eq(http_resp_header(&r, "Content-Range", v, sizeof(v)), "bytes */10");
    ck_assert_str_eq(jstr(r.json, "code"), "RANGE_NOT_SATISFIABLE");
    http_resp_free(&r);
    r = req_h(&g_sbxd, "GET", "/files/range.txt", "Range: lines=1-2");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
}
END_TEST

START_TEST(directory_listing)
{
    cJSON_Delete(run(&g_sbxd, "mkdir -p ls/sub && printf abc > ls/b.txt && printf x > ls/a.txt "
                              "&& chmod 600 ls/a.txt && ln -s b.txt ls/c-link && "
                              "ln -s sub ls/d-link && ln -s /etc ls/e-abs && "
                              "ln -s ../../x ls/f-out && ln -s nowhere ls/g-broken"));
    struct http_resp r = req(&g_sbxd, "GET", "/files/ls", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "path"), "ls");
    cJSON *e = cJSON_GetObjectItem(r.json, "entries");
    ck_assert_int_eq(cJSON_GetArraySize(e), 8);
    /* A link inside the workspace is what it leads to, marked "symlink": true; one that
     * cannot be followed (absolute, out, dangling) is listed as itself. */
    const char *names[] = {"a.txt", "b.txt", "c-link",   "d-link",
                           "e-abs", "f-out", "g-broken", "sub"};
    const char *types[] = {"file",    "file",    "file",    "directory",
                           "symlink", "symlink", "symlink", "directory"};
    for (int i = 0; i < 8; i++) {
        cJSON *it = cJSON_GetArrayItem(e, i);
        ck_assert_str_eq(jstr(it, "name"), names[i]);
        ck_assert_str_eq(jstr(it, "type"), types[i]);
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItem(it, "symlink")), i >= 2 && i <= 6);
        const char *at = jstr(it, "modified_at");
        ck_assert_msg(strlen(at) == 24 && at[10] == 'T' && at[23] == 'Z', "modified_at %s", at);
    }
    ck_assert_str_eq(jstr(cJSON_GetArrayItem(e, 0), "mode"), "0600");
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(e, 1), "size"), 3);
    ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(e, 2), "size"), 3);
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/ls?offset=1&limit=2", NULL, NULL, 0);
    e = cJSON_GetObjectItem(r.json, "entries");
    ck_assert_int_eq(cJSON_GetArraySize(e), 2);
    ck_assert_str_eq(jstr(cJSON_GetArrayItem(e, 0), "name"), "b.txt");
    ck_assert_int_eq((int)jnum(r.json, "total"), 8);
    http_resp_free(&r);
    /* /v1 leaves out the links it cannot follow; a page still covers `limit` names, and
     * "total" counts every name. */
    r = req(&g_sbxd, "GET", "/v1/files/ls?offset=3&limit=3", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "path"), "/ls");
    e = cJSON_GetObjectItem(r.json, "entries");
    ck_assert_int_eq(cJSON_GetArraySize(e), 1);
    ck_assert_str_eq(jstr(cJSON_GetArrayItem(e, 0), "name"), "d-link");
    ck_assert_str_eq(jstr(cJSON_GetArrayItem(e, 0), "type"), "directory");
    ck_assert_int_eq((int)jnum(r.json, "total"), 8);
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/ls?limit=x", NULL, NULL, 0);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    /* The root, with or without the slash. */
    r = req(&g_sbxd, "GET", "/files/", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "path"), "");
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
}
END_TEST

START_TEST(multipart_and_directories)
{
    const char *ct = "multipart/form-data; boundary=XyZ";
    const char body[] = "--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nignored\r\n"
                        "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n"
                        "Content-Type: application/octet-stream\r\n\r\nline1\r\n--Xy\r\nline2"
                        "\r\n--XyZ--\r\n";
    struct http_resp r = req(&g_sbxd, "PUT", "/files/mp/up.txt", ct, body, sizeof(body) - 1);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/mp/up.txt", NULL, NULL, 0);
    ck_assert_uint_eq(r.len, 18);
    ck_assert(memcmp(r.body, "line1\r\n--Xy\r\nline2", 18) == 0);
    http_resp_free(&r);
    /* No part named "file": refused, nothing written, no temporary file. */
    const char nofile[] =
        "--XyZ\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nv\r\n--XyZ--\r\n";
    r = req(&g_sbxd, "PUT", "/files/mp/none.txt", ct, nofile, sizeof(nofile) - 1);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/mp/none.txt", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    http_resp_free(&r);
    /* Cut short: no closing boundary. */
    const char cut[] = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nhalf";
    r = req(&g_sbxd, "PUT", "/files/mp/up.txt", ct, cut, sizeof(cut) - 1);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    r = req(&g_sbxd, "GET", "/files/mp/up.txt", NULL, NULL, 0);
    ck_assert_uint_eq(r.len, 18); /* the old content */
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/mp/x.txt", "multipart/form-data", "x", 1);
    assert_error(&r, 400, "INVALID_ARGUMENT"); /* no boundary */
    http_resp_free(&r);
    ck_assert_int_eq(temp_files(&g_sbxd), 0);

    /* mkdir -p, and ?mode. */
    r = req(&g_sbxd, "PUT", "/files/dirs/a/b?type=directory", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(jstr(r.json, "type"), "directory");
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/dirs/a/b?type=directory", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/dirs/x.sh?mode=0750", "application/octet-stream", "#!", 2);
    ck_assert_str_eq(jstr(r.json, "mode"), "0750");
    http_resp_free(&r);
    const char *bad[] = {"/files/dirs/y?mode=644", "/files/dirs/y?mode=0999",
                         "/files/dirs/y?mode=01777", "/files/dirs/y?type=socket"};
    for (int i = 0; i < 4; i++) {
        r = req(&g_sbxd, "PUT", bad[i], "application/octet-stream", "z", 1);
        assert_error(&r, 400, "INVALID_ARGUMENT");
        http_resp_free(&r);
    }
    /* A file where a directory is, and the other way round. */
    r = req(&g_sbxd, "PUT", "/files/dirs/a", "application/octet-stream", "z", 1);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/dirs/x.sh/sub?type=directory", NULL, NULL, 0);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/dirs/new/", "application/octet-stream", "z", 1);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
}
END_TEST

START_TEST(delete)
{
    cJSON_Delete(run(&g_sbxd, "mkdir -p del/tree/deep && touch del/f del/tree/deep/g && "
                              "mkdir del/empty && ln -s ../../.. del/up"));
    struct http_resp r = req(&g_sbxd, "DELETE", "/files/del/f", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 204);
    http_resp_free(&r);
    r = req(&g_sbxd, "DELETE", "/files/del/f", NULL, NULL, 0);
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
    r = req(&g_sbxd, "DELETE", "/files/del/empty", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 204);
    http_resp_free(&r);
    r = req(&g_sbxd, "DELETE", "/files/del/tree", NULL, NULL, 0);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    r = req(&g_sbxd, "DELETE", "/files/del/tree?recursive=true", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 204);
    http_resp_free(&r);
    /* A symlink is deleted itself, never what it points to. */
    r = req(&g_sbxd, "DELETE", "/files/del/up", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 204);
    http_resp_free(&r);
    /* The root is emptied only on a recursive delete (as the reference sandboxd's). */
    r = req(&g_sbxd, "DELETE", "/files/", NULL, NULL, 0);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    r = req(&g_sbxd, "DELETE", "/files/del/x?recursive=yes", NULL, NULL, 0);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    r = req(&g_sbxd, "PATCH", "/files/del", "application/json", "{}", 2);
    ck_assert_int_eq(r.status, 405);
    http_resp_free(&r);
    /* POST is for moves and copies: without one of them, 400. */
    r = req(&g_sbxd, "POST", "/files/del", "application/json", "{}", 2);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    cJSON *x = run(&g_sbxd, "ls -A del");
    ck_assert_str_eq(jstr(x, "stdout"), "");
    cJSON_Delete(x);
}
END_TEST

START_TEST(confinement)
{
    cJSON_Delete(run(&g_sbxd,
                     "mkdir -p cf/in && echo ok > cf/in/f && ln -s /etc/passwd cf/abs && "
                     "ln -s ../../.. cf/up && ln -s up/etc/passwd cf/chain && "
                     "ln -s loop2 cf/loop1 && ln -s loop1 cf/loop2 && ln -s in/f cf/good"));
    static const struct {
        const char *path;
        long status;
    } cases[] = {
        {"/files/../etc/passwd", 403},
        {"/files/..%2F..%2Fetc%2Fpasswd", 403},
        {"/files/%2e%2e/%2e%2e/etc/passwd", 403},
        {"/files/cf/in/..%2F..%2F..%2Fx", 403},
        {"/files/cf/abs", 403},
        {"/files/cf/chain", 403},
        {"/files/cf/up/etc", 403},
        {"/files/cf/loop1", 400},
        {"/files/cf/a%00b", 400},
        {"/files/cf/%zz", 400},
        {"/files/cf/good", 200},
        {"/files/cf%2Fin%2Ff", 200},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct http_resp r = req(&g_sbxd, "GET", cases[i].path, NULL, NULL, 0);
        ck_assert_msg(r.status == cases[i].status, "%s: %ld, want %ld (%s)", cases[i].path,
                      r.status, cases[i].status, r.body);
        if (r.status != 200)
            ck_assert_msg(r.json && jstr(r.json, "message")[0], "%s: no error message",
                          cases[i].path);
        http_resp_free(&r);
    }
    /* Long names and paths. */
    char path[PATH_MAX + 64];
    int n = snprintf(path, sizeof(path), "/files/");
    memset(path + n, 'n', 300);
    path[n + 300] = '\0';
    struct http_resp r = req(&g_sbxd, "GET", path, NULL, NULL, 0);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    n = snprintf(path, sizeof(path), "/files/");
    for (int i = 0; n < PATH_MAX + 20; i++)
        n += snprintf(path + n, sizeof(path) - (size_t)n, "d/");
    r = req(&g_sbxd, "GET", path, NULL, NULL, 0);
    ck_assert_msg(r.status == 400 || r.status == 414, "a path over PATH_MAX: %ld", r.status);
    http_resp_free(&r);
    /* Writes through links that leave, and escapes, create nothing outside. */
    r = req(&g_sbxd, "PUT", "/files/cf/up/tmp/sbxd-escape", "application/octet-stream", "x", 1);
    ck_assert_int_eq(r.status, 403);
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/..%2Fsbxd-escape", "application/octet-stream", "x", 1);
    ck_assert_int_eq(r.status, 403);
    http_resp_free(&r);
    ck_assert_int_ne(access("/tmp/sbxd-escape", F_OK), 0);
    /* A directory swapped for a symlink between two requests. */
    r = req(&g_sbxd, "GET", "/files/cf/in/f", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    cJSON_Delete(run(&g_sbxd, "mv cf/in cf/in.old && ln -s /etc cf/in"));
    r = req(&g_sbxd, "GET", "/files/cf/in/passwd", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 403);
    http_resp_free(&r);
}
END_TEST

START_TEST(hard_link_to_an_unreadable_file_stays_unreadable)
{
    if (geteuid() != 0)
        return; /* files are served with the user's rights only when sbxd can switch */
    if (under_gvisor()) {
        gvisor_skip("hardlink", "the test plants the link from the host, outside the sandbox's "
                                "view of ownership");
        return;
    }
    char secret[] = "/tmp/sbxd-secret-XXXXXX";
    int fd = mkstemp(secret);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "root only", 9), 9);
    fchmod(fd, 0600);
    close(fd);
    char planted[PATH_MAX];
    snprintf(planted, sizeof(planted), "%s/leak", g_sbxd.ws);
    ck_assert_int_eq(link(secret, planted) == 0 || errno == EXDEV, 1);
    if (access(planted, F_OK) == 0) {
        struct http_resp r = req(&g_sbxd, "GET", "/files/leak", NULL, NULL, 0);
        ck_assert_int_eq(r.status, 403);
        ck_assert_ptr_null(strstr(r.body, "root only"));
        http_resp_free(&r);
        unlink(planted);
    }
    unlink(secret);
}
END_TEST

/* A raw connection: send what is given, then close. */
static int raw_send(const struct daemon *d, const char *data, size_t n)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_gt(send(s, data, n, MSG_NOSIGNAL), 0);
    return s;
}

START_TEST(upload_limits_and_aborts_keep_the_old_content)
{
    struct daemon d;
    const char *args[] = {"--max-upload-bytes", "1000", NULL};
    daemon_start(&d, args, NULL);
    struct http_resp r = req(&d, "PUT", "/files/keep", "application/octet-stream", "old", 3);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    char big[2000];
    memset(big, 'b', sizeof(big));
    r = req(&d, "PUT", "/files/keep", "application/octet-stream", big, sizeof(big));
    assert_error(&r, 413, "PAYLOAD_TOO_LARGE");
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "message"), "--max-upload-bytes"));
    http_resp_free(&r);
    /* Chunked: no size up front, refused as it grows. */
    char head[] = "PUT /files/keep HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  "Connection: close\r\n\r\n";
    int s = raw_send(&d, head, strlen(head));
    char chunk[600];
    int hl = sprintf(chunk, "200\r\n");
    memset(chunk + hl, 'c', 512);
    memcpy(chunk + hl + 512, "\r\n", 2);
    for (int i = 0; i < 4; i++)
        send(s, chunk, (size_t)hl + 514, MSG_NOSIGNAL);
    send(s, "0\r\n\r\n", 5, MSG_NOSIGNAL);
    char resp[2048] = "";
    size_t got = 0;
    ssize_t k;
    while (got < sizeof(resp) - 1 && (k = recv(s, resp + got, sizeof(resp) - 1 - got, 0)) > 0)
        got += (size_t)k;
    close(s);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 413", 12) == 0, "got %.100s", resp);
    /* Aborted mid-body: the client goes away after 100 of 900 bytes. */
    char abort_req[256];
    int al = snprintf(abort_req, sizeof(abort_req),
                      "PUT /files/keep HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n");
    memset(abort_req + al, 'a', 100);
    s = raw_send(&d, abort_req, (size_t)al + 100);
    usleep(100000);
    close(s);
    for (int i = 0; i < 50 && temp_files(&d) > 0; i++)
        usleep(20000);
    ck_assert_int_eq(temp_files(&d), 0);
    r = req(&d, "GET", "/files/keep", NULL, NULL, 0);
    ck_assert(r.len == 3 && memcmp(r.body, "old", 3) == 0);
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(disk_full_is_507_and_the_old_file_stays)
{
    if (geteuid() != 0)
        return; /* mounting the small filesystem needs root */
    char dir[] = "/tmp/sbxd-it-full-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_msg(mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0755") == 0, "mount: %s",
                  strerror(errno));
    struct daemon d;
    const char *args[] = {"--workspace", dir, NULL};
    daemon_start(&d, args, NULL);
    struct http_resp r = req(&d, "PUT", "/files/keep", "application/octet-stream", "old", 3);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    size_t n = 2 * 1024 * 1024;
    char *big = calloc(1, n);
    r = req(&d, "PUT", "/files/keep", "application/octet-stream", big, n);
    assert_error(&r, 507, "INSUFFICIENT_STORAGE");
    http_resp_free(&r);
    free(big);
    r = req(&d, "GET", "/files/keep", NULL, NULL, 0);
    ck_assert(r.len == 3 && memcmp(r.body, "old", 3) == 0);
    http_resp_free(&r);
    ck_assert_int_eq(temp_files(&d), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
    ck_assert_int_eq(umount2(dir, MNT_DETACH), 0);
    rmdir(dir);
}
END_TEST

/* Writers replace one path with whole contents while readers read it: every read is one
 * whole content, never a mix, never a failure. */
#define RACE_SIZE (256 * 1024)

struct racer {
    pthread_t th;
    char fill;
    int bad;
};

static void *race_writer(void *arg)
{
    struct racer *w = arg;
    char *buf = malloc(RACE_SIZE);
    memset(buf, w->fill, RACE_SIZE);
    for (int i = 0; i < 15; i++) {
        struct http_resp r =
            req(&g_sbxd, "PUT", "/files/race.bin", "application/octet-stream", buf, RACE_SIZE);
        w->bad += r.status != 200 && r.status != 201;
        http_resp_free(&r);
    }
    free(buf);
    return NULL;
}

static void *race_reader(void *arg)
{
    struct racer *w = arg;
    for (int i = 0; i < 30; i++) {
        struct http_resp r = req(&g_sbxd, "GET", "/files/race.bin", NULL, NULL, 0);
        bool whole = r.status == 200 && r.len == RACE_SIZE;
        for (size_t k = 1; whole && k < r.len; k++)
            whole = r.body[k] == r.body[0];
        if (!whole && !w->bad)
            fprintf(stderr, "race: status %ld, %zu bytes: %.100s\n", r.status, r.len,
                    r.body ? r.body : "");
        w->bad += !whole;
        http_resp_free(&r);
    }
    return NULL;
}

START_TEST(concurrent_writers_and_readers)
{
    char *first = malloc(RACE_SIZE);
    memset(first, '0', RACE_SIZE);
    struct http_resp r =
        req(&g_sbxd, "PUT", "/files/race.bin", "application/octet-stream", first, RACE_SIZE);
    http_resp_free(&r);
    free(first);
    struct racer w[6] = {{.fill = 'a'}, {.fill = 'b'}, {.fill = 'c'}, {0}, {0}, {0}};
    for (int i = 0; i < 6; i++)
        pthread_create(&w[i].th, NULL, i < 3 ? race_writer : race_reader, &w[i]);
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(w[i].th, NULL);
        bad += w[i].bad;
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(temp_files(&g_sbxd), 0);
}
END_TEST

START_TEST(download_completes_when_the_file_is_deleted_or_replaced)
{
    size_t n = 8 * 1024 * 1024;
    char *buf = malloc(n);
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(i % 251);
    struct http_resp r =
        req(&g_sbxd, "PUT", "/files/going.bin", "application/octet-stream", buf, n);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    const char *get = "GET /files/going.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int s = raw_send(&g_sbxd, get, strlen(get));
    /* Read a little, then take the file away and replace it. */
    char *got = malloc(n + 4096);
    size_t len = 0;
    ssize_t k = recv(s, got, 4096, 0);
    ck_assert_int_gt(k, 0);
    len = (size_t)k;
    r = req(&g_sbxd, "DELETE", "/files/going.bin", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 204);
    http_resp_free(&r);
    r = req(&g_sbxd, "PUT", "/files/going.bin", "application/octet-stream", "new", 3);
    http_resp_free(&r);
    while (len < n + 4096 && (k = recv(s, got + len, n + 4096 - len, 0)) > 0)
        len += (size_t)k;
    close(s);
    char *body = strstr(got, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    body += 4;
    ck_assert_uint_eq(len - (size_t)(body - got), n);
    ck_assert(memcmp(body, buf, n) == 0);
    free(got);
    free(buf);
}
END_TEST

/* A large round trip, streamed both ways from a generator (never whole in memory here
 * either): the bytes come back equal, and sbxd's memory stays flat. */
struct gen {
    uint64_t state, left, pos;
    bool mismatch;
    uint64_t seen;
    FILE *digest; /* a sha256sum process the bytes also go to */
};

static unsigned char gen_byte(uint64_t i)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    return (unsigned char)(x >> 17);
}

static size_t gen_read(char *out, size_t size, size_t nmemb, void *ud)
{
    struct gen *g = ud;
    size_t n = size * nmemb;
    if (n > g->left)
        n = g->left;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)gen_byte(g->pos + i);
    if (g->digest)
        fwrite(out, 1, n, g->digest);
    g->pos += n;
    g->left -= n;
    return n;
}

static size_t gen_check(char *in, size_t size, size_t nmemb, void *ud)
{
    struct gen *g = ud;
    size_t n = size * nmemb;
    for (size_t i = 0; i < n && !g->mismatch; i++)
        g->mismatch = (unsigned char)in[i] != gen_byte(g->seen + i);
    if (g->digest)
        fwrite(in, 1, n, g->digest);
    g->seen += n;
    return n;
}

START_TEST(large_round_trip_with_flat_memory)
{
    /* 1 GiB; under gVisor's ptrace platform every transfer is far slower: 128 MiB there. */
    uint64_t size = under_gvisor() ? 128ULL << 20 : 1ULL << 30;
    if (under_gvisor())
        gvisor_skip("1GiB", "the round trip is 128 MiB under gVisor's ptrace platform");
    long base = daemon_rss_kb(&g_sbxd);
    rss_sampling_start(&g_sbxd);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/files/large.bin", g_sbxd.port);
    CURL *c = curl_easy_init();
    char sent_sum[128] = "", got_sum[128] = "";
    char sent_file[] = "/tmp/sbxd-it-sum-XXXXXX", got_file[] = "/tmp/sbxd-it-sum-XXXXXX";
    close(mkstemp(sent_file));
    close(mkstemp(got_file));
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "sha256sum > %s", sent_file);
    struct gen up = {.left = size, .digest = popen(cmd, "w")};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, gen_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &up);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gen_check); /* the small JSON answer */
    struct gen sink = {0};
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    long status;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    ck_assert_int_eq(status, 201);
    curl_easy_cleanup(c);
    pclose(up.digest);
    c = curl_easy_init();
    snprintf(cmd, sizeof(cmd), "sha256sum > %s", got_file);
    struct gen down = {.digest = popen(cmd, "w")};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gen_check);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &down);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    pclose(down.digest);
    long base2;
    long peak = rss_sampling_stop(&base2);
    ck_assert_int_eq(status, 200);
    ck_assert_uint_eq(down.seen, size);
    ck_assert(!down.mismatch);
    ck_assert_msg(peak - base < 8 * 1024, "RSS grew by %ld KiB", peak - base);
    /* SHA-256 of what was sent, of what came back, and of the file as commands see it. */
    FILE *f = fopen(sent_file, "r");
    ck_assert(f && fscanf(f, "%64s", sent_sum) == 1);
    fclose(f);
    f = fopen(got_file, "r");
    ck_assert(f && fscanf(f, "%64s", got_sum) == 1);
    fclose(f);
    unlink(sent_file);
    unlink(got_file);
    ck_assert_uint_eq(strlen(sent_sum), 64);
    ck_assert_str_eq(got_sum, sent_sum);
    cJSON *x = run(&g_sbxd, "sha256sum large.bin | cut -c1-64");
    char in_ws[160];
    snprintf(in_ws, sizeof(in_ws), "%s\n", sent_sum);
    ck_assert_str_eq(jstr(x, "stdout"), in_ws);
    cJSON_Delete(x);
    struct http_resp r = req(&g_sbxd, "DELETE", "/files/large.bin", NULL, NULL, 0);
    http_resp_free(&r);
}
END_TEST

/* The byte at i of upload tag: distinct per upload and per position. */
static char body_byte(int tag, size_t i)
{
    return (char)((i * 131 + (size_t)tag * 17 + (i >> 12)) & 0xff);
}

static char *body_make(int tag, size_t n)
{
    char *b = malloc(n);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++)
        b[i] = body_byte(tag, i);
    return b;
}

/* The file at path holds upload tag's n bytes exactly. */
static void body_check(const struct daemon *d, const char *path, int tag, size_t n)
{
    struct http_resp r = req(d, "GET", path, NULL, NULL, 0);
    ck_assert_msg(r.status == 200, "GET %s: %ld", path, r.status);
    ck_assert_msg(r.len == n, "%s holds %zu bytes, not %zu", path, r.len, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r.body[i] == body_byte(tag, i), "%s differs at byte %zu", path, i);
    http_resp_free(&r);
}

/* One answer off a raw connection that may carry several: its status (its body skipped). */
struct answers {
    int s;
    char buf[8192];
    size_t len;
};

static long answer_next(struct answers *a)
{
    char *end;
    while (!(end = memmem(a->buf, a->len, "\r\n\r\n", 4))) {
        ck_assert_msg(a->len < sizeof(a->buf), "an answer's head over %zu bytes", a->len);
        ssize_t k = recv(a->s, a->buf + a->len, sizeof(a->buf) - a->len, 0);
        ck_assert_msg(k > 0, "the connection ended before an answer (%zu bytes)", a->len);
        a->len += (size_t)k;
    }
    long status = 0;
    ck_assert(sscanf(a->buf, "HTTP/1.1 %ld", &status) == 1);
    size_t head = (size_t)(end + 4 - a->buf), body = 0;
    *end = '\0';
    const char *cl = strcasestr(a->buf, "\r\nContent-Length:");
    if (cl)
        body = strtoul(cl + 17, NULL, 10);
    while (a->len < head + body) {
        ssize_t k = recv(a->s, a->buf + a->len, sizeof(a->buf) - a->len, 0);
        ck_assert_int_gt(k, 0);
        a->len += (size_t)k;
    }
    memmove(a->buf, a->buf + head + body, a->len - head - body);
    a->len -= head + body;
    return status;
}

static size_t put_head(char *out, size_t cap, const char *name, size_t n)
{
    int k = snprintf(out, cap, "PUT /files/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                     name, n);
    ck_assert(k > 0 && (size_t)k < cap);
    return (size_t)k;
}

/* Large bodies are read in large reads, into a few buffers outside the connections' memory
 * (tools/mhd-patches/0005): those reads end where the body does, whatever follows it on the
 * connection; more uploads at once than there are buffers all arrive whole; a buffer goes
 * back when its upload is cut off, and its memory with it. */
START_TEST(large_bodies_arrive_whole_and_their_buffers_go_back)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    long base = daemon_rss_kb(&d);
    /* Two uploads and a GET, pipelined: each answered, each file exact. */
    const size_t na = (2u << 20) + 3, nb = (700u << 10) + 1;
    char *a = body_make(1, na), *b = body_make(2, nb);
    size_t cap = na + nb + 1024, len = 0;
    char *all = malloc(cap);
    len += put_head(all + len, cap - len, "pipe-a", na);
    memcpy(all + len, a, na);
    len += na;
    len += put_head(all + len, cap - len, "pipe-b", nb);
    memcpy(all + len, b, nb);
    len += nb;
    len += (size_t)snprintf(all + len, cap - len, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    struct answers *ans = calloc(1, sizeof(*ans));
    ans->s = raw_send(&d, all, 1);
    ck_assert_int_eq(send_all(ans->s, all + 1, len - 1), 0);
    ck_assert_int_eq(answer_next(ans), 201);
    ck_assert_int_eq(answer_next(ans), 201);
    ck_assert_int_eq(answer_next(ans), 200);
    close(ans->s);
    body_check(&d, "/files/pipe-a", 1, na);
    body_check(&d, "/files/pipe-b", 2, nb);
    free(all);
    free(a);
    free(b);

    /* Six at once, each past half its body before any ends. */
    enum { N = 6 };
    const size_t n = (1u << 20) + 7, first = 600u << 10;
    int s[N];
    char head[256], name[32];
    for (int i = 0; i < N; i++) {
        char *body = body_make(10 + i, n);
        snprintf(name, sizeof(name), "six-%d", i);
        size_t hl = put_head(head, sizeof(head), name, n);
        s[i] = raw_send(&d, head, hl);
        ck_assert_int_eq(send_all(s[i], body, first), 0);
        free(body);
    }
    usleep(200000);
    for (int i = 0; i < N; i++) {
        char *body = body_make(10 + i, n);
        ck_assert_int_eq(send_all(s[i], body + first, n - first), 0);
        free(body);
    }
    for (int i = 0; i < N; i++) {
        ans->s = s[i];
        ans->len = 0;
        ck_assert_int_eq(answer_next(ans), 201);
        close(s[i]);
        snprintf(name, sizeof(name), "/files/six-%d", i);
        body_check(&d, name, 10 + i, n);
    }

    /* Four cut off mid-body, each after 1.5 MiB of 4: nothing stays, memory included (the
     * buffers' pages went back after each upload, cut off or whole). */
    char *part = body_make(3, 3u << 19);
    for (int i = 0; i < 4; i++) {
        size_t hl = put_head(head, sizeof(head), "cut", 4u << 20);
        s[i] = raw_send(&d, head, hl);
        ck_assert_int_eq(send_all(s[i], part, 3u << 19), 0);
    }
    usleep(300000);
    for (int i = 0; i < 4; i++)
        close(s[i]);
    free(part);
    for (int i = 0; i < 100 && temp_files(&d) > 0; i++)
        usleep(20000);
    ck_assert_int_eq(temp_files(&d), 0);
    long grown = daemon_rss_kb(&d) - base;
    printf("large bodies: after 12 uploads, 4 cut off at 1.5 MiB, sbxd RSS %+ld KiB\n", grown);
    if (!under_gvisor() && !SANITIZED)
        ck_assert_msg(grown < 2048, "12 uploads, 4 cut off, left %ld KiB", grown);
    struct http_resp r = req(&d, "GET", "/files/cut", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    http_resp_free(&r);
    /* And the buffers serve again. */
    a = body_make(4, 3u << 20);
    r = req(&d, "PUT", "/files/after", "application/octet-stream", a, 3u << 20);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    free(a);
    body_check(&d, "/files/after", 4, 3u << 20);
    free(ans);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* A multipart body sent in pieces of changing, odd sizes. */
struct mp_src {
    const char *data;
    size_t len, off, step;
};

static size_t mp_read(char *out, size_t size, size_t nmemb, void *ud)
{
    struct mp_src *s = ud;
    size_t n = size * nmemb;
    s->step = s->step * 7 % 8191 + 1;
    if (n > s->step)
        n = s->step;
    if (n > s->len - s->off)
        n = s->len - s->off;
    memcpy(out, s->data + s->off, n);
    s->off += n;
    return n;
}

/* Several MiB of content full of the delimiter's beginnings (a CR every 256 bytes, and
 * "\r\n--" with ever longer prefixes of the boundary every 4093 bytes), through each route
 * that takes a multipart body: the file holds the part's content exactly, byte for byte,
 * however the body was cut on its way, and no temporary file stays. */
START_TEST(multipart_large_through_every_route)
{
    static const char bnd[] = "----sbxdTestBoundary7MA4YWxk";
    size_t blen = sizeof(bnd) - 1, clen = (size_t)6 << 20;
    char *body = malloc(clen + 1024);
    ck_assert_ptr_nonnull(body);
    int hl = snprintf(body, 1024,
                      "--%s\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nx\r\n"
                      "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                      "filename=\"mp/legacy.bin\"\r\nContent-Type: application/octet-stream"
                      "\r\n\r\n",
                      bnd, bnd);
    char *content = body + hl;
    for (size_t i = 0; i < clen; i++)
        content[i] = (char)(i * 131 + 7);
    for (size_t at = 100, k = 0; at + 4 + blen < clen; at += 4093, k = (k + 1) % blen) {
        memcpy(content + at, "\r\n--", 4);
        memcpy(content + at + 4, bnd, k); /* a proper prefix: never the whole delimiter */
    }
    size_t n = (size_t)hl + clen;
    n += (size_t)snprintf(body + n, 1024 - (size_t)hl, "\r\n--%s--\r\n", bnd);
    char ct[128];
    snprintf(ct, sizeof(ct), "Content-Type: multipart/form-data; boundary=%s", bnd);
    static const struct {
        const char *method, *path, *stored;
        long status;
    } routes[] = {{"POST", "/upload", "/files/mp/legacy.bin", 200},
                  {"PUT", "/files/mp/put.bin", "/files/mp/put.bin", 201},
                  {"PUT", "/v1/files/mp/v1.bin", "/files/mp/v1.bin", 204}};
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        char url[128];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", g_sbxd.port, routes[i].path);
        struct mp_src src = {.data = body, .len = n, .step = i + 1};
        struct curl_slist *h = curl_slist_append(NULL, ct);
        CURL *c = curl_easy_init();
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, routes[i].method);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, mp_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &src);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)n);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gen_check); /* the small answer */
        struct gen sink = {0};
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
        ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
        long status;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        ck_assert_msg(status == routes[i].status, "%s %s: %ld", routes[i].method, routes[i].path,
                      status);
        struct http_resp r = req(&g_sbxd, "GET", routes[i].stored, NULL, NULL, 0);
        ck_assert_int_eq(r.status, 200);
        ck_assert_uint_eq(r.len, clen);
        ck_assert_msg(memcmp(r.body, content, clen) == 0, "%s: the content differs",
                      routes[i].path);
        http_resp_free(&r);
    }
    free(body);
    ck_assert_int_eq(temp_files(&g_sbxd), 0);
}
END_TEST

/* write(2) calls sbxd made so far (syscw of /proc/PID/io); -1 when unreadable. */
static long sbxd_writes(const struct daemon *d)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/io", (int)d->pid);
    FILE *f = fopen(path, "re");
    long n = -1;
    while (f && fgets(buf, sizeof(buf), f))
        if (strncmp(buf, "syscw:", 6) == 0)
            n = atol(buf + 6);
    if (f)
        fclose(f);
    return n;
}

/* The SDK's files.write (POST /upload, requests' multipart: a boundary of 32 hex digits, a
 * part without a Content-Type, the whole body announced by Content-Length) is written as a
 * multipart PUT of the same bytes is: in as few write(2) calls, each a piece of the body as
 * libmicrohttpd read it, never a copy cut into small writes. A write per 4 KiB would be 4096
 * calls here; both routes take one per read, of up to 1 MiB (tools/mhd-patches/0005), as
 * much as the socket holds at the time: 16 to 90 calls, as the client and sbxd race. */
START_TEST(sdk_upload_writes_as_put_does)
{
    if (under_gvisor()) {
        gvisor_skip("sdk_upload_writes_as_put_does", "sbxd's /proc/PID/io is the sandbox's");
        return;
    }
    static const char bnd[] = "0c5e2f7a9b1d4c3e8f6a0b2c4d6e8f1a";
    size_t clen = (size_t)16 << 20;
    char *body = malloc(clen + 512);
    ck_assert_ptr_nonnull(body);
    int hl = snprintf(body, 512,
                      "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                      "filename=\"sdk/new.bin\"\r\n\r\n",
                      bnd);
    for (size_t i = 0; i < clen; i++)
        body[(size_t)hl + i] = (char)(i * 131 + 7);
    size_t n = (size_t)hl + clen;
    n += (size_t)snprintf(body + n, 512 - (size_t)hl, "\r\n--%s--\r\n", bnd);
    char ct[96];
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%s", bnd);
    long w0 = sbxd_writes(&g_sbxd);
    ck_assert_int_ge(w0, 0);
    struct http_resp r = req(&g_sbxd, "POST", "/upload", ct, body, n);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    long w1 = sbxd_writes(&g_sbxd);
    r = req(&g_sbxd, "PUT", "/files/sdk/put.bin", ct, body, n);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    long w2 = sbxd_writes(&g_sbxd);
    long upload = w1 - w0, put = w2 - w1;
    printf("uploads: 16 MiB in %ld writes by POST /upload, %ld by a multipart PUT\n", upload, put);
    ck_assert_msg(upload <= (long)(clen >> 16) && put <= (long)(clen >> 16),
                  "POST /upload made %ld writes for 16 MiB, a multipart PUT %ld", upload, put);
    r = req(&g_sbxd, "GET", "/files/sdk/new.bin", NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, clen);
    ck_assert(memcmp(r.body, body + hl, clen) == 0);
    http_resp_free(&r);
    r = req(&g_sbxd, "DELETE", "/files/sdk?recursive=true", NULL, NULL, 0);
    http_resp_free(&r);
    free(body);
}
END_TEST

/*
 * The listing flood a red-team pass replayed: 20 concurrent listings of a 200,000-entry
 * directory, spread over the three faces that list (/files, /v1/files, the legacy /list), drove
 * sbxd to 1.56 GB when every listing was built whole in memory. Each is now streamed from the
 * directory a chunk at a time: the daemon's memory stays flat, and every listing still comes
 * complete, as valid JSON naming each entry once.
 */
#define HUGE_LISTERS 20

struct huge_lister {
    const struct daemon *d;
    char path[64];
    char *body;
    size_t len;
    long status;
    CURLcode rc;
    pthread_t th;
};

static void *huge_list(void *arg)
{
    struct huge_lister *l = arg;
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", l->d->port, l->path);
    FILE *f = open_memstream(&l->body, &l->len);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 600000L);
    l->rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &l->status);
    curl_easy_cleanup(c);
    fclose(f);
    return NULL;
}

/* Whether a listing holds the entries "e" and 6 digits below n, each once (why not in why):
 * nothing asserted here, so that the daemon and its huge workspace go away before a failure. */
static bool huge_check(const struct huge_lister *l, unsigned n, char *why, size_t wl)
{
    if (l->rc != CURLE_OK || l->status != 200) {
        snprintf(why, wl, "%s: curl %d, status %ld", l->path, (int)l->rc, l->status);
        return false;
    }
    cJSON *j = cJSON_ParseWithLength(l->body, l->len);
    if (!j) {
        snprintf(why, wl, "%s: %zu bytes that are not JSON, ending '%.60s'", l->path, l->len,
                 l->len > 60 ? l->body + l->len - 60 : l->body);
        return false;
    }
    bool legacy = strncmp(l->path, "/list/", 6) == 0;
    const cJSON *entries = legacy ? j : cJSON_GetObjectItemCaseSensitive(j, "entries");
    unsigned char *seen = calloc(n, 1);
    unsigned count = 0;
    why[0] = '\0';
    if (!cJSON_IsArray(entries))
        snprintf(why, wl, "%s: no array of entries", l->path);
    else if (strncmp(l->path, "/files/", 7) == 0 && jnum(j, "total") != n)
        snprintf(why, wl, "%s: total %.0f", l->path, jnum(j, "total"));
    const cJSON *e;
    cJSON_ArrayForEach(e, entries)
    {
        if (why[0])
            break;
        const char *name = jstr(e, "name");
        char *end = NULL;
        unsigned long k = name && name[0] == 'e' ? strtoul(name + 1, &end, 10) : n;
        if (k >= n || strlen(name) != 7 || *end || seen[k] || strcmp(jstr(e, "type"), "file"))
            snprintf(why, wl, "%s: entry '%s'", l->path, name ? name : "(none)");
        else
            seen[k] = 1;
        count++;
    }
    if (!why[0] && count != n)
        snprintf(why, wl, "%s: %u entries of %u", l->path, count, n);
    free(seen);
    cJSON_Delete(j);
    return !why[0];
}

START_TEST(huge_listing_memory_is_bounded)
{
    /* Under gVisor every stat goes through its gofer, and files made from the host may not be
     * seen inside: 20,000 entries there, made by a command in the sandbox. */
    unsigned n = under_gvisor() ? 20000 : 200000;
    if (under_gvisor())
        gvisor_skip("200k", "the listed directory has 20,000 entries under gVisor");
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    double t0 = now_ms();
    unsigned made = 0;
    if (under_gvisor()) {
        char cmd[160];
        snprintf(cmd, sizeof(cmd), "mkdir huge && cd huge && seq -f e%%06g 0 %u | xargs touch",
                 n - 1);
        cJSON *x = run(&d, cmd);
        made = jnum(x, "exit_code") == 0 ? n : 0;
        cJSON_Delete(x);
    } else {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/huge", d.ws);
        /* 0755 whatever the umask: the command user, whose rights a listing has, reads it. */
        int dfd = mkdir(dir, 0755) == 0 && chmod(dir, 0755) == 0
                      ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                      : -1;
        /* Hard links, mostly: an inode made per entry takes ten times as long, and ext4 links
         * one inode at most 65,000 times, so a new file every 50,000. */
        char first[16] = "";
        for (; dfd >= 0 && made < n; made++) {
            char name[16];
            snprintf(name, sizeof(name), "e%06u", made);
            if (made % 50000 == 0) {
                int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0)
                    break;
                close(fd);
                snprintf(first, sizeof(first), "%s", name);
            } else if (linkat(dfd, first, dfd, name, 0) < 0) {
                break;
            }
        }
        if (dfd >= 0)
            close(dfd);
    }
    fprintf(stderr, "huge listing: %u entries made in %.0f ms\n", made, now_ms() - t0);
    if (made < n) {
        daemon_stop_clean(&d, 30000);
        ck_abort_msg("made %u entries of %u: %s", made, n, strerror(errno));
    }

    static const char *const faces[] = {"/files/huge/", "/v1/files/huge", "/list/huge"};
    struct huge_lister l[HUGE_LISTERS];
    memset(l, 0, sizeof(l));
    rss_sampling_start(&d);
    t0 = now_ms();
    for (int i = 0; i < HUGE_LISTERS; i++) {
        l[i].d = &d;
        snprintf(l[i].path, sizeof(l[i].path), "%s", faces[i % 3]);
        pthread_create(&l[i].th, NULL, huge_list, &l[i]);
    }
    for (int i = 0; i < HUGE_LISTERS; i++)
        pthread_join(l[i].th, NULL);
    double ms = now_ms() - t0;
    long base;
    long peak = rss_sampling_stop(&base);
    fprintf(stderr, "huge listing: %d listings of %u entries in %.0f ms, RSS %ld -> %ld KiB\n",
            HUGE_LISTERS, n, ms, base, peak);
    char why[256] = "";
    bool complete = true;
    for (int i = 0; i < HUGE_LISTERS; i++) {
        if (complete)
            complete = huge_check(&l[i], n, why, sizeof(why));
        free(l[i].body);
    }
    bool clean = daemon_stop_clean(&d, 30000); /* its workspace, the directory too, goes */
    ck_assert_msg(complete, "%s", why);
    ck_assert_msg(peak - base < 64 * 1024, "RSS grew by %ld KiB", peak - base);
    ck_assert(clean);
}
END_TEST

Suite *files_suite(void)
{
    Suite *s = suite_create("files");
    TCase *tc = tcase_create("files");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, put_get_head_round_trip_binary);
    tcase_add_test(tc, ranges);
    tcase_add_test(tc, directory_listing);
    tcase_add_test(tc, multipart_and_directories);
    tcase_add_test(tc, multipart_large_through_every_route);
    tcase_add_test(tc, sdk_upload_writes_as_put_does);
    tcase_add_test(tc, delete);
    tcase_add_test(tc, confinement);
    tcase_add_test(tc, hard_link_to_an_unreadable_file_stays_unreadable);
    tcase_add_test(tc, upload_limits_and_aborts_keep_the_old_content);
    tcase_add_test(tc, disk_full_is_507_and_the_old_file_stays);
    tcase_add_test(tc, concurrent_writers_and_readers);
    tcase_add_test(tc, download_completes_when_the_file_is_deleted_or_replaced);
    tcase_add_test(tc, large_round_trip_with_flat_memory);
    tcase_add_test(tc, large_bodies_arrive_whole_and_their_buffers_go_back);
    suite_add_tcase(s, tc);
    tc = tcase_create("listing-memory");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, huge_listing_memory_is_bounded);
    suite_add_tcase(s, tc);
    return s;
}
