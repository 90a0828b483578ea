/*
 * background.c - background processes (background.h): the table with its references and
 * retention, one driver thread per process that runs its job into the output ring, readers
 * of that ring, signals, removal and shutdown. Stdin is background_stdin.c's.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "background_internal.h"
#include "sbxd/metrics.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "ring_internal.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

static struct {
    pthread_mutex_t lock;
    pthread_cond_t ended; /* a driver is done */
    struct bg_config cfg;
    struct bg_proc *head;
    unsigned running;       /* drivers alive */
    unsigned owned_running; /* ... of them, owned processes' (outside --max-processes) */
    int32_t numbered;       /* the last number given (bg_number) */
} tab = {.lock = PTHREAD_MUTEX_INITIALIZER, .ended = PTHREAD_COND_INITIALIZER};

void bg_init(const struct bg_config *cfg)
{
    pthread_mutex_lock(&tab.lock);
    tab.cfg = *cfg;
    pthread_mutex_unlock(&tab.lock);
}

static void proc_free(struct bg_proc *p)
{
    if (p->driven)
        run_close(&p->run); /* audited at its exit already: the job and request go */
    else
        run_discard(&p->run);
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

/* How much output the driver may take now: max, or while a follower holds the ring (bg_hold)
 * what fits without pushing out what it has not read, once there is room for more than a
 * character's start held back (RUN_CARRY_MAX, which the next chunk may say besides). */
static size_t room_to_read(struct bg_proc *p, size_t max)
{
    size_t room = max;
    pthread_mutex_lock(&p->lock);
    while (p->hold != BG_NO_HOLD) {
        uint64_t unread = p->ring.end > p->hold ? p->ring.end - p->hold : 0;
        if (unread + RUN_CARRY_MAX < p->ring.cap) {
            if (p->ring.cap - unread < room)
                room = (size_t)(p->ring.cap - unread);
            break;
        }
        /* Full: the follower's reads (or its letting go) wake us; the timeout is a safety. */
        struct timespec until = time_after_ms(CLOCK_MONOTONIC, 200);
        pthread_cond_timedwait(&p->cond, &p->lock, &until);
    }
    pthread_mutex_unlock(&p->lock);
    return room;
}

/* The process's own thread: its run's output into the ring as it comes (a character cut by
 * a read waits for its rest in the run, so the ring holds whole ones), until the exit, where
 * the run is audited, once, however the process ended. */
static void *driver_main(void *arg)
{
    struct bg_proc *p = arg;
    size_t buflen = RUN_HOLD_ROOM + SBXD_READ_CHUNK;
    uint8_t *buf = malloc(buflen), small[RUN_HOLD_ROOM + RUN_CARRY_MAX + 1];
    uint8_t *use = buf ? buf : small;
    if (!buf)
        buflen = sizeof(small);
    struct run_chunk c;
    do {
        /* what is read, and the start of a character held back before it */
        size_t room = room_to_read(p, buflen - RUN_HOLD_ROOM);
        run_next(&p->run, -1, use, RUN_HOLD_ROOM + room - RUN_CARRY_MAX, &c);
        if (c.type == RUN_OUTPUT) {
            pthread_mutex_lock(&p->lock);
            ring_append(&p->ring, run_request(&p->run)->pty ? 3 : c.stream, c.data, c.len);
            p->res.stdout_bytes = run_result(&p->run)->stdout_bytes;
            p->res.stderr_bytes = run_result(&p->run)->stderr_bytes;
            pthread_cond_broadcast(&p->cond);
            pthread_mutex_unlock(&p->lock);
        }
    } while (c.type != RUN_EXIT);
    free(buf);
    pthread_mutex_lock(&p->lock);
    p->res = *run_result(&p->run);
    p->finished = true;
    p->finished_real_ns = time_real_ns();
    p->finished_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&p->cond);
    pthread_cond_broadcast(&p->in_cond); /* an idle feeder leaves */
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_lock(&tab.lock);
    tab.running--;
    tab.owned_running -= p->owned;
    pthread_cond_broadcast(&tab.ended);
    bool last = unref_locked(p); /* the driver's own */
    pthread_mutex_unlock(&tab.lock);
    if (last)
        proc_free(p);
    return NULL;
}

static struct bg_proc *start(struct exec_request *req, const struct job_env *env, bool owned,
                             struct sbxd_err *err)
{
    bg_sweep();
    struct bg_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        exec_request_free(req);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    run_prepare(&p->run, MX_BACKGROUND, req);
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
    p->hold = BG_NO_HOLD;
    p->pty_cols = run_request(&p->run)->pty_cols;
    p->pty_rows = run_request(&p->run)->pty_rows;

    p->owned = owned;
    pthread_mutex_lock(&tab.lock);
    if (!owned && tab.running - tab.owned_running >= tab.cfg.max_processes) {
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
    tab.owned_running += owned;
    pthread_mutex_unlock(&tab.lock);

    struct job_env e = *env;
    e.cancel_fd = -1; /* no client owns it */
    e.interactive = true;
    pthread_t th;
    pthread_attr_t attr;
    int rc = -1;
    if (run_start_job(&p->run, &e, err) == 0) {
        snprintf(p->id, sizeof(p->id), "%s", run_id(&p->run));
        p->start_failed = run_result(&p->run)->status == JOB_FAILED_TO_START;
        p->pid = run_pid(&p->run);
        p->started_real_ns = time_real_ns();
        p->refs = 3; /* the table, the driver, the caller */
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &attr, driver_main, p);
        pthread_attr_destroy(&attr);
        p->driven = rc == 0;
        if (rc != 0)
            sbxd_fail(err, SBXD_E_BUSY, rc, "cannot start a thread for the process");
    }
    pthread_mutex_lock(&tab.lock);
    if (rc != 0) {
        tab.running--;
        tab.owned_running -= owned;
        pthread_mutex_unlock(&tab.lock);
        proc_free(p); /* run_discard kills a job that started */
        return NULL;
    }
    struct bg_proc **pp = &tab.head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = p;
    p->listed = true;
    p->number = owned ? 0 : ++tab.numbered;
    pthread_mutex_unlock(&tab.lock);
    return p;
}

struct bg_proc *bg_start(struct exec_request *req, const struct job_env *env, struct sbxd_err *err)
{
    return start(req, env, false, err);
}

struct bg_proc *bg_start_owned(struct exec_request *req, const struct job_env *env,
                               struct sbxd_err *err)
{
    return start(req, env, true, err);
}

struct bg_proc *bg_get(const char *id)
{
    struct bg_proc *found = NULL;
    pthread_mutex_lock(&tab.lock);
    for (struct bg_proc *p = tab.head; p && !found; p = p->next)
        if (!p->owned && strcmp(p->id, id) == 0) {
            found = p;
            p->refs++;
        }
    pthread_mutex_unlock(&tab.lock);
    return found;
}

struct bg_proc *bg_get_number(int32_t number)
{
    struct bg_proc *found = NULL;
    pthread_mutex_lock(&tab.lock);
    for (struct bg_proc *p = tab.head; p && !found; p = p->next)
        if (!p->owned && p->number == number) {
            found = p;
            p->refs++;
        }
    pthread_mutex_unlock(&tab.lock);
    return found;
}

int32_t bg_number(const struct bg_proc *p)
{
    return p->number;
}

/* Every process kept (owned ones too, with `owned`), oldest first, each with a reference. */
static size_t list(struct bg_proc ***out, bool owned)
{
    bg_sweep();
    pthread_mutex_lock(&tab.lock);
    size_t n = 0;
    for (struct bg_proc *p = tab.head; p; p = p->next)
        n++;
    struct bg_proc **v = calloc(n ? n : 1, sizeof(*v));
    size_t i = 0;
    for (struct bg_proc *p = tab.head; v && p; p = p->next) {
        if (p->owned && !owned)
            continue;
        p->refs++;
        v[i++] = p;
    }
    pthread_mutex_unlock(&tab.lock);
    *out = v;
    return i;
}

size_t bg_list(struct bg_proc ***out)
{
    return list(out, false);
}

void bg_info(struct bg_proc *p, struct bg_info *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", p->id);
    out->number = p->number;
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
    out->stdin_open = !out->finished && job_stdin_open(run_job(&p->run));
}

bool bg_start_failed(struct bg_proc *p, struct bg_info *out)
{
    if (!p->start_failed)
        return false;
    pthread_mutex_lock(&p->lock);
    while (!p->finished) /* at once: such a job ends as it starts */
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
    bg_info(p, out);
    return true;
}

const struct exec_request *bg_request(const struct bg_proc *p)
{
    return run_request(&p->run);
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
            if (utf8 && (off + k == p->ring.end || next_stream == *stream))
                k = utf8_cut((const uint8_t *)buf, k,
                             !more); /* 0: only a cut character so far, wait */
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

void bg_hold(struct bg_proc *p, uint64_t from)
{
    pthread_mutex_lock(&p->lock);
    p->hold = p->unheld ? BG_NO_HOLD : from;
    pthread_cond_broadcast(&p->cond); /* the driver may have room now */
    pthread_mutex_unlock(&p->lock);
}

/* The driver must reach the process's end whatever its follower does (bg_remove waits for
 * it, and so does shutdown): no hold from now on. */
static void unhold(struct bg_proc *p)
{
    pthread_mutex_lock(&p->lock);
    p->unheld = true;
    p->hold = BG_NO_HOLD;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

bool bg_ended(struct bg_proc *p)
{
    pthread_mutex_lock(&p->lock);
    bool f = p->finished;
    pthread_mutex_unlock(&p->lock);
    return f;
}

void bg_ref(struct bg_proc *p)
{
    pthread_mutex_lock(&tab.lock);
    p->refs++;
    pthread_mutex_unlock(&tab.lock);
}

static const struct {
    const char *name;
    int sig;
} signal_names[] = {{"SIGINT", SIGINT},   {"SIGTERM", SIGTERM}, {"SIGKILL", SIGKILL},
                    {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1},
                    {"SIGUSR2", SIGUSR2}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP}};

int bg_signal_named(const char *name, const char **canonical)
{
    for (size_t i = 0; name && i < sizeof(signal_names) / sizeof(signal_names[0]); i++)
        if (strcasecmp(name, signal_names[i].name) == 0 ||
            strcasecmp(name, signal_names[i].name + 3) == 0) {
            *canonical = signal_names[i].name;
            return signal_names[i].sig;
        }
    return 0;
}

int bg_signal(struct bg_proc *p, int sig, struct sbxd_err *err)
{
    if (bg_ended(p))
        return sbxd_fail(err, SBXD_E_CONFLICT, 0, "the process has ended");
    if (job_signal(run_job(&p->run), sig))
        return 0;
    /* Not delivered: never answered as if it were. */
    if (errno == ESRCH)
        return sbxd_fail(err, SBXD_E_CONFLICT, 0,
                         "the process has exited: the signal was not delivered");
    if (errno == EPERM)
        return sbxd_fail_errno(err, SBXD_E_DENIED, errno, "the kernel refused the signal");
    return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "the signal could not be sent");
}

int bg_resize(struct bg_proc *p, unsigned cols, unsigned rows, struct sbxd_err *err)
{
    if (!run_request(&p->run)->pty)
        return sbxd_fail(err, SBXD_E_CONFLICT, 0,
                         "the process has no terminal (start it with "
                         "\"pty\")");
    if (bg_ended(p))
        return sbxd_fail(err, SBXD_E_CONFLICT, 0, "the process has ended");
    if (job_resize(run_job(&p->run), cols, rows, err) < 0)
        return -1;
    pthread_mutex_lock(&p->lock);
    p->pty_cols = cols;
    p->pty_rows = rows;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void bg_remove(struct bg_proc *p, struct bg_info *info)
{
    job_kill(run_job(&p->run), JOB_KILL_CANCEL);
    unhold(p);
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
    size_t n = list(&v, true);
    for (size_t i = 0; v && i < n; i++) {
        if (!bg_ended(v[i]))
            job_signal(run_job(&v[i]->run), sig);
        unhold(v[i]);
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
