/*
 * bench_net.c - what the net rows of sbxd-bench need beside its HTTP client: an upstream for
 * the proxy to reach (sbxd-bench --upstream PORT, started by sbxd as a command, so that its
 * listener is a command user's), and a WebSocket client timing a terminal's echo.
 *
 * The upstream is plain and fast (a thread per connection, keep-alive): GET /small answers
 * two bytes; GET /big/N answers N bytes; PUT or POST reads a body (by Content-Length or
 * chunked) and answers its length. A benchmark fixture, not part of sbxd.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "bench_net.h"

/* ---- the upstream ---- */

struct up_conn {
    int fd;
    char buf[65536];
    size_t beg, end;
};

static int up_fill(struct up_conn *c)
{
    if (c->beg == c->end)
        c->beg = c->end = 0;
    if (c->end == sizeof(c->buf)) {
        memmove(c->buf, c->buf + c->beg, c->end - c->beg);
        c->end -= c->beg;
        c->beg = 0;
    }
    ssize_t k = recv(c->fd, c->buf + c->end, sizeof(c->buf) - c->end, 0);
    if (k <= 0)
        return -1;
    c->end += (size_t)k;
    return 0;
}

/* A line (CRLF-ended) into out; -1 at the end. */
static int up_line(struct up_conn *c, char *out, size_t len)
{
    for (;;) {
        char *nl = memchr(c->buf + c->beg, '\n', c->end - c->beg);
        if (nl) {
            size_t n = (size_t)(nl - (c->buf + c->beg));
            size_t m = n < len - 1 ? n : len - 1;
            memcpy(out, c->buf + c->beg, m);
            out[m] = '\0';
            if (m && out[m - 1] == '\r')
                out[m - 1] = '\0';
            c->beg += n + 1;
            return 0;
        }
        if (up_fill(c) < 0)
            return -1;
    }
}

/* Drop n body bytes. */
static int up_skip(struct up_conn *c, uint64_t n)
{
    while (n) {
        if (c->beg == c->end && up_fill(c) < 0)
            return -1;
        size_t k = c->end - c->beg;
        if (k > n)
            k = (size_t)n;
        c->beg += k;
        n -= k;
    }
    return 0;
}

static int up_send(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static void *up_main(void *arg)
{
    struct up_conn *c = arg;
    static char block[65536];
    char line[8192], method[16], path[4096], head[256];
    for (;;) {
        if (up_line(c, line, sizeof(line)) < 0 || sscanf(line, "%15s %4095s", method, path) != 2)
            break;
        uint64_t clen = 0;
        bool chunked = false, close_after = false;
        while (up_line(c, line, sizeof(line)) == 0 && line[0]) {
            if (strncasecmp(line, "Content-Length:", 15) == 0)
                clen = strtoull(line + 15, NULL, 10);
            else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 &&
                     strcasestr(line, "chunked"))
                chunked = true;
            else if (strncasecmp(line, "Connection:", 11) == 0 && strcasestr(line, "close"))
                close_after = true;
        }
        uint64_t got = 0;
        if (chunked) {
            for (;;) {
                if (up_line(c, line, sizeof(line)) < 0)
                    goto out;
                uint64_t n = strtoull(line, NULL, 16);
                if (n == 0) {
                    up_line(c, line, sizeof(line));
                    break;
                }
                if (up_skip(c, n) < 0 || up_line(c, line, sizeof(line)) < 0)
                    goto out;
                got += n;
            }
        } else if (clen && up_skip(c, clen) < 0) {
            break;
        } else {
            got = clen;
        }
        uint64_t size = 2;
        char small[32] = "ok";
        if (strcmp(method, "GET") != 0 || strncmp(path, "/big/", 5) != 0) {
            if (strcmp(method, "GET") != 0)
                snprintf(small, sizeof(small), "%llu", (unsigned long long)got);
            size = strlen(small);
        } else {
            size = strtoull(path + 5, NULL, 10);
        }
        int hn = snprintf(head, sizeof(head),
                          "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                          "Content-Length: %llu\r\n%s\r\n",
                          (unsigned long long)size, close_after ? "Connection: close\r\n" : "");
        if (up_send(c->fd, head, (size_t)hn) < 0)
            break;
        if (strncmp(path, "/big/", 5) == 0 && strcmp(method, "GET") == 0) {
            for (uint64_t left = size; left;) {
                size_t k = left < sizeof(block) ? (size_t)left : sizeof(block);
                if (up_send(c->fd, block, k) < 0)
                    goto out;
                left -= k;
            }
        } else if (up_send(c->fd, small, (size_t)size) < 0) {
            break;
        }
        if (close_after)
            break;
    }
out:
    close(c->fd);
    free(c);
    return NULL;
}

int bench_listen(int port, int backlog)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, backlog) < 0) {
        if (s >= 0)
            close(s);
        return -1;
    }
    return s;
}

int bench_accept(int s)
{
    for (;;) {
        int fd = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        if (errno != EINTR && errno != ECONNABORTED)
            return -1;
    }
}

int bench_upstream_serve(int port)
{
    int s = bench_listen(port, 1024);
    if (s < 0) {
        perror("sbxd-bench --upstream");
        return 1;
    }
    for (;;) {
        int fd = bench_accept(s);
        if (fd < 0)
            return 1;
        struct up_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, up_main, c) != 0) {
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
}

/* ---- a plain relay: what any proxy costs here ---- */

/* A byte relay, no HTTP at all: a thread per client connection, one upstream connection each,
 * poll() on both and read()/write() through 64 KiB. What it gets against the upstream directly
 * is the most any user-space proxy could get on this machine, which shares its cores between
 * the client, the proxy and the upstream. */
struct relay_conn {
    int fd, upstream_port;
};

static void *relay_main(void *arg)
{
    struct relay_conn rc = *(struct relay_conn *)arg;
    free(arg);
    int one = 1, up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)rc.upstream_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char *buf = malloc(65536);
    if (up >= 0 && buf && connect(up, (struct sockaddr *)&a, sizeof(a)) == 0) {
        setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct pollfd p[2] = {{.fd = rc.fd, .events = POLLIN}, {.fd = up, .events = POLLIN}};
        for (;;) {
            if (poll(p, 2, -1) < 0 && errno != EINTR)
                break;
            for (int i = 0; i < 2; i++) {
                if (!p[i].revents)
                    continue;
                ssize_t k = read(p[i].fd, buf, 65536);
                if (k <= 0 || up_send(p[1 - i].fd, buf, (size_t)k) < 0)
                    goto out;
            }
        }
    }
out:
    free(buf);
    if (up >= 0)
        close(up);
    close(rc.fd);
    return NULL;
}

int bench_relay_serve(int listen_fd, int upstream_port)
{
    for (;;) {
        int fd = bench_accept(listen_fd);
        if (fd < 0)
            return 1;
        struct relay_conn *c = malloc(sizeof(*c));
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!c || (c->fd = fd, c->upstream_port = upstream_port,
                   pthread_create(&t, &at, relay_main, c) != 0)) {
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
}

/* ---- a terminal's echo over its WebSocket ---- */

static double now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct ws_client {
    int fd;
    wslay_event_context_ptr ctx;
    char seen[256];
    size_t nseen;
};

static ssize_t c_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *ud)
{
    (void)flags;
    struct ws_client *c = ud;
    ssize_t k = recv(c->fd, buf, len, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    else if (k <= 0)
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return k > 0 ? k : -1;
}

static ssize_t c_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                      void *ud)
{
    (void)flags;
    struct ws_client *c = ud;
    ssize_t k = send(c->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    else if (k < 0)
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return k;
}

static int c_mask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *ud)
{
    (void)ctx;
    (void)ud;
    return getrandom(buf, len, 0) == (ssize_t)len ? 0 : -1;
}

static void c_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                  void *ud)
{
    (void)ctx;
    struct ws_client *c = ud;
    if (arg->opcode != WSLAY_BINARY_FRAME)
        return;
    for (size_t i = 0; i < arg->msg_length; i++) {
        if (c->nseen == sizeof(c->seen))
            c->nseen = 0;
        c->seen[c->nseen++] = (char)arg->msg[i];
    }
}

int bench_tty_echo(int port, const char *id, int n, double *lat, char *err, size_t errlen)
{
    struct ws_client c = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c.fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        snprintf(err, errlen, "connect: %s", strerror(errno));
        close(c.fd);
        return -1;
    }
    char req[512], head[4096];
    int k = snprintf(req, sizeof(req),
                     "GET /processes/%s/tty HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Key: c2J4ZC1iZW5jaC1rZXkwMQ==\r\n\r\n",
                     id, port);
    size_t hl = 0;
    if (send(c.fd, req, (size_t)k, MSG_NOSIGNAL) != k) {
        close(c.fd);
        snprintf(err, errlen, "cannot send the handshake");
        return -1;
    }
    /* The head, a byte at a time: what follows is frames. */
    while (hl < sizeof(head) - 1 && (hl < 4 || memcmp(head + hl - 4, "\r\n\r\n", 4) != 0)) {
        if (recv(c.fd, head + hl, 1, 0) != 1)
            break;
        hl++;
    }
    head[hl] = '\0';
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        snprintf(err, errlen, "the handshake was answered: %.80s", head);
        close(c.fd);
        return -1;
    }
    static const struct wslay_event_callbacks cb = {.recv_callback = c_recv,
                                                    .send_callback = c_send,
                                                    .genmask_callback = c_mask,
                                                    .on_msg_recv_callback = c_msg};
    wslay_event_context_client_init(&c.ctx, &cb, &c);
    int done = 0;
    for (int i = 0; i < n; i++) {
        /* A key the echo is told apart by: a letter of its own each time. */
        uint8_t key = (uint8_t)('a' + i % 26);
        c.nseen = 0;
        struct wslay_event_msg m = {WSLAY_BINARY_FRAME, &key, 1};
        double t0 = now_ms_();
        wslay_event_queue_msg(c.ctx, &m);
        bool echoed = false;
        while (!echoed) {
            if (wslay_event_send(c.ctx) != 0 || now_ms_() - t0 > 10000)
                goto out;
            struct pollfd p = {.fd = c.fd, .events = POLLIN};
            if (poll(&p, 1, 1000) < 0 || wslay_event_recv(c.ctx) != 0)
                goto out;
            echoed = memchr(c.seen, key, c.nseen) != NULL;
        }
        lat[done++] = now_ms_() - t0;
    }
out:
    wslay_event_context_free(c.ctx);
    close(c.fd);
    if (done < n)
        snprintf(err, errlen, "%d of %d keys echoed", done, n);
    return done;
}

/* ---- the same echo over POST stdin and the output stream ---- */

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One request on fd and its whole answer (by Content-Length) into buf; the status. */
static int roundtrip(int fd, const char *req, size_t n, char *buf, size_t cap)
{
    if (send(fd, req, n, MSG_NOSIGNAL) != (ssize_t)n)
        return -1;
    size_t got = 0;
    char *body = NULL;
    size_t want = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + got, cap - 1 - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
        buf[got] = '\0';
        if (!body && (body = strstr(buf, "\r\n\r\n"))) {
            body += 4;
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            want = cl ? strtoul(cl + 17, NULL, 10) : 0;
        }
        if (body && (size_t)(buf + got - body) >= want)
            return atoi(buf + 9);
        if (got >= cap - 1)
            return -1;
    }
}

int bench_stdin_echo(int port, const char *id, int n, double *lat, char *err, size_t errlen)
{
    char req[512], buf[65536];
    int fd = dial(port), st = -1, done = 0;
    int k = snprintf(req, sizeof(req), "GET /processes/%s HTTP/1.1\r\nHost: x\r\n\r\n", id);
    if (fd < 0 || (st = roundtrip(fd, req, (size_t)k, buf, sizeof(buf))) != 200) {
        snprintf(err, errlen, "GET /processes/%s: %d", id, st);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *e = strstr(buf, "\"output_end\":");
    unsigned long long since = e ? strtoull(e + 13, NULL, 10) : 0;
    int sfd = dial(port);
    k = snprintf(req, sizeof(req),
                 "GET /processes/%s/output?follow=true&since=%llu HTTP/1.1\r\nHost: x\r\n"
                 "Accept: application/x-ndjson\r\n\r\n",
                 id, since);
    if (sfd < 0 || send(sfd, req, (size_t)k, MSG_NOSIGNAL) != k) {
        snprintf(err, errlen, "cannot open the output stream");
        close(fd);
        if (sfd >= 0)
            close(sfd);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char key = (char)('a' + i % 26), pat[16];
        snprintf(pat, sizeof(pat), "\"data\":\"%c", key);
        k = snprintf(req, sizeof(req),
                     "POST /processes/%s/stdin HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n%c",
                     id, key);
        double t0 = now_ms_();
        if (roundtrip(fd, req, (size_t)k, buf, sizeof(buf)) != 200)
            break;
        size_t got = 0;
        bool echoed = false;
        while (!echoed && now_ms_() - t0 < 10000) {
            ssize_t r = recv(sfd, buf + got, sizeof(buf) - 1 - got, 0);
            if (r <= 0)
                break;
            got += (size_t)r;
            buf[got] = '\0';
            echoed = memmem(buf, got, pat, strlen(pat)) != NULL;
            if (got > sizeof(buf) / 2 && !echoed) {
                memmove(buf, buf + got - 64, 64);
                got = 64;
            }
        }
        if (!echoed)
            break;
        lat[done++] = now_ms_() - t0;
    }
    close(fd);
    close(sfd);
    if (done < n)
        snprintf(err, errlen, "%d of %d keys echoed", done, n);
    return done;
}
