#include <netinet/in.h>
#include <netinet/tcp.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "web_internal.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"
#include "sbxd/jsonw.h"

/* Queue body (taken over) as JSON, with one optional extra header. */
static enum MHD_Result queue_json(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                                  const char *hdr, const char *hdr_value)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (status == MHD_HTTP_TOO_MANY_REQUESTS || status == MHD_HTTP_SERVICE_UNAVAILABLE) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", SBXD_RETRY_AFTER_S);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (hdr)
        MHD_add_response_header(r, hdr, hdr_value);
    enum MHD_Result ret = http_queue(c, status, r, len);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result reply_jsonw(struct MHD_Connection *c, unsigned status, struct jsonw *w)
{
    jw_newline(w);
    size_t len;
    char *body = jw_finish(w, &len);
    if (!body)
        return MHD_NO; /* out of memory: drop the connection rather than lie */
    return queue_json(c, status, body, len, NULL, NULL);
}

enum MHD_Result reply_jsonw_header(struct MHD_Connection *c, unsigned status, struct jsonw *w,
                                   const char *hdr, const char *value)
{
    jw_newline(w);
    size_t len;
    char *body = jw_finish(w, &len);
    if (!body)
        return MHD_NO;
    return queue_json(c, status, body, len, hdr, value);
}

static enum MHD_Result queue_error(struct MHD_Connection *c, unsigned status, const char *code,
                                   const char *msg, const char *hdr, const char *hdr_value)
{
    struct jsonw w;
    jw_init(&w, 256);
    jw_obj_begin(&w);
    jw_key(&w, "code");
    jw_str(&w, code);
    jw_key(&w, "message");
    jw_str(&w, msg);
    jw_obj_end(&w);
    return reply_jsonw_header(c, status, &w, hdr, hdr_value);
}

__attribute__((format(printf, 6, 0))) static enum MHD_Result
queue_errorv(struct MHD_Connection *c, unsigned status, const char *code, const char *hdr,
             const char *value, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return queue_error(c, status, code, msg, hdr, value);
}

enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = queue_errorv(c, status, code, NULL, NULL, fmt, ap);
    va_end(ap);
    return r;
}

enum MHD_Result reply_error_header(struct MHD_Connection *c, unsigned status, const char *code,
                                   const char *hdr, const char *value, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = queue_errorv(c, status, code, hdr, value, fmt, ap);
    va_end(ap);
    return r;
}

struct errmap {
    unsigned status;
    const char *code;
};

static const struct errmap *err_map(enum sbxd_errkind kind)
{
    static const struct errmap map[] = {
        [SBXD_E_NONE] = {500, "INTERNAL"},
        [SBXD_E_INVALID] = {400, "INVALID_ARGUMENT"},
        [SBXD_E_DENIED] = {403, "PERMISSION_DENIED"},
        [SBXD_E_NOT_FOUND] = {404, "NOT_FOUND"},
        [SBXD_E_CONFLICT] = {409, "CONFLICT"},
        [SBXD_E_RANGE] = {416, "RANGE_NOT_SATISFIABLE"},
        [SBXD_E_TOO_LARGE] = {413, "PAYLOAD_TOO_LARGE"},
        [SBXD_E_BUSY] = {429, "RESOURCE_EXHAUSTED"},
        [SBXD_E_UNAVAILABLE] = {503, "UNAVAILABLE"},
        [SBXD_E_NO_SPACE] = {507, "INSUFFICIENT_STORAGE"},
        [SBXD_E_PRECONDITION] = {412, "FAILED_PRECONDITION"},
        [SBXD_E_INTERNAL] = {500, "INTERNAL"},
    };
    unsigned k = (unsigned)kind < sizeof(map) / sizeof(map[0]) ? (unsigned)kind : 0;
    return &map[k];
}

enum MHD_Result reply_message(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct jsonw w;
    jw_init(&w, 64 + strlen(msg));
    jw_obj_begin(&w);
    jw_key(&w, "message");
    jw_str(&w, msg);
    jw_obj_end(&w);
    return reply_jsonw(c, status, &w);
}

unsigned err_status(enum sbxd_errkind kind)
{
    return err_map(kind)->status;
}

const char *err_code(enum sbxd_errkind kind)
{
    return err_map(kind)->code;
}

enum MHD_Result reply_err(struct MHD_Connection *c, const struct sbxd_err *err)
{
    const struct errmap *m = err_map(err->kind);
    return queue_error(c, m->status, m->code, err->msg, NULL, NULL);
}

enum MHD_Result reply_method_not_allowed(struct MHD_Connection *c, unsigned allowed)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{HTTP_GET, "GET"},
                 {HTTP_HEAD, "HEAD"},
                 {HTTP_POST, "POST"},
                 {HTTP_PUT, "PUT"},
                 {HTTP_DELETE, "DELETE"}};
    char allow[64] = "";
    size_t n = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (allowed & names[i].bit)
            n += (size_t)snprintf(allow + n, sizeof(allow) - n, "%s%s", n ? ", " : "",
                                  names[i].name);
    char msg[128];
    snprintf(msg, sizeof(msg), "method not allowed here; allowed: %s", allow);
    return queue_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", msg,
                       MHD_HTTP_HEADER_ALLOW, allow);
}

bool http_json_type(struct MHD_Connection *c, enum MHD_Result *ret)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (web_json_type_ok(ct))
        return true;
    *ret = reply_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE",
                       "Content-Type '%.100s' is not accepted; send application/json", ct);
    return false;
}

/* A small JSON body: an object of known keys only. NULL after replying with the error. */
cJSON *http_json_object(struct MHD_Connection *c, struct req_ctx *rc, const char *const *keys,
                        enum MHD_Result *ret)
{
    if (!http_json_type(c, ret))
        return NULL;
    /* JSON is UTF-8, as for the bodies server.c collects (the routes that use this one also
     * take raw bodies, so the check is here). */
    size_t at = rc->body ? utf8_valid((const uint8_t *)rc->body, rc->body_len) : 0;
    if (rc->body && at < rc->body_len) {
        *ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "the body is not valid UTF-8: byte 0x%02X at offset %zu",
                           (uint8_t)rc->body[at], at);
        return NULL;
    }
    cJSON *o = rc->body ? cJSON_ParseWithLength(rc->body, rc->body_len) : NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        *ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "the body must be a JSON object");
        return NULL;
    }
    for (cJSON *k = o->child; k; k = k->next) {
        bool known = false;
        for (const char *const *n = keys; *n; n++)
            known = known || strcmp(k->string, *n) == 0;
        if (!known || cJSON_GetObjectItemCaseSensitive(o, k->string) != k) {
            *ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT", "%s field '%.64s'",
                               known ? "duplicate" : "unknown", k->string);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

void reply_time_field(struct jsonw *w, const char *key, int64_t real_ns)
{
    jw_key(w, key);
    if (!real_ns) {
        jw_null(w);
        return;
    }
    char when[40];
    time_rfc3339(real_ns, when, sizeof(when));
    jw_str(w, when);
}

bool http_item_url(struct MHD_Connection *c, const struct req_ctx *rc, const char *prefix,
                   const char *what, struct item_url *u, enum MHD_Result *ret)
{
    size_t pl = strlen(prefix);
    const char *rest = rc->url + pl + (rc->url[pl] == '/');
    size_t idlen = strcspn(rest, "/");
    u->action = rest[idlen] ? rest + idlen + 1 : "";
    u->id[0] = '\0';
    if (idlen == 0 && !*u->action)
        return true; /* the collection */
    if (idlen == 0 || idlen >= sizeof(u->id)) {
        *ret = reply_error(c, MHD_HTTP_NOT_FOUND, "NOT_FOUND", "no %s '%.64s'", what, rest);
        return false;
    }
    memcpy(u->id, rest, idlen);
    u->id[idlen] = '\0';
    return true;
}

bool http_method_in(struct MHD_Connection *c, const struct req_ctx *rc, unsigned allowed,
                    enum MHD_Result *ret)
{
    if (http_method_bit(rc->method) & allowed)
        return true;
    *ret = reply_method_not_allowed(c, allowed);
    return false;
}

void http_socket_uncork(int fd)
{
    int zero = 0, one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
