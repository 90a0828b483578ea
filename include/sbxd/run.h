/*
 * run.h - one command's life, the same for every front: a front parses its wire format into
 * a typed exec_request (under run_policy), opens a run (admission, then the start), reads
 * it (run_next: output chunks with their offsets, or the exit; run_collect: all of it,
 * capped), and closes it (run_close: the audit line and its metrics, exactly once, an
 * abandoned run included; the running slot given back; everything freed). A front only
 * translates: it holds no job, no admission slot and no audit of its own.
 *
 * A front without a socket (a tool call answering into a sink) passes client_fd -1: its
 * run is then never cancelled by a hang-up, and its wait for a slot ends only by the stop
 * flag or the queue's timeout.
 *
 * The struct is the caller's storage (on its stack, or inside its own per-answer state),
 * so that a run costs no allocation of its own; its fields are run.c's.
 */
#ifndef SBXD_RUN_H
#define SBXD_RUN_H

#include "sbxd/exec_service.h"

/* Who opens the run, and how it is answered. */
struct run_front {
    enum exec_front front; /* metrics label and audit field */
    enum metrics_mode mode;
    int client_fd;      /* a socket whose hang-up ends the wait and cancels the command; -1 */
    const bool *stop;   /* the front's drain flag (NULL: none) */
    const char *client; /* who asked, for the audit line (NULL: not said) */
    /* Whether the front still wants the command once its slot is there (a call cancelled
     * while it waited is not started); NULL: always. */
    bool (*wanted)(void *cls);
    void *cls;
    /* The front gives the running slot back itself, once its answer is out (REST over
     * libmicrohttpd: server.c when the response is sent), instead of run_close. A run that
     * could not be opened has given its slot back already. */
    bool keeps_slot;
};

/* The next thing a run says (run_next). */
enum run_event { RUN_NONE, RUN_OUTPUT, RUN_EXIT };

struct run_chunk {
    enum run_event type;
    int stream;          /* 1 stdout, 2 stderr */
    const uint8_t *data; /* RUN_OUTPUT: len bytes, inside the caller's buffer */
    size_t len;
    uint64_t offset; /* of data in its stream: the bytes of that stream said before */
};

/* Room run_next keeps at the start of the caller's buffer, for a character held back. */
#define RUN_HOLD_ROOM 8

struct run {
    struct exec_service *svc;
    struct job *job;
    struct exec_request req;
    enum metrics_mode mode;
    bool keeps_slot, audited, exited;
    double queued_ms;
    char client[64];
    uint64_t offset[3];  /* bytes of stdout (1) and stderr (2) said so far */
    uint8_t carry[3][4]; /* utf8: the start of a character cut off by a read */
    uint8_t ncarry[3];
};

/* The bounds a request of this mode is parsed under (exec_service_policy). */
void run_policy(const struct exec_service *s, enum metrics_mode mode, struct request_policy *pol);

/* Admit and start req (taken over, also on failure; req->front is set from f). 0, or -1 with
 * err: refused (SBXD_E_BUSY, SBXD_E_UNAVAILABLE), or the start failed (counted as such), or
 * with SBXD_EF_GONE set when the client hung up (or was no longer wanted) before the start:
 * there is nobody to answer. r needs no run_close after -1. */
int run_open(struct run *r, struct exec_service *s, const struct run_front *f,
             struct exec_request *req, struct sbxd_err *err);

/* Wait up to timeout_ms (-1: no limit) for the next chunk into buf (buflen, the first
 * RUN_HOLD_ROOM bytes of which are the run's): with encoding utf8 a chunk never ends inside
 * a character (its start waits for the rest; a cut one left at the exit comes last, alone);
 * then RUN_EXIT once (audited then), and RUN_EXIT again on every later call. */
void run_next(struct run *r, int timeout_ms, uint8_t *buf, size_t buflen, struct run_chunk *c);

/* Cancel the run as its client's hang-up would: its whole tree killed, its status canceled.
 * Safe from another thread while the owner reads the run (a cancellation that arrives by
 * another request: MCP's notifications/cancelled, DELETE /mcp). */
void run_cancel(struct run *r);

/* The output a synchronous answer may hold per stream: --max-output-bytes, or the request's
 * output limit when lower. */
size_t run_output_cap(const struct exec_service *s, const struct exec_request *req);

/* Drive the run to its end, its stdout and stderr into out and errb (initialised here): up to
 * run_output_cap bytes each with keep RUN_KEEP_CAP; else (the agent-sandbox SDK's faces, whose
 * client sees no truncation flag) up to keep each, the part beyond run_output_cap from the
 * pool all running commands share (--output-memory-bytes). Audited at the exit. */
#define RUN_KEEP_CAP SIZE_MAX
void run_collect(struct run *r, size_t keep, struct outbuf *out, struct outbuf *errb);

/* The run is over for its front: an abandoned run (its client went away before the exit) is
 * cancelled, its tree killed, and driven to its end so that its result is final; audited
 * unless it was; its slot given back (unless the front keeps it); freed. */
void run_close(struct run *r);

/* Admit and start req (taken over) as a background process: the slot is held only while it
 * starts; *queued_ms (unless NULL): how long it waited for it. NULL with err as run_open. The
 * process's driver (background.c) audits it at its end. */
struct bg_proc *run_start_process(struct exec_service *s, const struct run_front *f,
                                  struct exec_request *req, double *queued_ms,
                                  struct sbxd_err *err);

/*
 * A run whose owner starts and drives its job itself: a background process (background.c),
 * whose job has an environment of its own and whose driver, a thread of the process's,
 * takes its output with run_next into the ring, the exit audited there once, whichever way
 * the process ended (its own exit, a DELETE, a reset, its timeout, the shutdown).
 * run_prepare takes req over (the job's request lives in r); no slot is the run's (a
 * process gives its slot back once it started: run_start_process); its audit line says
 * neither queue time nor client. run_start_job starts it (-1 with err: r holds no job).
 * Once driven, run_close it as any run; run_discard one whose driver never ran: its job is
 * killed and it is freed without an audit line (its start counted as failed).
 */
void run_prepare(struct run *r, enum metrics_mode mode, struct exec_request *req);
int run_start_job(struct run *r, const struct job_env *env, struct sbxd_err *err);
void run_discard(struct run *r);

/* A chunk says at most this many bytes more than run_next read into its buffer: the start of
 * a character held back from the chunk before. */
#define RUN_CARRY_MAX 3

static inline struct job *run_job(const struct run *r)
{
    return r->job;
}
static inline const char *run_id(const struct run *r)
{
    return job_id(r->job);
}
static inline pid_t run_pid(const struct run *r)
{
    return job_pid(r->job);
}
static inline const struct job_result *run_result(const struct run *r)
{
    return job_result(r->job);
}
static inline const struct exec_request *run_request(const struct run *r)
{
    return &r->req;
}

#endif
