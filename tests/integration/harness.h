/*
 * harness.h - a real sbxd on an ephemeral loopback port with a temporary workspace, driven
 * over HTTP with libcurl, plus /proc helpers to check what it leaves behind.
 */
#ifndef SBXD_HARNESS_H
#define SBXD_HARNESS_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct daemon {
    pid_t pid;
    int port;
    char ws[256];       /* the workspace (a fresh temporary directory) */
    char log[PATH_MAX]; /* sbxd's stderr */
};

/* Start sbxd with extra arguments (NULL-terminated, may be NULL) and extra environment
 * entries ("K=V", NULL-terminated, may be NULL). Aborts the test run if it does not come up. */
void daemon_start(struct daemon *d, const char *const *args, const char *const *env);

/* SIGTERM, wait up to timeout_ms; returns the wait status, or -1 if it had to be killed.
 * Removes the workspace and log. */
int daemon_stop(struct daemon *d, int timeout_ms);

/* Whether the log holds a sanitizer report (ASan/UBSan/LSan). */
bool daemon_log_has_sanitizer_report(const struct daemon *d);

/* Read sbxd's log into a new string (caller frees). */
char *daemon_log_read(const struct daemon *d);

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
void http_resp_free(struct http_resp *r);

/* POST /execute with a JSON body; asserts 200 and a JSON object; returns the parsed result
 * (caller frees with cJSON_Delete). */
cJSON *execute(const struct daemon *d, const char *json);

/* Shorthands on a result object. */
const char *jstr(const cJSON *o, const char *key);
double jnum(const cJSON *o, const char *key);
bool jbool(const cJSON *o, const char *key);
bool jnull(const cJSON *o, const char *key);

/* Assert an error reply: this status and {"code": code, "message": non-empty}. */
void assert_error(const struct http_resp *r, long status, const char *code);

/* Processes whose command line contains marker (zombies excluded). */
int procs_with(const char *marker);
/* Wait up to ms for none to remain; returns how many remain. */
int wait_no_procs(const char *marker, int ms);

long proc_rss_kb(pid_t pid);
int proc_fd_count(pid_t pid);
double now_ms(void);

#endif
