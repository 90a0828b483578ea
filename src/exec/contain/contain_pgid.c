/* pgid: the process group alone. A process that calls setsid (or double-forks into a new
 * session) leaves it and outlives the kill: the degraded mode, reported as such. */
#include <signal.h>

#include "sbxd/contain.h"

static int pgid_prepare(struct contain *c, const char *id, const struct cg_limits *lim,
                        struct spawn_spec *spec, struct sbxd_err *err)
{
    (void)c, (void)id, (void)lim, (void)spec, (void)err;
    return 0;
}

static void pgid_kill(struct contain *c, struct reap_target *rt, bool reaper_locked, bool spawning)
{
    pid_t pid = __atomic_load_n(&rt->pid, __ATOMIC_ACQUIRE);
    (void)c;
    contain_kill_group(pid, reaper_locked, spawning);
}

static void pgid_signal(struct contain *c, pid_t pid, int sig)
{
    (void)c;
    kill(-pid, sig);
}

static void pgid_release(struct contain *c, bool ran)
{
    (void)c, (void)ran;
}

const struct contain_ops contain_pgid_ops = {
    .name = "pgid",
    .prepare = pgid_prepare,
    .kill = pgid_kill,
    .signal = pgid_signal,
    .release = pgid_release,
};
