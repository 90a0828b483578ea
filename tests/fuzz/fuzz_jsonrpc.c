/*
 * fuzz_jsonrpc - the MCP endpoint's JSON-RPC decoder (src/mcp/jsonrpc.c), which sorts a POST
 * /mcp body into requests, notifications, responses and invalid messages.
 *
 * Every body either fails to parse with a JSON-RPC error code and a reason, or gives one to
 * JRPC_BATCH_MAX messages, each sorted consistently: a request has a method and an id, a
 * notification a method and no id, a response an id and no method, an invalid one an error
 * code and a reason. The answers written for them (an error, a result) must be JSON that
 * cJSON reads back, with the same id. A message taken as valid names no member twice in any
 * of its objects (checked against a pairwise comparison).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/jsonrpc.h"
#include "sbxd/utf8.h"

#include "fuzz.h"

/* The decoder's duplicate check against a plain one: whether any object in v names a member
 * twice, every pair compared (inputs here are small; *budget bounds the pairs). */
static bool naive_duplicate(const cJSON *v, long *budget)
{
    if (cJSON_IsObject(v))
        for (const cJSON *a = v->child; a; a = a->next)
            for (const cJSON *b = a->next; b && --*budget > 0; b = b->next)
                if (strcmp(a->string, b->string) == 0)
                    return true;
    if (cJSON_IsObject(v) || cJSON_IsArray(v))
        for (const cJSON *c = v->child; c; c = c->next)
            if (naive_duplicate(c, budget))
                return true;
    return false;
}

static void check_answer(const struct jrpc_msg *m)
{
    struct jsonw w;
    jw_init(&w, 128);
    if (m->kind == JRPC_INVALID)
        jrpc_write_error(&w, m->id, m->code, m->why);
    else {
        jrpc_write_result_begin(&w, m->id);
        jw_json(&w, "{}", 2);
        jrpc_write_result_end(&w);
    }
    size_t len;
    char *text = jw_finish(&w, &len);
    check(text != NULL);
    cJSON *o = cJSON_ParseWithLength(text, len);
    check(o != NULL);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (cJSON_IsString(m->id))
        check(cJSON_IsString(id) && strcmp(id->valuestring, m->id->valuestring) == 0);
    else if (cJSON_IsNumber(m->id))
        check(cJSON_IsNumber(id) && id->valuedouble == m->id->valuedouble);
    else
        check(cJSON_IsNull(id));
    cJSON_Delete(o);
    free(text);
    jw_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    /* As route_mcp.c: only a body that is UTF-8 reaches the decoder. */
    if (utf8_valid(data, n) != n)
        return 0;
    char *body = malloc(n + 1);
    if (!body)
        return 0;
    memcpy(body, data, n);
    body[n] = '\0';
    struct jrpc_batch b;
    int code = 0;
    const char *why = NULL;
    if (jrpc_parse(body, n, &b, &code, &why) < 0) {
        check(code == JRPC_PARSE_ERROR || code == JRPC_INVALID_REQUEST ||
              code == JRPC_INTERNAL_ERROR);
        check(why && *why);
    } else {
        check(b.n >= 1 && b.n <= JRPC_BATCH_MAX);
        check(b.array || b.n == 1);
        for (size_t i = 0; i < b.n; i++) {
            const struct jrpc_msg *m = &b.msgs[i];
            switch (m->kind) {
            case JRPC_REQUEST:
                check(m->method && *m->method && m->id);
                check(!m->params || cJSON_IsObject(m->params));
                break;
            case JRPC_NOTIFICATION:
                check(m->method && *m->method && !m->id);
                break;
            case JRPC_RESPONSE:
                check(!m->method && m->id);
                break;
            case JRPC_INVALID:
                check((m->code == JRPC_INVALID_REQUEST || m->code == JRPC_INTERNAL_ERROR) &&
                      m->why && *m->why);
                break;
            }
            check(!m->id || cJSON_IsString(m->id) || cJSON_IsNumber(m->id));
            /* A message the decoder took has no member named twice, at any depth. */
            long budget = 1L << 24;
            if (m->kind != JRPC_INVALID)
                check(!naive_duplicate(m->json, &budget) || budget <= 0);
            check_answer(m);
        }
    }
    jrpc_batch_free(&b);
    free(body);
    return 0;
}
