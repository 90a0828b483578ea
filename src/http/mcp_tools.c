/*
 * mcp_tools.c - the MCP endpoint's tools and resources, on the same exec service, code
 * contexts, background processes and file-system core as the REST routes: the same
 * limits, the same confinement, the same audit lines.
 *
 * A tool's failure (a command that exits non-zero, a path outside the workspace, a file
 * that is not there) is a result with isError and a message written for a model to act on;
 * only a call that names no tool is a JSON-RPC error.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/base64.h"
#include "sbxd/context.h"
#include "sbxd/exec_service.h"
#include "sbxd/files.h"
#include "sbxd/http.h"
#include "sbxd/http_files.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/mcp.h"
#include "sbxd/timeutil.h"
#include "sbxd/urldecode.h"
#include "sbxd/utf8.h"

/* Entries list_files describes at most, and files resources/list pages through. */
#define MCP_LIST_MAX       1000
#define MCP_RESOURCES_PAGE 100
#define MCP_RESOURCES_SCAN 20000
#define MCP_LIST_DEPTH_MAX 10
/* The longest process_output waits for output. */
#define MCP_OUTPUT_WAIT_MAX_MS 30000
/* Progress of a streamed run_command: at most this often when output comes, and at least
 * this often when none does. */
#define MCP_PROGRESS_MIN_MS  250
#define MCP_PROGRESS_IDLE_MS 2000

/* ------------------------------------------------------------------------------------ */
/* The tools' descriptions and input schemas: what tools/list says.                      */

/* A command's arguments, shared by run_command and start_process. */
static const char CMD_PROPS[] =
    "\"command\":{\"type\":\"string\",\"description\":\"A shell command line, run by /bin/sh "
    "-c. Give this or argv.\"},"
    "\"argv\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,"
    "\"description\":\"A program and its arguments, run without a shell (argv[0] is looked up "
    "in PATH). Give this or command.\"},"
    "\"cwd\":{\"type\":\"string\",\"description\":\"Working directory, relative to the "
    "workspace (default: the workspace root).\"},"
    "\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},"
    "\"description\":\"Environment variables added to the command's.\"},"
    "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"Wall-clock limit in "
    "milliseconds; at the limit the whole process tree is killed.\"}";

#define PATH_PROP(key, what) "\"" key "\":{\"type\":\"string\",\"description\":\"" what "\"}"

/* Each tool: its name, title, description for a model, and the properties of its input
 * schema (with_cmd: the command's first) and the required ones. */
static const struct tool_doc {
    const char *name, *title, *description;
    bool with_cmd;
    const char *props, *required;
    const char *output;      /* outputSchema: what structuredContent holds */
    const char *annotations; /* hints for clients: read-only, destructive, open world */
} TOOL_DOCS[] = {
    {"run_command", "Run a command",
     "Run a command in the sandbox and wait for it to end. Returns its exit code, stdout and "
     "stderr (each capped: the head is kept and truncation is stated). It runs as an "
     "unprivileged user in the workspace, with a timeout (default 60 s) that kills its whole "
     "process tree. isError is true when it did not exit with code 0: read status (exited, "
     "signaled, timeout, oom, output_limit, failed_to_start, canceled) and stderr. Nothing "
     "persists between calls but files: use run_code for state that lives on, and "
     "start_process for servers and long jobs.",
     true,
     "\"stdin\":{\"type\":\"string\",\"description\":\"Text given to the command as its "
     "standard input.\"}",
     NULL,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"status\""
     ":{\"type\":\"string\"},\"exit_code\":{\"type\":\"integer\"},\"signal\":{\"ty"
     "pe\":[\"integer\",\"null\"]},\"stdout\":{\"type\":\"string\"},\"stderr\":{\""
     "type\":\"string\"},\"encoding\":{\"type\":\"string\"},\"stdout_truncated\":{"
     "\"type\":\"boolean\"},\"stderr_truncated\":{\"type\":\"boolean\"},\"stdout_b"
     "ytes\":{\"type\":\"integer\"},\"stderr_bytes\":{\"type\":\"integer\"},\"time"
     "d_out\":{\"type\":\"boolean\"},\"oom_killed\":{\"type\":\"boolean\"},\"durat"
     "ion_ms\":{\"type\":\"number\"},\"cpu_ms\":{\"type\":\"number\"},\"memory_pea"
     "k_bytes\":{\"type\":\"integer\"},\"queued_ms\":{\"type\":\"number\"},\"error"
     "\":{\"type\":\"string\"}},\"required\":[\"status\",\"exit_code\",\"stdout\","
     "\"stderr\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"run_code", "Run code in a live interpreter",
     "Run code in a stateful context: variables, imports and the working directory stay from "
     "one call to the next (a Jupyter kernel for python; a shell session for bash). Returns "
     "stdout, stderr, the value of the last expression as text, images (e.g. matplotlib "
     "figures) as image content, and on an exception its name, value and traceback (isError "
     "true). A timeout interrupts the code; the context survives.",
     false,
     "\"code\":{\"type\":\"string\",\"description\":\"The code to run.\"},"
     "\"language\":{\"type\":\"string\",\"description\":\"python (default), bash, or another "
     "installed kernel's language: its default context is used, made on first use.\"},"
     "\"context\":{\"type\":\"string\",\"description\":\"The id of a context made with POST "
     "/contexts, instead of the language's default one.\"},"
     "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1}",
     "\"code\"",
     "{\"type\":\"object\",\"properties\":{\"context\":{\"type\":\"string\"},\"sta"
     "tus\":{\"type\":\"string\"},\"execution_count\":{\"type\":\"integer\"},\"std"
     "out\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},\"text\":{\"typ"
     "e\":[\"string\",\"null\"]},\"images\":{\"type\":\"integer\"},\"images_left_out\":{\"ty"
     "pe\":\"integer\"},\"error\":{\"ty"
     "pe\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"value\":{\""
     "type\":\"string\"},\"traceback\":{\"type\":\"array\",\"items\":{\"type\":\"s"
     "tring\"}}}}},\"required\":[\"context\",\"status\",\"stdout\",\"stderr\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"read_file", "Read a file",
     "Read a file of the workspace. UTF-8 text comes back as text, anything else as a base64 "
     "blob. At most 1 MiB (--max-output-bytes) per call: for a larger file, read on with "
     "offset (structuredContent says size, length and eof).",
     false,
     PATH_PROP("path",
               "Path relative to the workspace.") ","
                                                  "\"offset\":{\"type\":\"integer\",\"minimum\":0,"
                                                  "\"description\":\"First byte to read "
                                                  "(default 0).\"},"
                                                  "\"length\":{\"type\":\"integer\",\"minimum\":0,"
                                                  "\"description\":\"Bytes to read at most "
                                                  "(default: to the end, within the cap).\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\""
     ":{\"type\":\"integer\"},\"offset\":{\"type\":\"integer\"},\"length\":{\"type"
     "\":\"integer\"},\"encoding\":{\"type\":\"string\",\"enum\":[\"utf8\",\"base6"
     "4\"]},\"eof\":{\"type\":\"boolean\"}},\"required\":[\"path\",\"size\",\"offs"
     "et\",\"length\",\"encoding\",\"eof\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"write_file", "Write a file",
     "Create or replace a file of the workspace with the given content (missing parent "
     "directories are made). The write is atomic: readers see the old content or the new, "
     "never a mixture.",
     false,
     PATH_PROP("path",
               "Path relative to the workspace.") ","
                                                  "\"content\":{\"type\":\"string\","
                                                  "\"description\":\"The file's whole content.\"},"
                                                  "\"encoding\":{\"type\":\"string\",\"enum\":["
                                                  "\"utf8\",\"base64\"],\"description\":\"How "
                                                  "content is given: utf8 text (default) or base64 "
                                                  "for binary data.\"},"
                                                  "\"mode\":{\"type\":\"string\",\"pattern\":\"^0?["
                                                  "0-7]{3}$\",\"description\":\"Permission "
                                                  "bits in octal, e.g. 0755 for a script (default "
                                                  "0644).\"}",
     "\"path\",\"content\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\""
     ":{\"type\":\"integer\"},\"created\":{\"type\":\"boolean\"}},\"required\":[\""
     "path\",\"size\",\"created\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"idempotentHint\":true,\"o"
     "penWorldHint\":false}"},
    {"list_files", "List a directory",
     "List the entries of a workspace directory (sorted by name), with depth > 1 also those "
     "of its subdirectories. Each entry: path, type (file, directory, symlink, other), size, "
     "mode, modified_at; a symlink to something in the workspace is described by what it "
     "leads to, with symlink true (one that leads out or nowhere: type symlink). At most 1000 "
     "entries (truncated says so).",
     false,
     PATH_PROP(
         "path",
         "Directory relative to the workspace (default: its root).") ","
                                                                     "\"depth\":{\"type\":"
                                                                     "\"integer\",\"minimum\":1,"
                                                                     "\"maximum\":10,"
                                                                     "\"description\":\"Levels "
                                                                     "to list (default 1).\"}",
     NULL,
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"entrie"
     "s\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"pat"
     "h\":{\"type\":\"string\"},\"type\":{\"type\":\"string\"},\"size\":{\"type\":"
     "\"integer\"},\"mode\":{\"type\":\"string\"},\"symlink\":{\"type\":\"boolean\"},"
     "\"modified_at\":{\"type\":[\"str"
     "ing\",\"null\"]}},\"required\":[\"path\",\"type\"]}},\"truncated\":{\"type\""
     ":\"boolean\"}},\"required\":[\"path\",\"entries\",\"truncated\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"delete_file", "Delete a file or directory",
     "Delete a file, a symlink (not what it points to) or an empty directory; with recursive, "
     "a directory and everything in it.",
     false,
     PATH_PROP("path", "Path relative to the workspace.") ","
                                                          "\"recursive\":{\"type\":\"boolean\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"delete"
     "d\":{\"type\":\"boolean\"}},\"required\":[\"path\",\"deleted\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}"},
    {"move_file", "Move or rename",
     "Rename a file or directory within the workspace, atomically. An existing destination is "
     "an error unless overwrite is true.",
     false,
     PATH_PROP("from", "Source path relative to the workspace.") "," PATH_PROP(
         "to",
         "Destination path relative to the workspace.") ","
                                                        "\"overwrite\":{\"type\":\"boolean\"}",
     "\"from\",\"to\"",
     "{\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\"},\"to\":{"
     "\"type\":\"string\"}},\"required\":[\"from\",\"to\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}"},
    {"stat_file", "Describe a file",
     "Describe a workspace entry: type, size, mode, owner, times, a symlink's target. With "
     "follow false a symlink itself is described.",
     false,
     PATH_PROP(
         "path",
         "Path relative to the workspace.") ","
                                            "\"follow\":{\"type\":\"boolean\",\"description\":"
                                            "\"Follow a final symlink (default "
                                            "true).\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"name\""
     ":{\"type\":\"string\"},\"type\":{\"type\":\"string\"},\"size\":{\"type\":\"i"
     "nteger\"},\"mode\":{\"type\":\"string\"},\"uid\":{\"type\":\"integer\"},\"gi"
     "d\":{\"type\":\"integer\"},\"modified_at\":{\"type\":[\"string\",\"null\"]},"
     "\"created_at\":{\"type\":[\"string\",\"null\"]},\"symlink_target\":{\"type\""
     ":\"string\"},\"nlink\":{\"type\":\"integer\"},\"etag\":{\"type\":\"string\"}},\"requ"
     "ired\":[\"path\",\"type\",\"size\",\"mode\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"start_process", "Start a background process",
     "Start a long-running command (a server, a build, a watcher) and return at once with its "
     "id. Read its output with process_output, write to its stdin with send_input, end it "
     "with kill_process. Its timeout defaults to the longest allowed.",
     true, NULL, NULL,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"pid\":{\""
     "type\":\"integer\"}},\"required\":[\"id\",\"pid\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"process_output", "Read a process's output",
     "Output of a background process from offset (default 0; pass the next_offset of the last "
     "call to read on), waiting up to wait_ms for some when there is none yet. Says whether "
     "it still runs, and its exit code once it ended.",
     false,
     "\"id\":{\"type\":\"string\",\"description\":\"The id start_process returned.\"},"
     "\"offset\":{\"type\":\"integer\",\"minimum\":0},"
     "\"wait_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":30000}",
     "\"id\"",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"running\""
     ":{\"type\":\"boolean\"},\"status\":{\"type\":\"string\"},\"exit_code\":{\"ty"
     "pe\":[\"integer\",\"null\"]},\"output\":{\"type\":\"string\"},\"stderr\":{\""
     "type\":\"string\"},\"offset\":{\"type\":\"integer\"},\"next_offset\":{\"type"
     "\":\"integer\"},\"dropped_bytes\":{\"type\":\"integer\"}},\"required\":[\"id"
     "\",\"running\",\"status\",\"output\",\"next_offset\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"send_input", "Write to a process's stdin",
     "Write text to a background process's standard input; with eof true its stdin is then "
     "closed.",
     false,
     "\"id\":{\"type\":\"string\"},\"data\":{\"type\":\"string\"},"
     "\"eof\":{\"type\":\"boolean\"}",
     "\"id\"",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"written\""
     ":{\"type\":\"integer\"},\"stdin_open\":{\"type\":\"boolean\"}},\"required\":"
     "[\"id\",\"written\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"kill_process", "Signal a process",
     "Send a signal to a background process's whole tree: SIGKILL (default), SIGTERM, SIGINT, "
     "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT or SIGSTOP.",
     false, "\"id\":{\"type\":\"string\"},\"signal\":{\"type\":\"string\"}", "\"id\"",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"signal\""
     ":{\"type\":\"string\"}},\"required\":[\"id\",\"signal\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
};

static char *tools_json;
static size_t tools_json_len;
static pthread_once_t tools_once = PTHREAD_ONCE_INIT;

static void tools_make(void)
{
    struct jsonw w;
    jw_init(&w, 8192);
    jw_obj_begin(&w);
    jw_key(&w, "tools");
    jw_arr_begin(&w);
    for (size_t i = 0; i < sizeof(TOOL_DOCS) / sizeof(TOOL_DOCS[0]); i++) {
        const struct tool_doc *d = &TOOL_DOCS[i];
        jw_obj_begin(&w);
        jw_key(&w, "name");
        jw_str(&w, d->name);
        jw_key(&w, "title");
        jw_str(&w, d->title);
        jw_key(&w, "description");
        jw_str(&w, d->description);
        jw_key(&w, "inputSchema");
        static const char head[] = "{\"type\":\"object\",\"properties\":{";
        static const char req[] = ",\"required\":[";
        jw_raw(&w, head, sizeof(head) - 1);
        if (d->with_cmd)
            jw_raw(&w, CMD_PROPS, strlen(CMD_PROPS));
        if (d->with_cmd && d->props)
            jw_raw(&w, ",", 1);
        if (d->props)
            jw_raw(&w, d->props, strlen(d->props));
        jw_raw(&w, "}", 1);
        if (d->required) {
            jw_raw(&w, req, sizeof(req) - 1);
            jw_raw(&w, d->required, strlen(d->required));
            jw_raw(&w, "]", 1);
        }
        jw_raw(&w, "}", 1);
        w.need_comma = true;
        jw_key(&w, "outputSchema");
        jw_json(&w, d->output, strlen(d->output));
        jw_key(&w, "annotations");
        jw_json(&w, d->annotations, strlen(d->annotations));
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    tools_json = jw_finish(&w, &tools_json_len);
    jw_free(&w);
}

const char *mcp_tools_list(size_t *len)
{
    pthread_once(&tools_once, tools_make);
    *len = tools_json ? tools_json_len : 12;
    return tools_json ? tools_json : "{\"tools\":[]}";
}

/* ------------------------------------------------------------------------------------ */
/* Results.                                                                              */

__attribute__((format(printf, 2, 3))) static int tool_error(struct jsonw *w, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    jw_reset(w);
    jw_obj_begin(w);
    jw_key(w, "content");
    jw_arr_begin(w);
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "text");
    jw_key(w, "text");
    jw_str(w, msg);
    jw_obj_end(w);
    jw_arr_end(w);
    jw_key(w, "isError");
    jw_bool(w, true);
    jw_obj_end(w);
    return 0;
}

/* Open the result: {"content":[ */
static void result_begin(struct jsonw *w)
{
    jw_obj_begin(w);
    jw_key(w, "content");
    jw_arr_begin(w);
}

static void text_block(struct jsonw *w, const void *text, size_t n)
{
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "text");
    jw_key(w, "text");
    jw_str_utf8(w, text, n, false);
    jw_obj_end(w);
}

/* Close content and open structuredContent. */
static void result_structured(struct jsonw *w)
{
    jw_arr_end(w);
    jw_key(w, "structuredContent");
    jw_obj_begin(w);
}

static void result_end(struct jsonw *w, bool is_error)
{
    jw_obj_end(w); /* structuredContent */
    jw_key(w, "isError");
    jw_bool(w, is_error);
    jw_obj_end(w);
}

/* Arguments: only known ones; false after a tool error. */
static bool only_keys(const cJSON *args, const char *const *keys, struct jsonw *w)
{
    for (const cJSON *a = args->child; a; a = a->next) {
        bool ok = false;
        for (size_t i = 0; keys[i] && !ok; i++)
            ok = strcmp(a->string, keys[i]) == 0;
        if (!ok) {
            char known[256] = "";
            for (size_t i = 0; keys[i]; i++)
                snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
                         i ? ", " : "", keys[i]);
            tool_error(w, "unknown argument '%.64s' (this tool takes: %s)", a->string, known);
            return false;
        }
    }
    return true;
}

/* A whole number argument: def when absent; false after a tool error. */
static bool arg_uint(const cJSON *args, const char *key, uint64_t def, uint64_t max, uint64_t *out,
                     struct jsonw *w)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
    if (!v) {
        *out = def;
        return true;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)max ||
        v->valuedouble != (double)(uint64_t)v->valuedouble) {
        tool_error(w, "'%s' must be a whole number from 0 to %llu", key, (unsigned long long)max);
        return false;
    }
    *out = (uint64_t)v->valuedouble;
    return true;
}

static bool arg_bool(const cJSON *args, const char *key, bool def, bool *out, struct jsonw *w)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
    if (!v) {
        *out = def;
        return true;
    }
    if (!cJSON_IsBool(v)) {
        tool_error(w, "'%s' must be true or false", key);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

/* A workspace path from a path as a model may write it: relative to the workspace, or
 * absolute within it. NULL with msg. */
static char *norm_path(struct server *srv, const char *p, char *msg, size_t msglen)
{
    if (p[0] == '/') {
        const char *rel = http_files_within(srv, p);
        if (!rel) {
            snprintf(msg, msglen,
                     "'%.200s' is outside the workspace (%.200s): paths are relative to it, "
                     "or absolute within it",
                     p, srv->sb->workspace);
            return NULL;
        }
        p = rel;
    }
    while (*p == '/' || (p[0] == '.' && (p[1] == '/' || p[1] == '\0')))
        p++;
    return strdup(p);
}

/* args[key] as a workspace path; NULL after a tool error. "" names the root. */
static char *arg_path(struct mcp_tool_ctx *x, const cJSON *args, const char *key, bool required,
                      struct jsonw *w)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
    if (!v && !required)
        return strdup("");
    if (!cJSON_IsString(v)) {
        tool_error(w, "'%s' is required: a path relative to the workspace, as a string", key);
        return NULL;
    }
    char msg[600];
    char *p = norm_path(x->srv, v->valuestring, msg, sizeof(msg));
    if (!p)
        tool_error(w, "%s", msg);
    return p;
}

/* The arguments of a tool on one path with one flag: only `keys`, the flag (def when
 * absent) and the path. The path (malloc'd), or NULL after a tool error. */
static char *path_and_flag(struct mcp_tool_ctx *x, const cJSON *args, const char *const *keys,
                           const char *flag, bool def, bool *val, struct jsonw *w)
{
    if (!only_keys(args, keys, w) || !arg_bool(args, flag, def, val, w))
        return NULL;
    return arg_path(x, args, "path", true, w);
}

static void write_mode(struct jsonw *w, mode_t mode)
{
    char m[8];
    snprintf(m, sizeof(m), "%04o", (unsigned)(mode & 07777));
    jw_str(w, m);
}

/* ------------------------------------------------------------------------------------ */
/* run_command                                                                           */

/* The result of a command: a summary for the model, and /execute's fields. */
static void command_result(struct jsonw *w, const struct job *job, const struct outbuf *out,
                           const struct outbuf *errb, enum exec_encoding enc, double queued_ms)
{
    const struct job_result *r = job_result(job);
    char head[512];
    int hn;
    if (r->status == JOB_EXITED)
        hn = snprintf(head, sizeof(head), "exit code %d", r->exit_code);
    else if (r->status == JOB_FAILED_TO_START)
        hn = snprintf(head, sizeof(head), "failed to start: %s", r->error);
    else if (r->signal)
        hn = snprintf(head, sizeof(head), "%s (signal %d)", job_status_name(r->status), r->signal);
    else
        hn = snprintf(head, sizeof(head), "%s", job_status_name(r->status));
    if (hn < 0 || (size_t)hn >= sizeof(head))
        hn = (int)strlen(head);
    size_t cap = (size_t)hn + out->len + errb->len + 256;
    char *text = malloc(cap);
    result_begin(w);
    if (text) {
        size_t n = (size_t)hn;
        memcpy(text, head, n);
        if (out->len) {
            n += (size_t)snprintf(text + n, cap - n, "\n--- stdout%s ---\n",
                                  outbuf_truncated(out) ? " (truncated)" : "");
            memcpy(text + n, out->data, out->len);
            n += out->len;
        }
        if (errb->len) {
            n += (size_t)snprintf(text + n, cap - n, "\n--- stderr%s ---\n",
                                  outbuf_truncated(errb) ? " (truncated)" : "");
            memcpy(text + n, errb->data, errb->len);
            n += errb->len;
        }
        text_block(w, text, n);
        free(text);
    }
    result_structured(w);
    exec_result_fields(w, job_id(job), r, out, errb, enc);
    exec_queued_field(w, queued_ms);
    result_end(w, !(r->status == JOB_EXITED && r->exit_code == 0));
}

static const char *const CMD_KEYS[] = {"command",    "argv",  "cwd", "env",
                                       "timeout_ms", "stdin", NULL};

/* Parse a command's arguments as /execute (or /processes) parses its body. */
static bool command_request(struct mcp_tool_ctx *x, const cJSON *args, enum metrics_mode mode,
                            struct exec_request *req, struct jsonw *w)
{
    char *body = cJSON_PrintUnformatted(args);
    if (!body) {
        tool_error(w, "out of memory");
        return false;
    }
    struct request_policy pol;
    exec_service_policy(&x->srv->sb->exec, mode, &pol);
    struct sbxd_err err = {0};
    int r = exec_request_parse(body, strlen(body), &pol, req, &err);
    free(body);
    if (r < 0) {
        tool_error(w, "%s", err.msg);
        return false;
    }
    return true;
}

/* A progress notification as one SSE event into w (emptied first). */
static void sse_progress(struct jsonw *w, const cJSON *token, int64_t ms, const char *msg)
{
    jw_reset(w);
    jw_raw(w, "event: message\ndata: ", 21);
    jw_obj_begin(w);
    jw_key(w, "jsonrpc");
    jw_str(w, "2.0");
    jw_key(w, "method");
    jw_str(w, "notifications/progress");
    jw_key(w, "params");
    jw_obj_begin(w);
    jw_key(w, "progressToken");
    jrpc_write_id(w, token);
    jw_key(w, "progress");
    jw_uint(w, (uint64_t)ms);
    jw_key(w, "message");
    jw_str_utf8(w, msg, strlen(msg), true);
    jw_obj_end(w);
    jw_obj_end(w);
    jw_raw(w, "\n\n", 2);
}

/* A call's answer as one SSE event into w (emptied first): the result res_text (len bytes),
 * or, when code is set or res_text is NULL, an error. */
static void sse_answer(struct jsonw *w, const cJSON *id, const char *res_text, size_t len, int code,
                       const char *msg)
{
    jw_reset(w);
    jw_raw(w, "event: message\ndata: ", 21);
    if (code)
        jrpc_write_error(w, id, code, msg);
    else if (!res_text)
        jrpc_write_error(w, id, JRPC_INTERNAL_ERROR, "out of memory");
    else {
        jrpc_write_result_begin(w, id);
        jw_json(w, res_text, len);
        jrpc_write_result_end(w);
    }
    jw_raw(w, "\n\n", 2);
}

/* A run_command streamed as SSE: progress notifications, then the result. */
struct run_stream {
    struct server *srv;
    struct mcp_session *s;
    struct mcp_call *call;
    struct job *job;
    struct exec_request req;
    struct outbuf out, errb;
    double queued_ms;
    cJSON *id, *token;
    char client[64];
    struct jsonw pending;
    size_t off;
    int64_t start_ns, last_ns;
    uint64_t told; /* output bytes the last progress counted */
    bool done, ended;
    char buf[SBXD_READ_CHUNK];
};

static void run_stream_progress(struct run_stream *rs, int64_t now)
{
    uint64_t bytes = rs->out.total + rs->errb.total;
    double secs = (double)(now - rs->start_ns) / 1e9;
    char msg[400];
    int n = snprintf(msg, sizeof(msg), "running for %.1f s, %llu bytes of output", secs,
                     (unsigned long long)bytes);
    /* The last line of stdout so far, when there is one. */
    if (rs->out.len && n > 0 && (size_t)n < sizeof(msg) - 8) {
        size_t end = rs->out.len;
        while (end && rs->out.data[end - 1] == '\n')
            end--;
        size_t start = end;
        while (start && rs->out.data[start - 1] != '\n' && end - start < 200)
            start--;
        if (end > start)
            snprintf(msg + n, sizeof(msg) - (size_t)n, ": %.*s", (int)(end - start),
                     (const char *)rs->out.data + start);
    }
    sse_progress(&rs->pending, rs->token, (now - rs->start_ns) / 1000000, msg);
    rs->off = 0;
    rs->last_ns = now;
    rs->told = bytes;
}

static void run_stream_final(struct run_stream *rs)
{
    struct jsonw res;
    jw_init(&res, 512 + rs->out.len + rs->errb.len);
    command_result(&res, rs->job, &rs->out, &rs->errb, rs->req.encoding, rs->queued_ms);
    size_t len;
    char *text = jw_finish(&res, &len);
    jw_free(&res);
    sse_answer(&rs->pending, rs->id, text, len, 0, NULL);
    rs->off = 0;
    free(text);
}

static ssize_t run_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct run_stream *rs = cls;
    for (;;) {
        if (rs->off < rs->pending.len)
            return (ssize_t)http_stream_out(&rs->pending, &rs->off, out, max);
        if (rs->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (rs->done) {
            run_stream_final(rs);
            rs->ended = true;
            continue;
        }
        struct job_event ev;
        job_step(rs->job, MCP_PROGRESS_MIN_MS, rs->buf, sizeof(rs->buf), &ev);
        if (ev.type == JOB_EV_OUTPUT)
            outbuf_append(ev.stream == 1 ? &rs->out : &rs->errb, rs->buf, ev.len);
        if (ev.type == JOB_EV_EXIT) {
            rs->done = true;
            exec_service_audit(MX_STREAM, job_id(rs->job), &rs->req, job_result(rs->job),
                               rs->queued_ms, rs->client);
            continue;
        }
        int64_t now = time_mono_ns();
        int64_t since = (now - rs->last_ns) / 1000000;
        bool fresh = rs->out.total + rs->errb.total > rs->told;
        if ((fresh && since >= MCP_PROGRESS_MIN_MS) || since >= MCP_PROGRESS_IDLE_MS)
            run_stream_progress(rs, now);
    }
}

static void run_stream_free(void *cls)
{
    struct run_stream *rs = cls;
    struct mcp_tool_ctx x = {.s = rs->s, .call = rs->call};
    mcp_call_job(&x, NULL);
    mcp_call_end(rs->s, rs->call);
    mcp_session_put(rs->s);
    if (!rs->done) /* the client went away: job_free kills what still runs */
        exec_service_audit(MX_STREAM, job_id(rs->job), &rs->req, job_result(rs->job), rs->queued_ms,
                           rs->client);
    job_free(rs->job);
    exec_service_leave(&rs->srv->sb->exec);
    exec_request_free(&rs->req);
    outbuf_free(&rs->out);
    outbuf_free(&rs->errb);
    cJSON_Delete(rs->id);
    cJSON_Delete(rs->token);
    jw_free(&rs->pending);
    free(rs);
}

static int tool_run_command(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    struct server *srv = x->srv;
    if (!only_keys(args, CMD_KEYS, w))
        return 0;
    if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
        return tool_error(w, "sbxd is shutting down and takes no new commands");
    struct exec_request req;
    if (!command_request(x, args, MX_SYNC, &req, w))
        return 0;
    struct sbxd_err err = {0};
    int fd = x->client_fd;
    struct exec_admit adm = {.client_fd = fd, .stop = &srv->sb->draining};
    if (exec_service_admit(&srv->sb->exec, &adm, &err) < 0) {
        exec_request_free(&req);
        return tool_error(w, "%s", adm.gone ? "the client went away" : err.msg);
    }
    bool streamed = x->progress && x->sse_ok;
    struct job *job =
        exec_service_start(&srv->sb->exec, streamed ? MX_STREAM : MX_SYNC, &req, fd, &err);
    if (!job) {
        exec_service_leave(&srv->sb->exec);
        exec_request_free(&req);
        return tool_error(w, "%s", err.msg);
    }
    mcp_call_job(x, job);
    size_t cap = srv->cfg->max_output_bytes;
    if (req.limits.output_bytes < cap)
        cap = req.limits.output_bytes;
    if (streamed) {
        struct run_stream *rs = calloc(1, sizeof(*rs));
        struct MHD_Response *r = NULL;
        if (rs) {
            rs->srv = srv;
            rs->s = x->s;
            rs->call = x->call;
            rs->job = job;
            rs->req = req;
            rs->queued_ms = adm.queued_ms;
            rs->id = cJSON_Duplicate(x->id, true);
            rs->token = cJSON_Duplicate(x->progress, true);
            snprintf(rs->client, sizeof(rs->client), "%s", x->client ? x->client : "");
            outbuf_init(&rs->out, cap);
            outbuf_init(&rs->errb, cap);
            jw_init(&rs->pending, 1024);
            rs->start_ns = rs->last_ns = time_mono_ns();
            mcp_session_hold(x->s);
            r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, run_stream_read, rs,
                                                  run_stream_free);
            if (!r) {
                run_stream_free(rs); /* ends the call and the job */
                x->streamed = true;
                x->ret = MHD_NO;
                return 0;
            }
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
            MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
            x->streamed = true;
            x->ret = http_queue(x->c, MHD_HTTP_OK, r, 0);
            MHD_destroy_response(r);
            return 0;
        }
        /* No memory for a stream: answered at the end, as without a progress token. */
    }
    struct outbuf out, errb;
    outbuf_init(&out, cap);
    outbuf_init(&errb, cap);
    exec_service_collect(job, &out, &errb);
    mcp_call_job(x, NULL);
    command_result(w, job, &out, &errb, req.encoding, adm.queued_ms);
    exec_service_held(out.alloc + errb.alloc + w->cap);
    exec_service_audit(MX_SYNC, job_id(job), &req, job_result(job), adm.queued_ms, x->client);
    exec_service_leave(&srv->sb->exec);
    outbuf_free(&out);
    outbuf_free(&errb);
    job_free(job);
    exec_request_free(&req);
    return 0;
}

bool mcp_tool_streams(const char *name)
{
    return strcmp(name, "run_command") == 0;
}

/* A call run on a thread of its own, answered as a stream of progress, then its result. */
struct call_stream {
    struct mcp_tool_ctx x; /* the call's (x.c is NULL: the thread has no connection) */
    struct server *srv;
    char *name;
    cJSON *args, *id, *token;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;  /* the tool has answered (lock) */
    bool ended; /* the answer went into pending: the stream ends after it */
    bool joined;
    struct jsonw res; /* the tool's result */
    int code;         /* ... or a JSON-RPC error */
    char msg[512];
    struct jsonw pending;
    size_t off;
    int64_t start_ns;
};

static void *call_stream_main(void *arg)
{
    struct call_stream *cs = arg;
    int code = mcp_tool_call(&cs->x, cs->name, cs->args, &cs->res, cs->msg, sizeof(cs->msg));
    pthread_mutex_lock(&cs->lock);
    cs->code = code;
    cs->done = true;
    pthread_cond_signal(&cs->cond);
    pthread_mutex_unlock(&cs->lock);
    return NULL;
}

static void call_stream_progress(struct call_stream *cs)
{
    int64_t ms = (time_mono_ns() - cs->start_ns) / 1000000;
    char msg[96];
    snprintf(msg, sizeof(msg), "%s running for %.1f s", cs->name, (double)ms / 1000.0);
    sse_progress(&cs->pending, cs->token, ms, msg);
    cs->off = 0;
}

static void call_stream_final(struct call_stream *cs)
{
    size_t len = 0;
    char *text = cs->code ? NULL : jw_finish(&cs->res, &len);
    sse_answer(&cs->pending, cs->id, text, len, cs->code, cs->msg);
    cs->off = 0;
    free(text);
}

static ssize_t call_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct call_stream *cs = cls;
    for (;;) {
        if (cs->off < cs->pending.len)
            return (ssize_t)http_stream_out(&cs->pending, &cs->off, out, max);
        if (cs->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        /* A progress notification each second the tool runs, its answer once it is done. */
        pthread_mutex_lock(&cs->lock);
        struct timespec until = time_after_ms(CLOCK_MONOTONIC, 1000);
        while (!cs->done && pthread_cond_timedwait(&cs->cond, &cs->lock, &until) == 0) {
        }
        bool done = cs->done;
        pthread_mutex_unlock(&cs->lock);
        if (done) {
            pthread_join(cs->thread, NULL);
            cs->joined = true;
            call_stream_final(cs);
            cs->ended = true;
        } else {
            call_stream_progress(cs);
        }
    }
}

static void call_stream_free(void *cls)
{
    struct call_stream *cs = cls;
    if (!cs->joined) { /* the client went away: the call is cancelled, and waited for */
        mcp_call_cancel(cs->x.call);
        pthread_join(cs->thread, NULL);
    }
    mcp_call_end(cs->x.s, cs->x.call);
    mcp_session_put(cs->x.s);
    pthread_mutex_destroy(&cs->lock);
    pthread_cond_destroy(&cs->cond);
    jw_free(&cs->res);
    jw_free(&cs->pending);
    free(cs->name);
    cJSON_Delete(cs->args);
    cJSON_Delete(cs->id);
    cJSON_Delete(cs->token);
    free(cs);
}

void mcp_call_stream(struct mcp_tool_ctx *x, const char *name, const cJSON *args)
{
    struct MHD_Connection *c = x->c;
    x->streamed = true;
    x->ret = MHD_NO;
    struct call_stream *cs = calloc(1, sizeof(*cs));
    if (!cs) {
        mcp_call_end(x->s, x->call);
        return;
    }
    cs->x = *x;
    cs->x.c = NULL;
    cs->srv = x->srv;
    cs->name = strdup(name);
    cs->args = cJSON_Duplicate(args, true);
    cs->id = cJSON_Duplicate(x->id, true);
    cs->token = cJSON_Duplicate(x->progress, true);
    cs->x.id = cs->id;
    cs->x.progress = cs->token;
    cs->x.client = NULL;
    cs->x.sse_ok = false;
    cs->start_ns = time_mono_ns();
    jw_init(&cs->res, 512);
    jw_init(&cs->pending, 512);
    pthread_mutex_init(&cs->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cs->cond, &ca);
    pthread_condattr_destroy(&ca);
    mcp_session_hold(x->s);
    if (!cs->name || !cs->args || !cs->id || !cs->token ||
        pthread_create(&cs->thread, NULL, call_stream_main, cs) != 0) {
        cs->joined = true; /* (no thread) */
        call_stream_free(cs);
        return;
    }
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 64 * 1024, call_stream_read, cs, call_stream_free);
    if (!r) {
        call_stream_free(cs);
        return;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    x->ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
}

/* ------------------------------------------------------------------------------------ */
/* Files                                                                                 */

/* Whether n bytes read at an offset are text: UTF-8 without NUL. A character cut by the
 * end of a read that stopped short of the file's end is left for the next (*n shrinks). */
static bool is_text(const uint8_t *buf, size_t *n, bool eof)
{
    size_t len = *n;
    if (!eof)
        len = utf8_whole(buf, len);
    if (utf8_valid(buf, len) != len || memchr(buf, 0, len))
        return false;
    *n = len;
    return true;
}

static const char *mime_of(const char *path, bool text)
{
    static const struct {
        const char *ext, *mime;
    } known[] = {
        {".png", "image/png"},         {".jpg", "image/jpeg"},    {".jpeg", "image/jpeg"},
        {".gif", "image/gif"},         {".svg", "image/svg+xml"}, {".pdf", "application/pdf"},
        {".json", "application/json"}, {".md", "text/markdown"},  {".html", "text/html"},
        {".csv", "text/csv"},          {".py", "text/x-python"}};
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcasecmp(dot, known[i].ext) == 0)
            return known[i].mime;
    return text ? "text/plain" : "application/octet-stream";
}

/* Read up to max bytes of path from off: the buffer (malloc'd) and what the file is; NULL
 * with msg (and *notfound). */
static uint8_t *read_span(struct server *srv, const char *path, uint64_t off, size_t max, size_t *n,
                          struct stat *st, char *msg, size_t msglen, bool *notfound)
{
    struct fs_user u;
    files_user(srv, &u);
    struct sbxd_err err = {0};
    fs_user_enter(&u);
    int fd = fs_open_read(srv->sb->rootfd, path, st, &err);
    fs_user_leave(&u);
    *notfound = false;
    if (fd < 0) {
        *notfound = err.kind == SBXD_E_NOT_FOUND;
        snprintf(msg, msglen, "%s", err.msg);
        return NULL;
    }
    if (S_ISDIR(st->st_mode)) {
        close(fd);
        snprintf(msg, msglen, "'%s' is a directory: list_files lists it", path);
        return NULL;
    }
    uint64_t left = off < (uint64_t)st->st_size ? (uint64_t)st->st_size - off : 0;
    size_t want = left < max ? (size_t)left : max;
    uint8_t *buf = malloc(want ? want : 1);
    if (!buf) {
        close(fd);
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(msg, msglen, "reading '%s': %s", path, strerror(errno));
            close(fd);
            free(buf);
            return NULL;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    return buf;
}

static int tool_read_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "offset", "length", NULL};
    struct server *srv = x->srv;
    uint64_t off, len, cap = srv->cfg->max_output_bytes;
    if (!only_keys(args, keys, w) || !arg_uint(args, "offset", 0, UINT64_MAX >> 12, &off, w) ||
        !arg_uint(args, "length", cap, UINT64_MAX >> 12, &len, w))
        return 0;
    char *path = arg_path(x, args, "path", true, w);
    if (!path)
        return 0;
    if (len > cap)
        len = cap;
    char msg[600];
    struct stat st;
    size_t n = 0;
    bool nf;
    uint8_t *buf = read_span(srv, path, off, (size_t)len, &n, &st, msg, sizeof(msg), &nf);
    if (!buf) {
        tool_error(w, "cannot read '%s': %s", path, msg);
        free(path);
        return 0;
    }
    uint64_t size = (uint64_t)st.st_size;
    bool eof = off + n >= size;
    bool text = is_text(buf, &n, eof);
    eof = off + n >= size;
    result_begin(w);
    if (text) {
        text_block(w, buf, n);
    } else {
        jw_obj_begin(w);
        jw_key(w, "type");
        jw_str(w, "resource");
        jw_key(w, "resource");
        jw_obj_begin(w);
        jw_key(w, "uri");
        mcp_write_uri(srv, w, path);
        jw_key(w, "mimeType");
        jw_str(w, mime_of(path, false));
        jw_key(w, "blob");
        jw_base64(w, buf, n);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    if (!eof) {
        char more[200];
        int m = snprintf(more, sizeof(more),
                         "[%llu more bytes: call read_file with offset %llu to read on]",
                         (unsigned long long)(size - off - n), (unsigned long long)(off + n));
        text_block(w, more, (size_t)m);
    }
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "size");
    jw_uint(w, size);
    jw_key(w, "offset");
    jw_uint(w, off);
    jw_key(w, "length");
    jw_uint(w, n);
    jw_key(w, "encoding");
    jw_str(w, text ? "utf8" : "base64");
    jw_key(w, "eof");
    jw_bool(w, eof);
    result_end(w, false);
    free(buf);
    free(path);
    return 0;
}

static int tool_write_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "content", "encoding", "mode", NULL};
    struct server *srv = x->srv;
    if (!only_keys(args, keys, w))
        return 0;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(args, "content");
    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(args, "encoding");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(args, "mode");
    if (!cJSON_IsString(content))
        return tool_error(w, "'content' is required: the file's content, as a string");
    bool b64 = false;
    if (enc && (!cJSON_IsString(enc) || (strcmp(enc->valuestring, "utf8") != 0 &&
                                         !(b64 = strcmp(enc->valuestring, "base64") == 0))))
        return tool_error(w, "'encoding' must be \"utf8\" or \"base64\"");
    struct fs_user u;
    files_user(srv, &u);
    mode_t m = u.file_mode;
    if (mode) {
        char *end = NULL;
        long v = cJSON_IsString(mode) ? strtol(mode->valuestring, &end, 8) : -1;
        if (!cJSON_IsString(mode) || !*mode->valuestring || *end || v < 0 || v > 0777)
            return tool_error(w, "'mode' must be permission bits in octal, as a string: \"0644\"");
        m = (mode_t)v;
    }
    char *path = arg_path(x, args, "path", true, w);
    if (!path)
        return 0;
    /* A NUL in utf8 content comes only as \u0000, which cJSON's string ends at. */
    size_t n = strlen(content->valuestring);
    const void *data = content->valuestring;
    uint8_t *raw = NULL;
    if (b64) {
        raw = malloc(n / 4 * 3 + 3);
        long r = raw ? base64_decode(content->valuestring, n, raw) : -1;
        if (r < 0) {
            free(raw);
            free(path);
            return tool_error(w, "'content' is not valid base64");
        }
        data = raw;
        n = (size_t)r;
    }
    struct fs_upload up;
    struct sbxd_err err = {0};
    struct stat st;
    fs_user_enter(&u);
    int r = fs_upload_begin(&up, srv->sb->rootfd, path, &u, &err);
    if (r == 0 && (r = fs_upload_write(&up, data, n, &err)) == 0)
        r = fs_upload_commit(&up, m, &st, &err);
    if (r < 0)
        fs_upload_abort(&up, &u);
    fs_user_leave(&u);
    free(raw);
    if (r < 0) {
        tool_error(w, "cannot write '%s': %s", path, err.msg);
        free(path);
        return 0;
    }
    char msg[300];
    int mn = snprintf(msg, sizeof(msg), "wrote %zu bytes to %s", n, path);
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "size");
    jw_uint(w, (uint64_t)st.st_size);
    jw_key(w, "created");
    jw_bool(w, !up.existed);
    result_end(w, false);
    free(path);
    return 0;
}

struct lister {
    int rootfd;
    struct jsonw *w;     /* the entries, as JSON objects */
    struct jsonw *lines; /* the same, a line each ("PATH[/]  SIZE"), for the text block */
    unsigned n, max;
    bool truncated;
    char first_error[300];
};

/* Entries of dfd (taken), as rel/NAME, depth levels down. */
static void list_dir(struct lister *L, int dfd, const char *rel, unsigned depth)
{
    struct sbxd_err err = {0};
    struct fs_lister *l = fs_list_open(dfd, FS_LIST_SORTED, &err);
    if (!l) {
        if (!L->first_error[0])
            snprintf(L->first_error, sizeof(L->first_error), "%s: %s", rel, err.msg);
        return;
    }
    struct fs_entry e;
    int r;
    while ((r = fs_list_next(l, &e, &err)) == 1) {
        if (L->n >= L->max) {
            L->truncated = true;
            break;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", e.name);
        /* As /files lists: a link inside the workspace as what it leads to, marked; one that
         * cannot be followed as itself. Never walked into below (only real directories are):
         * a link cannot make the listing loop or list a tree twice. */
        struct listing_at at = {L->rootfd, fs_list_dirfd(l), rel};
        bool link = files_list_follow(&e, &at) != 0;
        struct jsonw *w = L->w;
        jw_obj_begin(w);
        jw_key(w, "path");
        jw_str(w, path);
        jw_key(w, "type");
        jw_str(w, e.type);
        jw_key(w, "size");
        jw_uint(w, e.size);
        jw_key(w, "mode");
        write_mode(w, e.mode);
        if (link) {
            jw_key(w, "symlink");
            jw_bool(w, true);
        }
        reply_time_field(w, "modified_at", e.mtime_ns);
        jw_obj_end(w);
        char size[24];
        int sn = snprintf(size, sizeof(size), "  %llu\n", (unsigned long long)e.size);
        jw_raw(L->lines, path, strlen(path));
        if (strcmp(e.type, "directory") == 0)
            jw_raw(L->lines, "/", 1);
        jw_raw(L->lines, size, (size_t)sn);
        L->n++;
        if (depth > 1 && !link && strcmp(e.type, "directory") == 0) {
            int sub =
                openat(fs_list_dirfd(l), e.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                list_dir(L, sub, path, depth - 1);
        }
    }
    if (r < 0 && !L->first_error[0])
        snprintf(L->first_error, sizeof(L->first_error), "%s: %s", rel, err.msg);
    fs_list_close(l);
}

static int tool_list_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "depth", NULL};
    struct server *srv = x->srv;
    uint64_t depth;
    if (!only_keys(args, keys, w) || !arg_uint(args, "depth", 1, MCP_LIST_DEPTH_MAX, &depth, w))
        return 0;
    if (depth < 1)
        return tool_error(w, "'depth' must be from 1 to %d", MCP_LIST_DEPTH_MAX);
    char *path = arg_path(x, args, "path", false, w);
    if (!path)
        return 0;
    struct fs_user u;
    files_user(srv, &u);
    struct sbxd_err err = {0};
    struct stat st;
    fs_user_enter(&u);
    int fd = fs_open_read(srv->sb->rootfd, path, &st, &err);
    if (fd >= 0 && !S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        snprintf(err.msg, sizeof(err.msg), "'%s' is a file, not a directory: read_file reads it",
                 path);
    }
    if (fd < 0) {
        fs_user_leave(&u);
        tool_error(w, "cannot list '%s': %s", path, err.msg);
        free(path);
        return 0;
    }
    /* Entries go into their own writer first: the summary comes before them. */
    struct jsonw ents, lines;
    jw_init(&ents, 4096);
    jw_init(&lines, 4096);
    jw_arr_begin(&ents);
    struct lister L = {.rootfd = srv->sb->rootfd, .w = &ents, .lines = &lines, .max = MCP_LIST_MAX};
    list_dir(&L, fd, path, (unsigned)depth);
    fs_user_leave(&u);
    jw_arr_end(&ents);
    char msg[600];
    int mn = snprintf(msg, sizeof(msg), "%u entries in %s%s%s%s", L.n, *path ? path : ".",
                      L.truncated ? " (truncated at 1000)" : "",
                      L.first_error[0] ? "; could not read " : "", L.first_error);
    result_begin(w);
    text_block(w, msg, (size_t)(mn < (int)sizeof(msg) ? mn : (int)sizeof(msg) - 1));
    /* The listing itself as text too, one entry per line, for clients that show only text. */
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "text");
    jw_key(w, "text");
    jw_str_utf8(w, lines.buf ? lines.buf : "", lines.len, false);
    jw_free(&lines);
    jw_obj_end(w);
    result_structured(w);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "entries");
    jw_json(w, ents.buf, ents.len);
    jw_key(w, "truncated");
    jw_bool(w, L.truncated);
    result_end(w, false);
    jw_free(&ents);
    free(path);
    return 0;
}

static int tool_delete_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "recursive", NULL};
    bool recursive;
    char *path = path_and_flag(x, args, keys, "recursive", false, &recursive, w);
    if (!path)
        return 0;
    struct fs_user u;
    files_user(x->srv, &u);
    struct sbxd_err err = {0};
    fs_user_enter(&u);
    int r = fs_delete(x->srv->sb->rootfd, path, recursive, &err);
    fs_user_leave(&u);
    if (r < 0) {
        tool_error(w, "cannot delete '%s': %s", path, err.msg);
    } else {
        char msg[300];
        int mn = snprintf(msg, sizeof(msg), "deleted %s", path);
        result_begin(w);
        text_block(w, msg, (size_t)mn);
        result_structured(w);
        jw_key(w, "path");
        jw_str(w, path);
        jw_key(w, "deleted");
        jw_bool(w, true);
        result_end(w, false);
    }
    free(path);
    return 0;
}

static int tool_move_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"from", "to", "overwrite", NULL};
    bool overwrite;
    if (!only_keys(args, keys, w) || !arg_bool(args, "overwrite", false, &overwrite, w))
        return 0;
    char *from = arg_path(x, args, "from", true, w);
    char *to = from ? arg_path(x, args, "to", true, w) : NULL;
    if (!to) {
        free(from);
        return 0;
    }
    struct fs_user u;
    files_user(x->srv, &u);
    struct sbxd_err err = {0};
    fs_user_enter(&u);
    int r = fs_move(x->srv->sb->rootfd, from, to, overwrite, &u, &err);
    fs_user_leave(&u);
    if (r < 0) {
        tool_error(w, "cannot move '%s' to '%s': %s%s", from, to, err.msg,
                   err.kind == SBXD_E_CONFLICT ? " (overwrite: true replaces it)" : "");
    } else {
        char msg[300];
        int mn = snprintf(msg, sizeof(msg), "moved %s to %s", from, to);
        result_begin(w);
        text_block(w, msg, (size_t)mn);
        result_structured(w);
        jw_key(w, "from");
        jw_str(w, from);
        jw_key(w, "to");
        jw_str(w, to);
        result_end(w, false);
    }
    free(from);
    free(to);
    return 0;
}

static int tool_stat_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"path", "follow", NULL};
    bool follow;
    char *path = path_and_flag(x, args, keys, "follow", true, &follow, w);
    if (!path)
        return 0;
    struct fs_user u;
    files_user(x->srv, &u);
    struct sbxd_err err = {0};
    struct fs_stat_info *in = malloc(sizeof(*in));
    if (!in) {
        free(path);
        return tool_error(w, "out of memory");
    }
    fs_user_enter(&u);
    int r = fs_stat(x->srv->sb->rootfd, path, follow, in, &err);
    fs_user_leave(&u);
    if (r < 0) {
        tool_error(w, "cannot stat '%s': %s", path, err.msg);
    } else {
        char msg[600];
        int mn =
            snprintf(msg, sizeof(msg), "%s: %s, %lld bytes, mode %04o%s%s", path,
                     fs_type_name(in->st.st_mode), (long long)in->st.st_size,
                     (unsigned)(in->st.st_mode & 07777), in->target[0] ? " -> " : "", in->target);
        result_begin(w);
        text_block(w, msg, (size_t)(mn < (int)sizeof(msg) ? mn : (int)sizeof(msg) - 1));
        result_structured(w);
        files_write_stat(w, path, in);
        result_end(w, false);
    }
    free(in);
    free(path);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Background processes                                                                  */

static struct bg_proc *arg_process(const cJSON *args, struct jsonw *w)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(args, "id");
    if (!cJSON_IsString(id)) {
        tool_error(w, "'id' is required: the id start_process returned");
        return NULL;
    }
    struct bg_proc *p = bg_get(id->valuestring);
    if (!p)
        tool_error(w,
                   "no process '%.64s' (unknown, or ended and forgotten after "
                   "--process-retention-s)",
                   id->valuestring);
    return p;
}

static int tool_start_process(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    struct server *srv = x->srv;
    static const char *const keys[] = {"command", "argv", "cwd", "env", "timeout_ms", NULL};
    if (!only_keys(args, keys, w))
        return 0;
    if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
        return tool_error(w, "sbxd is shutting down and takes no new processes");
    struct exec_request req;
    if (!command_request(x, args, MX_BACKGROUND, &req, w))
        return 0;
    struct sbxd_err err = {0};
    struct exec_admit adm = {.client_fd = x->client_fd, .stop = &srv->sb->draining};
    if (exec_service_admit(&srv->sb->exec, &adm, &err) < 0) {
        exec_request_free(&req);
        return tool_error(w, "%s", adm.gone ? "the client went away" : err.msg);
    }
    struct bg_proc *p = exec_service_start_process(&srv->sb->exec, &req, &err);
    exec_service_leave(&srv->sb->exec);
    if (!p)
        return tool_error(w, "%s", err.msg);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    char msg[300];
    int mn = snprintf(msg, sizeof(msg),
                      "started process %s (pid %d): process_output reads its output, "
                      "send_input writes to it, kill_process ends it",
                      in.id, (int)in.pid);
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "pid");
    jw_int(w, in.pid);
    result_end(w, false);
    return 0;
}

static int tool_process_output(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"id", "offset", "wait_ms", NULL};
    uint64_t off, wait;
    if (!only_keys(args, keys, w) || !arg_uint(args, "offset", 0, UINT64_MAX >> 1, &off, w) ||
        !arg_uint(args, "wait_ms", 0, MCP_OUTPUT_WAIT_MAX_MS, &wait, w))
        return 0;
    struct bg_proc *p = arg_process(args, w);
    if (!p)
        return 0;
    size_t cap = x->srv->cfg->max_output_bytes;
    struct outbuf out, errb;
    outbuf_init(&out, cap);
    outbuf_init(&errb, cap);
    uint64_t start = off, dropped = 0;
    int64_t deadline = time_mono_ns() + (int64_t)wait * 1000000;
    bool any = false;
    char *buf = malloc(SBXD_READ_CHUNK);
    while (buf && out.len + errb.len < cap) {
        int left = any ? 0 : time_ms_until(deadline);
        if (left > 250)
            left = 250;
        size_t n = 0;
        int stream = 0;
        uint64_t next = off;
        enum bg_read_result r =
            bg_read(p, off, buf, SBXD_READ_CHUNK, true, left, &n, &stream, &next);
        if (r == BG_READ_DATA) {
            outbuf_append(stream == 2 ? &errb : &out, buf, n);
            any = true;
        } else if (r == BG_READ_DROPPED) {
            dropped += next - off;
        } else if (r == BG_READ_END) {
            break;
        } else if (any || time_ms_until(deadline) <= 0 || mcp_call_cancelled(x)) {
            break;
        }
        off = next;
    }
    free(buf);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    char head[300];
    int hn;
    if (in.finished && in.res.status == JOB_EXITED)
        hn =
            snprintf(head, sizeof(head), "process %s exited with code %d", in.id, in.res.exit_code);
    else if (in.finished)
        hn = snprintf(head, sizeof(head), "process %s ended: %s", in.id,
                      job_status_name(in.res.status));
    else
        hn = snprintf(head, sizeof(head), "process %s is running", in.id);
    hn += snprintf(head + hn, sizeof(head) - (size_t)hn, "; output %llu..%llu%s",
                   (unsigned long long)start, (unsigned long long)off,
                   dropped ? " (older output was dropped from the ring)" : "");
    size_t tcap = (size_t)hn + out.len + errb.len + 64;
    char *text = malloc(tcap);
    result_begin(w);
    if (text) {
        size_t n = (size_t)hn;
        memcpy(text, head, n);
        if (out.len) {
            n += (size_t)snprintf(text + n, tcap - n, "\n--- output ---\n");
            memcpy(text + n, out.data, out.len);
            n += out.len;
        }
        if (errb.len) {
            n += (size_t)snprintf(text + n, tcap - n, "\n--- stderr ---\n");
            memcpy(text + n, errb.data, errb.len);
            n += errb.len;
        }
        text_block(w, text, n);
        free(text);
    }
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "running");
    jw_bool(w, !in.finished);
    jw_key(w, "status");
    jw_str(w, in.finished ? job_status_name(in.res.status) : "running");
    jw_key(w, "exit_code");
    if (in.finished && in.res.status == JOB_EXITED)
        jw_int(w, in.res.exit_code);
    else
        jw_null(w);
    jw_key(w, "output");
    jw_str_utf8(w, out.data ? (const char *)out.data : "", out.len, false);
    jw_key(w, "stderr");
    jw_str_utf8(w, errb.data ? (const char *)errb.data : "", errb.len, false);
    jw_key(w, "offset");
    jw_uint(w, start);
    jw_key(w, "next_offset");
    jw_uint(w, off);
    jw_key(w, "dropped_bytes");
    jw_uint(w, dropped);
    result_end(w, in.finished && !(in.res.status == JOB_EXITED && in.res.exit_code == 0));
    outbuf_free(&out);
    outbuf_free(&errb);
    return 0;
}

static int tool_send_input(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"id", "data", "eof", NULL};
    bool eof;
    if (!only_keys(args, keys, w) || !arg_bool(args, "eof", false, &eof, w))
        return 0;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(args, "data");
    if (data && !cJSON_IsString(data))
        return tool_error(w, "'data' must be a string");
    if (!data && !eof)
        return tool_error(w, "give 'data' to write, or 'eof': true to close stdin");
    struct bg_proc *p = arg_process(args, w);
    if (!p)
        return 0;
    const char *d = data ? data->valuestring : "";
    uint64_t written = 0;
    bool open_after = false;
    struct sbxd_err err = {0};
    enum bg_stdin_result r = bg_stdin(p, d, strlen(d), eof, x->srv->cfg->stdin_timeout_ms,
                                      x->client_fd, &written, &open_after, &err);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    if (r != BG_STDIN_DONE)
        return tool_error(w, "%s (%llu bytes went in)", err.msg[0] ? err.msg : "the write failed",
                          (unsigned long long)written);
    char msg[200];
    int mn = snprintf(msg, sizeof(msg), "wrote %llu bytes to process %s%s",
                      (unsigned long long)written, in.id, eof ? " and closed its stdin" : "");
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "written");
    jw_uint(w, written);
    jw_key(w, "stdin_open");
    jw_bool(w, open_after);
    result_end(w, false);
    return 0;
}

static int tool_kill_process(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    (void)x;
    static const char *const keys[] = {"id", "signal", NULL};
    if (!only_keys(args, keys, w))
        return 0;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(args, "signal");
    const char *name = "SIGKILL";
    int sig = SIGKILL;
    if (sv && !(sig = bg_signal_named(cJSON_GetStringValue(sv), &name)))
        return tool_error(w, "'signal' must be one of " BG_SIGNAL_NAMES);
    struct bg_proc *p = arg_process(args, w);
    if (!p)
        return 0;
    struct sbxd_err err = {0};
    int r = bg_signal(p, sig, &err);
    struct bg_info in;
    bg_info(p, &in);
    bg_put(p);
    if (r < 0)
        return tool_error(w, "%s", err.msg);
    char msg[200];
    int mn = snprintf(msg, sizeof(msg), "sent %s to process %s", name, in.id);
    result_begin(w);
    text_block(w, msg, (size_t)mn);
    result_structured(w);
    jw_key(w, "id");
    jw_str(w, in.id);
    jw_key(w, "signal");
    jw_str(w, name);
    result_end(w, false);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* run_code                                                                              */

static int tool_run_code(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"code", "language", "context", "timeout_ms", NULL};
    struct server *srv = x->srv;
    if (!only_keys(args, keys, w))
        return 0;
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(args, "code");
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(args, "language");
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(args, "context");
    uint64_t timeout;
    if (!cJSON_IsString(code))
        return tool_error(w, "'code' is required: the code to run, as a string");
    if ((lang && !cJSON_IsString(lang)) || (cid && !cJSON_IsString(cid)))
        return tool_error(w, "'language' and 'context' are strings");
    if (!arg_uint(args, "timeout_ms", srv->cfg->timeout_ms, srv->cfg->max_timeout_ms, &timeout, w))
        return 0;
    if (!timeout)
        timeout = 1;
    if (__atomic_load_n(&srv->sb->draining, __ATOMIC_ACQUIRE))
        return tool_error(w, "sbxd is shutting down");
    struct sbxd_err err = {0};
    struct ctx *c;
    if (cid) {
        c = ctx_get(cid->valuestring);
        if (!c)
            return tool_error(w, "no context '%.64s'", cid->valuestring);
    } else {
        c = ctx_default(lang ? lang->valuestring : "python", &err);
        if (!c)
            return tool_error(w, "%s", err.msg);
    }
    struct ctx_info ci;
    ctx_info(c, &ci, false);
    struct ctx_run *run = ctx_run_start(c, code->valuestring, strlen(code->valuestring), timeout,
                                        (int)srv->cfg->queue_timeout_ms, &err);
    ctx_put(c);
    if (!run)
        return tool_error(w, "%s", err.msg);
    size_t cap = srv->cfg->max_output_bytes;
    struct outbuf out, errb, text;
    outbuf_init(&out, cap);
    outbuf_init(&errb, cap);
    outbuf_init(&text, cap);
    cJSON *images = cJSON_CreateArray();
    /* Images are held until the answer, under the output cap as REST's results are: a cell
     * displaying hundreds of large images used to hold them all (831 MB for 200 of 2 MiB). */
    size_t images_bytes = 0;
    unsigned images_left_out = 0;
    cJSON *error = NULL;
    bool cancelled = false;
    for (;;) {
        int type;
        const uint8_t *data;
        size_t n;
        int r = ctx_run_next(run, 250, &type, &data, &n);
        if (r < 0)
            break;
        if (r == 0) {
            if (mcp_call_cancelled(x)) {
                cancelled = true;
                break;
            }
            continue;
        }
        if (type == CTX_EV_STDOUT || type == CTX_EV_STDERR) {
            outbuf_append(type == CTX_EV_STDOUT ? &out : &errb, data, n);
        } else if (type == CTX_EV_DISPLAY || type == CTX_EV_RESULT) {
            cJSON *b = cJSON_ParseWithLength((const char *)data, n);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "text/plain");
            const cJSON *png = cJSON_GetObjectItemCaseSensitive(b, "image/png");
            const cJSON *jpg = cJSON_GetObjectItemCaseSensitive(b, "image/jpeg");
            const cJSON *img = cJSON_IsString(png) ? png : jpg;
            size_t isz = cJSON_IsString(img) ? strlen(img->valuestring) : 0;
            if (cJSON_IsString(img) &&
                (images_bytes + isz > cap || cJSON_GetArraySize(images) >= SBXD_MCP_MAX_IMAGES)) {
                images_left_out++;
            } else if (cJSON_IsString(img)) {
                images_bytes += isz;
                cJSON *im = cJSON_CreateObject();
                cJSON_AddStringToObject(im, "type", "image");
                cJSON_AddStringToObject(im, "data",
                                        cJSON_IsString(png) ? png->valuestring : jpg->valuestring);
                cJSON_AddStringToObject(im, "mimeType",
                                        cJSON_IsString(png) ? "image/png" : "image/jpeg");
                cJSON_AddItemToArray(images, im);
            } else if (cJSON_IsString(t)) {
                if (text.len)
                    outbuf_append(&text, "\n", 1);
                outbuf_append(&text, t->valuestring, strlen(t->valuestring));
            }
            cJSON_Delete(b);
        } else if (type == CTX_EV_ERROR) {
            cJSON_Delete(error);
            error = cJSON_ParseWithLength((const char *)data, n);
        }
    }
    const struct ctx_result *res = ctx_run_result(run);
    enum ctx_status st = cancelled ? CTX_ERROR : res->status;
    unsigned count = res->execution_count;
    char reason[320];
    snprintf(reason, sizeof(reason), "%s", res->reason);
    ctx_run_end(run); /* interrupts the code if it still runs (cancelled) */
    /* The text a model reads: output, the result, the error. */
    struct outbuf all;
    outbuf_init(&all, 3 * cap + 4096);
    if (out.len)
        outbuf_append(&all, out.data, out.len);
    if (errb.len) {
        outbuf_append(&all, "\n--- stderr ---\n", 16);
        outbuf_append(&all, errb.data, errb.len);
    }
    if (text.len) {
        if (all.len)
            outbuf_append(&all, "\n--- result ---\n", 16);
        outbuf_append(&all, text.data, text.len);
    }
    const cJSON *ename = cJSON_GetObjectItemCaseSensitive(error, "name");
    const cJSON *evalue = cJSON_GetObjectItemCaseSensitive(error, "value");
    const cJSON *etb = cJSON_GetObjectItemCaseSensitive(error, "traceback");
    if (error) {
        outbuf_append(&all, "\n--- error ---\n", 15);
        for (const cJSON *l = etb ? etb->child : NULL; l; l = l->next)
            if (cJSON_IsString(l)) {
                outbuf_append(&all, l->valuestring, strlen(l->valuestring));
                outbuf_append(&all, "\n", 1);
            }
        if (!etb || !etb->child) {
            char line[600];
            int ln = snprintf(line, sizeof(line), "%s: %s",
                              cJSON_IsString(ename) ? ename->valuestring : "Error",
                              cJSON_IsString(evalue) ? evalue->valuestring : "");
            outbuf_append(&all, line, (size_t)(ln < (int)sizeof(line) ? ln : 599));
        }
    }
    if (images_left_out) {
        char line[200];
        int ln =
            snprintf(line, sizeof(line),
                     "\n[%u image%s left out: over the output cap of %zu bytes or %d images]",
                     images_left_out, images_left_out == 1 ? "" : "s", cap, SBXD_MCP_MAX_IMAGES);
        outbuf_append(&all, line, (size_t)(ln < (int)sizeof(line) ? ln : 199));
    }
    if (cancelled)
        outbuf_append(&all, "\n[canceled: the code was interrupted]", 38);
    else if (st == CTX_TIMEOUT)
        outbuf_append(&all, "\n[timeout: the code was interrupted; the context lives on]", 58);
    else if (st == CTX_DIED) {
        char line[400];
        int ln = snprintf(line, sizeof(line), "\n[the context died: %s]", reason);
        outbuf_append(&all, line, (size_t)(ln < (int)sizeof(line) ? ln : 399));
    }
    result_begin(w);
    if (all.len || !cJSON_GetArraySize(images))
        text_block(w, all.data ? (const char *)all.data : "", all.len);
    for (const cJSON *im = images ? images->child : NULL; im; im = im->next) {
        char *t = cJSON_PrintUnformatted(im);
        if (t)
            jw_json(w, t, strlen(t));
        free(t);
    }
    result_structured(w);
    jw_key(w, "context");
    jw_str(w, ci.id);
    jw_key(w, "status");
    jw_str(w, cancelled ? "canceled" : ctx_status_name(st));
    jw_key(w, "execution_count");
    jw_uint(w, count);
    jw_key(w, "stdout");
    jw_str_utf8(w, out.data ? (const char *)out.data : "", out.len, false);
    jw_key(w, "stderr");
    jw_str_utf8(w, errb.data ? (const char *)errb.data : "", errb.len, false);
    jw_key(w, "text");
    if (text.len)
        jw_str_utf8(w, text.data, text.len, false);
    else
        jw_null(w);
    jw_key(w, "images");
    jw_uint(w, (uint64_t)cJSON_GetArraySize(images));
    jw_key(w, "images_left_out");
    jw_uint(w, images_left_out);
    if (error) {
        char *e = cJSON_PrintUnformatted(error);
        if (e) {
            jw_key(w, "error");
            jw_json(w, e, strlen(e));
        }
        free(e);
    }
    result_end(w, cancelled || st != CTX_OK);
    cJSON_Delete(images);
    cJSON_Delete(error);
    outbuf_free(&out);
    outbuf_free(&errb);
    outbuf_free(&text);
    outbuf_free(&all);
    return 0;
}

/* ------------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    int (*fn)(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
} TOOLS[] = {
    {"run_command", tool_run_command},     {"run_code", tool_run_code},
    {"read_file", tool_read_file},         {"write_file", tool_write_file},
    {"list_files", tool_list_files},       {"delete_file", tool_delete_file},
    {"move_file", tool_move_file},         {"stat_file", tool_stat_file},
    {"start_process", tool_start_process}, {"process_output", tool_process_output},
    {"send_input", tool_send_input},       {"kill_process", tool_kill_process},
};
#define NTOOLS (sizeof(TOOLS) / sizeof(TOOLS[0]))

bool mcp_tool_exists(const char *name)
{
    for (size_t i = 0; i < NTOOLS; i++)
        if (strcmp(TOOLS[i].name, name) == 0)
            return true;
    return false;
}

int mcp_tool_call(struct mcp_tool_ctx *x, const char *name, const cJSON *args, struct jsonw *w,
                  char *msg, size_t msglen)
{
    for (size_t i = 0; i < NTOOLS; i++)
        if (strcmp(TOOLS[i].name, name) == 0) {
            int r = TOOLS[i].fn(x, args, w);
            if (w->failed) {
                snprintf(msg, msglen, "out of memory");
                return JRPC_INTERNAL_ERROR;
            }
            return r;
        }
    snprintf(msg, msglen, "unknown tool '%.64s'", name);
    return JRPC_INVALID_PARAMS;
}

/* ------------------------------------------------------------------------------------ */
/* Resources                                                                             */

void mcp_write_uri(struct server *srv, struct jsonw *w, const char *path)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t cap = 8 + 3 * (strlen(srv->sb->workspace) + strlen(path)) + 2;
    char *u = malloc(cap);
    if (!u) {
        jw_null(w);
        return;
    }
    size_t n = 0;
    memcpy(u, "file://", 7);
    n = 7;
    const char *parts[2] = {srv->sb->workspace, path};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && *path)
            u[n++] = '/';
        for (const unsigned char *p = (const unsigned char *)parts[k]; *p; p++) {
            unsigned char ch = *p;
            bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                         (ch >= '0' && ch <= '9') || strchr("-._~/!$&'()*+,;=:@", ch);
            if (plain) {
                u[n++] = (char)ch;
            } else {
                u[n++] = '%';
                u[n++] = hex[ch >> 4];
                u[n++] = hex[ch & 15];
            }
        }
    }
    u[n] = '\0';
    jw_str(w, u);
    free(u);
}

char *mcp_uri_path(struct server *srv, const char *uri, char *msg, size_t msglen)
{
    const char *p;
    if (strncmp(uri, "file:///", 8) == 0)
        p = uri + 7;
    else if (strncmp(uri, "file://localhost/", 17) == 0)
        p = uri + 16;
    else {
        snprintf(msg, msglen, "'%.200s' is not a file:// URI of the workspace (%s)", uri,
                 srv->sb->workspace);
        return NULL;
    }
    char *d = strndup(p, strcspn(p, "?#"));
    if (!d) {
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    struct sbxd_err err = {0};
    if (http_url_decode(d, &err) < 0) {
        snprintf(msg, msglen, "'%.200s': %s", uri, err.msg);
        free(d);
        return NULL;
    }
    char *path = norm_path(srv, d, msg, msglen);
    free(d);
    return path;
}

/*
 * resources/list walks the tree depth first, each directory in name order where it is listed
 * sorted. A page ends after MCP_RESOURCES_PAGE files; its cursor is the last path it gave
 * (base64, as the bytes of a name may not be UTF-8), and the next page walks down that path
 * only, passing over what came before it, instead of walking every earlier page again.
 */
struct res_walk {
    struct server *srv;
    struct jsonw *w;
    uint64_t seen;
    unsigned sent;
    bool more;
    char last[4096]; /* the last path given */
};

static void res_walk_dir(struct res_walk *R, int dfd, const char *rel, unsigned depth,
                         const char *after);

/* An entry of the walk at path, to be given (a file) or walked into (a directory). */
static void res_walk_entry(struct res_walk *R, const struct fs_lister *l, const struct fs_entry *e,
                           const char *path, unsigned depth, const char *after)
{
    if (strcmp(e->type, "file") == 0) {
        if (R->sent >= MCP_RESOURCES_PAGE) {
            R->more = true;
            return;
        }
        struct jsonw *w = R->w;
        jw_obj_begin(w);
        jw_key(w, "uri");
        mcp_write_uri(R->srv, w, path);
        jw_key(w, "name");
        jw_str(w, path);
        jw_key(w, "mimeType");
        jw_str(w, mime_of(path, true));
        jw_key(w, "size");
        jw_uint(w, e->size);
        jw_obj_end(w);
        R->sent++;
        snprintf(R->last, sizeof(R->last), "%s", path);
    } else if (strcmp(e->type, "directory") == 0 && depth > 1) {
        int sub =
            openat(fs_list_dirfd(l), e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
            res_walk_dir(R, sub, path, depth - 1, after);
    }
}

/* The files beneath dfd (taken) as rel/..., depth levels down. after: the rest of the
 * cursor's path below this directory (NULL: none), everything up to it passed over. */
static void res_walk_dir(struct res_walk *R, int dfd, const char *rel, unsigned depth,
                         const char *after)
{
    struct sbxd_err err = {0};
    struct fs_lister *l = fs_list_open(dfd, FS_LIST_SORTED, &err);
    if (!l)
        return;
    char comp[256] = "";
    const char *below = NULL; /* the cursor's path under comp, when comp is a directory */
    if (after) {
        size_t n = strcspn(after, "/");
        snprintf(comp, sizeof(comp), "%.*s", (int)(n < sizeof(comp) ? n : sizeof(comp) - 1), after);
        below = after[n] == '/' ? after + n + 1 : NULL;
    }
    bool sorted = fs_list_sorted(l);
    struct fs_entry e;
    while (!R->more && R->seen < MCP_RESOURCES_SCAN && fs_list_next(l, &e, &err) == 1) {
        R->seen++;
        char path[4096];
        snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", e.name);
        if (!after) {
            res_walk_entry(R, l, &e, path, depth, NULL);
            continue;
        }
        int cmp = strcmp(e.name, comp);
        if (cmp != 0 && !sorted)
            continue; /* before the cursor in the directory's own order */
        if (cmp < 0)
            continue;
        after = NULL; /* past the cursor from here on */
        bool dir = strcmp(e.type, "directory") == 0;
        if (cmp == 0 && below && dir)
            res_walk_entry(R, l, &e, path, depth, below); /* down the cursor's path */
        else if (cmp > 0 || dir || below)
            res_walk_entry(R, l, &e, path, depth, NULL);
        /* (else the cursor's own file, given on the page before) */
    }
    if (after && !sorted && !R->more && R->seen < MCP_RESOURCES_SCAN) {
        /* The cursor's entry left a directory listed in its own order: what came after it
         * cannot be told from what came before, so it is listed again from its start (a file
         * given twice rather than one never given). */
        int again = openat(fs_list_dirfd(l), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        fs_list_close(l);
        if (again >= 0)
            res_walk_dir(R, again, rel, depth, NULL);
        return;
    }
    fs_list_close(l);
}

int mcp_resources_list(struct server *srv, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen)
{
    const cJSON *cur = params ? cJSON_GetObjectItemCaseSensitive(params, "cursor") : NULL;
    char after[4096] = "";
    if (cur) {
        long n = -1;
        size_t len = cJSON_IsString(cur) ? strlen(cur->valuestring) : 0;
        if (len && len <= base64_encoded_len(sizeof(after) - 1))
            n = base64_decode(cur->valuestring, len, after);
        if (n <= 0 || memchr(after, '\0', (size_t)n) || after[0] == '/') {
            snprintf(msg, msglen, "'cursor' is not one resources/list gave");
            return JRPC_INVALID_PARAMS;
        }
        after[n] = '\0';
    }
    struct fs_user u;
    files_user(srv, &u);
    int dfd = openat(srv->sb->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(msg, msglen, "cannot open the workspace: %s", strerror(errno));
        return JRPC_INTERNAL_ERROR;
    }
    jw_obj_begin(w);
    jw_key(w, "resources");
    jw_arr_begin(w);
    struct res_walk *R = calloc(1, sizeof(*R));
    if (!R) {
        close(dfd);
        snprintf(msg, msglen, "out of memory");
        return JRPC_INTERNAL_ERROR;
    }
    R->srv = srv;
    R->w = w;
    fs_user_enter(&u);
    res_walk_dir(R, dfd, "", MCP_LIST_DEPTH_MAX, cur ? after : NULL);
    fs_user_leave(&u);
    jw_arr_end(w);
    if (R->more) {
        char next[(sizeof(R->last) + 2) / 3 * 4 + 1];
        size_t n = base64_encode(R->last, strlen(R->last), next);
        jw_key(w, "nextCursor");
        jw_str_utf8(w, next, n, false);
    }
    jw_obj_end(w);
    free(R);
    return 0;
}

int mcp_resources_read(struct server *srv, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen)
{
    const cJSON *uri = params ? cJSON_GetObjectItemCaseSensitive(params, "uri") : NULL;
    if (!cJSON_IsString(uri)) {
        snprintf(msg, msglen, "'uri' is required: a file:// URI resources/list gave");
        return JRPC_INVALID_PARAMS;
    }
    char *path = mcp_uri_path(srv, uri->valuestring, msg, msglen);
    if (!path)
        return JRPC_INVALID_PARAMS;
    size_t cap = srv->cfg->max_output_bytes;
    struct stat st;
    size_t n = 0;
    bool nf;
    uint8_t *buf = read_span(srv, path, 0, cap, &n, &st, msg, msglen, &nf);
    if (!buf) {
        free(path);
        return nf ? JRPC_RESOURCE_NOT_FOUND : JRPC_INVALID_PARAMS;
    }
    if ((uint64_t)st.st_size > n) {
        snprintf(msg, msglen,
                 "'%s' is %lld bytes, more than a resource read gives (%zu, --max-output-bytes): "
                 "the read_file tool reads it in pieces",
                 path, (long long)st.st_size, cap);
        free(buf);
        free(path);
        return JRPC_INVALID_PARAMS;
    }
    bool text = is_text(buf, &n, true);
    jw_obj_begin(w);
    jw_key(w, "contents");
    jw_arr_begin(w);
    jw_obj_begin(w);
    jw_key(w, "uri");
    mcp_write_uri(srv, w, path);
    jw_key(w, "mimeType");
    jw_str(w, mime_of(path, text));
    jw_key(w, text ? "text" : "blob");
    if (text)
        jw_str_utf8(w, buf, n, false);
    else
        jw_base64(w, buf, n);
    jw_obj_end(w);
    jw_arr_end(w);
    jw_obj_end(w);
    free(buf);
    free(path);
    return 0;
}
