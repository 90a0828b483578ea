/*
 * cgroup.h - a cgroup v2 leaf per command, where sbxd's cgroup is delegated to it.
 *
 * At start-up cg_probe() finds sbxd's own cgroup (from /proc/self/cgroup, under the cgroup2
 * mount at /sys/fs/cgroup), moves the daemon into a leaf of it ("sbxd", because a cgroup
 * with controllers enabled for children may hold no processes itself), removes leaves left
 * by a previous run, enables memory, pids and cpu for the leaves, and proves with two tiny
 * children that a pids and a memory limit really bite (under gVisor they are accounting
 * only). Nothing is ever created outside sbxd's own cgroup.
 *
 * Adoption: when sbxd was started by a wrapper that stays in the same cgroup (tini,
 * dumb-init, `docker run --init`, `sh -c 'sbxd ...; ...'`), the kernel refuses to enable the
 * controllers (EBUSY) while those processes are there. cg_probe() then moves every process
 * that cgroup.procs of sbxd's own cgroup lists into the "sbxd" leaf, next to the daemon, and
 * enables the controllers as if sbxd had been alone; r->adopted counts them. A process of
 * any other cgroup is never moved.
 *
 * Per command: cg_leaf_create() makes "job-<id>" with its limits; the child moves itself in
 * before exec (spawn.h); cg_leaf_kill() kills everything in it (cgroup.kill: setsid and
 * double-fork escapees included); cg_leaf_stats() reads peak memory, OOM kills and CPU;
 * cg_leaf_destroy() kills, waits until empty and removes it.
 */
#ifndef SBXD_CGROUP_H
#define SBXD_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbxd/err.h"

struct cg_root {
    bool available;
    int basefd; /* sbxd's own cgroup: the parent of every leaf */
    char base[PATH_MAX];
    bool memory, pids, cpu; /* controllers enabled for the leaves */
    bool memory_enforced;   /* the self-test saw a memory limit kill */
    bool pids_enforced;     /* the self-test saw a pids limit refuse a fork */
    bool has_kill;          /* cgroup.kill (Linux 5.14) */
    unsigned adopted;       /* processes of sbxd's cgroup moved into its leaf (0: it was alone) */
    char why[256];          /* when not available: why */
};

/* Detect, claim and self-test. Never fails: r->available and r->why say what was found.
 * Call before any thread exists (the self-test forks). */
void cg_probe(struct cg_root *r);

struct cg_limits {
    uint64_t memory_bytes; /* 0: none */
    uint64_t pids;         /* 0: none */
    double cpu_quota;      /* CPUs, e.g. 0.5; 0: none */
};

struct cg_leaf {
    int dirfd;    /* O_PATH of the leaf, -1 when none */
    int procs_fd; /* its cgroup.procs, open for writing: the child writes "0" to move in */
    char name[48];
};

int cg_leaf_create(const struct cg_root *r, const char *id, const struct cg_limits *lim,
                   struct cg_leaf *leaf, struct sbxd_err *err);

/* Kill every process in the leaf. Safe to call repeatedly and from any thread. */
void cg_leaf_kill(const struct cg_leaf *leaf);
/* Send sig to every process in the leaf (as cgroup.procs lists them now). */
void cg_leaf_signal(const struct cg_leaf *leaf, int sig);

struct cg_stats {
    bool has_peak;
    uint64_t memory_peak; /* bytes */
    uint64_t oom_kills;
    bool has_cpu;
    uint64_t cpu_usec;
};

void cg_leaf_stats(const struct cg_leaf *leaf, struct cg_stats *st);

/* Kill, wait (bounded) until empty, remove. Logs a leaf it could not remove. */
void cg_leaf_destroy(const struct cg_root *r, struct cg_leaf *leaf);

#endif
