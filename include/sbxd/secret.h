/*
 * secret.h - what looks like a credential in an environment variable, by its name or by its
 * value. One rule for every place sbxd hands out variables of its own environment: what
 * /v1/metadata serves and what commands inherit (cmdenv.h).
 */
#ifndef SBXD_SECRET_H
#define SBXD_SECRET_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a variable's name (len bytes, not necessarily NUL-terminated) looks like a
 * credential's: it holds TOKEN, SECRET, PASSWORD, PASSWD, CRED, KEY, AUTH, BEARER, PRIVATE,
 * CERT or PWD anywhere, in any case. A name of 255 bytes or more counts as one. */
bool secret_name(const char *name, size_t len);

/* Whether a value holds a URL that names a user (scheme://user[:password]@host). */
bool secret_url_userinfo(const char *value);

#endif
