/*
 * ws_tty.c - GET /processes/{id}/tty: a background process's terminal over a WebSocket
 * (RFC 6455, framed by wslay). Binary frames carry keystrokes in and output out; text frames
 * are control messages, JSON objects with a "type": in, "resize" {rows, cols}, "input"
 * {data}, "signal" {signal}; out, "exit" {status, exit_code, signal} when the process ends,
 * "dropped" {from, to} when the ring no longer held what was asked for, "error" {message}.
 *
 * ?since=OFFSET replays the ring from there, as /output does (default 0: all it holds).
 * Several viewers may attach; the first to send input, a resize or a signal is the writer
 * until it leaves, and the others' are refused with an "error" message. Closing the socket
 * leaves the process running (DELETE /processes/{id} ends it).
 *
 * Each connection has two threads: one reads the ring (bg_read waits for output) and queues
 * frames, the other moves frames over the socket and takes what the viewer sends; a pipe
 * wakes the second when the first queued something. At most WS_QUEUE_MAX bytes wait for a
 * slow viewer: the ring's reader waits for it (the process never does: the ring keeps
 * taking its output).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "http_internal.h"
#include "sbxd/background.h"
#include "sbxd/base64.h"
#include "sbxd/jsonw.h"
#include "sbxd/sandbox.h"
#include "sbxd/wsaccept.h"
#include "sbxd/timeutil.h"

#define WS_QUEUE_MAX   (1 << 20) /* output bytes queued for a viewer */
#define WS_MSG_MAX     (1 << 20) /* a message from the viewer */
#define WS_READ_CHUNK  32768
#define WS_STDIN_MS    5000
#define WS_WRITERS_MAX 256

/* Who writes to which process: one viewer each. */
static struct {
    pthread_mutex_t lock;
    struct {
        const struct bg_proc *p;
        const void *viewer;
    } v[WS_WRITERS_MAX];
} writers = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether viewer is (or now becomes) p's writer. */
static bool writer_take(const struct bg_proc *p, const void *viewer)
{
    pthread_mutex_lock(&writers.lock);
    int free_at = -1;
    bool ok = false, found = false;
    for (int i = 0; i < WS_WRITERS_MAX && !found; i++) {
        if (writers.v[i].p == p) {
            found = true;
            ok = writers.v[i].viewer == viewer;
        } else if (!writers.v[i].p && free_at < 0) {
            free_at = i;
        }
    }
    if (!found && free_at >= 0) {
        writers.v[free_at].p = p;
        writers.v[free_at].viewer = viewer;
        ok = true;
    }
    pthread_mutex_unlock(&writers.lock);
    return ok;
}

static void writer_leave(const void *viewer)
{
    pthread_mutex_lock(&writers.lock);
    for (int i = 0; i < WS_WRITERS_MAX; i++)
        if (writers.v[i].viewer == viewer)
            writers.v[i].p = writers.v[i].viewer = NULL;
    pthread_mutex_unlock(&writers.lock);
}

struct tty {
    struct server *srv;
    struct bg_proc *p; /* a reference */
    uint64_t off;
    int sock;
    struct MHD_UpgradeResponseHandle *urh;
    int wake[2];          /* the ring's reader -> the socket's thread */
    pthread_mutex_t lock; /* ctx, and the fields below */
    pthread_cond_t room;
    wslay_event_context_ptr ctx;
    bool closing; /* the socket's side is over: the ring's reader stops */
    bool ended;   /* the process's end is queued: the close follows once all is out (wslay
                   * sends a control frame before the data frames queued ahead of it) */
    bool closed;  /* the close frame is queued */
};

static void wake(struct tty *t)
{
    char b = 1;
    ssize_t k = write(t->wake[1], &b, 1);
    (void)k; /* a full pipe already wakes it */
}

/* Queue a frame (under t->lock). */
static void queue(struct tty *t, uint8_t opcode, const void *data, size_t n)
{
    struct wslay_event_msg m = {.opcode = opcode, .msg = data, .msg_length = n};
    wslay_event_queue_msg(t->ctx, &m);
}

static void queue_json(struct tty *t, struct jsonw *w)
{
    if (!w->failed)
        queue(t, WSLAY_TEXT_FRAME, w->buf, w->len);
    jw_free(w);
}

static void send_error(struct tty *t, const char *msg)
{
    struct jsonw w;
    jw_init(&w, 128);
    jw_obj_begin(&w);
    jw_key(&w, "type");
    jw_str(&w, "error");
    jw_key(&w, "message");
    jw_str(&w, msg);
    jw_obj_end(&w);
    queue_json(t, &w);
}

/* The ring's reader: output as binary frames, then the exit. */
static void *ring_main(void *arg)
{
    struct tty *t = arg;
    char *buf = malloc(WS_READ_CHUNK);
    while (buf) {
        pthread_mutex_lock(&t->lock);
        while (!t->closing && wslay_event_get_queued_msg_length(t->ctx) > WS_QUEUE_MAX)
            pthread_cond_wait(&t->room, &t->lock);
        bool stop = t->closing;
        pthread_mutex_unlock(&t->lock);
        if (stop)
            break;
        size_t n;
        int stream;
        uint64_t next;
        enum bg_read_result r =
            bg_read(t->p, t->off, buf, WS_READ_CHUNK, false, 250, &n, &stream, &next);
        pthread_mutex_lock(&t->lock);
        struct jsonw w;
        if (r == BG_READ_DATA) {
            queue(t, WSLAY_BINARY_FRAME, buf, n);
            t->off = next;
        } else if (r == BG_READ_DROPPED) {
            jw_init(&w, 96);
            jw_obj_begin(&w);
            jw_key(&w, "type");
            jw_str(&w, "dropped");
            jw_key(&w, "from");
            jw_uint(&w, t->off);
            jw_key(&w, "to");
            jw_uint(&w, next);
            jw_obj_end(&w);
            queue_json(t, &w);
            t->off = next;
        } else if (r == BG_READ_END) {
            struct bg_info in;
            bg_info(t->p, &in);
            jw_init(&w, 160);
            jw_obj_begin(&w);
            jw_key(&w, "type");
            jw_str(&w, "exit");
            jw_key(&w, "status");
            jw_str(&w, job_status_name(in.res.status));
            jw_key(&w, "exit_code");
            jw_int(&w, in.res.exit_code);
            jw_key(&w, "signal");
            jw_int(&w, in.res.signal);
            jw_key(&w, "offset");
            jw_uint(&w, t->off);
            jw_obj_end(&w);
            queue_json(t, &w);
            t->ended = true; /* the close follows once all of it is out */
        }
        pthread_mutex_unlock(&t->lock);
        if (r != BG_READ_NONE)
            wake(t);
        if (r == BG_READ_END)
            break;
    }
    free(buf);
    return NULL;
}

/* A control message from the viewer (under t->lock). */
static void control(struct tty *t, const char *text, size_t n)
{
    struct ws_control m;
    char why[256];
    struct sbxd_err err = {0};
    int rc = 0;
    uint64_t written;
    bool open_after;
    if (ws_control_parse(text, n, &m, why, sizeof(why)) < 0) {
        send_error(t, why);
        return;
    }
    if (!writer_take(t->p, t))
        send_error(t, "another viewer is this terminal's writer");
    else if (m.kind == WS_CTL_RESIZE)
        rc = bg_resize(t->p, m.cols, m.rows, &err);
    else if (m.kind == WS_CTL_INPUT)
        rc = bg_stdin(t->p, m.data, m.data_len, false, WS_STDIN_MS, -1, &written, &open_after,
                      &err) == BG_STDIN_DONE
                 ? 0
                 : -1;
    else
        rc = bg_signal(t->p, m.signal, &err);
    if (rc < 0)
        send_error(t, err.msg[0] ? err.msg : "the process did not take it");
    free(m.data);
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                   void *user)
{
    (void)ctx;
    struct tty *t = user;
    if (arg->opcode == WSLAY_TEXT_FRAME) {
        control(t, (const char *)arg->msg, arg->msg_length);
    } else if (arg->opcode == WSLAY_BINARY_FRAME && arg->msg_length) {
        struct sbxd_err err = {0};
        uint64_t written;
        bool open_after;
        if (!writer_take(t->p, t))
            send_error(t, "another viewer is this terminal's writer");
        else if (bg_stdin(t->p, arg->msg, arg->msg_length, false, WS_STDIN_MS, -1, &written,
                          &open_after, &err) != BG_STDIN_DONE)
            send_error(t, err.msg[0] ? err.msg : "the process did not take the input");
    }
}

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    (void)flags;
    struct tty *t = user;
    ssize_t k;
    do
        k = recv(t->sock, buf, len, MSG_DONTWAIT);
    while (k < 0 && errno == EINTR);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    else if (k <= 0)
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return k > 0 ? k : -1;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    (void)flags;
    struct tty *t = user;
    ssize_t k;
    do
        k = send(t->sock, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    else if (k < 0)
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return k;
}

static void tty_free(struct tty *t)
{
    wslay_event_context_free(t->ctx);
    close(t->wake[0]);
    close(t->wake[1]);
    pthread_cond_destroy(&t->room);
    pthread_mutex_destroy(&t->lock);
    bg_put(t->p);
    server_stream_release(t->srv);
    free(t);
}

/* The 101 never went out (the client left first): the handler was not called. */
static void tty_abandon(void *state, bool completed)
{
    (void)completed;
    tty_free(state);
}

static void *sock_main(void *arg)
{
    struct tty *t = arg;
    pthread_t ring;
    bool ring_up = pthread_create(&ring, NULL, ring_main, t) == 0;
    bool going_away = false;
    int64_t gone_by = 0; /* after the going-away close, the viewer's answer is waited for 1 s */
    for (;;) {
        pthread_mutex_lock(&t->lock);
        bool rd = wslay_event_want_read(t->ctx), wr = wslay_event_want_write(t->ctx);
        pthread_mutex_unlock(&t->lock);
        if (!rd && !wr)
            break;
        struct pollfd f[2] = {
            {.fd = t->sock, .events = (short)((rd ? POLLIN : 0) | (wr ? POLLOUT : 0))},
            {.fd = t->wake[0], .events = POLLIN}};
        int k = poll(f, 2, 250);
        if (k < 0 && errno != EINTR)
            break;
        if (!going_away && sandbox_draining(t->srv->sb)) {
            going_away = true;
            gone_by = time_mono_ns() + 1000000000LL;
            pthread_mutex_lock(&t->lock);
            wslay_event_queue_close(t->ctx, WSLAY_CODE_GOING_AWAY, NULL, 0);
            pthread_mutex_unlock(&t->lock);
        }
        if (going_away && time_mono_ns() > gone_by)
            break;
        if (f[1].revents & POLLIN) {
            char drain[64];
            while (read(t->wake[0], drain, sizeof(drain)) > 0)
                ;
        }
        pthread_mutex_lock(&t->lock);
        int e = 0;
        if (f[0].revents & (POLLIN | POLLHUP | POLLERR))
            e = wslay_event_recv(t->ctx);
        if (!e && wslay_event_want_write(t->ctx))
            e = wslay_event_send(t->ctx);
        if (!e && t->ended && !t->closed && wslay_event_get_queued_msg_count(t->ctx) == 0) {
            t->closed = true;
            wslay_event_queue_close(t->ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
            e = wslay_event_send(t->ctx);
        }
        if (wslay_event_get_queued_msg_length(t->ctx) <= WS_QUEUE_MAX)
            pthread_cond_signal(&t->room);
        pthread_mutex_unlock(&t->lock);
        if (e)
            break;
    }
    /* The viewer is gone: another may write at once (the ring's reader may take up to its
     * wait to notice). */
    writer_leave(t);
    pthread_mutex_lock(&t->lock);
    t->closing = true;
    pthread_cond_signal(&t->room);
    pthread_mutex_unlock(&t->lock);
    if (ring_up)
        pthread_join(ring, NULL);
    MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
    tty_free(t);
    return NULL;
}

static void tty_upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
                         size_t extra_in_size, MHD_socket sock,
                         struct MHD_UpgradeResponseHandle *urh)
{
    (void)c;
    (void)extra_in;
    (void)extra_in_size; /* a client waits for the 101 before it sends frames */
    struct tty *t = cls;
    struct req_ctx *rc = req_cls;
    /* libmicrohttpd corks the socket around its answers and may leave it so: frames go out as
     * they are made (a key's echo waited out the delayed ACK: 44 ms). */
    http_socket_uncork(sock);
    rc->state = NULL; /* the socket's thread has it now */
    rc->state_free = NULL;
    t->sock = sock;
    t->urh = urh;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, SBXD_THREAD_STACK);
    pthread_t th;
    if (pthread_create(&th, &a, sock_main, t) != 0) {
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        tty_free(t);
    }
    pthread_attr_destroy(&a);
}

/* Whether the comma list holds word (case aside). */
static bool has_token(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l == n && strncasecmp(p, word, n) == 0)
            return true;
        p += l;
    }
    return false;
}

enum MHD_Result ws_tty_open(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                            struct bg_proc *p, uint64_t since, bool *kept)
{
    *kept = false;
    const char *up = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
    const char *conn = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connection");
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    const char *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version");
    const char *proto = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
    uint8_t raw[24];
    if (!up || !has_token(up, "websocket") || !conn || !has_token(conn, "upgrade"))
        return reply_error_header(c, MHD_HTTP_UPGRADE_REQUIRED, "UPGRADE_REQUIRED", "Upgrade",
                                  "websocket",
                                  "the terminal is a WebSocket: GET with 'Upgrade: websocket'");
    if (!ver || strcmp(ver, "13") != 0)
        return reply_error_header(c, MHD_HTTP_UPGRADE_REQUIRED, "UPGRADE_REQUIRED",
                                  "Sec-WebSocket-Version", "13",
                                  "only WebSocket version 13 is spoken");
    if (!key || strlen(key) != 24 || base64_decode(key, 24, raw) != 16)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "Sec-WebSocket-Key must be 16 bytes in base64");
    char acc[WS_ACCEPT_LEN + 1];
    const char *why = ws_accept_of(key, acc);
    if (why)
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE", "%s", why);
    struct tty *t = calloc(1, sizeof(*t));
    if (!t || pipe2(t->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        free(t);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of resources");
    }
    static const struct wslay_event_callbacks cb = {
        .recv_callback = on_recv, .send_callback = on_send, .on_msg_recv_callback = on_msg};
    if (wslay_event_context_server_init(&t->ctx, &cb, t) != 0) {
        close(t->wake[0]);
        close(t->wake[1]);
        free(t);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    wslay_event_config_set_max_recv_msg_length(t->ctx, WS_MSG_MAX);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->room, NULL);
    t->srv = srv;
    t->p = p;
    t->off = since;
    struct MHD_Response *r = MHD_create_response_for_upgrade(tty_upgraded, t);
    MHD_add_response_header(r, "Upgrade", "websocket");
    MHD_add_response_header(r, "Sec-WebSocket-Accept", acc);
    /* A browser sends its token as the subprotocol "bearer.TOKEN" beside "sbxd.tty": the
     * answer names sbxd.tty, never the token. */
    if (proto && has_token(proto, "sbxd.tty"))
        MHD_add_response_header(r, "Sec-WebSocket-Protocol", "sbxd.tty");
    server_stream_hold(srv); /* until the socket's thread ends */
    *kept = true;            /* p's reference is the terminal's now */
    rc->state = t;
    rc->state_free = tty_abandon;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, r);
    MHD_destroy_response(r);
    return ret;
}
