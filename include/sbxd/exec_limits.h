/*
 * exec_limits.h - the exec module's fixed limits: a request's shape, the spawn, the job's pipes
 * and deadlines, background processes' stdin, the commands' base environment. Configurable
 * values have their defaults in config.c's option table; limits shared by several modules are
 * in limits.h.
 */
#ifndef SBXD_EXEC_LIMITS_H
#define SBXD_EXEC_LIMITS_H

/* After the main process exits, how long output from leftover processes that still hold the
 * pipes is collected before they are killed. Long enough for a flush, short enough that
 * `sleep 100 & echo started` answers at once. */
#define SBXD_DRAIN_WINDOW_MS 50

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
/* Where that reset cannot be had (gVisor): how far (KiB) the daemon's all-time peak may be
 * above its current size for a command still to share its memory until execve, and so the
 * most a command's memory_peak_bytes floor may be above the daemon's current size. Above
 * it, commands are copies (spawn_peak.c). The daemon's first requests alone take it ~2 MiB
 * above its size at rest under gVisor. */
#define SBXD_SHARED_PEAK_SLACK_KB 4096

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

/* Largest side of a pseudo-terminal, in columns or rows. */
#define SBXD_PTY_MAX 1000

/* Command text kept in an audit log line. */
#define SBXD_AUDIT_COMMAND_MAX 256

/* The uid backend's re-own of the workspace (a directory-tree walk, fs/walk.c, over a hostile
 * workspace): entries visited in all and levels entered; it stops at them and logs that it was
 * cut short. */
#define SBXD_REOWN_MAX_ENTRIES 1000000u
#define SBXD_REOWN_MAX_DEPTH   64

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
