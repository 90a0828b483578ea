/*
 * The directories Jupyter kernels start in (context_internal.h).
 *
 * Every kernel gets a directory of its own, made by sbxd before the kernel starts, which is
 * its working directory as it starts: it binds its sockets there under relative names
 * (jupyter.h, transport ipc) and keeps its IPython directory there. These directories are
 * beneath one base per daemon, /tmp/sbxd-kernels-RANDOM, root's and 0711, and each has a
 * name of 128 random bits:
 *  - a command can pass through the base but not list it, nor watch it with inotify (which
 *    needs read permission): it cannot find a kernel's directory, so it can neither connect
 *    to the kernel's sockets (a ZeroMQ subscriber needs no key to read everything iopub
 *    publishes: another client's code and output) nor plant a startup file in the kernel's
 *    IPython profile before the kernel reads it (the profile used to be /tmp/sbxd-ipython-X,
 *    made by the kernel as the command user: a command watching /tmp won that race);
 *  - /proc/net/unix, which any process reads, shows only the relative names ("kernel-1");
 *  - the name is in the kernel's environment and working directory only, which its uid,
 *    PID namespace, Landlock domain or (after its first answer) undumpable state keep from
 *    other commands.
 * A kernel's directory is root's and 01733: the kernel's uid is not known before it starts
 * (uid isolation hands one out then), so anyone may make entries in it, only their owner
 * remove them, nobody list it; the name is what keeps others out. Nothing is imported from it
 * (the kernel cannot list it, and Python's import system looks in listed directories only).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/log.h"
#include "context_internal.h"

#define BASE_PARENT "/tmp"
#define BASE_PREFIX "sbxd-kernels-"

static struct {
    pthread_mutex_t lock;
    int fd;        /* the base directory, or -1 before the first kernel */
    char name[96]; /* its name beneath BASE_PARENT */
    char path[96]; /* its absolute path */
} base = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* The base directory, made at the first kernel. -1 with err. */
static int base_open(struct sbxd_err *err)
{
    pthread_mutex_lock(&base.lock);
    if (base.fd < 0) {
        char path[sizeof(base.path)];
        snprintf(path, sizeof(path), BASE_PARENT "/" BASE_PREFIX "XXXXXX");
        /* mkdtemp: a new name, made with O_EXCL semantics (nothing a command placed there
         * first is taken over), 0700; then 0711, for the kernels to pass through. */
        int fd = -1;
        if (mkdtemp(path) &&
            (fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
            fchmod(fd, 0711) == 0) {
            base.fd = fd;
            snprintf(base.path, sizeof(base.path), "%s", path);
            snprintf(base.name, sizeof(base.name), "%s", path + strlen(BASE_PARENT) + 1);
        } else {
            int e = errno;
            if (fd >= 0) {
                close(fd);
                rmdir(path);
            }
            pthread_mutex_unlock(&base.lock);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, e,
                                   "cannot make the kernels' directory in " BASE_PARENT);
        }
    }
    int fd = base.fd;
    pthread_mutex_unlock(&base.lock);
    return fd;
}

int kdir_make(char name[KDIR_NAME_LEN + 1], char *path, size_t len, struct sbxd_err *err)
{
    int bfd = base_open(err);
    if (bfd < 0)
        return -1;
    uint8_t raw[KDIR_NAME_LEN / 2];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "no random bytes for a kernel");
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(name + 2 * i, 3, "%02x", raw[i]);
    if (mkdirat(bfd, name, 0700) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot make a kernel's directory");
    /* (The mode after mkdir, which the umask cut.) */
    int fd = openat(bfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 01733) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        unlinkat(bfd, name, AT_REMOVEDIR);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot make a kernel's directory");
    }
    close(fd);
    snprintf(path, len, "%s/%s", base.path, name);
    return 0;
}

void kdir_remove(const char *name)
{
    if (!name[0])
        return;
    pthread_mutex_lock(&base.lock);
    int bfd = base.fd;
    pthread_mutex_unlock(&base.lock);
    struct sbxd_err err = {0};
    /* Resolved from the base's fd, no symlink followed: what the kernel left there cannot
     * turn the removal elsewhere. */
    if (bfd >= 0 && fs_delete(bfd, name, true, &err) < 0 && err.kind != SBXD_E_NOT_FOUND)
        LOG_EVENT("warn", "context_cleanup_failed", LOG_S("path", name), LOG_S("error", err.msg));
}

void kdir_shutdown(void)
{
    pthread_mutex_lock(&base.lock);
    if (base.fd >= 0) {
        close(base.fd);
        base.fd = -1;
        int tmp = open(BASE_PARENT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct sbxd_err err = {0};
        if (tmp >= 0 && fs_delete(tmp, base.name, true, &err) < 0 && err.kind != SBXD_E_NOT_FOUND)
            LOG_EVENT("warn", "context_cleanup_failed", LOG_S("path", base.path),
                      LOG_S("error", err.msg));
        if (tmp >= 0)
            close(tmp);
    }
    pthread_mutex_unlock(&base.lock);
}
