/*
 * reaper.h - the one place that waits for children.
 *
 * Where the kernel has pidfd, a command is cloned with no exit signal (spawn_spec.quiet_exit):
 * its job polls the process's pidfd and reaps it itself (reaper_try). The kernel turns the
 * exit signal back to SIGCHLD at the command's execve, so the main thread then leaves SIGCHLD
 * out of what it waits for (it stays blocked and pending) and is not woken at all. Elsewhere
 * (gVisor) the main thread receives SIGCHLD (blocked in every thread) and calls reaper_reap(),
 * which reaps every exited child with wait4(-1, __WALL) - jobs' children and any orphan handed to
 * sbxd (as PID 1 or a subreaper) - and hands each job's status and rusage to the registered target,
 * waking it through its eventfd. The main thread also calls it on every tick, which collects a
 * quiet child nobody waits for any more (an abandoned job's). Both take the lock, so whichever
 * comes first delivers, once.
 *
 * A target is registered *before* its child is cloned, with pid 0; the kernel fills the pid
 * (CLONE_PARENT_SETTID) before the child can run, so no exit is ever unmatched.
 */
#ifndef SBXD_REAPER_H
#define SBXD_REAPER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

struct reap_target {
    pid_t pid;     /* written by the kernel at clone time */
    int notify_fd; /* eventfd written once the child is reaped */
    bool reaped;   /* set by the reaper, under its lock */
    int status;    /* wait status */
    struct rusage ru;
    int64_t reaped_ns; /* monotonic time it was reaped */
    struct reap_target *next;
};

void reaper_init(void);

void reaper_add(struct reap_target *t);
void reaper_remove(struct reap_target *t);

/* Reap every exited child and notify the matching targets. Returns how many were reaped. */
int reaper_reap(void);

/* Reap t's child now if it has exited (a fast path that skips the SIGCHLD round trip).
 * Returns whether t is reaped. */
bool reaper_try(struct reap_target *t);

/* Send sig to t's process unless it has been reaped (its pid may then be another's). */
void reaper_kill(struct reap_target *t, int sig);

/* Call fn(t, arg) under the reaper's lock if t is registered and not reaped yet, so that
 * its pid and everything its owner frees only after removing it are still its own (fn must
 * not block). Returns whether fn was called. */
bool reaper_call(struct reap_target *t, void (*fn)(struct reap_target *t, void *arg), void *arg);

/* Copy the reaped status of t (false while not reaped yet). */
bool reaper_result(struct reap_target *t, int *status, struct rusage *ru);

/* Call fn on every registered target under the reaper's lock (fn must not block). */
void reaper_foreach(void (*fn)(struct reap_target *t, void *arg), void *arg);

#endif
