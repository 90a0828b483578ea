/*
 * sbxd-probe: run inside a command, tries each syscall the deny-list refuses and prints one
 * line per attempt: "<name> <ERRNO>" (or "<name> OK"). Where it can, it passes arguments for
 * which an unfiltered kernel gives a different answer (EFAULT, EBADF, EIO, success), so an
 * EPERM proves the filter and not merely a lack of privilege.
 *
 * With an argument it is an observer instead, for what the host's /proc cannot see when sbxd
 * runs inside gVisor (the harness runs it there with `runsc exec`, or as a command):
 *   creds              NoNewPrivs and CapAmb lines as in /proc/self/status, from prctl
 *   signals            SigBlk and SigIgn lines as in /proc/self/status, from sigprocmask
 *                      and sigaction
 *   fds                its own open fds, one per line, ascending
 *   procs MARKER       one line per live (not zombie) process whose command line has MARKER
 *   daemon PID         exe, rss_kb, fds and oom_score_adj of process PID
 *   rss PID            "base <kB>" at once, then samples VmRSS every 2 ms until stdin ends,
 *                      then "peak <kB>"
 *   oom-lower          exit 0 if this process may lower its oom_score_adj to -999, else 3
 *   pipe-size          the capacity of the pipe on its stdout (F_GETPIPE_SZ), or -1
 *   attack MODE ...    what a hostile command tries (attack.c)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int attack_main(int argc, char **argv); /* attack.c */

static void report(const char *name, long rc)
{
    if (rc >= 0)
        printf("%s OK\n", name);
    else
        printf("%s %s\n", name, strerrorname_np(errno));
}

#define TRY(name, ...) report(name, syscall(__VA_ARGS__))

static int try_syscalls(void)
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
    TRY("pidfd_getfd", SYS_pidfd_getfd, -1, 0, 0); /* EBADF when allowed */
    TRY("kcmp", SYS_kcmp, getpid(), getpid(), 0xdead, 0, 0);
    TRY("process_madvise", SYS_process_madvise, -1, NULL, 0, 0, 0);
#ifdef SYS_modify_ldt
    TRY("modify_ldt", SYS_modify_ldt, 0xdead, NULL, 0);
#endif

    /* clone with a namespace flag: a new user namespace needs no privilege at all. */
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        waitpid((pid_t)pid, NULL, 0);
    report("clone_newuser", pid);
    TRY("clone3", SYS_clone3, NULL, 0);

#if defined(__x86_64__)
    /* The 32-bit ABI through int 0x80: getpid (20) there. In a child of its own: a kernel
     * without the 32-bit ABI (ia32_emulation off) answers int 0x80 with SIGSEGV, before any
     * filter; that is reported as ABSENT. */
    fflush(stdout);
    pid_t c32 = fork();
    if (c32 == 0) {
        long r32;
        __asm__ volatile("int $0x80" : "=a"(r32) : "a"(20L) : "memory");
        _exit(r32 < 0 ? (int)-r32 : 0);
    }
    int st32 = 0;
    if (c32 < 0 || waitpid(c32, &st32, 0) < 0)
        report("i386_abi", -1);
    else if (WIFSIGNALED(st32) && WTERMSIG(st32) == SIGSEGV)
        printf("i386_abi ABSENT\n");
    else if (WIFEXITED(st32) && WEXITSTATUS(st32) != 0)
        errno = WEXITSTATUS(st32), report("i386_abi", -1);
    else
        report("i386_abi", 0);
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

/* Read a small file into buf (NUL-terminated); returns its length or -1. */
static ssize_t slurp(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    ssize_t k;
    while (len < n - 1 && (k = read(fd, buf + len, n - 1 - len)) > 0)
        len += (size_t)k;
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

static int creds(void)
{
    printf("NoNewPrivs:\t%d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    unsigned long long amb = 0;
    for (int cap = 0; cap < 64; cap++) {
        int r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0);
        if (r < 0 && cap == 0) {
            /* No ambient set at all (gVisor has none): nothing can be in it. */
            printf("CapAmb:\tunsupported\n");
            return 0;
        }
        if (r < 0)
            break; /* past the last capability */
        if (r > 0)
            amb |= 1ULL << cap;
    }
    printf("CapAmb:\t%016llx\n", amb);
    return 0;
}

static int signals(void)
{
    sigset_t blocked;
    sigprocmask(SIG_BLOCK, NULL, &blocked);
    unsigned long long blk = 0, ign = 0;
    for (int sig = 1; sig < 65; sig++) {
        struct sigaction sa;
        if (sigismember(&blocked, sig) == 1)
            blk |= 1ULL << (sig - 1);
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            ign |= 1ULL << (sig - 1);
    }
    printf("SigBlk:\t%016llx\nSigIgn:\t%016llx\n", blk, ign);
    return 0;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 1;
    int fd[1024], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && atoi(e->d_name) != dirfd(d))
            fd[n++] = atoi(e->d_name);
    closedir(d);
    qsort(fd, (size_t)n, sizeof(fd[0]), cmp_int);
    for (int i = 0; i < n; i++)
        printf("%d\n", fd[i]);
    return 0;
}

/* Live processes (zombies excluded, this one too) whose command line, NULs read as spaces,
 * contains marker: the same test as the harness's procs_with on the host. */
static int procs(const char *marker)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == (int)getpid())
            continue;
        char p[300], buf[4096];
        snprintf(p, sizeof(p), "/proc/%s/stat", e->d_name);
        if (slurp(p, buf, sizeof(buf)) < 0)
            continue;
        const char *rp = strrchr(buf, ')');
        if (!rp || rp[1] != ' ' || rp[2] == 'Z')
            continue;
        char state = rp[2];
        int ppid = atoi(rp + 4), pid = atoi(e->d_name);
        snprintf(p, sizeof(p), "/proc/%s/cmdline", e->d_name);
        ssize_t len = slurp(p, buf, sizeof(buf));
        /* Empty for a moment in the middle of an execve: read again, as the harness does (a
         * kernel thread's, the children of pid 2, is always empty). */
        for (int i = 0; len == 0 && pid != 2 && ppid != 2 && i < 50; i++) {
            usleep(1000);
            len = slurp(p, buf, sizeof(buf));
        }
        if (len < 0)
            continue;
        for (ssize_t i = 0; i < len; i++)
            if (!buf[i])
                buf[i] = ' ';
        if (!strstr(buf, marker))
            continue;
        for (ssize_t i = 0; i < len; i++)
            if (buf[i] == '\n')
                buf[i] = ' '; /* one line per process */
        printf("%s %c %s\n", e->d_name, state, buf);
    }
    closedir(d);
    return 0;
}

static long status_kb(const char *pid, const char *key)
{
    char p[64], buf[8192];
    snprintf(p, sizeof(p), "/proc/%s/status", pid);
    if (slurp(p, buf, sizeof(buf)) < 0)
        return -1;
    char k[64];
    snprintf(k, sizeof(k), "\n%s:", key);
    const char *v = strstr(buf, k);
    return v ? strtol(v + strlen(k), NULL, 10) : -1;
}

static int daemon_info(const char *pid)
{
    char p[64], buf[4096];
    snprintf(p, sizeof(p), "/proc/%s/exe", pid);
    ssize_t n = readlink(p, buf, sizeof(buf) - 1);
    printf("exe %s\n", n > 0 ? (buf[n] = '\0', buf) : "unknown");
    printf("rss_kb %ld\n", status_kb(pid, "VmRSS"));
    snprintf(p, sizeof(p), "/proc/%s/fd", pid);
    DIR *d = opendir(p);
    int fds = -1;
    if (d) {
        struct dirent *e;
        fds = 0;
        while ((e = readdir(d)))
            fds += e->d_name[0] != '.';
        closedir(d);
    }
    printf("fds %d\n", fds);
    snprintf(p, sizeof(p), "/proc/%s/oom_score_adj", pid);
    printf("oom_score_adj %s", slurp(p, buf, sizeof(buf)) > 0 ? buf : "unknown\n");
    return 0;
}

static int rss(const char *pid)
{
    long base = status_kb(pid, "VmRSS"), peak = base;
    printf("base %ld\n", base);
    fflush(stdout);
    for (;;) {
        struct pollfd in = {.fd = 0, .events = POLLIN};
        int r = poll(&in, 1, 2);
        char c;
        if ((r < 0 && errno != EINTR) || (r > 0 && read(0, &c, 1) <= 0))
            break; /* stdin ended: the harness is done */
        long kb = status_kb(pid, "VmRSS");
        if (kb > peak)
            peak = kb;
    }
    printf("peak %ld\n", peak);
    return 0;
}

/* 0 when allowed, 3 when not (anything else: the probe did not run). */
static int oom_lower(void)
{
    int fd = open("/proc/self/oom_score_adj", O_WRONLY);
    return fd >= 0 && write(fd, "-999", 4) == 4 ? 0 : 3;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return try_syscalls();
    if (!strcmp(argv[1], "creds"))
        return creds();
    if (!strcmp(argv[1], "fds"))
        return fds();
    if (!strcmp(argv[1], "signals"))
        return signals();
    if (!strcmp(argv[1], "procs") && argc == 3)
        return procs(argv[2]);
    if (!strcmp(argv[1], "daemon") && argc == 3)
        return daemon_info(argv[2]);
    if (!strcmp(argv[1], "rss") && argc == 3)
        return rss(argv[2]);
    if (!strcmp(argv[1], "oom-lower"))
        return oom_lower();
    if (!strcmp(argv[1], "pipe-size")) {
        printf("%d\n", fcntl(1, F_GETPIPE_SZ));
        return 0;
    }
    if (!strcmp(argv[1], "attack"))
        return attack_main(argc - 2, argv + 2);
    fprintf(stderr, "usage: sbxd-probe [creds | signals | fds | procs MARKER | daemon PID | rss "
                    "PID | oom-lower | pipe-size | attack ...]\n");
    return 2;
}
