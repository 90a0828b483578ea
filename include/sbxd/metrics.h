/*
 * metrics.h - the daemon's counters for GET /metrics: relaxed atomics bumped where things
 * happen (a few nanoseconds each, no lock), read and rendered in the Prometheus text format
 * only when scraped. Gauges (running commands, open connections, memory) are not kept here:
 * the scrape reads them where they live. The counters of modules above util (exec_metrics.h,
 * the gRPC front's) live with them and render through a registered renderer.
 */
#ifndef SBXD_METRICS_H
#define SBXD_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "sbxd/jsonw.h"

/* The limits that refuse or cut off a request; each counted when it bites. */
enum metrics_limit {
    LIM_MAX_RUNNING,        /* 429: --max-running */
    LIM_MAX_PROCESSES,      /* 429: --max-processes */
    LIM_MAX_CONNECTIONS,    /* 503: --max-connections */
    LIM_CLIENT_CONNECTIONS, /* 429: --max-client-connections */
    LIM_REQUEST_TIMEOUT,    /* 408: --request-timeout-ms */
    LIM_HEADER_BYTES,       /* 431: --max-header-bytes */
    LIM_BODY_BYTES,         /* 413: --max-body-bytes, --max-upload-bytes */
    LIM_UNAUTHORIZED,       /* 401: no or a wrong bearer token */
    LIM_STDIN_PENDING,      /* 429: stdin bytes waiting for a process (SBXD_STDIN_PENDING_MAX) */
    LIM_STDIN_TIMEOUT,      /* 409: --stdin-timeout-ms */
    LIM_MAX_QUEUED,         /* 429: --max-queued (the admission queue is full) */
    LIM_QUEUE_TIMEOUT,      /* 429: --queue-timeout-ms (waited that long for a slot) */
    LIM_WEB_PAGE, /* 403: a web page's Origin, or a Host only a page would name (web_internal.h) */
    LIM_N
};

/* Routes are numbered by the server (its table's order); the last is "no route". */
#define METRICS_MAX_ROUTES 24

void metrics_limit(enum metrics_limit l);
void metrics_http(unsigned route, unsigned status, uint64_t bytes_in, uint64_t bytes_out);
void metrics_file(bool written, uint64_t bytes);

/* A module's counters, appended to w (text, not JSON) with their HELP and TYPE lines. A
 * module above util (exec, a front) registers its renderer, so that util depends on none of
 * them: metrics_register adds fn once (again is a no-op), metrics_render appends what every
 * registered renderer has, in the order they registered, then the limits and the files. */
typedef void (*metrics_renderer)(struct jsonw *w);
void metrics_register(metrics_renderer fn);
void metrics_render(struct jsonw *w);
/* The HTTP requests' counters: route_label gives the label of each route number below
 * nroutes (the HTTP front's renderer calls it). */
void metrics_render_http(struct jsonw *w, const char *const *route_label, unsigned nroutes);

/* Append one sample line: name{labels} value. labels may be NULL. */
void metrics_line(struct jsonw *w, const char *name, const char *labels, double value);
/* Append the HELP and TYPE lines of a metric. */
void metrics_head(struct jsonw *w, const char *name, const char *type, const char *help);

#endif
