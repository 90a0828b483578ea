/*
 * event.c - a command's result and the events of a streamed command as JSON objects, the
 * same for every front that speaks JSON (/execute, its stream, a background process's
 * output and state). The framing (NDJSON lines, SSE events) is the front's: http/events.c.
 */
#include <stdio.h>

#include "sbxd/exec_service.h"

static void write_stream(struct jsonw *w, const char *key, const struct outbuf *ob,
                         enum exec_encoding enc)
{
    jw_key(w, key);
    if (enc == EXEC_ENC_BASE64)
        jw_base64(w, ob->data, ob->len);
    else
        jw_str_utf8(w, ob->data, ob->len, outbuf_truncated(ob));
}

void exec_result_fields(struct jsonw *w, const char *id, const struct job_result *r,
                        const struct outbuf *out, const struct outbuf *errb, enum exec_encoding enc)
{
    jw_key(w, "id");
    jw_str(w, id);
    jw_key(w, "status");
    jw_str(w, job_status_name(r->status));
    jw_key(w, "exit_code");
    jw_int(w, r->exit_code);
    jw_key(w, "signal");
    if (r->signal)
        jw_int(w, r->signal);
    else
        jw_null(w);
    if (out) {
        write_stream(w, "stdout", out, enc);
        write_stream(w, "stderr", errb, enc);
    }
    jw_key(w, "encoding");
    jw_str(w, enc == EXEC_ENC_BASE64 ? "base64" : "utf8");
    if (out) {
        jw_key(w, "stdout_truncated");
        jw_bool(w, outbuf_truncated(out));
        jw_key(w, "stderr_truncated");
        jw_bool(w, outbuf_truncated(errb));
    }
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
}

void exec_queued_field(struct jsonw *w, double queued_ms)
{
    jw_key(w, "queued_ms");
    jw_double(w, queued_ms, 3);
}

void exec_event_start(struct jsonw *w, const char *id, pid_t pid, const uint64_t *offset,
                      const double *queued_ms)
{
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "start");
    jw_key(w, "id");
    jw_str(w, id);
    jw_key(w, "pid");
    jw_int(w, pid);
    if (offset) {
        jw_key(w, "offset");
        jw_uint(w, *offset);
    }
    if (queued_ms)
        exec_queued_field(w, *queued_ms);
    jw_obj_end(w);
}

void exec_event_output(struct jsonw *w, int stream, const void *data, size_t n, bool utf8,
                       uint64_t offset, bool bytes)
{
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, exec_stream_name(stream));
    jw_key(w, "data");
    if (utf8)
        jw_str_utf8(w, data, n, false);
    else
        jw_base64(w, data, n);
    jw_key(w, "offset");
    jw_uint(w, offset);
    if (bytes) {
        jw_key(w, "bytes");
        jw_uint(w, n);
    }
    jw_obj_end(w);
}

void exec_event_exit(struct jsonw *w, const char *id, const struct job_result *r,
                     enum exec_encoding enc, const uint64_t *output_end)
{
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "exit");
    exec_result_fields(w, id, r, NULL, NULL, enc);
    if (output_end) {
        jw_key(w, "output_end");
        jw_uint(w, *output_end);
    }
    jw_obj_end(w);
}

const char *exec_stream_name(int stream)
{
    return stream == 1 ? "stdout" : stream == 2 ? "stderr" : "pty";
}

const char *exec_front_name(enum exec_front f)
{
    static const char *const names[FRONT_N] = {"rest", "grpc", "mcp"};
    return (unsigned)f < FRONT_N ? names[f] : "rest";
}
