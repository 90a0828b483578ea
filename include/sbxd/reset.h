/*
 * reset.h - Clean (POST /reset, `sbx reset`): the sandbox made as a fresh one, so that a warm
 * pod serves its next task with nothing of the last one's.
 *
 * In order: no command may start any more (exec_service_close); the warm kernels are killed
 * and every context is deleted (an execution in progress ends "died"); every live job is
 * killed (commands, whose clients get their "canceled" answer, background processes,
 * gRPC's); the front quiesces (env->quiesce: requests under way, which may write files,
 * end); every background process is forgotten; what still runs as the command user or a uid of
 * --uid-range (a `setsid nohup` that left its tree where no backend follows it) is killed from
 * /proc (each of their uids killed as a whole first, by the kill helper); their System V IPC
 * objects and POSIX message queues are removed (ipc_clear.h); the workspace is emptied
 * (fs_clear_dir), then given the baseline's tree when there is one; what the command users own
 * in the directories anybody may write (/tmp, /var/tmp, /dev/shm, /run/lock... and those
 * fs_find_shared finds once, at start-up: reset_prepare) is removed; commands may start again
 * and warm kernels are made anew.
 *
 * One reset at a time (the caller sees to it).
 */
#ifndef SBXD_RESET_H
#define SBXD_RESET_H

#include <stdbool.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/err.h"
#include "sbxd/exec_service.h"
#include "sbxd/files.h"
#include "sbxd/harden.h"
#include "sbxd/ipc_clear.h"
#include "sbxd/isolation.h"

struct reset_env {
    struct exec_service *svc;
    int rootfd;      /* the workspace root */
    int baseline_fd; /* --workspace-baseline's directory, or -1 */
    const struct harden_plan *harden;
    const struct isolation *iso;
    const struct sbxd_config *cfg;
    /* Called once every job was killed and before anything is removed; returns once the
     * front's requests under way have ended (they can no longer start anything). */
    void (*quiesce)(void *arg);
    void *arg;
};

struct reset_report {
    unsigned processes;         /* killed: commands and background processes live, strays */
    unsigned strays;            /* killed from /proc afterwards (counted in processes too) */
    unsigned strays_left;       /* still found when the time for them was up */
    unsigned contexts;          /* deleted */
    unsigned background;        /* background processes forgotten, running or ended */
    struct fs_clear_stats ws;   /* what the workspace held */
    struct fs_clear_stats tmp;  /* what the command users had in the shared directories */
    struct ipc_clear_stats ipc; /* their SysV IPC objects and POSIX message queues */
    bool baseline;              /* the workspace was given the baseline's tree */
    struct fs_copy_stats restored;
    double duration_ms;
};

/* At start-up, once: find the directories anybody may write (fs_find_shared: 1.5 s under
 * gVisor) on a thread of its own, so that no reset pays for it but one that comes before it is
 * over, which waits. Only env's rootfd, baseline_fd, harden, iso and cfg are read. */
void reset_prepare(const struct reset_env *env);

/* Reset the sandbox. 0, or -1 with err when something could not be removed or restored
 * (the report says what was; commands may start again either way). */
int reset_run(const struct reset_env *env, struct reset_report *rep, struct sbxd_err *err);

/* The reset's fixed limits. */

/* A reset waits at most this long for the killed jobs' processes to be reaped, then keeps
 * killing what still runs as the command users for at most this long. */
#define SBXD_RESET_REAP_MS   5000
#define SBXD_RESET_STRAYS_MS 2000

#endif
