/*
 * job_kill.c - kills and signals a job's tree by the backend in force (contain.h), and the
 * deadline keeper.
 *
 * The keeper is the one place a job's deadline is enforced, the spawn deadline and the
 * command's timeout alike: a thread that sleeps until the earliest deadline armed and kills
 * every job then due, whether or not anybody drives the job (a streamed answer whose client
 * reads nothing waits in libmicrohttpd, not in job_step). It kills under the reaper's lock
 * with the job's process seen unreaped, so nothing the owner releases after the reap (the
 * cgroup leaf, the uid, the namespace slot) is touched; a job leaves the reaper's list before
 * it is freed, so the keeper never sees freed memory. Lock order: keeper, then reaper.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_internal.h"
#include "sbxd/limits.h"
#include "sbxd/timeutil.h"

/* reaper_locked: the caller holds the reaper's lock and has seen the target unreaped. The
 * backend reaches what left the group too (contain.h). */
void job_kill_tree(struct job *job, bool reaper_locked)
{
    job->box.ops->kill(&job->box, &job->rt, reaper_locked,
                       __atomic_load_n(&job->spawning, __ATOMIC_ACQUIRE));
}

static void set_reason(struct job *job, enum job_kill_reason why)
{
    int none = JOB_KILL_NONE;
    __atomic_compare_exchange_n(&job->kill_reason, &none, (int)why, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

void job_kill_own(struct job *job, enum job_kill_reason why)
{
    set_reason(job, why);
    job_kill_tree(job, false);
}

/* Under the reaper's lock (reaper_call, reaper_foreach): must not take it again. */
static void kill_live(struct reap_target *t, void *arg)
{
    if (!t->reaped) {
        set_reason((struct job *)t, (enum job_kill_reason)(intptr_t)arg);
        job_kill_tree((struct job *)t, true);
    }
}

struct kill_all {
    enum job_kill_reason why;
    unsigned n;
};

static void kill_each(struct reap_target *t, void *arg)
{
    struct kill_all *k = arg;
    k->n += !t->reaped;
    kill_live(t, (void *)(intptr_t)k->why);
}

static void count_live(struct reap_target *t, void *arg)
{
    *(unsigned *)arg += !t->reaped;
}

/* From any thread: under the reaper's lock, and only while the job's process is not reaped.
 * What is left after that dies with the job's end anyway. */
void job_kill(struct job *job, enum job_kill_reason why)
{
    reaper_call(&job->rt, kill_live, (void *)(intptr_t)why);
}

unsigned job_kill_all(enum job_kill_reason why)
{
    struct kill_all k = {.why = why};
    reaper_foreach(kill_each, &k);
    return k.n;
}

unsigned job_live(void)
{
    unsigned n = 0;
    reaper_foreach(count_live, &n);
    return n;
}

struct signal_req {
    int sig;
    int err; /* 0 once sent; else why not (ESRCH: the process has exited) */
};

/*
 * Whether pid (unreaped, so still ours) has exited: a zombie until its owner or the reaper
 * collects it. /proc says so even while only a tracer may see the exit; without /proc,
 * waitid with WNOWAIT looks without reaping (the reap stays the owner's; __WALL because a
 * command cloned without an exit signal is a "clone" child).
 */
static bool exited(pid_t pid)
{
    char path[32], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n > 0) {
        buf[n] = '\0';
        const char *paren = strrchr(buf, ')'); /* the name may hold anything, ')' too */
        if (paren && paren[1] == ' ')
            return paren[2] == 'Z' || paren[2] == 'X';
    }
    siginfo_t si = {0};
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT | __WALL) == 0 &&
           si.si_pid == pid;
}

/* Under the reaper's lock, the job's process unreaped: sig to every process of the tree. */
static void signal_cb(struct reap_target *t, void *arg)
{
    struct job *job = (struct job *)t;
    struct signal_req *s = arg;
    pid_t pid = __atomic_load_n(&job->rt.pid, __ATOMIC_ACQUIRE);
    /* Unreaped is not running: the kernel takes a signal for a zombie (or a group of one)
     * with success while nothing receives it. */
    if (exited(pid)) {
        s->err = ESRCH;
        return;
    }
    /* Whether the kernel lets sbxd signal the process at all: a refusal (EPERM) is said,
     * never answered as a signal sent. */
    if (kill(pid, 0) < 0) {
        s->err = errno;
        return;
    }
    job->box.ops->signal(&job->box, pid, s->sig);
    s->err = 0;
}

/* false with errno: ESRCH when the process has exited (reaped or not), else the kernel's
 * refusal (EPERM). */
bool job_signal(struct job *job, int sig)
{
    struct signal_req s = {.sig = sig, .err = ESRCH}; /* reaped: the callback never runs */
    reaper_call(&job->rt, signal_cb, &s);
    errno = s.err;
    return s.err == 0;
}

/* ------------------------------------------------------------------------------------ */
/* The deadline keeper.                                                                  */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    int64_t next;        /* the earliest deadline armed since the last sweep; 0: none */
    bool started, stop;
    pthread_t thread;
} keeper = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct sweep {
    int64_t now, next;
};

/* Under the reaper's lock: kill the job if its deadline passed; note when it is due. */
static void sweep_one(struct reap_target *t, void *arg)
{
    struct job *job = (struct job *)t;
    struct sweep *s = arg;
    int64_t due = __atomic_load_n(&job->deadline_ns, __ATOMIC_ACQUIRE);
    if (t->reaped || due == 0)
        return;
    if (s->now >= due) {
        /* Still in spawn at the spawn deadline (SBXD_SPAWN_DEADLINE_MS): stopped before
         * exec. Else its timeout, however far it got (a loaded machine may take longer than
         * a short timeout to exec). */
        bool stuck = __atomic_load_n(&job->spawning, __ATOMIC_ACQUIRE) && !job->spawn_is_timeout;
        set_reason(job, stuck ? JOB_KILL_SPAWN : JOB_KILL_TIMEOUT);
        job_kill_tree(job, true);
        /* Again a second later, should this one not take. */
        due = s->now + 1000000000LL;
        __atomic_store_n(&job->deadline_ns, due, __ATOMIC_RELEASE);
    }
    if (!s->next || due < s->next)
        s->next = due;
}

static void *keeper_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&keeper.lock);
    while (!keeper.stop) {
        int64_t now = time_mono_ns();
        if (keeper.next && now >= keeper.next) {
            keeper.next = 0;
            pthread_mutex_unlock(&keeper.lock);
            struct sweep s = {.now = now};
            reaper_foreach(sweep_one, &s);
            pthread_mutex_lock(&keeper.lock);
            if (s.next && (!keeper.next || s.next < keeper.next))
                keeper.next = s.next;
            continue;
        }
        if (keeper.next) {
            struct timespec at = time_mono_timespec(keeper.next);
            pthread_cond_timedwait(&keeper.cond, &keeper.lock, &at);
        } else {
            pthread_cond_wait(&keeper.cond, &keeper.lock);
        }
    }
    pthread_mutex_unlock(&keeper.lock);
    return NULL;
}

int job_keeper_start(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&keeper.cond, &ca);
    pthread_condattr_destroy(&ca);
    keeper.stop = false;
    keeper.next = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
    /* Signals stay with the main thread (SIGCHLD above all: sigtimedwait there). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&keeper.thread, &attr, keeper_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_cond_destroy(&keeper.cond);
        errno = rc;
        return -1;
    }
    pthread_mutex_lock(&keeper.lock);
    keeper.started = true; /* read under the lock by job_deadline_arm */
    pthread_mutex_unlock(&keeper.lock);
    return 0;
}

void job_keeper_stop(void)
{
    if (!keeper.started)
        return;
    pthread_mutex_lock(&keeper.lock);
    keeper.stop = true;
    keeper.started = false; /* no arm signals the condition variable from here on */
    pthread_cond_signal(&keeper.cond);
    pthread_mutex_unlock(&keeper.lock);
    pthread_join(keeper.thread, NULL);
    pthread_cond_destroy(&keeper.cond);
}

void job_deadline_arm(struct job *job, int64_t at_ns)
{
    __atomic_store_n(&job->deadline_ns, at_ns, __ATOMIC_RELEASE);
    pthread_mutex_lock(&keeper.lock);
    if (!keeper.next || at_ns < keeper.next) {
        keeper.next = at_ns;
        if (keeper.started)
            pthread_cond_signal(&keeper.cond);
    }
    pthread_mutex_unlock(&keeper.lock);
}

void job_deadline_disarm(struct job *job)
{
    __atomic_store_n(&job->deadline_ns, 0, __ATOMIC_RELEASE);
}
