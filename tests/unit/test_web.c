/* What a web page may ask of sbxd: the Origin and Host rules, simple POSTs, the JSON type
 * (web_internal.h). */
#include <check.h>

#include "web_internal.h"
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

START_TEST(simple_posts)
{
    /* A browser is one by Origin or Sec-Fetch-Site; Node's fetch adds Sec-Fetch-Mode only. */
    ck_assert(web_is_browser("http://localhost:3000", NULL));
    ck_assert(web_is_browser(NULL, "cross-site"));
    ck_assert(!web_is_browser(NULL, NULL));
    /* What a page posts without asking first. */
    ck_assert(web_simple_post("POST", NULL));
    ck_assert(web_simple_post("POST", ""));
    ck_assert(web_simple_post("POST", "application/x-www-form-urlencoded"));
    ck_assert(web_simple_post("POST", "Multipart/Form-Data; boundary=----x"));
    ck_assert(web_simple_post("POST", "text/plain;charset=UTF-8"));
    /* What needs a preflight, and reads. */
    ck_assert(!web_simple_post("POST", "application/json"));
    ck_assert(!web_simple_post("POST", "application/octet-stream"));
    ck_assert(!web_simple_post("POST", "text/plainx"));
    ck_assert(!web_simple_post("PUT", "text/plain"));
    ck_assert(!web_simple_post("DELETE", NULL));
    ck_assert(!web_simple_post("GET", NULL));
    /* JSON bodies: curl -d's form type and no type are taken (from a client that is no
     * browser: a browser's are refused before, as simple posts). */
    ck_assert(web_json_type_ok("application/json"));
    ck_assert(web_json_type_ok("Application/JSON; charset=utf-8"));
    ck_assert(web_json_type_ok("application/x-www-form-urlencoded"));
    ck_assert(web_json_type_ok(NULL));
    ck_assert(web_json_type_ok(""));
    ck_assert(!web_json_type_ok("text/plain"));
    ck_assert(!web_json_type_ok("multipart/form-data; boundary=x"));
}
END_TEST

Suite *web_suite(void)
{
    Suite *s = suite_create("web");
    TCase *tc = tcase_create("web");
    tcase_add_test(tc, origins);
    tcase_add_test(tc, hosts);
    tcase_add_test(tc, simple_posts);
    suite_add_tcase(s, tc);
    return s;
}
