/*
 * Whole trees as tar or zip (archive.h): libarchive loaded at first use, a pack made a piece
 * at a time from an fd-based walk, and an extraction of sbxd's own making.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/archive.h"
#include "sbxd/cleanup.h"
#include "sbxd/limits.h"
#include "sbxd/resolve.h"
#include "sbxd/timeutil.h"

#include "files_internal.h"

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

static struct {
#define AR_DECL(f) __typeof__(&f) f;
    AR_FUNCS(AR_DECL)
#undef AR_DECL
} L;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[200]; /* why libarchive is not there ("" once loaded) */
/* Names are UTF-8 to libarchive: its conversions follow the thread's locale, which is "C" in
 * sbxd (and a non-ASCII name in "C" is one libarchive cannot convert, or crashes on). The
 * threads that pack or extract use this one while they do. */
static locale_t utf8_locale;

static void load(void)
{
    utf8_locale = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
    if (!utf8_locale) {
        snprintf(load_error, sizeof(load_error), "no C.UTF-8 locale: %s", strerror(errno));
        return;
    }
    void *h = dlopen(AR_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof(load_error), "cannot load %s (Debian's libarchive13): %s",
                 AR_LIBRARY, dlerror());
        return;
    }
#define AR_LOAD(f)                                                                                 \
    if (!(L.f = (__typeof__(&f))dlsym(h, #f))) {                                                   \
        snprintf(load_error, sizeof(load_error), "%s has no %s", AR_LIBRARY, #f);                  \
        return;                                                                                    \
    }
    AR_FUNCS(AR_LOAD)
#undef AR_LOAD
}

int ar_load(struct sbxd_err *err)
{
    snprintf(load_error, sizeof(load_error), "libarchive is not loaded");
    pthread_once(&load_once, load);
    if (L.archive_entry_mtime_is_set)
        return 0;
    return sbxd_fail(err, SBXD_E_UNAVAILABLE, ENOSYS, "archives are unavailable: %s", load_error);
}

static const char *ar_why(struct archive *a)
{
    const char *s = L.archive_error_string(a);
    return s ? s : "unknown error";
}

/* Names sbxd's own temporary entries have: never packed, never extracted over. */
static bool sbxd_temp(const char *name)
{
    return strncmp(name, ".sbxd-upload-", 13) == 0 || strncmp(name, ".sbxd-copy-", 11) == 0 ||
           strncmp(name, ".sbxd-extract-", 14) == 0;
}

/* Open the directory name in dfd, never through a symlink: O_NOFOLLOW, and (where that is not
 * enough: gVisor follows a symlink with O_DIRECTORY | O_NOFOLLOW) the entry's own stat, which
 * must be a directory and the very one opened. -1 with errno (ELOOP for a symlink). */
static int open_sub(int dfd, const char *name)
{
    struct stat ls, st;
    if (fstatat(dfd, name, &ls, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (!S_ISDIR(ls.st_mode)) {
        errno = S_ISLNK(ls.st_mode) ? ELOOP : ENOTDIR;
        return -1;
    }
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_dev != ls.st_dev || st.st_ino != ls.st_ino)) {
        close(fd);
        errno = ELOOP; /* swapped for a link since */
        return -1;
    }
    return fd;
}

/* ---------------------------------------------------------------------------------- */
/* Packing                                                                              */

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
    locale_t was = uselocale(utf8_locale);
    p->a = L.archive_write_new();
    p->e = L.archive_entry_new();
    int r = p->a && p->e ? ARCHIVE_OK : ARCHIVE_FATAL;
    if (r == ARCHIVE_OK)
        r = fmt == AR_ZIP ? L.archive_write_set_format_zip(p->a)
                          : L.archive_write_set_format_pax_restricted(p->a);
    if (r == ARCHIVE_OK && fmt == AR_TAR && filter == AR_GZIP)
        r = L.archive_write_add_filter_gzip(p->a);
    if (r == ARCHIVE_OK && fmt == AR_TAR && filter == AR_ZSTD)
        r = L.archive_write_add_filter_zstd(p->a);
    if (r == ARCHIVE_OK)
        r = L.archive_write_set_bytes_in_last_block(p->a, 1); /* no padding past the end */
    if (r == ARCHIVE_OK)
        r = L.archive_write_open(p->a, p, NULL, pack_write_cb, NULL);
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
    L.archive_entry_clear(e);
    L.archive_entry_set_perm(e, st.st_mode & 0777);
    L.archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    int fd = -1;
    char target[PATH_MAX];
    if (S_ISDIR(st.st_mode)) {
        if (p->depth > SBXD_COPY_MAX_DEPTH)
            return pack_failed(p, E2BIG, "the tree is deeper than the limit at '%.200s'", p->rel);
        fd = open_sub(dirfd, name);
        if (fd < 0) {
            p->st.skipped++;
            return 0;
        }
        L.archive_entry_set_filetype(e, AE_IFDIR);
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
        L.archive_entry_set_filetype(e, AE_IFREG);
        L.archive_entry_set_size(e, st.st_size);
    } else if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
        if (n < 0) {
            p->st.skipped++;
            return 0;
        }
        target[n] = '\0';
        L.archive_entry_set_filetype(e, AE_IFLNK);
        L.archive_entry_set_symlink(e, target);
    } else {
        p->st.skipped++;
        return 0;
    }
    L.archive_entry_set_pathname(e, p->rel);
    if (L.archive_write_header(p->a, e) < ARCHIVE_WARN) {
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
        if (L.archive_write_data(p->a, buf, (size_t)n) < 0)
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
        if (L.archive_write_close(p->a) != ARCHIVE_OK)
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
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 || sbxd_temp(de->d_name))
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
    locale_t was = uselocale(utf8_locale);
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
        L.archive_write_free(p->a);
    if (p->e)
        L.archive_entry_free(p->e);
    free(p->buf);
    free(p);
}

/* ---------------------------------------------------------------------------------- */
/* Names and links                                                                      */

int ar_entry_name(const char *name, char *out, struct sbxd_err *err)
{
    if (!name)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "an entry has no name");
    if (name[0] == '/')
        return sbxd_fail(err, SBXD_E_DENIED, EPERM, "'%.200s' is an absolute name", name);
    size_t len = 0;
    const char *s = name;
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return sbxd_fail(err, SBXD_E_DENIED, EPERM, "'%.200s' holds \"..\"", name);
        if (n > NAME_MAX)
            return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "'%.200s' has a name too long",
                             name);
        if (n && !(n == 1 && s[0] == '.')) {
            if (len + n + 2 > PATH_MAX)
                return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "'%.200s' is too long", name);
            if (len)
                out[len++] = '/';
            memcpy(out + len, s, n);
            len += n;
        }
        s = *end ? end + 1 : end;
    }
    out[len] = '\0';
    return 0;
}

bool ar_link_inside(const char *name, const char *target, unsigned depth)
{
    if (!target || !*target || target[0] == '/')
        return false;
    /* The link's directory: the destination's depth, and the components of name but its
     * last. */
    long level = depth;
    for (const char *s = name; (s = strchr(s, '/')); s++)
        level++;
    const char *s = target;
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            if (--level < 0)
                return false;
        } else if (n && !(n == 1 && s[0] == '.')) {
            level++;
        }
        s = *end ? end + 1 : end;
    }
    return true;
}

/* ---------------------------------------------------------------------------------- */
/* Extraction                                                                           */

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

static la_ssize_t extract_read_cb(struct archive *a, void *cls, const void **out)
{
    (void)a;
    struct ar_extract *x = cls;
    for (;;) {
        ssize_t n = read(x->in[0], x->in_buf, sizeof(x->in_buf));
        if (n < 0 && errno == EINTR)
            continue;
        *out = x->in_buf;
        return n;
    }
}

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

/* Note the directory path (its first len bytes) for its mode and time at the end: with e (an
 * entry of the archive that names it), mode and the entry's time, a later entry winning as
 * tar has it; without (made on the way to an entry), mode if it is not noted yet. A directory
 * named 100,000 times is one record. */
static void dir_set(struct dir_rec *r, mode_t mode, struct archive_entry *e)
{
    r->mode = mode;
    if (e && L.archive_entry_mtime_is_set(e)) {
        r->has_mtime = true;
        r->mtime_s = L.archive_entry_mtime(e);
        r->mtime_ns = L.archive_entry_mtime_nsec(e);
    }
}

static int dir_note(struct ar_extract *x, const char *path, size_t len, mode_t mode,
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
    int sub = open_sub(dfd, comp);
    if (sub < 0 && errno == ENOENT && make) {
        if (mkdirat(dfd, comp, 0700) < 0 && errno != EEXIST)
            return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                                   "cannot make a directory for '%.200s'", entry);
        x->st.directories++;
        if (dir_note(x, path, len, x->u.dir_mode, NULL) < 0)
            return -1;
        sub = open_sub(dfd, comp);
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
    if (L.archive_entry_size_is_set(e) && (uint64_t)L.archive_entry_size(e) > room_left(x))
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
        la_ssize_t n = L.archive_read_data(a, x->buf, sizeof(x->buf));
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
    if (L.archive_entry_mtime_is_set(e)) {
        struct timespec ts[2] = {{0, UTIME_OMIT},
                                 {L.archive_entry_mtime(e), L.archive_entry_mtime_nsec(e)}};
        futimens(fd, ts);
    }
    return 0;
}

static int extract_link(struct ar_extract *x, struct archive_entry *e, const char *path, bool hard)
{
    char leaf[NAME_MAX + 1];
    const char *target = hard ? L.archive_entry_hardlink(e) : L.archive_entry_symlink(e);
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

static int extract_entry(struct ar_extract *x, struct archive *a, struct archive_entry *e)
{
    char *path = malloc(PATH_MAX);
    if (!path)
        return sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int rc = ar_entry_name(L.archive_entry_pathname(e), path, &x->err);
    mode_t mode = L.archive_entry_mode(e);
    unsigned type = L.archive_entry_filetype(e);
    bool hard = L.archive_entry_hardlink(e) != NULL;
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
    else if (rc == 0 && *path && sbxd_temp(strrchr(path, '/') ? strrchr(path, '/') + 1 : path))
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
                rc = dir_note(x, path, len, mode & 0777, e);
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

/* The directories' modes and times, deepest first (a directory made read-only last). The
 * records' set is no use after. */
static int apply_dirs(struct ar_extract *x)
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

/* ---------------------------------------------------------------------------------- */
/* Where the archive's symlinks lead                                                    */

/* A symlink is judged where it leads, not by its target's text ("d -> ." makes "d/.." the
 * parent of the link's directory, which text takes for the directory itself). Once the whole
 * archive is extracted (a link a later entry makes can change where an earlier one leads),
 * each symlink it made is followed component by component through the tree as it will be
 * once the archive is in place: the archive's tree over the destination's when merged, the
 * workspace around it, every link on the way followed, the archive's and the workspace's
 * alike. One that climbs above the workspace root, or reaches an absolute link, refuses the
 * archive; so does one that goes through more links than the kernel would follow. Beneath a
 * name that is missing or no directory nothing can be a link: the rest is taken as text. */

/* One directory of that tree: the archive's (in the temporary directory) and the
 * workspace's at the same place, either or both. */
struct lk_level {
    int t, w;   /* fds, or -1 */
    bool dest;  /* the destination itself */
    dev_t wdev; /* w's identity */
    ino_t wino;
    char name[NAME_MAX + 1];
};

enum { LK_DIR, LK_LINK, LK_NONE, LK_DEEP, LK_ERROR };
enum { LK_INSIDE, LK_LEAVES, LK_LOOP, LK_TOO_DEEP, LK_FAILED };

struct lk_walk {
    struct ar_extract *x;
    struct lk_level lv[SBXD_ARCHIVE_LINK_MAX_DEPTH];
    unsigned n;      /* the position: the workspace root lv[0] down to lv[n - 1] */
    unsigned cached; /* levels past n kept open, taken again when the walk comes back */
    unsigned ghosts; /* components past lv[n - 1] that name nothing there */
    unsigned links;  /* followed in this resolution */
    int err;         /* why a step failed (an errno) */
    dev_t pdev;      /* the destination's parent */
    ino_t pino;
    char dest[SBXD_ARCHIVE_LINK_MAX_DEPTH * (NAME_MAX + 1)]; /* its real path from the root */
    char target[PATH_MAX];
    char rest[(SBXD_MAX_SYMLINKS + 2) * (PATH_MAX + 1)]; /* what is left to resolve */
};

/* Close the levels kept past the position. */
static void lk_evict(struct lk_walk *k)
{
    for (unsigned i = k->n; i < k->cached; i++) {
        if (k->lv[i].t >= 0)
            close(k->lv[i].t);
        if (k->lv[i].w >= 0)
            close(k->lv[i].w);
    }
    k->cached = k->n;
}

/* The directory name of dfd: an fd, or -1 with errno (0: none there, a symlink or a file). */
static int lk_open(int dfd, const char *name)
{
    int fd = open_sub(dfd, name);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP))
        errno = 0;
    return fd;
}

static int lk_link(struct lk_walk *k, int dfd, const char *name)
{
    ssize_t n = readlinkat(dfd, name, k->target, sizeof(k->target) - 1);
    if (n < 0) {
        k->err = errno;
        return LK_ERROR;
    }
    k->target[n] = '\0';
    return LK_LINK;
}

/* One component down from the position: into a directory (LK_DIR), onto a symlink (LK_LINK,
 * its target in k->target), onto nothing or no directory (LK_NONE), or LK_DEEP, or LK_ERROR
 * (k->err). */
static int lk_down(struct lk_walk *k, const char *name)
{
    struct ar_extract *x = k->x;
    if (k->ghosts || strlen(name) > NAME_MAX) {
        k->ghosts++;
        return LK_NONE;
    }
    if (k->n < k->cached && strcmp(k->lv[k->n].name, name) == 0) {
        k->n++;
        return LK_DIR;
    }
    const struct lk_level *top = &k->lv[k->n - 1];
    bool at_parent = top->w >= 0 && top->wdev == k->pdev && top->wino == k->pino;
    bool dest = at_parent && *x->dest && strcmp(name, x->name) == 0;
    int t = -1, w = -1;
    struct stat st;
    errno = 0;
    if (dest) {
        /* The destination: the archive's tree, over the old one unless that is replaced. */
        t = dup(x->tfd);
        if (t >= 0 && !x->replace)
            w = lk_open(top->w, name);
    } else if (at_parent && x->tmp[0] && strcmp(name, x->tmp) == 0) {
        /* (the temporary directory: gone once the archive is in place) */
        k->ghosts++;
        return LK_NONE;
    } else {
        bool archived = false;
        if (top->t >= 0) {
            if (fstatat(top->t, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                /* The archive's entry: a file or a link replaces the workspace's. */
                archived = true;
                if (S_ISLNK(st.st_mode))
                    return lk_link(k, top->t, name);
                if (!S_ISDIR(st.st_mode)) {
                    k->ghosts++;
                    return LK_NONE;
                }
                t = open_sub(top->t, name);
                if (t >= 0 && top->w >= 0)
                    w = lk_open(top->w, name);
            } else if (errno != ENOENT) {
                k->err = errno;
                return LK_ERROR;
            }
        }
        if (!archived) {
            if (top->w < 0 || fstatat(top->w, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (top->w >= 0 && errno != ENOENT && errno != ENOTDIR) {
                    k->err = errno;
                    return LK_ERROR;
                }
                k->ghosts++;
                return LK_NONE;
            }
            if (S_ISLNK(st.st_mode))
                return lk_link(k, top->w, name);
            if (!S_ISDIR(st.st_mode)) {
                k->ghosts++;
                return LK_NONE;
            }
            errno = 0;
            w = open_sub(top->w, name);
        }
    }
    if (errno || (t < 0 && w < 0) || k->n == SBXD_ARCHIVE_LINK_MAX_DEPTH) {
        int e = errno ? errno : EAGAIN; /* (swapped meanwhile) */
        bool deep = k->n == SBXD_ARCHIVE_LINK_MAX_DEPTH;
        if (t >= 0)
            close(t);
        if (w >= 0)
            close(w);
        k->err = e;
        return deep ? LK_DEEP : LK_ERROR;
    }
    lk_evict(k);
    struct lk_level *lv = &k->lv[k->n];
    *lv = (struct lk_level){.t = t, .w = w, .dest = dest};
    if (w >= 0 && fstat(w, &st) == 0) {
        lv->wdev = st.st_dev;
        lv->wino = st.st_ino;
    }
    snprintf(lv->name, sizeof(lv->name), "%s", name);
    k->cached = ++k->n;
    return LK_DIR;
}

/* One component up: false above the workspace root. */
static bool lk_up(struct lk_walk *k)
{
    if (k->ghosts) {
        k->ghosts--;
        return true;
    }
    if (k->n == 1)
        return false;
    k->n--;
    return true;
}

/* Resolve k->rest from the position, following each link on the way (the last component's
 * too): LK_INSIDE, LK_LEAVES (above the root, or an absolute link), LK_LOOP, LK_TOO_DEEP,
 * LK_FAILED (k->err). */
static int lk_follow(struct lk_walk *k)
{
    char *rest = k->rest, comp[NAME_MAX + 2];
    size_t off = 0;
    k->links = 0;
    while (rest[off]) {
        size_t n = strcspn(rest + off, "/");
        if (n == 0) {
            off++;
            continue;
        }
        snprintf(comp, sizeof(comp), "%.*s", (int)(n > NAME_MAX ? NAME_MAX + 1 : n), rest + off);
        off += n;
        if (strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0) {
            if (!lk_up(k))
                return LK_LEAVES;
            continue;
        }
        int r = lk_down(k, comp);
        if (r == LK_DEEP || r == LK_ERROR)
            return r == LK_DEEP ? LK_TOO_DEEP : LK_FAILED;
        if (r != LK_LINK)
            continue;
        if (++k->links > SBXD_MAX_SYMLINKS)
            return LK_LOOP;
        if (k->target[0] == '/')
            return LK_LEAVES;
        /* rest becomes the target, then what was left after the link */
        size_t tl = strlen(k->target), rl = strlen(rest + off);
        if (tl + 1 + rl + 1 > sizeof(k->rest))
            return LK_LOOP;
        memmove(rest + tl + 1, rest + off, rl + 1);
        memcpy(rest, k->target, tl);
        rest[tl] = '/';
        off = 0;
    }
    return LK_INSIDE;
}

/* The position to the archive's directory rel (its path beneath the destination). Every
 * component is a directory there, or the tree changed meanwhile: -1 with x->err. */
static int lk_goto(struct lk_walk *k, const char *rel)
{
    k->n = 1;
    k->ghosts = 0;
    char comp[NAME_MAX + 1];
    for (int part = 0; part < 2; part++) {
        for (const char *s = part ? rel : k->dest; *s;) {
            const char *end = strchrnul(s, '/');
            snprintf(comp, sizeof(comp), "%.*s", (int)(end - s), s);
            int r = lk_down(k, comp);
            if (r != LK_DIR)
                return sbxd_fail_errno(&k->x->err, SBXD_E_CONFLICT, r == LK_ERROR ? k->err : EAGAIN,
                                       "'%.200s' changed during the extraction", k->x->dest);
            s = *end ? end + 1 : end;
        }
        if (!part && !k->lv[k->n - 1].dest && *k->x->dest)
            return sbxd_fail(&k->x->err, SBXD_E_CONFLICT, EAGAIN,
                             "'%.200s' changed during the extraction", k->x->dest);
    }
    return 0;
}

/* Where the destination is: its path followed from the root, as every route follows it. */
static int lk_begin(struct lk_walk *k, struct ar_extract *x)
{
    struct stat rs, ps;
    k->x = x;
    k->lv[0] = (struct lk_level){.t = -1, .w = fs_reopen(x->rootfd, O_RDONLY | O_DIRECTORY)};
    k->n = k->cached = 1;
    if (k->lv[0].w < 0 || fstat(k->lv[0].w, &rs) < 0 || fstat(x->pfd, &ps) < 0)
        return sbxd_fail_errno(&x->err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
    k->lv[0].wdev = rs.st_dev;
    k->lv[0].wino = rs.st_ino;
    k->pdev = ps.st_dev;
    k->pino = ps.st_ino;
    if (!*x->dest) {
        k->lv[0].dest = true;
        if ((k->lv[0].t = dup(x->tfd)) < 0)
            return sbxd_fail_errno(&x->err, SBXD_E_INTERNAL, errno, "out of descriptors");
        return 0;
    }
    snprintf(k->rest, sizeof(k->rest), "%s", x->dest);
    if (lk_follow(k) != LK_INSIDE || k->ghosts || !k->lv[k->n - 1].dest)
        return sbxd_fail(&x->err, SBXD_E_CONFLICT, EAGAIN, "'%.200s' changed during the extraction",
                         x->dest);
    size_t len = 0;
    for (unsigned i = 1; i < k->n; i++)
        len += (size_t)snprintf(k->dest + len, sizeof(k->dest) - len, "%s%s", i > 1 ? "/" : "",
                                k->lv[i].name);
    return 0;
}

static int lk_refuse(struct ar_extract *x, int why, const char *link, const char *target, int e)
{
    switch (why) {
    case LK_LEAVES:
        return sbxd_fail(&x->err, SBXD_E_DENIED, EPERM,
                         "the symlink '%.200s' -> '%.200s' leads out of the workspace (the links "
                         "on its way followed)",
                         link, target);
    case LK_LOOP:
        return sbxd_fail(&x->err, SBXD_E_DENIED, ELOOP,
                         "the symlink '%.200s' -> '%.200s' goes through more than %d symlinks "
                         "(a loop)",
                         link, target, SBXD_MAX_SYMLINKS);
    case LK_TOO_DEEP:
        return sbxd_fail(&x->err, SBXD_E_DENIED, ELOOP,
                         "the symlink '%.200s' -> '%.200s' leads more than %d directories deep: "
                         "too deep to judge",
                         link, target, SBXD_ARCHIVE_LINK_MAX_DEPTH);
    default:
        return sbxd_fail_errno(&x->err, fs_errno_kind(e), e,
                               "cannot tell where the symlink '%.200s' -> '%.200s' leads", link,
                               target);
    }
}

/* Each symlink of the extracted tree, judged where it leads. */
static int links_check(struct ar_extract *x)
{
    if (!x->st.symlinks)
        return 0;
    struct lk_walk *k = calloc(1, sizeof(*k));
    autofree char *link = malloc(PATH_MAX), *target = malloc(PATH_MAX);
    if (!k || !link || !target) {
        free(k);
        return sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    int rc = lk_begin(k, x);
    for (size_t i = 0; rc == 0 && i < x->ndirs; i++) {
        const char *dir = x->dirs[i].path;
        if ((rc = lk_goto(k, dir)) < 0)
            break;
        int dfd = openat(k->lv[k->n - 1].t, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
            if (dfd >= 0)
                close(dfd);
            rc = sbxd_fail_errno(&x->err, SBXD_E_INTERNAL, errno, "cannot read the extraction");
            break;
        }
        struct dirent *de;
        while (rc == 0 && (de = readdir(d))) {
            if (de->d_type != DT_LNK && de->d_type != DT_UNKNOWN)
                continue;
            snprintf(link, PATH_MAX, "%s%s%s", dir, *dir ? "/" : "", de->d_name);
            ssize_t n = readlinkat(dirfd(d), de->d_name, target, PATH_MAX - 1);
            if (n < 0 && errno == EINVAL)
                continue; /* (not a link) */
            if (n < 0) {
                rc = sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno, "cannot read '%.200s'",
                                     link);
                break;
            }
            target[n] = '\0';
            if ((rc = lk_goto(k, dir)) < 0)
                break;
            snprintf(k->rest, sizeof(k->rest), "%s", target);
            int why = lk_follow(k);
            if (why != LK_INSIDE)
                rc = lk_refuse(x, why, link, target, k->err);
        }
        closedir(d);
    }
    k->n = 0;
    lk_evict(k);
    free(k);
    return rc;
}

static void *extract_main(void *arg)
{
    struct ar_extract *x = arg;
    uselocale(utf8_locale);
    fs_user_enter(&x->u);
    struct archive *a = L.archive_read_new();
    struct archive_entry *e;
    int r = a ? ARCHIVE_OK : ARCHIVE_FATAL;
    if (r == ARCHIVE_OK)
        r = L.archive_read_support_format_tar(a);
    if (r == ARCHIVE_OK)
        r = L.archive_read_support_format_zip(a);
    /* Each filter in its library: never an outside program (which _all would allow). */
    if (r == ARCHIVE_OK)
        r = L.archive_read_support_filter_gzip(a);
    if (r == ARCHIVE_OK)
        r = L.archive_read_support_filter_zstd(a);
    if (r == ARCHIVE_OK)
        r = L.archive_read_support_filter_xz(a);
    if (r == ARCHIVE_OK)
        r = L.archive_read_support_filter_bzip2(a);
    if (r == ARCHIVE_OK)
        r = L.archive_read_open(a, x, NULL, extract_read_cb, NULL);
    if (r != ARCHIVE_OK) {
        sbxd_fail(&x->err, SBXD_E_INVALID, EINVAL, "not an archive sbxd reads (tar or zip): %s",
                  a ? ar_why(a) : "out of memory");
    } else {
        for (;;) {
            int64_t at = L.archive_filter_bytes(a, 0);
            r = L.archive_read_next_header(a, &e);
            if (r == ARCHIVE_EOF)
                break;
            if (r < ARCHIVE_WARN) {
                sbxd_fail(&x->err, SBXD_E_INVALID, EINVAL, "the archive is damaged%s: %s",
                          x->entries ? "" : " or not an archive sbxd reads (tar or zip)",
                          ar_why(a));
                break;
            }
            /* The bytes from one entry's contents to the next one's (headers, long names,
             * padding, contents passed over) count against --max-archive-bytes too. */
            int64_t now = L.archive_filter_bytes(a, 0);
            if (at >= 0 && now > at)
                x->header_bytes += (uint64_t)(now - at);
            if (x->st.bytes + x->header_bytes > x->lim.max_bytes) {
                sbxd_fail(&x->err, SBXD_E_TOO_LARGE, EFBIG,
                          "the archive expands past %llu bytes (--max-archive-bytes, its headers "
                          "counted with its files)",
                          (unsigned long long)x->lim.max_bytes);
                break;
            }
            if (++x->entries > x->lim.max_entries) {
                sbxd_fail(&x->err, SBXD_E_TOO_LARGE, E2BIG,
                          "the archive holds more than %llu entries (--max-archive-entries)",
                          (unsigned long long)x->lim.max_entries);
                break;
            }
            if (extract_entry(x, a, e) < 0)
                break;
        }
        if (x->err.kind == SBXD_E_NONE && links_check(x) == 0)
            apply_dirs(x);
    }
    if (a)
        L.archive_read_free(a);
    /* Whatever was not read is not wanted: the feeder gets EPIPE from now on. */
    close(x->in[0]);
    x->in[0] = -1;
    fs_user_leave(&x->u);
    return NULL;
}

struct ar_extract *ar_extract_begin(int rootfd, const char *path, bool replace,
                                    const struct ar_limits *lim, const struct fs_user *u,
                                    struct sbxd_err *err)
{
    if (ar_load(err) < 0)
        return NULL;
    struct ar_extract *x = calloc(1, sizeof(*x));
    char *norm = malloc(PATH_MAX);
    if (!x || !norm) {
        free(x);
        free(norm);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    x->rootfd = rootfd;
    x->u = *u;
    x->lim = *lim;
    x->replace = replace;
    x->pfd = x->tfd = x->cache_fd = -1;
    x->in[0] = x->in[1] = -1;
    x->dest = norm;
    if (getrandom(x->hash_key, sizeof(x->hash_key), 0) != (ssize_t)sizeof(x->hash_key)) {
        uint64_t t = time_mono_ns() ^ (uint64_t)(uintptr_t)x; /* (the cost of a guess: CPU) */
        memcpy(x->hash_key, &t, sizeof(t));
    }
    if (ar_entry_name(path, norm, err) < 0)
        goto fail;
    for (const char *s = norm; *norm && s; s = strchr(s + 1, '/'))
        x->dest_depth++;
    fs_user_enter(u);
    if (!*norm) {
        /* The root: extracted beside nothing, merged into it from a temporary directory in
         * it. */
        x->pfd = -1;
        if (replace) {
            fs_user_leave(u);
            sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                      "the workspace root cannot be replaced (POST /reset clears it)");
            goto fail;
        }
    } else {
        x->pfd = fs_open_parent(rootfd, norm, x->name, true, u, err);
        struct stat st;
        if (x->pfd >= 0 && fstatat(x->pfd, x->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            !S_ISDIR(st.st_mode)) {
            sbxd_fail(err, SBXD_E_CONFLICT, ENOTDIR,
                      "'%.200s' is not a directory (a file or a symlink): an archive extracts "
                      "into a directory",
                      norm);
            fs_user_leave(u);
            goto fail;
        }
    }
    int base = x->pfd;
    if (base < 0 && !*norm)
        base = fs_reopen(rootfd, O_RDONLY | O_DIRECTORY);
    if (base < 0) {
        fs_user_leave(u);
        if (*norm)
            goto fail;
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
        goto fail;
    }
    x->pfd = base;
    fs_temp_name(x->tmp, "extract");
    if (mkdirat(x->pfd, x->tmp, 0700) < 0 ||
        (x->tfd = openat(x->pfd, x->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        int e = errno;
        fs_user_leave(u);
        sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot make a temporary directory for '%.200s'",
                        norm);
        goto fail;
    }
    fs_user_leave(u);
    /* The directory itself: the user's default mode, unless the archive has an entry "./". */
    if (dir_note(x, "", 0, u->dir_mode, NULL) < 0) {
        *err = x->err;
        goto fail;
    }
    if (pipe2(x->in, O_CLOEXEC) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot make a pipe");
        goto fail;
    }
    fcntl(x->in[1], F_SETPIPE_SZ, 1 << 20); /* (where allowed: fewer wake-ups) */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    int e = pthread_create(&x->thread, &at, extract_main, x);
    pthread_attr_destroy(&at);
    if (e) {
        sbxd_fail_errno(err, SBXD_E_BUSY, e, "cannot start the extraction");
        goto fail;
    }
    x->started = true;
    return x;
fail:
    ar_extract_end(x, false, NULL, NULL);
    return NULL;
}

int ar_extract_feed(struct ar_extract *x, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t k = write(x->in[1], p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1; /* EPIPE: the extraction ended */
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Merge the directory src (the extracted tree) into dst, or only check that it can be
 * (check): a name in both that is a directory in one and not in the other is a conflict, as
 * is a directory the user cannot write; a file replaces a file. at: dst's path, for errors. */
static int merge(struct ar_extract *x, int src, int dst, const char *at, bool check)
{
    if (check && faccessat(dst, ".", W_OK | X_OK, AT_EACCESS) < 0)
        return sbxd_fail(&x->err, SBXD_E_DENIED, errno, "'%.200s' is not writable",
                         *at ? at : "the workspace");
    if (!check)
        fchmod(src, 0700); /* (ours: entries are moved out of it) */
    /* (a description of its own: a dup would share the offset, read to the end already) */
    int sfd = openat(src, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = sfd >= 0 ? fdopendir(sfd) : NULL;
    if (!d) {
        if (sfd >= 0)
            close(sfd);
        return sbxd_fail_errno(&x->err, SBXD_E_INTERNAL, errno, "cannot read the extraction");
    }
    autofree char *sub = malloc(PATH_MAX);
    int rc = sub ? 0 : sbxd_fail(&x->err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        snprintf(sub, PATH_MAX, "%s%s%s", at, *at ? "/" : "", n);
        struct stat ss, ds;
        if (fstatat(src, n, &ss, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        bool there = fstatat(dst, n, &ds, AT_SYMLINK_NOFOLLOW) == 0;
        if (there && S_ISDIR(ss.st_mode) && S_ISDIR(ds.st_mode)) {
            int s2 = open_sub(src, n);
            int d2 = open_sub(dst, n);
            if (s2 < 0 || d2 < 0)
                rc = sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                                     "cannot merge into '%.200s'", sub);
            else
                rc = merge(x, s2, d2, sub, check);
            if (rc == 0 && !check)
                fchmod(d2, ss.st_mode & 0777); /* the archive's mode, as tar sets it */
            if (s2 >= 0)
                close(s2);
            if (d2 >= 0)
                close(d2);
        } else if (there && S_ISDIR(ss.st_mode) != S_ISDIR(ds.st_mode)) {
            rc = sbxd_fail(&x->err, SBXD_E_CONFLICT, EEXIST,
                           "'%.200s' is a %s in the workspace and a %s in the archive: add "
                           "replace=true to replace the whole directory",
                           sub, S_ISDIR(ds.st_mode) ? "directory" : "file",
                           S_ISDIR(ss.st_mode) ? "directory" : "file");
        } else if (!check && renameat(src, n, dst, n) < 0) {
            rc = sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                                 "cannot put '%.200s' in place", sub);
        }
    }
    closedir(d);
    return rc;
}

/* Put the extracted tree in place of (or into) the destination. */
static int install(struct ar_extract *x)
{
    syncfs(x->tfd);
    if (!*x->dest) {
        autoclose int root = fs_reopen(x->rootfd, O_RDONLY | O_DIRECTORY);
        if (root < 0)
            return sbxd_fail_errno(&x->err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
        if (merge(x, x->tfd, root, "", true) < 0 || merge(x, x->tfd, root, "", false) < 0)
            return -1;
        return 0;
    }
    struct stat st;
    bool there = fstatat(x->pfd, x->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (there && !S_ISDIR(st.st_mode))
        return sbxd_fail(&x->err, SBXD_E_CONFLICT, ENOTDIR,
                         "'%.200s' is not a directory: an archive extracts into one", x->dest);
    if (!there) {
        if (fs_rename_noreplace(x->pfd, x->tmp, x->pfd, x->name) < 0)
            return sbxd_fail_errno(&x->err,
                                   errno == EEXIST ? SBXD_E_CONFLICT : fs_errno_kind(errno), errno,
                                   "cannot put '%.200s' in place", x->dest);
        x->tmp[0] = '\0';
        fsync(x->pfd);
        return 0;
    }
    if (x->replace) {
        /* (the swapped-out old tree is what tmp names then, deleted by the caller) */
        if (fs_swap_dir(x->pfd, x->tmp, x->name) < 0)
            return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno,
                                   "cannot put '%.200s' in place", x->dest);
        fsync(x->pfd);
        return 0;
    }
    autoclose int dfd = open_sub(x->pfd, x->name);
    if (dfd < 0)
        return sbxd_fail_errno(&x->err, fs_errno_kind(errno), errno, "cannot open '%.200s'",
                               x->dest);
    if (merge(x, x->tfd, dfd, x->dest, true) < 0 || merge(x, x->tfd, dfd, x->dest, false) < 0)
        return -1;
    return 0;
}

int ar_extract_end(struct ar_extract *x, bool whole, struct ar_stats *st, struct sbxd_err *err)
{
    if (x->in[1] >= 0)
        close(x->in[1]); /* the end of the archive: the reader sees EOF */
    x->in[1] = -1;
    if (x->started)
        pthread_join(x->thread, NULL);
    if (x->started && !whole && x->err.kind == SBXD_E_NONE)
        sbxd_fail(&x->err, SBXD_E_INVALID, EPIPE, "the archive was cut short");
    int rc = -1;
    if (x->started) {
        fs_user_enter(&x->u);
        if (x->err.kind == SBXD_E_NONE)
            install(x);
        rc = x->err.kind == SBXD_E_NONE ? 0 : -1;
        fs_user_leave(&x->u);
    }
    if (x->tmp[0] && x->pfd >= 0) {
        if (x->tfd >= 0)
            close(x->tfd);
        x->tfd = -1;
        fs_user_enter(&x->u);
        fs_delete_at(x->pfd, x->tmp);
        fs_user_leave(&x->u);
    }
    if (rc == 0 && st)
        *st = x->st;
    if (rc < 0 && err && x->started)
        *err = x->err;
    for (size_t i = 0; i < x->ndirs; i++)
        free(x->dirs[i].path);
    free(x->dirs);
    free(x->dir_slots);
    free(x->cache_path);
    int fds[] = {x->in[0], x->in[1], x->tfd, x->cache_fd, x->pfd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(x->dest);
    free(x);
    return rc;
}
