/* What a command can no longer do: each test tries the forbidden thing from inside one. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* Commands run as 1000:1000 when the daemon (started by this root test) is root. */
static bool as_root(void)
{
    return geteuid() == 0;
}

static cJSON *run(const char *json)
{
    return execute(&g_sbxd, json);
}

/* The value of a "Key:\tvalue" line of /proc/self/status output. */
static const char *field(const char *status, const char *key, char *out, size_t n)
{
    char k[64];
    snprintf(k, sizeof(k), "\n%s:\t", key);
    const char *p = strstr(status, k);
    ck_assert_msg(p, "no %s in %s", key, status);
    p += strlen(k);
    size_t len = strcspn(p, "\n");
    snprintf(out, n, "%.*s", (int)len, p);
    return out;
}

START_TEST(credentials_and_capabilities_are_dropped)
{
    /* gVisor's /proc/self/status has no NoNewPrivs and CapAmb lines: the probe adds them,
     * from prctl, in the same format. */
    if (under_gvisor())
        daemon_install_probe(&g_sbxd);
    cJSON *r =
        run(under_gvisor() ? "{\"command\":\"echo; cat /proc/self/status; ./sbxd-probe creds\"}"
                           : "{\"command\":\"echo; cat /proc/self/status\"}");
    const char *st = jstr(r, "stdout");
    char v[128];
    if (as_root()) {
        ck_assert_str_eq(field(st, "Uid", v, sizeof(v)), "1000\t1000\t1000\t1000");
        ck_assert_str_eq(field(st, "Gid", v, sizeof(v)), "1000\t1000\t1000\t1000");
        /* no supplementary groups: none of root's */
        field(st, "Groups", v, sizeof(v));
        ck_assert_msg(strspn(v, " ") == strlen(v), "groups: '%s'", v);
        ck_assert_str_eq(field(st, "CapBnd", v, sizeof(v)), "0000000000000000");
    }
    /* A setuid or file-capability binary can hand nothing back: every set is empty. */
    static const char *caps[] = {"CapInh", "CapPrm", "CapEff", "CapAmb"};
    for (int i = 0; i < 4; i++) {
        field(st, caps[i], v, sizeof(v));
        if (under_gvisor() && strcmp(caps[i], "CapAmb") == 0 && strcmp(v, "unsupported") == 0) {
            gvisor_skip("CapAmb", "gVisor has no ambient capability set (PR_CAP_AMBIENT is "
                                  "EINVAL): there is nothing a command could inherit");
            continue;
        }
        ck_assert_str_eq(v, "0000000000000000");
    }
    ck_assert_str_eq(field(st, "NoNewPrivs", v, sizeof(v)), "1");
    ck_assert_str_eq(field(st, "Seccomp", v, sizeof(v)), "2");
    cJSON_Delete(r);
}
END_TEST

/* The errno the probe reported for name ("OK" when the call succeeded). */
static const char *probe_result(const char *out, const char *name, char *buf, size_t n)
{
    char k[64];
    snprintf(k, sizeof(k), "%s ", name);
    const char *p = out;
    while ((p = strstr(p, k)) && p != out && p[-1] != '\n')
        p++;
    ck_assert_msg(p, "probe did not report %s:\n%s", name, out);
    p += strlen(k);
    snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
    return buf;
}

START_TEST(denied_syscalls_fail_with_eperm)
{
    daemon_install_probe(&g_sbxd);
    cJSON *r = run("{\"argv\":[\"./sbxd-probe\"]}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    const char *out = jstr(r, "stdout");
    /* Each name and the attack it stands for is in src/exec/harden.c. */
    static const char *denied[] = {
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "mount",
        "umount2",
        "pivot_root",
        "unshare",
        "setns",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "keyctl",
        "add_key",
        "request_key",
        "kexec_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "name_to_handle_at",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "syslog",
        "fsopen",
        "open_tree",
        "move_mount",
        "fsmount",
        "fspick",
        "fsconfig",
        "mount_setattr",
        "clone_newuser",
        "pidfd_getfd",
        "kcmp",
        "process_madvise",
    };
    char v[64];
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
        ck_assert_msg(strcmp(probe_result(out, denied[i], v, sizeof(v)), "EPERM") == 0,
                      "%s gave %s, not EPERM", denied[i], v);
#if defined(__x86_64__)
    ck_assert_str_eq(probe_result(out, "iopl", v, sizeof(v)), "EPERM");
    ck_assert_str_eq(probe_result(out, "modify_ldt", v, sizeof(v)), "EPERM");
    if (under_gvisor())
        gvisor_skip("i386_abi", "gVisor has no i386 syscall ABI: int 0x80 runs the x86-64 "
                                "syscall of that number, which the filter checks as such");
    else if (strcmp(probe_result(out, "i386_abi", v, sizeof(v)), "ABSENT") != 0)
        ck_assert_str_eq(v, "EPERM"); /* other ABIs (ABSENT: the kernel has no 32-bit ABI) */
#endif
    /* clone3 says ENOSYS so that libc falls back to clone, whose flags the filter checks. */
    ck_assert_str_eq(probe_result(out, "clone3", v, sizeof(v)), "ENOSYS");
    /* What is not denied still works. */
    ck_assert_str_eq(probe_result(out, "socket_inet", v, sizeof(v)), "OK");
    ck_assert_str_eq(probe_result(out, "socket_unix", v, sizeof(v)), "OK");
    cJSON_Delete(r);
}
END_TEST

START_TEST(network_false_refuses_inet_sockets)
{
    daemon_install_probe(&g_sbxd);
    cJSON *r = run("{\"argv\":[\"./sbxd-probe\"],\"network\":false}");
    const char *out = jstr(r, "stdout");
    char v[64];
    ck_assert_str_eq(probe_result(out, "socket_inet", v, sizeof(v)), "EACCES");
    ck_assert_str_eq(probe_result(out, "socket_inet6", v, sizeof(v)), "EACCES");
    ck_assert_str_eq(probe_result(out, "socket_unix", v, sizeof(v)), "OK");
    cJSON_Delete(r);
    struct http_resp resp;
    const char *b = "{\"command\":\"true\",\"network\":\"no\"}";
    http_request(&g_sbxd, "POST", "/execute", NULL, b, strlen(b), 0, &resp);
    assert_error(&resp, 400, "INVALID_ARGUMENT");
    http_resp_free(&resp);
}
END_TEST

START_TEST(oom_score_and_stack)
{
    /* Under memory pressure a command dies first (where the kernel's OOM killer weighs the
     * score: gVisor has none of its own, and there the score is not written at all) ... */
    cJSON *r = run("{\"command\":\"cat /proc/self/oom_score_adj; ulimit -s; ulimit -Hs; "
                   "cut -d' ' -f19 /proc/self/stat\"}");
    /* ... and yields the CPU to it (nice 10, the 19th field of stat). Under gVisor the
     * command has the daemon's score, which the daemon leaves as it found it. */
    char want[64];
    snprintf(want, sizeof(want), "%d\n8192\n8192\n10\n",
             under_gvisor() ? daemon_oom_score_adj(&g_sbxd) : 1000);
    ck_assert_str_eq(jstr(r, "stdout"), want);
    cJSON_Delete(r);
    /* ... and the daemon last, when the host lets it lower its own score (CAP_SYS_RESOURCE). */
    if (daemon_may_lower_oom_score(&g_sbxd) && !under_gvisor())
        ck_assert_int_eq(daemon_oom_score_adj(&g_sbxd), -999);
}
END_TEST

START_TEST(workspace_files_belong_to_the_command_user)
{
    /* (gVisor refuses the statx flags of coreutils' stat, AT_NO_AUTOMOUNT: find says the same.) */
    cJSON *r = run(under_gvisor() ? "{\"command\":\"mkdir -p own/d && echo x > own/f && find own/f "
                                    "-printf '%U:%G %m\\\\n'\"}"
                                  : "{\"command\":\"mkdir -p own/d && echo x > own/f && stat -c "
                                    "'%u:%g %a' own/f\"}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    if (as_root())
        ck_assert_str_eq(jstr(r, "stdout"), "1000:1000 644\n");
    cJSON_Delete(r);
    /* A later command can change what an earlier one made. */
    r = run("{\"command\":\"echo y >> own/f && rm -r own && echo gone\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "gone\n");
    cJSON_Delete(r);
    struct stat st;
    ck_assert_int_eq(stat(g_sbxd.ws, &st), 0);
    if (as_root())
        ck_assert_int_eq((int)st.st_uid, 1000);
}
END_TEST

START_TEST(healthz_reports_what_is_in_force)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    cJSON *iso = cJSON_GetObjectItem(r.json, "isolation");
    ck_assert_str_eq(jstr(iso, "seccomp"), "deny-list");
    ck_assert(jbool(iso, "no_new_privs"));
    /* gVisor's kernel has no OOM killer of its own: no score is written, and null says so. */
    cJSON *oom = cJSON_GetObjectItem(iso, "oom_score_adj");
    if (under_gvisor())
        ck_assert(cJSON_IsNull(oom));
    else
        ck_assert_int_eq((int)jnum(iso, "oom_score_adj"), 1000);
    if (as_root()) {
        ck_assert_str_eq(jstr(iso, "user"), "1000:1000");
        ck_assert_str_eq(jstr(iso, "groups"), "none");
        ck_assert_str_eq(jstr(iso, "capabilities"), "none");
    }
    /* What /healthz says is what the kernel has. */
    ck_assert_int_eq((int)jnum(iso, "daemon_oom_score_adj"), daemon_oom_score_adj(&g_sbxd));
    http_resp_free(&r);
}
END_TEST

START_TEST(user_flag_sets_the_command_user)
{
    if (!as_root())
        return; /* only root can switch users; covered by the checks above otherwise */
    struct daemon d;
    const char *args[] = {"--user", "4321:8765", NULL};
    daemon_start(&d, args, NULL);
    cJSON *r = execute(&d, under_gvisor() ? "{\"command\":\"id -u; id -g; id -G; touch x; find x "
                                            "-printf '%U:%G\\\\n'\"}"
                                          : "{\"command\":\"id -u; id -g; id -G; touch x; stat -c "
                                            "%u:%g x\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "4321\n8765\n8765\n4321:8765\n");
    cJSON_Delete(r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* What /healthz says about cgroups, so the same tests hold with and without them. */
static bool have_cgroups(void)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    bool cg = strcmp(jstr(cJSON_GetObjectItem(r.json, "isolation"), "cgroup"), "v2") == 0;
    http_resp_free(&r);
    return cg;
}

START_TEST(limits_without_cgroups_are_refused_or_replaced)
{
    if (have_cgroups())
        return; /* the vm tier tests the cgroup side */
    /* pids and cpu quota cannot be enforced without a cgroup: a clear 400, never a silent
     * no-op. */
    static const char *bodies[] = {"{\"command\":\"true\",\"limits\":{\"pids\":10}}",
                                   "{\"command\":\"true\",\"limits\":{\"cpu_quota\":0.5}}"};
    for (int i = 0; i < 2; i++) {
        struct http_resp r;
        http_request(&g_sbxd, "POST", "/execute", NULL, bodies[i], strlen(bodies[i]), 0, &r);
        assert_error(&r, 400, "INVALID_ARGUMENT");
        ck_assert_ptr_nonnull(strstr(jstr(r.json, "message"), "cgroup"));
        http_resp_free(&r);
    }
    /* Memory falls back to an address-space limit. */
    cJSON *r = run("{\"command\":\"ulimit -v\",\"limits\":{\"memory_bytes\":104857600}}");
    ck_assert_str_eq(jstr(r, "stdout"), "102400\n");
    cJSON_Delete(r);
}
END_TEST

START_TEST(daemon_answers_while_a_command_hogs_cpu_and_memory)
{
    /* One busy loop per CPU, and a shell that grows a string until its memory limit stops
     * it, for two seconds. */
    static struct health_watch hw;
    health_watch_start(&hw, &g_sbxd, 20);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char body[512];
    snprintf(body, sizeof(body),
             "{\"command\":\"for i in $(seq %ld); do (while :; do :; done) & done; "
             "x=y; while :; do x=$x$x; done\",\"limits\":{\"memory_bytes\":268435456},"
             "\"timeout_ms\":2000}",
             ncpu);
    cJSON *r = run(body);
    health_watch_stop(&hw);
    cJSON_Delete(r);
    /* Commands run at nice 10, sbxd at -5 where allowed: it keeps answering. The 95th
     * percentile is the claim; the worst case is bounded more loosely, because a 2-vCPU
     * guest shows rare scheduling stalls no priority removes. */
    ck_assert_int_eq(hw.failed, 0);
    ck_assert_int_ge(hw.n, 10); /* enough samples for a percentile */
    double p95 = hw.lat_ms[hw.n * 95 / 100], worst = hw.lat_ms[hw.n - 1];
    ck_assert_msg(p95 < 50 * SLOW && worst < 250 * SLOW, "/healthz p95 %.1f ms, worst %.1f ms", p95,
                  worst);
}
END_TEST

/* Run sbxd to completion with args; its exit status. */
static int sbxd_exit_status(const char *const *args)
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        const char *argv[18] = {
            sbxd_bin(),    "--listen",    "127.0.0.1:0",         "--grpc-listen",
            "127.0.0.1:0", "--workspace", "/tmp/sbxd-it-require"};
        int n = 7;
        for (int i = 0; args[i] && n < 17; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(sbxd_bin(), (char *const *)argv);
        _exit(127);
    }
    /* A daemon that does start is stopped again. */
    for (int i = 0; i < 100; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(10000);
    }
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    return 0;
}

START_TEST(required_isolation_is_checked_at_start)
{
    const char *bogus[] = {"--require-isolation", "seccomp,magic", NULL};
    ck_assert_int_eq(sbxd_exit_status(bogus), 2);
    /* (ipc: an IPC namespace per command, which root has here and under gVisor) */
    const char *seccomp[] = {"--require-isolation", "seccomp,ipc", NULL};
    ck_assert_int_eq(sbxd_exit_status(seccomp), 0); /* starts (and is stopped) */
    if (!have_cgroups()) {
        const char *cg[] = {"--require-isolation", "cgroup", NULL};
        ck_assert_int_eq(sbxd_exit_status(cg), 1);
        const char *force[] = {"--isolation", "cgroup", NULL};
        ck_assert_int_eq(sbxd_exit_status(force), 1);
    }
    const char *pgid[] = {"--isolation", "pgid", NULL};
    ck_assert_int_eq(sbxd_exit_status(pgid), 0);
    /* The process group is no whole-tree kill. */
    const char *pgid_tree[] = {"--isolation", "pgid", "--require-isolation", "tree_kill", NULL};
    ck_assert_int_eq(sbxd_exit_status(pgid_tree), 1);
    const char *pidns_tree[] = {"--isolation", "pidns", "--require-isolation", "tree_kill,pidns",
                                NULL};
    ck_assert_int_eq(sbxd_exit_status(pidns_tree), 0);
    const char *pidns_uid[] = {"--isolation", "pidns", "--require-isolation", "uid", NULL};
    ck_assert_int_eq(sbxd_exit_status(pidns_uid), 1);
    const char *bad_range[] = {"--uid-range", "0:10", NULL};
    ck_assert_int_eq(sbxd_exit_status(bad_range), 2);
    rmdir("/tmp/sbxd-it-require");
}
END_TEST

/* The escape a process group cannot stop: children that leave it with setsid, one of them
 * through a double fork. */
static const char escape_cmd[] = "{\"command\":\"sleep 1000.31 & setsid sleep 1000.31 & "
                                 "(setsid sh -c 'sleep 1000.31 &'); wait\",\"timeout_ms\":300}";

static const char *tree_kill_of(struct daemon *d)
{
    static char tk[16];
    struct http_resp r;
    http_request(d, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    snprintf(tk, sizeof(tk), "%s", jstr(cJSON_GetObjectItem(r.json, "isolation"), "tree_kill"));
    http_resp_free(&r);
    return tk;
}

START_TEST(setsid_escapees_die_with_the_tree)
{
    /* Wherever sbxd has more than the process group (here: a PID namespace or a cgroup). */
    if (strcmp(tree_kill_of(&g_sbxd), "pgid") == 0)
        return;
    cJSON *r = run(escape_cmd);
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&g_sbxd, "sleep 1000.31", 1000), 0);
}
END_TEST

START_TEST(pidns_mode_contains_the_tree_and_its_proc)
{
    struct daemon d;
    const char *args[] = {"--isolation", "pidns", NULL};
    daemon_start(&d, args, NULL);
    ck_assert_str_eq(tree_kill_of(&d), "pidns");
    cJSON *r = execute(&d, escape_cmd);
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "sleep 1000.31", 1000), 0);
    /* The command is pid 2 under its init, and /proc is the namespace's own: $$ and /proc
     * agree, and no process of the host (or of another command) can be seen. */
    struct http_resp h;
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &h);
    bool own_proc = strcmp(jstr(cJSON_GetObjectItem(h.json, "isolation"), "proc"), "own") == 0;
    http_resp_free(&h);
    /* gVisor without mount propagation keeps the sandbox's /proc (reported as "shared"):
     * there the tree is contained, but /proc is not the namespace's. */
    ck_assert(own_proc || under_gvisor());
    if (!own_proc)
        goto stop;
    r = execute(&d, "{\"command\":\"echo $$; cut -d' ' -f1 /proc/$$/stat; "
                    "set -- /proc/[0-9]*; echo $#\"}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    const char *out = jstr(r, "stdout");
    int pid = -1, statpid = -2, visible = -1;
    ck_assert_msg(sscanf(out, "%d\n%d\n%d", &pid, &statpid, &visible) == 3, "stdout %s", out);
    ck_assert_msg(pid == statpid && pid >= 2 && pid < 10000, "stdout %s", out);
    /* the init and the shell, and what the shell is running */
    ck_assert_msg(visible >= 2 && visible <= 6, "%d processes visible", visible);
    cJSON_Delete(r);
    /* The namespace's init cannot be killed from inside. */
    r = execute(&d, "{\"command\":\"kill -9 1 && echo killed || echo refused\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "refused\n");
    cJSON_Delete(r);
    /* Leftovers still die when the command ends on its own. */
    r = execute(&d, "{\"command\":\"setsid sleep 1000.32 & echo started\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "started\n");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "sleep 1000.32", 1000), 0);
stop:;
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(pgid_mode_kills_the_group_and_says_it_is_degraded)
{
    struct daemon d;
    const char *args[] = {"--isolation", "pgid", NULL};
    daemon_start(&d, args, NULL);
    ck_assert_str_eq(tree_kill_of(&d), "pgid");
    cJSON *r = execute(&d, "{\"command\":\"sleep 1000.33 & sleep 1000.33; wait\","
                           "\"timeout_ms\":300}");
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "sleep 1000.33", 1000), 0);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(healthz_reports_what_was_detected)
{
    struct http_resp r;
    http_request(&g_sbxd, "GET", "/healthz", NULL, NULL, 0, 0, &r);
    cJSON *iso = cJSON_GetObjectItem(r.json, "isolation");
    cJSON *det = cJSON_GetObjectItem(iso, "detected");
    ck_assert_ptr_nonnull(det);
    /* Each probe answers in its own terms, true or false, and matches the kernel's say. */
    ck_assert(cJSON_IsBool(cJSON_GetObjectItem(det, "clone3")));
    ck_assert(cJSON_IsBool(cJSON_GetObjectItem(det, "clone_into_cgroup")));
    ck_assert(cJSON_IsBool(cJSON_GetObjectItem(det, "pidfd")));
    if (!under_gvisor()) {
        errno = 0;
        long rc = syscall(435 /* clone3 */, NULL, 0);
        ck_assert_int_eq(jbool(det, "clone3"), rc < 0 && errno != ENOSYS);
        int fd = (int)syscall(434 /* pidfd_open */, getpid(), 0);
        ck_assert_int_eq(jbool(det, "pidfd"), fd >= 0);
        if (fd >= 0)
            close(fd);
    }
    /* A PID namespace is possible here (directly or in a user namespace), so auto takes it
     * where no cgroup is delegated, and says which. */
    const char *pidns = jstr(det, "pidns");
    ck_assert_msg(strcmp(pidns, "direct") == 0 || strcmp(pidns, "via user namespace") == 0,
                  "pidns: %s", pidns);
    if (strcmp(jstr(iso, "cgroup"), "v2") != 0)
        ck_assert_str_eq(jstr(iso, "tree_kill"), "pidns");
    if (as_root())
        ck_assert_str_eq(jstr(det, "uid_range"), "usable");
    /* An IPC namespace per command: root makes it directly. */
    if (as_root()) {
        ck_assert_str_eq(jstr(det, "ipcns"), "direct");
        ck_assert_str_eq(jstr(iso, "ipc"), "own");
    }
    http_resp_free(&r);
}
END_TEST

/* What `find -printf '%U:%G %m'` prints for path (coreutils stat trips over gVisor's statx). */
static void owner_mode(struct daemon *d, const char *path, char *out, size_t n)
{
    char body[256];
    snprintf(body, sizeof(body), "{\"command\":\"find %s -maxdepth 0 -printf '%%U:%%G %%m'\"}",
             path);
    cJSON *r = execute(d, body);
    snprintf(out, n, "%s", jstr(r, "stdout"));
    cJSON_Delete(r);
}

struct bg_exec {
    pthread_t th;
    const struct daemon *d;
    const char *body;
    cJSON *r;
};

static void *bg_exec_main(void *arg)
{
    struct bg_exec *b = arg;
    b->r = execute(b->d, b->body);
    return NULL;
}

START_TEST(uid_mode_contains_the_tree_and_shares_files)
{
    if (!as_root())
        return; /* uid isolation needs root to switch uids; start-up refuses it otherwise */
    struct daemon d;
    /* Two uids for commands; the third is the kill helper's. */
    const char *args[] = {"--isolation", "uid", "--uid-range", "200000:3", NULL};
    daemon_start(&d, args, NULL);
    ck_assert_str_eq(tree_kill_of(&d), "uid");
    struct http_resp h;
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &h);
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(h.json, "isolation"), "user"), "200000-200001:1000");
    http_resp_free(&h);
    /* setsid and double-fork escapees die with the command: kill(-1) as its uid. */
    cJSON *r = execute(&d, escape_cmd);
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "sleep 1000.31", 1000), 0);
    /* ... and when the command ends on its own. */
    r = execute(&d, "{\"command\":\"setsid sleep 1000.34 & echo started\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "started\n");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "sleep 1000.34", 1000), 0);

    /* Each command runs as a uid of the range, in the command group. What one creates, even
     * with a strict umask and mode, the next (another uid) can change: it is handed back to
     * the command user with group rights like the owner's. */
    r = execute(&d, "{\"command\":\"umask 077; id -u; id -g; mkdir -p shared/d; "
                    "echo one > shared/d/f; echo x > shared/private; chmod 600 shared/private\"}");
    ck_assert_str_eq(jstr(r, "status"), "exited");
    char first[64];
    snprintf(first, sizeof(first), "%s", jstr(r, "stdout"));
    cJSON_Delete(r);
    r = execute(&d, "{\"command\":\"id -u; echo two >> shared/d/f && cat shared/d/f && "
                    "echo y > shared/private && touch shared/d/new && echo ok\"}");
    char want[64];
    unsigned u1 = (unsigned)atoi(first);
    ck_assert_msg(u1 == 200000 || u1 == 200001, "uid %u", u1);
    snprintf(want, sizeof(want), "%u\none\ntwo\nok\n", u1 == 200000 ? 200001 : 200000);
    ck_assert_str_eq(jstr(r, "stdout"), want);
    ck_assert_str_eq(strchr(first, '\n') + 1, "1000\n");
    cJSON_Delete(r);
    char om[64];
    owner_mode(&d, "shared/private", om, sizeof(om));
    ck_assert_str_eq(om, "1000:1000 660");
    owner_mode(&d, "shared/d", om, sizeof(om));
    ck_assert_str_eq(om, "1000:1000 770");
    owner_mode(&d, ".", om, sizeof(om));
    ck_assert_msg(strncmp(om, "1000:1000 ", 10) == 0 && strlen(om) == 13 && om[11] == '7',
                  "workspace root %s: not the group's to write", om);

    /* Files the file API writes are 0664 in directories of 0775 here (the reference sandboxd
     * makes 0644 and 0755): the next command runs as another uid of the group, and changes
     * such a file, or adds one beside it, only through the group's rights. */
    http_request(&d, "PUT", "/v1/files/put/d/f.txt", "application/octet-stream", "one\n", 4, 0, &h);
    ck_assert_int_eq(h.status, 204);
    http_resp_free(&h);
    owner_mode(&d, "put/d/f.txt", om, sizeof(om));
    ck_assert_str_eq(om, "1000:1000 664");
    owner_mode(&d, "put/d", om, sizeof(om));
    ck_assert_str_eq(om, "1000:1000 775");
    r = execute(&d, "{\"command\":\"echo two >> put/d/f.txt && touch put/d/new && "
                    "cat put/d/f.txt\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "one\ntwo\n");
    cJSON_Delete(r);

    /* A file the command links to from outside its reach is never handed over. */
    if (!under_gvisor()) {
        char outside[] = "/tmp/sbxd-it-uid-XXXXXX";
        int fd = mkstemp(outside);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fchown(fd, 200000, 200000), 0);
        close(fd);
        char link[PATH_MAX];
        snprintf(link, sizeof(link), "%s/link-out", d.ws);
        ck_assert_int_eq(symlink(outside, link), 0);
        cJSON_Delete(execute(&d, "{\"command\":\"true\"}"));
        cJSON_Delete(execute(&d, "{\"command\":\"true\"}"));
        struct stat st;
        ck_assert_int_eq(stat(outside, &st), 0);
        ck_assert_int_eq((int)st.st_uid, 200000);
        unlink(outside);
        unlink(link);
    }

    /* Two uids: a third command at once waits for none, it is refused with 429. */
    struct bg_exec b1 = {.d = &d, .body = "{\"command\":\"sleep 1.5\"}"};
    struct bg_exec b2 = {.d = &d, .body = "{\"command\":\"sleep 1.5\"}"};
    pthread_create(&b1.th, NULL, bg_exec_main, &b1);
    pthread_create(&b2.th, NULL, bg_exec_main, &b2);
    usleep(500000);
    struct http_resp busy;
    const char *body = "{\"command\":\"true\"}";
    http_request(&d, "POST", "/execute", "application/json", body, strlen(body), 0, &busy);
    assert_error(&busy, 429, "RESOURCE_EXHAUSTED");
    ck_assert_ptr_nonnull(strstr(jstr(busy.json, "message"), "--uid-range"));
    http_resp_free(&busy);
    pthread_join(b1.th, NULL);
    pthread_join(b2.th, NULL);
    ck_assert_str_eq(jstr(b1.r, "status"), "exited");
    ck_assert_str_eq(jstr(b2.r, "status"), "exited");
    cJSON_Delete(b1.r);
    cJSON_Delete(b2.r);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

START_TEST(uid_range_leftover_is_killed_at_start)
{
    if (!as_root())
        return;
    /* A process running as a uid of the range is a command of a killed sbxd (the range is
     * sbxd's alone): a start that uses the range kills it first; one that does not
     * (here --isolation pgid) leaves it alone. */
    pid_t holder = fork();
    if (holder == 0) {
        if (setresuid(200020, 200020, 200020) < 0)
            _exit(1);
        pause();
        _exit(0);
    }
    usleep(50000);
    const char *other[] = {"--isolation", "pgid", "--uid-range", "200019:4", NULL};
    ck_assert_int_eq(sbxd_exit_status(other), 0);
    ck_assert_int_eq(waitpid(holder, NULL, WNOHANG), 0);
    const char *args[] = {"--isolation", "uid", "--uid-range", "200019:4", NULL};
    ck_assert_int_eq(sbxd_exit_status(args), 0);
    int st;
    ck_assert_int_eq(waitpid(holder, &st, 0), holder);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    rmdir("/tmp/sbxd-it-require");
}
END_TEST

/* Whether pid exists and is not a zombie. */
static bool alive(pid_t pid)
{
    char state;
    pid_t ppid;
    return proc_stat(pid, &state, &ppid) && state != 'Z';
}

/* Live (not zombie) children of pid: their pids into out (up to n); how many. */
static int children_of(pid_t parent, pid_t *out, int n)
{
    DIR *d = opendir("/proc");
    int k = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char state;
        pid_t ppid;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (!proc_stat(pid, &state, &ppid) || state == 'Z' || ppid != parent)
            continue;
        if (k < n)
            out[k] = pid;
        k++;
    }
    if (d)
        closedir(d);
    return k;
}

START_TEST(pidns_slots_are_ready_replaced_and_gone_at_stop)
{
    if (under_gvisor())
        return; /* no slots there: each command gets a one-command init (see spawn.c) */
    struct daemon d;
    const char *args[] = {"--isolation", "pidns", NULL};
    daemon_start(&d, args, NULL);
    /* Idle: two slots' inits wait, each pid 1 of a namespace of its own. */
    pid_t kids[8];
    int n = 0;
    for (int i = 0; i < 100 && (n = children_of(d.pid, kids, 8)) < 2; i++)
        usleep(10000);
    ck_assert_int_eq(n, 2);
    char p[64], line[256], nspid[256] = "";
    snprintf(p, sizeof(p), "/proc/%d/status", (int)kids[0]);
    FILE *f = fopen(p, "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "NSpid:", 6) == 0)
            snprintf(nspid, sizeof(nspid), "%s", line);
    if (f)
        fclose(f);
    char want[64];
    snprintf(want, sizeof(want), "NSpid:\t%d\t1\n", (int)kids[0]);
    ck_assert_str_eq(nspid, want);
    /* Killed while they wait: the pool makes new ones, and commands run in those. */
    pid_t dead[2] = {kids[0], kids[1]};
    kill(dead[0], SIGKILL);
    kill(dead[1], SIGKILL);
    bool replaced = false;
    for (int i = 0; i < 200 && !replaced; i++) {
        n = children_of(d.pid, kids, 8);
        replaced = n >= 2;
        for (int k = 0; k < n && k < 8; k++)
            replaced &= kids[k] != dead[0] && kids[k] != dead[1];
        if (!replaced)
            usleep(10000);
    }
    ck_assert(replaced);
    for (int i = 0; i < 10; i++) {
        cJSON *r = execute(&d, "{\"command\":\"echo $$; cut -d' ' -f1 /proc/$$/stat\"}");
        ck_assert_str_eq(jstr(r, "status"), "exited");
        int a = -1, b = -2;
        ck_assert(sscanf(jstr(r, "stdout"), "%d\n%d", &a, &b) == 2 && a == b && a >= 2);
        cJSON_Delete(r);
    }
    /* Sequential commands reuse the slots: the spare ones, plus at most the one in use and
     * one still being emptied, never one per command. */
    n = children_of(d.pid, kids, 8);
    ck_assert_msg(n >= 2 && n <= 4, "%d slots", n);
    /* At stop they go with the daemon. */
    ck_assert(daemon_stop_clean(&d, 10000));
    bool any = true;
    for (int i = 0; i < 100 && any; i++) {
        any = false;
        for (int k = 0; k < n; k++)
            any |= alive(kids[k]);
        if (any)
            usleep(10000);
    }
    ck_assert(!any);
}
END_TEST

START_TEST(nonroot_daemon_gets_its_pid_namespaces_in_a_user_namespace)
{
    if (!as_root() || under_gvisor())
        return; /* the test switches the daemon to another user from the host's root */
    struct daemon d;
    const char *args[] = {"--isolation", "pidns", NULL};
    daemon_start_as(&d, 1000, 1000, args, NULL);
    struct http_resp h;
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &h);
    cJSON *iso = cJSON_GetObjectItem(h.json, "isolation");
    ck_assert_str_eq(jstr(iso, "tree_kill"), "pidns");
    ck_assert(jbool(iso, "userns"));
    ck_assert_str_eq(jstr(iso, "user"), "1000:1000");
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(iso, "detected"), "pidns"), "via user namespace");
    /* Its commands' IPC namespaces come in that user namespace too. */
    ck_assert_str_eq(jstr(iso, "ipc"), "own");
    ck_assert_str_eq(jstr(cJSON_GetObjectItem(iso, "detected"), "ipcns"), "via user namespace");
    http_resp_free(&h);
    /* The namespace maps sbxd's own ids only: commands are 1000 inside as outside. */
    cJSON *r = execute(&d, "{\"command\":\"id -u; id -g; echo $$; cut -d' ' -f1 /proc/$$/stat\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "1000\n1000\n2\n2\n");
    cJSON_Delete(r);
    r = execute(&d, escape_cmd);
    ck_assert_str_eq(jstr(r, "status"), "timeout");
    cJSON_Delete(r);
    ck_assert_int_eq(daemon_wait_no_procs(&d, "sleep 1000.31", 1000), 0);
    /* No user namespace for commands themselves. */
    r = execute(&d, "{\"command\":\"unshare -U true && echo made || echo refused\"}");
    ck_assert_str_eq(jstr(r, "stdout"), "refused\n");
    cJSON_Delete(r);
    ck_assert(daemon_stop_clean(&d, 10000));
    /* Without a user namespace (the process group), a non-root sbxd cannot make an IPC
     * namespace: its commands share its own, and /healthz says so. */
    const char *pgid[] = {"--isolation", "pgid", NULL};
    daemon_start_as(&d, 1000, 1000, pgid, NULL);
    http_request(&d, "GET", "/healthz", NULL, NULL, 0, 0, &h);
    iso = cJSON_GetObjectItem(h.json, "isolation");
    ck_assert_str_eq(jstr(iso, "ipc"), "shared");
    const char *why = jstr(cJSON_GetObjectItem(iso, "detected"), "ipcns");
    ck_assert_msg(strstr(why, "cannot create an IPC namespace"), "ipcns: %s", why);
    http_resp_free(&h);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

Suite *isolation_suite(void)
{
    Suite *s = suite_create("isolation");
    TCase *tc = tcase_create("hardening");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, credentials_and_capabilities_are_dropped);
    tcase_add_test(tc, denied_syscalls_fail_with_eperm);
    tcase_add_test(tc, network_false_refuses_inet_sockets);
    tcase_add_test(tc, oom_score_and_stack);
    tcase_add_test(tc, workspace_files_belong_to_the_command_user);
    tcase_add_test(tc, healthz_reports_what_is_in_force);
    tcase_add_test(tc, user_flag_sets_the_command_user);
    tcase_add_test(tc, limits_without_cgroups_are_refused_or_replaced);
    tcase_add_test(tc, required_isolation_is_checked_at_start);
    tcase_add_test(tc, daemon_answers_while_a_command_hogs_cpu_and_memory);
    tcase_add_test(tc, setsid_escapees_die_with_the_tree);
    tcase_add_test(tc, pidns_mode_contains_the_tree_and_its_proc);
    tcase_add_test(tc, pgid_mode_kills_the_group_and_says_it_is_degraded);
    tcase_add_test(tc, healthz_reports_what_was_detected);
    tcase_add_test(tc, uid_mode_contains_the_tree_and_shares_files);
    tcase_add_test(tc, uid_range_leftover_is_killed_at_start);
    tcase_add_test(tc, pidns_slots_are_ready_replaced_and_gone_at_stop);
    tcase_add_test(tc, nonroot_daemon_gets_its_pid_namespaces_in_a_user_namespace);
    suite_add_tcase(s, tc);
    return s;
}
