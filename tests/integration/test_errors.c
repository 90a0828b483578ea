/* Every refusal is a clear 4xx JSON error: {"code","message"}. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
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

/* POST body to path; asserts 400 INVALID_ARGUMENT whose message names the offset of `bad`
 * (where the body stops being UTF-8). */
static void expect_not_utf8(const char *path, const char *body, const char *bad)
{
    struct http_resp r;
    ck_assert_int_eq(http_request(&g_sbxd, "POST", path, NULL, body, strlen(body), 0, &r), 0);
    ck_assert_msg(r.status == 400, "%s: %ld %s", body, r.status, r.body);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    char want[64];
    snprintf(want, sizeof(want), "not valid UTF-8: byte 0x%02X at offset %zu", (uint8_t)*bad,
             (size_t)(strstr(body, bad) - body));
    ck_assert_msg(strstr(jstr(r.json, "message"), want), "want '%s' in %s", want, r.body);
    http_resp_free(&r);
}

static void assert_not_ran(const char *marker)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "{\"command\":\"test -e %s && echo ran || echo absent\"}", marker);
    cJSON *o = execute(&g_sbxd, cmd);
    ck_assert_str_eq(jstr(o, "stdout"), "absent\n");
    cJSON_Delete(o);
}

/* JSON is UTF-8 (RFC 8259). cJSON takes any bytes, so an ill-formed body used to run with
 * bytes nobody meant (an overlong '/' that a later decoder reads as a slash, a surrogate, a
 * character cut short): each is refused whole with where it goes wrong, and nothing runs. */
START_TEST(not_utf8_is_400_naming_the_offset)
{
    static const char *const cases[][2] = {
        {"{\"command\":\"touch u8-ran; echo \xC0\xAF\"}", "\xC0"},         /* overlong '/' */
        {"{\"command\":\"touch u8-ran; echo \xE0\x80\xAF\"}", "\xE0"},     /* overlong, 3 */
        {"{\"command\":\"touch u8-ran; echo \xF0\x80\x80\xAF\"}", "\xF0"}, /* overlong, 4 */
        {"{\"command\":\"touch u8-ran; echo \xED\xA0\x80\"}", "\xED"},     /* U+D800 */
        {"{\"command\":\"touch u8-ran; echo \xED\xBF\xBF\"}", "\xED"},     /* U+DFFF */
        {"{\"command\":\"touch u8-ran; echo \xF4\x90\x80\x80\"}", "\xF4"}, /* U+110000 */
        {"{\"command\":\"touch u8-ran; echo \xF5\x80\x80\x80\"}", "\xF5"}, /* F5..FF */
        {"{\"command\":\"touch u8-ran; echo \xFE\xFF\"}", "\xFE"},
        {"{\"command\":\"touch u8-ran; echo \xE6\x97\"}", "\xE6"}, /* cut short */
        {"{\"command\":\"touch u8-ran; echo \x80\"}", "\x80"},     /* stray */
        /* After valid multibyte text, in a key, in another field, after the JSON. */
        {"{\"command\":\"touch u8-ran; echo \xC3\xA9\",\"env\":{\"A\":\"\xE6\x97\xA5\xE6\"}}",
         "\xE6\""},
        {"{\"argv\":[\"touch\",\"u8-ran\"],\"c\xFFwd\":\".\"}", "\xFF"},
        {"{\"argv\":[\"touch\",\"u8-ran\"],\"stdin\":\"\xC1\xBF\"}", "\xC1"},
        {"{\"argv\":[\"touch\",\"u8-ran\"]} \xE2\x82", "\xE2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_not_utf8("/execute", cases[i][0], cases[i][1]);
    assert_not_ran("u8-ran");
}
END_TEST

/* The body: the legacy shape ("command" alone) answers a command it could not run
 * with 200, but a body that is not JSON text is no command at all: 400, as any malformed
 * body. */
START_TEST(not_utf8_in_a_legacy_command_is_400)
{
    expect_not_utf8("/execute", "{\"command\":\"\xFF\xFE\"}", "\xFF");
    expect_not_utf8("/execute", "{\"command\":\"touch u8-legacy \xED\xA0\x80\"}", "\xED");
    assert_not_ran("u8-legacy");
}
END_TEST

/* The routes of a background process that take JSON: starting one, its signal and resize. */
START_TEST(not_utf8_on_processes_routes_is_400)
{
    expect_not_utf8("/processes", "{\"command\":\"touch u8-bg; sleep 1 \xF8\x88\x80\x80\x80\"}",
                    "\xF8");
    expect_not_utf8("/processes", "{\"argv\":[\"touch\",\"u8-bg\"],\"pty\":{\"c\xC0\xAF\":1}}",
                    "\xC0");
    struct http_resp r;
    const char *start = "{\"argv\":[\"sleep\",\"30.9161\"],\"pty\":{}}";
    ck_assert_int_eq(http_request(&g_sbxd, "POST", "/processes", NULL, start, strlen(start), 0, &r),
                     0);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    char path[128];
    snprintf(path, sizeof(path), "/processes/%s/signal", jstr(r.json, "id"));
    http_resp_free(&r);
    expect_not_utf8(path, "{\"signal\":\"SIGTERM\xED\xA0\x80\"}", "\xED");
    expect_not_utf8(path, "{\"signal\":\"SIGTERM\",\"\xE2\x82\":1}", "\xE2");
    char *slash = strrchr(path, '/');
    snprintf(slash, sizeof(path) - (size_t)(slash - path), "/resize");
    expect_not_utf8(path, "{\"cols\":80,\"rows\":24,\"\xF4\x90\x80\x80\":1}", "\xF4");
    /* None of it reached the process: still running, and no stray start. */
    *slash = '\0';
    ck_assert_int_eq(http_request(&g_sbxd, "GET", path, NULL, NULL, 0, 0, &r), 0);
    ck_assert_str_eq(jstr(r.json, "status"), "running");
    http_resp_free(&r);
    ck_assert_int_eq(http_request(&g_sbxd, "DELETE", path, NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    http_resp_free(&r);
    assert_not_ran("u8-bg");
}
END_TEST

/* JSON's escapes can name a lone surrogate (\uD800) too, which no UTF-8 can carry: cJSON
 * refuses the text, so these are malformed JSON (400), the legacy shape included, and never
 * run with bytes made up for them. A pair is one character and runs. */
START_TEST(lone_surrogate_escapes_are_400)
{
    static const char *const bad[] = {
        "{\"command\":\"touch u8-sur; echo \\uD800\"}",
        "{\"command\":\"touch u8-sur; echo \\uDC00x\"}",
        "{\"command\":\"touch u8-sur; echo \\uD800\\u0041\"}",
        "{\"command\":\"touch u8-sur; echo \\uDBFF\\uDBFF\"}",
        "{\"argv\":[\"touch\",\"u8-sur\"],\"env\":{\"A\":\"\\uDFFF\"}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect("POST", "/execute", NULL, bad[i], 400, "INVALID_ARGUMENT");
    assert_not_ran("u8-sur");
    cJSON *o = execute(&g_sbxd, "{\"command\":\"printf %s \\uD83D\\uDE00\"}");
    ck_assert_str_eq(jstr(o, "stdout"), "\xF0\x9F\x98\x80");
    cJSON_Delete(o);
}
END_TEST

/* Well-formed multibyte text runs and comes back byte for byte: in the command, argv, env and
 * stdin, and in the legacy shape. (U+E9, U+65E5 U+672C, U+1F600, U+10FFFF.) */
START_TEST(valid_utf8_runs_and_round_trips)
{
#define TEXT "\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"
    cJSON *o = execute(&g_sbxd, "{\"command\":\"printf %s '" TEXT "'\"}");
    ck_assert_str_eq(jstr(o, "status"), "exited");
    ck_assert_str_eq(jstr(o, "stdout"), TEXT);
    cJSON_Delete(o);
    o = execute(&g_sbxd,
                "{\"argv\":[\"sh\",\"-c\",\"printf '%s|%s|' \\\"$1\\\" \\\"$X\\\"; cat\","
                "\"sh\",\"" TEXT "\"],\"env\":{\"X\":\"" TEXT "\"},\"stdin\":\"" TEXT "\"}");
    ck_assert_str_eq(jstr(o, "stdout"), TEXT "|" TEXT "|" TEXT);
    cJSON_Delete(o);
    o = execute(&g_sbxd, "{\"command\":\"echo " TEXT "\"}");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 0);
    ck_assert_str_eq(jstr(o, "stdout"), TEXT "\n");
    cJSON_Delete(o);
#undef TEXT
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

/* With --max-queued 0 nobody waits: past --max-running it is 429 at once (the queue's own
 * limits are the execute suite's). */
START_TEST(over_max_running_is_429)
{
    const char *args[] = {"--max-running", "2", "--max-queued", "0", NULL};
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
    tcase_add_test(tc, not_utf8_is_400_naming_the_offset);
    tcase_add_test(tc, not_utf8_in_a_legacy_command_is_400);
    tcase_add_test(tc, not_utf8_on_processes_routes_is_400);
    tcase_add_test(tc, lone_surrogate_escapes_are_400);
    tcase_add_test(tc, valid_utf8_runs_and_round_trips);
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
