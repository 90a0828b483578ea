/* What a web page may ask of sbxd: the Origin and Host rules and the JSON type (web.h). */
#include <check.h>

#include "sbxd/web.h"
#include "suites.h"

START_TEST(origins)
{
    /* No Origin: not a page's request. */
    ck_assert(web_origin_allowed("", NULL));
    /* Pages of this machine, on any port, either scheme. */
    static const char *const local[] = {"http://localhost",       "http://localhost:5173",
                                        "https://localhost:8443", "http://127.0.0.1",
                                        "http://127.0.0.1:8888",  "http://[::1]:3000",
                                        "HTTP://LOCALHOST",       "http://localhost/"};
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
        ck_assert_msg(web_origin_allowed("", local[i]), "%s", local[i]);
    /* Every other site, look-alikes, opaque origins, other schemes. */
    static const char *const foreign[] = {"http://evil.example",
                                          "http://localhost.evil.example",
                                          "http://127.0.0.1.evil.example",
                                          "http://localhostx",
                                          "http://[::1].evil.example",
                                          "null",
                                          "",
                                          "file://",
                                          "chrome-extension://abcdef",
                                          "http://10.0.0.7:8888"};
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
        ck_assert_msg(!web_origin_allowed("", foreign[i]), "%s", foreign[i]);
    /* --allow-origin: exact origins (a trailing slash and case aside), or any. */
    const char *allow = "https://app.example, http://ui.example:8080";
    ck_assert(web_origin_allowed(allow, "https://app.example"));
    ck_assert(web_origin_allowed(allow, "https://APP.example/"));
    ck_assert(web_origin_allowed(allow, "http://ui.example:8080"));
    ck_assert(!web_origin_allowed(allow, "http://app.example"));
    ck_assert(!web_origin_allowed(allow, "https://app.example.evil.example"));
    ck_assert(!web_origin_allowed(allow, "http://ui.example"));
    ck_assert(web_origin_allowed("*", "http://evil.example"));
}
END_TEST

START_TEST(hosts)
{
    /* None (HTTP/1.0), addresses, and names no page can be served under. */
    static const char *const ok[] = {NULL,
                                     "",
                                     "127.0.0.1",
                                     "127.0.0.1:8888",
                                     "10.0.0.7:8888",
                                     "[::1]:8888",
                                     "[fd00::7]",
                                     "::1",
                                     "localhost",
                                     "localhost:8888",
                                     "LOCALHOST.:8888",
                                     "app.localhost:3000",
                                     "sbxd",
                                     "sbx-1234:8888",
                                     "sbx-1234.team-a.svc",
                                     "sbx-1234.team-a.svc.cluster.local:8888",
                                     "SBX-1234.TEAM-A.SVC.CLUSTER.LOCAL.",
                                     "10-0-0-7.team-a.pod.cluster.local",
                                     "host.docker.internal:8888"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        ck_assert_msg(web_host_allowed("", ok[i]), "%s", ok[i] ? ok[i] : "(none)");
    /* Names a page's DNS can answer for, and what is no host at all. */
    static const char *const refused[] = {"evil.example",
                                          "rebind.evil.example:8888",
                                          "localhost.evil.example",
                                          "127.0.0.1.nip.io",
                                          "sbx.svc.evil.example",
                                          "x.cluster.local.evil.example",
                                          "localhost.example",
                                          "svc.example",
                                          "[::1",
                                          "[evil.example]:80",
                                          ".",
                                          ":8888"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_msg(!web_host_allowed("", refused[i]), "%s", refused[i]);
    /* --allow-host: names, ".suffix" for a name and everything under it, "*". */
    const char *allow = "sandbox.corp.example, .apps.example";
    ck_assert(web_host_allowed(allow, "sandbox.corp.example"));
    ck_assert(web_host_allowed(allow, "Sandbox.Corp.Example.:443"));
    ck_assert(web_host_allowed(allow, "apps.example"));
    ck_assert(web_host_allowed(allow, "a.b.apps.example:8080"));
    ck_assert(!web_host_allowed(allow, "xapps.example"));
    ck_assert(!web_host_allowed(allow, "apps.example.evil.example"));
    ck_assert(!web_host_allowed(allow, "other.corp.example"));
    ck_assert(web_host_allowed("*", "evil.example"));
}
END_TEST

START_TEST(json_types)
{
    /* Not a browser: curl -d's form type and no type are JSON too. */
    ck_assert(web_json_type_ok("application/json", false));
    ck_assert(web_json_type_ok("Application/JSON; charset=utf-8", false));
    ck_assert(web_json_type_ok("application/x-www-form-urlencoded", false));
    ck_assert(web_json_type_ok(NULL, false));
    ck_assert(web_json_type_ok("", false));
    ck_assert(!web_json_type_ok("text/plain", false));
    ck_assert(!web_json_type_ok("multipart/form-data; boundary=x", false));
    /* A browser: only what needs a preflight across origins. */
    ck_assert(web_json_type_ok("application/json", true));
    ck_assert(!web_json_type_ok("application/x-www-form-urlencoded", true));
    ck_assert(!web_json_type_ok(NULL, true));
    ck_assert(!web_json_type_ok("text/plain;charset=UTF-8", true));
}
END_TEST

Suite *web_suite(void)
{
    Suite *s = suite_create("web");
    TCase *tc = tcase_create("web");
    tcase_add_test(tc, origins);
    tcase_add_test(tc, hosts);
    tcase_add_test(tc, json_types);
    suite_add_tcase(s, tc);
    return s;
}
