/*
 * walk.h - the one bounded walk of a directory tree: recursive delete, the sweep of stale
 * upload temporaries and the uid backend's re-own all go through it.
 *
 * The walk reads each directory through an fd and hands every entry ("." and ".." passed
 * over) to a visitor with the fd of the directory that holds it. Nothing is ever resolved
 * by path: an entry is looked at (walk_stat) and opened (walk_open) relative to its
 * parent's fd, never following a symlink, and a directory is entered only through the fd
 * that walk_open got, so a rename or a planted symlink cannot lead the walk out of the
 * tree or make it act on another file than the one it opened.
 *
 * Bounds, for a hostile tree: at most max_entries entries are visited in all, and no
 * directory is entered deeper than max_depth levels below the one walked (its entries are
 * at depth 0). Both are reported in `cut`. The bounds of each user are in limits.h.
 */
#ifndef SBXD_WALK_H
#define SBXD_WALK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a visitor's pre() asks for an entry. */
enum walk_step {
    WALK_STOP = -1, /* end the whole walk: walk_tree returns -1 */
    WALK_NEXT = 0,  /* done with it */
    WALK_ENTER = 1, /* walk the directory walk_open opened (anything else: as WALK_NEXT) */
};

struct walk_entry {
    int parent;           /* the directory that holds it (the walk's, not to be closed) */
    const char *name;     /* one component: no '/' */
    unsigned char d_type; /* as readdir said (DT_UNKNOWN where the file system does not) */
    unsigned depth;       /* 0: an entry of the directory walked */
    bool may_enter;       /* a directory here is within max_depth */
    int fd;               /* open on the entry itself (walk_open), else -1; the walk closes it */
    struct stat st;       /* filled by walk_stat or walk_open */
};

/* Bits of walk.cut. */
enum {
    WALK_CUT_ENTRIES = 1 << 0, /* max_entries reached: what was not read yet is not visited */
    WALK_CUT_DEPTH = 1 << 1,   /* a directory past max_depth was not entered */
    WALK_UNREADABLE = 1 << 2,  /* a directory could not be read (sys_errno: the first one's) */
};

struct walk {
    uint64_t max_entries;
    unsigned max_depth;
    /* strict: the first cut (a bound reached, a directory that cannot be read) ends the walk
     * with -1; otherwise what cannot be walked is passed over and the walk goes on. */
    bool strict;
    /* Each entry, in the order the directory gives them; returns a walk_step. */
    int (*pre)(struct walk_entry *e, void *ctx);
    /* A directory entered (may be NULL), once all its entries were visited and their fds
     * closed (e->fd is -1): 0, or -1 to end the walk. Not called for a directory whose
     * walk was cut short. */
    int (*post)(struct walk_entry *e, void *ctx);
    void *ctx;
    /* What happened. */
    uint64_t visited; /* entries handed to pre */
    unsigned cut;     /* WALK_CUT_* and WALK_UNREADABLE bits */
    int sys_errno;
};

/*
 * Walk the directory dirfd, which the walk takes (it is closed when the walk returns,
 * however it ends). A directory is read until its end (an error reading it ends it too).
 * Returns 0, or -1 when pre or post ended the walk (their ctx says why) or, when strict,
 * at the first cut (w->cut says which).
 */
int walk_tree(int dirfd, struct walk *w);

/* fstatat of the entry itself, not of what a symlink names, into e->st: 0 or -1 (errno). */
int walk_stat(struct walk_entry *e);

/* Open the entry relative to its parent with flags (O_RDONLY, O_DIRECTORY...) and
 * O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC: a symlink (one swapped in since the
 * readdir too) fails ELOOP or ENOTDIR, a fifo does not block. e->st gets the stat of what
 * was opened (not of the name), e->fd the fd. 0, or -1 (errno). */
int walk_open(struct walk_entry *e, int flags);

/* What walk_open does, for a name in a directory fd held elsewhere (a search's worker opens
 * the files the walk found): the fd, st filled, or -1 (errno). */
int walk_openat(int dirfd, const char *name, int flags, struct stat *st);

#endif
