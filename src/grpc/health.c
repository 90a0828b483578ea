/*
 * health.c - grpc.health.v1.Health, the standard gRPC health service (grpc's
 * doc/health-checking.md), for probes and load balancers that speak gRPC.
 *
 * It answers as /healthz does: SERVING while sbxd takes commands, NOT_SERVING once the
 * drain has begun or while a required isolation mechanism is degraded. "" (the server as a
 * whole) and the services served here are known; any other name is NOT_FOUND (Check) or
 * SERVICE_UNKNOWN (Watch), as the protocol says.
 */
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "grpc_internal.h"
#include "sbxd/isolation.h"
#include "sbxd/sandbox.h"

/* How often a Watch looks at the status again. */
#define WATCH_TICK_MS 100

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus serving_status;

static bool service_known(const char *name)
{
    return name[0] == '\0' || strcmp(name, "process.v1.ProcessService") == 0 ||
           strcmp(name, "grpc.health.v1.Health") == 0;
}

/* The drain of this front or the sandbox's (they begin together: a probe of one front must
 * not call sbxd ready while another refuses work), or /healthz's degraded state. */
static serving_status status_now(struct grpc_call *c, const char *name)
{
    if (!service_known(name))
        return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    if (grpc_call_draining(c) || isolation_degraded(grpc_call_exec(c)->iso, NULL, 0))
        return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
}

static int send_status(struct grpc_call *c, serving_status st)
{
    Grpc__Health__V1__HealthCheckResponse m = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    m.status = st;
    return grpc_call_send(c, &m.base);
}

/* The service's name, copied out of the request (which is freed here); NULL after finishing
 * the call when the request is not a HealthCheckRequest. */
static char *service_of(struct grpc_call *c, char *name, size_t len)
{
    size_t n;
    const uint8_t *data = grpc_call_message(c, &n);
    Grpc__Health__V1__HealthCheckRequest *rq =
        grpc__health__v1__health_check_request__unpack(NULL, n, data);
    if (!rq) {
        grpc_call_finish(c, GRPC_INVALID_ARGUMENT, "the request is not a valid HealthCheckRequest");
        return NULL;
    }
    /* A name cut here was longer than any served: cut, it stays unknown. */
    snprintf(name, len, "%s", rq->service ? rq->service : "");
    grpc__health__v1__health_check_request__free_unpacked(rq, NULL);
    return name;
}

static void health_check(struct grpc_call *c)
{
    char name[128];
    if (!service_of(c, name, sizeof(name)))
        return;
    serving_status st = status_now(c, name);
    if (st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN) {
        grpc_call_finish(c, GRPC_NOT_FOUND, "unknown service '%s'", name);
        return;
    }
    if (send_status(c, st) < 0)
        grpc_call_finish(c, GRPC_CANCELLED, NULL);
    else
        grpc_call_finish(c, GRPC_OK, NULL);
}

/* The status at once, then each change, until the client cancels. Once the drain has begun
 * the call ends after its NOT_SERVING: a watch would otherwise hold the drain, which waits
 * for every call, until its hard limit. */
static void health_watch(struct grpc_call *c)
{
    char name[128];
    if (!service_of(c, name, sizeof(name)))
        return;
    int cancel_fd = grpc_call_cancel_fd(c);
    int last = -1; /* nothing sent yet */
    for (;;) {
        serving_status st = status_now(c, name);
        if ((int)st != last && send_status(c, st) < 0)
            break;
        last = (int)st;
        if (grpc_call_draining(c)) {
            grpc_call_finish(c, GRPC_UNAVAILABLE, "sbxd is shutting down");
            return;
        }
        /* The cancel descriptor hangs up the moment the call is cancelled. */
        struct pollfd pfd = {.fd = cancel_fd, .events = POLLIN};
        if (poll(&pfd, 1, WATCH_TICK_MS) > 0 || grpc_call_cancelled(c) != GRPC_LIVE)
            break;
    }
    grpc_call_finish(c, GRPC_CANCELLED, NULL);
}

const struct grpc_method grpc_health_methods[] = {
    {"/grpc.health.v1.Health/Check", health_check, false},
    {"/grpc.health.v1.Health/Watch", health_watch, true},
    {NULL, NULL, false},
};
