/*
 * job_stdin.c - what other threads give a running job: stdin bytes (a background process's
 * writers) and a terminal's size. The owner's loop (job_drive.c) writes the queue into the
 * pipe as the command reads; everything here is under the job's in_lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "job_internal.h"

void job_close_stdin(struct job *job)
{
    pthread_mutex_lock(&job->in_lock);
    job_close_fd(&job->in_fd);
    pthread_cond_broadcast(&job->in_cond);
    pthread_mutex_unlock(&job->in_lock);
}

int job_stdin_write(struct job *job, const void *data, size_t n, bool eof, uint64_t *written,
                    struct sbxd_err *err)
{
    *written = 0;
    pthread_mutex_lock(&job->in_lock);
    if (job->in_fd < 0 || job->in_eof) {
        bool ended = job->exited;
        pthread_mutex_unlock(&job->in_lock);
        sbxd_fail(err, SBXD_E_CONFLICT, 0, ended ? "the process has ended" : "stdin is closed");
        if (err && ended)
            err->flags |= SBXD_EF_ENDED;
        return -1;
    }
    /* A terminal takes its end-of-file character, as from a keyboard; a pipe closes. */
    uint8_t veof = 4;
    bool tty_eof = eof && job->pty_fd >= 0;
    if (tty_eof) {
        struct termios t;
        if (tcgetattr(job->pty_fd, &t) == 0 && t.c_cc[VEOF])
            veof = t.c_cc[VEOF];
    }
    size_t add = n + (tty_eof ? 1 : 0);
    if (job->stdin_off > 0) {
        memmove(job->stdin_data, job->stdin_data + job->stdin_off, job->stdin_len - job->stdin_off);
        job->stdin_len -= job->stdin_off;
        job->stdin_off = 0;
    }
    if (job->stdin_len + add > job->stdin_alloc) {
        uint8_t *nb = realloc(job->stdin_data, job->stdin_len + add);
        if (!nb) {
            pthread_mutex_unlock(&job->in_lock);
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        }
        job->stdin_data = nb;
        job->stdin_alloc = job->stdin_len + add;
    }
    memcpy(job->stdin_data + job->stdin_len, data, n);
    if (tty_eof)
        job->stdin_data[job->stdin_len + n] = veof;
    job->stdin_len += add;
    if (eof && !tty_eof)
        job->in_eof = true;
    uint64_t from = job->in_queued;
    job->in_queued += add;
    uint64_t target = job->in_queued;
    /* job_step polls stdin only while there is something to write: wake it. */
    uint64_t one = 1;
    if (job->ev_fd >= 0 && write(job->ev_fd, &one, sizeof(one)) < 0) {
        /* only on counter overflow: it is awake then */
    }
    while (job->in_written < target && job->in_fd >= 0)
        pthread_cond_wait(&job->in_cond, &job->in_lock);
    uint64_t done = job->in_written > from ? job->in_written - from : 0;
    *written = done < n ? done : n;
    bool ended = job->exited;
    pthread_mutex_unlock(&job->in_lock);
    if (done >= add)
        return 0;
    sbxd_fail(err, SBXD_E_CONFLICT, 0, "stdin closed after %llu of %zu bytes: the process %s",
              (unsigned long long)*written, n, ended ? "has ended" : "closed its input");
    if (err)
        err->flags |= ended ? SBXD_EF_ENDED : SBXD_EF_INPUT_CLOSED;
    return -1;
}

bool job_stdin_open(struct job *job)
{
    pthread_mutex_lock(&job->in_lock);
    bool open = job->in_fd >= 0 && !job->in_eof;
    pthread_mutex_unlock(&job->in_lock);
    return open;
}

int job_resize(struct job *job, unsigned cols, unsigned rows, struct sbxd_err *err)
{
    pthread_mutex_lock(&job->in_lock);
    int rc = 0;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (job->pty_fd < 0 || job->in_fd < 0)
        rc = sbxd_fail(err, SBXD_E_CONFLICT, 0,
                       job->pty_fd < 0 && !job->exited ? "the process has no terminal (pty)"
                                                       : "the process has ended");
    else if (ioctl(job->pty_fd, TIOCSWINSZ, &ws) < 0)
        rc = sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot resize the terminal");
    pthread_mutex_unlock(&job->in_lock);
    return rc;
}
