/*
 * entry.c - an entry's metadata (fs_stat), and moves and copies within the workspace
 * (fs_move, fs_copy): both ends resolved beneath the root, every step on fds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "sbxd/fs_limits.h"
#include "sbxd/resolve.h"
#include "sbxd/walk.h"

#include "files_internal.h"

void fs_etag(const struct stat *st, char *out, size_t len)
{
    int64_t mtime = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    snprintf(out, len, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", (uint64_t)st->st_ino,
             (uint64_t)st->st_size, (uint64_t)mtime);
}

bool fs_etag_matches(const char *list, const struct stat *st)
{
    char want[80];
    if (st)
        fs_etag(st, want, sizeof(want));
    for (const char *p = list; *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, ",");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == 1 && *p == '*' && st)
            return true;
        if (st && n == strlen(want) && memcmp(p, want, n) == 0)
            return true;
        p += n;
        p += strcspn(p, ",");
    }
    return false;
}

const char *fs_type_name(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG:
        return "file";
    case S_IFDIR:
        return "directory";
    case S_IFLNK:
        return "symlink";
    case S_IFIFO:
        return "fifo";
    case S_IFSOCK:
        return "socket";
    default:
        return "device";
    }
}

/* path without its trailing slashes into p (PATH_MAX). */
static void trim_slashes(const char *path, char *p)
{
    snprintf(p, PATH_MAX, "%s", path);
    size_t len = strlen(p);
    while (len && p[len - 1] == '/')
        p[--len] = '\0';
}

/* The real directory fd (not O_PATH: gVisor wants one to create and rename in) of the
 * directory part of path, and its last name. -1 with err. */
int fs_open_parent(int rootfd, const char *path, char *name, bool make, const struct fs_user *u,
                   struct sbxd_err *err)
{
    autofree char *p = malloc(PATH_MAX);
    autofree char *dir = malloc(PATH_MAX);
    if (!p || !dir)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    trim_slashes(path, p);
    if (fs_split_path(p, dir, name, err) < 0) {
        if (err->sys_errno == EISDIR)
            sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                      "the workspace root cannot be moved or "
                      "replaced");
        return -1;
    }
    bool created;
    int pfd = make ? fs_mkdir_p(rootfd, dir, u->dir_mode, &created, err)
                   : fs_resolve_beneath(rootfd, dir, FS_RESOLVE_DIRECTORY, err);
    if (pfd < 0)
        return -1;
    int dfd = fs_reopen(pfd, O_RDONLY | O_DIRECTORY);
    int e = errno;
    close(pfd);
    if (dfd < 0)
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open the directory of '%.200s'",
                               path);
    return dfd;
}

int fs_stat(int rootfd, const char *path, bool follow, struct fs_stat_info *out,
            struct sbxd_err *err)
{
    memset(out, 0, sizeof(*out));
    autofree char *p = malloc(PATH_MAX);
    if (!p)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    trim_slashes(path, p);
    autoclose int fd = -1;
    char name[NAME_MAX + 1] = "";
    const char *at = "";
    int flags = AT_EMPTY_PATH;
    if (follow || !p[0]) {
        fd = fs_resolve_beneath(rootfd, p, 0, err);
    } else {
        fd = fs_open_parent(rootfd, p, name, false, NULL, err);
        at = name;
        flags = AT_SYMLINK_NOFOLLOW;
    }
    if (fd < 0)
        return -1;
    struct statx sx;
    if (statx(fd, at, flags, STATX_BASIC_STATS | STATX_BTIME, &sx) == 0) {
        if (sx.stx_mask & STATX_BTIME) {
            out->has_btime = true;
            out->btime_ns = (int64_t)sx.stx_btime.tv_sec * 1000000000 + sx.stx_btime.tv_nsec;
        }
    }
    if (fstatat(fd, at, &out->st, flags) < 0) {
        int e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot stat '%.200s'", path);
    }
    if (S_ISLNK(out->st.st_mode)) {
        ssize_t n = readlinkat(fd, at, out->target, sizeof(out->target) - 1);
        out->target[n > 0 ? n : 0] = '\0';
    }
    const char *last = strrchr(p, '/');
    snprintf(out->name, sizeof(out->name), "%s", name[0] ? name : last ? last + 1 : p);
    return 0;
}

/* renameat2 with RENAME_NOREPLACE, or where the file system has no such flag, a check and a
 * rename (a window in which a file made at dst is replaced). */
int fs_rename_noreplace(int sfd, const char *sname, int dfd, const char *dname)
{
    if (renameat2(sfd, sname, dfd, dname, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    struct stat st;
    if (fstatat(dfd, dname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        errno = EEXIST;
        return -1;
    }
    return renameat(sfd, sname, dfd, dname);
}

int fs_move(int rootfd, const char *src, const char *dst, bool overwrite, const struct fs_user *u,
            struct sbxd_err *err)
{
    char sname[NAME_MAX + 1], dname[NAME_MAX + 1];
    autoclose int sfd = fs_open_parent(rootfd, src, sname, false, u, err);
    if (sfd < 0)
        return -1;
    struct stat st;
    if (fstatat(sfd, sname, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        int e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot move '%.200s'", src);
    }
    autoclose int dfd = fs_open_parent(rootfd, dst, dname, true, u, err);
    if (dfd < 0)
        return -1;
    int rc =
        overwrite ? renameat(sfd, sname, dfd, dname) : fs_rename_noreplace(sfd, sname, dfd, dname);
    if (rc == 0) {
        fsync(dfd);
        return 0;
    }
    int e = errno;
    if (e == EEXIST)
        return sbxd_fail(err, SBXD_E_CONFLICT, e,
                         "'%.200s' exists: add overwrite=true to replace it", dst);
    if (e == ENOTEMPTY)
        return sbxd_fail(err, SBXD_E_CONFLICT, e,
                         "'%.200s' is a directory that is not empty: a directory replaces an "
                         "empty one only",
                         dst);
    if (e == EISDIR || e == ENOTDIR)
        return sbxd_fail(err, SBXD_E_CONFLICT, e,
                         "'%.200s' and '%.200s' are not both directories or both files", src, dst);
    if (e == EINVAL)
        return sbxd_fail(err, SBXD_E_INVALID, e, "a directory cannot move into itself");
    if (e == EXDEV)
        return sbxd_fail(err, SBXD_E_INVALID, e,
                         "'%.200s' and '%.200s' are on different file systems: copy instead", src,
                         dst);
    return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot move '%.200s' to '%.200s'", src, dst);
}

/* ---------------------------------------------------------------------------------- */
/* Copies                                                                               */

/* Copy the open file in into out: a reflink where the file system shares extents, else
 * copy_file_range, else read and write. */
static int copy_data(int in, int out, uint64_t size, uint64_t *bytes)
{
    if (ioctl(out, FICLONE, in) == 0) {
        *bytes += size;
        return 0;
    }
    bool plain = false;
    for (;;) {
        ssize_t n;
        if (!plain) {
            n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
            if (n < 0 &&
                (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                plain = true;
                continue;
            }
        } else {
            char buf[65536];
            n = read(in, buf, sizeof(buf));
            for (ssize_t w = 0; n > 0 && w < n;) {
                ssize_t k = write(out, buf + w, (size_t)(n - w));
                if (k < 0 && errno != EINTR)
                    return -1;
                w += k > 0 ? k : 0;
            }
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        *bytes += (uint64_t)n;
    }
}

void fs_temp_name(char out[40], const char *kind)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint64_t)getpid() ^ (uint64_t)(uintptr_t)out;
    snprintf(out, 40, ".sbxd-%.8s-%016" PRIx64, kind, r);
}

static void temp_name(char out[40])
{
    fs_temp_name(out, "copy");
}

int fs_swap_dir(int dfd, char tmp[40], const char *name)
{
    int rc = renameat2(dfd, tmp, dfd, name, RENAME_EXCHANGE);
    if (rc == 0 || (errno != EINVAL && errno != ENOSYS))
        return rc;
    char aside[40];
    temp_name(aside);
    if (renameat(dfd, name, dfd, aside) < 0)
        return -1;
    if (renameat(dfd, tmp, dfd, name) < 0) {
        int e = errno;
        renameat(dfd, aside, dfd, name); /* (back as it was) */
        errno = e;
        return -1;
    }
    memcpy(tmp, aside, sizeof(aside)); /* the old tree, for the caller to delete */
    return 0;
}

/* The permission bits a copy gets: the source's, without set-id bits; with share, the group
 * gets the owner's. */
static mode_t copy_mode(mode_t m, bool share)
{
    m &= 0777;
    return share ? (m & ~(mode_t)070) | ((m & 0700) >> 3) : m;
}

/* Copy the regular file in (open) to name in dfd, made new with mode. */
static int copy_file_to(int in, const struct stat *st, int dfd, const char *name, bool share,
                        struct fs_copy_stats *cs)
{
    mode_t mode = copy_mode(st->st_mode, share);
    int out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (out < 0)
        return -1;
    int rc = copy_data(in, out, (uint64_t)st->st_size, &cs->bytes);
    int e = errno;
    if (rc == 0 && fchmod(out, mode) < 0)
        rc = -1, e = errno;
    close(out);
    errno = e;
    if (rc == 0)
        cs->files++;
    return rc;
}

struct tree_copy {
    int dst[SBXD_COPY_MAX_DEPTH + 2]; /* the directory made for each depth's entries */
    struct fs_copy_stats *cs;
    bool share; /* copy_mode's */
    int err_no;
    char what[64];
};

static int copy_pre(struct walk_entry *e, void *ctx)
{
    struct tree_copy *t = ctx;
    int dfd = t->dst[e->depth];
    if (walk_stat(e) < 0)
        return WALK_NEXT; /* gone since the readdir */
    if (S_ISDIR(e->st.st_mode)) {
        if (!e->may_enter) {
            errno = E2BIG;
            goto fail;
        }
        if (mkdirat(dfd, e->name, 0700) < 0 || walk_open(e, O_RDONLY | O_DIRECTORY) < 0)
            goto fail;
        int sub = openat(dfd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            goto fail;
        t->dst[e->depth + 1] = sub;
        t->cs->directories++;
        return WALK_ENTER;
    }
    if (S_ISLNK(e->st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(e->parent, e->name, target, sizeof(target) - 1);
        if (n < 0)
            goto fail;
        target[n] = '\0';
        if (symlinkat(target, dfd, e->name) < 0)
            goto fail;
        t->cs->symlinks++;
        return WALK_NEXT;
    }
    if (S_ISREG(e->st.st_mode)) {
        if (walk_open(e, O_RDONLY) < 0 ||
            copy_file_to(e->fd, &e->st, dfd, e->name, t->share, t->cs) < 0)
            goto fail;
        return WALK_NEXT;
    }
    t->cs->skipped++; /* fifos, sockets, devices: not copied */
    return WALK_NEXT;
fail:
    t->err_no = errno ? errno : EIO;
    snprintf(t->what, sizeof(t->what), "%.63s", e->name);
    return WALK_STOP;
}

/* The copied directory gets its source's mode once everything in it was made. */
static int copy_post(struct walk_entry *e, void *ctx)
{
    struct tree_copy *t = ctx;
    int sub = t->dst[e->depth + 1];
    t->dst[e->depth + 1] = -1;
    int rc = fchmod(sub, copy_mode(e->st.st_mode, t->share));
    close(sub);
    return rc;
}

int fs_copy(int rootfd, const char *src, const char *dst, bool overwrite, const struct fs_user *u,
            struct fs_copy_stats *cs, struct sbxd_err *err)
{
    memset(cs, 0, sizeof(*cs));
    struct stat st;
    autoclose int in = fs_open_read(rootfd, src, &st, err);
    if (in < 0)
        return -1;
    char dname[NAME_MAX + 1], tmp[40];
    autoclose int dfd = fs_open_parent(rootfd, dst, dname, true, u, err);
    if (dfd < 0)
        return -1;
    struct stat there;
    bool exists = fstatat(dfd, dname, &there, AT_SYMLINK_NOFOLLOW) == 0;
    if (exists && !overwrite)
        return sbxd_fail(err, SBXD_E_CONFLICT, EEXIST,
                         "'%.200s' exists: add overwrite=true to replace it", dst);
    if (exists && S_ISDIR(there.st_mode) != S_ISDIR(st.st_mode))
        return sbxd_fail(err, SBXD_E_CONFLICT, EISDIR,
                         "'%.200s' and '%.200s' are not both directories or both files", src, dst);
    if (exists && there.st_dev == st.st_dev && there.st_ino == st.st_ino)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "'%.200s' is '%.200s' itself", dst, src);
    temp_name(tmp);
    int rc;
    if (!S_ISDIR(st.st_mode)) {
        rc = copy_file_to(in, &st, dfd, tmp, false, cs);
    } else {
        /* Into a temporary directory beside the destination, renamed in place at the end:
         * the destination is the old tree or the whole new one, never a part. */
        struct tree_copy t = {.cs = cs};
        for (size_t i = 0; i < sizeof(t.dst) / sizeof(t.dst[0]); i++)
            t.dst[i] = -1;
        rc = mkdirat(dfd, tmp, 0700);
        t.dst[0] = rc == 0 ? openat(dfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (rc == 0 && t.dst[0] >= 0) {
            struct walk w = {.max_entries = SBXD_COPY_MAX_ENTRIES,
                             .max_depth = SBXD_COPY_MAX_DEPTH,
                             .strict = true,
                             .pre = copy_pre,
                             .post = copy_post,
                             .ctx = &t};
            int sub = dup(in);
            rc = sub < 0 ? -1 : walk_tree(sub, &w);
            if (rc == 0)
                rc = fchmod(t.dst[0], st.st_mode & 0777);
            if (rc < 0 && !t.err_no)
                t.err_no = w.cut & (WALK_CUT_ENTRIES | WALK_CUT_DEPTH) ? E2BIG : w.sys_errno;
            for (size_t i = 0; i < sizeof(t.dst) / sizeof(t.dst[0]); i++)
                if (t.dst[i] >= 0)
                    close(t.dst[i]);
        } else {
            rc = -1;
            t.err_no = errno;
        }
        errno = t.err_no;
        if (rc < 0 && t.err_no == E2BIG) {
            fs_delete_at(dfd, tmp);
            return sbxd_fail(err, SBXD_E_TOO_LARGE, E2BIG,
                             "'%.200s' holds more than %u entries or is deeper than %u levels", src,
                             SBXD_COPY_MAX_ENTRIES, SBXD_COPY_MAX_DEPTH);
        }
    }
    int e = errno;
    if (rc == 0) {
        if (exists && S_ISDIR(st.st_mode)) {
            rc = fs_swap_dir(dfd, tmp, dname);
            e = errno;
        } else {
            rc = overwrite ? renameat(dfd, tmp, dfd, dname)
                           : fs_rename_noreplace(dfd, tmp, dfd, dname);
            e = errno;
        }
    }
    if (rc < 0 || (exists && S_ISDIR(st.st_mode))) {
        fs_delete_at(dfd, tmp); /* the partial copy, or the old tree swapped out */
        if (rc < 0)
            return e == EEXIST ? sbxd_fail(err, SBXD_E_CONFLICT, e,
                                           "'%.200s' exists: add overwrite=true to replace it", dst)
                               : sbxd_fail_errno(err, fs_errno_kind(e), e,
                                                 "cannot copy '%.200s' to '%.200s'", src, dst);
    }
    fsync(dfd);
    return 0;
}

int fs_copy_into(int src, int dst, bool share, struct fs_copy_stats *cs, struct sbxd_err *err)
{
    memset(cs, 0, sizeof(*cs));
    struct tree_copy t = {.cs = cs, .share = share};
    for (size_t i = 0; i < sizeof(t.dst) / sizeof(t.dst[0]); i++)
        t.dst[i] = -1;
    t.dst[0] = dst;
    struct walk w = {.max_entries = SBXD_COPY_MAX_ENTRIES,
                     .max_depth = SBXD_COPY_MAX_DEPTH,
                     .strict = true,
                     .pre = copy_pre,
                     .post = copy_post,
                     .ctx = &t};
    int rc = walk_tree(src, &w);
    for (size_t i = 1; i < sizeof(t.dst) / sizeof(t.dst[0]); i++)
        if (t.dst[i] >= 0)
            close(t.dst[i]);
    if (rc == 0)
        return 0;
    if (w.cut & (WALK_CUT_ENTRIES | WALK_CUT_DEPTH))
        return sbxd_fail(err, SBXD_E_TOO_LARGE, E2BIG,
                         "the tree holds more than %u entries or is deeper than %u levels",
                         SBXD_COPY_MAX_ENTRIES, SBXD_COPY_MAX_DEPTH);
    int e = t.err_no ? t.err_no : w.sys_errno ? w.sys_errno : EIO;
    return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot copy '%.64s'",
                           t.what[0] ? t.what : ".");
}
