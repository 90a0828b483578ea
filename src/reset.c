/* Clean: the sandbox made as a fresh one (reset.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/ipc_clear.h"
#include "sbxd/job.h"
#include "sbxd/log.h"
#include "sbxd/reset.h"
#include "sbxd/timeutil.h"

/* Where commands may leave files outside the workspace: every user may write there. These
 * where they exist (/dev/mqueue: POSIX message queues, where it is mounted), and every other
 * directory anybody may write that fs_find_shared finds (an image's own,
 * /var/lib/php/sessions or the like, or a tmpfs mounted for scratch): found once, since only
 * root makes such a directory outside the others (a command's own, inside one of them, goes
 * with its owner's entries). The walk that finds them takes ~15 ms here but ~1.5 s under gVisor
 * (each look a round trip to its gofer): it runs at start-up on a thread of its own
 * (reset_prepare), and only a reset that comes before it is over waits for it. */
static const char *const shared_dirs[] = {"/tmp",      "/var/tmp",    "/dev/shm",  "/run/lock",
                                          "/var/lock", "/dev/mqueue", "/var/crash"};
static struct fs_shared_dirs found_dirs; /* once found_yet */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t done;
    bool started;   /* the thread runs, or ran */
    bool found_yet; /* found_dirs is complete */
    struct fs_keep keep[2];
    unsigned nkeep;
} finding = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* The walk for the shared directories, and its log line. */
static void find_shared(const struct fs_keep *keep, unsigned nkeep)
{
    int64_t t0 = time_mono_ns();
    fs_find_shared(keep, nkeep, &found_dirs);
    char list[1024] = "";
    size_t len = 0;
    for (size_t i = 0; i < found_dirs.n && len < sizeof(list); i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? " " : "",
                                found_dirs.paths[i]);
    LOG_EVENT(found_dirs.cut ? "warn" : "info", "shared_dirs",
              LOG_I("found", (int64_t)found_dirs.n), LOG_S("paths", list),
              LOG_I("visited", (int64_t)found_dirs.visited), LOG_B("complete", !found_dirs.cut),
              LOG_D("ms", (double)(time_mono_ns() - t0) / 1e6));
}

static void *finder_main(void *arg)
{
    (void)arg;
    find_shared(finding.keep, finding.nkeep);
    pthread_mutex_lock(&finding.lock);
    finding.found_yet = true;
    pthread_cond_broadcast(&finding.done);
    pthread_mutex_unlock(&finding.lock);
    return NULL;
}

void reset_prepare(const struct reset_env *env)
{
    struct fs_uid_span uids[2];
    if (!iso_command_uids(env->harden, env->iso, env->cfg, uids))
        return; /* no reset sweeps the shared directories */
    struct stat st;
    if (fstat(env->rootfd, &st) == 0)
        finding.keep[finding.nkeep++] = (struct fs_keep){st.st_dev, st.st_ino};
    if (env->baseline_fd >= 0 && fstat(env->baseline_fd, &st) == 0)
        finding.keep[finding.nkeep++] = (struct fs_keep){st.st_dev, st.st_ino};
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* (Without the thread, the first reset walks itself, as it would wait for it.) */
    finding.started = pthread_create(&th, &attr, finder_main, NULL) == 0;
    pthread_attr_destroy(&attr);
}

/* The shared directories found: waits for the start-up walk if it is not over (or walks, when
 * there was none). */
static void shared_found(const struct fs_keep *keep, unsigned nkeep)
{
    pthread_mutex_lock(&finding.lock);
    if (!finding.started && !finding.found_yet) {
        find_shared(keep, nkeep);
        finding.found_yet = true;
    }
    while (!finding.found_yet)
        pthread_cond_wait(&finding.done, &finding.lock);
    pthread_mutex_unlock(&finding.lock);
}

/* Every background process (running or ended) forgotten, its tree killed and its end waited
 * for (bg_remove). */
static unsigned forget_processes(void)
{
    struct bg_proc **v;
    size_t n = bg_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        struct bg_info in;
        bg_remove(v[i], &in);
        bg_put(v[i]);
    }
    free(v);
    return (unsigned)n;
}

/* Wait (at most ms) until every killed job's process is reaped: their trees are gone, and a
 * namespace slot or a uid emptied, before the look for strays. */
static void wait_reaped(int ms)
{
    int64_t end = time_mono_ns() + (int64_t)ms * 1000000;
    while (job_live() > 0 && time_mono_ns() < end)
        usleep(2000);
}

static void fail_clear(struct sbxd_err *err, const char *where, const struct fs_clear_stats *st)
{
    if (err->kind != SBXD_E_NONE)
        return;
    sbxd_fail(err, SBXD_E_INTERNAL, st->first_errno,
              "%llu entries could not be removed from %s; the first, '%.100s': %s",
              (unsigned long long)st->failed, where, st->first, strerror(st->first_errno));
}

/* The workspace emptied, then given the baseline's tree (as the command user, who owns what
 * the workspace holds). */
static int clear_workspace(const struct reset_env *env, struct reset_report *rep,
                           struct sbxd_err *err)
{
    int dfd = openat(env->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
    int rc = 0;
    if (fs_clear_dir(dfd, &rep->ws) < 0) {
        fail_clear(err, "the workspace", &rep->ws);
        rc = -1;
    }
    if (env->baseline_fd < 0 || rc < 0)
        return rc;
    /* A description of its own (a dup would share the read position with the last reset). */
    int src = openat(env->baseline_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int dst = openat(env->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (src < 0 || dst < 0) {
        int e = errno;
        if (src >= 0)
            close(src);
        if (dst >= 0)
            close(dst);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot open the workspace baseline");
    }
    struct fs_user u = {
        .switch_ids = env->harden->switch_user, .uid = env->harden->uid, .gid = env->harden->gid};
    fs_user_enter(&u);
    rc = fs_copy_into(src, dst, env->harden->group_share, &rep->restored, err);
    fs_user_leave(&u);
    close(dst);
    rep->baseline = rc == 0;
    return rc;
}

/* What the command users left in the shared directories; the workspace and the baseline stay
 * wherever they are (a workspace in /tmp belongs to the command user too). */
static int clear_shared(const struct reset_env *env, const struct fs_uid_span *uids, unsigned nuids,
                        struct reset_report *rep, struct sbxd_err *err)
{
    if (!nuids)
        return 0;
    struct fs_keep keep[2];
    unsigned nkeep = 0;
    struct stat st;
    if (fstat(env->rootfd, &st) == 0)
        keep[nkeep++] = (struct fs_keep){st.st_dev, st.st_ino};
    if (env->baseline_fd >= 0 && fstat(env->baseline_fd, &st) == 0)
        keep[nkeep++] = (struct fs_keep){st.st_dev, st.st_ino};
    shared_found(keep, nkeep);
    size_t nfixed = sizeof(shared_dirs) / sizeof(shared_dirs[0]);
    struct fs_keep seen[64];
    unsigned nseen = 0;
    int rc = 0;
    for (size_t i = 0; i < nfixed + found_dirs.n; i++) {
        const char *dir = i < nfixed ? shared_dirs[i] : found_dirs.paths[i - nfixed];
        /* Each directory once (/var/lock is a link to /run/lock here and there). */
        struct stat ds;
        if (stat(dir, &ds) < 0 || !S_ISDIR(ds.st_mode))
            continue;
        bool again = false;
        for (unsigned k = 0; k < nseen && !again; k++)
            again = seen[k].dev == ds.st_dev && seen[k].ino == ds.st_ino;
        if (again)
            continue;
        if (nseen < sizeof(seen) / sizeof(seen[0]))
            seen[nseen++] = (struct fs_keep){ds.st_dev, ds.st_ino};
        struct fs_clear_stats s;
        if (fs_clear_owned(dir, uids, nuids, keep, nkeep, &s) < 0) {
            if (!s.failed) {
                s.failed = 1;
                s.first_errno = errno;
                snprintf(s.first, sizeof(s.first), "%s", dir);
            }
            fail_clear(err, dir, &s);
            rc = -1;
        }
        rep->tmp.files += s.files;
        rep->tmp.directories += s.directories;
        rep->tmp.bytes += s.bytes;
        rep->tmp.failed += s.failed;
    }
    return rc;
}

int reset_run(const struct reset_env *env, struct reset_report *rep, struct sbxd_err *err)
{
    int64_t t0 = time_mono_ns();
    memset(rep, 0, sizeof(*rep));
    memset(err, 0, sizeof(*err));
    struct fs_uid_span uids[2];
    unsigned nuids = iso_command_uids(env->harden, env->iso, env->cfg, uids);

    /* Nothing starts from here on; what was starting exists now, as a job. */
    exec_service_close(env->svc);
    /* Contexts first, their interpreters and the warm kernels with them: what is killed
     * next is the commands' and the background processes'. */
    rep->contexts = ctx_reset();
    rep->processes = job_kill_all(JOB_KILL_CANCEL);
    int64_t t_killed = time_mono_ns();
    env->quiesce(env->arg);
    /* Again: a context whose start was under way may have made it into the registry. */
    rep->contexts += ctx_reset();
    rep->background = forget_processes();
    wait_reaped(SBXD_RESET_REAP_MS);
    int64_t t_ended = time_mono_ns();
    /* What left its tree where no backend follows it (the process group's, a PID namespace
     * of a background process of another), or outlived its job. */
    rep->strays = uid_procs_kill(uids, nuids, SBXD_RESET_STRAYS_MS, &rep->strays_left);
    rep->processes += rep->strays;
    int64_t t_strays = time_mono_ns();
    int rc = 0;
    if (rep->strays_left) {
        sbxd_fail(err, SBXD_E_INTERNAL, 0,
                  "%u processes of the command user were still running after %d ms of kills",
                  rep->strays_left, SBXD_RESET_STRAYS_MS);
        rc = -1;
    }
    /* SysV IPC objects and POSIX message queues: state outside every file tree, which the
     * next task would find by key or name (after the strays: nothing of theirs makes more). */
    if (ipc_clear_users(uids, nuids, &rep->ipc) < 0) {
        if (err->kind == SBXD_E_NONE)
            sbxd_fail(err, SBXD_E_INTERNAL, rep->ipc.first_errno,
                      "%u IPC objects of the command user could not be removed: %s",
                      rep->ipc.failed, strerror(rep->ipc.first_errno));
        rc = -1;
    }
    if (clear_workspace(env, rep, err) < 0)
        rc = -1;
    int64_t t_ws = time_mono_ns();
    if (clear_shared(env, uids, nuids, rep, err) < 0)
        rc = -1;
    int64_t t_tmp = time_mono_ns();

    exec_service_open(env->svc);
    ctx_warm_resume();
    rep->duration_ms = (double)(time_mono_ns() - t0) / 1e6;
    LOG_EVENT(rc == 0 ? "info" : "warn", "reset", LOG_I("processes", rep->processes),
              LOG_I("strays", rep->strays), LOG_I("contexts", rep->contexts),
              LOG_I("background", rep->background),
              LOG_I("files", (int64_t)(rep->ws.files + rep->tmp.files)),
              LOG_I("directories", (int64_t)(rep->ws.directories + rep->tmp.directories)),
              LOG_I("bytes", (int64_t)(rep->ws.bytes + rep->tmp.bytes)),
              LOG_I("ipc", rep->ipc.removed), LOG_B("baseline", rep->baseline),
              LOG_D("duration_ms", rep->duration_ms),
              /* Where the time went: the kills, the ends, the strays, the workspace, /tmp. */
              LOG_D("kill_ms", (double)(t_killed - t0) / 1e6),
              LOG_D("end_ms", (double)(t_ended - t_killed) / 1e6),
              LOG_D("strays_ms", (double)(t_strays - t_ended) / 1e6),
              LOG_D("workspace_ms", (double)(t_ws - t_strays) / 1e6),
              LOG_D("tmp_ms", (double)(t_tmp - t_ws) / 1e6),
              rc == 0 ? LOG_NULL("error") : LOG_S("error", err->msg));
    return rc;
}
