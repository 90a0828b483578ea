/*
 * tools_ports.c - MCP's list_ports (GET /ports: what listens in the sandbox, whose, and whether
 * the proxy reaches it) and expose_port (where a person reaches what a command serves: sbxd's
 * /proxy/{port}/, under --public-url when it is set).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/ports.h"

int tool_list_ports(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {NULL};
    if (!only_keys(args, keys, w))
        return 0;
    struct port_listener *v;
    size_t n;
    struct sbxd_err err = {0};
    if (ports_read(x->h->sb, &v, &n, &err) < 0)
        return tool_error(w, "%s", err.msg);
    struct jsonw t;
    jw_init(&t, 256 + n * 128);
    for (size_t i = 0; i < n; i++) {
        char line[512];
        int k = snprintf(line, sizeof(line), "%s:%u %s%s%s%s\n", v[i].addr, (unsigned)v[i].port,
                         v[i].own   ? "sbxd"
                         : v[i].pid ? v[i].cmdline
                                    : "(unknown process)",
                         v[i].process_id[0] ? " [process " : "", v[i].process_id,
                         v[i].process_id[0] ? "]" : "");
        jw_raw(&t, line, (size_t)(k < (int)sizeof(line) ? k : (int)sizeof(line) - 1));
    }
    if (!n)
        jw_raw(&t, "nothing listens\n", 16);
    result_begin(w);
    text_block(w, t.buf, t.len);
    jw_free(&t);
    result_structured(w);
    ports_write_list(w, v, n);
    result_end(w, false);
    free(v);
    return 0;
}

int tool_expose_port(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    static const char *const keys[] = {"port", NULL};
    if (!only_keys(args, keys, w))
        return 0;
    uint64_t port;
    if (!arg_uint(args, "port", 0, 65535, &port, w))
        return 0;
    if (port == 0)
        return tool_error(w, "port is required: the TCP port (1 to 65535) a command serves on");
    struct sockaddr_storage to;
    socklen_t len;
    struct sbxd_err err = {0};
    if (ports_target(x->h->sb, (uint16_t)port, &to, &len, &err) < 0)
        return tool_error(w, "%s%s", err.msg,
                          err.kind == SBXD_E_NOT_FOUND
                              ? ": start the server first (a background process), bound to "
                                "127.0.0.1 or 0.0.0.0"
                              : "");
    char path[32], url[320] = "";
    snprintf(path, sizeof(path), "/proxy/%u/", (unsigned)port);
    const char *pub = x->h->cfg->public_url;
    bool has_url = strncmp(pub, "http://", 7) == 0 || strncmp(pub, "https://", 8) == 0;
    if (has_url) {
        size_t pl = strlen(pub);
        if (pub[pl - 1] == '/') /* path begins with its own slash */
            pl--;
        snprintf(url, sizeof(url), "%.*s%s", (int)pl, pub, path);
    }
    char msg[512];
    int k = snprintf(msg, sizeof(msg),
                     has_url ? "port %u is reachable at %s (with sbxd's token, if it has one)"
                             : "port %u is reachable at sbxd's %s (with sbxd's token, if it has "
                               "one); through the agent-sandbox router, send X-Sandbox-Port "
                               "set to sbxd's port with that path",
                     (unsigned)port, has_url ? url : path);
    result_begin(w);
    text_block(w, msg, (size_t)(k < (int)sizeof(msg) ? k : (int)sizeof(msg) - 1));
    result_structured(w);
    jw_key(w, "port");
    jw_uint(w, port);
    jw_key(w, "path");
    jw_str(w, path);
    jw_key(w, "url");
    if (has_url)
        jw_str(w, url);
    else
        jw_null(w);
    result_end(w, false);
    return 0;
}
