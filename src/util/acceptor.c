#include <errno.h>
#include <fcntl.h>
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
