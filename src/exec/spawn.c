#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/limits.h"
#include "sbxd/resolve.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"

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

    /* A namespace slot's command (its PID namespace came with the clone): into the slot's
     * mount namespace, with the namespace's own /proc, then under the rest of the
     * deny-list, which refuses setns and mount from here on. */
    if (s->ns_mnt_fd >= 0) {
        if (syscall(SYS_setns, s->ns_mnt_fd, CLONE_NEWNS) < 0) {
            c->step = "setns";
            goto fail;
        }
        if (s->harden && s->harden->seccomp &&
            syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &s->harden->filter_init, 0, 0) <
                0) {
            c->step = "seccomp";
            goto fail;
        }
    }
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
    /* A terminal's slave on stdin becomes the session's controlling tty: job control,
     * /dev/tty and SIGWINCH on resize work as in a login. */
    if (s->pty && syscall(SYS_ioctl, 0, TIOCSCTTY, 0) < 0) {
        c->step = "controlling tty";
        goto fail;
    }
    if (s->cwd_fd >= 0 && syscall(SYS_fchdir, s->cwd_fd) < 0) {
        c->step = "fchdir";
        goto fail;
    }
    /* A Landlock domain of its own, with the ruleset's fd that the next step closes. */
    if (s->harden && harden_child_landlock(s->harden, &c->step) < 0)
        goto fail;
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
 * A one-command init, for where children cannot share the daemon's memory (gVisor): pid 1 of
 * the namespace, a copy of the daemon running raw syscalls only. It prepares the namespace,
 * starts the command as the daemon would, reports its end on status_fd, and reaps until no
 * process is left; SIGKILL to it kills the namespace.
 */
NO_SANITIZE __attribute__((noreturn)) static void ns_init(const struct spawn_spec *s)
{
    struct spawn_ns_msg m = {.type = SPAWN_NS_FAILED};
    int sfd = s->status_fd;
    /* Children's ends and the daemon's signal requests are taken with rt_sigtimedwait:
     * blocked before the command exists, so none is missed. (The command unblocks all.) */
    uint64_t waitset = (1ULL << (SIGCHLD - 1)) | (1ULL << (SBXD_NS_SIGNAL - 1));
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &waitset, NULL, 8);
    if (ns_prepare(s->harden, &m.step) < 0)
        goto fail;
    struct child_ctx cc = {.spec = s, .err = 0, .step = NULL, .report_fd = -1};
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    pid_t main_pid =
        clone(child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &cc);
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
        long pid;
        while ((pid = syscall(SYS_wait4, -1, &st, WNOHANG, &ru)) > 0)
            if (pid == main_pid) {
                struct spawn_ns_msg ex = {.type = SPAWN_NS_EXITED, .status = st, .ru = ru};
                syscall(SYS_write, sfd, &ex, sizeof(ex));
            }
        if (pid < 0)
            syscall(SYS_exit_group, 0); /* ECHILD: the namespace is empty */
        siginfo_t si;
        if (syscall(SYS_rt_sigtimedwait, &waitset, &si, NULL, 8) == SBXD_NS_SIGNAL &&
            si.si_code == SI_QUEUE)
            syscall(SYS_kill, -1, (int)((uintptr_t)si.si_value.sival_ptr & 0xff));
    }
fail:
    m.err = errno ? errno : EINVAL;
    syscall(SYS_write, sfd, &m, sizeof(m));
    syscall(SYS_exit_group, 127);
    __builtin_unreachable();
}

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
 */
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
    close_span(0, ~0U); /* nothing of the daemon's */
    if (ns_prepare(slot_harden, &step) < 0) {
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
                    (int)(CLONE_VM | ns_clone_flags() | CLONE_CHILD_CLEARTID | SIGCHLD), sl, NULL,
                    NULL, &sl->tid);
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

/* After a burst: end the init of one slot idle for long, while more than the spare ones are
 * idle. Its namespace is empty; the slot's memory serves again once the init is gone. */
static void slots_trim(void)
{
    if (slots_idle() <= SLOT_SPARE)
        return;
    int64_t old = mono_ms() - SLOT_IDLE_MS;
    for (struct spawn_ns_slot *c = pool.all; c; c = c->next)
        if (slot_idle(c) && c->used_ms < old) {
            c->retired = true;
            kill(c->pid, SIGKILL);
            return;
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
        /* (Slots become idle again unannounced.) */
        struct timespec ts = time_after_ms(CLOCK_REALTIME, failed ? 1000 : 20);
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
    if (!share_vm || ns_user || pool.running || fstat(rootfd, &slot_workspace_st) < 0 ||
        strlen(workspace) >= sizeof(slot_workspace))
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

void spawn_ns_init_signal(pid_t init, int sig)
{
    union sigval v = {.sival_ptr = (void *)(uintptr_t)(sig & 0xff)};
    sigqueue(init, SBXD_NS_SIGNAL, v);
}

void spawn_ns_put(struct spawn_ns_slot *sl)
{
    pthread_mutex_lock(&pool.lock);
    sl->held = false;
    pthread_mutex_unlock(&pool.lock);
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
    if (ns_stuck)
        return sbxd_fail(err, SBXD_E_INTERNAL, EINVAL,
                         "this connection's thread could not leave a PID namespace; reconnect");
    struct spawn_spec slot_spec;
    struct spawn_ns_slot *slot = NULL;
    int slot_cwd = -1;
    if (spec->pidns && spawn_ns_slots()) {
        /* Into a namespace slot: its PID namespace for the child we clone next, its mount
         * namespace joined by the child (spec->ns_mnt_fd). */
        unsigned use;
        slot = slot_take(&use);
        if (!slot)
            return sbxd_fail(err, SBXD_E_BUSY, EAGAIN, "no PID namespace is free; retry later");
        if (syscall(SYS_setns, slot->pidns_fd, CLONE_NEWPID) < 0) {
            int e = errno;
            spawn_ns_put(slot);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot enter a PID namespace");
        }
        slot_spec = *spec;
        slot_spec.ns_mnt_fd = slot->mntns_fd;
        slot_spec.cwd_fd = slot->wsfd;
        if (spec->cwd_path && spec->cwd_path[0]) {
            slot_cwd = fs_resolve_beneath(slot->wsfd, spec->cwd_path, FS_RESOLVE_DIRECTORY, err);
            if (slot_cwd < 0) {
                if (syscall(SYS_setns, self_pidns_fd, CLONE_NEWPID) < 0)
                    ns_stuck = true;
                spawn_ns_put(slot);
                return -1;
            }
            slot_spec.cwd_fd = slot_cwd;
        }
        ctx.spec = spec = &slot_spec;
        *spec->ns_slot = slot;
        *spec->ns_seq = use;
    } else if (spec->pidns) {
        /* A one-command init, like fork; it reports on status_fd whether the command could
         * start. */
        long pid = syscall(SYS_clone, ns_clone_flags() | CLONE_PARENT_SETTID | SIGCHLD, NULL,
                           pid_slot, NULL, 0);
        if (pid == 0)
            ns_init(spec);
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
    if (slot) {
        /* Back to our own namespace for the children this thread makes next. Should that
         * ever fail, this thread must not spawn again: its children would land there. */
        if (syscall(SYS_setns, self_pidns_fd, CLONE_NEWPID) < 0)
            ns_stuck = true;
        if (slot_cwd >= 0)
            close(slot_cwd);
        if (pid < 0) {
            spawn_ns_put(slot);
            *spec->ns_slot = NULL;
        }
    }
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
