/* timeutil.h - monotonic and wall clocks in the units the rest of sbxd uses. */
#ifndef SBXD_TIMEUTIL_H
#define SBXD_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Monotonic clock, nanoseconds. For durations and deadlines. */
int64_t time_mono_ns(void);

/* Wall clock, nanoseconds since the epoch. For logs and timestamps. */
int64_t time_real_ns(void);

/* Milliseconds from now until deadline_ns (monotonic), clamped to [0, INT32_MAX]; -1 if
 * deadline_ns is 0 (no deadline). Rounds up so a poll never wakes before the deadline. */
int time_ms_until(int64_t deadline_ns);

/* The time ms milliseconds from now on clock: a deadline for pthread_cond_timedwait (whose
 * condition variable waits on that clock). */
struct timespec time_after_ms(clockid_t clock, int64_t ms);

/* A monotonic time in ns as a timespec: a deadline for pthread_cond_timedwait on a condition
 * variable that waits on CLOCK_MONOTONIC. */
struct timespec time_mono_timespec(int64_t mono_ns);

/* ms milliseconds as seconds, written as Python writes a float (300.0, 0.5, 1.25): the words
 * of a timeout as the agent-sandbox python runtime reports one. */
void time_seconds_text(uint64_t ms, char *buf, size_t len);

/* RFC 3339 UTC timestamp with milliseconds, e.g. 2026-01-02T03:04:05.678Z. */
void time_rfc3339(int64_t real_ns, char *buf, size_t len);

#endif
