#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/limits.h"
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

int fs_resolve_beneath(int rootfd, const char *path, int flags, struct sbxd_err *err)
{
    size_t plen = strlen(path);
    if (plen >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes",
                         PATH_MAX - 1);

    /* pending holds what is left to resolve; a symlink's target is put in front of it. */
    char *pending = malloc(PATH_MAX);
    struct dir_id *stack = malloc(sizeof(*stack) * SBXD_MAX_PATH_DEPTH);
    int cur = -1, ret = -1;
    if (!pending || !stack) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    memcpy(pending, path, plen + 1);
    char *rest = pending;

    cur = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (cur < 0 || fstat(cur, &st) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
        goto out;
    }
    size_t depth = 0;
    stack[0] = (struct dir_id){st.st_dev, st.st_ino};
    bool cur_is_dir = true;
    int links = 0;
    char *comp;

    while (next_component(&rest, &comp)) {
        if (!cur_is_dir) {
            sbxd_fail(err, SBXD_E_INVALID, ENOTDIR, "a path component is not a directory");
            goto out;
        }
        if (strcmp(comp, ".") == 0)
            continue;
        if (strlen(comp) > NAME_MAX) {
            sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "a path component is longer than %d bytes",
                      NAME_MAX);
            goto out;
        }
        if (strcmp(comp, "..") == 0) {
            if (depth == 0) {
                /* Stops "../x", "a/../../x" and symlinks like "x -> ../../etc". */
                sbxd_fail(err, SBXD_E_DENIED, EXDEV, "path escapes the workspace");
                goto out;
            }
            int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
            if (up < 0 || fstat(up, &st) < 0) {
                sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open '..'");
                if (up >= 0)
                    close(up);
                goto out;
            }
            /* The parent must be the directory we came through: if a directory was moved
             * while we stood in it, ".." could lead outside the root. */
            if (st.st_dev != stack[depth - 1].dev || st.st_ino != stack[depth - 1].ino) {
                close(up);
                sbxd_fail(err, SBXD_E_DENIED, EXDEV, "path changed while it was resolved");
                goto out;
            }
            close(cur);
            cur = up;
            depth--;
            continue;
        }
        int fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == ENOENT)
                sbxd_fail(err, SBXD_E_NOT_FOUND, e, "'%s' does not exist", comp);
            else if (e == ENOTDIR)
                sbxd_fail(err, SBXD_E_INVALID, e, "a path component is not a directory");
            else if (e == EACCES || e == EPERM)
                sbxd_fail(err, SBXD_E_DENIED, e, "'%s' is not accessible", comp);
            else
                sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot open '%s'", comp);
            goto out;
        }
        if (fstat(fd, &st) < 0) {
            sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot stat '%s'", comp);
            close(fd);
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            close(fd);
            if (++links > SBXD_MAX_SYMLINKS) {
                sbxd_fail(err, SBXD_E_INVALID, ELOOP, "too many levels of symbolic links");
                goto out;
            }
            char target[PATH_MAX];
            ssize_t tl = readlinkat(cur, comp, target, sizeof(target) - 1);
            if (tl < 0) {
                sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read link '%s'", comp);
                goto out;
            }
            target[tl] = '\0';
            if (target[0] == '/') {
                /* An absolute target means the host's namespace, never the workspace's. */
                sbxd_fail(err, SBXD_E_DENIED, EXDEV, "symbolic link '%s' is absolute", comp);
                goto out;
            }
            size_t rl = strlen(rest);
            if ((size_t)tl + 1 + rl >= PATH_MAX) {
                sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG,
                          "path is longer than %d bytes after following links", PATH_MAX - 1);
                goto out;
            }
            /* What is left becomes target "/" rest (target's buffer has the room). */
            target[tl] = '/';
            memcpy(target + tl + 1, rest, rl + 1);
            memcpy(pending, target, (size_t)tl + 1 + rl + 1);
            rest = pending;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (depth + 1 >= SBXD_MAX_PATH_DEPTH) {
                close(fd);
                sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is nested too deeply");
                goto out;
            }
            stack[++depth] = (struct dir_id){st.st_dev, st.st_ino};
        } else {
            cur_is_dir = false; /* a further component fails at the top of the loop */
        }
        close(cur);
        cur = fd;
    }
    if ((flags & FS_RESOLVE_DIRECTORY) && !cur_is_dir) {
        sbxd_fail(err, SBXD_E_INVALID, ENOTDIR, "not a directory");
        goto out;
    }
    ret = cur;
    cur = -1;
out:
    if (cur >= 0)
        close(cur);
    free(pending);
    free(stack);
    return ret;
}
