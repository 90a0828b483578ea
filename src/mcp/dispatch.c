/*
 * dispatch.c - the JSON-RPC face of MCP: a client's messages (one, or a batch where the
 * session's version has them) checked, sorted and answered into the transport's sink:
 * initialize makes a session, the other requests name one; tools/call runs a tool (as a
 * stream of progress, then the result, when the caller gave a progress token and the
 * transport streams); resources/... read the workspace; notifications/cancelled cancels a
 * call under way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/log.h"
#include "sbxd/utf8.h"

/* The protocol versions spoken, newest first: initialize gets the client's when it is one
 * of them, else the newest. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))

static bool version_known(const char *v)
{
    for (size_t i = 0; i < NVERSIONS; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

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

/* A result's text (w's, finished) as the response to id into out; an error when out of
 * memory. */
static void write_result(struct jsonw *out, const cJSON *id, struct jsonw *res)
{
    size_t len;
    char *text = jw_finish(res, &len);
    if (!text) {
        jrpc_write_error(out, id, JRPC_INTERNAL_ERROR, "out of memory");
    } else {
        jrpc_write_result_begin(out, id);
        jw_json(out, text, len);
        jrpc_write_result_end(out);
    }
    free(text);
}

/* The call's context, or false after writing the error into w. */
static bool call_ctx(const struct mcp_host *h, struct mcp_sink *k, struct mcp_session *s,
                     const struct jrpc_msg *m, const struct mcp_request *rq, struct jsonw *w,
                     struct mcp_tool_ctx *x)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m->params, "_meta");
    const cJSON *token = meta ? cJSON_GetObjectItemCaseSensitive(meta, "progressToken") : NULL;
    *x = (struct mcp_tool_ctx){.h = h,
                               .k = k,
                               .s = s,
                               .id = m->id,
                               .progress =
                                   (cJSON_IsString(token) || cJSON_IsNumber(token)) ? token : NULL,
                               .stream_ok = k->stream_ok && !k->batch,
                               .client = rq->client,
                               .client_fd = rq->client_fd};
    x->call = mcp_call_begin(h, s, m->id);
    if (x->call)
        return true;
    char msg[160];
    snprintf(msg, sizeof(msg),
             "this session has %llu tool calls running (--mcp-max-calls): wait for one",
             (unsigned long long)h->cfg->mcp_max_calls);
    jrpc_write_error(w, m->id, JRPC_SERVER_ERROR, msg);
    return false;
}

/* tools/call: the tool's result, or a JSON-RPC error, into w; x->deferred when the answer
 * went to the sink's defer. */
static void tools_call(const struct mcp_host *h, struct mcp_sink *k, struct mcp_session *s,
                       const struct jrpc_msg *m, const struct mcp_request *rq, struct jsonw *w,
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
    if (!call_ctx(h, k, s, m, rq, w, x))
        return;
    cJSON *none = NULL;
    if (!args)
        args = none = cJSON_CreateObject();
    if (x->progress && x->stream_ok && !mcp_tool_streams(name->valuestring)) {
        mcp_call_thread(x, name->valuestring, args); /* owns the call from now on */
        cJSON_Delete(none);
        return;
    }
    struct jsonw res;
    jw_init(&res, 512);
    char msg[512] = "";
    int code = mcp_tool_call(x, name->valuestring, args, &res, msg, sizeof(msg));
    cJSON_Delete(none);
    if (x->deferred) { /* the stream owns the call now */
        jw_free(&res);
        return;
    }
    mcp_call_end(s, x->call);
    x->call = NULL;
    if (code)
        jrpc_write_error(w, m->id, code, msg);
    else
        write_result(w, m->id, &res);
    jw_free(&res);
}

/* resources/list and resources/read: 0, or a JSON-RPC error code with msg. */
static int resources(const struct mcp_host *h, const struct jrpc_msg *m, struct jsonw *w, char *msg,
                     size_t msglen)
{
    struct jsonw res;
    jw_init(&res, 1024);
    int code = m->method[10] == 'l' ? mcp_resources_list(h, m->params, &res, msg, msglen)
                                    : mcp_resources_read(h, m->params, &res, msg, msglen);
    if (!code)
        write_result(w, m->id, &res);
    jw_free(&res);
    return code;
}

/* Answer request m into w (a whole response); x->deferred when the tool answered itself. */
static void dispatch(const struct mcp_host *h, struct mcp_sink *k, struct mcp_session *s,
                     const struct jrpc_msg *m, const struct mcp_request *rq, struct jsonw *w,
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
        tools_call(h, k, s, m, rq, w, x);
    } else if (strcmp(meth, "resources/list") == 0 || strcmp(meth, "resources/read") == 0) {
        code = resources(h, m, w, msg, sizeof(msg));
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
        code = mcp_subscribe(h, s, m->params, meth[10] == 's', msg, sizeof(msg));
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

/* Send the error of a request refused as a whole (id: the message's, or NULL). */
static enum mcp_status refuse(struct mcp_sink *k, enum mcp_status st, const cJSON *id, int code,
                              const char *msg)
{
    mcp_send_error(k, id, code, msg);
    return st;
}

/* Why initialize made no session, sent. */
static enum mcp_status session_refused(const struct mcp_host *h, struct mcp_sink *k,
                                       const cJSON *id, enum session_refusal why, const char *addr)
{
    char msg[240];
    if (why == SESSION_CLIENT_FULL) {
        snprintf(msg, sizeof(msg),
                 "this client (%s) holds %llu MCP sessions (--mcp-max-client-sessions), "
                 "every one in use: end one (DELETE /mcp) or try later",
                 addr, (unsigned long long)h->cfg->mcp_max_client_sessions);
        return refuse(k, MCP_TOO_MANY, id, JRPC_SERVER_ERROR, msg);
    }
    if (why == SESSION_NO_MEMORY)
        return refuse(k, MCP_INTERNAL, id, JRPC_INTERNAL_ERROR,
                      "cannot make a session (out of memory)");
    snprintf(msg, sizeof(msg),
             "sbxd holds %llu MCP sessions (--mcp-max-sessions), none idle: end one "
             "(DELETE /mcp) or try later",
             (unsigned long long)h->cfg->mcp_max_sessions);
    return refuse(k, MCP_UNAVAILABLE, id, JRPC_SERVER_ERROR, msg);
}

/* initialize: a new session, answered with its id (rq->new_session). */
static enum mcp_status initialize(const struct mcp_host *h, struct mcp_request *rq,
                                  struct mcp_sink *k, const struct jrpc_msg *m)
{
    const cJSON *pv =
        m->params ? cJSON_GetObjectItemCaseSensitive(m->params, "protocolVersion") : NULL;
    if (!cJSON_IsString(pv))
        return refuse(k, MCP_BAD_REQUEST, m->id, JRPC_INVALID_PARAMS,
                      "initialize needs 'protocolVersion' (a string)");
    const char *version = version_known(pv->valuestring) ? pv->valuestring : versions[0];
    char addr[INET6_ADDRSTRLEN];
    client_addr(rq->client, addr, sizeof(addr));
    enum session_refusal why;
    struct mcp_session *s = mcp_session_new(h, version, addr, &why);
    if (!s)
        return session_refused(h, k, m->id, why, addr);
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(m->params, "clientInfo");
    const cJSON *cn = ci ? cJSON_GetObjectItemCaseSensitive(ci, "name") : NULL;
    LOG_EVENT("info", "mcp_session", LOG_S("id", s->id), LOG_S("action", "initialized"),
              LOG_S("version", version),
              LOG_S("client_name", cJSON_IsString(cn) ? cn->valuestring : ""),
              LOG_S("client", rq->client));
    struct jsonw w;
    jw_init(&w, 1024);
    write_initialize(&w, m, version);
    snprintf(rq->new_session, sizeof(rq->new_session), "%s", s->id);
    mcp_session_put(s);
    size_t len;
    char *text = jw_finish(&w, &len);
    jw_free(&w);
    if (!text)
        return MCP_INTERNAL;
    k->send(k, text, len);
    free(text);
    return MCP_OK;
}

struct mcp_session *mcp_request_session(const struct mcp_host *h, const struct mcp_request *rq,
                                        struct mcp_sink *k, enum mcp_status *st)
{
    if (!rq->session || !*rq->session) {
        *st = refuse(k, MCP_BAD_REQUEST, NULL, JRPC_INVALID_REQUEST,
                     "no Mcp-Session-Id header: initialize first, then send the id "
                     "it answered with on every request");
        return NULL;
    }
    struct mcp_session *s = mcp_session_get(h, rq->session);
    if (!s) {
        *st = refuse(k, MCP_NOT_FOUND, NULL, JRPC_INVALID_REQUEST,
                     "no such MCP session (ended, expired, or from before a restart): "
                     "initialize a new one");
        return NULL;
    }
    if (rq->version && !version_known(rq->version)) {
        mcp_session_put(s);
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "MCP-Protocol-Version '%.32s' is not spoken here (2025-11-25, 2025-06-18, "
                 "2025-03-26, 2024-11-05 are)",
                 rq->version);
        *st = refuse(k, MCP_BAD_REQUEST, NULL, JRPC_INVALID_REQUEST, msg);
        return NULL;
    }
    return s;
}

/* Answer the messages of b for session s: MCP_DEFERRED when a tool's stream took the
 * answer. */
static enum mcp_status answer(const struct mcp_host *h, struct mcp_request *rq, struct mcp_sink *k,
                              struct mcp_session *s, const struct jrpc_batch *b)
{
    struct jsonw w;
    jw_init(&w, 1024);
    for (size_t i = 0; i < b->n; i++) {
        const struct jrpc_msg *m = &b->msgs[i];
        if (m->kind == JRPC_NOTIFICATION) {
            if (strcmp(m->method, "notifications/cancelled") == 0)
                mcp_cancel_request(s, m->params);
            continue; /* notifications/initialized and others: nothing to do */
        }
        if (m->kind == JRPC_RESPONSE)
            continue; /* sbxd sends no requests: nothing awaits an answer */
        jw_reset(&w);
        if (m->kind == JRPC_INVALID) {
            jrpc_write_error(&w, m->id, m->code, m->why);
        } else if (strcmp(m->method, "initialize") == 0 && b->array) {
            jrpc_write_error(&w, m->id, JRPC_INVALID_REQUEST, "initialize is never batched");
        } else {
            struct mcp_tool_ctx x = {0};
            dispatch(h, k, s, m, rq, &w, &x);
            if (x.deferred) { /* a tool's stream, with progress: it answers */
                jw_free(&w);
                return MCP_DEFERRED;
            }
        }
        if (w.failed)
            continue;
        k->send(k, w.buf, w.len);
    }
    jw_free(&w);
    return MCP_OK;
}

/* The body as JSON-RPC messages into b: MCP_OK, or the error sent. */
static enum mcp_status parse(const struct mcp_request *rq, struct mcp_sink *k, struct jrpc_batch *b)
{
    const char *body = rq->body ? rq->body : "";
    size_t at = utf8_valid((const uint8_t *)body, rq->len);
    if (at < rq->len) {
        char msg[120];
        snprintf(msg, sizeof(msg), "the body is not valid UTF-8: byte 0x%02X at offset %zu",
                 (unsigned)(uint8_t)body[at], at);
        memset(b, 0, sizeof(*b));
        return refuse(k, MCP_BAD_REQUEST, NULL, JRPC_PARSE_ERROR, msg);
    }
    int code;
    const char *why;
    if (jrpc_parse(body, rq->len, b, &code, &why) < 0)
        return refuse(k, MCP_BAD_REQUEST, NULL, code, why);
    return MCP_OK;
}

enum mcp_status mcp_post(const struct mcp_host *h, struct mcp_request *rq, struct mcp_sink *k)
{
    struct jrpc_batch b;
    enum mcp_status st = parse(rq, k, &b);
    const struct jrpc_msg *m0 = st == MCP_OK ? &b.msgs[0] : NULL;
    if (st != MCP_OK) {
        /* (the error is sent) */
    } else if (!b.array && m0->kind == JRPC_REQUEST && strcmp(m0->method, "initialize") == 0) {
        st = initialize(h, rq, k, m0);
    } else if (!b.array && m0->kind == JRPC_INVALID) {
        st = refuse(k, MCP_BAD_REQUEST, m0->id, m0->code, m0->why);
    } else {
        struct mcp_session *s = mcp_request_session(h, rq, k, &st);
        if (s && b.array && strcmp(s->version, "2025-03-26") != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "MCP %s has no batches: send one message per request",
                     s->version);
            st = refuse(k, MCP_BAD_REQUEST, NULL, JRPC_INVALID_REQUEST, msg);
        } else if (s) {
            k->batch = b.array;
            st = answer(h, rq, k, s, &b);
        }
        mcp_session_put(s);
    }
    jrpc_batch_free(&b);
    return st;
}

enum mcp_status mcp_delete(const struct mcp_host *h, struct mcp_request *rq, struct mcp_sink *k)
{
    enum mcp_status st;
    struct mcp_session *s = mcp_request_session(h, rq, k, &st);
    if (!s)
        return st;
    mcp_session_end(s);
    LOG_EVENT("info", "mcp_session", LOG_S("id", s->id), LOG_S("action", "deleted"),
              LOG_S("client", rq->client));
    mcp_session_put(s);
    return MCP_OK;
}
