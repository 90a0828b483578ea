/*
 * Hardening and operations: /metrics, the bearer token, and the limits that keep sbxd
 * serving under hostile clients (slowloris, connection floods, oversized heads and bodies).
 * Most tests start a daemon of their own with the limit set low; requests go over raw
 * sockets where the test needs a source address, a header, or a half-sent request.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* ------------------------------------------------------------------------------------ */
/* A raw HTTP/1.1 client: one request per connection, unless the test keeps it.          */

struct raw {
    int status;
    char head[8192];
    char *body; /* inside buf */
    char buf[65536];
    size_t len;
};

/* A connection to d from source address src (NULL: any); -1 on failure. */
static int raw_connect(const struct daemon *d, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (src) {
        inet_pton(AF_INET, src, &a.sin_addr);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
            close(fd);
            return -1;
        }
    }
    a.sin_port = htons((uint16_t)d->port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read one response: until its Content-Length is in, or the peer closes, or timeout_ms. */
static int raw_read(int fd, struct raw *r, int timeout_ms)
{
    memset(r, 0, offsetof(struct raw, buf));
    r->len = 0;
    double end = now_ms() + timeout_ms;
    for (;;) {
        char *hend = NULL;
        if (r->len) {
            r->buf[r->len] = '\0';
            hend = strstr(r->buf, "\r\n\r\n");
        }
        if (hend) {
            const char *cl = strcasestr(r->buf, "\r\nContent-Length:");
            size_t want = cl && cl < hend ? strtoul(cl + 17, NULL, 10) : (size_t)-1;
            size_t have = r->len - (size_t)(hend + 4 - r->buf);
            if (want != (size_t)-1 && have >= want)
                break;
        }
        int left = (int)(end - now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        ssize_t k = recv(fd, r->buf + r->len, sizeof(r->buf) - 1 - r->len, 0);
        if (k <= 0)
            break;
        r->len += (size_t)k;
        if (r->len >= sizeof(r->buf) - 1)
            break;
    }
    r->buf[r->len] = '\0';
    char *hend = strstr(r->buf, "\r\n\r\n");
    if (!hend || sscanf(r->buf, "HTTP/1.%*d %d", &r->status) != 1)
        return -1;
    size_t hl = (size_t)(hend - r->buf);
    snprintf(r->head, sizeof(r->head), "%.*s", (int)(hl < sizeof(r->head) - 1 ? hl : 0), r->buf);
    r->body = hend + 4;
    return 0;
}

/* One request on a fresh connection (closed after). extra: header lines, each ending CRLF. */
static int raw_request(const struct daemon *d, const char *src, const char *method,
                       const char *path, const char *extra, const char *body, size_t body_len,
                       struct raw *r)
{
    int fd = raw_connect(d, src);
    if (fd < 0)
        return -1;
    char head[16384];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: sbxd\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, extra ? extra : "", body_len);
    int rc = send_all(fd, head, (size_t)n);
    if (rc == 0 && body_len)
        rc = send_all(fd, body, body_len);
    if (rc == 0)
        rc = raw_read(fd, r, 15000);
    close(fd);
    return rc;
}

static bool header_has(const struct raw *r, const char *text)
{
    return strcasestr(r->head, text) != NULL;
}

/* The body's "code" (JSON error), in out. */
static const char *body_code(const struct raw *r, char *out, size_t len)
{
    cJSON *j = cJSON_Parse(r->body);
    snprintf(out, len, "%s", j && jstr(j, "code") ? jstr(j, "code") : "");
    cJSON_Delete(j);
    return out;
}

/* ------------------------------------------------------------------------------------ */
/* /metrics                                                                              */

/* A sample's value from a scrape, or -1 when the series is absent. series is the whole
 * name{labels} as printed. */
static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

static char *scrape(const struct daemon *d, const char *auth)
{
    struct raw r;
    ck_assert_int_eq(raw_request(d, NULL, "GET", "/metrics", auth, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    return strdup(r.body);
}

/* Every front has its own series, MCP's too: its commands are never counted as REST's. */
START_TEST(metrics_have_a_series_per_front)
{
    char *t = scrape(&g_sbxd, NULL);
    static const char *const fronts[] = {"rest", "grpc", "mcp"};
    for (size_t i = 0; i < sizeof(fronts) / sizeof(fronts[0]); i++) {
        char series[160];
        snprintf(series, sizeof(series),
                 "sbxd_executions_total{front=\"%s\",mode=\"sync\",status=\"canceled\"}",
                 fronts[i]);
        ck_assert_msg(metric(t, series) >= 0, "missing: %s", series);
        snprintf(series, sizeof(series),
                 "sbxd_execution_duration_seconds_count{front=\"%s\",mode=\"stream\"}", fronts[i]);
        ck_assert_msg(metric(t, series) >= 0, "missing: %s", series);
    }
    free(t);
}
END_TEST

START_TEST(metrics_speak_the_prometheus_text_format)
{
    struct http_resp r;
    ck_assert_int_eq(http_request(&g_sbxd, "GET", "/metrics", NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.headers, "text/plain; version=0.0.4"));
    /* Every line is a comment or `name{labels} value`, and every family is TYPEd. */
    int samples = 0;
    char *save = NULL;
    for (char *line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            ck_assert(strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0);
            continue;
        }
        char *sp = strrchr(line, ' ');
        ck_assert_msg(sp && sp > line, "no value: %s", line);
        char *end;
        strtod(sp + 1, &end);
        ck_assert_msg(*end == '\0', "bad value: %s", line);
        ck_assert_msg((line[0] >= 'a' && line[0] <= 'z') || line[0] == '_', "bad name: %s", line);
        samples++;
    }
    ck_assert_int_gt(samples, 50);
    http_resp_free(&r);
    char *t = scrape(&g_sbxd, NULL);
    static const char *const families[] = {
        "# TYPE sbxd_executions_total counter",
        "# TYPE sbxd_execution_duration_seconds histogram",
        "# TYPE sbxd_commands_running gauge",
        "# TYPE sbxd_commands_queued gauge",
        "# TYPE sbxd_processes_running gauge",
        "# TYPE sbxd_http_requests_total counter",
        "# TYPE sbxd_http_received_bytes_total counter",
        "# TYPE sbxd_http_sent_bytes_total counter",
        "# TYPE sbxd_oom_kills_total counter",
        "# TYPE sbxd_timeouts_total counter",
        "# TYPE sbxd_files_written_total counter",
        "# TYPE sbxd_files_read_total counter",
        "# TYPE sbxd_isolation_info gauge",
        "# TYPE sbxd_limit_rejections_total counter",
        "# TYPE sbxd_connections_open gauge",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge",
    };
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        ck_assert_msg(strstr(t, families[i]), "missing: %s", families[i]);
    /* The isolation labels say what /healthz says. */
    cJSON *h = NULL;
    ck_assert_int_eq(http_request(&g_sbxd, "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
    h = r.json;
    char want[128];
    snprintf(want, sizeof(want), "tree_kill=\"%s\"",
             jstr(cJSON_GetObjectItem(h, "isolation"), "tree_kill"));
    ck_assert_msg(strstr(t, want), "isolation info lacks %s", want);
    http_resp_free(&r);
    free(t);
}
END_TEST

START_TEST(metrics_count_what_happened)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    cJSON *x = execute(&d, "{\"command\":\"echo hi\"}");
    cJSON_Delete(x);
    x = execute(&d, "{\"command\":\"exit 3\"}");
    cJSON_Delete(x);
    x = execute(&d, "{\"command\":\"sleep 5\",\"timeout_ms\":200}");
    ck_assert(jbool(x, "timed_out"));
    cJSON_Delete(x);
    struct http_resp r;
    ck_assert_int_eq(
        http_request(&d, "PUT", "/files/m.bin", "application/octet-stream", "12345", 5, 0, &r), 0);
    ck_assert_int_eq(r.status, 201);
    double put_answer = (double)r.len;
    http_resp_free(&r);
    ck_assert_int_eq(http_request(&d, "GET", "/files/m.bin", NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    ck_assert_int_eq(http_request(&d, "GET", "/nowhere", NULL, NULL, 0, 0, &r), 0);
    http_resp_free(&r);
    ck_assert_int_eq(
        http_request(&d, "POST", "/processes", NULL, "{\"command\":\"true\"}", 18, 0, &r), 0);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    /* The background process's end is counted when it ends. */
    char *t = NULL;
    for (int i = 0; i < 100; i++) {
        free(t);
        t = scrape(&d, NULL);
        if (metric(t,
                   "sbxd_executions_total{front=\"rest\",mode=\"background\",status=\"exited\"}") ==
            1)
            break;
        usleep(50000);
    }
    ck_assert_double_eq(
        metric(t, "sbxd_executions_total{front=\"rest\",mode=\"sync\",status=\"exited\"}"), 2);
    ck_assert_double_eq(
        metric(t, "sbxd_executions_total{front=\"rest\",mode=\"sync\",status=\"timeout\"}"), 1);
    ck_assert_double_eq(
        metric(t, "sbxd_executions_total{front=\"rest\",mode=\"background\",status=\"exited\"}"),
        1);
    ck_assert_double_eq(metric(t, "sbxd_timeouts_total"), 1);
    ck_assert_double_eq(metric(t, "sbxd_oom_kills_total"), 0);
    ck_assert_double_eq(
        metric(t, "sbxd_execution_duration_seconds_count{front=\"rest\",mode=\"sync\"}"), 3);
    /* The timed-out one ran at least its 200 ms: never in a bucket below 0.25 s; every one is
     * in +Inf, and the sum holds at least its 0.2 s. */
    ck_assert_double_le(
        metric(t,
               "sbxd_execution_duration_seconds_bucket{front=\"rest\",mode=\"sync\",le=\"0.1\"}"),
        2);
    ck_assert_double_eq(
        metric(t,
               "sbxd_execution_duration_seconds_bucket{front=\"rest\",mode=\"sync\",le=\"+Inf\"}"),
        3);
    ck_assert_double_ge(
        metric(t, "sbxd_execution_duration_seconds_sum{front=\"rest\",mode=\"sync\"}"), 0.2);
    ck_assert_double_eq(metric(t, "sbxd_files_written_total"), 1);
    ck_assert_double_eq(metric(t, "sbxd_files_read_total"), 1);
    ck_assert_double_eq(metric(t, "sbxd_file_written_bytes_total"), 5);
    ck_assert_double_eq(metric(t, "sbxd_file_read_bytes_total"), 5);
    ck_assert_double_eq(metric(t, "sbxd_http_requests_total{route=\"/execute\",status=\"200\"}"),
                        3);
    ck_assert_double_eq(
        metric(t, "sbxd_http_requests_total{route=\"/files/{path}\",status=\"201\"}"), 1);
    ck_assert_double_eq(metric(t, "sbxd_http_requests_total{route=\"unmatched\",status=\"404\"}"),
                        1);
    ck_assert_double_eq(metric(t, "sbxd_http_requests_total{route=\"/processes\",status=\"201\"}"),
                        1);
    /* Bodies in: the three commands' JSON and the file's 5 bytes. */
    double in = strlen("{\"command\":\"echo hi\"}") + strlen("{\"command\":\"exit 3\"}") +
                strlen("{\"command\":\"sleep 5\",\"timeout_ms\":200}");
    ck_assert_double_eq(metric(t, "sbxd_http_received_bytes_total{route=\"/execute\"}"), in);
    ck_assert_double_eq(metric(t, "sbxd_http_received_bytes_total{route=\"/files/{path}\"}"), 5);
    /* Bodies out: the PUT's answer and the file. */
    ck_assert_double_eq(metric(t, "sbxd_http_sent_bytes_total{route=\"/files/{path}\"}"),
                        put_answer + 5);
    ck_assert_double_gt(metric(t, "sbxd_http_sent_bytes_total{route=\"/execute\"}"), 300);
    ck_assert_double_eq(metric(t, "sbxd_commands_running"), 0);
    ck_assert_double_eq(metric(t, "sbxd_commands_queued"), 0);
    ck_assert_double_gt(metric(t, "process_resident_memory_bytes"), 100000);
    free(t);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Cheap enough to scrape every second: a scrape costs well under a millisecond of sbxd. */
START_TEST(metrics_scrape_is_cheap)
{
    double lat[200];
    int fd = raw_connect(&g_sbxd, NULL);
    ck_assert_int_ge(fd, 0);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: sbxd\r\n\r\n";
    for (int i = 0; i < 200; i++) {
        double t0 = now_ms();
        ck_assert_int_eq(send_all(fd, req, strlen(req)), 0);
        struct raw *r = malloc(sizeof(*r));
        ck_assert_int_eq(raw_read(fd, r, 5000), 0);
        ck_assert_int_eq(r->status, 200);
        free(r);
        lat[i] = now_ms() - t0;
    }
    close(fd);
    qsort(lat, 200, sizeof(lat[0]), cmp_double);
    fprintf(stderr, "metrics: scrape p50 %.3f ms, p90 %.3f ms\n", lat[100], lat[180]);
    ck_assert_double_lt(lat[100], 2.0 * SLOW * (under_gvisor() ? 5 : 1));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The bearer token                                                                      */

#define TOKEN "tok-3f9a7c21e8b54d06a1c2d3e4f5a6b7c8"

START_TEST(token_guards_every_route_but_health)
{
    struct daemon d;
    const char *env[] = {"SBXD_TOKEN=" TOKEN, NULL};
    daemon_start(&d, NULL, env);
    struct raw r;
    char code[64];
    /* The probes need no token. */
    static const char *const open_paths[] = {"/healthz", "/v1/health", "/"};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(raw_request(&d, NULL, "GET", open_paths[i], NULL, NULL, 0, &r), 0);
        ck_assert_msg(r.status == 200, "%s: %d", open_paths[i], r.status);
    }
    /* Everything else does, even a route that does not exist (no probing for routes). */
    static const struct {
        const char *method, *path;
    } guarded[] = {{"POST", "/execute"},           {"GET", "/files/"},   {"PUT", "/files/x"},
                   {"GET", "/processes"},          {"GET", "/metrics"},  {"GET", "/v1/metadata"},
                   {"GET", "/v1/files/"},          {"POST", "/upload"},  {"GET", "/list/"},
                   {"GET", "/download/x"},         {"GET", "/exists/x"}, {"GET", "/nowhere"},
                   {"POST", "/processes/x/stdin"}, {"HEAD", "/files/x"}};
    for (size_t i = 0; i < sizeof(guarded) / sizeof(guarded[0]); i++) {
        ck_assert_int_eq(raw_request(&d, NULL, guarded[i].method, guarded[i].path, NULL,
                                     "{\"command\":\"true\"}", 18, &r),
                         0);
        ck_assert_msg(r.status == 401, "%s %s: %d", guarded[i].method, guarded[i].path, r.status);
        ck_assert(header_has(&r, "WWW-Authenticate: Bearer realm=\"sbxd\""));
        if (strcmp(guarded[i].method, "HEAD") != 0)
            ck_assert_str_eq(body_code(&r, code, sizeof(code)), "UNAUTHENTICATED");
    }
    /* A wrong token, a token of the right length but wrong, another scheme, a prefix. */
    static const char *const bad[] = {
        "Authorization: Bearer nope\r\n",
        "Authorization: Bearer tok-3f9a7c21e8b54d06a1c2d3e4f5a6b7c9\r\n",
        "Authorization: Basic dG9rOg==\r\n", "Authorization: Bearer tok-3f9a7c21e8b54d06\r\n",
        "Authorization: Bearer " TOKEN "x\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(
            raw_request(&d, NULL, "POST", "/execute", bad[i], "{\"command\":\"true\"}", 18, &r), 0);
        ck_assert_msg(r.status == 401, "%s: %d", bad[i], r.status);
    }
    ck_assert(header_has(&r, "error=\"invalid_token\""));
    /* The right one, in any case of the scheme. */
    ck_assert_int_eq(raw_request(&d, NULL, "POST", "/execute",
                                 "authorization: bearer " TOKEN "\r\n", "{\"command\":\"echo ok\"}",
                                 21, &r),
                     0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"stdout\":\"ok\\n\""));
    ck_assert_int_eq(raw_request(&d, NULL, "GET", "/metrics", "Authorization: Bearer " TOKEN "\r\n",
                                 NULL, 0, &r),
                     0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(metric(r.body, "sbxd_limit_rejections_total{limit=\"unauthorized\"}"),
                        (double)(sizeof(guarded) / sizeof(guarded[0]) + 5));
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(token_never_leaks)
{
    struct daemon d;
    const char *env[] = {"SBXD_TOKEN=" TOKEN, "SANDBOX_TOKEN_HINT=x", NULL};
    const char *args[] = {"--metadata-prefix", "SBXD_", NULL};
    daemon_start(&d, args, env);
    const char *auth = "Authorization: Bearer " TOKEN "\r\n";
    struct raw r;
    /* Not in sbxd's own environment as the kernel shows it. */
    if (!under_gvisor()) {
        char path[64], env_buf[16384];
        snprintf(path, sizeof(path), "/proc/%d/environ", (int)d.pid);
        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(env_buf, 1, sizeof(env_buf) - 1, f);
        fclose(f);
        ck_assert_uint_gt(n, 0);
        ck_assert_ptr_null(memmem(env_buf, n, TOKEN, strlen(TOKEN)));
        ck_assert_ptr_null(memmem(env_buf, n, "SBXD_TOKEN", 10));
    } else {
        gvisor_skip("token_never_leaks /proc/PID/environ", "sbxd is not a host process");
    }
    /* Not in a command's environment, nor readable from sbxd's through /proc. */
    const char *cmd = "{\"command\":\"env; cat /proc/$PPID/environ /proc/1/environ 2>&1; true\"}";
    ck_assert_int_eq(raw_request(&d, NULL, "POST", "/execute", auth, cmd, strlen(cmd), &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(strstr(r.body, TOKEN));
    ck_assert_ptr_null(strstr(r.body, "SBXD_TOKEN"));
    /* Not in /v1/metadata, even with a prefix that takes SBXD_ variables. */
    ck_assert_int_eq(raw_request(&d, NULL, "GET", "/v1/metadata", auth, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(strstr(r.body, TOKEN));
    ck_assert_ptr_null(strstr(r.body, "SBXD_TOKEN"));
    /* Not in the log, nor the wrong guesses sent. */
    ck_assert_int_eq(
        raw_request(&d, NULL, "GET", "/files/", "Authorization: Bearer guess-123\r\n", NULL, 0, &r),
        0);
    ck_assert_int_eq(r.status, 401);
    char *log = daemon_log_read(&d);
    ck_assert_ptr_nonnull(log);
    ck_assert_ptr_null(strstr(log, TOKEN));
    ck_assert_ptr_null(strstr(log, "guess-123"));
    free(log);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(token_file_and_bad_token_settings)
{
    char dir[] = "/tmp/sbxd-token-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char file[128], empty[128], spaced[128];
    snprintf(file, sizeof(file), "%s/token", dir);
    snprintf(empty, sizeof(empty), "%s/empty", dir);
    snprintf(spaced, sizeof(spaced), "%s/spaced", dir);
    FILE *f = fopen(file, "w");
    fputs(TOKEN "\n", f); /* the newline is not part of it */
    fclose(f);
    fclose(fopen(empty, "w"));
    f = fopen(spaced, "w");
    fputs("two words\n", f);
    fclose(f);

    struct daemon d;
    const char *args[] = {"--token-file", file, NULL};
    daemon_start(&d, args, NULL);
    struct raw r;
    ck_assert_int_eq(raw_request(&d, NULL, "GET", "/files/", NULL, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 401);
    ck_assert_int_eq(
        raw_request(&d, NULL, "GET", "/files/", "Authorization: Bearer " TOKEN "\r\n", NULL, 0, &r),
        0);
    ck_assert_int_eq(r.status, 200);
    ck_assert(daemon_stop_clean(&d, 10000));

    /* Settings that cannot be right stop sbxd at start, with a line that says why. */
    char out[4096];
    const char *both[] = {"--token-file", file, NULL};
    const char *both_env[] = {"SBXD_TOKEN=x", NULL};
    ck_assert_int_eq(sbxd_run(both, both_env, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "use one"));
    const char *e1[] = {"--token-file", empty, NULL};
    ck_assert_int_eq(sbxd_run(e1, NULL, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "empty"));
    const char *e2[] = {"--token-file", spaced, NULL};
    ck_assert_int_eq(sbxd_run(e2, NULL, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "spaces"));
    const char *e3[] = {"--token-file", "/nonexistent/token", NULL};
    ck_assert_int_eq(sbxd_run(e3, NULL, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "cannot open"));
    const char *empty_env[] = {"SBXD_TOKEN=", NULL};
    const char *none[] = {NULL};
    ck_assert_int_eq(sbxd_run(none, empty_env, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "empty"));
    unlink(file);
    unlink(empty);
    unlink(spaced);
    rmdir(dir);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Abuse limits                                                                          */

#define SLOW_CONNS 500

/* sbxd's descriptor count once it stops changing (a fresh daemon may still be filling its
 * pool of namespace slots). */
static int settled_fds(const struct daemon *d)
{
    int last = daemon_fd_count(d), same = 0;
    for (int i = 0; i < 100 && same < 3; i++) {
        usleep(100000);
        int now = daemon_fd_count(d);
        same = now == last ? same + 1 : 0;
        last = now;
    }
    return last;
}

/* slowloris: hundreds of connections each holding a half-sent request. sbxd keeps answering
 * the probe at once, then answers each 408 at --request-timeout-ms and frees it. */
START_TEST(slowloris_does_not_starve_healthz)
{
    struct daemon d;
    const char *args[] = {"--request-timeout-ms", "1500", "--max-connections", "1024", NULL};
    daemon_start(&d, args, NULL);
    int base_fds = settled_fds(&d);
    static int fds[SLOW_CONNS];
    for (int i = 0; i < SLOW_CONNS; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.%d.%d", 1 + i / 200, 2 + i % 200);
        fds[i] = raw_connect(&d, src);
        ck_assert_int_ge(fds[i], 0);
        const char *part = "POST /execute HTTP/1.1\r\nHost: sbxd\r\nX-Slow: ";
        ck_assert_int_eq(send_all(fds[i], part, strlen(part)), 0);
    }
    /* The probe, meanwhile. */
    double lat[40];
    for (int i = 0; i < 40; i++) {
        struct raw r;
        double t0 = now_ms();
        ck_assert_int_eq(raw_request(&d, NULL, "GET", "/healthz", NULL, NULL, 0, &r), 0);
        lat[i] = now_ms() - t0;
        ck_assert_int_eq(r.status, 200);
        usleep(10000);
    }
    qsort(lat, 40, sizeof(lat[0]), cmp_double);
    fprintf(stderr, "slowloris: %d half-open connections, /healthz p50 %.2f ms, p95 %.2f ms\n",
            SLOW_CONNS, lat[20], lat[38]);
    /* Under gVisor's ptrace platform every new connection's thread is slow to come on some
     * hosts (p95 150-480 ms on a 6.18 kernel, p50 under 5 ms): the bound there is the
     * median's, and the tail's is 1 s. */
    if (under_gvisor()) {
        gvisor_skip("slowloris p95 < 50 ms", "p50 < 50 ms and p95 < 1 s instead (ptrace platform)");
        ck_assert_double_lt(lat[20], 50.0 * SLOW);
        ck_assert_double_lt(lat[38], 1000.0 * SLOW);
    } else {
        ck_assert_double_lt(lat[38], 50.0 * SLOW);
    }
    /* Trickling does not buy time: a byte now and then, and still 408 at the deadline. */
    for (int i = 0; i < SLOW_CONNS; i += 50)
        send_all(fds[i], "a", 1);
    int got408 = 0;
    for (int i = 0; i < SLOW_CONNS; i++) {
        struct raw *r = malloc(sizeof(*r));
        if (raw_read(fds[i], r, 5000) == 0 && r->status == 408 &&
            strstr(r->body, "\"code\":\"REQUEST_TIMEOUT\"") &&
            strstr(r->body, "--request-timeout-ms"))
            got408++;
        free(r);
        close(fds[i]);
    }
    ck_assert_int_eq(got408, SLOW_CONNS);
    /* Every connection is gone from sbxd: descriptors back where they were. */
    int fds_now = -1;
    for (int i = 0; i < 200 && (fds_now = daemon_fd_count(&d)) > base_fds; i++)
        usleep(50000);
    if (fds_now != base_fds && !under_gvisor()) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)d.pid);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot list sbxd's fds\n");
    }
    ck_assert_int_eq(fds_now, base_fds);
    char *t = scrape(&d, NULL);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"request_timeout\"}"),
                        SLOW_CONNS);
    ck_assert_double_eq(metric(t, "sbxd_connections_open"), 1);
    free(t);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* A connection from src busy with a command (its answer not read): nothing sbxd may close to
 * make room. */
static int busy_connection(const struct daemon *d, const char *src)
{
    int fd = raw_connect(d, src);
    ck_assert_int_ge(fd, 0);
    const char *body = "{\"command\":\"sleep 5\"}";
    char req[256];
    int n = snprintf(req, sizeof(req),
                     "POST /execute HTTP/1.1\r\nHost: sbxd\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    ck_assert_int_eq(send_all(fd, req, (size_t)n), 0);
    return fd;
}

START_TEST(connection_cap_answers_503_and_still_serves_health)
{
    struct daemon d;
    const char *args[] = {"--max-connections", "8", NULL};
    daemon_start(&d, args, NULL);
    int held[8];
    for (int i = 0; i < 8; i++)
        held[i] = busy_connection(&d, NULL);
    /* Time for the 8 requests to be read (a connection that has sent nothing sbxd has read
     * yet looks idle, and would make room for a new one at the cap), then until the 8
     * commands run (/healthz, answered over the cap, counts them). Under gVisor's ptrace
     * platform each connection's thread comes slowly on some hosts: a longer wait there. */
    usleep(under_gvisor() ? 2000000 : 300000);
    struct raw r;
    int running = 0;
    for (int i = 0; i < 100 && running < 8; i++) {
        ck_assert_int_eq(raw_request(&d, NULL, "GET", "/healthz", NULL, NULL, 0, &r), 0);
        cJSON *h = cJSON_Parse(r.body);
        running = h ? (int)jnum(h, "running") : 0;
        cJSON_Delete(h);
        if (running < 8)
            usleep(100000);
    }
    ck_assert_msg(running == 8, "%d running: %.300s", running, r.body ? r.body : "");
    char code[64];
    ck_assert_int_eq(
        raw_request(&d, NULL, "POST", "/execute", NULL, "{\"command\":\"true\"}", 18, &r), 0);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(body_code(&r, code, sizeof(code)), "UNAVAILABLE");
    ck_assert_ptr_nonnull(strstr(r.body, "--max-connections"));
    ck_assert(header_has(&r, "Connection: close"));
    ck_assert(header_has(&r, "Retry-After:"));
    /* A probe over the cap is answered. */
    ck_assert_int_eq(raw_request(&d, NULL, "GET", "/healthz", NULL, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    /* An over-cap connection that sends nothing is refused and freed within about a second. */
    int idle = raw_connect(&d, NULL);
    ck_assert_int_ge(idle, 0);
    struct raw *ri = malloc(sizeof(*ri));
    ck_assert_int_eq(raw_read(idle, ri, 3000), 0);
    ck_assert_int_eq(ri->status, 503);
    free(ri);
    close(idle);
    /* None of the busy ones was closed to make room. */
    for (int i = 0; i < 8; i++) {
        struct pollfd p = {.fd = held[i], .events = POLLIN};
        ck_assert_int_eq(poll(&p, 1, 0), 0);
    }
    for (int i = 0; i < 8; i++)
        close(held[i]);
    usleep(200000);
    ck_assert_int_eq(
        raw_request(&d, NULL, "POST", "/execute", NULL, "{\"command\":\"true\"}", 18, &r), 0);
    ck_assert_int_eq(r.status, 200);
    char *t = scrape(&d, NULL);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"max_connections\"}"), 2);
    free(t);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* At the cap, connections that only wait (opened and silent, or kept alive after a request)
 * make room for new ones, the longest-waiting first: the new request is served, not
 * refused. */
START_TEST(idle_connections_make_room_at_the_cap)
{
    struct daemon d;
    const char *args[] = {"--max-connections", "8", "--max-client-connections", "4", NULL};
    daemon_start(&d, args, NULL);
    int held[8];
    for (int i = 0; i < 8; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.0.%d", 10 + i);
        held[i] = raw_connect(&d, src);
        ck_assert_int_ge(held[i], 0);
        if (i % 2) { /* kept alive after a request */
            const char *req = "GET /healthz HTTP/1.1\r\nHost: sbxd\r\n\r\n";
            ck_assert_int_eq(send_all(held[i], req, strlen(req)), 0);
            struct raw *r = malloc(sizeof(*r));
            ck_assert_int_eq(raw_read(held[i], r, 3000), 0);
            ck_assert_int_eq(r->status, 200);
            free(r);
        }
        usleep(20000);
    }
    struct raw r;
    ck_assert_int_eq(
        raw_request(&d, NULL, "POST", "/execute", NULL, "{\"command\":\"true\"}", 18, &r), 0);
    ck_assert_int_eq(r.status, 200);
    /* The first one (silent longest) was closed for it, without an answer; the rest are
     * open. */
    struct pollfd p = {.fd = held[0], .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 2000), 1);
    char b;
    ck_assert_int_eq(recv(held[0], &b, 1, 0), 0);
    for (int i = 1; i < 8; i++) {
        p = (struct pollfd){.fd = held[i], .events = POLLIN};
        ck_assert_int_eq(poll(&p, 1, 0), 0);
    }
    /* At the per-address cap, the same: that address's longest-waiting one goes. */
    int mine[4];
    for (int i = 0; i < 4; i++) {
        mine[i] = raw_connect(&d, "127.0.0.30");
        ck_assert_int_ge(mine[i], 0);
        usleep(20000);
    }
    ck_assert_int_eq(raw_request(&d, "127.0.0.30", "GET", "/files/", NULL, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    p = (struct pollfd){.fd = mine[0], .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 2000), 1);
    ck_assert_int_eq(recv(mine[0], &b, 1, 0), 0);
    char *t = scrape(&d, NULL);
    ck_assert_double_ge(metric(t, "sbxd_connections_evicted_total"), 2);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"max_connections\"}"), 0);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"max_client_connections\"}"),
                        0);
    free(t);
    for (int i = 0; i < 8; i++)
        close(held[i]);
    for (int i = 0; i < 4; i++)
        close(mine[i]);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

#define FLOOD 1000

static int threads_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    int n = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* FLOOD connections from one address or from many, half of them silent (half-open), half
 * kept alive after a request (idle); then the health routes from fresh connections, timed.
 * Returns the flood's sockets (those sbxd closed read end-of-stream). */
static int *flood(const struct daemon *d, bool many)
{
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2 * FLOOD + 256) {
        rl.rlim_cur = rl.rlim_max;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    int *fds = malloc(FLOOD * sizeof(int));
    struct raw *r = malloc(sizeof(*r));
    int idle = 0;
    for (int i = 0; i < FLOOD; i++) {
        char src[32];
        snprintf(src, sizeof(src), "127.0.%d.%d", 1 + i / 250, 2 + i % 250);
        fds[i] = raw_connect(d, many ? src : NULL);
        ck_assert_int_ge(fds[i], 0);
        if (i % 2) { /* what the flood's own requests get is not the point */
            const char *req = "GET /healthz HTTP/1.1\r\nHost: sbxd\r\n\r\n";
            if (send_all(fds[i], req, strlen(req)) == 0 && raw_read(fds[i], r, 5000) == 0 &&
                r->status == 200)
                idle++;
        }
    }
    free(r);
    fprintf(stderr, "flood: %d of %d requests answered 200\n", idle, FLOOD / 2);
    return fds;
}

static void probe_health(const struct daemon *d, const char *what)
{
    static const char *const paths[] = {"/healthz", "/v1/health", "/"};
    double lat[60];
    struct raw *r = malloc(sizeof(*r));
    for (int i = 0; i < 60; i++) {
        double t0 = now_ms();
        ck_assert_msg(raw_request(d, NULL, "GET", paths[i % 3], NULL, NULL, 0, r) == 0,
                      "%s: %s from a fresh connection got no answer", what, paths[i % 3]);
        lat[i] = now_ms() - t0;
        ck_assert_int_eq(r->status, 200);
        usleep(5000);
    }
    free(r);
    qsort(lat, 60, sizeof(lat[0]), cmp_double);
    fprintf(stderr, "%s: health p50 %.2f ms, p95 %.2f ms, max %.2f ms\n", what, lat[30], lat[57],
            lat[59]);
    ck_assert_msg(lat[57] < 100.0 * SLOW, "%s: health p95 %.1f ms", what, lat[57]);
}

static void flood_test(bool many)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL); /* the default caps: 256 in all, 128 per address */
    const char *what =
        many ? "1000 connections from 250 addresses" : "1000 connections from one address";
    int *fds = flood(&d, many);
    probe_health(&d, what);
    /* The flood was shed: within the caps, no thread for the rest. */
    if (!under_gvisor()) {
        int threads = threads_of(d.pid);
        fprintf(stderr, "%s: sbxd has %d threads\n", what, threads);
        ck_assert_int_le(threads, 256 + 64 + 16);
    }
    int closed = 0;
    for (int i = 0; i < FLOOD; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        char b;
        if (poll(&p, 1, 0) == 1 && recv(fds[i], &b, 1, MSG_DONTWAIT) == 0)
            closed++;
    }
    ck_assert_int_ge(closed, FLOOD - (many ? 256 : 128));
    char *t = scrape(&d, NULL);
    ck_assert_double_ge(metric(t, "sbxd_connections_evicted_total"), FLOOD - (many ? 256 : 128));
    ck_assert_double_le(metric(t, "sbxd_connections_open"), many ? 257 : 129);
    free(t);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    free(fds);
    ck_assert(daemon_stop_clean(&d, 10000));
}

START_TEST(flood_from_one_address_leaves_health_answering)
{
    flood_test(false);
}
END_TEST

START_TEST(flood_from_many_addresses_leaves_health_answering)
{
    flood_test(true);
}
END_TEST

/* A request head on fd: line (the request line and headers, ending in an unfinished header
 * line), then len bytes of that header's value and the head's end. The first 64 KiB go in
 * pieces of piece bytes, a pause after each of the first 16, when piece is not 0. Whether it
 * all went (sbxd may answer and close before the end). */
static bool send_huge_head(int fd, const char *line, size_t len, size_t piece)
{
    char *huge = malloc(len);
    ck_assert_ptr_nonnull(huge);
    memset(huge, 'h', len);
    bool sent = send_all(fd, line, strlen(line)) == 0;
    size_t off = 0;
    for (int k = 0; sent && piece && off + piece <= len && off < 65536; k++) {
        sent = send_all(fd, huge + off, piece) == 0;
        off += piece;
        if (k < 16)
            usleep(500);
    }
    sent = sent && send_all(fd, huge + off, len - off) == 0 && send_all(fd, "\r\n\r\n", 4) == 0;
    free(huge);
    return sent;
}

/* An answer given before the body is read (413 here, 401 below) reaches a client that sends
 * its whole body before it reads, as Python's http.client does: sbxd reads and drops the rest
 * for a while before it closes, instead of resetting the connection under its answer. */
static void send_whole_then_read(const struct daemon *d, const char *extra, unsigned want)
{
    static char body[4 << 20];
    memset(body, 'x', sizeof(body));
    int fd = raw_connect(d, NULL);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "POST /execute HTTP/1.1\r\nHost: sbxd\r\nContent-Type: application/json\r\n"
                     "%sContent-Length: %zu\r\n\r\n",
                     extra, sizeof(body));
    ck_assert_int_eq(send_all(fd, head, (size_t)n), 0);
    ck_assert_msg(send_all(fd, body, sizeof(body)) == 0, "the body could not be sent whole: %s",
                  strerror(errno));
    struct raw *r = malloc(sizeof(*r));
    ck_assert_msg(raw_read(fd, r, 5000) == 0, "no answer after the whole body (%s)",
                  strerror(errno));
    ck_assert_int_eq(r->status, (int)want);
    ck_assert_ptr_nonnull(strstr(r->body, "\"code\""));
    free(r);
    close(fd);
}

START_TEST(early_answer_survives_a_client_that_sends_everything_first)
{
    struct daemon d;
    const char *args[] = {"--max-body-bytes", "64KiB", NULL};
    daemon_start(&d, args, NULL);
    send_whole_then_read(&d, "", 413);
    ck_assert(daemon_stop_clean(&d, 10000));
    const char *env[] = {"SBXD_TOKEN=s3cret-token-for-linger", NULL};
    daemon_start(&d, NULL, env);
    send_whole_then_read(&d, "", 401);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(client_cap_answers_429_to_that_client_only)
{
    struct daemon d;
    const char *args[] = {"--max-client-connections", "4", NULL};
    daemon_start(&d, args, NULL);
    int held[4];
    for (int i = 0; i < 4; i++)
        held[i] = busy_connection(&d, "127.0.0.3");
    usleep(300000);
    struct raw r;
    char code[64];
    ck_assert_int_eq(raw_request(&d, "127.0.0.3", "GET", "/files/", NULL, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(body_code(&r, code, sizeof(code)), "RESOURCE_EXHAUSTED");
    ck_assert_ptr_nonnull(strstr(r.body, "--max-client-connections"));
    ck_assert_int_eq(raw_request(&d, "127.0.0.4", "GET", "/files/", NULL, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    for (int i = 0; i < 4; i++)
        close(held[i]);
    usleep(200000);
    ck_assert_int_eq(raw_request(&d, "127.0.0.3", "GET", "/files/", NULL, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    char *t = scrape(&d, NULL);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"max_client_connections\"}"),
                        1);
    free(t);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(oversized_head_is_431)
{
    struct daemon d;
    const char *args[] = {"--max-header-bytes", "2048", NULL};
    daemon_start(&d, args, NULL);
    char big[3100];
    memset(big, 'a', sizeof(big));
    memcpy(big, "X-Big: ", 7);
    memcpy(big + sizeof(big) - 3, "\r\n", 3);
    struct raw r;
    char code[64];
    ck_assert_int_eq(raw_request(&d, NULL, "GET", "/healthz", big, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 431);
    ck_assert_str_eq(body_code(&r, code, sizeof(code)), "HEADERS_TOO_LARGE");
    ck_assert_ptr_nonnull(strstr(r.body, "--max-header-bytes"));
    big[1500] = '\r';
    big[1501] = '\n';
    big[1502] = '\0';
    ck_assert_int_eq(raw_request(&d, NULL, "GET", "/healthz", big, NULL, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    /* A head larger than the connection's whole buffer: the same JSON 431, read by a client
     * that sent all of it first. */
    int fd = raw_connect(&d, NULL);
    ck_assert_int_ge(fd, 0);
    /* 3 MiB: over --connection-memory (256 KiB by default) */
    ck_assert(send_huge_head(fd, "GET /healthz HTTP/1.1\r\nHost: sbxd\r\nX-Huge: ", 3 << 20, 0));
    struct raw *rh = malloc(sizeof(*rh));
    ck_assert_int_eq(raw_read(fd, rh, 5000), 0);
    ck_assert_int_eq(rh->status, 431);
    ck_assert_msg(header_has(rh, "Content-Type: application/json"), "head:\n%s", rh->head);
    ck_assert_str_eq(body_code(rh, code, sizeof(code)), "HEADERS_TOO_LARGE");
    free(rh);
    close(fd);
    char *t = scrape(&d, NULL);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"max_header_bytes\"}"), 1);
    free(t);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* A head too large for the connection's buffer, on a connection whose earlier request left
 * its bytes in the buffer (libmicrohttpd does not zero it between requests:
 * tools/mhd-patches), sent in pieces of several sizes, with a folded header line or without:
 * every time the same JSON 431. Before its error answer the library gives up the read buffer
 * while it may still look at what it held. */
START_TEST(oversized_heads_on_kept_connections_are_json_431)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL); /* --connection-memory 256KiB, the default */
    static const size_t pieces[] = {1, 700, 4096, 65536};
    char first[8192], pad[3001];
    memset(pad, 'q', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    snprintf(first, sizeof(first),
             "GET /healthz?pad=%.2000s HTTP/1.1\r\nHost: sbxd\r\nX-Pad: %s\r\n\r\n", pad, pad);
    struct raw *r = malloc(sizeof(*r));
    char code[64];
    for (int i = 0; i < 16; i++) {
        int fd = raw_connect(&d, NULL);
        ck_assert_int_ge(fd, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ck_assert_int_eq(send_all(fd, first, strlen(first)), 0);
        ck_assert_int_eq(raw_read(fd, r, 5000), 0);
        ck_assert_int_eq(r->status, 200);
        const char *line = i & 1 ? "GET /healthz HTTP/1.1\r\nHost: sbxd\r\nX-Fold: a\r\n b\r\n"
                                   "X-Huge: "
                                 : "GET /healthz HTTP/1.1\r\nHost: sbxd\r\nX-Huge: ";
        /* 300 KiB, over the 256 KiB buffer; the first 64 KiB in pieces. (sbxd may answer
         * before the end.) */
        (void)send_huge_head(fd, line, 300 * 1024, pieces[i % 4]);
        ck_assert_int_eq(raw_read(fd, r, 5000), 0);
        ck_assert_msg(r->status == 431, "round %d: HTTP %d, head:\n%s", i, r->status, r->head);
        ck_assert_msg(header_has(r, "Content-Type: application/json"), "round %d: head:\n%s", i,
                      r->head);
        ck_assert_str_eq(body_code(r, code, sizeof(code)), "HEADERS_TOO_LARGE");
        ck_assert_msg(strstr(r->body, "connection buffer"), "round %d: %s", i, r->body);
        close(fd);
    }
    free(r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* --connection-memory 1MiB: a head of 300 KiB fits in it, and
 * the answer is sbxd's own 431, which names --max-header-bytes (with the default 256 KiB it is
 * the library's, "too large for the connection buffer": the option takes effect). */
START_TEST(a_larger_connection_memory_holds_a_300k_head)
{
    struct daemon d;
    const char *args[] = {"--connection-memory", "1MiB", NULL};
    daemon_start(&d, args, NULL);
    struct raw *r = malloc(sizeof(*r));
    char code[64];
    int fd = raw_connect(&d, NULL);
    ck_assert_int_ge(fd, 0);
    ck_assert(send_huge_head(fd, "GET /healthz HTTP/1.1\r\nHost: sbxd\r\nX-Huge: ", 300 * 1024, 0));
    ck_assert_int_eq(raw_read(fd, r, 5000), 0);
    ck_assert_msg(r->status == 431, "HTTP %d, head:\n%s", r->status, r->head);
    ck_assert_str_eq(body_code(r, code, sizeof(code)), "HEADERS_TOO_LARGE");
    ck_assert_msg(strstr(r->body, "--max-header-bytes"), "%s", r->body);
    close(fd);
    free(r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* A kept-alive connection right after a small request holds little of its memory: the library
 * wrote zeros over its whole read buffer (half the connection's memory) at every request whose
 * bytes were all taken, so 100 such connections held 9 MiB with 256 KiB each (94 KiB per
 * connection), 34 MiB with 1 MiB each; about 15 KiB each now (tools/mhd-patches). Measured
 * before the 500 ms after which an idle connection gives its memory back. */
START_TEST(a_busy_connection_holds_little_memory)
{
    if (under_gvisor() || SANITIZED) {
        printf("busy connections' memory: skipped (%s)\n",
               under_gvisor() ? "gVisor commits private memory in chunks of up to 2 MiB: a busy "
                                "connection there holds its whole buffer"
                              : "the sanitizers' own memory");
        return;
    }
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    enum { N = 100 };
    int fds[N];
    struct raw *r = malloc(sizeof(*r));
    const char *req = "GET /healthz HTTP/1.1\r\nHost: sbxd\r\n\r\n";
    long base = daemon_rss_kb(&d);
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(&d, NULL);
        ck_assert_int_ge(fds[i], 0);
        ck_assert_int_eq(send_all(fds[i], req, strlen(req)), 0);
    }
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(raw_read(fds[i], r, 5000), 0);
        ck_assert_int_eq(r->status, 200);
    }
    long grown = daemon_rss_kb(&d) - base;
    printf("busy connections' memory: %d connections, +%ld KiB (%.1f KiB each)\n", N, grown,
           (double)grown / N);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(r);
    ck_assert_msg(grown < N * 48, "%d connections after one request each hold %ld KiB", N, grown);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* Every route that takes a body has a limit: 413 with a JSON error, and nothing written. */
START_TEST(every_route_limits_its_body)
{
    struct daemon d;
    const char *args[] = {"--max-body-bytes", "1KiB", "--max-upload-bytes", "4KiB", NULL};
    daemon_start(&d, args, NULL);
    struct http_resp hr;
    ck_assert_int_eq(
        http_request(&d, "POST", "/processes", NULL, "{\"command\":\"cat\"}", 17, 0, &hr), 0);
    ck_assert_int_eq(hr.status, 201);
    char stdin_path[128];
    snprintf(stdin_path, sizeof(stdin_path), "/processes/%s/stdin", jstr(hr.json, "id"));
    http_resp_free(&hr);

    static char big[8192];
    memset(big, ' ', sizeof(big));
    memcpy(big, "{\"command\":\"true\"", 17);
    big[sizeof(big) - 1] = '}';
    static char multipart[8400];
    int ml =
        snprintf(multipart, sizeof(multipart),
                 "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.bin\"\r\n"
                 "\r\n%.*s\r\n--b--\r\n",
                 6000, big);
    struct {
        const char *method, *path, *ctype, *body;
        size_t len;
    } cases[] = {
        {"POST", "/execute", "application/json", big, 2048},
        {"POST", "/processes", "application/json", big, 2048},
        {"POST", stdin_path, "application/octet-stream", big, 2048},
        {"PUT", "/files/big.bin", "application/octet-stream", big, 8192},
        {"PUT", "/v1/files/big2.bin", "application/octet-stream", big, 8192},
        {"POST", "/upload", "multipart/form-data; boundary=b", multipart, (size_t)ml},
        {"GET", "/healthz", "application/json", big, 2048},
    };
    int n413 = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char extra[128];
        snprintf(extra, sizeof(extra), "Content-Type: %s\r\n", cases[i].ctype);
        struct raw r;
        ck_assert_int_eq(raw_request(&d, NULL, cases[i].method, cases[i].path, extra, cases[i].body,
                                     cases[i].len, &r),
                         0);
        ck_assert_msg(r.status == 413, "%s %s: %d %s", cases[i].method, cases[i].path, r.status,
                      r.body);
        ck_assert_msg(strstr(r.body, "\"message\":"), "%s: no message", cases[i].path);
        n413++;
    }
    /* Nothing of the refused uploads was written. */
    char path[512];
    snprintf(path, sizeof(path), "%s/big.bin", d.ws);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/big2.bin", d.ws);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/up.bin", d.ws);
    ck_assert_int_ne(access(path, F_OK), 0);
    char *t = scrape(&d, NULL);
    ck_assert_double_eq(metric(t, "sbxd_limit_rejections_total{limit=\"max_body_bytes\"}"), n413);
    free(t);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(idle_connection_is_closed)
{
    struct daemon d;
    const char *args[] = {"--idle-timeout-ms", "1000", NULL};
    daemon_start(&d, args, NULL);
    int fd = raw_connect(&d, NULL);
    ck_assert_int_ge(fd, 0);
    const char *req = "GET /healthz HTTP/1.1\r\nHost: sbxd\r\n\r\n";
    ck_assert_int_eq(send_all(fd, req, strlen(req)), 0);
    struct raw *r = malloc(sizeof(*r));
    ck_assert_int_eq(raw_read(fd, r, 5000), 0);
    ck_assert_int_eq(r->status, 200);
    free(r);
    /* Kept alive, then idle: closed after the idle timeout (whole seconds, checked by the
     * connection's own poll), long before the default minute. */
    double t0 = now_ms();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 5000), 1);
    char b;
    ck_assert_int_eq(recv(fd, &b, 1, 0), 0);
    double waited = now_ms() - t0;
    ck_assert_double_lt(waited, 3500);
    ck_assert_double_gt(waited, 500);
    close(fd);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

Suite *hardening_suite(void)
{
    Suite *s = suite_create("hardening");
    TCase *tc = tcase_create("hardening");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, metrics_speak_the_prometheus_text_format);
    tcase_add_test(tc, metrics_have_a_series_per_front);
    tcase_add_test(tc, metrics_count_what_happened);
    tcase_add_test(tc, metrics_scrape_is_cheap);
    tcase_add_test(tc, token_guards_every_route_but_health);
    tcase_add_test(tc, token_never_leaks);
    tcase_add_test(tc, token_file_and_bad_token_settings);
    tcase_add_test(tc, slowloris_does_not_starve_healthz);
    tcase_add_test(tc, connection_cap_answers_503_and_still_serves_health);
    tcase_add_test(tc, client_cap_answers_429_to_that_client_only);
    tcase_add_test(tc, idle_connections_make_room_at_the_cap);
    tcase_add_test(tc, flood_from_one_address_leaves_health_answering);
    tcase_add_test(tc, flood_from_many_addresses_leaves_health_answering);
    tcase_add_test(tc, early_answer_survives_a_client_that_sends_everything_first);
    tcase_add_test(tc, oversized_head_is_431);
    tcase_add_test(tc, oversized_heads_on_kept_connections_are_json_431);
    tcase_add_test(tc, a_larger_connection_memory_holds_a_300k_head);
    tcase_add_test(tc, a_busy_connection_holds_little_memory);
    tcase_add_test(tc, every_route_limits_its_body);
    tcase_add_test(tc, idle_connection_is_closed);
    suite_add_tcase(s, tc);
    return s;
}
