/*
 * limits.h - the fixed limits and tunables of sbxd in one place.
 * Configurable values have their defaults in config.c's option table instead.
 */
#ifndef SBXD_LIMITS_H
#define SBXD_LIMITS_H

/* Upper bound of any timeout a configuration or request may ask for: 7 days. */
#define SBXD_TIMEOUT_HARD_MAX_MS (7ULL * 24 * 3600 * 1000)

/* After the main process exits, how long output from leftover processes that still hold the
 * pipes is collected before they are killed. Long enough for a flush, short enough that
 * `sleep 100 & echo started` answers at once. */
#define SBXD_DRAIN_WINDOW_MS 50

/* Code contexts: how long a shell has to come back from an interrupt (then it is restarted),
 * and to start and answer its first marker. */
#define SBXD_CTX_GRACE_MS 2000
#define SBXD_CTX_START_MS 10000

/* A Jupyter kernel's start (an interpreter and its libraries: seconds, more under gVisor or
 * an emulated machine), and the largest message sbxd takes from one: a bigger one drops the
 * kernel's connection (a guard on sbxd's memory, far above a chart or a page of output). */
#define SBXD_KERNEL_START_MS 60000
/* An interrupt is sent to a kernel again this often until the code stops (one that came
 * before the code began is lost). */
#define SBXD_KERNEL_REINTERRUPT_MS 250
/* A kernel's message is received up to max(4 x --max-output-bytes, SBXD_KERNEL_MSG_MIN)
 * bytes, never more than SBXD_KERNEL_MSG_MAX (a larger one is dropped with its connection,
 * which ZeroMQ makes again), and at most SBXD_KERNEL_RCVHWM of iopub's wait in sbxd: the
 * rest wait in the kernel's own memory. */
#define SBXD_KERNEL_MSG_MIN (16LL << 20)
#define SBXD_KERNEL_MSG_MAX (64LL << 20)
#define SBXD_KERNEL_RCVHWM  4
/* MCP run_code answers at most this many images (and no more bytes of them than
 * --max-output-bytes); the rest are counted as left out. */
#define SBXD_MCP_MAX_IMAGES 32

/* Warm kernels (--warm-contexts) at most, and how long a failed start waits to try again. */
#define SBXD_WARM_MAX     8
#define SBXD_WARM_RETRY_S 30

/* Watches (watch.h): events a hub keeps for readers that come back, a window within which
 * the same event on a path is one, how long a hub outlives its last reader, and how deep a
 * recursive watch goes. */
#define SBXD_WATCH_RING        4096
#define SBXD_WATCH_COALESCE_MS 5
#define SBXD_WATCH_LINGER_S    30
#define SBXD_WATCH_MAX_DEPTH   64
/* Directories one MCP session's resource subscriptions may be in (each a watch of its GET
 * stream, from the MCP sessions' own pool of --max-watchers). */
#define SBXD_MCP_SESSION_WATCH_DIRS 8

/* Bytes read from a child pipe per read(2). */
#define SBXD_READ_CHUNK 65536

/* The stdout pipe of a streamed command is widened to this (the default 64 KiB makes a
 * writer of 128 KiB blocks stop and wake the reader twice per write), for at most
 * SBXD_STREAM_PIPES_MAX commands at a time: a pipe's size counts against its creator's
 * pipe-user-pages-soft (64 MiB by default) even empty, and past it every new pipe is small. */
#define SBXD_STREAM_PIPE      (1 << 20)
#define SBXD_STREAM_PIPES_MAX 16

/* Transient memory (KiB) of one request above which the daemon's peak RSS is reset before the
 * next spawn; about the most of the daemon's memory a command's memory_peak_bytes may wrongly
 * include (see spawn.c). */
#define SBXD_PEAK_SLACK_KB 512

/* RLIMIT_STACK of every command (soft and hard): the usual 8 MiB default, made firm. */
#define SBXD_CHILD_STACK (8ULL * 1024 * 1024)

/* Stack of the short-lived clone child between clone() and execve(). */
#define SBXD_SPAWN_STACK 32768

/* Stack of a PID namespace's init that shares the daemon's memory (spawn.c): its frames,
 * with the command's clone stack among them, and a guard page. */
#define SBXD_NS_INIT_STACK (128 * 1024)

/* Request shape limits (on top of --max-body-bytes). */
#define SBXD_MAX_ARGS 65536
#define SBXD_MAX_ENV  4096
/* Members of one JSON object in a request (jsonkeys.h): more is refused before its names are
 * checked for one given twice. Twice SBXD_MAX_ENV, the largest object a request needs. */
#define SBXD_JSON_MAX_MEMBERS 8192

/* Largest side of a pseudo-terminal, in columns or rows. */
#define SBXD_PTY_MAX 1000

/* Command text kept in an audit log line. */
#define SBXD_AUDIT_COMMAND_MAX 256

/* Symlinks followed while resolving one path (as the kernel's MAXSYMLINKS). */
#define SBXD_MAX_SYMLINKS 40

/* Directory depth tracked while resolving one path. */
#define SBXD_MAX_PATH_DEPTH 2048

/* Bounds of the directory-tree walks (fs/walk.c) over a hostile workspace: entries visited
 * in all, and directory levels entered below the one walked. A recursive delete counts no
 * entries (it removes what it visits, so it ends) and fails on a tree nested deeper than its
 * depth; the start-up sweep of stale uploads and the uid backend's re-own stop at their
 * bounds, go no deeper, and log that they were cut short. */
#define SBXD_DELETE_MAX_DEPTH  256
#define SBXD_COPY_MAX_ENTRIES  1000000u
#define SBXD_COPY_MAX_DEPTH    64
#define SBXD_SWEEP_MAX_ENTRIES 1000000u
#define SBXD_SWEEP_MAX_DEPTH   64
#define SBXD_REOWN_MAX_ENTRIES 1000000u
#define SBXD_REOWN_MAX_DEPTH   64
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
/* A reset waits at most this long for the killed jobs' processes to be reaped, then keeps
 * killing what still runs as the command users for at most this long. */
#define SBXD_RESET_REAP_MS   5000
#define SBXD_RESET_STRAYS_MS 2000

/* Body bytes read and dropped past --max-body-bytes (when no Content-Length announced the
 * size) before the connection is closed instead of answered with 413. */
#define SBXD_BODY_DISCARD_MAX (16 * 1024 * 1024)

/* Directory listings are streamed: the memory of one is these bounds (plus libc's directory
 * buffer), whatever the directory's size. A /files listing is sorted by name when the
 * directory has at most SBXD_LIST_SORT_MAX entries whose names fit in SBXD_LIST_SORT_BYTES
 * (held while it is sent); a larger directory is sent in its own order as it is read. */
#define SBXD_LIST_SORT_MAX   4096
#define SBXD_LIST_SORT_BYTES (256 * 1024)
/* JSON text of a listing made ahead of the client, and handed to libmicrohttpd, at a time. */
#define SBXD_LIST_CHUNK (16 * 1024)

/* Allocations from this size up are mappings of their own, unmapped when freed (main.c). */
#define SBXD_MMAP_THRESHOLD (64 * 1024)

/* The daemon's own oom_score_adj, when it may lower it: nearly never chosen by the OOM
 * killer, while commands (1000) always go first. Not -1000, which would exempt a leaking
 * daemon altogether. */
#define SBXD_DAEMON_OOM_SCORE_ADJ "-999"

/* Scheduling niceness of every command, and of sbxd itself where it may raise its priority:
 * the daemon keeps answering while commands spin on every CPU. */
#define SBXD_COMMAND_NICE 10
#define SBXD_DAEMON_NICE  -5

/* libmicrohttpd's memory per connection: headers and the read buffer a body arrives
 * through. 32 KiB (its default) caps an upload at ~200 MB/s in 16 KiB reads; 256 KiB
 * reaches ~1.1 GB/s on loopback, and is touched only by connections that carry bodies
 * (tools/mhd-patches: a kept-alive connection idle for 500 ms gives its pages back). */
#define SBXD_CONN_MEMORY (256 * 1024)

/* Connections accepted past --max-connections when none waiting for a request can make
 * room, to be answered 503 (or served, for a health check) rather than dropped unanswered;
 * beyond them a connection is closed at accept (accept.c). */
#define SBXD_CONN_SPARE 64
/* Connections shut down (to make room, or cut off) whose threads have not ended yet: room
 * for them in libmicrohttpd's count, so that it never refuses one sbxd admitted. */
#define SBXD_CONN_DYING 1024

/* The listening socket's queue of connections not yet accepted. */
#define SBXD_LISTEN_BACKLOG 512
/* Addresses the HTTP API may listen on at once (--listen repeated, or a comma list). */
#define SBXD_LISTEN_MAX 8
/* Lingering close (accept.c): sockets read and dropped from at once, and for how long. */
#define SBXD_LINGER_MAX  256
#define SBXD_LINGER_MS   2000
#define SBXD_LINGER_READ (64 * 1024)
/* Stack of the accepting thread. */
#define SBXD_FRONT_STACK (64 * 1024)

/* Stack of each connection thread. */
/* libmicrohttpd warnings logged per second at most (the rest are counted). */
#define SBXD_HTTP_LOG_BURST 20

#define SBXD_THREAD_STACK (512 * 1024)

/* Stack of a background process's driver thread (its read buffer is on the heap). */
#define SBXD_DRIVER_STACK (128 * 1024)

/* The main thread wakes this often for the connection guard's ticks, sweeps and the trim
 * at rest (deadlines are the keeper's, which sleeps until the next one: job_kill.c). */
#define SBXD_MAIN_TICK_MS 200
/* How long a command may take from clone to execve (or its timeout, if shorter) before the
 * deadline keeper kills it: the thread that spawns it waits for it meanwhile. */
#define SBXD_SPAWN_DEADLINE_MS 5000

/* The real-time signal by which sbxd asks a PID namespace's init to signal every process
 * of its namespace (the value carries which signal). Kernel numbering; glibc keeps 32-34. */
#define SBXD_NS_SIGNAL 40

/* stdin of a background process (POST /processes/{id}/stdin). Bytes waiting for one process
 * to read them, over every write: a write that would go past is refused with 429 (unless
 * nothing waits: a whole body, up to --max-body-bytes, is always taken), so writers to a
 * process that does not read cannot pile their bodies up in sbxd's memory. */
#define SBXD_STDIN_PENDING_MAX (1024 * 1024)
/* Bytes handed to the process's pipe at a time: what a write that gives up may leave
 * behind it, to go in once the process reads. */
#define SBXD_STDIN_CHUNK 65536
/* How often a waiting write looks whether its client hung up (and then gives up). */
#define SBXD_STDIN_POLL_MS 50

/* Seconds a client is told to wait after 429 or 503. */
#define SBXD_RETRY_AFTER_S 1

/* Base environment of every command; the request's env is merged over it. PATH and LANG
 * when sbxd's environment passes none (cmdenv.h). */
#define SBXD_BASE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define SBXD_BASE_LANG "C.UTF-8"
/* What commands inherit of sbxd's environment unless --pass-env says otherwise (cmdenv.h):
 * what an image or a pod sets for programs to find their runtime, libraries, locale and
 * CA bundles (docs/configuration.md gives the reasons). Exact names where a prefix would take
 * in credentials or another tool's settings (GO*, BUNDLE_*); the CA bundles' names hold CERT,
 * which a prefix never passes. */
#define SBXD_PASS_ENV_DEFAULT                                                                      \
    "PATH,LANG,LANGUAGE,LC_*,TZ,SANDBOX_*,"                                                        \
    "PYTHON*,VIRTUAL_ENV,CONDA_*,MAMBA_ROOT_PREFIX,PIP_*,UV_*,"                                    \
    "JAVA_*,JDK_JAVA_OPTIONS,MAVEN_HOME,MAVEN_OPTS,GRADLE_HOME,GRADLE_USER_HOME,"                  \
    "GOPATH,GOROOT,GOBIN,GOCACHE,GOMODCACHE,GOFLAGS,GOTOOLCHAIN,"                                  \
    "NODE_*,NPM_CONFIG_*,NVM_DIR,BUN_INSTALL,DENO_DIR,"                                            \
    "CARGO_HOME,RUSTUP_HOME,RUSTUP_TOOLCHAIN,RUST_VERSION,"                                        \
    "GEM_HOME,GEM_PATH,BUNDLE_PATH,BUNDLE_APP_CONFIG,RUBY_VERSION,DOTNET_*,"                       \
    "R_HOME,R_LIBS,R_LIBS_USER,JULIA_DEPOT_PATH,PERL5LIB,"                                         \
    "LD_LIBRARY_PATH,PKG_CONFIG_PATH,CUDA_HOME,"                                                   \
    "SSL_CERT_FILE,SSL_CERT_DIR,REQUESTS_CA_BUNDLE,CURL_CA_BUNDLE,NODE_EXTRA_CA_CERTS"
/* Items a --pass-env may hold. */
#define SBXD_PASS_ENV_MAX_ITEMS 256

#endif
