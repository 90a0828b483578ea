/*
 * search.h - content search (grep) and name search (glob) of a tree beneath the workspace.
 *
 * Patterns are PCRE2's, compiled with its JIT (a literal is PCRE2_LITERAL); globs are
 * PCRE2's glob conversion (pcre2_pattern_convert, '/' the separator, `**` any number of
 * directories). The walk is walk.h's: entries are opened relative to their parent's fd with
 * O_NOFOLLOW, so no symlink is followed, in the workspace or out of it, and the caller runs
 * it with the command user's rights (fs_user_enter), so a file that user cannot read is
 * skipped and counted. Memory is fixed whatever the tree or a line: one read buffer
 * (SBXD_SEARCH_BUF; a longer line is searched a buffer at a time) and the context lines, each
 * cut at SBXD_SEARCH_LINE_MAX bytes, per searching thread (up to SBXD_SEARCH_THREADS, as many
 * as the CPUs; the sink is called by one at a time, files in no fixed order).
 */
#ifndef SBXD_SEARCH_H
#define SBXD_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sbxd/err.h"

/* A compiled content pattern. */
struct search_pattern;

/* Compile pattern: a regular expression (PCRE2 syntax) when regex, else a literal string;
 * ignore_case folds case (Unicode's). NULL with err (SBXD_E_INVALID naming the offset). */
struct search_pattern *search_pattern_new(const char *pattern, bool regex, bool ignore_case,
                                          struct sbxd_err *err);
void search_pattern_free(struct search_pattern *p);

/* A set of globs. */
struct search_globs;

/* Compile a comma-separated list of globs: one with a '/' is matched against the path
 * relative to the directory searched, one without against the last component alone (as
 * ripgrep and .gitignore do). NULL with err. */
struct search_globs *search_globs_new(const char *list, struct sbxd_err *err);
/* Whether path (relative; name its last component) matches one of the globs. */
bool search_globs_match(const struct search_globs *g, const char *path, const char *name);
void search_globs_free(struct search_globs *g);

/* The globs of a file-type shorthand ("py": "*.py,*.pyi"), or NULL for an unknown type.
 * search_types_list: the known names, comma-separated. */
const char *search_type_globs(const char *type);
const char *search_types_list(void);

struct search_opts {
    struct search_pattern *pattern; /* NULL: a name search (every entry that matches) */
    struct search_globs *include;   /* NULL: every file */
    struct search_globs *exclude;   /* NULL: none (applies to directories too: not entered) */
    unsigned context;               /* lines before and after (at most SBXD_SEARCH_MAX_CONTEXT) */
    uint64_t max_matches;           /* results at most; then the search ends, truncated */
    bool include_git;               /* walk .git directories too */
    bool include_binary;            /* search files with a NUL in their first block too */
};

struct search_line {
    uint64_t no; /* 1-based */
    const char *text;
    size_t len;
    bool cut; /* the line is longer than text */
};

/* One match: the first on its line (column is its 1-based byte offset). */
struct search_match {
    const char *path; /* relative to the workspace root */
    struct search_line line;
    uint64_t column;
    const struct search_line *before, *after;
    unsigned nbefore, nafter;
};

/* Where the results go: 0 to go on, -1 to end the search (the reader went away). */
struct search_sink {
    int (*match)(void *ctx, const struct search_match *m);
    int (*entry)(void *ctx, const char *path, const struct stat *st); /* a name search's */
    void *ctx;
};

struct search_stats {
    uint64_t files_scanned, bytes_read, matches;
    uint64_t skipped_binary, skipped_unreadable, skipped_limit;
    uint64_t lines_cut; /* matched lines whose text was cut */
    bool truncated;     /* max_matches was reached */
    unsigned walk_cut;  /* walk.h's WALK_CUT_* and WALK_UNREADABLE bits */
};

/* Search the directory dirfd (consumed), whose path relative to the workspace root is base
 * ("" for the root), as o says, into sink. 0 (stats filled), or -1 with err when the sink
 * ended it or memory ran out. */
int search_run(int dirfd, const char *base, const struct search_opts *o,
               const struct search_sink *sink, struct search_stats *stats, struct sbxd_err *err);

/* The fields of a match (GET ?grep=, MCP's search_files) into an open object: path, line,
 * column, text (UTF-8, an invalid byte as U+FFFD), text_cut when the line was cut, before
 * and after. */
struct jsonw;
void search_write_match(struct jsonw *w, const struct search_match *m);

#endif
