/*
 * h2.c - the gRPC front's transport: the listener, one thread per HTTP/2 connection driving
 * an nghttp2 server session over h2c, gRPC's length-prefixed framing, deadlines, cancellation,
 * flow control and trailers (grpc_internal.h says what a handler sees).
 *
 * Threads. The accepting thread takes connections (at most --max-connections; beyond, closed
 * at accept) and starts a thread for each. A connection thread owns its socket and its
 * nghttp2 session: it reads, feeds the session, writes what the session has, and wakes on an
 * eventfd the call threads poke. A call (one stream) whose request is complete runs its
 * method's handler on a thread of its own. The connection thread and the handler share the
 * call's answer (its queue of framed messages, its status and trailers, its cancellation)
 * under the connection's lock; the call is reference-counted (the connection's side, the
 * handler's side) and each call holds a reference to its connection, so whichever ends last
 * frees.
 *
 * Hostile clients (commands in the sandbox can reach the listener): every buffer is bounded.
 * Headers: 16 KiB a stream; the request: one message of at most GRPC_MAX_MESSAGE, the bytes
 * held across the front at most GRPC_REQUEST_BUDGET; the answer: GRPC_SEND_QUEUE_MAX a call
 * (the handler waits beyond it), sent only as the client's flow-control window allows; the
 * socket: one frame's bytes past what the kernel took, and nothing more is read from a client
 * that does not read. Streams: 100 open a connection (nghttp2 refuses more), 100 handlers a
 * connection and a bound across the front (a reset stream's handler outlives the stream, so
 * the open-stream limit alone would not cap threads). Time: a connection must say SETTINGS
 * within --request-timeout-ms, a request must arrive whole within it, a connection without
 * streams is closed after --idle-timeout-ms, and so is one whose socket takes no byte that
 * long; a stream whose answer the client takes no byte of that long (it opens no window) is
 * reset. nghttp2 itself refuses bad prefaces, floods of SETTINGS and PINGs,
 * CONTINUATION floods and rapid resets.
 *
 * Guests. Health calls need no token (a kubelet probe carries none), so anyone who reaches the
 * port can make them: 7 connections of 100 Watch streams each once took every handler of the
 * front, and 256 connections of one Watch each every connection, so token holders got
 * RESOURCE_EXHAUSTED or were refused at accept. A health call without the token is a guest:
 * guests have a budget of their own (GRPC_GUEST_CALLS handlers, of which GRPC_GUEST_WATCHES
 * Watch streams, so that Watches never crowd out Checks; requests of GRPC_GUEST_MESSAGE bytes
 * at most, GRPC_GUEST_BYTES held in all) that never counts against the calls of token holders.
 * A connection that has carried no call but guests' is untrusted: at --max-connections the
 * oldest untrusted one is closed to make room for a new one, so guests cannot hold every
 * connection either (the newest is evicted last: a client's fresh connection has time for its
 * first call). Without a token configured, every call but health is a token holder's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#include "grpc_internal.h"
#include "sbxd/acceptor.h"
#include "sbxd/auth.h"
#include "sbxd/grpc.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/metrics.h"
#include "sbxd/timeutil.h"

/* Our SETTINGS: streams open at once a connection, the largest header list taken, and each
 * stream's receive window. The connection's window is raised so that several requests can
 * arrive at once. */
#define GRPC_MAX_STREAMS     100
#define GRPC_MAX_HEADER_LIST (16 * 1024)
#define GRPC_STREAM_WINDOW   (1 << 20)
#define GRPC_CONN_WINDOW     (8 << 20)
/* The largest header block sbxd sends (its trailers are bounded far below it). */
#define GRPC_MAX_SEND_HEADERS (16 * 1024)
/* Request bytes held across the front at once (messages being received, and those whose
 * calls run): beyond, RESOURCE_EXHAUSTED. 100 streams of 4 MiB on each of many connections
 * would otherwise be gigabytes. */
#define GRPC_REQUEST_BUDGET (64u * 1024 * 1024)
/* A grpc-message's text (before percent-encoding), and the trailers a handler may add. */
#define GRPC_MESSAGE_MAX   1024
#define GRPC_TRAILERS_MAX  16
#define GRPC_TRAILER_KEY   64
#define GRPC_TRAILER_VALUE 256
/* Stack of a connection thread (nghttp2 keeps its state on the heap). A handler runs the
 * exec service's code, as an HTTP connection thread does: it gets the same stack. */
#define GRPC_CONN_STACK (256 * 1024)
#define GRPC_READ_CHUNK (16 * 1024)
/* At stop: how long a connection may take to send its GOAWAY, and how long the front waits
 * for every thread. */
#define GRPC_STOP_FLUSH_MS 500
#define GRPC_STOP_WAIT_MS  5000
/* Out of descriptors or memory at accept: accepting pauses this long. */
#define GRPC_ACCEPT_PAUSE_MS 100
#define GRPC_ACCEPT_BATCH    64
/* A :path longer than this is no method of ours. */
#define GRPC_PATH_MAX 128
/* Guests (health calls without the token): handlers at once across the front, Watch streams
 * among them, the largest request (a HealthCheckRequest is a service's name), and request
 * bytes held at once. */
#define GRPC_GUEST_CALLS   32
#define GRPC_GUEST_WATCHES 16
#define GRPC_GUEST_MESSAGE 1024
#define GRPC_GUEST_BYTES   (64u * 1024)
/* Untrusted connections closed to make room whose threads have not ended yet: beyond, a new
 * connection is refused at accept rather than cost one more thread. */
#define GRPC_EVICTING_MAX 64

/* ---- metrics ---- */

/* Methods counted by name (the process methods, then the health ones); the last row is the
 * calls no method was found for. */
#define MX_METHODS 16
#define MX_UNKNOWN MX_METHODS
#define MX_CODES   (GRPC_UNAUTHENTICATED + 1)

static struct {
    uint64_t calls[MX_METHODS + 1][MX_CODES];
    uint64_t conns_total, conns_refused, conns_evicted;
    uint64_t conns_open, calls_running; /* gauges */
} mx;

static inline void mx_add(uint64_t *p, int64_t n)
{
    __atomic_add_fetch(p, (uint64_t)n, __ATOMIC_RELAXED);
}

static inline uint64_t mx_get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Request bytes held now: token holders' (GRPC_REQUEST_BUDGET) and guests' (GRPC_GUEST_BYTES),
 * apart, so that guests can never starve the others' requests. */
static size_t request_bytes, guest_bytes;

static bool budget_take(bool guest, size_t n)
{
    size_t *pool = guest ? &guest_bytes : &request_bytes;
    size_t most = guest ? GRPC_GUEST_BYTES : GRPC_REQUEST_BUDGET;
    if (__atomic_add_fetch(pool, n, __ATOMIC_RELAXED) <= most)
        return true;
    __atomic_sub_fetch(pool, n, __ATOMIC_RELAXED);
    return false;
}

static void budget_give(bool guest, size_t n)
{
    __atomic_sub_fetch(guest ? &guest_bytes : &request_bytes, n, __ATOMIC_RELAXED);
}

/* ---- codes ---- */

static const char *const code_names[MX_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *grpc_code_name(enum grpc_code code)
{
    return (unsigned)code < MX_CODES ? code_names[code] : "UNKNOWN";
}

enum grpc_code grpc_code_of(enum sbxd_errkind kind)
{
    switch (kind) {
    case SBXD_E_INVALID:
        return GRPC_INVALID_ARGUMENT;
    case SBXD_E_DENIED:
        return GRPC_PERMISSION_DENIED;
    case SBXD_E_NOT_FOUND:
        return GRPC_NOT_FOUND;
    case SBXD_E_CONFLICT:
    case SBXD_E_PRECONDITION:
        return GRPC_FAILED_PRECONDITION;
    case SBXD_E_RANGE:
        return GRPC_OUT_OF_RANGE;
    case SBXD_E_TOO_LARGE:
    case SBXD_E_BUSY:
    case SBXD_E_NO_SPACE:
        return GRPC_RESOURCE_EXHAUSTED;
    case SBXD_E_UNAVAILABLE:
        return GRPC_UNAVAILABLE;
    case SBXD_E_INTERNAL:
        return GRPC_INTERNAL;
    case SBXD_E_NONE:
        break;
    }
    return GRPC_UNKNOWN;
}

/* ---- structures ---- */

/* One framed response message (5-byte prefix and body), queued for the client. */
struct frame {
    struct frame *next;
    size_t len, off; /* off: bytes handed to nghttp2 already */
    uint8_t data[];
};

struct conn;

struct grpc_call {
    struct conn *conn;
    struct grpc_call *prev, *next; /* the connection's streams (connection thread) */
    struct grpc_call *work_next;   /* the front's calls waiting for an idle worker */
    int32_t stream_id;
    const struct grpc_method *method;
    unsigned mx; /* metrics row */

    /* The request: the connection thread's until the handler starts, read-only after. */
    uint8_t prefix[5];
    size_t prefix_len;
    uint8_t *msg;
    size_t msg_len, msg_got, msg_cap; /* declared, received, allocated (and budgeted) */
    size_t header_bytes;
    char path[GRPC_PATH_MAX];
    bool path_long, post, content_type_ok, timeout_set, timeout_bad, encoding_set,
        encoding_identity, auth_ok;
    bool guest; /* a health call without the token: the guests' budget (set with the headers) */
    unsigned nauth;
    int64_t timeout_ns;
    int64_t deadline_ns;     /* grpc-timeout's, absolute; 0: none */
    int64_t req_deadline_ns; /* the request must be whole by then */

    /* The connection thread's. */
    bool req_done;       /* the client's END_STREAM */
    bool answered;       /* answered before any handler ran: further DATA is dropped */
    bool dispatched;     /* a handler runs (or ran) */
    bool resp_started;   /* response HEADERS with a data provider submitted */
    bool deferred;       /* the data provider waits to be resumed */
    bool end_submitted;  /* trailers (or a Trailers-Only answer) submitted */
    bool end_sent;       /* ... and sent: the call is answered */
    bool reset_sent;     /* we reset the stream */
    int http_status;     /* of a Trailers-Only answer: 200, or 405/415 for a non-gRPC request */
    int end_code;        /* the grpc-status submitted */
    int final_code;      /* ... and sent (-1: none), for the metrics */
    int64_t progress_ns; /* answer bytes wait: since when none went out (0: none wait) */

    /* Shared with the handler, under the connection's lock. */
    unsigned refs;
    enum grpc_cancel cancel;
    bool finished; /* the answer's status is set (by the handler, or by the transport) */
    enum grpc_code code;
    char message[GRPC_MESSAGE_MAX];
    char *trailer[GRPC_TRAILERS_MAX][2];
    unsigned ntrailers;
    struct frame *qhead, *qtail;
    size_t queued;
    int cancel_rd, cancel_wr; /* socketpair: the handler's end, and ours (closed at cancel) */
};

struct conn {
    struct grpc_front *g;
    struct conn *prev, *next; /* the front's list (its lock) */
    int fd;
    int ev_fd; /* eventfd: a call has news for the connection thread, or the front stops */
    pthread_mutex_t lock;
    pthread_cond_t room; /* senders wait here for room in their queue, or a cancel */
    unsigned refs;       /* under lock: the connection thread, and every call object */
    unsigned handlers;   /* under lock: handlers running */

    /* The connection thread's. */
    nghttp2_session *h2;
    struct grpc_call *calls; /* streams that have a call object */
    unsigned nstreams;
    uint8_t *wbuf; /* what the socket did not take of the session's last output */
    size_t wlen, woff, wcap;
    int64_t opened_ns, idle_since_ns, stall_since_ns, closing_deadline_ns;
    bool settings_seen, closing, stopping;
    char peer[64];

    /* Atomic: a call other than a guest's came on it (set by the connection thread, read by
     * the accepting one); it was chosen to make room (set by the accepting thread). */
    bool trusted, evicted;
};

struct grpc_front {
    const struct sbxd_config *cfg;
    struct server *srv;
    size_t token_len;
    unsigned max_calls; /* handlers running across the front */
    int listen_fd, wake_fd;
    struct acceptor_state acc; /* the reserve descriptor, the accept failures' log */
    uint16_t port;
    pthread_t acceptor;
    bool acceptor_started;
    bool stopping;                       /* atomic */
    bool draining;                       /* atomic */
    unsigned calls;                      /* atomic: handlers running, guests' apart */
    unsigned guest_calls, guest_watches; /* atomic: the guests' handlers, and Watches of them */
    int64_t paused_until_ns;
    pthread_mutex_t lock;
    pthread_cond_t ended; /* a thread ended (CLOCK_MONOTONIC) */
    struct conn *conns;   /* under lock */
    unsigned nconns;      /* under lock */
    unsigned nevicting;   /* under lock: connections of nconns closing to make room */
    unsigned threads;     /* under lock: connection and handler threads alive */
    /* Handler threads are kept for the next calls (under lock): calls handed to idle ones,
     * oldest first, and how many wait for one. */
    pthread_cond_t work;
    struct grpc_call *work_head, *work_tail;
    unsigned idle;
};

/* A handler thread idle this long ends; at most this many wait for calls at once. */
#define WORKER_IDLE_MS   10000
#define WORKERS_IDLE_MAX 16

/* ---- threads ---- */

static int thread_spawn(struct grpc_front *g, size_t stack, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack);
    pthread_mutex_lock(&g->lock);
    g->threads++;
    pthread_mutex_unlock(&g->lock);
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&g->lock);
        g->threads--;
        pthread_cond_broadcast(&g->ended);
        pthread_mutex_unlock(&g->lock);
        errno = rc;
        return -1;
    }
    return 0;
}

/* The last thing a detached thread does: after it, g may be gone. */
static void thread_done(struct grpc_front *g)
{
    pthread_mutex_lock(&g->lock);
    g->threads--;
    pthread_cond_broadcast(&g->ended);
    pthread_mutex_unlock(&g->lock);
}

static void wake(int fd)
{
    uint64_t one = 1;
    if (write(fd, &one, sizeof(one)) < 0) {
        /* the counter is non-zero already: the thread wakes anyway */
    }
}

/* ---- calls: lifetime ---- */

static void conn_unref(struct conn *cn)
{
    pthread_mutex_lock(&cn->lock);
    bool last = --cn->refs == 0;
    pthread_mutex_unlock(&cn->lock);
    if (!last)
        return;
    pthread_mutex_destroy(&cn->lock);
    pthread_cond_destroy(&cn->room);
    close(cn->ev_fd);
    free(cn->wbuf);
    free(cn);
}

static void queue_free(struct frame *f)
{
    while (f) {
        struct frame *next = f->next;
        free(f);
        f = next;
    }
}

static void call_free(struct grpc_call *c)
{
    /* Counted once, by what the client was told: the status sent, or why nothing was. */
    int code = c->final_code;
    if (code < 0)
        code = c->cancel == GRPC_DEADLINE       ? GRPC_DEADLINE_EXCEEDED
               : c->cancel == GRPC_DISCONNECTED ? GRPC_UNAVAILABLE
                                                : GRPC_CANCELLED;
    mx_add(&mx.calls[c->mx][code], 1);
    queue_free(c->qhead);
    for (unsigned i = 0; i < c->ntrailers; i++) {
        free(c->trailer[i][0]);
        free(c->trailer[i][1]);
    }
    if (c->msg_cap)
        budget_give(c->guest, c->msg_cap);
    free(c->msg);
    if (c->cancel_rd >= 0)
        close(c->cancel_rd);
    if (c->cancel_wr >= 0)
        close(c->cancel_wr);
    free(c);
}

static void call_unref(struct grpc_call *c)
{
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&cn->lock);
    if (!last)
        return;
    call_free(c);
    conn_unref(cn);
}

/* Under the lock: the call has no client to answer any more. Its descriptor hangs up (the
 * exec service's waits and the command end there) and a sender waiting for room returns. */
static void cancel_locked(struct conn *cn, struct grpc_call *c, enum grpc_cancel why)
{
    if (c->cancel != GRPC_LIVE)
        return;
    c->cancel = why;
    if (c->cancel_wr >= 0) {
        close(c->cancel_wr);
        c->cancel_wr = -1;
    }
    pthread_cond_broadcast(&cn->room);
}

/* Under the lock: the answer's status. When the transport ends the call (a deadline), what is
 * queued goes, but for a message nghttp2 has begun to send: the client gets it whole. */
static void finish_locked(struct grpc_call *c, enum grpc_code code, const char *text,
                          bool drop_queue)
{
    if (c->finished)
        return;
    c->finished = true;
    c->code = code;
    snprintf(c->message, sizeof(c->message), "%s", text ? text : "");
    if (drop_queue && c->qhead) {
        struct frame *keep = c->qhead->off > 0 ? c->qhead : NULL;
        queue_free(keep ? keep->next : c->qhead);
        if (keep)
            keep->next = NULL;
        c->qhead = c->qtail = keep;
        c->queued = keep ? keep->len - keep->off : 0;
    }
}

/* Under the lock (or before the handler runs): one more trailer, taken as it is. */
static void trailer_add(struct grpc_call *c, const char *key, const char *value)
{
    if (c->ntrailers >= GRPC_TRAILERS_MAX)
        return;
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    c->trailer[c->ntrailers][0] = k;
    c->trailer[c->ntrailers][1] = v;
    c->ntrailers++;
}

/* The connection thread answers a call no handler runs for (yet): a refused request. The
 * answer goes out at the next pump; DATA still coming is dropped. */
static void call_answer(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void call_answer(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
{
    char text[GRPC_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    c->answered = true;
    if (c->msg_cap)
        budget_give(c->guest, c->msg_cap);
    free(c->msg);
    c->msg = NULL;
    c->msg_cap = 0;
    pthread_mutex_lock(&c->conn->lock);
    finish_locked(c, code, text, true);
    pthread_mutex_unlock(&c->conn->lock);
}

/* ---- the handler's side ---- */

const uint8_t *grpc_call_message(const struct grpc_call *c, size_t *len)
{
    static const uint8_t empty[1];
    *len = c->msg_len;
    return c->msg ? c->msg : empty;
}

int64_t grpc_call_deadline_ns(const struct grpc_call *c)
{
    return c->deadline_ns;
}

const char *grpc_call_peer(const struct grpc_call *c)
{
    return c->conn->peer;
}

struct server *grpc_call_server(const struct grpc_call *c)
{
    return c->conn->g->srv;
}

struct exec_service *grpc_call_exec(const struct grpc_call *c)
{
    return server_exec(c->conn->g->srv);
}

const struct sbxd_config *grpc_call_config(const struct grpc_call *c)
{
    return c->conn->g->cfg;
}

bool grpc_call_draining(const struct grpc_call *c)
{
    const struct grpc_front *g = c->conn->g;
    return __atomic_load_n(&g->draining, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(server_drain_flag(g->srv), __ATOMIC_ACQUIRE);
}

const bool *grpc_call_drain_flag(const struct grpc_call *c)
{
    return server_drain_flag(c->conn->g->srv);
}

int grpc_call_cancel_fd(const struct grpc_call *c)
{
    return c->cancel_rd;
}

enum grpc_cancel grpc_call_cancelled(const struct grpc_call *c)
{
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    enum grpc_cancel why = c->cancel;
    pthread_mutex_unlock(&cn->lock);
    return why;
}

int grpc_call_send(struct grpc_call *c, const ProtobufCMessage *msg)
{
    struct conn *cn = c->conn;
    /* Wait for room first, and only then build the frame: a stalled client costs one queue,
     * not one more message. */
    pthread_mutex_lock(&cn->lock);
    while (c->queued >= GRPC_SEND_QUEUE_MAX && c->cancel == GRPC_LIVE && !c->finished)
        pthread_cond_wait(&cn->room, &cn->lock);
    bool gone = c->cancel != GRPC_LIVE || c->finished;
    pthread_mutex_unlock(&cn->lock);
    if (gone)
        return -1;
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > UINT32_MAX)
        return -1;
    struct frame *f = malloc(sizeof(*f) + 5 + n);
    if (!f)
        return -1;
    f->next = NULL;
    f->len = 5 + n;
    f->off = 0;
    f->data[0] = 0; /* not compressed */
    f->data[1] = (uint8_t)(n >> 24);
    f->data[2] = (uint8_t)(n >> 16);
    f->data[3] = (uint8_t)(n >> 8);
    f->data[4] = (uint8_t)n;
    protobuf_c_message_pack(msg, f->data + 5);
    pthread_mutex_lock(&cn->lock);
    gone = c->cancel != GRPC_LIVE || c->finished;
    if (!gone) {
        if (c->qtail)
            c->qtail->next = f;
        else
            c->qhead = f;
        c->qtail = f;
        c->queued += f->len;
    }
    pthread_mutex_unlock(&cn->lock);
    if (gone) {
        free(f);
        return -1;
    }
    /* A unary method's one message goes out with its trailers: grpc_call_finish wakes. */
    if (c->method->server_streaming)
        wake(cn->ev_fd);
    return 0;
}

/* A trailer key as HTTP/2 and gRPC take it: lower case token characters, none of gRPC's own
 * (grpc-*) and no binary one (-bin wants base64). */
static bool trailer_key_ok(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n >= GRPC_TRAILER_KEY || strncmp(key, "grpc-", 5) == 0 ||
        (n > 4 && strcmp(key + n - 4, "-bin") == 0))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = key[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
              ch == '.'))
            return false;
    }
    return true;
}

static bool trailer_value_ok(const char *value)
{
    size_t n = strlen(value);
    if (n >= GRPC_TRAILER_VALUE)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)value[i] < 0x20 || (unsigned char)value[i] > 0x7e)
            return false;
    return true;
}

void grpc_call_trailer(struct grpc_call *c, const char *key, const char *value)
{
    /* Anything else could break the answer's header block or forge gRPC's own fields: it is
     * left out. */
    if (!key || !value || !trailer_key_ok(key) || !trailer_value_ok(value))
        return;
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    if (!c->finished)
        trailer_add(c, key, value);
    pthread_mutex_unlock(&cn->lock);
}

void grpc_call_finish(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
{
    char text[GRPC_MESSAGE_MAX] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
    }
    if ((unsigned)code >= MX_CODES)
        code = GRPC_UNKNOWN;
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    if (c->cancel == GRPC_LIVE)
        finish_locked(c, code, text, false);
    pthread_mutex_unlock(&cn->lock);
    wake(cn->ev_fd);
}

/* A guest's handler from the guests' budget: false when it is spent. A Watch takes one of the
 * GRPC_GUEST_WATCHES too, so that Checks (a probe's) always find room. */
static bool guest_take(struct grpc_front *g, bool watch)
{
    if (__atomic_add_fetch(&g->guest_calls, 1, __ATOMIC_ACQ_REL) > GRPC_GUEST_CALLS) {
        __atomic_sub_fetch(&g->guest_calls, 1, __ATOMIC_RELEASE);
        return false;
    }
    if (watch && __atomic_add_fetch(&g->guest_watches, 1, __ATOMIC_ACQ_REL) > GRPC_GUEST_WATCHES) {
        __atomic_sub_fetch(&g->guest_watches, 1, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&g->guest_calls, 1, __ATOMIC_RELEASE);
        return false;
    }
    return true;
}

static void guest_put(struct grpc_front *g, bool watch)
{
    if (watch)
        __atomic_sub_fetch(&g->guest_watches, 1, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&g->guest_calls, 1, __ATOMIC_RELEASE);
}

/* One call on a handler thread, to its end. */
static void call_run(struct grpc_call *c)
{
    struct conn *cn = c->conn;
    struct grpc_front *g = cn->g;
    c->method->handler(c);
    pthread_mutex_lock(&cn->lock);
    bool over = c->finished || c->cancel != GRPC_LIVE;
    pthread_mutex_unlock(&cn->lock);
    if (!over)
        grpc_call_finish(c, GRPC_INTERNAL, "the method ended without an answer");
    if (c->guest) {
        guest_put(g, c->method->server_streaming);
    } else {
        pthread_mutex_lock(&cn->lock);
        cn->handlers--;
        pthread_mutex_unlock(&cn->lock);
        __atomic_sub_fetch(&g->calls, 1, __ATOMIC_RELEASE);
    }
    mx_add(&mx.calls_running, -1);
    call_unref(c);
}

/* A handler thread: its first call, then the calls handed to it while it waits idle (no
 * thread is made per call: a unary call's latency is the handler's), until it has waited
 * WORKER_IDLE_MS for nothing, the front stops, or enough others wait already. */
static void *worker_main(void *arg)
{
    struct grpc_call *c = arg;
    struct grpc_front *g = c->conn->g;
    while (c) {
        call_run(c);
        c = NULL;
        pthread_mutex_lock(&g->lock);
        if (g->idle < WORKERS_IDLE_MAX) {
            g->idle++;
            struct timespec until = time_mono_timespec(time_mono_ns() + WORKER_IDLE_MS * 1000000LL);
            while (!g->work_head && !__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE))
                if (pthread_cond_timedwait(&g->work, &g->lock, &until) == ETIMEDOUT)
                    break;
            if ((c = g->work_head)) {
                g->work_head = c->work_next;
                if (!g->work_head)
                    g->work_tail = NULL;
                c->work_next = NULL;
            }
            g->idle--;
        }
        pthread_mutex_unlock(&g->lock);
    }
    thread_done(g);
    return NULL;
}

/* Run c's handler on an idle handler thread, else on a new one. -1 with errno when no thread
 * could be made. */
static int call_dispatch(struct grpc_front *g, struct grpc_call *c)
{
    pthread_mutex_lock(&g->lock);
    unsigned waiting = 0;
    for (struct grpc_call *w = g->work_head; w; w = w->work_next)
        waiting++;
    bool handed = g->idle > waiting && !__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE);
    if (handed) {
        if (g->work_tail)
            g->work_tail->work_next = c;
        else
            g->work_head = c;
        g->work_tail = c;
        pthread_cond_signal(&g->work);
    }
    pthread_mutex_unlock(&g->lock);
    return handed ? 0 : thread_spawn(g, SBXD_THREAD_STACK, worker_main, c);
}

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

static void earliest(int64_t *next, int64_t t)
{
    if (t && (!*next || t < *next))
        *next = t;
}

/* Every call's state into the session: deadlines, answers begun, data to resume, ends. The
 * earliest time something is due next (0: none). */
static int64_t pump(struct conn *cn, int64_t now)
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
            cancel_locked(cn, c, GRPC_DEADLINE);
            finish_locked(c, GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed", true);
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
                cancel_locked(cn, c, GRPC_DISCONNECTED);
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
            earliest(&next, c->deadline_ns);
        if (!c->req_done && !c->finished)
            earliest(&next, c->req_deadline_ns);
        if (waiting)
            earliest(&next, c->progress_ns + stall_ns);
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
        call_answer(c, GRPC_UNIMPLEMENTED, "gRPC takes POST only");
        return;
    }
    if (!c->content_type_ok) {
        c->http_status = 415;
        call_answer(c, GRPC_INTERNAL, "content-type must be application/grpc");
        return;
    }
    /* The token guards everything but the health checks, as on the HTTP side (probes carry
     * no token). A second authorization header is refused rather than guessed between. */
    bool token = g->token_len > 0 && c->nauth == 1 && c->auth_ok;
    if (g->token_len > 0 && !health && !token) {
        metrics_limit(LIM_UNAUTHORIZED);
        call_answer(c, GRPC_UNAUTHENTICATED,
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
        call_answer(c, GRPC_UNIMPLEMENTED, "unknown method %s", c->path_long ? "(long)" : c->path);
        return;
    }
    if (c->timeout_bad) {
        call_answer(c, GRPC_INTERNAL, "malformed grpc-timeout");
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
                    call_answer(c, GRPC_RESOURCE_EXHAUSTED,
                                "the request message (%zu bytes) is over the %u-byte limit%s",
                                c->msg_len, most,
                                c->guest ? " of a health call without the token" : "");
                    return 0;
                }
            }
            continue;
        }
        if (c->msg_got == c->msg_len) {
            call_answer(c, GRPC_INTERNAL, "more than one request message (the method takes one)");
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
            if (!budget_take(c->guest, cap - c->msg_cap)) {
                call_answer(c, GRPC_RESOURCE_EXHAUSTED,
                            "sbxd holds too many request bytes at once; retry later");
                return 0;
            }
            p = realloc(c->msg, cap);
            if (!p) {
                budget_give(c->guest, cap - c->msg_cap);
                call_answer(c, GRPC_RESOURCE_EXHAUSTED, "out of memory for the request");
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
        call_answer(c, GRPC_INTERNAL, "the request carries no message");
        return;
    }
    if (c->msg_got < c->msg_len) {
        call_answer(c, GRPC_INTERNAL, "the request message is cut short (%zu of %zu bytes)",
                    c->msg_got, c->msg_len);
        return;
    }
    if (c->prefix[0] & ~1u) {
        call_answer(c, GRPC_INTERNAL, "bad message flags 0x%02x", c->prefix[0]);
        return;
    }
    if (c->prefix[0] & 1) {
        if (!c->encoding_set || c->encoding_identity) {
            call_answer(c, GRPC_INTERNAL, "a compressed message without grpc-encoding");
        } else {
            call_answer(c, GRPC_UNIMPLEMENTED, "sbxd takes no compressed messages (identity)");
            trailer_add(c, "grpc-accept-encoding", "identity");
        }
        return;
    }
    if (c->deadline_ns && time_mono_ns() >= c->deadline_ns) {
        call_answer(c, GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed");
        return;
    }
    if (c->guest) {
        if (!guest_take(g, c->method->server_streaming)) {
            call_answer(c, GRPC_RESOURCE_EXHAUSTED,
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
            call_answer(c, GRPC_RESOURCE_EXHAUSTED, "too many calls at once; retry later");
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
        mx_add(&mx.calls_running, 1);
        if (call_dispatch(g, c) == 0)
            return;
        e = errno;
        mx_add(&mx.calls_running, -1);
        c->dispatched = false;
        pthread_mutex_lock(&cn->lock);
        c->refs--;
        pthread_mutex_unlock(&cn->lock);
    }
    if (c->guest) {
        guest_put(g, c->method->server_streaming);
    } else {
        __atomic_sub_fetch(&g->calls, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&cn->lock);
        cn->handlers--;
        pthread_mutex_unlock(&cn->lock);
    }
    call_answer(c, GRPC_RESOURCE_EXHAUSTED, "cannot start the call (%s); retry later", strerror(e));
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

static void call_unlink(struct conn *cn, struct grpc_call *c)
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
        cancel_locked(cn, c, GRPC_RESET);
    pthread_mutex_unlock(&cn->lock);
    call_unlink(cn, c);
    call_unref(c);
    return 0;
}

/* ---- connections ---- */

static int conn_session(struct conn *cn)
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

/* Keep what the socket did not take (the session's buffer is its own only until its next
 * send). */
static int wbuf_keep(struct conn *cn, const uint8_t *p, size_t n)
{
    if (cn->woff > 0) {
        memmove(cn->wbuf, cn->wbuf + cn->woff, cn->wlen - cn->woff);
        cn->wlen -= cn->woff;
        cn->woff = 0;
    }
    if (cn->wlen + n > cn->wcap) {
        size_t cap = cn->wlen + n < 32768 ? 32768 : cn->wlen + n;
        uint8_t *b = realloc(cn->wbuf, cap);
        if (!b)
            return -1;
        cn->wbuf = b;
        cn->wcap = cap;
    }
    memcpy(cn->wbuf + cn->wlen, p, n);
    cn->wlen += n;
    return 0;
}

/* Frames gathered before a write: a unary answer's HEADERS, DATA and trailers leave in one
 * segment (one wake-up of the client, not three), a stream's frames a socket buffer's worth
 * at a time. */
#define WRITE_GATHER 65536

/* Write what the session has until the socket is full. -1: the connection is broken. */
static int conn_flush(struct conn *cn, int64_t now)
{
    for (;;) {
        if (cn->woff == cn->wlen)
            cn->stall_since_ns = now; /* nothing waited: a stall is counted from here */
        while (cn->wlen - cn->woff < WRITE_GATHER) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(cn->h2, &data);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (wbuf_keep(cn, data, (size_t)n) < 0)
                return -1;
        }
        if (cn->woff == cn->wlen)
            return 0;
        ssize_t k = send(cn->fd, cn->wbuf + cn->woff, cn->wlen - cn->woff, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        cn->woff += (size_t)k;
        cn->stall_since_ns = now; /* progress */
        if (cn->woff == cn->wlen)
            cn->woff = cn->wlen = 0;
    }
}

/* Read what the client sent (a few reads' worth) into the session. -1: the connection is
 * over (closed, broken, or refused by the session: a bad preface, a protocol error). */
static int conn_read(struct conn *cn)
{
    uint8_t buf[GRPC_READ_CHUNK];
    for (int i = 0; i < 4; i++) {
        ssize_t n = recv(cn->fd, buf, sizeof(buf), 0);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        if (nghttp2_session_mem_recv(cn->h2, buf, (size_t)n) < 0)
            return -1;
        if ((size_t)n < sizeof(buf))
            return 0;
    }
    return 0;
}

/* Stop reading: send GOAWAY (the session ends once it is out), for at most a moment more. */
static void conn_close_soon(struct conn *cn, int64_t now)
{
    if (cn->closing)
        return;
    cn->closing = true;
    /* A GOAWAY that lets the streams already begun end (an answer that is complete goes
     * out); the connection ends once none is left, or at the deadline. */
    nghttp2_submit_goaway(cn->h2, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(cn->h2), NGHTTP2_NO_ERROR, NULL,
                          0);
    cn->closing_deadline_ns = now + GRPC_STOP_FLUSH_MS * 1000000LL;
}

/* Cancel every call whose handler has not finished it (a finished call's answer still goes
 * out, if the connection lasts long enough). */
static void conn_cancel_unfinished(struct conn *cn, enum grpc_cancel why)
{
    pthread_mutex_lock(&cn->lock);
    for (struct grpc_call *c = cn->calls; c; c = c->next)
        if (!c->finished)
            cancel_locked(cn, c, why);
    pthread_mutex_unlock(&cn->lock);
}

static void conn_loop(struct conn *cn)
{
    struct grpc_front *g = cn->g;
    const struct sbxd_config *cfg = g->cfg;
    int64_t idle_ns = (int64_t)cfg->idle_timeout_ms * 1000000;
    for (;;) {
        int64_t now = time_mono_ns();
        if (__atomic_load_n(&cn->evicted, __ATOMIC_ACQUIRE)) {
            /* Closed to make room (make_room_locked): its guests' calls end, a GOAWAY goes if
             * the socket takes it at once, and the thread ends now rather than linger. */
            conn_cancel_unfinished(cn, GRPC_DISCONNECTED);
            static const char why[] = "sbxd is at --max-connections: an untrusted connection "
                                      "made room";
            nghttp2_submit_goaway(cn->h2, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(cn->h2), NGHTTP2_NO_ERROR,
                                  (const uint8_t *)why, sizeof(why) - 1);
            (void)conn_flush(cn, now);
            return;
        }
        if (!cn->stopping && __atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
            cn->stopping = true;
            conn_cancel_unfinished(cn, GRPC_DISCONNECTED);
            conn_close_soon(cn, now);
        }
        int64_t next = pump(cn, now);
        if (conn_flush(cn, now) < 0)
            return;
        bool pending = cn->woff < cn->wlen;
        if (!nghttp2_session_want_read(cn->h2) && !nghttp2_session_want_write(cn->h2) && !pending)
            return; /* the session failed, or the client said GOAWAY */
        if (cn->closing && cn->nstreams == 0 && !pending && !nghttp2_session_want_write(cn->h2))
            return; /* our GOAWAY is out, and no stream is left */
        /* The timers of the connection itself. */
        if (!cn->settings_seen) {
            /* A client must at least say its preface and SETTINGS quickly. */
            int64_t t = cn->opened_ns + (int64_t)cfg->request_timeout_ms * 1000000;
            if (now >= t)
                return;
            earliest(&next, t);
        }
        if (pending) {
            if (now - cn->stall_since_ns >= idle_ns)
                return; /* the client reads nothing of what it is sent */
            earliest(&next, cn->stall_since_ns + idle_ns);
        }
        if (cn->closing) {
            if (now >= cn->closing_deadline_ns)
                return;
            earliest(&next, cn->closing_deadline_ns);
        } else if (cn->nstreams == 0) {
            if (now - cn->idle_since_ns >= idle_ns) {
                conn_close_soon(cn, now);
                continue;
            }
            earliest(&next, cn->idle_since_ns + idle_ns);
        }
        /* A client that does not read what it is sent gets nothing more read either: its
         * requests cannot make sbxd queue more answers (nor PING acks). */
        struct pollfd pfd[2] = {
            {.fd = cn->fd,
             .events = (short)((pending ? POLLOUT : 0) |
                               (!pending && nghttp2_session_want_read(cn->h2) ? POLLIN : 0))},
            {.fd = cn->ev_fd, .events = POLLIN},
        };
        int timeout = next ? time_ms_until(next) : -1;
        int ready = poll(pfd, 2, timeout);
        if (ready < 0) {
            if (errno != EINTR)
                usleep(10000); /* (ENOMEM) no busy loop */
            continue;
        }
        if (pfd[1].revents) {
            uint64_t v;
            if (read(cn->ev_fd, &v, sizeof(v)) < 0) {
                /* reset by an earlier read: nothing lost */
            }
        }
        if (pfd[0].revents & (POLLERR | POLLNVAL))
            return;
        if ((pfd[0].revents & (POLLIN | POLLHUP)) && conn_read(cn) < 0)
            return;
    }
}

static void conn_end(struct conn *cn)
{
    struct grpc_front *g = cn->g;
    /* No callback runs in nghttp2_session_del: the streams still open are ended here. */
    if (cn->h2)
        nghttp2_session_del(cn->h2);
    cn->h2 = NULL;
    while (cn->calls) {
        struct grpc_call *c = cn->calls;
        pthread_mutex_lock(&cn->lock);
        cancel_locked(cn, c, GRPC_DISCONNECTED);
        pthread_mutex_unlock(&cn->lock);
        call_unlink(cn, c);
        call_unref(c);
    }
    close(cn->fd);
    cn->fd = -1;
    pthread_mutex_lock(&g->lock);
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        g->conns = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    g->nconns--;
    if (__atomic_load_n(&cn->evicted, __ATOMIC_ACQUIRE))
        g->nevicting--;
    pthread_mutex_unlock(&g->lock);
    mx_add(&mx.conns_open, -1);
}

static void *conn_main(void *arg)
{
    struct conn *cn = arg;
    struct grpc_front *g = cn->g;
    if (conn_session(cn) == 0)
        conn_loop(cn);
    conn_end(cn);
    conn_unref(cn);
    thread_done(g);
    return NULL;
}

static void format_peer(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(out, len, "%s:%u", host, ntohs(a->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(out, len, "[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        snprintf(out, len, "local");
    }
}

/* Under g's lock, at --max-connections: close the oldest untrusted connection (one that has
 * carried no call but guests', or none yet) to make room for a new one. Guests' connections
 * held every slot otherwise (256 connections of one health Watch each: a token holder was
 * refused at accept). A trusted connection is never chosen; the newest untrusted one is
 * chosen last, so a client's fresh connection has time to make its first call. False when
 * none can be (all trusted, or too many still closing). */
static bool make_room_locked(struct grpc_front *g)
{
    if (g->nevicting >= GRPC_EVICTING_MAX)
        return false;
    struct conn *victim = NULL;
    for (struct conn *cn = g->conns; cn; cn = cn->next)
        if (!__atomic_load_n(&cn->trusted, __ATOMIC_ACQUIRE) &&
            !__atomic_load_n(&cn->evicted, __ATOMIC_ACQUIRE) &&
            (!victim || cn->opened_ns < victim->opened_ns))
            victim = cn;
    if (!victim)
        return false;
    __atomic_store_n(&victim->evicted, true, __ATOMIC_RELEASE);
    g->nevicting++;
    wake(victim->ev_fd); /* (in the list, so its thread has not freed it) */
    mx_add(&mx.conns_evicted, 1);
    return true;
}

/* A connection accepted: its thread, unless the front is full (and no untrusted connection
 * makes room) or stopping. Takes fd. */
static void conn_open(struct grpc_front *g, int fd, const struct sockaddr_storage *ss)
{
    pthread_mutex_lock(&g->lock);
    bool room =
        !g->stopping && (g->nconns - g->nevicting < g->cfg->max_connections || make_room_locked(g));
    pthread_mutex_unlock(&g->lock);
    struct conn *cn = room ? calloc(1, sizeof(*cn)) : NULL;
    int ev = cn ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
    if (ev < 0) {
        /* Over the cap (or out of memory): closed at once, before it costs a thread. */
        free(cn);
        close(fd);
        mx_add(&mx.conns_refused, 1);
        return;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    cn->g = g;
    cn->fd = fd;
    cn->ev_fd = ev;
    cn->refs = 1; /* the connection thread's */
    pthread_mutex_init(&cn->lock, NULL);
    pthread_cond_init(&cn->room, NULL);
    cn->opened_ns = cn->idle_since_ns = time_mono_ns();
    format_peer(ss, cn->peer, sizeof(cn->peer));
    pthread_mutex_lock(&g->lock);
    cn->next = g->conns;
    if (g->conns)
        g->conns->prev = cn;
    g->conns = cn;
    g->nconns++;
    pthread_mutex_unlock(&g->lock);
    mx_add(&mx.conns_open, 1);
    mx_add(&mx.conns_total, 1);
    if (thread_spawn(g, GRPC_CONN_STACK, conn_main, cn) < 0) {
        conn_end(cn);
        conn_unref(cn);
        mx_add(&mx.conns_refused, 1);
    }
}

/* ---- the listener ---- */

/* acceptor_shed's turn_away: closed at once, counted. */
static void refuse(int fd, void *ctx)
{
    (void)ctx;
    close(fd);
    mx_add(&mx.conns_refused, 1);
}

static void accept_some(struct grpc_front *g)
{
    for (int i = 0; i < GRPC_ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(g->listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            enum acceptor_next next =
                acceptor_failed(&g->acc, "grpc", g->listen_fd, errno, refuse, NULL);
            if (next == ACCEPT_DRAINED)
                return;
            if (next == ACCEPT_AGAIN)
                continue;
            g->paused_until_ns = time_mono_ns() + GRPC_ACCEPT_PAUSE_MS * 1000000LL;
            return;
        }
        conn_open(g, fd, &ss);
    }
}

static void *accept_main(void *arg)
{
    struct grpc_front *g = arg;
    while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
        int64_t now = time_mono_ns();
        bool paused = g->paused_until_ns > now;
        struct pollfd pfd[2] = {
            {.fd = g->wake_fd, .events = POLLIN},
            {.fd = paused ? -1 : g->listen_fd, .events = POLLIN},
        };
        int ready = poll(pfd, 2, paused ? time_ms_until(g->paused_until_ns) : -1);
        if (ready < 0) {
            if (errno != EINTR)
                usleep(GRPC_ACCEPT_PAUSE_MS * 1000);
            continue;
        }
        if (pfd[0].revents)
            continue; /* stop: the loop's test */
        if (pfd[1].revents)
            accept_some(g);
    }
    return NULL;
}

static void front_free(struct grpc_front *g)
{
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    if (g->wake_fd >= 0)
        close(g->wake_fd);
    acceptor_free(&g->acc);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->ended);
    pthread_cond_destroy(&g->work);
    free(g);
}

struct grpc_front *grpc_front_start(const struct sbxd_config *cfg, struct server *srv,
                                    struct sbxd_err *err)
{
    struct grpc_front *g = calloc(1, sizeof(*g));
    if (!g) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    g->cfg = cfg;
    g->srv = srv;
    g->token_len = cfg->token ? strlen(cfg->token) : 0;
    /* Every command that may run or wait, every background process's Start, and a quick call
     * (health, stdin, a signal) per connection. */
    uint64_t most = cfg->max_connections + cfg->max_running + cfg->max_queued + cfg->max_processes;
    g->max_calls = most > 65536 ? 65536 : (unsigned)most;
    g->listen_fd = g->wake_fd = g->acc.reserve_fd = -1;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->ended, &ca);
    pthread_cond_init(&g->work, &ca);
    pthread_condattr_destroy(&ca);

    int family = cfg->grpc_addr.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot listen on %s", cfg->grpc_listen);
        front_free(g);
        return NULL;
    }
    g->listen_fd = fd;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6)
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&cfg->grpc_addr, cfg->grpc_addr_len) < 0 ||
        listen(fd, SBXD_LISTEN_BACKLOG) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot listen on %s (--grpc-listen)",
                        cfg->grpc_listen);
        front_free(g);
        return NULL;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        g->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    g->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (g->wake_fd < 0 || acceptor_init(&g->acc) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot set up the gRPC listener");
        front_free(g);
        return NULL;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_FRONT_STACK);
    int rc = pthread_create(&g->acceptor, &attr, accept_main, g);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, rc, "cannot start the gRPC accepting thread");
        front_free(g);
        return NULL;
    }
    g->acceptor_started = true;
    return g;
}

uint16_t grpc_front_port(const struct grpc_front *g)
{
    return g->port;
}

unsigned grpc_front_calls(const struct grpc_front *g)
{
    return __atomic_load_n(&g->calls, __ATOMIC_ACQUIRE) +
           __atomic_load_n(&g->guest_calls, __ATOMIC_ACQUIRE);
}

void grpc_front_drain(struct grpc_front *g)
{
    /* Connections stay: health must still answer (NOT_SERVING), and a command's stdin and
     * signals still come this way. The services refuse new commands. */
    __atomic_store_n(&g->draining, true, __ATOMIC_RELEASE);
}

void grpc_front_stop(struct grpc_front *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    __atomic_store_n(&g->stopping, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&g->work); /* idle handler threads end */
    pthread_mutex_unlock(&g->lock);
    wake(g->wake_fd);
    if (g->acceptor_started)
        pthread_join(g->acceptor, NULL);
    close(g->listen_fd);
    g->listen_fd = -1;
    /* Each connection sends GOAWAY, cancels its calls (their commands are killed through their
     * descriptors) and ends; the handlers follow. */
    pthread_mutex_lock(&g->lock);
    for (struct conn *cn = g->conns; cn; cn = cn->next)
        wake(cn->ev_fd);
    struct timespec until = time_mono_timespec(time_mono_ns() + GRPC_STOP_WAIT_MS * 1000000LL);
    while (g->threads > 0)
        if (pthread_cond_timedwait(&g->ended, &g->lock, &until) == ETIMEDOUT)
            break;
    unsigned left = g->threads;
    pthread_mutex_unlock(&g->lock);
    if (left > 0) {
        /* Their structures stay (a thread still uses them): a leak at exit, not a crash. */
        LOG_EVENT("warn", "grpc", LOG_S("message", "threads still running at stop"),
                  LOG_I("threads", left));
        return;
    }
    front_free(g);
}

/* ---- metrics ---- */

/* The label of a metrics row: the method's name, the last part of its path. */
static const char *method_label(unsigned row)
{
    if (row == MX_UNKNOWN)
        return "unknown";
    unsigned i = 0;
    const struct grpc_method *tables[] = {grpc_process_methods, grpc_health_methods};
    for (int t = 0; t < 2; t++)
        for (const struct grpc_method *m = tables[t]; m->path; m++, i++)
            if (i == row) {
                const char *slash = strrchr(m->path, '/');
                return slash ? slash + 1 : m->path;
            }
    return NULL;
}

void grpc_metrics_render(struct jsonw *w)
{
    char lab[160];
    metrics_head(w, "sbxd_grpc_calls_total", "counter",
                 "gRPC calls ended, by method and status code (series appear once seen).");
    for (unsigned r = 0; r <= MX_METHODS; r++) {
        const char *name = method_label(r);
        for (unsigned code = 0; name && code < MX_CODES; code++) {
            uint64_t v = mx_get(&mx.calls[r][code]);
            if (!v)
                continue;
            snprintf(lab, sizeof(lab), "method=\"%s\",code=\"%s\"", name, code_names[code]);
            metrics_line(w, "sbxd_grpc_calls_total", lab, (double)v);
        }
    }
    metrics_head(w, "sbxd_grpc_calls_in_progress", "gauge", "gRPC calls whose handler runs now.");
    metrics_line(w, "sbxd_grpc_calls_in_progress", NULL, (double)mx_get(&mx.calls_running));
    metrics_head(w, "sbxd_grpc_connections_total", "counter", "gRPC connections accepted.");
    metrics_line(w, "sbxd_grpc_connections_total", NULL, (double)mx_get(&mx.conns_total));
    metrics_head(w, "sbxd_grpc_connections_open", "gauge", "gRPC connections open now.");
    metrics_line(w, "sbxd_grpc_connections_open", NULL, (double)mx_get(&mx.conns_open));
    metrics_head(w, "sbxd_grpc_connections_refused_total", "counter",
                 "gRPC connections closed at accept: over --max-connections, or sbxd out of "
                 "descriptors or memory.");
    metrics_line(w, "sbxd_grpc_connections_refused_total", NULL, (double)mx_get(&mx.conns_refused));
    metrics_head(w, "sbxd_grpc_connections_evicted_total", "counter",
                 "gRPC connections that had carried no call but health calls without the token, "
                 "closed at --max-connections to make room for a new one.");
    metrics_line(w, "sbxd_grpc_connections_evicted_total", NULL, (double)mx_get(&mx.conns_evicted));
}
