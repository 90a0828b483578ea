/*
 * h2_conn.c - a gRPC connection's thread: its nghttp2 session, reading and writing the
 * socket with bounded buffers, its deadlines, and its end; opening one at accept, within
 * --max-connections (making room by closing an untrusted one).
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
#include "sbxd/log.h"
#include "sbxd/metrics.h"
#include "sbxd/timeutil.h"

/* ---- connections ---- */

/* Keep what the socket did not take (the session's buffer is its own only until its next
 * send). */
static int wbuf_keep(struct conn *cn, const uint8_t *p, size_t n)
{
    if (cn->woff > 0) {
        memmove(cn->wbuf, cn->wbuf + cn->woff, cn->wlen - cn->woff);
        cn->wlen -= cn->woff;
        cn->woff = 0;
    }
    if (cn->wlen + n > cn->wcap) {
        size_t cap = cn->wlen + n < 32768 ? 32768 : cn->wlen + n;
        uint8_t *b = realloc(cn->wbuf, cap);
        if (!b)
            return -1;
        cn->wbuf = b;
        cn->wcap = cap;
    }
    memcpy(cn->wbuf + cn->wlen, p, n);
    cn->wlen += n;
    return 0;
}

/* Frames gathered before a write: a unary answer's HEADERS, DATA and trailers leave in one
 * segment (one wake-up of the client, not three), a stream's frames a socket buffer's worth
 * at a time. */
#define WRITE_GATHER 65536

/* Write what the session has until the socket is full. -1: the connection is broken. */
static int conn_flush(struct conn *cn, int64_t now)
{
    for (;;) {
        if (cn->woff == cn->wlen)
            cn->stall_since_ns = now; /* nothing waited: a stall is counted from here */
        while (cn->wlen - cn->woff < WRITE_GATHER) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(cn->h2, &data);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (wbuf_keep(cn, data, (size_t)n) < 0)
                return -1;
        }
        if (cn->woff == cn->wlen)
            return 0;
        ssize_t k = send(cn->fd, cn->wbuf + cn->woff, cn->wlen - cn->woff, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        cn->woff += (size_t)k;
        cn->stall_since_ns = now; /* progress */
        if (cn->woff == cn->wlen)
            cn->woff = cn->wlen = 0;
    }
}

/* Read what the client sent (a few reads' worth) into the session. -1: the connection is
 * over (closed, broken, or refused by the session: a bad preface, a protocol error). */
static int conn_read(struct conn *cn)
{
    uint8_t buf[GRPC_READ_CHUNK];
    for (int i = 0; i < 4; i++) {
        ssize_t n = recv(cn->fd, buf, sizeof(buf), 0);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        if (nghttp2_session_mem_recv(cn->h2, buf, (size_t)n) < 0)
            return -1;
        if ((size_t)n < sizeof(buf))
            return 0;
    }
    return 0;
}

/* Stop reading: send GOAWAY (the session ends once it is out), for at most a moment more. */
static void conn_close_soon(struct conn *cn, int64_t now)
{
    if (cn->closing)
        return;
    cn->closing = true;
    /* A GOAWAY that lets the streams already begun end (an answer that is complete goes
     * out); the connection ends once none is left, or at the deadline. */
    nghttp2_submit_goaway(cn->h2, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(cn->h2), NGHTTP2_NO_ERROR, NULL,
                          0);
    cn->closing_deadline_ns = now + GRPC_STOP_FLUSH_MS * 1000000LL;
}

/* Cancel every call whose handler has not finished it (a finished call's answer still goes
 * out, if the connection lasts long enough). */
static void conn_cancel_unfinished(struct conn *cn, enum grpc_cancel why)
{
    pthread_mutex_lock(&cn->lock);
    for (struct grpc_call *c = cn->calls; c; c = c->next)
        if (!c->finished)
            h2_cancel_locked(cn, c, why);
    pthread_mutex_unlock(&cn->lock);
}

static void conn_loop(struct conn *cn)
{
    struct grpc_front *g = cn->g;
    const struct sbxd_config *cfg = g->cfg;
    int64_t idle_ns = (int64_t)cfg->idle_timeout_ms * 1000000;
    for (;;) {
        int64_t now = time_mono_ns();
        if (__atomic_load_n(&cn->evicted, __ATOMIC_ACQUIRE)) {
            /* Closed to make room (make_room_locked): its guests' calls end, a GOAWAY goes if
             * the socket takes it at once, and the thread ends now rather than linger. */
            conn_cancel_unfinished(cn, GRPC_DISCONNECTED);
            static const char why[] = "sbxd is at --max-connections: an untrusted connection "
                                      "made room";
            nghttp2_submit_goaway(cn->h2, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(cn->h2), NGHTTP2_NO_ERROR,
                                  (const uint8_t *)why, sizeof(why) - 1);
            (void)conn_flush(cn, now);
            return;
        }
        if (!cn->stopping && __atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
            cn->stopping = true;
            conn_cancel_unfinished(cn, GRPC_DISCONNECTED);
            conn_close_soon(cn, now);
        }
        int64_t next = h2_pump(cn, now);
        if (conn_flush(cn, now) < 0)
            return;
        bool pending = cn->woff < cn->wlen;
        if (!nghttp2_session_want_read(cn->h2) && !nghttp2_session_want_write(cn->h2) && !pending)
            return; /* the session failed, or the client said GOAWAY */
        if (cn->closing && cn->nstreams == 0 && !pending && !nghttp2_session_want_write(cn->h2))
            return; /* our GOAWAY is out, and no stream is left */
        /* The timers of the connection itself. */
        if (!cn->settings_seen) {
            /* A client must at least say its preface and SETTINGS quickly. */
            int64_t t = cn->opened_ns + (int64_t)cfg->request_timeout_ms * 1000000;
            if (now >= t)
                return;
            h2_earliest(&next, t);
        }
        if (pending) {
            if (now - cn->stall_since_ns >= idle_ns)
                return; /* the client reads nothing of what it is sent */
            h2_earliest(&next, cn->stall_since_ns + idle_ns);
        }
        if (cn->closing) {
            if (now >= cn->closing_deadline_ns)
                return;
            h2_earliest(&next, cn->closing_deadline_ns);
        } else if (cn->nstreams == 0) {
            if (now - cn->idle_since_ns >= idle_ns) {
                conn_close_soon(cn, now);
                continue;
            }
            h2_earliest(&next, cn->idle_since_ns + idle_ns);
        }
        /* A client that does not read what it is sent gets nothing more read either: its
         * requests cannot make sbxd queue more answers (nor PING acks). */
        struct pollfd pfd[2] = {
            {.fd = cn->fd,
             .events = (short)((pending ? POLLOUT : 0) |
                               (!pending && nghttp2_session_want_read(cn->h2) ? POLLIN : 0))},
            {.fd = cn->ev_fd, .events = POLLIN},
        };
        int timeout = next ? time_ms_until(next) : -1;
        int ready = poll(pfd, 2, timeout);
        if (ready < 0) {
            if (errno != EINTR)
                usleep(10000); /* (ENOMEM) no busy loop */
            continue;
        }
        if (pfd[1].revents) {
            uint64_t v;
            if (read(cn->ev_fd, &v, sizeof(v)) < 0) {
                /* reset by an earlier read: nothing lost */
            }
        }
        if (pfd[0].revents & (POLLERR | POLLNVAL))
            return;
        if ((pfd[0].revents & (POLLIN | POLLHUP)) && conn_read(cn) < 0)
            return;
    }
}

static void conn_end(struct conn *cn)
{
    struct grpc_front *g = cn->g;
    /* No callback runs in nghttp2_session_del: the streams still open are ended here. */
    if (cn->h2)
        nghttp2_session_del(cn->h2);
    cn->h2 = NULL;
    while (cn->calls) {
        struct grpc_call *c = cn->calls;
        pthread_mutex_lock(&cn->lock);
        h2_cancel_locked(cn, c, GRPC_DISCONNECTED);
        pthread_mutex_unlock(&cn->lock);
        h2_call_unlink(cn, c);
        h2_call_unref(c);
    }
    close(cn->fd);
    cn->fd = -1;
    pthread_mutex_lock(&g->lock);
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        g->conns = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    g->nconns--;
    if (__atomic_load_n(&cn->evicted, __ATOMIC_ACQUIRE))
        g->nevicting--;
    pthread_mutex_unlock(&g->lock);
    mx_add(&grpc_mx.conns_open, -1);
}

static void *conn_main(void *arg)
{
    struct conn *cn = arg;
    struct grpc_front *g = cn->g;
    if (h2_conn_session(cn) == 0)
        conn_loop(cn);
    conn_end(cn);
    h2_conn_unref(cn);
    h2_thread_done(g);
    return NULL;
}

static void format_peer(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(out, len, "%s:%u", host, ntohs(a->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(out, len, "[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        snprintf(out, len, "local");
    }
}

/* Under g's lock, at --max-connections: close the oldest untrusted connection (one that has
 * carried no call but guests', or none yet) to make room for a new one. Guests' connections
 * held every slot otherwise (256 connections of one health Watch each: a token holder was
 * refused at accept). A trusted connection is never chosen; the newest untrusted one is
 * chosen last, so a client's fresh connection has time to make its first call. False when
 * none can be (all trusted, or too many still closing). */
static bool make_room_locked(struct grpc_front *g)
{
    if (g->nevicting >= GRPC_EVICTING_MAX)
        return false;
    struct conn *victim = NULL;
    for (struct conn *cn = g->conns; cn; cn = cn->next)
        if (!__atomic_load_n(&cn->trusted, __ATOMIC_ACQUIRE) &&
            !__atomic_load_n(&cn->evicted, __ATOMIC_ACQUIRE) &&
            (!victim || cn->opened_ns < victim->opened_ns))
            victim = cn;
    if (!victim)
        return false;
    __atomic_store_n(&victim->evicted, true, __ATOMIC_RELEASE);
    g->nevicting++;
    h2_wake(victim->ev_fd); /* (in the list, so its thread has not freed it) */
    mx_add(&grpc_mx.conns_evicted, 1);
    return true;
}

/* A connection accepted: its thread, unless the front is full (and no untrusted connection
 * makes room) or stopping. Takes fd. */
void h2_conn_open(struct grpc_front *g, int fd, const struct sockaddr_storage *ss)
{
    pthread_mutex_lock(&g->lock);
    bool room =
        !g->stopping && (g->nconns - g->nevicting < g->cfg->max_connections || make_room_locked(g));
    pthread_mutex_unlock(&g->lock);
    struct conn *cn = room ? calloc(1, sizeof(*cn)) : NULL;
    int ev = cn ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
    if (ev < 0) {
        /* Over the cap (or out of memory): closed at once, before it costs a thread. */
        free(cn);
        close(fd);
        mx_add(&grpc_mx.conns_refused, 1);
        return;
    }
    cn->g = g;
    cn->fd = fd;
    cn->ev_fd = ev;
    cn->refs = 1; /* the connection thread's */
    pthread_mutex_init(&cn->lock, NULL);
    pthread_cond_init(&cn->room, NULL);
    cn->opened_ns = cn->idle_since_ns = time_mono_ns();
    format_peer(ss, cn->peer, sizeof(cn->peer));
    pthread_mutex_lock(&g->lock);
    cn->next = g->conns;
    if (g->conns)
        g->conns->prev = cn;
    g->conns = cn;
    g->nconns++;
    pthread_mutex_unlock(&g->lock);
    mx_add(&grpc_mx.conns_open, 1);
    mx_add(&grpc_mx.conns_total, 1);
    if (h2_thread_spawn(g, GRPC_CONN_STACK, conn_main, cn) < 0) {
        conn_end(cn);
        h2_conn_unref(cn);
        mx_add(&grpc_mx.conns_refused, 1);
    }
}
