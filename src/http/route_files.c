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
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/multipart.h"
#include "sbxd/timeutil.h"

/* One PUT in progress: its target, its temporary file, and how its body is read. */
struct files_put {
    struct server *srv;
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

/* The path part after /files, decoded (malloc'd), or NULL with err. */
static char *files_path(const char *url, struct sbxd_err *err)
{
    const char *p = url + strlen("/files");
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

static void write_entry(struct jsonw *w, const struct fs_entry *e, const char *path)
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

static enum MHD_Result get_directory(struct MHD_Connection *c, int fd, const char *path)
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
    size_t n;
    struct fs_entry *v_entries = fs_list(fd, &n, &err);
    if (!v_entries)
        return reply_err(c, &err);
    struct jsonw w;
    jw_init(&w, 256 + n * 96);
    jw_obj_begin(&w);
    jw_key(&w, "path");
    jw_str(&w, path);
    jw_key(&w, "total");
    jw_uint(&w, n);
    jw_key(&w, "entries");
    jw_arr_begin(&w);
    for (uint64_t i = offset, k = 0; i < n && k < limit; i++, k++)
        write_entry(&w, &v_entries[i], NULL);
    jw_arr_end(&w);
    jw_obj_end(&w);
    free(v_entries);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

static enum MHD_Result get_file(struct MHD_Connection *c, int fd, const struct stat *st)
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
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, r);
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
    unsigned status = MHD_HTTP_OK;
    if (rr == 1) {
        snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        status = MHD_HTTP_PARTIAL_CONTENT;
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result files_get(struct server *srv, struct MHD_Connection *c, const char *url)
{
    struct sbxd_err err = {0};
    char *path = files_path(url, &err);
    if (!path)
        return reply_err(c, &err);
    struct fs_user u;
    fs_user_of(srv, &u);
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->rootfd, path, &st, &err);
    fs_user_leave(&u);
    enum MHD_Result r;
    if (fd < 0)
        r = reply_err(c, &err);
    else if (S_ISDIR(st.st_mode))
        r = get_directory(c, fd, path);
    else
        r = get_file(c, fd, &st);
    free(path);
    return r;
}

static enum MHD_Result files_delete(struct server *srv, struct MHD_Connection *c, const char *url)
{
    struct sbxd_err err = {0};
    char *path = files_path(url, &err);
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
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
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

enum MHD_Result route_files_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  const char *url, const char *method)
{
    if (strcmp(method, "PUT") != 0)
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
    p->path = files_path(url, &err);
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
        if (p->multipart && mp_finish(&p->mp) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", p->mp.error);
        if (p->multipart && !p->mp.found)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "the multipart body has no part named \"file\"");
        fs_user_enter(&u);
        int r = fs_upload_commit(&p->up, p->mode, &st, &err);
        fs_user_leave(&u);
        if (r < 0)
            return reply_err(c, &err);
        p->began = false;
        status = p->up.existed ? MHD_HTTP_OK : MHD_HTTP_CREATED;
    }
    struct fs_entry e;
    const char *slash = strrchr(p->path, '/');
    fs_entry_from_stat(&e, slash ? slash + 1 : p->path, &st);
    struct jsonw w;
    jw_init(&w, 256);
    write_entry(&w, &e, p->path);
    return reply_jsonw(c, status, &w);
}

enum MHD_Result route_files(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (strcmp(rc->method, "PUT") == 0)
        return files_put_end(srv, c, rc);
    if (strcmp(rc->method, "DELETE") == 0)
        return files_delete(srv, c, rc->url);
    return files_get(srv, c, rc->url);
}
