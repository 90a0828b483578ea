#include <stdint.h>

#include "sbxd/base64.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

size_t base64_encode(const void *in, size_t n, char *out)
{
    const uint8_t *p = in;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long base64_decode(const char *in, size_t n, void *out)
{
    uint8_t *o = out;
    size_t len = 0;
    if (n % 4 != 0)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            if (in[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else {
                if (pad)
                    return -1; /* data after padding */
                v[j] = b64_value(in[i + j]);
                if (v[j] < 0)
                    return -1;
            }
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        o[len++] = (uint8_t)(w >> 16);
        if (pad < 2)
            o[len++] = (uint8_t)(w >> 8);
        if (pad < 1)
            o[len++] = (uint8_t)w;
    }
    return (long)len;
}
