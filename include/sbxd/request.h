/*
 * request.h - the /execute request: JSON in, a validated exec_request out.
 *
 * Everything a command needs is decided here, before any process exists: argv, the
 * final environment (request env merged over the policy's base, cmdenv.h),
 * stdin bytes, cwd, timeout and limits checked against the server's maxima. Unknown
 * fields, wrong types, NUL inside strings and duplicate keys are all rejected.
 */
#ifndef SBXD_REQUEST_H
#define SBXD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbxd/cmdenv.h"
#include "sbxd/err.h"
#include "sbxd/exec_result.h"

enum exec_encoding { EXEC_ENC_UTF8, EXEC_ENC_BASE64 };

#define EXEC_LIMIT_UNSET UINT64_MAX

struct exec_limits {
    uint64_t cpu_ms;          /* RLIMIT_CPU (rounded up to whole seconds) */
    uint64_t file_size_bytes; /* RLIMIT_FSIZE */
    uint64_t open_files;      /* RLIMIT_NOFILE */
    uint64_t output_bytes;    /* stdout + stderr beyond this: killed, status output_limit */
    uint64_t memory_bytes;    /* cgroup memory.max, else RLIMIT_AS */
    uint64_t pids;            /* cgroup pids.max */
    double cpu_quota;         /* cgroup cpu.max, in CPUs; 0 when unset */
};

struct exec_request {
    char **argv; /* NULL-terminated */
    size_t argc;
    bool shell;          /* from "command": argv is {"/bin/sh", "-c", command} */
    size_t shell_prefix; /* bytes sbxd put before the command text (exec_request_exec_simple) */
    char **envp;         /* NULL-terminated, final */
    char *cwd;           /* relative to the workspace; "" for the root */
    uint8_t *stdin_data;
    size_t stdin_len;
    bool has_stdin;
    uint64_t timeout_ms;
    bool network; /* false: the command may open AF_UNIX sockets only */
    struct exec_limits limits;
    enum exec_encoding encoding;
    bool pty; /* background processes: on a pseudo-terminal of pty_cols x pty_rows */
    unsigned pty_cols, pty_rows;
    enum exec_front front; /* FRONT_REST unless a front says otherwise */
};

struct request_policy {
    uint64_t default_timeout_ms;
    uint64_t max_timeout_ms;
    uint64_t max_memory_bytes; /* 0: no maximum */
    uint64_t max_pids;         /* 0: no maximum */
    double max_cpu_quota;      /* CPUs on this machine */
    const char *workspace;     /* absolute; HOME of commands, and accepted as a cwd prefix */
    const struct cmdenv *env;  /* the base environment (cmdenv.h); NULL: the minimal one */
    bool allow_pty;            /* "pty" is accepted (background processes only) */
};

/* The fields of a request body: the one table exec_request_parse takes fields by, and
 * other faces describe them from (MCP's tools/list makes run_command's JSON Schema of it), so
 * that a new field reaches every face at once. Ends with a NULL name. */
struct exec_field {
    const char *name;
    const char *schema;   /* its JSON Schema's members, as JSON text without the braces */
    const char *doc;      /* one line saying what it does */
    bool background_only; /* taken only where the policy allows it (allow_pty) */
};
extern const struct exec_field exec_request_fields[];

/* Parse and validate a JSON body. On failure err says which field and why (SBXD_E_INVALID,
 * or SBXD_E_DENIED for a cwd outside the workspace) and *req holds nothing to free. */
int exec_request_parse(const char *body, size_t len, const struct request_policy *pol,
                       struct exec_request *req, struct sbxd_err *err);

/* The same for a request already parsed (a front that takes JSON inside a larger document,
 * a context's template): the one field table and validation exec_request_parse applies after
 * its parse, so the two cannot drift. obj's strings are C strings: a caller that parsed text
 * checks it for NUL first (json_check_no_nul), as exec_request_parse does, since cJSON cuts
 * a string at \u0000. -1 with err, *req holding nothing to free. */
struct cJSON;
int exec_request_from_json(const struct cJSON *obj, const struct request_policy *pol,
                           struct exec_request *req, struct sbxd_err *err);

/* A piece of a request that did not come as JSON: bytes and their length. */
struct exec_bytes {
    const void *data;
    size_t len;
};

/* A request from a front that is not JSON (gRPC's ProcessConfig), checked as
 * exec_request_parse checks one: argv (argc items), the environment (nenv names and values,
 * merged over the same base; a name given twice: the last wins, as in a protobuf map), cwd
 * (len 0: the workspace root) and the timeout (0: the policy's default; else capped at its
 * maximum). Every string must be valid UTF-8 without NUL (a C string would cut it). Other
 * fields take exec_request_parse's defaults; the caller may then set front, pty and
 * encoding. -1 with err as exec_request_parse, *req holding nothing to free. */
int exec_request_build(const struct request_policy *pol, const struct exec_bytes *argv, size_t argc,
                       const struct exec_bytes *env_names, const struct exec_bytes *env_values,
                       size_t nenv, const struct exec_bytes *cwd, uint64_t timeout_ms,
                       struct exec_request *req, struct sbxd_err *err);

void exec_request_free(struct exec_request *req);
/* A request freed when its variable goes out of scope (cleanup.h): declare it zeroed, and hand
 * it to a call that takes it over with STEAL_STRUCT(&req). */
#define autoreq __attribute__((cleanup(exec_request_free)))

/* A deep copy of src into dst (a template started again and again: a context's); -1 with
 * err (out of memory), dst holding nothing to free. */
int exec_request_copy(const struct exec_request *src, struct exec_request *dst,
                      struct sbxd_err *err);
/* Set one variable of req's final environment ("NAME=value"), in place of the same name's. */
int exec_request_setenv(struct exec_request *req, const char *entry, struct sbxd_err *err);

/* For "command" that is one simple command (a program and its words, plain or quoted, no
 * expansion, redirection, operator or assignment; not a shell builtin), make the shell exec
 * it: the program is then the command's own process, and a signal that ends it is the
 * command's end, as where no shell stood between (dash runs it as a child otherwise, and
 * reports 128+N). 0, or -1 when memory ran out (the request unchanged). */
int exec_request_exec_simple(struct exec_request *req);

/* The command as text for a log line: the shell text of "command", or argv joined by spaces;
 * cut to fit out (len bytes with the terminator). */
void exec_request_text(const struct exec_request *req, char *out, size_t len);

/* Check the raw JSON text for NUL characters inside strings (the \u0000 escape or a raw NUL):
 * C strings cannot carry them, so they would silently cut a command. Returns 0 when clean. */
int json_check_no_nul(const char *text, size_t len);

#endif
