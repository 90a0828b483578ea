/* Code contexts: a context, made from its request and started by its kind, and one
 * execution in it, whatever the kind (context.h, context_internal.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/cleanup.h"
#include "sbxd/context.h"
#include "sbxd/files.h"
#include "sbxd/kernelspec.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/proc_mem.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

const char *ctx_status_name(enum ctx_status s)
{
    static const char *const names[] = {"ok", "error", "timeout", "died"};
    return names[s];
}

int ctx_random_hex(char *out, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[16];
    if (n > sizeof(raw) || getrandom(raw, n, 0) != (ssize_t)n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * n] = '\0';
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* One execution                                                                        */

void ctx_mark_dead(struct ctx *c, const char *why)
{
    if (!c->dead)
        snprintf(c->dead_reason, sizeof(c->dead_reason), "%.*s", (int)sizeof(c->dead_reason) - 1,
                 why); /* a longer reason is cut, as any message */
    c->dead = true;
    c->pid = 0;
    pthread_cond_broadcast(&c->cond);
}

void ctx_ended_reason(struct bg_proc *p, const char *what, char *out, size_t len)
{
    struct bg_info in;
    bg_info(p, &in);
    if (in.res.oom_killed)
        snprintf(out, len, "the %s was killed for running out of memory", what);
    else if (in.res.timed_out)
        snprintf(out, len, "the %s reached sbxd's longest lifetime for a process", what);
    else if (in.res.signal)
        snprintf(out, len, "the %s was killed by signal %d", what, in.res.signal);
    else
        snprintf(out, len, "the %s exited with status %d", what, in.res.exit_code);
}

void ctx_interrupt_run(struct ctx_run *r)
{
    if (r->interrupting || r->over)
        return;
    r->interrupting = true;
    r->res.interrupted = true;
    r->grace_ns = time_mono_ns() + (int64_t)SBXD_CTX_GRACE_MS * 1000000;
    struct ctx_intr in = {.proc = r->shell,
                          .jc = r->jc,
                          .fd = r->code_fd,
                          .token = r->token,
                          .message = r->c->interrupt_message};
    r->c->kind->interrupt(&in);
}

/* (A restart or a delete may have let the context go already.) */
void ctx_finish(struct ctx_run *r, enum ctx_status status, const char *why)
{
    struct ctx *c = r->c;
    r->over = true;
    if (__atomic_load_n(&r->asked, __ATOMIC_ACQUIRE))
        r->res.interrupted = true;
    r->res.status = status;
    r->res.duration_ms = (double)(time_mono_ns() - r->start_ns) / 1e6;
    if (why)
        snprintf(r->res.reason, sizeof(r->res.reason), "%s", why);
    bg_hold(r->shell, BG_NO_HOLD);
    pthread_mutex_lock(&c->lock);
    if (c->run == r) {
        c->run = NULL;
        c->busy = false;
        c->last_used_real_ns = time_real_ns();
        c->last_used_mono_ns = time_mono_ns();
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
}

void ctx_run_died(struct ctx_run *r, const char *why)
{
    struct ctx *c = r->c;
    pthread_mutex_lock(&c->lock);
    if (c->shell == r->shell)
        ctx_mark_dead(c, why);
    pthread_mutex_unlock(&c->lock);
    r->res.exit_code = -1;
    ctx_finish(r, CTX_DIED, why);
}

/* (If it is still the context's.) */
void ctx_restart_for(struct ctx_run *r)
{
    struct ctx *c = r->c;
    r->res.restarted = true;
    r->res.exit_code = 130;
    pthread_mutex_lock(&c->lock);
    bool current = c->shell == r->shell && c->run == r;
    struct jp_conn *jc = NULL;
    if (current) {
        c->shell = NULL;
        c->run = NULL; /* still busy: the new process starts */
        jc = c->jc;
        c->jc = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    jp_close(jc); /* (the run holds it still) */
    struct bg_info in;
    bg_remove(r->shell, &in); /* kills what the old one ran */
    r->over = true;
    r->res.status = CTX_TIMEOUT;
    r->res.duration_ms = (double)(time_mono_ns() - r->start_ns) / 1e6;
    if (!current)
        return;
    bg_put(r->shell); /* the context's reference */
    struct sbxd_err err = {0};
    int rc = ctx_start_proc(c, &err);
    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        ctx_mark_dead(c, err.msg[0] ? err.msg : "it could not be started again");
    c->busy = false;
    c->last_used_real_ns = time_real_ns();
    c->last_used_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

bool ctx_run_timers(struct ctx_run *r, int64_t now)
{
    if (!r->interrupting && r->deadline_ns && now >= r->deadline_ns) {
        r->timed_out = true;
        ctx_interrupt_run(r);
    }
    if (r->interrupting && now >= r->grace_ns) {
        ctx_restart_for(r);
        return true;
    }
    return false;
}

int ctx_run_next(struct ctx_run *r, int wait_ms, int *stream, const uint8_t **data, size_t *n)
{
    return r->c->kind->run_next(r, wait_ms, stream, data, n);
}

const struct ctx_result *ctx_run_result(const struct ctx_run *r)
{
    return &r->res;
}

void ctx_run_end(struct ctx_run *r)
{
    if (!r)
        return;
    if (!r->over) {
        /* Its client left: stop the code, and read on to the end so that the context is
         * free (and in step) for the next execution. */
        ctx_interrupt_run(r);
        int st;
        const uint8_t *d;
        size_t n;
        while (ctx_run_next(r, -1, &st, &d, &n) >= 0) {
        }
    }
    r->c->kind->run_free(r);
    bg_put(r->shell);
    ctx_put(r->c);
    if (r->admitted)
        exec_service_leave(ctx_svc()); /* its answer is out */
    free(r->buf);
    free(r->work);
    free(r);
}

/* Give the run's code to its process: the run ends as died when it takes nothing. */
static void run_begin(struct ctx_run *r, const char *code, size_t len)
{
    struct sbxd_err err = {0};
    if (r->c->kind->run_begin(r, code, len, &err) == 0)
        return;
    const char *what = r->c->kind->what;
    char why[320];
    snprintf(why, sizeof(why), "the %s did not take the code: %.255s", what, err.msg);
    if (bg_ended(r->shell))
        ctx_ended_reason(r->shell, what, why, sizeof(why));
    ctx_run_died(r, why);
}

/* A run of c's that did not start, let go (and its running slot). */
static void run_discard(struct ctx *c, struct ctx_run *r)
{
    if (!r)
        return;
    c->kind->run_free(r);
    if (r->admitted)
        exec_service_leave(ctx_svc());
    free(r->buf);
    free(r->work);
    free(r);
}

/* The run takes c once it is free (wait_ms at most), with references to c and its process.
 * -1 with err (SBXD_E_CONFLICT) when c is dead, or still busy after wait_ms. */
static int run_take(struct ctx *c, struct ctx_run *r, int wait_ms, struct sbxd_err *err)
{
    pthread_mutex_lock(&c->lock);
    struct timespec until = time_after_ms(CLOCK_MONOTONIC, wait_ms < 0 ? 0 : wait_ms);
    while (c->busy && !c->dead)
        if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT)
            break;
    if (c->dead || c->busy || !c->shell) {
        bool dead = c->dead || !c->shell;
        char why[320];
        snprintf(why, sizeof(why), "%s", c->dead_reason[0] ? c->dead_reason : "no process");
        pthread_mutex_unlock(&c->lock);
        if (dead)
            return sbxd_fail(err, SBXD_E_CONFLICT, 0, "the context is dead (%s); restart it first",
                             why);
        return sbxd_fail(err, SBXD_E_CONFLICT, 0,
                         "the context is still running another execution; retry later");
    }
    c->busy = true;
    c->run = r;
    c->execution_count++;
    r->res.execution_count = c->execution_count;
    r->res.kernel = c->kind->rich_results;
    r->shell = c->shell;
    r->jc = c->jc;
    if (r->jc)
        jp_hold(r->jc);
    r->code_fd = c->chan_fd; /* the run's now: the next one's channel comes back with it */
    c->chan_fd = -1;
    pthread_mutex_unlock(&c->lock);
    bg_ref(r->shell); /* (c is busy: its process stays until this run lets it go) */
    ctx_ref(c);
    r->c = c;
    return 0;
}

struct ctx_run *ctx_run_open(struct ctx *c, const char *code, size_t len, uint64_t timeout_ms,
                             int wait_ms, struct exec_admit *adm, struct sbxd_err *err)
{
    if (memchr(code, '\0', len)) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "'code' must not contain NUL characters");
        return NULL;
    }
    struct ctx_run *r = calloc(1, sizeof(*r));
    if (!r) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    r->code_fd = r->next_fd = -1;
    if (c->kind->run_prepare(c, r, code, len, err) < 0) {
        run_discard(c, r);
        return NULL;
    }
    /* An execution is a command as /execute's are: past --max-running it waits its turn for
     * a running slot (or is refused), so that code run in contexts cannot take more of the
     * machine than the operator allowed. The context's process itself, long-lived, holds
     * none: an idle context would hold a slot for ever. */
    struct exec_admit none = {.client_fd = -1};
    if (exec_service_admit(ctx_svc(), adm ? adm : &none, err) < 0) {
        run_discard(c, r);
        return NULL;
    }
    r->admitted = true;
    if (run_take(c, r, wait_ms, err) < 0) {
        run_discard(c, r);
        return NULL;
    }
    r->start_ns = time_mono_ns();
    r->deadline_ns = timeout_ms ? r->start_ns + (int64_t)timeout_ms * 1000000 : 0;
    run_begin(r, code, len);
    return r;
}

struct ctx_run *ctx_run_start(struct ctx *c, const char *code, size_t len, uint64_t timeout_ms,
                              int wait_ms, struct sbxd_err *err)
{
    return ctx_run_open(c, code, len, timeout_ms, wait_ms, NULL, err);
}

/* ---------------------------------------------------------------------------------- */
/* Contexts                                                                             */

void ctx_proc_release(struct ctx *c, struct bg_proc *p, struct jp_conn *jc)
{
    if (p) {
        struct bg_info in;
        bg_remove(p, &in);
        bg_put(p);
    }
    jp_close(jc);
    ctx_kdir_remove(c);
}

void ctx_kdir_remove(struct ctx *c)
{
    char name[sizeof(c->kdir)];
    pthread_mutex_lock(&c->lock);
    snprintf(name, sizeof(name), "%s", c->kdir);
    c->kdir[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    kdir_remove(name);
}

int64_t ctx_kernel_msg_max(void)
{
    uint64_t max_output = ctx_cfg()->max_output;
    uint64_t m = max_output > (uint64_t)SBXD_KERNEL_MSG_MAX / 4 ? (uint64_t)SBXD_KERNEL_MSG_MAX
                                                                : 4 * max_output;
    return m < (uint64_t)SBXD_KERNEL_MSG_MIN ? SBXD_KERNEL_MSG_MIN : (int64_t)m;
}

struct bg_proc *ctx_spawn(struct ctx *c, int stdin_file, const char *start_dir, const char *env,
                          char *cwd_out, size_t cwd_len, struct sbxd_err *err)
{
    struct request_policy pol;
    exec_service_policy(ctx_svc(), MX_BACKGROUND, &pol);
    autoreq struct exec_request req = {0};
    if (exec_request_copy(&c->tmpl, &req, err) < 0 ||
        (env && exec_request_setenv(&req, env, err) < 0))
        return NULL;
    if (cwd_out)
        snprintf(cwd_out, cwd_len, "%s%s%s", pol.workspace, req.cwd[0] ? "/" : "", req.cwd);
    return exec_service_start_owned(ctx_svc(), STEAL_STRUCT(&req), stdin_file, start_dir, err);
}

cJSON *ctx_spec_env(cJSON *o)
{
    cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
    if (!env) {
        env = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "env", env);
    }
    return cJSON_IsObject(env) ? env : NULL;
}

void ctx_env_force(cJSON *env, const char *name, const char *value)
{
    if (!env)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(env, name);
    cJSON_AddStringToObject(env, name, value);
}

const struct ctx_kind_ops *ctx_kind_for(const char *language, const char *kernel)
{
    static const struct ctx_kind_ops *const kinds[] = {&ctx_shell_kind, &ctx_kernel_kind};
    size_t n = sizeof(kinds) / sizeof(kinds[0]);
    for (size_t i = 0; i + 1 < n; i++)
        if (kinds[i]->claims(language, kernel))
            return kinds[i];
    return kinds[n - 1];
}

/* The client's request for a context, a JSON object of known fields, each once: NULL with
 * err. */
static cJSON *spec_object(const char *body, size_t len, struct sbxd_err *err)
{
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        sbxd_fail(err, SBXD_E_INVALID, 0, "the body must be a JSON object");
        return NULL;
    }
    static const char *const keys[] = {"language", "kernel", "cwd", "env", "limits", NULL};
    for (cJSON *k = o->child; k; k = k->next) {
        bool known = false;
        for (const char *const *n = keys; *n; n++)
            known = known || strcmp(k->string, *n) == 0;
        if (!known || cJSON_GetObjectItemCaseSensitive(o, k->string) != k) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "%s field '%.64s' (known: language, kernel, cwd, env, limits)",
                      known ? "duplicate" : "unknown", k->string);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

/* The spec o, its kind's part in, kept as c's template: parsed and checked once (cwd, env,
 * limits as /execute takes them), and as text (what the warm pool matches by). */
static int spec_keep(struct ctx *c, const cJSON *o, struct sbxd_err *err)
{
    c->spec = cJSON_PrintUnformatted(o);
    if (!c->spec)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    struct request_policy pol;
    exec_service_policy(ctx_svc(), MX_BACKGROUND, &pol);
    if (exec_request_from_json(o, &pol, &c->tmpl, err) < 0)
        return -1;
    /* It lives until deleted, idle too long (ctx_sweep), or the daemon stops. */
    c->tmpl.timeout_ms = SBXD_TIMEOUT_HARD_MAX_MS;
    return 0;
}

/* c's kind and template, the request its process starts from (again at each restart): the
 * client's fields (cwd, env, limits) with its kind's command. -1 with err. */
static int make_spec(struct ctx *c, const char *body, size_t len, struct sbxd_err *err)
{
    cJSON *o = spec_object(body, len, err);
    if (!o)
        return -1;
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "language");
    const cJSON *kern = cJSON_GetObjectItemCaseSensitive(o, "kernel");
    int rc = 0;
    if ((lang && !cJSON_IsString(lang)) || (kern && !cJSON_IsString(kern)))
        rc = sbxd_fail(err, SBXD_E_INVALID, 0,
                       "'language' and 'kernel' must be strings (GET /kernels lists the kernels)");
    char lbuf[sizeof(c->language)] = "";
    if (cJSON_IsString(lang))
        snprintf(lbuf, sizeof(lbuf), "%s", lang->valuestring);
    if (cJSON_IsString(lang) && strlen(lang->valuestring) >= sizeof(lbuf))
        rc = sbxd_fail(err, SBXD_E_INVALID, 0, "no context for language '%.32s...'",
                       lang->valuestring);
    const char *l = lang ? lbuf : kern ? NULL : "bash";
    char kname[64];
    snprintf(kname, sizeof(kname), "%s", cJSON_IsString(kern) ? kern->valuestring : "");
    const char *k = kern ? kname : NULL;
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(o, "cwd");
    snprintf(c->cwd, sizeof(c->cwd), "%s", cJSON_IsString(cw) ? cw->valuestring : "");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "language");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "kernel");
    if (rc == 0) {
        c->kind = ctx_kind_for(l, k);
        rc = c->kind->spec(c, o, l, k, err);
    }
    if (rc == 0)
        rc = spec_keep(c, o, err);
    cJSON_Delete(o);
    return rc;
}

int ctx_start_proc(struct ctx *c, struct sbxd_err *err)
{
    return c->kind->start(c, err);
}

void ctx_free(struct ctx *c)
{
    if (c->shell)
        bg_put(c->shell);
    if (c->kind)
        c->kind->release(c);
    exec_request_free(&c->tmpl);
    free(c->spec);
    pthread_mutex_destroy(&c->admin);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

struct ctx *ctx_alloc(const char *body, size_t len, struct sbxd_err *err)
{
    struct ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    c->chan_fd = c->spare_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->admin, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (make_spec(c, body, len, err) < 0 || ctx_random_hex(c->id, 12) < 0) {
        if (c->tmpl.argv)
            sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for an id");
        ctx_free(c);
        return NULL;
    }
    return c;
}

void ctx_info(struct ctx *c, struct ctx_info *out, bool memory)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", c->id);
    snprintf(out->language, sizeof(out->language), "%s", c->language);
    snprintf(out->kernel, sizeof(out->kernel), "%s", c->kernel_name);
    snprintf(out->cwd, sizeof(out->cwd), "%s", c->cwd);
    out->created_real_ns = c->created_real_ns;
    pthread_mutex_lock(&c->lock);
    out->pid = c->pid;
    out->state = c->dead ? CTX_DEAD : c->busy ? CTX_BUSY : CTX_IDLE;
    out->execution_count = c->execution_count;
    out->last_used_real_ns = c->last_used_real_ns;
    snprintf(out->dead_reason, sizeof(out->dead_reason), "%s", c->dead_reason);
    pthread_mutex_unlock(&c->lock);
    out->memory_bytes = memory ? proc_tree_rss(out->pid) : 0;
}

/* (An execution in progress holds a reference of its own to the process; under c->admin.) */
void ctx_kill_proc(struct ctx *c, const char *why, bool restarting)
{
    pthread_mutex_lock(&c->lock);
    struct bg_proc *p = c->shell;
    struct jp_conn *jc = c->jc;
    c->shell = NULL;
    c->jc = NULL;
    c->run = NULL;
    if (restarting) {
        c->busy = true;
    } else {
        c->busy = false;
        ctx_mark_dead(c, why);
    }
    c->pid = 0;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    ctx_proc_release(c, p, jc);
}

int ctx_restart(struct ctx *c, struct sbxd_err *err)
{
    pthread_mutex_lock(&c->admin);
    if (!ctx_listed(c)) {
        pthread_mutex_unlock(&c->admin);
        return sbxd_fail(err, SBXD_E_NOT_FOUND, 0, "the context was deleted");
    }
    ctx_kill_proc(c, "restarting", true);
    int rc = ctx_start_proc(c, err);
    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        ctx_mark_dead(c, err->msg);
    c->busy = false;
    c->execution_count = 0;
    c->last_used_real_ns = time_real_ns();
    c->last_used_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->admin);
    return rc;
}

bool ctx_interrupt(struct ctx *c)
{
    pthread_mutex_lock(&c->lock);
    struct ctx_run *r = c->run;
    struct bg_proc *shell = r ? r->shell : NULL;
    struct jp_conn *jc = r ? r->jc : NULL;
    char token[TOKEN_LEN + 1];
    int fd = -1;
    if (r) {
        __atomic_store_n(&r->asked, true, __ATOMIC_RELEASE);
        memcpy(token, r->token, sizeof(token));
        /* (The run closes its fifo only once it is no longer c->run.) */
        fd = r->code_fd >= 0 ? fcntl(r->code_fd, F_DUPFD_CLOEXEC, 3) : -1;
        bg_ref(shell); /* (the table's lock after c's: never the other way round) */
        if (jc)
            jp_hold(jc);
    }
    pthread_mutex_unlock(&c->lock);
    if (!shell)
        return false;
    struct ctx_intr in = {
        .proc = shell, .jc = jc, .fd = fd, .token = token, .message = c->interrupt_message};
    c->kind->interrupt(&in);
    if (fd >= 0)
        close(fd);
    jp_close(jc);
    bg_put(shell);
    return true;
}
