/*
 * grpc_internal.h - what the gRPC front's modules share; nothing outside src/grpc includes it.
 *
 * h2.c is the transport: the listener, one thread per HTTP/2 connection driving an nghttp2
 * session, gRPC's length-prefixed framing, deadlines (grpc-timeout), cancellation, flow
 * control and trailers. Every call (one RPC on one stream) runs its method's handler on a
 * thread of its own, so a handler may block for the life of a command: it reads its one
 * request message, sends zero or more response messages, and ends the call with
 * grpc_call_finish(). process.c (process.v1.ProcessService) and health.c (grpc.health.v1)
 * are the services.
 */
#ifndef SBXD_GRPC_INTERNAL_H
#define SBXD_GRPC_INTERNAL_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/config.h"
#include "sbxd/err.h"
#include "sbxd/exec_service.h"
#include "sbxd/jsonw.h"
#include "sbxd/sandbox.h"

/* The status codes of gRPC (its doc/statuscodes.md). */
enum grpc_code {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_ALREADY_EXISTS = 6,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_ABORTED = 10,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16,
};

/* The code's name as gRPC spells it ("DEADLINE_EXCEEDED"), for logs and metrics. */
const char *grpc_code_name(enum grpc_code code);

/* sbxd's error kinds as gRPC codes (SBXD_E_BUSY: RESOURCE_EXHAUSTED, ...; SBXD_E_NONE, which
 * is no error, UNKNOWN). */
enum grpc_code grpc_code_of(enum sbxd_errkind kind);

/* Why a call no longer has a client to answer (grpc_call_cancelled). */
enum grpc_cancel {
    GRPC_LIVE = 0,     /* not cancelled */
    GRPC_RESET,        /* the client reset the stream (RST_STREAM: a cancelled RPC) */
    GRPC_DEADLINE,     /* the client's deadline (grpc-timeout) passed */
    GRPC_DISCONNECTED, /* the connection was lost, or sbxd is stopping */
};

struct grpc_call;

/* A method served: its HTTP/2 :path ("/process.v1.ProcessService/Execute") and its handler,
 * which runs on a thread of its own and ends the call with grpc_call_finish() exactly once.
 * server_streaming: the method answers with a stream of messages (Start, Watch); a unary
 * handler sends exactly one message before an OK finish. */
struct grpc_method {
    const char *path;
    void (*handler)(struct grpc_call *c);
    bool server_streaming;
};

/* The methods of each service (NULL-path terminated), for h2.c's dispatch. */
extern const struct grpc_method grpc_process_methods[];
extern const struct grpc_method grpc_health_methods[];

/* ---- what a handler has (all safe from the handler's thread) ---- */

/* The request message as it arrived (the bytes of its one gRPC frame, uncompressed): decode
 * it with the generated *__unpack. */
const uint8_t *grpc_call_message(const struct grpc_call *c, size_t *len);

/* When the client's deadline passes (CLOCK_MONOTONIC ns, timeutil.h's time_mono_ns), or 0
 * when it gave none. h2.c cancels the call (GRPC_DEADLINE) at that moment whatever the
 * handler does; a handler should also bound its command's timeout by it. */
int64_t grpc_call_deadline_ns(const struct grpc_call *c);

/* The client's address ("127.0.0.1:40312"), for the audit line. */
const char *grpc_call_peer(const struct grpc_call *c);

/* The sandbox's pieces: its exec service, and the configuration. */
struct exec_service *grpc_call_exec(const struct grpc_call *c);
const struct sbxd_config *grpc_call_config(const struct grpc_call *c);

/* The drain has begun (grpc_front_drain, or the sandbox's): health is NOT_SERVING, commands
 * UNAVAILABLE. */
bool grpc_call_draining(const struct grpc_call *c);
/* The sandbox's drain flag itself, for exec_admit.stop. */
const bool *grpc_call_drain_flag(const struct grpc_call *c);

/* A descriptor that hangs up (poll gives POLLHUP, as a closed socket's does) the moment the
 * call is cancelled, whatever the reason: pass it as exec_admit.client_fd and as
 * exec_service_start's cancel_fd, so that a cancelled call's wait ends and its command's
 * tree is killed. It is a socket (one end of a socketpair whose other end h2.c closes), so
 * the exec service's recv(MSG_PEEK) sees the end of stream too, as it would a client's.
 * Owned by the call. */
int grpc_call_cancel_fd(const struct grpc_call *c);

/* Whether, and why, the call was cancelled (GRPC_LIVE when not). */
enum grpc_cancel grpc_call_cancelled(const struct grpc_call *c);

/* Send one response message, framed here. Waits while GRPC_SEND_QUEUE_MAX bytes of earlier
 * messages still wait for the client's flow-control window (a client that stops reading
 * stops the sender, and through it the command: sbxd's memory stays flat), and ends that
 * wait when the call is cancelled. 0, or -1 once the call is cancelled (nothing more reaches
 * the client; the handler should clean up and finish). */
int grpc_call_send(struct grpc_call *c, const ProtobufCMessage *msg);
/* (-1 also when the call has finished, or when memory for the frame is lacking.) */

/* Add a trailing metadata entry (key in lower case, value printable ASCII) to the trailers
 * grpc_call_finish sends: sbxd's own "sbxd-*" details of a result. At most 16; a key of
 * 64 bytes or more, a grpc-* or -bin one, or a value of 256 bytes or more is left out. */
void grpc_call_trailer(struct grpc_call *c, const char *key, const char *value);

/* End the call: the trailers (grpc-status, grpc-message with fmt's text when not NULL, cut
 * at 1 KiB and percent-encoded as gRPC says, and those added). A call never answered gets a
 * Trailers-Only response. After this the handler must not touch c. Safe on a cancelled call
 * (nothing is sent). A handler that returns without it is finished INTERNAL. */
void grpc_call_finish(struct grpc_call *c, enum grpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The largest request message accepted (RESOURCE_EXHAUSTED beyond), and the most response
 * bytes queued per call before grpc_call_send waits. */
#define GRPC_MAX_MESSAGE    (4u * 1024 * 1024)
#define GRPC_SEND_QUEUE_MAX (256u * 1024)

#endif
