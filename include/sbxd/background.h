/*
 * background.h - background processes (/processes): jobs that outlive their request.
 *
 * Each runs under the same job model as /execute (job.h), driven by a thread of its own that
 * moves its output into a ring (ring.h) as it comes, so the process never waits for a
 * reader and survives every client. Readers replay and follow the ring by absolute offset;
 * signals and the terminal size go straight to the job; stdin writes queue for a second
 * thread of the process's, started by its first write, that feeds them to the job. An ended
 * process keeps its result and output for the retention period, then is forgotten.
 *
 * One table per daemon. Every bg_proc handed out carries a reference: give it back with
 * bg_put(); the process's memory goes with the last one.
 */
#ifndef SBXD_BACKGROUND_H
#define SBXD_BACKGROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/err.h"
#include "sbxd/job.h"
#include "sbxd/request.h"

struct bg_config {
    unsigned max_processes; /* running at once (429 beyond); as many ended ones are kept */
    size_t output_bytes;    /* ring size per process */
    uint64_t retention_ms;  /* how long an ended process is kept */
};

struct bg_proc;

/* What a process is now (a consistent snapshot). */
struct bg_info {
    char id[25];
    int32_t number; /* bg_number */
    pid_t pid;
    bool finished;
    bool stdin_open;
    int64_t started_real_ns, finished_real_ns;
    uint64_t out_start, out_end; /* the window of output the ring holds */
    unsigned pty_cols, pty_rows; /* with a pty: its size now */
    struct job_result res;       /* final once finished; the byte counts so far before */
};

void bg_init(const struct bg_config *cfg);

/* Start req's command in the background (req is taken over, also on failure). Returns the
 * process with a reference, or NULL with err (SBXD_E_BUSY at --max-processes). */
struct bg_proc *bg_start(struct exec_request *req, const struct job_env *env, struct sbxd_err *err);

/* The same for a process another part of sbxd owns (a code context's shell): outside
 * --max-processes, and not one of /processes: bg_get, bg_get_number and bg_list never hand
 * it out (its number is 0). Shutdown signals and waits for it as for the others. */
struct bg_proc *bg_start_owned(struct exec_request *req, const struct job_env *env,
                               struct sbxd_err *err);

/* The process of that id, with a reference; NULL when unknown or forgotten. */
struct bg_proc *bg_get(const char *id);
void bg_put(struct bg_proc *p);
/* One more reference to p (bg_put gives it back). Takes the table's lock: never call it
 * under p's own. */
void bg_ref(struct bg_proc *p);
/* Whether p's command has ended (its result is final). */
bool bg_ended(struct bg_proc *p);

/* Each process also has a number, 1, 2, ... in the order they started, never reused in the
 * daemon's life: the process id of gRPC's ProcessService (an int32). The process of that
 * number, with a reference, or NULL. */
struct bg_proc *bg_get_number(int32_t number);
int32_t bg_number(const struct bg_proc *p);

/* Every process kept, oldest first, each with a reference: an array to free (and each to
 * bg_put). Returns how many. */
size_t bg_list(struct bg_proc ***out);

void bg_info(struct bg_proc *p, struct bg_info *out);
const struct exec_request *bg_request(const struct bg_proc *p);
/* Whether p's command could not be exec'd (that is known when bg_start returns): then, once
 * the process has ended (at once), its final info in *out. */
bool bg_start_failed(struct bg_proc *p, struct bg_info *out);

enum bg_read_result {
    BG_READ_DATA,    /* *n bytes of *stream at the offset asked for */
    BG_READ_DROPPED, /* the offset asked for is gone: the ring starts at *n... see bg_read */
    BG_READ_NONE,    /* nothing within the wait */
    BG_READ_END,     /* the process has ended and everything up to its end was read */
};

/*
 * Output from offset off: waits up to timeout_ms (0: not at all, -1: without limit) for some.
 * DATA: *n bytes of one stream (1 stdout, 2 stderr, 3 terminal) copied to buf. DROPPED: the
 * ring no longer holds off; *next is its start. *next is also set with DATA (off + *n),
 * NONE and END (off). A UTF-8 character cut by the end of what is there so far is held back
 * while the process runs when utf8 is set.
 */
enum bg_read_result bg_read(struct bg_proc *p, uint64_t off, void *buf, size_t max, bool utf8,
                            int timeout_ms, size_t *n, int *stream, uint64_t *next);

/*
 * A follower that must lose nothing (gRPC's Start: its client's flow control is meant to slow
 * the command, not to drop its output) holds the ring at the offset it has read up to: while
 * held, no more output is taken from the process than the ring can keep without pushing out
 * bytes at or past `from` (the process then blocks writing to its pipe). Call it again as the
 * follower reads on; BG_NO_HOLD lets go (and must be called before the follower leaves).
 * One holder at a time.
 */
#define BG_NO_HOLD UINT64_MAX
void bg_hold(struct bg_proc *p, uint64_t from);

/* Where the process's output ends now; false when off lies beyond it. */
bool bg_offset_valid(struct bg_proc *p, uint64_t off);

enum bg_stdin_result {
    BG_STDIN_DONE = 0,       /* every byte is in the pipe (then stdin closed, with eof) */
    BG_STDIN_FAILED = -1,    /* err; *written of the bytes went in, the rest never will */
    BG_STDIN_HUNG_UP = -2,   /* cancel_fd hung up: the write was given up as on a timeout */
    BG_STDIN_TIMED_OUT = -3, /* as FAILED: the process read none of it within timeout_ms */
};

/*
 * Write n bytes to the process's stdin, after those of the writes before (eof then closes
 * it, as job_stdin_write does), and wait until they are in its pipe: at most timeout_ms, and
 * only while cancel_fd (the client's socket, or -1) has not hung up. A write that gives up
 * drops what was not handed to the pipe yet: *written says how many went in (or will, in
 * order, once the process reads). *open_after: stdin was still open right after a write
 * that is done. One thread per process feeds the pipe, so a writer that leaves holds
 * nothing. SBXD_E_CONFLICT once stdin closed or the process ended, or on the timeout;
 * SBXD_E_BUSY when SBXD_STDIN_PENDING_MAX bytes would wait.
 */
enum bg_stdin_result bg_stdin(struct bg_proc *p, const void *data, size_t n, bool eof,
                              uint64_t timeout_ms, int cancel_fd, uint64_t *written,
                              bool *open_after, struct sbxd_err *err);

/* Signals, terminal size: as job.h, refused with SBXD_E_CONFLICT once it ended. */
int bg_signal(struct bg_proc *p, int sig, struct sbxd_err *err);
int bg_resize(struct bg_proc *p, unsigned cols, unsigned rows, struct sbxd_err *err);

/* The signals a client may name, as BG_SIGNAL_NAMES lists them for an error message. */
#define BG_SIGNAL_NAMES                                                                            \
    "SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGSTOP"

/* The signal a client named ("SIGTERM" or "TERM", in any case), its name as BG_SIGNAL_NAMES
 * spells it into *canonical; 0 for a name not among them. */
int bg_signal_named(const char *name, const char **canonical);

/* Kill the process's tree (if it runs), wait for its end and forget it; *info is its final
 * state. */
void bg_remove(struct bg_proc *p, struct bg_info *info);

/* Forget ended processes past their retention (the main thread calls it now and then). */
void bg_sweep(void);

/* Send sig to every running process's tree (shutdown: SIGTERM first). */
void bg_signal_all(int sig);

/* Background processes running now. */
unsigned bg_running(void);

/* Shutdown, after every job was killed: wait (up to timeout_ms) until every process has
 * ended, so that followers get their exit events. */
void bg_wait_ended(int timeout_ms);

/* Forget everything (after the HTTP server stopped). */
void bg_shutdown(void);

#endif
