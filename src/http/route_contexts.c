/* /contexts: code contexts (context.h) over HTTP. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/context.h"
#include "http_internal.h"
#include "sbxd/kernelspec.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

static const char *state_name(enum ctx_state s)
{
    return s == CTX_IDLE ? "idle" : s == CTX_BUSY ? "busy" : "dead";
}

/* The context object of docs/api.md. */
static void write_context(struct jsonw *w, const struct ctx_info *in)
{
    jw_obj_begin(w);
    jw_key(w, "id");
    jw_str(w, in->id);
    jw_key(w, "language");
    jw_str(w, in->language);
    jw_key(w, "kernel");
    jw_str(w, in->kernel);
    jw_key(w, "cwd");
    jw_str(w, in->cwd);
    jw_key(w, "pid");
    if (in->pid)
        jw_int(w, in->pid);
    else
        jw_null(w);
    jw_key(w, "state");
    jw_str(w, state_name(in->state));
    jw_key(w, "execution_count");
    jw_uint(w, in->execution_count);
    jw_key(w, "memory_bytes");
    jw_uint(w, in->memory_bytes);
    reply_time_field(w, "created_at", in->created_real_ns);
    reply_time_field(w, "last_used_at", in->last_used_real_ns);
    if (in->state == CTX_DEAD) {
        jw_key(w, "dead_reason");
        jw_str(w, in->dead_reason);
    }
    jw_obj_end(w);
}

static enum MHD_Result reply_context(struct MHD_Connection *c, unsigned status, struct ctx *x)
{
    struct ctx_info in;
    ctx_info(x, &in, true);
    struct jsonw w;
    jw_init(&w, 512);
    write_context(&w, &in);
    if (status != MHD_HTTP_CREATED)
        return reply_jsonw(c, status, &w);
    char loc[64];
    snprintf(loc, sizeof(loc), "/contexts/%s", in.id);
    return reply_jsonw_header(c, status, &w, MHD_HTTP_HEADER_LOCATION, loc);
}

static enum MHD_Result list(struct MHD_Connection *c)
{
    struct ctx **v;
    size_t n = ctx_list(&v);
    if (!v)
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    struct jsonw w;
    jw_init(&w, 256 + n * 384);
    jw_obj_begin(&w);
    jw_key(&w, "contexts");
    jw_arr_begin(&w);
    for (size_t i = 0; i < n; i++) {
        struct ctx_info in;
        ctx_info(v[i], &in, true);
        write_context(&w, &in);
        ctx_put(v[i]);
    }
    free(v);
    jw_arr_end(&w);
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

static enum MHD_Result create(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is shutting down and makes no new contexts");
    struct sbxd_err err = {0};
    struct ctx *x = ctx_create(rc->body ? rc->body : "{}", rc->body ? rc->body_len : 2, &err);
    if (!x)
        return reply_err(c, &err);
    struct ctx_info in;
    ctx_info(x, &in, false);
    LOG_EVENT("info", "context", LOG_S("id", in.id), LOG_S("action", "created"),
              LOG_S("language", in.language), LOG_I("pid", in.pid), LOG_S("client", rc->client));
    enum MHD_Result ret = reply_context(c, MHD_HTTP_CREATED, x);
    ctx_put(x);
    return ret;
}

enum MHD_Result route_contexts(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (strcmp(rc->method, "POST") == 0)
        return create(srv, c, rc);
    return list(c);
}

/* GET /kernels: the installed kernelspecs, besides the shells. */
enum MHD_Result route_kernels(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)srv;
    (void)rc;
    struct kspec *v;
    size_t n = kspec_list(&v);
    struct jsonw w;
    jw_init(&w, 256 + n * 256);
    jw_obj_begin(&w);
    jw_key(&w, "kernels");
    jw_arr_begin(&w);
    for (size_t i = 0; i < n; i++) {
        jw_obj_begin(&w);
        jw_key(&w, "name");
        jw_str(&w, v[i].name);
        jw_key(&w, "language");
        jw_str(&w, v[i].language);
        jw_key(&w, "display_name");
        jw_str(&w, v[i].display_name);
        jw_key(&w, "interrupt_mode");
        jw_str(&w, v[i].interrupt_message ? "message" : "signal");
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_key(&w, "shells");
    jw_arr_begin(&w);
    jw_str(&w, "bash");
    jw_str(&w, "sh");
    jw_arr_end(&w);
    jw_key(&w, "warm_ready");
    jw_uint(&w, ctx_warm_ready());
    jw_obj_end(&w);
    kspec_free_all(v, n);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* ---------------------------------------------------------------------------------- */
/* POST /contexts/{id}/execute                                                          */

/* The result fields of an execution (after "stdout" and "stderr" where there are those):
 * results is the JSON array of its MIME bundles (NULL: none were kept, the events carried
 * them). */
static void write_result(struct jsonw *w, const struct ctx_result *r, uint64_t timeout_ms,
                         struct jsonw *results)
{
    jw_key(w, "status");
    jw_str(w, ctx_status_name(r->status));
    jw_key(w, "execution_count");
    jw_uint(w, r->execution_count);
    jw_key(w, "exit_code");
    if (r->status == CTX_DIED || r->kernel)
        jw_null(w);
    else
        jw_int(w, r->exit_code);
    if (results) {
        jw_key(w, "results");
        jw_raw(w, results->buf, results->len); /* "[" and the bundles */
        jw_arr_end(w);
    }
    jw_key(w, "error");
    if (r->status == CTX_OK) {
        jw_null(w);
    } else if (r->status == CTX_ERROR && r->error_json) {
        jw_json(w, r->error_json, strlen(r->error_json));
    } else {
        char value[400];
        const char *name = "ExitStatus";
        if (r->status == CTX_TIMEOUT) {
            name = "Timeout";
            snprintf(value, sizeof(value), "interrupted after %llu ms%s",
                     (unsigned long long)timeout_ms,
                     !r->restarted ? "; the context's state is kept"
                     : r->kernel   ? "; the kernel did not come back and was restarted (its "
                                     "state is lost)"
                                   : "; the shell did not come back and was restarted (its "
                                     "state is lost)");
        } else if (r->status == CTX_DIED) {
            name = "ContextDied";
            snprintf(value, sizeof(value), "%s", r->reason);
        } else {
            snprintf(value, sizeof(value), "exit status %d%s", r->exit_code,
                     r->interrupted ? " (interrupted)" : "");
        }
        jw_obj_begin(w);
        jw_key(w, "name");
        jw_str(w, name);
        jw_key(w, "value");
        jw_str(w, value);
        jw_key(w, "traceback");
        jw_arr_begin(w);
        jw_arr_end(w);
        jw_obj_end(w);
    }
    jw_key(w, "stdout_bytes");
    jw_uint(w, r->stdout_bytes);
    jw_key(w, "stderr_bytes");
    jw_uint(w, r->stderr_bytes);
    jw_key(w, "interrupted");
    jw_bool(w, r->interrupted);
    jw_key(w, "restarted");
    jw_bool(w, r->restarted);
    jw_key(w, "duration_ms");
    jw_double(w, r->duration_ms, 3);
}

static void audit(const char *id, const struct ctx_result *r, size_t code_len, const char *client)
{
    LOG_EVENT("info", "context_exec", LOG_S("id", id), LOG_I("execution_count", r->execution_count),
              LOG_S("status", ctx_status_name(r->status)), LOG_I("exit_code", r->exit_code),
              LOG_I("code_bytes", code_len), LOG_D("duration_ms", r->duration_ms),
              LOG_I("stdout_bytes", r->stdout_bytes), LOG_I("stderr_bytes", r->stderr_bytes),
              LOG_S("client", client));
}

/* A client's poll of its connection while a synchronous execution runs. */
#define CLIENT_CHECK_MS 250

static enum MHD_Result execute_sync(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc, struct ctx_run *run, const char *id,
                                    uint64_t timeout_ms, size_t code_len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    bool peek = true; /* (job_client_hung_up's state of the connection) */
    struct outbuf ob[3];
    outbuf_init(&ob[1], (size_t)srv->cfg->max_output_bytes);
    outbuf_init(&ob[2], (size_t)srv->cfg->max_output_bytes);
    /* The MIME bundles, under the same cap as each stream's output. */
    struct jsonw results;
    jw_init(&results, 64);
    jw_arr_begin(&results);
    bool results_cut = false;
    int st;
    const uint8_t *d;
    size_t n;
    int k;
    while ((k = ctx_run_next(run, CLIENT_CHECK_MS, &st, &d, &n)) >= 0) {
        if (k > 0 && st <= CTX_EV_STDERR)
            outbuf_append(&ob[st], d, n);
        else if (k > 0 && st != CTX_EV_ERROR && results.len + n > srv->cfg->max_output_bytes)
            results_cut = true;
        else if (k > 0 && st != CTX_EV_ERROR)
            jw_json(&results, d, n);
        else if (k == 0 && job_client_hung_up(fd, &peek))
            break; /* ctx_run_end interrupts it */
    }
    if (k >= 0) {
        outbuf_free(&ob[1]);
        outbuf_free(&ob[2]);
        jw_free(&results);
        ctx_run_end(run);
        return MHD_NO;
    }
    const struct ctx_result *r = ctx_run_result(run);
    audit(id, r, code_len, rc->client);
    struct jsonw w;
    jw_init(&w, 512 + ob[1].len + ob[2].len + results.len);
    jw_obj_begin(&w);
    jw_key(&w, "context");
    jw_str(&w, id);
    jw_key(&w, "stdout");
    jw_str_utf8(&w, ob[1].data, ob[1].len, outbuf_truncated(&ob[1]));
    jw_key(&w, "stderr");
    jw_str_utf8(&w, ob[2].data, ob[2].len, outbuf_truncated(&ob[2]));
    jw_key(&w, "stdout_truncated");
    jw_bool(&w, outbuf_truncated(&ob[1]));
    jw_key(&w, "stderr_truncated");
    jw_bool(&w, outbuf_truncated(&ob[2]));
    jw_key(&w, "results_truncated");
    jw_bool(&w, results_cut);
    write_result(&w, r, timeout_ms, &results);
    jw_obj_end(&w);
    outbuf_free(&ob[1]);
    outbuf_free(&ob[2]);
    jw_free(&results);
    ctx_run_end(run);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* A streamed execution: start, stdout/stderr as they come, end. */
struct ctx_stream {
    struct server *srv;
    struct ctx_run *run;
    char id[25];
    char client[64];
    uint64_t timeout_ms;
    size_t code_len;
    bool started, ended;
    uint64_t offset[3];
    uint8_t carry[3][4]; /* a UTF-8 character cut by a read waits for its rest */
    size_t ncarry[3];
    uint8_t buf[SBXD_READ_CHUNK + 8];
    struct events ev;
};

/* n bytes of output as stdout/stderr events (a kernel's text may be longer than a read: in
 * pieces), a UTF-8 character cut at the end held back unless final. */
static void stream_output(struct ctx_stream *s, int st, const uint8_t *data, size_t n, bool final)
{
    do {
        size_t len = s->ncarry[st];
        memcpy(s->buf, s->carry[st], len);
        size_t take = n < sizeof(s->buf) - len ? n : sizeof(s->buf) - len;
        memcpy(s->buf + len, data, take);
        data += take;
        n -= take;
        len += take;
        size_t send = utf8_cut(s->buf, len, final && !n);
        s->ncarry[st] = len - send;
        memcpy(s->carry[st], s->buf + send, len - send);
        if (!send)
            continue;
        event_begin(&s->ev, st == 1 ? "stdout" : "stderr");
        jw_obj_begin(&s->ev.pending);
        jw_key(&s->ev.pending, "type");
        jw_str(&s->ev.pending, st == 1 ? "stdout" : "stderr");
        jw_key(&s->ev.pending, "data");
        jw_str_utf8(&s->ev.pending, s->buf, send, false);
        jw_key(&s->ev.pending, "offset");
        jw_uint(&s->ev.pending, s->offset[st]);
        jw_obj_end(&s->ev.pending);
        event_end(&s->ev);
        s->offset[st] += send;
    } while (n);
}

/* A display, result or error event: {"type", "data": the object}. */
static void stream_object(struct ctx_stream *s, int type, const uint8_t *data, size_t n)
{
    const char *name = type == CTX_EV_DISPLAY  ? "display"
                       : type == CTX_EV_RESULT ? "result"
                                               : "error";
    event_begin(&s->ev, name);
    jw_obj_begin(&s->ev.pending);
    jw_key(&s->ev.pending, "type");
    jw_str(&s->ev.pending, name);
    jw_key(&s->ev.pending, "data");
    jw_json(&s->ev.pending, data, n);
    jw_obj_end(&s->ev.pending);
    event_end(&s->ev);
}

static bool stream_next(void *cls, bool ready)
{
    struct ctx_stream *s = cls;
    struct jsonw *w = &s->ev.pending;
    if (!s->started) {
        s->started = true;
        event_begin(&s->ev, "start");
        jw_obj_begin(w);
        jw_key(w, "type");
        jw_str(w, "start");
        jw_key(w, "context");
        jw_str(w, s->id);
        jw_key(w, "execution_count");
        jw_uint(w, ctx_run_result(s->run)->execution_count);
        jw_obj_end(w);
        event_end(&s->ev);
        return true;
    }
    if (s->ended)
        return false;
    for (;;) {
        int st;
        const uint8_t *d;
        size_t n;
        int k = ctx_run_next(s->run, ready ? 0 : event_wait_ms(&s->ev, s->srv->cfg->heartbeat_ms),
                             &st, &d, &n);
        if (k > 0 && st > CTX_EV_STDERR) {
            stream_object(s, st, d, n);
            return true;
        }
        if (k > 0) {
            stream_output(s, st, d, n, false);
            if (events_pending(&s->ev))
                return true;
            continue;
        }
        if (k == 0) {
            if (!ready)
                event_heartbeat(&s->ev);
            return true;
        }
        for (int i = 1; i <= 2; i++)
            if (s->ncarry[i]) {
                stream_output(s, i, NULL, 0, true);
                return true;
            }
        const struct ctx_result *r = ctx_run_result(s->run);
        audit(s->id, r, s->code_len, s->client);
        event_begin(&s->ev, "end");
        jw_obj_begin(w);
        jw_key(w, "type");
        jw_str(w, "end");
        jw_key(w, "context");
        jw_str(w, s->id);
        write_result(w, r, s->timeout_ms, NULL);
        jw_obj_end(w);
        event_end(&s->ev);
        s->ended = true;
        return true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct ctx_stream *s = cls;
    return events_fill(&s->ev, stream_next, s, out, max, EVENTS_BATCH_ROOM);
}

static void stream_free(void *cls)
{
    struct ctx_stream *s = cls;
    ctx_run_end(s->run); /* the client left mid-stream: the code is interrupted */
    events_free(&s->ev);
    free(s);
}

static enum MHD_Result execute_stream(struct server *srv, struct MHD_Connection *c,
                                      struct req_ctx *rc, struct ctx_run *run, const char *id,
                                      enum stream_format fmt, uint64_t timeout_ms, size_t code_len)
{
    struct ctx_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        ctx_run_end(run);
        return MHD_NO;
    }
    s->srv = srv;
    s->run = run;
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->client, sizeof(s->client), "%s", rc->client);
    s->timeout_ms = timeout_ms;
    s->code_len = code_len;
    events_init(&s->ev, fmt);
    return events_reply(c, fmt, stream_read, s, stream_free);
}

/* The code of o (a request's body, freed here) in context x (NULL: the default context of
 * o's "language", made on first use). */
static enum MHD_Result execute_body(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc, struct ctx *x, cJSON *o)
{
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(o, "timeout_ms");
    uint64_t max = srv->cfg->max_timeout_ms;
    if (!cJSON_IsString(code)) {
        cJSON_Delete(o);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'code' is required: the code to run, as a string");
    }
    if (to && (!cJSON_IsNumber(to) || to->valuedouble < 1 || to->valuedouble > (double)max ||
               to->valuedouble != (double)(uint64_t)to->valuedouble)) {
        cJSON_Delete(o);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'timeout_ms' must be a whole number from 1 to %llu (--max-timeout-ms)",
                           (unsigned long long)max);
    }
    uint64_t timeout_ms = to ? (uint64_t)to->valuedouble : srv->cfg->timeout_ms;
    if (timeout_ms > max)
        timeout_ms = max;
    /* A NUL can only come as \u0000: JSON text carries no raw one. */
    size_t len = strlen(code->valuestring);
    if (rc->body && json_check_no_nul(rc->body, rc->body_len) != 0) {
        cJSON_Delete(o);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'code' must not contain NUL characters");
    }
    struct sbxd_err err = {0};
    if (!x) {
        /* Python's when no language is named, as MCP's run_code. */
        const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "language");
        if (lang && !cJSON_IsString(lang)) {
            cJSON_Delete(o);
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "'language' must be a string (\"python\", the default, \"bash\", "
                               "...: its default context, made on first use; GET /kernels lists "
                               "them), or give 'context' (the id of one)");
        }
        if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE)) {
            cJSON_Delete(o);
            return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                               "sbxd is shutting down and makes no new contexts");
        }
        if (!(x = ctx_default(lang ? lang->valuestring : "python", &err))) {
            cJSON_Delete(o);
            return reply_err(c, &err);
        }
    } else {
        ctx_ref(x);
    }
    struct ctx_info in;
    ctx_info(x, &in, false);
    /* Past --max-running it waits its turn for a running slot, as /execute does (context.h);
     * a client that hangs up meanwhile has nobody to answer. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct exec_admit adm = {.client_fd = ci ? ci->connect_fd : -1, .stop = &srv->sb->draining};
    struct ctx_run *run = ctx_run_open(x, code->valuestring, len, timeout_ms,
                                       (int)srv->cfg->queue_timeout_ms, &adm, &err);
    ctx_put(x); /* (the run holds one of its own) */
    cJSON_Delete(o);
    if (!run)
        return adm.gone ? MHD_NO : reply_err(c, &err);
    enum stream_format fmt = stream_format_of(c);
    if (fmt != STREAM_NONE)
        return execute_stream(srv, c, rc, run, in.id, fmt, timeout_ms, len);
    return execute_sync(srv, c, rc, run, in.id, timeout_ms, len);
}

static enum MHD_Result execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                               struct ctx *x)
{
    static const char *const keys[] = {"code", "timeout_ms", NULL};
    enum MHD_Result ret;
    cJSON *o = http_json_object(c, rc, keys, &ret);
    return o ? execute_body(srv, c, rc, x, o) : ret;
}

/* POST /run_code: code in a context named, or in its language's default one. */
enum MHD_Result route_run_code(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    static const char *const keys[] = {"code", "language", "context", "timeout_ms", NULL};
    enum MHD_Result ret;
    cJSON *o = http_json_object(c, rc, keys, &ret);
    if (!o)
        return ret;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "context");
    if (!id)
        return execute_body(srv, c, rc, NULL, o);
    struct ctx *x = cJSON_IsString(id) ? ctx_get(id->valuestring) : NULL;
    if (!x) {
        ret = cJSON_IsString(id) ? reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND",
                                               "no context '%.64s'", id->valuestring)
                                 : reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                                               "'context' must be a context's id, as a string");
        cJSON_Delete(o);
        return ret;
    }
    ret = execute_body(srv, c, rc, x, o);
    ctx_put(x);
    return ret;
}

/* /contexts/{id}[/{action}] */
enum MHD_Result route_context(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    struct item_url u;
    enum MHD_Result ret;
    if (!http_item_url(c, rc, "/contexts", "context", &u, &ret))
        return ret;
    const char *id = u.id, *action = u.action;
    bool get = strcmp(rc->method, "GET") == 0;
    if (!id[0])
        return http_method_in(c, rc, HTTP_GET | HTTP_POST, &ret) ? route_contexts(srv, c, rc) : ret;
    unsigned allowed;
    if (!*action)
        allowed = HTTP_GET | HTTP_DELETE;
    else if (strcmp(action, "execute") == 0 || strcmp(action, "restart") == 0 ||
             strcmp(action, "interrupt") == 0)
        allowed = HTTP_POST;
    else
        return reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND",
                           "no route for %.100s (known: execute, restart, interrupt)", rc->url);
    if (!http_method_in(c, rc, allowed, &ret))
        return ret;
    struct ctx *x = ctx_get(id);
    if (!x)
        return reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND",
                           "no context '%s' (unknown, deleted, or shut down after "
                           "--context-idle-s)",
                           id);
    if (!*action && get) {
        ret = reply_context(c, MHD_HTTP_OK, x);
    } else if (!*action) {
        ctx_delete(x);
        LOG_EVENT("info", "context", LOG_S("id", id), LOG_S("action", "deleted"),
                  LOG_S("client", rc->client));
        ret = reply_context(c, MHD_HTTP_OK, x);
    } else if (strcmp(action, "execute") == 0) {
        ret = execute(srv, c, rc, x);
    } else if (strcmp(action, "restart") == 0) {
        struct sbxd_err err = {0};
        if (ctx_restart(x, &err) < 0) {
            ret = reply_err(c, &err);
        } else {
            LOG_EVENT("info", "context", LOG_S("id", id), LOG_S("action", "restarted"),
                      LOG_S("client", rc->client));
            ret = reply_context(c, MHD_HTTP_OK, x);
        }
    } else {
        bool was = ctx_interrupt(x);
        struct jsonw w;
        jw_init(&w, 96);
        jw_obj_begin(&w);
        jw_key(&w, "id");
        jw_str(&w, id);
        jw_key(&w, "interrupted");
        jw_bool(&w, was);
        jw_obj_end(&w);
        ret = reply_jsonw(c, MHD_HTTP_OK, &w);
    }
    ctx_put(x);
    return ret;
}
