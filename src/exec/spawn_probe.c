/*
 * How commands get PID namespaces here. spawn_pidns_probe (isolation.c, at start-up, before any
 * thread exists) creates one: directly where the daemon may (CAP_SYS_ADMIN), else inside a user
 * namespace of its own, and fixes which for good (spawn_ns_clone_flags). The test child runs
 * the same first step as every namespace's init (spawn_ns_setup: the user namespace's identity
 * map, a private mount table, the namespace's own /proc), which runs in a child that shares or
 * copies the daemon's memory and so makes raw syscalls only.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/spawn.h"
#include "spawn_internal.h"

/* Whether the namespaces of a command also need a user namespace: a daemon without
 * CAP_SYS_ADMIN gets its PID namespace through one it owns (spawn_pidns_probe decides). Its
 * identity map ("uid uid 1"), formatted before any child runs. */
static bool ns_user;
static char ns_uid_map[32], ns_gid_map[32];

unsigned long spawn_ns_clone_flags(void)
{
    return CLONE_NEWPID | CLONE_NEWNS | (ns_user ? CLONE_NEWUSER : 0);
}

bool spawn_ns_userns(void)
{
    return ns_user;
}

/* Whether each command gets an IPC namespace of its own (spawn_ipcns_probe decides). */
static bool ns_ipc;

unsigned long spawn_ipc_clone_flag(void)
{
    return ns_ipc ? CLONE_NEWIPC : 0;
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
NO_SANITIZE int spawn_ns_setup(const char **step)
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

bool spawn_pidns_probe(bool *own_proc, bool *userns, char *why, size_t len)
{
    /* Directly where the daemon may (CAP_SYS_ADMIN), else through a user namespace. */
    snprintf(ns_uid_map, sizeof(ns_uid_map), "%u %u 1", (unsigned)geteuid(), (unsigned)geteuid());
    snprintf(ns_gid_map, sizeof(ns_gid_map), "%u %u 1", (unsigned)getegid(), (unsigned)getegid());
    long pid = -1;
    int e = 0;
    for (int attempt = 0; attempt < 2 && pid < 0; attempt++) {
        ns_user = attempt == 1;
        pid = syscall(SYS_clone, spawn_ns_clone_flags() | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid == 0) {
            /* As ns_init does: exit 0 with its own /proc, 4 without (shared), else failure. */
            const char *step = NULL;
            int rc = spawn_ns_setup(&step);
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

/*
 * An IPC namespace per command: a task's System V objects (found by key) and POSIX message
 * queues (found by name) live in it, die with the command's last process, and no other
 * command reaches them. That is what a reset needs where it cannot list them (gVisor has no
 * /proc/sysvipc, and its *_STAT calls do not list), and it keeps two commands apart. The test:
 * a child made as a command will be (CLONE_NEWIPC, with the PID namespace's user namespace
 * where a command gets one) creates a message queue by key; the daemon must not find it once
 * the child is gone. A clone refused (EPERM: no CAP_SYS_ADMIN and no user namespace; a
 * runtime's seccomp profile) or a queue that leaked leaves commands in the shared one.
 */
bool spawn_ipcns_probe(bool with_userns, char *why, size_t len)
{
    key_t key = (key_t)(0x5bd10000 | (getpid() & 0xffff));
    for (int i = 0; i < 16 && msgget(key, 0) >= 0; i++)
        key++; /* a key somebody uses here: another one */
    unsigned long flags = CLONE_NEWIPC | (with_userns ? spawn_ns_clone_flags() : 0);
    long pid = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid == 0)
        syscall(SYS_exit_group, msgget(key, IPC_CREAT | IPC_EXCL | 0600) >= 0 ? 0 : 2);
    if (pid < 0) {
        snprintf(why, len, "cannot create an IPC namespace (%s)", strerror(errno));
        return false;
    }
    int st;
    while (waitpid((pid_t)pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, len, "an IPC namespace's first process cannot create a message queue");
        return false;
    }
    int id = msgget(key, 0);
    if (id >= 0) {
        msgctl(id, IPC_RMID, NULL);
        snprintf(why, len, "an IPC namespace made by clone does not keep its objects apart");
        return false;
    }
    ns_ipc = true;
    return true;
}

/* The clone of spawn_ipcns_check: a child that ends at once. */
static int ipc_check_child(void *arg)
{
    (void)arg;
    return 0;
}

/* In a child process of the daemon's (no thread of sbxd's is left with the filter, nor a
 * thread's stack in its memory): the filter loaded, then the clone a command's would be. Its
 * exit status: 0, or the clone's errno. */
static int ipc_check_main(const struct harden_plan *h, bool pidns)
{
    struct sbxd_err e = {0};
    if (harden_thread(h, &e) < 0)
        return e.sys_errno ? e.sys_errno : EPERM;
    _Alignas(64) char stack[4096];
    pid_t slot = 0, pid;
    unsigned long key = h->clone_key;
    if (pidns) {
        /* As spawn_ns_init_start clones an init (with its user namespace, where it has one):
         * the child ends at once. */
        pid = (pid_t)syscall(SYS_clone,
                             spawn_ns_clone_flags() | CLONE_NEWIPC | CLONE_PARENT_SETTID | SIGCHLD,
                             NULL, &slot, key, key);
        if (pid == 0)
            syscall(SYS_exit_group, 0);
    } else {
        /* As spawn_child clones a command. */
        pid = clone(ipc_check_child, stack + sizeof(stack),
                    (int)(CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID | CLONE_NEWIPC | SIGCHLD),
                    NULL, &slot, (void *)key, (pid_t *)key);
    }
    int err = pid < 0 ? errno : 0;
    int st;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return err;
}

bool spawn_ipcns_check(const struct harden_plan *h, bool pidns, char *why, size_t len)
{
    if (!ns_ipc || !h->seccomp)
        return ns_ipc;
    int err = EAGAIN;
    pid_t pid = fork();
    if (pid == 0)
        _exit(ipc_check_main(h, pidns));
    int st;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (pid > 0 && WIFEXITED(st))
        err = WEXITSTATUS(st);
    if (err == 0)
        return true;
    ns_ipc = false;
    snprintf(why, len,
             "clone with an IPC namespace is refused under the spawning threads' filter (%s): "
             "something between sbxd and the kernel rewrites clone's arguments (valgrind does)",
             strerror(err));
    return false;
}
