/*
 * route_mcp.c - the Model Context Protocol over Streamable HTTP: POST /mcp takes JSON-RPC
 * messages, GET /mcp is the session's stream of notifications (resource updates), DELETE
 * /mcp ends a session. The tools are mcp_tools.c's.
 *
 * Answers are application/json, but for a run_command whose caller gave a progress token
 * and takes text/event-stream: that one is a stream of progress notifications and then the
 * result (mcp_tools.c). Errors that are not about one message (no session, a bad Origin, a
 * body too large) are HTTP statuses with a JSON-RPC error body whose id is null.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/http.h"
#include "sbxd/http_files.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/mcp.h"
#include "sbxd/web.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"
#include "sbxd/watch.h"

/* The protocol versions spoken, newest first: initialize gets the client's when it is one
 * of them, else the newest. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))

/* Resources one session may subscribe to (the directories they are in are bounded by
 * SBXD_MCP_SESSION_WATCH_DIRS). */
#define MCP_MAX_SUBS 64
/* A GET stream that could not watch a directory of its subscriptions tries again this often. */
#define MCP_WATCH_RETRY_NS (1000LL * 1000000LL)
/* How often an idle GET stream says it is alive (an SSE comment). */
#define MCP_HEARTBEAT_MS 15000
/* A session idle this long may be ended to make room for a new one. */
#define MCP_EVICT_IDLE_NS (60LL * 1000000000LL)

struct mcp_session {
    struct mcp_session *next;
    char id[33];
    char version[16];
    char addr[INET6_ADDRSTRLEN]; /* the client's address, without its port */
    unsigned refs;
    bool ended;
    bool stream; /* a GET stream is open */
    int64_t last_ns;
    unsigned calls;
    struct mcp_call *inflight;
    char *subs[MCP_MAX_SUBS]; /* workspace paths subscribed to */
    unsigned nsubs;
    unsigned ndirs;    /* the directories they are in: watches reserved in the MCP pool */
    uint64_t subs_gen; /* bumped at each change */
};

static pthread_mutex_t mcp_lock = PTHREAD_MUTEX_INITIALIZER;
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
        if (k->job)
            job_kill(k->job, JOB_KILL_CANCEL);
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

/* Why session_new made none. */
enum session_refusal { SESSION_MADE, SESSION_FULL, SESSION_CLIENT_FULL, SESSION_NO_MEMORY };

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

static struct mcp_session *session_new(struct server *srv, const char *version, const char *addr,
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
    sweep_locked(srv->cfg, now);
    /* One client address holds at most --mcp-max-client-sessions: 32 sessions of one client,
     * kept alive with pings, once left everybody else none. At its cap the client's own
     * session idle longest makes room, whatever its idle time (a client that lost its ids is
     * not locked out of its own sandbox); never another client's. */
    unsigned mine = 0;
    for (struct mcp_session *o = sessions; o; o = o->next)
        mine += strcmp(o->addr, addr) == 0;
    if (mine >= srv->cfg->mcp_max_client_sessions) {
        struct mcp_session *old = idlest_locked(addr);
        if (!old) {
            pthread_mutex_unlock(&mcp_lock);
            free(s);
            *why = SESSION_CLIENT_FULL;
            return NULL;
        }
        evict_locked(old, "the client's own, at --mcp-max-client-sessions");
    }
    if (nsessions >= srv->cfg->mcp_max_sessions) {
        /* Room is made by the session idle longest, when it is idle past a minute. */
        struct mcp_session *old = idlest_locked(NULL);
        if (old && now - old->last_ns > MCP_EVICT_IDLE_NS)
            evict_locked(old, "idle past a minute, at --mcp-max-sessions");
    }
    if (nsessions >= srv->cfg->mcp_max_sessions) {
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

static struct mcp_session *session_get(struct server *srv, const char *id)
{
    pthread_mutex_lock(&mcp_lock);
    sweep_locked(srv->cfg, time_mono_ns());
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

static bool session_ended(struct mcp_session *s)
{
    pthread_mutex_lock(&mcp_lock);
    bool e = s->ended;
    pthread_mutex_unlock(&mcp_lock);
    return e;
}

/* ------------------------------------------------------------------------------------ */
/* Calls under way, and their cancellation.                                              */

static struct mcp_call *call_begin(struct server *srv, struct mcp_session *s, const cJSON *id)
{
    struct mcp_call *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    if (cJSON_IsString(id))
        snprintf(k->id, sizeof(k->id), "s:%s", id->valuestring);
    else
        snprintf(k->id, sizeof(k->id), "n:%lld", (long long)id->valuedouble);
    pthread_mutex_lock(&mcp_lock);
    if (s->calls >= srv->cfg->mcp_max_calls || s->ended) {
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

void mcp_call_job(struct mcp_tool_ctx *x, struct job *job)
{
    pthread_mutex_lock(&mcp_lock);
    x->call->job = job;
    bool kill = job && __atomic_load_n(&x->call->cancelled, __ATOMIC_ACQUIRE);
    if (kill)
        job_kill(job, JOB_KILL_CANCEL);
    pthread_mutex_unlock(&mcp_lock);
}

void mcp_call_cancel(struct mcp_call *call)
{
    pthread_mutex_lock(&mcp_lock);
    __atomic_store_n(&call->cancelled, true, __ATOMIC_RELEASE);
    if (call->job)
        job_kill(call->job, JOB_KILL_CANCEL);
    pthread_mutex_unlock(&mcp_lock);
}

bool mcp_call_cancelled(const struct mcp_tool_ctx *x)
{
    return __atomic_load_n(&x->call->cancelled, __ATOMIC_ACQUIRE);
}

/* notifications/cancelled: the call of that request id, if still under way, is cancelled
 * and its command's tree killed. */
static void cancel(struct mcp_session *s, const cJSON *params)
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
            if (k->job)
                job_kill(k->job, JOB_KILL_CANCEL);
        }
    pthread_mutex_unlock(&mcp_lock);
}

/* ------------------------------------------------------------------------------------ */
/* Replies.                                                                              */

static enum MHD_Result reply_rpc_error(struct MHD_Connection *c, unsigned status, const cJSON *id,
                                       int code, const char *msg)
{
    struct jsonw w;
    jw_init(&w, 256);
    jrpc_write_error(&w, id, code, msg);
    return reply_jsonw(c, status, &w);
}

static enum MHD_Result reply_empty(struct MHD_Connection *c, unsigned status)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result ret = http_queue(c, status, r, 0);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result mcp_reply_forbidden(struct MHD_Connection *c, const char *why)
{
    return reply_rpc_error(c, MHD_HTTP_FORBIDDEN, NULL, JRPC_INVALID_REQUEST, why);
}

enum MHD_Result mcp_reply_too_large(struct MHD_Connection *c, uint64_t max)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "the message is larger than %llu bytes (--max-body-bytes)",
             (unsigned long long)max);
    return reply_rpc_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL, JRPC_INVALID_REQUEST, msg);
}

/* ------------------------------------------------------------------------------------ */
/* Checks on every request.                                                              */

static bool version_known(const char *v)
{
    for (size_t i = 0; i < NVERSIONS; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

/* Whether Accept takes type (or anything). No Accept takes everything. */
static bool accepts(struct MHD_Connection *c, const char *type)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    return !a || strstr(a, type) || strstr(a, "*/*");
}

/* ------------------------------------------------------------------------------------ */
/* Methods.                                                                              */

static void write_initialize(struct jsonw *w, const struct jrpc_msg *m, const char *version)
{
    jrpc_write_result_begin(w, m->id);
    jw_obj_begin(w);
    jw_key(w, "protocolVersion");
    jw_str(w, version);
    jw_key(w, "capabilities");
    jw_obj_begin(w);
    jw_key(w, "tools");
    jw_obj_begin(w);
    jw_key(w, "listChanged");
    jw_bool(w, false);
    jw_obj_end(w);
    jw_key(w, "resources");
    jw_obj_begin(w);
    jw_key(w, "subscribe");
    jw_bool(w, true);
    jw_key(w, "listChanged");
    jw_bool(w, false);
    jw_obj_end(w);
    jw_obj_end(w);
    jw_key(w, "serverInfo");
    jw_obj_begin(w);
    jw_key(w, "name");
    jw_str(w, "sbxd");
    jw_key(w, "title");
    jw_str(w, "sbxd sandbox");
    jw_key(w, "version");
    jw_str(w, SBXD_VERSION);
    jw_obj_end(w);
    jw_key(w, "instructions");
    jw_str(w, "A sandbox: run commands and code, and read and write files in its workspace. "
              "Paths are relative to the workspace; commands run there by default, as an "
              "unprivileged user, with a timeout that kills their whole process tree.");
    jw_obj_end(w);
    jrpc_write_result_end(w);
}

static void empty_result(struct jsonw *w, const struct jrpc_msg *m)
{
    jrpc_write_result_begin(w, m->id);
    jw_obj_begin(w);
    jw_obj_end(w);
    jrpc_write_result_end(w);
}

/* The length of path's directory part ("a/b" of "a/b/c"; 0 for a name at the root). */
static size_t dir_len(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) : 0;
}

/* Whether one of s's first n subscriptions is in path's directory (the lock held). */
static bool dir_subscribed_locked(const struct mcp_session *s, const char *path, unsigned n)
{
    size_t len = dir_len(path);
    for (unsigned i = 0; i < n; i++)
        if (dir_len(s->subs[i]) == len && memcmp(s->subs[i], path, len) == 0)
            return true;
    return false;
}

/* resources/subscribe and unsubscribe. */
static int subscribe(struct server *srv, struct mcp_session *s, const cJSON *params, bool on,
                     char *msg, size_t msglen)
{
    const cJSON *uri = params ? cJSON_GetObjectItemCaseSensitive(params, "uri") : NULL;
    if (!cJSON_IsString(uri)) {
        snprintf(msg, msglen, "'uri' is required: a file:// URI of the workspace");
        return JRPC_INVALID_PARAMS;
    }
    char *path = mcp_uri_path(srv, uri->valuestring, msg, msglen);
    if (!path)
        return JRPC_INVALID_PARAMS;
    if (on) {
        struct fs_stat_info st;
        struct sbxd_err err = {0};
        struct fs_user u;
        files_user(srv, &u);
        fs_user_enter(&u);
        int r = fs_stat(srv->sb->rootfd, path, false, &st, &err);
        fs_user_leave(&u);
        if (r < 0) {
            snprintf(msg, msglen, "%s", err.msg);
            free(path);
            return err.kind == SBXD_E_NOT_FOUND ? JRPC_RESOURCE_NOT_FOUND : JRPC_INVALID_PARAMS;
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
                   __atomic_load_n(&watch_dirs, __ATOMIC_ACQUIRE) >= srv->cfg->max_watchers) {
            snprintf(msg, msglen,
                     "the MCP sessions' subscriptions watch %llu directories, all their pool "
                     "holds (--max-watchers): retry once a session unsubscribes or ends",
                     (unsigned long long)srv->cfg->max_watchers);
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

/* tools/call: the tool's result, or a JSON-RPC error. */
static void tools_call(struct server *srv, struct MHD_Connection *c, struct mcp_session *s,
                       const struct jrpc_msg *m, bool sse_ok, const char *client, struct jsonw *w,
                       struct mcp_tool_ctx *x)
{
    const cJSON *name = m->params ? cJSON_GetObjectItemCaseSensitive(m->params, "name") : NULL;
    const cJSON *args = m->params ? cJSON_GetObjectItemCaseSensitive(m->params, "arguments") : NULL;
    if (!cJSON_IsString(name)) {
        jrpc_write_error(w, m->id, JRPC_INVALID_PARAMS, "'name' is required: the tool to call");
        return;
    }
    if (!mcp_tool_exists(name->valuestring)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "unknown tool '%.64s' (tools/list names them)",
                 name->valuestring);
        jrpc_write_error(w, m->id, JRPC_INVALID_PARAMS, msg);
        return;
    }
    if (args && !cJSON_IsObject(args)) {
        jrpc_write_error(w, m->id, JRPC_INVALID_PARAMS, "'arguments' must be an object");
        return;
    }
    cJSON *none = NULL;
    if (!args)
        args = none = cJSON_CreateObject();
    const cJSON *meta = m->params ? cJSON_GetObjectItemCaseSensitive(m->params, "_meta") : NULL;
    const cJSON *token = meta ? cJSON_GetObjectItemCaseSensitive(meta, "progressToken") : NULL;
    *x = (struct mcp_tool_ctx){.srv = srv,
                               .c = c,
                               .s = s,
                               .id = m->id,
                               .progress =
                                   (cJSON_IsString(token) || cJSON_IsNumber(token)) ? token : NULL,
                               .sse_ok = sse_ok,
                               .client = client,
                               .client_fd = -1};
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        x->client_fd = ci->connect_fd;
    x->call = call_begin(srv, s, m->id);
    if (!x->call) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "this session has %llu tool calls running (--mcp-max-calls): wait for one",
                 (unsigned long long)srv->cfg->mcp_max_calls);
        jrpc_write_error(w, m->id, JRPC_SERVER_ERROR, msg);
        cJSON_Delete(none);
        return;
    }
    if (x->progress && x->sse_ok && !mcp_tool_streams(name->valuestring)) {
        mcp_call_stream(x, name->valuestring, args); /* owns the call from now on */
        cJSON_Delete(none);
        return;
    }
    struct jsonw res;
    jw_init(&res, 512);
    char msg[512] = "";
    int code = mcp_tool_call(x, name->valuestring, args, &res, msg, sizeof(msg));
    cJSON_Delete(none);
    if (x->streamed) { /* the stream owns the call now */
        jw_free(&res);
        return;
    }
    mcp_call_end(s, x->call);
    x->call = NULL;
    if (code) {
        jrpc_write_error(w, m->id, code, msg);
    } else {
        size_t len;
        char *text = jw_finish(&res, &len);
        if (!text) {
            jrpc_write_error(w, m->id, JRPC_INTERNAL_ERROR, "out of memory");
        } else {
            jrpc_write_result_begin(w, m->id);
            jw_json(w, text, len);
            jrpc_write_result_end(w);
        }
        free(text);
    }
    jw_free(&res);
}

/* Answer request m into w (a whole response); x->streamed when the tool answered itself. */
static void dispatch(struct server *srv, struct MHD_Connection *c, struct mcp_session *s,
                     const struct jrpc_msg *m, bool sse_ok, const char *client, struct jsonw *w,
                     struct mcp_tool_ctx *x)
{
    const char *meth = m->method;
    char msg[512] = "";
    int code = 0;
    if (strcmp(meth, "ping") == 0) {
        empty_result(w, m);
    } else if (strcmp(meth, "initialize") == 0) {
        jrpc_write_error(w, m->id, JRPC_INVALID_REQUEST,
                         "this session is initialized already: initialize makes a new one "
                         "(without an Mcp-Session-Id header)");
    } else if (strcmp(meth, "tools/list") == 0) {
        size_t len;
        const char *t = mcp_tools_list(&len);
        jrpc_write_result_begin(w, m->id);
        jw_json(w, t, len);
        jrpc_write_result_end(w);
    } else if (strcmp(meth, "tools/call") == 0) {
        tools_call(srv, c, s, m, sse_ok, client, w, x);
    } else if (strcmp(meth, "resources/list") == 0 || strcmp(meth, "resources/read") == 0) {
        struct jsonw res;
        jw_init(&res, 1024);
        code = meth[10] == 'l' ? mcp_resources_list(srv, m->params, &res, msg, sizeof(msg))
                               : mcp_resources_read(srv, m->params, &res, msg, sizeof(msg));
        size_t len;
        char *text = code ? NULL : jw_finish(&res, &len);
        if (!code && !text) {
            code = JRPC_INTERNAL_ERROR;
            snprintf(msg, sizeof(msg), "out of memory");
        }
        if (!code) {
            jrpc_write_result_begin(w, m->id);
            jw_json(w, text, len);
            jrpc_write_result_end(w);
        }
        free(text);
        jw_free(&res);
    } else if (strcmp(meth, "resources/templates/list") == 0) {
        jrpc_write_result_begin(w, m->id);
        jw_obj_begin(w);
        jw_key(w, "resourceTemplates");
        jw_arr_begin(w);
        jw_arr_end(w);
        jw_obj_end(w);
        jrpc_write_result_end(w);
    } else if (strcmp(meth, "resources/subscribe") == 0 ||
               strcmp(meth, "resources/unsubscribe") == 0) {
        code = subscribe(srv, s, m->params, meth[10] == 's', msg, sizeof(msg));
        if (!code)
            empty_result(w, m);
    } else {
        code = JRPC_METHOD_NOT_FOUND;
        snprintf(msg, sizeof(msg),
                 "no method '%.64s' (sbxd serves initialize, ping, tools/list, tools/call, "
                 "resources/list, resources/read, resources/templates/list, "
                 "resources/subscribe, resources/unsubscribe)",
                 meth);
    }
    if (code)
        jrpc_write_error(w, m->id, code, msg);
}

/* The address of a request's client ("10.0.0.7" of "10.0.0.7:41234", "::1" of
 * "[::1]:41234"), what a per-client cap counts by. */
static void client_addr(const char *client, char *out, size_t len)
{
    const char *end = strrchr(client, ':');
    const char *start = client;
    if (client[0] == '[') {
        start = client + 1;
        end = strchr(start, ']');
    }
    size_t n = end && end >= start ? (size_t)(end - start) : strlen(start);
    snprintf(out, len, "%.*s", (int)n, start);
}

/* initialize: a new session, answered with its id. */
static enum MHD_Result initialize(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const struct jrpc_msg *m)
{
    const cJSON *pv =
        m->params ? cJSON_GetObjectItemCaseSensitive(m->params, "protocolVersion") : NULL;
    if (!cJSON_IsString(pv))
        return reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, m->id, JRPC_INVALID_PARAMS,
                               "initialize needs 'protocolVersion' (a string)");
    const char *version = version_known(pv->valuestring) ? pv->valuestring : versions[0];
    char addr[INET6_ADDRSTRLEN];
    client_addr(rc->client, addr, sizeof(addr));
    enum session_refusal why;
    struct mcp_session *s = session_new(srv, version, addr, &why);
    if (!s) {
        char msg[240];
        if (why == SESSION_CLIENT_FULL) {
            snprintf(msg, sizeof(msg),
                     "this client (%s) holds %llu MCP sessions (--mcp-max-client-sessions), "
                     "every one in use: end one (DELETE /mcp) or try later",
                     addr, (unsigned long long)srv->cfg->mcp_max_client_sessions);
            return reply_rpc_error(c, MHD_HTTP_TOO_MANY_REQUESTS, m->id, JRPC_SERVER_ERROR, msg);
        }
        if (why == SESSION_NO_MEMORY)
            return reply_rpc_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, m->id, JRPC_INTERNAL_ERROR,
                                   "cannot make a session (out of memory)");
        snprintf(msg, sizeof(msg),
                 "sbxd holds %llu MCP sessions (--mcp-max-sessions), none idle: end one "
                 "(DELETE /mcp) or try later",
                 (unsigned long long)srv->cfg->mcp_max_sessions);
        return reply_rpc_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, m->id, JRPC_SERVER_ERROR, msg);
    }
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(m->params, "clientInfo");
    const cJSON *cn = ci ? cJSON_GetObjectItemCaseSensitive(ci, "name") : NULL;
    LOG_EVENT("info", "mcp_session", LOG_S("id", s->id), LOG_S("action", "initialized"),
              LOG_S("version", version),
              LOG_S("client_name", cJSON_IsString(cn) ? cn->valuestring : ""),
              LOG_S("client", rc->client));
    struct jsonw w;
    jw_init(&w, 1024);
    write_initialize(&w, m, version);
    char id[sizeof(s->id)];
    snprintf(id, sizeof(id), "%s", s->id);
    mcp_session_put(s);
    return reply_jsonw_header(c, MHD_HTTP_OK, &w, "Mcp-Session-Id", id);
}

/* The session a request names by its header: NULL after replying 400 or 404 (*ret). */
static struct mcp_session *request_session(struct server *srv, struct MHD_Connection *c,
                                           enum MHD_Result *ret)
{
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    if (!sid || !*sid) {
        *ret = reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, NULL, JRPC_INVALID_REQUEST,
                               "no Mcp-Session-Id header: initialize first, then send the id "
                               "it answered with on every request");
        return NULL;
    }
    struct mcp_session *s = session_get(srv, sid);
    if (!s) {
        *ret = reply_rpc_error(c, MHD_HTTP_NOT_FOUND, NULL, JRPC_INVALID_REQUEST,
                               "no such MCP session (ended, expired, or from before a restart): "
                               "initialize a new one");
        return NULL;
    }
    const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
    if (pv && !version_known(pv)) {
        mcp_session_put(s);
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "MCP-Protocol-Version '%.32s' is not spoken here (2025-11-25, 2025-06-18, "
                 "2025-03-26, 2024-11-05 are)",
                 pv);
        *ret = reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, NULL, JRPC_INVALID_REQUEST, msg);
        return NULL;
    }
    return s;
}

static enum MHD_Result post(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!web_json_type_ok(ct))
        return reply_rpc_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, JRPC_INVALID_REQUEST,
                               "send JSON-RPC messages as application/json");
    if (!accepts(c, "application/json"))
        return reply_rpc_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, JRPC_INVALID_REQUEST,
                               "the client must accept application/json (and "
                               "text/event-stream)");
    const char *body = rc->body ? rc->body : "";
    size_t at = utf8_valid((const uint8_t *)body, rc->body_len);
    if (at < rc->body_len) {
        char msg[120];
        snprintf(msg, sizeof(msg), "the body is not valid UTF-8: byte 0x%02X at offset %zu",
                 (unsigned)(uint8_t)body[at], at);
        return reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, NULL, JRPC_PARSE_ERROR, msg);
    }
    struct jrpc_batch b;
    int code;
    const char *why;
    if (jrpc_parse(body, rc->body_len, &b, &code, &why) < 0) {
        jrpc_batch_free(&b);
        return reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, NULL, code, why);
    }
    enum MHD_Result ret;
    const struct jrpc_msg *m0 = &b.msgs[0];
    if (!b.array && m0->kind == JRPC_REQUEST && strcmp(m0->method, "initialize") == 0) {
        ret = initialize(srv, c, rc, m0);
        jrpc_batch_free(&b);
        return ret;
    }
    if (!b.array && m0->kind == JRPC_INVALID) {
        ret = reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, m0->id, m0->code, m0->why);
        jrpc_batch_free(&b);
        return ret;
    }
    struct mcp_session *s = request_session(srv, c, &ret);
    if (!s) {
        jrpc_batch_free(&b);
        return ret;
    }
    if (b.array && strcmp(s->version, "2025-03-26") != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "MCP %s has no batches: send one message per request",
                 s->version);
        ret = reply_rpc_error(c, MHD_HTTP_BAD_REQUEST, NULL, JRPC_INVALID_REQUEST, msg);
        mcp_session_put(s);
        jrpc_batch_free(&b);
        return ret;
    }
    struct jsonw w;
    jw_init(&w, 1024);
    if (b.array)
        jw_arr_begin(&w);
    size_t answers = 0;
    bool sse_ok = !b.array && accepts(c, "text/event-stream");
    for (size_t i = 0; i < b.n; i++) {
        const struct jrpc_msg *m = &b.msgs[i];
        if (m->kind == JRPC_NOTIFICATION) {
            if (strcmp(m->method, "notifications/cancelled") == 0)
                cancel(s, m->params);
            continue; /* notifications/initialized and others: nothing to do */
        }
        if (m->kind == JRPC_RESPONSE)
            continue; /* sbxd sends no requests: nothing awaits an answer */
        if (m->kind == JRPC_INVALID) {
            jrpc_write_error(&w, m->id, m->code, m->why);
            answers++;
            continue;
        }
        if (strcmp(m->method, "initialize") == 0 && b.array) {
            jrpc_write_error(&w, m->id, JRPC_INVALID_REQUEST, "initialize is never batched");
            answers++;
            continue;
        }
        struct mcp_tool_ctx x = {0};
        dispatch(srv, c, s, m, sse_ok, rc->client, &w, &x);
        if (x.streamed) { /* run_command's stream, with progress: it answered */
            jw_free(&w);
            mcp_session_put(s);
            jrpc_batch_free(&b);
            return x.ret;
        }
        answers++;
    }
    bool array = b.array;
    mcp_session_put(s);
    jrpc_batch_free(&b);
    if (!answers) {
        jw_free(&w);
        return reply_empty(c, MHD_HTTP_ACCEPTED);
    }
    if (array)
        jw_arr_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* ------------------------------------------------------------------------------------ */
/* GET /mcp: the session's stream, telling resources/updated for what it subscribed to.  */

struct get_stream {
    struct server *srv;
    struct mcp_session *s;
    uint64_t gen; /* subs_gen the watches were made for */
    char *dirs[SBXD_MCP_SESSION_WATCH_DIRS];
    struct watch_sub *subs[SBXD_MCP_SESSION_WATCH_DIRS];
    unsigned ndirs;
    bool missing;              /* a directory could not be watched ... */
    int64_t retry_ns;          /* ... and is tried again then */
    char *paths[MCP_MAX_SUBS]; /* a copy of the session's subscriptions */
    unsigned npaths;
    struct jsonw pending;
    size_t off;
    int64_t last_ns;
};

static void get_stream_unwatch(struct get_stream *g)
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
static void get_stream_sync(struct get_stream *g)
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
        char *dir = strndup(g->paths[i], dir_len(g->paths[i]));
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

static void sse_message_begin(struct jsonw *w)
{
    jw_raw(w, "event: message\ndata: ", 21);
}

static void sse_message_end(struct jsonw *w)
{
    jw_raw(w, "\n\n", 2);
}

/* The next notification into g->pending: true when one is there. */
static bool get_stream_next(struct get_stream *g)
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
                jw_reset(&g->pending);
                g->off = 0;
                sse_message_begin(&g->pending);
                jw_obj_begin(&g->pending);
                jw_key(&g->pending, "jsonrpc");
                jw_str(&g->pending, "2.0");
                jw_key(&g->pending, "method");
                jw_str(&g->pending, "notifications/resources/updated");
                jw_key(&g->pending, "params");
                jw_obj_begin(&g->pending);
                jw_key(&g->pending, "uri");
                mcp_write_uri(g->srv, &g->pending, g->paths[k]);
                jw_obj_end(&g->pending);
                jw_obj_end(&g->pending);
                sse_message_end(&g->pending);
                return true;
            }
        }
    }
    return false;
}

static ssize_t get_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct get_stream *g = cls;
    for (;;) {
        if (g->off < g->pending.len)
            return (ssize_t)http_stream_out(&g->pending, &g->off, out, max);
        if (session_ended(g->s) || __atomic_load_n(&g->srv->sb->draining, __ATOMIC_ACQUIRE))
            return MHD_CONTENT_READER_END_OF_STREAM;
        get_stream_sync(g);
        if (get_stream_next(g)) {
            g->last_ns = time_mono_ns();
            continue;
        }
        if (time_mono_ns() - g->last_ns >= (int64_t)MCP_HEARTBEAT_MS * 1000000) {
            jw_reset(&g->pending);
            g->off = 0;
            jw_raw(&g->pending, ": keep-alive\n\n", 14);
            g->last_ns = time_mono_ns();
            continue;
        }
        usleep(50000);
    }
}

static void get_stream_free(void *cls)
{
    struct get_stream *g = cls;
    get_stream_unwatch(g);
    pthread_mutex_lock(&mcp_lock);
    g->s->stream = false;
    pthread_mutex_unlock(&mcp_lock);
    mcp_session_put(g->s);
    jw_free(&g->pending);
    __atomic_fetch_sub(&g->srv->streams, 1, __ATOMIC_ACQ_REL);
    free(g);
}

static enum MHD_Result get(struct server *srv, struct MHD_Connection *c)
{
    if (!accepts(c, "text/event-stream"))
        return reply_rpc_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, JRPC_INVALID_REQUEST,
                               "GET /mcp is a text/event-stream: accept it");
    enum MHD_Result ret;
    struct mcp_session *s = request_session(srv, c, &ret);
    if (!s)
        return ret;
    pthread_mutex_lock(&mcp_lock);
    bool busy = s->stream;
    s->stream = true;
    pthread_mutex_unlock(&mcp_lock);
    if (busy) {
        mcp_session_put(s);
        return reply_rpc_error(c, MHD_HTTP_CONFLICT, NULL, JRPC_INVALID_REQUEST,
                               "this session's stream is open already (one at a time)");
    }
    struct get_stream *g = calloc(1, sizeof(*g));
    if (!g) {
        pthread_mutex_lock(&mcp_lock);
        s->stream = false;
        pthread_mutex_unlock(&mcp_lock);
        mcp_session_put(s);
        return MHD_NO;
    }
    g->srv = srv;
    g->s = s;
    g->gen = UINT64_MAX;
    g->last_ns = time_mono_ns();
    jw_init(&g->pending, 512);
    __atomic_fetch_add(&srv->streams, 1, __ATOMIC_ACQ_REL);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                               get_stream_read, g, get_stream_free);
    if (!r) {
        get_stream_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result del(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    enum MHD_Result ret;
    struct mcp_session *s = request_session(srv, c, &ret);
    if (!s)
        return ret;
    pthread_mutex_lock(&mcp_lock);
    session_end_locked(s);
    pthread_mutex_unlock(&mcp_lock);
    LOG_EVENT("info", "mcp_session", LOG_S("id", s->id), LOG_S("action", "deleted"),
              LOG_S("client", rc->client));
    mcp_session_put(s);
    return reply_empty(c, MHD_HTTP_NO_CONTENT);
}

enum MHD_Result route_mcp(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (!srv->cfg->mcp_max_sessions)
        return reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND",
                           "the MCP endpoint is off (--mcp-max-sessions 0)");
    /* (Origin and Host: checked for every route before any, guard.c and web.h.) */
    if (strcmp(rc->method, "POST") == 0) {
        if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
            return reply_rpc_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, JRPC_SERVER_ERROR,
                                   "sbxd is shutting down");
        return post(srv, c, rc);
    }
    if (strcmp(rc->method, "GET") == 0)
        return get(srv, c);
    return del(srv, c, rc);
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
