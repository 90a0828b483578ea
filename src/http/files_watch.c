/*
 * GET /files/{path}?watch=true (and /v1/files): a directory's changes as NDJSON or SSE
 * events, as they come (fs/watch.c), from an offset an earlier event carried.
 */
#include <stdlib.h>
#include <string.h>

#include "http_files_internal.h"
#include "sbxd/timeutil.h"
#include "sbxd/watch.h"

struct watch_stream {
    struct server *srv;
    struct watch_sub *sub;
    bool started, ended;
    bool recursive;
    char *path;
    struct watch_event ev;
    struct events out;
};

static bool watch_stream_next(void *cls, bool ready)
{
    struct watch_stream *s = cls;
    struct jsonw *w = &s->out.pending;
    if (!s->started) {
        s->started = true;
        event_begin(&s->out, "watching");
        jw_obj_begin(w);
        jw_key(w, "type");
        jw_str(w, "watching");
        jw_key(w, "path");
        jw_str(w, s->path);
        jw_key(w, "recursive");
        jw_bool(w, s->recursive);
        jw_key(w, "offset");
        jw_uint(w, watch_offset(s->sub));
        jw_obj_end(w);
        event_end(&s->out);
        return true;
    }
    if (s->ended)
        return false;
    int k =
        watch_next(s->sub, ready ? 0 : event_wait_ms(&s->out, s->srv->cfg->heartbeat_ms), &s->ev);
    if (k < 0) {
        s->ended = true;
        return false;
    }
    if (k == 0) {
        if (!ready)
            event_heartbeat(&s->out);
        return true;
    }
    const char *type = watch_type_name(s->ev.type);
    char when[40];
    time_rfc3339(s->ev.real_ns, when, sizeof(when));
    event_begin(&s->out, type);
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, type);
    jw_key(w, "path");
    jw_str(w, s->ev.path);
    if (s->ev.type == WATCH_RENAME) {
        jw_key(w, "from");
        jw_str(w, s->ev.from);
    }
    jw_key(w, "is_dir");
    jw_bool(w, s->ev.is_dir);
    if (s->ev.type == WATCH_OVERFLOW) {
        jw_key(w, "missed");
        if (s->ev.missed)
            jw_uint(w, s->ev.missed);
        else
            jw_null(w);
    }
    jw_key(w, "offset");
    jw_uint(w, s->ev.offset);
    jw_key(w, "at");
    jw_str(w, when);
    jw_obj_end(w);
    event_end(&s->out);
    return true;
}

static ssize_t watch_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct watch_stream *s = cls;
    return events_fill(&s->out, watch_stream_next, s, out, max, EVENTS_BATCH_ROOM);
}

static void watch_stream_free(void *cls)
{
    struct watch_stream *s = cls;
    watch_close(s->sub);
    server_stream_release(s->srv);
    events_free(&s->out);
    free(s->path);
    free(s);
}

enum MHD_Result files_watch_get(struct server *srv, struct MHD_Connection *c, const char *path)
{
    bool recursive = false;
    uint64_t since = UINT64_MAX;
    if (!files_query_bool(c, "recursive", &recursive))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "recursive must be true or false");
    if (!files_query_uint(c, "since", &since))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "since must be an offset: a whole number an earlier event carried");
    enum stream_format fmt = stream_format_of(c);
    struct watch_stream *s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    struct sbxd_err err = {0};
    s->sub = watch_open(path, recursive, since, WATCH_POOL_FILES, &err);
    if (!s->sub) {
        free(s->path);
        free(s);
        return reply_err(c, &err);
    }
    s->srv = srv;
    s->recursive = recursive;
    if (fmt == STREAM_NONE)
        fmt = STREAM_NDJSON;
    events_init(&s->out, fmt);
    server_stream_hold(srv); /* until watch_stream_free: its "gone" is written at a stop */
    return events_reply(c, fmt, watch_stream_read, s, watch_stream_free);
}
