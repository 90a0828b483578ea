/*
 * fuzz.h - what the fuzz targets share: check(), an invariant that stops the run (libFuzzer
 * keeps the input that broke it) and says which one failed.
 */
#ifndef SBXD_FUZZ_H
#define SBXD_FUZZ_H

#include <stdint.h>
#include <stdio.h>

#include "sbxd/request.h"

#define check(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

/* The policy a request is parsed under, chosen by the input's bits: the values of a default
 * configuration (config.c) on a two-CPU machine; sel & 1: a background process's (a Start's,
 * POST /processes: exec_service_policy(MX_BACKGROUND)); sel & 2: the workspace is "/";
 * sel & 4: no memory or pids maximum. */
static inline void fuzz_policy(uint8_t sel, struct request_policy *pol)
{
    *pol = (struct request_policy){
        .default_timeout_ms = 60000,
        .max_timeout_ms = 3600000,
        .max_memory_bytes = 1ULL << 30,
        .max_pids = 1024,
        .max_cpu_quota = 2,
        .workspace = sel & 2 ? "/" : "/workspace",
    };
    if (sel & 1) {
        pol->default_timeout_ms = pol->max_timeout_ms;
        pol->allow_pty = true;
    }
    if (sel & 4) {
        pol->max_memory_bytes = 0;
        pol->max_pids = 0;
    }
}

#endif
