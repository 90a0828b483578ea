/*
 * GET /files/{dir}?grep=PATTERN (content search) and ?glob=GLOBS (name search): the
 * directory searched by fs/search.c as the command user, its results streamed as NDJSON (or
 * SSE when the request accepts text/event-stream) while the search runs, then a summary.
 *
 * The search runs in a thread of its own that writes the events into a pipe the answer is
 * read from: the pipe's capacity is all that is buffered, so a reader that is slow holds the
 * search back (bounded memory), and one that goes away ends it (EPIPE).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_files_internal.h"
#include "sbxd/cleanup.h"
#include "sbxd/fs_limits.h"
#include "sbxd/search.h"
#include "sbxd/timeutil.h"
#include "sbxd/walk.h"

struct search_stream {
    struct search_opts o;
    struct fs_user u;
    int dirfd, rfd, wfd;
    char *base;
    bool sse;
    bool grep;
    struct jsonw out; /* events not yet written to the pipe */
    int64_t t0, flushed_ns;
    bool failed;
    pthread_t th;
};

/* Write what is gathered to the pipe: 0, or -1 when the reader went away. */
static int stream_flush(struct search_stream *s)
{
    for (size_t off = 0; off < s->out.len;) {
        ssize_t n = write(s->wfd, s->out.buf + off, s->out.len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            s->failed = true;
            return -1;
        }
        off += (size_t)n;
    }
    jw_reset(&s->out);
    s->flushed_ns = time_mono_ns();
    return 0;
}

static void event_open(struct search_stream *s, const char *type)
{
    if (s->sse) {
        char head[48];
        int n = snprintf(head, sizeof(head), "event: %s\ndata: ", type);
        jw_raw(&s->out, head, (size_t)n);
    }
}

/* An event is complete: written out when enough has gathered, or some time has passed, so
 * that many small events make one write and the first ones still come without delay. */
static int event_close(struct search_stream *s)
{
    jw_raw(&s->out, s->sse ? "\n\n" : "\n", s->sse ? 2 : 1);
    s->out.need_comma = false; /* the next event is a document of its own */
    if (s->out.len >= 32768 || time_mono_ns() - s->flushed_ns > 50 * 1000000LL)
        return stream_flush(s);
    return 0;
}

static int on_match(void *ctx, const struct search_match *m)
{
    struct search_stream *s = ctx;
    struct jsonw *w = &s->out;
    event_open(s, "match");
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "match");
    search_write_match(w, m);
    jw_obj_end(w);
    return event_close(s);
}

static int on_entry(void *ctx, const char *path, const struct stat *st)
{
    struct search_stream *s = ctx;
    struct jsonw *w = &s->out;
    event_open(s, "entry");
    jw_obj_begin(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "type");
    jw_str(w, fs_type_name(st->st_mode));
    jw_key(w, "size");
    jw_uint(w, (uint64_t)st->st_size);
    jw_obj_end(w);
    return event_close(s);
}

static void write_summary(struct search_stream *s, const struct search_stats *st,
                          const struct sbxd_err *err, bool ok)
{
    struct jsonw *w = &s->out;
    event_open(s, "summary");
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "summary");
    jw_key(w, "files_scanned");
    jw_uint(w, st->files_scanned);
    jw_key(w, "bytes_read");
    jw_uint(w, st->bytes_read);
    jw_key(w, s->grep ? "matches" : "entries");
    jw_uint(w, st->matches);
    jw_key(w, "truncated");
    jw_bool(w, st->truncated);
    jw_key(w, "max_matches");
    jw_uint(w, s->o.max_matches);
    jw_key(w, "skipped_binary");
    jw_uint(w, st->skipped_binary);
    jw_key(w, "skipped_unreadable");
    jw_uint(w, st->skipped_unreadable);
    jw_key(w, "skipped_match_limit");
    jw_uint(w, st->skipped_limit);
    jw_key(w, "lines_cut");
    jw_uint(w, st->lines_cut);
    jw_key(w, "walk_cut");
    jw_str(w, st->walk_cut & WALK_CUT_ENTRIES ? "entries"
              : st->walk_cut & WALK_CUT_DEPTH ? "depth"
                                              : NULL);
    if (!ok) {
        jw_key(w, "error");
        jw_str(w, err->msg);
    }
    jw_key(w, "duration_ms");
    jw_double(w, (double)(time_mono_ns() - s->t0) / 1e6, 3);
    jw_obj_end(w);
    event_close(s);
}

static void *search_thread(void *arg)
{
    struct search_stream *s = arg;
    struct search_sink sink = {on_match, on_entry, s};
    struct search_stats st;
    struct sbxd_err err = {0};
    /* The search reads with the command user's rights (this thread's fsuid): a file that
     * user cannot read is not read for it by sbxd's root. */
    fs_user_enter(&s->u);
    int rc = search_run(s->dirfd, s->base, &s->o, &sink, &st, &err);
    fs_user_leave(&s->u);
    s->dirfd = -1;
    if (!s->failed) {
        write_summary(s, &st, &err, rc == 0);
        stream_flush(s);
    }
    close(s->wfd);
    s->wfd = -1;
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct search_stream *s = cls;
    for (;;) {
        ssize_t n = read(s->rfd, out, max);
        if (n > 0)
            return n;
        if (n == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (errno != EINTR)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    struct search_stream *s = cls;
    if (s->rfd >= 0)
        close(s->rfd); /* a search still writing gets EPIPE and ends */
    if (s->th)
        pthread_join(s->th, NULL);
    if (s->dirfd >= 0)
        close(s->dirfd);
    if (s->wfd >= 0)
        close(s->wfd);
    search_pattern_free(s->o.pattern);
    search_globs_free(s->o.include);
    search_globs_free(s->o.exclude);
    jw_free(&s->out);
    free(s->base);
    free(s);
}

/* The query argument key, percent-decoded (malloc'd), or NULL when absent (*bad when it is
 * malformed). */
static char *arg(struct MHD_Connection *c, const char *key, bool *bad)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    if (!v)
        return NULL;
    struct sbxd_err err = {0};
    char *d = files_url_decode(v, &err);
    if (!d)
        *bad = true;
    return d;
}

/* The options of the query into s: NULL, or the message of a 400 (err's when it has one). */
static const char *search_options(struct MHD_Connection *c, struct search_stream *s,
                                  struct sbxd_err *err)
{
    bool bad = false, regex = false, icase = false;
    uint64_t context = 0, max = SBXD_SEARCH_MATCHES_DEFAULT;
    autofree char *grep = arg(c, "grep", &bad);
    autofree char *glob = arg(c, "glob", &bad);
    autofree char *exclude = arg(c, "exclude", &bad);
    autofree char *type = arg(c, "type", &bad);
    if (bad)
        return "a query argument has a bad %-escape";
    if (!files_query_bool(c, "regex", &regex) || !files_query_bool(c, "ignore_case", &icase) ||
        !files_query_bool(c, "include_git", &s->o.include_git) ||
        !files_query_bool(c, "binary", &s->o.include_binary))
        return "regex, ignore_case, include_git and binary are true or false";
    if (!files_query_uint(c, "context", &context) || context > SBXD_SEARCH_MAX_CONTEXT)
        return "context is a whole number of lines, at most 20";
    if (!files_query_uint(c, "max_matches", &max) || max == 0 || max > SBXD_SEARCH_MATCHES_MAX)
        return "max_matches is a whole number from 1 to 1000000";
    if (grep && !*grep)
        return "grep names no pattern";
    const char *tg = type ? search_type_globs(type) : NULL;
    if (type && !tg)
        return "type is one of c, cpp, css, go, html, java, js, json, md, py, rb, rs, sh, ts, "
               "txt, yaml";
    if (!grep && !glob && !tg)
        return "a name search takes glob=";
    s->grep = grep != NULL;
    s->o.context = (unsigned)context;
    s->o.max_matches = max;
    if (grep && !(s->o.pattern = search_pattern_new(grep, regex, icase, err)))
        return err->msg;
    char inc[4096];
    if (snprintf(inc, sizeof(inc), "%s%s%s", glob ? glob : "", glob && tg ? "," : "",
                 tg ? tg : "") >= (int)sizeof(inc))
        return "glob is too long";
    if (*inc && !(s->o.include = search_globs_new(inc, err)))
        return err->msg;
    if (exclude && !(s->o.exclude = search_globs_new(exclude, err)))
        return err->msg;
    return NULL;
}

static enum MHD_Result search_begin(struct MHD_Connection *c, struct search_stream *s)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        stream_free(s);
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "cannot start the search: %s", strerror(errno));
    }
    s->rfd = p[0];
    s->wfd = p[1];
    (void)fcntl(s->wfd, F_SETPIPE_SZ, 1 << 20); /* fewer wake-ups; the default where refused */
    if (pthread_create(&s->th, NULL, search_thread, s) != 0) {
        s->th = 0;
        stream_free(s);
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "cannot start the search");
    }
    return events_reply(c, s->sse ? STREAM_SSE : STREAM_NDJSON, stream_read, s, stream_free);
}

enum MHD_Result files_search_get(struct server *srv, struct MHD_Connection *c, const char *path)
{
    struct search_stream *s = calloc(1, sizeof(*s));
    if (!s || !(s->base = strdup(path))) {
        free(s);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    s->dirfd = s->rfd = s->wfd = -1;
    jw_init(&s->out, 65536);
    s->t0 = s->flushed_ns = time_mono_ns();
    s->sse = stream_format_of(c) == STREAM_SSE;
    struct sbxd_err err = {0};
    const char *bad = search_options(c, s, &err);
    if (bad) {
        enum MHD_Result r =
            err.kind && err.kind != SBXD_E_INVALID
                ? reply_err(c, &err)
                : reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", bad);
        stream_free(s);
        return r;
    }
    files_user(srv, &s->u);
    struct stat st;
    fs_user_enter(&s->u);
    s->dirfd = fs_open_read(srv->sb->rootfd, path, &st, &err);
    fs_user_leave(&s->u);
    if (s->dirfd < 0 || !S_ISDIR(st.st_mode)) {
        enum MHD_Result r = s->dirfd < 0 ? reply_err(c, &err)
                                         : reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                                                       "'%.200s' is not a directory: grep= and "
                                                       "glob= search a directory",
                                                       path);
        stream_free(s);
        return r;
    }
    return search_begin(c, s);
}
