/*
 * ports.h - the TCP listeners in the sandbox, from /proc/net/tcp and /proc/net/tcp6 (sbxd
 * shares its network namespace with the commands), each with its address, whether only the
 * machine itself can reach it, the uid that owns its socket and, where a look at /proc finds
 * it, the process holding it. What GET /ports, MCP's list_ports and the proxy's checks read.
 *
 * The socket's uid comes from the kernel's table (the uid that made it), so it cannot be
 * forged by a command; the process is a best effort (a process may pass the socket on, or
 * end between two reads) and is only ever shown, never trusted for a decision.
 */
#ifndef SBXD_PORTS_H
#define SBXD_PORTS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/err.h"

struct port_listener {
    int family;                  /* AF_INET or AF_INET6 */
    char addr[INET6_ADDRSTRLEN]; /* as bound: "127.0.0.1", "0.0.0.0", "::1", "::" */
    uint16_t port;
    bool loopback;       /* bound to a loopback address: only the machine reaches it */
    uid_t uid;           /* the socket's owner */
    unsigned long inode; /* the socket's inode (0 once gone) */
    pid_t pid;           /* a process holding it, 0 when none was found */
    char cmdline[256];   /* that process's command line, spaces between arguments */
    /* ports_read's verdict: */
    char process_id[25]; /* the background process it descends from, or "" */
    bool own;            /* sbxd's own listener */
    bool proxy;          /* the proxy may reach it */
    char why[120];       /* why not, when !proxy */
};

/* Every TCP listener now, sorted by port then address (an array to free): *n of them.
 * with_procs: also look through /proc for the processes holding them (a directory read per
 * process, at most PORTS_MAX_PROCS of them); without, pid is 0. -1 with err when neither
 * table can be read. */
int ports_list(bool with_procs, struct port_listener **out, size_t *n, struct sbxd_err *err);

/* ports_list with the processes, each listener judged as the proxy would (ports_judge) and
 * matched to the background process its holder descends from. */
struct sandbox;
int ports_read(const struct sandbox *sb, struct port_listener **out, size_t *n,
               struct sbxd_err *err);

/* Whether the proxy may reach l: a command user's socket, not sbxd's own, bound where a
 * loopback connect reaches it. Sets l->proxy, and l->why when not. own_inodes: the sockets
 * sbxd holds (ports_own_inodes), sorted. */
void ports_judge(const struct sandbox *sb, struct port_listener *l, const unsigned long *own,
                 size_t nown);

/* Where the proxy connects for port: 127.0.0.1 or [::1], whichever a listener the proxy may
 * reach is bound to (itself or a wildcard). -1 with err: SBXD_E_NOT_FOUND when nothing
 * listens there, SBXD_E_DENIED naming why when only what the proxy may not reach does. */
int ports_target(const struct sandbox *sb, uint16_t port, struct sockaddr_storage *to,
                 socklen_t *len, struct sbxd_err *err);

/* After the proxy's connect on fd: that the socket which took it belongs to a command user
 * (see ports_peer_uid). -1 with err (SBXD_E_DENIED) otherwise. */
int ports_check_peer(const struct sandbox *sb, int fd, struct sbxd_err *err);

/* The listener as JSON members (inside an object the caller opened). */
struct jsonw;
void ports_write(struct jsonw *w, const struct port_listener *l);
/* "ports": [each of v as ports_write has it]. */
void ports_write_list(struct jsonw *w, const struct port_listener *v, size_t n);

/* A connection's far end as the kernel's table has it: the uid owning the socket that
 * accepted a connection made from local port `from` to loopback port `to`. -1 when not found
 * (the listener closed meanwhile), 1 when the connection is still half-open on the listener's
 * side (SYN_RECV: a full accept queue, TCP_DEFER_ACCEPT), owned by nobody yet but the
 * listener. The proxy's check that it reached a command user's server,
 * made after the connect so that a port changing hands between the look and the connect
 * cannot lead it elsewhere. */
int ports_peer_uid(int family, uint16_t from, uint16_t to, uid_t *uid);

/* The parent of pid (0 when unknown): to find which background process a listener's holder
 * descends from. */
pid_t ports_parent(pid_t pid);

/* The bounds of a look. */
#define PORTS_MAX_LISTENERS 4096
#define PORTS_MAX_PROCS     4096

#endif
