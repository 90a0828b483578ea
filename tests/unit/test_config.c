#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "sbxd/config.h"
#include "suites.h"

static struct sbxd_config cfg;
static struct sbxd_err perr;
static char outbuf[65536]; /* --help: its whole text */

static enum config_outcome parse(char *const *argv, char *const *envp)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    FILE *out = fmemopen(outbuf, sizeof(outbuf), "w");
    perr = (struct sbxd_err){0};
    enum config_outcome r = config_parse(&cfg, argc, argv, envp, out, &perr);
    fclose(out);
    return r;
}

START_TEST(defaults)
{
    char *argv[] = {"sbxd", NULL};
    char *envp[] = {NULL};
    ck_assert_int_eq(parse(argv, envp), CONFIG_RUN);
    ck_assert_str_eq(cfg.listen, "0.0.0.0:8888");
    ck_assert_str_eq(cfg.grpc_listen, "0.0.0.0:9090");
    ck_assert(!cfg.grpc_off);
    ck_assert_int_eq(cfg.grpc_addr.ss_family, AF_INET);
    ck_assert_str_eq(cfg.workspace, "/workspace");
    ck_assert_uint_eq(cfg.timeout_ms, 300000);
    ck_assert_uint_eq(cfg.max_output_bytes, 1048576);
    ck_assert_uint_eq(cfg.max_body_bytes, 1048576);
    ck_assert_uint_eq(cfg.max_running, 32);
    ck_assert_int_eq(cfg.log_format, LOG_FORMAT_JSON);
    ck_assert_str_eq(cfg.isolation, "auto");
    ck_assert_str_eq(cfg.require_isolation, "");
    ck_assert_uint_eq(cfg.pids_max, 1024);
    ck_assert_uint_eq(cfg.memory_max, 0);
    ck_assert_uint_eq(cfg.user_uid, 1000);
    ck_assert_uint_eq(cfg.user_gid, 1000);
    ck_assert_uint_eq(cfg.uid_first, 100000);
    ck_assert_uint_eq(cfg.uid_count, 1024);
}
END_TEST

START_TEST(flags_beat_env_beat_defaults)
{
    char *argv[] = {"sbxd", "--max-running=7", "--max-output-bytes", "2MiB", NULL};
    char *envp[] = {"SBXD_MAX_RUNNING=9", "SBXD_LOG_FORMAT=text", "SBXD_LISTEN=127.0.0.1:0", NULL};
    ck_assert_int_eq(parse(argv, envp), CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_running, 7);
    ck_assert_uint_eq(cfg.max_output_bytes, 2 * 1048576);
    ck_assert_int_eq(cfg.log_format, LOG_FORMAT_TEXT);
    ck_assert_str_eq(cfg.listen, "127.0.0.1:0");
}
END_TEST

START_TEST(listen_several)
{
    char *envp[] = {NULL};
    char *one[] = {"sbxd", NULL};
    ck_assert_int_eq(parse(one, envp), CONFIG_RUN);
    ck_assert_uint_eq(cfg.nlisten, 1);
    /* Repeated, and a comma list (blanks around an item ignored): all of them, in order. */
    char *rep[] = {"sbxd",        "--listen", "127.0.0.1:8080", "--listen=[::1]:0, :9", "--listen",
                   "127.0.0.2:1", NULL};
    ck_assert_int_eq(parse(rep, envp), CONFIG_RUN);
    ck_assert_uint_eq(cfg.nlisten, 4);
    ck_assert_str_eq(cfg.listen, "127.0.0.1:8080,[::1]:0, :9,127.0.0.2:1");
    ck_assert_int_eq(cfg.listen_addr[0].ss_family, AF_INET);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&cfg.listen_addr[0])->sin_port), 8080);
    ck_assert_int_eq(cfg.listen_addr[1].ss_family, AF_INET6);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&cfg.listen_addr[2])->sin_port), 9);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&cfg.listen_addr[3])->sin_port), 1);
    /* The variable takes a list too; a flag replaces it whole. */
    char *env_list[] = {"SBXD_LISTEN=:8888,:8080", NULL};
    ck_assert_int_eq(parse(one, env_list), CONFIG_RUN);
    ck_assert_uint_eq(cfg.nlisten, 2);
    char *flag[] = {"sbxd", "--listen", "127.0.0.1:0", NULL};
    ck_assert_int_eq(parse(flag, env_list), CONFIG_RUN);
    ck_assert_uint_eq(cfg.nlisten, 1);
    /* An empty or bad item, or more than 8, is refused, naming the option. */
    char *empty[] = {"sbxd", "--listen", ":8888,", NULL};
    ck_assert_int_eq(parse(empty, envp), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "--listen"));
    char *bad[] = {"sbxd", "--listen", ":8888,nowhere", NULL};
    ck_assert_int_eq(parse(bad, envp), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "'nowhere'"));
    char *many[] = {"sbxd", "--listen", ":1,:2,:3,:4,:5,:6,:7,:8,:9", NULL};
    ck_assert_int_eq(parse(many, envp), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "at most 8"));
}
END_TEST

START_TEST(grpc_listen_forms)
{
    char *envp[] = {NULL};
    char *off[] = {"sbxd", "--grpc-listen", "off", NULL};
    ck_assert_int_eq(parse(off, envp), CONFIG_RUN);
    ck_assert(cfg.grpc_off);
    char *v6[] = {"sbxd", "--grpc-listen=[::1]:0", NULL};
    ck_assert_int_eq(parse(v6, envp), CONFIG_RUN);
    ck_assert(!cfg.grpc_off);
    ck_assert_int_eq(cfg.grpc_addr.ss_family, AF_INET6);
    ck_assert_str_eq(cfg.grpc_listen, "[::1]:0");
    char *none[] = {"sbxd", NULL};
    char *env_off[] = {"SBXD_GRPC_LISTEN=off", NULL};
    ck_assert_int_eq(parse(none, env_off), CONFIG_RUN);
    ck_assert(cfg.grpc_off);
    /* The flag wins over the variable, both ways. */
    char *on[] = {"sbxd", "--grpc-listen=127.0.0.1:7000", NULL};
    ck_assert_int_eq(parse(on, env_off), CONFIG_RUN);
    ck_assert(!cfg.grpc_off);
    ck_assert_str_eq(cfg.grpc_listen, "127.0.0.1:7000");
}
END_TEST

START_TEST(workspace_env_order)
{
    char *argv[] = {"sbxd", NULL};
    char *legacy[] = {"SANDBOX_BASE_DIR=/srv/legacy", NULL};
    ck_assert_int_eq(parse(argv, legacy), CONFIG_RUN);
    ck_assert_str_eq(cfg.workspace, "/srv/legacy");
    char *both[] = {"SANDBOX_BASE_DIR=/srv/legacy", "SBXD_WORKSPACE=/srv/new", NULL};
    ck_assert_int_eq(parse(argv, both), CONFIG_RUN);
    ck_assert_str_eq(cfg.workspace, "/srv/new");
}
END_TEST

/* --workspace-baseline: none by default; the flag over SBXD_WORKSPACE_BASELINE. */
START_TEST(workspace_baseline)
{
    char *argv[] = {"sbxd", NULL};
    char *none[] = {NULL};
    ck_assert_int_eq(parse(argv, none), CONFIG_RUN);
    ck_assert_str_eq(cfg.workspace_baseline, "");
    char *env[] = {"SBXD_WORKSPACE_BASELINE=/srv/template", NULL};
    ck_assert_int_eq(parse(argv, env), CONFIG_RUN);
    ck_assert_str_eq(cfg.workspace_baseline, "/srv/template");
    char *flag[] = {"sbxd", "--workspace-baseline", "/opt/base", NULL};
    ck_assert_int_eq(parse(flag, env), CONFIG_RUN);
    ck_assert_str_eq(cfg.workspace_baseline, "/opt/base");
    char *help[] = {"sbxd", "--help", NULL};
    ck_assert_int_eq(parse(help, none), CONFIG_EXIT_0);
    ck_assert_ptr_nonnull(strstr(outbuf, "--workspace-baseline DIR"));
    ck_assert_ptr_nonnull(strstr(outbuf, "SBXD_WORKSPACE_BASELINE"));
    ck_assert_ptr_nonnull(strstr(outbuf, "POST /reset"));
}
END_TEST

START_TEST(archive_limits)
{
    char *argv[] = {"sbxd", NULL};
    char *none[] = {NULL};
    ck_assert_int_eq(parse(argv, none), CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_archive_bytes, 1ULL << 30);
    ck_assert_uint_eq(cfg.max_archive_entries, 100000);
    char *env[] = {"SBXD_MAX_ARCHIVE_BYTES=64MiB", "SBXD_MAX_ARCHIVE_ENTRIES=50", NULL};
    ck_assert_int_eq(parse(argv, env), CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_archive_bytes, 64ULL << 20);
    ck_assert_uint_eq(cfg.max_archive_entries, 50);
    char *flag[] = {"sbxd", "--max-archive-entries", "7", NULL};
    ck_assert_int_eq(parse(flag, env), CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_archive_entries, 7);
    char *zero[] = {"sbxd", "--max-archive-entries", "0", NULL};
    ck_assert_int_eq(parse(zero, none), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "--max-archive-entries"));
}
END_TEST

START_TEST(legacy_timeout_seconds)
{
    char *argv[] = {"sbxd", NULL};
    char *envp[] = {"SANDBOX_EXEC_TIMEOUT_SECONDS=7200", NULL};
    ck_assert_int_eq(parse(argv, envp), CONFIG_RUN);
    ck_assert_uint_eq(cfg.timeout_ms, 7200000);
    /* The default maximum rises to meet it rather than refusing a legacy setting. */
    ck_assert_uint_eq(cfg.max_timeout_ms, 7200000);
    char *argv2[] = {"sbxd", "--max-timeout-ms", "1000", NULL};
    ck_assert_int_eq(parse(argv2, envp), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "--timeout-ms"));
    /* As the python runtime reads it: fractions count; a value that is no number of seconds
     * above 0 leaves the default and is named for a warning, never stopping sbxd. */
    char *half[] = {"SANDBOX_EXEC_TIMEOUT_SECONDS=0.5", NULL};
    ck_assert_int_eq(parse(argv, half), CONFIG_RUN);
    ck_assert_uint_eq(cfg.timeout_ms, 500);
    ck_assert_str_eq(cfg.env_ignored, "");
    const char *bad[] = {"abc", "0", "-3", "nan", "inf", "", "1e400", "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char var[64];
        snprintf(var, sizeof(var), "SANDBOX_EXEC_TIMEOUT_SECONDS=%s", bad[i]);
        char *envb[] = {var, NULL};
        ck_assert_msg(parse(argv, envb) == CONFIG_RUN, "%s", bad[i]);
        ck_assert_uint_eq(cfg.timeout_ms, 300000);
        ck_assert_str_eq(cfg.env_ignored, "SANDBOX_EXEC_TIMEOUT_SECONDS");
    }
}
END_TEST

/* The default timeout (300 s) yields to a lower maximum given alone; a timeout given above
 * the maximum given stays an error. */
START_TEST(max_timeout_below_the_default)
{
    char *argv[] = {"sbxd", "--max-timeout-ms", "30000", NULL};
    char *none[] = {NULL};
    ck_assert_int_eq(parse(argv, none), CONFIG_RUN);
    ck_assert_uint_eq(cfg.timeout_ms, 30000);
    ck_assert_uint_eq(cfg.max_timeout_ms, 30000);
    char *both[] = {"sbxd", "--max-timeout-ms", "30000", "--timeout-ms", "45000", NULL};
    ck_assert_int_eq(parse(both, none), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "--timeout-ms"));
}
END_TEST

START_TEST(bad_values_name_the_option)
{
    static const struct {
        const char *arg;
        const char *needle;
    } cases[] = {
        {"--max-running=abc", "--max-running"},
        {"--max-running=0", "out of range"},
        {"--max-running=-1", "--max-running"},
        {"--max-output-bytes=12XB", "--max-output-bytes"},
        {"--listen=nonsense", "--listen"},
        {"--listen=1.2.3.4:99999", "--listen"},
        {"--grpc-listen=nonsense", "--grpc-listen"},
        {"--grpc-listen=", "--grpc-listen"},
        {"--grpc-listen=OFF", "or off"},
        {"--log-format=xml", "--log-format"},
        {"--user=nobody", "--user"},
        {"--user=1000", "--user"},
        {"--user=1000:", "--user"},
        {"--user=4294967295:0", "--user"},
        {"--isolation=cgroups", "auto|cgroup|pidns|uid|pgid"},
        {"--uid-range=0:10", "--uid-range"},
        {"--uid-range=100000", "--uid-range"},
        {"--uid-range=100000:0", "--uid-range"},
        {"--uid-range=100000:70000", "--uid-range"},
        {"--uid-range=4294967000:1000", "--uid-range"},
        {"--pids-max=x", "--pids-max"},
        {"--memory-max=lots", "--memory-max"},
        {"--timeout-ms=0", "--timeout-ms"},
        {"--no-such-flag", "unknown option"},
        {"positional", "unexpected argument"},
    };
    char *envp[] = {NULL};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[] = {"sbxd", (char *)cases[i].arg, NULL};
        ck_assert_int_eq(parse(argv, envp), CONFIG_EXIT_2);
        ck_assert_msg(strstr(perr.msg, cases[i].needle), "%s -> %s", cases[i].arg, perr.msg);
        ck_assert_ptr_null(strchr(perr.msg, '\n'));
    }
    char *missing[] = {"sbxd", "--workspace", NULL};
    ck_assert_int_eq(parse(missing, envp), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "needs a value"));
}
END_TEST

START_TEST(bad_env_names_the_variable)
{
    char *argv[] = {"sbxd", NULL};
    char *envp[] = {"SBXD_MAX_BODY_BYTES=lots", NULL};
    ck_assert_int_eq(parse(argv, envp), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "--max-body-bytes"));
    ck_assert_ptr_nonnull(strstr(perr.msg, "SBXD_MAX_BODY_BYTES"));
}
END_TEST

START_TEST(help_and_version)
{
    char *envp[] = {NULL};
    char *help[] = {"sbxd", "--help", NULL};
    ck_assert_int_eq(parse(help, envp), CONFIG_EXIT_0);
    const char *flags[] = {"--listen",
                           "--grpc-listen",
                           "SBXD_GRPC_LISTEN",
                           "--workspace",
                           "--timeout-ms",
                           "--max-timeout-ms",
                           "--max-output-bytes",
                           "--max-body-bytes",
                           "--max-running",
                           "--shutdown-grace-ms",
                           "--log-format",
                           "--pass-env",
                           "SBXD_PASS_ENV",
                           "SANDBOX_BASE_DIR",
                           "SANDBOX_EXEC_TIMEOUT_SECONDS",
                           "--version"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        ck_assert_msg(strstr(outbuf, flags[i]), "--help lacks %s", flags[i]);
    char *version[] = {"sbxd", "--version", NULL};
    ck_assert_int_eq(parse(version, envp), CONFIG_EXIT_0);
    ck_assert_ptr_nonnull(strstr(outbuf, "sbxd " SBXD_VERSION));
}
END_TEST

START_TEST(sizes)
{
    uint64_t v;
    ck_assert_int_eq(config_parse_size("1048576", &v), 0);
    ck_assert_uint_eq(v, 1048576);
    ck_assert_int_eq(config_parse_size("64K", &v), 0);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(config_parse_size("1GiB", &v), 0);
    ck_assert_uint_eq(v, 1073741824ULL);
    ck_assert_int_eq(config_parse_size("5MB", &v), 0);
    ck_assert_uint_eq(v, 5000000);
    ck_assert_int_eq(config_parse_size("", &v), -1);
    ck_assert_int_eq(config_parse_size("1.5M", &v), -1);
    ck_assert_int_eq(config_parse_size("99999999999999999999", &v), -1);
    ck_assert_int_eq(config_parse_size("20000000000G", &v), -1);
}
END_TEST

/* --allow-origin and --allow-host (lists longer than 128 bytes); the older name of
 * --allow-origin, as a flag and as a variable. */
START_TEST(web_lists)
{
    char *argv0[] = {"sbxd", NULL};
    char *none[] = {NULL};
    ck_assert_int_eq(parse(argv0, none), CONFIG_RUN);
    ck_assert_str_eq(cfg.allow_origin, "");
    ck_assert_str_eq(cfg.allow_host, "");
    char *old_env[] = {"SBXD_MCP_ALLOW_ORIGIN=https://old.example", NULL};
    ck_assert_int_eq(parse(argv0, old_env), CONFIG_RUN);
    ck_assert_str_eq(cfg.allow_origin, "https://old.example");
    char *both_env[] = {"SBXD_MCP_ALLOW_ORIGIN=https://old.example",
                        "SBXD_ALLOW_ORIGIN=https://new.example", NULL};
    ck_assert_int_eq(parse(argv0, both_env), CONFIG_RUN);
    ck_assert_str_eq(cfg.allow_origin, "https://new.example");
    char *old_flag[] = {"sbxd", "--mcp-allow-origin", "https://app.example", NULL};
    ck_assert_int_eq(parse(old_flag, none), CONFIG_RUN);
    ck_assert_str_eq(cfg.allow_origin, "https://app.example");
    static char hosts[400];
    snprintf(hosts, sizeof(hosts), "--allow-host=");
    while (strlen(hosts) < 300)
        strcat(hosts, "sandbox.example.com,");
    char *long_list[] = {"sbxd", hosts, NULL};
    ck_assert_int_eq(parse(long_list, none), CONFIG_RUN);
    ck_assert_str_eq(cfg.allow_host, hosts + 13);
    static char huge[700];
    memset(huge, 'a', sizeof(huge) - 1);
    memcpy(huge, "--allow-host=", 13);
    char *too_long[] = {"sbxd", huge, NULL};
    ck_assert_int_eq(parse(too_long, none), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "--allow-host"));
}
END_TEST

/* --public-url: an http(s) URL or nothing; another scheme refused at start. */
START_TEST(public_url)
{
    char *none[] = {NULL};
    char *argv0[] = {"sbxd", NULL};
    ck_assert_int_eq(parse(argv0, none), CONFIG_RUN);
    ck_assert_str_eq(cfg.public_url, "");
    char *ok[] = {"sbxd", "--public-url", "https://sb.example/s1", NULL};
    ck_assert_int_eq(parse(ok, none), CONFIG_RUN);
    ck_assert_str_eq(cfg.public_url, "https://sb.example/s1");
    char *env[] = {"SBXD_PUBLIC_URL=http://127.0.0.1:8888", NULL};
    ck_assert_int_eq(parse(argv0, env), CONFIG_RUN);
    ck_assert_str_eq(cfg.public_url, "http://127.0.0.1:8888");
    char *bad[] = {"sbxd", "--public-url", "ftp://sb.example", NULL};
    ck_assert_int_eq(parse(bad, none), CONFIG_EXIT_2);
    ck_assert_ptr_nonnull(strstr(perr.msg, "not an http:// or https:// URL"));
}
END_TEST

START_TEST(listen_forms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    ck_assert_int_eq(config_parse_listen("127.0.0.1:8888", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET);
    ck_assert_int_eq(config_parse_listen("[::1]:0", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET6);
    ck_assert_int_eq(config_parse_listen(":8888", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET);
    ck_assert_int_eq(config_parse_listen("8888", &ss, &len), -1);
    ck_assert_int_eq(config_parse_listen("::1:80", &ss, &len), -1);
    ck_assert_int_eq(config_parse_listen("host:", &ss, &len), -1);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, flags_beat_env_beat_defaults);
    tcase_add_test(tc, workspace_env_order);
    tcase_add_test(tc, legacy_timeout_seconds);
    tcase_add_test(tc, max_timeout_below_the_default);
    tcase_add_test(tc, bad_values_name_the_option);
    tcase_add_test(tc, bad_env_names_the_variable);
    tcase_add_test(tc, help_and_version);
    tcase_add_test(tc, sizes);
    tcase_add_test(tc, listen_forms);
    tcase_add_test(tc, listen_several);
    tcase_add_test(tc, grpc_listen_forms);
    tcase_add_test(tc, workspace_baseline);
    tcase_add_test(tc, archive_limits);
    tcase_add_test(tc, web_lists);
    tcase_add_test(tc, public_url);
    suite_add_tcase(s, tc);
    return s;
}
