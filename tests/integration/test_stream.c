/* Streamed /execute: NDJSON and SSE events while the command runs. */
#include <arpa/inet.h>
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* Everything until the server closes, chunked framing removed (the events' bytes only). */
static char *stream_read_all(int s, size_t *len)
{
    size_t n;
    char *raw = read_until_close(s, &n);
    char *p = strstr(raw, "\r\n\r\n");
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(strncmp(raw, "HTTP/1.1 200", 12) == 0, "%.200s", raw);
    p += 4;
    char *out = malloc(n + 1);
    size_t o = 0;
    for (;;) {
        unsigned long sz = strtoul(p, &p, 16);
        p = strstr(p, "\r\n");
        if (!p || sz == 0)
            break;
        p += 2;
        memcpy(out + o, p, sz);
        o += sz;
        p += sz + 2;
    }
    out[o] = '\0';
    free(raw);
    *len = o;
    return out;
}

static double real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

START_TEST(ndjson_events_in_order_with_one_exit)
{
    int s = raw_execute(&g_sbxd, "application/x-ndjson",
                        "{\"command\":\"echo a; echo b >&2; sleep 0.1; printf 'c\\\\n'; "
                        "printf 'd' >&2; exit 3\"}");
    size_t len;
    char *ev = stream_read_all(s, &len);
    close(s);
    char out[64] = "", err[64] = "";
    uint64_t out_off = 0, err_off = 0;
    int n = 0, exits = 0;
    bool exit_last = false;
    for (char *line = strtok(ev, "\n"); line; line = strtok(NULL, "\n"), n++) {
        cJSON *j = cJSON_Parse(line);
        ck_assert_msg(j, "not JSON: %s", line);
        const char *type = jstr(j, "type");
        exit_last = strcmp(type, "exit") == 0;
        if (n == 0) {
            ck_assert_str_eq(type, "start");
            ck_assert_int_eq(strlen(jstr(j, "id")), 24);
            ck_assert(jnum(j, "pid") > 0);
        } else if (strcmp(type, "stdout") == 0) {
            ck_assert_uint_eq((uint64_t)jnum(j, "offset"), out_off);
            out_off += strlen(jstr(j, "data"));
            strncat(out, jstr(j, "data"), sizeof(out) - strlen(out) - 1);
        } else if (strcmp(type, "stderr") == 0) {
            ck_assert_uint_eq((uint64_t)jnum(j, "offset"), err_off);
            err_off += strlen(jstr(j, "data"));
            strncat(err, jstr(j, "data"), sizeof(err) - strlen(err) - 1);
        } else if (exit_last) {
            exits++;
            ck_assert_str_eq(jstr(j, "status"), "exited");
            ck_assert_int_eq((int)jnum(j, "exit_code"), 3);
            ck_assert_int_eq((int)jnum(j, "stdout_bytes"), 4);
            ck_assert_int_eq((int)jnum(j, "stderr_bytes"), 3);
            ck_assert_ptr_null(cJSON_GetObjectItem(j, "stdout")); /* it went out as events */
        } else {
            ck_abort_msg("unexpected event %s", line);
        }
        cJSON_Delete(j);
    }
    ck_assert_str_eq(out, "a\nc\n");
    ck_assert_str_eq(err, "b\nd");
    ck_assert_int_eq(exits, 1);
    ck_assert(exit_last);
    free(ev);
}
END_TEST

/* Read s into buf (size bytes with the terminator) until what is in it; where it is. */
static char *recv_until(int s, char *buf, size_t size, const char *what)
{
    size_t n = 0;
    char *at = NULL;
    while (!at && n < size - 1) {
        ssize_t k = recv(s, buf + n, size - 1 - n, 0);
        ck_assert_int_gt(k, 0);
        n += (size_t)k;
        buf[n] = '\0';
        at = strstr(buf, what);
    }
    return at;
}

START_TEST(first_output_arrives_while_the_command_runs)
{
    /* The command prints the time, then keeps running for a second. */
    int s = raw_execute(&g_sbxd, "application/x-ndjson",
                        "{\"command\":\"date +%s%N; sleep 1; echo done\"}");
    char buf[8192];
    char *line = recv_until(s, buf, sizeof(buf), "{\"type\":\"stdout\"");
    double got_ms = real_ms();
    close(s);
    cJSON *j = cJSON_Parse(line);
    ck_assert_ptr_nonnull(j);
    double printed_ms = atof(jstr(j, "data")) / 1e6;
    cJSON_Delete(j);
    ck_assert_ptr_null(strstr(buf, "\"exit\"")); /* still running */
    double lag = got_ms - printed_ms;
    ck_assert_msg(lag >= -5 && lag < 50 * SLOW, "the event came %.1f ms after the write", lag);
}
END_TEST

START_TEST(utf8_is_never_split_and_sse_is_framed)
{
    int s = raw_execute(&g_sbxd, "text/event-stream",
                        "{\"command\":\"printf '\\\\303'; sleep 0.2; printf '\\\\251\\\\n'\"}");
    size_t len;
    char *ev = stream_read_all(s, &len);
    close(s);
    ck_assert_msg(strncmp(ev, "event: start\ndata: {", 20) == 0, "%.100s", ev);
    ck_assert_ptr_nonnull(
        strstr(ev, "event: stdout\ndata: {\"type\":\"stdout\",\"data\":\"\xc3\xa9\\n\""));
    ck_assert_ptr_null(strstr(ev, "\xef\xbf\xbd")); /* no U+FFFD */
    ck_assert_ptr_nonnull(strstr(ev, "event: exit\ndata: {\"type\":\"exit\""));
    ck_assert(len > 2 && strcmp(ev + len - 2, "\n\n") == 0);
    free(ev);
    /* base64 carries exact bytes. */
    s = raw_execute(&g_sbxd, "application/x-ndjson",
                    "{\"command\":\"printf '\\\\377'\",\"encoding\":\"base64\"}");
    ev = stream_read_all(s, &len);
    close(s);
    ck_assert_ptr_nonnull(strstr(ev, "{\"type\":\"stdout\",\"data\":\"/w==\",\"offset\":0}"));
    free(ev);
}
END_TEST

START_TEST(heartbeats_during_silence)
{
    struct daemon d;
    const char *args[] = {"--heartbeat-ms", "100", NULL};
    daemon_start(&d, args, NULL);
    double t0 = now_ms();
    int s = raw_execute(&d, "application/x-ndjson", "{\"command\":\"sleep 0.55; echo x\"}");
    size_t len;
    char *ev = stream_read_all(s, &len);
    double took = now_ms() - t0;
    close(s);
    int beats = 0;
    for (char *p = ev; (p = strstr(p, "{\"type\":\"heartbeat\"}")); p++)
        beats++;
    /* One per 100 ms of silence: at least the 0.55 s sleep's worth, at most the whole. */
    ck_assert_msg(beats >= 3 && beats <= (int)(took / 100) + 1, "%d heartbeats in %.0f ms: %s",
                  beats, took, ev);
    free(ev);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(disconnect_kills_the_streamed_command)
{
    int s = raw_execute(&g_sbxd, "application/x-ndjson",
                        "{\"command\":\"sleep 1000.41 & setsid sleep 1000.41 & wait\"}");
    char buf[1024];
    ck_assert_int_gt(recv(s, buf, sizeof(buf), 0), 0); /* the start event */
    /* The shell (its command line has the marker too) starts its two children a moment
     * after the start event. */
    int seen = 0;
    for (int i = 0; i < 200 && (seen = daemon_procs_with(&g_sbxd, "sleep 1000.41")) < 3; i++)
        usleep(10000);
    ck_assert_int_eq(seen, 3);
    close(s);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 1000.41", 3000), 0);
}
END_TEST

/* The value of one series of sbxd's /metrics (name{labels} as printed); -1: absent. */
static double metrics_series(const char *series)
{
    struct http_resp r;
    ck_assert_int_eq(http_request(&g_sbxd, "GET", "/metrics", NULL, NULL, 0, 0, &r), 0);
    ck_assert_int_eq(r.status, 200);
    size_t n = strlen(series);
    double v = -1;
    for (const char *p = r.body; p && *p && v < 0; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            v = strtod(p + n + 1, NULL);
    http_resp_free(&r);
    return v;
}

/* How many lines of sbxd's log hold needle. */
static int log_lines_with(const char *needle)
{
    char *log = daemon_log_read(&g_sbxd);
    int k = 0;
    for (const char *p = log; (p = strstr(p, needle)); p += strlen(needle))
        k++;
    free(log);
    return k;
}

/* A client that stops reading and then hangs up mid-stream (sbxd is then waiting to send,
 * not waiting on the command): its command is stopped, and it is audited (canceled) and
 * counted in /metrics as any command is, once. */
START_TEST(abandoned_stream_is_audited_and_counted_once)
{
    const char *series =
        "sbxd_executions_total{front=\"rest\",mode=\"stream\",status=\"canceled\"}";
    double before = metrics_series(series);
    ck_assert_double_ge(before, 0);
    int s = raw_execute(&g_sbxd, "application/x-ndjson", "{\"command\":\"yes abandoned-1000.53\"}");
    char buf[4096];
    ck_assert_ptr_nonnull(recv_until(s, buf, sizeof(buf), "\"pid\":"));
    char *id = strstr(buf, "\"type\":\"start\",\"id\":\"");
    ck_assert_ptr_nonnull(id);
    id += 21;
    char needle[128];
    snprintf(needle, sizeof(needle), "\"id\":\"%.*s\"", (int)(strchr(id, '"') - id), id);
    /* Nothing more is read: the socket's buffers fill and sbxd's send waits. Then a reset
     * (unread bytes at the close). */
    usleep(200000);
    close(s);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "abandoned-1000.53", 3000), 0);
    double after = before;
    for (int i = 0; i < 300 && after == before; i++) {
        usleep(10000);
        after = metrics_series(series);
    }
    ck_assert_double_eq(after, before + 1);
    ck_assert_int_eq(log_lines_with(needle), 1);
    char *log = daemon_log_read(&g_sbxd);
    char *line = strstr(log, needle);
    ck_assert_ptr_nonnull(strstr(line, "\"status\":\"canceled\""));
    ck_assert_ptr_nonnull(strstr(line, "\"front\":\"rest\""));
    free(log);
}
END_TEST

/* Bytes of a stream, counted (and its last bytes kept in tail) without keeping it whole. */
static size_t stream_drain(int s, char *tail, size_t tailsz)
{
    char buf[65536];
    size_t total = 0, have = 0;
    ssize_t k;
    tail[0] = '\0';
    while ((k = recv(s, buf, sizeof(buf), 0)) > 0) {
        total += (size_t)k;
        size_t add = (size_t)k < tailsz - 1 ? (size_t)k : tailsz - 1;
        if (have + add > tailsz - 1) { /* keep the newest: drop from the front */
            size_t drop = have + add - (tailsz - 1);
            memmove(tail, tail + drop, have - drop);
            have -= drop;
        }
        memcpy(tail + have, buf + k - add, add);
        have += add;
        tail[have] = '\0';
    }
    return total;
}

START_TEST(a_large_stream_keeps_memory_flat)
{
    long base = daemon_rss_kb(&g_sbxd);
    rss_sampling_start(&g_sbxd);
    int s = raw_execute(&g_sbxd, "application/x-ndjson",
                        "{\"command\":\"yes 0123456789abcdef | head -c 200000000\"}");
    char tail[4096];
    size_t total = stream_drain(s, tail, sizeof(tail));
    close(s);
    long b2;
    long peak = rss_sampling_stop(&b2);
    ck_assert_msg(total > 200000000, "%zu bytes", total);
    ck_assert_ptr_nonnull(strstr(tail, "\"stdout_bytes\":200000000"));
    ck_assert_msg(peak - base < 8 * 1024, "RSS grew by %ld KiB", peak - base);
}
END_TEST

/* A streamed command's stdout is a 1 MiB pipe (a fast writer runs in long bursts), for at
 * most 16 commands at a time (a pipe's size counts against sbxd's pipe budget even empty); a
 * command whose output is collected keeps the default. */
#define WIDE_PIPE  1048576
#define WIDE_PIPES 16

START_TEST(streamed_stdout_gets_a_wide_pipe_within_a_bound)
{
    daemon_install_probe(&g_sbxd);
    cJSON *r = execute(&g_sbxd, "{\"argv\":[\"./sbxd-probe\",\"pipe-size\"]}");
    int sync_size = atoi(jstr(r, "stdout"));
    cJSON_Delete(r);
    ck_assert_msg(sync_size > 0 && sync_size < WIDE_PIPE, "collected: %d", sync_size);
    const char *hold = "{\"command\":\"./sbxd-probe pipe-size; sleep 3\"}";
    int s[WIDE_PIPES + 1];
    for (int i = 0; i <= WIDE_PIPES; i++)
        s[i] = raw_execute(&g_sbxd, "application/x-ndjson", hold);
    int wide = 0, narrow = 0;
    for (int i = 0; i <= WIDE_PIPES; i++) {
        char *out = read_until_close(s[i], NULL);
        close(s[i]);
        if (strstr(out, "\"data\":\"1048576\\n\""))
            wide++;
        else if (strstr(out, "\"type\":\"stdout\""))
            narrow++;
        ck_assert_msg(strstr(out, "\"type\":\"exit\""), "%s", out);
        free(out);
    }
    if (!wide && under_gvisor()) {
        gvisor_skip("wide stream pipes", "F_SETPIPE_SZ is refused there");
        return;
    }
    ck_assert_int_eq(wide, WIDE_PIPES);
    ck_assert_int_eq(narrow, 1);
    /* Given back when their commands ended. */
    int again =
        raw_execute(&g_sbxd, "application/x-ndjson", "{\"argv\":[\"./sbxd-probe\",\"pipe-size\"]}");
    char *out = read_until_close(again, NULL);
    close(again);
    ck_assert_msg(strstr(out, "\"data\":\"1048576\\n\""), "%s", out);
    free(out);
}
END_TEST

START_TEST(a_slow_reader_blocks_the_command_not_sbxd)
{
    long base = daemon_rss_kb(&g_sbxd);
    int s = raw_execute(&g_sbxd, "application/x-ndjson",
                        "{\"command\":\"yes sbxd-slow-reader-41 | head -c 500000000\"}");
    /* Not reading for a while: the command fills the pipes and the socket, and waits. */
    usleep(1000000);
    long mid = daemon_rss_kb(&g_sbxd);
    ck_assert_msg(mid - base < 8 * 1024, "RSS grew by %ld KiB while the client read nothing",
                  mid - base);
    ck_assert_int_ge(daemon_procs_with(&g_sbxd, "sbxd-slow-reader-41"), 1);
    close(s);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sbxd-slow-reader-41", 3000), 0);
}
END_TEST

START_TEST(sigterm_ends_streams_with_their_exit_event)
{
    struct daemon d;
    /* Long enough for the short command to finish even under gVisor, not for the long one. */
    const char *args[] = {"--shutdown-grace-ms", "1500", NULL};
    daemon_start(&d, args, NULL);
    int fin = raw_execute(&d, "application/x-ndjson", "{\"command\":\"sleep 0.3; echo done\"}");
    int cut = raw_execute(&d, "application/x-ndjson", "{\"command\":\"sleep 100\"}");
    char buf[512];
    /* Both started (their start events are in), then SIGTERM. */
    ck_assert_int_gt(recv(fin, buf, sizeof(buf), 0), 0);
    ck_assert_int_gt(recv(cut, buf, sizeof(buf), 0), 0);
    kill(d.pid, SIGTERM);
    char tail[4096];
    stream_drain(fin, tail, sizeof(tail));
    ck_assert_msg(strstr(tail, "\"type\":\"exit\"") && strstr(tail, "\"status\":\"exited\""), "%s",
                  tail);
    stream_drain(cut, tail, sizeof(tail));
    ck_assert_msg(strstr(tail, "\"type\":\"exit\"") && strstr(tail, "\"status\":\"canceled\""),
                  "%s", tail);
    close(fin);
    close(cut);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(timeout_holds_while_the_client_reads_nothing)
{
    /* The command fills its pipe and the socket; the client never reads, yet keeps the
     * connection. The timeout must still end the command (the watchdog). */
    int s = raw_execute(&g_sbxd, "application/x-ndjson",
                        "{\"command\":\"yes sbxd-stalled-reader-43\",\"timeout_ms\":300}");
    int seen = 0;
    for (int i = 0; i < 200 && (seen = daemon_procs_with(&g_sbxd, "sbxd-stalled-reader-43")) < 1;
         i++)
        usleep(10000);
    ck_assert_int_ge(seen, 1);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sbxd-stalled-reader-43", 3000), 0);
    /* What the client reads in the end finishes with the timeout. */
    char tail[4096];
    stream_drain(s, tail, sizeof(tail));
    close(s);
    ck_assert_msg(strstr(tail, "\"status\":\"timeout\""), "%s", tail);
}
END_TEST

Suite *stream_suite(void)
{
    Suite *s = suite_create("stream");
    TCase *tc = tcase_create("ndjson-sse");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, ndjson_events_in_order_with_one_exit);
    tcase_add_test(tc, first_output_arrives_while_the_command_runs);
    tcase_add_test(tc, utf8_is_never_split_and_sse_is_framed);
    tcase_add_test(tc, heartbeats_during_silence);
    tcase_add_test(tc, disconnect_kills_the_streamed_command);
    tcase_add_test(tc, abandoned_stream_is_audited_and_counted_once);
    tcase_add_test(tc, a_large_stream_keeps_memory_flat);
    tcase_add_test(tc, a_slow_reader_blocks_the_command_not_sbxd);
    tcase_add_test(tc, streamed_stdout_gets_a_wide_pipe_within_a_bound);
    tcase_add_test(tc, sigterm_ends_streams_with_their_exit_event);
    tcase_add_test(tc, timeout_holds_while_the_client_reads_nothing);
    suite_add_tcase(s, tc);
    return s;
}
