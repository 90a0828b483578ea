/*
 * The compiled pieces of a search (search.h): the content pattern (PCRE2 and its JIT) and
 * the globs (PCRE2's glob conversion), and the table of file-type shorthands.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/fs_limits.h"
#include "sbxd/search.h"
#include "search_internal.h"

static const struct {
    const char *name, *globs;
} types[] = {
    {"c", "*.c,*.h"},
    {"cpp", "*.cc,*.cpp,*.cxx,*.hh,*.hpp,*.hxx,*.h"},
    {"css", "*.css,*.scss"},
    {"go", "*.go"},
    {"html", "*.html,*.htm"},
    {"java", "*.java"},
    {"js", "*.js,*.mjs,*.cjs,*.jsx"},
    {"json", "*.json"},
    {"md", "*.md,*.markdown"},
    {"py", "*.py,*.pyi"},
    {"rb", "*.rb"},
    {"rs", "*.rs"},
    {"sh", "*.sh,*.bash"},
    {"ts", "*.ts,*.tsx,*.mts,*.cts"},
    {"txt", "*.txt"},
    {"yaml", "*.yaml,*.yml"},
};

const char *search_type_globs(const char *type)
{
    for (size_t i = 0; i < sizeof(types) / sizeof(*types); i++)
        if (strcmp(types[i].name, type) == 0)
            return types[i].globs;
    return NULL;
}

const char *search_types_list(void)
{
    return "c, cpp, css, go, html, java, js, json, md, py, rb, rs, sh, ts, txt, yaml";
}

static int pcre_fail(struct sbxd_err *err, int code, const char *what, const char *pat,
                     size_t offset)
{
    PCRE2_UCHAR msg[160];
    if (pcre2_get_error_message(code, msg, sizeof(msg)) < 0)
        strcpy((char *)msg, "unknown error");
    return sbxd_fail(err, SBXD_E_INVALID, 0, "%s '%.200s': %s at offset %zu", what, pat,
                     (char *)msg, offset);
}

/*
 * The literal text every match of the regex begins with, into out (at most max - 1 bytes):
 * the pattern's leading run of ASCII characters that are no metacharacter, less its last one
 * unless the run is the whole pattern (whatever follows may quantify that one: `?`, `{0,1}`,
 * and also after a `\E` or a comment, which are nothing themselves; the letters before it
 * are each followed by a literal letter). Nothing (0) when the pattern has a '|' anywhere (an
 * alternative need not begin so) or less than 3 bytes are left, where PCRE2's own search for
 * the first byte does as well. Only a prefilter: PCRE2 still decides each match.
 */
static size_t regex_prefix(const char *re, char *out, size_t max)
{
    if (strchr(re, '|'))
        return 0;
    size_t n = 0;
    while (re[n] && n + 1 < max && (unsigned char)re[n] >= 0x20 && (unsigned char)re[n] < 0x7f &&
           !strchr("\\^$.|?*+()[]{}#", re[n]))
        n++;
    if (re[n] && n > 0)
        n--;
    if (n < 3)
        return 0;
    memcpy(out, re, n);
    out[n] = '\0';
    return n;
}

struct search_pattern *search_pattern_new(const char *pattern, bool regex, bool ignore_case,
                                          struct sbxd_err *err)
{
    struct search_pattern *p = calloc(1, sizeof(*p));
    if (!p) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    /* UTF with MATCH_INVALID_UTF: a file is searched as UTF-8 where it is, and a byte that is
     * not never makes the match fail as a whole. MULTILINE (a regex's): a whole buffer of lines is
     * matched at once, ^ and $ at each line. */
    uint32_t opts = regex ? PCRE2_MULTILINE : PCRE2_LITERAL;
    /* A case-sensitive literal is found with memmem (glibc's two-way search with SIMD: on a
     * tree of C sources several times faster than PCRE2's literal scan, which stops at each
     * occurrence of the first byte). */
    if (!regex && !ignore_case) {
        p->literal_len = strlen(pattern);
        if (!(p->literal = strdup(pattern))) {
            free(p);
            sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
            return NULL;
        }
        return p;
    }
    /* UTF mode only where it changes what matches (a pattern with a non-ASCII character, or
     * case folded): an ASCII pattern matches the same bytes without it, and faster. */
    bool ascii = true;
    for (const unsigned char *c = (const unsigned char *)pattern; *c; c++)
        ascii &= *c < 0x80;
    if (!ascii || ignore_case)
        opts |= PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    if (ignore_case)
        opts |= PCRE2_CASELESS;
    int code;
    PCRE2_SIZE off;
    p->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &off, NULL);
    if (!p->code) {
        pcre_fail(err, code, regex ? "regex" : "pattern", pattern, off);
        free(p);
        return NULL;
    }
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    /* A regex that begins with a literal (needle_[0-9]+): memmem finds the candidates, as
     * grep's own search for a required string does, and only those go to PCRE2; the match
     * functions of the JIT take no anchoring at match time, so the pattern is compiled
     * anchored as well. */
    if (regex && !ignore_case &&
        (p->prefix_len = regex_prefix(pattern, p->prefix, sizeof(p->prefix)))) {
        p->anchored = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                    opts | PCRE2_ANCHORED, &code, &off, NULL);
        if (!p->anchored || pcre2_jit_compile(p->anchored, PCRE2_JIT_COMPLETE) != 0)
            p->prefix_len = 0; /* (PCRE2 alone then) */
    }
    return p;
}

struct search_matcher *search_matcher_new(const struct search_pattern *p)
{
    struct search_matcher *m = calloc(1, sizeof(*m));
    if (!m || !p->code)
        return m;
    /* The match limit ends a pattern that backtracks exponentially ("(a+)+$" on a long run
     * of a's): a search of a hostile tree, or a careless pattern, takes a bounded time per
     * buffer instead of holding a thread for hours. The JIT stack is bounded as well. */
    m->mctx = pcre2_match_context_create(NULL);
    m->jstack = p->jit ? pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL) : NULL;
    m->md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!m->mctx || !m->md || (p->jit && !m->jstack)) {
        search_matcher_free(m);
        return NULL;
    }
    pcre2_set_match_limit(m->mctx, SBXD_SEARCH_MATCH_LIMIT);
    pcre2_set_depth_limit(m->mctx, SBXD_SEARCH_MATCH_LIMIT / 10);
    if (m->jstack)
        pcre2_jit_stack_assign(m->mctx, NULL, m->jstack);
    return m;
}

void search_matcher_free(struct search_matcher *m)
{
    if (!m)
        return;
    pcre2_match_data_free(m->md);
    pcre2_jit_stack_free(m->jstack);
    pcre2_match_context_free(m->mctx);
    free(m);
}

void search_pattern_free(struct search_pattern *p)
{
    if (!p)
        return;
    pcre2_code_free(p->code);
    pcre2_code_free(p->anchored);
    free(p->literal);
    free(p);
}

int search_pattern_find(const struct search_pattern *p, struct search_matcher *m, const char *buf,
                        size_t len, size_t from, size_t *at)
{
    if (p->literal) {
        const char *hit = memmem(buf + from, len - from, p->literal, p->literal_len);
        if (hit)
            *at = (size_t)(hit - buf);
        return hit != NULL;
    }
    while (p->prefix_len) {
        const char *hit = memmem(buf + from, len - from, p->prefix, p->prefix_len);
        if (!hit)
            return 0;
        size_t cand = (size_t)(hit - buf);
        int rc = pcre2_match(p->anchored, (PCRE2_SPTR)buf, len, cand, 0, m->md, m->mctx);
        if (rc >= 0) {
            *at = pcre2_get_ovector_pointer(m->md)[0]; /* (\K may have moved it on) */
            return 1;
        }
        if (rc != PCRE2_ERROR_NOMATCH)
            return -1;
        from = cand + 1;
    }
    int rc = pcre2_match(p->code, (PCRE2_SPTR)buf, len, from, 0, m->md, m->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return -1;
    *at = pcre2_get_ovector_pointer(m->md)[0];
    return 1;
}

struct glob1 {
    pcre2_code *code;
    bool whole_path; /* the glob has a '/': matched against the relative path */
};

struct search_globs {
    size_t n;
    pcre2_match_data *md;
    struct glob1 g[];
};

/* One glob as a compiled regular expression (PCRE2's own conversion, not a matcher of ours). */
static int glob_compile(struct glob1 *g, const char *glob, size_t len, pcre2_convert_context *cc,
                        struct sbxd_err *err)
{
    PCRE2_UCHAR *re = NULL;
    PCRE2_SIZE relen, off;
    int code = pcre2_pattern_convert((PCRE2_SPTR)glob, len, PCRE2_CONVERT_GLOB | PCRE2_CONVERT_UTF,
                                     &re, &relen, cc);
    if (code != 0) {
        char copy[256];
        snprintf(copy, sizeof(copy), "%.*s", (int)(len < 255 ? len : 255), glob);
        return pcre_fail(err, code, "glob", copy, relen);
    }
    g->code = pcre2_compile(re, relen, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
    pcre2_converted_pattern_free(re);
    if (!g->code)
        return pcre_fail(err, code, "glob", glob, off);
    pcre2_jit_compile(g->code, PCRE2_JIT_COMPLETE);
    g->whole_path = memchr(glob, '/', len) != NULL;
    return 0;
}

struct search_globs *search_globs_new(const char *list, struct sbxd_err *err)
{
    size_t n = 1;
    for (const char *s = list; *s; s++)
        n += *s == ',';
    struct search_globs *g = calloc(1, sizeof(*g) + n * sizeof(g->g[0]));
    pcre2_convert_context *cc = pcre2_convert_context_create(NULL);
    if (!g || !cc) {
        free(g);
        pcre2_convert_context_free(cc);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    pcre2_set_glob_separator(cc, '/');
    int rc = 0;
    for (const char *s = list; rc == 0;) {
        size_t len = strcspn(s, ",");
        const char *glob = s;
        if (len > 0 && *glob == '/') { /* "/x" is anchored at the directory searched */
            glob++;
            len--;
        }
        if (len > 0)
            rc = glob_compile(&g->g[g->n++], glob, len, cc, err);
        if (!s[len])
            break;
        s += len + 1;
    }
    pcre2_convert_context_free(cc);
    if (rc == 0 && g->n == 0)
        rc = sbxd_fail(err, SBXD_E_INVALID, 0, "a glob list names no glob");
    if (rc == 0 && !(g->md = pcre2_match_data_create(1, NULL)))
        rc = sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    if (rc < 0) {
        search_globs_free(g);
        return NULL;
    }
    return g;
}

bool search_globs_match(const struct search_globs *g, const char *path, const char *name)
{
    for (size_t i = 0; i < g->n; i++) {
        const char *s = g->g[i].whole_path ? path : name;
        if (pcre2_match(g->g[i].code, (PCRE2_SPTR)s, strlen(s), 0, 0, g->md, NULL) >= 0)
            return true;
    }
    return false;
}

void search_globs_free(struct search_globs *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n; i++)
        pcre2_code_free(g->g[i].code);
    pcre2_match_data_free(g->md);
    free(g);
}
