/*
 * server.h - the HTTP server: libmicrohttpd with one thread per connection, so a route may
 * block for the life of a command while every other connection goes on.
 */
#ifndef SBXD_SERVER_H
#define SBXD_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/cgroup.h"
#include "sbxd/err.h"
#include "sbxd/harden.h"
#include "sbxd/isolation.h"

struct server;

/* Listen as cfg says and serve; rootfd and workspace (absolute) are the workspace root. */
struct server *server_start(const struct sbxd_config *cfg, int rootfd, const char *workspace,
                            const struct harden_plan *harden, struct isolation *iso,
                            struct sbxd_err *err);

uint16_t server_port(const struct server *srv);
/* Every listener's port, in --listen's order, as a comma list ("8888,8080") into out. */
void server_ports(const struct server *srv, char *out, size_t len);

/* The exec service the routes start commands through (other fronts share it: one admission
 * queue and one set of limits), and the drain flag its admission watches. */
struct exec_service *server_exec(struct server *srv);
const bool *server_drain_flag(const struct server *srv);

/* The directory a reset gives the workspace the tree of (--workspace-baseline; taken). */
void server_set_baseline(struct server *srv, int fd);

/* Stop taking work: /healthz answers 503 draining and work routes 503. */
void server_set_draining(struct server *srv);

/* Requests that are running commands right now. */
unsigned server_running(const struct server *srv);

/* Background-process output and watch streams being sent right now. */
unsigned server_streams(const struct server *srv);

/* Close the listener and every connection, wait for their threads, free. */
/* Enforce the connection deadlines (request timeout, refusals over the caps); called
 * often from the main loop, it does work at most every 100 ms. */
void server_tick(struct server *srv);

/* Requests completed since start. */
uint64_t server_completed(const struct server *srv);

/* Connections open now. */
unsigned server_connections(struct server *srv);

void server_stop(struct server *srv);

#endif
