/*
 * archive.h - whole trees in and out of the workspace, as tar or zip, with libarchive.
 *
 * libarchive is loaded at the first archive, not linked: with its compression libraries it
 * would add about 3 MiB to the resident memory of a daemon that never packs a tree.
 *
 * Packing walks the tree through fds, never following a symlink (a symlink is stored as a
 * link), and hands the archive out a piece at a time as the client takes it: memory does not
 * depend on the tree. Fifos, sockets and devices are passed over and counted.
 *
 * Extraction never lets libarchive write to disk: sbxd reads each entry's header and bytes
 * and makes the entry itself, one component at a time relative to the fd of its directory
 * with O_NOFOLLOW, in a temporary directory beside the destination; names that are absolute
 * or hold "..", symlinks that lead out of the workspace, hard links to anything but a file
 * extracted before, devices, fifos and setuid or setgid bits refuse the whole archive. A
 * symlink is judged by its text as it comes, then where it leads once the whole archive is
 * extracted: followed through the tree as it will be, every link on its way followed (the
 * archive's, and the workspace's where the archive is merged). The entry count and the bytes
 * the archive expands to (its headers too) are bounded (a bomb is refused), and so is the
 * memory of the records kept of the directories made (one per directory). Only a whole, valid
 * archive reaches the destination: it is renamed in place (a new directory), merged into it
 * (an existing one: files of the same name replaced), or swapped with it (replace). A failed
 * extraction leaves the destination as it was and no temporary directory.
 */
#ifndef SBXD_ARCHIVE_H
#define SBXD_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/err.h"
#include "sbxd/files.h"

enum ar_format { AR_TAR, AR_ZIP };
enum ar_filter { AR_NONE, AR_GZIP, AR_ZSTD };

/* What a pack or an extraction went through. */
struct ar_stats {
    uint64_t files, directories, symlinks, hardlinks, bytes;
    uint64_t skipped; /* packing: fifos, sockets, devices and unreadable entries, not stored */
};

/* Load libarchive (once): 0, or -1 with err (SBXD_E_UNAVAILABLE: not installed). */
int ar_load(struct sbxd_err *err);

/* ---- packing ---- */

struct ar_pack;

/* Begin packing the directory path (symlinks inside the root followed to reach it, as every
 * route does) as fmt, compressed by filter (tar only). Entries are named relative to it. The
 * walk goes at most max_entries entries and SBXD_COPY_MAX_DEPTH levels deep (past either, the
 * archive ends with an error: never a silently partial tree). File access is u's. */
struct ar_pack *ar_pack_open(int rootfd, const char *path, enum ar_format fmt,
                             enum ar_filter filter, uint64_t max_entries, const struct fs_user *u,
                             struct sbxd_err *err);

/* The next bytes of the archive into out (at most max): how many, 0 at its end, -1 with err
 * (the archive cannot be completed). File access is u's (entered here). */
ssize_t ar_pack_read(struct ar_pack *p, char *out, size_t max, struct sbxd_err *err);

/* What was packed so far. */
const struct ar_stats *ar_pack_stats(const struct ar_pack *p);

void ar_pack_close(struct ar_pack *p);

/* ---- extraction ---- */

struct ar_limits {
    uint64_t max_entries; /* entries of any type */
    uint64_t max_bytes;   /* bytes expanded: the files' contents and the headers together */
};

struct ar_extract;

/* Begin extracting into the directory path (made, with its parents, when missing): a thread
 * of its own reads the archive (tar in any of its forms, or zip; plain or compressed with
 * gzip, zstd, xz or bzip2, recognised from its bytes) as ar_extract_feed gives it. With
 * replace, the directory becomes the archive's tree (what it held goes); without, the
 * archive's entries merge into it. NULL with err. */
struct ar_extract *ar_extract_begin(int rootfd, const char *path, bool replace,
                                    const struct ar_limits *lim, const struct fs_user *u,
                                    struct sbxd_err *err);

/* The next bytes of the archive (blocks until the extraction took them): 0, or -1 once the
 * extraction failed (the rest may be dropped; ar_extract_end says why). */
int ar_extract_feed(struct ar_extract *x, const void *data, size_t n);

/* The archive is complete (whole: false when the client went away, which abandons it):
 * wait for the extraction and, when it succeeded, put the tree in place. 0 with st, or -1
 * with err; either way nothing of the extraction stays behind but a success. x is freed. */
int ar_extract_end(struct ar_extract *x, bool whole, struct ar_stats *st, struct sbxd_err *err);

/* ---- the checks extraction makes, on their own (and fuzzed) ---- */

/* An entry's name as the archive has it into out (PATH_MAX): components joined by one '/',
 * "." and empty components dropped. -1 (with err) for an absolute name, a ".." component, a
 * name over the limits or one with nothing left ("." alone gives ""). */
int ar_entry_name(const char *name, char *out, struct sbxd_err *err);

/* Whether a symlink at the (normalised) entry name, in a destination depth directories
 * below the workspace root, with this target stays inside the workspace by its text: a
 * relative target whose ".." never climbs above the root. (The first check of a link: where
 * it leads once the links on its way are followed is judged when the archive is whole.) */
bool ar_link_inside(const char *name, const char *target, unsigned depth);

#endif
