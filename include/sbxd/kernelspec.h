/*
 * kernelspec.h - the Jupyter kernels installed here: every kernels/NAME/kernel.json under
 * the directories of $JUPYTER_PATH (sbxd's own environment), then /usr/local/share/jupyter
 * and /usr/share/jupyter, as Jupyter itself looks for them; a name found twice is the
 * first one's. Read afresh on each call: installing a kernel needs no restart of sbxd.
 */
#ifndef SBXD_KERNELSPEC_H
#define SBXD_KERNELSPEC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "sbxd/err.h"

struct kspec {
    char name[64];          /* the directory's name */
    char language[32];      /* as kernel.json says it ("python") */
    char display_name[128]; /* "Python 3 (ipykernel)" */
    char dir[256];          /* the kernelspec's directory ({resource_dir}) */
    bool interrupt_message; /* interrupt_mode "message": interrupt_request, not SIGINT */
    cJSON *argv;            /* kernel.json's argv (an array of strings) */
    cJSON *env;             /* ... its env (an object of strings), or NULL */
};

/* Every installed kernelspec with a valid kernel.json, sorted by name: an array to give to
 * kspec_free_all. Returns how many. */
size_t kspec_list(struct kspec **out);
void kspec_free_all(struct kspec *v, size_t n);

/* The kernelspec named `name` (when not NULL), else the first one for `language` (compared
 * without case). 0 with *out (kspec_free it), -1 with err: SBXD_E_INVALID, naming the kernels
 * there are. */
int kspec_find(const char *name, const char *language, struct kspec *out, struct sbxd_err *err);
void kspec_free(struct kspec *k);

#endif
