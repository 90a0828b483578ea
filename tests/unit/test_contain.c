/*
 * The containment backends' operations (contain.h) against real processes: what each kill
 * and signal reaches, and the chooser. (The cgroup and uid backends' own mechanisms need a
 * delegated cgroup or root with a uid range: the vm tier and the integration suite.)
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/contain.h"
#include "sbxd/reaper.h"
#include "suites.h"

/* A child that makes its own session (as every command does) and a grandchild in its
 * group; with escape, also a great-grandchild that leaves for a session of its own. The
 * pids come back through a pipe: child, grandchild, escapee (0 if none). */
static pid_t start_tree(bool setsid_first, bool escape, pid_t out[3])
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        /* The defaults, not the test runner's handlers (which signal their own group). */
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGALRM, SIG_DFL);
        if (setsid_first)
            setsid();
        pid_t v[3] = {getpid(), 0, 0};
        if ((v[1] = fork()) == 0) {
            pause();
            _exit(0);
        }
        if (escape && (v[2] = fork()) == 0) {
            setsid();
            pause();
            _exit(0);
        }
        if (write(p[1], v, sizeof(v)) != (ssize_t)sizeof(v))
            _exit(1);
        pause();
        _exit(0);
    }
    close(p[1]);
    ck_assert_int_eq(read(p[0], out, 3 * sizeof(pid_t)), (ssize_t)(3 * sizeof(pid_t)));
    close(p[0]);
    usleep(20000); /* the escapee's setsid */
    return child;
}

/* Wait (bounded) until pid is gone; grandchildren are not ours to reap, so poll. */
static bool gone(pid_t pid)
{
    for (int i = 0; i < 200 && proc_running(pid); i++) {
        waitpid(pid, NULL, WNOHANG);
        usleep(5000);
    }
    return !proc_running(pid);
}

static void handle(struct contain *c, const struct contain_ops *ops, struct isolation *iso)
{
    memset(iso, 0, sizeof(*iso));
    iso->contain = ops;
    contain_init(c, iso, -1, 1000, 1000);
}

START_TEST(pgid_kill_reaches_the_group_not_a_setsid_escapee)
{
    struct isolation iso;
    struct contain c;
    handle(&c, &contain_pgid_ops, &iso);
    pid_t v[3];
    start_tree(true, true, v);
    struct reap_target rt = {.pid = v[0]};
    c.ops->kill(&c, &rt, false, false);
    ck_assert(gone(v[0]));
    ck_assert(gone(v[1]));
    /* The degraded mode, as documented: a process that left the group survives. */
    ck_assert(proc_running(v[2]));
    kill(v[2], SIGKILL);
    ck_assert(gone(v[2]));
}
END_TEST

START_TEST(kill_during_spawn_reaches_a_child_not_yet_a_group_leader)
{
    struct isolation iso;
    struct contain c;
    handle(&c, &contain_pgid_ops, &iso);
    pid_t v[3];
    /* No setsid yet: its pid names no group, so only a kill by pid reaches it. */
    start_tree(false, false, v);
    struct reap_target rt = {.pid = v[0]};
    c.ops->kill(&c, &rt, true, false);
    usleep(20000);
    ck_assert(proc_running(v[0]));
    c.ops->kill(&c, &rt, true, true);
    ck_assert(gone(v[0]));
    kill(v[1], SIGKILL);
    ck_assert(gone(v[1]));
}
END_TEST

START_TEST(signal_without_a_hold_goes_to_the_group)
{
    /* A cgroup or uid backend whose prepare never ran (no leaf, no uid) signals the group,
     * as the process group backend does. */
    const struct contain_ops *ops[] = {&contain_pgid_ops, &contain_cgroup_ops, &contain_uid_ops};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        struct isolation iso;
        struct contain c;
        handle(&c, ops[i], &iso);
        pid_t v[3];
        start_tree(true, false, v);
        c.ops->signal(&c, v[0], SIGTERM);
        ck_assert_msg(gone(v[0]) && gone(v[1]), "%s: the group outlived SIGTERM", ops[i]->name);
    }
}
END_TEST

START_TEST(pidns_init_kill_goes_through_the_reaper_when_unlocked)
{
    struct isolation iso;
    struct contain c;
    handle(&c, &contain_pidns_init_ops, &iso);
    ck_assert(c.ops->init_reports);
    pid_t v[3];
    start_tree(true, false, v);
    struct reap_target rt;
    reaper_add(&rt);
    rt.pid = v[0];
    rt.reaped = true; /* as the reaper leaves a reaped init: its pid may be another's now */
    c.ops->kill(&c, &rt, false, false);
    usleep(20000);
    ck_assert(proc_running(v[0]));
    rt.reaped = false;
    c.ops->kill(&c, &rt, false, false);
    ck_assert(gone(v[0]));
    reaper_remove(&rt);
    kill(-v[0], SIGKILL);
    ck_assert(gone(v[1]));
}
END_TEST

START_TEST(choose_maps_each_tree_kill_to_its_backend)
{
    struct isolation iso;
    memset(&iso, 0, sizeof(iso));
    static const struct {
        enum iso_tree_kill k;
        const struct contain_ops *ops;
    } map[] = {
        {ISO_KILL_CGROUP, &contain_cgroup_ops},
        {ISO_KILL_PIDNS, &contain_pidns_init_ops}, /* no slot pool runs here */
        {ISO_KILL_UID, &contain_uid_ops},
        {ISO_KILL_PGID, &contain_pgid_ops},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        iso.tree_kill = map[i].k;
        contain_choose(&iso);
        ck_assert_ptr_eq(iso.contain, map[i].ops);
        struct contain c;
        contain_init(&c, &iso, 3, 1000, 1000);
        ck_assert_ptr_eq(c.ops, map[i].ops);
        ck_assert_int_eq(c.leaf.dirfd, -1);
        ck_assert_int_eq((int)c.uid, -1);
        /* Nothing taken: letting go is a no-op, twice. */
        c.ops->release(&c, false);
        c.ops->release(&c, true);
    }
}
END_TEST

Suite *contain_suite(void)
{
    Suite *s = suite_create("contain");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, pgid_kill_reaches_the_group_not_a_setsid_escapee);
    tcase_add_test(tc, kill_during_spawn_reaches_a_child_not_yet_a_group_leader);
    tcase_add_test(tc, signal_without_a_hold_goes_to_the_group);
    tcase_add_test(tc, pidns_init_kill_goes_through_the_reaper_when_unlocked);
    tcase_add_test(tc, choose_maps_each_tree_kill_to_its_backend);
    suite_add_tcase(s, tc);
    return s;
}
