/*
 * jupyter_internal.h - sbxd as the client of one Jupyter kernel: the messaging protocol (v5.3) over
 * ZeroMQ (libzmq), every message signed and checked with HMAC-SHA256 (libsodium) under a key
 * made for that kernel alone.
 *
 * The kernel binds its sockets as Unix sockets (transport ipc) in a directory of its own that
 * sbxd made (kernel.c), under relative names, its working directory being that directory as
 * it starts: no TCP port (a port chosen by sbxd and bound by the kernel a moment later could
 * be taken first by a command), nothing in /proc/net/unix but those relative names, and a
 * directory no command can find or enter. sbxd connects a DEALER to each of shell, control
 * and stdin, and a SUB (every topic) to iopub, by the directory's absolute path.
 * A message whose signature does not match is dropped and counted, never parsed: a process
 * in the sandbox that reaches a port learns nothing from it and can make sbxd believe
 * nothing, without the key.
 *
 * A jp_conn is used by one thread at a time (sbxd hands it from the request that starts a
 * kernel to the ones that run code in it), except for jp_send on the control channel, which
 * any thread may call (an interrupt from another request).
 */
#ifndef SBXD_JUPYTER_INTERNAL_H
#define SBXD_JUPYTER_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/err.h"

enum jp_channel { JP_SHELL, JP_IOPUB, JP_STDIN, JP_CONTROL };

/* The key: 32 random bytes as 64 hex digits. */
#define JP_KEY_LEN 64

/* The name the kernel's sockets are bound under, relative to its directory: NAME-1 (shell),
 * -2 (iopub), -3 (stdin), -4 (control), -5 (heartbeat), as Jupyter's ipc transport names
 * them. */
#define JP_IPC_NAME "kernel"

/* A new key. -1 with err. */
int jp_new_key(char key[JP_KEY_LEN + 1], struct sbxd_err *err);

/* The connection file (JSON) for a kernel started in its directory, with that key: a string
 * to free, or NULL. */
char *jp_connection_file(const char *key, const char *kernel_name);

struct jp_conn;

/* Connect to the kernel whose sockets are in dir (absolute). Its messages are received up
 * to max_msg bytes each (a larger one drops the connection, which is then made again), and
 * at most SBXD_KERNEL_RCVHWM of iopub's wait in sbxd's memory (more wait in the kernel's).
 * NULL with err. */
struct jp_conn *jp_open(const char *dir, const char *key, int64_t max_msg, struct sbxd_err *err);
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
