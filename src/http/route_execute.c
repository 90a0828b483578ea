#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/run.h"
#include "http_internal.h"
#include "sbxd/metrics.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

static int cancel_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Streamed /execute: NDJSON or SSE events as the command runs (run_next's chunks).      */

struct exec_stream {
    struct server *srv;
    struct run run;
    bool started, ended;
    struct events ev; /* the event not yet (fully) handed to MHD */
    uint8_t buf[SBXD_READ_CHUNK + RUN_HOLD_ROOM];
};

/* The next event into s->ev; false when the stream is over. With `ready`, only what is
 * there at once: nothing pending (and no heartbeat) when the command has nothing new. */
static bool next_event(void *cls, bool ready)
{
    struct exec_stream *s = cls;
    struct run *r = &s->run;
    if (!s->started) {
        s->started = true;
        event_begin(&s->ev, "start");
        exec_event_start(&s->ev.pending, run_id(r), run_pid(r), NULL, &r->queued_ms);
        event_end(&s->ev);
        return true;
    }
    if (s->ended)
        return false;
    struct run_chunk ch;
    run_next(r, ready ? 0 : event_wait_ms(&s->ev, s->srv->cfg->heartbeat_ms), s->buf,
             sizeof(s->buf), &ch);
    if (ch.type == RUN_OUTPUT) {
        event_begin(&s->ev, exec_stream_name(ch.stream));
        exec_event_output(&s->ev.pending, ch.stream, ch.data, ch.len,
                          r->req.encoding != EXEC_ENC_BASE64, ch.offset, false);
        event_end(&s->ev);
    } else if (ch.type == RUN_NONE) {
        /* Silence: a heartbeat keeps proxies from closing the stream. */
        if (!ready)
            event_heartbeat(&s->ev);
    } else {
        event_begin(&s->ev, "exit");
        exec_event_exit(&s->ev.pending, run_id(r), run_result(r), r->req.encoding, NULL);
        event_end(&s->ev);
        s->ended = true;
    }
    return true;
}

/* libmicrohttpd's buffer (out, max: the connection's free memory, about 256 KiB) takes as
 * many events as are ready and fit (events_fill). */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct exec_stream *s = cls;
    return events_fill(&s->ev, next_event, s, out, max, EVENTS_BATCH_ROOM);
}

static void stream_free(void *cls)
{
    struct exec_stream *s = cls;
    /* Over, or the client went away mid-stream: run_close stops what still runs and
     * audits it either way, once. */
    run_close(&s->run);
    events_free(&s->ev);
    free(s);
}

/* A body of "command" alone is the legacy python-runtime shape (every agent-sandbox SDK
 * sends it). Only asked once something went wrong: the usual answer is the same. */
static bool legacy_shape(struct MHD_Connection *c, const struct req_ctx *rc)
{
    if (!rc->body || stream_format_of(c) != STREAM_NONE)
        return false;
    cJSON *o = cJSON_ParseWithLength(rc->body, rc->body_len);
    bool legacy = cJSON_IsObject(o) && o->child && !o->child->next && o->child->string &&
                  strcmp(o->child->string, "command") == 0 && cJSON_IsString(o->child);
    cJSON_Delete(o);
    return legacy;
}

/* What the python runtime answers for a command it could not run: 200, exit_code 1 and the
 * reason in stderr. The result's other fields say the same in sbxd's terms. */
static enum MHD_Result reply_legacy_failure(struct MHD_Connection *c, const char *why)
{
    char msg[600];
    snprintf(msg, sizeof(msg), "Failed to execute command: %s", why);
    struct jsonw w;
    jw_init(&w, 256 + strlen(msg));
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_str(&w, job_status_name(JOB_FAILED_TO_START));
    jw_key(&w, "exit_code");
    jw_int(&w, 1);
    jw_key(&w, "signal");
    jw_null(&w);
    jw_key(&w, "stdout");
    jw_str(&w, "");
    jw_key(&w, "stderr");
    jw_str(&w, msg);
    jw_key(&w, "error");
    jw_str(&w, why);
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* The command's timeout that the agent-sandbox SDK asks for in X-Sandbox-Timeout: seconds,
 * as Python's str() of the caller's number ("60", "0.5", "1e-05"), in ms rounded up and at
 * most `most`; 0 (none) for anything else: absent, not a plain decimal number (hex, "inf",
 * "nan", a unit), not finite, or not above 0, which the SDK never sends. The header asks no
 * more than a body's timeout_ms may (--max-timeout-ms bounds both): a client gains nothing
 * by it that it could not ask for in the body. */
static uint64_t sdk_timeout_ms(struct MHD_Connection *c, uint64_t most)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Sandbox-Timeout");
    if (!v || !*v || strspn(v, "0123456789.eE+-") != strlen(v))
        return 0;
    char *end;
    double secs = strtod(v, &end);
    if (*end || !isfinite(secs) || secs <= 0)
        return 0;
    /* The SDK stops reading at T too (its read timeout is the same number), and then sends
     * the POST again (its retry policy allows POST): a command ended at T would be answered
     * just late, never seen, and run a second time. So it ends a twentieth of T (at most 1 s)
     * before, and its answer, saying it timed out, arrives in time. */
    double margin = secs * 1000.0 / 20.0;
    double ms = ceil(secs * 1000.0 - (margin > 1000.0 ? 1000.0 : margin));
    return ms >= (double)most ? most : ms < 1 ? 1 : (uint64_t)ms;
}

/* The largest part of the command text a legacy timeout message quotes. */
#define LEGACY_QUOTE_MAX 1024

/* The legacy shape's account of a command that ran, as the python runtime gives it: its
 * exit code is subprocess's returncode, -N after signal N; a timeout is its failed
 * execution, exit code 1 and "Failed to execute command: Command '...' timed out after N
 * seconds" in stderr, here after what the command wrote there (the runtime kept nothing).
 * The other fields keep sbxd's words (status, signal, timed_out). */
static void legacy_result(const struct exec_request *req, struct job_result *r, struct outbuf *errb)
{
    if (r->status != JOB_TIMEOUT) {
        if (r->signal)
            r->exit_code = -r->signal;
        return;
    }
    r->exit_code = 1;
    char cmd[LEGACY_QUOTE_MAX + 4], secs[32], note[LEGACY_QUOTE_MAX + 128];
    exec_request_text(req, cmd, sizeof(cmd));
    if (strlen(cmd) > LEGACY_QUOTE_MAX) { /* cut on a character boundary, and said so */
        size_t n = utf8_whole((const uint8_t *)cmd, LEGACY_QUOTE_MAX);
        memcpy(cmd + n, "...", 4);
    }
    time_seconds_text(req->timeout_ms, secs, sizeof(secs));
    int k = snprintf(note, sizeof(note),
                     "%sFailed to execute command: Command '%s' timed out after %s seconds",
                     errb->len && errb->data[errb->len - 1] != '\n' ? "\n" : "", cmd, secs);
    (void)outbuf_note(errb, note, (size_t)k); /* out of memory: the exit code still says it */
}

/* A request that cannot run: its error, or for the legacy shape the python runtime's 200.
 * Busy and shutting down stay errors, to be retried rather than read as the command's. */
static enum MHD_Result reply_cannot_run(struct MHD_Connection *c, const struct req_ctx *rc,
                                        const struct sbxd_err *err)
{
    if ((err->kind == SBXD_E_INVALID || err->kind == SBXD_E_INTERNAL) && legacy_shape(c, rc))
        return reply_legacy_failure(c, err->msg);
    return reply_err(c, err);
}

/* ------------------------------------------------------------------------------------ */
/* The legacy shape's answer: the SDK that sends it reads stdout, stderr and exit_code and
 * nothing else, so it keeps more than --max-output-bytes (--sdk-output-bytes, beyond the
 * former from the shared pool) and a cut is said in stderr itself.                      */

/* A legacy answer this large is sent as it is made (legacy_body) rather than built whole. */
#define LEGACY_STREAM_MIN (256 * 1024)
/* Output bytes escaped per piece of a streamed answer: at most 6 times this held. */
#define LEGACY_PIECE (16 * 1024)

enum legacy_stage { LB_STDOUT, LB_STDERR, LB_TAIL, LB_DONE };

/* A large legacy answer: its JSON made a piece at a time from the kept output as the client
 * reads it, so the output is never held twice (escaped, one byte may take six), and each
 * stream's memory goes back (to the pool too) once it is sent. */
struct legacy_body {
    struct outbuf out, errb;
    char *tail; /* the result's other fields: {"id":...}\n */
    size_t tail_len;
    struct jsonw w; /* the piece being sent */
    size_t off;     /* of w's text, sent */
    enum legacy_stage stage;
    size_t pos;  /* in the stream being escaped */
    size_t held; /* the most memory it held, told once it is sent (exec_service_held) */
};

static void legacy_body_fill(struct legacy_body *b)
{
    if (b->stage == LB_TAIL) {
        /* The fields after stderr's closing quote: the tail's object without its '{'. */
        jw_raw(&b->w, "\",", 2);
        jw_raw(&b->w, b->tail + 1, b->tail_len - 1);
        b->stage = LB_DONE;
        return;
    }
    struct outbuf *ob = b->stage == LB_STDOUT ? &b->out : &b->errb;
    size_t k = ob->len - b->pos;
    bool last = k <= LEGACY_PIECE;
    if (!last)
        k = utf8_whole(ob->data + b->pos, LEGACY_PIECE); /* a character is never split */
    jw_utf8_chars(&b->w, ob->data + b->pos, k, last && outbuf_truncated(ob));
    b->pos += k;
    if (!last)
        return;
    outbuf_free(ob);
    b->pos = 0;
    if (b->stage == LB_STDOUT)
        jw_raw(&b->w, "\",\"stderr\":\"", 12);
    b->stage++;
}

static bool legacy_body_more(void *cls)
{
    struct legacy_body *b = cls;
    if (b->stage == LB_DONE)
        return false;
    legacy_body_fill(b);
    return true;
}

static ssize_t legacy_body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct legacy_body *b = cls;
    return http_stream_pieces(&b->w, &b->off, legacy_body_more, b, buf, max);
}

static void legacy_body_free(void *cls)
{
    struct legacy_body *b = cls;
    exec_service_held(b->held);
    outbuf_free(&b->out);
    outbuf_free(&b->errb);
    jw_free(&b->w);
    free(b->tail);
    free(b);
}

/* Send the result with out and errb (taken over) as a legacy_body. */
static enum MHD_Result reply_legacy_stream(struct MHD_Connection *c, const char *id,
                                           const struct job_result *res, struct outbuf *out,
                                           struct outbuf *errb, double queued_ms)
{
    struct legacy_body *b = calloc(1, sizeof(*b));
    if (!b) {
        outbuf_free(out);
        outbuf_free(errb);
        return MHD_NO;
    }
    b->out = *out;
    b->errb = *errb;
    struct jsonw t;
    jw_init(&t, 512);
    jw_obj_begin(&t);
    exec_result_fields(&t, id, res, NULL, NULL, EXEC_ENC_UTF8);
    jw_key(&t, "stdout_truncated");
    jw_bool(&t, outbuf_truncated(out));
    jw_key(&t, "stderr_truncated");
    jw_bool(&t, outbuf_truncated(errb));
    exec_queued_field(&t, queued_ms);
    jw_obj_end(&t);
    jw_newline(&t);
    b->tail = jw_finish(&t, &b->tail_len);
    jw_init(&b->w, 6 * LEGACY_PIECE + 64);
    jw_raw(&b->w, "{\"stdout\":\"", 11);
    b->held = out->alloc + errb->alloc + b->w.cap;
    struct MHD_Response *r =
        b->tail && !b->w.failed
            ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, legacy_body_read, b,
                                                legacy_body_free)
            : NULL;
    if (!r) {
        legacy_body_free(b);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
}

/* The streamed answer: the run (opened) moves into the response's state, which owns it. */
static enum MHD_Result reply_stream(struct server *srv, struct MHD_Connection *c, struct run *run,
                                    enum stream_format fmt)
{
    struct exec_stream *s = malloc(sizeof(*s));
    if (!s) {
        run_close(run);
        return MHD_NO;
    }
    s->srv = srv;
    s->run = *run;
    s->started = s->ended = false;
    events_init(&s->ev, fmt);
    return events_reply(c, fmt, stream_read, s, stream_free);
}

/* The synchronous answer: the run collected, then its result object; or for the legacy
 * shape, the python runtime's account of it (its output kept up to --sdk-output-bytes). */
static enum MHD_Result reply_sync(struct server *srv, struct MHD_Connection *c,
                                  const struct req_ctx *rc, struct run *run, bool legacy)
{
    struct outbuf out, errb;
    run_collect(run, legacy ? (size_t)srv->cfg->sdk_output_bytes : RUN_KEEP_CAP, &out, &errb);
    /* A command that failed to start, was killed or timed out: the legacy shape says it in
     * the python runtime's words; and what was cut, in a line of stderr. */
    struct job_result res = *run_result(run);
    bool legacy_failed = legacy && res.status == JOB_FAILED_TO_START;
    if (legacy && !legacy_failed) {
        char why[160];
        snprintf(why, sizeof(why),
                 "this answer keeps %llu bytes per stream; --sdk-output-bytes "
                 "raises it",
                 (unsigned long long)srv->cfg->sdk_output_bytes);
        exec_output_notice(&out, &errb, why); /* first: it ends a cut head on a whole character */
        legacy_result(run_request(run), &res, &errb);
        if (out.len + errb.len > LEGACY_STREAM_MIN) {
            enum MHD_Result r =
                reply_legacy_stream(c, run_id(run), &res, &out, &errb, run->queued_ms);
            run_close(run);
            return r;
        }
    }
    struct jsonw w;
    jw_init(&w, 512 + out.len + errb.len);
    if (!legacy_failed) {
        jw_obj_begin(&w);
        exec_result_fields(&w, run_id(run), &res, &out, &errb, run_request(run)->encoding);
        exec_queued_field(&w, run->queued_ms);
        jw_obj_end(&w);
    }
    exec_service_held(out.alloc + errb.alloc + w.cap + rc->body_cap);
    outbuf_free(&out);
    outbuf_free(&errb);
    enum MHD_Result r;
    if (legacy_failed) {
        jw_free(&w);
        r = reply_legacy_failure(c, run_result(run)->error);
    } else {
        r = reply_jsonw(c, MHD_HTTP_OK, &w);
    }
    run_close(run);
    return r;
}

enum MHD_Result route_execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is shutting down and takes no new commands");
    struct request_policy pol;
    run_policy(&srv->sb->exec, MX_SYNC, &pol);
    /* The SDK's timeout, for a body that gives none (its timeout_ms wins). */
    uint64_t asked = sdk_timeout_ms(c, pol.max_timeout_ms);
    if (asked)
        pol.default_timeout_ms = asked;
    struct exec_request req;
    struct sbxd_err err = {0};
    if (exec_request_parse(rc->body ? rc->body : "", rc->body_len, &pol, &req, &err) < 0)
        return reply_cannot_run(c, rc, &err);
    /* The python runtime ran the command without a shell: a program a signal ends is -N
     * there. One simple command is exec'd by the shell here, so it is the process whose end
     * the answer tells. */
    enum stream_format fmt = stream_format_of(c);
    bool legacy = fmt == STREAM_NONE && legacy_shape(c, rc);
    if (legacy && exec_request_exec_simple(&req) < 0) {
        exec_request_free(&req);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    /* Past --max-running it waits its turn (run.h); a client that hangs up meanwhile has
     * nobody to answer. The slot is held until the answer, whichever, is sent (server.c,
     * on_completed). */
    struct run_front f = {.front = FRONT_REST,
                          .mode = fmt != STREAM_NONE ? MX_STREAM : MX_SYNC,
                          .client_fd = cancel_fd(c),
                          .stop = &srv->sb->draining,
                          .client = rc->client,
                          .keeps_slot = true};
    struct run run;
    if (run_open(&run, &srv->sb->exec, &f, &req, &err) < 0)
        return (err.flags & SBXD_EF_GONE) ? MHD_NO : reply_cannot_run(c, rc, &err);
    rc->holds_running = true;
    if (fmt != STREAM_NONE)
        return reply_stream(srv, c, &run, fmt);
    return reply_sync(srv, c, rc, &run, legacy);
}
