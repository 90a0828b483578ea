/*
 * job.h - one execution of one command, whatever the mode.
 *
 * A job owns the child, its pipes, its deadline and its result. The caller drives it with
 * job_step(), which waits for the next thing that happens and returns it as an event:
 * a chunk of output, or the final exit. Synchronous /execute collects the chunks into
 * capped buffers; a streamed response turns each into an NDJSON/SSE event; a background
 * process keeps them in a ring. The HTTP layer never touches pids or pipes.
 *
 * Kills reach the whole tree by the backend in force (contain.h): on timeout (the deadline
 * keeper, whether or not anybody drives the job), output limit, cancellation (client gone,
 * shutdown), and for leftovers after the main process exits. job_internal.h has the layout.
 */
#ifndef SBXD_JOB_H
#define SBXD_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/cgroup.h"
#include "sbxd/err.h"
#include "sbxd/exec_result.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"
#include "sbxd/request.h"

enum job_kill_reason {
    JOB_KILL_NONE = 0,
    JOB_KILL_TIMEOUT,
    JOB_KILL_OUTPUT,
    JOB_KILL_CANCEL,
    JOB_KILL_SPAWN, /* still not exec'd at its spawn deadline (SBXD_SPAWN_DEADLINE_MS) */
};

enum job_event_type {
    JOB_EV_NONE,   /* the caller's wait ran out; nothing happened */
    JOB_EV_OUTPUT, /* len bytes of stream (1 stdout, 2 stderr) are in the caller's buffer */
    JOB_EV_EXIT,   /* the job is over; job_result() is final */
};

struct job_event {
    enum job_event_type type;
    int stream;
    size_t len;
};

struct job;

/* Everything the job needs from the daemon, fixed at start. */
struct job_env {
    int rootfd;                       /* workspace root, for cwd resolution */
    int cancel_fd;                    /* a socket whose hang-up cancels the job, or -1 */
    const struct harden_plan *harden; /* what every command gives up (harden.h) */
    struct isolation *iso;            /* the backend in force (isolation.h) */
    uint64_t memory_max;              /* default memory limit (--memory-max), 0: none */
    uint64_t pids_max;                /* default pids limit (--pids-max), 0: none */
    bool interactive; /* stdin stays open for job_stdin_write (a background process) */
    bool streamed;    /* output is sent as it comes: stdout gets a wide pipe where one is free */
    int stdin_file;   /* > 0: a descriptor the command gets as its stdin, in place of a pipe or
                       * /dev/null (a code context's connection file: context.h) */
    const char *start_dir; /* an absolute directory the command starts in, in place of its
                            * cwd (still checked): a kernel's own (context.h); or NULL */
};

/*
 * Start req's command. Returns NULL with err set when the request cannot run at all (cwd
 * missing or outside the workspace, no resources); a command that cannot be exec'd still
 * yields a job, which ends at once with status failed_to_start.
 */
struct job *job_start(const struct exec_request *req, const struct job_env *env,
                      struct sbxd_err *err);

/* Wait up to timeout_ms (-1: no limit) for the next event; output goes into buf. */
void job_step(struct job *job, int timeout_ms, void *buf, size_t buflen, struct job_event *ev);

/* Kill the job's process tree for a reason (first reason wins). Safe from any thread; does
 * nothing once the job's process is reaped (its end kills what is left). */
void job_kill(struct job *job, enum job_kill_reason why);

/* Send sig to every process of the job's tree, by the backend in force. Safe from any thread.
 * false with errno when it was not sent: ESRCH, the job's process has exited (reaped or not);
 * else the kernel's refusal (EPERM). */
bool job_signal(struct job *job, int sig);

/* Interactive jobs: queue n bytes for the command's stdin and wait until they are in its pipe
 * (job_step writes them as the command reads); eof then closes stdin (on a terminal: its
 * end-of-file character). *written says how many went in. -1 with SBXD_E_CONFLICT when stdin
 * is closed, or closes before all went in (err->flags: SBXD_EF_ENDED, the command ended;
 * SBXD_EF_INPUT_CLOSED, it closed its stdin). Safe from any thread. */
int job_stdin_write(struct job *job, const void *data, size_t n, bool eof, uint64_t *written,
                    struct sbxd_err *err);
bool job_stdin_open(struct job *job);

/* A job on a terminal (exec_request.pty): set its size (the foreground process group gets
 * SIGWINCH). -1 with SBXD_E_CONFLICT for a job without one, or ended. */
int job_resize(struct job *job, unsigned cols, unsigned rows, struct sbxd_err *err);

/* The deadline keeper (job_kill.c): the thread that enforces every job's deadline, the
 * spawn's and the command's timeout, whether or not anybody drives the job. Start it before
 * the first job_start (-1 with errno when the thread cannot be made); stop it at exit. */
int job_keeper_start(void);
void job_keeper_stop(void);

/* Kill every live job (shutdown, a reset); returns how many were live. */
unsigned job_kill_all(enum job_kill_reason why);
/* Jobs whose process has not been reaped yet. */
unsigned job_live(void);

/* Whether the client on socket fd hung up, from its poll events (revents; asked for with
 * POLLRDHUP, and POLLIN while *peek). POLLRDHUP says so, but gVisor never reports it: there a
 * readable socket is peeked at, until it shows the next pipelined request (then *peek turns
 * false: only a hang-up proper can tell from then on). The one check of every wait on a
 * client (the job's cancel_fd, the admission queue, a process's stdin writer). */
bool job_client_gone(int fd, short revents, bool *peek);
/* The same without a wait of the caller's: fd polled at once (-1: never gone). */
bool job_client_hung_up(int fd, bool *peek);

const struct job_result *job_result(const struct job *job);
const char *job_id(const struct job *job);
pid_t job_pid(const struct job *job);

void job_free(struct job *job);

#endif
