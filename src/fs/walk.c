#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "sbxd/walk.h"

static void close_dir(DIR **d)
{
    if (*d)
        closedir(*d);
}
#define autoclosedir __attribute__((cleanup(close_dir)))

int walk_stat(struct walk_entry *e)
{
    return fstatat(e->parent, e->name, &e->st, AT_SYMLINK_NOFOLLOW);
}

int walk_openat(int dirfd, const char *name, int flags, struct stat *st)
{
    /* O_NOFOLLOW: the name may have been swapped for a symlink since the readdir (or the
     * visitor's stat); opening it must not reach what the link names, inside the tree or
     * out. O_NONBLOCK and O_NOCTTY: a fifo or a terminal swapped in neither hangs the walk
     * nor becomes sbxd's controlling terminal. */
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

int walk_open(struct walk_entry *e, int flags)
{
    if (e->fd >= 0) {
        close(e->fd);
        e->fd = -1;
    }
    int fd = walk_openat(e->parent, e->name, flags, &e->st);
    if (fd < 0)
        return -1;
    e->fd = fd;
    return 0;
}

/* Note a cut; whether it ends the walk. */
static bool walk_cut(struct walk *w, unsigned bit, int sys_errno)
{
    if (bit == WALK_UNREADABLE && !(w->cut & WALK_UNREADABLE))
        w->sys_errno = sys_errno;
    w->cut |= bit;
    return w->strict;
}

static int walk_dir(int dfd, unsigned depth, struct walk *w);

/* The directory e's visitor opened and asked to enter: walked, then handed to post. -1
 * when the walk ends. */
static int walk_enter(struct walk_entry *e, struct walk *w)
{
    if (e->fd < 0 || !S_ISDIR(e->st.st_mode))
        return 0;
    if (!e->may_enter)
        return walk_cut(w, WALK_CUT_DEPTH, 0) ? -1 : 0;
    /* Entered through the fd that was opened and checked, never by its name again. */
    int fd = e->fd;
    e->fd = -1;
    int rc = walk_dir(fd, e->depth + 1, w);
    if (rc != 0 || !w->post)
        return rc < 0 ? -1 : 0;
    return w->post(e, w->ctx) < 0 ? -1 : 0;
}

/* The directory dfd (taken), whose entries are at depth: 0 when all its entries were
 * visited, 1 when it was cut short, -1 when the walk ends. */
static int walk_dir(int dfd, unsigned depth, struct walk *w)
{
    autoclosedir DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return walk_cut(w, WALK_UNREADABLE, e) ? -1 : 1;
    }
    for (;;) {
        if (w->visited >= w->max_entries)
            return walk_cut(w, WALK_CUT_ENTRIES, 0) ? -1 : 1;
        struct dirent *de = readdir(d);
        if (!de)
            return 0;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        w->visited++;
        struct walk_entry e = {
            .parent = dirfd(d),
            .name = de->d_name,
            .d_type = de->d_type,
            .depth = depth,
            .may_enter = depth < w->max_depth,
            .fd = -1,
        };
        int step = w->pre(&e, w->ctx);
        int rc = step < 0 ? -1 : step == WALK_ENTER ? walk_enter(&e, w) : 0;
        if (e.fd >= 0)
            close(e.fd);
        if (rc < 0)
            return -1;
    }
}

int walk_tree(int dirfd, struct walk *w)
{
    w->visited = 0;
    w->cut = 0;
    w->sys_errno = 0;
    return walk_dir(dirfd, 0, w) < 0 ? -1 : 0;
}
