/*
 * route_ports.c - GET /ports: the TCP listeners in the sandbox (ports.h), which background
 * process holds each and whether the proxy may reach it; ?watch=true streams them as they open
 * and close (NDJSON or SSE), from a look at the kernel's tables every PORTS_WATCH_MS.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_files_internal.h"
#include "sbxd/ports.h"
#include "sbxd/sandbox.h"
#include "sbxd/timeutil.h"

#define PORTS_WATCH_MS 250

struct ports_watch {
    struct server *srv;
    struct port_listener *now; /* what the last look found */
    size_t n;
    struct port_listener *next; /* the look being reported, and where in it */
    size_t nnext, at_new, at_old;
    bool started, ended;
    struct events out;
};

static bool same(const struct port_listener *a, const struct port_listener *b)
{
    return a->port == b->port && a->family == b->family && a->inode == b->inode &&
           strcmp(a->addr, b->addr) == 0;
}

static bool in(const struct port_listener *l, const struct port_listener *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (same(l, &v[i]))
            return true;
    return false;
}

static void emit(struct ports_watch *s, const char *type, const struct port_listener *l)
{
    struct jsonw *w = &s->out.pending;
    event_begin(&s->out, type);
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, type);
    ports_write(w, l);
    jw_obj_end(w);
    event_end(&s->out);
}

/* The next change between s->now and s->next, as an event; false when none is left. */
static bool next_change(struct ports_watch *s)
{
    while (s->at_old < s->n)
        if (!in(&s->now[s->at_old++], s->next, s->nnext)) {
            emit(s, "close", &s->now[s->at_old - 1]);
            return true;
        }
    while (s->at_new < s->nnext)
        if (!in(&s->next[s->at_new++], s->now, s->n)) {
            emit(s, "open", &s->next[s->at_new - 1]);
            return true;
        }
    return false;
}

static bool ports_watch_next(void *cls, bool ready)
{
    struct ports_watch *s = cls;
    struct jsonw *w = &s->out.pending;
    if (!s->started) {
        s->started = true;
        event_begin(&s->out, "ports");
        jw_obj_begin(w);
        jw_key(w, "type");
        jw_str(w, "ports");
        ports_write_list(w, s->now, s->n);
        jw_obj_end(w);
        event_end(&s->out);
        return true;
    }
    for (;;) {
        if (s->ended)
            return false;
        if (s->next && next_change(s))
            return true;
        if (s->next) { /* reported: the look is the state now */
            free(s->now);
            s->now = s->next;
            s->n = s->nnext;
            s->next = NULL;
        }
        if (sandbox_draining(s->srv->sb)) {
            s->ended = true;
            event_begin(&s->out, "gone");
            jw_raw(w, "{\"type\":\"gone\"}", 15);
            event_end(&s->out);
            return true;
        }
        if (ready)
            return false; /* what is out already goes first */
        int wait = event_wait_ms(&s->out, s->srv->cfg->heartbeat_ms);
        if (wait == 0) {
            event_heartbeat(&s->out);
            return true;
        }
        usleep((useconds_t)(wait < PORTS_WATCH_MS ? wait : PORTS_WATCH_MS) * 1000);
        struct sbxd_err err = {0};
        if (ports_read(s->srv->sb, &s->next, &s->nnext, &err) < 0) {
            s->ended = true;
            return false;
        }
        s->at_new = s->at_old = 0;
    }
}

static ssize_t ports_watch_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct ports_watch *s = cls;
    return events_fill(&s->out, ports_watch_next, s, out, max, EVENTS_BATCH_ROOM);
}

static void ports_watch_free(void *cls)
{
    struct ports_watch *s = cls;
    server_stream_release(s->srv);
    events_free(&s->out);
    free(s->now);
    free(s->next);
    free(s);
}

enum MHD_Result route_ports(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)rc;
    bool watch = false;
    if (!files_query_bool(c, "watch", &watch))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "watch must be true or false");
    struct port_listener *v;
    size_t n;
    struct sbxd_err err = {0};
    if (ports_read(srv->sb, &v, &n, &err) < 0)
        return reply_err(c, &err);
    if (!watch) {
        struct jsonw w;
        jw_init(&w, 256 + n * 384);
        jw_obj_begin(&w);
        ports_write_list(&w, v, n);
        jw_obj_end(&w);
        free(v);
        return reply_jsonw(c, MHD_HTTP_OK, &w);
    }
    struct ports_watch *s = calloc(1, sizeof(*s));
    if (!s) {
        free(v);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    s->srv = srv;
    s->now = v;
    s->n = n;
    enum stream_format fmt = stream_format_of(c);
    if (fmt == STREAM_NONE)
        fmt = STREAM_NDJSON;
    events_init(&s->out, fmt);
    server_stream_hold(srv); /* until ports_watch_free: a stop's drain waits for its "gone" */
    return events_reply(c, fmt, ports_watch_read, s, ports_watch_free);
}
