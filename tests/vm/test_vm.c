/*
 * test_vm.c - the vm tier: runs inside the VM that tools/vmtest boots, where the kernel offers
 * cgroup v2 with the memory, pids and cpu controllers. What a test process sees there is in
 * docs/testing.md: its own cgroup (a fresh "pod") is the root of its cgroup namespace and of the
 * cgroup2 mount at /sys/fs/cgroup, with those three controllers available and none enabled.
 *
 * First the environment the cgroup work will need, then sbxd itself.
 */
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define CGROUP_MOUNT "/sys/fs/cgroup"

/* The whole of a small file as a string (caller frees), or NULL with errno set. */
static char *slurp(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    ssize_t n;
    while ((n = read(fd, s + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2)
            s = realloc(s, cap *= 2);
    }
    int saved = errno;
    close(fd);
    if (n < 0) {
        free(s);
        errno = saved;
        return NULL;
    }
    s[len] = '\0';
    return s;
}

/* Write s to a cgroup file in one write(2); 0, or the errno. */
static int put(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int rc = write(fd, s, strlen(s)) == (ssize_t)strlen(s) ? 0 : errno;
    close(fd);
    return rc;
}

/* snprintf that may truncate (error messages, bounded paths) without a compiler warning. */
__attribute__((format(printf, 3, 4))) static void fmt(char *buf, size_t size, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, size, f, ap);
    va_end(ap);
}

static void pathf(char *buf, const char *dir, const char *file)
{
    fmt(buf, PATH_MAX, "%s/%s", dir, file);
}

/* Whether word occurs in a space- or newline-separated list. */
static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ' || p[-1] == '\n') &&
            (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
            return true;
    return false;
}

/* The value of "key N" in a keyed file such as memory.events; -1 if absent. */
static long keyed(const char *text, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == ' ')
            return strtol(p + n + 1, NULL, 10);
    return -1;
}

/* This process's cgroup v2 path, as /proc/self/cgroup states it ("0::PATH"). */
static void own_cgroup_path(char *buf, size_t size)
{
    char *s = slurp("/proc/self/cgroup");
    ck_assert_msg(s != NULL, "/proc/self/cgroup: %s", strerror(errno));
    const char *line = strstr(s, "0::");
    ck_assert_msg(line && (line == s || line[-1] == '\n'), "no cgroup v2 line in:\n%s", s);
    line += 3;
    size_t len = strcspn(line, "\n");
    ck_assert_uint_lt(len, size);
    memcpy(buf, line, len);
    buf[len] = '\0';
    free(s);
}

/* This process's cgroup directory under the mount. */
static void own_cgroup_dir(char *buf)
{
    char rel[PATH_MAX - 32];
    own_cgroup_path(rel, sizeof(rel));
    snprintf(buf, PATH_MAX, CGROUP_MOUNT "%s", strcmp(rel, "/") == 0 ? "" : rel);
}

START_TEST(test_cgroup2_mounted)
{
    struct statfs sf;
    ck_assert_msg(statfs(CGROUP_MOUNT, &sf) == 0, "statfs: %s", strerror(errno));
    ck_assert_msg(sf.f_type == CGROUP2_SUPER_MAGIC,
                  CGROUP_MOUNT " is not cgroup2 (f_type 0x%lx): not in the vmtest VM?",
                  (unsigned long)sf.f_type);
}
END_TEST

/* Rooted at the pod by a cgroup namespace, as in a container with a private one; main() has
 * moved the runner into the pod's "runner" leaf (see there). */
START_TEST(test_own_cgroup_is_namespace_root)
{
    char rel[PATH_MAX];
    own_cgroup_path(rel, sizeof(rel));
    ck_assert_msg(strcmp(rel, "/runner") == 0, "/proc/self/cgroup says %s, expected /runner", rel);
}
END_TEST

START_TEST(test_controllers_available)
{
    char dir[PATH_MAX], p[PATH_MAX];
    own_cgroup_dir(dir);
    pathf(p, dir, "cgroup.controllers");
    char *c = slurp(p);
    ck_assert_msg(c != NULL, "%s: %s", p, strerror(errno));
    const char *want[] = {"memory", "pids", "cpu"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(has_word(c, want[i]), "%s lacks %s: %s", p, want[i], c);
    free(c);
}
END_TEST

/*
 * A process in a sub-cgroup with memory.max = 32 MiB touches 100 MiB and is OOM-killed.
 *
 * Our cgroup holds processes (this test, the Check runner, the shared sbxd), and a non-root
 * cgroup with processes cannot enable controllers for its children (cgroup v2's "no internal
 * processes" rule). So, as sbxd's cgroup backend will have to: move every process of our
 * cgroup into a leaf, enable +memory, make the limited sub-cgroup next to the leaf. Afterwards
 * everything is put back as it was. Nothing asserts until it is.
 */
#define HOG_BYTES ((size_t)100 << 20)

struct oom_run {
    char err[512];
    bool ran;
    int status;
    long oom_kill;
};

/* Move every process of cgroup directory from into to; true once from has none. */
static bool move_all(const char *from, const char *to)
{
    char src[PATH_MAX], dst[PATH_MAX];
    pathf(src, from, "cgroup.procs");
    pathf(dst, to, "cgroup.procs");
    for (int round = 0; round < 50; round++) {
        char *list = slurp(src);
        if (!list)
            return false;
        bool empty = true;
        char *save = NULL;
        for (char *pid = strtok_r(list, "\n", &save); pid; pid = strtok_r(NULL, "\n", &save)) {
            empty = false;
            put(dst, pid); /* ESRCH: it has exited meanwhile */
        }
        free(list);
        if (empty)
            return true;
    }
    return false;
}

static void rmdir_retry(const char *dir)
{
    for (int i = 0; i < 100 && rmdir(dir) < 0 && errno == EBUSY; i++)
        usleep(10000);
}

static void oom_run(struct oom_run *r)
{
    char own[PATH_MAX], leaf[PATH_MAX], box[PATH_MAX], p[PATH_MAX];
    int e;
    own_cgroup_dir(own);
    pathf(leaf, own, "vmtest-procs");
    pathf(box, own, "vmtest-oom");

    if (mkdir(leaf, 0755) < 0 && errno != EEXIST) {
        fmt(r->err, sizeof(r->err), "mkdir %s: %s", leaf, strerror(errno));
        return;
    }
    if (!move_all(own, leaf)) {
        fmt(r->err, sizeof(r->err), "could not empty %s into %s", own, leaf);
        goto restore;
    }
    pathf(p, own, "cgroup.subtree_control");
    char *sub = slurp(p);
    bool had_memory = sub && has_word(sub, "memory");
    free(sub);
    if (!had_memory && (e = put(p, "+memory")) != 0) {
        fmt(r->err, sizeof(r->err), "+memory into %s: %s", p, strerror(e));
        goto restore;
    }
    if (mkdir(box, 0755) < 0) {
        fmt(r->err, sizeof(r->err), "mkdir %s: %s", box, strerror(errno));
        goto disable;
    }
    pathf(p, box, "memory.max");
    if ((e = put(p, "32M")) != 0) {
        fmt(r->err, sizeof(r->err), "%s: %s", p, strerror(e));
        goto remove_box;
    }
    pathf(p, box, "memory.swap.max");
    put(p, "0"); /* absent without swap accounting; the VM has no swap anyway */

    pid_t pid = fork();
    if (pid == 0) {
        pathf(p, box, "cgroup.procs");
        if (put(p, "0") != 0) /* "0": the writer itself */
            _exit(3);
        volatile char *m = malloc(HOG_BYTES);
        if (!m)
            _exit(4);
        for (size_t i = 0; i < HOG_BYTES; i += 4096)
            m[i] = 1;
        _exit(0);
    }
    if (pid < 0) {
        fmt(r->err, sizeof(r->err), "fork: %s", strerror(errno));
        goto remove_box;
    }
    waitpid(pid, &r->status, 0);
    r->ran = true;
    pathf(p, box, "memory.events");
    char *ev = slurp(p);
    r->oom_kill = ev ? keyed(ev, "oom_kill") : -1;
    free(ev);

remove_box:
    rmdir_retry(box);
disable:
    pathf(p, own, "cgroup.subtree_control");
    if (!had_memory)
        put(p, "-memory");
restore:
    move_all(leaf, own);
    rmdir_retry(leaf);
}

START_TEST(test_oom_kill_in_sub_cgroup)
{
    struct oom_run r = {0};
    oom_run(&r);
    ck_assert_msg(r.err[0] == '\0', "%s", r.err);
    ck_assert(r.ran);
    ck_assert_msg(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL,
                  "the hog was not killed: wait status 0x%x", r.status);
    ck_assert_msg(r.oom_kill >= 1, "memory.events oom_kill is %ld", r.oom_kill);

    /* Put back as found: no leaf or box left, controllers as before. */
    char own[PATH_MAX], p[PATH_MAX];
    own_cgroup_dir(own);
    pathf(p, own, "vmtest-procs");
    ck_assert_msg(access(p, F_OK) < 0, "%s is still there", p);
    pathf(p, own, "vmtest-oom");
    ck_assert_msg(access(p, F_OK) < 0, "%s is still there", p);
    pathf(p, own, "cgroup.procs");
    char *procs = slurp(p);
    char self[32];
    snprintf(self, sizeof(self), "%d", (int)getpid());
    ck_assert_msg(procs && has_word(procs, self), "not back in %s: %s", own, procs);
    free(procs);
}
END_TEST

START_TEST(test_execute_echo)
{
    cJSON *r = execute(&g_sbxd, "{\"command\":\"echo hi\"}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    ck_assert_int_eq((int)jnum(r, "exit_code"), 0);
    ck_assert_str_eq(jstr(r, "stdout"), "hi\n");
    ck_assert_str_eq(jstr(r, "stderr"), "");
    cJSON_Delete(r);
}
END_TEST

START_TEST(test_healthz)
{
    struct http_resp r;
    ck_assert_int_eq(http_request(&g_sbxd, "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
    ck_assert_msg(r.status == 200, "status %ld: %s", r.status, r.body);
    ck_assert_msg(cJSON_IsObject(r.json), "not JSON: %s", r.body);
    ck_assert_str_eq(jstr(r.json, "status"), "ok");
    http_resp_free(&r);
}
END_TEST

/* Command leaves ("job-*") under the cgroup directory base. */
static int job_leaf_count(const char *base)
{
    DIR *d = opendir(base);
    ck_assert_msg(d != NULL, "%s: %s", base, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, "job-", 4) == 0;
    closedir(d);
    return n;
}

static struct daemon killed;

static void *execute_on_killed(void *arg)
{
    const char *body = arg;
    struct http_resp r;
    http_request(&killed, "POST", "/execute", NULL, body, strlen(body), 30000, &r);
    http_resp_free(&r);
    return NULL;
}

/*
 * sbxd killed with SIGKILL while commands run: their cgroup leaves, and the processes in
 * them, outlive it (nothing else ties a command to the daemon). The next sbxd in the same
 * cgroup kills them (cgroup.kill) and removes the leaves before it serves.
 */
START_TEST(test_kill9_then_restart_removes_stale_leaves_and_their_processes)
{
    daemon_start(&killed, NULL, NULL);
    struct http_resp r;
    ck_assert_int_eq(http_request(&killed, "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
    char base[PATH_MAX];
    const cJSON *iso = cJSON_GetObjectItemCaseSensitive(r.json, "isolation");
    fmt(base, sizeof(base), "%s", jstr(iso, "cgroup_base"));
    http_resp_free(&r);
    /* A background process, and a command whose request is in flight; each forks a child. */
    const char *bg = "{\"command\":\"sleep 1000.4242 & sleep 1000.4242\"}";
    ck_assert_int_eq(http_request(&killed, "POST", "/processes", NULL, bg, strlen(bg), 0, &r), 0);
    ck_assert_int_eq(r.status, 201);
    http_resp_free(&r);
    pthread_t t;
    pthread_create(&t, NULL, execute_on_killed,
                   (void *)"{\"command\":\"setsid sleep 1000.4242 & sleep 1000.4242\"}");
    for (int i = 0; i < 100 && (job_leaf_count(base) < 2 || procs_with("sleep 1000.4242") < 2); i++)
        usleep(50000);
    usleep(300000); /* the children are forked */
    int n = procs_with("sleep 1000.4242");
    ck_assert_int_ge(n, 2);
    ck_assert_int_eq(job_leaf_count(base), 2);

    ck_assert_int_eq(kill(killed.pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(killed.pid, NULL, 0), killed.pid);
    killed.pid = 0;
    pthread_join(t, NULL);
    daemon_stop(&killed, 0);
    remove(killed.log);
    usleep(100000);
    /* The fault: everything the killed sbxd ran is still there. */
    ck_assert_int_eq(procs_with("sleep 1000.4242"), n);
    ck_assert_int_eq(job_leaf_count(base), 2);

    struct daemon d;
    daemon_start(&d, NULL, NULL); /* the restart, in the same cgroup */
    ck_assert_int_eq(wait_no_procs("sleep 1000.4242", 2000), 0);
    ck_assert_int_eq(job_leaf_count(base), 0);
    char *log = daemon_log_read(&d);
    ck_assert_msg(strstr(log, "remove stale leaf"), "%s", log);
    free(log);
    cJSON *res = execute(&d, "{\"command\":\"echo after\"}");
    ck_assert_str_eq(jstr(res, "stdout"), "after\n");
    cJSON_Delete(res);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/*
 * The cgroup backend's kill paths against a command spinning kill(-1, SIGSTOP) (the attack of
 * tests/integration/test_attacks.c): commands run as one uid here and this kernel has no
 * Landlock signal scope, so the spinner stops the others' children, before exec too. sbxd
 * must still answer each request within its deadline, kill by cgroup.kill and shut down.
 */
static cJSON *answered(const char *method, const char *path, const char *body, long status, long ms)
{
    struct http_resp r;
    int rc = http_request(&g_sbxd, method, path, NULL, body, body ? strlen(body) : 0, ms, &r);
    ck_assert_msg(rc == 0, "%s %s: no answer within %ld ms", method, path, ms);
    ck_assert_msg(r.status == status, "%s %s: HTTP %ld: %s", method, path, r.status, r.body);
    cJSON *j = r.json;
    r.json = NULL;
    http_resp_free(&r);
    return j;
}

START_TEST(test_sigstop_spinner_cannot_freeze_cgroup_kills)
{
    daemon_install_probe(&g_sbxd);
    const char *spin = "{\"argv\":[\"./sbxd-probe\",\"attack\",\"stop\",\"60\"],"
                       "\"timeout_ms\":60000}";
    cJSON *p = answered("POST", "/processes", spin, 201, 20000);
    char path[160];
    fmt(path, sizeof(path), "/processes/%s", jstr(p, "id"));
    cJSON_Delete(p);
    usleep(300000);
    for (int i = 0; i < 3; i++)
        cJSON_Delete(answered("POST", "/execute", "{\"command\":\"echo hi\",\"timeout_ms\":2000}",
                              200, 20000));
    cJSON *t = answered("POST", "/execute",
                        "{\"argv\":[\"./sbxd-probe\",\"attack\",\"stop\",\"60\"],"
                        "\"timeout_ms\":1000}",
                        200, 20000);
    ck_assert_msg(!strcmp(jstr(t, "status"), "timeout") ||
                      !strcmp(jstr(t, "status"), "failed_to_start"),
                  "%s", jstr(t, "status"));
    cJSON_Delete(t);
    char sig[200];
    fmt(sig, sizeof(sig), "%s/signal", path);
    cJSON_Delete(answered("POST", sig, "{\"signal\":\"SIGTERM\"}", 200, 20000));
    cJSON_Delete(answered("DELETE", path, NULL, 200, 20000));
    t = answered("POST", "/execute", "{\"command\":\"echo after\"}", 200, 20000);
    ck_assert_str_eq(jstr(t, "stdout"), "after\n");
    cJSON_Delete(t);
    ck_assert_int_eq(wait_no_procs("sbxd-probe attack", 5000), 0);
}
END_TEST

static Suite *vm_suite(void)
{
    Suite *s = suite_create("vm");
    /* Timeouts are host-sized; tools/vmtest sets CK_TIMEOUT_MULTIPLIER for TCG. */
    TCase *env = tcase_create("environment");
    tcase_set_timeout(env, 10);
    tcase_add_test(env, test_cgroup2_mounted);
    tcase_add_test(env, test_own_cgroup_is_namespace_root);
    tcase_add_test(env, test_controllers_available);
    tcase_add_test(env, test_oom_kill_in_sub_cgroup);
    suite_add_tcase(s, env);
    TCase *d = tcase_create("sbxd");
    tcase_set_timeout(d, 10);
    tcase_add_test(d, test_execute_echo);
    tcase_add_test(d, test_healthz);
    suite_add_tcase(s, d);
    TCase *attacks = tcase_create("attacks");
    tcase_set_timeout(attacks, 30);
    tcase_add_test(attacks, test_sigstop_spinner_cannot_freeze_cgroup_kills);
    suite_add_tcase(s, attacks);
    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 30);
    tcase_add_test(faults, test_kill9_then_restart_removes_stale_leaves_and_their_processes);
    suite_add_tcase(s, faults);
    return s;
}

Suite *cgroup_suite(void);
Suite *adopt_suite(void);

/* In a container sbxd is the pod cgroup's only process. Here the runner (and every test it
 * forks) moves into a "runner" leaf, and the harness starts each sbxd in the "sbxd" leaf
 * (SBXD_TEST_CGROUP), so the pod itself holds no process and sbxd can enable controllers
 * for its command leaves. */
static void leave_the_pod(void)
{
    if (mkdir(CGROUP_MOUNT "/runner", 0755) < 0 && errno != EEXIST)
        return;
    int fd = open(CGROUP_MOUNT "/runner/cgroup.procs", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "0", 1) != 1)
            perror("runner cgroup");
        close(fd);
    }
    setenv("SBXD_TEST_CGROUP", CGROUP_MOUNT, 1);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    leave_the_pod();
    daemon_start(&g_sbxd, NULL, NULL);
    SRunner *sr = srunner_create(vm_suite());
    srunner_add_suite(sr, cgroup_suite());
    srunner_add_suite(sr, adopt_suite());
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);

    bool clean = daemon_stop_clean(&g_sbxd, 15000);
    curl_global_cleanup();
    return failed || !clean ? EXIT_FAILURE : EXIT_SUCCESS;
}
