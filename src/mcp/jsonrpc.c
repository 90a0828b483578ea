#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/jsonkeys.h"
#include "sbxd/jsonrpc.h"
#include "sbxd/limits.h"

#define JRPC_STR_(x) #x
#define JRPC_STR(x)  JRPC_STR_(x)

/* An id MCP allows: a string, or a number that is whole (never null, never a fraction). */
static bool id_ok(const cJSON *id)
{
    if (cJSON_IsString(id))
        return true;
    if (!cJSON_IsNumber(id))
        return false;
    double v = id->valuedouble;
    return isfinite(v) && v >= -9007199254740991.0 && v <= 9007199254740991.0 &&
           v == (double)(int64_t)v;
}

static void invalid(struct jrpc_msg *m, int code, const char *why)
{
    m->kind = JRPC_INVALID;
    m->code = code;
    m->why = why;
}

static void classify(const cJSON *o, struct jrpc_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->json = o;
    if (!cJSON_IsObject(o)) {
        invalid(m, JRPC_INVALID_REQUEST, "a message must be a JSON object");
        return;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (id_ok(id))
        m->id = id;
    /* A name given twice anywhere in the message (its params too) makes it ambiguous: which
     * value a tool acts on would be a guess. jsonkeys.h sorts the names (a pairwise check
     * cost a minute of CPU for one 1 MiB message, before any session was looked at) and
     * refuses an object of more than SBXD_JSON_MAX_MEMBERS before sorting anything. */
    switch (json_keys_check_tree(o, NULL)) {
    case JSON_KEYS_OK:
        break;
    case JSON_KEYS_DUPLICATE:
        invalid(m, JRPC_INVALID_REQUEST, "a member appears twice in an object of the message");
        return;
    case JSON_KEYS_TOO_MANY:
        invalid(
            m, JRPC_INVALID_REQUEST,
            "an object of the message has more than " JRPC_STR(SBXD_JSON_MAX_MEMBERS) " members");
        return;
    case JSON_KEYS_NO_MEMORY:
        invalid(m, JRPC_INTERNAL_ERROR, "out of memory");
        return;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "jsonrpc");
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0) {
        invalid(m, JRPC_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
        return;
    }
    if (id && !m->id) {
        invalid(m, JRPC_INVALID_REQUEST, "\"id\" must be a string or a whole number");
        return;
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(o, "method");
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(o, "result");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (method) {
        if (!cJSON_IsString(method) || !method->valuestring[0]) {
            invalid(m, JRPC_INVALID_REQUEST, "\"method\" must be a non-empty string");
            return;
        }
        if (result || error) {
            invalid(m, JRPC_INVALID_REQUEST, "a request has no \"result\" or \"error\"");
            return;
        }
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "params");
        if (params && !cJSON_IsObject(params)) {
            invalid(m, JRPC_INVALID_REQUEST, "\"params\" must be an object");
            return;
        }
        m->method = method->valuestring;
        m->params = params;
        m->kind = id ? JRPC_REQUEST : JRPC_NOTIFICATION;
        return;
    }
    if (!id) {
        invalid(m, JRPC_INVALID_REQUEST, "a message needs a \"method\", or an \"id\" to answer");
        return;
    }
    if ((result != NULL) == (error != NULL)) {
        invalid(m, JRPC_INVALID_REQUEST, "a response has exactly one of \"result\" and \"error\"");
        return;
    }
    if (error && (!cJSON_IsObject(error) ||
                  !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(error, "code")))) {
        invalid(m, JRPC_INVALID_REQUEST, "\"error\" must be an object with a numeric \"code\"");
        return;
    }
    m->kind = JRPC_RESPONSE;
}

int jrpc_parse(const char *body, size_t len, struct jrpc_batch *b, int *code, const char **why)
{
    memset(b, 0, sizeof(*b));
    const char *end = NULL;
    b->root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!b->root) {
        *code = JRPC_PARSE_ERROR;
        *why = "the body is not JSON";
        return -1;
    }
    /* Only white space may follow the value. */
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '\0') {
            *code = JRPC_PARSE_ERROR;
            *why = "the body holds more than one JSON value";
            return -1;
        }
    if (cJSON_IsArray(b->root)) {
        int n = cJSON_GetArraySize(b->root);
        if (n == 0) {
            *code = JRPC_INVALID_REQUEST;
            *why = "an empty batch";
            return -1;
        }
        if (n > JRPC_BATCH_MAX) {
            *code = JRPC_INVALID_REQUEST;
            *why = "a batch of more than 64 messages";
            return -1;
        }
        b->array = true;
        b->n = (size_t)n;
    } else if (cJSON_IsObject(b->root)) {
        b->n = 1;
    } else {
        *code = JRPC_INVALID_REQUEST;
        *why = "the body must be a JSON-RPC message (an object) or a batch of them";
        return -1;
    }
    b->msgs = calloc(b->n, sizeof(*b->msgs));
    if (!b->msgs) {
        *code = JRPC_INTERNAL_ERROR;
        *why = "out of memory";
        return -1;
    }
    if (b->array) {
        size_t i = 0;
        for (const cJSON *o = b->root->child; o && i < b->n; o = o->next)
            classify(o, &b->msgs[i++]);
    } else {
        classify(b->root, &b->msgs[0]);
    }
    return 0;
}

void jrpc_batch_free(struct jrpc_batch *b)
{
    cJSON_Delete(b->root);
    free(b->msgs);
    memset(b, 0, sizeof(*b));
}

void jrpc_write_id(struct jsonw *w, const cJSON *id)
{
    if (cJSON_IsString(id))
        jw_str(w, id->valuestring);
    else if (cJSON_IsNumber(id))
        jw_int(w, (int64_t)id->valuedouble);
    else
        jw_null(w);
}

void jrpc_write_error(struct jsonw *w, const cJSON *id, int code, const char *msg)
{
    jw_obj_begin(w);
    jw_key(w, "jsonrpc");
    jw_str(w, "2.0");
    jw_key(w, "id");
    jrpc_write_id(w, id);
    jw_key(w, "error");
    jw_obj_begin(w);
    jw_key(w, "code");
    jw_int(w, code);
    jw_key(w, "message");
    jw_str(w, msg);
    jw_obj_end(w);
    jw_obj_end(w);
}

void jrpc_write_result_begin(struct jsonw *w, const cJSON *id)
{
    jw_obj_begin(w);
    jw_key(w, "jsonrpc");
    jw_str(w, "2.0");
    jw_key(w, "id");
    jrpc_write_id(w, id);
    jw_key(w, "result");
}

void jrpc_write_result_end(struct jsonw *w)
{
    jw_obj_end(w);
}
