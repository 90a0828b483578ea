/*
 * tools_usage.c - MCP's sandbox_usage: how full the sandbox is (usage.h), the figures of
 * GET /usage as structuredContent and a line of text for a model.
 */
#include <stdio.h>

#include "mcp_internal.h"
#include "sbxd/usage.h"

#define MIB (1024.0 * 1024.0)

int tool_sandbox_usage(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w)
{
    (void)x;
    static const char *const keys[] = {NULL};
    if (!only_keys(args, keys, w))
        return 0;
    struct usage u;
    usage_read(&u);
    char msg[512];
    const struct usage_disk *d = &u.disks[0];
    int n = snprintf(msg, sizeof(msg),
                     "cpu %.1f%% of %u over %llu ms; memory %.0f of %.0f MiB (%s); workspace "
                     "disk %.0f of %.0f MiB used; %u commands, %u background processes, %u "
                     "contexts running",
                     u.cpu_used_pct, u.cpu_count, (unsigned long long)u.cpu_interval_ms,
                     (double)u.mem_used / MIB, (double)u.mem_total / MIB, u.memory_source,
                     (double)d->used / MIB, (double)d->total / MIB, u.commands, u.processes,
                     u.contexts);
    result_begin(w);
    text_block(w, msg, (size_t)(n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1));
    result_structured(w);
    usage_write(w, &u);
    result_end(w, false);
    return 0;
}
