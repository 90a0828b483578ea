/*
 * tools.c - MCP's tools: the table tools/call runs from, what every tool's result is made
 * of (content blocks, structuredContent, isError), the checks of their arguments, the
 * messages a tool's answer sends, and a call answered as a stream while the tool runs on a
 * thread of its own.
 *
 * A tool's failure (a command that exits non-zero, a path outside the workspace, a file
 * that is not there) is a result with isError and a message written for a model to act on;
 * only a call that names no tool is a JSON-RPC error.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/timeutil.h"

/* ------------------------------------------------------------------------------------ */
/* Results.                                                                              */

int tool_error(struct jsonw *w, const char *fmt, ...)
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
void result_begin(struct jsonw *w)
{
    jw_obj_begin(w);
    jw_key(w, "content");
    jw_arr_begin(w);
}

void text_block(struct jsonw *w, const void *text, size_t n)
{
    jw_obj_begin(w);
    jw_key(w, "type");
    jw_str(w, "text");
    jw_key(w, "text");
    jw_str_utf8(w, text, n, false);
    jw_obj_end(w);
}

/* Close content and open structuredContent. */
void result_structured(struct jsonw *w)
{
    jw_arr_end(w);
    jw_key(w, "structuredContent");
    jw_obj_begin(w);
}

void result_end(struct jsonw *w, bool is_error)
{
    jw_obj_end(w); /* structuredContent */
    jw_key(w, "isError");
    jw_bool(w, is_error);
    jw_obj_end(w);
}

/* Arguments: only known ones; false after a tool error. */
bool only_keys(const cJSON *args, const char *const *keys, struct jsonw *w)
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
bool arg_uint(const cJSON *args, const char *key, uint64_t def, uint64_t max, uint64_t *out,
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

bool arg_bool(const cJSON *args, const char *key, bool def, bool *out, struct jsonw *w)
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
char *mcp_norm_path(const struct mcp_host *h, const char *p, char *msg, size_t msglen)
{
    if (p[0] == '/') {
        const char *rel = fs_path_within(h->workspace, h->cfg->workspace, p);
        if (!rel) {
            snprintf(msg, msglen,
                     "'%.200s' is outside the workspace (%.200s): paths are relative to it, "
                     "or absolute within it",
                     p, h->workspace);
            return NULL;
        }
        p = rel;
    }
    while (*p == '/' || (p[0] == '.' && (p[1] == '/' || p[1] == '\0')))
        p++;
    return strdup(p);
}

/* args[key] as a workspace path; NULL after a tool error. "" names the root. */
char *arg_path(struct mcp_tool_ctx *x, const cJSON *args, const char *key, bool required,
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
    char *p = mcp_norm_path(x->h, v->valuestring, msg, sizeof(msg));
    if (!p)
        tool_error(w, "%s", msg);
    return p;
}

/* ------------------------------------------------------------------------------------ */
/* Messages of an answer.                                                                */

/* Send w's text (then emptied); nothing when it could not be made (out of memory). */
static void send_jsonw(struct mcp_sink *k, struct jsonw *w)
{
    if (!w->failed)
        k->send(k, w->buf, w->len);
    jw_free(w);
}

void mcp_send_result(struct mcp_sink *k, const cJSON *id, const char *json, size_t len)
{
    struct jsonw w;
    jw_init(&w, len + 128);
    if (!json) {
        jrpc_write_error(&w, id, JRPC_INTERNAL_ERROR, "out of memory");
    } else {
        jrpc_write_result_begin(&w, id);
        jw_json(&w, json, len);
        jrpc_write_result_end(&w);
    }
    send_jsonw(k, &w);
}

void mcp_send_error(struct mcp_sink *k, const cJSON *id, int code, const char *msg)
{
    struct jsonw w;
    jw_init(&w, 256);
    jrpc_write_error(&w, id, code, msg);
    send_jsonw(k, &w);
}

void mcp_send_progress(struct mcp_sink *k, const cJSON *token, int64_t ms, const char *msg)
{
    struct jsonw w;
    jw_init(&w, 512);
    jw_obj_begin(&w);
    jw_key(&w, "jsonrpc");
    jw_str(&w, "2.0");
    jw_key(&w, "method");
    jw_str(&w, "notifications/progress");
    jw_key(&w, "params");
    jw_obj_begin(&w);
    jw_key(&w, "progressToken");
    jrpc_write_id(&w, token);
    jw_key(&w, "progress");
    jw_uint(&w, (uint64_t)ms);
    jw_key(&w, "message");
    jw_str_utf8(&w, msg, strlen(msg), true);
    jw_obj_end(&w);
    jw_obj_end(&w);
    send_jsonw(k, &w);
}

void text_parts(struct jsonw *w, const char *head, size_t hn, const char *label1, const void *p1,
                size_t n1, const char *label2, const void *p2, size_t n2)
{
    size_t l1 = strlen(label1), l2 = strlen(label2);
    char *text = malloc(hn + l1 + n1 + l2 + n2 + 1);
    if (!text)
        return;
    size_t n = hn;
    memcpy(text, head, hn);
    if (n1) {
        memcpy(text + n, label1, l1);
        memcpy(text + n + l1, p1, n1);
        n += l1 + n1;
    }
    if (n2) {
        memcpy(text + n, label2, l2);
        memcpy(text + n + l2, p2, n2);
        n += l2 + n2;
    }
    text_block(w, text, n);
    free(text);
}

bool mcp_draining(const struct mcp_host *h)
{
    return __atomic_load_n(h->draining, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------------------------ */
/* A call run on a thread of its own, answered as a stream of progress, then its result.  */

bool mcp_tool_streams(const char *name)
{
    return strcmp(name, "run_command") == 0;
}

struct call_thread {
    struct mcp_tool_ctx x; /* the call's (x.k is NULL: the thread answers into res) */
    char *name;
    cJSON *args, *id, *token;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done; /* the tool has answered (lock) */
    bool joined;
    struct jsonw res; /* the tool's result */
    int code;         /* ... or a JSON-RPC error */
    char msg[512];
    int64_t start_ns;
};

static void *call_thread_main(void *arg)
{
    struct call_thread *cs = arg;
    int code = mcp_tool_call(&cs->x, cs->name, cs->args, &cs->res, cs->msg, sizeof(cs->msg));
    pthread_mutex_lock(&cs->lock);
    cs->code = code;
    cs->done = true;
    pthread_cond_signal(&cs->cond);
    pthread_mutex_unlock(&cs->lock);
    return NULL;
}

/* A progress notification each second the tool runs, its answer once it is done. */
static bool call_thread_step(void *task, struct mcp_sink *k)
{
    struct call_thread *cs = task;
    pthread_mutex_lock(&cs->lock);
    struct timespec until = time_after_ms(CLOCK_MONOTONIC, 1000);
    while (!cs->done && pthread_cond_timedwait(&cs->cond, &cs->lock, &until) == 0) {
    }
    bool done = cs->done;
    pthread_mutex_unlock(&cs->lock);
    if (!done) {
        int64_t ms = (time_mono_ns() - cs->start_ns) / 1000000;
        char msg[96];
        snprintf(msg, sizeof(msg), "%s running for %.1f s", cs->name, (double)ms / 1000.0);
        mcp_send_progress(k, cs->token, ms, msg);
        return true;
    }
    pthread_join(cs->thread, NULL);
    cs->joined = true;
    if (cs->code) {
        mcp_send_error(k, cs->id, cs->code, cs->msg);
    } else {
        size_t len = 0;
        char *text = jw_finish(&cs->res, &len);
        mcp_send_result(k, cs->id, text, len);
        free(text);
    }
    return false;
}

static void call_thread_drop(void *task)
{
    struct call_thread *cs = task;
    if (!cs->joined) { /* the client went away: the call is cancelled, and waited for */
        mcp_call_cancel(cs->x.call);
        pthread_join(cs->thread, NULL);
    }
    mcp_call_end(cs->x.s, cs->x.call);
    mcp_session_put(cs->x.s);
    pthread_mutex_destroy(&cs->lock);
    pthread_cond_destroy(&cs->cond);
    jw_free(&cs->res);
    free(cs->name);
    cJSON_Delete(cs->args);
    cJSON_Delete(cs->id);
    cJSON_Delete(cs->token);
    free(cs);
}

static const struct mcp_task_ops call_thread_ops = {call_thread_step, call_thread_drop};

/* A call_thread for x's call of name (args copied): its thread not started yet. */
static struct call_thread *call_thread_new(struct mcp_tool_ctx *x, const char *name,
                                           const cJSON *args)
{
    struct call_thread *cs = calloc(1, sizeof(*cs));
    if (!cs)
        return NULL;
    cs->x = *x;
    cs->x.k = NULL;
    cs->name = strdup(name);
    cs->args = cJSON_Duplicate(args, true);
    cs->id = cJSON_Duplicate(x->id, true);
    cs->token = cJSON_Duplicate(x->progress, true);
    cs->x.id = cs->id;
    cs->x.progress = cs->token;
    cs->x.client = NULL;
    cs->x.stream_ok = false;
    cs->start_ns = time_mono_ns();
    jw_init(&cs->res, 512);
    pthread_mutex_init(&cs->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cs->cond, &ca);
    pthread_condattr_destroy(&ca);
    return cs;
}

void mcp_call_thread(struct mcp_tool_ctx *x, const char *name, const cJSON *args)
{
    x->deferred = true;
    struct call_thread *cs = call_thread_new(x, name, args);
    if (!cs) {
        mcp_call_end(x->s, x->call);
        x->k->defer(x->k, NULL, NULL); /* (no answer: the transport gives up the request) */
        return;
    }
    mcp_session_hold(x->s);
    if (!cs->name || !cs->args || !cs->id || !cs->token ||
        pthread_create(&cs->thread, NULL, call_thread_main, cs) != 0) {
        cs->joined = true; /* (no thread) */
        call_thread_drop(cs);
        x->k->defer(x->k, NULL, NULL);
        return;
    }
    x->k->defer(x->k, &call_thread_ops, cs);
}

/* ------------------------------------------------------------------------------------ */
/* The table.                                                                            */

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
    {"sandbox_usage", tool_sandbox_usage}, {"search_files", tool_search_files},
    {"find_files", tool_find_files},       {"edit_file", tool_edit_file},
    {"list_ports", tool_list_ports},       {"expose_port", tool_expose_port},
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
