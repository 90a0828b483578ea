/*
 * fuzz_grpc - what the gRPC front (src/grpc) decodes from a client: its request messages
 * (protobuf-c's generated code for proto/process/v1 and grpc.health.v1) and the ProcessConfig
 * that becomes a command (exec_request_build, as process.c calls it), and HTTP/2 frames
 * (nghttp2's server session) carrying gRPC's length-prefixed messages.
 *
 * Input: one byte that picks the path, then the bytes.
 *   bit 0 clear: the bytes are one request message. Every request type is unpacked from
 *     them and freed; an ExecuteRequest's or StartRequest's config is built into an
 *     exec_request under a fixed policy (bit 1: the /processes policy with a pty, bit 2: a
 *     workspace of "/", bit 3: a timeout beyond the policy's maximum), and what it accepts
 *     must be exactly what was sent: every argv string whole (a NUL refused, never cut),
 *     valid UTF-8, each environment entry NAME=VALUE with its last value, a timeout within
 *     the policy.
 *   bit 0 set: the bytes are what a client sends on a connection, fed to an nghttp2 server
 *     session in pieces (the next byte of each piece says its length). Each stream's DATA is
 *     split into gRPC messages as h2.c does (a 5-byte prefix: the compressed flag and a
 *     32-bit length, refused past GRPC_MAX_MESSAGE); a whole message on a stream that ended
 *     is unpacked as its :path's request type and answered (headers, the reply, trailers),
 *     so that nghttp2_session_mem_send runs the response path too.
 */
#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "process/v1/process.pb-c.h"
#include "sbxd/request.h"
#include "sbxd/utf8.h"

#include "fuzz.h"

/* As src/grpc/grpc_internal.h (not included: it is the front's own). */
#define FUZZ_GRPC_MAX_MESSAGE (4u * 1024 * 1024)
/* What one stream may buffer here before it is refused: the fuzzer's inputs are small, so a
 * smaller bound than the front's finds the same paths with less memory. */
#define FUZZ_STREAM_MAX (256u * 1024)

/* ---- (a) request messages ------------------------------------------------------------ */

static bool is_utf8(const char *s)
{
    size_t n = strlen(s);
    return utf8_valid((const uint8_t *)s, n) == n;
}

/* The environment entry name=value is in envp. */
static bool env_has(char **envp, const uint8_t *name, size_t nlen, const uint8_t *value,
                    size_t vlen)
{
    for (size_t i = 0; envp[i]; i++)
        if (strlen(envp[i]) == nlen + 1 + vlen && (nlen == 0 || memcmp(envp[i], name, nlen) == 0) &&
            envp[i][nlen] == '=' && (vlen == 0 || memcmp(envp[i] + nlen + 1, value, vlen) == 0))
            return true;
    return false;
}

static bool same_bytes(const ProtobufCBinaryData *a, const ProtobufCBinaryData *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* The last entry of the map named as entry i (a protobuf map: the last wins). */
static bool last_of_name(const Process__V1__ProcessConfig *pc, size_t i)
{
    for (size_t j = i + 1; j < pc->n_env_vars; j++)
        if (same_bytes(&pc->env_vars[j]->key, &pc->env_vars[i]->key))
            return false;
    return true;
}

/* A ProcessConfig as process.c's build_request turns it into a request. */
static void build(const Process__V1__ProcessConfig *pc, uint8_t sel)
{
    struct request_policy pol;
    fuzz_policy(sel, &pol);
    size_t argc = pc ? pc->n_command : 0;
    size_t nenv = pc ? pc->n_env_vars : 0;
    struct exec_bytes *v = calloc(argc + 2 * nenv + 1, sizeof(*v));
    check(v != NULL);
    struct exec_bytes *names = v + argc, *values = names + nenv, cwd = {"", 0};
    bool has_nul = false;
    for (size_t i = 0; i < argc; i++) {
        v[i] = (struct exec_bytes){pc->command[i].data, pc->command[i].len};
        has_nul |= pc->command[i].len && memchr(pc->command[i].data, 0, pc->command[i].len);
    }
    for (size_t i = 0; i < nenv; i++) {
        const Process__V1__ProcessConfigEnvVar *e = pc->env_vars[i];
        names[i] = (struct exec_bytes){e->key.data, e->key.len};
        values[i] = (struct exec_bytes){e->value.data, e->value.len};
        /* (An entry that a later one of the same name replaces is never used.) */
        if (last_of_name(pc, i))
            has_nul |= (e->key.len && memchr(e->key.data, 0, e->key.len)) ||
                       (e->value.len && memchr(e->value.data, 0, e->value.len));
    }
    if (pc) {
        cwd = (struct exec_bytes){pc->cwd.data, pc->cwd.len};
        has_nul |= pc->cwd.len && memchr(pc->cwd.data, 0, pc->cwd.len);
    }
    uint64_t timeout = sel & 8 ? UINT64_MAX : 0;

    struct exec_request req;
    struct sbxd_err err = {0};
    if (exec_request_build(&pol, v, argc, names, values, nenv, &cwd, timeout, &req, &err) == 0) {
        check(!has_nul); /* a NUL is refused, never cut */
        check(req.argc == argc && argc >= 1);
        check(req.argv[argc] == NULL);
        for (size_t i = 0; i < argc; i++) {
            check(strlen(req.argv[i]) == pc->command[i].len);
            check(pc->command[i].len == 0 ||
                  memcmp(req.argv[i], pc->command[i].data, pc->command[i].len) == 0);
            check(is_utf8(req.argv[i]));
        }
        check(req.argv[0][0] != '\0');
        for (size_t i = 0; req.envp[i]; i++) {
            check(strchr(req.envp[i], '=') != NULL && req.envp[i][0] != '=');
            check(is_utf8(req.envp[i]));
        }
        for (size_t i = 0; i < nenv; i++)
            if (last_of_name(pc, i))
                check(
                    env_has(req.envp, names[i].data, names[i].len, values[i].data, values[i].len));
        check(req.cwd != NULL && is_utf8(req.cwd));
        check(req.timeout_ms >= 1 && req.timeout_ms <= pol.max_timeout_ms);
        if (!timeout)
            check(req.timeout_ms == pol.default_timeout_ms);
        check(!req.has_stdin && req.stdin_data == NULL);
        char text[64];
        exec_request_text(&req, text, sizeof(text));
        check(strlen(text) < sizeof(text));
        exec_request_free(&req);
    } else {
        check(err.kind != SBXD_E_NONE && memchr(err.msg, '\0', sizeof(err.msg)) && err.msg[0]);
        check(req.argv == NULL && req.envp == NULL && req.cwd == NULL);
    }
    free(v);
}

/* Every request type of the front unpacked from the same bytes, then freed; the two that
 * carry a command built too. */
static void messages(const uint8_t *d, size_t n, uint8_t sel)
{
    Process__V1__ExecuteRequest *ex = process__v1__execute_request__unpack(NULL, n, d);
    if (ex) {
        build(ex->config, sel & ~1);
        process__v1__execute_request__free_unpacked(ex, NULL);
    }
    Process__V1__StartRequest *st = process__v1__start_request__unpack(NULL, n, d);
    if (st) {
        build(st->config, sel | 1);
        process__v1__start_request__free_unpacked(st, NULL);
    }
    Process__V1__WriteStdinRequest *ws = process__v1__write_stdin_request__unpack(NULL, n, d);
    if (ws) {
        if (ws->payload_case == PROCESS__V1__WRITE_STDIN_REQUEST__PAYLOAD_INPUT)
            check(ws->input.len == 0 || ws->input.data != NULL);
        else if (ws->payload_case == PROCESS__V1__WRITE_STDIN_REQUEST__PAYLOAD_EOF)
            check(ws->eof != NULL);
        process__v1__write_stdin_request__free_unpacked(ws, NULL);
    }
    Process__V1__SendSignalRequest *ss = process__v1__send_signal_request__unpack(NULL, n, d);
    if (ss)
        process__v1__send_signal_request__free_unpacked(ss, NULL);
    Process__V1__ResizeTTYRequest *rt = process__v1__resize_ttyrequest__unpack(NULL, n, d);
    if (rt)
        process__v1__resize_ttyrequest__free_unpacked(rt, NULL);
    Process__V1__ProcessConfig *pc = process__v1__process_config__unpack(NULL, n, d);
    if (pc)
        process__v1__process_config__free_unpacked(pc, NULL);
    Grpc__Health__V1__HealthCheckRequest *hc =
        grpc__health__v1__health_check_request__unpack(NULL, n, d);
    if (hc) {
        check(hc->service != NULL);
        grpc__health__v1__health_check_request__free_unpacked(hc, NULL);
    }
}

/* ---- (b) HTTP/2 frames ------------------------------------------------------------- */

#define MAX_STREAMS 8

struct stream {
    int32_t id;
    char path[128];
    bool grpc;    /* content-type application/grpc... */
    bool refused; /* answered already */
    uint8_t *buf; /* the stream's DATA so far */
    size_t len;
};

struct conn {
    nghttp2_session *s;
    struct stream st[MAX_STREAMS];
    uint8_t sel;
};

static struct stream *stream_of(struct conn *c, int32_t id, bool make)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c->st[i].id == id)
            return &c->st[i];
    if (!make)
        return NULL;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c->st[i].id == 0) {
            memset(&c->st[i], 0, sizeof(c->st[i]));
            c->st[i].id = id;
            return &c->st[i];
        }
    return NULL;
}

static void stream_drop(struct stream *st)
{
    free(st->buf);
    memset(st, 0, sizeof(*st));
}

/* The answer: a Trailers-Only response (HEADERS with :status, content-type, grpc-status and
 * grpc-message, END_STREAM), as the front finishes a call it never answered. */
static void answer(struct conn *c, struct stream *st, int code, const char *message)
{
    char status[12];
    snprintf(status, sizeof(status), "%d", code);
    const nghttp2_nv nv[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"grpc-status", (uint8_t *)status, 11, strlen(status), NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"grpc-message", (uint8_t *)message, 12, strlen(message), NGHTTP2_NV_FLAG_NONE},
    };
    (void)nghttp2_submit_response(c->s, st->id, nv, sizeof(nv) / sizeof(nv[0]), NULL);
    st->refused = true;
}

/* A stream that ended: its one message, split as gRPC frames it, decoded as its method's
 * request. */
static void stream_end(struct conn *c, struct stream *st)
{
    if (st->refused)
        return;
    if (!st->grpc) {
        answer(c, st, 2, "not gRPC");
        return;
    }
    if (st->len < 5) {
        answer(c, st, 13, "no message");
        return;
    }
    uint32_t n = (uint32_t)st->buf[1] << 24 | (uint32_t)st->buf[2] << 16 |
                 (uint32_t)st->buf[3] << 8 | st->buf[4];
    if (st->buf[0] != 0) { /* no grpc-encoding is accepted */
        answer(c, st, 12, "compression");
        return;
    }
    if (n > FUZZ_GRPC_MAX_MESSAGE) {
        answer(c, st, 8, "too large");
        return;
    }
    if (st->len - 5 != n) {
        answer(c, st, 13, st->len - 5 < n ? "truncated" : "more than one message");
        return;
    }
    const uint8_t *m = st->buf + 5;
    if (strcmp(st->path, "/process.v1.ProcessService/Execute") == 0 ||
        strcmp(st->path, "/process.v1.ProcessService/Start") == 0)
        messages(m, n, c->sel);
    else if (strncmp(st->path, "/grpc.health.v1.Health/", 23) == 0) {
        Grpc__Health__V1__HealthCheckRequest *hc =
            grpc__health__v1__health_check_request__unpack(NULL, n, m);
        if (hc)
            grpc__health__v1__health_check_request__free_unpacked(hc, NULL);
    } else {
        messages(m, n, c->sel);
    }
    answer(c, st, 0, "");
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    (void)s;
    struct conn *c = ud;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST &&
        !stream_of(c, f->hd.stream_id, true))
        return nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                         NGHTTP2_REFUSED_STREAM) == 0
                   ? 0
                   : NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)s;
    (void)flags;
    struct stream *st = stream_of(ud, f->hd.stream_id, false);
    if (!st)
        return 0;
    if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
        size_t k = valuelen < sizeof(st->path) - 1 ? valuelen : sizeof(st->path) - 1;
        memcpy(st->path, value, k);
        st->path[k] = '\0';
    } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0) {
        st->grpc = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                   (valuelen == 16 || value[16] == '+' || value[16] == ';');
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)s;
    (void)flags;
    struct conn *c = ud;
    struct stream *st = stream_of(c, id, false);
    if (!st || st->refused)
        return 0;
    /* The length prefix is looked at as soon as it is in: a claim past the limit is refused
     * before the bytes arrive. */
    if (st->len + len > FUZZ_STREAM_MAX) {
        answer(c, st, 8, "too large");
        return 0;
    }
    uint8_t *nb = realloc(st->buf, st->len + len + 1);
    check(nb != NULL);
    st->buf = nb;
    memcpy(st->buf + st->len, data, len);
    st->len += len;
    if (st->len >= 5) {
        uint32_t n = (uint32_t)st->buf[1] << 24 | (uint32_t)st->buf[2] << 16 |
                     (uint32_t)st->buf[3] << 8 | st->buf[4];
        if (n > FUZZ_GRPC_MAX_MESSAGE)
            answer(c, st, 8, "too large");
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    (void)s;
    struct conn *c = ud;
    if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct stream *st = stream_of(c, f->hd.stream_id, false);
        if (st)
            stream_end(c, st);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud)
{
    (void)s;
    (void)error_code;
    struct stream *st = stream_of(ud, id, false);
    if (st)
        stream_drop(st);
    return 0;
}

static void frames(const uint8_t *d, size_t n, uint8_t sel)
{
    nghttp2_session_callbacks *cb;
    check(nghttp2_session_callbacks_new(&cb) == 0);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    struct conn c = {.sel = sel};
    check(nghttp2_session_server_new(&c.s, cb, &c) == 0);
    nghttp2_session_callbacks_del(cb);
    /* The front's own SETTINGS: a few streams, a bounded window. */
    const nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
    };
    check(nghttp2_submit_settings(c.s, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) == 0);

    /* Pieces of the input, each as one read from the socket would bring it; after each
     * piece what the server would send is drained. */
    size_t off = 0;
    while (off < n) {
        size_t piece = n - off;
        if (sel & 0x10) {
            piece = (size_t)(d[off] % 64) + 1;
            off++;
            if (piece > n - off)
                piece = n - off;
        }
        if (piece == 0)
            break;
        ssize_t r = nghttp2_session_mem_recv(c.s, d + off, piece);
        if (r < 0)
            break; /* a connection error: the front sends GOAWAY and closes */
        check((size_t)r == piece);
        off += piece;
        const uint8_t *out;
        ssize_t k;
        while ((k = nghttp2_session_mem_send(c.s, &out)) > 0)
            ;
        if (k < 0)
            break;
        if (!nghttp2_session_want_read(c.s) && !nghttp2_session_want_write(c.s))
            break;
    }
    (void)nghttp2_session_terminate_session(c.s, NGHTTP2_NO_ERROR);
    const uint8_t *out;
    while (nghttp2_session_mem_send(c.s, &out) > 0)
        ;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (c.st[i].id)
            stream_drop(&c.st[i]);
    nghttp2_session_del(c.s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    if (sel & 1)
        frames(data + 1, size - 1, sel);
    else
        messages(data + 1, size - 1, sel);
    return 0;
}
