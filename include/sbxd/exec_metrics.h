/*
 * exec_metrics.h - the exec service's counters for GET /metrics: commands that ended (by the
 * front they came through, how they ran, and how they ended), their durations, and the
 * admission queue. Relaxed atomics bumped where things happen; rendered by the renderer
 * exec_metrics_register adds to metrics.h's.
 */
#ifndef SBXD_EXEC_METRICS_H
#define SBXD_EXEC_METRICS_H

#include <stdbool.h>

#include "sbxd/exec_result.h"

/* How a command ran. */
enum metrics_mode { MX_SYNC, MX_STREAM, MX_BACKGROUND, MX_NMODES };

void metrics_execution(enum exec_front front, enum metrics_mode mode, const struct job_result *r);
/* A command that could not even be started (no job was made). */
void metrics_start_failed(enum exec_front front, enum metrics_mode mode);
/* The admission queue (exec_service_admit): a command began to wait for a running slot; a
 * command stopped waiting after ms, however its wait ended (abandoned: its client hung up). */
void metrics_queue_enter(void);
void metrics_queue_leave(double ms, bool abandoned);

/* Add these counters to what GET /metrics renders (once; again is a no-op). */
void exec_metrics_register(void);

#endif
