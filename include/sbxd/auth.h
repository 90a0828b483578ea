/*
 * auth.h - the optional bearer token every route but the health checks requires.
 *
 * It comes from --token-file or from SBXD_TOKEN. The variable is read once at start and
 * wiped from the process's environment, in place (so /proc/PID/environ no longer shows it
 * either), before any command can run: nothing started later, and no listing of sbxd's
 * variables, can see it.
 */
#ifndef SBXD_AUTH_H
#define SBXD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define SBXD_TOKEN_MAX 4096

/* Load the token into out (NUL-terminated; out[0] == '\0': no token) from token_file (may be
 * empty) or the SBXD_TOKEN variable of envp, which is wiped and removed. Both set, an
 * unreadable or empty file, or a token with spaces or control characters: -1 and a sentence
 * in why. */
int auth_load(const char *token_file, char **envp, char *out, size_t outlen, char *why,
              size_t whylen);

/* Whether the Authorization header value carries the token, compared in time that depends
 * only on the token's length, never on where a guess first differs. */
bool auth_check(const char *token, size_t token_len, const char *header);

#endif
