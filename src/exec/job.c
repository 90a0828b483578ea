/*
 * job.c - a job's start and its end: the pipes (or a terminal), the limits, the backend's
 * hold (contain.h), the rlimits, the spawn under its own deadline; and the one release path
 * (job_internal.h) that start failures, the end and job_free share.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "job_internal.h"
#include "sbxd/exec_limits.h"
#include "sbxd/resolve.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

const char *job_status_name(enum job_status s)
{
    switch (s) {
    case JOB_RUNNING:
        return "running";
    case JOB_EXITED:
        return "exited";
    case JOB_SIGNALED:
        return "signaled";
    case JOB_TIMEOUT:
        return "timeout";
    case JOB_OOM:
        return "oom";
    case JOB_OUTPUT_LIMIT:
        return "output_limit";
    case JOB_FAILED_TO_START:
        return "failed_to_start";
    case JOB_CANCELED:
        return "canceled";
    }
    return "unknown";
}

static int devnull_fd = -1;
static pthread_once_t devnull_once = PTHREAD_ONCE_INIT;

static void devnull_open(void)
{
    devnull_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void make_id(char *out)
{
    static const char hex[] = "0123456789abcdef";
    static uint64_t fallback_counter;
    uint8_t raw[12];
    if (getrandom(raw, sizeof(raw), GRND_NONBLOCK) != (ssize_t)sizeof(raw)) {
        uint64_t a = (uint64_t)time_real_ns() ^ (uint64_t)getpid() << 32;
        uint64_t b = __atomic_add_fetch(&fallback_counter, 1, __ATOMIC_RELAXED);
        memcpy(raw, &a, 8);
        memcpy(raw + 8, &b, 4);
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * sizeof(raw)] = '\0';
}

static void free_strv(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

/* Candidate paths for execve, as execvp would try them: a name with a slash as it is,
 * otherwise each directory of the command's own PATH. */
static char **exec_candidates(const struct exec_request *req)
{
    const char *name = req->argv[0];
    if (strchr(name, '/')) {
        char **v = calloc(2, sizeof(char *));
        if (v && !(v[0] = strdup(name))) {
            free(v);
            return NULL;
        }
        return v;
    }
    const char *path = SBXD_BASE_PATH;
    for (char **e = req->envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            path = *e + 5;
    size_t n = 1;
    for (const char *p = path; *p; p++)
        n += *p == ':';
    char **v = calloc(n + 1, sizeof(char *));
    if (!v)
        return NULL;
    size_t i = 0;
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t dl = end ? (size_t)(end - p) : strlen(p);
        size_t len = (dl ? dl : 1) + 1 + strlen(name) + 1;
        if (!(v[i] = malloc(len))) {
            free_strv(v);
            return NULL;
        }
        snprintf(v[i], len, "%.*s/%s", (int)(dl ? dl : 1), dl ? p : ".", name);
        i++;
        if (!end)
            break;
        p = end;
    }
    return v;
}

static int add_rlimit(struct spawn_spec *s, int res, uint64_t soft, uint64_t hard)
{
    if (s->nrlimits >= SPAWN_MAX_RLIMITS)
        return -1;
    s->rlimits[s->nrlimits].resource = res;
    s->rlimits[s->nrlimits].value.rlim_cur = soft;
    s->rlimits[s->nrlimits].value.rlim_max = hard;
    s->nrlimits++;
    return 0;
}

/*
 * A pseudo-terminal of cols x rows: its master (*master), and its slave (*slave) for the
 * command. 0, or -1 with err.
 *
 * The slave is sbxd's own (its euid's), mode 0600, set before it is unlocked: no other
 * command may open it by its name (/dev/pts/N) to write forged output into the command's
 * terminal or to read the input meant for it. (It used to be the command user's, 0620, and
 * 0660 through the shared group under uid isolation: every command could.) The command
 * needs no permission on it: it holds it open as its stdin, stdout and stderr, and
 * /dev/tty, which reaches it as the controlling terminal, is opened by the kernel without
 * looking at the slave's mode. Only reopening it by name is refused, to it as to the rest.
 */
static int open_pty(unsigned cols, unsigned rows, int *master, int *slave, struct sbxd_err *err)
{
    *master = *slave = -1;
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    char name[64];
    if (m < 0 || grantpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0) {
        int e = errno;
        if (m >= 0)
            close(m);
        return sbxd_fail_errno(
            err, e == EMFILE || e == ENFILE || e == ENOSPC ? SBXD_E_BUSY : SBXD_E_INTERNAL, e,
            "cannot open a pseudo-terminal");
    }
    /* Locked until unlockpt, so nobody can have opened it yet. (The name is the kernel's:
     * only devpts makes entries in /dev/pts, and this index is ours while m is open.) */
    if (chown(name, geteuid(), getegid()) < 0 || chmod(name, 0600) < 0 || unlockpt(m) < 0) {
        int e = errno;
        close(m);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e,
                               "cannot make the pseudo-terminal %s private", name);
    }
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    int sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (sl < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0) {
        int e = errno;
        close(m);
        if (sl >= 0)
            close(sl);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot open the pseudo-terminal %s", name);
    }
    *master = m;
    *slave = sl;
    return 0;
}

/* A containment mechanism failed for this command: when it is a required one, the daemon is
 * degraded and the request is refused as unavailable, not as sbxd's own failure. Running the
 * command with less than was required is never an option. */
static void degrade(struct isolation *iso, unsigned req, struct sbxd_err *err)
{
    if (err->kind == SBXD_E_BUSY || err->kind == SBXD_E_INVALID)
        return;
    char what[sizeof(err->msg)];
    snprintf(what, sizeof(what), "%s", err->msg);
    if (isolation_degrade(iso, req, what))
        sbxd_fail(err, SBXD_E_UNAVAILABLE, err->sys_errno,
                  "required isolation failed, sbxd is degraded: %s", what);
}

/* The descriptors of a start, until the job takes its ends of them. */
struct start_io {
    int out[2], err[2], in[2], st[2];
    int slave; /* a terminal's, before it is the child's stdin and stdout */
    int cwd_fd;
    bool has_stdin;
    char **candidates;
};

static void start_io_close(struct start_io *io, bool pty)
{
    if (pty && io->in[0] == io->out[1])
        io->in[0] = -1; /* the slave, once */
    for (int i = 0; i < 2; i++) {
        job_close_fd(&io->out[i]);
        job_close_fd(&io->err[i]);
        job_close_fd(&io->in[i]);
        job_close_fd(&io->st[i]);
    }
    job_close_fd(&io->slave);
    job_close_fd(&io->cwd_fd);
    free_strv(io->candidates);
    io->candidates = NULL;
}

/* Streamed commands holding a widened stdout pipe now. */
static unsigned wide_pipes;

/* Widen a streamed command's stdout pipe (fd: its read end) while fewer than
 * SBXD_STREAM_PIPES_MAX are: a fast writer then runs in long bursts, and sbxd reads whole
 * chunks. Failure (pipe-max-size, the user's pipe budget) leaves the pipe as it was. */
static void widen_pipe(struct job *job, int fd)
{
    if (__atomic_add_fetch(&wide_pipes, 1, __ATOMIC_RELAXED) <= SBXD_STREAM_PIPES_MAX &&
        fcntl(fd, F_SETPIPE_SZ, SBXD_STREAM_PIPE) >= 0) {
        job->wide_out = true;
        return;
    }
    __atomic_sub_fetch(&wide_pipes, 1, __ATOMIC_RELAXED);
}

static int pipes_failed(struct sbxd_err *err)
{
    return sbxd_fail_errno(err, errno == EMFILE || errno == ENFILE ? SBXD_E_BUSY : SBXD_E_INTERNAL,
                           errno, "cannot create pipes");
}

/* The command's stdin, stdout and stderr: pipes, or one terminal for all three. */
static int open_io(struct job *job, const struct exec_request *req, const struct job_env *env,
                   struct start_io *io, struct sbxd_err *err)
{
    bool reports = job_init_reports(job);
    io->has_stdin = (req->has_stdin || env->interactive) && env->stdin_file <= 0;
    if (req->pty) {
        /* One terminal for all three: the master is read for output and written for input
         * (through a second descriptor, so stdin can close apart from it). */
        if (open_pty(req->pty_cols, req->pty_rows, &io->out[0], &io->slave, err) < 0)
            return -1;
        io->out[1] = io->slave;
        io->in[0] = io->slave;
        io->slave = -1;
        io->in[1] = fcntl(io->out[0], F_DUPFD_CLOEXEC, 3);
        job->pty_fd = fcntl(io->out[0], F_DUPFD_CLOEXEC, 3);
        if (io->in[1] < 0 || job->pty_fd < 0 || pipe2(io->err, O_CLOEXEC) < 0 ||
            (reports && pipe2(io->st, O_CLOEXEC) < 0))
            return pipes_failed(err);
        /* Nothing goes to the separate stderr pipe: its write end closes at once. */
        io->has_stdin = true;
    } else if (pipe2(io->out, O_CLOEXEC) < 0 || pipe2(io->err, O_CLOEXEC) < 0 ||
               (reports && pipe2(io->st, O_CLOEXEC) < 0) ||
               (io->has_stdin && pipe2(io->in, O_CLOEXEC) < 0)) {
        return pipes_failed(err);
    } else if (env->streamed) {
        widen_pipe(job, io->out[0]);
    }
    if (io->has_stdin) {
        /* Written from the poll loop: never block on a child that does not read. */
        fcntl(io->in[1], F_SETFL, O_NONBLOCK);
        job->stdin_alloc = req->stdin_len ? req->stdin_len : 1;
        job->stdin_data = malloc(job->stdin_alloc);
        if (!job->stdin_data)
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        if (req->has_stdin)
            memcpy(job->stdin_data, req->stdin_data, req->stdin_len);
        job->stdin_len = req->has_stdin ? req->stdin_len : 0;
        job->in_queued = job->stdin_len;
        /* A request's stdin alone: closed once written (EOF, as a file would give). */
        job->in_eof = !env->interactive;
    } else if (devnull_fd < 0) {
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open /dev/null");
    }
    job->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (job->ev_fd < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot create an eventfd");
    return 0;
}

/* The working directory, beneath the workspace; NULL-free candidates for execve. */
static int resolve_start(const struct exec_request *req, const struct job_env *env,
                         struct start_io *io, struct sbxd_err *err)
{
    if (req->cwd[0]) {
        io->cwd_fd = fs_resolve_beneath(env->rootfd, req->cwd, FS_RESOLVE_DIRECTORY, err);
        if (io->cwd_fd < 0) {
            char why[sizeof(err->msg)];
            snprintf(why, sizeof(why), "%s", err->msg);
            /* A missing cwd is a bad request here, not a missing resource. */
            bool missing = err->kind == SBXD_E_NOT_FOUND;
            enum sbxd_errkind kind = missing ? SBXD_E_INVALID : err->kind;
            sbxd_fail(err, kind, err->sys_errno, "cwd '%.100s': %s", req->cwd, why);
            if (missing)
                err->flags |= SBXD_EF_NO_CWD; /* (gRPC answers it NOT_FOUND, as sandboxd) */
            return -1;
        }
    }
    io->candidates = exec_candidates(req);
    if (!io->candidates)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

/* Limits only a cgroup can enforce are refused, not silently ignored, without one. */
static int check_cgroup_limits(const struct job *job, const struct exec_request *req,
                               struct sbxd_err *err)
{
    bool cg = job->cg->available;
    if (req->limits.pids != EXEC_LIMIT_UNSET && !(cg && job->cg->pids))
        return sbxd_fail(err, SBXD_E_INVALID, 0,
                         "limits.pids needs the cgroup pids controller, which this host does "
                         "not give sbxd (see /healthz isolation)");
    if (req->limits.cpu_quota > 0 && !(cg && job->cg->cpu))
        return sbxd_fail(err, SBXD_E_INVALID, 0,
                         "limits.cpu_quota needs the cgroup cpu controller, which this host "
                         "does not give sbxd (see /healthz isolation)");
    return 0;
}

/* Every rlimit a command gets, in one place. mem: the memory limit in force (0: none). */
static void set_rlimits(struct spawn_spec *spec, const struct exec_request *req, uint64_t mem,
                        const struct cg_root *cg)
{
    /* Without a cgroup that enforces memory, the address space is the next best bound. */
    if (mem && !(cg->available && cg->memory))
        add_rlimit(spec, RLIMIT_AS, mem, mem);
    add_rlimit(spec, RLIMIT_CORE, 0, 0); /* no core dumps of untrusted memory */
    /* A bounded stack: deep recursion fails in the command, not by eating the pod. */
    add_rlimit(spec, RLIMIT_STACK, SBXD_CHILD_STACK, SBXD_CHILD_STACK);
    if (req->limits.cpu_ms != EXEC_LIMIT_UNSET) {
        /* SIGXCPU at the soft limit, SIGKILL a second later for those who catch it. */
        uint64_t secs = (req->limits.cpu_ms + 999) / 1000;
        add_rlimit(spec, RLIMIT_CPU, secs, secs + 1);
    }
    if (req->limits.file_size_bytes != EXEC_LIMIT_UNSET)
        add_rlimit(spec, RLIMIT_FSIZE, req->limits.file_size_bytes, req->limits.file_size_bytes);
    if (req->limits.open_files != EXEC_LIMIT_UNSET)
        add_rlimit(spec, RLIMIT_NOFILE, req->limits.open_files, req->limits.open_files);
}

/* A pidfd for the job's process, opened under the reaper's lock while it is unreaped (so the
 * number is still the job's; a zombie's pidfd is readable at once). Should it fail (no fd
 * left), the main thread's tick still reaps the quiet child and wakes the job. */
static void open_pidfd(struct reap_target *t, void *arg)
{
    struct job *job = arg;
    job->pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0); /* close-on-exec, always */
}

/* Clone the child under the spawn deadline, then arm the command's own. */
static int spawn(struct job *job, const struct exec_request *req, struct spawn_spec *spec,
                 struct sbxd_err *err)
{
    job->rt.notify_fd = job->ev_fd;
    reaper_add(&job->rt);
    job->start_ns = time_mono_ns();
    int child_errno = 0;
    const char *child_step = NULL;
    /*
     * The spawn has a deadline of its own, which the keeper enforces (job_kill.c): this
     * thread waits in clone until the child has exec'd, and a child stopped before that (by
     * a process of another command that may signal it: same uid, no Landlock) would hold the
     * thread and the command's running slot forever. The kernel stores the child's pid
     * before it runs (CLONE_PARENT_SETTID), so it can be killed at any point.
     */
    job->spawn_is_timeout = req->timeout_ms <= SBXD_SPAWN_DEADLINE_MS;
    uint64_t spawn_ms = job->spawn_is_timeout ? req->timeout_ms : SBXD_SPAWN_DEADLINE_MS;
    __atomic_store_n(&job->spawning, 1, __ATOMIC_RELEASE);
    job_deadline_arm(job, job->start_ns + (int64_t)spawn_ms * 1000000);
    pid_t spawned = spawn_child(spec, &job->rt.pid, &child_errno, &child_step, err);
    __atomic_store_n(&job->spawning, 0, __ATOMIC_RELEASE);
    if (spawned < 0) {
        degrade(job->iso, job->box.ops->degrades_on_spawn, err);
        return -1;
    }
    isolation_recovered(job->iso);
    job_deadline_arm(job, job->start_ns + (int64_t)req->timeout_ms * 1000000);
    if (spec->quiet_exit)
        reaper_call(&job->rt, open_pidfd, job);
    if (__atomic_load_n(&job->kill_reason, __ATOMIC_ACQUIRE) == JOB_KILL_SPAWN) {
        job->res.status = JOB_FAILED_TO_START;
        snprintf(job->res.error, sizeof(job->res.error),
                 "'%s' had not started after %llu ms (stopped before exec, then killed)",
                 req->argv[0], (unsigned long long)spawn_ms);
    } else if (child_errno) {
        job->res.status = JOB_FAILED_TO_START;
        snprintf(job->res.error, sizeof(job->res.error), "%s '%s': %s", child_step, req->argv[0],
                 strerror(child_errno));
        job->res.step = child_step;
        job->res.error_errno = child_errno;
    }
    return 0;
}

/* The child has its ends: the job keeps its own. */
static void adopt_io(struct job *job, const struct exec_request *req, struct start_io *io)
{
    job_close_fd(&io->out[1]);
    job_close_fd(&io->err[1]);
    if (job_init_reports(job)) {
        job_close_fd(&io->st[1]);
        job->status_fd = io->st[0];
        io->st[0] = -1;
        fcntl(job->status_fd, F_SETFL, O_NONBLOCK); /* read after the init's death too */
        snprintf(job->argv0, sizeof(job->argv0), "%s", req->argv[0]);
    }
    if (io->has_stdin && !req->pty)
        job_close_fd(&io->in[0]); /* (with a pty it is the slave, out[1], closed above) */
    else
        io->in[0] = -1;
    job->out_fd = io->out[0];
    job->err_fd = io->err[0];
    job->in_fd = io->in[1];
    io->out[0] = io->err[0] = io->in[1] = -1;
}

static struct job *job_new(const struct exec_request *req, const struct job_env *env)
{
    struct job *job = calloc(1, sizeof(*job));
    if (!job)
        return NULL;
    job->out_fd = job->err_fd = job->in_fd = job->ev_fd = job->status_fd = job->pty_fd = -1;
    job->pidfd = -1;
    pthread_mutex_init(&job->in_lock, NULL);
    pthread_cond_init(&job->in_cond, NULL);
    job->interactive = env->interactive;
    job->iso = env->iso;
    contain_init(&job->box, env->iso, env->rootfd, env->harden->uid, env->harden->gid);
    job->cg = &env->iso->cg;
    job->cancel_fd = env->cancel_fd;
    job->cancel_peek = true;
    job->output_limit = req->limits.output_bytes;
    make_id(job->id);
    return job;
}

struct job *job_start(const struct exec_request *req, const struct job_env *env,
                      struct sbxd_err *err)
{
    pthread_once(&devnull_once, devnull_open);
    struct job *job = job_new(req, env);
    if (!job) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    struct start_io io = {.out = {-1, -1},
                          .err = {-1, -1},
                          .in = {-1, -1},
                          .st = {-1, -1},
                          .slave = -1,
                          .cwd_fd = -1};
    if (resolve_start(req, env, &io, err) < 0 || open_io(job, req, env, &io, err) < 0 ||
        check_cgroup_limits(job, req, err) < 0)
        goto fail;
    uint64_t mem =
        req->limits.memory_bytes != EXEC_LIMIT_UNSET ? req->limits.memory_bytes : env->memory_max;
    uint64_t pids = req->limits.pids != EXEC_LIMIT_UNSET ? req->limits.pids : env->pids_max;
    struct spawn_spec spec = {
        .exec_paths = io.candidates,
        .argv = req->argv,
        .envp = req->envp,
        .stdin_fd = io.has_stdin          ? io.in[0]
                    : env->stdin_file > 0 ? env->stdin_file
                                          : devnull_fd,
        .stdout_fd = io.out[1],
        .stderr_fd = req->pty ? io.out[1] : io.err[1],
        .pty = req->pty,
        .cwd_fd = io.cwd_fd >= 0 ? io.cwd_fd : env->rootfd,
        .cwd_path = req->cwd,
        .cwd_abs = env->start_dir,
        .harden = env->harden,
        .network = req->network,
        .cgroup_procs_fd = -1,
        .status_fd = io.st[1],
        .ns_mnt_fd = -1,
        .uid = (uid_t)-1,
    };
    /* Into the backend's hold: a cgroup leaf, a namespace, a uid of its own (contain.h). */
    struct cg_limits lim = {.memory_bytes = mem, .pids = pids, .cpu_quota = req->limits.cpu_quota};
    if (job->box.ops->prepare(&job->box, job->id, &lim, &spec, err) < 0) {
        degrade(job->iso, job->box.ops->degrades_on_prepare, err);
        goto fail;
    }
    set_rlimits(&spec, req, mem, job->cg);
    /* Where the kernel has pidfd the job waits on its process, not on the main thread's
     * SIGCHLD (reaper.h). A one-command init reports on its pipe and keeps its signal. */
    spec.quiet_exit = job->iso->pidfd && !job_init_reports(job);
    if (spawn(job, req, &spec, err) < 0)
        goto fail;
    adopt_io(job, req, &io);
    start_io_close(&io, req->pty);
    if (job_init_reports(job))
        job_await_exec(job, job->start_ns + (int64_t)SBXD_SPAWN_DEADLINE_MS * 1000000);
    return job;

fail:
    start_io_close(&io, req->pty);
    job_release(job, false);
    job_free(job);
    return NULL;
}

void job_release(struct job *job, bool ran)
{
    job_deadline_disarm(job);
    /* Off the reaper's list before the eventfd goes: a child reaped in between (a PID
     * namespace's init dies after this) would have its wake-up written to a closed fd's
     * number, by then perhaps another command's pipe. */
    reaper_remove(&job->rt);
    job_close_fd(&job->out_fd);
    if (job->wide_out) {
        job->wide_out = false;
        __atomic_sub_fetch(&wide_pipes, 1, __ATOMIC_RELAXED);
    }
    job_close_fd(&job->err_fd);
    pthread_mutex_lock(&job->in_lock);
    job_close_fd(&job->in_fd);
    job_close_fd(&job->ev_fd);
    job_close_fd(&job->pty_fd);
    pthread_cond_broadcast(&job->in_cond);
    pthread_mutex_unlock(&job->in_lock);
    job_close_fd(&job->status_fd);
    job_close_fd(&job->pidfd);
    job->box.ops->release(&job->box, ran);
    job->finished = true;
}

const struct job_result *job_result(const struct job *job)
{
    return &job->res;
}

const char *job_id(const struct job *job)
{
    return job->id;
}

pid_t job_pid(const struct job *job)
{
    return job->rt.pid;
}

void job_free(struct job *job)
{
    if (!job)
        return;
    if (!job->finished) {
        /* Abandoned mid-run: kill it; the reaper collects the child as an unknown pid. */
        job_kill_tree(job, false);
        job_release(job, true);
    }
    free(job->stdin_data);
    pthread_mutex_destroy(&job->in_lock);
    pthread_cond_destroy(&job->in_cond);
    free(job);
}
