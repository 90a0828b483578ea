/*
 * exec_service.h - what every front that starts commands goes through (the REST routes
 * today; a gRPC or a context front next), below HTTP: the request policy, the job
 * environment, and the audit line with its metrics, each written once.
 *
 * A front builds one struct exec_service from the daemon's configuration and isolation,
 * parses a request under exec_service_policy(), starts it with the environment of
 * exec_service_env() (job_start, or bg_start for a background process), and when the
 * command is over reports it with exec_service_audit().
 */
#ifndef SBXD_EXEC_SERVICE_H
#define SBXD_EXEC_SERVICE_H

#include "sbxd/config.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"
#include "sbxd/job.h"
#include "sbxd/metrics.h"
#include "sbxd/request.h"

struct exec_service {
    const struct sbxd_config *cfg;
    int rootfd;            /* the workspace root */
    const char *workspace; /* ... and its absolute path */
    const struct harden_plan *harden;
    struct isolation *iso;
};

/* The bounds a request is parsed under. A background process (MX_BACKGROUND) gets the
 * longest timeout allowed unless it asks for less, and may ask for a terminal. */
void exec_service_policy(const struct exec_service *s, enum metrics_mode mode,
                         struct request_policy *pol);

/* What job_start needs besides the request: cancel_fd is a socket whose hang-up cancels the
 * command (-1: none); a background process keeps its stdin open for later writes. */
struct job_env exec_service_env(const struct exec_service *s, enum metrics_mode mode,
                                int cancel_fd);

/* A command is over: its metrics, and the audit line (who ran what, where, how it ended;
 * event "exec", or "process" for a background one). client may be NULL. */
void exec_service_audit(enum metrics_mode mode, const char *id, const struct exec_request *req,
                        const struct job_result *r, const char *client);

#endif
