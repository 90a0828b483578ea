/*
 * The legacy python-runtime file routes, as every agent-sandbox SDK speaks them by default:
 * POST /upload (multipart part "file", its filename the destination), GET /download/{path},
 * GET /list/{path}, GET /exists/{path}. Over the same core as /files (http_files_internal.h,
 * fs/files.c); what is theirs: errors are {"message": ...} (escapes "Access denied"), a
 * listing is a bare array of {name,size,type,mod_time}, a download is an attachment.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "http_files_internal.h"
#include "sbxd/resolve.h"

/* Legacy errors are {"message": ...} as the python runtime sends them: escapes are "Access
 * denied", a missing file `missing`; the rest keeps its status with sbxd's sentence after
 * prefix. */
static enum MHD_Result reply_legacy_err(struct MHD_Connection *c, const struct sbxd_err *err,
                                        const char *missing, const char *prefix)
{
    if (err->kind == SBXD_E_DENIED)
        return reply_message(c, MHD_HTTP_FORBIDDEN, "Access denied");
    if (err->kind == SBXD_E_NOT_FOUND && missing)
        return reply_message(c, MHD_HTTP_NOT_FOUND, "%s", missing);
    return reply_message(c, err_status(err->kind), "%s%s", prefix ? prefix : "", err->msg);
}

/* The route's path as the client meant it: decoded, its leading slash kept (malloc'd; NULL
 * with err). */
static char *path_as_sent(const struct req_ctx *rc, struct sbxd_err *err)
{
    size_t skip = strlen(rc->route->path);
    return files_url_decode(rc->url + skip + (rc->url[skip] == '/'), err);
}

/* The legacy entry: {name,size,type,mod_time} with the time in seconds since the epoch. A
 * symlink is described by what it leads to, as the python runtime's os.scandir does, when
 * that is inside the workspace; one that leaves it, dangles or loops is left out, as on /v1
 * (fs_list_follow): the python runtime described what an escaping link points to, host
 * files included, and failed the whole listing on a dangling one. */
static bool write_legacy_entry(struct jsonw *w, struct fs_entry *e, const struct listing_at *at)
{
    if (fs_list_follow(e, at->rootfd, at->dirfd, at->path) < 0)
        return false;
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
    return true;
}

static enum MHD_Result list_failed(struct MHD_Connection *c, const struct sbxd_err *err)
{
    return reply_legacy_err(c, err, "Path is not a directory", "List files failed: ");
}

/* The python runtime promises no order: entries come as the directory is read. */
static const struct listing_form legacy_listing = {0, false, write_legacy_entry, list_failed};

/* Open the route's path for /download (want_dir false) or /list (true): an fd and *path (the
 * path decoded, malloc'd), or -1 after answering. A directory is not a file to download, a
 * file not a directory to list; a fifo or a socket is nothing to serve either: all are
 * `missing`. */
static int open_legacy(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                       bool want_dir, char **path, struct stat *st, enum MHD_Result *ret)
{
    const char *missing = want_dir ? "Path is not a directory" : "File not found";
    struct sbxd_err err = {0};
    *path = http_files_path(srv, rc->route, rc->url, &err);
    if (!*path) {
        *ret = reply_legacy_err(c, &err, missing, NULL);
        return -1;
    }
    struct fs_user u;
    files_user(srv, &u);
    fs_user_enter(&u);
    int fd = fs_open_read(srv->sb->rootfd, *path, st, &err);
    fs_user_leave(&u);
    if (fd >= 0 && S_ISDIR(st->st_mode) != want_dir) {
        close(fd);
        fd = -1;
        sbxd_fail(&err, SBXD_E_NOT_FOUND, 0, "%s", missing);
    }
    if (fd < 0 && err.kind == SBXD_E_INVALID && (err.flags & SBXD_EF_SPECIAL_FILE))
        err.kind = SBXD_E_NOT_FOUND;
    if (fd < 0)
        *ret = reply_legacy_err(c, &err, missing, NULL);
    return fd;
}

/* GET /download/{path}: the file's bytes as an attachment named by the path as sent; GET
 * /list/{path}: [{name,size,type,mod_time}…]. */
static enum MHD_Result legacy_get(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                  bool list)
{
    autofree char *path = NULL;
    struct stat st;
    enum MHD_Result ret;
    int fd = open_legacy(srv, c, rc, list, &path, &st, &ret);
    if (fd < 0)
        return ret;
    if (list)
        return files_list_send(srv, c, fd, path, NULL, &legacy_listing, 0, UINT64_MAX);
    struct sbxd_err err = {0};
    autofree char *name = path_as_sent(rc, &err);
    return files_send(c, fd, &st, name ? name : "");
}

enum MHD_Result route_legacy_download(struct server *srv, struct MHD_Connection *c,
                                      struct req_ctx *rc)
{
    return legacy_get(srv, c, rc, false);
}

enum MHD_Result route_legacy_list(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    return legacy_get(srv, c, rc, true);
}

/* GET /exists/{path}: {"path": the path as sent, "exists": bool}. */
enum MHD_Result route_legacy_exists(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc)
{
    struct sbxd_err err = {0};
    autofree char *path = http_files_path(srv, rc->route, rc->url, &err);
    autofree char *sent = path ? path_as_sent(rc, &err) : NULL;
    if (!sent)
        return reply_legacy_err(c, &err, NULL, NULL);
    struct fs_user u;
    files_user(srv, &u);
    fs_user_enter(&u);
    int fd = fs_resolve_beneath(srv->sb->rootfd, path, 0, &err);
    fs_user_leave(&u);
    if (fd >= 0)
        close(fd);
    else if (err.kind != SBXD_E_NOT_FOUND)
        return reply_legacy_err(c, &err, NULL, NULL);
    struct jsonw w;
    jw_init(&w, 64 + strlen(sent));
    jw_obj_begin(&w);
    jw_key(&w, "path");
    jw_str(&w, sent);
    jw_key(&w, "exists");
    jw_bool(&w, fd >= 0);
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}

/* POST /upload: the destination is the part's filename, known only once its headers are
 * parsed; the temporary file is made then. An absolute filename under the workspace's own
 * path is that path inside it; any other leading '/' is re-rooted (as in the python runtime,
 * which does not percent-decode a filename either). */
static int upload_open(struct files_put *p)
{
    const char *f = fs_path_within(p->srv->sb->workspace, p->srv->cfg->workspace, p->mp.filename);
    if (!f)
        f = p->mp.filename;
    while (*f == '/')
        f++;
    if (!*f)
        return sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL,
                         "the part \"file\" has no filename to save it as (or one over 255 "
                         "bytes)");
    p->path = strdup(f);
    if (!p->path)
        return sbxd_fail(&p->error, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return files_put_open(p, &p->error);
}

static int upload_data(void *arg, const char *data, size_t n)
{
    struct files_put *p = arg;
    if (!p->began && (p->error.kind != SBXD_E_NONE || upload_open(p) < 0))
        return -1;
    return files_put_data(p, data, n);
}

enum MHD_Result route_legacy_upload_begin(struct server *srv, struct MHD_Connection *c,
                                          struct req_ctx *rc, const char *url, const char *method)
{
    (void)url;
    (void)method;
    rc->replied = true;
    struct files_put *p = files_put_new(srv, rc);
    if (!p)
        return MHD_NO;
    if (http_body_too_large(c, srv->cfg->max_upload_bytes))
        return reply_message(c, MHD_HTTP_CONTENT_TOO_LARGE,
                             "File upload failed: the upload is larger than %llu bytes",
                             (unsigned long long)srv->cfg->max_upload_bytes);
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!mp_is_multipart(ct))
        return reply_message(c, MHD_HTTP_BAD_REQUEST,
                             "File upload failed: send multipart/form-data with a part \"file\"");
    p->multipart = true;
    if (mp_init(&p->mp, ct, "file", upload_data, p) < 0)
        return reply_message(c, MHD_HTTP_BAD_REQUEST, "File upload failed: %s", p->mp.error);
    rc->replied = false;
    return MHD_YES;
}

enum MHD_Result route_legacy_upload(struct server *srv, struct MHD_Connection *c,
                                    struct req_ctx *rc)
{
    (void)srv;
    struct files_put *p = rc->state;
    struct sbxd_err err = {0};
    struct stat st;
    if (p->error.kind == SBXD_E_NONE && files_put_finish_multipart(p) == 0 && !p->began)
        upload_open(p); /* an empty file: no data came to begin it */
    if (p->error.kind != SBXD_E_NONE)
        return reply_legacy_err(c, &p->error, NULL, "File upload failed: ");
    if (files_put_commit(p, &st, &err) < 0)
        return reply_legacy_err(c, &err, NULL, "File upload failed: ");
    return reply_message(c, MHD_HTTP_OK, "File '%s' uploaded successfully.", p->mp.filename);
}
