#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/config.h"
#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"

enum opt_type {
    OPT_LISTEN,
    OPT_GRPC_LISTEN, /* an address as OPT_LISTEN, or "off" */
    OPT_PATH,
    OPT_FILE,   /* a path, or empty for none */
    OPT_UINT,   /* a whole number */
    OPT_SIZE,   /* bytes, with optional suffix */
    OPT_LOGFMT, /* json | text */
    OPT_USER,   /* UID:GID */
    OPT_RANGE,  /* FIRST:COUNT of uids */
    OPT_CHOICE, /* one of help's words in braces */
    OPT_LIST,   /* comma-separated words, validated by main */
    OPT_BOOL    /* a flag alone (true), or =true/false, 1/0 (a bool field) */
};

struct opt {
    const char *flag;
    const char *metavar;
    const char *env;
    const char *alt_env;    /* a second, compatibility variable (lower precedence) */
    uint64_t alt_env_scale; /* alt_env's value is multiplied by this */
    const char *def;
    enum opt_type type;
    size_t off;
    uint64_t min, max; /* OPT_LIST: max is the field's size (0: 128) */
    const char *help;
};

#define OFF(field) offsetof(struct sbxd_config, field)
#define GIB        (1024ULL * 1024 * 1024)

/* The one table: flag, variable, default, validation and help of every option. */
static const struct opt opts[] = {
    {"listen", "ADDR", "SBXD_LISTEN", NULL, 0, "0.0.0.0:8888", OPT_LISTEN, OFF(listen), 0, 0,
     "Address of the HTTP API: HOST:PORT, [IPV6]:PORT or :PORT (port 0 picks a free one). "
     "Repeat it, or give a comma list (so too in SBXD_LISTEN), to listen on up to 8 "
     "addresses (e.g. :8888,:8080): each serves the same routes, token, Origin/Host rules and "
     "limits."},
    {"grpc-listen", "ADDR", "SBXD_GRPC_LISTEN", NULL, 0, "0.0.0.0:9090", OPT_GRPC_LISTEN,
     OFF(grpc_listen), 0, 0,
     "Address of the gRPC listener (h2c): agent-sandbox's sandboxd ProcessService "
     "(process.v1) and grpc.health.v1, as --listen takes it; off: no gRPC listener."},
    {"workspace", "DIR", "SBXD_WORKSPACE", "SANDBOX_BASE_DIR", 0, "/workspace", OPT_PATH,
     OFF(workspace), 0, 0,
     "Root of the files commands work on and the default cwd; created if missing."},
    {"workspace-baseline", "DIR", "SBXD_WORKSPACE_BASELINE", NULL, 0, "", OPT_FILE,
     OFF(workspace_baseline), 0, 0,
     "A reset (POST /reset) gives the emptied workspace a copy of this directory's tree "
     "(reflinks where the file system can), as the command user, who must be able to read it; "
     "outside the workspace. Empty: a reset leaves the workspace empty."},
    {"timeout-ms", "MS", "SBXD_TIMEOUT_MS", "SANDBOX_EXEC_TIMEOUT_SECONDS", 1000, "300000",
     OPT_UINT, OFF(timeout_ms), 1, SBXD_TIMEOUT_HARD_MAX_MS,
     "Wall-clock timeout of a command that asks for none (neither timeout_ms, nor "
     "X-Sandbox-Timeout, nor a gRPC deadline). SANDBOX_EXEC_TIMEOUT_SECONDS (in seconds, "
     "fractions too; not a number above 0: ignored, with a warning) is honoured too; 300 s "
     "is the python runtime's default."},
    {"max-timeout-ms", "MS", "SBXD_MAX_TIMEOUT_MS", NULL, 0, "3600000", OPT_UINT,
     OFF(max_timeout_ms), 1, SBXD_TIMEOUT_HARD_MAX_MS,
     "Largest timeout a request may ask for (timeout_ms, X-Sandbox-Timeout, a gRPC deadline): "
     "raised to --timeout-ms when only that is set; given alone below it, --timeout-ms falls "
     "to it."},
    {"max-output-bytes", "SIZE", "SBXD_MAX_OUTPUT_BYTES", NULL, 0, "1MiB", OPT_SIZE,
     OFF(max_output_bytes), 1, 1 * GIB,
     "Bytes of stdout and of stderr kept per command (the head); the rest is counted and "
     "dropped."},
    {"sdk-output-bytes", "SIZE", "SBXD_SDK_OUTPUT_BYTES", NULL, 0, "16MiB", OPT_SIZE,
     OFF(sdk_output_bytes), 1, 1 * GIB,
     "Bytes of stdout and of stderr kept per command on the faces of the agent-sandbox SDK, "
     "whose clients see no truncation flag: a legacy POST /execute of {\"command\"} alone, and "
     "gRPC Execute (at most what fits its 4 MiB message). Output cut there is told in a last "
     "line of stderr."},
    {"output-memory-bytes", "SIZE", "SBXD_OUTPUT_MEMORY_BYTES", NULL, 0, "128MiB", OPT_SIZE,
     OFF(output_memory_bytes), 0, 1 * GIB,
     "Memory that the commands running at once share for what those faces keep beyond "
     "--max-output-bytes each; once it is in use, more output is left out and stderr says "
     "so."},
    {"max-body-bytes", "SIZE", "SBXD_MAX_BODY_BYTES", NULL, 0, "1MiB", OPT_SIZE,
     OFF(max_body_bytes), 64, 1 * GIB, "Largest request body accepted (413 beyond)."},
    {"max-upload-bytes", "SIZE", "SBXD_MAX_UPLOAD_BYTES", NULL, 0, "1GiB", OPT_SIZE,
     OFF(max_upload_bytes), 1, 1ULL << 50,
     "Largest file a PUT /files may write (413 beyond, before a byte is written when the "
     "size is announced); also the largest archive a PUT ?archive= takes."},
    {"max-archive-bytes", "SIZE", "SBXD_MAX_ARCHIVE_BYTES", NULL, 0, "1GiB", OPT_SIZE,
     OFF(max_archive_bytes), 1, 1ULL << 50,
     "Bytes an archive may expand to, its files and its headers (names, link targets) together "
     "(PUT ?archive=: 413 past it, nothing extracted)."},
    {"max-archive-entries", "N", "SBXD_MAX_ARCHIVE_ENTRIES", NULL, 0, "100000", OPT_UINT,
     OFF(max_archive_entries), 1, 100000000,
     "Entries an archive may hold (PUT ?archive=: 413 past it) and a GET ?archive= may pack."},
    {"heartbeat-ms", "MS", "SBXD_HEARTBEAT_MS", NULL, 0, "15000", OPT_UINT, OFF(heartbeat_ms), 10,
     3600000,
     "A streamed /execute or a followed process output sends a heartbeat event after this "
     "much silence, so proxies keep the stream open."},
    {"max-running", "N", "SBXD_MAX_RUNNING", NULL, 0, "32", OPT_UINT, OFF(max_running), 1, 4096,
     "Commands running at once (/execute, and background starts while they start); more wait "
     "their turn, first come first served (--max-queued)."},
    {"max-queued", "N", "SBXD_MAX_QUEUED", NULL, 0, "256", OPT_UINT, OFF(max_queued), 0, 65536,
     "Commands that may wait for a running slot; beyond it 429 with Retry-After. 0: none "
     "wait, past --max-running it is 429 at once."},
    {"queue-timeout-ms", "MS", "SBXD_QUEUE_TIMEOUT_MS", NULL, 0, "30000", OPT_UINT,
     OFF(queue_timeout_ms), 1, 3600000,
     "The longest a command waits for a running slot; then 429 with Retry-After. A client "
     "that hangs up while it waits leaves the queue at once."},
    {"max-processes", "N", "SBXD_MAX_PROCESSES", NULL, 0, "64", OPT_UINT, OFF(max_processes), 1,
     4096,
     "Background processes (/processes) running at once; more are refused with 429. As many "
     "ended ones are kept for their results."},
    {"process-output-bytes", "SIZE", "SBXD_PROCESS_OUTPUT_BYTES", NULL, 0, "4MiB", OPT_SIZE,
     OFF(process_output_bytes), 4096, 1 * GIB,
     "Output kept per background process (a ring: the newest bytes, with absolute offsets)."},
    {"process-retention-s", "S", "SBXD_PROCESS_RETENTION_S", NULL, 0, "600", OPT_UINT,
     OFF(process_retention_s), 0, 7 * 24 * 3600,
     "How long an ended background process keeps its result and output."},
    {"max-contexts", "N", "SBXD_MAX_CONTEXTS", NULL, 0, "16", OPT_UINT, OFF(max_contexts), 0, 1024,
     "Code contexts (/contexts: Jupyter kernels, shell sessions) alive at once; more are "
     "refused with 429. 0: none."},
    {"warm-contexts", "N", "SBXD_WARM_CONTEXTS", NULL, 0, "1", OPT_UINT, OFF(warm_contexts), 0, 8,
     "Python kernels kept started and idle, made after start-up: a POST /contexts for python "
     "(without cwd, env or limits) takes one and answers in milliseconds. None when no python "
     "kernel is installed; outside --max-contexts until taken."},
    {"context-idle-s", "S", "SBXD_CONTEXT_IDLE_S", NULL, 0, "1800", OPT_UINT, OFF(context_idle_s),
     0, 7 * 24 * 3600,
     "A context not used for this long is shut down (its processes killed). 0: never."},
    {"mcp-max-sessions", "N", "SBXD_MCP_MAX_SESSIONS", NULL, 0, "32", OPT_UINT,
     OFF(mcp_max_sessions), 0, 4096,
     "MCP sessions (POST /mcp initialize) alive at once; one more ends the longest idle when "
     "that is idle past a minute, else it is refused. 0: no MCP endpoint (404)."},
    {"mcp-max-client-sessions", "N", "SBXD_MCP_MAX_CLIENT_SESSIONS", NULL, 0, "16", OPT_UINT,
     OFF(mcp_max_client_sessions), 1, 4096,
     "MCP sessions one client address holds at once; one more from it ends that address's "
     "session idle longest (none with a call running or its stream open), else it is "
     "refused with 429. Behind a proxy every session shares the proxy's address."},
    {"mcp-session-idle-s", "S", "SBXD_MCP_SESSION_IDLE_S", NULL, 0, "1800", OPT_UINT,
     OFF(mcp_session_idle_s), 1, 7 * 24 * 3600,
     "An MCP session not used for this long is ended (its id then answers 404)."},
    {"mcp-max-calls", "N", "SBXD_MCP_MAX_CALLS", NULL, 0, "8", OPT_UINT, OFF(mcp_max_calls), 1,
     1024, "Tool calls one MCP session may have running at once; more get a JSON-RPC error."},
    {"allow-origin", "LIST", "SBXD_ALLOW_ORIGIN", "SBXD_MCP_ALLOW_ORIGIN", 0, "", OPT_LIST,
     OFF(allow_origin), 0, sizeof(((struct sbxd_config *)0)->allow_origin),
     "Origins (scheme://host[:port], comma-separated, or *) whose web pages sbxd serves besides "
     "http(s)://localhost, 127.0.0.1 and [::1] at any port: a request with another Origin "
     "header (a page of another site, or one rebound to this address) is refused with 403 on "
     "every route. Requests without Origin (curl, the SDKs) are not affected. Older name: "
     "--mcp-allow-origin, SBXD_MCP_ALLOW_ORIGIN."},
    {"allow-host", "LIST", "SBXD_ALLOW_HOST", NULL, 0, "", OPT_LIST, OFF(allow_host), 0,
     sizeof(((struct sbxd_config *)0)->allow_host),
     "Host names (comma-separated; .example.com: it and every name under it; *: any) that a "
     "request's Host may name besides IP addresses, localhost, names of one label and names "
     "under .localhost, .internal, .svc and .cluster.local. Without a token, a request for "
     "another name is refused with 403 (DNS rebinding); with one, every Host is served."},
    {"public-url", "URL", "SBXD_PUBLIC_URL", NULL, 0, "", OPT_LIST, OFF(public_url), 0,
     sizeof(((struct sbxd_config *)0)->public_url),
     "Where people reach this sbxd from outside (http(s)://host[:port][/prefix], no trailing "
     "slash): MCP's expose_port answers PUBLIC-URL/proxy/PORT/ for a port a command serves. "
     "Empty: it answers the path alone."},
    {"max-watchers", "N", "SBXD_MAX_WATCHERS", NULL, 0, "32", OPT_UINT, OFF(max_watchers), 0, 4096,
     "Watch streams (GET /files/DIR?watch=true) open at once; more are refused with 429. MCP "
     "resource subscriptions have as many of their own: the directories they are in, over "
     "every session (8 a session at most)."},
    {"watch-max-dirs", "N", "SBXD_WATCH_MAX_DIRS", NULL, 0, "8192", OPT_UINT, OFF(watch_max_dirs),
     1, 1000000,
     "Directories one recursive watch follows at most (each an inotify watch of the command "
     "user's: fs.inotify.max_user_watches bounds them all)."},
    {"stdin-timeout-ms", "MS", "SBXD_STDIN_TIMEOUT_MS", NULL, 0, "30000", OPT_UINT,
     OFF(stdin_timeout_ms), 100, 3600000,
     "How long a stdin write waits for the process to read it; then 409."},
    {"metadata-prefix", "PREFIX", "SBXD_METADATA_PREFIX", NULL, 0, "SANDBOX_", OPT_LIST,
     OFF(metadata_prefix), 0, 0,
     "GET /v1/metadata serves sbxd's environment variables whose names begin with this, "
     "read once at start; never a name containing TOKEN, SECRET, PASSWORD, PASSWD, CRED, KEY, "
     "AUTH, BEARER, PRIVATE, CERT or PWD, nor a value with a URL that names a user "
     "(scheme://user:password@host)."},
    {"pass-env", "LIST", "SBXD_PASS_ENV", NULL, 0, SBXD_PASS_ENV_DEFAULT, OPT_LIST, OFF(pass_env),
     0, sizeof(((struct sbxd_config *)0)->pass_env),
     "What commands inherit of sbxd's environment, read once at start (comma-separated): NAME "
     "passes that variable, even one that looks like a credential; PREFIX* (* alone: all) "
     "every variable whose name begins with PREFIX, but never one whose name contains "
     "TOKEN, SECRET, PASSWORD, PASSWD, CRED, KEY, AUTH, BEARER, PRIVATE, CERT or PWD, nor a "
     "value with a URL that names a user, nor HOME. No SBXD_ variable ever passes. A "
     "leading + adds to the default list (+MY_API_KEY). PATH and LANG not passed are "
     "sbxd's built-in ones; HOME is the workspace unless named; empty: just those three. "
     "A request's env is merged over it."},
    {"shutdown-grace-ms", "MS", "SBXD_SHUTDOWN_GRACE_MS", NULL, 0, "10000", OPT_UINT,
     OFF(shutdown_grace_ms), 0, SBXD_TIMEOUT_HARD_MAX_MS,
     "After SIGTERM, how long running commands and background processes may finish before "
     "they are killed."},
    {"user", "UID:GID", "SBXD_USER", NULL, 0, "1000:1000", OPT_USER, OFF(user), 0, 0,
     "When sbxd runs as root, commands run as this user and group, with no supplementary "
     "groups. Ignored otherwise (commands keep sbxd's own ids). The user is sbxd's alone: a "
     "reset kills every process that runs as it and removes its files from the directories "
     "anybody may write and its IPC objects."},
    {"isolation", "MODE", "SBXD_ISOLATION", NULL, 0, "auto", OPT_CHOICE, OFF(isolation), 0, 0,
     "How a command's whole process tree is contained and killed: "
     "{auto|cgroup|pidns|uid|pgid}. cgroup: a cgroup v2 leaf per command (needs a delegated "
     "cgroup). pidns: a PID namespace per command. uid: a uid of its own per running command "
     "(from --uid-range) and kill(-1) as that uid. pgid: the process group, which setsid "
     "escapes. auto takes the first of these that works here."},
    {"uid-range", "FIRST:COUNT", "SBXD_UID_RANGE", NULL, 0, "100000:1024", OPT_RANGE,
     OFF(uid_range), 0, 0,
     "uid isolation: the uids commands run as, one per running command, but the last, which is "
     "sbxd's kill helper's (so COUNT-1 commands at once). They are sbxd's alone: processes "
     "left in them by a killed sbxd are killed at start. Under every backend the last is the "
     "real uid of the helper that kills the command user's processes at a reset."},
    {"require-isolation", "LIST", "SBXD_REQUIRE_ISOLATION", NULL, 0, "", OPT_LIST,
     OFF(require_isolation), 0, 0,
     "Refuse to start unless each of these is in force, and answer /healthz with 503 "
     "\"degraded\" should one fail later: cgroup, memory, pids, cpu, seccomp, tree_kill (any "
     "of cgroup, pidns, uid), pidns, uid, capabilities, non_root, ipc (an IPC namespace per "
     "command) (comma-separated)."},
    {"degraded-ok", "", "SBXD_DEGRADED_OK", NULL, 0, "false", OPT_BOOL, OFF(degraded_ok), 0, 0,
     "When sbxd (as root) cannot run commands as --user (no CAP_SETUID/CAP_SETGID), or "
     "--token-file is readable by the commands, start anyway: health checks answer 503 "
     "\"degraded\" with the reason and commands are refused with 503. Without it sbxd refuses "
     "to start then."},
    {"memory-max", "SIZE", "SBXD_MEMORY_MAX", NULL, 0, "0", OPT_SIZE, OFF(memory_max), 0,
     1ULL << 50,
     "Memory of a command (cgroup memory.max; RLIMIT_AS without cgroups): the default and the "
     "most limits.memory_bytes may ask. 0: no limit."},
    {"pids-max", "N", "SBXD_PIDS_MAX", NULL, 0, "1024", OPT_UINT, OFF(pids_max), 0, 4194304,
     "Processes of a command (cgroup pids.max): the default and the most limits.pids may ask. "
     "0: no limit."},
    {"token-file", "PATH", "SBXD_TOKEN_FILE", NULL, 0, "", OPT_FILE, OFF(token_file), 0, 0,
     "Require 'Authorization: Bearer TOKEN' on every route but GET /healthz, /v1/health and "
     "GET / (401 without it), the token read once from this file (a trailing newline is "
     "dropped); sbxd refuses to start when the commands' user could read it (mode 0400, "
     "owned by root). Or set SBXD_TOKEN: it is read once and wiped from sbxd's environment. "
     "Not both. Empty: no token is required."},
    {"max-connections", "N", "SBXD_MAX_CONNECTIONS", NULL, 0, "256", OPT_UINT, OFF(max_connections),
     1, 65536,
     "Open connections at once. Beyond it, the connection that has waited longest for a "
     "request is closed to make room; when every one is busy, requests get 503 and are "
     "closed (the health checks are still answered), and past 64 more, connections are "
     "closed at accept. The gRPC listener has as many: beyond, the oldest that carried no "
     "call but health calls without the token makes room, else the new one is closed."},
    {"max-client-connections", "N", "SBXD_MAX_CLIENT_CONNECTIONS", NULL, 0, "128", OPT_UINT,
     OFF(max_client_connections), 1, 65536,
     "Open connections from one client address at once. Beyond it, that address's connection "
     "that has waited longest for a request is closed to make room; when every one is busy, "
     "429 and closed. Behind a proxy every request shares the proxy's address."},
    {"idle-timeout-ms", "MS", "SBXD_IDLE_TIMEOUT_MS", NULL, 0, "60000", OPT_UINT,
     OFF(idle_timeout_ms), 1000, 3600000,
     "A connection that sends nothing for this long while sbxd waits for it is closed "
     "(rounded up to whole seconds). A streamed answer or a running command is not idle."},
    {"request-timeout-ms", "MS", "SBXD_REQUEST_TIMEOUT_MS", NULL, 0, "10000", OPT_UINT,
     OFF(request_timeout_ms), 100, 3600000,
     "A request's head, and a body sbxd reads whole (JSON, stdin writes), must arrive within "
     "this of the connection opening "
     "(on a kept-alive connection: of the idle timeout's end); else 408 and closed. Stops "
     "clients that trickle bytes to hold connections (slowloris). File uploads' bodies have "
     "the idle timeout only."},
    {"max-header-bytes", "SIZE", "SBXD_MAX_HEADER_BYTES", NULL, 0, "32KiB", OPT_SIZE,
     OFF(max_header_bytes), 1024, 96 * 1024,
     "Largest request head (request line and headers); 431 beyond."},
    {"connection-memory", "SIZE", "SBXD_CONNECTION_MEMORY", NULL, 0, "256KiB", OPT_SIZE,
     OFF(connection_memory), 256 * 1024, 16 * 1024 * 1024,
     "The HTTP library's memory per connection: a request's head, and the read buffer (half "
     "of it) a small body arrives through; a body of 512 KiB or more arrives in reads of up "
     "to 1 MiB through one of four buffers shared by all connections. Resident as far as "
     "reads fill it (under gVisor all of it) while the connection is busy, given back after "
     "500 ms idle."},
    {"log-format", "FMT", "SBXD_LOG_FORMAT", NULL, 0, "json", OPT_LOGFMT, OFF(log_format), 0, 0,
     "Log lines on stderr: json (one object per line) or text."},
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const char *env_lookup(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* Print text word-wrapped to the help's right-hand column. */
static void print_wrapped(FILE *out, const char *left, const char *text)
{
    enum { INDENT = 29, WIDTH = 96 };
    fprintf(out, "  %-26s ", left);
    int col = INDENT;
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col > INDENT && col + 1 + (int)word > WIDTH) {
            fprintf(out, "\n%*s", INDENT, "");
            col = INDENT;
        } else if (col > INDENT) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)word, text);
        col += (int)word;
        text += word;
        while (*text == ' ')
            text++;
    }
    fputc('\n', out);
}

/* A long comma-separated default, wrapped to the help's right-hand column. */
static void print_list(FILE *out, const char *list)
{
    enum { INDENT = 29, WIDTH = 96 };
    fprintf(out, "%*s", INDENT, "");
    int col = INDENT;
    while (*list) {
        size_t item = strcspn(list, ",");
        item += list[item] == ',';
        if (col > INDENT && col + (int)item > WIDTH) {
            fprintf(out, "\n%*s", INDENT, "");
            col = INDENT;
        }
        fprintf(out, "%.*s", (int)item, list);
        col += (int)item;
        list += item;
    }
    fputc('\n', out);
}

static void print_usage(FILE *out)
{
    fprintf(out, "Usage: sbxd [OPTION]...\n"
                 "Run commands for AI agents over HTTP, each contained, with its output, exit "
                 "status and\nresource use reported honestly.\n\n"
                 "Each option can also be set by the environment variable shown; a flag wins.\n"
                 "SIZE takes a suffix: K/KiB, M/MiB, G/GiB (1024s) or KB, MB, GB (1000s).\n\n");
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt *o = &opts[i];
        char left[64];
        snprintf(left, sizeof(left), "--%s %s", o->flag, o->metavar);
        print_wrapped(out, left, o->help);
        fprintf(out, "  %-26s env %s%s%s, default %s\n", "", o->env, o->alt_env ? " or " : "",
                o->alt_env ? o->alt_env : "",
                strlen(o->def) > 60 ? "(below)"
                : *o->def           ? o->def
                                    : "none");
        if (strlen(o->def) > 60) /* a list: wrapped at its commas */
            print_list(out, o->def);
    }
    fprintf(out, "  %-26s %s\n", "--help", "Show this help and exit.");
    fprintf(out, "  %-26s %s\n", "--version", "Show the version and exit.");
    fprintf(out,
            "\nEndpoints: GET /healthz, GET /, POST /execute, "
            "GET/HEAD/PUT/DELETE /files/PATH,\n"
            "POST/GET /processes, GET/DELETE /processes/ID, GET /processes/ID/output,\n"
            "POST /processes/ID/{stdin,signal,resize}, POST /reset, GET /usage,\n"
            "GET/HEAD/PUT/DELETE /v1/files/PATH, GET /v1/health, GET /v1/metadata, GET /metrics;\n"
            "legacy: POST /upload, GET /download/PATH, GET /list/PATH, GET /exists/PATH.\n"
            "Every --listen address serves all of them alike.\n"
            "gRPC (--grpc-listen): process.v1.ProcessService/{Execute,Start,WriteStdin,\n"
            "SendSignal,ResizeTTY}, grpc.health.v1.Health/{Check,Watch}.\n"
            "See docs/api.md.\n"
            "Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 1 on a start-up "
            "failure,\n2 on a bad option.\n");
}

/* OPT_CHOICE: one of the words between braces in the help text. */
/* val, a decimal number of seconds (as Python's float() takes it, without inf/nan), as
 * whole units of 1/scale s rounded up, in buf; -1 for anything else or not above 0. */
static int seconds_to_ms(const char *val, uint64_t scale, char *buf, size_t len)
{
    while (*val == ' ' || *val == '\t')
        val++;
    if (!*val || strspn(val, "0123456789.eE+- \t") != strlen(val))
        return -1;
    char *end;
    double secs = strtod(val, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == val || *end || !(secs > 0) || secs > 1e12)
        return -1;
    double units = ceil(secs * (double)scale);
    snprintf(buf, len, "%.0f", units < 1 ? 1.0 : units);
    return 0;
}

static int apply_choice(const struct opt *o, char *field, const char *val, const char *src,
                        struct sbxd_err *err)
{
    const char *open = strchr(o->help, '{'), *close = open ? strchr(open, '}') : NULL;
    for (const char *w = open ? open + 1 : NULL; w && w < close;) {
        size_t wl = strcspn(w, "|}");
        if (strlen(val) == wl && strncmp(val, w, wl) == 0) {
            snprintf(field, 16, "%.15s", val); /* the choices are shorter */
            return 0;
        }
        w += wl + 1;
    }
    sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not one of: %.*s", o->flag, val, src,
              open && close ? (int)(close - open - 1) : 0, open ? open + 1 : "");
    return -1;
}

/* OPT_USER (UID:GID) and OPT_RANGE (FIRST:COUNT of uids). */
static int apply_pair(struct sbxd_config *cfg, const struct opt *o, char *field, const char *val,
                      const char *src, struct sbxd_err *err)
{
    const char *colon = strchr(val, ':');
    char num[32];
    uint64_t a, b;
    if (!colon || (size_t)(colon - val) >= sizeof(num) || strlen(val) >= 32)
        goto bad_pair;
    memcpy(num, val, (size_t)(colon - val));
    num[colon - val] = '\0';
    /* 2^32-1 is (uid_t)-1, "no change" to the kernel: never a real user. */
    if (config_parse_uint(num, &a) < 0 || config_parse_uint(colon + 1, &b) < 0 ||
        a >= 0xFFFFFFFFULL || b >= 0xFFFFFFFFULL)
        goto bad_pair;
    if (o->type == OPT_USER) {
        cfg->user_uid = (uid_t)a;
        cfg->user_gid = (gid_t)b;
    } else {
        if (a == 0 || b == 0 || b > 65536 || a + b > 0xFFFFFFFFULL)
            goto bad_pair;
        cfg->uid_first = (uid_t)a;
        cfg->uid_count = (unsigned)b;
    }
    snprintf(field, 32, "%s", val);
    return 0;
bad_pair:
    if (o->type == OPT_USER)
        sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not UID:GID (numbers, e.g. 1000:1000)",
                  o->flag, val, src);
    else
        sbxd_fail(err, SBXD_E_INVALID, 0,
                  "--%s: '%s'%s is not FIRST:COUNT (a first uid above 0 and 1 to 65536 uids, "
                  "e.g. 100000:1024)",
                  o->flag, val, src);
    return -1;
}

/* --listen: one address or a comma list of them (blanks around each ignored). */
static int apply_listen(struct sbxd_config *cfg, const struct opt *o, const char *val,
                        const char *src, struct sbxd_err *err)
{
    if (strlen(val) >= sizeof(cfg->listen)) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%.64s...'%s is too long", o->flag, val, src);
        return -1;
    }
    cfg->nlisten = 0;
    for (const char *p = val;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[sizeof(cfg->listen)];
        while (n && *p == ' ') {
            p++;
            n--;
        }
        while (n && p[n - 1] == ' ')
            n--;
        memcpy(item, p, n);
        item[n] = '\0';
        if (cfg->nlisten == SBXD_LISTEN_MAX) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s: at most %d addresses", o->flag, val,
                      src, SBXD_LISTEN_MAX);
            return -1;
        }
        unsigned i = cfg->nlisten;
        if (config_parse_listen(item, &cfg->listen_addr[i], &cfg->listen_addr_len[i]) < 0) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "--%s: '%s'%s is not an address: use HOST:PORT, [IPV6]:PORT or :PORT (or a "
                      "comma list of them)",
                      o->flag, item, src);
            return -1;
        }
        cfg->nlisten++;
        if (!end)
            break;
        p = end + 1;
    }
    snprintf(cfg->listen, sizeof(cfg->listen), "%s", val);
    return 0;
}

/* A comma list or a word, within its field; --public-url an http(s) URL or nothing. */
static int apply_list(struct sbxd_config *cfg, const struct opt *o, char *field, const char *val,
                      const char *src, struct sbxd_err *err)
{
    size_t size = o->max ? (size_t)o->max : 128; /* the field's size */
    if (strlen(val) >= size) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: value too long (%zu bytes at most)", o->flag,
                  size - 1);
        return -1;
    }
    /* A URL people are handed (MCP's expose_port): a web address or nothing. */
    if (field == (char *)cfg->public_url && *val && strncmp(val, "http://", 7) != 0 &&
        strncmp(val, "https://", 8) != 0) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not an http:// or https:// URL", o->flag,
                  val, src);
        return -1;
    }
    snprintf(field, size, "%s", val);
    return 0;
}

/* Apply one textual value to its field; on error write one line naming the option. */
static int apply(struct sbxd_config *cfg, const struct opt *o, const char *val, const char *src,
                 uint64_t scale, struct sbxd_err *err)
{
    char *field = (char *)cfg + o->off;
    uint64_t v = 0;
    switch (o->type) {
    case OPT_LISTEN:
        return apply_listen(cfg, o, val, src, err);
    case OPT_GRPC_LISTEN:
        if (strcmp(val, "off") == 0) {
            cfg->grpc_off = true;
        } else if (strlen(val) >= sizeof(cfg->grpc_listen) ||
                   config_parse_listen(val, &cfg->grpc_addr, &cfg->grpc_addr_len) < 0) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "--%s: '%s'%s is not an address: use HOST:PORT, [IPV6]:PORT, :PORT or off",
                      o->flag, val, src);
            return -1;
        } else {
            cfg->grpc_off = false;
        }
        snprintf(cfg->grpc_listen, sizeof(cfg->grpc_listen), "%s", val);
        return 0;
    case OPT_FILE:
    case OPT_PATH:
        if ((o->type == OPT_PATH && !*val) || strlen(val) >= PATH_MAX) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not a usable path", o->flag, val,
                      src);
            return -1;
        }
        snprintf(field, PATH_MAX, "%s", val);
        return 0;
    case OPT_LOGFMT:
        if (strcmp(val, "json") == 0)
            cfg->log_format = LOG_FORMAT_JSON;
        else if (strcmp(val, "text") == 0)
            cfg->log_format = LOG_FORMAT_TEXT;
        else {
            sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not one of: json, text", o->flag,
                      val, src);
            return -1;
        }
        return 0;
    case OPT_CHOICE:
        return apply_choice(o, field, val, src, err);
    case OPT_LIST:
        return apply_list(cfg, o, field, val, src, err);
    case OPT_USER:
    case OPT_RANGE:
        return apply_pair(cfg, o, field, val, src, err);
    case OPT_BOOL:
        if (strcmp(val, "true") != 0 && strcmp(val, "1") != 0 && strcmp(val, "false") != 0 &&
            strcmp(val, "0") != 0) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not one of: true, false, 1, 0",
                      o->flag, val, src);
            return -1;
        }
        *(bool *)field = strcmp(val, "true") == 0 || strcmp(val, "1") == 0;
        return 0;
    case OPT_UINT:
        if (config_parse_uint(val, &v) < 0) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is not a whole number", o->flag, val,
                      src);
            return -1;
        }
        break;
    case OPT_SIZE:
        if (config_parse_size(val, &v) < 0) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "--%s: '%s'%s is not a size (e.g. 1048576, 512KiB, 1MiB)", o->flag, val, src);
            return -1;
        }
        break;
    }
    if (scale > 1 && v > UINT64_MAX / scale)
        v = UINT64_MAX;
    else if (scale > 1)
        v *= scale;
    if (v < o->min || v > o->max) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: '%s'%s is out of range (%llu to %llu)", o->flag,
                  val, src, (unsigned long long)o->min / (scale ? scale : 1),
                  (unsigned long long)o->max / (scale ? scale : 1));
        return -1;
    }
    memcpy(field, &v, sizeof(v));
    return 0;
}

/* Older names of options, still taken. */
static const struct {
    const char *old, *now;
} aliases[] = {{"mcp-allow-origin", "allow-origin"}};

static const struct opt *find_opt(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strlen(aliases[i].old) == n && strncmp(aliases[i].old, name, n) == 0) {
            name = aliases[i].now;
            n = strlen(name);
        }
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].flag) == n && strncmp(opts[i].flag, name, n) == 0)
            return &opts[i];
    return NULL;
}

/* The command line's options into flag_val (by option; --listen given more than once joined
 * in listen_list, of sizeof(cfg->listen)): CONFIG_RUN, or the outcome of --help, --version or a
 * mistake (err). */
static enum config_outcome read_flags(int argc, char *const *argv, FILE *out, const char **flag_val,
                                      char *listen_list, size_t listen_size, struct sbxd_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage(out);
            return CONFIG_EXIT_0;
        }
        if (strcmp(a, "--version") == 0) {
            fprintf(out, "sbxd %s\n", SBXD_VERSION);
            return CONFIG_EXIT_0;
        }
        if (strncmp(a, "--", 2) != 0) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "unexpected argument '%s' (see --help)", a);
            return CONFIG_EXIT_2;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = find_opt(name, nlen);
        if (!o) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "unknown option '--%.*s' (see --help)", (int)nlen,
                      name);
            return CONFIG_EXIT_2;
        }
        const char *val = eq ? eq + 1 : o->type == OPT_BOOL ? "true" : NULL;
        if (!val) {
            if (i + 1 >= argc) {
                sbxd_fail(err, SBXD_E_INVALID, 0, "--%s needs a value (%s)", o->flag, o->metavar);
                return CONFIG_EXIT_2;
            }
            val = argv[++i];
        }
        if (o->type == OPT_LISTEN && flag_val[o - opts]) {
            size_t have = strlen(flag_val[o - opts]);
            if (have + 1 + strlen(val) >= listen_size) {
                sbxd_fail(err, SBXD_E_INVALID, 0, "--%s: too many addresses (at most %d)", o->flag,
                          SBXD_LISTEN_MAX);
                return CONFIG_EXIT_2;
            }
            if (flag_val[o - opts] != listen_list)
                memcpy(listen_list, flag_val[o - opts], have + 1);
            listen_list[have] = ',';
            memcpy(listen_list + have + 1, val, strlen(val) + 1);
            val = listen_list;
        }
        flag_val[o - opts] = val;
    }
    return CONFIG_RUN;
}

/* An option's value and where it came from: its flag, its variable or its compatibility
 * variable (src names it), or NULL (the default applies). */
struct opt_value {
    const char *val, *src;
    uint64_t scale;
    char srcbuf[96];
    char scaled[32];
};

static void opt_value_of(struct sbxd_config *cfg, const struct opt *o, const char *flag,
                         char *const *envp, struct opt_value *v)
{
    v->val = flag;
    v->src = "";
    v->scale = 1;
    if (!v->val && (v->val = env_lookup(envp, o->env))) {
        snprintf(v->srcbuf, sizeof(v->srcbuf), " (from %s)", o->env);
        v->src = v->srcbuf;
    }
    if (!v->val && o->alt_env && (v->val = env_lookup(envp, o->alt_env))) {
        snprintf(v->srcbuf, sizeof(v->srcbuf), " (from %s)", o->alt_env);
        v->src = v->srcbuf;
        v->scale = o->alt_env_scale ? o->alt_env_scale : 1;
        if (v->scale > 1) {
            /* A compatibility variable in seconds reads as the python runtime reads it:
             * a number, fractions too ("0.5"); anything else, or not above 0, leaves the
             * default (and a warning at start), rather than stopping the pod. */
            if (seconds_to_ms(v->val, v->scale, v->scaled, sizeof(v->scaled)) == 0) {
                v->val = v->scaled;
                v->scale = 1;
            } else {
                snprintf(cfg->env_ignored, sizeof(cfg->env_ignored), "%s", o->alt_env);
                v->val = NULL;
                v->scale = 1;
                v->src = "";
            }
        }
    }
}

/* The default timeout above the maximum: a maximum below the default timeout (sbxd
 * --max-timeout-ms 60000) lowers the default to it; only two values given that contradict
 * each other are an error; a default timeout given alone raises the maximum. */
static enum config_outcome settle_timeouts(struct sbxd_config *cfg, bool max_timeout_given,
                                           bool timeout_given, struct sbxd_err *err)
{
    if (cfg->timeout_ms <= cfg->max_timeout_ms)
        return CONFIG_RUN;
    if (max_timeout_given && !timeout_given) {
        cfg->timeout_ms = cfg->max_timeout_ms;
        return CONFIG_RUN;
    }
    if (max_timeout_given) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "--timeout-ms: %llu is above --max-timeout-ms (%llu)",
                  (unsigned long long)cfg->timeout_ms, (unsigned long long)cfg->max_timeout_ms);
        return CONFIG_EXIT_2;
    }
    cfg->max_timeout_ms = cfg->timeout_ms;
    return CONFIG_RUN;
}

enum config_outcome config_parse(struct sbxd_config *cfg, int argc, char *const *argv,
                                 char *const *envp, FILE *out, struct sbxd_err *err)
{
    const char *flag_val[NOPTS] = {0};
    char listen_list[sizeof(cfg->listen)]; /* --listen given more than once, joined */
    memset(cfg, 0, sizeof(*cfg));
    enum config_outcome r =
        read_flags(argc, argv, out, flag_val, listen_list, sizeof(listen_list), err);
    if (r != CONFIG_RUN)
        return r;

    bool max_timeout_given = false, timeout_given = false;
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt *o = &opts[i];
        struct opt_value v;
        opt_value_of(cfg, o, flag_val[i], envp, &v);
        if (v.val && o->off == OFF(max_timeout_ms))
            max_timeout_given = true;
        if (v.val && o->off == OFF(timeout_ms))
            timeout_given = true;
        if (apply(cfg, o, v.val ? v.val : o->def, v.src, v.scale, err) < 0)
            return CONFIG_EXIT_2;
    }
    return settle_timeouts(cfg, max_timeout_given, timeout_given, err);
}
