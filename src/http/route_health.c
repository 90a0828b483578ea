#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/cmdenv.h"
#include "http_internal.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/metrics.h"
#include "sbxd/server.h"
#include "sbxd/timeutil.h"

/* What the start-up probe found on this host, used or not. */
static void write_detected(struct jsonw *w, const struct isolation *iso,
                           const struct harden_plan *h)
{
    jw_key(w, "detected");
    jw_obj_begin(w);
    jw_key(w, "cgroup2");
    jw_str(w, iso->cg.available ? "delegated" : iso->cg.why);
    jw_key(w, "cgroup_kill");
    jw_bool(w, iso->cg.available && iso->cg.has_kill);
    jw_key(w, "cgroup_placement");
    jw_str(w, "child writes cgroup.procs before exec");
    jw_key(w, "clone3");
    jw_bool(w, iso->clone3);
    jw_key(w, "clone_into_cgroup");
    jw_bool(w, iso->clone_into_cgroup);
    jw_key(w, "pidfd");
    jw_bool(w, iso->pidfd);
    jw_key(w, "pidns");
    jw_str(w, !iso->pidns_ok      ? iso->pidns_why
              : iso->pidns_userns ? "via user namespace"
                                  : "direct");
    jw_key(w, "uid_range");
    jw_str(w, iso->uid_ok ? "usable" : iso->uid_why);
    jw_key(w, "ipcns");
    jw_str(w, !iso->ipcns_ok                                          ? iso->ipcns_why
              : iso->tree_kill == ISO_KILL_PIDNS && iso->pidns_userns ? "via user namespace"
                                                                      : "direct");
    jw_key(w, "landlock");
    if (h->landlock_abi)
        jw_int(w, h->landlock_abi);
    else
        jw_bool(w, false);
    jw_obj_end(w);
}

/* What every command gets, stated as it is, not as it is hoped; then what the start-up
 * probe found (write_detected). */
static void write_isolation(struct jsonw *w, const struct server *srv)
{
    const struct harden_plan *h = srv->sb->harden;
    const struct isolation *iso = srv->sb->iso;
    const struct cg_root *cg = iso->cg.available ? &iso->cg : NULL;
    struct iso_description m;
    isolation_describe(iso, h, srv->cfg->memory_max, &m);
    jw_key(w, "isolation");
    jw_obj_begin(w);
    jw_key(w, "cgroup");
    jw_str(w, m.cgroup);
    if (cg) {
        jw_key(w, "cgroup_base");
        jw_str(w, cg->base);
        /* How sbxd got its cgroup: alone in it, or by adopting the processes that shared it
         * (a wrapper such as tini or a shell) into its own leaf. */
        jw_key(w, "cgroup_how");
        jw_str(w, cg->adopted ? "adopted" : "alone");
        jw_key(w, "cgroup_adopted");
        jw_uint(w, cg->adopted);
    }
    jw_key(w, "memory");
    jw_str(w, m.memory);
    jw_key(w, "pids");
    jw_str(w, m.pids);
    jw_key(w, "cpu");
    jw_str(w, m.cpu);
    jw_key(w, "tree_kill");
    jw_str(w, m.tree_kill);
    if (m.proc) {
        jw_key(w, "proc");
        jw_str(w, m.proc); /* the namespace's /proc, or the sandbox's */
        jw_key(w, "userns");
        jw_bool(w, m.userns);
    }
    jw_key(w, "inter_command");
    jw_str(w, m.inter_command);
    jw_key(w, "ipc");
    jw_str(w, m.ipc);
    jw_key(w, "seccomp");
    jw_str(w, m.seccomp);
    jw_key(w, "capabilities");
    jw_str(w, m.capabilities);
    jw_key(w, "no_new_privs");
    jw_bool(w, true);
    jw_key(w, "user");
    jw_str(w, m.user);
    jw_key(w, "groups");
    jw_str(w, h->switch_user ? "none" : "inherited");
    jw_key(w, "nice");
    jw_int(w, SBXD_COMMAND_NICE);
    /* null: the kernel has no OOM killer that weighs it (gVisor), and it is not written. */
    jw_key(w, "oom_score_adj");
    if (h->oom_adjust)
        jw_int(w, 1000);
    else
        jw_null(w);
    jw_key(w, "daemon_oom_score_adj");
    jw_int(w, h->daemon_oom_score_adj);
    jw_key(w, "fds");
    jw_str(w, "closed");
    /* What commands inherit of sbxd's environment: the names, never a value (cmdenv.h). */
    const struct cmdenv *ce = srv->cfg->cmdenv;
    jw_key(w, "environment");
    jw_str(w, !ce || ce->empty ? "minimal" : "allow-list");
    jw_key(w, "environment_passed");
    jw_arr_begin(w);
    for (size_t i = 0; ce && i < ce->npassed; i++)
        jw_str(w, ce->passed[i]);
    jw_arr_end(w);
    jw_key(w, "core_dumps");
    jw_bool(w, false);
    write_detected(w, iso, h);
    jw_obj_end(w);
}

enum MHD_Result route_healthz(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    bool draining = sandbox_draining(srv->sb);
    /* A reset makes the sandbox unfit for work until it is over: not ready, for a while. */
    bool resetting = !draining && server_resetting(srv);
    char why[512];
    bool degraded = !draining && !resetting && isolation_degraded(srv->sb->iso, why, sizeof(why));
    struct jsonw w;
    jw_init(&w, 1024);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, draining ? "draining" : resetting ? "resetting" : degraded ? "degraded" : "ok");
    if (degraded) {
        jw_key(&w, "reason");
        jw_str(&w, why);
    }
    jw_key(&w, "version");
    jw_str(&w, SBXD_VERSION);
    jw_key(&w, "uptime_s");
    jw_double(&w, (double)(time_mono_ns() - srv->sb->start_ns) / 1e9, 3);
    jw_key(&w, "running");
    jw_uint(&w, exec_service_running(&srv->sb->exec));
    jw_key(&w, "max_running");
    jw_uint(&w, srv->cfg->max_running);
    jw_key(&w, "processes");
    jw_uint(&w, bg_running());
    jw_key(&w, "max_processes");
    jw_uint(&w, srv->cfg->max_processes);
    /* Every port the HTTP API answers on (--listen), each with the same routes and rules. */
    jw_key(&w, "http_ports");
    jw_arr_begin(&w);
    for (unsigned i = 0; i < srv->nports; i++)
        jw_uint(&w, srv->ports[i]);
    jw_arr_end(&w);
    write_isolation(&w, srv);
    jw_obj_end(&w);
    return reply_jsonw(
        c, draining || resetting || degraded ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, &w);
}

/* The legacy python-runtime readiness probe. */
enum MHD_Result route_root(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    bool draining = sandbox_draining(srv->sb);
    bool resetting = !draining && server_resetting(srv);
    char why[512];
    bool degraded = !draining && !resetting && isolation_degraded(srv->sb->iso, why, sizeof(why));
    struct jsonw w;
    jw_init(&w, 128);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, draining ? "draining" : resetting ? "resetting" : degraded ? "degraded" : "ok");
    jw_key(&w, "message");
    jw_str(&w, draining    ? "sbxd is shutting down"
               : resetting ? "sbxd is resetting the sandbox"
               : degraded  ? "sbxd is degraded (see reason)"
                           : "sbxd is running");
    if (degraded) {
        jw_key(&w, "reason");
        jw_str(&w, why);
    }
    jw_obj_end(&w);
    return reply_jsonw(
        c, draining || resetting || degraded ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, &w);
}

/* GET /v1/health: the standardized API's probe (HealthResponse, or Error when not ready). */
enum MHD_Result route_v1_health(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    char why[512];
    if (sandbox_draining(srv->sb))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE", "sbxd is shutting down");
    struct jsonw w;
    if (server_resetting(srv)) {
        /* The contract's Error, with /healthz's status beside it. */
        jw_init(&w, 128);
        jw_obj_begin(&w);
        jw_key(&w, "code");
        jw_str(&w, "UNAVAILABLE");
        jw_key(&w, "message");
        jw_str(&w, "sbxd is resetting the sandbox");
        jw_key(&w, "status");
        jw_str(&w, "resetting");
        jw_obj_end(&w);
        return reply_jsonw(c, MHD_HTTP_SERVICE_UNAVAILABLE, &w);
    }
    if (isolation_degraded(srv->sb->iso, why, sizeof(why))) {
        /* The contract's Error, with /healthz's status and reason beside it. */
        jw_init(&w, 128 + strlen(why));
        jw_obj_begin(&w);
        jw_key(&w, "code");
        jw_str(&w, "UNAVAILABLE");
        jw_key(&w, "message");
        jw_str(&w, "sbxd is degraded (see reason)");
        jw_key(&w, "status");
        jw_str(&w, "degraded");
        jw_key(&w, "reason");
        jw_str(&w, why);
        jw_obj_end(&w);
        return reply_jsonw(c, MHD_HTTP_SERVICE_UNAVAILABLE, &w);
    }
    jw_init(&w, 64);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, "ok");
    jw_key(&w, "uptime_seconds");
    jw_uint(&w, (uint64_t)((time_mono_ns() - srv->sb->start_ns) / 1000000000));
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* GET /v1/metadata: {"env": {...}} of what server_start took from the environment. */
enum MHD_Result route_v1_metadata(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    struct jsonw w;
    jw_init(&w, 256);
    jw_obj_begin(&w);
    jw_key(&w, "env");
    jw_obj_begin(&w);
    for (char **e = srv->metadata; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *e), *e);
        jw_key(&w, name);
        jw_str(&w, eq + 1);
    }
    jw_obj_end(&w);
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* Escape a label value for the text format: backslash, quote and newline. */
static void label_value(char *out, size_t len, const char *v)
{
    size_t n = 0;
    for (; v && *v && n + 3 < len; v++) {
        if (*v == '\\' || *v == '"') {
            out[n++] = '\\';
            out[n++] = *v;
        } else if (*v == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = *v;
        }
    }
    out[n] = '\0';
}

/* sbxd's own resident memory and descriptors, as Prometheus' process_* metrics name them. */
static void process_metrics(struct jsonw *w)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    metrics_head(w, "process_resident_memory_bytes", "gauge", "Resident memory of sbxd.");
    metrics_line(w, "process_resident_memory_bytes", NULL, (double)rss * (double)getpagesize());
    unsigned fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            fds += e->d_name[0] != '.';
        closedir(d);
        fds--; /* the directory being read */
    }
    metrics_head(w, "process_open_fds", "gauge", "File descriptors sbxd has open.");
    metrics_line(w, "process_open_fds", NULL, fds);
}

/* GET /metrics: the Prometheus text format (version 0.0.4). */
enum MHD_Result route_metrics(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    struct jsonw w;
    jw_init(&w, 16384);
    char lab[1536];
    struct iso_description m;
    isolation_describe(srv->sb->iso, srv->sb->harden, srv->cfg->memory_max, &m);
    char v[10][128];
    const char *vals[10] = {m.cgroup,  m.memory,       m.pids, m.cpu,           m.tree_kill,
                            m.seccomp, m.capabilities, m.user, m.inter_command, m.ipc};
    for (int i = 0; i < 10; i++)
        label_value(v[i], sizeof(v[i]), vals[i]);
    snprintf(lab, sizeof(lab),
             "cgroup=\"%s\",memory=\"%s\",pids=\"%s\",cpu=\"%s\",tree_kill=\"%s\","
             "seccomp=\"%s\",capabilities=\"%s\",user=\"%s\",inter_command=\"%s\",ipc=\"%s\"",
             v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]);
    metrics_head(&w, "sbxd_isolation_info", "gauge",
                 "The isolation in force for every command (the labels), as /healthz states it.");
    metrics_line(&w, "sbxd_isolation_info", lab, 1);
    snprintf(lab, sizeof(lab), "version=\"%s\"", SBXD_VERSION);
    metrics_head(&w, "sbxd_build_info", "gauge", "The sbxd version serving.");
    metrics_line(&w, "sbxd_build_info", lab, 1);
    metrics_head(&w, "sbxd_uptime_seconds", "gauge", "Seconds since sbxd started.");
    metrics_line(&w, "sbxd_uptime_seconds", NULL,
                 (double)(time_mono_ns() - srv->sb->start_ns) / 1e9);
    metrics_head(&w, "sbxd_draining", "gauge", "1 once sbxd is shutting down.");
    metrics_line(&w, "sbxd_draining", NULL, sandbox_draining(srv->sb));
    metrics_head(&w, "sbxd_resetting", "gauge", "1 while a reset (POST /reset) runs.");
    metrics_line(&w, "sbxd_resetting", NULL, server_resetting(srv));
    metrics_head(&w, "sbxd_resets_total", "counter", "Resets done (POST /reset).");
    metrics_line(&w, "sbxd_resets_total", NULL,
                 (double)__atomic_load_n(&srv->sb->resets, __ATOMIC_RELAXED));
    metrics_head(&w, "sbxd_commands_running", "gauge",
                 "Commands of /execute running now (their answer not yet sent).");
    metrics_line(&w, "sbxd_commands_running", NULL, exec_service_running(&srv->sb->exec));
    metrics_head(&w, "sbxd_commands_max_running", "gauge", "--max-running.");
    metrics_line(&w, "sbxd_commands_max_running", NULL, (double)srv->cfg->max_running);
    metrics_head(&w, "sbxd_commands_queued", "gauge",
                 "Commands admitted and waiting for their process to start (those waiting for "
                 "a running slot are sbxd_queue_depth).");
    metrics_line(&w, "sbxd_commands_queued", NULL, exec_service_starting(&srv->sb->exec));
    metrics_head(&w, "sbxd_processes_running", "gauge", "Background processes running now.");
    metrics_line(&w, "sbxd_processes_running", NULL, bg_running());
    metrics_head(&w, "sbxd_processes_max_running", "gauge", "--max-processes.");
    metrics_line(&w, "sbxd_processes_max_running", NULL, (double)srv->cfg->max_processes);
    metrics_head(&w, "sbxd_process_streams", "gauge", "Background process outputs being sent.");
    metrics_line(&w, "sbxd_process_streams", NULL, server_streams(srv));
    metrics_head(&w, "sbxd_connections_open", "gauge", "HTTP connections open now.");
    metrics_line(&w, "sbxd_connections_open", NULL, server_connections(srv));
    metrics_head(&w, "sbxd_connections_max", "gauge", "--max-connections.");
    metrics_line(&w, "sbxd_connections_max", NULL, (double)srv->cfg->max_connections);
    metrics_head(&w, "sbxd_connections_evicted_total", "counter",
                 "Connections waiting for a request shut down to make room for a new one, at "
                 "--max-connections or --max-client-connections.");
    metrics_line(&w, "sbxd_connections_evicted_total", NULL,
                 (double)__atomic_load_n(&srv->conns_evicted, __ATOMIC_RELAXED));
    metrics_head(&w, "sbxd_connections_shed_total", "counter",
                 "Connections closed at accept: over the caps with none to make room, or with "
                 "sbxd out of descriptors.");
    metrics_line(&w, "sbxd_connections_shed_total", NULL,
                 (double)__atomic_load_n(&srv->conns_shed, __ATOMIC_RELAXED));
    process_metrics(&w);
    metrics_render(&w); /* what the modules and fronts registered (metrics.h) */
    size_t len;
    char *body = jw_finish(&w, &len);
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, len);
    MHD_destroy_response(r);
    return ret;
}
