/*
 * jupyter.h - sbxd as the client of one Jupyter kernel: the messaging protocol (v5.3) over
 * ZeroMQ (libzmq), every message signed and checked with HMAC-SHA256 (libsodium) under a key
 * made for that kernel alone.
 *
 * The kernel binds its sockets on loopback TCP ports that sbxd chose (jp_pick_ports) and
 * wrote, with the key, into the connection file it hands the kernel (context.c). sbxd
 * connects a DEALER to each of shell, control and stdin, and a SUB (every topic) to iopub.
 * A message whose signature does not match is dropped and counted, never parsed: a process
 * in the sandbox that reaches a port learns nothing from it and can make sbxd believe
 * nothing, without the key.
 *
 * A jp_conn is used by one thread at a time (sbxd hands it from the request that starts a
 * kernel to the ones that run code in it), except for jp_send on the control channel, which
 * any thread may call (an interrupt from another request).
 */
#ifndef SBXD_JUPYTER_H
#define SBXD_JUPYTER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/err.h"

enum jp_channel { JP_SHELL, JP_IOPUB, JP_STDIN, JP_CONTROL };

struct jp_ports {
    int shell, iopub, stdin_, control, hb;
};

/* The key: 32 random bytes as 64 hex digits. */
#define JP_KEY_LEN 64

/* Free loopback ports for a kernel's five sockets, and a new key. -1 with err. */
int jp_prepare(struct jp_ports *ports, char key[JP_KEY_LEN + 1], struct sbxd_err *err);

/* The connection file (JSON) for those ports and key: a string to free, or NULL. */
char *jp_connection_file(const struct jp_ports *ports, const char *key, const char *kernel_name);

struct jp_conn;

/* Connect to a kernel. NULL with err. */
struct jp_conn *jp_open(const struct jp_ports *ports, const char *key, struct sbxd_err *err);
/* One more holder of k; jp_close gives a hold back, and the last one closes the sockets (on
 * the thread that calls it: one that may use them). */
void jp_hold(struct jp_conn *k);
void jp_close(struct jp_conn *k);

/* Send a request of msg_type on a channel (not iopub) with content, a JSON object's text
 * (NULL: {}); its msg_id goes to id (at least 48 bytes). -1 with err when the socket takes
 * nothing (the kernel's queue is full). */
int jp_send(struct jp_conn *k, enum jp_channel ch, const char *msg_type, const char *content,
            char *id, struct sbxd_err *err);

/* A message from the kernel: one cJSON tree per part. */
struct jp_msg {
    enum jp_channel channel;
    cJSON *header, *parent, *content;
    const char *type;      /* header.msg_type ("" when missing) */
    const char *parent_id; /* parent_header.msg_id ("" when none) */
};

/* The next message on shell, iopub or stdin: waits up to timeout_ms (-1: no limit). 1: *m
 * (jp_msg_free it); 0: none within the wait. Messages that are malformed or wrongly signed
 * are dropped (jp_dropped counts them). */
int jp_recv(struct jp_conn *k, int timeout_ms, struct jp_msg *m);
void jp_msg_free(struct jp_msg *m);

/* Messages dropped for a bad signature or form, since jp_open. */
uint64_t jp_dropped(const struct jp_conn *k);

/* The library's shared context ends (at shutdown, once every jp_conn is closed). */
void jp_shutdown(void);

#endif
