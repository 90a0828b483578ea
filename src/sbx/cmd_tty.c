/*
 * cmd_tty.c - ports, attach, shell: what listens in the sandbox, and a raw terminal on a
 * background process's WebSocket (GET /processes/{id}/tty). libcurl makes the connection
 * (plain or TLS, CONNECT_ONLY) and carries the bytes; wslay frames them; nettle's SHA-1
 * checks the handshake's answer.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <termios.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "sbx.h"
#include "sbxd/base64.h"
#include "sbxd/wsaccept.h"

#define DETACH_KEY 0x1d /* Ctrl-] */

/* ------------------------------------------------------------------ ports */

static const char *str_or(const cJSON *o, const char *k, const char *d)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : d;
}

int cmd_ports(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    bool json;
    int done = opt_json_only(cmd, argc, argv, &json);
    if (done >= 0)
        return done;
    struct request req = {.method = "GET", .path = "/ports"};
    struct response resp;
    int r = http_perform(s, cmd->name, &req, &resp) < 0 ? SBX_FAIL
            : resp.status != 200                        ? http_report(cmd->name, &resp)
                                                        : SBX_OK;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(resp.json, "ports");
    if (r == SBX_OK && !cJSON_IsArray(list))
        r = fail(cmd->name, "sbxd's answer has no port list");
    if (r == SBX_OK && json) {
        fwrite(resp.body.p, 1, resp.body.len, stdout);
        putchar('\n');
    } else if (r == SBX_OK) {
        printf("%-5s  %-15s  %-24s  %-5s  %s\n", "PORT", "ADDRESS", "PROCESS", "PROXY", "COMMAND");
        const cJSON *p;
        cJSON_ArrayForEach(p, list)
        {
            const cJSON *port = cJSON_GetObjectItemCaseSensitive(p, "port");
            bool proxy = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "proxy"));
            bool own = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "sbxd"));
            printf("%-5.0f  %-15s  %-24s  %-5s  ", cJSON_IsNumber(port) ? port->valuedouble : 0,
                   str_or(p, "address", "?"), str_or(p, "process_id", "-"), proxy ? "yes" : "no");
            put_escaped(stdout, own ? "(sbxd)" : str_or(p, "command", "-"));
            putchar('\n');
        }
    }
    response_free(&resp);
    if (fflush(stdout) != 0)
        return fail(cmd->name, "cannot write to stdout: %s", strerror(errno));
    return r;
}

/* ------------------------------------------------------------------ the terminal */

struct term {
    const char *cmd;
    CURL *e;
    curl_socket_t sock;
    wslay_event_context_ptr ctx;
    int exit_code; /* the process's, once its "exit" came; -1 before */
    bool detached;
};

static struct termios saved;
static bool raw_on;
static int winch_pipe[2] = {-1, -1};

static void raw_off(void)
{
    if (raw_on)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    raw_on = false;
}

static void on_winch(int sig)
{
    (void)sig;
    int e = errno;
    char b = 1;
    ssize_t k = write(winch_pipe[1], &b, 1);
    (void)k;
    errno = e;
}

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *ud)
{
    (void)flags;
    struct term *t = ud;
    size_t n = 0;
    CURLcode rc = curl_easy_recv(t->e, buf, len, &n);
    if (rc == CURLE_AGAIN) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (rc != CURLE_OK || n == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)n;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *ud)
{
    (void)flags;
    struct term *t = ud;
    size_t n = 0;
    CURLcode rc = curl_easy_send(t->e, data, len, &n);
    if (rc == CURLE_AGAIN) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (rc != CURLE_OK) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)n;
}

static int ws_mask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *ud)
{
    (void)ctx;
    (void)ud;
    return getrandom(buf, len, 0) == (ssize_t)len ? 0 : -1;
}

static void ws_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                   void *ud)
{
    (void)ctx;
    struct term *t = ud;
    if (arg->opcode == WSLAY_BINARY_FRAME) {
        write_all(STDOUT_FILENO, arg->msg, arg->msg_length);
    } else if (arg->opcode == WSLAY_TEXT_FRAME) {
        cJSON *j = cJSON_ParseWithLength((const char *)arg->msg, arg->msg_length);
        const char *type = str_or(j, "type", "");
        if (strcmp(type, "exit") == 0) {
            const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "exit_code");
            t->exit_code = cJSON_IsNumber(code) ? (int)code->valuedouble : SBX_FAIL;
        } else if (strcmp(type, "error") == 0) {
            raw_off();
            fprintf(stderr, "\r\nsbx: %s: %s\r\n", t->cmd, str_or(j, "message", "?"));
        }
        cJSON_Delete(j);
    }
}

/* Queue the terminal's size as a resize message. */
static void send_size(struct term *t)
{
    struct winsize ws;
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_row || !ws.ws_col)
        return;
    char m[96];
    int n = snprintf(m, sizeof(m), "{\"type\":\"resize\",\"rows\":%u,\"cols\":%u}",
                     (unsigned)ws.ws_row, (unsigned)ws.ws_col);
    struct wslay_event_msg msg = {WSLAY_TEXT_FRAME, (const uint8_t *)m, (size_t)n};
    wslay_event_queue_msg(t->ctx, &msg);
}

/* Send all of p over the connection (the handshake). */
static int send_all_curl(struct term *t, const char *p, size_t n)
{
    while (n) {
        size_t k = 0;
        CURLcode rc = curl_easy_send(t->e, p, n, &k);
        if (rc == CURLE_AGAIN) {
            struct pollfd f = {.fd = t->sock, .events = POLLOUT};
            poll(&f, 1, 1000);
            continue;
        }
        if (rc != CURLE_OK)
            return -1;
        p += k;
        n -= k;
    }
    return 0;
}

/* The handshake: GET path with the upgrade, the answer's head read and checked. */
static int handshake(const struct sbx *s, struct term *t, const char *path)
{
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *base = NULL;
    if (!u || curl_url_set(u, CURLUPART_URL, s->url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        curl_url_cleanup(u);
        return fail(t->cmd, "cannot read sbxd's URL %s", s->url);
    }
    curl_url_get(u, CURLUPART_PORT, &port, 0);
    curl_url_get(u, CURLUPART_PATH, &base, 0);
    uint8_t nonce[16];
    char key[32], want[WS_ACCEPT_LEN + 1], req[8192];
    if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
        return fail(t->cmd, "no random bytes");
    key[base64_encode(nonce, sizeof(nonce), key)] = '\0';
    const char *auth = sbx_auth_header();
    int n = snprintf(req, sizeof(req),
                     "GET %s%s HTTP/1.1\r\nHost: %s%s%s\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n%s%s\r\n",
                     base && strcmp(base, "/") != 0 ? base : "", path, host, port ? ":" : "",
                     port ? port : "", key, auth, *auth ? "\r\n" : "");
    curl_free(host);
    curl_free(port);
    curl_free(base);
    curl_url_cleanup(u);
    if (n < 0 || (size_t)n >= sizeof(req) || send_all_curl(t, req, (size_t)n) < 0)
        return fail(t->cmd, "cannot send the WebSocket handshake");
    /* The answer's head, a byte at a time: nothing after it may be taken from the socket. */
    char head[8192];
    size_t len = 0;
    while (len < sizeof(head) - 1 && (len < 4 || memcmp(head + len - 4, "\r\n\r\n", 4) != 0)) {
        size_t k = 0;
        CURLcode rc = curl_easy_recv(t->e, head + len, 1, &k);
        if (rc == CURLE_AGAIN) {
            struct pollfd f = {.fd = t->sock, .events = POLLIN};
            if (poll(&f, 1, 30000) == 0)
                return fail(t->cmd, "sbxd did not answer the WebSocket handshake");
            continue;
        }
        if (rc != CURLE_OK || k == 0)
            return fail(t->cmd, "the connection closed during the WebSocket handshake");
        len += k;
    }
    head[len] = '\0';
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        /* An error's JSON body follows the head: its message is the reason. */
        char body[2048];
        size_t bn = 0, k = 0;
        const char *cl = strcasestr(head, "\r\nContent-Length:");
        size_t want_n = cl ? (size_t)strtoul(cl + 17, NULL, 10) : 0;
        if (want_n > sizeof(body) - 1)
            want_n = sizeof(body) - 1;
        for (int i = 0; i < 50 && bn < want_n; i++) {
            CURLcode rc = curl_easy_recv(t->e, body + bn, want_n - bn, &k);
            if (rc == CURLE_AGAIN) {
                struct pollfd f = {.fd = t->sock, .events = POLLIN};
                poll(&f, 1, 100);
                continue;
            }
            if (rc != CURLE_OK || k == 0)
                break;
            bn += k;
        }
        body[bn] = '\0';
        cJSON *j = cJSON_Parse(body);
        int status = atoi(head + 9);
        int r =
            fail(t->cmd, "%s (HTTP %d)", str_or(j, "message", "sbxd refused the terminal"), status);
        cJSON_Delete(j);
        return r;
    }
    const char *why = ws_accept_of(key, want);
    if (why)
        return fail(t->cmd, "%s", why);
    const char *acc = strcasestr(head, "\r\nSec-WebSocket-Accept:");
    if (!acc)
        return fail(t->cmd, "the WebSocket answer has no Sec-WebSocket-Accept");
    acc += 23;
    while (*acc == ' ')
        acc++;
    if (strncmp(acc, want, strlen(want)) != 0)
        return fail(t->cmd, "the WebSocket answer's Sec-WebSocket-Accept is wrong");
    return SBX_OK;
}

/* The loop: keystrokes out, output in, until the process ends, the connection closes or the
 * detach key. */
static int pump(struct term *t)
{
    bool tty = isatty(STDIN_FILENO);
    if (tty)
        send_size(t);
    bool in_open = true;
    while (wslay_event_want_read(t->ctx) || wslay_event_want_write(t->ctx)) {
        struct pollfd f[3] = {
            {.fd = t->sock,
             .events = (short)(POLLIN | (wslay_event_want_write(t->ctx) ? POLLOUT : 0))},
            {.fd = in_open ? STDIN_FILENO : -1, .events = POLLIN},
            {.fd = winch_pipe[0], .events = POLLIN}};
        if (poll(f, 3, -1) < 0 && errno != EINTR)
            return fail(t->cmd, "poll: %s", strerror(errno));
        if (f[2].revents & POLLIN) {
            char b[16];
            while (read(winch_pipe[0], b, sizeof(b)) > 0)
                ;
            send_size(t);
        }
        if (f[1].revents & (POLLIN | POLLHUP)) {
            char b[4096];
            ssize_t k = read(STDIN_FILENO, b, sizeof(b));
            if (k <= 0) {
                in_open = false; /* stdin ended: keep showing output until the end */
            } else {
                char *dk = tty ? memchr(b, DETACH_KEY, (size_t)k) : NULL;
                size_t n = dk ? (size_t)(dk - b) : (size_t)k;
                if (n) {
                    struct wslay_event_msg m = {WSLAY_BINARY_FRAME, (const uint8_t *)b, n};
                    wslay_event_queue_msg(t->ctx, &m);
                }
                if (dk) {
                    t->detached = true;
                    wslay_event_queue_close(t->ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
                }
            }
        }
        if (wslay_event_recv(t->ctx) != 0 || wslay_event_send(t->ctx) != 0)
            break;
    }
    return SBX_OK;
}

static int attach(const struct sbx *s, const char *cmd, const char *id, bool announce)
{
    struct term t = {.cmd = cmd, .exit_code = -1};
    char *path = url_path("/processes/", id);
    char *full = path ? malloc(strlen(path) + 8) : NULL;
    if (!full) {
        free(path);
        return fail(cmd, "out of memory");
    }
    sprintf(full, "%s/tty", path);
    free(path);
    t.e = curl_easy_init();
    curl_easy_setopt(t.e, CURLOPT_URL, s->url);
    curl_easy_setopt(t.e, CURLOPT_CONNECT_ONLY, 1L);
    CURLcode rc = curl_easy_perform(t.e);
    int r = SBX_OK;
    if (rc != CURLE_OK || curl_easy_getinfo(t.e, CURLINFO_ACTIVESOCKET, &t.sock) != CURLE_OK) {
        r = fail(NULL, "cannot reach sbxd at %s: %s", s->url, curl_easy_strerror(rc));
        goto out;
    }
    if ((r = handshake(s, &t, full)) != SBX_OK)
        goto out;
    static const struct wslay_event_callbacks cb = {.recv_callback = ws_recv,
                                                    .send_callback = ws_send,
                                                    .genmask_callback = ws_mask,
                                                    .on_msg_recv_callback = ws_msg};
    if (wslay_event_context_client_init(&t.ctx, &cb, &t) != 0) {
        r = fail(cmd, "out of memory");
        goto out;
    }
    if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) == 0)
        signal(SIGWINCH, on_winch);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios raw = saved;
        cfmakeraw(&raw);
        raw_on = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
        atexit(raw_off);
        if (announce)
            fprintf(stderr, "sbx: attached to %s; Ctrl-] detaches\r\n", id);
    }
    r = pump(&t);
    raw_off();
    if (t.detached)
        fprintf(stderr, "\nsbx: detached from %s (sbx attach %s to come back)\n", id, id);
    else if (t.exit_code >= 0 && r == SBX_OK)
        r = t.exit_code;
    wslay_event_context_free(t.ctx);
out:
    curl_easy_cleanup(t.e);
    free(full);
    return r;
}

int cmd_attach(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    int c;
    opt_reset();
    if ((c = opt_next(cmd->name, argc, argv, "", NULL)) != -1)
        return c == 'h' ? cmd_print_help(cmd) : SBX_USAGE;
    if (optind != argc - 1)
        return usage_error(cmd->name, "attach takes one process ID");
    return attach(s, cmd->name, argv[optind], true);
}

int cmd_shell(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"cwd", required_argument, NULL, 'C'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *cwd = NULL;
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "C:h", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c != 'C')
            return SBX_USAGE;
        cwd = optarg;
    }
    const char *shell = optind < argc ? argv[optind] : "bash -il";
    if (optind < argc - 1)
        return usage_error(cmd->name, "shell takes one command (quote it)");
    struct winsize ws = {.ws_row = 24, .ws_col = 80};
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_row || !ws.ws_col) {
        ws.ws_row = 24;
        ws.ws_col = 80;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "command", shell);
    if (cwd)
        cJSON_AddStringToObject(o, "cwd", cwd);
    cJSON *pty = cJSON_AddObjectToObject(o, "pty");
    cJSON_AddNumberToObject(pty, "cols", ws.ws_col);
    cJSON_AddNumberToObject(pty, "rows", ws.ws_row);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    struct request req = {.method = "POST", .path = "/processes", .json = body};
    struct response resp;
    int r = http_perform(s, cmd->name, &req, &resp) < 0 ? SBX_FAIL
            : resp.status != 201                        ? http_report(cmd->name, &resp)
                                                        : SBX_OK;
    char id[64] = "";
    snprintf(id, sizeof(id), "%s", str_or(resp.json, "id", ""));
    response_free(&resp);
    free(body);
    if (r != SBX_OK)
        return r;
    if (!id[0])
        return fail(cmd->name, "sbxd's answer has no process id");
    return attach(s, cmd->name, id, true);
}
