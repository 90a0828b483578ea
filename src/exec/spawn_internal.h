/*
 * spawn_internal.h - what the spawn modules share with each other and nothing else calls.
 * include/sbxd/spawn.h stays the contract for the rest of sbxd.
 *
 *   spawn.c        spawn_child and the clone child (child_main), up to execve
 *   spawn_peak.c   the daemon's peak RSS (clear_refs), and so whether children share its memory
 *   spawn_probe.c  the PID-namespace probe, and the setup every namespace's init starts with
 *   spawn_init.c   the one-command PID-namespace init (where children cannot share memory)
 *   spawn_pool.c   namespace slots: PID namespaces whose init serves command after command
 *
 * Functions marked NO_SANITIZE run in a child between clone and execve, or in an init that
 * never execs: raw syscalls only, no malloc, no locks, no stdio.
 */
#ifndef SBXD_SPAWN_INTERNAL_H
#define SBXD_SPAWN_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>

#include "sbxd/err.h"
#include "sbxd/harden.h"
#include "sbxd/spawn.h"

/* Child code runs on a stack whose sanitizer shadow state belongs to another thread. */
#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

/* What the child reports back through the memory it shares with its parent until execve. */
struct child_ctx {
    const struct spawn_spec *spec;
    int err;
    const char *step;
    int report_fd; /* without CLONE_VM: where err and step are written instead, else -1 */
};

/* spawn.c: the clone child (arg: a struct child_ctx), and close_range over [lo, hi]. */
NO_SANITIZE int spawn_child_main(void *arg);
NO_SANITIZE int spawn_close_span(unsigned lo, unsigned hi);

/* spawn_peak.c: open clear_refs (spawn_init); reset the peak before a spawn if it grew;
 * whether that reset works (then children always share the daemon's memory); whether the
 * next child shares the daemon's memory until execve (CLONE_VM), looked at each spawn. */
void spawn_peak_init(void);
void spawn_peak_reset_if_grown(void);
bool spawn_peak_resets(void);
bool spawn_vm_shared(void);

/* spawn_probe.c: the clone flags of a command's namespaces, whether they include a user
 * namespace, and an init's first step (maps, mounts, /proc: 0, 1 without its own /proc, or
 * -1 with errno and *step). */
unsigned long spawn_ns_clone_flags(void);
bool spawn_ns_userns(void);
/* CLONE_NEWIPC when each command gets an IPC namespace of its own (spawn_ipcns_probe), else 0:
 * on the clone that makes the command, or on its one-command init's. */
unsigned long spawn_ipc_clone_flag(void);
NO_SANITIZE int spawn_ns_setup(const char **step);

/* spawn_init.c: everything an init does before it can start a command (0, or -1 with errno
 * and *step); start a one-command init for spec (its pid, or -1 with err set). */
NO_SANITIZE int spawn_ns_prepare(const struct harden_plan *h, const char **step);
pid_t spawn_ns_init_start(const struct spawn_spec *spec, pid_t *pid_slot, struct sbxd_err *err);

/*
 * spawn_pool.c: whether this thread failed to leave a slot's PID namespace (it must not spawn
 * again); take a slot for spec's command and enter its PID namespace, filling *slot_spec (spec
 * with the slot's mount namespace and working directory; *slot_cwd: an fd to close, or -1) and
 * *spec->ns_slot, *spec->ns_seq (0, or -1 with err set); after the clone (pid < 0: it failed),
 * go back to the daemon's PID namespace.
 */
bool spawn_slot_stuck(void);
int spawn_slot_enter(const struct spawn_spec *spec, struct spawn_spec *slot_spec, int *slot_cwd,
                     struct sbxd_err *err);
void spawn_slot_leave(const struct spawn_spec *spec, int slot_cwd, pid_t pid);

#endif
