#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/limits.h"
#include "sbxd/exec_limits.h"
#include "sbxd/jsonkeys.h"
#include "sbxd/request.h"
#include "sbxd/utf8.h"

int json_check_no_nul(const char *text, size_t len)
{
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '\0')
            return -1;
        if (!in_str) {
            in_str = c == '"';
            continue;
        }
        if (c == '"') {
            in_str = false;
        } else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0)
                return -1;
            i++; /* skip the escaped character, so "\\u0000" (a backslash, then text) passes */
        }
    }
    return 0;
}

#define invalid(err, ...) sbxd_fail((err), SBXD_E_INVALID, 0, __VA_ARGS__)

/* A JSON number that is a whole number in [min, max]. */
static int get_uint(const cJSON *item, const char *name, uint64_t min, uint64_t max, uint64_t *out,
                    struct sbxd_err *err)
{
    if (!cJSON_IsNumber(item))
        return invalid(err, "'%s' must be a whole number", name);
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < (double)min || v > (double)max ||
        v > 9007199254740992.0)
        return sbxd_fail(err, SBXD_E_INVALID, 0, "'%s' must be a whole number from %llu to %llu",
                         name, (unsigned long long)min, (unsigned long long)max);
    *out = (uint64_t)v;
    return 0;
}

/* Reject duplicate member names: cJSON keeps both, and which one wins would be a guess. The
 * check is jsonkeys.h's (sorted names, and a cap on members: a pairwise one was quadratic). */
static int check_unique_keys(const cJSON *obj, const char *where, struct sbxd_err *err)
{
    const char *dup = NULL;
    switch (json_keys_check(obj, &dup)) {
    case JSON_KEYS_OK:
        return 0;
    case JSON_KEYS_DUPLICATE:
        return sbxd_fail(err, SBXD_E_INVALID, 0, "duplicate field '%s%.64s'", where, dup);
    case JSON_KEYS_TOO_MANY:
        if (!where[0])
            return sbxd_fail(err, SBXD_E_INVALID, 0, "the body has more than %d fields",
                             SBXD_JSON_MAX_MEMBERS);
        /* where is "env." and the like: named without its dot */
        return sbxd_fail(err, SBXD_E_INVALID, 0, "'%.*s' has more than %d fields",
                         (int)strlen(where) - 1, where, SBXD_JSON_MAX_MEMBERS);
    case JSON_KEYS_NO_MEMORY:
        break;
    }
    return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
}

static char *join_kv(const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    char *s = malloc(kl + vl + 2);
    if (!s)
        return NULL;
    memcpy(s, k, kl);
    s[kl] = '=';
    memcpy(s + kl + 1, v, vl + 1);
    return s;
}

static bool env_name_ok(const char *name)
{
    /* Any non-empty name without '=' can be passed through execve; '=' would split it. */
    return name[0] && !strchr(name, '=');
}

/* Whether the request's env (a JSON object) names the variable of entry ("NAME=..."). */
static bool json_names(const void *ctx, const char *entry, size_t len)
{
    for (const cJSON *c = ctx ? ((const cJSON *)ctx)->child : NULL; c; c = c->next)
        if (c->string && strncmp(c->string, entry, len) == 0 && c->string[len] == '\0')
            return true;
    return false;
}

/* The base environment into req->envp (calloc'd with room for nreq more and the NULL): HOME
 * (the workspace, unless the base holds its own) and the base's variables, each unless the
 * request names it (names(ctx, ...)): then the request's value is added after. */
static int base_env(const struct request_policy *pol, size_t nreq,
                    bool (*names)(const void *ctx, const char *entry, size_t len), const void *ctx,
                    struct exec_request *req, size_t *n, struct sbxd_err *err)
{
    const struct cmdenv *ce = pol->env ? pol->env : cmdenv_minimal();
    req->envp = calloc(ce->nvars + nreq + 2, sizeof(char *));
    if (!req->envp)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    *n = 0;
    if (!ce->home && !names(ctx, "HOME=", 4) &&
        !(req->envp[(*n)++] = join_kv("HOME", pol->workspace)))
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0; i < ce->nvars; i++) {
        const char *v = ce->vars[i];
        if (names(ctx, v, strcspn(v, "=")))
            continue; /* the request's value is added below */
        if (!(req->envp[(*n)++] = strdup(v)))
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    return 0;
}

static int build_env(const cJSON *env, const struct request_policy *pol, struct exec_request *req,
                     struct sbxd_err *err)
{
    int nreq = env ? cJSON_GetArraySize(env) : 0;
    if (nreq > SBXD_MAX_ENV)
        return sbxd_fail(err, SBXD_E_INVALID, 0, "'env' has more than %d variables", SBXD_MAX_ENV);
    size_t n = 0;
    if (base_env(pol, (size_t)nreq, json_names, env, req, &n, err) < 0)
        return -1;
    for (const cJSON *c = env ? env->child : NULL; c; c = c->next) {
        if (!env_name_ok(c->string))
            return sbxd_fail(err, SBXD_E_INVALID, 0,
                             "env name '%.64s' is not valid (empty or contains '=')", c->string);
        if (!cJSON_IsString(c))
            return sbxd_fail(err, SBXD_E_INVALID, 0, "env value of '%.64s' must be a string",
                             c->string);
        if (!(req->envp[n++] = join_kv(c->string, c->valuestring)))
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    return 0;
}

static int parse_limits(const cJSON *lim, const struct request_policy *pol,
                        struct exec_request *req, struct sbxd_err *err)
{
    if (!cJSON_IsObject(lim))
        return invalid(err, "'%s' must be an object", "limits");
    if (check_unique_keys(lim, "limits.", err) < 0)
        return -1;
    for (const cJSON *c = lim->child; c; c = c->next) {
        const char *k = c->string;
        char name[80];
        snprintf(name, sizeof(name), "limits.%.60s", k);
        uint64_t *dst;
        uint64_t min = 0, max = 1ULL << 53;
        if (strcmp(k, "cpu_ms") == 0) {
            dst = &req->limits.cpu_ms;
            min = 1;
            max = SBXD_TIMEOUT_HARD_MAX_MS;
        } else if (strcmp(k, "file_size_bytes") == 0) {
            dst = &req->limits.file_size_bytes;
        } else if (strcmp(k, "open_files") == 0) {
            dst = &req->limits.open_files;
            min = 3; /* stdin, stdout and stderr */
            max = 1048576;
        } else if (strcmp(k, "output_bytes") == 0) {
            dst = &req->limits.output_bytes;
            min = 1;
        } else if (strcmp(k, "memory_bytes") == 0) {
            dst = &req->limits.memory_bytes;
            min = 1 << 20; /* less cannot even start a shell */
            if (pol->max_memory_bytes)
                max = pol->max_memory_bytes;
        } else if (strcmp(k, "pids") == 0) {
            dst = &req->limits.pids;
            min = 1;
            if (pol->max_pids)
                max = pol->max_pids;
        } else if (strcmp(k, "cpu_quota") == 0) {
            double q = cJSON_IsNumber(c) ? c->valuedouble : -1;
            if (!(q >= 0.01 && q <= pol->max_cpu_quota))
                return sbxd_fail(err, SBXD_E_INVALID, 0,
                                 "'limits.cpu_quota' must be a number of CPUs from 0.01 to %g",
                                 pol->max_cpu_quota);
            req->limits.cpu_quota = q;
            continue;
        } else {
            return sbxd_fail(err, SBXD_E_INVALID, 0,
                             "unknown field '%s' (known: cpu_ms, file_size_bytes, open_files, "
                             "output_bytes, memory_bytes, pids, cpu_quota)",
                             name);
        }
        if (get_uint(c, name, min, max, dst, err) < 0)
            return -1;
    }
    return 0;
}

static int set_cwd(const char *cwd, const struct request_policy *pol, struct exec_request *req,
                   struct sbxd_err *err)
{
    if (cwd[0] == '/') {
        /* Accept the workspace's own absolute path (what `pwd` prints inside a command). */
        size_t wl = strlen(pol->workspace);
        if (strcmp(pol->workspace, "/") == 0)
            wl = 0;
        else if (strncmp(cwd, pol->workspace, wl) != 0 || (cwd[wl] != '\0' && cwd[wl] != '/'))
            return sbxd_fail(err, SBXD_E_DENIED, 0, "cwd '%.128s' is outside the workspace %s", cwd,
                             pol->workspace);
        cwd += wl;
    }
    req->cwd = strdup(cwd);
    if (!req->cwd)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

static int parse_argv(const cJSON *argv, struct exec_request *req, struct sbxd_err *err)
{
    if (!cJSON_IsArray(argv))
        return invalid(err, "'%s' must be an array of strings", "argv");
    int n = cJSON_GetArraySize(argv);
    if (n == 0)
        return invalid(err, "'%s' must not be empty", "argv");
    if (n > SBXD_MAX_ARGS)
        return sbxd_fail(err, SBXD_E_INVALID, 0, "'argv' has more than %d items", SBXD_MAX_ARGS);
    req->argv = calloc((size_t)n + 1, sizeof(char *));
    if (!req->argv)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int i = 0;
    for (const cJSON *c = argv->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c))
            return sbxd_fail(err, SBXD_E_INVALID, 0, "'argv[%d]' must be a string", i);
        if (!(req->argv[i] = strdup(c->valuestring)))
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    if (!req->argv[0][0])
        return invalid(err, "'%s' must not be empty", "argv[0]");
    req->argc = (size_t)n;
    return 0;
}

static int parse_command(const cJSON *cmd, struct exec_request *req, struct sbxd_err *err)
{
    if (!cJSON_IsString(cmd))
        return invalid(err, "'%s' must be a string", "command");
    if (!cmd->valuestring[0])
        return invalid(err, "'%s' must not be empty", "command");
    req->argv = calloc(4, sizeof(char *));
    if (!req->argv || !(req->argv[0] = strdup("/bin/sh")) || !(req->argv[1] = strdup("-c")) ||
        !(req->argv[2] = strdup(cmd->valuestring)))
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    req->argc = 3;
    req->shell = true;
    return 0;
}

/* limits' members, as the table's schemas are (parse_limits takes them). */
static const char LIMITS_SCHEMA[] =
    "\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
    "\"cpu_ms\":{\"type\":\"integer\",\"minimum\":1,"
    "\"description\":\"CPU time, rounded up to whole seconds.\"},"
    "\"file_size_bytes\":{\"type\":\"integer\",\"minimum\":0,"
    "\"description\":\"Largest file the command may write.\"},"
    "\"open_files\":{\"type\":\"integer\",\"minimum\":3,\"description\":\"Open files at most.\"},"
    "\"output_bytes\":{\"type\":\"integer\",\"minimum\":1,"
    "\"description\":\"stdout and stderr together beyond this: killed, status output_limit.\"},"
    "\"memory_bytes\":{\"type\":\"integer\",\"minimum\":1048576,"
    "\"description\":\"Memory at most: status oom beyond it.\"},"
    "\"pids\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"Processes at most.\"},"
    "\"cpu_quota\":{\"type\":\"number\",\"minimum\":0.01,\"description\":\"CPUs it may use.\"}}";

const struct exec_field exec_request_fields[] = {
    {"command", "\"type\":\"string\"",
     "A shell command line, run by /bin/sh -c. Give this or argv.", false},
    {"argv", "\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1",
     "A program and its arguments, run without a shell (argv[0] is looked up in PATH). Give "
     "this or command.",
     false},
    {"stdin", "\"type\":\"string\"", "Text given to the command as its standard input.", false},
    {"env", "\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}",
     "Environment variables added to the command's.", false},
    {"cwd", "\"type\":\"string\"",
     "Working directory, relative to the workspace (default: the workspace root).", false},
    {"timeout_ms", "\"type\":\"integer\",\"minimum\":1",
     "Wall-clock limit in milliseconds; at the limit the whole process tree is killed.", false},
    {"limits", LIMITS_SCHEMA, "Limits of this command, each within sbxd's own maxima.", false},
    {"encoding", "\"type\":\"string\",\"enum\":[\"utf8\",\"base64\"]",
     "How stdout and stderr are returned: utf8 (invalid bytes replaced) or base64 (the exact "
     "bytes).",
     false},
    {"network", "\"type\":\"boolean\"",
     "false: the command may open Unix sockets only, no network (default true).", false},
    {"pty",
     "\"type\":\"object\",\"additionalProperties\":false,\"properties\":{\"cols\":{\"type\":"
     "\"integer\",\"minimum\":1},\"rows\":{\"type\":\"integer\",\"minimum\":1}}",
     "Run on a pseudo-terminal of cols x rows (background processes only).", true},
    {NULL, NULL, NULL, false},
};

/* Whether name is a field of the table. */
static bool known_field(const char *name)
{
    for (const struct exec_field *f = exec_request_fields; f->name; f++)
        if (strcmp(name, f->name) == 0)
            return true;
    return false;
}

/* The unknown field's error: the fields the policy takes, named from the table. */
static int unknown_field(const char *name, const struct request_policy *pol, struct sbxd_err *err)
{
    char known[200];
    size_t n = 0;
    known[0] = '\0';
    for (const struct exec_field *f = exec_request_fields; f->name; f++)
        if (!f->background_only || pol->allow_pty)
            n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s", n ? ", " : "", f->name);
    return sbxd_fail(err, SBXD_E_INVALID, 0, "unknown field '%.64s' (known: %s)", name, known);
}

/* "pty": {"cols": C, "rows": R}, both optional: only where the policy allows it. */
static int parse_pty(const cJSON *pty, const struct request_policy *pol, struct exec_request *req,
                     struct sbxd_err *err)
{
    if (!pol->allow_pty)
        return invalid(err, "%s",
                       "'pty' is for background processes (POST /processes), not for /execute");
    if (!cJSON_IsObject(pty))
        return invalid(err, "'%s' must be an object like {\"cols\":80,\"rows\":24}", "pty");
    if (check_unique_keys(pty, "pty.", err) < 0)
        return -1;
    uint64_t cols = 80, rows = 24;
    for (const cJSON *c = pty->child; c; c = c->next) {
        if (strcmp(c->string, "cols") == 0) {
            if (get_uint(c, "pty.cols", 1, SBXD_PTY_MAX, &cols, err) < 0)
                return -1;
        } else if (strcmp(c->string, "rows") == 0) {
            if (get_uint(c, "pty.rows", 1, SBXD_PTY_MAX, &rows, err) < 0)
                return -1;
        } else {
            return sbxd_fail(err, SBXD_E_INVALID, 0,
                             "unknown field 'pty.%.60s' (known: cols, rows)", c->string);
        }
    }
    req->pty = true;
    req->pty_cols = (unsigned)cols;
    req->pty_rows = (unsigned)rows;
    return 0;
}

static int parse_fields(const cJSON *root, const struct request_policy *pol,
                        struct exec_request *req, struct sbxd_err *err)
{
    if (!cJSON_IsObject(root))
        return invalid(err, "%s", "request body must be a JSON object");
    if (check_unique_keys(root, "", err) < 0)
        return -1;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!known_field(c->string))
            return unknown_field(c->string, pol, err);
    }
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(root, "command");
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(root, "argv");
    if (cmd && argv)
        return invalid(err, "%s", "give either 'command' or 'argv', not both");
    if (!cmd && !argv)
        return invalid(err, "%s", "'command' (a shell command) or 'argv' (an array) is required");
    if ((cmd ? parse_command(cmd, req, err) : parse_argv(argv, req, err)) < 0)
        return -1;

    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "stdin");
    if (in) {
        if (!cJSON_IsString(in))
            return invalid(err, "'%s' must be a string", "stdin");
        req->stdin_len = strlen(in->valuestring);
        req->stdin_data = (uint8_t *)strdup(in->valuestring);
        if (!req->stdin_data)
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        req->has_stdin = true;
    }

    const cJSON *env = cJSON_GetObjectItemCaseSensitive(root, "env");
    if (env) {
        if (!cJSON_IsObject(env))
            return invalid(err, "'%s' must be an object of strings", "env");
        if (check_unique_keys(env, "env.", err) < 0)
            return -1;
    }
    if (build_env(env, pol, req, err) < 0)
        return -1;

    const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(root, "cwd");
    if (cwd && !cJSON_IsString(cwd))
        return invalid(err, "'%s' must be a string", "cwd");
    if (set_cwd(cwd ? cwd->valuestring : "", pol, req, err) < 0)
        return -1;

    req->timeout_ms = pol->default_timeout_ms;
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(root, "timeout_ms");
    if (to && get_uint(to, "timeout_ms", 1, pol->max_timeout_ms, &req->timeout_ms, err) < 0)
        return -1;

    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(root, "limits");
    if (lim && parse_limits(lim, pol, req, err) < 0)
        return -1;

    req->network = true;
    const cJSON *net = cJSON_GetObjectItemCaseSensitive(root, "network");
    if (net && !cJSON_IsBool(net))
        return invalid(err, "'%s' must be true or false", "network");
    if (net)
        req->network = cJSON_IsTrue(net);

    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(root, "encoding");
    if (enc) {
        if (cJSON_IsString(enc) && strcmp(enc->valuestring, "utf8") == 0)
            req->encoding = EXEC_ENC_UTF8;
        else if (cJSON_IsString(enc) && strcmp(enc->valuestring, "base64") == 0)
            req->encoding = EXEC_ENC_BASE64;
        else
            return invalid(err, "'%s' must be \"utf8\" or \"base64\"", "encoding");
    }

    const cJSON *pty = cJSON_GetObjectItemCaseSensitive(root, "pty");
    if (pty && parse_pty(pty, pol, req, err) < 0)
        return -1;
    return 0;
}

/* Empty, every limit unset: what both parsers fill in. */
static void request_init(struct exec_request *req)
{
    memset(req, 0, sizeof(*req));
    req->limits = (struct exec_limits){EXEC_LIMIT_UNSET,
                                       EXEC_LIMIT_UNSET,
                                       EXEC_LIMIT_UNSET,
                                       EXEC_LIMIT_UNSET,
                                       EXEC_LIMIT_UNSET,
                                       EXEC_LIMIT_UNSET,
                                       0};
}

int exec_request_from_json(const cJSON *obj, const struct request_policy *pol,
                           struct exec_request *req, struct sbxd_err *err)
{
    request_init(req);
    int rc = parse_fields(obj, pol, req, err);
    if (rc < 0)
        exec_request_free(req);
    return rc;
}

int exec_request_parse(const char *body, size_t len, const struct request_policy *pol,
                       struct exec_request *req, struct sbxd_err *err)
{
    request_init(req);
    if (len == 0)
        return invalid(err, "%s", "request body is empty; send a JSON object");
    if (json_check_no_nul(body, len) < 0)
        return invalid(err, "%s", "strings must not contain NUL characters (\\u0000)");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : 0;
        return sbxd_fail(err, SBXD_E_INVALID, 0, "request body is not valid JSON (near byte %zu)",
                         off);
    }
    while (end && end < body + len && strchr(" \t\r\n", *end))
        end++;
    int rc;
    if (end && end < body + len)
        rc = sbxd_fail(err, SBXD_E_INVALID, 0,
                       "request body has data after the JSON value (at byte %zu)",
                       (size_t)(end - body));
    else
        rc = exec_request_from_json(root, pol, req, err);
    cJSON_Delete(root);
    return rc;
}

/* A copy of b as a C string; refused (-1 with err) when it holds a NUL or is not UTF-8. */
static char *bytes_str(const struct exec_bytes *b, const char *what, size_t i, struct sbxd_err *err)
{
    const uint8_t *d = b->data;
    if (b->len && memchr(d, '\0', b->len)) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "%s%.0zu must not contain NUL characters", what, i);
        return NULL;
    }
    if (b->len && utf8_valid(d, b->len) != b->len) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "%s%.0zu is not valid UTF-8", what, i);
        return NULL;
    }
    char *s = malloc(b->len + 1);
    if (!s) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    if (b->len)
        memcpy(s, d, b->len);
    s[b->len] = '\0';
    return s;
}

static bool bytes_eq(const struct exec_bytes *a, const struct exec_bytes *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static int build_argv(const struct exec_bytes *argv, size_t argc, struct exec_request *req,
                      struct sbxd_err *err)
{
    if (argc == 0)
        return invalid(err, "%s", "the command must not be empty");
    if (argc > SBXD_MAX_ARGS)
        return sbxd_fail(err, SBXD_E_INVALID, 0, "the command has more than %d items",
                         SBXD_MAX_ARGS);
    if (argv[0].len == 0)
        return invalid(err, "%s", "the command's first item (the program) must not be empty");
    req->argv = calloc(argc + 1, sizeof(char *));
    if (!req->argv)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0; i < argc; i++)
        if (!(req->argv[i] = bytes_str(&argv[i], "command item ", i + 1, err)))
            return -1;
    req->argc = argc;
    /* /bin/sh -c TEXT is a shell command: logged and listed as "command", as /execute's. */
    req->shell =
        argc == 3 && strcmp(req->argv[0], "/bin/sh") == 0 && strcmp(req->argv[1], "-c") == 0;
    return 0;
}

/* The names of a request that did not come as JSON. */
struct byte_names {
    const struct exec_bytes *names;
    size_t n;
};

static bool bytes_names(const void *ctx, const char *entry, size_t len)
{
    const struct byte_names *b = ctx;
    for (size_t i = 0; i < b->n; i++)
        if (b->names[i].len == len && memcmp(b->names[i].data, entry, len) == 0)
            return true;
    return false;
}

static int build_env_bytes(const struct exec_bytes *names, const struct exec_bytes *values,
                           size_t nenv, const struct request_policy *pol, struct exec_request *req,
                           struct sbxd_err *err)
{
    if (nenv > SBXD_MAX_ENV)
        return sbxd_fail(err, SBXD_E_INVALID, 0, "the environment has more than %d variables",
                         SBXD_MAX_ENV);
    struct byte_names bn = {names, nenv};
    size_t n = 0;
    if (base_env(pol, nenv, bytes_names, &bn, req, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < nenv; i++) {
        bool later = false; /* a name given again later: that one wins */
        for (size_t j = i + 1; j < nenv && !later; j++)
            later = bytes_eq(&names[i], &names[j]);
        if (later)
            continue;
        char *k = bytes_str(&names[i], "an environment variable's name", 0, err);
        if (!k)
            return -1;
        if (!env_name_ok(k)) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "environment variable name '%.64s' is not valid (empty or contains '=')", k);
            free(k);
            return -1;
        }
        char *v = bytes_str(&values[i], "an environment variable's value", 0, err);
        if (!v) {
            free(k);
            return -1;
        }
        req->envp[n] = join_kv(k, v);
        free(k);
        free(v);
        if (!req->envp[n++])
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    return 0;
}

int exec_request_build(const struct request_policy *pol, const struct exec_bytes *argv, size_t argc,
                       const struct exec_bytes *env_names, const struct exec_bytes *env_values,
                       size_t nenv, const struct exec_bytes *cwd, uint64_t timeout_ms,
                       struct exec_request *req, struct sbxd_err *err)
{
    request_init(req);
    req->network = true;
    req->timeout_ms = timeout_ms == 0                    ? pol->default_timeout_ms
                      : timeout_ms > pol->max_timeout_ms ? pol->max_timeout_ms
                                                         : timeout_ms;
    int rc = build_argv(argv, argc, req, err);
    if (rc == 0)
        rc = build_env_bytes(env_names, env_values, nenv, pol, req, err);
    char *c = NULL;
    if (rc == 0 && !(c = bytes_str(cwd, "cwd", 0, err)))
        rc = -1;
    if (rc == 0)
        rc = set_cwd(c, pol, req, err);
    free(c);
    if (rc < 0)
        exec_request_free(req);
    return rc;
}

/* A copy of the NULL-terminated v, or NULL. */
static char **strv_copy(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    char **c = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            while (i)
                free(c[--i]);
            free(c);
            return NULL;
        }
    return c;
}

int exec_request_copy(const struct exec_request *src, struct exec_request *dst,
                      struct sbxd_err *err)
{
    *dst = *src;
    dst->argv = strv_copy(src->argv);
    dst->envp = strv_copy(src->envp);
    dst->cwd = src->cwd ? strdup(src->cwd) : NULL;
    dst->stdin_data = NULL;
    if (src->has_stdin && (dst->stdin_data = malloc(src->stdin_len + 1)))
        memcpy(dst->stdin_data, src->stdin_data, src->stdin_len + 1);
    if (dst->argv && dst->envp && (dst->cwd || !src->cwd) && (dst->stdin_data || !src->has_stdin))
        return 0;
    exec_request_free(dst);
    return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
}

int exec_request_setenv(struct exec_request *req, const char *entry, struct sbxd_err *err)
{
    size_t nl = strcspn(entry, "=");
    size_t n = 0;
    while (req->envp && req->envp[n])
        n++;
    size_t at = 0;
    while (at < n && !(strncmp(req->envp[at], entry, nl) == 0 && req->envp[at][nl] == '='))
        at++;
    char *e = strdup(entry);
    char **v = at < n ? req->envp : realloc(req->envp, (n + 2) * sizeof(char *));
    if (!e || !v) {
        free(e);
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    req->envp = v;
    if (at < n)
        free(v[at]);
    else
        v[n + 1] = NULL;
    v[at] = e;
    return 0;
}

static void free_strv(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

void exec_request_free(struct exec_request *req)
{
    free_strv(req->argv);
    free_strv(req->envp);
    free(req->cwd);
    free(req->stdin_data);
    memset(req, 0, sizeof(*req));
}

/* The shell's builtins and reserved words (dash's, and POSIX's): exec cannot run them. */
static const char *const shell_own_words[] = {
    ".",        ":",        "[",      "alias", "bg",      "break", "case",   "cd",    "chdir",
    "command",  "continue", "do",     "done",  "echo",    "elif",  "else",   "esac",  "eval",
    "exec",     "exit",     "export", "false", "fc",      "fg",    "fi",     "for",   "getopts",
    "hash",     "if",       "in",     "jobs",  "kill",    "local", "printf", "pwd",   "read",
    "readonly", "return",   "set",    "shift", "source",  "test",  "then",   "times", "trap",
    "true",     "type",     "ulimit", "umask", "unalias", "unset", "until",  "wait",  "while",
};

/* Whether text is one simple command: words of plain characters, '...' and "..." without
 * $ ` \ inside; the first word plain, no assignment, not the shell's own. */
static bool shell_simple(const char *text)
{
    static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                "0123456789_@%+=:,./-";
    const char *p = text + strspn(text, " \t");
    size_t first = strspn(p, plain);
    if (!first || (p[first] && p[first] != ' ' && p[first] != '\t') || memchr(p, '=', first))
        return false;
    for (size_t i = 0; i < sizeof(shell_own_words) / sizeof(shell_own_words[0]); i++)
        if (strlen(shell_own_words[i]) == first && strncmp(p, shell_own_words[i], first) == 0)
            return false;
    for (p += first; *p;) {
        if (*p == '\'') {
            const char *q = strchr(p + 1, '\'');
            if (!q)
                return false;
            p = q + 1;
        } else if (*p == '"') {
            size_t k = strcspn(p + 1, "\"$`\\");
            if (p[1 + k] != '"')
                return false;
            p += k + 2;
        } else if (*p == ' ' || *p == '\t' || strchr(plain, *p)) {
            p++;
        } else {
            return false;
        }
    }
    return true;
}

int exec_request_exec_simple(struct exec_request *req)
{
    if (!req->shell || req->argc != 3 || req->shell_prefix || !shell_simple(req->argv[2]))
        return 0;
    size_t n = strlen(req->argv[2]);
    char *t = malloc(n + 6);
    if (!t)
        return -1;
    memcpy(t, "exec ", 5);
    memcpy(t + 5, req->argv[2], n + 1);
    free(req->argv[2]);
    req->argv[2] = t;
    req->shell_prefix = 5;
    return 0;
}

void exec_request_text(const struct exec_request *req, char *out, size_t len)
{
    if (!len)
        return;
    size_t n = 0;
    size_t from = req->shell ? 2 : 0; /* for "command", the shell text itself */
    out[0] = '\0';
    for (size_t i = from; i < req->argc && n + 1 < len; i++) {
        const char *a = req->argv[i] + (req->shell && i == 2 ? req->shell_prefix : 0);
        int w = snprintf(out + n, len - n, "%s%s", i > from ? " " : "", a);
        n += w > 0 ? (size_t)w : 0;
    }
}
