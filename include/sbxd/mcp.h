/*
 * mcp.h - the Model Context Protocol endpoint (POST, GET and DELETE /mcp, Streamable HTTP):
 * what its HTTP face (route_mcp.c) and its tools (mcp_tools.c) share. Nothing outside
 * src/http includes it.
 *
 * Sessions are made by initialize and named by the Mcp-Session-Id header after it; each
 * keeps its protocol version, the tool calls it has under way (so that a
 * notifications/cancelled from another request reaches the command's tree) and the
 * resources it subscribed to (told on its GET stream). Tools run on the same exec service
 * and file-system core as the REST routes, with the same limits and the same confinement.
 */
#ifndef SBXD_MCP_H
#define SBXD_MCP_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "sbxd/http.h"
#include "sbxd/job.h"
#include "sbxd/jsonw.h"

struct mcp_session;

/* A tool call under way: notifications/cancelled names it by its request id. */
struct mcp_call {
    struct mcp_call *next;
    char id[96];     /* the request id as JSON text */
    struct job *job; /* its command while one runs (the session lock) */
    bool cancelled;  /* atomic */
};

/* What a tool is given. */
struct mcp_tool_ctx {
    struct server *srv;
    struct MHD_Connection *c; /* NULL when the tool runs on a thread of its own */
    int client_fd;            /* the client's socket: its hang-up cancels (-1: none) */
    struct mcp_session *s;
    struct mcp_call *call;
    const cJSON *id;       /* the request's id */
    const cJSON *progress; /* params._meta.progressToken, or NULL */
    bool sse_ok;           /* the client takes text/event-stream (not inside a batch) */
    const char *client;    /* the client's address, for the audit line */
    bool streamed;         /* out: the tool queued a streamed answer itself ... */
    enum MHD_Result ret;   /* ... and this is MHD's result for it */
};

/* Register job as the call's command (NULL: it is over and about to be freed). A call
 * cancelled before has it killed at once. */
void mcp_call_job(struct mcp_tool_ctx *x, struct job *job);
bool mcp_call_cancelled(const struct mcp_tool_ctx *x);
/* Cancel the call: it is marked, and its command's tree killed. */
void mcp_call_cancel(struct mcp_call *call);
/* The session's call is over: it leaves the session (mcp_tools.c's streamed run_command
 * ends it when its stream does). */
void mcp_call_end(struct mcp_session *s, struct mcp_call *call);
/* Hold s while a stream uses it, and give it back. */
void mcp_session_hold(struct mcp_session *s);
void mcp_session_put(struct mcp_session *s);

/* A body over --max-body-bytes: the JSON-RPC error, with 413. */
enum MHD_Result mcp_reply_too_large(struct MHD_Connection *c, uint64_t max);
/* 403 with a JSON-RPC error: a web page's request (guard.c, web.h). */
enum MHD_Result mcp_reply_forbidden(struct MHD_Connection *c, const char *why);
/* End every session (shutdown, after the HTTP server stopped). */
void mcp_shutdown(void);

/* Whether tool `name` answers with a stream of its own when given a progress token
 * (run_command); the others are run on a thread while the answer tells progress. */
bool mcp_tool_streams(const char *name);
/* Answer a call of a tool that does not stream its own with a stream: progress every
 * second while the tool runs on a thread of its own, then its result. x->streamed is set
 * and x->ret is MHD's result; the stream owns the call (x->call), and holds x->s. */
void mcp_call_stream(struct mcp_tool_ctx *x, const char *name, const cJSON *args);

/* tools/list's result ({"tools":[...]}), JSON text made once. */
const char *mcp_tools_list(size_t *len);
/* Whether a tool of that name exists. */
bool mcp_tool_exists(const char *name);
/* Run tool `name` with args (an object): its result object into w (isError for a failure
 * of the tool), 0; or a JSON-RPC error code with msg (nothing written). */
int mcp_tool_call(struct mcp_tool_ctx *x, const char *name, const cJSON *args, struct jsonw *w,
                  char *msg, size_t msglen);

/* Resources: workspace files as file:// URIs. */
int mcp_resources_list(struct server *srv, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen);
int mcp_resources_read(struct server *srv, const cJSON *params, struct jsonw *w, char *msg,
                       size_t msglen);
/* The workspace path (malloc'd) a file:// URI names, or NULL with msg. */
char *mcp_uri_path(struct server *srv, const char *uri, char *msg, size_t msglen);
/* The URI of a workspace path, into w as a JSON string. */
void mcp_write_uri(struct server *srv, struct jsonw *w, const char *path);

#endif
