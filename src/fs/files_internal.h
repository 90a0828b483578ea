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

/* Open the directory that holds path's last component (made with its parents, as u, when
 * make), name getting that component: an fd (O_RDONLY | O_DIRECTORY), or -1 with err. The
 * root itself is refused. */
int fs_open_parent(int rootfd, const char *path, char *name, bool make, const struct fs_user *u,
                   struct sbxd_err *err);

/* renameat2(RENAME_NOREPLACE), or where the file system lacks it a check then a rename:
 * 0, or -1 with errno (EEXIST: dname is there). */
int fs_rename_noreplace(int sfd, const char *sname, int dfd, const char *dname);

/* A new name for a temporary entry: ".sbxd-" kind "-" and 16 hex digits. */
void fs_temp_name(char out[40], const char *kind);

/* Put the directory tmp of dfd in the place of the directory name (both in dfd): swapped
 * with RENAME_EXCHANGE, or where the file system cannot (gVisor) the old one renamed aside
 * first, so that name is for a moment missing but never a part of either tree. tmp then names
 * the old tree, for the caller to delete. 0, or -1 with errno (nothing moved). */
int fs_swap_dir(int dfd, char tmp[40], const char *name);

#endif
