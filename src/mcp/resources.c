/*
 * resources.c - MCP's resources: the workspace's files as file:// URIs, listed a page at a
 * time (resources/list) and read whole (resources/read), with the command user's rights.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp_internal.h"
#include "sbxd/base64.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/urldecode.h"

/* Files resources/list gives a page, and entries it looks at for one at most. */
#define MCP_RESOURCES_PAGE 100
#define MCP_RESOURCES_SCAN 20000

void mcp_write_uri(const struct mcp_host *h, struct jsonw *w, const char *path)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t cap = 8 + 3 * (strlen(h->workspace) + strlen(path)) + 2;
    char *u = malloc(cap);
    if (!u) {
        jw_null(w);
        return;
    }
    size_t n = 0;
    memcpy(u, "file://", 7);
    n = 7;
    const char *parts[2] = {h->workspace, path};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && *path)
            u[n++] = '/';
        for (const unsigned char *p = (const unsigned char *)parts[k]; *p; p++) {
            unsigned char ch = *p;
            bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                         (ch >= '0' && ch <= '9') || strchr("-._~/!$&'()*+,;=:@", ch);
            if (plain) {
                u[n++] = (char)ch;
            } else {
                u[n++] = '%';
                u[n++] = hex[ch >> 4];
                u[n++] = hex[ch & 15];
            }
        }
    }
    u[n] = '\0';
    jw_str(w, u);
    free(u);
}

int mcp_err_code(const struct sbxd_err *err, char *msg, size_t msglen)
{
    snprintf(msg, msglen, "%s", err->msg);
    return err->kind == SBXD_E_NOT_FOUND ? JRPC_RESOURCE_NOT_FOUND : JRPC_INVALID_PARAMS;
}

char *mcp_uri_path(const struct mcp_host *h, const char *uri, char *msg, size_t msglen)
{
    const char *p;
    if (strncmp(uri, "file:///", 8) == 0)
        p = uri + 7;
    else if (strncmp(uri, "file://localhost/", 17) == 0)
        p = uri + 16;
    else {
        snprintf(msg, msglen, "'%.200s' is not a file:// URI of the workspace (%s)", uri,
                 h->workspace);
        return NULL;
    }
    char *d = strndup(p, strcspn(p, "?#"));
    if (!d) {
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    struct sbxd_err err = {0};
    if (http_url_decode(d, &err) < 0) {
        snprintf(msg, msglen, "'%.200s': %s", uri, err.msg);
        free(d);
        return NULL;
    }
    char *path = mcp_norm_path(h, d, msg, msglen);
    free(d);
    return path;
}

/*
 * resources/list walks the tree depth first, each directory in name order where it is listed
 * sorted. A page ends after MCP_RESOURCES_PAGE files; its cursor is the last path it gave
 * (base64, as the bytes of a name may not be UTF-8), and the next page walks down that path
 * only, passing over what came before it, instead of walking every earlier page again.
 */
struct res_walk {
    const struct mcp_host *h;
    struct jsonw *w;
    uint64_t seen;
    unsigned sent;
    bool more;
    char last[4096]; /* the last path given */
};

static void res_walk_dir(struct res_walk *R, int dfd, const char *rel, unsigned depth,
                         const char *after);

/* An entry of the walk at path, to be given (a file) or walked into (a directory). */
static void res_walk_entry(struct res_walk *R, const struct fs_lister *l, const struct fs_entry *e,
                           const char *path, unsigned depth, const char *after)
{
    if (strcmp(e->type, "file") == 0) {
        if (R->sent >= MCP_RESOURCES_PAGE) {
            R->more = true;
            return;
        }
        struct jsonw *w = R->w;
        jw_obj_begin(w);
        jw_key(w, "uri");
        mcp_write_uri(R->h, w, path);
        jw_key(w, "name");
        jw_str(w, path);
        jw_key(w, "mimeType");
        jw_str(w, mcp_mime_of(path, true));
        jw_key(w, "size");
        jw_uint(w, e->size);
        jw_obj_end(w);
        R->sent++;
        snprintf(R->last, sizeof(R->last), "%s", path);
    } else if (strcmp(e->type, "directory") == 0 && depth > 1) {
        int sub =
            openat(fs_list_dirfd(l), e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
            res_walk_dir(R, sub, path, depth - 1, after);
    }
}

/* The files beneath dfd (taken) as rel/..., depth levels down. after: the rest of the
 * cursor's path below this directory (NULL: none), everything up to it passed over. */
static void res_walk_dir(struct res_walk *R, int dfd, const char *rel, unsigned depth,
                         const char *after)
{
    struct sbxd_err err = {0};
    struct fs_lister *l = fs_list_open(dfd, FS_LIST_SORTED, &err);
    if (!l)
        return;
    char comp[256] = "";
    const char *below = NULL; /* the cursor's path under comp, when comp is a directory */
    if (after) {
        size_t n = strcspn(after, "/");
        snprintf(comp, sizeof(comp), "%.*s", (int)(n < sizeof(comp) ? n : sizeof(comp) - 1), after);
        below = after[n] == '/' ? after + n + 1 : NULL;
    }
    bool sorted = fs_list_sorted(l);
    struct fs_entry e;
    while (!R->more && R->seen < MCP_RESOURCES_SCAN && fs_list_next(l, &e, &err) == 1) {
        R->seen++;
        char path[4096];
        snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", e.name);
        if (!after) {
            res_walk_entry(R, l, &e, path, depth, NULL);
            continue;
        }
        int cmp = strcmp(e.name, comp);
        if (cmp != 0 && !sorted)
            continue; /* before the cursor in the directory's own order */
        if (cmp < 0)
            continue;
        after = NULL; /* past the cursor from here on */
        bool dir = strcmp(e.type, "directory") == 0;
        if (cmp == 0 && below && dir)
            res_walk_entry(R, l, &e, path, depth, below); /* down the cursor's path */
        else if (cmp > 0 || dir || below)
            res_walk_entry(R, l, &e, path, depth, NULL);
        /* (else the cursor's own file, given on the page before) */
    }
    if (after && !sorted && !R->more && R->seen < MCP_RESOURCES_SCAN) {
        /* The cursor's entry left a directory listed in its own order: what came after it
         * cannot be told from what came before, so it is listed again from its start (a file
         * given twice rather than one never given). */
        int again = openat(fs_list_dirfd(l), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        fs_list_close(l);
        if (again >= 0)
            res_walk_dir(R, again, rel, depth, NULL);
        return;
    }
    fs_list_close(l);
}

int mcp_resources_list(const struct mcp_host *h, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen)
{
    const cJSON *cur = params ? cJSON_GetObjectItemCaseSensitive(params, "cursor") : NULL;
    char after[4096] = "";
    if (cur) {
        long n = -1;
        size_t len = cJSON_IsString(cur) ? strlen(cur->valuestring) : 0;
        if (len && len <= base64_encoded_len(sizeof(after) - 1))
            n = base64_decode(cur->valuestring, len, after);
        if (n <= 0 || memchr(after, '\0', (size_t)n) || after[0] == '/') {
            snprintf(msg, msglen, "'cursor' is not one resources/list gave");
            return JRPC_INVALID_PARAMS;
        }
        after[n] = '\0';
    }
    struct fs_user u = h->user;
    int dfd = openat(h->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(msg, msglen, "cannot open the workspace: %s", strerror(errno));
        return JRPC_INTERNAL_ERROR;
    }
    jw_obj_begin(w);
    jw_key(w, "resources");
    jw_arr_begin(w);
    struct res_walk *R = calloc(1, sizeof(*R));
    if (!R) {
        close(dfd);
        snprintf(msg, msglen, "out of memory");
        return JRPC_INTERNAL_ERROR;
    }
    R->h = h;
    R->w = w;
    fs_user_enter(&u);
    res_walk_dir(R, dfd, "", MCP_LIST_DEPTH_MAX, cur ? after : NULL);
    fs_user_leave(&u);
    jw_arr_end(w);
    if (R->more) {
        char next[(sizeof(R->last) + 2) / 3 * 4 + 1];
        size_t n = base64_encode(R->last, strlen(R->last), next);
        jw_key(w, "nextCursor");
        jw_str_utf8(w, next, n, false);
    }
    jw_obj_end(w);
    free(R);
    return 0;
}

int mcp_resources_read(const struct mcp_host *h, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen)
{
    const cJSON *uri = params ? cJSON_GetObjectItemCaseSensitive(params, "uri") : NULL;
    if (!cJSON_IsString(uri)) {
        snprintf(msg, msglen, "'uri' is required: a file:// URI resources/list gave");
        return JRPC_INVALID_PARAMS;
    }
    char *path = mcp_uri_path(h, uri->valuestring, msg, msglen);
    if (!path)
        return JRPC_INVALID_PARAMS;
    size_t cap = h->cfg->max_output_bytes;
    struct stat st;
    size_t n = 0;
    struct sbxd_err err = {0};
    uint8_t *buf = mcp_read_span(h, path, 0, cap, &n, &st, &err);
    if (!buf) {
        free(path);
        return mcp_err_code(&err, msg, msglen);
    }
    if ((uint64_t)st.st_size > n) {
        snprintf(msg, msglen,
                 "'%s' is %lld bytes, more than a resource read gives (%zu, --max-output-bytes): "
                 "the read_file tool reads it in pieces",
                 path, (long long)st.st_size, cap);
        free(buf);
        free(path);
        return JRPC_INVALID_PARAMS;
    }
    bool text = mcp_is_text(buf, &n, true);
    jw_obj_begin(w);
    jw_key(w, "contents");
    jw_arr_begin(w);
    jw_obj_begin(w);
    jw_key(w, "uri");
    mcp_write_uri(h, w, path);
    jw_key(w, "mimeType");
    jw_str(w, mcp_mime_of(path, text));
    jw_key(w, text ? "text" : "blob");
    if (text)
        jw_str_utf8(w, buf, n, false);
    else
        jw_base64(w, buf, n);
    jw_obj_end(w);
    jw_arr_end(w);
    jw_obj_end(w);
    free(buf);
    free(path);
    return 0;
}
