/*
 * watch.h - changes in the workspace as events (GET /files/{path}?watch=true), from inotify.
 *
 * One hub per watched directory (and recursive flag): an inotify instance, a thread that
 * reads it with the command user's file rights, and a ring of the most recent events, each
 * with an offset (its number since the hub began). Subscribers read the ring at their own
 * pace from an offset of their choosing: a client whose stream dropped comes back with
 * since=OFFSET and loses nothing the ring still holds; what it no longer holds becomes one
 * explicit `overflow` event, as does the kernel's own queue overflowing: never silence. A
 * hub outlives its last subscriber by SBXD_WATCH_LINGER_S, so that a reconnection finds it.
 *
 * Recursive hubs watch every directory beneath, adding those that appear (created or moved
 * in), and report what a new directory already held as created; a directory moved out stops
 * being watched. Paths are relative to the workspace root, as /files takes them; nothing
 * outside the watched tree is reported (symlinks are never followed into a watch). Events
 * on one path that repeat within SBXD_WATCH_COALESCE_MS are reported once.
 */
#ifndef SBXD_WATCH_H
#define SBXD_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "sbxd/err.h"
#include "sbxd/files.h"

enum watch_type {
    WATCH_CREATE,
    WATCH_WRITE,
    WATCH_REMOVE,
    WATCH_RENAME,
    WATCH_ATTRIB,
    WATCH_OVERFLOW, /* events were lost: `missed` of them (0: unknown, the kernel's queue) */
    WATCH_GONE,     /* the watched directory itself was removed or moved away: the end */
};

const char *watch_type_name(enum watch_type t);

struct watch_event {
    enum watch_type type;
    uint64_t offset;
    bool is_dir;
    uint64_t missed; /* WATCH_OVERFLOW */
    char path[4096]; /* relative to the workspace root */
    char from[4096]; /* WATCH_RENAME: the old path */
    int64_t real_ns; /* when sbxd read it */
};

struct watch_limits {
    unsigned max_watchers; /* subscribers at once in each pool (SBXD_E_BUSY beyond) */
    unsigned max_dirs;     /* directories one recursive hub watches at most */
};

/* Whose subscriber it is. Each pool has max_watchers of its own: MCP sessions' resource
 * subscriptions once took every watcher (two sessions, 16 directories each), and REST watches
 * got 429; now neither front can take the other's. */
enum watch_pool {
    WATCH_POOL_FILES, /* GET /files/DIR?watch=true */
    WATCH_POOL_MCP,   /* the GET /mcp streams of resources/subscribe */
};

void watch_init(const struct watch_limits *l, int rootfd, const struct fs_user *u);

struct watch_sub;

/* Watch path (a directory beneath the root), from offset since (UINT64_MAX: from now), as a
 * subscriber of pool. NULL with err: SBXD_E_NOT_FOUND, SBXD_E_INVALID (not a directory),
 * SBXD_E_BUSY (the limits). */
struct watch_sub *watch_open(const char *path, bool recursive, uint64_t since, enum watch_pool pool,
                             struct sbxd_err *err);

/* The next event into *ev: waits up to timeout_ms (-1: no limit). 1: an event; 0: none within
 * the wait; -1: the stream is over (after WATCH_GONE). */
int watch_next(struct watch_sub *s, int timeout_ms, struct watch_event *ev);

/* The offset the next event will have (for the stream's first line). */
uint64_t watch_offset(const struct watch_sub *s);

void watch_close(struct watch_sub *s);

/* Stop every hub (shutdown). */
void watch_shutdown(void);

#endif
