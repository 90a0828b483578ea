/*
 * grpc.h - the gRPC front: agent-sandbox's sandboxd ProcessService (process.v1) and the
 * standard health service (grpc.health.v1), over HTTP/2 without TLS (h2c) on a listener of
 * its own (--grpc-listen). Commands go through the sandbox's exec service (its admission
 * queue, policy, containment, audit line and metrics), so every front shares one set of
 * limits. It depends on no other front.
 */
#ifndef SBXD_GRPC_H
#define SBXD_GRPC_H

#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/err.h"
#include "sbxd/sandbox.h"

struct grpc_front;

/* Listen on cfg->grpc_addr and serve, commands through sb's exec service; its counters
 * (sbxd_grpc_*) join GET /metrics. NULL with err when it cannot listen. (Not called when
 * cfg->grpc_off.) */
struct grpc_front *grpc_front_start(const struct sbxd_config *cfg, struct sandbox *sb,
                                    struct sbxd_err *err);

uint16_t grpc_front_port(const struct grpc_front *g);

/* Calls (RPCs) being served right now. */
unsigned grpc_front_calls(const struct grpc_front *g);

/* The drain has begun: health answers NOT_SERVING, new calls UNAVAILABLE; calls in progress
 * go on (their commands are the drain's to end). */
void grpc_front_drain(struct grpc_front *g);

/* Close the listener, end every connection (GOAWAY), cancel what still runs, wait for every
 * thread, free. */
void grpc_front_stop(struct grpc_front *g);

#endif
