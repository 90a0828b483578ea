/*
 * h2_wire.c - the gRPC front on the wire, in nghttp2's callbacks on the connection thread: a
 * call's answer (framed messages as the flow-control window allows, trailers, resets) and
 * its request (headers, the token, the deadline, the one length-prefixed message).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2_internal.h"
#include "sbxd/auth.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/metrics.h"
#include "sbxd/timeutil.h"

/* ---- the answer on the wire (connection thread) ---- */

/* grpc-message as gRPC's HTTP/2 protocol says: bytes outside 0x20-0x7E, and '%', as %XX. */
static void percent_encode(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 <= cap; s++) {
        unsigned char b = (unsigned char)*s;
        if (b >= 0x20 && b <= 0x7e && b != '%') {
            out[o++] = (char)b;
        } else {
            out[o++] = '%';
            out[o++] = hex[b >> 4];
            out[o++] = hex[b & 15];
        }
    }
    out[o] = '\0';
}

#define NV(n, v)                                                                                   \
    ((nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE})

struct end_text {
    char http[8], status[8];
    char message[3 * GRPC_MESSAGE_MAX + 1];
};

/* Under the lock: the end of the answer (trailers; with only, the whole answer: Trailers-Only)
 * into nv (4 + GRPC_TRAILERS_MAX entries). */
static size_t end_fields(struct grpc_call *c, bool only, nghttp2_nv *nv, struct end_text *t)
{
    size_t n = 0;
    if (only) {
        snprintf(t->http, sizeof(t->http), "%d", c->http_status);
        nv[n++] = NV(":status", t->http);
        if (c->http_status == 200)
            nv[n++] = NV("content-type", "application/grpc");
    }
    snprintf(t->status, sizeof(t->status), "%d", (int)c->code);
    nv[n++] = NV("grpc-status", t->status);
    if (c->message[0]) {
        percent_encode(c->message, t->message, sizeof(t->message));
        nv[n++] = NV("grpc-message", t->message);
    }
    for (unsigned i = 0; i < c->ntrailers; i++)
        nv[n++] = NV(c->trailer[i][0], c->trailer[i][1]);
    c->end_code = (int)c->code;
    return n;
}

/* nghttp2 asks for the next DATA of a call's answer, within the client's window. */
static ssize_t read_answer(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *user)
{
    struct conn *cn = user;
    struct grpc_call *c = src->ptr;
    size_t n = 0;
    pthread_mutex_lock(&cn->lock);
    bool was_full = c->queued >= GRPC_SEND_QUEUE_MAX;
    while (n < length && c->qhead) {
        struct frame *f = c->qhead;
        size_t k = f->len - f->off;
        if (k > length - n)
            k = length - n;
        memcpy(buf + n, f->data + f->off, k);
        f->off += k;
        n += k;
        if (f->off == f->len) {
            c->qhead = f->next;
            if (!c->qhead)
                c->qtail = NULL;
            free(f);
        }
    }
    c->queued -= n;
    if (was_full && c->queued < GRPC_SEND_QUEUE_MAX)
        pthread_cond_broadcast(&cn->room);
    ssize_t rv = (ssize_t)n;
    if (!c->qhead && c->finished) {
        nghttp2_nv nv[4 + GRPC_TRAILERS_MAX];
        struct end_text t;
        size_t nnv = end_fields(c, false, nv, &t);
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(s, stream_id, nv, nnv) == 0)
            c->end_submitted = true;
        else
            rv = NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    } else if (n == 0) {
        c->deferred = true;
        rv = NGHTTP2_ERR_DEFERRED;
    }
    pthread_mutex_unlock(&cn->lock);
    if (n)
        c->progress_ns = time_mono_ns();
    return rv;
}

static void reset_stream(struct conn *cn, struct grpc_call *c, uint32_t error)
{
    if (!c->reset_sent &&
        nghttp2_submit_rst_stream(cn->h2, NGHTTP2_FLAG_NONE, c->stream_id, error) == 0)
        c->reset_sent = true;
}

void h2_earliest(int64_t *next, int64_t t)
{
    if (t && (!*next || t < *next))
        *next = t;
}

/* Every call's state into the session: deadlines, answers begun, data to resume, ends. The
 * earliest time something is due next (0: none). */
int64_t h2_pump(struct conn *cn, int64_t now)
{
    const struct sbxd_config *cfg = cn->g->cfg;
    int64_t stall_ns = (int64_t)cfg->idle_timeout_ms * 1000000;
    int64_t next = 0;
    pthread_mutex_lock(&cn->lock);
    for (struct grpc_call *c = cn->calls; c; c = c->next) {
        if (c->end_submitted || c->reset_sent)
            continue;
        if (!c->finished && c->deadline_ns && now >= c->deadline_ns) {
            /* The client is told now, whatever the handler is doing; it stops (its
             * descriptor hangs up) and its own finish comes to nothing. */
            h2_cancel_locked(cn, c, GRPC_DEADLINE);
            h2_finish_locked(c, GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed", true);
            c->answered = true;
        }
        if (!c->req_done && !c->finished && now >= c->req_deadline_ns) {
            /* A request trickled in (slowloris): the stream goes. */
            reset_stream(cn, c, NGHTTP2_CANCEL);
            continue;
        }
        bool waiting = c->qhead || c->finished; /* answer bytes (or its end) wait to go out */
        if (!waiting) {
            c->progress_ns = 0;
        } else {
            if (!c->progress_ns)
                c->progress_ns = now;
            if (now - c->progress_ns >= stall_ns) {
                /* The client has taken no byte of its answer for the idle timeout (it opens
                 * no window): the stream goes rather than hold its queue, and a handler
                 * waiting for room, for ever. As for a lost connection: a command the call
                 * started may be found again (a Start's process runs on). */
                h2_cancel_locked(cn, c, GRPC_DISCONNECTED);
                reset_stream(cn, c, NGHTTP2_CANCEL);
                continue;
            }
        }
        if (!c->resp_started) {
            if (c->qhead) {
                nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
                nghttp2_data_provider prd = {.source.ptr = c, .read_callback = read_answer};
                if (nghttp2_submit_response(cn->h2, c->stream_id, nv, 2, &prd) == 0)
                    c->resp_started = true;
                else
                    reset_stream(cn, c, NGHTTP2_INTERNAL_ERROR);
            } else if (c->finished) {
                nghttp2_nv nv[4 + GRPC_TRAILERS_MAX];
                struct end_text t;
                size_t n = end_fields(c, true, nv, &t);
                if (nghttp2_submit_response(cn->h2, c->stream_id, nv, n, NULL) == 0)
                    c->end_submitted = true;
                else
                    reset_stream(cn, c, NGHTTP2_INTERNAL_ERROR);
            }
        } else if (c->deferred && (c->qhead || c->finished)) {
            c->deferred = false;
            nghttp2_session_resume_data(cn->h2, c->stream_id);
        }
        if (c->end_submitted || c->reset_sent)
            continue;
        if (!c->finished)
            h2_earliest(&next, c->deadline_ns);
        if (!c->req_done && !c->finished)
            h2_earliest(&next, c->req_deadline_ns);
        if (waiting)
            h2_earliest(&next, c->progress_ns + stall_ns);
    }
    pthread_mutex_unlock(&cn->lock);
    return next;
}

/* ---- requests (connection thread, in nghttp2's callbacks) ---- */

/* gRPC's own content types: application/grpc, application/grpc+proto, ...; not grpc-web,
 * whose framing differs. */
static bool grpc_content_type(const char *v, size_t n)
{
    static const char base[] = "application/grpc";
    size_t b = sizeof(base) - 1;
    if (n < b || strncasecmp(v, base, b) != 0)
        return false;
    return n == b || v[b] == '+' || v[b] == ';';
}

/* grpc-timeout: 1 to 8 digits and a unit (H M S m u n), in ns (a huge one is clamped). */
static bool parse_timeout(const char *v, size_t n, int64_t *out)
{
    if (n < 2 || n > 9)
        return false;
    int64_t val = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        val = val * 10 + (v[i] - '0');
    }
    int64_t unit;
    switch (v[n - 1]) {
    case 'H':
        unit = 3600LL * 1000000000;
        break;
    case 'M':
        unit = 60LL * 1000000000;
        break;
    case 'S':
        unit = 1000000000;
        break;
    case 'm':
        unit = 1000000;
        break;
    case 'u':
        unit = 1000;
        break;
    case 'n':
        unit = 1;
        break;
    default:
        return false;
    }
    const int64_t most = (int64_t)SBXD_TIMEOUT_HARD_MAX_MS * 1000000 * 10;
    if (__builtin_mul_overflow(val, unit, out) || *out > most)
        *out = most;
    return true;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct conn *cn = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct grpc_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    c->conn = cn;
    c->stream_id = f->hd.stream_id;
    c->mx = MX_UNKNOWN;
    c->refs = 1; /* the connection's, until the stream closes */
    c->cancel_rd = c->cancel_wr = -1;
    c->http_status = 200;
    c->final_code = -1;
    /* From its first HEADERS frame, the whole request has --request-timeout-ms to arrive. */
    c->req_deadline_ns = time_mono_ns() + (int64_t)cn->g->cfg->request_timeout_ms * 1000000;
    if (nghttp2_session_set_stream_user_data(s, c->stream_id, c) != 0) {
        free(c);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    pthread_mutex_lock(&cn->lock);
    cn->refs++;
    pthread_mutex_unlock(&cn->lock);
    c->next = cn->calls;
    if (cn->calls)
        cn->calls->prev = c;
    cn->calls = c;
    cn->nstreams++;
    return 0;
}

#define IS(name, lit) (name##len == sizeof(lit) - 1 && memcmp(name, lit, sizeof(lit) - 1) == 0)

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    struct conn *cn = user;
    (void)flags;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!c)
        return 0;
    /* Our SETTINGS_MAX_HEADER_LIST_SIZE, counted as RFC 9113 does: HPACK lets a client make
     * us decode far more than it sends. */
    c->header_bytes += namelen + valuelen + 32;
    if (c->header_bytes > GRPC_MAX_HEADER_LIST)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* the request's trailers: gRPC sends none, and none matter */
    const char *v = (const char *)value; /* NUL-terminated (nghttp2) */
    if (IS(name, ":method")) {
        c->post = valuelen == 4 && memcmp(v, "POST", 4) == 0;
    } else if (IS(name, ":path")) {
        c->path_long = valuelen >= sizeof(c->path);
        if (!c->path_long)
            memcpy(c->path, v, valuelen + 1);
    } else if (IS(name, "content-type")) {
        c->content_type_ok = grpc_content_type(v, valuelen);
    } else if (IS(name, "grpc-timeout")) {
        c->timeout_set = true;
        c->timeout_bad = !parse_timeout(v, valuelen, &c->timeout_ns);
    } else if (IS(name, "grpc-encoding")) {
        c->encoding_set = true;
        c->encoding_identity = valuelen == 8 && memcmp(v, "identity", 8) == 0;
    } else if (IS(name, "authorization")) {
        const struct grpc_front *g = cn->g;
        c->nauth++;
        c->auth_ok = g->token_len > 0 && auth_check(g->cfg->token, g->token_len, v);
    }
    return 0;
}

static const struct grpc_method *method_find(const char *path, unsigned *row, bool *health)
{
    unsigned i = 0;
    for (const struct grpc_method *m = grpc_process_methods; m->path; m++, i++)
        if (strcmp(m->path, path) == 0) {
            *row = i < MX_METHODS ? i : MX_UNKNOWN;
            *health = false;
            return m;
        }
    for (const struct grpc_method *m = grpc_health_methods; m->path; m++, i++)
        if (strcmp(m->path, path) == 0) {
            *row = i < MX_METHODS ? i : MX_UNKNOWN;
            *health = true;
            return m;
        }
    *row = MX_UNKNOWN;
    *health = false;
    return NULL;
}

/* The request's headers are in: refuse what cannot be a call of ours before its body comes. */
static void call_headers(struct conn *cn, struct grpc_call *c)
{
    const struct grpc_front *g = cn->g;
    int64_t now = time_mono_ns();
    bool health = false;
    c->method = c->path_long ? NULL : method_find(c->path, &c->mx, &health);
    /* gRPC's HTTP/2 protocol: only POST, and a request that is not gRPC gets HTTP 415. */
    if (!c->post) {
        c->http_status = 405;
        h2_call_answer(c, GRPC_UNIMPLEMENTED, "gRPC takes POST only");
        return;
    }
    if (!c->content_type_ok) {
        c->http_status = 415;
        h2_call_answer(c, GRPC_INTERNAL, "content-type must be application/grpc");
        return;
    }
    /* The token guards everything but the health checks, as on the HTTP side (probes carry
     * no token). A second authorization header is refused rather than guessed between. */
    bool token = g->token_len > 0 && c->nauth == 1 && c->auth_ok;
    if (g->token_len > 0 && !health && !token) {
        metrics_limit(LIM_UNAUTHORIZED);
        h2_call_answer(c, GRPC_UNAUTHENTICATED,
                       "this sbxd requires its token: authorization: Bearer <token>");
        return;
    }
    /* A health call without the token is a guest, on a budget of its own (the top of this
     * file); any other call that got this far makes its connection trusted: never closed to
     * make room for a newcomer. */
    c->guest = health && !token;
    if (!c->guest)
        __atomic_store_n(&cn->trusted, true, __ATOMIC_RELEASE);
    if (!c->method) {
        h2_call_answer(c, GRPC_UNIMPLEMENTED, "unknown method %s",
                       c->path_long ? "(long)" : c->path);
        return;
    }
    if (c->timeout_bad) {
        h2_call_answer(c, GRPC_INTERNAL, "malformed grpc-timeout");
        return;
    }
    if (c->timeout_set)
        c->deadline_ns = now + c->timeout_ns; /* clamped: no overflow */
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user)
{
    (void)flags;
    (void)user;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(s, stream_id);
    if (!c || c->answered || c->dispatched)
        return 0;
    while (len > 0) {
        if (c->prefix_len < 5) {
            size_t k = 5 - c->prefix_len < len ? 5 - c->prefix_len : len;
            memcpy(c->prefix + c->prefix_len, data, k);
            c->prefix_len += k;
            data += k;
            len -= k;
            if (c->prefix_len == 5) {
                c->msg_len = (size_t)c->prefix[1] << 24 | (size_t)c->prefix[2] << 16 |
                             (size_t)c->prefix[3] << 8 | c->prefix[4];
                unsigned most = c->guest ? GRPC_GUEST_MESSAGE : GRPC_MAX_MESSAGE;
                if (c->msg_len > most) {
                    h2_call_answer(c, GRPC_RESOURCE_EXHAUSTED,
                                   "the request message (%zu bytes) is over the %u-byte limit%s",
                                   c->msg_len, most,
                                   c->guest ? " of a health call without the token" : "");
                    return 0;
                }
            }
            continue;
        }
        if (c->msg_got == c->msg_len) {
            h2_call_answer(c, GRPC_INTERNAL,
                           "more than one request message (the method takes one)");
            return 0;
        }
        size_t k = c->msg_len - c->msg_got < len ? c->msg_len - c->msg_got : len;
        if (c->msg_got + k > c->msg_cap) {
            /* Grown as bytes arrive, never to more than the prefix said: a client that
             * declares 4 MiB and sends 5 bytes holds 5 bytes. */
            size_t cap = c->msg_cap ? c->msg_cap * 2 : 16384;
            if (cap < c->msg_got + k)
                cap = c->msg_got + k;
            if (cap > c->msg_len)
                cap = c->msg_len;
            uint8_t *p = NULL;
            if (!h2_budget_take(c->guest, cap - c->msg_cap)) {
                h2_call_answer(c, GRPC_RESOURCE_EXHAUSTED,
                               "sbxd holds too many request bytes at once; retry later");
                return 0;
            }
            p = realloc(c->msg, cap);
            if (!p) {
                h2_budget_give(c->guest, cap - c->msg_cap);
                h2_call_answer(c, GRPC_RESOURCE_EXHAUSTED, "out of memory for the request");
                return 0;
            }
            c->msg = p;
            c->msg_cap = cap;
        }
        memcpy(c->msg + c->msg_got, data, k);
        c->msg_got += k;
        data += k;
        len -= k;
    }
    return 0;
}

/* The request is whole: check its one message and start the handler. */
static void call_start(struct conn *cn, struct grpc_call *c)
{
    struct grpc_front *g = cn->g;
    if (c->prefix_len < 5) {
        h2_call_answer(c, GRPC_INTERNAL, "the request carries no message");
        return;
    }
    if (c->msg_got < c->msg_len) {
        h2_call_answer(c, GRPC_INTERNAL, "the request message is cut short (%zu of %zu bytes)",
                       c->msg_got, c->msg_len);
        return;
    }
    if (c->prefix[0] & ~1u) {
        h2_call_answer(c, GRPC_INTERNAL, "bad message flags 0x%02x", c->prefix[0]);
        return;
    }
    if (c->prefix[0] & 1) {
        if (!c->encoding_set || c->encoding_identity) {
            h2_call_answer(c, GRPC_INTERNAL, "a compressed message without grpc-encoding");
        } else {
            h2_call_answer(c, GRPC_UNIMPLEMENTED, "sbxd takes no compressed messages (identity)");
            h2_trailer_add(c, "grpc-accept-encoding", "identity");
        }
        return;
    }
    if (c->deadline_ns && time_mono_ns() >= c->deadline_ns) {
        h2_call_answer(c, GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed");
        return;
    }
    if (c->guest) {
        if (!h2_guest_take(g, c->method->server_streaming)) {
            h2_call_answer(c, GRPC_RESOURCE_EXHAUSTED,
                           "too many health calls without the token at once (%u, %u of them "
                           "Watch); retry later",
                           GRPC_GUEST_CALLS, GRPC_GUEST_WATCHES);
            return;
        }
    } else {
        pthread_mutex_lock(&cn->lock);
        bool room = cn->handlers < GRPC_MAX_STREAMS;
        if (room)
            cn->handlers++;
        pthread_mutex_unlock(&cn->lock);
        if (!room || __atomic_add_fetch(&g->calls, 1, __ATOMIC_ACQ_REL) > g->max_calls) {
            if (room) {
                __atomic_sub_fetch(&g->calls, 1, __ATOMIC_RELEASE);
                pthread_mutex_lock(&cn->lock);
                cn->handlers--;
                pthread_mutex_unlock(&cn->lock);
            }
            h2_call_answer(c, GRPC_RESOURCE_EXHAUSTED, "too many calls at once; retry later");
            return;
        }
    }
    /* A socket pair rather than a pipe: the exec service peeks at its client's descriptor
     * with recv(), which a pipe would fail (ENOTSOCK) rather than report a hang-up. */
    int sv[2];
    int e = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        e = errno;
    } else {
        c->cancel_rd = sv[0];
        c->cancel_wr = sv[1];
        pthread_mutex_lock(&cn->lock);
        c->refs++; /* the handler's */
        pthread_mutex_unlock(&cn->lock);
        c->dispatched = true;
        mx_add(&grpc_mx.calls_running, 1);
        if (h2_call_dispatch(g, c) == 0)
            return;
        e = errno;
        mx_add(&grpc_mx.calls_running, -1);
        c->dispatched = false;
        pthread_mutex_lock(&cn->lock);
        c->refs--;
        pthread_mutex_unlock(&cn->lock);
    }
    if (c->guest) {
        h2_guest_put(g, c->method->server_streaming);
    } else {
        __atomic_sub_fetch(&g->calls, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&cn->lock);
        cn->handlers--;
        pthread_mutex_unlock(&cn->lock);
    }
    h2_call_answer(c, GRPC_RESOURCE_EXHAUSTED, "cannot start the call (%s); retry later",
                   strerror(e));
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct conn *cn = user;
    if (f->hd.type == NGHTTP2_SETTINGS) {
        if (!(f->hd.flags & NGHTTP2_FLAG_ACK))
            cn->settings_seen = true;
        return 0;
    }
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!c)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
        call_headers(cn, c);
    if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !c->req_done) {
        c->req_done = true;
        if (!c->answered && !c->dispatched) {
            pthread_mutex_lock(&cn->lock);
            bool finished = c->finished;
            pthread_mutex_unlock(&cn->lock);
            if (!finished)
                call_start(cn, c);
        }
    }
    return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    (void)user;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!c)
        return 0;
    c->end_sent = true;
    c->final_code = c->end_code;
    /* Answered before the request was all in (refused, or out of time): the client may stop
     * sending (gRPC's protocol: RST_STREAM with NO_ERROR). */
    if (!c->req_done && !c->reset_sent &&
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, c->stream_id, NGHTTP2_NO_ERROR) == 0)
        c->reset_sent = true;
    return 0;
}

static int on_frame_not_send(nghttp2_session *s, const nghttp2_frame *f, int error, void *user)
{
    (void)error;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (c)
        reset_stream(user, c, NGHTTP2_INTERNAL_ERROR);
    return 0;
}

void h2_call_unlink(struct conn *cn, struct grpc_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        cn->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    if (--cn->nstreams == 0)
        cn->idle_since_ns = time_mono_ns();
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error, void *user)
{
    struct conn *cn = user;
    (void)error;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(s, stream_id);
    if (!c)
        return 0;
    nghttp2_session_set_stream_user_data(s, stream_id, NULL);
    /* Closed before its answer was out: the client reset it (a cancelled RPC), or we did. */
    pthread_mutex_lock(&cn->lock);
    if (!c->end_sent)
        h2_cancel_locked(cn, c, GRPC_RESET);
    pthread_mutex_unlock(&cn->lock);
    h2_call_unlink(cn, c);
    h2_call_unref(c);
    return 0;
}

int h2_conn_session(struct conn *cn)
{
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return -1;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, on_frame_not_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_option_set_max_send_header_block_length(opt, GRPC_MAX_SEND_HEADERS);
    /* Closed streams are not kept for the priority tree: memory a client could pile up. */
    nghttp2_option_set_no_closed_streams(opt, 1);
    int rc = nghttp2_session_server_new2(&cn->h2, cb, cn, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) {
        cn->h2 = NULL;
        return -1;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADER_LIST},
    };
    if (nghttp2_submit_settings(cn->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0 ||
        nghttp2_session_set_local_window_size(cn->h2, NGHTTP2_FLAG_NONE, 0, GRPC_CONN_WINDOW) != 0)
        return -1;
    return 0;
}
