/* utf8.h - UTF-8 decoding with the replacement rules of the WHATWG/Unicode "maximal subpart". */
#ifndef SBXD_UTF8_H
#define SBXD_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decode one sequence at s (n > 0 bytes available).
 *  > 0: a valid sequence of that many bytes.
 *  < 0: invalid; -k bytes (the maximal subpart) are to be replaced by one U+FFFD.
 *  0:   the bytes so far are a valid prefix cut off by the end of the buffer.
 */
int utf8_decode(const uint8_t *s, size_t n);

/* How many of the n bytes at s end on a character boundary: n, less a valid start of a
 * character that the end cuts off (at most 3 bytes, kept back for the rest). Looks at the
 * last 4 bytes only. */
size_t utf8_whole(const uint8_t *s, size_t n);

/* Copy src to dst replacing invalid sequences (and a cut-off tail) with U+FFFD. dst must hold
 * 3 * n bytes. Returns the bytes written. */
size_t utf8_sanitize(const uint8_t *src, size_t n, uint8_t *dst);

#endif
