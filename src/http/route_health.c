#include <stdio.h>
#include <unistd.h>

#include "sbxd/http.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/timeutil.h"

/* What this build enforces for every command, stated as it is. Later isolation backends
 * (cgroups, namespaces, seccomp, credentials) report here too. */
/* What every command gets, stated as it is, not as it is hoped. Later isolation backends
 * (cgroups, PID namespaces) report here too. */
/* What every command gets, stated as it is, not as it is hoped. */
static void write_isolation(struct jsonw *w, const struct server *srv)
{
    const struct harden_plan *h = srv->harden;
    const struct cg_root *cg = srv->cg;
    char user[32];
    snprintf(user, sizeof(user), "%u:%u", (unsigned)h->uid, (unsigned)h->gid);
    bool mem_limit = srv->cfg->memory_max > 0;
    jw_key(w, "isolation");
    jw_obj_begin(w);
    jw_key(w, "cgroup");
    jw_str(w, cg ? "v2" : "none");
    if (cg) {
        jw_key(w, "cgroup_base");
        jw_str(w, cg->base);
    }
    /* enforced: a self-test saw the limit bite; accounting: set but not enforced (gVisor);
     * rlimit-as: address-space limit instead; none: nothing limits it. */
    jw_key(w, "memory");
    jw_str(w, cg && cg->memory ? (cg->memory_enforced ? "enforced" : "accounting")
                               : (mem_limit ? "rlimit-as" : "none"));
    jw_key(w, "pids");
    jw_str(w, cg && cg->pids ? (cg->pids_enforced ? "enforced" : "accounting") : "none");
    jw_key(w, "cpu");
    jw_str(w, cg && cg->cpu ? "cpu.max" : "rlimit-cpu");
    jw_key(w, "tree_kill");
    /* pgid misses processes that leave the group: the one degraded mode */
    jw_str(w, cg ? "cgroup" : h->pidns ? "pidns" : "pgid");
    if (!cg && h->pidns) {
        jw_key(w, "proc");
        jw_str(w, h->pidns_own_proc ? "own" : "shared"); /* the namespace's /proc, or not */
    }
    jw_key(w, "seccomp");
    jw_str(w, h->seccomp ? "deny-list" : "none");
    jw_key(w, "capabilities");
    jw_str(w, h->drop_bounding ? "none" : "none-bounding-kept");
    jw_key(w, "no_new_privs");
    jw_bool(w, true);
    jw_key(w, "user");
    jw_str(w, user);
    jw_key(w, "groups");
    jw_str(w, h->switch_user ? "none" : "inherited");
    jw_key(w, "nice");
    jw_int(w, SBXD_COMMAND_NICE);
    jw_key(w, "oom_score_adj");
    jw_int(w, 1000);
    jw_key(w, "daemon_oom_score_adj");
    jw_int(w, h->daemon_oom_score_adj);
    jw_key(w, "fds");
    jw_str(w, "closed");
    jw_key(w, "environment");
    jw_str(w, "minimal");
    jw_key(w, "core_dumps");
    jw_bool(w, false);
    jw_obj_end(w);
}

enum MHD_Result route_healthz(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    bool draining = __atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE);
    struct jsonw w;
    jw_init(&w, 512);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, draining ? "draining" : "ok");
    jw_key(&w, "version");
    jw_str(&w, SBXD_VERSION);
    jw_key(&w, "uptime_s");
    jw_double(&w, (double)(time_mono_ns() - srv->start_ns) / 1e9, 3);
    jw_key(&w, "running");
    jw_uint(&w, __atomic_load_n(&srv->running, __ATOMIC_ACQUIRE));
    jw_key(&w, "max_running");
    jw_uint(&w, srv->cfg->max_running);
    write_isolation(&w, srv);
    jw_obj_end(&w);
    return reply_jsonw(c, draining ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, &w);
}

/* The legacy python-runtime readiness probe. */
enum MHD_Result route_root(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    bool draining = __atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE);
    struct jsonw w;
    jw_init(&w, 128);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, draining ? "draining" : "ok");
    jw_key(&w, "message");
    jw_str(&w, draining ? "sbxd is shutting down" : "sbxd is running");
    jw_obj_end(&w);
    return reply_jsonw(c, draining ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, &w);
}
