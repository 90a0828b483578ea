/* Start-up, configuration errors, and the SIGTERM drain. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

START_TEST(bad_option_exits_2_naming_it)
{
    char out[32768]; /* --help whole */
    const char *a1[] = {"--max-running", "abc", NULL};
    ck_assert_int_eq(sbxd_run(a1, NULL, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "--max-running"));
    ck_assert_ptr_eq(strchr(out, '\n'), out + strlen(out) - 1); /* one line */
    const char *a2[] = {"--listen", "nowhere", NULL};
    ck_assert_int_eq(sbxd_run(a2, NULL, out, sizeof(out)), 2);
    ck_assert_ptr_nonnull(strstr(out, "--listen"));
    const char *a3[] = {"--help", NULL};
    ck_assert_int_eq(sbxd_run(a3, NULL, out, sizeof(out)), 0);
    ck_assert_ptr_nonnull(strstr(out, "--shutdown-grace-ms"));
    ck_assert_ptr_nonnull(strstr(out, "--grpc-listen"));
    ck_assert_ptr_nonnull(strstr(out, "process.v1.ProcessService"));
    const char *a4[] = {"--version", NULL};
    ck_assert_int_eq(sbxd_run(a4, NULL, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "sbxd 0.1.0\n");
}
END_TEST

START_TEST(port_in_use_exits_1)
{
    char out[4096];
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", g_sbxd.port);
    const char *a[] = {"--listen",    listen,        "--grpc-listen",
                       "127.0.0.1:0", "--workspace", "/tmp/sbxd-it-portclash",
                       NULL};
    ck_assert_int_eq(sbxd_run(a, NULL, out, sizeof(out)), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot listen"));
    /* The gRPC listener's port taken: the same clear failure, naming its option. */
    const char *g[] = {"--listen", "127.0.0.1:0", "--grpc-listen",
                       listen,     "--workspace", "/tmp/sbxd-it-portclash",
                       NULL};
    ck_assert_int_eq(sbxd_run(g, NULL, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "cannot listen") && strstr(out, "--grpc-listen"), "%s", out);
    rmdir("/tmp/sbxd-it-portclash");
}
END_TEST

/*
 * --listen twice (the harness gives one, the test another), as the k8s sandboxd flavour runs
 * it (8888 for the router, 8080 where the SDK dials REST): both addresses serve the HTTP API
 * alike: the same routes and workspace, the same token, the same Origin rule, and /healthz
 * lists both ports. (Before, the second --listen replaced the first: one port.)
 */
START_TEST(several_listen_addresses_served_alike)
{
    struct daemon d;
    const char *args[] = {"--listen", "127.0.0.1:0", NULL};
    const char *env[] = {"SBXD_TOKEN=tok-two-ports", NULL};
    daemon_start(&d, args, env);
    char *log = daemon_log_read(&d);
    const char *p = strstr(log, "\"ports\":\"");
    int a = 0, b = 0;
    bool two = p && sscanf(p + 9, "%d,%d", &a, &b) == 2;
    ck_assert_msg(two, "the listening line names no two ports: %s", log);
    free(log);
    ck_assert_int_eq(a, d.port);
    ck_assert_int_ne(a, b);
    struct daemon on[2] = {d, d};
    on[1].port = b;
    const char *auth = "Authorization: Bearer tok-two-ports";
    for (int i = 0; i < 2; i++) {
        struct http_resp r;
        ck_assert_int_eq(http_request(&on[i], "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
        ck_assert_int_eq(r.status, 200);
        const cJSON *ports = cJSON_GetObjectItem(r.json, "http_ports");
        ck_assert_int_eq(cJSON_GetArraySize(ports), 2);
        ck_assert_int_eq(cJSON_GetArrayItem(ports, 0)->valueint, a);
        ck_assert_int_eq(cJSON_GetArrayItem(ports, 1)->valueint, b);
        http_resp_free(&r);
        /* The token guards each. */
        const char *run = "{\"command\":\"echo ok\"}";
        ck_assert_int_eq(http_request(&on[i], "POST", "/execute", NULL, run, strlen(run), 0, &r),
                         0);
        assert_error(&r, 401, "UNAUTHENTICATED");
        http_resp_free(&r);
        ck_assert_int_eq(
            http_request_with(&on[i], "POST", "/execute", auth, NULL, run, strlen(run), 0, &r), 0);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(jstr(r.json, "stdout"), "ok\n");
        http_resp_free(&r);
        /* Every route, on one workspace: a file put through one is read through the other;
         * the legacy and /v1 faces too. */
        char path[64];
        snprintf(path, sizeof(path), "/files/via-%d.txt", i);
        ck_assert_int_eq(http_request_with(&on[i], "PUT", path, auth, "text/plain", "x", 1, 0, &r),
                         0);
        ck_assert_int_lt(r.status, 300);
        http_resp_free(&r);
        snprintf(path, sizeof(path), "/v1/files/via-%d.txt", i);
        ck_assert_int_eq(http_request_with(&on[1 - i], "GET", path, auth, NULL, NULL, 0, 0, &r), 0);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, "x");
        http_resp_free(&r);
        ck_assert_int_eq(
            http_request_with(&on[i], "GET", "/exists/via-0.txt", auth, NULL, NULL, 0, 0, &r), 0);
        ck_assert_int_eq(r.status, 200);
        http_resp_free(&r);
        /* The Origin rule: a page of another site is refused, token or not. */
        char hdr[160];
        snprintf(hdr, sizeof(hdr), "%s\r\nOrigin: http://evil.example", auth);
        ck_assert_int_eq(http_request_with(&on[i], "POST", "/execute", hdr, "text/plain", run,
                                           strlen(run), 0, &r),
                         0);
        ck_assert_int_eq(r.status, 403);
        http_resp_free(&r);
    }
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/*
 * sbxd under setpriv with CAP_SETUID and CAP_SETGID gone from its bounding set (as capsh
 * --drop or a runtime's capability list leaves a root daemon): SBXD_BIN points at a script
 * that starts the real one so. Returns false (the test is skipped) when that cannot be
 * arranged: not root, no setpriv, or sbxd in a wrap (gVisor) of its own.
 */
static char capless_script[64];

static bool capless_begin(int timeout_s)
{
    if (geteuid() != 0 || under_gvisor() || access("/usr/bin/setpriv", X_OK) != 0) {
        fprintf(stderr, "skipped: needs root and setpriv, outside gVisor\n");
        return false;
    }
    snprintf(capless_script, sizeof(capless_script), "/tmp/sbxd-it-capless-XXXXXX");
    int fd = mkstemp(capless_script);
    ck_assert_int_ge(fd, 0);
    /* timeout: an sbxd that starts anyway (the old behaviour) fails the test, never hangs it. */
    dprintf(fd,
            "#!/bin/sh\nexec timeout -s KILL %d /usr/bin/setpriv --bounding-set "
            "-setuid,-setgid '%s' \"$@\"\n",
            timeout_s, sbxd_bin());
    ck_assert_int_eq(fchmod(fd, 0755), 0);
    close(fd);
    ck_assert_int_eq(setenv("SBXD_BIN", capless_script, 1), 0);
    return true;
}

static void capless_end(const char *real_bin)
{
    if (real_bin)
        setenv("SBXD_BIN", real_bin, 1);
    else
        unsetenv("SBXD_BIN");
    unlink(capless_script);
}

/* Root that cannot switch to --user would look healthy while every command failed to
 * start: it refuses to start instead, saying why, before it listens. */
START_TEST(no_user_switch_refuses_to_start)
{
    const char *real = getenv("SBXD_BIN");
    char saved[512] = "";
    if (real)
        snprintf(saved, sizeof(saved), "%s", real);
    if (!capless_begin(20))
        return;
    char out[8192];
    const char *a[] = {"--listen",    "127.0.0.1:0", "--grpc-listen",
                       "127.0.0.1:0", "--workspace", "/tmp/sbxd-it-capless",
                       NULL};
    int st = sbxd_run(a, NULL, out, sizeof(out));
    capless_end(real ? saved : NULL);
    rmdir("/tmp/sbxd-it-capless");
    ck_assert_msg(st == 1, "exit status %d: %s", st, out);
    ck_assert_msg(strstr(out, "cannot run commands as --user 1000:1000") &&
                      strstr(out, "CAP_SETUID") && strstr(out, "--degraded-ok"),
                  "%s", out);
    ck_assert_msg(!strstr(out, "\"listening\""), "%s", out);
}
END_TEST

static void expect_degraded(const struct daemon *d, const char *path)
{
    struct http_resp r;
    ck_assert_int_eq(http_request(d, "GET", path, NULL, NULL, 0, 0, &r), 0);
    ck_assert_msg(r.status == 503, "%s: %ld %s", path, r.status, r.body);
    ck_assert_str_eq(jstr(r.json, "status"), "degraded");
    ck_assert_msg(strstr(jstr(r.json, "reason"), "--user 1000:1000"), "%s: %s", path, r.body);
    http_resp_free(&r);
}

/* With --degraded-ok (or SBXD_DEGRADED_OK) it starts, and says it is degraded on every health
 * route; commands are refused with 503 and that reason, never run. */
START_TEST(no_user_switch_with_degraded_ok_serves_503)
{
    const char *real = getenv("SBXD_BIN");
    char saved[512] = "";
    if (real)
        snprintf(saved, sizeof(saved), "%s", real);
    if (!capless_begin(120))
        return;
    struct daemon d;
    const char *args[] = {"--degraded-ok", NULL};
    daemon_start(&d, args, NULL);
    capless_end(real ? saved : NULL);
    expect_degraded(&d, "/healthz");
    expect_degraded(&d, "/v1/health");
    expect_degraded(&d, "/");
    struct http_resp r;
    ck_assert_int_eq(http_request(&d, "GET", "/v1/health", NULL, NULL, 0, 0, &r), 0);
    ck_assert_str_eq(jstr(r.json, "code"), "UNAVAILABLE");
    http_resp_free(&r);
    static const char *const starts[][2] = {
        {"/execute", "{\"command\":\"touch degraded-ran\"}"}, /* the legacy shape too */
        {"/execute", "{\"argv\":[\"touch\",\"degraded-ran\"],\"timeout_ms\":5000}"},
        {"/processes", "{\"argv\":[\"touch\",\"degraded-ran\"]}"},
    };
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
        const char *b = starts[i][1];
        ck_assert_int_eq(http_request(&d, "POST", starts[i][0], NULL, b, strlen(b), 0, &r), 0);
        assert_error(&r, 503, "UNAVAILABLE");
        ck_assert_msg(strstr(jstr(r.json, "message"), "--user 1000:1000"), "%s", r.body);
        http_resp_free(&r);
    }
    char marker[PATH_MAX];
    snprintf(marker, sizeof(marker), "%s/degraded-ran", d.ws);
    ck_assert_int_ne(access(marker, F_OK), 0);
    ck_assert(daemon_stop_clean(&d, 10000));

    /* The variable does the same. */
    capless_begin(120);
    const char *env[] = {"SBXD_DEGRADED_OK=1", NULL};
    daemon_start(&d, NULL, env);
    capless_end(real ? saved : NULL);
    expect_degraded(&d, "/healthz");
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(workspace_is_created)
{
    struct daemon d;
    char deep[600];
    const char *args[] = {"--workspace", deep, NULL};
    snprintf(deep, sizeof(deep), "/tmp/sbxd-it-new-%d/a/b", (int)getpid());
    daemon_start(&d, args, NULL);
    struct stat st;
    ck_assert_int_eq(stat(deep, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    cJSON *r = execute(&d, "{\"command\":\"pwd\"}");
    char expect[700];
    snprintf(expect, sizeof(expect), "%s\n", deep);
    ck_assert_str_eq(jstr(r, "stdout"), expect);
    cJSON_Delete(r);
    ck_assert(daemon_stop_clean(&d, 10000));
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf /tmp/sbxd-it-new-%d", (int)getpid());
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Context switches of every thread of pid, voluntary or not, so far; -1 if unreadable. */
static long thread_switches(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *dp = opendir(dir);
    if (!dp)
        return -1;
    long total = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[400], line[256];
        snprintf(p, sizeof(p), "%s/%s/status", dir, e->d_name);
        FILE *f = fopen(p, "r");
        while (f && fgets(line, sizeof(line), f))
            if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0 ||
                strncmp(line, "nonvoluntary_ctxt_switches:", 27) == 0)
                total += strtol(strchr(line, ':') + 1, NULL, 10);
        if (f)
            fclose(f);
    }
    closedir(dp);
    return total;
}

/* An idle sbxd sleeps: its threads wake a few times a second in all (the main thread's tick
 * and the namespace pool's), not 50 (the pool once looked for freed slots every 20 ms). */
START_TEST(idle_daemon_sleeps)
{
    if (under_gvisor()) {
        gvisor_skip("idle wake-ups", "the daemon's threads are not host threads");
        return;
    }
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    cJSON *r = execute(&d, "{\"command\":\"true\"}"); /* every lazy start done */
    ck_assert_str_eq(jstr(r, "status"), "exited");
    cJSON_Delete(r);
    usleep(1500 * 1000);
    long a = thread_switches(d.pid);
    usleep(3000 * 1000);
    long b = thread_switches(d.pid);
    ck_assert_int_ge(a, 0);
    fprintf(stderr, "idle daemon: %ld wake-ups in 3 s\n", b - a);
    ck_assert_msg(b - a <= 45, "an idle sbxd woke %ld times in 3 s", b - a);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

static struct daemon dd;

static void *long_request(void *arg)
{
    const char *body = arg;
    struct http_resp r;
    int rc = http_request(&dd, "POST", "/execute", NULL, body, strlen(body), 20000, &r);
    cJSON *j = r.status == 200 ? r.json : NULL;
    if (!j)
        fprintf(stderr, "long request: transport %d, HTTP %ld: %.300s\n", rc, r.status, r.body);
    r.json = NULL;
    http_resp_free(&r);
    return j;
}

static void wait_running(struct daemon *d, int n)
{
    for (int i = 0; i < 400; i++) {
        struct http_resp h;
        http_request(d, "GET", "/healthz", NULL, NULL, 0, 0, &h);
        int running = h.json ? (int)jnum(h.json, "running") : -1;
        http_resp_free(&h);
        if (running == n)
            return;
        usleep(5000);
    }
    ck_abort_msg("never saw %d running", n);
}

static int wait_exit(pid_t pid, int ms)
{
    double end = now_ms() + ms;
    int st;
    while (now_ms() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        usleep(5000);
    }
    return -1;
}

START_TEST(sigterm_drains_running_commands)
{
    const char *args[] = {"--shutdown-grace-ms", "5000", NULL};
    daemon_start(&dd, args, NULL);
    pthread_t t;
    pthread_create(&t, NULL, long_request, "{\"command\":\"sleep 1; echo finished\"}");
    wait_running(&dd, 1);
    kill(dd.pid, SIGTERM);
    usleep(100000);
    /* Draining: the probe says so and new work is refused ... */
    struct http_resp r;
    ck_assert_int_eq(http_request(&dd, "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(jstr(r.json, "status"), "draining");
    http_resp_free(&r);
    const char *b = "{\"command\":\"true\"}";
    ck_assert_int_eq(http_request(&dd, "POST", "/execute", NULL, b, strlen(b), 0, &r), 0);
    assert_error(&r, 503, "UNAVAILABLE");
    http_resp_free(&r);
    /* ... while the running command finishes normally, and then sbxd exits 0. */
    cJSON *res;
    pthread_join(t, (void **)&res);
    ck_assert_ptr_nonnull(res);
    ck_assert_str_eq(jstr(res, "status"), "exited");
    ck_assert_str_eq(jstr(res, "stdout"), "finished\n");
    cJSON_Delete(res);
    int st = wait_exit(dd.pid, 3000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    dd.pid = 0;
    ck_assert(!daemon_log_has_sanitizer_report(&dd));
    daemon_stop(&dd, 0);
    remove(dd.log);
}
END_TEST

START_TEST(sigterm_kills_what_outlives_the_grace)
{
    const char *args[] = {"--shutdown-grace-ms", "300", NULL};
    daemon_start(&dd, args, NULL);
    pthread_t t;
    pthread_create(&t, NULL, long_request, "{\"command\":\"sleep 30.1212 & sleep 30.1212\"}");
    wait_running(&dd, 1);
    double t0 = now_ms();
    kill(dd.pid, SIGTERM);
    cJSON *res;
    pthread_join(t, (void **)&res);
    ck_assert_ptr_nonnull(res);
    ck_assert_str_eq(jstr(res, "status"), "canceled");
    ck_assert_int_eq((int)jnum(res, "signal"), 9);
    cJSON_Delete(res);
    int st = wait_exit(dd.pid, 3000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    ck_assert_msg(now_ms() - t0 < 1500 * SLOW, "took %.0f ms", now_ms() - t0);
    dd.pid = 0;
    ck_assert_int_eq(daemon_wait_no_procs(&dd, "sleep 30.1212", 500), 0);
    ck_assert(!daemon_log_has_sanitizer_report(&dd));
    daemon_stop(&dd, 0);
    remove(dd.log);
}
END_TEST

Suite *lifecycle_suite(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *tc = tcase_create("start-stop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_option_exits_2_naming_it);
    tcase_add_test(tc, port_in_use_exits_1);
    tcase_add_test(tc, several_listen_addresses_served_alike);
    tcase_add_test(tc, no_user_switch_refuses_to_start);
    tcase_add_test(tc, no_user_switch_with_degraded_ok_serves_503);
    tcase_add_test(tc, workspace_is_created);
    tcase_add_test(tc, idle_daemon_sleeps);
    tcase_add_test(tc, sigterm_drains_running_commands);
    tcase_add_test(tc, sigterm_kills_what_outlives_the_grace);
    suite_add_tcase(s, tc);
    return s;
}
