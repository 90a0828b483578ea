/*
 * What commands inherit of sbxd's environment (--pass-env): the image's PATH and an
 * allow-list, the same on every face; never sbxd's token, an SBXD_ variable, or a
 * credential-looking one unless it is named.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define TOKEN "env-test-token-5d1c9a"

/* A directory (0755) holding `mytool`, a script that prints "mytool-ran": what an image puts
 * on its PATH (ENV PATH=/opt/venv/bin:...). Made and removed by the test runner itself (an
 * unchecked fixture), so a failed test leaves nothing behind. */
static char tools[64];

static void tool_dir_make(void)
{
    snprintf(tools, sizeof(tools), "/tmp/sbxd-it-tools-XXXXXX");
    char path[PATH_MAX];
    FILE *f = NULL;
    if (mkdtemp(tools) && chmod(tools, 0755) == 0) {
        snprintf(path, sizeof(path), "%s/mytool", tools);
        f = fopen(path, "w");
    }
    if (!f || fputs("#!/bin/sh\necho mytool-ran\n", f) < 0 || fclose(f) != 0 ||
        chmod(path, 0755) < 0) {
        perror("the tool directory");
        abort();
    }
}

static void tool_dir_remove(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/mytool", tools);
    unlink(path);
    rmdir(tools);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of `env` output (NAME=value lines), sorted and joined by commas, into out. */
static void env_names(const char *text, char *out, size_t len)
{
    char *names[128];
    size_t n = 0;
    for (const char *p = text; *p && n < 128;) {
        size_t line = strcspn(p, "\n");
        size_t nl = strcspn(p, "=\n");
        if (nl < line)
            names[n++] = strndup(p, nl);
        p += line + (p[line] == '\n');
    }
    qsort(names, n, sizeof(names[0]), cmp_str);
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(out + k, len - k, "%s%s", i ? "," : "", names[i]);
        k += w > 0 && (size_t)w < len - k ? (size_t)w : 0;
        free(names[i]);
    }
}

/* Whether env output holds the line exactly ("NAME=value"). */
static bool env_has(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || !p[n]))
            return true;
    return false;
}

/* Whether env output names the variable at all. */
static bool env_names_var(const char *text, const char *name)
{
    char line[128];
    snprintf(line, sizeof(line), "\n%s=", name);
    return strncmp(text, line + 1, strlen(line + 1)) == 0 || strstr(text, line);
}

/* A request of d with the token when one is set (auth), asserting the transfer worked. */
static void req(const struct daemon *d, bool auth, const char *method, const char *path,
                const char *body, struct http_resp *r)
{
    ck_assert_int_eq(http_request_with(d, method, path,
                                       auth ? "Authorization: Bearer " TOKEN : NULL, NULL, body,
                                       body ? strlen(body) : 0, 60000, r),
                     0);
}

/* The stdout of /execute of body, asserting it ran and exited 0; malloc'd. */
static char *exec_out(const struct daemon *d, bool auth, const char *body)
{
    struct http_resp r;
    req(d, auth, "POST", "/execute", body, &r);
    ck_assert_msg(r.status == 200 && r.json, "%ld %s", r.status, r.body);
    ck_assert_msg(jnum(r.json, "exit_code") == 0, "%s: %s", body, r.body);
    char *out = strdup(jstr(r.json, "stdout"));
    http_resp_free(&r);
    return out;
}

/* The workspace file name, waited for (up to 10 s), over HTTP; malloc'd. Commands write it
 * with `env > t && mv t name`, so it is whole once it exists. */
static char *ws_file(const struct daemon *d, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/files/%s", name);
    for (int i = 0; i < 1000; i++) {
        struct http_resp r;
        req(d, false, "GET", path, NULL, &r);
        if (r.status == 200) {
            char *s = strndup(r.body, r.len);
            http_resp_free(&r);
            return s;
        }
        http_resp_free(&r);
        usleep(10000);
    }
    ck_abort_msg("%s never appeared", name);
    return NULL;
}

/* What every face's command must see of the daemon started by the first test (besides the
 * shell's own PWD, SHLVL, _ on the faces that run one). */
static void assert_allowed(const struct daemon *d, const char *face, const char *env)
{
    char line[PATH_MAX + 64];
    snprintf(line, sizeof(line), "PATH=%s:/usr/bin:/bin", tools);
    ck_assert_msg(env_has(env, line), "%s: no %s in:\n%s", face, line, env);
    snprintf(line, sizeof(line), "HOME=%s", d->ws);
    ck_assert_msg(env_has(env, line), "%s: HOME is not the workspace:\n%s", face, env);
    static const char *const present[] = {"JAVA_HOME=/opt/jdk-it",
                                          "PYTHONPATH=/opt/py-it",
                                          "VIRTUAL_ENV=/opt/venv-it",
                                          "SANDBOX_FOO=foo-it",
                                          "PIP_NO_CACHE_DIR=1",
                                          "TZ=UTC",
                                          "LANG=C.UTF-8",
                                          "SSL_CERT_FILE=/etc/ssl/certs/ca-it.crt"};
    for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); i++)
        ck_assert_msg(env_has(env, present[i]), "%s: no %s in:\n%s", face, present[i], env);
    static const char *const absent[] = {"SBXD_X",        "SBXD_TEST_DAEMON_SECRET",
                                         "MY_API_KEY",    "SANDBOX_AUTH_HEADER",
                                         "PIP_INDEX_URL", "UNLISTED_IT",
                                         "ASAN_OPTIONS"};
    for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
        ck_assert_msg(!env_names_var(env, absent[i]), "%s: %s passed:\n%s", face, absent[i], env);
    ck_assert_msg(!strstr(env, "key-it") && !strstr(env, "pw@"), "%s: a secret's value:\n%s", face,
                  env);
}

/*
 * The default allow-list. sbxd runs with an image's PATH (a tool directory first), language
 * runtimes' variables, SANDBOX_ ones, and things no command may have: an SBXD_ setting, an
 * API key nobody named, a SANDBOX_ name that looks like a credential, a mirror URL with a
 * password in it. Each face's command sees the same: /execute (argv, and the legacy
 * python-runtime shape), /processes, a shell context, MCP's run_command. `mytool` on that
 * PATH runs (it was 127: the fixed environment had the built-in PATH only).
 */
START_TEST(commands_inherit_the_allow_list_on_every_face)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "PATH=%s:/usr/bin:/bin", tools);
    const char *env[] = {path,
                         "JAVA_HOME=/opt/jdk-it",
                         "PYTHONPATH=/opt/py-it",
                         "VIRTUAL_ENV=/opt/venv-it",
                         "SANDBOX_FOO=foo-it",
                         "SANDBOX_AUTH_HEADER=Bearer-key-it",
                         "MY_API_KEY=key-it",
                         "PIP_INDEX_URL=https://user:pw@mirror.invalid/simple",
                         "PIP_NO_CACHE_DIR=1",
                         "SSL_CERT_FILE=/etc/ssl/certs/ca-it.crt",
                         "SBXD_X=sbxd-x-it",
                         "UNLISTED_IT=u",
                         "TZ=UTC",
                         "HOME=/root",
                         NULL};
    struct daemon d;
    daemon_start(&d, NULL, env);

    /* /execute, argv: exactly these. */
    char *out = exec_out(&d, false, "{\"argv\":[\"env\"]}");
    assert_allowed(&d, "/execute", out);
    char names[1024];
    env_names(out, names, sizeof(names));
    ck_assert_str_eq(names, "HOME,JAVA_HOME,LANG,PATH,PIP_NO_CACHE_DIR,PYTHONPATH,SANDBOX_FOO,"
                            "SSL_CERT_FILE,TZ,VIRTUAL_ENV");
    free(out);
    /* The image's tool runs, by argv and by the legacy shape ({"command"} alone). */
    out = exec_out(&d, false, "{\"argv\":[\"mytool\"]}");
    ck_assert_str_eq(out, "mytool-ran\n");
    free(out);
    out = exec_out(&d, false, "{\"command\":\"mytool\"}");
    ck_assert_str_eq(out, "mytool-ran\n");
    free(out);
    /* The request's env still wins, once. */
    out = exec_out(
        &d, false,
        "{\"argv\":[\"env\"],\"env\":{\"JAVA_HOME\":\"/req\",\"PATH\":\"/usr/bin:/bin\"}}");
    ck_assert(env_has(out, "JAVA_HOME=/req") && !env_has(out, "JAVA_HOME=/opt/jdk-it"));
    ck_assert(env_has(out, "PATH=/usr/bin:/bin"));
    env_names(out, names, sizeof(names));
    ck_assert_str_eq(names, "HOME,JAVA_HOME,LANG,PATH,PIP_NO_CACHE_DIR,PYTHONPATH,SANDBOX_FOO,"
                            "SSL_CERT_FILE,TZ,VIRTUAL_ENV");
    free(out);

    /* /processes */
    struct http_resp r;
    req(&d, false, "POST", "/processes", "{\"command\":\"env > t1 && mv t1 env-process\"}", &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    out = ws_file(&d, "env-process");
    assert_allowed(&d, "/processes", out);
    free(out);

    /* A shell context */
    req(&d, false, "POST", "/contexts", "{\"language\":\"bash\"}", &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    char ctx[64], cpath[128];
    snprintf(ctx, sizeof(ctx), "%s", jstr(r.json, "id"));
    http_resp_free(&r);
    snprintf(cpath, sizeof(cpath), "/contexts/%s/execute", ctx);
    req(&d, false, "POST", cpath, "{\"code\":\"env > t2 && mv t2 env-context; mytool\"}", &r);
    ck_assert_msg(r.status == 200 && strstr(r.body, "mytool-ran"), "%ld %s", r.status, r.body);
    http_resp_free(&r);
    out = ws_file(&d, "env-context");
    assert_allowed(&d, "context", out);
    free(out);
    snprintf(cpath, sizeof(cpath), "/contexts/%s", ctx);
    req(&d, false, "DELETE", cpath, NULL, &r);
    http_resp_free(&r);

    /* MCP's run_command */
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                       "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{"
                       "\"name\":\"it\",\"version\":\"1\"}}}";
    req(&d, false, "POST", "/mcp", init, &r);
    const char *h = r.headers ? strcasestr(r.headers, "\nMcp-Session-Id: ") : NULL;
    ck_assert_msg(r.status == 200 && h, "%ld %s", r.status, r.body);
    char sid[160];
    snprintf(sid, sizeof(sid), "Mcp-Session-Id: %.*s", (int)strcspn(h + 17, "\r\n"), h + 17);
    http_resp_free(&r);
    const char *call = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"run_command\",\"arguments\":{\"command\":"
                       "\"env > t3 && mv t3 env-mcp\"}}}";
    ck_assert_int_eq(http_request_with(&d, "POST", "/mcp", sid, "application/json", call,
                                       strlen(call), 60000, &r),
                     0);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    out = ws_file(&d, "env-mcp");
    assert_allowed(&d, "mcp", out);
    free(out);

    /* /healthz names what passes, never a value. */
    req(&d, false, "GET", "/healthz", NULL, &r);
    const cJSON *iso = cJSON_GetObjectItemCaseSensitive(r.json, "isolation");
    ck_assert_str_eq(jstr(iso, "environment"), "allow-list");
    char lines[1024] = "";
    const cJSON *passed = cJSON_GetObjectItemCaseSensitive(iso, "environment_passed");
    ck_assert(cJSON_IsArray(passed));
    for (const cJSON *c = passed->child; c; c = c->next) {
        ck_assert(cJSON_IsString(c));
        strcat(lines, c->valuestring);
        strcat(lines, "=\n");
    }
    env_names(lines, names, sizeof(names));
    ck_assert_str_eq(names, "JAVA_HOME,PATH,PIP_NO_CACHE_DIR,PYTHONPATH,SANDBOX_FOO,SSL_CERT_FILE,"
                            "TZ,VIRTUAL_ENV");
    ck_assert(!strstr(r.body, "jdk-it") && !strstr(r.body, "foo-it"));
    http_resp_free(&r);

    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/*
 * Patterns that take in everything, sbxd's own names included: the token (SBXD_TOKEN, which
 * sbxd wipes at start), every SBXD_ setting, and credential-looking names never pass; HOME
 * stays the workspace. An exact SBXD_ name in the list is refused at start.
 */
START_TEST(patterns_never_pass_the_token_sbxd_names_or_secrets)
{
    static const char *const lists[] = {"*", "SBXD*", "S*,M*,U*,H*"};
    const char *env[] = {
        "SBXD_TOKEN=" TOKEN,  "SBXD_X=sbxd-x-it", "MY_API_KEY=key-it", "SANDBOX_DB_PASSWORD=pw-it",
        "SANDBOX_FOO=foo-it", "UNLISTED_IT=u",    "HOME=/root",        NULL};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        const char *args[] = {"--pass-env", lists[i], NULL};
        struct daemon d;
        char why[4096];
        int st = daemon_try_start(&d, args, env, why, sizeof(why));
        ck_assert_msg(st == -1, "--pass-env %s: did not start: %s", lists[i], why);
        char *out = exec_out(&d, true, "{\"command\":\"env; cat /proc/self/environ; echo; true\"}");
        ck_assert_msg(!strstr(out, TOKEN) && !strstr(out, "SBXD_"), "%s: sbxd's own:\n%s", lists[i],
                      out);
        ck_assert_msg(!strstr(out, "key-it") && !strstr(out, "pw-it"), "%s: a secret:\n%s",
                      lists[i], out);
        char home[300];
        snprintf(home, sizeof(home), "HOME=%s", d.ws);
        ck_assert_msg(env_has(out, home), "%s: HOME:\n%s", lists[i], out);
        /* What the pattern does take in passes. */
        ck_assert_msg(strcmp(lists[i], "SBXD*") == 0 ||
                          (env_has(out, "UNLISTED_IT=u") && env_has(out, "SANDBOX_FOO=foo-it")),
                      "%s:\n%s", lists[i], out);
        free(out);
        ck_assert(daemon_stop_clean(&d, 10000));
    }
    /* Named, an SBXD_ variable is refused outright: it would never pass. */
    char out[4096];
    const char *named[] = {"--pass-env", "PATH,SBXD_TOKEN", NULL};
    ck_assert_int_eq(sbxd_run(named, NULL, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "SBXD_TOKEN"), "%s", out);
    const char *bad[] = {"--pass-env", "PATH,MY-VAR", NULL};
    ck_assert_int_eq(sbxd_run(bad, NULL, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "MY-VAR"), "%s", out);
}
END_TEST

/*
 * A name given exactly passes even when it looks like a credential (the operator put it
 * there on purpose): alone (the built-in PATH then), or added to the default with +. An
 * empty list is the minimal environment of old: HOME, PATH and LANG.
 */
START_TEST(named_variables_pass_and_an_empty_list_is_minimal)
{
    const char *env[] = {"PATH=/usr/bin:/bin", "MY_API_KEY=key-it", "JAVA_HOME=/opt/jdk-it",
                         "SANDBOX_FOO=foo-it", NULL};
    static const struct {
        const char *list, *names, *health;
    } cases[] = {
        {"MY_API_KEY", "HOME,LANG,MY_API_KEY,PATH", "allow-list"},
        {"+MY_API_KEY", "HOME,JAVA_HOME,LANG,MY_API_KEY,PATH,SANDBOX_FOO", "allow-list"},
        {"", "HOME,LANG,PATH", "minimal"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char arg[64];
        snprintf(arg, sizeof(arg), "--pass-env=%s", cases[i].list);
        const char *args[] = {arg, NULL};
        struct daemon d;
        char why[4096];
        int st = daemon_try_start(&d, args, env, why, sizeof(why));
        ck_assert_msg(st == -1, "%s: did not start: %s", arg, why);
        char *out = exec_out(&d, false, "{\"argv\":[\"env\"]}");
        char names[512];
        env_names(out, names, sizeof(names));
        ck_assert_msg(strcmp(names, cases[i].names) == 0, "%s: %s", arg, out);
        if (strstr(cases[i].names, "MY_API_KEY"))
            ck_assert(env_has(out, "MY_API_KEY=key-it"));
        /* Not named, PATH is the built-in one; named (in the default), sbxd's. */
        ck_assert(env_has(out, cases[i].list[0] == '+'
                                   ? "PATH=/usr/bin:/bin"
                                   : "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                     "/sbin:/bin"));
        free(out);
        struct http_resp r;
        req(&d, false, "GET", "/healthz", NULL, &r);
        const cJSON *iso = cJSON_GetObjectItemCaseSensitive(r.json, "isolation");
        ck_assert_str_eq(jstr(iso, "environment"), cases[i].health);
        ck_assert(!strstr(r.body, "key-it"));
        http_resp_free(&r);
        ck_assert(daemon_stop_clean(&d, 10000));
    }
}
END_TEST

Suite *environment_suite(void)
{
    Suite *s = suite_create("environment");
    TCase *tc = tcase_create("pass_env");
    tcase_add_unchecked_fixture(tc, tool_dir_make, tool_dir_remove);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, commands_inherit_the_allow_list_on_every_face);
    tcase_add_test(tc, patterns_never_pass_the_token_sbxd_names_or_secrets);
    tcase_add_test(tc, named_variables_pass_and_an_empty_list_is_minimal);
    suite_add_tcase(s, tc);
    return s;
}
