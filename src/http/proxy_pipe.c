/*
 * proxy_pipe.c - an upgraded proxied connection (a WebSocket behind /proxy/{port}/): bytes
 * both ways between the client's socket and the upstream's, on a thread of its own, each
 * direction through one buffer (a side that does not read stops the other being read:
 * sbxd's memory stays flat). Ends when either side closes (the other is told by a
 * shutdown), when both are idle for --idle-timeout-ms, or when sbxd stops.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy_internal.h"
#include "sbxd/sandbox.h"
#include "sbxd/timeutil.h"

struct pipe_dir {
    int from, to;
    char buf[PROXY_BUF];
    size_t len, off;
    bool eof; /* from closed: to is shut down for writing once the buffer is out */
    bool shut;
};

struct proxy_pipe {
    struct server *srv;
    struct MHD_UpgradeResponseHandle *urh;
    uint16_t port;
    int client, upstream;
    struct pipe_dir up, down; /* client -> upstream, upstream -> client */
};

/* Move what can move in d without blocking. -1 when its destination failed. */
static int pump(struct pipe_dir *d, short rev_from, short rev_to)
{
    if (d->len == d->off && !d->eof && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t k = recv(d->from, d->buf, sizeof(d->buf), MSG_DONTWAIT);
        if (k > 0) {
            d->len = (size_t)k;
            d->off = 0;
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
            d->eof = true;
        }
    }
    if (d->off < d->len && (rev_to & POLLOUT)) {
        ssize_t k = send(d->to, d->buf + d->off, d->len - d->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (k > 0)
            d->off += (size_t)k;
        if (d->off == d->len)
            d->off = d->len = 0;
    }
    if (d->eof && d->len == d->off && !d->shut) {
        shutdown(d->to, SHUT_WR);
        d->shut = true;
    }
    return 0;
}

static void *pipe_main(void *arg)
{
    struct proxy_pipe *p = arg;
    int64_t idle_ns = (int64_t)p->srv->cfg->idle_timeout_ms * 1000000;
    int64_t last = time_mono_ns();
    while (!(p->up.shut && p->down.shut)) {
        struct pollfd f[2] = {{.fd = p->client}, {.fd = p->upstream}};
        /* Read a side only when its buffer is empty; wait to write only when one is full. */
        if (p->up.len == 0 && !p->up.eof)
            f[0].events |= POLLIN;
        if (p->down.len == 0 && !p->down.eof)
            f[1].events |= POLLIN;
        if (p->up.len)
            f[1].events |= POLLOUT;
        if (p->down.len)
            f[0].events |= POLLOUT;
        int k = poll(f, 2, 250);
        if (k < 0 && errno != EINTR)
            break;
        if (sandbox_draining(p->srv->sb))
            break;
        if (k <= 0) {
            if (time_mono_ns() - last > idle_ns)
                break;
            continue;
        }
        last = time_mono_ns();
        if (pump(&p->up, f[0].revents, f[1].revents) < 0 ||
            pump(&p->down, f[1].revents, f[0].revents) < 0)
            break;
        /* A side that hung up with nothing more to read: the pipe is over. */
        if (((f[0].revents & POLLERR) || (f[1].revents & POLLERR)))
            break;
    }
    close(p->upstream);
    MHD_upgrade_action(p->urh, MHD_UPGRADE_ACTION_CLOSE);
    proxy_conn_put(p->port);
    server_stream_release(p->srv);
    free(p);
    return NULL;
}

static void preload(struct pipe_dir *d, const char *data, size_t n)
{
    if (n > sizeof(d->buf))
        n = sizeof(d->buf);
    memcpy(d->buf, data, n);
    d->len = n;
}

int proxy_pipe_start(struct server *srv, int client, struct MHD_UpgradeResponseHandle *urh,
                     int upstream, const char *to_upstream, size_t nup, const char *to_client,
                     size_t ndown, uint16_t port)
{
    struct proxy_pipe *p = calloc(1, sizeof(*p));
    if (!p)
        return -1;
    p->srv = srv;
    p->urh = urh;
    p->port = port;
    p->client = client;
    p->upstream = upstream;
    p->up = (struct pipe_dir){.from = client, .to = upstream};
    p->down = (struct pipe_dir){.from = upstream, .to = client};
    preload(&p->up, to_upstream, nup);
    preload(&p->down, to_client, ndown);
    server_stream_hold(srv);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, SBXD_THREAD_STACK);
    pthread_t t;
    int e = pthread_create(&t, &a, pipe_main, p);
    pthread_attr_destroy(&a);
    if (e) {
        server_stream_release(srv);
        free(p);
        return -1;
    }
    return 0;
}
