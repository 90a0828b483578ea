/*
 * sbx.h - what the files of sbx, the command-line client of sbxd, share.
 *
 *   sbx.c        main: global options, the command table, --help and --version
 *   http.c       libcurl plumbing: URLs, one request, its errors, NDJSON streams
 *   progress.c   the progress bar of put and get
 *   util.c       option parsing helpers, writing bytes, escaping, signals, base64
 *   cmd_exec.c   exec, run
 *   cmd_files.c  put, get, ls, rm, mkdir
 *   cmd_proc.c   ps, logs, kill, health, reset, usage
 *   cmd_code.c   code, contexts
 *   cmd_tty.c    ports, attach, shell
 *
 * Commands return the process's exit status (SBX_OK, SBX_FAIL, SBX_USAGE, or a command's own
 * for exec and run) and print their own one-line errors; only main() exits.
 */
#ifndef SBX_H
#define SBX_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* sbx's own failures are 125, as docker run and env have it: exec and run exit with the
 * command's own status (1 is often a command's), so sbx's must be one no command commonly
 * uses. */
#define SBX_OK        0   /* success */
#define SBX_UNHEALTHY 1   /* health: sbxd answered, and is not ok (draining, degraded) */
#define SBX_FAIL      125 /* sbxd refused, the operation failed, or sbxd is unreachable */
#define SBX_USAGE     125 /* the command line is wrong */

#define SBX_DEFAULT_URL "http://127.0.0.1:8888"

/* Transfers at least this big get a progress bar (when stderr is a terminal). */
#define SBX_PROGRESS_MIN_BYTES (1024 * 1024)

/* The options that come before the command: the parsed command line, nothing else. */
struct sbx {
    char url[2048]; /* sbxd's base URL, without a trailing '/' */
};

/* A command of the table in sbx.c. */
struct sbx_cmd {
    const char *name;
    const char *synopsis; /* the arguments, for the overview */
    const char *summary;  /* one line, for the overview */
    const char *help;     /* the whole `sbx NAME --help` text after its usage line */
    int (*run)(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
};

/* cmd_*.c */
int cmd_exec(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_run(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_put(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_get(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_ls(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_rm(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_mkdir(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_grep(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_find(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_edit(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_ps(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_logs(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_kill(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_health(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_reset(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_usage(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_code(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_contexts(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_ports(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_attach(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);
int cmd_shell(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv);

/* ---- util.c ---- */

/* "sbx: CMD: message" on stderr (CMD omitted when NULL); return SBX_FAIL. */
__attribute__((format(printf, 2, 3))) int fail(const char *cmd, const char *fmt, ...);
/* The same with "Try 'sbx CMD --help'." below; return SBX_USAGE. */
__attribute__((format(printf, 2, 3))) int usage_error(const char *cmd, const char *fmt, ...);
/* The usage line and help of cmd on stdout; return SBX_OK. */
int cmd_print_help(const struct sbx_cmd *cmd);

/*
 * The next option of a command (getopt_long, stopping at the first operand so that a
 * command's own arguments are never taken for sbx's). Returns the option's value, -1 at the
 * end, or '?' after printing a usage error for an unknown option or a missing argument.
 * "-h"/"--help" return 'h'. Reset with opt_reset() before a command's first call.
 */
void opt_reset(void);
int opt_next(const char *cmd, int argc, char **argv, const char *shorts,
             const struct option *longs);
/* The options of a command that takes --json and nothing else: -1 to go on (*json set);
 * else the exit status (--help printed: 0; a usage error: SBX_USAGE). */
int opt_json_only(const struct sbx_cmd *cmd, int argc, char **argv, bool *json);

/* All of sbx's stdin as text into b: at most max bytes (else too_big is the error) and no NUL
 * (else has_nul); SBX_OK or an exit status, after reporting. */
struct buf;
int read_stdin_all(const char *cmd, struct buf *b, size_t max, const char *too_big,
                   const char *has_nul);

/* Write all n bytes to fd, retrying after EINTR and short writes; 0 or -1 (errno set). */
int write_all(int fd, const void *p, size_t n);

/* Print s to f with control characters escaped (\n, \t, \xNN) so that a name or a server's
 * message stays on its line and cannot drive the terminal. */
void put_escaped(FILE *f, const char *s);

/* Decode base64 text into a new buffer (caller frees); NULL on malformed input. */
unsigned char *b64_decode(const char *in, size_t *out_len);

/* A positive duration: N (milliseconds), Nms, Ns or Nm. -1 when malformed or out of range. */
long parse_duration_ms(const char *s);

/* Signal names sbxd accepts: SIGNAME for a signal number, "" when sbxd does not send it. */
const char *signal_name(int sig);
/* The sbxd name ("SIGTERM") for "TERM", "sigterm", "SIGTERM" or "15"; NULL when unknown or
 * not one sbxd sends. */
const char *signal_parse(const char *s);
/* A printable name for any signal number ("SIGSEGV", or "signal 40"). */
const char *signal_describe(int sig, char *buf, size_t len);

/* ---- http.c ---- */

/* A growing byte buffer, always NUL-terminated. */
struct buf {
    char *p;
    size_t len, cap;
};
int buf_append(struct buf *b, const void *p, size_t n);
void buf_free(struct buf *b);

/* Where a successful (2xx) answer's body goes as it arrives: return 0, or -1 to stop the
 * transfer after filling err (left empty: the sink reported it itself). Without a sink the
 * body is kept in resp.body. */
typedef int (*body_sink)(const char *p, size_t n, void *ud, char *err, size_t errlen);

struct request {
    const char *method;   /* GET, PUT, POST, DELETE, HEAD */
    const char *path;     /* already encoded, starting with '/' (url_path builds one) */
    const char *accept;   /* an Accept header, or NULL */
    const char *json;     /* a JSON body (Content-Type: application/json), or NULL */
    const char *if_match; /* an If-Match header's value, or NULL */
    bool upload;          /* PUT streamed from upload_fd (else a PUT has no body) */
    int upload_fd;
    int64_t upload_size; /* its size, or -1 when unknown (sent chunked) */
    body_sink sink;      /* where a 2xx body goes; NULL: into resp.body */
    void *sink_ud;
    const char *sink_type; /* the sink only takes a body of this Content-Type (NULL: any) */
    bool progress;         /* a progress bar for a big transfer, when stderr is a terminal */
    const char *progress_label;
};

struct response {
    long status;
    struct buf body; /* an error's body, or a 2xx body without a sink */
    cJSON *json;     /* body parsed, when it is JSON */
    char content_type[128];
    int64_t content_length; /* -1 when unknown */
};

/* The request's path: prefix followed by rel with every byte that is not unreserved or '/'
 * percent-encoded, and leading slashes of rel dropped (paths are relative to the workspace).
 * NULL when out of memory. Caller frees. */
char *url_path(const char *prefix, const char *rel);

/*
 * Perform one request against s->url. Returns 0 when an HTTP answer came (whatever its
 * status: check resp->status), or -1 after printing why there is none: sbxd unreachable
 * ("sbx: cannot reach sbxd at URL: ..."), the connection lost, or a sink's error.
 * Free resp with response_free in every case.
 */
int http_perform(const struct sbx *s, const char *cmd, const struct request *req,
                 struct response *resp);
void response_free(struct response *resp);

/* "Authorization: Bearer TOKEN" from SBX_TOKEN or SBX_TOKEN_FILE, or "" when neither. */
const char *sbx_auth_header(void);

/* Report an HTTP error answer as "sbx: CMD: <message> (HTTP <status>)"; returns SBX_FAIL. */
int http_report(const char *cmd, const struct response *resp);

/* Whether the answer is JSON by its Content-Type. */
bool response_is_json(const struct response *resp);

/*
 * NDJSON: a sink that cuts the body into lines and hands each parsed event to on_event,
 * which returns 0 to go on, 1 when the stream is complete, or -1 to stop with an error (after
 * filling err).
 */
struct ndjson {
    struct buf line;
    int (*on_event)(const cJSON *ev, void *ud, char *err, size_t errlen);
    void *ud;
    bool done; /* on_event said the stream is complete */
};
int ndjson_sink(const char *p, size_t n, void *ud, char *err, size_t errlen);
/* After the transfer: the last line if it had no newline; frees the line buffer. 0 or -1. */
int ndjson_finish(struct ndjson *nd, char *err, size_t errlen);

/* ---- progress.c ---- */

struct progress {
    const char *label;
    bool enabled; /* stderr is a terminal and the caller wants it */
    bool shown;   /* something is on the line */
    double last_ms;
    int64_t last_done;
    double start_ms;
};
void progress_init(struct progress *p, const char *label, bool enabled);
/* Redraw with done of total bytes (total 0: unknown); at most ten times a second. */
void progress_update(struct progress *p, int64_t done, int64_t total);
/* Clear the line, if something was drawn. */
void progress_end(struct progress *p);

#endif
