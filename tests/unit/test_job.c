/*
 * The job lifecycle (job.h) driven without HTTP: start, output, the exit and its result,
 * the deadline kept by the keeper while nobody drives the job, kills, the output limit, and
 * the one release path (no fd, no process left). Real children under the pgid backend and
 * a real hardening plan; a reaper thread stands in for sbxd's main thread.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sbxd/contain.h"
#include "sbxd/harden.h"
#include "sbxd/job.h"
#include "sbxd/reaper.h"
#include "sbxd/request.h"
#include "sbxd/spawn.h"
#include "suites.h"

static struct harden_plan plan;
static struct isolation iso;
static char root[64];
static int rootfd = -1;
static pthread_t reaper_thread;
static volatile int reaper_stop;

static void *reaper_main(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000000};
    while (!reaper_stop) {
        sigtimedwait(&set, NULL, &ts);
        reaper_reap();
    }
    return NULL;
}

static bool with_reaper;

static void setup_common(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    spawn_init();
    reaper_init();
    struct sbxd_err err = {0};
    ck_assert_int_eq(harden_init(&plan, 65534, 65534, false, false, &err), 0);
    memset(&iso, 0, sizeof(iso));
    iso.contain = &contain_pgid_ops;
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    iso.pidfd = fd >= 0;
    if (fd >= 0)
        close(fd);
    snprintf(root, sizeof(root), "/tmp/sbxd-job-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    chmod(root, 0755);
    rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(rootfd, 0);
    reaper_stop = 0;
    if (with_reaper)
        ck_assert_int_eq(pthread_create(&reaper_thread, NULL, reaper_main, NULL), 0);
    ck_assert_int_eq(job_keeper_start(), 0);
}

static void setup(void)
{
    with_reaper = true;
    setup_common();
}

/* No thread reaps on SIGCHLD: where the kernel has pidfd, the job's owner alone must. */
static void setup_pidfd_only(void)
{
    with_reaper = false;
    setup_common();
}

static void teardown(void)
{
    job_keeper_stop();
    reaper_stop = 1;
    if (with_reaper)
        pthread_join(reaper_thread, NULL);
    close(rootfd);
    rmdir(root);
    harden_free(&plan);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the DIR's own */
}

static void parse(const char *json, struct exec_request *req)
{
    struct request_policy pol = {.default_timeout_ms = 10000,
                                 .max_timeout_ms = 60000,
                                 .max_cpu_quota = 1,
                                 .workspace = root};
    struct sbxd_err err = {0};
    ck_assert_msg(exec_request_parse(json, strlen(json), &pol, req, &err) == 0, "%s", err.msg);
}

/* job_start on a thread of its own, as sbxd spawns from its connection threads: the spawning
 * thread takes the commands' seccomp filter (harden_thread), which the test's own thread must
 * not have (LeakSanitizer's tracer, cloned from it at exit, needs ptrace). */
struct starter {
    const struct exec_request *req;
    struct job_env env;
    struct sbxd_err err;
    struct job *job;
};

static void *starter_main(void *arg)
{
    struct starter *st = arg;
    st->job = job_start(st->req, &st->env, &st->err);
    return NULL;
}

static struct job *try_start(const struct exec_request *req, bool interactive, struct sbxd_err *err)
{
    struct starter st = {.req = req,
                         .env = {.rootfd = rootfd,
                                 .cancel_fd = -1,
                                 .harden = &plan,
                                 .iso = &iso,
                                 .interactive = interactive}};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, starter_main, &st), 0);
    pthread_join(th, NULL);
    *err = st.err;
    return st.job;
}

static struct job *start(const char *json, struct exec_request *req, bool interactive)
{
    parse(json, req);
    struct sbxd_err err = {0};
    struct job *job = try_start(req, interactive, &err);
    ck_assert_msg(job != NULL, "job_start: %s", err.msg);
    return job;
}

/* Drive to the end; stdout into out (NUL-terminated, cut to len). */
static void drive(struct job *job, char *out, size_t len)
{
    char buf[4096];
    size_t at = 0;
    struct job_event ev;
    do {
        job_step(job, -1, buf, sizeof(buf), &ev);
        if (ev.type == JOB_EV_OUTPUT && ev.stream == 1 && out)
            for (size_t i = 0; i < ev.len && at + 1 < len; i++)
                out[at++] = buf[i];
    } while (ev.type != JOB_EV_EXIT);
    if (out)
        out[at] = '\0';
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Not running any more, gone or a zombie not reaped yet (bounded wait; never reaps: the
 * job's process is the reaper's to collect). */
static bool ended(pid_t pid)
{
    for (int i = 0; i < 200 && proc_running(pid); i++)
        usleep(10000);
    return !proc_running(pid);
}

START_TEST(job_runs_and_reports_output_and_exit_code)
{
    struct exec_request req;
    struct job *job = start("{\"command\":\"echo out; echo err >&2; exit 3\"}", &req, false);
    char out[64];
    drive(job, out, sizeof(out));
    const struct job_result *r = job_result(job);
    ck_assert_str_eq(out, "out\n");
    ck_assert_int_eq(r->status, JOB_EXITED);
    ck_assert_int_eq(r->exit_code, 3);
    ck_assert_uint_eq(r->stdout_bytes, 4);
    ck_assert_uint_eq(r->stderr_bytes, 4);
    ck_assert(!r->timed_out);
    job_free(job);
    exec_request_free(&req);
}
END_TEST

START_TEST(job_deadline_is_kept_while_nobody_drives_it)
{
    struct exec_request req;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct job *job = start("{\"command\":\"sleep 30\",\"timeout_ms\":200}", &req, false);
    pid_t pid = job_pid(job);
    /* Nobody calls job_step: the keeper alone kills it at its deadline. */
    usleep(700000);
    ck_assert_msg(ended(pid), "the command still runs 500 ms past its deadline");
    drive(job, NULL, 0);
    const struct job_result *r = job_result(job);
    ck_assert_int_eq(r->status, JOB_TIMEOUT);
    ck_assert(r->timed_out);
    ck_assert_int_eq(r->signal, SIGKILL);
    ck_assert_msg(r->duration_ms >= 190 && r->duration_ms < 600, "duration %.1f ms",
                  r->duration_ms);
    ck_assert_msg(ms_since(&t0) < 5000, "took %.0f ms", ms_since(&t0));
    job_free(job);
    exec_request_free(&req);
}
END_TEST

START_TEST(job_kill_reaches_the_whole_tree)
{
    struct exec_request req;
    struct job *job = start("{\"command\":\"sleep 30 & echo $!; wait\"}", &req, false);
    char buf[64];
    struct job_event ev;
    job_step(job, 5000, buf, sizeof(buf) - 1, &ev);
    ck_assert_int_eq(ev.type, JOB_EV_OUTPUT);
    buf[ev.len] = '\0';
    pid_t grandchild = (pid_t)atoi(buf);
    ck_assert_int_gt(grandchild, 0);
    job_kill(job, JOB_KILL_CANCEL);
    drive(job, NULL, 0);
    ck_assert_int_eq(job_result(job)->status, JOB_CANCELED);
    ck_assert_msg(ended(grandchild), "the command's child survived the kill");
    job_free(job);
    exec_request_free(&req);
}
END_TEST

START_TEST(job_output_limit_kills)
{
    struct exec_request req;
    struct job *job =
        start("{\"argv\":[\"yes\"],\"limits\":{\"output_bytes\":10000}}", &req, false);
    drive(job, NULL, 0);
    const struct job_result *r = job_result(job);
    ck_assert_int_eq(r->status, JOB_OUTPUT_LIMIT);
    ck_assert_uint_ge(r->stdout_bytes, 10000);
    job_free(job);
    exec_request_free(&req);
}
END_TEST

START_TEST(job_failed_to_start_says_why)
{
    struct exec_request req;
    struct job *job = start("{\"argv\":[\"no-such-command-here\"]}", &req, false);
    drive(job, NULL, 0);
    const struct job_result *r = job_result(job);
    ck_assert_int_eq(r->status, JOB_FAILED_TO_START);
    ck_assert_int_eq(r->exit_code, 127);
    ck_assert_ptr_nonnull(strstr(r->error, "no-such-command-here"));
    job_free(job);
    exec_request_free(&req);
}
END_TEST

struct stdin_driver {
    struct job *job;
    char out[64];
};

static void *drive_thread(void *arg)
{
    struct stdin_driver *d = arg;
    drive(d->job, d->out, sizeof(d->out));
    return NULL;
}

START_TEST(job_stdin_reaches_an_interactive_command)
{
    struct exec_request req;
    struct stdin_driver d = {.job = start("{\"argv\":[\"cat\"]}", &req, true)};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, drive_thread, &d), 0);
    struct sbxd_err err = {0};
    uint64_t written = 0;
    ck_assert_int_eq(job_stdin_write(d.job, "hello\n", 6, true, &written, &err), 0);
    ck_assert_uint_eq(written, 6);
    pthread_join(th, NULL);
    ck_assert_str_eq(d.out, "hello\n");
    ck_assert_int_eq(job_result(d.job)->status, JOB_EXITED);
    /* Ended: a further write is refused as such. */
    ck_assert_int_eq(job_stdin_write(d.job, "x", 1, false, &written, &err), -1);
    ck_assert_int_eq(err.kind, SBXD_E_CONFLICT);
    job_free(d.job);
    exec_request_free(&req);
}
END_TEST

/* One job first: what sbxd keeps open for good (/dev/null for stdin) is opened then. */
static int fds_at_rest(void)
{
    struct exec_request req;
    struct job *job = start("{\"argv\":[\"true\"]}", &req, false);
    drive(job, NULL, 0);
    job_free(job);
    exec_request_free(&req);
    return count_fds();
}

START_TEST(job_release_leaves_no_fd_and_no_process)
{
    int before = fds_at_rest();
    for (int i = 0; i < 3; i++) {
        struct exec_request req;
        struct job *job = start("{\"command\":\"echo hi\"}", &req, false);
        drive(job, NULL, 0);
        job_free(job);
        exec_request_free(&req);
    }
    ck_assert_int_eq(count_fds(), before);
    /* Abandoned mid-run: job_free kills it and lets go of everything too. */
    struct exec_request req;
    struct job *job = start("{\"command\":\"sleep 30\"}", &req, true);
    pid_t pid = job_pid(job);
    job_free(job);
    exec_request_free(&req);
    ck_assert_msg(ended(pid), "an abandoned job's process survived job_free");
    ck_assert_int_eq(count_fds(), before);
}
END_TEST

START_TEST(job_start_refusal_leaves_nothing)
{
    int before = fds_at_rest();
    struct exec_request req;
    parse("{\"argv\":[\"true\"],\"cwd\":\"no/such/dir\"}", &req);
    struct sbxd_err err = {0};
    ck_assert_ptr_null(try_start(&req, false, &err));
    ck_assert_int_eq(err.kind, SBXD_E_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "cwd"));
    exec_request_free(&req);
    ck_assert_int_eq(count_fds(), before);
}
END_TEST

/* Where the kernel has pidfd a command is cloned without an exit signal and its owner reaps
 * it on the pidfd's notice: nothing else needs to be woken, nor run, for a job to end. */
START_TEST(job_ends_on_its_pidfd_without_a_reaper)
{
    if (!iso.pidfd) {
        fprintf(stderr, "job: no pidfd on this kernel: the reaper's notice is the one path\n");
        return;
    }
    for (int i = 0; i < 20; i++) {
        struct exec_request req;
        struct job *job = start(i % 2 ? "{\"command\":\"exit 7\"}"
                                      : "{\"command\":\"exec 1>&- 2>&-; sleep 0.05\"}",
                                &req, false);
        drive(job, NULL, 0);
        ck_assert_int_eq(job_result(job)->status, JOB_EXITED);
        ck_assert_int_eq(job_result(job)->exit_code, i % 2 ? 7 : 0);
        job_free(job);
        exec_request_free(&req);
    }
}
END_TEST

Suite *job_suite(void)
{
    Suite *s = suite_create("job");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, job_runs_and_reports_output_and_exit_code);
    tcase_add_test(tc, job_deadline_is_kept_while_nobody_drives_it);
    tcase_add_test(tc, job_kill_reaches_the_whole_tree);
    tcase_add_test(tc, job_output_limit_kills);
    tcase_add_test(tc, job_failed_to_start_says_why);
    tcase_add_test(tc, job_stdin_reaches_an_interactive_command);
    tcase_add_test(tc, job_release_leaves_no_fd_and_no_process);
    tcase_add_test(tc, job_start_refusal_leaves_nothing);
    suite_add_tcase(s, tc);
    TCase *quiet = tcase_create("pidfd");
    tcase_add_checked_fixture(quiet, setup_pidfd_only, teardown);
    tcase_set_timeout(quiet, 30);
    tcase_add_test(quiet, job_ends_on_its_pidfd_without_a_reaper);
    suite_add_tcase(s, quiet);
    return s;
}
