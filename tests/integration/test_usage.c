/*
 * The sandbox's usage: GET /usage, behind the token, with E2B's metrics' names; memory and
 * disk figures that make sense, CPU used that rises with a busy command, and the background
 * processes counted.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

#define TOKEN "tok-usage-5e1d0c9b8a7f6e5d4c3b2a19"
#define AUTH  "Authorization: Bearer " TOKEN

static void usage_get(const struct daemon *d, struct http_resp *r)
{
    ck_assert_int_eq(http_request_with(d, "GET", "/usage", AUTH, NULL, NULL, 0, 0, r), 0);
    ck_assert_msg(r->status == 200 && cJSON_IsObject(r->json), "%ld: %s", r->status, r->body);
}

static void post(const struct daemon *d, const char *path, const char *body, long status)
{
    struct http_resp r;
    ck_assert_int_eq(http_request_with(d, "POST", path, AUTH, NULL, body, strlen(body), 0, &r), 0);
    ck_assert_msg(r.status == status, "%s: %ld %s", path, r.status, r.body);
    http_resp_free(&r);
}

START_TEST(usage_reports_the_sandbox_and_needs_the_token)
{
    struct daemon d;
    const char *env[] = {"SBXD_TOKEN=" TOKEN, NULL};
    daemon_start(&d, NULL, env);
    struct http_resp r;
    /* Not a health check: what the sandbox runs is told to the token's holder only. */
    ck_assert_int_eq(http_request(&d, "GET", "/usage", NULL, NULL, 0, 0, &r), 0);
    assert_error(&r, 401, "UNAUTHENTICATED");
    http_resp_free(&r);

    usage_get(&d, &r);
    const cJSON *u = r.json;
    /* E2B's Metrics names, so that tools written for it read this. */
    static const char *const e2b[] = {"cpu_count", "cpu_used_pct", "mem_used",
                                      "mem_total", "disk_used",    "disk_total"};
    for (size_t i = 0; i < 6; i++)
        ck_assert_msg(cJSON_IsNumber(cJSON_GetObjectItem(u, e2b[i])), "%s in %s", e2b[i], r.body);
    ck_assert(jnum(u, "cpu_count") >= 1);
    ck_assert(jnum(u, "mem_used") > 0 && jnum(u, "mem_total") >= jnum(u, "mem_used"));
    const char *ms = jstr(u, "memory_source");
    ck_assert_msg(
        ms && (!strcmp(ms, "cgroup") || !strcmp(ms, "cgroup+meminfo") || !strcmp(ms, "meminfo")),
        "%s", r.body);
    ck_assert(jnum(u, "disk_total") > 0 && jnum(u, "disk_total") >= jnum(u, "disk_used"));
    const cJSON *disks = cJSON_GetObjectItem(u, "disks");
    ck_assert_int_eq(cJSON_GetArraySize(disks), 2);
    ck_assert_str_eq(jstr(cJSON_GetArrayItem(disks, 0), "path"), d.ws);
    ck_assert_str_eq(jstr(cJSON_GetArrayItem(disks, 1), "path"), "/tmp");
    ck_assert(jnum(cJSON_GetArrayItem(disks, 1), "total") >=
              jnum(cJSON_GetArrayItem(disks, 1), "used"));
    unsigned procs = (unsigned)jnum(u, "processes_running");
    http_resp_free(&r);

    /* A background process is counted while it runs. */
    post(&d, "/processes", "{\"command\":\"sleep 30\"}", 201);
    usage_get(&d, &r);
    ck_assert_msg(jnum(r.json, "processes_running") == procs + 1, "%s", r.body);
    http_resp_free(&r);

    /* A command busy for the whole interval uses at least one CPU of cpu_count: the
     * percentage over the interval from the read before it to the read after says so. */
    usage_get(&d, &r);
    double cpus = jnum(r.json, "cpu_count");
    http_resp_free(&r);
    post(&d, "/execute", "{\"command\":\"while :; do :; done\",\"timeout_ms\":600}", 200);
    usage_get(&d, &r);
    ck_assert_msg(jnum(r.json, "cpu_interval_ms") >= 500, "%s", r.body);
    ck_assert_msg(jnum(r.json, "cpu_used_pct") >= 0.7 * 100 / cpus, "%s", r.body);
    ck_assert_msg(jnum(r.json, "cpu_used_pct") <= 100, "%s", r.body);
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

Suite *usage_suite(void)
{
    Suite *s = suite_create("usage");
    TCase *tc = tcase_create("usage");
    tcase_set_timeout(tc, 30 * SLOW);
    tcase_add_test(tc, usage_reports_the_sandbox_and_needs_the_token);
    suite_add_tcase(s, tc);
    return s;
}
