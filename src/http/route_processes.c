/* /processes: background processes (background.h) over HTTP. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbxd/background.h"
#include "sbxd/run.h"
#include "http_internal.h"
#include "sbxd/metrics.h"
#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

/* The process object of docs/api.md. */
static void write_process(struct jsonw *w, struct bg_proc *p, const struct bg_info *in,
                          const char *type)
{
    const struct exec_request *req = bg_request(p);
    jw_obj_begin(w);
    if (type) {
        jw_key(w, "type");
        jw_str(w, type);
    }
    if (in->finished) {
        exec_result_fields(w, in->id, &in->res, NULL, NULL, req->encoding);
    } else {
        jw_key(w, "id");
        jw_str(w, in->id);
        jw_key(w, "status");
        jw_str(w, "running");
        jw_key(w, "exit_code");
        jw_null(w);
        jw_key(w, "signal");
        jw_null(w);
        jw_key(w, "encoding");
        jw_str(w, req->encoding == EXEC_ENC_BASE64 ? "base64" : "utf8");
        jw_key(w, "stdout_bytes");
        jw_uint(w, in->res.stdout_bytes);
        jw_key(w, "stderr_bytes");
        jw_uint(w, in->res.stderr_bytes);
    }
    jw_key(w, "pid");
    jw_int(w, in->pid);
    jw_key(w, "grpc_process_id");
    jw_int(w, in->number);
    jw_key(w, "front");
    jw_str(w, exec_front_name(req->front));
    if (req->shell) {
        jw_key(w, "command");
        jw_str(w, req->argv[2]);
    } else {
        jw_key(w, "argv");
        jw_arr_begin(w);
        for (size_t i = 0; i < req->argc; i++)
            jw_str(w, req->argv[i]);
        jw_arr_end(w);
    }
    jw_key(w, "cwd");
    jw_str(w, req->cwd[0] ? req->cwd : ".");
    jw_key(w, "pty");
    if (req->pty) {
        jw_obj_begin(w);
        jw_key(w, "cols");
        jw_uint(w, in->pty_cols);
        jw_key(w, "rows");
        jw_uint(w, in->pty_rows);
        jw_obj_end(w);
    } else {
        jw_null(w);
    }
    reply_time_field(w, "started_at", in->started_real_ns);
    reply_time_field(w, "finished_at", in->finished ? in->finished_real_ns : 0);
    jw_key(w, "stdin_open");
    jw_bool(w, in->stdin_open);
    jw_key(w, "output_start");
    jw_uint(w, in->out_start);
    jw_key(w, "output_end");
    jw_uint(w, in->out_end);
    jw_obj_end(w);
}

static enum MHD_Result reply_process(struct MHD_Connection *c, unsigned status, struct bg_proc *p,
                                     const struct bg_info *in)
{
    struct jsonw w;
    jw_init(&w, 512);
    write_process(&w, p, in, NULL);
    return reply_jsonw(c, status, &w);
}

static enum MHD_Result list(struct MHD_Connection *c)
{
    struct bg_proc **v;
    size_t n = bg_list(&v);
    if (!v)
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    struct jsonw w;
    jw_init(&w, 256 + n * 512);
    jw_obj_begin(&w);
    jw_key(&w, "processes");
    jw_arr_begin(&w);
    for (size_t i = 0; i < n; i++) {
        struct bg_info in;
        bg_info(v[i], &in);
        write_process(&w, v[i], &in, NULL);
        bg_put(v[i]);
    }
    free(v);
    jw_arr_end(&w);
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

static enum MHD_Result start(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is shutting down and takes no new processes");
    /* A background process is meant to run long: it gets the longest timeout allowed
     * unless it asks for less (exec_service_policy). */
    struct request_policy pol;
    run_policy(&srv->sb->exec, MX_BACKGROUND, &pol);
    struct exec_request req;
    struct sbxd_err err = {0};
    if (exec_request_parse(rc->body ? rc->body : "", rc->body_len, &pol, &req, &err) < 0)
        return reply_err(c, &err);
    /* Its start waits its turn among --max-running like any command (run.h). */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct run_front f = {.front = FRONT_REST,
                          .mode = MX_BACKGROUND,
                          .client_fd = ci ? ci->connect_fd : -1,
                          .stop = &srv->sb->draining};
    double queued_ms;
    struct bg_proc *p = run_start_process(&srv->sb->exec, &f, &req, &queued_ms, &err);
    if (!p)
        return (err.flags & SBXD_EF_GONE) ? MHD_NO : reply_err(c, &err);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    struct jsonw w;
    jw_init(&w, 128);
    jw_obj_begin(&w);
    jw_key(&w, "id");
    jw_str(&w, in.id);
    jw_key(&w, "pid");
    jw_int(&w, in.pid);
    exec_queued_field(&w, queued_ms);
    jw_obj_end(&w);
    char loc[64];
    snprintf(loc, sizeof(loc), "/processes/%s", in.id);
    return reply_jsonw_header(c, MHD_HTTP_CREATED, &w, MHD_HTTP_HEADER_LOCATION, loc);
}

enum MHD_Result route_processes(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (strcmp(rc->method, "POST") == 0)
        return start(srv, c, rc);
    return list(c);
}

/* ------------------------------------------------------------------------------------ */
/* GET /processes/{id}/output: replay and follow.                                        */

struct out_stream {
    struct server *srv;
    struct bg_proc *p;
    struct events ev;
    uint64_t off;
    bool follow, utf8, started, ended;
    char buf[SBXD_READ_CHUNK];
};

static void simple_event(struct out_stream *s, const char *type, const char *k1, uint64_t v1,
                         const char *k2, uint64_t v2)
{
    event_begin(&s->ev, type);
    jw_obj_begin(&s->ev.pending);
    jw_key(&s->ev.pending, "type");
    jw_str(&s->ev.pending, type);
    jw_key(&s->ev.pending, k1);
    jw_uint(&s->ev.pending, v1);
    if (k2) {
        jw_key(&s->ev.pending, k2);
        jw_uint(&s->ev.pending, v2);
    }
    jw_obj_end(&s->ev.pending);
    event_end(&s->ev);
}

static bool out_next(struct out_stream *s)
{
    struct jsonw *w = &s->ev.pending;
    if (!s->started) {
        s->started = true;
        struct bg_info in;
        bg_info(s->p, &in);
        event_begin(&s->ev, "start");
        exec_event_start(w, in.id, in.pid, &s->off, NULL);
        event_end(&s->ev);
        return true;
    }
    if (s->ended)
        return false;
    size_t n;
    int stream = 1;
    uint64_t next;
    int wait = s->follow ? event_wait_ms(&s->ev, s->srv->cfg->heartbeat_ms) : 0;
    if (s->follow && wait == 0)
        wait = 1; /* a heartbeat is due, but output that is there goes first */
    enum bg_read_result rr =
        bg_read(s->p, s->off, s->buf, sizeof(s->buf), s->utf8, wait, &n, &stream, &next);
    switch (rr) {
    case BG_READ_DATA: {
        event_begin(&s->ev, exec_stream_name(stream));
        exec_event_output(w, stream, s->buf, n, s->utf8, s->off, true);
        event_end(&s->ev);
        s->off = next;
        return true;
    }
    case BG_READ_DROPPED:
        simple_event(s, "dropped", "offset", s->off, "bytes", next - s->off);
        s->off = next;
        return true;
    case BG_READ_NONE:
        if (s->follow) {
            event_heartbeat(&s->ev);
        } else {
            simple_event(s, "end", "offset", s->off, NULL, 0);
            s->ended = true;
        }
        return true;
    case BG_READ_END:
        break;
    }
    struct bg_info in;
    bg_info(s->p, &in);
    event_begin(&s->ev, "exit");
    exec_event_exit(w, in.id, &in.res, bg_request(s->p)->encoding, &in.out_end);
    event_end(&s->ev);
    s->ended = true;
    return true;
}

static ssize_t out_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct out_stream *s = cls;
    while (!events_pending(&s->ev))
        if (!out_next(s))
            return MHD_CONTENT_READER_END_OF_STREAM;
    return (ssize_t)events_take(&s->ev, out, max);
}

static void out_free(void *cls)
{
    struct out_stream *s = cls;
    bg_put(s->p); /* a follower that leaves does nothing to the process */
    server_stream_release(s->srv);
    events_free(&s->ev);
    free(s);
}

/* A query value that must be a whole number: -1 when malformed. */
static int query_uint(struct MHD_Connection *c, const char *name, uint64_t *out)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    if (!v)
        return 0;
    if (!*v || strlen(v) > 19 || strspn(v, "0123456789") != strlen(v))
        return -1;
    *out = strtoull(v, NULL, 10);
    return 0;
}

/* true/false/1/0 (absent: false); -1 when malformed. */
static int query_bool(struct MHD_Connection *c, const char *name, bool *out)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    *out = false;
    if (!v)
        return 0;
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || *v == '\0')
        *out = true;
    else if (strcmp(v, "false") != 0 && strcmp(v, "0") != 0)
        return -1;
    return 0;
}

/* *kept: the stream took p's reference (else the caller gives it back). */
static enum MHD_Result output(struct server *srv, struct MHD_Connection *c, struct bg_proc *p,
                              bool *kept)
{
    *kept = false;
    uint64_t since = 0;
    bool follow;
    if (query_uint(c, "since", &since) < 0)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'since' must be a byte offset (a whole number)");
    if (query_bool(c, "follow", &follow) < 0)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'follow' must be true or false");
    bool utf8 = bg_request(p)->encoding != EXEC_ENC_BASE64;
    const char *enc = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "encoding");
    if (enc && strcmp(enc, "utf8") == 0)
        utf8 = true;
    else if (enc && strcmp(enc, "base64") == 0)
        utf8 = false;
    else if (enc)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'encoding' must be utf8 or base64");
    if (!bg_offset_valid(p, since)) {
        struct bg_info in;
        bg_info(p, &in);
        return reply_error(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, "RANGE_NOT_SATISFIABLE",
                           "'since' %llu is past the output so far (%llu bytes)",
                           (unsigned long long)since, (unsigned long long)in.out_end);
    }
    struct out_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return MHD_NO;
    *kept = true;
    enum stream_format fmt = stream_format_of(c) == STREAM_SSE ? STREAM_SSE : STREAM_NDJSON;
    s->srv = srv;
    s->p = p; /* the reference is the stream's now */
    s->off = since;
    s->follow = follow;
    s->utf8 = utf8;
    events_init(&s->ev, fmt);
    server_stream_hold(srv); /* until out_free */
    return events_reply(c, fmt, out_read, s, out_free);
}

/* ------------------------------------------------------------------------------------ */
/* stdin, signal, resize.                                                               */

static enum MHD_Result reply_ok_err(struct MHD_Connection *c, int rc, struct sbxd_err *err,
                                    struct jsonw *w)
{
    if (rc < 0) {
        jw_free(w);
        return reply_err(c, err);
    }
    return reply_jsonw(c, MHD_HTTP_OK, w);
}

static enum MHD_Result write_stdin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                   struct bg_proc *p)
{
    bool eof;
    if (query_bool(c, "eof", &eof) < 0)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'eof' must be true or false");
    /* The client's socket: a writer that hangs up while the process does not read is let
     * go at once, with its thread, descriptor and connection slot. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct sbxd_err err = {0};
    uint64_t written = 0;
    bool open_after;
    enum bg_stdin_result r =
        bg_stdin(p, rc->body ? rc->body : "", rc->body_len, eof, srv->cfg->stdin_timeout_ms,
                 ci ? ci->connect_fd : -1, &written, &open_after, &err);
    if (r == BG_STDIN_HUNG_UP)
        return MHD_NO; /* nobody to answer: close the connection */
    if (r == BG_STDIN_TIMED_OUT)
        metrics_limit(LIM_STDIN_TIMEOUT);
    else if (r == BG_STDIN_FAILED && err.kind == SBXD_E_BUSY)
        metrics_limit(LIM_STDIN_PENDING);
    /* (A 409's message says how many of the bytes went in: the rest never will.) */
    struct jsonw w;
    jw_init(&w, 64);
    jw_obj_begin(&w);
    jw_key(&w, "bytes");
    jw_uint(&w, written);
    jw_key(&w, "stdin_open"); /* as the write left it (the process may end right after) */
    jw_bool(&w, open_after);
    jw_obj_end(&w);
    return reply_ok_err(c, r == BG_STDIN_DONE ? 0 : -1, &err, &w);
}

static enum MHD_Result send_signal(struct MHD_Connection *c, struct req_ctx *rc, struct bg_proc *p)
{
    static const char *const keys[] = {"signal", NULL};
    enum MHD_Result ret;
    cJSON *o = http_json_object(c, rc, keys, &ret);
    if (!o)
        return ret;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "signal");
    const char *name = NULL;
    int sig = bg_signal_named(cJSON_GetStringValue(v), &name);
    cJSON_Delete(o);
    if (!sig)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'signal' must be one of " BG_SIGNAL_NAMES);
    struct sbxd_err err = {0};
    int r = bg_signal(p, sig, &err);
    struct jsonw w;
    jw_init(&w, 96);
    jw_obj_begin(&w);
    jw_key(&w, "id");
    struct bg_info in;
    bg_info(p, &in);
    jw_str(&w, in.id);
    jw_key(&w, "signal");
    jw_str(&w, name);
    jw_obj_end(&w);
    return reply_ok_err(c, r, &err, &w);
}

static enum MHD_Result resize(struct MHD_Connection *c, struct req_ctx *rc, struct bg_proc *p)
{
    static const char *const keys[] = {"cols", "rows", NULL};
    enum MHD_Result ret;
    cJSON *o = http_json_object(c, rc, keys, &ret);
    if (!o)
        return ret;
    double d[2];
    const char *names[2] = {"cols", "rows"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, names[i]);
        d[i] = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (d[i] < 1 || d[i] > SBXD_PTY_MAX || d[i] != (double)(unsigned)d[i]) {
            cJSON_Delete(o);
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "'%s' must be a whole number from 1 to %d", names[i], SBXD_PTY_MAX);
        }
    }
    cJSON_Delete(o);
    struct sbxd_err err = {0};
    int r = bg_resize(p, (unsigned)d[0], (unsigned)d[1], &err);
    struct jsonw w;
    jw_init(&w, 64);
    jw_obj_begin(&w);
    jw_key(&w, "cols");
    jw_uint(&w, (unsigned)d[0]);
    jw_key(&w, "rows");
    jw_uint(&w, (unsigned)d[1]);
    jw_obj_end(&w);
    return reply_ok_err(c, r, &err, &w);
}

/* /processes/{id}[/{action}] */
enum MHD_Result route_process(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    struct item_url u;
    enum MHD_Result ret;
    if (!http_item_url(c, rc, "/processes", "process", &u, &ret))
        return ret;
    const char *id = u.id, *action = u.action;
    bool get = strcmp(rc->method, "GET") == 0;
    if (!id[0])
        return http_method_in(c, rc, HTTP_GET, &ret) ? list(c) : ret;
    unsigned allowed;
    if (!*action)
        allowed = HTTP_GET | HTTP_DELETE;
    else if (strcmp(action, "output") == 0 || strcmp(action, "tty") == 0)
        allowed = HTTP_GET;
    else if (strcmp(action, "stdin") == 0 || strcmp(action, "signal") == 0 ||
             strcmp(action, "resize") == 0)
        allowed = HTTP_POST;
    else
        return reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND",
                           "no route for %.100s (known: output, tty, stdin, signal, resize)",
                           rc->url);
    if (!http_method_in(c, rc, allowed, &ret))
        return ret;
    struct bg_proc *p = bg_get(id);
    /* A gRPC Start's process, by the process_id its InitEvent gave (1, 2, ...). */
    char *end;
    long number = strtol(id, &end, 10);
    if (!p && *id >= '1' && *id <= '9' && !*end && number <= INT32_MAX)
        p = bg_get_number((int32_t)number);
    if (!p)
        return reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND",
                           "no process '%s' (unknown, or forgotten after its retention)", id);
    struct bg_info in;
    if (!*action && get) {
        bg_info(p, &in);
        ret = reply_process(c, MHD_HTTP_OK, p, &in);
    } else if (!*action) {
        bg_remove(p, &in);
        ret = reply_process(c, MHD_HTTP_OK, p, &in);
    } else if (strcmp(action, "output") == 0) {
        bool kept;
        ret = output(srv, c, p, &kept);
        if (kept)
            return ret;
    } else if (strcmp(action, "tty") == 0) {
        uint64_t since = 0;
        bool kept = false;
        if (query_uint(c, "since", &since) < 0)
            ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                              "'since' must be a byte offset (a whole number)");
        else
            ret = ws_tty_open(srv, c, rc, p, since, &kept);
        if (kept)
            return ret;
    } else if (strcmp(action, "stdin") == 0) {
        ret = write_stdin(srv, c, rc, p);
    } else if (strcmp(action, "signal") == 0) {
        ret = send_signal(c, rc, p);
    } else {
        ret = resize(c, rc, p);
    }
    bg_put(p);
    return ret;
}
