/*
 * clear.c - a directory emptied (fs_clear_dir: the workspace at a reset) and what some users
 * own removed from shared directories (fs_clear_owned: /tmp, /var/tmp, /dev/shm...), both
 * through the one walk (walk.h): each entry looked at and removed relative to its parent's fd,
 * never following a link, so nothing outside the tree walked is ever reached. fs_find_shared
 * finds the shared directories: every one anybody may write.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <limits.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/fs_limits.h"
#include "sbxd/walk.h"

static void note_failure(struct fs_clear_stats *st, const char *name, int e)
{
    if (!st->failed++) {
        st->first_errno = e;
        snprintf(st->first, sizeof(st->first), "%.120s", name);
    }
}

/* A directory is emptied by its owner or by root: its owner may lack the write or search
 * bit it needs (a command's `chmod 0500 dir`), and gets it here. The fd is the very
 * directory that was opened (walk_open), whatever its name points to now. */
static void make_removable(int fd, const struct stat *st)
{
    if ((st->st_mode & 0700) != 0700)
        (void)fchmod(fd, (st->st_mode & 07777) | 0700);
}

/* Open e, a directory, to be emptied: with the rights to read it even when its owner took
 * them away (chmod 000: the owner may give them back, by the name's fd-relative change
 * without following a link). */
static int open_to_empty(struct walk_entry *e)
{
    if (walk_open(e, O_RDONLY | O_DIRECTORY) == 0)
        return 0;
    if (errno != EACCES)
        return -1;
    if (fchmodat(e->parent, e->name, 0700, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    return walk_open(e, O_RDONLY | O_DIRECTORY);
}

/* Remove the non-directory e (walk_stat'd): counted, or the failure noted. */
static void remove_file(struct walk_entry *e, struct fs_clear_stats *st)
{
    if (unlinkat(e->parent, e->name, 0) == 0) {
        st->files++;
        if (S_ISREG(e->st.st_mode))
            st->bytes += (uint64_t)e->st.st_size;
    } else if (errno != ENOENT) {
        note_failure(st, e->name, errno);
    }
}

static void remove_dir(struct walk_entry *e, struct fs_clear_stats *st, bool quiet_nonempty)
{
    if (unlinkat(e->parent, e->name, AT_REMOVEDIR) == 0)
        st->directories++;
    else if (errno != ENOENT && !(quiet_nonempty && (errno == ENOTEMPTY || errno == EEXIST)))
        note_failure(st, e->name, errno);
}

/* ---------------------------------------------------------------------------------- */
/* The workspace                                                                        */

struct clear {
    struct fs_clear_stats *st;
    int top;        /* the directory emptied: where a too-deep subtree is moved up to */
    unsigned moved; /* subtrees moved up in this pass */
};

/* A temporary name at the top for a subtree moved up: ".sbxd-clear-" and 16 hex digits. */
static void moved_name(char out[40])
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint64_t)(uintptr_t)out ^ (uint64_t)getpid();
    snprintf(out, 40, ".sbxd-clear-%016" PRIx64, r);
}

static int clear_pre(struct walk_entry *e, void *ctx)
{
    struct clear *c = ctx;
    if (walk_stat(e) < 0) {
        if (errno != ENOENT)
            note_failure(c->st, e->name, errno);
        return WALK_NEXT;
    }
    if (!S_ISDIR(e->st.st_mode)) {
        remove_file(e, c->st);
        return WALK_NEXT;
    }
    if (!e->may_enter) {
        /* Deeper than the walk goes (a `mkdir -p` thousands of levels deep): moved up to the
         * top, by fds, to be emptied by the next pass from there. */
        char name[40];
        moved_name(name);
        if (renameat(e->parent, e->name, c->top, name) == 0)
            c->moved++;
        else
            note_failure(c->st, e->name, errno);
        return WALK_NEXT;
    }
    if (open_to_empty(e) < 0) {
        note_failure(c->st, e->name, errno);
        return WALK_NEXT;
    }
    make_removable(e->fd, &e->st);
    return WALK_ENTER;
}

static int clear_post(struct walk_entry *e, void *ctx)
{
    struct clear *c = ctx;
    remove_dir(e, c->st, false);
    return 0;
}

int fs_clear_dir(int dfd, struct fs_clear_stats *st)
{
    memset(st, 0, sizeof(*st));
    struct stat top;
    if (fstat(dfd, &top) < 0 || !S_ISDIR(top.st_mode)) {
        note_failure(st, ".", errno ? errno : ENOTDIR);
        close(dfd);
        return -1;
    }
    make_removable(dfd, &top);
    struct clear c = {.st = st, .top = dfd};
    /* Each pass empties what lies within SBXD_DELETE_MAX_DEPTH levels and moves deeper
     * subtrees up; the passes end when none was moved (each one takes that many levels off
     * the deepest, so a tree ends in depth / SBXD_DELETE_MAX_DEPTH passes). */
    for (unsigned pass = 0; pass < SBXD_CLEAR_MAX_PASSES; pass++) {
        c.moved = 0;
        struct walk w = {.max_entries = UINT64_MAX, /* it ends: what it visits, it removes */
                         .max_depth = SBXD_DELETE_MAX_DEPTH,
                         .pre = clear_pre,
                         .post = clear_post,
                         .ctx = &c};
        int sub = dup(dfd);
        if (sub < 0) {
            note_failure(st, ".", errno);
            break;
        }
        walk_tree(sub, &w);
        if (w.cut & WALK_UNREADABLE)
            note_failure(st, "a directory", w.sys_errno);
        if (!c.moved)
            break;
    }
    close(dfd);
    return st->failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------- */
/* Shared directories                                                                   */

struct owned {
    const struct fs_uid_span *uids;
    unsigned nuids;
    const struct fs_keep *keep;
    unsigned nkeep;
    struct fs_clear_stats *st;
    int doomed_at; /* depth of the owned directory being removed whole (-1: none) */
    int top;       /* the shared directory: where a too-deep subtree is moved up to */
    /* Subtrees moved up (their directories, whoever owns them now): removed whole by the next
     * pass. */
    struct fs_keep *moved;
    size_t nmoved, cap;
    unsigned moved_now; /* in this pass */
};

static bool owned_by(const struct owned *o, uid_t uid)
{
    for (unsigned i = 0; i < o->nuids; i++)
        if (uid >= o->uids[i].first && uid - o->uids[i].first < o->uids[i].count)
            return true;
    return false;
}

static bool kept(const struct owned *o, const struct stat *st)
{
    for (unsigned i = 0; i < o->nkeep; i++)
        if (o->keep[i].dev == st->st_dev && o->keep[i].ino == st->st_ino)
            return true;
    return false;
}

static bool was_moved(const struct owned *o, const struct stat *st)
{
    for (size_t i = 0; i < o->nmoved; i++)
        if (o->moved[i].dev == st->st_dev && o->moved[i].ino == st->st_ino)
            return true;
    return false;
}

/* A directory of theirs deeper than the walk goes (a `mkdir -p` 70 levels down in /tmp):
 * moved up to the top, by fds, under a name of sbxd's (moved_name), and noted, so that the next
 * pass removes it whole from there, as the workspace's clear does. */
static void move_up(struct walk_entry *e, struct owned *o)
{
    if (o->nmoved == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 16;
        struct fs_keep *v = realloc(o->moved, cap * sizeof(*v));
        if (!v) {
            note_failure(o->st, e->name, ENOMEM);
            return;
        }
        o->moved = v;
        o->cap = cap;
    }
    char name[40];
    moved_name(name);
    if (renameat(e->parent, e->name, o->top, name) < 0) {
        note_failure(o->st, e->name, errno);
        return;
    }
    o->moved[o->nmoved++] = (struct fs_keep){e->st.st_dev, e->st.st_ino};
    o->moved_now++;
}

static int owned_pre(struct walk_entry *e, void *ctx)
{
    struct owned *o = ctx;
    /* Back at or above the depth of a directory removed whole: its walk is over (also when
     * it was cut short, and its post never came). */
    if (o->doomed_at >= 0 && (int)e->depth <= o->doomed_at)
        o->doomed_at = -1;
    if (walk_stat(e) < 0)
        return WALK_NEXT;
    /* The workspace (in /tmp, say) and the baseline stay, with all they hold. */
    if (kept(o, &e->st))
        return WALK_NEXT;
    bool doomed = o->doomed_at >= 0 && (int)e->depth > o->doomed_at;
    bool mine = doomed || owned_by(o, e->st.st_uid) ||
                (e->depth == 0 && S_ISDIR(e->st.st_mode) && was_moved(o, &e->st));
    if (!S_ISDIR(e->st.st_mode)) {
        if (mine)
            remove_file(e, o->st);
        return WALK_NEXT;
    }
    /* A directory of the users' is removed whole; another is looked into only when anybody
     * may write into it (/tmp's own kind, sticky or not): nowhere else could a command have
     * put anything. */
    if (!mine && !(e->st.st_mode & S_IWOTH))
        return WALK_NEXT;
    if (!e->may_enter) {
        if (mine)
            move_up(e, o);
        return WALK_NEXT;
    }
    if ((mine ? open_to_empty(e) : walk_open(e, O_RDONLY | O_DIRECTORY)) < 0) {
        if (mine)
            note_failure(o->st, e->name, errno);
        return WALK_NEXT;
    }
    if (!S_ISDIR(e->st.st_mode) || kept(o, &e->st))
        return WALK_NEXT; /* swapped since the stat */
    if (mine && !doomed) {
        make_removable(e->fd, &e->st);
        o->doomed_at = (int)e->depth;
    } else if (mine) {
        make_removable(e->fd, &e->st);
    }
    return WALK_ENTER;
}

static int owned_post(struct walk_entry *e, void *ctx)
{
    struct owned *o = ctx;
    if (o->doomed_at < 0 || (int)e->depth < o->doomed_at)
        return 0; /* a shared directory looked into */
    /* Not empty: it holds something kept (the workspace). */
    remove_dir(e, o->st, true);
    if ((int)e->depth == o->doomed_at)
        o->doomed_at = -1;
    return 0;
}

int fs_clear_owned(const char *dir, const struct fs_uid_span *uids, unsigned nuids,
                   const struct fs_keep *keep, unsigned nkeep, struct fs_clear_stats *st)
{
    memset(st, 0, sizeof(*st));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1; /* (no /dev/shm here) */
    struct owned o = {.uids = uids,
                      .nuids = nuids,
                      .keep = keep,
                      .nkeep = nkeep,
                      .st = st,
                      .doomed_at = -1,
                      .top = dfd};
    /* Each pass removes what lies within SBXD_CLEAR_SHARED_MAX_DEPTH levels and moves deeper
     * subtrees of theirs up; the passes end when none was moved. */
    for (unsigned pass = 0; pass < SBXD_CLEAR_MAX_PASSES; pass++) {
        int sub = dup(dfd);
        if (sub < 0) {
            note_failure(st, dir, errno);
            break;
        }
        o.doomed_at = -1;
        o.moved_now = 0;
        struct walk w = {.max_entries = SBXD_CLEAR_SHARED_MAX_ENTRIES,
                         .max_depth = SBXD_CLEAR_SHARED_MAX_DEPTH,
                         .pre = owned_pre,
                         .post = owned_post,
                         .ctx = &o};
        walk_tree(sub, &w);
        if (w.cut & WALK_CUT_ENTRIES) {
            note_failure(st, dir, E2BIG);
            break;
        }
        if (!o.moved_now)
            break;
    }
    free(o.moved);
    close(dfd);
    return st->failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------- */
/* Finding the shared directories                                                       */

/* The kernel's own file systems: nothing of a command's can be in them, and some are huge
 * (/proc, /sys). */
static bool pseudo_fs(unsigned long type)
{
    static const unsigned long types[] = {
        0x9fa0,     /* proc */
        0x62656572, /* sysfs */
        0x27e0eb,   /* cgroup */
        0x63677270, /* cgroup2 */
        0x1cd1,     /* devpts */
        0x64626720, /* debugfs */
        0x74726163, /* tracefs */
        0x73636673, /* securityfs */
        0xcafe4a11, /* bpf */
        0x6165676c, /* pstore */
        0x62656570, /* configfs */
        0x65735543, /* fusectl */
        0x42494e4d, /* binfmt_misc */
        0x6e736673, /* nsfs */
        0xde5e81e4, /* efivarfs */
        0x0187,     /* autofs */
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (type == types[i])
            return true;
    return false;
}

struct finder {
    const struct fs_keep *keep;
    unsigned nkeep;
    struct fs_shared_dirs *out;
    char names[SBXD_SHARED_FIND_MAX_DEPTH + 1][256]; /* the path down to the entry */
    bool oom;
};

static void add_dir(struct fs_shared_dirs *out, const char *path, bool *oom)
{
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->paths[i], path) == 0)
            return;
    char **v = realloc(out->paths, (out->n + 1) * sizeof(*v));
    char *p = v ? strdup(path) : NULL;
    if (v)
        out->paths = v;
    if (!p) {
        *oom = true;
        return;
    }
    out->paths[out->n++] = p;
}

static int finder_pre(struct walk_entry *e, void *ctx)
{
    struct finder *f = ctx;
    if (e->depth > SBXD_SHARED_FIND_MAX_DEPTH)
        return WALK_NEXT;
    snprintf(f->names[e->depth], sizeof(f->names[0]), "%s", e->name);
    if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)
        return WALK_NEXT;
    if (walk_stat(e) < 0 || !S_ISDIR(e->st.st_mode))
        return WALK_NEXT;
    for (unsigned i = 0; i < f->nkeep; i++)
        if (f->keep[i].dev == e->st.st_dev && f->keep[i].ino == e->st.st_ino)
            return WALK_NEXT; /* the workspace, the baseline */
    if (e->st.st_mode & S_IWOTH) {
        /* Swept as a whole (fs_clear_owned looks into what anybody may write within it). */
        char path[PATH_MAX];
        size_t len = 0;
        for (unsigned d = 0; d <= e->depth && len < sizeof(path); d++)
            len += (size_t)snprintf(path + len, sizeof(path) - len, "/%s", f->names[d]);
        if (len < sizeof(path))
            add_dir(f->out, path, &f->oom);
        return WALK_NEXT;
    }
    /* The installed software's trees: thousands of directories (seconds of walking under
     * gVisor, where each look is a round trip to its gofer), and none that anybody may write
     * unless an image makes one there (then the mount table finds it if it is a mount). */
    static const char *const system_trees[] = {"usr",   "boot",  "proc", "sys", "lib",
                                               "lib64", "lib32", "bin",  "sbin"};
    for (size_t i = 0; e->depth == 0 && i < sizeof(system_trees) / sizeof(system_trees[0]); i++)
        if (strcmp(e->name, system_trees[i]) == 0)
            return WALK_NEXT;
    if (!e->may_enter || walk_open(e, O_RDONLY | O_DIRECTORY) < 0)
        return WALK_NEXT;
    struct statfs sf;
    if (fstatfs(e->fd, &sf) == 0 && pseudo_fs((unsigned long)sf.f_type))
        return WALK_NEXT;
    return WALK_ENTER;
}

/* "\040" and the like of /proc/self/mountinfo decoded in place. */
static void unescape_octal(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* Every mount point anybody may write, wherever it is (deeper than the walk goes too). */
static void find_mounts(struct finder *f)
{
    FILE *m = fopen("/proc/self/mountinfo", "re");
    if (!m)
        return;
    char line[4096];
    while (fgets(line, sizeof(line), m)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE ... */
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        char *at = NULL;
        for (int i = 0; tok && i < 4; i++)
            tok = strtok_r(NULL, " ", &save);
        at = tok;
        if (!at)
            continue;
        unescape_octal(at);
        int fd = open(at, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        struct statfs sf;
        bool keep = false;
        if (fstat(fd, &st) == 0 && (st.st_mode & S_IWOTH) && fstatfs(fd, &sf) == 0 &&
            !pseudo_fs((unsigned long)sf.f_type)) {
            keep = true;
            for (unsigned i = 0; i < f->nkeep; i++)
                if (f->keep[i].dev == st.st_dev && f->keep[i].ino == st.st_ino)
                    keep = false;
        }
        close(fd);
        if (keep)
            add_dir(f->out, at, &f->oom);
    }
    fclose(m);
}

int fs_find_shared(const struct fs_keep *keep, unsigned nkeep, struct fs_shared_dirs *out)
{
    memset(out, 0, sizeof(*out));
    struct finder *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->keep = keep;
    f->nkeep = nkeep;
    f->out = out;
    int dfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        struct walk w = {.max_entries = SBXD_SHARED_FIND_MAX_ENTRIES,
                         .max_depth = SBXD_SHARED_FIND_MAX_DEPTH,
                         .pre = finder_pre,
                         .ctx = f};
        walk_tree(dfd, &w);
        out->visited = w.visited;
        out->cut = (w.cut & WALK_CUT_ENTRIES) != 0;
    }
    find_mounts(f);
    bool oom = f->oom;
    free(f);
    return oom ? -1 : 0;
}

void fs_shared_dirs_free(struct fs_shared_dirs *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->paths[i]);
    free(d->paths);
    memset(d, 0, sizeof(*d));
}
