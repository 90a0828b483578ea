/*
 * A regular file's bytes as an answer, for every face of the file API: served from the fd
 * the route opened (sendfile where libmicrohttpd can), never reopened by name, with ETag,
 * Last-Modified and a single Range.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "http_files_internal.h"
#include "sbxd/metrics.h"

static void http_date(int64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* Parse a single "bytes=" range against size into [*first, *last]. 1: a range; 0: none
 * (or one this server ignores: several ranges); -1: unsatisfiable; -2: malformed. */
static int parse_range(const char *h, uint64_t size, uint64_t *first, uint64_t *last)
{
    if (!h)
        return 0;
    if (strncasecmp(h, "bytes=", 6) != 0)
        return -2;
    h += 6;
    if (strchr(h, ','))
        return 0; /* several ranges: the whole file, as RFC 9110 allows */
    char *end;
    if (*h == '-') {
        errno = 0;
        uint64_t n = strtoull(h + 1, &end, 10);
        if (errno || *end || end == h + 1)
            return -2;
        if (n == 0 || size == 0)
            return -1;
        *first = n >= size ? 0 : size - n;
        *last = size - 1;
        return 1;
    }
    errno = 0;
    uint64_t a = strtoull(h, &end, 10);
    if (errno || end == h || *end != '-')
        return -2;
    const char *b = end + 1;
    uint64_t z = UINT64_MAX;
    if (*b) {
        z = strtoull(b, &end, 10);
        if (errno || *end || z < a)
            return -2;
    }
    if (a >= size)
        return -1;
    *first = a;
    *last = z >= size ? size - 1 : z;
    return 1;
}

/* Content-Disposition: attachment with the name as a quoted-string: quotes, backslashes and
 * controls cannot break out. */
static void add_attachment(struct MHD_Response *r, const char *name)
{
    char cd[PATH_MAX + 64];
    size_t n = (size_t)snprintf(cd, sizeof(cd), "attachment; filename=\"");
    for (const char *q = name; *q && n + 4 < sizeof(cd); q++)
        if ((unsigned char)*q >= 0x20 && *q != 0x7f) {
            if (*q == '"' || *q == '\\')
                cd[n++] = '\\';
            cd[n++] = *q;
        }
    snprintf(cd + n, sizeof(cd) - n, "\"");
    MHD_add_response_header(r, "Content-Disposition", cd);
}

/* The bytes [first, first+len) of fd (consumed, also on failure), or an empty body. */
static struct MHD_Response *body_of(int fd, uint64_t first, uint64_t len)
{
    if (len == 0) {
        close(fd);
        return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    struct MHD_Response *r = MHD_create_response_from_fd_at_offset64(len, fd, first);
    if (!r)
        close(fd);
    return r;
}

enum MHD_Result files_send(struct MHD_Connection *c, int fd, const struct stat *st,
                           const char *attachment)
{
    struct fs_entry e;
    fs_entry_from_stat(&e, "", st);
    uint64_t size = e.size, first = 0, last = size ? size - 1 : 0;
    char etag[80], lm[64], cr[96];
    fs_etag(st, etag, sizeof(etag));
    http_date(e.mtime_ns, lm, sizeof(lm));
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    /* If-Range: the range only holds for the version the client has. */
    const char *if_range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Range");
    if (range && if_range && strcmp(if_range, etag) != 0 && strcmp(if_range, lm) != 0)
        range = NULL;
    int rr = parse_range(range, size, &first, &last);
    if (rr < 0)
        close(fd);
    if (rr == -2)
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "INVALID_ARGUMENT",
                           "Range must be bytes=FIRST-[LAST] or bytes=-SUFFIX");
    if (rr == -1) {
        snprintf(cr, sizeof(cr), "bytes */%" PRIu64, size);
        return reply_error_header(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, "RANGE_NOT_SATISFIABLE",
                                  MHD_HTTP_HEADER_CONTENT_RANGE, cr,
                                  "the range lies outside the file's %" PRIu64 " bytes", size);
    }
    uint64_t len = size ? last - first + 1 : 0;
    struct MHD_Response *r = body_of(fd, first, len);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_LAST_MODIFIED, lm);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (attachment)
        add_attachment(r, attachment);
    unsigned status = MHD_HTTP_OK;
    if (rr == 1) {
        snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        status = MHD_HTTP_PARTIAL_CONTENT;
    }
    if (!http_is_head())
        metrics_file(false, len);
    enum MHD_Result ret = http_queue(c, status, r, len);
    MHD_destroy_response(r);
    return ret;
}
