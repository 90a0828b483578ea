/*
 * h2_call.c - a gRPC call's life (references, cancellation, its end) and what its handler
 * has: the request, its deadline, sending messages, trailers and the finish; the handler
 * threads kept for the next calls (h2.c says how the transport works).
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

/* ---- calls: lifetime ---- */

void h2_conn_unref(struct conn *cn)
{
    pthread_mutex_lock(&cn->lock);
    bool last = --cn->refs == 0;
    pthread_mutex_unlock(&cn->lock);
    if (!last)
        return;
    pthread_mutex_destroy(&cn->lock);
    pthread_cond_destroy(&cn->room);
    close(cn->ev_fd);
    free(cn->wbuf);
    free(cn);
}

static void queue_free(struct frame *f)
{
    while (f) {
        struct frame *next = f->next;
        free(f);
        f = next;
    }
}

static void call_free(struct grpc_call *c)
{
    /* Counted once, by what the client was told: the status sent, or why nothing was. */
    int code = c->final_code;
    if (code < 0)
        code = c->cancel == GRPC_DEADLINE       ? GRPC_DEADLINE_EXCEEDED
               : c->cancel == GRPC_DISCONNECTED ? GRPC_UNAVAILABLE
                                                : GRPC_CANCELLED;
    mx_add(&grpc_mx.calls[c->mx][code], 1);
    queue_free(c->qhead);
    for (unsigned i = 0; i < c->ntrailers; i++) {
        free(c->trailer[i][0]);
        free(c->trailer[i][1]);
    }
    if (c->msg_cap)
        h2_budget_give(c->guest, c->msg_cap);
    free(c->msg);
    if (c->cancel_rd >= 0)
        close(c->cancel_rd);
    if (c->cancel_wr >= 0)
        close(c->cancel_wr);
    free(c);
}

void h2_call_unref(struct grpc_call *c)
{
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&cn->lock);
    if (!last)
        return;
    call_free(c);
    h2_conn_unref(cn);
}

/* Under the lock: the call has no client to answer any more. Its descriptor hangs up (the
 * exec service's waits and the command end there) and a sender waiting for room returns. */
void h2_cancel_locked(struct conn *cn, struct grpc_call *c, enum grpc_cancel why)
{
    if (c->cancel != GRPC_LIVE)
        return;
    c->cancel = why;
    if (c->cancel_wr >= 0) {
        close(c->cancel_wr);
        c->cancel_wr = -1;
    }
    pthread_cond_broadcast(&cn->room);
}

/* Under the lock: the answer's status. When the transport ends the call (a deadline), what is
 * queued goes, but for a message nghttp2 has begun to send: the client gets it whole. */
void h2_finish_locked(struct grpc_call *c, enum grpc_code code, const char *text, bool drop_queue)
{
    if (c->finished)
        return;
    c->finished = true;
    c->code = code;
    snprintf(c->message, sizeof(c->message), "%s", text ? text : "");
    if (drop_queue && c->qhead) {
        struct frame *keep = c->qhead->off > 0 ? c->qhead : NULL;
        queue_free(keep ? keep->next : c->qhead);
        if (keep)
            keep->next = NULL;
        c->qhead = c->qtail = keep;
        c->queued = keep ? keep->len - keep->off : 0;
    }
}

/* Under the lock (or before the handler runs): one more trailer, taken as it is. */
void h2_trailer_add(struct grpc_call *c, const char *key, const char *value)
{
    if (c->ntrailers >= GRPC_TRAILERS_MAX)
        return;
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    c->trailer[c->ntrailers][0] = k;
    c->trailer[c->ntrailers][1] = v;
    c->ntrailers++;
}

/* The connection thread answers a call no handler runs for (yet): a refused request. The
 * answer goes out at the next pump; DATA still coming is dropped. */
void h2_call_answer(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
{
    char text[GRPC_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    c->answered = true;
    if (c->msg_cap)
        h2_budget_give(c->guest, c->msg_cap);
    free(c->msg);
    c->msg = NULL;
    c->msg_cap = 0;
    pthread_mutex_lock(&c->conn->lock);
    h2_finish_locked(c, code, text, true);
    pthread_mutex_unlock(&c->conn->lock);
}

/* ---- the handler's side ---- */

const uint8_t *grpc_call_message(const struct grpc_call *c, size_t *len)
{
    static const uint8_t empty[1];
    *len = c->msg_len;
    return c->msg ? c->msg : empty;
}

int64_t grpc_call_deadline_ns(const struct grpc_call *c)
{
    return c->deadline_ns;
}

const char *grpc_call_peer(const struct grpc_call *c)
{
    return c->conn->peer;
}

struct exec_service *grpc_call_exec(const struct grpc_call *c)
{
    return &c->conn->g->sb->exec;
}

const struct sbxd_config *grpc_call_config(const struct grpc_call *c)
{
    return c->conn->g->cfg;
}

bool grpc_call_draining(const struct grpc_call *c)
{
    const struct grpc_front *g = c->conn->g;
    return __atomic_load_n(&g->draining, __ATOMIC_ACQUIRE) || sandbox_draining(g->sb);
}

const bool *grpc_call_drain_flag(const struct grpc_call *c)
{
    return &c->conn->g->sb->draining;
}

int grpc_call_cancel_fd(const struct grpc_call *c)
{
    return c->cancel_rd;
}

enum grpc_cancel grpc_call_cancelled(const struct grpc_call *c)
{
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    enum grpc_cancel why = c->cancel;
    pthread_mutex_unlock(&cn->lock);
    return why;
}

int grpc_call_send(struct grpc_call *c, const ProtobufCMessage *msg)
{
    struct conn *cn = c->conn;
    /* Wait for room first, and only then build the frame: a stalled client costs one queue,
     * not one more message. */
    pthread_mutex_lock(&cn->lock);
    while (c->queued >= GRPC_SEND_QUEUE_MAX && c->cancel == GRPC_LIVE && !c->finished)
        pthread_cond_wait(&cn->room, &cn->lock);
    bool gone = c->cancel != GRPC_LIVE || c->finished;
    pthread_mutex_unlock(&cn->lock);
    if (gone)
        return -1;
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > UINT32_MAX)
        return -1;
    struct frame *f = malloc(sizeof(*f) + 5 + n);
    if (!f)
        return -1;
    f->next = NULL;
    f->len = 5 + n;
    f->off = 0;
    f->data[0] = 0; /* not compressed */
    f->data[1] = (uint8_t)(n >> 24);
    f->data[2] = (uint8_t)(n >> 16);
    f->data[3] = (uint8_t)(n >> 8);
    f->data[4] = (uint8_t)n;
    protobuf_c_message_pack(msg, f->data + 5);
    pthread_mutex_lock(&cn->lock);
    gone = c->cancel != GRPC_LIVE || c->finished;
    if (!gone) {
        if (c->qtail)
            c->qtail->next = f;
        else
            c->qhead = f;
        c->qtail = f;
        c->queued += f->len;
    }
    pthread_mutex_unlock(&cn->lock);
    if (gone) {
        free(f);
        return -1;
    }
    /* A unary method's one message goes out with its trailers: grpc_call_finish wakes. */
    if (c->method->server_streaming)
        h2_wake(cn->ev_fd);
    return 0;
}

/* A trailer key as HTTP/2 and gRPC take it: lower case token characters, none of gRPC's own
 * (grpc-*) and no binary one (-bin wants base64). */
static bool trailer_key_ok(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n >= GRPC_TRAILER_KEY || strncmp(key, "grpc-", 5) == 0 ||
        (n > 4 && strcmp(key + n - 4, "-bin") == 0))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = key[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
              ch == '.'))
            return false;
    }
    return true;
}

static bool trailer_value_ok(const char *value)
{
    size_t n = strlen(value);
    if (n >= GRPC_TRAILER_VALUE)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)value[i] < 0x20 || (unsigned char)value[i] > 0x7e)
            return false;
    return true;
}

void grpc_call_trailer(struct grpc_call *c, const char *key, const char *value)
{
    /* Anything else could break the answer's header block or forge gRPC's own fields: it is
     * left out. */
    if (!key || !value || !trailer_key_ok(key) || !trailer_value_ok(value))
        return;
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    if (!c->finished)
        h2_trailer_add(c, key, value);
    pthread_mutex_unlock(&cn->lock);
}

void grpc_call_finish(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
{
    char text[GRPC_MESSAGE_MAX] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
    }
    if ((unsigned)code >= MX_CODES)
        code = GRPC_UNKNOWN;
    struct conn *cn = c->conn;
    pthread_mutex_lock(&cn->lock);
    if (c->cancel == GRPC_LIVE)
        h2_finish_locked(c, code, text, false);
    pthread_mutex_unlock(&cn->lock);
    h2_wake(cn->ev_fd);
}

/* A guest's handler from the guests' budget: false when it is spent. A Watch takes one of the
 * GRPC_GUEST_WATCHES too, so that Checks (a probe's) always find room. */
bool h2_guest_take(struct grpc_front *g, bool watch)
{
    if (__atomic_add_fetch(&g->guest_calls, 1, __ATOMIC_ACQ_REL) > GRPC_GUEST_CALLS) {
        __atomic_sub_fetch(&g->guest_calls, 1, __ATOMIC_RELEASE);
        return false;
    }
    if (watch && __atomic_add_fetch(&g->guest_watches, 1, __ATOMIC_ACQ_REL) > GRPC_GUEST_WATCHES) {
        __atomic_sub_fetch(&g->guest_watches, 1, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&g->guest_calls, 1, __ATOMIC_RELEASE);
        return false;
    }
    return true;
}

void h2_guest_put(struct grpc_front *g, bool watch)
{
    if (watch)
        __atomic_sub_fetch(&g->guest_watches, 1, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&g->guest_calls, 1, __ATOMIC_RELEASE);
}

/* One call on a handler thread, to its end. */
static void call_run(struct grpc_call *c)
{
    struct conn *cn = c->conn;
    struct grpc_front *g = cn->g;
    c->method->handler(c);
    pthread_mutex_lock(&cn->lock);
    bool over = c->finished || c->cancel != GRPC_LIVE;
    pthread_mutex_unlock(&cn->lock);
    if (!over)
        grpc_call_finish(c, GRPC_INTERNAL, "the method ended without an answer");
    if (c->guest) {
        h2_guest_put(g, c->method->server_streaming);
    } else {
        pthread_mutex_lock(&cn->lock);
        cn->handlers--;
        pthread_mutex_unlock(&cn->lock);
        __atomic_sub_fetch(&g->calls, 1, __ATOMIC_RELEASE);
    }
    mx_add(&grpc_mx.calls_running, -1);
    h2_call_unref(c);
}

/* A handler thread: its first call, then the calls handed to it while it waits idle (no
 * thread is made per call: a unary call's latency is the handler's), until it has waited
 * WORKER_IDLE_MS for nothing, the front stops, or enough others wait already. */
static void *worker_main(void *arg)
{
    struct grpc_call *c = arg;
    struct grpc_front *g = c->conn->g;
    while (c) {
        call_run(c);
        c = NULL;
        pthread_mutex_lock(&g->lock);
        if (g->idle < WORKERS_IDLE_MAX) {
            g->idle++;
            struct timespec until = time_mono_timespec(time_mono_ns() + WORKER_IDLE_MS * 1000000LL);
            while (!g->work_head && !__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE))
                if (pthread_cond_timedwait(&g->work, &g->lock, &until) == ETIMEDOUT)
                    break;
            if ((c = g->work_head)) {
                g->work_head = c->work_next;
                if (!g->work_head)
                    g->work_tail = NULL;
                c->work_next = NULL;
            }
            g->idle--;
        }
        pthread_mutex_unlock(&g->lock);
    }
    h2_thread_done(g);
    return NULL;
}

/* Run c's handler on an idle handler thread, else on a new one. -1 with errno when no thread
 * could be made. */
int h2_call_dispatch(struct grpc_front *g, struct grpc_call *c)
{
    pthread_mutex_lock(&g->lock);
    unsigned waiting = 0;
    for (struct grpc_call *w = g->work_head; w; w = w->work_next)
        waiting++;
    bool handed = g->idle > waiting && !__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE);
    if (handed) {
        if (g->work_tail)
            g->work_tail->work_next = c;
        else
            g->work_head = c;
        g->work_tail = c;
        pthread_cond_signal(&g->work);
    }
    pthread_mutex_unlock(&g->lock);
    return handed ? 0 : h2_thread_spawn(g, SBXD_THREAD_STACK, worker_main, c);
}
