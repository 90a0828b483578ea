/*
 * Where an extraction's symlinks lead (archive.h): each one followed through the tree as it
 * will be once the archive is in place.
 */
#include <dirent.h>
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
    int fd = ar_open_sub(dfd, name);
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
                t = ar_open_sub(top->t, name);
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
            w = ar_open_sub(top->w, name);
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

int ar_links_check(struct ar_extract *x)
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
