#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

void daemon_start(struct daemon *d, const char *const *args, const char *const *env)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->ws, sizeof(d->ws), "/tmp/sbxd-it-ws-XXXXXX");
    if (!mkdtemp(d->ws)) {
        perror("mkdtemp");
        abort();
    }
    snprintf(d->log, sizeof(d->log), "%s.log", d->ws);

    /* SBXD_WRAP: a command that runs sbxd inside something (e.g. "runsc --network=host do"),
     * split on spaces. */
    const char *argv[96];
    int argc = 0;
    static char wrap[512];
    snprintf(wrap, sizeof(wrap), "%s", getenv("SBXD_WRAP") ? getenv("SBXD_WRAP") : "");
    for (char *save = NULL, *w = strtok_r(wrap, " ", &save); w && argc < 32;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    const char *fixed[] = {sbxd_bin(), "--listen",     "127.0.0.1:0", "--workspace",
                           d->ws,      "--log-format", "json"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[argc++] = fixed[i];
    for (int i = 0; args && args[i] && argc < 94; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    /* A marker the daemon has in its environment: commands must never see it. */
    const char *envp[64] = {"PATH=/usr/bin:/bin", "SBXD_TEST_DAEMON_SECRET=do-not-leak"};
    int envc = 2;
    const char *asan = getenv("ASAN_OPTIONS");
    static char asan_buf[512];
    if (asan) {
        snprintf(asan_buf, sizeof(asan_buf), "ASAN_OPTIONS=%s", asan);
        envp[envc++] = asan_buf;
    }
    for (int i = 0; env && env[i] && envc < 62; i++)
        envp[envc++] = env[i];
    envp[envc] = NULL;

    pid_t pid = fork();
    if (pid == 0) {
        /* If the test process dies half-way, its daemon goes with it (and drains first). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        dup2(fd, 2);
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, 0);
        dup2(devnull, 1);
        /* An fd left open without CLOEXEC, as a careless parent would: commands must not
         * inherit it. */
        dup2(devnull, 9);
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
            return;
        }
        free(log);
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char *l = daemon_log_read(d);
            fprintf(stderr, "sbxd exited during start-up (status %d):\n%s\n", st, l);
            free(l);
            abort();
        }
        usleep(10000);
    }
    fprintf(stderr, "sbxd did not start listening\n");
    kill(pid, SIGKILL);
    abort();
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

int daemon_stop(struct daemon *d, int timeout_ms)
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

struct buf {
    char *p;
    size_t len;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct buf *b = ud;
    size_t n = size * nmemb;
    b->p = realloc(b->p, b->len + n + 1);
    memcpy(b->p + b->len, ptr, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

int http_request(const struct daemon *d, const char *method, const char *path, const char *ctype,
                 const char *body, size_t body_len, long timeout_ms, struct http_resp *r)
{
    memset(r, 0, sizeof(*r));
    CURL *c = curl_easy_init();
    char url[512];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", d->port, path);
    struct buf b = {0}, h = {0};
    struct curl_slist *hdrs = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
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

int procs_with(const char *marker)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char p[300], buf[4096];
        snprintf(p, sizeof(p), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            continue; /* a zombie is dead already */
        snprintf(p, sizeof(p), "/proc/%s/cmdline", e->d_name);
        f = fopen(p, "r");
        if (!f)
            continue;
        len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (!buf[i])
                buf[i] = ' ';
        buf[len] = '\0';
        if (strstr(buf, marker))
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

long proc_rss_kb(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
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
