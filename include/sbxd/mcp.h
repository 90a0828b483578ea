/*
 * mcp.h - the Model Context Protocol server (src/mcp): sessions, the JSON-RPC dispatch, the
 * tools and the resources, whatever carries the messages. A transport (Streamable HTTP:
 * src/http/route_mcp.c) hands it what a client sent and a sink for the answers, and frames
 * what the sink is given (a JSON body, or server-sent events); nothing behind this header
 * knows HTTP.
 *
 * Sessions are made by initialize and named by their id after it; each keeps its protocol
 * version, the tool calls it has under way (so that a notifications/cancelled from another
 * request reaches the command's tree) and the resources it subscribed to (told on its event
 * stream). Tools run on the same exec service and file-system core as the REST routes, with
 * the same limits and the same confinement.
 */
#ifndef SBXD_MCP_H
#define SBXD_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include "sbxd/config.h"
#include "sbxd/exec_service.h"
#include "sbxd/files.h"
#include "sbxd/jsonw.h"

/* What MCP acts on: the sandbox's, made once at start-up (mcp_init). */
struct sandbox;

struct mcp_host {
    const struct sbxd_config *cfg;
    struct exec_service *exec;
    const bool *draining;  /* atomic: sbxd is shutting down */
    int rootfd;            /* the workspace root ... */
    const char *workspace; /* ... and its absolute path */
    struct fs_user user;   /* who file operations run as */
    const struct sandbox *sb;
};

struct sandbox;
/* Make MCP's host of the sandbox, before any transport serves MCP (main, at start-up). */
void mcp_init(struct sandbox *sb);
/* The host mcp_init made, for a transport to hand to the calls below. */
const struct mcp_host *mcp_host(void);

/* How a request ended, for the transport to say in its own terms (HTTP: the status). */
enum mcp_status {
    MCP_OK,          /* answered (an empty answer: nothing to say, accepted) */
    MCP_DEFERRED,    /* the answer is a stream given to the sink's defer */
    MCP_BAD_REQUEST, /* no session named, a bad version, a batch where none is spoken */
    MCP_NOT_FOUND,   /* no such session */
    MCP_CONFLICT,    /* the session's event stream is open already */
    MCP_TOO_MANY,    /* the client holds all the sessions it may */
    MCP_UNAVAILABLE, /* sbxd holds all the sessions it may, or is shutting down */
    MCP_INTERNAL,    /* out of memory */
};

struct mcp_sink;

/* An answer that goes on after its request returned: the transport calls step until it
 * returns false (it has sent its last message), then drop; drop alone when the client went
 * away before. */
struct mcp_task_ops {
    bool (*step)(void *task, struct mcp_sink *k);
    void (*drop)(void *task);
};

/* Where the messages of an answer go: the transport's. */
struct mcp_sink {
    /* One JSON-RPC message (a response, or a notification about the request under way). */
    void (*send)(struct mcp_sink *k, const char *msg, size_t len);
    /* The rest of the answer is task's: the transport owns it from now on (and drops it
     * itself when it cannot stream). Only called when stream_ok. ops NULL: the answer cannot
     * go on (out of memory), the transport gives the request up. */
    void (*defer)(struct mcp_sink *k, const struct mcp_task_ops *ops, void *task);
    bool stream_ok; /* the transport can send several messages for one request */
    bool batch;     /* set by MCP: the messages answer a batch (an array of them) */
};

/* One request of a client. */
struct mcp_request {
    const char *body; /* POST: the JSON-RPC message(s), valid UTF-8 */
    size_t len;
    const char *session;  /* the session it names, or NULL */
    const char *version;  /* the protocol version it names, or NULL */
    const char *client;   /* the client's address:port, for caps and the audit line */
    int client_fd;        /* its socket: a hang-up cancels what waits for it (-1: none) */
    char new_session[33]; /* out: initialize's new session id */
};

/* Messages a client sent: the answers to the sink. */
enum mcp_status mcp_post(const struct mcp_host *h, struct mcp_request *rq, struct mcp_sink *k);
/* End the session named: its calls are cancelled. */
enum mcp_status mcp_delete(const struct mcp_host *h, struct mcp_request *rq, struct mcp_sink *k);

/* The session's stream of notifications (resources/updated for what it subscribed to): one
 * at a time, NULL after sending the error (*st). */
struct mcp_events;
struct mcp_events *mcp_events_open(const struct mcp_host *h, struct mcp_request *rq,
                                   struct mcp_sink *k, enum mcp_status *st);
/* The next notification appended to w: 1; 0 when there is none now; -1 when the stream is
 * over (the session ended). */
int mcp_events_next(struct mcp_events *e, struct jsonw *w);
void mcp_events_close(struct mcp_events *e);

/* End every session (shutdown, after the transports stopped). */
void mcp_shutdown(void);

/* MCP's fixed limits (configurable ones are config.c's options). */

/* MCP run_code answers at most this many images (and no more bytes of them than
 * --max-output-bytes); the rest are counted as left out. */
#define SBXD_MCP_MAX_IMAGES 32

/* Directories one MCP session's resource subscriptions may be in (each a watch of its GET
 * stream, from the MCP sessions' own pool of --max-watchers). */
#define SBXD_MCP_SESSION_WATCH_DIRS 8

#endif
