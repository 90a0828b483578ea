#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sbxd/multipart.h"

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
static int headers_done(struct multipart *mp)
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
    return 0;
}

/* mp->hlen counts the delimiter bytes matched so far; `after` is what follows a whole
 * delimiter: "--" (the end) or optional blanks and CRLF (another part). */
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
            if (mp->hdrlen + 1 >= sizeof(mp->hdr))
                return fail(mp, "a part's headers are too long");
            mp->hdr[mp->hdrlen++] = data[i++];
            if (mp->hdrlen >= 2 && memcmp(mp->hdr + mp->hdrlen - 2, "\r\n", 2) == 0 &&
                (mp->hdrlen == 2 ||
                 (mp->hdrlen >= 4 && memcmp(mp->hdr + mp->hdrlen - 4, "\r\n\r\n", 4) == 0))) {
                mp->hdrlen -= mp->hdrlen == 2 ? 2 : 4;
                headers_done(mp);
            }
            break;
        }
        case MP_PREAMBLE:
        case MP_BODY: {
            if (mp->hold[0]) {
                /* After a delimiter. */
                char c = data[i++];
                if (mp->hold[0] == '-') {
                    if (c != '-')
                        return fail(mp, "malformed multipart delimiter");
                    if (mp->state == MP_BODY && mp->in_wanted)
                        mp->found = true;
                    mp->state = MP_DONE;
                    mp->hold[0] = '\0';
                } else if (mp->hold[0] == 'd') { /* just matched: "--", blanks or CR */
                    if (c == '-')
                        mp->hold[0] = '-';
                    else if (c == '\r')
                        mp->hold[0] = '\r';
                    else if (c != ' ' && c != '\t')
                        return fail(mp, "malformed multipart delimiter");
                } else if (mp->hold[0] == '\r') {
                    if (c != '\n')
                        return fail(mp, "malformed multipart delimiter");
                    if (mp->state == MP_BODY && mp->in_wanted)
                        mp->found = true;
                    mp->in_wanted = false;
                    mp->hold[0] = '\0';
                    mp->hdrlen = 0;
                    mp->state = MP_HEADERS;
                }
                break;
            }
            if (mp->hlen == 0) {
                /* Fast path: nothing matched; everything up to the next CR is content. */
                const char *cr = memchr(data + i, '\r', n - i);
                size_t run = cr ? (size_t)(cr - (data + i)) : n - i;
                if (emit(mp, data + i, run) < 0)
                    return -1;
                i += run;
                if (!cr)
                    break;
            }
            char c = data[i++];
            if (c == mp->delim[mp->hlen]) {
                if (++mp->hlen == mp->dlen) {
                    mp->hlen = 0;
                    mp->hold[0] = 'd';
                }
                break;
            }
            /* Not a delimiter after all: what matched was content. The boundary holds no
             * CR, so only a CR here can start a new match. */
            if (emit(mp, mp->delim, mp->hlen) < 0)
                return -1;
            if (c == '\r') {
                mp->hlen = 1;
            } else {
                mp->hlen = 0;
                if (emit(mp, &c, 1) < 0)
                    return -1;
            }
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
