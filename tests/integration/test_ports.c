/*
 * What commands serve, reached through sbxd, in the integration binary so that the gvisor
 * tier runs it inside gVisor too (where the socket tables come from /proc/net/tcp and a
 * process's children from its parents): GET /ports names a command's server and its process,
 * the proxy reaches it, and refuses sbxd's own port, a code context's kernel's and a port
 * nothing listens on. The whole of the proxy and the terminal is the net tier's (tests/net).
 */
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* The /ports entry of port, or NULL (within r's JSON). */
static const cJSON *listed(const struct http_resp *r, int port)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(r->json, "ports"))
    {
        if ((int)jnum(p, "port") == port)
            return p;
    }
    return NULL;
}

START_TEST(ports_and_the_proxy_reach_a_command_server_only)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    int port = loopback_free_port();
    char body[256], path[64];
    snprintf(body, sizeof(body),
             "{\"command\":\"echo served > index.html; exec python3 -m http.server %d "
             "--bind 127.0.0.1\"}",
             port);
    struct http_resp r;
    ck_assert_int_eq(
        http_request(&d, "POST", "/processes", "application/json", body, strlen(body), 0, &r), 0);
    ck_assert_int_eq(r.status, 201);
    char id[32];
    snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
    http_resp_free(&r);
    /* Listed, with the background process it belongs to, once it listens. */
    const cJSON *mine = NULL;
    double end = now_ms() + 15000 * SLOW;
    while (!mine && now_ms() < end) {
        ck_assert_int_eq(http_request(&d, "GET", "/ports", NULL, NULL, 0, 0, &r), 0);
        ck_assert_int_eq(r.status, 200);
        if ((mine = listed(&r, port)) != NULL) {
            ck_assert_str_eq(jstr(mine, "process_id"), id);
            ck_assert_msg(cJSON_IsTrue(cJSON_GetObjectItem(mine, "proxy")), "%s", r.body);
            const cJSON *own = listed(&r, d.port);
            ck_assert_msg(own && cJSON_IsTrue(cJSON_GetObjectItem(own, "sbxd")) &&
                              cJSON_IsFalse(cJSON_GetObjectItem(own, "proxy")),
                          "%s", r.body);
        }
        http_resp_free(&r);
        if (!mine)
            usleep(50000);
    }
    ck_assert_msg(mine, "port %d never listed", port);
    /* Through the proxy. */
    snprintf(path, sizeof(path), "/proxy/%d/index.html", port);
    ck_assert_int_eq(http_request(&d, "GET", path, NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "served\n");
    http_resp_free(&r);
    /* Never sbxd's own port. */
    snprintf(path, sizeof(path), "/proxy/%d/healthz", d.port);
    ck_assert_int_eq(http_request(&d, "GET", path, NULL, NULL, 0, 0, &r), 0);
    assert_error(&r, 403, "PERMISSION_DENIED");
    ck_assert_ptr_nonnull(strstr(r.body, "sbxd's own"));
    http_resp_free(&r);
    /* Nothing listening: 502, once the server is gone. */
    snprintf(path, sizeof(path), "/processes/%s", id);
    ck_assert_int_eq(http_request(&d, "DELETE", path, NULL, NULL, 0, 0, &r), 0);
    http_resp_free(&r);
    snprintf(path, sizeof(path), "/proxy/%d/", port);
    ck_assert_int_eq(http_request(&d, "GET", path, NULL, NULL, 0, 0, &r), 0);
    assert_error(&r, 502, "BAD_GATEWAY");
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* An app slow to accept: gVisor lists a connection in /proc/net/tcp only once it is accepted,
 * so the check after the connect cannot find its far end there (it was 403 "went away"). */
START_TEST(an_app_slow_to_accept_is_reached)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    int port = loopback_free_port();
    char body[512], path[64];
    snprintf(body, sizeof(body),
             "{\"command\":\"exec python3 -c \\\"import socket, time\\n"
             "s = socket.socket()\\ns.bind(('127.0.0.1', %d))\\ns.listen(8)\\n"
             "while True:\\n    time.sleep(0.5)\\n    c, _ = s.accept()\\n    c.recv(65536)\\n"
             "    c.sendall(b'HTTP/1.1 200 OK\\\\r\\\\nContent-Length: 4\\\\r\\\\n"
             "Connection: close\\\\r\\\\n\\\\r\\\\nslow')\\n    c.close()\\\"\"}",
             port);
    struct http_resp r;
    ck_assert_int_eq(
        http_request(&d, "POST", "/processes", "application/json", body, strlen(body), 0, &r), 0);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    snprintf(path, sizeof(path), "/proxy/%d/", port);
    long status = 0;
    double end = now_ms() + 15000 * SLOW;
    while (status != 200 && now_ms() < end) {
        ck_assert_int_eq(http_request(&d, "GET", path, NULL, NULL, 0, 0, &r), 0);
        status = r.status;
        if (status == 200)
            ck_assert_str_eq(r.body, "slow");
        else
            ck_assert_msg(status == 502, "%ld %s", status, r.body); /* not listening yet */
        http_resp_free(&r);
        if (status != 200)
            usleep(100000);
    }
    ck_assert_int_eq(status, 200);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(a_code_context_kernel_port_is_refused)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    struct http_resp r;
    const char *spec = "{\"language\":\"python\"}";
    ck_assert_int_eq(
        http_request(&d, "POST", "/contexts", "application/json", spec, strlen(spec), 60000, &r),
        0);
    if (r.status != 201) {
        http_resp_free(&r);
        ck_assert(daemon_stop_clean(&d, 10000));
        return; /* no Python kernel on this machine: the contexts suite says so */
    }
    char path[96], code[256], ctx[96];
    snprintf(path, sizeof(path), "/contexts/%s/execute", jstr(r.json, "id"));
    snprintf(ctx, sizeof(ctx), "/contexts/%s", jstr(r.json, "id"));
    http_resp_free(&r);
    int port = loopback_free_port();
    snprintf(code, sizeof(code),
             "{\"code\":\"import socket\\ns = socket.socket()\\ns.bind(('127.0.0.1', %d))\\n"
             "s.listen()\"}",
             port);
    ck_assert_int_eq(
        http_request(&d, "POST", path, "application/json", code, strlen(code), 60000, &r), 0);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    snprintf(path, sizeof(path), "/proxy/%d/", port);
    ck_assert_int_eq(http_request(&d, "GET", path, NULL, NULL, 0, 0, &r), 0);
    assert_error(&r, 403, "PERMISSION_DENIED");
    ck_assert_msg(strstr(r.body, "code context"), "%s", r.body);
    http_resp_free(&r);
    /* The kernel ended before the workspace goes (it writes its profile there as it stops). */
    ck_assert_int_eq(http_request(&d, "DELETE", ctx, NULL, NULL, 0, 30000, &r), 0);
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 15000));
}
END_TEST

Suite *ports_suite(void)
{
    Suite *s = suite_create("ports");
    TCase *tc = tcase_create("proxy");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ports_and_the_proxy_reach_a_command_server_only);
    tcase_add_test(tc, an_app_slow_to_accept_is_reached);
    tcase_add_test(tc, a_code_context_kernel_port_is_refused);
    suite_add_tcase(s, tc);
    return s;
}
