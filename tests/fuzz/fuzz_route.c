/*
 * fuzz_route - routing and the file routes' path decoding (http_route_find in
 * src/http/server.c, http_files_path in src/http/route_files.c), and the web page checks of
 * Host and Origin (src/http/web.c) on the same bytes.
 *
 * The input is a URL as libmicrohttpd hands it over (escapes kept, no query). The route found
 * must be one whose path the URL starts with; the workspace path of a file route must be
 * exactly the URL decoded, with only the route's prefix and slashes taken off its front,
 * and nothing a C string cannot carry. The decoding is checked against a small independent
 * one here.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "web_internal.h"

#include "fuzz.h"

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode n bytes of in into out (room for n); -1 for a malformed escape. */
static long decode(const char *in, size_t n, char *out)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[w++] = in[i];
            continue;
        }
        if (i + 2 >= n)
            return -1;
        int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
        if (hi < 0 || lo < 0)
            return -1;
        out[w++] = (char)(hi * 16 + lo);
        i += 2;
    }
    return (long)w;
}

static void check_route(const char *url)
{
    const struct route *r = http_route_find(url);
    if (!r)
        return;
    size_t n = strlen(r->path);
    check(r->fn != NULL && r->methods != 0);
    check(strncmp(url, r->path, n) == 0);
    check(url[n] == '\0' || (r->prefix && url[n] == '/'));
}

/* A server whose workspace is /workspace: a path that names it is taken inside it. */
static struct sbxd_config fz_cfg = {.workspace = "/workspace"};
static struct sandbox fz_sb = {.workspace = "/workspace"};
static struct server fz_srv = {.cfg = &fz_cfg, .sb = &fz_sb};

/* What follows "/workspace" at the front of path (slashes before and between ignored), at a
 * '/' or the end; NULL when path does not start so. */
static const char *after_workspace(const char *path)
{
    if (path[0] != '/')
        return NULL;
    while (*path == '/')
        path++;
    if (strncmp(path, "workspace", 9) != 0 || (path[9] != '/' && path[9] != '\0'))
        return NULL;
    return path + 9;
}

static void check_files_path(const char *url, size_t ulen)
{
    /* The path after the prefix of the route the URL finds (none: nothing taken off). */
    char *ref = malloc(ulen + 1);
    check(ref != NULL);
    long rl = decode(url, ulen, ref);
    if (rl >= 0)
        ref[rl] = '\0';
    bool has_nul = rl >= 0 && memchr(ref, '\0', (size_t)rl) != NULL;

    struct sbxd_err err = {0};
    const struct route *rt = http_route_find(url);
    char *p = http_files_path(&fz_srv, rt, url, &err);
    if (!p) {
        check(err.kind != SBXD_E_NONE && err.msg[0]);
        /* Refused only for a bad escape, a NUL, or a path too long. */
        check(rl < 0 || has_nul || (size_t)rl >= PATH_MAX);
        free(ref);
        return;
    }
    size_t pl = strlen(p);
    check(rl >= 0 && !has_nul);
    check(pl < PATH_MAX && p[0] != '/');
    /* The route's prefix is taken off as sent (it holds no escape), then its separator;
     * what is left, decoded, loses the workspace's own path at its front, then its
     * leading slashes: p is exactly that. */
    size_t rpl = rt ? strlen(rt->path) : 0;
    check(rpl <= (size_t)rl && memcmp(ref, url, rpl) == 0);
    const char *tail = ref + rpl;
    if (rt && *tail == '/')
        tail++;
    const char *in = after_workspace(tail);
    if (in)
        tail = in;
    while (*tail == '/')
        tail++;
    check(strcmp(tail, p) == 0);
    free(p);
    free(ref);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    check(url != NULL);
    memcpy(url, data, size);
    url[size] = '\0';
    size_t ulen = strlen(url); /* what a C string of it carries */
    check_route(url);
    check_files_path(url, ulen);
    /* Host and Origin: a list can only add to what is served, "*" serves anything, and a
     * name refused by default stays refused under a list that does not name it. */
    bool host = web_host_allowed("", url);
    check(!host || web_host_allowed("sandbox.example.com,.apps.example", url));
    check(web_host_allowed("*", url));
    bool origin = web_origin_allowed("", url);
    check(!origin || web_origin_allowed("https://app.example", url));
    check(web_origin_allowed("*", url));
    free(url);
    return 0;
}
