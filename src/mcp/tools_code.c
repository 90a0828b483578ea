/*
 * tools_code.c - MCP's run_code: code run in a live context (a Jupyter kernel, or a shell
 * session), the language's default one or one made with POST /contexts, its output, result,
 * images and error answered as content for a model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/context.h"
#include "sbxd/exec_service.h"
#include "sbxd/mcp.h"
#include "sbxd/outbuf.h"

/* What a run of code gave. */
struct code_out {
    size_t cap; /* the output cap, of each part and of the images together */
    struct outbuf out, errb, text;
    cJSON *images;
    /* Images are held until the answer, under the output cap as REST's results are: a cell
     * displaying hundreds of large images used to hold them all (831 MB for 200 of 2 MiB). */
    size_t images_bytes;
    unsigned images_left_out;
    cJSON *error;
    bool cancelled;
    enum ctx_status st;
    unsigned count;
    char reason[320];
};

static void code_out_init(struct code_out *co, size_t cap)
{
    memset(co, 0, sizeof(*co));
    co->cap = cap;
    outbuf_init(&co->out, cap);
    outbuf_init(&co->errb, cap);
    outbuf_init(&co->text, cap);
    co->images = cJSON_CreateArray();
}

static void code_out_free(struct code_out *co)
{
    cJSON_Delete(co->images);
    cJSON_Delete(co->error);
    outbuf_free(&co->out);
    outbuf_free(&co->errb);
    outbuf_free(&co->text);
}

/* A display or a result (a MIME bundle): an image kept, or its text. */
static void code_display(struct code_out *co, const uint8_t *data, size_t n)
{
    cJSON *b = cJSON_ParseWithLength((const char *)data, n);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "text/plain");
    const cJSON *png = cJSON_GetObjectItemCaseSensitive(b, "image/png");
    const cJSON *jpg = cJSON_GetObjectItemCaseSensitive(b, "image/jpeg");
    const cJSON *img = cJSON_IsString(png) ? png : jpg;
    size_t isz = cJSON_IsString(img) ? strlen(img->valuestring) : 0;
    if (cJSON_IsString(img) && (co->images_bytes + isz > co->cap ||
                                cJSON_GetArraySize(co->images) >= SBXD_MCP_MAX_IMAGES)) {
        co->images_left_out++;
    } else if (cJSON_IsString(img)) {
        co->images_bytes += isz;
        cJSON *im = cJSON_CreateObject();
        cJSON_AddStringToObject(im, "type", "image");
        cJSON_AddStringToObject(im, "data",
                                cJSON_IsString(png) ? png->valuestring : jpg->valuestring);
        cJSON_AddStringToObject(im, "mimeType", cJSON_IsString(png) ? "image/png" : "image/jpeg");
        cJSON_AddItemToArray(co->images, im);
    } else if (cJSON_IsString(t)) {
        if (co->text.len)
            outbuf_append(&co->text, "\n", 1);
        outbuf_append(&co->text, t->valuestring, strlen(t->valuestring));
    }
    cJSON_Delete(b);
}

/* Gather the run's events into co until it ends (or the call is cancelled), then end it. */
static void code_collect(struct mcp_tool_ctx *x, struct ctx_run *run, struct code_out *co)
{
    for (;;) {
        int type;
        const uint8_t *data;
        size_t n;
        int r = ctx_run_next(run, 250, &type, &data, &n);
        if (r < 0)
            break;
        if (r == 0) {
            if (mcp_call_cancelled(x->call)) {
                co->cancelled = true;
                break;
            }
            continue;
        }
        if (type == CTX_EV_STDOUT || type == CTX_EV_STDERR) {
            outbuf_append(type == CTX_EV_STDOUT ? &co->out : &co->errb, data, n);
        } else if (type == CTX_EV_DISPLAY || type == CTX_EV_RESULT) {
            code_display(co, data, n);
        } else if (type == CTX_EV_ERROR) {
            cJSON_Delete(co->error);
            co->error = cJSON_ParseWithLength((const char *)data, n);
        }
    }
    const struct ctx_result *res = ctx_run_result(run);
    co->st = co->cancelled ? CTX_ERROR : res->status;
    co->count = res->execution_count;
    snprintf(co->reason, sizeof(co->reason), "%s", res->reason);
    ctx_run_end(run); /* interrupts the code if it still runs (cancelled) */
}

/* A line of at most max bytes appended to all. */
#define APPEND_LINE(all, max, ...)                                                                 \
    do {                                                                                           \
        char line_[max];                                                                           \
        int ln_ = snprintf(line_, sizeof(line_), __VA_ARGS__);                                     \
        outbuf_append(all, line_, (size_t)(ln_ < (int)sizeof(line_) ? ln_ : (int)(max)-1));        \
    } while (0)

/* The error's traceback (or name: value) appended to all. */
static void code_error_text(const struct code_out *co, struct outbuf *all)
{
    const cJSON *ename = cJSON_GetObjectItemCaseSensitive(co->error, "name");
    const cJSON *evalue = cJSON_GetObjectItemCaseSensitive(co->error, "value");
    const cJSON *etb = cJSON_GetObjectItemCaseSensitive(co->error, "traceback");
    outbuf_append(all, "\n--- error ---\n", 15);
    for (const cJSON *l = etb ? etb->child : NULL; l; l = l->next)
        if (cJSON_IsString(l)) {
            outbuf_append(all, l->valuestring, strlen(l->valuestring));
            outbuf_append(all, "\n", 1);
        }
    if (!etb || !etb->child)
        APPEND_LINE(all, 600, "%s: %s", cJSON_IsString(ename) ? ename->valuestring : "Error",
                    cJSON_IsString(evalue) ? evalue->valuestring : "");
}

/* The text a model reads: output, the result, the error, what was left out, how it ended. */
static void code_text(const struct code_out *co, struct outbuf *all)
{
    if (co->out.len)
        outbuf_append(all, co->out.data, co->out.len);
    if (co->errb.len) {
        outbuf_append(all, "\n--- stderr ---\n", 16);
        outbuf_append(all, co->errb.data, co->errb.len);
    }
    if (co->text.len) {
        if (all->len)
            outbuf_append(all, "\n--- result ---\n", 16);
        outbuf_append(all, co->text.data, co->text.len);
    }
    if (co->error)
        code_error_text(co, all);
    if (co->images_left_out)
        APPEND_LINE(
            all, 200, "\n[%u image%s left out: over the output cap of %zu bytes or %d images]",
            co->images_left_out, co->images_left_out == 1 ? "" : "s", co->cap, SBXD_MCP_MAX_IMAGES);
    if (co->cancelled)
        outbuf_append(all, "\n[canceled: the code was interrupted]", 38);
    else if (co->st == CTX_TIMEOUT)
        outbuf_append(all, "\n[timeout: the code was interrupted; the context lives on]", 58);
    else if (co->st == CTX_DIED)
        APPEND_LINE(all, 400, "\n[the context died: %s]", co->reason);
}

static void code_result(struct jsonw *w, const struct code_out *co, const char *ctx_id)
{
    struct outbuf all;
    outbuf_init(&all, 3 * co->cap + 4096);
    code_text(co, &all);
    result_begin(w);
    if (all.len || !cJSON_GetArraySize(co->images))
        text_block(w, all.data ? (const char *)all.data : "", all.len);
    outbuf_free(&all);
    for (const cJSON *im = co->images ? co->images->child : NULL; im; im = im->next) {
        char *t = cJSON_PrintUnformatted(im);
        if (t)
            jw_json(w, t, strlen(t));
        free(t);
    }
    result_structured(w);
    jw_key(w, "context");
    jw_str(w, ctx_id);
    jw_key(w, "status");
    jw_str(w, co->cancelled ? "canceled" : ctx_status_name(co->st));
    jw_key(w, "execution_count");
    jw_uint(w, co->count);
    jw_key(w, "stdout");
    jw_str_utf8(w, co->out.data ? (const char *)co->out.data : "", co->out.len, false);
    jw_key(w, "stderr");
    jw_str_utf8(w, co->errb.data ? (const char *)co->errb.data : "", co->errb.len, false);
    jw_key(w, "text");
    if (co->text.len)
        jw_str_utf8(w, co->text.data, co->text.len, false);
    else
        jw_null(w);
    jw_key(w, "images");
    jw_uint(w, (uint64_t)cJSON_GetArraySize(co->images));
    jw_key(w, "images_left_out");
    jw_uint(w, co->images_left_out);
    if (co->error) {
        char *e = cJSON_PrintUnformatted(co->error);
        if (e) {
            jw_key(w, "error");
            jw_json(w, e, strlen(e));
        }
        free(e);
    }
    result_end(w, co->cancelled || co->st != CTX_OK);
}

/* The context the arguments name (held), or NULL after a tool error. */
static struct ctx *code_context(const cJSON *args, struct jsonw *w)
{
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(args, "language");
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(args, "context");
    if (cid) {
        struct ctx *c = ctx_get(cid->valuestring);
        if (!c)
            tool_error(w, "no context '%.64s'", cid->valuestring);
        return c;
    }
    struct sbxd_err err = {0};
    struct ctx *c = ctx_default(lang ? lang->valuestring : "python", &err);
    if (!c)
        tool_error(w, "%s", err.msg);
    return c;
}

int tool_run_code(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"code", "language", "context", "timeout_ms", NULL};
    const struct mcp_host *h = x->h;
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
    if (!arg_uint(args, "timeout_ms", h->cfg->timeout_ms, h->cfg->max_timeout_ms, &timeout, w))
        return 0;
    if (!timeout)
        timeout = 1;
    if (mcp_draining(h))
        return tool_error(w, "sbxd is shutting down");
    struct ctx *c = code_context(args, w);
    if (!c)
        return 0;
    struct sbxd_err err = {0};
    struct ctx_info ci;
    ctx_info(c, &ci, false);
    /* Contexts' admission, as POST /contexts/{id}/execute has it: the drain and the client's
     * hang-up end the wait for a slot. */
    struct exec_admit adm = {.client_fd = mcp_call_fd(x), .stop = h->draining};
    struct ctx_run *run = ctx_run_open(c, code->valuestring, strlen(code->valuestring), timeout,
                                       (int)h->cfg->queue_timeout_ms, &adm, &err);
    ctx_put(c);
    if (!run)
        return tool_error(w, "%s", adm.gone ? "the client went away" : err.msg);
    struct code_out co;
    code_out_init(&co, h->cfg->max_output_bytes);
    code_collect(x, run, &co);
    code_result(w, &co, ci.id);
    code_out_free(&co);
    return 0;
}
