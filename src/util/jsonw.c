#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/base64.h"
#include "sbxd/jsonw.h"
#include "sbxd/utf8.h"

void jw_init(struct jsonw *w, size_t initial)
{
    memset(w, 0, sizeof(*w));
    if (initial) {
        w->buf = malloc(initial);
        if (w->buf)
            w->cap = initial;
        else
            w->failed = true;
    }
}

void jw_reset(struct jsonw *w)
{
    w->len = 0;
    w->need_comma = false;
    w->failed = !w->buf;
}

void jw_drop(struct jsonw *w)
{
    w->len = 0;
}

void jw_free(struct jsonw *w)
{
    free(w->buf);
    memset(w, 0, sizeof(*w));
}

/* Make room for n more bytes (plus a terminator); false once memory ran out. */
static bool jw_reserve(struct jsonw *w, size_t n)
{
    if (w->failed)
        return false;
    if (w->len + n + 1 <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n + 1) {
        if (cap > SIZE_MAX / 2) {
            w->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *nb = realloc(w->buf, cap);
    if (!nb) {
        w->failed = true;
        return false;
    }
    w->buf = nb;
    w->cap = cap;
    return true;
}

static void put(struct jsonw *w, const void *s, size_t n)
{
    if (n == 0 || !jw_reserve(w, n)) /* s may be NULL when n is 0 (an empty stream) */
        return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void put_c(struct jsonw *w, char c)
{
    if (!jw_reserve(w, 1))
        return;
    w->buf[w->len++] = c;
}

static void value_begin(struct jsonw *w)
{
    if (w->need_comma)
        put_c(w, ',');
}

void jw_obj_begin(struct jsonw *w)
{
    value_begin(w);
    put_c(w, '{');
    w->need_comma = false;
}

void jw_obj_end(struct jsonw *w)
{
    put_c(w, '}');
    w->need_comma = true;
}

void jw_arr_begin(struct jsonw *w)
{
    value_begin(w);
    put_c(w, '[');
    w->need_comma = false;
}

void jw_arr_end(struct jsonw *w)
{
    put_c(w, ']');
    w->need_comma = true;
}

/* Escape bytes that JSON forbids raw; the caller guarantees valid UTF-8 for the rest. */
static void put_escaped(struct jsonw *w, const uint8_t *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0; /* start of the pending run of bytes that need no escape */
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(w, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (c) {
        case '"':
            e[1] = '"';
            break;
        case '\\':
            e[1] = '\\';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        default:
            e[1] = 'u';
            e[2] = '0';
            e[3] = '0';
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            elen = 6;
        }
        put(w, e, elen);
    }
    put(w, s + run, n - run);
}

void jw_key(struct jsonw *w, const char *key)
{
    value_begin(w);
    put_c(w, '"');
    put_escaped(w, (const uint8_t *)key, strlen(key));
    put(w, "\":", 2);
    w->need_comma = false;
}

void jw_str(struct jsonw *w, const char *s)
{
    if (!s) {
        jw_null(w);
        return;
    }
    jw_str_utf8(w, s, strlen(s), false);
}

/* A byte that goes into a JSON string as it is: printable ASCII but the quote and backslash. */
static inline bool plain_byte(uint8_t c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* The escape of an ASCII byte that is not plain, at o; returns the end. A table rather than
 * a switch: no indirect jump per escaped byte. */
static inline char *escape_byte(char *o, uint8_t c)
{
    static const char hex[] = "0123456789abcdef";
    static const char two[128] = {['"'] = '"',  ['\\'] = '\\', ['\n'] = 'n', ['\r'] = 'r',
                                  ['\t'] = 't', ['\b'] = 'b',  ['\f'] = 'f'};
    o[0] = '\\';
    if (two[c & 127]) {
        o[1] = two[c & 127];
        return o + 2;
    }
    o[1] = 'u';
    o[2] = '0';
    o[3] = '0';
    o[4] = hex[c >> 4];
    o[5] = hex[c & 15];
    return o + 6;
}

/* One pass over the bytes, in blocks whose worst case (6 bytes out per byte in, plus a
 * character that straddles the block's end) is reserved up front; output never runs ahead
 * of 6 bytes per byte in, so a group of 16 may always be stored whole at o. */
#define JW_BLOCK 4096
#define ONES     0x0101010101010101ULL

#if defined(__SSE2__)
#include <emmintrin.h>

/* Bytes that are not plain in the 16 at x, as bits: below 0x20 or from 0x80 (one signed
 * compare: those are negative), '"' and '\\'. */
static inline unsigned odd_bits(__m128i x)
{
    __m128i odd = _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                               _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                            _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
    return (unsigned)_mm_movemask_epi8(odd);
}

/* ASCII from s[*i] on, 16 bytes at a time, while 32 remain before end (a run is copied with
 * one 16-byte load, which may read up to 16 bytes past its group). Each group's escapes are
 * taken from its bit mask, so where the next group starts never waits on the last one's
 * contents: a line of text costs two stores and an escape. Stops at a group with a byte
 * from 0x80 (left to the caller, as is the tail). Returns the new output end. */
static char *escape_groups(const uint8_t *s, size_t *i, size_t end, char *o)
{
    size_t at = *i;
    while (end - at >= 32) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + at));
        unsigned m = odd_bits(x);
        if (!m) {
            _mm_storeu_si128((__m128i *)(void *)o, x);
            o += 16;
            at += 16;
            continue;
        }
        if (m & (unsigned)_mm_movemask_epi8(x))
            break; /* UTF-8 to check */
        unsigned p = 0;
        do {
            unsigned k = (unsigned)__builtin_ctz(m);
            _mm_storeu_si128((__m128i *)(void *)o,
                             _mm_loadu_si128((const __m128i *)(const void *)(s + at + p)));
            o = escape_byte(o + (k - p), s[at + k]);
            p = k + 1;
            m &= m - 1;
        } while (m);
        _mm_storeu_si128((__m128i *)(void *)o,
                         _mm_loadu_si128((const __m128i *)(const void *)(s + at + p)));
        o += 16 - p;
        at += 16;
    }
    *i = at;
    return o;
}
#endif

/* How many of the 8 bytes at s are plain before the first that is not (8: all), the 8 stored
 * at o meanwhile. The count may fall short (the byte loop then looks again), never over. */
static inline size_t plain_word(const uint8_t *s, char *o)
{
    uint64_t x;
    memcpy(&x, s, 8);
    memcpy(o, &x, 8);
    /* SWAR: a byte below 0x20, from 0x80, or equal to '"' or '\\' sets its top bit in odd.
     * Borrows can set it in bytes above a set one too, never below: the lowest is exact. */
    uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\');
    uint64_t odd =
        (((x - ONES * 0x20) & ~x) | x | ((q - ONES) & ~q) | ((b - ONES) & ~b)) & (ONES * 0x80);
    if (!odd)
        return 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (size_t)__builtin_ctzll(odd) / 8;
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (size_t)__builtin_clzll(odd) / 8;
#else
    return 0;
#endif
}

void jw_utf8_chars(struct jsonw *w, const void *data, size_t n, bool cut)
{
    static const uint8_t repl[3] = {0xEF, 0xBF, 0xBD};
    const uint8_t *s = data;
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > JW_BLOCK ? i + JW_BLOCK : n;
        if (!jw_reserve(w, 6 * (end - i) + 8))
            return;
        char *o = w->buf + w->len;
        while (i < end) {
#if defined(__SSE2__)
            /* (end is a block's end, or n: the group's over-read stays inside the data.) */
            o = escape_groups(s, &i, end, o);
#endif
            while (end - i >= 8) {
                size_t k = plain_word(s + i, o);
                o += k;
                i += k;
                if (k < 8)
                    break;
            }
            while (i < end && plain_byte(s[i]))
                *o++ = (char)s[i++];
            if (i >= end)
                break;
            if (s[i] < 0x80) {
                o = escape_byte(o, s[i++]);
                continue;
            }
            int k = utf8_decode(s + i, n - i);
            if (k > 0) {
                memcpy(o, s + i, (size_t)k); /* may pass end by 3: reserved */
                o += k;
                i += (size_t)k;
            } else if (k == 0 && cut) {
                i = end = n; /* the stream goes on past the kept head: drop the partial char */
            } else {
                memcpy(o, repl, 3);
                o += 3;
                i += k < 0 ? (size_t)-k : n - i;
            }
        }
        w->len = (size_t)(o - w->buf);
    }
}

void jw_str_utf8(struct jsonw *w, const void *data, size_t n, bool cut)
{
    value_begin(w);
    put_c(w, '"');
    jw_utf8_chars(w, data, n, cut);
    put_c(w, '"');
    w->need_comma = true;
}

void jw_base64(struct jsonw *w, const void *s, size_t n)
{
    value_begin(w);
    size_t elen = base64_encoded_len(n);
    if (jw_reserve(w, elen + 2)) {
        w->buf[w->len++] = '"';
        w->len += base64_encode(s, n, w->buf + w->len);
        w->buf[w->len++] = '"';
    }
    w->need_comma = true;
}

void jw_int(struct jsonw *w, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    value_begin(w);
    put(w, tmp, (size_t)n);
    w->need_comma = true;
}

void jw_uint(struct jsonw *w, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
    value_begin(w);
    put(w, tmp, (size_t)n);
    w->need_comma = true;
}

void jw_double(struct jsonw *w, double v, int decimals)
{
    if (!isfinite(v)) {
        jw_null(w);
        return;
    }
    char tmp[64];
    int n = snprintf(tmp, sizeof(tmp), "%.*f", decimals, v);
    value_begin(w);
    put(w, tmp, (size_t)n);
    w->need_comma = true;
}

void jw_bool(struct jsonw *w, bool v)
{
    value_begin(w);
    if (v)
        put(w, "true", 4);
    else
        put(w, "false", 5);
    w->need_comma = true;
}

void jw_null(struct jsonw *w)
{
    value_begin(w);
    put(w, "null", 4);
    w->need_comma = true;
}

void jw_raw(struct jsonw *w, const void *s, size_t n)
{
    put(w, s, n);
}

void jw_json(struct jsonw *w, const void *s, size_t n)
{
    value_begin(w);
    put(w, s, n);
    w->need_comma = true;
}

void jw_newline(struct jsonw *w)
{
    put_c(w, '\n');
    w->need_comma = false;
}

char *jw_finish(struct jsonw *w, size_t *len)
{
    if (!jw_reserve(w, 0)) {
        jw_free(w);
        return NULL;
    }
    w->buf[w->len] = '\0';
    char *out = w->buf;
    if (len)
        *len = w->len;
    memset(w, 0, sizeof(*w));
    return out;
}
