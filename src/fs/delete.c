/*
 * delete.c - a file, a symlink, an empty directory or (recursive) a whole tree deleted
 * beneath the workspace root (fs_delete), never following a link; or everything in the root
 * (fs_delete_contents).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "sbxd/fs_limits.h"
#include "sbxd/resolve.h"
#include "sbxd/walk.h"

#include "files_internal.h"

/* One entry of a recursive delete: unlinked, or a directory opened to be emptied first. */
static int delete_entry(struct walk_entry *e, void *ctx)
{
    struct sbxd_err *err = ctx;
    if (unlinkat(e->parent, e->name, 0) == 0 || errno == ENOENT)
        return WALK_NEXT;
    int x = errno;
    if (x != EISDIR && x != EPERM) {
        sbxd_fail_errno(err, fs_errno_kind(x), x, "cannot delete '%.200s'", e->name);
        return WALK_STOP;
    }
    if (walk_open(e, O_RDONLY | O_DIRECTORY) < 0) {
        x = errno;
        sbxd_fail_errno(err, fs_errno_kind(x), x, "cannot open '%.200s'", e->name);
        return WALK_STOP;
    }
    return WALK_ENTER;
}

/* A directory of the tree, now empty: removed. */
static int delete_emptied(struct walk_entry *e, void *ctx)
{
    if (unlinkat(e->parent, e->name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return 0;
    int x = errno;
    return sbxd_fail_errno(ctx, fs_errno_kind(x), x, "cannot delete '%.200s'", e->name);
}

/* Everything inside the directory dfd (taken), each directory's entries before it, never
 * following a link. What was deleted before a failure stays deleted. */
static int delete_tree(int dfd, struct sbxd_err *err)
{
    struct walk w = {.max_entries = UINT64_MAX, /* it ends: what it visits, it removes */
                     .max_depth = SBXD_DELETE_MAX_DEPTH,
                     .strict = true,
                     .pre = delete_entry,
                     .post = delete_emptied,
                     .ctx = err};
    if (walk_tree(dfd, &w) == 0)
        return 0;
    if (w.cut & WALK_CUT_DEPTH)
        return sbxd_fail(err, SBXD_E_INVALID, ELOOP, "directory tree is nested too deeply");
    if (w.cut & WALK_UNREADABLE)
        return sbxd_fail_errno(err, fs_errno_kind(w.sys_errno), w.sys_errno,
                               "cannot read a directory");
    return -1; /* err says why */
}

/* name, in the directory dfd, as path names it: a file, a symlink, an empty directory, or
 * (recursive) a whole tree. */
static int delete_name(int dfd, const char *name, const char *path, bool recursive,
                       struct sbxd_err *err)
{
    struct stat st;
    int e;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        e = errno;
        if (e == ENOENT)
            return sbxd_fail(err, SBXD_E_NOT_FOUND, e, "'%.200s' does not exist", path);
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot stat '%.200s'", path);
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dfd, name, 0) == 0)
            return 0;
        e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot delete '%.200s'", path);
    }
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0)
        return 0;
    e = errno;
    if (e != ENOTEMPTY && e != EEXIST)
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot delete '%.200s'", path);
    if (!recursive)
        return sbxd_fail(err, SBXD_E_CONFLICT, ENOTEMPTY,
                         "directory '%.200s' is not empty; add ?recursive=true to delete it all",
                         path);
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
        e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open '%.200s'", path);
    }
    if (delete_tree(sub, err) < 0)
        return -1;
    if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) {
        e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot delete '%.200s'", path);
    }
    return 0;
}

int fs_delete_at(int dfd, const char *name)
{
    struct sbxd_err err = {0};
    return delete_name(dfd, name, name, true, &err);
}

int fs_delete(int rootfd, const char *path, bool recursive, struct sbxd_err *err)
{
    autofree char *dir = malloc(PATH_MAX);
    autofree char *p = malloc(PATH_MAX);
    char name[NAME_MAX + 1];
    if (!dir || !p)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    /* A trailing '/' is fine here: "dir/" is the directory. */
    snprintf(p, PATH_MAX, "%s", path);
    size_t len = strlen(p);
    while (len && p[len - 1] == '/')
        p[--len] = '\0';
    if (fs_split_path(p, dir, name, err) < 0) {
        if (err->sys_errno == EISDIR)
            sbxd_fail(err, SBXD_E_INVALID, EINVAL, "the workspace root cannot be deleted");
        return -1;
    }
    autoclose int pfd = fs_resolve_beneath(rootfd, dir, FS_RESOLVE_DIRECTORY, err);
    if (pfd < 0)
        return -1;
    autoclose int dfd = fs_reopen(pfd, O_RDONLY | O_DIRECTORY);
    if (dfd < 0) {
        int e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open the directory of '%.200s'",
                               path);
    }
    return delete_name(dfd, name, path, recursive, err);
}

bool fs_path_is_root(const char *path)
{
    for (const char *p = path; *p;) {
        p += strspn(p, "/");
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        if (n != 1 || *p != '.')
            return false;
        p += n;
    }
    return true;
}

int fs_delete_contents(int rootfd, struct sbxd_err *err)
{
    /* A real open of the root (walks read it), relative to the fd held since start-up: the
     * root is never looked up by its path again, so whatever now lies at that path is not
     * what is emptied. */
    int dfd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open the workspace");
    }
    return delete_tree(dfd, err);
}
