/*
 * A request body streamed into a file, for every face that writes one (PUT /files and
 * /v1/files, POST /upload): the body goes to a temporary file next to the target as it
 * arrives (raw, or the part "file" of a multipart body), and is renamed over the target only
 * once whole. The filesystem side is fs/files.c.
 */
#include <errno.h>
#include <stdlib.h>

#include "http_files_internal.h"
#include "http_internal.h"
#include "sbxd/metrics.h"

static void put_free(void *state, bool completed)
{
    struct files_put *p = state;
    if (!p)
        return;
    files_archive_abandon(p);
    if (p->began) {
        /* Not committed (failed, or the client went away mid-body): no temporary file may
         * stay, and the target keeps its old content. */
        struct fs_user u;
        files_user(p->srv, &u);
        fs_upload_abort(&p->up, &u);
    }
    (void)completed;
    free(p->path);
    free(p);
}

struct files_put *files_put_new(struct server *srv, struct req_ctx *rc)
{
    struct files_put *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->srv = srv;
    p->up.fd = p->up.dirfd = -1;
    struct fs_user u;
    files_user(srv, &u);
    p->mode = u.file_mode;
    rc->state = p;
    rc->state_free = put_free;
    return p;
}

int files_put_open(struct files_put *p, struct sbxd_err *err)
{
    struct fs_user u;
    files_user(p->srv, &u);
    fs_user_enter(&u);
    int r = fs_upload_begin(&p->up, p->srv->sb->rootfd, p->path, &u, err);
    fs_user_leave(&u);
    if (r < 0)
        return -1;
    p->began = true;
    return 0;
}

int files_put_data(void *arg, const char *data, size_t n)
{
    struct files_put *p = arg;
    return fs_upload_write(&p->up, data, n, &p->error);
}

int files_put_finish_multipart(struct files_put *p)
{
    if (mp_finish(&p->mp) < 0)
        return sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL, "%s", p->mp.error);
    if (!p->mp.found)
        return sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL,
                         "the multipart body has no part named \"file\"");
    return 0;
}

int files_put_commit(struct files_put *p, struct stat *st, struct sbxd_err *err)
{
    struct fs_user u;
    files_user(p->srv, &u);
    fs_user_enter(&u);
    int r = fs_upload_commit(&p->up, p->mode, st, err);
    fs_user_leave(&u);
    if (r < 0)
        return -1;
    p->began = false;
    metrics_file(true, (uint64_t)st->st_size);
    return 0;
}

enum MHD_Result route_files_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                 const char *data, size_t n)
{
    (void)c;
    struct files_put *p = rc->state;
    if (!p)
        return files_edit_body(srv, c, rc, data, n); /* not an upload: an edit's, or dropped */
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
    if (p->ax) {
        files_archive_feed(p, data, n);
        return MHD_YES;
    }
    if (p->multipart) {
        if (mp_feed(&p->mp, data, n) < 0 && p->error.kind == SBXD_E_NONE)
            sbxd_fail(&p->error, SBXD_E_INVALID, EINVAL, "%s", p->mp.error);
    } else {
        files_put_data(p, data, n);
    }
    return MHD_YES;
}
