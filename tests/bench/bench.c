/*
 * sbxd-bench: starts sbxd, measures its latency, throughput, memory and
 * start-up time against a fork+exec floor taken in the same run, its gRPC
 * front against its REST API, its contexts (Python kernels against
 * jupyter_client on the same kernel), optionally another server speaking the
 * legacy API, and prints one table.
 *
 *   sbxd-bench --sbxd PATH [--vs URL] [--seconds N] [--quick] [--only grpc]
 *
 * The HTTP client is deliberately small: blocking TCP sockets with
 * TCP_NODELAY, HTTP/1.1 keep-alive, Content-Length or chunked bodies,
 * reconnect-and-retry-once when a reused connection was closed by the server.
 * The gRPC client (grpc_client.c) is nghttp2's client session with
 * protobuf-c's messages, as a gRPC library would send them.
 * Exit status: 0 when every request got a 200, 1 on errors, 2 on bad usage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "grpc/health/v1/health.pb-c.h"
#include "bench_gvisor.h"
#include "bench_net.h"
#include "grpc_client.h"
#include "process/v1/process.pb-c.h"

extern char **environ;

/* ------------------------------------------------------------------------ */
/* small utilities                                                          */

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !g_interrupted) {
    }
}

__attribute__((format(printf, 1, 2))) static void warnx_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sbxd-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

__attribute__((format(printf, 3, 4))) static void setmsg(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

/* Copies src into dst[n], truncating; always terminates (n > 0). */
static void copy_str(char *dst, size_t n, const char *src)
{
    size_t l = strlen(src);
    if (l >= n)
        l = n - 1;
    memcpy(dst, src, l);
    dst[l] = '\0';
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        warnx_("out of memory");
        exit(1);
    }
    return q;
}

/* Latency samples in milliseconds. */
typedef struct {
    double *v;
    size_t n, cap;
} samples;

static void samples_push(samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static void samples_append(samples *dst, const samples *src)
{
    for (size_t i = 0; i < src->n; i++)
        samples_push(dst, src->v[i]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void samples_sort(samples *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
}

/* Nearest-rank percentile of sorted samples; p in (0, 100]. */
static double pct(const samples *s, double p)
{
    if (s->n == 0)
        return 0.0;
    double rank = p / 100.0 * (double)s->n;
    size_t idx = (size_t)rank;
    if ((double)idx < rank)
        idx++; /* ceil */
    if (idx == 0)
        idx = 1;
    if (idx > s->n)
        idx = s->n;
    return s->v[idx - 1];
}

static void samples_free(samples *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* HTTP/1.1 client                                                          */

#define IO_TIMEOUT_S 30
#define MAX_HEAD     65536

typedef struct {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char hostport[300]; /* Host header */
    char prefix[256];   /* path prefix from the URL, without trailing '/' */
    char label[320];
} target;

typedef struct {
    const target *t;
    int fd;
    unsigned long reqs_on_fd; /* responses completed on this fd */
    int io_timeout_s;
    char *buf; /* read buffer: bytes [beg, end) are unread */
    size_t cap, beg, end;
    char *body; /* last response body */
    size_t body_len, body_cap;
    char *req; /* request scratch */
    size_t req_cap;
    char err[200];
    char mcp_session[64]; /* an Mcp-Session-Id answered on it, sent on every later request */
} conn;

static void conn_init(conn *c, const target *t, int io_timeout_s)
{
    memset(c, 0, sizeof *c);
    c->t = t;
    c->fd = -1;
    c->io_timeout_s = io_timeout_s;
    c->cap = 16384;
    c->buf = xrealloc(NULL, c->cap);
}

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->reqs_on_fd = 0;
    c->beg = c->end = 0;
}

static void conn_free(conn *c)
{
    conn_close(c);
    free(c->buf);
    free(c->body);
    free(c->req);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static int conn_connect(conn *c)
{
    conn_close(c);
    int fd = socket(c->t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        setmsg(c->err, sizeof c->err, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {c->io_timeout_s, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    for (;;) {
        if (connect(fd, (const struct sockaddr *)&c->t->addr, c->t->addrlen) == 0)
            break;
        if (errno == EINTR && !g_interrupted)
            continue;
        setmsg(c->err, sizeof c->err, "connect %s: %s", c->t->hostport, strerror(errno));
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->reqs_on_fd = 0;
    c->beg = c->end = 0;
    return 0;
}

/* Reads more bytes into the buffer. 1: got some, 0: EOF, -1: error. */
static int conn_fill(conn *c)
{
    if (c->beg == c->end) {
        c->beg = c->end = 0;
    } else if (c->end == c->cap) {
        if (c->beg > 0) {
            memmove(c->buf, c->buf + c->beg, c->end - c->beg);
            c->end -= c->beg;
            c->beg = 0;
        } else {
            c->cap *= 2;
            c->buf = xrealloc(c->buf, c->cap);
        }
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->end, c->cap - c->end, 0);
        if (n > 0) {
            c->end += (size_t)n;
            return 1;
        }
        if (n == 0) {
            setmsg(c->err, sizeof c->err, "connection closed by server");
            return 0;
        }
        if (errno == EINTR && !g_interrupted)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            setmsg(c->err, sizeof c->err, "no response within %d s", c->io_timeout_s);
        else
            setmsg(c->err, sizeof c->err, "recv: %s", strerror(errno));
        return -1;
    }
}

static void body_append(conn *c, const char *p, size_t n)
{
    if (c->body_len + n + 1 > c->body_cap) {
        size_t want = c->body_cap ? c->body_cap : 4096;
        while (want < c->body_len + n + 1)
            want *= 2;
        c->body = xrealloc(c->body, want);
        c->body_cap = want;
    }
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    c->body[c->body_len] = '\0';
}

/* Moves exactly n body bytes from the socket into c->body. */
static int conn_take(conn *c, size_t n)
{
    while (n > 0) {
        if (c->beg == c->end && conn_fill(c) != 1) {
            if (!c->err[0] || strstr(c->err, "closed"))
                setmsg(c->err, sizeof c->err, "connection closed in the middle of a body");
            return -1;
        }
        size_t avail = c->end - c->beg;
        size_t k = avail < n ? avail : n;
        body_append(c, c->buf + c->beg, k);
        c->beg += k;
        n -= k;
    }
    return 0;
}

/* Reads one CRLF-terminated line (for chunked framing) into out. */
static int conn_line(conn *c, char *out, size_t outsz)
{
    for (;;) {
        char *nl = memchr(c->buf + c->beg, '\n', c->end - c->beg);
        if (nl) {
            size_t len = (size_t)(nl - (c->buf + c->beg));
            size_t keep = len;
            if (keep > 0 && c->buf[c->beg + keep - 1] == '\r')
                keep--;
            if (keep >= outsz) {
                setmsg(c->err, sizeof c->err, "chunk line too long");
                return -1;
            }
            memcpy(out, c->buf + c->beg, keep);
            out[keep] = '\0';
            c->beg += len + 1;
            return 0;
        }
        if (c->end - c->beg > 4096) {
            setmsg(c->err, sizeof c->err, "chunk line too long");
            return -1;
        }
        if (conn_fill(c) != 1)
            return -1;
    }
}

static bool header_is(const char *line, size_t len, const char *name, const char **val,
                      size_t *vlen)
{
    size_t nl = strlen(name);
    if (len <= nl || line[nl] != ':' || strncasecmp(line, name, nl) != 0)
        return false;
    const char *v = line + nl + 1;
    const char *e = line + len;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *val = v;
    *vlen = (size_t)(e - v);
    return true;
}

static bool token_in(const char *v, size_t vlen, const char *tok)
{
    size_t tl = strlen(tok);
    for (size_t i = 0; i + tl <= vlen; i++)
        if (strncasecmp(v + i, tok, tl) == 0)
            return true;
    return false;
}

/*
 * Reads one response. Returns 0 with *status set, -1 on a transport or framing
 * error. *got_any tells whether any byte of the response arrived (a reused
 * connection closed before that is retried by the caller).
 */
static int read_response(conn *c, bool head_request, int *status, bool *got_any)
{
    *got_any = false;
    for (;;) { /* loops over 1xx interim responses */
        char *hend;
        for (;;) {
            hend = memmem(c->buf + c->beg, c->end - c->beg, "\r\n\r\n", 4);
            if (hend)
                break;
            if (c->end - c->beg > MAX_HEAD) {
                setmsg(c->err, sizeof c->err, "response head larger than %d bytes", MAX_HEAD);
                return -1;
            }
            if (c->end > c->beg)
                *got_any = true;
            if (conn_fill(c) != 1)
                return -1;
            *got_any = true;
        }
        const char *p = c->buf + c->beg;
        const char *stop = hend + 2; /* include the CRLF of the last header line */
        size_t head_len = (size_t)(hend + 4 - p);

        int minor = 0, code = 0;
        if (sscanf(p, "HTTP/1.%d %3d", &minor, &code) != 2 || code < 100 || code > 999) {
            setmsg(c->err, sizeof c->err, "malformed status line");
            return -1;
        }
        bool chunked = false, have_len = false;
        bool close_after = (minor == 0);
        unsigned long long clen = 0;

        const char *line = memchr(p, '\n', (size_t)(stop - p));
        line = line ? line + 1 : stop;
        while (line < stop) {
            const char *le = memchr(line, '\n', (size_t)(stop - line));
            if (!le)
                le = stop;
            size_t len = (size_t)(le - line);
            if (len > 0 && line[len - 1] == '\r')
                len--;
            const char *v;
            size_t vlen;
            if (header_is(line, len, "Mcp-Session-Id", &v, &vlen) && vlen < sizeof c->mcp_session) {
                memcpy(c->mcp_session, v, vlen);
                c->mcp_session[vlen] = '\0';
            }
            if (header_is(line, len, "Content-Length", &v, &vlen)) {
                char tmp[32];
                if (vlen == 0 || vlen >= sizeof tmp) {
                    setmsg(c->err, sizeof c->err, "bad Content-Length");
                    return -1;
                }
                memcpy(tmp, v, vlen);
                tmp[vlen] = '\0';
                char *endp;
                clen = strtoull(tmp, &endp, 10);
                if (*endp) {
                    setmsg(c->err, sizeof c->err, "bad Content-Length");
                    return -1;
                }
                have_len = true;
            } else if (header_is(line, len, "Transfer-Encoding", &v, &vlen)) {
                if (token_in(v, vlen, "chunked"))
                    chunked = true;
            } else if (header_is(line, len, "Connection", &v, &vlen)) {
                if (token_in(v, vlen, "close"))
                    close_after = true;
                else if (token_in(v, vlen, "keep-alive"))
                    close_after = false;
            }
            line = le + 1;
        }
        c->beg += head_len;

        if (code >= 100 && code < 200) /* 100 Continue & co.: no body, read on */
            continue;

        c->body_len = 0;
        body_append(c, "", 0);
        if (head_request || code == 204 || code == 304) {
            /* no body */
        } else if (chunked) {
            char ln[128];
            for (;;) {
                if (conn_line(c, ln, sizeof ln) != 0)
                    return -1;
                char *endp;
                unsigned long long n = strtoull(ln, &endp, 16);
                if (endp == ln) {
                    setmsg(c->err, sizeof c->err, "bad chunk size line");
                    return -1;
                }
                if (n == 0) {
                    do { /* trailers up to the empty line */
                        if (conn_line(c, ln, sizeof ln) != 0)
                            return -1;
                    } while (ln[0] != '\0');
                    break;
                }
                if (conn_take(c, (size_t)n) != 0)
                    return -1;
                if (conn_line(c, ln, sizeof ln) != 0)
                    return -1;
                if (ln[0] != '\0') {
                    setmsg(c->err, sizeof c->err, "chunk not followed by CRLF");
                    return -1;
                }
            }
        } else if (have_len) {
            if (conn_take(c, (size_t)clen) != 0)
                return -1;
        } else { /* body runs to EOF */
            for (;;) {
                if (c->end > c->beg) {
                    body_append(c, c->buf + c->beg, c->end - c->beg);
                    c->beg = c->end;
                }
                int r = conn_fill(c);
                if (r == 0)
                    break;
                if (r < 0)
                    return -1;
            }
            close_after = true;
        }
        *status = code;
        c->reqs_on_fd++;
        if (close_after)
            conn_close(c);
        return 0;
    }
}

static int send_all(conn *c, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR && !g_interrupted)
                continue;
            setmsg(c->err, sizeof c->err, "send: %s", strerror(errno));
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * One request/response on the connection (connecting if needed). A reused
 * keep-alive connection that fails before any response byte is reconnected
 * and the request retried once. Returns 0 with *status set, or -1 (c->err).
 */
static int http_do(conn *c, const char *method, const char *path, const char *body, int *status)
{
    size_t blen = body ? strlen(body) : 0;
    size_t need =
        strlen(method) + strlen(c->t->prefix) + strlen(path) + strlen(c->t->hostport) + blen + 256;
    if (need > c->req_cap) {
        c->req = xrealloc(c->req, need);
        c->req_cap = need;
    }
    int hl;
    char extra[96] = "";
    if (c->mcp_session[0])
        snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\n", c->mcp_session);
    if (body)
        hl = snprintf(c->req, c->req_cap,
                      "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd-bench\r\nAccept: */*\r\n"
                      "%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, c->t->prefix, path, c->t->hostport, extra, blen);
    else
        hl = snprintf(
            c->req, c->req_cap,
            "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd-bench\r\nAccept: */*\r\n\r\n", method,
            c->t->prefix, path, c->t->hostport);
    if (hl < 0 || (size_t)hl + blen >= c->req_cap) {
        setmsg(c->err, sizeof c->err, "request too large");
        return -1;
    }
    if (blen)
        memcpy(c->req + hl, body, blen);
    size_t total = (size_t)hl + blen;
    bool head = strcmp(method, "HEAD") == 0;

    for (int attempt = 0;; attempt++) {
        c->err[0] = '\0';
        if (c->fd < 0 && conn_connect(c) != 0)
            return -1;
        bool reused = c->reqs_on_fd > 0;
        bool got_any = false;
        if (send_all(c, c->req, total) == 0 && read_response(c, head, status, &got_any) == 0)
            return 0;
        conn_close(c);
        if (!reused || got_any || attempt > 0 || g_interrupted)
            return -1;
    }
}

/* ------------------------------------------------------------------------ */
/* file transfers                                                            */

#define XFER_CHUNK (1 << 20)
/* Rounds of the streamed-output row (NDJSON and GET of the same file, in turns). */
#define STREAM_ROUNDS 3

/* A fresh connection with a long I/O timeout, for one large transfer. 0, or -1 with err. */
static int conn_open(conn *c, const target *tg, char *err, size_t errlen)
{
    conn_init(c, tg, IO_TIMEOUT_S * 4);
    if (conn_connect(c) == 0)
        return 0;
    setmsg(err, errlen, "%s", c->err);
    conn_free(c);
    return -1;
}

/* RSS of a process sampled every 2 ms on a thread, while a transfer runs. */
typedef struct {
    pthread_t th;
    pid_t pid;
    volatile bool stop;
    long peak_kb;
} rss_sampler;

static long vmrss_kb(pid_t pid);

static void *rss_sample_main(void *arg)
{
    rss_sampler *s = arg;
    while (!s->stop) {
        long kb = vmrss_kb(s->pid);
        if (kb > s->peak_kb)
            s->peak_kb = kb;
        sleep_us(2000);
    }
    return NULL;
}

/* Send one request whose body is pre, `size` generated bytes, then post, with these headers
 * (each ending in CRLF) besides Host, User-Agent, Content-Length and Connection; read the
 * status line, then drain. Returns the status or -1. */
static int xfer_send_body(const target *tg, const char *method, const char *path,
                          const char *headers, const char *pre, size_t prel, const char *post,
                          size_t postl, uint64_t size, double *secs, char *err, size_t errlen)
{
    conn c;
    int status = -1;
    if (conn_open(&c, tg, err, errlen) != 0)
        return -1;
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd-bench\r\n%s"
                      "Content-Length: %" PRIu64 "\r\nConnection: close\r\n\r\n",
                      method, tg->prefix, path, tg->hostport, headers,
                      size + (uint64_t)prel + (uint64_t)postl);
    char *chunk = xrealloc(NULL, XFER_CHUNK);
    for (size_t i = 0; i < XFER_CHUNK; i++)
        chunk[i] = (char)(i * 131 + 7);
    double t0 = now_ms();
    bool ok = send_all(&c, head, (size_t)hl) == 0 && send_all(&c, pre, prel) == 0;
    for (uint64_t left = size; ok && left;) {
        size_t n = left < XFER_CHUNK ? (size_t)left : XFER_CHUNK;
        ok = send_all(&c, chunk, n) == 0;
        left -= n;
    }
    ok = ok && send_all(&c, post, postl) == 0;
    bool got_any = false;
    if (ok && read_response(&c, false, &status, &got_any) == 0)
        *secs = (now_ms() - t0) / 1e3;
    else {
        setmsg(err, errlen, "%s", c.err[0] ? c.err : "send failed");
        status = -1;
    }
    free(chunk);
    conn_free(&c);
    return status;
}

/* Send one request with a body of `size` generated bytes (raw, or as the multipart part
 * "file" named `name`), read the status line, then drain. Returns the status or -1. */
static int xfer_upload(const target *tg, const char *method, const char *path, bool multipart,
                       const char *name, uint64_t size, double *secs, char *err, size_t errlen)
{
    char pre[512] = "", post[64] = "";
    int prel = 0, postl = 0;
    if (multipart) {
        prel = snprintf(pre, sizeof pre,
                        "--sbxdbenchboundary\r\nContent-Disposition: form-data; name=\"file\"; "
                        "filename=\"%s\"\r\nContent-Type: application/octet-stream\r\n\r\n",
                        name);
        postl = snprintf(post, sizeof post, "\r\n--sbxdbenchboundary--\r\n");
    }
    const char *ct = multipart ? "Content-Type: multipart/form-data; boundary=sbxdbenchboundary\r\n"
                               : "Content-Type: application/octet-stream\r\n";
    return xfer_send_body(tg, method, path, ct, pre, (size_t)prel, post, (size_t)postl, size, secs,
                          err, errlen);
}

/* POST /upload as the agent-sandbox SDK's files.write(path, content) sends it in legacy mode
 * (requests' files={"file": (path, content)}): the whole body announced by Content-Length (no
 * chunks, no Expect: 100-continue), a boundary of 32 hex digits, and a part with no
 * Content-Type of its own. Returns the status or -1. */
static int xfer_upload_sdk(const target *tg, const char *name, uint64_t size, double *secs,
                           char *err, size_t errlen)
{
    static const char b[] = "5f0c7d1e9a2b4c6d8e0f1a2b3c4d5e6f";
    char pre[512], post[64], ct[160];
    int prel = snprintf(pre, sizeof pre,
                        "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                        "filename=\"%s\"\r\n\r\n",
                        b, name);
    int postl = snprintf(post, sizeof post, "\r\n--%s--\r\n", b);
    snprintf(ct, sizeof ct,
             "Accept-Encoding: gzip, deflate\r\nAccept: */*\r\n"
             "Content-Type: multipart/form-data; boundary=%s\r\n",
             b);
    return xfer_send_body(tg, "POST", "/upload", ct, pre, (size_t)prel, post, (size_t)postl, size,
                          secs, err, errlen);
}

/* PUT a text file of `size` bytes at path (lines of hex digits: text that JSON carries as it
 * is). Returns the status or -1. */
static int put_text(const target *tg, const char *path, uint64_t size, char *err, size_t errlen)
{
    conn c;
    int status = -1;
    if (conn_open(&c, tg, err, errlen) != 0)
        return -1;
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "PUT %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd-bench\r\n"
                      "Content-Type: text/plain\r\nContent-Length: %" PRIu64
                      "\r\nConnection: close\r\n\r\n",
                      tg->prefix, path, tg->hostport, size);
    char *chunk = xrealloc(NULL, XFER_CHUNK);
    for (size_t i = 0; i < XFER_CHUNK; i++)
        chunk[i] = i % 64 == 63 ? '\n' : "0123456789abcdef"[i % 16];
    bool ok = send_all(&c, head, (size_t)hl) == 0;
    for (uint64_t left = size; ok && left;) {
        size_t n = left < XFER_CHUNK ? (size_t)left : XFER_CHUNK;
        ok = send_all(&c, chunk, n) == 0;
        left -= n;
    }
    bool got_any = false;
    if (!ok || read_response(&c, false, &status, &got_any) != 0) {
        setmsg(err, errlen, "%s", c.err[0] ? c.err : "send failed");
        status = -1;
    }
    free(chunk);
    conn_free(&c);
    return status;
}

/* GET path and count its body bytes without keeping them. Returns the status or -1. */
static int xfer_download(const target *tg, const char *path, uint64_t *bytes, double *secs,
                         char *err, size_t errlen)
{
    conn c;
    int status = -1;
    *bytes = 0;
    if (conn_open(&c, tg, err, errlen) != 0)
        return -1;
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "GET %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd-bench\r\n"
                      "Connection: close\r\n\r\n",
                      tg->prefix, path, tg->hostport);
    double t0 = now_ms();
    if (send_all(&c, head, (size_t)hl) != 0) {
        setmsg(err, errlen, "%s", c.err);
        conn_free(&c);
        return -1;
    }
    /* The head, then everything to EOF (Connection: close). */
    char *buf = xrealloc(NULL, XFER_CHUNK);
    size_t have = 0;
    bool in_body = false;
    for (;;) {
        ssize_t k = recv(c.fd, buf + (in_body ? 0 : have), XFER_CHUNK - (in_body ? 0 : have), 0);
        if (k < 0 && errno == EINTR && !g_interrupted)
            continue;
        if (k <= 0)
            break;
        if (in_body) {
            *bytes += (uint64_t)k;
            continue;
        }
        have += (size_t)k;
        char *e = memmem(buf, have, "\r\n\r\n", 4);
        if (!e) {
            if (have == XFER_CHUNK)
                break;
            continue;
        }
        if (have > 12 && strncmp(buf, "HTTP/1.", 7) == 0)
            status = atoi(buf + 9);
        *bytes += have - (size_t)(e + 4 - buf);
        in_body = true;
    }
    *secs = (now_ms() - t0) / 1e3;
    if (status < 0)
        setmsg(err, errlen, "no HTTP response");
    free(buf);
    conn_free(&c);
    return status;
}

/* Streamed /execute: send body with Accept: NDJSON; call on_data with what arrives (the
 * chunked framing left in: the measurements only look for markers and count bytes). */
static int stream_exec(const target *tg, const char *body,
                       bool (*on_data)(void *, const char *, size_t), void *arg, char *err,
                       size_t errlen)
{
    conn c;
    if (conn_open(&c, tg, err, errlen) != 0)
        return -1;
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "POST %s/execute HTTP/1.1\r\nHost: %s\r\nAccept: application/x-ndjson\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      tg->prefix, tg->hostport, strlen(body));
    int rc = -1;
    if (send_all(&c, head, (size_t)hl) == 0 && send_all(&c, body, strlen(body)) == 0) {
        char *buf = xrealloc(NULL, XFER_CHUNK);
        ssize_t k;
        rc = 0;
        while ((k = recv(c.fd, buf, XFER_CHUNK - 1, 0)) > 0) {
            buf[k] = '\0';
            if (!on_data(arg, buf, (size_t)k))
                break;
        }
        free(buf);
    } else {
        setmsg(err, errlen, "%s", c.err);
    }
    conn_free(&c);
    return rc;
}

static double real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The first stdout event: the lag from the write (the time the command printed) to now. */
typedef struct {
    double lag_ms;
    bool seen;
    char acc[4096];
    size_t n;
} first_event;

static bool on_first(void *arg, const char *d, size_t n)
{
    first_event *f = arg;
    double now = real_ms();
    size_t take = n < sizeof f->acc - 1 - f->n ? n : sizeof f->acc - 1 - f->n;
    memcpy(f->acc + f->n, d, take);
    f->n += take;
    f->acc[f->n] = '\0';
    static const char marker[] = "{\"type\":\"stdout\",\"data\":\"";
    const char *m = strstr(f->acc, marker);
    if (!m || !strchr(m + sizeof marker - 1, '"'))
        return true;
    f->lag_ms = now - atof(m + sizeof marker - 1) / 1e6;
    f->seen = true;
    return false; /* enough: the command ends with the connection */
}

typedef struct {
    uint64_t bytes;
    bool exit_seen;
    char tail[64];
} stream_count;

static bool on_count(void *arg, const char *d, size_t n)
{
    stream_count *sc = arg;
    sc->bytes += n;
    if (n >= 16)
        memcpy(sc->tail, d + n - 16, 16);
    if (memmem(d, n, "\"type\":\"exit\"", 13))
        sc->exit_seen = true;
    return true;
}

/* Streamed output: how soon a command's write reaches the client (runs streamed `date +%s%N;
 * sleep 0.2`: the client's clock when the stdout event arrives minus the time printed), and how
 * fast a text file of size bytes streams as a command's stdout in NDJSON events against a GET
 * of it, in turns, best of STREAM_ROUNDS each. The producer is cat (128 KiB writes), not a
 * pipeline such as `yes | head`: on two cores that measures the producer's processes (at the
 * commands' nice 10) competing with sbxd and the client, not the stream. The errors. */
typedef struct {
    samples lag;
    double ndjson_mbs, get_mbs;
    uint64_t size;
} stream_result;

static unsigned long measure_stream(const target *tg, int runs, uint64_t size, stream_result *s)
{
    unsigned long errors = 0;
    char serr[256] = "";
    s->size = size;
    for (int i = 0; i < runs && !g_interrupted; i++) {
        first_event f = {0};
        if (stream_exec(tg, "{\"command\":\"date +%s%N; sleep 0.2\"}", on_first, &f, serr,
                        sizeof serr) == 0 &&
            f.seen)
            samples_push(&s->lag, f.lag_ms);
        else
            errors++;
    }
    samples_sort(&s->lag);
    if (put_text(tg, "/files/bench-stream.txt", size, serr, sizeof serr) / 100 != 2) {
        warnx_("streamed output: the text file: %s", serr[0] ? serr : "not stored");
        return errors + 1;
    }
    for (int r = 0; r < STREAM_ROUNDS && !g_interrupted && !errors; r++) {
        stream_count sc = {0};
        double t0 = now_ms();
        if (stream_exec(tg, "{\"command\":\"cat bench-stream.txt\"}", on_count, &sc, serr,
                        sizeof serr) == 0 &&
            sc.exit_seen) {
            double mbs = (double)size / 1e6 / ((now_ms() - t0) / 1e3);
            if (mbs > s->ndjson_mbs)
                s->ndjson_mbs = mbs;
        } else {
            warnx_("streamed output: %s", serr[0] ? serr : "no exit event");
            errors++;
        }
        uint64_t got = 0;
        double secs = 0;
        if (xfer_download(tg, "/files/bench-stream.txt", &got, &secs, serr, sizeof serr) == 200 &&
            got == size) {
            double mbs = (double)size / 1e6 / secs;
            if (mbs > s->get_mbs)
                s->get_mbs = mbs;
        } else {
            warnx_("GET of the streamed file: %s", serr);
            errors++;
        }
    }
    return errors;
}

typedef struct {
    double up_mbs, down_mbs; /* MB/s (10^6 bytes) */
    long up_growth_kb, down_growth_kb;
    bool ok;
} xfer_result;

/* Upload then download `size` bytes against one server: /files on sbxd (pid known: its RSS
 * is sampled), the legacy API (POST /upload, GET /download) elsewhere. */
static void measure_files(const target *tg, pid_t pid, bool legacy, uint64_t size, xfer_result *x,
                          char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    rss_sampler rs = {.pid = pid};
    double secs = 0;
    long base = pid > 0 ? vmrss_kb(pid) : 0;
    rs.peak_kb = base;
    if (pid > 0)
        pthread_create(&rs.th, NULL, rss_sample_main, &rs);
    int st = legacy ? xfer_upload(tg, "POST", "/upload", true, "bench-transfer.bin", size, &secs,
                                  err, errlen)
                    : xfer_upload(tg, "PUT", "/files/bench-transfer.bin", false, NULL, size, &secs,
                                  err, errlen);
    if (pid > 0) {
        rs.stop = true;
        pthread_join(rs.th, NULL);
    }
    if (st != 200 && st != 201) {
        if (st > 0)
            setmsg(err, errlen, "upload: HTTP %d", st);
        return;
    }
    x->up_mbs = (double)size / 1e6 / secs;
    x->up_growth_kb = rs.peak_kb - base;
    rs.stop = false;
    base = pid > 0 ? vmrss_kb(pid) : 0;
    rs.peak_kb = base;
    if (pid > 0)
        pthread_create(&rs.th, NULL, rss_sample_main, &rs);
    uint64_t got = 0;
    st = xfer_download(tg, legacy ? "/download/bench-transfer.bin" : "/files/bench-transfer.bin",
                       &got, &secs, err, errlen);
    if (pid > 0) {
        rs.stop = true;
        pthread_join(rs.th, NULL);
    }
    if (st != 200 || got != size) {
        if (st > 0)
            setmsg(err, errlen, "download: HTTP %d, %" PRIu64 " of %" PRIu64 " bytes", st, got,
                   size);
        return;
    }
    x->down_mbs = (double)size / 1e6 / secs;
    x->down_growth_kb = rs.peak_kb - base;
    x->ok = true;
}

/* The upload routes measured against each other, in the same rounds: a raw PUT, and the
 * multipart bodies the SDKs send (the part "file"; the legacy route saves it under its
 * filename). All write the same file, so the workspace holds one copy at a time. */
typedef struct {
    const char *label, *method, *path;
    bool multipart;
} upload_kind;

static const upload_kind UPLOADS[] = {
    {"PUT /files", "PUT", "/files/bench-transfer.bin", false},
    {"POST /upload (multipart)", "POST", "/upload", true},
    {"PUT /files (multipart)", "PUT", "/files/bench-transfer.bin", true},
    {"PUT /v1/files (multipart)", "PUT", "/v1/files/bench-transfer.bin", true},
};
#define NUPLOADS (sizeof UPLOADS / sizeof UPLOADS[0])

/* Each kind `rounds` times, taking turns so that every kind sees the same machine; the best
 * MB/s of each into mbs[] (0 where one failed). 0, or -1 with err. */
static int measure_uploads(const target *tg, uint64_t size, int rounds, double *mbs, char *err,
                           size_t errlen)
{
    for (size_t k = 0; k < NUPLOADS; k++)
        mbs[k] = 0;
    for (int r = 0; r < rounds && !g_interrupted; r++)
        for (size_t k = 0; k < NUPLOADS && !g_interrupted; k++) {
            const upload_kind *u = &UPLOADS[k];
            double secs = 0;
            int st = xfer_upload(tg, u->method, u->path, u->multipart, "bench-transfer.bin", size,
                                 &secs, err, errlen);
            if (st != 200 && st != 201 && st != 204) {
                if (st > 0)
                    setmsg(err, errlen, "%s: HTTP %d", u->label, st);
                return -1;
            }
            double v = (double)size / 1e6 / secs;
            if (v > mbs[k])
                mbs[k] = v;
        }
    return 0;
}

/* A connection to tg from the loopback address src (127.0.0.x), so that many connections do
 * not all count against sbxd's per-client cap. 0, or -1 with c->err. */
static int conn_connect_from(conn *c, const char *src)
{
    conn_close(c);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        setmsg(c->err, sizeof c->err, "socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_in sin = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &sin.sin_addr);
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {c->io_timeout_s, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0 ||
        connect(fd, (const struct sockaddr *)&c->t->addr, c->t->addrlen) != 0) {
        setmsg(c->err, sizeof c->err, "connect from %s: %s", src, strerror(errno));
        close(fd);
        return -1;
    }
    c->fd = fd;
    return 0;
}

/* sbxd's RSS while n kept-alive connections are open and idle (for a second), each having had
 * one GET /healthz answered. The connections come from 127.0.0.2 and up, 64 per address (sbxd
 * caps connections per client address). -1 with err when one could not be made. */
static long idle_conns_rss(const target *tg, pid_t pid, int n, char *err, size_t errlen)
{
    conn *cs = calloc((size_t)n, sizeof *cs);
    if (!cs) {
        warnx_("out of memory");
        exit(1);
    }
    long kb = -1;
    int made = 0;
    for (; made < n && !g_interrupted; made++) {
        conn *c = &cs[made];
        conn_init(c, tg, IO_TIMEOUT_S);
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + made / 64);
        int status = 0;
        if (conn_connect_from(c, src) != 0 || http_do(c, "GET", "/healthz", NULL, &status) != 0 ||
            status != 200 || c->fd < 0) {
            setmsg(err, errlen, "connection %d: %s", made + 1,
                   c->err[0] ? c->err : "not a kept-alive 200");
            made++;
            goto out;
        }
    }
    /* Idle a second: past libmicrohttpd's wait before an idle connection's buffer pages go
     * back to the kernel (tools/mhd-patches), as they are for any connection left open. */
    sleep_us(1000000);
    kb = vmrss_kb(pid);
out:
    for (int i = 0; i < made; i++)
        conn_free(&cs[i]);
    free(cs);
    return kb;
}

/* Parses http://host[:port][/prefix] into t. */
static int target_from_url(target *t, const char *url)
{
    memset(t, 0, sizeof *t);
    if (strncasecmp(url, "http://", 7) != 0) {
        warnx_("--vs: only http:// URLs are supported: %s", url);
        return -1;
    }
    const char *h = url + 7;
    const char *slash = strchr(h, '/');
    size_t hplen = slash ? (size_t)(slash - h) : strlen(h);
    if (hplen == 0 || hplen >= sizeof t->hostport) {
        warnx_("--vs: bad host in %s", url);
        return -1;
    }
    memcpy(t->hostport, h, hplen);
    t->hostport[hplen] = '\0';
    if (slash) {
        size_t pl = strlen(slash);
        while (pl > 0 && slash[pl - 1] == '/')
            pl--;
        if (pl >= sizeof t->prefix) {
            warnx_("--vs: path too long");
            return -1;
        }
        memcpy(t->prefix, slash, pl);
        t->prefix[pl] = '\0';
    }
    char host[300], port[16] = "80";
    if (t->hostport[0] == '[') {
        const char *rb = strchr(t->hostport, ']');
        if (!rb) {
            warnx_("--vs: bad IPv6 host in %s", url);
            return -1;
        }
        size_t n = (size_t)(rb - t->hostport - 1);
        memcpy(host, t->hostport + 1, n);
        host[n] = '\0';
        if (rb[1] == ':')
            copy_str(port, sizeof port, rb + 2);
    } else {
        copy_str(host, sizeof host, t->hostport);
        char *colon = strrchr(host, ':');
        if (colon) {
            *colon = '\0';
            copy_str(port, sizeof port, colon + 1);
        }
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res) {
        warnx_("--vs: cannot resolve %s port %s: %s", host, port, gai_strerror(rc));
        return -1;
    }
    memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
    t->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    copy_str(t->label, sizeof t->label, url);
    return 0;
}

static void target_local(target *t, int port)
{
    memset(t, 0, sizeof *t);
    struct sockaddr_in *sin = (struct sockaddr_in *)&t->addr;
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    t->addrlen = sizeof *sin;
    snprintf(t->hostport, sizeof t->hostport, "127.0.0.1:%d", port);
    snprintf(t->label, sizeof t->label, "http://127.0.0.1:%d", port);
}

/* ------------------------------------------------------------------------ */
/* request kinds and result checks                                          */

typedef struct {
    const char *method, *path, *body;
    const char *expect; /* substring a 200 body must contain, or NULL */
} reqspec;

static const reqspec REQ_EXEC = {"POST", "/execute", "{\"command\":\"echo hi\"}", "hi"};
static const reqspec REQ_HEALTH = {"GET", "/healthz", NULL, NULL};
/* The sandbox's usage (cgroup or /proc files, two statvfs): polled, so it must stay cheap. */
static const reqspec REQ_USAGE = {"GET", "/usage", NULL, "\"cpu_count\""};
/* The same command as a tool of the MCP endpoint, on a session initialized before. */
static const reqspec REQ_MCP_INIT = {
    "POST", "/mcp",
    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
    "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"sbxd-bench\",\"version\":"
    "\"1\"}}}",
    "\"protocolVersion\""};
static const reqspec REQ_MCP_CALL = {
    "POST", "/mcp",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
    "\"run_command\",\"arguments\":{\"command\":\"echo hi\"}}}",
    "\"stdout\":\"hi\\n\""};
static const reqspec REQ_ROOT = {"GET", "/", NULL, NULL};

/* Error tally of one phase. */
typedef struct {
    unsigned long ok, errors;
    char first[240];
} tally;

static void tally_error(tally *t, const char *msg)
{
    if (t->errors++ == 0)
        copy_str(t->first, sizeof t->first, msg);
}

static void tally_merge(tally *dst, const tally *src)
{
    dst->ok += src->ok;
    if (src->errors && !dst->errors)
        copy_str(dst->first, sizeof dst->first, src->first);
    dst->errors += src->errors;
}

/* One request, checked; returns true on a good 200. */
static bool do_checked(conn *c, const reqspec *r, tally *t)
{
    int status = 0;
    char msg[300];
    if (http_do(c, r->method, r->path, r->body, &status) != 0) {
        snprintf(msg, sizeof msg, "%s %s: %s", r->method, r->path, c->err);
        tally_error(t, msg);
        return false;
    }
    if (status != 200) {
        snprintf(msg, sizeof msg, "%s %s: HTTP %d: %.120s", r->method, r->path, status,
                 c->body ? c->body : "");
        tally_error(t, msg);
        return false;
    }
    if (r->expect && (!c->body || !strstr(c->body, r->expect))) {
        snprintf(msg, sizeof msg, "%s %s: 200 but the body lacks \"%s\": %.120s", r->method,
                 r->path, r->expect, c->body ? c->body : "");
        tally_error(t, msg);
        return false;
    }
    t->ok++;
    return true;
}

/* ------------------------------------------------------------------------ */
/* measurements                                                             */

static int floor_once(double *dt);

/* Sequential requests on one keep-alive connection. With floor_lat, each request is followed
 * by one floor spawn, so both series see the same machine conditions and their ratio is fair
 * even on a noisy host. */
static void run_seq(const target *tg, const reqspec *r, int warm, int iters, samples *lat, tally *t,
                    samples *floor_lat)
{
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    tally warm_t = {0};
    for (int i = 0; i < warm && !g_interrupted; i++)
        do_checked(&c, r, &warm_t);
    tally_merge(t, &warm_t);
    t->ok -= warm_t.ok; /* warm-up successes are not part of the count */
    for (int i = 0; i < iters && !g_interrupted; i++) {
        double t0 = now_ms();
        bool ok = do_checked(&c, r, t);
        double dt = now_ms() - t0;
        if (ok)
            samples_push(lat, dt);
        double fdt;
        if (floor_lat && floor_once(&fdt) == 0)
            samples_push(floor_lat, fdt);
    }
    conn_free(&c);
    samples_sort(lat);
    if (floor_lat)
        samples_sort(floor_lat);
}

typedef struct {
    const target *tg;
    const reqspec *r;
    pthread_barrier_t *bar;
    const double *deadline; /* written by the main thread between the two barriers */
    samples lat;
    tally t;
    double last_end;
    unsigned long in_time; /* answered (200) by the deadline */
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    conn c;
    conn_init(&c, w->tg, IO_TIMEOUT_S);
    (void)conn_connect(&c);       /* connect before the clock starts; errors resurface below */
    pthread_barrier_wait(w->bar); /* all connected (a slow accept queue can take seconds) */
    pthread_barrier_wait(w->bar); /* the main thread has set the deadline */
    double deadline = *w->deadline;
    double t0 = now_ms();
    while (t0 < deadline && !g_interrupted) {
        bool ok = do_checked(&c, w->r, &w->t);
        double t1 = now_ms();
        if (ok)
            samples_push(&w->lat, t1 - t0);
        if (ok && t1 <= deadline)
            w->in_time++;
        else if (c.fd < 0)
            sleep_us(1000); /* do not spin on a refused connection */
        t0 = t1;
    }
    w->last_end = t0;
    conn_free(&c);
    return NULL;
}

typedef struct {
    double rps, p50, p99, seconds;
    tally t;
} load_result;

/* nthreads clients, each with its own keep-alive connection, for secs. */
static void run_load(const target *tg, const reqspec *r, int nthreads, double secs,
                     load_result *res)
{
    memset(res, 0, sizeof *res);
    worker *ws = calloc((size_t)nthreads, sizeof *ws);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    if (!ws || !th) {
        warnx_("out of memory");
        exit(1);
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads + 1);
    double deadline = 0;
    int started = 0;
    for (int i = 0; i < nthreads; i++) {
        ws[i].tg = tg;
        ws[i].r = r;
        ws[i].bar = &bar;
        ws[i].deadline = &deadline;
        if (pthread_create(&th[i], NULL, worker_main, &ws[i]) != 0) {
            warnx_("pthread_create failed");
            exit(1);
        }
        started++;
    }
    pthread_barrier_wait(&bar);
    double start = now_ms();
    deadline = start + secs * 1000.0;
    pthread_barrier_wait(&bar);
    double end = start;
    unsigned long in_time = 0;
    samples all = {0};
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (ws[i].last_end > end)
            end = ws[i].last_end;
        in_time += ws[i].in_time;
        tally_merge(&res->t, &ws[i].t);
        samples_append(&all, &ws[i].lat);
        samples_free(&ws[i].lat);
    }
    pthread_barrier_destroy(&bar);
    samples_sort(&all);
    res->seconds = (end - start) / 1000.0;
    /* The answers within the phase over its length: the requests still out at the deadline
     * (a command in the slow tail can take a few hundred ms) neither count nor stretch it. */
    res->rps = (double)in_time / secs;
    res->p50 = pct(&all, 50);
    res->p99 = pct(&all, 99);
    samples_free(&all);
    free(ws);
    free(th);
}

/* One fork + execve(argv) + waitpid, its stdout on /dev/null. */
static int spawn_once(char *const *argv, double *dt)
{
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) {
        warnx_("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 1);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    *dt = now_ms() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        warnx_("%s did not exit 0", argv[0]);
        return -1;
    }
    return 0;
}

static char *const FLOOR_ARGV[] = {(char *)"/bin/true", NULL};
/* What /execute of {"command":"echo hi"} runs (REQ_EXEC). */
static char *const COMMAND_ARGV[] = {(char *)"/bin/sh", (char *)"-c", (char *)"echo hi", NULL};

/* One fork + execve(/bin/true) + waitpid: the floor any spawner pays. */
/* --gvisor: the helper inside the sandbox (bench_gvisor.c), which spawns the floor there. */
static int g_helper_fd = -1;

static int floor_once(double *dt)
{
    if (g_helper_fd >= 0) {
        char err[160];
        if (bench_helper_ask(g_helper_fd, "once", dt, err, sizeof err) == 0)
            return 0;
        warnx_("%s", err);
        return -1;
    }
    return spawn_once(FLOOR_ARGV, dt);
}

/* Rounds of the 16-client /execute load, each against the floor measured just before it. */
#define LOAD_ROUNDS 3
/* fork+exec samples of a load round's floor. */
#define LOAD_FLOOR_SAMPLES 200
/* Seconds of a load round's concurrent spawn rate (spawn_rate_now). */
#define LOAD_RATE_SECS 2.0

/* The p50 of n spawns of argv now (alone): the pace the cores could run it at. 0 on
 * failure. */
static double spawn_p50_now(char *const *argv, int n)
{
    samples s = {0};
    for (int i = 0; i < n && !g_interrupted; i++) {
        double dt;
        if (spawn_once(argv, &dt) != 0)
            break;
        samples_push(&s, dt);
    }
    samples_sort(&s);
    double p = s.n == (size_t)n ? pct(&s, 50) : 0;
    samples_free(&s);
    return p;
}

/* Spawns of one argv from many threads at once, for a while. */
typedef struct {
    char *const *argv;
    double end; /* now_ms() deadline */
    long n;     /* spawns finished in time */
    bool failed;
} spawn_rate_arg;

/* posix_spawn (a vfork: no copy of the bench's memory), the cheapest way to spawn, so that
 * the rate is the most any spawner could reach. */
static void *spawn_rate_main(void *p)
{
    spawn_rate_arg *a = p;
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0 ||
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0) != 0) {
        a->failed = true;
        return NULL;
    }
    while (!g_interrupted && now_ms() < a->end) {
        pid_t pid;
        int st;
        if (posix_spawn(&pid, a->argv[0], &fa, NULL, a->argv, environ) != 0) {
            a->failed = true;
            break;
        }
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            a->failed = true;
            break;
        }
        if (now_ms() <= a->end)
            a->n++;
    }
    posix_spawn_file_actions_destroy(&fa);
    return NULL;
}

/* The machine's own rate at spawning argv from `threads` threads at once for secs seconds:
 * what any spawner reaches at the concurrency of the load. Process creation need not scale
 * with the cores (on a paravirtualised guest two threads can spawn fewer processes per
 * second than one), which cores / floor p50 assumes. 0 on failure. */
static double spawn_rate_now(char *const *argv, int threads, double secs)
{
    spawn_rate_arg *args = calloc((size_t)threads, sizeof *args);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!args || !th) {
        free(args);
        free(th);
        return 0;
    }
    double end = now_ms() + secs * 1000.0;
    int started = 0;
    for (int i = 0; i < threads; i++) {
        args[i] = (spawn_rate_arg){.argv = argv, .end = end};
        if (pthread_create(&th[i], NULL, spawn_rate_main, &args[i]) != 0)
            break;
        started++;
    }
    long n = 0;
    bool failed = started < threads;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        n += args[i].n;
        failed |= args[i].failed;
    }
    free(args);
    free(th);
    return failed ? 0 : (double)n / secs;
}

/* ------------------------------------------------------------------------ */
/* contexts                                                                 */

/* Idle contexts whose memory is measured. */
#define CTX_IDLE 4

typedef struct {
    samples create, exec;    /* ms: POST /contexts (each deleted after), an execution */
    long rss_base, rss_idle; /* kB: sbxd before and with CTX_IDLE idle contexts */
    bool ok;
} ctx_result;

/* The "id" of a JSON answer into id; false when there is none. */
static bool json_id(const char *body, char *id, size_t len)
{
    const char *k = body ? strstr(body, "\"id\":\"") : NULL;
    if (!k)
        return false;
    k += 6;
    size_t n = strcspn(k, "\"");
    if (n == 0 || n >= len)
        return false;
    memcpy(id, k, n);
    id[n] = '\0';
    return true;
}

/* ------------------------------------------------------------------------ */
/* workspace                                                                */

typedef struct {
    bool ok;
    samples watch; /* ms: from a PUT's start to its event on a watch stream */
    samples stat;  /* ms: GET ?stat=true */
} ws_result;

/* A watch stream on dir (a raw connection, read as it comes): the socket, or -1. */
static int watch_open_raw(const target *tg, const char *dir, char *err, size_t errlen)
{
    int fd = socket(tg->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)&tg->addr, tg->addrlen) < 0) {
        setmsg(err, errlen, "watch: connect: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET %s/files/%s?watch=true HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     tg->prefix, dir, tg->hostport);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        setmsg(err, errlen, "watch: send: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Read the stream into buf until needle is in it (at most ms): true when it came. What came
 * before the needle's line end is dropped. */
static bool watch_wait(int fd, char *buf, size_t cap, size_t *have, const char *needle, int ms)
{
    double end = now_ms() + ms;
    for (;;) {
        char *at = strstr(buf, needle);
        if (at) {
            char *nl = strchr(at, '\n');
            size_t keep = nl ? *have - (size_t)(nl + 1 - buf) : 0;
            memmove(buf, nl ? nl + 1 : buf + *have, keep);
            *have = keep;
            buf[keep] = '\0';
            return true;
        }
        double left = end - now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left + 1) <= 0)
            continue;
        if (*have + 1 >= cap) { /* (events of other paths: keep the tail) */
            memmove(buf, buf + cap / 2, *have - cap / 2);
            *have -= cap / 2;
        }
        ssize_t k = recv(fd, buf + *have, cap - 1 - *have, 0);
        if (k <= 0)
            return false;
        *have += (size_t)k;
        buf[*have] = '\0';
    }
}

/* Watch latency: n small PUTs into a watched directory, each timed from the request's start to
 * its event on the stream; and n GET ?stat=true. */
static void measure_workspace(const target *tg, int n, ws_result *out, char *err, size_t errlen)
{
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    int status = 0;
    char *buf = malloc(1 << 16);
    size_t have = 0;
    int fd = -1;
    if (!buf) {
        setmsg(err, errlen, "out of memory");
        goto out;
    }
    buf[0] = '\0';
    if (http_do(&c, "PUT", "/files/bench-watch?type=directory", NULL, &status) != 0 ||
        (status != 200 && status != 201)) {
        setmsg(err, errlen, "PUT ?type=directory: %d %s", status, c.err);
        goto out;
    }
    fd = watch_open_raw(tg, "bench-watch", err, errlen);
    if (fd < 0)
        goto out;
    if (!watch_wait(fd, buf, 1 << 16, &have, "\"type\":\"watching\"", 5000)) {
        setmsg(err, errlen, "no watching line within 5 s");
        goto out;
    }
    for (int i = 0; i < n && !g_interrupted; i++) {
        char path[96], needle[96];
        snprintf(path, sizeof path, "/files/bench-watch/f%d", i);
        snprintf(needle, sizeof needle, "\"path\":\"bench-watch/f%d\"", i);
        double t0 = now_ms();
        if (http_do(&c, "PUT", path, "x", &status) != 0 || (status != 200 && status != 201)) {
            setmsg(err, errlen, "PUT %s: %d %s", path, status, c.err);
            goto out;
        }
        if (!watch_wait(fd, buf, 1 << 16, &have, needle, 5000)) {
            setmsg(err, errlen, "no event for %s within 5 s", path);
            goto out;
        }
        samples_push(&out->watch, now_ms() - t0);
    }
    for (int i = 0; i < n && !g_interrupted; i++) {
        double t0 = now_ms();
        if (http_do(&c, "GET", "/files/bench-watch/f0?stat=true", NULL, &status) != 0 ||
            status != 200) {
            setmsg(err, errlen, "GET ?stat=true: %d %s", status, c.err);
            goto out;
        }
        samples_push(&out->stat, now_ms() - t0);
    }
    samples_sort(&out->watch);
    samples_sort(&out->stat);
    out->ok = true;
out:
    if (fd >= 0)
        close(fd);
    http_do(&c, "DELETE", "/files/bench-watch?recursive=true", NULL, &status);
    free(buf);
    conn_free(&c);
}

/* Whole trees: a directory of TREE_FILES small files as one tar, through GET and PUT
 * ?archive=tar, against what a client does without them: tar in a command, then the archive
 * moved as a file through /files (and the reverse). */
#define TREE_FILES  10000
#define TREE_ROUNDS 3

typedef struct {
    bool ok;
    double down_ms, down_base_ms; /* GET ?archive=tar; exec tar -c + GET the file */
    double up_ms, up_base_ms;     /* PUT ?archive=tar; PUT the file + exec tar -x */
    uint64_t tar_bytes;
} tree_result;

/* POST /execute of a shell command on c: true when it exited 0. */
static bool bench_sh(conn *c, const char *command, char *err, size_t errlen)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"command\":\"%s\",\"timeout_ms\":300000}", command);
    int status = 0;
    if (http_do(c, "POST", "/execute", body, &status) != 0 || status != 200 || !c->body ||
        !strstr(c->body, "\"exit_code\":0")) {
        setmsg(err, errlen, "%s: %d %.200s", command, status, c->body ? c->body : c->err);
        return false;
    }
    return true;
}

/* Send buf as the body of method path; the status, or -1. */
static int xfer_send(const target *tg, const char *method, const char *path, const char *buf,
                     size_t len, char *err, size_t errlen)
{
    conn c;
    int status = -1;
    if (conn_open(&c, tg, err, errlen) != 0)
        return -1;
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd-bench\r\n"
                      "Content-Type: application/x-tar\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      method, tg->prefix, path, tg->hostport, len);
    bool got_any = false;
    if (send_all(&c, head, (size_t)hl) != 0 || send_all(&c, buf, len) != 0 ||
        read_response(&c, false, &status, &got_any) != 0) {
        setmsg(err, errlen, "%s %s: %s", method, path, c.err[0] ? c.err : "failed");
        status = -1;
    }
    conn_free(&c);
    return status;
}

static void measure_trees(const target *tg, const char *ws, tree_result *out, char *err,
                          size_t errlen)
{
    conn c;
    conn_init(&c, tg, 300);
    char *tar = NULL;
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "mkdir -p bench-tree && cd bench-tree && for d in $(seq 100); do mkdir d$d && "
             "for f in $(seq %d); do echo file $d $f > d$d/f$f; done; done",
             TREE_FILES / 100);
    if (!bench_sh(&c, cmd, err, errlen))
        goto out;
    uint64_t bytes = 0;
    double secs = 0;
    /* Down: a GET ?archive=tar, against tar in a command and a GET of its file; up: that tar
     * by PUT ?archive=tar, against a PUT of the file and tar in a command. TREE_ROUNDS of
     * each in turns (after one of each untimed: libarchive loaded, the tree in the page
     * cache), the fastest of each. */
    out->down_ms = out->down_base_ms = out->up_ms = out->up_base_ms = 1e30;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bench-tree.tar", ws);
    for (int round = 0; round <= TREE_ROUNDS && !g_interrupted; round++) {
        double t0 = now_ms();
        int st = xfer_download(tg, "/files/bench-tree?archive=tar", &bytes, &secs, err, errlen);
        double ms = now_ms() - t0;
        if (st != 200) {
            setmsg(err, errlen, "GET ?archive=tar: %d", st);
            goto out;
        }
        if (round && ms < out->down_ms)
            out->down_ms = ms;
        t0 = now_ms();
        if (!bench_sh(&c, "rm -f bench-tree.tar && tar -C bench-tree -cf bench-tree.tar .", err,
                      errlen))
            goto out;
        st = xfer_download(tg, "/files/bench-tree.tar", &out->tar_bytes, &secs, err, errlen);
        ms = now_ms() - t0;
        if (st != 200)
            goto out;
        if (round && ms < out->down_base_ms)
            out->down_base_ms = ms;
        if (!tar) {
            FILE *f = fopen(path, "rb");
            tar = f ? malloc(out->tar_bytes) : NULL;
            if (!f || !tar || fread(tar, 1, out->tar_bytes, f) != out->tar_bytes) {
                setmsg(err, errlen, "cannot read %s", path);
                if (f)
                    fclose(f);
                goto out;
            }
            fclose(f);
        }
        if (!bench_sh(&c, "rm -rf bench-up bench-up2 bench-up2.tar", err, errlen))
            goto out;
        t0 = now_ms();
        st = xfer_send(tg, "PUT", "/files/bench-up?archive=tar", tar, out->tar_bytes, err, errlen);
        ms = now_ms() - t0;
        if (st != 201) {
            if (!err[0])
                setmsg(err, errlen, "PUT ?archive=tar: %d", st);
            goto out;
        }
        if (round && ms < out->up_ms)
            out->up_ms = ms;
        t0 = now_ms();
        st = xfer_send(tg, "PUT", "/files/bench-up2.tar", tar, out->tar_bytes, err, errlen);
        if (st != 201 ||
            !bench_sh(&c, "mkdir bench-up2 && tar -C bench-up2 -xf bench-up2.tar", err, errlen))
            goto out;
        ms = now_ms() - t0;
        if (round && ms < out->up_base_ms)
            out->up_base_ms = ms;
    }
    out->ok = !g_interrupted;
out:
    free(tar);
    bench_sh(&c, "rm -rf bench-tree bench-tree.tar bench-up bench-up2 bench-up2.tar", err,
             out->ok ? errlen : 0);
    conn_free(&c);
}

/* Search: GET /files/DIR?grep= (literal and regex) and ?glob= on a generated tree of
 * SEARCH_DIRS x SEARCH_FILES files, against grep -rn, rg -n (when installed) and find
 * through /execute; in turns, best of SEARCH_ROUNDS after one untimed round (page cache
 * warm), the matches counted by each. */
#define SEARCH_DIRS   250
#define SEARCH_FILES  200
#define SEARCH_LINES  165 /* of about 62 bytes: 50,000 files of 10 KB, 510 MB */
#define SEARCH_ROUNDS 3

typedef struct {
    bool ok, have_rg;
    double lit_ms, lit_grep_ms, lit_rg_ms, re_ms, re_grep_ms, re_rg_ms, glob_ms, find_ms;
    long lit_n, lit_grep_n, lit_rg_n, re_n, re_grep_n, re_rg_n, glob_n, find_n;
    long rss_growth_kb;
    uint64_t bytes;
} search_result;

/* The number after "key": in body, or -1. */
static long body_num(const char *body, const char *key)
{
    const char *p = body ? strstr(body, key) : NULL;
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/* Lines in a /execute answer's stdout (its "\n" escapes). */
static long stdout_lines(const char *body)
{
    long n = 0;
    for (const char *p = body; p && (p = strstr(p, "\\n")); p += 2)
        n++;
    return n;
}

/* One timed request: its ms (1e30 on failure), the count picked from its body into *n. */
static double search_once(conn *c, const char *method, const char *path, const char *json,
                          bool exec, const char *key, long *n, char *err, size_t errlen)
{
    int status = 0;
    double t0 = now_ms();
    if (http_do(c, method, path, json, &status) != 0 || status != 200 || !c->body) {
        setmsg(err, errlen, "%s %s: %d %.200s", method, path, status, c->body ? c->body : c->err);
        return 1e30;
    }
    double ms = now_ms() - t0;
    *n = exec ? stdout_lines(c->body) : body_num(c->body, key);
    return ms;
}

static void best(double *slot, double ms)
{
    if (ms < *slot)
        *slot = ms;
}

static void measure_search(const target *tg, pid_t pid, bool quick, search_result *out, char *err,
                           size_t errlen)
{
    conn c;
    conn_init(&c, tg, 300);
    char cmd[1024];
    int files = quick ? SEARCH_FILES / 10 : SEARCH_FILES;
    snprintf(cmd, sizeof cmd,
             "mkdir -p bench-search && cd bench-search && awk 'BEGIN { for (d = 0; d < %d; d++) "
             "{ system(\\\"mkdir -p d\\\" d); for (f = 0; f < %d; f++) { fn = \\\"d\\\" d "
             "\\\"/f\\\" f (f %% 10 ? \\\".c\\\" : \\\".h\\\"); for (l = 0; l < %d; l++) "
             "print \\\"static int value_\\\" l "
             "\\\" = \\\" (d * f + l) \\\"; /* a line of text to search through */\\\" > fn; if "
             "(f %% 20 == 0) print \\\"needle_\\\" d > fn; close(fn) } } }' && (command -v rg "
             ">/dev/null && touch .rg || true)",
             SEARCH_DIRS, files, SEARCH_LINES);
    if (!bench_sh(&c, cmd, err, errlen))
        goto out;
    int status = 0;
    out->have_rg = http_do(&c, "GET", "/files/bench-search/.rg?stat=true", NULL, &status) == 0 &&
                   status == 200;
    double *slots[] = {&out->lit_ms,     &out->lit_grep_ms, &out->lit_rg_ms, &out->re_ms,
                       &out->re_grep_ms, &out->re_rg_ms,    &out->glob_ms,   &out->find_ms};
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++)
        *slots[i] = 1e30;
    long rss0 = vmrss_kb(pid), rss_max = rss0;
    for (int round = 0; round <= SEARCH_ROUNDS && !g_interrupted; round++) {
        double ms;
        ms = search_once(&c, "GET", "/files/bench-search?grep=needle_&max_matches=1000000", NULL,
                         false, "\"matches\":", &out->lit_n, err, errlen);
        if (ms >= 1e30)
            goto out;
        if (round)
            best(&out->lit_ms, ms);
        long r = vmrss_kb(pid);
        if (r > rss_max)
            rss_max = r;
        out->bytes = (uint64_t)body_num(c.body, "\"bytes_read\":");
        ms = search_once(&c, "POST", "/execute", "{\"command\":\"grep -rn needle_ bench-search\"}",
                         true, NULL, &out->lit_grep_n, err, errlen);
        if (round)
            best(&out->lit_grep_ms, ms);
        if (out->have_rg) {
            ms = search_once(&c, "POST", "/execute",
                             "{\"command\":\"rg -n --no-heading needle_ bench-search\"}", true,
                             NULL, &out->lit_rg_n, err, errlen);
            if (round)
                best(&out->lit_rg_ms, ms);
        }
        ms = search_once(&c, "GET",
                         "/files/bench-search?grep=needle_%5B0-9%5D%2B%24&regex=true"
                         "&max_matches=1000000",
                         NULL, false, "\"matches\":", &out->re_n, err, errlen);
        if (round)
            best(&out->re_ms, ms);
        ms = search_once(&c, "POST", "/execute",
                         "{\"command\":\"grep -rnE 'needle_[0-9]+$' bench-search\"}", true, NULL,
                         &out->re_grep_n, err, errlen);
        if (round)
            best(&out->re_grep_ms, ms);
        if (out->have_rg) {
            ms = search_once(&c, "POST", "/execute",
                             "{\"command\":\"rg -n --no-heading 'needle_[0-9]+$' bench-search\"}",
                             true, NULL, &out->re_rg_n, err, errlen);
            if (round)
                best(&out->re_rg_ms, ms);
        }
        ms = search_once(&c, "GET", "/files/bench-search?glob=**/*.h&max_matches=1000000", NULL,
                         false, "\"entries\":", &out->glob_n, err, errlen);
        if (round)
            best(&out->glob_ms, ms);
        ms = search_once(&c, "POST", "/execute", "{\"command\":\"find bench-search -name '*.h'\"}",
                         true, NULL, &out->find_n, err, errlen);
        if (round)
            best(&out->find_ms, ms);
    }
    out->rss_growth_kb = rss_max - rss0;
    out->ok = !g_interrupted;
out:
    bench_sh(&c, "rm -rf bench-search", err, out->ok ? errlen : 0);
    conn_free(&c);
}

/* Contexts (persistent shells): POST /contexts and its DELETE, `x=$((x+1))` in one, and
 * sbxd's RSS with CTX_IDLE idle ones (their shells are processes of their own, not counted). */
static void measure_contexts(const target *tg, pid_t pid, int creates, int warm, int iters,
                             ctx_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    char id[64], path[128];
    int status = 0;
    for (int i = 0; i < creates && !g_interrupted; i++) {
        double t0 = now_ms();
        if (http_do(&c, "POST", "/contexts", "{\"language\":\"bash\"}", &status) != 0 ||
            status != 201 || !json_id(c.body, id, sizeof id)) {
            setmsg(err, errlen, "POST /contexts: %d %s", status, c.err);
            goto out;
        }
        samples_push(&res->create, now_ms() - t0);
        snprintf(path, sizeof path, "/contexts/%s", id);
        if (http_do(&c, "DELETE", path, NULL, &status) != 0 || status != 200) {
            setmsg(err, errlen, "DELETE %s: %d %s", path, status, c.err);
            goto out;
        }
    }
    if (http_do(&c, "POST", "/contexts", "{}", &status) != 0 || status != 201 ||
        !json_id(c.body, id, sizeof id)) {
        setmsg(err, errlen, "POST /contexts: %d %s", status, c.err);
        goto out;
    }
    snprintf(path, sizeof path, "/contexts/%s/execute", id);
    for (int i = 0; i < warm + iters && !g_interrupted; i++) {
        double t0 = now_ms();
        if (http_do(&c, "POST", path, "{\"code\":\"x=$((x+1))\"}", &status) != 0 || status != 200 ||
            !strstr(c.body, "\"status\":\"ok\"")) {
            setmsg(err, errlen, "POST %s: %d %s", path, status, c.err);
            goto out;
        }
        if (i >= warm)
            samples_push(&res->exec, now_ms() - t0);
    }
    snprintf(path, sizeof path, "/contexts/%s", id);
    http_do(&c, "DELETE", path, NULL, &status);
    sleep_us(200000);
    res->rss_base = vmrss_kb(pid);
    char ids[CTX_IDLE][64];
    int made = 0;
    for (; made < CTX_IDLE; made++)
        if (http_do(&c, "POST", "/contexts", "{}", &status) != 0 || status != 201 ||
            !json_id(c.body, ids[made], sizeof ids[made]))
            break;
    sleep_us(500000);
    res->rss_idle = vmrss_kb(pid);
    for (int i = 0; i < made; i++) {
        snprintf(path, sizeof path, "/contexts/%s", ids[i]);
        http_do(&c, "DELETE", path, NULL, &status);
    }
    if (made < CTX_IDLE) {
        setmsg(err, errlen, "only %d of %d idle contexts were made", made, CTX_IDLE);
        goto out;
    }
    samples_sort(&res->create);
    samples_sort(&res->exec);
    res->ok = true;
out:
    conn_free(&c);
}

/* ------------------------------------------------------------------------ */
/* gRPC against REST                                                        */

/* Rounds of the gRPC-against-REST rows, each a series of REST then a series of gRPC. */
#define GRPC_ROUNDS 9
/* Idle gRPC connections whose memory is measured. */
#define GRPC_IDLE_CONNS 16

/* A gRPC connection to gt. NULL with err. */
static struct gclient *grpc_open(const target *gt, char *err, size_t errlen)
{
    return gclient_connect((const struct sockaddr *)&gt->addr, gt->addrlen, NULL, gt->hostport,
                           IO_TIMEOUT_S, err, errlen);
}

/* ProcessService/Execute of `echo hi` (as the REST row runs it: /bin/sh -c), checked: the
 * call's grpc-status 0, exit code 0, stdout "hi\n". */
static bool grpc_exec_checked(struct gclient *g, tally *t)
{
    static char sh[] = "/bin/sh", dash_c[] = "-c", script[] = "echo hi";
    ProtobufCBinaryData argv[] = {
        {sizeof sh - 1, (uint8_t *)sh},
        {sizeof dash_c - 1, (uint8_t *)dash_c},
        {sizeof script - 1, (uint8_t *)script},
    };
    Process__V1__ProcessConfig cfg = PROCESS__V1__PROCESS_CONFIG__INIT;
    cfg.n_command = sizeof argv / sizeof argv[0];
    cfg.command = argv;
    Process__V1__ExecuteRequest req = PROCESS__V1__EXECUTE_REQUEST__INIT;
    req.config = &cfg;
    ProtobufCMessage *m;
    char err[240];
    if (gclient_call(g, "/process.v1.ProcessService/Execute", &req.base,
                     &process__v1__execute_response__descriptor, &m, err, sizeof err) != 0) {
        tally_error(t, err);
        return false;
    }
    const Process__V1__ExecuteResponse *r = (const Process__V1__ExecuteResponse *)m;
    bool ok = r->exit_code == 0 && r->stdout.len == 3 && memcmp(r->stdout.data, "hi\n", 3) == 0;
    if (!ok) {
        snprintf(err, sizeof err, "Execute: exit code %d, stdout of %zu bytes: %.*s",
                 (int)r->exit_code, r->stdout.len, (int)(r->stdout.len < 60 ? r->stdout.len : 60),
                 r->stdout.data ? (const char *)r->stdout.data : "");
        tally_error(t, err);
    } else {
        t->ok++;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return ok;
}

/* grpc.health.v1.Health/Check of the server as a whole: SERVING. */
static bool grpc_health_checked(struct gclient *g, char *err, size_t errlen)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *m;
    if (gclient_call(g, "/grpc.health.v1.Health/Check", &req.base,
                     &grpc__health__v1__health_check_response__descriptor, &m, err, errlen) != 0)
        return false;
    int status = ((const Grpc__Health__V1__HealthCheckResponse *)m)->status;
    protobuf_c_message_free_unpacked(m, NULL);
    if (status != GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING) {
        snprintf(err, errlen, "Health/Check: status %d, not SERVING", status);
        return false;
    }
    return true;
}

#define GVR_MAX_ROUNDS 32

typedef struct {
    double rest_p50, rest_p90, grpc_p50, grpc_p90; /* the best (least) of the rounds */
    double ratio[GVR_MAX_ROUNDS]; /* each round's gRPC p50 over the same round's /execute p50 */
    int rounds;
} grpc_vs_rest;

/* The median of the rounds' paired ratios: a round the machine slowed weighs on both of its
 * series alike, and one odd round does not decide it. */
static double gvr_ratio(grpc_vs_rest *g)
{
    double v[GVR_MAX_ROUNDS];
    int n = g->rounds;
    memcpy(v, g->ratio, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One call of `echo hi` through another front than /execute: true when it answered as
 * expected (else counted in t). */
typedef bool (*front_call)(void *front, tally *t);

/* `echo hi` by REST (POST /execute on one kept-alive connection) and by another front (call
 * on its own connection), sequentially, in turns: each round a series of `iters` REST calls
 * then as many of the other's, after `warm` of each. Each series' p50 and p90, the best of
 * the rounds (the other's in the grpc fields); and each round's ratio of the two p50s, for
 * their median (gvr_ratio). */
static void measure_vs_rest(const target *tg, const char *name, front_call call, void *front,
                            int rounds, int warm, int iters, grpc_vs_rest *res, tally *rest_t,
                            tally *other_t)
{
    memset(res, 0, sizeof *res);
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    tally warm_r = {0}, warm_o = {0};
    for (int i = 0; i < warm && !g_interrupted; i++) {
        do_checked(&c, &REQ_EXEC, &warm_r);
        call(front, &warm_o);
    }
    /* Warm-up errors count, its successes do not. */
    tally_merge(rest_t, &warm_r);
    rest_t->ok -= warm_r.ok;
    tally_merge(other_t, &warm_o);
    other_t->ok -= warm_o.ok;
    if (rounds > GVR_MAX_ROUNDS)
        rounds = GVR_MAX_ROUNDS;
    for (int r = 0; r < rounds && !g_interrupted; r++) {
        samples rs = {0}, os = {0};
        for (int i = 0; i < iters && !g_interrupted; i++) {
            double t0 = now_ms();
            if (do_checked(&c, &REQ_EXEC, rest_t))
                samples_push(&rs, now_ms() - t0);
        }
        for (int i = 0; i < iters && !g_interrupted; i++) {
            double t0 = now_ms();
            if (call(front, other_t))
                samples_push(&os, now_ms() - t0);
        }
        samples_sort(&rs);
        samples_sort(&os);
        if (rs.n && os.n) {
            double v[4] = {pct(&rs, 50), pct(&rs, 90), pct(&os, 50), pct(&os, 90)};
            fprintf(stderr, "sbxd-bench:   round %d: /execute p50 %.3f ms, %s p50 %.3f ms (%.2f)\n",
                    r + 1, v[0], name, v[2], v[2] / v[0]);
            double *best[4] = {&res->rest_p50, &res->rest_p90, &res->grpc_p50, &res->grpc_p90};
            for (int k = 0; k < 4; k++)
                if (res->rounds == 0 || v[k] < *best[k])
                    *best[k] = v[k];
            res->ratio[res->rounds++] = v[2] / v[0];
        }
        samples_free(&rs);
        samples_free(&os);
    }
    conn_free(&c);
}

static bool grpc_call(void *front, tally *t)
{
    return grpc_exec_checked(front, t);
}

/* gRPC's Execute (on one HTTP/2 connection) against /execute. */
static void measure_grpc_vs_rest(const target *tg, const target *gt, int rounds, int warm,
                                 int iters, grpc_vs_rest *res, tally *rest_t, tally *grpc_t)
{
    memset(res, 0, sizeof *res);
    char err[240];
    struct gclient *g = grpc_open(gt, err, sizeof err);
    if (!g) {
        tally_error(grpc_t, err);
        return;
    }
    measure_vs_rest(tg, "gRPC", grpc_call, g, rounds, warm, iters, res, rest_t, grpc_t);
    gclient_close(g);
}

static bool mcp_call(void *front, tally *t)
{
    return do_checked(front, &REQ_MCP_CALL, t);
}

/* MCP's tools/call run_command (on a kept-alive connection with its session) against
 * /execute. */
static void measure_mcp_vs_rest(const target *tg, int rounds, int warm, int iters,
                                grpc_vs_rest *res, tally *rest_t, tally *mcp_t)
{
    memset(res, 0, sizeof *res);
    conn m;
    conn_init(&m, tg, IO_TIMEOUT_S);
    if (do_checked(&m, &REQ_MCP_INIT, mcp_t) && m.mcp_session[0]) {
        mcp_t->ok--;
        measure_vs_rest(tg, "MCP", mcp_call, &m, rounds, warm, iters, res, rest_t, mcp_t);
    } else if (!m.mcp_session[0]) {
        tally_error(mcp_t, "initialize answered no Mcp-Session-Id");
    }
    conn_free(&m);
}

/* Exact edits of one 1 MiB file: POST /files/{path}?edit, one request each, against the same
 * edit made by `sed -i` through /execute, in turns (each toggles a marker, so every request
 * finds its text once). Latencies in ms into res; -1 with err at the first failure. */
typedef struct {
    samples edit, sed;
} edit_result;

static int measure_edits(const target *tg, int n, edit_result *res, char *err, size_t errlen)
{
    static const char *const EDIT = "{\"old\":\"MARK-A\",\"new\":\"MARK-B\"}";
    static const char *const SED = "{\"command\":\"sed -i s/MARK-B/MARK-A/ bench-edit.txt\"}";
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    int status = 0, rc = -1;
    if (http_do(&c, "POST", "/execute",
                "{\"command\":\"{ head -c 524288 /dev/zero | tr '\\\\0' x; echo MARK-A; "
                "head -c 524288 /dev/zero | tr '\\\\0' y; } > bench-edit.txt\"}",
                &status) != 0 ||
        status != 200) {
        setmsg(err, errlen, "making the file: %s (HTTP %d)", c.err, status);
        goto out;
    }
    for (int i = 0; i < n && !g_interrupted; i++) {
        /* The edit turns A into B, sed B back into A: each finds the marker the other left. */
        double t0 = now_ms();
        if (http_do(&c, "POST", "/files/bench-edit.txt?edit", EDIT, &status) != 0 ||
            status != 200) {
            setmsg(err, errlen, "edit %d: %s (HTTP %d) %.100s", i, c.err, status,
                   c.body ? c.body : "");
            goto out;
        }
        samples_push(&res->edit, now_ms() - t0);
        t0 = now_ms();
        if (http_do(&c, "POST", "/execute", SED, &status) != 0 || status != 200 || !c.body ||
            !strstr(c.body, "\"exit_code\":0")) {
            setmsg(err, errlen, "sed %d: %s (HTTP %d) %.100s", i, c.err, status,
                   c.body ? c.body : "");
            goto out;
        }
        samples_push(&res->sed, now_ms() - t0);
    }
    http_do(&c, "DELETE", "/files/bench-edit.txt", NULL, &status);
    samples_sort(&res->edit);
    samples_sort(&res->sed);
    rc = 0;
out:
    conn_free(&c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* the proxy and the terminal                                               */

static int free_port(void);

#define NET_ROUNDS 3
#define NET_BIG    (256ull << 20)
#define NET_KEYS   300

typedef struct {
    double rps_direct[2], rps_proxy[2], rps_relay[2];    /* 1 and 16 connections: the median
                                                          * round's */
    double ratio[2], relay_ratio[2];                     /* ÷ direct, median rounds */
    double down_direct, down_proxy, up_direct, up_proxy; /* MB/s, best of the rounds */
    double down_relay, up_relay;
    long grew_kb;     /* sbxd's RSS during proxied transfers */
    samples ws, post; /* keystroke to echo, ms */
    bool ok, tty_ok;
} net_result;

/* A background process of sbxd's from a JSON body; its id into id. */
static int start_process(const target *tg, const char *body, char *id, size_t idlen, char *err,
                         size_t errlen)
{
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    int status = 0, rc = -1;
    if (http_do(&c, "POST", "/processes", body, &status) != 0 || status != 201 || !c.body) {
        setmsg(err, errlen, "POST /processes: %s (HTTP %d) %.120s", c.err, status,
               c.body ? c.body : "");
    } else {
        const char *p = strstr(c.body, "\"id\":\"");
        if (p && sscanf(p + 6, "%24[0-9a-f]", id) == 1 && strlen(id) < idlen)
            rc = 0;
        else
            setmsg(err, errlen, "no id in %.120s", c.body);
    }
    conn_free(&c);
    return rc;
}

static void stop_process(const target *tg, const char *id)
{
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    char path[64];
    int status;
    snprintf(path, sizeof path, "/processes/%s", id);
    http_do(&c, "DELETE", path, NULL, &status);
    conn_free(&c);
}

static double median3(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* A plain relay to the upstream on port (bench_net.c) in a child of the bench's, and its
 * target; -1 when it could not start (the relay rows are then left out). */
static pid_t start_relay(int port, target *relay)
{
    int fd = bench_listen(0, 1024);
    struct sockaddr_in sin;
    socklen_t len = sizeof sin;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(bench_relay_serve(fd, port));
    }
    close(fd);
    if (pid > 0)
        target_local(relay, ntohs(sin.sin_port));
    return pid;
}

static void stop_relay(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int measure_net(const target *tg, pid_t pid, bool quick, net_result *res, char *err,
                       size_t errlen)
{
    char self[4096], body[4400], id[32], path[64];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        setmsg(err, errlen, "cannot name sbxd-bench itself");
        return -1;
    }
    self[sl] = '\0';
    int port = free_port();
    snprintf(body, sizeof body, "{\"argv\":[\"%s\",\"--upstream\",\"%d\"]}", self, port);
    if (start_process(tg, body, id, sizeof id, err, errlen) < 0)
        return -1;
    target direct, relay;
    target_local(&direct, port);
    /* The plain relay (bench_net.c), a child of the bench's own: the floor of any proxy. */
    pid_t relay_pid = start_relay(port, &relay);
    char small[64];
    snprintf(small, sizeof small, "/proxy/%d/small", port);
    reqspec via = {"GET", small, NULL, "ok"}, plain = {"GET", "/small", NULL, "ok"};
    /* Up when the proxy reaches it. */
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    int status = 0;
    for (int i = 0; i < 200 && !(http_do(&c, "GET", small, NULL, &status) == 0 && status == 200);
         i++)
        sleep_us(20000);
    conn_free(&c);
    if (status != 200) {
        setmsg(err, errlen, "the upstream never answered through the proxy (HTTP %d)", status);
        stop_relay(relay_pid);
        stop_process(tg, id);
        return -1;
    }
    double secs = quick ? 1.0 : 3.0;
    int rounds = quick ? 1 : NET_ROUNDS;
    const int conns[2] = {1, 16};
    for (int k = 0; k < 2; k++) {
        double rd[NET_ROUNDS], rp[NET_ROUNDS], rr[NET_ROUNDS], rl[NET_ROUNDS] = {0},
                                                               rlr[NET_ROUNDS] = {0};
        for (int r = 0; r < rounds && !g_interrupted; r++) {
            load_result a, b, l = {0};
            run_load(&direct, &plain, conns[k], secs, &a);
            if (relay_pid > 0)
                run_load(&relay, &plain, conns[k], secs, &l);
            run_load(tg, &via, conns[k], secs, &b);
            if (a.t.errors || b.t.errors || l.t.errors)
                fprintf(stderr, "sbxd-bench: net: %lu, %lu and %lu errors, first: %s%s%s\n",
                        a.t.errors, l.t.errors, b.t.errors, a.t.first, l.t.first, b.t.first);
            rd[r] = a.rps;
            rp[r] = b.rps;
            rl[r] = l.rps;
            rr[r] = a.rps > 0 ? b.rps / a.rps : 0;
            rlr[r] = a.rps > 0 ? l.rps / a.rps : 0;
        }
        res->ratio[k] = median3(rr, rounds);
        for (int r = 0; r < rounds; r++)
            if (rr[r] == res->ratio[k]) {
                res->rps_direct[k] = rd[r];
                res->rps_proxy[k] = rp[r];
            }
        res->relay_ratio[k] = median3(rlr, rounds);
        for (int r = 0; r < rounds; r++)
            if (rlr[r] == res->relay_ratio[k])
                res->rps_relay[k] = rl[r];
    }
    /* 256 MiB each way, in turns; sbxd's RSS sampled while it carries them. */
    rss_sampler rs = {.pid = pid};
    long base = vmrss_kb(pid);
    rs.peak_kb = base;
    char big[64], pbig[64], pup[64];
    snprintf(big, sizeof big, "/big/%llu", (unsigned long long)NET_BIG);
    snprintf(pbig, sizeof pbig, "/proxy/%d/big/%llu", port, (unsigned long long)NET_BIG);
    snprintf(pup, sizeof pup, "/proxy/%d/up", port);
    for (int r = 0; r < rounds && !g_interrupted; r++) {
        uint64_t got;
        double t;
        if (xfer_download(&direct, big, &got, &t, err, errlen) == 200 && got == NET_BIG &&
            NET_BIG / 1e6 / t > res->down_direct)
            res->down_direct = NET_BIG / 1e6 / t;
        pthread_create(&rs.th, NULL, rss_sample_main, &rs);
        int st = xfer_download(tg, pbig, &got, &t, err, errlen);
        rs.stop = true;
        pthread_join(rs.th, NULL);
        rs.stop = false;
        if (st == 200 && got == NET_BIG && NET_BIG / 1e6 / t > res->down_proxy)
            res->down_proxy = NET_BIG / 1e6 / t;
        if (xfer_upload(&direct, "PUT", "/up", false, NULL, NET_BIG, &t, err, errlen) == 200 &&
            NET_BIG / 1e6 / t > res->up_direct)
            res->up_direct = NET_BIG / 1e6 / t;
        pthread_create(&rs.th, NULL, rss_sample_main, &rs);
        st = xfer_upload(tg, "PUT", pup, false, NULL, NET_BIG, &t, err, errlen);
        rs.stop = true;
        pthread_join(rs.th, NULL);
        rs.stop = false;
        if (st == 200 && NET_BIG / 1e6 / t > res->up_proxy)
            res->up_proxy = NET_BIG / 1e6 / t;
        if (relay_pid <= 0)
            continue;
        if (xfer_download(&relay, big, &got, &t, err, errlen) == 200 && got == NET_BIG &&
            NET_BIG / 1e6 / t > res->down_relay)
            res->down_relay = NET_BIG / 1e6 / t;
        if (xfer_upload(&relay, "PUT", "/up", false, NULL, NET_BIG, &t, err, errlen) == 200 &&
            NET_BIG / 1e6 / t > res->up_relay)
            res->up_relay = NET_BIG / 1e6 / t;
    }
    res->grew_kb = rs.peak_kb - base;
    stop_relay(relay_pid);
    stop_process(tg, id);
    res->ok = res->down_proxy > 0 && res->up_proxy > 0;
    /* The terminal: a key to `cat` on a pty, until its echo comes back, over the WebSocket
     * and over POST stdin with a followed output stream, in turns. */
    if (start_process(tg, "{\"command\":\"cat\",\"pty\":{\"cols\":80,\"rows\":24}}", id, sizeof id,
                      err, errlen) < 0)
        return 0;
    int port_sbxd = ntohs(((const struct sockaddr_in *)&tg->addr)->sin_port);
    int keys = quick ? 50 : NET_KEYS;
    double *lat = calloc((size_t)keys, sizeof *lat);
    for (int r = 0; r < 2 && lat; r++) {
        int n = bench_tty_echo(port_sbxd, id, keys / 2, lat, err, errlen);
        for (int i = 0; i < n; i++)
            samples_push(&res->ws, lat[i]);
        n = bench_stdin_echo(port_sbxd, id, keys / 2, lat, err, errlen);
        for (int i = 0; i < n; i++)
            samples_push(&res->post, lat[i]);
    }
    free(lat);
    snprintf(path, sizeof path, "%s", id);
    stop_process(tg, path);
    samples_sort(&res->ws);
    samples_sort(&res->post);
    res->tty_ok = res->ws.n >= (size_t)keys / 2 && res->post.n >= (size_t)keys / 2;
    return 0;
}

/* sbxd's RSS while n gRPC connections are open and idle (for a second), each having had one
 * Health/Check answered; *base_kb its RSS just before they opened. -1 with err when one
 * could not be made. */
static long idle_grpc_rss(const target *gt, pid_t pid, int n, long *base_kb, char *err,
                          size_t errlen)
{
    struct gclient **gs = calloc((size_t)n, sizeof *gs);
    if (!gs) {
        warnx_("out of memory");
        exit(1);
    }
    long kb = -1;
    *base_kb = vmrss_kb(pid);
    int made = 0;
    for (; made < n && !g_interrupted; made++) {
        char why[200];
        gs[made] = grpc_open(gt, why, sizeof why);
        if (!gs[made] || !grpc_health_checked(gs[made], why, sizeof why)) {
            setmsg(err, errlen, "gRPC connection %d: %s", made + 1, why);
            made++;
            goto out;
        }
    }
    sleep_us(1000000);
    kb = vmrss_kb(pid);
out:
    for (int i = 0; i < made; i++)
        gclient_close(gs[i]);
    free(gs);
    return kb;
}

/* ------------------------------------------------------------------------ */
/* the sbxd process                                                          */

static pid_t g_sbxd_pid = -1;
/* sbxd's log (its stderr, JSON lines), appended to by every sbxd started: where the bench
 * learns the port its gRPC listener got, and why a start failed. Outside the workspace. */
static char g_log_path[96];
/* --gvisor: sbxd is started inside runsc as the gvisor tier starts it (g_runsc_root: the
 * directory runsc keeps its state in, and the sandboxes' TMPDIR), with the floor helper
 * beside it when g_helper_port is set. */
static char g_runsc_root[96];
static int g_helper_port;
static char g_self[4096]; /* sbxd-bench itself: the helper inside the sandbox */
static double g_ready_timeout_ms = 5000;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sin = {0};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

static void redirect_std_to_null(void)
{
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(nul, 2);
        if (nul > 2)
            close(nul);
    }
}

/* sbxd on 127.0.0.1:port, its gRPC listener on a port of its choosing (never the default
 * 9090, which a second sbxd or another daemon on the host would collide on): the listener is
 * on in every measurement, as it is by default. `extra`: more flags (NULL-terminated), or
 * NULL. */
#define SBXD_EXTRA_MAX 8
static pid_t start_sbxd(const char *path, int port, const char *ws, const char *const *extra)
{
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    /* No warm kernel unless `extra` asks for one (a later flag wins): the other rows measure
     * sbxd alone, not a Python kernel starting beside it. */
    char *sbxd_argv[12 + SBXD_EXTRA_MAX] = {
        (char *)path,          (char *)"--listen",        listen,      (char *)"--grpc-listen",
        (char *)"127.0.0.1:0", (char *)"--workspace",     (char *)ws,  (char *)"--log-format",
        (char *)"json",        (char *)"--warm-contexts", (char *)"0", NULL};
    for (int i = 0; extra && extra[i] && i < SBXD_EXTRA_MAX; i++)
        sbxd_argv[11 + i] = (char *)extra[i];
    /* Under gVisor: runsc do with the gvisor tier's flags (docs/testing-gvisor.md), running a
     * shell that starts the helper (when asked) and then becomes sbxd, pid 1 of the sandbox. */
    char rootarg[128], hport[16];
    snprintf(rootarg, sizeof rootarg, "--root=%s/root", g_runsc_root);
    snprintf(hport, sizeof hport, "%d", g_helper_port);
    char *wrap[] = {(char *)"runsc",
                    rootarg,
                    (char *)"--rootless",
                    (char *)"--ignore-cgroups",
                    (char *)"--network=host",
                    (char *)"--platform=ptrace",
                    (char *)"--file-access=shared",
                    (char *)"do",
                    (char *)"-force-overlay=false",
                    (char *)"-quiet",
                    (char *)"/bin/sh",
                    (char *)"-c",
                    (char *)"h=$1; p=$2; d=$3; shift 3; [ \"$p\" = 0 ] || \"$h\" "
                            "--spawn-helper \"$p\" \"$d\" & exec \"$@\"",
                    (char *)"sh",
                    g_self,
                    hport,
                    (char *)ws};
    const size_t nwrap = sizeof wrap / sizeof wrap[0];
    char *argv[sizeof wrap / sizeof wrap[0] + 12 + SBXD_EXTRA_MAX] = {0};
    size_t k = 0;
    if (g_runsc_root[0])
        for (size_t i = 0; i < nwrap; i++)
            argv[k++] = wrap[i];
    for (size_t i = 0; sbxd_argv[i]; i++)
        argv[k++] = sbxd_argv[i];
    pid_t pid = fork();
    if (pid < 0) {
        warnx_("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        redirect_std_to_null();
        int log = open(g_log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log >= 0)
            dup2(log, 2);
        if (g_runsc_root[0]) {
            setenv("TMPDIR", g_runsc_root, 1);
            execvp(argv[0], argv);
        }
        execv(path, argv);
        _exit(127);
    }
    g_sbxd_pid = pid;
    return pid;
}

static const char *describe_status(int st, char *buf, size_t n)
{
    if (WIFEXITED(st))
        snprintf(buf, n, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, n, "wait status %#x", st);
    return buf;
}

/* Is the child still running? If not, *st gets its status. */
static bool child_alive(pid_t pid, int *st)
{
    pid_t r = waitpid(pid, st, WNOHANG);
    if (r == pid) {
        if (pid == g_sbxd_pid)
            g_sbxd_pid = -1;
        return false;
    }
    return true;
}

/* SIGTERM, wait up to 15 s, then SIGKILL. Returns the wait status. */
static int stop_sbxd(pid_t pid, double *stop_ms)
{
    int st = 0;
    double t0 = now_ms();
    if (kill(pid, SIGTERM) != 0 && errno == ESRCH) {
        waitpid(pid, &st, 0);
    } else {
        for (;;) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            if (r == pid)
                break;
            if (r < 0 && errno != EINTR)
                break;
            if (now_ms() - t0 > 15000) {
                warnx_("sbxd pid %d ignored SIGTERM for 15 s; sending SIGKILL", (int)pid);
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                break;
            }
            sleep_us(200);
        }
    }
    if (stop_ms)
        *stop_ms = now_ms() - t0;
    if (pid == g_sbxd_pid)
        g_sbxd_pid = -1;
    return st;
}

/*
 * Polls connect + GET /healthz until a 200. Returns 0 and the time since t0,
 * or -1 if sbxd exited or did not become ready within timeout_ms.
 */
static int wait_ready(pid_t pid, int port, double t0, double timeout_ms, double *ready_ms,
                      char *why, size_t whyn)
{
    target tg;
    target_local(&tg, port);
    conn c;
    conn_init(&c, &tg, 2);
    int rc = -1;
    for (;;) {
        int st = 0, status = 0;
        if (g_interrupted) {
            snprintf(why, whyn, "interrupted");
            break;
        }
        if (!child_alive(pid, &st)) {
            char d[80];
            snprintf(why, whyn, "sbxd exited before it was ready (%s)",
                     describe_status(st, d, sizeof d));
            break;
        }
        if (http_do(&c, "GET", "/healthz", NULL, &status) == 0 && status == 200) {
            *ready_ms = now_ms() - t0;
            rc = 0;
            break;
        }
        if (now_ms() - t0 > timeout_ms) {
            snprintf(why, whyn, "no 200 on /healthz within %.0f ms (last: %s)", timeout_ms,
                     c.err[0] ? c.err : "non-200");
            break;
        }
        conn_close(&c);
        sleep_us(200);
    }
    conn_free(&c);
    return rc;
}

/* isolation.tree_kill from /healthz (the backend the measured sbxd uses), or "?". */
static void tree_kill_of(const target *tg, char *out, size_t n)
{
    copy_str(out, n, "?");
    conn c;
    conn_init(&c, tg, IO_TIMEOUT_S);
    int status = 0;
    if (http_do(&c, "GET", "/healthz", NULL, &status) == 0 && status == 200 && c.body) {
        const char *k = strstr(c.body, "\"tree_kill\":\"");
        if (k) {
            k += strlen("\"tree_kill\":\"");
            size_t len = strcspn(k, "\"");
            snprintf(out, n, "%.*s", (int)(len < 32 ? len : 32), k);
        }
    }
    conn_free(&c);
}

/* The whole log, NUL-terminated (NULL when there is none). */
static char *log_read(void)
{
    FILE *f = fopen(g_log_path, "re");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (cap - len < 65536)
            buf = xrealloc(buf, cap = cap + 65536 + cap / 2);
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* The gRPC port of the sbxd on REST port `port`, from its "listening" log line: the port, 0
 * when the line says the listener is off, -1 when the line is not (yet) there. */
static int log_grpc_port(int port)
{
    char *log = log_read();
    if (!log)
        return -1;
    char want[32];
    snprintf(want, sizeof want, ",\"port\":%d,", port);
    int found = -1;
    for (char *line = log; *line && found < 0;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        const char *g;
        if (strstr(line, "\"event\":\"listening\"") && strstr(line, want) &&
            (g = strstr(line, "\"grpc_port\":")) != NULL)
            found = atoi(g + strlen("\"grpc_port\":")); /* null: 0 */
        line = nl ? nl + 1 : line + strlen(line);
    }
    free(log);
    return found;
}

/* The last error line sbxd logged, as a hint when a start fails. */
static void log_warn_last_error(void)
{
    char *log = log_read();
    if (!log)
        return;
    char *last = NULL;
    for (char *line = log; *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(line, "\"level\":\"error\""))
            last = line;
        line = nl ? nl + 1 : line + strlen(line);
    }
    if (last)
        warnx_("sbxd logged: %.400s", last);
    free(log);
}

/* Start sbxd (with the flags extra, see start_sbxd) on a free port and wait for its first 200 on
 * /healthz. Its pid, with the port and the milliseconds it took, and when grpc_port is not NULL,
 * the port of its gRPC listener (from its "listening" line, which may follow the first 200 by a
 * moment); or -1, warned about, with the sbxd (if any) stopped. */
static pid_t start_ready(const char *path, const char *ws, const char *const *extra, int *port,
                         double *ready_ms, int *grpc_port)
{
    *port = free_port();
    if (*port <= 0) {
        warnx_("cannot find a free port");
        return -1;
    }
    double t0 = now_ms();
    pid_t pid = start_sbxd(path, *port, ws, extra);
    if (pid < 0)
        return -1;
    char why[300];
    if (wait_ready(pid, *port, t0, g_ready_timeout_ms, ready_ms, why, sizeof why) != 0) {
        warnx_("%s", why);
        log_warn_last_error();
        if (g_sbxd_pid > 0)
            stop_sbxd(pid, NULL);
        return -1;
    }
    if (grpc_port) {
        double t1 = now_ms();
        while ((*grpc_port = log_grpc_port(*port)) < 0 && now_ms() - t1 < 2000 && !g_interrupted)
            sleep_us(1000);
        if (*grpc_port <= 0) {
            warnx_("sbxd's log (%s) %s", g_log_path,
                   *grpc_port ? "has no \"listening\" line" : "says its gRPC listener is off");
            stop_sbxd(pid, NULL);
            return -1;
        }
    }
    return pid;
}

static long vmrss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* First line of `path --version`. */
static void sbxd_version(const char *path, char *out, size_t n)
{
    snprintf(out, n, "unknown");
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0)
            dup2(nul, 2);
        char *argv[] = {(char *)path, (char *)"--version", NULL};
        execv(path, argv);
        _exit(127);
    }
    close(fds[1]);
    char buf[256];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fds[0], buf + len, sizeof buf - 1 - len);
        if (r > 0) {
            len += (size_t)r;
            if (len == sizeof buf - 1)
                break;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    buf[len] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    if (len > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        copy_str(out, n, buf);
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ------------------------------------------------------------------------ */
/* Python kernels                                                           */

/*
 * The client sbxd's Python contexts are measured against: jupyter_client's BlockingKernelClient
 * (Debian's python3-jupyter-client) on a python3 kernel of the same kernelspec, which its
 * KernelManager starts at the nice value argv[1] (sbxd's kernels run at the commands' nice).
 * Each execution is execute_interactive(), which sends the execute_request and returns once
 * the kernel's iopub status idle for it and its execute_reply are in: what sbxd waits for
 * before it answers. It prints "ready PID" once the kernel answered and `x = 0` ran; then,
 * for each line "N" on stdin, a line of N `x += 1` executions, each "round-trip:busy-idle" in
 * ms (the latter the span between the kernel's own busy and idle status messages, by their
 * header dates: the kernel's part of the round trip); for "x", "x VALUE". At the end of stdin
 * it shuts its kernel down. "error: ..." on a failure (exit status 3: no jupyter_client).
 */
static const char JC_SCRIPT[] =
    "import os, sys, time\n"
    "def say(s):\n"
    "    sys.stdout.write(s + \"\\n\")\n"
    "    sys.stdout.flush()\n"
    "try:\n"
    "    from jupyter_client.manager import KernelManager\n"
    "except Exception as e:\n"
    "    say(\"error: no jupyter_client: %s\" % e)\n"
    "    sys.exit(3)\n"
    "nice = int(sys.argv[1])\n"
    "km = KernelManager(kernel_name=\"python3\")\n"
    "kc = None\n"
    "dates = []\n"
    "def hook(m):\n"
    "    if m[\"msg_type\"] == \"status\":\n"
    "        dates.append(m[\"header\"][\"date\"])\n"
    "def run(code, **kw):\n"
    "    del dates[:]\n"
    "    t0 = time.perf_counter()\n"
    "    r = kc.execute_interactive(code, timeout=60, output_hook=hook, **kw)\n"
    "    dt = (time.perf_counter() - t0) * 1e3\n"
    "    if r[\"content\"][\"status\"] != \"ok\":\n"
    "        raise RuntimeError(\"%s: status %s\" % (code, r[\"content\"][\"status\"]))\n"
    "    k = (dates[-1] - dates[0]).total_seconds() * 1e3 if len(dates) > 1 else -1\n"
    "    return dt, k, r\n"
    "try:\n"
    "    km.start_kernel(preexec_fn=(lambda: os.nice(nice)) if nice else None,\n"
    "                    extra_arguments=[\"--HistoryManager.enabled=False\"])\n"
    "    kc = km.client()\n"
    "    kc.start_channels()\n"
    "    kc.wait_for_ready(timeout=120)\n"
    "    run(\"x = 0\")\n"
    "    say(\"ready %d\" % km.provisioner.pid)\n"
    "    for line in iter(sys.stdin.readline, \"\"):\n"
    "        if line.strip() == \"x\":\n"
    "            r = run(\"pass\", user_expressions={\"v\": \"x\"})[2][\"content\"]\n"
    "            say(\"x \" + r[\"user_expressions\"][\"v\"][\"data\"][\"text/plain\"])\n"
    "            continue\n"
    "        say(\" \".join(\"%.4f:%.4f\" % run(\"x += 1\")[:2] for _ in range(int(line))))\n"
    "except Exception as e:\n"
    "    say(\"error: %s: %s\" % (type(e).__name__, e))\n"
    "    sys.exit(1)\n"
    "finally:\n"
    "    if kc:\n"
    "        kc.stop_channels()\n"
    "    if km.has_kernel:\n"
    "        km.shutdown_kernel(now=True)\n";

/* x += 1 rounds: each `iters` executions through sbxd and as many through jupyter_client, in
 * turns, which goes first swapped every round. */
#define PY_ROUNDS_MAX 8

typedef struct {
    char why[160];                    /* why there are no python rows ("" when there are) */
    char jc_why[160];                 /* why there is no jupyter_client row ("" when there is) */
    samples warm_create, cold_create; /* ms: POST /contexts {"language":"python"} */
    samples sbxd_exec, jc_exec;       /* ms: x += 1 round trips, every round's */
    samples jc_kernel;                /* ms: the kernel's busy -> idle in jupyter_client's */
    double ratio[PY_ROUNDS_MAX];      /* each round's sbxd p50 / jupyter_client p50 */
    int rounds;
    int nice;                           /* sbxd's kernels' nice value (and the other's) */
    long rss_fresh, rss_base, rss_idle; /* kB: sbxd before its first kernel, then before and
                                           with CTX_IDLE idle python contexts */
    bool ok;
} py_result;

static double median_of(const double *v, int n)
{
    double s[PY_ROUNDS_MAX];
    memcpy(s, v, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n == 0 ? 0 : n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The kernel processes (ipykernel_launcher) working in dir or below: a workspace of the
 * bench's, where the sbxds it starts there run their kernels (and the jupyter_client script
 * its own). Up to max of their pids into pids; returns how many there are. */
static int kernels_in(const char *dir, pid_t *pids, int max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    size_t dl = strlen(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], cwd[4096], cmd[4096];
        snprintf(path, sizeof path, "/proc/%ld/cwd", pid);
        ssize_t cl = readlink(path, cwd, sizeof cwd - 1);
        if (cl < (ssize_t)dl || strncmp(cwd, dir, dl) != 0 || (cl > (ssize_t)dl && cwd[dl] != '/'))
            continue;
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, cmd, sizeof cmd);
        close(fd);
        if (k > 0 && memmem(cmd, (size_t)k, "ipykernel_launcher", 18)) {
            if (n < max)
                pids[n] = (pid_t)pid;
            n++;
        }
    }
    closedir(d);
    return n;
}

/* No kernel may outlive the bench: waits up to 10 s for those started in dir to end (a
 * stopped sbxd kills its kernels without waiting for them), then kills those left. Returns
 * how many were left. */
static int kernels_reap(const char *dir)
{
    pid_t pids[64];
    int n = 0;
    for (double t0 = now_ms(); now_ms() - t0 < 10000;) {
        if ((n = kernels_in(dir, pids, 64)) == 0)
            return 0;
        sleep_us(50000);
    }
    for (int i = 0; i < n && i < 64; i++) {
        warnx_("kernel pid %d left running; killing it", (int)pids[i]);
        kill(pids[i], SIGKILL);
    }
    return n;
}

/* The jupyter_client script, running. */
typedef struct {
    pid_t pid;
    int in, out; /* its stdin, its stdout */
    char buf[1 << 16];
    size_t n, used; /* bytes in buf; those of the line handed out last */
} jc_child;

/* Starts the script in ws (its kernel's working directory too), with HOME (IPython's
 * directory) in home; its kernel is started as sbxd starts its own, IPython's history file
 * off. 0, or -1 with err. */
static int jc_start(jc_child *j, const char *ws, const char *home, int nice, char *err,
                    size_t errlen)
{
    memset(j, 0, sizeof *j);
    j->pid = -1;
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0) {
        setmsg(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(from, O_CLOEXEC) != 0) {
        setmsg(err, errlen, "pipe: %s", strerror(errno));
        close(to[0]);
        close(to[1]);
        return -1;
    }
    char nice_s[16];
    snprintf(nice_s, sizeof nice_s, "%d", nice);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        dup2(to[0], 0);
        dup2(from[1], 1);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0)
            dup2(nul, 2); /* the kernel's start-up chatter */
        if (chdir(ws) != 0)
            _exit(127);
        setenv("HOME", home, 1);
        /* As sbxd's kernels have it: no debugpy warning about frozen modules at start. */
        setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1", 1);
        char *argv[] = {(char *)"/usr/bin/python3", (char *)"-c", (char *)JC_SCRIPT, nice_s, NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    if (pid < 0) {
        setmsg(err, errlen, "fork: %s", strerror(errno));
        close(to[1]);
        close(from[0]);
        return -1;
    }
    j->pid = pid;
    j->in = to[1];
    j->out = from[0];
    return 0;
}

/* The script's next line (NUL-terminated, valid until the next call), within timeout_ms. NULL
 * with err on its end or a timeout; its own "error: ..." line is handed out as any other. */
static char *jc_line(jc_child *j, int timeout_ms, char *err, size_t errlen)
{
    memmove(j->buf, j->buf + j->used, j->n - j->used);
    j->n -= j->used;
    j->used = 0;
    double until = now_ms() + timeout_ms;
    for (;;) {
        char *nl = memchr(j->buf, '\n', j->n);
        if (nl) {
            *nl = '\0';
            j->used = (size_t)(nl - j->buf) + 1;
            return j->buf;
        }
        if (j->n == sizeof j->buf - 1) {
            setmsg(err, errlen, "jupyter_client script: a line longer than %zu bytes", j->n);
            return NULL;
        }
        int left = (int)(until - now_ms());
        struct pollfd p = {.fd = j->out, .events = POLLIN};
        int r = left > 0 ? poll(&p, 1, left) : 0;
        if (r < 0 && errno == EINTR && !g_interrupted)
            continue;
        if (r <= 0) {
            setmsg(err, errlen, "jupyter_client script: no answer within %d s", timeout_ms / 1000);
            return NULL;
        }
        ssize_t k = read(j->out, j->buf + j->n, sizeof j->buf - 1 - j->n);
        if (k < 0 && errno == EINTR && !g_interrupted)
            continue;
        if (k <= 0) {
            setmsg(err, errlen, "jupyter_client script: ended (%s)",
                   k < 0 ? strerror(errno) : "its output closed");
            return NULL;
        }
        j->n += (size_t)k;
    }
}

static int jc_say(jc_child *j, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(j->in, s, n);
        if (w < 0 && errno == EINTR && !g_interrupted)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* End of its stdin: it shuts its kernel down and exits (killed after 20 s). */
static void jc_stop(jc_child *j)
{
    if (j->pid <= 0)
        return;
    close(j->in);
    int st;
    double t0 = now_ms();
    while (waitpid(j->pid, &st, WNOHANG) == 0) {
        if (now_ms() - t0 > 20000) {
            warnx_("the jupyter_client script did not exit within 20 s; killing it");
            kill(j->pid, SIGKILL);
            waitpid(j->pid, &st, 0);
            break;
        }
        sleep_us(10000);
    }
    close(j->out);
    j->pid = -1;
}

/* One round of n x += 1 through the script, its samples appended. 0, or -1 with err. */
static int jc_round(jc_child *j, int n, samples *rt, samples *kt, char *err, size_t errlen)
{
    char cmd[32];
    snprintf(cmd, sizeof cmd, "%d\n", n);
    if (jc_say(j, cmd) != 0) {
        setmsg(err, errlen, "jupyter_client script: write: %s", strerror(errno));
        return -1;
    }
    char *line = jc_line(j, 60000 + n * 1000, err, errlen);
    if (!line)
        return -1;
    if (strncmp(line, "error:", 6) == 0) {
        setmsg(err, errlen, "jupyter_client script: %.180s", line);
        return -1;
    }
    int got = 0;
    for (char *p = line; *p;) {
        char *end;
        double a = strtod(p, &end);
        if (end == p || *end != ':')
            break;
        double b = strtod(end + 1, &p);
        samples_push(rt, a);
        if (kt && b >= 0)
            samples_push(kt, b);
        got++;
        while (*p == ' ')
            p++;
    }
    if (got != n) {
        setmsg(err, errlen, "jupyter_client script: %d of %d samples: %.80s", got, n, line);
        return -1;
    }
    return 0;
}

/* warm_ready from GET /kernels (-1: none there). */
static int warm_ready_of(conn *c)
{
    int status = 0;
    if (http_do(c, "GET", "/kernels", NULL, &status) != 0 || status != 200)
        return -1;
    const char *k = strstr(c->body, "\"warm_ready\":");
    return k ? atoi(k + strlen("\"warm_ready\":")) : -1;
}

/* Whether GET /kernels lists a python kernel; why not in why (a failed GET, or none). */
static bool has_python_kernel(conn *c, char *why, size_t whylen)
{
    int status = 0;
    if (http_do(c, "GET", "/kernels", NULL, &status) != 0 || status != 200) {
        setmsg(why, whylen, "GET /kernels: %d", status);
        return false;
    }
    if (!strstr(c->body, "\"language\":\"python\"")) {
        setmsg(why, whylen, "no python kernel (python3-ipykernel?)");
        return false;
    }
    return true;
}

/* Until GET /kernels says a warm kernel is ready (a start takes ~1 s; 60 s at most). */
static bool wait_warm(conn *c)
{
    for (double t0 = now_ms(); now_ms() - t0 < 60000 && !g_interrupted; sleep_us(20000))
        if (warm_ready_of(c) >= 1)
            return true;
    return false;
}

/* POST /contexts {"language":"python"}: its id and the ms it took; -1 with err. */
static double py_create(conn *c, char *id, size_t idlen, char *err, size_t errlen)
{
    int status = 0;
    double t0 = now_ms();
    if (http_do(c, "POST", "/contexts", "{\"language\":\"python\"}", &status) != 0 ||
        status != 201 || !json_id(c->body, id, idlen)) {
        setmsg(err, errlen, "POST /contexts (python): %d %s %.120s", status, c->err,
               c->body ? c->body : "");
        return -1;
    }
    return now_ms() - t0;
}

static bool py_delete(conn *c, const char *id)
{
    char path[128];
    int status = 0;
    snprintf(path, sizeof path, "/contexts/%s", id);
    return http_do(c, "DELETE", path, NULL, &status) == 0 && status == 200;
}

/* The nice value sbxd's kernels run at (any of those in ws: all run as commands do). */
static int kernel_nice(const char *ws)
{
    pid_t ks[1];
    if (kernels_in(ws, ks, 1) < 1)
        return 0;
    errno = 0;
    int v = getpriority(PRIO_PROCESS, (id_t)ks[0]);
    return errno ? 0 : v;
}

/* POST /contexts/{id}/execute of body, checked for status ok and, if not NULL, expect. */
static bool py_exec(conn *c, const char *path, const char *body, const char *expect, char *err,
                    size_t errlen)
{
    int status = 0;
    if (http_do(c, "POST", path, body, &status) != 0 || status != 200 ||
        !strstr(c->body, "\"status\":\"ok\"") || (expect && !strstr(c->body, expect))) {
        setmsg(err, errlen, "POST %s %s: %d %s %.120s", path, body, status, c->err,
               c->body ? c->body : "");
        return false;
    }
    return true;
}

/* On the sbxd with --warm-contexts 0: n cold POST /contexts (each deleted after); its RSS
 * before the first, then before and with CTX_IDLE idle python contexts. 1 (res->why) when
 * it has no python kernel, 0, or -1 with err. */
static int py_cold(conn *c, pid_t pid, int n, py_result *res, char *err, size_t errlen)
{
    char id[64], ids[CTX_IDLE][64];
    if (!has_python_kernel(c, res->why, sizeof res->why))
        return 1;
    sleep_us(100000);
    res->rss_fresh = vmrss_kb(pid);
    fprintf(stderr, "sbxd-bench: python: %d cold POST /contexts (--warm-contexts 0) ...\n", n);
    for (int i = 0; i < n && !g_interrupted; i++) {
        double dt = py_create(c, id, sizeof id, err, errlen);
        if (dt < 0)
            return -1;
        samples_push(&res->cold_create, dt);
        if (!py_delete(c, id)) {
            setmsg(err, errlen, "DELETE /contexts/%s: %s", id, c->err);
            return -1;
        }
    }
    sleep_us(200000);
    res->rss_base = vmrss_kb(pid);
    int made = 0;
    for (; made < CTX_IDLE && !g_interrupted; made++)
        if (py_create(c, ids[made], sizeof ids[made], err, errlen) < 0)
            break;
    sleep_us(500000);
    res->rss_idle = vmrss_kb(pid);
    for (int i = 0; i < made; i++)
        py_delete(c, ids[i]);
    if (made < CTX_IDLE && !g_interrupted) {
        setmsg(err, errlen, "only %d of %d idle python contexts were made", made, CTX_IDLE);
        return -1;
    }
    return 0;
}

/* On the sbxd with --warm-contexts 1: n POST /contexts, each once GET /kernels says a warm
 * kernel is ready, each deleted after. 0, or -1 with err. */
static int py_warm(conn *c, int n, py_result *res, char *err, size_t errlen)
{
    char id[64];
    fprintf(stderr, "sbxd-bench: python: %d warm POST /contexts (--warm-contexts 1) ...\n", n);
    for (int i = 0; i < n && !g_interrupted; i++) {
        if (!wait_warm(c)) {
            setmsg(err, errlen, "GET /kernels: no warm kernel ready within 60 s");
            return -1;
        }
        double dt = py_create(c, id, sizeof id, err, errlen);
        if (dt < 0)
            return -1;
        samples_push(&res->warm_create, dt);
        if (!py_delete(c, id)) {
            setmsg(err, errlen, "DELETE /contexts/%s: %s", id, c->err);
            return -1;
        }
    }
    return 0;
}

/* `iters` x += 1 in the context (path: its execute URL) on one kept-alive connection. */
static int py_series(conn *c, const char *path, int iters, samples *s, char *err, size_t errlen)
{
    for (int i = 0; i < iters && !g_interrupted; i++) {
        double t0 = now_ms();
        if (!py_exec(c, path, "{\"code\":\"x += 1\"}", NULL, err, errlen))
            return -1;
        samples_push(s, now_ms() - t0);
    }
    return 0;
}

/* x += 1 in the context at path (`x = 0` run) against the jupyter_client script (started,
 * when j->pid > 0): `warmup` of each, then rounds of `iters`, in turns. 0, or -1 with err. */
static int py_rounds(conn *c, const char *path, jc_child *j, int warmup, int rounds, int iters,
                     py_result *res, char *err, size_t errlen)
{
    bool jc = j->pid > 0;
    samples s = {0}, o = {0};
    int rc = -1;
    if (py_series(c, path, warmup, &s, err, errlen) != 0 ||
        (jc && jc_round(j, warmup, &o, NULL, err, errlen) != 0))
        goto out;
    if (rounds > PY_ROUNDS_MAX)
        rounds = PY_ROUNDS_MAX;
    for (int r = 0; r < rounds && !g_interrupted; r++) {
        s.n = o.n = 0;
        for (int side = 0; side < 2; side++) {
            bool sbxd_now = (side == 0) == (r % 2 == 0); /* sbxd first in even rounds */
            if (sbxd_now && py_series(c, path, iters, &s, err, errlen) != 0)
                goto out;
            if (!sbxd_now && jc && jc_round(j, iters, &o, &res->jc_kernel, err, errlen) != 0)
                goto out;
        }
        samples_append(&res->sbxd_exec, &s);
        samples_append(&res->jc_exec, &o);
        samples_sort(&s);
        samples_sort(&o);
        if (jc) {
            res->ratio[res->rounds++] = pct(&s, 50) / pct(&o, 50);
            fprintf(stderr,
                    "sbxd-bench:   round %d: sbxd p50 %.3f ms, jupyter_client p50 %.3f ms (%.2f)\n",
                    r + 1, pct(&s, 50), pct(&o, 50), pct(&s, 50) / pct(&o, 50));
        } else {
            fprintf(stderr, "sbxd-bench:   round %d: sbxd p50 %.3f ms\n", r + 1, pct(&s, 50));
        }
    }
    if (g_interrupted)
        goto out;
    /* Every execution counted, in both kernels. */
    char want[64];
    long n = warmup + (long)rounds * iters;
    snprintf(want, sizeof want, "{\"text/plain\":\"%ld\"", n);
    if (!py_exec(c, path, "{\"code\":\"x\"}", want, err, errlen))
        goto out;
    if (jc) {
        snprintf(want, sizeof want, "x %ld", n);
        char *x = jc_say(j, "x\n") == 0 ? jc_line(j, 60000, err, errlen) : NULL;
        if (!x || strcmp(x, want) != 0) {
            if (x)
                setmsg(err, errlen, "jupyter_client's kernel: %.60s, want %s", x, want);
            else if (!err[0])
                setmsg(err, errlen, "jupyter_client script: write: %s", strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    samples_free(&s);
    samples_free(&o);
    return rc;
}

/* POST /reset of a workspace of RESET_FILES small files (made by one command), on an sbxd of
 * its own whose command user is nobody else's (a reset removes that user's files from /tmp
 * and kills its processes): the best of `rounds`, as the client sees it and as sbxd says. */
#define RESET_FILES 10000
typedef struct {
    bool ok;
    double ms, sbxd_ms; /* the fastest round's */
    unsigned long long files;
} reset_result;

static unsigned long long json_uint(const char *body, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = body ? strstr(body, k) : NULL;
    return p ? strtoull(p + strlen(k), NULL, 10) : 0;
}

static void measure_reset(const char *sbxd, const char *ws, int rounds, reset_result *res,
                          char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    pid_t outer = g_sbxd_pid; /* the bench's long-running sbxd, stopped on an interrupt */
    char user[32];
    unsigned uid = 49000 + (unsigned)(getpid() % 1000);
    snprintf(user, sizeof user, "%u:%u", uid, uid);
    const char *const flags[] = {"--user", user, NULL};
    int port, status = 0;
    double rms;
    if (mkdir(ws, 0755) != 0 && errno != EEXIST) {
        setmsg(err, errlen, "mkdir %s: %s", ws, strerror(errno));
        return;
    }
    pid_t pid = start_ready(sbxd, ws, flags, &port, &rms, NULL);
    if (pid < 0) {
        setmsg(err, errlen, "sbxd --user %s did not start", user);
        goto out;
    }
    target tg;
    target_local(&tg, port);
    conn c;
    conn_init(&c, &tg, IO_TIMEOUT_S * 2);
    char make[160];
    snprintf(make, sizeof make,
             "{\"command\":\"mkdir -p d/e && seq 1 %d | xargs touch && cd d/e && seq 1 %d | "
             "xargs touch\"}",
             RESET_FILES / 2, RESET_FILES - RESET_FILES / 2);
    for (int i = 0; i < rounds && !g_interrupted; i++) {
        if (http_do(&c, "POST", "/execute", make, &status) != 0 || status != 200 ||
            !strstr(c.body, "\"exit_code\":0")) {
            setmsg(err, errlen, "POST /execute (the files): %d %s", status, c.err);
            break;
        }
        double t0 = now_ms();
        if (http_do(&c, "POST", "/reset", "{}", &status) != 0 || status != 200) {
            setmsg(err, errlen, "POST /reset: %d %s", status, c.err);
            break;
        }
        double ms = now_ms() - t0;
        unsigned long long files = json_uint(c.body, "files");
        if (files < RESET_FILES) {
            setmsg(err, errlen, "POST /reset removed %llu files, not %d", files, RESET_FILES);
            break;
        }
        const char *d = strstr(c.body, "\"duration_ms\":");
        double sbxd_ms = d ? strtod(d + 14, NULL) : 0;
        if (!res->ok || ms < res->ms) {
            res->ms = ms;
            res->sbxd_ms = sbxd_ms;
            res->files = files;
        }
        res->ok = true;
    }
    if (err[0])
        res->ok = false;
    conn_free(&c);
    stop_sbxd(pid, NULL);
out:
    g_sbxd_pid = outer;
    rmdir(ws);
}

/*
 * Uploads into a workspace that already holds ~0.8 GB: the state the SDK's POST /upload was
 * once erratic in. A tmpfs of 1200 MiB (75/16 of the upload size), mounted by the bench for
 * this sbxd of its own and unmounted after, holds 3 files of the upload size; then, per round
 * as a client of both faces would: a raw PUT over one of them, its GET, the same bytes as a
 * multipart PUT over it, and a POST /upload to a new name as the SDK sends it (deleted after,
 * so every round starts from the same state). Only where a tmpfs can be mounted (root).
 */
typedef struct {
    bool ok;
    char why[96];           /* why there is no row (not an error) */
    samples put_mp, upload; /* MB/s */
    unsigned long long held_mib, tmpfs_mib;
} full_result;

/* The mount point while it is mounted: unmounted at the end, interrupted or not. */
static char g_full_mnt[128];

static void full_unmount(void)
{
    if (!g_full_mnt[0])
        return;
    if (umount2(g_full_mnt, 0) != 0)
        umount2(g_full_mnt, MNT_DETACH);
    rmdir(g_full_mnt);
    g_full_mnt[0] = '\0';
}

/* utime + stime of pid, in ms. */
static double cpu_ms_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) * 1e3 / (double)sysconf(_SC_CLK_TCK);
}

static void measure_full_uploads(const char *sbxd, const char *dir, uint64_t size, int rounds,
                                 full_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    pid_t outer = g_sbxd_pid; /* the bench's long-running sbxd, stopped on an interrupt */
    uint64_t fs_bytes = size * 75 / 16;
    res->tmpfs_mib = fs_bytes >> 20;
    res->held_mib = (3 * size) >> 20;
    char opts[64];
    snprintf(opts, sizeof opts, "size=%" PRIu64 ",mode=0700", fs_bytes);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        setmsg(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        return;
    }
    if (mount("sbxd-bench", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        setmsg(res->why, sizeof res->why, "no tmpfs of its own (mount: %s)", strerror(errno));
        rmdir(dir);
        return;
    }
    copy_str(g_full_mnt, sizeof g_full_mnt, dir);
    int port;
    double rms;
    pid_t pid = start_ready(sbxd, dir, NULL, &port, &rms, NULL);
    if (pid < 0) {
        setmsg(err, errlen, "sbxd on the tmpfs did not start");
        goto out;
    }
    target tg;
    target_local(&tg, port);
    double secs;
    int st;
    static const char *const held[] = {"/files/bench-full-0.bin", "/files/bench-full-1.bin",
                                       "/files/bench-full-2.bin"};
    char xerr[256] = "";
    for (size_t i = 0; i < 3 && !err[0]; i++)
        if ((st = xfer_upload(&tg, "PUT", held[i], false, NULL, size, &secs, xerr, sizeof xerr)) !=
            201)
            setmsg(err, errlen, "PUT %s (filling the workspace): %d %s", held[i], st, xerr);
    conn c;
    conn_init(&c, &tg, IO_TIMEOUT_S);
    for (int r = 0; r < rounds && !err[0] && !g_interrupted; r++) {
        double mbs[3] = {0}, cpu[3] = {0};
        char name[64], path[96];
        snprintf(name, sizeof name, "bench-new-%d.bin", r);
        for (int k = 0; k < 3 && !err[0]; k++) {
            double c0 = cpu_ms_of(pid);
            secs = 0;
            xerr[0] = '\0';
            st = k == 0
                     ? xfer_upload(&tg, "PUT", held[0], false, NULL, size, &secs, xerr, sizeof xerr)
                 : k == 1
                     ? xfer_upload(&tg, "PUT", held[0], true, "x", size, &secs, xerr, sizeof xerr)
                     : xfer_upload_sdk(&tg, name, size, &secs, xerr, sizeof xerr);
            cpu[k] = cpu_ms_of(pid) - c0;
            if (st != 200) {
                setmsg(err, errlen, "%s: %d %s",
                       k == 0   ? "PUT"
                       : k == 1 ? "PUT (multipart)"
                                : "POST /upload",
                       st, xerr);
                break;
            }
            mbs[k] = (double)size / 1e6 / secs;
            if (k == 0) {
                uint64_t got = 0;
                st = xfer_download(&tg, held[0], &got, &secs, xerr, sizeof xerr);
                if (st != 200 || got != size)
                    setmsg(err, errlen, "GET %s: %d, %" PRIu64 " bytes %s", held[0], st, got, xerr);
            }
        }
        snprintf(path, sizeof path, "/files/%s", name);
        if (!err[0] && (http_do(&c, "DELETE", path, NULL, &st) != 0 || st / 100 != 2))
            setmsg(err, errlen, "DELETE %s: %d %s", path, st, c.err);
        if (err[0])
            break;
        samples_push(&res->put_mp, mbs[1]);
        samples_push(&res->upload, mbs[2]);
        fprintf(stderr,
                "sbxd-bench:   round %d: PUT %.0f, PUT multipart %.0f, POST /upload %.0f MB/s "
                "(sbxd CPU %.0f / %.0f / %.0f ms)\n",
                r + 1, mbs[0], mbs[1], mbs[2], cpu[0], cpu[1], cpu[2]);
    }
    conn_free(&c);
    res->ok = !err[0] && res->upload.n == (size_t)rounds;
    stop_sbxd(pid, NULL);
out:
    g_sbxd_pid = outer;
    full_unmount();
}

/*
 * Python contexts, on sbxds of their own, with ws as their workspace (theirs alone: the
 * kernels working there are theirs and the jupyter_client script's):
 *  - with --warm-contexts 0: py_cold;
 *  - with --warm-contexts 1: py_warm; then `x += 1` in one context (the warm kernel, made
 *    again before the clock runs so that no kernel starts meanwhile) against jupyter_client
 *    on a kernel of its own at the same nice value (py_rounds).
 * res->why says why there are none (no python kernel), res->jc_why why there is no
 * jupyter_client row (not errors); anything else that fails is an error (err). No kernel is
 * left behind.
 */
static void measure_python(const char *sbxd, const char *ws, const char *jc_home, bool quick,
                           py_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    static const char *const cold_flags[] = {"--warm-contexts", "0", NULL};
    static const char *const warm_flags[] = {"--warm-contexts", "1", NULL};
    pid_t outer = g_sbxd_pid; /* the bench's long-running sbxd, stopped on an interrupt */
    int port, rc = -1;
    double rms;
    conn c;
    target tg;

    pid_t pid = start_ready(sbxd, ws, cold_flags, &port, &rms, NULL);
    if (pid < 0) {
        setmsg(err, errlen, "sbxd --warm-contexts 0 did not start");
        goto reap;
    }
    target_local(&tg, port);
    conn_init(&c, &tg, IO_TIMEOUT_S * 2);
    rc = py_cold(&c, pid, quick ? 5 : 10, res, err, errlen);
    conn_free(&c);
    stop_sbxd(pid, NULL);
    if (rc != 0 || g_interrupted)
        goto reap;

    rc = -1;
    pid = start_ready(sbxd, ws, warm_flags, &port, &rms, NULL);
    if (pid < 0) {
        setmsg(err, errlen, "sbxd --warm-contexts 1 did not start");
        goto reap;
    }
    target_local(&tg, port);
    conn_init(&c, &tg, IO_TIMEOUT_S * 2);
    char id[64], path[128];
    bool made = false;
    jc_child *j = calloc(1, sizeof *j);
    if (!j) {
        warnx_("out of memory");
        exit(1);
    }
    j->pid = -1;
    if (py_warm(&c, quick ? 5 : 10, res, err, errlen) != 0 || g_interrupted)
        goto stop;
    if (!wait_warm(&c) || !(made = py_create(&c, id, sizeof id, err, errlen) >= 0) ||
        !wait_warm(&c)) {
        if (!err[0])
            setmsg(err, errlen, "GET /kernels: no warm kernel ready within 60 s");
        goto stop;
    }
    res->nice = kernel_nice(ws);
    snprintf(path, sizeof path, "/contexts/%s/execute", id);
    if (!py_exec(&c, path, "{\"code\":\"x = 0\"}", NULL, err, errlen))
        goto stop;
    int rounds = quick ? 3 : 5, iters = quick ? 50 : 200;
    fprintf(stderr,
            "sbxd-bench: python: x += 1, %d rounds of %d through sbxd and through jupyter_client, "
            "in turns (kernels at nice %d) ...\n",
            rounds, iters, res->nice);
    /* Without python3 or jupyter_client there is no row to compare with (not an error); a
     * script that fails otherwise is one. */
    char *l = NULL;
    if (access("/usr/bin/python3", X_OK) != 0)
        setmsg(res->jc_why, sizeof res->jc_why, "no /usr/bin/python3");
    else if (jc_start(j, ws, jc_home, res->nice, err, errlen) != 0 ||
             !(l = jc_line(j, 120000, err, errlen)))
        goto stop;
    else if (strncmp(l, "error: no jupyter_client", 24) == 0)
        setmsg(res->jc_why, sizeof res->jc_why, "%.150s", l + 7);
    else if (strncmp(l, "ready ", 6) != 0) {
        setmsg(err, errlen, "jupyter_client script: %.180s", l);
        goto stop;
    }
    if (res->jc_why[0]) {
        jc_stop(j);
        warnx_("python: no jupyter_client figures: %s", res->jc_why);
    }
    rc = py_rounds(&c, path, j, quick ? 10 : 20, rounds, iters, res, err, errlen);
stop:
    jc_stop(j);
    free(j);
    if (made)
        py_delete(&c, id);
    conn_free(&c);
    stop_sbxd(pid, NULL);
reap:
    g_sbxd_pid = outer;
    if (kernels_reap(ws)) {
        setmsg(err, errlen, "kernels were left running after their sbxd stopped");
        rc = -1;
    }
    if (rc == 0) {
        samples_sort(&res->warm_create);
        samples_sort(&res->cold_create);
        samples_sort(&res->sbxd_exec);
        samples_sort(&res->jc_exec);
        samples_sort(&res->jc_kernel);
        res->ok = true;
    }
}

/* ------------------------------------------------------------------------ */
/* the table                                                                */

typedef struct {
    char metric[64], value[64], target[24];
    const char *ok; /* "yes", "NO", "" */
} row;

static row g_rows[96];
static int g_nrows;

__attribute__((format(printf, 4, 5))) static void add_row(const char *metric, const char *target_,
                                                          const char *ok, const char *vfmt, ...)
{
    if (g_nrows >= (int)(sizeof g_rows / sizeof g_rows[0]))
        return;
    row *r = &g_rows[g_nrows++];
    copy_str(r->metric, sizeof r->metric, metric);
    copy_str(r->target, sizeof r->target, target_ ? target_ : "");
    r->ok = ok ? ok : "";
    va_list ap;
    va_start(ap, vfmt);
    vsnprintf(r->value, sizeof r->value, vfmt, ap);
    va_end(ap);
}

static const char *yesno(bool b)
{
    return b ? "yes" : "NO";
}

static void print_table(void)
{
    int w0 = (int)strlen("metric"), w1 = (int)strlen("value"), w2 = (int)strlen("target");
    for (int i = 0; i < g_nrows; i++) {
        int a = (int)strlen(g_rows[i].metric), b = (int)strlen(g_rows[i].value),
            c = (int)strlen(g_rows[i].target);
        if (a > w0)
            w0 = a;
        if (b > w1)
            w1 = b;
        if (c > w2)
            w2 = c;
    }
    char dash[128];
    int tot = w0 + w1 + w2 + 3 * 3 + 3;
    if (tot > (int)sizeof dash - 1)
        tot = (int)sizeof dash - 1;
    memset(dash, '-', (size_t)tot);
    dash[tot] = '\0';
    printf("%-*s | %-*s | %-*s | %s\n", w0, "metric", w1, "value", w2, "target", "ok?");
    printf("%s\n", dash);
    for (int i = 0; i < g_nrows; i++)
        printf("%-*s | %*s | %-*s | %s\n", w0, g_rows[i].metric, w1, g_rows[i].value, w2,
               g_rows[i].target, g_rows[i].ok);
}

/* ------------------------------------------------------------------------ */

/* The phases of a run; --only picks groups of them. */
enum {
    PH_READY = 1 << 0,     /* fresh starts */
    PH_IDLE_GRPC = 1 << 1, /* RSS with idle gRPC connections */
    PH_IDLE_CONNS = 1 << 2,
    PH_EXEC1 = 1 << 3, /* /execute, 1 client, with the floor */
    PH_GRPC = 1 << 4,
    PH_PGID = 1 << 5,
    PH_LOAD = 1 << 6, /* /execute, 16 clients */
    PH_HEALTH = 1 << 7,
    PH_STREAM = 1 << 8,
    PH_FILES = 1 << 9,
    PH_UPLOADS = 1 << 10,
    PH_CONTEXTS = 1 << 11,
    PH_WORKSPACE = 1 << 12,
    PH_MCP = 1 << 13,    /* MCP's tools/call against /execute */
    PH_FULL = 1 << 14,   /* /upload against PUT in a workspace holding ~0.8 GB */
    PH_SEARCH = 1 << 15, /* grep= and glob= against grep, rg and find in /execute */
    PH_EDIT = 1 << 16,   /* POST ?edit of a 1 MiB file against sed -i through /execute */
    PH_NET = 1 << 17,    /* /proxy/{port}/ against the same upstream directly; the terminal */
    PH_ALL = (1 << 18) - 1,
};

static const struct {
    const char *name;
    unsigned phases;
} ONLY_GROUPS[] = {
    {"grpc", PH_GRPC | PH_IDLE_GRPC},
    {"throughput", PH_EXEC1 | PH_LOAD},
    {"stream", PH_STREAM},
    {"uploads", PH_FILES | PH_UPLOADS | PH_FULL},
    {"uploads-full", PH_FULL},
    {"contexts", PH_CONTEXTS},
    {"workspace", PH_WORKSPACE},
    {"mcp", PH_MCP},
    {"health", PH_HEALTH}, /* /healthz under load, GET /usage */
    {"search", PH_SEARCH},
    {"edit", PH_EDIT},
    {"net", PH_NET},
};

/* "grpc,stream" and the like into phases; 0 for a name that is not a group. */
static unsigned only_phases(const char *list)
{
    unsigned ph = 0;
    char buf[128];
    copy_str(buf, sizeof buf, list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t k = 0;
        while (k < sizeof ONLY_GROUPS / sizeof ONLY_GROUPS[0] && strcmp(ONLY_GROUPS[k].name, t))
            k++;
        if (k == sizeof ONLY_GROUPS / sizeof ONLY_GROUPS[0])
            return 0;
        ph |= ONLY_GROUPS[k].phases;
    }
    return ph;
}

static void usage(FILE *f)
{
    fputs("Usage: sbxd-bench --sbxd PATH [--vs URL] [--seconds N] [--quick] [--only GROUPS]\n"
          "       sbxd-bench --sbxd PATH --gvisor [--seconds N] [--quick]\n"
          "\n"
          "Starts sbxd (PATH) on a free loopback port with a temporary workspace and its gRPC\n"
          "listener on (--grpc-listen 127.0.0.1:0), measures it and prints one table:\n"
          "fork+exec floor, /execute latency (1 keep-alive client), gRPC Execute latency\n"
          "(1 HTTP/2 connection) against /execute's in the same rounds, /execute req/s\n"
          "(16 clients, in rounds, each against cores / a floor measured just before it),\n"
          "/healthz req/s (8 clients), streamed NDJSON (and against a GET of as many bytes),\n"
          "uploads raw and multipart (POST /upload, PUT /files, PUT /v1/files, each against\n"
          "the raw PUT), contexts (bash; Python kernels against jupyter_client, run by\n"
          "/usr/bin/python3), RSS idle, with 256 idle connections, with 16 idle gRPC\n"
          "connections and after load, and ready time (median of fresh starts).\n"
          "\n"
          "  --sbxd PATH    the sbxd binary to measure (required)\n"
          "  --vs URL       also measure /execute on another, already running server speaking\n"
          "                 the legacy API (e.g. http://127.0.0.1:8000) and print the ratios\n"
          "                 (/execute, and POST /upload and GET /download)\n"
          "  --seconds N    length of each load phase (default: 4 for each of the 3 rounds of\n"
          "                 /execute with 16 clients, 3 for /healthz)\n"
          "  --quick        smoke run: ~1 s per load phase, 100 iterations, 3 fresh starts\n"
          "  --only GROUPS  only these rows (comma-separated), with idle RSS:\n"
          "                   grpc        gRPC against /execute, RSS with idle gRPC connections\n"
          "                   throughput  /execute 1 client (the floor) and 16 clients\n"
          "                   stream      first-event lag, NDJSON against GET /files\n"
          "                   uploads     /files up and down, raw and multipart uploads, and\n"
          "                               uploads-full\n"
          "                   uploads-full POST /upload against a multipart PUT in a workspace\n"
          "                               holding ~0.8 GB (a tmpfs it mounts: root only)\n"
          "                   contexts    bash: POST /contexts, x=$((x+1)) in one, RSS with 4\n"
          "                               idle; python (sbxds of their own): POST /contexts with\n"
          "                               a warm kernel and cold, x += 1 against jupyter_client\n"
          "                               on the same kernel in turns, RSS with 4 idle\n"
          "                   workspace   a PUT to its event on a watch stream, GET ?stat=true\n"
          "                   mcp         MCP tools/call run_command against /execute, in turns\n"
          "                   health      /healthz with 8 clients, GET /usage with 1\n"
          "                   search      GET ?grep= (literal, regex) and ?glob= against grep\n"
          "                               -rn, rg -n and find through /execute, in turns\n"
          "                   edit        1,000 exact edits of a 1 MiB file (POST ?edit) against\n"
          "                               the same by sed -i through /execute, in turns\n"
          "                   net         small GETs (1 and 16 connections) and 256 MiB each way\n"
          "                               through /proxy/PORT/ against the same upstream (a\n"
          "                               command of sbxd's) directly, in turns; a terminal's\n"
          "                               key to echo over its WebSocket against POST stdin\n"
          "                               and the output stream\n"
          "  --gvisor       sbxd inside gVisor (runsc do, the gvisor tier's flags), a table of\n"
          "                 its own: per backend (the image's, pidns, uid, pgid) /execute on 1\n"
          "                 client against a floor spawned inside the same sandbox (sh -c 'echo\n"
          "                 hi', its output drained), interleaved; 16 clients against the\n"
          "                 sandbox's own rate of 16 threads spawning; 256 MiB PUT and GET\n"
          "                 /files against dd there; streamed output (first-event lag, NDJSON\n"
          "                 against a GET of the same file); with a warm kernel kept, gRPC\n"
          "                 Execute and MCP run_command against /execute in turns, bash\n"
          "                 contexts (POST /contexts, x=$((x+1))) and python ones (warm POST\n"
          "                 /contexts, x += 1); the sandbox's memory against one running\n"
          "                 sleep; ready time. Needs root and runsc\n"
          "  --help         this text\n"
          "\n"
          "Exit status: 0 if every request got a 200, 1 on errors, 2 on bad usage.\n",
          f);
}

/* The rows of measure_stream, their labels headed by what ("stream", or where it ran). */
static void stream_rows(stream_result *s, const char *what)
{
    char lbl[128];
    if (s->lag.n) {
        snprintf(lbl, sizeof lbl, "%s: first write -> event p50", what);
        add_row(lbl, "<= 50 ms", yesno(pct(&s->lag, 50) <= 50), "%.3f ms", pct(&s->lag, 50));
        snprintf(lbl, sizeof lbl, "%s: first write -> event p99", what);
        add_row(lbl, "", "", "%.3f ms", pct(&s->lag, 99));
    }
    if (s->ndjson_mbs > 0) {
        snprintf(lbl, sizeof lbl, "%s: %" PRIu64 " MiB of stdout as NDJSON (cat)", what,
                 s->size >> 20);
        add_row(lbl, "", "", "%.0f MB/s", s->ndjson_mbs);
        /* Against sending the same file (sendfile): the stream's cost over I/O. */
        if (s->get_mbs > 0) {
            add_row("  GET /files of that file", "", "", "%.0f MB/s", s->get_mbs);
            add_row("  / GET /files of that file", ">= 0.5",
                    yesno(s->ndjson_mbs / s->get_mbs >= 0.5), "%.2f", s->ndjson_mbs / s->get_mbs);
        }
    }
    samples_free(&s->lag);
}

/* ------------------------------------------------------------------------ */
/* --gvisor: sbxd inside runsc                                              */

#define GV_BIG (256ull << 20)

/* Every process left of the sandboxes under g_runsc_root (runsc, its gofer, the sentry and
 * its stubs: their command lines name it, or their parent is one of them), killed. */
static void gv_kill_leftovers(void)
{
    for (int pass = 0; pass < 3; pass++) {
        DIR *d = opendir("/proc");
        if (!d)
            return;
        struct dirent *e;
        int killed = 0;
        while ((e = readdir(d))) {
            int pid = atoi(e->d_name);
            if (pid <= 1 || pid == getpid())
                continue;
            char path[64], buf[4096];
            snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
            FILE *f = fopen(path, "re");
            if (!f)
                continue;
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            for (size_t i = 0; i < n; i++)
                if (!buf[i])
                    buf[i] = ' ';
            buf[n] = '\0';
            if (strstr(buf, g_runsc_root) && kill(pid, SIGKILL) == 0)
                killed++;
        }
        closedir(d);
        if (!killed)
            return;
        sleep_us(200000);
    }
}

/* A sandbox of the same flags running `sleep`: its sentry's memory, to hold sbxd's against. */
static long gv_sleep_pss_kb(void)
{
    char rootarg[128];
    snprintf(rootarg, sizeof rootarg, "--root=%s/root", g_runsc_root);
    pid_t pid = fork();
    if (pid == 0) {
        redirect_std_to_null();
        setenv("TMPDIR", g_runsc_root, 1);
        execlp("runsc", "runsc", rootarg, "--rootless", "--ignore-cgroups", "--network=host",
               "--platform=ptrace", "--file-access=shared", "do", "-force-overlay=false", "-quiet",
               "/bin/sleep", "60", (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    long kb = -1, last = -2;
    /* Up, then settled: two looks 300 ms apart within 2% of each other. */
    for (int i = 0; i < 50 && !g_interrupted; i++) {
        sleep_us(300000);
        kb = bench_sandbox_pss_kb(g_runsc_root);
        if (kb > 0 && last > 0 && labs(kb - last) * 50 < kb)
            break;
        last = kb;
    }
    kill(pid, SIGTERM);
    sleep_us(300000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    gv_kill_leftovers();
    return kb;
}

typedef struct {
    char backend[40]; /* as sbxd reports it: pidns, uid, pgid */
    bool ok;
    char why[200];
    samples ex, floor;
} gv_backend;

/* sbxd with extra (--isolation B, or none for the image's own choice), its floor helper
 * beside it; 1-client /execute interleaved with the helper's floor. */
static pid_t gv_start(const char *sbxd, const char *ws, const char *const *extra, int *port,
                      double *ready_ms, int *grpc_port, char *why, size_t whyn)
{
    g_helper_port = free_port();
    pid_t pid = start_ready(sbxd, ws, extra, port, ready_ms, grpc_port);
    if (pid < 0) {
        snprintf(why, whyn, "sbxd did not start (see %s)", g_log_path);
        gv_kill_leftovers();
        return -1;
    }
    g_helper_fd = bench_helper_connect(g_helper_port, 10000);
    if (g_helper_fd < 0) {
        snprintf(why, whyn, "the floor helper inside the sandbox never answered");
        stop_sbxd(pid, NULL);
        gv_kill_leftovers();
        return -1;
    }
    return pid;
}

static void gv_stop(pid_t pid)
{
    if (g_helper_fd >= 0)
        close(g_helper_fd);
    g_helper_fd = -1;
    stop_sbxd(pid, NULL);
    gv_kill_leftovers();
}

/* The other fronts and the contexts inside gVisor, on one sbxd of the image's backend with a
 * warm kernel: gRPC Execute and MCP tools/call run_command against /execute (in turns, as on
 * the host), bash contexts (POST /contexts, x=$((x+1))), python (a warm POST /contexts,
 * x += 1). */
typedef struct {
    grpc_vs_rest grpc, mcp;
    ctx_result bash;
    samples py_create, py_exec;
    char py_why[160];
    unsigned long errors;
} gv_fronts;

static void gv_measure_fronts(const char *sbxd, const char *ws, bool quick, gv_fronts *fr)
{
    static const char *const warm[] = {"--warm-contexts", "1", NULL};
    int port, gport;
    double rms;
    char why[200], err[300] = "";
    pid_t pid = gv_start(sbxd, ws, warm, &port, &rms, &gport, why, sizeof why);
    if (pid < 0) {
        warnx_("gVisor fronts: %s", why);
        fr->errors++;
        return;
    }
    target local, glocal;
    target_local(&local, port);
    target_local(&glocal, gport);
    /* The warm kernel starts first (seconds under gVisor): not beside the other rows. */
    conn c;
    conn_init(&c, &local, IO_TIMEOUT_S * 2);
    if (has_python_kernel(&c, fr->py_why, sizeof fr->py_why) && !wait_warm(&c))
        setmsg(fr->py_why, sizeof fr->py_why, "no warm kernel ready within 60 s");
    const int rounds = quick ? 3 : 5, warmup = 10, iters = quick ? 30 : 100;
    tally rt = {0}, ot = {0};
    fprintf(stderr, "sbxd-bench: gVisor: gRPC Execute and /execute, %d rounds of %d ...\n", rounds,
            iters);
    measure_grpc_vs_rest(&local, &glocal, rounds, warmup, iters, &fr->grpc, &rt, &ot);
    fprintf(stderr, "sbxd-bench: gVisor: MCP tools/call and /execute, %d rounds of %d ...\n",
            rounds, iters);
    measure_mcp_vs_rest(&local, rounds, warmup, iters, &fr->mcp, &rt, &ot);
    fr->errors += rt.errors + ot.errors;
    fprintf(stderr, "sbxd-bench: gVisor: bash contexts ...\n");
    measure_contexts(&local, pid, quick ? 5 : 20, warmup, quick ? 50 : 200, &fr->bash, err,
                     sizeof err);
    if (!fr->bash.ok && !g_interrupted) {
        warnx_("gVisor bash contexts: %s", err);
        fr->errors++;
    }
    /* Python: warm POST /contexts (each once a warm kernel is ready), then x += 1 in one. */
    char id[64], path[128];
    if (fr->py_why[0]) {
        warnx_("gVisor python contexts: none measured: %s", fr->py_why);
    } else {
        fprintf(stderr, "sbxd-bench: gVisor: python: warm POST /contexts, x += 1 ...\n");
        py_result py = {0};
        bool made = false;
        if (py_warm(&c, quick ? 3 : 10, &py, err, sizeof err) == 0 && wait_warm(&c) &&
            (made = py_create(&c, id, sizeof id, err, sizeof err) >= 0)) {
            snprintf(path, sizeof path, "/contexts/%s/execute", id);
            samples w = {0};
            if (!py_exec(&c, path, "{\"code\":\"x = 0\"}", NULL, err, sizeof err) ||
                py_series(&c, path, warmup, &w, err, sizeof err) != 0 ||
                py_series(&c, path, quick ? 50 : 200, &fr->py_exec, err, sizeof err) != 0)
                fr->errors++;
            samples_free(&w);
        } else if (!g_interrupted) {
            fr->errors++;
        }
        if (made)
            py_delete(&c, id);
        fr->py_create = py.warm_create;
        samples_sort(&fr->py_create);
        samples_sort(&fr->py_exec);
        if (err[0])
            warnx_("gVisor python contexts: %s", err);
    }
    conn_free(&c);
    gv_stop(pid);
}

static void gv_fronts_rows(gv_fronts *fr)
{
    grpc_vs_rest *v[2] = {&fr->grpc, &fr->mcp};
    const char *name[2] = {"gRPC Execute", "MCP tools/call run_command"};
    char label[160];
    for (int i = 0; i < 2; i++) {
        if (!v[i]->rounds)
            continue;
        snprintf(label, sizeof label, "%s p50 under gVisor; /execute's", name[i]);
        add_row(label, "", "", "%.2f; %.2f ms", v[i]->grpc_p50, v[i]->rest_p50);
        add_row("  / /execute, median of the rounds", "", "", "%.2f", gvr_ratio(v[i]));
    }
    if (fr->bash.ok) {
        add_row("bash context under gVisor: POST /contexts p50", "", "", "%.2f ms",
                pct(&fr->bash.create, 50));
        add_row("  x=$((x+1)) p50 / p99", "", "", "%.2f / %.2f ms", pct(&fr->bash.exec, 50),
                pct(&fr->bash.exec, 99));
    }
    if (fr->py_why[0]) {
        add_row("python context under gVisor", "", "", "n/a: %.60s", fr->py_why);
    } else if (fr->py_create.n && fr->py_exec.n) {
        add_row("python context under gVisor: warm POST /contexts p50", "", "", "%.2f ms",
                pct(&fr->py_create, 50));
        add_row("  x += 1 p50 / p99", "", "", "%.2f / %.2f ms", pct(&fr->py_exec, 50),
                pct(&fr->py_exec, 99));
    }
    samples_free(&fr->bash.create);
    samples_free(&fr->bash.exec);
    samples_free(&fr->py_create);
    samples_free(&fr->py_exec);
}

static int gvisor_main(const char *sbxd, bool quick, double seconds)
{
    if (system("command -v runsc >/dev/null 2>&1") != 0) {
        warnx_("--gvisor needs runsc (Debian's runsc package; tools/bench --gvisor installs it)");
        return 2;
    }
    ssize_t sl = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (sl <= 0) {
        warnx_("cannot name sbxd-bench itself");
        return 1;
    }
    g_self[sl] = '\0';
    /* Under /tmp: the sandbox has a /dev/shm of its own, not the host's. */
    char ws[64];
    snprintf(ws, sizeof ws, "/tmp/sbxd-bench.XXXXXX");
    snprintf(g_runsc_root, sizeof g_runsc_root, "/tmp/sbxd-bench-runsc.XXXXXX");
    if (!mkdtemp(ws) || !mkdtemp(g_runsc_root)) {
        warnx_("mkdtemp: %s", strerror(errno));
        return 1;
    }
    char rootdir[128];
    snprintf(rootdir, sizeof rootdir, "%s/root", g_runsc_root);
    mkdir(rootdir, 0700);
    snprintf(g_log_path, sizeof g_log_path, "%s.log", ws);
    g_ready_timeout_ms = 30000;
    const int iters = quick ? 50 : 200, warm = quick ? 10 : 20, starts = quick ? 3 : 5;
    const int rounds = quick ? 1 : 3;
    const double secs = seconds > 0 ? seconds : (quick ? 2 : 4);
    char version[128];
    sbxd_version(sbxd, version, sizeof version);
    printf("sbxd-bench: %s (%s), nproc %d, inside gVisor (runsc do --network=host "
           "--platform=ptrace --file-access=shared)%s\n",
           version, sbxd, cpu_count(), quick ? ", --quick" : "");
    printf("plan: per backend, /execute %d+%d on 1 client, each paired with a floor spawned "
           "inside the same sandbox; the image's backend: 16 clients x %.3g s against the "
           "sandbox's own spawn rate (%d rounds), 256 MiB PUT and GET /files against dd there, "
           "streamed output (first-event lag, 256 MiB of NDJSON against a GET of it); "
           "then (a warm kernel kept) gRPC Execute and MCP run_command against /execute, bash "
           "and python contexts; the sandbox's memory against one running sleep, ready x%d\n",
           warm, iters, secs, rounds, starts);
    int exit_code = 0;
    unsigned long errors = 0;

    /* Ready time and idle memory: fresh sandboxes, no helper. */
    samples ready = {0};
    long pss_sbxd = -1;
    for (int i = 0; i < starts && !g_interrupted; i++) {
        g_helper_port = 0;
        int port;
        double rms;
        pid_t pid = start_ready(sbxd, ws, NULL, &port, &rms, NULL);
        if (pid < 0) {
            gv_kill_leftovers();
            exit_code = 1;
            goto out;
        }
        samples_push(&ready, rms);
        if (i == starts - 1) {
            sleep_us(1000000); /* settled */
            pss_sbxd = bench_sandbox_pss_kb(g_runsc_root);
        }
        stop_sbxd(pid, NULL);
        gv_kill_leftovers();
    }
    samples_sort(&ready);
    long pss_sleep = g_interrupted ? -1 : gv_sleep_pss_kb();

    /* The image's backend (no --isolation), then each other one gVisor offers. */
    gv_backend be[4] = {0};
    int nbe = 0;
    const char *names[] = {NULL, "pidns", "uid", "pgid"};
    load_result ld[3] = {0};
    double rate[3] = {0}, lratio[3] = {0};
    double up_t = 0, down_t = 0, ddw_t = 0, ddr_t = 0, pup_t = 0, pdown_t = 0;
    stream_result sr = {0};
    for (int b = 0; b < 4 && !g_interrupted; b++) {
        const char *extra[] = {"--isolation", names[b], NULL};
        if (names[b] && nbe && strcmp(names[b], be[0].backend) == 0)
            continue;
        gv_backend *g = &be[nbe++];
        snprintf(g->backend, sizeof g->backend, "%s", names[b] ? names[b] : "?");
        int port;
        double rms;
        pid_t pid =
            gv_start(sbxd, ws, names[b] ? extra : NULL, &port, &rms, NULL, g->why, sizeof g->why);
        if (pid < 0)
            continue;
        target local;
        target_local(&local, port);
        if (!names[b])
            tree_kill_of(&local, g->backend, sizeof g->backend);
        fprintf(stderr, "sbxd-bench: gVisor, %s: /execute 1 client, %d requests ...\n", g->backend,
                iters);
        tally t = {0};
        run_seq(&local, &REQ_EXEC, warm, iters, &g->ex, &t, &g->floor);
        errors += t.errors;
        g->ok = g->ex.n > 0 && g->floor.n > 0;
        if (b == 0 && !g_interrupted) {
            char err[200];
            for (int r = 0; r < rounds && !g_interrupted; r++) {
                fprintf(stderr, "sbxd-bench: gVisor: 16 clients, round %d ...\n", r + 1);
                char req[64];
                snprintf(req, sizeof req, "rate 16 %.3f", secs);
                if (bench_helper_ask(g_helper_fd, req, &rate[r], err, sizeof err) != 0) {
                    warnx_("%s", err);
                    errors++;
                }
                run_load(&local, &REQ_EXEC, 16, secs, &ld[r]);
                errors += ld[r].t.errors;
                lratio[r] = rate[r] > 0 ? ld[r].rps / rate[r] : 0;
            }
            fprintf(stderr, "sbxd-bench: gVisor: 256 MiB PUT and GET /files, dd ...\n");
            char req[200];
            for (int r = 0; r < rounds && !g_interrupted; r++) {
                double tt;
                uint64_t got;
                int st = xfer_upload(&local, "PUT", "/files/gv-big.bin", false, NULL, GV_BIG, &tt,
                                     err, sizeof err);
                if ((st == 200 || st == 201) && (!up_t || tt < up_t))
                    up_t = tt;
                else if (st != 200 && st != 201 && st > 0)
                    setmsg(err, sizeof err, "PUT /files: HTTP %d", st);
                snprintf(req, sizeof req, "dd-write gv-dd.bin 256");
                if (bench_helper_ask(g_helper_fd, req, &tt, err, sizeof err) == 0 &&
                    (!ddw_t || tt / 1e3 < ddw_t))
                    ddw_t = tt / 1e3;
                if (xfer_download(&local, "/files/gv-big.bin", &got, &tt, err, sizeof err) == 200 &&
                    got == GV_BIG && (!down_t || tt < down_t))
                    down_t = tt;
                snprintf(req, sizeof req, "dd-read gv-dd.bin");
                if (bench_helper_ask(g_helper_fd, req, &tt, err, sizeof err) == 0 &&
                    (!ddr_t || tt / 1e3 < ddr_t))
                    ddr_t = tt / 1e3;
                /* What any server there could do with the same bytes over the same network. */
                if (bench_helper_plain(g_helper_fd, false, "gv-plain.bin", GV_BIG, &tt, err,
                                       sizeof err) == 0 &&
                    (!pup_t || tt < pup_t))
                    pup_t = tt;
                if (bench_helper_plain(g_helper_fd, true, "gv-big.bin", GV_BIG, &tt, err,
                                       sizeof err) == 0 &&
                    (!pdown_t || tt < pdown_t))
                    pdown_t = tt;
            }
            if (!up_t || !down_t || !ddw_t || !ddr_t || !pup_t || !pdown_t) {
                warnx_("gVisor transfers: %s", err);
                errors++;
            }
            fprintf(stderr, "sbxd-bench: gVisor: streamed output ...\n");
            errors += measure_stream(&local, quick ? 20 : 100, GV_BIG, &sr);
        }
        gv_stop(pid);
    }

    gv_fronts fr = {0};
    if (!g_interrupted)
        gv_measure_fronts(sbxd, ws, quick, &fr);
    errors += fr.errors;

    char label[160];
    for (int i = 0; i < nbe; i++) {
        gv_backend *g = &be[i];
        if (!g->ok) {
            snprintf(label, sizeof label, "/execute under gVisor (%.40s)", g->backend);
            add_row(label, "", "", "n/a: %.50s", g->why);
            continue;
        }
        double r50 = pct(&g->ex, 50) / pct(&g->floor, 50);
        double r99 = pct(&g->ex, 99) / pct(&g->floor, 99);
        snprintf(label, sizeof label, "/execute 1 client p50 / p99 (%.40s%s)", g->backend,
                 i ? "" : ", the image's");
        add_row(label, "", "", "%.2f / %.2f ms", pct(&g->ex, 50), pct(&g->ex, 99));
        add_row("  floor in the sandbox: p50 / p99", "", "", "%.2f / %.2f ms", pct(&g->floor, 50),
                pct(&g->floor, 99));
        add_row("  p50 / floor p50", i ? "<= 1.4" : "<= 1.2", yesno(r50 <= (i ? 1.4 : 1.2)), "%.2f",
                r50);
        add_row("  p99 / floor p99", "", "", "%.2f", r99);
    }
    if (rounds && rate[0] > 0) {
        double lr[3];
        memcpy(lr, lratio, sizeof lr);
        double med = median3(lr, rounds);
        for (int r = 0; r < rounds; r++)
            if (lratio[r] == med) {
                add_row("/execute req/s, 16 clients, under gVisor", "", "",
                        "%.0f (sandbox spawns %.0f/s)", ld[r].rps, rate[r]);
                add_row("  / the sandbox's spawn rate, 16 threads", ">= 0.85", yesno(med >= 0.85),
                        "%.2f", med);
                break;
            }
    }
    if (up_t && ddw_t)
        add_row("PUT /files 256 MiB / dd in the sandbox", ">= 0.9", yesno(ddw_t / up_t >= 0.9),
                "%.2f (%.0f / %.0f MB/s)", ddw_t / up_t, GV_BIG / 1e6 / up_t, GV_BIG / 1e6 / ddw_t);
    if (up_t && pup_t && ddw_t) {
        add_row("  a plain receiver there / dd", "", "", "%.2f (%.0f MB/s)", ddw_t / pup_t,
                GV_BIG / 1e6 / pup_t);
        add_row("  PUT / the plain receiver", "", "", "%.2f", pup_t / up_t);
    }
    if (down_t && ddr_t)
        add_row("GET /files 256 MiB / dd in the sandbox", ">= 0.9", yesno(ddr_t / down_t >= 0.9),
                "%.2f (%.0f / %.0f MB/s)", ddr_t / down_t, GV_BIG / 1e6 / down_t,
                GV_BIG / 1e6 / ddr_t);
    if (down_t && pdown_t && ddr_t) {
        add_row("  a plain sender there / dd", "", "", "%.2f (%.0f MB/s)", ddr_t / pdown_t,
                GV_BIG / 1e6 / pdown_t);
        add_row("  GET / the plain sender", "", "", "%.2f", pdown_t / down_t);
    }
    stream_rows(&sr, "stream under gVisor");
    gv_fronts_rows(&fr);
    if (pss_sbxd > 0 && pss_sleep > 0)
        add_row("sandbox memory idle (Pss): sbxd / sleep", "", "", "%.1f / %.1f MiB",
                pss_sbxd / 1024.0, pss_sleep / 1024.0);
    if (ready.n)
        add_row("ready time under gVisor (median of fresh starts)", "", "", "%.0f ms",
                pct(&ready, 50));
    add_row("errors", "0", yesno(errors == 0), "%lu", errors);
    printf("\n");
    print_table();
    if (errors)
        exit_code = 1;
    for (int i = 0; i < nbe; i++) {
        samples_free(&be[i].ex);
        samples_free(&be[i].floor);
    }
out:
    samples_free(&ready);
    gv_kill_leftovers();
    rm_rf(ws);
    rm_rf(g_runsc_root);
    unlink(g_log_path);
    return exit_code;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--upstream") == 0) /* the net rows' upstream (bench_net.c) */
        return bench_upstream_serve(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "--spawn-helper") == 0) /* --gvisor's floor (bench_gvisor.c) */
        return bench_spawn_helper_serve(atoi(argv[2]), argv[3]);
    const char *sbxd = NULL, *vs = NULL;
    double seconds = 0;
    bool quick = false, gvisor = false;
    unsigned phases = PH_ALL;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            quick = true;
        } else if (strcmp(a, "--gvisor") == 0) {
            gvisor = true;
        } else if (strncmp(a, "--only=", 7) == 0 || (strcmp(a, "--only") == 0 && i + 1 < argc)) {
            const char *v = a[6] == '=' ? a + 7 : argv[++i];
            phases = only_phases(v);
            only = v;
            if (!phases) {
                warnx_("--only wants groups among grpc, throughput, stream, uploads, "
                       "uploads-full, contexts, workspace, mcp, health, search, edit, net; got %s",
                       v);
                return 2;
            }
        } else if ((strcmp(a, "--sbxd") == 0 || strcmp(a, "--vs") == 0 ||
                    strcmp(a, "--seconds") == 0) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(a, "--sbxd") == 0) {
                sbxd = v;
            } else if (strcmp(a, "--vs") == 0) {
                vs = v;
            } else {
                char *end;
                seconds = strtod(v, &end);
                if (*end || !(seconds > 0) || seconds > 3600) {
                    warnx_("--seconds wants a number of seconds in (0, 3600], got %s", v);
                    return 2;
                }
            }
        } else if (strncmp(a, "--sbxd=", 7) == 0) {
            sbxd = a + 7;
        } else if (strncmp(a, "--vs=", 5) == 0) {
            vs = a + 5;
        } else if (strncmp(a, "--seconds=", 10) == 0) {
            char *end;
            seconds = strtod(a + 10, &end);
            if (*end || !(seconds > 0) || seconds > 3600) {
                warnx_("--seconds wants a number of seconds in (0, 3600], got %s", a + 10);
                return 2;
            }
        } else {
            warnx_("unknown or incomplete option: %s", a);
            usage(stderr);
            return 2;
        }
    }
    if (!sbxd) {
        warnx_("--sbxd PATH is required");
        usage(stderr);
        return 2;
    }
    if (access(sbxd, X_OK) != 0) {
        warnx_("%s: not an executable file", sbxd);
        return 2;
    }
    char sbxd_abs[4096];
    if (!realpath(sbxd, sbxd_abs)) {
        warnx_("%s: %s", sbxd, strerror(errno));
        return 2;
    }
    if (vs && phases != PH_ALL) {
        warnx_("--only measures no other server: drop --vs");
        return 2;
    }
    target other;
    if (vs && target_from_url(&other, vs) != 0)
        return 2;
    if (gvisor && (vs || only)) {
        warnx_("--gvisor has rows of its own: drop --vs and --only");
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (gvisor)
        return gvisor_main(sbxd_abs, quick, seconds);

    const int iters = quick ? 100 : 500;
    const int warm = quick ? 20 : 50;
    const int starts = !(phases & PH_READY) ? 0 : quick ? 3 : 10;
    const int grpc_rounds = quick ? 3 : GRPC_ROUNDS;
    const int grpc_iters = quick ? 50 : 200, grpc_warm = quick ? 10 : 20;
    const double exec_secs = seconds > 0 ? seconds : (quick ? 1 : 4);
    const double health_secs = seconds > 0 ? seconds : (quick ? 1 : 3);
    const int exec_clients = 16, health_clients = 8;

    /* On tmpfs where there is one: the transfers then measure sbxd, not the disk (every
     * upload is fsync'ed before its rename). */
    char ws[64];
    struct stat shm;
    snprintf(ws, sizeof ws, "%s/sbxd-bench.XXXXXX",
             stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode) && access("/dev/shm", W_OK) == 0
                 ? "/dev/shm"
                 : "/tmp");
    if (!mkdtemp(ws)) {
        warnx_("mkdtemp: %s", strerror(errno));
        return 1;
    }
    snprintf(g_log_path, sizeof g_log_path, "%s.log", ws);
    /* Beside the workspace: the python rows' sbxds' workspace, where their kernels and the
     * jupyter_client script's run (the kernels of the long-running sbxd, in ws, are not
     * theirs); and that script's HOME (its kernel's IPython history). */
    char py_ws[80], jc_home[80];
    snprintf(py_ws, sizeof py_ws, "%s.py", ws);
    snprintf(jc_home, sizeof jc_home, "%s.jc", ws);

    char version[128];
    sbxd_version(sbxd_abs, version, sizeof version);
    int ncpu = cpu_count();
    printf("sbxd-bench: %s (%s), nproc %d%s%s%s\n", version, sbxd_abs, ncpu,
           quick ? ", --quick" : "", only ? ", --only " : "", only ? only : "");
    if (only)
        printf("plan: the rows of --only %s and idle RSS\n", only);
    else
        printf("plan: /execute %d+%d sequential, each paired with a fork/exec floor; gRPC "
               "Execute and /execute %d+%d each, %d rounds in turns; /execute %d clients %d x "
               "%.3g s, each after a floor of its own; /healthz %d clients %.3g s; ready x%d%s%s\n",
               warm, iters, grpc_warm, grpc_iters, grpc_rounds, exec_clients,
               quick ? 1 : LOAD_ROUNDS, exec_secs, health_clients, health_secs, starts,
               vs ? "; vs " : "", vs ? vs : "");

    int exit_code = 0;
    unsigned long total_errors = 0;
    char first_error[300] = "";
    char d[96];
#define NOTE_ERRORS(phase, tl)                                                                     \
    do {                                                                                           \
        if ((tl).errors) {                                                                         \
            total_errors += (tl).errors;                                                           \
            fprintf(stderr, "sbxd-bench: %s: %lu error(s), first: %s\n", phase, (tl).errors,       \
                    (tl).first);                                                                   \
            if (!first_error[0])                                                                   \
                snprintf(first_error, sizeof first_error, "%s: %s", phase, (tl).first);            \
        }                                                                                          \
    } while (0)

    /* 1. the floor is measured together with /execute below (interleaved) */
    samples floor_lat = {0};

    /* 2. ready time over fresh starts */
    if (starts)
        fprintf(stderr, "sbxd-bench: ready time over %d fresh starts ...\n", starts);
    samples ready = {0};
    for (int i = 0; i < starts && !g_interrupted; i++) {
        int port;
        double rms;
        pid_t pid = start_ready(sbxd_abs, ws, NULL, &port, &rms, NULL);
        if (pid < 0) {
            exit_code = 1;
            goto out;
        }
        samples_push(&ready, rms);
        int st = stop_sbxd(pid, NULL);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            warnx_("start %d: sbxd stopped with %s after SIGTERM (want exit 0)", i + 1,
                   describe_status(st, d, sizeof d));
            total_errors++;
        }
    }
    samples_sort(&ready);
    double ready_med = ready.n
                           ? (ready.n % 2 ? ready.v[ready.n / 2]
                                          : (ready.v[ready.n / 2 - 1] + ready.v[ready.n / 2]) / 2)
                           : 0;
    if (g_interrupted)
        goto out;

    /* 3. the long-running instance */
    int port, grpc_port;
    double first_ready_ms;
    pid_t pid = start_ready(sbxd_abs, ws, NULL, &port, &first_ready_ms, &grpc_port);
    if (pid < 0) {
        exit_code = 1;
        goto out;
    }
    target local, grpc_local;
    target_local(&local, port);
    target_local(&grpc_local, grpc_port);
    printf("sbxd: REST on 127.0.0.1:%d, gRPC listener on 127.0.0.1:%d (--grpc-listen "
           "127.0.0.1:0)\n",
           port, grpc_port);
    {
        conn c;
        conn_init(&c, &local, IO_TIMEOUT_S);
        tally t = {0};
        do_checked(&c, &REQ_HEALTH, &t);
        conn_free(&c);
        NOTE_ERRORS("first /healthz", t);
    }
    sleep_us(100000); /* let start-up settle before reading RSS */
    long rss_idle = vmrss_kb(pid);
    bool crashed = false;
    int crash_st = 0;
    /* Idle connections, gRPC's then REST's, each against sbxd's RSS just before they opened
     * (what one set leaves behind is not counted against the other). */
    long rss_grpc_base = -1, rss_grpc = -1;
    if ((phases & PH_IDLE_GRPC) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: RSS with %d idle gRPC connections ...\n", GRPC_IDLE_CONNS);
        char cerr[256] = "";
        rss_grpc =
            idle_grpc_rss(&grpc_local, pid, GRPC_IDLE_CONNS, &rss_grpc_base, cerr, sizeof cerr);
        if (rss_grpc < 0) {
            warnx_("%d idle gRPC connections: %s", GRPC_IDLE_CONNS, cerr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    const int idle_conns = 256;
    long rss_conns = -1, rss_conns_base = -1;
    if ((phases & PH_IDLE_CONNS) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: RSS with %d idle kept-alive connections ...\n", idle_conns);
        char cerr[256] = "";
        rss_conns_base = vmrss_kb(pid);
        rss_conns = idle_conns_rss(&local, pid, idle_conns, cerr, sizeof cerr);
        if (rss_conns < 0) {
            warnx_("%d idle connections: %s", idle_conns, cerr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    char tree_kill[40] = "";
    samples ex1 = {0};
    tally ex1_t = {0};
    if (!crashed && !g_interrupted)
        tree_kill_of(&local, tree_kill, sizeof tree_kill);
    if ((phases & PH_EXEC1) && !crashed && !g_interrupted) {
        fprintf(stderr,
                "sbxd-bench: /execute, 1 keep-alive client, %d requests (tree kill: %s) ...\n",
                iters, tree_kill);
        run_seq(&local, &REQ_EXEC, warm, iters, &ex1, &ex1_t, &floor_lat);
        NOTE_ERRORS("/execute 1 client", ex1_t);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    /* gRPC's Execute against REST's /execute, same command, same sbxd, in turns. */
    grpc_vs_rest gvr = {0};
    if ((phases & PH_GRPC) && !crashed && !g_interrupted) {
        fprintf(stderr,
                "sbxd-bench: gRPC Execute and /execute, 1 client each, %d rounds of %d in "
                "turns ...\n",
                grpc_rounds, grpc_iters);
        tally rt = {0}, gt = {0};
        measure_grpc_vs_rest(&local, &grpc_local, grpc_rounds, grpc_warm, grpc_iters, &gvr, &rt,
                             &gt);
        NOTE_ERRORS("/execute 1 client, against gRPC", rt);
        NOTE_ERRORS("gRPC Execute 1 client", gt);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    /* MCP's tools/call run_command against /execute, same command, same sbxd, in turns. */
    grpc_vs_rest mvr = {0};
    if ((phases & PH_MCP) && !crashed && !g_interrupted) {
        fprintf(stderr,
                "sbxd-bench: MCP tools/call and /execute, 1 client each, %d rounds of %d in "
                "turns ...\n",
                grpc_rounds, grpc_iters);
        tally rt = {0}, mt = {0};
        measure_mcp_vs_rest(&local, grpc_rounds, grpc_warm, grpc_iters, &mvr, &rt, &mt);
        NOTE_ERRORS("/execute 1 client, against MCP", rt);
        NOTE_ERRORS("MCP tools/call 1 client", mt);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    /* Exact edits against sed -i through /execute, in turns. */
    edit_result edr = {0};
    bool edit_ok = false;
    if ((phases & PH_EDIT) && !crashed && !g_interrupted) {
        int n = quick ? 100 : 1000;
        fprintf(stderr,
                "sbxd-bench: %d edits of a 1 MiB file, POST ?edit and sed -i in turns ...\n", n);
        char eerr[300] = "";
        edit_ok = measure_edits(&local, n, &edr, eerr, sizeof eerr) == 0;
        if (!edit_ok)
            warnx_("edits: %s", eerr);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    /* The proxy against the same upstream directly, and the terminal's echo. */
    net_result nr = {0};
    bool net_ok = false;
    if ((phases & PH_NET) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: /proxy/{port}/ and the upstream directly in turns, the "
                        "terminal's echo ...\n");
        char nerr[300] = "";
        net_ok = measure_net(&local, pid, quick, &nr, nerr, sizeof nerr) == 0;
        if (!net_ok || !nr.ok || !nr.tty_ok)
            warnx_("net: %s", nerr);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    /* The same with the process group as the only tree kill: what the stronger backend costs
     * on top of every other layer (its own floor, interleaved likewise). */
    samples exg = {0}, floor_g = {0};
    if ((phases & PH_PGID) && !crashed && !g_interrupted && strcmp(tree_kill, "pgid") != 0) {
        const char *was = getenv("SBXD_ISOLATION");
        char saved[32] = "";
        if (was)
            copy_str(saved, sizeof saved, was);
        setenv("SBXD_ISOLATION", "pgid", 1);
        int gport;
        double gready;
        pid_t gpid = start_ready(sbxd_abs, ws, NULL, &gport, &gready, NULL);
        if (was)
            setenv("SBXD_ISOLATION", saved, 1);
        else
            unsetenv("SBXD_ISOLATION");
        if (gpid > 0) {
            fprintf(stderr, "sbxd-bench: /execute, 1 client, --isolation pgid, %d requests ...\n",
                    iters);
            target gt;
            target_local(&gt, gport);
            tally gt_t = {0};
            run_seq(&gt, &REQ_EXEC, warm, iters, &exg, &gt_t, &floor_g);
            NOTE_ERRORS("/execute 1 client, pgid", gt_t);
            stop_sbxd(gpid, NULL);
        }
    }

    /* In rounds, each against a floor of its own measured just before it (the machine's pace
     * drifts over a run); the round with the median ratio is the one reported. */
    load_result ex16 = {0}, hz = {0}, usage = {0};
    double ex16_floor = 0, ex16_ratio = 0, ex16_cmd = 0, ex16_rate = 0;
    const int load_rounds = quick ? 1 : LOAD_ROUNDS;
    if ((phases & PH_LOAD) && !crashed && !g_interrupted) {
        load_result lr[LOAD_ROUNDS];
        double lf[LOAD_ROUNDS], lratio[LOAD_ROUNDS], lcmd[LOAD_ROUNDS], lrate[LOAD_ROUNDS];
        int done = 0;
        for (int r = 0; r < load_rounds && !crashed && !g_interrupted; r++) {
            fprintf(stderr, "sbxd-bench: /execute, %d clients, %.3g s, round %d of %d ...\n",
                    exec_clients, exec_secs, r + 1, load_rounds);
            lf[r] = spawn_p50_now(FLOOR_ARGV, LOAD_FLOOR_SAMPLES);
            lcmd[r] = spawn_p50_now(COMMAND_ARGV, LOAD_FLOOR_SAMPLES);
            lrate[r] = spawn_rate_now(COMMAND_ARGV, exec_clients, LOAD_RATE_SECS);
            run_load(&local, &REQ_EXEC, exec_clients, exec_secs, &lr[r]);
            NOTE_ERRORS("/execute 16 clients", lr[r].t);
            lratio[r] = lf[r] > 0 ? lr[r].rps / ((double)ncpu * 1000.0 / lf[r]) : 0;
            done++;
            if (!child_alive(pid, &crash_st))
                crashed = true;
        }
        if (done) {
            int order[LOAD_ROUNDS];
            for (int i = 0; i < done; i++)
                order[i] = i;
            for (int i = 1; i < done; i++) /* by ratio */
                for (int j = i; j > 0 && lratio[order[j]] < lratio[order[j - 1]]; j--) {
                    int t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
            int m = order[(done - 1) / 2];
            ex16 = lr[m];
            ex16_floor = lf[m];
            ex16_ratio = lratio[m];
            ex16_cmd = lcmd[m];
            ex16_rate = lrate[m];
        }
    }
    if ((phases & PH_HEALTH) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: /healthz, %d clients, %.3g s ...\n", health_clients,
                health_secs);
        run_load(&local, &REQ_HEALTH, health_clients, health_secs, &hz);
        NOTE_ERRORS("/healthz", hz.t);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    if ((phases & PH_HEALTH) && !crashed && !g_interrupted) {
        double secs = health_secs < 2 ? health_secs : 2;
        fprintf(stderr, "sbxd-bench: GET /usage, 1 client, %.3g s ...\n", secs);
        run_load(&local, &REQ_USAGE, 1, secs, &usage);
        NOTE_ERRORS("/usage", usage.t);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    /* Streaming: how soon a write reaches the client, and how fast output streams. */
    stream_result sr = {0};
    if ((phases & PH_STREAM) && !crashed && !g_interrupted) {
        int runs = quick ? 20 : 100;
        uint64_t ssize = quick ? 32ULL << 20 : 256ULL << 20;
        fprintf(stderr,
                "sbxd-bench: streamed /execute: first-event lag x%d, %" PRIu64
                " MiB of output ...\n",
                runs, ssize >> 20);
        total_errors += measure_stream(&local, runs, ssize, &sr);
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }

    xfer_result xf = {0};
    const uint64_t xsize = quick ? 32ULL << 20 : 256ULL << 20;
    if ((phases & PH_FILES) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: /files, %" PRIu64 " MiB up and down ...\n", xsize >> 20);
        char xerr[256] = "";
        measure_files(&local, pid, false, xsize, &xf, xerr, sizeof xerr);
        if (!xf.ok) {
            warnx_("/files transfer: %s", xerr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    /* The multipart routes against a raw PUT, best of a few rounds each, in turns. */
    double up_mbs[NUPLOADS] = {0};
    bool up_ok = false;
    if ((phases & PH_UPLOADS) && !crashed && !g_interrupted) {
        int rounds = quick ? 1 : 5;
        fprintf(stderr, "sbxd-bench: uploads, %" PRIu64 " MiB, raw and multipart, x%d ...\n",
                xsize >> 20, rounds);
        char uerr[256] = "";
        up_ok = measure_uploads(&local, xsize, rounds, up_mbs, uerr, sizeof uerr) == 0;
        if (!up_ok) {
            warnx_("uploads: %s", uerr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    /* /upload against a multipart PUT with the workspace already holding ~0.8 GB, on an sbxd
     * of its own on a tmpfs of its own. */
    full_result full = {0};
    if ((phases & PH_FULL) && !g_interrupted) {
        int rounds = quick ? 2 : 5;
        char fdir[96], ferr[300] = "";
        snprintf(fdir, sizeof fdir, "%s.full", ws);
        fprintf(stderr,
                "sbxd-bench: uploads into a workspace holding %" PRIu64
                " MiB (tmpfs), PUT then POST /upload, x%d ...\n",
                (3 * xsize) >> 20, rounds);
        measure_full_uploads(sbxd_abs, fdir, xsize, rounds, &full, ferr, sizeof ferr);
        if (ferr[0]) {
            warnx_("uploads into a full workspace: %s", ferr);
            total_errors++;
        } else if (full.why[0]) {
            fprintf(stderr, "sbxd-bench: uploads into a full workspace: n/a, %s\n", full.why);
        }
    }
    ctx_result cx = {0};
    if ((phases & PH_CONTEXTS) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: contexts: create x%d, %d executions, %d idle ...\n",
                quick ? 5 : 20, quick ? 50 : 200, CTX_IDLE);
        char cerr[256] = "";
        measure_contexts(&local, pid, quick ? 5 : 20, quick ? 10 : 20, quick ? 50 : 200, &cx, cerr,
                         sizeof cerr);
        if (!cx.ok) {
            warnx_("contexts: %s", cerr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    ws_result wsr = {0};
    tree_result trees = {0};
    if ((phases & PH_WORKSPACE) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: workspace: watch latency and stat, x%d ...\n",
                quick ? 50 : 200);
        char werr[256] = "";
        measure_workspace(&local, quick ? 50 : 200, &wsr, werr, sizeof werr);
        if (!wsr.ok) {
            warnx_("workspace: %s", werr);
            total_errors++;
        }
        fprintf(stderr, "sbxd-bench: workspace: a tree of %d files as tar, down and up ...\n",
                TREE_FILES);
        werr[0] = '\0';
        measure_trees(&local, ws, &trees, werr, sizeof werr);
        if (!trees.ok) {
            warnx_("workspace: trees: %s", werr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    search_result srch = {0};
    if ((phases & PH_SEARCH) && !crashed && !g_interrupted) {
        char serr[256] = "";
        fprintf(stderr, "sbxd-bench: search: a tree of %d files, grep= and glob= ...\n",
                SEARCH_DIRS * (quick ? SEARCH_FILES / 10 : SEARCH_FILES));
        measure_search(&local, pid, quick, &srch, serr, sizeof serr);
        if (!srch.ok) {
            warnx_("search: %s", serr);
            total_errors++;
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    reset_result rst = {0};
    if ((phases & PH_WORKSPACE) && !crashed && !g_interrupted) {
        fprintf(stderr, "sbxd-bench: workspace: POST /reset of %d files, x%d ...\n", RESET_FILES,
                quick ? 1 : 3);
        char rerr[256] = "", reset_ws[96];
        snprintf(reset_ws, sizeof reset_ws, "%s.reset", ws);
        measure_reset(sbxd_abs, reset_ws, quick ? 1 : 3, &rst, rerr, sizeof rerr);
        if (!rst.ok) {
            warnx_("reset: %s", rerr);
            total_errors++;
        }
    }
    /* Python kernels: on sbxds of their own (with and without a warm kernel), this one idle. */
    py_result py = {0};
    bool py_ran = false;
    if ((phases & PH_CONTEXTS) && !crashed && !g_interrupted) {
        char perr[256] = "";
        if ((mkdir(py_ws, 0755) != 0 && errno != EEXIST) ||
            (mkdir(jc_home, 0700) != 0 && errno != EEXIST))
            warnx_("mkdir %s or %s: %s", py_ws, jc_home, strerror(errno));
        measure_python(sbxd_abs, py_ws, jc_home, quick, &py, perr, sizeof perr);
        py_ran = true;
        if (py.why[0]) {
            warnx_("python contexts: none measured: %s", py.why);
        } else if (!py.ok && !g_interrupted) {
            warnx_("python contexts: %s", perr);
            total_errors++;
            if (!first_error[0])
                snprintf(first_error, sizeof first_error, "python contexts: %s", perr);
        }
        if (!child_alive(pid, &crash_st))
            crashed = true;
    }
    long rss_after = crashed ? -1 : vmrss_kb(pid);
    if (crashed) {
        warnx_("sbxd died under load: %s", describe_status(crash_st, d, sizeof d));
        total_errors++;
        exit_code = 1;
    } else {
        double stop_ms;
        int st = stop_sbxd(pid, &stop_ms);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            warnx_("sbxd stopped with %s after SIGTERM (want exit 0)",
                   describe_status(st, d, sizeof d));
            total_errors++;
        }
    }
    /* Every sbxd started keeps a warm kernel by default: none may outlive it. */
    int kernels_left = kernels_reap(ws) + kernels_reap(py_ws);
    if (kernels_left) {
        warnx_("%d kernel process(es) outlived their sbxd", kernels_left);
        total_errors++;
    }
    if (g_interrupted)
        goto out;

    double floor_p50 = pct(&floor_lat, 50), floor_p99 = pct(&floor_lat, 99);
    char label[96];
    if (ex1.n) {
        add_row("floor: fork+exec /bin/true p50", "", "", "%.3f ms", floor_p50);
        add_row("floor: fork+exec /bin/true p99", "", "", "%.3f ms", floor_p99);
        double ratio = floor_p50 > 0 ? pct(&ex1, 50) / floor_p50 : 0;
        add_row("/execute echo hi, 1 client: p50", "", "", "%.3f ms", pct(&ex1, 50));
        add_row("/execute echo hi, 1 client: p99", "", "", "%.3f ms", pct(&ex1, 99));
        snprintf(label, sizeof label, "/execute p50 / floor p50 (%s)", tree_kill);
        /* Every layer on, whichever tree kill the host gives: at most 1.5x; the process group
         * alone (no tree-kill backend) is held to the original 1.3x. */
        double want = strcmp(tree_kill, "pgid") == 0 ? 1.3 : 1.5;
        add_row(label, want == 1.3 ? "<= 1.3" : "<= 1.5", yesno(ex1.n && ratio <= want), "%.2f",
                ratio);
        if (exg.n && floor_g.n) {
            double rg = pct(&exg, 50) / pct(&floor_g, 50);
            add_row("/execute p50 / floor p50 (pgid)", "<= 1.3", yesno(rg <= 1.3), "%.2f", rg);
        }
    }
    if (gvr.rounds) {
        /* The same command through each front (measure_grpc_vs_rest), the best p50s and the
         * median of the rounds' paired ratios: what gRPC's framing and HTTP/2 cost over
         * HTTP/1.1 and JSON. */
        add_row("gRPC Execute echo hi, 1 client: p50", "", "", "%.3f ms", gvr.grpc_p50);
        add_row("gRPC Execute echo hi, 1 client: p90", "", "", "%.3f ms", gvr.grpc_p90);
        add_row("  /execute, same rounds: p50 / p90", "", "", "%.3f / %.3f ms", gvr.rest_p50,
                gvr.rest_p90);
        double gr = gvr_ratio(&gvr);
        snprintf(label, sizeof label, "  gRPC p50 / /execute p50 (median of %d rounds)",
                 gvr.rounds);
        add_row(label, "<= 1.1", yesno(gr <= 1.1), "%.2f", gr);
    }
    if (mvr.rounds) {
        /* JSON-RPC framing, the session and the tool result (the output twice: as text for
         * a model and as fields) over /execute's answer. */
        add_row("MCP tools/call run_command echo hi: p50", "", "", "%.3f ms", mvr.grpc_p50);
        add_row("MCP tools/call run_command echo hi: p90", "", "", "%.3f ms", mvr.grpc_p90);
        add_row("  /execute, same rounds: p50 / p90", "", "", "%.3f / %.3f ms", mvr.rest_p50,
                mvr.rest_p90);
        double mr = gvr_ratio(&mvr);
        snprintf(label, sizeof label, "  MCP p50 / /execute p50 (median of %d rounds)", mvr.rounds);
        add_row(label, "<= 1.2", yesno(mr <= 1.2), "%.2f", mr);
    }
    if (edit_ok && edr.edit.n) {
        /* The edit fsyncs the file before its rename (crash-safe); sed -i does not. */
        add_row("POST ?edit, 1 MiB file: p50 / p99", "", "", "%.3f / %.3f ms", pct(&edr.edit, 50),
                pct(&edr.edit, 99));
        add_row("  sed -i via /execute: p50 / p99", "", "", "%.3f / %.3f ms", pct(&edr.sed, 50),
                pct(&edr.sed, 99));
    }
    if (net_ok && nr.ok) {
        for (int k = 0; k < 2; k++) {
            snprintf(label, sizeof label, "/proxy small GETs, %d connection%s: req/s", k ? 16 : 1,
                     k ? "s" : "");
            add_row(label, "", "", "%.0f (direct %.0f)", nr.rps_proxy[k], nr.rps_direct[k]);
            add_row("  proxy / direct (median round)", ">= 0.7", yesno(nr.ratio[k] >= 0.7), "%.2f",
                    nr.ratio[k]);
            if (nr.rps_relay[k] > 0) {
                add_row("  plain relay / direct: any proxy's ceiling here", "", "",
                        "%.2f (%.0f req/s)", nr.relay_ratio[k], nr.rps_relay[k]);
                add_row("  proxy / plain relay", "", "", "%.2f", nr.rps_proxy[k] / nr.rps_relay[k]);
            }
        }
        double dr = nr.down_direct > 0 ? nr.down_proxy / nr.down_direct : 0;
        double ur = nr.up_direct > 0 ? nr.up_proxy / nr.up_direct : 0;
        add_row("/proxy 256 MiB download: MB/s", "", "", "%.0f (direct %.0f)", nr.down_proxy,
                nr.down_direct);
        add_row("  proxy / direct", ">= 0.8", yesno(dr >= 0.8), "%.2f", dr);
        if (nr.down_relay > 0)
            add_row("  plain relay / direct; proxy / relay", "", "", "%.2f; %.2f",
                    nr.down_relay / nr.down_direct, nr.down_proxy / nr.down_relay);
        add_row("/proxy 256 MiB upload: MB/s", "", "", "%.0f (direct %.0f)", nr.up_proxy,
                nr.up_direct);
        add_row("  proxy / direct", ">= 0.8", yesno(ur >= 0.8), "%.2f", ur);
        if (nr.up_relay > 0)
            add_row("  plain relay / direct; proxy / relay", "", "", "%.2f; %.2f",
                    nr.up_relay / nr.up_direct, nr.up_proxy / nr.up_relay);
        add_row("  sbxd RSS growth while proxying", "", "", "%ld KiB", nr.grew_kb);
    }
    if (net_ok && nr.tty_ok) {
        add_row("terminal key to echo, WebSocket: p50 / p99", "", "", "%.3f / %.3f ms",
                pct(&nr.ws, 50), pct(&nr.ws, 99));
        add_row("  POST stdin + output stream: p50 / p99", "", "", "%.3f / %.3f ms",
                pct(&nr.post, 50), pct(&nr.post, 99));
    }
    if (phases & PH_LOAD) {
        snprintf(label, sizeof label, "/execute req/s, 16 clients (median of %d rounds)",
                 load_rounds);
        add_row(label, "", "", "%.0f", ex16.rps);
        add_row("  p50 / p99 under that load", "", "", "%.2f / %.2f ms", ex16.p50, ex16.p99);
        /* What the cores could do running `true` back to back at the floor's pace (a lone
         * fork+exec+wait, measured just before the round), each core busy with one after
         * another. */
        if (ex16.rps > 0 && ex16_floor > 0) {
            double limit = (double)ncpu * 1000.0 / ex16_floor;
            snprintf(label, sizeof label, "  / (%d cores / floor p50 %.3f ms = %.0f/s)", ncpu,
                     ex16_floor, limit);
            add_row(label, ">= 0.85", yesno(ex16_ratio >= 0.85), "%.2f", ex16_ratio);
        }
        /* The same against spawning the very command /execute runs (sh -c 'echo hi', its
         * output to /dev/null): what sbxd adds, apart from what the command costs over
         * /bin/true. */
        if (ex16.rps > 0 && ex16_cmd > 0) {
            double limit = (double)ncpu * 1000.0 / ex16_cmd;
            snprintf(label, sizeof label, "  / (%d cores / sh -c 'echo hi' p50 %.3f ms = %.0f/s)",
                     ncpu, ex16_cmd, limit);
            add_row(label, "", "", "%.2f", ex16.rps / limit);
        }
        /* Against the machine's own pace at that concurrency: 16 threads of the bench each
         * spawning that command back to back, measured in the same round. This is the
         * ceiling for any spawner where process creation does not scale with the cores. */
        if (ex16.rps > 0 && ex16_rate > 0) {
            snprintf(label, sizeof label, "  / (%d threads spawning sh -c 'echo hi': %.0f/s)",
                     exec_clients, ex16_rate);
            add_row(label, ">= 0.85", yesno(ex16.rps / ex16_rate >= 0.85), "%.2f",
                    ex16.rps / ex16_rate);
        }
    }
    if (phases & PH_HEALTH) {
        add_row("/healthz req/s, 8 clients", ">= 20000", yesno(hz.rps >= 20000), "%.0f", hz.rps);
        add_row("  p50 / p99 under that load", "", "", "%.3f / %.3f ms", hz.p50, hz.p99);
        add_row("GET /usage, 1 client: p50", "<= 1 ms", yesno(usage.p50 <= 1), "%.3f ms",
                usage.p50);
    }
    {
        stream_rows(&sr, "stream");
        if (xf.ok) {
            char lbl[96];
            snprintf(lbl, sizeof lbl, "upload %" PRIu64 " MiB, PUT /files", xsize >> 20);
            add_row(lbl, ">= 800 MB/s", yesno(xf.up_mbs >= 800), "%.0f MB/s", xf.up_mbs);
            add_row("  RSS growth during it", "<= 8 MiB", yesno(xf.up_growth_kb <= 8192),
                    "%.2f MiB", (double)xf.up_growth_kb / 1024.0);
            snprintf(lbl, sizeof lbl, "download %" PRIu64 " MiB, GET /files", xsize >> 20);
            add_row(lbl, ">= 2000 MB/s", yesno(xf.down_mbs >= 2000), "%.0f MB/s", xf.down_mbs);
            add_row("  RSS growth during it", "<= 8 MiB", yesno(xf.down_growth_kb <= 8192),
                    "%.2f MiB", (double)xf.down_growth_kb / 1024.0);
        }
        if (up_ok) {
            char lbl[96];
            snprintf(lbl, sizeof lbl, "upload %" PRIu64 " MiB, best of rounds:", xsize >> 20);
            add_row(lbl, "", "", "%s", "");
            add_row("  PUT /files (raw)", "", "", "%.0f MB/s", up_mbs[0]);
            for (size_t k = 1; k < NUPLOADS; k++) {
                snprintf(lbl, sizeof lbl, "  %s", UPLOADS[k].label);
                add_row(lbl, "", "", "%.0f MB/s", up_mbs[k]);
                double r = up_mbs[k] / up_mbs[0];
                add_row("    / raw PUT /files", ">= 0.9", yesno(r >= 0.9), "%.2f", r);
            }
        }
    }
    if (phases & PH_FULL) {
        char lbl[128];
        snprintf(lbl, sizeof lbl,
                 "upload %" PRIu64 " MiB, workspace holding %llu MiB (tmpfs %llu):", xsize >> 20,
                 full.held_mib, full.tmpfs_mib);
        if (full.ok) {
            samples_sort(&full.put_mp);
            samples_sort(&full.upload);
            double pm = median_of(full.put_mp.v, (int)full.put_mp.n);
            double um = median_of(full.upload.v, (int)full.upload.n);
            add_row(lbl, "", "", "median of %zu", full.upload.n);
            add_row("  PUT /files (multipart)", "", "", "%.0f MB/s (%.0f-%.0f)", pm,
                    full.put_mp.v[0], full.put_mp.v[full.put_mp.n - 1]);
            add_row("  POST /upload (as the SDK sends it)", "", "", "%.0f MB/s (%.0f-%.0f)", um,
                    full.upload.v[0], full.upload.v[full.upload.n - 1]);
            add_row("    / PUT /files (multipart)", ">= 0.9", yesno(um / pm >= 0.9), "%.2f",
                    um / pm);
        } else {
            add_row(lbl, "", "", "n/a%s%s", full.why[0] ? ": " : "", full.why);
        }
    }
    samples_free(&full.put_mp);
    samples_free(&full.upload);
    if (cx.ok) {
        add_row("context: POST /contexts (bash), p50", "", "", "%.2f ms", pct(&cx.create, 50));
        add_row("context: execute x=$((x+1)), p50", "", "", "%.3f ms", pct(&cx.exec, 50));
        add_row("  p99", "", "", "%.3f ms", pct(&cx.exec, 99));
        char lbl[96];
        snprintf(lbl, sizeof lbl, "RSS, %d idle contexts (shells apart)", CTX_IDLE);
        add_row(lbl, "", "", "%.2f MiB (+%.1f KiB each)", (double)cx.rss_idle / 1024.0,
                (double)(cx.rss_idle - cx.rss_base) / CTX_IDLE);
    }
    samples_free(&cx.create);
    samples_free(&cx.exec);
    if (wsr.ok) {
        add_row("watch: PUT -> its event, p50 / p99", "", "", "%.3f / %.3f ms", pct(&wsr.watch, 50),
                pct(&wsr.watch, 99));
        add_row("GET ?stat=true, p50", "", "", "%.3f ms", pct(&wsr.stat, 50));
    }
    if (srch.ok) {
        add_row("search: GET ?grep= literal", "<= grep -rn", yesno(srch.lit_ms <= srch.lit_grep_ms),
                "%.1f ms, %ld matches, %.0f MB", srch.lit_ms, srch.lit_n, (double)srch.bytes / 1e6);
        add_row("  ... grep -rn in /execute", "", "", "%.1f ms, %ld lines", srch.lit_grep_ms,
                srch.lit_grep_n);
        if (srch.have_rg)
            add_row("  ... rg -n in /execute", "sbxd <= 1.5x",
                    yesno(srch.lit_ms <= 1.5 * srch.lit_rg_ms), "%.1f ms, %ld lines",
                    srch.lit_rg_ms, srch.lit_rg_n);
        add_row("search: GET ?grep= regex", "<= grep -rnE", yesno(srch.re_ms <= srch.re_grep_ms),
                "%.1f ms, %ld matches", srch.re_ms, srch.re_n);
        add_row("  ... grep -rnE in /execute", "", "", "%.1f ms, %ld lines", srch.re_grep_ms,
                srch.re_grep_n);
        if (srch.have_rg)
            add_row("  ... rg -n (regex) in /execute", "sbxd <= 1.5x",
                    yesno(srch.re_ms <= 1.5 * srch.re_rg_ms), "%.1f ms, %ld lines", srch.re_rg_ms,
                    srch.re_rg_n);
        add_row("search: GET ?glob=**/*.h", "<= find -name", yesno(srch.glob_ms <= srch.find_ms),
                "%.1f ms, %ld entries", srch.glob_ms, srch.glob_n);
        add_row("  ... find -name in /execute", "", "", "%.1f ms, %ld lines", srch.find_ms,
                srch.find_n);
        add_row("search: sbxd RSS growth", "<= 8 MiB", yesno(srch.rss_growth_kb <= 8192), "%ld KiB",
                srch.rss_growth_kb);
    }
    if (trees.ok) {
        double mb = (double)trees.tar_bytes / 1e6;
        add_row("tree of 10k files: GET ?archive=tar", "", "", "%.0f files/s, %.0f MB/s",
                TREE_FILES / (trees.down_ms / 1e3), mb / (trees.down_ms / 1e3));
        add_row("  ... tar in /execute + GET the .tar", "", "", "%.0f files/s (x%.2f)",
                TREE_FILES / (trees.down_base_ms / 1e3), trees.down_base_ms / trees.down_ms);
        add_row("tree of 10k files: PUT ?archive=tar", "", "", "%.0f files/s, %.0f MB/s",
                TREE_FILES / (trees.up_ms / 1e3), mb / (trees.up_ms / 1e3));
        add_row("  ... PUT the .tar + tar -x in /execute", "", "", "%.0f files/s (x%.2f)",
                TREE_FILES / (trees.up_base_ms / 1e3), trees.up_base_ms / trees.up_ms);
    }
    samples_free(&wsr.watch);
    samples_free(&wsr.stat);
    if (rst.ok) {
        char lbl[96];
        snprintf(lbl, sizeof lbl, "POST /reset, %llu files (sbxd's own figure)", rst.files);
        add_row(lbl, "< 1 s", yesno(rst.ms < 1000), "%.1f ms (%.1f ms)", rst.ms, rst.sbxd_ms);
    }
    if (py_ran && py.why[0])
        add_row("context: python", "", "", "n/a: %.55s", py.why);
    if (py.ok) {
        add_row("context: POST /contexts (python, warm), p50", "<= 20 ms",
                yesno(pct(&py.warm_create, 50) <= 20), "%.2f ms", pct(&py.warm_create, 50));
        add_row("context: POST /contexts (python, cold), p50", "", "", "%.0f ms",
                pct(&py.cold_create, 50));
        add_row("context: python x += 1, p50 / p99", "", "", "%.3f / %.3f ms",
                pct(&py.sbxd_exec, 50), pct(&py.sbxd_exec, 99));
        if (py.rounds) {
            add_row("  jupyter_client, same rounds: p50 / p99", "", "", "%.3f / %.3f ms",
                    pct(&py.jc_exec, 50), pct(&py.jc_exec, 99));
            add_row("  the kernel's busy -> idle in those, p50", "", "", "%.3f ms",
                    pct(&py.jc_kernel, 50));
            char lbl[96];
            double r = median_of(py.ratio, py.rounds);
            snprintf(lbl, sizeof lbl, "  sbxd p50 / jupyter_client p50 (median of %d rounds)",
                     py.rounds);
            add_row(lbl, "<= 0.5", yesno(r <= 0.5), "%.2f", r);
        } else {
            add_row("  jupyter_client", "", "", "n/a: %.55s", py.jc_why);
        }
        char lbl[96];
        snprintf(lbl, sizeof lbl, "RSS, %d idle python contexts (kernels apart)", CTX_IDLE);
        add_row(lbl, "", "", "%.2f MiB (+%.1f KiB each)", (double)py.rss_idle / 1024.0,
                (double)(py.rss_idle - py.rss_base) / CTX_IDLE);
        add_row("  sbxd before its first kernel", "", "", "%.2f MiB",
                (double)py.rss_fresh / 1024.0);
    }
    samples_free(&py.warm_create);
    samples_free(&py.cold_create);
    samples_free(&py.sbxd_exec);
    samples_free(&py.jc_exec);
    samples_free(&py.jc_kernel);
    /* With the gRPC listener on, as by default (start_sbxd). */
    add_row("idle RSS (gRPC listener on)", "<= 3 MiB", yesno(rss_idle > 0 && rss_idle <= 3072),
            "%.2f MiB", (double)rss_idle / 1024.0);
    if (rss_grpc >= 0) {
        char lbl[96];
        snprintf(lbl, sizeof lbl, "RSS, %d idle gRPC connections", GRPC_IDLE_CONNS);
        add_row(lbl, "", "", "%.2f MiB", (double)rss_grpc / 1024.0);
        add_row("  per connection", "", "", "%.1f KiB",
                (double)(rss_grpc - rss_grpc_base) / GRPC_IDLE_CONNS);
    }
    if (rss_conns >= 0) {
        char lbl[96];
        snprintf(lbl, sizeof lbl, "RSS, %d idle kept-alive connections", idle_conns);
        add_row(lbl, "", "", "%.2f MiB", (double)rss_conns / 1024.0);
        add_row("  per connection", "", "", "%.1f KiB",
                (double)(rss_conns - rss_conns_base) / idle_conns);
    }
    if (rss_after >= 0)
        add_row("RSS after load", "", "", "%.2f MiB", (double)rss_after / 1024.0);
    else
        add_row("RSS after load", "", "", "%s", "n/a (died)");
    if (ready.n)
        add_row("ready (median of fresh starts)", "<= 20 ms", yesno(ready_med <= 20), "%.2f ms",
                ready_med);
    if (ready.n > 1)
        add_row("  min / max", "", "", "%.2f / %.2f ms", ready.v[0], ready.v[ready.n - 1]);

    /* 4. the other server */
    if (vs) {
        fprintf(stderr, "sbxd-bench: other server %s ...\n", vs);
        conn c;
        conn_init(&c, &other, IO_TIMEOUT_S);
        tally t = {0};
        bool up = do_checked(&c, &REQ_ROOT, &t);
        conn_free(&c);
        NOTE_ERRORS("other: GET /", t);
        if (up && !g_interrupted) {
            samples ox = {0};
            tally ox_t = {0};
            run_seq(&other, &REQ_EXEC, warm, iters, &ox, &ox_t, NULL);
            NOTE_ERRORS("other: /execute 1 client", ox_t);
            load_result o16 = {0};
            if (!g_interrupted) {
                fprintf(stderr, "sbxd-bench: other server, /execute, %d clients, %.3g s ...\n",
                        exec_clients, exec_secs);
                run_load(&other, &REQ_EXEC, exec_clients, exec_secs, &o16);
                NOTE_ERRORS("other: /execute 16 clients", o16.t);
            }
            xfer_result oxf = {0};
            if (!g_interrupted) {
                fprintf(stderr, "sbxd-bench: other server, /upload and /download ...\n");
                char xerr[256] = "";
                measure_files(&other, 0, true, xsize, &oxf, xerr, sizeof xerr);
                if (!oxf.ok) {
                    warnx_("other: transfer: %s", xerr);
                    total_errors++;
                }
            }
            add_row("other: /execute 1 client: p50", "", "", "%.3f ms", pct(&ox, 50));
            add_row("other: /execute 1 client: p99", "", "", "%.3f ms", pct(&ox, 99));
            add_row("other: /execute req/s, 16 clients", "", "", "%.0f", o16.rps);
            add_row("  p50 / p99 under that load", "", "", "%.2f / %.2f ms", o16.p50, o16.p99);
            if (ex1.n && ox.n)
                add_row("p50 latency: other / sbxd", "> 1", yesno(pct(&ox, 50) > pct(&ex1, 50)),
                        "%.1fx", pct(&ox, 50) / pct(&ex1, 50));
            if (ex1.n && ox.n)
                add_row("p99 latency: other / sbxd", "> 1", yesno(pct(&ox, 99) > pct(&ex1, 99)),
                        "%.1fx", pct(&ox, 99) / pct(&ex1, 99));
            if (o16.rps > 0)
                add_row("req/s, 16 clients: sbxd / other", "> 1", yesno(ex16.rps > o16.rps),
                        "%.1fx", ex16.rps / o16.rps);
            if (oxf.ok) {
                add_row("other: upload (POST /upload)", "", "", "%.0f MB/s", oxf.up_mbs);
                add_row("other: download (GET /download)", "", "", "%.0f MB/s", oxf.down_mbs);
                if (xf.ok)
                    add_row("upload, download: sbxd / other", "> 1",
                            yesno(xf.up_mbs > oxf.up_mbs && xf.down_mbs > oxf.down_mbs),
                            "%.1fx, %.1fx", xf.up_mbs / oxf.up_mbs, xf.down_mbs / oxf.down_mbs);
                /* The same route on both: the legacy multipart upload. */
                if (up_ok)
                    add_row("POST /upload: sbxd / other", "> 1", yesno(up_mbs[1] > oxf.up_mbs),
                            "%.1fx", up_mbs[1] / oxf.up_mbs);
            }
            samples_free(&ox);
        }
    }

    add_row("errors (non-200 / transport / exit)", "0", yesno(total_errors == 0), "%lu",
            total_errors);
    printf("\n");
    print_table();
    if (total_errors) {
        printf("\nfirst error: %s\n", first_error[0] ? first_error : "(see above)");
        exit_code = 1;
    }
    samples_free(&ex1);
    samples_free(&exg);
    samples_free(&floor_g);
    samples_free(&ready);
    samples_free(&floor_lat);

out:
    if (g_sbxd_pid > 0)
        stop_sbxd(g_sbxd_pid, NULL);
    full_unmount();
    kernels_reap(ws);
    kernels_reap(py_ws);
    rm_rf(ws);
    rm_rf(py_ws);
    rm_rf(jc_home);
    unlink(g_log_path);
    if (g_interrupted) {
        warnx_("interrupted");
        return 130;
    }
    return exit_code;
}
