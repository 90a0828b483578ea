/*
 * sbx, the command-line client: the real binary run as a child process against the shared
 * sbxd, its stdout, stderr and exit status checked byte for byte. Everything it does goes over
 * HTTP, so these tests hold with sbxd inside gVisor too.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

extern char **environ;

/* The client under test: the build's, unless SBX_BIN says otherwise (as for SBXD_BIN). */
static const char *sbx_bin(void)
{
    const char *p = getenv("SBX_BIN");
    return p && *p ? p : SBX_BIN;
}

static const char *sbxd_url(void)
{
    static char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", g_sbxd.port);
    return url;
}

/* What a run of sbx gave. */
struct run {
    int code; /* exit status, or 128+N when killed by signal N */
    char *out, *err;
    size_t out_len, err_len;
    double ms;           /* from start to exit */
    double first_out_ms; /* when stdout's first byte came (-1: never) */
};

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* A running sbx: stdout and stderr on pipes. */
struct child {
    pid_t pid;
    int out, err;
    double t0;
};

/* argv words (NULL-terminated) to an array: SBX_BIN [--url URL] words... */
static int build_argv(const char **argv, int max, bool with_url, const char *const *words)
{
    int n = 0;
    argv[n++] = sbx_bin();
    if (with_url) {
        argv[n++] = "--url";
        argv[n++] = sbxd_url();
    }
    for (int i = 0; words[i] && n < max - 1; i++)
        argv[n++] = words[i];
    argv[n] = NULL;
    return n;
}

/*
 * Start sbx with these words; stdin from stdin_fd (-1: /dev/null), stderr on a pipe unless
 * err_fd >= 0 (a terminal, for the progress bar). SBX_URL is taken out of the environment
 * and set to env_url when that is given.
 */
static void child_start(struct child *c, const char *const *words, bool with_url, int stdin_fd,
                        int err_fd, const char *env_url)
{
    const char *argv[64];
    build_argv(argv, 64, with_url, words);
    char *envp[256];
    int n = 0;
    for (char **e = environ; *e && n < 250; e++)
        if (strncmp(*e, "SBX_URL=", 8) != 0)
            envp[n++] = *e;
    static char url_env[256];
    if (env_url) {
        snprintf(url_env, sizeof(url_env), "SBX_URL=%s", env_url);
        envp[n++] = url_env;
    }
    envp[n] = NULL;
    int out[2], err[2] = {-1, -1};
    ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
    if (err_fd < 0)
        ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
    c->t0 = now_ms();
    c->pid = fork();
    ck_assert_int_ge(c->pid, 0);
    if (c->pid == 0) {
        int in = stdin_fd >= 0 ? stdin_fd : open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(out[1], 1);
        dup2(err_fd >= 0 ? err_fd : err[1], 2);
        execve(argv[0], (char *const *)argv, envp);
        _exit(126);
    }
    close(out[1]);
    c->out = out[0];
    c->err = -1;
    if (err_fd < 0) {
        close(err[1]);
        c->err = err[0];
    }
}

/* Read both outputs to their end (within ms, scaled, else kill it and fail) and reap it. */
static void child_wait(struct child *c, struct run *r, int ms)
{
    memset(r, 0, sizeof(*r));
    r->first_out_ms = -1;
    FILE *o = open_memstream(&r->out, &r->out_len), *e = open_memstream(&r->err, &r->err_len);
    double end = now_ms() + ms * SLOW;
    struct pollfd p[2] = {{.fd = c->out, .events = POLLIN}, {.fd = c->err, .events = POLLIN}};
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(p, 2, left) == 0) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, NULL, 0);
            ck_abort_msg("sbx still running after %d ms", ms);
        }
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            char buf[65536];
            ssize_t k = read(p[i].fd, buf, sizeof(buf));
            if (k > 0 && i == 0 && r->first_out_ms < 0)
                r->first_out_ms = now_ms() - c->t0;
            if (k > 0)
                fwrite(buf, 1, (size_t)k, i == 0 ? o : e);
            else if (k == 0 || errno != EINTR) {
                close(p[i].fd);
                p[i].fd = -1;
            }
        }
    }
    int st;
    ck_assert_int_eq(waitpid(c->pid, &st, 0), c->pid);
    r->ms = now_ms() - c->t0;
    r->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    fclose(o);
    fclose(e);
}

/* Run sbx --url <the shared sbxd> words... to its end. */
static void sbx_words(struct run *r, int stdin_fd, const char *const *words)
{
    struct child c;
    child_start(&c, words, true, stdin_fd, -1, NULL);
    child_wait(&c, r, 60000);
}

#define SBX(r, ...)        sbx_words((r), -1, (const char *const[]){__VA_ARGS__, NULL})
#define SBX_IN(r, fd, ...) sbx_words((r), (fd), (const char *const[]){__VA_ARGS__, NULL})

/* An fd to read these bytes from (a deleted temporary file). */
static int bytes_fd(const void *p, size_t n)
{
    char path[] = "/tmp/sbx-it-in-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
    ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

static void assert_bytes(const char *what, const char *got, size_t got_len, const void *want,
                         size_t want_len)
{
    ck_assert_msg(got_len == want_len && memcmp(got, want, want_len) == 0,
                  "%s: %zu bytes, expected %zu: '%.*s'", what, got_len, want_len, (int)got_len,
                  got);
}

#define ASSERT_OUT(r, lit) assert_bytes("stdout", (r)->out, (r)->out_len, lit, sizeof(lit) - 1)
#define ASSERT_ERR(r, lit) assert_bytes("stderr", (r)->err, (r)->err_len, lit, sizeof(lit) - 1)

/* One line on stderr, starting "sbx: ", holding sub (if given). */
static void assert_one_line_error(const struct run *r, const char *sub)
{
    ck_assert_msg(r->err_len > 6 && strncmp(r->err, "sbx: ", 5) == 0, "stderr: '%s'", r->err);
    ck_assert_msg(strchr(r->err, '\n') == r->err + r->err_len - 1, "not one line: '%s'", r->err);
    if (sub)
        ck_assert_msg(strstr(r->err, sub), "no '%s' in: %s", sub, r->err);
}

/*
 * What tests leave behind is removed by the runner, after each test case, whether its tests
 * passed or not (a failed assertion ends a forked test with _exit: no atexit, no checked
 * teardown). So tests keep their remote paths under sbx-it/, their local directories under
 * local_prefix, and mark the commands of their background processes with BG_MARK.
 */
#define BG_MARK ": sbx-it; "
static char local_prefix[64];

static void cleanup_setup(void)
{
    snprintf(local_prefix, sizeof(local_prefix), "/tmp/sbx-it-%d-", (int)getpid());
}

static void cleanup_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s*", local_prefix);
    if (system(cmd) != 0)
        fprintf(stderr, "sbx tests: could not remove %s*\n", local_prefix);
    struct http_resp h;
    http_request(&g_sbxd, "DELETE", "/files/sbx-it?recursive=true", NULL, NULL, 0, 30000, &h);
    http_resp_free(&h);
    if (http_request(&g_sbxd, "GET", "/processes", NULL, NULL, 0, 30000, &h) == 0) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(h.json, "processes"))
        {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(p, "command");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(p, "id");
            if (!cJSON_IsString(c) || !cJSON_IsString(id) ||
                strncmp(c->valuestring, BG_MARK, strlen(BG_MARK)) != 0)
                continue;
            char path[128];
            struct http_resp d;
            snprintf(path, sizeof(path), "/processes/%s", id->valuestring);
            http_request(&g_sbxd, "DELETE", path, NULL, NULL, 0, 30000, &d);
            http_resp_free(&d);
        }
    }
    http_resp_free(&h);
}

/* A fresh local directory. */
static void local_dir(char *out, size_t len)
{
    ck_assert_uint_lt((size_t)snprintf(out, len, "%sXXXXXX", local_prefix), len);
    ck_assert_ptr_nonnull(mkdtemp(out));
}

static void rm_rf(const char *path)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
}

/* How many entries a local directory has (. and .. aside). */
static int dir_entries(const char *path)
{
    char cmd[PATH_MAX + 64], buf[32] = "";
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", path);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
    pclose(f);
    return atoi(buf);
}

static char *read_local(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *p = NULL;
    FILE *m = open_memstream(&p, len);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(f);
    fclose(m);
    return p;
}

static void write_local(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* n bytes of every value, in an order that repeats rarely. */
static unsigned char *binary_bytes(size_t n)
{
    unsigned char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

/* sbxd's message for GET path (an error answer), for comparing with what sbx printed. */
static char *server_message(const char *method, const char *path)
{
    struct http_resp h;
    ck_assert_int_eq(http_request(&g_sbxd, method, path, NULL, NULL, 0, 30000, &h), 0);
    ck_assert_msg(h.status >= 400, "%s %s: %ld", method, path, h.status);
    char *m = strdup(jstr(h.json, "message"));
    http_resp_free(&h);
    return m;
}

/* The status of GET path over HTTP. */
static long http_status(const char *method, const char *path)
{
    struct http_resp h;
    ck_assert_int_eq(http_request(&g_sbxd, method, path, NULL, NULL, 0, 30000, &h), 0);
    long s = h.status;
    http_resp_free(&h);
    return s;
}

/* ------------------------------------------------------------------ exec, run */

START_TEST(exec_gives_exact_bytes_and_the_exit_code)
{
    struct run r;
    /* Bytes that are not UTF-8, a NUL, no final newline: all must come through unchanged. */
    SBX(&r, "exec", "--", "sh", "-c",
        "printf 'a\\000b\\377\\n'; printf 'e\\200rr\\376' >&2; exit 7");
    ck_assert_int_eq(r.code, 7);
    ASSERT_OUT(&r, "a\0b\377\n");
    ASSERT_ERR(&r, "e\200rr\376");
    run_free(&r);

    SBX(&r, "exec", "true");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.out_len + r.err_len, 0);
    run_free(&r);

    /* A large output: more than one pipe's worth, every byte. */
    SBX(&r, "exec", "--", "head", "-c", "300000", "/dev/zero");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.out_len, 300000);
    run_free(&r);
}
END_TEST

START_TEST(exec_passes_argv_env_and_cwd_as_given)
{
    struct run r;
    SBX(&r, "mkdir", "sbx-it/exec/sub dir");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    /* No shell: spaces, $ and * reach the program as they are. Options stop at CMD, so "-c"
     * and "--env" after it are the program's. */
    SBX(&r, "exec", "--env", "FOO=bar baz", "-e", "EMPTY=", "--cwd", "sbx-it/exec/sub dir", "sh",
        "-c", "printf '%s|' \"$FOO\" \"$EMPTY\" \"$1\" \"$2\" \"${PWD##*/}\"", "x", "a b $HOME *",
        "--env");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "bar baz||a b $HOME *|--env|sub dir|");
    run_free(&r);
    /* --env given twice: the last wins (sbxd itself refuses duplicate keys). */
    SBX(&r, "exec", "-e", "V=1", "-e", "V=2", "--", "sh", "-c", "echo $V");
    ASSERT_OUT(&r, "2\n");
    run_free(&r);
    /* --stdin: sbx's stdin becomes the command's. */
    int fd = bytes_fd("one\ntwo\n", 8);
    SBX_IN(&r, fd, "exec", "--stdin", "--", "wc", "-l");
    close(fd);
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "2\n");
    run_free(&r);
    SBX(&r, "rm", "-r", "sbx-it/exec");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
}
END_TEST

START_TEST(exec_says_why_a_command_did_not_simply_exit)
{
    struct run r;
    SBX(&r, "exec", "--timeout", "300", "--", "sleep", "30");
    ck_assert_int_eq(r.code, 137);
    assert_one_line_error(&r, "sbx: command timed out after 300 ms");
    ck_assert_msg(r.ms < 5000 * SLOW, "took %.0f ms", r.ms);
    run_free(&r);

    SBX(&r, "exec", "--timeout", "1s", "--stream", "--", "sleep", "30");
    ck_assert_int_eq(r.code, 137);
    assert_one_line_error(&r, "timed out after 1000 ms");
    run_free(&r);

    SBX(&r, "exec", "--", "/no/such/program");
    ck_assert_int_eq(r.code, 127);
    assert_one_line_error(&r, "sbx: command failed to start: ");
    ck_assert_msg(strstr(r.err, "/no/such/program"), "%s", r.err);
    run_free(&r);

    SBX(&r, "run", "kill -KILL $$");
    ck_assert_int_eq(r.code, 137);
    assert_one_line_error(&r, "sbx: command killed by SIGKILL");
    run_free(&r);
}
END_TEST

START_TEST(exec_stream_writes_output_as_it_comes)
{
    struct run r;
    SBX(&r, "exec", "--stream", "--", "sh", "-c", "echo first; sleep 1; echo second; exit 4");
    ck_assert_int_eq(r.code, 4);
    ASSERT_OUT(&r, "first\nsecond\n");
    ck_assert_uint_eq(r.err_len, 0);
    /* The first line came while the command slept, not with its end. */
    ck_assert_msg(r.first_out_ms >= 0 && r.first_out_ms + 600 < r.ms,
                  "first output after %.0f ms, exit after %.0f ms", r.first_out_ms, r.ms);
    run_free(&r);

    /* Exact bytes through the events too, on both streams. */
    SBX(&r, "exec", "-s", "--", "sh", "-c", "printf '\\377\\000x'; printf 'y\\376' >&2");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "\377\0x");
    ASSERT_ERR(&r, "y\376");
    run_free(&r);

    /* Everything, also past what the synchronous answer keeps (1 MiB by default). */
    SBX(&r, "exec", "--stream", "--", "head", "-c", "3000000", "/dev/zero");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.out_len, 3000000);
    run_free(&r);
}
END_TEST

START_TEST(run_takes_a_shell_string)
{
    struct run r;
    SBX(&r, "run", "echo $((6 * 7)) | tr 4 x; echo err >&2; exit 5");
    ck_assert_int_eq(r.code, 5);
    ASSERT_OUT(&r, "x2\n");
    ASSERT_ERR(&r, "err\n");
    run_free(&r);

    SBX(&r, "run", "--stream", "--timeout", "10s", "printf 'a\\377'; exit 3");
    ck_assert_int_eq(r.code, 3);
    ASSERT_OUT(&r, "a\377");
    run_free(&r);
}
END_TEST

START_TEST(server_errors_are_one_line_with_its_message)
{
    struct run r;
    /* sbxd refuses a cwd that does not exist: its message, verbatim, and the status. */
    SBX(&r, "exec", "--cwd", "sbx-no-such-dir", "--", "true");
    ck_assert_int_eq(r.code, 125);
    const char *body = "{\"command\":\"true\",\"cwd\":\"sbx-no-such-dir\"}";
    struct http_resp h;
    ck_assert_int_eq(http_request(&g_sbxd, "POST", "/execute", NULL, body, strlen(body), 30000, &h),
                     0);
    char want[512];
    snprintf(want, sizeof(want), "sbx: exec: %s (HTTP 400)\n", jstr(h.json, "message"));
    http_resp_free(&h);
    assert_bytes("stderr", r.err, r.err_len, want, strlen(want));
    ck_assert_uint_eq(r.out_len, 0);
    run_free(&r);
}
END_TEST

/* ------------------------------------------------------------------ files */

START_TEST(put_and_get_round_trip_a_large_binary_file)
{
    char dir[64], src[128], dst[128];
    local_dir(dir, sizeof(dir));
    snprintf(src, sizeof(src), "%s/src.bin", dir);
    snprintf(dst, sizeof(dst), "%s/dst.bin", dir);
    size_t n = 5u << 20;
    unsigned char *data = binary_bytes(n);
    write_local(src, data, n);

    struct run r;
    SBX(&r, "put", src, "sbx-it/rt/deep/er/file.bin");
    ck_assert_int_eq(r.code, 0);
    /* Quiet on success, and no progress bar: stderr is not a terminal. */
    ck_assert_uint_eq(r.out_len + r.err_len, 0);
    run_free(&r);
    /* sbxd has the same bytes. */
    struct http_resp h;
    ck_assert_int_eq(
        http_request(&g_sbxd, "GET", "/files/sbx-it/rt/deep/er/file.bin", NULL, NULL, 0, 30000, &h),
        0);
    ck_assert_int_eq(h.status, 200);
    assert_bytes("on sbxd", h.body, h.len, data, n);
    http_resp_free(&h);

    SBX(&r, "get", "sbx-it/rt/deep/er/file.bin", dst);
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.out_len + r.err_len, 0);
    run_free(&r);
    size_t len;
    char *got = read_local(dst, &len);
    assert_bytes("downloaded", got, len, data, n);
    free(got);
    ck_assert_int_eq(dir_entries(dir), 2); /* no temporary file left beside it */

    /* To stdout. */
    SBX(&r, "get", "sbx-it/rt/deep/er/file.bin", "-");
    ck_assert_int_eq(r.code, 0);
    assert_bytes("stdout", r.out, r.out_len, data, n);
    run_free(&r);

    /* From stdin (sent chunked, size unknown). */
    int fd = bytes_fd(data, n);
    SBX_IN(&r, fd, "put", "-", "sbx-it/rt/from-stdin.bin");
    close(fd);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    SBX(&r, "get", "sbx-it/rt/from-stdin.bin", "-");
    assert_bytes("stdin round trip", r.out, r.out_len, data, n);
    run_free(&r);

    /* REMOTE ending in '/' and LOCAL a directory: the file's own name, as cp does. An empty
     * file comes back empty. */
    char empty[128];
    snprintf(empty, sizeof(empty), "%s/empty.txt", dir);
    write_local(empty, "", 0);
    SBX(&r, "put", "--mode", "0600", empty, "sbx-it/rt/");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    ck_assert_int_eq(unlink(empty), 0);
    SBX(&r, "get", "sbx-it/rt/empty.txt", dir);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    struct stat st;
    ck_assert_int_eq(stat(empty, &st), 0);
    ck_assert_int_eq(st.st_size, 0);
    SBX(&r, "ls", "sbx-it/rt/empty.txt");
    ck_assert_msg(strncmp(r.out, "0600 ", 5) == 0, "%s", r.out);
    run_free(&r);

    SBX(&r, "rm", "-r", "sbx-it/rt");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    free(data);
    rm_rf(dir);
}
END_TEST

START_TEST(a_failed_get_leaves_no_partial_file)
{
    char dir[64], dst[128];
    local_dir(dir, sizeof(dir));
    snprintf(dst, sizeof(dst), "%s/out.bin", dir);
    struct run r;
    SBX(&r, "get", "sbx-it/missing/nothing.bin", dst);
    ck_assert_int_eq(r.code, 125);
    char *msg = server_message("GET", "/files/sbx-it/missing/nothing.bin");
    char want[512];
    snprintf(want, sizeof(want), "sbx: get: %s (HTTP 404)\n", msg);
    free(msg);
    assert_bytes("stderr", r.err, r.err_len, want, strlen(want));
    run_free(&r);
    ck_assert_int_eq(dir_entries(dir), 0);

    /* An existing LOCAL keeps its content when the download fails. */
    write_local(dst, "old", 3);
    SBX(&r, "get", "sbx-it/missing/nothing.bin", dst);
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    size_t len;
    char *got = read_local(dst, &len);
    assert_bytes("kept", got, len, "old", 3);
    free(got);
    ck_assert_int_eq(dir_entries(dir), 1);

    /* A directory is not a file to download. */
    SBX(&r, "mkdir", "sbx-it/adir");
    run_free(&r);
    SBX(&r, "get", "sbx-it/adir", dst);
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "is a directory");
    run_free(&r);
    got = read_local(dst, &len);
    assert_bytes("kept", got, len, "old", 3);
    free(got);
    ck_assert_int_eq(dir_entries(dir), 1);

    /* Out of the workspace: sbxd's 403, with the path sent as written. */
    SBX(&r, "get", "../etc/passwd", dst);
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 403)");
    run_free(&r);
    SBX(&r, "rm", "sbx-it/adir");
    run_free(&r);
    rm_rf(dir);
}
END_TEST

/* A server that promises a large file and closes the connection after a part of it, as a
 * network failure or a killed sbxd would. */
struct cut_server {
    int fd;
    int port;
    pthread_t thread;
};

static void *cut_serve(void *arg)
{
    struct cut_server *cs = arg;
    struct pollfd p = {.fd = cs->fd, .events = POLLIN};
    if (poll(&p, 1, 30000) != 1)
        return NULL; /* sbx never came: its test fails on its own */
    int c = accept(cs->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    char req[4096];
    ssize_t got = read(c, req, sizeof(req)); /* the request: one read is enough for a GET */
    (void)got;
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                               "Content-Length: 1048576\r\n\r\n";
    static char part[65536];
    memset(part, 'x', sizeof(part));
    if (write(c, head, sizeof(head) - 1) > 0 && write(c, part, sizeof(part)) > 0)
        usleep(100000);
    close(c);
    return NULL;
}

START_TEST(an_interrupted_get_leaves_no_partial_file)
{
    struct cut_server cs;
    cs.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    ck_assert_int_eq(bind(cs.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(cs.fd, 1), 0);
    ck_assert_int_eq(getsockname(cs.fd, (struct sockaddr *)&a, &alen), 0);
    ck_assert_int_eq(pthread_create(&cs.thread, NULL, cut_serve, &cs), 0);

    char dir[64], dst[128], url[64];
    local_dir(dir, sizeof(dir));
    snprintf(dst, sizeof(dst), "%s/f.bin", dir);
    write_local(dst, "old", 3);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    const char *words[] = {"--url", url, "get", "f.bin", dst, NULL};
    struct child c;
    child_start(&c, words, false, -1, -1, NULL);
    struct run r;
    child_wait(&c, &r, 30000);
    pthread_join(cs.thread, NULL);
    close(cs.fd);
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "sbx: get: ");
    run_free(&r);
    /* The old file as it was, and nothing beside it. */
    size_t len;
    char *got = read_local(dst, &len);
    assert_bytes("kept", got, len, "old", 3);
    free(got);
    ck_assert_int_eq(dir_entries(dir), 1);
    rm_rf(dir);
}
END_TEST

START_TEST(put_r_and_get_r_move_whole_trees)
{
    char dir[64], cmd[1024];
    local_dir(dir, sizeof(dir));
    snprintf(cmd, sizeof(cmd),
             "cd %s && mkdir -p src/sub/empty && printf one > src/a && printf two > "
             "'src/sub/b c' && ln -s ../a src/sub/link && chmod 0750 src/sub && "
             "head -c 2000000 /dev/urandom > src/big",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    char src[128], back[128];
    snprintf(src, sizeof(src), "%s/src", dir);
    snprintf(back, sizeof(back), "%s/back", dir);
    struct run r;
    SBX(&r, "put", "-r", src, "sbx-it/tree");
    ck_assert_msg(r.code == 0, "%d %.*s", r.code, (int)r.err_len, r.err);
    ck_assert_uint_eq(r.out_len + r.err_len, 0);
    run_free(&r);
    struct http_resp h;
    http_reqf(&g_sbxd, &h, "GET", NULL, "/files/sbx-it/tree/sub/link?stat=true&follow=false");
    ck_assert_int_eq(h.status, 200);
    ck_assert_str_eq(jstr(h.json, "symlink_target"), "../a");
    http_resp_free(&h);
    SBX(&r, "get", "-r", "sbx-it/tree", back);
    ck_assert_msg(r.code == 0, "%d %.*s", r.code, (int)r.err_len, r.err);
    run_free(&r);
    snprintf(cmd, sizeof(cmd),
             "diff -r --no-dereference %s %s && test \"$(stat -c %%a %s/sub)\" = 750 && "
             "test -d %s/sub/empty",
             src, back, back, back);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    /* A link out of the workspace: refused, nothing made there, sbx says why. */
    snprintf(cmd, sizeof(cmd), "ln -s /etc %s/src/out", dir);
    ck_assert_int_eq(system(cmd), 0);
    SBX(&r, "put", "-r", src, "sbx-it/tree2");
    ck_assert_int_eq(r.code, 125);
    ck_assert_msg(r.err_len && strstr(r.err, "leaves the workspace"), "%.*s", (int)r.err_len,
                  r.err);
    run_free(&r);
    http_reqf(&g_sbxd, &h, "GET", NULL, "/files/sbx-it/tree2?stat=true");
    ck_assert_int_eq(h.status, 404);
    http_resp_free(&h);
    /* --replace: the remote becomes the local tree. */
    snprintf(cmd, sizeof(cmd), "rm %s/src/out %s/src/a", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    SBX(&r, "put", "-r", "--replace", src, "sbx-it/tree");
    ck_assert_msg(r.code == 0, "%d %.*s", r.code, (int)r.err_len, r.err);
    run_free(&r);
    http_reqf(&g_sbxd, &h, "GET", NULL, "/files/sbx-it/tree/a?stat=true");
    ck_assert_int_eq(h.status, 404);
    http_resp_free(&h);
    SBX(&r, "put", "-r", "-", "x");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(paths_with_reserved_characters_work)
{
    /* ' ', '%', '#', '?' and a non-ASCII byte: each would change the URL if not encoded. */
    const char *name = "sbx-it/odd/a b%41#x?y=1&z\xc3\xa9.txt";
    char dir[64], src[128];
    local_dir(dir, sizeof(dir));
    snprintf(src, sizeof(src), "%s/f", dir);
    write_local(src, "content\n", 8);
    struct run r;
    SBX(&r, "put", src, name);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    /* sbxd has it under exactly that name. */
    ck_assert_int_eq(http_status("GET", "/files/sbx-it/odd/a%20b%2541%23x%3Fy%3D1%26z%C3%A9.txt"),
                     200);
    SBX(&r, "ls", "sbx-it/odd");
    ck_assert_msg(strstr(r.out, "  a b%41#x?y=1&z\xc3\xa9.txt\n"), "%s", r.out);
    run_free(&r);
    SBX(&r, "get", name, "-");
    ASSERT_OUT(&r, "content\n");
    run_free(&r);
    SBX(&r, "rm", name);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    ck_assert_int_eq(http_status("GET", "/files/sbx-it/odd/a%20b%2541%23x%3Fy%3D1%26z%C3%A9.txt"),
                     404);
    SBX(&r, "rm", "sbx-it/odd");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    rm_rf(dir);
}
END_TEST

/* One line of sbx ls. */
struct row {
    char mode[8], time[32], name[256];
    long long size;
};

/* Parse the lines of out into rows; returns how many lines (asserts each is a row). */
static int ls_rows(const char *out, struct row *rows, int max)
{
    int n = 0;
    for (const char *p = out; *p; n++) {
        const char *nl = strchr(p, '\n');
        ck_assert_msg(nl && n < max, "%s", out);
        struct row *w = &rows[n];
        int used = 0;
        ck_assert_msg(sscanf(p, "%7s %lld %31s %n", w->mode, &w->size, w->time, &used) == 3 &&
                          used > 0,
                      "not a row: %.*s", (int)(nl - p), p);
        snprintf(w->name, sizeof(w->name), "%.*s", (int)(nl - p - used), p + used);
        p = nl + 1;
    }
    return n;
}

START_TEST(ls_lists_a_directory_and_shows_a_file)
{
    struct run r;
    int fd = bytes_fd("12345", 5);
    SBX_IN(&r, fd, "put", "-", "sbx-it/ls/b.txt");
    close(fd);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    fd = bytes_fd("", 0);
    SBX_IN(&r, fd, "put", "-", "sbx-it/ls/a.txt");
    close(fd);
    run_free(&r);
    SBX(&r, "mkdir", "sbx-it/ls/sub");
    run_free(&r);

    SBX(&r, "ls", "sbx-it/ls");
    ck_assert_int_eq(r.code, 0);
    /* Sorted by name, one line each: mode, size, time, name ('/' after a directory). */
    struct row rows[4];
    ck_assert_int_eq(ls_rows(r.out, rows, 4), 3);
    ck_assert_str_eq(rows[0].name, "a.txt");
    ck_assert_str_eq(rows[1].name, "b.txt");
    ck_assert_str_eq(rows[2].name, "sub/");
    ck_assert_int_eq(rows[0].size, 0);
    ck_assert_int_eq(rows[1].size, 5);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(strlen(rows[i].mode) == 4 && rows[i].mode[0] == '0', "%s", r.out);
        ck_assert_msg(strlen(rows[i].time) == 24 && rows[i].time[23] == 'Z', "%s", r.out);
    }
    ck_assert_int_eq(rows[2].mode[1], '7');
    run_free(&r);

    /* A file: its own line, named as asked. */
    SBX(&r, "ls", "sbx-it/ls/b.txt");
    ck_assert_int_eq(r.code, 0);
    ck_assert_int_eq(ls_rows(r.out, rows, 4), 1);
    ck_assert_str_eq(rows[0].name, "sbx-it/ls/b.txt");
    ck_assert_int_eq(rows[0].size, 5);
    run_free(&r);

    /* The root, by default. */
    SBX(&r, "ls");
    ck_assert_int_eq(r.code, 0);
    ck_assert_msg(strstr(r.out, " sbx-it/\n"), "%s", r.out);
    run_free(&r);

    SBX(&r, "ls", "sbx-it/ls/nope");
    ck_assert_int_eq(r.code, 125);
    char *msg = server_message("GET", "/files/sbx-it/ls/nope");
    assert_one_line_error(&r, msg);
    free(msg);
    ck_assert_uint_eq(r.out_len, 0);
    run_free(&r);
    SBX(&r, "rm", "-r", "sbx-it/ls");
    run_free(&r);
}
END_TEST

START_TEST(rm_and_mkdir)
{
    struct run r;
    SBX(&r, "mkdir", "sbx-it/rm/x/y/z", "sbx-it/rm/w");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.out_len + r.err_len, 0);
    run_free(&r);
    ck_assert_int_eq(http_status("HEAD", "/files/sbx-it/rm/x/y/z"), 200);
    ck_assert_int_eq(http_status("HEAD", "/files/sbx-it/rm/w"), 200);
    /* Already there: fine (mkdir -p). */
    SBX(&r, "mkdir", "-p", "sbx-it/rm/x/y");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);

    /* Not empty: sbxd's 409 and its message; nothing deleted. */
    SBX(&r, "rm", "sbx-it/rm/x");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 409)");
    run_free(&r);
    ck_assert_int_eq(http_status("HEAD", "/files/sbx-it/rm/x/y/z"), 200);

    SBX(&r, "rm", "-r", "sbx-it/rm/x");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    ck_assert_int_eq(http_status("HEAD", "/files/sbx-it/rm/x"), 404);

    /* Missing: 125, unless -f. Every path is tried. */
    SBX(&r, "rm", "sbx-it/rm/gone", "sbx-it/rm/w");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 404)");
    run_free(&r);
    ck_assert_int_eq(http_status("HEAD", "/files/sbx-it/rm/w"), 404);
    SBX(&r, "rm", "-f", "sbx-it/rm/gone");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.err_len, 0);
    run_free(&r);

    /* A file where a directory is wanted. */
    int fd = bytes_fd("x", 1);
    SBX_IN(&r, fd, "put", "-", "sbx-it/rm/file");
    close(fd);
    run_free(&r);
    SBX(&r, "mkdir", "sbx-it/rm/file");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 409)");
    run_free(&r);
    SBX(&r, "rm", "-rf", "sbx-it/rm");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    ck_assert_int_eq(http_status("HEAD", "/files/sbx-it/rm"), 404);
}
END_TEST

START_TEST(edit_and_get_lines)
{
    struct run r;
    const char *text = "x = \"$HOME\"\ny = 1\ny = 1\n";
    int fd = bytes_fd(text, strlen(text));
    SBX_IN(&r, fd, "put", "-", "sbx-it/ed/q.py");
    close(fd);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    /* Quotes and $ pass as they are: no shell, no sed. */
    SBX(&r, "edit", "sbx-it/ed/q.py", "x = \"$HOME\"", "x = 'it''s'");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "sbx-it/ed/q.py: 1 replacement, line 1\n");
    run_free(&r);
    /* Twice there: sbxd's 409, nothing changed; with --all, both. */
    SBX(&r, "edit", "sbx-it/ed/q.py", "y = 1", "y = 2");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "2 times");
    run_free(&r);
    SBX(&r, "edit", "--all", "sbx-it/ed/q.py", "y = 1", "y = 2");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "sbx-it/ed/q.py: 2 replacements, lines 2-3\n");
    run_free(&r);
    SBX(&r, "get", "--lines", "2:", "-n", "sbx-it/ed/q.py");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "     2\ty = 2\n     3\ty = 2\n");
    run_free(&r);
    SBX(&r, "get", "--lines", "1", "sbx-it/ed/q.py");
    ASSERT_OUT(&r, "x = 'it''s'\n");
    run_free(&r);
    SBX(&r, "get", "--lines", "9:", "sbx-it/ed/q.py");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 416)");
    run_free(&r);
    /* Several edits as JSON on stdin, all or none; --json prints sbxd's answer. */
    const char *bad =
        "{\"edits\":[{\"old\":\"y = 2\\ny\",\"new\":\"z\"},{\"old\":\"q\",\"new\":\"r\"}]}";
    fd = bytes_fd(bad, strlen(bad));
    SBX_IN(&r, fd, "edit", "sbx-it/ed/q.py", "-");
    close(fd);
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 404)");
    run_free(&r);
    const char *good = "{\"edits\":[{\"old\":\"y = 2\\ny\",\"new\":\"z\"}]}";
    fd = bytes_fd(good, strlen(good));
    SBX_IN(&r, fd, "edit", "--json", "sbx-it/ed/q.py", "-");
    close(fd);
    ck_assert_int_eq(r.code, 0);
    ck_assert_msg(strstr(r.out, "\"etag\"") && strstr(r.out, "\"replacements\":1"), "%s", r.out);
    run_free(&r);
    SBX(&r, "get", "sbx-it/ed/q.py", "-");
    ASSERT_OUT(&r, "x = 'it''s'\nz = 2\n");
    run_free(&r);
    /* A stale ETag: 412. Out of the workspace: 403. */
    SBX(&r, "edit", "--if-match", "\"1-2-3\"", "sbx-it/ed/q.py", "z", "w");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 412)");
    run_free(&r);
    SBX(&r, "edit", "../etc/passwd", "root", "toor");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 403)");
    run_free(&r);
    SBX(&r, "edit", "sbx-it/ed/q.py", "only-old");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    SBX(&r, "rm", "-r", "sbx-it/ed");
    run_free(&r);
}
END_TEST

START_TEST(progress_bar_only_on_a_terminal)
{
    char dir[64], src[128];
    local_dir(dir, sizeof(dir));
    snprintf(src, sizeof(src), "%s/big", dir);
    size_t n = 3u << 20;
    unsigned char *data = binary_bytes(n);
    write_local(src, data, n);
    free(data);
    int master, slave;
    ck_assert_int_eq(openpty(&master, &slave, NULL, NULL, NULL), 0);
    struct child c;
    const char *words[] = {"put", src, "sbx-it/progress.bin", NULL};
    child_start(&c, words, true, -1, slave, NULL);
    close(slave);
    struct run r;
    child_wait(&c, &r, 60000);
    ck_assert_int_eq(r.code, 0);
    char tty[65536];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof(tty) - 1 && (k = read(master, tty + got, sizeof(tty) - 1 - got)) > 0)
        got += (size_t)k; /* EIO once the child's side is closed */
    tty[got] = '\0';
    close(master);
    ck_assert_msg(strstr(tty, "100%") && strstr(tty, "3.0 MiB"), "no progress bar: '%s'", tty);
    /* It clears its line at the end. */
    ck_assert_msg(got >= 4 && strcmp(tty + got - 4, "\r\033[K") == 0, "'%s'", tty);
    run_free(&r);
    /* A small file: none. */
    const char *words2[] = {"put", "-", "sbx-it/progress.bin", NULL};
    ck_assert_int_eq(openpty(&master, &slave, NULL, NULL, NULL), 0);
    int fd = bytes_fd("small", 5);
    child_start(&c, words2, true, fd, slave, NULL);
    close(slave);
    close(fd);
    child_wait(&c, &r, 60000);
    ck_assert_int_eq(r.code, 0);
    k = read(master, tty, sizeof(tty));
    ck_assert_msg(k <= 0, "output on the terminal for 5 bytes: '%.*s'", (int)k, tty);
    close(master);
    run_free(&r);
    SBX(&r, "rm", "sbx-it/progress.bin");
    run_free(&r);
    rm_rf(dir);
}
END_TEST

/* ------------------------------------------------------------------ processes */

/* POST /processes (with a timeout, so that nothing outlives even a crashed test for long). */
static void bg_start(const char *command, char *id, size_t len)
{
    char body[1024], marked[900];
    snprintf(marked, sizeof(marked), "%s%s", BG_MARK, command);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "command", marked);
    cJSON_AddNumberToObject(b, "timeout_ms", 60000);
    ck_assert(cJSON_PrintPreallocated(b, body, sizeof(body), false));
    cJSON_Delete(b);
    struct http_resp h;
    ck_assert_int_eq(
        http_request(&g_sbxd, "POST", "/processes", NULL, body, strlen(body), 30000, &h), 0);
    ck_assert_msg(h.status == 201, "%ld: %s", h.status, h.body);
    snprintf(id, len, "%s", jstr(h.json, "id"));
    http_resp_free(&h);
}

static void bg_delete(const char *id)
{
    char path[128];
    snprintf(path, sizeof(path), "/processes/%s", id);
    struct http_resp h;
    http_request(&g_sbxd, "DELETE", path, NULL, NULL, 0, 30000, &h);
    http_resp_free(&h);
}

/* GET /processes/{id} (caller frees). */
static cJSON *bg_get(const char *id)
{
    char path[128];
    snprintf(path, sizeof(path), "/processes/%s", id);
    struct http_resp h;
    ck_assert_int_eq(http_request(&g_sbxd, "GET", path, NULL, NULL, 0, 30000, &h), 0);
    ck_assert_msg(h.status == 200, "%ld: %s", h.status, h.body);
    cJSON *o = h.json;
    h.json = NULL;
    http_resp_free(&h);
    return o;
}

/* Wait until it has printed at least n bytes, or has ended. */
static void bg_wait_output(const char *id, double n)
{
    double end = now_ms() + 10000 * SLOW;
    for (;;) {
        cJSON *o = bg_get(id);
        bool ready = jnum(o, "output_end") >= n || strcmp(jstr(o, "status"), "running") != 0;
        cJSON_Delete(o);
        if (ready)
            return;
        ck_assert_msg(now_ms() < end, "process %s printed nothing", id);
        usleep(10000);
    }
}

/* Wait for its end; returns the object (caller frees). */
static cJSON *bg_wait_end(const char *id)
{
    double end = now_ms() + 10000 * SLOW;
    for (;;) {
        cJSON *o = bg_get(id);
        if (strcmp(jstr(o, "status"), "running") != 0)
            return o;
        cJSON_Delete(o);
        ck_assert_msg(now_ms() < end, "process %s did not end", id);
        usleep(10000);
    }
}

START_TEST(ps_logs_and_kill_a_background_process)
{
    char id[64];
    bg_start("echo ready; printf 'warn\\377\\n' >&2; trap 'echo got INT; exit 9' INT; "
             "while :; do sleep 0.05; done",
             id, sizeof(id));
    bg_wait_output(id, 12);
    struct run r;
    SBX(&r, "ps");
    ck_assert_int_eq(r.code, 0);
    ck_assert_msg(strncmp(r.out, "ID ", 3) == 0, "no header: %s", r.out);
    char *line = strstr(r.out, id);
    ck_assert_msg(line, "%s not listed: %s", id, r.out);
    ck_assert_msg(strstr(line, " running ") && strstr(line, " echo ready;"), "%s", line);
    run_free(&r);

    /* Without -f: what is there now, each stream to its own, exact. */
    SBX(&r, "logs", id);
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "ready\n");
    ASSERT_ERR(&r, "warn\377\n");
    run_free(&r);

    /* -f goes on until the process ends, which the INT makes it do. */
    struct child follower;
    const char *words[] = {"logs", "-f", id, NULL};
    child_start(&follower, words, true, -1, -1, NULL);
    usleep(300000);
    SBX(&r, "kill", "-s", "INT", id);
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.out_len + r.err_len, 0);
    run_free(&r);
    child_wait(&follower, &r, 15000);
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "ready\ngot INT\n");
    ASSERT_ERR(&r, "warn\377\n");
    run_free(&r);
    cJSON *o = bg_wait_end(id);
    ck_assert_str_eq(jstr(o, "status"), "exited");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 9);
    cJSON_Delete(o);

    SBX(&r, "ps");
    line = strstr(r.out, id);
    ck_assert_msg(line && strstr(line, " exited ") && strstr(line, " 9  "), "%s", r.out);
    run_free(&r);
    bg_delete(id);
}
END_TEST

/* `sbx code`: the default context keeps its state; output as printed; the code's status;
 * an interrupt and a dead context said on stderr; `sbx contexts` lists and removes. */
/* A kernel's results: text on stdout, charts saved as files, the traceback on stderr. */
START_TEST(code_in_python_prints_results_and_saves_images)
{
    struct run r;
    SBX(&r, "code", "-l", "python", "x = 6\nprint('hi')\nx * 7");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "hi\n42\n");
    run_free(&r);
    char dir[] = "/tmp/sbx-it-img-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    SBX(&r, "code", "-l", "python", "--save-images", dir,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()");
    ck_assert_int_eq(r.code, 0);
    char path[128], want[160];
    snprintf(path, sizeof(path), "%s/image-1.png", dir);
    snprintf(want, sizeof(want), "sbx: image saved: %s (", path);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    run_free(&r);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char head[8] = {0};
    ck_assert_int_eq((int)fread(head, 1, 8, f), 8);
    fclose(f);
    ck_assert(memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0);
    unlink(path);
    rmdir(dir);
    SBX(&r, "code", "-l", "python", "x / 0");
    ck_assert_int_eq(r.code, 1);
    ck_assert_msg(strstr(r.err, "ZeroDivisionError: division by zero"), "%s", r.err);
    run_free(&r);
    SBX(&r, "code", "-l", "python", "--save-images", "/nonexistent/dir", "1");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    SBX(&r, "contexts");
    char id[32] = "";
    const char *py = strstr(r.out, " python ");
    ck_assert_msg(py, "%s", r.out);
    const char *line = py;
    while (line > r.out && line[-1] != '\n')
        line--;
    sscanf(line, "%31s", id);
    run_free(&r);
    SBX(&r, "contexts", "rm", id);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
}
END_TEST

START_TEST(code_runs_in_a_context_that_keeps_its_state)
{
    struct run r;
    SBX(&r, "code", "-l", "bash", "cd /tmp && export MODE=fast && echo set");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "set\n");
    run_free(&r);
    SBX(&r, "code", "pwd; echo $MODE; echo warn >&2; (exit 3)");
    ck_assert_int_eq(r.code, 3);
    ASSERT_OUT(&r, "/tmp\nfast\n");
    ASSERT_ERR(&r, "warn\n");
    run_free(&r);
    /* From stdin, with '-'. */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    const char *script = "for i in 1 2; do echo line$i; done\n";
    ck_assert_int_eq(write(p[1], script, strlen(script)), (ssize_t)strlen(script));
    close(p[1]);
    struct child ch;
    const char *words[] = {"code", "-", NULL};
    child_start(&ch, words, true, p[0], -1, NULL);
    close(p[0]);
    child_wait(&ch, &r, 15000);
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "line1\nline2\n");
    run_free(&r);
    /* Live: the first line before the code ends. */
    SBX(&r, "code", "echo early; sleep 1; echo late");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "early\nlate\n");
    ck_assert_msg(r.first_out_ms >= 0 && r.first_out_ms < r.ms - 600,
                  "first output at %.0f of %.0f ms", r.first_out_ms, r.ms);
    run_free(&r);
    SBX(&r, "code", "-t", "300", "sleep 30");
    ck_assert_int_eq(r.code, 130);
    ck_assert_msg(strstr(r.err, "sbx: code interrupted after 300 ms"), "%s", r.err);
    run_free(&r);
    SBX(&r, "code", "echo $MODE still");
    ASSERT_OUT(&r, "fast still\n");
    run_free(&r);
    /* The listing, then a context ended by its code, then removed. */
    SBX(&r, "contexts");
    ck_assert_int_eq(r.code, 0);
    ck_assert_msg(strncmp(r.out, "ID ", 3) == 0 && strstr(r.out, " bash ") &&
                      strstr(r.out, " idle "),
                  "%s", r.out);
    char id[32] = "";
    const char *bash = strstr(r.out, " bash ");
    ck_assert_ptr_nonnull(bash);
    while (bash > r.out && bash[-1] != '\n')
        bash--;
    sscanf(bash, "%31s", id);
    run_free(&r);
    SBX(&r, "code", "-c", id, "exit 4");
    ck_assert_int_eq(r.code, 125);
    ck_assert_msg(strstr(r.err, "sbx: the context died: the shell exited with status 4"), "%s",
                  r.err);
    run_free(&r);
    SBX(&r, "contexts", "rm", id);
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    SBX(&r, "contexts", "rm", id);
    ck_assert_int_eq(r.code, 125);
    ck_assert_msg(strstr(r.err, "no context"), "%s", r.err);
    run_free(&r);
    SBX(&r, "code", "-l", "cobol", "print(1)");
    ck_assert_int_eq(r.code, 125);
    ck_assert_msg(strstr(r.err, "no context for language 'cobol'"), "%s", r.err);
    run_free(&r);
    SBX(&r, "code");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
}
END_TEST

START_TEST(kill_sends_the_signal_asked_for)
{
    struct {
        const char *args[3];
        int sig;
    } cases[] = {
        {{NULL}, SIGTERM},                  /* the default */
        {{"-s", "KILL", NULL}, SIGKILL},    /* a name */
        {{"-s", "sigusr1", NULL}, SIGUSR1}, /* any case, with SIG */
        {{"--signal", "1", NULL}, SIGHUP},  /* a number */
        {{"-9", NULL}, SIGKILL},            /* kill(1)'s forms */
        {{"-QUIT", NULL}, SIGQUIT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char id[64];
        bg_start("exec sleep 60", id, sizeof(id));
        const char *words[8] = {"kill"};
        int n = 1;
        for (int k = 0; cases[i].args[k]; k++)
            words[n++] = cases[i].args[k];
        words[n++] = id;
        words[n] = NULL;
        struct run r;
        sbx_words(&r, -1, words);
        ck_assert_msg(r.code == 0, "case %zu: %d %s", i, r.code, r.err);
        run_free(&r);
        cJSON *o = bg_wait_end(id);
        ck_assert_str_eq(jstr(o, "status"), "signaled");
        ck_assert_msg((int)jnum(o, "signal") == cases[i].sig, "case %zu: signal %d", i,
                      (int)jnum(o, "signal"));
        ck_assert_int_eq((int)jnum(o, "exit_code"), 128 + cases[i].sig);
        cJSON_Delete(o);

        if (i == 0) {
            /* It has ended: sbxd's 409, one line. */
            SBX(&r, "kill", id);
            ck_assert_int_eq(r.code, 125);
            char path[128];
            snprintf(path, sizeof(path), "/processes/%s/signal", id);
            const char *body = "{\"signal\":\"SIGTERM\"}";
            struct http_resp h;
            ck_assert_int_eq(
                http_request(&g_sbxd, "POST", path, NULL, body, strlen(body), 30000, &h), 0);
            char want[512];
            snprintf(want, sizeof(want), "sbx: kill: %s (HTTP 409)\n", jstr(h.json, "message"));
            http_resp_free(&h);
            assert_bytes("stderr", r.err, r.err_len, want, strlen(want));
            run_free(&r);
        }
        bg_delete(id);
    }
    struct run r;
    /* Signals sbxd does not send are usage errors, found before asking. */
    SBX(&r, "kill", "-s", "5", "whatever");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    SBX(&r, "kill", "-s", "BOGUS", "whatever");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    SBX(&r, "kill", "-40", "whatever");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    /* An unknown process: sbxd's 404. */
    SBX(&r, "kill", "sbx-no-such-process");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 404)");
    run_free(&r);
    SBX(&r, "logs", "sbx-no-such-process");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "(HTTP 404)");
    run_free(&r);
}
END_TEST

/* ------------------------------------------------------------------ health, url, usage */

/* sbx's own failures are 125, as docker run's and env's are: a command's own 1 (grep that
 * found nothing, a failed test) or 2 is never taken for sbx's, nor sbx's for the command's. */
START_TEST(a_commands_exit_1_is_not_sbxs_125)
{
    struct run r;
    SBX(&r, "exec", "--", "sh", "-c", "exit 1");
    ck_assert_int_eq(r.code, 1);
    ck_assert_uint_eq(r.err_len, 0);
    run_free(&r);
    SBX(&r, "run", "grep -q sbx-nothing-here /dev/null");
    ck_assert_int_eq(r.code, 1);
    ck_assert_uint_eq(r.err_len, 0);
    run_free(&r);
    SBX(&r, "exec", "--", "sh", "-c", "exit 2");
    ck_assert_int_eq(r.code, 2);
    run_free(&r);
    /* sbxd refused it (a cwd that does not exist): sbx's 125 and its one line. */
    SBX(&r, "exec", "--cwd", "sbx-no-such-dir", "--", "sh", "-c", "exit 1");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "sbx: exec: ");
    run_free(&r);
    /* A usage error: 125 too, nothing sent. */
    SBX(&r, "run", "--timeout", "soon", "exit 1");
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
}
END_TEST

START_TEST(health_summarises_healthz)
{
    struct run r;
    SBX(&r, "health");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.err_len, 0);
    ck_assert_msg(strncmp(r.out, "status      ok\n", 15) == 0, "%s", r.out);
    ck_assert_msg(strstr(r.out, "\nsbxd        " SBXD_VERSION "\n"), "%s", r.out);
    const char *want[] = {"\nuptime ", "\nrunning     0 of ", "tree_kill ", "cgroup ", "seccomp "};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(strstr(r.out, want[i]), "no '%s' in:\n%s", want[i], r.out);
    run_free(&r);
}
END_TEST

START_TEST(usage_summarises_usage)
{
    struct run r;
    SBX(&r, "usage");
    ck_assert_msg(r.code == 0 && r.err_len == 0, "%d: %s", r.code, r.err);
    const char *want[] = {"cpu        ", "% of ",   "memory     ", " MiB of ",
                          "disk       ", g_sbxd.ws, "/tmp\n",      "background processes"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(strstr(r.out, want[i]), "no '%s' in:\n%s", want[i], r.out);
    run_free(&r);
    SBX(&r, "usage", "--json");
    ck_assert_int_eq(r.code, 0);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsNumber(cJSON_GetObjectItem(o, "mem_used")), "%s", r.out);
    cJSON_Delete(o);
    run_free(&r);
}
END_TEST

/* Read the terminal's master side into buf (from *len on) until it holds want, for at most
 * ms; whether it came. */
static bool tty_expect(int master, char *buf, size_t cap, size_t *len, const char *want, int ms)
{
    double end = now_ms() + ms * SLOW;
    while (!memmem(buf, *len, want, strlen(want))) {
        int left = (int)(end - now_ms());
        struct pollfd p = {.fd = master, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0 || *len >= cap - 1)
            return false;
        ssize_t k = read(master, buf + *len, cap - 1 - *len);
        if (k <= 0)
            return false;
        *len += (size_t)k;
        buf[*len] = '\0';
    }
    return true;
}

/* sbx WORDS... on a terminal of rows x cols of its own: its pid, the master side in *master. */
static pid_t sbx_on_tty(int *master, unsigned short rows, unsigned short cols, const char *a,
                        const char *b)
{
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    pid_t pid = forkpty(master, NULL, NULL, &ws);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl(sbx_bin(), sbx_bin(), "--url", sbxd_url(), a, b, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid, int ms)
{
    double end = now_ms() + ms * SLOW;
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(shell_and_attach_are_a_terminal_on_a_pty)
{
    static char out[1 << 16];
    size_t len = 0;
    int m;
    pid_t pid = sbx_on_tty(&m, 30, 90, "shell", "bash --norc -i");
    ck_assert_msg(tty_expect(m, out, sizeof(out), &len, "Ctrl-] detaches", 10000), "'%s'", out);
    char id[32] = "";
    const char *at = strstr(out, "attached to ");
    ck_assert_ptr_nonnull(at);
    sscanf(at + 12, "%24[0-9a-f]", id);
    ck_assert_uint_eq(strlen(id), 24);
    /* Raw: each key goes as typed; the pty took this terminal's size. */
    const char *k1 = "stty size; echo $((6*7))\r";
    ck_assert_int_eq(write(m, k1, strlen(k1)), (ssize_t)strlen(k1));
    ck_assert_msg(tty_expect(m, out, sizeof(out), &len, "30 90", 10000), "'%s'", out);
    ck_assert_msg(tty_expect(m, out, sizeof(out), &len, "42", 10000), "'%s'", out);
    /* This terminal resized: so is the process's (SIGWINCH, then a resize message). */
    struct winsize ws = {.ws_row = 40, .ws_col = 100};
    ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
    usleep(300000);
    const char *k2 = "stty size\r";
    ck_assert_int_eq(write(m, k2, strlen(k2)), (ssize_t)strlen(k2));
    ck_assert_msg(tty_expect(m, out, sizeof(out), &len, "40 100", 10000), "'%s'", out);
    /* Ctrl-] detaches, exit 0, the shell left running. */
    ck_assert_int_eq(write(m, "\x1d", 1), 1);
    ck_assert_msg(tty_expect(m, out, sizeof(out), &len, "detached from", 10000), "'%s'", out);
    ck_assert_int_eq(wait_exit(pid, 10000), 0);
    close(m);
    /* Attached again: the history first; the shell's exit status is sbx's. */
    len = 0;
    pid = sbx_on_tty(&m, 30, 90, "attach", id);
    ck_assert_msg(tty_expect(m, out, sizeof(out), &len, "42", 10000), "'%s'", out);
    const char *k3 = "exit 4\r";
    ck_assert_int_eq(write(m, k3, strlen(k3)), (ssize_t)strlen(k3));
    ck_assert_int_eq(wait_exit(pid, 10000), 4);
    close(m);
    /* An unknown process: sbxd's reason, 125. */
    struct run r;
    SBX(&r, "attach", "nope");
    ck_assert_int_eq(r.code, 125);
    ck_assert_msg(strstr(r.err, "no process 'nope'") && strstr(r.err, "HTTP 404"), "%s", r.err);
    run_free(&r);
}
END_TEST

START_TEST(ports_lists_listeners)
{
    struct run r;
    SBX(&r, "ports");
    ck_assert_msg(r.code == 0 && r.err_len == 0, "%d: %s", r.code, r.err);
    ck_assert_msg(strstr(r.out, "PORT") && strstr(r.out, "PROXY") && strstr(r.out, "(sbxd)"), "%s",
                  r.out);
    run_free(&r);
    SBX(&r, "ports", "--json");
    ck_assert_int_eq(r.code, 0);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsArray(cJSON_GetObjectItem(o, "ports")), "%s", r.out);
    cJSON_Delete(o);
    run_free(&r);
}
END_TEST

START_TEST(an_unreachable_sbxd_is_one_clear_line)
{
    char url[64], want[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", loopback_free_port());
    snprintf(want, sizeof(want), "sbx: cannot reach sbxd at %s: ", url);
    const char *cmds[][4] = {{"health"}, {"exec", "true"}, {"ls"}, {"get", "x", "-"}, {"ps"}};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        const char *words[8] = {"--url", url};
        int n = 2;
        for (int k = 0; k < 4 && cmds[i][k]; k++)
            words[n++] = cmds[i][k];
        words[n] = NULL;
        struct child c;
        child_start(&c, words, false, -1, -1, NULL);
        struct run r;
        child_wait(&c, &r, 30000);
        ck_assert_msg(r.code == 125, "%s: exit %d", cmds[i][0], r.code);
        assert_one_line_error(&r, want);
        ck_assert_uint_eq(r.out_len, 0);
        run_free(&r);
    }
}
END_TEST

START_TEST(the_url_comes_from_sbx_url_or_url)
{
    struct child c;
    struct run r;
    const char *words[] = {"health", NULL};
    child_start(&c, words, false, -1, -1, sbxd_url());
    child_wait(&c, &r, 30000);
    ck_assert_msg(r.code == 0, "%d: %s", r.code, r.err);
    run_free(&r);
    /* --url wins over SBX_URL; a URL without scheme is http; a trailing '/' is fine. */
    char url[64];
    snprintf(url, sizeof(url), "127.0.0.1:%d/", g_sbxd.port);
    const char *words2[] = {"--url", url, "exec", "echo", "hi", NULL};
    child_start(&c, words2, false, -1, -1, "http://127.0.0.1:1");
    child_wait(&c, &r, 30000);
    ck_assert_msg(r.code == 0, "%d: %s", r.code, r.err);
    ASSERT_OUT(&r, "hi\n");
    run_free(&r);
}
END_TEST

START_TEST(usage_errors_exit_125)
{
    const char *cases[][6] = {
        {NULL},
        {"frobnicate"},
        {"--bogus", "ls"},
        {"exec"},
        {"exec", "--timeout"},
        {"exec", "--timeout", "soon", "--", "true"},
        {"exec", "--timeout", "-5", "--", "true"},
        {"exec", "--env", "NOEQUALS", "--", "true"},
        {"exec", "--frob", "--", "true"},
        {"run"},
        {"run", "echo", "hi"},
        {"put"},
        {"put", "a", "b", "c"},
        {"put", "-"},
        {"put", "--mode", "999", "a", "b"},
        {"get"},
        {"ls", "a", "b"},
        {"rm"},
        {"mkdir"},
        {"ps", "extra"},
        {"logs"},
        {"logs", "a", "b"},
        {"kill"},
        {"kill", "-s"},
        {"health", "extra"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run r;
        sbx_words(&r, -1, cases[i]);
        ck_assert_msg(r.code == 125, "case %zu (%s): exit %d, %s", i, cases[i][0], r.code, r.err);
        ck_assert_msg(strncmp(r.err, "sbx: ", 5) == 0 && strstr(r.err, "--help"), "case %zu: %s", i,
                      r.err);
        ck_assert_uint_eq(r.out_len, 0);
        run_free(&r);
    }
}
END_TEST

/* sbx reset: the sandbox cleaned (a daemon of its own, whose command user is nobody else's:
 * a reset removes that user's files from /tmp), and a summary of what went. */
START_TEST(reset_cleans_and_summarises)
{
    struct daemon d;
    char user[32];
    unsigned uid = 48000 + (unsigned)(getpid() % 1000);
    snprintf(user, sizeof(user), "%u:%u", uid, uid);
    const char *args[] = {"--user", user, NULL};
    daemon_start(&d, args, NULL);
    cJSON *o = execute(&d, "{\"command\":\"mkdir -p a/b && echo 12345 > a/b/f && touch g\"}");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 0);
    cJSON_Delete(o);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", d.port);
    struct child c;
    child_start(&c, (const char *const[]){"--url", url, "reset", NULL}, false, -1, -1, NULL);
    struct run r;
    child_wait(&c, &r, 60000);
    ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
    ck_assert_uint_eq(r.err_len, 0);
    ck_assert_msg(strstr(r.out, "processes   0 killed") &&
                      strstr(r.out, "files       2 removed (6 bytes), and 2 directories") &&
                      strstr(r.out, "contexts    0 deleted") && strstr(r.out, "duration ") &&
                      strstr(r.out, "baseline    none"),
                  "%s", r.out);
    run_free(&r);
    o = execute(&d, "{\"command\":\"ls -A | wc -l\"}");
    ck_assert_str_eq(jstr(o, "stdout"), "0\n");
    cJSON_Delete(o);
    /* --json: sbxd's answer as it is. */
    child_start(&c, (const char *const[]){"--url", url, "reset", "--json", NULL}, false, -1, -1,
                NULL);
    child_wait(&c, &r, 60000);
    ck_assert_int_eq(r.code, 0);
    cJSON *j = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsObject(j) && jnum(j, "files") == 0, "%s", r.out);
    cJSON_Delete(j);
    run_free(&r);
    /* --from: the clean workspace gets the archive's tree. */
    o = execute(&d, "{\"command\":\"mkdir t && echo s > t/seed && tar -cf s.tar -C t .\"}");
    ck_assert_int_eq((int)jnum(o, "exit_code"), 0);
    cJSON_Delete(o);
    child_start(&c, (const char *const[]){"--url", url, "reset", "--from", "s.tar", NULL}, false,
                -1, -1, NULL);
    child_wait(&c, &r, 60000);
    ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
    ck_assert_msg(strstr(r.out, "setup       1 files, 0 directories, 0 symlinks from s.tar"), "%s",
                  r.out);
    run_free(&r);
    o = execute(&d, "{\"command\":\"ls -A\"}");
    ck_assert_str_eq(jstr(o, "stdout"), "seed\n");
    cJSON_Delete(o);
    /* A refusal is one line with sbxd's message, and 125. */
    child_start(&c, (const char *const[]){"--url", url, "reset", "extra", NULL}, false, -1, -1,
                NULL);
    child_wait(&c, &r, 60000);
    ck_assert_int_eq(r.code, 125);
    run_free(&r);
    child_start(&c, (const char *const[]){"--url", url, "reset", "--from", "nothing.tar", NULL},
                false, -1, -1, NULL);
    child_wait(&c, &r, 60000);
    ck_assert_int_eq(r.code, 125);
    ck_assert_msg(strstr(r.err, "nothing.tar") && strstr(r.err, "(HTTP 404)"), "%s", r.err);
    run_free(&r);
    ck_assert(daemon_stop_clean(&d, 15000));
}
END_TEST

START_TEST(grep_and_find_print_as_grep_and_find_do)
{
    struct run r;
    SBX(&r, "run",
        "rm -rf sgf && mkdir -p sgf/d && printf 'a\\nx = \"$HOME\" # q\\nb\\n' > sgf/d/one.py "
        "&& printf 'nothing\\n' > sgf/two.txt");
    ck_assert_int_eq(r.code, 0);
    run_free(&r);
    /* The pattern goes as it is: quotes and $ need no shell quoting through sbxd. */
    SBX(&r, "grep", "-C", "1", "\"$HOME\" #", "sgf");
    ck_assert_msg(r.code == 0, "%d %s", r.code, r.err);
    ASSERT_OUT(&r, "sgf/d/one.py-1-a\nsgf/d/one.py:2:x = \"$HOME\" # q\nsgf/d/one.py-3-b\n");
    run_free(&r);
    SBX(&r, "grep", "-E", "-i", "^NOTH", "sgf");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "sgf/two.txt:1:nothing\n");
    run_free(&r);
    SBX(&r, "grep", "absent", "sgf");
    ck_assert_int_eq(r.code, 1); /* as grep: nothing found */
    run_free(&r);
    SBX(&r, "grep", "-E", "(a", "sgf");
    ck_assert_int_eq(r.code, 125);
    assert_one_line_error(&r, "missing closing parenthesis");
    run_free(&r);
    SBX(&r, "find", "**/*.py", "sgf");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "sgf/d/one.py\n");
    run_free(&r);
}
END_TEST

START_TEST(help_names_every_command_and_option)
{
    struct run r;
    SBX(&r, "--help");
    ck_assert_int_eq(r.code, 0);
    ck_assert_uint_eq(r.err_len, 0);
    const char *cmds[] = {"exec",  "run",  "put",  "get",    "ls",    "rm",       "mkdir",
                          "ps",    "logs", "kill", "health", "code",  "contexts", "reset",
                          "usage", "grep", "find", "edit",   "ports", "attach",   "shell"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char w[32];
        snprintf(w, sizeof(w), "\n  %s ", cmds[i]);
        ck_assert_msg(strstr(r.out, w), "--help does not list %s:\n%s", cmds[i], r.out);
    }
    const char *global[] = {"--url", "SBX_URL", "--version", "Exit status", "Examples"};
    for (size_t i = 0; i < sizeof(global) / sizeof(global[0]); i++)
        ck_assert_msg(strstr(r.out, global[i]), "no '%s' in --help", global[i]);
    run_free(&r);

    /* Each command's own help: usage, options, examples; `help CMD` is the same. */
    struct {
        const char *cmd;
        const char *must[6];
    } per[] = {
        {"exec", {"--timeout", "--env", "--cwd", "--stream", "--stdin", "--no-network"}},
        {"run", {"--timeout", "--env", "--cwd", "--stream", NULL}},
        {"put", {"--mode", "LOCAL", "REMOTE", NULL}},
        {"get", {"REMOTE", "LOCAL", "--lines", "--numbers", NULL}},
        {"edit", {"--all", "--if-match", "--json", "OLD", NULL}},
        {"ls", {"PATH", NULL}},
        {"rm", {"--recursive", "--force", NULL}},
        {"mkdir", {"PATH", NULL}},
        {"ps", {NULL}},
        {"logs", {"--follow", NULL}},
        {"kill", {"--signal", "TERM", NULL}},
        {"health", {"tree_kill", NULL}},
        {"code", {"--language", "--context", "--timeout", NULL}},
        {"contexts", {"rm ID", NULL}},
        {"reset", {"--json", "--workspace-baseline", NULL}},
        {"grep", {"--regex", "--ignore-case", "--glob", "--type", "--context", "--max"}},
        {"find", {"--exclude", "--long", "GLOB", NULL}},
    };
    for (size_t i = 0; i < sizeof(per) / sizeof(per[0]); i++) {
        SBX(&r, per[i].cmd, "--help");
        ck_assert_msg(r.code == 0, "%s --help: %d", per[i].cmd, r.code);
        char usage[64];
        snprintf(usage, sizeof(usage), "Usage: sbx [--url URL] %s", per[i].cmd);
        ck_assert_msg(strncmp(r.out, usage, strlen(usage)) == 0, "%s", r.out);
        ck_assert_msg(strstr(r.out, "--help") && strstr(r.out, "Examples:"), "%s", r.out);
        for (int k = 0; k < 6 && per[i].must[k]; k++)
            ck_assert_msg(strstr(r.out, per[i].must[k]), "%s --help lacks %s", per[i].cmd,
                          per[i].must[k]);
        char *own = strdup(r.out);
        run_free(&r);
        SBX(&r, "help", per[i].cmd);
        ck_assert_int_eq(r.code, 0);
        ck_assert_str_eq(r.out, own);
        free(own);
        run_free(&r);
    }

    /* The command's option parsing stops at CMD: this --help is the program's. */
    SBX(&r, "exec", "--", "printf", "%s\\n", "--help");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "--help\n");
    run_free(&r);

    SBX(&r, "--version");
    ck_assert_int_eq(r.code, 0);
    ASSERT_OUT(&r, "sbx " SBXD_VERSION "\n");
    run_free(&r);
}
END_TEST

Suite *sbx_suite(void)
{
    Suite *s = suite_create("sbx");
    TCase *exec = tcase_create("exec");
    tcase_add_test(exec, exec_gives_exact_bytes_and_the_exit_code);
    tcase_add_test(exec, exec_passes_argv_env_and_cwd_as_given);
    tcase_add_test(exec, exec_says_why_a_command_did_not_simply_exit);
    tcase_add_test(exec, exec_stream_writes_output_as_it_comes);
    tcase_add_test(exec, run_takes_a_shell_string);
    tcase_add_test(exec, server_errors_are_one_line_with_its_message);
    TCase *files = tcase_create("files");
    tcase_add_test(files, put_and_get_round_trip_a_large_binary_file);
    tcase_add_test(files, a_failed_get_leaves_no_partial_file);
    tcase_add_test(files, an_interrupted_get_leaves_no_partial_file);
    tcase_add_test(files, paths_with_reserved_characters_work);
    tcase_add_test(files, put_r_and_get_r_move_whole_trees);
    tcase_add_test(files, ls_lists_a_directory_and_shows_a_file);
    tcase_add_test(files, rm_and_mkdir);
    tcase_add_test(files, edit_and_get_lines);
    tcase_add_test(files, progress_bar_only_on_a_terminal);
    TCase *procs = tcase_create("processes");
    tcase_add_test(procs, ps_logs_and_kill_a_background_process);
    tcase_add_test(procs, shell_and_attach_are_a_terminal_on_a_pty);
    tcase_add_test(procs, ports_lists_listeners);
    tcase_add_test(procs, kill_sends_the_signal_asked_for);
    tcase_add_test(procs, code_runs_in_a_context_that_keeps_its_state);
    tcase_add_test(procs, code_in_python_prints_results_and_saves_images);
    TCase *cli = tcase_create("cli");
    tcase_add_test(cli, health_summarises_healthz);
    tcase_add_test(cli, usage_summarises_usage);
    tcase_add_test(cli, reset_cleans_and_summarises);
    tcase_add_test(cli, an_unreachable_sbxd_is_one_clear_line);
    tcase_add_test(cli, the_url_comes_from_sbx_url_or_url);
    tcase_add_test(cli, usage_errors_exit_125);
    tcase_add_test(cli, a_commands_exit_1_is_not_sbxs_125);
    tcase_add_test(cli, help_names_every_command_and_option);
    tcase_add_test(cli, grep_and_find_print_as_grep_and_find_do);
    TCase *all[] = {exec, files, procs, cli};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        tcase_add_unchecked_fixture(all[i], cleanup_setup, cleanup_teardown);
        tcase_set_timeout(all[i], 120);
        suite_add_tcase(s, all[i]);
    }
    return s;
}
