/*
 * http_internal.h - what the HTTP modules (server, routes, replies) share; nothing outside src/http
 * includes it.
 */
#ifndef SBXD_HTTP_INTERNAL_H
#define SBXD_HTTP_INTERNAL_H

#include <limits.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/cgroup.h"
#include "sbxd/err.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"
#include "sbxd/exec_service.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/server.h"
#include "sbxd/metrics.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"
#include "sbxd/sandbox.h"

/* The HTTP front: libmicrohttpd, its listeners, its connections and what its routes keep.
 * The daemon's state (the workspace, the exec service, the drain, the reset gate) is the
 * sandbox's (sandbox.h), shared with the other fronts. */
struct server {
    struct MHD_Daemon *mhd;
    const struct sbxd_config *cfg;
    struct sandbox *sb;
    uint16_t port;                   /* the first listener's: ports[0] */
    uint16_t ports[SBXD_LISTEN_MAX]; /* each --listen address's, in order */
    unsigned nports;
    unsigned streams;   /* atomic: long-lived streams being sent (server_stream_hold) */
    uint64_t completed; /* atomic: requests completed (activity, for the trim at rest) */
    char **metadata;    /* /v1/metadata: "NAME=value" taken from the environment at start */
    size_t token_len;   /* of cfg->token; 0: no token is required */
    /* guard.c: the open connections, their caps and deadlines */
    pthread_mutex_t guard_lock;
    struct conn *conns;
    unsigned conns_open;
    int64_t guard_tick_ns;
    uint64_t conns_evicted; /* atomic: shut down to make room for a new one */
    uint64_t conns_shed;    /* atomic: closed at accept, over the caps */
    struct front *front;    /* accept.c: the listening socket and its thread */
};

/* A long-lived stream (a process's output, a watch, MCP's events) is being sent: a stop's
 * drain waits until it is released (its free callback), so what it still has to say, a
 * watch's "gone" or a process's exit, is written before the server closes its connection. */
static inline void server_stream_hold(struct server *srv)
{
    __atomic_add_fetch(&srv->streams, 1, __ATOMIC_ACQ_REL);
}

static inline void server_stream_release(struct server *srv)
{
    __atomic_sub_fetch(&srv->streams, 1, __ATOMIC_ACQ_REL);
}

/* Sockets libmicrohttpd may hold at once: every connection sbxd admits, with room for those
 * ending. */
static inline unsigned server_conn_hard_limit(const struct sbxd_config *cfg)
{
    return (unsigned)(cfg->max_connections + SBXD_CONN_SPARE + SBXD_CONN_DYING);
}

/* One request's state, kept by MHD between calls of the access handler. */
struct req_ctx {
    struct server *srv;
    struct conn *conn; /* guard.c's entry of the connection, or NULL */
    const struct route *route;
    unsigned route_id; /* the route's number for /metrics */
    unsigned status;   /* of the response queued (0: none) */
    uint64_t bytes_in, bytes_out;
    char *body;
    size_t body_len, body_cap;
    bool replied;     /* a response is queued already (an early error) */
    bool body_in;     /* the whole request is in (the access handler's last call) */
    bool too_large;   /* the body passed --max-body-bytes: the rest is dropped */
    size_t discarded; /* bytes dropped so far */
    char client[64];
    bool holds_running; /* holds an exec_service_admit slot until the request completes */
    uint64_t reset_gen; /* the sandbox's reset_gen when its head came */
    char method[8];
    char *url; /* as sent: percent-escapes are the route's to decode */
    /* A route that streams its body keeps its state here; freed with whether the request
     * completed (false: the client went away, or the connection failed). */
    void *state;
    void (*state_free)(void *state, bool completed);
};

typedef enum MHD_Result (*route_fn)(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc);

/* HTTP_OTHER: any other method (PATCH, OPTIONS, ...): only the proxy takes them. */
enum {
    HTTP_GET = 1,
    HTTP_HEAD = 2,
    HTTP_POST = 4,
    HTTP_PUT = 8,
    HTTP_DELETE = 16,
    HTTP_OTHER = 32
};

/* A route that streams its body: begin once the headers are in (it may reply at once, and
 * then sets rc->replied), body for each piece, fn at the end. */
typedef enum MHD_Result (*route_begin_fn)(struct server *srv, struct MHD_Connection *c,
                                          struct req_ctx *rc, const char *url, const char *method);
typedef enum MHD_Result (*route_body_fn)(struct server *srv, struct MHD_Connection *c,
                                         struct req_ctx *rc, const char *data, size_t n);

/* A piece of a request's body kept in rc->body (grown as needed, NUL-terminated), within
 * --max-body-bytes: past it the rest is read and dropped, rc->too_large set, and 413 comes
 * at its end (libmicrohttpd cannot answer in the middle of a body); a sender that goes on
 * far beyond that loses the connection (MHD_NO). */
enum MHD_Result req_body_append(struct server *srv, struct req_ctx *rc, const char *data, size_t n);

/* Which face of the file API a route speaks: the native /files, the standardized /v1/files
 * (KEP sandboxd), or the legacy python-runtime routes (/upload, /download, /list, /exists).
 * One filesystem core serves all three; they differ in paths, statuses, headers and error
 * bodies (route_files.c, route_legacy_files.c). */
enum files_face { FACE_NONE = 0, FACE_FILES, FACE_V1, FACE_LEGACY, FACE_COUNT };

/* The answer to a body over --max-body-bytes, for a route whose protocol has its own error
 * shape (MCP's JSON-RPC error); NULL: the usual 413. */
typedef enum MHD_Result (*route_too_large_fn)(struct MHD_Connection *c, uint64_t max);

/* One entry of the route table (routes.c). */
struct route {
    const char *path;
    unsigned methods; /* HTTP_* bits */
    bool json_body;   /* takes a JSON body: Content-Type and size are checked up front */
    route_fn fn;
    bool prefix; /* path and everything below it ("/files" and "/files/...") */
    route_begin_fn begin;
    route_body_fn body;
    route_too_large_fn too_large;
    const char *label;    /* its name in /metrics */
    enum files_face face; /* a file route's face (FACE_NONE for the others) */
    /* Served while a reset is under way (health, metrics, the reset itself); every other
     * route is then answered 503, and one under way holds the sandbox's work_lock shared. */
    bool ungated;
};

/* The route table (routes.c): every route of the HTTP front, in the order they are matched;
 * a route's number for /metrics is its index, http_nroutes that of "unmatched". */
extern const struct route http_routes[];
extern const unsigned http_nroutes;

/* The route serving url (as sent, escapes kept), or NULL. */
const struct route *http_route_find(const char *url);

/* The workspace path a file route's URL names: the part after rt's path (nothing is taken
 * off when rt is NULL), percent-decoded, the workspace's own absolute path taken off its
 * front (fs_path_within), leading slashes dropped (malloc'd), or NULL with err (a bad
 * escape, a NUL, too long). */
char *http_files_path(const struct server *srv, const struct route *rt, const char *url,
                      struct sbxd_err *err);

/* Whether the request announces a body over max bytes: a Content-Length above it, or one
 * that is not a number (the one place that header is read). */
bool http_body_too_large(struct MHD_Connection *c, uint64_t max);

/* Queue r with status for c, as every answer is queued: the status and body size are kept
 * for /metrics, and the connection stops waiting for a request (guard.c). body_len is the
 * body's size when known (0 for a stream, whose reader calls http_count_out). */
enum MHD_Result http_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r,
                           uint64_t body_len);
/* Count n more bytes of the current request's streamed response. */
void http_count_out(size_t n);
/* A streamed response's reader: copy what is left of w's text from *off (at most max bytes)
 * into out, advance *off and count it as sent; returns how many. */
size_t http_stream_out(const struct jsonw *w, size_t *off, char *out, size_t max);
/* A content reader whose answer is made a piece at a time into w: once all of w is sent, w is
 * emptied and fill(cls) asked for the next piece (false: nothing more comes, the end of the
 * stream); a w that ran out of memory cuts the connection rather than send an answer that
 * lies. Then what fits of w is copied as http_stream_out does. */
ssize_t http_stream_pieces(struct jsonw *w, size_t *off, bool (*fill)(void *cls), void *cls,
                           char *out, size_t max);
/* Whether the request being answered on this thread is a HEAD. */
bool http_is_head(void);

/* accept.c: the listening socket (front_open, which sets srv->port), the thread accepting on
 * it (front_start; connections go to libmicrohttpd once guard_admit lets them in), lingering
 * close. front_stop ends the thread and closes the listening socket; front_free the rest. */
int front_open(struct server *srv, struct sbxd_err *err);
int front_start(struct server *srv, struct sbxd_err *err);
void front_stop(struct server *srv);
void front_free(struct server *srv);
/* Read and drop what still comes on fd (a duplicate, closed by this) for a bounded time. */
void front_linger(struct server *srv, int fd);

/* guard.c: connection caps, request deadlines, head size and the bearer token. */
enum guard_verdict { GUARD_PASS, GUARD_STOP };
void guard_init(struct server *srv);
void guard_destroy(struct server *srv);
/* A connection just accepted on fd: LIM_N, and it has an entry (making room if the caps are
 * reached), or the cap it is over, and it is to be closed at once. */
enum metrics_limit guard_admit(struct server *srv, int fd, const struct sockaddr *sa);
/* libmicrohttpd did not take fd (it closed it): drop its entry. */
void guard_forget(struct server *srv, int fd);
/* A request line came in on c (libmicrohttpd's URI callback). */
void guard_request_begun(struct server *srv, struct MHD_Connection *c);
/* The request was answered before it was all in: linger when the connection closes. */
void guard_answered_early(struct req_ctx *rc);
void guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                  enum MHD_ConnectionNotificationCode code);
/* The checks on a request's head, before any route sees it. GUARD_STOP: *ret is the answer
 * (a refusal was queued, or the connection is to be dropped). */
enum guard_verdict guard_head(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                              const char *url, const char *method, enum MHD_Result *ret);
/* The request is in (or its body is streamed to a route): no more deadline. */
void guard_wait_over(struct req_ctx *rc);
/* Its answer is out: the connection waits for the next request. */
void guard_request_done(struct server *srv, struct req_ctx *rc);

/* Replies. Each queues the response and returns MHD's result. */
/* Finish w's document (a newline is added) and queue it; w is left empty. */
enum MHD_Result reply_jsonw(struct MHD_Connection *c, unsigned status, struct jsonw *w);
enum MHD_Result reply_jsonw_header(struct MHD_Connection *c, unsigned status, struct jsonw *w,
                                   const char *hdr, const char *value);
enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
enum MHD_Result reply_error_header(struct MHD_Connection *c, unsigned status, const char *code,
                                   const char *hdr, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
enum MHD_Result reply_err(struct MHD_Connection *c, const struct sbxd_err *err);
/* The legacy python-runtime error body: {"message": ...}. */
enum MHD_Result reply_message(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The HTTP status of an error kind. */
unsigned err_status(enum sbxd_errkind kind);
/* Its code ("INVALID_ARGUMENT", …). */
const char *err_code(enum sbxd_errkind kind);
enum MHD_Result reply_method_not_allowed(struct MHD_Connection *c, unsigned allowed);

/* Streamed answers (events.c): NDJSON, or SSE with the type as the event name, picked by the
 * request's Accept; one event at a time is built in `pending` and handed to libmicrohttpd's
 * content reader as it asks. */
enum stream_format { STREAM_NONE, STREAM_NDJSON, STREAM_SSE };
enum stream_format stream_format_of(struct MHD_Connection *c);

struct events {
    enum stream_format fmt;
    struct jsonw pending; /* the event being sent */
    size_t off;           /* ... and how much of it went out */
    int64_t last_ns;      /* when the last event was made (heartbeats) */
};

void events_init(struct events *e, enum stream_format fmt);
void events_free(struct events *e);
void event_begin(struct events *e, const char *type); /* then the JSON object, then: */
void event_end(struct events *e);
void event_heartbeat(struct events *e);
/* How long until a heartbeat is due (ms, 0: now). */
int event_wait_ms(const struct events *e, uint64_t heartbeat_ms);
static inline bool events_pending(const struct events *e)
{
    return e->off < e->pending.len;
}
/* Copy up to max bytes of the pending event out. */
size_t events_take(struct events *e, char *out, size_t max);

/*
 * A content reader's body: fills out (max bytes: libmicrohttpd's free buffer) with as many
 * events as are ready and fit, asking next(cls, ready) for each: false when the stream is
 * over; with ready, only what is there at once (nothing pending when there is nothing new).
 * A fast producer goes out in large chunks, one send for many events, while the first event
 * after a pause still goes out alone and at once; below `room` bytes left the chunk goes as
 * it is. Returns the bytes, or MHD_CONTENT_READER_END_OF_STREAM.
 */
/* Answer 200 with a stream of events that read(cls) produces; done(cls) at its end, or at
 * once when the answer cannot be made. */
enum MHD_Result events_reply(struct MHD_Connection *c, enum stream_format fmt,
                             MHD_ContentReaderCallback read, void *cls,
                             MHD_ContentReaderFreeCallback done);

/* Below this much room left in libmicrohttpd's buffer, a chunk goes out as it is rather than
 * wait for another event (one from a 64 KiB read is at least that large). */
#define EVENTS_BATCH_ROOM 16384
ssize_t events_fill(struct events *e, bool (*next)(void *cls, bool ready), void *cls, char *out,
                    size_t max, size_t room);
/* A chunked response fed by read, with the event stream's headers. */
struct MHD_Response *events_response(enum stream_format fmt, MHD_ContentReaderCallback read,
                                     void *cls, MHD_ContentReaderFreeCallback done);

/* Whether the request's Content-Type is one its JSON body may come with (web_internal.h); false
 * after replying 415. */
bool http_json_type(struct MHD_Connection *c, enum MHD_Result *ret);

/* A small JSON body (application/json, UTF-8): an object of known keys only, each once. NULL
 * after replying with the error (*ret). The caller frees the object. */
/* HTTP_GET for "GET" and so on; 0 for another method. */
unsigned http_method_bit(const char *method);

/* A route of items, PREFIX/{id}[/{action}]: what rc->url names below prefix ("/processes"). */
struct item_url {
    char id[32];        /* "" for the collection itself */
    const char *action; /* "" for the item itself */
};

/* Parse rc->url into u; false after replying (*ret) 404 for an id that is empty or too long
 * ("no WHAT '...'"). */
bool http_item_url(struct MHD_Connection *c, const struct req_ctx *rc, const char *prefix,
                   const char *what, struct item_url *u, enum MHD_Result *ret);

/* Whether rc's method is among allowed (HTTP_* bits); else false after replying (*ret) 405. */
bool http_method_in(struct MHD_Connection *c, const struct req_ctx *rc, unsigned allowed,
                    enum MHD_Result *ret);

/* "key": the time as RFC 3339 in UTC with milliseconds, or null for 0. */
void reply_time_field(struct jsonw *w, const char *key, int64_t real_ns);

cJSON *http_json_object(struct MHD_Connection *c, struct req_ctx *rc, const char *const *keys,
                        enum MHD_Result *ret);

/* Whether a reset is under way (route_reset.c). */
static inline bool server_resetting(const struct server *srv)
{
    return sandbox_resetting(srv->sb);
}

/* Routes. */
enum MHD_Result route_healthz(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_root(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_v1_health(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_metrics(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_v1_metadata(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_processes(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_process(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_contexts(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_context(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_run_code(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_reset(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_mcp(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
/* GET /processes/{id}/tty (ws_tty.c): p's terminal over a WebSocket, from output offset since.
 * *kept: the terminal took p's reference. */
struct bg_proc;
enum MHD_Result ws_tty_open(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                            struct bg_proc *p, uint64_t since, bool *kept);
/* A control message of the terminal (ws_control.c). */
#define WS_CONTROL_MAX 65536 /* bytes of one */
#define WS_PTY_MAX     1000  /* rows or cols */
enum ws_control_kind { WS_CTL_RESIZE = 1, WS_CTL_INPUT, WS_CTL_SIGNAL };
struct ws_control {
    enum ws_control_kind kind;
    unsigned rows, cols; /* resize */
    char *data;          /* input: malloc'd, NUL-terminated (free it) */
    size_t data_len;
    int signal; /* signal */
};
/* Decode one: 0, or -1 with why (out then holds nothing to free). */
int ws_control_parse(const char *text, size_t n, struct ws_control *out, char *why, size_t len);

/* An upgraded connection's socket: TCP_CORK off, TCP_NODELAY on (reply.c). */
void http_socket_uncork(int fd);
enum MHD_Result route_ports(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_usage(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_kernels(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_files(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_files_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const char *url, const char *method);
enum MHD_Result route_files_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                 const char *data, size_t n);
enum MHD_Result route_legacy_upload_begin(struct server *srv, struct MHD_Connection *c,
                                          struct req_ctx *rc, const char *url, const char *method);
enum MHD_Result route_legacy_upload(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc);
enum MHD_Result route_legacy_download(struct server *srv, struct MHD_Connection *c,
                                      struct req_ctx *rc);
enum MHD_Result route_legacy_list(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_legacy_exists(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc);

/* The HTTP front's fixed limits (configurable ones are config.c's options; the connection
 * caps main also sizes by are in server.h). */

/* Body bytes read and dropped past --max-body-bytes (when no Content-Length announced the
 * size) before the connection is closed instead of answered with 413. */
#define SBXD_BODY_DISCARD_MAX (16 * 1024 * 1024)

/* JSON text of a listing made ahead of the client, and handed to libmicrohttpd, at a time. */
#define SBXD_LIST_CHUNK (16 * 1024)

/* Lingering close (accept.c): sockets read and dropped from at once, and for how long. */
#define SBXD_LINGER_MAX  256
#define SBXD_LINGER_MS   2000
#define SBXD_LINGER_READ (64 * 1024)

/* libmicrohttpd warnings logged per second at most (the rest are counted). */
#define SBXD_HTTP_LOG_BURST 20

/* Seconds a client is told to wait after 429 or 503. */
#define SBXD_RETRY_AFTER_S 1

#endif
