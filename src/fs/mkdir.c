/*
 * mkdir.c - mkdir -p beneath the workspace root (fs_mkdir_p), each prefix resolved as any
 * path is, so a symlink planted along the way is followed only inside the root.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "sbxd/resolve.h"

#include "files_internal.h"

int fs_mkdir_p(int rootfd, const char *path, mode_t mode, bool *created, struct sbxd_err *err)
{
    *created = false;
    size_t len = strlen(path);
    if (len >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes",
                         PATH_MAX - 1);
    autofree char *prefix = malloc(PATH_MAX);
    if (!prefix)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    autoclose int fd = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
    /* Component by component: each prefix resolved as any path is; a missing last one is
     * made in the directory its parent resolved to. */
    size_t i = 0;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        if (i == len)
            break;
        size_t s = i;
        while (i < len && path[i] != '/')
            i++;
        memcpy(prefix, path, i);
        prefix[i] = '\0';
        struct sbxd_err e2 = {0};
        int nfd = fs_resolve_beneath(rootfd, prefix, FS_RESOLVE_DIRECTORY, &e2);
        if (nfd < 0 && e2.kind == SBXD_E_NOT_FOUND) {
            char comp[NAME_MAX + 1];
            size_t cl = i - s;
            if (cl > NAME_MAX)
                return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG,
                                 "a name is longer than %d bytes", NAME_MAX);
            memcpy(comp, path + s, cl);
            comp[cl] = '\0';
            int mk = mkdirat(fd, comp, mode);
            if (mk < 0 && errno != EEXIST) {
                int e = errno;
                return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot create directory '%.200s'",
                                       prefix);
            }
            bool made = mk == 0;
            *created = i >= len || strspn(path + i, "/") == len - i;
            nfd = fs_resolve_beneath(rootfd, prefix, FS_RESOLVE_DIRECTORY, &e2);
            if (made && nfd >= 0) {
                /* The mode asked for, not what sbxd's umask left of it (group write, under
                 * uid isolation), set on the directory just resolved, not by name. */
                char self[64];
                snprintf(self, sizeof(self), "/proc/self/fd/%d", nfd);
                if (chmod(self, mode) < 0) {
                    /* best effort: the directory exists either way */
                }
            }
        }
        if (nfd < 0) {
            *err = e2;
            if (err->kind == SBXD_E_INVALID && err->sys_errno == ENOTDIR)
                sbxd_fail(err, SBXD_E_CONFLICT, ENOTDIR, "'%.200s' exists and is not a directory",
                          prefix);
            return -1;
        }
        close(fd);
        fd = nfd;
    }
    return STEAL_FD(fd);
}
