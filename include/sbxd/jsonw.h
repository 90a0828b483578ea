/*
 * jsonw.h - a small, fast JSON writer into a growable buffer.
 *
 * Unlike cJSON it writes byte strings that may hold NUL and invalid UTF-8:
 * jw_str_utf8 replaces invalid sequences with U+FFFD, jw_base64 encodes exact bytes.
 * Allocation failure is sticky: later calls do nothing and jw_finish returns NULL.
 */
#ifndef SBXD_JSONW_H
#define SBXD_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jsonw {
    char *buf;
    size_t len;
    size_t cap;
    bool failed;
    bool need_comma;
};

void jw_init(struct jsonw *w, size_t initial);
void jw_free(struct jsonw *w);
/* Start a new document in the same buffer (its capacity kept). */
void jw_reset(struct jsonw *w);
/* Drop the text written so far, not the place in the document (the next value still gets its
 * comma): a long document made and sent a piece at a time in one buffer. */
void jw_drop(struct jsonw *w);

void jw_obj_begin(struct jsonw *w);
void jw_obj_end(struct jsonw *w);
void jw_arr_begin(struct jsonw *w);
void jw_arr_end(struct jsonw *w);
void jw_key(struct jsonw *w, const char *key);

void jw_str(struct jsonw *w, const char *s); /* NUL-terminated, NULL -> null */
/* n bytes; invalid UTF-8 becomes U+FFFD. When cut is true the bytes are the head of a longer
 * stream, so an incomplete sequence at the very end is dropped rather than replaced. */
void jw_str_utf8(struct jsonw *w, const void *s, size_t n, bool cut);
/* The same bytes as the inside of a string (no quotes, no comma): a long string written a
 * piece at a time, each piece ending on a whole character (utf8_whole) but the last. */
void jw_utf8_chars(struct jsonw *w, const void *s, size_t n, bool cut);
void jw_base64(struct jsonw *w, const void *s, size_t n);
void jw_int(struct jsonw *w, int64_t v);
void jw_uint(struct jsonw *w, uint64_t v);
void jw_double(struct jsonw *w, double v, int decimals);
void jw_bool(struct jsonw *w, bool v);
void jw_null(struct jsonw *w);

/* Append bytes as they are (for text that is not JSON); no comma logic. */
void jw_raw(struct jsonw *w, const void *s, size_t n);

/* Append one JSON value that is already text (valid JSON: the caller's word), as a value. */
void jw_json(struct jsonw *w, const void *s, size_t n);

/* Append a newline (for NDJSON); no comma logic. */
void jw_newline(struct jsonw *w);

/* Detach the NUL-terminated text (caller frees) and its length; NULL if any allocation failed.
 * The writer is left empty and reusable. */
char *jw_finish(struct jsonw *w, size_t *len);

#endif
