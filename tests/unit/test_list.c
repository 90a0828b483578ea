/* Directory listings read a piece at a time (fs_list_*): order, completeness, bounds. */
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/jsonw.h"
#include "sbxd/fs_limits.h"
#include "suites.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/sbxd-list-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Entry i's name: "n" and i, padded with 'x' to len bytes. */
static void entry_name(char *out, unsigned i, size_t len)
{
    int n = snprintf(out, NAME_MAX + 1, "n%u", i);
    memset(out + n, 'x', len > (size_t)n ? len - (size_t)n : 0);
    out[len > (size_t)n ? len : (size_t)n] = '\0';
}

/* Make n files named by entry_name, the highest number first (so that creation order is not
 * name order). */
static void make_entries(unsigned n, size_t len)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(dfd, 0);
    for (unsigned i = n; i-- > 0;) {
        char name[NAME_MAX + 1];
        entry_name(name, i, len);
        int fd = openat(dfd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        close(fd);
    }
    close(dfd);
}

static struct fs_lister *open_list(int flags)
{
    struct sbxd_err err = {0};
    struct fs_lister *l = fs_list_open(open(dir, O_RDONLY | O_DIRECTORY), flags, &err);
    ck_assert_msg(l, "%s", err.msg);
    return l;
}

/* List the directory whole: each of the n names once; whether they came sorted. */
static bool list_all(int flags, unsigned n, size_t len)
{
    struct fs_lister *l = open_list(flags);
    unsigned char *seen = calloc(n, 1);
    char prev[NAME_MAX + 1] = "", name[NAME_MAX + 1];
    bool sorted = true;
    unsigned count = 0;
    struct fs_entry e;
    struct sbxd_err err = {0};
    int r;
    while ((r = fs_list_next(l, &e, &err)) == 1) {
        char *end;
        unsigned long i = strtoul(e.name + 1, &end, 10);
        ck_assert_msg(e.name[0] == 'n' && i < n && !seen[i], "entry '%s'", e.name);
        entry_name(name, (unsigned)i, len);
        ck_assert_str_eq(e.name, name);
        ck_assert_str_eq(e.type, "file");
        seen[i] = 1;
        if (strcmp(prev, e.name) > 0)
            sorted = false;
        snprintf(prev, sizeof(prev), "%s", e.name);
        count++;
    }
    ck_assert_int_eq(r, 0);
    ck_assert_uint_eq(count, n);
    if (fs_list_sorted(l))
        ck_assert_msg(sorted && (flags & FS_LIST_SORTED), "said sorted, came unsorted");
    fs_list_close(l);
    free(seen);
    return sorted;
}

START_TEST(empty_directory)
{
    struct fs_lister *l = open_list(FS_LIST_SORTED);
    struct fs_entry e;
    struct sbxd_err err = {0};
    ck_assert_int_eq(fs_list_next(l, &e, &err), 0); /* no "." nor ".." */
    ck_assert_int_eq(fs_list_next(l, &e, &err), 0);
    fs_list_close(l);
}
END_TEST

START_TEST(small_directory_sorted_up_to_the_bound)
{
    make_entries(SBXD_LIST_SORT_MAX, 8);
    ck_assert(list_all(FS_LIST_SORTED, SBXD_LIST_SORT_MAX, 8));
    struct fs_lister *l = open_list(FS_LIST_SORTED);
    ck_assert(fs_list_sorted(l));
    fs_list_close(l);
}
END_TEST

START_TEST(larger_directory_streamed_whole_in_its_own_order)
{
    /* One past the bound: not sorted any more, and still every entry once. */
    make_entries(SBXD_LIST_SORT_MAX + 1, 8);
    list_all(FS_LIST_SORTED, SBXD_LIST_SORT_MAX + 1, 8);
    struct fs_lister *l = open_list(FS_LIST_SORTED);
    ck_assert(!fs_list_sorted(l));
    fs_list_close(l);
    list_all(0, SBXD_LIST_SORT_MAX + 1, 8);
}
END_TEST

START_TEST(long_names_bound_the_sorted_size_too)
{
    /* Names of 255 bytes: SBXD_LIST_SORT_BYTES holds this many with their NULs, not more. */
    unsigned fit = SBXD_LIST_SORT_BYTES / (NAME_MAX + 1);
    make_entries(fit, NAME_MAX);
    ck_assert(list_all(FS_LIST_SORTED, fit, NAME_MAX));
    teardown();
    setup();
    make_entries(fit + 1, NAME_MAX);
    struct fs_lister *l = open_list(FS_LIST_SORTED);
    ck_assert(!fs_list_sorted(l));
    fs_list_close(l);
    list_all(FS_LIST_SORTED, fit + 1, NAME_MAX);
}
END_TEST

START_TEST(skip_passes_over_names_and_counts_them)
{
    make_entries(10, 4);
    for (int flags = 0; flags <= FS_LIST_SORTED; flags += FS_LIST_SORTED) {
        struct fs_lister *l = open_list(flags);
        struct sbxd_err err = {0};
        uint64_t k;
        ck_assert_int_eq(fs_list_skip(l, 3, &k, &err), 0);
        ck_assert_uint_eq(k, 3);
        struct fs_entry e;
        ck_assert_int_eq(fs_list_next(l, &e, &err), 1);
        if (flags)
            ck_assert_str_eq(e.name, "n3xx"); /* the fourth by name */
        ck_assert_int_eq(fs_list_skip(l, 100, &k, &err), 0);
        ck_assert_uint_eq(k, 6);
        ck_assert_int_eq(fs_list_next(l, &e, &err), 0);
        fs_list_close(l);
    }
}
END_TEST

START_TEST(entries_described_from_the_held_directory)
{
    make_entries(3, 4);
    char p[192], q[128];
    snprintf(p, sizeof(p), "%s/link", dir);
    ck_assert_int_eq(symlink("/etc", p), 0);
    struct fs_lister *l = open_list(FS_LIST_SORTED);
    /* The directory renamed, a name gone, after the listing began: the listing goes on in the
     * directory it holds, and passes over what is gone. */
    snprintf(q, sizeof(q), "%s.moved", dir);
    ck_assert_int_eq(rename(dir, q), 0);
    snprintf(p, sizeof(p), "%s/n1xx", q);
    ck_assert_int_eq(unlink(p), 0);
    struct fs_entry e;
    struct sbxd_err err = {0};
    const char *want[] = {"link", "n0xx", "n2xx"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(fs_list_next(l, &e, &err), 1);
        ck_assert_str_eq(e.name, want[i]);
    }
    ck_assert_int_eq(fs_list_next(l, &e, &err), 0);
    fs_list_close(l);
    ck_assert_int_eq(rename(q, dir), 0);
    /* A symlink is the link itself, never what it names. */
    l = open_list(FS_LIST_SORTED);
    ck_assert_int_eq(fs_list_next(l, &e, &err), 1);
    ck_assert_str_eq(e.name, "link");
    ck_assert_str_eq(e.type, "symlink");
    fs_list_close(l);
}
END_TEST

START_TEST(no_fd_leak)
{
    make_entries(5, 4);
    int before = open("/dev/null", O_RDONLY);
    close(before);
    for (int i = 0; i < 20; i++) {
        struct fs_lister *l = open_list(i % 2 ? FS_LIST_SORTED : 0);
        struct fs_entry e;
        struct sbxd_err err = {0};
        fs_list_next(l, &e, &err); /* closed half-way */
        fs_list_close(l);
    }
    struct sbxd_err err = {0};
    ck_assert_ptr_null(fs_list_open(open("/dev/null", O_RDONLY), 0, &err)); /* not a dir */
    int after = open("/dev/null", O_RDONLY);
    close(after);
    ck_assert_int_eq(before, after);
}
END_TEST

/* A document made and sent a piece at a time: dropping the text sent keeps the commas. */
START_TEST(json_dropped_in_pieces)
{
    struct jsonw w;
    jw_init(&w, 64);
    jw_arr_begin(&w);
    jw_int(&w, 1);
    ck_assert_uint_eq(w.len, 2);
    jw_drop(&w);
    jw_int(&w, 2);
    jw_arr_end(&w);
    size_t len;
    char *s = jw_finish(&w, &len);
    ck_assert_str_eq(s, ",2]");
    free(s);
}
END_TEST

Suite *list_suite(void)
{
    Suite *s = suite_create("list");
    TCase *tc = tcase_create("list");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, empty_directory);
    tcase_add_test(tc, small_directory_sorted_up_to_the_bound);
    tcase_add_test(tc, larger_directory_streamed_whole_in_its_own_order);
    tcase_add_test(tc, long_names_bound_the_sorted_size_too);
    tcase_add_test(tc, skip_passes_over_names_and_counts_them);
    tcase_add_test(tc, entries_described_from_the_held_directory);
    tcase_add_test(tc, no_fd_leak);
    tcase_add_test(tc, json_dropped_in_pieces);
    suite_add_tcase(s, tc);
    return s;
}
