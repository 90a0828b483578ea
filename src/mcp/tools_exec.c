/*
 * tools_exec.c - MCP's command tools: run_command (answered at the end, or as a stream of
 * progress when the caller gave a progress token and the transport streams) and the
 * background processes (start_process, process_output, send_input, kill_process), on the
 * same exec service as /execute and /processes: the same limits, the same admission, the
 * same audit lines.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/background.h"
#include "sbxd/exec_service.h"
#include "sbxd/run.h"
#include "sbxd/limits.h"
#include "sbxd/timeutil.h"

/* The longest process_output waits for output. */
#define MCP_OUTPUT_WAIT_MAX_MS 30000
/* Progress of a streamed run_command: at most this often when output comes, and at least
 * this often when none does. */
#define MCP_PROGRESS_MIN_MS  250
#define MCP_PROGRESS_IDLE_MS 2000

/* ------------------------------------------------------------------------------------ */
/* run_command                                                                           */

/* The result of a command: a summary for the model, and /execute's fields. */
static void command_result(struct jsonw *w, const struct run *run, const struct outbuf *out,
                           const struct outbuf *errb)
{
    const struct job_result *r = run_result(run);
    char head[512];
    int hn;
    if (r->status == JOB_EXITED)
        hn = snprintf(head, sizeof(head), "exit code %d", r->exit_code);
    else if (r->status == JOB_FAILED_TO_START)
        hn = snprintf(head, sizeof(head), "failed to start: %s", r->error);
    else if (r->signal)
        hn = snprintf(head, sizeof(head), "%s (signal %d)", job_status_name(r->status), r->signal);
    else
        hn = snprintf(head, sizeof(head), "%s", job_status_name(r->status));
    if (hn < 0 || (size_t)hn >= sizeof(head))
        hn = (int)strlen(head);
    result_begin(w);
    text_parts(w, head, (size_t)hn,
               outbuf_truncated(out) ? "\n--- stdout (truncated) ---\n" : "\n--- stdout ---\n",
               out->data, out->len,
               outbuf_truncated(errb) ? "\n--- stderr (truncated) ---\n" : "\n--- stderr ---\n",
               errb->data, errb->len);
    result_structured(w);
    exec_result_fields(w, run_id(run), r, out, errb, run_request(run)->encoding);
    exec_queued_field(w, run->queued_ms);
    result_end(w, !(r->status == JOB_EXITED && r->exit_code == 0));
}

/* Who opens a call's run: MCP, the call's client. Its socket's hang-up cancels it as it
 * cancels a REST command; notifications/cancelled and DELETE /mcp reach it by the call. */
static struct run_front call_front(const struct mcp_tool_ctx *x, enum metrics_mode mode)
{
    return (struct run_front){.front = FRONT_MCP,
                              .mode = mode,
                              .client_fd = mcp_call_fd(x),
                              .stop = x->h->draining,
                              .client = x->client};
}

/* A command's arguments as /execute's body (or /processes'), parsed under the policy of
 * mode: the same field table and checks, no text in between. false after a tool error. */
static bool command_request(struct mcp_tool_ctx *x, const cJSON *args, enum metrics_mode mode,
                            struct exec_request *req, struct jsonw *w)
{
    struct request_policy pol;
    run_policy(x->h->exec, mode, &pol);
    struct sbxd_err err = {0};
    if (exec_request_from_json(args, &pol, req, &err) < 0) {
        tool_error(w, "%s", err.msg);
        return false;
    }
    return true;
}

/* The tool error of a run that could not be opened. */
static int open_error(struct jsonw *w, const struct sbxd_err *err)
{
    return tool_error(w, "%s", (err->flags & SBXD_EF_GONE) ? "the client went away" : err->msg);
}

/* A run_command answered as a stream: progress notifications, then the result. */
struct run_stream {
    struct mcp_session *s;
    struct mcp_call *call;
    struct run run;
    struct outbuf out, errb;
    cJSON *id, *token;
    int64_t start_ns, last_ns;
    uint64_t told; /* output bytes the last progress counted */
    bool done;
    uint8_t buf[SBXD_READ_CHUNK];
};

static void run_stream_progress(struct run_stream *rs, struct mcp_sink *k, int64_t now)
{
    uint64_t bytes = rs->out.total + rs->errb.total;
    double secs = (double)(now - rs->start_ns) / 1e9;
    char msg[400];
    int n = snprintf(msg, sizeof(msg), "running for %.1f s, %llu bytes of output", secs,
                     (unsigned long long)bytes);
    /* The last line of stdout so far, when there is one. */
    if (rs->out.len && n > 0 && (size_t)n < sizeof(msg) - 8) {
        size_t end = rs->out.len;
        while (end && rs->out.data[end - 1] == '\n')
            end--;
        size_t start = end;
        while (start && rs->out.data[start - 1] != '\n' && end - start < 200)
            start--;
        if (end > start)
            snprintf(msg + n, sizeof(msg) - (size_t)n, ": %.*s", (int)(end - start),
                     (const char *)rs->out.data + start);
    }
    mcp_send_progress(k, rs->token, (now - rs->start_ns) / 1000000, msg);
    rs->last_ns = now;
    rs->told = bytes;
}

static void run_stream_final(struct run_stream *rs, struct mcp_sink *k)
{
    struct jsonw res;
    jw_init(&res, 512 + rs->out.len + rs->errb.len);
    command_result(&res, &rs->run, &rs->out, &rs->errb);
    size_t len;
    char *text = jw_finish(&res, &len);
    jw_free(&res);
    mcp_send_result(k, rs->id, text, len);
    free(text);
}

/* Drive the command a step: its output kept, progress told; false once the result went. */
static bool run_stream_step(void *task, struct mcp_sink *k)
{
    struct run_stream *rs = task;
    if (rs->done) {
        run_stream_final(rs, k);
        return false;
    }
    struct run_chunk ch;
    run_next(&rs->run, MCP_PROGRESS_MIN_MS, rs->buf, sizeof(rs->buf), &ch);
    if (ch.type == RUN_OUTPUT)
        outbuf_append(ch.stream == 1 ? &rs->out : &rs->errb, ch.data, ch.len);
    if (ch.type == RUN_EXIT) { /* (audited by the run) */
        rs->done = true;
        return true;
    }
    int64_t now = time_mono_ns();
    int64_t since = (now - rs->last_ns) / 1000000;
    bool fresh = rs->out.total + rs->errb.total > rs->told;
    if ((fresh && since >= MCP_PROGRESS_MIN_MS) || since >= MCP_PROGRESS_IDLE_MS)
        run_stream_progress(rs, k, now);
    return true;
}

/* The stream is over, or its client went away before the result: run_close cancels and
 * audits an abandoned command, once. */
static void run_stream_drop(void *task)
{
    struct run_stream *rs = task;
    mcp_call_run(rs->call, NULL);
    mcp_call_end(rs->s, rs->call);
    mcp_session_put(rs->s);
    run_close(&rs->run);
    outbuf_free(&rs->out);
    outbuf_free(&rs->errb);
    cJSON_Delete(rs->id);
    cJSON_Delete(rs->token);
    free(rs);
}

static const struct mcp_task_ops run_stream_ops = {run_stream_step, run_stream_drop};

/* Run the command as a stream; false when there is no memory for one (nothing opened). */
static bool run_streamed(struct mcp_tool_ctx *x, struct exec_request *req, struct jsonw *w)
{
    struct run_stream *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return false;
    struct run_front f = call_front(x, MX_STREAM);
    struct sbxd_err err = {0};
    if (run_open(&rs->run, x->h->exec, &f, req, &err) < 0) {
        free(rs);
        open_error(w, &err);
        return true;
    }
    mcp_call_run(x->call, &rs->run);
    rs->s = x->s;
    rs->call = x->call;
    rs->id = cJSON_Duplicate(x->id, true);
    rs->token = cJSON_Duplicate(x->progress, true);
    size_t cap = run_output_cap(x->h->exec, run_request(&rs->run));
    outbuf_init(&rs->out, cap);
    outbuf_init(&rs->errb, cap);
    rs->start_ns = rs->last_ns = time_mono_ns();
    mcp_session_hold(x->s);
    x->deferred = true;
    x->k->defer(x->k, &run_stream_ops, rs); /* (drops it when it cannot stream) */
    return true;
}

/* Run the command to its end and answer with its result into w. */
static int run_sync(struct mcp_tool_ctx *x, struct exec_request *req, struct jsonw *w)
{
    struct run_front f = call_front(x, MX_SYNC);
    struct run run;
    struct sbxd_err err = {0};
    if (run_open(&run, x->h->exec, &f, req, &err) < 0)
        return open_error(w, &err);
    mcp_call_run(x->call, &run);
    struct outbuf out, errb;
    run_collect(&run, RUN_KEEP_CAP, &out, &errb);
    mcp_call_run(x->call, NULL);
    command_result(w, &run, &out, &errb);
    exec_service_held(out.alloc + errb.alloc + w->cap);
    run_close(&run);
    outbuf_free(&out);
    outbuf_free(&errb);
    return 0;
}

int tool_run_command(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    struct exec_request req;
    if (!command_request(x, args, MX_SYNC, &req, w))
        return 0;
    /* No memory for a stream: answered at the end, as without a progress token. */
    if (x->progress && x->stream_ok && x->k && run_streamed(x, &req, w))
        return 0;
    return run_sync(x, &req, w);
}

static struct bg_proc *arg_process(const cJSON *args, struct jsonw *w)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(args, "id");
    if (!cJSON_IsString(id)) {
        tool_error(w, "'id' is required: the id start_process returned");
        return NULL;
    }
    struct bg_proc *p = bg_get(id->valuestring);
    if (!p)
        tool_error(w,
                   "no process '%.64s' (unknown, or ended and forgotten after "
                   "--process-retention-s)",
                   id->valuestring);
    return p;
}

int tool_start_process(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    if (!only_keys(args, mcp_process_keys, w))
        return 0;
    struct exec_request req;
    if (!command_request(x, args, MX_BACKGROUND, &req, w))
        return 0;
    struct run_front f = call_front(x, MX_BACKGROUND);
    struct sbxd_err err = {0};
    struct bg_proc *p = run_start_process(x->h->exec, &f, &req, NULL, &err);
    if (!p)
        return open_error(w, &err);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    char msg[300];
    int mn = snprintf(msg, sizeof(msg),
                      "started process %s (pid %d): process_output reads its output, "
                      "send_input writes to it, kill_process ends it",
                      in.id, (int)in.pid);
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "pid");
    jw_int(w, in.pid);
    result_end(w, false);
    return 0;
}

/* What process_output read. */
struct proc_read {
    struct outbuf out, errb;
    uint64_t start, off, dropped;
};

/* Read p's output from pr->off into pr until the cap, its end, or (with nothing yet) the
 * wait's end or the call's cancellation. */
static void proc_read(struct mcp_tool_ctx *x, struct bg_proc *p, uint64_t wait, size_t cap,
                      struct proc_read *pr)
{
    int64_t deadline = time_mono_ns() + (int64_t)wait * 1000000;
    bool any = false;
    char *buf = malloc(SBXD_READ_CHUNK);
    while (buf && pr->out.len + pr->errb.len < cap) {
        int left = any ? 0 : time_ms_until(deadline);
        if (left > 250)
            left = 250;
        size_t n = 0;
        int stream = 0;
        uint64_t next = pr->off;
        enum bg_read_result r =
            bg_read(p, pr->off, buf, SBXD_READ_CHUNK, true, left, &n, &stream, &next);
        if (r == BG_READ_DATA) {
            outbuf_append(stream == 2 ? &pr->errb : &pr->out, buf, n);
            any = true;
        } else if (r == BG_READ_DROPPED) {
            pr->dropped += next - pr->off;
        } else if (r == BG_READ_END) {
            break;
        } else if (any || time_ms_until(deadline) <= 0 || mcp_call_cancelled(x->call)) {
            break;
        }
        pr->off = next;
    }
    free(buf);
}

static void proc_output_result(struct jsonw *w, const struct bg_info *in,
                               const struct proc_read *pr)
{
    char head[300];
    int hn;
    if (in->finished && in->res.status == JOB_EXITED)
        hn = snprintf(head, sizeof(head), "process %s exited with code %d", in->id,
                      in->res.exit_code);
    else if (in->finished)
        hn = snprintf(head, sizeof(head), "process %s ended: %s", in->id,
                      job_status_name(in->res.status));
    else
        hn = snprintf(head, sizeof(head), "process %s is running", in->id);
    hn += snprintf(head + hn, sizeof(head) - (size_t)hn, "; output %llu..%llu%s",
                   (unsigned long long)pr->start, (unsigned long long)pr->off,
                   pr->dropped ? " (older output was dropped from the ring)" : "");
    result_begin(w);
    text_parts(w, head, (size_t)hn, "\n--- output ---\n", pr->out.data, pr->out.len,
               "\n--- stderr ---\n", pr->errb.data, pr->errb.len);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in->id);
    jw_key(w, "running");
    jw_bool(w, !in->finished);
    jw_key(w, "status");
    jw_str(w, in->finished ? job_status_name(in->res.status) : "running");
    jw_key(w, "exit_code");
    if (in->finished && in->res.status == JOB_EXITED)
        jw_int(w, in->res.exit_code);
    else
        jw_null(w);
    jw_key(w, "output");
    jw_str_utf8(w, pr->out.data ? (const char *)pr->out.data : "", pr->out.len, false);
    jw_key(w, "stderr");
    jw_str_utf8(w, pr->errb.data ? (const char *)pr->errb.data : "", pr->errb.len, false);
    jw_key(w, "offset");
    jw_uint(w, pr->start);
    jw_key(w, "next_offset");
    jw_uint(w, pr->off);
    jw_key(w, "dropped_bytes");
    jw_uint(w, pr->dropped);
    result_end(w, in->finished && !(in->res.status == JOB_EXITED && in->res.exit_code == 0));
}

int tool_process_output(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"id", "offset", "wait_ms", NULL};
    uint64_t off, wait;
    if (!only_keys(args, keys, w) || !arg_uint(args, "offset", 0, UINT64_MAX >> 1, &off, w) ||
        !arg_uint(args, "wait_ms", 0, MCP_OUTPUT_WAIT_MAX_MS, &wait, w))
        return 0;
    struct bg_proc *p = arg_process(args, w);
    if (!p)
        return 0;
    size_t cap = x->h->cfg->max_output_bytes;
    struct proc_read pr = {.start = off, .off = off};
    outbuf_init(&pr.out, cap);
    outbuf_init(&pr.errb, cap);
    proc_read(x, p, wait, cap, &pr);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    proc_output_result(w, &in, &pr);
    outbuf_free(&pr.out);
    outbuf_free(&pr.errb);
    return 0;
}

int tool_send_input(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"id", "data", "eof", NULL};
    bool eof;
    if (!only_keys(args, keys, w) || !arg_bool(args, "eof", false, &eof, w))
        return 0;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(args, "data");
    if (data && !cJSON_IsString(data))
        return tool_error(w, "'data' must be a string");
    if (!data && !eof)
        return tool_error(w, "give 'data' to write, or 'eof': true to close stdin");
    struct bg_proc *p = arg_process(args, w);
    if (!p)
        return 0;
    const char *d = data ? data->valuestring : "";
    uint64_t written = 0;
    bool open_after = false;
    struct sbxd_err err = {0};
    enum bg_stdin_result r = bg_stdin(p, d, strlen(d), eof, x->h->cfg->stdin_timeout_ms,
                                      x->client_fd, &written, &open_after, &err);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    if (r != BG_STDIN_DONE)
        return tool_error(w, "%s (%llu bytes went in)", err.msg[0] ? err.msg : "the write failed",
                          (unsigned long long)written);
    char msg[200];
    int mn = snprintf(msg, sizeof(msg), "wrote %llu bytes to process %s%s",
                      (unsigned long long)written, in.id, eof ? " and closed its stdin" : "");
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "written");
    jw_uint(w, written);
    jw_key(w, "stdin_open");
    jw_bool(w, open_after);
    result_end(w, false);
    return 0;
}

int tool_kill_process(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    (void)x;
    static const char *const keys[] = {"id", "signal", NULL};
    if (!only_keys(args, keys, w))
        return 0;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(args, "signal");
    const char *name = "SIGKILL";
    int sig = SIGKILL;
    if (sv && !(sig = bg_signal_named(cJSON_GetStringValue(sv), &name)))
        return tool_error(w, "'signal' must be one of " BG_SIGNAL_NAMES);
    struct bg_proc *p = arg_process(args, w);
    if (!p)
        return 0;
    struct sbxd_err err = {0};
    int r = bg_signal(p, sig, &err);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    if (r < 0)
        return tool_error(w, "%s", err.msg);
    char msg[200];
    int mn = snprintf(msg, sizeof(msg), "sent %s to process %s", name, in.id);
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "signal");
    jw_str(w, name);
    result_end(w, false);
    return 0;
}
