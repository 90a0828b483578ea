/*
 * exec_metrics.c - the exec service's counters for GET /metrics (exec_metrics.h): commands
 * ended by front, mode and status, their durations, and the admission queue. Registered with
 * util/metrics.c's renderers, which know nothing of jobs.
 */
#include <stdio.h>

#include "sbxd/exec_metrics.h"
#include "sbxd/metrics.h"

static const char *const mode_names[MX_NMODES] = {"sync", "stream", "background"};
static const char *const front_names[FRONT_N] = {"rest", "grpc", "mcp"};

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

static void exec_metrics_render(struct jsonw *w)
{
    render_executions(w);
    render_queue(w);
}

void exec_metrics_register(void)
{
    metrics_register(exec_metrics_render);
}
