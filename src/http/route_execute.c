#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/http.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/request.h"
#include "sbxd/spawn.h"

static void write_stream(struct jsonw *w, const char *key, const struct outbuf *ob,
                         enum exec_encoding enc)
{
    jw_key(w, key);
    if (enc == EXEC_ENC_BASE64)
        jw_base64(w, ob->data, ob->len);
    else
        jw_str_utf8(w, ob->data, ob->len, outbuf_truncated(ob));
}

/* The result object of design 3.2, into w. */
static void write_result(struct jsonw *w, const struct job *job, const struct outbuf *out,
                         const struct outbuf *errb, enum exec_encoding enc)
{
    const struct job_result *r = job_result(job);
    jw_obj_begin(w);
    jw_key(w, "id");
    jw_str(w, job_id(job));
    jw_key(w, "status");
    jw_str(w, job_status_name(r->status));
    jw_key(w, "exit_code");
    jw_int(w, r->exit_code);
    jw_key(w, "signal");
    if (r->signal)
        jw_int(w, r->signal);
    else
        jw_null(w);
    write_stream(w, "stdout", out, enc);
    write_stream(w, "stderr", errb, enc);
    jw_key(w, "encoding");
    jw_str(w, enc == EXEC_ENC_BASE64 ? "base64" : "utf8");
    jw_key(w, "stdout_truncated");
    jw_bool(w, outbuf_truncated(out));
    jw_key(w, "stderr_truncated");
    jw_bool(w, outbuf_truncated(errb));
    jw_key(w, "stdout_bytes");
    jw_uint(w, r->stdout_bytes);
    jw_key(w, "stderr_bytes");
    jw_uint(w, r->stderr_bytes);
    jw_key(w, "timed_out");
    jw_bool(w, r->timed_out);
    jw_key(w, "oom_killed");
    jw_bool(w, r->oom_killed);
    jw_key(w, "duration_ms");
    jw_double(w, r->duration_ms, 3);
    jw_key(w, "cpu_ms");
    jw_double(w, r->cpu_ms, 3);
    jw_key(w, "memory_peak_bytes");
    jw_uint(w, r->memory_peak_bytes);
    if (r->status == JOB_FAILED_TO_START) {
        jw_key(w, "error");
        jw_str(w, r->error);
    }
    jw_obj_end(w);
}

/* The audit line: who ran what, where, and how it ended. */
static void audit(const struct exec_request *req, const struct job *job, const char *client)
{
    char cmd[SBXD_AUDIT_COMMAND_MAX + 1];
    size_t n = 0;
    size_t from = req->shell ? 2 : 0; /* for "command", the shell text itself */
    for (size_t i = from; i < req->argc && n < SBXD_AUDIT_COMMAND_MAX; i++) {
        int w = snprintf(cmd + n, sizeof(cmd) - n, "%s%s", i > from ? " " : "", req->argv[i]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (n > SBXD_AUDIT_COMMAND_MAX)
        n = SBXD_AUDIT_COMMAND_MAX;
    cmd[n] = '\0';
    const struct job_result *r = job_result(job);
    LOG_EVENT("info", "exec", LOG_S("id", job_id(job)), LOG_S(req->shell ? "command" : "argv", cmd),
              LOG_S("cwd", req->cwd[0] ? req->cwd : "."),
              LOG_S("status", job_status_name(r->status)), LOG_I("exit_code", r->exit_code),
              r->signal ? LOG_I("signal", r->signal) : LOG_NULL("signal"),
              LOG_D("duration_ms", r->duration_ms), LOG_I("stdout_bytes", r->stdout_bytes),
              LOG_I("stderr_bytes", r->stderr_bytes), LOG_S("client", client));
}

static int cancel_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

enum MHD_Result route_execute(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    if (__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE))
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "UNAVAILABLE",
                           "sbxd is shutting down and takes no new commands");
    struct request_policy pol = {
        .default_timeout_ms = srv->cfg->timeout_ms,
        .max_timeout_ms = srv->cfg->max_timeout_ms,
        .max_memory_bytes = srv->cfg->memory_max,
        .max_pids = srv->cfg->pids_max,
        .max_cpu_quota = (double)sysconf(_SC_NPROCESSORS_ONLN),
        .workspace = srv->workspace,
    };
    struct exec_request req;
    struct sbxd_err err = {0};
    if (exec_request_parse(rc->body ? rc->body : "", rc->body_len, &pol, &req, &err) < 0)
        return reply_err(c, &err);

    unsigned running = __atomic_add_fetch(&srv->running, 1, __ATOMIC_ACQ_REL);
    if (running > srv->cfg->max_running) {
        __atomic_sub_fetch(&srv->running, 1, __ATOMIC_ACQ_REL);
        exec_request_free(&req);
        return reply_error(c, MHD_HTTP_TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED",
                           "%llu commands are running already (--max-running); retry later",
                           (unsigned long long)srv->cfg->max_running);
    }

    struct job_env env = {.rootfd = srv->rootfd,
                          .cancel_fd = cancel_fd(c),
                          .harden = srv->harden,
                          .iso = srv->iso,
                          .memory_max = srv->cfg->memory_max,
                          .pids_max = srv->cfg->pids_max};
    struct job *job = job_start(&req, &env, &err);
    if (!job) {
        __atomic_sub_fetch(&srv->running, 1, __ATOMIC_ACQ_REL);
        exec_request_free(&req);
        return reply_err(c, &err);
    }

    size_t cap = srv->cfg->max_output_bytes;
    if (req.limits.output_bytes < cap)
        cap = req.limits.output_bytes;
    struct outbuf out, errb;
    outbuf_init(&out, cap);
    outbuf_init(&errb, cap);
    char buf[SBXD_READ_CHUNK];
    struct job_event ev;
    do {
        job_step(job, -1, buf, sizeof(buf), &ev);
        if (ev.type == JOB_EV_OUTPUT)
            outbuf_append(ev.stream == 1 ? &out : &errb, buf, ev.len);
    } while (ev.type != JOB_EV_EXIT);

    struct jsonw w;
    jw_init(&w, 512 + out.len + errb.len);
    write_result(&w, job, &out, &errb, req.encoding);
    spawn_note_daemon_peak(out.alloc + errb.alloc + w.cap + rc->body_cap);
    audit(&req, job, rc->client);
    outbuf_free(&out);
    outbuf_free(&errb);
    job_free(job);
    exec_request_free(&req);
    rc->holds_running = true; /* until the answer is sent (server.c, on_completed) */
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}
