/*
 * /files/{path} and /v1/files/{path}: GET (a file's bytes, with Range; a directory's
 * listing), HEAD, PUT (raw or multipart body streamed to a temporary file, then renamed over
 * the target; or ?type=directory), DELETE. Two faces of one implementation: the route says
 * which (struct route's face), and what differs between them is the table face_rules. The
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

/* Leading slashes, also encoded ones, are dropped: the path is relative to the workspace root
 * whatever it starts with (the legacy routes re-root "/etc/x" as "etc/x"). */
char *http_files_path(const struct route *rt, const char *url, struct sbxd_err *err)
{
    const char *p = url + (rt ? strlen(rt->path) : 0);
    while (*p == '/')
        p++;
    char *s = files_url_decode(p, err);
    if (!s)
        return NULL;
    size_t lead = strspn(s, "/");
    memmove(s, s + lead, strlen(s + lead) + 1);
    if (strlen(s) >= PATH_MAX) {
        sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes", PATH_MAX - 1);
        free(s);
        return NULL;
    }
    return s;
}

/* The entry as /files and /v1 describe it; with path, also its path (a PUT's answer). */
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

static void entry_files(struct jsonw *w, struct fs_entry *e, const struct listing_at *at)
{
    (void)at;
    write_entry(w, e, NULL);
}

/* /v1 knows two types: what is not a directory is listed as a file. */
static void entry_v1(struct jsonw *w, struct fs_entry *e, const struct listing_at *at)
{
    (void)at;
    if (strcmp(e->type, "directory") != 0)
        e->type = "file";
    write_entry(w, e, NULL);
}

/* What differs between the two faces served here. The contract of /v1 and the python runtime
 * promise no order, so only /files sorts its listings (up to SBXD_LIST_SORT_MAX entries). */
struct face_rules {
    struct listing_form list;
    bool bare_write; /* a write answers 204 with no body; else 200/201 with the entry */
};

static const struct face_rules face_rules[FACE_COUNT] = {
    [FACE_FILES] = {{FS_LIST_SORTED, true, entry_files, reply_err}, false},
    [FACE_V1] = {{0, true, entry_v1, reply_err}, true},
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

/* Serve the open directory fd (consumed) as a page of its listing, ?offset= and ?limit=. */
static enum MHD_Result get_directory(struct server *srv, struct MHD_Connection *c, int fd,
                                     const char *path, const struct face_rules *rules)
{
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
    return files_list_send(srv, c, fd, path, &rules->list, offset, limit);
}

static enum MHD_Result files_get(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    struct sbxd_err err = {0};
    autofree char *path = http_files_path(rc->route, rc->url, &err);
    if (!path)
        return reply_err(c, &err);
    struct fs_user u;
    files_user(srv, &u);
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->rootfd, path, &st, &err);
    fs_user_leave(&u);
    if (fd < 0)
        return reply_err(c, &err);
    if (S_ISDIR(st.st_mode))
        return get_directory(srv, c, fd, path, rules_of(rc));
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

static enum MHD_Result files_delete(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc)
{
    struct sbxd_err err = {0};
    autofree char *path = http_files_path(rc->route, rc->url, &err);
    if (!path)
        return reply_err(c, &err);
    char v[16];
    bool bad, recursive = false;
    if (query_arg(c, "recursive", v, sizeof(v), &bad)) {
        if (bad || (strcmp(v, "true") != 0 && strcmp(v, "false") != 0))
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "recursive must be true or false");
        recursive = strcmp(v, "true") == 0;
    }
    struct fs_user u;
    files_user(srv, &u);
    fs_user_enter(&u);
    int r = fs_delete(srv->rootfd, path, recursive, &err);
    fs_user_leave(&u);
    return r < 0 ? reply_err(c, &err) : reply_no_content(c);
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
    p->path = http_files_path(rc->route, url, &err);
    if (!p->path)
        return reply_err(c, &err);
    const char *bad = put_options(c, p);
    if (bad)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", bad);
    if (http_body_too_large(c, srv->cfg->max_upload_bytes))
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "PAYLOAD_TOO_LARGE",
                           "the upload is larger than %llu bytes (--max-upload-bytes)",
                           (unsigned long long)srv->cfg->max_upload_bytes);
    if (!p->directory) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        p->multipart = mp_is_multipart(ct);
        if (p->multipart && mp_init(&p->mp, ct, "file", files_put_data, p) < 0)
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s", p->mp.error);
        if (files_put_open(p, &err) < 0)
            return reply_err(c, &err);
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
    if (p->error.kind == SBXD_E_NONE && p->multipart)
        files_put_finish_multipart(p);
    if (p->error.kind != SBXD_E_NONE)
        return reply_err(c, &p->error);
    if (p->directory ? put_directory(p, &st, &status, &err) < 0
                     : files_put_commit(p, &st, &err) < 0)
        return reply_err(c, &err);
    if (!p->directory)
        status = p->up.existed ? MHD_HTTP_OK : MHD_HTTP_CREATED;
    if (rules_of(rc)->bare_write)
        return reply_no_content(c);
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
        return files_put_end(c, rc);
    if (strcmp(rc->method, "DELETE") == 0)
        return files_delete(srv, c, rc);
    return files_get(srv, c, rc);
}
