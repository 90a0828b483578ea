/*
 * fuzz_resolve - workspace confinement (src/fs/resolve.c) and URL path decoding
 * (http_url_decode in src/util/urldecode.c).
 *
 * LLVMFuzzerInitialize builds a tree in a temporary directory: a workspace root with files,
 * directories and symlinks of every kind (inside, absolute, climbing out with "..", a loop,
 * dangling), and next to it an "outside" directory with a secret. Each input is a path: byte
 * 0 says whether it is percent-decoded first and which resolve flags are passed, the rest is
 * the path. Whatever the path, a successful resolution must give an fd of an object inside
 * the root: anything else is an escape, and the target traps.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/resolve.h"
#include "sbxd/urldecode.h"

#include "fuzz.h"

/* Every flag resolve.h defines. */
#define RESOLVE_FLAGS FS_RESOLVE_DIRECTORY

static char base[PATH_MAX];     /* the temporary directory */
static char root_abs[PATH_MAX]; /* base/ws, canonical */
static int rootfd = -1;
static struct stat root_st;

/* (dev, ino) of everything inside the root, symlinks not followed. */
static struct stat *inside;
static size_t ninside, capinside;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_resolve: setup: %s: %s\n", what, strerror(errno));
    abort();
}

static void mk(const char *rel, bool dir)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", base, rel);
    if (dir ? mkdir(p, 0755) : close(open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644)))
        die(p);
}

static void ln(const char *target, const char *rel)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", base, rel);
    if (symlink(target, p) < 0)
        die(p);
}

static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path;
    (void)type;
    (void)ftw;
    if (ninside == capinside) {
        capinside = capinside ? capinside * 2 : 64;
        inside = realloc(inside, capinside * sizeof(*inside));
        if (!inside)
            die("realloc");
    }
    inside[ninside++] = *st;
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static void cleanup(void)
{
    if (base[0])
        nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof(base), "%s/sbxd-fuzz-resolve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base))
        die("mkdtemp");
    atexit(cleanup);

    mk("outside", true);
    mk("outside/secret", false);
    mk("ws", true);
    mk("ws/f", false);
    mk("ws/.hidden", false);
    mk("ws/a", true);
    mk("ws/a/b", true);
    mk("ws/a/b/c", true);
    mk("ws/a/b/c/file", false);
    mk("ws/a/b/x y", false);
    mk("ws/sp ace", true);
    mk("ws/%2F", false); /* a name that looks like an escape */
    mk("ws/empty", true);
    /* Inside the root. */
    ln("a/b", "ws/rel");
    ln("f", "ws/to_file");
    ln("a/b/c/file", "ws/deep_file");
    ln("../a", "ws/a/b/c/back_to_a");
    ln("../../..", "ws/a/b/c/to_root"); /* exactly the root: allowed */
    ln("./a/../a/b", "ws/dots");
    ln("rel/c", "ws/chain");
    ln("chain/back_to_a/b", "ws/chain2");
    ln("missing", "ws/dangling");
    ln("f/x", "ws/through_file");
    ln("a/", "ws/slash");
    /* Out of it. */
    ln("/etc", "ws/abs");
    ln(base, "ws/abs_base"); /* absolute, and to the very parent of the root */
    ln("..", "ws/up");
    ln("../outside/secret", "ws/esc");
    ln("../../../outside", "ws/a/b/esc3");
    ln("../../../../outside/secret", "ws/a/b/c/esc4"); /* one ".." too many */
    ln("a/b/c/esc4", "ws/via");
    ln("to_root/..", "ws/a/b/c/past_root");
    ln("/", "ws/slash_root");
    /* Loops. */
    ln("loop2", "ws/loop1");
    ln("loop1", "ws/loop2");
    ln("self", "ws/self");
    ln("../c/spin/x", "ws/a/b/c/spin");

    char ws[PATH_MAX + 8];
    snprintf(ws, sizeof(ws), "%s/ws", base);
    struct sbxd_err err = {0};
    rootfd = fs_open_root(ws, root_abs, &err);
    if (rootfd < 0) {
        fprintf(stderr, "fuzz_resolve: fs_open_root: %s\n", err.msg);
        abort();
    }
    if (fstat(rootfd, &root_st) < 0)
        die("fstat root");
    if (nftw(ws, collect, 16, FTW_PHYS) < 0)
        die("nftw");
    return 0;
}

static bool is_inside(const struct stat *st)
{
    for (size_t i = 0; i < ninside; i++)
        if (inside[i].st_dev == st->st_dev && inside[i].st_ino == st->st_ino)
            return true;
    return false;
}

/* The fd's path as the kernel knows it starts with the root's. */
static bool path_inside(int fd)
{
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0)
        return errno == ENOENT; /* no /proc: the other checks stand */
    target[n] = '\0';
    size_t rl = strlen(root_abs);
    return strncmp(target, root_abs, rl) == 0 && (target[rl] == '\0' || target[rl] == '/');
}

/* For a directory: climbing ".." from it reaches the root before "/". */
static bool climbs_to_root(int fd)
{
    int cur = openat(fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    check(cur >= 0);
    bool found = false;
    for (int depth = 0; depth < PATH_MAX; depth++) {
        struct stat st;
        check(fstat(cur, &st) == 0);
        if (st.st_dev == root_st.st_dev && st.st_ino == root_st.st_ino) {
            found = true;
            break;
        }
        int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        check(up >= 0);
        struct stat ust;
        check(fstat(up, &ust) == 0);
        close(cur);
        cur = up;
        if (ust.st_dev == st.st_dev && ust.st_ino == st.st_ino)
            break; /* "/" is its own parent */
    }
    close(cur);
    return found;
}

/* The lowest free descriptor: a resolution must not leave one more open. */
static int lowest_free_fd(void)
{
    int fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
    check(fd >= 0);
    close(fd);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool decode = data[0] & 1;
    int flags = (data[0] >> 1) & RESOLVE_FLAGS;
    char *path = malloc(size);
    check(path != NULL);
    memcpy(path, data + 1, size - 1);
    path[size - 1] = '\0';

    if (decode) {
        size_t before = strlen(path);
        struct sbxd_err err = {0};
        if (http_url_decode(path, &err) < 0) {
            check(err.kind == SBXD_E_INVALID);
            free(path);
            return 0;
        }
        check(strlen(path) <= before);
    }

    int fd0 = lowest_free_fd();
    struct sbxd_err err = {0};
    int fd = fs_resolve_beneath(rootfd, path, flags, &err);
    if (fd >= 0) {
        struct stat st;
        check(fstat(fd, &st) == 0);
        check(!S_ISLNK(st.st_mode));
        if (flags & FS_RESOLVE_DIRECTORY)
            check(S_ISDIR(st.st_mode));
        check(is_inside(&st));
        check(path_inside(fd));
        if (S_ISDIR(st.st_mode))
            check(climbs_to_root(fd));
        check(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        close(fd);
    } else {
        check(fd == -1 && err.kind != SBXD_E_NONE && err.msg[0]);
    }
    check(lowest_free_fd() == fd0);
    free(path);
    return 0;
}
