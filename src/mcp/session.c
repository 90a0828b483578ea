/*
 * session.c - MCP sessions: the table (made by initialize, swept when idle, evicted to make
 * room under --mcp-max-sessions and --mcp-max-client-sessions), the tool calls each has under
 * way and their cancellation, and the resources each subscribed to.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "mcp_internal.h"
#include "sbxd/harden.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/mcp.h"
#include "sbxd/log.h"
#include "sbxd/sandbox.h"
#include "sbxd/timeutil.h"

/* A session idle this long may be ended to make room for a new one. */
#define MCP_EVICT_IDLE_NS (60LL * 1000000000LL)

pthread_mutex_t mcp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mcp_session *sessions;
static unsigned nsessions;
/* Directories watched for subscriptions, over every session not yet freed (atomic): the MCP
 * pool of watch.h, --max-watchers of its own. A session's reservation goes when it is freed,
 * after its GET stream (which holds it) has closed its watches. */
static unsigned watch_dirs;

static void session_free(struct mcp_session *s)
{
    __atomic_sub_fetch(&watch_dirs, s->ndirs, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < s->nsubs; i++)
        free(s->subs[i]);
    free(s);
}

/* Unlink s (the lock held) and kill what its calls run. */
static void session_end_locked(struct mcp_session *s)
{
    if (s->ended)
        return;
    s->ended = true;
    for (struct mcp_session **pp = &sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    nsessions--;
    for (struct mcp_call *k = s->inflight; k; k = k->next) {
        __atomic_store_n(&k->cancelled, true, __ATOMIC_RELEASE);
        if (k->run)
            run_cancel(k->run);
    }
}

/* End sessions idle past the limit and not in use (the lock held). */
static void sweep_locked(const struct sbxd_config *cfg, int64_t now)
{
    int64_t idle = (int64_t)cfg->mcp_session_idle_s * 1000000000LL;
    struct mcp_session *s = sessions;
    while (s) {
        struct mcp_session *next = s->next;
        if (!s->refs && now - s->last_ns > idle) {
            LOG_EVENT("info", "mcp_session", LOG_S("id", s->id), LOG_S("action", "expired"));
            session_end_locked(s);
            session_free(s);
        }
        s = next;
    }
}

/* The session of addr idle longest and not in use (no request under way, no call running,
 * no GET stream open), or of any client when addr is NULL (the lock held). */
static struct mcp_session *idlest_locked(const char *addr)
{
    struct mcp_session *old = NULL;
    for (struct mcp_session *o = sessions; o; o = o->next)
        if (!o->refs && !o->calls && (!addr || strcmp(o->addr, addr) == 0) &&
            (!old || o->last_ns < old->last_ns))
            old = o;
    return old;
}

static void evict_locked(struct mcp_session *s, const char *why)
{
    LOG_EVENT("info", "mcp_session", LOG_S("id", s->id), LOG_S("action", "evicted"),
              LOG_S("reason", why), LOG_S("client", s->addr));
    session_end_locked(s);
    session_free(s);
}

struct mcp_session *mcp_session_new(const struct mcp_host *h, const char *version, const char *addr,
                                    enum session_refusal *why)
{
    *why = SESSION_NO_MEMORY;
    struct mcp_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    uint8_t raw[16];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        free(s);
        return NULL;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(s->id + 2 * i, 3, "%02x", raw[i]);
    snprintf(s->version, sizeof(s->version), "%s", version);
    snprintf(s->addr, sizeof(s->addr), "%s", addr);
    s->refs = 1;
    int64_t now = time_mono_ns();
    s->last_ns = now;
    pthread_mutex_lock(&mcp_lock);
    sweep_locked(h->cfg, now);
    /* One client address holds at most --mcp-max-client-sessions: 32 sessions of one client,
     * kept alive with pings, once left everybody else none. At its cap the client's own
     * session idle longest makes room, whatever its idle time (a client that lost its ids is
     * not locked out of its own sandbox); never another client's. */
    unsigned mine = 0;
    for (struct mcp_session *o = sessions; o; o = o->next)
        mine += strcmp(o->addr, addr) == 0;
    if (mine >= h->cfg->mcp_max_client_sessions) {
        struct mcp_session *old = idlest_locked(addr);
        if (!old) {
            pthread_mutex_unlock(&mcp_lock);
            free(s);
            *why = SESSION_CLIENT_FULL;
            return NULL;
        }
        evict_locked(old, "the client's own, at --mcp-max-client-sessions");
    }
    if (nsessions >= h->cfg->mcp_max_sessions) {
        /* Room is made by the session idle longest, when it is idle past a minute. */
        struct mcp_session *old = idlest_locked(NULL);
        if (old && now - old->last_ns > MCP_EVICT_IDLE_NS)
            evict_locked(old, "idle past a minute, at --mcp-max-sessions");
    }
    if (nsessions >= h->cfg->mcp_max_sessions) {
        pthread_mutex_unlock(&mcp_lock);
        free(s);
        *why = SESSION_FULL;
        return NULL;
    }
    s->next = sessions;
    sessions = s;
    nsessions++;
    pthread_mutex_unlock(&mcp_lock);
    *why = SESSION_MADE;
    return s;
}

struct mcp_session *mcp_session_get(const struct mcp_host *h, const char *id)
{
    pthread_mutex_lock(&mcp_lock);
    sweep_locked(h->cfg, time_mono_ns());
    struct mcp_session *s = sessions;
    while (s && strcmp(s->id, id) != 0)
        s = s->next;
    if (s) {
        s->refs++;
        s->last_ns = time_mono_ns();
    }
    pthread_mutex_unlock(&mcp_lock);
    return s;
}

void mcp_session_hold(struct mcp_session *s)
{
    pthread_mutex_lock(&mcp_lock);
    s->refs++;
    pthread_mutex_unlock(&mcp_lock);
}

void mcp_session_put(struct mcp_session *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&mcp_lock);
    s->last_ns = time_mono_ns();
    bool last = --s->refs == 0 && s->ended;
    pthread_mutex_unlock(&mcp_lock);
    if (last)
        session_free(s);
}

bool mcp_session_ended(struct mcp_session *s)
{
    pthread_mutex_lock(&mcp_lock);
    bool e = s->ended;
    pthread_mutex_unlock(&mcp_lock);
    return e;
}

/* ------------------------------------------------------------------------------------ */
/* Calls under way, and their cancellation.                                              */

struct mcp_call *mcp_call_begin(const struct mcp_host *h, struct mcp_session *s, const cJSON *id)
{
    struct mcp_call *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    if (cJSON_IsString(id))
        snprintf(k->id, sizeof(k->id), "s:%s", id->valuestring);
    else
        snprintf(k->id, sizeof(k->id), "n:%lld", (long long)id->valuedouble);
    pthread_mutex_lock(&mcp_lock);
    if (s->calls >= h->cfg->mcp_max_calls || s->ended) {
        pthread_mutex_unlock(&mcp_lock);
        free(k);
        errno = EBUSY;
        return NULL;
    }
    s->calls++;
    k->next = s->inflight;
    s->inflight = k;
    pthread_mutex_unlock(&mcp_lock);
    return k;
}

void mcp_call_end(struct mcp_session *s, struct mcp_call *call)
{
    pthread_mutex_lock(&mcp_lock);
    for (struct mcp_call **pp = &s->inflight; *pp; pp = &(*pp)->next)
        if (*pp == call) {
            *pp = call->next;
            break;
        }
    s->calls--;
    pthread_mutex_unlock(&mcp_lock);
    free(call);
}

void mcp_call_run(struct mcp_call *call, struct run *run)
{
    pthread_mutex_lock(&mcp_lock);
    call->run = run;
    bool kill = run && __atomic_load_n(&call->cancelled, __ATOMIC_ACQUIRE);
    if (kill)
        run_cancel(run);
    pthread_mutex_unlock(&mcp_lock);
}

void mcp_call_cancel(struct mcp_call *call)
{
    pthread_mutex_lock(&mcp_lock);
    __atomic_store_n(&call->cancelled, true, __ATOMIC_RELEASE);
    if (call->run)
        run_cancel(call->run);
    pthread_mutex_unlock(&mcp_lock);
}

bool mcp_call_cancelled(const struct mcp_call *call)
{
    return __atomic_load_n(&call->cancelled, __ATOMIC_ACQUIRE);
}

/* notifications/cancelled: the call of that request id, if still under way, is cancelled
 * and its command's tree killed. */
void mcp_cancel_request(struct mcp_session *s, const cJSON *params)
{
    const cJSON *rid = params ? cJSON_GetObjectItemCaseSensitive(params, "requestId") : NULL;
    char key[96];
    if (cJSON_IsString(rid))
        snprintf(key, sizeof(key), "s:%s", rid->valuestring);
    else if (cJSON_IsNumber(rid))
        snprintf(key, sizeof(key), "n:%lld", (long long)rid->valuedouble);
    else
        return;
    pthread_mutex_lock(&mcp_lock);
    for (struct mcp_call *k = s->inflight; k; k = k->next)
        if (strcmp(k->id, key) == 0) {
            __atomic_store_n(&k->cancelled, true, __ATOMIC_RELEASE);
            if (k->run)
                run_cancel(k->run);
        }
    pthread_mutex_unlock(&mcp_lock);
}

/* The length of path's directory part ("a/b" of "a/b/c"; 0 for a name at the root). */
size_t mcp_dir_len(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) : 0;
}

void mcp_session_end(struct mcp_session *s)
{
    pthread_mutex_lock(&mcp_lock);
    session_end_locked(s);
    pthread_mutex_unlock(&mcp_lock);
}

bool mcp_session_stream(struct mcp_session *s, bool open)
{
    pthread_mutex_lock(&mcp_lock);
    bool was = s->stream;
    s->stream = open;
    pthread_mutex_unlock(&mcp_lock);
    return !open || !was;
}

/* Whether one of s's first n subscriptions is in path's directory (the lock held). */
static bool dir_subscribed_locked(const struct mcp_session *s, const char *path, unsigned n)
{
    size_t len = mcp_dir_len(path);
    for (unsigned i = 0; i < n; i++)
        if (mcp_dir_len(s->subs[i]) == len && memcmp(s->subs[i], path, len) == 0)
            return true;
    return false;
}

/* resources/subscribe and unsubscribe. */
int mcp_subscribe(const struct mcp_host *h, struct mcp_session *s, const cJSON *params, bool on,
                  char *msg, size_t msglen)
{
    const cJSON *uri = params ? cJSON_GetObjectItemCaseSensitive(params, "uri") : NULL;
    if (!cJSON_IsString(uri)) {
        snprintf(msg, msglen, "'uri' is required: a file:// URI of the workspace");
        return JRPC_INVALID_PARAMS;
    }
    char *path = mcp_uri_path(h, uri->valuestring, msg, msglen);
    if (!path)
        return JRPC_INVALID_PARAMS;
    if (on) {
        struct fs_stat_info st;
        struct sbxd_err err = {0};
        struct fs_user u = h->user;
        fs_user_enter(&u);
        int r = fs_stat(h->rootfd, path, false, &st, &err);
        fs_user_leave(&u);
        if (r < 0) {
            free(path);
            return mcp_err_code(&err, msg, msglen);
        }
    }
    int code = 0;
    pthread_mutex_lock(&mcp_lock);
    unsigned at = s->nsubs;
    for (unsigned i = 0; i < s->nsubs; i++)
        if (strcmp(s->subs[i], path) == 0)
            at = i;
    if (on && at == s->nsubs) {
        /* Each directory subscriptions are in is a watch of the session's GET stream, from
         * the MCP pool (watch.h): at most SBXD_MCP_SESSION_WATCH_DIRS a session, and
         * --max-watchers over all sessions, taken here so that a refusal is an answer, not a
         * silent stream. Two sessions once took every watcher of the daemon: REST watches got
         * 429. */
        bool new_dir = !dir_subscribed_locked(s, path, s->nsubs);
        if (s->nsubs >= MCP_MAX_SUBS) {
            snprintf(msg, msglen, "a session subscribes to at most %d resources", MCP_MAX_SUBS);
            code = JRPC_SERVER_ERROR;
        } else if (new_dir && s->ndirs >= SBXD_MCP_SESSION_WATCH_DIRS) {
            snprintf(msg, msglen,
                     "this session's subscriptions are in %d directories already, the most a "
                     "session watches: subscribe to resources in those, or unsubscribe first",
                     SBXD_MCP_SESSION_WATCH_DIRS);
            code = JRPC_SERVER_ERROR;
        } else if (new_dir &&
                   __atomic_load_n(&watch_dirs, __ATOMIC_ACQUIRE) >= h->cfg->max_watchers) {
            snprintf(msg, msglen,
                     "the MCP sessions' subscriptions watch %llu directories, all their pool "
                     "holds (--max-watchers): retry once a session unsubscribes or ends",
                     (unsigned long long)h->cfg->max_watchers);
            code = JRPC_SERVER_ERROR;
        } else {
            s->subs[s->nsubs++] = path;
            path = NULL;
            s->subs_gen++;
            if (new_dir) {
                s->ndirs++;
                __atomic_add_fetch(&watch_dirs, 1, __ATOMIC_ACQ_REL);
            }
        }
    } else if (!on && at < s->nsubs) {
        char *gone = s->subs[at];
        s->subs[at] = s->subs[--s->nsubs];
        s->subs_gen++;
        if (!dir_subscribed_locked(s, gone, s->nsubs)) {
            s->ndirs--;
            __atomic_sub_fetch(&watch_dirs, 1, __ATOMIC_RELEASE);
        }
        free(gone);
    }
    pthread_mutex_unlock(&mcp_lock);
    free(path);
    return code;
}
static struct mcp_host host;

void mcp_init(struct sandbox *sb)
{
    const struct harden_plan *p = sb->harden;
    host = (struct mcp_host){.cfg = sb->cfg,
                             .exec = &sb->exec,
                             .draining = &sb->draining,
                             .rootfd = sb->rootfd,
                             .workspace = sb->workspace,
                             .sb = sb,
                             /* files are made as the command user, as REST makes them */
                             .user = {.switch_ids = p->switch_user,
                                      .uid = p->uid,
                                      .gid = p->gid,
                                      .file_mode = p->group_share ? 0664 : 0644,
                                      .dir_mode = p->group_share ? 0775 : 0755}};
}

const struct mcp_host *mcp_host(void)
{
    return &host;
}

void mcp_shutdown(void)
{
    pthread_mutex_lock(&mcp_lock);
    while (sessions) {
        struct mcp_session *s = sessions;
        session_end_locked(s);
        if (!s->refs)
            session_free(s);
    }
    pthread_mutex_unlock(&mcp_lock);
}
