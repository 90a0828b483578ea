/*
 * route_reset.c - POST /reset: Clean (reset.h), and Setup: {"from": "PATH"} names an archive
 * in the workspace (tar or zip) that the clean workspace then receives. The body is optional
 * ({} or none). While it runs every route but the health checks, /metrics and /v1/metadata
 * answers 503 with Retry-After (server.c); a second reset meanwhile is one of those.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sbxd/archive.h"
#include "sbxd/cleanup.h"
#include "http_internal.h"
#include "http_files_internal.h"
#include "sbxd/jsonw.h"
#include "sbxd/log.h"
#include "sbxd/reset.h"
#include "sbxd/timeutil.h"

/* How long a reset waits for the requests under way to end (they end with their commands,
 * which are killed before): past it the reset goes on without them, and says so. */
#define RESET_QUIESCE_S 10

struct quiesce {
    struct sandbox *sb;
    bool held; /* the work lock, exclusively */
};

static void quiesce(void *arg)
{
    struct quiesce *q = arg;
    q->held = sandbox_reset_quiesce(q->sb, RESET_QUIESCE_S);
    if (!q->held)
        LOG_EVENT("warn", "reset",
                  LOG_S("message", "requests under way did not end: the reset goes on"),
                  LOG_I("waited_s", RESET_QUIESCE_S));
}

static void write_clear(struct jsonw *w, const char *key, const struct fs_clear_stats *st)
{
    jw_key(w, key);
    jw_obj_begin(w);
    jw_key(w, "files");
    jw_uint(w, st->files);
    jw_key(w, "directories");
    jw_uint(w, st->directories);
    jw_key(w, "bytes");
    jw_uint(w, st->bytes);
    jw_obj_end(w);
}

/* The report's fields, into an open object. */
static void write_report(struct jsonw *w, const struct reset_report *r)
{
    jw_key(w, "processes");
    jw_uint(w, r->processes);
    jw_key(w, "contexts");
    jw_uint(w, r->contexts);
    jw_key(w, "files");
    jw_uint(w, r->ws.files + r->tmp.files);
    jw_key(w, "bytes");
    jw_uint(w, r->ws.bytes + r->tmp.bytes);
    jw_key(w, "duration_ms");
    jw_double(w, r->duration_ms, 3);
    jw_key(w, "directories");
    jw_uint(w, r->ws.directories + r->tmp.directories);
    jw_key(w, "background");
    jw_uint(w, r->background);
    jw_key(w, "strays");
    jw_uint(w, r->strays);
    write_clear(w, "workspace", &r->ws);
    write_clear(w, "tmp", &r->tmp);
    jw_key(w, "ipc");
    jw_uint(w, r->ipc.removed);
    jw_key(w, "baseline");
    jw_bool(w, r->baseline);
    if (r->baseline) {
        jw_key(w, "restored");
        jw_obj_begin(w);
        jw_key(w, "files");
        jw_uint(w, r->restored.files);
        jw_key(w, "directories");
        jw_uint(w, r->restored.directories);
        jw_key(w, "symlinks");
        jw_uint(w, r->restored.symlinks);
        jw_key(w, "bytes");
        jw_uint(w, r->restored.bytes);
        jw_obj_end(w);
    }
}

/* Setup: the archive open as fd extracted into the clean workspace (merged over the
 * baseline's tree, when there is one). 0 with st, or -1 with err. */
static int setup_from(struct server *srv, int fd, struct ar_stats *st, struct sbxd_err *err)
{
    struct fs_user u;
    files_user(srv, &u);
    struct ar_limits lim = {.max_entries = srv->cfg->max_archive_entries,
                            .max_bytes = srv->cfg->max_archive_bytes};
    struct ar_extract *x = ar_extract_begin(srv->sb->rootfd, "", false, &lim, &u, err);
    if (!x)
        return -1;
    char *buf = malloc(65536);
    bool whole = buf != NULL;
    for (;;) {
        ssize_t n = buf ? read(fd, buf, 65536) : -1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            whole = whole && n == 0;
            break;
        }
        if (ar_extract_feed(x, buf, (size_t)n) < 0)
            break; /* (ar_extract_end says why) */
    }
    free(buf);
    int rc = ar_extract_end(x, whole, st, err);
    if (rc < 0 && err->kind == SBXD_E_NONE)
        sbxd_fail(err, SBXD_E_INTERNAL, EIO, "cannot read the archive");
    return rc;
}

/* {"from": PATH}: the archive opened (as the command user) before anything is removed, so
 * that the reset cannot take it away. The fd, or -1 after answering. */
static int open_from(struct server *srv, struct MHD_Connection *c, const char *from,
                     enum MHD_Result *ret)
{
    struct sbxd_err err = {0};
    size_t lead = strspn(from, "/");
    struct fs_user u;
    files_user(srv, &u);
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->sb->rootfd, from + lead, &st, &err);
    fs_user_leave(&u);
    if (fd >= 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        sbxd_fail(&err, SBXD_E_INVALID, EISDIR, "from: '%.200s' is a directory, not an archive",
                  from);
    }
    if (fd < 0)
        *ret = reply_err(c, &err);
    return fd;
}

enum MHD_Result route_reset(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    enum MHD_Result ret;
    autoclose int from_fd = -1;
    autofree char *from = NULL;
    /* {} or no body at all, or {"from": PATH}; anything else is a typo to refuse. */
    if (rc->body_len) {
        static const char *const keys[] = {"from", NULL};
        cJSON *o = http_json_object(c, rc, keys, &ret);
        if (!o)
            return ret;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "from");
        if (f && (!cJSON_IsString(f) || !f->valuestring[0])) {
            cJSON_Delete(o);
            return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                               "from must be the path of an archive in the workspace (tar or "
                               "zip)");
        }
        from = f ? strdup(f->valuestring) : NULL;
        cJSON_Delete(o);
        if (f && !from)
            return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    struct sandbox *sb = srv->sb;
    if (sandbox_draining(sb))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE", "sbxd is shutting down");
    if (!sandbox_reset_begin(sb))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is resetting the sandbox already; retry in a moment");
    if (from && (from_fd = open_from(srv, c, from, &ret)) < 0) {
        sandbox_reset_abandon(sb);
        return ret;
    }
    sandbox_reset_gate(sb);
    struct quiesce q = {.sb = sb};
    struct reset_env env = {.svc = &sb->exec,
                            .rootfd = sb->rootfd,
                            .baseline_fd = sb->baseline_fd,
                            .harden = sb->harden,
                            .iso = sb->iso,
                            .cfg = srv->cfg,
                            .quiesce = quiesce,
                            .arg = &q};
    struct reset_report rep;
    struct sbxd_err err = {0}, serr = {0};
    struct ar_stats setup = {0};
    int rc_reset = reset_run(&env, &rep, &err);
    /* Setup, while every other request still gets 503: the first command sees the whole
     * tree. */
    int rc_setup = from_fd >= 0 && rc_reset == 0 ? setup_from(srv, from_fd, &setup, &serr) : 0;
    /* Requests whose head came before this point are refused from now on. */
    sandbox_reset_end(sb, q.held);

    struct jsonw w;
    jw_init(&w, 768);
    jw_obj_begin(&w);
    unsigned status = MHD_HTTP_OK;
    if (rc_reset < 0) {
        /* The error's shape, with what was done beside it. */
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        jw_key(&w, "code");
        jw_str(&w, "INTERNAL");
        jw_key(&w, "message");
        jw_str(&w, err.msg);
    } else if (rc_setup < 0) {
        /* The sandbox is clean; the archive was refused (nothing of it was extracted). */
        status = err_status(serr.kind);
        jw_key(&w, "code");
        jw_str(&w, err_code(serr.kind));
        jw_key(&w, "message");
        sbxd_err_wrap(&serr, "the sandbox was reset, but from was not extracted: ");
        jw_str(&w, serr.msg);
    }
    write_report(&w, &rep);
    if (from && rc_reset == 0 && rc_setup == 0) {
        jw_key(&w, "setup");
        jw_obj_begin(&w);
        jw_key(&w, "from");
        jw_str(&w, from);
        files_write_counts(&w, setup.files, setup.directories, setup.symlinks, setup.bytes);
        jw_key(&w, "hardlinks");
        jw_uint(&w, setup.hardlinks);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    return reply_jsonw(c, status, &w);
}
