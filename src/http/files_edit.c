/*
 * files_edit.c - GET /files/{path}?lines=START:END (a range of a text file's lines, streamed
 * from its fd) and POST /files/{path}?edit (exact replacements, all or none, written
 * atomically): the HTTP side of fs/lines.c and fs/edit.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "sbxd/edit.h"
#include "sbxd/urldecode.h"
#include "http_files_internal.h"

#define LINES_CHUNK (64 * 1024)

static ssize_t lines_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sbxd_err err = {0};
    ssize_t n = fs_lines_read(cls, buf, max, &err);
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the status is sent: only a cut is left */
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    http_count_out((size_t)n);
    return n;
}

static void lines_free(void *cls)
{
    fs_lines_close(cls);
}

enum MHD_Result files_lines_get(struct server *srv, struct MHD_Connection *c, const char *path,
                                const char *spec)
{
    struct sbxd_err err = {0};
    struct fs_line_range r;
    bool numbers = false;
    autofree char *s = files_url_decode(spec, &err);
    if (!s || fs_line_range_parse(s, &r, &err) < 0)
        return reply_err(c, &err);
    if (!files_query_bool(c, "numbers", &numbers))
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "numbers must be true or false");
    struct fs_user u;
    files_user(srv, &u);
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->sb->rootfd, path, &st, &err);
    fs_user_leave(&u);
    if (fd < 0)
        return reply_err(c, &err);
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "'%.200s' is a directory: lines= reads a file", path);
    }
    struct fs_lines *l = fs_lines_open(fd, &r, numbers, &err);
    if (!l)
        return reply_err(c, &err);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, LINES_CHUNK, lines_read, l, lines_free);
    if (!resp) {
        fs_lines_close(l);
        return MHD_NO;
    }
    /* The version the lines come from: the same ETag as the whole file's GET, so that an
     * edit can be made on the condition that the file is still what was read. */
    char etag[80], first[24];
    fs_etag(&st, etag, sizeof(etag));
    snprintf(first, sizeof(first), "%llu", (unsigned long long)fs_lines_first(l));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, "X-First-Line", first);
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, resp, 0);
    MHD_destroy_response(resp);
    return ret;
}

bool files_query_has(struct MHD_Connection *c, const char *key)
{
    const char *v;
    size_t n;
    return MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v, &n) ==
           MHD_YES;
}

/* Whether the request is a POST ?edit. */
static bool is_edit(struct MHD_Connection *c, const struct req_ctx *rc)
{
    return strcmp(rc->method, "POST") == 0 && files_query_has(c, "edit");
}

enum MHD_Result files_edit_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (!is_edit(c, rc))
        return MHD_YES;
    enum MHD_Result ret;
    rc->replied = true;
    if (!http_json_type(c, &ret))
        return ret;
    if (http_body_too_large(c, srv->cfg->max_body_bytes))
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "PAYLOAD_TOO_LARGE",
                           "request body is larger than %llu bytes (--max-body-bytes)",
                           (unsigned long long)srv->cfg->max_body_bytes);
    rc->replied = false;
    return MHD_YES;
}

enum MHD_Result files_edit_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                const char *data, size_t n)
{
    if (!is_edit(c, rc))
        return MHD_YES; /* a body nobody reads */
    return req_body_append(srv, rc, data, n);
}

enum MHD_Result files_edit_post(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                const char *path)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "edit");
    if (v && *v && strcmp(v, "true") != 0)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "edit takes no value (?edit, or ?edit=true)");
    const char *im = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Match");
    if (im && strlen(im) >= 512)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "If-Match is too long");
    struct sbxd_err err = {0};
    cJSON *req = rc->body_len ? cJSON_ParseWithLength(rc->body, rc->body_len) : NULL;
    if (!req)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "the body must be JSON: {\"old\": ..., \"new\": ..., "
                           "\"replace_all\": false} or {\"edits\": [...]}");
    struct fs_edit *edits = NULL;
    size_t n = 0;
    struct fs_edit_result res;
    int rcode = fs_edit_parse(req, NULL, &edits, &n, &err);
    if (rcode == 0) {
        struct fs_user u;
        files_user(srv, &u);
        fs_user_enter(&u);
        rcode = fs_edit_file(srv->sb->rootfd, path, edits, n, im, &u, &res, &err);
        fs_user_leave(&u);
    }
    free(edits);
    cJSON_Delete(req);
    if (rcode < 0)
        return reply_err(c, &err);
    char etag[80];
    fs_etag(&res.st, etag, sizeof(etag));
    struct jsonw w;
    jw_init(&w, 256 + res.nspans * 32);
    jw_obj_begin(&w);
    fs_write_edit(&w, path, &res, etag);
    jw_obj_end(&w);
    fs_edit_result_free(&res);
    return reply_jsonw_header(c, MHD_HTTP_OK, &w, MHD_HTTP_HEADER_ETAG, etag);
}
