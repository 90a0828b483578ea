/*
 * face.c - what every face of the file API (REST /files and its legacy routes, MCP's tools
 * and resources) shares about paths and entries: an absolute path's spelling within the
 * workspace, the rule a listing follows a symlink by, and the fields of a stat answer.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/edit.h"
#include "sbxd/files.h"
#include "sbxd/jsonw.h"
#include "sbxd/resolve.h"
#include "sbxd/search.h"
#include "sbxd/timeutil.h"

/* What follows the directory dir in the absolute path path, compared a component at a time
 * (runs of '/' count as one): the rest, at a '/' or at the end; NULL when path does not lie
 * beneath dir or is dir itself spelled otherwise. A sibling that only shares dir's prefix
 * ("/workspace-evil" for "/workspace") is no match. */
static const char *after_dir(const char *path, const char *dir)
{
    if (dir[0] != '/' || path[0] != '/')
        return NULL;
    const char *p = path, *q = dir;
    for (;;) {
        while (*q == '/')
            q++;
        if (!*q)
            return p;
        while (*p == '/')
            p++;
        size_t n = strcspn(q, "/");
        if (strncmp(p, q, n) != 0 || (p[n] != '/' && p[n] != '\0'))
            return NULL;
        p += n;
        q += n;
    }
}

const char *fs_path_within(const char *workspace, const char *configured, const char *path)
{
    const char *rest = after_dir(path, workspace);
    return rest || !configured ? rest : after_dir(path, configured);
}

int fs_list_follow(struct fs_entry *e, int rootfd, int dirfd, const char *at)
{
    if (strcmp(e->type, "symlink") != 0)
        return 0;
    /* Followed by the confined resolver, never by the kernel: from the listed directory's fd
     * first (no path resolved again), and only a link that climbs above that directory from
     * the root by its path (confined all the same). A link out of the workspace (to a host
     * file, or an absolute one) is never described by what it points to: what lies outside
     * is not the workspace's to show. */
    struct sbxd_err err = {0};
    int tfd = fs_resolve_beneath(dirfd, e->name, 0, &err);
    if (tfd < 0 && err.kind == SBXD_E_DENIED) {
        char *path = malloc(PATH_MAX + sizeof(e->name) + 1);
        if (!path)
            return -1;
        snprintf(path, PATH_MAX + sizeof(e->name) + 1, "%s%s%s", at, *at ? "/" : "", e->name);
        tfd = fs_resolve_beneath(rootfd, path, 0, &err);
        free(path);
    }
    if (tfd < 0)
        return -1;
    struct stat st;
    int rc = fstat(tfd, &st);
    close(tfd);
    if (rc < 0)
        return -1;
    char name[sizeof(e->name)];
    memcpy(name, e->name, sizeof(name));
    fs_entry_from_stat(e, name, &st);
    return 1;
}

void fs_write_stat(struct jsonw *w, const char *path, const struct fs_stat_info *in)
{
    char mode[8], etag[80];
    snprintf(mode, sizeof(mode), "%04o", (unsigned)(in->st.st_mode & 07777));
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "name");
    jw_str(w, in->name);
    jw_key(w, "type");
    jw_str(w, fs_type_name(in->st.st_mode));
    jw_key(w, "size");
    jw_uint(w, (uint64_t)in->st.st_size);
    jw_key(w, "mode");
    jw_str(w, mode);
    jw_key(w, "uid");
    jw_uint(w, in->st.st_uid);
    jw_key(w, "gid");
    jw_uint(w, in->st.st_gid);
    jw_key(w, "nlink");
    jw_uint(w, in->st.st_nlink);
    char when[40];
    time_rfc3339((int64_t)in->st.st_mtim.tv_sec * 1000000000LL + in->st.st_mtim.tv_nsec, when,
                 sizeof(when));
    jw_key(w, "modified_at");
    jw_str(w, when);
    if (in->has_btime) {
        time_rfc3339(in->btime_ns, when, sizeof(when));
        jw_key(w, "created_at");
        jw_str(w, when);
    }
    if (S_ISLNK(in->st.st_mode)) {
        jw_key(w, "symlink_target");
        jw_str(w, in->target);
    }
    if (S_ISREG(in->st.st_mode)) {
        fs_etag(&in->st, etag, sizeof(etag));
        jw_key(w, "etag");
        jw_str(w, etag);
    }
}

void fs_write_edit(struct jsonw *w, const char *path, const struct fs_edit_result *res,
                   const char *etag)
{
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "etag");
    jw_str(w, etag);
    jw_key(w, "size");
    jw_uint(w, (uint64_t)res->st.st_size);
    jw_key(w, "replacements");
    jw_uint(w, res->replaced);
    jw_key(w, "lines");
    jw_arr_begin(w);
    for (size_t i = 0; i < res->nspans; i++) {
        jw_obj_begin(w);
        jw_key(w, "start");
        jw_uint(w, res->spans[i].first);
        jw_key(w, "end");
        jw_uint(w, res->spans[i].last);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_key(w, "lines_cut");
    jw_bool(w, res->spans_cut);
}

static void write_lines(struct jsonw *w, const char *key, const struct search_line *l, unsigned n)
{
    jw_key(w, key);
    jw_arr_begin(w);
    for (unsigned i = 0; i < n; i++)
        jw_str_utf8(w, l[i].text, l[i].len, l[i].cut);
    jw_arr_end(w);
}

void search_write_match(struct jsonw *w, const struct search_match *m)
{
    jw_key(w, "path");
    jw_str(w, m->path);
    jw_key(w, "line");
    jw_uint(w, m->line.no);
    jw_key(w, "column");
    jw_uint(w, m->column);
    jw_key(w, "text");
    jw_str_utf8(w, m->line.text, m->line.len, m->line.cut);
    if (m->line.cut) {
        jw_key(w, "text_cut");
        jw_bool(w, true);
    }
    write_lines(w, "before", m->before, m->nbefore);
    write_lines(w, "after", m->after, m->nafter);
}
