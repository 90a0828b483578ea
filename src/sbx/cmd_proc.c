/* cmd_proc.c - ps, logs and kill over /processes, and health over /healthz. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx.h"

/* GET or POST path and expect a 2xx JSON object in *resp; SBX_OK or an exit status (after
 * reporting). resp is to be freed by the caller either way. */
static int call_json(const struct sbx *s, const char *cmd, const char *method, const char *path,
                     const char *json, struct response *resp)
{
    struct request req = {.method = method, .path = path, .json = json};
    if (http_perform(s, cmd, &req, resp) < 0)
        return SBX_FAIL;
    if (resp->status / 100 != 2)
        return http_report(cmd, resp);
    if (!cJSON_IsObject(resp->json))
        return fail(cmd, "sbxd's answer is not a JSON object (HTTP %ld)", resp->status);
    return SBX_OK;
}

/* "/processes/<id encoded><tail>"; NULL when out of memory. */
static char *process_path(const char *id, const char *tail)
{
    char *p = url_path("/processes/", id);
    char *full = p ? malloc(strlen(p) + strlen(tail) + 1) : NULL;
    if (full) {
        strcpy(full, p);
        strcat(full, tail);
    }
    free(p);
    return full;
}

/* ------------------------------------------------------------------ ps */

/* The command of a process as one line: its "command", or its "argv" with the words that
 * need it single-quoted, as a shell would take them back. */
static void command_text(const cJSON *p, struct buf *out)
{
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(p, "command");
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(p, "argv");
    if (cJSON_IsString(cmd)) {
        buf_append(out, cmd->valuestring, strlen(cmd->valuestring));
        return;
    }
    const cJSON *w;
    cJSON_ArrayForEach(w, argv)
    {
        if (!cJSON_IsString(w))
            continue;
        const char *s = w->valuestring;
        if (out->len)
            buf_append(out, " ", 1);
        bool plain = *s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789-_./=:,+@%") == strlen(s);
        if (plain) {
            buf_append(out, s, strlen(s));
            continue;
        }
        buf_append(out, "'", 1);
        for (; *s; s++)
            if (*s == '\'')
                buf_append(out, "'\\''", 4);
            else
                buf_append(out, s, 1);
        buf_append(out, "'", 1);
    }
}

static const char *jstr_or(const cJSON *o, const char *key, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

int cmd_ps(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    int c;
    opt_reset();
    if ((c = opt_next(cmd->name, argc, argv, "", NULL)) != -1)
        return c == 'h' ? cmd_print_help(cmd) : SBX_USAGE;
    if (optind < argc)
        return usage_error(cmd->name, "ps takes no arguments");
    struct response resp;
    int r = call_json(s, cmd->name, "GET", "/processes", NULL, &resp);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(resp.json, "processes");
    if (r == SBX_OK && !cJSON_IsArray(list))
        r = fail(cmd->name, "sbxd's answer has no process list");
    if (r != SBX_OK) {
        response_free(&resp);
        return r;
    }
    /* Columns as wide as their widest value. */
    int wid = 2, wstatus = 6;
    const cJSON *p;
    cJSON_ArrayForEach(p, list)
    {
        int n = (int)strlen(jstr_or(p, "id", "?"));
        wid = n > wid ? n : wid;
        n = (int)strlen(jstr_or(p, "status", "?"));
        wstatus = n > wstatus ? n : wstatus;
    }
    printf("%-*s  %7s  %-*s  %4s  %-24s  %s\n", wid, "ID", "PID", wstatus, "STATUS", "EXIT",
           "STARTED", "COMMAND");
    cJSON_ArrayForEach(p, list)
    {
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(p, "pid");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(p, "exit_code");
        char exit_text[16] = "-";
        if (cJSON_IsNumber(code))
            snprintf(exit_text, sizeof(exit_text), "%d", (int)code->valuedouble);
        printf("%-*s  %7.0f  %-*s  %4s  %-24s  ", wid, jstr_or(p, "id", "?"),
               cJSON_IsNumber(pid) ? pid->valuedouble : 0.0, wstatus, jstr_or(p, "status", "?"),
               exit_text, jstr_or(p, "started_at", "?"));
        struct buf text = {0};
        command_text(p, &text);
        put_escaped(stdout, text.p ? text.p : "");
        buf_free(&text);
        putchar('\n');
    }
    response_free(&resp);
    return fflush(stdout) == 0 ? SBX_OK
                               : fail(cmd->name, "cannot write to stdout: %s", strerror(errno));
}

/* ------------------------------------------------------------------ logs */

static int logs_event(const cJSON *ev, void *ud, char *err, size_t errlen)
{
    (void)ud;
    const char *type = cJSON_GetObjectItemCaseSensitive(ev, "type")->valuestring;
    int fd = strcmp(type, "stdout") == 0 || strcmp(type, "pty") == 0 ? STDOUT_FILENO
             : strcmp(type, "stderr") == 0                           ? STDERR_FILENO
                                                                     : -1;
    if (fd >= 0) {
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(ev, "data");
        size_t n;
        unsigned char *bytes = cJSON_IsString(data) ? b64_decode(data->valuestring, &n) : NULL;
        if (!bytes) {
            snprintf(err, errlen, "sbxd sent a %s event without base64 data", type);
            return -1;
        }
        int w = write_all(fd, bytes, n);
        int saved = errno;
        free(bytes);
        if (w < 0) {
            snprintf(err, errlen, "cannot write to %s: %s",
                     fd == STDOUT_FILENO ? "stdout" : "stderr", strerror(saved));
            return -1;
        }
        return 0;
    }
    if (strcmp(type, "dropped") == 0) {
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(ev, "bytes");
        fail("logs", "%.0f bytes of output were dropped: sbxd keeps only the latest part",
             cJSON_IsNumber(bytes) ? bytes->valuedouble : 0.0);
        return 0;
    }
    /* exit: the process has ended and everything was sent; end: all there is for now. */
    return strcmp(type, "exit") == 0 || strcmp(type, "end") == 0 ? 1 : 0;
}

int cmd_logs(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"follow", no_argument, NULL, 'f'}, {NULL, 0, NULL, 0}};
    bool follow = false;
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "f", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c != 'f')
            return SBX_USAGE;
        follow = true;
    }
    if (argc - optind != 1)
        return usage_error(cmd->name, "one process id: sbx logs [-f] ID (sbx ps lists them)");
    char *path = process_path(argv[optind], follow ? "/output?encoding=base64&follow=true"
                                                   : "/output?encoding=base64");
    if (!path)
        return fail(cmd->name, "out of memory");
    struct ndjson nd = {.on_event = logs_event};
    struct request req = {.method = "GET",
                          .path = path,
                          .accept = "application/x-ndjson",
                          .sink = ndjson_sink,
                          .sink_ud = &nd,
                          .sink_type = "application/x-ndjson"};
    struct response resp;
    char err[256] = "";
    int r;
    if (http_perform(s, cmd->name, &req, &resp) < 0)
        r = SBX_FAIL;
    else if (resp.status / 100 != 2)
        r = http_report(cmd->name, &resp);
    else if (ndjson_finish(&nd, err, sizeof(err)) < 0)
        r = fail(cmd->name, "%s", err);
    else if (!nd.done)
        r = fail(cmd->name, "the output stream from sbxd ended early");
    else
        r = SBX_OK;
    buf_free(&nd.line);
    response_free(&resp);
    free(path);
    return r;
}

/* ------------------------------------------------------------------ kill */

/* kill(1)'s "-9" and "-KILL" as the first argument: the signal, or NULL when it is not one
 * of those forms (getopt then has it). *bad when it has the form but no signal sbxd sends. */
static const char *kill_dash_signal(const char *arg, bool *bad)
{
    *bad = false;
    if (arg[0] != '-' || !arg[1] || arg[1] == '-')
        return NULL;
    bool digits = strspn(arg + 1, "0123456789") == strlen(arg + 1);
    const char *name = signal_parse(arg + 1);
    if (!name && digits)
        *bad = true;
    return name;
}

int cmd_kill(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"signal", required_argument, NULL, 's'},
                                          {NULL, 0, NULL, 0}};
    const char *sig = "SIGTERM";
    bool bad = false;
    const char *dash = argc > 1 ? kill_dash_signal(argv[1], &bad) : NULL;
    if (bad)
        return usage_error(cmd->name,
                           "sbxd does not send signal %s; it sends HUP INT QUIT "
                           "KILL USR1 USR2 TERM CONT STOP",
                           argv[1] + 1);
    if (dash) {
        /* kill(1)'s form: drop that word, and parse the rest as usual. */
        sig = dash;
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "s:", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c != 's')
            return SBX_USAGE;
        if (!(sig = signal_parse(optarg)))
            return usage_error(cmd->name,
                               "sbxd does not send signal '%s'; it sends HUP INT QUIT KILL "
                               "USR1 USR2 TERM CONT STOP (or their numbers)",
                               optarg);
    }
    if (optind >= argc)
        return usage_error(cmd->name, "which process? sbx kill [-s SIGNAL] ID... (sbx ps lists "
                                      "them)");
    char json[64];
    snprintf(json, sizeof(json), "{\"signal\":\"%s\"}", sig);
    int r = SBX_OK;
    for (int i = optind; i < argc; i++) {
        char *path = process_path(argv[i], "/signal");
        if (!path)
            return fail(cmd->name, "out of memory");
        struct response resp;
        int rc = call_json(s, cmd->name, "POST", path, json, &resp);
        bool reached = rc == SBX_OK || resp.status != 0;
        response_free(&resp);
        free(path);
        if (rc != SBX_OK)
            r = rc;
        if (!reached)
            break; /* sbxd is unreachable: the others would fail the same way */
    }
    return r;
}

/* ------------------------------------------------------------------ health */

/* A JSON value as text: strings as they are, booleans as yes/no, numbers, "?" if absent. */
static const char *value_text(const cJSON *o, const char *key, char *buf, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v))
        return v->valuestring;
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? "yes" : "no";
    if (cJSON_IsNumber(v)) {
        snprintf(buf, len, "%g", v->valuedouble);
        return buf;
    }
    return "?";
}

static void uptime_text(double s, char *buf, size_t len)
{
    long t = (long)s;
    if (t < 60)
        snprintf(buf, len, "%.1f s", s);
    else if (t < 3600)
        snprintf(buf, len, "%ldm %02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, len, "%ldh %02ldm %02lds", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ldd %02ldh %02ldm", t / 86400, t / 3600 % 24, t / 60 % 60);
}

/* "label  key value, key value, ..." for the isolation fields present. */
static void health_line(const char *label, const cJSON *iso, const char *const *keys)
{
    int n = 0;
    for (; *keys; keys++) {
        if (!cJSON_GetObjectItemCaseSensitive(iso, *keys))
            continue;
        char b[32];
        if (n++ == 0)
            printf("%-11s %s ", label, *keys);
        else
            printf(", %s ", *keys);
        put_escaped(stdout, value_text(iso, *keys, b, sizeof(b)));
    }
    if (n)
        putchar('\n');
}

int cmd_health(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    int c;
    opt_reset();
    if ((c = opt_next(cmd->name, argc, argv, "", NULL)) != -1)
        return c == 'h' ? cmd_print_help(cmd) : SBX_USAGE;
    if (optind < argc)
        return usage_error(cmd->name, "health takes no arguments");
    struct request req = {.method = "GET", .path = "/healthz"};
    struct response resp;
    if (http_perform(s, cmd->name, &req, &resp) < 0) {
        response_free(&resp);
        return SBX_FAIL;
    }
    /* 503 (draining, degraded) has the same object: show it, then fail. */
    const cJSON *h = resp.json;
    const char *status = cJSON_IsObject(h) ? jstr_or(h, "status", NULL) : NULL;
    if (!status) {
        int r = resp.status / 100 != 2 ? http_report(cmd->name, &resp)
                                       : fail(cmd->name, "sbxd's health answer is malformed");
        response_free(&resp);
        return r;
    }
    char b1[32], b2[32], up[64];
    const cJSON *uptime = cJSON_GetObjectItemCaseSensitive(h, "uptime_s");
    uptime_text(cJSON_IsNumber(uptime) ? uptime->valuedouble : 0, up, sizeof(up));
    printf("%-11s ", "status");
    put_escaped(stdout, status);
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(h, "reason");
    if (cJSON_IsString(reason)) {
        fputs(" (", stdout);
        put_escaped(stdout, reason->valuestring);
        putchar(')');
    }
    printf("\n%-11s %s\n", "sbxd", value_text(h, "version", b1, sizeof(b1)));
    printf("%-11s %s\n", "url", s->url);
    printf("%-11s %s\n", "uptime", up);
    printf("%-11s %s of %s commands\n", "running", value_text(h, "running", b1, sizeof(b1)),
           value_text(h, "max_running", b2, sizeof(b2)));
    if (cJSON_GetObjectItemCaseSensitive(h, "processes"))
        printf("%-11s %s of %s background processes\n", "processes",
               value_text(h, "processes", b1, sizeof(b1)),
               value_text(h, "max_processes", b2, sizeof(b2)));
    const cJSON *iso = cJSON_GetObjectItemCaseSensitive(h, "isolation");
    if (cJSON_IsObject(iso)) {
        static const char *const l1[] = {"tree_kill", "cgroup", "seccomp", NULL};
        static const char *const l2[] = {"memory", "pids", "cpu", NULL};
        static const char *const l3[] = {"user", "capabilities", "no_new_privs", NULL};
        health_line("isolation", iso, l1);
        health_line("", iso, l2);
        health_line("", iso, l3);
    }
    bool ok = resp.status == 200 && strcmp(status, "ok") == 0;
    response_free(&resp);
    if (fflush(stdout) != 0)
        return fail(cmd->name, "cannot write to stdout: %s", strerror(errno));
    return ok ? SBX_OK : SBX_UNHEALTHY;
}

/* A count of the reset's answer (0 when absent). */
static unsigned long long reset_count(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? (unsigned long long)v->valuedouble : 0;
}

/* The summary of POST /reset's answer (a failed one's too: what it did before it failed). */
static void reset_summary(const cJSON *o)
{
    printf("%-11s %llu killed (%llu stray)\n", "processes", reset_count(o, "processes"),
           reset_count(o, "strays"));
    printf("%-11s %llu deleted\n", "contexts", reset_count(o, "contexts"));
    printf("%-11s %llu removed (%llu bytes), and %llu directories\n", "files",
           reset_count(o, "files"), reset_count(o, "bytes"), reset_count(o, "directories"));
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "restored");
    if (cJSON_IsObject(r))
        printf("%-11s %llu files, %llu directories, %llu symlinks restored (%llu bytes)\n",
               "baseline", reset_count(r, "files"), reset_count(r, "directories"),
               reset_count(r, "symlinks"), reset_count(r, "bytes"));
    else
        printf("%-11s none\n", "baseline");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "setup");
    if (cJSON_IsObject(st))
        printf("%-11s %llu files, %llu directories, %llu symlinks from %s (%llu bytes)\n", "setup",
               reset_count(st, "files"), reset_count(st, "directories"),
               reset_count(st, "symlinks"),
               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(st, "from"))
                   ? cJSON_GetObjectItemCaseSensitive(st, "from")->valuestring
                   : "?",
               reset_count(st, "bytes"));
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "duration_ms");
    printf("%-11s %.1f ms\n", "duration", cJSON_IsNumber(d) ? d->valuedouble : 0.0);
}

int cmd_reset(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"json", no_argument, NULL, 'j'},
                                          {"from", required_argument, NULL, 'f'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    bool json = false;
    const char *from = NULL;
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "jhf:", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c == 'f') {
            from = optarg;
            continue;
        }
        if (c != 'j')
            return SBX_USAGE;
        json = true;
    }
    if (optind < argc)
        return usage_error(cmd->name, "reset takes no arguments (--from PATH for an archive)");
    char *body = NULL;
    if (from) {
        cJSON *o = cJSON_CreateObject();
        if (o)
            cJSON_AddStringToObject(o, "from", from);
        body = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!body)
            return fail(cmd->name, "out of memory");
    }
    struct request req = {.method = "POST", .path = "/reset", .json = body ? body : "{}"};
    struct response resp;
    if (http_perform(s, cmd->name, &req, &resp) < 0) {
        response_free(&resp);
        free(body);
        return SBX_FAIL;
    }
    const cJSON *o = resp.json;
    bool reported = cJSON_IsObject(o) && cJSON_GetObjectItemCaseSensitive(o, "processes");
    int r = SBX_OK;
    if (resp.status != 200 || !reported) {
        /* A failed reset says what it did before it failed: shown first, then why. */
        if (reported && !json)
            reset_summary(o);
        r = reported || resp.status != 200 ? http_report(cmd->name, &resp)
                                           : fail(cmd->name, "sbxd's reset answer is malformed");
    } else if (json) {
        fwrite(resp.body.p, 1, resp.body.len, stdout);
    } else {
        reset_summary(o);
    }
    response_free(&resp);
    free(body);
    if (fflush(stdout) != 0)
        return fail(cmd->name, "cannot write to stdout: %s", strerror(errno));
    return r;
}

/* ------------------------------------------------------------------ usage */

static double jnum_or(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int cmd_usage(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    bool json;
    int done = opt_json_only(cmd, argc, argv, &json);
    if (done >= 0)
        return done;
    struct response resp;
    int r = call_json(s, cmd->name, "GET", "/usage", NULL, &resp);
    if (r == SBX_OK && json) {
        fwrite(resp.body.p, 1, resp.body.len, stdout);
        putchar('\n');
    } else if (r == SBX_OK) {
        const cJSON *o = resp.json;
        const double mib = 1024.0 * 1024.0;
        printf("cpu        %.1f%% of %.0f CPUs over %.0f ms (%s)\n", jnum_or(o, "cpu_used_pct"),
               jnum_or(o, "cpu_count"), jnum_or(o, "cpu_interval_ms"),
               jstr_or(o, "cpu_source", "?"));
        printf("memory     %.0f MiB of %.0f MiB (%s)\n", jnum_or(o, "mem_used") / mib,
               jnum_or(o, "mem_total") / mib, jstr_or(o, "memory_source", "?"));
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(o, "disks"))
        {
            printf("disk       %.0f MiB of %.0f MiB used, %.0f MiB free: ",
                   jnum_or(d, "used") / mib, jnum_or(d, "total") / mib, jnum_or(d, "free") / mib);
            put_escaped(stdout, jstr_or(d, "path", "?"));
            putchar('\n');
        }
        printf("running    %.0f commands, %.0f background processes, %.0f contexts\n",
               jnum_or(o, "commands_running"), jnum_or(o, "processes_running"),
               jnum_or(o, "contexts"));
    }
    response_free(&resp);
    if (fflush(stdout) != 0)
        return fail(cmd->name, "cannot write to stdout: %s", strerror(errno));
    return r;
}
