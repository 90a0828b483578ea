/*
 * proxy_head.c - which headers pass the proxy, each way, and the rewriting that keeps an
 * app's redirects and cookies working under /proxy/{port}/ (RFC 9110 7.6.1: hop-by-hop
 * fields are the proxy's own).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy_internal.h"

static bool named(const char *name, size_t n, const char *const *list)
{
    for (; *list; list++)
        if (strlen(*list) == n && strncasecmp(name, *list, n) == 0)
            return true;
    return false;
}

/* Meant for one hop, or the framing of one: each side of the proxy has its own. */
static const char *const hop_by_hop[] = {"Connection",
                                         "Keep-Alive",
                                         "Proxy-Connection",
                                         "Proxy-Authenticate",
                                         "Proxy-Authorization",
                                         "TE",
                                         "Trailer",
                                         "Transfer-Encoding",
                                         "Upgrade",
                                         "Content-Length",
                                         NULL};

bool proxy_request_header_passes(const char *name, size_t n, bool token_set)
{
    /* Expect: sbxd answers the client's 100-continue itself and sends the body on at once.
     * X-Forwarded-*: set by sbxd from what it knows (what came is folded into them). */
    static const char *const own[] = {"Expect",           "X-Forwarded-For",    "X-Forwarded-Proto",
                                      "X-Forwarded-Host", "X-Forwarded-Prefix", NULL};
    if (named(name, n, hop_by_hop) || named(name, n, own))
        return false;
    /* With a token, Authorization carried it: the app behind the port is a command's, and
     * must never learn it. */
    if (token_set && n == 13 && strncasecmp(name, "Authorization", 13) == 0)
        return false;
    return true;
}

bool proxy_answer_header_passes(const char *name, size_t n, bool upgrade)
{
    if (upgrade && n == 7 && strncasecmp(name, "Upgrade", 7) == 0)
        return true;
    return !named(name, n, hop_by_hop);
}

/* The length of an "http://HOST:PORT" origin at the head of v that names the upstream
 * itself, or 0. */
static size_t upstream_origin(const char *v, uint16_t port)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost", "[::1]", NULL};
    size_t at;
    if (strncasecmp(v, "http://", 7) == 0)
        at = 7;
    else if (strncasecmp(v, "https://", 8) == 0)
        at = 8;
    else
        return 0;
    for (const char *const *h = hosts; *h; h++) {
        size_t hl = strlen(*h);
        if (strncasecmp(v + at, *h, hl) != 0)
            continue;
        char p[8];
        int pl = snprintf(p, sizeof(p), ":%u", (unsigned)port);
        const char *after = v + at + hl;
        if (strncmp(after, p, (size_t)pl) == 0 &&
            (after[pl] == '\0' || after[pl] == '/' || after[pl] == '?'))
            return at + hl + (size_t)pl;
        if (port == 80 && (*after == '\0' || *after == '/' || *after == '?'))
            return at + hl;
    }
    return 0;
}

bool proxy_rewrite_location(const char *value, const char *prefix, uint16_t port, char *out,
                            size_t len)
{
    size_t pl = strlen(prefix);
    const char *path = NULL;
    size_t o = upstream_origin(value, port);
    if (o)
        path = value[o] ? value + o : "/";
    else if (value[0] == '/' && value[1] != '/') /* "//host/x" is another host */
        path = value;
    if (!path) {
        int n = snprintf(out, len, "%s", value);
        return n >= 0 && (size_t)n < len;
    }
    /* Already under the prefix (an app told its prefix by X-Forwarded-Prefix). */
    if (strncmp(path, prefix, pl) == 0 && (path[pl] == '/' || path[pl] == '\0' || path[pl] == '?'))
        prefix = "";
    int n = snprintf(out, len, "%s%s%s", prefix, path[0] == '?' ? "/" : "", path);
    return n >= 0 && (size_t)n < len;
}

bool proxy_rewrite_cookie(const char *value, const char *prefix, char *out, size_t len)
{
    /* Attributes are "; Name=value" after the cookie itself; Path's value runs to the next
     * ';'. */
    const char *p = value;
    const char *at = NULL;
    while ((p = strchr(p, ';'))) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "Path=", 5) == 0) {
            at = p + 5;
            break;
        }
    }
    int n;
    if (!at || *at != '/')
        n = snprintf(out, len, "%s", value);
    else
        n = snprintf(out, len, "%.*s%s%s", (int)(at - value), value, prefix, at);
    return n >= 0 && (size_t)n < len;
}

bool proxy_parse_url(const char *url, uint16_t *port, const char **rest)
{
    if (strncmp(url, "/proxy/", 7) != 0)
        return false;
    const char *p = url + 7;
    unsigned v = 0;
    size_t digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9' && digits < 6)
        v = v * 10 + (unsigned)(p[digits++] - '0');
    if (!digits || digits > 5 || v == 0 || v > 65535 || (p[0] == '0'))
        return false;
    if (p[digits] != '\0' && p[digits] != '/')
        return false;
    *port = (uint16_t)v;
    *rest = p + digits;
    return true;
}

bool proxy_drop_bearer(const char *value, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l && !(l >= 7 && strncmp(p, "bearer.", 7) == 0)) {
            if (n + l + 3 > len)
                return false;
            if (n) {
                memcpy(out + n, ", ", 2);
                n += 2;
            }
            memcpy(out + n, p, l);
            n += l;
            out[n] = '\0';
        }
        p += l;
    }
    return true;
}
