/* base64.h - RFC 4648 base64 (standard alphabet, padded). */
#ifndef SBXD_BASE64_H
#define SBXD_BASE64_H

#include <stddef.h>

/* Encoded length of n bytes, without a terminator. */
size_t base64_encoded_len(size_t n);

/* Encode n bytes into out (base64_encoded_len(n) bytes); returns the length written. */
size_t base64_encode(const void *in, size_t n, char *out);

/* Decode; returns the decoded length or -1 on malformed input. out holds 3 * (n / 4) bytes. */
long base64_decode(const char *in, size_t n, void *out);

#endif
