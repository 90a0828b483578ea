/*
 * bench_gvisor.c - what sbxd-bench --gvisor needs beside its HTTP client: the floor helper
 * that runs inside the same gVisor sandbox as sbxd, and the memory of a sandbox.
 *
 * The helper (sbxd-bench --spawn-helper PORT DIR, started next to sbxd inside the sandbox,
 * as root, outside every confinement of sbxd's) answers one line per request on the first
 * loopback connection it gets, the bench's, made before any command runs; then it stops
 * listening, so that no command of the sandbox's can ask it anything:
 *   once              a bare fork + exec of sh -c 'echo hi', its stdout a pipe drained to the
 *                     end, and wait: "OK MS"
 *   rate T SECS       T threads doing that back to back for SECS seconds: "OK SPAWNS/S"
 *   dd-write NAME MIB dd of MIB MiB of zeros to DIR/NAME (fsync'ed, as sbxd's uploads are):
 *                     "OK MS"
 *   dd-read NAME      dd of DIR/NAME to /dev/null: "OK MS"
 *   net-send NAME PORT  a plain sender: connects to 127.0.0.1:PORT (the bench's, outside the
 *                     sandbox) and sendfile()s DIR/NAME whole, then closes: "OK MS"
 *   net-recv NAME PORT  a plain receiver: connects, reads to EOF through 1 MiB into DIR/NAME,
 *                     fsync, closes: "OK MS"
 * NAME: a file name (letters, digits, '-', '_' and '.', not first), never a path. The plain
 * sender and receiver are what any server in the sandbox could do at best with the same bytes
 * over the same network: the ceiling of sbxd's GET and PUT /files there.
 * and "ERR why" when one fails. The bench interleaves "once" with its requests to sbxd, so
 * both see the same machine. A benchmark fixture, not part of sbxd.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_gvisor.h"
#include "bench_net.h"

extern char **environ;

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* fork + exec argv, its stdout into a pipe read to the end, wait: 0 when it exited 0. */
static int run_drained(char *const *argv)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    close(p[1]);
    char buf[4096];
    while (read(p[0], buf, sizeof(buf)) > 0) {
    }
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static char *const ECHO_ARGV[] = {(char *)"/bin/sh", (char *)"-c", (char *)"echo hi", NULL};

struct rate_arg {
    double end;
    long n;
    bool failed;
};

static void *rate_main(void *p)
{
    struct rate_arg *a = p;
    while (mono_ms() < a->end) {
        if (run_drained(ECHO_ARGV) != 0) {
            a->failed = true;
            break;
        }
        if (mono_ms() <= a->end)
            a->n++;
    }
    return NULL;
}

static void answer(int fd, const char *line)
{
    size_t n = strlen(line);
    while (n) {
        ssize_t k = send(fd, line, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        line += k;
        n -= (size_t)k;
    }
}

/* The directory dd-write and dd-read name files in (--spawn-helper's DIR). */
static const char *helper_dir;

/* DIR/name into path when name is a plain file name; false otherwise. */
static bool helper_path(const char *name, char *path, size_t len)
{
    size_t n = strlen(name);
    if (!n || n > 64 || name[0] == '.' ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789-_.") != n)
        return false;
    int k = snprintf(path, len, "%s/%s", helper_dir, name);
    return k > 0 && (size_t)k < len;
}

/* net-send / net-recv: 0 when the bytes went whole (and, received, reached the disk). */
static int plain_transfer(bool send_it, const char *path, int port)
{
    int file = send_it ? open(path, O_RDONLY | O_CLOEXEC)
                       : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int fd = file >= 0 ? bench_helper_connect(port, 0) : -1; /* one try: the bench listens */
    int rc = fd >= 0 ? 0 : -1;
    if (!rc && send_it) {
        struct stat st;
        off_t off = 0;
        rc = fstat(file, &st);
        while (!rc && off < st.st_size)
            if (sendfile(fd, file, &off, (size_t)(st.st_size - off)) <= 0)
                rc = -1;
    } else if (!rc) {
        char *buf = malloc(1 << 20);
        ssize_t k = buf ? 1 : -1;
        while (k > 0 && (k = recv(fd, buf, 1 << 20, 0)) > 0)
            for (ssize_t w = 0; w < k;) {
                ssize_t n = write(file, buf + w, (size_t)(k - w));
                if (n <= 0) {
                    k = -1;
                    break;
                }
                w += n;
            }
        rc = k == 0 && fsync(file) == 0 ? 0 : -1;
        free(buf);
    }
    if (fd >= 0)
        close(fd);
    if (file >= 0)
        close(file);
    return rc;
}

static void serve_line(int fd, char *line)
{
    char out[128], name[80], path[600];
    int threads = 0, mib = 0, port = 0;
    double secs = 0;
    if (strcmp(line, "once") == 0) {
        double t0 = mono_ms();
        if (run_drained(ECHO_ARGV) == 0)
            snprintf(out, sizeof(out), "OK %.6f\n", mono_ms() - t0);
        else
            snprintf(out, sizeof(out), "ERR sh -c 'echo hi' failed\n");
    } else if (sscanf(line, "rate %d %lf", &threads, &secs) == 2 && threads > 0 && threads <= 64 &&
               secs > 0 && secs <= 60) {
        struct rate_arg a[64];
        pthread_t t[64];
        double end = mono_ms() + secs * 1e3, t0 = mono_ms();
        int started = 0;
        for (int i = 0; i < threads; i++) {
            a[i] = (struct rate_arg){.end = end};
            if (pthread_create(&t[i], NULL, rate_main, &a[i]) == 0)
                started++;
            else
                break;
        }
        long n = 0;
        bool failed = started != threads;
        for (int i = 0; i < started; i++) {
            pthread_join(t[i], NULL);
            n += a[i].n;
            failed |= a[i].failed;
        }
        double dt = (mono_ms() - t0) / 1e3;
        if (failed)
            snprintf(out, sizeof(out), "ERR a spawn failed\n");
        else
            snprintf(out, sizeof(out), "OK %.3f\n", (double)n / (dt > secs ? dt : secs));
    } else if (sscanf(line, "dd-write %79s %d", name, &mib) == 2 && mib > 0 && mib <= 4096 &&
               helper_path(name, path, sizeof(path))) {
        char of[620], count[32];
        snprintf(of, sizeof(of), "of=%s", path);
        snprintf(count, sizeof(count), "count=%d", mib);
        char *argv[] = {(char *)"/bin/dd",    (char *)"if=/dev/zero", of,  (char *)"bs=1M", count,
                        (char *)"conv=fsync", (char *)"status=none",  NULL};
        double t0 = mono_ms();
        if (run_drained(argv) == 0)
            snprintf(out, sizeof(out), "OK %.3f\n", mono_ms() - t0);
        else
            snprintf(out, sizeof(out), "ERR dd failed\n");
    } else if (sscanf(line, "dd-read %79s", name) == 1 && helper_path(name, path, sizeof(path))) {
        char in[620];
        snprintf(in, sizeof(in), "if=%s", path);
        char *argv[] = {(char *)"/bin/dd",     in,  (char *)"of=/dev/null", (char *)"bs=1M",
                        (char *)"status=none", NULL};
        double t0 = mono_ms();
        if (run_drained(argv) == 0)
            snprintf(out, sizeof(out), "OK %.3f\n", mono_ms() - t0);
        else
            snprintf(out, sizeof(out), "ERR dd failed\n");
    } else if ((sscanf(line, "net-send %79s %d", name, &port) == 2 ||
                sscanf(line, "net-recv %79s %d", name, &port) == 2) &&
               port > 0 && port < 65536 && helper_path(name, path, sizeof(path))) {
        double t0 = mono_ms();
        if (plain_transfer(line[4] == 's', path, port) == 0)
            snprintf(out, sizeof(out), "OK %.3f\n", mono_ms() - t0);
        else
            snprintf(out, sizeof(out), "ERR %s failed\n", line[4] == 's' ? "net-send" : "net-recv");
    } else {
        snprintf(out, sizeof(out), "ERR unknown request\n");
    }
    answer(fd, out);
}

int bench_spawn_helper_serve(int port, const char *dir)
{
    helper_dir = dir;
    int s = bench_listen(port, 1);
    if (s < 0) {
        perror("sbxd-bench --spawn-helper");
        return 1;
    }
    int fd = bench_accept(s);
    close(s); /* one client, the bench's */
    if (fd < 0)
        return 1;
    char buf[1024];
    size_t len = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (k <= 0)
            break;
        len += (size_t)k;
        char *nl;
        while ((nl = memchr(buf, '\n', len))) {
            *nl = '\0';
            serve_line(fd, buf);
            len -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len);
        }
        if (len == sizeof(buf) - 1)
            break; /* a line too long */
    }
    close(fd);
    return 0;
}

/* ---- the bench's side ---- */

int bench_helper_connect(int port, double timeout_ms)
{
    double end = mono_ms() + timeout_ms;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        if (fd >= 0)
            close(fd);
        if (mono_ms() > end)
            return -1;
        usleep(20000);
    }
}

static int helper_send(int fd, const char *request, char *err, size_t errlen)
{
    char line[600];
    int n = snprintf(line, sizeof(line), "%s\n", request);
    if (n <= 0 || (size_t)n >= sizeof(line) || send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
        snprintf(err, errlen, "cannot ask the helper: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int helper_answer(int fd, double *value, char *err, size_t errlen)
{
    char line[600];
    size_t len = 0;
    for (;;) {
        ssize_t k = recv(fd, line + len, sizeof(line) - 1 - len, 0);
        if (k <= 0) {
            snprintf(err, errlen, "the helper closed its connection");
            return -1;
        }
        len += (size_t)k;
        line[len] = '\0';
        if (memchr(line, '\n', len))
            break;
        if (len == sizeof(line) - 1) {
            snprintf(err, errlen, "the helper's answer is too long");
            return -1;
        }
    }
    if (sscanf(line, "OK %lf", value) == 1)
        return 0;
    line[strcspn(line, "\n")] = '\0';
    snprintf(err, errlen, "the helper: %s", line);
    return -1;
}

int bench_helper_ask(int fd, const char *request, double *value, char *err, size_t errlen)
{
    return helper_send(fd, request, err, errlen) < 0 ? -1 : helper_answer(fd, value, err, errlen);
}

int bench_helper_plain(int fd, bool to_bench, const char *name, uint64_t bytes, double *secs,
                       char *err, size_t errlen)
{
    int s = bench_listen(0, 1);
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    if (s < 0 || getsockname(s, (struct sockaddr *)&a, &alen) < 0) {
        snprintf(err, errlen, "cannot listen: %s", strerror(errno));
        if (s >= 0)
            close(s);
        return -1;
    }
    char req[160];
    snprintf(req, sizeof(req), "%s %s %d", to_bench ? "net-send" : "net-recv", name,
             ntohs(a.sin_port));
    if (helper_send(fd, req, err, errlen) < 0) {
        close(s);
        return -1;
    }
    int c = bench_accept(s);
    close(s);
    if (c < 0) {
        snprintf(err, errlen, "the helper never connected");
        return -1;
    }
    char *buf = calloc(1, 1 << 20);
    uint64_t moved = 0;
    double t0 = mono_ms();
    if (buf && to_bench) {
        ssize_t k;
        while ((k = recv(c, buf, 1 << 20, 0)) > 0)
            moved += (uint64_t)k;
    } else if (buf) {
        while (moved < bytes) {
            size_t n = bytes - moved < (1 << 20) ? (size_t)(bytes - moved) : (1 << 20);
            ssize_t k = send(c, buf, n, MSG_NOSIGNAL);
            if (k <= 0)
                break;
            moved += (uint64_t)k;
        }
        shutdown(c, SHUT_WR);
        while (recv(c, buf, 1 << 20, 0) > 0) { /* its close: the bytes are on disk */
        }
    }
    *secs = (mono_ms() - t0) / 1e3;
    free(buf);
    close(c);
    double ms;
    if (helper_answer(fd, &ms, err, errlen) < 0)
        return -1;
    if (moved != bytes) {
        snprintf(err, errlen, "%s moved %llu of %llu bytes", to_bench ? "net-send" : "net-recv",
                 (unsigned long long)moved, (unsigned long long)bytes);
        return -1;
    }
    return 0;
}

/* The Pss of one process (smaps_rollup), KiB; 0 when it cannot be read. */
static long pss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "Pss: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static int parent_of(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    int ppid = -1;
    if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return -1;
    return ppid;
}

static bool cmdline_has(int pid, const char *what, const char *what2)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!buf[i])
            buf[i] = ' ';
    buf[n] = '\0';
    return strstr(buf, what) && (!what2 || strstr(buf, what2));
}

long bench_sandbox_pss_kb(const char *tag)
{
    /* The sentry: "runsc-sandbox ... boot", naming tag (the sandbox's --root); then its
     * descendants (the ptrace platform's stubs, where the sandbox's processes run). */
    int pids[4096], n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *e;
    int all[32768], nall = 0;
    while ((e = readdir(d)) && nall < (int)(sizeof(all) / sizeof(all[0]))) {
        int pid = atoi(e->d_name);
        if (pid > 0)
            all[nall++] = pid;
    }
    closedir(d);
    for (int i = 0; i < nall && n < 4096; i++)
        if (cmdline_has(all[i], "runsc-sandbox", tag) && cmdline_has(all[i], " boot", NULL))
            pids[n++] = all[i];
    if (!n)
        return -1;
    for (bool grew = true; grew;) {
        grew = false;
        for (int i = 0; i < nall && n < 4096; i++) {
            int pp = parent_of(all[i]);
            bool in = false, parent_in = false;
            for (int j = 0; j < n; j++) {
                in |= pids[j] == all[i];
                parent_in |= pids[j] == pp;
            }
            if (!in && parent_in) {
                pids[n++] = all[i];
                grew = true;
            }
        }
    }
    long kb = 0;
    for (int i = 0; i < n; i++)
        kb += pss_kb(pids[i]);
    return kb;
}
