/*
 * service.c - the exec service (exec_service.h): admission, policy, environment, start,
 * collection and audit of a command, for every front alike.
 */
#include <unistd.h>

#include "sbxd/exec_service.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/spawn.h"

void exec_service_policy(const struct exec_service *s, enum metrics_mode mode,
                         struct request_policy *pol)
{
    bool background = mode == MX_BACKGROUND;
    *pol = (struct request_policy){
        .default_timeout_ms = background ? s->cfg->max_timeout_ms : s->cfg->timeout_ms,
        .max_timeout_ms = s->cfg->max_timeout_ms,
        .max_memory_bytes = s->cfg->memory_max,
        .max_pids = s->cfg->pids_max,
        .max_cpu_quota = (double)sysconf(_SC_NPROCESSORS_ONLN),
        .workspace = s->workspace,
        .allow_pty = background,
    };
}

/* What job_start needs besides the request; a background process keeps its stdin open for
 * later writes. */
static struct job_env exec_service_env(const struct exec_service *s, enum metrics_mode mode,
                                       int cancel_fd)
{
    return (struct job_env){.rootfd = s->rootfd,
                            .cancel_fd = cancel_fd,
                            .harden = s->harden,
                            .iso = s->iso,
                            .memory_max = s->cfg->memory_max,
                            .pids_max = s->cfg->pids_max,
                            .interactive = mode == MX_BACKGROUND};
}

void exec_service_audit(enum metrics_mode mode, const char *id, const struct exec_request *req,
                        const struct job_result *r, const char *client)
{
    metrics_execution(mode, r);
    char cmd[SBXD_AUDIT_COMMAND_MAX + 1];
    exec_request_text(req, cmd, sizeof(cmd));
    const struct log_field f[] = {
        LOG_S("id", id),
        LOG_S(req->shell ? "command" : "argv", cmd),
        LOG_S("cwd", req->cwd[0] ? req->cwd : "."),
        LOG_S("status", job_status_name(r->status)),
        LOG_I("exit_code", r->exit_code),
        r->signal ? LOG_I("signal", r->signal) : LOG_NULL("signal"),
        LOG_D("duration_ms", r->duration_ms),
        LOG_I("stdout_bytes", r->stdout_bytes),
        LOG_I("stderr_bytes", r->stderr_bytes),
        LOG_S("client", client), /* the last: left out when there is none */
    };
    size_t n = sizeof(f) / sizeof(f[0]) - (client ? 0 : 1);
    log_event("info", mode == MX_BACKGROUND ? "process" : "exec", f, n);
}

int exec_service_admit(struct exec_service *s, struct sbxd_err *err)
{
    unsigned running = __atomic_add_fetch(&s->running, 1, __ATOMIC_ACQ_REL);
    if (running <= s->cfg->max_running)
        return 0;
    __atomic_sub_fetch(&s->running, 1, __ATOMIC_ACQ_REL);
    metrics_limit(LIM_MAX_RUNNING);
    return sbxd_fail(err, SBXD_E_BUSY, 0,
                     "%llu commands are running already (--max-running); retry later",
                     (unsigned long long)s->cfg->max_running);
}

void exec_service_leave(struct exec_service *s)
{
    __atomic_sub_fetch(&s->running, 1, __ATOMIC_ACQ_REL);
}

unsigned exec_service_running(const struct exec_service *s)
{
    return __atomic_load_n(&s->running, __ATOMIC_ACQUIRE);
}

unsigned exec_service_starting(const struct exec_service *s)
{
    return __atomic_load_n(&s->starting, __ATOMIC_ACQUIRE);
}

struct job *exec_service_start(struct exec_service *s, enum metrics_mode mode,
                               const struct exec_request *req, int cancel_fd, struct sbxd_err *err)
{
    struct job_env env = exec_service_env(s, mode, cancel_fd);
    __atomic_add_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    struct job *job = job_start(req, &env, err);
    __atomic_sub_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    if (!job)
        metrics_start_failed(mode);
    return job;
}

struct bg_proc *exec_service_start_process(struct exec_service *s, struct exec_request *req,
                                           struct sbxd_err *err)
{
    struct job_env env = exec_service_env(s, MX_BACKGROUND, -1);
    __atomic_add_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    struct bg_proc *p = bg_start(req, &env, err);
    __atomic_sub_fetch(&s->starting, 1, __ATOMIC_ACQ_REL);
    /* --max-processes is the one refusal without a system error behind it. */
    if (!p && err->kind == SBXD_E_BUSY && err->sys_errno == 0)
        metrics_limit(LIM_MAX_PROCESSES);
    else if (!p)
        metrics_start_failed(MX_BACKGROUND);
    return p;
}

void exec_service_collect(struct job *job, struct outbuf *out, struct outbuf *errb)
{
    char buf[SBXD_READ_CHUNK];
    struct job_event ev;
    do {
        job_step(job, -1, buf, sizeof(buf), &ev);
        if (ev.type == JOB_EV_OUTPUT)
            outbuf_append(ev.stream == 1 ? out : errb, buf, ev.len);
    } while (ev.type != JOB_EV_EXIT);
}

void exec_service_held(size_t bytes)
{
    spawn_note_daemon_peak(bytes);
}
