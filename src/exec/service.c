#include <unistd.h>

#include "sbxd/exec_service.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"

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

struct job_env exec_service_env(const struct exec_service *s, enum metrics_mode mode, int cancel_fd)
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
