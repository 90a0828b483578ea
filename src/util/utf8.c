#include <string.h>

#include "sbxd/utf8.h"

/*
 * Decoding follows Unicode's "maximal subpart" practice (also WHATWG's decoder): an
 * ill-formed sequence is replaced by one U+FFFD per maximal prefix of a well-formed
 * sequence, so "\xE2\x82" + "A" gives U+FFFD "A", not two replacements and not a lost "A".
 */
int utf8_decode(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90; /* no overlong forms */
        else if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1; /* a continuation byte, C0, C1 or F5..FF */
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return 0; /* cut off by the end of the buffer */
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -i;
    }
    return need + 1;
}

size_t utf8_sanitize(const uint8_t *src, size_t n, uint8_t *dst)
{
    static const uint8_t repl[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0, o = 0;
    while (i < n) {
        if (src[i] < 0x80) {
            dst[o++] = src[i++];
            continue;
        }
        int k = utf8_decode(src + i, n - i);
        if (k > 0) {
            memcpy(dst + o, src + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(dst + o, repl, 3);
            o += 3;
            i += k < 0 ? (size_t)-k : n - i;
        }
    }
    return o;
}

size_t utf8_whole(const uint8_t *s, size_t n)
{
    /* A cut character has at most 3 of its bytes here, so its first is among the last 4, and
     * decoding may start there: a lead byte is never part of an earlier sequence. */
    size_t i = n > 4 ? n - 4 : 0;
    while (i < n) {
        int k = utf8_decode(s + i, n - i);
        if (k == 0)
            return i;
        i += (size_t)(k > 0 ? k : -k);
    }
    return n;
}

size_t utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII, 8 bytes at a time: most JSON bodies are nothing else. */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, sizeof(w));
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i == n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_decode(s + i, n - i);
        if (k <= 0)
            return i; /* ill-formed, or cut off by the end: the body ends inside a character */
        i += (size_t)k;
    }
    return n;
}
