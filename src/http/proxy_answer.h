/*
 * proxy_answer.h - an upstream's HTTP answer as the proxy reads it (proxy_answer.c, on
 * http-parser): its head, then its body decoded (chunked, by length or to the close), a
 * bounded piece at a time. Apart from http_internal.h: http-parser's names clash with it.
 */
#ifndef SBXD_PROXY_ANSWER_H
#define SBXD_PROXY_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct proxy_answer;

/* A new reader (pa_free it); head_req: the request was a HEAD (no body follows). NULL when
 * out of memory. */
struct proxy_answer *pa_new(bool head_req);

void pa_free(struct proxy_answer *a);

enum pa_head { PA_HEAD_OK, PA_HEAD_TOO_LARGE, PA_HEAD_NOT_HTTP, PA_HEAD_TIMEOUT, PA_HEAD_CLOSED };
/* Read the head from fd (interim 1xx answers but 101 passed over). */
enum pa_head pa_head(struct proxy_answer *a, int fd);

unsigned pa_status(const struct proxy_answer *a);
unsigned pa_nheaders(const struct proxy_answer *a);
void pa_header(const struct proxy_answer *a, unsigned i, const char **name, const char **value);
/* The body's length when the head gave one (not chunked), else -1. */
int64_t pa_length(const struct proxy_answer *a);
/* What came after the head of a 101, the new protocol's first bytes. */
void pa_rest(const struct proxy_answer *a, const char **data, size_t *n);

/* Whether the connection may carry another request: the answer was read to its end, it was
 * not delimited by the close, and neither side asked to close. */
bool pa_reusable(const struct proxy_answer *a);
/* Whether nothing at all came from the upstream (a kept connection it had closed). */
bool pa_untouched(const struct proxy_answer *a);

/* The next piece of the body into out: > 0 bytes, 0 at its end, -1 on an error (the
 * upstream's bytes are not HTTP, a read failed or timed out). */
ssize_t pa_body(struct proxy_answer *a, int fd, char *out, size_t max);

#endif
