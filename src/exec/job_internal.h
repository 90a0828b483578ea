/*
 * job_internal.h - what the job modules share (job.h is the API).
 *
 *   job.c        start: pipes, limits, the backend's hold, the spawn; the one release path
 *   job_drive.c  the owner's loop (job_step): output, stdin, the exit, the result
 *   job_stdin.c  stdin writes and terminal sizes from other threads
 *   job_kill.c   kills and signals by the backend; the deadline keeper, the one place a
 *                job's deadline is enforced
 *
 * Lifecycle: job_start registers the job with the reaper and arms its spawn deadline;
 * job_step (the job's owner: the request's thread, a stream's reader, a background
 * process's driver) reads until the exit, computes the result and calls job_release;
 * job_free releases a job abandoned mid-run after killing it. Nothing else frees any part.
 */
#ifndef SBXD_JOB_INTERNAL_H
#define SBXD_JOB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sbxd/contain.h"
#include "sbxd/job.h"
#include "sbxd/reaper.h"

struct job {
    struct reap_target rt; /* first: the reaper's callbacks hand us this pointer */
    char id[25];
    int out_fd, err_fd, in_fd, cancel_fd;
    /* ev_fd wakes the owner: the reaper writes it when the job's process is reaped, a stdin
     * writer when it queued bytes. pidfd (where the kernel has it) becomes readable when the
     * process exits: the process was cloned without an exit signal, and the owner reaps it
     * itself (reaper.h); -1 under gVisor, where the reaper's ev_fd says it. */
    int ev_fd, pidfd;
    /* stdin: bytes queued for the child, written from job_step as it reads. Under in_lock,
     * with ev_fd and in_fd, because an interactive job (a background process) takes more
     * from other threads (job_stdin_write) while it runs. */
    pthread_mutex_t in_lock;
    pthread_cond_t in_cond; /* the queue moved, or stdin closed */
    uint8_t *stdin_data;
    size_t stdin_len, stdin_off, stdin_alloc;
    bool interactive;    /* stdin stays open when the queue is empty */
    bool in_eof;         /* close stdin once the queue is written */
    uint64_t in_queued;  /* bytes ever queued ... */
    uint64_t in_written; /* ... and written to the pipe */
    int pty_fd;          /* a terminal's master (its window size), or -1 */
    int64_t start_ns, drain_deadline_ns;
    int64_t deadline_ns; /* atomic: the keeper's (job_kill.c); 0 once released */
    uint64_t output_limit, output_total;
    int kill_reason; /* enum job_kill_reason, atomic */
    int spawning;    /* atomic: between clone and the end of spawn_child */
    /* The command's timeout is no longer than the spawn deadline: a kill while spawning is
     * then its timeout, not a start that never came (JOB_KILL_SPAWN). */
    bool spawn_is_timeout;
    bool exited;      /* the main process is reaped */
    bool final_drain; /* leftovers killed: read what is buffered, then end */
    bool finished;
    bool wide_out;    /* out_fd's pipe was widened: one of SBXD_STREAM_PIPES_MAX */
    int next_stream;  /* which pipe is read first, alternated so neither starves */
    bool cancel_peek; /* also poll the client socket for POLLIN and peek (see job_step) */
    /* A backend whose job process is a one-command init (contain_ops.init_reports): the init
     * reports the command's end through status_fd (spawn_ns_msg); rt is the init. */
    int status_fd;
    bool main_reported;
    int main_status;
    struct rusage main_ru;
    int64_t main_exit_ns;
    char argv0[64];           /* for a failed_to_start message reported by the init */
    struct contain box;       /* the containment backend's hold on the command (contain.h) */
    const struct cg_root *cg; /* the cgroups, for the limits only a cgroup can enforce */
    struct isolation *iso;
    struct job_result res;
};

static inline void job_close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Whether the job's process is a one-command init that reports the command's end. */
static inline bool job_init_reports(const struct job *job)
{
    return job->box.ops->init_reports;
}

/* The one release path (start failure, the end, an abandoned job): off the keeper's and the
 * reaper's lists, every descriptor closed, the backend's hold let go. Nothing of the
 * command may run any more, except for an abandoned job, killed just before. ran: the
 * command was started. Safe to call twice. */
void job_release(struct job *job, bool ran);

/* job_drive.c: a one-command init's job waits (until deadline_ns at the latest) for the init
 * to say whether the command was exec'd, so that a failed start is known when job_start
 * returns, as it is where the daemon clones the command itself. */
void job_await_exec(struct job *job, int64_t deadline_ns);

/* job_kill.c */
void job_kill_tree(struct job *job, bool reaper_locked);
void job_kill_own(struct job *job, enum job_kill_reason why); /* from the owner's thread */
/* Arm (or move) the job's deadline, monotonic ns; the keeper kills the tree then. */
void job_deadline_arm(struct job *job, int64_t at_ns);
void job_deadline_disarm(struct job *job);

/* job_stdin.c: stdin closes; writers waiting learn it. */
void job_close_stdin(struct job *job);

#endif
