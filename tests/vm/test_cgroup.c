/* cgroup v2 enforcement, in a real kernel (the vm tier): each test replays what a hostile
 * or careless command does and checks that its own leaf contains it. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static cJSON *run(const char *json)
{
    return execute(&g_sbxd, json);
}

static cJSON *isolation(void)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    cJSON *iso = cJSON_DetachItemFromObject(r.json, "isolation");
    http_resp_free(&r);
    return iso;
}

START_TEST(healthz_reports_cgroup_enforcement)
{
    cJSON *iso = isolation();
    ck_assert_str_eq(jstr(iso, "cgroup"), "v2");
    ck_assert_str_eq(jstr(iso, "memory"), "enforced");
    ck_assert_str_eq(jstr(iso, "pids"), "enforced");
    ck_assert_str_eq(jstr(iso, "cpu"), "cpu.max");
    ck_assert_str_eq(jstr(iso, "tree_kill"), "cgroup");
    cJSON_Delete(iso);
}
END_TEST

START_TEST(memory_bomb_ends_oom_and_the_daemon_lives)
{
    /* dd allocates its 200 MB block and fills it: far past 64 MiB. */
    cJSON *r = run("{\"command\":\"dd if=/dev/zero of=/dev/null bs=200M count=1\","
                   "\"limits\":{\"memory_bytes\":67108864}}");
    ck_assert_str_eq(jstr(r, "status"), "oom");
    ck_assert(jbool(r, "oom_killed"));
    ck_assert(!jbool(r, "timed_out"));
    ck_assert_int_eq((int)jnum(r, "exit_code"), 137);
    ck_assert(jnum(r, "memory_peak_bytes") <= 67108864.0);
    cJSON_Delete(r);
    cJSON_Delete(isolation()); /* still answering */
}
END_TEST

/* A code context is held by its cgroup leaf like any command: a shell session whose code eats
 * past its memory limit is killed with everything it runs, the answer says so (died, out of
 * memory), and sbxd answers on; a restart brings the context back. */
START_TEST(context_memory_bomb_ends_died_and_the_daemon_lives)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "POST", "{\"language\":\"bash\",\"limits\":{\"memory_bytes\":67108864}}",
              "/contexts");
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    char id[64];
    snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST",
              "{\"code\":\"x=$(head -c 300000000 /dev/zero | tr '\\\\0' a); echo ${#x}\"}",
              "/contexts/%s/execute", id);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_str_eq(jstr(r.json, "status"), "died");
    const char *why = jstr(cJSON_GetObjectItem(r.json, "error"), "value");
    ck_assert_msg(strstr(why, "out of memory"), "%s", r.body);
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", id);
    ck_assert_str_eq(jstr(r.json, "state"), "dead");
    http_resp_free(&r);
    cJSON_Delete(isolation()); /* still answering */
    http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/restart", id);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"echo back\"}", "/contexts/%s/execute", id);
    ck_assert_str_eq(jstr(r.json, "stdout"), "back\n");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "DELETE", NULL, "/contexts/%s", id);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
}
END_TEST

START_TEST(fork_bomb_is_held_by_pids_max)
{
    static struct health_watch hw;
    health_watch_start(&hw, &g_sbxd, 50);
    cJSON *r = run("{\"command\":\"b() { b | b & }; while :; do b 2>/dev/null; sleep 0.05; done\","
                   "\"limits\":{\"pids\":32},\"timeout_ms\":3000}");
    health_watch_stop(&hw);
    /* The shell gives up when it cannot fork any more (or is stopped at the deadline); the
     * daemon answered all along. */
    const char *st = jstr(r, "status");
    ck_assert_msg(strcmp(st, "exited") == 0 || strcmp(st, "timeout") == 0, "status %s", st);
    ck_assert_int_ge(hw.n, 1);
    ck_assert_int_eq(hw.failed, 0);
    cJSON_Delete(r);

    /* Held: 40 sleeps asked for, at most 10 processes in the cgroup. Read with shell builtins only,
     * since at the limit not even cat could be forked. */
    r = run("{\"command\":\"(for i in $(seq 40); do sleep 30.5 & done) 2>/dev/null; "
            "read cg < /proc/self/cgroup; read n < /sys/fs/cgroup${cg#0::}/pids.current; "
            "echo $n\",\"limits\":{\"pids\":10}}");
    int n = atoi(jstr(r, "stdout"));
    ck_assert_msg(n >= 2 && n <= 10, "pids.current %d with pids.max 10", n);
    cJSON_Delete(r);
    ck_assert_int_eq(wait_no_procs("sleep 30.5", 2000), 0);
}
END_TEST

START_TEST(cpu_quota_limits_cpu_time)
{
    cJSON *r = run("{\"command\":\"while :; do :; done\",\"limits\":{\"cpu_quota\":0.2},"
                   "\"timeout_ms\":3000}");
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    double ratio = jnum(r, "cpu_ms") / jnum(r, "duration_ms");
    ck_assert_msg(ratio > 0.1 && ratio < 0.3, "cpu_ms/duration_ms = %.3f, want about 0.2", ratio);
    cJSON_Delete(r);
}
END_TEST

/* GET /usage reads sbxd's cgroup: its memory.current, and its cpu.stat, which counts a busy
 * command's time while it runs. */
START_TEST(usage_reads_the_cgroup)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", "/usage", NULL, NULL, 0, 0, &r);
    ck_assert_msg(r.status == 200, "%ld: %s", r.status, r.body);
    ck_assert_msg(strncmp(jstr(r.json, "memory_source"), "cgroup", 6) == 0, "%s", r.body);
    ck_assert_str_eq(jstr(r.json, "cpu_source"), "cgroup");
    ck_assert_msg(jnum(r.json, "mem_used") > 0, "%s", r.body);
    double cpus = jnum(r.json, "cpu_count");
    http_resp_free(&r);
    cJSON_Delete(run("{\"command\":\"while :; do :; done\",\"timeout_ms\":1000}"));
    http_request(&g_sbxd, "GET", "/usage", NULL, NULL, 0, 0, &r);
    ck_assert_msg(jnum(r.json, "cpu_interval_ms") >= 900, "%s", r.body);
    ck_assert_msg(jnum(r.json, "cpu_used_pct") >= 0.6 * 100 / cpus, "%s", r.body);
    http_resp_free(&r);
}
END_TEST

START_TEST(memory_peak_is_the_commands_own)
{
    cJSON *r = run("{\"command\":\"dd if=/dev/zero of=/dev/null bs=40M count=1\"}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    double peak = jnum(r, "memory_peak_bytes");
    ck_assert_msg(peak >= 40e6 && peak < 120e6, "memory_peak_bytes %.0f", peak);
    cJSON_Delete(r);
    r = run("{\"command\":\"true\"}");
    ck_assert_msg(jnum(r, "memory_peak_bytes") < 16e6, "true peaked at %.0f",
                  jnum(r, "memory_peak_bytes"));
    cJSON_Delete(r);
}
END_TEST

START_TEST(cgroup_kill_takes_setsid_escapees)
{
    cJSON *r = run("{\"command\":\"sleep 1000.77 & setsid sleep 1000.77 & "
                   "(setsid sh -c 'sleep 1000.77 &'); wait\",\"timeout_ms\":500}");
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    cJSON_Delete(r);
    ck_assert_int_eq(wait_no_procs("sleep 1000.77", 2000), 0);
}
END_TEST

/* A background process's signal goes to every process of its leaf: a setsid escapee, out of
 * the process group, gets it too; DELETE then leaves no leaf behind. */
START_TEST(process_signal_reaches_the_whole_leaf)
{
    const char *body = "{\"command\":\"setsid sleep 1000.88 & sleep 1000.88; wait\"}";
    struct http_resp r;
    http_request(&g_sbxd, "POST", "/processes", NULL, body, strlen(body), 0, &r);
    ck_assert_int_eq(r.status, 201);
    char path[128];
    snprintf(path, sizeof(path), "/processes/%s", jstr(r.json, "id"));
    http_resp_free(&r);
    /* The shell (its command line names them too) and the two sleeps. */
    for (int i = 0; i < 200 && procs_with("sleep 1000.88") < 3; i++)
        usleep(10000);
    ck_assert_int_eq(procs_with("sleep 1000.88"), 3);
    char sig[160];
    snprintf(sig, sizeof(sig), "%s/signal", path);
    const char *term = "{\"signal\":\"SIGTERM\"}";
    http_request(&g_sbxd, "POST", sig, NULL, term, strlen(term), 0, &r);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    ck_assert_int_eq(wait_no_procs("sleep 1000.88", 2000), 0);
    http_request(&g_sbxd, "DELETE", path, NULL, NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "status"), "signaled");
    ck_assert_int_eq((int)jnum(r.json, "signal"), 15);
    http_resp_free(&r);
}
END_TEST

/* Leaves under sbxd's cgroup other than its own "sbxd" leaf. */
static int job_leaves(const char *base)
{
    DIR *d = opendir(base);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, "job-", 4) == 0;
    closedir(d);
    return n;
}

START_TEST(no_leaf_remains_and_stale_ones_go)
{
    cJSON *iso = isolation();
    char base[512];
    snprintf(base, sizeof(base), "%s", jstr(iso, "cgroup_base"));
    cJSON_Delete(iso);
    cJSON_Delete(run("{\"command\":\"sleep 100 & echo bg\"}"));
    cJSON_Delete(run("{\"command\":\"sleep 5\",\"timeout_ms\":100}"));
    ck_assert_int_eq(job_leaves(base), 0);
    /* A leaf a crashed run left behind is removed when sbxd starts again. */
    char stale[600];
    snprintf(stale, sizeof(stale), "%s/job-left-by-a-crash", base);
    ck_assert_int_eq(mkdir(stale, 0755), 0);
    struct daemon d;
    daemon_start(&d, NULL, NULL); /* a new sbxd in the same cgroup, as after a restart */
    ck_assert_int_eq(job_leaves(base), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f, "cannot open %s", path);
    ck_assert_int_ge(fputs(text, f), 0);
    int rc = fclose(f);
    ck_assert_msg(rc == 0, "cannot write %s to %s: %s", text, path, strerror(errno));
}

START_TEST(required_cgroup_failure_degrades_then_recovers)
{
    struct daemon d;
    const char *args[] = {"--require-isolation", "cgroup,memory,pids", NULL};
    daemon_start(&d, args, NULL);
    struct http_resp r;
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    char base[512], path[600];
    snprintf(base, sizeof(base), "%s",
             jstr(cJSON_GetObjectItem(r.json, "isolation"), "cgroup_base"));
    http_resp_free(&r);
    /* The memory controller is taken away from sbxd's leaves (as a runtime may): the next
     * command cannot get its memory limit. */
    snprintf(path, sizeof(path), "%s/cgroup.subtree_control", base);
    write_file(path, "-memory");
    const char *body = "{\"command\":\"echo hi\"}";
    http_request(&d, "POST", "/execute", "application/json", body, strlen(body), 0, &r);
    assert_error(&r, 503, "UNAVAILABLE");
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "message"), "degraded"));
    http_resp_free(&r);
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(jstr(r.json, "status"), "degraded");
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "reason"), "cgroup"));
    http_resp_free(&r);
    /* The command did not run without its cgroup, and nothing of it is left. */
    ck_assert_int_eq(job_leaves(base), 0);
    /* Once the controller is back, the next command runs and the daemon is healthy. */
    write_file(path, "+memory");
    cJSON *x = execute(&d, body);
    ck_assert_str_eq(jstr(x, "stdout"), "hi\n");
    cJSON_Delete(x);
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "status"), "ok");
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

Suite *cgroup_suite(void)
{
    Suite *s = suite_create("cgroup");
    TCase *tc = tcase_create("enforcement");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, healthz_reports_cgroup_enforcement);
    tcase_add_test(tc, memory_bomb_ends_oom_and_the_daemon_lives);
    tcase_add_test(tc, context_memory_bomb_ends_died_and_the_daemon_lives);
    tcase_add_test(tc, fork_bomb_is_held_by_pids_max);
    tcase_add_test(tc, cpu_quota_limits_cpu_time);
    tcase_add_test(tc, usage_reads_the_cgroup);
    tcase_add_test(tc, memory_peak_is_the_commands_own);
    tcase_add_test(tc, cgroup_kill_takes_setsid_escapees);
    tcase_add_test(tc, process_signal_reaches_the_whole_leaf);
    tcase_add_test(tc, no_leaf_remains_and_stale_ones_go);
    tcase_add_test(tc, required_cgroup_failure_degrades_then_recovers);
    suite_add_tcase(s, tc);
    return s;
}
