/*
 * edit.c - exact edits of a file: every replacement made in memory, the result written as an
 * upload is (a temporary file beside it, fsync, rename) only when all of them apply, and the
 * lines they changed told in terms of the file written.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/edit.h"
#include "sbxd/fs_limits.h"
#include "sbxd/resolve.h"

#include "files_internal.h"

/* Bytes [s, e) of the text being edited that hold replaced text (s == e: text deleted). */
struct span {
    size_t s, e;
};

/* The text being edited, and where the edits so far put new text in it. */
struct ebuf {
    char *data;
    size_t len;
    struct span *sp;
    size_t nsp;
    bool cut; /* over SBXD_EDIT_MAX_SPANS: no longer tracked */
};

/* Append [s, e) to the sorted list sp, merged with the last span when they touch. */
static void span_push(struct span *sp, size_t *n, size_t s, size_t e)
{
    if (*n && s <= sp[*n - 1].e) {
        if (e > sp[*n - 1].e)
            sp[*n - 1].e = e;
        return;
    }
    sp[*n].s = s;
    sp[*n].e = e;
    (*n)++;
}

/* Merge the spans of this edit (a) with those of the earlier ones moved to where they now
 * are (b), both sorted, into b's place. */
static void spans_merge(struct ebuf *b, struct span *a, size_t na, struct span *moved)
{
    struct span *out = malloc((na + b->nsp) * sizeof(*out) + 1);
    size_t n = 0, i = 0, j = 0;
    if (!out) {
        b->cut = true; /* the edit stands; only the account of its lines is lost */
    } else {
        while (i < na || j < b->nsp) {
            bool take_a = j == b->nsp || (i < na && a[i].s <= moved[j].s);
            struct span x = take_a ? a[i++] : moved[j++];
            span_push(out, &n, x.s, x.e);
        }
    }
    free(b->sp);
    b->sp = out;
    b->nsp = n;
    if (n > SBXD_EDIT_MAX_SPANS)
        b->cut = true;
    if (b->cut) {
        free(b->sp);
        b->sp = NULL;
        b->nsp = 0;
    }
}

/* Occurrences of e's old text in b, none overlapping, counted from the start. */
static uint64_t count_occurrences(const struct ebuf *b, const struct fs_edit *e)
{
    uint64_t k = 0;
    const char *p = b->data, *end = b->data + b->len;
    const char *q;
    while ((size_t)(end - p) >= e->old_len &&
           (q = memmem(p, (size_t)(end - p), e->old_text, e->old_len))) {
        k++;
        p = q + e->old_len;
    }
    return k;
}

/* An earlier span's endpoint x (is_end) that lies inside the occurrence at o, mapped to the
 * new text that replaces it at at. */
static size_t map_inside(bool is_end, size_t at, size_t new_len)
{
    return is_end ? at + new_len : at;
}

/* Replace the k occurrences of e's old text in b, moving the earlier spans along. */
static int replace_all_of(struct ebuf *b, const struct fs_edit *e, uint64_t k, struct sbxd_err *err)
{
    uint64_t nlen = (uint64_t)b->len - k * e->old_len + k * e->new_len;
    if (nlen > SBXD_EDIT_MAX_BYTES)
        return sbxd_fail(err, SBXD_E_TOO_LARGE, EFBIG,
                         "the edited file would be %llu bytes, over the %d bytes an edit writes",
                         (unsigned long long)nlen, SBXD_EDIT_MAX_BYTES);
    char *nb = malloc((size_t)nlen + 1);
    bool track = !b->cut && k <= SBXD_EDIT_MAX_SPANS;
    struct span *a = track ? malloc((size_t)k * sizeof(*a) + 1) : NULL;
    struct span *moved = track ? malloc(b->nsp * sizeof(*moved) + 1) : NULL;
    if (!nb || (track && (!a || !moved))) {
        free(nb);
        free(a);
        free(moved);
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    size_t src = 0, dst = 0, na = 0, j = 0, nep = track ? 2 * b->nsp : 0;
    for (uint64_t i = 0; i < k; i++) {
        const char *q = memmem(b->data + src, b->len - src, e->old_text, e->old_len);
        size_t o = (size_t)(q - b->data), at = dst + (o - src);
        for (; j < nep; j++) {
            size_t x = j & 1 ? b->sp[j / 2].e : b->sp[j / 2].s;
            if (x >= o + e->old_len)
                break;
            size_t *m = j & 1 ? &moved[j / 2].e : &moved[j / 2].s;
            *m = x <= o ? x + dst - src : map_inside(j & 1, at, e->new_len);
        }
        memcpy(nb + dst, b->data + src, o - src);
        memcpy(nb + at, e->new_text, e->new_len);
        if (track)
            span_push(a, &na, at, at + e->new_len);
        dst = at + e->new_len;
        src = o + e->old_len;
    }
    for (; j < nep; j++) {
        size_t x = j & 1 ? b->sp[j / 2].e : b->sp[j / 2].s;
        (j & 1 ? &moved[j / 2].e : &moved[j / 2].s)[0] = x + dst - src;
    }
    memcpy(nb + dst, b->data + src, b->len - src);
    free(b->data);
    b->data = nb;
    b->len = (size_t)nlen;
    if (track)
        spans_merge(b, a, na, moved);
    else
        b->cut = true;
    free(a);
    free(moved);
    return 0;
}

/* Apply edit number idx (of n) to b: -1 with err when it does not apply. */
static int apply_one(struct ebuf *b, const struct fs_edit *e, size_t idx, size_t n,
                     const char *path, uint64_t *replaced, struct sbxd_err *err)
{
    char which[64] = "";
    if (n > 1)
        snprintf(which, sizeof(which), " (edit %zu of %zu)", idx + 1, n);
    if (e->old_len == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "old must not be empty%s: to write a whole file, PUT it", which);
    uint64_t k = count_occurrences(b, e);
    if (k == 0)
        return sbxd_fail(err, SBXD_E_NOT_FOUND, 0,
                         "the old text was not found in '%.200s'%s: nothing was changed", path,
                         which);
    if (k > 1 && !e->replace_all)
        return sbxd_fail(err, SBXD_E_CONFLICT, 0,
                         "the old text occurs %llu times in '%.200s'%s: give more of the "
                         "text around it to make it unique, or set replace_all; nothing was "
                         "changed",
                         (unsigned long long)k, path, which);
    *replaced += k;
    return replace_all_of(b, e, k, err);
}

/* The line of byte p of the text (1-based), counting on from the line *line at *pos. */
static uint64_t line_at(const struct ebuf *b, size_t p, size_t *pos, uint64_t *line)
{
    if (p >= b->len)
        p = b->len ? b->len - 1 : 0;
    while (*pos < p) {
        const char *nl = memchr(b->data + *pos, '\n', p - *pos);
        if (!nl) {
            *pos = p;
            break;
        }
        (*line)++;
        *pos = (size_t)(nl - b->data) + 1;
    }
    return *line;
}

static int spans_to_lines(const struct ebuf *b, struct fs_edit_result *res)
{
    res->spans_cut = b->cut;
    if (!b->nsp)
        return 0;
    res->spans = malloc(b->nsp * sizeof(*res->spans));
    if (!res->spans) {
        res->spans_cut = true;
        return 0;
    }
    size_t pos = 0;
    uint64_t line = 1;
    for (size_t i = 0; i < b->nsp; i++) {
        uint64_t first = line_at(b, b->sp[i].s, &pos, &line);
        size_t last_byte = b->sp[i].e > b->sp[i].s ? b->sp[i].e - 1 : b->sp[i].s;
        uint64_t last = line_at(b, last_byte, &pos, &line);
        if (res->nspans && first <= res->spans[res->nspans - 1].last + 1) {
            if (last > res->spans[res->nspans - 1].last)
                res->spans[res->nspans - 1].last = last;
            continue;
        }
        res->spans[res->nspans].first = first;
        res->spans[res->nspans++].last = last;
    }
    return 0;
}

/* Open path for reading and writing: the kernel checks that the caller (the command user)
 * may write it, so an edit cannot replace a file that user could only read (the rename
 * alone needs no more than the right to write the directory). */
static int open_rw(int rootfd, const char *path, struct stat *st, struct sbxd_err *err)
{
    for (int attempt = 0;; attempt++) {
        int pfd = fs_resolve_beneath(rootfd, path, 0, err);
        if (pfd < 0)
            return -1;
        if (fstat(pfd, st) < 0 || !S_ISREG(st->st_mode)) {
            int e = errno;
            close(pfd);
            if (!S_ISREG(st->st_mode))
                return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                                 "'%.200s' is not a regular file: only a file is edited", path);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot stat '%.200s'", path);
        }
        int fd = fs_reopen(pfd, O_RDWR | O_NONBLOCK);
        int e = errno;
        close(pfd);
        /* gVisor refuses to reopen a file renamed over meanwhile (EINVAL): resolve again. */
        if (fd < 0 && (e == EINVAL || e == ENOENT || e == ESTALE) && attempt < 8)
            continue;
        if (fd < 0)
            return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open '%.200s' to edit it",
                                   path);
        if (fstat(fd, st) < 0) {
            e = errno;
            close(fd);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot stat '%.200s'", path);
        }
        return fd;
    }
}

/* The whole file fd (its stat st) into b: refused over the cap, or binary. */
static int read_text(int fd, const struct stat *st, const char *path, struct ebuf *b,
                     struct sbxd_err *err)
{
    if (st->st_size > SBXD_EDIT_MAX_BYTES)
        return sbxd_fail(err, SBXD_E_TOO_LARGE, EFBIG,
                         "'%.200s' is %lld bytes: an edit takes a file of at most %d bytes", path,
                         (long long)st->st_size, SBXD_EDIT_MAX_BYTES);
    b->data = malloc((size_t)st->st_size + 1);
    if (!b->data)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    while (b->len < (size_t)st->st_size) {
        ssize_t r = pread(fd, b->data + b->len, (size_t)st->st_size - b->len, (off_t)b->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read '%.200s'", path);
        if (r == 0)
            break;
        b->len += (size_t)r;
    }
    /* A binary file is no text to edit: a replacement could land inside a multi-byte
     * structure, and the result would be shown as lines that mean nothing. */
    if (memchr(b->data, 0, b->len))
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "'%.200s' is a binary file (it holds a NUL byte): it is not edited", path);
    return 0;
}

/* Write b over path as an upload is written, if the file is still the version st read (the
 * same inode, not a symlink put in its place, and the same ETag right before the rename). */
static int write_over(int rootfd, const char *path, const struct stat *st, const struct ebuf *b,
                      const struct fs_user *u, struct stat *out, struct sbxd_err *err)
{
    struct fs_upload up;
    if (fs_upload_begin(&up, rootfd, path, u, err) < 0)
        return -1;
    struct stat now, tmp;
    int rc = -1;
    if (fstatat(up.dirfd, up.name, &now, AT_SYMLINK_NOFOLLOW) < 0 || S_ISLNK(now.st_mode)) {
        /* The rename would put a file in the place of the link, not edit what it names. */
        sbxd_fail(err, SBXD_E_CONFLICT, 0,
                  "'%.200s' is a symlink (or was replaced by one): edit the file it names", path);
        goto out;
    }
    if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
        sbxd_fail(err, SBXD_E_PRECONDITION, 0, "'%.200s' was replaced while it was edited", path);
        goto out;
    }
    if (fstat(up.fd, &tmp) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot stat a temporary file");
        goto out;
    }
    /* The new file is the writer's; another user's file would silently change owner. */
    if (tmp.st_uid != st->st_uid ||
        (tmp.st_gid != st->st_gid && fchown(up.fd, (uid_t)-1, st->st_gid) < 0)) {
        sbxd_fail(err, SBXD_E_CONFLICT, EPERM,
                  "'%.200s' belongs to %u:%u: an edit as %u:%u would change its owner", path,
                  (unsigned)st->st_uid, (unsigned)st->st_gid, (unsigned)tmp.st_uid,
                  (unsigned)tmp.st_gid);
        goto out;
    }
    fs_etag(st, up.if_match, sizeof(up.if_match));
    if (fs_upload_write(&up, b->data, b->len, err) < 0 ||
        fs_upload_commit(&up, st->st_mode & 07777, out, err) < 0)
        goto out;
    rc = 0;
out:
    if (rc < 0 && err->kind == SBXD_E_PRECONDITION && !strstr(err->msg, "edited"))
        snprintf(err->msg, sizeof(err->msg),
                 "'%.200s' changed while it was edited: nothing was "
                 "written; read it again",
                 path);
    /* The caller is the user already (a second fs_user_enter would be undone as root). */
    struct fs_user as_is = {0};
    fs_upload_abort(&up, &as_is);
    return rc;
}

int fs_edit_apply(const char *text, size_t len, const struct fs_edit *edits, size_t n,
                  const char *path, char **out, size_t *out_len, struct fs_edit_result *res,
                  struct sbxd_err *err)
{
    memset(res, 0, sizeof(*res));
    *out = NULL;
    *out_len = 0;
    if (n == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "no edit was given");
    struct ebuf b = {.data = malloc(len + 1), .len = len};
    if (!b.data)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    memcpy(b.data, text, len);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = apply_one(&b, &edits[i], i, n, path, &res->replaced, err);
    if (rc == 0) {
        spans_to_lines(&b, res);
        *out = b.data;
        *out_len = b.len;
    } else {
        free(b.data);
    }
    free(b.sp);
    return rc;
}

int fs_edit_file(int rootfd, const char *path, const struct fs_edit *edits, size_t n,
                 const char *if_match, const struct fs_user *u, struct fs_edit_result *res,
                 struct sbxd_err *err)
{
    memset(res, 0, sizeof(*res));
    struct ebuf b = {0}, edited = {0};
    struct stat st;
    if (n == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "no edit was given");
    int fd = open_rw(rootfd, path, &st, err);
    if (fd < 0)
        return -1;
    int rc = read_text(fd, &st, path, &b, err);
    close(fd);
    if (rc == 0 && if_match && !fs_etag_matches(if_match, &st))
        rc = sbxd_fail(err, SBXD_E_PRECONDITION, 0,
                       "'%.200s' has changed: If-Match names another version", path);
    if (rc == 0)
        rc = fs_edit_apply(b.data, b.len, edits, n, path, &edited.data, &edited.len, res, err);
    if (rc == 0)
        rc = write_over(rootfd, path, &st, &edited, u, &res->st, err);
    if (rc < 0)
        fs_edit_result_free(res);
    free(b.data);
    free(edited.data);
    return rc;
}

void fs_edit_result_free(struct fs_edit_result *res)
{
    free(res->spans);
    res->spans = NULL;
    res->nspans = 0;
}
