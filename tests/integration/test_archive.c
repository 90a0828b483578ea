/* Whole trees: GET ?archive=tar|zip (compressed as Accept-Encoding offers) and PUT ?archive=
 * (tar, tar.gz, tar.zst, zip), all or nothing, with hostile archives refused. The archives are
 * made by archives.py (Python's tarfile and zipfile), once per run. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

static char arch_dir[64];

/* The archives of archives.py: made before the tests (in the runner), removed after. */
static void archives_make(void)
{
    snprintf(arch_dir, sizeof(arch_dir), "/tmp/sbxd-archives-%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s", ARCHIVES_PY, arch_dir);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

static const char *archives(void)
{
    return arch_dir;
}

static void archives_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", arch_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "archive: cannot remove %s\n", arch_dir);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void sh(const struct daemon *d, const char *command, char *out, size_t outlen)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "command", command);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    cJSON *r = execute(d, body);
    free(body);
    ck_assert_msg(jnum(r, "exit_code") == 0, "%s: %s", command, jstr(r, "stderr"));
    if (out)
        snprintf(out, outlen, "%s", jstr(r, "stdout"));
    cJSON_Delete(r);
}

/* PUT the archive file name (of archives.py) to url: the answer. */
static void put_archive(const struct daemon *d, const char *name, const char *url,
                        struct http_resp *r)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", archives(), name);
    size_t len;
    char *b = slurp(path, &len);
    ck_assert_int_eq(http_request(d, "PUT", url, "application/octet-stream", b, len, 120000, r), 0);
    free(b);
}

/* Nothing an extraction makes for itself is left in the workspace. */
static void no_temporaries(const struct daemon *d)
{
    char out[4096];
    sh(d, "find . -name '.sbxd-extract-*' | head -5", out, sizeof(out));
    ck_assert_msg(!*out, "left behind: %s", out);
}

/* A tree's description, to compare two: type, mode, size, link target of each entry. */
static void tree_of(const struct daemon *d, const char *dir, char *out, size_t outlen)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "cd %s && find . -mindepth 1 -printf '%%P %%y %%m %%s %%l\\n' | sort", dir);
    sh(d, cmd, out, outlen);
}

START_TEST(round_trip_keeps_the_tree)
{
    sh(&g_sbxd,
       "mkdir -p rt/src/sub/empty rt/src/deep/a/b/c && printf 'hello\\n' > rt/src/a.txt && "
       "printf été > rt/src/sub/été.txt && chmod 0600 rt/src/a.txt && chmod 0750 rt/src/sub && "
       "ln -s ../a.txt rt/src/sub/link && head -c 300000 /dev/urandom > rt/src/deep/a/b/c/bin && "
       "printf x > 'rt/src/sp ace' && mkfifo rt/src/fifo",
       NULL, 0);
    char want[8192], got[8192];
    tree_of(&g_sbxd, "rt/src", want, sizeof(want));
    /* The fifo is not stored: what comes back is the rest. */
    char *fifo = strstr(want, "fifo p");
    ck_assert_ptr_nonnull(fifo);
    memmove(fifo, strchr(fifo, '\n') + 1, strlen(strchr(fifo, '\n') + 1) + 1);
    const char *encodings[] = {NULL, "gzip", "zstd"};
    for (int i = 0; i < 3; i++) {
        struct http_resp r;
        char url[128];
        snprintf(url, sizeof(url), "/files/rt/src?archive=tar");
        if (encodings[i]) {
            /* The compressed bytes, said so; put back as they came: extracted whole. */
            char ae[64], wantce[64], dest[64];
            snprintf(ae, sizeof(ae), "Accept-Encoding: %s;q=0.9, identity;q=0.1", encodings[i]);
            snprintf(wantce, sizeof(wantce), "Content-Encoding: %s", encodings[i]);
            ck_assert_int_eq(http_request_with(&g_sbxd, "GET", url, ae, NULL, NULL, 0, 0, &r), 0);
            ck_assert_int_eq(r.status, 200);
            ck_assert_msg(strstr(r.headers, wantce), "%s", r.headers);
            ck_assert_msg(strstr(r.headers, "Vary: Accept-Encoding"), "%s", r.headers);
            snprintf(dest, sizeof(dest), "/files/rt/%s?archive=tar", encodings[i]);
            struct http_resp pr;
            ck_assert_int_eq(http_request(&g_sbxd, "PUT", dest, NULL, r.body, r.len, 0, &pr), 0);
            ck_assert_msg(pr.status == 201, "%ld %s", pr.status, pr.body);
            http_resp_free(&pr);
            http_resp_free(&r);
            snprintf(dest, sizeof(dest), "rt/%s", encodings[i]);
            tree_of(&g_sbxd, dest, got, sizeof(got));
            ck_assert_str_eq(got, want);
            continue;
        }
        http_reqf(&g_sbxd, &r, "GET", NULL, "%s", url);
        ck_assert_int_eq(r.status, 200);
        ck_assert_msg(strstr(r.headers, "Content-Type: application/x-tar"), "%s", r.headers);
        ck_assert_msg(strstr(r.headers, "filename=\"src.tar\""), "%s", r.headers);
        /* The archive as tar itself reads it: a symlink stored as a link. */
        char tmp[] = "/tmp/sbxd-rt-XXXXXX";
        int fd = mkstemp(tmp);
        ck_assert_int_eq(write(fd, r.body, r.len), (ssize_t)r.len);
        close(fd);
        char cmd[256], listing[4096];
        snprintf(cmd, sizeof(cmd), "tar tvf %s | grep ' sub/link -> ../a.txt'", tmp);
        FILE *p = popen(cmd, "r");
        size_t n = fread(listing, 1, sizeof(listing) - 1, p);
        listing[n] = '\0';
        ck_assert_int_eq(pclose(p), 0);
        unlink(tmp);
        struct http_resp pr;
        ck_assert_int_eq(
            http_request(&g_sbxd, "PUT", "/files/rt/copy?archive=tar", NULL, r.body, r.len, 0, &pr),
            0);
        ck_assert_msg(pr.status == 201, "%ld %s", pr.status, pr.body);
        ck_assert_str_eq(jstr(pr.json, "path"), "rt/copy");
        ck_assert_int_eq((int)jnum(pr.json, "files"), 4);
        ck_assert_int_eq((int)jnum(pr.json, "symlinks"), 1);
        ck_assert_int_eq((int)jnum(pr.json, "bytes"), 300000 + 6 + 5 + 1); /* été: 5 bytes */
        http_resp_free(&pr);
        http_resp_free(&r);
        tree_of(&g_sbxd, "rt/copy", got, sizeof(got));
        ck_assert_str_eq(got, want);
    }
    /* zip: the names as a zip reader sees them (UTF-8 flagged), and extracted back. */
    char out[4096];
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/rt/src?archive=zip");
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.headers, "Content-Type: application/zip"), "%s", r.headers);
    struct http_resp pr;
    ck_assert_int_eq(
        http_request(&g_sbxd, "PUT", "/files/rt/fromzip?archive=zip", NULL, r.body, r.len, 0, &pr),
        0);
    ck_assert_msg(pr.status == 201, "%ld %s", pr.status, pr.body);
    http_resp_free(&pr);
    http_resp_free(&r);
    sh(&g_sbxd, "cat rt/fromzip/sub/été.txt && cmp rt/fromzip/deep/a/b/c/bin rt/src/deep/a/b/c/bin",
       out, sizeof(out));
    ck_assert_str_eq(out, "été");
    no_temporaries(&g_sbxd);
}
END_TEST

START_TEST(hostile_archives_are_refused_with_nothing_written)
{
    static const struct {
        const char *file;
        long status;
        const char *code;
    } cases[] = {
        {"absolute.tar", 403, "PERMISSION_DENIED"},
        {"dotdot.tar", 403, "PERMISSION_DENIED"},
        {"dotdot_inner.tar", 403, "PERMISSION_DENIED"},
        {"symlink_absolute.tar", 403, "PERMISSION_DENIED"},
        {"symlink_leaves.tar", 403, "PERMISSION_DENIED"},
        {"symlink_then_file.tar", 403, "PERMISSION_DENIED"},
        {"hardlink_outside.tar", 403, "PERMISSION_DENIED"},
        {"hardlink_dotdot.tar", 403, "PERMISSION_DENIED"},
        {"hardlink_missing.tar", 403, "PERMISSION_DENIED"},
        {"device.tar", 403, "PERMISSION_DENIED"},
        {"fifo.tar", 403, "PERMISSION_DENIED"},
        {"setuid.tar", 403, "PERMISSION_DENIED"},
        {"reserved_name.tar", 403, "PERMISSION_DENIED"},
        {"truncated.tar", 400, "INVALID_ARGUMENT"},
        {"garbage.tar", 400, "INVALID_ARGUMENT"},
        {"zip_dotdot.zip", 403, "PERMISSION_DENIED"},
        /* Links that stay inside as text, not once followed through the links the archive
         * makes: "d -> ." (before or after the link that uses it), a chain to "..", a link of
         * a subdirectory, a loop; tar and zip. */
        {"symlink_dot_up.tar", 403, "PERMISSION_DENIED"},
        {"symlink_up_then_dot.tar", 403, "PERMISSION_DENIED"},
        {"symlink_chain.tar", 403, "PERMISSION_DENIED"},
        {"symlink_inner_link.tar", 403, "PERMISSION_DENIED"},
        {"symlink_loop.tar", 403, "PERMISSION_DENIED"},
        {"symlink_dot_up.zip", 403, "PERMISSION_DENIED"},
        {"symlink_chain.zip", 403, "PERMISSION_DENIED"},
    };
    /* Into a new directory (which must not appear), and into an existing one (which must not
     * change). */
    sh(&g_sbxd, "mkdir -p host/existing && printf keep > host/existing/keep", NULL, 0);
    char before[4096], after[4096];
    tree_of(&g_sbxd, "host", before, sizeof(before));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *dests[] = {"/files/host/new?archive=tar", "/files/host/existing?archive=tar",
                               "/v1/files/host/existing?archive=tar&replace=true"};
        for (int k = 0; k < 3; k++) {
            struct http_resp r;
            put_archive(&g_sbxd, cases[i].file, dests[k], &r);
            ck_assert_msg(r.status == cases[i].status, "%s to %s: %ld %s", cases[i].file, dests[k],
                          r.status, r.body);
            assert_error(&r, cases[i].status, cases[i].code);
            http_resp_free(&r);
        }
        tree_of(&g_sbxd, "host", after, sizeof(after));
        ck_assert_msg(strcmp(before, after) == 0, "%s changed the workspace:\n%s\nwas\n%s",
                      cases[i].file, after, before);
    }
    char out[256];
    sh(&g_sbxd, "ls /etc/sbxd-pwned ../sbxd-pwned ../zip-pwned 2>/dev/null | wc -l", out,
       sizeof(out));
    ck_assert_str_eq(out, "0\n");
    no_temporaries(&g_sbxd);
}
END_TEST

/* A symlink is judged where it leads once every link on its way is followed: the archive's
 * own (tar and zip), those the workspace has where the archive is merged, and those on the
 * destination's path. Links that stay inside, however they go, are extracted as they are. */
START_TEST(symlinks_are_judged_where_they_lead)
{
    char before[4096], after[4096], out[1024];
    struct http_resp r;
    /* "d -> .", "l -> d/..": into the workspace root, l would be its parent. */
    sh(&g_sbxd, "mkdir -p jl/wl && ln -s . jl/wl/w && ln -s . jl/s", NULL, 0);
    tree_of(&g_sbxd, ".", before, sizeof(before));
    const char *root_cases[] = {"symlink_dot_parent.tar", "symlink_dot_parent.zip"};
    for (int i = 0; i < 2; i++) {
        put_archive(&g_sbxd, root_cases[i], "/files/?archive=tar", &r);
        ck_assert_msg(r.status == 403, "%s: %ld %s", root_cases[i], r.status, r.body);
        assert_error(&r, 403, "PERMISSION_DENIED");
        http_resp_free(&r);
    }
    /* Merged where the workspace has w -> .: w/w/.../.. climbs 8 levels. */
    put_archive(&g_sbxd, "symlink_via_workspace.tar", "/files/jl/wl?archive=tar", &r);
    ck_assert_msg(r.status == 403, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    /* Into jl/s/s/s/dl, which is jl/dl: "../../.." leads out. */
    put_archive(&g_sbxd, "symlink_up3.tar", "/files/jl/s/s/s/dl?archive=tar", &r);
    ck_assert_msg(r.status == 403, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    tree_of(&g_sbxd, ".", after, sizeof(after));
    ck_assert_msg(strcmp(before, after) == 0, "the workspace changed:\n%s\nwas\n%s", after, before);
    /* The same links where nothing makes them climb: extracted. */
    put_archive(&g_sbxd, "symlink_via_workspace.tar", "/files/jl/wl2?archive=tar", &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    put_archive(&g_sbxd, "symlink_up3.tar", "/files/jl/a/b/dl?archive=tar", &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    /* replace=true: the old tree (and its w) goes, so nothing climbs. */
    put_archive(&g_sbxd, "symlink_via_workspace.tar", "/files/jl/wl?archive=tar&replace=true", &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    /* Chains, "." and "..", a link of a subdirectory, a dangling one, one to the parent. */
    const char *benign[] = {"links_benign.tar", "links_benign.zip"};
    for (int i = 0; i < 2; i++) {
        char url[128], cmd[256];
        snprintf(url, sizeof(url), "/files/jl/benign%d?archive=tar", i);
        put_archive(&g_sbxd, benign[i], url, &r);
        ck_assert_msg(r.status == 201, "%s: %ld %s", benign[i], r.status, r.body);
        ck_assert_int_eq((int)jnum(r.json, "symlinks"), 10);
        http_resp_free(&r);
        snprintf(cmd, sizeof(cmd),
                 "cd jl/benign%d && cat c via back sub/p/f up/sub/f && readlink outer dang", i);
        sh(&g_sbxd, cmd, out, sizeof(out));
        ck_assert_str_eq(out, "f\nf\nf\nf\nf\n../x\nnothing/x\n");
    }
    sh(&g_sbxd, "rm -rf jl", NULL, 0);
    no_temporaries(&g_sbxd);
}
END_TEST

START_TEST(merge_replace_and_conflicts)
{
    sh(&g_sbxd, "mkdir -p mg/keep && printf a > mg/a && printf old > mg/b", NULL, 0);
    struct http_resp r;
    /* Merged: a kept, b replaced, c and sub added; 200, the directory was there. */
    put_archive(&g_sbxd, "update.tar", "/files/mg?archive=tar", &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    char out[1024];
    sh(&g_sbxd, "cd mg && ls -p | tr '\\n' ' ' && cat b", out, sizeof(out));
    ck_assert_str_eq(out, "a b c keep/ sub/ new b\n");
    /* A file of the archive where the workspace has a directory: 409, nothing moved. */
    put_archive(&g_sbxd, "file_over_dir.tar", "/files/mg?archive=tar", &r);
    assert_error(&r, 409, "CONFLICT");
    ck_assert_msg(strstr(jstr(r.json, "message"), "replace=true"), "%s", r.body);
    http_resp_free(&r);
    sh(&g_sbxd, "cd mg && ls -p | tr '\\n' ' ' && cat c", out, sizeof(out));
    ck_assert_str_eq(out, "a b c keep/ sub/ c\n");
    /* Replaced: exactly the archive's tree. */
    put_archive(&g_sbxd, "file_over_dir.tar", "/files/mg?archive=tar&replace=true", &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    sh(&g_sbxd, "cd mg && ls -p | tr '\\n' ' '", out, sizeof(out));
    ck_assert_str_eq(out, "c keep ");
    /* Into the workspace root: merged. */
    put_archive(&g_sbxd, "good.zip", "/files/?archive=zip", &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    sh(&g_sbxd, "cat top.txt zd/é.txt && rm -r top.txt zd", out, sizeof(out));
    ck_assert_str_eq(out, "top\nété\n");
    put_archive(&g_sbxd, "good.zip", "/files/?archive=zip&replace=true", &r);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    /* The same name twice: the later entry wins; a file over a directory of the same archive:
     * 409, nothing written. */
    put_archive(&g_sbxd, "dup.tar", "/files/dup?archive=tar", &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    sh(&g_sbxd, "cd dup && cat a l && test ! -L l", out, sizeof(out));
    ck_assert_str_eq(out, "23");
    put_archive(&g_sbxd, "dir_then_file.tar", "/files/dtf?archive=tar", &r);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    /* Onto a file, or a symlink: 409. */
    sh(&g_sbxd, "ln -s mg mglink", NULL, 0);
    put_archive(&g_sbxd, "good.zip", "/files/mglink?archive=zip", &r);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    put_archive(&g_sbxd, "good.zip", "/files/mg/c?archive=zip", &r);
    assert_error(&r, 409, "CONFLICT");
    http_resp_free(&r);
    no_temporaries(&g_sbxd);
}
END_TEST

START_TEST(bad_requests_get_clear_errors)
{
    sh(&g_sbxd, "mkdir -p bad && printf x > bad/f", NULL, 0);
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/bad?archive=rar");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/bad/f?archive=tar");
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/nothing?archive=tar");
    assert_error(&r, 404, "NOT_FOUND");
    http_resp_free(&r);
    put_archive(&g_sbxd, "good.zip", "/files/bad/z?archive=7z", &r);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    put_archive(&g_sbxd, "good.zip", "/files/bad/z?archive=zip&type=directory", &r);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    put_archive(&g_sbxd, "good.zip", "/files/bad/z?archive=zip&replace=maybe", &r);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    put_archive(&g_sbxd, "good.zip", "/files/../z?archive=zip", &r);
    ck_assert_msg(r.status == 403 || r.status == 400, "%ld %s", r.status, r.body);
    http_resp_free(&r);
    /* An empty body is no archive. */
    ck_assert_int_eq(http_request(&g_sbxd, "PUT", "/files/bad/e?archive=tar", NULL, "", 0, 0, &r),
                     0);
    assert_error(&r, 400, "INVALID_ARGUMENT");
    http_resp_free(&r);
    char out[256];
    sh(&g_sbxd, "cd bad && ls", out, sizeof(out)); /* (not "ls bad": gVisor's statx fails it) */
    ck_assert_str_eq(out, "f\n");
    no_temporaries(&g_sbxd);
}
END_TEST

/* A client that goes away in the middle of its archive: nothing of it stays. */
START_TEST(an_abandoned_upload_leaves_nothing)
{
    int fds_before = daemon_fd_count(&g_sbxd);
    char path[256];
    snprintf(path, sizeof(path), "%s/two_big.tar", archives());
    size_t len;
    char *tar = slurp(path, &len);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_sbxd.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    char head[256];
    int n = snprintf(
        head, sizeof(head),
        "PUT /files/gone?archive=tar HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", len);
    ck_assert_int_eq(send(s, head, (size_t)n, MSG_NOSIGNAL), n);
    /* Half the body, then the connection closes. */
    ck_assert_int_eq(send(s, tar, len / 2, MSG_NOSIGNAL), (ssize_t)(len / 2));
    usleep(200000);
    close(s);
    free(tar);
    char out[256] = "x";
    for (int i = 0; i < 100 && *out; i++) {
        sh(&g_sbxd, "ls -a | grep -e '^gone$' -e '^.sbxd-extract' || true", out, sizeof(out));
        if (*out)
            usleep(50000);
    }
    ck_assert_msg(!*out, "left: %s", out);
    for (int i = 0; i < 50 && daemon_fd_count(&g_sbxd) > fds_before; i++)
        usleep(20000);
    ck_assert_int_le(daemon_fd_count(&g_sbxd), fds_before);
}
END_TEST

START_TEST(limits_refuse_bombs_and_floods)
{
    struct daemon d;
    const char *args[] = {"--max-archive-bytes", "1MiB", "--max-archive-entries", "10", NULL};
    daemon_start(&d, args, NULL);
    const char *files[] = {"bomb.tar.gz", "bomb.zip", "two_big.tar", "many.tar"};
    for (int i = 0; i < 4; i++) {
        struct http_resp r;
        double t0 = now_ms();
        put_archive(&d, files[i], "/files/lim?archive=tar", &r);
        ck_assert_msg(r.status == 413, "%s: %ld %s", files[i], r.status, r.body);
        assert_error(&r, 413, "PAYLOAD_TOO_LARGE");
        ck_assert_msg(now_ms() - t0 < 20000, "%s took %.0f ms", files[i], now_ms() - t0);
        http_resp_free(&r);
    }
    char out[256];
    sh(&d, "ls -a | grep -v '^\\.\\.\\?$' | wc -l", out, sizeof(out));
    ck_assert_str_eq(out, "0\n");
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* Packing holds a few blocks, whatever the tree: sbxd's RSS stays flat while 67 MiB go out
 * (few files: each is a round trip under gVisor). */
START_TEST(packing_holds_little_memory)
{
    sh(&g_sbxd,
       "mkdir -p mem/d && head -c 64M /dev/zero > mem/big && cd mem/d && "
       "for i in $(seq 200); do head -c 16384 /dev/urandom > f$i; done",
       NULL, 0);
    struct http_resp r;
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/mem/d/f1?stat=true");
    http_resp_free(&r);
    /* libarchive loaded first (its pages are no part of what a pack holds). */
    http_reqf(&g_sbxd, &r, "GET", NULL, "/files/rt?archive=tar");
    http_resp_free(&r);
    rss_sampling_start(&g_sbxd);
    ck_assert_int_eq(
        http_request(&g_sbxd, "GET", "/files/mem?archive=tar", NULL, NULL, 0, 120000, &r), 0);
    long base;
    long peak = rss_sampling_stop(&base);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(r.len > (67u << 20), "%zu bytes", r.len);
    http_resp_free(&r);
    fprintf(stderr, "archive: 67 MiB packed, sbxd RSS %ld -> %ld KiB\n", base, peak);
    if (base > 0)
        ck_assert_msg(peak - base < 16 * 1024, "RSS grew from %ld to %ld KiB", base, peak);
    sh(&g_sbxd, "rm -rf mem", NULL, 0);
}
END_TEST

/* 100,000 entries (2.6 MB gzipped) that all name one directory 63 levels deep (3.8 KB of
 * path): each was recorded, 375 MiB of sbxd's memory, and walked down to, 78 s. One record
 * per directory now, a lookup when it comes again. The records' memory is bounded (160 bytes
 * per entry --max-archive-entries allows, 1 MiB at least): 1,000 distinct deep directories
 * are 413 under 6,000 entries. The flood's 512 MB of headers count against
 * --max-archive-bytes as files do. */
START_TEST(directory_floods_hold_little_memory)
{
    struct http_resp r;
    /* libarchive loaded first (its pages are no part of what an extraction holds). */
    put_archive(&g_sbxd, "good.zip", "/files/flood-warm?archive=zip", &r);
    http_resp_free(&r);
    rss_sampling_start(&g_sbxd);
    double t0 = now_ms();
    put_archive(&g_sbxd, "deep_dir_flood.tar.gz", "/files/flood?archive=tar", &r);
    long base;
    long peak = rss_sampling_stop(&base);
    fprintf(stderr,
            "archive: 100,000 entries of one deep directory: %ld in %.0f ms, sbxd RSS %ld -> %ld "
            "KiB\n",
            r.status, now_ms() - t0, base, peak);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    ck_assert_int_eq((int)jnum(r.json, "directories"), 63);
    http_resp_free(&r);
#ifndef SBXD_SANITIZED /* (ASan's quarantine holds what each entry freed, on purpose) */
    if (base > 0)
        ck_assert_msg(peak - base < 8 * 1024, "RSS grew from %ld to %ld KiB", base, peak);
#endif
    sh(&g_sbxd, "rm -rf flood flood-warm", NULL, 0);
    struct daemon d;
    const char *args[] = {"--max-archive-entries", "6000", "--max-archive-bytes", "24MiB", NULL};
    daemon_start(&d, args, NULL);
    t0 = now_ms();
    put_archive(&d, "deep_dirs_distinct.tar.gz", "/files/flood?archive=tar", &r);
    fprintf(stderr,
            "archive: 1,000 distinct deep directories under 6,000 entries: %ld in %.0f ms\n",
            r.status, now_ms() - t0);
    ck_assert_msg(r.status == 413, "%ld %s", r.status, r.body);
    assert_error(&r, 413, "PAYLOAD_TOO_LARGE");
    ck_assert_msg(strstr(jstr(r.json, "message"), "directories"), "%s", r.body);
    http_resp_free(&r);
    t0 = now_ms();
    put_archive(&d, "deep_dir_flood.tar.gz", "/files/flood?archive=tar", &r);
    fprintf(stderr, "archive: the flood under --max-archive-bytes 24MiB: %ld in %.0f ms\n",
            r.status, now_ms() - t0);
    ck_assert_msg(r.status == 413, "%ld %s", r.status, r.body);
    assert_error(&r, 413, "PAYLOAD_TOO_LARGE");
    ck_assert_msg(strstr(jstr(r.json, "message"), "--max-archive-bytes"), "%s", r.body);
    http_resp_free(&r);
    char out[256];
    sh(&d, "ls -a | grep -v '^\\.\\.\\?$' | wc -l", out, sizeof(out));
    ck_assert_str_eq(out, "0\n");
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

static void teardown(void)
{
    archives_cleanup();
}

Suite *archive_suite(void)
{
    Suite *s = suite_create("archive");
    TCase *tc = tcase_create("archive");
    tcase_set_timeout(tc, 180);
    tcase_add_unchecked_fixture(tc, archives_make, teardown);
    tcase_add_test(tc, round_trip_keeps_the_tree);
    tcase_add_test(tc, hostile_archives_are_refused_with_nothing_written);
    tcase_add_test(tc, symlinks_are_judged_where_they_lead);
    tcase_add_test(tc, merge_replace_and_conflicts);
    tcase_add_test(tc, bad_requests_get_clear_errors);
    tcase_add_test(tc, an_abandoned_upload_leaves_nothing);
    tcase_add_test(tc, limits_refuse_bombs_and_floods);
    tcase_add_test(tc, packing_holds_little_memory);
    tcase_add_test(tc, directory_floods_hold_little_memory);
    suite_add_tcase(s, tc);
    return s;
}
