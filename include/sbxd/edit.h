/*
 * edit.h - what a coding agent does to a file after reading it whole: read a range of its
 * lines, and replace an exact piece of its text.
 *
 * A line-range read streams: it holds the file's fd and a buffer, never the file, however
 * large the file or a line. An edit reads a file of at most SBXD_EDIT_MAX_BYTES into memory,
 * applies every replacement there (all or none), and writes the result as an upload does
 * (a temporary file beside it, fsync, rename), so a reader or a crash sees the old content or
 * the new. Both run with the calling thread's rights (fs_user_enter first).
 */
#ifndef SBXD_EDIT_H
#define SBXD_EDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/err.h"
#include "sbxd/files.h"

/* ---- Line ranges ---- */

/* Lines START..END, 1-based and inclusive; a negative number counts from the end (-1 the
 * last line); end 0 means the last line. */
struct fs_line_range {
    int64_t start, end;
};

/* Parse "START:END", "START:", ":END" or "N" (that one line) into r. -1 with err. */
int fs_line_range_parse(const char *s, struct fs_line_range *r, struct sbxd_err *err);

struct fs_lines;

/* Begin reading lines r of the open regular file fd (taken, also on failure). The file is
 * refused as binary (SBXD_E_INVALID) when its first SBXD_LINES_SNIFF bytes hold a NUL; a
 * start past its last line is SBXD_E_RANGE (a start of 1 on an empty file is no line, not an
 * error). Negative numbers are counted here (one pass over the file). With numbers, every
 * line is prefixed as `cat -n` does: its number right-aligned in 6 columns, then a tab. */
struct fs_lines *fs_lines_open(int fd, const struct fs_line_range *r, bool numbers,
                               struct sbxd_err *err);

/* The next piece of the answer into out (at most max bytes): how many, 0 at the end, -1 with
 * err when the file cannot be read further. */
ssize_t fs_lines_read(struct fs_lines *l, char *out, size_t max, struct sbxd_err *err);

/* The first line served (after negative numbers were counted), the last one served so far,
 * and whether the file ended before the range did. */
uint64_t fs_lines_first(const struct fs_lines *l);
uint64_t fs_lines_last(const struct fs_lines *l);
bool fs_lines_eof(const struct fs_lines *l);

/* End the read: the fd and the buffer go. NULL is fine. */
void fs_lines_close(struct fs_lines *l);

/* ---- Exact edits ---- */

struct fs_edit {
    const char *old_text, *new_text;
    size_t old_len, new_len;
    bool replace_all;
};

/* Lines first..last (1-based, inclusive) of the edited file that hold replaced text; a
 * deletion is the line where the text was. */
struct fs_line_span {
    uint64_t first, last;
};

struct fs_edit_result {
    struct stat st;             /* of the file written */
    uint64_t replaced;          /* replacements made, over all edits */
    struct fs_line_span *spans; /* malloc'd; free with fs_edit_result_free */
    size_t nspans;
    bool spans_cut; /* more than SBXD_EDIT_MAX_SPANS: the list is cut */
};

/*
 * Apply edits, in order, each to the result of those before, to the file path (symlinks
 * inside the root followed to the file they name); the file is rewritten only when every
 * one applies. An edit whose old text is missing fails SBXD_E_NOT_FOUND, one whose old text
 * occurs more than once without replace_all SBXD_E_CONFLICT, both naming the edit and the
 * count; an empty old text, a binary file (a NUL byte) or a file of another type
 * SBXD_E_INVALID; a file or a result over SBXD_EDIT_MAX_BYTES SBXD_E_TOO_LARGE; a file the
 * caller may not write SBXD_E_DENIED. if_match (NULL: none) is checked against the version
 * read, and that version against the file right before the rename (a change between the
 * two: SBXD_E_PRECONDITION). The file keeps its mode, and its owner: one it cannot keep
 * (another user's file) is SBXD_E_CONFLICT. With the calling thread's rights; u is who
 * removes the temporary file on a failure.
 */
int fs_edit_file(int rootfd, const char *path, const struct fs_edit *edits, size_t n,
                 const char *if_match, const struct fs_user *u, struct fs_edit_result *res,
                 struct sbxd_err *err);

/* The same edits applied to text of len bytes in memory (no file): the result in *out
 * (malloc'd, *out_len bytes) and res (its st left zero); path only names the file in errors.
 * The same errors as fs_edit_file's for the text. */
int fs_edit_apply(const char *text, size_t len, const struct fs_edit *edits, size_t n,
                  const char *path, char **out, size_t *out_len, struct fs_edit_result *res,
                  struct sbxd_err *err);

void fs_edit_result_free(struct fs_edit_result *res);

/* An edit request's JSON into edits (malloc'd, pointing into req's strings): one edit,
 * {"old", "new", "replace_all"} ("old_string" and "new_string" are the same keys), or
 * {"edits": [...]} of 1 to SBXD_EDIT_MAX_EDITS of them; extra (NULL-ended, or NULL) are keys
 * the caller reads itself. Any other key, an empty old, a value of the wrong type:
 * SBXD_E_INVALID. */
struct cJSON;
int fs_edit_parse(const struct cJSON *req, const char *const *extra, struct fs_edit **edits,
                  size_t *n, struct sbxd_err *err);

/* The fields of an edit's answer (POST ?edit, MCP's edit_file) into an open object: path,
 * etag, size, replacements, lines ({start, end} ranges), lines_cut. */
struct jsonw;
void fs_write_edit(struct jsonw *w, const char *path, const struct fs_edit_result *res,
                   const char *etag);

#endif
