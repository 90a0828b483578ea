/*
 * exec_service.h - what every front that starts commands goes through (the REST routes
 * today; a gRPC or a context front next), below HTTP: admission, the request policy, the
 * job environment, the start, the collection of a command's output, the events a streamed
 * command is told in, and the audit line with its metrics, each written once.
 *
 * A front builds one struct exec_service from the daemon's configuration and isolation,
 * parses a request under exec_service_policy(), takes a running slot with
 * exec_service_admit() (a command whose answer a client waits for), starts it with
 * exec_service_start() (or exec_service_start_process() for a background process), drives
 * it (exec_service_collect, or job_step into exec_event_*), reports it with
 * exec_service_audit(), and gives the slot back with exec_service_leave() once its answer
 * is out.
 */
#ifndef SBXD_EXEC_SERVICE_H
#define SBXD_EXEC_SERVICE_H

#include "sbxd/background.h"
#include "sbxd/config.h"
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
};

/* The bounds a request is parsed under. A background process (MX_BACKGROUND) gets the
 * longest timeout allowed unless it asks for less, and may ask for a terminal. */
void exec_service_policy(const struct exec_service *s, enum metrics_mode mode,
                         struct request_policy *pol);

/* A running slot among --max-running for a command whose answer a client waits for. 0, or
 * -1 with SBXD_E_BUSY (counted as the limit's rejection). */
int exec_service_admit(struct exec_service *s, struct sbxd_err *err);
/* The admitted command's answer is out, or will never be: its slot is free. */
void exec_service_leave(struct exec_service *s);
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

/* Drive job to its end, its stdout and stderr into out and errb (capped outbufs). */
void exec_service_collect(struct job *job, struct outbuf *out, struct outbuf *errb);

/* The front held `bytes` of memory for a command's answer, now given back: when that is a
 * lot, the next spawn first resets the daemon's peak RSS (spawn.h), which the kernel would
 * otherwise count into the next command's memory_peak_bytes. */
void exec_service_held(size_t bytes);

/* A command is over: its metrics, and the audit line (who ran what, where, how it ended;
 * event "exec", or "process" for a background one). client may be NULL. */
void exec_service_audit(enum metrics_mode mode, const char *id, const struct exec_request *req,
                        const struct job_result *r, const char *client);

/* The fields of a command's result (design 3.2) into an open object: stdout and stderr only
 * with out/errb (a streamed answer sent them as events). */
void exec_result_fields(struct jsonw *w, const char *id, const struct job_result *r,
                        const struct outbuf *out, const struct outbuf *errb,
                        enum exec_encoding enc);

/* The events a streamed command is told in (the JSON objects of design 3.3), written once
 * for /execute's stream and a background process's output. */
void exec_event_start(struct jsonw *w, const char *id, pid_t pid, const uint64_t *offset);
/* A chunk of output: stream 1 stdout, 2 stderr, 0 a terminal's; bytes: also say its size. */
void exec_event_output(struct jsonw *w, int stream, const void *data, size_t n, bool utf8,
                       uint64_t offset, bool bytes);
/* The end: the result object (type "exit"); output_end, when not NULL, is said too. */
void exec_event_exit(struct jsonw *w, const char *id, const struct job_result *r,
                     enum exec_encoding enc, const uint64_t *output_end);
/* "stdout" (1), "stderr" (2), "pty" (0: a terminal's one stream). */
const char *exec_stream_name(int stream);

#endif
