#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sbxd/metrics.h"

/* The statuses sbxd answers with; anything else is counted as "other". */
static const unsigned statuses[] = {200, 201, 204, 206, 400, 401, 403, 404, 405, 408, 409,
                                    411, 413, 415, 416, 429, 431, 500, 503, 507, 0};
#define NSTATUS (sizeof(statuses) / sizeof(statuses[0]))

static const char *const limit_names[LIM_N] = {
    "max_running",     "max_processes",    "max_connections", "max_client_connections",
    "request_timeout", "max_header_bytes", "max_body_bytes",  "unauthorized",
    "stdin_pending",   "stdin_timeout",    "max_queued",      "queue_timeout",
    "web_page"};

static struct {
    uint64_t limits[LIM_N];
    uint64_t http[METRICS_MAX_ROUTES][NSTATUS];
    uint64_t bytes_in[METRICS_MAX_ROUTES], bytes_out[METRICS_MAX_ROUTES];
    uint64_t files[2], file_bytes[2]; /* [0] read, [1] written */
} m;

static inline void bump(uint64_t *p, uint64_t n)
{
    __atomic_add_fetch(p, n, __ATOMIC_RELAXED);
}

static inline uint64_t get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

void metrics_limit(enum metrics_limit l)
{
    if ((unsigned)l < LIM_N)
        bump(&m.limits[l], 1);
}

void metrics_http(unsigned route, unsigned status, uint64_t bytes_in, uint64_t bytes_out)
{
    if (route >= METRICS_MAX_ROUTES)
        return;
    size_t i = 0;
    while (i < NSTATUS - 1 && statuses[i] != status)
        i++;
    bump(&m.http[route][i], 1);
    if (bytes_in)
        bump(&m.bytes_in[route], bytes_in);
    if (bytes_out)
        bump(&m.bytes_out[route], bytes_out);
}

void metrics_file(bool written, uint64_t bytes)
{
    bump(&m.files[written], 1);
    bump(&m.file_bytes[written], bytes);
}

void metrics_head(struct jsonw *w, const char *name, const char *type, const char *help)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    jw_raw(w, line, n < (int)sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void metrics_line(struct jsonw *w, const char *name, const char *labels, double value)
{
    char line[768];
    int n;
    /* Counters are whole numbers: print them exactly, not in %g's 6 digits. */
    if (value >= 0 && value < 1e15 && value == (double)(uint64_t)value)
        n = snprintf(line, sizeof(line), "%s%s%s%s %llu\n", name, labels ? "{" : "",
                     labels ? labels : "", labels ? "}" : "", (unsigned long long)value);
    else
        n = snprintf(line, sizeof(line), "%s%s%s%s %.9g\n", name, labels ? "{" : "",
                     labels ? labels : "", labels ? "}" : "", value);
    jw_raw(w, line, n < (int)sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void metrics_render_http(struct jsonw *w, const char *const *route_label, unsigned nroutes)
{
    char lab[160];
    if (nroutes > METRICS_MAX_ROUTES)
        nroutes = METRICS_MAX_ROUTES;
    metrics_head(w, "sbxd_http_requests_total", "counter",
                 "HTTP requests answered, by route and status (series appear once seen).");
    for (unsigned r = 0; r < nroutes; r++)
        for (size_t i = 0; i < NSTATUS; i++) {
            uint64_t v = get(&m.http[r][i]);
            if (!v)
                continue;
            char code[16] = "other";
            if (statuses[i])
                snprintf(code, sizeof(code), "%u", statuses[i]);
            snprintf(lab, sizeof(lab), "route=\"%s\",status=\"%s\"", route_label[r], code);
            metrics_line(w, "sbxd_http_requests_total", lab, (double)v);
        }
    static const char *const dir_name[2] = {"sbxd_http_received_bytes_total",
                                            "sbxd_http_sent_bytes_total"};
    static const char *const dir_help[2] = {
        "Request body bytes received, by route.",
        "Response body bytes handed to the connection, by route (HEAD answers send none)."};
    for (int d = 0; d < 2; d++) {
        metrics_head(w, dir_name[d], "counter", dir_help[d]);
        for (unsigned r = 0; r < nroutes; r++) {
            snprintf(lab, sizeof(lab), "route=\"%s\"", route_label[r]);
            metrics_line(w, dir_name[d], lab, (double)get(d ? &m.bytes_out[r] : &m.bytes_in[r]));
        }
    }
}

/* The renderers the modules registered, in the order they did. */
#define METRICS_MAX_RENDERERS 8
static metrics_renderer renderers[METRICS_MAX_RENDERERS];
static unsigned nrenderers;
static pthread_mutex_t renderers_lock = PTHREAD_MUTEX_INITIALIZER;

void metrics_register(metrics_renderer fn)
{
    pthread_mutex_lock(&renderers_lock);
    bool known = false;
    for (unsigned i = 0; i < nrenderers; i++)
        known |= renderers[i] == fn;
    if (!known && nrenderers < METRICS_MAX_RENDERERS)
        renderers[nrenderers++] = fn;
    pthread_mutex_unlock(&renderers_lock);
}

void metrics_render(struct jsonw *w)
{
    pthread_mutex_lock(&renderers_lock);
    unsigned n = nrenderers;
    metrics_renderer fns[METRICS_MAX_RENDERERS];
    memcpy(fns, renderers, sizeof(fns));
    pthread_mutex_unlock(&renderers_lock);
    for (unsigned i = 0; i < n; i++)
        fns[i](w);
    char lab[96];
    metrics_head(w, "sbxd_limit_rejections_total", "counter",
                 "Requests and connections refused or cut off by a limit, by limit.");
    for (unsigned l = 0; l < LIM_N; l++) {
        snprintf(lab, sizeof(lab), "limit=\"%s\"", limit_names[l]);
        metrics_line(w, "sbxd_limit_rejections_total", lab, (double)get(&m.limits[l]));
    }
    metrics_head(w, "sbxd_files_written_total", "counter",
                 "Files written through the file routes (each upload that was committed).");
    metrics_line(w, "sbxd_files_written_total", NULL, (double)get(&m.files[1]));
    metrics_head(w, "sbxd_files_read_total", "counter",
                 "Files served by the file routes (each download, whole or a range).");
    metrics_line(w, "sbxd_files_read_total", NULL, (double)get(&m.files[0]));
    metrics_head(w, "sbxd_file_written_bytes_total", "counter", "Bytes of the files written.");
    metrics_line(w, "sbxd_file_written_bytes_total", NULL, (double)get(&m.file_bytes[1]));
    metrics_head(w, "sbxd_file_read_bytes_total", "counter", "Bytes of the files served.");
    metrics_line(w, "sbxd_file_read_bytes_total", NULL, (double)get(&m.file_bytes[0]));
}
