#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/fs_limits.h"
#include "sbxd/resolve.h"

static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int fs_open_root(const char *path, char *abs_out, struct sbxd_err *err)
{
    if (mkdir_p(path) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot create workspace '%s'", path);
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open workspace '%s'", path);
    if (!realpath(path, abs_out)) {
        int e = errno;
        close(fd);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot resolve workspace '%s'", path);
    }
    return fd;
}

struct dir_id {
    dev_t dev;
    ino_t ino;
};

/* Take the next component off *rest (components are separated by one or more '/'). */
static bool next_component(char **rest, char **comp)
{
    char *p = *rest;
    while (*p == '/')
        p++;
    if (!*p)
        return false;
    char *end = strchr(p, '/');
    if (end) {
        *end = '\0';
        *rest = end + 1;
    } else {
        *rest = p + strlen(p);
    }
    *comp = p;
    return true;
}

/*
 * One resolution under way. pending holds what is left to resolve (rest points into it); a
 * symlink's target is put in front of it. stack holds the (dev, ino) of every directory from
 * the root down to cur, so that ".." can be checked against the one it must lead back to.
 */
struct resolver {
    char *pending;
    char *rest;
    struct dir_id *stack;
    size_t depth;    /* stack[depth] is cur's */
    int cur;         /* O_PATH fd of where we stand */
    bool cur_is_dir; /* false: cur is a file, and no component may follow */
    int links;       /* symlinks followed so far */
    int rootfd;      /* the root's (not owned) */
};

/* Set r up to resolve path (plen bytes) from the root: r->cur is the root's fd. */
static int resolver_start(struct resolver *r, int rootfd, const char *path, size_t plen,
                          struct sbxd_err *err)
{
    r->pending = malloc(PATH_MAX);
    r->stack = malloc(sizeof(*r->stack) * SBXD_MAX_PATH_DEPTH);
    if (!r->pending || !r->stack)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    memcpy(r->pending, path, plen + 1);
    r->rest = r->pending;

    r->cur = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (r->cur < 0 || fstat(r->cur, &st) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
    r->depth = 0;
    r->stack[0] = (struct dir_id){st.st_dev, st.st_ino};
    r->cur_is_dir = true;
    r->links = 0;
    r->rootfd = rootfd;
    return 0;
}

/* "..": one directory up, never above the root and only back the way we came. */
static int resolve_parent(struct resolver *r, struct sbxd_err *err)
{
    if (r->depth == 0) {
        /* Stops "../x", "a/../../x" and symlinks like "x -> ../../etc". */
        return sbxd_fail(err, SBXD_E_DENIED, EXDEV, "path escapes the workspace");
    }
    struct stat st;
    int up = openat(r->cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (up < 0 || fstat(up, &st) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open '..'");
        if (up >= 0)
            close(up);
        return -1;
    }
    /* The parent must be the directory we came through: if a directory was moved
     * while we stood in it, ".." could lead outside the root. */
    if (st.st_dev != r->stack[r->depth - 1].dev || st.st_ino != r->stack[r->depth - 1].ino) {
        close(up);
        return sbxd_fail(err, SBXD_E_DENIED, EXDEV, "path changed while it was resolved");
    }
    close(r->cur);
    r->cur = up;
    r->depth--;
    return 0;
}

/* Why openat of comp failed (errno e), as an error of its kind. */
static int open_failed(const char *comp, int e, struct sbxd_err *err)
{
    if (e == ENOENT)
        return sbxd_fail(err, SBXD_E_NOT_FOUND, e, "'%s' does not exist", comp);
    if (e == ENOTDIR)
        return sbxd_fail(err, SBXD_E_INVALID, e, "a path component is not a directory");
    if (e == EACCES || e == EPERM)
        return sbxd_fail(err, SBXD_E_DENIED, e, "'%s' is not accessible", comp);
    return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot open '%s'", comp);
}

/* How many bytes of target name the root's own absolute path (as the kernel knows it) and a
 * following '/' or the end: 0 when target is elsewhere. */
static size_t root_prefix(int rootfd, const char *target)
{
    char self[64], abs[PATH_MAX];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", rootfd);
    ssize_t n = readlink(self, abs, sizeof(abs) - 1);
    if (n <= 0 || abs[0] != '/')
        return 0;
    abs[n] = '\0';
    if (n == 1) /* a root of "/" names everything: never taken */
        return 0;
    if (strncmp(target, abs, (size_t)n) != 0 || (target[n] != '/' && target[n] != '\0'))
        return 0;
    return (size_t)n;
}

/* The symlink comp in cur, followed by us: its target goes in front of what is left, to be
 * resolved from cur like the rest of the path (so its ".." are checked the same way). */
static int follow_link(struct resolver *r, const char *comp, struct sbxd_err *err)
{
    if (++r->links > SBXD_MAX_SYMLINKS)
        return sbxd_fail(err, SBXD_E_INVALID, ELOOP, "too many levels of symbolic links");
    char target[PATH_MAX];
    ssize_t tl = readlinkat(r->cur, comp, target, sizeof(target) - 1);
    if (tl < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read link '%s'", comp);
    target[tl] = '\0';
    if (target[0] == '/') {
        /* An absolute target means the host's namespace: only one that names the root's own
         * absolute path ("/workspace/data" in /workspace, as a command in it would write it)
         * is taken, as that path beneath the root, resolved from the root like any other
         * (its ".." checked the same way); any other is refused. */
        size_t skip = root_prefix(r->rootfd, target);
        if (!skip)
            return sbxd_fail(err, SBXD_E_DENIED, EXDEV, "symbolic link '%s' is absolute", comp);
        tl -= (ssize_t)skip;
        memmove(target, target + skip, (size_t)tl + 1);
        int root = openat(r->rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
        close(r->cur);
        r->cur = root;
        r->depth = 0;
        r->cur_is_dir = true;
    }
    size_t rl = strlen(r->rest);
    if ((size_t)tl + 1 + rl >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG,
                         "path is longer than %d bytes after following links", PATH_MAX - 1);
    /* What is left becomes target "/" rest (target's buffer has the room). */
    target[tl] = '/';
    memcpy(target + tl + 1, r->rest, rl + 1);
    memcpy(r->pending, target, (size_t)tl + 1 + rl + 1);
    r->rest = r->pending;
    return 0;
}

/* The name comp in cur: opened with O_NOFOLLOW, so a symlink is never followed by the kernel
 * (which would let it point anywhere) but only by follow_link; a directory or a file becomes
 * cur. */
static int resolve_name(struct resolver *r, const char *comp, struct sbxd_err *err)
{
    int fd = openat(r->cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return open_failed(comp, errno, err);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot stat '%s'", comp);
        close(fd);
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        close(fd);
        return follow_link(r, comp, err);
    }
    if (S_ISDIR(st.st_mode)) {
        if (r->depth + 1 >= SBXD_MAX_PATH_DEPTH) {
            close(fd);
            return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is nested too deeply");
        }
        r->stack[++r->depth] = (struct dir_id){st.st_dev, st.st_ino};
    } else {
        r->cur_is_dir = false; /* a further component fails in resolve_component */
    }
    close(r->cur);
    r->cur = fd;
    return 0;
}

/* One component of the path, taken from cur. */
static int resolve_component(struct resolver *r, const char *comp, struct sbxd_err *err)
{
    if (!r->cur_is_dir)
        return sbxd_fail(err, SBXD_E_INVALID, ENOTDIR, "a path component is not a directory");
    if (strcmp(comp, ".") == 0)
        return 0;
    if (strlen(comp) > NAME_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG,
                         "a path component is longer than %d bytes", NAME_MAX);
    if (strcmp(comp, "..") == 0)
        return resolve_parent(r, err);
    return resolve_name(r, comp, err);
}

int fs_resolve_beneath(int rootfd, const char *path, int flags, struct sbxd_err *err)
{
    size_t plen = strlen(path);
    if (plen >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes",
                         PATH_MAX - 1);

    /* A path whose ".." climb above the root as written ("a/../../etc/passwd") is refused
     * as an escape even where a component is missing on the way (the walk below would stop
     * at it with "does not exist"): it names something outside, as the reference reads it. */
    long level = 0;
    for (const char *p = path; *p;) {
        p += strspn(p, "/");
        size_t cl = strcspn(p, "/");
        if (cl == 2 && p[0] == '.' && p[1] == '.') {
            if (--level < 0)
                return sbxd_fail(err, SBXD_E_DENIED, EXDEV, "path escapes the workspace");
        } else if (cl && !(cl == 1 && p[0] == '.')) {
            level++;
        }
        p += cl;
    }

    struct resolver r = {.cur = -1};
    int ret = -1;
    if (resolver_start(&r, rootfd, path, plen, err) < 0)
        goto out;
    char *comp;
    while (next_component(&r.rest, &comp)) {
        if (resolve_component(&r, comp, err) < 0)
            goto out;
    }
    if ((flags & FS_RESOLVE_DIRECTORY) && !r.cur_is_dir) {
        sbxd_fail(err, SBXD_E_INVALID, ENOTDIR, "not a directory");
        goto out;
    }
    ret = r.cur;
    r.cur = -1;
out:
    if (r.cur >= 0)
        close(r.cur);
    free(r.pending);
    free(r.stack);
    return ret;
}
