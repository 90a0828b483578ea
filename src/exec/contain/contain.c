#include <signal.h>
#include <string.h>

#include "sbxd/contain.h"

/*
 * The backend in force when sbxd cannot run commands at all (--degraded-ok, isolation.c: the
 * switch to --user is impossible): each command is refused, 503 with the reason, before
 * anything is made for it, rather than left to fail in its child while health checks say ok.
 */
static int refuse_prepare(struct contain *c, const char *id, const struct cg_limits *lim,
                          struct spawn_spec *spec, struct sbxd_err *err)
{
    (void)id, (void)lim, (void)spec;
    char why[512] = "";
    isolation_degraded(c->iso, why, sizeof(why));
    return sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, "sbxd is degraded and runs no command: %s", why);
}

static void refuse_kill(struct contain *c, struct reap_target *rt, bool reaper_locked,
                        bool spawning)
{
    (void)c, (void)rt, (void)reaper_locked, (void)spawning; /* nothing ever started */
}

static void refuse_signal(struct contain *c, pid_t pid, int sig)
{
    (void)c, (void)pid, (void)sig;
}

static void refuse_release(struct contain *c, bool ran)
{
    (void)c, (void)ran;
}

static const struct contain_ops refuse_ops = {
    .name = "none",
    .prepare = refuse_prepare,
    .kill = refuse_kill,
    .signal = refuse_signal,
    .release = refuse_release,
};

void contain_choose(struct isolation *iso)
{
    /* Degraded at start can only be for good (--degraded-ok): no command runs. */
    if (isolation_degraded(iso, NULL, 0)) {
        iso->contain = &refuse_ops;
        return;
    }
    switch (iso->tree_kill) {
    case ISO_KILL_CGROUP:
        iso->contain = &contain_cgroup_ops;
        break;
    case ISO_KILL_PIDNS:
        iso->contain = spawn_ns_slots() ? &contain_pidns_slot_ops : &contain_pidns_init_ops;
        break;
    case ISO_KILL_UID:
        iso->contain = &contain_uid_ops;
        break;
    case ISO_KILL_PGID:
        iso->contain = &contain_pgid_ops;
        break;
    }
}

void contain_init(struct contain *c, struct isolation *iso, int rootfd, uid_t owner_uid,
                  gid_t owner_gid)
{
    memset(c, 0, sizeof(*c));
    c->ops = iso->contain;
    c->iso = iso;
    c->leaf.dirfd = c->leaf.procs_fd = -1;
    c->uid = (uid_t)-1;
    c->rootfd = rootfd;
    c->owner_uid = owner_uid;
    c->owner_gid = owner_gid;
}

void contain_kill_group(pid_t pid, bool reaper_locked, bool spawning)
{
    if (pid <= 0)
        return;
    /* The group id cannot be reused while any member lives, so this reaches only the job's
     * own processes. */
    kill(-pid, SIGKILL);
    /* A child still in spawn_child may not have called setsid yet; unreaped, its pid is its
     * own (the caller holds the reaper's lock). */
    if (reaper_locked && spawning)
        kill(pid, SIGKILL);
}
