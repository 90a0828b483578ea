/*
 * fs_limits.h - the fs module's fixed limits: path resolution, the directory-tree walks over a
 * hostile workspace, archives, listings, watches. Configurable values have their defaults in
 * config.c's option table; limits shared by several modules are in limits.h.
 */
#ifndef SBXD_FS_LIMITS_H
#define SBXD_FS_LIMITS_H

/* Watches (watch.h): events a hub keeps for readers that come back, a window within which
 * the same event on a path is one, how long a hub outlives its last reader, and how deep a
 * recursive watch goes. */
#define SBXD_WATCH_RING        4096
#define SBXD_WATCH_COALESCE_MS 5
#define SBXD_WATCH_LINGER_S    30
#define SBXD_WATCH_MAX_DEPTH   64

/* Exact edits (edit.h): the largest file an edit reads and writes (it is edited in memory,
 * with the result beside it), the bytes a line-range read looks at for a NUL to call a file
 * binary, the changed line ranges an edit's answer lists, and the edits one request makes. */
#define SBXD_EDIT_MAX_BYTES (16 * 1024 * 1024)
#define SBXD_LINES_SNIFF    8192
#define SBXD_EDIT_MAX_SPANS 1024
#define SBXD_EDIT_MAX_EDITS 256

/* Symlinks followed while resolving one path (as the kernel's MAXSYMLINKS). */
#define SBXD_MAX_SYMLINKS 40

/* Directory depth tracked while resolving one path. */
#define SBXD_MAX_PATH_DEPTH 2048

/* Bounds of the directory-tree walks (fs/walk.c) over a hostile workspace: entries visited
 * in all, and directory levels entered below the one walked. A recursive delete counts no
 * entries (it removes what it visits, so it ends) and fails on a tree nested deeper than its
 * depth; the start-up sweep of stale uploads and the uid backend's re-own stop at their
 * bounds, go no deeper, and log that they were cut short (the uid backend's re-own: exec_limits.h).
 */
#define SBXD_DELETE_MAX_DEPTH 256

#define SBXD_COPY_MAX_ENTRIES 1000000u

#define SBXD_COPY_MAX_DEPTH 64

#define SBXD_SWEEP_MAX_ENTRIES 1000000u

#define SBXD_SWEEP_MAX_DEPTH 64

/* Search (search.h): entries visited and levels entered (as a copy's), the bytes of a line
 * shown (a longer one is cut, and says so), the context lines around a match, the read
 * buffer (a line longer than it is searched a buffer at a time), the matches of one search
 * by default and at most, and the PCRE2 match limit that ends a pathological pattern (the
 * file is skipped and counted, the search goes on). */
#define SBXD_SEARCH_MAX_ENTRIES     SBXD_COPY_MAX_ENTRIES
#define SBXD_SEARCH_MAX_DEPTH       SBXD_COPY_MAX_DEPTH
#define SBXD_SEARCH_LINE_MAX        2048
#define SBXD_SEARCH_MAX_CONTEXT     20
#define SBXD_SEARCH_BUF             (256 * 1024)
#define SBXD_SEARCH_MATCHES_DEFAULT 1000
#define SBXD_SEARCH_MATCHES_MAX     1000000
#define SBXD_SEARCH_MATCH_LIMIT     10000000
/* Threads that read and match the files of one content search, at most (fewer CPUs: fewer). */
#define SBXD_SEARCH_THREADS 4

/* Archive extraction (fs/archive.c) keeps one record per directory it made, to set the
 * directories' modes and times at the end: the memory those records (paths included) may
 * hold is so much per entry --max-archive-entries allows (16 MB at its default), and at
 * least the minimum; past it the archive is 413 (100,000 distinct directories 3.8 KB deep
 * would be 380 MB). Each symlink it made is followed through the tree as it will be, at most
 * so many directories deep (2 fds each; deeper is refused: too deep to judge). */
#define SBXD_ARCHIVE_DIR_MEMORY_PER_ENTRY 160
#define SBXD_ARCHIVE_DIR_MEMORY_MIN       (1024 * 1024)
#define SBXD_ARCHIVE_LINK_MAX_DEPTH       128

/* A reset's clear of the workspace (fs_clear_dir) removes what it visits, so it counts no
 * entries; a subtree deeper than SBXD_DELETE_MAX_DEPTH is moved up and emptied by another
 * pass, at most this many passes. In the shared directories (fs_clear_owned: /tmp...), shared
 * with others, a pass visits at most so many entries, so many levels deep, and moves a deeper
 * subtree of the users' up for the next pass likewise. The shared directories are found by a
 * walk of the root file system so many levels deep, visiting at most so many entries
 * (fs_find_shared). */
#define SBXD_CLEAR_MAX_PASSES         64
#define SBXD_CLEAR_SHARED_MAX_ENTRIES 1000000u
#define SBXD_CLEAR_SHARED_MAX_DEPTH   64
#define SBXD_SHARED_FIND_MAX_DEPTH    3
#define SBXD_SHARED_FIND_MAX_ENTRIES  200000u

/* Directory listings are streamed: the memory of one is these bounds (plus libc's directory
 * buffer), whatever the directory's size. A /files listing is sorted by name when the
 * directory has at most SBXD_LIST_SORT_MAX entries whose names fit in SBXD_LIST_SORT_BYTES
 * (held while it is sent); a larger directory is sent in its own order as it is read. */
#define SBXD_LIST_SORT_MAX   4096
#define SBXD_LIST_SORT_BYTES (256 * 1024)

#endif
