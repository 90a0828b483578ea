/*
 * events.c - a session's stream of notifications: resources/updated for each resource it
 * subscribed to, from watches (watch.h) on the directories they are in, remade when the
 * subscriptions change. The transport frames and paces them (an SSE stream on GET /mcp).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/mcp.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"
#include "sbxd/watch.h"

/* A stream that could not watch a directory of its subscriptions tries again this often. */
#define MCP_WATCH_RETRY_NS (1000LL * 1000000LL)

struct mcp_events {
    const struct mcp_host *h;
    struct mcp_session *s;
    uint64_t gen; /* subs_gen the watches were made for */
    char *dirs[SBXD_MCP_SESSION_WATCH_DIRS];
    struct watch_sub *subs[SBXD_MCP_SESSION_WATCH_DIRS];
    unsigned ndirs;
    bool missing;              /* a directory could not be watched ... */
    int64_t retry_ns;          /* ... and is tried again then */
    char *paths[MCP_MAX_SUBS]; /* a copy of the session's subscriptions */
    unsigned npaths;
};

static void get_stream_unwatch(struct mcp_events *g)
{
    for (unsigned i = 0; i < g->ndirs; i++) {
        watch_close(g->subs[i]);
        free(g->dirs[i]);
    }
    g->ndirs = 0;
    for (unsigned i = 0; i < g->npaths; i++)
        free(g->paths[i]);
    g->npaths = 0;
}

/* Watch the directories of the session's subscriptions, when they changed; those that could
 * not be watched (the MCP pool full for a moment: another session's stream still holds
 * watches it is giving back) again every MCP_WATCH_RETRY_NS. */
static void get_stream_sync(struct mcp_events *g)
{
    int64_t now = time_mono_ns();
    pthread_mutex_lock(&mcp_lock);
    bool changed = g->gen != g->s->subs_gen;
    if (!changed && !(g->missing && now >= g->retry_ns)) {
        pthread_mutex_unlock(&mcp_lock);
        return;
    }
    if (changed) {
        g->gen = g->s->subs_gen;
        get_stream_unwatch(g);
        for (unsigned i = 0; i < g->s->nsubs; i++) {
            char *p = strdup(g->s->subs[i]);
            if (p)
                g->paths[g->npaths++] = p;
        }
    }
    pthread_mutex_unlock(&mcp_lock);
    g->missing = false;
    for (unsigned i = 0; i < g->npaths && g->ndirs < SBXD_MCP_SESSION_WATCH_DIRS; i++) {
        char *dir = strndup(g->paths[i], mcp_dir_len(g->paths[i]));
        if (!dir) {
            g->missing = true;
            continue;
        }
        bool have = false;
        for (unsigned k = 0; k < g->ndirs && !have; k++)
            have = strcmp(g->dirs[k], dir) == 0;
        struct sbxd_err err = {0};
        struct watch_sub *w =
            have ? NULL : watch_open(dir, false, UINT64_MAX, WATCH_POOL_MCP, &err);
        if (!w) {
            if (!have) {
                g->missing = true;
                if (changed) /* (logged once, not at every retry) */
                    LOG_EVENT("warn", "mcp_watch", LOG_S("dir", dir), LOG_S("error", err.msg));
            }
            free(dir);
            continue;
        }
        g->dirs[g->ndirs] = dir;
        g->subs[g->ndirs++] = w;
    }
    if (g->missing)
        g->retry_ns = now + MCP_WATCH_RETRY_NS;
}

/* The next notification appended to w: true when one is. */
static bool get_stream_next(struct mcp_events *g, struct jsonw *w)
{
    for (unsigned i = 0; i < g->ndirs; i++) {
        struct watch_event ev;
        while (watch_next(g->subs[i], 0, &ev) == 1) {
            for (unsigned k = 0; k < g->npaths; k++) {
                bool hit = strcmp(ev.path, g->paths[k]) == 0 ||
                           (ev.type == WATCH_RENAME && strcmp(ev.from, g->paths[k]) == 0) ||
                           ev.type == WATCH_OVERFLOW;
                if (!hit)
                    continue;
                jw_obj_begin(w);
                jw_key(w, "jsonrpc");
                jw_str(w, "2.0");
                jw_key(w, "method");
                jw_str(w, "notifications/resources/updated");
                jw_key(w, "params");
                jw_obj_begin(w);
                jw_key(w, "uri");
                mcp_write_uri(g->h, w, g->paths[k]);
                jw_obj_end(w);
                jw_obj_end(w);
                return true;
            }
        }
    }
    return false;
}

struct mcp_events *mcp_events_open(const struct mcp_host *h, struct mcp_request *rq,
                                   struct mcp_sink *k, enum mcp_status *st)
{
    struct mcp_session *s = mcp_request_session(h, rq, k, st);
    if (!s)
        return NULL;
    if (!mcp_session_stream(s, true)) {
        mcp_session_put(s);
        mcp_send_error(k, NULL, JRPC_INVALID_REQUEST,
                       "this session's stream is open already (one at a time)");
        *st = MCP_CONFLICT;
        return NULL;
    }
    struct mcp_events *g = calloc(1, sizeof(*g));
    if (!g) {
        mcp_session_stream(s, false);
        mcp_session_put(s);
        *st = MCP_INTERNAL;
        return NULL;
    }
    g->h = h;
    g->s = s;
    g->gen = UINT64_MAX;
    *st = MCP_OK;
    return g;
}

int mcp_events_next(struct mcp_events *g, struct jsonw *w)
{
    if (mcp_session_ended(g->s))
        return -1;
    get_stream_sync(g);
    return get_stream_next(g, w) ? 1 : 0;
}

void mcp_events_close(struct mcp_events *g)
{
    get_stream_unwatch(g);
    mcp_session_stream(g->s, false);
    mcp_session_put(g->s);
    free(g);
}
