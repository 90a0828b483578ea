#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
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
    if (s->harden && harden_child(s->harden, s->network, &c->step) < 0)
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

/*
 * The init of a command's PID namespace: pid 1 there, a copy of the spawning thread (not
 * sharing its memory), running raw syscalls only like any child of a threaded daemon. It
 * gives the namespace its own /proc (so $$ and /proc agree), loads the rest of the deny-list,
 * starts the command as the daemon would, reports its end, and reaps until no process is left.
 */
NO_SANITIZE __attribute__((noreturn)) static void ns_init(const struct spawn_spec *s)
{
    struct spawn_ns_msg m = {.type = SPAWN_NS_FAILED};
    int sfd = s->status_fd;
    /* The namespace's own /proc, so $$ and /proc agree; only on a mount table made private
     * first, else the mount would show through to the host's (or the sandbox's) /proc.
     * gVisor releases without mount propagation refuse that (EINVAL), and there the command
     * keeps the sandbox's /proc (/healthz says so). */
    if (syscall(SYS_mount, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
        if (syscall(SYS_mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) <
            0) {
            m.step = "mount /proc";
            goto fail;
        }
    } else if (errno != EINVAL) {
        m.step = "mount / private";
        goto fail;
    }
    if (s->harden && s->harden->seccomp &&
        syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &s->harden->filter_init, 0, 0) <
            0) {
        m.step = "seccomp";
        goto fail;
    }
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
    syscall(SYS_write, sfd, &m, sizeof(m));
    syscall(SYS_exit_group, 127);
    __builtin_unreachable();
}

bool spawn_pidns_probe(bool *own_proc, char *why, size_t len)
{
    long pid = syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid == 0) {
        /* As ns_init does: exit 0 with its own /proc, 4 without (shared), else failure. */
        int shared = 0;
        if (syscall(SYS_mount, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
            if (errno != EINVAL)
                syscall(SYS_exit_group, 1);
            shared = 4;
        } else if (syscall(SYS_mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                           NULL) < 0) {
            syscall(SYS_exit_group, 2);
        }
        syscall(SYS_exit_group, syscall(SYS_getpid) == 1 ? shared : 3);
    }
    if (pid < 0) {
        snprintf(why, len, "cannot create a PID namespace: %s", strerror(errno));
        return false;
    }
    int st;
    while (waitpid((pid_t)pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 4)) {
        *own_proc = WEXITSTATUS(st) == 0;
        return true;
    }
    snprintf(why, len, "a PID namespace's init cannot %s",
             WIFEXITED(st) && WEXITSTATUS(st) == 2 ? "mount its /proc" : "set up its mounts");
    return false;
}

pid_t spawn_child(const struct spawn_spec *spec, pid_t *pid_slot, int *child_errno,
                  const char **child_step, struct sbxd_err *err)
{
    /* The child's stack: this frame's own, idle while CLONE_VFORK suspends us. */
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    struct child_ctx ctx = {.spec = spec, .err = 0, .step = NULL, .report_fd = -1};
    int report[2] = {-1, -1};
    if (!share_vm && pipe2(report, O_CLOEXEC) < 0)
        return sbxd_fail_errno(err, SBXD_E_BUSY, errno, "cannot create a pipe");
    ctx.report_fd = report[1];
    reset_peak_if_grown();
    /* Never start a command without its filter: no filter on this thread, no spawn. */
    if (spec->harden && harden_thread(spec->harden, err) < 0)
        return -1;
    if (spec->pidns) {
        /* Like fork, into new PID and mount namespaces; the init reports through status_fd
         * whether the command could start. */
        long pid = syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | CLONE_PARENT_SETTID | SIGCHLD,
                           NULL, pid_slot, NULL, 0);
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
