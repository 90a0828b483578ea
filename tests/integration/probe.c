/*
 * sbxd-probe: run inside a command, tries each syscall the deny-list refuses and prints one
 * line per attempt: "<name> <ERRNO>" (or "<name> OK"). Where it can, it passes arguments for
 * which an unfiltered kernel gives a different answer (EFAULT, EBADF, EIO, success), so an
 * EPERM proves the filter and not merely a lack of privilege.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void report(const char *name, long rc)
{
    if (rc >= 0)
        printf("%s OK\n", name);
    else
        printf("%s %s\n", name, strerrorname_np(errno));
}

#define TRY(name, ...) report(name, syscall(__VA_ARGS__))

int main(void)
{
    void *bad = (void *)1; /* an address no call can read */
    TRY("ptrace", SYS_ptrace, 0xdead, 0, 0, 0);
    TRY("process_vm_readv", SYS_process_vm_readv, 0x7ffffff0, NULL, 1, NULL, 1, 0);
    TRY("process_vm_writev", SYS_process_vm_writev, 0x7ffffff0, NULL, 1, NULL, 1, 0);
    TRY("mount", SYS_mount, bad, bad, bad, 0, NULL);
    TRY("umount2", SYS_umount2, bad, 0);
    TRY("pivot_root", SYS_pivot_root, bad, bad);
    TRY("unshare", SYS_unshare, 0); /* a no-op when allowed */
    TRY("setns", SYS_setns, -1, 0);
    TRY("bpf", SYS_bpf, -1, NULL, 0);
    TRY("perf_event_open", SYS_perf_event_open, NULL, 0, -1, -1, 0);
    TRY("userfaultfd", SYS_userfaultfd, -1);
    TRY("io_uring_setup", SYS_io_uring_setup, 0, NULL);
    TRY("io_uring_enter", SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0);
    TRY("io_uring_register", SYS_io_uring_register, -1, 0, NULL, 0);
    TRY("keyctl", SYS_keyctl, -1, 0, 0, 0, 0);
    TRY("add_key", SYS_add_key, bad, bad, NULL, 0, 0);
    TRY("request_key", SYS_request_key, bad, bad, NULL, 0);
    TRY("kexec_load", SYS_kexec_load, 0, 0, NULL, 0);
    TRY("init_module", SYS_init_module, NULL, 0, bad);
    TRY("finit_module", SYS_finit_module, -1, bad, 0);
    TRY("delete_module", SYS_delete_module, bad, 0);
    TRY("open_by_handle_at", SYS_open_by_handle_at, -1, bad, 0);
    TRY("name_to_handle_at", SYS_name_to_handle_at, -1, bad, bad, bad, 0);
    TRY("reboot", SYS_reboot, 0, 0, 0, NULL);
    TRY("swapon", SYS_swapon, bad, 0);
    TRY("swapoff", SYS_swapoff, bad);
    TRY("acct", SYS_acct, bad);
    TRY("syslog", SYS_syslog, 10, NULL, 0);
#ifdef SYS_iopl
    TRY("iopl", SYS_iopl, 0); /* lowering to 0 is allowed to anyone */
    TRY("ioperm", SYS_ioperm, 0, 0, 0);
#endif
    TRY("fsopen", SYS_fsopen, bad, 0);
    TRY("open_tree", SYS_open_tree, -1, bad, 0);
    TRY("move_mount", SYS_move_mount, -1, bad, -1, bad, 0);
    TRY("fsmount", SYS_fsmount, -1, 0, 0);
    TRY("fspick", SYS_fspick, -1, bad, 0);
    TRY("fsconfig", SYS_fsconfig, -1, 0, NULL, NULL, 0);
    TRY("mount_setattr", SYS_mount_setattr, -1, bad, 0, NULL, 0);

    /* clone with a namespace flag: a new user namespace needs no privilege at all. */
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        waitpid((pid_t)pid, NULL, 0);
    report("clone_newuser", pid);
    TRY("clone3", SYS_clone3, NULL, 0);

#if defined(__x86_64__)
    /* The 32-bit ABI through int 0x80: getpid (20) there. */
    long r32;
    __asm__ volatile("int $0x80" : "=a"(r32) : "a"(20L) : "memory");
    if (r32 < 0) {
        errno = (int)-r32;
        report("i386_abi", -1);
    } else {
        report("i386_abi", 0);
    }
#endif

    int s = socket(AF_INET, SOCK_STREAM, 0);
    report("socket_inet", s);
    if (s >= 0)
        close(s);
    s = socket(AF_INET6, SOCK_DGRAM, 0);
    report("socket_inet6", s);
    if (s >= 0)
        close(s);
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    report("socket_unix", s);
    if (s >= 0)
        close(s);
    return 0;
}
