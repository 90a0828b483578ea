/*
 * resolve.h - path confinement beneath the workspace root.
 *
 * A path is resolved one component at a time from the root's fd with
 * openat(O_PATH|O_NOFOLLOW): symlinks are followed only by us, only when relative,
 * and ".." can never climb above the root. The result is an fd to act on, so there is
 * no window between the check and the use (no check-then-reopen race).
 */
#ifndef SBXD_RESOLVE_H
#define SBXD_RESOLVE_H

#include "sbxd/err.h"

/* Create the directory (and parents) if missing and open it as the root: an O_PATH
 * directory fd. abs_out (PATH_MAX bytes) receives its canonical absolute path. */
int fs_open_root(const char *path, char *abs_out, struct sbxd_err *err);

enum {
    FS_RESOLVE_DIRECTORY = 1, /* the final object must be a directory */
};

/*
 * Resolve path (relative to the root; leading slashes are ignored) to an O_PATH fd.
 * Errors: SBXD_E_DENIED when the path or a symlink in it leaves the root or a symlink is
 * absolute; SBXD_E_INVALID for a name over NAME_MAX, a path over PATH_MAX, a symlink loop
 * or a non-directory where a directory is needed; SBXD_E_NOT_FOUND when a component is
 * missing.
 */
int fs_resolve_beneath(int rootfd, const char *path, int flags, struct sbxd_err *err);

#endif
