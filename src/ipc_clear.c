/* The users' System V IPC objects and POSIX message queues removed (ipc_clear.h). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/ipc_clear.h"

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

static bool in_spans(unsigned long u, const struct fs_uid_span *s, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (u >= s[i].first && u - s[i].first < s[i].count)
            return true;
    return false;
}

static void note_failure(struct ipc_clear_stats *st, int e)
{
    if (!st->failed++)
        st->first_errno = e;
}

/* ---------------------------------------------------------------------------------- */
/* System V                                                                             */

enum sysv_kind { SYSV_SHM, SYSV_MSG, SYSV_SEM };

static const struct {
    const char *file, *id_col;
} sysv[] = {
    [SYSV_SHM] = {"/proc/sysvipc/shm", "shmid"},
    [SYSV_MSG] = {"/proc/sysvipc/msg", "msqid"},
    [SYSV_SEM] = {"/proc/sysvipc/sem", "semid"},
};

/* The column of name in the header line (0 first), or -1. */
static int column(const char *header, const char *name)
{
    int col = 0;
    for (const char *p = header;;) {
        p += strspn(p, " \t");
        if (!*p || *p == '\n')
            return -1;
        size_t len = strcspn(p, " \t\n");
        if (len == strlen(name) && strncmp(p, name, len) == 0)
            return col;
        p += len;
        col++;
    }
}

/* The numbers in the columns cols[0..2] of a line into v. */
static bool columns(const char *line, const int cols[3], unsigned long v[3])
{
    int col = 0, got = 0;
    for (const char *p = line; got < 3;) {
        p += strspn(p, " \t");
        if (!*p || *p == '\n')
            return false;
        for (int k = 0; k < 3; k++)
            if (cols[k] == col) {
                v[k] = strtoul(p, NULL, 10);
                got++;
            }
        p += strcspn(p, " \t\n");
        col++;
    }
    return true;
}

static int rmid(enum sysv_kind kind, int id)
{
    switch (kind) {
    case SYSV_SHM:
        return shmctl(id, IPC_RMID, NULL);
    case SYSV_MSG:
        return msgctl(id, IPC_RMID, NULL);
    case SYSV_SEM:
        return semctl(id, 0, IPC_RMID);
    }
    return -1;
}

/*
 * Remove object id as uid (its owner or creator, as the listing said): the thread takes uid as
 * its effective uid, which clears its effective capabilities, so the kernel removes the object
 * only if uid is still its owner or creator (an id reused since the listing, by another user,
 * stays: EPERM), and then takes root back. The raw call changes this thread alone (glibc's
 * would change every thread of sbxd).
 */
static int rmid_as(enum sysv_kind kind, int id, uid_t uid)
{
    if (syscall(SYS_setresuid, -1, uid, -1) < 0)
        return -1;
    int rc = rmid(kind, id);
    int e = errno;
    syscall(SYS_setresuid, -1, 0, -1);
    errno = e;
    return rc;
}

static void clear_sysv(enum sysv_kind kind, const struct fs_uid_span *spans, unsigned n,
                       struct ipc_clear_stats *st)
{
    FILE *f = fopen(sysv[kind].file, "re");
    if (!f) {
        st->sysv_unlisted = true;
        return;
    }
    char line[1024];
    int cols[3] = {-1, -1, -1};
    if (fgets(line, sizeof(line), f)) {
        cols[0] = column(line, sysv[kind].id_col);
        cols[1] = column(line, "uid");
        cols[2] = column(line, "cuid");
    }
    if (cols[0] < 0 || cols[1] < 0 || cols[2] < 0) {
        fclose(f);
        st->sysv_unlisted = true;
        return;
    }
    while (fgets(line, sizeof(line), f)) {
        unsigned long v[3] = {0, 0, 0};
        if (!columns(line, cols, v))
            continue;
        uid_t as = in_spans(v[1], spans, n) ? (uid_t)v[1] : (uid_t)v[2];
        if (!in_spans(as, spans, n))
            continue;
        if (rmid_as(kind, (int)v[0], as) == 0)
            st->removed++;
        else if (errno != EINVAL && errno != EIDRM && errno != EPERM)
            note_failure(st, errno); /* (gone, or no longer theirs, meanwhile) */
    }
    fclose(f);
}

/* ---------------------------------------------------------------------------------- */
/* POSIX message queues                                                                 */

struct mq_job {
    const struct fs_uid_span *spans;
    unsigned n;
    /* Written by the helper, which shares our memory and is gone when clone returns. */
    volatile bool mounted;
    volatile unsigned removed, failed;
    volatile int first_errno;
};

struct dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Where the helper mounts its mqueue file system: any directory will do, in a mount namespace
 * that is the helper's alone. */
static const char *const mq_mount_at[] = {"/dev/mqueue", "/tmp", "/mnt", "/dev", "/"};

/* The helper: raw system calls only (it runs on our memory, between clone and its exit). */
NO_SANITIZE static int mq_helper(void *arg)
{
    struct mq_job *j = arg;
    /* Nothing mounted here propagates back to sbxd's mount namespace. */
    if (syscall(SYS_mount, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        syscall(SYS_exit_group, 1);
    const char *at = NULL;
    for (unsigned i = 0; !at && i < sizeof(mq_mount_at) / sizeof(mq_mount_at[0]); i++)
        if (syscall(SYS_mount, "mqueue", mq_mount_at[i], "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    NULL) == 0)
            at = mq_mount_at[i];
    if (!at)
        syscall(SYS_exit_group, 1);
    int fd = (int)syscall(SYS_openat, AT_FDCWD, at, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        syscall(SYS_exit_group, 1);
    j->mounted = true;
    _Alignas(8) char buf[4096];
    /* Until a pass removes nothing (a directory read while its entries go may skip some). */
    for (int pass = 0, removed = 1; removed && pass < 8; pass++) {
        removed = 0;
        syscall(SYS_lseek, fd, 0, SEEK_SET);
        for (;;) {
            long len = syscall(SYS_getdents64, fd, buf, sizeof(buf));
            if (len <= 0)
                break;
            for (long off = 0; off < len;) {
                struct dirent64 *d = (struct dirent64 *)(buf + off);
                off += d->d_reclen;
                if (d->d_name[0] == '.' &&
                    (!d->d_name[1] || (d->d_name[1] == '.' && !d->d_name[2])))
                    continue;
                struct stat st;
                if (syscall(SYS_newfstatat, fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                    continue;
                bool theirs = false;
                for (unsigned i = 0; i < j->n; i++)
                    if (st.st_uid >= j->spans[i].first &&
                        st.st_uid - j->spans[i].first < j->spans[i].count)
                        theirs = true;
                if (!theirs)
                    continue;
                if (syscall(SYS_unlinkat, fd, d->d_name, 0) == 0) {
                    j->removed++;
                    removed++;
                } else if (errno != ENOENT && !j->failed++) {
                    j->first_errno = errno;
                }
            }
        }
    }
    syscall(SYS_exit_group, 0);
    return 0;
}

static void clear_mqueue(const struct fs_uid_span *spans, unsigned n, struct ipc_clear_stats *st)
{
    struct mq_job j = {.spans = spans, .n = n};
    _Alignas(64) char stack[32768];
    /* Not waited for: clone returns once it is gone (CLONE_VFORK), and the reaper collects
     * every child of sbxd's. */
    pid_t pid =
        clone(mq_helper, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | CLONE_NEWNS | SIGCHLD, &j);
    if (pid < 0 || !j.mounted) {
        st->mqueue_unlisted = true;
        return;
    }
    st->removed += j.removed;
    if (j.failed) {
        if (!st->failed)
            st->first_errno = j.first_errno;
        st->failed += j.failed;
    }
}

int ipc_clear_users(const struct fs_uid_span *spans, unsigned n, struct ipc_clear_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (!n)
        return 0;
    clear_sysv(SYSV_SHM, spans, n, st);
    clear_sysv(SYSV_MSG, spans, n, st);
    clear_sysv(SYSV_SEM, spans, n, st);
    clear_mqueue(spans, n, st);
    return st->failed ? -1 : 0;
}
