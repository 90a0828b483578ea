/*
 * sandbox.h - the daemon's root: the state every front (REST, gRPC, MCP, and those to come)
 * serves from. main builds one, hands it to each front, and frees it once they have all
 * stopped; no front reaches another's state to get at it.
 *
 * It holds the workspace root, the hardening plan and isolation the probe chose, the exec
 * service (one admission queue and one set of limits for every front), the drain flag its
 * admission watches, the reset gate and the baseline a reset copies.
 *
 * The reset gate: resets run one at a time (reset_lock). While one runs, `resetting` is set
 * and fronts refuse their gated work; work under way holds work_lock shared (from
 * sandbox_work_enter to sandbox_work_leave), and the reset takes it exclusively to know that
 * work is over. reset_gen counts the resets done: work whose request came before one is
 * refused after it.
 */
#ifndef SBXD_SANDBOX_H
#define SBXD_SANDBOX_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/exec_service.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"

struct sandbox {
    const struct sbxd_config *cfg;
    int rootfd; /* the workspace root (O_PATH), owned by main */
    char workspace[PATH_MAX];
    const struct harden_plan *harden;
    struct isolation *iso;
    struct exec_service exec; /* what every front starts commands through */
    int64_t start_ns;
    bool draining;      /* atomic */
    bool resetting;     /* atomic */
    uint64_t reset_gen; /* atomic */
    uint64_t resets;    /* atomic: resets done (/metrics) */
    pthread_mutex_t reset_lock;
    pthread_rwlock_t work_lock;
    int baseline_fd; /* --workspace-baseline, or -1; owned */
};

/* Fill sb: rootfd and workspace (absolute) are the workspace root; baseline_fd (or -1) is
 * taken. The exec service's counters register with /metrics here. */
void sandbox_init(struct sandbox *sb, const struct sbxd_config *cfg, int rootfd,
                  const char *workspace, const struct harden_plan *harden, struct isolation *iso,
                  int baseline_fd);
/* Closes the baseline; the root stays main's. */
void sandbox_free(struct sandbox *sb);

/* Stop taking work: commands waiting for a slot are refused, fronts answer "draining". */
void sandbox_drain(struct sandbox *sb);
static inline bool sandbox_draining(const struct sandbox *sb)
{
    return __atomic_load_n(&sb->draining, __ATOMIC_ACQUIRE);
}
static inline bool sandbox_resetting(const struct sandbox *sb)
{
    return __atomic_load_n(&sb->resetting, __ATOMIC_SEQ_CST);
}
static inline uint64_t sandbox_reset_gen(const struct sandbox *sb)
{
    return __atomic_load_n(&sb->reset_gen, __ATOMIC_SEQ_CST);
}
/* Commands running now (admitted through the exec service). */
unsigned sandbox_running(const struct sandbox *sb);

/* Gated work begins: false when a reset runs, or one ran since gen (sandbox_reset_gen when
 * its request came). Otherwise work_lock is held shared until sandbox_work_leave. The flag is
 * looked at only once the lock is held, so work either sees it or is waited for. */
bool sandbox_work_enter(struct sandbox *sb, uint64_t gen);
void sandbox_work_leave(struct sandbox *sb);

/* A reset: begin (false when one runs already), then the gate is shut (resetting set);
 * quiesce waits up to s seconds for the work under way (true: it is over, and the lock is
 * held until sandbox_reset_end); end opens the gate with reset_gen bumped. */
bool sandbox_reset_begin(struct sandbox *sb);
void sandbox_reset_gate(struct sandbox *sb);
bool sandbox_reset_quiesce(struct sandbox *sb, int s);
void sandbox_reset_end(struct sandbox *sb, bool quiesced);
/* Give up a reset begun but not gated (sandbox_reset_begin, then an early error). */
void sandbox_reset_abandon(struct sandbox *sb);

#endif
