/*
 * guard.c - what stands between the network and the routes: the connection caps (in all, and
 * per client address), the deadline for a request to arrive, the size of a request's head,
 * the bearer token, and what a web page may send (web_internal.h).
 *
 * Every open connection has an entry here from its accept (accept.c asks guard_admit) to
 * libmicrohttpd's "closed" notice; the entry is removed before libmicrohttpd closes the
 * socket, so the watchdog, which holds the same lock, never touches a descriptor that could
 * have been reused. Until libmicrohttpd's "started" notice claims it, an entry is "unclaimed":
 * nothing is ever done to its descriptor (libmicrohttpd may have closed it on a failure it
 * does not report), and one left unclaimed is dropped.
 *
 * At a cap, a new connection takes the place of the one that has waited longest for a request
 * (from the same address at the per-address cap, from any at the total one): that one is shut
 * down, and the new one (a health probe, say) is served. Only when every connection is busy
 * is the new one refused, with an answer, or beyond SBXD_CONN_SPARE closed at accept. While
 * sbxd waits for a request (its head, or a JSON body) the connection has a deadline; a client
 * that trickles bytes to hold it open (slowloris) is answered 408 by the watchdog and its
 * socket shut down, which ends libmicrohttpd's read on it. No response can be on its way then:
 * one is only queued after the request is in, and queueing clears "waiting" first.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "sbxd/auth.h"
#include "http_internal.h"
#include "sbxd/log.h"
#include "mcp_http.h"
#include "sbxd/metrics.h"
#include "sbxd/timeutil.h"
#include "web_internal.h"
#include "sbxd/server.h"

/* A connection over a cap gets this long to send its request, which is then answered with the
 * refusal; one that sends nothing is refused by the watchdog when it runs out. */
#define REJECT_GRACE_NS 1000000000LL
#define TICK_NS         100000000LL
/* An entry libmicrohttpd has not claimed within this was closed by it unannounced. */
#define UNCLAIMED_NS 2000000000LL

struct conn {
    struct conn *prev, *next;
    int fd;
    int family;
    unsigned char addr[16];
    int64_t deadline_ns;
    int64_t since_ns;          /* accepted, or waiting again for a request since */
    bool claimed;              /* libmicrohttpd's "started" notice came: fd is its socket */
    bool waiting;              /* sbxd waits for a request: the deadline applies */
    bool killed;               /* shut down: by the watchdog, or to make room */
    bool linger;               /* answered before the request was all in: linger at close */
    bool begun;                /* a request line came, and its answer is not out yet */
    enum metrics_limit reject; /* LIM_N: within the caps */
};

void guard_init(struct server *srv)
{
    pthread_mutex_init(&srv->guard_lock, NULL);
}

static void unlink_conn(struct server *srv, struct conn *k)
{
    if (k->prev)
        k->prev->next = k->next;
    else
        srv->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    srv->conns_open--;
}

void guard_destroy(struct server *srv)
{
    pthread_mutex_lock(&srv->guard_lock);
    while (srv->conns) {
        struct conn *n = srv->conns->next;
        free(srv->conns);
        srv->conns = n;
    }
    pthread_mutex_unlock(&srv->guard_lock);
    pthread_mutex_destroy(&srv->guard_lock);
}

static void client_addr(const struct sockaddr *sa, struct conn *k)
{
    if (!sa)
        return;
    k->family = sa->sa_family;
    if (k->family == AF_INET)
        memcpy(k->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else if (k->family == AF_INET6)
        memcpy(k->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

static bool same_client(const struct conn *a, const struct conn *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

static int64_t wait_ns(const struct server *srv)
{
    return (int64_t)srv->cfg->request_timeout_ms * 1000000;
}

/* Make room by shutting down the connection that has waited longest for a request, of the
 * client of `like` (or of any client, when like is NULL). Lock held. */
static bool evict_oldest(struct server *srv, const struct conn *like)
{
    struct conn *victim = NULL;
    for (struct conn *o = srv->conns; o; o = o->next)
        if (o->claimed && o->waiting && !o->killed && (!like || same_client(o, like)) &&
            (!victim || o->since_ns < victim->since_ns))
            victim = o;
    if (!victim)
        return false;
    victim->killed = true; /* no answer: it asked nothing; the close is its answer */
    shutdown(victim->fd, SHUT_RDWR);
    __atomic_add_fetch(&srv->conns_evicted, 1, __ATOMIC_RELAXED);
    return true;
}

enum metrics_limit guard_admit(struct server *srv, int fd, const struct sockaddr *sa)
{
    struct conn *k = calloc(1, sizeof(*k));
    if (!k)
        return LIM_MAX_CONNECTIONS;
    k->fd = fd;
    client_addr(sa, k);
    k->waiting = true;
    k->reject = LIM_N;
    int64_t now = time_mono_ns();
    k->since_ns = now;
    pthread_mutex_lock(&srv->guard_lock);
    unsigned live = 0, same = 0, total = 0;
    for (struct conn *o = srv->conns, *next; o; o = next) {
        next = o->next;
        if (!o->claimed && (o->fd == fd || now - o->since_ns > UNCLAIMED_NS)) {
            /* Closed by libmicrohttpd before it ever announced it: fd is free again. */
            unlink_conn(srv, o);
            free(o);
            continue;
        }
        total++;
        if (!o->killed) {
            live++;
            same += same_client(o, k);
        }
    }
    const struct sbxd_config *cfg = srv->cfg;
    enum metrics_limit shed = LIM_N;
    /* Room is made until the new one fits (more than one may have to go when the connections
     * over the cap were let in as refused ones). */
    while (same >= cfg->max_client_connections && k->reject == LIM_N) {
        if (evict_oldest(srv, k)) {
            same--;
            live--;
        } else {
            k->reject = LIM_CLIENT_CONNECTIONS;
        }
    }
    while (live >= cfg->max_connections && k->reject == LIM_N) {
        if (evict_oldest(srv, NULL))
            live--;
        else
            k->reject = LIM_MAX_CONNECTIONS;
    }
    /* Beyond the spare ones (which get an answer, and health checks are served), or with
     * as many sockets open as libmicrohttpd is told to take: closed at once. */
    if ((k->reject != LIM_N && live >= cfg->max_connections + SBXD_CONN_SPARE) ||
        total >= server_conn_hard_limit(cfg))
        shed = k->reject != LIM_N ? k->reject : LIM_MAX_CONNECTIONS;
    if (shed != LIM_N) {
        pthread_mutex_unlock(&srv->guard_lock);
        free(k);
        return shed;
    }
    k->deadline_ns = now + (k->reject == LIM_N ? wait_ns(srv) : REJECT_GRACE_NS);
    k->next = srv->conns;
    if (k->next)
        k->next->prev = k;
    srv->conns = k;
    srv->conns_open++;
    pthread_mutex_unlock(&srv->guard_lock);
    return LIM_N;
}

void guard_forget(struct server *srv, int fd)
{
    pthread_mutex_lock(&srv->guard_lock);
    for (struct conn *o = srv->conns; o; o = o->next)
        if (!o->claimed && o->fd == fd) {
            unlink_conn(srv, o);
            free(o);
            break;
        }
    pthread_mutex_unlock(&srv->guard_lock);
}

void guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                  enum MHD_ConnectionNotificationCode code)
{
    struct server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct conn *k = *socket_context;
        if (!k)
            return;
        pthread_mutex_lock(&srv->guard_lock);
        unlink_conn(srv, k);
        /* Answered before its request was all in (or closed by libmicrohttpd mid-request, as
         * when a head outgrows its buffer): the client may still be sending, and a close
         * with its bytes unread would reset the connection under the answer. */
        bool linger = !k->killed && (k->linger || (k->waiting && k->begun));
        pthread_mutex_unlock(&srv->guard_lock);
        if (linger && k->fd >= 0) {
            int d = fcntl(k->fd, F_DUPFD_CLOEXEC, 0);
            if (d >= 0)
                front_linger(srv, d);
        }
        free(k);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    struct conn *k = NULL;
    pthread_mutex_lock(&srv->guard_lock);
    for (struct conn *o = srv->conns; o; o = o->next)
        if (!o->claimed && o->fd == fd) {
            k = o;
            k->claimed = true;
            break;
        }
    pthread_mutex_unlock(&srv->guard_lock);
    *socket_context = k; /* NULL (never: accept.c admits every socket): idle timeout only */
}

static struct conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The refusal of a limit: status, code and sentence. */
static unsigned refusal(const struct server *srv, enum metrics_limit l, const char **code,
                        char *msg, size_t len)
{
    const struct sbxd_config *cfg = srv->cfg;
    switch (l) {
    case LIM_MAX_CONNECTIONS:
        *code = "UNAVAILABLE";
        snprintf(msg, len,
                 "sbxd has %llu connections open already (--max-connections); retry "
                 "later",
                 (unsigned long long)cfg->max_connections);
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case LIM_CLIENT_CONNECTIONS:
        *code = "RESOURCE_EXHAUSTED";
        snprintf(msg, len,
                 "this client has %llu connections open already "
                 "(--max-client-connections); close some or retry later",
                 (unsigned long long)cfg->max_client_connections);
        return MHD_HTTP_TOO_MANY_REQUESTS;
    default:
        *code = "REQUEST_TIMEOUT";
        snprintf(msg, len, "the request did not arrive within %llu ms (--request-timeout-ms)",
                 (unsigned long long)cfg->request_timeout_ms);
        return MHD_HTTP_REQUEST_TIMEOUT;
    }
}

static const char *reason_phrase(unsigned status)
{
    switch (status) {
    case 408:
        return "Request Timeout";
    case 429:
        return "Too Many Requests";
    default:
        return "Service Unavailable";
    }
}

/* Answer a connection nobody is reading a request from, and shut it down (lock held). */
static void answer_and_shut(struct server *srv, struct conn *k)
{
    enum metrics_limit l = k->reject != LIM_N ? k->reject : LIM_REQUEST_TIMEOUT;
    const char *code;
    char msg[256], body[400], out[640];
    unsigned status = refusal(srv, l, &code, msg, sizeof(msg));
    int bl = snprintf(body, sizeof(body), "{\"code\":\"%s\",\"message\":\"%s\"}\n", code, msg);
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     "Connection: close\r\n%s\r\n%s",
                     status, reason_phrase(status), bl,
                     status == MHD_HTTP_REQUEST_TIMEOUT ? "" : "Retry-After: 1\r\n", body);
    k->killed = true;
    metrics_limit(l);
    if (k->fd < 0)
        return;
    /* Best effort and never blocking: a client that does not read gets the shutdown alone. */
    if (send(k->fd, out, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* nothing more to do for it */
    }
    shutdown(k->fd, SHUT_RDWR);
}

void server_tick(struct server *srv)
{
    int64_t now = time_mono_ns();
    if (now - srv->guard_tick_ns < TICK_NS)
        return;
    srv->guard_tick_ns = now;
    unsigned cut = 0;
    pthread_mutex_lock(&srv->guard_lock);
    for (struct conn *k = srv->conns; k; k = k->next)
        if (k->claimed && k->waiting && !k->killed && k->deadline_ns && now > k->deadline_ns) {
            answer_and_shut(srv, k);
            cut++;
        }
    pthread_mutex_unlock(&srv->guard_lock);
    if (cut)
        LOG_EVENT("info", "connections", LOG_S("action", "cut off"), LOG_I("count", cut),
                  LOG_S("why", "no request in time, or over a connection cap"));
}

unsigned server_connections(struct server *srv)
{
    pthread_mutex_lock(&srv->guard_lock);
    unsigned n = srv->conns_open;
    pthread_mutex_unlock(&srv->guard_lock);
    return n;
}

static bool health_route(const char *url, const char *method)
{
    return strcmp(url, "/healthz") == 0 || strcmp(url, "/v1/health") == 0 ||
           (strcmp(url, "/") == 0 && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0));
}

static enum MHD_Result add_header_len(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4; /* ": " and CRLF */
    return MHD_YES;
}

/*
 * A web page in a person's browser must not drive sbxd (web_internal.h): a page of another site
 * posts to 127.0.0.1:8888 without a preflight, and a page whose name was rebound to this address
 * reads the answers too. Every route, the health checks included, before the token and
 * before any route is chosen: a request with a foreign Origin, (without a token, which no
 * page can know) a Host naming what only such a page would name, or a browser's POST that
 * needed no preflight (a form's, text/plain, none: from a page this machine serves too),
 * gets 403 and nothing else. True when it was refused (*ret is the answer).
 */
static bool web_refused(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                        enum MHD_Result *ret)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *site = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Site");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    char msg[512];
    if (!web_origin_allowed(srv->cfg->allow_origin, origin))
        snprintf(msg, sizeof(msg),
                 "Origin '%.128s' is not allowed: sbxd serves web pages of this machine only "
                 "(http(s)://localhost, 127.0.0.1, [::1]) and those --allow-origin names",
                 origin);
    else if (!srv->token_len && !web_host_allowed(srv->cfg->allow_host, host))
        snprintf(msg, sizeof(msg),
                 "Host '%.128s' is not a name sbxd answers to without a token (DNS "
                 "rebinding): ask by IP address, localhost or the cluster's name, or name it "
                 "in --allow-host",
                 host);
    else if (web_is_browser(origin, site) && web_simple_post(rc->method, ct))
        snprintf(msg, sizeof(msg),
                 "a browser's POST with %s%.100s%s is one a web page sends without asking "
                 "first, and sbxd takes none: send JSON as application/json",
                 ct ? "Content-Type '" : "no Content-Type", ct ? ct : "", ct ? "'" : "");
    else
        return false;
    metrics_limit(LIM_WEB_PAGE);
    *ret = rc->route && rc->route->fn == route_mcp
               ? mcp_reply_forbidden(c, msg)
               : reply_error(c, MHD_HTTP_FORBIDDEN, "PERMISSION_DENIED", "%s", msg);
    return true;
}

/* The bearer token the request carries: its Authorization header, or, on a WebSocket
 * handshake (a browser's WebSocket cannot send that header), a subprotocol "bearer.TOKEN"
 * in Sec-WebSocket-Protocol, as Kubernetes' API server takes it (the answer never names it:
 * ws_tty.c). Into buf as "Bearer TOKEN"; NULL when neither. */
static const char *bearer_of(struct MHD_Connection *c, char *buf, size_t len)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *up = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
    const char *p = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
    if (a || !up || strcasecmp(up, "websocket") != 0 || !p)
        return a;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l > 7 && strncmp(p, "bearer.", 7) == 0 && l - 7 < len - 8) {
            snprintf(buf, len, "Bearer %.*s", (int)(l - 7), p + 7);
            return buf;
        }
        p += l;
    }
    return NULL;
}

enum guard_verdict guard_head(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                              const char *url, const char *method, enum MHD_Result *ret)
{
    struct conn *k = conn_of(c);
    rc->conn = k;
    enum metrics_limit reject = LIM_N;
    if (k) {
        pthread_mutex_lock(&srv->guard_lock);
        bool killed = k->killed;
        reject = k->reject;
        k->linger = false; /* a new request: whether it is answered early is yet to come */
        pthread_mutex_unlock(&srv->guard_lock);
        if (killed) {
            *ret = MHD_NO; /* answered by the watchdog already */
            return GUARD_STOP;
        }
    }
    bool health = health_route(url, method);
    /* Health checks are answered over the caps: a probe must tell a busy sbxd from a dead
     * one. */
    if (reject != LIM_N && !health) {
        const char *code;
        char msg[256];
        unsigned status = refusal(srv, reject, &code, msg, sizeof(msg));
        metrics_limit(reject);
        *ret = reply_error_header(c, status, code, MHD_HTTP_HEADER_CONNECTION, "close", "%s", msg);
        return GUARD_STOP;
    }
    size_t head = strlen(method) + strlen(url) + 12; /* request line */
    MHD_get_connection_values(c, MHD_HEADER_KIND, add_header_len, &head);
    if (head > srv->cfg->max_header_bytes) {
        metrics_limit(LIM_HEADER_BYTES);
        *ret = reply_error_header(c, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "HEADERS_TOO_LARGE",
                                  MHD_HTTP_HEADER_CONNECTION, "close",
                                  "the request head is %zu bytes, over %llu (--max-header-bytes)",
                                  head, (unsigned long long)srv->cfg->max_header_bytes);
        return GUARD_STOP;
    }
    if (web_refused(srv, c, rc, ret))
        return GUARD_STOP;
    char bearer[SBXD_TOKEN_MAX + 16];
    const char *authz = bearer_of(c, bearer, sizeof(bearer));
    if (srv->token_len && !health && !auth_check(srv->cfg->token, srv->token_len, authz)) {
        bool sent = authz != NULL;
        metrics_limit(LIM_UNAUTHORIZED);
        *ret = reply_error_header(
            c, MHD_HTTP_UNAUTHORIZED, "UNAUTHENTICATED", MHD_HTTP_HEADER_WWW_AUTHENTICATE,
            sent ? "Bearer realm=\"sbxd\", error=\"invalid_token\"" : "Bearer realm=\"sbxd\"",
            sent ? "the bearer token is not valid"
                 : "this route needs 'Authorization: Bearer TOKEN' (sbxd runs with a token)");
        return GUARD_STOP;
    }
    return GUARD_PASS;
}

void guard_request_begun(struct server *srv, struct MHD_Connection *c)
{
    struct conn *k = conn_of(c);
    if (!k)
        return;
    pthread_mutex_lock(&srv->guard_lock);
    k->begun = true;
    pthread_mutex_unlock(&srv->guard_lock);
}

void guard_answered_early(struct req_ctx *rc)
{
    struct conn *k = rc->conn;
    if (!k)
        return;
    pthread_mutex_lock(&rc->srv->guard_lock);
    k->linger = true;
    pthread_mutex_unlock(&rc->srv->guard_lock);
}

void guard_wait_over(struct req_ctx *rc)
{
    struct conn *k = rc->conn;
    if (!k)
        return;
    pthread_mutex_lock(&rc->srv->guard_lock);
    k->waiting = false;
    pthread_mutex_unlock(&rc->srv->guard_lock);
}

void guard_request_done(struct server *srv, struct req_ctx *rc)
{
    struct conn *k = rc->conn;
    if (!k)
        return;
    pthread_mutex_lock(&srv->guard_lock);
    k->waiting = true;
    k->begun = false;
    k->since_ns = time_mono_ns();
    /* Kept alive: the next request may come after up to the idle timeout, and then has the
     * request timeout to arrive whole. */
    k->deadline_ns =
        time_mono_ns() + (k->reject != LIM_N
                              ? REJECT_GRACE_NS
                              : (int64_t)srv->cfg->idle_timeout_ms * 1000000 + wait_ns(srv));
    pthread_mutex_unlock(&srv->guard_lock);
}
