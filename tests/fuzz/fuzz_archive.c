/*
 * fuzz_archive - extraction of an archive's entries (src/fs/archive*.c): names, links, types,
 * modes and limits, through libarchive's readers of tar and zip (and their compressions).
 *
 * LLVMFuzzerInitialize makes a temporary directory holding a workspace root and, beside it,
 * "outside" with a secret. Each input is an archive: byte 0 chooses replace (bit 0) and
 * whether the destination exists first (bit 1), the rest is extracted into "x" under small
 * limits. Whatever it holds, afterwards: nothing beside the root changed, the root holds at
 * most "x" (no temporary directory left), every symlink in "x" stays inside the root by its
 * text and where it leads once every link on its way is followed, no entry is setuid, setgid
 * or a device. Every name the archive gives is also checked
 * by ar_entry_name's own invariant: no "..", nothing absolute, no empty component.
 */
#include <dirent.h>
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

#include "sbxd/archive.h"
#include "sbxd/resolve.h"

#include "fuzz.h"

static char base[PATH_MAX];
static char ws[PATH_MAX + 8];
static char ws_real[PATH_MAX]; /* ws with no symlink in its path */
static int rootfd = -1;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_archive: setup: %s: %s\n", what, strerror(errno));
    abort();
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP || flag == FTW_D)
        chmod(p, 0700);
    return remove(p) < 0 && errno != ENOENT ? -1 : 0;
}

/* Make every directory under p writable first (an archive may have made one read-only),
 * then remove it all. */
static int open_up(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_D)
        chmod(p, 0700);
    return 0;
}

static void rm_tree(const char *p)
{
    nftw(p, open_up, 16, FTW_PHYS);
    nftw(p, rm_one, 16, FTW_PHYS | FTW_DEPTH);
}

static void cleanup(void)
{
    rm_tree(base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof(base), "%s/fuzz_archive.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base))
        die("mkdtemp");
    atexit(cleanup);
    snprintf(ws, sizeof(ws), "%s/ws", base);
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/outside", base);
    if (mkdir(ws, 0755) < 0 || mkdir(p, 0755) < 0)
        die("mkdir");
    snprintf(p, sizeof(p), "%s/outside/secret", base);
    int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, "secret", 6) != 6)
        die(p);
    close(fd);
    char abs[PATH_MAX];
    struct sbxd_err err = {0};
    if (!realpath(ws, ws_real))
        die("realpath");
    rootfd = fs_open_root(ws, abs, &err);
    if (rootfd < 0 || ar_load(&err) < 0) {
        fprintf(stderr, "fuzz_archive: setup: %s\n", err.msg);
        abort();
    }
    return 0;
}

static int count_entries(const char *dir, const char *only)
{
    DIR *d = opendir(dir);
    check(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            n++;
            if (only)
                check(strcmp(de->d_name, only) == 0);
        }
    closedir(d);
    return n;
}

/* Where the symlink at p leads: its directory, then its target followed a component at a
 * time, every symlink on the way followed (a loop of more than 40 leads nowhere), a name
 * that is missing or no directory taken as text. Whether that is inside the root. */
static bool leads_inside(const char *p)
{
    static char cur[4 * PATH_MAX], rest[64 * PATH_MAX], next[PATH_MAX], target[PATH_MAX];
    snprintf(next, sizeof(next), "%s", p);
    *strrchr(next, '/') = '\0';
    check(realpath(next, cur) != NULL); /* (the link's directory: none of it a link) */
    ssize_t n = readlink(p, rest, PATH_MAX - 1);
    check(n > 0);
    rest[n] = '\0';
    unsigned ghosts = 0, links = 0;
    size_t off = 0;
    while (rest[off]) {
        size_t cl = strcspn(rest + off, "/");
        char comp[PATH_MAX];
        snprintf(comp, sizeof(comp), "%.*s", (int)cl, rest + off);
        off += cl + (rest[off + cl] == '/');
        if (!cl || strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0) {
            if (ghosts)
                ghosts--;
            else if (strrchr(cur, '/'))
                *strrchr(cur, '/') = '\0';
            continue;
        }
        struct stat st;
        snprintf(next, sizeof(next), "%s/%s", cur, comp);
        if (ghosts || lstat(next, &st) < 0 || (!S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))) {
            ghosts++;
        } else if (S_ISDIR(st.st_mode)) {
            snprintf(cur, sizeof(cur), "%s", next);
        } else {
            if (++links > 40)
                return true;
            n = readlink(next, target, sizeof(target) - 1);
            check(n > 0);
            target[n] = '\0';
            if (target[0] == '/')
                cur[0] = '\0';
            size_t rl = strlen(rest + off);
            check(n + 1 + rl + 1 < sizeof(rest));
            memmove(rest + n + 1, rest + off, rl + 1);
            memcpy(rest, target, (size_t)n);
            rest[n] = '/';
            off = 0;
        }
    }
    size_t wl = strlen(ws_real);
    return strncmp(cur, ws_real, wl) == 0 && (cur[wl] == '/' || cur[wl] == '\0');
}

/* Every entry of the extracted tree: no special file, no set-id bit, links inside. */
static int inspect(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)flag;
    check(S_ISREG(st->st_mode) || S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode));
    check(!(st->st_mode & (S_ISUID | S_ISGID)));
    if (S_ISLNK(st->st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(p, target, sizeof(target) - 1);
        check(n > 0);
        target[n] = '\0';
        /* Its place relative to the root: p without "ws/", the link's own name. */
        const char *rel = p + strlen(ws) + 1;
        check(ar_link_inside(rel, target, 0));
        check(leads_inside(p));
        (void)f;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool replace = data[0] & 1, exists = data[0] & 2;
    char xp[PATH_MAX + 16];
    snprintf(xp, sizeof(xp), "%s/x", ws);
    if (exists && mkdir(xp, 0755) < 0)
        die("mkdir x");
    struct ar_limits lim = {.max_entries = 64, .max_bytes = 1 << 20};
    struct fs_user u = {.switch_ids = false, .file_mode = 0644, .dir_mode = 0755};
    struct sbxd_err err = {0};
    struct ar_stats st;
    struct ar_extract *x = ar_extract_begin(rootfd, "x", replace, &lim, &u, &err);
    check(x != NULL);
    ar_extract_feed(x, data + 1, size - 1);
    int rc = ar_extract_end(x, true, &st, &err);
    check(rc == 0 || err.msg[0]);
    /* Beside the root: as it was. */
    check(count_entries(base, NULL) == 2);
    char op[PATH_MAX + 16];
    snprintf(op, sizeof(op), "%s/outside", base);
    check(count_entries(op, "secret") == 1);
    /* In the root: "x" at most (it exists on success, and when it did before). */
    int n = count_entries(ws, "x");
    check(n == ((rc == 0 || exists) ? 1 : 0));
    if (n)
        nftw(xp, inspect, 16, FTW_PHYS);
    rm_tree(xp);
    /* The name checks on their own: the input as one name. */
    char name[PATH_MAX], out[PATH_MAX];
    size_t nl = size - 1 < sizeof(name) - 1 ? size - 1 : sizeof(name) - 1;
    memcpy(name, data + 1, nl);
    name[nl] = '\0';
    if (ar_entry_name(name, out, &err) == 0) {
        check(out[0] != '/');
        check(!strstr(out, "//"));
        for (const char *s = out; *s;) {
            size_t cl = strcspn(s, "/");
            check(cl > 0);
            check(!(cl == 2 && s[0] == '.' && s[1] == '.'));
            check(!(cl == 1 && s[0] == '.'));
            s += cl + (s[cl] == '/');
        }
    }
    return 0;
}
