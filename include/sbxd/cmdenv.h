/*
 * cmdenv.h - the environment every command starts from, chosen once at start-up from sbxd's
 * own environment by an allow-list (--pass-env); a request's env is merged over it
 * (request.h), and HOME is the workspace unless the list names HOME.
 *
 * The list's items are NAME (that variable) and PREFIX* (every variable whose name begins
 * with PREFIX; "*" alone: all). A leading "+" adds the items to the default list
 * (SBXD_PASS_ENV_DEFAULT) instead of replacing it. The rule, for each variable of sbxd's
 * environment:
 *   - a name beginning with SBXD_ never passes: sbxd's own settings, its token among them
 *     (that one is also wiped from the environment before anything else runs);
 *   - a NAME item passes its variable as it is, even one that looks like a credential: the
 *     operator named it;
 *   - a PREFIX* item never passes a name that looks like a credential, nor a value holding
 *     a URL with a user in it (secret.h), nor HOME.
 * PATH and LANG not passed are sbxd's built-in ones (SBXD_BASE_PATH, SBXD_BASE_LANG): an
 * empty list gives exactly those and HOME.
 */
#ifndef SBXD_CMDENV_H
#define SBXD_CMDENV_H

#include <stdbool.h>
#include <stddef.h>

#include "sbxd/err.h"

struct cmdenv {
    char **vars; /* "NAME=value", NULL-terminated: PATH, LANG, then what was passed */
    size_t nvars;
    char **passed; /* the names taken from sbxd's environment (no values), NULL-terminated */
    size_t npassed;
    bool home;  /* vars holds HOME (the list named it): the workspace is not HOME then */
    bool empty; /* the list is empty: the minimal environment */
};

/* Choose from envp by spec (--pass-env's value). 0, or -1 with err (SBXD_E_INVALID: a bad
 * item; SBXD_E_INTERNAL: out of memory; the message begins "--pass-env: ") and ce holding
 * nothing to free. */
int cmdenv_init(struct cmdenv *ce, const char *spec, char *const *envp, struct sbxd_err *err);
void cmdenv_free(struct cmdenv *ce);

/* The minimal environment (an empty list): for callers that have no cmdenv of their own. */
const struct cmdenv *cmdenv_minimal(void);

#endif
