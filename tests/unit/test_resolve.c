/* Workspace confinement: each case names the escape it replays. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/resolve.h"
#include "suites.h"

static char base[256]; /* holds the workspace and a file outside it */
static char ws[PATH_MAX];
static int rootfd = -1;

static void mk(const char *rel, bool dir)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", ws, rel);
    if (dir)
        ck_assert_int_eq(mkdir(p, 0755), 0);
    else
        ck_assert_int_eq(close(open(p, O_CREAT | O_WRONLY, 0644)), 0);
}

static void ln(const char *target, const char *rel)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", ws, rel);
    ck_assert_int_eq(symlink(target, p), 0);
}

static void setup(void)
{
    snprintf(base, sizeof(base), "/tmp/sbxd-resolve-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(base));
    snprintf(ws, sizeof(ws), "%s/ws", base);
    char abs[PATH_MAX];
    struct sbxd_err err;
    rootfd = fs_open_root(ws, abs, &err); /* creates it */
    ck_assert_int_ge(rootfd, 0);
    char outside[PATH_MAX * 2];
    snprintf(outside, sizeof(outside), "%s/secret", base);
    close(open(outside, O_CREAT | O_WRONLY, 0600));
    mk("a", true);
    mk("a/b", true);
    mk("f", false);
    ln("a/b", "rel");
    ln("/etc", "abs");
    ln("..", "up");
    ln("../../secret", "a/upup");
    ln("../a/b", "a/sib");
    ln("loop2", "loop1");
    ln("loop1", "loop2");
}

static void teardown(void)
{
    close(rootfd);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    ck_assert_int_eq(system(cmd), 0);
}

/* Resolve and check the result is the same inode as ws/expect. */
static void ok(const char *path, const char *expect, int flags)
{
    struct sbxd_err err = {0};
    int fd = fs_resolve_beneath(rootfd, path, flags, &err);
    ck_assert_msg(fd >= 0, "'%s' failed: %s", path, err.msg);
    struct stat a, b;
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", ws, expect);
    ck_assert_int_eq(fstat(fd, &a), 0);
    ck_assert_int_eq(stat(p, &b), 0);
    ck_assert_msg(a.st_ino == b.st_ino && a.st_dev == b.st_dev, "'%s' is not '%s'", path, expect);
    close(fd);
}

static void refused(const char *path, enum sbxd_errkind kind, const char *needle)
{
    struct sbxd_err err = {0};
    int fd = fs_resolve_beneath(rootfd, path, 0, &err);
    ck_assert_msg(fd < 0, "'%s' resolved but must not", path);
    ck_assert_msg(err.kind == kind, "'%s': kind %d, expected %d (%s)", path, err.kind, kind,
                  err.msg);
    ck_assert_msg(strstr(err.msg, needle), "'%s': '%s' lacks '%s'", path, err.msg, needle);
}

START_TEST(plain_paths)
{
    ok("", ".", 0);
    ok("/", ".", 0);
    ok(".", ".", 0);
    ok("a/b", "a/b", FS_RESOLVE_DIRECTORY);
    ok("//a///b/", "a/b", 0);
    ok("a/./b/.", "a/b", 0);
    ok("a/../a/b", "a/b", 0);
    ok("f", "f", 0);
}
END_TEST

START_TEST(symlinks_inside_are_followed)
{
    ok("rel", "a/b", FS_RESOLVE_DIRECTORY);
    ok("a/sib", "a/b", 0);
    ok("rel/..", "a", 0); /* ".." after a link is the link target's parent, as POSIX says */
}
END_TEST

START_TEST(dotdot_escapes)
{
    refused("..", SBXD_E_DENIED, "escapes");
    refused("../secret", SBXD_E_DENIED, "escapes");
    refused("a/../../secret", SBXD_E_DENIED, "escapes");
    refused("a/b/../../../secret", SBXD_E_DENIED, "escapes");
}
END_TEST

START_TEST(symlink_escapes)
{
    refused("abs", SBXD_E_DENIED, "absolute"); /* abs -> /etc */
    refused("abs/passwd", SBXD_E_DENIED, "absolute");
    refused("up", SBXD_E_DENIED, "escapes"); /* up -> .. */
    refused("up/secret", SBXD_E_DENIED, "escapes");
    refused("a/upup", SBXD_E_DENIED, "escapes"); /* a/upup -> ../../secret */
}
END_TEST

/* A link whose absolute target is inside the root, by the root's own absolute path (as a
 * command in the workspace writes it), is followed beneath the root; every other absolute
 * one, and one that climbs out from the root's path, is refused. */
START_TEST(absolute_symlinks_into_the_root)
{
    char root[PATH_MAX], t[PATH_MAX * 2];
    ck_assert_ptr_nonnull(realpath(ws, root));
    snprintf(t, sizeof(t), "%s/a/b", root);
    ln(t, "absin");
    snprintf(t, sizeof(t), "%s", root);
    ln(t, "absroot");
    snprintf(t, sizeof(t), "%s/../secret", root);
    ln(t, "absout");
    snprintf(t, sizeof(t), "%sevil", root); /* a sibling that shares the root's name */
    ln(t, "abssib");
    ok("absin", "a/b", FS_RESOLVE_DIRECTORY);
    ok("absroot/a", "a", 0);
    ok("absin/..", "a", 0);
    refused("absout", SBXD_E_DENIED, "escapes");
    refused("abssib", SBXD_E_DENIED, "absolute");
}
END_TEST

/* ".." that climb above the root as written are an escape even through a name that does not
 * exist (it would otherwise stop there as not found). */
START_TEST(dotdot_escapes_through_missing_names)
{
    refused("nothing/../../secret", SBXD_E_DENIED, "escapes");
    refused("a/nothing/../../../secret", SBXD_E_DENIED, "escapes");
    refused("nothing/x", SBXD_E_NOT_FOUND, "does not exist");
}
END_TEST

START_TEST(malformed)
{
    refused("loop1", SBXD_E_INVALID, "symbolic links");
    refused("f/x", SBXD_E_INVALID, "not a directory");
    refused("missing/x", SBXD_E_NOT_FOUND, "does not exist");
    char longname[300];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    refused(longname, SBXD_E_INVALID, "longer than");
    char *huge = malloc(PATH_MAX + 10);
    memset(huge, 'a', PATH_MAX + 9);
    for (int i = 1; i < PATH_MAX + 9; i += 2)
        huge[i] = '/';
    huge[PATH_MAX + 9] = '\0';
    refused(huge, SBXD_E_INVALID, "longer than");
    free(huge);
    struct sbxd_err err;
    ck_assert_int_lt(fs_resolve_beneath(rootfd, "f", FS_RESOLVE_DIRECTORY, &err), 0);
    ck_assert_int_eq(err.kind, SBXD_E_INVALID);
}
END_TEST

START_TEST(no_fd_leak)
{
    int before = open("/dev/null", O_RDONLY);
    close(before);
    struct sbxd_err err;
    for (int i = 0; i < 50; i++) {
        int fd = fs_resolve_beneath(rootfd, "rel", 0, &err);
        close(fd);
        fs_resolve_beneath(rootfd, "a/upup", 0, &err);
        fs_resolve_beneath(rootfd, "loop1", 0, &err);
        fs_resolve_beneath(rootfd, "f/x", 0, &err);
    }
    int after = open("/dev/null", O_RDONLY);
    close(after);
    ck_assert_int_eq(before, after);
}
END_TEST

Suite *resolve_suite(void)
{
    Suite *s = suite_create("resolve");
    TCase *tc = tcase_create("beneath");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, plain_paths);
    tcase_add_test(tc, symlinks_inside_are_followed);
    tcase_add_test(tc, dotdot_escapes);
    tcase_add_test(tc, symlink_escapes);
    tcase_add_test(tc, absolute_symlinks_into_the_root);
    tcase_add_test(tc, dotdot_escapes_through_missing_names);
    tcase_add_test(tc, malformed);
    tcase_add_test(tc, no_fd_leak);
    suite_add_tcase(s, tc);
    return s;
}
