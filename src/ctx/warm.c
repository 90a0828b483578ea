/* Code contexts: warm kernels, started before they are asked for (context.h,
 * ctx_warm_start). */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/kernelspec.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

/* What a warm kernel is made from: the request of the common case. */
static const char warm_request[] = "{\"language\":\"python\"}";

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned want;
    struct ctx *ready[SBXD_WARM_MAX]; /* started, idle, not in the registry */
    unsigned have;
    bool stop, running;
    bool paused;  /* a reset is under way: make none (ctx_reset, ctx_warm_resume) */
    unsigned gen; /* bumped by each reset: a kernel started before it is not handed out */
    pthread_t thread;
} warm = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* A warm kernel started from exactly this spec, taken out of the pool (NULL: none). */
struct ctx *ctx_warm_take(const char *spec)
{
    struct ctx *w = NULL;
    pthread_mutex_lock(&warm.lock);
    for (unsigned i = 0; i < warm.have && !w; i++)
        if (strcmp(warm.ready[i]->spec, spec) == 0) {
            w = warm.ready[i];
            warm.ready[i] = warm.ready[--warm.have];
        }
    if (w)
        pthread_cond_broadcast(&warm.cond); /* make another */
    pthread_mutex_unlock(&warm.lock);
    if (!w)
        return NULL;
    /* It may have died while it waited (a kernel killed from inside the sandbox). */
    pthread_mutex_lock(&w->lock);
    bool dead = w->dead || !w->shell || bg_ended(w->shell);
    pthread_mutex_unlock(&w->lock);
    if (!dead)
        return w;
    ctx_kill_proc(w, "a warm kernel that died", false);
    ctx_put(w);
    return NULL;
}

size_t ctx_warm_pids(pid_t *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&warm.lock);
    for (unsigned i = 0; i < warm.have && n < max; i++)
        out[n++] = __atomic_load_n(&warm.ready[i]->pid, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&warm.lock);
    return n;
}

static void *warm_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&warm.lock);
    while (!warm.stop) {
        if (warm.have >= warm.want || warm.paused) {
            pthread_cond_wait(&warm.cond, &warm.lock);
            continue;
        }
        unsigned gen = warm.gen;
        pthread_mutex_unlock(&warm.lock);
        struct sbxd_err err = {0};
        struct ctx *c = ctx_alloc(warm_request, strlen(warm_request), &err);
        int rc = c ? ctx_start_proc(c, &err) : -1;
        if (rc < 0) {
            LOG_EVENT("warn", "warm_context_failed", LOG_S("error", err.msg),
                      LOG_I("retry_s", SBXD_WARM_RETRY_S));
            if (c)
                ctx_free(c);
            pthread_mutex_lock(&warm.lock);
            struct timespec until = time_after_ms(CLOCK_REALTIME, SBXD_WARM_RETRY_S * 1000);
            if (!warm.stop)
                pthread_cond_timedwait(&warm.cond, &warm.lock, &until);
            continue;
        }
        c->refs = 1; /* the pool's, then the registry's */
        pthread_mutex_lock(&warm.lock);
        if (warm.stop || warm.gen != gen) {
            /* Shutdown; or a reset began while it started: it may have seen what the reset
             * removed, so it goes, and another is made once the reset is over. */
            bool stop = warm.stop;
            pthread_mutex_unlock(&warm.lock);
            ctx_kill_proc(c, stop ? "sbxd is shutting down" : "the sandbox was reset", false);
            ctx_put(c);
            pthread_mutex_lock(&warm.lock);
            if (stop)
                break;
            continue;
        }
        warm.ready[warm.have++] = c;
    }
    pthread_mutex_unlock(&warm.lock);
    return NULL;
}

void ctx_warm_start(unsigned n)
{
    struct kspec ks;
    struct sbxd_err err = {0};
    if (n > SBXD_WARM_MAX)
        n = SBXD_WARM_MAX;
    if (!n || kspec_find(NULL, "python", &ks, &err) < 0)
        return; /* no python kernel here: nothing to keep warm */
    kspec_free(&ks);
    warm.want = n;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
    warm.running = pthread_create(&warm.thread, &attr, warm_main, NULL) == 0;
    pthread_attr_destroy(&attr);
}

unsigned ctx_warm_ready(void)
{
    pthread_mutex_lock(&warm.lock);
    unsigned n = warm.have;
    pthread_mutex_unlock(&warm.lock);
    return n;
}

/* Under warm.lock, which it lets go: every warm kernel taken out of the pool into v; how
 * many. */
static unsigned take_all(struct ctx *v[SBXD_WARM_MAX])
{
    unsigned n = warm.have;
    memcpy(v, warm.ready, n * sizeof(v[0]));
    warm.have = 0;
    pthread_mutex_unlock(&warm.lock);
    return n;
}

/* Stop making warm kernels and kill those there are (wait: join the maker first). */
void ctx_warm_stop(bool wait)
{
    pthread_mutex_lock(&warm.lock);
    warm.stop = true;
    pthread_cond_broadcast(&warm.cond);
    struct ctx *v[SBXD_WARM_MAX];
    unsigned n = take_all(v);
    for (unsigned i = 0; i < n; i++) {
        if (wait) {
            ctx_kill_proc(v[i], "sbxd is shutting down", false);
            ctx_put(v[i]);
            continue;
        }
        /* (The main thread may be the one that reaps: signal, do not wait.) */
        pthread_mutex_lock(&v[i]->lock);
        struct bg_proc *p = v[i]->shell;
        if (p)
            bg_ref(p);
        pthread_mutex_unlock(&v[i]->lock);
        if (p) {
            struct sbxd_err err = {0};
            bg_signal(p, SIGKILL, &err);
            bg_put(p);
        }
        pthread_mutex_lock(&warm.lock); /* back: ctx_shutdown ends them */
        warm.ready[warm.have++] = v[i];
        pthread_mutex_unlock(&warm.lock);
    }
    if (wait && warm.running) {
        pthread_join(warm.thread, NULL);
        warm.running = false;
    }
}

/* The warm kernels, taken out of the pool and killed (waiting for their ends); the maker
 * makes none until ctx_warm_resume. */
void ctx_warm_discard(void)
{
    pthread_mutex_lock(&warm.lock);
    warm.paused = true;
    warm.gen++;
    struct ctx *v[SBXD_WARM_MAX];
    unsigned n = take_all(v);
    for (unsigned i = 0; i < n; i++) {
        ctx_kill_proc(v[i], "the sandbox was reset", false);
        ctx_put(v[i]);
    }
}

void ctx_warm_resume(void)
{
    pthread_mutex_lock(&warm.lock);
    warm.paused = false;
    pthread_cond_broadcast(&warm.cond); /* (also ends a wait to retry a failed start) */
    pthread_mutex_unlock(&warm.lock);
}
