/*
 * process.c - process.v1.ProcessService, agent-sandbox sandboxd's process API, over the
 * exec service that the REST routes use: the same policy, admission queue, containment,
 * audit line and metrics, so gRPC and REST share one set of limits.
 *
 * Execute is /execute: one command run to its end, its output collected. Start is a
 * background process (POST /processes) whose output the call follows: the process is
 * listed in /processes, outlives a lost connection and keeps its result for the retention
 * period; the call's process_id is the process's number (bg_number). WriteStdin,
 * SendSignal and ResizeTTY act on such a process by that number.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_internal.h"
#include "process/v1/process.pb-c.h"
#include "sbxd/background.h"
#include "sbxd/cleanup.h"
#include "sbxd/run.h"
#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"
#include "sbxd/metrics.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"
#include "sbxd/timeutil.h"

/* How long a Start call waits for output before it looks at its cancellation again: a
 * cancelled call kills its process within about this. */
#define FOLLOW_TICK_MS 200

/* An ExecuteResponse besides its two byte fields: exit_code (a negative int32 takes 10
 * bytes) and the tags and lengths of the fields, with room to spare. */
#define EXECUTE_RESPONSE_OVERHEAD 64

/* A terminal asked for without a size gets the one terminals start with. */
#define PTY_DEFAULT_COLS 80
#define PTY_DEFAULT_ROWS 24

static void finish_bad_request(struct grpc_call *c, const char *message)
{
    grpc_call_finish(c, GRPC_INVALID_ARGUMENT, "the request is not a valid %s", message);
}

/* A message could not go out: the call was cancelled (nobody hears the status, which is
 * for the log), or, on a live call, sbxd ran out of memory framing it. */
static void finish_unsent(struct grpc_call *c)
{
    switch (grpc_call_cancelled(c)) {
    case GRPC_LIVE:
        grpc_call_finish(c, GRPC_INTERNAL, "the response could not be sent: out of memory");
        return;
    case GRPC_DEADLINE:
        grpc_call_finish(c, GRPC_DEADLINE_EXCEEDED, NULL);
        return;
    case GRPC_RESET:
    case GRPC_DISCONNECTED:
        break;
    }
    grpc_call_finish(c, GRPC_CANCELLED, NULL);
}

/* The command's timeout: what is left of the client's deadline, rounded up to a whole
 * millisecond (at least 1), so that the command ends no later than the call; 0 (the
 * policy's default) without a deadline. exec_request_build caps it at the policy's most. */
static uint64_t call_timeout_ms(const struct grpc_call *c)
{
    int64_t deadline = grpc_call_deadline_ns(c);
    if (!deadline)
        return 0;
    int64_t left = deadline - time_mono_ns();
    if (left <= 0)
        return 1;
    return (uint64_t)((left + 999999) / 1000000);
}

/* A ProcessConfig as an exec_request under pol (see request.h): protobuf-c hands over its
 * bytes with their lengths, and exec_request_build refuses a NUL or bad UTF-8 in them. A
 * missing config is an empty command. */
static int build_request(const struct grpc_call *c, const Process__V1__ProcessConfig *pc,
                         const struct request_policy *pol, struct exec_request *req,
                         struct sbxd_err *err)
{
    size_t argc = pc ? pc->n_command : 0;
    size_t nenv = pc ? pc->n_env_vars : 0;
    autofree struct exec_bytes *v = calloc(argc + 2 * nenv + 1, sizeof(*v));
    if (!v)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct exec_bytes *names = v + argc, *values = names + nenv, cwd = {"", 0};
    for (size_t i = 0; i < argc; i++)
        v[i] = (struct exec_bytes){pc->command[i].data, pc->command[i].len};
    for (size_t i = 0; i < nenv; i++) {
        const Process__V1__ProcessConfigEnvVar *e = pc->env_vars[i];
        names[i] = (struct exec_bytes){e->key.data, e->key.len};
        values[i] = (struct exec_bytes){e->value.data, e->value.len};
    }
    if (pc)
        cwd = (struct exec_bytes){pc->cwd.data, pc->cwd.len};
    return exec_request_build(pol, v, argc, names, values, nenv, &cwd, call_timeout_ms(c), req,
                              err);
}

/* An sbxd error as the call's status. A path outside the workspace (SBXD_E_DENIED, whether
 * exec_request_build saw it in an absolute cwd or the job's start in a `..` one) is
 * PERMISSION_DENIED, as sandboxd answers it; a capacity limit RESOURCE_EXHAUSTED. A cwd that
 * does not exist is NOT_FOUND here, as sandboxd's failed chdir is (REST's 400 is a bad
 * request). */
static void finish_err(struct grpc_call *c, const struct sbxd_err *err)
{
    enum grpc_code code = grpc_code_of(err->kind);
    if (err->kind == SBXD_E_INVALID && (err->flags & SBXD_EF_NO_CWD))
        code = GRPC_NOT_FOUND;
    grpc_call_finish(c, code, "%s", err->msg);
}

static bool call_live(void *cls)
{
    return grpc_call_cancelled(cls) == GRPC_LIVE;
}

/* The call as a front of the run (run.h): its admission is REST's, and a call cancelled
 * while it waited for its slot starts nothing. */
static struct run_front call_front(struct grpc_call *c, enum metrics_mode mode)
{
    return (struct run_front){.front = FRONT_GRPC,
                              .mode = mode,
                              .client_fd = grpc_call_cancel_fd(c),
                              .stop = grpc_call_drain_flag(c),
                              .client = grpc_call_peer(c),
                              .wanted = call_live,
                              .cls = c};
}

/* A command that could not be opened: nobody to answer when the client left. */
static void finish_refused(struct grpc_call *c, const struct sbxd_err *err)
{
    if (err->flags & SBXD_EF_GONE)
        finish_unsent(c);
    else
        finish_err(c, err);
}

/* Whether a command that failed to start did so because errno e refused it at a step that
 * is about the request (its program, its cwd): a refusal elsewhere is sbxd's own failure. */
static bool start_failed_with(const struct job_result *r, int e)
{
    return r->error_errno == e && r->step &&
           (strcmp(r->step, "execve") == 0 || strcmp(r->step, "fchdir") == 0);
}

/* A command that could not be exec'd: NOT_FOUND for a program (or a directory on its path)
 * that does not exist, PERMISSION_DENIED for one that may not be run, as sandboxd answers
 * these; INTERNAL for anything else. */
static void finish_failed_start(struct grpc_call *c, const struct job_result *r)
{
    enum grpc_code code = GRPC_INTERNAL;
    if (start_failed_with(r, ENOENT) || start_failed_with(r, ENOTDIR))
        code = GRPC_NOT_FOUND;
    else if (start_failed_with(r, EACCES) || start_failed_with(r, EPERM))
        code = GRPC_PERMISSION_DENIED;
    grpc_call_finish(c, code, "the command could not be started: %s", r->error);
}

/* What a result says beyond the message: how it ended in sbxd's words, and how long it
 * ran. */
static void result_trailers(struct grpc_call *c, const char *id, const struct job_result *r)
{
    char v[32];
    grpc_call_trailer(c, "sbxd-id", id);
    grpc_call_trailer(c, "sbxd-status", job_status_name(r->status));
    snprintf(v, sizeof(v), "%.3f", r->duration_ms);
    grpc_call_trailer(c, "sbxd-duration-ms", v);
}

/* A stream's trailers: whether bytes were dropped, and how many there were in all. */
static void output_trailers(struct grpc_call *c, const char *name, const struct outbuf *ob)
{
    char key[32], v[32];
    if (outbuf_truncated(ob)) {
        snprintf(key, sizeof(key), "sbxd-%s-truncated", name);
        grpc_call_trailer(c, key, "true");
    }
    snprintf(key, sizeof(key), "sbxd-%s-bytes", name);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)ob->total);
    grpc_call_trailer(c, key, v);
}

/* The exit code sandboxd reports: Go's ExitError.ExitCode(), which is -1 for a process
 * that a signal ended (sbxd's own 128 + N stays in /execute; sbxd-status says why). */
static int32_t sandboxd_exit_code(const struct job_result *r)
{
    return r->signal ? -1 : r->exit_code;
}

/* sbxd's own timeout ended the command: the call ends as one whose deadline passed (sandboxd
 * runs its command on the call's context), with a message saying so. */
static void finish_timed_out(struct grpc_call *c, uint64_t timeout_ms)
{
    char secs[32];
    time_seconds_text(timeout_ms, secs, sizeof(secs));
    grpc_call_finish(c, GRPC_DEADLINE_EXCEEDED,
                     "the command timed out after %s seconds and its process tree was killed",
                     secs);
}

/* ------------------------------------------------------------------------------------ */
/* Execute: one command to its end.                                                      */

/* gRPC clients refuse a message over 4 MiB by default (grpc's max receive message length),
 * so both streams together must fit under budget: a stream that needs less than half keeps
 * it all, the other gets the rest. What is cut is counted as dropped (truncated). Whether
 * any was. */
static bool fit_response(struct outbuf *out, struct outbuf *errb, size_t budget)
{
    if (out->len + errb->len <= budget)
        return false;
    size_t half = budget / 2;
    if (out->len <= half) {
        errb->len = budget - out->len;
    } else if (errb->len <= half) {
        out->len = budget - errb->len;
    } else {
        out->len = half;
        errb->len = budget - half;
    }
    return true;
}

/* The call's answer. A command that ended, however, gets its ExecuteResponse and OK: one
 * killed by a signal too (for its output or its memory as well), with sandboxd's exit code
 * for it (-1) and sbxd-status saying why. A timeout or a cancellation is a status of its
 * own, and a command that never ran is refused as sandboxd refuses it. */
static void finish_execute(struct grpc_call *c, const struct exec_request *req,
                           const struct job_result *r, struct outbuf *out, struct outbuf *errb,
                           const char *why_cap)
{
    switch (r->status) {
    case JOB_TIMEOUT:
        finish_timed_out(c, req->timeout_ms);
        return;
    case JOB_CANCELED:
        switch (grpc_call_cancelled(c)) {
        case GRPC_DEADLINE:
            grpc_call_finish(c, GRPC_DEADLINE_EXCEEDED,
                             "the call's deadline passed and the command's process tree was "
                             "killed");
            return;
        case GRPC_RESET:
        case GRPC_DISCONNECTED:
            grpc_call_finish(c, GRPC_CANCELLED, "the call was cancelled");
            return;
        case GRPC_LIVE:
            break;
        }
        grpc_call_finish(c, GRPC_UNAVAILABLE, "sbxd is shutting down and stopped the command");
        return;
    case JOB_FAILED_TO_START:
        finish_failed_start(c, r);
        return;
    default:
        break;
    }
    output_trailers(c, "stdout", out);
    output_trailers(c, "stderr", errb);
    exec_output_notice(out, errb, why_cap);
    Process__V1__ExecuteResponse m = PROCESS__V1__EXECUTE_RESPONSE__INIT;
    m.exit_code = sandboxd_exit_code(r);
    m.stdout = (ProtobufCBinaryData){out->len, out->data};
    m.stderr = (ProtobufCBinaryData){errb->len, errb->data};
    if (grpc_call_send(c, &m.base) < 0)
        finish_unsent(c);
    else
        grpc_call_finish(c, GRPC_OK, NULL);
}

static void process_execute(struct grpc_call *c)
{
    size_t len;
    const uint8_t *data = grpc_call_message(c, &len);
    Process__V1__ExecuteRequest *rq = process__v1__execute_request__unpack(NULL, len, data);
    if (!rq) {
        finish_bad_request(c, "ExecuteRequest");
        return;
    }
    struct exec_service *s = grpc_call_exec(c);
    const struct sbxd_config *cfg = grpc_call_config(c);
    struct request_policy pol;
    run_policy(s, MX_SYNC, &pol);
    autoreq struct exec_request req = {0};
    struct sbxd_err err = {0};
    int rc = build_request(c, rq->config, &pol, &req, &err);
    process__v1__execute_request__free_unpacked(rq, NULL);
    if (rc < 0) {
        finish_err(c, &err);
        return;
    }
    if (grpc_call_draining(c)) {
        grpc_call_finish(c, GRPC_UNAVAILABLE, "sbxd is shutting down and takes no new commands");
        return;
    }
    struct run_front f = call_front(c, MX_SYNC);
    struct run run;
    if (run_open(&run, s, &f, STEAL_STRUCT(&req), &err) < 0) {
        finish_refused(c, &err);
        return;
    }
    /* The SDK reads stdout, stderr and exit_code, never a trailer: it gets what sandboxd
     * gives, all of the output that fits the one message a grpc client takes by default
     * (--sdk-output-bytes at most), and a line at the end of stderr when some was cut. What
     * is kept beyond --max-output-bytes comes from the pool all running commands share. */
    size_t budget = GRPC_MAX_MESSAGE - EXECUTE_RESPONSE_OVERHEAD - EXEC_NOTICE_MAX;
    uint64_t cap = cfg->sdk_output_bytes;
    if (cap > budget)
        cap = budget;
    struct outbuf out, errb;
    run_collect(&run, (size_t)cap, &out, &errb);
    char why[200];
    if (fit_response(&out, &errb, budget) || cap == budget)
        snprintf(why, sizeof(why),
                 "an Execute answer carries at most %u bytes, a grpc client's default message "
                 "size; Start streams all of it",
                 GRPC_MAX_MESSAGE);
    else
        snprintf(why, sizeof(why),
                 "an Execute answer keeps %llu bytes per stream; "
                 "--sdk-output-bytes raises it",
                 (unsigned long long)cap);

    const struct job_result *r = run_result(&run);
    result_trailers(c, run_id(&run), r);
    finish_execute(c, run_request(&run), r, &out, &errb, why);
    /* The response was a copy (framed by grpc_call_send) as large as the output. */
    exec_service_held(out.alloc + errb.alloc + out.len + errb.len);
    outbuf_free(&out);
    outbuf_free(&errb);
    run_close(&run);
}

/* ------------------------------------------------------------------------------------ */
/* Start: a background process whose output the call follows.                           */

/* The call is over before the process: a client that cancelled its call, or whose deadline
 * passed, meant the command to stop with it (its process tree is killed, as sandboxd's
 * context kills its command); one whose connection was lost may come back for the process
 * through /processes, where it runs on until it ends, no longer held back (bg_hold) by a
 * follower that is gone. */
static void follow_cancelled(struct grpc_call *c, struct bg_proc *p)
{
    enum grpc_cancel why = grpc_call_cancelled(c);
    if (why == GRPC_RESET || why == GRPC_DEADLINE) {
        struct sbxd_err err = {0};
        (void)bg_signal(p, SIGKILL, &err); /* (it may have ended meanwhile: nothing to do) */
    }
    bg_hold(p, BG_NO_HOLD);
    finish_unsent(c);
}

/* The process's output from its start, as StartResponse stdout and stderr events (a
 * terminal's one stream is stdout), then its ExitEvent. The call holds the process's ring
 * at what it has sent (bg_hold): a client slower than the process slows it, through
 * HTTP/2's flow control, as sandboxd's Start does, rather than lose output. Should the ring
 * still have lost some (output before the hold took), the call goes on from the ring's
 * start and the trailer sbxd-output-dropped counts the bytes it missed. */
static void follow(struct grpc_call *c, struct bg_proc *p)
{
    uint8_t *buf = malloc(SBXD_READ_CHUNK);
    if (!buf) {
        bg_hold(p, BG_NO_HOLD);
        grpc_call_finish(c, GRPC_INTERNAL, "out of memory");
        return;
    }
    uint64_t off = 0, dropped = 0;
    for (;;) {
        if (grpc_call_cancelled(c) != GRPC_LIVE) {
            free(buf);
            follow_cancelled(c, p);
            return;
        }
        size_t n;
        int stream = 1;
        uint64_t next;
        enum bg_read_result rr =
            bg_read(p, off, buf, SBXD_READ_CHUNK, false, FOLLOW_TICK_MS, &n, &stream, &next);
        if (rr == BG_READ_END)
            break;
        if (rr == BG_READ_DROPPED) {
            dropped += next - off;
            off = next;
            bg_hold(p, off);
            continue;
        }
        if (rr != BG_READ_DATA)
            continue;
        Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;
        m.event_case = stream == 2 ? PROCESS__V1__START_RESPONSE__EVENT_STDERR
                                   : PROCESS__V1__START_RESPONSE__EVENT_STDOUT;
        if (stream == 2)
            m.stderr = (ProtobufCBinaryData){n, buf};
        else
            m.stdout = (ProtobufCBinaryData){n, buf};
        if (grpc_call_send(c, &m.base) < 0) {
            free(buf);
            follow_cancelled(c, p);
            return;
        }
        off = next;
        bg_hold(p, off);
    }
    free(buf);
    bg_hold(p, BG_NO_HOLD); /* everything is read: the process has ended */

    struct bg_info in;
    bg_info(p, &in);
    char v[32];
    result_trailers(c, in.id, &in.res);
    if (dropped) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)dropped);
        grpc_call_trailer(c, "sbxd-output-dropped", v);
    }
    if (in.res.status == JOB_FAILED_TO_START) {
        finish_failed_start(c, &in.res);
        return;
    }
    if (in.res.status == JOB_TIMEOUT) { /* its output is sent; no ExitEvent, as a deadline */
        finish_timed_out(c, bg_request(p)->timeout_ms);
        return;
    }
    Process__V1__ExitEvent exit_ev = PROCESS__V1__EXIT_EVENT__INIT;
    exit_ev.exit_code = sandboxd_exit_code(&in.res);
    Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;
    m.event_case = PROCESS__V1__START_RESPONSE__EVENT_EXIT;
    m.exit = &exit_ev;
    if (grpc_call_send(c, &m.base) < 0) {
        follow_cancelled(c, p);
        return;
    }
    grpc_call_finish(c, GRPC_OK, NULL);
}

/* A terminal of the size asked for; a side left at 0 takes its usual default. */
static int set_pty(const Process__V1__PTY *pty, struct exec_request *req, struct sbxd_err *err)
{
    unsigned cols = pty->cols ? pty->cols : PTY_DEFAULT_COLS;
    unsigned rows = pty->rows ? pty->rows : PTY_DEFAULT_ROWS;
    if (cols > SBXD_PTY_MAX || rows > SBXD_PTY_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, 0,
                         "pty cols and rows must be whole numbers from 1 to %d (0: 80x24)",
                         SBXD_PTY_MAX);
    req->pty = true;
    req->pty_cols = cols;
    req->pty_rows = rows;
    return 0;
}

static void process_start(struct grpc_call *c)
{
    size_t len;
    const uint8_t *data = grpc_call_message(c, &len);
    Process__V1__StartRequest *rq = process__v1__start_request__unpack(NULL, len, data);
    if (!rq) {
        finish_bad_request(c, "StartRequest");
        return;
    }
    struct exec_service *s = grpc_call_exec(c);
    /* A background process gets the longest timeout allowed unless the call's deadline is
     * sooner, and may have a terminal (run_policy). */
    struct request_policy pol;
    run_policy(s, MX_BACKGROUND, &pol);
    autoreq struct exec_request req = {0};
    struct sbxd_err err = {0};
    int rc = build_request(c, rq->config, &pol, &req, &err);
    if (rc == 0 && rq->pty)
        rc = set_pty(rq->pty, &req, &err);
    process__v1__start_request__free_unpacked(rq, NULL);
    if (rc < 0) {
        finish_err(c, &err);
        return;
    }
    if (grpc_call_draining(c)) {
        grpc_call_finish(c, GRPC_UNAVAILABLE, "sbxd is shutting down and takes no new processes");
        return;
    }
    /* Its start waits its turn among --max-running like any command's (run.h). */
    struct run_front f = call_front(c, MX_BACKGROUND);
    struct bg_proc *p = run_start_process(s, &f, STEAL_STRUCT(&req), NULL, &err);
    if (!p) {
        finish_refused(c, &err);
        return;
    }
    /* Held from its first byte: the call is to lose none of its output (follow). Every way
     * out of the call below lets go. */
    bg_hold(p, 0);
    /* A program that could not be exec'd fails the call as sandboxd's does, before any
     * event: whether it was is known once the start returned (a namespace's init says so
     * before job_start returns). */
    struct bg_info in;
    if (bg_start_failed(p, &in)) {
        bg_hold(p, BG_NO_HOLD);
        result_trailers(c, in.id, &in.res);
        finish_failed_start(c, &in.res);
        bg_put(p);
        return;
    }
    /* The process's number goes first, before any output: the client needs it to write to
     * its stdin or signal it while it runs. */
    Process__V1__InitEvent init = PROCESS__V1__INIT_EVENT__INIT;
    init.process_id = bg_number(p);
    Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;
    m.event_case = PROCESS__V1__START_RESPONSE__EVENT_INIT;
    m.init = &init;
    if (grpc_call_send(c, &m.base) < 0)
        follow_cancelled(c, p);
    else
        follow(c, p);
    bg_put(p);
}

/* ------------------------------------------------------------------------------------ */
/* WriteStdin, SendSignal, ResizeTTY: a process by its number.                          */

/* The running process of that number. One that has ended is not found, as sandboxd forgets a
 * process when it ends: REST's /processes keeps it (its result and output) for the retention
 * period, but there is nothing left to write to, signal or resize. */
static struct bg_proc *process_of(struct grpc_call *c, int32_t number)
{
    struct bg_proc *p = bg_get_number(number);
    if (p && bg_ended(p)) {
        bg_put(p);
        p = NULL;
    }
    if (!p)
        grpc_call_finish(c, GRPC_NOT_FOUND, "process %d not found", (int)number);
    return p;
}

static void finish_ended(struct grpc_call *c, int32_t number)
{
    grpc_call_finish(c, GRPC_NOT_FOUND, "process %d not found (it has ended)", (int)number);
}

/* A unary call's one message and its OK. */
static void reply(struct grpc_call *c, const ProtobufCMessage *m)
{
    if (grpc_call_send(c, m) < 0)
        finish_unsent(c);
    else
        grpc_call_finish(c, GRPC_OK, NULL);
}

static void process_write_stdin(struct grpc_call *c)
{
    size_t len;
    const uint8_t *data = grpc_call_message(c, &len);
    Process__V1__WriteStdinRequest *rq = process__v1__write_stdin_request__unpack(NULL, len, data);
    if (!rq) {
        finish_bad_request(c, "WriteStdinRequest");
        return;
    }
    int32_t number = rq->process_id;
    struct bg_proc *p = process_of(c, number);
    if (!p) {
        process__v1__write_stdin_request__free_unpacked(rq, NULL);
        return;
    }
    bool eof = rq->payload_case == PROCESS__V1__WRITE_STDIN_REQUEST__PAYLOAD_EOF;
    const void *in = NULL;
    size_t n = 0;
    if (rq->payload_case == PROCESS__V1__WRITE_STDIN_REQUEST__PAYLOAD_INPUT) {
        in = rq->input.data;
        n = rq->input.len;
    }
    Process__V1__WriteStdinResponse ok = PROCESS__V1__WRITE_STDIN_RESPONSE__INIT;
    if (!eof && n == 0) {
        /* Nothing to write (as sandboxd: not even a check that stdin is open). */
        process__v1__write_stdin_request__free_unpacked(rq, NULL);
        bg_put(p);
        reply(c, &ok.base);
        return;
    }
    /* The call's cancellation (its client gone, or its deadline) gives the write up at
     * once, as a hung-up REST client's does. */
    struct sbxd_err err = {0};
    uint64_t written = 0;
    bool open_after;
    enum bg_stdin_result r = bg_stdin(p, in, n, eof, grpc_call_config(c)->stdin_timeout_ms,
                                      grpc_call_cancel_fd(c), &written, &open_after, &err);
    process__v1__write_stdin_request__free_unpacked(rq, NULL);
    bool ended = r == BG_STDIN_FAILED && err.kind == SBXD_E_CONFLICT && bg_ended(p);
    bg_put(p);
    switch (r) {
    case BG_STDIN_DONE:
        reply(c, &ok.base);
        return;
    case BG_STDIN_HUNG_UP:
        grpc_call_finish(
            c, grpc_call_cancelled(c) == GRPC_DEADLINE ? GRPC_DEADLINE_EXCEEDED : GRPC_CANCELLED,
            NULL);
        return;
    case BG_STDIN_TIMED_OUT:
        metrics_limit(LIM_STDIN_TIMEOUT);
        grpc_call_finish(c, GRPC_DEADLINE_EXCEEDED, "%s (%llu of %zu bytes went in)", err.msg,
                         (unsigned long long)written, n);
        return;
    case BG_STDIN_FAILED:
        break;
    }
    if (err.kind == SBXD_E_BUSY)
        metrics_limit(LIM_STDIN_PENDING);
    /* The process ended meanwhile: NOT_FOUND, as process_of answers once it has; stdin
     * closed (SBXD_E_CONFLICT): FAILED_PRECONDITION; too much waiting already
     * (SBXD_E_BUSY): RESOURCE_EXHAUSTED. */
    enum grpc_code code = grpc_code_of(err.kind);
    if (ended)
        code = GRPC_NOT_FOUND;
    if (n)
        grpc_call_finish(c, code, "%s (%llu of %zu bytes went in)", err.msg,
                         (unsigned long long)written, n);
    else
        grpc_call_finish(c, code, "%s", err.msg);
}

static void process_send_signal(struct grpc_call *c)
{
    size_t len;
    const uint8_t *data = grpc_call_message(c, &len);
    Process__V1__SendSignalRequest *rq = process__v1__send_signal_request__unpack(NULL, len, data);
    if (!rq) {
        finish_bad_request(c, "SendSignalRequest");
        return;
    }
    int32_t number = rq->process_id;
    int value = (int)rq->signal;
    process__v1__send_signal_request__free_unpacked(rq, NULL);
    struct bg_proc *p = process_of(c, number);
    if (!p)
        return;
    int sig = 0;
    switch (value) {
    case PROCESS__V1__SIGNAL__SIGNAL_SIGINT:
        sig = SIGINT;
        break;
    case PROCESS__V1__SIGNAL__SIGNAL_SIGTERM:
        sig = SIGTERM;
        break;
    case PROCESS__V1__SIGNAL__SIGNAL_SIGKILL:
        sig = SIGKILL;
        break;
    default:
        bg_put(p);
        grpc_call_finish(c, GRPC_INVALID_ARGUMENT,
                         "signal %d is not one of SIGNAL_SIGINT, SIGNAL_SIGTERM, SIGNAL_SIGKILL",
                         value);
        return;
    }
    /* To the process's whole tree, by the backend in force (job.h). */
    struct sbxd_err err = {0};
    int rc = bg_signal(p, sig, &err);
    bg_put(p);
    if (rc == 0) {
        Process__V1__SendSignalResponse ok = PROCESS__V1__SEND_SIGNAL_RESPONSE__INIT;
        reply(c, &ok.base);
    } else if (err.kind == SBXD_E_CONFLICT) {
        finish_ended(c, number); /* (it ended since process_of looked) */
    } else {
        finish_err(c, &err);
    }
}

static void process_resize_tty(struct grpc_call *c)
{
    size_t len;
    const uint8_t *data = grpc_call_message(c, &len);
    Process__V1__ResizeTTYRequest *rq = process__v1__resize_ttyrequest__unpack(NULL, len, data);
    if (!rq) {
        finish_bad_request(c, "ResizeTTYRequest");
        return;
    }
    int32_t number = rq->process_id;
    uint32_t cols = rq->cols, rows = rq->rows;
    process__v1__resize_ttyrequest__free_unpacked(rq, NULL);
    struct bg_proc *p = process_of(c, number);
    if (!p)
        return;
    if (!bg_request(p)->pty) {
        bg_put(p);
        grpc_call_finish(c, GRPC_FAILED_PRECONDITION,
                         "process %d has no terminal (start it with a pty)", (int)number);
        return;
    }
    /* 0 is taken as sandboxd takes it: a side of unknown size (0x0 is what a fresh
     * terminal has), which the kernel stores as any other. */
    if (cols > SBXD_PTY_MAX || rows > SBXD_PTY_MAX) {
        bg_put(p);
        grpc_call_finish(c, GRPC_INVALID_ARGUMENT,
                         "cols and rows must be whole numbers from 0 to %d (got %ux%u)",
                         SBXD_PTY_MAX, (unsigned)cols, (unsigned)rows);
        return;
    }
    struct sbxd_err err = {0};
    int rc = bg_resize(p, cols, rows, &err);
    bg_put(p);
    if (rc == 0) {
        Process__V1__ResizeTTYResponse ok = PROCESS__V1__RESIZE_TTYRESPONSE__INIT;
        reply(c, &ok.base);
    } else if (err.kind == SBXD_E_CONFLICT) {
        finish_ended(c, number); /* (it ended since process_of looked: it has a terminal) */
    } else {
        finish_err(c, &err);
    }
}

const struct grpc_method grpc_process_methods[] = {
    {"/process.v1.ProcessService/Start", process_start, true},
    {"/process.v1.ProcessService/Execute", process_execute, false},
    {"/process.v1.ProcessService/WriteStdin", process_write_stdin, false},
    {"/process.v1.ProcessService/SendSignal", process_send_signal, false},
    {"/process.v1.ProcessService/ResizeTTY", process_resize_tty, false},
    {NULL, NULL, false},
};
