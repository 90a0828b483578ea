/* utf8.h - UTF-8 decoding with the replacement rules of the WHATWG/Unicode "maximal subpart". */
#ifndef SBXD_UTF8_H
#define SBXD_UTF8_H

#include <stdbool.h>
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

/* How many of the n bytes of output at s a reader says now: all of them once nothing more
 * can follow them (final), else utf8_whole's (a character the end cuts off waits for its
 * rest). The one hold-back of every reader of output as text: a run's chunks (run.h), a
 * background process's ring (background.h), a context's stream. */
static inline size_t utf8_cut(const uint8_t *s, size_t n, bool final)
{
    return final ? n : utf8_whole(s, n);
}

/* Where the n bytes at s stop being UTF-8: n when all of them are well-formed, else the
 * offset of the first byte of the first ill-formed or cut-off sequence (an overlong form, a
 * surrogate, a code point above U+10FFFF, a stray continuation byte, C0, C1, F5..FF, or a
 * character the end cuts short). The rules are utf8_decode's; runs of ASCII are checked a
 * word at a time. */
size_t utf8_valid(const uint8_t *s, size_t n);

/* Copy src to dst replacing invalid sequences (and a cut-off tail) with U+FFFD. dst must hold
 * 3 * n bytes. Returns the bytes written. */
size_t utf8_sanitize(const uint8_t *src, size_t n, uint8_t *dst);

#endif
