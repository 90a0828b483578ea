/* Code contexts: the registry of a daemon's contexts, their references, the default context
 * of each language, and the ends of them all (context.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

/* Languages with a default context (POST /run_code) at most. */
#define DEFAULTS_MAX 8

static struct {
    pthread_mutex_t lock;
    struct ctx_config cfg;
    struct exec_service *svc;
    struct ctx *head;
    unsigned alive;
    struct {
        char language[32];
        char id[25];
    } defaults[DEFAULTS_MAX]; /* each language's default context ("" none) */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

void ctx_init(const struct ctx_config *cfg, struct exec_service *svc)
{
    reg.cfg = *cfg;
    reg.svc = svc;
}

const struct ctx_config *ctx_cfg(void)
{
    return &reg.cfg;
}

struct exec_service *ctx_svc(void)
{
    return reg.svc;
}

bool ctx_listed(struct ctx *c)
{
    pthread_mutex_lock(&reg.lock);
    bool listed = c->listed;
    pthread_mutex_unlock(&reg.lock);
    return listed;
}

/* Delete every context in the registry; how many there were. */
static unsigned delete_all(void)
{
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        ctx_delete(v[i]);
        ctx_put(v[i]);
    }
    free(v);
    return (unsigned)n;
}

unsigned ctx_reset(void)
{
    ctx_warm_discard();
    return delete_all();
}

struct ctx *ctx_create(const char *body, size_t len, struct sbxd_err *err)
{
    struct ctx *c = ctx_alloc(body, len, err);
    if (!c)
        return NULL;
    pthread_mutex_lock(&reg.lock);
    if (reg.alive >= reg.cfg.max_contexts) {
        unsigned max = reg.cfg.max_contexts;
        pthread_mutex_unlock(&reg.lock);
        ctx_free(c);
        sbxd_fail(err, SBXD_E_BUSY, 0,
                  "%u contexts are alive already (--max-contexts); delete one or retry later", max);
        return NULL;
    }
    reg.alive++;
    pthread_mutex_unlock(&reg.lock);
    /* (The pool holds kernels: no other spec is the same as theirs.) */
    struct ctx *w = ctx_warm_take(c->spec);
    if (w) {
        /* Started from the same spec: it is this request's, under the name it asked for. */
        snprintf(w->language, sizeof(w->language), "%s", c->language);
        ctx_free(c);
        c = w;
    } else {
        c->busy = true; /* while it starts */
        if (ctx_start_proc(c, err) < 0) {
            pthread_mutex_lock(&reg.lock);
            reg.alive--;
            pthread_mutex_unlock(&reg.lock);
            ctx_free(c);
            return NULL;
        }
    }
    c->created_real_ns = time_real_ns();
    c->last_used_real_ns = c->created_real_ns;
    c->last_used_mono_ns = time_mono_ns();
    c->busy = false;
    pthread_mutex_lock(&reg.lock);
    c->refs = 2; /* the registry's, the caller's */
    c->listed = true;
    struct ctx **pp = &reg.head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = c;
    pthread_mutex_unlock(&reg.lock);
    return c;
}

struct ctx *ctx_get(const char *id)
{
    struct ctx *found = NULL;
    pthread_mutex_lock(&reg.lock);
    for (struct ctx *c = reg.head; c && !found; c = c->next)
        if (strcmp(c->id, id) == 0) {
            found = c;
            c->refs++;
        }
    pthread_mutex_unlock(&reg.lock);
    return found;
}

void ctx_ref(struct ctx *c)
{
    pthread_mutex_lock(&reg.lock);
    c->refs++;
    pthread_mutex_unlock(&reg.lock);
}

struct ctx *ctx_default(const char *language, struct sbxd_err *err)
{
    if (strlen(language) >= sizeof(reg.defaults[0].language)) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "no context for language '%.32s...'", language);
        return NULL;
    }
    static pthread_mutex_t made = PTHREAD_MUTEX_INITIALIZER; /* one made at a time */
    pthread_mutex_lock(&made);
    size_t k = 0;
    while (k < DEFAULTS_MAX && reg.defaults[k].language[0] &&
           strcmp(reg.defaults[k].language, language) != 0)
        k++;
    struct ctx *c = k < DEFAULTS_MAX && reg.defaults[k].id[0] ? ctx_get(reg.defaults[k].id) : NULL;
    if (!c) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "language", language);
        char *spec = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        c = spec ? ctx_create(spec, strlen(spec), err) : NULL;
        if (!spec)
            sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        free(spec);
        if (c && k < DEFAULTS_MAX) { /* (past DEFAULTS_MAX languages: a new one each time) */
            snprintf(reg.defaults[k].language, sizeof(reg.defaults[k].language), "%s", language);
            snprintf(reg.defaults[k].id, sizeof(reg.defaults[k].id), "%s", c->id);
        }
    }
    pthread_mutex_unlock(&made);
    if (!c)
        return NULL;
    pthread_mutex_lock(&c->lock);
    bool dead = c->dead;
    pthread_mutex_unlock(&c->lock);
    if (dead && ctx_restart(c, err) < 0) {
        ctx_put(c);
        return NULL;
    }
    return c;
}

void ctx_put(struct ctx *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&reg.lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&reg.lock);
    if (last)
        ctx_free(c);
}

size_t ctx_list(struct ctx ***out)
{
    pthread_mutex_lock(&reg.lock);
    size_t n = 0;
    for (struct ctx *c = reg.head; c; c = c->next)
        n++;
    struct ctx **v = calloc(n ? n : 1, sizeof(*v));
    size_t i = 0;
    for (struct ctx *c = reg.head; v && c; c = c->next) {
        c->refs++;
        v[i++] = c;
    }
    pthread_mutex_unlock(&reg.lock);
    *out = v;
    return i;
}

size_t ctx_pids(pid_t *out, size_t max)
{
    size_t n = ctx_warm_pids(out, max);
    pthread_mutex_lock(&reg.lock);
    for (struct ctx *c = reg.head; c && n < max; c = c->next)
        out[n++] = __atomic_load_n(&c->pid, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&reg.lock);
    return n;
}

void ctx_delete(struct ctx *c)
{
    pthread_mutex_lock(&c->admin);
    pthread_mutex_lock(&reg.lock);
    bool was = c->listed;
    if (c->listed) {
        struct ctx **pp = &reg.head;
        while (*pp != c)
            pp = &(*pp)->next;
        *pp = c->next;
        c->listed = false;
        reg.alive--;
    }
    pthread_mutex_unlock(&reg.lock);
    ctx_kill_proc(c, "deleted", false);
    pthread_mutex_unlock(&c->admin);
    if (was)
        ctx_put(c); /* the registry's reference */
}

void ctx_kill_all(void)
{
    ctx_warm_stop(false);
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        struct ctx *c = v[i];
        pthread_mutex_lock(&c->lock);
        struct bg_proc *p = c->shell;
        if (p)
            bg_ref(p); /* (the table's lock after c's) */
        ctx_mark_dead(c, "sbxd is shutting down");
        pthread_mutex_unlock(&c->lock);
        if (p) {
            struct sbxd_err err = {0};
            bg_signal(p, SIGKILL, &err);
            bg_put(p);
        }
        ctx_put(c);
    }
    free(v);
}

void ctx_shutdown(void)
{
    ctx_warm_stop(true);
    delete_all();
    ctx_dir_remove();
}
