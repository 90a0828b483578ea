#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/http.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

static void write_stream(struct jsonw *w, const char *key, const struct outbuf *ob,
                         enum exec_encoding enc)
{
    jw_key(w, key);
    if (enc == EXEC_ENC_BASE64)
        jw_base64(w, ob->data, ob->len);
    else
        jw_str_utf8(w, ob->data, ob->len, outbuf_truncated(ob));
}

/* The result object of design 3.2, into w; a streamed one (out NULL) has no stdout and
 * stderr: they went out as events. type: the event type to start with, or NULL. */
static void write_result(struct jsonw *w, const struct job *job, const struct outbuf *out,
                         const struct outbuf *errb, enum exec_encoding enc, const char *type)
{
    const struct job_result *r = job_result(job);
    jw_obj_begin(w);
    if (type) {
        jw_key(w, "type");
        jw_str(w, type);
    }
    jw_key(w, "id");
    jw_str(w, job_id(job));
    jw_key(w, "status");
    jw_str(w, job_status_name(r->status));
    jw_key(w, "exit_code");
    jw_int(w, r->exit_code);
    jw_key(w, "signal");
    if (r->signal)
        jw_int(w, r->signal);
    else
        jw_null(w);
    if (out) {
        write_stream(w, "stdout", out, enc);
        write_stream(w, "stderr", errb, enc);
    }
    jw_key(w, "encoding");
    jw_str(w, enc == EXEC_ENC_BASE64 ? "base64" : "utf8");
    if (out) {
        jw_key(w, "stdout_truncated");
        jw_bool(w, outbuf_truncated(out));
        jw_key(w, "stderr_truncated");
        jw_bool(w, outbuf_truncated(errb));
    }
    jw_key(w, "stdout_bytes");
    jw_uint(w, r->stdout_bytes);
    jw_key(w, "stderr_bytes");
    jw_uint(w, r->stderr_bytes);
    jw_key(w, "timed_out");
    jw_bool(w, r->timed_out);
    jw_key(w, "oom_killed");
    jw_bool(w, r->oom_killed);
    jw_key(w, "duration_ms");
    jw_double(w, r->duration_ms, 3);
    jw_key(w, "cpu_ms");
    jw_double(w, r->cpu_ms, 3);
    jw_key(w, "memory_peak_bytes");
    jw_uint(w, r->memory_peak_bytes);
    if (r->status == JOB_FAILED_TO_START) {
        jw_key(w, "error");
        jw_str(w, r->error);
    }
    jw_obj_end(w);
}

/* The audit line: who ran what, where, and how it ended. */
static void audit(const struct exec_request *req, const struct job *job, const char *client)
{
    char cmd[SBXD_AUDIT_COMMAND_MAX + 1];
    size_t n = 0;
    size_t from = req->shell ? 2 : 0; /* for "command", the shell text itself */
    for (size_t i = from; i < req->argc && n < SBXD_AUDIT_COMMAND_MAX; i++) {
        int w = snprintf(cmd + n, sizeof(cmd) - n, "%s%s", i > from ? " " : "", req->argv[i]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (n > SBXD_AUDIT_COMMAND_MAX)
        n = SBXD_AUDIT_COMMAND_MAX;
    cmd[n] = '\0';
    const struct job_result *r = job_result(job);
    LOG_EVENT("info", "exec", LOG_S("id", job_id(job)), LOG_S(req->shell ? "command" : "argv", cmd),
              LOG_S("cwd", req->cwd[0] ? req->cwd : "."),
              LOG_S("status", job_status_name(r->status)), LOG_I("exit_code", r->exit_code),
              r->signal ? LOG_I("signal", r->signal) : LOG_NULL("signal"),
              LOG_D("duration_ms", r->duration_ms), LOG_I("stdout_bytes", r->stdout_bytes),
              LOG_I("stderr_bytes", r->stderr_bytes), LOG_S("client", client));
}

static int cancel_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Streamed /execute: NDJSON or SSE events as the command runs.                          */

enum stream_format { STREAM_NONE, STREAM_NDJSON, STREAM_SSE };

static enum stream_format stream_format_of(struct MHD_Connection *c)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    if (!a)
        return STREAM_NONE;
    if (strstr(a, "application/x-ndjson"))
        return STREAM_NDJSON;
    if (strstr(a, "text/event-stream"))
        return STREAM_SSE;
    return STREAM_NONE;
}

struct exec_stream {
    struct server *srv;
    struct job *job;
    struct exec_request req;
    char client[64];
    enum stream_format fmt;
    bool started, ended;
    uint64_t offset[3];  /* bytes of stdout (1) and stderr (2) sent so far */
    uint8_t carry[3][4]; /* utf8: the start of a character cut off by a read */
    size_t ncarry[3];
    struct jsonw pending; /* an event not yet (fully) handed to MHD */
    size_t pending_off;
    int64_t last_event_ns;
    char buf[SBXD_READ_CHUNK + 8];
};

/* One event into s->pending: NDJSON, or SSE with the type as the event name. */
static void event_begin(struct exec_stream *s, const char *type)
{
    jw_reset(&s->pending); /* one buffer for every event of the stream */
    s->pending_off = 0;
    if (s->fmt == STREAM_SSE) {
        char head[64];
        int n = snprintf(head, sizeof(head), "event: %s\ndata: ", type);
        jw_raw(&s->pending, head, (size_t)n);
    }
}

static void event_end(struct exec_stream *s)
{
    jw_raw(&s->pending, s->fmt == STREAM_SSE ? "\n\n" : "\n", s->fmt == STREAM_SSE ? 2 : 1);
    s->last_event_ns = time_mono_ns();
}

/* Output of one stream as an event. UTF-8 is never split inside a character: the start of
 * one cut off by the read waits for the rest (it is at most 3 bytes). */
static void output_event(struct exec_stream *s, int stream, const uint8_t *data, size_t n,
                         bool final)
{
    uint8_t *joined; /* data is in s->buf + 8: room to put a carry in front of it */
    size_t len = n;
    if (s->req.encoding != EXEC_ENC_BASE64 && s->ncarry[stream]) {
        joined = (uint8_t *)data - s->ncarry[stream];
        memcpy(joined, s->carry[stream], s->ncarry[stream]);
        len += s->ncarry[stream];
        s->ncarry[stream] = 0;
    } else {
        joined = (uint8_t *)data;
    }
    size_t send = len;
    if (s->req.encoding != EXEC_ENC_BASE64 && !final) {
        /* Up to the last whole character; a cut-off valid prefix is kept back. */
        size_t i = 0;
        while (i < len) {
            int k = utf8_decode(joined + i, len - i);
            if (k == 0)
                break;
            i += (size_t)(k > 0 ? k : -k);
        }
        send = i;
        s->ncarry[stream] = len - i;
        memcpy(s->carry[stream], joined + i, len - i);
    }
    if (!send)
        return;
    const char *type = stream == 1 ? "stdout" : "stderr";
    event_begin(s, type);
    jw_obj_begin(&s->pending);
    jw_key(&s->pending, "type");
    jw_str(&s->pending, type);
    jw_key(&s->pending, "data");
    if (s->req.encoding == EXEC_ENC_BASE64)
        jw_base64(&s->pending, joined, send);
    else
        jw_str_utf8(&s->pending, joined, send, false);
    jw_key(&s->pending, "offset");
    jw_uint(&s->pending, s->offset[stream]);
    jw_obj_end(&s->pending);
    event_end(s);
    s->offset[stream] += send;
}

/* The next event into s->pending; false when the stream is over. */
static bool next_event(struct exec_stream *s)
{
    if (!s->started) {
        s->started = true;
        event_begin(s, "start");
        jw_obj_begin(&s->pending);
        jw_key(&s->pending, "type");
        jw_str(&s->pending, "start");
        jw_key(&s->pending, "id");
        jw_str(&s->pending, job_id(s->job));
        jw_key(&s->pending, "pid");
        jw_int(&s->pending, job_pid(s->job));
        jw_obj_end(&s->pending);
        event_end(s);
        return true;
    }
    if (s->ended)
        return false;
    for (;;) {
        int64_t idle_ns = time_mono_ns() - s->last_event_ns;
        int64_t left_ms = (int64_t)s->srv->cfg->heartbeat_ms - idle_ns / 1000000;
        struct job_event ev;
        job_step(s->job, left_ms > 0 ? (int)left_ms : 0, s->buf + 8, sizeof(s->buf) - 8, &ev);
        if (ev.type == JOB_EV_OUTPUT) {
            output_event(s, ev.stream, (uint8_t *)s->buf + 8, ev.len, false);
            if (s->pending.len)
                return true;
            continue;
        }
        if (ev.type == JOB_EV_NONE) {
            /* Silence: a heartbeat keeps proxies from closing the stream. */
            event_begin(s, "heartbeat");
            jw_raw(&s->pending, "{\"type\":\"heartbeat\"}", 20);
            event_end(s);
            return true;
        }
        /* The end: a cut-off character left over is flushed (as U+FFFD), then the result. */
        for (int st = 1; st <= 2; st++)
            if (s->ncarry[st]) {
                memcpy(s->buf + 8, s->carry[st], s->ncarry[st]);
                size_t k = s->ncarry[st];
                s->ncarry[st] = 0;
                output_event(s, st, (uint8_t *)s->buf + 8, k, true);
                if (s->pending.len) {
                    /* emit this one first; the exit comes on the next call */
                    return true;
                }
            }
        event_begin(s, "exit");
        write_result(&s->pending, s->job, NULL, NULL, s->req.encoding, "exit");
        event_end(s);
        s->ended = true;
        audit(&s->req, s->job, s->client);
        return true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct exec_stream *s = cls;
    while (s->pending_off >= s->pending.len) {
        if (!next_event(s))
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = s->pending.len - s->pending_off;
    if (n > max)
        n = max;
    memcpy(out, s->pending.buf + s->pending_off, n);
    s->pending_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    struct exec_stream *s = cls;
    /* The client went away mid-stream, or it is over: job_free kills what still runs. */
    job_free(s->job);
    exec_request_free(&s->req);
    jw_free(&s->pending);
    free(s);
}

static enum MHD_Result reply_stream(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc, struct job *job,
                                    const struct exec_request *req, enum stream_format fmt)
{
    struct exec_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        job_free(job);
        exec_request_free((struct exec_request *)req);
        return MHD_NO;
    }
    s->srv = srv;
    s->job = job;
    s->req = *req;
    s->fmt = fmt;
    s->last_event_ns = time_mono_ns();
    snprintf(s->client, sizeof(s->client), "%s", rc->client);
    jw_init(&s->pending, 256);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, stream_read, s, stream_free);
    if (!r) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            fmt == STREAM_SSE ? "text/event-stream" : "application/x-ndjson");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    rc->holds_running = true;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result route_execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is shutting down and takes no new commands");
    struct request_policy pol = {
        .default_timeout_ms = srv->cfg->timeout_ms,
        .max_timeout_ms = srv->cfg->max_timeout_ms,
        .max_memory_bytes = srv->cfg->memory_max,
        .max_pids = srv->cfg->pids_max,
        .max_cpu_quota = (double)sysconf(_SC_NPROCESSORS_ONLN),
        .workspace = srv->workspace,
    };
    struct exec_request req;
    struct sbxd_err err = {0};
    if (exec_request_parse(rc->body ? rc->body : "", rc->body_len, &pol, &req, &err) < 0)
        return reply_err(c, &err);

    unsigned running = __atomic_add_fetch(&srv->running, 1, __ATOMIC_ACQ_REL);
    if (running > srv->cfg->max_running) {
        __atomic_sub_fetch(&srv->running, 1, __ATOMIC_ACQ_REL);
        exec_request_free(&req);
        return reply_error(c, MHD_HTTP_TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED",
                           "%llu commands are running already (--max-running); retry later",
                           (unsigned long long)srv->cfg->max_running);
    }

    struct job_env env = {.rootfd = srv->rootfd,
                          .cancel_fd = cancel_fd(c),
                          .harden = srv->harden,
                          .iso = srv->iso,
                          .memory_max = srv->cfg->memory_max,
                          .pids_max = srv->cfg->pids_max};
    struct job *job = job_start(&req, &env, &err);
    if (!job) {
        __atomic_sub_fetch(&srv->running, 1, __ATOMIC_ACQ_REL);
        exec_request_free(&req);
        return reply_err(c, &err);
    }
    enum stream_format fmt = stream_format_of(c);
    if (fmt != STREAM_NONE)
        return reply_stream(srv, c, rc, job, &req, fmt); /* it owns job and req now */

    size_t cap = srv->cfg->max_output_bytes;
    if (req.limits.output_bytes < cap)
        cap = req.limits.output_bytes;
    struct outbuf out, errb;
    outbuf_init(&out, cap);
    outbuf_init(&errb, cap);
    char buf[SBXD_READ_CHUNK];
    struct job_event ev;
    do {
        job_step(job, -1, buf, sizeof(buf), &ev);
        if (ev.type == JOB_EV_OUTPUT)
            outbuf_append(ev.stream == 1 ? &out : &errb, buf, ev.len);
    } while (ev.type != JOB_EV_EXIT);

    struct jsonw w;
    jw_init(&w, 512 + out.len + errb.len);
    write_result(&w, job, &out, &errb, req.encoding, NULL);
    spawn_note_daemon_peak(out.alloc + errb.alloc + w.cap + rc->body_cap);
    audit(&req, job, rc->client);
    outbuf_free(&out);
    outbuf_free(&errb);
    job_free(job);
    exec_request_free(&req);
    rc->holds_running = true; /* until the answer is sent (server.c, on_completed) */
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}
