/* cgroup: a leaf of sbxd's delegated cgroup v2 per command (cgroup.h). It reaches every
 * process of the command, setsid and double-fork escapees included, enforces the memory,
 * pids and CPU limits, and measures the whole tree. */
#include <signal.h>

#include "sbxd/contain.h"

static int cg_prepare(struct contain *c, const char *id, const struct cg_limits *lim,
                      struct spawn_spec *spec, struct sbxd_err *err)
{
    if (cg_leaf_create(&c->iso->cg, id, lim, &c->leaf, err) < 0)
        return -1;
    /* The child writes "0" here before anything else runs (spawn.c). */
    spec->cgroup_procs_fd = c->leaf.procs_fd;
    return 0;
}

static void cg_kill(struct contain *c, struct reap_target *rt, bool reaper_locked, bool spawning)
{
    pid_t pid = __atomic_load_n(&rt->pid, __ATOMIC_ACQUIRE);
    contain_kill_group(pid, reaper_locked, spawning);
    cg_leaf_kill(&c->leaf);
}

static void cg_signal(struct contain *c, pid_t pid, int sig)
{
    if (c->leaf.dirfd < 0)
        kill(-pid, sig);
    else if (sig == SIGKILL)
        cg_leaf_kill(&c->leaf);
    else
        cg_leaf_signal(&c->leaf, sig);
}

static void cg_stats(struct contain *c, struct cg_stats *st)
{
    cg_leaf_stats(&c->leaf, st);
}

static void cg_release(struct contain *c, bool ran)
{
    (void)ran;
    if (c->leaf.dirfd >= 0)
        cg_leaf_destroy(&c->iso->cg, &c->leaf);
}

const struct contain_ops contain_cgroup_ops = {
    .name = "cgroup",
    .degrades_on_prepare =
        ISO_REQ_CGROUP | ISO_REQ_MEMORY | ISO_REQ_PIDS | ISO_REQ_CPU | ISO_REQ_TREE_KILL,
    .prepare = cg_prepare,
    .kill = cg_kill,
    .signal = cg_signal,
    .stats = cg_stats,
    .release = cg_release,
};
