/*
 * /files/{path}: GET (a file's bytes, with Range; a directory's listing), HEAD, PUT (raw or
 * multipart body streamed to a temporary file, then renamed over the target; or
 * ?type=directory), DELETE. The filesystem side is fs/files.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/http.h"
#include "sbxd/metrics.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/multipart.h"
#include "sbxd/resolve.h"
#include "sbxd/timeutil.h"

/* The faces of one implementation: /files, the standardized /v1/files, and the legacy
 * python-runtime routes (/upload, /download, /list, /exists), which differ only in paths,
 * statuses and error bodies. */
enum face { FACE_FILES, FACE_V1, FACE_LEGACY };

static const struct {
    const char *prefix;
    enum face face;
} faces[] = {{"/v1/files", FACE_V1}, {"/files", FACE_FILES},   {"/download", FACE_LEGACY},
             {"/list", FACE_LEGACY}, {"/exists", FACE_LEGACY}, {"/upload", FACE_LEGACY}};

static enum face face_of(const char *url, size_t *prefix_len)
{
    for (size_t i = 0; i < sizeof(faces) / sizeof(faces[0]); i++) {
        size_t n = strlen(faces[i].prefix);
        if (strncmp(url, faces[i].prefix, n) == 0 && (url[n] == '/' || url[n] == '\0')) {
            *prefix_len = n;
            return faces[i].face;
        }
    }
    *prefix_len = 0;
    return FACE_FILES;
}

/* Legacy errors are {"message": ...} as the python runtime sends them: escapes are "Access
 * denied", a missing file `missing`; the rest keeps its status with sbxd's sentence. */
static enum MHD_Result reply_legacy_err(struct MHD_Connection *c, const struct sbxd_err *err,
                                        const char *missing, const char *prefix)
{
    if (err->kind == SBXD_E_DENIED)
        return reply_message(c, MHD_HTTP_FORBIDDEN, "Access denied");
    if (err->kind == SBXD_E_NOT_FOUND && missing)
        return reply_message(c, MHD_HTTP_NOT_FOUND, "%s", missing);
    return reply_message(c, err_status(err->kind), "%s%s", prefix ? prefix : "", err->msg);
}

/* One PUT in progress: its target, its temporary file, and how its body is read. */
struct files_put {
    struct server *srv;
    enum face face;
    char *path;
    bool directory; /* ?type=directory */
    mode_t mode;
    struct fs_upload up;
    bool began;
    bool multipart;
    struct multipart mp;
    uint64_t received;     /* body bytes read */
    struct sbxd_err error; /* the first failure; the rest of the body is then dropped */
};

static void fs_user_of(const struct server *srv, struct fs_user *u)
{
    const struct harden_plan *h = srv->harden;
    u->switch_ids = h->switch_user;
    u->uid = h->uid;
    u->gid = h->gid;
    u->file_mode = h->group_share ? 0664 : 0644;
    u->dir_mode = h->group_share ? 0775 : 0755;
}

/* The path part after the route's prefix, decoded (malloc'd), or NULL with err. Leading
 * slashes, also encoded ones, are dropped: the path is relative to the workspace root
 * whatever it starts with (the legacy routes re-root "/etc/x" as "etc/x"). */
char *http_files_path(const char *url, struct sbxd_err *err)
{
    size_t skip;
    face_of(url, &skip);
    const char *p = url + skip;
    while (*p == '/')
        p++;
    char *s = strdup(p);
    if (!s) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    if (fs_url_decode(s, err) < 0) {
        free(s);
        return NULL;
    }
    size_t lead = strspn(s, "/");
    memmove(s, s + lead, strlen(s + lead) + 1);
    if (strlen(s) >= PATH_MAX) {
        sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes", PATH_MAX - 1);
        free(s);
        return NULL;
    }
    return s;
}

/* A query argument, decoded into out (false when absent). */
static bool query_arg(struct MHD_Connection *c, const char *key, char *out, size_t len,
                      struct sbxd_err *err, bool *bad)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    *bad = false;
    if (!v)
        return false;
    snprintf(out, len, "%s", v);
    if (strlen(v) >= len || fs_url_decode(out, err) < 0) {
        sbxd_fail(err, SBXD_E_INVALID, EINVAL, "query argument '%s' is malformed", key);
        *bad = true;
    }
    return true;
}

/* /v1 knows two types: what is not a directory is listed as a file. */
static const char *entry_type(const struct fs_entry *e, enum face face)
{
    if (face == FACE_V1 && strcmp(e->type, "directory") != 0)
        return "file";
    return e->type;
}

static void write_entry(struct jsonw *w, const struct fs_entry *e, const char *path, enum face face)
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
    jw_str(w, entry_type(e, face));
    jw_key(w, "size");
    jw_uint(w, e->size);
    jw_key(w, "mode");
    jw_str(w, mode);
    jw_key(w, "modified_at");
    jw_str(w, when);
    jw_obj_end(w);
}

static void http_date(int64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* Parse a single "bytes=" range against size into [*first, *last]. 1: a range; 0: none
 * (or one this server ignores: several ranges); -1: unsatisfiable; -2: malformed. */
static int parse_range(const char *h, uint64_t size, uint64_t *first, uint64_t *last)
{
    if (!h)
        return 0;
    if (strncasecmp(h, "bytes=", 6) != 0)
        return -2;
    h += 6;
    if (strchr(h, ','))
        return 0; /* several ranges: the whole file, as RFC 9110 allows */
    char *end;
    if (*h == '-') {
        errno = 0;
        uint64_t n = strtoull(h + 1, &end, 10);
        if (errno || *end || end == h + 1)
            return -2;
        if (n == 0 || size == 0)
            return -1;
        *first = n >= size ? 0 : size - n;
        *last = size - 1;
        return 1;
    }
    errno = 0;
    uint64_t a = strtoull(h, &end, 10);
    if (errno || end == h || *end != '-')
        return -2;
    const char *b = end + 1;
    uint64_t z = UINT64_MAX;
    if (*b) {
        z = strtoull(b, &end, 10);
        if (errno || *end || z < a)
            return -2;
    }
    if (a >= size)
        return -1;
    *first = a;
    *last = z >= size ? size - 1 : z;
    return 1;
}

/*
 * A directory listing being sent. Its JSON is made a chunk at a time, as libmicrohttpd asks
 * for more, from a lister that reads the directory as it goes (fs/files.c): what one listing
 * holds is bounded (SBXD_LIST_*) whatever the directory holds, and a slow client slows the
 * reading rather than growing sbxd.
 *
 * The status is sent before the entries: the directory is opened and its first names are read
 * before the answer starts, so a directory that cannot be listed is still an error status.
 * Only a read failing later (an I/O error half-way) can cut a listing short; it then ends as
 * valid JSON with the entries read ("total" counting those), and the cut is logged.
 */
enum listing_stage { LIST_SKIP, LIST_ENTRIES, LIST_COUNT, LIST_TAIL, LIST_DONE };

/* Names passed over (an offset, or counted after a page) per fill: one fill stays short. */
#define LIST_SKIP_BATCH 4096

struct listing {
    struct server *srv;
    struct fs_lister *l;
    enum face face;
    char *path;                  /* the listed path, decoded */
    uint64_t offset, limit;      /* the page asked for (/files and /v1) */
    uint64_t passed, sent, rest; /* entries before the page, in it, after it */
    enum listing_stage stage;
    struct jsonw out; /* the chunk being sent */
    size_t off;       /* ... and how much of it went out */
};

/* As the python runtime (os.scandir) lists them, a legacy listing describes a symlink by what
 * it points to when that is inside the workspace; one that leaves it or dangles stays a file.
 * Resolved beneath the listed directory's fd; only a link that climbs above that directory
 * is resolved by its path from the workspace root (confined all the same). */
static void legacy_follow(struct listing *ls, struct fs_entry *e)
{
    struct sbxd_err e2 = {0};
    int tfd = fs_resolve_beneath(fs_list_dirfd(ls->l), e->name, 0, &e2);
    if (tfd < 0 && e2.kind == SBXD_E_DENIED) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s%s%s", ls->path, *ls->path ? "/" : "", e->name);
        tfd = fs_resolve_beneath(ls->srv->rootfd, path, 0, &e2);
    }
    struct stat st;
    if (tfd >= 0 && fstat(tfd, &st) == 0) {
        char name[sizeof(e->name)];
        memcpy(name, e->name, sizeof(name));
        fs_entry_from_stat(e, name, &st);
    }
    if (tfd >= 0)
        close(tfd);
}

/* The legacy entry: {name,size,type,mod_time} with the time in seconds since the epoch. */
static void write_legacy_entry(struct jsonw *w, const struct fs_entry *e)
{
    jw_obj_begin(w);
    jw_key(w, "name");
    jw_str(w, e->name);
    jw_key(w, "size");
    jw_uint(w, e->size);
    jw_key(w, "type");
    jw_str(w, strcmp(e->type, "directory") == 0 ? "directory" : "file");
    jw_key(w, "mod_time");
    jw_double(w, (double)e->mtime_ns / 1e9, 6);
    jw_obj_end(w);
}

static void listing_cut(struct listing *ls, const struct sbxd_err *err)
{
    LOG_EVENT("warn", "listing_cut", LOG_S("path", ls->path), LOG_S("error", err->msg),
              LOG_I("entries", ls->sent), LOG_I("read", ls->passed + ls->sent + ls->rest));
    ls->stage = LIST_TAIL;
}

/* Make the next chunk of the listing in ls->out, with the user's rights. */
static void listing_fill(struct listing *ls)
{
    struct sbxd_err err = {0};
    struct fs_user u;
    fs_user_of(ls->srv, &u);
    fs_user_enter(&u);
    while (ls->out.len < SBXD_LIST_CHUNK && ls->stage != LIST_DONE) {
        uint64_t k;
        int r;
        switch (ls->stage) {
        case LIST_SKIP:
            k = ls->offset - ls->passed;
            r = fs_list_skip(ls->l, k < LIST_SKIP_BATCH ? k : LIST_SKIP_BATCH, &k, &err);
            ls->passed += k;
            if (r < 0)
                listing_cut(ls, &err);
            else if (ls->passed == ls->offset || k == 0)
                ls->stage = LIST_ENTRIES;
            break;
        case LIST_ENTRIES: {
            if (ls->sent == ls->limit) {
                ls->stage = LIST_COUNT;
                break;
            }
            struct fs_entry e;
            r = fs_list_next(ls->l, &e, &err);
            if (r < 0) {
                listing_cut(ls, &err);
            } else if (r == 0) {
                ls->stage = LIST_TAIL;
            } else if (ls->face == FACE_LEGACY) {
                if (strcmp(e.type, "symlink") == 0)
                    legacy_follow(ls, &e);
                write_legacy_entry(&ls->out, &e);
                ls->sent++;
            } else {
                write_entry(&ls->out, &e, NULL, ls->face);
                ls->sent++;
            }
            break;
        }
        case LIST_COUNT:
            /* "total" counts the whole directory: the names after the page, not described. */
            r = fs_list_skip(ls->l, LIST_SKIP_BATCH, &k, &err);
            ls->rest += k;
            if (r < 0)
                listing_cut(ls, &err);
            else if (k < LIST_SKIP_BATCH)
                ls->stage = LIST_TAIL;
            break;
        case LIST_TAIL:
            jw_arr_end(&ls->out);
            if (ls->face != FACE_LEGACY) {
                jw_key(&ls->out, "total");
                jw_uint(&ls->out, ls->passed + ls->sent + ls->rest);
                jw_obj_end(&ls->out);
            }
            jw_newline(&ls->out);
            ls->stage = LIST_DONE;
            break;
        case LIST_DONE:
            break;
        }
    }
    fs_user_leave(&u);
}

static ssize_t listing_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct listing *ls = cls;
    while (ls->off == ls->out.len) {
        if (ls->stage == LIST_DONE)
            return MHD_CONTENT_READER_END_OF_STREAM;
        jw_drop(&ls->out);
        ls->off = 0;
        listing_fill(ls);
        if (ls->out.failed) /* out of memory: a cut connection, not a listing that lies */
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    return (ssize_t)http_stream_out(&ls->out, &ls->off, buf, max);
}

static void listing_free(void *cls)
{
    struct listing *ls = cls;
    fs_list_close(ls->l);
    jw_free(&ls->out);
    free(ls->path);
    free(ls);
}

/*
 * Answer 200 with the listing of the open directory fd (consumed): /files and /v1 as
 * {"path","entries":[…],"total"} (a page of it with offset and limit), the legacy face as
 * [{name,size,type,mod_time}…]. Only /files is sorted by name (up to SBXD_LIST_SORT_MAX
 * entries): the /v1 contract and the python runtime promise no order, so those are sent in
 * the directory's order as it is read.
 */
static enum MHD_Result listing_start(struct server *srv, struct MHD_Connection *c, int fd,
                                     const char *path, enum face face, uint64_t offset,
                                     uint64_t limit)
{
    struct sbxd_err err = {0};
    struct listing *ls = calloc(1, sizeof(*ls));
    if (ls)
        ls->path = strdup(path);
    if (!ls || !ls->path) {
        close(fd);
        free(ls);
        return MHD_NO;
    }
    ls->srv = srv;
    ls->face = face;
    ls->offset = offset;
    ls->limit = limit;
    ls->stage = offset ? LIST_SKIP : LIST_ENTRIES;
    struct fs_user u;
    fs_user_of(srv, &u);
    fs_user_enter(&u);
    ls->l = fs_list_open(fd, face == FACE_FILES ? FS_LIST_SORTED : 0, &err);
    fs_user_leave(&u);
    if (!ls->l) {
        listing_free(ls);
        return face == FACE_LEGACY
                   ? reply_legacy_err(c, &err, "Path is not a directory", "List files failed: ")
                   : reply_err(c, &err);
    }
    /* Room for a chunk and the largest entry after it (a name of 255 bytes, each escaped to
     * 6): the buffer never grows while the listing is sent. */
    jw_init(&ls->out, SBXD_LIST_CHUNK + 4096);
    if (face == FACE_LEGACY) {
        jw_arr_begin(&ls->out);
    } else {
        jw_obj_begin(&ls->out);
        jw_key(&ls->out, "path");
        jw_str(&ls->out, path);
        jw_key(&ls->out, "entries");
        jw_arr_begin(&ls->out);
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SBXD_LIST_CHUNK,
                                                               listing_read, ls, listing_free);
    if (!r) {
        listing_free(ls);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result get_directory(struct server *srv, struct MHD_Connection *c, int fd,
                                     const char *path, enum face face)
{
    struct sbxd_err err = {0};
    char v[32];
    bool bad;
    uint64_t limit = UINT64_MAX, offset = 0;
    if (query_arg(c, "limit", v, sizeof(v), &err, &bad)) {
        char *end;
        limit = bad ? 0 : strtoull(v, &end, 10);
        if (bad || !*v || *end || limit == 0) {
            close(fd);
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "limit must be a whole number above 0");
        }
    }
    if (query_arg(c, "offset", v, sizeof(v), &err, &bad)) {
        char *end;
        offset = bad ? 0 : strtoull(v, &end, 10);
        if (bad || !*v || *end) {
            close(fd);
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "offset must be a whole number");
        }
    }
    return listing_start(srv, c, fd, path, face, offset, limit);
}

/* attachment: the legacy download's Content-Disposition filename, or NULL. */
static enum MHD_Result get_file(struct MHD_Connection *c, int fd, const struct stat *st,
                                const char *attachment)
{
    struct fs_entry e;
    fs_entry_from_stat(&e, "", st);
    uint64_t size = e.size, first = 0, last = size ? size - 1 : 0;
    char etag[80], lm[64], cr[96];
    snprintf(etag, sizeof(etag), "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", (uint64_t)e.ino, size,
             (uint64_t)e.mtime_ns);
    http_date(e.mtime_ns, lm, sizeof(lm));
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    /* If-Range: the range only holds for the version the client has. */
    const char *if_range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Range");
    if (range && if_range && strcmp(if_range, etag) != 0 && strcmp(if_range, lm) != 0)
        range = NULL;
    int rr = parse_range(range, size, &first, &last);
    if (rr == -2) {
        close(fd);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "Range must be bytes=FIRST-[LAST] or bytes=-SUFFIX");
    }
    if (rr == -1) {
        close(fd);
        snprintf(cr, sizeof(cr), "bytes */%" PRIu64, size);
        struct sbxd_err err = {0};
        sbxd_fail(&err, SBXD_E_RANGE, 0, "the range lies outside the file's %" PRIu64 " bytes",
                  size);
        /* reply_err cannot add the header: build the same error with it. */
        char body[256];
        int bl = snprintf(body, sizeof(body),
                          "{\"code\":\"RANGE_NOT_SATISFIABLE\",\"message\":"
                          "\"the range lies outside the file's %" PRIu64 " bytes\"}\n",
                          size);
        struct MHD_Response *r =
            MHD_create_response_from_buffer((size_t)bl, body, MHD_RESPMEM_MUST_COPY);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        enum MHD_Result ret = http_queue(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, r, (uint64_t)bl);
        MHD_destroy_response(r);
        return ret;
    }
    uint64_t len = size ? last - first + 1 : 0;
    struct MHD_Response *r;
    if (len == 0) {
        close(fd);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else {
        /* Served from the fd we opened (sendfile where MHD can): never re-opened by name. */
        r = MHD_create_response_from_fd_at_offset64(len, fd, first);
    }
    if (!r) {
        if (len)
            close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_LAST_MODIFIED, lm);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (attachment) {
        /* The name as a quoted-string: quotes, backslashes and controls cannot break out. */
        char cd[PATH_MAX + 64];
        size_t n = (size_t)snprintf(cd, sizeof(cd), "attachment; filename=\"");
        for (const char *q = attachment; *q && n + 4 < sizeof(cd); q++)
            if ((unsigned char)*q >= 0x20 && *q != 0x7f) {
                if (*q == '"' || *q == '\\')
                    cd[n++] = '\\';
                cd[n++] = *q;
            }
        snprintf(cd + n, sizeof(cd) - n, "\"");
        MHD_add_response_header(r, "Content-Disposition", cd);
    }
    unsigned status = MHD_HTTP_OK;
    if (rr == 1) {
        snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        status = MHD_HTTP_PARTIAL_CONTENT;
    }
    if (!http_is_head())
        metrics_file(false, len);
    enum MHD_Result ret = http_queue(c, status, r, len);
    MHD_destroy_response(r);
    return ret;
}

/* GET /exists/{path}: {"path": the decoded path as sent, "exists": bool}. */
static enum MHD_Result legacy_exists(struct server *srv, struct MHD_Connection *c, const char *url)
{
    struct sbxd_err err = {0};
    size_t skip;
    face_of(url, &skip);
    const char *p = url + skip + (url[skip] == '/');
    char *sent = strdup(p); /* as the client meant it: decoded, its leading slash kept */
    char *path = http_files_path(url, &err);
    if (!sent || !path || fs_url_decode(sent, &err) < 0) {
        free(sent);
        free(path);
        return reply_legacy_err(c, &err, NULL, NULL);
    }
    struct fs_user u;
    fs_user_of(srv, &u);
    fs_user_enter(&u);
    int fd = fs_resolve_beneath(srv->rootfd, path, 0, &err);
    fs_user_leave(&u);
    free(path);
    if (fd >= 0)
        close(fd);
    enum MHD_Result r;
    if (fd < 0 && err.kind != SBXD_E_NOT_FOUND) {
        r = reply_legacy_err(c, &err, NULL, NULL);
    } else {
        struct jsonw w;
        jw_init(&w, 64 + strlen(sent));
        jw_obj_begin(&w);
        jw_key(&w, "path");
        jw_str(&w, sent);
        jw_key(&w, "exists");
        jw_bool(&w, fd >= 0);
        jw_obj_end(&w);
        r = reply_jsonw(c, MHD_HTTP_OK, &w);
    }
    free(sent);
    return r;
}

static enum MHD_Result files_get(struct server *srv, struct MHD_Connection *c, const char *url)
{
    struct sbxd_err err = {0};
    size_t skip;
    enum face face = face_of(url, &skip);
    bool list = face == FACE_LEGACY && strncmp(url, "/list", 5) == 0;
    if (face == FACE_LEGACY && strncmp(url, "/exists", 7) == 0)
        return legacy_exists(srv, c, url);
    const char *missing = list ? "Path is not a directory" : "File not found";
    char *path = http_files_path(url, &err);
    if (!path)
        return face == FACE_LEGACY ? reply_legacy_err(c, &err, missing, NULL) : reply_err(c, &err);
    struct fs_user u;
    fs_user_of(srv, &u);
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->rootfd, path, &st, &err);
    fs_user_leave(&u);
    enum MHD_Result r;
    if (face == FACE_LEGACY) {
        /* A directory is not a file to download, a file not a directory to list. */
        if (fd >= 0 && S_ISDIR(st.st_mode) != list) {
            close(fd);
            fd = -1;
            sbxd_fail(&err, SBXD_E_NOT_FOUND, 0, "%s", missing);
        }
        if (fd < 0 && err.kind == SBXD_E_INVALID && strstr(err.msg, "neither"))
            err.kind = SBXD_E_NOT_FOUND; /* a fifo or socket: nothing to serve either */
        if (fd < 0)
            r = reply_legacy_err(c, &err, missing, NULL);
        else if (list)
            r = listing_start(srv, c, fd, path, FACE_LEGACY, 0, UINT64_MAX);
        else {
            /* The name the client asked for, decoded, as the python runtime gives it. */
            char *name = strdup(url + skip + (url[skip] == '/'));
            struct sbxd_err e2;
            if (name && fs_url_decode(name, &e2) < 0)
                name[0] = '\0';
            r = get_file(c, fd, &st, name ? name : "");
            free(name);
        }
    } else if (fd < 0) {
        r = reply_err(c, &err);
    } else if (S_ISDIR(st.st_mode)) {
        r = get_directory(srv, c, fd, path, face);
    } else {
        r = get_file(c, fd, &st, NULL);
    }
    free(path);
    return r;
}

static enum MHD_Result files_delete(struct server *srv, struct MHD_Connection *c, const char *url)
{
    struct sbxd_err err = {0};
    char *path = http_files_path(url, &err);
    if (!path)
        return reply_err(c, &err);
    char v[16];
    bool bad, recursive = false;
    if (query_arg(c, "recursive", v, sizeof(v), &err, &bad)) {
        if (bad || (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)) {
            free(path);
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "recursive must be true or false");
        }
        recursive = strcmp(v, "true") == 0;
    }
    struct fs_user u;
    fs_user_of(srv, &u);
    fs_user_enter(&u);
    int rc = fs_delete(srv->rootfd, path, recursive, &err);
    fs_user_leave(&u);
    free(path);
    if (rc < 0)
        return reply_err(c, &err);
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result ret = http_queue(c, MHD_HTTP_NO_CONTENT, r, 0);
    MHD_destroy_response(r);
    return ret;
}

static void put_free(void *state, bool completed)
{
    struct files_put *p = state;
    if (!p)
        return;
    if (p->began) {
        /* Not committed (failed, or the client went away mid-body): no temporary file may
         * stay, and the target keeps its old content. */
        struct fs_user u;
        fs_user_of(p->srv, &u);
        fs_upload_abort(&p->up, &u);
    }
    (void)completed;
    free(p->path);
    free(p);
}

static int put_data(void *arg, const char *data, size_t n)
{
    struct files_put *p = arg;
    return fs_upload_write(&p->up, data, n, &p->error);
}

/* POST /upload: the destination is the part's filename, known only once its headers are
 * parsed; the temporary file is made then. A leading '/' is re-rooted (as in the python
 * runtime, which does not percent-decode a filename either). */
static int legacy_begin(struct files_put *p)
{
    const char *f = p->mp.filename;
    while (*f == '/')
        f++;
    if (!*f)
        return sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL,
                         "the part \"file\" has no filename to save it as (or one over 255 "
                         "bytes)");
    p->path = strdup(f);
    if (!p->path)
        return sbxd_fail(&p->error, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct fs_user u;
    fs_user_of(p->srv, &u);
    fs_user_enter(&u);
    int r = fs_upload_begin(&p->up, p->srv->rootfd, p->path, &u, &p->error);
    fs_user_leave(&u);
    if (r < 0)
        return -1;
    p->began = true;
    return 0;
}

static int legacy_data(void *arg, const char *data, size_t n)
{
    struct files_put *p = arg;
    if (!p->began && (p->error.kind != SBXD_E_NONE || legacy_begin(p) < 0))
        return -1;
    return put_data(p, data, n);
}

static enum MHD_Result upload_begin(struct server *srv, struct MHD_Connection *c,
                                    struct files_put *p, struct req_ctx *rc)
{
    p->face = FACE_LEGACY;
    struct fs_user u;
    fs_user_of(srv, &u);
    p->mode = u.file_mode;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    char *end;
    errno = 0;
    if (cl && (strtoull(cl, &end, 10) > srv->cfg->max_upload_bytes || errno || *end))
        return reply_message(c, MHD_HTTP_CONTENT_TOO_LARGE,
                             "File upload failed: the upload is larger than %llu bytes",
                             (unsigned long long)srv->cfg->max_upload_bytes);
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!mp_is_multipart(ct))
        return reply_message(c, MHD_HTTP_BAD_REQUEST,
                             "File upload failed: send multipart/form-data with a part \"file\"");
    p->multipart = true;
    if (mp_init(&p->mp, ct, "file", legacy_data, p) < 0)
        return reply_message(c, MHD_HTTP_BAD_REQUEST, "File upload failed: %s", p->mp.error);
    rc->replied = false;
    return MHD_YES;
}

enum MHD_Result route_files_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const char *url, const char *method)
{
    bool upload = strcmp(method, "POST") == 0;
    if (strcmp(method, "PUT") != 0 && !upload)
        return MHD_YES; /* the rest has no body: all at the end */
    struct sbxd_err err = {0};
    rc->replied = true;
    struct files_put *p = calloc(1, sizeof(*p));
    if (!p)
        return MHD_NO;
    p->srv = srv;
    p->up.fd = p->up.dirfd = -1;
    rc->state = p;
    rc->state_free = put_free;
    if (upload)
        return upload_begin(srv, c, p, rc);
    size_t skip;
    p->face = face_of(url, &skip);
    p->path = http_files_path(url, &err);
    if (!p->path)
        return reply_err(c, &err);
    char v[16];
    bool bad;
    struct fs_user u;
    fs_user_of(srv, &u);
    p->mode = u.file_mode;
    if (query_arg(c, "type", v, sizeof(v), &err, &bad)) {
        if (bad || (strcmp(v, "directory") != 0 && strcmp(v, "file") != 0))
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "type must be file or directory");
        p->directory = strcmp(v, "directory") == 0;
        if (p->directory)
            p->mode = u.dir_mode;
    }
    if (query_arg(c, "mode", v, sizeof(v), &err, &bad)) {
        /* ^0[0-7]{3}$ */
        if (bad || strlen(v) != 4 || v[0] != '0' || strspn(v + 1, "01234567") != 3)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "mode must be 4 octal digits starting with 0, like 0644");
        p->mode = (mode_t)strtoul(v, NULL, 8);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || *end || n > srv->cfg->max_upload_bytes)
            return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "PAYLOAD_TOO_LARGE",
                               "the upload is larger than %llu bytes (--max-upload-bytes)",
                               (unsigned long long)srv->cfg->max_upload_bytes);
    }
    if (p->directory) {
        rc->replied = false;
        return MHD_YES;
    }
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (mp_is_multipart(ct)) {
        p->multipart = true;
        if (mp_init(&p->mp, ct, "file", put_data, p) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", p->mp.error);
    }
    fs_user_enter(&u);
    int r = fs_upload_begin(&p->up, srv->rootfd, p->path, &u, &err);
    fs_user_leave(&u);
    if (r < 0)
        return reply_err(c, &err);
    p->began = true;
    rc->replied = false;
    return MHD_YES;
}

enum MHD_Result route_files_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                 const char *data, size_t n)
{
    (void)c;
    struct files_put *p = rc->state;
    if (!p)
        return MHD_YES; /* not a PUT: a body nobody reads */
    p->received += n;
    if (p->error.kind != SBXD_E_NONE) {
        /* Failed already: the rest is read and dropped (MHD cannot answer mid-body), up to a
         * bound past which the connection is closed instead. */
        return p->received - p->up.size > SBXD_BODY_DISCARD_MAX + srv->cfg->max_upload_bytes
                   ? MHD_NO
                   : MHD_YES;
    }
    if (p->received > srv->cfg->max_upload_bytes) {
        sbxd_fail(&p->error, SBXD_E_TOO_LARGE, EFBIG,
                  "the upload is larger than %llu bytes (--max-upload-bytes)",
                  (unsigned long long)srv->cfg->max_upload_bytes);
        return MHD_YES;
    }
    if (p->directory) {
        sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL, "a directory takes no body");
        return MHD_YES;
    }
    if (p->multipart) {
        if (mp_feed(&p->mp, data, n) < 0 && p->error.kind == SBXD_E_NONE)
            sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL, "%s", p->mp.error);
    } else {
        put_data(p, data, n);
    }
    return MHD_YES;
}

static enum MHD_Result files_put_end(struct server *srv, struct MHD_Connection *c,
                                     struct req_ctx *rc)
{
    struct files_put *p = rc->state;
    struct fs_user u;
    fs_user_of(srv, &u);
    struct sbxd_err err = {0};
    struct stat st;
    unsigned status;
    if (p->face == FACE_LEGACY) {
        if (p->error.kind == SBXD_E_NONE && mp_finish(&p->mp) < 0)
            sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL, "%s", p->mp.error);
        if (p->error.kind == SBXD_E_NONE && !p->mp.found)
            sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL,
                      "the multipart body has no part named \"file\"");
        if (p->error.kind == SBXD_E_NONE && !p->began)
            legacy_begin(p); /* an empty file: no data came to begin it */
        if (p->error.kind != SBXD_E_NONE)
            return reply_legacy_err(c, &p->error, NULL, "File upload failed: ");
    }
    if (p->error.kind != SBXD_E_NONE)
        return reply_err(c, &p->error);
    if (p->directory) {
        bool created;
        fs_user_enter(&u);
        int fd = fs_mkdir_p(srv->rootfd, p->path, p->mode, &created, &err);
        int rs = fd >= 0 ? fstat(fd, &st) : -1;
        fs_user_leave(&u);
        if (fd < 0)
            return reply_err(c, &err);
        close(fd);
        if (rs < 0)
            memset(&st, 0, sizeof(st));
        status = created ? MHD_HTTP_CREATED : MHD_HTTP_OK;
    } else {
        if (p->multipart && p->face != FACE_LEGACY && mp_finish(&p->mp) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", p->mp.error);
        if (p->multipart && !p->mp.found)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "the multipart body has no part named \"file\"");
        fs_user_enter(&u);
        int r = fs_upload_commit(&p->up, p->mode, &st, &err);
        fs_user_leave(&u);
        if (r < 0 && p->face == FACE_LEGACY)
            return reply_legacy_err(c, &err, NULL, "File upload failed: ");
        if (r < 0)
            return reply_err(c, &err);
        p->began = false;
        metrics_file(true, (uint64_t)st.st_size);
        status = p->up.existed ? MHD_HTTP_OK : MHD_HTTP_CREATED;
    }
    if (p->face == FACE_V1) {
        /* The standardized API answers a write with 204 and no body. */
        struct MHD_Response *r =
            MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        enum MHD_Result ret = http_queue(c, MHD_HTTP_NO_CONTENT, r, 0);
        MHD_destroy_response(r);
        return ret;
    }
    if (p->face == FACE_LEGACY)
        return reply_message(c, MHD_HTTP_OK, "File '%s' uploaded successfully.", p->mp.filename);
    struct fs_entry e;
    const char *slash = strrchr(p->path, '/');
    fs_entry_from_stat(&e, slash ? slash + 1 : p->path, &st);
    struct jsonw w;
    jw_init(&w, 256);
    write_entry(&w, &e, p->path, p->face);
    return reply_jsonw(c, status, &w);
}

enum MHD_Result route_files(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (strcmp(rc->method, "PUT") == 0 || strcmp(rc->method, "POST") == 0)
        return files_put_end(srv, c, rc);
    if (strcmp(rc->method, "DELETE") == 0)
        return files_delete(srv, c, rc->url);
    return files_get(srv, c, rc->url);
}
