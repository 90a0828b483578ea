/*
 * h2.c - the gRPC front's transport: the listener, one thread per HTTP/2 connection driving
 * an nghttp2 server session over h2c, gRPC's length-prefixed framing, deadlines, cancellation,
 * flow control and trailers (grpc_internal.h says what a handler sees).
 *
 * Threads. The accepting thread takes connections (at most --max-connections; beyond, closed
 * at accept) and starts a thread for each. A connection thread owns its socket and its
 * nghttp2 session: it reads, feeds the session, writes what the session has, and wakes on an
 * eventfd the call threads poke. A call (one stream) whose request is complete runs its
 * method's handler on a thread of its own. The connection thread and the handler share the
 * call's answer (its queue of framed messages, its status and trailers, its cancellation)
 * under the connection's lock; the call is reference-counted (the connection's side, the
 * handler's side) and each call holds a reference to its connection, so whichever ends last
 * frees.
 *
 * Hostile clients (commands in the sandbox can reach the listener): every buffer is bounded.
 * Headers: 16 KiB a stream; the request: one message of at most GRPC_MAX_MESSAGE, the bytes
 * held across the front at most GRPC_REQUEST_BUDGET; the answer: GRPC_SEND_QUEUE_MAX a call
 * (the handler waits beyond it), sent only as the client's flow-control window allows; the
 * socket: one frame's bytes past what the kernel took, and nothing more is read from a client
 * that does not read. Streams: 100 open a connection (nghttp2 refuses more), 100 handlers a
 * connection and a bound across the front (a reset stream's handler outlives the stream, so
 * the open-stream limit alone would not cap threads). Time: a connection must say SETTINGS
 * within --request-timeout-ms, a request must arrive whole within it, a connection without
 * streams is closed after --idle-timeout-ms, and so is one whose socket takes no byte that
 * long; a stream whose answer the client takes no byte of that long (it opens no window) is
 * reset. nghttp2 itself refuses bad prefaces, floods of SETTINGS and PINGs,
 * CONTINUATION floods and rapid resets.
 *
 * Guests. Health calls need no token (a kubelet probe carries none), so anyone who reaches the
 * port can make them: 7 connections of 100 Watch streams each once took every handler of the
 * front, and 256 connections of one Watch each every connection, so token holders got
 * RESOURCE_EXHAUSTED or were refused at accept. A health call without the token is a guest:
 * guests have a budget of their own (GRPC_GUEST_CALLS handlers, of which GRPC_GUEST_WATCHES
 * Watch streams, so that Watches never crowd out Checks; requests of GRPC_GUEST_MESSAGE bytes
 * at most, GRPC_GUEST_BYTES held in all) that never counts against the calls of token holders.
 * A connection that has carried no call but guests' is untrusted: at --max-connections the
 * oldest untrusted one is closed to make room for a new one, so guests cannot hold every
 * connection either (the newest is evicted last: a client's fresh connection has time for its
 * first call). Without a token configured, every call but health is a token holder's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2_internal.h"
#include "sbxd/auth.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/metrics.h"
#include "sbxd/timeutil.h"

/* ---- metrics ---- */

struct grpc_mx grpc_mx;

/* Request bytes held now: token holders' (GRPC_REQUEST_BUDGET) and guests' (GRPC_GUEST_BYTES),
 * apart, so that guests can never starve the others' requests. */
static size_t request_bytes, guest_bytes;

bool h2_budget_take(bool guest, size_t n)
{
    size_t *pool = guest ? &guest_bytes : &request_bytes;
    size_t most = guest ? GRPC_GUEST_BYTES : GRPC_REQUEST_BUDGET;
    if (__atomic_add_fetch(pool, n, __ATOMIC_RELAXED) <= most)
        return true;
    __atomic_sub_fetch(pool, n, __ATOMIC_RELAXED);
    return false;
}

void h2_budget_give(bool guest, size_t n)
{
    __atomic_sub_fetch(guest ? &guest_bytes : &request_bytes, n, __ATOMIC_RELAXED);
}

/* ---- codes ---- */

static const char *const code_names[MX_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *grpc_code_name(enum grpc_code code)
{
    return (unsigned)code < MX_CODES ? code_names[code] : "UNKNOWN";
}

enum grpc_code grpc_code_of(enum sbxd_errkind kind)
{
    switch (kind) {
    case SBXD_E_INVALID:
        return GRPC_INVALID_ARGUMENT;
    case SBXD_E_DENIED:
        return GRPC_PERMISSION_DENIED;
    case SBXD_E_NOT_FOUND:
        return GRPC_NOT_FOUND;
    case SBXD_E_CONFLICT:
    case SBXD_E_PRECONDITION:
        return GRPC_FAILED_PRECONDITION;
    case SBXD_E_RANGE:
        return GRPC_OUT_OF_RANGE;
    case SBXD_E_TOO_LARGE:
    case SBXD_E_BUSY:
    case SBXD_E_NO_SPACE:
        return GRPC_RESOURCE_EXHAUSTED;
    case SBXD_E_UNAVAILABLE:
        return GRPC_UNAVAILABLE;
    case SBXD_E_INTERNAL:
        return GRPC_INTERNAL;
    case SBXD_E_NONE:
        break;
    }
    return GRPC_UNKNOWN;
}

/* ---- threads ---- */

int h2_thread_spawn(struct grpc_front *g, size_t stack, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack);
    pthread_mutex_lock(&g->lock);
    g->threads++;
    pthread_mutex_unlock(&g->lock);
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&g->lock);
        g->threads--;
        pthread_cond_broadcast(&g->ended);
        pthread_mutex_unlock(&g->lock);
        errno = rc;
        return -1;
    }
    return 0;
}

/* The last thing a detached thread does: after it, g may be gone. */
void h2_thread_done(struct grpc_front *g)
{
    pthread_mutex_lock(&g->lock);
    g->threads--;
    pthread_cond_broadcast(&g->ended);
    pthread_mutex_unlock(&g->lock);
}

void h2_wake(int fd)
{
    uint64_t one = 1;
    if (write(fd, &one, sizeof(one)) < 0) {
        /* the counter is non-zero already: the thread wakes anyway */
    }
}

/* ---- the listener ---- */

/* acceptor_shed's turn_away: closed at once, counted. */
static void refuse(int fd, void *ctx)
{
    (void)ctx;
    close(fd);
    mx_add(&grpc_mx.conns_refused, 1);
}

/* acceptor's take: the connection's thread, or refused (conn_open). */
static void take(int fd, const struct sockaddr_storage *ss, socklen_t len, void *ctx)
{
    (void)len;
    h2_conn_open(ctx, fd, ss);
}

static const struct acceptor_ops accept_ops = {.front = "grpc", .take = take, .turn_away = refuse};

static void *accept_main(void *arg)
{
    struct grpc_front *g = arg;
    while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
        int64_t resume = 0;
        bool paused = acceptor_paused(&g->acc, time_mono_ns(), &resume);
        struct pollfd pfd[2] = {
            {.fd = g->wake_fd, .events = POLLIN},
            {.fd = paused ? -1 : g->listen_fd, .events = POLLIN},
        };
        int ready = poll(pfd, 2, paused ? time_ms_until(resume) : -1);
        if (ready < 0) {
            if (errno != EINTR)
                usleep(GRPC_ACCEPT_PAUSE_MS * 1000);
            continue;
        }
        if (pfd[0].revents)
            continue; /* stop: the loop's test */
        if (pfd[1].revents)
            acceptor_accept(&g->acc, g->listen_fd, &accept_ops, g);
    }
    return NULL;
}

static void front_free(struct grpc_front *g)
{
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    if (g->wake_fd >= 0)
        close(g->wake_fd);
    acceptor_free(&g->acc);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->ended);
    pthread_cond_destroy(&g->work);
    free(g);
}

static void grpc_metrics_render(struct jsonw *w);

struct grpc_front *grpc_front_start(const struct sbxd_config *cfg, struct sandbox *sb,
                                    struct sbxd_err *err)
{
    struct grpc_front *g = calloc(1, sizeof(*g));
    if (!g) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    g->cfg = cfg;
    g->sb = sb;
    g->token_len = cfg->token ? strlen(cfg->token) : 0;
    /* Every command that may run or wait, every background process's Start, and a quick call
     * (health, stdin, a signal) per connection. */
    uint64_t most = cfg->max_connections + cfg->max_running + cfg->max_queued + cfg->max_processes;
    g->max_calls = most > 65536 ? 65536 : (unsigned)most;
    g->listen_fd = g->wake_fd = g->acc.reserve_fd = -1;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->ended, &ca);
    pthread_cond_init(&g->work, &ca);
    pthread_condattr_destroy(&ca);

    g->listen_fd =
        acceptor_listen(&cfg->grpc_addr, cfg->grpc_addr_len, SBXD_LISTEN_BACKLOG, &g->port);
    if (g->listen_fd < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot listen on %s (--grpc-listen)",
                        cfg->grpc_listen);
        front_free(g);
        return NULL;
    }
    g->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (g->wake_fd < 0 || acceptor_init(&g->acc) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot set up the gRPC listener");
        front_free(g);
        return NULL;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_FRONT_STACK);
    int rc = pthread_create(&g->acceptor, &attr, accept_main, g);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, rc, "cannot start the gRPC accepting thread");
        front_free(g);
        return NULL;
    }
    g->acceptor_started = true;
    metrics_register(grpc_metrics_render);
    return g;
}

uint16_t grpc_front_port(const struct grpc_front *g)
{
    return g->port;
}

unsigned grpc_front_calls(const struct grpc_front *g)
{
    return __atomic_load_n(&g->calls, __ATOMIC_ACQUIRE) +
           __atomic_load_n(&g->guest_calls, __ATOMIC_ACQUIRE);
}

void grpc_front_drain(struct grpc_front *g)
{
    /* Connections stay: health must still answer (NOT_SERVING), and a command's stdin and
     * signals still come this way. The services refuse new commands. */
    __atomic_store_n(&g->draining, true, __ATOMIC_RELEASE);
}

void grpc_front_stop(struct grpc_front *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    __atomic_store_n(&g->stopping, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&g->work); /* idle handler threads end */
    pthread_mutex_unlock(&g->lock);
    h2_wake(g->wake_fd);
    if (g->acceptor_started)
        pthread_join(g->acceptor, NULL);
    close(g->listen_fd);
    g->listen_fd = -1;
    /* Each connection sends GOAWAY, cancels its calls (their commands are killed through their
     * descriptors) and ends; the handlers follow. */
    pthread_mutex_lock(&g->lock);
    for (struct conn *cn = g->conns; cn; cn = cn->next)
        h2_wake(cn->ev_fd);
    struct timespec until = time_mono_timespec(time_mono_ns() + GRPC_STOP_WAIT_MS * 1000000LL);
    while (g->threads > 0)
        if (pthread_cond_timedwait(&g->ended, &g->lock, &until) == ETIMEDOUT)
            break;
    unsigned left = g->threads;
    pthread_mutex_unlock(&g->lock);
    if (left > 0) {
        /* Their structures stay (a thread still uses them): a leak at exit, not a crash. */
        LOG_EVENT("warn", "grpc", LOG_S("message", "threads still running at stop"),
                  LOG_I("threads", left));
        return;
    }
    front_free(g);
}

/* ---- metrics ---- */

/* The label of a metrics row: the method's name, the last part of its path. */
static const char *method_label(unsigned row)
{
    if (row == MX_UNKNOWN)
        return "unknown";
    unsigned i = 0;
    const struct grpc_method *tables[] = {grpc_process_methods, grpc_health_methods};
    for (int t = 0; t < 2; t++)
        for (const struct grpc_method *m = tables[t]; m->path; m++, i++)
            if (i == row) {
                const char *slash = strrchr(m->path, '/');
                return slash ? slash + 1 : m->path;
            }
    return NULL;
}

static void grpc_metrics_render(struct jsonw *w)
{
    char lab[160];
    metrics_head(w, "sbxd_grpc_calls_total", "counter",
                 "gRPC calls ended, by method and status code (series appear once seen).");
    for (unsigned r = 0; r <= MX_METHODS; r++) {
        const char *name = method_label(r);
        for (unsigned code = 0; name && code < MX_CODES; code++) {
            uint64_t v = mx_get(&grpc_mx.calls[r][code]);
            if (!v)
                continue;
            snprintf(lab, sizeof(lab), "method=\"%s\",code=\"%s\"", name, code_names[code]);
            metrics_line(w, "sbxd_grpc_calls_total", lab, (double)v);
        }
    }
    metrics_head(w, "sbxd_grpc_calls_in_progress", "gauge", "gRPC calls whose handler runs now.");
    metrics_line(w, "sbxd_grpc_calls_in_progress", NULL, (double)mx_get(&grpc_mx.calls_running));
    metrics_head(w, "sbxd_grpc_connections_total", "counter", "gRPC connections accepted.");
    metrics_line(w, "sbxd_grpc_connections_total", NULL, (double)mx_get(&grpc_mx.conns_total));
    metrics_head(w, "sbxd_grpc_connections_open", "gauge", "gRPC connections open now.");
    metrics_line(w, "sbxd_grpc_connections_open", NULL, (double)mx_get(&grpc_mx.conns_open));
    metrics_head(w, "sbxd_grpc_connections_refused_total", "counter",
                 "gRPC connections closed at accept: over --max-connections, or sbxd out of "
                 "descriptors or memory.");
    metrics_line(w, "sbxd_grpc_connections_refused_total", NULL,
                 (double)mx_get(&grpc_mx.conns_refused));
    metrics_head(w, "sbxd_grpc_connections_evicted_total", "counter",
                 "gRPC connections that had carried no call but health calls without the token, "
                 "closed at --max-connections to make room for a new one.");
    metrics_line(w, "sbxd_grpc_connections_evicted_total", NULL,
                 (double)mx_get(&grpc_mx.conns_evicted));
}
