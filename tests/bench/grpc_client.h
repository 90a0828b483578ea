/*
 * grpc_client.h - the benchmark's gRPC client: unary calls, one at a time, on one HTTP/2
 * connection without TLS (h2c, prior knowledge), as a gRPC client library makes them. The
 * HTTP/2 framing is nghttp2's client session; the messages are protobuf-c's. Blocking
 * socket, TCP_NODELAY; each call's frames (HEADERS and DATA, with any SETTINGS ack or
 * WINDOW_UPDATE owed) leave in one write.
 */
#ifndef SBXD_BENCH_GRPC_CLIENT_H
#define SBXD_BENCH_GRPC_CLIENT_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <sys/socket.h>

struct gclient;

/* Connect to addr (from src, a loopback address such as "127.0.0.2", when not NULL) and
 * send the connection preface. authority is the :authority of every call. NULL with err. */
struct gclient *gclient_connect(const struct sockaddr *addr, socklen_t addrlen, const char *src,
                                const char *authority, int io_timeout_s, char *err, size_t errlen);

/* One unary call: req to path ("/process.v1.ProcessService/Execute"); the one response
 * message, of type resp_desc, into *resp (free it with protobuf_c_message_free_unpacked).
 * 0 on an HTTP 200 with grpc-status 0 and exactly one message; -1 with err otherwise (the
 * grpc-status and grpc-message when the server gave them). */
int gclient_call(struct gclient *c, const char *path, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, char *err,
                 size_t errlen);

/* Send GOAWAY, close, free. NULL is fine. */
void gclient_close(struct gclient *c);

#endif
