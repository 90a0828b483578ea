/*
 * web.h - what a web page in a person's browser may ask of sbxd: the Origin and Host rules
 * every route gets before anything else (guard.c), as pure functions of the header values
 * and the configured lists.
 *
 * A page of any site can send sbxd "simple" requests (a form's POST; fetch() with a form or
 * text body, or none, and no preflight), and after DNS rebinding (its own name re-resolved to
 * 127.0.0.1) it can send any request and read the answers, with its own name in Host. So:
 *
 *  - Origin: a request that has one (every browser's cross-site POST does, and a rebound
 *    page's POST, PUT and DELETE) is served only when it is a page of this machine
 *    (http(s)://localhost, 127.0.0.1, [::1], any port) or one --allow-origin names.
 *  - Host: a DNS name is served only when no page can have it: localhost and *.localhost, a
 *    name of one label (a Service's short name, a host of the local network), names under
 *    .svc, .cluster.local (a Service's or a pod's name in the cluster) and .internal (names
 *    no public DNS delegates), or one --allow-host names. An IP address always is: rebinding
 *    needs a name. (Applied only without a token: a page cannot know the token.)
 *  - A JSON body from a browser (Origin or Sec-Fetch-* present) must say application/json,
 *    which a browser sends across origins only after a CORS preflight sbxd never grants.
 */
#ifndef SBXD_WEB_H
#define SBXD_WEB_H

#include <stdbool.h>

/* Whether a request with this Origin header (NULL: none) may be served. allow: comma-separated
 * origins (scheme://host[:port], a trailing '/' ignored), or "*" for any. */
bool web_origin_allowed(const char *allow, const char *origin);

/* Whether a request with this Host header (NULL: none, as HTTP/1.0 may send) may be served.
 * allow: comma-separated names ("name": that name; ".name": it and every name under it; "*":
 * any host). Case and a trailing dot do not matter; a port is ignored. */
bool web_host_allowed(const char *allow, const char *host);

/* JSON bodies: application/json (any parameters); from a client that is not a browser also
 * none at all and the form type `curl -d` sends by default, so the documented one-liner
 * works. */
bool web_json_type_ok(const char *content_type, bool browser);

#endif
