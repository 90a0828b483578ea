/*
 * harden.h - what every command gives up before its first instruction: the daemon's
 * credentials and capabilities, the ability to gain privileges, a set of dangerous syscalls,
 * and its claim to survive an out-of-memory kill.
 *
 * Everything is decided and compiled at start-up (harden_init): the seccomp programs are
 * built with libseccomp there and kept as BPF, because the child may make raw syscalls only
 * (see spawn.h). harden_child() is that child side.
 */
#ifndef SBXD_HARDEN_H
#define SBXD_HARDEN_H

#include <linux/filter.h>
#include <stdbool.h>
#include <sys/types.h>

#include "sbxd/err.h"

struct harden_plan {
    bool switch_user; /* the daemon is root: commands run as uid:gid, no supplementary groups */
    uid_t uid;
    gid_t gid;
    bool drop_caps;     /* clear ambient, inheritable, permitted, effective */
    bool drop_bounding; /* the daemon's bounding set was emptied at start: commands inherit it */
    bool seccomp;       /* the deny-list could be built and is installed */
    int daemon_oom_score_adj; /* sbxd's own, for /healthz (main.c sets it) */
    bool oom_adjust;          /* commands get oom_score_adj 1000 (isolation's oom_scored; main.c) */
    bool pidns;               /* commands start under a PID namespace's init */
    bool pidns_own_proc;      /* ... with /proc of their own (main.c sets it) */
    bool group_share;         /* uid isolation: umask 002, files shared through the gid */
    struct sock_fprog filter; /* the deny-list, loaded on spawning threads */
    struct sock_fprog filter_init;  /* pidns: the rest of it, loaded by each init */
    struct sock_fprog filter_nonet; /* sockets of AF_UNIX only, stacked per command */
    /* An IPC namespace per command: the filter lets clone make one only when its child_tid and
     * tls arguments (which the kernel ignores without the flags that use them) are this key,
     * which only sbxd's spawning threads know. 0: none (CLONE_NEWIPC refused outright). */
    unsigned long clone_key;
    /* Landlock, where the kernel has it: each command enters a domain of its own, which
     * keeps it from ptrace-level access (/proc/PID/mem, pidfd_getfd) to anything outside it
     * and, from ABI 6, from signalling it: other commands, sbxd and sbxd's helpers. */
    int landlock_abi; /* 0: no Landlock here */
    int landlock_fd;  /* the ruleset every command restricts itself with, or -1 */
};

/* How far commands are kept from each other's processes (reads of memory and fds, signals)
 * beyond the containment backend: Landlock domains with signal scoping, without it, or none. */
enum harden_scope { HARDEN_SCOPE_NONE, HARDEN_SCOPE_PTRACE, HARDEN_SCOPE_PTRACE_SIGNAL };
enum harden_scope harden_landlock_scope(const struct harden_plan *p);

/* Decide the plan for commands running as uid:gid (ignored when the daemon is not root) and
 * build the seccomp programs: with pidns, the spawning threads' filter leaves out what making a
 * PID namespace takes (filter_init refuses it to inits and commands); with ipcns, it lets
 * clone make an IPC namespace with clone_key only. Fails only when something that should work
 * does not. */
int harden_init(struct harden_plan *p, uid_t uid, gid_t gid, bool pidns, bool ipcns,
                struct sbxd_err *err);
void harden_free(struct harden_plan *p);

/* Load the deny-list (and no_new_privs) on the calling thread, once per thread, before it
 * spawns: its children inherit the loaded filter instead of each compiling their own. */
int harden_thread(const struct harden_plan *p, struct sbxd_err *err);

/* In the child, before it closes the daemon's fds: no_new_privs, then a Landlock domain of
 * its own (nothing when the plan has none). Raw syscalls only; -1 with errno and *step. */
int harden_child_landlock(const struct harden_plan *p, const char **step);

/*
 * In the child, after setsid/fds/rlimits, right before execve: oom_score_adj 1000, drop
 * groups and switch user (to `uid` instead of the plan's when it is not (uid_t)-1: uid
 * isolation), clear every capability set, no_new_privs, then seccomp. Raw syscalls only.
 * Returns 0, or -1 with errno set and *step naming what failed.
 */
int harden_child(const struct harden_plan *p, bool network, uid_t uid, const char **step);

/* The syscalls the deny-list refuses (NULL-terminated), for /healthz and the tests. */
extern const char *const harden_denied_syscalls[];

#endif
