#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "sbxd/background.h"
#include "sbxd/exec_service.h"
#include "sbxd/metrics.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/ring.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

/* One stdin write while its writer waits: on the writer's stack, in the queue until all of it
 * is handed to the job. Under its process's lock. */
struct stdin_write {
    struct stdin_write *next;
    const uint8_t *data;
    size_t len;
    size_t taken;   /* bytes handed to the job so far */
    size_t written; /* of those, in the pipe */
    bool eof;
    bool done;       /* all in; or failed, with why */
    bool open_after; /* stdin was still open once all was in */
    enum sbxd_errkind fail_kind;
    const char *why;
};

struct bg_proc {
    struct bg_proc *next; /* the table, oldest first (under tab.lock) */
    bool listed;          /* in the table (under tab.lock) */
    unsigned refs;        /* under tab.lock */
    struct job *job;
    struct exec_request req;
    char id[25];
    pid_t pid;
    int64_t started_real_ns;
    /* Under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* output arrived, or the end */
    struct ring ring;
    bool finished;
    unsigned pty_cols, pty_rows; /* the terminal's size now */
    int64_t finished_real_ns, finished_mono_ns;
    struct job_result res;
    /* stdin: writes queue here and one thread of the process's own, the feeder, hands them
     * to the job a chunk at a time. job_stdin_write waits, without end, for the process to
     * read: only the feeder ever waits there, so a writer can give up (a timeout, its
     * client gone) and take back what it had not handed over yet. */
    pthread_cond_t in_cond;        /* the queue moved, stdin closed, or the process ended */
    struct stdin_write *in_head;   /* oldest first */
    struct stdin_write *in_flight; /* whose chunk the feeder writes; NULL once its writer left */
    uint64_t in_pending;           /* bytes queued or being written, not yet in the pipe */
    bool feeder;                   /* the feeder runs (it holds a reference) */
    bool in_closed;                /* the feeder found stdin closed: every write fails, why */
    enum sbxd_errkind in_kind;
    const char *in_why;
    uint8_t *in_buf; /* the feeder's chunk (SBXD_STDIN_CHUNK) */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t ended; /* a driver is done */
    struct bg_config cfg;
    struct bg_proc *head;
    unsigned running; /* drivers alive */
} tab = {.lock = PTHREAD_MUTEX_INITIALIZER, .ended = PTHREAD_COND_INITIALIZER};

void bg_init(const struct bg_config *cfg)
{
    pthread_mutex_lock(&tab.lock);
    tab.cfg = *cfg;
    pthread_mutex_unlock(&tab.lock);
}

static void proc_free(struct bg_proc *p)
{
    job_free(p->job);
    exec_request_free(&p->req);
    ring_free(&p->ring);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    pthread_cond_destroy(&p->in_cond);
    free(p->in_buf);
    free(p);
}

/* Under tab.lock. Returns whether that was the last reference. */
static bool unref_locked(struct bg_proc *p)
{
    return --p->refs == 0;
}

void bg_put(struct bg_proc *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&tab.lock);
    bool last = unref_locked(p);
    pthread_mutex_unlock(&tab.lock);
    if (last)
        proc_free(p);
}

/* Under tab.lock: out of the table; the table's reference is dropped (the caller frees if it
 * was the last: returned). */
static struct bg_proc *unlist_locked(struct bg_proc *p)
{
    for (struct bg_proc **pp = &tab.head; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            p->next = NULL;
            p->listed = false;
            return unref_locked(p) ? p : NULL;
        }
    return NULL;
}

static bool proc_finished(struct bg_proc *p, int64_t *when_mono)
{
    pthread_mutex_lock(&p->lock);
    bool f = p->finished;
    *when_mono = p->finished_mono_ns;
    pthread_mutex_unlock(&p->lock);
    return f;
}

/* Under tab.lock: the ended processes past retention, and beyond max_processes the oldest
 * ended ones, leave the table. Those to free go on *dead. */
static void sweep_locked(struct bg_proc **dead)
{
    int64_t now = time_mono_ns();
    unsigned ended = 0;
    for (struct bg_proc *p = tab.head; p; p = p->next) {
        int64_t t;
        ended += proc_finished(p, &t);
    }
    for (struct bg_proc *p = tab.head, *nx; p; p = nx) {
        nx = p->next;
        int64_t t;
        if (!proc_finished(p, &t))
            continue;
        bool expired = now - t >= (int64_t)tab.cfg.retention_ms * 1000000;
        if (expired || ended > tab.cfg.max_processes) {
            ended--;
            struct bg_proc *f = unlist_locked(p);
            if (f) {
                f->next = *dead;
                *dead = f;
            }
        }
    }
}

static void free_dead(struct bg_proc *dead)
{
    while (dead) {
        struct bg_proc *nx = dead->next;
        proc_free(dead);
        dead = nx;
    }
}

void bg_sweep(void)
{
    struct bg_proc *dead = NULL;
    pthread_mutex_lock(&tab.lock);
    sweep_locked(&dead);
    pthread_mutex_unlock(&tab.lock);
    free_dead(dead);
}

/* The process's own thread: output into the ring as it comes, until the end. */
static void *driver_main(void *arg)
{
    struct bg_proc *p = arg;
    char *buf = malloc(SBXD_READ_CHUNK);
    struct job_event ev;
    do {
        job_step(p->job, -1, buf ? buf : (char[1]){0}, buf ? SBXD_READ_CHUNK : 1, &ev);
        if (ev.type == JOB_EV_OUTPUT) {
            pthread_mutex_lock(&p->lock);
            ring_append(&p->ring, p->req.pty ? 3 : ev.stream, buf, ev.len);
            p->res.stdout_bytes = job_result(p->job)->stdout_bytes;
            p->res.stderr_bytes = job_result(p->job)->stderr_bytes;
            pthread_cond_broadcast(&p->cond);
            pthread_mutex_unlock(&p->lock);
        }
    } while (ev.type != JOB_EV_EXIT);
    free(buf);
    pthread_mutex_lock(&p->lock);
    p->res = *job_result(p->job);
    p->finished = true;
    p->finished_real_ns = time_real_ns();
    p->finished_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&p->cond);
    pthread_cond_broadcast(&p->in_cond); /* an idle feeder leaves */
    pthread_mutex_unlock(&p->lock);
    exec_service_audit(MX_BACKGROUND, p->id, &p->req, &p->res, NULL);
    pthread_mutex_lock(&tab.lock);
    tab.running--;
    pthread_cond_broadcast(&tab.ended);
    bool last = unref_locked(p); /* the driver's own */
    pthread_mutex_unlock(&tab.lock);
    if (last)
        proc_free(p);
    return NULL;
}

struct bg_proc *bg_start(struct exec_request *req, const struct job_env *env, struct sbxd_err *err)
{
    bg_sweep();
    struct bg_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        exec_request_free(req);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    p->req = *req;
    memset(req, 0, sizeof(*req));
    pthread_mutex_init(&p->lock, NULL);
    /* bg_read's deadlines are on the monotonic clock: so must the condition's be (with the
     * default, realtime, clock every wait would time out at once, and a follower of a
     * quiet process would get heartbeats as fast as it can take them). */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &ca);
    pthread_cond_init(&p->in_cond, &ca); /* (a stdin write's deadline too) */
    pthread_condattr_destroy(&ca);
    ring_init(&p->ring, tab.cfg.output_bytes);
    p->pty_cols = p->req.pty_cols;
    p->pty_rows = p->req.pty_rows;

    pthread_mutex_lock(&tab.lock);
    if (tab.running >= tab.cfg.max_processes) {
        unsigned max = tab.cfg.max_processes;
        pthread_mutex_unlock(&tab.lock);
        proc_free(p);
        sbxd_fail(err, SBXD_E_BUSY, 0,
                  "%u background processes are running already (--max-processes); end one "
                  "or retry later",
                  max);
        return NULL;
    }
    tab.running++; /* held while it starts */
    pthread_mutex_unlock(&tab.lock);

    struct job_env e = *env;
    e.cancel_fd = -1; /* no client owns it */
    e.interactive = true;
    p->job = job_start(&p->req, &e, err);
    pthread_t th;
    pthread_attr_t attr;
    int rc = -1;
    if (p->job) {
        snprintf(p->id, sizeof(p->id), "%s", job_id(p->job));
        p->pid = job_pid(p->job);
        p->started_real_ns = time_real_ns();
        p->refs = 3; /* the table, the driver, the caller */
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &attr, driver_main, p);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            sbxd_fail(err, SBXD_E_BUSY, rc, "cannot start a thread for the process");
    }
    pthread_mutex_lock(&tab.lock);
    if (rc != 0) {
        tab.running--;
        pthread_mutex_unlock(&tab.lock);
        proc_free(p); /* job_free kills a job that started */
        return NULL;
    }
    struct bg_proc **pp = &tab.head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = p;
    p->listed = true;
    pthread_mutex_unlock(&tab.lock);
    return p;
}

struct bg_proc *bg_get(const char *id)
{
    struct bg_proc *found = NULL;
    pthread_mutex_lock(&tab.lock);
    for (struct bg_proc *p = tab.head; p && !found; p = p->next)
        if (strcmp(p->id, id) == 0) {
            found = p;
            p->refs++;
        }
    pthread_mutex_unlock(&tab.lock);
    return found;
}

size_t bg_list(struct bg_proc ***out)
{
    bg_sweep();
    pthread_mutex_lock(&tab.lock);
    size_t n = 0;
    for (struct bg_proc *p = tab.head; p; p = p->next)
        n++;
    struct bg_proc **v = calloc(n ? n : 1, sizeof(*v));
    size_t i = 0;
    for (struct bg_proc *p = tab.head; v && p; p = p->next) {
        p->refs++;
        v[i++] = p;
    }
    pthread_mutex_unlock(&tab.lock);
    *out = v;
    return i;
}

void bg_info(struct bg_proc *p, struct bg_info *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", p->id);
    out->pid = p->pid;
    out->started_real_ns = p->started_real_ns;
    pthread_mutex_lock(&p->lock);
    out->finished = p->finished;
    out->finished_real_ns = p->finished_real_ns;
    out->out_start = p->ring.start;
    out->out_end = p->ring.end;
    out->res = p->res;
    out->pty_cols = p->pty_cols;
    out->pty_rows = p->pty_rows;
    pthread_mutex_unlock(&p->lock);
    if (!out->finished)
        out->res.status = JOB_RUNNING;
    out->stdin_open = !out->finished && job_stdin_open(p->job);
}

const struct exec_request *bg_request(const struct bg_proc *p)
{
    return &p->req;
}

bool bg_offset_valid(struct bg_proc *p, uint64_t off)
{
    pthread_mutex_lock(&p->lock);
    bool ok = off <= p->ring.end;
    pthread_mutex_unlock(&p->lock);
    return ok;
}

enum bg_read_result bg_read(struct bg_proc *p, uint64_t off, void *buf, size_t max, bool utf8,
                            int timeout_ms, size_t *n, int *stream, uint64_t *next)
{
    *n = 0;
    *next = off;
    struct timespec until = {0, 0};
    if (timeout_ms > 0)
        until = time_after_ms(CLOCK_MONOTONIC, timeout_ms);
    enum bg_read_result rr = BG_READ_NONE;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (off < p->ring.start) {
            *next = p->ring.start;
            rr = BG_READ_DROPPED;
            break;
        }
        if (off < p->ring.end) {
            size_t k = ring_read(&p->ring, off, buf, max, stream);
            /* A character cut by the end of what is there (or by max) waits for its rest,
             * unless nothing more of this stream can come after it. */
            bool more = off + k < p->ring.end || !p->finished;
            int next_stream = 0;
            uint8_t peek;
            if (off + k < p->ring.end)
                ring_read(&p->ring, off + k, &peek, 1, &next_stream);
            if (utf8 && more && (off + k == p->ring.end || next_stream == *stream)) {
                k = utf8_whole((const uint8_t *)buf, k); /* 0: only a cut character so far, wait */
            }
            if (k > 0) {
                *n = k;
                *next = off + k;
                rr = BG_READ_DATA;
                break;
            }
        } else if (p->finished) {
            rr = BG_READ_END;
            break;
        }
        if (timeout_ms == 0)
            break;
        if (timeout_ms < 0) {
            pthread_cond_wait(&p->cond, &p->lock);
        } else if (pthread_cond_timedwait(&p->cond, &p->lock, &until) == ETIMEDOUT) {
            timeout_ms = 0; /* one more look, then NONE */
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rr;
}

static bool ended(struct bg_proc *p)
{
    pthread_mutex_lock(&p->lock);
    bool f = p->finished;
    pthread_mutex_unlock(&p->lock);
    return f;
}

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
        int rc = job_stdin_write(p->job, p->in_buf, k, eof, &n, &err);
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
                w->open_after = job_stdin_open(p->job);
            }
            if (eof && !job_stdin_open(p->job))
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

/* Whether the client on fd hung up. POLLRDHUP says so, but gVisor never reports it: there a
 * readable socket is peeked at, until it shows the next pipelined request (then only a
 * hang-up proper can tell). */
static bool client_hung_up(int fd, bool *peek)
{
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP | (*peek ? POLLIN : 0)};
    if (fd < 0 || poll(&pfd, 1, 0) <= 0)
        return false;
    if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))
        return true;
    char c;
    ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EINTR))) {
        *peek = false;
        return false;
    }
    return true; /* 0: end of stream; < 0: the connection is broken */
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
    if (ended(p)) {
        sbxd_fail(err, SBXD_E_CONFLICT, 0, "the process has ended");
        return BG_STDIN_FAILED;
    }
    if (!job_stdin_open(p->job)) {
        sbxd_fail(err, SBXD_E_CONFLICT, 0, "stdin is closed");
        return BG_STDIN_FAILED;
    }
    /* A reference for the feeder, should this write start it (tab.lock goes before p->lock). */
    pthread_mutex_lock(&tab.lock);
    p->refs++;
    pthread_mutex_unlock(&tab.lock);
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
        struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
        pthread_cond_timedwait(&p->in_cond, &p->lock, &ts);
        if (w.done)
            break;
        /* A writer whose client left gives up at once: its thread, descriptor and connection
         * slot must not wait for a process that may never read (see docs/api.md). */
        pthread_mutex_unlock(&p->lock);
        hung_up = client_hung_up(cancel_fd, &peek);
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

int bg_signal(struct bg_proc *p, int sig, struct sbxd_err *err)
{
    if (ended(p) || !job_signal(p->job, sig))
        return sbxd_fail(err, SBXD_E_CONFLICT, 0, "the process has ended");
    return 0;
}

int bg_resize(struct bg_proc *p, unsigned cols, unsigned rows, struct sbxd_err *err)
{
    if (!p->req.pty)
        return sbxd_fail(err, SBXD_E_CONFLICT, 0,
                         "the process has no terminal (start it with "
                         "\"pty\")");
    if (ended(p))
        return sbxd_fail(err, SBXD_E_CONFLICT, 0, "the process has ended");
    if (job_resize(p->job, cols, rows, err) < 0)
        return -1;
    pthread_mutex_lock(&p->lock);
    p->pty_cols = cols;
    p->pty_rows = rows;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void bg_remove(struct bg_proc *p, struct bg_info *info)
{
    job_kill(p->job, JOB_KILL_CANCEL);
    pthread_mutex_lock(&p->lock);
    while (!p->finished)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
    bg_info(p, info);
    pthread_mutex_lock(&tab.lock);
    struct bg_proc *f = p->listed ? unlist_locked(p) : NULL;
    pthread_mutex_unlock(&tab.lock);
    if (f)
        proc_free(f); /* (never: the caller holds a reference) */
}

void bg_signal_all(int sig)
{
    struct bg_proc **v;
    size_t n = bg_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        if (!ended(v[i]))
            job_signal(v[i]->job, sig);
        bg_put(v[i]);
    }
    free(v);
}

unsigned bg_running(void)
{
    pthread_mutex_lock(&tab.lock);
    unsigned n = tab.running;
    pthread_mutex_unlock(&tab.lock);
    return n;
}

void bg_wait_ended(int timeout_ms)
{
    struct timespec until = time_after_ms(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&tab.lock);
    while (tab.running > 0)
        if (pthread_cond_timedwait(&tab.ended, &tab.lock, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&tab.lock);
}

void bg_shutdown(void)
{
    struct bg_proc *dead = NULL;
    pthread_mutex_lock(&tab.lock);
    while (tab.head) {
        struct bg_proc *f = unlist_locked(tab.head);
        if (f) {
            f->next = dead;
            dead = f;
        }
    }
    pthread_mutex_unlock(&tab.lock);
    free_dead(dead);
}
