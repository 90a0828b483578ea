/* /contexts: persistent shell sessions, their executions, interrupts, limits and ends. */
#include <check.h>
#include <pthread.h>
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
    /* (The execution ends before the background children may have run exec.) */
    for (double end = now_ms() + 3000 * SLOW;
         daemon_procs_with(&g_sbxd, "sleep 34.25") < 1 && now_ms() < end;)
        usleep(5000);
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

/* A streamed execution read to its end from s (closed here) into got: asserts that "first"
 * came well before the end (600 ms: the code sleeps a second between). Returns the bytes. */
static size_t read_live(int s, double t0, char *got, size_t cap)
{
    size_t have = 0;
    double first_at = 0;
    ssize_t k;
    while ((k = recv(s, got + have, cap - 1 - have, 0)) > 0) {
        have += (size_t)k;
        got[have] = '\0';
        if (!first_at && strstr(got, "first"))
            first_at = now_ms() - t0;
    }
    close(s);
    double total = now_ms() - t0;
    ck_assert_msg(first_at > 0 && first_at < total - 600, "first at %.0f ms of %.0f: %s", first_at,
                  total, got);
    return have;
}

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
    size_t have = read_live(s, t0, got, sizeof(got));
    ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"start\""));
    ck_assert_ptr_nonnull(strstr(got, "second"));
    ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"stderr\""));
    ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"end\""));
    ck_assert_ptr_nonnull(strstr(got, "\"status\":\"ok\""));
    ck_assert_msg(!memchr(got, 0x1e, have) && !strstr(got, "\\u001e"), "%s", got);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* GET /contexts/{id}'s memory_bytes: the shell's resident memory and that of every process
 * beneath it, a background one two levels down included. */
START_TEST(memory_counts_the_whole_tree)
{
    char id[64];
    ctx_new(&g_sbxd, "{\"language\":\"bash\"}", id, sizeof(id));
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", id);
    double alone = jnum(r.json, "memory_bytes");
    ck_assert_msg(alone > 1e6 && alone < 64e6, "%s", r.body);
    http_resp_free(&r);
    /* 96 MiB written (resident), in a child of a bash the shell runs in the background. */
    cJSON *o =
        run(&g_sbxd, id,
            "\"bash -c \\\"python3 -c 'import time; b = bytearray(96 << 20); b[::4096] = "
            "bytes(len(b) // 4096); print(1, flush=True); time.sleep(60)'; :\\\" > mem.out & "
            "until [ -s mem.out ]; do sleep 0.05; done; cat mem.out\"",
            0);
    ck_assert_msg(strcmp(jstr(o, "stdout"), "1\n") == 0, "%s", jstr(o, "stderr"));
    cJSON_Delete(o);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", id);
    double with = jnum(r.json, "memory_bytes");
    ck_assert_msg(with - alone > 90.0 * 1048576, "%.0f then %.0f: %s", alone, with, r.body);
    http_resp_free(&r);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* POST /run_code: the default context of a language, made on first use and kept (and
 * started again when its code ended it); or a context named. */
START_TEST(run_code_uses_a_default_context_per_language)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"X=1\",\"language\":7}", "/run_code");
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
    http_reqf(&g_sbxd, &r, "POST", "{\"language\":\"cobol\"}", "/contexts");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    ck_assert_msg(strstr(r.body, "'cobol'") && strstr(r.body, "python3 (python)"), "%s", r.body);
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"kernel\":\"nope\"}", "/contexts");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    ck_assert_msg(strstr(r.body, "no Jupyter kernel 'nope'"), "%s", r.body);
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"language\":7}", "/contexts");
    assert_error(&r, 400, "INVALID_ARGUMENT");
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

/* A POST on a thread of its own (a request that waits its turn). */
struct post {
    const struct daemon *d;
    char path[96];
    const char *body;
    struct http_resp r;
    double done_ms;
    pthread_t th;
};

static void *post_main(void *arg)
{
    struct post *p = arg;
    http_request(p->d, "POST", p->path, NULL, p->body, strlen(p->body), 30000, &p->r);
    p->done_ms = now_ms();
    return NULL;
}

/* Poll /healthz's "running" (or, queued: /metrics' sbxd_queue_depth) until it is want. */
static bool slots_reach(const struct daemon *d, bool queued, double want)
{
    for (int i = 0; i < 400; i++) {
        struct http_resp r;
        http_reqf(d, &r, "GET", NULL, queued ? "/metrics" : "/healthz");
        const char *q = queued && r.body ? strstr(r.body, "\nsbxd_queue_depth ") : NULL;
        double v = queued ? (q ? strtod(q + 18, NULL) : -1) : jnum(r.json, "running");
        http_resp_free(&r);
        if (v == want)
            return true;
        usleep(5000);
    }
    return false;
}

/* A context's execution takes a running slot as a command does (--max-running): it waits its
 * turn behind a command, is refused as /execute is when the queue is full, and gives the slot
 * back at its end. The shell itself, long-lived, holds none. */
START_TEST(executions_obey_max_running)
{
    struct daemon d;
    const char *args[] = {"--max-running", "1", "--max-queued", "1", NULL};
    daemon_start(&d, args, NULL);
    char a[64], b[64];
    ctx_new(&d, "{}", a, sizeof(a));
    ctx_new(&d, "{}", b, sizeof(b));
    ck_assert(slots_reach(&d, false, 0)); /* two shells alive, no slot taken */
    struct post cmd = {.d = &d, .path = "/execute", .body = "{\"command\":\"sleep 0.8\"}"};
    ck_assert_int_eq(pthread_create(&cmd.th, NULL, post_main, &cmd), 0);
    ck_assert(slots_reach(&d, false, 1));
    struct post ex = {.d = &d, .body = "{\"code\":\"echo a\"}"};
    snprintf(ex.path, sizeof(ex.path), "/contexts/%s/execute", a);
    ck_assert_int_eq(pthread_create(&ex.th, NULL, post_main, &ex), 0);
    ck_assert_msg(slots_reach(&d, true, 1), "the context's execution did not wait its turn");
    /* The queue is full: refused at once, naming the option. */
    struct http_resp r;
    http_reqf(&d, &r, "POST", "{\"code\":\"echo b\"}", "/contexts/%s/execute", b);
    assert_error(&r, 429, "RESOURCE_EXHAUSTED");
    ck_assert_msg(strstr(jstr(r.json, "message"), "--max-queued"), "%s", r.body);
    http_resp_free(&r);
    pthread_join(cmd.th, NULL);
    pthread_join(ex.th, NULL);
    ck_assert_int_eq(cmd.r.status, 200);
    ck_assert_msg(ex.r.status == 200, "%ld: %s", ex.r.status, ex.r.body);
    ck_assert_str_eq(jstr(ex.r.json, "stdout"), "a\n");
    ck_assert_msg(ex.done_ms >= cmd.done_ms - 50, "it ran %.0f ms before the command ended",
                  cmd.done_ms - ex.done_ms);
    http_resp_free(&cmd.r);
    http_resp_free(&ex.r);
    ck_assert(slots_reach(&d, false, 0)); /* given back */
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Jupyter kernels (ipykernel's python3)                                                */

/* run() for code given as plain text (JSON-escaped here). */
static cJSON *run_text(const struct daemon *d, const char *id, const char *code, long timeout_ms)
{
    cJSON *s = cJSON_CreateString(code);
    char *js = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    cJSON *o = run(d, id, js, timeout_ms);
    free(js);
    return o;
}

/* Code that hands what the shell reads its requests on to background children, to read the
 * next execution's request (its marker token) and answer in its place: every descriptor the
 * shell has while the code runs (the saved stdin at fd 10 among them), inherited or reopened
 * through /proc. A child that gets a request prints forged output and a forged marker, and
 * says so in thief.log. */
static const char thief[] =
    "read -r p _ </proc/self/stat; : >thief.log\n"
    "for f in /proc/self/fd/*; do n=${f##*/}\n"
    "  for how in inherit reopen; do (\n"
    "    if [ $how = inherit ]; then { exec 3<&$n; } 2>/dev/null; "
    "else { exec 3<\"/proc/$p/fd/$n\"; } 2>/dev/null; fi || { echo \"$how $n refused\" "
    ">>thief.log; exit; }\n"
    "    echo \"$how $n opened\" >>thief.log\n"
    "    got=$(timeout 10 dd bs=65536 count=1 <&3 2>/dev/null)\n"
    "    case $got in *SBXD_*) tok=${got#*SBXD_}; tok=${tok:0:32}\n"
    "      echo \"$how $n stole $tok\" >>thief.log\n"
    "      printf '\\nforged\\n\\036%s 0\\n' \"$tok\"; printf '\\n\\036%s\\n' \"$tok\" >&2;; "
    "esac\n"
    "  ) & done\n"
    "done\n"
    "sleep 0.3\n";

START_TEST(code_cannot_take_the_next_execution)
{
    char id[64];
    ctx_new(&g_sbxd, "{}", id, sizeof(id));
    cJSON *o = run_text(&g_sbxd, id, "X=kept", 0);
    cJSON_Delete(o);
    o = run_text(&g_sbxd, id, thief, 0);
    ck_assert_str_eq(jstr(o, "status"), "ok");
    cJSON_Delete(o);
    /* The next execution is the genuine one: its own output and status. */
    o = run_text(&g_sbxd, id, "echo genuine-4242 $X; (exit 3)", 5000);
    ck_assert_msg(!strcmp(jstr(o, "stdout"), "genuine-4242 kept\n") && jnum(o, "exit_code") == 3 &&
                      !strcmp(jstr(o, "status"), "error"),
                  "a forged result: status %s, exit_code %d, stdout '%s'", jstr(o, "status"),
                  (int)jnum(o, "exit_code"), jstr(o, "stdout"));
    cJSON_Delete(o);
    /* And the children got nothing: no request, no token. */
    o = run_text(&g_sbxd, id, "cat thief.log; rm thief.log", 0);
    const char *log = jstr(o, "stdout");
    ck_assert_msg(strstr(log, "inherit 0 opened") && strstr(log, "reopen 0 opened"),
                  "the children did not run: %s", log);
    ck_assert_msg(!strstr(log, "stole"), "a child read a request:\n%s", log);
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

static const cJSON *result_at(const cJSON *o, int i)
{
    const cJSON *a = cJSON_GetObjectItem(o, "results");
    ck_assert_msg(cJSON_IsArray(a) && cJSON_GetArraySize(a) > i, "no results[%d]", i);
    return cJSON_GetArrayItem(a, i);
}

static void py_new(const struct daemon *d, const char *body, char *id, size_t idlen)
{
    ctx_new(d, body, id, idlen);
    struct http_resp r;
    http_reqf(d, &r, "GET", NULL, "/contexts/%s", id);
    ck_assert_str_eq(jstr(r.json, "kernel"), "python3");
    ck_assert_str_eq(jstr(r.json, "language"), "python");
    http_resp_free(&r);
}

/* Decoded size of base64 text into out (at most cap bytes); -1 when it is not base64. */
static long b64_decode(const char *in, unsigned char *out, size_t cap)
{
    static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned acc = 0;
    int bits = 0;
    size_t n = 0;
    for (const char *p = in; *p && *p != '='; p++) {
        if (*p == '\n')
            continue;
        const char *k = strchr(set, *p);
        if (!k)
            return -1;
        acc = acc << 6 | (unsigned)(k - set);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n < cap)
                out[n] = (unsigned char)(acc >> bits);
            n++;
        }
    }
    return (long)n;
}

START_TEST(kernel_keeps_state_and_returns_rich_results)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/kernels");
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "{\"name\":\"python3\",\"language\":\"python\""), "%s", r.body);
    http_resp_free(&r);
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    cJSON *o = run_text(
        &g_sbxd, id, "x = 41\nprint('out')\nimport sys; print('err', file=sys.stderr)\nx + 1", 0);
    ck_assert_str_eq(jstr(o, "status"), "ok");
    ck_assert_str_eq(jstr(o, "stdout"), "out\n");
    ck_assert_str_eq(jstr(o, "stderr"), "err\n");
    ck_assert(jnull(o, "exit_code"));
    ck_assert(jnull(o, "error"));
    ck_assert_int_eq((int)jnum(o, "execution_count"), 1);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/plain"), "42");
    ck_assert(jbool(result_at(o, 0), "is_main_result"));
    cJSON_Delete(o);
    o = run_text(&g_sbxd, id,
                 "from IPython.display import display, HTML, Markdown\n"
                 "display(HTML('<b>x</b>'))\ndisplay(Markdown('*m*'))\nx",
                 0);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")), 3);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/html"), "<b>x</b>");
    ck_assert(!jbool(result_at(o, 0), "is_main_result"));
    ck_assert_str_eq(jstr(result_at(o, 1), "text/markdown"), "*m*");
    ck_assert_str_eq(jstr(result_at(o, 2), "text/plain"), "41");
    ck_assert_int_eq((int)jnum(o, "execution_count"), 2);
    cJSON_Delete(o);
    o = run_text(&g_sbxd, id, "def f():\n    raise ValueError('bad')\nf()", 0);
    ck_assert_str_eq(jstr(o, "status"), "error");
    const cJSON *e = cJSON_GetObjectItem(o, "error");
    ck_assert_str_eq(jstr(e, "name"), "ValueError");
    ck_assert_str_eq(jstr(e, "value"), "bad");
    const cJSON *tb = cJSON_GetObjectItem(e, "traceback");
    ck_assert_int_ge(cJSON_GetArraySize(tb), 2);
    char *tbs = cJSON_PrintUnformatted(tb);
    ck_assert_msg(strstr(tbs, "raise ValueError") && !strstr(tbs, "\\u001b"), "%s", tbs);
    free(tbs);
    cJSON_Delete(o);
    /* A chart: a PNG, whole. */
    o = run_text(&g_sbxd, id,
                 "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()",
                 0);
    ck_assert_msg(strcmp(jstr(o, "status"), "ok") == 0, "%s", jstr(o, "stderr"));
    const char *png = jstr(result_at(o, 0), "image/png");
    ck_assert_msg(!strpbrk(png, "\n\r "), "not plain base64"); /* (ipykernel ends it with \n) */
    unsigned char *bin = malloc(strlen(png));
    long n = b64_decode(png, bin, strlen(png));
    ck_assert_msg(n > 1000 && memcmp(bin, "\x89PNG\r\n\x1a\n", 8) == 0 &&
                      memcmp(bin + n - 8, "IEND", 4) == 0,
                  "not a PNG (%ld bytes)", n);
    free(bin);
    cJSON_Delete(o);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", id);
    ck_assert_str_eq(jstr(r.json, "state"), "idle");
    ck_assert_int_eq((int)jnum(r.json, "execution_count"), 4);
    /* The kernel's, with matplotlib loaded (not a PID namespace init's few MiB). */
    ck_assert_msg(jnum(r.json, "memory_bytes") > 40e6, "%s", r.body);
    http_resp_free(&r);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(kernel_timeout_and_interrupt_keep_its_state)
{
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    cJSON *o = run_text(&g_sbxd, id, "y = 5", 0);
    cJSON_Delete(o);
    double t0 = now_ms();
    o = run_text(&g_sbxd, id, "import time\ntime.sleep(30)\nprint('after')", 500);
    ck_assert_str_eq(jstr(o, "status"), "timeout");
    ck_assert(jbool(o, "interrupted"));
    ck_assert(!jbool(o, "restarted"));
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(o, "error"), "name"), "Timeout");
    ck_assert_ptr_null(strstr(jstr(o, "stdout"), "after"));
    ck_assert_msg(now_ms() - t0 < 3000 * SLOW, "took %.0f ms", now_ms() - t0);
    cJSON_Delete(o);
    /* An interrupt from another connection. */
    char path[128];
    snprintf(path, sizeof(path), "/contexts/%s/execute", id);
    int s = raw_post(&g_sbxd, path, NULL, "{\"code\":\"import time\\ntime.sleep(30)\"}");
    struct http_resp r;
    bool done = false;
    for (int i = 0; i < 200 && !done; i++) {
        usleep(20000);
        http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/interrupt", id);
        done = jbool(r.json, "interrupted");
        http_resp_free(&r);
    }
    ck_assert(done);
    char *out = read_until_close(s, NULL);
    close(s);
    ck_assert_msg(strstr(out, "\"status\":\"error\"") && strstr(out, "KeyboardInterrupt") &&
                      strstr(out, "\"interrupted\":true"),
                  "%s", out);
    free(out);
    o = run_text(&g_sbxd, id, "y", 0);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/plain"), "5");
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* The execution after one that raised is run, however soon it comes: ipykernel aborts the
 * requests that reach it before it has finished handling an error (stop_on_error), and one
 * sent right after the error's reply came now and then found it still aborting (1 in about 40
 * here, more under load: "Aborted: the kernel did not run the code"). sbxd runs one execution
 * at a time per context, so there is never a queue to abort. */
START_TEST(kernel_runs_the_execution_right_after_an_error)
{
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    cJSON *o = run_text(&g_sbxd, id, "x = 21", 0);
    cJSON_Delete(o);
    int aborted = 0;
    for (int i = 0; i < 150; i++) {
        o = run_text(&g_sbxd, id, "1 / 0", 0);
        ck_assert_str_eq(jstr(cJSON_GetObjectItem(o, "error"), "name"), "ZeroDivisionError");
        cJSON_Delete(o);
        o = run_text(&g_sbxd, id, "x + 1", 0);
        const cJSON *res = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "results"), 0);
        const cJSON *text = cJSON_GetObjectItem(res, "text/plain");
        if (!cJSON_IsString(text) || strcmp(text->valuestring, "22") != 0)
            aborted++;
        cJSON_Delete(o);
    }
    ck_assert_msg(aborted == 0, "%d of 150 executions right after an error were not run", aborted);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* Code that ignores SIGINT: the kernel does not come back from the timeout's interrupt, and is
 * restarted (its state lost), the answer says so. */
START_TEST(kernel_that_ignores_the_interrupt_is_restarted)
{
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    cJSON *o = run_text(&g_sbxd, id,
                        "gone = 1\nimport signal, time\n"
                        "signal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
                        300);
    ck_assert_str_eq(jstr(o, "status"), "timeout");
    ck_assert(jbool(o, "restarted"));
    ck_assert_msg(
        strstr(jstr(cJSON_GetObjectItem(o, "error"), "value"), "kernel did not come back"), "%s",
        jstr(cJSON_GetObjectItem(o, "error"), "value"));
    cJSON_Delete(o);
    o = run_text(&g_sbxd, id, "'gone' in globals()", 0);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/plain"), "False");
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(kernel_death_is_reported_and_restart_works)
{
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    cJSON *o = run_text(&g_sbxd, id, "w = 1\nimport os\nos._exit(3)", 0);
    ck_assert_str_eq(jstr(o, "status"), "died");
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(o, "error"), "name"), "ContextDied");
    ck_assert_msg(strstr(jstr(cJSON_GetObjectItem(o, "error"), "value"), "kernel exited with "
                                                                         "status 3"),
                  "%s", jstr(cJSON_GetObjectItem(o, "error"), "value"));
    cJSON_Delete(o);
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts/%s", id);
    ck_assert_str_eq(jstr(r.json, "state"), "dead");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"1\"}", "/contexts/%s/execute", id);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", NULL, "/contexts/%s/restart", id);
    ck_assert_msg(r.status == 200, "%s", r.body);
    ck_assert_str_eq(jstr(r.json, "state"), "idle");
    http_resp_free(&r);
    o = run_text(&g_sbxd, id, "'w' in globals(), 6 * 7", 0);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/plain"), "(False, 42)");
    ck_assert_int_eq((int)jnum(o, "execution_count"), 1);
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

START_TEST(kernels_are_contained_apart_and_deleted)
{
    cJSON *m = execute(&g_sbxd, "{\"command\":\"mkdir -p kdir; id -u; id -g\"}");
    char ids[64];
    snprintf(ids, sizeof(ids), "%s", jstr(m, "stdout"));
    cJSON_Delete(m);
    char a[64], b[64];
    py_new(&g_sbxd, "{\"language\":\"python\",\"cwd\":\"kdir\",\"env\":{\"WHO\":\"k\"}}", a,
           sizeof(a));
    py_new(&g_sbxd, "{\"kernel\":\"python3\"}", b, sizeof(b));
    cJSON *o = run_text(&g_sbxd, a,
                        "import os\nsecret = 1\nprint(os.getuid())\nprint(os.getgid())\n"
                        "print(os.path.basename(os.getcwd()), os.environ['WHO'])\n"
                        "print([l.split()[1] for l in open('/proc/self/status') "
                        "if l.startswith('CapEff')][0])",
                        0);
    char want[160];
    snprintf(want, sizeof(want), "%skdir k\n0000000000000000\n", ids);
    ck_assert_str_eq(jstr(o, "stdout"), want);
    cJSON_Delete(o);
    o = run_text(&g_sbxd, b, "secret", 0);
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(o, "error"), "name"), "NameError");
    cJSON_Delete(o);
    /* What a kernel starts goes with it. */
    o = run_text(&g_sbxd, a, "import subprocess\nsubprocess.Popen(['sleep', '36.25'])", 0);
    cJSON_Delete(o);
    for (double end = now_ms() + 3000 * SLOW;
         daemon_procs_with(&g_sbxd, "sleep 36.25") < 1 && now_ms() < end;)
        usleep(5000);
    ck_assert_int_ge(daemon_procs_with(&g_sbxd, "sleep 36.25"), 1);
    ctx_delete_ok(&g_sbxd, a);
    ctx_delete_ok(&g_sbxd, b);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 36.25", 3000), 0);
    ck_assert_int_eq(daemon_wait_tree_empty(&g_sbxd, "ipykernel_launcher", 3000), 0);
}
END_TEST

START_TEST(kernel_streaming_is_live)
{
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    char path[128];
    snprintf(path, sizeof(path), "/contexts/%s/execute", id);
    double t0 = now_ms();
    int s = raw_post(&g_sbxd, path, "application/x-ndjson",
                     "{\"code\":\"print('first', flush=True)\\nimport time\\ntime.sleep(1)\\n"
                     "print('second')\\nfrom IPython.display import display, HTML\\n"
                     "display(HTML('<i>d</i>'))\\n1 + 1\"}");
    char got[16384];
    read_live(s, t0, got, sizeof(got));
    const char *st = strstr(got, "{\"type\":\"start\"");
    const char *disp = strstr(got, "{\"type\":\"display\",\"data\":{\"text/plain\":");
    const char *res = strstr(got, "{\"type\":\"result\",\"data\":{\"text/plain\":\"2\"");
    const char *end = strstr(got, "{\"type\":\"end\"");
    ck_assert_msg(st && disp && res && end && st < disp && disp < res && res < end, "%s", got);
    ck_assert_ptr_nonnull(strstr(disp, "<i>d</i>"));
    ck_assert_ptr_nonnull(strstr(end, "\"status\":\"ok\""));
    /* An error comes as its own event. */
    s = raw_post(&g_sbxd, path, "application/x-ndjson", "{\"code\":\"import nosuchmodule\"}");
    char *out = read_until_close(s, NULL);
    close(s);
    ck_assert_msg(strstr(out, "{\"type\":\"error\",\"data\":{\"name\":\"ModuleNotFoundError\"") &&
                      strstr(out, "\"status\":\"error\""),
                  "%s", out);
    free(out);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* POST /run_code with a kernel's language: its default context, made on first use; python's
 * when no language is named. */
START_TEST(run_code_in_python)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "POST", "{\"code\":\"z = 20\"}", "/run_code");
    ck_assert_msg(r.status == 200, "%s", r.body);
    char id[64];
    snprintf(id, sizeof(id), "%s", jstr(r.json, "context"));
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "POST", "{\"language\":\"python\",\"code\":\"z + 1\"}", "/run_code");
    ck_assert_msg(r.status == 200, "%s", r.body);
    ck_assert_str_eq(jstr(r.json, "context"), id);
    ck_assert_str_eq(jstr(result_at(r.json, 0), "text/plain"), "21");
    http_resp_free(&r);
    /* The session's history is in memory (In, Out, _i), none written to a database: each
     * execution would wait for its transaction. */
    http_reqf(&g_sbxd, &r, "POST",
              "{\"code\":\"(get_ipython().history_manager.enabled, In[1], Out[2], _i)\"}",
              "/run_code");
    ck_assert_str_eq(jstr(result_at(r.json, 0), "text/plain"), "(False, 'z = 20', 21, 'z + 1')");
    http_resp_free(&r);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* A process of the sandbox that sends code to every port it can reach cannot have it run:
 * sbxd's key is in no file it can read, and a message without the key's signature is dropped.
 * (A kernel's channels are no TCP ports at all: kernels_are_out_of_every_commands_reach; what
 * listens is sbxd's own ports and ipykernel's pipe for its forked children's output.) */
START_TEST(kernel_refuses_code_from_the_sandbox)
{
    char id[64];
    py_new(&g_sbxd, "{\"language\":\"python\"}", id, sizeof(id));
    cJSON *o = run_text(&g_sbxd, id, "import os\nos.getpid()", 0);
    cJSON_Delete(o);
    /* Every loopback port that listens, sent an execute_request under a made-up key; and
     * every process's stdin (the kernel's connection file) and environment read. It cannot
     * hang: stdin is opened without blocking (a pipe's would wait for a writer), the zmq
     * context is ended without lingering, and a Python traceback is printed if it still
     * runs after 20 s (sbxd ends it at 40 s, with what it printed). */
    const char *attack =
        "import faulthandler, glob, hmac, json, hashlib, os, time, zmq\n"
        "faulthandler.dump_traceback_later(20)\n"
        "ports = set()\n"
        "for f in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
        "    try:\n"
        "        for l in open(f).readlines()[1:]:\n"
        "            p = l.split()\n"
        "            if p[3] == '0A':\n"
        "                ports.add(int(p[1].split(':')[1], 16))\n"
        "    except OSError:\n"
        "        pass\n"
        "ctx = zmq.Context()\n"
        "code = \"open('pwned', 'w').write('x')\"\n"
        "for port in ports:\n"
        "    s = ctx.socket(zmq.DEALER)\n"
        "    s.setsockopt(zmq.LINGER, 0)\n"
        "    s.connect('tcp://127.0.0.1:%d' % port)\n"
        "    h = json.dumps({'msg_id': 'm%d' % port, 'session': 's', 'username': 'u',\n"
        "                    'date': '2026-01-01T00:00:00Z', 'msg_type': 'execute_request',\n"
        "                    'version': '5.3'}).encode()\n"
        "    c = json.dumps({'code': code, 'silent': False}).encode()\n"
        "    sig = hmac.new(b'guess', h + b'{}{}' + c, hashlib.sha256).hexdigest().encode()\n"
        "    for signature in (sig, b''):\n"
        "        s.send_multipart([b'<IDS|MSG>', signature, h, b'{}', b'{}', c])\n"
        "time.sleep(1)\n"
        "ctx.destroy(linger=0)\n"
        "leaks = 0\n"
        "for f in glob.glob('/proc/[0-9]*/fd/0') + glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        "        fd = os.open(f, os.O_RDONLY | os.O_NONBLOCK)\n"
        "        try:\n"
        "            leaks += b'hmac-sha256' in os.read(fd, 65536)\n"
        "        finally:\n"
        "            os.close(fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(len(ports), leaks, flush=True)\n"
        "faulthandler.cancel_dump_traceback_later()\n";
    cJSON *req = cJSON_CreateObject();
    cJSON *argv = cJSON_AddArrayToObject(req, "argv");
    cJSON_AddItemToArray(argv, cJSON_CreateString("python3"));
    cJSON_AddItemToArray(argv, cJSON_CreateString("-c"));
    cJSON_AddItemToArray(argv, cJSON_CreateString(attack));
    cJSON_AddNumberToObject(req, "timeout_ms", 40000);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    cJSON *e = execute(&g_sbxd, body);
    free(body);
    int ports = 0, leaks = -1;
    ck_assert_msg(sscanf(jstr(e, "stdout"), "%d %d", &ports, &leaks) == 2, "%s %s",
                  jstr(e, "stdout"), jstr(e, "stderr"));
    ck_assert_msg(ports >= 1, "no port found: %s", jstr(e, "stderr"));
    ck_assert_int_eq(leaks, 0);
    cJSON_Delete(e);
    e = execute(&g_sbxd, "{\"command\":\"test -e pwned && echo PWNED; true\"}");
    ck_assert_str_eq(jstr(e, "stdout"), "");
    cJSON_Delete(e);
    o = run_text(&g_sbxd, id, "'still', 'here'", 0);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/plain"), "('still', 'here')");
    cJSON_Delete(o);
    ctx_delete_ok(&g_sbxd, id);
}
END_TEST

/* --warm-contexts: a kernel started before it is asked for, taken by the request that
 * matches it, and made again; the others start cold. */
START_TEST(warm_kernel_answers_at_once)
{
    struct daemon d;
    const char *args[] = {"--warm-contexts", "1", NULL};
    daemon_start(&d, args, NULL);
    struct http_resp r;
    bool ready = false;
    for (double end = now_ms() + 60000; !ready && now_ms() < end;) {
        http_reqf(&d, &r, "GET", NULL, "/kernels");
        ready = jnum(r.json, "warm_ready") >= 1;
        http_resp_free(&r);
        if (!ready)
            usleep(50000);
    }
    ck_assert(ready);
    http_reqf(&d, &r, "GET", NULL, "/contexts");
    ck_assert_ptr_nonnull(strstr(r.body, "{\"contexts\":[]}")); /* not one until taken */
    http_resp_free(&r);
    /* The warm kernel put nothing in the workspace (IPython's directory is elsewhere): a
     * `git clone URL .` there finds it empty. */
    http_reqf(&d, &r, "GET", NULL, "/files/");
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "entries")) == 0, "%s", r.body);
    http_resp_free(&r);
    double t0 = now_ms();
    char a[64], b[64];
    py_new(&d, "{\"language\":\"python\"}", a, sizeof(a));
    double warm_ms = now_ms() - t0;
    /* Under gVisor's ptrace platform the request's own connection thread can take a few
     * hundred ms to come (the slowloris test sees the same): the bound there is still far
     * below a cold start, which takes seconds. */
    double warm_bound = under_gvisor() ? 1500 : 200 * SLOW;
    ck_assert_msg(warm_ms < warm_bound, "a warm POST /contexts took %.0f ms", warm_ms);
    cJSON *o = run_text(&d, a, "import os\nos.getcwd()", 0);
    ck_assert_ptr_nonnull(strstr(jstr(result_at(o, 0), "text/plain"), d.ws));
    cJSON_Delete(o);
    /* Its IPython directory: in its own directory (in sbxd's directory for contexts, in
     * /dev/shm), there while it lives. */
    o = run_text(&d, a, "import os\nd = os.environ['IPYTHONDIR']\nprint(d, os.path.isdir(d))", 0);
    char ipy[128];
    ck_assert_int_eq(sscanf(jstr(o, "stdout"), "%127s", ipy), 1);
    ck_assert_msg(
        (strncmp(ipy, "/dev/shm/sbxd-ctx.", 18) == 0 || strncmp(ipy, "/tmp/sbxd-ctx.", 14) == 0) &&
            strcmp(ipy + strlen(ipy) - 8, "/ipython") == 0,
        "%s", jstr(o, "stdout"));
    ck_assert_msg(strstr(jstr(o, "stdout"), " True\n"), "%s", jstr(o, "stdout"));
    cJSON_Delete(o);
    /* With an env of its own: started for it (the warm one is not what it asked for); an
     * IPYTHONDIR of the client's stands. */
    py_new(&d,
           "{\"language\":\"python\",\"env\":{\"MINE\":\"1\",\"IPYTHONDIR\":\"/tmp/"
           "sbxd-ipython-its-own\"}}",
           b, sizeof(b));
    o = run_text(&d, b, "import os\nos.environ.get('MINE'), os.environ['IPYTHONDIR']", 0);
    ck_assert_str_eq(jstr(result_at(o, 0), "text/plain"), "('1', '/tmp/sbxd-ipython-its-own')");
    cJSON_Delete(o);
    ctx_delete_ok(&d, a);
    ctx_delete_ok(&d, b);
    /* a's directory went with it; b's, the client's, stays (the client's to remove). */
    char cmd[320];
    snprintf(cmd, sizeof(cmd),
             "{\"command\":\"test -e %s || echo gone; test -d /tmp/sbxd-ipython-its-own && "
             "echo kept; rm -rf /tmp/sbxd-ipython-its-own\"}",
             ipy);
    o = execute(&d, cmd);
    ck_assert_str_eq(jstr(o, "stdout"), "gone\nkept\n");
    cJSON_Delete(o);
    ready = false;
    for (double end = now_ms() + 60000; !ready && now_ms() < end;) {
        http_reqf(&d, &r, "GET", NULL, "/kernels");
        ready = jnum(r.json, "warm_ready") >= 1;
        http_resp_free(&r);
        if (!ready)
            usleep(50000);
    }
    ck_assert_msg(ready, "no warm kernel made again");
    pid_t kernels[8];
    int nk = daemon_tree_procs(&d, "ipykernel_launcher", kernels, 8);
    ck_assert_int_eq(nk, 1); /* the warm one */
    ck_assert(daemon_stop_clean(&d, 10000));
    if (!under_gvisor()) /* (there, the sandbox is gone: daemon_stop_clean checked) */
        ck_assert_int_eq(wait_pids_gone(kernels, nk, 3000), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* What a command can do to a kernel: nothing. Per backend (pidns, uid, pgid).            */

static const char *const kbackends[] = {"pidns", "uid", "pgid"};

/* A file of d's workspace, read whole ("" when missing: *exists false). */
static void ws_read(const struct daemon *d, const char *name, char *out, size_t n, bool *exists)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", d->ws, name);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    *exists = f != NULL;
    if (!f)
        return;
    size_t k = fread(out, 1, n - 1, f);
    out[k] = '\0';
    fclose(f);
}

static bool ws_wait_for(const struct daemon *d, const char *name, double ms)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", d->ws, name);
    for (double end = now_ms() + ms * SLOW; now_ms() < end; usleep(10000))
        if (access(path, F_OK) == 0)
            return true;
    return false;
}

/*
 * The attacks on a kernel from a command of the same sandbox (kernel_attack.py runs as a
 * background command while a client's kernel starts and runs code):
 *  - it subscribes to every listening socket it finds (loopback TCP ports, /proc/net/unix)
 *    as a ZeroMQ SUB, which needs no key, to read the kernel's iopub: another client's code
 *    and output (an API key);
 *  - it plants an IPython startup file in every IPython directory it can reach under /tmp
 *    as it appears, to run in the kernel;
 *  - before that it planted, in the workspace, an `ipykernel_launcher.py` (which would run
 *    first in a kernel started with the workspace as its cwd, and read the key from its
 *    stdin) and a `.pth` file in the user site of the command user (HOME is the workspace:
 *    Python runs a .pth's import lines at start-up).
 * None of them may work. The kernel still imports the workspace's modules once started, as
 * Jupyter's kernels do with their directory, and none of its channels is a TCP port (a port
 * chosen by sbxd and bound a moment later by the kernel could be taken first by a command).
 * (ipykernel's own pipe for the output of forked children listens on a port of its choosing,
 * and drops what does not carry its 128-bit token: it is left out.)
 */
START_TEST(kernels_are_out_of_every_commands_reach)
{
    const char *backend = kbackends[_i];
    struct daemon d;
    const char *args[] = {"--isolation", backend, "--warm-contexts", "0", NULL};
    daemon_start(&d, args, NULL);
    char src[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof(src), "%s", KERNEL_ATTACK_PY);
    snprintf(dst, sizeof(dst), "%s/kernel_attack.py", d.ws);
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    ck_assert(in && out);
    char buf[4096];
    for (size_t k; (k = fread(buf, 1, sizeof(buf), in)) > 0;)
        fwrite(buf, 1, k, out);
    fclose(in);
    fclose(out);
    cJSON *e = execute(
        &d,
        "{\"command\":\"printf 'import os, shutil\\\\nopen(\\\"planted-launcher\\\", \\\"w\\\")."
        "write(open(\\\"/proc/self/fd/0\\\").read())\\\\nimport runpy, sys\\\\nsys.path = [p "
        "for p in sys.path if p not in (\\\"\\\", os.getcwd())]\\\\nrunpy.run_module("
        "\\\"ipykernel_launcher\\\", run_name=\\\"__main__\\\")\\\\n' > ipykernel_launcher.py; "
        "site=$(python3 -s -c 'import site; print(site.getusersitepackages())'); "
        "mkdir -p \\\"$site\\\" && printf 'import os; open(os.path.join(os.environ[\\\"HOME\\\"], "
        "\\\"planted-pth\\\"), \\\"w\\\").write(\\\"x\\\")\\\\n' > \\\"$site/zz-planted.pth\\\"; "
        "echo 'X = 42' > helper.py; ls\"}");
    ck_assert_msg(strstr(jstr(e, "stdout"), "ipykernel_launcher.py") &&
                      strstr(jstr(e, "stdout"), "helper.py"),
                  "%s %s", jstr(e, "stdout"), jstr(e, "stderr"));
    cJSON_Delete(e);
    struct http_resp r;
    http_reqf(&d, &r, "POST",
              "{\"argv\":[\"python3\",\"-s\",\"kernel_attack.py\"],\"timeout_ms\":40000}",
              "/processes");
    ck_assert_msg(r.status == 201, "%s", r.body);
    char attacker[64];
    snprintf(attacker, sizeof(attacker), "%s", jstr(r.json, "id"));
    http_resp_free(&r);
    ck_assert_msg(ws_wait_for(&d, "attacker-ready", 10000), "the attacker did not start");

    char id[64];
    py_new(&d, "{\"language\":\"python\"}", id, sizeof(id));
    usleep(300000); /* the attacker's scans every 100 ms find what the kernel listens on */
    for (int i = 0; i < 3; i++) {
        cJSON *o = run_text(&d, id, "API_KEY = 'sk-live-' + 'c0ffee'\nprint(API_KEY)", 0);
        ck_assert_str_eq(jstr(o, "stdout"), "sk-live-c0ffee\n");
        cJSON_Delete(o);
        usleep(150000);
    }
    char stop[PATH_MAX];
    snprintf(stop, sizeof(stop), "%s/attacker-stop", d.ws);
    fclose(fopen(stop, "w"));
    ck_assert_msg(ws_wait_for(&d, "attacker-result", 10000), "the attacker did not end");
    char res[256], m1[4096], m2[64], m3[64];
    bool have, launcher, pth, startup;
    ws_read(&d, "attacker-result", res, sizeof(res), &have);
    ws_read(&d, "planted-launcher", m1, sizeof(m1), &launcher);
    ws_read(&d, "planted-pth", m2, sizeof(m2), &pth);
    ws_read(&d, "planted-startup", m3, sizeof(m3), &startup);
    int eps = 0, planted = 0, seen = -1;
    ck_assert_msg(sscanf(res, "endpoints %d planted %d seen %d", &eps, &planted, &seen) == 3, "%s",
                  res);
    ck_assert_msg(seen == 0 && !launcher && !pth && !startup,
                  "%s: the attacker read %d messages with the secret (of %d endpoints), "
                  "planted %d startup files; ran in the kernel: the workspace's "
                  "ipykernel_launcher %s%s, a user-site .pth %s, an IPython startup file %s",
                  backend, seen, eps, planted, launcher ? "yes, it read: " : "no",
                  launcher ? m1 : "", pth ? "yes" : "no", startup ? "yes" : "no");
    /* The kernel works as Jupyter's do: its cwd (the workspace) first on its path. */
    cJSON *o =
        run_text(&d, id,
                 "import helper, os, sys\n"
                 "socks = set()\n"
                 "for f in os.listdir('/proc/self/fd'):\n"
                 "    l = os.readlink('/proc/self/fd/' + f) if os.path.islink('/proc/self/fd/' "
                 "+ f) else ''\n"
                 "    if l.startswith('socket:['): socks.add(l[8:-1])\n"
                 "pipe = getattr(get_ipython().kernel.iopub_thread, '_pipe_port', 0)\n"
                 "listen = 0\n"
                 "for t in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
                 "    for l in open(t).readlines()[1:]:\n"
                 "        p = l.split()\n"
                 "        listen += p[3] == '0A' and p[9] in socks and "
                 "int(p[1].split(':')[1], 16) != pipe\n"
                 "print(helper.X, os.getcwd() == os.environ['HOME'], sys.path[0] == "
                 "os.getcwd(), listen)",
                 0);
    ck_assert_msg(strcmp(jstr(o, "stdout"), "42 True True 0\n") == 0, "%s: %s %s", backend,
                  jstr(o, "stdout"), jstr(o, "stderr"));
    cJSON_Delete(o);

    http_reqf(&d, &r, "DELETE", NULL, "/processes/%s", attacker);
    http_resp_free(&r);
    ctx_delete_ok(&d, id);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* Before each kernel test: no context left by one that failed (its kernel would be counted
 * by the next, and take its default context). */
static void no_contexts_left(void)
{
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/contexts");
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(r.json, "contexts"))
    {
        struct http_resp d;
        http_reqf(&g_sbxd, &d, "DELETE", NULL, "/contexts/%s", jstr(x, "id"));
        http_resp_free(&d);
    }
    http_resp_free(&r);
}

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
    tcase_add_test(tc, memory_counts_the_whole_tree);
    tcase_add_test(tc, run_code_uses_a_default_context_per_language);
    tcase_add_test(tc, bad_requests);
    tcase_add_test(tc, max_contexts_and_idle_expiry);
    tcase_add_test(tc, code_cannot_take_the_next_execution);
    tcase_add_test(tc, executions_obey_max_running);
    suite_add_tcase(s, tc);
    TCase *k = tcase_create("kernel");
    tcase_set_timeout(k, 180);
    tcase_add_checked_fixture(k, no_contexts_left, NULL);
    tcase_add_test(k, kernel_keeps_state_and_returns_rich_results);
    tcase_add_test(k, kernel_timeout_and_interrupt_keep_its_state);
    tcase_add_test(k, kernel_that_ignores_the_interrupt_is_restarted);
    tcase_add_test(k, kernel_death_is_reported_and_restart_works);
    tcase_add_test(k, kernels_are_contained_apart_and_deleted);
    tcase_add_test(k, kernel_streaming_is_live);
    tcase_add_test(k, run_code_in_python);
    tcase_add_test(k, kernel_runs_the_execution_right_after_an_error);
    tcase_add_test(k, kernel_refuses_code_from_the_sandbox);
    tcase_add_test(k, warm_kernel_answers_at_once);
    suite_add_tcase(s, k);
    TCase *ka = tcase_create("kernel-attacks");
    tcase_set_timeout(ka, 90 * SLOW);
    tcase_add_loop_test(ka, kernels_are_out_of_every_commands_reach, 0,
                        sizeof(kbackends) / sizeof(kbackends[0]));
    suite_add_tcase(s, ka);
    return s;
}
