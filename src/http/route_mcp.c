/*
 * route_mcp.c - the Model Context Protocol over Streamable HTTP, a thin face on src/mcp:
 * POST /mcp takes JSON-RPC messages, GET /mcp is the session's stream of notifications
 * (resource updates), DELETE /mcp ends a session. What the messages mean is MCP's
 * (mcp.h); this file reads the headers, checks what HTTP alone decides (Content-Type,
 * Accept), and frames what MCP's sink is given: one JSON body, or server-sent events.
 *
 * Answers are application/json, but for a tool call whose caller gave a progress token and
 * takes text/event-stream: that one is a stream of progress notifications and then the
 * result. Errors that are not about one message (no session, a bad Origin, a body too
 * large) are HTTP statuses with a JSON-RPC error body whose id is null.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp_http.h"
#include "http_internal.h"
#include "http_files_internal.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/mcp.h"
#include "sbxd/timeutil.h"
#include "web_internal.h"

/* How often an idle GET stream says it is alive (an SSE comment). */
#define MCP_HEARTBEAT_MS 15000

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

/* Whether Accept takes type (or anything). No Accept takes everything. */
static bool accepts(struct MHD_Connection *c, const char *type)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    return !a || strstr(a, type) || strstr(a, "*/*");
}

static void sse_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
}

/* ------------------------------------------------------------------------------------ */
/* An answer that goes on: MCP's task, its messages as server-sent events.                */

struct sse_stream {
    struct mcp_sink k;
    const struct mcp_task_ops *ops;
    void *task;
    struct jsonw pending;
    size_t off;
    bool ended;
};

static void sse_send(struct mcp_sink *k, const char *msg, size_t len)
{
    struct sse_stream *st = (struct sse_stream *)k;
    if (st->off >= st->pending.len) {
        jw_reset(&st->pending);
        st->off = 0;
    }
    jw_raw(&st->pending, "event: message\ndata: ", 21);
    jw_raw(&st->pending, msg, len);
    jw_raw(&st->pending, "\n\n", 2);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct sse_stream *st = cls;
    for (;;) {
        if (st->off < st->pending.len)
            return (ssize_t)http_stream_out(&st->pending, &st->off, out, max);
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->ended = !st->ops->step(st->task, &st->k);
    }
}

/* The stream is over, or the client went away: the task is dropped either way. */
static void sse_free(void *cls)
{
    struct sse_stream *st = cls;
    st->ops->drop(st->task);
    jw_free(&st->pending);
    free(st);
}

/* ------------------------------------------------------------------------------------ */
/* An answer as one JSON body (or the start of a stream).                                */

struct body_sink {
    struct mcp_sink k;
    struct MHD_Connection *c;
    struct jsonw body;
    size_t n;            /* messages in body */
    enum MHD_Result ret; /* a deferred answer's */
};

static void body_send(struct mcp_sink *k, const char *msg, size_t len)
{
    struct body_sink *b = (struct body_sink *)k;
    if (k->batch && !b->n)
        jw_arr_begin(&b->body);
    jw_json(&b->body, msg, len);
    b->n++;
}

static void body_defer(struct mcp_sink *k, const struct mcp_task_ops *ops, void *task)
{
    struct body_sink *b = (struct body_sink *)k;
    b->ret = MHD_NO;
    if (!ops)
        return; /* no memory to go on */
    struct sse_stream *st = calloc(1, sizeof(*st));
    if (!st) {
        ops->drop(task);
        return;
    }
    st->k = (struct mcp_sink){.send = sse_send, .stream_ok = true};
    st->ops = ops;
    st->task = task;
    jw_init(&st->pending, 1024);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, sse_read, st, sse_free);
    if (!r) {
        sse_free(st);
        return;
    }
    sse_headers(r);
    b->ret = http_queue(b->c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
}

static void body_init(struct body_sink *b, struct MHD_Connection *c, bool stream_ok)
{
    *b = (struct body_sink){.k = {.send = body_send, .defer = body_defer, .stream_ok = stream_ok},
                            .c = c};
    jw_init(&b->body, 1024);
}

/* Answer as MCP's status says, with the body the sink was given. */
static enum MHD_Result body_reply(struct body_sink *b, enum mcp_status st, const char *sid)
{
    static const unsigned status[] = {
        [MCP_OK] = MHD_HTTP_OK,
        [MCP_BAD_REQUEST] = MHD_HTTP_BAD_REQUEST,
        [MCP_NOT_FOUND] = MHD_HTTP_NOT_FOUND,
        [MCP_CONFLICT] = MHD_HTTP_CONFLICT,
        [MCP_TOO_MANY] = MHD_HTTP_TOO_MANY_REQUESTS,
        [MCP_UNAVAILABLE] = MHD_HTTP_SERVICE_UNAVAILABLE,
        [MCP_INTERNAL] = MHD_HTTP_INTERNAL_SERVER_ERROR,
    };
    if (st == MCP_DEFERRED || !b->n) {
        jw_free(&b->body);
        if (st == MCP_DEFERRED)
            return b->ret;
        return st == MCP_OK ? reply_empty(b->c, MHD_HTTP_ACCEPTED) : MHD_NO;
    }
    if (b->k.batch)
        jw_arr_end(&b->body);
    if (sid && *sid)
        return reply_jsonw_header(b->c, status[st], &b->body, "Mcp-Session-Id", sid);
    return reply_jsonw(b->c, status[st], &b->body);
}

static void request_of(struct MHD_Connection *c, const struct req_ctx *rc, struct mcp_request *rq)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    *rq = (struct mcp_request){
        .body = rc->body,
        .len = rc->body_len,
        .session = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id"),
        .version = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version"),
        .client = rc->client,
        .client_fd = ci ? ci->connect_fd : -1,
    };
}

/* ------------------------------------------------------------------------------------ */
/* POST and DELETE.                                                                      */

static enum MHD_Result post(struct MHD_Connection *c, struct req_ctx *rc)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!web_json_type_ok(ct))
        return reply_rpc_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, JRPC_INVALID_REQUEST,
                               "send JSON-RPC messages as application/json");
    if (!accepts(c, "application/json"))
        return reply_rpc_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, JRPC_INVALID_REQUEST,
                               "the client must accept application/json (and "
                               "text/event-stream)");
    struct mcp_request rq;
    request_of(c, rc, &rq);
    struct body_sink b;
    body_init(&b, c, accepts(c, "text/event-stream"));
    enum mcp_status st = mcp_post(mcp_host(), &rq, &b.k);
    return body_reply(&b, st, rq.new_session);
}

static enum MHD_Result del(struct MHD_Connection *c, struct req_ctx *rc)
{
    struct mcp_request rq;
    request_of(c, rc, &rq);
    struct body_sink b;
    body_init(&b, c, false);
    enum mcp_status st = mcp_delete(mcp_host(), &rq, &b.k);
    if (st == MCP_OK) {
        jw_free(&b.body);
        return reply_empty(c, MHD_HTTP_NO_CONTENT);
    }
    return body_reply(&b, st, NULL);
}

/* ------------------------------------------------------------------------------------ */
/* GET /mcp: the session's stream, telling resources/updated for what it subscribed to.  */

struct get_stream {
    struct server *srv;
    struct mcp_events *e;
    struct jsonw pending;
    size_t off;
    int64_t last_ns;
};

static ssize_t get_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct get_stream *g = cls;
    for (;;) {
        if (g->off < g->pending.len)
            return (ssize_t)http_stream_out(&g->pending, &g->off, out, max);
        if (__atomic_load_n(&g->srv->sb->draining, __ATOMIC_ACQUIRE))
            return MHD_CONTENT_READER_END_OF_STREAM;
        jw_reset(&g->pending);
        g->off = 0;
        jw_raw(&g->pending, "event: message\ndata: ", 21);
        int r = mcp_events_next(g->e, &g->pending);
        if (r < 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (r > 0) {
            jw_raw(&g->pending, "\n\n", 2);
            g->last_ns = time_mono_ns();
            continue;
        }
        jw_reset(&g->pending);
        if (time_mono_ns() - g->last_ns >= (int64_t)MCP_HEARTBEAT_MS * 1000000) {
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
    mcp_events_close(g->e);
    jw_free(&g->pending);
    server_stream_release(g->srv);
    free(g);
}

static enum MHD_Result get(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (!accepts(c, "text/event-stream"))
        return reply_rpc_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, JRPC_INVALID_REQUEST,
                               "GET /mcp is a text/event-stream: accept it");
    struct mcp_request rq;
    request_of(c, rc, &rq);
    struct body_sink b;
    body_init(&b, c, false);
    enum mcp_status st;
    struct mcp_events *e = mcp_events_open(mcp_host(), &rq, &b.k, &st);
    if (!e)
        return body_reply(&b, st, NULL);
    jw_free(&b.body);
    struct get_stream *g = calloc(1, sizeof(*g));
    if (!g) {
        mcp_events_close(e);
        return MHD_NO;
    }
    g->srv = srv;
    g->e = e;
    g->last_ns = time_mono_ns();
    jw_init(&g->pending, 512);
    server_stream_hold(srv);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                               get_stream_read, g, get_stream_free);
    if (!r) {
        get_stream_free(g);
        return MHD_NO;
    }
    sse_headers(r);
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
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
        return post(c, rc);
    }
    if (strcmp(rc->method, "GET") == 0)
        return get(srv, c, rc);
    return del(c, rc);
}
