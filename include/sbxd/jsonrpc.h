/*
 * jsonrpc.h - JSON-RPC 2.0 messages as MCP's Streamable HTTP transport carries them: one
 * message, or an array of them (a batch), in a POST body.
 *
 * jrpc_parse sorts each message into a request (method and id), a notification (method, no
 * id), a response (id and exactly one of result and error), or an invalid one with the
 * JSON-RPC error it earns. Only the shape is judged here: what a method means is the
 * server's (route_mcp.c). A message in which any object names a member twice, or has more
 * than SBXD_JSON_MAX_MEMBERS members, is invalid (jsonkeys.h: checked in O(n log n)). The
 * body must already be valid UTF-8 (utf8.h): JSON is.
 */
#ifndef SBXD_JSONRPC_H
#define SBXD_JSONRPC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "sbxd/jsonw.h"

/* The error codes of JSON-RPC 2.0, and MCP's. */
enum {
    JRPC_PARSE_ERROR = -32700,
    JRPC_INVALID_REQUEST = -32600,
    JRPC_METHOD_NOT_FOUND = -32601,
    JRPC_INVALID_PARAMS = -32602,
    JRPC_INTERNAL_ERROR = -32603,
    JRPC_SERVER_ERROR = -32000,       /* the server cannot take it now (limits, shutdown) */
    JRPC_RESOURCE_NOT_FOUND = -32002, /* MCP: resources/read of what is not there */
};

enum jrpc_kind { JRPC_REQUEST, JRPC_NOTIFICATION, JRPC_RESPONSE, JRPC_INVALID };

struct jrpc_msg {
    enum jrpc_kind kind;
    const cJSON *json;   /* the message */
    const cJSON *id;     /* a string or a whole number; NULL: none, or none readable */
    const char *method;  /* requests and notifications */
    const cJSON *params; /* an object, or NULL when absent */
    int code;            /* JRPC_INVALID: the error it earns ... */
    const char *why;     /* ... and why (static text) */
};

struct jrpc_batch {
    cJSON *root;
    bool array; /* the body was an array (a batch) */
    size_t n;
    struct jrpc_msg *msgs;
};

/* Parse len bytes of body into b: 0, or -1 with *code (JRPC_PARSE_ERROR: not JSON;
 * JRPC_INVALID_REQUEST: neither an object nor a non-empty array, or too many messages) and
 * *why. b is to be freed with jrpc_batch_free either way. */
#define JRPC_BATCH_MAX 64
int jrpc_parse(const char *body, size_t len, struct jrpc_batch *b, int *code, const char **why);
void jrpc_batch_free(struct jrpc_batch *b);

/* An id as JSON text into w (null for NULL). */
void jrpc_write_id(struct jsonw *w, const cJSON *id);
/* {"jsonrpc":"2.0","id":ID,"error":{"code":CODE,"message":MSG}} into w. */
void jrpc_write_error(struct jsonw *w, const cJSON *id, int code, const char *msg);
/* The head of a result, {"jsonrpc":"2.0","id":ID,"result": — the caller writes the result
 * value, then jrpc_write_result_end. */
void jrpc_write_result_begin(struct jsonw *w, const cJSON *id);
void jrpc_write_result_end(struct jsonw *w);

#endif
