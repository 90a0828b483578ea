/*
 * fuzz_proxy - the proxy's rewriting (src/http/proxy_head.c) and its reading of an upstream's
 * answer (src/http/proxy_answer.c, on http-parser).
 *
 * Input: a request target, a NUL, a Location, a NUL, a Set-Cookie, a NUL, then the bytes an
 * upstream sends. The target's port must be 1..65535 and its rest "" or "/..."; a rewritten
 * Location that was a path on the app stays under the prefix; a rewritten cookie has the
 * prefix before its Path only. The answer is read from a socket as the proxy reads it: a
 * head (a status from 100 to 599, interim ones passed over), then a body, whose bytes never
 * outnumber the input's and whose headers are NUL-terminated strings. The Set-Cookie part is also
 * read as a Sec-WebSocket-Protocol list: no "bearer." item is left in it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy_answer.h"
#include "proxy_internal.h"

#include "fuzz.h"

/* The next NUL-terminated part of data (copied, at most 4095 bytes), or "" at the end. */
static const uint8_t *part(const uint8_t *p, const uint8_t *end, char *out)
{
    size_t n = 0;
    while (p < end && *p && n < 4095)
        out[n++] = (char)*p++;
    out[n] = '\0';
    while (p < end && *p)
        p++;
    return p < end ? p + 1 : end;
}

static void answer(const uint8_t *p, size_t n, bool head_req)
{
    int sv[2];
    if (n > 200000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return;
    struct timeval tv = {.tv_sec = 1};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int sz = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    size_t off = 0;
    while (off < n) {
        ssize_t k = write(sv[1], p + off, n - off);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    shutdown(sv[1], SHUT_WR);
    struct proxy_answer *a = pa_new(head_req);
    check(a);
    if (pa_head(a, sv[0]) == PA_HEAD_OK) {
        unsigned st = pa_status(a);
        check(st >= 100 && st <= 599 && (st >= 200 || st == 101));
        check(pa_nheaders(a) <= 128);
        for (unsigned i = 0; i < pa_nheaders(a); i++) {
            const char *name, *value;
            pa_header(a, i, &name, &value);
            check(strlen(name) < 65536 && strlen(value) < 65536);
        }
        const char *rest;
        size_t nrest;
        pa_rest(a, &rest, &nrest);
        check(nrest <= n);
        if (st != 101) {
            size_t total = 0;
            char buf[4096];
            ssize_t k;
            while ((k = pa_body(a, sv[0], buf, sizeof(buf))) > 0)
                total += (size_t)k;
            check(total <= n);
            if (pa_length(a) >= 0 && k == 0 && !head_req && st != 204 && st != 304)
                check(total == (size_t)pa_length(a));
        }
    }
    pa_free(a);
    close(sv[0]);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char url[4096], loc[4096], cookie[4096];
    const uint8_t *end = data + size, *p = data;
    p = part(p, end, url);
    p = part(p, end, loc);
    p = part(p, end, cookie);

    uint16_t port = 0;
    const char *rest = NULL;
    if (proxy_parse_url(url, &port, &rest)) {
        check(port >= 1);
        check(*rest == '\0' || *rest == '/');
        check(rest > url && rest <= url + strlen(url));
    }
    if (!port)
        port = 8000;
    char prefix[24], out[8192];
    snprintf(prefix, sizeof(prefix), "/proxy/%u", (unsigned)port);
    if (proxy_rewrite_location(loc, prefix, port, out, sizeof(out))) {
        /* A path on the app stays under the prefix; "//host" is another host's. */
        if (loc[0] == '/' && loc[1] != '/')
            check(strncmp(out, prefix, strlen(prefix)) == 0);
        /* Nothing becomes a path to another host. */
        if (strncmp(out, "//", 2) == 0)
            check(strncmp(loc, "//", 2) == 0);
    }
    if (proxy_rewrite_cookie(cookie, prefix, out, sizeof(out))) {
        size_t ol = strlen(out), cl = strlen(cookie);
        check(ol == cl || ol == cl + strlen(prefix));
        if (ol > cl) { /* the prefix went in right after a "Path=" */
            bool found = false;
            for (const char *at = out; !found && (at = strcasestr(at, "path=")); at++)
                found = strncmp(at + 5, prefix, strlen(prefix)) == 0;
            check(found);
        }
    }
    for (size_t i = 0; i < 2 && p < end; i++) /* each header name the checks know */
        (void)proxy_request_header_passes(url, strlen(url), i);
    /* sbxd's token as a subprotocol never goes on. */
    if (proxy_drop_bearer(cookie, out, sizeof(out))) {
        const char *b = out;
        while ((b = strstr(b, "bearer."))) {
            check(b > out && b[-1] != ' ' && b[-1] != ',');
            b++;
        }
    }
    answer(p, (size_t)(end - p), size & 1);
    return 0;
}
