/*
 * usage.h - how full the sandbox is: CPUs available and used, memory used and its limit,
 * disk used and total for the workspace and /tmp, and the commands, background processes
 * and contexts running. What GET /usage, MCP's sandbox_usage and `sbx usage` answer.
 *
 * Read from sbxd's cgroup v2 (the one every command's leaf is under: memory.current,
 * memory.max, cpu.max, cpu.stat) where it has one, else from /proc (meminfo, stat) and the
 * affinity mask, and for CPU where /proc/stat counts nothing (gVisor) from sbxd's rusage and
 * its reaped children's; the answer says which. A few small files read and two statvfs: no fork and
 * no directory walk, cheap enough to poll.
 *
 * CPU used is a percentage of the CPUs available over an interval: from the sample taken
 * by the previous read at least USAGE_MIN_INTERVAL_MS before (the start-up's for the first),
 * so that close reads by several clients do not shrink it to noise; the answer gives it.
 */
#ifndef SBXD_USAGE_H
#define SBXD_USAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "sbxd/jsonw.h"

struct cg_root;
struct exec_service;

#define USAGE_MIN_INTERVAL_MS 100

struct usage_disk {
    const char *name; /* "workspace", "tmp" */
    const char *path;
    bool ok;                    /* statvfs answered */
    uint64_t used, total, free; /* bytes; free: what an unprivileged user may still write */
};

struct usage {
    unsigned cpu_count;       /* CPUs available: the quota rounded up, else the affinity count */
    double cpu_limit;         /* the cgroup's quota in CPUs (cpu.max), 0 when none */
    double cpu_used_pct;      /* of cpu_limit (or cpu_count) over the interval, 0 to 100 */
    uint64_t cpu_interval_ms; /* the interval cpu_used_pct is over */
    const char *cpu_source;   /* "cgroup" (cpu.stat), "proc" (/proc/stat), "rusage" (sbxd's) */
    uint64_t mem_used, mem_total;
    const char *memory_source;  /* "cgroup", "cgroup+meminfo" (no memory.max), "meminfo" */
    struct usage_disk disks[2]; /* the workspace, then /tmp */
    unsigned commands, processes, contexts;
};

/* At start-up, once the cgroup probe ran: cg (its base when available, else sbxd's cgroup
 * as /proc/self/cgroup names it), the workspace root (rootfd, its path workspace, kept) and
 * the exec service whose running commands are counted. Takes the first CPU sample. */
void usage_init(const struct cg_root *cg, int rootfd, const char *workspace,
                const struct exec_service *exec);

/* What is used now. */
void usage_read(struct usage *u);

/* u's fields into an open JSON object. */
void usage_write(struct jsonw *w, const struct usage *u);

#endif
