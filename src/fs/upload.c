/*
 * upload.c - a write to a temporary file next to the target, then fsync and rename over it
 * (fs_upload_*), and the sweep of the temporary files a killed sbxd left behind: their name
 * (".sbxd-upload-" and 16 hex digits) is made and recognised here alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/fs_limits.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"
#include "sbxd/walk.h"

#include "files_internal.h"

/* The stack of the stale-upload sweep's thread: SBXD_SWEEP_MAX_DEPTH small frames. */
#define SWEEP_STACK (256 * 1024)

int fs_upload_begin(struct fs_upload *up, int rootfd, const char *path, const struct fs_user *u,
                    struct sbxd_err *err)
{
    memset(up, 0, sizeof(*up));
    up->dirfd = up->fd = -1;
    char *dir = malloc(PATH_MAX);
    if (!dir)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int rc = -1;
    if (fs_split_path(path, dir, up->name, err) < 0)
        goto out;
    bool created;
    int pfd = fs_mkdir_p(rootfd, dir, u->dir_mode, &created, err);
    if (pfd < 0)
        goto out;
    /* The directory, opened for real: creating and renaming in it need a real fd under
     * gVisor, and the permission check is the user's. */
    up->dirfd = fs_reopen(pfd, O_RDONLY | O_DIRECTORY);
    int e = errno;
    close(pfd);
    if (up->dirfd < 0) {
        sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot open the directory of '%.200s'", path);
        goto out;
    }
    struct stat st;
    if (fstatat(up->dirfd, up->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode)) {
            sbxd_fail(err, SBXD_E_CONFLICT, EISDIR, "'%.200s' is a directory", path);
            goto out;
        }
        up->existed = true;
    }
    for (int tries = 0; tries < 8; tries++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
            r = (uint64_t)getpid() * 2654435761u + (uint64_t)tries;
        snprintf(up->tmp, sizeof(up->tmp), ".sbxd-upload-%016llx", (unsigned long long)r);
        up->fd =
            openat(up->dirfd, up->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (up->fd >= 0 || errno != EEXIST)
            break;
    }
    if (up->fd < 0) {
        e = errno;
        up->tmp[0] = '\0';
        sbxd_fail_errno(err, fs_errno_kind(e), e,
                        "cannot create a file in the directory of '%.200s'", path);
        goto out;
    }
    rc = 0;
out:
    free(dir);
    if (rc < 0 && up->dirfd >= 0) {
        close(up->dirfd);
        up->dirfd = -1;
    }
    return rc;
}

int fs_upload_write(struct fs_upload *up, const void *buf, size_t n, struct sbxd_err *err)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(up->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot write '%.200s'", up->name);
        }
        p += w;
        n -= (size_t)w;
        up->size += (uint64_t)w;
    }
    return 0;
}

int fs_upload_commit(struct fs_upload *up, mode_t mode, struct stat *st, struct sbxd_err *err)
{
    /* The data is on disk before the name points at it: after a crash the target holds the
     * old content or the new, never an empty or partial file. */
    if (fsync(up->fd) < 0 || fchmod(up->fd, mode) < 0) {
        int e = errno;
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot write '%.200s'", up->name);
    }
    if (up->if_match[0]) {
        /* (What GET serves: the file a symlink names, inside the root or not: only compared.) */
        struct stat now;
        bool there = fstatat(up->dirfd, up->name, &now, 0) == 0;
        if (!fs_etag_matches(up->if_match, there ? &now : NULL))
            return sbxd_fail(err, SBXD_E_PRECONDITION, 0,
                             "'%.200s' %s: If-Match names another version", up->name,
                             there ? "has changed" : "does not exist");
    }
    int rr = up->no_replace ? renameat2(up->dirfd, up->tmp, up->dirfd, up->name, RENAME_NOREPLACE)
                            : renameat(up->dirfd, up->tmp, up->dirfd, up->name);
    if (rr < 0 && up->no_replace && errno == EEXIST)
        return sbxd_fail(err, SBXD_E_PRECONDITION, EEXIST,
                         "'%.200s' exists (If-None-Match: *): it was not replaced", up->name);
    if (rr < 0 && up->no_replace && (errno == EINVAL || errno == ENOSYS)) {
        /* No RENAME_NOREPLACE on this file system: a link does not replace either. */
        rr = linkat(up->dirfd, up->tmp, up->dirfd, up->name, 0);
        if (rr < 0 && errno == EEXIST)
            return sbxd_fail(err, SBXD_E_PRECONDITION, EEXIST,
                             "'%.200s' exists (If-None-Match: *): it was not replaced", up->name);
        if (rr == 0)
            unlinkat(up->dirfd, up->tmp, 0);
    }
    if (rr < 0) {
        int e = errno;
        if (e == EISDIR)
            return sbxd_fail(err, SBXD_E_CONFLICT, e, "'%.200s' is a directory", up->name);
        return sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot replace '%.200s'", up->name);
    }
    up->tmp[0] = '\0';
    fsync(up->dirfd); /* and the rename too */
    if (fstat(up->fd, st) < 0)
        memset(st, 0, sizeof(*st));
    close(up->fd);
    close(up->dirfd);
    up->fd = up->dirfd = -1;
    return 0;
}

void fs_upload_abort(struct fs_upload *up, const struct fs_user *u)
{
    if (up->tmp[0] && up->dirfd >= 0) {
        fs_user_enter(u);
        unlinkat(up->dirfd, up->tmp, 0);
        fs_user_leave(u);
        up->tmp[0] = '\0';
    }
    if (up->fd >= 0)
        close(up->fd);
    if (up->dirfd >= 0)
        close(up->dirfd);
    up->fd = up->dirfd = -1;
}

/* ".sbxd-upload-" and 16 lowercase hex digits: the names fs_upload_begin gives. */
static bool is_upload_temp(const char *name)
{
    static const char prefix[] = ".sbxd-upload-";
    if (strncmp(name, prefix, sizeof(prefix) - 1) != 0)
        return false;
    const char *hex = name + sizeof(prefix) - 1;
    return strlen(hex) == 16 && strspn(hex, "0123456789abcdef") == 16;
}

struct sweep {
    int64_t before_ns;
    unsigned removed;
};

/* One entry of the sweep: a stale temporary file goes, a directory is entered. */
static int sweep_entry(struct walk_entry *e, void *ctx)
{
    struct sweep *sw = ctx;
    bool maybe_dir = e->d_type == DT_DIR || e->d_type == DT_UNKNOWN;
    bool temp = is_upload_temp(e->name);
    if (!temp && !(maybe_dir && e->may_enter))
        return WALK_NEXT;
    if (walk_stat(e) < 0)
        return WALK_NEXT; /* gone meanwhile */
    if (temp && S_ISREG(e->st.st_mode)) {
        int64_t mtime = (int64_t)e->st.st_mtim.tv_sec * 1000000000LL + e->st.st_mtim.tv_nsec;
        if (mtime < sw->before_ns - FS_SWEEP_CLOCK_SLACK_NS && unlinkat(e->parent, e->name, 0) == 0)
            sw->removed++;
        return WALK_NEXT;
    }
    if (!S_ISDIR(e->st.st_mode) || !e->may_enter)
        return WALK_NEXT;
    /* A directory swapped for a symlink since the stat is not entered (walk_open). */
    if (walk_open(e, O_RDONLY | O_DIRECTORY) < 0)
        return WALK_NEXT;
    return WALK_ENTER;
}

unsigned fs_sweep_stale_uploads(int rootfd, int64_t before_ns, unsigned max_entries,
                                unsigned *visited)
{
    struct sweep sw = {.before_ns = before_ns};
    struct walk w = {.max_entries = max_entries,
                     .max_depth = SBXD_SWEEP_MAX_DEPTH,
                     .pre = sweep_entry,
                     .ctx = &sw};
    int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0)
        walk_tree(fd, &w);
    if (visited)
        *visited = (unsigned)w.visited;
    return sw.removed;
}

struct sweep_job {
    int rootfd;
    int64_t before_ns;
    struct fs_user user;
};

static void *sweep_thread(void *arg)
{
    struct sweep_job *job = arg;
    int64_t t0 = time_mono_ns();
    unsigned visited;
    fs_user_enter(&job->user);
    unsigned removed =
        fs_sweep_stale_uploads(job->rootfd, job->before_ns, SBXD_SWEEP_MAX_ENTRIES, &visited);
    fs_user_leave(&job->user);
    LOG_EVENT("info", "upload_sweep", LOG_I("removed", removed), LOG_I("visited", visited),
              LOG_B("complete", visited < SBXD_SWEEP_MAX_ENTRIES),
              LOG_D("ms", (double)(time_mono_ns() - t0) / 1e6));
    close(job->rootfd);
    free(job);
    return NULL;
}

int fs_sweep_stale_uploads_async(int rootfd, int64_t before_ns, const struct fs_user *u)
{
    struct sweep_job *job = malloc(sizeof(*job));
    int err = ENOMEM;
    if (job) {
        job->before_ns = before_ns;
        job->user = *u;
        /* Its own descriptor: the thread may outlive main's use of rootfd at shutdown. */
        job->rootfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        err = job->rootfd < 0 ? errno : 0;
    }
    pthread_attr_t attr;
    pthread_t th;
    if (err == 0) {
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, SWEEP_STACK);
        err = pthread_create(&th, &attr, sweep_thread, job);
        pthread_attr_destroy(&attr);
    }
    if (err == 0)
        return 0;
    if (job && job->rootfd >= 0)
        close(job->rootfd);
    free(job);
    LOG_EVENT("warn", "upload_sweep", LOG_S("message", "cannot start the sweep of stale uploads"),
              LOG_S("error", strerror(err)));
    return -1;
}
