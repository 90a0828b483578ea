/*
 * proxy_internal.h - /proxy/{port}/{path...}: the reverse proxy to what commands serve on
 * loopback ports (proxy.c), its header rewriting (proxy_head.c) and the byte pipe of an
 * upgraded connection (proxy_pipe.c).
 */
#ifndef SBXD_PROXY_INTERNAL_H
#define SBXD_PROXY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_internal.h"

/* Bounds. */
#define PROXY_MAX_CONNS    256         /* proxied connections at once, in all */
#define PROXY_MAX_PER_PORT 64          /* ... and to one port */
#define PROXY_BUF          65536       /* the upstream's bytes read at a time */
#define PROXY_HEAD_MAX     65536       /* the upstream's answer head, and the request's */
#define PROXY_MAX_HEADERS  128         /* header lines of the upstream's answer */
#define PROXY_PREFIX_MAX   24          /* "/proxy/65535" */
#define PROXY_BIG          (4 << 20)   /* an answer this long is sent through ... */
#define PROXY_BIG_BUF      (256 << 10) /* ... a buffer this big (fewer calls, each copying more) */
#define PROXY_SMALL        8192 /* an answer's body up to this is read whole, sent with its head */
#define PROXY_MSG          512  /* an error message of the proxy's (an sbxd_err's) */

/* The route: begin (the head is in: check, connect, send the head), body (each piece of
 * the request's body to the upstream), end (the answer's head read and streamed back). */
enum MHD_Result proxy_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                            const char *url, const char *method);
enum MHD_Result proxy_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                           const char *data, size_t n);
enum MHD_Result proxy_end(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);

/* ---- proxy_head.c: what passes, and how it is rewritten ---- */

/* Whether a request header named name (n bytes) goes on to the upstream as it is: not a
 * hop-by-hop one, not one sbxd sets itself (X-Forwarded-*, Host framing), not sbxd's token
 * (token_set: Authorization is sbxd's, never the app's). */
bool proxy_request_header_passes(const char *name, size_t n, bool token_set);
/* Whether an answer's header goes on to the client (not hop-by-hop, not the framing
 * libmicrohttpd sets itself); upgrade: the answer is a 101, whose Upgrade header goes too. */
bool proxy_answer_header_passes(const char *name, size_t n, bool upgrade);
/* A Location the upstream sent, as the client must follow it under prefix ("/proxy/8000"):
 * an absolute path gets the prefix, an absolute URL to the upstream itself (127.0.0.1,
 * localhost or [::1] at port) becomes that path, anything else is left. Into out (len);
 * false when it does not fit. */
bool proxy_rewrite_location(const char *value, const char *prefix, uint16_t port, char *out,
                            size_t len);
/* A Set-Cookie with its Path put under prefix (Path=/x -> Path=/proxy/8000/x). Into out;
 * false when it does not fit. */
bool proxy_rewrite_cookie(const char *value, const char *prefix, char *out, size_t len);
/* A Sec-WebSocket-Protocol list without its "bearer.TOKEN" items (sbxd's token, as a browser
 * sends it): into out, "" when none is left; false when it does not fit. */
bool proxy_drop_bearer(const char *value, char *out, size_t len);
/* The port and the path below /proxy/{port} of url (as sent, escapes kept): *rest points
 * into url ("" when nothing follows the port). false when the port is not 1..65535. */
bool proxy_parse_url(const char *url, uint16_t *port, const char **rest);

/* ---- proxy_pipe.c: an upgraded connection, bytes both ways ---- */

/* Pipe bytes between the client's socket (client, handed over by libmicrohttpd through
 * urh) and the upstream's (taken: closed at the end), first writing what each side had sent
 * ahead of the upgrade (to_upstream, to_client: copied). Runs on a thread of its own until
 * either side closes, both sit idle for the idle timeout, or sbxd stops; it holds a server
 * stream meanwhile. release is called once at the end (the connection counts). */
struct MHD_UpgradeResponseHandle;
int proxy_pipe_start(struct server *srv, int client, struct MHD_UpgradeResponseHandle *urh,
                     int upstream, const char *to_upstream, size_t nup, const char *to_client,
                     size_t ndown, uint16_t port);

/* The connection counts (proxy.c): taken at begin, given back once the request or the pipe
 * is over. */
void proxy_conn_put(uint16_t port);

#endif
