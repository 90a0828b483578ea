/* urldecode.h - percent-decoding of a URL's path and query arguments, for the HTTP layer. */
#ifndef SBXD_URLDECODE_H
#define SBXD_URLDECODE_H

#include "sbxd/err.h"

/* Percent-decode a URL path in place: %XX to its byte. Refuses a NUL (%00) and malformed
 * escapes. Returns 0 or -1 with err. */
int http_url_decode(char *s, struct sbxd_err *err);

#endif
