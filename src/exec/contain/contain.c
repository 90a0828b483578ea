#include <signal.h>
#include <string.h>

#include "sbxd/contain.h"

void contain_choose(struct isolation *iso)
{
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
