/*
 * fuzz_request - the /execute and /processes request decoder (src/exec/request.c).
 *
 * Input: one byte that picks the policy, then the JSON body. Bit 0 picks the route: /execute
 * (no pty) or /processes (pty allowed, the longest timeout by default). Bit 1 gives a
 * workspace of "/" (every absolute cwd is inside it), bit 2 takes the memory and pids
 * maxima away. A body the decoder accepts must describe a command that can be run as it
 * stands; one it refuses must leave nothing to free and say why.
 *
 * The body's UTF-8 check (utf8_valid, which server.c applies to every JSON body first) must
 * agree with the decoder (utf8_decode) on where the body stops being UTF-8; and a valid body
 * the request decoder accepts must give strings that are UTF-8 too (JSON's escapes included:
 * a lone surrogate escape must never come out as bytes).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/exec_limits.h"
#include "sbxd/request.h"
#include "sbxd/utf8.h"

#include "fuzz.h"

static void check_strv(char **v, size_t n_expected, bool env)
{
    check(v != NULL);
    size_t n = 0;
    for (; v[n]; n++)
        if (env)
            check(strchr(v[n], '=') != NULL && v[n][0] != '=');
    if (n_expected)
        check(n == n_expected);
}

/* Where decoding one sequence at a time first fails: the reference for utf8_valid. */
static size_t first_invalid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = utf8_decode(s + i, n - i);
        if (k <= 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

static bool is_utf8(const char *s)
{
    size_t n = strlen(s);
    return utf8_valid((const uint8_t *)s, n) == n;
}

static void check_strings_utf8(const struct exec_request *req)
{
    for (size_t i = 0; req->argv[i]; i++)
        check(is_utf8(req->argv[i]));
    for (size_t i = 0; req->envp[i]; i++)
        check(is_utf8(req->envp[i]));
    check(is_utf8(req->cwd));
    if (req->has_stdin)
        check(is_utf8((const char *)req->stdin_data));
}

static void check_request(const struct exec_request *req, const struct request_policy *pol)
{
    check_strv(req->argv, req->argc, false);
    check(req->argc >= 1 && req->argv[0][0] != '\0');
    if (req->shell)
        check(req->argc == 3 && strcmp(req->argv[0], "/bin/sh") == 0);
    check_strv(req->envp, 0, true);
    check(req->cwd != NULL);
    check(req->timeout_ms >= 1 && req->timeout_ms <= pol->max_timeout_ms);
    if (req->has_stdin)
        check(req->stdin_data && strlen((const char *)req->stdin_data) == req->stdin_len);
    else
        check(req->stdin_data == NULL && req->stdin_len == 0);
    if (req->pty)
        check(pol->allow_pty && req->pty_cols >= 1 && req->pty_cols <= SBXD_PTY_MAX &&
              req->pty_rows >= 1 && req->pty_rows <= SBXD_PTY_MAX);
    const struct exec_limits *l = &req->limits;
    if (pol->max_memory_bytes && l->memory_bytes != EXEC_LIMIT_UNSET)
        check(l->memory_bytes <= pol->max_memory_bytes);
    if (pol->max_pids && l->pids != EXEC_LIMIT_UNSET)
        check(l->pids <= pol->max_pids);
    check(l->cpu_quota == 0 || (l->cpu_quota >= 0.01 && l->cpu_quota <= pol->max_cpu_quota));

    /* The audit log's text of it, cut short and at full length. */
    char small[8], big[512];
    exec_request_text(req, small, sizeof(small));
    check(strlen(small) < sizeof(small));
    exec_request_text(req, big, sizeof(big));
    check(strlen(big) < sizeof(big));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct request_policy pol;
    fuzz_policy(data[0], &pol);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    size_t valid = utf8_valid((const uint8_t *)body, len);
    check(valid == first_invalid((const uint8_t *)body, len));
    check(utf8_valid(data, size) == first_invalid(data, size));

    int clean = json_check_no_nul(body, len);
    (void)json_check_no_nul((const char *)data, size);

    struct exec_request req;
    struct sbxd_err err = {0};
    if (exec_request_parse(body, len, &pol, &req, &err) == 0) {
        check(clean == 0); /* no NUL can reach a C string of the request */
        check_request(&req, &pol);
        if (valid == len)
            check_strings_utf8(&req);
        exec_request_free(&req);
    } else {
        check(err.kind != SBXD_E_NONE && memchr(err.msg, '\0', sizeof(err.msg)) && err.msg[0]);
        check(req.argv == NULL && req.envp == NULL && req.cwd == NULL && req.stdin_data == NULL);
    }
    return 0;
}
