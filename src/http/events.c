#include <stdio.h>
#include <string.h>

#include "http_internal.h"
#include "sbxd/jsonw.h"
#include "sbxd/timeutil.h"

enum stream_format stream_format_of(struct MHD_Connection *c)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    if (!a)
        return STREAM_NONE;
    if (strstr(a, "application/x-ndjson"))
        return STREAM_NDJSON;
    if (strstr(a, "text/event-stream"))
        return STREAM_SSE;
    return STREAM_NONE;
}

void events_init(struct events *e, enum stream_format fmt)
{
    e->fmt = fmt;
    e->off = 0;
    e->last_ns = time_mono_ns();
    jw_init(&e->pending, 256);
}

void events_free(struct events *e)
{
    jw_free(&e->pending);
}

void event_begin(struct events *e, const char *type)
{
    jw_reset(&e->pending); /* one buffer for every event of the stream */
    e->off = 0;
    if (e->fmt == STREAM_SSE) {
        char head[64];
        int n = snprintf(head, sizeof(head), "event: %s\ndata: ", type);
        jw_raw(&e->pending, head, (size_t)n);
    }
}

void event_end(struct events *e)
{
    jw_raw(&e->pending, e->fmt == STREAM_SSE ? "\n\n" : "\n", e->fmt == STREAM_SSE ? 2 : 1);
    e->last_ns = time_mono_ns();
}

void event_heartbeat(struct events *e)
{
    event_begin(e, "heartbeat");
    jw_raw(&e->pending, "{\"type\":\"heartbeat\"}", 20);
    event_end(e);
}

int event_wait_ms(const struct events *e, uint64_t heartbeat_ms)
{
    int64_t left = (int64_t)heartbeat_ms - (time_mono_ns() - e->last_ns) / 1000000;
    return left > 0 ? (int)left : 0;
}

size_t events_take(struct events *e, char *out, size_t max)
{
    return http_stream_out(&e->pending, &e->off, out, max);
}

struct MHD_Response *events_response(enum stream_format fmt, MHD_ContentReaderCallback read,
                                     void *cls, MHD_ContentReaderFreeCallback done)
{
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, read, cls, done);
    if (!r)
        return NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            fmt == STREAM_SSE ? "text/event-stream" : "application/x-ndjson");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}

ssize_t events_fill(struct events *e, bool (*next)(void *cls, bool ready), void *cls, char *out,
                    size_t max, size_t room)
{
    size_t n = 0;
    for (;;) {
        while (!events_pending(e)) {
            if (!next(cls, n > 0))
                return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
            if (n > 0 && !events_pending(e))
                return (ssize_t)n; /* nothing more at once */
        }
        n += events_take(e, out + n, max - n);
        if (events_pending(e) || max - n < room)
            return (ssize_t)n;
    }
}

enum MHD_Result events_reply(struct MHD_Connection *c, enum stream_format fmt,
                             MHD_ContentReaderCallback read, void *cls,
                             MHD_ContentReaderFreeCallback done)
{
    struct MHD_Response *r = events_response(fmt, read, cls, done);
    if (!r) {
        done(cls);
        return MHD_NO;
    }
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
}
