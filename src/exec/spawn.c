#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/limits.h"
#include "sbxd/spawn.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* What the child reports back through the memory it shares with its parent until execve. */
struct child_ctx {
    const struct spawn_spec *spec;
    int err;
    const char *step;
    int report_fd; /* without CLONE_VM: where err and step are written instead, else -1 */
};

/* What a child without shared memory reports on the pipe (the step names are string
 * literals, at the same address in the child's copy of the binary as in the parent). */
struct child_report {
    int err;
    const char *step;
};

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

/* Signals whose disposition is SIG_IGN in the daemon (bit sig-1): these survive execve and
 * must be reset in the child. All of them until spawn_init() has looked. */
static uint64_t ignored_signals = ~0ULL;

/* Whether children share the daemon's memory until execve (fast, see spawn.h). Only where
 * the daemon's peak RSS can be reset: otherwise every command's memory_peak_bytes would
 * carry the daemon's all-time peak, so without clear_refs (gVisor) children get a copy. */
static bool share_vm;

/* /proc/self/clear_refs, kept open, and whether the daemon's peak RSS may have grown since
 * it was last reset: see reset_peak_if_grown. */
static int clear_refs_fd = -1;
static int peak_stale = 1;

/*
 * At execve the kernel folds the outgoing mm's peak RSS into the child's maxrss, and a CLONE_VM
 * child's outgoing mm is the daemon's. So once one large request has raised the daemon's peak,
 * every later command would report it as its own memory_peak_bytes. Whoever makes the daemon
 * hold a lot of memory for a while says so (spawn_note_daemon_peak), and the next spawn resets
 * the peak to the current size (value 5 of clear_refs). The reset takes the mm's write lock,
 * so it is done only then, not on every spawn. (Best effort: gVisor has no clear_refs.)
 */
static void reset_peak_if_grown(void)
{
    if (clear_refs_fd < 0 || !__atomic_exchange_n(&peak_stale, 0, __ATOMIC_ACQ_REL))
        return;
    if (write(clear_refs_fd, "5", 1) < 0) {
        close(clear_refs_fd);
        clear_refs_fd = -1;
    }
}

void spawn_note_daemon_peak(size_t bytes)
{
    if (bytes >= (size_t)SBXD_PEAK_SLACK_KB * 1024)
        __atomic_store_n(&peak_stale, 1, __ATOMIC_RELEASE);
}

void spawn_init(void)
{
    clear_refs_fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    share_vm = clear_refs_fd >= 0 && write(clear_refs_fd, "5", 1) == 1;
    uint64_t mask = 0;
    for (int sig = 1; sig < 65; sig++) {
        struct sigaction sa;
        if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &sa) == 0 &&
            sa.sa_handler == SIG_IGN)
            mask |= 1ULL << (sig - 1);
    }
    ignored_signals = mask;
}

/* close_range over [lo, hi], with gVisor's limit: it refuses ~0U (EINVAL) but takes INT_MAX. */
NO_SANITIZE static int close_span(unsigned lo, unsigned hi)
{
    if (lo > hi)
        return 0;
    if (syscall(SYS_close_range, lo, hi, 0U) == 0)
        return 0;
    return hi == ~0U ? (int)syscall(SYS_close_range, lo, 0x7fffffffU, 0U) : -1;
}

/* Close every fd from 3 up but keep (-1: none). close_range is missing in older kernels and
 * gVisor releases; then walk /proc/self/fd with getdents64 (no malloc), and as a last resort
 * close blindly. */
NO_SANITIZE static int close_from_3(int keep)
{
    if (keep < 3
            ? close_span(3, ~0U) == 0
            : close_span(3, (unsigned)keep - 1) == 0 && close_span((unsigned)keep + 1, ~0U) == 0)
        return 0;
    int dfd =
        (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        char buf[4096];
        for (;;) {
            long n = syscall(SYS_getdents64, dfd, buf, sizeof(buf));
            if (n <= 0)
                break;
            for (long off = 0; off < n;) {
                struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
                off += d->d_reclen;
                int fd = 0;
                const char *p = d->d_name;
                if (*p < '0' || *p > '9')
                    continue;
                for (; *p >= '0' && *p <= '9'; p++)
                    fd = fd * 10 + (*p - '0');
                if (fd > 2 && fd != dfd && fd != keep)
                    syscall(SYS_close, fd);
            }
        }
        syscall(SYS_close, dfd);
        return 0;
    }
    for (int fd = 3; fd < 65536; fd++)
        if (fd != keep)
            syscall(SYS_close, fd);
    return 0;
}

/*
 * The child, between clone and execve. It runs on a borrowed stack in the parent's memory,
 * so: raw syscalls only, no malloc, no locks, no stdio, no errno-dependent libc paths, and
 * no sanitizer instrumentation (its shadow state belongs to the parent thread).
 */
NO_SANITIZE static int child_main(void *arg)
{
    struct child_ctx *c = arg;
    const struct spawn_spec *s = c->spec;

    /* Own session and process group: a group kill then reaches every descendant that does
     * not leave the group itself, and no terminal signal of the daemon's reaches us. */
    if (syscall(SYS_setsid) < 0) {
        c->step = "setsid";
        goto fail;
    }
    /* Into the command's own cgroup before anything else runs, so every process it ever
     * starts is counted, limited and killed with it. "0" means the writer itself. */
    if (s->cgroup_procs_fd >= 0 && syscall(SYS_write, s->cgroup_procs_fd, "0", 1) != 1) {
        c->step = "cgroup";
        goto fail;
    }
    /* Ignored signals stay ignored across execve; commands expect the defaults (a shell
     * pipeline must die of SIGPIPE). Handlers are reset by execve itself. */
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } dfl = {SIG_DFL, 0, NULL, 0};
    for (int sig = 1; sig < 65; sig++)
        if (ignored_signals & (1ULL << (sig - 1)))
            syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);

    /* The daemon keeps 0-2 open (main.c), so these fds are all > 2 and dup3 never sees
     * equal arguments. */
    if (syscall(SYS_dup3, s->stdin_fd, 0, 0) < 0 || syscall(SYS_dup3, s->stdout_fd, 1, 0) < 0 ||
        syscall(SYS_dup3, s->stderr_fd, 2, 0) < 0) {
        c->step = "dup2";
        goto fail;
    }
    if (s->cwd_fd >= 0 && syscall(SYS_fchdir, s->cwd_fd) < 0) {
        c->step = "fchdir";
        goto fail;
    }
    /* Nothing of the daemon's (sockets, the workspace fd, other jobs' pipes) may leak in. */
    close_from_3(c->report_fd); /* the report pipe is close-on-exec: execve ends it */
    for (int i = 0; i < s->nrlimits; i++)
        if (syscall(SYS_prlimit64, 0, s->rlimits[i].resource, &s->rlimits[i].value, NULL) < 0) {
            c->step = "setrlimit";
            goto fail;
        }
    /* Credentials, capabilities, no_new_privs and seccomp come last: from here on the child
     * can do little but execve. */
    if (s->harden && harden_child(s->harden, s->network, s->uid, &c->step) < 0)
        goto fail;
    uint64_t empty = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, 8);

    /* Like execvp: try each candidate; EACCES is remembered over a later ENOENT. */
    int saved = ENOENT;
    for (char *const *p = s->exec_paths; *p; p++) {
        syscall(SYS_execve, *p, s->argv, s->envp);
        int e = errno;
        if (e == EACCES)
            saved = EACCES;
        else if (e != ENOENT && e != ENOTDIR) {
            saved = e;
            break;
        }
    }
    c->err = saved;
    c->step = "execve";
    goto report;
fail:
    c->err = errno ? errno : EINVAL;
report:
    if (c->report_fd >= 0) {
        struct child_report rep = {c->err, c->step};
        syscall(SYS_write, c->report_fd, &rep, sizeof(rep));
    }
    syscall(SYS_exit_group, 127);
    return 127;
}

/* Whether the namespaces of a command also need a user namespace: a daemon without
 * CAP_SYS_ADMIN gets its PID namespace through one it owns (spawn_pidns_probe decides). Its
 * identity map ("uid uid 1"), formatted before any child runs. */
static bool ns_user;
static char ns_uid_map[32], ns_gid_map[32];

static unsigned long ns_clone_flags(void)
{
    return CLONE_NEWPID | CLONE_NEWNS | (ns_user ? CLONE_NEWUSER : 0);
}

/* Write text to a /proc/self file (raw syscalls). */
NO_SANITIZE static int write_proc_self(const char *path, const char *text)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    while (text[len])
        len++;
    long n = syscall(SYS_write, fd, text, len);
    syscall(SYS_close, fd);
    return n == (long)len ? 0 : -1;
}

/* In a user namespace of its own, the init maps its uid and gid to themselves (as
 * `unshare --map-current-user` would). Then mounts, then its own /proc. */
NO_SANITIZE static int ns_setup(const char **step)
{
    if (ns_user) {
        if (write_proc_self("/proc/self/setgroups", "deny") < 0 ||
            write_proc_self("/proc/self/uid_map", ns_uid_map) < 0 ||
            write_proc_self("/proc/self/gid_map", ns_gid_map) < 0) {
            *step = "user namespace map";
            return -1;
        }
    }
    /* The namespace's own /proc, so $$ and /proc agree; only on a mount table made private
     * first, else the mount would show through to the host's (or the sandbox's) /proc.
     * gVisor releases without mount propagation refuse that (EINVAL), and there the command
     * keeps the sandbox's /proc (/healthz says so). Returns 1 then, else 0. */
    if (syscall(SYS_mount, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
        if (syscall(SYS_mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) <
            0) {
            *step = "mount /proc";
            return -1;
        }
        return 0;
    }
    if (errno != EINVAL) {
        *step = "mount / private";
        return -1;
    }
    return 1;
}

/* How a PID namespace's init that shares the daemon's memory says it no longer reads the
 * spawn_spec: the spawning thread waits for that before its frame (and the spec) goes. */
struct ns_ctx {
    const struct spawn_spec *spec;
    int released; /* a futex word: 0, then 1 */
};

NO_SANITIZE static void ns_release(struct ns_ctx *nc)
{
    if (!nc)
        return;
    __atomic_store_n(&nc->released, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &nc->released, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/*
 * The init of a command's PID namespace: pid 1 there, running raw syscalls only like any
 * child of a threaded daemon (nc is NULL when it is a copy of the daemon rather than a sharer
 * of its memory). It gives the namespace its own /proc, loads the rest of the deny-list,
 * starts the command as the daemon would, reports its end, and reaps until no process is left.
 */
/* Everything an init does before it can start a command: its mounts, then the rest of the
 * deny-list. 0, or -1 with errno and *step. */
NO_SANITIZE static int ns_prepare(const struct harden_plan *h, const char **step)
{
    if (ns_setup(step) < 0)
        return -1;
    if (h && h->seccomp &&
        syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &h->filter_init, 0, 0) < 0) {
        *step = "seccomp";
        return -1;
    }
    return 0;
}

/*
 * The init of a command's PID namespace: pid 1 there, running raw syscalls only like any
 * child of a threaded daemon (nc is NULL when it is a copy of the daemon rather than a sharer
 * of its memory). It gives the namespace its own /proc and loads the rest of the deny-list
 * (unless `prepared` already, see the warm pool), starts the command as the daemon would,
 * reports its end, and reaps until no process is left.
 */
NO_SANITIZE __attribute__((noreturn)) static void ns_init(const struct spawn_spec *s,
                                                          struct ns_ctx *nc, bool prepared)
{
    struct spawn_ns_msg m = {.type = SPAWN_NS_FAILED};
    int sfd = s->status_fd;
    if (!prepared && ns_prepare(s->harden, &m.step) < 0)
        goto fail;
    struct child_ctx cc = {.spec = s, .err = 0, .step = NULL, .report_fd = -1};
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    pid_t main_pid =
        clone(child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &cc);
    /* The command has exec'd (or failed): s is not read again. */
    ns_release(nc);
    if (main_pid < 0) {
        m.step = "clone";
        goto fail;
    }
    if (cc.err) {
        m.err = cc.err;
        m.step = cc.step;
        syscall(SYS_write, sfd, &m, sizeof(m));
        syscall(SYS_exit_group, 127);
    }
    /* Nothing of the daemon's stays open here but the status pipe: above all not the
     * command's pipes, whose readers wait for every writer to go. */
    close_span(0, (unsigned)sfd - 1);
    close_span((unsigned)sfd + 1, ~0U);
    for (;;) {
        int st;
        struct rusage ru;
        long pid = syscall(SYS_wait4, -1, &st, 0, &ru);
        if (pid == main_pid) {
            struct spawn_ns_msg ex = {.type = SPAWN_NS_EXITED, .status = st, .ru = ru};
            syscall(SYS_write, sfd, &ex, sizeof(ex));
        } else if (pid < 0 && errno == ECHILD) {
            syscall(SYS_exit_group, 0);
        }
    }
fail:
    m.err = errno ? errno : EINVAL;
    ns_release(nc);
    syscall(SYS_write, sfd, &m, sizeof(m));
    syscall(SYS_exit_group, 127);
    __builtin_unreachable();
}

NO_SANITIZE static int ns_init_main(void *arg)
{
    struct ns_ctx *nc = arg;
    ns_init(nc->spec, nc, false);
}

/*
 * Stacks of inits that share the daemon's memory. An init outlives the request that started
 * it by a little (it is reaped later), so its stack is not freed but handed back: the kernel
 * clears `tid` when the init is gone (CLONE_CHILD_CLEARTID), and a stack whose tid is 0 is
 * free for the next one. There are never more than the inits alive at once. A warm init
 * (see the pool below) also finds its orders here.
 */
enum { WARM_STARTING, WARM_READY, WARM_FAILED };

struct ns_stack {
    struct ns_stack *next;
    char *base;
    size_t len;
    pid_t tid;    /* -1 while an init runs on it, 0 when free */
    unsigned gen; /* counts its uses: a waiter whose init died sees it taken again */
    /* A warm init: */
    pid_t pid;
    int state;            /* WARM_*, set by the init */
    int go;               /* futex: 0 wait, 1 start *claim, 2 exit */
    struct ns_ctx *claim; /* on the claimer's stack: the stack may be reused once the init
                           * is gone, which can be before the claimer looks again */
};

static pthread_mutex_t ns_stacks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ns_stack *ns_stacks;

static struct ns_stack *ns_stack_get(void)
{
    pthread_mutex_lock(&ns_stacks_lock);
    struct ns_stack *st = ns_stacks;
    while (st && __atomic_load_n(&st->tid, __ATOMIC_ACQUIRE) != 0)
        st = st->next;
    if (!st && (st = calloc(1, sizeof(*st)))) {
        /* The init's frames, the command's clone stack inside them, and a guard page. */
        st->len = SBXD_NS_INIT_STACK;
        st->base = mmap(NULL, st->len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
        if (st->base == MAP_FAILED || mprotect(st->base, 4096, PROT_NONE) < 0) {
            if (st->base != MAP_FAILED)
                munmap(st->base, st->len);
            free(st);
            st = NULL;
        } else {
            st->next = ns_stacks;
            ns_stacks = st;
        }
    }
    if (st) {
        __atomic_store_n(&st->tid, -1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&st->gen, 1, __ATOMIC_ACQ_REL);
        st->pid = 0;
        st->state = WARM_STARTING;
        st->go = 0;
        st->claim = NULL;
    }
    pthread_mutex_unlock(&ns_stacks_lock);
    return st;
}

static void futex_wait_ms(int *word, int val, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* Until the init on st (in its use gen) has released nc, or is gone. */
static void ns_wait_released(struct ns_ctx *nc, struct ns_stack *st, unsigned gen)
{
    while (!__atomic_load_n(&nc->released, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&st->tid, __ATOMIC_ACQUIRE) != 0 &&
           __atomic_load_n(&st->gen, __ATOMIC_ACQUIRE) == gen)
        futex_wait_ms(&nc->released, 0, 10);
}

/*
 * The warm pool: PID-namespace inits made ahead of need, each with its namespaces, its
 * /proc and its filter in place, asleep until a command is handed to it. That takes the
 * namespaces' creation off the request's path (most of what a PID namespace costs per
 * command); under a burst larger than the pool, commands get an init made on the spot.
 *
 * A warm init shares the daemon's memory and, until it is given a command, its fd table
 * (CLONE_FILES), so it sees the command's pipes when its turn comes; it then takes a copy of
 * the table for itself (unshare(CLONE_FILES), the one unshare the filter allows) before the
 * daemon closes its ends. It dies with the pool's thread (PR_SET_PDEATHSIG).
 */
#define NS_POOL_SIZE 2

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    bool running, stop;
    const struct harden_plan *harden;
    struct ns_stack *ready[NS_POOL_SIZE];
    int nready;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

NO_SANITIZE static int ns_warm_main(void *arg)
{
    struct ns_stack *w = arg;
    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    const char *step = NULL;
    if (ns_prepare(pool.harden, &step) < 0) {
        __atomic_store_n(&w->state, WARM_FAILED, __ATOMIC_RELEASE);
        syscall(SYS_exit_group, 1);
    }
    __atomic_store_n(&w->state, WARM_READY, __ATOMIC_RELEASE);
    syscall(SYS_futex, &w->state, FUTEX_WAKE, 1, NULL, NULL, 0);
    int go;
    while ((go = __atomic_load_n(&w->go, __ATOMIC_ACQUIRE)) == 0)
        syscall(SYS_futex, &w->go, FUTEX_WAIT, 0, NULL, NULL, 0);
    if (go != 1)
        syscall(SYS_exit_group, 0);
    struct ns_ctx *nc = w->claim;
    if (syscall(SYS_unshare, CLONE_FILES) < 0) {
        struct spawn_ns_msg m = {.type = SPAWN_NS_FAILED, .err = errno, .step = "unshare"};
        int sfd = nc->spec->status_fd;
        ns_release(nc);
        syscall(SYS_write, sfd, &m, sizeof(m));
        syscall(SYS_exit_group, 127);
    }
    ns_init(nc->spec, nc, true);
}

/* Make one warm init (on the pool's thread: the init's parent, whose end is its end). */
static struct ns_stack *pool_warm_one(void)
{
    struct ns_stack *st = ns_stack_get();
    if (!st)
        return NULL;
    int pid =
        clone(ns_warm_main, st->base + st->len,
              (int)(CLONE_VM | CLONE_FILES | ns_clone_flags() | CLONE_CHILD_CLEARTID | SIGCHLD), st,
              NULL, NULL, &st->tid);
    if (pid < 0) {
        __atomic_store_n(&st->tid, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    st->pid = pid;
    /* Ready within a millisecond or so; a failure stops the pool (the fallback remains). */
    while (__atomic_load_n(&st->state, __ATOMIC_ACQUIRE) == WARM_STARTING &&
           __atomic_load_n(&st->tid, __ATOMIC_ACQUIRE) != 0)
        futex_wait_ms(&st->state, WARM_STARTING, 5);
    if (__atomic_load_n(&st->state, __ATOMIC_ACQUIRE) != WARM_READY)
        return NULL; /* it exits by itself; the reaper collects it */
    return st;
}

static void *pool_main(void *arg)
{
    (void)arg;
    struct sbxd_err err = {0};
    if (harden_thread(pool.harden, &err) < 0)
        return NULL; /* no filter, no inits: spawns make their own */
    pthread_mutex_lock(&pool.lock);
    while (!pool.stop) {
        bool failed = false;
        while (!pool.stop && pool.nready < NS_POOL_SIZE) {
            pthread_mutex_unlock(&pool.lock);
            struct ns_stack *st = pool_warm_one();
            pthread_mutex_lock(&pool.lock);
            if (!st) {
                failed = true;
                break;
            }
            pool.ready[pool.nready++] = st;
        }
        if (pool.stop)
            break;
        if (failed) {
            /* Try again later, not in a loop. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&pool.cond, &pool.lock, &ts);
        } else {
            pthread_cond_wait(&pool.cond, &pool.lock);
        }
    }
    for (int i = 0; i < pool.nready; i++) {
        __atomic_store_n(&pool.ready[i]->go, 2, __ATOMIC_RELEASE);
        syscall(SYS_futex, &pool.ready[i]->go, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
    pool.nready = 0;
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

void spawn_pool_start(const struct harden_plan *h)
{
    if (!share_vm || pool.running)
        return;
    pool.harden = h;
    pool.stop = false;
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
    pthread_cond_signal(&pool.cond);
    pthread_mutex_unlock(&pool.lock);
    pthread_join(pool.thread, NULL);
    pool.running = false;
}

/* A warm init that is alive, or NULL; the pool's thread is told to make another. */
static struct ns_stack *pool_take(void)
{
    if (!pool.running)
        return NULL;
    struct ns_stack *st = NULL;
    pthread_mutex_lock(&pool.lock);
    while (!st && pool.nready > 0) {
        struct ns_stack *c = pool.ready[--pool.nready];
        if (__atomic_load_n(&c->tid, __ATOMIC_ACQUIRE) != 0)
            st = c;
    }
    pthread_cond_signal(&pool.cond);
    pthread_mutex_unlock(&pool.lock);
    return st;
}

/* Hand spec to a warm init. Returns its pid, or -1 when it died before it could start the
 * command (then no command runs). */
static long pool_start(struct ns_stack *st, const struct spawn_spec *spec, pid_t *pid_slot)
{
    struct ns_ctx nc = {.spec = spec, .released = 0};
    pid_t pid = st->pid;
    unsigned gen = __atomic_load_n(&st->gen, __ATOMIC_ACQUIRE);
    /* Known to the reaper before it can end. */
    __atomic_store_n(pid_slot, pid, __ATOMIC_RELEASE);
    st->claim = &nc;
    __atomic_store_n(&st->go, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &st->go, FUTEX_WAKE, 1, NULL, NULL, 0);
    ns_wait_released(&nc, st, gen);
    if (!__atomic_load_n(&nc.released, __ATOMIC_ACQUIRE)) {
        errno = ESRCH;
        return -1;
    }
    return pid;
}

/* Start an init that shares the daemon's memory: no page tables to copy, nothing to
 * write-protect in the daemon (~0.3 ms less per command than a copy). Returns as fork does. */
static long ns_clone_shared(const struct spawn_spec *spec, pid_t *pid_slot)
{
    struct ns_stack *st = ns_stack_get();
    if (!st) {
        errno = ENOMEM;
        return -1;
    }
    struct ns_ctx nc = {.spec = spec, .released = 0};
    unsigned gen = __atomic_load_n(&st->gen, __ATOMIC_ACQUIRE);
    int pid = clone(
        ns_init_main, st->base + st->len,
        (int)(CLONE_VM | ns_clone_flags() | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD),
        &nc, pid_slot, NULL, &st->tid);
    if (pid < 0) {
        int e = errno;
        __atomic_store_n(&st->tid, 0, __ATOMIC_RELEASE);
        errno = e;
        return -1;
    }
    /* Until the init is done with spec (or gone: its tid word is cleared then). */
    ns_wait_released(&nc, st, gen);
    return pid;
}

bool spawn_pidns_probe(bool *own_proc, bool *userns, char *why, size_t len)
{
    /* Directly where the daemon may (CAP_SYS_ADMIN), else through a user namespace. */
    snprintf(ns_uid_map, sizeof(ns_uid_map), "%u %u 1", (unsigned)geteuid(), (unsigned)geteuid());
    snprintf(ns_gid_map, sizeof(ns_gid_map), "%u %u 1", (unsigned)getegid(), (unsigned)getegid());
    long pid = -1;
    int e = 0;
    for (int attempt = 0; attempt < 2 && pid < 0; attempt++) {
        ns_user = attempt == 1;
        pid = syscall(SYS_clone, ns_clone_flags() | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid == 0) {
            /* As ns_init does: exit 0 with its own /proc, 4 without (shared), else failure. */
            const char *step = NULL;
            int rc = ns_setup(&step);
            if (rc < 0)
                syscall(SYS_exit_group, step && step[0] == 'u' ? 5 : 2);
            syscall(SYS_exit_group, syscall(SYS_getpid) == 1 ? (rc == 1 ? 4 : 0) : 3);
        }
        if (pid < 0 && !e)
            e = errno;
    }
    *userns = ns_user;
    if (pid < 0) {
        snprintf(why, len, "cannot create a PID namespace (%s), nor one in a user namespace (%s)",
                 strerror(e), strerror(errno));
        return false;
    }
    int st;
    while (waitpid((pid_t)pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 4)) {
        *own_proc = WEXITSTATUS(st) == 0;
        return true;
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    snprintf(why, len, "a PID namespace's init cannot %s",
             code == 5   ? "map its user namespace"
             : code == 2 ? "set up its mounts or /proc"
                         : "run as pid 1");
    return false;
}

pid_t spawn_child(const struct spawn_spec *spec, pid_t *pid_slot, int *child_errno,
                  const char **child_step, struct sbxd_err *err)
{
    /* The child's stack: this frame's own, idle while CLONE_VFORK suspends us. */
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    struct child_ctx ctx = {.spec = spec, .err = 0, .step = NULL, .report_fd = -1};
    int report[2] = {-1, -1};
    reset_peak_if_grown();
    /* Never start a command without its filter: no filter on this thread, no spawn. */
    if (spec->harden && harden_thread(spec->harden, err) < 0)
        return -1;
    if (spec->pidns) {
        /* An init in new PID and mount namespaces, sharing the daemon's memory where
         * children may, else like fork; it reports through status_fd whether the command
         * could start. */
        long pid;
        struct ns_stack *warm = share_vm ? pool_take() : NULL;
        if (warm) {
            pid = pool_start(warm, spec, pid_slot);
        } else if (share_vm) {
            pid = ns_clone_shared(spec, pid_slot);
        } else {
            pid = syscall(SYS_clone, ns_clone_flags() | CLONE_PARENT_SETTID | SIGCHLD, NULL,
                          pid_slot, NULL, 0);
            if (pid == 0)
                ns_init(spec, NULL, false);
        }
        if (pid < 0)
            return sbxd_fail_errno(
                err, errno == EAGAIN || errno == ENOMEM ? SBXD_E_BUSY : SBXD_E_INTERNAL, errno,
                "cannot start a PID namespace");
        *child_errno = 0;
        *child_step = NULL;
        return (pid_t)pid;
    }
    /* A child that does not share our memory reports a failure on a pipe instead. */
    if (!share_vm && pipe2(report, O_CLOEXEC) < 0)
        return sbxd_fail_errno(err, SBXD_E_BUSY, errno, "cannot create a pipe");
    ctx.report_fd = report[1];
    /* Without CLONE_VM the child runs on its own copy of this stack. CLONE_VFORK either way:
     * we resume once it has exec'd or failed. */
    pid_t pid = clone(child_main, stack + sizeof(stack),
                      (share_vm ? CLONE_VM : 0) | CLONE_VFORK | CLONE_PARENT_SETTID | SIGCHLD, &ctx,
                      pid_slot);
    int e = errno;
    if (report[1] >= 0) {
        close(report[1]);
        struct child_report rep;
        /* A successful execve closed the child's end: EOF, nothing to read. */
        if (pid > 0 && read(report[0], &rep, sizeof(rep)) == (ssize_t)sizeof(rep)) {
            ctx.err = rep.err;
            ctx.step = rep.step;
        }
        close(report[0]);
    }
    if (pid < 0)
        return sbxd_fail_errno(err, e == EAGAIN || e == ENOMEM ? SBXD_E_BUSY : SBXD_E_INTERNAL, e,
                               "cannot start a process");
    *child_errno = ctx.err;
    *child_step = ctx.step;
    return pid;
}
