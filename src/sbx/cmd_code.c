/*
 * cmd_code.c - `sbx code` (POST /run_code: code in a context, streamed: output, results and
 * their images, errors) and `sbx contexts` (GET /contexts, DELETE /contexts/{id}).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx.h"
#include "sbxd/base64.h"

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
    const char *save_dir; /* --save-images (NULL: none) */
    unsigned images;      /* saved so far */
    cJSON *end;
};

/* The image types a bundle may carry, as files. */
static const struct {
    const char *mime, *ext;
    bool b64;
} image_types[] = {
    {"image/png", "png", true},
    {"image/jpeg", "jpg", true},
    {"image/gif", "gif", true},
    {"image/svg+xml", "svg", false},
};

/* Save one image of a bundle into st->save_dir (a new file, never one that is there); a line
 * on stderr names it. 0, or -1 with err. */
static int save_image(struct code_stream *st, const char *data, bool b64, const char *ext,
                      char *err, size_t errlen)
{
    size_t n = strlen(data);
    char *bin = malloc(n + 1);
    long len = (long)n;
    if (!bin) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (b64) {
        /* (Kernels may wrap base64 in lines.) */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (data[i] != '\n' && data[i] != '\r')
                bin[k++] = data[i];
        char *text = bin;
        bin = malloc(k + 3);
        len = bin ? base64_decode(text, k, bin) : -1;
        free(text);
    } else {
        memcpy(bin, data, n);
    }
    if (len < 0) {
        free(bin);
        snprintf(err, errlen, "sbxd sent an image that is not base64");
        return -1;
    }
    char path[4096];
    int fd = -1;
    for (unsigned tries = 0; fd < 0 && tries < 1000; tries++) {
        snprintf(path, sizeof(path), "%s/image-%u.%s", st->save_dir, ++st->images, ext);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    int rc = fd >= 0 && write_all(fd, bin, (size_t)len) == 0 ? 0 : -1;
    if (rc < 0)
        snprintf(err, errlen, "cannot save an image in %s: %s", st->save_dir, strerror(errno));
    if (fd >= 0 && close(fd) < 0 && rc == 0) {
        snprintf(err, errlen, "cannot save %s: %s", path, strerror(errno));
        rc = -1;
    }
    free(bin);
    if (rc == 0)
        fprintf(stderr, "sbx: image saved: %s (%ld bytes)\n", path, len);
    return rc;
}

/* A display or result event: its images saved (or named), its text printed. */
static int show_bundle(struct code_stream *st, const cJSON *b, char *err, size_t errlen)
{
    bool image = false;
    for (size_t i = 0; i < sizeof(image_types) / sizeof(image_types[0]); i++) {
        const char *data = str(b, image_types[i].mime);
        if (!data)
            continue;
        image = true;
        if (!st->save_dir)
            fprintf(stderr, "sbx: an %s image (--save-images DIR keeps it)\n", image_types[i].mime);
        else if (save_image(st, data, image_types[i].b64, image_types[i].ext, err, errlen) < 0)
            return -1;
    }
    const char *text = str(b, "text/plain");
    if (!text || image)
        return 0; /* (a chart's text is its repr: "<Figure size 640x480 ...>") */
    if (write_all(STDOUT_FILENO, text, strlen(text)) < 0 || write_all(STDOUT_FILENO, "\n", 1) < 0) {
        snprintf(err, errlen, "cannot write to stdout: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* An error event: the traceback (or the name and value) on stderr. */
static void show_error(const cJSON *e)
{
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(e, "traceback");
    const cJSON *l;
    bool any = false;
    cJSON_ArrayForEach(l, tb)
    {
        if (cJSON_IsString(l)) {
            fprintf(stderr, "%s\n", l->valuestring);
            any = true;
        }
    }
    if (!any)
        fprintf(stderr, "%s: %s\n", str(e, "name") ? str(e, "name") : "Error",
                str(e, "value") ? str(e, "value") : "");
}

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
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(ev, "data");
    if ((strcmp(type, "result") == 0 || strcmp(type, "display") == 0) && cJSON_IsObject(data))
        return show_bundle(st, data, err, errlen);
    if (strcmp(type, "error") == 0 && cJSON_IsObject(data)) {
        show_error(data);
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
    /* A kernel has no exit status: its run is ok (0) or not (1). */
    const cJSON *xc = cJSON_GetObjectItemCaseSensitive(end, "exit_code");
    if (cJSON_IsNull(xc))
        return strcmp(status, "ok") == 0 ? SBX_OK : 1;
    int ec = (int)num(end, "exit_code", SBX_FAIL);
    return ec < 0 || ec > 255 ? SBX_FAIL : ec;
}

static const struct option code_longs[] = {
    {"language", required_argument, NULL, 'l'},
    {"context", required_argument, NULL, 'c'},
    {"timeout", required_argument, NULL, 't'},
    {"save-images", required_argument, NULL, 's'},
    {NULL, 0, NULL, 0},
};

int cmd_code(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    const char *language = "bash", *context = NULL, *save_dir = NULL;
    long timeout_ms = 0;
    opt_reset();
    int c;
    while ((c = opt_next(cmd->name, argc, argv, "l:c:t:s:", code_longs)) != -1) {
        switch (c) {
        case 'l':
            language = optarg;
            break;
        case 'c':
            context = optarg;
            break;
        case 's':
            save_dir = optarg;
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
    if (save_dir && access(save_dir, W_OK) != 0)
        return usage_error(cmd->name, "--save-images: '%s' is not a directory sbx can write: %s",
                           save_dir, strerror(errno));
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
    struct code_stream st = {.cmd = cmd->name, .save_dir = save_dir};
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
