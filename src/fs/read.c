/*
 * read.c - a workspace file opened to be served, and what /files says about one
 * (fs_entry_from_stat).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/resolve.h"

#include "files_internal.h"

void fs_entry_from_stat(struct fs_entry *e, const char *name, const struct stat *st)
{
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->type = S_ISREG(st->st_mode)   ? "file"
              : S_ISDIR(st->st_mode) ? "directory"
              : S_ISLNK(st->st_mode) ? "symlink"
                                     : "other";
    e->size = (uint64_t)st->st_size;
    e->mode = st->st_mode & 07777;
    e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    e->dev = st->st_dev;
    e->ino = st->st_ino;
}

int fs_open_read(int rootfd, const char *path, struct stat *st, struct sbxd_err *err)
{
    /* A writer may rename a new file over this name between the resolution and the open:
     * gVisor then refuses to reopen the old, now nameless one (EINVAL). Resolve again. */
    for (int attempt = 0;; attempt++) {
        int pfd = fs_resolve_beneath(rootfd, path, 0, err);
        if (pfd < 0)
            return -1;
        if (fstat(pfd, st) < 0) {
            int e = errno;
            close(pfd);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot stat '%.200s'", path);
        }
        if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) {
            close(pfd);
            sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                      "'%.200s' is neither a regular file nor a directory", path);
            if (err)
                err->flags |= SBXD_EF_SPECIAL_FILE;
            return -1;
        }
        int fd =
            fs_reopen(pfd, S_ISDIR(st->st_mode) ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NONBLOCK);
        int e = errno;
        close(pfd);
        if (fd < 0 && (e == EINVAL || e == ENOENT || e == ESTALE) && attempt < 8)
            continue;
        if (fd < 0)
            return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open '%.200s'", path);
        /* What was opened is what is served: its own stat, not the name's. */
        if (fstat(fd, st) < 0) {
            e = errno;
            close(fd);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot stat '%.200s'", path);
        }
        if (!S_ISDIR(st->st_mode))
            fcntl(fd, F_SETFL, 0); /* O_NONBLOCK only kept a fifo from hanging the open */
        return fd;
    }
}
