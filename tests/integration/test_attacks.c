/*
 * Attacks: each test replays an attack of a hostile command or a hostile client against a
 * real sbxd and asserts it fails (docs/security.md lists them with the layer that stops
 * each). The hostile command is `sbxd-probe attack ...` (attack.c), copied into the
 * workspace. Tests that depend on the containment backend run once per backend the host can
 * give (pidns, uid, pgid; the cgroup backend kills by cgroup.kill, with no helper a command
 * could reach, and is covered in the VM tier).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

static const char *const backends[] = {"pidns", "uid", "pgid"};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

/* The line "<what> <result>" of a probe's output, its result into buf ("" if absent). */
static const char *line_of(const char *out, const char *what, char *buf, size_t n)
{
    char k[96];
    snprintf(k, sizeof(k), "%s ", what);
    buf[0] = '\0';
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, k, strlen(k)) == 0) {
            p += strlen(k);
            snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
            break;
        }
    return buf;
}

static void start_backend(struct daemon *d, const char *backend)
{
    const char *args[] = {"--isolation", backend, "--shutdown-grace-ms", "2000", NULL};
    daemon_start(d, args, NULL);
    daemon_install_probe(d);
}

/* A request with a deadline: asserts it was answered with `status` within ms. */
static cJSON *request_within(const struct daemon *d, const char *method, const char *path,
                             const char *body, long status, double ms, const char *what)
{
    struct http_resp r;
    double t0 = now_ms();
    int rc =
        http_request(d, method, path, NULL, body, body ? strlen(body) : 0, (long)(ms * SLOW), &r);
    double took = now_ms() - t0;
    ck_assert_msg(rc == 0, "%s: no answer within %.0f ms", what, ms * SLOW);
    ck_assert_msg(r.status == status, "%s: HTTP %ld (%s)", what, r.status, r.body);
    cJSON *j = r.json;
    r.json = NULL;
    http_resp_free(&r);
    (void)took;
    return j;
}

/* POST /processes: the new process's id into id. */
static void bg_start(const struct daemon *d, const char *body, char *id, size_t n)
{
    cJSON *j = request_within(d, "POST", "/processes", body, 201, 10000, "POST /processes");
    snprintf(id, n, "%s", jstr(j, "id"));
    cJSON_Delete(j);
}

/* ------------------------------------------------------------------------------------ */
/* A command with "network": false must not open any socket but AF_UNIX.                  */

START_TEST(network_false_refuses_high_bit_socket_families)
{
    daemon_install_probe(&g_sbxd);
    char body[256], v[64];
    snprintf(body, sizeof(body),
             "{\"argv\":[\"./sbxd-probe\",\"attack\",\"socket\",\"%d\"],\"network\":false}",
             g_sbxd.port);
    cJSON *r = execute(&g_sbxd, body);
    const char *out = jstr(r, "stdout");
    /* The attack: 0x100000000|AF_INET is AF_INET to the kernel, and used to pass the filter
     * (reaching sbxd's own API from a command denied the network). */
    ck_assert_msg(!strstr(out, "reached"), "a network:false command reached sbxd:\n%s", out);
    static const char *refused[] = {
        "socket_highbit_inet", "socket_inet",         "socket_highbit_inet6",   "socket_netlink",
        "socket_vsock",        "socket_highbit_unix", "socketpair_highbit_inet"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_msg(strcmp(line_of(out, refused[i], v, sizeof(v)), "EACCES") == 0,
                      "%s gave '%s', not EACCES:\n%s", refused[i], v, out);
    ck_assert_str_eq(line_of(out, "socket_unix", v, sizeof(v)), "OK");
    ck_assert_str_eq(line_of(out, "socketpair_unix", v, sizeof(v)), "OK");
    cJSON_Delete(r);

    /* With the network, the same high-bit socket opens: the kernel does take it as AF_INET,
     * so the refusal above is the filter's. */
    snprintf(body, sizeof(body), "{\"argv\":[\"./sbxd-probe\",\"attack\",\"socket\",\"%d\"]}",
             g_sbxd.port);
    r = execute(&g_sbxd, body);
    out = jstr(r, "stdout");
    ck_assert_msg(strcmp(line_of(out, "socket_highbit_inet", v, sizeof(v)), "OK") == 0,
                  "with the network, the high-bit socket gave %s:\n%s", v, out);
    cJSON_Delete(r);
}
END_TEST

START_TEST(personality_keeps_memory_protections)
{
    daemon_install_probe(&g_sbxd);
    cJSON *r = execute(&g_sbxd, "{\"argv\":[\"./sbxd-probe\",\"attack\",\"personality\"]}");
    const char *out = jstr(r, "stdout");
    char v[64];
    static const char *allowed[] = {"persona_query", "persona_linux", "persona_linux32",
                                    "persona_uname26"};
    static const char *refused[] = {"persona_read_implies_exec", "persona_addr_no_randomize",
                                    "persona_mmap_page_zero", "persona_highbit_read_implies_exec",
                                    "persona_almost_all"};
    /* (gVisor implements no personality but its own: EINVAL for all. Not the filter's.) */
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        ck_assert_msg(
            strcmp(line_of(out, allowed[i], v, sizeof(v)), under_gvisor() ? "EINVAL" : "OK") == 0,
            "%s gave '%s':\n%s", allowed[i], v, out);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_msg(strcmp(line_of(out, refused[i], v, sizeof(v)), "EPERM") == 0,
                      "%s gave '%s', not EPERM:\n%s", refused[i], v, out);
    cJSON_Delete(r);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* A command spinning kill(-1, SIGSTOP) must not freeze sbxd on any kill path.            */

static const char spinner[] =
    "{\"argv\":[\"./sbxd-probe\",\"attack\",\"stop\",\"60\"],\"timeout_ms\":60000}";

START_TEST(sigstop_spinner_cannot_freeze_sbxd)
{
    const char *backend = backends[_i];
    struct daemon d;
    start_backend(&d, backend);
    struct health_watch hw;
    health_watch_start(&hw, &d, 50);

    /* Two spinners in the background, for the whole test. */
    char s1[64], s2[64], path[160];
    bg_start(&d, spinner, s1, sizeof(s1));
    bg_start(&d, spinner, s2, sizeof(s2));
    usleep(200000);

    /* Commands beside them still get an answer within their timeout (their own processes
     * may be stopped, before or after exec: then they time out, or fail to start). */
    int seen[3] = {0, 0, 0}; /* exited, timeout, failed_to_start */
    for (int i = 0; i < 12; i++) {
        cJSON *j =
            request_within(&d, "POST", "/execute", "{\"command\":\"echo hi\",\"timeout_ms\":1000}",
                           200, 4000, "/execute beside the spinners");
        const char *st = jstr(j, "status");
        seen[!strcmp(st, "timeout") ? 1 : !strcmp(st, "failed_to_start") ? 2 : 0]++;
        cJSON_Delete(j);
    }
    fprintf(stderr,
            "attacks: %s: beside the spinners, %d exited, %d timed out, %d stopped "
            "before exec\n",
            backend, seen[0], seen[1], seen[2]);
    /* The timeout kill path, on a spinner. */
    cJSON *j = request_within(&d, "POST", "/execute",
                              "{\"argv\":[\"./sbxd-probe\",\"attack\",\"stop\",\"60\"],"
                              "\"timeout_ms\":800}",
                              200, 4000, "a spinner's timeout");
    ck_assert_msg(!strcmp(jstr(j, "status"), "timeout") ||
                      !strcmp(jstr(j, "status"), "failed_to_start"),
                  "a spinner's status: %s", jstr(j, "status"));
    cJSON_Delete(j);
    /* The signal path, then DELETE. */
    snprintf(path, sizeof(path), "/processes/%s/signal", s1);
    j = request_within(&d, "POST", path, "{\"signal\":\"SIGTERM\"}", 200, 3000, "signal");
    cJSON_Delete(j);
    snprintf(path, sizeof(path), "/processes/%s", s1);
    j = request_within(&d, "DELETE", path, NULL, 200, 3000, "DELETE");
    cJSON_Delete(j);
    /* And sbxd still starts commands. */
    j = request_within(&d, "POST", "/execute", "{\"command\":\"echo ok\",\"timeout_ms\":5000}", 200,
                       6000, "/execute after the kills");
    cJSON_Delete(j);
    health_watch_stop(&hw);
    ck_assert_msg(hw.failed == 0, "/healthz failed %d times", hw.failed);

    /* Shutdown, with the second spinner still running: SIGTERM drains and kills it. */
    double t0 = now_ms();
    int st = daemon_stop(&d, (int)(8000 * SLOW));
    ck_assert_msg(st != -1, "sbxd did not stop within 8 s of SIGTERM (%s)", backend);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sbxd ended with status %d", st);
    ck_assert_msg(now_ms() - t0 < 8000 * SLOW, "shutdown took %.0f ms", now_ms() - t0);
    (void)s2;
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* A command must not reach into another's memory, fds or environment, nor signal it.     */

START_TEST(commands_cannot_reach_each_other)
{
    const char *backend = backends[_i];
    struct daemon d;
    start_backend(&d, backend);
    cJSON *h = request_within(&d, "GET", "/healthz", NULL, 200, 3000, "healthz");
    /* What /healthz claims: anything but "none" must hold below. */
    const cJSON *claim = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "isolation"), "inter_command");
    const char *inter = cJSON_IsString(claim) ? claim->valuestring : "unstated";

    /* The victim: a background process with a secret in its environment and its stdin
     * open (a pipe of sbxd's, which pidfd_getfd would copy out). */
    char victim[64], out[8192] = "", v[64];
    bg_start(&d,
             "{\"argv\":[\"sleep\",\"30.4242\"],\"env\":{\"API_KEY\":\"s3cret\"},"
             "\"timeout_ms\":30000}",
             victim, sizeof(victim));
    usleep(200000);
    cJSON *r = request_within(&d, "POST", "/execute",
                              "{\"argv\":[\"./sbxd-probe\",\"attack\",\"steal\",\"30.4242\"]}", 200,
                              10000, "the attacker");
    snprintf(out, sizeof(out), "%s", jstr(r, "stdout"));
    cJSON_Delete(r);

    /* Refused by the deny-list on every backend, whatever else holds. */
    if (strcmp(line_of(out, "found", v, sizeof(v)), "0") == 0) {
        /* A PID namespace with its own /proc: the victim is not even visible. */
        ck_assert_str_eq(inter, "pidns");
    } else {
        ck_assert_msg(!strcmp(line_of(out, "pidfd_getfd", v, sizeof(v)), "EPERM"),
                      "%s: pidfd_getfd gave '%s':\n%s", backend, v, out);
        ck_assert_msg(!strcmp(line_of(out, "kcmp", v, sizeof(v)), "EPERM"),
                      "%s: kcmp gave '%s':\n%s", backend, v, out);
        if (!strcmp(inter, "none")) {
            /* Honestly reported: nothing keeps same-user commands apart here. */
            fprintf(stderr,
                    "attacks: %s: inter_command none (no Landlock here): /proc/PID/mem "
                    "and signals between commands are not refused\n",
                    backend);
        } else {
            ck_assert_msg(strcmp(line_of(out, "proc_mem", v, sizeof(v)), "OK") != 0,
                          "%s (%s): /proc/PID/mem of another command opened:\n%s", backend, inter,
                          out);
            if (under_gvisor())
                gvisor_skip("cross-command environ", "gVisor serves /proc/PID/environ to "
                                                     "other uids (docs/security.md)");
            else
                ck_assert_msg(strcmp(line_of(out, "environ", v, sizeof(v)), "OK") != 0,
                              "%s (%s): another command's environment read:\n%s", backend, inter,
                              out);
            if (strcmp(inter, "landlock-no-signals") != 0)
                ck_assert_msg(strcmp(line_of(out, "signal", v, sizeof(v)), "OK") != 0,
                              "%s (%s): another command could be signalled:\n%s", backend, inter,
                              out);
        }
    }
    /* The victim is untouched. */
    char path[160];
    snprintf(path, sizeof(path), "/processes/%s", victim);
    cJSON *p = request_within(&d, "GET", path, NULL, 200, 3000, "the victim");
    ck_assert_str_eq(jstr(p, "status"), "running");
    cJSON_Delete(p);
    cJSON_Delete(request_within(&d, "DELETE", path, NULL, 200, 3000, "DELETE the victim"));
    cJSON_Delete(h);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* A command's terminal is its own.                                                        */

/* The output of a background process so far, as text (caller frees). */
static char *bg_text(const struct daemon *d, const char *id)
{
    char path[160];
    snprintf(path, sizeof(path), "/processes/%s/output?since=0&encoding=utf8", id);
    struct http_resp r;
    ck_assert_int_eq(http_request(d, "GET", path, NULL, NULL, 0, 10000, &r), 0);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
    size_t cap = r.len + 1, len = 0;
    char *text = calloc(1, cap);
    for (char *save = NULL, *line = strtok_r(r.body, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *ev = cJSON_Parse(line);
        const cJSON *data = cJSON_GetObjectItem(ev, "data");
        if (cJSON_IsString(data)) {
            size_t n = strlen(data->valuestring);
            memcpy(text + len, data->valuestring, n < cap - 1 - len ? n : cap - 1 - len);
            len += n < cap - 1 - len ? n : cap - 1 - len;
        }
        cJSON_Delete(ev);
    }
    http_resp_free(&r);
    return text;
}

/* Poll until a background process's output holds needle (within ms); returns the text. */
static char *bg_wait_text(const struct daemon *d, const char *id, const char *needle, int ms)
{
    for (double end = now_ms() + ms * SLOW;; usleep(10000)) {
        char *t = bg_text(d, id);
        if (strstr(t, needle))
            return t;
        ck_assert_msg(now_ms() < end, "no '%s' after %d ms in: %s", needle, ms, t);
        free(t);
    }
}

START_TEST(terminals_are_not_shared_between_commands)
{
    const char *backend = backends[_i];
    struct daemon d;
    start_backend(&d, backend);
    /* The victim: a process on a terminal, which says which one it is and then echoes what
     * it is given. */
    char victim[64], v[64];
    bg_start(&d, "{\"command\":\"tty; exec cat\",\"pty\":{},\"timeout_ms\":30000}", victim,
             sizeof(victim));
    char *t = bg_wait_text(&d, victim, "/dev/pts/", 5000);
    char tty[64];
    const char *at = strstr(t, "/dev/pts/");
    snprintf(tty, sizeof(tty), "%.*s", (int)strcspn(at, "\r\n"), at);
    free(t);

    /* Another command opens it by name: read-write to write forged output into it (and to
     * take the victim's input from under it), read-only, write-only. */
    char body[256], out[4096];
    snprintf(body, sizeof(body), "{\"argv\":[\"./sbxd-probe\",\"attack\",\"tty\",\"%s\"]}", tty);
    cJSON *r = request_within(&d, "POST", "/execute", body, 200, 10000, "the attacker");
    snprintf(out, sizeof(out), "%s", jstr(r, "stdout"));
    cJSON_Delete(r);
    static const char *const opens[] = {"tty_rdwr", "tty_rdonly", "tty_wronly"};
    for (size_t i = 0; i < sizeof(opens) / sizeof(opens[0]); i++)
        ck_assert_msg(!strcmp(line_of(out, opens[i], v, sizeof(v)), "EACCES"),
                      "%s: %s of another command's %s gave '%s':\n%s", backend, opens[i], tty, v,
                      out);

    /* The victim's terminal works as before: its input reaches it, its output is its own. */
    char path[160];
    snprintf(path, sizeof(path), "/processes/%s/stdin", victim);
    cJSON_Delete(request_within(&d, "POST", path, "ping-4242\n", 200, 5000, "the victim's stdin"));
    t = bg_wait_text(&d, victim, "ping-4242\r\nping-4242", 5000);
    ck_assert_msg(!strstr(t, "FORGED"), "%s: forged output in the victim's: %s", backend, t);
    free(t);
    snprintf(path, sizeof(path), "/processes/%s", victim);
    cJSON_Delete(request_within(&d, "DELETE", path, NULL, 200, 3000, "DELETE the victim"));
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* A command must not open another's System V IPC objects by key, nor its POSIX message    */
/* queues by name, nor make a namespace of its own.                                        */

/* The text of a file (at most n-1 bytes) into buf; "" when it cannot be read. */
static void read_text(const char *path, char *buf, size_t n)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t k = read(fd, buf, n - 1);
    buf[k > 0 ? k : 0] = '\0';
    close(fd);
}

/*
 * A running command (the holder) makes SysV shared memory, a message queue and a semaphore set
 * of a known key and a POSIX queue, each with something in it, and finds them again from a
 * child of its own; another command, started meanwhile, looks for them by key and name. It
 * must find none (ENOENT, not EACCES: not even that they exist), on every backend (under uid
 * isolation the two run as different uids), and no command may make a namespace of its own.
 */
START_TEST(commands_cannot_open_each_others_ipc_objects)
{
    const char *backend = backends[_i];
    key_t key = (key_t)(0x5bd20000 + (getpid() & 0xffff));
    struct daemon d;
    start_backend(&d, backend);
    cJSON *h = request_within(&d, "GET", "/healthz", NULL, 200, 3000, "healthz");
    const cJSON *claim = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "isolation"), "ipc");
    char ipc[32];
    snprintf(ipc, sizeof(ipc), "%s", cJSON_IsString(claim) ? claim->valuestring : "unstated");
    cJSON_Delete(h);

    char body[512], holder[64], path[320], held[256] = "", found[256] = "", ns[512] = "";
    snprintf(body, sizeof(body),
             "{\"command\":\"./sbxd-probe attack leave %d > held.tmp; ./sbxd-probe attack find "
             "%d >> held.tmp; mv held.tmp held; exec sleep 30.5151\",\"timeout_ms\":30000}",
             (int)key, (int)key);
    bg_start(&d, body, holder, sizeof(holder));
    snprintf(path, sizeof(path), "%s/held", d.ws);
    for (double t0 = now_ms(); access(path, F_OK) != 0 && now_ms() - t0 < 10000 * SLOW;)
        usleep(5000);
    read_text(path, held, sizeof(held));
    snprintf(body, sizeof(body), "{\"argv\":[\"./sbxd-probe\",\"attack\",\"find\",\"%d\"]}",
             (int)key);
    cJSON *r = request_within(&d, "POST", "/execute", body, 200, 10000, "the other command");
    snprintf(found, sizeof(found), "%s", jstr(r, "stdout"));
    cJSON_Delete(r);
    r = request_within(&d, "POST", "/execute",
                       "{\"argv\":[\"./sbxd-probe\",\"attack\",\"nsflags\"]}", 200, 10000,
                       "nsflags");
    snprintf(ns, sizeof(ns), "%s", jstr(r, "stdout"));
    cJSON_Delete(r);
    snprintf(path, sizeof(path), "/processes/%s", holder);
    cJSON_Delete(request_within(&d, "DELETE", path, NULL, 200, 3000, "DELETE the holder"));
    host_ipc_drop(key); /* (before the verdict: nothing stays for another test) */

    /* gVisor (release 2022-12) makes the POSIX queue but cannot put anything in it. */
    bool empty_mq = under_gvisor() && strstr(held, "mq_send ENOSYS");
    if (empty_mq)
        gvisor_skip("a message in a POSIX queue",
                    "gVisor (release 2022-12) has mq_open but no mq_timedsend (ENOSYS)");
    /* Made, then found by the holder's own child (a program and its children share them). */
    ck_assert_msg(strcmp(held, empty_mq ? "shm OK\nmsg OK\nsem OK\nmq OK\nmq_send ENOSYS\n"
                                          "shm OK\nmsg OK\nsem OK\nmq OK\n"
                                        : "shm OK\nmsg OK\nsem OK\nmq OK\nmq_send OK\n"
                                          "shm OK\nmsg OK\nsem OK\nmq OK\n") == 0,
                  "%s: the holder made and found:\n%s", backend, held);
    ck_assert_msg(strcmp(found, "shm ENOENT\nmsg ENOENT\nsem ENOENT\nmq ENOENT\n") == 0,
                  "%s (ipc: %s): another command found the holder's IPC objects:\n%s", backend, ipc,
                  found);
    ck_assert_msg(strcmp(ipc, "own") == 0, "%s: /healthz says ipc: %s", backend, ipc);
    static const char *const flags[] = {"clone_newipc",   "clone_newns",  "clone_newpid",
                                        "clone_newuser",  "clone_newuts", "clone_newnet",
                                        "clone_newcgroup"};
    char v[64];
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        ck_assert_msg(strcmp(line_of(ns, flags[i], v, sizeof(v)), "EPERM") == 0,
                      "%s: a command's %s gave '%s', not the filter's EPERM:\n%s", backend,
                      flags[i], v, ns);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Requests whose meaning depends on who parses them.                                     */

/* Send raw bytes on a new connection and read until the peer closes; returns the status. */
static int raw_exchange(const struct daemon *d, const char *req, size_t n, char *out, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert(send(fd, req, n, MSG_NOSIGNAL) == (ssize_t)n);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < len && (k = recv(fd, out + got, len - 1 - got, 0)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(fd);
    int status = 0;
    sscanf(out, "HTTP/1.%*d %d", &status);
    return status;
}

START_TEST(nul_in_target_and_smuggling_headers_are_400)
{
    char path[512], out[8192];
    snprintf(path, sizeof(path), "%s/h.txt", g_sbxd.ws);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("hello\n", f);
    fclose(f);
    /* A NUL in the target used to cut it there: h.txt was served for "h.txt\0x". */
    static const char nul[] =
        "GET /files/h.txt\0x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ck_assert_int_eq(raw_exchange(&g_sbxd, nul, sizeof(nul) - 1, out, sizeof(out)), 400);
    ck_assert_msg(strstr(out, "\"INVALID_ARGUMENT\"") && strstr(out, "NUL"), "%s", out);
    static const char nulq[] =
        "GET /v1/files/h.txt?x=1\0&y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ck_assert_int_eq(raw_exchange(&g_sbxd, nulq, sizeof(nulq) - 1, out, sizeof(out)), 400);
    /* The same target without the NUL is served. */
    static const char ok[] = "GET /files/h.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ck_assert_int_eq(raw_exchange(&g_sbxd, ok, sizeof(ok) - 1, out, sizeof(out)), 200);
    ck_assert_ptr_nonnull(strstr(out, "\r\n\r\nhello\n"));
    /* Content-Length with Transfer-Encoding: a second request hidden in the body for a proxy
     * that frames by Content-Length. Refused, and the connection closed: the smuggled
     * request is never run. */
    static const char te[] =
        "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\nPOST /execute HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Length: 30\r\n\r\n"
        "{\"command\":\"touch smuggled\"}";
    ck_assert_int_eq(raw_exchange(&g_sbxd, te, sizeof(te) - 1, out, sizeof(out)), 400);
    ck_assert_msg(strstr(out, "Transfer-Encoding"), "%s", out);
    ck_assert_msg(!strstr(out + 12, "HTTP/1.1 200"), "the smuggled request was served:\n%s", out);
    snprintf(path, sizeof(path), "%s/smuggled", g_sbxd.ws);
    ck_assert_msg(access(path, F_OK) != 0, "the smuggled command ran");
    snprintf(path, sizeof(path), "%s/h.txt", g_sbxd.ws);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Secrets within the sandbox's reach.                                                    */

/* A token file the command user can read (a Kubernetes Secret's default mode is 0644): any
 * command would read the token and drive sbxd as its client. sbxd refuses to start; with
 * --degraded-ok it serves health checks as degraded and runs nothing. Per backend: under uid
 * isolation commands run as uids of the range, with the command group. */
START_TEST(token_file_commands_can_read_is_refused)
{
    const char *backend = backends[_i];
    char dir[] = "/tmp/sbxd-tokmode-XXXXXX", file[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0755), 0); /* every ancestor searchable: the file's mode decides */
    snprintf(file, sizeof(file), "%s/token", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("tok-readable-by-commands\n", f);
    fclose(f);
    static char why[16384];
    struct daemon d;
    const char *args[] = {"--isolation", backend, "--token-file", file, NULL, NULL};
    const struct {
        mode_t mode;
        uid_t uid;
        gid_t gid;
    } exposed[] = {{0644, 0, 0}, {0604, 0, 0}, {0640, 0, 1000}, {0400, 1000, 0}};
    for (size_t i = 0; i < sizeof(exposed) / sizeof(exposed[0]); i++) {
        ck_assert_int_eq(chown(file, exposed[i].uid, exposed[i].gid), 0);
        ck_assert_int_eq(chmod(file, exposed[i].mode), 0);
        int st = daemon_try_start(&d, args, NULL, why, sizeof(why));
        if (st == -1) {
            /* It started: replay the attack, a command reading the token. */
            char body[256];
            snprintf(body, sizeof(body), "{\"command\":\"cat %s\"}", file);
            struct http_resp r;
            http_request_with(&d, "POST", "/execute",
                              "Authorization: Bearer tok-readable-by-commands", NULL, body,
                              strlen(body), 10000, &r);
            ck_assert(daemon_stop_clean(&d, 10000));
            unlink(file);
            rmdir(dir);
            ck_abort_msg("%s: sbxd started with --token-file mode %04o owner %u:%u, and a "
                         "command read it: HTTP %ld %.300s",
                         backend, (unsigned)exposed[i].mode, (unsigned)exposed[i].uid,
                         (unsigned)exposed[i].gid, r.status, r.body);
        }
        ck_assert_msg(st == 2 && strstr(why, "sbxd: --token-file") && strstr(why, file) &&
                          strstr(why, "commands"),
                      "%s, mode %04o: exit %d: %s", backend, (unsigned)exposed[i].mode, st, why);
    }
    /* Root's alone: sbxd starts, and a command cannot read it. */
    ck_assert_int_eq(chown(file, 0, 0), 0);
    ck_assert_int_eq(chmod(file, 0400), 0);
    ck_assert_msg(daemon_try_start(&d, args, NULL, why, sizeof(why)) == -1, "%s", why);
    char body[256];
    snprintf(body, sizeof(body), "{\"command\":\"cat %s\"}", file);
    struct http_resp r;
    ck_assert_int_eq(http_request_with(&d, "POST", "/execute",
                                       "Authorization: Bearer tok-readable-by-commands", NULL, body,
                                       strlen(body), 10000, &r),
                     0);
    ck_assert_msg(r.status == 200 && jnum(r.json, "exit_code") != 0 &&
                      !strstr(r.body, "tok-readable"),
                  "%s", r.body);
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 10000));
    /* --degraded-ok: up, 503 degraded with the reason, no command run. */
    if (strcmp(backend, "pidns") == 0) {
        ck_assert_int_eq(chmod(file, 0644), 0);
        args[4] = "--degraded-ok";
        ck_assert_msg(daemon_try_start(&d, args, NULL, why, sizeof(why)) == -1, "%s", why);
        ck_assert_int_eq(http_request(&d, "GET", "/healthz", NULL, NULL, 0, 10000, &r), 0);
        ck_assert_msg(r.status == 503 && strcmp(jstr(r.json, "status"), "degraded") == 0 &&
                          strstr(jstr(r.json, "reason"), "--token-file"),
                      "%s", r.body);
        http_resp_free(&r);
        ck_assert_int_eq(http_request_with(&d, "POST", "/execute",
                                           "Authorization: Bearer tok-readable-by-commands", NULL,
                                           body, strlen(body), 10000, &r),
                         0);
        assert_error(&r, 503, "UNAVAILABLE");
        ck_assert_ptr_null(strstr(r.body, "tok-readable"));
        http_resp_free(&r);
        ck_assert(daemon_stop_clean(&d, 10000));
    }
    unlink(file);
    rmdir(dir);
}
END_TEST

/* /v1/metadata serves SANDBOX_* variables to anyone who can reach the port, commands in the
 * sandbox included: none whose name says it holds a credential (the reference sandboxd's
 * markers, and PWD), and no URL with a user or password in it. */
START_TEST(metadata_withholds_credentials)
{
    const char *env[] = {"SANDBOX_ID=sbx-42",
                         "SANDBOX_NAMESPACE=team-a",
                         "SANDBOX_ENDPOINT=https://api.example.com/v1?x=1",
                         "SANDBOX_DIR=/workspace",
                         "SANDBOX_AUTH_HEADER=hidden-1",
                         "SANDBOX_Bearer=hidden-2",
                         "SANDBOX_DB_CREDS=hidden-3",
                         "SANDBOX_DB_PASSWD=hidden-4",
                         "SANDBOX_DB_PWD=hidden-5",
                         "SANDBOX_TLS_CERT=hidden-6",
                         "SANDBOX_PRIVATE_NOTE=hidden-7",
                         "SANDBOX_DATABASE_URL=postgres://app:hidden-8@db.internal:5432/app",
                         "SANDBOX_MIRROR=https://deploy@git.example.com/repo.git",
                         "SANDBOX_PEERS=http://a.example,https://u:hidden-9@b.example/",
                         "SANDBOX_OAUTHISH=hidden-10",
                         NULL};
    struct daemon d;
    daemon_start(&d, NULL, env);
    struct http_resp r;
    ck_assert_int_eq(http_request(&d, "GET", "/v1/metadata", NULL, NULL, 0, 10000, &r), 0);
    ck_assert_int_eq(r.status, 200);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(r.json, "env");
    ck_assert_msg(strcmp(jstr(e, "SANDBOX_ID"), "sbx-42") == 0 &&
                      strcmp(jstr(e, "SANDBOX_NAMESPACE"), "team-a") == 0 &&
                      strcmp(jstr(e, "SANDBOX_ENDPOINT"), "https://api.example.com/v1?x=1") == 0 &&
                      strcmp(jstr(e, "SANDBOX_DIR"), "/workspace") == 0,
                  "an ordinary variable is missing: %s", r.body);
    ck_assert_msg(cJSON_GetArraySize(e) == 4 && !strstr(r.body, "hidden") &&
                      !strstr(r.body, "deploy@"),
                  "a credential was served: %s", r.body);
    http_resp_free(&r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

Suite *attacks_suite(void)
{
    Suite *s = suite_create("attacks");
    TCase *cmd = tcase_create("hostile-command");
    tcase_set_timeout(cmd, 60 * SLOW);
    tcase_add_test(cmd, network_false_refuses_high_bit_socket_families);
    tcase_add_test(cmd, personality_keeps_memory_protections);
    suite_add_tcase(s, cmd);
    TCase *kill = tcase_create("kill-paths");
    tcase_set_timeout(kill, 90 * SLOW);
    tcase_add_loop_test(kill, sigstop_spinner_cannot_freeze_sbxd, 0, NBACKENDS);
    suite_add_tcase(s, kill);
    TCase *cross = tcase_create("cross-command");
    tcase_set_timeout(cross, 60 * SLOW);
    tcase_add_loop_test(cross, commands_cannot_reach_each_other, 0, NBACKENDS);
    tcase_add_loop_test(cross, terminals_are_not_shared_between_commands, 0, NBACKENDS);
    tcase_add_loop_test(cross, commands_cannot_open_each_others_ipc_objects, 0, NBACKENDS);
    suite_add_tcase(s, cross);
    TCase *client = tcase_create("hostile-client");
    tcase_add_test(client, nul_in_target_and_smuggling_headers_are_400);
    suite_add_tcase(s, client);
    TCase *secrets = tcase_create("secrets");
    tcase_set_timeout(secrets, 60 * SLOW);
    tcase_add_loop_test(secrets, token_file_commands_can_read_is_refused, 0, NBACKENDS);
    tcase_add_test(secrets, metadata_withholds_credentials);
    suite_add_tcase(s, secrets);
    return s;
}
