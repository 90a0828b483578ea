/*
 * job_drive.c - the owner's loop: job_step waits for what happens to a job next (output,
 * stdin room, the exit, the client hanging up) and hands it back as an event; at the end it
 * computes the result and releases the job (job_release). The deadline is not enforced here
 * but by the keeper (job_kill.c), so a job nobody drives still ends on time.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_internal.h"
#include "sbxd/exec_limits.h"
#include "sbxd/spawn.h"
#include "sbxd/timeutil.h"

static void mark_exited(struct job *job)
{
    job->exited = true;
    job->drain_deadline_ns = time_mono_ns() + (int64_t)SBXD_DRAIN_WINDOW_MS * 1000000;
    job_close_stdin(job); /* nobody left to read it */
}

/* A one-command init: take what it has written (the fd is non-blocking). */
static void read_ns_status(struct job *job)
{
    struct spawn_ns_msg m;
    while (job->status_fd >= 0) {
        ssize_t n = read(job->status_fd, &m, sizeof(m));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            job_close_fd(&job->status_fd); /* the init is gone */
            return;
        }
        if (n != (ssize_t)sizeof(m))
            return; /* EAGAIN (writes of this size are atomic: never a part) */
        if (m.type == SPAWN_NS_STARTED)
            continue;
        if (job->main_reported)
            continue;
        job->main_reported = true;
        job->main_exit_ns = time_mono_ns();
        if (m.type == SPAWN_NS_EXITED) {
            job->main_status = m.status;
            job->main_ru = m.ru;
        } else {
            job->main_status = 127 << 8;
            job->res.status = JOB_FAILED_TO_START;
            snprintf(job->res.error, sizeof(job->res.error), "%s '%s': %s",
                     m.step ? m.step : "start", job->argv0, strerror(m.err));
            job->res.step = m.step;
            job->res.error_errno = m.err;
        }
        if (!job->exited)
            mark_exited(job);
    }
}

void job_await_exec(struct job *job, int64_t deadline_ns)
{
    struct pollfd pfd = {.fd = job->status_fd, .events = POLLIN};
    for (;;) {
        int64_t left = deadline_ns - time_mono_ns();
        if (job->status_fd < 0 || left <= 0)
            return;
        int n = poll(&pfd, 1, (int)((left + 999999) / 1000000));
        if (n > 0)
            break;
        if (n < 0 && errno != EINTR)
            return;
    }
    read_ns_status(job); /* STARTED, or FAILED with the reason (the job then ends at once) */
}

/* The status as the command ended: exit code, signal, and what sbxd's own kill meant. */
static void decide_status(struct job_result *r, int status, int reason)
{
    if (r->status == JOB_FAILED_TO_START) {
        r->exit_code = 127;
    } else if (WIFSIGNALED(status)) {
        r->signal = WTERMSIG(status);
        r->exit_code = 128 + r->signal;
        /* A SIGKILL that sbxd sent is reported as its reason, never as a plain signal. */
        if (r->signal == SIGKILL && reason == JOB_KILL_TIMEOUT)
            r->status = JOB_TIMEOUT;
        else if (r->signal == SIGKILL && reason == JOB_KILL_OUTPUT)
            r->status = JOB_OUTPUT_LIMIT;
        else if (r->signal == SIGKILL && reason == JOB_KILL_CANCEL)
            r->status = JOB_CANCELED;
        else
            r->status = JOB_SIGNALED;
    } else {
        r->exit_code = WEXITSTATUS(status);
        r->status = JOB_EXITED;
    }
}

static void finish(struct job *job)
{
    /* Leftovers (a background child of the command) die with the job. */
    job_kill_tree(job, false);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    int64_t end_ns = job->rt.reaped_ns;
    if (job_init_reports(job) && job->main_reported) {
        /* The command's own end, as its init saw it; the init itself exits 0. */
        status = job->main_status;
        ru = job->main_ru;
        end_ns = job->main_exit_ns;
    } else {
        reaper_result(&job->rt, &status, &ru);
    }
    struct job_result *r = &job->res;
    r->duration_ms = (double)(end_ns - job->start_ns) / 1e6;
    r->cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
    r->memory_peak_bytes = (uint64_t)ru.ru_maxrss * 1024;
    int reason = __atomic_load_n(&job->kill_reason, __ATOMIC_ACQUIRE);
    decide_status(r, status, reason);
    if (job->box.ops->stats) {
        /* The cgroup sees the whole tree, background children included. */
        struct cg_stats cs;
        job->box.ops->stats(&job->box, &cs);
        if (cs.has_cpu)
            r->cpu_ms = (double)cs.cpu_usec / 1000.0;
        if (cs.has_peak)
            r->memory_peak_bytes = cs.memory_peak;
        /* An OOM kill is reported as such, unless sbxd had already decided to kill. */
        if (cs.oom_kills > 0 && reason == JOB_KILL_NONE && r->status != JOB_FAILED_TO_START) {
            r->oom_killed = true;
            r->status = JOB_OOM;
        }
    }
    r->timed_out = r->status == JOB_TIMEOUT;
    /* Nothing of the command runs any more (the kill above): everything is let go, and the
     * job is finished (job_release marks it). */
    job_release(job, true);
}

/* Read one chunk from *fd into buf: > 0 bytes, or 0 when the pipe is done (closed). */
static ssize_t read_pipe(int *fd, void *buf, size_t buflen)
{
    for (;;) {
        ssize_t n = read(*fd, buf, buflen);
        if (n > 0)
            return n;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return -1;
        job_close_fd(fd); /* EOF or a broken pipe */
        return 0;
    }
}

static bool output_event(struct job *job, int stream, ssize_t n, struct job_event *ev)
{
    if (n <= 0)
        return false;
    if (stream == 1)
        job->res.stdout_bytes += (uint64_t)n;
    else
        job->res.stderr_bytes += (uint64_t)n;
    job->output_total += (uint64_t)n;
    if (job->output_limit != EXEC_LIMIT_UNSET && job->output_total > job->output_limit)
        job_kill_own(job, JOB_KILL_OUTPUT);
    ev->type = JOB_EV_OUTPUT;
    ev->stream = stream;
    ev->len = (size_t)n;
    job->next_stream = stream == 1 ? 2 : 1;
    return true;
}

/* The main process is gone, and its pipes with it or not: end, or read what is left. True
 * when ev is set (an output chunk). */
static bool after_exit(struct job *job, int64_t now, void *buf, size_t buflen, struct job_event *ev)
{
    if (job->out_fd < 0 && job->err_fd < 0) {
        finish(job);
        return false;
    }
    if (!job->final_drain && now >= job->drain_deadline_ns) {
        /* The main process is gone but something still holds the pipes. */
        job_kill_tree(job, false);
        job->final_drain = true;
    }
    if (!job->final_drain)
        return false;
    /* Take what is already buffered, without waiting for holders outside the group. */
    int *fds[2] = {&job->out_fd, &job->err_fd};
    for (int i = 0; i < 2; i++) {
        if (*fds[i] < 0)
            continue;
        struct pollfd p = {.fd = *fds[i], .events = POLLIN};
        if (poll(&p, 1, 0) == 1) {
            ssize_t n = read_pipe(fds[i], buf, buflen);
            if (output_event(job, i + 1, n, ev))
                return true;
        }
        job_close_fd(fds[i]);
    }
    return false;
}

enum { W_WAKE, W_STDOUT, W_STDERR, W_STDIN, W_CANCEL, W_STATUS, W_PIDFD, W_COUNT };

/* What to wait for now, into pfd (which[i] says what pfd[i] is). */
static nfds_t poll_set(struct job *job, struct pollfd *pfd, int *which)
{
    nfds_t np = 0;
    if (!job->exited) {
        pfd[np] = (struct pollfd){.fd = job->ev_fd, .events = POLLIN};
        which[np++] = W_WAKE;
        if (job->pidfd >= 0) {
            pfd[np] = (struct pollfd){.fd = job->pidfd, .events = POLLIN};
            which[np++] = W_PIDFD;
        }
    }
    int first = job->next_stream == 2 ? W_STDERR : W_STDOUT;
    for (int k = 0; k < 2; k++) {
        int s = k == 0 ? first : W_STDOUT + W_STDERR - first;
        int fd = s == W_STDOUT ? job->out_fd : job->err_fd;
        if (fd >= 0) {
            pfd[np] = (struct pollfd){.fd = fd, .events = POLLIN};
            which[np++] = s;
        }
    }
    pthread_mutex_lock(&job->in_lock);
    if (job->in_fd >= 0 && job->stdin_off == job->stdin_len && job->in_eof) {
        job_close_fd(&job->in_fd); /* all written, and no more to come */
        pthread_cond_broadcast(&job->in_cond);
    }
    if (job->in_fd >= 0 && job->stdin_off < job->stdin_len) {
        pfd[np] = (struct pollfd){.fd = job->in_fd, .events = POLLOUT};
        which[np++] = W_STDIN;
    }
    pthread_mutex_unlock(&job->in_lock);
    if (job->status_fd >= 0 && !job->exited) {
        pfd[np] = (struct pollfd){.fd = job->status_fd, .events = POLLIN};
        which[np++] = W_STATUS;
    }
    if (job->cancel_fd >= 0) {
        /* Its hang-up, as job_client_gone reads it. */
        pfd[np] = (struct pollfd){.fd = job->cancel_fd,
                                  .events = POLLRDHUP | (job->cancel_peek ? POLLIN : 0)};
        which[np++] = W_CANCEL;
    }
    return np;
}

/* Woken by the reaper or a stdin writer (ev_fd), or by the process's exit (pidfd: reap it
 * here, without the main thread's round trip). */
static void on_wake(struct job *job, int which)
{
    if (which == W_WAKE) {
        uint64_t v;
        if (read(job->ev_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
            /* nothing to do: reaper_result() below is the truth */
        }
    }
    int status;
    struct rusage ru;
    bool reaped = which == W_PIDFD ? reaper_try(&job->rt) : reaper_result(&job->rt, &status, &ru);
    if (which == W_PIDFD && !reaped)
        job_close_fd(&job->pidfd); /* readable, yet nothing to reap: the reaper's wake-up alone */
    if (reaped) {
        /* A one-command init is gone: what it said before dying comes first. */
        if (job_init_reports(job))
            read_ns_status(job);
        if (!job->exited)
            mark_exited(job);
    }
}

static void on_stdin_room(struct job *job, short revents)
{
    pthread_mutex_lock(&job->in_lock);
    ssize_t n = -1;
    if (job->in_fd >= 0 && !(revents & (POLLERR | POLLHUP)))
        n = write(job->in_fd, job->stdin_data + job->stdin_off, job->stdin_len - job->stdin_off);
    if (n > 0) {
        job->stdin_off += (size_t)n;
        job->in_written += (uint64_t)n;
    }
    if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
        (job->stdin_off == job->stdin_len && job->in_eof))
        job_close_fd(&job->in_fd); /* done, or the child closed its end (EPIPE) */
    pthread_cond_broadcast(&job->in_cond);
    pthread_mutex_unlock(&job->in_lock);
}

bool job_client_gone(int fd, short revents, bool *peek)
{
    if (revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
        return true;
    if (!(revents & POLLIN))
        return false;
    char c;
    ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EINTR))) {
        *peek = k <= 0; /* a pipelined request: from now on only a hang-up proper tells */
        return false;
    }
    return true; /* 0: end of stream; < 0: the connection is broken */
}

bool job_client_hung_up(int fd, bool *peek)
{
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP | (*peek ? POLLIN : 0)};
    if (fd < 0 || poll(&pfd, 1, 0) <= 0)
        return false;
    return job_client_gone(fd, pfd.revents, peek);
}

static void on_client(struct job *job, short revents)
{
    if (!job_client_gone(job->cancel_fd, revents, &job->cancel_peek))
        return;
    /* The client hung up: nobody will read the result. */
    job_kill_own(job, JOB_KILL_CANCEL);
    job->cancel_fd = -1;
}

/* One ready descriptor; true when ev holds an output chunk. */
static bool on_ready(struct job *job, int which, short revents, void *buf, size_t buflen,
                     struct job_event *ev)
{
    switch (which) {
    case W_WAKE:
    case W_PIDFD:
        on_wake(job, which);
        return false;
    case W_STATUS:
        read_ns_status(job);
        return false;
    case W_STDOUT:
    case W_STDERR: {
        int *fd = which == W_STDOUT ? &job->out_fd : &job->err_fd;
        ssize_t n = read_pipe(fd, buf, buflen);
        return output_event(job, which == W_STDOUT ? 1 : 2, n, ev);
    }
    case W_STDIN:
        on_stdin_room(job, revents);
        return false;
    case W_CANCEL:
        on_client(job, revents);
        return false;
    }
    return false;
}

void job_step(struct job *job, int timeout_ms, void *buf, size_t buflen, struct job_event *ev)
{
    ev->type = JOB_EV_NONE;
    ev->len = 0;
    int64_t wait_until = timeout_ms < 0 ? 0 : time_mono_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        if (job->finished) {
            ev->type = JOB_EV_EXIT;
            return;
        }
        int64_t now = time_mono_ns();
        /* Both pipes closed usually means the process is gone: try to reap it here rather
         * than wait for the SIGCHLD round trip through the main thread. */
        if (!job_init_reports(job) && !job->exited && job->out_fd < 0 && job->err_fd < 0 &&
            reaper_try(&job->rt))
            mark_exited(job);
        if (job->exited && after_exit(job, now, buf, buflen, ev))
            return;
        if (job->finished || job->final_drain)
            continue;
        struct pollfd pfd[W_COUNT];
        int which[W_COUNT];
        nfds_t np = poll_set(job, pfd, which);
        int64_t until = wait_until;
        if (job->exited && (!until || job->drain_deadline_ns < until))
            until = job->drain_deadline_ns;
        int rc = poll(pfd, np, time_ms_until(until));
        if (rc < 0 && errno != EINTR) {
            job_kill_own(job, JOB_KILL_CANCEL); /* cannot wait any more: do not leave it running */
            continue;
        }
        for (nfds_t i = 0; rc > 0 && i < np; i++)
            if (pfd[i].revents && on_ready(job, which[i], pfd[i].revents, buf, buflen, ev))
                return;
        if (wait_until && time_mono_ns() >= wait_until && !job->finished)
            return; /* JOB_EV_NONE */
    }
}
