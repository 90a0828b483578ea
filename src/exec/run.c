/*
 * run.c - one command's life for every front (run.h): admission, start, reading, the audit
 * exactly once, the slot given back, over the exec service (exec_service.h).
 */
#include <stdio.h>
#include <string.h>

#include "sbxd/limits.h"
#include "sbxd/run.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

void run_policy(const struct exec_service *s, enum metrics_mode mode, struct request_policy *pol)
{
    exec_service_policy(s, mode, pol);
}

/* Admission as every front has it: the slot, then whether the command is still wanted. */
static int admit(struct exec_service *s, const struct run_front *f, double *queued_ms,
                 struct sbxd_err *err)
{
    *queued_ms = 0;
    /* A drain refuses what comes after it, whichever front it comes by. */
    if (f->stop && __atomic_load_n(f->stop, __ATOMIC_ACQUIRE))
        return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, "sbxd is shutting down and takes no new %s",
                         f->mode == MX_BACKGROUND ? "processes" : "commands");
    struct exec_admit adm = {.client_fd = f->client_fd, .stop = f->stop};
    int rc = exec_service_admit(s, &adm, err);
    *queued_ms = adm.queued_ms;
    if (rc < 0) {
        if (adm.gone)
            err->flags |= SBXD_EF_GONE;
        return -1;
    }
    if (f->wanted && !f->wanted(f->cls)) {
        /* Cancelled while it waited, or just as its turn came: nothing is started for a
         * client nobody answers any more. */
        exec_service_leave(s);
        sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, "the client is gone");
        err->flags |= SBXD_EF_GONE;
        return -1;
    }
    return 0;
}

int run_open(struct run *r, struct exec_service *s, const struct run_front *f,
             struct exec_request *req, struct sbxd_err *err)
{
    *r = (struct run){.svc = s, .req = *req, .mode = f->mode, .keeps_slot = f->keeps_slot};
    r->req.front = f->front;
    if (f->client)
        snprintf(r->client, sizeof(r->client), "%s", f->client);
    if (admit(s, f, &r->queued_ms, err) < 0) {
        exec_request_free(&r->req);
        return -1;
    }
    r->job = exec_service_start(s, f->mode, &r->req, f->client_fd, err);
    if (!r->job) {
        exec_request_free(&r->req);
        exec_service_leave(s);
        return -1;
    }
    return 0;
}

static void audit(struct run *r)
{
    if (r->audited)
        return;
    r->audited = true;
    exec_service_audit(r->mode, job_id(r->job), &r->req, job_result(r->job), r->queued_ms,
                       r->client[0] ? r->client : NULL);
}

/* Output of one stream as a chunk at data (RUN_HOLD_ROOM bytes before it are free): the
 * character held back from the last chunk goes in front; one cut off at the end waits for
 * its rest (it is at most 3 bytes), unless this is the last (final). false: nothing to say
 * yet. */
static bool hold_back(struct run *r, int stream, uint8_t *data, size_t n, bool final,
                      struct run_chunk *c)
{
    bool utf8 = r->req.encoding != EXEC_ENC_BASE64;
    uint8_t *joined = data;
    size_t len = n;
    if (utf8 && r->ncarry[stream]) {
        joined = data - r->ncarry[stream];
        memcpy(joined, r->carry[stream], r->ncarry[stream]);
        len += r->ncarry[stream];
        r->ncarry[stream] = 0;
    }
    size_t send = utf8 ? utf8_cut(joined, len, final) : len;
    r->ncarry[stream] = (uint8_t)(len - send);
    memcpy(r->carry[stream], joined + send, len - send);
    if (!send)
        return false;
    *c = (struct run_chunk){.type = RUN_OUTPUT,
                            .stream = stream,
                            .data = joined,
                            .len = send,
                            .offset = r->offset[stream]};
    r->offset[stream] += send;
    return true;
}

/* The exit: a cut-off character left over comes first, alone (shown as U+FFFD). */
static void at_exit(struct run *r, uint8_t *buf, struct run_chunk *c)
{
    for (int st = 1; st <= 2; st++)
        if (r->ncarry[st]) {
            uint8_t k = r->ncarry[st];
            memcpy(buf + RUN_HOLD_ROOM, r->carry[st], k);
            r->ncarry[st] = 0;
            if (hold_back(r, st, buf + RUN_HOLD_ROOM, k, true, c))
                return;
        }
    r->exited = true;
    audit(r);
    *c = (struct run_chunk){.type = RUN_EXIT};
}

void run_next(struct run *r, int timeout_ms, uint8_t *buf, size_t buflen, struct run_chunk *c)
{
    *c = (struct run_chunk){.type = RUN_NONE};
    if (r->exited) {
        c->type = RUN_EXIT;
        return;
    }
    int64_t until = timeout_ms > 0 ? time_mono_ns() + (int64_t)timeout_ms * 1000000 : 0;
    for (;;) {
        struct job_event ev;
        job_step(r->job, until ? time_ms_until(until) : timeout_ms, buf + RUN_HOLD_ROOM,
                 buflen - RUN_HOLD_ROOM, &ev);
        if (ev.type == JOB_EV_NONE)
            return;
        if (ev.type == JOB_EV_EXIT) {
            at_exit(r, buf, c);
            return;
        }
        if (hold_back(r, ev.stream, buf + RUN_HOLD_ROOM, ev.len, false, c))
            return;
        /* only the start of a character came: wait for its rest */
    }
}

void run_cancel(struct run *r)
{
    job_kill(r->job, JOB_KILL_CANCEL);
}

size_t run_output_cap(const struct exec_service *s, const struct exec_request *req)
{
    uint64_t cap = s->cfg->max_output_bytes;
    if (req->limits.output_bytes < cap)
        cap = req->limits.output_bytes;
    return (size_t)cap;
}

void run_collect(struct run *r, size_t keep, struct outbuf *out, struct outbuf *errb)
{
    size_t cap = run_output_cap(r->svc, &r->req);
    if (keep != RUN_KEEP_CAP) {
        outbuf_init_pooled(out, keep, cap, &r->svc->out_pool);
        outbuf_init_pooled(errb, keep, cap, &r->svc->out_pool);
    } else {
        outbuf_init(out, cap);
        outbuf_init(errb, cap);
    }
    exec_service_collect(r->job, out, errb);
    r->exited = true;
    audit(r);
}

void run_close(struct run *r)
{
    if (!r->job)
        return;
    if (!r->audited) {
        /* Abandoned: its client went away before the exit. It is stopped as a hang-up stops
         * it, and its end awaited (the kill reaches the whole tree at once; the drain window
         * bounds a pipe some escaped holder keeps open), so that the audit line and the
         * metrics say how it ended, once, like any other command's. */
        job_kill(r->job, JOB_KILL_CANCEL);
        char buf[SBXD_READ_CHUNK / 16];
        struct job_event ev;
        do
            job_step(r->job, -1, buf, sizeof(buf), &ev);
        while (ev.type != JOB_EV_EXIT);
        audit(r);
    }
    job_free(r->job);
    r->job = NULL;
    exec_request_free(&r->req);
    if (!r->keeps_slot)
        exec_service_leave(r->svc);
}

struct bg_proc *run_start_process(struct exec_service *s, const struct run_front *f,
                                  struct exec_request *req, double *queued_ms, struct sbxd_err *err)
{
    req->front = f->front;
    double waited;
    int rc = admit(s, f, &waited, err);
    if (queued_ms)
        *queued_ms = waited;
    if (rc < 0) {
        exec_request_free(req);
        return NULL;
    }
    /* A running background process holds no slot (--max-processes caps those): its start
     * waits its turn among --max-running like any command's, and gives it back once done. */
    struct bg_proc *p = exec_service_start_process(s, req, err); /* req is its own now */
    exec_service_leave(s);
    return p;
}

void run_prepare(struct run *r, enum metrics_mode mode, struct exec_request *req)
{
    *r = (struct run){.req = *req, .mode = mode, .keeps_slot = true, .queued_ms = -1};
    memset(req, 0, sizeof(*req));
}

int run_start_job(struct run *r, const struct job_env *env, struct sbxd_err *err)
{
    r->job = job_start(&r->req, env, err);
    return r->job ? 0 : -1;
}

void run_discard(struct run *r)
{
    job_free(r->job); /* (kills a job that started) */
    r->job = NULL;
    exec_request_free(&r->req);
}
