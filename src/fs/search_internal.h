/*
 * search_internal.h - what search.c and search_glob.c share; nothing outside src/fs includes
 * it.
 */
#ifndef SBXD_SEARCH_INTERNAL_H
#define SBXD_SEARCH_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>

struct search_pattern {
    char *literal; /* a case-sensitive literal: found with memmem, PCRE2 not needed */
    size_t literal_len;
    pcre2_code *code;
    /* A regex every match of which begins with prefix: candidates found with memmem, each
     * tried with anchored (the same pattern compiled anchored, and JIT-compiled too). */
    char prefix[64];
    size_t prefix_len;
    pcre2_code *anchored;
    bool jit;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    pcre2_match_data *md;
};

/* The first match in buf[from, len): 1 (*at its offset), 0 for none, -1 when PCRE2 gave up
 * (the match or depth limit: a pathological pattern). */
int search_pattern_find(struct search_pattern *p, const char *buf, size_t len, size_t from,
                        size_t *at);

#endif
