/*
 * background_internal.h - what background.c (the table, the drivers, output) and
 * background_stdin.c (stdin writes and the feeder) share; background.h is the API.
 */
#ifndef SBXD_BACKGROUND_INTERNAL_H
#define SBXD_BACKGROUND_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbxd/background.h"
#include "sbxd/job.h"
#include "ring_internal.h"
#include "sbxd/run.h"

/* One stdin write while its writer waits: on the writer's stack, in the queue until all of it
 * is handed to the job. Under its process's lock. */
struct stdin_write {
    struct stdin_write *next;
    const uint8_t *data;
    size_t len;
    size_t taken;   /* bytes handed to the job so far */
    size_t written; /* of those, in the pipe */
    bool eof;
    bool done;       /* all in; or failed, with why */
    bool open_after; /* stdin was still open once all was in */
    enum sbxd_errkind fail_kind;
    const char *why;
};

struct bg_proc {
    struct bg_proc *next; /* the table, oldest first (under tab.lock) */
    bool listed;          /* in the table (under tab.lock) */
    bool owned;           /* bg_start_owned: a context's, not one of /processes */
    bool start_failed;    /* its command could not be exec'd (known when bg_start returned) */
    bool driven;          /* its driver runs, or ran: run_close frees its run (else run_discard) */
    unsigned refs;        /* under tab.lock */
    /* Its command (run.h): the job, its request, its output's hold-back and its audit. */
    struct run run;
    char id[25];
    int32_t number; /* bg_number: set once listed, never changed */
    pid_t pid;
    int64_t started_real_ns;
    /* Under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* output arrived, or the end */
    struct ring ring;
    bool finished;
    uint64_t hold; /* bg_hold: output past this offset waits for room (BG_NO_HOLD: none) */
    bool unheld;   /* bg_remove, shutdown: no hold from now on (the driver must reach the end) */
    unsigned pty_cols, pty_rows; /* the terminal's size now */
    int64_t finished_real_ns, finished_mono_ns;
    struct job_result res;
    /* stdin: writes queue here and one thread of the process's own, the feeder, hands them
     * to the job a chunk at a time. job_stdin_write waits, without end, for the process to
     * read: only the feeder ever waits there, so a writer can give up (a timeout, its
     * client gone) and take back what it had not handed over yet. */
    pthread_cond_t in_cond;        /* the queue moved, stdin closed, or the process ended */
    struct stdin_write *in_head;   /* oldest first */
    struct stdin_write *in_flight; /* whose chunk the feeder writes; NULL once its writer left */
    uint64_t in_pending;           /* bytes queued or being written, not yet in the pipe */
    bool feeder;                   /* the feeder runs (it holds a reference) */
    bool in_closed;                /* the feeder found stdin closed: every write fails, why */
    enum sbxd_errkind in_kind;
    const char *in_why;
    uint8_t *in_buf; /* the feeder's chunk (SBXD_STDIN_CHUNK) */
};

#endif
