/*
 * accept.c - the front door: sbxd's own listening sockets (one per --listen address) and the
 * one thread that accepts on them, hands each admitted connection to libmicrohttpd, and
 * lingers on closed ones. Every listener feeds the same daemon: one set of routes, token,
 * Origin/Host rules and connection limits, whichever address a client dialled.
 *
 * Why not libmicrohttpd's own accept: at its connection limit it resets new connections
 * before sbxd can tell a health probe from a flood, and out of descriptors it retries
 * accept() in a loop. Here every connection is put to the guard first (guard_admit: the caps,
 * making room by closing the connection that has waited longest for a request), and one over
 * the caps is closed at once, before it costs a thread or a buffer.
 *
 * Out of descriptors (EMFILE, ENFILE), a reserve descriptor is given up to accept the next
 * connection, which is answered 503 and closed, and the reserve taken back: every wake-up
 * makes progress, and nothing spins. Out of memory, accepting pauses briefly.
 *
 * Lingering close (RFC 9112, 9.6): a connection answered before its request was all in
 * (413, 401, 431, ...) may still be sending; closing it with bytes unread would reset it, and
 * a client that sends its whole body before reading (Python's http.client) would lose the
 * answer. The guard hands such a socket over (a duplicate of its descriptor, taken before
 * libmicrohttpd closes its own, which has shut the sending side already); this thread reads
 * and drops what still comes for at most SBXD_LINGER_MS, then closes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sbxd/acceptor.h"
#include "http_internal.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/metrics.h"
#include "sbxd/timeutil.h"

struct lingering {
    int fd;
    int64_t deadline_ns;
};

struct front {
    int listen_fd[SBXD_LISTEN_MAX];
    unsigned nlisten;
    int wake_fd;               /* eventfd: stop, or sockets handed over to linger on */
    struct acceptor_state acc; /* the reserve descriptor, the accept failures' log */
    pthread_t thread;
    bool started;
    bool stop; /* under lock */
    pthread_mutex_t lock;
    int handed[SBXD_LINGER_MAX]; /* under lock: handed over, not yet taken by the thread */
    unsigned nhanded;
    struct lingering linger[SBXD_LINGER_MAX]; /* the thread's own */
    unsigned nlinger;
    char *scratch; /* where lingering sockets' bytes are read to be dropped */
};

/* The i-th --listen address: bound and listening, its port in srv->ports[i]. */
static int listen_one(struct server *srv, struct front *f, unsigned i, struct sbxd_err *err)
{
    const struct sbxd_config *cfg = srv->cfg;
    int fd = acceptor_listen(&cfg->listen_addr[i], cfg->listen_addr_len[i], SBXD_LISTEN_BACKLOG,
                             &srv->ports[i]);
    if (fd < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot listen on %s", cfg->listen);
    f->listen_fd[f->nlisten++] = fd;
    if (i == 0)
        srv->port = srv->ports[0];
    srv->nports = i + 1;
    return 0;
}

int front_open(struct server *srv, struct sbxd_err *err)
{
    const struct sbxd_config *cfg = srv->cfg;
    struct front *f = calloc(1, sizeof(*f));
    char *scratch = malloc(SBXD_LINGER_READ);
    if (!f || !scratch) {
        free(f);
        free(scratch);
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    f->scratch = scratch;
    f->wake_fd = f->acc.reserve_fd = -1;
    pthread_mutex_init(&f->lock, NULL);
    srv->front = f;
    for (unsigned i = 0; i < cfg->nlisten; i++)
        if (listen_one(srv, f, i, err) < 0)
            return -1;
    f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (f->wake_fd < 0 || acceptor_init(&f->acc) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot set up the listener");
    return 0;
}

static void wake(struct front *f)
{
    uint64_t one = 1;
    if (write(f->wake_fd, &one, sizeof(one)) < 0) {
        /* the counter is non-zero already: the thread wakes anyway */
    }
}

void front_linger(struct server *srv, int fd)
{
    struct front *f = srv->front;
    bool taken = false;
    pthread_mutex_lock(&f->lock);
    if (f->started && !f->stop && f->nhanded < SBXD_LINGER_MAX) {
        f->handed[f->nhanded++] = fd;
        taken = true;
    }
    pthread_mutex_unlock(&f->lock);
    if (taken)
        wake(f);
    else
        close(fd); /* too many at once: this one is closed as it was before */
}

enum shed_reason { SHED_CLIENT, SHED_TOTAL, SHED_DESCRIPTORS };

/* Refuse a connection at the door: a short answer if its buffer takes it, then close. */
static void shed(struct server *srv, int fd, enum shed_reason why)
{
    static const char *const message[] = {
        [SHED_CLIENT] = "this client address has too many connections open "
                        "(--max-client-connections) and none is idle; retry later",
        [SHED_TOTAL] = "sbxd has too many connections open (--max-connections) and none is "
                       "idle; retry later",
        [SHED_DESCRIPTORS] = "sbxd is out of file descriptors (Too many open files); retry "
                             "later",
    };
    bool per_client = why == SHED_CLIENT;
    char body[200], out[480];
    int bl = snprintf(body, sizeof(body), "{\"code\":\"%s\",\"message\":\"%s\"}\n",
                      per_client ? "RESOURCE_EXHAUSTED" : "UNAVAILABLE", message[why]);
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     "Connection: close\r\nRetry-After: %d\r\n\r\n%s",
                     per_client ? "429 Too Many Requests" : "503 Service Unavailable", bl,
                     SBXD_RETRY_AFTER_S, body);
    if (send(fd, out, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* the close alone tells it */
    }
    close(fd);
    if (why != SHED_DESCRIPTORS)
        metrics_limit(per_client ? LIM_CLIENT_CONNECTIONS : LIM_MAX_CONNECTIONS);
    __atomic_add_fetch(&srv->conns_shed, 1, __ATOMIC_RELAXED);
}

/* acceptor_shed's turn_away: a 503 "out of file descriptors", and closed. */
static void shed_descriptors(int fd, void *srv)
{
    shed(srv, fd, SHED_DESCRIPTORS);
}

/* A connection accepted: to libmicrohttpd once the guard admits it, else refused at once. */
static void take(int fd, const struct sockaddr_storage *ss, socklen_t len, void *ctx)
{
    struct server *srv = ctx;
    enum metrics_limit over = guard_admit(srv, fd, (const struct sockaddr *)ss);
    if (over != LIM_N) {
        shed(srv, fd, over == LIM_CLIENT_CONNECTIONS ? SHED_CLIENT : SHED_TOTAL);
        return;
    }
    /* libmicrohttpd takes the socket (and closes it if it fails). */
    if (MHD_add_connection(srv->mhd, fd, (const struct sockaddr *)ss, len) != MHD_YES) {
        guard_forget(srv, fd);
        acceptor_log_failure(&srv->front->acc, "http", errno);
    }
}

static const struct acceptor_ops accept_ops = {
    .front = "http", .take = take, .turn_away = shed_descriptors};

static void linger_close(struct front *f, unsigned i)
{
    close(f->linger[i].fd);
    f->linger[i] = f->linger[--f->nlinger];
}

/* Drop what a lingering socket has; false once it is done (end of stream, or an error). */
static bool linger_drain(struct front *f, int fd)
{
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(fd, f->scratch, SBXD_LINGER_READ, MSG_DONTWAIT);
        if (n > 0)
            continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
    return true; /* more to come: next round, after the listening socket's turn */
}

static void take_handed(struct front *f)
{
    int64_t deadline = time_mono_ns() + SBXD_LINGER_MS * 1000000LL;
    pthread_mutex_lock(&f->lock);
    for (unsigned i = 0; i < f->nhanded; i++) {
        if (f->nlinger < SBXD_LINGER_MAX)
            f->linger[f->nlinger++] = (struct lingering){f->handed[i], deadline};
        else
            close(f->handed[i]);
    }
    f->nhanded = 0;
    pthread_mutex_unlock(&f->lock);
}

static void *front_main(void *arg)
{
    struct server *srv = arg;
    struct front *f = srv->front;
    struct pollfd pfd[1 + SBXD_LISTEN_MAX + SBXD_LINGER_MAX];
    for (;;) {
        pthread_mutex_lock(&f->lock);
        bool stop = f->stop;
        pthread_mutex_unlock(&f->lock);
        if (stop)
            break;
        int64_t now = time_mono_ns();
        int64_t next = -1;
        for (unsigned i = 0; i < f->nlinger;) {
            if (now >= f->linger[i].deadline_ns) {
                linger_close(f, i);
                continue;
            }
            if (next < 0 || f->linger[i].deadline_ns < next)
                next = f->linger[i].deadline_ns;
            i++;
        }
        int64_t resume;
        bool paused = acceptor_paused(&f->acc, now, &resume);
        if (paused && (next < 0 || resume < next))
            next = resume;
        nfds_t n = 0;
        pfd[n++] = (struct pollfd){.fd = f->wake_fd, .events = POLLIN};
        for (unsigned i = 0; i < f->nlisten; i++)
            pfd[n++] = (struct pollfd){.fd = paused ? -1 : f->listen_fd[i], .events = POLLIN};
        for (unsigned i = 0; i < f->nlinger; i++)
            pfd[n++] = (struct pollfd){.fd = f->linger[i].fd, .events = POLLIN | POLLRDHUP};
        int timeout = next < 0 ? -1 : (int)((next - now + 999999) / 1000000);
        if (poll(pfd, n, timeout) < 0)
            continue;
        if (pfd[0].revents) {
            uint64_t v;
            if (read(f->wake_fd, &v, sizeof(v)) < 0) {
                /* reset by another read: nothing lost */
            }
            take_handed(f);
        }
        for (unsigned i = 0; i < f->nlisten; i++)
            if (pfd[1 + i].revents)
                acceptor_accept(&f->acc, f->listen_fd[i], &accept_ops, srv);
        /* The lingering sockets as they were polled (take_handed appends after them, and
         * linger_close moves the last one into a closed one's place: walk backwards). */
        unsigned first = 1 + f->nlisten;
        for (unsigned i = (unsigned)n - first; i-- > 0;)
            if (pfd[first + i].revents && !linger_drain(f, f->linger[i].fd))
                linger_close(f, i);
    }
    return NULL;
}

int front_start(struct server *srv, struct sbxd_err *err)
{
    struct front *f = srv->front;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_FRONT_STACK);
    int rc = pthread_create(&f->thread, &attr, front_main, srv);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, rc, "cannot start the accepting thread");
    pthread_mutex_lock(&f->lock);
    f->started = true;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static void close_listeners(struct front *f)
{
    for (unsigned i = 0; i < f->nlisten; i++)
        close(f->listen_fd[i]);
    f->nlisten = 0;
}

void front_stop(struct server *srv)
{
    struct front *f = srv->front;
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    bool started = f->started;
    f->stop = true;
    pthread_mutex_unlock(&f->lock);
    if (started) {
        wake(f);
        pthread_join(f->thread, NULL);
    }
    close_listeners(f);
}

void front_free(struct server *srv)
{
    struct front *f = srv->front;
    if (!f)
        return;
    for (unsigned i = 0; i < f->nhanded; i++)
        close(f->handed[i]);
    for (unsigned i = 0; i < f->nlinger; i++)
        close(f->linger[i].fd);
    close_listeners(f);
    if (f->wake_fd >= 0)
        close(f->wake_fd);
    acceptor_free(&f->acc);
    pthread_mutex_destroy(&f->lock);
    free(f->scratch);
    free(f);
    srv->front = NULL;
}
