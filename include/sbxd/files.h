/*
 * files.h - the workspace file operations behind /files: confined, atomic, and done with
 * the command user's rights.
 *
 * Every path is resolved beneath the workspace root by resolve.h (one component at a time,
 * symlinks followed only inside the root), and every operation acts on the fds that
 * resolution opened. While an operation runs, the calling thread's filesystem identity is
 * the command user's (setfsuid/setfsgid are per thread, and drop the capabilities that
 * bypass file permissions), so files are created owned by that user and a file it could
 * not read (a hard link a command planted to one) stays unreadable here too.
 *
 * Writes go to a temporary file in the target's directory, then fsync and rename over the
 * target: a reader sees the old content or the new, never a mixture, and a failed write
 * leaves the old content and no temporary file.
 */
#ifndef SBXD_FILES_H
#define SBXD_FILES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "sbxd/err.h"

/* Who file operations run as. */
struct fs_user {
    bool switch_ids; /* sbxd is root: act as uid:gid */
    uid_t uid;
    gid_t gid;
    mode_t file_mode, dir_mode; /* defaults for what is created */
};

/* Become the user for file access on this thread, and back. */
void fs_user_enter(const struct fs_user *u);
void fs_user_leave(const struct fs_user *u);

/* What /files says about a file or directory. */
struct fs_entry {
    char name[256];
    const char *type; /* "file", "directory", "symlink" or "other" */
    uint64_t size;
    mode_t mode; /* permission bits */
    int64_t mtime_ns;
    dev_t dev;
    ino_t ino;
};

void fs_entry_from_stat(struct fs_entry *e, const char *name, const struct stat *st);

/* Open path (symlinks inside the root followed) for reading: a regular file or a directory.
 * Returns an fd (O_RDONLY, O_DIRECTORY for a directory) and its stat. Anything else (a fifo,
 * a socket, a device) fails SBXD_E_INVALID with SBXD_EF_SPECIAL_FILE in err->flags. */
int fs_open_read(int rootfd, const char *path, struct stat *st, struct sbxd_err *err);

/*
 * A directory listed a piece at a time, in memory that does not depend on its size: names are
 * read from the held directory fd as they are asked for, and each entry is described by
 * fstatat(AT_SYMLINK_NOFOLLOW) relative to that fd, never by a path resolved again.
 *
 * With FS_LIST_SORTED, a directory of at most SBXD_LIST_SORT_MAX entries whose names fit in
 * SBXD_LIST_SORT_BYTES is read whole first and comes sorted by name (strcmp); a larger one
 * comes, as every listing without the flag does, in the directory's own order (readdir's:
 * the same on each reading while the directory does not change).
 */
struct fs_lister;

enum { FS_LIST_SORTED = 1 };

/* Begin listing the open directory dfd (consumed, also on failure). Its first names are read
 * here, so that a directory that cannot be read at all fails now, before an answer started.
 * Returns NULL with err. */
struct fs_lister *fs_list_open(int dfd, int flags, struct sbxd_err *err);

/* The next entry into *e: 1, 0 at the end, or -1 with err when the directory cannot be read
 * further (what was returned before stands). A name gone before it could be described is
 * passed over. File-system rights are the calling thread's (fs_user_enter first). */
int fs_list_next(struct fs_lister *l, struct fs_entry *e, struct sbxd_err *err);

/* Pass over up to n names without describing them (an offset, or counting what is left):
 * how many there were, or -1 with err (the count so far in *passed). */
int fs_list_skip(struct fs_lister *l, uint64_t n, uint64_t *passed, struct sbxd_err *err);

/* The listed directory's fd (the lister's: not to be closed), for fd-relative follow-ups. */
int fs_list_dirfd(const struct fs_lister *l);

/* Whether the entries come sorted by name. */
bool fs_list_sorted(const struct fs_lister *l);

/* End the listing: its fd and memory go. NULL is fine. */
void fs_list_close(struct fs_lister *l);

/* mkdir -p of path beneath the root; returns an O_PATH fd of it. *created says whether the
 * last component was made. */
int fs_mkdir_p(int rootfd, const char *path, mode_t mode, bool *created, struct sbxd_err *err);

/* A write in progress. */
struct fs_upload {
    int dirfd, fd;
    char tmp[64];
    char name[256];
    uint64_t size;
    bool existed;
    /* Conditions fs_upload_commit checks right before the rename (a PUT's If-None-Match: *
     * and If-Match): the target must not exist (renameat2's RENAME_NOREPLACE), or must be
     * the version one of these ETags names (fs_etag_matches; "" no condition). */
    bool no_replace;
    char if_match[512];
};

/* Begin writing path (parents created): a temporary file next to it. Fails for the root,
 * a path ending in '/', or a name that is "." or "..". */
int fs_upload_begin(struct fs_upload *up, int rootfd, const char *path, const struct fs_user *u,
                    struct sbxd_err *err);

/* Append n bytes (EINTR and short writes handled). */
int fs_upload_write(struct fs_upload *up, const void *buf, size_t n, struct sbxd_err *err);

/* fsync, set mode, and rename over the target; st gets the result. SBXD_E_PRECONDITION when
 * a condition of up's fails (the target intact). */
int fs_upload_commit(struct fs_upload *up, mode_t mode, struct stat *st, struct sbxd_err *err);

/* Remove the temporary file (after a failure, or an abort); safe to call twice. */
void fs_upload_abort(struct fs_upload *up, const struct fs_user *u);

/*
 * Upload temporary files that a killed sbxd left behind (SIGKILL, a crash, the pod's end):
 * regular files named ".sbxd-upload-" and 16 lowercase hex digits, anywhere beneath the
 * root, last written before before_ns (wall clock, ns): a temporary file of an upload begun
 * since was created, so stamped, later, and is never touched. File times come from the
 * kernel's coarse clock, up to a tick behind, so a file must be older than before_ns by
 * FS_SWEEP_CLOCK_SLACK_NS (one left in the last moment before a restart goes at the next).
 * The walk (walk.h) opens each directory relative to its parent, never following a symlink,
 * and stops after max_entries entries or SBXD_SWEEP_MAX_DEPTH levels (limits.h). Returns how
 * many were removed; *visited (may be NULL) gets the number of entries seen.
 */
#define FS_SWEEP_CLOCK_SLACK_NS 20000000LL
unsigned fs_sweep_stale_uploads(int rootfd, int64_t before_ns, unsigned max_entries,
                                unsigned *visited);

/* The same in a detached thread of its own with the rights of u (what it removes, u could
 * remove through /files), logging one line, event "upload_sweep", with what it removed:
 * start-up does not wait for a large workspace. rootfd is duplicated; 0, or -1 if the
 * thread could not start (nothing is swept then; logged). */
int fs_sweep_stale_uploads_async(int rootfd, int64_t before_ns, const struct fs_user *u);

/* The ETag of a file's version, as GET serves it: "ino-size-mtime" in hex, quoted. */
void fs_etag(const struct stat *st, char *out, size_t len);

/* Whether a list of ETags as If-Match and If-None-Match carry them ("*", or quoted tags
 * separated by commas) names the version st: "*" names any; a weak tag (W/) never matches,
 * the comparison being strong. st NULL: there is no file. */
bool fs_etag_matches(const char *list, const struct stat *st);

/* file, directory, symlink, fifo, socket or device. */
const char *fs_type_name(mode_t mode);

/* What a stat of an entry found. */
struct fs_stat_info {
    char name[256];
    struct stat st;
    bool has_btime; /* the file system keeps a creation time */
    int64_t btime_ns;
    char target[4096]; /* a symlink's target, as it is written ("" otherwise) */
};

/* Stat path: what it names with symlinks followed (inside the root, as every route follows
 * them), or with follow false the entry itself (a symlink is described, not followed). Any
 * type of file. */
int fs_stat(int rootfd, const char *path, bool follow, struct fs_stat_info *out,
            struct sbxd_err *err);

/* Rename src to dst within the workspace (dst's parents made as u): files, symlinks and
 * directories, atomically. Without overwrite an existing dst is SBXD_E_CONFLICT (renameat2's
 * RENAME_NOREPLACE); with it, a file replaces a file, a directory an empty directory. */
int fs_move(int rootfd, const char *src, const char *dst, bool overwrite, const struct fs_user *u,
            struct sbxd_err *err);

struct fs_copy_stats {
    uint64_t files, directories, symlinks, bytes;
    uint64_t skipped; /* fifos, sockets, devices: not copied */
};

/* Copy src (a file, or a directory's whole tree: symlinks copied as links, never followed)
 * to dst, made as u: into a temporary entry beside dst, renamed in place once whole, so dst
 * is the old content or the new (a reflink per file where the file system can). Without
 * overwrite an existing dst is SBXD_E_CONFLICT; with it, a directory replaces a directory
 * whole. Setuid and setgid bits are not copied. */
int fs_copy(int rootfd, const char *src, const char *dst, bool overwrite, const struct fs_user *u,
            struct fs_copy_stats *cs, struct sbxd_err *err);

/* What a clear removed: files (every entry but directories: symlinks, fifos... too) with
 * the bytes of the regular ones, and directories; what it could not remove is counted in
 * failed, the first one named with its errno. */
struct fs_clear_stats {
    uint64_t files, directories, bytes;
    uint64_t failed;
    int first_errno;
    char first[128];
};

/*
 * Empty the directory dfd (taken; the directory itself stays): every entry, each directory's
 * before it, through fds and never following a link (walk.h). A directory whose owner took
 * away its own write or search bit (chmod 0500) gets them back first; a tree nested deeper
 * than the walk goes is moved up and emptied by another pass. With the calling thread's
 * rights. 0, or -1 when something was left (st says what).
 */
int fs_clear_dir(int dfd, struct fs_clear_stats *st);

/* Uids first .. first + count - 1. */
struct fs_uid_span {
    uid_t first;
    unsigned count;
};

/* A directory to leave alone wherever it is met (the workspace, the baseline). */
struct fs_keep {
    dev_t dev;
    ino_t ino;
};

/*
 * Remove from dir (/tmp, say) what a uid of `uids` owns: a file or symlink of theirs, a
 * directory of theirs whole (whoever owns what it holds); another directory is looked into
 * only when anybody may write into it, the only place a command could have put something.
 * A directory of theirs deeper than SBXD_CLEAR_SHARED_MAX_DEPTH is moved up into dir and
 * removed by another pass. What keep names stays, with all it holds. A missing dir is nothing
 * to do. 0, or -1 when something could not be removed (st says what).
 */
int fs_clear_owned(const char *dir, const struct fs_uid_span *uids, unsigned nuids,
                   const struct fs_keep *keep, unsigned nkeep, struct fs_clear_stats *st);

/* Directories anybody may write, by path. */
struct fs_shared_dirs {
    char **paths;
    size_t n;
    uint64_t visited; /* entries the walk looked at */
    bool cut;         /* it stopped at SBXD_SHARED_FIND_MAX_ENTRIES */
};

/*
 * Find the shared directories: every directory anybody may write (o+w, sticky or not) met by a
 * walk of the root file system SBXD_SHARED_FIND_MAX_DEPTH levels deep (across mounts, but not
 * into the kernel's own file systems: proc, sysfs, cgroup, devpts..., nor into /usr, /boot and
 * the root's /bin, /sbin, /lib*; never through a link),
 * which does not go into such a directory (fs_clear_owned does), and every mount point anybody
 * may write, however deep; the keep directories and what they hold left out. 0, or -1 when
 * memory ran out (what was found is in d). Free with fs_shared_dirs_free.
 */
int fs_find_shared(const struct fs_keep *keep, unsigned nkeep, struct fs_shared_dirs *d);
void fs_shared_dirs_free(struct fs_shared_dirs *d);

/* Copy everything the directory src holds (taken) into the directory dst (which stays, and is
 * expected empty: a name already there fails the copy), as fs_copy copies a tree: symlinks as
 * links, a reflink per file where the file system can, made with the calling thread's rights. With
 * share, the group gets the owner's permission bits (uid isolation's commands work through
 * the group). */
int fs_copy_into(int src, int dst, bool share, struct fs_copy_stats *cs, struct sbxd_err *err);

/* Delete path: a file, a symlink (not what it points to) or an empty directory; a whole
 * tree when recursive. The root itself is refused. */
int fs_delete(int rootfd, const char *path, bool recursive, struct sbxd_err *err);

/* Whether path names the workspace root by its spelling alone: nothing but '/' and "."
 * components ("", "/", ".", "./"). */
bool fs_path_is_root(const char *path);

/* Empty the workspace root: everything in it deleted as a recursive fs_delete deletes a tree
 * (never following a link), the root itself kept. What was deleted before a failure stays
 * deleted. */
int fs_delete_contents(int rootfd, struct sbxd_err *err);

/* Which part of the absolute path path lies within the workspace: what follows the
 * workspace's own absolute path (its canonical one, else configured as --workspace spelled
 * it; NULL: none) in it, compared a component at a time; NULL when it does not lie beneath
 * either. Spelling only: what the rest names is resolved beneath the root like any path. */
const char *fs_path_within(const char *workspace, const char *configured, const char *path);

/* The rule every listing face shares for a symlink entry e of the directory dirfd at path
 * (relative to the root rootfd): one that leads to something inside the workspace (followed
 * beneath the root as every path is) is described by what it leads to, its name kept: 1.
 * One that leaves the workspace, is absolute, dangles or loops: -1, e untouched. Not a
 * symlink: 0. Runs with the caller's rights (the user's). */
int fs_list_follow(struct fs_entry *e, int rootfd, int dirfd, const char *path);

/* The fields of a stat answer (GET ?stat=true, MCP's stat_file) into an open object: path,
 * name, type, size, mode, uid, gid, nlink, modified_at, created_at where the filesystem keeps
 * it, a symlink's symlink_target, a regular file's etag. */
struct jsonw;
void fs_write_stat(struct jsonw *w, const char *path, const struct fs_stat_info *in);

#endif
