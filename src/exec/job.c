#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/job.h"
#include "sbxd/contain.h"
#include "sbxd/limits.h"
#include "sbxd/reaper.h"
#include "sbxd/resolve.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"

struct job {
    struct reap_target rt; /* first: the reaper's callbacks hand us this pointer */
    char id[25];
    int out_fd, err_fd, in_fd, ev_fd, cancel_fd;
    /* stdin: bytes queued for the child, written from job_step as it reads. Under in_lock,
     * with ev_fd and in_fd, because an interactive job (a background process) takes more
     * from other threads (job_stdin_write) while it runs. */
    pthread_mutex_t in_lock;
    pthread_cond_t in_cond; /* the queue moved, or stdin closed */
    uint8_t *stdin_data;
    size_t stdin_len, stdin_off, stdin_alloc;
    bool interactive;    /* stdin stays open when the queue is empty */
    bool in_eof;         /* close stdin once the queue is written */
    uint64_t in_queued;  /* bytes ever queued ... */
    uint64_t in_written; /* ... and written to the pipe */
    int pty_fd;          /* a terminal's master (its window size), or -1 */
    int64_t start_ns, deadline_ns, drain_deadline_ns;
    uint64_t output_limit, output_total;
    int kill_reason;  /* enum job_kill_reason, atomic */
    int spawning;     /* atomic: between clone and the end of spawn_child */
    bool exited;      /* the main process is reaped */
    bool final_drain; /* leftovers killed: read what is buffered, then end */
    bool finished;
    int next_stream;  /* which pipe is read first, alternated so neither starves */
    bool cancel_peek; /* also poll the client socket for POLLIN and peek (see job_step) */
    /* A backend whose job process is a one-command init (ns: contain_ops.init_reports): the
     * init reports the command's end through status_fd (spawn_ns_msg); rt is the init. */
    bool ns;
    int status_fd;
    bool main_reported;
    int main_status;
    struct rusage main_ru;
    int64_t main_exit_ns;
    char argv0[64];           /* for a failed_to_start message reported by the init */
    struct contain box;       /* the containment backend's hold on the command (contain.h) */
    const struct cg_root *cg; /* the cgroups, for the limits only a cgroup can enforce */
    struct isolation *iso;
    struct job_result res;
};

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

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
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

/* stdin closes: nothing more is written; writers waiting learn it. */
static void close_stdin(struct job *job)
{
    pthread_mutex_lock(&job->in_lock);
    close_fd(&job->in_fd);
    pthread_cond_broadcast(&job->in_cond);
    pthread_mutex_unlock(&job->in_lock);
}

static void job_destroy_fds(struct job *job)
{
    close_fd(&job->out_fd);
    close_fd(&job->err_fd);
    pthread_mutex_lock(&job->in_lock);
    close_fd(&job->in_fd);
    close_fd(&job->ev_fd);
    close_fd(&job->pty_fd);
    pthread_cond_broadcast(&job->in_cond);
    pthread_mutex_unlock(&job->in_lock);
    close_fd(&job->status_fd);
}

/* A pseudo-terminal of cols x rows: its master (*master), and its slave (*slave) for the
 * command, owned by the command's uid like a login's. 0, or -1 with err. */
static int open_pty(unsigned cols, unsigned rows, uid_t uid, gid_t gid, bool group_share,
                    int *master, int *slave, struct sbxd_err *err)
{
    *master = *slave = -1;
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    char name[64];
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0) {
        int e = errno;
        if (m >= 0)
            close(m);
        return sbxd_fail_errno(
            err, e == EMFILE || e == ENFILE || e == ENOSPC ? SBXD_E_BUSY : SBXD_E_INTERNAL, e,
            "cannot open a pseudo-terminal");
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
    /* Root made it; the command may not reopen its own terminal unless it is its own (with
     * uid isolation: its group's, the command's own uid being taken later). */
    if (fchown(sl, uid, gid) < 0 || fchmod(sl, group_share ? 0660 : 0620) < 0) {
        /* A daemon that is not root keeps its own: it is the command's too. */
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

struct job *job_start(const struct exec_request *req, const struct job_env *env,
                      struct sbxd_err *err)
{
    pthread_once(&devnull_once, devnull_open);
    struct job *job = calloc(1, sizeof(*job));
    if (!job) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    job->out_fd = job->err_fd = job->in_fd = job->ev_fd = job->status_fd = job->pty_fd = -1;
    pthread_mutex_init(&job->in_lock, NULL);
    pthread_cond_init(&job->in_cond, NULL);
    job->interactive = env->interactive;
    job->iso = env->iso;
    contain_init(&job->box, env->iso, env->rootfd, env->harden->uid, env->harden->gid);
    job->ns = job->box.ops->init_reports;
    job->cg = &env->iso->cg;
    job->cancel_fd = env->cancel_fd;
    job->cancel_peek = true;
    job->output_limit = req->limits.output_bytes;
    make_id(job->id);

    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, in_p[2] = {-1, -1}, st_p[2] = {-1, -1};
    int slave = -1;
    bool has_stdin = req->has_stdin || env->interactive;
    int cwd_fd = -1;
    char **candidates = NULL;

    if (req->cwd[0]) {
        cwd_fd = fs_resolve_beneath(env->rootfd, req->cwd, FS_RESOLVE_DIRECTORY, err);
        if (cwd_fd < 0) {
            char why[sizeof(err->msg)];
            snprintf(why, sizeof(why), "%s", err->msg);
            /* A missing cwd is a bad request here, not a missing resource. */
            enum sbxd_errkind kind = err->kind == SBXD_E_NOT_FOUND ? SBXD_E_INVALID : err->kind;
            sbxd_fail(err, kind, err->sys_errno, "cwd '%.100s': %s", req->cwd, why);
            goto fail;
        }
    }
    if (req->pty) {
        /* One terminal for all three: the master is read for output and written for input
         * (through a second descriptor, so stdin can close apart from it). */
        const struct harden_plan *h = env->harden;
        uid_t tu = h->switch_user ? h->uid : geteuid();
        gid_t tg = h->switch_user ? h->gid : getegid();
        if (open_pty(req->pty_cols, req->pty_rows, tu, tg, h->group_share, &out_p[0], &slave, err) <
            0)
            goto fail;
        out_p[1] = slave;
        in_p[0] = slave;
        slave = -1;
        in_p[1] = fcntl(out_p[0], F_DUPFD_CLOEXEC, 3);
        job->pty_fd = fcntl(out_p[0], F_DUPFD_CLOEXEC, 3);
        if (in_p[1] < 0 || job->pty_fd < 0 || pipe2(err_p, O_CLOEXEC) < 0 ||
            (job->ns && pipe2(st_p, O_CLOEXEC) < 0)) {
            sbxd_fail_errno(err, errno == EMFILE || errno == ENFILE ? SBXD_E_BUSY : SBXD_E_INTERNAL,
                            errno, "cannot create pipes");
            goto fail;
        }
        /* Nothing goes to the separate stderr pipe: its write end closes at once. */
        has_stdin = true;
    } else if (pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0 ||
               (job->ns && pipe2(st_p, O_CLOEXEC) < 0) ||
               (has_stdin && pipe2(in_p, O_CLOEXEC) < 0)) {
        sbxd_fail_errno(err, errno == EMFILE || errno == ENFILE ? SBXD_E_BUSY : SBXD_E_INTERNAL,
                        errno, "cannot create pipes");
        goto fail;
    }
    if (has_stdin) {
        /* Written from the poll loop: never block on a child that does not read. */
        fcntl(in_p[1], F_SETFL, O_NONBLOCK);
        job->stdin_alloc = req->stdin_len ? req->stdin_len : 1;
        job->stdin_data = malloc(job->stdin_alloc);
        if (!job->stdin_data) {
            sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
            goto fail;
        }
        if (req->has_stdin)
            memcpy(job->stdin_data, req->stdin_data, req->stdin_len);
        job->stdin_len = req->has_stdin ? req->stdin_len : 0;
        job->in_queued = job->stdin_len;
        /* A request's stdin alone: closed once written (EOF, as a file would give). */
        job->in_eof = !env->interactive;
    } else if (devnull_fd < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open /dev/null");
        goto fail;
    }
    job->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (job->ev_fd < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot create an eventfd");
        goto fail;
    }
    /* Limits only a cgroup can enforce are refused, not silently ignored, without one. */
    uint64_t mem =
        req->limits.memory_bytes != EXEC_LIMIT_UNSET ? req->limits.memory_bytes : env->memory_max;
    uint64_t pids = req->limits.pids != EXEC_LIMIT_UNSET ? req->limits.pids : env->pids_max;
    bool cg = job->cg->available;
    if (req->limits.pids != EXEC_LIMIT_UNSET && !(cg && job->cg->pids)) {
        sbxd_fail(err, SBXD_E_INVALID, 0,
                  "limits.pids needs the cgroup pids controller, which this host does not "
                  "give sbxd (see /healthz isolation)");
        goto fail;
    }
    if (req->limits.cpu_quota > 0 && !(cg && job->cg->cpu)) {
        sbxd_fail(err, SBXD_E_INVALID, 0,
                  "limits.cpu_quota needs the cgroup cpu controller, which this host does not "
                  "give sbxd (see /healthz isolation)");
        goto fail;
    }
    candidates = exec_candidates(req);
    if (!candidates) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        goto fail;
    }

    struct spawn_spec spec = {
        .exec_paths = candidates,
        .argv = req->argv,
        .envp = req->envp,
        .stdin_fd = has_stdin ? in_p[0] : devnull_fd,
        .stdout_fd = out_p[1],
        .stderr_fd = req->pty ? out_p[1] : err_p[1],
        .pty = req->pty,
        .cwd_fd = cwd_fd >= 0 ? cwd_fd : env->rootfd,
        .cwd_path = req->cwd,
        .harden = env->harden,
        .network = req->network,
        .cgroup_procs_fd = -1,
        .status_fd = st_p[1],
        .ns_mnt_fd = -1,
        .uid = (uid_t)-1,
    };
    /* Into the backend's hold: a cgroup leaf, a namespace, a uid of its own (contain.h). */
    struct cg_limits lim = {.memory_bytes = mem, .pids = pids, .cpu_quota = req->limits.cpu_quota};
    if (job->box.ops->prepare(&job->box, job->id, &lim, &spec, err) < 0) {
        degrade(job->iso, job->box.ops->degrades_on_prepare, err);
        goto fail;
    }
    /* Without a cgroup that enforces memory, the address space is the next best bound. */
    if (mem && !(cg && job->cg->memory))
        add_rlimit(&spec, RLIMIT_AS, mem, mem);
    add_rlimit(&spec, RLIMIT_CORE, 0, 0); /* no core dumps of untrusted memory */
    /* A bounded stack: deep recursion fails in the command, not by eating the pod. */
    add_rlimit(&spec, RLIMIT_STACK, SBXD_CHILD_STACK, SBXD_CHILD_STACK);
    if (req->limits.cpu_ms != EXEC_LIMIT_UNSET) {
        /* SIGXCPU at the soft limit, SIGKILL a second later for those who catch it. */
        uint64_t secs = (req->limits.cpu_ms + 999) / 1000;
        add_rlimit(&spec, RLIMIT_CPU, secs, secs + 1);
    }
    if (req->limits.file_size_bytes != EXEC_LIMIT_UNSET)
        add_rlimit(&spec, RLIMIT_FSIZE, req->limits.file_size_bytes, req->limits.file_size_bytes);
    if (req->limits.open_files != EXEC_LIMIT_UNSET)
        add_rlimit(&spec, RLIMIT_NOFILE, req->limits.open_files, req->limits.open_files);

    job->rt.notify_fd = job->ev_fd;
    reaper_add(&job->rt);
    job->start_ns = time_mono_ns();
    int child_errno = 0;
    const char *child_step = NULL;
    /*
     * The spawn has a deadline of its own, which the watchdog enforces (kill_overdue): this
     * thread waits in clone until the child has exec'd, and a child stopped before that (by
     * a process of another command that may signal it: same uid, no Landlock) would hold the
     * thread and the command's running slot forever. The kernel stores the child's pid
     * before it runs (CLONE_PARENT_SETTID), so it can be killed at any point.
     */
    uint64_t spawn_ms =
        req->timeout_ms < SBXD_SPAWN_DEADLINE_MS ? req->timeout_ms : SBXD_SPAWN_DEADLINE_MS;
    __atomic_store_n(&job->spawning, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&job->deadline_ns, job->start_ns + (int64_t)spawn_ms * 1000000,
                     __ATOMIC_RELEASE);
    pid_t spawned = spawn_child(&spec, &job->rt.pid, &child_errno, &child_step, err);
    __atomic_store_n(&job->spawning, 0, __ATOMIC_RELEASE);
    if (spawned < 0) {
        reaper_remove(&job->rt);
        degrade(job->iso, job->box.ops->degrades_on_spawn, err);
        goto fail;
    }
    isolation_recovered(job->iso);
    __atomic_store_n(&job->deadline_ns, job->start_ns + (int64_t)req->timeout_ms * 1000000,
                     __ATOMIC_RELEASE);
    if (__atomic_load_n(&job->kill_reason, __ATOMIC_ACQUIRE) == JOB_KILL_SPAWN) {
        job->res.status = JOB_FAILED_TO_START;
        snprintf(job->res.error, sizeof(job->res.error),
                 "'%s' had not started after %llu ms (stopped before exec, then killed)",
                 req->argv[0], (unsigned long long)spawn_ms);
    } else if (child_errno) {
        job->res.status = JOB_FAILED_TO_START;
        snprintf(job->res.error, sizeof(job->res.error), "%s '%s': %s", child_step, req->argv[0],
                 strerror(child_errno));
    }
    close(out_p[1]);
    close(err_p[1]);
    if (job->ns) {
        close(st_p[1]);
        job->status_fd = st_p[0];
        fcntl(job->status_fd, F_SETFL, O_NONBLOCK); /* read after the init's death too */
        snprintf(job->argv0, sizeof(job->argv0), "%s", req->argv[0]);
    }
    if (has_stdin && !req->pty)
        close(in_p[0]); /* (with a pty it is the slave, out_p[1], closed above) */
    job->out_fd = out_p[0];
    job->err_fd = err_p[0];
    job->in_fd = in_p[1];
    if (cwd_fd >= 0)
        close(cwd_fd);
    free_strv(candidates);
    return job;

fail:
    if (req->pty && in_p[0] == out_p[1])
        in_p[0] = -1; /* the slave, once */
    for (int i = 0; i < 2; i++) {
        close_fd(&out_p[i]);
        close_fd(&err_p[i]);
        close_fd(&in_p[i]);
        close_fd(&st_p[i]);
    }
    close_fd(&slave);
    if (cwd_fd >= 0)
        close(cwd_fd);
    free_strv(candidates);
    job_destroy_fds(job);
    job->box.ops->release(&job->box, false);
    free(job->stdin_data);
    pthread_mutex_destroy(&job->in_lock);
    pthread_cond_destroy(&job->in_cond);
    free(job);
    return NULL;
}

/* reaper_locked: the caller holds the reaper's lock (reaper_foreach) and has seen the
 * target unreaped. The backend reaches what left the group too (contain.h). */
static void kill_tree(struct job *job, bool reaper_locked)
{
    job->box.ops->kill(&job->box, &job->rt, reaper_locked,
                       __atomic_load_n(&job->spawning, __ATOMIC_ACQUIRE));
}

static void kill_group(struct job *job)
{
    kill_tree(job, false);
}

static void set_reason(struct job *job, enum job_kill_reason why)
{
    int none = JOB_KILL_NONE;
    __atomic_compare_exchange_n(&job->kill_reason, &none, (int)why, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

/* From the thread that drives the job. */
static void kill_own(struct job *job, enum job_kill_reason why)
{
    set_reason(job, why);
    kill_group(job);
}

static void kill_cb(struct reap_target *t, void *arg)
{
    (void)arg;
    kill_tree((struct job *)t, true);
}

/* From any thread: under the reaper's lock, and only while the job's process is not reaped,
 * so that nothing the driving thread releases after that (the cgroup leaf, the uid, the
 * namespace slot) is touched. What is left then dies with the job's end anyway. */
void job_kill(struct job *job, enum job_kill_reason why)
{
    set_reason(job, why);
    reaper_call(&job->rt, kill_cb, NULL);
}

/* Under the reaper's lock, the job's process unreaped: sig to every process of the tree. */
static void signal_cb(struct reap_target *t, void *arg)
{
    struct job *job = (struct job *)t;
    job->box.ops->signal(&job->box, __atomic_load_n(&job->rt.pid, __ATOMIC_ACQUIRE),
                         *(const int *)arg);
}

bool job_signal(struct job *job, int sig)
{
    return reaper_call(&job->rt, signal_cb, &sig);
}

int job_stdin_write(struct job *job, const void *data, size_t n, bool eof, uint64_t *written,
                    struct sbxd_err *err)
{
    *written = 0;
    pthread_mutex_lock(&job->in_lock);
    if (job->in_fd < 0 || job->in_eof) {
        bool ended = job->exited;
        pthread_mutex_unlock(&job->in_lock);
        sbxd_fail(err, SBXD_E_CONFLICT, 0, ended ? "the process has ended" : "stdin is closed");
        if (err && ended)
            err->flags |= SBXD_EF_ENDED;
        return -1;
    }
    /* A terminal takes its end-of-file character, as from a keyboard; a pipe closes. */
    uint8_t veof = 4;
    bool tty_eof = eof && job->pty_fd >= 0;
    if (tty_eof) {
        struct termios t;
        if (tcgetattr(job->pty_fd, &t) == 0 && t.c_cc[VEOF])
            veof = t.c_cc[VEOF];
    }
    size_t add = n + (tty_eof ? 1 : 0);
    if (job->stdin_off > 0) {
        memmove(job->stdin_data, job->stdin_data + job->stdin_off, job->stdin_len - job->stdin_off);
        job->stdin_len -= job->stdin_off;
        job->stdin_off = 0;
    }
    if (job->stdin_len + add > job->stdin_alloc) {
        uint8_t *nb = realloc(job->stdin_data, job->stdin_len + add);
        if (!nb) {
            pthread_mutex_unlock(&job->in_lock);
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        }
        job->stdin_data = nb;
        job->stdin_alloc = job->stdin_len + add;
    }
    memcpy(job->stdin_data + job->stdin_len, data, n);
    if (tty_eof)
        job->stdin_data[job->stdin_len + n] = veof;
    job->stdin_len += add;
    if (eof && !tty_eof)
        job->in_eof = true;
    uint64_t from = job->in_queued;
    job->in_queued += add;
    uint64_t target = job->in_queued;
    /* job_step polls stdin only while there is something to write: wake it. */
    uint64_t one = 1;
    if (job->ev_fd >= 0 && write(job->ev_fd, &one, sizeof(one)) < 0) {
        /* only on counter overflow: it is awake then */
    }
    while (job->in_written < target && job->in_fd >= 0)
        pthread_cond_wait(&job->in_cond, &job->in_lock);
    uint64_t done = job->in_written > from ? job->in_written - from : 0;
    *written = done < n ? done : n;
    bool ended = job->exited;
    pthread_mutex_unlock(&job->in_lock);
    if (done >= add)
        return 0;
    sbxd_fail(err, SBXD_E_CONFLICT, 0, "stdin closed after %llu of %zu bytes: the process %s",
              (unsigned long long)*written, n, ended ? "has ended" : "closed its input");
    if (err)
        err->flags |= ended ? SBXD_EF_ENDED : SBXD_EF_INPUT_CLOSED;
    return -1;
}

bool job_stdin_open(struct job *job)
{
    pthread_mutex_lock(&job->in_lock);
    bool open = job->in_fd >= 0 && !job->in_eof;
    pthread_mutex_unlock(&job->in_lock);
    return open;
}

int job_resize(struct job *job, unsigned cols, unsigned rows, struct sbxd_err *err)
{
    pthread_mutex_lock(&job->in_lock);
    int rc = 0;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (job->pty_fd < 0 || job->in_fd < 0)
        rc = sbxd_fail(err, SBXD_E_CONFLICT, 0,
                       job->pty_fd < 0 && !job->exited ? "the process has no terminal (pty)"
                                                       : "the process has ended");
    else if (ioctl(job->pty_fd, TIOCSWINSZ, &ws) < 0)
        rc = sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot resize the terminal");
    pthread_mutex_unlock(&job->in_lock);
    return rc;
}

/* Under the reaper's lock (reaper_foreach): must not take it again. */
static void kill_live(struct reap_target *t, void *arg)
{
    if (!t->reaped) {
        set_reason((struct job *)t, (enum job_kill_reason)(intptr_t)arg);
        kill_tree((struct job *)t, true);
    }
}

/* Under the reaper's lock: a job past its deadline by more than the slack whose own thread
 * has not killed it (it is not running job_step: a streamed answer whose client reads
 * nothing waits in libmicrohttpd, not here). */
static void kill_overdue(struct reap_target *t, void *arg)
{
    struct job *job = (struct job *)t;
    int64_t now = *(const int64_t *)arg;
    int64_t deadline = __atomic_load_n(&job->deadline_ns, __ATOMIC_ACQUIRE);
    if (t->reaped || deadline == 0 || now < deadline + (int64_t)SBXD_WATCHDOG_SLACK_MS * 1000000)
        return;
    set_reason(job, __atomic_load_n(&job->spawning, __ATOMIC_ACQUIRE) ? JOB_KILL_SPAWN
                                                                      : JOB_KILL_TIMEOUT);
    kill_tree(job, true);
    /* Again a second later, should this one not take. */
    __atomic_store_n(&job->deadline_ns, now + 1000000000LL, __ATOMIC_RELEASE);
}

void job_kill_overdue(void)
{
    int64_t now = time_mono_ns();
    reaper_foreach(kill_overdue, &now);
}

void job_kill_all(enum job_kill_reason why)
{
    reaper_foreach(kill_live, (void *)(intptr_t)why);
}

static void mark_exited(struct job *job)
{
    job->exited = true;
    job->drain_deadline_ns = time_mono_ns() + (int64_t)SBXD_DRAIN_WINDOW_MS * 1000000;
    close_stdin(job); /* nobody left to read it */
}

/* pidns: take what the init has written (the fd is non-blocking). */
static void read_ns_status(struct job *job)
{
    struct spawn_ns_msg m;
    while (job->status_fd >= 0) {
        ssize_t n = read(job->status_fd, &m, sizeof(m));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            close_fd(&job->status_fd); /* the init is gone */
            return;
        }
        if (n != (ssize_t)sizeof(m))
            return; /* EAGAIN (writes of this size are atomic: never a part) */
        if (job->main_reported)
            continue;
        job->main_reported = true;
        job->main_exit_ns = time_mono_ns();
        if (m.type == SPAWN_NS_EXITED) {
            job->main_status = m.status;
            job->main_ru = m.ru;
        } else {
            job->main_status = 127 << 8;
            job->res.status = JOB_FAILED_TO_START;
            snprintf(job->res.error, sizeof(job->res.error), "%s '%s': %s",
                     m.step ? m.step : "start", job->argv0, strerror(m.err));
        }
        if (!job->exited)
            mark_exited(job);
    }
}

static void finish(struct job *job)
{
    /* Leftovers (a background child of the command) die with the job. */
    kill_group(job);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    int64_t end_ns = job->rt.reaped_ns;
    if (job->ns && job->main_reported) {
        /* The command's own end, as its init saw it; the init itself exits 0. */
        status = job->main_status;
        ru = job->main_ru;
        end_ns = job->main_exit_ns;
    } else {
        reaper_result(&job->rt, &status, &ru);
    }
    struct job_result *r = &job->res;
    r->duration_ms = (double)(end_ns - job->start_ns) / 1e6;
    r->cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
    r->memory_peak_bytes = (uint64_t)ru.ru_maxrss * 1024;
    int reason = __atomic_load_n(&job->kill_reason, __ATOMIC_ACQUIRE);
    if (r->status == JOB_FAILED_TO_START) {
        r->exit_code = 127;
    } else if (WIFSIGNALED(status)) {
        r->signal = WTERMSIG(status);
        r->exit_code = 128 + r->signal;
        /* A SIGKILL that sbxd sent is reported as its reason, never as a plain signal. */
        if (r->signal == SIGKILL && reason == JOB_KILL_TIMEOUT)
            r->status = JOB_TIMEOUT;
        else if (r->signal == SIGKILL && reason == JOB_KILL_OUTPUT)
            r->status = JOB_OUTPUT_LIMIT;
        else if (r->signal == SIGKILL && reason == JOB_KILL_CANCEL)
            r->status = JOB_CANCELED;
        else
            r->status = JOB_SIGNALED;
    } else {
        r->exit_code = WEXITSTATUS(status);
        r->status = JOB_EXITED;
    }
    if (job->box.ops->stats) {
        /* The cgroup sees the whole tree, background children included. */
        struct cg_stats cs;
        job->box.ops->stats(&job->box, &cs);
        if (cs.has_cpu)
            r->cpu_ms = (double)cs.cpu_usec / 1000.0;
        if (cs.has_peak)
            r->memory_peak_bytes = cs.memory_peak;
        /* An OOM kill is reported as such, unless sbxd had already decided to kill. */
        if (cs.oom_kills > 0 && reason == JOB_KILL_NONE && r->status != JOB_FAILED_TO_START) {
            r->oom_killed = true;
            r->status = JOB_OOM;
        }
    }
    /* Nothing of the command runs any more (kill_group above): the backend lets go. */
    job->box.ops->release(&job->box, true);
    r->timed_out = r->status == JOB_TIMEOUT;
    /* Off the reaper's list before the eventfd goes: a child reaped in between (a PID
     * namespace's init dies after this) would have its wake-up written to a closed fd's
     * number, by then perhaps another command's pipe. */
    reaper_remove(&job->rt);
    job_destroy_fds(job);
    job->finished = true;
}

static int64_t min_deadline(int64_t a, int64_t b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return a < b ? a : b;
}

/* Read one chunk from *fd into buf: > 0 bytes, or 0 when the pipe is done (closed). */
static ssize_t read_pipe(int *fd, void *buf, size_t buflen)
{
    for (;;) {
        ssize_t n = read(*fd, buf, buflen);
        if (n > 0)
            return n;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return -1;
        close_fd(fd); /* EOF or a broken pipe */
        return 0;
    }
}

static bool output_event(struct job *job, int stream, ssize_t n, struct job_event *ev)
{
    if (n <= 0)
        return false;
    if (stream == 1)
        job->res.stdout_bytes += (uint64_t)n;
    else
        job->res.stderr_bytes += (uint64_t)n;
    job->output_total += (uint64_t)n;
    if (job->output_limit != EXEC_LIMIT_UNSET && job->output_total > job->output_limit)
        kill_own(job, JOB_KILL_OUTPUT);
    ev->type = JOB_EV_OUTPUT;
    ev->stream = stream;
    ev->len = (size_t)n;
    job->next_stream = stream == 1 ? 2 : 1;
    return true;
}

void job_step(struct job *job, int timeout_ms, void *buf, size_t buflen, struct job_event *ev)
{
    ev->type = JOB_EV_NONE;
    ev->len = 0;
    int64_t wait_until = timeout_ms < 0 ? 0 : time_mono_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        if (job->finished) {
            ev->type = JOB_EV_EXIT;
            return;
        }
        int64_t now = time_mono_ns();
        /* (Atomic: the watchdog moves it too, see kill_overdue.) */
        if (!job->exited && now >= __atomic_load_n(&job->deadline_ns, __ATOMIC_ACQUIRE)) {
            kill_own(job, JOB_KILL_TIMEOUT);
            /* Now wait for the reaper; should the kill somehow not take, repeat it. */
            __atomic_store_n(&job->deadline_ns, now + 1000000000LL, __ATOMIC_RELEASE);
        }
        /* Both pipes closed usually means the process is gone: try to reap it here rather
         * than wait for the SIGCHLD round trip through the main thread. */
        if (!job->ns && !job->exited && job->out_fd < 0 && job->err_fd < 0 && reaper_try(&job->rt))
            mark_exited(job);
        if (job->exited) {
            if (job->out_fd < 0 && job->err_fd < 0) {
                finish(job);
                continue;
            }
            if (!job->final_drain && now >= job->drain_deadline_ns) {
                /* The main process is gone but something still holds the pipes. */
                kill_group(job);
                job->final_drain = true;
            }
        }
        if (job->final_drain) {
            /* Take what is already buffered, without waiting for holders outside the group. */
            int *fds[2] = {&job->out_fd, &job->err_fd};
            for (int i = 0; i < 2; i++) {
                if (*fds[i] < 0)
                    continue;
                struct pollfd p = {.fd = *fds[i], .events = POLLIN};
                if (poll(&p, 1, 0) == 1) {
                    ssize_t n = read_pipe(fds[i], buf, buflen);
                    if (output_event(job, i + 1, n, ev))
                        return;
                }
                close_fd(fds[i]);
            }
            continue;
        }

        struct pollfd pfd[6];
        int idx[6]; /* 0 ev, 1 stdout, 2 stderr, 3 stdin, 4 cancel, 5 ns status */
        nfds_t np = 0;
        if (!job->exited) {
            pfd[np] = (struct pollfd){.fd = job->ev_fd, .events = POLLIN};
            idx[np++] = 0;
        }
        int first = job->next_stream == 2 ? 2 : 1;
        for (int k = 0; k < 2; k++) {
            int s = k == 0 ? first : 3 - first;
            int fd = s == 1 ? job->out_fd : job->err_fd;
            if (fd >= 0) {
                pfd[np] = (struct pollfd){.fd = fd, .events = POLLIN};
                idx[np++] = s;
            }
        }
        pthread_mutex_lock(&job->in_lock);
        if (job->in_fd >= 0 && job->stdin_off == job->stdin_len && job->in_eof) {
            close_fd(&job->in_fd); /* all written, and no more to come */
            pthread_cond_broadcast(&job->in_cond);
        }
        if (job->in_fd >= 0 && job->stdin_off < job->stdin_len) {
            pfd[np] = (struct pollfd){.fd = job->in_fd, .events = POLLOUT};
            idx[np++] = 3;
        }
        pthread_mutex_unlock(&job->in_lock);
        if (job->status_fd >= 0 && !job->exited) {
            pfd[np] = (struct pollfd){.fd = job->status_fd, .events = POLLIN};
            idx[np++] = 5;
        }
        if (job->cancel_fd >= 0) {
            /* POLLRDHUP says the client hung up, but gVisor never reports it: there, a
             * readable socket is peeked at (until it shows a pipelined request). */
            pfd[np] = (struct pollfd){.fd = job->cancel_fd,
                                      .events = POLLRDHUP | (job->cancel_peek ? POLLIN : 0)};
            idx[np++] = 4;
        }
        int64_t until = min_deadline(
            wait_until, job->exited ? job->drain_deadline_ns
                                    : __atomic_load_n(&job->deadline_ns, __ATOMIC_ACQUIRE));
        int rc = poll(pfd, np, time_ms_until(until));
        if (rc < 0 && errno != EINTR) {
            kill_own(job, JOB_KILL_CANCEL); /* cannot wait any more: do not leave it running */
            continue;
        }
        for (nfds_t i = 0; rc > 0 && i < np; i++) {
            if (!pfd[i].revents)
                continue;
            switch (idx[i]) {
            case 0: {
                uint64_t v;
                if (read(job->ev_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
                    /* nothing to do: reaper_result() below is the truth */
                }
                int st;
                struct rusage ru;
                if (reaper_result(&job->rt, &st, &ru)) {
                    /* pidns: the init is gone; what it said before dying comes first. */
                    if (job->ns)
                        read_ns_status(job);
                    if (!job->exited)
                        mark_exited(job);
                }
                break;
            }
            case 5: {
                read_ns_status(job);
                break;
            }
            case 1:
            case 2: {
                int *fd = idx[i] == 1 ? &job->out_fd : &job->err_fd;
                ssize_t n = read_pipe(fd, buf, buflen);
                if (output_event(job, idx[i], n, ev))
                    return;
                break;
            }
            case 3: {
                pthread_mutex_lock(&job->in_lock);
                ssize_t n = -1;
                if (job->in_fd >= 0 && !(pfd[i].revents & (POLLERR | POLLHUP)))
                    n = write(job->in_fd, job->stdin_data + job->stdin_off,
                              job->stdin_len - job->stdin_off);
                if (n > 0) {
                    job->stdin_off += (size_t)n;
                    job->in_written += (uint64_t)n;
                }
                if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
                    (job->stdin_off == job->stdin_len && job->in_eof))
                    close_fd(&job->in_fd); /* done, or the child closed its end (EPIPE) */
                pthread_cond_broadcast(&job->in_cond);
                pthread_mutex_unlock(&job->in_lock);
                break;
            }
            case 4:
                if (!(pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                    char c;
                    ssize_t k = recv(job->cancel_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
                    if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EINTR))) {
                        /* The next pipelined request: the client is there. From now on
                         * only a hang-up proper can tell. */
                        job->cancel_peek = k <= 0;
                        break;
                    }
                    /* k == 0: end of stream; k < 0: the connection is broken. */
                }
                /* The client hung up: nobody will read the result. */
                kill_own(job, JOB_KILL_CANCEL);
                job->cancel_fd = -1;
                break;
            }
        }
        if (wait_until && time_mono_ns() >= wait_until && !job->finished)
            return; /* JOB_EV_NONE */
    }
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
        kill_group(job);
        reaper_remove(&job->rt);
        job_destroy_fds(job);
        job->box.ops->release(&job->box, true);
    }
    free(job->stdin_data);
    pthread_mutex_destroy(&job->in_lock);
    pthread_cond_destroy(&job->in_cond);
    free(job);
}
