/*
 * pidns: a PID namespace per command (spawn.h). In a namespace slot the command is sbxd's
 * child and the slot's init, pid 1 there, kills and reaps whatever it left when asked; under
 * a one-command init the job's process is that init, which reports the command's own end on
 * a pipe, and whose death kills every process of the namespace.
 */
#include <signal.h>

#include "sbxd/contain.h"
#include "sbxd/reaper.h"

static int slot_prepare(struct contain *c, const char *id, const struct cg_limits *lim,
                        struct spawn_spec *spec, struct sbxd_err *err)
{
    (void)id, (void)lim, (void)err;
    spec->pidns = true;
    /* spawn_child takes the slot, and says which use of it the command is. */
    spec->ns_slot = &c->slot;
    spec->ns_seq = &c->ns_seq;
    return 0;
}

static void slot_kill(struct contain *c, struct reap_target *rt, bool reaper_locked, bool spawning)
{
    pid_t pid = __atomic_load_n(&rt->pid, __ATOMIC_ACQUIRE);
    contain_kill_group(pid, reaper_locked, spawning);
    if (c->slot)
        spawn_ns_end(c->slot, c->ns_seq);
}

static void slot_signal(struct contain *c, pid_t pid, int sig)
{
    if (c->slot)
        spawn_ns_signal(c->slot, c->ns_seq, sig);
    else
        kill(-pid, sig);
}

static void slot_release(struct contain *c, bool ran)
{
    (void)ran;
    if (c->slot) {
        spawn_ns_put(c->slot);
        c->slot = NULL;
    }
}

const struct contain_ops contain_pidns_slot_ops = {
    .name = "pidns",
    .degrades_on_spawn = ISO_REQ_PIDNS | ISO_REQ_TREE_KILL,
    .prepare = slot_prepare,
    .kill = slot_kill,
    .signal = slot_signal,
    .release = slot_release,
};

static int init_prepare(struct contain *c, const char *id, const struct cg_limits *lim,
                        struct spawn_spec *spec, struct sbxd_err *err)
{
    (void)c, (void)id, (void)lim, (void)err;
    spec->pidns = true;
    return 0;
}

/* The init: its death kills every process of the namespace, escapees included. Only while
 * it is not reaped, since then its pid may be another's. */
static void init_kill(struct contain *c, struct reap_target *rt, bool reaper_locked, bool spawning)
{
    (void)c, (void)spawning;
    pid_t pid = __atomic_load_n(&rt->pid, __ATOMIC_ACQUIRE);
    if (!reaper_locked)
        reaper_kill(rt, SIGKILL);
    else if (pid > 0)
        kill(pid, SIGKILL);
}

static void init_signal(struct contain *c, pid_t pid, int sig)
{
    (void)c;
    spawn_ns_init_signal(pid, sig);
}

static void init_release(struct contain *c, bool ran)
{
    (void)c, (void)ran;
}

const struct contain_ops contain_pidns_init_ops = {
    .name = "pidns",
    .init_reports = true,
    .degrades_on_spawn = ISO_REQ_PIDNS | ISO_REQ_TREE_KILL,
    .prepare = init_prepare,
    .kill = init_kill,
    .signal = init_signal,
    .release = init_release,
};
