/* Start-up, configuration errors, and the SIGTERM drain. */
#include <check.h>
#include <fcntl.h>
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
    char out[4096];
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
    const char *a[] = {"--listen", listen, "--workspace", "/tmp/sbxd-it-portclash", NULL};
    ck_assert_int_eq(sbxd_run(a, NULL, out, sizeof(out)), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot listen"));
    rmdir("/tmp/sbxd-it-portclash");
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
    tcase_add_test(tc, workspace_is_created);
    tcase_add_test(tc, sigterm_drains_running_commands);
    tcase_add_test(tc, sigterm_kills_what_outlives_the_grace);
    suite_add_tcase(s, tc);
    return s;
}
