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

struct jsonw;

/* Replies. Each queues the response and returns MHD's result. */
/* Finish w's document (a newline is added) and queue it; w is left empty. */
enum MHD_Result reply_jsonw(struct MHD_Connection *c, unsigned status, struct jsonw *w);
enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
enum MHD_Result reply_err(struct MHD_Connection *c, const struct sbxd_err *err);
enum MHD_Result reply_method_not_allowed(struct MHD_Connection *c, unsigned allowed);

/* Routes. */
enum MHD_Result route_healthz(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_root(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_files(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
enum MHD_Result route_files_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const char *url, const char *method);
enum MHD_Result route_files_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                 const char *data, size_t n);

#endif
