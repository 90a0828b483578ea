/*
 * sbxd-soak: load and soak test of a real sbxd (tools/soak runs it; docs/testing.md).
 *
 *   sbxd-soak [--sbxd PATH | --url URL [--pid PID]] [--duration D] [--clients N]
 *             [--valgrind] [--rss-slack SIZE] [-- SBXD-ARGS...]
 *
 * Starts sbxd on an ephemeral loopback port with a fresh workspace (or attaches to a running
 * one), records what it holds at rest (fds, RSS, threads, descendant processes, cgroup
 * leaves), drives it with a weighted mix of every kind of request from N threads with a
 * keep-alive libcurl handle each, validates every answer, then waits until it is at rest
 * again and checks that it holds what it held before. With --valgrind sbxd runs under
 * memcheck and must end its run with a clean report.
 *
 * Exit status: 0 when every check passed, 1 when one failed, 2 for bad usage or when sbxd
 * could not be started.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* options and small utilities                                              */

struct opts {
    const char *sbxd;
    const char *url;
    pid_t pid; /* with --url: the process to look at in /proc (0: none) */
    double duration_s;
    int clients;
    bool valgrind;
    long rss_slack_kb;
    const char *token;
    char **sbxd_args; /* after "--" */
    int sbxd_argc;
};

static struct opts g_opt;
static volatile sig_atomic_t g_stop;
static char g_base[256];                 /* http://HOST:PORT */
static char g_root[64];                  /* this run's directory in the workspace: soak-PID */
static const char *g_file_mode = "0644"; /* of a file PUT without ?mode (0664 under uid) */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void on_signal(int sig)
{
    (void)sig;
    if (g_stop) /* a second Ctrl-C: give up at once */
        _exit(130);
    g_stop = 1;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("soak: out of memory\n", stderr);
        exit(2);
    }
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fputs("soak: out of memory\n", stderr);
        exit(2);
    }
    return q;
}

/* xorshift64*: fast, per thread, good enough to choose requests and fill files. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static unsigned rnd_below(uint64_t *s, unsigned n)
{
    return (unsigned)((rnd(s) >> 11) % n);
}

/* "30", "30s", "5m", "2h" into seconds; -1 when malformed. */
static double parse_duration(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0)
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0)
        return v;
    if (strcmp(end, "m") == 0)
        return v * 60;
    if (strcmp(end, "h") == 0)
        return v * 3600;
    return -1;
}

/* A size as sbxd takes it: bytes, K/KiB, M/MiB, G/GiB (1024s), KB, MB, GB (1000s); in KiB. */
static long parse_size_kb(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},        {"K", 1024},      {"KiB", 1024}, {"M", 1048576}, {"MiB", 1048576},
                 {"G", 1 << 30}, {"GiB", 1 << 30}, {"KB", 1e3},   {"MB", 1e6},    {"GB", 1e9}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].suffix) == 0)
            return (long)(v * units[i].mult / 1024.0 + 0.5);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* latency histograms and per-kind counts                                   */

enum kind {
    K_EXEC,        /* echo, by command or argv */
    K_EXEC_OUTPUT, /* printf of some KiB */
    K_EXEC_EXIT3,  /* a command that fails with status 3 */
    K_EXEC_STDERR, /* output on stderr only */
    K_STREAM,      /* NDJSON-streamed /execute */
    K_TIMEOUT,     /* sleep 5 with timeout_ms 50: a deliberate timeout */
    K_PUT,
    K_GET,
    K_LIST,
    K_DELETE,
    K_PROC_START,
    K_PROC_OUTPUT,
    K_PROC_SIGNAL,
    K_PROC_DELETE,
    K_HEALTHZ,
    K_ERR_404, /* deliberate errors */
    K_ERR_400,
    K_COUNT
};

static const char *const kind_name[K_COUNT] = {
    "execute",    "execute-output", "execute-exit3", "execute-stderr", "execute-stream",
    "timeout",    "files-put",      "files-get",     "files-list",     "files-delete",
    "proc-start", "proc-output",    "proc-signal",   "proc-delete",    "healthz",
    "error-404",  "error-400"};

/* Log-scale buckets of 2 % from 1 us to about 30 hours: percentiles within 1 %, whatever
 * the run's length (a sample per request would be gigabytes over a day). */
#define NBUCKETS 1300

struct kstats {
    uint64_t n, failed, throttled;
    double max_ms;
    uint32_t hist[NBUCKETS];
};

static int bucket_of(double ms)
{
    double us = ms * 1e3;
    if (us < 1)
        return 0;
    int b = 1 + (int)(log(us) / log(1.02));
    return b < NBUCKETS ? b : NBUCKETS - 1;
}

static double bucket_ms(int b)
{
    return b == 0 ? 0.0005 : pow(1.02, b - 1) * 1.01 / 1e3;
}

static double hist_pct(const struct kstats *k, double p)
{
    uint64_t want = (uint64_t)ceil(p / 100.0 * (double)k->n), seen = 0;
    for (int b = 0; b < NBUCKETS; b++) {
        seen += k->hist[b];
        if (seen >= want && seen > 0)
            return bucket_ms(b);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* failures                                                                 */

#define FAILURES_SHOWN 10

static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_failed;

struct resp {
    long status;
    CURLcode rc;
    char *body;
    size_t len, cap;
    char ctype[128];
    char curl_err[CURL_ERROR_SIZE];
    cJSON *json;
    double ms;
};

/* One unexpected answer: counted, and the first few printed with what was asked and got. */
__attribute__((format(printf, 4, 5))) static void
failure(const char *method, const char *path, const struct resp *r, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_fail_mu);
    uint64_t n = ++g_failed;
    if (n <= FAILURES_SHOWN) {
        char head[201] = "";
        size_t hl = 0;
        for (size_t i = 0; r && r->body && i < r->len && hl < sizeof(head) - 1; i++)
            head[hl++] = r->body[i] >= 0x20 && r->body[i] < 0x7f ? r->body[i] : '.';
        head[hl] = '\0';
        if (r && r->rc != CURLE_OK)
            fprintf(stderr, "soak: failure %" PRIu64 ": %s %s: %s; transfer failed: %s (%s)\n", n,
                    method, path, why, curl_easy_strerror(r->rc), r->curl_err);
        else
            fprintf(stderr, "soak: failure %" PRIu64 ": %s %s: %s; status %ld, body: %s\n", n,
                    method, path, why, r ? r->status : 0L, head);
    }
    pthread_mutex_unlock(&g_fail_mu);
}

/* ------------------------------------------------------------------------ */
/* HTTP                                                                     */

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct resp *r = ud;
    size_t n = size * nmemb;
    if (r->len + n + 1 > r->cap) {
        r->cap = (r->len + n + 1) * 2;
        r->body = xrealloc(r->body, r->cap);
    }
    memcpy(r->body + r->len, p, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

static long request_timeout_ms(void)
{
    return g_opt.valgrind ? 180000L : 30000L;
}

/*
 * One request on handle h (its connections kept alive between calls). body may be NULL;
 * ctype defaults to application/json for a body; accept may be NULL. Fills r (its buffer is
 * reused) and parses a JSON body. Returns false when the transfer itself failed.
 */
static bool http(CURL *h, const char *method, const char *path, const char *accept,
                 const char *ctype, const void *body, size_t body_len, struct resp *r)
{
    char url[1024], hdr[512];
    struct curl_slist *hdrs = NULL;
    snprintf(url, sizeof(url), "%s%s", g_base, path);
    cJSON_Delete(r->json);
    r->json = NULL;
    r->len = 0;
    r->status = 0;
    r->ctype[0] = r->curl_err[0] = '\0';
    if (r->body)
        r->body[0] = '\0';

    curl_easy_reset(h); /* options only: live connections stay */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, request_timeout_ms());
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, request_timeout_ms());
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->curl_err);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    if (strcmp(method, "GET") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        snprintf(hdr, sizeof(hdr), "Content-Type: %s", ctype ? ctype : "application/json");
        hdrs = curl_slist_append(hdrs, hdr);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (accept) {
        snprintf(hdr, sizeof(hdr), "Accept: %s", accept);
        hdrs = curl_slist_append(hdrs, hdr);
    }
    if (g_opt.token) {
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", g_opt.token);
        hdrs = curl_slist_append(hdrs, hdr);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    double t0 = now_ms();
    r->rc = curl_easy_perform(h);
    r->ms = now_ms() - t0;
    curl_slist_free_all(hdrs);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    const char *ct = NULL;
    if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct)
        snprintf(r->ctype, sizeof(r->ctype), "%s", ct);
    if (r->rc == CURLE_OK && r->len && strncmp(r->ctype, "application/json", 16) == 0)
        r->json = cJSON_ParseWithLength(r->body, r->len);
    return r->rc == CURLE_OK;
}

/* A request outside the load (health checks, the final checks): a handle of its own, closed
 * afterwards so sbxd holds no connection of ours while it is measured. */
static bool ctl_request(const char *method, const char *path, struct resp *r)
{
    CURL *h = curl_easy_init();
    if (!h)
        return false;
    bool ok = http(h, method, path, NULL, NULL, NULL, 0, r);
    curl_easy_cleanup(h);
    return ok;
}

static void resp_free(struct resp *r)
{
    cJSON_Delete(r->json);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------------------------ */
/* JSON expectations                                                        */

static const cJSON *jget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool jstr_is(const cJSON *o, const char *k, const char *want)
{
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) && (!want || strcmp(v->valuestring, want) == 0);
}

static bool jnum_is(const cJSON *o, const char *k, double want)
{
    const cJSON *v = jget(o, k);
    return cJSON_IsNumber(v) && v->valuedouble == want;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = jget(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The fields every /execute result has (and an exit event, without the output). */
static bool result_shape_ok(const cJSON *o, bool with_output)
{
    static const char *const nums[] = {"exit_code",   "stdout_bytes", "stderr_bytes",
                                       "duration_ms", "cpu_ms",       "memory_peak_bytes"};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
        if (!cJSON_IsNumber(jget(o, nums[i])))
            return false;
    if (!jstr_is(o, "id", NULL) || !jstr_is(o, "status", NULL) || !jstr_is(o, "encoding", "utf8"))
        return false;
    if (!cJSON_IsBool(jget(o, "timed_out")) || !cJSON_IsBool(jget(o, "oom_killed")))
        return false;
    const cJSON *sig = jget(o, "signal");
    if (!cJSON_IsNull(sig) && !cJSON_IsNumber(sig))
        return false;
    if (!with_output)
        return !jget(o, "stdout") && !jget(o, "stderr");
    return jstr_is(o, "stdout", NULL) && jstr_is(o, "stderr", NULL) &&
           cJSON_IsFalse(jget(o, "stdout_truncated")) && cJSON_IsFalse(jget(o, "stderr_truncated"));
}

/* A command that ran to its end: status, exit code, no signal, no timeout. */
static bool result_is(const cJSON *o, const char *status, int exit_code, int sig, bool timed_out)
{
    return jstr_is(o, "status", status) && jnum_is(o, "exit_code", exit_code) &&
           (sig ? jnum_is(o, "signal", sig) : cJSON_IsNull(jget(o, "signal"))) &&
           cJSON_IsBool(jget(o, "timed_out")) && cJSON_IsTrue(jget(o, "timed_out")) == timed_out;
}

/* An error answer: this status and exactly {"code": code, "message": "..."}. */
static bool error_is(const struct resp *r, long status, const char *code)
{
    return r->status == status && cJSON_IsObject(r->json) && jstr_is(r->json, "code", code) &&
           strlen(jstr(r->json, "message")) > 5 && cJSON_GetArraySize(r->json) == 2;
}

/*
 * A stream of NDJSON events: /execute's (offsets per stream) or a process output's (one
 * sequence, offset + bytes). Collects stdout and stderr, keeps the last event (exit or end),
 * and checks the order: start first, then output and heartbeats, then exactly one exit
 * (or end) last, offsets without gaps.
 */
struct events {
    char *out, *err;
    size_t out_len, err_len;
    cJSON *last; /* the exit or end event, detached */
    char why[160];
};

static void events_free(struct events *e)
{
    free(e->out);
    free(e->err);
    cJSON_Delete(e->last);
    memset(e, 0, sizeof(*e));
}

static void append(char **dst, size_t *len, const char *s)
{
    size_t n = strlen(s);
    *dst = xrealloc(*dst, *len + n + 1);
    memcpy(*dst + *len, s, n + 1);
    *len += n;
}

static bool events_parse(const struct resp *r, bool combined, struct events *e)
{
    memset(e, 0, sizeof(*e));
    e->out = strdup("");
    e->err = strdup("");
    if (strncmp(r->ctype, "application/x-ndjson", 20) != 0) {
        snprintf(e->why, sizeof(e->why), "content type '%.60s', not application/x-ndjson",
                 r->ctype);
        return false;
    }
    int n = 0;
    size_t off = 0;
    while (off < r->len) {
        const char *line = r->body + off;
        const char *nl = memchr(line, '\n', r->len - off);
        if (!nl) {
            snprintf(e->why, sizeof(e->why), "event %d does not end with a newline", n);
            return false;
        }
        off = (size_t)(nl - r->body) + 1;
        cJSON *ev = cJSON_ParseWithLength(line, (size_t)(nl - line));
        const char *type = jstr(ev, "type");
        bool ok = cJSON_IsObject(ev) && *type;
        if (ok && e->last) {
            snprintf(e->why, sizeof(e->why), "event %d (%s) after the %s event", n, type,
                     jstr(e->last, "type"));
            ok = false;
        } else if (ok && (n == 0) != (strcmp(type, "start") == 0)) {
            snprintf(e->why, sizeof(e->why), "event %d is '%s'; start must come first, once", n,
                     type);
            ok = false;
        } else if (ok && (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0)) {
            bool is_out = type[3] == 'o';
            const char *data = jstr(ev, "data");
            double want = combined ? (double)(e->out_len + e->err_len)
                                   : (double)(is_out ? e->out_len : e->err_len);
            if (!jnum_is(ev, "offset", want) ||
                (combined && !jnum_is(ev, "bytes", (double)strlen(data)))) {
                snprintf(e->why, sizeof(e->why), "%s event at offset %.0f, expected %.0f", type,
                         jnum(ev, "offset"), want);
                ok = false;
            } else if (is_out) {
                append(&e->out, &e->out_len, data);
            } else {
                append(&e->err, &e->err_len, data);
            }
        } else if (ok && (strcmp(type, "exit") == 0 || strcmp(type, "end") == 0)) {
            e->last = ev;
            ev = NULL;
        } else if (ok && strcmp(type, "start") != 0 && strcmp(type, "heartbeat") != 0) {
            snprintf(e->why, sizeof(e->why), "unexpected event '%s'", type);
            ok = false;
        } else if (!ok) {
            snprintf(e->why, sizeof(e->why), "event %d is not a JSON object with a type", n);
        }
        cJSON_Delete(ev);
        if (!ok)
            return false;
        n++;
    }
    if (!e->last) {
        snprintf(e->why, sizeof(e->why), "the stream ended without an exit or end event");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* the clients                                                              */

struct client {
    int idx;
    pthread_t thread;
    CURL *h;
    uint64_t rng;
    uint64_t seq;
    struct resp r;
    char *buf; /* file contents */
    size_t buf_cap;
    struct kstats k[K_COUNT];
    uint64_t requests, deliberate, throttled, timeouts;
};

static double g_deadline;

/* Count a request of kind k; returns whether it was throttled (429, counted apart). */
static bool account(struct client *c, enum kind k, const struct resp *r)
{
    struct kstats *s = &c->k[k];
    __atomic_store_n(&c->requests, c->requests + 1, __ATOMIC_RELAXED); /* watch_load reads */
    s->n++;
    s->hist[bucket_of(r->ms)]++;
    if (r->ms > s->max_ms)
        s->max_ms = r->ms;
    if (r->rc == CURLE_OK && r->status == 429 && error_is(r, 429, "RESOURCE_EXHAUSTED")) {
        s->throttled++;
        c->throttled++;
        sleep_ms(5 + rnd_below(&c->rng, 20)); /* as Retry-After asks, only shorter */
        return true;
    }
    return false;
}

#define FAIL(c, kind, method, path, ...)                                                           \
    do {                                                                                           \
        (c)->k[kind].failed++;                                                                     \
        failure(method, path, &(c)->r, __VA_ARGS__);                                               \
    } while (0)

/* POST /execute with body; expects 200 and a result object. Returns the result or NULL
 * (throttled or failed, both counted). */
static const cJSON *execute(struct client *c, enum kind k, const char *body)
{
    struct resp *r = &c->r;
    http(c->h, "POST", "/execute", NULL, NULL, body, strlen(body), r);
    if (account(c, k, r))
        return NULL;
    if (r->rc != CURLE_OK || r->status != 200 || !cJSON_IsObject(r->json)) {
        FAIL(c, k, "POST", "/execute", "expected 200 and a JSON result for %.120s", body);
        return NULL;
    }
    if (!result_shape_ok(r->json, true)) {
        FAIL(c, k, "POST", "/execute", "result lacks fields for %.120s", body);
        return NULL;
    }
    return r->json;
}

static void op_echo(struct client *c)
{
    char body[256], want[64];
    snprintf(want, sizeof(want), "soak-%d-%" PRIu64, c->idx, c->seq);
    if (c->seq % 2)
        snprintf(body, sizeof(body), "{\"command\":\"echo %s\"}", want);
    else
        snprintf(body, sizeof(body), "{\"argv\":[\"echo\",\"%s\"]}", want);
    strcat(want, "\n");
    const cJSON *j = execute(c, K_EXEC, body);
    if (j && !(result_is(j, "exited", 0, 0, false) && jstr_is(j, "stdout", want) &&
               jstr_is(j, "stderr", "") && jnum_is(j, "stdout_bytes", (double)strlen(want))))
        FAIL(c, K_EXEC, "POST", "/execute", "wrong result for %s", body);
}

/* printf of 1-16 KiB of letters, given in the command itself: a larger body and output. */
static void op_output(struct client *c)
{
    size_t n = 1024 + rnd_below(&c->rng, 15 * 1024);
    char *want = xmalloc(n + 1), *body = xmalloc(n + 64);
    for (size_t i = 0; i < n; i++)
        want[i] = (char)('a' + rnd_below(&c->rng, 26));
    want[n] = '\0';
    snprintf(body, n + 64, "{\"command\":\"printf '%%s' %s\"}", want);
    const cJSON *j = execute(c, K_EXEC_OUTPUT, body);
    if (j && !(result_is(j, "exited", 0, 0, false) && jstr_is(j, "stdout", want) &&
               jnum_is(j, "stdout_bytes", (double)n) && jstr_is(j, "stderr", "")))
        FAIL(c, K_EXEC_OUTPUT, "POST", "/execute", "wrong result for printf of %zu bytes", n);
    free(want);
    free(body);
}

static void op_exit3(struct client *c)
{
    const cJSON *j = execute(c, K_EXEC_EXIT3, "{\"command\":\"echo out; exit 3\"}");
    if (j && !(result_is(j, "exited", 3, 0, false) && jstr_is(j, "stdout", "out\n")))
        FAIL(c, K_EXEC_EXIT3, "POST", "/execute", "expected exit_code 3 and stdout 'out'");
}

static void op_stderr(struct client *c)
{
    const cJSON *j = execute(c, K_EXEC_STDERR, "{\"command\":\"sh -c 'echo x >&2'\"}");
    if (j && !(result_is(j, "exited", 0, 0, false) && jstr_is(j, "stdout", "") &&
               jstr_is(j, "stderr", "x\n") && jnum_is(j, "stderr_bytes", 2)))
        FAIL(c, K_EXEC_STDERR, "POST", "/execute", "expected stderr 'x' only");
}

static void op_timeout(struct client *c)
{
    const cJSON *j = execute(c, K_TIMEOUT, "{\"command\":\"sleep 5\",\"timeout_ms\":50}");
    if (!j)
        return;
    /* Killed by the deadline, well before sleep would have ended by itself. */
    if (!(result_is(j, "timeout", 137, 9, true) && jnum(j, "duration_ms") < 4000))
        FAIL(c, K_TIMEOUT, "POST", "/execute", "expected status timeout after 50 ms");
    else
        c->timeouts++;
}

static void op_stream(struct client *c)
{
    static const char body[] = "{\"command\":\"echo one; echo two >&2; echo three\"}";
    struct resp *r = &c->r;
    http(c->h, "POST", "/execute", "application/x-ndjson", NULL, body, strlen(body), r);
    if (account(c, K_STREAM, r))
        return;
    if (r->rc != CURLE_OK || r->status != 200) {
        FAIL(c, K_STREAM, "POST", "/execute", "expected 200 and a stream of events");
        return;
    }
    struct events e;
    if (!events_parse(r, false, &e))
        FAIL(c, K_STREAM, "POST", "/execute", "stream: %s", e.why);
    else if (!jstr_is(e.last, "type", "exit") || !result_shape_ok(e.last, false) ||
             !result_is(e.last, "exited", 0, 0, false) || strcmp(e.out, "one\nthree\n") != 0 ||
             strcmp(e.err, "two\n") != 0 || !jnum_is(e.last, "stdout_bytes", 10) ||
             !jnum_is(e.last, "stderr_bytes", 4))
        FAIL(c, K_STREAM, "POST", "/execute", "stream: wrong output or exit event");
    events_free(&e);
}

/* Fill c->buf with n random bytes. */
static void fill_random(struct client *c, size_t n)
{
    if (n > c->buf_cap) {
        c->buf_cap = n;
        c->buf = xrealloc(c->buf, n);
    }
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rnd(&c->rng);
        memcpy(c->buf + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* PUT a random file (1 B to 256 KiB, small sizes as likely as large ones), GET it back,
 * list its directory, DELETE it. */
static void op_files(struct client *c)
{
    struct resp *r = &c->r;
    char dir[128], path[192], rel[160], name[48];
    snprintf(dir, sizeof(dir), "/files/%s/c%d/", g_root, c->idx);
    snprintf(name, sizeof(name), "f%" PRIu64 ".bin", c->seq);
    snprintf(path, sizeof(path), "%s%s", dir, name);
    snprintf(rel, sizeof(rel), "%s/c%d/%s", g_root, c->idx, name);
    unsigned shift = rnd_below(&c->rng, 19); /* 2^0 .. 2^18 */
    size_t n = ((size_t)1 << shift) + rnd_below(&c->rng, 1u << shift);
    if (n > 256 * 1024)
        n = 256 * 1024;
    fill_random(c, n);

    http(c->h, "PUT", path, NULL, "application/octet-stream", c->buf, n, r);
    account(c, K_PUT, r);
    if (r->rc != CURLE_OK || r->status != 201 || !jstr_is(r->json, "path", rel) ||
        !jstr_is(r->json, "name", name) || !jstr_is(r->json, "type", "file") ||
        !jnum_is(r->json, "size", (double)n) || !jstr_is(r->json, "mode", g_file_mode)) {
        FAIL(c, K_PUT, "PUT", path, "expected 201 and the entry of %zu bytes", n);
        return;
    }

    http(c->h, "GET", path, NULL, NULL, NULL, 0, r);
    account(c, K_GET, r);
    if (r->rc != CURLE_OK || r->status != 200 || r->len != n || memcmp(r->body, c->buf, n) != 0 ||
        strcmp(r->ctype, "application/octet-stream") != 0)
        FAIL(c, K_GET, "GET", path, "expected the %zu bytes written (got %zu)", n, r->len);

    http(c->h, "GET", dir, NULL, NULL, NULL, 0, r);
    account(c, K_LIST, r);
    const cJSON *entries = jget(r->json, "entries"), *e0 = cJSON_GetArrayItem(entries, 0);
    if (r->rc != CURLE_OK || r->status != 200 || !jnum_is(r->json, "total", 1) ||
        cJSON_GetArraySize(entries) != 1 || !jstr_is(e0, "name", name) ||
        !jstr_is(e0, "type", "file") || !jnum_is(e0, "size", (double)n))
        FAIL(c, K_LIST, "GET", dir, "expected a listing of exactly %s", name);

    http(c->h, "DELETE", path, NULL, NULL, NULL, 0, r);
    account(c, K_DELETE, r);
    if (r->rc != CURLE_OK || r->status != 204 || r->len != 0)
        FAIL(c, K_DELETE, "DELETE", path, "expected 204");
}

/* POST /processes; returns the new id into id (false: throttled or failed). */
static bool proc_start(struct client *c, const char *command, char *id, size_t idlen)
{
    struct resp *r = &c->r;
    char body[256];
    snprintf(body, sizeof(body), "{\"command\":\"%s\"}", command);
    http(c->h, "POST", "/processes", NULL, NULL, body, strlen(body), r);
    if (account(c, K_PROC_START, r))
        return false;
    if (r->rc != CURLE_OK || r->status != 201 || !jstr_is(r->json, "id", NULL) ||
        !cJSON_IsNumber(jget(r->json, "pid"))) {
        FAIL(c, K_PROC_START, "POST", "/processes", "expected 201 {id,pid} for %s", command);
        return false;
    }
    snprintf(id, idlen, "%s", jstr(r->json, "id"));
    return true;
}

/* GET the output; with follow until the exit event. Fills e; false on failure (counted). */
static bool proc_output(struct client *c, const char *id, bool follow, struct events *e)
{
    struct resp *r = &c->r;
    char path[160];
    snprintf(path, sizeof(path), "/processes/%s/output%s", id, follow ? "?follow=true" : "");
    http(c->h, "GET", path, NULL, NULL, NULL, 0, r);
    account(c, K_PROC_OUTPUT, r);
    memset(e, 0, sizeof(*e));
    if (r->rc != CURLE_OK || r->status != 200) {
        FAIL(c, K_PROC_OUTPUT, "GET", path, "expected 200 and the output");
        return false;
    }
    if (!events_parse(r, true, e)) {
        FAIL(c, K_PROC_OUTPUT, "GET", path, "output: %s", e->why);
        events_free(e);
        return false;
    }
    if (follow && !jstr_is(e->last, "type", "exit")) {
        FAIL(c, K_PROC_OUTPUT, "GET", path, "a followed output must end with exit");
        events_free(e);
        return false;
    }
    return true;
}

/* DELETE the process; expects 200 and its final object with this status. */
static void proc_delete(struct client *c, const char *id, const char *status)
{
    struct resp *r = &c->r;
    char path[128];
    snprintf(path, sizeof(path), "/processes/%s", id);
    http(c->h, "DELETE", path, NULL, NULL, NULL, 0, r);
    account(c, K_PROC_DELETE, r);
    if (r->rc != CURLE_OK || r->status != 200 || !jstr_is(r->json, "id", id) ||
        !jstr_is(r->json, "status", status))
        FAIL(c, K_PROC_DELETE, "DELETE", path, "expected 200 and status %s", status);
}

/* A short background process: start, follow its output to the end, delete. */
static void op_proc(struct client *c)
{
    char id[64], cmd[128], want[64];
    snprintf(want, sizeof(want), "hi-%d-%" PRIu64 "\n", c->idx, c->seq);
    snprintf(cmd, sizeof(cmd), "echo hi-%d-%" PRIu64 "; sleep 0.2", c->idx, c->seq);
    if (!proc_start(c, cmd, id, sizeof(id)))
        return;
    struct events e;
    if (proc_output(c, id, true, &e)) {
        if (strcmp(e.out, want) != 0 || !result_is(e.last, "exited", 0, 0, false) ||
            !jnum_is(e.last, "output_end", (double)strlen(want)))
            FAIL(c, K_PROC_OUTPUT, "GET", id, "expected '%.*s' and exit 0", (int)strlen(want) - 1,
                 want);
        events_free(&e);
    }
    proc_delete(c, id, "exited");
}

/* A long one, signalled once it runs: SIGTERM to its tree ends it 'signaled' 15. */
static void op_proc_signal(struct client *c)
{
    char id[64], path[128];
    struct resp *r = &c->r;
    if (!proc_start(c, "echo ready; sleep 30", id, sizeof(id)))
        return;
    /* Signal it once it has said it runs: what a client would do. */
    double until = now_ms() + (g_opt.valgrind ? 60000 : 10000);
    bool ready = false;
    while (!ready && now_ms() < until) {
        struct events e;
        if (!proc_output(c, id, false, &e))
            break;
        ready = strcmp(e.out, "ready\n") == 0;
        events_free(&e);
        if (!ready)
            sleep_ms(10);
    }
    if (ready) {
        snprintf(path, sizeof(path), "/processes/%s/signal", id);
        static const char body[] = "{\"signal\":\"SIGTERM\"}";
        http(c->h, "POST", path, NULL, NULL, body, strlen(body), r);
        account(c, K_PROC_SIGNAL, r);
        if (r->rc != CURLE_OK || r->status != 200 || !jstr_is(r->json, "id", id) ||
            !jstr_is(r->json, "signal", "SIGTERM")) {
            FAIL(c, K_PROC_SIGNAL, "POST", path, "expected 200 {id,signal}");
        } else {
            struct events e;
            if (proc_output(c, id, true, &e)) {
                if (!result_is(e.last, "signaled", 143, 15, false))
                    FAIL(c, K_PROC_OUTPUT, "GET", id, "expected signaled 15 after SIGTERM");
                events_free(&e);
            }
            proc_delete(c, id, "signaled");
            return;
        }
    } else {
        FAIL(c, K_PROC_OUTPUT, "GET", id, "the process never printed 'ready'");
    }
    proc_delete(c, id, "canceled"); /* still running: the DELETE kills it */
}

/* DELETE of a running process: killed, answered 'canceled'. */
static void op_proc_kill(struct client *c)
{
    char id[64];
    if (proc_start(c, "sleep 30", id, sizeof(id)))
        proc_delete(c, id, "canceled");
}

static void op_healthz(struct client *c)
{
    struct resp *r = &c->r;
    http(c->h, "GET", "/healthz", NULL, NULL, NULL, 0, r);
    account(c, K_HEALTHZ, r);
    if (r->rc != CURLE_OK || r->status != 200 || !jstr_is(r->json, "status", "ok") ||
        !cJSON_IsNumber(jget(r->json, "running")))
        FAIL(c, K_HEALTHZ, "GET", "/healthz", "expected 200 status ok");
}

static void op_errors(struct client *c)
{
    struct resp *r = &c->r;
    http(c->h, "GET", "/soak-no-such-route", NULL, NULL, NULL, 0, r);
    account(c, K_ERR_404, r);
    c->deliberate++;
    if (r->rc != CURLE_OK || !error_is(r, 404, "NOT_FOUND"))
        FAIL(c, K_ERR_404, "GET", "/soak-no-such-route", "expected 404 NOT_FOUND");

    static const char bad[] = "{\"command\": \"echo";
    http(c->h, "POST", "/execute", NULL, NULL, bad, strlen(bad), r);
    account(c, K_ERR_400, r);
    c->deliberate++;
    if (r->rc != CURLE_OK || !error_is(r, 400, "INVALID_ARGUMENT"))
        FAIL(c, K_ERR_400, "POST", "/execute", "expected 400 INVALID_ARGUMENT for bad JSON");
}

/* The mix, by weight (out of 100). Files and processes are sequences of several requests. */
static const struct {
    void (*fn)(struct client *);
    unsigned weight;
} g_mix[] = {
    {op_echo, 18},       {op_output, 8},    {op_exit3, 6},   {op_stderr, 6},
    {op_stream, 11},     {op_timeout, 3},   {op_files, 22},  {op_proc, 12},
    {op_proc_signal, 2}, {op_proc_kill, 2}, {op_healthz, 5}, {op_errors, 5},
};

static void *client_run(void *arg)
{
    struct client *c = arg;
    unsigned total = 0;
    for (size_t i = 0; i < sizeof(g_mix) / sizeof(g_mix[0]); i++)
        total += g_mix[i].weight;
    while (!g_stop && now_ms() < g_deadline) {
        unsigned pick = rnd_below(&c->rng, total);
        size_t i = 0;
        while (pick >= g_mix[i].weight)
            pick -= g_mix[i++].weight;
        c->seq++;
        g_mix[i].fn(c);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* sbxd: start, its log, stop                                               */

static struct {
    pid_t pid; /* started by us (0: attached) */
    char dir[512];
    char ws[PATH_MAX];
    char vg_log[PATH_MAX + 32]; /* valgrind's, with %p */
    int log_fd;                 /* read end of sbxd's stderr */
    pthread_t log_thread;
    pthread_mutex_t mu;
    int port;
    bool exited; /* reaped already: status holds its wait status */
    int status;
    uint64_t lines, warnings, errors;
    char first_bad[5][512]; /* the first warning or error lines */
    char tail[16][512];     /* the last lines */
    uint64_t tail_n;
} g_d = {.mu = PTHREAD_MUTEX_INITIALIZER, .log_fd = -1};

static void log_line(const char *line)
{
    pthread_mutex_lock(&g_d.mu);
    g_d.lines++;
    snprintf(g_d.tail[g_d.tail_n++ % 16], sizeof(g_d.tail[0]), "%s", line);
    const char *p = strstr(line, "\"event\":\"listening\"");
    if (p && !g_d.port && (p = strstr(p, "\"port\":")))
        g_d.port = atoi(p + 7);
    bool warn = strstr(line, "\"level\":\"warn\"") != NULL;
    bool err = strstr(line, "\"level\":\"error\"") != NULL;
    if ((warn || err) && g_d.warnings + g_d.errors < 5)
        snprintf(g_d.first_bad[g_d.warnings + g_d.errors], sizeof(g_d.first_bad[0]), "%s", line);
    g_d.warnings += warn;
    g_d.errors += err;
    pthread_mutex_unlock(&g_d.mu);
}

/* sbxd's stderr, read as fast as it comes (an audit line per command: hours of them would
 * fill a disk), keeping counts, the first warnings and the last lines. */
static void *log_reader(void *arg)
{
    (void)arg;
    char buf[65536], line[4096];
    size_t ll = 0;
    ssize_t n;
    while ((n = read(g_d.log_fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (ll < sizeof(line) - 1)
                    line[ll++] = buf[i];
                continue;
            }
            line[ll] = '\0';
            log_line(line);
            ll = 0;
        }
    }
    if (ll) {
        line[ll] = '\0';
        log_line(line);
    }
    return NULL;
}

static void print_log_tail(void)
{
    pthread_mutex_lock(&g_d.mu);
    fprintf(stderr, "soak: the last lines of sbxd's log:\n");
    uint64_t from = g_d.tail_n > 16 ? g_d.tail_n - 16 : 0;
    for (uint64_t i = from; i < g_d.tail_n; i++)
        fprintf(stderr, "  %s\n", g_d.tail[i % 16]);
    pthread_mutex_unlock(&g_d.mu);
}

/* The end of valgrind's log of pid in dir. */
static void print_file_tail(const char *dir, pid_t pid)
{
    char path[PATH_MAX], line[1024], tail[20][1024];
    int n = 0;
    snprintf(path, sizeof(path), "%s/valgrind.%d.log", dir, (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        snprintf(tail[n++ % 20], sizeof(tail[0]), "%s", line);
    if (f)
        fclose(f);
    fprintf(stderr, "soak: the end of %s:\n", path);
    for (int i = n > 20 ? n - 20 : 0; i < n; i++)
        fprintf(stderr, "  %s", tail[i % 20]);
}

/* The suppression of valgrind false positives: its mount(2) wrapper reads `type` as a string
 * even for MS_PRIVATE/MS_REMOUNT calls, where the kernel ignores it and sbxd passes NULL (in
 * spawn_ns_setup, spawn_probe.c, which a namespace's init runs). */
static const char vg_supp[] = "{\n"
                              "   sbxd-mount-null-type\n"
                              "   Memcheck:Param\n"
                              "   mount(type)\n"
                              "   ...\n"
                              "   fun:*ns_setup\n"
                              "}\n";

/* Whether the sbxd started here has ended (then reaped: g_d.status). */
static bool sbxd_gone(void)
{
    if (g_d.pid > 0 && !g_d.exited && waitpid(g_d.pid, &g_d.status, WNOHANG) == g_d.pid)
        g_d.exited = true;
    return g_d.exited;
}

static bool sbxd_start(void)
{
    snprintf(g_d.dir, sizeof(g_d.dir), "%s/sbxd-soak-XXXXXX",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_d.dir)) {
        perror("soak: mkdtemp");
        return false;
    }
    snprintf(g_d.ws, sizeof(g_d.ws), "%s/ws", g_d.dir);
    if (mkdir(g_d.ws, 0755) < 0) {
        perror("soak: mkdir workspace");
        return false;
    }
    char supp[PATH_MAX + 16], supp_opt[PATH_MAX + 32], log_opt[PATH_MAX + 64];
    snprintf(supp, sizeof(supp), "%s/valgrind.supp", g_d.dir);
    snprintf(g_d.vg_log, sizeof(g_d.vg_log), "%s/valgrind.%%p.log", g_d.dir);
    snprintf(supp_opt, sizeof(supp_opt), "--suppressions=%s", supp);
    snprintf(log_opt, sizeof(log_opt), "--log-file=%s", g_d.vg_log);
    if (g_opt.valgrind) {
        FILE *f = fopen(supp, "w");
        if (!f || fputs(vg_supp, f) < 0 || fclose(f) != 0) {
            perror("soak: valgrind suppressions");
            return false;
        }
    }

    const char *argv[128];
    int argc = 0;
    if (g_opt.valgrind) {
        static const char *const vg[] = {
            "valgrind",
            "--tool=memcheck",
            "--error-exitcode=99",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect",
            "--track-fds=no",
            /* Commands are not sbxd: they run natively once exec'd. What a forked child does
             * before its execve is sbxd's code, and still checked (its own log file). */
            "--trace-children=no",
        };
        for (size_t i = 0; i < sizeof(vg) / sizeof(vg[0]); i++)
            argv[argc++] = vg[i];
        argv[argc++] = supp_opt;
        argv[argc++] = log_opt;
    }
    /* No warm kernel: a Python kernel started beside the load (and libzmq loaded for it)
     * would be counted as what the load left behind. */
    const char *fixed[] = {g_opt.sbxd,
                           "--listen",
                           "127.0.0.1:0",
                           "--grpc-listen",
                           "127.0.0.1:0",
                           "--workspace",
                           g_d.ws,
                           "--log-format",
                           "json",
                           "--max-running",
                           "64",
                           "--max-processes",
                           "64",
                           "--warm-contexts",
                           "0"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[argc++] = fixed[i];
    /* Under valgrind, not the PID-namespace backend: its slot inits are clone(CLONE_VM |
     * CLONE_NEWPID | ...) children sharing the daemon's memory, a "general clone()" memcheck
     * cannot run (it ends the whole process). uid needs root; pgid is what is left. */
    bool isolation_given = false;
    for (int i = 0; i < g_opt.sbxd_argc; i++)
        isolation_given |= strncmp(g_opt.sbxd_args[i], "--isolation", 11) == 0;
    if (g_opt.valgrind && !isolation_given) {
        argv[argc++] = "--isolation";
        argv[argc++] = geteuid() == 0 ? "uid" : "pgid";
    }
    for (int i = 0; i < g_opt.sbxd_argc && argc < 126; i++)
        argv[argc++] = g_opt.sbxd_args[i];
    argv[argc] = NULL;

    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        perror("soak: pipe");
        return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("soak: fork");
        return false;
    }
    if (pid == 0) {
        /* A process group of its own: Ctrl-C stops the soak, which then measures and stops
         * sbxd itself. And if the soak dies, sbxd goes too (and drains first). */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(p[1], 2) < 0)
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "soak: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    g_d.pid = pid;
    g_d.log_fd = p[0];
    pthread_create(&g_d.log_thread, NULL, log_reader, NULL);

    double until = now_ms() + (g_opt.valgrind ? 120000 : 10000);
    while (now_ms() < until) {
        pthread_mutex_lock(&g_d.mu);
        int port = g_d.port;
        pthread_mutex_unlock(&g_d.mu);
        if (port) {
            snprintf(g_base, sizeof(g_base), "http://127.0.0.1:%d", port);
            return true;
        }
        if (sbxd_gone()) {
            sleep_ms(100);
            fprintf(stderr, "soak: sbxd exited during start-up (wait status %d)\n", g_d.status);
            print_log_tail();
            if (g_opt.valgrind)
                print_file_tail(g_d.dir, pid);
            return false;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "soak: sbxd did not say it listens within %d s\n", g_opt.valgrind ? 120 : 10);
    print_log_tail();
    return false;
}

/* SIGTERM, then wait; returns the wait status, or -1 when it had to be killed. */
static int sbxd_stop(void)
{
    if (g_d.pid <= 0)
        return -1;
    if (sbxd_gone()) {
        g_d.pid = 0;
        pthread_join(g_d.log_thread, NULL);
        close(g_d.log_fd);
        return g_d.status;
    }
    kill(g_d.pid, SIGTERM);
    double until = now_ms() + (g_opt.valgrind ? 180000 : 30000);
    int st = -1;
    while (now_ms() < until) {
        if (waitpid(g_d.pid, &st, WNOHANG) == g_d.pid)
            break;
        st = -1;
        sleep_ms(20);
    }
    if (st == -1) {
        fprintf(stderr, "soak: sbxd did not stop after SIGTERM; killed\n");
        kill(g_d.pid, SIGKILL);
        waitpid(g_d.pid, NULL, 0);
    }
    g_d.pid = 0;
    pthread_join(g_d.log_thread, NULL); /* its stderr has closed */
    close(g_d.log_fd);
    return st;
}

/* ------------------------------------------------------------------------ */
/* what sbxd holds: /proc and its cgroup                                    */

struct measure {
    int fds, threads, children, cg_leaves;
    long rss_kb;
};

static pid_t g_pid; /* the process looked at (0: none) */
static char g_cgroup[PATH_MAX];

static int count_fds(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(p);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long status_field(pid_t pid, const char *key)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

static pid_t parent_of(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* the name may hold anything */
    int ppid = 0;
    return rp && sscanf(rp + 1, " %*c %d", &ppid) == 1 ? ppid : 0;
}

/* Processes whose parent chain leads to pid (zombies included: sbxd must reap them). */
static int count_descendants(pid_t pid)
{
    static pid_t ppid_of[4 * 1024 * 1024]; /* pid_max can be 4M */
    pid_t pids[32768];
    int np = 0, n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t p = (pid_t)atoi(e->d_name);
        if (p <= 0 || p >= (pid_t)(sizeof(ppid_of) / sizeof(ppid_of[0])) || np == 32768)
            continue;
        ppid_of[p] = parent_of(p);
        pids[np++] = p;
    }
    if (d)
        closedir(d);
    for (int i = 0; i < np; i++) {
        pid_t up = pids[i];
        for (int depth = 0; depth < 64 && up > 1 && up != pid; depth++)
            up = ppid_of[up];
        n += up == pid && pids[i] != pid;
    }
    for (int i = 0; i < np; i++)
        ppid_of[pids[i]] = 0;
    return n;
}

/* Directories under dir that have none under them. */
static int count_leaves(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int leaves = 0, subdirs = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        int n = count_leaves(sub);
        subdirs++;
        leaves += n > 0 ? n : 0;
    }
    closedir(d);
    return subdirs ? leaves : 1;
}

static void measure(struct measure *m)
{
    memset(m, 0, sizeof(*m));
    m->fds = m->threads = m->children = m->cg_leaves = -1;
    m->rss_kb = -1;
    if (g_pid > 0) {
        m->fds = count_fds(g_pid);
        m->rss_kb = status_field(g_pid, "VmRSS");
        m->threads = (int)status_field(g_pid, "Threads");
        m->children = count_descendants(g_pid);
    }
    if (g_cgroup[0]) {
        int n = count_leaves(g_cgroup);
        m->cg_leaves = n == 1 ? 0 : n; /* the base alone, without subdirectories: no leaf */
    }
}

/* What /healthz says. */
struct health {
    int running, processes;
    char cgroup[PATH_MAX]; /* the cgroup commands' leaves are made under, or "" */
    char tree_kill[16];
};

static bool healthz(struct health *hz)
{
    struct resp r = {0};
    memset(hz, 0, sizeof(*hz));
    hz->running = hz->processes = -1;
    bool ok = ctl_request("GET", "/healthz", &r) && r.status == 200 && cJSON_IsObject(r.json);
    if (ok) {
        hz->running = (int)jnum(r.json, "running");
        hz->processes = (int)jnum(r.json, "processes");
        const cJSON *iso = jget(r.json, "isolation");
        const char *cg = jstr(iso, "cgroup");
        if (cg[0] == '/')
            snprintf(hz->cgroup, sizeof(hz->cgroup), "%s", cg);
        else if (strcmp(cg, "v2") == 0 && jstr(iso, "cgroup_base")[0] == '/')
            snprintf(hz->cgroup, sizeof(hz->cgroup), "%s", jstr(iso, "cgroup_base"));
        snprintf(hz->tree_kill, sizeof(hz->tree_kill), "%s", jstr(iso, "tree_kill"));
    }
    resp_free(&r);
    return ok;
}

/* Wait until sbxd runs nothing and keeps no background process (GET /processes is empty). */
static bool wait_idle(double ms, struct health *hz, int *listed)
{
    double until = now_ms() + ms;
    for (;;) {
        struct resp r = {0};
        *listed = -1;
        if (healthz(hz) && ctl_request("GET", "/processes", &r) && r.status == 200)
            *listed = cJSON_GetArraySize(jget(r.json, "processes"));
        resp_free(&r);
        if (hz->running == 0 && hz->processes == 0 && *listed == 0)
            return true;
        if (now_ms() >= until || sbxd_gone())
            return false;
        sleep_ms(100);
    }
}

/* Wait until the fd and thread counts have not moved for 500 ms (connection threads end
 * after their connection closes), then measure. */
static void measure_settled(struct measure *m)
{
    double until = now_ms() + (g_opt.valgrind ? 30000 : 5000), stable_since = now_ms();
    struct measure prev;
    measure(&prev);
    for (;;) {
        sleep_ms(50);
        measure(m);
        if (m->fds != prev.fds || m->threads != prev.threads || m->children != prev.children)
            stable_since = now_ms();
        prev = *m;
        if (now_ms() - stable_since >= 500 || now_ms() >= until)
            return;
    }
}

/* Files whose names start with prefix, anywhere under dir; the first is kept in first. */
static int count_named(const char *dir, const char *prefix, char *first, size_t flen)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            if (!n++ && first)
                snprintf(first, flen, "%s", sub);
        }
        if (e->d_type == DT_DIR)
            n += count_named(sub, prefix, n ? NULL : first, flen);
    }
    closedir(d);
    return n;
}

/* What the clients' directories still hold, through the API (works attached too). */
static int leftover_entries(char *first, size_t flen)
{
    int n = 0;
    for (int i = 0; i < g_opt.clients; i++) {
        char path[128];
        struct resp r = {0};
        snprintf(path, sizeof(path), "/files/%s/c%d/", g_root, i);
        if (ctl_request("GET", path, &r) && r.status == 200) {
            int k = cJSON_GetArraySize(jget(r.json, "entries"));
            if (k && !n)
                snprintf(first, flen, "%s%s", path,
                         jstr(cJSON_GetArrayItem(jget(r.json, "entries"), 0), "name"));
            n += k;
        }
        resp_free(&r);
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* valgrind's report                                                        */

/* A number after key in a valgrind line ("definitely lost: 1,024 bytes"); -1 when absent. */
static long vg_number(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    if (!p)
        return -1;
    p += strlen(key);
    long v = 0;
    bool any = false;
    for (; *p == ' ' || *p == ',' || (*p >= '0' && *p <= '9'); p++)
        if (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p - '0');
            any = true;
        } else if (*p == ' ' && any) {
            break;
        }
    return any ? v : -1;
}

/* Whether a valgrind line starts one of its error reports (a memory error, or a leak record
 * shown: *leak). */
static bool vg_error_start(const char *text, bool *leak)
{
    static const char *const starts[] = {"Invalid ",
                                         "Conditional jump",
                                         "Use of uninitialised",
                                         "Syscall param",
                                         "Mismatched",
                                         "Source and destination overlap",
                                         "Argument ",
                                         "Jump to the invalid",
                                         "Process terminating",
                                         "Warning: invalid file descriptor"};
    *leak = strstr(text, "are definitely lost in loss record") ||
            strstr(text, "are indirectly lost in loss record");
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++)
        if (strncmp(text, starts[i], strlen(starts[i])) == 0)
            return true;
    return *leak;
}

/*
 * Check one valgrind log and say whether it is clean. sbxd's own (main_log): its summary
 * lines are printed, and it must show no error and nothing definitely or indirectly lost.
 * A forked child's: only memory errors count. Its leak records are no finding: sbxd's
 * CLONE_VM | CLONE_VFORK helpers become plain forks under valgrind, and a forked copy has a
 * single thread, so whatever only the other threads' stacks point to looks lost there.
 * The first three reports of a log are printed.
 */
static bool vg_check_log(const char *path, bool main_log)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "soak: valgrind: no log %s\n", path);
        return false;
    }
    char line[1024];
    long errors = -1, definite = 0, indirect = 0, memory_errors = 0;
    int shown = 0;
    bool in_error = false;
    while (fgets(line, sizeof(line), f)) {
        long v;
        if ((v = vg_number(line, "ERROR SUMMARY:")) >= 0)
            errors = v;
        if ((v = vg_number(line, "definitely lost:")) >= 0)
            definite = v;
        if ((v = vg_number(line, "indirectly lost:")) >= 0)
            indirect = v;
        const char *text = strstr(line, "== ");
        if (!text || line[0] != '=')
            continue; /* valgrind's own notes (--PID--) */
        text += 3;
        if (main_log && (strstr(text, "ERROR SUMMARY:") || strstr(text, "lost:") ||
                         strstr(text, "in use at exit:") || strstr(text, "still reachable:")))
            printf("soak: valgrind: %s", text);
        bool leak;
        if (!in_error && vg_error_start(text, &leak) && (main_log || !leak)) {
            memory_errors += !leak;
            in_error = shown++ < 3;
        }
        if (in_error) {
            fprintf(stderr, "soak: valgrind %s: %s", main_log ? "(sbxd)" : "(forked child)", text);
            in_error = *text != '\n' && *text != '\0';
        }
    }
    fclose(f);
    if (!main_log)
        return memory_errors == 0;
    return errors == 0 && definite == 0 && indirect == 0;
}

/* Every log of the run: sbxd's own (pid) and those of forked children that ended without
 * execve (which valgrind still followed). */
static bool vg_check(pid_t pid, int *children_logs, int *children_bad)
{
    char main_log[PATH_MAX + 64], pidstr[32];
    snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
    snprintf(main_log, sizeof(main_log), "%s/valgrind.%s.log", g_d.dir, pidstr);
    bool ok = vg_check_log(main_log, true);
    *children_logs = *children_bad = 0;
    DIR *d = opendir(g_d.dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "valgrind.", 9) != 0 || !strstr(e->d_name, ".log") ||
            strncmp(e->d_name + 9, pidstr, strlen(pidstr)) == 0)
            continue;
        char p[PATH_MAX + 300];
        snprintf(p, sizeof(p), "%s/%s", g_d.dir, e->d_name);
        ++*children_logs;
        if (!vg_check_log(p, false) && ++*children_bad <= 3)
            fprintf(stderr, "soak: valgrind: memory errors in %s\n", p);
    }
    if (d)
        closedir(d);
    return ok && *children_bad == 0;
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */

/*
 * One command before the baseline: what sbxd sets up at its first command and keeps (the
 * /dev/null it gives commands as stdin is opened then, job.c) belongs to "at rest". Its PID
 * namespace pool grows by a spare slot meanwhile, which it ends after 30 s unused: at rest is
 * after that too. Fills base.
 */
static void warm_up(bool pidns, struct measure *base)
{
    struct measure cold;
    measure_settled(&cold);
    struct resp r = {0};
    static const char body[] = "{\"command\":\"echo warm\"}";
    CURL *h = curl_easy_init();
    if (!http(h, "POST", "/execute", NULL, NULL, body, strlen(body), &r) || r.status != 200 ||
        !result_is(r.json, "exited", 0, 0, false) || !jstr_is(r.json, "stdout", "warm\n"))
        failure("POST", "/execute", &r, "the warm-up command failed");
    curl_easy_cleanup(h);
    resp_free(&r);
    measure_settled(base);
    if (!pidns || base->children <= cold.children)
        return;
    printf("soak: warm-up: waiting up to 35 s for sbxd to end the spare PID-namespace slot it "
           "made\n");
    double until = now_ms() + 35000;
    while (base->children > cold.children && now_ms() < until && !sbxd_gone()) {
        sleep_ms(200);
        measure(base);
    }
    measure_settled(base);
}

/* While the load runs: the peaks, and a line a minute on a long run. */
static void watch_load(struct client *cs, int n, struct measure *peak)
{
    double start = now_ms(), next = start + 60000;
    memset(peak, 0, sizeof(*peak));
    while (!g_stop && now_ms() < g_deadline) {
        sleep_ms(g_deadline - now_ms() < 500 ? g_deadline - now_ms() + 1 : 500);
        if (g_d.pid > 0 && sbxd_gone()) { /* a crash: no point in going on */
            printf("soak: sbxd ended during the load (wait status %d)\n", g_d.status);
            g_stop = 2;
            break;
        }
        struct measure m;
        measure(&m);
        if (m.rss_kb > peak->rss_kb)
            peak->rss_kb = m.rss_kb;
        if (m.fds > peak->fds)
            peak->fds = m.fds;
        if (m.threads > peak->threads)
            peak->threads = m.threads;
        if (m.children > peak->children)
            peak->children = m.children;
        if (now_ms() < next || g_deadline - start < 90000)
            continue;
        next += 60000;
        uint64_t req = 0;
        for (int i = 0; i < n; i++)
            req += __atomic_load_n(&cs[i].requests, __ATOMIC_RELAXED);
        pthread_mutex_lock(&g_fail_mu);
        uint64_t failed = g_failed;
        pthread_mutex_unlock(&g_fail_mu);
        printf("soak: %.0f s: %" PRIu64 " requests, %" PRIu64
               " failed; now fds %d, RSS %.1f MiB, threads %d, children %d\n",
               (now_ms() - start) / 1e3, req, failed, m.fds, (double)m.rss_kb / 1024, m.threads,
               m.children);
    }
}

static void usage(FILE *f)
{
    fputs("usage: sbxd-soak [--sbxd PATH | --url URL [--pid PID]] [--duration D] [--clients N]\n"
          "                 [--valgrind] [--rss-slack SIZE] [-- SBXD-ARGS...]\n"
          "  --duration D     how long the load runs: 30s (default), 10m, 2h (s, m, h)\n"
          "  --clients N      concurrent clients, each a keep-alive connection (default 64; 8\n"
          "                   with --valgrind)\n"
          "  --valgrind       run sbxd under valgrind memcheck; no RSS bound; its report must\n"
          "                   be clean (default duration 20s)\n"
          "  --rss-slack SIZE RSS sbxd may have grown by at the end (default 4MiB)\n"
          "  --url URL        attach to a running sbxd instead; --pid PID for the /proc checks\n"
          "  -- ARGS          more arguments for the sbxd started (e.g. --isolation pgid)\n"
          "SBXD_TOKEN, when set, goes as 'Authorization: Bearer' on every request.\n",
          f);
}

static bool parse_args(int argc, char **argv)
{
    g_opt.duration_s = -1;
    g_opt.clients = -1;
    g_opt.rss_slack_kb = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) {
            g_opt.sbxd_args = argv + i + 1;
            g_opt.sbxd_argc = argc - i - 1;
            break;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--valgrind") == 0) {
            g_opt.valgrind = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "soak: %s needs a value\n", a);
            return false;
        }
        i++;
        if (strcmp(a, "--sbxd") == 0) {
            g_opt.sbxd = v;
        } else if (strcmp(a, "--url") == 0) {
            g_opt.url = v;
        } else if (strcmp(a, "--pid") == 0) {
            g_opt.pid = (pid_t)atoi(v);
        } else if (strcmp(a, "--duration") == 0) {
            if ((g_opt.duration_s = parse_duration(v)) <= 0) {
                fprintf(stderr, "soak: --duration: '%s' is not a duration (30s, 10m, 2h)\n", v);
                return false;
            }
        } else if (strcmp(a, "--clients") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 4096) {
                fprintf(stderr, "soak: --clients: '%s' is not 1 to 4096\n", v);
                return false;
            }
            g_opt.clients = (int)n;
        } else if (strcmp(a, "--rss-slack") == 0) {
            if ((g_opt.rss_slack_kb = parse_size_kb(v)) < 0) {
                fprintf(stderr, "soak: --rss-slack: '%s' is not a size\n", v);
                return false;
            }
        } else {
            fprintf(stderr, "soak: unknown option %s\n", a);
            return false;
        }
    }
    if (!g_opt.sbxd == !g_opt.url) {
        fprintf(stderr, "soak: give one of --sbxd PATH and --url URL\n");
        return false;
    }
    if (g_opt.url && g_opt.valgrind) {
        fprintf(stderr, "soak: --valgrind starts sbxd itself; it cannot attach to --url\n");
        return false;
    }
    if (g_opt.duration_s < 0)
        g_opt.duration_s = g_opt.valgrind ? 20 : 30;
    if (g_opt.clients < 0)
        g_opt.clients = g_opt.valgrind ? 8 : 64;
    const char *tok = getenv("SBXD_TOKEN");
    g_opt.token = tok && *tok ? tok : NULL;
    return true;
}

static void print_table(const struct kstats *k)
{
    printf("soak: %-15s %9s %9s %9s %9s %9s %7s\n", "kind", "requests", "p50 ms", "p99 ms",
           "max ms", "throttled", "failed");
    for (int i = 0; i < K_COUNT; i++)
        printf("soak: %-15s %9" PRIu64 " %9.2f %9.2f %9.1f %9" PRIu64 " %7" PRIu64 "\n",
               kind_name[i], k[i].n, hist_pct(&k[i], 50), hist_pct(&k[i], 99), k[i].max_ms,
               k[i].throttled, k[i].failed);
}

static void merge(struct kstats *dst, const struct kstats *src)
{
    dst->n += src->n;
    dst->failed += src->failed;
    dst->throttled += src->throttled;
    if (src->max_ms > dst->max_ms)
        dst->max_ms = src->max_ms;
    for (int b = 0; b < NBUCKETS; b++)
        dst->hist[b] += src->hist[b];
}

/* A check that failed, said on its own line; the summary then ends FAIL. */
static int g_checks_failed;

__attribute__((format(printf, 1, 2))) static void check_failed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("soak: FAIL: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    g_checks_failed++;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!parse_args(argc, argv)) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(g_root, sizeof(g_root), "soak-%d", (int)getpid());

    if (g_opt.url) {
        snprintf(g_base, sizeof(g_base), "%s", g_opt.url);
        size_t l = strlen(g_base);
        while (l && g_base[l - 1] == '/')
            g_base[--l] = '\0';
        g_pid = g_opt.pid;
    } else {
        if (!sbxd_start()) {
            sbxd_stop();
            return 2;
        }
        g_pid = g_d.pid;
    }

    /* At rest first: nothing running, nothing kept, connections closed. */
    struct health hz;
    int listed;
    double idle_ms = g_opt.valgrind ? 120000 : 10000;
    if (!wait_idle(idle_ms, &hz, &listed)) {
        fprintf(stderr,
                "soak: sbxd is not idle (running %d, processes %d, listed %d) or not answering\n",
                hz.running, hz.processes, listed);
        if (g_d.pid) {
            if (sbxd_gone())
                fprintf(stderr, "soak: sbxd ended (wait status %d)\n", g_d.status);
            print_log_tail();
            if (g_opt.valgrind)
                print_file_tail(g_d.dir, g_d.pid);
        }
        sbxd_stop();
        return 2;
    }
    snprintf(g_cgroup, sizeof(g_cgroup), "%s", hz.cgroup);
    /* PID-namespace isolation keeps a pool of namespaces ready (an init and three fds each):
     * after a burst, those beyond the spare ones end after 30 s unused (spawn.c,
     * SLOT_IDLE_MS). At rest means after that. */
    bool pidns = strcmp(hz.tree_kill, "pidns") == 0;
    if (strcmp(hz.tree_kill, "uid") == 0)
        g_file_mode = "0664";
    char who[32] = "";
    if (g_pid > 0)
        snprintf(who, sizeof(who), " pid %d", (int)g_pid);
    printf("soak: sbxd%s at %s%s, isolation %s; %d clients for %.0f s\n", who, g_base,
           g_opt.valgrind ? " under valgrind" : "", hz.tree_kill[0] ? hz.tree_kill : "?",
           g_opt.clients, g_opt.duration_s);
    if (g_pid <= 0)
        printf("soak: no --pid: fds, RSS, threads and children are not checked\n");
    struct measure base, after;
    warm_up(pidns, &base);
    if (g_d.pid > 0 && sbxd_gone()) {
        fprintf(stderr, "soak: sbxd ended before the load (wait status %d)\n", g_d.status);
        print_log_tail();
        sbxd_stop();
        return 2;
    }
    if (g_pid > 0)
        printf("soak: at rest: fds %d, RSS %.1f MiB, threads %d, children %d, cgroup %s\n",
               base.fds, (double)base.rss_kb / 1024, base.threads, base.children,
               g_cgroup[0] ? g_cgroup : "none");

    /* The load. */
    struct client *cs = calloc((size_t)g_opt.clients, sizeof(*cs));
    if (!cs) {
        fputs("soak: out of memory\n", stderr);
        return 2;
    }
    double t0 = now_ms();
    g_deadline = t0 + g_opt.duration_s * 1e3;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < g_opt.clients; i++) {
        cs[i].idx = i;
        cs[i].rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1) ^ (uint64_t)getpid() << 32;
        cs[i].h = curl_easy_init();
        if (!cs[i].h || pthread_create(&cs[i].thread, &attr, client_run, &cs[i]) != 0) {
            fprintf(stderr, "soak: cannot start client %d\n", i);
            g_stop = 1;
            g_opt.clients = i;
            break;
        }
    }
    pthread_attr_destroy(&attr);
    struct measure peak;
    watch_load(cs, g_opt.clients, &peak);
    struct kstats *total = calloc(K_COUNT, sizeof(*total));
    uint64_t requests = 0, deliberate = 0, throttled = 0, timeouts = 0;
    for (int i = 0; i < g_opt.clients; i++) {
        pthread_join(cs[i].thread, NULL);
        curl_easy_cleanup(cs[i].h); /* closes its connection */
        for (int k = 0; k < K_COUNT; k++)
            merge(&total[k], &cs[i].k[k]);
        requests += cs[i].requests;
        deliberate += cs[i].deliberate;
        throttled += cs[i].throttled;
        timeouts += cs[i].timeouts;
        resp_free(&cs[i].r);
        free(cs[i].buf);
    }
    double secs = (now_ms() - t0) / 1e3;
    if (g_stop == 1)
        printf("soak: interrupted after %.0f s\n", secs);

    /* At rest again: the same resources as before. */
    if (!wait_idle(g_opt.valgrind ? 60000 : 10000, &hz, &listed))
        check_failed("not idle 10 s after the load: running %d, processes %d, /processes lists "
                     "%d",
                     hz.running, hz.processes, listed);
    char first[PATH_MAX + 300] = "";
    int left = leftover_entries(first, sizeof(first));
    if (left)
        check_failed("%d entries left in the clients' directories (first: %s)", left, first);
    int tmp = g_d.ws[0] ? count_named(g_d.ws, ".sbxd-upload-", first, sizeof(first)) : 0;
    if (tmp)
        check_failed("%d upload temporary files left in the workspace (first: %s)", tmp, first);
    struct resp r = {0};
    char root_path[128];
    snprintf(root_path, sizeof(root_path), "/files/%s?recursive=true", g_root);
    CURL *h = curl_easy_init();
    if (!http(h, "DELETE", root_path, NULL, NULL, NULL, 0, &r) || r.status != 204)
        check_failed("DELETE %s: status %ld", root_path, r.status);
    curl_easy_cleanup(h);
    resp_free(&r);

    /* Connection threads end asynchronously; namespace slots after 30 s. */
    double settle = (g_opt.valgrind ? 30000 : 5000) + (pidns ? 35000 : 0);
    double until = now_ms() + settle, said = now_ms() + 5000;
    for (;;) {
        measure_settled(&after);
        if ((after.fds == base.fds && after.threads == base.threads &&
             after.children == base.children && after.cg_leaves == base.cg_leaves) ||
            now_ms() >= until || sbxd_gone())
            break;
        if (pidns && said && now_ms() >= said) {
            printf("soak: after the load: fds %d, children %d; waiting up to %.0f s more for "
                   "sbxd to end its unused PID-namespace slots\n",
                   after.fds, after.children, (until - now_ms()) / 1e3);
            said = 0;
        }
        sleep_ms(200);
    }
    if (after.fds != base.fds)
        check_failed("fds %d at rest before, %d after", base.fds, after.fds);
    if (after.threads != base.threads)
        check_failed("threads %d at rest before, %d after", base.threads, after.threads);
    if (after.children != base.children)
        check_failed("%d descendant processes of sbxd at rest before, %d after", base.children,
                     after.children);
    if (after.cg_leaves != base.cg_leaves)
        check_failed("cgroup leaves under %s: %d before, %d after", g_cgroup, base.cg_leaves,
                     after.cg_leaves);
    long growth = after.rss_kb - base.rss_kb;
    if (!g_opt.valgrind && g_pid > 0 && growth > g_opt.rss_slack_kb)
        check_failed("RSS grew by %.2f MiB (from %.2f to %.2f MiB), more than %.2f MiB",
                     (double)growth / 1024, (double)base.rss_kb / 1024, (double)after.rss_kb / 1024,
                     (double)g_opt.rss_slack_kb / 1024);
    if (g_failed)
        check_failed("%" PRIu64 " unexpected answers (the first %d are above)", g_failed,
                     FAILURES_SHOWN);

    /* Started here: stop it; it must end well (and, under valgrind, with a clean report). */
    pid_t started = g_d.pid;
    if (started) {
        double stop0 = now_ms();
        int st = sbxd_stop();
        if (!(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            char how[64] = "it had to be killed";
            if (st != -1 && WIFEXITED(st))
                snprintf(how, sizeof(how), "exit status %d%s", WEXITSTATUS(st),
                         WEXITSTATUS(st) == 99 && g_opt.valgrind ? ": valgrind found errors" : "");
            else if (st != -1 && WIFSIGNALED(st))
                snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(st));
            check_failed("sbxd did not exit 0 after SIGTERM (%s)", how);
            print_log_tail();
        } else {
            printf("soak: sbxd stopped after SIGTERM in %.1f s, exit status 0\n",
                   (now_ms() - stop0) / 1e3);
        }
        if (g_opt.valgrind) {
            int clogs, cbad;
            if (!vg_check(started, &clogs, &cbad))
                check_failed("valgrind reported errors or leaks (logs in %s)", g_d.dir);
            printf("soak: valgrind: %d forked children left a log, %d of them with memory "
                   "errors\n",
                   clogs, cbad);
        }
    }
    pthread_mutex_lock(&g_d.mu);
    if (g_d.warnings || g_d.errors) {
        printf("soak: sbxd logged %" PRIu64 " warnings and %" PRIu64 " errors; the first:\n",
               g_d.warnings, g_d.errors);
        for (uint64_t i = 0; i < 5 && i < g_d.warnings + g_d.errors; i++)
            printf("  %s\n", g_d.first_bad[i]);
    }
    if (g_d.errors)
        check_failed("sbxd logged %" PRIu64 " errors", g_d.errors);
    pthread_mutex_unlock(&g_d.mu);

    print_table(total);
    if (g_pid > 0)
        printf("soak: peak during the load: fds %d, RSS %.1f MiB, threads %d, children %d\n",
               peak.fds, (double)peak.rss_kb / 1024, peak.threads, peak.children);
    /* The resources, before -> after ("not measured" without a pid to look at). */
    char res[256] = "fds, RSS, threads and children not measured";
    if (g_pid > 0) {
        char children[48];
        if (after.children == base.children && base.children <= 0)
            snprintf(children, sizeof(children), "children %d", after.children);
        else
            snprintf(children, sizeof(children), "children %d -> %d", base.children,
                     after.children);
        snprintf(res, sizeof(res),
                 "fds %d -> %d, RSS %.1f -> %.1f MiB (%+.1f), threads %d -> %d, %s", base.fds,
                 after.fds, (double)base.rss_kb / 1024, (double)after.rss_kb / 1024,
                 (double)growth / 1024, base.threads, after.threads, children);
    }
    printf("soak: %d clients, %.0f s: %" PRIu64 " requests (%.0f/s), %" PRIu64 " failed, %" PRIu64
           " deliberate errors, %" PRIu64 " throttled, %" PRIu64
           " timeouts; %s, cgroups %d -> %d: %s\n",
           g_opt.clients, secs, requests, secs > 0 ? (double)requests / secs : 0.0, g_failed,
           deliberate, throttled, timeouts, res, base.cg_leaves < 0 ? 0 : base.cg_leaves,
           after.cg_leaves < 0 ? 0 : after.cg_leaves, g_checks_failed ? "FAIL" : "PASS");

    if (g_d.dir[0]) {
        if (g_checks_failed) {
            printf("soak: sbxd's workspace%s kept in %s\n",
                   g_opt.valgrind ? " and valgrind's logs are" : " is", g_d.dir);
        } else {
            char cmd[PATH_MAX + 32];
            snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_d.dir);
            if (system(cmd) != 0)
                fprintf(stderr, "soak: could not remove %s\n", g_d.dir);
        }
    }
    free(cs);
    free(total);
    curl_global_cleanup();
    return g_checks_failed ? 1 : 0;
}
