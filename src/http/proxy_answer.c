/*
 * proxy_answer.c - an upstream's answer, parsed by http-parser (proxy_answer.h). Two fixed
 * buffers: the raw bytes read and the body decoded from them; the decoded bytes of one read
 * never outnumber its raw ones, so neither grows.
 */
#include <errno.h>
#include <http_parser.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy_answer.h"

#define PA_BUF         65536
#define PA_HEAD_MAX    65536
#define PA_MAX_HEADERS 128

struct proxy_answer {
    http_parser parser;
    bool head_req;
    unsigned status;
    char head[PA_HEAD_MAX]; /* "name\0value\0" pairs */
    size_t head_len;
    size_t names[PA_MAX_HEADERS], values[PA_MAX_HEADERS];
    unsigned nheaders;
    bool in_value, head_done, done, too_big;
    char raw[PA_BUF];
    size_t raw_len, raw_off;
    char body[PA_BUF];
    size_t body_len, body_off;
};

static struct proxy_answer *of(http_parser *p)
{
    return p->data;
}

static int head_add(struct proxy_answer *a, const char *at, size_t n)
{
    if (a->head_len + n + 1 > sizeof(a->head)) {
        a->too_big = true;
        return -1;
    }
    memcpy(a->head + a->head_len, at, n);
    a->head_len += n;
    return 0;
}

static int on_field(http_parser *p, const char *at, size_t n)
{
    struct proxy_answer *a = of(p);
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
    if (a->nheaders && head_add(a, "", 1) < 0)
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
    /* A 101 stops the parser at the head's end by itself, every byte of the head counted (a
     * pause here would leave its last newline for the new protocol). */
    if (a->status != 101)
        http_parser_pause(p, 1);
    /* No body to a HEAD (http-parser knows 204 and 304 itself). */
    return a->head_req ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct proxy_answer *a = of(p);
    if (a->body_len + n > sizeof(a->body))
        return -1;
    memcpy(a->body + a->body_len, at, n);
    a->body_len += n;
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
    struct proxy_answer *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    http_parser_init(&a->parser, HTTP_RESPONSE);
    a->parser.data = a;
    a->head_req = head_req;
    return a;
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
    if ((a->parser.flags & F_CHUNKED) || a->parser.content_length == ULLONG_MAX ||
        a->parser.content_length > INT64_MAX)
        return -1;
    return (int64_t)a->parser.content_length;
}

void pa_rest(const struct proxy_answer *a, const char **data, size_t *n)
{
    *data = a->raw + a->raw_off;
    *n = a->raw_len - a->raw_off;
}

ssize_t pa_body(struct proxy_answer *a, int fd, char *out, size_t max)
{
    for (;;) {
        if (a->body_off < a->body_len) {
            size_t n = a->body_len - a->body_off;
            if (n > max)
                n = max;
            memcpy(out, a->body + a->body_off, n);
            a->body_off += n;
            if (a->body_off == a->body_len)
                a->body_off = a->body_len = 0;
            return (ssize_t)n;
        }
        if (a->done)
            return 0;
        int k = step(a, fd);
        if (k < 0)
            return -1;
        if (k > 0 && !a->done)
            return -1; /* closed before the body's end */
    }
}

bool pa_reusable(const struct proxy_answer *a)
{
    return a->done && !a->parser.upgrade && http_should_keep_alive(&a->parser) &&
           a->raw_off == a->raw_len;
}

bool pa_untouched(const struct proxy_answer *a)
{
    return a->raw_len == 0 && !a->head_done;
}
