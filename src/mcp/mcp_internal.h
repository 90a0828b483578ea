/*
 * mcp_internal.h - what the files of src/mcp share: the session table (session.c), the
 * dispatch (dispatch.c), the event stream (events.c), the tools (tools*.c) and the resources
 * (resources.c). Nothing outside src/mcp includes it.
 */
#ifndef SBXD_MCP_INTERNAL_H
#define SBXD_MCP_INTERNAL_H

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sbxd/job.h"
#include "sbxd/jsonw.h"
#include "sbxd/mcp.h"
#include "sbxd/run.h"

/* Resources one session may subscribe to (the directories they are in are bounded by
 * SBXD_MCP_SESSION_WATCH_DIRS). */
#define MCP_MAX_SUBS 64
/* Entries list_files describes at most, and how deep resources/list and list_files go. */
#define MCP_LIST_MAX       1000
#define MCP_LIST_DEPTH_MAX 10

/* A tool call under way: notifications/cancelled names it by its request id. */
struct mcp_call {
    struct mcp_call *next;
    char id[96];     /* the request id as JSON text */
    struct run *run; /* its command while one runs (the session lock) */
    bool cancelled;  /* atomic */
};

struct mcp_session {
    struct mcp_session *next;
    char id[33];
    char version[16];
    char addr[INET6_ADDRSTRLEN]; /* the client's address, without its port */
    unsigned refs;
    bool ended;
    bool stream; /* an event stream is open */
    int64_t last_ns;
    unsigned calls;
    struct mcp_call *inflight;
    char *subs[MCP_MAX_SUBS]; /* workspace paths subscribed to */
    unsigned nsubs;
    unsigned ndirs;    /* the directories they are in: watches reserved in the MCP pool */
    uint64_t subs_gen; /* bumped at each change */
};

/* The lock of every session and call. */
extern pthread_mutex_t mcp_lock;

/* ---- session.c ---- */

/* Why mcp_session_new made none. */
enum session_refusal { SESSION_MADE, SESSION_FULL, SESSION_CLIENT_FULL, SESSION_NO_MEMORY };

struct mcp_session *mcp_session_new(const struct mcp_host *h, const char *version, const char *addr,
                                    enum session_refusal *why);
/* The session of id, held (mcp_session_put), or NULL. */
struct mcp_session *mcp_session_get(const struct mcp_host *h, const char *id);
/* Hold s while a stream uses it, and give it back. */
void mcp_session_hold(struct mcp_session *s);
void mcp_session_put(struct mcp_session *s);
bool mcp_session_ended(struct mcp_session *s);
/* End s: its calls are cancelled. */
void mcp_session_end(struct mcp_session *s);
/* Mark the session's event stream open: false when it was already. */
bool mcp_session_stream(struct mcp_session *s, bool open);

/* A call of request id begins: NULL (errno EBUSY) at --mcp-max-calls. */
struct mcp_call *mcp_call_begin(const struct mcp_host *h, struct mcp_session *s, const cJSON *id);
/* The session's call is over: it leaves the session, and is freed. */
void mcp_call_end(struct mcp_session *s, struct mcp_call *call);
/* Register run as the call's command (NULL: it is over and about to be closed). A call
 * cancelled before has it cancelled at once. */
void mcp_call_run(struct mcp_call *call, struct run *run);
bool mcp_call_cancelled(const struct mcp_call *call);
/* Cancel the call: it is marked, and its command's tree killed. */
void mcp_call_cancel(struct mcp_call *call);
/* notifications/cancelled: the session's call of params.requestId, if under way. */
void mcp_cancel_request(struct mcp_session *s, const cJSON *params);

/* resources/subscribe (on) and unsubscribe: 0, or a JSON-RPC error code with msg. */
int mcp_subscribe(const struct mcp_host *h, struct mcp_session *s, const cJSON *params, bool on,
                  char *msg, size_t msglen);
/* The length of path's directory part ("a/b" of "a/b/c"; 0 for a name at the root). */
size_t mcp_dir_len(const char *path);

/* ---- dispatch.c ---- */

/* The session a request names, held: NULL after sending the error (*st: no session named,
 * none of that id, a version not spoken). */
struct mcp_session *mcp_request_session(const struct mcp_host *h, const struct mcp_request *rq,
                                        struct mcp_sink *k, enum mcp_status *st);

/* ---- the tools (tools.c) ---- */

/* What a tool is given. */
struct mcp_tool_ctx {
    const struct mcp_host *h;
    struct mcp_sink *k; /* where an answer that goes on is deferred to (NULL: on a thread) */
    int client_fd;      /* the client's socket: its hang-up cancels (-1: none) */
    struct mcp_session *s;
    struct mcp_call *call;
    const cJSON *id;       /* the request's id */
    const cJSON *progress; /* params._meta.progressToken, or NULL */
    bool stream_ok;        /* the answer may be a stream (not inside a batch) */
    const char *client;    /* the client's address, for the audit line */
    bool deferred;         /* out: the answer was deferred (the task owns the call) */
};

/* tools/list's result ({"tools":[...]}), JSON text made once (tools_list.c). */
const char *mcp_tools_list(size_t *len);
/* Whether a tool of that name exists. */
bool mcp_tool_exists(const char *name);
/* Whether tool `name` answers with a stream of its own when given a progress token
 * (run_command); the others are run on a thread while the answer tells progress. */
bool mcp_tool_streams(const char *name);
/* Run tool `name` with args (an object): its result object into w (isError for a failure
 * of the tool), 0; or a JSON-RPC error code with msg (nothing written). */
int mcp_tool_call(struct mcp_tool_ctx *x, const char *name, const cJSON *args, struct jsonw *w,
                  char *msg, size_t msglen);
/* Answer a call of a tool that does not stream its own with a stream: progress every second
 * while the tool runs on a thread of its own, then its result. The stream owns the call
 * (x->call) and holds x->s; x->deferred is set. */
void mcp_call_thread(struct mcp_tool_ctx *x, const char *name, const cJSON *args);

/* Messages into a sink. */
void mcp_send_result(struct mcp_sink *k, const cJSON *id, const char *json, size_t len);
void mcp_send_error(struct mcp_sink *k, const cJSON *id, int code, const char *msg);
void mcp_send_progress(struct mcp_sink *k, const cJSON *token, int64_t ms, const char *msg);

/* Results. */
__attribute__((format(printf, 2, 3))) int tool_error(struct jsonw *w, const char *fmt, ...);
/* Open the result: {"content":[ */
void result_begin(struct jsonw *w);
void text_block(struct jsonw *w, const void *text, size_t n);
/* Close content and open structuredContent. */
void result_structured(struct jsonw *w);
void result_end(struct jsonw *w, bool is_error);
/* Text block of a head and two labelled parts (each left out when empty). */
void text_parts(struct jsonw *w, const char *head, size_t hn, const char *label1, const void *p1,
                size_t n1, const char *label2, const void *p2, size_t n2);

/* Arguments: only known ones; false after a tool error. */
bool only_keys(const cJSON *args, const char *const *keys, struct jsonw *w);
/* A whole number argument: def when absent; false after a tool error. */
bool arg_uint(const cJSON *args, const char *key, uint64_t def, uint64_t max, uint64_t *out,
              struct jsonw *w);
bool arg_bool(const cJSON *args, const char *key, bool def, bool *out, struct jsonw *w);
/* args[key] as a workspace path (malloc'd); NULL after a tool error. "" names the root. */
char *arg_path(struct mcp_tool_ctx *x, const cJSON *args, const char *key, bool required,
               struct jsonw *w);
/* A workspace path from a path as a model may write it: relative to the workspace, or
 * absolute within it. NULL with msg. */
char *mcp_norm_path(const struct mcp_host *h, const char *p, char *msg, size_t msglen);
bool mcp_draining(const struct mcp_host *h);
/* The socket whose hang-up ends what the call waits for: the request's, or -1 for a call on a
 * thread of its own (mcp_call_thread), which may outlive its request's connection: the fd's
 * number may be another connection's by then. */
static inline int mcp_call_fd(const struct mcp_tool_ctx *x)
{
    return x->k ? x->client_fd : -1;
}

/* The request fields start_process takes (tools_list.c: its schema lists these). */
extern const char *const mcp_process_keys[];

/* The tools, by concern. */
int tool_run_command(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_start_process(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_process_output(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_send_input(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_kill_process(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_run_code(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_read_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_write_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_edit_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_list_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_delete_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_move_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_stat_file(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_sandbox_usage(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_list_ports(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_expose_port(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_search_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);
int tool_find_files(struct mcp_tool_ctx *x, const cJSON *args, struct jsonw *w);

/* ---- files (tools_files.c), shared with the resources ---- */

/* Whether n bytes read at an offset are text: UTF-8 without NUL. A character cut by the
 * end of a read that stopped short of the file's end is left for the next (*n shrinks). */
bool mcp_is_text(const uint8_t *buf, size_t *n, bool eof);
const char *mcp_mime_of(const char *path, bool text);
/* Read up to max bytes of path from off: the buffer (malloc'd) and what the file is; NULL
 * with err (SBXD_E_NOT_FOUND: no such file). */
uint8_t *mcp_read_span(const struct mcp_host *h, const char *path, uint64_t off, size_t max,
                       size_t *n, struct stat *st, struct sbxd_err *err);

/* ---- resources.c ---- */

/* The one mapping of an error object to a JSON-RPC error, for a request about a resource:
 * err's sentence into msg, and the code (a missing file is -32002, anything else a bad
 * parameter). */
int mcp_err_code(const struct sbxd_err *err, char *msg, size_t msglen);

/* Resources: workspace files as file:// URIs. */
int mcp_resources_list(const struct mcp_host *h, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen);
int mcp_resources_read(const struct mcp_host *h, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen);
/* The workspace path (malloc'd) a file:// URI names, or NULL with msg. */
char *mcp_uri_path(const struct mcp_host *h, const char *uri, char *msg, size_t msglen);
/* The URI of a workspace path, into w as a JSON string. */
void mcp_write_uri(const struct mcp_host *h, struct jsonw *w, const char *path);

#endif
