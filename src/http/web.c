#include <arpa/inet.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "web_internal.h"

/* The next item of a comma-separated list at *p (blanks around it trimmed) into *item and
 * *len; false at the list's end. */
static bool list_next(const char **p, const char **item, size_t *len)
{
    if (!*p || !**p)
        return false;
    const char *e = strchr(*p, ',');
    size_t n = e ? (size_t)(e - *p) : strlen(*p);
    const char *s = *p;
    while (n && *s == ' ') {
        s++;
        n--;
    }
    while (n && s[n - 1] == ' ')
        n--;
    *item = s;
    *len = n;
    *p = e ? e + 1 : NULL;
    return true;
}

/* Whether the comma-separated list holds word (n bytes, case-insensitive) or "*". */
static bool list_has(const char *list, const char *word, size_t n)
{
    const char *it;
    size_t len;
    for (const char *p = list; list_next(&p, &it, &len);)
        if ((len == 1 && *it == '*') || (len == n && strncasecmp(it, word, n) == 0))
            return true;
    return false;
}

/* Whether name (n bytes) ends with suffix, which starts with '.'. */
static bool ends_with(const char *name, size_t n, const char *suffix)
{
    size_t sl = strlen(suffix);
    return n > sl && strncasecmp(name + n - sl, suffix, sl) == 0;
}

/* The list's ".suffix" entries: name (n bytes) is the suffix's own name or under it. */
static bool list_has_suffix_of(const char *list, const char *name, size_t n)
{
    const char *it;
    size_t len;
    for (const char *p = list; list_next(&p, &it, &len);)
        if (len > 1 && *it == '.' &&
            ((n == len - 1 && strncasecmp(name, it + 1, n) == 0) ||
             (n > len && strncasecmp(name + n - len, it, len) == 0)))
            return true;
    return false;
}

/* The host part of "host[:port]" or "[v6]:port" into out (no brackets, no trailing dot);
 * false when it cannot be a host. *literal: it was an IP address. */
static bool host_part(const char *h, char *out, size_t outlen, bool *literal)
{
    *literal = false;
    size_t n;
    if (*h == '[') {
        const char *end = strchr(h, ']');
        if (!end || (end[1] && end[1] != ':'))
            return false;
        n = (size_t)(end - h - 1);
        if (n >= outlen)
            return false;
        memcpy(out, h + 1, n);
        out[n] = '\0';
        struct in6_addr a6;
        *literal = inet_pton(AF_INET6, out, &a6) == 1;
        return *literal;
    }
    n = strcspn(h, ":");
    if (h[n] && strchr(h + n + 1, ':')) {
        /* An IPv6 address without brackets: no browser sends that, but it is no name. */
        struct in6_addr a6;
        *literal = strlen(h) < outlen && inet_pton(AF_INET6, h, &a6) == 1;
        return *literal;
    }
    if (n == 0 || n >= outlen)
        return false;
    memcpy(out, h, n);
    out[n] = '\0';
    if (out[n - 1] == '.') /* "localhost." is localhost */
        out[--n] = '\0';
    struct in_addr a4;
    *literal = inet_pton(AF_INET, out, &a4) == 1;
    return n > 0;
}

bool web_host_allowed(const char *allow, const char *host)
{
    if (!host || !*host)
        return true; /* HTTP/1.0 without Host: no browser sends that */
    if (allow && strcmp(allow, "*") == 0)
        return true;
    char name[256];
    bool literal;
    if (!host_part(host, name, sizeof(name), &literal))
        return false;
    /* DNS rebinding needs a name the attacker's DNS answers for: an address is never one. */
    if (literal)
        return true;
    size_t n = strlen(name);
    /* Names no public DNS delegates, so no page can be served under them: localhost (RFC
     * 6761), one label (resolved through the local search list only), and the cluster's and
     * the private-use ones: a Service or pod's name (.svc, .cluster.local: the router's
     * `{sandbox}.{namespace}.svc.cluster.local`), .internal (ICANN's private-use TLD:
     * host.docker.internal). A custom cluster domain goes in --allow-host. */
    if (strcasecmp(name, "localhost") == 0 || !strchr(name, '.'))
        return true;
    static const char *const local[] = {".localhost", ".svc", ".cluster.local", ".internal"};
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
        if (ends_with(name, n, local[i]))
            return true;
    return list_has(allow, name, n) || list_has_suffix_of(allow, name, n);
}

bool web_origin_allowed(const char *allow, const char *origin)
{
    if (!origin)
        return true; /* not a browser's request: no web page sent it */
    size_t olen = strlen(origin);
    while (olen && origin[olen - 1] == '/')
        olen--;
    if (list_has(allow, origin, olen))
        return true;
    const char *h;
    if (strncasecmp(origin, "http://", 7) == 0)
        h = origin + 7;
    else if (strncasecmp(origin, "https://", 8) == 0)
        h = origin + 8;
    else
        return false; /* "null" (a sandboxed frame, a file:// page) and the rest */
    /* A page of this machine: what a rebound or foreign page can never be. The name must
     * end there (localhost.evil.example is a site like any). */
    static const char *const local[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++) {
        size_t n = strlen(local[i]);
        if (strncasecmp(h, local[i], n) == 0 && (h[n] == '\0' || h[n] == ':' || h[n] == '/'))
            return true;
    }
    return false;
}

bool web_is_browser(const char *origin, const char *sec_fetch_site)
{
    return origin != NULL || sec_fetch_site != NULL;
}

/* Whether ct's essence (before any parameter) is type. */
static bool type_is(const char *ct, const char *type)
{
    size_t n = strcspn(ct, "; \t");
    return n == strlen(type) && strncasecmp(ct, type, n) == 0;
}

bool web_simple_post(const char *method, const char *ct)
{
    if (strcmp(method, "POST") != 0)
        return false; /* GET and HEAD read; any other method needs a preflight */
    return !ct || !*ct || type_is(ct, "application/x-www-form-urlencoded") ||
           type_is(ct, "multipart/form-data") || type_is(ct, "text/plain");
}

bool web_json_type_ok(const char *ct)
{
    return !ct || !*ct || type_is(ct, "application/json") ||
           type_is(ct, "application/x-www-form-urlencoded");
}
