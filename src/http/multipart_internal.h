/*
 * multipart_internal.h - a streaming multipart/form-data parser (RFC 7578): bytes go in as they
 * arrive, in chunks of any size, and the content of the wanted part comes out through a
 * callback, without the body ever being held whole or copied: the callback gets pointers
 * into the fed pieces (at most one call per piece, plus one for bytes held back before it).
 * Delimiters are found with memmem over whole pieces. A piece that ends in what may be the
 * start of a delimiter has those bytes (fewer than a delimiter's length) held back until
 * the next piece says whether they were content.
 */
#ifndef SBXD_MULTIPART_INTERNAL_H
#define SBXD_MULTIPART_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

/* Called with each piece of the wanted part's content; returns 0, or -1 to stop. */
typedef int (*mp_data_fn)(void *arg, const char *data, size_t n);

enum mp_state { MP_PREAMBLE, MP_HEADERS, MP_BODY, MP_DONE, MP_ERROR };

struct multipart {
    char delim[80]; /* "\r\n--" boundary */
    size_t dlen;
    enum mp_state state;
    /* How many bytes of delim the pieces so far ended with (always fewer than dlen): held
     * back, they are delim[0..hlen) and need no copy. */
    size_t hlen;
    /* After a whole delimiter: 'd' (blanks may follow), '-' (one '-' of "--" seen), '\r'
     * (the CR of the line end seen); 0 while scanning content. */
    char after;
    char hdr[1024]; /* the current part's header block */
    size_t hdrlen;
    bool in_wanted;     /* the current part is the wanted one */
    bool found;         /* the wanted part was seen whole */
    const char *want;   /* its name */
    char filename[256]; /* its filename parameter, if any */
    mp_data_fn fn;
    void *arg;
    char error[128];
};

/* From a Content-Type header value: 0, or -1 with mp->error when it is not multipart/form-data
 * with a usable boundary. */
int mp_init(struct multipart *mp, const char *content_type, const char *want, mp_data_fn fn,
            void *arg);

/* Feed n bytes. 0, or -1 (mp->error; or the callback stopped it). */
int mp_feed(struct multipart *mp, const char *data, size_t n);

/* The body ended: 0 when it was complete (closing delimiter seen), else -1 with mp->error. */
int mp_finish(struct multipart *mp);

/* Whether a Content-Type names multipart/form-data. */
bool mp_is_multipart(const char *content_type);

#endif
