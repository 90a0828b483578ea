/*
 * grpc_client.c - unary gRPC calls over nghttp2's client session (see grpc_client.h).
 *
 * The session does all of HTTP/2: the preface, SETTINGS and their acks, HPACK, flow control
 * (it sends WINDOW_UPDATE as DATA is read), stream state. This file moves its bytes through a
 * blocking socket (nghttp2_session_mem_send / mem_recv) and frames the one request message
 * as gRPC wants it: a flag byte (0: not compressed), its length in 4 big-endian bytes, the
 * protobuf bytes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "grpc_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

struct gclient {
    int fd;
    int io_timeout_s;
    nghttp2_session *s;
    char authority[300];
    char err[200]; /* set by a callback that failed */
    uint8_t *out;  /* the bytes of one flush */
    size_t out_len, out_cap;
    uint8_t *req; /* the framed request message of the call in progress */
    size_t req_len, req_off, req_cap;
    /* the response of the call in progress */
    int32_t stream;
    bool closed;
    uint32_t close_code;
    int http_status;
    int grpc_status; /* -1 until the trailers give it */
    char grpc_message[200];
    uint8_t *body;
    size_t body_len, body_cap;
};

__attribute__((format(printf, 3, 4))) static void seterr(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

/* Grows *buf to hold want bytes. 0, or -1 when out of memory. */
static int reserve(uint8_t **buf, size_t *cap, size_t want)
{
    if (want <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < want)
        n *= 2;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

static bool name_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

/* A small decimal header value (":status", "grpc-status"), or -1. */
static int small_int(const uint8_t *v, size_t len)
{
    if (len == 0 || len > 4)
        return -1;
    int n = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        n = n * 10 + (v[i] - '0');
    }
    return n;
}

/* Response headers and trailers alike: both are HEADERS frames on the call's stream. */
static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)s;
    (void)flags;
    struct gclient *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->hd.stream_id != c->stream)
        return 0;
    if (name_is(name, namelen, ":status"))
        c->http_status = small_int(value, valuelen);
    else if (name_is(name, namelen, "grpc-status"))
        c->grpc_status = small_int(value, valuelen);
    else if (name_is(name, namelen, "grpc-message"))
        seterr(c->grpc_message, sizeof c->grpc_message, "%.*s", (int)valuelen, (const char *)value);
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data,
                         size_t len, void *user)
{
    (void)s;
    (void)flags;
    struct gclient *c = user;
    if (stream != c->stream)
        return 0;
    if (reserve(&c->body, &c->body_cap, c->body_len + len) != 0) {
        seterr(c->err, sizeof c->err, "out of memory for the response");
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    memcpy(c->body + c->body_len, data, len);
    c->body_len += len;
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream, uint32_t code, void *user)
{
    (void)s;
    struct gclient *c = user;
    if (stream == c->stream) {
        c->closed = true;
        c->close_code = code;
    }
    return 0;
}

/* The request body: the framed message, then END_STREAM. */
static ssize_t read_request(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t len,
                            uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)s;
    (void)stream;
    (void)src;
    struct gclient *c = user;
    size_t n = c->req_len - c->req_off;
    if (n > len)
        n = len;
    memcpy(buf, c->req + c->req_off, n);
    c->req_off += n;
    if (c->req_off == c->req_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int send_all(struct gclient *c, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            seterr(err, errlen, "send: %s", strerror(errno));
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Everything the session has to send, in one write. 0, or -1 with err. */
static int flush(struct gclient *c, char *err, size_t errlen)
{
    c->out_len = 0;
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->s, &p);
        if (n < 0) {
            seterr(err, errlen, "nghttp2: %s", nghttp2_strerror((int)n));
            return -1;
        }
        if (n == 0)
            break;
        if (reserve(&c->out, &c->out_cap, c->out_len + (size_t)n) != 0) {
            seterr(err, errlen, "out of memory");
            return -1;
        }
        memcpy(c->out + c->out_len, p, (size_t)n);
        c->out_len += (size_t)n;
    }
    return c->out_len ? send_all(c, c->out, c->out_len, err, errlen) : 0;
}

/* Reads what the socket has and feeds it to the session. 0, or -1 with err. */
static int receive(struct gclient *c, char *err, size_t errlen)
{
    uint8_t buf[16384];
    ssize_t n;
    while ((n = recv(c->fd, buf, sizeof buf, 0)) < 0 && errno == EINTR) {
    }
    if (n == 0) {
        seterr(err, errlen, "connection closed by the server");
        return -1;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            seterr(err, errlen, "no response within %d s", c->io_timeout_s);
        else
            seterr(err, errlen, "recv: %s", strerror(errno));
        return -1;
    }
    ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
    if (r < 0) {
        seterr(err, errlen, "nghttp2: %s", c->err[0] ? c->err : nghttp2_strerror((int)r));
        return -1;
    }
    return 0;
}

struct gclient *gclient_connect(const struct sockaddr *addr, socklen_t addrlen, const char *src,
                                const char *authority, int io_timeout_s, char *err, size_t errlen)
{
    struct gclient *c = calloc(1, sizeof *c);
    if (!c) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    c->io_timeout_s = io_timeout_s;
    seterr(c->authority, sizeof c->authority, "%s", authority);
    c->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        seterr(err, errlen, "socket: %s", strerror(errno));
        free(c);
        return NULL;
    }
    int one = 1;
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {io_timeout_s, 0};
    (void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (src) {
        struct sockaddr_in sin = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, src, &sin.sin_addr) != 1 ||
            bind(c->fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
            seterr(err, errlen, "bind to %s: %s", src, strerror(errno));
            goto fail;
        }
    }
    int rc;
    while ((rc = connect(c->fd, addr, addrlen)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
        seterr(err, errlen, "connect %s: %s", authority, strerror(errno));
        goto fail;
    }
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0) {
        seterr(err, errlen, "out of memory");
        goto fail;
    }
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    rc = nghttp2_session_client_new(&c->s, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0) {
        seterr(err, errlen, "nghttp2: %s", nghttp2_strerror(rc));
        goto fail;
    }
    /* A gRPC client takes no pushed streams. */
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    if (nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, settings, 1) != 0 ||
        flush(c, err, errlen) != 0)
        goto fail;
    return c;
fail:
    gclient_close(c);
    return NULL;
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE                 \
    }

int gclient_call(struct gclient *c, const char *path, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, char *err,
                 size_t errlen)
{
    *resp = NULL;
    size_t mlen = protobuf_c_message_get_packed_size(req);
    if (reserve(&c->req, &c->req_cap, 5 + mlen) != 0) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    c->req[0] = 0; /* not compressed */
    c->req[1] = (uint8_t)(mlen >> 24);
    c->req[2] = (uint8_t)(mlen >> 16);
    c->req[3] = (uint8_t)(mlen >> 8);
    c->req[4] = (uint8_t)mlen;
    protobuf_c_message_pack(req, c->req + 5);
    c->req_len = 5 + mlen;
    c->req_off = 0;
    c->closed = false;
    c->close_code = 0;
    c->http_status = -1;
    c->grpc_status = -1;
    c->grpc_message[0] = '\0';
    c->body_len = 0;
    c->err[0] = '\0';

    const nghttp2_nv headers[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", path),
        NV(":authority", c->authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", "sbxd-bench"),
    };
    nghttp2_data_provider body = {.source = {.ptr = c}, .read_callback = read_request};
    int32_t stream = nghttp2_submit_request(c->s, NULL, headers, sizeof headers / sizeof headers[0],
                                            &body, NULL);
    if (stream < 0) {
        seterr(err, errlen, "nghttp2: %s", nghttp2_strerror(stream));
        return -1;
    }
    c->stream = stream;
    if (flush(c, err, errlen) != 0)
        return -1;
    while (!c->closed)
        if (receive(c, err, errlen) != 0 || flush(c, err, errlen) != 0)
            return -1;

    if (c->grpc_status < 0 && c->close_code != NGHTTP2_NO_ERROR) {
        seterr(err, errlen, "%s: stream reset (%s)", path, nghttp2_http2_strerror(c->close_code));
        return -1;
    }
    if (c->http_status != 200) {
        seterr(err, errlen, "%s: HTTP status %d", path, c->http_status);
        return -1;
    }
    if (c->grpc_status != 0) {
        if (c->grpc_status < 0)
            seterr(err, errlen, "%s: no grpc-status in the trailers", path);
        else
            seterr(err, errlen, "%s: grpc-status %d: %s", path, c->grpc_status, c->grpc_message);
        return -1;
    }
    size_t len = c->body_len >= 5 ? (size_t)c->body[1] << 24 | (size_t)c->body[2] << 16 |
                                        (size_t)c->body[3] << 8 | c->body[4]
                                  : 0;
    if (c->body_len < 5 || c->body[0] != 0 || 5 + len != c->body_len) {
        seterr(err, errlen, "%s: not one uncompressed message (%zu bytes of DATA)", path,
               c->body_len);
        return -1;
    }
    *resp = protobuf_c_message_unpack(resp_desc, NULL, len, c->body + 5);
    if (!*resp) {
        seterr(err, errlen, "%s: the response does not decode as %s", path, resp_desc->name);
        return -1;
    }
    return 0;
}

void gclient_close(struct gclient *c)
{
    if (!c)
        return;
    if (c->s) {
        char ignored[64];
        if (nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR) == 0)
            (void)flush(c, ignored, sizeof ignored);
        nghttp2_session_del(c->s);
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    free(c->req);
    free(c->body);
    free(c);
}
