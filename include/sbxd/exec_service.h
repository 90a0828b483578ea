/*
 * exec_service.h - what every front that starts commands goes through (the REST routes
 * today; a gRPC or a context front next), below HTTP: admission, the request policy, the
 * job environment, the start, the collection of a command's output, the events a streamed
 * command is told in, and the audit line with its metrics, each written once.
 *
 * A front builds one struct exec_service from the daemon's configuration and isolation,
 * parses a request under exec_service_policy(), takes a running slot with
 * exec_service_admit() (waiting its turn when --max-running are taken), starts it with
 * exec_service_start() (or exec_service_start_process() for a background process), drives
 * it (exec_service_collect, or job_step into exec_event_*), reports it with
 * exec_service_audit(), and gives the slot back with exec_service_leave() once its answer
 * is out (a background process's: once it has started).
 */
#ifndef SBXD_EXEC_SERVICE_H
#define SBXD_EXEC_SERVICE_H

#include "sbxd/background.h"
#include "sbxd/config.h"
#include "sbxd/exec_metrics.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/metrics.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"

struct exec_service {
    const struct sbxd_config *cfg;
    int rootfd;            /* the workspace root */
    const char *workspace; /* ... and its absolute path */
    const struct harden_plan *harden;
    struct isolation *iso;
    unsigned running;  /* atomic: admitted commands whose answer is not out yet */
    unsigned starting; /* atomic: commands (and processes) whose process is not started yet */
    /* The admission queue (service.c's lock): commands waiting for a running slot, oldest
     * first. Zeroed is empty. */
    struct exec_waiter *wait_head, *wait_tail;
    unsigned waiting;
    bool closed; /* atomic: a reset is under way: no command starts (exec_service_close) */
    /* What the answers of the agent-sandbox SDK's faces keep beyond --max-output-bytes, for
     * all commands together (--output-memory-bytes). */
    struct outbuf_pool out_pool;
};

/* The bounds a request is parsed under. A background process (MX_BACKGROUND) gets the
 * longest timeout allowed unless it asks for less, and may ask for a terminal. */
void exec_service_policy(const struct exec_service *s, enum metrics_mode mode,
                         struct request_policy *pol);

/* How a command waits for its running slot, and what the wait came to. */
struct exec_admit {
    int client_fd;    /* the client's socket: its hang-up ends the wait (-1: none) */
    const bool *stop; /* atomic: once true (the daemon drains) the wait ends (NULL: never) */
    double queued_ms; /* out: how long it waited (0: a slot was free) */
    bool gone;        /* out: the client hung up while it waited: there is nobody to answer */
};

/* A running slot among --max-running, for a command whose answer a client waits for or a
 * background process while it starts. When all are taken the command waits, first come
 * first served (a freed slot goes to the oldest waiter, never to a newcomer), in a queue
 * of at most --max-queued, for up to --queue-timeout-ms. 0, or -1 with SBXD_E_BUSY (the
 * queue is full, or the wait was too long: counted as that limit's rejection),
 * SBXD_E_UNAVAILABLE (a->stop), or with a->gone set. */
int exec_service_admit(struct exec_service *s, struct exec_admit *a, struct sbxd_err *err);
/* The admitted command's answer is out, or will never be: its slot goes to the oldest
 * waiter, or is free. */
void exec_service_leave(struct exec_service *s);
/* Wake every waiter to look at its stop flag now (the drain has begun). */
void exec_service_wake_all(struct exec_service *s);
/* A reset: from now on every start (a command, a background process, a context's) and
 * every admission is refused with SBXD_E_UNAVAILABLE, and waiters for a slot are woken to be
 * refused; returns once no start that began before is still under way (each is bounded by
 * the spawn deadline), so every command started is a live job that job_kill_all reaches.
 * exec_service_open takes commands again. */
void exec_service_close(struct exec_service *s);
void exec_service_open(struct exec_service *s);
unsigned exec_service_running(const struct exec_service *s);
unsigned exec_service_starting(const struct exec_service *s);

/* Start req (mode MX_SYNC or MX_STREAM): cancel_fd is a socket whose hang-up cancels the
 * command (-1: none). NULL with err when it cannot run at all (counted as a start
 * failure). */
struct job *exec_service_start(struct exec_service *s, enum metrics_mode mode,
                               const struct exec_request *req, int cancel_fd, struct sbxd_err *err);
/* Start req as a background process (background.h; req is taken over, also on failure).
 * NULL with err. */
struct bg_proc *exec_service_start_process(struct exec_service *s, struct exec_request *req,
                                           struct sbxd_err *err);
/* The same for a process a code context owns (bg_start_owned): not one of /processes.
 * stdin_file > 0: the descriptor it gets as its stdin (else a pipe, as every background
 * process has); start_dir: an absolute directory it starts in instead of its cwd (which is
 * still checked), or NULL (a kernel's own directory: context.h). */
struct bg_proc *exec_service_start_owned(struct exec_service *s, struct exec_request *req,
                                         int stdin_file, const char *start_dir,
                                         struct sbxd_err *err);

/* Drive job to its end, its stdout and stderr into out and errb (capped outbufs). */
void exec_service_collect(struct job *job, struct outbuf *out, struct outbuf *errb);

/* The notice a face whose client cannot see sbxd's truncation flags (the agent-sandbox SDK's)
 * puts at the end of stderr when out or errb was cut: a line per stream cut, saying how many
 * of its bytes were left out and why (why_cap: what caps this face, and how to raise it; or
 * the pool that ran dry). Each stream cut ends on a whole character first. At most
 * EXEC_NOTICE_MAX bytes. */
#define EXEC_NOTICE_MAX 512
void exec_output_notice(struct outbuf *out, struct outbuf *errb, const char *why_cap);

/* The front held `bytes` of memory for a command's answer, now given back: when that is a
 * lot, the next spawn first resets the daemon's peak RSS (spawn.h), which the kernel would
 * otherwise count into the next command's memory_peak_bytes. */
void exec_service_held(size_t bytes);

/* A command is over: its metrics, and the audit line (who ran what, where, how it ended,
 * how long it waited for its slot; event "exec", or "process" for a background one).
 * queued_ms < 0: not said; client may be NULL. */
void exec_service_audit(enum metrics_mode mode, const char *id, const struct exec_request *req,
                        const struct job_result *r, double queued_ms, const char *client);

/* The fields of a command's result (design 3.2) into an open object: stdout and stderr only
 * with out/errb (a streamed answer sent them as events). */
void exec_result_fields(struct jsonw *w, const char *id, const struct job_result *r,
                        const struct outbuf *out, const struct outbuf *errb,
                        enum exec_encoding enc);

/* "queued_ms": how long the command waited for its running slot, into an open object. */
void exec_queued_field(struct jsonw *w, double queued_ms);

/* The events a streamed command is told in (the JSON objects of design 3.3), written once
 * for /execute's stream and a background process's output. queued_ms and offset are said
 * when not NULL. */
void exec_event_start(struct jsonw *w, const char *id, pid_t pid, const uint64_t *offset,
                      const double *queued_ms);
/* A chunk of output: stream 1 stdout, 2 stderr, 0 a terminal's; bytes: also say its size. */
void exec_event_output(struct jsonw *w, int stream, const void *data, size_t n, bool utf8,
                       uint64_t offset, bool bytes);
/* The end: the result object (type "exit"); output_end, when not NULL, is said too. */
void exec_event_exit(struct jsonw *w, const char *id, const struct job_result *r,
                     enum exec_encoding enc, const uint64_t *output_end);
/* "stdout" (1), "stderr" (2), "pty" (0: a terminal's one stream). */
const char *exec_stream_name(int stream);

#endif
