/*
 * Whole trees over HTTP (archive.h does the packing and the extraction): GET ?archive=tar|zip
 * streams a directory as an archive while it is packed, compressed as Accept-Encoding offers
 * (zstd, else gzip; tar only); PUT ?archive=… hands the body to an extraction as it arrives,
 * and answers once the tree is in place, or with why nothing was.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbxd/archive.h"
#include "http_files_internal.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"

int files_archive_format(const char *v, enum ar_format *fmt)
{
    if (strcmp(v, "tar") == 0)
        *fmt = AR_TAR;
    else if (strcmp(v, "zip") == 0)
        *fmt = AR_ZIP;
    else
        return -1;
    return 0;
}

/* Whether Accept-Encoding offers coding (a token, q not 0). */
static bool offers(const char *ae, const char *coding)
{
    size_t cl = strlen(coding);
    for (const char *s = ae; s && *s;) {
        s += strspn(s, " \t,");
        const char *end = s + strcspn(s, ",");
        size_t tl = strcspn(s, " \t;,");
        if (tl == cl && strncasecmp(s, coding, cl) == 0) {
            const char *q = memchr(s, ';', (size_t)(end - s));
            if (!q)
                return true;
            q += 1 + strspn(q + 1, " \t");
            if (strncasecmp(q, "q=", 2) != 0)
                return true;
            return strtod(q + 2, NULL) > 0;
        }
        s = end;
    }
    return false;
}

struct pack_stream {
    struct ar_pack *p;
    char *path;
    double t0;
    bool failed;
};

static ssize_t pack_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct pack_stream *s = cls;
    struct sbxd_err err = {0};
    ssize_t n = ar_pack_read(s->p, out, max, &err);
    if (n > 0)
        return n;
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    s->failed = true;
    /* The answer has begun: it can only end short, which the client sees (a chunked body
     * without its end), never as a whole archive. */
    LOG_EVENT("warn", "archive_cut", LOG_S("path", s->path), LOG_S("error", err.msg));
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void pack_free(void *cls)
{
    struct pack_stream *s = cls;
    const struct ar_stats *st = ar_pack_stats(s->p);
    if (!s->failed)
        LOG_EVENT("info", "archive_sent", LOG_S("path", s->path), LOG_I("files", st->files),
                  LOG_I("directories", st->directories), LOG_I("symlinks", st->symlinks),
                  LOG_I("bytes", st->bytes), LOG_I("skipped", st->skipped),
                  LOG_D("duration_ms", ((double)time_mono_ns() - s->t0) / 1e6));
    ar_pack_close(s->p);
    free(s->path);
    free(s);
}

enum MHD_Result files_archive_get(struct server *srv, struct MHD_Connection *c, const char *path,
                                  enum ar_format fmt)
{
    const char *ae = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept-Encoding");
    enum ar_filter filter = AR_NONE;
    if (fmt == AR_TAR && ae)
        filter = offers(ae, "zstd") ? AR_ZSTD : offers(ae, "gzip") ? AR_GZIP : AR_NONE;
    struct fs_user u;
    files_user(srv, &u);
    struct sbxd_err err = {0};
    struct pack_stream *s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "INTERNAL", "out of memory");
    }
    s->t0 = (double)time_mono_ns();
    s->p =
        ar_pack_open(srv->sb->rootfd, path, fmt, filter, srv->cfg->max_archive_entries, &u, &err);
    if (!s->p) {
        free(s->path);
        free(s);
        return reply_err(c, &err);
    }
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, pack_read, s, pack_free);
    if (!r) {
        pack_free(s);
        return MHD_NO;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char disp[320];
    snprintf(disp, sizeof(disp), "attachment; filename=\"%s.%s\"",
             *base && !strpbrk(base, "\"\\") ? base : "workspace", fmt == AR_ZIP ? "zip" : "tar");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            fmt == AR_ZIP ? "application/zip" : "application/x-tar");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
    if (fmt == AR_TAR)
        MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
    if (filter != AR_NONE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING,
                                filter == AR_ZSTD ? "zstd" : "gzip");
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
}

int files_archive_begin(struct files_put *p, bool replace, struct sbxd_err *err)
{
    struct fs_user u;
    files_user(p->srv, &u);
    struct fs_stat_info *in = malloc(sizeof(*in));
    if (!in)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct sbxd_err serr = {0};
    fs_user_enter(&u);
    p->archive_existed =
        *p->path == '\0' || fs_stat(p->srv->sb->rootfd, p->path, false, in, &serr) == 0;
    fs_user_leave(&u);
    free(in);
    struct ar_limits lim = {.max_entries = p->srv->cfg->max_archive_entries,
                            .max_bytes = p->srv->cfg->max_archive_bytes};
    p->t0 = (double)time_mono_ns();
    p->ax = ar_extract_begin(p->srv->sb->rootfd, p->path, replace, &lim, &u, err);
    return p->ax ? 0 : -1;
}

void files_archive_feed(struct files_put *p, const char *data, size_t n)
{
    if (p->ax && !p->ax_failed && ar_extract_feed(p->ax, data, n) < 0)
        p->ax_failed = true; /* (ar_extract_end says why; the rest is read and dropped) */
}

void files_archive_abandon(struct files_put *p)
{
    if (p->ax)
        ar_extract_end(p->ax, false, NULL, NULL);
    p->ax = NULL;
}

enum MHD_Result files_archive_end(struct MHD_Connection *c, struct files_put *p)
{
    struct ar_stats st;
    struct sbxd_err err = {0};
    if (p->error.kind != SBXD_E_NONE) {
        files_archive_abandon(p);
        return reply_err(c, &p->error);
    }
    int rc = ar_extract_end(p->ax, true, &st, &err);
    p->ax = NULL;
    if (rc < 0)
        return reply_err(c, &err);
    struct jsonw w;
    jw_init(&w, 320);
    jw_obj_begin(&w);
    jw_key(&w, "path");
    jw_str(&w, p->path);
    jw_key(&w, "type");
    jw_str(&w, "directory");
    files_write_counts(&w, st.files, st.directories, st.symlinks, st.bytes);
    jw_key(&w, "hardlinks");
    jw_uint(&w, st.hardlinks);
    jw_key(&w, "duration_ms");
    jw_double(&w, ((double)time_mono_ns() - p->t0) / 1e6, 3);
    jw_obj_end(&w);
    return reply_jsonw(c, p->archive_existed ? MHD_HTTP_OK : MHD_HTTP_CREATED, &w);
}
