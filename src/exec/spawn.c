/*
 * Starting one command (spawn.h): spawn_child, called by job.c for every command, and the
 * child it clones, which runs from clone to execve in the daemon's memory (CLONE_VM) or, where
 * the daemon's peak RSS cannot be reset (spawn_peak.c), in a copy that reports on a pipe. The
 * child makes raw syscalls only: no malloc, no locks, no stdio, no sanitizer instrumentation.
 * A PID-namespace command goes through a namespace slot (spawn_pool.c) or a one-command init
 * (spawn_init.c), which clones this same child.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/exec_limits.h"
#include "sbxd/spawn.h"
#include "spawn_internal.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

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

/* Signals whose disposition is SIG_IGN in the daemon (bit sig-1): these survive execve and
 * must be reset in the child. All of them until spawn_init() has looked. */
static uint64_t ignored_signals = ~0ULL;

void spawn_init(void)
{
    spawn_peak_init();
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
NO_SANITIZE int spawn_close_span(unsigned lo, unsigned hi)
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
    if (keep < 3 ? spawn_close_span(3, ~0U) == 0
                 : spawn_close_span(3, (unsigned)keep - 1) == 0 &&
                       spawn_close_span((unsigned)keep + 1, ~0U) == 0)
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
 * no sanitizer instrumentation (its shadow state belongs to the parent thread). Each step
 * below returns 0, or -1 with errno and *step set.
 */

/* A namespace slot's command (its PID namespace came with the clone): into the slot's mount
 * namespace, with the namespace's own /proc, then under the rest of the deny-list, which
 * refuses setns and mount from here on. */
NO_SANITIZE static int child_enter_slot(const struct spawn_spec *s, const char **step)
{
    if (s->ns_mnt_fd < 0)
        return 0;
    if (syscall(SYS_setns, s->ns_mnt_fd, CLONE_NEWNS) < 0) {
        *step = "setns";
        return -1;
    }
    if (s->harden && s->harden->seccomp &&
        syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &s->harden->filter_init, 0, 0) <
            0) {
        *step = "seccomp";
        return -1;
    }
    return 0;
}

NO_SANITIZE static int child_own_session(const struct spawn_spec *s, const char **step)
{
    /* Own session and process group: a group kill then reaches every descendant that does
     * not leave the group itself, and no terminal signal of the daemon's reaches us. */
    if (syscall(SYS_setsid) < 0) {
        *step = "setsid";
        return -1;
    }
    /* Into the command's own cgroup before anything else runs, so every process it ever
     * starts is counted, limited and killed with it. "0" means the writer itself. */
    if (s->cgroup_procs_fd >= 0 && syscall(SYS_write, s->cgroup_procs_fd, "0", 1) != 1) {
        *step = "cgroup";
        return -1;
    }
    return 0;
}

/* Ignored signals stay ignored across execve; commands expect the defaults (a shell
 * pipeline must die of SIGPIPE). Handlers are reset by execve itself. */
NO_SANITIZE static void child_default_signals(void)
{
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } dfl = {SIG_DFL, 0, NULL, 0};
    for (int sig = 1; sig < 65; sig++)
        if (ignored_signals & (1ULL << (sig - 1)))
            syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);
}

NO_SANITIZE static int child_stdio_cwd(const struct spawn_spec *s, const char **step)
{
    /* The daemon keeps 0-2 open (main.c), so these fds are all > 2 and dup3 never sees
     * equal arguments. */
    if (syscall(SYS_dup3, s->stdin_fd, 0, 0) < 0 || syscall(SYS_dup3, s->stdout_fd, 1, 0) < 0 ||
        syscall(SYS_dup3, s->stderr_fd, 2, 0) < 0) {
        *step = "dup2";
        return -1;
    }
    /* A terminal's slave on stdin becomes the session's controlling tty: job control,
     * /dev/tty and SIGWINCH on resize work as in a login. */
    if (s->pty && syscall(SYS_ioctl, 0, TIOCSCTTY, 0) < 0) {
        *step = "controlling tty";
        return -1;
    }
    if (s->cwd_abs && syscall(SYS_chdir, s->cwd_abs) < 0) {
        *step = "chdir";
        return -1;
    }
    if (!s->cwd_abs && s->cwd_fd >= 0 && syscall(SYS_fchdir, s->cwd_fd) < 0) {
        *step = "fchdir";
        return -1;
    }
    return 0;
}

NO_SANITIZE static int child_rlimits(const struct spawn_spec *s, const char **step)
{
    for (int i = 0; i < s->nrlimits; i++)
        if (syscall(SYS_prlimit64, 0, s->rlimits[i].resource, &s->rlimits[i].value, NULL) < 0) {
            *step = "setrlimit";
            return -1;
        }
    return 0;
}

/* Every step up to execve, in order. */
NO_SANITIZE static int child_prepare(struct child_ctx *c)
{
    const struct spawn_spec *s = c->spec;
    if (child_enter_slot(s, &c->step) < 0 || child_own_session(s, &c->step) < 0)
        return -1;
    child_default_signals();
    if (child_stdio_cwd(s, &c->step) < 0)
        return -1;
    /* A Landlock domain of its own, with the ruleset's fd that the next step closes. */
    if (s->harden && harden_child_landlock(s->harden, &c->step) < 0)
        return -1;
    /* Nothing of the daemon's (sockets, the workspace fd, other jobs' pipes) may leak in. */
    close_from_3(c->report_fd); /* the report pipe is close-on-exec: execve ends it */
    if (child_rlimits(s, &c->step) < 0)
        return -1;
    /* Credentials, capabilities, no_new_privs and seccomp come last: from here on the child
     * can do little but execve. */
    if (s->harden && harden_child(s->harden, s->network, s->uid, &c->step) < 0)
        return -1;
    uint64_t empty = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, 8);
    return 0;
}

/* Like execvp: try each candidate; EACCES is remembered over a later ENOENT. Returns the
 * errno to report (execve returned). */
NO_SANITIZE static int child_exec(const struct spawn_spec *s)
{
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
    return saved;
}

NO_SANITIZE int spawn_child_main(void *arg)
{
    struct child_ctx *c = arg;
    if (child_prepare(c) < 0) {
        c->err = errno ? errno : EINVAL;
    } else {
        c->err = child_exec(c->spec);
        c->step = "execve";
    }
    if (c->report_fd >= 0) {
        struct child_report rep = {c->err, c->step};
        syscall(SYS_write, c->report_fd, &rep, sizeof(rep));
    }
    syscall(SYS_exit_group, 127);
    return 127;
}

pid_t spawn_child(const struct spawn_spec *spec, pid_t *pid_slot, int *child_errno,
                  const char **child_step, struct sbxd_err *err)
{
    /* The child's stack: this frame's own, idle while CLONE_VFORK suspends us. */
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    struct child_ctx ctx = {.spec = spec, .err = 0, .step = NULL, .report_fd = -1};
    int report[2] = {-1, -1};
    spawn_peak_reset_if_grown();
    /* Never start a command without its filter: no filter on this thread, no spawn. */
    if (spec->harden && harden_thread(spec->harden, err) < 0)
        return -1;
    if (spawn_slot_stuck())
        return sbxd_fail(err, SBXD_E_INTERNAL, EINVAL,
                         "this connection's thread could not leave a PID namespace; reconnect");
    struct spawn_spec slot_spec;
    int slot_cwd = -1;
    bool in_slot = spec->pidns && spawn_ns_slots();
    if (in_slot) {
        if (spawn_slot_enter(spec, &slot_spec, &slot_cwd, err) < 0)
            return -1;
        ctx.spec = spec = &slot_spec;
    } else if (spec->pidns) {
        pid_t pid = spawn_ns_init_start(spec, pid_slot, err);
        if (pid < 0)
            return pid;
        *child_errno = 0;
        *child_step = NULL;
        return pid;
    }
    /* A child that does not share our memory reports a failure on a pipe instead. */
    bool share_vm = spawn_vm_shared();
    if (!share_vm && pipe2(report, O_CLOEXEC) < 0)
        return sbxd_fail_errno(err, SBXD_E_BUSY, errno, "cannot create a pipe");
    ctx.report_fd = report[1];
    /* Without CLONE_VM the child runs on its own copy of this stack. CLONE_VFORK either way:
     * we resume once it has exec'd or failed. Where it can be had, an IPC namespace of its
     * own: its System V objects and POSIX queues die with its tree, and no other command (the
     * next task's above all) finds them by key or name. The filter lets that flag through
     * with the key in tls and child_tid alone, which the kernel ignores here (harden.h). */
    unsigned long key = spec->harden ? spec->harden->clone_key : 0;
    pid_t pid = clone(spawn_child_main, stack + sizeof(stack),
                      (int)((share_vm ? CLONE_VM : 0) | CLONE_VFORK | CLONE_PARENT_SETTID |
                            spawn_ipc_clone_flag() | (spec->quiet_exit ? 0 : SIGCHLD)),
                      &ctx, pid_slot, (void *)key, (pid_t *)key);
    int e = errno;
    if (in_slot)
        spawn_slot_leave(spec, slot_cwd, pid);
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
