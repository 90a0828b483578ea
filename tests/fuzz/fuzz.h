/*
 * fuzz.h - what the fuzz targets share: check(), an invariant that stops the run (libFuzzer
 * keeps the input that broke it) and says which one failed.
 */
#ifndef SBXD_FUZZ_H
#define SBXD_FUZZ_H

#include <stdio.h>

#define check(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

#endif
