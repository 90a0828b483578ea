#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/cgroup.h"
#include "sbxd/log.h"

#define CG_MOUNT       "/sys/fs/cgroup"
#define CG_DAEMON_LEAF "sbxd"
#define CG_JOB_PREFIX  "job-"
/* Passes of adoption (move what cgroup.procs lists, try the controllers again) before giving
 * up on a cgroup whose processes keep forking new ones into it. */
#define CG_ADOPT_ROUNDS 10

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/* Write a short value to a cgroup file; 0 or -1 with errno. */
static int cg_write(int dirfd, const char *file, const char *val)
{
    int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, val, strlen(val));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(val) ? 0 : -1;
}

/* Read a cgroup file into buf (NUL-terminated); length or -1. */
static ssize_t cg_read(int dirfd, const char *file, char *buf, size_t len)
{
    int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

/* The value of "key N" in a flat-keyed file such as memory.events or cpu.stat. */
static bool cg_read_key(int dirfd, const char *file, const char *key, uint64_t *out)
{
    char buf[4096];
    if (cg_read(dirfd, file, buf, sizeof(buf)) < 0)
        return false;
    size_t kl = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            *out = strtoull(line + kl + 1, NULL, 10);
            return true;
        }
    return false;
}

static bool has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += wl)
        if ((p == list || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == '\n' || !p[wl]))
            return true;
    return false;
}

static void unavailable(struct cg_root *r, const char *why, int e)
{
    r->available = false;
    if (e)
        snprintf(r->why, sizeof(r->why), "%s: %s", why, strerror(e));
    else
        snprintf(r->why, sizeof(r->why), "%s", why);
}

/* Remove leaves of a previous run that died without cleaning up. */
static void remove_stale(struct cg_root *r)
{
    int fd = openat(r->basefd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, CG_JOB_PREFIX, strlen(CG_JOB_PREFIX)) == 0) {
            struct cg_leaf leaf = {
                .dirfd = openat(r->basefd, e->d_name, O_PATH | O_DIRECTORY | O_CLOEXEC),
                .procs_fd = -1};
            snprintf(leaf.name, sizeof(leaf.name), "%.*s", (int)sizeof(leaf.name) - 1, e->d_name);
            if (leaf.dirfd >= 0) {
                LOG_EVENT("info", "cgroup", LOG_S("action", "remove stale leaf"),
                          LOG_S("leaf", e->d_name));
                cg_leaf_destroy(r, &leaf);
            }
        }
    closedir(d);
}

/* Run fn in a child placed in a fresh leaf with the given limits; returns the wait status
 * (or -1) and the leaf's OOM kill count. Start-up only: the daemon is single-threaded. */
static int selftest(struct cg_root *r, const char *name, const struct cg_limits *lim,
                    int (*fn)(void), uint64_t *oom_kills)
{
    struct cg_leaf leaf;
    struct sbxd_err err;
    if (cg_leaf_create(r, name, lim, &leaf, &err) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (write(leaf.procs_fd, "0", 1) != 1)
            _exit(3);
        _exit(fn());
    }
    int st = -1;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
    struct cg_stats s;
    cg_leaf_stats(&leaf, &s);
    *oom_kills = s.oom_kills;
    cg_leaf_destroy(r, &leaf);
    return st;
}

/* In a leaf with pids.max 1: the fork must fail. */
static int try_fork(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    if (p > 0) {
        waitpid(p, NULL, 0);
        return 1; /* the limit did not bite */
    }
    return 0;
}

/* In a leaf with memory.max 16 MiB: touching 64 MiB must get us killed. */
static int try_allocate(void)
{
    size_t len = 64u << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 2;
    for (size_t i = 0; i < len; i += 4096)
        p[i] = 1;
    return 1; /* still alive: the limit did not bite */
}

/* The cgroup v2 path of a process ("self" or a pid) as /proc/PID/cgroup states it, relative
 * to our cgroup namespace's root ("/" for the root). 0; -1 (errno) when it cannot be read; -2
 * when it has no cgroup v2 entry. */
static int proc_cgroup(const char *pid, char *out, size_t len)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%s/cgroup", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (n <= 0) {
        errno = n < 0 ? e : 0;
        return -1;
    }
    buf[n] = '\0';
    char *line = strstr(buf, "0::");
    if (!line || (line != buf && line[-1] != '\n'))
        return -2;
    line += 3;
    line[strcspn(line, "\n")] = '\0';
    snprintf(out, len, "%s", line);
    return 0;
}

/* Enable memory, pids and cpu for the leaves, those the cgroup offers. -1 with errno EBUSY
 * when the kernel refused because the cgroup itself holds processes (cgroup v2's "no
 * internal processes" rule; the root cgroup is exempt), else 0 with the flags set. */
static int enable_controllers(struct cg_root *r, const char *ctrl)
{
    static const char *const names[] = {"memory", "pids", "cpu"};
    bool *flags[] = {&r->memory, &r->pids, &r->cpu};
    bool busy = false;
    for (int i = 0; i < 3; i++) {
        char en[16];
        snprintf(en, sizeof(en), "+%s", names[i]);
        *flags[i] = false;
        if (!has_word(ctrl, names[i]))
            continue;
        *flags[i] = cg_write(r->basefd, "cgroup.subtree_control", en) == 0;
        if (!*flags[i] && errno == EBUSY)
            busy = true;
    }
    errno = busy ? EBUSY : 0;
    return busy ? -1 : 0;
}

struct adoption {
    unsigned moved;
    unsigned unseen; /* listed as pid 0: outside our PID namespace, cannot be named */
    char pids[512];  /* "PID(comm) ..." for the log */
};

/* Move pid, if it is still a process of sbxd's own cgroup (rel), into the daemon's leaf
 * (leaffd). 0 (moved, or not ours to move, or gone); -1 with r->why set. */
static int adopt_one(struct cg_root *r, int leaffd, const char *rel, pid_t pid, struct adoption *a)
{
    char spid[24], comm[32] = "?", where[PATH_MAX];
    snprintf(spid, sizeof(spid), "%d", (int)pid);
    /* A pidfd before the check: if the process is still alive after the move, the number
     * written was its own, not one reused by a process elsewhere (a live process keeps its
     * pid). Without pidfd (before 5.3) the check alone narrows that window to microseconds. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0 && errno == ESRCH)
        return 0; /* it has exited */
    /* Never a process of another cgroup: one moved away meanwhile, or a reused pid, is not
     * ours. Taking it would put it under sbxd's limits and within reach of sbxd's commands'
     * cgroup, beyond the subtree that was delegated to sbxd. */
    int rc = proc_cgroup(spid, where, sizeof(where));
    if (rc < 0 || strcmp(where, rel) != 0) {
        if (pidfd >= 0)
            close(pidfd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, comm, sizeof(comm) - 1);
        comm[n > 0 ? n : 0] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        close(fd);
    }
    rc = cg_write(leaffd, "cgroup.procs", spid);
    int e = errno;
    bool alive = pidfd < 0 || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
    if (pidfd >= 0)
        close(pidfd);
    if (rc < 0) {
        if (e == ESRCH)
            return 0; /* it exited between the list and the move */
        snprintf(r->why, sizeof(r->why),
                 "cannot move process %d (%s) of sbxd's cgroup into its leaf: %s", (int)pid, comm,
                 strerror(e));
        return -1;
    }
    if (!alive)
        LOG_EVENT("warn", "cgroup",
                  LOG_S("action", "adopted process ended while moved (pid reused?)"),
                  LOG_I("pid", pid));
    a->moved++;
    size_t used = strlen(a->pids);
    if (used + 48 < sizeof(a->pids))
        snprintf(a->pids + used, sizeof(a->pids) - used, "%s%d(%s)", used ? " " : "", (int)pid,
                 comm);
    else if (used + 4 < sizeof(a->pids) && strcmp(a->pids + used - 3, "...") != 0)
        snprintf(a->pids + used, sizeof(a->pids) - used, " ...");
    return 0;
}

/* One pass over cgroup.procs of sbxd's cgroup: every process listed moves into the daemon's
 * leaf. 0; -1 with r->why set. */
static int adopt_round(struct cg_root *r, int leaffd, const char *rel, struct adoption *a)
{
    char buf[16384];
    ssize_t n = cg_read(r->basefd, "cgroup.procs", buf, sizeof(buf));
    if (n < 0) {
        unavailable(r, "cannot read cgroup.procs of sbxd's cgroup", errno);
        return -1;
    }
    /* A full buffer may end in half a pid: leave that line to the next round. */
    if ((size_t)n == sizeof(buf) - 1) {
        char *nl = strrchr(buf, '\n');
        *(nl ? nl + 1 : buf) = '\0';
    }
    a->unseen = 0;
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        while (*end == '\n')
            end++;
        if (pid == 0)
            a->unseen++;
        else if (pid > 0 && pid != getpid() && adopt_one(r, leaffd, rel, (pid_t)pid, a) < 0)
            return -1;
    }
    return 0;
}

/* Enable the controllers for the leaves. A wrapper that started sbxd and stays in its cgroup
 * (tini, dumb-init, a shell) makes the kernel refuse them: then every process of that cgroup
 * is adopted into the daemon's leaf and the controllers are tried again, until they are
 * enabled or CG_ADOPT_ROUNDS passes have not outrun the wrapper's forks. Only a refusal
 * triggers adoption: sbxd alone is never disturbed, and in the root cgroup (exempt from the
 * rule) the system's processes are never taken. 0; -1 with r->why set. */
static int claim_controllers(struct cg_root *r, const char *ctrl, int leaffd, const char *rel)
{
    struct adoption a = {0};
    int round = 0;
    for (;; round++) {
        if (enable_controllers(r, ctrl) == 0 || errno != EBUSY)
            break; /* enabled, or refused for another reason: the caller decides */
        if (round == CG_ADOPT_ROUNDS) {
            snprintf(r->why, sizeof(r->why),
                     "sbxd's cgroup still holds other processes after %d rounds of moving them "
                     "into its leaf%s",
                     CG_ADOPT_ROUNDS, a.unseen ? " (some are outside sbxd's PID namespace)" : "");
            return -1;
        }
        if (adopt_round(r, leaffd, rel, &a) < 0)
            return -1;
        if (round > 0)
            usleep(1000u << (round < 6 ? round : 6)); /* let a forking wrapper settle */
    }
    r->adopted = a.moved;
    if (a.moved)
        LOG_EVENT("info", "cgroup", LOG_S("action", "adopted the processes of sbxd's cgroup"),
                  LOG_I("count", a.moved), LOG_S("pids", a.pids), LOG_I("rounds", round),
                  LOG_S("leaf", CG_DAEMON_LEAF));
    return 0;
}

void cg_probe(struct cg_root *r)
{
    memset(r, 0, sizeof(*r));
    r->basefd = -1;
    struct statfs sfs;
    if (statfs(CG_MOUNT, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC) {
        unavailable(r, "no cgroup2 mounted at " CG_MOUNT, 0);
        return;
    }
    char line[PATH_MAX];
    int rc = proc_cgroup("self", line, sizeof(line));
    if (rc < 0) {
        unavailable(r,
                    rc == -1 ? "cannot read /proc/self/cgroup"
                             : "no cgroup v2 entry in /proc/self/cgroup",
                    rc == -1 ? errno : 0);
        return;
    }
    /* Already in our own leaf (a restart in the same cgroup): its parent is the base. */
    size_t ll = strlen(line);
    if (ll >= strlen("/" CG_DAEMON_LEAF) &&
        strcmp(line + ll - strlen("/" CG_DAEMON_LEAF), "/" CG_DAEMON_LEAF) == 0)
        line[ll - strlen("/" CG_DAEMON_LEAF)] = '\0';
    /* sbxd's cgroup as /proc/PID/cgroup names it: a process that says so is one to adopt. */
    const char *rel = line[0] ? line : "/";
    if (strlen(CG_MOUNT) + strlen(line) >= sizeof(r->base)) {
        unavailable(r, "sbxd's cgroup path is too long", 0);
        return;
    }
    snprintf(r->base, sizeof(r->base), "%s%.*s", CG_MOUNT,
             (int)(sizeof(r->base) - sizeof(CG_MOUNT)), strcmp(line, "/") == 0 ? "" : line);
    r->basefd = open(r->base, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r->basefd < 0) {
        unavailable(r, "cannot open sbxd's cgroup", errno);
        return;
    }
    char ctrl[512];
    if (cg_read(r->basefd, "cgroup.controllers", ctrl, sizeof(ctrl)) < 0) {
        unavailable(r, "cannot read cgroup.controllers", errno);
        goto fail;
    }
    /* The daemon moves into a leaf of its own first: controllers can be enabled for
     * children only in a cgroup that holds no processes (any others are adopted below). */
    if (mkdirat(r->basefd, CG_DAEMON_LEAF, 0755) < 0 && errno != EEXIST) {
        unavailable(r, "cgroup not writable (not delegated)", errno);
        goto fail;
    }
    char pid[24];
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    int dfd = openat(r->basefd, CG_DAEMON_LEAF, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || cg_write(dfd, "cgroup.procs", pid) < 0) {
        unavailable(r, "cannot move sbxd into its leaf", errno);
        if (dfd >= 0)
            close(dfd);
        goto fail;
    }
    r->has_kill = faccessat(dfd, "cgroup.kill", F_OK, 0) == 0;
    remove_stale(r);
    rc = claim_controllers(r, ctrl, dfd, rel);
    close(dfd);
    if (rc < 0)
        goto fail;
    if (!r->memory && !r->pids) {
        unavailable(r,
                    "neither the memory nor the pids controller can be enabled (are they in "
                    "sbxd's cgroup.controllers?)",
                    0);
        goto fail;
    }
    r->available = true;

    /* Prove that the limits bite; under gVisor they are accounting only. */
    uint64_t ooms = 0;
    if (r->pids) {
        struct cg_limits lim = {.pids = 1};
        int st = selftest(r, CG_JOB_PREFIX "selftest-pids", &lim, try_fork, &ooms);
        r->pids_enforced = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    if (r->memory) {
        struct cg_limits lim = {.memory_bytes = 16u << 20};
        int st = selftest(r, CG_JOB_PREFIX "selftest-memory", &lim, try_allocate, &ooms);
        r->memory_enforced = st != -1 && WIFSIGNALED(st) && ooms > 0;
    }
    return;
fail:
    close(r->basefd);
    r->basefd = -1;
}

int cg_leaf_create(const struct cg_root *r, const char *id, const struct cg_limits *lim,
                   struct cg_leaf *leaf, struct sbxd_err *err)
{
    leaf->dirfd = leaf->procs_fd = -1;
    snprintf(leaf->name, sizeof(leaf->name), "%s%s",
             strncmp(id, CG_JOB_PREFIX, strlen(CG_JOB_PREFIX)) == 0 ? "" : CG_JOB_PREFIX, id);
    if (mkdirat(r->basefd, leaf->name, 0755) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot create cgroup %s", leaf->name);
    leaf->dirfd = openat(r->basefd, leaf->name, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (leaf->dirfd < 0)
        goto fail;
    char v[64];
    if (r->memory) {
        if (lim->memory_bytes)
            snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->memory_bytes);
        else
            snprintf(v, sizeof(v), "max");
        if (cg_write(leaf->dirfd, "memory.max", v) < 0)
            goto fail;
        /* No swap: the limit is on memory, not on memory plus disk. (Absent without swap
         * accounting; then there is no swap to use either.) */
        if (cg_write(leaf->dirfd, "memory.swap.max", "0") < 0 && errno != ENOENT)
            goto fail;
        /* An OOM kills the whole command, never leaves half of it running. */
        if (cg_write(leaf->dirfd, "memory.oom.group", "1") < 0 && errno != ENOENT)
            goto fail;
    }
    if (r->pids && lim->pids) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->pids);
        if (cg_write(leaf->dirfd, "pids.max", v) < 0)
            goto fail;
    }
    if (r->cpu && lim->cpu_quota > 0) {
        snprintf(v, sizeof(v), "%llu 100000", (unsigned long long)(lim->cpu_quota * 100000 + 0.5));
        if (cg_write(leaf->dirfd, "cpu.max", v) < 0)
            goto fail;
    }
    leaf->procs_fd = openat(leaf->dirfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (leaf->procs_fd < 0)
        goto fail;
    return 0;
fail:;
    int e = errno;
    cg_leaf_destroy(r, leaf);
    return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot set up cgroup %s", leaf->name);
}

void cg_leaf_signal(const struct cg_leaf *leaf, int sig)
{
    if (leaf->dirfd < 0)
        return;
    char buf[8192];
    if (cg_read(leaf->dirfd, "cgroup.procs", buf, sizeof(buf)) < 0)
        return;
    for (char *p = buf; *p;) {
        pid_t pid = (pid_t)strtol(p, &p, 10);
        if (pid > 0)
            kill(pid, sig);
        while (*p == '\n')
            p++;
        if (pid <= 0)
            break;
    }
}

void cg_leaf_kill(const struct cg_leaf *leaf)
{
    if (leaf->dirfd < 0)
        return;
    if (cg_write(leaf->dirfd, "cgroup.kill", "1") == 0)
        return;
    /* Before Linux 5.14: signal what is listed (a fork in between is caught by the next
     * call; the job calls this until the leaf is empty). */
    cg_leaf_signal(leaf, SIGKILL);
}

void cg_leaf_stats(const struct cg_leaf *leaf, struct cg_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (leaf->dirfd < 0)
        return;
    char buf[64];
    if (cg_read(leaf->dirfd, "memory.peak", buf, sizeof(buf)) > 0) {
        st->has_peak = true;
        st->memory_peak = strtoull(buf, NULL, 10);
    }
    cg_read_key(leaf->dirfd, "memory.events", "oom_kill", &st->oom_kills);
    st->has_cpu = cg_read_key(leaf->dirfd, "cpu.stat", "usage_usec", &st->cpu_usec);
}

void cg_leaf_destroy(const struct cg_root *r, struct cg_leaf *leaf)
{
    if (leaf->procs_fd >= 0) {
        close(leaf->procs_fd);
        leaf->procs_fd = -1;
    }
    if (leaf->dirfd < 0)
        return;
    /* Killed processes leave within milliseconds; rmdir works once the leaf is empty. */
    bool removed = false;
    for (int i = 0; i < 500 && !removed; i++) {
        cg_leaf_kill(leaf);
        removed = unlinkat(r->basefd, leaf->name, AT_REMOVEDIR) == 0 || errno == ENOENT;
        if (!removed)
            usleep(i < 50 ? 200 : 2000);
    }
    if (!removed)
        LOG_EVENT("warn", "cgroup", LOG_S("action", "leaf not removed"), LOG_S("leaf", leaf->name),
                  LOG_S("error", strerror(errno)));
    close(leaf->dirfd);
    leaf->dirfd = -1;
}
