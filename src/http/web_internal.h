/*
 * web_internal.h - what a web page in a person's browser may ask of sbxd: the Origin and Host rules
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
 *  - From a browser (an Origin or a Sec-Fetch-Site header), no "simple" POST: one whose
 *    Content-Type is a form's, text/plain or none, which a page sends without a preflight.
 *    Everything else a page sends across origins (JSON as application/json, PUT, DELETE,
 *    custom headers) waits for a CORS preflight, which sbxd never grants; so a page sbxd's
 *    Origin rule lets through (one of this machine) still changes nothing.
 */
#ifndef SBXD_WEB_INTERNAL_H
#define SBXD_WEB_INTERNAL_H

#include <stdbool.h>

/* Whether a request with this Origin header (NULL: none) may be served. allow: comma-separated
 * origins (scheme://host[:port], a trailing '/' ignored), or "*" for any. */
bool web_origin_allowed(const char *allow, const char *origin);

/* Whether a request with this Host header (NULL: none, as HTTP/1.0 may send) may be served.
 * allow: comma-separated names ("name": that name; ".name": it and every name under it; "*":
 * any host). Case and a trailing dot do not matter; a port is ignored. */
bool web_host_allowed(const char *allow, const char *host);

/* Whether the request is a browser's: Origin, or Sec-Fetch-Site (Node's fetch sends
 * Sec-Fetch-Mode of its own accord, and is no browser). Header values, NULL when absent. */
bool web_is_browser(const char *origin, const char *sec_fetch_site);

/* Whether method and Content-Type (NULL: none) make a POST a page sends without asking
 * first (a CORS "simple request"): a form's types, text/plain, or no type. */
bool web_simple_post(const char *method, const char *content_type);

/* JSON bodies: application/json (any parameters), none at all, and the form type that
 * `curl -d` sends by default, so the documented one-liner works (a browser's POST of those
 * never gets this far: web_simple_post). */
bool web_json_type_ok(const char *content_type);

#endif
