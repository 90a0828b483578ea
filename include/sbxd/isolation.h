/*
 * isolation.h - which containment backend commands get, found out at start-up and stated
 * as it is.
 *
 * isolation_setup() probes every mechanism (cgroup v2 delegation with a self-test, PID
 * namespaces directly or through a user namespace, a private uid range, clone3,
 * CLONE_INTO_CGROUP, pidfd) and picks the tree-kill backend: the one --isolation forces, or
 * for auto the strongest that works here: cgroup, then pidns, then uid, then pgid (the
 * process group, which setsid escapes: the one degraded mode). Whatever the backend, each
 * command gets an IPC namespace of its own where one can be made (else the daemon's, said).
 *
 * The uid backend gives each running command a uid of its own from --uid-range: a kill(-1)
 * made as that uid then reaches every process the command left behind, whatever group or
 * session it moved to. Commands keep the command user's gid and a group-writable umask, and
 * what a command created in the workspace is handed back to the command user afterwards, so
 * files stay readable and writable for later commands.
 *
 * --require-isolation names mechanisms that must be in force: start-up fails without them,
 * and should one stop working at run time (a cgroup leaf cannot be made, a namespace cannot
 * be created) the commands needing it are refused and /healthz answers 503 "degraded" until
 * it works again.
 */
#ifndef SBXD_ISOLATION_H
#define SBXD_ISOLATION_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/cgroup.h"
#include "sbxd/config.h"
#include "sbxd/harden.h"

enum iso_tree_kill { ISO_KILL_CGROUP, ISO_KILL_PIDNS, ISO_KILL_UID, ISO_KILL_PGID };

const char *iso_tree_kill_name(enum iso_tree_kill k);

/* Bits of --require-isolation. */
enum {
    ISO_REQ_CGROUP = 1 << 0,
    ISO_REQ_MEMORY = 1 << 1,
    ISO_REQ_PIDS = 1 << 2,
    ISO_REQ_CPU = 1 << 3,
    ISO_REQ_SECCOMP = 1 << 4,
    ISO_REQ_TREE_KILL = 1 << 5, /* any whole-tree kill: cgroup, pidns or uid */
    ISO_REQ_PIDNS = 1 << 6,
    ISO_REQ_UID = 1 << 7,
    ISO_REQ_CAPABILITIES = 1 << 8, /* the bounding set emptied too */
    ISO_REQ_NON_ROOT = 1 << 9,     /* commands never run as uid 0 */
    ISO_REQ_IPC = 1 << 10,         /* an IPC namespace per command */
};

struct uid_slots {
    uid_t first;
    unsigned count;
    pthread_mutex_t lock;
    uint8_t *used; /* count flags */
    unsigned next; /* where the search for a free one starts */
};

struct contain_ops;

struct isolation {
    enum iso_tree_kill tree_kill;
    const struct contain_ops *contain; /* its implementation (contain.h: contain_choose) */
    struct cg_root cg;                 /* cg.available: each command gets a leaf */
    /* What the probe found, whether or not it is used. */
    bool pidns_ok, pidns_userns, pidns_own_proc;
    char pidns_why[160];
    bool uid_ok;
    char uid_why[160];
    /* Each command gets an IPC namespace of its own (spawn_ipcns_probe): found and used. */
    bool ipcns_ok;
    char ipcns_why[160];
    bool clone3, clone_into_cgroup, pidfd;
    /* Whether the kernel's OOM killer weighs oom_score_adj: a child at 1000 shows a score.
     * gVisor has no OOM killer of its own (the host's sees the sandbox as one process), and
     * there neither the commands' score nor the daemon's is written. */
    bool oom_scored;
    struct uid_slots slots; /* ISO_KILL_UID */
    unsigned required;      /* ISO_REQ_* */
    int degraded;           /* atomic: 1, a required mechanism failed at run time (until it
                             * works again); 2, sbxd cannot run commands as --user and was
                             * started with --degraded-ok (for good) */
    char degraded_why[512]; /* under degraded_lock */
    pthread_mutex_t degraded_lock;
};

/*
 * Probe, choose as cfg->isolation says and parse cfg->require_isolation. Call before any
 * thread exists (the probes fork). Returns 0; -1 when the forced backend is impossible here,
 * -2 for an unknown word in the required list (both logged, err says it in one line).
 */
int isolation_setup(struct isolation *iso, const struct sbxd_config *cfg, struct sbxd_err *err);

/* After harden_init: whether every required mechanism is in force. 0, or -1 with err. */
int isolation_check_required(const struct isolation *iso, const struct harden_plan *h,
                             struct sbxd_err *err);

/* A mechanism in `req` (ISO_REQ_*) failed for a command (isolation_degrade), or worked
 * again (isolation_recovered, cheap when nothing is degraded). Only required mechanisms
 * degrade the daemon; returns whether this one is required. */
bool isolation_degrade(struct isolation *iso, unsigned req, const char *what);
void isolation_recovered(struct isolation *iso);

/* sbxd must run no command at all (with --degraded-ok: a setting that would let commands do
 * what they must not, such as read the token): degraded for good, for why. Before
 * contain_choose. */
void isolation_degrade_for_good(struct isolation *iso, const char *why);

/* Whether degraded, with why (may be NULL). */
bool isolation_degraded(struct isolation *iso, char *why, size_t len);

/* What every command gets, per mechanism, stated as it is: the one reading of the isolation
 * in force, for /healthz, /metrics and the start-up log alike. */
struct iso_description {
    const char *cgroup, *memory, *pids, *cpu, *tree_kill, *seccomp, *capabilities;
    const char *inter_command; /* what keeps commands apart (docs/security.md) */
    const char *ipc;           /* "own": an IPC namespace per command; "shared": sbxd's */
    const char *proc;          /* pidns only ("own", "shared"), else NULL */
    bool userns;               /* pidns only: inside a user namespace of sbxd's own */
    char user[48];             /* "uid:gid", or the uid range's "first-last:gid" */
};

/* memory_max: --memory-max (0: none), which becomes RLIMIT_AS without a cgroup. */
void isolation_describe(const struct isolation *iso, const struct harden_plan *h,
                        uint64_t memory_max, struct iso_description *d);

/* The uid mechanism (exec/contain/uid_range.c). At start: whether --uid-range can serve
 * (root, at least 2 uids, mapped, the helper can become them); with may_use, processes left
 * running as its uids are killed first. false with iso->uid_why. */
bool uid_range_probe(struct isolation *iso, const struct sbxd_config *cfg, bool may_use);

/* uid backend: take a free uid (false when all are in use), and give it back. */
bool uid_slot_take(struct uid_slots *s, uid_t *uid);
void uid_slot_put(struct uid_slots *s, uid_t uid);

/* Kill every process whose real or saved uid is uid, from a helper that becomes it: no
 * escapee survives. Safe from any thread, also under the reaper's lock. */
void uid_slot_kill(uid_t uid);
/* The same with any signal (0: none, a probe that the helper can become uid). */
void uid_slot_signal(uid_t uid, int sig);

/* Hand what uid `slot` owns beneath the workspace root to uid:gid, with group permissions
 * like the owner's (files stay shared between the slots). Fd-based throughout: a command
 * that renames things meanwhile cannot redirect it outside the workspace or to another
 * file. Returns the number of entries changed. */
unsigned uid_slot_reown(int rootfd, uid_t slot, uid_t uid, gid_t gid);

/*
 * Kill every process whose real, effective or saved uid lies in one of the n spans, sbxd
 * itself never: each uid of a span of one (the command user), and each uid a look at /proc
 * finds, as a whole, with kill(-1) from the kill helper (whose real and saved uid is the last
 * of --uid-range: no command can stop it, and it reaches nothing of sbxd's), and what /proc
 * shows one by one (through a pidfd where the kernel has one, the uids checked again on it,
 * so a pid reused meanwhile is never hit); pass after pass until the kill by uid reaches
 * nothing (or only the dead), or, without the helper, until several looks in a row find
 * nothing; for at most ms. Returns how many were killed (one for what the kill by uid reached
 * and no look saw); *left: how many the last look found, when the time was up.
 */
struct fs_uid_span;

/* The uids commands run as, in v (room for 2): the command user, and under uid isolation the
 * range (but its last, the kill helper's). None when sbxd is not root: commands then run as
 * sbxd's own uid, which is no sign of a command's (sbxd's other files and processes have it
 * too), and root is never one. Returns how many spans. */
unsigned iso_command_uids(const struct harden_plan *h, const struct isolation *iso,
                          const struct sbxd_config *cfg, struct fs_uid_span *v);

unsigned uid_procs_kill(const struct fs_uid_span *spans, unsigned n, int ms, unsigned *left);

#endif
