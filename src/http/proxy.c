/*
 * proxy.c - /proxy/{port}/{path...}: a reverse proxy to a command's server on a loopback
 * port. Only a listener of a command user's is reached (ports.h: never sbxd's own ports, a
 * code context's kernel, root's or another user's), checked before the connect and again on
 * the socket that took it. Bodies stream both ways, each through one bounded buffer: the
 * request's as libmicrohttpd hands it in (the upstream's slowness stops sbxd reading the
 * client), the answer's as the client takes it (sbxd reads the upstream no faster). The
 * answer is parsed by http-parser; a WebSocket (any 101) upgrade becomes a byte pipe
 * (proxy_pipe.c).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy_answer.h"
#include "proxy_internal.h"
#include "sbxd/jsonw.h"
#include "sbxd/log.h"
#include "sbxd/ports.h"
#include "sbxd/sandbox.h"
#include "sbxd/timeutil.h"

/* ---- connection counts ---- */

static unsigned conns_all;
static uint8_t conns_port[65536];
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;

static bool conn_take(uint16_t port)
{
    pthread_mutex_lock(&conns_lock);
    bool ok = conns_all < PROXY_MAX_CONNS && conns_port[port] < PROXY_MAX_PER_PORT;
    if (ok) {
        conns_all++;
        conns_port[port]++;
    }
    pthread_mutex_unlock(&conns_lock);
    return ok;
}

void proxy_conn_put(uint16_t port)
{
    pthread_mutex_lock(&conns_lock);
    conns_all--;
    conns_port[port]--;
    pthread_mutex_unlock(&conns_lock);
}

_Static_assert(sizeof(((struct sbxd_err *)0)->msg) == PROXY_MSG, "PROXY_MSG holds an error");

/* ---- the upstream connection a client's connection keeps ---- */

/*
 * libmicrohttpd serves each client connection on a thread of its own, its requests one after
 * the other: the upstream connection of a request whose answer was read to its end is kept
 * in that thread for the next request to the same port (kept_take), and closed with the
 * thread. So small requests cost one connect and one look at the socket tables per client
 * connection, not per request; and a kept connection is never handed to another client.
 */
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

struct kept {
    int fd;
    uint16_t port;
};

static void kept_close(void *p)
{
    struct kept *k = p;
    if (k->fd >= 0)
        close(k->fd);
    free(k);
}

static void kept_init(void)
{
    pthread_key_create(&kept_key, kept_close);
}

/* The kept connection to port, if it is still open and quiet (taken: -1 is left); else -1. */
static int kept_take(uint16_t port)
{
    pthread_once(&kept_once, kept_init);
    struct kept *k = pthread_getspecific(kept_key);
    if (!k || k->fd < 0 || k->port != port)
        return -1;
    int fd = k->fd;
    k->fd = -1;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return fd;
    close(fd); /* closed by the upstream, or bytes nobody asked for */
    return -1;
}

static void kept_put(int fd, uint16_t port)
{
    pthread_once(&kept_once, kept_init);
    struct kept *k = pthread_getspecific(kept_key);
    if (!k && (k = malloc(sizeof(*k)))) {
        k->fd = -1;
        if (pthread_setspecific(kept_key, k) != 0) {
            free(k);
            k = NULL;
        }
    }
    if (!k) {
        close(fd);
        return;
    }
    if (k->fd >= 0)
        close(k->fd);
    k->fd = fd;
    k->port = port;
}

/* ---- one proxied request ---- */

struct proxy {
    struct server *srv;
    int fd; /* the upstream, -1 once closed or handed to a pipe */
    uint16_t port;
    bool counted;
    bool head_req;     /* HEAD: the answer has no body whatever its headers say */
    bool chunked_in;   /* the request's body goes on re-chunked */
    bool upgrade_req;  /* the client asked for an upgrade */
    bool failed;       /* the upstream went away while the body was sent: 502 at its end */
    bool reused;       /* fd is the connection kept from this client's last request */
    bool bodyless;     /* the request has no body: a reused connection found closed is retried */
    struct jsonw head; /* the request's head as sent */
    char failure[160];
    char prefix[PROXY_PREFIX_MAX];
    struct proxy_answer *ans;
};

static void proxy_free(void *state, bool completed)
{
    struct proxy *s = state;
    if (s->fd >= 0 && completed && s->ans && pa_reusable(s->ans))
        kept_put(s->fd, s->port);
    else if (s->fd >= 0)
        close(s->fd);
    jw_free(&s->head);
    if (s->counted)
        proxy_conn_put(s->port);
    pa_free(s->ans);
    free(s);
}

/* Write all of buf to fd (blocking, within the socket's send timeout). */
static int send_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Connect to the upstream within ms. */
static int connect_upstream(const struct sockaddr_storage *to, socklen_t len, int ms, int idle_ms)
{
    int fd = socket(to->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)to, len) < 0) {
        if (errno != EINPROGRESS) {
            close(fd);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int e = 0;
        socklen_t el = sizeof(e);
        if (poll(&p, 1, ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
            close(fd);
            errno = e ? e : ETIMEDOUT;
            return -1;
        }
    }
    int flags = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &flags, sizeof(flags));
    struct timeval tv = {.tv_sec = idle_ms / 1000, .tv_usec = (idle_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    /* Blocking from here: the timeouts bound each wait. */
    int one = 0;
    if (ioctl(fd, FIONBIO, &one) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the request's head, to the upstream ---- */

struct head_out {
    struct jsonw w; /* used as a byte buffer (jw_raw) */
    bool token_set;
    const char *conn_tokens; /* the client's Connection header: names it made hop-by-hop */
};

static void put(struct jsonw *w, const char *a, size_t an, const char *b, size_t bn)
{
    jw_raw(w, a, an);
    jw_raw(w, ": ", 2);
    jw_raw(w, b, bn);
    jw_raw(w, "\r\n", 2);
}

/* Whether the client's Connection header lists name (n bytes). */
static bool listed_in(const char *list, const char *name, size_t n)
{
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l == n && strncasecmp(p, name, n) == 0)
            return true;
        p += l;
    }
    return false;
}

static enum MHD_Result copy_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    struct head_out *h = cls;
    if (!value || !proxy_request_header_passes(key, key_size, h->token_set) ||
        listed_in(h->conn_tokens, key, key_size))
        return MHD_YES;
    /* A browser's WebSocket sends sbxd's token as a subprotocol "bearer.TOKEN" (guard.c):
     * the others go on, that one never does. */
    if (key_size == 22 && strncasecmp(key, "Sec-WebSocket-Protocol", 22) == 0) {
        char kept[1024];
        if (proxy_drop_bearer(value, kept, sizeof(kept)) && kept[0])
            put(&h->w, key, key_size, kept, strlen(kept));
        return MHD_YES;
    }
    put(&h->w, key, key_size, value, value_size);
    return MHD_YES;
}

static enum MHD_Result copy_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    struct jsonw *w = cls;
    jw_raw(w, w->buf[w->len - 1] == '?' ? "" : "&", w->buf[w->len - 1] == '?' ? 0 : 1);
    jw_raw(w, key, key_size);
    if (value) {
        jw_raw(w, "=", 1);
        jw_raw(w, value, value_size);
    }
    return MHD_YES;
}

/* A header's value from the client, or NULL. */
static const char *hdr(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

static void build_head(struct proxy *s, struct MHD_Connection *c, struct req_ctx *rc,
                       const char *method, const char *rest, struct jsonw *w)
{
    jw_raw(w, method, strlen(method));
    jw_raw(w, " ", 1);
    jw_raw(w, *rest ? rest : "/", *rest ? strlen(rest) : 1);
    if (MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, NULL, NULL) > 0) {
        jw_raw(w, "?", 1);
        MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, copy_arg, w);
    }
    jw_raw(w, " HTTP/1.1\r\n", 11);
    struct head_out h = {.token_set = s->srv->token_len > 0, .conn_tokens = hdr(c, "Connection")};
    h.w = *w;
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, copy_header, &h);
    *w = h.w;
    /* Where the request came from, so an app can build its links (and its logs say who). */
    const char *xff = hdr(c, "X-Forwarded-For");
    char v[512];
    /* rc->client is "ADDR:PORT" or "[ADDR]:PORT": the address alone, as proxies send it. */
    const char *cl = rc->client;
    size_t cn = strlen(cl);
    const char *colon = strrchr(cl, ':');
    if (cl[0] == '[' && colon && colon > cl && colon[-1] == ']') {
        cl++;
        cn = (size_t)(colon - 1 - cl);
    } else if (colon && strchr(cl, ':') == colon) {
        cn = (size_t)(colon - cl);
    }
    int n = snprintf(v, sizeof(v), "%s%s%.*s", xff ? xff : "", xff ? ", " : "", (int)cn, cl);
    put(w, "X-Forwarded-For", 15, v, (size_t)n < sizeof(v) ? (size_t)n : sizeof(v) - 1);
    const char *proto = hdr(c, "X-Forwarded-Proto");
    put(w, "X-Forwarded-Proto", 17, proto ? proto : "http", strlen(proto ? proto : "http"));
    const char *host = hdr(c, "X-Forwarded-Host");
    if (!host)
        host = hdr(c, "Host");
    if (host)
        put(w, "X-Forwarded-Host", 16, host, strlen(host));
    const char *pre = hdr(c, "X-Forwarded-Prefix");
    n = snprintf(v, sizeof(v), "%s%s", pre ? pre : "", s->prefix);
    put(w, "X-Forwarded-Prefix", 18, v, (size_t)n < sizeof(v) ? (size_t)n : sizeof(v) - 1);
    const char *len = hdr(c, "Content-Length");
    const char *te = hdr(c, "Transfer-Encoding");
    if (len)
        put(w, "Content-Length", 14, len, strlen(len));
    else if (te && strcasestr(te, "chunked")) {
        s->chunked_in = true;
        put(w, "Transfer-Encoding", 17, "chunked", 7);
    }
    const char *up = hdr(c, "Upgrade");
    const char *conn = hdr(c, "Connection");
    if (up && conn && listed_in(conn, "upgrade", 7)) {
        s->upgrade_req = true;
        put(w, "Connection", 10, "Upgrade", 7);
        put(w, "Upgrade", 7, up, strlen(up));
    }
    /* Otherwise kept alive (HTTP/1.1's default): the client's next request to the port may
     * take the same connection (kept_take). */
    jw_raw(w, "\r\n", 2);
}

/* The checked connect, and the head sent on it: 0, or -1 with the answer's status and
 * message (403 when the port is not a command user's, 502 when nothing takes it). */
static int open_fresh(struct proxy *s, unsigned *status, char msg[PROXY_MSG])
{
    struct sockaddr_storage to;
    socklen_t tolen;
    struct sbxd_err err = {0};
    *status = MHD_HTTP_BAD_GATEWAY;
    if (ports_target(s->srv->sb, s->port, &to, &tolen, &err) < 0) {
        if (err.kind == SBXD_E_DENIED)
            *status = MHD_HTTP_FORBIDDEN;
        memcpy(msg, err.msg, PROXY_MSG);
        return -1;
    }
    const struct sbxd_config *cfg = s->srv->cfg;
    s->fd = connect_upstream(&to, tolen, (int)cfg->request_timeout_ms, (int)cfg->idle_timeout_ms);
    if (s->fd < 0) {
        snprintf(msg, PROXY_MSG, "cannot connect to port %u: %s", (unsigned)s->port,
                 strerror(errno));
        return -1;
    }
    if (ports_check_peer(s->srv->sb, s->fd, &err) < 0) {
        *status = MHD_HTTP_FORBIDDEN;
        memcpy(msg, err.msg, PROXY_MSG);
        return -1;
    }
    if (send_all(s->fd, s->head.buf, s->head.len) < 0) {
        snprintf(msg, PROXY_MSG,
                 "the upstream on port %u closed the connection before the "
                 "request was sent",
                 (unsigned)s->port);
        return -1;
    }
    return 0;
}

static enum MHD_Result refuse(struct req_ctx *rc, struct MHD_Connection *c, unsigned status,
                              const char *code, const char *msg)
{
    rc->replied = true;
    return reply_error(c, status, code, "%s", msg);
}

enum MHD_Result proxy_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                            const char *url, const char *method)
{
    uint16_t port;
    const char *rest;
    if (!proxy_parse_url(url, &port, &rest))
        return refuse(rc, c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                      "the proxy's path is /proxy/{port}/...: a port from 1 to 65535");
    if (!*rest) { /* relative links resolve against the directory: "/proxy/8000/" */
        rc->replied = true;
        char to[PROXY_PREFIX_MAX + 2];
        snprintf(to, sizeof(to), "/proxy/%u/", (unsigned)port);
        return reply_error_header(c, MHD_HTTP_MOVED_PERMANENTLY, "MOVED", "Location", to,
                                  "the proxy's root is %s", to);
    }
    if (!conn_take(port)) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "too many proxied connections (at most %u in all, %u to one port)",
                 PROXY_MAX_CONNS, PROXY_MAX_PER_PORT);
        return refuse(rc, c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE", msg);
    }
    struct proxy *s = calloc(1, sizeof(*s));
    if (!s) {
        proxy_conn_put(port);
        return refuse(rc, c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    s->srv = srv;
    s->port = port;
    s->counted = true;
    s->fd = -1;
    s->head_req = strcmp(method, "HEAD") == 0;
    snprintf(s->prefix, sizeof(s->prefix), "/proxy/%u", (unsigned)port);
    rc->state = s;
    rc->state_free = proxy_free;
    jw_init(&s->head, 1024);
    build_head(s, c, rc, method, rest, &s->head);
    if (s->head.failed || s->head.len > PROXY_HEAD_MAX)
        return refuse(rc, c, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "INVALID_ARGUMENT",
                      "the request's head is over 64 KiB");
    s->bodyless = !s->chunked_in && !hdr(c, "Content-Length");
    /* This client's connection to the same port, kept from its last request: no new look, no
     * new connect (the socket it reaches was checked when it was made). */
    if (!s->upgrade_req && (s->fd = kept_take(port)) >= 0) {
        s->reused = true;
        if (send_all(s->fd, s->head.buf, s->head.len) == 0)
            return MHD_YES;
        close(s->fd); /* the upstream closed it meanwhile: a fresh one */
        s->fd = -1;
        s->reused = false;
    }
    unsigned status;
    char msg[PROXY_MSG];
    if (open_fresh(s, &status, msg) < 0)
        return refuse(rc, c, status,
                      status == MHD_HTTP_FORBIDDEN ? "PERMISSION_DENIED" : "BAD_GATEWAY", msg);
    return MHD_YES;
}

enum MHD_Result proxy_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                           const char *data, size_t n)
{
    (void)srv;
    (void)c;
    struct proxy *s = rc->state;
    if (!s || s->failed)
        return MHD_YES; /* read and dropped: the answer (502) comes at the end */
    char size[24];
    int sl = snprintf(size, sizeof(size), "%zx\r\n", n);
    if ((s->chunked_in && send_all(s->fd, size, (size_t)sl) < 0) || send_all(s->fd, data, n) < 0 ||
        (s->chunked_in && send_all(s->fd, "\r\n", 2) < 0)) {
        s->failed = true;
        snprintf(s->failure, sizeof(s->failure),
                 "the upstream on port %u stopped taking the request's body: %s", (unsigned)s->port,
                 strerror(errno));
    }
    return MHD_YES;
}

/* ---- the answer, from the upstream ---- */

static ssize_t proxy_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct proxy *s = cls;
    ssize_t n = pa_body(s->ans, s->fd, out, max);
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

/* The answer's headers onto r, rewritten for the prefix. */
static void answer_headers(struct proxy *s, struct MHD_Response *r, bool upgrade)
{
    for (unsigned i = 0; i < pa_nheaders(s->ans); i++) {
        const char *name, *value;
        pa_header(s->ans, i, &name, &value);
        if (!proxy_answer_header_passes(name, strlen(name), upgrade))
            continue;
        char v[4096];
        if (strcasecmp(name, "Location") == 0 || strcasecmp(name, "Content-Location") == 0) {
            if (proxy_rewrite_location(value, s->prefix, s->port, v, sizeof(v)))
                value = v;
        } else if (strcasecmp(name, "Set-Cookie") == 0) {
            if (proxy_rewrite_cookie(value, s->prefix, v, sizeof(v)))
                value = v;
        }
        MHD_add_response_header(r, name, value);
    }
}

static void upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
                     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void)c;
    (void)req_cls;
    struct proxy *s = cls;
    int up = s->fd;
    /* libmicrohttpd corks the socket around its answers and may leave it so: frames go out as
     * they are made (a key's echo waited out the delayed ACK: 44 ms). */
    http_socket_uncork(sock);
    s->fd = -1;
    s->counted = false; /* the pipe gives it back */
    const char *rest;
    size_t nrest;
    pa_rest(s->ans, &rest, &nrest);
    if (proxy_pipe_start(s->srv, sock, urh, up, extra_in, extra_in_size, rest, nrest, s->port) <
        0) {
        close(up);
        proxy_conn_put(s->port);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    }
}

enum MHD_Result proxy_end(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)srv;
    struct proxy *s = rc->state;
    if (s->failed)
        return reply_error(c, MHD_HTTP_BAD_GATEWAY, "BAD_GATEWAY", "%s", s->failure);
    if (s->chunked_in && send_all(s->fd, "0\r\n\r\n", 5) < 0)
        return reply_error(c, MHD_HTTP_BAD_GATEWAY, "BAD_GATEWAY",
                           "the upstream on port %u closed before the request's end",
                           (unsigned)s->port);
    static const char *const why[] = {
        [PA_HEAD_TOO_LARGE] = "the upstream's answer head is over 64 KiB",
        [PA_HEAD_NOT_HTTP] = "the upstream's answer is not HTTP",
        [PA_HEAD_TIMEOUT] = "the upstream sent no answer within --idle-timeout-ms",
        [PA_HEAD_CLOSED] = "the upstream closed the connection without an answer",
    };
    enum pa_head h = (s->ans = pa_new(s->head_req)) ? pa_head(s->ans, s->fd) : PA_HEAD_CLOSED;
    if (h == PA_HEAD_CLOSED && s->reused && s->bodyless && pa_untouched(s->ans)) {
        /* The kept connection was closed by the upstream as the request went out: once more,
         * on a fresh one (a request without a body, so nothing was lost). */
        unsigned status;
        char msg[PROXY_MSG];
        close(s->fd);
        s->fd = -1;
        s->reused = false;
        pa_free(s->ans);
        s->ans = NULL;
        if (open_fresh(s, &status, msg) < 0)
            return reply_error(c, status,
                               status == MHD_HTTP_FORBIDDEN ? "PERMISSION_DENIED" : "BAD_GATEWAY",
                               "%s", msg);
        h = (s->ans = pa_new(s->head_req)) ? pa_head(s->ans, s->fd) : PA_HEAD_CLOSED;
    }
    if (h != PA_HEAD_OK)
        return reply_error(c, MHD_HTTP_BAD_GATEWAY, "BAD_GATEWAY", "%s (port %u)", why[h],
                           (unsigned)s->port);
    unsigned status = pa_status(s->ans);
    struct MHD_Response *r;
    bool upgrade = status == 101 && s->upgrade_req;
    if (upgrade)
        r = MHD_create_response_for_upgrade(upgraded, s);
    else if (status == 101)
        return reply_error(c, MHD_HTTP_BAD_GATEWAY, "BAD_GATEWAY",
                           "the upstream switched protocols unasked (port %u)", (unsigned)s->port);
    else {
        uint64_t size = MHD_SIZE_UNKNOWN;
        if (status == 204 || status == 304)
            size = 0;
        else if (pa_length(s->ans) >= 0) /* a HEAD's too: libmicrohttpd sends no body to it */
            size = (uint64_t)pa_length(s->ans);
        r = NULL;
        /* A small body of a known length is read whole first: libmicrohttpd sends a buffer's
         * head and body in one call (a callback's in two). */
        char small[PROXY_SMALL];
        if (!s->head_req && size > 0 && size <= sizeof(small)) {
            size_t got = 0;
            ssize_t k = 1;
            while (got < size && (k = pa_body(s->ans, s->fd, small + got, size - got)) > 0)
                got += (size_t)k;
            if (got != size)
                return reply_error(c, MHD_HTTP_BAD_GATEWAY, "BAD_GATEWAY",
                                   "the upstream on port %u closed before its answer's end",
                                   (unsigned)s->port);
            r = MHD_create_response_from_buffer(got, small, MHD_RESPMEM_MUST_COPY);
        } else {
            /* Under sbxd's 64 KiB mapping threshold unless the body is that large: a small
             * answer's buffer comes from the heap, not from a mapping of its own. */
            size_t block = size == MHD_SIZE_UNKNOWN ? PROXY_BUF / 2
                           : size < PROXY_BUF       ? (size_t)(size ? size : 1)
                           : size < PROXY_BIG       ? PROXY_BUF
                                                    : PROXY_BIG_BUF;
            r = MHD_create_response_from_callback(size, block, proxy_read, s, NULL);
        }
    }
    if (!r)
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    answer_headers(s, r, upgrade);
    rc->status = status;
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}
