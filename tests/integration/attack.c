/*
 * attack.c - `sbxd-probe attack MODE ...`: what a hostile command tries against sbxd and
 * against the other commands beside it. Each mode prints one line per attempt,
 * "<what> OK" or "<what> <ERRNO>" (plus a detail where one is useful), for the integration
 * tests (test_attacks.c) to judge.
 *
 *   socket PORT       sockets that "network": false must refuse, the high-bit family trick
 *                     first: syscall(socket, 0x100000000 | AF_INET, ...), which the kernel
 *                     takes as AF_INET; when that opens, it connects to 127.0.0.1:PORT and
 *                     asks for /healthz ("reached 200" if sbxd answered)
 *   stop SECONDS      kill(-1, SIGSTOP) in a loop: every process this one may signal
 *   steal MARKER      against each other process whose command line holds MARKER:
 *                     pidfd_getfd of its stdin, kcmp, /proc/PID/mem, /proc/PID/environ and
 *                     whether it may be signalled (kill 0); "found N" first
 *   personality       the personality(2) values a command may and may not set
 *   leave KEY         state a task leaves for the next outside the workspace: a SysV shared
 *                     memory segment, message queue and semaphore set of key KEY and a POSIX
 *                     message queue "/sbxd-KEY", each with something in it ("<what> OK"; the
 *                     POSIX queue's message on a line of its own, "mq_send OK": gVisor
 *                     2022-12 makes the queue but has no mq_timedsend)
 *   find KEY          whether they are still there: "<what> OK" (found) or "<what> ENOENT"
 *   nsflags           clone with each namespace flag, "clone_newipc EPERM" and the like: with
 *                     CLONE_THREAD but not CLONE_SIGHAND, which the kernel refuses (EINVAL)
 *                     before it looks at privileges, so EPERM is the seccomp filter's answer
 *                     and nothing is ever created
 *   forkrun FILE S    a fork-runner: a child that leaves the session (setsid) and ignores
 *                     SIGHUP forks, the parent exits, the child forks again..., in a tight
 *                     loop, each one appending to FILE every few ms; for at most S seconds
 *                     (the first process sleeps that long, once the runner left its session)
 *   tty PATH          another command's terminal (its /dev/pts/N), opened read-write,
 *                     read-only and write-only as a hostile command would, to forge its
 *                     output or take its input; through each that opens, a forged line is
 *                     written ("forged N") and what is waiting read ("stole N")
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/personality.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static void say(const char *what, long rc)
{
    if (rc >= 0)
        printf("%s OK\n", what);
    else
        printf("%s %s\n", what, strerrorname_np(errno));
    fflush(stdout);
}

static int ask_health(int s, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        say("connect", -1);
        return 0;
    }
    const char req[] = "GET /healthz HTTP/1.0\r\n\r\n";
    char buf[64] = "";
    if (write(s, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1) &&
        read(s, buf, sizeof(buf) - 1) > 12)
        printf("reached %.3s\n", buf + 9);
    return 0;
}

static int sockets(int port)
{
    long s = syscall(SYS_socket, 0x100000000UL | AF_INET, SOCK_STREAM, 0);
    say("socket_highbit_inet", s);
    if (s >= 0) {
        ask_health((int)s, port);
        close((int)s);
    }
    static const struct {
        const char *what;
        unsigned long family;
        int type;
    } tries[] = {
        {"socket_inet", AF_INET, SOCK_STREAM},
        {"socket_highbit_inet6", 0x100000000UL | AF_INET6, SOCK_DGRAM},
        {"socket_netlink", AF_NETLINK, SOCK_RAW},
        {"socket_vsock", AF_VSOCK, SOCK_STREAM},
        {"socket_highbit_unix", 0x100000000UL | AF_UNIX, SOCK_STREAM},
        {"socket_unix", AF_UNIX, SOCK_STREAM},
    };
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        s = syscall(SYS_socket, tries[i].family, tries[i].type, 0);
        say(tries[i].what, s);
        if (s >= 0)
            close((int)s);
    }
    int sv[2];
    long r = syscall(SYS_socketpair, 0x100000000UL | AF_INET, SOCK_STREAM, 0, sv);
    say("socketpair_highbit_inet", r);
    r = socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    say("socketpair_unix", r);
    return 0;
}

static int stop_all(int seconds)
{
    time_t end = time(NULL) + seconds;
    printf("spinning\n");
    fflush(stdout);
    while (time(NULL) < end)
        for (int i = 0; i < 1000; i++)
            kill(-1, SIGSTOP);
    return 0;
}

static int steal_one(pid_t pid)
{
    char path[64], buf[4096];
    long pfd = syscall(SYS_pidfd_open, pid, 0);
    say("pidfd_open", pfd);
    if (pfd >= 0) {
        long fd = syscall(SYS_pidfd_getfd, (int)pfd, 0, 0);
        say("pidfd_getfd", fd);
        if (fd >= 0)
            close((int)fd);
        close((int)pfd);
    } else {
        /* Without a pidfd of it, an invalid one: EBADF if allowed, EPERM if filtered. */
        say("pidfd_getfd", syscall(SYS_pidfd_getfd, -1, 0, 0));
    }
    say("kcmp", syscall(SYS_kcmp, getpid(), pid, KCMP_FILE, 0, 0));
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    say("proc_mem", fd);
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
    if (n == 0) {
        errno = EACCES; /* an empty environ: the kernel hid it */
        n = -1;
    }
    say("environ", n);
    if (fd >= 0)
        close(fd);
    say("signal", kill(pid, 0));
    return 0;
}

static int steal(const char *marker)
{
    DIR *d = opendir("/proc");
    pid_t found[64];
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 64) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], cmd[512];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, cmd, sizeof(cmd) - 1);
        close(fd);
        if (len <= 0)
            continue;
        for (ssize_t i = 0; i < len; i++)
            cmd[i] = cmd[i] ? cmd[i] : ' ';
        cmd[len] = '\0';
        if (strstr(cmd, marker) && !strstr(cmd, "attack"))
            found[n++] = pid;
    }
    if (d)
        closedir(d);
    printf("found %d\n", n);
    for (int i = 0; i < n; i++)
        steal_one(found[i]);
    return 0;
}

static int personas(void)
{
    static const struct {
        const char *what;
        unsigned long value;
    } tries[] = {
        {"persona_query", 0xffffffffUL},
        {"persona_linux", PER_LINUX},
        {"persona_linux32", PER_LINUX32},
        {"persona_uname26", UNAME26},
        {"persona_read_implies_exec", READ_IMPLIES_EXEC},
        {"persona_addr_no_randomize", ADDR_NO_RANDOMIZE},
        {"persona_mmap_page_zero", MMAP_PAGE_ZERO},
        {"persona_highbit_read_implies_exec", 0x100000000UL | READ_IMPLIES_EXEC},
        {"persona_almost_all", 0xfffffff7UL},
    };
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        say(tries[i].what, syscall(SYS_personality, tries[i].value));
        syscall(SYS_personality, PER_LINUX);
    }
    return 0;
}

/* The POSIX message queue's name for key. */
static void mq_name(char *out, size_t n, key_t key)
{
    snprintf(out, n, "/sbxd-%x", (unsigned)key);
}

static int leave(key_t key)
{
    int shm = shmget(key, 4096, IPC_CREAT | 0600);
    say("shm", shm);
    char *p = shm >= 0 ? shmat(shm, NULL, 0) : (void *)-1;
    if (p != (void *)-1) {
        strcpy(p, "left by the last task");
        shmdt(p);
    }
    int msg = msgget(key, IPC_CREAT | 0600);
    struct {
        long type;
        char text[32];
    } m = {1, "left by the last task"};
    say("msg", msg < 0 ? -1 : msgsnd(msg, &m, sizeof(m.text), IPC_NOWAIT));
    int sem = semget(key, 1, IPC_CREAT | 0600);
    say("sem", sem < 0 ? -1 : semctl(sem, 0, SETVAL, 7));
    char name[32];
    mq_name(name, sizeof(name), key);
    mqd_t q = mq_open(name, O_CREAT | O_WRONLY, 0600, NULL);
    say("mq", q == (mqd_t)-1 ? -1 : 0);
    if (q != (mqd_t)-1)
        say("mq_send", mq_send(q, "left", 4, 0));
    return 0;
}

static int find(key_t key)
{
    say("shm", shmget(key, 0, 0));
    say("msg", msgget(key, 0));
    say("sem", semget(key, 0, 0));
    char name[32];
    mq_name(name, sizeof(name), key);
    mqd_t q = mq_open(name, O_RDONLY);
    say("mq", q == (mqd_t)-1 ? -1 : 0);
    return 0;
}

static int nsflags(void)
{
    static const struct {
        const char *what;
        unsigned long flag;
    } flags[] = {
        {"clone_newipc", CLONE_NEWIPC},       {"clone_newns", CLONE_NEWNS},
        {"clone_newpid", CLONE_NEWPID},       {"clone_newuser", CLONE_NEWUSER},
        {"clone_newuts", CLONE_NEWUTS},       {"clone_newnet", CLONE_NEWNET},
        {"clone_newcgroup", CLONE_NEWCGROUP},
    };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        long pid = syscall(SYS_clone, flags[i].flag | CLONE_THREAD | SIGCHLD, 0, NULL, NULL, 0);
        if (pid == 0)
            _exit(0); /* (cannot happen: the kernel refuses the flags together) */
        say(flags[i].what, pid);
    }
    return 0;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Each process lives for one fork: a look at /proc finds it gone, or finds its child that
 * was not there a moment before. */
static int forkrun(const char *file, int seconds)
{
    int ready[2];
    if (pipe(ready) < 0)
        return 1;
    pid_t first = fork();
    if (first < 0)
        return 1;
    if (first > 0) {
        char c;
        close(ready[1]);
        if (read(ready[0], &c, 1) == 1)
            printf("running\n");
        fflush(stdout);
        sleep((unsigned)seconds);
        return 0;
    }
    close(ready[0]);
    setsid();
    /* As `setsid nohup` would: the reset's freeze then does not end it by itself. Its group
     * is orphaned (its leader's parent is outside the session), so when a member exits while
     * another is stopped, the kernel sends the group SIGHUP and SIGCONT: a runner that dies of
     * that SIGHUP is killed before any look finds it (the reset then counts no stray), and
     * one that ignores it runs on, continued, and must be found. */
    signal(SIGHUP, SIG_IGN);
    (void)!write(ready[1], "r", 1);
    close(ready[1]);
    int64_t end = mono_ms() + (int64_t)seconds * 1000, last = 0;
    for (;;) {
        int64_t now = mono_ms();
        if (now >= end)
            _exit(0);
        if (now - last >= 5) {
            last = now;
            int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd >= 0) {
                (void)!write(fd, "still here\n", 11);
                close(fd);
            }
        }
        pid_t c = fork();
        if (c > 0)
            _exit(0);
        if (c < 0)
            usleep(100);
        /* (the child: on it goes, with the time of the last write its parent had) */
    }
}

static int tty_steal(const char *path)
{
    static const struct {
        const char *what;
        int flags;
    } tries[] = {{"tty_rdwr", O_RDWR}, {"tty_rdonly", O_RDONLY}, {"tty_wronly", O_WRONLY}};
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        int fd = open(path, tries[i].flags | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        say(tries[i].what, fd);
        if (fd < 0)
            continue;
        static const char forged[] = "FORGED-BY-ANOTHER-COMMAND\n";
        if (tries[i].flags != O_RDONLY)
            printf("forged %zd\n", write(fd, forged, sizeof(forged) - 1));
        char buf[256];
        if (tries[i].flags != O_WRONLY)
            printf("stole %zd\n", read(fd, buf, sizeof(buf)));
        fflush(stdout);
        close(fd);
    }
    return 0;
}

int attack_main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[0], "leave"))
        return leave((key_t)strtol(argv[1], NULL, 0));
    if (argc == 2 && !strcmp(argv[0], "find"))
        return find((key_t)strtol(argv[1], NULL, 0));
    if (argc == 1 && !strcmp(argv[0], "nsflags"))
        return nsflags();
    if (argc == 3 && !strcmp(argv[0], "forkrun"))
        return forkrun(argv[1], atoi(argv[2]));
    if (argc == 2 && !strcmp(argv[0], "socket"))
        return sockets(atoi(argv[1]));
    if (argc == 2 && !strcmp(argv[0], "stop"))
        return stop_all(atoi(argv[1]));
    if (argc == 2 && !strcmp(argv[0], "steal"))
        return steal(argv[1]);
    if (argc == 1 && !strcmp(argv[0], "personality"))
        return personas();
    if (argc == 2 && !strcmp(argv[0], "tty"))
        return tty_steal(argv[1]);
    fprintf(stderr, "usage: sbxd-probe attack [socket PORT | stop SECONDS | steal MARKER | "
                    "personality | leave KEY | find KEY | nsflags | forkrun FILE SECONDS | "
                    "tty PATH]\n");
    return 2;
}
