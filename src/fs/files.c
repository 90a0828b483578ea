#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/cleanup.h"
#include "sbxd/files.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/resolve.h"
#include "sbxd/timeutil.h"
#include "sbxd/walk.h"

/* The stack of the stale-upload sweep's thread: SBXD_SWEEP_MAX_DEPTH small frames. */
#define SWEEP_STACK (256 * 1024)

/*
 * The thread's effective ids become the user's, its supplementary groups none; real and saved
 * ids stay root's, so it can come back, and no process of that user may signal or trace it
 * (both look at the real or saved ids). Raw syscalls: credentials belong to each thread in the
 * kernel, and glibc's wrappers would change every thread of the daemon. (setfsuid would do on
 * Linux, but gVisor ignores it.) A non-zero effective uid also clears the thread's effective
 * capabilities, CAP_DAC_OVERRIDE included: permissions are checked as for the user.
 */
static __thread gid_t saved_groups[64];
static __thread int saved_ngroups;

void fs_user_enter(const struct fs_user *u)
{
    if (!u->switch_ids)
        return;
    saved_ngroups = (int)syscall(SYS_getgroups, 64, saved_groups);
    syscall(SYS_setgroups, 0, NULL);
    syscall(SYS_setresgid, -1, u->gid, -1);
    syscall(SYS_setresuid, -1, u->uid, -1);
}

void fs_user_leave(const struct fs_user *u)
{
    if (!u->switch_ids)
        return;
    syscall(SYS_setresuid, -1, 0, -1);
    syscall(SYS_setresgid, -1, 0, -1);
    if (saved_ngroups >= 0)
        syscall(SYS_setgroups, saved_ngroups, saved_groups);
}

void fs_entry_from_stat(struct fs_entry *e, const char *name, const struct stat *st)
{
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->type = S_ISREG(st->st_mode)   ? "file"
              : S_ISDIR(st->st_mode) ? "directory"
              : S_ISLNK(st->st_mode) ? "symlink"
                                     : "other";
    e->size = (uint64_t)st->st_size;
    e->mode = st->st_mode & 07777;
    e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    e->dev = st->st_dev;
    e->ino = st->st_ino;
}

/* An errno of a file operation as an error kind. */
static enum sbxd_errkind kind_of(int e)
{
    switch (e) {
    case ENOENT:
        return SBXD_E_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS:
        return SBXD_E_DENIED;
    case ENOSPC:
    case EDQUOT:
        return SBXD_E_NO_SPACE;
    case EEXIST:
    case ENOTEMPTY:
    case EISDIR:
    case ENOTDIR:
    case EBUSY:
        return SBXD_E_CONFLICT;
    case ENAMETOOLONG:
    case ELOOP:
    case EINVAL:
        return SBXD_E_INVALID;
    case EFBIG:
        return SBXD_E_TOO_LARGE;
    default:
        return SBXD_E_INTERNAL;
    }
}

/* An O_PATH fd reopened for I/O: the kernel checks the rights of this thread's fsuid. */
static int reopen(int pathfd, int flags)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", pathfd);
    return open(p, flags | O_CLOEXEC | O_NOCTTY);
}

int fs_open_read(int rootfd, const char *path, struct stat *st, struct sbxd_err *err)
{
    /* A writer may rename a new file over this name between the resolution and the open:
     * gVisor then refuses to reopen the old, now nameless one (EINVAL). Resolve again. */
    for (int attempt = 0;; attempt++) {
        int pfd = fs_resolve_beneath(rootfd, path, 0, err);
        if (pfd < 0)
            return -1;
        if (fstat(pfd, st) < 0) {
            int e = errno;
            close(pfd);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot stat '%.200s'", path);
        }
        if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) {
            close(pfd);
            sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                      "'%.200s' is neither a regular file nor a directory", path);
            if (err)
                err->flags |= SBXD_EF_SPECIAL_FILE;
            return -1;
        }
        int fd = reopen(pfd, S_ISDIR(st->st_mode) ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NONBLOCK);
        int e = errno;
        close(pfd);
        if (fd < 0 && (e == EINVAL || e == ENOENT || e == ESTALE) && attempt < 8)
            continue;
        if (fd < 0)
            return sbxd_fail_errno(err, kind_of(e), e, "cannot open '%.200s'", path);
        /* What was opened is what is served: its own stat, not the name's. */
        if (fstat(fd, st) < 0) {
            e = errno;
            close(fd);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot stat '%.200s'", path);
        }
        if (!S_ISDIR(st->st_mode))
            fcntl(fd, F_SETFL, 0); /* O_NONBLOCK only kept a fifo from hanging the open */
        return fd;
    }
}

/*
 * A listing holds the directory (libc's DIR: one fixed buffer of getdents records) and, for a
 * sorted one, the names read ahead: one arena of NUL-terminated names and their offsets, grown
 * up to SBXD_LIST_SORT_BYTES and SBXD_LIST_SORT_MAX, and freed once handed out. A name read
 * past those bounds waits in `spill`; from then on names come straight from the directory.
 * What a listing holds is thus bounded whatever the directory holds: a 200,000-entry
 * directory, which 20 concurrent listings once turned into 1.5 GB of sbxd, is read through
 * the same bounded buffers as a small one.
 */
struct fs_lister {
    DIR *dir;
    bool eof;
    bool sorted;
    char *names;      /* the names read ahead */
    size_t names_len; /* bytes used */
    size_t names_cap;
    uint32_t *at; /* offset of each, in the order they are handed out */
    size_t count, cap, next;
    bool spilled; /* spill holds the name read after them */
    char spill[NAME_MAX + 1];
};

/* The next name from the directory ("." and ".." passed over), NULL at its end (l->eof) or
 * on an error (err). */
static const char *list_read(struct fs_lister *l, struct sbxd_err *err)
{
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(l->dir);
        if (!de) {
            if (errno == 0) {
                l->eof = true;
                return NULL;
            }
            int e = errno;
            sbxd_fail_errno(err, kind_of(e), e, "cannot read the directory");
            return NULL;
        }
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            return de->d_name;
    }
}

/* Keep name in the arena; false when the bounds leave no room for it (or memory ran out). */
static bool list_hold(struct fs_lister *l, const char *name)
{
    size_t n = strlen(name) + 1;
    if (l->count >= SBXD_LIST_SORT_MAX || l->names_len + n > SBXD_LIST_SORT_BYTES)
        return false;
    if (l->names_len + n > l->names_cap) {
        size_t cap = l->names_cap ? l->names_cap : 4096;
        while (cap < l->names_len + n)
            cap *= 2;
        if (cap > SBXD_LIST_SORT_BYTES)
            cap = SBXD_LIST_SORT_BYTES;
        char *nn = realloc(l->names, cap);
        if (!nn)
            return false;
        l->names = nn;
        l->names_cap = cap;
    }
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint32_t *na = realloc(l->at, cap * sizeof(*na));
        if (!na)
            return false;
        l->at = na;
        l->cap = cap;
    }
    memcpy(l->names + l->names_len, name, n);
    l->at[l->count++] = (uint32_t)l->names_len;
    l->names_len += n;
    return true;
}

static int name_cmp(const void *a, const void *b, void *names)
{
    return strcmp((const char *)names + *(const uint32_t *)a,
                  (const char *)names + *(const uint32_t *)b);
}

struct fs_lister *fs_list_open(int dfd, int flags, struct sbxd_err *err)
{
    struct fs_lister *l = calloc(1, sizeof(*l));
    if (!l) {
        close(dfd);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    l->dir = fdopendir(dfd);
    if (!l->dir) {
        int e = errno;
        close(dfd);
        free(l);
        sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot read the directory");
        return NULL;
    }
    /* Read ahead: the whole directory when it is small enough to sort, else (and always
     * without sorting) one name, so that a directory that cannot be read fails here. */
    const char *name;
    while ((name = list_read(l, err))) {
        if ((flags & FS_LIST_SORTED) && list_hold(l, name))
            continue;
        snprintf(l->spill, sizeof(l->spill), "%s", name);
        l->spilled = true;
        break;
    }
    if (!name && !l->eof) {
        fs_list_close(l);
        return NULL;
    }
    if ((flags & FS_LIST_SORTED) && l->eof) {
        if (l->count > 1) /* an empty directory has no array at all */
            qsort_r(l->at, l->count, sizeof(*l->at), name_cmp, l->names);
        l->sorted = true;
    }
    return l;
}

/* The next name: those read ahead, then the spilled one, then the directory's. */
static const char *list_name(struct fs_lister *l, struct sbxd_err *err)
{
    if (l->next < l->count)
        return l->names + l->at[l->next++];
    if (l->names) {
        /* All handed out: the arena's memory goes back now, not at the listing's end. */
        free(l->names);
        free(l->at);
        l->names = NULL;
        l->at = NULL;
        l->names_len = l->names_cap = l->count = l->cap = l->next = 0;
    }
    if (l->spilled) {
        l->spilled = false;
        return l->spill;
    }
    if (l->eof)
        return NULL;
    return list_read(l, err);
}

int fs_list_next(struct fs_lister *l, struct fs_entry *e, struct sbxd_err *err)
{
    const char *name;
    while ((name = list_name(l, err))) {
        struct stat st;
        /* Relative to the listed directory's fd, and of the entry itself, never of what a
         * symlink names: no path is resolved again, so a rename or a planted link cannot make
         * the listing describe anything but this directory's entries. */
        if (fstatat(dirfd(l->dir), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        fs_entry_from_stat(e, name, &st);
        return 1;
    }
    return l->eof ? 0 : -1;
}

int fs_list_skip(struct fs_lister *l, uint64_t n, uint64_t *passed, struct sbxd_err *err)
{
    *passed = 0;
    while (*passed < n && list_name(l, err))
        (*passed)++;
    return (*passed == n || l->eof) ? 0 : -1;
}

int fs_list_dirfd(const struct fs_lister *l)
{
    return dirfd(l->dir);
}

bool fs_list_sorted(const struct fs_lister *l)
{
    return l->sorted;
}

void fs_list_close(struct fs_lister *l)
{
    if (!l)
        return;
    if (l->dir)
        closedir(l->dir);
    free(l->names);
    free(l->at);
    free(l);
}

/* The last component of path, and the directory part before it (in dir, PATH_MAX). */
static int split_path(const char *path, char *dir, char *name, struct sbxd_err *err)
{
    size_t len = strlen(path);
    if (len >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes",
                         PATH_MAX - 1);
    while (len && path[len - 1] == '/')
        len--;
    if (len < strlen(path) && len > 0)
        return sbxd_fail(err, SBXD_E_INVALID, EISDIR, "a file path must not end in '/'");
    size_t start = len;
    while (start && path[start - 1] != '/')
        start--;
    size_t nl = len - start;
    if (nl == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EISDIR, "the path names the workspace root");
    if (nl > NAME_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "a name is longer than %d bytes",
                         NAME_MAX);
    memcpy(name, path + start, nl);
    name[nl] = '\0';
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "the path must end in a name");
    memcpy(dir, path, start);
    dir[start] = '\0';
    return 0;
}

int fs_mkdir_p(int rootfd, const char *path, mode_t mode, bool *created, struct sbxd_err *err)
{
    *created = false;
    size_t len = strlen(path);
    if (len >= PATH_MAX)
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "path is longer than %d bytes",
                         PATH_MAX - 1);
    char *prefix = malloc(PATH_MAX);
    if (!prefix)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int fd = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        free(prefix);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot open the workspace");
    }
    /* Component by component: each prefix resolved as any path is; a missing last one is
     * made in the directory its parent resolved to. */
    size_t i = 0;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        if (i == len)
            break;
        size_t s = i;
        while (i < len && path[i] != '/')
            i++;
        memcpy(prefix, path, i);
        prefix[i] = '\0';
        struct sbxd_err e2 = {0};
        int nfd = fs_resolve_beneath(rootfd, prefix, FS_RESOLVE_DIRECTORY, &e2);
        if (nfd < 0 && e2.kind == SBXD_E_NOT_FOUND) {
            char comp[NAME_MAX + 1];
            size_t cl = i - s;
            if (cl > NAME_MAX) {
                sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "a name is longer than %d bytes",
                          NAME_MAX);
                goto fail;
            }
            memcpy(comp, path + s, cl);
            comp[cl] = '\0';
            int mk = mkdirat(fd, comp, mode);
            if (mk < 0 && errno != EEXIST) {
                int e = errno;
                sbxd_fail_errno(err, kind_of(e), e, "cannot create directory '%.200s'", prefix);
                goto fail;
            }
            bool made = mk == 0;
            *created = i >= len || strspn(path + i, "/") == len - i;
            nfd = fs_resolve_beneath(rootfd, prefix, FS_RESOLVE_DIRECTORY, &e2);
            if (made && nfd >= 0) {
                /* The mode asked for, not what sbxd's umask left of it (group write, under
                 * uid isolation), set on the directory just resolved, not by name. */
                char self[64];
                snprintf(self, sizeof(self), "/proc/self/fd/%d", nfd);
                if (chmod(self, mode) < 0) {
                    /* best effort: the directory exists either way */
                }
            }
        }
        if (nfd < 0) {
            *err = e2;
            if (err->kind == SBXD_E_INVALID && err->sys_errno == ENOTDIR)
                sbxd_fail(err, SBXD_E_CONFLICT, ENOTDIR, "'%.200s' exists and is not a directory",
                          prefix);
            goto fail;
        }
        close(fd);
        fd = nfd;
    }
    free(prefix);
    return fd;
fail:
    close(fd);
    free(prefix);
    return -1;
}

int fs_upload_begin(struct fs_upload *up, int rootfd, const char *path, const struct fs_user *u,
                    struct sbxd_err *err)
{
    memset(up, 0, sizeof(*up));
    up->dirfd = up->fd = -1;
    char *dir = malloc(PATH_MAX);
    if (!dir)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int rc = -1;
    if (split_path(path, dir, up->name, err) < 0)
        goto out;
    bool created;
    int pfd = fs_mkdir_p(rootfd, dir, u->dir_mode, &created, err);
    if (pfd < 0)
        goto out;
    /* The directory, opened for real: creating and renaming in it need a real fd under
     * gVisor, and the permission check is the user's. */
    up->dirfd = reopen(pfd, O_RDONLY | O_DIRECTORY);
    int e = errno;
    close(pfd);
    if (up->dirfd < 0) {
        sbxd_fail_errno(err, kind_of(e), e, "cannot open the directory of '%.200s'", path);
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
        sbxd_fail_errno(err, kind_of(e), e, "cannot create a file in the directory of '%.200s'",
                        path);
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
            return sbxd_fail_errno(err, kind_of(e), e, "cannot write '%.200s'", up->name);
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
        return sbxd_fail_errno(err, kind_of(e), e, "cannot write '%.200s'", up->name);
    }
    if (renameat(up->dirfd, up->tmp, up->dirfd, up->name) < 0) {
        int e = errno;
        if (e == EISDIR)
            return sbxd_fail(err, SBXD_E_CONFLICT, e, "'%.200s' is a directory", up->name);
        return sbxd_fail_errno(err, kind_of(e), e, "cannot replace '%.200s'", up->name);
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

/* One entry of a recursive delete: unlinked, or a directory opened to be emptied first. */
static int delete_entry(struct walk_entry *e, void *ctx)
{
    struct sbxd_err *err = ctx;
    if (unlinkat(e->parent, e->name, 0) == 0 || errno == ENOENT)
        return WALK_NEXT;
    int x = errno;
    if (x != EISDIR && x != EPERM) {
        sbxd_fail_errno(err, kind_of(x), x, "cannot delete '%.200s'", e->name);
        return WALK_STOP;
    }
    if (walk_open(e, O_RDONLY | O_DIRECTORY) < 0) {
        x = errno;
        sbxd_fail_errno(err, kind_of(x), x, "cannot open '%.200s'", e->name);
        return WALK_STOP;
    }
    return WALK_ENTER;
}

/* A directory of the tree, now empty: removed. */
static int delete_emptied(struct walk_entry *e, void *ctx)
{
    if (unlinkat(e->parent, e->name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return 0;
    int x = errno;
    return sbxd_fail_errno(ctx, kind_of(x), x, "cannot delete '%.200s'", e->name);
}

/* Everything inside the directory dfd (taken), each directory's entries before it, never
 * following a link. What was deleted before a failure stays deleted. */
static int delete_tree(int dfd, struct sbxd_err *err)
{
    struct walk w = {.max_entries = UINT64_MAX, /* it ends: what it visits, it removes */
                     .max_depth = SBXD_DELETE_MAX_DEPTH,
                     .strict = true,
                     .pre = delete_entry,
                     .post = delete_emptied,
                     .ctx = err};
    if (walk_tree(dfd, &w) == 0)
        return 0;
    if (w.cut & WALK_CUT_DEPTH)
        return sbxd_fail(err, SBXD_E_INVALID, ELOOP, "directory tree is nested too deeply");
    if (w.cut & WALK_UNREADABLE)
        return sbxd_fail_errno(err, kind_of(w.sys_errno), w.sys_errno, "cannot read a directory");
    return -1; /* err says why */
}

/* name, in the directory dfd, as path names it: a file, a symlink, an empty directory, or
 * (recursive) a whole tree. */
static int delete_name(int dfd, const char *name, const char *path, bool recursive,
                       struct sbxd_err *err)
{
    struct stat st;
    int e;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        e = errno;
        if (e == ENOENT)
            return sbxd_fail(err, SBXD_E_NOT_FOUND, e, "'%.200s' does not exist", path);
        return sbxd_fail_errno(err, kind_of(e), e, "cannot stat '%.200s'", path);
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dfd, name, 0) == 0)
            return 0;
        e = errno;
        return sbxd_fail_errno(err, kind_of(e), e, "cannot delete '%.200s'", path);
    }
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0)
        return 0;
    e = errno;
    if (e != ENOTEMPTY && e != EEXIST)
        return sbxd_fail_errno(err, kind_of(e), e, "cannot delete '%.200s'", path);
    if (!recursive)
        return sbxd_fail(err, SBXD_E_CONFLICT, ENOTEMPTY,
                         "directory '%.200s' is not empty; add ?recursive=true to delete it all",
                         path);
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
        e = errno;
        return sbxd_fail_errno(err, kind_of(e), e, "cannot open '%.200s'", path);
    }
    if (delete_tree(sub, err) < 0)
        return -1;
    if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) {
        e = errno;
        return sbxd_fail_errno(err, kind_of(e), e, "cannot delete '%.200s'", path);
    }
    return 0;
}

int fs_delete(int rootfd, const char *path, bool recursive, struct sbxd_err *err)
{
    autofree char *dir = malloc(PATH_MAX);
    autofree char *p = malloc(PATH_MAX);
    char name[NAME_MAX + 1];
    if (!dir || !p)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    /* A trailing '/' is fine here: "dir/" is the directory. */
    snprintf(p, PATH_MAX, "%s", path);
    size_t len = strlen(p);
    while (len && p[len - 1] == '/')
        p[--len] = '\0';
    if (split_path(p, dir, name, err) < 0) {
        if (err->sys_errno == EISDIR)
            sbxd_fail(err, SBXD_E_INVALID, EINVAL, "the workspace root cannot be deleted");
        return -1;
    }
    autoclose int pfd = fs_resolve_beneath(rootfd, dir, FS_RESOLVE_DIRECTORY, err);
    if (pfd < 0)
        return -1;
    autoclose int dfd = reopen(pfd, O_RDONLY | O_DIRECTORY);
    if (dfd < 0) {
        int e = errno;
        return sbxd_fail_errno(err, kind_of(e), e, "cannot open the directory of '%.200s'", path);
    }
    return delete_name(dfd, name, path, recursive, err);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int fs_url_decode(char *s, struct sbxd_err *err)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        int hi = hexval(r[1]), lo = hi < 0 ? -1 : hexval(r[2]);
        if (hi < 0 || lo < 0)
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                             "malformed percent-escape in the path (use %%XX)");
        char c = (char)(hi * 16 + lo);
        if (c == '\0')
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "the path contains a NUL byte");
        *w++ = c;
        r += 2;
    }
    *w = '\0';
    return 0;
}
