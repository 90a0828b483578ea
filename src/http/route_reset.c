/*
 * route_reset.c - POST /reset: Clean (reset.h). The body is optional ({} or none). While it
 * runs every route but the health checks, /metrics and /v1/metadata answers 503 with
 * Retry-After (server.c); a second reset meanwhile is one of those.
 */
#include <errno.h>
#include <time.h>

#include "sbxd/http.h"
#include "sbxd/jsonw.h"
#include "sbxd/log.h"
#include "sbxd/reset.h"
#include "sbxd/timeutil.h"

/* How long a reset waits for the requests under way to end (they end with their commands,
 * which are killed before): past it the reset goes on without them, and says so. */
#define RESET_QUIESCE_S 10

struct quiesce {
    struct server *srv;
    bool held; /* work_lock, exclusively */
};

static void quiesce(void *arg)
{
    struct quiesce *q = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RESET_QUIESCE_S;
    q->held = pthread_rwlock_timedwrlock(&q->srv->work_lock, &until) == 0;
    if (!q->held)
        LOG_EVENT("warn", "reset",
                  LOG_S("message", "requests under way did not end: the reset goes on"),
                  LOG_I("waited_s", RESET_QUIESCE_S));
}

static void write_clear(struct jsonw *w, const char *key, const struct fs_clear_stats *st)
{
    jw_key(w, key);
    jw_obj_begin(w);
    jw_key(w, "files");
    jw_uint(w, st->files);
    jw_key(w, "directories");
    jw_uint(w, st->directories);
    jw_key(w, "bytes");
    jw_uint(w, st->bytes);
    jw_obj_end(w);
}

/* The report's fields, into an open object. */
static void write_report(struct jsonw *w, const struct reset_report *r)
{
    jw_key(w, "processes");
    jw_uint(w, r->processes);
    jw_key(w, "contexts");
    jw_uint(w, r->contexts);
    jw_key(w, "files");
    jw_uint(w, r->ws.files + r->tmp.files);
    jw_key(w, "bytes");
    jw_uint(w, r->ws.bytes + r->tmp.bytes);
    jw_key(w, "duration_ms");
    jw_double(w, r->duration_ms, 3);
    jw_key(w, "directories");
    jw_uint(w, r->ws.directories + r->tmp.directories);
    jw_key(w, "background");
    jw_uint(w, r->background);
    jw_key(w, "strays");
    jw_uint(w, r->strays);
    write_clear(w, "workspace", &r->ws);
    write_clear(w, "tmp", &r->tmp);
    jw_key(w, "baseline");
    jw_bool(w, r->baseline);
    if (r->baseline) {
        jw_key(w, "restored");
        jw_obj_begin(w);
        jw_key(w, "files");
        jw_uint(w, r->restored.files);
        jw_key(w, "directories");
        jw_uint(w, r->restored.directories);
        jw_key(w, "symlinks");
        jw_uint(w, r->restored.symlinks);
        jw_key(w, "bytes");
        jw_uint(w, r->restored.bytes);
        jw_obj_end(w);
    }
}

enum MHD_Result route_reset(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    enum MHD_Result ret;
    /* No field is taken yet: {} or no body at all; anything else is a typo to refuse. */
    if (rc->body_len) {
        static const char *const keys[] = {NULL};
        cJSON *o = http_json_object(c, rc, keys, &ret);
        if (!o)
            return ret;
        cJSON_Delete(o);
    }
    if (__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE", "sbxd is shutting down");
    if (pthread_mutex_trylock(&srv->reset_lock) != 0)
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is resetting the sandbox already; retry in a moment");
    __atomic_store_n(&srv->resetting, true, __ATOMIC_SEQ_CST);
    struct quiesce q = {.srv = srv};
    struct reset_env env = {.svc = &srv->exec,
                            .rootfd = srv->rootfd,
                            .baseline_fd = srv->baseline_fd,
                            .harden = srv->harden,
                            .iso = srv->iso,
                            .cfg = srv->cfg,
                            .quiesce = quiesce,
                            .arg = &q};
    struct reset_report rep;
    struct sbxd_err err = {0};
    int rc_reset = reset_run(&env, &rep, &err);
    /* Requests whose head came before this point are refused from now on (work_enter). */
    __atomic_add_fetch(&srv->reset_gen, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&srv->resets, 1, __ATOMIC_RELAXED);
    if (q.held)
        pthread_rwlock_unlock(&srv->work_lock);
    __atomic_store_n(&srv->resetting, false, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&srv->reset_lock);

    struct jsonw w;
    jw_init(&w, 768);
    jw_obj_begin(&w);
    if (rc_reset < 0) {
        /* The error's shape, with what was done beside it. */
        jw_key(&w, "code");
        jw_str(&w, "INTERNAL");
        jw_key(&w, "message");
        jw_str(&w, err.msg);
    }
    write_report(&w, &rep);
    jw_obj_end(&w);
    return reply_jsonw(c, rc_reset < 0 ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK, &w);
}
