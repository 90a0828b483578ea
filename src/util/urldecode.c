/*
 * urldecode.c - percent-decoding of URL paths and query arguments (urldecode.h). '+' stays
 * '+': these are paths, not form data. A decoded NUL is refused: what is decoded is used as
 * a C string, which it would cut short.
 */
#include <errno.h>

#include "sbxd/urldecode.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int http_url_decode(char *s, struct sbxd_err *err)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        int hi = hexval(r[1]), lo = hi < 0 ? -1 : hexval(r[2]);
        if (hi < 0 || lo < 0)
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                             "malformed percent-escape in the path (use %%XX)");
        char c = (char)(hi * 16 + lo);
        if (c == '\0')
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "the path contains a NUL byte");
        *w++ = c;
        r += 2;
    }
    *w = '\0';
    return 0;
}
