/*
 * Packing (archive.h): a tar or zip of a tree made a piece at a time from an fd-based walk,
 * handed out as the client takes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <stdarg.h>
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

struct pack_dir {
    DIR *d;
    size_t prefix; /* length of rel for this directory's entries (with its '/') */
};

struct ar_pack {
    struct archive *a;
    struct archive_entry *e;
    struct fs_user u;
    struct pack_dir stack[SBXD_COPY_MAX_DEPTH + 1];
    unsigned depth; /* directories open on the stack */
    int file;       /* a file whose bytes are being stored, or -1 */
    uint64_t file_left;
    uint64_t entries, max_entries;
    char rel[PATH_MAX];
    char *buf; /* the archive's bytes not handed out yet: buf[off, len) */
    size_t off, len, cap;
    bool closed, done;
    int fail_errno;
    char fail[256];
    struct ar_stats st;
};

static la_ssize_t pack_write_cb(struct archive *a, void *cls, const void *data, size_t n)
{
    (void)a;
    struct ar_pack *p = cls;
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 65536;
        while (cap < p->len + n)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b)
            return -1;
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, n);
    p->len += n;
    return (la_ssize_t)n;
}

struct ar_pack *ar_pack_open(int rootfd, const char *path, enum ar_format fmt,
                             enum ar_filter filter, uint64_t max_entries, const struct fs_user *u,
                             struct sbxd_err *err)
{
    if (ar_load(err) < 0)
        return NULL;
    struct stat st;
    fs_user_enter(u);
    int fd = fs_open_read(rootfd, path, &st, err);
    fs_user_leave(u);
    if (fd < 0)
        return NULL;
    if (!S_ISDIR(st.st_mode)) {
        close(fd);
        sbxd_fail(err, SBXD_E_INVALID, ENOTDIR, "'%.200s' is not a directory: archive= packs one",
                  path);
        return NULL;
    }
    struct ar_pack *p = calloc(1, sizeof(*p));
    DIR *d = fdopendir(fd);
    if (!p || !d) {
        free(p);
        if (d)
            closedir(d);
        else
            close(fd);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    p->u = *u;
    p->file = -1;
    p->max_entries = max_entries;
    p->stack[0].d = d;
    p->depth = 1;
    locale_t was = uselocale(ar_utf8_locale);
    p->a = ar_lib.archive_write_new();
    p->e = ar_lib.archive_entry_new();
    int r = p->a && p->e ? ARCHIVE_OK : ARCHIVE_FATAL;
    if (r == ARCHIVE_OK)
        r = fmt == AR_ZIP ? ar_lib.archive_write_set_format_zip(p->a)
                          : ar_lib.archive_write_set_format_pax_restricted(p->a);
    if (r == ARCHIVE_OK && fmt == AR_TAR && filter == AR_GZIP)
        r = ar_lib.archive_write_add_filter_gzip(p->a);
    if (r == ARCHIVE_OK && fmt == AR_TAR && filter == AR_ZSTD)
        r = ar_lib.archive_write_add_filter_zstd(p->a);
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_write_set_bytes_in_last_block(p->a, 1); /* no padding past the end */
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_write_open(p->a, p, NULL, pack_write_cb, NULL);
    uselocale(was);
    if (r != ARCHIVE_OK) {
        sbxd_fail(err, SBXD_E_INTERNAL, EIO, "cannot begin the archive: %s",
                  p->a ? ar_why(p->a) : "out of memory");
        ar_pack_close(p);
        return NULL;
    }
    return p;
}

__attribute__((format(printf, 3, 4))) static int pack_failed(struct ar_pack *p, int e,
                                                             const char *fmt, ...)
{
    p->fail_errno = e ? e : EIO;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->fail, sizeof(p->fail), fmt, ap);
    va_end(ap);
    return -1;
}

/* Store the entry name of the directory on top of the stack: its header, then (a directory)
 * its walk, (a file) its bytes to come, (a symlink) its target. 0, or -1 with p->fail. */
static int pack_entry(struct ar_pack *p, int dirfd, const char *name)
{
    struct pack_dir *top = &p->stack[p->depth - 1];
    size_t nl = strlen(name);
    if (top->prefix + nl + 2 >= sizeof(p->rel))
        return pack_failed(p, ENAMETOOLONG, "a path is too long: '%.200s'", p->rel);
    memcpy(p->rel + top->prefix, name, nl + 1);
    if (++p->entries > p->max_entries)
        return pack_failed(p, E2BIG,
                           "the tree holds more than %llu entries (--max-archive-entries)",
                           (unsigned long long)p->max_entries);
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0; /* gone since the readdir */
    struct archive_entry *e = p->e;
    ar_lib.archive_entry_clear(e);
    ar_lib.archive_entry_set_perm(e, st.st_mode & 0777);
    ar_lib.archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    int fd = -1;
    char target[PATH_MAX];
    if (S_ISDIR(st.st_mode)) {
        if (p->depth > SBXD_COPY_MAX_DEPTH)
            return pack_failed(p, E2BIG, "the tree is deeper than the limit at '%.200s'", p->rel);
        fd = ar_open_sub(dirfd, name);
        if (fd < 0) {
            p->st.skipped++;
            return 0;
        }
        ar_lib.archive_entry_set_filetype(e, AE_IFDIR);
        memcpy(p->rel + top->prefix + nl, "/", 2);
    } else if (S_ISREG(st.st_mode)) {
        fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat fst;
        if (fd < 0 || fstat(fd, &fst) < 0 || !S_ISREG(fst.st_mode)) {
            if (fd >= 0)
                close(fd);
            p->st.skipped++; /* unreadable for the user, or swapped since */
            return 0;
        }
        st = fst;
        ar_lib.archive_entry_set_filetype(e, AE_IFREG);
        ar_lib.archive_entry_set_size(e, st.st_size);
    } else if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
        if (n < 0) {
            p->st.skipped++;
            return 0;
        }
        target[n] = '\0';
        ar_lib.archive_entry_set_filetype(e, AE_IFLNK);
        ar_lib.archive_entry_set_symlink(e, target);
    } else {
        p->st.skipped++;
        return 0;
    }
    ar_lib.archive_entry_set_pathname(e, p->rel);
    if (ar_lib.archive_write_header(p->a, e) < ARCHIVE_WARN) {
        if (fd >= 0)
            close(fd);
        return pack_failed(p, EIO, "cannot store an entry: %s", ar_why(p->a));
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = fdopendir(fd);
        if (!d) {
            close(fd);
            return pack_failed(p, ENOMEM, "out of memory at '%.200s'", p->rel);
        }
        p->stack[p->depth].d = d;
        p->stack[p->depth].prefix = top->prefix + nl + 1;
        p->depth++;
        p->st.directories++;
    } else if (S_ISREG(st.st_mode)) {
        p->st.files++;
        if (st.st_size > 0) {
            p->file = fd;
            p->file_left = (uint64_t)st.st_size;
        } else {
            close(fd);
        }
    } else {
        p->st.symlinks++;
    }
    return 0;
}

/* One step: a piece of a file's bytes, or the next entry, or the end. */
static int pack_step(struct ar_pack *p)
{
    if (p->file >= 0) {
        char buf[65536];
        size_t want = p->file_left < sizeof(buf) ? (size_t)p->file_left : sizeof(buf);
        ssize_t n = read(p->file, buf, want);
        if (n < 0 && errno == EINTR)
            return 0;
        if (n < 0)
            return pack_failed(p, errno, "cannot read '%.200s'", p->rel);
        if (n == 0) {
            /* Shorter than when its header was stored: the rest is zeros, as tar does. */
            memset(buf, 0, want);
            n = (ssize_t)want;
        }
        if (ar_lib.archive_write_data(p->a, buf, (size_t)n) < 0)
            return pack_failed(p, EIO, "cannot store bytes: %s", ar_why(p->a));
        p->st.bytes += (uint64_t)n;
        p->file_left -= (uint64_t)n;
        if (p->file_left == 0) {
            close(p->file);
            p->file = -1;
        }
        return 0;
    }
    if (p->depth == 0) {
        if (ar_lib.archive_write_close(p->a) != ARCHIVE_OK)
            return pack_failed(p, EIO, "cannot end the archive: %s", ar_why(p->a));
        p->closed = true;
        return 0;
    }
    struct pack_dir *top = &p->stack[p->depth - 1];
    errno = 0;
    struct dirent *de = readdir(top->d);
    if (!de) {
        if (errno)
            return pack_failed(p, errno, "cannot read the directory '%.200s'", p->rel);
        closedir(top->d);
        top->d = NULL;
        p->depth--;
        return 0;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 || ar_is_temp(de->d_name))
        return 0;
    return pack_entry(p, dirfd(top->d), de->d_name);
}

ssize_t ar_pack_read(struct ar_pack *p, char *out, size_t max, struct sbxd_err *err)
{
    if (p->off) { /* (what is left of the last block to the front: the buffer stays small) */
        memmove(p->buf, p->buf + p->off, p->len - p->off);
        p->len -= p->off;
        p->off = 0;
    }
    locale_t was = uselocale(ar_utf8_locale);
    fs_user_enter(&p->u);
    /* Up to max at once: libarchive hands out a block (10 KiB) at a time, and a chunk per
     * block would be a send and a chunk header each. */
    while (p->len - p->off < max && !p->closed && !p->fail[0])
        pack_step(p);
    fs_user_leave(&p->u);
    uselocale(was);
    if (p->off == p->len && p->fail[0])
        return sbxd_fail(err, p->fail_errno == E2BIG ? SBXD_E_TOO_LARGE : SBXD_E_INTERNAL,
                         p->fail_errno, "%s", p->fail);
    size_t n = p->len - p->off < max ? p->len - p->off : max;
    memcpy(out, p->buf + p->off, n);
    p->off += n;
    return (ssize_t)n;
}

const struct ar_stats *ar_pack_stats(const struct ar_pack *p)
{
    return &p->st;
}

void ar_pack_close(struct ar_pack *p)
{
    if (!p)
        return;
    if (p->file >= 0)
        close(p->file);
    for (unsigned i = 0; i < p->depth; i++)
        if (p->stack[i].d)
            closedir(p->stack[i].d);
    if (p->a)
        ar_lib.archive_write_free(p->a);
    if (p->e)
        ar_lib.archive_entry_free(p->e);
    free(p->buf);
    free(p);
}
