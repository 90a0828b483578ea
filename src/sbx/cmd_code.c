/*
 * cmd_code.c - `sbx code` (POST /run_code: code in a context, streamed) and `sbx contexts`
 * (GET /contexts, DELETE /contexts/{id}).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx.h"

/* What `sbx code -` may read: sbxd caps request bodies (--max-body-bytes) well below this. */
#define SBX_MAX_CODE (64u * 1024 * 1024)

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* The code from stdin ('-'); SBX_OK or an exit status. */
static int read_code(const char *cmd, struct buf *b)
{
    return read_stdin_all(cmd, b, SBX_MAX_CODE, "the code on stdin is over 64 MiB",
                          "the code holds a NUL byte, which no context takes");
}

/* The streamed answer: output as it comes, the end event kept. */
struct code_stream {
    const char *cmd;
    cJSON *end;
};

static int code_event(const cJSON *ev, void *ud, char *err, size_t errlen)
{
    struct code_stream *st = ud;
    const char *type = str(ev, "type");
    if (!type)
        return 0;
    int fd = strcmp(type, "stdout") == 0   ? STDOUT_FILENO
             : strcmp(type, "stderr") == 0 ? STDERR_FILENO
                                           : -1;
    if (fd >= 0) {
        const char *data = str(ev, "data");
        if (data && write_all(fd, data, strlen(data)) < 0) {
            snprintf(err, errlen, "cannot write to %s: %s",
                     fd == STDOUT_FILENO ? "stdout" : "stderr", strerror(errno));
            return -1;
        }
        return 0;
    }
    if (strcmp(type, "end") == 0) {
        if (!(st->end = cJSON_Duplicate(ev, 1))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        return 1;
    }
    return 0; /* start, heartbeat, and types a newer sbxd may add */
}

/* A note on stderr when the code did not simply end, and its exit status as ours. */
static int code_finish(const char *cmd, const cJSON *end)
{
    const char *status = str(end, "status");
    if (!status)
        return fail(cmd, "sbxd's result has no status");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(end, "error");
    const char *why = cJSON_IsObject(e) ? str(e, "value") : NULL;
    if (strcmp(status, "died") == 0)
        return fail(NULL, "the context died: %s", why ? why : "no reason given");
    if (strcmp(status, "timeout") == 0)
        fail(NULL, "code %s", why ? why : "timed out");
    int ec = (int)num(end, "exit_code", SBX_FAIL);
    return ec < 0 || ec > 255 ? SBX_FAIL : ec;
}

static const struct option code_longs[] = {
    {"language", required_argument, NULL, 'l'},
    {"context", required_argument, NULL, 'c'},
    {"timeout", required_argument, NULL, 't'},
    {NULL, 0, NULL, 0},
};

int cmd_code(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    const char *language = "bash", *context = NULL;
    long timeout_ms = 0;
    opt_reset();
    int c;
    while ((c = opt_next(cmd->name, argc, argv, "l:c:t:", code_longs)) != -1) {
        switch (c) {
        case 'l':
            language = optarg;
            break;
        case 'c':
            context = optarg;
            break;
        case 't':
            if ((timeout_ms = parse_duration_ms(optarg)) < 0)
                return usage_error(cmd->name, "--timeout wants milliseconds (or 10s, 2m), not '%s'",
                                   optarg);
            break;
        case 'h':
            return cmd_print_help(cmd);
        default:
            return SBX_USAGE;
        }
    }
    if (argc - optind != 1)
        return usage_error(cmd->name,
                           "give the code as one argument, or '-' to read it from stdin");
    struct buf code = {0};
    int r = SBX_OK;
    if (strcmp(argv[optind], "-") == 0)
        r = read_code(cmd->name, &code);
    else if (buf_append(&code, argv[optind], strlen(argv[optind])) < 0)
        r = fail(cmd->name, "out of memory");
    cJSON *body = r == SBX_OK ? cJSON_CreateObject() : NULL;
    char *json = NULL;
    if (r == SBX_OK &&
        (!body || !cJSON_AddStringToObject(body, "code", code.p ? code.p : "") ||
         !cJSON_AddStringToObject(body, context ? "context" : "language",
                                  context ? context : language) ||
         (timeout_ms && !cJSON_AddNumberToObject(body, "timeout_ms", (double)timeout_ms)) ||
         !(json = cJSON_PrintUnformatted(body))))
        r = fail(cmd->name, "out of memory");
    cJSON_Delete(body);
    buf_free(&code);
    if (r != SBX_OK)
        return r;
    struct code_stream st = {.cmd = cmd->name};
    struct ndjson nd = {.on_event = code_event, .ud = &st};
    struct request req = {.method = "POST",
                          .path = "/run_code",
                          .json = json,
                          .accept = "application/x-ndjson",
                          .sink = ndjson_sink,
                          .sink_ud = &nd,
                          .sink_type = "application/x-ndjson"};
    struct response resp;
    char err[256] = "";
    if (http_perform(s, cmd->name, &req, &resp) < 0)
        r = SBX_FAIL;
    else if (resp.status != 200)
        r = http_report(cmd->name, &resp);
    else if (ndjson_finish(&nd, err, sizeof(err)) < 0)
        r = fail(cmd->name, "%s", err);
    else if (!st.end)
        r = fail(cmd->name, "the stream from sbxd ended before the code's end event");
    else
        r = code_finish(cmd->name, st.end);
    buf_free(&nd.line);
    cJSON_Delete(st.end);
    response_free(&resp);
    free(json);
    return r;
}

/* ------------------------------------------------------------------ contexts */

static int contexts_list(const struct sbx *s, const char *cmd)
{
    struct request req = {.method = "GET", .path = "/contexts"};
    struct response resp;
    if (http_perform(s, cmd, &req, &resp) < 0) {
        response_free(&resp);
        return SBX_FAIL;
    }
    int r = SBX_OK;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(resp.json, "contexts");
    if (resp.status != 200)
        r = http_report(cmd, &resp);
    else if (!cJSON_IsArray(list))
        r = fail(cmd, "sbxd's answer has no context list");
    if (r != SBX_OK) {
        response_free(&resp);
        return r;
    }
    printf("%-24s  %-8s  %7s  %-5s  %5s  %s\n", "ID", "LANGUAGE", "PID", "STATE", "EXECS",
           "LAST USED");
    const cJSON *x;
    cJSON_ArrayForEach(x, list)
    {
        const char *id = str(x, "id"), *lang = str(x, "language"), *state = str(x, "state");
        const char *used = str(x, "last_used_at");
        printf("%-24s  %-8s  %7.0f  %-5s  %5.0f  ", id ? id : "?", lang ? lang : "?",
               num(x, "pid", 0), state ? state : "?", num(x, "execution_count", 0));
        put_escaped(stdout, used ? used : "-");
        putchar('\n');
    }
    response_free(&resp);
    return fflush(stdout) == 0 ? SBX_OK : fail(cmd, "cannot write to stdout: %s", strerror(errno));
}

int cmd_contexts(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    opt_reset();
    int c;
    if ((c = opt_next(cmd->name, argc, argv, "", NULL)) != -1)
        return c == 'h' ? cmd_print_help(cmd) : SBX_USAGE;
    if (optind == argc)
        return contexts_list(s, cmd->name);
    if (strcmp(argv[optind], "rm") != 0)
        return usage_error(cmd->name, "unknown action '%s' (known: rm)", argv[optind]);
    if (argc - optind < 2)
        return usage_error(cmd->name, "rm wants the id of a context");
    int r = SBX_OK;
    for (int i = optind + 1; i < argc; i++) {
        char *path = url_path("/contexts/", argv[i]);
        if (!path)
            return fail(cmd->name, "out of memory");
        struct request req = {.method = "DELETE", .path = path};
        struct response resp;
        if (http_perform(s, cmd->name, &req, &resp) < 0)
            r = SBX_FAIL;
        else if (resp.status != 200)
            r = http_report(cmd->name, &resp);
        response_free(&resp);
        free(path);
    }
    return r;
}
