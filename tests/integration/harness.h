/*
 * harness.h - a real sbxd on an ephemeral loopback port with a temporary workspace, driven
 * over HTTP with libcurl, plus /proc helpers to check what it leaves behind.
 *
 * sbxd may run inside something (SBXD_WRAP). Under gVisor (a wrap that names runsc) the
 * harness's child is the runsc process, and sbxd and its commands are not host processes:
 * the daemon_* helpers below then look from inside the sandbox (the sbxd-probe, run there
 * with `runsc exec`) instead of at the host's /proc.
 */
#ifndef SBXD_HARNESS_H
#define SBXD_HARNESS_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct daemon {
    pid_t pid;
    int port;
    char ws[256];       /* the workspace (a fresh temporary directory) */
    char log[PATH_MAX]; /* sbxd's stderr */
    /* Under gVisor, found at start: the sandbox's state root (runsc --root) and its
     * container id. */
    char sb_root[PATH_MAX];
    char sb_id[128];
};

/* Whether sbxd runs inside gVisor: SBXD_WRAP names runsc. The one place that decides. */
bool under_gvisor(void);
/* Say on stderr that a check is skipped under gVisor, and why ("gvisor: skipped ..."). */
void gvisor_skip(const char *check, const char *why);
/* The SBXD_WRAP words (split on spaces) into argv; returns how many (0: no wrap). */
int wrap_argv(const char **argv, int max);

/* Start sbxd with extra arguments (NULL-terminated, may be NULL) and extra environment
 * entries ("K=V", NULL-terminated, may be NULL). Aborts the test run if it does not come up. */
void daemon_start(struct daemon *d, const char *const *args, const char *const *env);
/* The same, but sbxd may refuse to start: -1 when it listens (d is up), else its exit
 * status, with what it said (its log) in why. */
int daemon_try_start(struct daemon *d, const char *const *args, const char *const *env, char *why,
                     size_t whylen);
/* The same, with sbxd running as uid:gid (the test must be root; its workspace is theirs). */
void daemon_start_as(struct daemon *d, uid_t uid, gid_t gid, const char *const *args,
                     const char *const *env);

/* SIGTERM, wait up to timeout_ms; returns the wait status, or -1 if it had to be killed.
 * Removes the workspace and log. */
int daemon_stop(struct daemon *d, int timeout_ms);

/* Stop d and say whether it ended well: exit status 0 and no sanitizer report in its log
 * (printed when not). Removes its workspace and log either way. */
bool daemon_stop_clean(struct daemon *d, int timeout_ms);

/* Whether the log holds a sanitizer report (ASan/UBSan/LSan). */
bool daemon_log_has_sanitizer_report(const struct daemon *d);

/* Read sbxd's log into a new string (caller frees). */
char *daemon_log_read(const struct daemon *d);

/* Run sbxd (inside the wrap) with args and extra environment entries (may be NULL) to its
 * end; returns the exit status, its stdout and stderr in out. */
int sbxd_run(const char *const *args, const char *const *env, char *out, size_t outlen);

/* Paths of sbxd and of the probe binary (env SBXD_BIN / SBXD_PROBE override the build's). */
const char *sbxd_bin(void);
const char *sbxd_probe(void);

/* The shared daemon of the integration run (started in main). */
extern struct daemon g_sbxd;

struct http_resp {
    long status;
    char *body;
    size_t len;
    char *headers;
    cJSON *json; /* the body parsed, when it is JSON */
    double seconds;
};

/* One request. body may be NULL; ctype NULL means application/json when a body is given;
 * timeout_ms 0 means 30 s. Returns 0, or -1 if the transfer failed (e.g. timed out). */
int http_request(const struct daemon *d, const char *method, const char *path, const char *ctype,
                 const char *body, size_t body_len, long timeout_ms, struct http_resp *r);
/* The same with more header lines ("Name: value", several separated by "\r\n"; NULL for
 * none). The body comes as sent
 * (a Content-Encoding is not decoded). */
int http_request_with(const struct daemon *d, const char *method, const char *path,
                      const char *header, const char *ctype, const char *body, size_t body_len,
                      long timeout_ms, struct http_resp *r);
/* The same from the loopback address src ("127.0.0.2"; NULL: the system's choice), as a
 * client of another address. */
int http_request_from(const struct daemon *d, const char *src, const char *method, const char *path,
                      const char *header, const char *ctype, const char *body, size_t body_len,
                      long timeout_ms, struct http_resp *r);
void http_resp_free(struct http_resp *r);
/* The value of r's response header name (case-insensitive) into out, or "": out. */
const char *http_resp_header(const struct http_resp *r, const char *name, char *out, size_t n);

/* One request whose path is printf-formatted (a JSON body or none, 60 s at most); asserts
 * that the transfer itself worked. */
__attribute__((format(printf, 5, 6))) void http_reqf(const struct daemon *d, struct http_resp *r,
                                                     const char *method, const char *body,
                                                     const char *fmt, ...);

/* POST /execute with a JSON body; asserts 200 and a JSON object; returns the parsed result
 * (caller frees with cJSON_Delete). */
/* A loopback port nothing listens on now (bound, then closed). */
int loopback_free_port(void);
cJSON *execute(const struct daemon *d, const char *json);
/* POST /execute {"command": command} on d; asserts its exit code is 0. */
void run_sh(const struct daemon *d, const char *command);

/* Shorthands on a result object. */
const char *jstr(const cJSON *o, const char *key);
double jnum(const cJSON *o, const char *key);
bool jbool(const cJSON *o, const char *key);
bool jnull(const cJSON *o, const char *key);

/* Assert an error reply: this status and {"code": code, "message": non-empty}. */
void assert_error(const struct http_resp *r, long status, const char *code);

/* A thread that asks d for /healthz every interval_ms while something else goes on, and
 * keeps the latency of each answer and the count of failures (anything but a 200). */
struct health_watch {
    const struct daemon *d;
    int interval_ms;
    volatile int running;
    pthread_t thread;
    double lat_ms[1000]; /* sorted after health_watch_stop */
    int n;
    int failed;
};

void health_watch_start(struct health_watch *w, const struct daemon *d, int interval_ms);
void health_watch_stop(struct health_watch *w);

/* Host processes whose command line contains marker (zombies excluded). */
int procs_with(const char *marker);
/* The state letter and parent of pid from /proc/PID/stat; false when it is gone. */
bool proc_stat(pid_t pid, char *state, pid_t *ppid);
/* Wait up to ms for none to remain; returns how many remain. */
int wait_no_procs(const char *marker, int ms);

/* The number after "key:" in /proc/PID/status (VmRSS in kB, Threads, ...); -1 if none. */
long proc_status_num(pid_t pid, const char *key);
long proc_rss_kb(pid_t pid);
int proc_fd_count(pid_t pid);
double now_ms(void);

/* The SysV objects and the POSIX queue of key (`sbxd-probe attack leave KEY`), removed from
 * the host's IPC namespace whatever a test found: what a command left in a namespace it shared
 * with the host. */
void host_ipc_drop(key_t key);

/* Copy the probe into d's workspace as ./sbxd-probe, for commands to run (the build tree may
 * not be readable by the command user). */
void daemon_install_probe(const struct daemon *d);

/* Under gVisor: run argv inside d's sandbox (`runsc exec`, as the container's root), its
 * stdout into out; returns the exit status, or -1. */
int sandbox_exec(const struct daemon *d, const char *const *argv, char *out, size_t outlen);

/*
 * What d's commands left behind, and d's own resources, wherever d runs. On the host these
 * are the /proc helpers above on d->pid. Under gVisor they ask the sandbox: processes with
 * marker in their command line as its /proc lists them, sbxd's (its pid 1) RSS, open fds
 * and oom_score_adj. Once d is gone (d->pid == 0) under gVisor, what can be left is the
 * sandbox itself: daemon_procs_with then counts its host processes (sentry, gofer). -1 when
 * the sandbox could not be asked.
 */
int daemon_procs_with(const struct daemon *d, const char *marker);
int daemon_wait_no_procs(const struct daemon *d, const char *marker, int ms);
/* The processes of d's tree (the daemon's descendants; under gVisor, the sandbox's) whose
 * command line holds marker: up to max pids into pids (host pids; none under gVisor).
 * Returns how many. */
int daemon_tree_procs(const struct daemon *d, const char *marker, pid_t *pids, int max);
/* Wait up to ms for none to be left. Returns how many are. */
int daemon_wait_tree_empty(const struct daemon *d, const char *marker, int ms);
/* Wait up to ms for each of the pids to be gone (or a zombie). Returns how many live. */
int wait_pids_gone(const pid_t *pids, int n, int ms);
long daemon_rss_kb(const struct daemon *d);
/* Send all n bytes on a socket (no SIGPIPE): 0, or -1 when the peer is gone. */
int send_all(int fd, const char *s, size_t n);
int daemon_fd_count(const struct daemon *d);
int daemon_oom_score_adj(const struct daemon *d);
/* Whether a process with the daemon's credentials may lower its oom_score_adj (tried in a
 * throwaway process, as sbxd tries it for itself). */
bool daemon_may_lower_oom_score(const struct daemon *d);

/* Sample d's RSS every 2 ms between start and stop; stop returns the peak (kB) and the RSS
 * at start in *base_kb. One sampling at a time. */
void rss_sampling_start(const struct daemon *d);
long rss_sampling_stop(long *base_kb);

/* POST path with a JSON body on a raw connection (with "Accept: accept" unless NULL,
 * Connection: close); returns the socket. raw_execute: to /execute. */
int raw_post(const struct daemon *d, const char *path, const char *accept, const char *body);
int raw_execute(const struct daemon *d, const char *accept, const char *body);
/* Everything until the peer closes s (head and chunk framing included), NUL-terminated;
 * *len (unless NULL) its length. malloc'd. */
char *read_until_close(int s, size_t *len);

#endif
