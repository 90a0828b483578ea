/*
 * An extraction's life (archive.h): begun with a temporary directory beside the destination
 * and a thread that reads the archive from a pipe the caller feeds; at the end, the whole
 * tree put in place (renamed, merged or swapped) or nothing at all.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/archive.h"
#include "sbxd/cleanup.h"
#include "sbxd/timeutil.h"

#include "archive_internal.h"
#include "files_internal.h"

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

static void *extract_main(void *arg)
{
    struct ar_extract *x = arg;
    uselocale(ar_utf8_locale);
    fs_user_enter(&x->u);
    struct archive *a = ar_lib.archive_read_new();
    struct archive_entry *e;
    int r = a ? ARCHIVE_OK : ARCHIVE_FATAL;
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_support_format_tar(a);
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_support_format_zip(a);
    /* Each filter in its library: never an outside program (which _all would allow). */
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_support_filter_gzip(a);
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_support_filter_zstd(a);
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_support_filter_xz(a);
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_support_filter_bzip2(a);
    if (r == ARCHIVE_OK)
        r = ar_lib.archive_read_open(a, x, NULL, extract_read_cb, NULL);
    if (r != ARCHIVE_OK) {
        sbxd_fail(&x->err, SBXD_E_INVALID, EINVAL, "not an archive sbxd reads (tar or zip): %s",
                  a ? ar_why(a) : "out of memory");
    } else {
        for (;;) {
            int64_t at = ar_lib.archive_filter_bytes(a, 0);
            r = ar_lib.archive_read_next_header(a, &e);
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
            int64_t now = ar_lib.archive_filter_bytes(a, 0);
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
            if (ar_tree_entry(x, a, e) < 0)
                break;
        }
        if (x->err.kind == SBXD_E_NONE && ar_links_check(x) == 0)
            ar_tree_dirs_apply(x);
    }
    if (a)
        ar_lib.archive_read_free(a);
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
    if (ar_dir_note(x, "", 0, u->dir_mode, NULL) < 0) {
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
            int s2 = ar_open_sub(src, n);
            int d2 = ar_open_sub(dst, n);
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
    autoclose int dfd = ar_open_sub(x->pfd, x->name);
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
