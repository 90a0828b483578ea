/* Every refusal is a clear 4xx JSON error: {"code","message"}. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

static void expect(const char *method, const char *path, const char *ctype, const char *body,
                   long status, const char *code)
{
    struct http_resp r;
    ck_assert_int_eq(
        http_request(&g_sbxd, method, path, ctype, body, body ? strlen(body) : 0, 0, &r), 0);
    assert_error(&r, status, code);
    http_resp_free(&r);
}

START_TEST(bad_json_is_400)
{
    expect("POST", "/execute", NULL, "{\"command\":", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "[]", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "{\"command\":[\"ls\"]}", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "{\"command\":\"ls\",\"argv\":[\"ls\"]}", 400,
           "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "{\"cwd\":\".\"}", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "{\"argv\":[]}", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL,
           "{\"command\":\"echo a\\u0000; rm -rf x\",\"timeout_ms\":1000}", 400,
           "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "{\"command\":\"ls\",\"timeout\":5}", 400, "INVALID_ARGUMENT");
    expect("POST", "/execute", NULL, "{\"command\":\"ls\",\"timeout_ms\":999999999999}", 400,
           "INVALID_ARGUMENT");
}
END_TEST

/* A NUL would cut the command short ("echo a", then "; rm -rf x" never seen): it is never
 * run. The legacy shape ("command" alone) is answered as the python runtime answers a command
 * it could not run: 200, exit_code 1, the reason in stderr. */
START_TEST(nul_in_a_legacy_command_is_not_run)
{
    struct http_resp r;
    const char *b = "{\"command\":\"echo a\\u0000; touch nul-ran\"}";
    ck_assert_int_eq(http_request(&g_sbxd, "POST", "/execute", NULL, b, strlen(b), 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq((int)jnum(r.json, "exit_code"), 1);
    ck_assert_str_eq(jstr(r.json, "stdout"), "");
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "stderr"), "Failed to execute command: "));
    ck_assert_str_eq(jstr(r.json, "status"), "failed_to_start");
    http_resp_free(&r);
    cJSON *ls = execute(&g_sbxd, "{\"command\":\"test -e nul-ran && echo ran || echo absent\"}");
    ck_assert_str_eq(jstr(ls, "stdout"), "absent\n");
    cJSON_Delete(ls);
}
END_TEST

START_TEST(unknown_field_message_names_it)
{
    struct http_resp r;
    const char *b = "{\"comand\":\"ls\"}";
    http_request(&g_sbxd, "POST", "/execute", NULL, b, strlen(b), 0, &r);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    ck_assert_ptr_nonnull(strstr(jstr(r.json, "message"), "comand"));
    http_resp_free(&r);
}
END_TEST

START_TEST(oversize_body_is_413)
{
    size_t n = 1048576 + 16;
    char *b = malloc(n + 1);
    memset(b, ' ', n);
    memcpy(b, "{\"command\":\"true\"", 17);
    b[n - 1] = '}';
    b[n] = '\0';
    struct http_resp r;
    http_request(&g_sbxd, "POST", "/execute", NULL, b, n, 0, &r);
    assert_error(&r, 413, "PAYLOAD_TOO_LARGE");
    http_resp_free(&r);
    free(b);
}
END_TEST

/* A chunked body has no Content-Length to refuse up front: it must be cut off as it grows. */
START_TEST(oversize_chunked_body_is_413)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_sbxd.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    const char *head = "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    ck_assert_int_gt(send(s, head, strlen(head), MSG_NOSIGNAL), 0);
    char chunk[65536 + 16];
    int hl = sprintf(chunk, "10000\r\n");
    memset(chunk + hl, ' ', 65536);
    memcpy(chunk + hl + 65536, "\r\n", 2);
    for (int i = 0; i < 40; i++) /* 2.5 MB offered against a 1 MiB limit */
        if (send(s, chunk, (size_t)hl + 65536 + 2, MSG_NOSIGNAL) < 0)
            break;
    send(s, "0\r\n\r\n", 5, MSG_NOSIGNAL);
    char resp[4096] = "";
    size_t got = 0;
    ssize_t k;
    while (got < sizeof(resp) - 1 && (k = recv(s, resp + got, sizeof(resp) - 1 - got, 0)) > 0)
        got += (size_t)k;
    resp[got] = '\0';
    close(s);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 413", 12) == 0, "got: %.200s", resp);
    ck_assert_ptr_nonnull(strstr(resp, "PAYLOAD_TOO_LARGE"));
}
END_TEST

START_TEST(wrong_method_is_405_with_allow)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", "/execute", NULL, NULL, 0, 0, &r);
    assert_error(&r, 405, "METHOD_NOT_ALLOWED");
    ck_assert_ptr_nonnull(strstr(r.headers, "Allow: POST"));
    http_resp_free(&r);
    http_request(&g_sbxd, "DELETE", "/healthz", NULL, NULL, 0, 0, &r);
    assert_error(&r, 405, "METHOD_NOT_ALLOWED");
    ck_assert_ptr_nonnull(strstr(r.headers, "Allow: GET, HEAD"));
    http_resp_free(&r);
}
END_TEST

START_TEST(wrong_content_type_is_415)
{
    expect("POST", "/execute", "text/plain", "{\"command\":\"true\"}", 415,
           "UNSUPPORTED_MEDIA_TYPE");
    expect("POST", "/execute", "multipart/form-data; boundary=x", "{}", 415,
           "UNSUPPORTED_MEDIA_TYPE");
    /* `curl -d` sends a form type: the documented one-liner must work. */
    struct http_resp r;
    const char *b = "{\"command\":\"echo ok\"}";
    http_request(&g_sbxd, "POST", "/execute", "application/x-www-form-urlencoded", b, strlen(b), 0,
                 &r);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    http_request(&g_sbxd, "POST", "/execute", "application/json; charset=utf-8", b, strlen(b), 0,
                 &r);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
}
END_TEST

START_TEST(unknown_route_is_404)
{
    expect("GET", "/nope", NULL, NULL, 404, "NOT_FOUND");
    expect("POST", "/execute/extra", NULL, "{}", 404, "NOT_FOUND");
}
END_TEST

static struct daemon small;

static void *slow_request(void *arg)
{
    (void)arg;
    struct http_resp r;
    const char *b = "{\"command\":\"sleep 1\"}";
    http_request(&small, "POST", "/execute", NULL, b, strlen(b), 10000, &r);
    long st = r.status;
    http_resp_free(&r);
    return (void *)st;
}

START_TEST(over_max_running_is_429)
{
    const char *args[] = {"--max-running", "2", NULL};
    daemon_start(&small, args, NULL);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, slow_request, NULL);
    /* Wait until both are running. */
    for (int i = 0; i < 200; i++) {
        struct http_resp h;
        http_request(&small, "GET", "/healthz", NULL, NULL, 0, 0, &h);
        int running = (int)jnum(h.json, "running");
        http_resp_free(&h);
        if (running == 2)
            break;
        usleep(5000);
    }
    struct http_resp r;
    const char *b = "{\"command\":\"true\"}";
    http_request(&small, "POST", "/execute", NULL, b, strlen(b), 0, &r);
    assert_error(&r, 429, "RESOURCE_EXHAUSTED");
    ck_assert_ptr_nonnull(strstr(r.headers, "Retry-After: 1"));
    http_resp_free(&r);
    for (int i = 0; i < 2; i++) {
        void *st;
        pthread_join(t[i], &st);
        ck_assert_int_eq((long)st, 200);
    }
    /* Capacity comes back. */
    http_request(&small, "POST", "/execute", NULL, b, strlen(b), 0, &r);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&small, 10000));
}
END_TEST

Suite *errors_suite(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("4xx");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_json_is_400);
    tcase_add_test(tc, nul_in_a_legacy_command_is_not_run);
    tcase_add_test(tc, unknown_field_message_names_it);
    tcase_add_test(tc, oversize_body_is_413);
    tcase_add_test(tc, oversize_chunked_body_is_413);
    tcase_add_test(tc, wrong_method_is_405_with_allow);
    tcase_add_test(tc, wrong_content_type_is_415);
    tcase_add_test(tc, unknown_route_is_404);
    tcase_add_test(tc, over_max_running_is_429);
    suite_add_tcase(s, tc);
    return s;
}
