/*
 * The one-command init of a PID namespace, for where no namespace slot can serve
 * (spawn_pool.c: gVisor, which cannot setns into a PID namespace). spawn_child starts it
 * (spawn_ns_init_start); it is pid 1 of the namespace, running raw syscalls only (no malloc,
 * no locks, no stdio), which clones the command with spawn_child_main and reports on
 * status_fd (struct spawn_ns_msg, one atomic write each). Every init, a slot's too, prepares
 * its namespace with spawn_ns_prepare before it runs anything.
 *
 * Where the next child may share the daemon's memory (spawn_vm_shared()), the init does, on a
 * stack of its own, and so does the command it clones: no address space is copied, which under
 * gVisor costs milliseconds. Such an init lives on beside the daemon's threads and shares the
 * thread-local storage (errno above all) of the thread that cloned it, so one thread of its
 * own clones them all, the maker, whose errno nobody else reads. Elsewhere the init is a copy
 * of the daemon, started like fork.
 */
#include <errno.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/exec_limits.h"
#include "sbxd/spawn.h"
#include "spawn_internal.h"

/* Everything an init does before it can start a command: its mounts, then the rest of the
 * deny-list. 0, or -1 with errno and *step. */
NO_SANITIZE int spawn_ns_prepare(const struct harden_plan *h, const char **step)
{
    if (spawn_ns_setup(step) < 0)
        return -1;
    if (h && h->seccomp &&
        syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &h->filter_init, 0, 0) < 0) {
        *step = "seccomp";
        return -1;
    }
    return 0;
}

/*
 * A one-command init, for where children cannot share the daemon's memory (gVisor): pid 1 of
 * the namespace, a copy of the daemon running raw syscalls only. It prepares the namespace,
 * starts the command as the daemon would, reports its end on status_fd, and reaps until no
 * process is left; SIGKILL to it kills the namespace.
 */
NO_SANITIZE __attribute__((noreturn)) static void ns_init(const struct spawn_spec *s)
{
    struct spawn_ns_msg m = {.type = SPAWN_NS_FAILED};
    int sfd = s->status_fd;
    /* Children's ends and the daemon's signal requests are taken with rt_sigtimedwait:
     * blocked before the command exists, so none is missed. (The command unblocks all.) */
    uint64_t waitset = (1ULL << (SIGCHLD - 1)) | (1ULL << (SBXD_NS_SIGNAL - 1));
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &waitset, NULL, 8);
    if (spawn_ns_prepare(s->harden, &m.step) < 0)
        goto fail;
    struct child_ctx cc = {.spec = s, .err = 0, .step = NULL, .report_fd = -1};
    _Alignas(64) char stack[SBXD_SPAWN_STACK];
    pid_t main_pid =
        clone(spawn_child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &cc);
    if (main_pid < 0) {
        m.step = "clone";
        goto fail;
    }
    if (cc.err) {
        m.err = cc.err;
        m.step = cc.step;
        syscall(SYS_write, sfd, &m, sizeof(m));
        syscall(SYS_exit_group, 127);
    }
    /* The vfork is over with an exec: the daemon waits for this (or FAILED) to know the
     * command started before it answers for it (a gRPC Start's first event). */
    struct spawn_ns_msg started = {.type = SPAWN_NS_STARTED};
    syscall(SYS_write, sfd, &started, sizeof(started));
    /* Nothing of the daemon's stays open here but the status pipe: above all not the
     * command's pipes, whose readers wait for every writer to go. */
    spawn_close_span(0, (unsigned)sfd - 1);
    spawn_close_span((unsigned)sfd + 1, ~0U);
    for (;;) {
        int st;
        struct rusage ru;
        long pid;
        while ((pid = syscall(SYS_wait4, -1, &st, WNOHANG, &ru)) > 0)
            if (pid == main_pid) {
                struct spawn_ns_msg ex = {.type = SPAWN_NS_EXITED, .status = st, .ru = ru};
                syscall(SYS_write, sfd, &ex, sizeof(ex));
            }
        if (pid < 0)
            syscall(SYS_exit_group, 0); /* ECHILD: the namespace is empty */
        siginfo_t si;
        if (syscall(SYS_rt_sigtimedwait, &waitset, &si, NULL, 8) == SBXD_NS_SIGNAL &&
            si.si_code == SI_QUEUE)
            syscall(SYS_kill, -1, (int)((uintptr_t)si.si_value.sival_ptr & 0xff));
    }
fail:
    m.err = errno ? errno : EINVAL;
    syscall(SYS_write, sfd, &m, sizeof(m));
    syscall(SYS_exit_group, 127);
    __builtin_unreachable();
}

NO_SANITIZE static int ns_init_entry(void *arg)
{
    ns_init(arg);
}

/* An init's stack, kept for the next init once the process that ran on it is gone, and its
 * own copy of the spec: the caller's may be gone before the init has used it (a spawn
 * deadline returns without waiting for it). */
struct init_stack {
    struct init_stack *next;
    char *base; /* SBXD_NS_INIT_STACK bytes, the lowest page a guard */
    pid_t pid;  /* the init running on it, or 0: free */
    struct spawn_spec spec;
    char *copy; /* what spec points to (one block), or NULL */
};

/* The length of a NULL-terminated vector and its strings, or its copy into *at. */
static size_t vec_len(char *const *v)
{
    size_t n = sizeof(char *);
    for (; v && *v; v++)
        n += sizeof(char *) + strlen(*v) + 1;
    return n;
}

static char *const *vec_copy(char *const *v, char **at)
{
    if (!v)
        return NULL;
    size_t count = 0;
    while (v[count])
        count++;
    char **out = (char **)(void *)*at;
    char *p = *at + (count + 1) * sizeof(char *);
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(v[i]) + 1;
        memcpy(p, v[i], len);
        out[i] = p;
        p += len;
    }
    out[count] = NULL;
    *at = p + (-(uintptr_t)p & (sizeof(char *) - 1)); /* aligned for the next vector */
    return out;
}

static const char *str_copy(const char *s, char **at)
{
    if (!s)
        return NULL;
    size_t len = strlen(s) + 1;
    char *out = memcpy(*at, s, len);
    *at += len;
    return out;
}

/* st->spec: spec, with its vectors and strings copied into st->copy. 0, or -1 (no memory). */
static int spec_keep(struct init_stack *st, const struct spawn_spec *spec)
{
    size_t need = vec_len(spec->exec_paths) + vec_len(spec->argv) + vec_len(spec->envp) +
                  3 * sizeof(char *) + (spec->cwd_path ? strlen(spec->cwd_path) + 1 : 0) +
                  (spec->cwd_abs ? strlen(spec->cwd_abs) + 1 : 0);
    char *block = malloc(need);
    if (!block)
        return -1;
    free(st->copy);
    st->copy = block;
    st->spec = *spec;
    st->spec.exec_paths = vec_copy(spec->exec_paths, &block);
    st->spec.argv = vec_copy(spec->argv, &block);
    st->spec.envp = vec_copy(spec->envp, &block);
    st->spec.cwd_path = str_copy(spec->cwd_path, &block);
    st->spec.cwd_abs = str_copy(spec->cwd_abs, &block);
    st->spec.ns_slot = NULL; /* (no slot here) */
    st->spec.ns_seq = NULL;
    return 0;
}

/* The maker: the one thread that clones inits sharing the daemon's memory. One request at a
 * time (turn); the clone returns at once (no vfork), so a turn is short. */
static struct {
    pthread_mutex_t turn, lock;
    pthread_cond_t asked, answered;
    pthread_once_t once;
    bool running;
    const struct spawn_spec *spec; /* the request, or NULL */
    pid_t *pid_slot;
    long pid; /* the answer: the init's pid, or -1 with e */
    int e;
    bool done;
    struct init_stack *stacks;
} maker = {.turn = PTHREAD_MUTEX_INITIALIZER,
           .lock = PTHREAD_MUTEX_INITIALIZER,
           .asked = PTHREAD_COND_INITIALIZER,
           .answered = PTHREAD_COND_INITIALIZER,
           .once = PTHREAD_ONCE_INIT};

/* A stack no init runs on: one whose init is gone (its pid no longer names a process: reaped;
 * a number reused meanwhile only keeps the stack longer), or a new one. Dead ones beyond a few
 * are given back. On the maker's thread. */
static struct init_stack *stack_take(void)
{
    struct init_stack *got = NULL;
    unsigned spare = 0;
    for (struct init_stack **pp = &maker.stacks; *pp;) {
        struct init_stack *st = *pp;
        if (st->pid && kill(st->pid, 0) < 0 && errno == ESRCH)
            st->pid = 0;
        if (!st->pid && !got) {
            got = st;
        } else if (!st->pid && ++spare > 4) {
            *pp = st->next;
            munmap(st->base, SBXD_NS_INIT_STACK);
            free(st->copy);
            free(st);
            continue;
        }
        pp = &st->next;
    }
    if (got)
        return got;
    got = calloc(1, sizeof(*got));
    if (!got)
        return NULL;
    got->base = mmap(NULL, SBXD_NS_INIT_STACK, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (got->base == MAP_FAILED || mprotect(got->base, 4096, PROT_NONE) < 0) {
        if (got->base != MAP_FAILED)
            munmap(got->base, SBXD_NS_INIT_STACK);
        free(got);
        return NULL;
    }
    got->next = maker.stacks;
    maker.stacks = got;
    return got;
}

/* One init for the request, sharing the daemon's memory. The filter of a spawning thread is
 * on this one too (harden_thread). The IPC key as spawn_ns_init_start passes it. */
static long maker_clone(const struct spawn_spec *spec, pid_t *pid_slot, int *e)
{
    struct sbxd_err err = {0};
    if (spec->harden && harden_thread(spec->harden, &err) < 0) {
        *e = err.sys_errno ? err.sys_errno : EPERM;
        return -1;
    }
    struct init_stack *st = stack_take();
    if (!st || spec_keep(st, spec) < 0) {
        *e = ENOMEM;
        return -1;
    }
    unsigned long key = spec->harden ? spec->harden->clone_key : 0;
    int pid = clone(ns_init_entry, st->base + SBXD_NS_INIT_STACK,
                    (int)(CLONE_VM | spawn_ns_clone_flags() | spawn_ipc_clone_flag() |
                          CLONE_PARENT_SETTID | SIGCHLD),
                    &st->spec, pid_slot, (void *)key, (pid_t *)key);
    if (pid < 0) {
        *e = errno;
        return -1;
    }
    st->pid = pid;
    return pid;
}

static void *maker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&maker.lock);
    for (;;) {
        while (!maker.spec)
            pthread_cond_wait(&maker.asked, &maker.lock);
        int e = 0;
        maker.pid = maker_clone(maker.spec, maker.pid_slot, &e);
        maker.e = e;
        maker.spec = NULL;
        maker.done = true;
        pthread_cond_signal(&maker.answered);
    }
    return NULL;
}

static void maker_start(void)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    maker.running = pthread_create(&th, &attr, maker_main, NULL) == 0;
    pthread_attr_destroy(&attr);
}

/* Started by main (a thread with no filter yet: the maker loads the spawning threads' filter
 * once, where a thread started from a spawning thread would inherit it and load it again). */
void spawn_ns_maker_start(void)
{
    pthread_once(&maker.once, maker_start);
}

/* Through the maker: the init's pid, or -1 with *e (false: no maker, start it like fork). */
static bool maker_ask(const struct spawn_spec *spec, pid_t *pid_slot, long *pid, int *e)
{
    pthread_once(&maker.once, maker_start);
    if (!maker.running)
        return false;
    pthread_mutex_lock(&maker.turn);
    pthread_mutex_lock(&maker.lock);
    maker.spec = spec;
    maker.pid_slot = pid_slot;
    maker.done = false;
    pthread_cond_signal(&maker.asked);
    while (!maker.done)
        pthread_cond_wait(&maker.answered, &maker.lock);
    *pid = maker.pid;
    *e = maker.e;
    pthread_mutex_unlock(&maker.lock);
    pthread_mutex_unlock(&maker.turn);
    return true;
}

/* A one-command init; it reports on status_fd whether the command could start. */
pid_t spawn_ns_init_start(const struct spawn_spec *spec, pid_t *pid_slot, struct sbxd_err *err)
{
    long pid;
    int e = 0;
    if (!spawn_vm_shared() || !maker_ask(spec, pid_slot, &pid, &e)) {
        /* Like fork: a copy of the daemon. The IPC namespace comes with the init's clone (the
         * command, which the init clones, shares it, and it dies with the namespace's last
         * process); the filter's key in child_tid and tls, whichever order the architecture
         * has them in (harden.h). */
        unsigned long key = spec->harden ? spec->harden->clone_key : 0;
        pid =
            syscall(SYS_clone,
                    spawn_ns_clone_flags() | spawn_ipc_clone_flag() | CLONE_PARENT_SETTID | SIGCHLD,
                    NULL, pid_slot, key, key);
        if (pid == 0)
            ns_init(spec);
        e = errno;
    }
    if (pid < 0)
        return sbxd_fail_errno(err, e == EAGAIN || e == ENOMEM ? SBXD_E_BUSY : SBXD_E_INTERNAL, e,
                               "cannot start a PID namespace");
    return (pid_t)pid;
}

/* The daemon's request travels as a queued real-time signal whose value names the signal: the
 * init, pid 1 of the namespace, sends it with kill(-1) (see spawn_ns_signal). */
void spawn_ns_init_signal(pid_t init, int sig)
{
    union sigval v = {.sival_ptr = (void *)(uintptr_t)(sig & 0xff)};
    sigqueue(init, SBXD_NS_SIGNAL, v);
}
