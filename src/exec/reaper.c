#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/reaper.h"
#include "sbxd/timeutil.h"

static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reap_target *targets;

void reaper_init(void)
{
    pthread_mutex_lock(&reaper_lock);
    targets = NULL;
    pthread_mutex_unlock(&reaper_lock);
}

void reaper_add(struct reap_target *t)
{
    t->pid = 0;
    t->reaped = false;
    pthread_mutex_lock(&reaper_lock);
    t->next = targets;
    targets = t;
    pthread_mutex_unlock(&reaper_lock);
}

void reaper_remove(struct reap_target *t)
{
    pthread_mutex_lock(&reaper_lock);
    for (struct reap_target **pp = &targets; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    pthread_mutex_unlock(&reaper_lock);
}

/* Under the lock. A reaped target keeps its pid until it is removed; it is skipped, because
 * the number may already belong to a new child. */
static struct reap_target *find_locked(pid_t pid)
{
    for (struct reap_target *t = targets; t; t = t->next)
        if (!t->reaped && __atomic_load_n(&t->pid, __ATOMIC_ACQUIRE) == pid)
            return t;
    return NULL;
}

static void deliver_locked(struct reap_target *t, int status, const struct rusage *ru)
{
    t->status = status;
    t->ru = *ru;
    t->reaped_ns = time_mono_ns();
    t->reaped = true;
    uint64_t one = 1;
    if (t->notify_fd >= 0 && write(t->notify_fd, &one, sizeof(one)) < 0) {
        /* An eventfd only refuses a write when its counter would overflow; the job reads
         * reaper_result() whenever it wakes, so a lost wake-up cannot lose the status. */
    }
}

int reaper_reap(void)
{
    int count = 0;
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG | __WALL, &ru);
        if (pid <= 0)
            break; /* 0: children remain, none exited; -1/ECHILD: no children */
        count++;
        pthread_mutex_lock(&reaper_lock);
        struct reap_target *t = find_locked(pid);
        if (t)
            deliver_locked(t, status, &ru);
        /* else: an orphan handed to us (as PID 1 or subreaper): reaping it is all we owe. */
        pthread_mutex_unlock(&reaper_lock);
    }
    return count;
}

bool reaper_try(struct reap_target *t)
{
    pthread_mutex_lock(&reaper_lock);
    /* Under the lock, so the reaper cannot match this pid to another target between our
     * wait4 and the bookkeeping. */
    if (!t->reaped && t->pid > 0) {
        int status;
        struct rusage ru;
        if (wait4(t->pid, &status, WNOHANG | __WALL, &ru) == t->pid)
            deliver_locked(t, status, &ru);
    }
    bool reaped = t->reaped;
    pthread_mutex_unlock(&reaper_lock);
    return reaped;
}

void reaper_kill(struct reap_target *t, int sig)
{
    pthread_mutex_lock(&reaper_lock);
    if (!t->reaped && t->pid > 0)
        kill(t->pid, sig);
    pthread_mutex_unlock(&reaper_lock);
}

bool reaper_call(struct reap_target *t, void (*fn)(struct reap_target *t, void *arg), void *arg)
{
    bool called = false;
    pthread_mutex_lock(&reaper_lock);
    for (struct reap_target *c = targets; c; c = c->next)
        if (c == t) {
            if (!t->reaped && t->pid > 0) {
                fn(t, arg);
                called = true;
            }
            break;
        }
    pthread_mutex_unlock(&reaper_lock);
    return called;
}

bool reaper_result(struct reap_target *t, int *status, struct rusage *ru)
{
    pthread_mutex_lock(&reaper_lock);
    bool reaped = t->reaped;
    if (reaped) {
        *status = t->status;
        *ru = t->ru;
    }
    pthread_mutex_unlock(&reaper_lock);
    return reaped;
}

void reaper_foreach(void (*fn)(struct reap_target *t, void *arg), void *arg)
{
    pthread_mutex_lock(&reaper_lock);
    for (struct reap_target *t = targets; t; t = t->next)
        fn(t, arg);
    pthread_mutex_unlock(&reaper_lock);
}
