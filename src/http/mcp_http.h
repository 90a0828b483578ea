/*
 * mcp_http.h - the HTTP face of MCP (route_mcp.c) as the rest of the HTTP server reaches it:
 * the answers it gives to a request refused before any route runs. MCP itself is mcp.h.
 */
#ifndef SBXD_MCP_HTTP_H
#define SBXD_MCP_HTTP_H

#include <microhttpd.h>
#include <stdint.h>

/* A body over --max-body-bytes: the JSON-RPC error, with 413. */
enum MHD_Result mcp_reply_too_large(struct MHD_Connection *c, uint64_t max);
/* 403 with a JSON-RPC error: a web page's request (guard.c, web.h). */
enum MHD_Result mcp_reply_forbidden(struct MHD_Connection *c, const char *why);

#endif
