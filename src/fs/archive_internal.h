/*
 * archive_internal.h - what the files of archive.h share (archive.c: libarchive's table and
 * the names; archive_pack.c: packing; archive_extract.c: an extraction's life;
 * archive_tree.c: its entries made in the temporary tree; archive_links.c: where its
 * symlinks lead); nothing outside src/fs includes it.
 */
#ifndef SBXD_ARCHIVE_INTERNAL_H
#define SBXD_ARCHIVE_INTERNAL_H

#include <archive.h>
#include <archive_entry.h>
#include <locale.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/archive.h"
#include "sbxd/err.h"
#include "sbxd/files.h"

#define AR_LIBRARY "libarchive.so.13"
#define AR_FUNCS(X)                                                                                \
    X(archive_error_string)                                                                        \
    X(archive_write_new)                                                                           \
    X(archive_write_set_format_pax_restricted)                                                     \
    X(archive_write_set_format_zip)                                                                \
    X(archive_write_add_filter_gzip)                                                               \
    X(archive_write_add_filter_zstd)                                                               \
    X(archive_write_set_bytes_in_last_block)                                                       \
    X(archive_write_open)                                                                          \
    X(archive_write_header)                                                                        \
    X(archive_write_data)                                                                          \
    X(archive_write_finish_entry)                                                                  \
    X(archive_write_close)                                                                         \
    X(archive_write_free)                                                                          \
    X(archive_read_new)                                                                            \
    X(archive_read_support_format_tar)                                                             \
    X(archive_read_support_format_zip)                                                             \
    X(archive_read_support_filter_gzip)                                                            \
    X(archive_read_support_filter_zstd)                                                            \
    X(archive_read_support_filter_xz)                                                              \
    X(archive_read_support_filter_bzip2)                                                           \
    X(archive_read_open)                                                                           \
    X(archive_read_next_header)                                                                    \
    X(archive_read_data)                                                                           \
    X(archive_read_free)                                                                           \
    X(archive_filter_bytes)                                                                        \
    X(archive_entry_new)                                                                           \
    X(archive_entry_free)                                                                          \
    X(archive_entry_clear)                                                                         \
    X(archive_entry_set_pathname)                                                                  \
    X(archive_entry_set_symlink)                                                                   \
    X(archive_entry_set_size)                                                                      \
    X(archive_entry_set_filetype)                                                                  \
    X(archive_entry_set_perm)                                                                      \
    X(archive_entry_set_mtime)                                                                     \
    X(archive_entry_pathname)                                                                      \
    X(archive_entry_symlink)                                                                       \
    X(archive_entry_hardlink)                                                                      \
    X(archive_entry_filetype)                                                                      \
    X(archive_entry_mode)                                                                          \
    X(archive_entry_size)                                                                          \
    X(archive_entry_size_is_set)                                                                   \
    X(archive_entry_mtime)                                                                         \
    X(archive_entry_mtime_nsec)                                                                    \
    X(archive_entry_mtime_is_set)

/* libarchive's functions, loaded by ar_load (archive.c). */
struct ar_lib {
#define AR_DECL(f) __typeof__(&f) f;
    AR_FUNCS(AR_DECL)
#undef AR_DECL
};
extern struct ar_lib ar_lib;

/* Names are UTF-8 to libarchive: its conversions follow the thread's locale, which is "C" in
 * sbxd (and a non-ASCII name in "C" is one libarchive cannot convert, or crashes on). The
 * threads that pack or extract use this one while they do. */
extern locale_t ar_utf8_locale;

/* libarchive's message for a's last error. */
const char *ar_why(struct archive *a);

/* Names sbxd's own temporary entries have: never packed, never extracted over. */
bool ar_is_temp(const char *name);

/* Open the directory name in dfd, never through a symlink: O_NOFOLLOW, and (where that is not
 * enough: gVisor follows a symlink with O_DIRECTORY | O_NOFOLLOW) the entry's own stat, which
 * must be a directory and the very one opened. -1 with errno (ELOOP for a symlink). */
int ar_open_sub(int dfd, const char *name);

/* ---- an extraction (archive_extract.c, archive_tree.c, archive_links.c) ---- */

/* A directory the extraction made (or that the archive names): its mode and time are set at
 * the end, deepest first. One record per directory, however often the archive names it. */
struct dir_rec {
    char *path;
    uint32_t len;
    unsigned level;
    mode_t mode;
    bool has_mtime;
    int64_t mtime_s, mtime_ns;
};

struct ar_extract {
    int rootfd;
    struct fs_user u;
    struct ar_limits lim;
    bool replace;
    char *dest;          /* the destination, as the request named it (normalised) */
    unsigned dest_depth; /* its components beneath the root */
    int pfd;             /* its parent directory */
    char name[NAME_MAX + 1];
    char tmp[40]; /* the temporary directory in pfd ("" once gone) */
    int tfd;      /* open on it */
    int in[2];    /* the archive's bytes: fed to in[1], read from in[0] */
    pthread_t thread;
    bool started;
    /* The extraction's, read once the thread is joined. */
    struct sbxd_err err;
    struct ar_stats st;
    uint64_t entries;
    uint64_t header_bytes; /* of the archive's bytes, those that are not files' contents */
    struct dir_rec *dirs;
    size_t ndirs, capdirs;
    uint32_t *dir_slots; /* a hash set of dirs by path: index + 1, 0 for a free slot */
    unsigned char hash_key[crypto_shorthash_KEYBYTES]; /* the set's, drawn for this one */
    size_t nslots;                                     /* a power of two, over twice ndirs */
    size_t path_memory;                                /* what the records' paths hold */
    /* The directory of the last file made, kept open for the next one. */
    char *cache_path;
    int cache_fd;
    char in_buf[65536]; /* the archive as read from the pipe (libarchive's until the next read) */
    char buf[65536];    /* a file's bytes on their way to it */
};

/* Make the entry e (its bytes read from a) in the temporary tree: 0, or -1 with x->err. */
int ar_tree_entry(struct ar_extract *x, struct archive *a, struct archive_entry *e);

/* Note the directory path (its first len bytes) for its mode and time at the end: with e (an
 * entry of the archive that names it), mode and the entry's time, a later entry winning as
 * tar has it; without (made on the way to an entry), mode if it is not noted yet. A directory
 * named 100,000 times is one record. 0, or -1 with x->err. */
int ar_dir_note(struct ar_extract *x, const char *path, size_t len, mode_t mode,
                struct archive_entry *e);

/* The directories' modes and times, deepest first (a directory made read-only last). The
 * records' set is no use after. */
int ar_tree_dirs_apply(struct ar_extract *x);

/* Each symlink of the extracted tree, judged where it leads: 0, or -1 with x->err. */
int ar_links_check(struct ar_extract *x);

#endif
