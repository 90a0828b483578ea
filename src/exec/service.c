/*
 * service.c - the exec service (exec_service.h): admission, policy, environment, start,
 * collection and audit of a command, for every front alike.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sbxd/exec_service.h"
#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"
#include "sbxd/log.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

/* Processors online, read once: sysconf reads /sys/devices/system/cpu/online each time (three
 * system calls on every request's parse). */
static long cpus_online(void)
{
    static long n;
    long v = __atomic_load_n(&n, __ATOMIC_RELAXED);
    if (v <= 0) {
        v = sysconf(_SC_NPROCESSORS_ONLN);
        if (v < 1)
            v = 1;
        __atomic_store_n(&n, v, __ATOMIC_RELAXED);
    }
    return v;
}

void exec_service_policy(const struct exec_service *s, enum metrics_mode mode,
                         struct request_policy *pol)
{
    bool background = mode == MX_BACKGROUND;
    *pol = (struct request_policy){
        .default_timeout_ms = background ? s->cfg->max_timeout_ms : s->cfg->timeout_ms,
        .max_timeout_ms = s->cfg->max_timeout_ms,
        .max_memory_bytes = s->cfg->memory_max,
        .max_pids = s->cfg->pids_max,
        .max_cpu_quota = (double)cpus_online(),
        .workspace = s->workspace,
        .env = s->cfg->cmdenv,
        .allow_pty = background,
    };
}

/* What job_start needs besides the request; a background process keeps its stdin open for
 * later writes. */
static struct job_env exec_service_env(const struct exec_service *s, enum metrics_mode mode,
                                       int cancel_fd)
{
    return (struct job_env){.rootfd = s->rootfd,
                            .cancel_fd = cancel_fd,
                            .harden = s->harden,
                            .iso = s->iso,
                            .memory_max = s->cfg->memory_max,
                            .pids_max = s->cfg->pids_max,
                            .interactive = mode == MX_BACKGROUND,
                            .streamed = mode == MX_STREAM};
}

void exec_service_audit(enum metrics_mode mode, const char *id, const struct exec_request *req,
                        const struct job_result *r, double queued_ms, const char *client)
{
    metrics_execution(req->front, mode, r);
    char cmd[SBXD_AUDIT_COMMAND_MAX + 1];
    exec_request_text(req, cmd, sizeof(cmd));
    struct log_field f[12] = {
        LOG_S("id", id),
        LOG_S("front", exec_front_name(req->front)),
        LOG_S(req->shell ? "command" : "argv", cmd),
        LOG_S("cwd", req->cwd[0] ? req->cwd : "."),
        LOG_S("status", job_status_name(r->status)),
        LOG_I("exit_code", r->exit_code),
        r->signal ? LOG_I("signal", r->signal) : LOG_NULL("signal"),
        LOG_D("duration_ms", r->duration_ms),
        LOG_I("stdout_bytes", r->stdout_bytes),
        LOG_I("stderr_bytes", r->stderr_bytes),
    };
    size_t n = 10; /* then what there is of these: */
    if (queued_ms >= 0)
        f[n++] = LOG_D("queued_ms", queued_ms);
    if (client)
        f[n++] = LOG_S("client", client);
    log_event("info", mode == MX_BACKGROUND ? "process" : "exec", f, n);
}

/*
 * Admission. Past --max-running a command waits in a FIFO queue rather than being refused:
 * no agent-sandbox SDK retries a 429 (urllib3 and the Go client retry 5xx only), so a burst
 * the Python runtime queued would be errors. A slot freed is handed straight to the oldest
 * waiter (running never drops while someone waits), so a newcomer can never take it first.
 *
 * Each waiter is on its connection's thread, in one poll over an eventfd (the hand-over's
 * notice) and the client's socket (its hang-up: it leaves the queue at once, and no slot is
 * ever handed to a phantom). The drain wakes every waiter (exec_service_wake_all); its
 * flag is also looked at every ADMIT_TICK_MS.
 */

/* Why a command is refused while a reset is under way. */
#define RESETTING_MSG "sbxd is resetting the sandbox; retry in a moment"

/* One lock for every service's queue (a daemon has one service): held for a few list
 * operations at a time, never across a wait. */
static pthread_mutex_t admit_lock = PTHREAD_MUTEX_INITIALIZER;

/* How soon a waiter sees a drain begin (the front's stop flag). */
#define ADMIT_TICK_MS 100
/* Without an eventfd (none left: EMFILE) a waiter looks for its slot this often instead. */
#define ADMIT_POLL_MS 5

struct exec_waiter {
    struct exec_waiter *next;
    int efd;      /* written once the slot is its own; -1: none, it polls */
    bool granted; /* under admit_lock: exec_service_leave handed it a slot */
};

static void queue_push(struct exec_service *s, struct exec_waiter *w)
{
    w->next = NULL;
    if (s->wait_tail)
        s->wait_tail->next = w;
    else
        s->wait_head = w;
    s->wait_tail = w;
    s->waiting++;
    metrics_queue_enter();
}

/* Take w out of the queue (it is in it). */
static void queue_remove(struct exec_service *s, struct exec_waiter *w)
{
    struct exec_waiter *prev = NULL;
    for (struct exec_waiter *p = s->wait_head; p != w; p = p->next)
        prev = p;
    if (prev)
        prev->next = w->next;
    else
        s->wait_head = w->next;
    if (s->wait_tail == w)
        s->wait_tail = prev;
    s->waiting--;
}

/* Wait until w is handed a slot (0), or refuse (-1 with err, or a->gone). w is queued. */
static int queue_wait(struct exec_service *s, struct exec_waiter *w, struct exec_admit *a,
                      int64_t deadline_ns, struct sbxd_err *err)
{
    bool peek = true;
    for (;;) {
        struct pollfd pfd[2];
        nfds_t n = 0;
        if (w->efd >= 0)
            pfd[n++] = (struct pollfd){.fd = w->efd, .events = POLLIN};
        nfds_t client = n;
        if (a->client_fd >= 0)
            pfd[n++] =
                (struct pollfd){.fd = a->client_fd, .events = POLLRDHUP | (peek ? POLLIN : 0)};
        int tick = w->efd >= 0 ? ADMIT_TICK_MS : ADMIT_POLL_MS;
        int ms = time_ms_until(deadline_ns);
        int ready = poll(pfd, n, ms < tick ? ms : tick);
        if (ready < 0 && errno != EINTR)
            usleep(ADMIT_POLL_MS * 1000); /* (ENOMEM) no busy loop until it passes */
        uint64_t v;
        if (ready > 0 && w->efd >= 0 && pfd[0].revents && read(w->efd, &v, sizeof(v)) < 0) {
            /* nothing was there: the wake-up was taken already */
        }
        bool gone = ready > 0 && client < n && pfd[client].revents &&
                    job_client_gone(a->client_fd, pfd[client].revents, &peek);
        bool closed = __atomic_load_n(&s->closed, __ATOMIC_SEQ_CST);
        bool stop = closed || (a->stop && __atomic_load_n(a->stop, __ATOMIC_ACQUIRE));

        pthread_mutex_lock(&admit_lock);
        if (w->granted) {
            pthread_mutex_unlock(&admit_lock);
            if (!gone && !stop)
                return 0;
            /* Handed a slot it cannot use: on to the next waiter (at a drain, each in turn
             * is refused this way, and running stays above 0 until the last is). */
            exec_service_leave(s);
        } else if (gone || stop || time_ms_until(deadline_ns) == 0) {
            queue_remove(s, w);
            pthread_mutex_unlock(&admit_lock);
        } else {
            pthread_mutex_unlock(&admit_lock);
            continue;
        }
        if (gone) {
            a->gone = true;
            return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, "the client hung up while it waited");
        }
        if (stop && closed)
            return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, RESETTING_MSG);
        if (stop)
            return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0,
                             "sbxd is shutting down and takes no new commands");
        metrics_limit(LIM_QUEUE_TIMEOUT);
        return sbxd_fail(err, SBXD_E_BUSY, 0,
                         "waited %llu ms for one of the %llu running slots (--queue-timeout-ms, "
                         "--max-running); retry later",
                         (unsigned long long)s->cfg->queue_timeout_ms,
                         (unsigned long long)s->cfg->max_running);
    }
}

int exec_service_admit(struct exec_service *s, struct exec_admit *a, struct sbxd_err *err)
{
    a->queued_ms = 0;
    a->gone = false;
    if (__atomic_load_n(&s->closed, __ATOMIC_SEQ_CST))
        return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, RESETTING_MSG);
    int64_t t0 = time_mono_ns();
    pthread_mutex_lock(&admit_lock);
    if (!s->wait_head && __atomic_load_n(&s->running, __ATOMIC_RELAXED) < s->cfg->max_running) {
        __atomic_add_fetch(&s->running, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&admit_lock);
        return 0;
    }
    if (s->waiting >= s->cfg->max_queued) {
        unsigned waiting = s->waiting;
        pthread_mutex_unlock(&admit_lock);
        if (s->cfg->max_queued == 0) {
            metrics_limit(LIM_MAX_RUNNING);
            return sbxd_fail(err, SBXD_E_BUSY, 0,
                             "%llu commands are running already (--max-running; --max-queued "
                             "is 0, so none wait); retry later",
                             (unsigned long long)s->cfg->max_running);
        }
        metrics_limit(LIM_MAX_QUEUED);
        return sbxd_fail(err, SBXD_E_BUSY, 0,
                         "%llu commands are running and %u waiting already (--max-running, "
                         "--max-queued); retry later",
                         (unsigned long long)s->cfg->max_running, waiting);
    }
    /* The eventfd is made under the lock so that a slot freed meanwhile cannot be missed;
     * it is one quick system call, and only a command that must wait pays it. */
    struct exec_waiter w = {.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
    queue_push(s, &w);
    pthread_mutex_unlock(&admit_lock);

    int rc = queue_wait(s, &w, a, t0 + (int64_t)s->cfg->queue_timeout_ms * 1000000, err);
    if (w.efd >= 0)
        close(w.efd);
    a->queued_ms = (double)(time_mono_ns() - t0) / 1e6;
    metrics_queue_leave(a->queued_ms, a->gone);
    return rc;
}

void exec_service_wake_all(struct exec_service *s)
{
    pthread_mutex_lock(&admit_lock);
    for (struct exec_waiter *w = s->wait_head; w; w = w->next)
        if (w->efd >= 0) {
            uint64_t one = 1;
            (void)!write(w->efd, &one, sizeof(one));
        }
    pthread_mutex_unlock(&admit_lock);
}

void exec_service_leave(struct exec_service *s)
{
    pthread_mutex_lock(&admit_lock);
    struct exec_waiter *w = s->wait_head;
    if (w) {
        /* The slot passes to the oldest waiter as it is: running stays as it was. */
        s->wait_head = w->next;
        if (!s->wait_head)
            s->wait_tail = NULL;
        s->waiting--;
        w->granted = true;
        if (w->efd >= 0) {
            uint64_t one = 1;
            /* Cannot fail short of a full counter, which one write never makes. */
            (void)!write(w->efd, &one, sizeof(one));
        }
    } else {
        __atomic_sub_fetch(&s->running, 1, __ATOMIC_ACQ_REL);
    }
    pthread_mutex_unlock(&admit_lock);
}

unsigned exec_service_running(const struct exec_service *s)
{
    return __atomic_load_n(&s->running, __ATOMIC_ACQUIRE);
}

unsigned exec_service_starting(const struct exec_service *s)
{
    return __atomic_load_n(&s->starting, __ATOMIC_ACQUIRE);
}

/*
 * A start begins: counted in `starting`, then the gate looked at. The reset closes the gate,
 * then waits for `starting` to be 0 (exec_service_close); with both sides sequentially
 * consistent, either the start sees the gate closed, or the reset sees the start and waits
 * for its job to exist. false with err (the count given back) when closed.
 */
static bool start_begin(struct exec_service *s, struct sbxd_err *err)
{
    __atomic_add_fetch(&s->starting, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&s->closed, __ATOMIC_SEQ_CST))
        return true;
    __atomic_sub_fetch(&s->starting, 1, __ATOMIC_SEQ_CST);
    sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, RESETTING_MSG);
    return false;
}

void exec_service_close(struct exec_service *s)
{
    __atomic_store_n(&s->closed, true, __ATOMIC_SEQ_CST);
    exec_service_wake_all(s);
    while (__atomic_load_n(&s->starting, __ATOMIC_SEQ_CST) > 0)
        usleep(1000);
}

void exec_service_open(struct exec_service *s)
{
    __atomic_store_n(&s->closed, false, __ATOMIC_SEQ_CST);
}

struct job *exec_service_start(struct exec_service *s, enum metrics_mode mode,
                               const struct exec_request *req, int cancel_fd, struct sbxd_err *err)
{
    struct job_env env = exec_service_env(s, mode, cancel_fd);
    if (!start_begin(s, err))
        return NULL;
    struct job *job = job_start(req, &env, err);
    __atomic_sub_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    if (!job)
        metrics_start_failed(req->front, mode);
    return job;
}

struct bg_proc *exec_service_start_process(struct exec_service *s, struct exec_request *req,
                                           struct sbxd_err *err)
{
    struct job_env env = exec_service_env(s, MX_BACKGROUND, -1);
    enum exec_front front = req->front; /* req is bg_start's from here */
    if (!start_begin(s, err)) {
        exec_request_free(req);
        return NULL;
    }
    struct bg_proc *p = bg_start(req, &env, err);
    __atomic_sub_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    /* --max-processes is the one refusal without a system error behind it. */
    if (!p && err->kind == SBXD_E_BUSY && err->sys_errno == 0)
        metrics_limit(LIM_MAX_PROCESSES);
    else if (!p)
        metrics_start_failed(front, MX_BACKGROUND);
    return p;
}

struct bg_proc *exec_service_start_owned(struct exec_service *s, struct exec_request *req,
                                         int stdin_file, const char *start_dir,
                                         struct sbxd_err *err)
{
    struct job_env env = exec_service_env(s, MX_BACKGROUND, -1);
    env.stdin_file = stdin_file;
    env.start_dir = start_dir;
    enum exec_front front = req->front;
    if (!start_begin(s, err)) {
        exec_request_free(req);
        return NULL;
    }
    struct bg_proc *p = bg_start_owned(req, &env, err);
    __atomic_sub_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    if (!p)
        metrics_start_failed(front, MX_BACKGROUND);
    return p;
}

void exec_service_collect(struct job *job, struct outbuf *out, struct outbuf *errb)
{
    char buf[SBXD_READ_CHUNK];
    struct job_event ev;
    do {
        job_step(job, -1, buf, sizeof(buf), &ev);
        if (ev.type == JOB_EV_OUTPUT)
            outbuf_append(ev.stream == 1 ? out : errb, buf, ev.len);
    } while (ev.type != JOB_EV_EXIT);
}

/* One stream's sentence of the notice, at o (room: n); its length. */
static size_t cut_sentence(char *o, size_t n, const char *name, const struct outbuf *ob,
                           const char *why_cap)
{
    int k = snprintf(o, n, "[sbxd] %s cut: %llu of %llu bytes left out (%s)\n", name,
                     (unsigned long long)(ob->total - ob->len), (unsigned long long)ob->total,
                     ob->starved ? "the output memory sbxd shares among running commands, "
                                   "--output-memory-bytes, was in use"
                                 : why_cap);
    return k < 0 ? 0 : (size_t)k < n ? (size_t)k : n - 1;
}

void exec_output_notice(struct outbuf *out, struct outbuf *errb, const char *why_cap)
{
    bool cut_out = outbuf_truncated(out), cut_err = outbuf_truncated(errb);
    if (!cut_out && !cut_err)
        return;
    /* A head cut inside a character ends on a whole one: the notice that follows must not
     * turn the cut-off bytes into a replacement character, or be read as their rest. */
    if (cut_out)
        out->len = utf8_whole(out->data, out->len);
    if (cut_err)
        errb->len = utf8_whole(errb->data, errb->len);
    char text[EXEC_NOTICE_MAX];
    size_t n = 0;
    if (errb->len && errb->data[errb->len - 1] != '\n')
        text[n++] = '\n'; /* the notice is a line of its own */
    if (cut_out)
        n += cut_sentence(text + n, sizeof(text) - n, "stdout", out, why_cap);
    if (cut_err)
        n += cut_sentence(text + n, sizeof(text) - n, "stderr", errb, why_cap);
    (void)outbuf_note(errb, text, n); /* out of memory: the face's flags still say it */
}

void exec_service_held(size_t bytes)
{
    spawn_note_daemon_peak(bytes);
}
