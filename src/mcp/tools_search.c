/*
 * tools_search.c - MCP's search tools: search_files (content, fs/search.c's grep) and
 * find_files (names, its glob), on the same engine as GET /files/{dir}?grep= and ?glob=:
 * confined beneath the workspace root, no symlink followed, with the command user's rights.
 * A tool answers once, so its results are capped lower than the stream's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp_internal.h"
#include "sbxd/search.h"

#define MCP_SEARCH_MATCHES_DEFAULT 100
#define MCP_SEARCH_MATCHES_MAX     1000
#define MCP_SEARCH_CONTEXT_MAX     5

struct found {
    struct jsonw items; /* structuredContent's array */
    struct jsonw lines; /* the same as text, one a line */
};

static int on_match(void *ctx, const struct search_match *m)
{
    struct found *f = ctx;
    struct jsonw *w = &f->items;
    jw_obj_begin(w);
    search_write_match(w, m);
    jw_obj_end(w);
    char head[PATH_MAX + 32];
    int n = snprintf(head, sizeof(head), "%s:%llu:", m->path, (unsigned long long)m->line.no);
    jw_raw(&f->lines, head, (size_t)(n < (int)sizeof(head) ? n : (int)sizeof(head) - 1));
    jw_raw(&f->lines, m->line.text, m->line.len);
    jw_raw(&f->lines, "\n", 1);
    return w->failed ? -1 : 0;
}

static int on_entry(void *ctx, const char *path, const struct stat *st)
{
    struct found *f = ctx;
    struct jsonw *w = &f->items;
    jw_obj_begin(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "type");
    jw_str(w, fs_type_name(st->st_mode));
    jw_key(w, "size");
    jw_uint(w, (uint64_t)st->st_size);
    jw_obj_end(w);
    jw_raw(&f->lines, path, strlen(path));
    jw_raw(&f->lines, "\n", 1);
    return w->failed ? -1 : 0;
}

/* args[key] as a string (NULL when absent); false after a tool error. */
static bool arg_text(const cJSON *args, const char *key, const char **out, struct jsonw *w)
{
    const cJSON *v = cJSON_GetObjectItem(args, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsString(v) || !*v->valuestring) {
        tool_error(w, "'%s' must be a non-empty string", key);
        return false;
    }
    *out = v->valuestring;
    return true;
}

/* The options both tools share into o; false after a tool error. */
static bool common_options(const cJSON *args, const char *glob, struct search_opts *o,
                           struct jsonw *w)
{
    const char *exclude, *type;
    uint64_t max;
    if (!arg_text(args, "exclude", &exclude, w) || !arg_text(args, "type", &type, w) ||
        !arg_bool(args, "include_git", false, &o->include_git, w) ||
        !arg_uint(args, "max_results", MCP_SEARCH_MATCHES_DEFAULT, MCP_SEARCH_MATCHES_MAX, &max, w))
        return false;
    o->max_matches = max ? max : 1;
    const char *tg = type ? search_type_globs(type) : NULL;
    if (type && !tg) {
        tool_error(w, "'type' is one of %s", search_types_list());
        return false;
    }
    char inc[4096];
    struct sbxd_err err = {0};
    if (snprintf(inc, sizeof(inc), "%s%s%s", glob ? glob : "", glob && tg ? "," : "",
                 tg ? tg : "") >= (int)sizeof(inc)) {
        tool_error(w, "'glob' is too long");
        return false;
    }
    if ((*inc && !(o->include = search_globs_new(inc, &err))) ||
        (exclude && !(o->exclude = search_globs_new(exclude, &err)))) {
        tool_error(w, "%s", err.msg);
        return false;
    }
    return true;
}

/* Run the search o of path and answer it. */
static int search_answer(struct mcp_tool_ctx *x, const char *path, struct search_opts *o,
                         struct jsonw *w)
{
    const struct mcp_host *h = x->h;
    struct fs_user u = h->user;
    struct sbxd_err err = {0};
    struct stat st;
    struct found f;
    jw_init(&f.items, 4096);
    jw_init(&f.lines, 4096);
    jw_arr_begin(&f.items);
    struct search_sink sink = {on_match, on_entry, &f};
    struct search_stats ss;
    fs_user_enter(&u);
    int fd = fs_open_read(h->rootfd, path, &st, &err);
    if (fd >= 0 && !S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        snprintf(err.msg, sizeof(err.msg), "'%.200s' is a file, not a directory", path);
    }
    int rc = fd >= 0 ? search_run(fd, path, o, &sink, &ss, &err) : -1;
    fs_user_leave(&u);
    jw_arr_end(&f.items);
    if (rc < 0) {
        tool_error(w, "cannot search '%s': %s", *path ? path : ".", err.msg);
    } else {
        char msg[300];
        int mn = snprintf(msg, sizeof(msg), "%llu %s in %s (%llu files read)%s",
                          (unsigned long long)ss.matches, o->pattern ? "matches" : "entries",
                          *path ? path : ".", (unsigned long long)ss.files_scanned,
                          ss.truncated ? "; truncated at max_results" : "");
        result_begin(w);
        text_block(w, msg, (size_t)mn);
        text_block(w, f.lines.buf ? f.lines.buf : "", f.lines.len);
        result_structured(w);
        jw_key(w, "path");
        jw_str(w, path);
        jw_key(w, o->pattern ? "matches" : "entries");
        jw_json(w, f.items.buf, f.items.len);
        jw_key(w, "files_scanned");
        jw_uint(w, ss.files_scanned);
        jw_key(w, "bytes_read");
        jw_uint(w, ss.bytes_read);
        jw_key(w, "skipped_unreadable");
        jw_uint(w, ss.skipped_unreadable);
        jw_key(w, "truncated");
        jw_bool(w, ss.truncated);
        result_end(w, false);
    }
    jw_free(&f.items);
    jw_free(&f.lines);
    search_pattern_free(o->pattern);
    search_globs_free(o->include);
    search_globs_free(o->exclude);
    return 0;
}

int tool_search_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"pattern",     "path",    "regex",       "ignore_case",
                                       "glob",        "exclude", "type",        "context",
                                       "max_results", "binary",  "include_git", NULL};
    const char *pattern, *glob;
    bool regex, icase;
    uint64_t context;
    struct search_opts o = {0};
    if (!only_keys(args, keys, w) || !arg_text(args, "pattern", &pattern, w) ||
        !arg_text(args, "glob", &glob, w) || !arg_bool(args, "regex", false, &regex, w) ||
        !arg_bool(args, "ignore_case", false, &icase, w) ||
        !arg_bool(args, "binary", false, &o.include_binary, w) ||
        !arg_uint(args, "context", 0, MCP_SEARCH_CONTEXT_MAX, &context, w))
        return 0;
    if (!pattern)
        return tool_error(w, "'pattern' is required");
    o.context = (unsigned)context;
    char *path = arg_path(x, args, "path", false, w);
    if (!path)
        return 0;
    struct sbxd_err err = {0};
    if (!(o.pattern = search_pattern_new(pattern, regex, icase, &err)))
        tool_error(w, "%s", err.msg);
    else if (common_options(args, glob, &o, w))
        search_answer(x, path, &o, w); /* frees what o holds */
    else {
        search_pattern_free(o.pattern);
        search_globs_free(o.include);
    }
    free(path);
    return 0;
}

int tool_find_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"pattern",     "path",        "exclude", "type",
                                       "max_results", "include_git", NULL};
    const char *pattern;
    struct search_opts o = {0};
    if (!only_keys(args, keys, w) || !arg_text(args, "pattern", &pattern, w))
        return 0;
    if (!pattern)
        return tool_error(w, "'pattern' is required (a glob: **/*.py)");
    char *path = arg_path(x, args, "path", false, w);
    if (!path)
        return 0;
    if (common_options(args, pattern, &o, w))
        search_answer(x, path, &o, w);
    else
        search_globs_free(o.include);
    free(path);
    return 0;
}
