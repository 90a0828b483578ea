/*
 * files_internal.h - what the modules behind files.h share (files.c); nothing outside src/fs
 * includes it.
 */
#ifndef SBXD_FILES_INTERNAL_H
#define SBXD_FILES_INTERNAL_H

#include "sbxd/err.h"
#include "sbxd/files.h"

/* An errno of a file operation as an error kind. */
enum sbxd_errkind fs_errno_kind(int e);

/* An O_PATH fd reopened for I/O with flags (O_CLOEXEC | O_NOCTTY added): the kernel checks
 * the rights of this thread's fsuid. Returns the fd, or -1 with errno. */
int fs_reopen(int pathfd, int flags);

/* The last component of path into name (NAME_MAX + 1), and the directory part before it into
 * dir (PATH_MAX). Refuses the root, a path ending in '/' (EISDIR), "." and "..", and names or
 * paths over the limits. */
int fs_split_path(const char *path, char *dir, char *name, struct sbxd_err *err);

/* Delete name in the directory dfd, a whole tree if it is a directory (a temporary copy). */
int fs_delete_at(int dfd, const char *name);

#endif
