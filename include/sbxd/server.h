/*
 * server.h - the HTTP server: libmicrohttpd with one thread per connection, so a route may
 * block for the life of a command while every other connection goes on.
 */
#ifndef SBXD_SERVER_H
#define SBXD_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/err.h"
#include "sbxd/sandbox.h"

struct server;

/* Listen as cfg says and serve the sandbox sb (which outlives the server). */
struct server *server_start(const struct sbxd_config *cfg, struct sandbox *sb,
                            struct sbxd_err *err);

uint16_t server_port(const struct server *srv);
/* Every listener's port, in --listen's order, as a comma list ("8888,8080") into out. */
void server_ports(const struct server *srv, char *out, size_t len);

/* Long-lived streams being sent right now: background processes' output, watches, MCP's events. */
unsigned server_streams(const struct server *srv);

/* Enforce the connection deadlines (request timeout, refusals over the caps); called
 * often from the main loop, it does work at most every 100 ms. */
void server_tick(struct server *srv);

/* Requests completed since start. */
uint64_t server_completed(const struct server *srv);

/* Connections open now. */
unsigned server_connections(struct server *srv);

/* Close the listener and every connection, wait for their threads, free. */
void server_stop(struct server *srv);

/* Connections beyond --max-connections, which main sizes the descriptor limit by too. */

/* Connections accepted past --max-connections when none waiting for a request can make
 * room, to be answered 503 (or served, for a health check) rather than dropped unanswered;
 * beyond them a connection is closed at accept (accept.c). */
#define SBXD_CONN_SPARE 64

/* Connections shut down (to make room, or cut off) whose threads have not ended yet: room
 * for them in libmicrohttpd's count, so that it never refuses one sbxd admitted. */
#define SBXD_CONN_DYING 1024

#endif
