/*
 * /files/{path} and /v1/files/{path}: GET (a file's bytes, with Range; a directory's
 * listing; ?stat=true, an entry's metadata), HEAD, PUT (raw or multipart body streamed to a
 * temporary file, then renamed over the target, If-Match and If-None-Match honoured; or
 * ?type=directory), POST (?move_to=, ?copy_to=), DELETE. Two faces of one implementation: the route
 * says which (struct route's face), and what differs between them is the table face_rules. The
 * legacy python-runtime routes are route_legacy_files.c; the pieces all faces share are
 * http_files.h, the filesystem side fs/files.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "sbxd/http_files.h"
#include "sbxd/limits.h"
#include "sbxd/timeutil.h"
#include "sbxd/urldecode.h"
#include "sbxd/watch.h"

void files_user(const struct server *srv, struct fs_user *u)
{
    const struct harden_plan *h = srv->harden;
    u->switch_ids = h->switch_user;
    u->uid = h->uid;
    u->gid = h->gid;
    u->file_mode = h->group_share ? 0664 : 0644;
    u->dir_mode = h->group_share ? 0775 : 0755;
}

char *files_url_decode(const char *s, struct sbxd_err *err)
{
    char *d = strdup(s);
    if (!d) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    if (http_url_decode(d, err) < 0) {
        free(d);
        return NULL;
    }
    return d;
}

/* What follows the directory dir in the absolute path path, compared a component at a time
 * (runs of '/' count as one): the rest, at a '/' or at the end; NULL when path does not lie
 * beneath dir or is dir itself spelled otherwise. A sibling that only shares dir's prefix
 * ("/workspace-evil" for "/workspace") is no match. */
static const char *after_dir(const char *path, const char *dir)
{
    if (dir[0] != '/' || path[0] != '/')
        return NULL;
    const char *p = path, *q = dir;
    for (;;) {
        while (*q == '/')
            q++;
        if (!*q)
            return p;
        while (*p == '/')
            p++;
        size_t n = strcspn(q, "/");
        if (strncmp(p, q, n) != 0 || (p[n] != '/' && p[n] != '\0'))
            return NULL;
        p += n;
        q += n;
    }
}

const char *http_files_within(const struct server *srv, const char *path)
{
    const char *rest = after_dir(path, srv->workspace);
    return rest ? rest : after_dir(path, srv->cfg->workspace);
}

/* An absolute path under the workspace's own path (its canonical one, or as --workspace or
 * SANDBOX_BASE_DIR spelled it) is that path inside it, as the reference sandboxd takes it:
 * "/workspace/out.csv" is "out.csv". Any other leading slashes, also encoded ones, are
 * dropped: the path is relative to the workspace root whatever it starts with (the legacy
 * routes re-root "/etc/x" as "etc/x"). Only the spelling is looked at here; what the rest
 * names is resolved beneath the root like any path, so "/workspace/../x" is still refused. */
char *http_files_path(const struct server *srv, const struct route *rt, const char *url,
                      struct sbxd_err *err)
{
    const char *p = url + (rt ? strlen(rt->path) : 0);
    if (rt && *p == '/')
        p++; /* the route's own separator: "/v1/files/a/b" names "a/b", relative */
    char *s = files_url_decode(p, err);
    if (!s)
        return NULL;
    const char *rel = http_files_within(srv, s);
    if (!rel)
        rel = s;
    rel += strspn(rel, "/");
    memmove(s, rel, strlen(rel) + 1);
    if (strlen(s) >= PATH_MAX) {
        sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes", PATH_MAX - 1);
        free(s);
        return NULL;
    }
    return s;
}

/* The entry as /files and /v1 describe it; with path, also its path (a PUT's answer); link:
 * it is a symlink, described by what it leads to. */
static void write_entry(struct jsonw *w, const struct fs_entry *e, const char *path, bool link)
{
    char mode[8], when[40];
    snprintf(mode, sizeof(mode), "%04o", (unsigned)e->mode);
    time_rfc3339(e->mtime_ns, when, sizeof(when));
    jw_obj_begin(w);
    if (path) {
        jw_key(w, "path");
        jw_str(w, path);
    }
    jw_key(w, "name");
    jw_str(w, e->name);
    jw_key(w, "type");
    jw_str(w, e->type);
    jw_key(w, "size");
    jw_uint(w, e->size);
    jw_key(w, "mode");
    jw_str(w, mode);
    jw_key(w, "modified_at");
    jw_str(w, when);
    if (link) {
        jw_key(w, "symlink");
        jw_bool(w, true);
    }
    jw_obj_end(w);
}

/* /files: a symlink inside the workspace is described by what it leads to, with "symlink":
 * true; one that cannot be followed (out of the workspace, absolute, dangling, a loop) is
 * still listed, as itself (type "symlink"): sbxd's own face shows every entry, so that what
 * is there can be seen, stat'ed with follow=false, moved and deleted. */
static bool entry_files(struct jsonw *w, struct fs_entry *e, const struct listing_at *at)
{
    bool link = files_list_follow(e, at) != 0;
    write_entry(w, e, NULL, link);
    return true;
}

/* /v1, as the reference sandboxd lists: two types (what is not a directory is a file), the
 * permission bits alone, a symlink inside the workspace as what it leads to, and one that
 * cannot be followed left out. */
static bool entry_v1(struct jsonw *w, struct fs_entry *e, const struct listing_at *at)
{
    if (files_list_follow(e, at) < 0)
        return false;
    if (strcmp(e->type, "directory") != 0)
        e->type = "file";
    e->mode &= 0777;
    write_entry(w, e, NULL, false);
    return true;
}

/* What differs between the two faces served here. Both sort their listings by name (up to
 * SBXD_LIST_SORT_MAX entries), the reference sandboxd's order (os.ReadDir). */
struct face_rules {
    struct listing_form list;
    bool bare_write; /* a write answers 204 with no body; else 200/201 with the entry */
};

static const struct face_rules face_rules[FACE_COUNT] = {
    [FACE_FILES] = {{FS_LIST_SORTED, true, entry_files, reply_err}, false},
    [FACE_V1] = {{FS_LIST_SORTED, true, entry_v1, reply_err}, true},
};

static const struct face_rules *rules_of(const struct req_ctx *rc)
{
    return &face_rules[rc->route->face];
}

/* A query argument, decoded into out (false when absent; *bad when malformed). */
static bool query_arg(struct MHD_Connection *c, const char *key, char *out, size_t len, bool *bad)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    struct sbxd_err err = {0};
    *bad = false;
    if (!v)
        return false;
    snprintf(out, len, "%s", v);
    *bad = strlen(v) >= len || http_url_decode(out, &err) < 0;
    return true;
}

/* A whole-number query argument into *n (left alone when absent): false when malformed. */
static bool query_uint(struct MHD_Connection *c, const char *key, uint64_t *n)
{
    char v[32], *end;
    bool bad;
    if (!query_arg(c, key, v, sizeof(v), &bad))
        return true;
    if (bad || !*v)
        return false;
    *n = strtoull(v, &end, 10);
    return !*end;
}

/* The "path" of a /v1 listing, as the reference sandboxd spells it: the path as the request
 * named it (decoded; the workspace's own path not taken off), with a leading '/' ("/" for
 * the root, "/sub"). malloc'd; NULL when out of memory. */
static char *v1_shown_path(const struct req_ctx *rc)
{
    const char *p = rc->url + strlen(rc->route->path);
    if (*p == '/')
        p++;
    struct sbxd_err err = {0};
    autofree char *d = files_url_decode(p, &err);
    if (!d)
        return NULL;
    char *out = malloc(strlen(d) + 2);
    if (out)
        snprintf(out, strlen(d) + 2, "%s%s", d[0] == '/' ? "" : "/", d);
    return out;
}

/* Serve the open directory fd (consumed) as a page of its listing, ?offset= and ?limit=. */
static enum MHD_Result get_directory(struct server *srv, struct MHD_Connection *c, int fd,
                                     const char *path, const struct req_ctx *rc)
{
    const struct face_rules *rules = rules_of(rc);
    uint64_t limit = UINT64_MAX, offset = 0;
    const char *bad = NULL;
    if (!query_uint(c, "limit", &limit) || limit == 0)
        bad = "limit must be a whole number above 0";
    else if (!query_uint(c, "offset", &offset))
        bad = "offset must be a whole number";
    if (bad) {
        close(fd);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", bad);
    }
    autofree char *shown = rc->route->face == FACE_V1 ? v1_shown_path(rc) : NULL;
    return files_list_send(srv, c, fd, path, shown, &rules->list, offset, limit);
}

/* A true/false query argument into *v (left alone when absent): false when malformed. */
static bool query_bool(struct MHD_Connection *c, const char *key, bool *v)
{
    char s[16];
    bool bad;
    if (!query_arg(c, key, s, sizeof(s), &bad))
        return true;
    if (bad || (strcmp(s, "true") != 0 && strcmp(s, "false") != 0))
        return false;
    *v = strcmp(s, "true") == 0;
    return true;
}

void files_write_stat(struct jsonw *w, const char *path, const struct fs_stat_info *in)
{
    char mode[8], etag[80];
    snprintf(mode, sizeof(mode), "%04o", (unsigned)(in->st.st_mode & 07777));
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "name");
    jw_str(w, in->name);
    jw_key(w, "type");
    jw_str(w, fs_type_name(in->st.st_mode));
    jw_key(w, "size");
    jw_uint(w, (uint64_t)in->st.st_size);
    jw_key(w, "mode");
    jw_str(w, mode);
    jw_key(w, "uid");
    jw_uint(w, in->st.st_uid);
    jw_key(w, "gid");
    jw_uint(w, in->st.st_gid);
    jw_key(w, "nlink");
    jw_uint(w, in->st.st_nlink);
    char when[40];
    time_rfc3339((int64_t)in->st.st_mtim.tv_sec * 1000000000LL + in->st.st_mtim.tv_nsec, when,
                 sizeof(when));
    jw_key(w, "modified_at");
    jw_str(w, when);
    if (in->has_btime) {
        time_rfc3339(in->btime_ns, when, sizeof(when));
        jw_key(w, "created_at");
        jw_str(w, when);
    }
    if (S_ISLNK(in->st.st_mode)) {
        jw_key(w, "symlink_target");
        jw_str(w, in->target);
    }
    if (S_ISREG(in->st.st_mode)) {
        fs_etag(&in->st, etag, sizeof(etag));
        jw_key(w, "etag");
        jw_str(w, etag);
    }
}

/* GET ?stat=true: the entry's metadata, of what it names (follow=true, the default) or of the
 * entry itself (follow=false: a symlink is described, with its target). */
static enum MHD_Result files_stat(struct server *srv, struct MHD_Connection *c, const char *path)
{
    bool follow = true;
    if (!query_bool(c, "follow", &follow))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "follow must be true or false");
    struct fs_user u;
    files_user(srv, &u);
    struct fs_stat_info *in = malloc(sizeof(*in));
    if (!in)
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    struct sbxd_err err = {0};
    fs_user_enter(&u);
    int rc = fs_stat(srv->rootfd, path, follow, in, &err);
    fs_user_leave(&u);
    if (rc < 0) {
        free(in);
        return reply_err(c, &err);
    }
    struct jsonw w;
    jw_init(&w, 512);
    jw_obj_begin(&w);
    files_write_stat(&w, path, in);
    jw_obj_end(&w);
    free(in);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* ---------------------------------------------------------------------------------- */
/* GET ?watch=true                                                                      */

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
    __atomic_sub_fetch(&s->srv->streams, 1, __ATOMIC_ACQ_REL);
    events_free(&s->out);
    free(s->path);
    free(s);
}

/* GET ?watch=true[&recursive=true][&since=OFFSET]: the directory's changes, as they come. */
static enum MHD_Result files_watch(struct server *srv, struct MHD_Connection *c, const char *path)
{
    bool recursive = false;
    uint64_t since = UINT64_MAX;
    if (!query_bool(c, "recursive", &recursive))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "recursive must be true or false");
    if (!query_uint(c, "since", &since))
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
    /* A stop's drain waits for it (until watch_stream_free): its "gone" is written before
     * the server closes the connection. */
    __atomic_add_fetch(&srv->streams, 1, __ATOMIC_ACQ_REL);
    return events_reply(c, fmt, watch_stream_read, s, watch_stream_free);
}

static enum MHD_Result files_get(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    struct sbxd_err err = {0};
    autofree char *path = http_files_path(srv, rc->route, rc->url, &err);
    if (!path)
        return reply_err(c, &err);
    bool stat = false;
    if (!query_bool(c, "stat", &stat))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "stat must be true or false");
    if (stat)
        return files_stat(srv, c, path);
    bool watch = false;
    if (!query_bool(c, "watch", &watch))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "watch must be true or false");
    if (watch)
        return files_watch(srv, c, path);
    char av[16];
    bool abad;
    if (query_arg(c, "archive", av, sizeof(av), &abad)) {
        enum ar_format fmt;
        if (abad || files_archive_format(av, &fmt) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "archive must be tar or zip");
        return files_archive_get(srv, c, path, fmt);
    }
    struct fs_user u;
    files_user(srv, &u);
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->rootfd, path, &st, &err);
    fs_user_leave(&u);
    if (fd < 0)
        return reply_err(c, &err);
    if (S_ISDIR(st.st_mode))
        return get_directory(srv, c, fd, path, rc);
    return files_send(c, fd, &st, NULL);
}

static enum MHD_Result reply_no_content(struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result ret = http_queue(c, MHD_HTTP_NO_CONTENT, r, 0);
    MHD_destroy_response(r);
    return ret;
}

/* A boolean as Go's strconv.ParseBool spells it (the reference sandboxd parses its
 * ?recursive= so): 1 t T TRUE true True, 0 f F FALSE false False. */
static bool go_parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++) {
        if (strcmp(v, yes[i]) == 0 || strcmp(v, no[i]) == 0) {
            *out = strcmp(v, yes[i]) == 0;
            return true;
        }
    }
    return false;
}

/* DELETE ?recursive=: true or false on /files; on /v1 as the reference parses it (ParseBool,
 * and an empty value is no value). False when malformed. */
static bool delete_recursive(struct MHD_Connection *c, const struct req_ctx *rc, bool *recursive)
{
    char v[16];
    bool bad;
    *recursive = false;
    if (!query_arg(c, "recursive", v, sizeof(v), &bad))
        return true;
    if (bad)
        return false;
    if (rc->route->face == FACE_V1)
        return !*v || go_parse_bool(v, recursive);
    if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
        return false;
    *recursive = strcmp(v, "true") == 0;
    return true;
}

static enum MHD_Result files_delete(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc)
{
    struct sbxd_err err = {0};
    autofree char *path = http_files_path(srv, rc->route, rc->url, &err);
    if (!path)
        return reply_err(c, &err);
    bool recursive;
    if (!delete_recursive(c, rc, &recursive))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           rc->route->face == FACE_V1
                               ? "recursive must be a boolean (1, t, true, 0, f, false, ...)"
                               : "recursive must be true or false");
    /* The root itself stays (it is the volume the pod mounted, and sbxd's open fd): deleting
     * it empties it, and only when asked for a recursive delete, as the reference sandboxd
     * does. */
    bool root = fs_path_is_root(path);
    if (root && !recursive)
        return reply_error(c, MHD_HTTP_CONFLICT, "CONFLICT",
                           "the workspace root is not deleted; add ?recursive=true to delete "
                           "everything in it");
    struct fs_user u;
    files_user(srv, &u);
    fs_user_enter(&u);
    int r = root ? fs_delete_contents(srv->rootfd, &err)
                 : fs_delete(srv->rootfd, path, recursive, &err);
    fs_user_leave(&u);
    return r < 0 ? reply_err(c, &err) : reply_no_content(c);
}

void files_write_counts(struct jsonw *w, uint64_t files, uint64_t directories, uint64_t symlinks,
                        uint64_t bytes)
{
    jw_key(w, "files");
    jw_uint(w, files);
    jw_key(w, "directories");
    jw_uint(w, directories);
    jw_key(w, "symlinks");
    jw_uint(w, symlinks);
    jw_key(w, "bytes");
    jw_uint(w, bytes);
}

/* POST ?move_to=DEST or ?copy_to=DEST (with overwrite=true to replace what is there). */
static enum MHD_Result files_post(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    struct sbxd_err err = {0};
    autofree char *path = http_files_path(srv, rc->route, rc->url, &err);
    if (!path)
        return reply_err(c, &err);
    autofree char *to = malloc(PATH_MAX);
    if (!to)
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    bool bad_move, bad_copy, overwrite = false;
    bool copy = query_arg(c, "copy_to", to, PATH_MAX, &bad_copy);
    bool move = query_arg(c, "move_to", to, PATH_MAX, &bad_move);
    if (move == copy || (move && bad_move) || (copy && bad_copy) || !to[0])
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "POST on a file takes one of move_to=DEST and copy_to=DEST (a path in "
                           "the workspace)");
    if (!query_bool(c, "overwrite", &overwrite))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "overwrite must be true or false");
    const char *rel = http_files_within(srv, to);
    if (!rel)
        rel = to;
    rel += strspn(rel, "/");
    memmove(to, rel, strlen(rel) + 1);
    struct fs_user u;
    files_user(srv, &u);
    struct fs_copy_stats cs = {0};
    double t0 = (double)time_mono_ns();
    fs_user_enter(&u);
    int r = move ? fs_move(srv->rootfd, path, to, overwrite, &u, &err)
                 : fs_copy(srv->rootfd, path, to, overwrite, &u, &cs, &err);
    struct fs_stat_info *in = r == 0 ? malloc(sizeof(*in)) : NULL;
    int sr = in ? fs_stat(srv->rootfd, to, false, in, &err) : -1;
    fs_user_leave(&u);
    if (r < 0) {
        free(in);
        return reply_err(c, &err);
    }
    struct jsonw w;
    jw_init(&w, 384);
    jw_obj_begin(&w);
    jw_key(&w, "from");
    jw_str(&w, path);
    jw_key(&w, "path");
    jw_str(&w, to);
    jw_key(&w, "type");
    jw_str(&w, sr == 0 ? fs_type_name(in->st.st_mode) : "file");
    if (copy) {
        files_write_counts(&w, cs.files, cs.directories, cs.symlinks, cs.bytes);
        jw_key(&w, "skipped");
        jw_uint(&w, cs.skipped);
    }
    jw_key(&w, "duration_ms");
    jw_double(&w, ((double)time_mono_ns() - t0) / 1e6, 3);
    jw_obj_end(&w);
    free(in);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* A PUT's ?type= and ?mode= into p: NULL, or the message of a 400. */
static const char *put_options(struct MHD_Connection *c, struct files_put *p)
{
    char v[16];
    bool bad;
    if (query_arg(c, "type", v, sizeof(v), &bad)) {
        if (bad || (strcmp(v, "directory") != 0 && strcmp(v, "file") != 0))
            return "type must be file or directory";
        p->directory = strcmp(v, "directory") == 0;
        if (p->directory) {
            struct fs_user u;
            files_user(p->srv, &u);
            p->mode = u.dir_mode;
        }
    }
    if (query_arg(c, "mode", v, sizeof(v), &bad)) {
        /* ^0[0-7]{3}$ */
        if (bad || strlen(v) != 4 || v[0] != '0' || strspn(v + 1, "01234567") != 3)
            return "mode must be 4 octal digits starting with 0, like 0644";
        p->mode = (mode_t)strtoul(v, NULL, 8);
    }
    return NULL;
}

/* A PUT's If-Match and If-None-Match: checked now against the target, before the body is
 * read (412 at once), and kept in p for the check right before the rename. -1 with err. */
static int put_conditions(struct MHD_Connection *c, struct files_put *p, struct sbxd_err *err)
{
    const char *im = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Match");
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    if (!im && !inm)
        return 0;
    if ((im && strlen(im) >= sizeof(p->if_match)) || (inm && strlen(inm) >= sizeof(p->if_match)))
        return sbxd_fail(err, SBXD_E_INVALID, 0, "If-Match or If-None-Match is too long");
    struct fs_user u;
    files_user(p->srv, &u);
    struct fs_stat_info *in = malloc(sizeof(*in));
    if (!in)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct sbxd_err serr = {0};
    fs_user_enter(&u);
    bool there = fs_stat(p->srv->rootfd, p->path, true, in, &serr) == 0;
    fs_user_leave(&u);
    int rc = 0;
    if (im && !fs_etag_matches(im, there ? &in->st : NULL))
        rc = sbxd_fail(err, SBXD_E_PRECONDITION, 0, "'%.200s' %s: If-Match names another version",
                       p->path, there ? "has changed" : "does not exist");
    else if (inm && fs_etag_matches(inm, there ? &in->st : NULL))
        rc = sbxd_fail(
            err, SBXD_E_PRECONDITION, 0, "'%.200s' exists%s: it was not replaced", p->path,
            strchr(inm, '*') ? " (If-None-Match: *)" : " in a version If-None-Match names");
    free(in);
    if (rc < 0)
        return -1;
    if (im)
        snprintf(p->if_match, sizeof(p->if_match), "%s", im);
    /* If-None-Match: * (create only) holds to the end: the rename will not replace. Other
     * If-None-Match tags are checked now only. */
    p->no_replace = inm && strspn(inm, " \t") + 1 <= strlen(inm) && inm[strspn(inm, " \t")] == '*';
    return 0;
}

/* A file PUT that failed. A directory at the target is 409 on /files but 400 on /v1, as the
 * reference sandboxd answers it; a file where a parent directory is needed stays 409 on both
 * (the reference's 500 there makes the SDK retry five times, when nothing a retry does can
 * help). */
static enum MHD_Result put_failed(struct MHD_Connection *c, const struct req_ctx *rc,
                                  const struct sbxd_err *err)
{
    if (rc->route->face == FACE_V1 && err->kind == SBXD_E_CONFLICT && err->sys_errno == EISDIR)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", err->msg);
    return reply_err(c, err);
}

enum MHD_Result route_files_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const char *url, const char *method)
{
    if (strcmp(method, "PUT") != 0)
        return MHD_YES; /* the rest has no body: all at the end */
    struct sbxd_err err = {0};
    rc->replied = true;
    struct files_put *p = files_put_new(srv, rc);
    if (!p)
        return MHD_NO;
    p->path = http_files_path(srv, rc->route, url, &err);
    if (!p->path)
        return reply_err(c, &err);
    const char *bad = put_options(c, p);
    if (bad)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", bad);
    if (http_body_too_large(c, srv->cfg->max_upload_bytes))
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "PAYLOAD_TOO_LARGE",
                           "the upload is larger than %llu bytes (--max-upload-bytes)",
                           (unsigned long long)srv->cfg->max_upload_bytes);
    char av[16];
    bool abad, replace = false;
    if (query_arg(c, "archive", av, sizeof(av), &abad)) {
        enum ar_format fmt;
        if (abad || files_archive_format(av, &fmt) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "archive must be tar or zip (either is recognised from its bytes)");
        if (p->directory || MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "mode"))
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "archive= takes neither type= nor mode= (modes come from the "
                               "archive)");
        if (!query_bool(c, "replace", &replace))
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "replace must be true or false");
        if (files_archive_begin(p, replace, &err) < 0)
            return reply_err(c, &err);
        rc->replied = false;
        return MHD_YES;
    }
    if (!p->directory) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        p->multipart = mp_is_multipart(ct);
        if (p->multipart && mp_init(&p->mp, ct, "file", files_put_data, p) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", p->mp.error);
        if (put_conditions(c, p, &err) < 0 || files_put_open(p, &err) < 0)
            return put_failed(c, rc, &err);
        p->up.no_replace = p->no_replace;
        snprintf(p->up.if_match, sizeof(p->up.if_match), "%s", p->if_match);
    }
    rc->replied = false;
    return MHD_YES;
}

/* PUT ?type=directory: mkdir -p; 201 when the directory was made, 200 when it was there. */
static int put_directory(struct files_put *p, struct stat *st, unsigned *status,
                         struct sbxd_err *err)
{
    bool created;
    struct fs_user u;
    files_user(p->srv, &u);
    fs_user_enter(&u);
    int fd = fs_mkdir_p(p->srv->rootfd, p->path, p->mode, &created, err);
    int rs = fd >= 0 ? fstat(fd, st) : -1;
    fs_user_leave(&u);
    if (fd < 0)
        return -1;
    close(fd);
    if (rs < 0)
        memset(st, 0, sizeof(*st));
    *status = created ? MHD_HTTP_CREATED : MHD_HTTP_OK;
    return 0;
}

static enum MHD_Result files_put_end(struct MHD_Connection *c, struct req_ctx *rc)
{
    struct files_put *p = rc->state;
    struct sbxd_err err = {0};
    struct stat st;
    unsigned status = MHD_HTTP_OK;
    if (p->ax)
        return files_archive_end(c, p);
    if (p->error.kind == SBXD_E_NONE && p->multipart)
        files_put_finish_multipart(p);
    if (p->error.kind != SBXD_E_NONE)
        return reply_err(c, &p->error);
    if (p->directory ? put_directory(p, &st, &status, &err) < 0
                     : files_put_commit(p, &st, &err) < 0)
        return p->directory ? reply_err(c, &err) : put_failed(c, rc, &err);
    if (!p->directory)
        status = p->up.existed ? MHD_HTTP_OK : MHD_HTTP_CREATED;
    if (rules_of(rc)->bare_write)
        return reply_no_content(c);
    struct fs_entry e;
    const char *slash = strrchr(p->path, '/');
    fs_entry_from_stat(&e, slash ? slash + 1 : p->path, &st);
    struct jsonw w;
    jw_init(&w, 256);
    write_entry(&w, &e, p->path, false);
    return reply_jsonw(c, status, &w);
}

enum MHD_Result route_files(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (strcmp(rc->method, "PUT") == 0)
        return files_put_end(c, rc);
    if (strcmp(rc->method, "DELETE") == 0)
        return files_delete(srv, c, rc);
    if (strcmp(rc->method, "POST") == 0)
        return files_post(srv, c, rc);
    return files_get(srv, c, rc);
}
