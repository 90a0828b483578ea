/*
 * The one-command init of a PID namespace, for where children cannot share the daemon's memory
 * (gVisor) and so no namespace slot can serve (spawn_pool.c). spawn_child starts it like fork
 * (spawn_ns_init_start); it is pid 1 of the namespace, a copy of the daemon running raw
 * syscalls only (no malloc, no locks, no stdio), which clones the command with spawn_child_main
 * and reports on status_fd (struct spawn_ns_msg, one atomic write each). Every init, a slot's
 * too, prepares its namespace with spawn_ns_prepare before it runs anything.
 */
#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/exec_limits.h"
#include "sbxd/spawn.h"
#include "spawn_internal.h"

/* Everything an init does before it can start a command: its mounts, then the rest of the
 * deny-list. 0, or -1 with errno and *step. */
NO_SANITIZE int spawn_ns_prepare(const struct harden_plan *h, const char **step)
{
    if (spawn_ns_setup(step) < 0)
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
    if (spawn_ns_prepare(s->harden, &m.step) < 0)
        goto fail;
    struct child_ctx cc = {.spec = s, .err = 0, .step = NULL, .report_fd = -1};
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    pid_t main_pid =
        clone(spawn_child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &cc);
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
    /* The vfork is over with an exec: the daemon waits for this (or FAILED) to know the
     * command started before it answers for it (a gRPC Start's first event). */
    struct spawn_ns_msg started = {.type = SPAWN_NS_STARTED};
    syscall(SYS_write, sfd, &started, sizeof(started));
    /* Nothing of the daemon's stays open here but the status pipe: above all not the
     * command's pipes, whose readers wait for every writer to go. */
    spawn_close_span(0, (unsigned)sfd - 1);
    spawn_close_span((unsigned)sfd + 1, ~0U);
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

/* A one-command init, like fork; it reports on status_fd whether the command could start. */
pid_t spawn_ns_init_start(const struct spawn_spec *spec, pid_t *pid_slot, struct sbxd_err *err)
{
    /* The IPC namespace comes with the init's clone (the command, which the init clones,
     * shares it, and it dies with the namespace's last process); the filter's key in child_tid
     * and tls, whichever order the architecture has them in (harden.h). */
    unsigned long key = spec->harden ? spec->harden->clone_key : 0;
    long pid = syscall(
        SYS_clone, spawn_ns_clone_flags() | spawn_ipc_clone_flag() | CLONE_PARENT_SETTID | SIGCHLD,
        NULL, pid_slot, key, key);
    if (pid == 0)
        ns_init(spec);
    if (pid < 0)
        return sbxd_fail_errno(err,
                               errno == EAGAIN || errno == ENOMEM ? SBXD_E_BUSY : SBXD_E_INTERNAL,
                               errno, "cannot start a PID namespace");
    return (pid_t)pid;
}

/* The daemon's request travels as a queued real-time signal whose value names the signal: the
 * init, pid 1 of the namespace, sends it with kill(-1) (see spawn_ns_signal). */
void spawn_ns_init_signal(pid_t init, int sig)
{
    union sigval v = {.sival_ptr = (void *)(uintptr_t)(sig & 0xff)};
    sigqueue(init, SBXD_NS_SIGNAL, v);
}
