/*
 * route_usage.c - GET /usage: how full the sandbox is (usage.h), E2B's metrics' names among
 * the fields. Behind the token as every route but the health checks: the figures tell an
 * outsider what the sandbox runs.
 */
#include "http_internal.h"
#include "sbxd/usage.h"

enum MHD_Result route_usage(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc)
{
    (void)srv;
    (void)rc;
    struct usage u;
    usage_read(&u);
    struct jsonw w;
    jw_init(&w, 1024);
    jw_obj_begin(&w);
    usage_write(&w, &u);
    jw_obj_end(&w);
    return reply_jsonw(c, MHD_HTTP_OK, &w);
}
