#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <mqueue.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "harness.h"

struct daemon g_sbxd;

/* Where sbxd and the probe are: the build's paths, unless the environment says otherwise
 * (a VM or container runs the same tests from elsewhere). */
const char *sbxd_bin(void)
{
    const char *p = getenv("SBXD_BIN");
    return p && *p ? p : SBXD_BIN;
}

const char *sbxd_probe(void)
{
    const char *p = getenv("SBXD_PROBE");
    return p && *p ? p : SBXD_PROBE;
}

/* The SBXD_WRAP words, split once. */
static const char *wrap_words[32];
static int wrap_count = -1;

static void wrap_parse(void)
{
    static char wrap[512];
    if (wrap_count >= 0)
        return;
    wrap_count = 0;
    snprintf(wrap, sizeof(wrap), "%s", getenv("SBXD_WRAP") ? getenv("SBXD_WRAP") : "");
    for (char *save = NULL, *w = strtok_r(wrap, " ", &save); w && wrap_count < 32;
         w = strtok_r(NULL, " ", &save))
        wrap_words[wrap_count++] = w;
}

int wrap_argv(const char **argv, int max)
{
    wrap_parse();
    int n = 0;
    for (; n < wrap_count && n < max; n++)
        argv[n] = wrap_words[n];
    return n;
}

/* The index of the runsc word in the wrap, or -1. */
static int wrap_runsc(void)
{
    wrap_parse();
    for (int i = 0; i < wrap_count; i++) {
        const char *base = strrchr(wrap_words[i], '/');
        if (strcmp(base ? base + 1 : wrap_words[i], "runsc") == 0)
            return i;
    }
    return -1;
}

bool under_gvisor(void)
{
    return wrap_runsc() >= 0;
}

void gvisor_skip(const char *check, const char *why)
{
    fprintf(stderr, "gvisor: skipped %s: %s\n", check, why);
}

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

char *daemon_log_read(const struct daemon *d)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return strdup("");
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t n;
    while ((n = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2)
            s = realloc(s, cap *= 2);
    }
    s[len] = '\0';
    fclose(f);
    return s;
}

/* A daemon that did not come up: remove its workspace and log before giving up. */
static void daemon_discard(const struct daemon *d)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->ws);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->ws);
    remove(d->log);
}

/* The command line of pid, NULs as spaces (argv words are never empty here). */
static bool read_cmdline(pid_t pid, char *buf, size_t n)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    size_t len = fread(buf, 1, n - 1, f);
    fclose(f);
    for (size_t i = 0; i < len; i++)
        if (!buf[i])
            buf[i] = ' ';
    buf[len] = '\0';
    return len > 0;
}

static pid_t parent_of(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *rp = strrchr(buf, ')');
    int ppid = 0;
    return rp && sscanf(rp + 2, "%*c %d", &ppid) == 1 ? ppid : 0;
}

/*
 * Under gVisor: find the sandbox that runs d's sbxd, the `runsc boot` process started by the
 * runsc process d->pid (or below it). Its command line has the state root (--root=, which
 * `runsc do` chooses itself under $TMPDIR) and ends with the container id.
 */
static void sandbox_locate(struct daemon *d)
{
    for (int attempt = 0; attempt < 200; attempt++) {
        DIR *dir = opendir("/proc");
        struct dirent *e;
        while (dir && (e = readdir(dir))) {
            pid_t pid = atoi(e->d_name);
            char cmd[4096];
            if (pid <= 0 || !read_cmdline(pid, cmd, sizeof(cmd)) || !strstr(cmd, " boot "))
                continue;
            const char *root = strstr(cmd, " --root=");
            if (!root)
                continue;
            pid_t up = pid;
            for (int depth = 0; depth < 4 && up > 1 && up != d->pid; depth++)
                up = parent_of(up);
            if (up != d->pid)
                continue;
            root += strlen(" --root=");
            snprintf(d->sb_root, sizeof(d->sb_root), "%.*s", (int)strcspn(root, " "), root);
            size_t len = strlen(cmd);
            while (len && cmd[len - 1] == ' ')
                cmd[--len] = '\0';
            const char *id = strrchr(cmd, ' ');
            snprintf(d->sb_id, sizeof(d->sb_id), "%s", id ? id + 1 : "");
            closedir(dir);
            return;
        }
        if (dir)
            closedir(dir);
        usleep(10000);
    }
    fprintf(stderr, "sbxd runs under gVisor, but its sandbox (runsc boot) was not found\n");
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    daemon_discard(d);
    abort();
}

/* daemon_start_as: the uid and gid the next daemon runs as (-1: the test's own). */
static uid_t start_uid = (uid_t)-1;
static gid_t start_gid = (gid_t)-1;

void daemon_start_as(struct daemon *d, uid_t uid, gid_t gid, const char *const *args,
                     const char *const *env)
{
    start_uid = uid;
    start_gid = gid;
    daemon_start(d, args, env);
    start_uid = (uid_t)-1;
    start_gid = (gid_t)-1;
}

void daemon_start(struct daemon *d, const char *const *args, const char *const *env)
{
    static char why[16384];
    if (daemon_try_start(d, args, env, why, sizeof(why)) != -1) {
        fprintf(stderr, "%s\n", why);
        abort();
    }
}

int daemon_try_start(struct daemon *d, const char *const *args, const char *const *env, char *why,
                     size_t whylen)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->ws, sizeof(d->ws), "/tmp/sbxd-it-ws-XXXXXX");
    if (!mkdtemp(d->ws)) {
        perror("mkdtemp");
        abort();
    }
    if (start_uid != (uid_t)-1 && chown(d->ws, start_uid, start_gid) < 0) {
        perror("chown workspace");
        abort();
    }
    snprintf(d->log, sizeof(d->log), "%s.log", d->ws);

    /* SBXD_WRAP: a command that runs sbxd inside something (e.g. "runsc --network=host do"),
     * split on spaces. */
    const char *argv[96];
    int argc = wrap_argv(argv, 32);
    /* gRPC on a free port too: daemons of parallel tests never fight over 9090. */
    /* No warm kernel unless a test asks for one: each costs a Python start. */
    const char *fixed[] = {sbxd_bin(),
                           "--listen",
                           "127.0.0.1:0",
                           "--grpc-listen",
                           "127.0.0.1:0",
                           "--workspace",
                           d->ws,
                           "--log-format",
                           "json",
                           "--warm-contexts",
                           "0"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[argc++] = fixed[i];
    for (int i = 0; args && args[i] && argc < 94; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    /* A marker the daemon has in its environment: commands must never see it. PATH is what
     * commands get when nothing else is said (they inherit sbxd's): the usual one. */
    const char *envp[64] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            "SBXD_TEST_DAEMON_SECRET=do-not-leak"};
    int envc = 2;
    const char *asan = getenv("ASAN_OPTIONS");
    static char asan_buf[512];
    if (asan) {
        snprintf(asan_buf, sizeof(asan_buf), "ASAN_OPTIONS=%s", asan);
        envp[envc++] = asan_buf;
    }
    for (int i = 0; env && env[i] && envc < 62; i++) {
        /* A test's entry replaces one of these of the same name (its PATH, say). */
        size_t nl = strcspn(env[i], "=") + 1;
        int j = 0;
        while (j < envc && strncmp(envp[j], env[i], nl) != 0)
            j++;
        envp[j] = env[i];
        envc += j == envc;
    }
    envp[envc] = NULL;

    pid_t pid = fork();
    if (pid == 0) {
        /* If the test process dies half-way, its daemon goes with it (and drains first). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        /* SBXD_TEST_CGROUP (the vm tier): start sbxd in that cgroup's "sbxd" leaf, alone,
         * as a container's entrypoint would be, not among the test runner's processes. */
        const char *tcg = getenv("SBXD_TEST_CGROUP");
        if (tcg && *tcg) {
            char cg[PATH_MAX];
            snprintf(cg, sizeof(cg), "%s/sbxd", tcg);
            mkdir(cg, 0755);
            snprintf(cg, sizeof(cg), "%s/sbxd/cgroup.procs", tcg);
            int cfd = open(cg, O_WRONLY);
            if (cfd < 0 || write(cfd, "0", 1) != 1)
                _exit(126);
            close(cfd);
        }
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        dup2(fd, 2);
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, 0);
        dup2(devnull, 1);
        /* An fd left open without CLOEXEC, as a careless parent would: commands must not
         * inherit it. */
        dup2(devnull, 9);
        if (start_uid != (uid_t)-1 &&
            (setgroups(0, NULL) < 0 || setresgid(start_gid, start_gid, start_gid) < 0 ||
             setresuid(start_uid, start_uid, start_uid) < 0))
            _exit(126);
        execvpe(argv[0], (char *const *)argv, (char *const *)envp);
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 1000; i++) { /* up to 10 s (sanitizer builds start slowly) */
        char *log = daemon_log_read(d);
        const char *p = strstr(log, "\"event\":\"listening\"");
        const char *port = p ? strstr(p, "\"port\":") : NULL;
        if (port) {
            d->port = atoi(port + 7);
            free(log);
            if (under_gvisor())
                sandbox_locate(d);
            return -1;
        }
        free(log);
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char *l = daemon_log_read(d);
            snprintf(why, whylen, "sbxd exited during start-up (status %d):\n%s", st, l);
            free(l);
            daemon_discard(d);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    fprintf(stderr, "sbxd did not start listening\n");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    daemon_discard(d);
    abort();
}

static int stop_keep_log(struct daemon *d, int timeout_ms);

bool daemon_stop_clean(struct daemon *d, int timeout_ms)
{
    int st = stop_keep_log(d, timeout_ms);
    bool clean = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!clean)
        fprintf(stderr, "sbxd did not stop cleanly (wait status %d)\n", st);
    if (daemon_log_has_sanitizer_report(d))
        clean = false;
    remove(d->log);
    return clean;
}

bool daemon_log_has_sanitizer_report(const struct daemon *d)
{
    char *log = daemon_log_read(d);
    bool bad = strstr(log, "AddressSanitizer") || strstr(log, "LeakSanitizer") ||
               strstr(log, "runtime error:");
    if (bad)
        fprintf(stderr, "sanitizer report in %s:\n%s\n", d->log, log);
    free(log);
    return bad;
}

/* Stop the daemon and remove its workspace; its log stays for the caller to read. */
static int stop_keep_log(struct daemon *d, int timeout_ms)
{
    int st = -1;
    if (d->pid > 0)
        kill(d->pid, SIGTERM);
    double end = now_ms() + timeout_ms;
    while (d->pid > 0 && now_ms() < end) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid)
            break;
        st = -1;
        usleep(5000);
    }
    if (st == -1 && d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
    }
    d->pid = 0;
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->ws);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->ws);
    return st;
}

int daemon_stop(struct daemon *d, int timeout_ms)
{
    int st = stop_keep_log(d, timeout_ms);
    remove(d->log);
    return st;
}

struct buf {
    char *p;
    size_t len, cap;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > b->cap) {
        /* (doubling: a realloc to the exact size copies the whole body each time under ASan,
         * whose allocator never grows a block in place: quadratic in a large answer) */
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return 0;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, ptr, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

int http_request(const struct daemon *d, const char *method, const char *path, const char *ctype,
                 const char *body, size_t body_len, long timeout_ms, struct http_resp *r)
{
    return http_request_with(d, method, path, NULL, ctype, body, body_len, timeout_ms, r);
}

int http_request_with(const struct daemon *d, const char *method, const char *path,
                      const char *header, const char *ctype, const char *body, size_t body_len,
                      long timeout_ms, struct http_resp *r)
{
    return http_request_from(d, NULL, method, path, header, ctype, body, body_len, timeout_ms, r);
}

int http_request_from(const struct daemon *d, const char *src, const char *method, const char *path,
                      const char *header, const char *ctype, const char *body, size_t body_len,
                      long timeout_ms, struct http_resp *r)
{
    memset(r, 0, sizeof(*r));
    CURL *c = curl_easy_init();
    if (src) { /* a client of another loopback address: bound to it before connecting */
        char iface[64];
        snprintf(iface, sizeof(iface), "host!%s", src);
        curl_easy_setopt(c, CURLOPT_INTERFACE, iface);
    }
    char url[PATH_MAX + 512];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", d->port, path);
    struct buf b = {0}, h = {0};
    struct curl_slist *hdrs = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    /* Paths go as written ("/files/../x" is a test, not something to tidy). */
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        char ct[256];
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype ? ctype : "application/json");
        hdrs = curl_slist_append(hdrs, ct);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    /* header may hold several lines, separated by "\r\n". */
    for (const char *hl = header; hl && *hl;) {
        const char *e = strstr(hl, "\r\n");
        size_t n = e ? (size_t)(e - hl) : strlen(hl);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)n, hl);
        hdrs = curl_slist_append(hdrs, line);
        hl = e ? e + 2 : hl + n;
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms ? timeout_ms : 30000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    double t0 = now_ms();
    CURLcode rc = curl_easy_perform(c);
    r->seconds = (now_ms() - t0) / 1e3;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    r->body = b.p ? b.p : strdup("");
    r->len = b.len;
    r->headers = h.p ? h.p : strdup("");
    r->json = cJSON_ParseWithLength(r->body, r->len);
    if (rc != CURLE_OK) /* (why, for the assertion that follows) */
        fprintf(stderr, "http_request: %s %s: %s after %.1f s, %zu bytes\n", method, path,
                curl_easy_strerror(rc), r->seconds, r->len);
    return rc == CURLE_OK ? 0 : -1;
}

void http_resp_free(struct http_resp *r)
{
    free(r->body);
    free(r->headers);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof(*r));
}

cJSON *execute(const struct daemon *d, const char *json)
{
    struct http_resp r;
    int rc = http_request(d, "POST", "/execute", NULL, json, strlen(json), 60000, &r);
    ck_assert_msg(rc == 0, "transfer failed for %s", json);
    ck_assert_msg(r.status == 200, "status %ld for %s: %s", r.status, json, r.body);
    ck_assert_msg(cJSON_IsObject(r.json), "not JSON: %s", r.body);
    cJSON *j = r.json;
    r.json = NULL;
    http_resp_free(&r);
    return j;
}

const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsString(v), "'%s' is not a string", key);
    return v->valuestring;
}

double jnum(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "'%s' is not a number", key);
    return v->valuedouble;
}

bool jbool(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsBool(v), "'%s' is not a bool", key);
    return cJSON_IsTrue(v);
}

bool jnull(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(v != NULL, "'%s' is missing", key);
    return cJSON_IsNull(v);
}

void assert_error(const struct http_resp *r, long status, const char *code)
{
    ck_assert_msg(r->status == status, "status %ld, expected %ld: %s", r->status, status, r->body);
    ck_assert_msg(strstr(r->headers, "Content-Type: application/json"), "not JSON: %s", r->headers);
    ck_assert_msg(cJSON_IsObject(r->json), "body is not a JSON object: %s", r->body);
    ck_assert_str_eq(jstr(r->json, "code"), code);
    ck_assert_msg(strlen(jstr(r->json, "message")) > 5, "message too short: %s", r->body);
    ck_assert_int_eq(cJSON_GetArraySize(r->json), 2);
}

static void *health_watch_run(void *arg)
{
    struct health_watch *w = arg;
    while (w->running) {
        struct http_resp r;
        double t0 = now_ms();
        int rc = http_request(w->d, "GET", "/healthz", NULL, NULL, 0, 5000, &r);
        double dt = now_ms() - t0;
        if (rc != 0 || r.status != 200)
            w->failed++;
        else if (w->n < (int)(sizeof(w->lat_ms) / sizeof(w->lat_ms[0])))
            w->lat_ms[w->n++] = dt;
        http_resp_free(&r);
        usleep((useconds_t)w->interval_ms * 1000);
    }
    return NULL;
}

void health_watch_start(struct health_watch *w, const struct daemon *d, int interval_ms)
{
    w->d = d;
    w->interval_ms = interval_ms;
    w->n = w->failed = 0;
    w->running = 1;
    pthread_create(&w->thread, NULL, health_watch_run, w);
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void health_watch_stop(struct health_watch *w)
{
    w->running = 0;
    pthread_join(w->thread, NULL);
    qsort(w->lat_ms, (size_t)w->n, sizeof(double), cmp_ms);
}

bool proc_stat(pid_t pid, char *state, pid_t *ppid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* The name in parentheses may hold anything: the fields start after the last ')'. */
    const char *rp = strrchr(buf, ')');
    int pp;
    if (!rp || sscanf(rp + 1, " %c %d", state, &pp) != 2)
        return false;
    *ppid = (pid_t)pp;
    return true;
}

/* Whether pid's command line (its words joined by spaces) holds marker. A process in the
 * middle of execve has an empty command line for a moment (its new memory has no arguments
 * yet): a user process (not a kernel thread: those have none at all) read empty is read
 * again, so that one caught mid-exec is not taken for one without the marker. */
static bool cmdline_has(pid_t pid, pid_t ppid, const char *marker)
{
    char buf[4096];
    bool some = read_cmdline(pid, buf, sizeof(buf));
    for (int i = 0; !some && pid != 2 && ppid != 2 && i < 50 && kill(pid, 0) == 0; i++) {
        usleep(1000);
        some = read_cmdline(pid, buf, sizeof(buf));
    }
    return some && strstr(buf, marker) != NULL;
}

int procs_with(const char *marker)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char state;
        pid_t ppid;
        if (!proc_stat((pid_t)atoi(e->d_name), &state, &ppid) || state == 'Z')
            continue; /* gone, or a zombie: dead already */
        if (cmdline_has((pid_t)atoi(e->d_name), ppid, marker))
            n++;
    }
    closedir(d);
    return n;
}

int wait_no_procs(const char *marker, int ms)
{
    double end = now_ms() + ms;
    int n;
    while ((n = procs_with(marker)) > 0 && now_ms() < end)
        usleep(5000);
    return n;
}

long proc_status_num(pid_t pid, const char *key)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    size_t k = strlen(key);
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') {
            v = strtol(line + k + 1, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

long proc_rss_kb(pid_t pid)
{
    return proc_status_num(pid, "VmRSS");
}

int proc_fd_count(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(p);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

void daemon_install_probe(const struct daemon *d)
{
    char dst[400];
    snprintf(dst, sizeof(dst), "%s/sbxd-probe", d->ws);
    int in = open(sbxd_probe(), O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    ck_assert(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        ck_assert_int_eq(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
    chmod(dst, 0755);
}

/* Start `runsc <the wrap's flags> --root=<d's> exec <id> argv...` with stdin and stdout on
 * pipes (*in_fd, *out_fd); stderr stays the test's. Returns the pid, or -1. */
static pid_t sandbox_spawn(const struct daemon *d, const char *const *argv, int *in_fd, int *out_fd)
{
    const char *a[96];
    int n = 0, r = wrap_runsc();
    if (r < 0 || !d->sb_root[0])
        return -1;
    a[n++] = wrap_words[r];
    /* The global flags of the wrap (those before its subcommand), but d's own state root. */
    for (int i = r + 1; i < wrap_count && wrap_words[i][0] == '-' && n < 40; i++)
        if (strncmp(wrap_words[i], "--root", 6) != 0 && strncmp(wrap_words[i], "-root", 5) != 0)
            a[n++] = wrap_words[i];
    char root[PATH_MAX + 16];
    snprintf(root, sizeof(root), "--root=%s", d->sb_root);
    a[n++] = root;
    a[n++] = "exec";
    a[n++] = d->sb_id;
    for (int i = 0; argv[i] && n < 94; i++)
        a[n++] = argv[i];
    a[n] = NULL;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execvp(a[0], (char *const *)a);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    *in_fd = in[1];
    *out_fd = out[0];
    return pid;
}

int sandbox_exec(const struct daemon *d, const char *const *argv, char *out, size_t outlen)
{
    int in, fd;
    pid_t pid = sandbox_spawn(d, argv, &in, &fd);
    if (pid < 0) {
        fprintf(stderr, "gvisor: cannot run %s in the sandbox of sbxd\n", argv[0]);
        return -1;
    }
    close(in);
    size_t got = 0;
    ssize_t k;
    char sink[4096];
    while ((k = read(fd, got < outlen - 1 ? out + got : sink,
                     got < outlen - 1 ? outlen - 1 - got : sizeof(sink))) > 0)
        if (got < outlen - 1)
            got += (size_t)k;
    out[got] = '\0';
    close(fd);
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* sbxd inside its sandbox: `runsc do` makes the command the container's init. */
#define SANDBOX_SBXD_PID "1"

/* The value of "key <value>" in the probe's daemon report on sbxd; -1 when unknown. */
static long sandbox_daemon_value(const struct daemon *d, const char *key)
{
    const char *argv[] = {sbxd_probe(), "daemon", SANDBOX_SBXD_PID, NULL};
    char out[1024], k[64], exe[PATH_MAX + 8];
    if (sandbox_exec(d, argv, out, sizeof(out)) != 0)
        return -1;
    /* Make sure it is sbxd we are looking at. */
    snprintf(exe, sizeof(exe), "exe %s\n", sbxd_bin());
    ck_assert_msg(strncmp(out, exe, strlen(exe)) == 0, "pid %s of the sandbox is not sbxd:\n%s",
                  SANDBOX_SBXD_PID, out);
    snprintf(k, sizeof(k), "%s ", key);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, k, strlen(k)) == 0)
            return strtol(p + strlen(k), NULL, 10);
    return -1;
}

int daemon_procs_with(const struct daemon *d, const char *marker)
{
    if (!under_gvisor())
        return procs_with(marker);
    if (d->pid <= 0) {
        /* The daemon is gone, and with it its sandbox's kernel: no process of the sandbox can
         * be left but the sandbox itself. Its host processes name its state root. */
        const char *tag = strrchr(d->sb_root, '/');
        return tag && tag[1] ? procs_with(tag + 1) : -1;
    }
    const char *argv[] = {sbxd_probe(), "procs", marker, NULL};
    char out[16384];
    if (sandbox_exec(d, argv, out, sizeof(out)) != 0)
        return -1;
    int n = 0;
    for (const char *p = out; *p; p++)
        n += *p == '\n';
    return n;
}

int daemon_tree_procs(const struct daemon *d, const char *marker, pid_t *pids, int max)
{
    if (under_gvisor())
        return daemon_procs_with(d, marker); /* (the sandbox's are all its) */
    if (d->pid <= 0)
        return -1;
    DIR *dir = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        pid_t pid = (pid_t)atoi(e->d_name), up = pid, ppid;
        char state;
        if (!proc_stat(pid, &state, &ppid) || state == 'Z')
            continue;
        bool ours = false;
        for (int depth = 0; depth < 64 && up > 1 && !ours; depth++) {
            if (!proc_stat(up, &state, &ppid))
                break;
            ours = ppid == d->pid;
            up = ppid;
        }
        if (!ours)
            continue;
        if (!cmdline_has(pid, d->pid, marker))
            continue;
        if (n < max && pids)
            pids[n] = pid;
        n++;
    }
    if (dir)
        closedir(dir);
    return n;
}

int daemon_wait_tree_empty(const struct daemon *d, const char *marker, int ms)
{
    double end = now_ms() + ms;
    int n;
    while ((n = daemon_tree_procs(d, marker, NULL, 0)) > 0 && now_ms() < end)
        usleep(5000);
    return n;
}

int wait_pids_gone(const pid_t *pids, int n, int ms)
{
    double end = now_ms() + ms;
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            char state;
            pid_t ppid;
            live += proc_stat(pids[i], &state, &ppid) && state != 'Z';
        }
        if (!live || now_ms() >= end)
            return live;
        usleep(5000);
    }
}

int daemon_wait_no_procs(const struct daemon *d, const char *marker, int ms)
{
    double end = now_ms() + ms;
    int n;
    while ((n = daemon_procs_with(d, marker)) > 0 && now_ms() < end)
        usleep(5000);
    return n;
}

int send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

long daemon_rss_kb(const struct daemon *d)
{
    return under_gvisor() ? sandbox_daemon_value(d, "rss_kb") : proc_rss_kb(d->pid);
}

int daemon_fd_count(const struct daemon *d)
{
    return under_gvisor() ? (int)sandbox_daemon_value(d, "fds") : proc_fd_count(d->pid);
}

int daemon_oom_score_adj(const struct daemon *d)
{
    if (under_gvisor()) {
        long v = sandbox_daemon_value(d, "oom_score_adj");
        ck_assert_msg(v >= -1000 && v <= 1000, "cannot read sbxd's oom_score_adj in gVisor");
        return (int)v;
    }
    char p[64], buf[16] = "";
    snprintf(p, sizeof(p), "/proc/%d/oom_score_adj", (int)d->pid);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
    fclose(f);
    return atoi(buf);
}

bool daemon_may_lower_oom_score(const struct daemon *d)
{
    if (under_gvisor()) {
        /* A process of the container's root, as sbxd is. */
        const char *argv[] = {sbxd_probe(), "oom-lower", NULL};
        char out[64];
        int st = sandbox_exec(d, argv, out, sizeof(out));
        ck_assert_msg(st == 0 || st == 3, "the probe did not run in the sandbox (status %d)", st);
        return st == 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY);
        _exit(fd >= 0 && write(fd, "-999", 4) == 4 ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static struct {
    const struct daemon *d;
    volatile int on;
    long base, peak;
    pthread_t thread; /* host: a sampling thread */
    pid_t pid;        /* gVisor: the probe sampling inside the sandbox */
    int in, out;
} sampler;

static void *sample_rss(void *arg)
{
    (void)arg;
    while (sampler.on) {
        long kb = proc_rss_kb(sampler.d->pid);
        if (kb > sampler.peak)
            sampler.peak = kb;
        usleep(2000);
    }
    return NULL;
}

/* Read from fd until buf holds a line starting with key; returns its value or -1. */
static long read_keyed_line(int fd, const char *key, char *buf, size_t n)
{
    size_t got = strlen(buf);
    for (;;) {
        const char *p = strstr(buf, key);
        if (p && (p == buf || p[-1] == '\n') && strchr(p, '\n'))
            return strtol(p + strlen(key), NULL, 10);
        ssize_t k = got < n - 1 ? read(fd, buf + got, n - 1 - got) : 0;
        if (k <= 0)
            return -1;
        got += (size_t)k;
        buf[got] = '\0';
    }
}

void rss_sampling_start(const struct daemon *d)
{
    memset(&sampler, 0, sizeof(sampler));
    sampler.d = d;
    if (under_gvisor()) {
        const char *argv[] = {sbxd_probe(), "rss", SANDBOX_SBXD_PID, NULL};
        sampler.pid = sandbox_spawn(d, argv, &sampler.in, &sampler.out);
        ck_assert_msg(sampler.pid > 0, "cannot start the RSS sampler in the sandbox");
        char buf[256] = "";
        sampler.base = read_keyed_line(sampler.out, "base ", buf, sizeof(buf));
        ck_assert_msg(sampler.base > 0, "the RSS sampler in the sandbox did not start");
        sampler.peak = sampler.base;
        return;
    }
    sampler.base = proc_rss_kb(d->pid);
    sampler.peak = sampler.base;
    sampler.on = 1;
    pthread_create(&sampler.thread, NULL, sample_rss, NULL);
}

long rss_sampling_stop(long *base_kb)
{
    if (under_gvisor()) {
        close(sampler.in); /* the probe's stdin ends: it prints its peak */
        char buf[256] = "";
        long peak = read_keyed_line(sampler.out, "peak ", buf, sizeof(buf));
        close(sampler.out);
        waitpid(sampler.pid, NULL, 0);
        ck_assert_msg(peak > 0, "the RSS sampler in the sandbox gave no peak");
        sampler.peak = peak;
    } else {
        sampler.on = 0;
        pthread_join(sampler.thread, NULL);
    }
    *base_kb = sampler.base;
    return sampler.peak;
}

/* Run sbxd with args to completion; returns the exit status, output in out. */
int sbxd_run(const char *const *args, const char *const *env, char *out, size_t outlen)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        /* Inside the same wrap as the daemons (under gVisor: a sandbox of its own). */
        const char *argv[64];
        int n = wrap_argv(argv, 32);
        argv[n++] = sbxd_bin();
        for (int i = 0; args[i] && n < 63; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t k;
    while (got < outlen - 1 && (k = read(p[0], out + got, outlen - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int raw_execute(const struct daemon *d, const char *accept, const char *body)
{
    return raw_post(d, "/execute", accept, body);
}

int raw_post(const struct daemon *d, const char *path, const char *accept, const char *body)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: x\r\n%s%s%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     path, accept ? "Accept: " : "", accept ? accept : "", accept ? "\r\n" : "",
                     strlen(body), body);
    ck_assert_int_eq(send(s, req, (size_t)n, MSG_NOSIGNAL), n);
    return s;
}

char *read_until_close(int s, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *raw = malloc(cap);
    ssize_t k;
    while ((k = recv(s, raw + n, cap - n - 1, 0)) > 0) {
        n += (size_t)k;
        if (n + 1 == cap)
            raw = realloc(raw, cap *= 2);
    }
    raw[n] = '\0';
    if (len)
        *len = n;
    return raw;
}

void http_reqf(const struct daemon *d, struct http_resp *r, const char *method, const char *body,
               const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    int rc = http_request(d, method, path, NULL, body, body ? strlen(body) : 0, 60000, r);
    ck_assert_msg(rc == 0, "%s %s: transfer failed", method, path);
}

void host_ipc_drop(key_t key)
{
    int id;
    if ((id = shmget(key, 0, 0)) >= 0)
        shmctl(id, IPC_RMID, NULL);
    if ((id = msgget(key, 0)) >= 0)
        msgctl(id, IPC_RMID, NULL);
    if ((id = semget(key, 0, 0)) >= 0)
        semctl(id, 0, IPC_RMID);
    char name[32];
    snprintf(name, sizeof(name), "/sbxd-%x", (unsigned)key);
    mq_unlink(name);
}

const char *http_resp_header(const struct http_resp *r, const char *name, char *out, size_t n)
{
    out[0] = '\0';
    size_t nl = strlen(name);
    for (const char *p = r->headers; p && *p;) {
        const char *e = strstr(p, "\r\n");
        if (!e)
            break;
        if ((size_t)(e - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, n, "%.*s", (int)(e - v), v);
        }
        p = e + 2;
    }
    return out;
}

void run_sh(const struct daemon *d, const char *command)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "command", command);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    cJSON *r = execute(d, body);
    free(body);
    ck_assert_msg(jnum(r, "exit_code") == 0, "%s: %s", command, jstr(r, "stderr"));
    cJSON_Delete(r);
}

int loopback_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
    close(s);
    return ntohs(a.sin_port);
}
