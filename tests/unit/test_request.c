#include <check.h>
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/cmdenv.h"
#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"
#include "sbxd/request.h"
#include "suites.h"

static const struct request_policy pol = {.default_timeout_ms = 60000,
                                          .max_timeout_ms = 600000,
                                          .max_memory_bytes = 1 << 30,
                                          .max_pids = 100,
                                          .max_cpu_quota = 2,
                                          .workspace = "/ws"};

static struct exec_request req;
static struct sbxd_err err;

static int parse(const char *json)
{
    memset(&err, 0, sizeof(err));
    return exec_request_parse(json, strlen(json), &pol, &req, &err);
}

static const char *env_get(const char *name)
{
    size_t n = strlen(name);
    for (char **e = req.envp; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

START_TEST(command_defaults)
{
    ck_assert_int_eq(parse("{\"command\":\"echo hi\"}"), 0);
    ck_assert(req.shell);
    ck_assert_uint_eq(req.argc, 3);
    ck_assert_str_eq(req.argv[0], "/bin/sh");
    ck_assert_str_eq(req.argv[1], "-c");
    ck_assert_str_eq(req.argv[2], "echo hi");
    ck_assert_ptr_null(req.argv[3]);
    ck_assert_str_eq(req.cwd, "");
    ck_assert_uint_eq(req.timeout_ms, 60000);
    ck_assert(!req.has_stdin);
    ck_assert_int_eq(req.encoding, EXEC_ENC_UTF8);
    ck_assert_uint_eq(req.limits.cpu_ms, EXEC_LIMIT_UNSET);
    /* The minimal base environment, and nothing of the daemon's. */
    ck_assert_str_eq(env_get("HOME"), "/ws");
    ck_assert_str_eq(env_get("LANG"), "C.UTF-8");
    ck_assert_ptr_nonnull(env_get("PATH"));
    ck_assert_ptr_null(req.envp[3]);
    exec_request_free(&req);
}
END_TEST

START_TEST(full_request)
{
    ck_assert_int_eq(parse("{\"argv\":[\"printf\",\"%s\",\"a b\"],\"stdin\":\"in\","
                           "\"env\":{\"FOO\":\"bar\",\"PATH\":\"/x\"},\"cwd\":\"sub/dir\","
                           "\"timeout_ms\":1500,\"encoding\":\"base64\",\"limits\":{\"cpu_ms\":"
                           "2000,\"file_size_bytes\":0,\"open_files\":64,\"output_bytes\":10}}"),
                     0);
    ck_assert(!req.shell);
    ck_assert_uint_eq(req.argc, 3);
    ck_assert_str_eq(req.argv[2], "a b");
    ck_assert(req.has_stdin);
    ck_assert_uint_eq(req.stdin_len, 2);
    ck_assert_str_eq(env_get("FOO"), "bar");
    ck_assert_str_eq(env_get("PATH"), "/x"); /* the request overrides the base */
    ck_assert_str_eq(req.cwd, "sub/dir");
    ck_assert_uint_eq(req.timeout_ms, 1500);
    ck_assert_int_eq(req.encoding, EXEC_ENC_BASE64);
    ck_assert_uint_eq(req.limits.cpu_ms, 2000);
    ck_assert_uint_eq(req.limits.file_size_bytes, 0);
    ck_assert_uint_eq(req.limits.open_files, 64);
    ck_assert_uint_eq(req.limits.output_bytes, 10);
    ck_assert(req.network);
    exec_request_free(&req);
    ck_assert_int_eq(parse("{\"command\":\"x\",\"network\":false,\"limits\":{\"memory_bytes\":"
                           "104857600,\"pids\":64,\"cpu_quota\":0.5}}"),
                     0);
    ck_assert(!req.network);
    ck_assert_uint_eq(req.limits.memory_bytes, 104857600);
    ck_assert_uint_eq(req.limits.pids, 64);
    ck_assert(req.limits.cpu_quota == 0.5);
    exec_request_free(&req);
}
END_TEST

START_TEST(absolute_cwd)
{
    ck_assert_int_eq(parse("{\"command\":\"x\",\"cwd\":\"/ws/a\"}"), 0);
    ck_assert_str_eq(req.cwd, "/a");
    exec_request_free(&req);
    ck_assert_int_eq(parse("{\"command\":\"x\",\"cwd\":\"/ws\"}"), 0);
    ck_assert_str_eq(req.cwd, "");
    exec_request_free(&req);
    ck_assert_int_eq(parse("{\"command\":\"x\",\"cwd\":\"/wsx\"}"), -1);
    ck_assert_int_eq(err.kind, SBXD_E_DENIED);
    ck_assert_int_eq(parse("{\"command\":\"x\",\"cwd\":\"/etc\"}"), -1);
    ck_assert_int_eq(err.kind, SBXD_E_DENIED);
}
END_TEST

/* Each bad body and a word its message must contain. */
static const struct {
    const char *body;
    const char *needle;
} bad[] = {
    {"", "empty"},
    {"{", "not valid JSON"},
    {"[1]", "JSON object"},
    {"{\"command\":\"a\"} x", "after the JSON"},
    {"{\"command\":5}", "'command' must be a string"},
    {"{\"command\":\"\"}", "must not be empty"},
    {"{\"argv\":\"ls\"}", "array of strings"},
    {"{\"argv\":[]}", "must not be empty"},
    {"{\"argv\":[\"\"]}", "argv[0]"},
    {"{\"argv\":[\"ls\",3]}", "argv[1]"},
    {"{\"command\":\"a\",\"argv\":[\"b\"]}", "not both"},
    {"{}", "required"},
    {"{\"stdin\":\"x\"}", "required"},
    {"{\"command\":\"a\\u0000b\"}", "NUL"},
    {"{\"command\":\"a\",\"env\":{\"A\":\"\\u0000\"}}", "NUL"},
    {"{\"command\":\"a\",\"comand\":\"b\"}", "unknown field 'comand'"},
    {"{\"command\":\"a\",\"command\":\"b\"}", "duplicate field 'command'"},
    {"{\"command\":\"a\",\"env\":{\"A\":\"1\",\"A\":\"2\"}}", "duplicate field 'env.A'"},
    {"{\"command\":\"a\",\"env\":[\"A=1\"]}", "'env' must be an object"},
    {"{\"command\":\"a\",\"env\":{\"A\":1}}", "must be a string"},
    {"{\"command\":\"a\",\"env\":{\"A=B\":\"1\"}}", "not valid"},
    {"{\"command\":\"a\",\"env\":{\"\":\"1\"}}", "not valid"},
    {"{\"command\":\"a\",\"stdin\":5}", "'stdin' must be a string"},
    {"{\"command\":\"a\",\"cwd\":false}", "'cwd' must be a string"},
    {"{\"command\":\"a\",\"timeout_ms\":0}", "timeout_ms"},
    {"{\"command\":\"a\",\"timeout_ms\":1.5}", "timeout_ms"},
    {"{\"command\":\"a\",\"timeout_ms\":\"10\"}", "timeout_ms"},
    {"{\"command\":\"a\",\"timeout_ms\":600001}", "600000"},
    {"{\"command\":\"a\",\"limits\":5}", "'limits' must be an object"},
    {"{\"command\":\"a\",\"limits\":{\"memory\":1}}", "unknown field 'limits.memory'"},
    {"{\"command\":\"a\",\"limits\":{\"open_files\":2}}", "limits.open_files"},
    {"{\"command\":\"a\",\"limits\":{\"cpu_ms\":-1}}", "limits.cpu_ms"},
    {"{\"command\":\"a\",\"encoding\":\"latin1\"}", "utf8"},
    {"{\"command\":\"a\",\"limits\":{\"memory_bytes\":2147483648}}", "limits.memory_bytes"},
    {"{\"command\":\"a\",\"limits\":{\"memory_bytes\":1000}}", "limits.memory_bytes"},
    {"{\"command\":\"a\",\"limits\":{\"pids\":101}}", "limits.pids"},
    {"{\"command\":\"a\",\"limits\":{\"cpu_quota\":3}}", "from 0.01 to 2"},
    {"{\"command\":\"a\",\"limits\":{\"cpu_quota\":\"1\"}}", "limits.cpu_quota"},
    {"{\"command\":\"a\",\"network\":1}", "'network' must be true or false"},
};

START_TEST(rejects_bad_input)
{
    const char *body = bad[_i].body;
    ck_assert_int_eq(parse(body), -1);
    ck_assert_int_eq(err.kind, SBXD_E_INVALID);
    ck_assert_msg(strstr(err.msg, bad[_i].needle), "%s -> %s", body, err.msg);
    ck_assert_ptr_null(req.argv); /* nothing left to free */
}
END_TEST

/* An env of n distinct names (one repeated at the end when dup): past SBXD_JSON_MAX_MEMBERS
 * refused before any name is compared, under it a repeat found among thousands. */
static char *env_body(int n, bool dup)
{
    char *b = malloc((size_t)n * 16 + 64);
    int at = sprintf(b, "{\"command\":\"a\",\"env\":{");
    for (int i = 0; i < n; i++)
        at += sprintf(b + at, "%s\"V%d\":\"\"", i ? "," : "", dup && i == n - 1 ? 7 : i);
    strcpy(b + at, "}}");
    return b;
}

START_TEST(member_cap_and_sorted_duplicates)
{
    char *b = env_body(SBXD_JSON_MAX_MEMBERS + 1, false);
    ck_assert_int_eq(parse(b), -1);
    ck_assert_msg(strstr(err.msg, "'env' has more than 8192 fields"), "%s", err.msg);
    free(b);
    b = env_body(4000, true);
    ck_assert_int_eq(parse(b), -1);
    ck_assert_msg(strstr(err.msg, "duplicate field 'env.V7'"), "%s", err.msg);
    free(b);
    b = env_body(4000, false);
    ck_assert_int_eq(parse(b), 0);
    exec_request_free(&req);
    free(b);
}
END_TEST

START_TEST(raw_nul_byte)
{
    const char body[] = "{\"command\":\"a\0b\"}";
    ck_assert_int_eq(exec_request_parse(body, sizeof(body) - 1, &pol, &req, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
}
END_TEST

START_TEST(nul_scanner)
{
    ck_assert_int_eq(json_check_no_nul("{\"a\":\"\\\\u0000\"}", 15), 0); /* "\\u0000": text */
    ck_assert_int_eq(json_check_no_nul("{\"a\":\"\\u0000\"}", 13), -1);
    ck_assert_int_eq(json_check_no_nul("{\"a\":\"\\u0041\"}", 13), 0);
    ck_assert_int_eq(json_check_no_nul("{\"a\\u0000\":1}", 13), -1); /* in a key too */
}
END_TEST

/* ---- exec_request_build: a request from a front that is not JSON (gRPC) ---- */

#define B(s) ((struct exec_bytes){(s), sizeof(s) - 1})

static int build(const struct exec_bytes *argv, size_t argc, const struct exec_bytes *names,
                 const struct exec_bytes *values, size_t nenv, struct exec_bytes cwd,
                 uint64_t timeout_ms)
{
    memset(&err, 0, sizeof(err));
    return exec_request_build(&pol, argv, argc, names, values, nenv, &cwd, timeout_ms, &req, &err);
}

START_TEST(build_argv_env_cwd)
{
    struct exec_bytes argv[] = {B("/bin/sh"), B("-c"), B("echo $A")};
    struct exec_bytes names[] = {B("A"), B("HOME"), B("A")};
    struct exec_bytes values[] = {B("first"), B("/elsewhere"), B("last")};
    ck_assert_int_eq(build(argv, 3, names, values, 3, B("sub/dir"), 0), 0);
    ck_assert(req.shell); /* /bin/sh -c TEXT: logged as a command */
    ck_assert_uint_eq(req.argc, 3);
    ck_assert_str_eq(req.argv[2], "echo $A");
    ck_assert_ptr_null(req.argv[3]);
    ck_assert_str_eq(env_get("A"), "last"); /* a name given twice: the last wins */
    ck_assert_str_eq(env_get("HOME"), "/elsewhere");
    ck_assert_str_eq(env_get("PATH"), SBXD_BASE_PATH);
    size_t n = 0;
    for (char **e = req.envp; *e; e++)
        n += strncmp(*e, "A=", 2) == 0 || strncmp(*e, "HOME=", 5) == 0;
    ck_assert_uint_eq(n, 2); /* once each */
    ck_assert_str_eq(req.cwd, "sub/dir");
    ck_assert_uint_eq(req.timeout_ms, 60000); /* 0: the policy's default */
    ck_assert(req.network);
    ck_assert_int_eq(req.front, FRONT_REST); /* the front says otherwise itself */
    exec_request_free(&req);

    struct exec_bytes ls[] = {B("ls")};
    ck_assert_int_eq(build(ls, 1, NULL, NULL, 0, B("/ws/sub"), 5000000), 0);
    ck_assert(!req.shell);
    ck_assert_str_eq(req.cwd, "/sub");         /* the workspace's own absolute path */
    ck_assert_uint_eq(req.timeout_ms, 600000); /* capped at the policy's most */
    ck_assert_str_eq(env_get("HOME"), "/ws");
    exec_request_free(&req);
}
END_TEST

START_TEST(build_refuses)
{
    struct exec_bytes ok[] = {B("ls")};
    struct exec_bytes nul[] = {B("echo a\0b")};
    struct exec_bytes bad_utf8[] = {B("echo \xff")};
    struct exec_bytes empty0[] = {B(""), B("x")};
    struct exec_bytes name_nul[] = {B("A\0B")}, name_eq[] = {B("A=B")}, name_empty[] = {B("")};
    struct exec_bytes val[] = {B("v")}, val_nul[] = {B("v\0w")};
    ck_assert_int_eq(build(ok, 0, NULL, NULL, 0, B(""), 0), -1);
    ck_assert_int_eq(err.kind, SBXD_E_INVALID);
    ck_assert_int_eq(build(empty0, 2, NULL, NULL, 0, B(""), 0), -1);
    ck_assert_int_eq(build(nul, 1, NULL, NULL, 0, B(""), 0), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
    ck_assert_int_eq(build(bad_utf8, 1, NULL, NULL, 0, B(""), 0), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "UTF-8"));
    ck_assert_int_eq(build(ok, 1, name_nul, val, 1, B(""), 0), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
    ck_assert_int_eq(build(ok, 1, name_eq, val, 1, B(""), 0), -1);
    ck_assert_int_eq(build(ok, 1, name_empty, val, 1, B(""), 0), -1);
    ck_assert_int_eq(build(ok, 1, val, val_nul, 1, B(""), 0), -1);
    ck_assert_int_eq(build(ok, 1, NULL, NULL, 0, B("a\0b"), 0), -1);
    ck_assert_int_eq(build(ok, 1, NULL, NULL, 0, B("/etc"), 0), -1);
    ck_assert_int_eq(err.kind, SBXD_E_DENIED);
    ck_assert_ptr_null(req.argv); /* nothing left to free */
    ck_assert_ptr_null(req.envp);
}
END_TEST

/* The base environment chosen from sbxd's by --pass-env (cmdenv.h). */
static const char *cmdenv_get(const struct cmdenv *ce, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < ce->nvars; i++)
        if (strncmp(ce->vars[i], name, n) == 0 && ce->vars[i][n] == '=')
            return ce->vars[i] + n + 1;
    return NULL;
}

START_TEST(cmdenv_allow_list)
{
    char *envp[] = {"PATH=/img/bin:/bin",
                    "PATH=/second",
                    "JAVA_HOME=/jdk",
                    "SANDBOX_URL=https://u:p@h/x",
                    "SANDBOX_PLAIN=https://h/x",
                    "SANDBOX_API_KEY=k",
                    "SBXD_TOKEN=t",
                    "sbxd_token=t",
                    "MY_API_KEY=k",
                    "HOME=/root",
                    "noequals",
                    NULL};
    struct cmdenv ce;
    struct sbxd_err why = {0};
    ck_assert_int_eq(cmdenv_init(&ce, " PATH , JAVA_HOME,SANDBOX_*, s*,H*,,", envp, &why), 0);
    ck_assert_str_eq(cmdenv_get(&ce, "PATH"), "/img/bin:/bin"); /* the first, as getenv */
    ck_assert_str_eq(cmdenv_get(&ce, "JAVA_HOME"), "/jdk");
    ck_assert_str_eq(cmdenv_get(&ce, "SANDBOX_PLAIN"), "https://h/x");
    ck_assert_ptr_null(cmdenv_get(&ce, "SANDBOX_URL"));     /* a URL with a user */
    ck_assert_ptr_null(cmdenv_get(&ce, "SANDBOX_API_KEY")); /* a credential's name */
    ck_assert_ptr_null(cmdenv_get(&ce, "SBXD_TOKEN"));
    ck_assert_ptr_null(cmdenv_get(&ce, "sbxd_token"));
    ck_assert_ptr_null(cmdenv_get(&ce, "MY_API_KEY"));
    ck_assert_ptr_null(cmdenv_get(&ce, "HOME")); /* by a pattern: never */
    ck_assert(!ce.home && !ce.empty);
    ck_assert_str_eq(cmdenv_get(&ce, "LANG"), SBXD_BASE_LANG);
    ck_assert_uint_eq(ce.npassed, 3);
    cmdenv_free(&ce);

    /* Named: passed as it is. The base's HOME then is sbxd's, and no request override. */
    ck_assert_int_eq(cmdenv_init(&ce, "MY_API_KEY,HOME", envp, &why), 0);
    ck_assert_str_eq(cmdenv_get(&ce, "MY_API_KEY"), "k");
    ck_assert_str_eq(cmdenv_get(&ce, "PATH"), SBXD_BASE_PATH);
    ck_assert(ce.home);
    struct request_policy p = pol;
    p.env = &ce;
    const char *body = "{\"command\":\"x\",\"env\":{\"MY_API_KEY\":\"r\"}}";
    ck_assert_int_eq(exec_request_parse(body, strlen(body), &p, &req, &err), 0);
    ck_assert_str_eq(env_get("HOME"), "/root");
    ck_assert_str_eq(env_get("MY_API_KEY"), "r");
    size_t n = 0;
    for (char **e = req.envp; *e; e++)
        n += strncmp(*e, "MY_API_KEY=", 11) == 0;
    ck_assert_uint_eq(n, 1);
    exec_request_free(&req);
    cmdenv_free(&ce);

    /* + adds to the default; empty is minimal; bad items refused. */
    ck_assert_int_eq(cmdenv_init(&ce, "+MY_API_KEY", envp, &why), 0);
    ck_assert_str_eq(cmdenv_get(&ce, "JAVA_HOME"), "/jdk");
    ck_assert_str_eq(cmdenv_get(&ce, "MY_API_KEY"), "k");
    cmdenv_free(&ce);
    ck_assert_int_eq(cmdenv_init(&ce, "", envp, &why), 0);
    ck_assert(ce.empty);
    ck_assert_uint_eq(ce.nvars, 2);
    cmdenv_free(&ce);
    static const char *const bad_lists[] = {"SBXD_TOKEN", "A,Sbxd_x", "1A", "A-B",
                                            "A*B",        "**",       "A B"};
    for (size_t i = 0; i < sizeof(bad_lists) / sizeof(bad_lists[0]); i++) {
        ck_assert_msg(cmdenv_init(&ce, bad_lists[i], envp, &why) == -1, "%s", bad_lists[i]);
        /* The context is put before the item's error, whose kind stays. */
        ck_assert_int_eq(why.kind, SBXD_E_INVALID);
        ck_assert_msg(strncmp(why.msg, "--pass-env: ", 12) == 0, "%s", why.msg);
    }
}
END_TEST

/* One simple command is exec'd by the shell (the legacy shape's program is then the process
 * a signal ends); anything the shell itself must do is left to it. The text logged and
 * quoted stays the client's. */
START_TEST(exec_simple_commands_only)
{
    static const char *const simple[] = {
        "python3 -c 'import os; os.kill(os.getpid(), 9)'",
        "sleep 5",
        "  ls -la /tmp",
        "grep -r \"a b\" src",
        "sh -c 'kill -TERM $$'",
        "/usr/bin/env a=b cmd",
    };
    static const char *const shell_work[] = {
        "echo hi", "cd /tmp",  "a=1 cmd",   "ls; ls",     "ls | wc",
        "ls > f",  "ls $HOME", "ls `pwd`",  "ls *.c",     "ls && ls",
        "ls &",    "(ls)",     "ls \"$x\"", "ls 'open",   "if true; then ls; fi",
        "exit 3",  "",         "ls\\nls",   "kill -9 $$", "~/bin/x",
        "ls #c",   "true",     "{ ls; }",   "x\\\\y",
    };
    char body[256];
    for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "command", simple[i]);
        char *j = cJSON_PrintUnformatted(o);
        snprintf(body, sizeof(body), "%s", j);
        free(j);
        cJSON_Delete(o);
        ck_assert_msg(parse(body) == 0, "%s: %s", simple[i], err.msg);
        ck_assert_int_eq(exec_request_exec_simple(&req), 0);
        ck_assert_msg(strncmp(req.argv[2], "exec ", 5) == 0 &&
                          strcmp(req.argv[2] + 5, simple[i]) == 0,
                      "not exec'd: %s", simple[i]);
        char text[256];
        exec_request_text(&req, text, sizeof(text));
        ck_assert_str_eq(text, simple[i]);
        exec_request_free(&req);
    }
    for (size_t i = 0; i < sizeof(shell_work) / sizeof(shell_work[0]); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "command", shell_work[i]);
        char *j = cJSON_PrintUnformatted(o);
        snprintf(body, sizeof(body), "%s", j);
        free(j);
        cJSON_Delete(o);
        if (parse(body) != 0)
            continue; /* refused anyway (an empty command) */
        ck_assert_int_eq(exec_request_exec_simple(&req), 0);
        ck_assert_msg(strcmp(req.argv[2], shell_work[i]) == 0, "exec'd: %s", shell_work[i]);
        exec_request_free(&req);
    }
}
END_TEST

Suite *request_suite(void)
{
    Suite *s = suite_create("request");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, command_defaults);
    tcase_add_test(tc, full_request);
    tcase_add_test(tc, absolute_cwd);
    tcase_add_loop_test(tc, rejects_bad_input, 0, sizeof(bad) / sizeof(bad[0]));
    tcase_add_test(tc, member_cap_and_sorted_duplicates);
    tcase_add_test(tc, raw_nul_byte);
    tcase_add_test(tc, nul_scanner);
    tcase_add_test(tc, build_argv_env_cwd);
    tcase_add_test(tc, build_refuses);
    tcase_add_test(tc, cmdenv_allow_list);
    tcase_add_test(tc, exec_simple_commands_only);
    suite_add_tcase(s, tc);
    return s;
}
