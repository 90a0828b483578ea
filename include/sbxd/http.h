/*
 * http.h - what the HTTP modules (server, routes, replies) share; nothing outside src/http
 * includes it.
 */
#ifndef SBXD_HTTP_H
#define SBXD_HTTP_H

#include <limits.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/cgroup.h"
#include "sbxd/err.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"

struct server {
    struct MHD_Daemon *mhd;
    const struct sbxd_config *cfg;
    int rootfd;
    char workspace[PATH_MAX];
    const struct harden_plan *harden;
    struct isolation *iso;
    int64_t start_ns;
    uint16_t port;
    unsigned running; /* atomic */
    unsigned streams; /* atomic: process output streams being sent (a drain waits for them) */
    char **metadata;  /* /v1/metadata: "NAME=value" taken from the environment at start */
    bool draining;    /* atomic */
};

/* One request's state, kept by MHD between calls of the access handler. */
struct req_ctx {
    const struct route *route;
    char *body;
    size_t body_len, body_cap;
    bool replied;     /* a response is queued already (an early error) */
    bool too_large;   /* the body passed --max-body-bytes: the rest is dropped */
    size_t discarded; /* bytes dropped so far */
    char client[64];
    bool holds_running; /* counted in srv->running until the request completes */
    char method[8];
    char *url; /* as sent: percent-escapes are the route's to decode */
    /* A route that streams its body keeps its state here; freed with whether the request
     * completed (false: the client went away, or the connection failed). */
    void *state;
    void (*state_free)(void *state, bool completed);
};

typedef enum MHD_Result (*route_fn)(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc);

enum { HTTP_GET = 1, HTTP_HEAD = 2, HTTP_POST = 4, HTTP_PUT = 8, HTTP_DELETE = 16 };

/* A route that streams its body: begin once the headers are in (it may reply at once, and
 * then sets rc->replied), body for each piece, fn at the end. */
typedef enum MHD_Result (*route_begin_fn)(struct server *srv, struct MHD_Connection *c,
                                          struct req_ctx *rc, const char *url, const char *method);
typedef enum MHD_Result (*route_body_fn)(struct server *srv, struct MHD_Connection *c,
                                         struct req_ctx *rc, const char *data, size_t n);

struct route {
    const char *path;
    unsigned methods; /* HTTP_* bits */
    bool json_body;   /* takes a JSON body: Content-Type and size are checked up front */
    route_fn fn;
    bool prefix; /* path and everything below it ("/files" and "/files/...") */
    route_begin_fn begin;
    route_body_fn body;
};

/* Replies. Each queues the response and returns MHD's result. */
/* Finish w's document (a newline is added) and queue it; w is left empty. */
enum MHD_Result reply_jsonw(struct MHD_Connection *c, unsigned status, struct jsonw *w);
enum MHD_Result reply_jsonw_header(struct MHD_Connection *c, unsigned status, struct jsonw *w,
                                   const char *hdr, const char *value);
enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
enum MHD_Result reply_err(struct MHD_Connection *c, const struct sbxd_err *err);
/* The legacy python-runtime error body: {"message": ...}. */
enum MHD_Result reply_message(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The HTTP status of an error kind. */
unsigned err_status(enum sbxd_errkind kind);
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
/* A chunked response fed by read, with the event stream's headers. */
struct MHD_Response *events_response(enum stream_format fmt, MHD_ContentReaderCallback read,
                                     void *cls, MHD_ContentReaderFreeCallback done);

/* The fields of a command's result (design 3.2) into an open object: stdout and stderr only
 * with out/errb (a streamed answer sent them as events). */
void result_fields(struct jsonw *w, const char *id, const struct job_result *r,
                   const struct outbuf *out, const struct outbuf *errb, enum exec_encoding enc);

/* The limits a command request is checked against (route_execute.c). */
void execute_policy(struct server *srv, struct request_policy *pol);

/* Whether a request's Content-Type is one a JSON body may come with. */
bool json_content_type(const char *ct);

/* Routes. */
enum MHD_Result route_healthz(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_root(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_v1_health(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_v1_metadata(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_processes(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_process(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_files(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_files_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const char *url, const char *method);
enum MHD_Result route_files_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                 const char *data, size_t n);

#endif
