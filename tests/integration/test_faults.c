/*
 * Fault injection: a full workspace filesystem, sbxd out of descriptors or processes,
 * commands that ignore SIGTERM or close their output early, and sbxd killed with SIGKILL in
 * the middle of its work and started again on the same workspace. Each fault must end in a
 * clear error or a clean recovery: never a hang, a crash, a corrupt or partial file, or a
 * leaked process or descriptor.
 *
 * Every test starts a daemon of its own: faults never touch the shared one.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define MIB (1024 * 1024)

/* A marker unique to this run and call, for the command lines of the processes a test
 * starts ("sleep 30.<pid><n>" is a valid sleep). */
static const char *marker(char *buf, size_t n)
{
    static int seq;
    snprintf(buf, n, "30.%d%d", (int)getpid() % 100000, ++seq);
    return buf;
}

/* ---- raw HTTP/1.1 on a socket of our own: keep-alive and half-sent bodies ---- */

static int raw_connect(const struct daemon *d)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_msg(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s",
                  strerror(errno));
    return s;
}

static bool raw_send(int s, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(s, c, n, MSG_NOSIGNAL);
        if (k <= 0)
            return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

struct raw_resp {
    long status;
    char *head; /* status line and headers */
    char *body; /* de-chunked */
    size_t len;
    cJSON *json;
};

static void raw_resp_free(struct raw_resp *r)
{
    free(r->head);
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof(*r));
}

/* Wait until end for bytes on s and append them to *buf: 1, or 0 when the peer closed,
 * -1 on a timeout. */
static int recv_more(int s, char **buf, size_t *len, size_t *cap, double end)
{
    int left = (int)(end - now_ms() + 0.999);
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (left <= 0)
        return -1;
    int rc = poll(&p, 1, left);
    if (rc == 0)
        return -1;
    if (rc < 0)
        return 0;
    if (*len + 65536 + 1 > *cap) {
        *cap = (*len + 65536 + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    ssize_t k = recv(s, *buf + *len, *cap - *len - 1, 0);
    if (k <= 0)
        return 0;
    *len += (size_t)k;
    (*buf)[*len] = '\0';
    return 1;
}

/*
 * Read one response from s within ms: Content-Length or chunked framing. Returns 1 with r
 * filled, 0 if the connection closed before a whole response, -1 on a timeout.
 */
static int raw_read(int s, int ms, struct raw_resp *r)
{
    memset(r, 0, sizeof(*r));
    double end = now_ms() + ms;
    size_t cap = 0, len = 0;
    char *buf = NULL;
    char *hend;
    int got;
    for (;;) {
        if (buf && (hend = strstr(buf, "\r\n\r\n")))
            break;
        if ((got = recv_more(s, &buf, &len, &cap, end)) != 1) {
            free(buf);
            return got;
        }
    }
    size_t hlen = (size_t)(hend - buf) + 4;
    r->head = strndup(buf, hlen);
    r->status = strtol(r->head + 9, NULL, 10);
    const char *cl = strcasestr(r->head, "\r\nContent-Length:");
    bool chunked = strcasestr(r->head, "\r\nTransfer-Encoding: chunked") != NULL;
    size_t at = hlen;
    r->body = malloc(1);
    got = 1;
    if (chunked) {
        for (;;) {
            char *eol;
            while (!(eol = strstr(buf + at, "\r\n")))
                if ((got = recv_more(s, &buf, &len, &cap, end)) != 1)
                    goto short_read;
            size_t sz = strtoul(buf + at, NULL, 16);
            size_t data = (size_t)(eol - buf) + 2;
            while (len < data + sz + 2)
                if ((got = recv_more(s, &buf, &len, &cap, end)) != 1)
                    goto short_read;
            if (sz == 0)
                break;
            r->body = realloc(r->body, r->len + sz + 1);
            memcpy(r->body + r->len, buf + data, sz);
            r->len += sz;
            at = data + sz + 2;
        }
    } else {
        size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
        while (len < hlen + want)
            if ((got = recv_more(s, &buf, &len, &cap, end)) != 1)
                goto short_read;
        r->body = realloc(r->body, want + 1);
        memcpy(r->body, buf + hlen, want);
        r->len = want;
    }
    r->body[r->len] = '\0';
    r->json = cJSON_ParseWithLength(r->body, r->len);
    free(buf);
    return 1;
short_read:
    free(buf);
    raw_resp_free(r);
    return got;
}

/* Send one request on s (keep-alive) and read its answer; returns what raw_read does. */
static int raw_request(int s, const char *method, const char *path, const char *body,
                       size_t body_len, int ms, struct raw_resp *r)
{
    char head[1024];
    int n = snprintf(
        head, sizeof(head),
        "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", method,
        path, method[0] == 'P' && path[1] == 'f' ? "application/octet-stream" : "application/json",
        body_len);
    if (!raw_send(s, head, (size_t)n) || (body_len && !raw_send(s, body, body_len))) {
        memset(r, 0, sizeof(*r));
        return 0;
    }
    return raw_read(s, ms, r);
}

/* The error shape of every route but the legacy ones: status, code, and a message that
 * contains what. */
static void assert_error_says(const struct raw_resp *r, long status, const char *code,
                              const char *what)
{
    ck_assert_msg(r->status == status, "status %ld, expected %ld: %s", r->status, status, r->body);
    ck_assert_msg(strcasestr(r->head, "\r\nContent-Type: application/json"), "not JSON: %s",
                  r->head);
    ck_assert_msg(cJSON_IsObject(r->json) && cJSON_GetArraySize(r->json) == 2, "body: %s", r->body);
    ck_assert_str_eq(jstr(r->json, "code"), code);
    ck_assert_msg(strstr(jstr(r->json, "message"), what), "message without '%s': %s", what,
                  r->body);
}

/* ---- files ---- */

/* Pseudo-random bytes (xorshift32), reproducible. */
static unsigned char *pattern(size_t n, uint32_t x)
{
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (unsigned char)x;
    }
    return b;
}

/* Whether the file at path holds exactly these n bytes. */
static bool file_is(const char *path, const void *want, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && (size_t)st.st_size == n;
    char *got = malloc(n + 1);
    size_t at = 0;
    ssize_t k;
    while (ok && at < n && (k = read(fd, got + at, n - at)) > 0)
        at += (size_t)k;
    ok = ok && at == n && memcmp(got, want, n) == 0;
    free(got);
    close(fd);
    return ok;
}

static bool exists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Upload temporary files (".sbxd-upload-*") anywhere beneath dir. */
static int temp_files_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strncmp(e->d_name, ".sbxd-upload-", 13) == 0)
            n++;
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            n += temp_files_in(sub);
    }
    closedir(d);
    return n;
}

/* Wait up to ms for no temporary file beneath dir; returns how many remain. */
static int wait_no_temp_files(const char *dir, int ms)
{
    double end = now_ms() + ms * SLOW;
    int n;
    while ((n = temp_files_in(dir)) > 0 && now_ms() < end)
        usleep(10000);
    return n;
}

/* A small tmpfs on a fresh directory (dir: a mkdtemp template); false when this test may
 * not mount (not root). */
static bool mount_small(char *dir, const char *size)
{
    if (geteuid() != 0)
        return false;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char opts[64];
    snprintf(opts, sizeof(opts), "size=%s,mode=0755", size);
    ck_assert_msg(mount("tmpfs", dir, "tmpfs", 0, opts) == 0, "mount tmpfs on %s: %s", dir,
                  strerror(errno));
    return true;
}

static void unmount_small(const char *dir)
{
    if (umount2(dir, 0) < 0)
        ck_assert_msg(umount2(dir, MNT_DETACH) == 0, "umount %s: %s", dir, strerror(errno));
    rmdir(dir);
}

static unsigned long free_kib(const char *dir)
{
    struct statvfs v;
    ck_assert_int_eq(statvfs(dir, &v), 0);
    return (unsigned long)(v.f_bavail * v.f_frsize / 1024);
}

static struct http_resp put(const struct daemon *d, const char *path, const void *body, size_t n)
{
    struct http_resp r;
    int rc = http_request(d, "PUT", path, "application/octet-stream", body, n, 30000, &r);
    ck_assert_msg(rc == 0, "PUT %s: transfer failed", path);
    return r;
}

/* POST /upload (legacy): one multipart part "file" named name. */
static struct http_resp legacy_upload(const struct daemon *d, const char *name, const void *data,
                                      size_t n)
{
    const char *bnd = "faultsboundary7e3";
    char head[512], tail[64];
    int hl = snprintf(head, sizeof(head),
                      "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                      "Content-Type: application/octet-stream\r\n\r\n",
                      bnd, name);
    int tl = snprintf(tail, sizeof(tail), "\r\n--%s--\r\n", bnd);
    char *body = malloc((size_t)hl + n + (size_t)tl);
    memcpy(body, head, (size_t)hl);
    memcpy(body + hl, data, n);
    memcpy(body + (size_t)hl + n, tail, (size_t)tl);
    char ct[128];
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%s", bnd);
    struct http_resp r;
    int rc = http_request(d, "POST", "/upload", ct, body, (size_t)hl + n + (size_t)tl, 30000, &r);
    ck_assert_msg(rc == 0, "POST /upload: transfer failed");
    free(body);
    return r;
}

/* ---- 1. the workspace's filesystem is full ---- */

START_TEST(disk_full_upload_is_507_and_leaves_nothing)
{
    char dir[] = "/tmp/sbxd-faults-full-XXXXXX";
    if (!mount_small(dir, "2m")) {
        fprintf(stderr, "skipped disk_full_upload: mounting a tmpfs needs root\n");
        return;
    }
    struct daemon d;
    const char *args[] = {"--workspace", dir, NULL};
    daemon_start(&d, args, NULL);
    unsigned long free0 = free_kib(dir);

    struct http_resp r = put(&d, "/files/old.txt", "old contents\n", 13);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);

    size_t n = 3 * MIB;
    unsigned char *big = pattern(n, 7);
    /* A new file: 507 with what happened, and no file under its name, no temporary file. */
    r = put(&d, "/files/sub/new.bin", big, n);
    assert_error(&r, 507, "INSUFFICIENT_STORAGE");
    ck_assert_msg(strstr(jstr(r.json, "message"), "No space left on device"), "%s", r.body);
    ck_assert_msg(strstr(jstr(r.json, "message"), "new.bin"), "%s", r.body);
    http_resp_free(&r);
    ck_assert(!exists(dir, "sub/new.bin"));
    /* An existing file: the same, and its old content intact. */
    r = put(&d, "/files/old.txt", big, n);
    assert_error(&r, 507, "INSUFFICIENT_STORAGE");
    http_resp_free(&r);
    char old[PATH_MAX];
    snprintf(old, sizeof(old), "%s/old.txt", dir);
    ck_assert(file_is(old, "old contents\n", 13));
    /* The standardized face: {code, message} with the same status. */
    r = put(&d, "/v1/files/v1.bin", big, n);
    assert_error(&r, 507, "INSUFFICIENT_STORAGE");
    http_resp_free(&r);
    ck_assert(!exists(dir, "v1.bin"));
    /* The legacy face: {"message"} as the python runtime words a failed upload. */
    r = legacy_upload(&d, "legacy.bin", big, n);
    ck_assert_int_eq(r.status, 507);
    ck_assert_msg(cJSON_IsObject(r.json) && cJSON_GetArraySize(r.json) == 1, "%s", r.body);
    ck_assert_msg(strncmp(jstr(r.json, "message"), "File upload failed: ", 20) == 0, "%s", r.body);
    ck_assert_msg(strstr(jstr(r.json, "message"), "No space left on device"), "%s", r.body);
    http_resp_free(&r);
    ck_assert(!exists(dir, "legacy.bin"));

    /* Nothing is left behind, not even an unlinked temporary file held open: the space is
     * all free again (but for old.txt, and the directory "sub" that the PUT created). */
    ck_assert_int_eq(wait_no_temp_files(dir, 2000), 0);
    double end = now_ms() + 2000 * SLOW;
    while (free_kib(dir) + 16 < free0 && now_ms() < end)
        usleep(10000);
    ck_assert_msg(free_kib(dir) + 16 >= free0, "%lu KiB free, %lu at start", free_kib(dir), free0);

    /* And uploads work again. */
    r = put(&d, "/files/sub/new.bin", big, MIB);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/sub/new.bin", dir);
    ck_assert(file_is(p, big, MIB));
    free(big);
    ck_assert(daemon_stop_clean(&d, 10000));
    unmount_small(dir);
}
END_TEST

START_TEST(disk_full_command_fails_and_sbxd_recovers)
{
    char dir[] = "/tmp/sbxd-faults-full-XXXXXX";
    if (!mount_small(dir, "2m")) {
        fprintf(stderr, "skipped disk_full_command: mounting a tmpfs needs root\n");
        return;
    }
    struct daemon d;
    const char *args[] = {"--workspace", dir, NULL};
    daemon_start(&d, args, NULL);
    cJSON *res = execute(&d, "{\"command\":\"dd if=/dev/zero of=big bs=1M count=10\"}");
    ck_assert_str_eq(jstr(res, "status"), "exited");
    ck_assert_int_ne((int)jnum(res, "exit_code"), 0);
    ck_assert_msg(strstr(jstr(res, "stderr"), "No space left"), "stderr: %s", jstr(res, "stderr"));
    cJSON_Delete(res);
    /* sbxd serves on, and says what is wrong with an upload now. */
    struct http_resp r;
    ck_assert_int_eq(http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    unsigned char *data = pattern(MIB, 11);
    r = put(&d, "/files/after.bin", data, 256 * 1024);
    assert_error(&r, 507, "INSUFFICIENT_STORAGE");
    http_resp_free(&r);
    ck_assert(!exists(dir, "after.bin"));
    /* Space freed: uploads work again. */
    ck_assert_int_eq(http_request(&d, "DELETE", "/files/big", NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 204);
    http_resp_free(&r);
    r = put(&d, "/files/after.bin", data, MIB);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/after.bin", dir);
    ck_assert(file_is(p, data, MIB));
    ck_assert_int_eq(temp_files_in(dir), 0);
    free(data);
    ck_assert(daemon_stop_clean(&d, 10000));
    unmount_small(dir);
}
END_TEST

/* ---- 2. sbxd out of file descriptors ---- */

/* User + system CPU time of pid, in seconds. */
static double cpu_seconds(pid_t pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    unsigned long ut = 0, st = 0;
    const char *rp = strrchr(buf, ')');
    ck_assert_int_eq(
        sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU sbxd burns over one second of wall time. */
static double cpu_over_a_second(pid_t pid)
{
    double c0 = cpu_seconds(pid);
    usleep(1000000);
    return cpu_seconds(pid) - c0;
}

static void set_fd_limit(pid_t pid, rlim_t soft)
{
    struct rlimit old, rl;
    ck_assert_int_eq(prlimit(pid, RLIMIT_NOFILE, NULL, &old), 0);
    rl.rlim_cur = soft;
    rl.rlim_max = old.rlim_max;
    ck_assert_msg(prlimit(pid, RLIMIT_NOFILE, &rl, NULL) == 0, "prlimit: %s", strerror(errno));
}

/*
 * sbxd's descriptors but those of its PID-namespace slots (namespace fds and O_PATH fds of
 * the workspace, as many as the pool has slots, which grows under load and shrinks after
 * 30 s idle): pipes, sockets, eventfds and files, what a failure path could leak.
 */
static int fds_but_slots(const struct daemon *d)
{
    char dir[64], ws[PATH_MAX] = "";
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)d->pid);
    char *log = daemon_log_read(d);
    const char *w = strstr(log, "\"event\":\"listening\"");
    w = w ? strstr(w, "\"workspace\":\"") : NULL;
    if (w)
        snprintf(ws, sizeof(ws), "%.*s", (int)strcspn(w + 13, "\""), w + 13);
    free(log);
    DIR *dd = opendir(dir);
    ck_assert_ptr_nonnull(dd);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        char p[400], target[PATH_MAX];
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        ssize_t k = readlink(p, target, sizeof(target) - 1);
        if (k < 0)
            continue;
        target[k] = '\0';
        if (strncmp(target, "pid:[", 5) == 0 || strncmp(target, "mnt:[", 5) == 0 ||
            strcmp(target, ws) == 0)
            continue;
        n++;
    }
    closedir(dd);
    return n;
}

/* Wait up to ms for those descriptors to be back to at most n; returns their count. */
static int wait_fds_at_most(const struct daemon *d, int n, int ms)
{
    double end = now_ms() + ms * SLOW;
    int k;
    while ((k = fds_but_slots(d)) > n && now_ms() < end)
        usleep(20000);
    return k;
}

#define EMFILE_CONNS 16

START_TEST(out_of_descriptors_gives_clean_errors_then_recovers)
{
    if (under_gvisor()) {
        gvisor_skip("out_of_descriptors",
                    "the pid the harness has is runsc's; sbxd is a task inside the gVisor "
                    "sentry, whose rlimits and descriptor table no prlimit(2) from the host "
                    "reaches");
        return;
    }
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    cJSON_Delete(execute(&d, "{\"command\":\"true\"}")); /* warm: what stays open is open */
    usleep(200000);
    int base = daemon_fd_count(&d), base_own = fds_but_slots(&d);
    struct rlimit orig;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &orig), 0);
    /* Room for a few connections, not for them and their commands' pipes. */
    set_fd_limit(d.pid, (rlim_t)base + 4);

    /* Connections past the limit are turned away at the door (503, "out of file
     * descriptors": a reserve descriptor is given up to accept each one); those accepted get
     * clean errors for what needed a descriptor. None is left without an answer. */
    int s[EMFILE_CONNS];
    int answered = 0, emfile = 0, shed = 0, pending = 0, ok = 0;
    for (int i = 0; i < EMFILE_CONNS; i++)
        s[i] = raw_connect(&d);
    /* Let the accept thread take what it can before any request runs: on a busy machine
     * the first request's command could otherwise take the room before the other
     * connections are accepted, and every one after the first would be shed. */
    double settle = now_ms() + 3000 * SLOW;
    while (daemon_fd_count(&d) < base + 4 && now_ms() < settle)
        usleep(5000);
    usleep(50000);
    const char *body = "{\"command\":\"echo hi\"}";
    for (int i = 0; i < EMFILE_CONNS; i++) {
        char req[256];
        int n = snprintf(req, sizeof(req),
                         "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
        ck_assert(raw_send(s[i], req, (size_t)n));
    }
    for (int i = 0; i < EMFILE_CONNS; i++) {
        struct raw_resp r;
        int rc = raw_read(s[i], i < 4 ? 3000 : 300, &r);
        if (rc < 0) {
            pending++;
            continue;
        }
        ck_assert_msg(rc == 1, "connection %d closed without an answer", i);
        answered++;
        if (r.status == 200) {
            ok++;
        } else if (r.status == 503) {
            assert_error_says(&r, 503, "UNAVAILABLE", "Too many open files");
            shed++;
        } else {
            assert_error_says(&r, 429, "RESOURCE_EXHAUSTED", "Too many open files");
            emfile++;
        }
        raw_resp_free(&r);
    }
    ck_assert_msg(emfile >= 1 && shed >= 1 && pending == 0,
                  "answered %d (ok %d, EMFILE %d, shed %d), pending %d: the limit did not bite, "
                  "or a connection was left waiting",
                  answered, ok, emfile, shed, pending);

    /* An upload on an accepted connection: a clean error naming the cause. */
    int up = -1;
    for (int i = 0; i < EMFILE_CONNS && up < 0; i++) {
        struct raw_resp r;
        if (raw_request(s[i], "PUT", "/files/emfile.txt", "data", 4, 3000, &r) != 1)
            continue;
        up = i;
        assert_error_says(&r, 500, "INTERNAL", "Too many open files");
        raw_resp_free(&r);
    }
    ck_assert_msg(up >= 0, "no accepted connection answered an upload");

    /* At the limit, sbxd waits; it does not spin on the accept that keeps failing. */
    double cpu = cpu_over_a_second(d.pid);
    ck_assert_msg(cpu < 0.5 * SLOW, "sbxd burnt %.2f s of CPU in 1 s at its descriptor limit", cpu);

    /* The limit back, the connections closed: everything works again, and what was open at
     * the limit is closed (no descriptor leaked by the failures). */
    set_fd_limit(d.pid, orig.rlim_cur);
    for (int i = 0; i < EMFILE_CONNS; i++)
        close(s[i]);
    cJSON *res = execute(&d, "{\"command\":\"echo back\"}");
    ck_assert_str_eq(jstr(res, "stdout"), "back\n");
    cJSON_Delete(res);
    struct http_resp hr = put(&d, "/files/emfile.txt", "data", 4);
    ck_assert_int_eq(hr.status, 201);
    http_resp_free(&hr);
    int now = wait_fds_at_most(&d, base_own, 3000);
    ck_assert_msg(now <= base_own, "sbxd has %d descriptors open (but its slots'), %d before", now,
                  base_own);
    ck_assert_int_eq(temp_files_in(d.ws), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* A connection that queues while sbxd has no descriptor at all (not even for accept) is
 * served once descriptors are back. */
START_TEST(no_descriptor_for_accept_then_served)
{
    if (under_gvisor()) {
        gvisor_skip("no_descriptor_for_accept",
                    "sbxd's descriptor limit is out of the host's reach (see "
                    "out_of_descriptors)");
        return;
    }
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    cJSON_Delete(execute(&d, "{\"command\":\"true\"}"));
    usleep(200000);
    struct rlimit orig;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &orig), 0);
    /* Below what is open already: no new descriptor at all, and no connection open. */
    set_fd_limit(d.pid, 3);
    int s = raw_connect(&d);
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert(raw_send(s, req, strlen(req)));
    struct raw_resp r;
    ck_assert_int_eq(raw_read(s, 300, &r), -1); /* not accepted: it waits */
    double cpu = cpu_over_a_second(d.pid);
    set_fd_limit(d.pid, orig.rlim_cur);
    ck_assert_int_eq(raw_read(s, (int)(3000 * SLOW), &r), 1);
    ck_assert_int_eq(r.status, 200);
    raw_resp_free(&r);
    close(s);
    ck_assert_msg(cpu < 0.5 * SLOW,
                  "sbxd burnt %.2f s of CPU in 1 s while accept() failed with EMFILE", cpu);
    /* The failures are logged, but not each of them (a line a second at most). */
    char *log = daemon_log_read(&d);
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "\"accept failed\"")); p++)
        lines++;
    free(log);
    ck_assert_msg(lines >= 1 && lines <= 3, "%d log lines about failed accepts", lines);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ---- 3. sbxd cannot fork ---- */

#define PIDS_V1 "/sys/fs/cgroup/pids"

/* The test runner's pid (tests run in children of it): names this run's cgroup. */
static pid_t runner_pid;

static bool write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, s, strlen(s)) == (ssize_t)strlen(s);
    close(fd);
    return ok;
}

static long read_long(const char *path)
{
    char buf[64] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return n > 0 ? strtol(buf, NULL, 10) : -1;
}

/* A v1 pids cgroup of our own, with sbxd (all its threads) moved into it. */
struct pids_cg {
    char dir[PATH_MAX];
    char from[PATH_MAX]; /* sbxd's pids cgroup before */
};

/* false (and why, printed) where there is no writable v1 pids hierarchy. */
static bool pids_cg_enter(struct pids_cg *cg, pid_t pid)
{
    struct stat st;
    if (stat(PIDS_V1 "/cgroup.procs", &st) < 0 || access(PIDS_V1 "/cgroup.procs", W_OK) < 0) {
        fprintf(stderr, "skipped: no writable cgroup v1 pids hierarchy at %s\n", PIDS_V1);
        return false;
    }
    char p[64], line[512];
    snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    snprintf(cg->from, sizeof(cg->from), "%s", PIDS_V1);
    while (fgets(line, sizeof(line), f)) {
        char *c = strstr(line, ":pids:");
        if (c) {
            c[strcspn(c, "\n")] = '\0';
            snprintf(cg->from, sizeof(cg->from), "%s%s", PIDS_V1, c + 6);
        }
    }
    fclose(f);
    snprintf(cg->dir, sizeof(cg->dir), "%s/sbxd-faults-%d", PIDS_V1, (int)runner_pid);
    ck_assert_msg(mkdir(cg->dir, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", cg->dir,
                  strerror(errno));
    char procs[PATH_MAX + 16], v[32];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg->dir);
    snprintf(v, sizeof(v), "%d", (int)pid);
    ck_assert_msg(write_file(procs, v), "cannot move sbxd into %s", cg->dir);
    return true;
}

static long pids_cg_current(const struct pids_cg *cg)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/pids.current", cg->dir);
    return read_long(p);
}

static void pids_cg_max(const struct pids_cg *cg, const char *max)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/pids.max", cg->dir);
    ck_assert_msg(write_file(p, max), "cannot set %s to %s", p, max);
}

/* sbxd back where it was, with whatever it started meanwhile (namespace inits made while
 * it was in the cgroup are there too); the cgroup removed. */
static void pids_cg_leave(struct pids_cg *cg)
{
    char src[PATH_MAX + 16], dst[PATH_MAX + 16];
    pids_cg_max(cg, "max");
    snprintf(src, sizeof(src), "%s/cgroup.procs", cg->dir);
    snprintf(dst, sizeof(dst), "%s/cgroup.procs", cg->from);
    for (int round = 0; round < 20; round++) {
        FILE *f = fopen(src, "r");
        char pid[32];
        bool any = false;
        while (f && fgets(pid, sizeof(pid), f)) {
            pid[strcspn(pid, "\n")] = '\0';
            any = true;
            if (!write_file(dst, pid))
                write_file(PIDS_V1 "/cgroup.procs", pid);
        }
        if (f)
            fclose(f);
        if (!any)
            break;
    }
    for (int i = 0; i < 100 && rmdir(cg->dir) < 0 && errno == EBUSY; i++)
        usleep(10000);
    ck_assert_msg(access(cg->dir, F_OK) < 0, "cannot remove %s", cg->dir);
}

START_TEST(fork_failure_is_a_clear_error_then_recovers)
{
    if (under_gvisor()) {
        gvisor_skip("fork_failure",
                    "the sandboxed sbxd's forks are the sentry's own work: a host pids cgroup "
                    "would limit gVisor's threads and stub processes, not those forks one for "
                    "one, and gVisor's own cgroups are accounting only");
        return;
    }
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    int s = raw_connect(&d);
    struct raw_resp r;
    const char *body = "{\"command\":\"echo before\"}";
    ck_assert_int_eq(raw_request(s, "POST", "/execute", body, strlen(body), 10000, &r), 1);
    ck_assert_int_eq(r.status, 200);
    raw_resp_free(&r);
    usleep(100000); /* the namespace pool has refilled */
    struct pids_cg cg;
    if (!pids_cg_enter(&cg, d.pid)) {
        close(s);
        ck_assert(daemon_stop_clean(&d, 10000));
        return;
    }
    /* Not one process more: the command's clone fails with EAGAIN. */
    char v[32];
    snprintf(v, sizeof(v), "%ld", pids_cg_current(&cg));
    pids_cg_max(&cg, v);
    body = "{\"command\":\"echo during\"}";
    ck_assert_int_eq(raw_request(s, "POST", "/execute", body, strlen(body), 10000, &r), 1);
    assert_error_says(&r, 429, "RESOURCE_EXHAUSTED", "Resource temporarily unavailable");
    ck_assert_msg(strstr(r.head, "\r\nRetry-After: 1"), "%s", r.head);
    raw_resp_free(&r);
    /* The same for a background process. */
    ck_assert_int_eq(raw_request(s, "POST", "/processes", body, strlen(body), 10000, &r), 1);
    assert_error_says(&r, 429, "RESOURCE_EXHAUSTED", "Resource temporarily unavailable");
    raw_resp_free(&r);
    /* What needs no new process is served meanwhile, and nothing spins retrying (the
     * namespace pool, which cannot make its inits either, retries once a second). */
    ck_assert_int_eq(raw_request(s, "GET", "/healthz", NULL, 0, 10000, &r), 1);
    ck_assert_int_eq(r.status, 200);
    raw_resp_free(&r);
    double cpu = cpu_over_a_second(d.pid);
    ck_assert_msg(cpu < 0.5 * SLOW, "sbxd burnt %.2f s of CPU in 1 s unable to fork", cpu);
    /* Room again: the same connection works. */
    pids_cg_max(&cg, "max");
    body = "{\"command\":\"echo after\"}";
    ck_assert_int_eq(raw_request(s, "POST", "/execute", body, strlen(body), 10000, &r), 1);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "stdout"), "after\n");
    raw_resp_free(&r);
    close(s);
    pids_cg_leave(&cg);
    cJSON *res = execute(&d, "{\"command\":\"echo fresh\"}");
    ck_assert_str_eq(jstr(res, "stdout"), "fresh\n");
    cJSON_Delete(res);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* A fork bomb under a pids limit around sbxd (what pids.max per command does in the VM
 * tier): the command ends with its result at its timeout, all of it killed, and sbxd,
 * which shares the limit, answers throughout on the connection it has. */
START_TEST(fork_bomb_under_a_pids_limit_ends_with_its_result)
{
    if (under_gvisor()) {
        gvisor_skip("fork_bomb", "a host pids cgroup cannot bound the sandbox's processes one "
                                 "for one (see fork_failure)");
        return;
    }
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    int s = raw_connect(&d);
    struct raw_resp r;
    const char *warm = "{\"command\":\"true\"}";
    ck_assert_int_eq(raw_request(s, "POST", "/execute", warm, strlen(warm), 10000, &r), 1);
    raw_resp_free(&r);
    usleep(100000);
    struct pids_cg cg;
    if (!pids_cg_enter(&cg, d.pid)) {
        close(s);
        ck_assert(daemon_stop_clean(&d, 10000));
        return;
    }
    char v[32], m[32], body[256];
    snprintf(v, sizeof(v), "%ld", pids_cg_current(&cg) + 40);
    pids_cg_max(&cg, v);
    marker(m, sizeof(m));
    snprintf(body, sizeof(body),
             "{\"command\":\"b() { b | b & }; b; sleep %s\",\"timeout_ms\":1500}", m);
    double t0 = now_ms();
    ck_assert_int_eq(raw_request(s, "POST", "/execute", body, strlen(body), 10000, &r), 1);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "status"), "timeout");
    ck_assert(jbool(r.json, "timed_out"));
    ck_assert_msg(now_ms() - t0 < 3000 * SLOW, "took %.0f ms", now_ms() - t0);
    raw_resp_free(&r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, m, (int)(2000 * SLOW)), 0);
    /* Once the bomb is gone, the pids are free again. */
    double end = now_ms() + 2000 * SLOW;
    while (pids_cg_current(&cg) + 40 > atol(v) + 2 && now_ms() < end)
        usleep(10000);
    ck_assert_int_eq(raw_request(s, "POST", "/execute", warm, strlen(warm), 10000, &r), 1);
    ck_assert_int_eq(r.status, 200);
    raw_resp_free(&r);
    close(s);
    pids_cg_leave(&cg);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ---- 4. a tree that ignores SIGTERM ---- */

/* A shell and a child of it, both ignoring SIGTERM, both sleeping with marker m. */
static void stubborn(char *cmd, size_t n, const char *m)
{
    snprintf(cmd, n, "trap '' TERM; sh -c \\\"trap '' TERM; sleep %s\\\" & sleep %s; wait", m, m);
}

/* Wait for the stubborn tree to be up: both shells and both sleeps (the shells carry the
 * marker in their command lines too); returns how many processes it has. */
static int wait_stubborn(const struct daemon *d, const char *m)
{
    double end = now_ms() + 3000 * SLOW;
    while (daemon_procs_with(d, m) < 4 && now_ms() < end)
        usleep(10000);
    ck_assert_int_eq(daemon_procs_with(d, m), 4);
    return 4;
}

START_TEST(sigterm_ignoring_tree_ends_at_its_timeout)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    char m[32], cmd[256], body[512];
    stubborn(cmd, sizeof(cmd), marker(m, sizeof(m)));
    snprintf(body, sizeof(body), "{\"command\":\"%s\",\"timeout_ms\":300}", cmd);
    double t0 = now_ms();
    cJSON *res = execute(&d, body);
    double took = now_ms() - t0;
    ck_assert_str_eq(jstr(res, "status"), "timeout");
    ck_assert(jbool(res, "timed_out"));
    ck_assert_int_eq((int)jnum(res, "exit_code"), 137);
    ck_assert_msg(took >= 290 && took < 300 + 1000 * SLOW, "answered after %.0f ms", took);
    cJSON_Delete(res);
    ck_assert_int_eq(daemon_wait_no_procs(&d, m, (int)(1000 * SLOW)), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(sigterm_ignoring_process_ends_on_delete)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    char m[32], cmd[256], body[512];
    stubborn(cmd, sizeof(cmd), marker(m, sizeof(m)));
    snprintf(body, sizeof(body), "{\"command\":\"%s\"}", cmd);
    struct http_resp r;
    ck_assert_int_eq(http_request(&d, "POST", "/processes", NULL, body, strlen(body), 0, &r), 0);
    ck_assert_int_eq(r.status, 201);
    char path[128];
    snprintf(path, sizeof(path), "/processes/%s", jstr(r.json, "id"));
    http_resp_free(&r);
    int n = wait_stubborn(&d, m);
    /* A SIGTERM does nothing to it ... */
    char sig[160];
    snprintf(sig, sizeof(sig), "%s/signal", path);
    const char *term = "{\"signal\":\"SIGTERM\"}";
    ck_assert_int_eq(http_request(&d, "POST", sig, NULL, term, strlen(term), 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    usleep(200000);
    ck_assert_int_eq(daemon_procs_with(&d, m), n);
    /* ... DELETE ends all of it at once. */
    double t0 = now_ms();
    ck_assert_int_eq(http_request(&d, "DELETE", path, NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "status"), "canceled");
    ck_assert_msg(now_ms() - t0 < 1000 * SLOW, "DELETE took %.0f ms", now_ms() - t0);
    http_resp_free(&r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, m, (int)(1000 * SLOW)), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

static struct daemon shut_d;

static void *execute_on_shut_d(void *arg)
{
    const char *body = arg;
    struct http_resp r;
    http_request(&shut_d, "POST", "/execute", NULL, body, strlen(body), 20000, &r);
    cJSON *j = r.status == 200 ? r.json : NULL;
    r.json = NULL;
    http_resp_free(&r);
    return j;
}

START_TEST(sigterm_ignoring_children_do_not_hold_shutdown)
{
    const char *args[] = {"--shutdown-grace-ms", "300", NULL};
    daemon_start(&shut_d, args, NULL);
    char m[32], cmd[256], body[512], body2[512];
    stubborn(cmd, sizeof(cmd), marker(m, sizeof(m)));
    snprintf(body, sizeof(body), "{\"command\":\"%s\"}", cmd);
    struct http_resp r;
    ck_assert_int_eq(http_request(&shut_d, "POST", "/processes", NULL, body, strlen(body), 0, &r),
                     0);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    snprintf(body2, sizeof(body2), "{\"command\":\"%s\"}", cmd);
    pthread_t t;
    pthread_create(&t, NULL, execute_on_shut_d, body2);
    /* Both trees up, 4 processes each. The background process's alone is 4, and a SIGTERM
     * before the command is in leaves it refused or 503 (draining), never "canceled". */
    double end = now_ms() + 3000 * SLOW;
    while (daemon_procs_with(&shut_d, m) < 8 && now_ms() < end)
        usleep(10000);
    ck_assert_int_eq(daemon_procs_with(&shut_d, m), 8);
    double t0 = now_ms();
    kill(shut_d.pid, SIGTERM);
    cJSON *res;
    pthread_join(t, (void **)&res);
    ck_assert_ptr_nonnull(res);
    ck_assert_str_eq(jstr(res, "status"), "canceled");
    cJSON_Delete(res);
    int st = -1;
    while (now_ms() - t0 < 300 + 2000 * SLOW)
        if (waitpid(shut_d.pid, &st, WNOHANG) == shut_d.pid)
            break;
        else
            st = -1, usleep(5000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "wait status %d after %.0f ms",
                  st, now_ms() - t0);
    shut_d.pid = 0;
    ck_assert_int_eq(daemon_wait_no_procs(&shut_d, m, (int)(1000 * SLOW)), 0);
    ck_assert(!daemon_log_has_sanitizer_report(&shut_d));
    daemon_stop(&shut_d, 0);
    remove(shut_d.log);
}
END_TEST

/* ---- 5. a command that closes its output early and runs on ---- */

START_TEST(closed_stdout_result_comes_at_exit)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    double t0 = now_ms();
    cJSON *res = execute(&d, "{\"command\":\"exec >&-; sleep 1; echo late >&2; exit 4\"}");
    double took = now_ms() - t0;
    ck_assert_str_eq(jstr(res, "status"), "exited");
    ck_assert_int_eq((int)jnum(res, "exit_code"), 4);
    ck_assert_str_eq(jstr(res, "stdout"), "");
    ck_assert_str_eq(jstr(res, "stderr"), "late\n");
    ck_assert_msg(took >= 950, "answered after %.0f ms, before the command's exit", took);
    cJSON_Delete(res);
    /* Both closed: still the exit, with its code. */
    t0 = now_ms();
    res = execute(&d, "{\"command\":\"exec >&- 2>&-; sleep 1; exit 5\"}");
    ck_assert_int_eq((int)jnum(res, "exit_code"), 5);
    ck_assert_msg(now_ms() - t0 >= 950, "answered after %.0f ms", now_ms() - t0);
    cJSON_Delete(res);
    /* Both closed and running on: the timeout still ends it. */
    char m[32], body[256];
    snprintf(body, sizeof(body), "{\"command\":\"exec >&- 2>&-; sleep %s\",\"timeout_ms\":500}",
             marker(m, sizeof(m)));
    t0 = now_ms();
    res = execute(&d, body);
    took = now_ms() - t0;
    ck_assert_str_eq(jstr(res, "status"), "timeout");
    ck_assert_msg(took >= 490 && took < 500 + 1000 * SLOW, "answered after %.0f ms", took);
    cJSON_Delete(res);
    ck_assert_int_eq(daemon_wait_no_procs(&d, m, (int)(1000 * SLOW)), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(closed_stdout_stream_exit_event_comes_at_exit)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    int s = raw_connect(&d);
    const char *body = "{\"command\":\"exec >&-; sleep 1; echo late >&2; exit 4\"}";
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST /execute HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    double t0 = now_ms();
    ck_assert(raw_send(s, req, (size_t)n));
    /* The time the exit event arrives, not just the end of the answer. */
    size_t cap = 0, len = 0;
    char *buf = NULL;
    double end = t0 + 10000 * SLOW, at_exit = 0;
    while (!at_exit && recv_more(s, &buf, &len, &cap, end) == 1)
        if (strstr(buf, "\"type\":\"exit\""))
            at_exit = now_ms() - t0;
    ck_assert_msg(at_exit >= 950, "exit event after %.0f ms: %s", at_exit, buf ? buf : "");
    const char *ev = strstr(buf, "\"type\":\"stderr\"");
    ck_assert_msg(ev && strstr(ev, "\"data\":\"late\\n\""), "%s", buf);
    ck_assert_msg(ev < strstr(buf, "\"type\":\"exit\""), "%s", buf);
    ck_assert_msg(strstr(buf, "\"exit_code\":4"), "%s", buf);
    ck_assert_ptr_null(strstr(buf, "\"type\":\"stdout\""));
    free(buf);
    close(s);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ---- 6. sbxd killed with SIGKILL mid-run, and started again on the same workspace ---- */

/* SIGKILL d and wait for it; its own temporary directory and log go (not the workspace it
 * was given). */
static void kill9(struct daemon *d)
{
    ck_assert_int_eq(kill(d->pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(d->pid, NULL, 0), d->pid);
    d->pid = 0;
    daemon_stop(d, 0);
    remove(d->log);
}

/* Stop a daemon whose workspace is not its own temporary one (the caller removes that). */
static bool stop_keep_workspace(struct daemon *d)
{
    return daemon_stop_clean(d, 10000);
}

static void rm_rf(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Plant a file at dir/name with these bytes and an mtime age_s seconds in the past
 * (negative: in the future). */
static void plant(const char *dir, const char *name, const char *data, int age_s)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "create %s: %s", p, strerror(errno));
    ck_assert_int_eq(write(fd, data, strlen(data)), (ssize_t)strlen(data));
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= age_s;
    ts[1] = ts[0];
    ck_assert_int_eq(futimens(fd, ts), 0);
    close(fd);
    ck_assert_int_eq(chown(p, 1000, 1000), 0);
}

struct slow_upload {
    int s;
    size_t sent;
};

/* A PUT of total bytes of which only part is sent: the upload is then in progress. */
static struct slow_upload upload_in_progress(const struct daemon *d, const char *path, size_t total,
                                             size_t part)
{
    struct slow_upload u = {.s = raw_connect(d)};
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     path, total);
    ck_assert(raw_send(u.s, head, (size_t)n));
    unsigned char *b = pattern(part, 3);
    ck_assert(raw_send(u.s, b, part));
    free(b);
    u.sent = part;
    return u;
}

/* Wait up to ms for a temporary upload file beneath dir to hold at least n bytes. */
static bool wait_temp_file_bytes(const char *dir, off_t n, int ms)
{
    double end = now_ms() + ms * SLOW;
    while (now_ms() < end) {
        DIR *dd = opendir(dir);
        struct dirent *e;
        while (dd && (e = readdir(dd))) {
            struct stat st;
            char p[PATH_MAX + 256];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            if (strncmp(e->d_name, ".sbxd-upload-", 13) == 0 && stat(p, &st) == 0 &&
                st.st_size >= n) {
                closedir(dd);
                return true;
            }
        }
        if (dd)
            closedir(dd);
        usleep(10000);
    }
    return false;
}

static struct daemon k9;

static void *execute_on_k9(void *arg)
{
    const char *body = arg;
    struct http_resp r;
    http_request(&k9, "POST", "/execute", NULL, body, strlen(body), 20000, &r);
    http_resp_free(&r);
    return NULL;
}

/* Whether d logs, within ms, that its sweep removed n stale temporary files. */
static bool log_says_swept(const struct daemon *d, int n, int ms)
{
    char want[64];
    snprintf(want, sizeof(want), "\"removed\":%d,", n);
    double end = now_ms() + ms * SLOW;
    for (;;) {
        char *log = daemon_log_read(d);
        const char *ev = strstr(log, "\"event\":\"upload_sweep\"");
        const char *nl = ev ? strchr(ev, '\n') : NULL;
        const char *at = ev ? strstr(ev, want) : NULL;
        bool ok = at && nl && at < nl;
        free(log);
        if (ok)
            return true;
        if (now_ms() >= end)
            return false;
        usleep(10000);
    }
}

START_TEST(kill9_mid_run_then_restart_on_the_same_workspace)
{
    char ws[] = "/tmp/sbxd-faults-ws-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(ws));
    char m_exec[32], m_bg[32];
    marker(m_exec, sizeof(m_exec));
    marker(m_bg, sizeof(m_bg));
    const char *args[] = {"--workspace", ws, NULL};
    daemon_start(&k9, args, NULL);

    /* Before the kill: a whole file, a running command, a background process, and an upload
     * half-way. */
    size_t n = 2 * MIB;
    unsigned char *keep = pattern(n, 5);
    struct http_resp r = put(&k9, "/files/dir/keep.bin", keep, n);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    char body[256];
    snprintf(body, sizeof(body), "{\"argv\":[\"sleep\",\"%s\"]}", m_exec);
    pthread_t t;
    pthread_create(&t, NULL, execute_on_k9, body);
    char bgbody[256];
    snprintf(bgbody, sizeof(bgbody), "{\"command\":\"sleep %s & sleep %s\"}", m_bg, m_bg);
    ck_assert_int_eq(http_request(&k9, "POST", "/processes", NULL, bgbody, strlen(bgbody), 0, &r),
                     0);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    struct slow_upload up = upload_in_progress(&k9, "/files/dir/partial.bin", 8 * MIB, MIB);
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/dir", ws);
    ck_assert_msg(wait_temp_file_bytes(dir, MIB, 3000), "the upload's temporary file never grew");
    double end = now_ms() + 3000 * SLOW;
    while ((daemon_procs_with(&k9, m_exec) < 1 || daemon_procs_with(&k9, m_bg) < 3) &&
           now_ms() < end)
        usleep(10000);
    ck_assert_int_eq(daemon_procs_with(&k9, m_exec), 1);
    ck_assert_int_eq(daemon_procs_with(&k9, m_bg), 3); /* the shell and its two sleeps */
    struct http_resp h;
    ck_assert_int_eq(http_request(&k9, "GET", "/healthz", NULL, NULL, 0, 0, &h), 0);
    char tree_kill[16];
    snprintf(tree_kill, sizeof(tree_kill), "%s",
             jstr(cJSON_GetObjectItemCaseSensitive(h.json, "isolation"), "tree_kill"));
    http_resp_free(&h);

    kill9(&k9);
    pthread_join(t, NULL);
    close(up.s);
    /* Past the sweep's allowance for the kernel's coarse file clock (20 ms): what the killed
     * sbxd wrote last is older than the next start by more than that. */
    usleep(50000);
    /* The fault is real: a temporary file is left by the upload in progress. */
    ck_assert_int_eq(temp_files_in(ws), 1);
    /* Stale files as an older kill would leave them, and names the sweep must not touch. */
    plant(ws, ".sbxd-upload-00112233445566aa", "stale", 3600);
    char deep[PATH_MAX];
    snprintf(deep, sizeof(deep), "%s/dir/a", ws);
    ck_assert_int_eq(mkdir(deep, 0755), 0);
    ck_assert_int_eq(chown(deep, 1000, 1000), 0);
    plant(deep, ".sbxd-upload-ffeeddccbbaa9988", "stale", 60);
    plant(ws, ".sbxd-upload-0011223344556677x", "not ours", 3600); /* not 16 hex digits */
    plant(ws, ".sbxd-upload-001122334455667", "not ours", 3600);   /* 15 */
    plant(ws, ".sbxd-upload-AABBCCDDEEFF0011", "not ours", 3600);  /* upper case */
    plant(ws, ".sbxd-upload-0123456789abcdef", "young", -3600);    /* newer than the start */
    char lnk[PATH_MAX];
    snprintf(lnk, sizeof(lnk), "%s/.sbxd-upload-1111111111111111", ws);
    ck_assert_int_eq(symlink("dir/keep.bin", lnk), 0);

    /* Under PID namespaces the commands died with the daemon (their inits did); under uid
     * isolation the next start kills them (see the test below); the process group cannot
     * be told apart from anything else once sbxd is gone. */
    if (strcmp(tree_kill, "pidns") == 0 || under_gvisor()) {
        ck_assert_int_eq(daemon_wait_no_procs(&k9, m_exec, (int)(2000 * SLOW)), 0);
        ck_assert_int_eq(daemon_wait_no_procs(&k9, m_bg, (int)(2000 * SLOW)), 0);
    }

    struct daemon d2;
    daemon_start(&d2, args, NULL);
    /* The restarted sbxd: no temporary file of the killed one left, the names that are not
     * its own kept, the whole file intact, the partial one never under its name. */
    ck_assert_int_eq(wait_no_temp_files(dir, 2000), 0);
    ck_assert(log_says_swept(&d2, 3, 2000));
    ck_assert(!exists(ws, ".sbxd-upload-00112233445566aa"));
    ck_assert(exists(ws, ".sbxd-upload-0011223344556677x"));
    ck_assert(exists(ws, ".sbxd-upload-001122334455667"));
    ck_assert(exists(ws, ".sbxd-upload-AABBCCDDEEFF0011"));
    ck_assert(exists(ws, ".sbxd-upload-0123456789abcdef"));
    ck_assert(exists(ws, ".sbxd-upload-1111111111111111"));
    ck_assert(!exists(ws, "dir/partial.bin"));
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/dir/keep.bin", ws);
    ck_assert(file_is(p, keep, n));
    ck_assert_int_eq(daemon_wait_no_procs(&d2, m_exec, (int)(1000 * SLOW)), 0);
    ck_assert_int_eq(daemon_wait_no_procs(&d2, m_bg, (int)(1000 * SLOW)), 0);
    /* And it serves: the interrupted upload again, whole. */
    unsigned char *part = pattern(MIB, 9);
    r = put(&d2, "/files/dir/partial.bin", part, MIB);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    snprintf(p, sizeof(p), "%s/dir/partial.bin", ws);
    ck_assert(file_is(p, part, MIB));
    free(part);
    free(keep);
    ck_assert(stop_keep_workspace(&d2));
    rm_rf(ws);
}
END_TEST

/* Under uid isolation the commands of a killed sbxd run on (nothing ties them to it), as
 * uids of its range: the next start kills them, and says so, instead of refusing the range
 * and falling back to less isolation. */
START_TEST(kill9_under_uid_isolation_then_restart_kills_leftovers)
{
    if (under_gvisor()) {
        gvisor_skip("kill9_under_uid_isolation",
                    "killing sbxd kills its sandbox (runsc), and every command with it: no "
                    "process of the killed sbxd can be left over");
        return;
    }
    if (geteuid() != 0)
        return;
    char ws[] = "/tmp/sbxd-faults-ws-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(ws));
    char m[32], body[256];
    marker(m, sizeof(m));
    /* A range of this test's own: other tests' daemons may use uid isolation meanwhile. */
    const char *args[] = {"--workspace", ws, "--isolation", "uid", "--uid-range", "231000:8", NULL};
    daemon_start(&k9, args, NULL);
    snprintf(body, sizeof(body), "{\"command\":\"setsid sleep %s & sleep %s\"}", m, m);
    pthread_t t;
    pthread_create(&t, NULL, execute_on_k9, body);
    struct http_resp r;
    ck_assert_int_eq(http_request(&k9, "POST", "/processes", NULL, body, strlen(body), 0, &r), 0);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    double end = now_ms() + 3000 * SLOW;
    while (procs_with(m) < 6 && now_ms() < end)
        usleep(10000);
    ck_assert_int_eq(procs_with(m), 6); /* twice a shell and its two sleeps */
    kill9(&k9);
    pthread_join(t, NULL);
    usleep(100000);
    ck_assert_int_eq(procs_with(m), 6); /* the fault: they outlive the daemon */

    struct daemon d2;
    daemon_start(&d2, args, NULL);
    int left = wait_no_procs(m, (int)(1000 * SLOW));
    char *log = daemon_log_read(&d2);
    bool logged = strstr(log, "\"event\":\"stale_process\"") != NULL;
    free(log);
    ck_assert_int_eq(left, 0);
    ck_assert(logged);
    struct http_resp h;
    ck_assert_int_eq(http_request(&d2, "GET", "/healthz", NULL, NULL, 0, 0, &h), 0);
    ck_assert_str_eq(jstr(cJSON_GetObjectItemCaseSensitive(h.json, "isolation"), "tree_kill"),
                     "uid");
    http_resp_free(&h);
    cJSON *res = execute(&d2, "{\"command\":\"id -u\"}");
    ck_assert_int_ge(atoi(jstr(res, "stdout")), 231000);
    cJSON_Delete(res);
    ck_assert(stop_keep_workspace(&d2));
    rm_rf(ws);
}
END_TEST

/* After a case, in the runner (a test that failed half-way never reaches its own clean-up):
 * unmount what a disk_full test left mounted, remove the pids cgroup of a fork test once
 * its daemon has gone (it gets SIGTERM when its test process dies). */
static void faults_cleanup(void)
{
    FILE *m = fopen("/proc/self/mounts", "r");
    char line[1024];
    while (m && fgets(line, sizeof(line), m)) {
        char dev[256], dir[512];
        if (sscanf(line, "%255s %511s", dev, dir) == 2 &&
            strncmp(dir, "/tmp/sbxd-faults-full-", 22) == 0 && umount2(dir, MNT_DETACH) == 0)
            rmdir(dir);
    }
    if (m)
        fclose(m);
    char cg[PATH_MAX];
    snprintf(cg, sizeof(cg), "%s/sbxd-faults-%d", PIDS_V1, (int)runner_pid);
    for (int i = 0; i < 300 && rmdir(cg) < 0 && errno == EBUSY; i++)
        usleep(10000);
}

static TCase *faults_case(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, NULL, faults_cleanup);
    suite_add_tcase(s, tc);
    return tc;
}

Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    runner_pid = getpid();
    TCase *tc = faults_case(s, "disk_full");
    tcase_add_test(tc, disk_full_upload_is_507_and_leaves_nothing);
    tcase_add_test(tc, disk_full_command_fails_and_sbxd_recovers);
    tc = faults_case(s, "descriptors");
    tcase_add_test(tc, out_of_descriptors_gives_clean_errors_then_recovers);
    tcase_add_test(tc, no_descriptor_for_accept_then_served);
    tc = faults_case(s, "fork");
    tcase_add_test(tc, fork_failure_is_a_clear_error_then_recovers);
    tcase_add_test(tc, fork_bomb_under_a_pids_limit_ends_with_its_result);
    tc = faults_case(s, "sigterm");
    tcase_add_test(tc, sigterm_ignoring_tree_ends_at_its_timeout);
    tcase_add_test(tc, sigterm_ignoring_process_ends_on_delete);
    tcase_add_test(tc, sigterm_ignoring_children_do_not_hold_shutdown);
    tc = faults_case(s, "closed_output");
    tcase_add_test(tc, closed_stdout_result_comes_at_exit);
    tcase_add_test(tc, closed_stdout_stream_exit_event_comes_at_exit);
    tc = faults_case(s, "kill9");
    tcase_add_test(tc, kill9_mid_run_then_restart_on_the_same_workspace);
    tcase_add_test(tc, kill9_under_uid_isolation_then_restart_kills_leftovers);
    return s;
}
