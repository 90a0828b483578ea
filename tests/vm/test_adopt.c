/*
 * Adoption (the vm tier): sbxd started by a wrapper that stays in its cgroup, as under tini,
 * dumb-init, `docker run --init` or a shell entrypoint. The kernel refuses to enable
 * controllers in a cgroup that holds processes, so sbxd moves the wrapper into its own leaf
 * and then gets the cgroup backend exactly as when alone, while a process of any other
 * cgroup stays where it is.
 *
 * The "container" is a cgroup of the pod, adopt-box, made here; adopt-sibling next to it holds
 * a neighbour sbxd must not touch. Both are removed at the end.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define POD     "/sys/fs/cgroup"
#define BOX     "adopt-box"
#define SIBLING "adopt-sibling"

/* A small file's text (at most len - 1 bytes); "" when it cannot be read. */
static char *read_text(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return buf;
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    return buf;
}

static int write_text(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = write(fd, s, strlen(s)) == (ssize_t)strlen(s) ? 0 : -1;
    close(fd);
    return rc;
}

/* pid's cgroup v2 path as /proc/PID/cgroup states it ("" when gone). */
static const char *cgroup_of(pid_t pid, char *buf, size_t len)
{
    char p[64], text[1024];
    snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
    const char *line = strstr(read_text(p, text, sizeof(text)), "0::");
    snprintf(buf, len, "%.*s", line ? (int)strcspn(line + 3, "\n") : 0, line ? line + 3 : "");
    return buf;
}

/* Whether the cgroup (pod-relative) lists no process of its own. */
static bool cgroup_empty(const char *cg)
{
    char p[PATH_MAX], text[4096];
    snprintf(p, sizeof(p), POD "/%s/cgroup.procs", cg);
    return read_text(p, text, sizeof(text))[0] == '\0';
}

/* Kill everything in the cgroup (pod-relative) and below, then remove it and its children. */
static void cgroup_remove(const char *cg)
{
    char p[PATH_MAX], ev[512];
    snprintf(p, sizeof(p), POD "/%s/cgroup.kill", cg);
    if (write_text(p, "1") < 0)
        return; /* not there */
    snprintf(p, sizeof(p), POD "/%s/cgroup.events", cg);
    for (int i = 0; i < 200 && !strstr(read_text(p, ev, sizeof(ev)), "populated 0"); i++)
        usleep(10000);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "find " POD "/%s -depth -type d -exec rmdir {} \\; 2>/dev/null", cg);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove " POD "/%s\n", cg);
}

/* A process started in the cgroup (pod-relative) that execs argv with envp. */
static pid_t start_in(const char *cg, const char *const *argv, const char *log)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char p[PATH_MAX];
        snprintf(p, sizeof(p), POD "/%s/cgroup.procs", cg);
        if (write_text(p, "0") < 0)
            _exit(126);
        int devnull = open("/dev/null", O_RDWR);
        int err = log ? open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644) : devnull;
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(err, 2);
        if (err > 2)
            close(err);
        const char *envp[] = {"PATH=/usr/bin:/bin", NULL};
        execve(argv[0], (char *const *)argv, (char *const *)envp);
        _exit(127);
    }
    return pid;
}

/* The child of parent named sbxd (the shell may have other children), or 0. */
static pid_t sbxd_child_of(pid_t parent)
{
    DIR *d = opendir("/proc");
    pid_t found = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && !found) {
        char state, p[64], comm[32];
        pid_t pid = (pid_t)atoi(e->d_name), ppid;
        snprintf(p, sizeof(p), "/proc/%d/comm", (int)pid);
        if (pid > 0 && proc_stat(pid, &state, &ppid) && ppid == parent && state != 'Z' &&
            strcmp(read_text(p, comm, sizeof(comm)), "sbxd\n") == 0)
            found = pid;
    }
    if (d)
        closedir(d);
    return found;
}

struct wrapped {
    struct daemon d; /* port, workspace, log; d.pid is the shell */
    pid_t sbxd;
    pid_t neighbour;
};

/*
 * The neighbour in adopt-sibling, then `sh -c 'SCRIPT'` in adopt-box with sbxd's command line
 * as its arguments: SCRIPT runs it with "$@" and stays (it is not the last command, so the
 * shell does not exec into sbxd), as a shell entrypoint does.
 */
static void wrapped_start(struct wrapped *w, const char *script)
{
    memset(w, 0, sizeof(*w));
    cgroup_remove(BOX); /* left by an earlier failed run */
    cgroup_remove(SIBLING);
    /* The pod holds no process of its own (the runner is in "runner", the shared sbxd in
     * "sbxd"), so the controllers can be offered to the box. */
    ck_assert_int_eq(write_text(POD "/cgroup.subtree_control", "+memory +pids +cpu"), 0);
    ck_assert_int_eq(mkdir(POD "/" BOX, 0755), 0);
    ck_assert_int_eq(mkdir(POD "/" SIBLING, 0755), 0);

    const char *sleeper[] = {"/bin/sleep", "1000.5151", NULL};
    w->neighbour = start_in(SIBLING, sleeper, NULL);

    snprintf(w->d.ws, sizeof(w->d.ws), "/tmp/sbxd-adopt-ws-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(w->d.ws));
    snprintf(w->d.log, sizeof(w->d.log), "%s.log", w->d.ws);
    const char *argv[] = {"/bin/sh",  "-c",           script,          "wrapper",     sbxd_bin(),
                          "--listen", "127.0.0.1:0",  "--grpc-listen", "127.0.0.1:0", "--workspace",
                          w->d.ws,    "--log-format", "json",          NULL};
    w->d.pid = start_in(BOX, argv, w->d.log);
    for (int i = 0; i < 3000 && !w->d.port; i++) { /* TCG: up to 30 s */
        char *log = daemon_log_read(&w->d);
        const char *p = strstr(log, "\"event\":\"listening\"");
        const char *port = p ? strstr(p, "\"port\":") : NULL;
        if (port)
            w->d.port = atoi(port + 7);
        free(log);
        ck_assert_msg(w->d.port || waitpid(w->d.pid, NULL, WNOHANG) == 0,
                      "the wrapper ended before sbxd listened");
        if (!w->d.port)
            usleep(10000);
    }
    ck_assert_msg(w->d.port, "sbxd did not start listening");
    w->sbxd = sbxd_child_of(w->d.pid);
    ck_assert_int_gt(w->sbxd, 0);
}

/* SIGTERM to sbxd: it drains and exits 0, and so does the shell after it ("exit $?"). */
static void wrapped_stop(struct wrapped *w)
{
    ck_assert_int_eq(kill(w->sbxd, SIGTERM), 0);
    int st = -1;
    for (int i = 0; i < 3000 && waitpid(w->d.pid, &st, WNOHANG) != w->d.pid; i++)
        usleep(10000);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "wrapper ended with status 0x%x", st);
    ck_assert(!daemon_log_has_sanitizer_report(&w->d));
    kill(w->neighbour, SIGKILL);
    waitpid(w->neighbour, NULL, 0);
    cgroup_remove(BOX);
    cgroup_remove(SIBLING);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", w->d.ws);
    ck_assert_int_eq(system(cmd), 0);
    remove(w->d.log);
}

static cJSON *wrapped_isolation(const struct wrapped *w)
{
    struct http_resp r;
    ck_assert_int_eq(http_request(&w->d, "GET", "/healthz", NULL, NULL, 0, 0, &r), 0);
    ck_assert_msg(r.status == 200, "/healthz %ld: %s", r.status, r.body);
    cJSON *iso = cJSON_DetachItemFromObject(r.json, "isolation");
    http_resp_free(&r);
    return iso;
}

START_TEST(wrapper_shell_is_adopted_and_limits_are_the_cgroups)
{
    struct wrapped w;
    wrapped_start(&w, "\"$@\"; exit $?");
    char cg[PATH_MAX], text[4096];

    /* The backend is the cgroup, got by adopting the one other process: the shell. */
    cJSON *iso = wrapped_isolation(&w);
    ck_assert_msg(strcmp(jstr(iso, "cgroup"), "v2") == 0, "cgroup %s: %s", jstr(iso, "cgroup"),
                  jstr(cJSON_GetObjectItem(iso, "detected"), "cgroup2"));
    ck_assert_str_eq(jstr(iso, "cgroup_base"), POD "/" BOX);
    ck_assert_str_eq(jstr(iso, "cgroup_how"), "adopted");
    ck_assert_int_eq((int)jnum(iso, "cgroup_adopted"), 1);
    ck_assert_str_eq(jstr(iso, "memory"), "enforced");
    ck_assert_str_eq(jstr(iso, "pids"), "enforced");
    ck_assert_str_eq(jstr(iso, "tree_kill"), "cgroup");
    cJSON_Delete(iso);
    char *log = daemon_log_read(&w.d);
    char who[64];
    snprintf(who, sizeof(who), "%d(sh)", (int)w.d.pid);
    ck_assert_msg(strstr(log, "adopted the processes of sbxd's cgroup") && strstr(log, who) &&
                      strstr(log, "\"count\":1"),
                  "%s", log);
    free(log);

    /* The shell and sbxd share sbxd's leaf; the box itself is empty, its controllers on. */
    ck_assert_str_eq(cgroup_of(w.d.pid, cg, sizeof(cg)), "/" BOX "/sbxd");
    ck_assert_str_eq(cgroup_of(w.sbxd, cg, sizeof(cg)), "/" BOX "/sbxd");
    ck_assert(cgroup_empty(BOX));
    read_text(POD "/" BOX "/cgroup.subtree_control", text, sizeof(text));
    ck_assert_msg(strstr(text, "memory") && strstr(text, "pids"), "subtree_control: %s", text);
    /* Nothing outside sbxd's cgroup was touched: the neighbour and this test stay put. */
    ck_assert_str_eq(cgroup_of(w.neighbour, cg, sizeof(cg)), "/" SIBLING);
    ck_assert_str_eq(cgroup_of(getpid(), cg, sizeof(cg)), "/runner");

    /* memory_bytes is the cgroup's memory.max: the command is OOM-killed (under RLIMIT_AS,
     * dd would fail its allocation and exit 1). */
    cJSON *r = execute(&w.d, "{\"command\":\"dd if=/dev/zero of=/dev/null bs=200M count=1\","
                             "\"limits\":{\"memory_bytes\":67108864}}");
    ck_assert_str_eq(jstr(r, "status"), "oom");
    ck_assert(jbool(r, "oom_killed"));
    cJSON_Delete(r);

    /* limits.pids is accepted (refused without a cgroup) and held: 30 sleeps asked for, at
     * most 8 processes in the command's leaf. */
    r = execute(&w.d, "{\"command\":\"(for i in $(seq 30); do sleep 30.5151 & done) 2>/dev/null; "
                      "read cg < /proc/self/cgroup; read n < /sys/fs/cgroup${cg#0::}/pids.current; "
                      "echo $n\",\"limits\":{\"pids\":8}}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    int n = atoi(jstr(r, "stdout"));
    ck_assert_msg(n >= 2 && n <= 8, "pids.current %d with pids.max 8", n);
    cJSON_Delete(r);
    ck_assert_int_eq(wait_no_procs("sleep 30.5151", 5000), 0);

    /* Still nothing moved outside, after the commands. */
    ck_assert_str_eq(cgroup_of(w.neighbour, cg, sizeof(cg)), "/" SIBLING);
    wrapped_stop(&w);
}
END_TEST

/* A wrapper that keeps forking (a loop starting a short sleep every few milliseconds) while
 * sbxd starts: what it forked between sbxd's reading of cgroup.procs and its enabling of the
 * controllers lands in the box, and sbxd takes it in the next round. */
START_TEST(forking_wrapper_is_adopted_in_rounds)
{
    struct wrapped w;
    wrapped_start(&w, "(while :; do sleep 0.005; done) & \"$@\"; exit $?");
    cJSON *iso = wrapped_isolation(&w);
    ck_assert_msg(strcmp(jstr(iso, "cgroup"), "v2") == 0, "cgroup %s: %s", jstr(iso, "cgroup"),
                  jstr(cJSON_GetObjectItem(iso, "detected"), "cgroup2"));
    ck_assert_str_eq(jstr(iso, "cgroup_how"), "adopted");
    ck_assert_int_ge((int)jnum(iso, "cgroup_adopted"), 2); /* the shell and its loop, at least */
    cJSON_Delete(iso);
    char *log = daemon_log_read(&w.d);
    const char *adopted = strstr(log, "adopted the processes");
    fprintf(stderr, "forking wrapper: %.*s\n", adopted ? (int)strcspn(adopted, "}") : 4,
            adopted ? adopted : "none");
    free(log);
    ck_assert(cgroup_empty(BOX));
    char cg[PATH_MAX];
    ck_assert_str_eq(cgroup_of(w.neighbour, cg, sizeof(cg)), "/" SIBLING);
    cJSON *r = execute(&w.d, "{\"command\":\"echo hi\",\"limits\":{\"pids\":4}}");
    ck_assert_str_eq(jstr(r, "stdout"), "hi\n");
    cJSON_Delete(r);
    wrapped_stop(&w);
}
END_TEST

Suite *adopt_suite(void)
{
    Suite *s = suite_create("adopt");
    TCase *tc = tcase_create("wrapper");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, wrapper_shell_is_adopted_and_limits_are_the_cgroups);
    tcase_add_test(tc, forking_wrapper_is_adopted_in_rounds);
    suite_add_tcase(s, tc);
    return s;
}
