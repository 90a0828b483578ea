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
};

/* What one thread matches with: PCRE2's match data, its limits and the JIT's stack (the
 * compiled pattern is shared, read-only, by every thread). */
struct search_matcher {
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    pcre2_match_data *md;
};

/* A matcher for p (NULL when out of memory; a literal needs none of it but gets one). */
struct search_matcher *search_matcher_new(const struct search_pattern *p);
void search_matcher_free(struct search_matcher *m);

/* The first match in buf[from, len): 1 (*at its offset), 0 for none, -1 when PCRE2 gave up
 * (the match or depth limit: a pathological pattern). */
int search_pattern_find(const struct search_pattern *p, struct search_matcher *m, const char *buf,
                        size_t len, size_t from, size_t *at);

#endif
