/*
 * background_stdin.c - stdin of a background process: writers queue their bytes and wait,
 * with a deadline (--stdin-timeout-ms) and an eye on their client's socket; one feeder
 * thread per process hands them to the job (job_stdin_write) a chunk at a time, the one
 * thread that waits for the process to read.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "background_internal.h"
#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"
#include "sbxd/timeutil.h"

/* Why job_stdin_write failed, in words that last (its message names the chunk's counts, not
 * the writer's): from the error's flags, never its text. */
static const char *stdin_why(const struct sbxd_err *err)
{
    if (err->kind != SBXD_E_CONFLICT)
        return "out of memory";
    if (err->flags & SBXD_EF_ENDED)
        return "the process has ended";
    if (err->flags & SBXD_EF_INPUT_CLOSED)
        return "the process closed its input";
    return "stdin is closed";
}

/* Under p->lock: w leaves the queue; what it had not handed to the job is dropped. */
static void stdin_withdraw_locked(struct bg_proc *p, struct stdin_write *w)
{
    for (struct stdin_write **pp = &p->in_head; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    if (p->in_flight == w)
        p->in_flight = NULL;
    p->in_pending -= w->len - w->taken;
}

/* Under p->lock: every write waiting fails with why; with close, stdin is closed for good. */
static void stdin_fail_locked(struct bg_proc *p, enum sbxd_errkind kind, const char *why,
                              bool close)
{
    for (struct stdin_write *w = p->in_head; w; w = w->next) {
        p->in_pending -= w->len - w->taken;
        w->done = true;
        w->fail_kind = kind;
        w->why = why;
    }
    p->in_head = NULL;
    if (close) {
        p->in_closed = true;
        p->in_kind = kind;
        p->in_why = why;
    }
    pthread_cond_broadcast(&p->in_cond);
}

/* The feeder: hands the queued writes to the job, a chunk at a time, oldest first, until
 * stdin closes or the process ends. It is the one thread that waits for the process to read. */
static void *feeder_main(void *arg)
{
    struct bg_proc *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->in_head && !p->finished && !p->in_closed)
            pthread_cond_wait(&p->in_cond, &p->lock);
        struct stdin_write *w = p->in_head;
        if (!w)
            break;
        /* The chunk is copied: its writer may leave while the job writes it. */
        size_t k = w->len - w->taken < SBXD_STDIN_CHUNK ? w->len - w->taken : SBXD_STDIN_CHUNK;
        if (k)
            memcpy(p->in_buf, w->data + w->taken, k);
        w->taken += k;
        bool last = w->taken == w->len, eof = last && w->eof;
        if (last)
            p->in_head = w->next;
        p->in_flight = w;
        pthread_mutex_unlock(&p->lock);
        struct sbxd_err err = {0};
        uint64_t n = 0;
        int rc = job_stdin_write(run_job(&p->run), p->in_buf, k, eof, &n, &err);
        pthread_mutex_lock(&p->lock);
        p->in_pending -= k;
        w = p->in_flight; /* NULL when its writer gave up meanwhile */
        p->in_flight = NULL;
        if (w)
            w->written += n;
        if (rc < 0) {
            /* This write fails; when stdin closed (or the process ended), every one after
             * it too (out of memory: this one alone). */
            if (w && !last)
                stdin_withdraw_locked(p, w);
            if (w) {
                w->done = true;
                w->fail_kind = err.kind;
                w->why = stdin_why(&err);
            }
            if (err.kind == SBXD_E_CONFLICT)
                stdin_fail_locked(p, err.kind, stdin_why(&err), true);
        } else {
            if (w && last) {
                w->done = true;
                w->open_after = job_stdin_open(run_job(&p->run));
            }
            if (eof && !job_stdin_open(run_job(&p->run)))
                stdin_fail_locked(p, SBXD_E_CONFLICT, "stdin is closed", true);
        }
        pthread_cond_broadcast(&p->in_cond);
    }
    p->feeder = false;
    pthread_mutex_unlock(&p->lock);
    bg_put(p);
    return NULL;
}

/* Under p->lock: the feeder, with the reference the caller took for it. */
static int feeder_start_locked(struct bg_proc *p, struct sbxd_err *err)
{
    if (!p->in_buf && !(p->in_buf = malloc(SBXD_STDIN_CHUNK)))
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, feeder_main, p);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return sbxd_fail(err, SBXD_E_BUSY, rc, "cannot start a thread for the process's stdin");
    p->feeder = true;
    return 0;
}

/* Under p->lock: whether a write of n bytes may queue; starts the feeder (*started: it took
 * the caller's reference). */
static int stdin_admit_locked(struct bg_proc *p, size_t n, bool *started, struct sbxd_err *err)
{
    if (p->in_closed)
        return sbxd_fail(err, p->in_kind, 0, "%s", p->in_why);
    /* The bound of bytes waiting: writers to a process that does not read cannot pile up
     * their bodies in sbxd. A body alone always fits (it is within --max-body-bytes). */
    if (p->in_pending > 0 && p->in_pending + n > SBXD_STDIN_PENDING_MAX)
        return sbxd_fail(err, SBXD_E_BUSY, 0,
                         "%llu bytes already wait for the process to read its stdin, and %zu "
                         "more would pass the bound of %d: retry once it has read them",
                         (unsigned long long)p->in_pending, n, SBXD_STDIN_PENDING_MAX);
    if (!p->feeder) {
        if (feeder_start_locked(p, err) < 0)
            return -1;
        *started = true;
    }
    return 0;
}

enum bg_stdin_result bg_stdin(struct bg_proc *p, const void *data, size_t n, bool eof,
                              uint64_t timeout_ms, int cancel_fd, uint64_t *written,
                              bool *open_after, struct sbxd_err *err)
{
    *written = 0;
    *open_after = false;
    if (bg_ended(p)) {
        sbxd_fail(err, SBXD_E_CONFLICT, 0, "the process has ended");
        return BG_STDIN_FAILED;
    }
    if (!job_stdin_open(run_job(&p->run))) {
        sbxd_fail(err, SBXD_E_CONFLICT, 0, "stdin is closed");
        return BG_STDIN_FAILED;
    }
    /* A reference for the feeder, should this write start it (before p->lock is taken). */
    bg_ref(p);
    bool ref_used = false;
    struct stdin_write w = {.data = data, .len = n, .eof = eof};
    int64_t deadline = time_mono_ns() + (int64_t)timeout_ms * 1000000;
    bool hung_up = false, peek = true;
    pthread_mutex_lock(&p->lock);
    if (stdin_admit_locked(p, n, &ref_used, err) < 0) {
        pthread_mutex_unlock(&p->lock);
        bg_put(p);
        return BG_STDIN_FAILED;
    }
    struct stdin_write **tail = &p->in_head;
    while (*tail)
        tail = &(*tail)->next;
    *tail = &w;
    p->in_pending += n;
    pthread_cond_broadcast(&p->in_cond);
    while (!w.done) {
        int64_t now = time_mono_ns();
        if (now >= deadline)
            break;
        int64_t until = now + (int64_t)SBXD_STDIN_POLL_MS * 1000000;
        if (until > deadline)
            until = deadline;
        struct timespec ts = time_mono_timespec(until);
        pthread_cond_timedwait(&p->in_cond, &p->lock, &ts);
        if (w.done)
            break;
        /* A writer whose client left gives up at once: its thread, descriptor and connection
         * slot must not wait for a process that may never read (see docs/api.md). */
        pthread_mutex_unlock(&p->lock);
        hung_up = job_client_hung_up(cancel_fd, &peek);
        pthread_mutex_lock(&p->lock);
        if (hung_up)
            break;
    }
    enum bg_stdin_result rr = BG_STDIN_DONE;
    if (!w.done) {
        stdin_withdraw_locked(p, &w);
        *written = w.taken; /* handed to the job: in the pipe, or will be as the process reads */
        rr = hung_up ? BG_STDIN_HUNG_UP : BG_STDIN_TIMED_OUT;
        if (!hung_up)
            sbxd_fail(err, SBXD_E_CONFLICT, 0,
                      "stdin write timed out after %llu ms (--stdin-timeout-ms): the process did "
                      "not read it; %llu of %zu bytes went in, the rest was dropped",
                      (unsigned long long)timeout_ms, (unsigned long long)w.taken, n);
    } else {
        *written = w.written;
        *open_after = w.open_after;
        if (w.why) {
            rr = BG_STDIN_FAILED;
            if (w.written == 0)
                sbxd_fail(err, w.fail_kind, 0, "%s", w.why);
            else if (w.fail_kind == SBXD_E_CONFLICT)
                sbxd_fail(err, w.fail_kind, 0, "stdin closed after %llu of %zu bytes: %s",
                          (unsigned long long)w.written, n, w.why);
            else
                sbxd_fail(err, w.fail_kind, 0, "%s after %llu of %zu bytes", w.why,
                          (unsigned long long)w.written, n);
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (!ref_used)
        bg_put(p);
    return rr;
}
