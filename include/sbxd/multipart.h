/*
 * multipart.h - a streaming multipart/form-data parser (RFC 7578): bytes go in as they
 * arrive, in chunks of any size, and the content of the wanted part comes out through a
 * callback, without the body ever being held whole. Boundaries split across chunks are
 * handled by holding back at most a boundary's length of bytes.
 */
#ifndef SBXD_MULTIPART_H
#define SBXD_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

/* Called with each piece of the wanted part's content; returns 0, or -1 to stop. */
typedef int (*mp_data_fn)(void *arg, const char *data, size_t n);

enum mp_state { MP_PREAMBLE, MP_HEADERS, MP_BODY, MP_DONE, MP_ERROR };

struct multipart {
    char delim[80]; /* "\r\n--" boundary */
    size_t dlen;
    enum mp_state state;
    char hold[160]; /* bytes that may be the start of a delimiter, or a header line */
    size_t hlen;
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
