/*
 * acceptor.h - what the accept threads of sbxd's listeners (http/accept.c, grpc/h2.c)
 * share: the listening socket's set-up, the one accept loop (acceptor_accept), a reserve
 * descriptor, given up to take a connection and turn it away when sbxd is
 * out of descriptors (its client learns at once instead of waiting in the backlog, and the
 * accept does not fail again and again), and a log of accept failures at most once a second.
 */
#ifndef SBXD_ACCEPTOR_H
#define SBXD_ACCEPTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct acceptor_state {
    int reserve_fd;    /* -1 until acceptor_init */
    int64_t logged_ns; /* the last accept failure logged */
    unsigned not_logged;
    int64_t paused_until_ns; /* accepting pauses until then (no memory for a connection) */
};

/* A listening socket (close-on-exec, non-blocking, SO_REUSEADDR; an IPv6 one takes IPv6
 * only) bound to addr; its port into *port. The descriptor, or -1 with errno. */
int acceptor_listen(const struct sockaddr_storage *addr, socklen_t len, int backlog,
                    uint16_t *port);

/* Take the reserve descriptor: 0, or -1 with errno. */
int acceptor_init(struct acceptor_state *a);
void acceptor_free(struct acceptor_state *a);

/* Log an accept failure (errno e) of the front ("http", "grpc"): one line a second at
 * most, with how many were not logged since the last. */
void acceptor_log_failure(struct acceptor_state *a, const char *front, int e);

/* Out of descriptors: give up the reserve, take the next connection on listen_fd with it and
 * hand it to turn_away (which answers it if it can, and closes it), take the reserve back.
 * false: nothing to take, or the reserve could not be taken back. */
bool acceptor_shed(struct acceptor_state *a, int listen_fd, void (*turn_away)(int fd, void *ctx),
                   void *ctx);

/* What an accept that failed with errno e means for the accept loop: */
enum acceptor_next {
    ACCEPT_DRAINED, /* the backlog is empty (EAGAIN): wait for the next */
    ACCEPT_AGAIN,   /* a passing failure, or a connection shed for want of descriptors */
    ACCEPT_PAUSE,   /* no memory, no descriptor to shed with: pause (connections wait in the
                     * backlog) rather than retry what cannot succeed */
};
/* Logs what deserves it (acceptor_log_failure) and sheds with the reserve when out of
 * descriptors (acceptor_shed). */
enum acceptor_next acceptor_failed(struct acceptor_state *a, const char *front, int listen_fd,
                                   int e, void (*turn_away)(int fd, void *ctx), void *ctx);

/* What a front does with what its listener accepts. */
struct acceptor_ops {
    const char *front; /* "http", "grpc": the log's name */
    /* A connection accepted (close-on-exec, non-blocking, TCP_NODELAY): the front owns fd. */
    void (*take)(int fd, const struct sockaddr_storage *ss, socklen_t len, void *ctx);
    /* acceptor_shed's turn_away: answer fd if the front can, and close it. */
    void (*turn_away)(int fd, void *ctx);
};

/* Accept what listen_fd has (a batch at most, then the caller polls its other descriptors
 * again), handing each connection to ops->take; a failure is handled as acceptor_failed says,
 * and a pause sets a->paused_until_ns. */
void acceptor_accept(struct acceptor_state *a, int listen_fd, const struct acceptor_ops *ops,
                     void *ctx);
/* Whether accepting is paused now; *until_ns gets the pause's end (untouched when not). */
bool acceptor_paused(const struct acceptor_state *a, int64_t now, int64_t *until_ns);

#endif
