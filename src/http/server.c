#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http_internal.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/metrics.h"
#include "sbxd/secret.h"
#include "sbxd/server.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

/* /metrics names each route by its label; a request that matched none is "unmatched". */
static const char *route_labels[METRICS_MAX_ROUTES];

static void route_labels_init(void)
{
    for (unsigned i = 0; i < http_nroutes; i++)
        route_labels[i] = http_routes[i].label;
    route_labels[http_nroutes] = "unmatched";
}

/* The HTTP front's counters, registered with /metrics. */
static void render_route_metrics(struct jsonw *w)
{
    metrics_render_http(w, route_labels, http_nroutes + 1);
}

/* The request being handled on this thread. With a thread per connection, libmicrohttpd
 * calls the access handler, the content reader of its answer and the completion notice of
 * one request on the one thread, so what the routes send can be counted without passing the
 * request around. */
static __thread struct req_ctx *tl_rc;

enum MHD_Result http_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r,
                           uint64_t body_len)
{
    struct req_ctx *rc = tl_rc;
    if (rc) {
        rc->status = status;
        if (strcmp(rc->method, "HEAD") != 0)
            rc->bytes_out += body_len;
        guard_wait_over(rc);
        if (!rc->body_in)
            guard_answered_early(rc);
        if (status == MHD_HTTP_CONTENT_TOO_LARGE)
            metrics_limit(LIM_BODY_BYTES);
    }
    return MHD_queue_response(c, status, r);
}

void http_count_out(size_t n)
{
    if (tl_rc)
        tl_rc->bytes_out += n;
}

size_t http_stream_out(const struct jsonw *w, size_t *off, char *out, size_t max)
{
    size_t n = w->len - *off;
    if (n > max)
        n = max;
    memcpy(out, w->buf + *off, n);
    *off += n;
    http_count_out(n);
    return n;
}

ssize_t http_stream_pieces(struct jsonw *w, size_t *off, bool (*fill)(void *cls), void *cls,
                           char *out, size_t max)
{
    while (*off == w->len) {
        jw_drop(w);
        *off = 0;
        if (!fill(cls))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (w->failed)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    return (ssize_t)http_stream_out(w, off, out, max);
}

bool http_is_head(void)
{
    return tl_rc && strcmp(tl_rc->method, "HEAD") == 0;
}

/*
 * What /v1/metadata may serve: the variables with the prefix, never one whose name looks like
 * a credential, nor one whose value holds a URL with a user or password (secret.h). Untrusted
 * code in the sandbox can ask for it (the port is reachable from inside), so an
 * orchestrator's secret put under the prefix by mistake must not be handed to it.
 */
static bool metadata_allowed(const char *entry, const char *prefix)
{
    const char *eq = strchr(entry, '=');
    size_t pl = strlen(prefix);
    if (!eq || (size_t)(eq - entry) < pl || strncmp(entry, prefix, pl) != 0)
        return false;
    return !secret_name(entry, (size_t)(eq - entry)) && !secret_url_userinfo(eq + 1);
}

static char **metadata_snapshot(const char *prefix)
{
    size_t n = 0;
    for (char **e = environ; *e; e++)
        n += metadata_allowed(*e, prefix);
    char **v = calloc(n + 1, sizeof(char *));
    size_t i = 0;
    for (char **e = environ; v && *e; e++)
        if (metadata_allowed(*e, prefix) && (v[i] = strdup(*e)))
            i++;
    return v;
}

static void free_strv(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

const struct route *http_route_find(const char *url)
{
    for (unsigned i = 0; i < http_nroutes; i++) {
        const struct route *rt = &http_routes[i];
        size_t n = strlen(rt->path);
        if (strcmp(url, rt->path) == 0 ||
            (rt->prefix && strncmp(url, rt->path, n) == 0 && url[n] == '/'))
            return rt;
    }
    return NULL;
}

/* URLs reach the routes as sent: libmicrohttpd's own unescaping would turn %00 into the end
 * of the string and %2F into a separator before anything could look at them. */
static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

/*
 * libmicrohttpd hands the routes the request target as a C string, so a raw NUL in it
 * (`GET /files/h.txt\0x HTTP/1.1`) would cut it short and another file than the one asked
 * for would be served. This callback sees the target before anything splits it (the query
 * included) and passes its length up to the first NUL on to on_request, in con_cls, as an
 * odd number that can never be a request context: on_request compares it with where the
 * HTTP version starts. A connection that never reaches on_request leaves it to on_completed,
 * which frees nothing for it. The guard learns here that a request has begun (should the
 * library refuse it, a head too large say, the connection lingers at its close).
 */
static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
    guard_request_begun(cls, c);
    return (void *)(((uintptr_t)strlen(uri) << 1) | 1);
}

static bool is_target_length(void *p)
{
    return ((uintptr_t)p & 1) != 0;
}

/* Requests no route may see: a target with a NUL in it, and a body whose framing two
 * headers disagree about. 0 when neither, else the message of a 400. */
static const char *malformed(struct MHD_Connection *c, const char *url, const char *version,
                             size_t target_len)
{
    if (version && *version && version > url && (size_t)(version - url) != target_len + 1)
        return "the request target holds a NUL byte";
    /* Content-Length and Transfer-Encoding together: a proxy in front (the sandbox router)
     * may frame the body by one and sbxd by the other, and a second request smuggled in the
     * body would reach sbxd unseen by the proxy (RFC 9112, 6.3). */
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length") &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding"))
        return "Content-Length and Transfer-Encoding together are ambiguous; send one";
    return NULL;
}

unsigned http_method_bit(const char *m)
{
    if (strcmp(m, "GET") == 0)
        return HTTP_GET;
    if (strcmp(m, "HEAD") == 0)
        return HTTP_HEAD;
    if (strcmp(m, "POST") == 0)
        return HTTP_POST;
    if (strcmp(m, "PUT") == 0)
        return HTTP_PUT;
    if (strcmp(m, "DELETE") == 0)
        return HTTP_DELETE;
    return HTTP_OTHER;
}

static void client_string(struct MHD_Connection *c, char *out, size_t len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, len, "-");
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    char host[INET6_ADDRSTRLEN] = "";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(out, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(out, len, "[%s]:%u", host, port);
    }
}

bool http_body_too_large(struct MHD_Connection *c, uint64_t max)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (!cl)
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    return errno || *end || n > max;
}

/* While a reset runs, gated routes are refused: 503 with Retry-After (reply.c adds it). */
static enum MHD_Result reply_resetting(struct MHD_Connection *c, const struct req_ctx *rc)
{
    if (rc->route && rc->route->face == FACE_LEGACY)
        return reply_message(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                             "sbxd is resetting the sandbox; retry in a moment");
    return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                       "sbxd is resetting the sandbox; retry in a moment");
}

/*
 * A gated route's work begins (its begin hook, or its handler): false when a reset runs, or
 * one ran since the request's head came (its body may have been meant for what the reset
 * removed). Otherwise the sandbox's work lock is held shared until work_leave, so the reset
 * knows when no request is in the middle of its work (sandbox.h).
 */
static bool work_enter(struct server *srv, const struct req_ctx *rc)
{
    return rc->route->ungated || sandbox_work_enter(srv->sb, rc->reset_gen);
}

static void work_leave(struct server *srv, const struct req_ctx *rc)
{
    if (!rc->route->ungated)
        sandbox_work_leave(srv->sb);
}

/* Checks made as soon as the headers are in, before any body byte is read. */
static enum MHD_Result check_headers(struct server *srv, struct MHD_Connection *c,
                                     struct req_ctx *rc, const char *method)
{
    const struct route *rt = rc->route;
    unsigned m = http_method_bit(method);
    if (!(rt->methods & m)) {
        rc->replied = true;
        return reply_method_not_allowed(c, rt->methods);
    }
    if (rt->begin && sandbox_draining(srv->sb) && m != HTTP_GET && m != HTTP_HEAD) {
        rc->replied = true;
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is shutting down and takes no new writes");
    }
    if (rt->begin) {
        if (!work_enter(srv, rc)) {
            rc->replied = true;
            return reply_resetting(c, rc);
        }
        enum MHD_Result ret = rt->begin(srv, c, rc, rc->url, method);
        work_leave(srv, rc);
        return ret;
    }
    if (!rt->json_body)
        return MHD_YES;
    rc->replied = true;
    enum MHD_Result ret;
    if (!http_json_type(c, &ret))
        return ret;
    if (http_body_too_large(c, srv->cfg->max_body_bytes))
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "PAYLOAD_TOO_LARGE",
                           "request body is larger than %llu bytes (--max-body-bytes)",
                           (unsigned long long)srv->cfg->max_body_bytes);
    rc->replied = false;
    return MHD_YES;
}

enum MHD_Result req_body_append(struct server *srv, struct req_ctx *rc, const char *data, size_t n)
{
    if (rc->too_large || rc->body_len + n > srv->cfg->max_body_bytes) {
        /* A chunked body that grows past the limit. libmicrohttpd cannot answer in the middle
         * of a body, so the rest is read and dropped and 413 comes at its end; a sender that
         * goes on far beyond that loses the connection instead. */
        rc->too_large = true;
        rc->discarded += n;
        return rc->discarded > SBXD_BODY_DISCARD_MAX ? MHD_NO : MHD_YES;
    }
    if (rc->body_len + n + 1 > rc->body_cap) {
        size_t cap = rc->body_cap ? rc->body_cap : 1024;
        while (cap < rc->body_len + n + 1)
            cap *= 2;
        char *nb = realloc(rc->body, cap);
        if (!nb)
            return MHD_NO;
        rc->body = nb;
        rc->body_cap = cap;
    }
    memcpy(rc->body + rc->body_len, data, n);
    rc->body_len += n;
    rc->body[rc->body_len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    struct server *srv = cls;
    struct req_ctx *rc = *con_cls;
    if (!rc || is_target_length(rc)) {
        size_t target_len = rc ? (uintptr_t)rc >> 1 : strlen(url);
        rc = calloc(1, sizeof(*rc));
        if (!rc)
            return MHD_NO;
        *con_cls = rc;
        tl_rc = rc;
        rc->srv = srv;
        rc->route_id = http_nroutes;
        client_string(c, rc->client, sizeof(rc->client));
        snprintf(rc->method, sizeof(rc->method), "%s", method);
        rc->url = strdup(url);
        if (!rc->url)
            return MHD_NO;
        rc->route = http_route_find(url);
        if (rc->route)
            rc->route_id = (unsigned)(rc->route - http_routes);
        /* The caps and the token come first: a client without the token learns nothing,
         * not even which routes exist. */
        enum MHD_Result ret;
        if (guard_head(srv, c, rc, url, method, &ret) == GUARD_STOP) {
            rc->replied = true;
            return ret;
        }
        const char *bad = malformed(c, url, version, target_len);
        if (bad) {
            rc->replied = true;
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", bad);
        }
        if (!rc->route) {
            rc->replied = true;
            return reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND", "no route for %.200s %.200s",
                               method, url);
        }
        rc->reset_gen = sandbox_reset_gen(srv->sb);
        if (!rc->route->ungated && server_resetting(srv)) {
            rc->replied = true;
            return reply_resetting(c, rc);
        }
        /* A check that fails queues its error at once; MHD sends it and, if a body was
         * coming, closes the connection instead of reading it. */
        ret = check_headers(srv, c, rc, method);
        /* A body streamed to a route (an upload) may take long: it has the idle timeout. */
        if (rc->route->begin)
            guard_wait_over(rc);
        return ret;
    }
    tl_rc = rc;
    if (rc->replied) {
        *upload_size = 0;
        return MHD_YES;
    }
    rc->bytes_in += *upload_size;
    if (*upload_size) {
        enum MHD_Result r = rc->route->body ? rc->route->body(srv, c, rc, upload_data, *upload_size)
                                            : req_body_append(srv, rc, upload_data, *upload_size);
        *upload_size = 0;
        return r;
    }
    rc->replied = true;
    rc->body_in = true;
    guard_wait_over(rc); /* the request is in: what follows is sbxd's time, not the client's */
    if (rc->too_large && rc->route->too_large)
        return rc->route->too_large(c, srv->cfg->max_body_bytes);
    if (rc->too_large)
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "PAYLOAD_TOO_LARGE",
                           "request body is larger than %llu bytes (--max-body-bytes)",
                           (unsigned long long)srv->cfg->max_body_bytes);
    /* JSON is UTF-8 (RFC 8259). cJSON passes any bytes through, so a body that is not would
     * run a command with text nobody sent: it is refused whole, saying where it goes wrong. */
    if (rc->route->json_body && rc->body_len) {
        size_t at = utf8_valid((const uint8_t *)rc->body, rc->body_len);
        unsigned bad = at < rc->body_len ? (uint8_t)rc->body[at] : 0;
        if (at < rc->body_len && rc->route->face == FACE_LEGACY)
            return reply_message(c, MHD_HTTP_BAD_REQUEST,
                                 "the body is not valid UTF-8: byte 0x%02X at offset %zu", bad, at);
        if (at < rc->body_len)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "the body is not valid UTF-8: byte 0x%02X at offset %zu", bad, at);
    }
    if (!work_enter(srv, rc))
        return reply_resetting(c, rc);
    enum MHD_Result ret = rc->route->fn(srv, c, rc);
    work_leave(srv, rc);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct server *srv = cls;
    (void)c;
    struct req_ctx *rc = *con_cls;
    if (rc && is_target_length(rc)) {
        *con_cls = NULL; /* the request never reached on_request (uri_seen) */
        return;
    }
    if (rc) {
        metrics_http(rc->route_id, rc->status, rc->bytes_in, rc->bytes_out);
        __atomic_add_fetch(&srv->completed, 1, __ATOMIC_RELAXED);
        guard_request_done(srv, rc);
        if (tl_rc == rc)
            tl_rc = NULL;
        /* A command's answer is out (or its client gone): only now is it no longer running,
         * so a drain that waits for none running never cuts an answer off. */
        if (rc->holds_running)
            exec_service_leave(&srv->sb->exec);
        if (rc->state_free)
            rc->state_free(rc->state, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        free(rc->url);
        free(rc->body);
        free(rc);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's warnings come from connection threads, mostly clients gone mid-request: a
 * flood of bad connections must not become a flood of log lines. At most
 * SBXD_HTTP_LOG_BURST a second, then one line with how many were left out. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int64_t window;
    static unsigned in_window, dropped;
    int64_t sec = time_mono_ns() / 1000000000;
    pthread_mutex_lock(&lock);
    unsigned was_dropped = 0;
    if (sec != window) {
        was_dropped = dropped;
        window = sec;
        in_window = dropped = 0;
    }
    bool emit = ++in_window <= SBXD_HTTP_LOG_BURST;
    dropped += !emit;
    pthread_mutex_unlock(&lock);
    if (was_dropped)
        LOG_EVENT("warn", "http", LOG_S("message", "library warnings left out (rate limit)"),
                  LOG_I("not_logged", was_dropped));
    if (emit)
        LOG_EVENT("warn", "http", LOG_S("message", msg));
}

struct server *server_start(const struct sbxd_config *cfg, struct sandbox *sb, struct sbxd_err *err)
{
    struct server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    srv->cfg = cfg;
    srv->sb = sb;
    srv->metadata = metadata_snapshot(cfg->metadata_prefix);
    srv->token_len = cfg->token ? strlen(cfg->token) : 0;
    route_labels_init();
    metrics_register(render_route_metrics);
    guard_init(srv);

    /* sbxd accepts (accept.c); libmicrohttpd is handed each connection admitted, and runs a
     * thread for it. */
    if (front_open(srv, err) < 0) {
        server_stop(srv);
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_UPGRADE; /* the proxy's WebSockets, the terminal */
    srv->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, guard_notify,
        srv, MHD_OPTION_THREAD_STACK_SIZE, (size_t)SBXD_THREAD_STACK, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)((cfg->idle_timeout_ms + 999) / 1000),
        /* A bound above what guard_admit lets in: libmicrohttpd never refuses one of those. */
        MHD_OPTION_CONNECTION_LIMIT, server_conn_hard_limit(cfg) + 16,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_memory,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL, MHD_OPTION_URI_LOG_CALLBACK, uri_seen,
        srv, MHD_OPTION_END);
    if (!srv->mhd) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot start the HTTP server");
        server_stop(srv);
        return NULL;
    }
    if (front_start(srv, err) < 0) {
        server_stop(srv);
        return NULL;
    }
    return srv;
}

uint16_t server_port(const struct server *srv)
{
    return srv->port;
}

void server_ports(const struct server *srv, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < srv->nports && at < len; i++) {
        int n = snprintf(out + at, len - at, "%s%u", i ? "," : "", (unsigned)srv->ports[i]);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

uint64_t server_completed(const struct server *srv)
{
    return __atomic_load_n(&srv->completed, __ATOMIC_RELAXED);
}

unsigned server_streams(const struct server *srv)
{
    return __atomic_load_n(&srv->streams, __ATOMIC_ACQUIRE);
}

void server_stop(struct server *srv)
{
    if (!srv)
        return;
    front_stop(srv); /* no new connection from here on */
    if (srv->mhd)
        MHD_stop_daemon(srv->mhd);
    front_free(srv);
    free_strv(srv->metadata);
    guard_destroy(srv);
    free(srv);
}
