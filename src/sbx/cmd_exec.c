/*
 * cmd_exec.c - `sbx exec` (argv, no shell) and `sbx run` (a shell string): POST /execute.
 *
 * Output is asked for in base64 so that the command's exact bytes reach our stdout and
 * stderr (utf8 would replace invalid sequences with U+FFFD), and sbx exits with the
 * command's own exit code. With --stream the answer is NDJSON and every stdout/stderr event
 * is written the moment it arrives.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx.h"

/* What --stdin may send: sbxd caps request bodies (--max-body-bytes) well below this. */
#define SBX_MAX_STDIN (64u * 1024 * 1024)

struct exec_opts {
    long timeout_ms; /* 0: sbxd's default */
    cJSON *env;      /* an object, or NULL */
    const char *cwd;
    bool stream;
    bool send_stdin;
    bool no_network;
};

enum { OPT_NO_NETWORK = 256 };

static const struct option exec_longs[] = {
    {"timeout", required_argument, NULL, 't'},
    {"env", required_argument, NULL, 'e'},
    {"cwd", required_argument, NULL, 'C'},
    {"stream", no_argument, NULL, 's'},
    {"stdin", no_argument, NULL, 'i'},
    {"no-network", no_argument, NULL, OPT_NO_NETWORK},
    {NULL, 0, NULL, 0},
};

/* K=V into the env object; the last value of a key wins (sbxd refuses duplicate keys). */
static int env_add(const char *cmd, struct exec_opts *o, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return usage_error(cmd, "--env wants NAME=VALUE, not '%s'", kv);
    char name[256];
    if ((size_t)(eq - kv) >= sizeof(name))
        return usage_error(cmd, "--env: the name in '%.40s...' is too long", kv);
    snprintf(name, sizeof(name), "%.*s", (int)(eq - kv), kv);
    if (!o->env && !(o->env = cJSON_CreateObject()))
        return fail(cmd, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(o->env, name);
    if (!cJSON_AddStringToObject(o->env, name, eq + 1))
        return fail(cmd, "out of memory");
    return SBX_OK;
}

/* Parse the options; returns -1 to go on, else the exit status (help, or an error). */
static int exec_opts_parse(const struct sbx_cmd *cmd, int argc, char **argv, struct exec_opts *o)
{
    opt_reset();
    int c;
    while ((c = opt_next(cmd->name, argc, argv, "t:e:C:si", exec_longs)) != -1) {
        int r;
        switch (c) {
        case 't':
            if ((o->timeout_ms = parse_duration_ms(optarg)) < 0)
                return usage_error(cmd->name, "--timeout wants milliseconds (or 10s, 2m), not '%s'",
                                   optarg);
            break;
        case 'e':
            if ((r = env_add(cmd->name, o, optarg)) != SBX_OK)
                return r;
            break;
        case 'C':
            o->cwd = optarg;
            break;
        case 's':
            o->stream = true;
            break;
        case 'i':
            o->send_stdin = true;
            break;
        case OPT_NO_NETWORK:
            o->no_network = true;
            break;
        case 'h':
            return cmd_print_help(cmd);
        default:
            return SBX_USAGE;
        }
    }
    return -1;
}

/* sbx's own stdin as text for the command's (the request's "stdin" is a JSON string: text,
 * never a NUL); SBX_OK or an exit status. */
static int read_stdin_text(const char *cmd, struct buf *b)
{
    return read_stdin_all(cmd, b, SBX_MAX_STDIN,
                          "stdin is over 64 MiB; upload it with 'sbx put' and redirect it",
                          "stdin holds a NUL byte, which --stdin cannot send; upload it with "
                          "'sbx put' and redirect it instead");
}

/* The request body: {"argv":[...]} or {"command":"..."} with the options. */
static int exec_body(const char *cmd, const struct exec_opts *o, cJSON *what, char **json)
{
    cJSON *req = cJSON_CreateObject();
    struct buf in = {0};
    int r = SBX_FAIL;
    if (!req || !what)
        goto oom;
    if (!cJSON_AddItemToObject(req, cJSON_IsArray(what) ? "argv" : "command", what))
        goto oom;
    what = NULL;
    if (!cJSON_AddStringToObject(req, "encoding", "base64"))
        goto oom;
    if (o->timeout_ms && !cJSON_AddNumberToObject(req, "timeout_ms", (double)o->timeout_ms))
        goto oom;
    if (o->cwd && !cJSON_AddStringToObject(req, "cwd", o->cwd))
        goto oom;
    if (o->no_network && !cJSON_AddFalseToObject(req, "network"))
        goto oom;
    if (o->env) {
        cJSON *env = cJSON_Duplicate(o->env, 1);
        if (!env || !cJSON_AddItemToObject(req, "env", env)) {
            cJSON_Delete(env);
            goto oom;
        }
    }
    if (o->send_stdin) {
        if ((r = read_stdin_text(cmd, &in)) != SBX_OK)
            goto out;
        r = SBX_FAIL;
        if (!cJSON_AddStringToObject(req, "stdin", in.p ? in.p : ""))
            goto oom;
    }
    if (!(*json = cJSON_PrintUnformatted(req)))
        goto oom;
    r = SBX_OK;
    goto out;
oom:
    fail(cmd, "out of memory");
out:
    cJSON_Delete(what);
    cJSON_Delete(req);
    buf_free(&in);
    return r;
}

/* Decode one base64 piece of output and write it to fd; SBX_OK or an exit status. */
static int write_output(const char *cmd, int fd, const char *data, bool base64, size_t *len)
{
    size_t n = strlen(data);
    unsigned char *bytes = NULL;
    if (base64 && !(bytes = b64_decode(data, &n)))
        return fail(cmd, "sbxd sent malformed base64 output");
    int w = write_all(fd, bytes ? (const void *)bytes : data, n);
    int saved = errno;
    free(bytes);
    if (len)
        *len = n;
    if (w < 0)
        return fail(cmd, "cannot write to %s: %s", fd == STDOUT_FILENO ? "stdout" : "stderr",
                    strerror(saved));
    return SBX_OK;
}

static double num(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A note on stderr when the command did not simply exit, and its exit code as ours. */
static int exec_finish(const char *cmd, const cJSON *res, long timeout_ms)
{
    const char *status = str(res, "status");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
    if (!status || !cJSON_IsNumber(code))
        return fail(cmd, "sbxd's result has no status or exit_code");
    char sig[32];
    if (strcmp(status, "timeout") == 0) {
        long ms = timeout_ms ? timeout_ms : (long)(num(res, "duration_ms", 0) + 0.5);
        fail(NULL, "command timed out after %ld ms", ms);
    } else if (strcmp(status, "signaled") == 0) {
        fail(NULL, "command killed by %s",
             signal_describe((int)num(res, "signal", 0), sig, sizeof(sig)));
    } else if (strcmp(status, "oom") == 0) {
        fail(NULL, "command killed: out of memory (its memory limit)");
    } else if (strcmp(status, "output_limit") == 0) {
        fail(NULL, "command killed: it printed more than its output limit");
    } else if (strcmp(status, "failed_to_start") == 0) {
        const char *why = str(res, "error");
        fail(NULL, "command failed to start: %s", why ? why : "no reason given");
    } else if (strcmp(status, "canceled") == 0) {
        fail(NULL, "command canceled by sbxd (shutting down?)");
    } else if (strcmp(status, "exited") != 0) {
        fail(NULL, "command ended: %s", status);
    }
    int ec = (int)code->valuedouble;
    return ec < 0 || ec > 255 ? SBX_FAIL : ec;
}

/* The synchronous answer: both outputs, then notes. */
static int exec_result(const char *cmd, const cJSON *res, long timeout_ms)
{
    if (!cJSON_IsObject(res))
        return fail(cmd, "sbxd's answer is not a JSON object");
    const char *enc = str(res, "encoding");
    bool base64 = enc && strcmp(enc, "base64") == 0;
    const char *out = str(res, "stdout"), *err = str(res, "stderr");
    int r;
    if (out && (r = write_output(cmd, STDOUT_FILENO, out, base64, NULL)) != SBX_OK)
        return r;
    if (err && (r = write_output(cmd, STDERR_FILENO, err, base64, NULL)) != SBX_OK)
        return r;
    static const char *const streams[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        char flag[32], total[32];
        snprintf(flag, sizeof(flag), "%s_truncated", streams[i]);
        snprintf(total, sizeof(total), "%s_bytes", streams[i]);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, flag)))
            fail(NULL, "%s truncated by sbxd: it printed %.0f bytes (--stream passes them all)",
                 streams[i], num(res, total, 0));
    }
    return exec_finish(cmd, res, timeout_ms);
}

/* The streamed answer, event by event. */
struct exec_stream {
    const char *cmd;
    uint64_t next[2]; /* the offset expected next in stdout, stderr */
    cJSON *exit;      /* the exit event, once seen */
};

static int exec_event(const cJSON *ev, void *ud, char *err, size_t errlen)
{
    struct exec_stream *st = ud;
    const char *type = cJSON_GetObjectItemCaseSensitive(ev, "type")->valuestring;
    int which = strcmp(type, "stdout") == 0 ? 0 : strcmp(type, "stderr") == 0 ? 1 : -1;
    if (which >= 0) {
        const char *data = str(ev, "data");
        if (!data) {
            snprintf(err, errlen, "sbxd sent a %s event without data", type);
            return -1;
        }
        uint64_t off = (uint64_t)num(ev, "offset", (double)st->next[which]);
        if (off > st->next[which])
            fail(NULL, "%llu bytes of %s were lost on the way",
                 (unsigned long long)(off - st->next[which]), type);
        size_t n;
        int fd = which == 0 ? STDOUT_FILENO : STDERR_FILENO;
        if (write_output(st->cmd, fd, data, true, &n) != SBX_OK) {
            err[0] = '\0'; /* reported already */
            return -1;
        }
        st->next[which] = off + n;
        return 0;
    }
    if (strcmp(type, "exit") == 0) {
        if (!(st->exit = cJSON_Duplicate(ev, 1))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        return 1;
    }
    return 0; /* start, heartbeat, and types a newer sbxd may add */
}

static int exec_send(const struct sbx *s, const char *cmd, const struct exec_opts *o, cJSON *what)
{
    char *json = NULL;
    int r = exec_body(cmd, o, what, &json);
    if (r != SBX_OK)
        return r;
    struct exec_stream st = {.cmd = cmd};
    struct ndjson nd = {.on_event = exec_event, .ud = &st};
    struct request req = {.method = "POST", .path = "/execute", .json = json};
    if (o->stream) {
        req.accept = "application/x-ndjson";
        req.sink = ndjson_sink;
        req.sink_ud = &nd;
        req.sink_type = "application/x-ndjson";
    }
    struct response resp;
    char err[256] = "";
    if (http_perform(s, cmd, &req, &resp) < 0)
        r = SBX_FAIL;
    else if (resp.status != 200)
        r = http_report(cmd, &resp);
    else if (!o->stream || response_is_json(&resp))
        r = exec_result(cmd, resp.json, o->timeout_ms); /* also a server that did not stream */
    else if (ndjson_finish(&nd, err, sizeof(err)) < 0)
        r = fail(cmd, "%s", err);
    else if (!st.exit)
        r = fail(cmd, "the stream from sbxd ended before the command's exit event");
    else
        r = exec_finish(cmd, st.exit, o->timeout_ms);
    buf_free(&nd.line);
    cJSON_Delete(st.exit);
    response_free(&resp);
    free(json);
    return r;
}

int cmd_exec(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    struct exec_opts o = {0};
    int r = exec_opts_parse(cmd, argc, argv, &o);
    if (r < 0) {
        if (optind >= argc) {
            r = usage_error(cmd->name, "no command given: sbx exec [OPTIONS] -- CMD [ARG]...");
        } else {
            cJSON *args =
                cJSON_CreateStringArray((const char *const *)argv + optind, argc - optind);
            r = exec_send(s, cmd->name, &o, args);
        }
    }
    cJSON_Delete(o.env);
    return r;
}

int cmd_run(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    struct exec_opts o = {0};
    int r = exec_opts_parse(cmd, argc, argv, &o);
    if (r < 0) {
        if (optind >= argc)
            r = usage_error(cmd->name, "no shell command given: sbx run 'SHELL COMMAND'");
        else if (argc - optind > 1)
            r = usage_error(cmd->name,
                            "run takes one shell string; quote it: sbx run 'echo hi | wc -c' "
                            "(or use sbx exec for an argv)");
        else
            r = exec_send(s, cmd->name, &o, cJSON_CreateString(argv[optind]));
    }
    cJSON_Delete(o.env);
    return r;
}
