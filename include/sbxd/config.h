/*
 * config.h - the daemon's configuration: one table (config.c) gives each option its
 * flag, environment variable, default, validation and --help text.
 * Precedence: command-line flag, then environment variable, then default.
 */
#ifndef SBXD_CONFIG_H
#define SBXD_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "sbxd/err.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"

struct cmdenv;

struct sbxd_config {
    char listen[256]; /* as given: one address, or a comma list (--listen repeated joins them) */
    struct sockaddr_storage listen_addr[SBXD_LISTEN_MAX];
    socklen_t listen_addr_len[SBXD_LISTEN_MAX];
    unsigned nlisten; /* each served alike: the same routes, token, Origin/Host rules, limits */
    char grpc_listen[256]; /* as given, or "off" */
    struct sockaddr_storage grpc_addr;
    socklen_t grpc_addr_len;
    bool grpc_off;
    char workspace[PATH_MAX];
    char workspace_baseline[PATH_MAX]; /* empty: none */
    uint64_t timeout_ms;
    uint64_t max_timeout_ms;
    char env_ignored[48]; /* a compatibility variable ignored as not a number (warned at start) */
    uint64_t max_output_bytes;
    uint64_t sdk_output_bytes;    /* the agent-sandbox SDK's faces' (legacy /execute, gRPC) */
    uint64_t output_memory_bytes; /* their keep beyond max_output_bytes, all commands */
    uint64_t max_body_bytes;
    uint64_t max_upload_bytes;
    uint64_t max_archive_bytes;   /* bytes an extracted archive may write */
    uint64_t max_archive_entries; /* entries an archive may hold, or a pack may store */
    uint64_t heartbeat_ms;
    uint64_t max_running;
    uint64_t max_queued;       /* commands waiting for a running slot; 0: none wait */
    uint64_t queue_timeout_ms; /* the longest such a wait */
    uint64_t max_processes;
    uint64_t max_contexts;
    uint64_t context_idle_s;
    uint64_t warm_contexts;
    uint64_t mcp_max_sessions; /* 0: no /mcp */
    uint64_t mcp_max_client_sessions;
    uint64_t mcp_session_idle_s;
    uint64_t mcp_max_calls; /* per session, at once */
    char allow_origin[512]; /* web pages' origins served (comma-separated, or "*"; "": loopback
                             * pages only) */
    char allow_host[512];   /* Host names served besides the built-in ones ("*": any) */
    char public_url[256];   /* --public-url: where people reach sbxd (expose_port) */
    uint64_t max_watchers;
    uint64_t watch_max_dirs;
    uint64_t process_output_bytes;
    uint64_t process_retention_s;
    uint64_t stdin_timeout_ms;
    uint64_t shutdown_grace_ms;
    enum log_format log_format;
    char user[32];               /* "UID:GID" as given */
    char isolation[16];          /* auto | cgroup | pidns | uid | pgid */
    char uid_range[32];          /* "FIRST:COUNT" as given */
    char require_isolation[128]; /* comma-separated ISO_REQ_* words (isolation.h) */
    bool degraded_ok;            /* start even when commands cannot run as --user */
    char metadata_prefix[128];   /* /v1/metadata: the environment variables it serves */
    char pass_env[4096];         /* what commands inherit of sbxd's environment (cmdenv.h) */
    char token_file[PATH_MAX];   /* --token-file; empty: none */
    uint64_t max_connections;
    uint64_t max_client_connections;
    uint64_t idle_timeout_ms;
    uint64_t request_timeout_ms;
    uint64_t max_header_bytes;
    uint64_t connection_memory;
    /* Not an option: the bearer token in force (main loads it), NULL or "" for none. */
    const char *token;
    /* Not an option: the environment commands start from (main builds it from pass_env). */
    const struct cmdenv *cmdenv;
    uint64_t memory_max; /* per command, default and maximum; 0: none */
    uint64_t pids_max;   /* per command, default and maximum; 0: none */
    uid_t user_uid;
    gid_t user_gid;
    uid_t uid_first; /* --uid-range */
    unsigned uid_count;
};

enum config_outcome {
    CONFIG_RUN,    /* cfg is filled: start the daemon */
    CONFIG_EXIT_0, /* --help or --version was printed */
    CONFIG_EXIT_2, /* a bad flag or value: err says it in one line, naming it */
};

/* envp is searched for environment variables (pass `environ` in main, a fixture in tests).
 * Help and version text go to out. */
enum config_outcome config_parse(struct sbxd_config *cfg, int argc, char *const *argv,
                                 char *const *envp, FILE *out, struct sbxd_err *err);

/* Parse a whole number in decimal, digits only (no sign, no space), up to UINT64_MAX: 0, or
 * -1 (config_values.c, as the two below). */
int config_parse_uint(const char *s, uint64_t *out);

/* Parse "host:port", "[v6]:port" or ":port" (all interfaces) into a socket address. */
int config_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/* Parse a byte size: a plain number or one with a suffix K/KiB, M/MiB, G/GiB (powers of 1024)
 * or KB/MB/GB (powers of 1000). Returns 0 or -1. */
int config_parse_size(const char *s, uint64_t *out);

#endif
