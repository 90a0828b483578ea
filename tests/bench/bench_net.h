/*
 * bench_net.h - the net rows' fixtures (bench_net.c): an upstream server for the proxy, and
 * a terminal's keystroke-to-echo over its WebSocket and over POST stdin + the output stream.
 */
#ifndef SBXD_BENCH_NET_H
#define SBXD_BENCH_NET_H

#include <stddef.h>

/* A listening socket on 127.0.0.1:port (0: any free port), or -1. */
int bench_listen(int port, int backlog);

/* The next connection on listening socket s, with TCP_NODELAY; -1 when accept fails for
 * good. */
int bench_accept(int s);

/* Serve on 127.0.0.1:port until killed (sbxd-bench --upstream PORT). */
int bench_upstream_serve(int port);

/* Relay every connection accepted on listen_fd to 127.0.0.1:upstream_port, byte for byte,
 * until killed: the floor of what a proxy costs (the net rows' "plain relay"). */
int bench_relay_serve(int listen_fd, int upstream_port);

/* n keys to process id's terminal on sbxd's port, each timed until its echo comes back (ms
 * into lat): over GET /processes/ID/tty's WebSocket, or over POST /processes/ID/stdin and a
 * followed output stream. How many were timed; err says why when fewer than n. */
int bench_tty_echo(int port, const char *id, int n, double *lat, char *err, size_t errlen);
int bench_stdin_echo(int port, const char *id, int n, double *lat, char *err, size_t errlen);

#endif
