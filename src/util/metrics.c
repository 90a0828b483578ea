#include <stdio.h>
#include <string.h>

#include "sbxd/metrics.h"

/* The statuses sbxd answers with; anything else is counted as "other". */
static const unsigned statuses[] = {200, 201, 204, 206, 400, 401, 403, 404, 405, 408, 409,
                                    411, 413, 415, 416, 429, 431, 500, 503, 507, 0};
#define NSTATUS (sizeof(statuses) / sizeof(statuses[0]))

static const char *const mode_names[MX_NMODES] = {"sync", "stream", "background"};
static const char *const front_names[FRONT_N] = {"rest", "grpc", "mcp"};
static const char *const limit_names[LIM_N] = {
    "max_running",     "max_processes",    "max_connections", "max_client_connections",
    "request_timeout", "max_header_bytes", "max_body_bytes",  "unauthorized",
    "stdin_pending",   "stdin_timeout",    "max_queued",      "queue_timeout",
    "web_page"};

/* Execution durations, seconds: from a quick `true` to a long build. */
static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                2.5,   5,    10,    30,   60,  300,  1800};
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))
#define NJOBST  (JOB_CANCELED + 1)

static struct {
    uint64_t exec[FRONT_N][MX_NMODES][NJOBST];
    uint64_t hist[FRONT_N][MX_NMODES][NBOUNDS + 1];
    uint64_t hist_sum_us[FRONT_N][MX_NMODES];
    uint64_t timeouts, oom_kills;
    uint64_t limits[LIM_N];
    uint64_t http[METRICS_MAX_ROUTES][NSTATUS];
    uint64_t bytes_in[METRICS_MAX_ROUTES], bytes_out[METRICS_MAX_ROUTES];
    uint64_t files[2], file_bytes[2]; /* [0] read, [1] written */
    uint64_t queue_depth, queued, queued_us, queue_abandoned;
} m;

static inline void bump(uint64_t *p, uint64_t n)
{
    __atomic_add_fetch(p, n, __ATOMIC_RELAXED);
}

static inline uint64_t get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

void metrics_execution(enum exec_front front, enum metrics_mode mode, const struct job_result *r)
{
    if ((unsigned)front >= FRONT_N || (unsigned)mode >= MX_NMODES || (unsigned)r->status >= NJOBST)
        return;
    bump(&m.exec[front][mode][r->status], 1);
    if (r->timed_out)
        bump(&m.timeouts, 1);
    if (r->oom_killed)
        bump(&m.oom_kills, 1);
    if (r->status == JOB_FAILED_TO_START)
        return; /* nothing ran: no duration */
    double s = r->duration_ms / 1000.0;
    size_t b = 0;
    while (b < NBOUNDS && s > bounds[b])
        b++;
    bump(&m.hist[front][mode][b], 1);
    bump(&m.hist_sum_us[front][mode], r->duration_ms > 0 ? (uint64_t)(r->duration_ms * 1000.0) : 0);
}

void metrics_start_failed(enum exec_front front, enum metrics_mode mode)
{
    if ((unsigned)front < FRONT_N && (unsigned)mode < MX_NMODES)
        bump(&m.exec[front][mode][JOB_FAILED_TO_START], 1);
}

void metrics_limit(enum metrics_limit l)
{
    if ((unsigned)l < LIM_N)
        bump(&m.limits[l], 1);
}

void metrics_queue_enter(void)
{
    bump(&m.queue_depth, 1);
    bump(&m.queued, 1);
}

void metrics_queue_leave(double ms, bool abandoned)
{
    __atomic_sub_fetch(&m.queue_depth, 1, __ATOMIC_RELAXED);
    bump(&m.queued_us, ms > 0 ? (uint64_t)(ms * 1000.0) : 0);
    if (abandoned)
        bump(&m.queue_abandoned, 1);
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

static void render_executions(struct jsonw *w)
{
    char lab[160];
    metrics_head(w, "sbxd_executions_total", "counter",
                 "Commands that ended, by the front they came through (rest, grpc, mcp), how they "
                 "ran (sync, stream, background) and status.");
    for (unsigned fr = 0; fr < FRONT_N; fr++)
        for (unsigned mo = 0; mo < MX_NMODES; mo++)
            for (unsigned st = JOB_EXITED; st < NJOBST; st++) {
                snprintf(lab, sizeof(lab), "front=\"%s\",mode=\"%s\",status=\"%s\"",
                         front_names[fr], mode_names[mo], job_status_name((enum job_status)st));
                metrics_line(w, "sbxd_executions_total", lab, (double)get(&m.exec[fr][mo][st]));
            }
    metrics_head(w, "sbxd_execution_duration_seconds", "histogram",
                 "Wall-clock time of the commands that ran, from start to exit.");
    for (unsigned fr = 0; fr < FRONT_N; fr++)
        for (unsigned mo = 0; mo < MX_NMODES; mo++) {
            uint64_t cum = 0;
            for (size_t b = 0; b <= NBOUNDS; b++) {
                cum += get(&m.hist[fr][mo][b]);
                if (b < NBOUNDS)
                    snprintf(lab, sizeof(lab), "front=\"%s\",mode=\"%s\",le=\"%g\"",
                             front_names[fr], mode_names[mo], bounds[b]);
                else
                    snprintf(lab, sizeof(lab), "front=\"%s\",mode=\"%s\",le=\"+Inf\"",
                             front_names[fr], mode_names[mo]);
                metrics_line(w, "sbxd_execution_duration_seconds_bucket", lab, (double)cum);
            }
            snprintf(lab, sizeof(lab), "front=\"%s\",mode=\"%s\"", front_names[fr], mode_names[mo]);
            metrics_line(w, "sbxd_execution_duration_seconds_sum", lab,
                         (double)get(&m.hist_sum_us[fr][mo]) / 1e6);
            metrics_line(w, "sbxd_execution_duration_seconds_count", lab, (double)cum);
        }
    metrics_head(w, "sbxd_timeouts_total", "counter",
                 "Commands killed (with their whole tree) at their wall-clock timeout.");
    metrics_line(w, "sbxd_timeouts_total", NULL, (double)get(&m.timeouts));
    metrics_head(w, "sbxd_oom_kills_total", "counter",
                 "Commands killed by the kernel for going over their memory limit.");
    metrics_line(w, "sbxd_oom_kills_total", NULL, (double)get(&m.oom_kills));
}

static void render_http(struct jsonw *w, const char *const *route_label, unsigned nroutes)
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

static void render_queue(struct jsonw *w)
{
    metrics_head(w, "sbxd_queue_depth", "gauge",
                 "Commands waiting now for a running slot (--max-running), at most --max-queued.");
    metrics_line(w, "sbxd_queue_depth", NULL, (double)get(&m.queue_depth));
    metrics_head(w, "sbxd_queued_total", "counter",
                 "Commands that had to wait for a running slot, however their wait ended.");
    metrics_line(w, "sbxd_queued_total", NULL, (double)get(&m.queued));
    metrics_head(w, "sbxd_queued_milliseconds_total", "counter",
                 "Milliseconds those commands waited, all together.");
    metrics_line(w, "sbxd_queued_milliseconds_total", NULL, (double)get(&m.queued_us) / 1e3);
    metrics_head(w, "sbxd_queue_abandoned_total", "counter",
                 "Commands whose client hung up while they waited (they never ran).");
    metrics_line(w, "sbxd_queue_abandoned_total", NULL, (double)get(&m.queue_abandoned));
}

void metrics_render(struct jsonw *w, const char *const *route_label, unsigned nroutes)
{
    render_executions(w);
    render_http(w, route_label, nroutes);
    char lab[96];
    metrics_head(w, "sbxd_limit_rejections_total", "counter",
                 "Requests and connections refused or cut off by a limit, by limit.");
    for (unsigned l = 0; l < LIM_N; l++) {
        snprintf(lab, sizeof(lab), "limit=\"%s\"", limit_names[l]);
        metrics_line(w, "sbxd_limit_rejections_total", lab, (double)get(&m.limits[l]));
    }
    render_queue(w);
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
