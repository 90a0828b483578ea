/*
 * exec_result.h - how a command ended: the words every layer shares (the job that produces
 * it, the fronts that render it, the metrics that count it), with no API behind them.
 */
#ifndef SBXD_EXEC_RESULT_H
#define SBXD_EXEC_RESULT_H

#include <stdbool.h>
#include <stdint.h>

enum job_status {
    JOB_RUNNING,
    JOB_EXITED,
    JOB_SIGNALED,
    JOB_TIMEOUT,
    JOB_OOM,
    JOB_OUTPUT_LIMIT,
    JOB_FAILED_TO_START,
    JOB_CANCELED, /* stopped by sbxd: the client went away, or shutdown */
};

const char *job_status_name(enum job_status s);

/* The front a command came through: its metrics and its audit line carry it as the label
 * front="rest"|"grpc"|"mcp" (exec_front_name). A new front adds itself before FRONT_N. */
enum exec_front { FRONT_REST, FRONT_GRPC, FRONT_MCP, FRONT_N };

const char *exec_front_name(enum exec_front f);

struct job_result {
    enum job_status status;
    int exit_code; /* 128 + N when killed by signal N, as shells report it */
    int signal;    /* 0 when none */
    bool timed_out;
    bool oom_killed;
    double duration_ms;
    double cpu_ms;
    uint64_t memory_peak_bytes;
    uint64_t stdout_bytes;
    uint64_t stderr_bytes;
    char error[256];  /* why it failed to start */
    const char *step; /* ... at which step of the start ("execve", "fchdir", ...; NULL) */
    int error_errno;  /* ... and the errno of that step (0: none, or not a system error) */
};

#endif
