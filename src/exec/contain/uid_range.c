/*
 * uid_range.c - the mechanism of the uid backend (contain_uid.c, isolation.h): the range
 * checked and cleared at start, the kill helper that becomes a command's uid, the slots
 * handed out one per running command, and the re-own of a slot's files afterwards.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/files.h"
#include "sbxd/isolation.h"
#include "sbxd/exec_limits.h"
#include "sbxd/log.h"
#include "sbxd/walk.h"

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

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
    volatile bool became; /* set by the helper once it is uid (its memory is ours) */
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
    struct uid_signal *u = arg;
    if (syscall(SYS_setresuid, helper_uid, u->uid, helper_uid) < 0)
        syscall(SYS_exit_group, 1);
    u->became = true;
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
 * reap is false it is reaped by the reaper. *became: it took the uid (and so sent sig): known
 * without a wait, since clone returns only once the helper is gone (CLONE_VFORK).
 */
static pid_t uid_helper_clone(uid_t uid, int sig, bool reap, int *status, bool *became)
{
    *became = false;
    if (helper_uid == (uid_t)-1)
        return -1;
    _Alignas(64) char stack[16384];
    struct uid_signal arg = {uid, sig, false};
    pthread_mutex_lock(&helper_lock);
    pid_t pid = clone(uid_killer, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &arg);
    pthread_mutex_unlock(&helper_lock);
    *became = pid > 0 && arg.became;
    if (pid > 0 && reap && waitpid(pid, status, 0) < 0)
        return -1;
    return pid;
}

static pid_t uid_helper_run(uid_t uid, int sig, bool reap, int *status)
{
    bool became;
    return uid_helper_clone(uid, sig, reap, status, &became);
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

bool uid_range_probe(struct isolation *iso, const struct sbxd_config *cfg, bool may_use)
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

/* ---------------------------------------------------------------------------------- */
/* Strays: what still runs as the command users after a reset's kills                  */

static bool in_spans(unsigned long u, const struct fs_uid_span *spans, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (u >= spans[i].first && u - spans[i].first < spans[i].count)
            return true;
    return false;
}

/* What /proc/PID/status says of a process: its state and its real, effective and saved
 * uids. false when it is gone. */
struct proc_ids {
    char state;
    unsigned long uid[3];
};

static bool proc_ids(pid_t pid, struct proc_ids *p)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool ok = false;
    p->state = '?';
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "State: %c", &p->state) == 1)
            continue;
        if (sscanf(line, "Uid: %lu %lu %lu", &p->uid[0], &p->uid[1], &p->uid[2]) == 3) {
            ok = true;
            break;
        }
    }
    fclose(f);
    return ok;
}

static bool proc_live(const struct proc_ids *p)
{
    return p->state != 'Z' && p->state != 'X';
}

/* Whether the live process pid (a zombie is dead already) has a real, effective or saved
 * uid in the spans (the file-system uid is left out: it grants no signal, and sbxd's own
 * threads take the command user's for file access). */
static bool runs_as(pid_t pid, const struct fs_uid_span *spans, unsigned n)
{
    struct proc_ids p;
    return proc_ids(pid, &p) && proc_live(&p) &&
           (in_spans(p.uid[0], spans, n) || in_spans(p.uid[1], spans, n) ||
            in_spans(p.uid[2], spans, n));
}

/* SIGKILL to pid, which runs_as said is one of them: through a pidfd, on which the uids are
 * checked again, so that a pid reused since the look is never hit; without pidfd (gVisor)
 * by pid. Whether it was sent. */
static bool kill_stray(pid_t pid, const struct fs_uid_span *spans, unsigned n)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0)
        return (errno == ENOSYS || errno == EPERM) && kill(pid, SIGKILL) == 0;
    bool sent =
        runs_as(pid, spans, n) && syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) == 0;
    close(pfd);
    return sent;
}

/* Uids signalled as a whole in one pass of uid_procs_kill. */
#define KILL_UIDS_MAX 64
/* The kill helpers one reset remembers (the latest ones). */
#define KILL_HELPERS_MAX 128

struct strays {
    const struct fs_uid_span *spans;
    unsigned n;
    pid_t seen[256]; /* killed already (a killed process stays a while before it is a zombie) */
    unsigned nseen, killed;
    uid_t uids[KILL_UIDS_MAX]; /* the uids to signal as a whole */
    unsigned nuids;
    bool helper; /* the kill helper may signal by uid (uid_whole_signal) */
    /* The helpers this reset made, last first out: one that has signalled is on its way out
     * but may still show in /proc with the uid it signalled as (effective), and is neither a
     * stray nor a sign that something else runs as the helper's uid. */
    pid_t helpers[KILL_HELPERS_MAX];
    unsigned nhelpers;
};

static bool is_our_helper(const struct strays *s, pid_t pid)
{
    unsigned n = s->nhelpers < KILL_HELPERS_MAX ? s->nhelpers : KILL_HELPERS_MAX;
    for (unsigned i = 0; i < n; i++)
        if (s->helpers[i] == pid)
            return true;
    return false;
}

static void note_uid(struct strays *s, uid_t uid)
{
    for (unsigned i = 0; i < s->nuids; i++)
        if (s->uids[i] == uid)
            return;
    if (s->nuids < KILL_UIDS_MAX)
        s->uids[s->nuids++] = uid;
}

/* One look at /proc: each live process of the spans killed by pidfd and its uid noted for the
 * kill by uid. A live process whose real or saved uid is the helper's makes the helper unfit
 * (its kill(-1) would reach that process too). Returns how many were found. */
static unsigned strays_look(struct strays *s, pid_t self)
{
    unsigned found = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        struct proc_ids p;
        if (pid == self || is_our_helper(s, pid) || !proc_ids(pid, &p) || !proc_live(&p))
            continue;
        if (s->helper && (p.uid[0] == helper_uid || p.uid[2] == helper_uid)) {
            s->helper = false;
            LOG_EVENT("warn", "reset",
                      LOG_S("message", "a process runs as the kill helper's uid (the last of "
                                       "--uid-range): the reset kills by /proc alone"),
                      LOG_I("pid", pid), LOG_I("uid", helper_uid));
        }
        int k = in_spans(p.uid[0], s->spans, s->n)   ? 0
                : in_spans(p.uid[1], s->spans, s->n) ? 1
                : in_spans(p.uid[2], s->spans, s->n) ? 2
                                                     : -1;
        if (k < 0)
            continue;
        found++;
        note_uid(s, (uid_t)p.uid[k]);
        if (!kill_stray(pid, s->spans, s->n))
            continue;
        bool again = false;
        for (unsigned i = 0; i < s->nseen && !again; i++)
            again = s->seen[i] == pid;
        if (!again) {
            s->killed++;
            if (s->nseen < sizeof(s->seen) / sizeof(s->seen[0]))
                s->seen[s->nseen++] = pid;
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* sig to every process of each noted uid at once, from the kill helper: its real and saved
 * uids are the last of --uid-range, which no command has (so none can stop it, and its
 * kill(-1) reaches nothing of sbxd's: sbxd's real and saved uids stay root's). false when the
 * helper could not run. */
static bool uids_signal(struct strays *s, int sig)
{
    for (unsigned i = 0; i < s->nuids; i++) {
        /* Not waited for: the reaper may collect it first (it collects every child). */
        bool became;
        pid_t pid = uid_helper_clone(s->uids[i], sig, false, NULL, &became);
        if (pid > 0)
            s->helpers[s->nhelpers++ % KILL_HELPERS_MAX] = pid;
        if (pid < 0 || !became)
            return false;
    }
    return true;
}

unsigned uid_procs_kill(const struct fs_uid_span *spans, unsigned n, int ms, unsigned *left)
{
    pid_t self = getpid();
    struct strays s = {.spans = spans, .n = n};
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *left = 0;
    if (!n)
        return 0;
    /*
     * A process that forks and exits at once, over and over (a fork-runner), is hardly ever
     * alive when a look at /proc reads it: a look finds nothing, and the next task's workspace
     * gets its writes. So each uid a command may have is first frozen as a whole: kill(-1,
     * SIGSTOP) as that uid, by the helper that no command can signal, is atomic with respect
     * to fork (a child being forked then is stopped too, or never made), so nothing of that
     * uid forks any more and the look that follows sees every one of them, counts it and
     * kills it by pidfd; then kill(-1, SIGKILL) as the uid takes whatever the look missed.
     * The reset is over when two passes in a row found nothing. The single uids (the command
     * user) are signalled so each pass; the uids of a range (uid isolation's) once a look
     * found one of them (each running command's own was killed as a whole with its job).
     * Without the helper (the range is not mapped here, or a process runs as its uid), looks
     * alone: never ended by one that found nothing, but by several in a row.
     */
    s.helper = helper_uid != (uid_t)-1 && !in_spans(helper_uid, spans, n);
    unsigned quiet = 0;
    for (;;) {
        for (unsigned i = 0; i < n; i++)
            if (spans[i].count == 1)
                note_uid(&s, spans[i].first);
        bool helped = s.helper && uids_signal(&s, SIGSTOP);
        unsigned found = strays_look(&s, self);
        helped = helped && s.helper && uids_signal(&s, SIGKILL);
        /* (what this look found stays noted: the next pass freezes its uid first) */
        quiet = found ? 0 : quiet + 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        bool over = quiet >= (helped ? 2u : 5u);
        if (over || (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= ms) {
            *left = over ? 0 : found;
            return s.killed;
        }
        if (found)
            usleep(2000); /* the kernel completes the kills; then another look */
    }
}
