/*
 * sbxd's own directory for its contexts, and the kernels' directories in it
 * (context_internal.h).
 *
 * One directory per daemon, made at the first context that needs it: /dev/shm/sbxd-ctx.RANDOM
 * (a tmpfs wherever there is one: a shell's fifo made, unlinked and released there costs
 * microseconds, where on a disk's filesystem, /tmp here (ext4) or a pod's emptyDir, its release
 * took about a millisecond of every execution), else /tmp/sbxd-ctx.RANDOM. It is root's and
 * 0711: a command can pass through it but not list it, nor watch it with inotify (which needs
 * read permission). Everything in it has a name of 128 random bits:
 *  - each shell execution's fifo (context.c);
 *  - each kernel's own directory, its working directory as it starts: it binds its sockets
 *    there under relative names (jupyter_internal.h, transport ipc) and keeps its IPython directory
 *    there. A command cannot find it, so it can neither connect to the kernel's sockets (a
 *    ZeroMQ subscriber needs no key to read everything iopub publishes: another client's code
 *    and output) nor plant a startup file in the kernel's IPython profile before the kernel
 *    reads it (the profile used to be /tmp/sbxd-ipython-X, made by the kernel as the command
 *    user: a command watching /tmp won that race). /proc/net/unix, which any process reads,
 *    shows only the relative names ("kernel-1"). The name is in the kernel's environment and
 *    working directory only, which its uid, PID namespace, Landlock domain or (after its first
 *    answer) undumpable state keep from other commands.
 * A kernel's directory is root's and 01733: the kernel's uid is not known before it starts
 * (uid isolation hands one out then), so anyone may make entries in it, only their owner remove
 * them, nobody list it; the name is what keeps others out. Nothing is imported from it (the
 * kernel cannot list it, and Python's import system looks in listed directories only).
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

static struct {
    pthread_mutex_t lock;
    int fd; /* -1 before the first use */
    char path[CTX_DIR_PATH_MAX];
} dir = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

int ctx_dir_fd(struct sbxd_err *err)
{
    static const char *const bases[] = {"/dev/shm", "/tmp"};
    pthread_mutex_lock(&dir.lock);
    int e = 0;
    for (size_t i = 0; dir.fd < 0 && i < sizeof(bases) / sizeof(bases[0]); i++) {
        char path[sizeof(dir.path)];
        snprintf(path, sizeof(path), "%s/sbxd-ctx.XXXXXX", bases[i]);
        /* mkdtemp: a new name, made with O_EXCL semantics (nothing a command placed there
         * first is taken over), 0700; then 0711, for the shells and kernels to pass
         * through. */
        int fd = mkdtemp(path) ? open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (fd >= 0 && fchmod(fd, 0711) == 0) {
            dir.fd = fd;
            memcpy(dir.path, path, sizeof(path));
        } else {
            e = errno;
            if (fd >= 0) {
                close(fd);
                rmdir(path);
            }
        }
    }
    int fd = dir.fd;
    pthread_mutex_unlock(&dir.lock);
    if (fd < 0 && err)
        sbxd_fail_errno(err, SBXD_E_INTERNAL, e,
                        "cannot make a directory for contexts in /dev/shm or /tmp");
    return fd;
}

const char *ctx_dir_path(void)
{
    return dir.path;
}

void ctx_dir_remove(void)
{
    pthread_mutex_lock(&dir.lock);
    if (dir.fd >= 0) {
        close(dir.fd);
        dir.fd = -1;
        /* (Whatever is left: from its parent's fd, no symlink followed.) */
        char parent[sizeof(dir.path)];
        snprintf(parent, sizeof(parent), "%s", dir.path);
        char *slash = strrchr(parent, '/');
        *slash = '\0';
        int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct sbxd_err err = {0};
        if (pfd >= 0 && fs_delete(pfd, slash + 1, true, &err) < 0 && err.kind != SBXD_E_NOT_FOUND)
            LOG_EVENT("warn", "context_cleanup_failed", LOG_S("path", dir.path),
                      LOG_S("error", err.msg));
        if (pfd >= 0)
            close(pfd);
    }
    pthread_mutex_unlock(&dir.lock);
}

int kdir_make(char name[KDIR_NAME_LEN + 1], char *path, size_t len, struct sbxd_err *err)
{
    int bfd = ctx_dir_fd(err);
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
    snprintf(path, len, "%s/%s", dir.path, name);
    return 0;
}

void kdir_remove(const char *name)
{
    if (!name[0])
        return;
    pthread_mutex_lock(&dir.lock);
    int bfd = dir.fd;
    pthread_mutex_unlock(&dir.lock);
    struct sbxd_err err = {0};
    /* Resolved from the directory's fd, no symlink followed: what the kernel left there cannot
     * turn the removal elsewhere. */
    if (bfd >= 0 && fs_delete(bfd, name, true, &err) < 0 && err.kind != SBXD_E_NOT_FOUND)
        LOG_EVENT("warn", "context_cleanup_failed", LOG_S("path", name), LOG_S("error", err.msg));
}
