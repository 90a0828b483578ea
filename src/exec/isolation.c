#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/isolation.h"
#include "sbxd/log.h"
#include "sbxd/spawn.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* iso->degraded: 1 while a required mechanism fails (until it works again); this for a
 * daemon that can run no command at all (--degraded-ok), which nothing undoes. */
#define DEGRADED_FOR_GOOD 2

const char *iso_tree_kill_name(enum iso_tree_kill k)
{
    switch (k) {
    case ISO_KILL_CGROUP:
        return "cgroup";
    case ISO_KILL_PIDNS:
        return "pidns";
    case ISO_KILL_UID:
        return "uid";
    case ISO_KILL_PGID:
        return "pgid";
    }
    return "pgid";
}

static const struct {
    const char *word;
    unsigned bit;
} req_words[] = {
    {"cgroup", ISO_REQ_CGROUP},
    {"memory", ISO_REQ_MEMORY},
    {"pids", ISO_REQ_PIDS},
    {"cpu", ISO_REQ_CPU},
    {"seccomp", ISO_REQ_SECCOMP},
    {"tree_kill", ISO_REQ_TREE_KILL},
    {"pidns", ISO_REQ_PIDNS},
    {"uid", ISO_REQ_UID},
    {"capabilities", ISO_REQ_CAPABILITIES},
    {"non_root", ISO_REQ_NON_ROOT},
    {"ipc", ISO_REQ_IPC},
};

#define NREQ (sizeof(req_words) / sizeof(req_words[0]))

/* clone3 and CLONE_INTO_CGROUP: a clone3 with a too small argument fails EINVAL where the
 * call exists (ENOSYS where not); one asking CLONE_INTO_CGROUP with a bad fd fails EBADF
 * where the flag is known (EINVAL where not). Neither creates a process. */
static void probe_syscalls(struct isolation *iso)
{
    errno = 0;
    iso->clone3 = syscall(SYS_clone3, NULL, 0) < 0 && errno != ENOSYS;
    if (iso->clone3) {
        uint64_t args[11] = {0};
        args[0] = CLONE_INTO_CGROUP;
        args[10] = 0x7fffffff; /* cgroup: an fd that is not open */
        long rc = syscall(SYS_clone3, args, sizeof(args));
        if (rc == 0)
            _exit(0); /* cannot happen with a closed fd; never run on in a copy */
        iso->clone_into_cgroup = rc < 0 && errno == EBADF;
        if (rc > 0)
            waitpid((pid_t)rc, NULL, 0);
    }
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    iso->pidfd = fd >= 0;
    if (fd >= 0)
        close(fd);
}

/* A child raises its oom_score_adj to 1000 and reads its oom_score: any kernel whose OOM
 * killer weighs the adjustment shows a score then (1000 or more); gVisor shows 0. Only a
 * score of 0 read back says "none": a /proc that cannot be read keeps the writes. */
static bool probe_oom_scored(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "1000", 4) != 4)
            _exit(0);
        close(fd);
        char buf[32] = "";
        fd = open("/proc/self/oom_score", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        _exit(n > 0 && atoi(buf) == 0 ? 3 : 0);
    }
    int st = 0;
    if (pid < 0)
        return true;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 3);
}

/*
 * sbxd as root runs every command as --user: setgroups, setresgid and setresuid in the child
 * (harden.c), which take CAP_SETGID and CAP_SETUID. A root without them (capsh --drop, setpriv
 * --bounding-set, a runtime's capability list) would look healthy while every command failed
 * to start, so a child tries the switch once, here. 0 when it works (or sbxd is not root:
 * commands keep its ids), else -1 with why.
 */
static int probe_user_switch(const struct sbxd_config *cfg, char *why, size_t len)
{
    if (geteuid() != 0)
        return 0;
    struct {
        const char *step;
        int err;
    } r;
    memset(&r, 0, sizeof(r)); /* padding too: the child writes the whole of it */
    r.step = "fork";
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        r.step = "pipe";
        r.err = errno;
        goto fail;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        r.step = NULL;
        if (setgroups(0, NULL) < 0)
            r.step = "setgroups";
        else if (setresgid(cfg->user_gid, cfg->user_gid, cfg->user_gid) < 0)
            r.step = "setresgid";
        else if (setresuid(cfg->user_uid, cfg->user_uid, cfg->user_uid) < 0)
            r.step = "setresuid";
        r.err = r.step ? errno : 0;
        ssize_t w = write(p[1], &r, sizeof(r)); /* (a copy of our memory: the pointer holds) */
        _exit(w == (ssize_t)sizeof(r) ? 0 : 1);
    }
    r.err = errno;
    close(p[1]);
    if (pid > 0) {
        if (read(p[0], &r, sizeof(r)) != (ssize_t)sizeof(r)) {
            r.step = "probe";
            r.err = EIO; /* the child died before it said */
        }
        waitpid(pid, NULL, 0);
    }
    close(p[0]);
    if (pid > 0 && !r.step)
        return 0;
fail:
    snprintf(why, len,
             "sbxd runs as root but cannot run commands as --user %u:%u (%s: %s): it lacks "
             "CAP_SETUID/CAP_SETGID, and every command would fail to start",
             (unsigned)cfg->user_uid, (unsigned)cfg->user_gid, r.step, strerror(r.err));
    return -1;
}

int isolation_setup(struct isolation *iso, const struct sbxd_config *cfg, struct sbxd_err *err)
{
    memset(iso, 0, sizeof(*iso));
    pthread_mutex_init(&iso->degraded_lock, NULL);
    pthread_mutex_init(&iso->slots.lock, NULL);
    iso->cg.basefd = -1;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", cfg->require_isolation);
    for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        size_t i = 0;
        while (i < NREQ && strcmp(w, req_words[i].word) != 0)
            i++;
        if (i == NREQ) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "--require-isolation: unknown mechanism '%s' (known: cgroup, memory, pids, "
                      "cpu, seccomp, tree_kill, pidns, uid, capabilities, non_root, ipc)",
                      w);
            return -2;
        }
        iso->required |= req_words[i].bit;
    }

    if (probe_user_switch(cfg, iso->degraded_why, sizeof(iso->degraded_why)) < 0) {
        if (!cfg->degraded_ok) {
            sbxd_fail(err, SBXD_E_UNAVAILABLE, 0,
                      "%s; give sbxd those capabilities, run it as the command user, "
                      "or start it with --degraded-ok to serve health checks as degraded",
                      iso->degraded_why);
            return -1;
        }
        /* Up, but honest: health checks say so and commands are refused (main.c). */
        iso->degraded = DEGRADED_FOR_GOOD;
        LOG_EVENT("error", "isolation_degraded", LOG_S("reason", iso->degraded_why));
    }

    const char *mode = cfg->isolation;
    bool any = strcmp(mode, "auto") == 0;
    probe_syscalls(iso);
    iso->oom_scored = probe_oom_scored();
    /* The cgroup probe claims sbxd's cgroup (it moves the daemon into a leaf): only when
     * cgroups may be used. */
    if (any || strcmp(mode, "cgroup") == 0)
        cg_probe(&iso->cg);
    else
        snprintf(iso->cg.why, sizeof(iso->cg.why), "--isolation %s", mode);
    iso->pidns_ok = spawn_pidns_probe(&iso->pidns_own_proc, &iso->pidns_userns, iso->pidns_why,
                                      sizeof(iso->pidns_why));
    /* Leftovers of a killed sbxd in the uid range are killed only when this start will use
     * the range; otherwise they are reported, and left alone. */
    bool uid_may_use = strcmp(mode, "uid") == 0 || (any && !iso->cg.available && !iso->pidns_ok);
    iso->uid_ok = uid_range_probe(iso, cfg, uid_may_use);

    if (iso->cg.available)
        iso->tree_kill = ISO_KILL_CGROUP;
    else if ((any || strcmp(mode, "pidns") == 0) && iso->pidns_ok)
        iso->tree_kill = ISO_KILL_PIDNS;
    else if ((any || strcmp(mode, "uid") == 0) && iso->uid_ok)
        iso->tree_kill = ISO_KILL_UID;
    else
        iso->tree_kill = ISO_KILL_PGID;

    const char *reason = NULL;
    if (strcmp(mode, "cgroup") == 0 && iso->tree_kill != ISO_KILL_CGROUP)
        reason = iso->cg.why;
    else if (strcmp(mode, "pidns") == 0 && iso->tree_kill != ISO_KILL_PIDNS)
        reason = iso->pidns_why;
    else if (strcmp(mode, "uid") == 0 && iso->tree_kill != ISO_KILL_UID)
        reason = iso->uid_why;
    if (reason) {
        sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, "--isolation %s is not possible here: %s", mode,
                  reason);
        return -1;
    }
    /* Made as the command's will be: with the PID namespace's user namespace where commands
     * get their PID namespaces through one. */
    iso->ipcns_ok = spawn_ipcns_probe(iso->tree_kill == ISO_KILL_PIDNS && iso->pidns_userns,
                                      iso->ipcns_why, sizeof(iso->ipcns_why));
    if (iso->tree_kill == ISO_KILL_UID) {
        /* The last uid of the range is the kill helper's (uid_killer), never a command's. */
        iso->slots.first = cfg->uid_first;
        iso->slots.count = cfg->uid_count - 1;
        iso->slots.used = calloc(cfg->uid_count, 1);
        if (!iso->slots.used) {
            sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
            return -1;
        }
    }
    return 0;
}

int isolation_check_required(const struct isolation *iso, const struct harden_plan *h,
                             struct sbxd_err *err)
{
    const struct cg_root *cg = &iso->cg;
    for (size_t i = 0; i < NREQ; i++) {
        unsigned bit = req_words[i].bit;
        if (!(iso->required & bit))
            continue;
        bool ok = false;
        switch (bit) {
        case ISO_REQ_CGROUP:
            ok = cg->available;
            break;
        case ISO_REQ_MEMORY:
            ok = cg->available && cg->memory_enforced;
            break;
        case ISO_REQ_PIDS:
            ok = cg->available && cg->pids_enforced;
            break;
        case ISO_REQ_CPU:
            ok = cg->available && cg->cpu;
            break;
        case ISO_REQ_SECCOMP:
            ok = h->seccomp;
            break;
        case ISO_REQ_TREE_KILL:
            ok = iso->tree_kill != ISO_KILL_PGID;
            break;
        case ISO_REQ_PIDNS:
            ok = iso->tree_kill == ISO_KILL_PIDNS;
            break;
        case ISO_REQ_UID:
            ok = iso->tree_kill == ISO_KILL_UID;
            break;
        case ISO_REQ_CAPABILITIES:
            ok = h->drop_caps && h->drop_bounding;
            break;
        case ISO_REQ_NON_ROOT:
            ok = h->uid != 0;
            break;
        case ISO_REQ_IPC:
            ok = iso->ipcns_ok;
            break;
        }
        if (!ok && bit == ISO_REQ_IPC) {
            return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0,
                             "--require-isolation ipc: not available here (%s)", iso->ipcns_why);
        }
        if (!ok) {
            return sbxd_fail(
                err, SBXD_E_UNAVAILABLE, 0,
                "--require-isolation %s: not available here (cgroup: %s; tree kill: %s)",
                req_words[i].word, cg->available ? "v2" : cg->why,
                iso_tree_kill_name(iso->tree_kill));
        }
    }
    return 0;
}

bool isolation_degrade(struct isolation *iso, unsigned req, const char *what)
{
    if (!(iso->required & req))
        return false;
    if (__atomic_load_n(&iso->degraded, __ATOMIC_ACQUIRE) == DEGRADED_FOR_GOOD)
        return true; /* its reason stays the one that stops everything */
    pthread_mutex_lock(&iso->degraded_lock);
    bool was = __atomic_exchange_n(&iso->degraded, 1, __ATOMIC_ACQ_REL);
    snprintf(iso->degraded_why, sizeof(iso->degraded_why), "%s", what);
    pthread_mutex_unlock(&iso->degraded_lock);
    if (!was)
        LOG_EVENT("error", "isolation_degraded", LOG_S("reason", what));
    return true;
}

void isolation_degrade_for_good(struct isolation *iso, const char *why)
{
    pthread_mutex_lock(&iso->degraded_lock);
    snprintf(iso->degraded_why, sizeof(iso->degraded_why), "%s", why);
    __atomic_store_n(&iso->degraded, DEGRADED_FOR_GOOD, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&iso->degraded_lock);
    LOG_EVENT("error", "isolation_degraded", LOG_S("reason", why));
}

void isolation_recovered(struct isolation *iso)
{
    if (!__atomic_load_n(&iso->degraded, __ATOMIC_ACQUIRE))
        return;
    int was = 1;
    if (__atomic_compare_exchange_n(&iso->degraded, &was, 0, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        LOG_EVENT("info", "isolation_recovered");
}

bool isolation_degraded(struct isolation *iso, char *why, size_t len)
{
    if (!__atomic_load_n(&iso->degraded, __ATOMIC_ACQUIRE))
        return false;
    if (why) {
        pthread_mutex_lock(&iso->degraded_lock);
        snprintf(why, len, "%s", iso->degraded_why);
        pthread_mutex_unlock(&iso->degraded_lock);
    }
    return true;
}

void isolation_describe(const struct isolation *iso, const struct harden_plan *h,
                        uint64_t memory_max, struct iso_description *d)
{
    const struct cg_root *cg = iso->cg.available ? &iso->cg : NULL;
    memset(d, 0, sizeof(*d));
    if (iso->tree_kill == ISO_KILL_UID)
        snprintf(d->user, sizeof(d->user), "%u-%u:%u", (unsigned)iso->slots.first,
                 (unsigned)(iso->slots.first + iso->slots.count - 1), (unsigned)h->gid);
    else
        snprintf(d->user, sizeof(d->user), "%u:%u", (unsigned)h->uid, (unsigned)h->gid);
    d->cgroup = cg ? "v2" : "none";
    /* enforced: a self-test saw the limit bite; accounting: set but not enforced (gVisor);
     * rlimit-as: address-space limit instead; none: nothing limits it. */
    d->memory = cg && cg->memory ? (cg->memory_enforced ? "enforced" : "accounting")
                                 : (memory_max > 0 ? "rlimit-as" : "none");
    d->pids = cg && cg->pids ? (cg->pids_enforced ? "enforced" : "accounting") : "none";
    d->cpu = cg && cg->cpu ? "cpu.max" : "rlimit-cpu";
    /* pgid misses processes that leave the group: the one degraded mode */
    d->tree_kill = iso_tree_kill_name(iso->tree_kill);
    d->seccomp = h->seccomp ? "deny-list" : "none";
    d->capabilities = h->drop_bounding ? "none" : "none-bounding-kept";
    /* System V objects and POSIX message queues: a namespace per command, or the daemon's. */
    d->ipc = iso->ipcns_ok ? "own" : "shared";
    if (iso->tree_kill == ISO_KILL_PIDNS) {
        d->proc = iso->pidns_own_proc ? "own" : "shared";
        d->userns = iso->pidns_userns;
    }
    /* What keeps one command from another's memory, fds and processes: a uid of its own, a
     * PID namespace with its own /proc (the others are not even visible), or a Landlock
     * domain (ptrace-level access refused; signals too from Landlock ABI 6). Under pgid and
     * cgroup without Landlock, commands run as one user and nothing does. */
    enum harden_scope scope = harden_landlock_scope(h);
    if (iso->tree_kill == ISO_KILL_UID)
        d->inter_command = "uid";
    else if (iso->tree_kill == ISO_KILL_PIDNS && iso->pidns_own_proc)
        d->inter_command = "pidns";
    else
        d->inter_command = scope == HARDEN_SCOPE_PTRACE_SIGNAL ? "landlock"
                           : scope == HARDEN_SCOPE_PTRACE      ? "landlock-no-signals"
                                                               : "none";
}

unsigned iso_command_uids(const struct harden_plan *h, const struct isolation *iso,
                          const struct sbxd_config *cfg, struct fs_uid_span *v)
{
    unsigned n = 0;
    if (!h->switch_user)
        return 0;
    if (h->uid != 0)
        v[n++] = (struct fs_uid_span){h->uid, 1};
    if (iso->tree_kill == ISO_KILL_UID && cfg->uid_count > 1)
        v[n++] = (struct fs_uid_span){cfg->uid_first, cfg->uid_count - 1};
    return n;
}
