/*
 * files.c - what the file operations of files.h share (files_internal.h): the thread's switch
 * to the command user's identity, an errno as an error kind, an O_PATH fd reopened for I/O,
 * and a path cut into its directory and last name. The operations themselves are read.c,
 * list.c, mkdir.c, upload.c and delete.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "files_internal.h"

/*
 * The thread's effective ids become the user's, its supplementary groups none; real and saved
 * ids stay root's, so it can come back, and no process of that user may signal or trace it
 * (both look at the real or saved ids). Raw syscalls: credentials belong to each thread in the
 * kernel, and glibc's wrappers would change every thread of the daemon. (setfsuid would do on
 * Linux, but gVisor ignores it.) A non-zero effective uid also clears the thread's effective
 * capabilities, CAP_DAC_OVERRIDE included: permissions are checked as for the user.
 */
static __thread gid_t saved_groups[64];
static __thread int saved_ngroups;

void fs_user_enter(const struct fs_user *u)
{
    if (!u->switch_ids)
        return;
    saved_ngroups = (int)syscall(SYS_getgroups, 64, saved_groups);
    syscall(SYS_setgroups, 0, NULL);
    syscall(SYS_setresgid, -1, u->gid, -1);
    syscall(SYS_setresuid, -1, u->uid, -1);
}

void fs_user_leave(const struct fs_user *u)
{
    if (!u->switch_ids)
        return;
    syscall(SYS_setresuid, -1, 0, -1);
    syscall(SYS_setresgid, -1, 0, -1);
    if (saved_ngroups >= 0)
        syscall(SYS_setgroups, saved_ngroups, saved_groups);
}

/* An errno of a file operation as an error kind. */
enum sbxd_errkind fs_errno_kind(int e)
{
    switch (e) {
    case ENOENT:
        return SBXD_E_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS:
        return SBXD_E_DENIED;
    case ENOSPC:
    case EDQUOT:
        return SBXD_E_NO_SPACE;
    case EEXIST:
    case ENOTEMPTY:
    case EISDIR:
    case ENOTDIR:
    case EBUSY:
        return SBXD_E_CONFLICT;
    case ENAMETOOLONG:
    case ELOOP:
    case EINVAL:
        return SBXD_E_INVALID;
    case EFBIG:
        return SBXD_E_TOO_LARGE;
    default:
        return SBXD_E_INTERNAL;
    }
}

/* An O_PATH fd reopened for I/O: the kernel checks the rights of this thread's fsuid. */
int fs_reopen(int pathfd, int flags)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", pathfd);
    return open(p, flags | O_CLOEXEC | O_NOCTTY);
}

int fs_split_path(const char *path, char *dir, char *name, struct sbxd_err *err)
{
    size_t len = strlen(path);
    if (len >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes",
                         PATH_MAX - 1);
    while (len && path[len - 1] == '/')
        len--;
    if (len < strlen(path) && len > 0)
        return sbxd_fail(err, SBXD_E_INVALID, EISDIR, "a file path must not end in '/'");
    size_t start = len;
    while (start && path[start - 1] != '/')
        start--;
    size_t nl = len - start;
    if (nl == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EISDIR, "the path names the workspace root");
    if (nl > NAME_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "a name is longer than %d bytes",
                         NAME_MAX);
    memcpy(name, path + start, nl);
    name[nl] = '\0';
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "the path must end in a name");
    memcpy(dir, path, start);
    dir[start] = '\0';
    return 0;
}
