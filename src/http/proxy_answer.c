/*
 * proxy_answer.c - an upstream's answer, parsed by http-parser (proxy_answer.h).
 *
 * Small for a small answer (a GET of a few bytes costs a few KiB, from the heap: sbxd maps
 * every allocation over 64 KiB on its own, which per request is a system call and page
 * faults), and one copy for a large one: the head is read through a 16 KiB buffer (grown for
 * a long one, to 64 KiB); the body is decoded straight into the caller's buffer, and a body
 * of a known length is, once what came with the head is out, read straight into it without
 * the parser. What one parse decodes past the caller's room waits in an overflow buffer,
 * made only then.
 */
#include <errno.h>
#include <http_parser.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy_answer.h"

#define PA_RAW         16384 /* the upstream's bytes read at a time for the parser */
#define PA_HEAD_MAX    65536
#define PA_MAX_HEADERS 128

struct proxy_answer {
    http_parser parser;
    bool head_req;
    unsigned status;
    char *head; /* "name\0value\0" pairs, grown to PA_HEAD_MAX */
    size_t head_len, head_cap;
    size_t names[PA_MAX_HEADERS], values[PA_MAX_HEADERS];
    unsigned nheaders;
    bool in_value, head_done, done, too_big;
    char raw[PA_RAW];
    size_t raw_len, raw_off;
    /* While a parse runs: where on_body puts the body, and what is past its room. */
    char *out;
    size_t out_len, out_cap;
    char *over;
    size_t over_len, over_off, over_cap;
    int64_t length;       /* the body's length as the head gave it (-1: none, or chunked) */
    uint64_t direct_left; /* a known length's rest, read without the parser */
    bool direct;
};

static struct proxy_answer *of(http_parser *p)
{
    return p->data;
}

static int head_add(struct proxy_answer *a, const char *at, size_t n)
{
    if (a->head_len + n + 1 > PA_HEAD_MAX) {
        a->too_big = true;
        return -1;
    }
    if (a->head_len + n + 1 > a->head_cap) {
        size_t cap = a->head_cap ? a->head_cap : 4096;
        while (cap < a->head_len + n + 1)
            cap *= 2;
        char *h = realloc(a->head, cap);
        if (!h)
            return -1;
        a->head = h;
        a->head_cap = cap;
    }
    memcpy(a->head + a->head_len, at, n);
    a->head_len += n;
    return 0;
}

static int on_field(http_parser *p, const char *at, size_t n)
{
    struct proxy_answer *a = of(p);
    if (a->head_done)
        return 0; /* a chunked body's trailers: not passed on */
    if (a->in_value || !a->nheaders) {
        if (a->nheaders == PA_MAX_HEADERS) {
            a->too_big = true;
            return -1;
        }
        if (a->nheaders && head_add(a, "", 1) < 0) /* the value's end */
            return -1;
        a->names[a->nheaders] = a->head_len;
        a->values[a->nheaders++] = SIZE_MAX;
        a->in_value = false;
    }
    return head_add(a, at, n);
}

static int on_value(http_parser *p, const char *at, size_t n)
{
    struct proxy_answer *a = of(p);
    if (a->head_done)
        return 0;
    if (!a->nheaders)
        return -1;
    if (!a->in_value) {
        if (head_add(a, "", 1) < 0) /* the name's end */
            return -1;
        a->values[a->nheaders - 1] = a->head_len;
        a->in_value = true;
    }
    return head_add(a, at, n);
}

static bool interim(unsigned status)
{
    return status >= 100 && status < 200 && status != 101;
}

static int on_headers_complete(http_parser *p)
{
    struct proxy_answer *a = of(p);
    if (head_add(a, "", 1) < 0)
        return -1;
    /* A name without a value: an empty value (the name's own NUL ends it too). */
    for (unsigned i = 0; i < a->nheaders; i++)
        if (a->values[i] == SIZE_MAX)
            a->values[i] = a->head_len - 1;
    a->status = p->status_code;
    if (interim(a->status)) { /* 102, 103: dropped; the final answer follows */
        a->head_len = 0;
        a->nheaders = 0;
        a->in_value = false;
        return 0;
    }
    a->head_done = true;
    /* (The parser counts content_length down as the body goes by.) */
    a->length =
        (p->flags & F_CHUNKED) || p->content_length == ULLONG_MAX || p->content_length > INT64_MAX
            ? -1
            : (int64_t)p->content_length;
    /* A 101 with its Upgrade stops the parser at the head's end by itself, every byte of the
     * head counted (a pause here would leave its last newline for the new protocol). */
    if (a->status != 101 || !p->upgrade)
        http_parser_pause(p, 1);
    /* No body to a HEAD (http-parser knows 204 and 304 itself). */
    return a->head_req ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct proxy_answer *a = of(p);
    if (!a->head_done)
        return 0; /* an interim answer's body (it should have none): not the answer's */
    size_t room = a->out_cap - a->out_len, k = n < room ? n : room;
    memcpy(a->out + a->out_len, at, k);
    a->out_len += k;
    if (k == n)
        return 0;
    /* Past the caller's room: kept for its next call (at most one read's worth). */
    size_t rest = n - k;
    if (a->over_len + rest > a->over_cap) {
        size_t cap = a->over_len + rest;
        char *o = realloc(a->over, cap);
        if (!o)
            return -1;
        a->over = o;
        a->over_cap = cap;
    }
    memcpy(a->over + a->over_len, at + k, rest);
    a->over_len += rest;
    return 0;
}

static int on_complete(http_parser *p)
{
    struct proxy_answer *a = of(p);
    if (interim(a->status) && !a->head_done)
        return 0;
    a->done = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

struct proxy_answer *pa_new(bool head_req)
{
    struct proxy_answer *a = malloc(sizeof(*a));
    if (!a)
        return NULL;
    /* Everything but the raw buffer, which is written before it is read. */
    memset(a, 0, offsetof(struct proxy_answer, raw));
    memset(&a->raw_len, 0, sizeof(*a) - offsetof(struct proxy_answer, raw_len));
    http_parser_init(&a->parser, HTTP_RESPONSE);
    a->parser.data = a;
    a->head_req = head_req;
    return a;
}

void pa_free(struct proxy_answer *a)
{
    if (!a)
        return;
    free(a->head);
    free(a->over);
    free(a);
}

/* Parse what was read and not parsed yet, or read more first when none is left. 0, 1 when
 * the upstream closed, -1 on an error (errno EAGAIN: a timeout). */
static int step(struct proxy_answer *a, int fd)
{
    if (a->raw_off == a->raw_len) {
        ssize_t k;
        do
            k = recv(fd, a->raw, sizeof(a->raw), 0);
        while (k < 0 && errno == EINTR);
        if (k < 0)
            return -1;
        a->raw_off = 0;
        a->raw_len = (size_t)k;
        if (k == 0) { /* an answer delimited by the close ends here */
            http_parser_pause(&a->parser, 0);
            http_parser_execute(&a->parser, &settings, NULL, 0);
            return 1;
        }
    }
    if (a->parser.upgrade && a->head_done)
        return 0; /* what follows is the new protocol's */
    http_parser_pause(&a->parser, 0);
    size_t used =
        http_parser_execute(&a->parser, &settings, a->raw + a->raw_off, a->raw_len - a->raw_off);
    a->raw_off += used;
    enum http_errno e = HTTP_PARSER_ERRNO(&a->parser);
    if (e != HPE_OK && e != HPE_PAUSED) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

enum pa_head pa_head(struct proxy_answer *a, int fd)
{
    char none[1];
    a->out = none; /* no body comes before the head's end (a parse pauses there) */
    a->out_cap = a->out_len = 0;
    while (!a->head_done) {
        int k = step(a, fd);
        if (k < 0)
            return a->too_big                                ? PA_HEAD_TOO_LARGE
                   : errno == EAGAIN || errno == EWOULDBLOCK ? PA_HEAD_TIMEOUT
                   : errno == EPROTO                         ? PA_HEAD_NOT_HTTP
                                                             : PA_HEAD_CLOSED;
        if (k > 0 && !a->head_done)
            return PA_HEAD_CLOSED;
    }
    a->out = NULL;
    /* http-parser takes any three digits ("020" is 20): an answer is 1xx to 5xx; a 101
     * names the protocol it switches to (RFC 9110 15.2.2: Upgrade and Connection: upgrade). */
    if (a->status < 100 || a->status > 599 || (a->status == 101 && !a->parser.upgrade))
        return PA_HEAD_NOT_HTTP;
    return PA_HEAD_OK;
}

unsigned pa_status(const struct proxy_answer *a)
{
    return a->status;
}

unsigned pa_nheaders(const struct proxy_answer *a)
{
    return a->nheaders;
}

void pa_header(const struct proxy_answer *a, unsigned i, const char **name, const char **value)
{
    *name = a->head + a->names[i];
    *value = a->head + a->values[i];
}

int64_t pa_length(const struct proxy_answer *a)
{
    return a->length;
}

void pa_rest(const struct proxy_answer *a, const char **data, size_t *n)
{
    *data = a->raw + a->raw_off;
    *n = a->raw_len - a->raw_off;
}

bool pa_reusable(const struct proxy_answer *a)
{
    return a->done && !a->parser.upgrade && http_should_keep_alive(&a->parser) &&
           a->raw_off == a->raw_len && a->over_off == a->over_len;
}

bool pa_untouched(const struct proxy_answer *a)
{
    return a->raw_len == 0 && !a->head_done;
}

/* A known length's rest straight into out: > 0, or -1 (closed early, or a read failed). */
static ssize_t body_direct(struct proxy_answer *a, int fd, char *out, size_t max)
{
    size_t want = a->direct_left < max ? (size_t)a->direct_left : max;
    ssize_t k;
    do
        k = recv(fd, out, want, 0);
    while (k < 0 && errno == EINTR);
    if (k <= 0)
        return -1;
    a->direct_left -= (uint64_t)k;
    if (a->direct_left == 0)
        a->done = true;
    return k;
}

ssize_t pa_body(struct proxy_answer *a, int fd, char *out, size_t max)
{
    if (a->over_off < a->over_len) {
        size_t n = a->over_len - a->over_off;
        n = n < max ? n : max;
        memcpy(out, a->over + a->over_off, n);
        a->over_off += n;
        if (a->over_off == a->over_len)
            a->over_off = a->over_len = 0;
        return (ssize_t)n;
    }
    if (a->direct)
        return a->done ? 0 : body_direct(a, fd, out, max);
    a->out = out;
    a->out_cap = max;
    a->out_len = 0;
    while (a->out_len == 0 && a->over_len == 0 && !a->done) {
        /* What came with the head parsed, a body of a known length needs the parser no more:
         * its rest is exactly the next bytes of the connection. */
        if (a->raw_off == a->raw_len && a->length >= 0 && !a->head_req) {
            a->direct = true;
            a->direct_left = a->parser.content_length; /* what is left of it */
            a->out = NULL;
            if (a->direct_left == 0) {
                a->done = true;
                return 0;
            }
            return body_direct(a, fd, out, max);
        }
        int k = step(a, fd);
        if (k < 0 || (k > 0 && !a->done)) {
            a->out = NULL;
            return -1; /* not HTTP, a failed read, or closed before the body's end */
        }
    }
    a->out = NULL;
    if (a->out_len)
        return (ssize_t)a->out_len;
    return a->over_len ? pa_body(a, fd, out, max) : 0;
}
