/*
 * h2_internal.h - what the files of the gRPC front's transport share (h2.c: the front, its
 * listener, threads, codes and counters; h2_call.c: a call's life and the handler's side;
 * h2_wire.c: the answer on the wire and the requests, in nghttp2's callbacks; h2_conn.c: a
 * connection's thread). Nothing outside them includes it. h2.c's top comment says how the
 * transport works and what bounds it keeps.
 */
#ifndef SBXD_H2_INTERNAL_H
#define SBXD_H2_INTERNAL_H

#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "grpc_internal.h"
#include "sbxd/acceptor.h"
#include "sbxd/sandbox.h"

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
/* A failing poll of the listener waits this long before the next. */
#define GRPC_ACCEPT_PAUSE_MS 100
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

/* ---- counters (h2.c) ---- */

/* Methods counted by name (the process methods, then the health ones); the last row is the
 * calls no method was found for. */
#define MX_METHODS 16
#define MX_UNKNOWN MX_METHODS
#define MX_CODES   (GRPC_UNAUTHENTICATED + 1)

struct grpc_mx {
    uint64_t calls[MX_METHODS + 1][MX_CODES];
    uint64_t conns_total, conns_refused, conns_evicted;
    uint64_t conns_open, calls_running; /* gauges */
};
extern struct grpc_mx grpc_mx;

static inline void mx_add(uint64_t *p, int64_t n)
{
    __atomic_add_fetch(p, (uint64_t)n, __ATOMIC_RELAXED);
}

static inline uint64_t mx_get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
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
    struct sandbox *sb;
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

/* ---- across the files ---- */

/* h2.c */
int h2_thread_spawn(struct grpc_front *g, size_t stack, void *(*fn)(void *), void *arg);
void h2_budget_give(bool guest, size_t n);
void h2_thread_done(struct grpc_front *g);
bool h2_budget_take(bool guest, size_t n);
void h2_wake(int fd);

/* h2_call.c */
void h2_cancel_locked(struct conn *cn, struct grpc_call *c, enum grpc_cancel why);
void h2_guest_put(struct grpc_front *g, bool watch);
void h2_trailer_add(struct grpc_call *c, const char *key, const char *value);
bool h2_guest_take(struct grpc_front *g, bool watch);
void h2_call_answer(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int h2_call_dispatch(struct grpc_front *g, struct grpc_call *c);
void h2_call_unref(struct grpc_call *c);
void h2_finish_locked(struct grpc_call *c, enum grpc_code code, const char *text, bool drop_queue);
void h2_conn_unref(struct conn *cn);

/* h2_wire.c */
/* Every call's state into the session: deadlines, answers begun, data to resume, ends. The
 * earliest time something is due next (0: none). */
int64_t h2_pump(struct conn *cn, int64_t now);
/* The connection's nghttp2 server session, with sbxd's callbacks and SETTINGS. */
int h2_conn_session(struct conn *cn);
void h2_earliest(int64_t *next, int64_t t);
void h2_call_unlink(struct conn *cn, struct grpc_call *c);

/* h2_conn.c */
void h2_conn_open(struct grpc_front *g, int fd, const struct sockaddr_storage *ss);

#endif
