/*
 * uid: each running command has a uid of --uid-range to itself (isolation.h). Whatever it
 * leaves behind, in whatever session or group, still runs as that uid, and a helper that no
 * command can signal kills it all with one kill(-1) as that uid. When the command is over,
 * what it made in the workspace is handed back to the command user and the uid goes back.
 */
#include <errno.h>
#include <signal.h>

#include "sbxd/contain.h"

static int uid_prepare(struct contain *c, const char *id, const struct cg_limits *lim,
                       struct spawn_spec *spec, struct sbxd_err *err)
{
    (void)id, (void)lim;
    if (!uid_slot_take(&c->iso->slots, &c->uid)) {
        c->uid = (uid_t)-1;
        return sbxd_fail(err, SBXD_E_BUSY, EBUSY,
                         "every uid of --uid-range is in use by a running command; retry later");
    }
    spec->uid = c->uid;
    return 0;
}

static void uid_kill(struct contain *c, struct reap_target *rt, bool reaper_locked, bool spawning)
{
    contain_kill_group(__atomic_load_n(&rt->pid, __ATOMIC_ACQUIRE), reaper_locked, spawning);
    if (c->uid != (uid_t)-1)
        uid_slot_kill(c->uid);
}

static void uid_signal(struct contain *c, pid_t pid, int sig)
{
    if (c->uid != (uid_t)-1)
        uid_slot_signal(c->uid, sig);
    else
        kill(-pid, sig);
}

static void uid_release(struct contain *c, bool ran)
{
    if (c->uid == (uid_t)-1)
        return;
    if (ran)
        uid_slot_reown(c->rootfd, c->uid, c->owner_uid, c->owner_gid);
    uid_slot_put(&c->iso->slots, c->uid);
    c->uid = (uid_t)-1;
}

const struct contain_ops contain_uid_ops = {
    .name = "uid",
    .prepare = uid_prepare,
    .kill = uid_kill,
    .signal = uid_signal,
    .release = uid_release,
};
