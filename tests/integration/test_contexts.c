/* /contexts: persistent shell sessions, their executions, interrupts, limits and ends. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* POST /contexts: asserts 201 and returns the id. */
static void ctx_new(const struct daemon *d, const char *body, char *id, size_t idlen)
{
    struct http_resp r;
    http_reqf(d, &r, "POST", body, "/contexts");
    ck_assert_msg(r.status == 201, "status %ld for %s: %s", r.status, body, r.body);
    snprintf(id, idlen, "%s", jstr(r.json, "id"));
    ck_assert_msg(id[0] && jnum(r.json, "pid") > 0, "%s", r.body);
    ck_assert_str_eq(jstr(r.json, "state"), "idle");
    char loc[128];
    snprintf(loc, sizeof(loc), "Location: /contexts/%s\r\n", id);
    ck_assert_msg(strstr(r.headers, loc), "no '%s' in:\n%s", loc, r.headers);
    http_resp_free(&r);
}

/* POST /contexts/{id}/execute of code (JSON-escaped by the caller), optional timeout; the
 * result object (caller frees). Asserts 200. */
static cJSON *run(const struct daemon *d, const char *id, const char *code_json, long timeout_ms)
{
    char body[4096];
    if (timeout_ms > 0)
        snprintf(body, sizeof(body), "{\"code\":%s,\"timeout_ms\":%ld}", code_json, timeout_ms);
    else
        snprintf(body, sizeof(body), "{\"code\":%s}", code_json);
    struct http_resp r;
    http_reqf(d, &r, "POST", body, "/contexts/%s/execute", id);
    ck_assert_msg(r.status == 200 && cJSON_IsObject(r.json), "status %ld: %s", r.status, r.body);
    ck_assert_msg(!memchr(r.body, 0x1e, r.len) && !strstr(r.body, "\\u001e") &&
                      !strstr(r.body, "__sbxd"),
                  "protocol text leaked: %s", r.body);
    cJSON *o = r.json;
    r.json = NULL;
    http_resp_free(&r);
    return o;
}

static void ctx_delete_ok(const struct daemon *d, const char *id)
{
    struct http_resp r;
    http_reqf(d, &r, "DELETE", NULL, "/contexts/%s", id);
    ck_assert_msg(r.status == 200, "status %ld: %s", r.status, r.body);
    ck_assert_str_eq(jstr(r.json, "state"), "dead");
    http_resp_free(&r);
}

START_TEST(state_persists_between_executions)
{
    char id[64];
    ctx_new(&g_sbxd, "{\"language\":\"bash\"}", id, sizeof(id));
    cJSON *o = run(&g_sbxd, id,
                   "\"mkdir -p sub && cd sub; export X=5; Y=local; f() { echo fn $1; }; "
                   "alias ll='echo aliased'\\necho hi; echo err >&2; false\"",
                   0);
    ck_assert_str_eq(jstr(o, "stdout"), "hi\n");
    ck_assert_str_eq(jstr(o, "stderr"), "err\n");
    ck_assert_str_eq(jstr(o, "status"), "error");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 1);
    ck_assert_int_eq((int)jnum(o, "execution_count"), 1);
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(o, "error"), "name"), "ExitStatus");
    cJSON_Delete(o);
    o = run(&g_sbxd, id, "\"basename $PWD; echo $X $Y; f a; ll b; printf no-newline\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "sub\n5 local\nfn a\naliased b\nno-newline");
    ck_assert_str_eq(jstr(o, "stderr"), "");
    ck_assert_str_eq(jstr(o, "status"), "ok");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 0);
    ck_assert(jnull(o, "error"));
    ck_assert_int_eq((int)jnum(o, "execution_count"), 2);
    cJSON_Delete(o);
    /* Code that reads stdin gets end of file, not what follows; an unfinished quote is a
     * syntax error of its own, and the session goes on; a line like a here-doc end is data. */
    o = run(&g_sbxd, id, "\"cat; echo read-done\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "read-done\n");
    cJSON_Delete(o);
    o = run(&g_sbxd, id, "\"echo \\\"unclosed\"", 0);
    ck_assert_int_eq((int)jnum(o, "exit_code"), 2);
    ck_assert_ptr_nonnull(strstr(jstr(o, "stderr"), "unexpected EOF"));
    cJSON_Delete(o);
    o = run(&g_sbxd, id, "\"cat <<'EOF'\\nSBXD_x\\n!! $X `no`\\nEOF\\necho $((X+1))\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "SBXD_x\n!! $X `no`\n6\n");
    cJSON_Delete(o);
    /* Large output arrives whole, and an execution's output never spills into the next. */
    o = run(&g_sbxd, id, "\"head -c 300000 /dev/zero | tr '\\\\0' a; (sleep 0.3; echo late) &\"",
            0);
    ck_assert_uint_eq(strlen(jstr(o, "stdout")), 300000);
    cJSON_Delete(o);
    usleep(600 * 1000);
    o = run(&g_sbxd, id, "\"echo next\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "next\n");
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(timeout_interrupts_and_state_survives)
{
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    cJSON *o = run(&g_sbxd, id, "\"export KEEP=yes\"", 0);
    cJSON_Delete(o);
    double t0 = now_ms();
    o = run(&g_sbxd, id, "\"sleep 31.25; echo after\"", 400);
    double took = now_ms() - t0;
    ck_assert_str_eq(jstr(o, "status"), "timeout");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 130);
    ck_assert(jbool(o, "interrupted"));
    ck_assert(!jbool(o, "restarted"));
    ck_assert_ptr_null(strstr(jstr(o, "stdout"), "after"));
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(o, "error"), "name"), "Timeout");
    ck_assert_msg(took < 3000 * SLOW, "took %.0f ms", took);
    cJSON_Delete(o);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 31.25", 3000), 0);
    o = run(&g_sbxd, id, "\"echo $KEEP\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "yes\n");
    ck_assert_str_eq(jstr(o, "status"), "ok");
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* A shell that ignores SIGINT (and so its children) does not come back from the interrupt:
 * it is restarted, and the answer says so. */
START_TEST(a_shell_that_ignores_the_interrupt_is_restarted)
{
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    cJSON *o = run(&g_sbxd, id, "\"export GONE=1; trap '' INT; sleep 32.25\"", 300);
    ck_assert_str_eq(jstr(o, "status"), "timeout");
    ck_assert(jbool(o, "restarted"));
    ck_assert_ptr_nonnull(strstr(jstr(cJSON_GetObjectItem(o, "error"), "value"), "restarted"));
    cJSON_Delete(o);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 32.25", 3000), 0);
    o = run(&g_sbxd, id, "\"echo [$GONE]\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "[]\n");
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(interrupt_stops_the_running_code)
{
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/interrupt", id);
    ck_assert_int_eq(r.status, 200);
    ck_assert(!jbool(r.json, "interrupted")); /* nothing ran */
    http_resp_free(&r);
    /* The execution on a connection of its own; the interrupt on another. */
    char path[128];
    snprintf(path, sizeof(path), "/contexts/%s/execute", id);
    int s = raw_post(&g_sbxd, path, NULL, "{\"code\":\"sleep 33.25; echo after\"}");
    for (int i = 0; i < 100 && daemon_procs_with(&g_sbxd, "sleep 33.25") < 1; i++)
        usleep(20000);
    http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/interrupt", id);
    ck_assert_int_eq(r.status, 200);
    ck_assert(jbool(r.json, "interrupted"));
    http_resp_free(&r);
    char *out = read_until_close(s, NULL);
    close(s);
    ck_assert_msg(strstr(out, "\"exit_code\":130") && strstr(out, "\"interrupted\":true") &&
                      !strstr(out, "after"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 33.25", 3000), 0);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(exit_ends_the_context_and_restart_brings_it_back)
{
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    cJSON *o = run(&g_sbxd, id, "\"export Z=1; exit 3\"", 0);
    ck_assert_str_eq(jstr(o, "status"), "died");
    ck_assert(jnull(o, "exit_code"));
    ck_assert_ptr_nonnull(strstr(jstr(cJSON_GetObjectItem(o, "error"), "value"), "status 3"));
    cJSON_Delete(o);
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", id);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "state"), "dead");
    ck_assert(jnull(r.json, "pid"));
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "dead_reason"), "exited with status 3"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"echo x\"}", "/contexts/%s/execute", id);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/restart", id);
    ck_assert_msg(r.status == 200, "%s", r.body);
    ck_assert_str_eq(jstr(r.json, "state"), "idle");
    ck_assert_int_eq((int)jnum(r.json, "execution_count"), 0);
    http_resp_free(&r);
    o = run(&g_sbxd, id, "\"echo [$Z] back\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "[] back\n");
    ck_assert_int_eq((int)jnum(o, "execution_count"), 1);
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(contexts_are_contained_and_apart)
{
    char a[64], b[64];
    cJSON *m = execute(&g_sbxd, "{\"command\":\"mkdir -p ctxdir\"}");
    cJSON_Delete(m);
    ctx_new(&g_sbxd, "{\"cwd\":\"ctxdir\",\"env\":{\"WHO\":\"a\"}}", a, sizeof(a));
    ctx_new(&g_sbxd, "{\"language\":\"sh\"}", b, sizeof(b));
    cJSON *o = run(&g_sbxd, a, "\"basename $PWD; echo $WHO; SECRET=1\"", 0);
    ck_assert_str_eq(jstr(o, "stdout"), "ctxdir\na\n");
    cJSON_Delete(o);
    o = run(&g_sbxd, b, "\"echo [$WHO$SECRET]; shopt -o posix\"", 0);
    ck_assert_msg(strncmp(jstr(o, "stdout"), "[]\nposix", 8) == 0 &&
                      strstr(jstr(o, "stdout"), "on\n"),
                  "%s", jstr(o, "stdout"));
    cJSON_Delete(o);
    /* As every command: the command user, no capabilities. */
    cJSON *e = execute(&g_sbxd, "{\"command\":\"id -u\"}");
    char uid[32];
    snprintf(uid, sizeof(uid), "%s", jstr(e, "stdout"));
    cJSON_Delete(e);
    o = run(&g_sbxd, a,
            "\"id -u; grep -E '^(CapEff|CapPrm)' /proc/self/status | tr -s '\\\\t' ' '\"", 0);
    char want[256];
    snprintf(want, sizeof(want), "%sCapPrm: 0000000000000000\nCapEff: 0000000000000000\n", uid);
    ck_assert_str_eq(jstr(o, "stdout"), want);
    cJSON_Delete(o);
    /* Not one of /processes. */
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/processes");
    ck_assert_ptr_null(strstr(r.body, "--noediting"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts");
    ck_assert_msg(strstr(r.body, a) && strstr(r.body, b), "%s", r.body);
    http_resp_free(&r);
    /* What a context leaves running goes with it. */
    o = run(&g_sbxd, a, "\"setsid sleep 34.25 & sleep 35.25 &\"", 0);
    cJSON_Delete(o);
    ck_assert_int_ge(daemon_procs_with(&g_sbxd, "sleep 34.25"), 1);
    ctx_delete_ok(&g_sbxd, a);
    ctx_delete_ok(&g_sbxd, b);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 34.25", 3000), 0);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 35.25", 3000), 0);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "--noediting", 3000), 0);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", a);
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
}
END_TEST

/* Streamed: the start, each piece of output as it comes, the end with the result. */
START_TEST(streamed_execution_is_live)
{
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    char path[128];
    snprintf(path, sizeof(path), "/contexts/%s/execute", id);
    double t0 = now_ms();
    int s = raw_post(&g_sbxd, path, "application/x-ndjson",
                     "{\"code\":\"echo first; sleep 1; echo second; echo e >&2; true\"}");
    char got[16384];
    size_t have = 0;
    double first_at = 0;
    ssize_t k;
    while ((k = recv(s, got + have, sizeof(got) - 1 - have, 0)) > 0) {
        have += (size_t)k;
        got[have] = '\0';
        if (!first_at && strstr(got, "first"))
            first_at = now_ms() - t0;
    }
    close(s);
    double total = now_ms() - t0;
    ck_assert_msg(first_at > 0 && first_at < total - 600, "first at %.0f ms of %.0f: %s", first_at,
                  total, got);
    ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"start\""));
    ck_assert_ptr_nonnull(strstr(got, "second"));
    ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"stderr\""));
    ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"end\""));
    ck_assert_ptr_nonnull(strstr(got, "\"status\":\"ok\""));
    ck_assert_msg(!memchr(got, 0x1e, have) && !strstr(got, "\\u001e"), "%s", got);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* POST /run_code: the default context of a language, made on first use and kept (and
 * started again when its code ended it); or a context named. */
START_TEST(run_code_uses_a_default_context_per_language)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"X=1\"}", "/run_code");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    ck_assert_ptr_nonnull(strstr(r.body, "language"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"X=1\",\"context\":\"nope\"}", "/run_code");
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"export D=bash1\",\"language\":\"bash\"}",
              "/run_code");
    ck_assert_msg(r.status == 200, "%s", r.body);
    char id[64];
    snprintf(id, sizeof(id), "%s", jstr(r.json, "context"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"echo [$D]\",\"language\":\"sh\"}", "/run_code");
    ck_assert_str_eq(jstr(r.json, "stdout"), "[]\n"); /* another language, another context */
    ck_assert_str_ne(jstr(r.json, "context"), id);
    char sh[64];
    snprintf(sh, sizeof(sh), "%s", jstr(r.json, "context"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"echo $D; exit 7\",\"language\":\"bash\"}",
              "/run_code");
    ck_assert_str_eq(jstr(r.json, "context"), id);
    ck_assert_str_eq(jstr(r.json, "status"), "died");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"echo [$D] again\",\"language\":\"bash\"}",
              "/run_code");
    ck_assert_str_eq(jstr(r.json, "context"), id);
    ck_assert_str_eq(jstr(r.json, "stdout"), "[] again\n");
    http_resp_free(&r);
    char body[128];
    snprintf(body, sizeof(body), "{\"code\":\"echo named\",\"context\":\"%s\"}", sh);
    http_reqf(&g_sbxd, &r, "POST", body, "/run_code");
    ck_assert_str_eq(jstr(r.json, "context"), sh);
    ck_assert_str_eq(jstr(r.json, "stdout"), "named\n");
    http_resp_free(&r);
    ctx_delete_ok(&g_sbxd, id);
    ctx_delete_ok(&g_sbxd, sh);
}
END_TEST

START_TEST(bad_requests)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "POST", "{\"language\":\"python\"}", "/contexts");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    ck_assert_ptr_nonnull(strstr(r.body, "language"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"bogus\":1}", "/contexts");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"cwd\":\"../out\"}", "/contexts");
    ck_assert_int_ge(r.status, 400);
    ck_assert_int_lt(r.status, 500);
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/nope");
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    http_reqf(&g_sbxd, &r, "POST", "{}", "/contexts/%s/execute", id);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"a\\u0000b\"}", "/contexts/%s/execute", id);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"true\",\"timeout_ms\":0}", "/contexts/%s/execute",
              id);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/nothing", id);
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s/execute", id);
    ck_assert_int_eq(r.status, 405);
    http_resp_free(&r);
    ctx_delete_ok(&g_sbxd, id);
    http_reqf(&g_sbxd, &r, "DELETE", NULL, "/contexts/%s", id);
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
}
END_TEST

START_TEST(max_contexts_and_idle_expiry)
{
    struct daemon d;
    const char *args[] = {"--max-contexts", "2", "--context-idle-s", "1", NULL};
    daemon_start(&d, args, NULL);
    char a[64], b[64];
    ctx_new(&d, "{}", a, sizeof(a));
    ctx_new(&d, "{}", b, sizeof(b));
    struct http_resp r;
    http_reqf(&d, &r, "POST", "{}", "/contexts");
    assert_error(&r, 429, "RESOURCE_EXHAUSTED");
    ck_assert_ptr_nonnull(strstr(r.body, "--max-contexts"));
    http_resp_free(&r);
    /* Used within the second: kept; then idle: shut down, and its shell with it. */
    usleep(600 * 1000);
    cJSON *o = run(&d, a, "\"true\"", 0);
    cJSON_Delete(o);
    usleep(1900 * 1000);
    http_reqf(&d, &r, "GET", NULL, "/contexts/%s", b);
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "--noediting", 3000), 0);
    ctx_new(&d, "{}", a, sizeof(a));
    /* A daemon with a context stops at once: the shell ignores SIGTERM, sbxd does not wait. */
    double t0 = now_ms();
    ck_assert(daemon_stop_clean(&d, 10000));
    ck_assert_msg(now_ms() - t0 < 3000 * SLOW, "stop took %.0f ms", now_ms() - t0);
}
END_TEST

Suite *contexts_suite(void)
{
    Suite *s = suite_create("contexts");
    TCase *tc = tcase_create("shell");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, state_persists_between_executions);
    tcase_add_test(tc, timeout_interrupts_and_state_survives);
    tcase_add_test(tc, a_shell_that_ignores_the_interrupt_is_restarted);
    tcase_add_test(tc, interrupt_stops_the_running_code);
    tcase_add_test(tc, exit_ends_the_context_and_restart_brings_it_back);
    tcase_add_test(tc, contexts_are_contained_and_apart);
    tcase_add_test(tc, streamed_execution_is_live);
    tcase_add_test(tc, run_code_uses_a_default_context_per_language);
    tcase_add_test(tc, bad_requests);
    tcase_add_test(tc, max_contexts_and_idle_expiry);
    suite_add_tcase(s, tc);
    return s;
}
