/*
 * An extraction's entries (archive.h): each file, link and directory made by sbxd itself in
 * the temporary directory, one component at a time with O_NOFOLLOW, within the archive's
 * limits; the directories' records, their modes and times set at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/archive.h"
#include "sbxd/cleanup.h"
#include "sbxd/fs_limits.h"

#include "archive_internal.h"
#include "files_internal.h"

/* The archive's bytes (expanded) left before --max-archive-bytes: its files' contents and
 * its headers (names, link targets, padding) count alike, so that a bomb of headers (100,000
 * entries naming a 3.8 KB path: 512 MB of them in 2.6 MB gzipped) is bounded as one of
 * contents is. */
static uint64_t room_left(const struct ar_extract *x)
{
    uint64_t used = x->st.bytes + x->header_bytes;
    return used >= x->lim.max_bytes ? 0 : x->lim.max_bytes - used;
}

/* The set's hash of a path: SipHash under a key drawn for the extraction, so that no archive
 * can be made of names that all land in one probe chain (each new directory would then cost
 * a comparison with every one before it). */
static size_t path_hash(const struct ar_extract *x, const char *s, size_t n)
{
    unsigned char h[crypto_shorthash_BYTES];
    crypto_shorthash(h, (const unsigned char *)s, n, x->hash_key);
    uint64_t v;
    memcpy(&v, h, sizeof(v));
    return (size_t)v;
}

/* The record of the directory path (its first len bytes), or NULL. */
static struct dir_rec *dir_find(const struct ar_extract *x, const char *path, size_t len)
{
    if (!x->nslots)
        return NULL;
    size_t mask = x->nslots - 1;
    for (size_t i = path_hash(x, path, len) & mask;; i = (i + 1) & mask) {
        uint32_t k = x->dir_slots[i];
        if (!k)
            return NULL;
        const struct dir_rec *r = &x->dirs[k - 1];
        if (r->len == len && memcmp(r->path, path, len) == 0)
            return (struct dir_rec *)r;
    }
}

static void dir_slot_put(const struct ar_extract *x, uint32_t *slots, size_t nslots,
                         const struct dir_rec *r, uint32_t k)
{
    size_t mask = nslots - 1, i = path_hash(x, r->path, r->len) & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = k;
}

/* A record for the directory path (its first len bytes), not recorded yet. The records, their
 * set and their paths hold at most SBXD_ARCHIVE_DIR_MEMORY_PER_ENTRY bytes per entry the
 * limits allow: an archive that makes more directories than that (or names them with longer
 * paths) is refused, never a memory exhaustion. */
static struct dir_rec *dir_add(struct ar_extract *x, const char *path, size_t len)
{
    uint64_t most = x->lim.max_entries > UINT64_MAX / SBXD_ARCHIVE_DIR_MEMORY_PER_ENTRY
                        ? UINT64_MAX
                        : x->lim.max_entries * SBXD_ARCHIVE_DIR_MEMORY_PER_ENTRY;
    if (most < SBXD_ARCHIVE_DIR_MEMORY_MIN)
        most = SBXD_ARCHIVE_DIR_MEMORY_MIN;
    size_t cap = x->capdirs, nslots = x->nslots;
    if (x->ndirs == cap)
        cap = cap ? 2 * cap : 64;
    if (2 * (x->ndirs + 1) > nslots)
        nslots = nslots ? 2 * nslots : 128;
    size_t pathmem = (len + 1 + 8 + 15) / 16 * 16; /* (malloc's header and rounding) */
    if (x->path_memory + pathmem + cap * sizeof(*x->dirs) + nslots * sizeof(*x->dir_slots) > most) {
        sbxd_fail(&x->err, SBXD_E_TOO_LARGE, E2BIG,
                  "the archive makes more directories than sbxd keeps track of (%llu bytes of "
                  "records, their paths included: %d per entry --max-archive-entries allows) "
                  "at '%.*s'",
                  (unsigned long long)most, SBXD_ARCHIVE_DIR_MEMORY_PER_ENTRY,
                  (int)(len < 200 ? len : 200), path);
        return NULL;
    }
    if (cap != x->capdirs) {
        struct dir_rec *d = realloc(x->dirs, cap * sizeof(*d));
        if (!d)
            goto oom;
        x->dirs = d;
        x->capdirs = cap;
    }
    if (nslots != x->nslots) {
        uint32_t *slots = calloc(nslots, sizeof(*slots));
        if (!slots)
            goto oom;
        for (size_t i = 0; i < x->ndirs; i++)
            dir_slot_put(x, slots, nslots, &x->dirs[i], (uint32_t)i + 1);
        free(x->dir_slots);
        x->dir_slots = slots;
        x->nslots = nslots;
    }
    struct dir_rec *r = &x->dirs[x->ndirs];
    *r = (struct dir_rec){.path = strndup(path, len), .len = (uint32_t)len};
    if (!r->path)
        goto oom;
    for (const char *s = r->path; (s = strchr(s, '/')); s++)
        r->level++;
    x->ndirs++;
    x->path_memory += pathmem;
    dir_slot_put(x, x->dir_slots, x->nslots, r, (uint32_t)x->ndirs);
    return r;
oom:
    sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return NULL;
}

/* A record's mode, and e's time (with e). */
static void dir_set(struct dir_rec *r, mode_t mode, struct archive_entry *e)
{
    r->mode = mode;
    if (e && ar_lib.archive_entry_mtime_is_set(e)) {
        r->has_mtime = true;
        r->mtime_s = ar_lib.archive_entry_mtime(e);
        r->mtime_ns = ar_lib.archive_entry_mtime_nsec(e);
    }
}

int ar_dir_note(struct ar_extract *x, const char *path, size_t len, mode_t mode,
                struct archive_entry *e)
{
    struct dir_rec *r = dir_find(x, path, len);
    if (r && !e)
        return 0;
    if (!r && !(r = dir_add(x, path, len)))
        return -1;
    dir_set(r, mode, e);
    return 0;
}

/* Open the directory comp of dfd, whose path beneath the temporary directory is the first
 * len bytes of path, with O_NOFOLLOW, making it when missing and make (noted with the default
 * mode): an fd, or -1 with x->err. A symlink or a file where a directory goes refuses the
 * archive (entry: the entry on whose way it is). */
static int open_child(struct ar_extract *x, int dfd, const char *comp, const char *path, size_t len,
                      bool make, const char *entry)
{
    int sub = ar_open_sub(dfd, comp);
    if (sub < 0 && errno == ENOENT && make) {
        if (mkdirat(dfd, comp, 0700) < 0 && errno != EEXIST)
            return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                                   "cannot make a directory for '%.200s'", entry);
        x->st.directories++;
        if (ar_dir_note(x, path, len, x->u.dir_mode, NULL) < 0)
            return -1;
        sub = ar_open_sub(dfd, comp);
    }
    if (sub < 0) {
        int e = errno;
        if (e == ELOOP || e == ENOTDIR)
            return sbxd_fail(&x->err, SBXD_E_DENIED, e,
                             "'%.200s' goes through '%.200s', which is not a directory of the "
                             "archive (a symlink or a file)",
                             entry, comp);
        return sbxd_fail_errno(&x->err, fs_errno_kind(e), e, "cannot open a directory of '%.200s'",
                               entry);
    }
    return sub;
}

/* Open the directory path beneath the temporary directory, one component at a time (as
 * open_child), making what is missing when make: an fd, or -1 with x->err. */
static int open_dir(struct ar_extract *x, const char *path, bool make, const char *entry)
{
    int fd = dup(x->tfd);
    if (fd < 0)
        return sbxd_fail_errno(&x->err, SBXD_E_INTERNAL, errno, "out of descriptors");
    char comp[NAME_MAX + 1];
    const char *s = path;
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);
        memcpy(comp, s, n);
        comp[n] = '\0';
        int sub = open_child(x, fd, comp, path, (size_t)(end - path), make, entry);
        close(fd);
        if (sub < 0)
            return -1;
        fd = sub;
        s = *end ? end + 1 : end;
    }
    return fd;
}

/* The directory that holds the entry path (its last component into leaf): kept open from the
 * entry before when it is the same. An fd that is the cache's (not to be closed), or -1. */
static int parent_of(struct ar_extract *x, const char *path, char *leaf, bool make)
{
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 0;
    snprintf(leaf, NAME_MAX + 1, "%s", slash ? slash + 1 : path);
    if (x->cache_fd >= 0 && strlen(x->cache_path) == dl && memcmp(x->cache_path, path, dl) == 0)
        return x->cache_fd;
    char *dir = strndup(path, dl);
    if (!dir)
        return sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int fd = open_dir(x, dir, make, path);
    if (fd < 0) {
        free(dir);
        return -1;
    }
    if (x->cache_fd >= 0)
        close(x->cache_fd);
    free(x->cache_path);
    x->cache_path = dir;
    x->cache_fd = fd;
    return fd;
}

/* Make room for a new non-directory leaf: what an earlier entry of the same name made goes
 * (a later entry wins, as tar has it), but not a directory. */
static int clear_leaf(struct ar_extract *x, int dfd, const char *leaf, const char *path)
{
    struct stat st;
    if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    if (S_ISDIR(st.st_mode))
        return sbxd_fail(&x->err, SBXD_E_CONFLICT, EISDIR,
                         "'%.200s' is a directory earlier in the archive", path);
    if (unlinkat(dfd, leaf, 0) < 0)
        return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno, "cannot replace '%.200s'",
                               path);
    return 0;
}

static int extract_file(struct ar_extract *x, struct archive *a, struct archive_entry *e,
                        const char *path, mode_t mode)
{
    char leaf[NAME_MAX + 1];
    int dfd = parent_of(x, path, leaf, true);
    if (dfd < 0)
        return -1;
    if (ar_lib.archive_entry_size_is_set(e) &&
        (uint64_t)ar_lib.archive_entry_size(e) > room_left(x))
        return sbxd_fail(&x->err, SBXD_E_TOO_LARGE, EFBIG,
                         "the archive expands past %llu bytes (--max-archive-bytes) at '%.200s'",
                         (unsigned long long)x->lim.max_bytes, path);
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    autoclose int fd = openat(dfd, leaf, flags, 0600);
    if (fd < 0 && errno == EEXIST) { /* (an earlier entry of the same name: this one wins) */
        if (clear_leaf(x, dfd, leaf, path) < 0)
            return -1;
        fd = openat(dfd, leaf, flags, 0600);
    }
    if (fd < 0)
        return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno, "cannot make '%.200s'", path);
    x->st.files++;
    for (;;) {
        la_ssize_t n = ar_lib.archive_read_data(a, x->buf, sizeof(x->buf));
        if (n == 0)
            break;
        if (n < 0)
            return sbxd_fail(&x->err, SBXD_E_INVALID, EINVAL,
                             "the archive is damaged at '%.200s': %s", path, ar_why(a));
        if ((uint64_t)n > room_left(x))
            return sbxd_fail(
                &x->err, SBXD_E_TOO_LARGE, EFBIG,
                "the archive expands past %llu bytes (--max-archive-bytes) at '%.200s'",
                (unsigned long long)x->lim.max_bytes, path);
        for (la_ssize_t w = 0; w < n;) {
            ssize_t k = write(fd, x->buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                                       "cannot write '%.200s'", path);
            w += k;
        }
        x->st.bytes += (uint64_t)n;
    }
    if (fchmod(fd, mode) < 0)
        return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                               "cannot set the mode of '%.200s'", path);
    if (ar_lib.archive_entry_mtime_is_set(e)) {
        struct timespec ts[2] = {
            {0, UTIME_OMIT}, {ar_lib.archive_entry_mtime(e), ar_lib.archive_entry_mtime_nsec(e)}};
        futimens(fd, ts);
    }
    return 0;
}

static int extract_link(struct ar_extract *x, struct archive_entry *e, const char *path, bool hard)
{
    char leaf[NAME_MAX + 1];
    const char *target = hard ? ar_lib.archive_entry_hardlink(e) : ar_lib.archive_entry_symlink(e);
    if (!target || !*target)
        return sbxd_fail(&x->err, SBXD_E_INVALID, EINVAL, "the link '%.200s' has no target", path);
    if (!hard) {
        if (!ar_link_inside(path, target, x->dest_depth))
            return sbxd_fail(&x->err, SBXD_E_DENIED, EPERM,
                             "the symlink '%.200s' -> '%.200s' leaves the workspace", path, target);
        int dfd = parent_of(x, path, leaf, true);
        if (dfd < 0 || clear_leaf(x, dfd, leaf, path) < 0)
            return -1;
        if (symlinkat(target, dfd, leaf) < 0)
            return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno, "cannot make '%.200s'",
                                   path);
        x->st.symlinks++;
        return 0;
    }
    /* A hard link names a file this archive made before: resolved in the temporary directory
     * (never beyond it), and only a regular file. */
    char *to = malloc(PATH_MAX);
    if (!to)
        return sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct sbxd_err nerr = {0};
    if (ar_entry_name(target, to, &nerr) < 0 || !*to) {
        free(to);
        return sbxd_fail(&x->err, SBXD_E_DENIED, EPERM,
                         "the hard link '%.200s' -> '%.200s' names nothing the archive made", path,
                         target);
    }
    char tleaf[NAME_MAX + 1];
    const char *slash = strrchr(to, '/');
    snprintf(tleaf, sizeof(tleaf), "%s", slash ? slash + 1 : to);
    if (slash)
        to[slash - to] = '\0';
    else
        to[0] = '\0';
    autoclose int sfd = open_dir(x, to, false, path);
    free(to);
    struct stat st;
    if (sfd < 0 || fstatat(sfd, tleaf, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode)) {
        x->err = (struct sbxd_err){0};
        return sbxd_fail(&x->err, SBXD_E_DENIED, EPERM,
                         "the hard link '%.200s' -> '%.200s' names no file the archive made", path,
                         target);
    }
    int dfd = parent_of(x, path, leaf, true);
    if (dfd < 0 || clear_leaf(x, dfd, leaf, path) < 0)
        return -1;
    if (linkat(sfd, tleaf, dfd, leaf, 0) < 0)
        return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno, "cannot link '%.200s'", path);
    x->st.hardlinks++;
    return 0;
}

int ar_tree_entry(struct ar_extract *x, struct archive *a, struct archive_entry *e)
{
    char *path = malloc(PATH_MAX);
    if (!path)
        return sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int rc = ar_entry_name(ar_lib.archive_entry_pathname(e), path, &x->err);
    mode_t mode = ar_lib.archive_entry_mode(e);
    unsigned type = ar_lib.archive_entry_filetype(e);
    bool hard = ar_lib.archive_entry_hardlink(e) != NULL;
    unsigned levels = 0;
    for (const char *t = path; rc == 0 && (t = strchr(t, '/')); t++)
        levels++;
    if (rc == 0 && levels >= SBXD_COPY_MAX_DEPTH)
        rc = sbxd_fail(&x->err, SBXD_E_TOO_LARGE, E2BIG, "'%.200s' is deeper than %u levels", path,
                       SBXD_COPY_MAX_DEPTH);
    else if (rc == 0 && !*path && !(type == AE_IFDIR))
        rc = sbxd_fail(&x->err, SBXD_E_INVALID, EINVAL,
                       "an entry that is not a directory has "
                       "no name");
    else if (rc == 0 && (mode & (S_ISUID | S_ISGID)))
        rc =
            sbxd_fail(&x->err, SBXD_E_DENIED, EPERM, "'%.200s' is setuid or setgid: refused", path);
    else if (rc == 0 && *path && ar_is_temp(strrchr(path, '/') ? strrchr(path, '/') + 1 : path))
        rc = sbxd_fail(&x->err, SBXD_E_DENIED, EPERM, "'%.200s' has a name sbxd keeps for itself",
                       path);
    else if (rc == 0 && hard)
        rc = extract_link(x, e, path, true);
    else if (rc == 0 && type == AE_IFREG)
        rc = extract_file(x, a, e, path, mode & 0777);
    else if (rc == 0 && type == AE_IFLNK)
        rc = extract_link(x, e, path, false);
    else if (rc == 0 && type == AE_IFDIR) {
        /* A directory made before is its record alone: an archive that names one deep
         * directory 100,000 times costs neither a walk down to it nor memory each time. */
        size_t len = strlen(path);
        struct dir_rec *known = dir_find(x, path, len);
        if (known) {
            dir_set(known, mode & 0777, e);
        } else {
            char leaf[NAME_MAX + 1];
            int dfd = parent_of(x, path, leaf, true);
            int fd = dfd < 0 ? -1 : open_child(x, dfd, leaf, path, len, true, path);
            rc = fd < 0 ? -1 : 0;
            if (fd >= 0)
                close(fd);
            if (rc == 0)
                rc = ar_dir_note(x, path, len, mode & 0777, e);
        }
    } else if (rc == 0)
        rc = sbxd_fail(&x->err, SBXD_E_DENIED, EPERM,
                       "'%.200s' is a %s: only files, directories and links are extracted", path,
                       type == AE_IFCHR || type == AE_IFBLK ? "device"
                       : type == AE_IFIFO                   ? "fifo"
                       : type == AE_IFSOCK                  ? "socket"
                                                            : "special file");
    free(path);
    return rc;
}

static int level_desc(const void *a, const void *b)
{
    const struct dir_rec *x = a, *y = b;
    return x->level < y->level ? 1 : x->level > y->level ? -1 : 0;
}

int ar_tree_dirs_apply(struct ar_extract *x)
{
    qsort(x->dirs, x->ndirs, sizeof(*x->dirs), level_desc);
    free(x->dir_slots);
    x->dir_slots = NULL;
    x->nslots = 0;
    for (size_t i = 0; i < x->ndirs; i++) {
        struct dir_rec *r = &x->dirs[i];
        int fd = *r->path ? open_dir(x, r->path, false, r->path) : dup(x->tfd);
        if (fd < 0)
            return -1;
        fchmod(fd, r->mode);
        if (r->has_mtime) {
            struct timespec ts[2] = {{0, UTIME_OMIT}, {r->mtime_s, r->mtime_ns}};
            futimens(fd, ts);
        }
        close(fd);
    }
    return 0;
}
