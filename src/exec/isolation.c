#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "sbxd/isolation.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/spawn.h"
#include "sbxd/walk.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

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

/* Whether the uid map of our user namespace covers [first, first+count). */
static bool uid_range_mapped(uid_t first, unsigned count)
{
    FILE *f = fopen("/proc/self/uid_map", "re");
    if (!f)
        return true; /* no user namespaces: every uid exists */
    unsigned long inside, outside, len;
    bool ok = false;
    while (fscanf(f, "%lu %lu %lu", &inside, &outside, &len) == 3)
        if (first >= inside && (unsigned long)first + count <= inside + len)
            ok = true;
    fclose(f);
    return ok;
}

/* What uid_range_users found. */
struct range_user {
    pid_t pid;
    uid_t uid; /* its real uid, else the first of its ids in the range */
    char comm[32];
};

/* Live processes (zombies are dead already: they cannot run, nor be killed) that use a uid
 * of the range as any of their ids: up to max of them in v; returns how many there are. */
static unsigned uid_range_users(uid_t first, unsigned count, struct range_user *v, unsigned max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], line[256], comm[32] = "", state = '?';
        snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        while (fgets(line, sizeof(line), f)) {
            if (sscanf(line, "Name: %31s", comm) == 1 || sscanf(line, "State: %c", &state) == 1)
                continue;
            unsigned long u[4];
            if (sscanf(line, "Uid: %lu %lu %lu %lu", &u[0], &u[1], &u[2], &u[3]) != 4)
                continue;
            for (int i = 0; i < 4 && state != 'Z'; i++) {
                if (u[i] < first || u[i] >= (unsigned long)first + count)
                    continue;
                if (n < max) {
                    v[n].pid = (pid_t)atoi(e->d_name);
                    v[n].uid =
                        (uid_t)(u[0] >= first && u[0] < (unsigned long)first + count ? u[0] : u[i]);
                    snprintf(v[n].comm, sizeof(v[n].comm), "%s", comm);
                }
                n++;
                break;
            }
            break;
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

struct uid_signal {
    uid_t uid;
    int sig;
};

/*
 * The kill helper's own uid: the last of --uid-range, never a command's. kill(2) lets a
 * sender reach a target when the sender's real or effective uid is the target's real or
 * saved uid. The helper takes (real, effective, saved) = (helper, uid, helper): its effective
 * uid reaches every process that runs as `uid`, and its real one only other helpers, of
 * which there is never more than one at a time (helper_lock). A command (all three ids
 * `uid`) matches neither of the helper's real and saved uids, so it can neither signal the
 * helper nor read it through /proc: a command spinning kill(-1, SIGSTOP) cannot stop the
 * kill meant for it, nor freeze the thread of sbxd that waits for the helper.
 */
static uid_t helper_uid = (uid_t)-1;
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;

NO_SANITIZE static int uid_killer(void *arg)
{
    const struct uid_signal *u = arg;
    if (syscall(SYS_setresuid, helper_uid, u->uid, helper_uid) < 0)
        syscall(SYS_exit_group, 1);
    /* Every process this uid may signal but ourselves: all that run as it. */
    if (u->sig)
        syscall(SYS_kill, -1, u->sig);
    syscall(SYS_exit_group, 0);
    return 0;
}

/*
 * The helper shares our memory and we wait until it is gone (CLONE_VFORK), so it needs no
 * allocation. setresuid is its own: credentials are per thread in the kernel, and the raw
 * call does not make glibc change every thread of the daemon. Returns its pid, or -1; when
 * reap is false it is reaped by the reaper.
 */
static pid_t uid_helper_run(uid_t uid, int sig, bool reap, int *status)
{
    if (helper_uid == (uid_t)-1)
        return -1;
    _Alignas(64) char stack[16384];
    struct uid_signal arg = {uid, sig};
    pthread_mutex_lock(&helper_lock);
    pid_t pid = clone(uid_killer, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &arg);
    pthread_mutex_unlock(&helper_lock);
    if (pid > 0 && reap && waitpid(pid, status, 0) < 0)
        return -1;
    return pid;
}

void uid_slot_signal(uid_t uid, int sig)
{
    uid_helper_run(uid, sig, false, NULL);
}

void uid_slot_kill(uid_t uid)
{
    uid_slot_signal(uid, SIGKILL);
}

/* One SIGKILL to every process of uid, from a helper that becomes it (kill(-1) is atomic
 * with respect to fork: a leftover that forks cannot outrun it); reaped here. */
static void uid_kill_all(uid_t uid)
{
    int st;
    uid_helper_run(uid, SIGKILL, true, &st);
}

/* Leftovers logged one by one (then only counted), and how long start-up keeps killing. */
#define STALE_SHOWN   64
#define STALE_KILL_MS 1000

/*
 * The range is sbxd's alone (documented so), so a process that runs as one of its uids at
 * start is a command left by an sbxd that was killed (SIGKILL, a crash: nothing ties a
 * command to its daemon under uid isolation). Left running, it would share its uid with
 * the next command given that uid, which could signal it and read what it owns in /proc.
 * Each uid found gets a kill(-1) as that uid, until no process is left (at most
 * STALE_KILL_MS); each process is logged. Returns 0 when none is left, else the pid of one
 * still there.
 */
static pid_t uid_range_clear(uid_t first, unsigned count)
{
    struct range_user v[STALE_SHOWN];
    pid_t logged[STALE_SHOWN];
    unsigned nlogged = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        unsigned n = uid_range_users(first, count, v, STALE_SHOWN);
        if (n == 0) {
            if (nlogged)
                LOG_EVENT("warn", "stale_processes", LOG_I("killed", nlogged),
                          LOG_S("message", "processes of a killed sbxd (uids of --uid-range) "
                                           "were killed at start"));
            return 0;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= STALE_KILL_MS)
            return v[0].pid;
        for (unsigned i = 0; i < n && i < STALE_SHOWN; i++) {
            bool seen = false;
            for (unsigned k = 0; k < nlogged && !seen; k++)
                seen = logged[k] == v[i].pid;
            if (!seen && nlogged < STALE_SHOWN) {
                logged[nlogged++] = v[i].pid;
                LOG_EVENT("warn", "stale_process", LOG_I("pid", v[i].pid), LOG_I("uid", v[i].uid),
                          LOG_S("name", v[i].comm), LOG_S("action", "SIGKILL"));
            }
            /* By uid, not by pid: a pid may be reused meanwhile, a uid of the range not. */
            uid_kill_all(v[i].uid);
        }
        usleep(10000); /* the kernel completes the kills */
    }
}

static bool uid_probe(struct isolation *iso, const struct sbxd_config *cfg, bool may_use)
{
    uid_t first = cfg->uid_first;
    unsigned count = cfg->uid_count;
    if (geteuid() != 0) {
        snprintf(iso->uid_why, sizeof(iso->uid_why), "sbxd is not root: cannot switch uids");
        return false;
    }
    if (count < 2) {
        snprintf(iso->uid_why, sizeof(iso->uid_why),
                 "--uid-range has %u uid: it takes at least 2 (its last is the kill helper's)",
                 count);
        return false;
    }
    if (!uid_range_mapped(first, count)) {
        snprintf(iso->uid_why, sizeof(iso->uid_why),
                 "uids %u-%u are not all mapped in sbxd's user namespace", (unsigned)first,
                 (unsigned)(first + count - 1));
        return false;
    }
    struct range_user u;
    pid_t user = 0;
    helper_uid = first + count - 1;
    if (may_use)
        user = uid_range_clear(first, count);
    else if (uid_range_users(first, count, &u, 1) > 0)
        user = u.pid;
    if (user) {
        snprintf(iso->uid_why, sizeof(iso->uid_why), "process %d %s a uid of %u-%u", (int)user,
                 may_use ? "runs as (and could not be killed)" : "already runs as", (unsigned)first,
                 (unsigned)(first + count - 1));
        return false;
    }
    /* The helper can become a uid of the range (it exits 1 where setresuid fails). */
    int st = 0;
    if (uid_helper_run(first, 0, true, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(iso->uid_why, sizeof(iso->uid_why), "cannot switch to uid %u", (unsigned)first);
        helper_uid = (uid_t)-1;
        return false;
    }
    return true;
}

int isolation_setup(struct isolation *iso, const struct sbxd_config *cfg, char *why, size_t len)
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
            snprintf(why, len,
                     "--require-isolation: unknown mechanism '%s' (known: cgroup, memory, pids, "
                     "cpu, seccomp, tree_kill, pidns, uid, capabilities, non_root)",
                     w);
            return -2;
        }
        iso->required |= req_words[i].bit;
    }

    const char *mode = cfg->isolation;
    bool any = strcmp(mode, "auto") == 0;
    probe_syscalls(iso);
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
    iso->uid_ok = uid_probe(iso, cfg, uid_may_use);

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
        snprintf(why, len, "--isolation %s is not possible here: %s", mode, reason);
        return -1;
    }
    if (iso->tree_kill == ISO_KILL_UID) {
        /* The last uid of the range is the kill helper's (uid_killer), never a command's. */
        iso->slots.first = cfg->uid_first;
        iso->slots.count = cfg->uid_count - 1;
        iso->slots.used = calloc(cfg->uid_count, 1);
        if (!iso->slots.used) {
            snprintf(why, len, "out of memory");
            return -1;
        }
    }
    return 0;
}

int isolation_check_required(const struct isolation *iso, const struct harden_plan *h, char *why,
                             size_t len)
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
        }
        if (!ok) {
            snprintf(why, len,
                     "--require-isolation %s: not available here (cgroup: %s; tree kill: %s)",
                     req_words[i].word, cg->available ? "v2" : cg->why,
                     iso_tree_kill_name(iso->tree_kill));
            return -1;
        }
    }
    return 0;
}

bool isolation_degrade(struct isolation *iso, unsigned req, const char *what)
{
    if (!(iso->required & req))
        return false;
    pthread_mutex_lock(&iso->degraded_lock);
    bool was = __atomic_exchange_n(&iso->degraded, 1, __ATOMIC_ACQ_REL);
    snprintf(iso->degraded_why, sizeof(iso->degraded_why), "%s", what);
    pthread_mutex_unlock(&iso->degraded_lock);
    if (!was)
        LOG_EVENT("error", "isolation_degraded", LOG_S("reason", what));
    return true;
}

void isolation_recovered(struct isolation *iso)
{
    if (!__atomic_load_n(&iso->degraded, __ATOMIC_ACQUIRE))
        return;
    if (__atomic_exchange_n(&iso->degraded, 0, __ATOMIC_ACQ_REL))
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

bool uid_slot_take(struct uid_slots *s, uid_t *uid)
{
    bool ok = false;
    pthread_mutex_lock(&s->lock);
    for (unsigned k = 0; k < s->count; k++) {
        unsigned i = (s->next + k) % s->count;
        if (!s->used[i]) {
            s->used[i] = 1;
            s->next = (i + 1) % s->count; /* round robin: a uid rests between uses */
            *uid = s->first + i;
            ok = true;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void uid_slot_put(struct uid_slots *s, uid_t uid)
{
    pthread_mutex_lock(&s->lock);
    if (uid >= s->first && uid - s->first < s->count)
        s->used[uid - s->first] = 0;
    pthread_mutex_unlock(&s->lock);
}

struct reown {
    uid_t slot, uid;
    gid_t gid;
    unsigned changed;
};

/* fd is open on the very inode that st describes: change it, nothing else. */
static void reown_one(int fd, const struct stat *st, struct reown *r)
{
    if (fchown(fd, r->uid, r->gid) < 0)
        return;
    /* The group may do what the owner may: the next command runs as another uid of the
     * range, in the same group. Set-id bits go (chown cleared them anyway). */
    mode_t m = st->st_mode & 01777;
    m = (m & ~(mode_t)070) | ((m & 0700) >> 3);
    if (m != (st->st_mode & 07777))
        fchmod(fd, m);
    r->changed++;
}

/* One entry: a directory or a regular file that slot owns is changed through the fd that
 * opened it; a directory within the depth bound is entered, whoever owns it. */
static int reown_entry(struct walk_entry *e, void *ctx)
{
    struct reown *r = ctx;
    if (e->d_type != DT_DIR && e->d_type != DT_REG && e->d_type != DT_UNKNOWN)
        return WALK_NEXT; /* symlinks (their owner grants nothing), fifos, sockets */
    if (walk_stat(e) < 0)
        return WALK_NEXT;
    bool is_dir = S_ISDIR(e->st.st_mode);
    if ((!is_dir || !e->may_enter) && (!S_ISREG(e->st.st_mode) || e->st.st_uid != r->slot))
        return WALK_NEXT;
    /* Opened without following anything, then checked again on the fd (walk_open's stat is
     * of what it opened): whatever the name points to now, only what the fd holds is
     * changed. */
    if (walk_open(e, O_RDONLY | (is_dir ? O_DIRECTORY : 0)) < 0)
        return WALK_NEXT;
    if (!S_ISDIR(e->st.st_mode) && !S_ISREG(e->st.st_mode))
        return WALK_NEXT;
    if (e->st.st_uid == r->slot)
        reown_one(e->fd, &e->st, r);
    return S_ISDIR(e->st.st_mode) && e->may_enter ? WALK_ENTER : WALK_NEXT;
}

unsigned uid_slot_reown(int rootfd, uid_t slot, uid_t uid, gid_t gid)
{
    struct reown r = {.slot = slot, .uid = uid, .gid = gid};
    struct walk w = {.max_entries = SBXD_REOWN_MAX_ENTRIES,
                     .max_depth = SBXD_REOWN_MAX_DEPTH,
                     .pre = reown_entry,
                     .ctx = &r};
    int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    walk_tree(fd, &w);
    if (w.visited >= SBXD_REOWN_MAX_ENTRIES)
        LOG_EVENT("warn", "reown", LOG_S("message", "workspace too large: walk cut short"),
                  LOG_I("entries", w.visited));
    return r.changed;
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
