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
#include <sys/types.h>

#include "sbxd/err.h"

#define SBXD_TOKEN_MAX 4096

/* Load the token into out (NUL-terminated; out[0] == '\0': no token) from token_file (may be
 * empty) or the SBXD_TOKEN variable of envp, which is wiped and removed. Both set, an
 * unreadable or empty file, or a token with spaces or control characters: -1 and a sentence
 * in err. */
int auth_load(const char *token_file, char **envp, char *out, size_t outlen, struct sbxd_err *err);

/* Whether the Authorization header value carries the token, compared in time that depends
 * only on the token's length, never on where a guess first differs. */
bool auth_check(const char *token, size_t token_len, const char *header);

/* The identities commands run as: the command user and group, and under uid isolation the
 * uids of --uid-range (range_count 0: none), each with the command group. */
struct auth_readers {
    bool switch_user; /* sbxd is root and commands run as user_uid (else as sbxd itself) */
    uid_t user_uid;
    gid_t user_gid;
    uid_t range_first;
    unsigned range_count;
};

/* Whether a command could read path (the token file): 1, with why (one line: who can, the
 * file's mode and owner, and what to do); 0 when none of r can open it for reading; -1 when
 * that could not be found out (why says so). Call before any thread exists: it forks. */
int auth_file_exposed(const char *path, const struct auth_readers *r, char *why, size_t whylen);

#endif
