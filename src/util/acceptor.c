/*
 * acceptor.c - the listeners' shared pieces (acceptor.h): one accept loop for every front.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sbxd/acceptor.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"

int acceptor_init(struct acceptor_state *a)
{
    a->logged_ns = 0;
    a->not_logged = 0;
    a->paused_until_ns = 0;
    a->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return a->reserve_fd < 0 ? -1 : 0;
}

void acceptor_free(struct acceptor_state *a)
{
    if (a->reserve_fd >= 0)
        close(a->reserve_fd);
    a->reserve_fd = -1;
}

void acceptor_log_failure(struct acceptor_state *a, const char *front, int e)
{
    int64_t now = time_mono_ns();
    if (a->logged_ns && now - a->logged_ns < 1000000000LL) {
        a->not_logged++;
        return;
    }
    LOG_EVENT("warn", front, LOG_S("message", "accept failed"), LOG_S("error", strerror(e)),
              LOG_I("not_logged", a->not_logged));
    a->logged_ns = now;
    a->not_logged = 0;
}

enum acceptor_next acceptor_failed(struct acceptor_state *a, const char *front, int listen_fd,
                                   int e, void (*turn_away)(int fd, void *ctx), void *ctx)
{
    if (e == EAGAIN || e == EWOULDBLOCK)
        return ACCEPT_DRAINED;
    if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM)
        return ACCEPT_AGAIN; /* that connection's own trouble */
    acceptor_log_failure(a, front, e);
    if ((e == EMFILE || e == ENFILE) && acceptor_shed(a, listen_fd, turn_away, ctx))
        return ACCEPT_AGAIN;
    return ACCEPT_PAUSE;
}

bool acceptor_shed(struct acceptor_state *a, int listen_fd, void (*turn_away)(int fd, void *ctx),
                   void *ctx)
{
    if (a->reserve_fd < 0)
        a->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (a->reserve_fd < 0)
        return false;
    close(a->reserve_fd);
    a->reserve_fd = -1;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0)
        turn_away(fd, ctx);
    a->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0 && a->reserve_fd >= 0;
}

/* Connections accepted in a row before the front looks at its other descriptors again. */
#define ACCEPT_BATCH 64
/* How long accepting pauses when the kernel has no memory for a connection. */
#define ACCEPT_PAUSE_MS 100

int acceptor_listen(const struct sockaddr_storage *addr, socklen_t len, int backlog, uint16_t *port)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->ss_family == AF_INET6)
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)addr, len) < 0 || listen(fd, backlog) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    *port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

void acceptor_accept(struct acceptor_state *a, int listen_fd, const struct acceptor_ops *ops,
                     void *ctx)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            enum acceptor_next next =
                acceptor_failed(a, ops->front, listen_fd, errno, ops->turn_away, ctx);
            if (next == ACCEPT_DRAINED)
                return;
            if (next == ACCEPT_AGAIN)
                continue;
            a->paused_until_ns = time_mono_ns() + ACCEPT_PAUSE_MS * 1000000LL;
            return;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ops->take(fd, &ss, len, ctx);
    }
}

bool acceptor_paused(const struct acceptor_state *a, int64_t now, int64_t *until_ns)
{
    if (a->paused_until_ns <= now)
        return false;
    *until_ns = a->paused_until_ns;
    return true;
}
