/* Code contexts: the sweeper, which shuts down contexts unused for --context-idle-s
 * (context.h, ctx_sweep). */
#include <pthread.h>
#include <stdlib.h>

#include "sbxd/context.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

struct expired {
    size_t n;
    struct ctx *v[];
};

static void *expire_main(void *arg)
{
    struct expired *e = arg;
    for (size_t i = 0; i < e->n; i++) {
        ctx_delete(e->v[i]);
        ctx_put(e->v[i]);
    }
    free(e);
    return NULL;
}

void ctx_sweep(void)
{
    if (!ctx_cfg()->idle_ms)
        return;
    int64_t old = time_mono_ns() - (int64_t)ctx_cfg()->idle_ms * 1000000;
    struct ctx **v;
    size_t n = ctx_list(&v);
    struct expired *e = v ? malloc(sizeof(*e) + n * sizeof(e->v[0])) : NULL;
    size_t k = 0;
    for (size_t i = 0; v && i < n; i++) {
        pthread_mutex_lock(&v[i]->lock);
        bool idle = e && !v[i]->busy && !v[i]->expiring && v[i]->last_used_mono_ns < old;
        if (idle)
            v[i]->expiring = true;
        pthread_mutex_unlock(&v[i]->lock);
        if (idle) {
            LOG_EVENT("info", "context_expired", LOG_S("id", v[i]->id),
                      LOG_I("idle_s", (int64_t)(ctx_cfg()->idle_ms / 1000)));
            e->v[k++] = v[i]; /* its reference goes with it */
        } else {
            ctx_put(v[i]);
        }
    }
    free(v);
    if (!k) {
        free(e);
        return;
    }
    e->n = k;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, expire_main, e) != 0) {
        for (size_t i = 0; i < k; i++) { /* the next sweep tries again */
            pthread_mutex_lock(&e->v[i]->lock);
            e->v[i]->expiring = false;
            pthread_mutex_unlock(&e->v[i]->lock);
            ctx_put(e->v[i]);
        }
        free(e);
    }
    pthread_attr_destroy(&attr);
}
