/*
 * fuzz_search - a search's pattern and globs (src/fs/search_glob.c): what ?grep=, ?glob=,
 * ?exclude= and MCP's search_files and find_files compile from a client's text.
 *
 * Input: one byte of flags (1: regex, 2: ignore_case), the pattern, a NUL byte, a comma list
 * of globs, a NUL byte, then the text searched (its lines are the names the globs are tried
 * on). A pattern or a glob list that is refused must say why. One that compiles:
 *   - each match search_pattern_find reports lies in the text, at or after where the look
 *     began, and the looks move on; a regex's matches are exactly those of PCRE2 alone on the
 *     same pattern (the literal prefilter of a regex that begins with a literal changes what
 *     is read first, never what matches), and a case-sensitive literal's those of memmem;
 *   - a glob with no metacharacter and no '/' matches a name exactly when it is that name.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/search.h"
#include "search_internal.h"

#include "fuzz.h"

/* The first match of PCRE2 alone (p->code) in t[from, n): 1 with *at, 0, or -1. */
static int pcre2_alone(const struct search_pattern *p, struct search_matcher *m, const char *t,
                       size_t n, size_t from, size_t *at)
{
    int rc = pcre2_match(p->code, (PCRE2_SPTR)t, n, from, 0, m->md, m->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return -1;
    *at = pcre2_get_ovector_pointer(m->md)[0];
    return 1;
}

static void check_pattern(const char *pat, bool regex, bool icase, const char *t, size_t n)
{
    struct sbxd_err err = {0};
    struct search_pattern *p = search_pattern_new(pat, regex, icase, &err);
    if (!p) {
        check(err.kind != SBXD_E_NONE && err.msg[0] != '\0');
        return;
    }
    struct search_matcher *m = search_matcher_new(p);
    check(m != NULL);
    size_t from = 0;
    for (int looks = 0; looks < 64 && from <= n; looks++) {
        size_t at = (size_t)-1, ref = (size_t)-1;
        int f = search_pattern_find(p, m, t, n, from, &at);
        if (f < 0)
            break; /* a limit: PCRE2 gave up */
        if (p->literal) {
            const char *hit = memmem(t + from, n - from, p->literal, p->literal_len);
            check((f == 1) == (hit != NULL));
            if (hit)
                check(at == (size_t)(hit - t));
        } else {
            int r = pcre2_alone(p, m, t, n, from, &ref);
            if (r < 0)
                break;
            check(f == r);
            if (f)
                check(at == ref);
        }
        if (!f)
            break;
        check(at >= from && at <= n);
        from = at + 1;
    }
    search_matcher_free(m);
    search_pattern_free(p);
}

/* Whether g has no glob metacharacter (and no ',' or '/': it is one name). */
static bool plain_name(const char *g)
{
    return *g && !strpbrk(g, "*?[]{}\\,/!");
}

static void check_globs(const char *list, const char *t, size_t n)
{
    struct sbxd_err err = {0};
    struct search_globs *g = search_globs_new(list, &err);
    if (!g) {
        check(err.kind != SBXD_E_NONE && err.msg[0] != '\0');
        return;
    }
    /* Each line of the text a name (and a path of that name). */
    char name[256];
    for (size_t i = 0, k = 0; i <= n && k < 64; k++) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t len = (nl ? (size_t)(nl - t) : n) - i;
        if (len < sizeof(name) && !memchr(t + i, '\0', len)) {
            memcpy(name, t + i, len);
            name[len] = '\0';
            bool m = search_globs_match(g, name, name);
            if (plain_name(list))
                check(m == (strcmp(list, name) == 0));
        }
        if (!nl)
            break;
        i = (size_t)(nl - t) + 1;
    }
    if (plain_name(list))
        check(search_globs_match(g, list, list));
    search_globs_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    uint8_t flags = data[0];
    const char *in = (const char *)data + 1;
    size_t left = size - 1;
    const char *z1 = memchr(in, '\0', left);
    if (!z1)
        return 0;
    const char *globs = z1 + 1;
    const char *z2 = memchr(globs, '\0', left - (size_t)(globs - in));
    if (!z2)
        return 0;
    const char *text = z2 + 1;
    size_t n = left - (size_t)(text - in);
    /* (a copy: the text's end is then where ASan notices a read past it) */
    char *t = malloc(n ? n : 1);
    check(t != NULL);
    memcpy(t, text, n);
    if (*in)
        check_pattern(in, flags & 1, flags & 2, t, n);
    if (*globs)
        check_globs(globs, t, n);
    free(t);
    return 0;
}
