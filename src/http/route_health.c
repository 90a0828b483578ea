#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/http.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/timeutil.h"

/* What every command gets, stated as it is, not as it is hoped; then what the start-up
 * probe found, used or not. */
static void write_isolation(struct jsonw *w, const struct server *srv)
{
    const struct harden_plan *h = srv->harden;
    const struct isolation *iso = srv->iso;
    const struct cg_root *cg = iso->cg.available ? &iso->cg : NULL;
    char user[48];
    if (iso->tree_kill == ISO_KILL_UID)
        snprintf(user, sizeof(user), "%u-%u:%u", (unsigned)iso->slots.first,
                 (unsigned)(iso->slots.first + iso->slots.count - 1), (unsigned)h->gid);
    else
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
    jw_str(w, iso_tree_kill_name(iso->tree_kill));
    if (iso->tree_kill == ISO_KILL_PIDNS) {
        jw_key(w, "proc");
        jw_str(w, iso->pidns_own_proc ? "own" : "shared"); /* the namespace's /proc, or not */
        jw_key(w, "userns");
        jw_bool(w, iso->pidns_userns);
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
    /* What the probe found on this host, used or not. */
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
    jw_obj_end(w);
    jw_obj_end(w);
}

enum MHD_Result route_healthz(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    bool draining = __atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE);
    char why[256];
    bool degraded = !draining && isolation_degraded(srv->iso, why, sizeof(why));
    struct jsonw w;
    jw_init(&w, 1024);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, draining ? "draining" : degraded ? "degraded" : "ok");
    if (degraded) {
        jw_key(&w, "reason");
        jw_str(&w, why);
    }
    jw_key(&w, "version");
    jw_str(&w, SBXD_VERSION);
    jw_key(&w, "uptime_s");
    jw_double(&w, (double)(time_mono_ns() - srv->start_ns) / 1e9, 3);
    jw_key(&w, "running");
    jw_uint(&w, __atomic_load_n(&srv->running, __ATOMIC_ACQUIRE));
    jw_key(&w, "max_running");
    jw_uint(&w, srv->cfg->max_running);
    jw_key(&w, "processes");
    jw_uint(&w, bg_running());
    jw_key(&w, "max_processes");
    jw_uint(&w, srv->cfg->max_processes);
    write_isolation(&w, srv);
    jw_obj_end(&w);
    return reply_jsonw(c, draining || degraded ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, &w);
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

/* GET /v1/health: the standardized API's probe (HealthResponse, or Error when not ready). */
enum MHD_Result route_v1_health(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    char why[256];
    if (__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE", "sbxd is shutting down");
    if (isolation_degraded(srv->iso, why, sizeof(why)))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "required isolation failed: %s", why);
    struct jsonw w;
    jw_init(&w, 64);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, "ok");
    jw_key(&w, "uptime_seconds");
    jw_uint(&w, (uint64_t)((time_mono_ns() - srv->start_ns) / 1000000000));
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
