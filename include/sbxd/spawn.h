/*
 * spawn.h - start one command as a contained child.
 *
 * The child is made with clone(CLONE_VM|CLONE_VFORK): it borrows the parent's memory until
 * execve, so nothing is copied (fast in a daemon of any size) and everything it needs is
 * prepared by the parent beforehand. Between clone and execve the child makes only raw
 * syscalls (no malloc, no locks): that is what makes forking from a threaded daemon safe.
 *
 * CLONE_PARENT_SETTID makes the kernel store the pid in *pid_slot before the child runs, so
 * a reaper that finds the pid in wait4 can always match it to its job.
 */
#ifndef SBXD_SPAWN_H
#define SBXD_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "sbxd/err.h"
#include "sbxd/harden.h"

#define SPAWN_MAX_RLIMITS 8

struct spawn_ns_slot;

struct spawn_rlimit {
    int resource;
    struct rlimit value;
};

struct spawn_spec {
    char *const *exec_paths; /* candidates for execve, tried in order (a PATH search) */
    char *const *argv;
    char *const *envp;
    int stdin_fd, stdout_fd, stderr_fd;
    int cwd_fd;           /* an fd of the working directory, or -1 */
    const char *cwd_path; /* ... its path beneath the workspace root (namespace slots) */
    /* An absolute directory to start in instead, or NULL: a kernel's own, outside the
     * workspace (context.h). Entered by path, as root, in the command's mount namespace. */
    const char *cwd_abs;
    struct spawn_rlimit rlimits[SPAWN_MAX_RLIMITS];
    int nrlimits;
    const struct harden_plan *harden; /* applied last, right before execve; NULL: none */
    int cgroup_procs_fd;              /* the command's cgroup.procs (written first), or -1 */
    bool pidns;    /* start the command under the init of a PID namespace of its own */
    int status_fd; /* pidns, one-command init: where it writes struct spawn_ns_msg */
    /* pidns, namespace slot (spawn_ns_slots()): which slot and use the command got, for
     * spawn_ns_end() and spawn_ns_put() */
    struct spawn_ns_slot **ns_slot;
    unsigned *ns_seq;
    int ns_mnt_fd; /* set by spawn_child: -1 from callers */
    bool network;  /* false: sockets of AF_UNIX only */
    uid_t uid;     /* uid isolation: the command's own uid; (uid_t)-1: the plan's */
    bool pty;      /* stdin is a terminal's slave: made the controlling tty after setsid */
    /* Cloned with no exit signal: its parent learns of its end from a pidfd and reaps it
     * with __WALL (reaper.h). (An execve turns the exit signal back to SIGCHLD: the main
     * thread does not wait for that signal where every command is quiet: main.c.) */
    bool quiet_exit;
};

/*
 * What a PID namespace's init tells the daemon through status_fd (one write each, atomic).
 * The init cannot pass on a signal death by dying of it (an init ignores its own signals), so
 * the command's wait status travels here; the init itself exits 0 once the namespace is empty,
 * and SIGKILL to it kills every process in the namespace.
 */
enum { SPAWN_NS_EXITED = 1, SPAWN_NS_FAILED = 2, SPAWN_NS_STARTED = 3 /* exec'd */ };

struct spawn_ns_msg {
    int type;
    int status;       /* EXITED: the command's wait status */
    int err;          /* FAILED: errno */
    const char *step; /* FAILED: what failed (a literal: same address in the daemon) */
    struct rusage ru; /* EXITED: the command's rusage (with its waited children) */
};

/* Whether commands can get PID namespaces here: a start-up test that creates one, with a
 * mount namespace and, where the mount table can be made private, its own /proc (*own_proc).
 * A daemon that may not create them itself gets them inside a user namespace of its own
 * (*userns), which maps its own uid and gid only. Call before any thread exists. */
bool spawn_pidns_probe(bool *own_proc, bool *userns, char *why, size_t len);

/* Whether each command can get an IPC namespace of its own (System V objects and POSIX message
 * queues that die with the command and that no other command reaches): a start-up test that
 * makes one as commands will get it (with_userns: in the user namespace of their PID namespace,
 * which a daemon without CAP_SYS_ADMIN needs; call spawn_pidns_probe first) and checks that an
 * object made there stays there. From then on every command gets one (false: why not, and
 * commands share the daemon's). Call before any thread exists. */
bool spawn_ipcns_probe(bool with_userns, char *why, size_t len);
/* Once the filter is made (harden_init): whether a spawning thread under it can clone with
 * the IPC namespace as spawn_child does (the filter lets CLONE_NEWIPC through with its key in
 * clone's tls and child_tid, which a tracer such as valgrind may rewrite; pidns: as a PID
 * namespace's init is cloned, with its user namespace where it has one). Where it cannot,
 * commands share sbxd's namespace from then on: false with why. Call before any spawn. */
bool spawn_ipcns_check(const struct harden_plan *h, bool pidns, char *why, size_t len);

/*
 * PID-namespace mode, where children share the daemon's memory and sbxd is root: commands
 * run in namespace slots, PID namespaces whose init lives on, reaps what commands leave
 * behind and empties the namespace between commands (spawn_pool.c). The command itself is the
 * daemon's child, reaped like any; spawn_ns_end() has its namespace emptied (call it when
 * the command is over, and to kill its tree), spawn_ns_put() gives the slot back.
 * Start the pool after harden_init, stop it at shutdown (every slot's init dies, and with
 * it whatever still runs in its namespace).
 */
void spawn_pool_start(const struct harden_plan *h, unsigned max_running, int rootfd,
                      const char *workspace);
/* Where no slot serves (spawn_ns_slots() false): start the thread that clones one-command
 * inits sharing the daemon's memory (spawn_init.c), from a thread with no seccomp filter. */
void spawn_ns_maker_start(void);
void spawn_pool_stop(void);
bool spawn_ns_slots(void); /* whether PID-namespace commands run in slots */
void spawn_ns_end(struct spawn_ns_slot *sl, unsigned use);
void spawn_ns_put(struct spawn_ns_slot *sl);

/* Send sig to every process of a command's PID namespace, by its init: a slot's, for the
 * slot's command number `use` (nothing once that one is over), or a one-command init's (its
 * pid, while it is not reaped). */
void spawn_ns_signal(struct spawn_ns_slot *sl, unsigned use, int sig);
void spawn_ns_init_signal(pid_t init, int sig);

/* Note which signals the daemon ignores, so children get them back at their defaults. Call
 * once, after the daemon's own signal dispositions are set. */
void spawn_init(void);

/* The daemon has just held `bytes` of transient memory (buffers of a finished request). If
 * that is a lot, the next spawn first resets the daemon's peak RSS, which the kernel would
 * otherwise count into the child's memory_peak_bytes. */
void spawn_note_daemon_peak(size_t bytes);

/*
 * Start the child. Returns its pid (also written to *pid_slot by the kernel), or -1 with err
 * set. When the child could not exec, the pid is still returned (the child exits 127 and is
 * reaped like any other) and *child_errno / *child_step say what failed; else *child_errno
 * is 0.
 */
pid_t spawn_child(const struct spawn_spec *spec, pid_t *pid_slot, int *child_errno,
                  const char **child_step, struct sbxd_err *err);

#endif
