/*
 * sbxd - main: configuration, start-up, the signal loop (which is also the reaper), and
 * the drain on SIGTERM/SIGINT.
 *
 * Every signal sbxd handles is blocked in all threads and taken synchronously here with
 * sigtimedwait: no asynchronous handler ever runs, so none can run on a borrowed stack in a
 * freshly cloned child either.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/auth.h"
#include "sbxd/cgroup.h"
#include "sbxd/cmdenv.h"
#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/watch.h"
#include "sbxd/config.h"
#include "sbxd/contain.h"
#include "sbxd/files.h"
#include "sbxd/grpc.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"
#include "sbxd/job.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/mcp.h"
#include "sbxd/reaper.h"
#include "sbxd/reset.h"
#include "sbxd/resolve.h"
#include "sbxd/sandbox.h"
#include "sbxd/server.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"

/* The daemon's own fixed settings. */

/* Allocations from this size up are mappings of their own, unmapped when freed (main.c). */
#define SBXD_MMAP_THRESHOLD (64 * 1024)

/* The daemon's own oom_score_adj, when it may lower it: nearly never chosen by the OOM
 * killer, while commands (1000) always go first. Not -1000, which would exempt a leaking
 * daemon altogether. */
#define SBXD_DAEMON_OOM_SCORE_ADJ "-999"

/* sbxd's own niceness, where it may raise its priority (commands run at SBXD_COMMAND_NICE). */
#define SBXD_DAEMON_NICE -5

/* The main thread wakes this often for the connection guard's ticks, sweeps and the trim
 * at rest (deadlines are the keeper's, which sleeps until the next one: job_kill.c). */
#define SBXD_MAIN_TICK_MS 200

extern char **environ;

/* A daemon started with 0, 1 or 2 closed would hand those numbers to its own pipes and
 * sockets, and a child's dup onto 0-2 would then clobber them. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) < 0)
            _exit(1);
}

/* Commands run as the command user and must be able to write the workspace. A root-owned
 * workspace root (as a fresh one is) is given to that user; one owned by anybody else was
 * set up on purpose and is left alone. Under uid isolation commands write it through the
 * command group, so its root is made group-writable too. */
static int give_workspace(int rootfd, const char *workspace, const struct harden_plan *h)
{
    struct stat st;
    if (!h->switch_user || h->uid == 0 || fstat(rootfd, &st) < 0 ||
        (st.st_uid != 0 && st.st_uid != h->uid))
        return 0;
    bool chown_it = st.st_uid == 0;
    bool chmod_it = h->group_share && (st.st_mode & 070) != 070;
    if (!chown_it && !chmod_it)
        return 0;
    /* Through a real open of the directory: gVisor refuses fchownat on an O_PATH fd. */
    int dfd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd < 0 ? -1 : 0;
    if (rc == 0 && chown_it)
        rc = fchown(dfd, h->uid, h->gid);
    if (rc == 0 && chmod_it)
        rc = fchmod(dfd, (st.st_mode & 07777) | 070);
    int e = errno;
    if (dfd >= 0)
        close(dfd);
    errno = e;
    if (rc < 0) {
        LOG_EVENT("error", "start",
                  LOG_S("message", "cannot give the workspace to the command user"),
                  LOG_S("workspace", workspace), LOG_S("error", strerror(errno)));
        return -1;
    }
    LOG_EVENT("info", "workspace", LOG_S("path", workspace), LOG_I("uid", h->uid),
              LOG_I("gid", h->gid), LOG_S("action", chown_it ? "chown" : "chmod g+rwx"));
    return 0;
}

/* Whether path a is b or lies beneath it (both absolute, resolved). */
static bool path_within(const char *a, const char *b)
{
    size_t n = strlen(b);
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/' || (n == 1 && b[0] == '/'));
}

/* --workspace-baseline: a directory apart from the workspace (a reset empties the one before
 * it copies the other). Returns its fd, -1 for none, or -2 (logged). */
static int open_baseline(const char *path, const char *workspace)
{
    if (!*path)
        return -1;
    char real[PATH_MAX];
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *why = NULL;
    if (fd < 0 || !realpath(path, real))
        why = strerror(errno);
    else if (path_within(real, workspace) || path_within(workspace, real))
        why = "it and the workspace must not hold one another";
    if (!why)
        return fd;
    if (fd >= 0)
        close(fd);
    LOG_EVENT("error", "start", LOG_S("message", "unusable --workspace-baseline"),
              LOG_S("path", path), LOG_S("error", why));
    return -2;
}

/* Under memory pressure the kernel should kill a command (1000), never sbxd: lower our own
 * score where allowed (only with CAP_SYS_RESOURCE) and where the kernel's OOM killer weighs
 * it (scored). Returns the score in force. */
static int protect_daemon(bool scored)
{
    int fd = open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[16] = "";
    if (scored && write(fd, SBXD_DAEMON_OOM_SCORE_ADJ, strlen(SBXD_DAEMON_OOM_SCORE_ADJ)) < 0) {
        /* not allowed: keep what we have */
    }
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    /* Ahead of commands for the CPU too, where allowed (CAP_SYS_NICE). Niceness belongs to
     * threads: set before any exists, every connection thread inherits it. */
    if (setpriority(PRIO_PROCESS, 0, SBXD_DAEMON_NICE) < 0) {
        /* not allowed: commands still run at SBXD_COMMAND_NICE, below us */
    }
    return n > 0 ? atoi(buf) : 0;
}

/* Each connection holds a descriptor, and each running command a few: make sure the soft
 * limit allows what the caps allow (up to the hard limit), or EMFILE would refuse clients
 * long before --max-connections does. */
static void raise_fd_limit(const struct sbxd_config *cfg)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)(cfg->max_connections + SBXD_CONN_SPARE +
                           4 * (cfg->max_running + cfg->max_processes) + 256);
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (rl.rlim_cur > was && setrlimit(RLIMIT_NOFILE, &rl) == 0)
        LOG_EVENT("info", "fd_limit", LOG_I("was", (int64_t)was),
                  LOG_I("now", (int64_t)rl.rlim_cur));
    if (rl.rlim_cur < want)
        LOG_EVENT("warn", "fd_limit", LOG_I("limit", (int64_t)rl.rlim_cur),
                  LOG_I("wanted", (int64_t)want),
                  LOG_S("message", "the open-file limit is below what --max-connections and the "
                                   "command caps can use: clients may see errors first"));
}

/* After a burst, glibc keeps what the connection threads freed in its per-thread arenas: at
 * rest (nothing running, and no request for a second), give it back to the kernel, once per
 * burst. Without this a daemon that served 64 clients stays ~5 MiB larger for good. */
static void trim_at_rest(struct server *srv, struct sandbox *sb, uint64_t *trimmed_at)
{
    static uint64_t seen;
    static int64_t quiet_since;
    uint64_t done = server_completed(srv);
    int64_t now = time_mono_ns();
    if (done != seen || sandbox_running(sb) > 0 || bg_running() > 0) {
        seen = done;
        quiet_since = now;
        return;
    }
    if (done == *trimmed_at || now - quiet_since < 1000000000LL)
        return;
    malloc_trim(0);
    *trimmed_at = done;
}

/* Wait up to ms for a signal in set, then reap: on SIGCHLD, and on every tick for a quiet
 * child nobody waits for any more (reaper.h). Returns the signal, 0 on timeout. */
static int wait_signal(const sigset_t *set, int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    siginfo_t si;
    int sig = sigtimedwait(set, &si, ms < 0 ? NULL : &ts);
    reaper_reap();
    return sig < 0 ? 0 : sig;
}

static void drain(struct server *srv, struct sandbox *sb, struct grpc_front *grpc,
                  const struct sbxd_config *cfg, const sigset_t *set)
{
    sandbox_drain(sb);
    if (grpc)
        grpc_front_drain(grpc);
    LOG_EVENT("info", "draining", LOG_I("running", sandbox_running(sb)),
              LOG_I("processes", bg_running()), LOG_I("grace_ms", cfg->shutdown_grace_ms));
    /* Background processes run until told: they are told now, as a container runtime
     * would, and killed with the rest when the grace period is over. */
    bg_signal_all(SIGTERM);
    /* A context's shell is interactive, and so ignores SIGTERM: contexts are killed at once
     * (an execution in progress answers "died"), and forgotten after the server stopped. */
    ctx_kill_all();
    int64_t deadline = time_mono_ns() + (int64_t)cfg->shutdown_grace_ms * 1000000;
    while ((sandbox_running(sb) > 0 || bg_running() > 0) && time_mono_ns() < deadline) {
        int sig = wait_signal(set, 20);
        server_tick(srv);
        if (sig == SIGTERM || sig == SIGINT)
            break; /* asked twice: do not wait out the grace period */
    }
    if (sandbox_running(sb) > 0 || bg_running() > 0) {
        LOG_EVENT("warn", "killing", LOG_I("running", sandbox_running(sb)),
                  LOG_I("processes", bg_running()));
        job_kill_all(JOB_KILL_CANCEL);
    }
    /* Killed commands end within milliseconds; their responses and the exit events of
     * background processes' followers are still sent before the server closes. */
    int64_t hard = time_mono_ns() + 5000000000LL;
    while ((sandbox_running(sb) > 0 || bg_running() > 0 || server_streams(srv) > 0 ||
            (grpc && grpc_front_calls(grpc) > 0)) &&
           time_mono_ns() < hard)
        wait_signal(set, 20);
}

/* Which variables of sbxd's environment commands inherit: names only, never a value. */
static void log_environment(const struct cmdenv *ce)
{
    char names[1024];
    size_t n = 0;
    names[0] = '\0';
    for (size_t i = 0; i < ce->npassed && n < sizeof(names); i++) {
        int w = snprintf(names + n, sizeof(names) - n, "%s%s", i ? "," : "", ce->passed[i]);
        n += w > 0 ? (size_t)w : 0;
    }
    LOG_EVENT("info", "environment", LOG_S("mode", ce->empty ? "minimal" : "allow-list"),
              LOG_S("passed", names));
}

/* The process itself, before anything else runs: std fds, the log, the token out of the
 * environment, the fd limit, malloc's behaviour and the signals. 0, or an exit status. */
static int setup_process(struct sbxd_config *cfg, sigset_t *set)
{
    ensure_std_fds();
    log_init(cfg->log_format);
    if (cfg->env_ignored[0])
        LOG_EVENT("warn", "config",
                  LOG_S("message", "ignored: not a number of seconds above 0; the default applies"),
                  LOG_S("variable", cfg->env_ignored));
    /* First, before any thread or child exists: the token leaves the environment here. */
    static char token[SBXD_TOKEN_MAX + 1];
    struct sbxd_err err_token = {0};
    if (auth_load(cfg->token_file, environ, token, sizeof(token), &err_token) < 0) {
        fprintf(stderr, "sbxd: %s\n", err_token.msg);
        return 2;
    }
    cfg->token = token;
    /* Then what commands inherit of the environment, chosen once (the token is gone from it,
     * and no SBXD_ variable passes anyway: cmdenv.h). */
    static struct cmdenv cmdenv;
    struct sbxd_err err_env = {0};
    if (cmdenv_init(&cmdenv, cfg->pass_env, environ, &err_env) < 0) {
        fprintf(stderr, "sbxd: %s\n", err_env.msg);
        return 2;
    }
    cfg->cmdenv = &cmdenv;
    log_environment(&cmdenv);
    raise_fd_limit(cfg);
    /* Large buffers (captured output, bodies, results) each get their own mapping, returned
     * to the kernel when freed. glibc would otherwise raise this threshold after the first
     * large free and keep later ones in its heaps: one big result, and the daemon stays
     * tens of MiB larger for good. A fixed value also turns that adjustment off. */
    mallopt(M_MMAP_THRESHOLD, SBXD_MMAP_THRESHOLD);
    /* One heap per connection thread (glibc's default allows 8 per CPU) is memory a burst
     * leaves behind, never to be reused: on 2 CPUs, 16 arenas kept ~3 MiB after 64 clients.
     * Four are enough for sbxd's short critical sections. */
    mallopt(M_ARENA_MAX, 4);

    /* Writes to a vanished client must fail with EPIPE, not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(set);
    sigaddset(set, SIGCHLD);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, set, NULL); /* before any thread exists: all inherit it */
    spawn_init();
    reaper_init();
    /* Orphans of commands (a shell's background child whose parent exited) are re-parented
     * to us rather than to an init that may not reap them, and the reaper collects them. */
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);
    return 0;
}

static void log_isolation(const struct sbxd_config *cfg, const struct isolation *iso,
                          const struct harden_plan *harden)
{
    const struct cg_root *cg = &iso->cg;
    struct iso_description d;
    isolation_describe(iso, harden, cfg->memory_max, &d);
    LOG_EVENT(
        "info", "isolation", LOG_S("cgroup", cg->available ? cg->base : "none"),
        LOG_S("cgroup_reason", cg->available ? NULL : cg->why),
        LOG_B("memory_enforced", cg->available && cg->memory_enforced),
        LOG_B("pids_enforced", cg->available && cg->pids_enforced),
        LOG_B("cpu", cg->available && cg->cpu), LOG_S("memory", d.memory),
        LOG_S("tree_kill", d.tree_kill), LOG_S("inter_command", d.inter_command),
        LOG_S("ipc", iso->ipcns_ok ? d.ipc : iso->ipcns_why),
        LOG_S("pidns", iso->pidns_ok ? (iso->pidns_userns ? "userns" : "direct") : iso->pidns_why),
        LOG_S("uid_range", iso->uid_ok ? cfg->uid_range : iso->uid_why),
        LOG_B("clone3", iso->clone3), LOG_B("pidfd", iso->pidfd),
        LOG_B("oom_scored", iso->oom_scored), LOG_B("seccomp", harden->seccomp),
        LOG_I("landlock", harden->landlock_abi), LOG_S("user", d.user));
}

/* Probe and choose the isolation, build the hardening plan, hand the workspace to the
 * command user. Both before any thread exists: the probes fork, and the capability bounding
 * set is emptied for the threads to inherit. 0, or an exit status (the log says why). */
static int setup_isolation(const struct sbxd_config *cfg, int rootfd, const char *workspace,
                           struct isolation *iso, struct harden_plan *harden)
{
    struct sbxd_err err = {0};
    int rc = isolation_setup(iso, cfg, &err);
    if (rc < 0) {
        if (rc == -2)
            fprintf(stderr, "sbxd: %s\n", err.msg);
        else
            LOG_EVENT("error", "start", LOG_S("message", err.msg));
        return rc == -2 ? 2 : 1;
    }
    if (harden_init(harden, cfg->user_uid, cfg->user_gid, iso->tree_kill == ISO_KILL_PIDNS,
                    iso->ipcns_ok, &err) < 0) {
        LOG_EVENT("error", "start", LOG_S("message", err.msg));
        return 1;
    }
    harden->group_share = iso->tree_kill == ISO_KILL_UID;
    if (iso->ipcns_ok)
        iso->ipcns_ok = spawn_ipcns_check(harden, iso->tree_kill == ISO_KILL_PIDNS, iso->ipcns_why,
                                          sizeof(iso->ipcns_why));
    if (give_workspace(rootfd, workspace, harden) < 0) {
        harden_free(harden);
        return 1;
    }
    if (isolation_check_required(iso, harden, &err) < 0) {
        LOG_EVENT("error", "start", LOG_S("message", err.msg));
        harden_free(harden);
        return 1;
    }
    log_isolation(cfg, iso, harden);
    harden->pidns_own_proc = iso->pidns_own_proc;
    harden->oom_adjust = iso->oom_scored;
    harden->daemon_oom_score_adj = protect_daemon(iso->oom_scored);
    return 0;
}

/*
 * A --token-file a command can read is a token every command has: any could drive sbxd as
 * its client (a Kubernetes Secret volume is 0644 unless told otherwise). Decided once the
 * isolation is known, as the commands' own credentials would decide it: the command user, and
 * under uid isolation the range's uids with the command group. Refused at start (exit 2, one
 * line), or with --degraded-ok served as degraded with no command run. 0, or an exit status.
 */
static int check_token_file(const struct sbxd_config *cfg, struct isolation *iso,
                            const struct harden_plan *harden)
{
    if (!*cfg->token_file || isolation_degraded(iso, NULL, 0))
        return 0; /* no file; or no command will ever run */
    struct auth_readers who = {
        .switch_user = harden->switch_user, .user_uid = harden->uid, .user_gid = harden->gid};
    if (iso->tree_kill == ISO_KILL_UID) {
        who.range_first = cfg->uid_first;
        who.range_count = cfg->uid_count;
    }
    char why[512];
    if (auth_file_exposed(cfg->token_file, &who, why, sizeof(why)) == 0)
        return 0;
    if (!cfg->degraded_ok) {
        fprintf(stderr, "sbxd: %s\n", why);
        return 2;
    }
    isolation_degrade_for_good(iso, why);
    return 0;
}

/* The main thread from here on: signals (SIGCHLD: the reaper), the server's ticks, sweeps. Returns
 * on SIGTERM or SIGINT. */
static void run_main_loop(struct server *srv, struct sandbox *sb, const sigset_t *set)
{
    int64_t swept = time_mono_ns();
    uint64_t trimmed_at = 0;
    for (;;) {
        int sig = wait_signal(set, SBXD_MAIN_TICK_MS);
        server_tick(srv);
        trim_at_rest(srv, sb, &trimmed_at);
        if (time_mono_ns() - swept >= 1000000000LL) {
            bg_sweep();  /* ended background processes past their retention */
            ctx_sweep(); /* contexts idle past --context-idle-s */
            swept = time_mono_ns();
        }
        if (sig == SIGTERM || sig == SIGINT)
            break;
        if (sig == SIGHUP)
            LOG_EVENT("info", "signal", LOG_S("name", "SIGHUP"), LOG_S("action", "ignored"));
    }
}

/* What main builds and tears down: the workspace, the isolation, the sandbox root, and the
 * fronts serving it. */
struct daemon {
    struct sbxd_config cfg;
    sigset_t set;
    int64_t t0;
    int rootfd;
    char workspace[PATH_MAX];
    struct isolation iso;
    struct harden_plan harden;
    struct sandbox sb;
    struct server *srv;
    struct grpc_front *grpc;
};

/* The workspace root, its baseline, the isolation and the token file's check; then the
 * sandbox root over them. 0, or an exit status (the log says why; nothing is left open). */
static int open_sandbox(struct daemon *d)
{
    struct sbxd_err err = {0};
    d->rootfd = fs_open_root(d->cfg.workspace, d->workspace, &err);
    if (d->rootfd < 0) {
        LOG_EVENT("error", "start", LOG_S("message", err.msg));
        return 1;
    }
    int baseline_fd = open_baseline(d->cfg.workspace_baseline, d->workspace);
    if (baseline_fd == -2) {
        close(d->rootfd);
        return 1;
    }
    int rc = setup_isolation(&d->cfg, d->rootfd, d->workspace, &d->iso, &d->harden);
    if (!rc && (rc = check_token_file(&d->cfg, &d->iso, &d->harden)))
        harden_free(&d->harden);
    if (rc) {
        if (baseline_fd >= 0)
            close(baseline_fd);
        close(d->rootfd);
        return rc;
    }
    sandbox_init(&d->sb, &d->cfg, d->rootfd, d->workspace, &d->harden, &d->iso, baseline_fd);
    return 0;
}

/* The exec core's threads and tables: the spawn pool, the backend, reset's directories, the
 * background processes, the deadline keeper. 0, or -1 with err. */
static int start_core(struct daemon *d, struct sbxd_err *err)
{
    const struct sbxd_config *cfg = &d->cfg;
    /* After protect_daemon: the pool's thread and its inits inherit its settings. */
    if (d->iso.tree_kill == ISO_KILL_PIDNS && !isolation_degraded(&d->iso, NULL, 0)) {
        spawn_pool_start(&d->harden,
                         (unsigned)(cfg->max_running + cfg->max_processes + cfg->max_contexts),
                         d->rootfd, d->workspace);
        if (!spawn_ns_slots())
            spawn_ns_maker_start();
    }
    contain_choose(&d->iso); /* the backend's implementation, once (contain.h) */
    /* The directories anybody may write, which a reset sweeps, found meanwhile (reset.h). */
    struct reset_env renv = {.rootfd = d->rootfd,
                             .baseline_fd = d->sb.baseline_fd,
                             .harden = &d->harden,
                             .iso = &d->iso,
                             .cfg = cfg};
    reset_prepare(&renv);
    struct bg_config bgc = {.max_processes = (unsigned)cfg->max_processes,
                            .output_bytes = (size_t)cfg->process_output_bytes,
                            .retention_ms = cfg->process_retention_s * 1000};
    bg_init(&bgc);
    if (job_keeper_start() < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot start the deadline keeper");
    return 0;
}

/* The fronts, each handed the sandbox: HTTP, the contexts, gRPC. 0, or -1 with err (none of
 * them left running). */
static int start_fronts(struct daemon *d, struct sbxd_err *err)
{
    const struct sbxd_config *cfg = &d->cfg;
    mcp_init(&d->sb);
    d->srv = server_start(cfg, &d->sb, err);
    if (!d->srv)
        return -1;
    struct ctx_config cc = {.max_contexts = (unsigned)cfg->max_contexts,
                            .idle_ms = cfg->context_idle_s * 1000,
                            .max_output = cfg->max_output_bytes};
    ctx_init(&cc, &d->sb.exec);
    if (!cfg->grpc_off && !(d->grpc = grpc_front_start(cfg, &d->sb, err))) {
        server_stop(d->srv);
        bg_shutdown();
        d->srv = NULL;
        return -1;
    }
    return 0;
}

static void log_listening(const struct daemon *d)
{
    char ports[SBXD_LISTEN_MAX * 6 + 1];
    server_ports(d->srv, ports, sizeof(ports));
    LOG_EVENT("info", "listening", LOG_S("listen", d->cfg.listen),
              LOG_I("port", server_port(d->srv)), LOG_S("ports", ports),
              LOG_S("grpc_listen", d->cfg.grpc_listen),
              d->grpc ? LOG_I("grpc_port", grpc_front_port(d->grpc)) : LOG_NULL("grpc_port"),
              LOG_S("workspace", d->workspace), LOG_S("version", SBXD_VERSION),
              LOG_I("max_running", d->cfg.max_running), LOG_I("command_uid", d->harden.uid),
              LOG_I("command_gid", d->harden.gid), LOG_B("seccomp", d->harden.seccomp),
              LOG_D("startup_ms", (double)(time_mono_ns() - d->t0) / 1e6));
}

/* Once sbxd serves: the stale uploads' sweep, the watches, the warm kernels. */
static void start_background(struct daemon *d)
{
    /* Upload temporary files that a killed sbxd left are removed in the background, as the
     * command user; only those older than this start: an upload begun since is never
     * touched. */
    struct fs_user sweep_user = {
        .switch_ids = d->harden.switch_user, .uid = d->harden.uid, .gid = d->harden.gid};
    fs_sweep_stale_uploads_async(d->rootfd, time_real_ns() - (time_mono_ns() - d->t0), &sweep_user);
    struct watch_limits wl = {.max_watchers = (unsigned)d->cfg.max_watchers,
                              .max_dirs = (unsigned)d->cfg.watch_max_dirs};
    watch_init(&wl, d->rootfd, &sweep_user);
    /* Warm kernels are made once sbxd serves: they never delay readiness. */
    ctx_warm_start((unsigned)d->cfg.warm_contexts);
}

/* The exec core's threads, the hardening plan, the sandbox and the root: what is left once
 * the fronts stopped (or never started). */
static void stop_core(struct daemon *d)
{
    job_keeper_stop();
    spawn_pool_stop();
    reaper_reap();
    sandbox_free(&d->sb);
    harden_free(&d->harden);
    close(d->rootfd);
}

int main(int argc, char **argv)
{
    static struct daemon d;
    d.t0 = time_mono_ns();
    struct sbxd_err perr = {0};
    switch (config_parse(&d.cfg, argc, argv, environ, stdout, &perr)) {
    case CONFIG_EXIT_0:
        return 0;
    case CONFIG_EXIT_2:
        fprintf(stderr, "sbxd: %s\n", perr.msg);
        return 2;
    case CONFIG_RUN:
        break;
    }
    int rc = setup_process(&d.cfg, &d.set);
    if (rc || (rc = open_sandbox(&d)))
        return rc;
    struct sbxd_err err = {0};
    if (start_core(&d, &err) < 0 || start_fronts(&d, &err) < 0) {
        LOG_EVENT("error", "start", LOG_S("message", err.msg));
        stop_core(&d);
        return 1;
    }
    log_listening(&d);
    start_background(&d);

    /* Where every command's owner reaps it on its pidfd (quiet_exit), the SIGCHLD that its
     * execve turns back on (the kernel resets the exit signal there, whatever the clone
     * asked) would only wake this thread for nothing: it is not waited for and stays
     * pending, and each tick's reap collects whatever nobody waits for (reaper.h). */
    sigset_t wait_set = d.set;
    if (d.iso.pidfd && !d.iso.contain->init_reports)
        sigdelset(&wait_set, SIGCHLD);
    run_main_loop(d.srv, &d.sb, &wait_set);
    watch_shutdown(); /* (its streams end, with a "gone" event: none holds the drain up) */
    drain(d.srv, &d.sb, d.grpc, &d.cfg, &wait_set);
    if (d.grpc)
        grpc_front_stop(d.grpc);
    server_stop(d.srv);
    mcp_shutdown();
    ctx_shutdown();
    bg_shutdown();
    stop_core(&d);
    LOG_EVENT("info", "stopped", LOG_I("exit_code", 0));
    return 0;
}
