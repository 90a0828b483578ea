/*
 * contain.h - the containment backends: how one command's process tree is held, signalled,
 * killed, measured and let go.
 *
 * One implementation per backend (src/exec/contain/), behind one table of operations:
 *   cgroup       a cgroup v2 leaf per command: cgroup.kill, cgroup.events, memory.peak
 *   pidns-slot   a namespace slot (spawn.h): the command is sbxd's child in a PID namespace
 *                whose long-lived init empties it when asked
 *   pidns-init   a one-command init (gVisor, a non-root sbxd): the job's process is the init,
 *                which reports the command's end on a pipe; its death kills the namespace
 *   uid          a uid of --uid-range per command; kill(-1) as that uid (isolation.h)
 *   pgid         the process group alone (setsid escapes it: the degraded mode)
 *   (refuse)     none runs: sbxd cannot switch to --user and was started with --degraded-ok
 * contain_choose() picks the one in force once, at start-up, from what isolation_setup()
 * found; a job holds a struct contain with that table and the backend's state, and nothing
 * outside src/exec/contain/ asks which backend it is.
 */
#ifndef SBXD_CONTAIN_H
#define SBXD_CONTAIN_H

#include <stdbool.h>
#include <sys/types.h>

#include "sbxd/cgroup.h"
#include "sbxd/err.h"
#include "sbxd/isolation.h"
#include "sbxd/reaper.h"
#include "sbxd/spawn.h"

struct contain;

struct contain_ops {
    const char *name;
    /* The job's process is a one-command init that reports the command's own end (struct
     * spawn_ns_msg) on spec->status_fd, which the job then reads. */
    bool init_reports;
    /* ISO_REQ_* mechanisms that a failure of prepare, or of the spawn itself, shows broken. */
    unsigned degrades_on_prepare, degrades_on_spawn;
    /* Before the spawn: take what the command needs (a cgroup leaf, a uid) and say in spec
     * how the child enters it. -1 with err. */
    int (*prepare)(struct contain *c, const char *id, const struct cg_limits *lim,
                   struct spawn_spec *spec, struct sbxd_err *err);
    /* SIGKILL to the whole tree, escapees included. rt is the job's process (pid 0 before
     * the clone stored it); reaper_locked: the caller holds the reaper's lock and has seen it
     * unreaped, so its pid is still the job's own; spawning: it may not have called setsid. */
    void (*kill)(struct contain *c, struct reap_target *rt, bool reaper_locked, bool spawning);
    /* sig to every process of the tree (under the reaper's lock, pid unreaped). */
    void (*signal)(struct contain *c, pid_t pid, int sig);
    /* What the backend measured of the whole tree (NULL: nothing beyond rusage). */
    void (*stats)(struct contain *c, struct cg_stats *st);
    /* Give everything back, once nothing of the command runs. ran: it was started (a uid's
     * files are then handed back to the command user). Safe to call twice. */
    void (*release)(struct contain *c, bool ran);
};

struct contain {
    const struct contain_ops *ops;
    struct isolation *iso;
    struct cg_leaf leaf;        /* cgroup */
    struct spawn_ns_slot *slot; /* pidns-slot: the slot (set by spawn_child) ... */
    unsigned ns_seq;            /* ... and which use of it */
    uid_t uid;                  /* uid: the command's own, (uid_t)-1 when none */
    int rootfd;                 /* uid: the workspace, whose files are handed back ... */
    uid_t owner_uid;            /* ... to the command user */
    gid_t owner_gid;
};

/* Pick the backend in force (after spawn_pool_start: whether namespace slots run). */
void contain_choose(struct isolation *iso);

/* A job's handle on the backend in force: state empty, nothing taken yet. */
void contain_init(struct contain *c, struct isolation *iso, int rootfd, uid_t owner_uid,
                  gid_t owner_gid);

/* The backends, one file each in src/exec/contain/. */
extern const struct contain_ops contain_cgroup_ops, contain_pidns_slot_ops, contain_pidns_init_ops,
    contain_uid_ops, contain_pgid_ops;

/* The process-group kill every backend but pidns-init starts with: the child called setsid,
 * so its pid is its group; one still in spawn (not yet a group leader) is killed by pid. */
void contain_kill_group(pid_t pid, bool reaper_locked, bool spawning);

#endif
