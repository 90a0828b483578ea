/*
 * tools_files.c - MCP's file tools (read_file, write_file, list_files, delete_file,
 * move_file, stat_file), on the same file-system core as /files: every path resolved
 * beneath the workspace root, every operation done with the command user's rights.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "mcp_internal.h"
#include "sbxd/base64.h"
#include "sbxd/edit.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"

/* The arguments of a tool on one path with one flag: only `keys`, the flag (def when
 * absent) and the path. The path (malloc'd), or NULL after a tool error. */
static char *path_and_flag(struct mcp_tool_ctx *x, const cJSON *args, const char *const *keys,
                           const char *flag, bool def, bool *val, struct jsonw *w)
{
    if (!only_keys(args, keys, w) || !arg_bool(args, flag, def, val, w))
        return NULL;
    return arg_path(x, args, "path", true, w);
}

/* A time as RFC 3339 in UTC with milliseconds. */
static void write_time(struct jsonw *w, int64_t real_ns)
{
    char when[40];
    time_rfc3339(real_ns, when, sizeof(when));
    jw_str(w, when);
}

static void write_mode(struct jsonw *w, mode_t mode)
{
    char m[8];
    snprintf(m, sizeof(m), "%04o", (unsigned)(mode & 07777));
    jw_str(w, m);
}

/* ------------------------------------------------------------------------------------ */
/* Files                                                                                 */

/* Whether n bytes read at an offset are text: UTF-8 without NUL. A character cut by the
 * end of a read that stopped short of the file's end is left for the next (*n shrinks). */
bool mcp_is_text(const uint8_t *buf, size_t *n, bool eof)
{
    size_t len = *n;
    if (!eof)
        len = utf8_whole(buf, len);
    if (utf8_valid(buf, len) != len || memchr(buf, 0, len))
        return false;
    *n = len;
    return true;
}

const char *mcp_mime_of(const char *path, bool text)
{
    static const struct {
        const char *ext, *mime;
    } known[] = {
        {".png", "image/png"},         {".jpg", "image/jpeg"},    {".jpeg", "image/jpeg"},
        {".gif", "image/gif"},         {".svg", "image/svg+xml"}, {".pdf", "application/pdf"},
        {".json", "application/json"}, {".md", "text/markdown"},  {".html", "text/html"},
        {".csv", "text/csv"},          {".py", "text/x-python"}};
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcasecmp(dot, known[i].ext) == 0)
            return known[i].mime;
    return text ? "text/plain" : "application/octet-stream";
}

/* Read up to max bytes of path from off: the buffer (malloc'd) and what the file is; NULL
 * with msg (and *notfound). */
uint8_t *mcp_read_span(const struct mcp_host *h, const char *path, uint64_t off, size_t max,
                       size_t *n, struct stat *st, struct sbxd_err *err)
{
    struct fs_user u = h->user;
    fs_user_enter(&u);
    int fd = fs_open_read(h->rootfd, path, st, err);
    fs_user_leave(&u);
    if (fd < 0)
        return NULL;
    if (S_ISDIR(st->st_mode)) {
        close(fd);
        sbxd_fail(err, SBXD_E_INVALID, 0, "'%s' is a directory: list_files lists it", path);
        return NULL;
    }
    uint64_t left = off < (uint64_t)st->st_size ? (uint64_t)st->st_size - off : 0;
    size_t want = left < max ? (size_t)left : max;
    uint8_t *buf = malloc(want ? want : 1);
    if (!buf) {
        close(fd);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "reading '%s'", path);
            close(fd);
            free(buf);
            return NULL;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    return buf;
}

/* What a read of lines found, for its answer. */
struct lines_read {
    char *buf;
    size_t n;
    uint64_t size, first, last;
    bool eof, cut;
};

/* Lines first .. first + limit - 1 of path into lr, at most cap bytes (whole lines, unless
 * one line alone is longer). -1 with err. */
static int lines_into(const struct mcp_host *h, const char *path, uint64_t first, uint64_t limit,
                      bool numbers, size_t cap, struct lines_read *lr, struct sbxd_err *err)
{
    struct fs_user u = h->user;
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(h->rootfd, path, &st, err);
    fs_user_leave(&u);
    if (fd < 0)
        return -1;
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return sbxd_fail(err, SBXD_E_INVALID, 0, "'%s' is a directory: list_files lists it", path);
    }
    lr->size = (uint64_t)st.st_size;
    struct fs_line_range r = {(int64_t)first, (int64_t)(first + limit - 1)};
    struct fs_lines *l = fs_lines_open(fd, &r, numbers, err);
    if (!l)
        return -1;
    lr->buf = malloc(cap + 1);
    ssize_t got = 0;
    while (lr->buf && lr->n < cap &&
           (got = fs_lines_read(l, lr->buf + lr->n, cap - lr->n, err)) > 0)
        lr->n += (size_t)got;
    lr->first = fs_lines_first(l);
    lr->last = fs_lines_last(l);
    lr->eof = fs_lines_eof(l);
    /* Over the cap: cut after the last whole line, the next read starting at the next one. */
    char probe;
    lr->cut = lr->buf && got >= 0 && lr->n == cap && fs_lines_read(l, &probe, 1, err) > 0;
    fs_lines_close(l);
    if (!lr->buf)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    if (got < 0)
        return -1;
    if (lr->cut) {
        char *nl = memrchr(lr->buf, '\n', lr->n);
        if (nl) {
            size_t keep = (size_t)(nl - lr->buf) + 1;
            bool partial = keep < lr->n;
            lr->n = keep;
            if (partial && lr->last > lr->first)
                lr->last--;
        }
        lr->eof = false;
    }
    return 0;
}

/* read_file with limit: lines offset .. offset + limit - 1 (offset from 1), as text. */
static int read_lines(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    const struct mcp_host *h = x->h;
    uint64_t first, limit;
    bool numbers;
    if (cJSON_GetObjectItemCaseSensitive(args, "length"))
        return tool_error(w, "give 'length' (bytes) or 'limit' (lines), not both");
    if (!arg_uint(args, "offset", 1, INT64_MAX >> 2, &first, w) ||
        !arg_uint(args, "limit", 2000, INT64_MAX >> 2, &limit, w) ||
        !arg_bool(args, "numbers", false, &numbers, w))
        return 0;
    if (first == 0 || limit == 0)
        return tool_error(w, "with 'limit', 'offset' is the first line (from 1) and 'limit' the "
                             "number of lines (at least 1)");
    char *path = arg_path(x, args, "path", true, w);
    if (!path)
        return 0;
    struct sbxd_err err = {0};
    struct lines_read lr = {0};
    if (lines_into(h, path, first, limit, numbers, (size_t)h->cfg->max_output_bytes, &lr, &err) <
            0 ||
        utf8_valid((const uint8_t *)lr.buf, lr.n) != lr.n) {
        if (err.kind == SBXD_E_NONE)
            snprintf(err.msg, sizeof(err.msg), "it is not UTF-8 text: read it without limit");
        tool_error(w, "cannot read lines of '%s': %s", path, err.msg);
        free(lr.buf);
        free(path);
        return 0;
    }
    result_begin(w);
    text_block(w, lr.buf, lr.n);
    if (lr.cut) {
        char more[200];
        int m = snprintf(more, sizeof(more),
                         "[cut at %llu bytes: call read_file with offset %llu to read on]",
                         (unsigned long long)lr.n, (unsigned long long)lr.last + 1);
        text_block(w, more, (size_t)m);
    }
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "size");
    jw_uint(w, lr.size);
    jw_key(w, "offset");
    jw_uint(w, lr.first);
    jw_key(w, "length");
    jw_uint(w, lr.n);
    jw_key(w, "encoding");
    jw_str(w, "utf8");
    jw_key(w, "eof");
    jw_bool(w, lr.eof);
    jw_key(w, "first_line");
    jw_uint(w, lr.first);
    jw_key(w, "last_line");
    jw_uint(w, lr.last);
    result_end(w, false);
    free(lr.buf);
    free(path);
    return 0;
}

int tool_read_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "offset", "length", "limit", "numbers", NULL};
    const struct mcp_host *h = x->h;
    uint64_t off, len, cap = h->cfg->max_output_bytes;
    if (!only_keys(args, keys, w))
        return 0;
    if (cJSON_GetObjectItemCaseSensitive(args, "limit"))
        return read_lines(x, args, w);
    if (cJSON_GetObjectItemCaseSensitive(args, "numbers"))
        return tool_error(w, "'numbers' goes with 'limit': lines are read by offset and limit");
    if (!arg_uint(args, "offset", 0, UINT64_MAX >> 12, &off, w) ||
        !arg_uint(args, "length", cap, UINT64_MAX >> 12, &len, w))
        return 0;
    char *path = arg_path(x, args, "path", true, w);
    if (!path)
        return 0;
    if (len > cap)
        len = cap;
    struct sbxd_err err = {0};
    struct stat st;
    size_t n = 0;
    uint8_t *buf = mcp_read_span(h, path, off, (size_t)len, &n, &st, &err);
    if (!buf) {
        tool_error(w, "cannot read '%s': %s", path, err.msg);
        free(path);
        return 0;
    }
    uint64_t size = (uint64_t)st.st_size;
    bool eof = off + n >= size;
    bool text = mcp_is_text(buf, &n, eof);
    eof = off + n >= size;
    result_begin(w);
    if (text) {
        text_block(w, buf, n);
    } else {
        jw_obj_begin(w);
        jw_key(w, "type");
        jw_str(w, "resource");
        jw_key(w, "resource");
        jw_obj_begin(w);
        jw_key(w, "uri");
        mcp_write_uri(h, w, path);
        jw_key(w, "mimeType");
        jw_str(w, mcp_mime_of(path, false));
        jw_key(w, "blob");
        jw_base64(w, buf, n);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    if (!eof) {
        char more[200];
        int m = snprintf(more, sizeof(more),
                         "[%llu more bytes: call read_file with offset %llu to read on]",
                         (unsigned long long)(size - off - n), (unsigned long long)(off + n));
        text_block(w, more, (size_t)m);
    }
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "size");
    jw_uint(w, size);
    jw_key(w, "offset");
    jw_uint(w, off);
    jw_key(w, "length");
    jw_uint(w, n);
    jw_key(w, "encoding");
    jw_str(w, text ? "utf8" : "base64");
    jw_key(w, "eof");
    jw_bool(w, eof);
    result_end(w, false);
    free(buf);
    free(path);
    return 0;
}

int tool_write_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "content", "encoding", "mode", NULL};
    const struct mcp_host *h = x->h;
    if (!only_keys(args, keys, w))
        return 0;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(args, "content");
    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(args, "encoding");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(args, "mode");
    if (!cJSON_IsString(content))
        return tool_error(w, "'content' is required: the file's content, as a string");
    bool b64 = false;
    if (enc && (!cJSON_IsString(enc) || (strcmp(enc->valuestring, "utf8") != 0 &&
                                         !(b64 = strcmp(enc->valuestring, "base64") == 0))))
        return tool_error(w, "'encoding' must be \"utf8\" or \"base64\"");
    struct fs_user u = h->user;
    mode_t m = u.file_mode;
    if (mode) {
        char *end = NULL;
        long v = cJSON_IsString(mode) ? strtol(mode->valuestring, &end, 8) : -1;
        if (!cJSON_IsString(mode) || !*mode->valuestring || *end || v < 0 || v > 0777)
            return tool_error(w, "'mode' must be permission bits in octal, as a string: \"0644\"");
        m = (mode_t)v;
    }
    char *path = arg_path(x, args, "path", true, w);
    if (!path)
        return 0;
    /* A NUL in utf8 content comes only as \u0000, which cJSON's string ends at. */
    size_t n = strlen(content->valuestring);
    const void *data = content->valuestring;
    uint8_t *raw = NULL;
    if (b64) {
        raw = malloc(n / 4 * 3 + 3);
        long r = raw ? base64_decode(content->valuestring, n, raw) : -1;
        if (r < 0) {
            free(raw);
            free(path);
            return tool_error(w, "'content' is not valid base64");
        }
        data = raw;
        n = (size_t)r;
    }
    struct fs_upload up;
    struct sbxd_err err = {0};
    struct stat st;
    fs_user_enter(&u);
    int r = fs_upload_begin(&up, h->rootfd, path, &u, &err);
    if (r == 0 && (r = fs_upload_write(&up, data, n, &err)) == 0)
        r = fs_upload_commit(&up, m, &st, &err);
    if (r < 0)
        fs_upload_abort(&up, &u);
    fs_user_leave(&u);
    free(raw);
    if (r < 0) {
        tool_error(w, "cannot write '%s': %s", path, err.msg);
        free(path);
        return 0;
    }
    char msg[300];
    int mn = snprintf(msg, sizeof(msg), "wrote %zu bytes to %s", n, path);
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "size");
    jw_uint(w, (uint64_t)st.st_size);
    jw_key(w, "created");
    jw_bool(w, !up.existed);
    result_end(w, false);
    free(path);
    return 0;
}

struct lister {
    const struct mcp_host *h;
    int rootfd;
    struct jsonw *w;     /* the entries, as JSON objects */
    struct jsonw *lines; /* the same, a line each ("PATH[/]  SIZE"), for the text block */
    unsigned n, max;
    bool truncated;
    char first_error[300];
};

/* Entries of dfd (taken), as rel/NAME, depth levels down. */
static void list_dir(struct lister *L, int dfd, const char *rel, unsigned depth)
{
    struct sbxd_err err = {0};
    struct fs_lister *l = fs_list_open(dfd, FS_LIST_SORTED, &err);
    if (!l) {
        if (!L->first_error[0])
            snprintf(L->first_error, sizeof(L->first_error), "%s: %.255s", rel, err.msg);
        return;
    }
    struct fs_entry e;
    int r;
    while ((r = fs_list_next(l, &e, &err)) == 1) {
        if (L->n >= L->max) {
            L->truncated = true;
            break;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", e.name);
        /* As /files lists: a link inside the workspace as what it leads to, marked; one that
         * cannot be followed as itself. Never walked into below (only real directories are):
         * a link cannot make the listing loop or list a tree twice. */
        bool link = fs_list_follow(&e, L->rootfd, fs_list_dirfd(l), rel) != 0;
        struct jsonw *w = L->w;
        jw_obj_begin(w);
        jw_key(w, "path");
        jw_str(w, path);
        jw_key(w, "type");
        jw_str(w, e.type);
        jw_key(w, "size");
        jw_uint(w, e.size);
        jw_key(w, "mode");
        write_mode(w, e.mode);
        if (link) {
            jw_key(w, "symlink");
            jw_bool(w, true);
        }
        jw_key(w, "modified_at");
        if (e.mtime_ns)
            write_time(w, e.mtime_ns);
        else
            jw_null(w);
        jw_obj_end(w);
        char size[24];
        int sn = snprintf(size, sizeof(size), "  %llu\n", (unsigned long long)e.size);
        jw_raw(L->lines, path, strlen(path));
        if (strcmp(e.type, "directory") == 0)
            jw_raw(L->lines, "/", 1);
        jw_raw(L->lines, size, (size_t)sn);
        L->n++;
        if (depth > 1 && !link && strcmp(e.type, "directory") == 0) {
            int sub =
                openat(fs_list_dirfd(l), e.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                list_dir(L, sub, path, depth - 1);
        }
    }
    if (r < 0 && !L->first_error[0])
        snprintf(L->first_error, sizeof(L->first_error), "%s: %.255s", rel, err.msg);
    fs_list_close(l);
}

int tool_list_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "depth", NULL};
    const struct mcp_host *h = x->h;
    uint64_t depth;
    if (!only_keys(args, keys, w) || !arg_uint(args, "depth", 1, MCP_LIST_DEPTH_MAX, &depth, w))
        return 0;
    if (depth < 1)
        return tool_error(w, "'depth' must be from 1 to %d", MCP_LIST_DEPTH_MAX);
    char *path = arg_path(x, args, "path", false, w);
    if (!path)
        return 0;
    struct fs_user u = h->user;
    struct sbxd_err err = {0};
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(h->rootfd, path, &st, &err);
    if (fd >= 0 && !S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        snprintf(err.msg, sizeof(err.msg), "'%s' is a file, not a directory: read_file reads it",
                 path);
    }
    if (fd < 0) {
        fs_user_leave(&u);
        tool_error(w, "cannot list '%s': %s", path, err.msg);
        free(path);
        return 0;
    }
    /* Entries go into their own writer first: the summary comes before them. */
    struct jsonw ents, lines;
    jw_init(&ents, 4096);
    jw_init(&lines, 4096);
    jw_arr_begin(&ents);
    struct lister L = {
        .h = h, .rootfd = h->rootfd, .w = &ents, .lines = &lines, .max = MCP_LIST_MAX};
    list_dir(&L, fd, path, (unsigned)depth);
    fs_user_leave(&u);
    jw_arr_end(&ents);
    char msg[600];
    int mn = snprintf(msg, sizeof(msg), "%u entries in %s%s%s%s", L.n, *path ? path : ".",
                      L.truncated ? " (truncated at 1000)" : "",
                      L.first_error[0] ? "; could not read " : "", L.first_error);
    result_begin(w);
    text_block(w, msg, (size_t)(mn < (int)sizeof(msg) ? mn : (int)sizeof(msg) - 1));
    /* The listing itself as text too, one entry per line, for clients that show only text. */
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "text");
    jw_key(w, "text");
    jw_str_utf8(w, lines.buf ? lines.buf : "", lines.len, false);
    jw_free(&lines);
    jw_obj_end(w);
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "entries");
    jw_json(w, ents.buf, ents.len);
    jw_key(w, "truncated");
    jw_bool(w, L.truncated);
    result_end(w, false);
    jw_free(&ents);
    free(path);
    return 0;
}

int tool_delete_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "recursive", NULL};
    bool recursive;
    char *path = path_and_flag(x, args, keys, "recursive", false, &recursive, w);
    if (!path)
        return 0;
    struct fs_user u = x->h->user;
    struct sbxd_err err = {0};
    fs_user_enter(&u);
    int r = fs_delete(x->h->rootfd, path, recursive, &err);
    fs_user_leave(&u);
    if (r < 0) {
        tool_error(w, "cannot delete '%s': %s", path, err.msg);
    } else {
        char msg[300];
        int mn = snprintf(msg, sizeof(msg), "deleted %s", path);
        result_begin(w);
        text_block(w, msg, (size_t)mn);
        result_structured(w);
        jw_key(w, "path");
        jw_str(w, path);
        jw_key(w, "deleted");
        jw_bool(w, true);
        result_end(w, false);
    }
    free(path);
    return 0;
}

int tool_move_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"from", "to", "overwrite", NULL};
    bool overwrite;
    if (!only_keys(args, keys, w) || !arg_bool(args, "overwrite", false, &overwrite, w))
        return 0;
    char *from = arg_path(x, args, "from", true, w);
    char *to = from ? arg_path(x, args, "to", true, w) : NULL;
    if (!to) {
        free(from);
        return 0;
    }
    struct fs_user u = x->h->user;
    struct sbxd_err err = {0};
    fs_user_enter(&u);
    int r = fs_move(x->h->rootfd, from, to, overwrite, &u, &err);
    fs_user_leave(&u);
    if (r < 0) {
        tool_error(w, "cannot move '%s' to '%s': %s%s", from, to, err.msg,
                   err.kind == SBXD_E_CONFLICT ? " (overwrite: true replaces it)" : "");
    } else {
        char msg[300];
        int mn = snprintf(msg, sizeof(msg), "moved %s to %s", from, to);
        result_begin(w);
        text_block(w, msg, (size_t)mn);
        result_structured(w);
        jw_key(w, "from");
        jw_str(w, from);
        jw_key(w, "to");
        jw_str(w, to);
        result_end(w, false);
    }
    free(from);
    free(to);
    return 0;
}

int tool_stat_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "follow", NULL};
    bool follow;
    char *path = path_and_flag(x, args, keys, "follow", true, &follow, w);
    if (!path)
        return 0;
    struct fs_user u = x->h->user;
    struct sbxd_err err = {0};
    struct fs_stat_info *in = malloc(sizeof(*in));
    if (!in) {
        free(path);
        return tool_error(w, "out of memory");
    }
    fs_user_enter(&u);
    int r = fs_stat(x->h->rootfd, path, follow, in, &err);
    fs_user_leave(&u);
    if (r < 0) {
        tool_error(w, "cannot stat '%s': %s", path, err.msg);
    } else {
        char msg[600];
        int mn =
            snprintf(msg, sizeof(msg), "%s: %s, %lld bytes, mode %04o%s%s", path,
                     fs_type_name(in->st.st_mode), (long long)in->st.st_size,
                     (unsigned)(in->st.st_mode & 07777), in->target[0] ? " -> " : "", in->target);
        result_begin(w);
        text_block(w, msg, (size_t)(mn < (int)sizeof(msg) ? mn : (int)sizeof(msg) - 1));
        result_structured(w);
        fs_write_stat(w, path, in);
        result_end(w, false);
    }
    free(in);
    free(path);
    return 0;
}

/* The changed lines, "2-3, 7" (as much as fits in out). */
static void lines_text(const struct fs_edit_result *res, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < res->nspans && n + 48 < len; i++) {
        const struct fs_line_span *s = &res->spans[i];
        n += (size_t)snprintf(out + n, len - n, s->first == s->last ? "%s%llu" : "%s%llu-%llu",
                              i ? ", " : "", (unsigned long long)s->first,
                              (unsigned long long)s->last);
    }
}

static void edit_answer(struct jsonw *w, const char *path, const struct fs_edit_result *res)
{
    char etag[80], lines[400], msg[600];
    fs_etag(&res->st, etag, sizeof(etag));
    lines_text(res, lines, sizeof(lines));
    int mn = snprintf(msg, sizeof(msg), "replaced %llu occurrence%s in %s; lines changed: %s%s",
                      (unsigned long long)res->replaced, res->replaced == 1 ? "" : "s", path, lines,
                      res->spans_cut ? " (and more)" : "");
    result_begin(w);
    text_block(w, msg, (size_t)(mn < (int)sizeof(msg) ? mn : (int)sizeof(msg) - 1));
    result_structured(w);
    fs_write_edit(w, path, res, etag);
    result_end(w, false);
}

int tool_edit_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const extra[] = {"path", "if_match", NULL};
    const struct mcp_host *h = x->h;
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(args, "if_match");
    if (im && !cJSON_IsString(im))
        return tool_error(w, "'if_match' must be a string: an ETag read_file or stat_file gave");
    struct sbxd_err err = {0};
    struct fs_edit *edits = NULL;
    size_t n = 0;
    if (fs_edit_parse(args, extra, &edits, &n, &err) < 0)
        return tool_error(w, "%s", err.msg);
    char *path = arg_path(x, args, "path", true, w);
    if (!path) {
        free(edits);
        return 0;
    }
    struct fs_user u = h->user;
    struct fs_edit_result res;
    fs_user_enter(&u);
    int r = fs_edit_file(h->rootfd, path, edits, n, im ? im->valuestring : NULL, &u, &res, &err);
    fs_user_leave(&u);
    free(edits);
    if (r < 0)
        tool_error(w, "cannot edit '%s': %s", path, err.msg);
    else
        edit_answer(w, path, &res);
    if (r == 0)
        fs_edit_result_free(&res);
    free(path);
    return 0;
}
