/*
 * sandbox.c - the daemon's root (sandbox.h): what every front serves from, and the reset gate
 * between a reset and the work of every front.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "sbxd/exec_metrics.h"
#include "sbxd/sandbox.h"
#include "sbxd/timeutil.h"
#include "sbxd/usage.h"

void sandbox_init(struct sandbox *sb, const struct sbxd_config *cfg, int rootfd,
                  const char *workspace, const struct harden_plan *harden, struct isolation *iso,
                  int baseline_fd)
{
    *sb = (struct sandbox){.cfg = cfg,
                           .rootfd = rootfd,
                           .harden = harden,
                           .iso = iso,
                           .start_ns = time_mono_ns(),
                           .baseline_fd = baseline_fd};
    snprintf(sb->workspace, sizeof(sb->workspace), "%s", workspace);
    sb->exec = (struct exec_service){.cfg = cfg,
                                     .rootfd = rootfd,
                                     .workspace = sb->workspace,
                                     .harden = harden,
                                     .iso = iso,
                                     .out_pool = {.limit = (size_t)cfg->output_memory_bytes}};
    pthread_mutex_init(&sb->reset_lock, NULL);
    pthread_rwlock_init(&sb->work_lock, NULL);
    exec_metrics_register();
    usage_init(&iso->cg, rootfd, sb->workspace, &sb->exec);
}

void sandbox_free(struct sandbox *sb)
{
    if (sb->baseline_fd >= 0)
        close(sb->baseline_fd);
    sb->baseline_fd = -1;
    pthread_rwlock_destroy(&sb->work_lock);
    pthread_mutex_destroy(&sb->reset_lock);
}

void sandbox_drain(struct sandbox *sb)
{
    __atomic_store_n(&sb->draining, true, __ATOMIC_RELEASE);
    exec_service_wake_all(&sb->exec); /* commands waiting for a slot are refused now */
}

unsigned sandbox_running(const struct sandbox *sb)
{
    return exec_service_running(&sb->exec);
}

bool sandbox_work_enter(struct sandbox *sb, uint64_t gen)
{
    if (pthread_rwlock_tryrdlock(&sb->work_lock) != 0)
        return false;
    if (sandbox_resetting(sb) || sandbox_reset_gen(sb) != gen) {
        pthread_rwlock_unlock(&sb->work_lock);
        return false;
    }
    return true;
}

void sandbox_work_leave(struct sandbox *sb)
{
    pthread_rwlock_unlock(&sb->work_lock);
}

bool sandbox_reset_begin(struct sandbox *sb)
{
    return pthread_mutex_trylock(&sb->reset_lock) == 0;
}

void sandbox_reset_abandon(struct sandbox *sb)
{
    pthread_mutex_unlock(&sb->reset_lock);
}

void sandbox_reset_gate(struct sandbox *sb)
{
    __atomic_store_n(&sb->resetting, true, __ATOMIC_SEQ_CST);
}

bool sandbox_reset_quiesce(struct sandbox *sb, int s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += s;
    return pthread_rwlock_timedwrlock(&sb->work_lock, &until) == 0;
}

void sandbox_reset_end(struct sandbox *sb, bool quiesced)
{
    /* Work whose request came before this point is refused from now on (work_enter). */
    __atomic_add_fetch(&sb->reset_gen, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&sb->resets, 1, __ATOMIC_RELAXED);
    if (quiesced)
        pthread_rwlock_unlock(&sb->work_lock);
    __atomic_store_n(&sb->resetting, false, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&sb->reset_lock);
}
