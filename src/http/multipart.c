/*
 * multipart.c - the streaming multipart/form-data parser (multipart_internal.h). Content is scanned
 * for the delimiter with memmem over each whole piece and handed on as one run per piece,
 * straight from the caller's buffer: a 256 MiB upload costs one pass over its bytes and as
 * many callbacks (writes) as a raw body would. Only header lines are copied (into hdr).
 */
#include <stdio.h>
#include <sys/types.h>
#include <string.h>
#include <strings.h>

#include "multipart_internal.h"

bool mp_is_multipart(const char *ct)
{
    return ct && strncasecmp(ct, "multipart/form-data", 19) == 0 &&
           (ct[19] == '\0' || ct[19] == ';' || ct[19] == ' ' || ct[19] == '\t');
}

/* The value of parameter `name` in a header value ("a; name=v" or name="v"), into out. */
/* The next ';' that separates parameters: one inside a quoted string is part of a value. */
static const char *next_semicolon(const char *p)
{
    bool quoted = false;
    for (; *p; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (*p == '\\' && quoted && p[1])
            p++;
        else if (*p == ';' && !quoted)
            return p;
    }
    return NULL;
}

/* A parameter's value. Separators are found outside quoted strings only, so a filename such
 * as "x;name=file;" cannot pass itself off as another parameter. */
static bool param(const char *v, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    for (const char *p = next_semicolon(v); p; p = next_semicolon(p + 1)) {
        const char *q = p + 1;
        while (*q == ' ' || *q == '\t')
            q++;
        if (strncasecmp(q, name, nl) != 0 || q[nl] != '=')
            continue;
        q += nl + 1;
        size_t n = 0;
        if (*q == '"') {
            q++;
            while (q[n] && q[n] != '"')
                n++;
        } else {
            n = strcspn(q, "; \t\r\n");
        }
        if (n >= outlen)
            return false;
        memcpy(out, q, n);
        out[n] = '\0';
        return true;
    }
    return false;
}

int mp_init(struct multipart *mp, const char *ct, const char *want, mp_data_fn fn, void *arg)
{
    memset(mp, 0, sizeof(*mp));
    mp->want = want;
    mp->fn = fn;
    mp->arg = arg;
    char b[80];
    if (!mp_is_multipart(ct)) {
        snprintf(mp->error, sizeof(mp->error), "Content-Type is not multipart/form-data");
        goto bad;
    }
    /* RFC 2046: 1 to 70 characters. */
    if (!param(ct, "boundary", b, sizeof(b)) || !b[0] || strlen(b) > 70) {
        snprintf(mp->error, sizeof(mp->error), "multipart/form-data without a usable boundary");
        goto bad;
    }
    mp->dlen = (size_t)snprintf(mp->delim, sizeof(mp->delim), "\r\n--%s", b);
    /* The body starts with "--boundary": as if a CRLF had come before it. */
    mp->hlen = 2;
    mp->state = MP_PREAMBLE;
    return 0;
bad:
    mp->state = MP_ERROR;
    return -1;
}

static int fail(struct multipart *mp, const char *msg)
{
    snprintf(mp->error, sizeof(mp->error), "%s", msg);
    mp->state = MP_ERROR;
    return -1;
}

static int emit(struct multipart *mp, const char *d, size_t n)
{
    if (n && mp->state == MP_BODY && mp->in_wanted && mp->fn(mp->arg, d, n) < 0)
        return fail(mp, "the part's content could not be stored");
    return 0;
}

/* A part's header block is complete (without its final blank line). */
static void headers_done(struct multipart *mp)
{
    mp->hdr[mp->hdrlen] = '\0';
    mp->in_wanted = false;
    for (char *line = mp->hdr; line && *line;) {
        char *next = strstr(line, "\r\n");
        if (next)
            *next = '\0';
        if (strncasecmp(line, "content-disposition:", 20) == 0) {
            char name[128];
            if (param(line, "name", name, sizeof(name)) && strcmp(name, mp->want) == 0 &&
                !mp->found) {
                mp->in_wanted = true;
                if (!param(line, "filename", mp->filename, sizeof(mp->filename)))
                    mp->filename[0] = '\0';
            }
        }
        line = next ? next + 2 : NULL;
    }
    mp->hdrlen = 0;
    mp->state = MP_BODY;
}

/* Header lines, a line at a time, up to the blank line (or a block that is one CRLF: a part
 * without headers). The block is bounded by hdr's size. Returns the bytes used, or -1. */
static ssize_t feed_headers(struct multipart *mp, const char *d, size_t n)
{
    size_t used = 0;
    while (used < n) {
        const char *nl = memchr(d + used, '\n', n - used);
        size_t take = nl ? (size_t)(nl - (d + used)) + 1 : n - used;
        if (mp->hdrlen + take >= sizeof(mp->hdr))
            return fail(mp, "a part's headers are too long");
        memcpy(mp->hdr + mp->hdrlen, d + used, take);
        mp->hdrlen += take;
        used += take;
        if (!nl)
            break;
        /* A line ended: the block ends with it when it is the blank line. */
        if (mp->hdrlen == 2 && memcmp(mp->hdr, "\r\n", 2) == 0) {
            mp->hdrlen = 0;
            headers_done(mp);
            break;
        }
        if (mp->hdrlen >= 4 && memcmp(mp->hdr + mp->hdrlen - 4, "\r\n\r\n", 4) == 0) {
            mp->hdrlen -= 4;
            headers_done(mp);
            break;
        }
    }
    return (ssize_t)used;
}

/* One byte after a whole delimiter: "--" ends the body, blanks then CRLF start a part. */
static int feed_after(struct multipart *mp, char c)
{
    switch (mp->after) {
    case 'd':
        if (c == '-' || c == '\r')
            mp->after = c;
        else if (c != ' ' && c != '\t')
            return fail(mp, "malformed multipart delimiter");
        return 0;
    case '-':
        if (c != '-')
            return fail(mp, "malformed multipart delimiter");
        if (mp->state == MP_BODY && mp->in_wanted)
            mp->found = true;
        mp->after = 0;
        mp->state = MP_DONE;
        return 0;
    default: /* '\r' */
        if (c != '\n')
            return fail(mp, "malformed multipart delimiter");
        if (mp->state == MP_BODY && mp->in_wanted)
            mp->found = true;
        mp->in_wanted = false;
        mp->after = 0;
        mp->hdrlen = 0;
        mp->state = MP_HEADERS;
        return 0;
    }
}

/* Where the longest tail of d[0..n) that is a proper prefix of the delimiter begins (n when
 * none): only the last dlen-1 bytes can hold one, and only where a CR (delim[0]) is. */
static size_t partial_start(const struct multipart *mp, const char *d, size_t n)
{
    const char *end = d + n;
    const char *p = n > mp->dlen - 1 ? end - (mp->dlen - 1) : d;
    while ((p = memchr(p, mp->delim[0], (size_t)(end - p))) != NULL) {
        if (memcmp(p, mp->delim, (size_t)(end - p)) == 0)
            return (size_t)(p - d);
        p++;
    }
    return n;
}

/* The first whole delimiter in d[0..n), or NULL. Every delimiter starts with a CR, which
 * binary data holds once in 256 bytes and text without CRLF line ends not at all: memchr
 * finds the candidates at memory speed and memcmp settles each. Content dense with CRs (a
 * CRLF text) would make that a call per line, so past a CR per 64 bytes the rest goes to
 * memmem, which is fast whatever the content. */
static const char *find_delim(const struct multipart *mp, const char *d, size_t n)
{
    size_t dlen = mp->dlen;
    if (n < dlen)
        return NULL;
    const char *p = d, *last = d + n - dlen; /* where the last possible delimiter starts */
    for (size_t tries = 0;; tries++) {
        p = memchr(p, '\r', (size_t)(last - p) + 1);
        if (!p)
            return NULL;
        /* After a CR, binary data rarely has the LF: most candidates end here, unasked. */
        if (p[1] == '\n' && memcmp(p + 2, mp->delim + 2, dlen - 2) == 0)
            return p;
        if (++p > last)
            return NULL;
        if (tries > 16 + (size_t)(p - d) / 64)
            return memmem(p, (size_t)(d + n - p), mp->delim, dlen);
    }
}

/* Content (the preamble's, or a part's) up to the next delimiter. Sets *used to the bytes
 * consumed; returns 1 when a whole delimiter ended there, 0 when d ran out first (its last
 * bytes held back if they may begin one), -1 on failure. */
static int feed_content(struct multipart *mp, const char *d, size_t n, size_t *used)
{
    size_t dlen = mp->dlen;
    if (mp->hlen) {
        /* The pieces before ended in delim[0..hlen): look across the seam, in a copy of the
         * held bytes and at most dlen-1 of the new ones. */
        char seam[2 * sizeof(mp->delim)];
        size_t h = mp->hlen, take = n < dlen - 1 ? n : dlen - 1, slen = h + take;
        memcpy(seam, mp->delim, h);
        memcpy(seam + h, d, take);
        const char *m = memmem(seam, slen, mp->delim, dlen);
        if (m && (size_t)(m - seam) < h) {
            size_t at = (size_t)(m - seam);
            mp->hlen = 0;
            if (emit(mp, mp->delim, at) < 0)
                return -1;
            *used = at + dlen - h;
            return 1;
        }
        size_t q = partial_start(mp, seam, slen);
        if (q < h) {
            /* Still a possible start that begins in the held bytes: then all of d is in
             * the seam (more would have made it whole). What is before it is content. */
            if (emit(mp, mp->delim, q) < 0)
                return -1;
            mp->hlen = slen - q;
            *used = n;
            return 0;
        }
        /* The held bytes were content; d is scanned on its own below. */
        mp->hlen = 0;
        if (emit(mp, mp->delim, h) < 0)
            return -1;
    }
    const char *m = find_delim(mp, d, n);
    if (m) {
        if (emit(mp, d, (size_t)(m - d)) < 0)
            return -1;
        *used = (size_t)(m - d) + dlen;
        return 1;
    }
    size_t q = partial_start(mp, d, n);
    if (emit(mp, d, q) < 0)
        return -1;
    mp->hlen = n - q;
    *used = n;
    return 0;
}

int mp_feed(struct multipart *mp, const char *data, size_t n)
{
    size_t i = 0;
    while (i < n) {
        switch (mp->state) {
        case MP_ERROR:
            return -1;
        case MP_DONE:
            return 0; /* the epilogue is ignored */
        case MP_HEADERS: {
            ssize_t used = feed_headers(mp, data + i, n - i);
            if (used < 0)
                return -1;
            i += (size_t)used;
            break;
        }
        case MP_PREAMBLE:
        case MP_BODY: {
            if (mp->after) {
                if (feed_after(mp, data[i++]) < 0)
                    return -1;
                break;
            }
            size_t used;
            int r = feed_content(mp, data + i, n - i, &used);
            if (r < 0)
                return -1;
            i += used;
            if (r == 1)
                mp->after = 'd';
            break;
        }
        }
    }
    return mp->state == MP_ERROR ? -1 : 0;
}

int mp_finish(struct multipart *mp)
{
    if (mp->state == MP_ERROR)
        return -1;
    if (mp->state != MP_DONE)
        return fail(mp, "the multipart body ended before its closing boundary");
    return 0;
}
