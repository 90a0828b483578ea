/* The bounded directory-tree walk (walk.h): bounds, symlinks, post-order, races, fds. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/walk.h"
#include "suites.h"

static char top[64];
static int topfd = -1;

static void setup(void)
{
    snprintf(top, sizeof(top), "/tmp/sbxd-walk-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(top));
    topfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(topfd, 0);
    ck_assert_int_eq(mkdirat(topfd, "tree", 0755), 0);
    ck_assert_int_eq(mkdirat(topfd, "outside", 0755), 0);
    ck_assert_int_eq(mkdirat(topfd, "outside/secret", 0755), 0);
}

static void teardown(void)
{
    close(topfd);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
    ck_assert_int_eq(system(cmd), 0);
}

static void mkdir_in(const char *path)
{
    ck_assert_int_eq(mkdirat(topfd, path, 0755), 0);
}

static void touch_in(const char *path)
{
    int fd = openat(topfd, path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static int open_tree(void)
{
    int fd = openat(topfd, "tree", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    return fd;
}

/* The open descriptors of this process, from /proc/self/fd. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n - 1; /* opendir's own */
}

/* What the test visitor does, and what it saw. */
struct rec {
    bool delete;            /* unlink what it can, enter the rest, rmdir in post */
    const char *swap;       /* the name replaced by a symlink to outside/ before its open */
    const char *stop_at;    /* the name at which pre ends the walk */
    char pre[1024];         /* names in the order pre saw them, each followed by ',' */
    char post[1024];        /* the same for post */
    unsigned deepest;       /* the largest depth pre saw */
    int open_errno;         /* errno of the last walk_open that failed */
    unsigned char lnk_type; /* d_type of the entry named "link" */
    bool lnk_stat_is_link;  /* walk_stat saw "link" as a symlink */
};

static void note(char *buf, size_t size, const char *name)
{
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s,", name);
}

static int rec_pre(struct walk_entry *e, void *ctx)
{
    struct rec *r = ctx;
    note(r->pre, sizeof(r->pre), e->name);
    if (e->depth > r->deepest)
        r->deepest = e->depth;
    if (r->stop_at && strcmp(e->name, r->stop_at) == 0)
        return WALK_STOP;
    if (strcmp(e->name, "link") == 0) {
        r->lnk_type = e->d_type;
        r->lnk_stat_is_link = walk_stat(e) == 0 && S_ISLNK(e->st.st_mode);
    }
    if (r->delete &&(unlinkat(e->parent, e->name, 0) == 0 || errno != EISDIR))
        return WALK_NEXT;
    if (r->swap && strcmp(e->name, r->swap) == 0) {
        /* The race: what readdir named a directory is a symlink by the time it is opened. */
        char target[128];
        snprintf(target, sizeof(target), "%s/outside", top);
        ck_assert_int_eq(renameat(e->parent, e->name, topfd, "moved"), 0);
        ck_assert_int_eq(symlinkat(target, e->parent, e->name), 0);
    }
    if (walk_open(e, O_RDONLY | O_DIRECTORY) < 0) {
        r->open_errno = errno;
        return WALK_ENTER; /* asked anyway: nothing was opened, so nothing is entered */
    }
    return WALK_ENTER;
}

static int rec_post(struct walk_entry *e, void *ctx)
{
    struct rec *r = ctx;
    ck_assert_int_eq(e->fd, -1);
    note(r->post, sizeof(r->post), e->name);
    if (r->delete &&unlinkat(e->parent, e->name, AT_REMOVEDIR) < 0)
        return -1;
    return 0;
}

static struct walk walk_of(struct rec *r, uint64_t max_entries, unsigned max_depth)
{
    return (struct walk){.max_entries = max_entries,
                         .max_depth = max_depth,
                         .pre = rec_pre,
                         .post = rec_post,
                         .ctx = r};
}

/* A flat directory of 10 files walked with room for 4: 4 visited, the cut said; strict,
 * the walk fails. */
START_TEST(entries_bound_enforced_and_reported)
{
    for (int i = 0; i < 10; i++) {
        char name[32];
        snprintf(name, sizeof(name), "tree/f%d", i);
        touch_in(name);
    }
    struct rec r = {0};
    struct walk w = walk_of(&r, 4, 8);
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert_uint_eq(w.visited, 4);
    ck_assert_uint_eq(w.cut, WALK_CUT_ENTRIES);

    struct rec all = {0};
    w = walk_of(&all, 10, 8);
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert_uint_eq(w.visited, 10);

    struct rec strict = {0};
    w = walk_of(&strict, 3, 8);
    w.strict = true;
    ck_assert_int_eq(walk_tree(open_tree(), &w), -1);
    ck_assert_uint_eq(w.visited, 3);
    ck_assert(w.cut & WALK_CUT_ENTRIES);
}
END_TEST

/* tree/a/b/c/d with a depth bound of 2: a (depth 0) and b (1) are entered, c (2) is seen but
 * not entered, d never; the directories cut short get no post. Strict, the walk fails. */
START_TEST(depth_bound_enforced_and_reported)
{
    mkdir_in("tree/a");
    mkdir_in("tree/a/b");
    mkdir_in("tree/a/b/c");
    mkdir_in("tree/a/b/c/d");
    struct rec r = {0};
    struct walk w = walk_of(&r, 100, 2);
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert_str_eq(r.pre, "a,b,c,");
    ck_assert_uint_eq(r.deepest, 2);
    ck_assert_uint_eq(w.cut, WALK_CUT_DEPTH);
    ck_assert_str_eq(r.post, "b,a,"); /* c was not entered: no post for it */

    struct rec strict = {0};
    w = walk_of(&strict, 100, 2);
    w.strict = true;
    ck_assert_int_eq(walk_tree(open_tree(), &w), -1);
    ck_assert(w.cut & WALK_CUT_DEPTH);
    ck_assert_str_eq(strict.post, ""); /* the walk ended inside b: no directory completed */

    struct rec deep = {0};
    w = walk_of(&deep, 100, 4);
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert_str_eq(deep.pre, "a,b,c,d,");
    ck_assert_uint_eq(w.cut, 0);
}
END_TEST

/* A symlink to a directory outside the tree is visited as a link, and opening it fails:
 * outside/secret is never reached. */
START_TEST(symlink_to_outside_is_not_followed)
{
    char target[128];
    snprintf(target, sizeof(target), "%s/outside", top);
    ck_assert_int_eq(symlinkat(target, topfd, "tree/link"), 0);
    struct rec r = {0};
    struct walk w = walk_of(&r, 100, 8);
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert_str_eq(r.pre, "link,");
    ck_assert(r.lnk_type == DT_LNK || r.lnk_type == DT_UNKNOWN);
    ck_assert(r.lnk_stat_is_link);
    ck_assert(r.open_errno == ELOOP || r.open_errno == ENOTDIR);
    ck_assert_str_eq(r.post, "");
    ck_assert_ptr_null(strstr(r.pre, "secret"));
}
END_TEST

/* A recursive delete: each directory's entries go before it (post-order), a symlink goes
 * as a link (what it names stays), and the tree ends empty. */
START_TEST(post_order_delete_of_a_nested_tree)
{
    mkdir_in("tree/a");
    touch_in("tree/a/f1");
    mkdir_in("tree/a/b");
    touch_in("tree/a/b/f2");
    mkdir_in("tree/a/b/c");
    touch_in("tree/a/b/c/f3");
    char target[128];
    snprintf(target, sizeof(target), "%s/outside", top);
    ck_assert_int_eq(symlinkat(target, topfd, "tree/a/b/link"), 0);
    struct rec r = {.delete = true};
    struct walk w = walk_of(&r, 100, 8);
    w.strict = true;
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert_str_eq(r.post, "c,b,a,");
    ck_assert_uint_eq(w.visited, 7);
    ck_assert_int_eq(unlinkat(topfd, "tree", AT_REMOVEDIR), 0); /* empty */
    struct stat st;
    ck_assert_int_eq(fstatat(topfd, "outside/secret", &st, 0), 0);
}
END_TEST

/* The race: an entry readdir gave as a directory is a symlink to outside/ when it is
 * opened. The open fails, nothing outside is visited. */
START_TEST(entry_swapped_for_symlink_is_not_followed)
{
    mkdir_in("tree/victim");
    touch_in("tree/victim/inner");
    struct rec r = {.swap = "victim"};
    struct walk w = walk_of(&r, 100, 8);
    ck_assert_int_eq(walk_tree(open_tree(), &w), 0);
    ck_assert(r.open_errno == ELOOP || r.open_errno == ENOTDIR);
    ck_assert_str_eq(r.pre, "victim,");
    ck_assert_str_eq(r.post, "");
    ck_assert_uint_eq(w.cut, 0);
}
END_TEST

/* Every way a walk ends (to the end, cut by either bound, stopped by pre, strict or not,
 * on an fd that is not a directory) leaves no descriptor open. */
START_TEST(no_fd_leak)
{
    mkdir_in("tree/a");
    mkdir_in("tree/a/b");
    mkdir_in("tree/a/b/c");
    touch_in("tree/a/b/c/f");
    touch_in("tree/a/b/g");
    int before = count_fds();
    for (int i = 0; i < 20; i++) {
        struct rec r = {.stop_at = i % 4 == 0 ? "c" : NULL};
        struct walk w = walk_of(&r, i % 3 == 0 ? 3 : 100, i % 5 == 0 ? 1 : 8);
        w.strict = i % 2;
        walk_tree(open_tree(), &w);
    }
    struct rec r = {0};
    struct walk w = walk_of(&r, 100, 8);
    ck_assert_int_eq(walk_tree(open("/dev/null", O_RDONLY | O_CLOEXEC), &w), 0);
    ck_assert(w.cut & WALK_UNREADABLE);
    ck_assert_int_eq(w.sys_errno, ENOTDIR);
    ck_assert_int_eq(count_fds(), before);
}
END_TEST

Suite *walk_suite(void)
{
    Suite *s = suite_create("walk");
    TCase *tc = tcase_create("walk");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, entries_bound_enforced_and_reported);
    tcase_add_test(tc, depth_bound_enforced_and_reported);
    tcase_add_test(tc, symlink_to_outside_is_not_followed);
    tcase_add_test(tc, post_order_delete_of_a_nested_tree);
    tcase_add_test(tc, entry_swapped_for_symlink_is_not_followed);
    tcase_add_test(tc, no_fd_leak);
    suite_add_tcase(s, tc);
    return s;
}
