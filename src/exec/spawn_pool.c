/*
 * Namespace slots: PID namespaces (each with its mount table and its own /proc) whose init
 * lives on and serves one command after another. Making a namespace, its mounts, an init
 * and its exit for every command cost about 0.5x the fork+exec floor here; a slot pays that
 * once, and a command pays three setns calls and a small filter.
 *
 * The spawning thread enters the slot's PID namespace for the children it creates
 * (setns(CLONE_NEWPID) changes only that), clones the command exactly as it clones any
 * (so the daemon is its parent and reaps it), and goes back to its own. The command joins
 * the slot's mount namespace itself. Whatever it leaves behind (a double fork, a setsid)
 * is re-parented to the slot's init, pid 1 there, which reaps it; when the command is over,
 * the daemon asks the init (SIGUSR1) to empty the namespace: kill(-1) from there reaches
 * every process in it and nothing outside, atomically with respect to fork. Only then is the
 * slot handed out again.
 *
 * The init shares the daemon's memory (its words below are how they talk) and is made by
 * the pool's thread, with whose end it ends (PR_SET_PDEATHSIG): a daemon that dies leaves
 * no init behind.
 *
 * Callers: main.c starts and stops the pool; spawn_child (spawn.c) takes a slot and enters it
 * (spawn_slot_enter, spawn_slot_leave); contain_pidns.c ends, signals and puts back the slot.
 * A slot is handed out only idle: alive, not held, and emptied after its last command.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/exec_limits.h"
#include "sbxd/resolve.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"
#include "spawn_internal.h"

enum { SLOT_STARTING, SLOT_READY, SLOT_FAILED };

static const struct harden_plan *slot_harden; /* what the pool and its inits load */
static int self_pidns_fd = -1;                /* where spawning threads go back to */
static char slot_workspace[PATH_MAX];         /* the workspace root's absolute path ... */
static struct stat slot_workspace_st;         /* ... and what it is */
static __thread bool ns_stuck;                /* this thread's setns back failed */

struct spawn_ns_slot {
    struct spawn_ns_slot *next;
    char *stack; /* the init's stack (mmap), with a guard page */
    size_t stack_len;
    pid_t pid;    /* the init, in the daemon's namespace */
    pid_t tid;    /* CLONE_CHILD_CLEARTID: 0 once the init is gone */
    int state;    /* SLOT_*, set by the init at start */
    int pidns_fd; /* its namespaces, for setns */
    int mntns_fd;
    int wsfd;        /* the workspace root as its mount namespace sees it (O_PATH) */
    bool held;       /* a job has it (under the pool's lock) */
    bool retired;    /* its init was told to end (trimmed after a burst) */
    int64_t used_ms; /* when it was last handed out (monotonic) */
    unsigned use;    /* counts the commands it was handed (under the pool's lock) */
    unsigned end;    /* the daemon: empty the namespace after command number `end` */
    unsigned clean;  /* the init: emptied after command number `clean` */
};

/* The slot's init. Signals are blocked (inherited from the pool's thread): SIGCHLD (an
 * orphan to reap) and SIGUSR1 (empty the namespace) are taken with rt_sigtimedwait. */
NO_SANITIZE static int slot_init_main(void *arg)
{
    struct spawn_ns_slot *sl = arg;
    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    const char *step = NULL;
    spawn_close_span(0, ~0U); /* nothing of the daemon's */
    if (spawn_ns_prepare(slot_harden, &step) < 0) {
        __atomic_store_n(&sl->state, SLOT_FAILED, __ATOMIC_RELEASE);
        syscall(SYS_futex, &sl->state, FUTEX_WAKE, 1, NULL, NULL, 0);
        syscall(SYS_exit_group, 1);
    }
    __atomic_store_n(&sl->state, SLOT_READY, __ATOMIC_RELEASE);
    syscall(SYS_futex, &sl->state, FUTEX_WAKE, 1, NULL, NULL, 0);
    uint64_t waitset =
        (1ULL << (SIGCHLD - 1)) | (1ULL << (SIGUSR1 - 1)) | (1ULL << (SBXD_NS_SIGNAL - 1));
    for (;;) {
        siginfo_t si;
        if (syscall(SYS_rt_sigtimedwait, &waitset, &si, NULL, 8) == SBXD_NS_SIGNAL &&
            si.si_code == SI_QUEUE) {
            /* A signal for every process of command number `use`: unless that one is over
             * (then the namespace may hold the next command already). */
            uintptr_t v = (uintptr_t)si.si_value.sival_ptr;
            if ((unsigned)(v >> 8) > __atomic_load_n(&sl->clean, __ATOMIC_ACQUIRE))
                syscall(SYS_kill, -1, (int)(v & 0xff));
        }
        int st;
        while (syscall(SYS_wait4, -1, &st, WNOHANG, NULL) > 0) {
        }
        unsigned end = __atomic_load_n(&sl->end, __ATOMIC_ACQUIRE);
        if (end == __atomic_load_n(&sl->clean, __ATOMIC_ACQUIRE))
            continue;
        /* The command is over: nothing of it may outlive it. (Errors are not read: errno
         * here is the pool thread's. Signals are blocked, so wait4 ends only in ECHILD.) */
        syscall(SYS_kill, -1, SIGKILL);
        while (syscall(SYS_wait4, -1, &st, 0, NULL) > 0) {
        }
        __atomic_store_n(&sl->clean, end, __ATOMIC_RELEASE);
    }
    return 0;
}

/* The slots, and the thread that makes them (their inits' parent, whose end is theirs). */
#define SLOT_SPARE   2     /* idle slots kept ready */
#define SLOT_IDLE_MS 30000 /* beyond the spare ones, an idle slot's init ends after this */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* the pool's thread: make slots */
    pthread_cond_t ready; /* claimers: a slot may be free */
    pthread_t thread;
    bool running, stop;
    unsigned max; /* most slots at once */
    unsigned waiting;
    struct spawn_ns_slot *all;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .ready = PTHREAD_COND_INITIALIZER};

static bool slot_alive(struct spawn_ns_slot *sl)
{
    return __atomic_load_n(&sl->tid, __ATOMIC_ACQUIRE) != 0 &&
           __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) == SLOT_READY;
}

/* Idle: alive, not held, and emptied after its last command. Under the pool's lock. */
static bool slot_idle(struct spawn_ns_slot *sl)
{
    return !sl->held && !sl->retired && slot_alive(sl) &&
           __atomic_load_n(&sl->clean, __ATOMIC_ACQUIRE) == sl->use;
}

static int64_t mono_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void close_fd_if(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Make one slot (on the pool's thread). Under the pool's lock, which it drops meanwhile. */
static bool slot_make(void)
{
    struct spawn_ns_slot *sl = NULL;
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next)
        if (!c->held && __atomic_load_n(&c->tid, __ATOMIC_ACQUIRE) == 0)
            sl = c; /* a dead one: its memory serves again */
    if (!sl) {
        sl = calloc(1, sizeof(*sl));
        if (!sl)
            return false;
        sl->stack_len = SBXD_NS_INIT_STACK;
        sl->stack = mmap(NULL, sl->stack_len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
        if (sl->stack == MAP_FAILED || mprotect(sl->stack, 4096, PROT_NONE) < 0) {
            if (sl->stack != MAP_FAILED)
                munmap(sl->stack, sl->stack_len);
            free(sl);
            return false;
        }
        sl->pidns_fd = sl->mntns_fd = sl->wsfd = -1;
        sl->next = pool.all;
        pool.all = sl;
    }
    close_fd_if(&sl->pidns_fd);
    close_fd_if(&sl->mntns_fd);
    close_fd_if(&sl->wsfd);
    sl->held = true; /* not handed out while it starts */
    sl->retired = false;
    sl->state = SLOT_STARTING;
    sl->use = sl->end = sl->clean = 0;
    __atomic_store_n(&sl->tid, -1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&pool.lock);
    int pid = clone(slot_init_main, sl->stack + sl->stack_len,
                    (int)(CLONE_VM | spawn_ns_clone_flags() | CLONE_CHILD_CLEARTID | SIGCHLD), sl,
                    NULL, NULL, &sl->tid);
    if (pid < 0)
        __atomic_store_n(&sl->tid, 0, __ATOMIC_RELEASE);
    else
        sl->pid = pid;
    while (pid > 0 && __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) == SLOT_STARTING &&
           __atomic_load_n(&sl->tid, __ATOMIC_ACQUIRE) != 0) {
        struct timespec ts = {0, 5 * 1000000};
        syscall(SYS_futex, &sl->state, FUTEX_WAIT, SLOT_STARTING, &ts, NULL, 0);
    }
    bool ok = pid > 0 && slot_alive(sl);
    if (ok) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/pid", pid);
        sl->pidns_fd = open(path, O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/proc/%d/ns/mnt", pid);
        sl->mntns_fd = open(path, O_RDONLY | O_CLOEXEC);
        /* A command's working directory must be one of the namespace's own mounts: a cwd
         * handed over from the daemon's namespace makes everything it runs slower
         * (measured: ~0.1x the floor). The same directory, checked to be. */
        char wpath[PATH_MAX + 32];
        snprintf(wpath, sizeof(wpath), "/proc/%d/root%s", pid, slot_workspace);
        sl->wsfd = open(wpath, O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (sl->wsfd >= 0 && (fstat(sl->wsfd, &st) < 0 || st.st_dev != slot_workspace_st.st_dev ||
                              st.st_ino != slot_workspace_st.st_ino))
            close_fd_if(&sl->wsfd);
        if (sl->pidns_fd < 0 || sl->mntns_fd < 0 || sl->wsfd < 0) {
            kill(pid, SIGKILL);
            ok = false;
        }
    }
    pthread_mutex_lock(&pool.lock);
    sl->held = false;
    sl->used_ms = mono_ms();
    if (!ok)
        sl->retired = true;
    return ok;
}

static unsigned slots_idle(void)
{
    unsigned n = 0;
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next)
        n += slot_idle(c);
    return n;
}

static unsigned slots_alive(void)
{
    unsigned n = 0;
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next)
        n += __atomic_load_n(&c->tid, __ATOMIC_ACQUIRE) != 0;
    return n;
}

/* After a burst: end the init of every slot idle for long, keeping the spare ones. Its
 * namespace is empty; the slot's memory serves again once the init is gone. */
static void slots_trim(void)
{
    unsigned idle = slots_idle();
    int64_t old = mono_ms() - SLOT_IDLE_MS;
    for (struct spawn_ns_slot *c = pool.all; c && idle > SLOT_SPARE; c = c->next)
        if (slot_idle(c) && c->used_ms < old) {
            c->retired = true;
            kill(c->pid, SIGKILL);
            idle--;
        }
}

/* A slot whose init has ended holds its namespaces open through its descriptors until the
 * memory serves again: close them now, so an ended slot keeps neither descriptors nor the
 * kernel's namespace objects. Under the pool's lock. */
static void slots_release(void)
{
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next)
        if (!c->held && __atomic_load_n(&c->tid, __ATOMIC_ACQUIRE) == 0) {
            close_fd_if(&c->pidns_fd);
            close_fd_if(&c->mntns_fd);
            close_fd_if(&c->wsfd);
        }
}

/* Slots retired whose init has not ended yet, or ended with descriptors still open. Under the
 * pool's lock. */
static bool slots_ending(void)
{
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next)
        if (!c->held && (c->retired || __atomic_load_n(&c->tid, __ATOMIC_ACQUIRE) == 0) &&
            (c->pidns_fd >= 0 || c->mntns_fd >= 0 || c->wsfd >= 0))
            return true;
    return false;
}

static void *pool_main(void *arg)
{
    (void)arg;
    struct sbxd_err err = {0};
    /* The inits inherit this thread's filter (and load the rest themselves). */
    if (harden_thread(slot_harden, &err) < 0) {
        pthread_mutex_lock(&pool.lock);
        pool.stop = true;
        pthread_cond_broadcast(&pool.ready);
        pthread_mutex_unlock(&pool.lock);
        return NULL;
    }
    /* Blocked here, so blocked in every init from the start. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SBXD_NS_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_mutex_lock(&pool.lock);
    while (!pool.stop) {
        bool failed = false;
        while (!pool.stop && (slots_idle() < SLOT_SPARE || pool.waiting) &&
               slots_alive() < pool.max) {
            if (!slot_make()) {
                failed = true;
                break;
            }
            pthread_cond_broadcast(&pool.ready);
        }
        if (pool.stop)
            break;
        slots_trim();
        slots_release();
        /* Slots become idle again unannounced: while a claimer waits, or an ended slot's
         * descriptors wait to be closed, look again soon. Else a claim that leaves too few
         * spare wakes this thread, and only the trim (after SLOT_IDLE_MS) needs a tick: an
         * idle daemon is not woken 50 times a second. */
        struct timespec ts = time_after_ms(CLOCK_REALTIME, failed                           ? 1000
                                                           : pool.waiting || slots_ending() ? 20
                                                                                            : 1000);
        pthread_cond_timedwait(&pool.wake, &pool.lock, &ts);
        pthread_cond_broadcast(&pool.ready);
    }
    pthread_cond_broadcast(&pool.ready);
    pthread_mutex_unlock(&pool.lock);
    return NULL; /* every init gets SIGKILL now (PR_SET_PDEATHSIG) */
}

void spawn_pool_start(const struct harden_plan *h, unsigned max_running, int rootfd,
                      const char *workspace)
{
    /* Only where children share our memory, and only for a daemon that may enter the
     * slots' namespaces (not one that needs a user namespace for them). */
    if (!spawn_peak_resets() || spawn_ns_userns() || pool.running ||
        fstat(rootfd, &slot_workspace_st) < 0 || strlen(workspace) >= sizeof(slot_workspace))
        return;
    snprintf(slot_workspace, sizeof(slot_workspace), "%s", workspace);
    self_pidns_fd = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (self_pidns_fd < 0)
        return;
    slot_harden = h;
    pool.stop = false;
    pool.max = max_running + SLOT_SPARE;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pool.running = pthread_create(&pool.thread, &attr, pool_main, NULL) == 0;
    pthread_attr_destroy(&attr);
}

void spawn_pool_stop(void)
{
    if (!pool.running)
        return;
    pthread_mutex_lock(&pool.lock);
    pool.stop = true;
    pthread_cond_signal(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    pthread_join(pool.thread, NULL);
    pool.running = false;
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next) {
        close_fd_if(&c->pidns_fd);
        close_fd_if(&c->mntns_fd);
        close_fd_if(&c->wsfd);
    }
}

bool spawn_ns_slots(void)
{
    return pool.running;
}

/* An idle slot for a command, waiting (bounded) while all are busy. NULL: none to be had. */
static struct spawn_ns_slot *slot_take(unsigned *use)
{
    struct spawn_ns_slot *sl = NULL;
    int64_t give_up = mono_ms() + 5000;
    pthread_mutex_lock(&pool.lock);
    while (!pool.stop) {
        for (struct spawn_ns_slot *c = pool.all; c && !sl; c = c->next)
            if (slot_idle(c))
                sl = c;
        if (sl || mono_ms() >= give_up)
            break;
        pool.waiting++;
        pthread_cond_signal(&pool.wake);
        struct timespec ts = time_after_ms(CLOCK_REALTIME, 2);
        pthread_cond_timedwait(&pool.ready, &pool.lock, &ts);
        pool.waiting--;
    }
    if (sl) {
        sl->held = true;
        sl->used_ms = mono_ms();
        *use = ++sl->use;
        if (slots_idle() < SLOT_SPARE)
            pthread_cond_signal(&pool.wake);
    }
    pthread_mutex_unlock(&pool.lock);
    return sl;
}

void spawn_ns_end(struct spawn_ns_slot *sl, unsigned use)
{
    __atomic_store_n(&sl->end, use, __ATOMIC_RELEASE);
    /* The init lives while its slot is held (were it gone, its pid is not reused before the
     * reaper collects it, and then tid is 0 already). */
    if (__atomic_load_n(&sl->tid, __ATOMIC_ACQUIRE) != 0)
        kill(sl->pid, SIGUSR1);
}

/* The daemon's request travels as a queued real-time signal whose value names the signal
 * (and, for a slot, the command): the init, pid 1 of the namespace, sends it with kill(-1),
 * which reaches every process there but itself at once, forks in flight included. */
void spawn_ns_signal(struct spawn_ns_slot *sl, unsigned use, int sig)
{
    union sigval v = {.sival_ptr = (void *)(((uintptr_t)use << 8) | (uintptr_t)(sig & 0xff))};
    if (__atomic_load_n(&sl->tid, __ATOMIC_ACQUIRE) != 0)
        sigqueue(sl->pid, SBXD_NS_SIGNAL, v);
}

void spawn_ns_put(struct spawn_ns_slot *sl)
{
    pthread_mutex_lock(&pool.lock);
    sl->held = false;
    pthread_mutex_unlock(&pool.lock);
}

bool spawn_slot_stuck(void)
{
    return ns_stuck;
}

/* Into a namespace slot: its PID namespace for the child spawn_child clones next, its mount
 * namespace joined by the child (slot_spec->ns_mnt_fd). */
int spawn_slot_enter(const struct spawn_spec *spec, struct spawn_spec *slot_spec, int *slot_cwd,
                     struct sbxd_err *err)
{
    unsigned use;
    struct spawn_ns_slot *slot = slot_take(&use);
    if (!slot)
        return sbxd_fail(err, SBXD_E_BUSY, EAGAIN, "no PID namespace is free; retry later");
    if (syscall(SYS_setns, slot->pidns_fd, CLONE_NEWPID) < 0) {
        int e = errno;
        spawn_ns_put(slot);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot enter a PID namespace");
    }
    *slot_spec = *spec;
    slot_spec->ns_mnt_fd = slot->mntns_fd;
    slot_spec->cwd_fd = slot->wsfd;
    if (spec->cwd_path && spec->cwd_path[0]) {
        *slot_cwd = fs_resolve_beneath(slot->wsfd, spec->cwd_path, FS_RESOLVE_DIRECTORY, err);
        if (*slot_cwd < 0) {
            if (syscall(SYS_setns, self_pidns_fd, CLONE_NEWPID) < 0)
                ns_stuck = true;
            spawn_ns_put(slot);
            return -1;
        }
        slot_spec->cwd_fd = *slot_cwd;
    }
    *spec->ns_slot = slot;
    *spec->ns_seq = use;
    return 0;
}

void spawn_slot_leave(const struct spawn_spec *spec, int slot_cwd, pid_t pid)
{
    /* Back to our own namespace for the children this thread makes next. Should that
     * ever fail, this thread must not spawn again: its children would land there. */
    if (syscall(SYS_setns, self_pidns_fd, CLONE_NEWPID) < 0)
        ns_stuck = true;
    if (slot_cwd >= 0)
        close(slot_cwd);
    if (pid < 0) {
        spawn_ns_put(*spec->ns_slot);
        *spec->ns_slot = NULL;
    }
}
