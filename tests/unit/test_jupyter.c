/* jupyter.c against a kernel played by the test: real ZeroMQ sockets, bound in a directory
 * as a kernel binds them (transport ipc), the signature checked with libsodium on the other
 * side. */
#include <check.h>
#include <cjson/cJSON.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "jupyter_internal.h"
#include "suites.h"

struct fake {
    void *zctx, *shell, *iopub;
    char dir[64];
    char key[JP_KEY_LEN + 1];
};

/* Bind s as the kernel binds its socket number port (jp_connection_file). */
static void bind_to(void *s, const char *dir, int port)
{
    char ep[128];
    snprintf(ep, sizeof(ep), "ipc://%s/" JP_IPC_NAME "-%d", dir, port);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    ck_assert_msg(zmq_bind(s, ep) == 0, "bind %s: %s", ep, zmq_strerror(zmq_errno()));
}

static void fake_start(struct fake *f)
{
    struct sbxd_err err = {0};
    ck_assert_msg(jp_new_key(f->key, &err) == 0, "%s", err.msg);
    ck_assert_int_eq((int)strlen(f->key), JP_KEY_LEN);
    snprintf(f->dir, sizeof(f->dir), "/tmp/sbxd-test-jupyter-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    f->zctx = zmq_ctx_new();
    f->shell = zmq_socket(f->zctx, ZMQ_ROUTER);
    f->iopub = zmq_socket(f->zctx, ZMQ_PUB);
    bind_to(f->shell, f->dir, 1);
    bind_to(f->iopub, f->dir, 2);
}

static void fake_stop(struct fake *f)
{
    zmq_close(f->shell);
    zmq_close(f->iopub);
    zmq_ctx_term(f->zctx);
    char path[128];
    for (int i = 1; i <= 2; i++) {
        snprintf(path, sizeof(path), "%s/" JP_IPC_NAME "-%d", f->dir, i);
        unlink(path);
    }
    rmdir(f->dir);
}

static void hmac_hex(const char *key, const char *const part[4], char out[65])
{
    crypto_auth_hmacsha256_state st;
    unsigned char mac[32];
    crypto_auth_hmacsha256_init(&st, (const unsigned char *)key, strlen(key));
    for (int i = 0; i < 4; i++)
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)part[i], strlen(part[i]));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(out, 65, mac, sizeof(mac));
}

/* frames[0..n) sent as one message on s. */
static void send_frames(void *s, const char *const *frames, const size_t *len, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_int_ge(zmq_send(s, frames[i], len[i], i + 1 < n ? ZMQ_SNDMORE : 0), 0);
}

/* A message from the kernel: prefix (identity or topic), then signed with key (or sig as
 * given when not NULL). */
static void kernel_send(void *s, const void *prefix, size_t plen, const char *key, const char *sig,
                        const char *type, const char *parent_id)
{
    char header[256], parent[128];
    snprintf(header, sizeof(header),
             "{\"msg_id\":\"k-%s\",\"session\":\"k\",\"username\":\"kernel\",\"date\":\"\","
             "\"msg_type\":\"%s\",\"version\":\"5.3\"}",
             type, type);
    snprintf(parent, sizeof(parent), "{\"msg_id\":\"%s\"}", parent_id);
    const char *part[4] = {header, parent, "{}", "{\"status\":\"ok\"}"};
    char good[65];
    hmac_hex(key, part, good);
    const char *frames[7] = {prefix,  "<IDS|MSG>", sig ? sig : good, part[0],
                             part[1], part[2],     part[3]};
    size_t len[7] = {plen, 9, strlen(frames[2])};
    for (int i = 3; i < 7; i++)
        len[i] = strlen(frames[i]);
    send_frames(s, frames, len, 7);
}

START_TEST(requests_are_signed_and_bad_replies_dropped)
{
    struct fake f;
    fake_start(&f);
    struct sbxd_err err = {0};
    struct jp_conn *k = jp_open(f.dir, f.key, 1 << 20, &err);
    ck_assert_msg(k != NULL, "%s", err.msg);
    char id[48];
    ck_assert_int_eq(jp_send(k, JP_SHELL, "kernel_info_request", NULL, id, &err), 0);
    /* The kernel's side: identity, delimiter, signature, header, parent, metadata, content. */
    zmq_msg_t fr[8];
    int n = 0;
    for (int more = 1; more && n < 8; n++) {
        zmq_msg_init(&fr[n]);
        ck_assert_int_ge(zmq_msg_recv(&fr[n], f.shell, 0), 0);
        more = zmq_msg_more(&fr[n]);
    }
    ck_assert_int_eq(n, 7);
    ck_assert_int_eq((int)zmq_msg_size(&fr[1]), 9);
    ck_assert(memcmp(zmq_msg_data(&fr[1]), "<IDS|MSG>", 9) == 0);
    char *part[4];
    for (int i = 0; i < 4; i++)
        part[i] = strndup(zmq_msg_data(&fr[3 + i]), zmq_msg_size(&fr[3 + i]));
    char want[65];
    hmac_hex(f.key, (const char *const *)part, want);
    ck_assert_int_eq((int)zmq_msg_size(&fr[2]), 64);
    ck_assert(memcmp(zmq_msg_data(&fr[2]), want, 64) == 0);
    cJSON *h = cJSON_Parse(part[0]);
    ck_assert_str_eq(cJSON_GetObjectItem(h, "msg_type")->valuestring, "kernel_info_request");
    ck_assert_str_eq(cJSON_GetObjectItem(h, "msg_id")->valuestring, id);
    ck_assert_str_eq(cJSON_GetObjectItem(h, "version")->valuestring, "5.3");
    cJSON_Delete(h);
    for (int i = 0; i < 4; i++)
        free(part[i]);

    /* Replies: wrongly signed, unsigned, signed under another key, cut short: all dropped;
     * then a good one, which is the one read. */
    size_t idl = zmq_msg_size(&fr[0]);
    char *ident = malloc(idl);
    memcpy(ident, zmq_msg_data(&fr[0]), idl);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&fr[i]);
    char bad[65];
    memset(bad, 'a', 64);
    bad[64] = '\0';
    kernel_send(f.shell, ident, idl, f.key, bad, "kernel_info_reply", id);
    kernel_send(f.shell, ident, idl, f.key, "", "kernel_info_reply", id);
    kernel_send(f.shell, ident, idl, "another key", NULL, "kernel_info_reply", id);
    const char *cut[3] = {ident, "<IDS|MSG>", "x"};
    size_t cutl[3] = {idl, 9, 1};
    send_frames(f.shell, cut, cutl, 3);
    kernel_send(f.shell, ident, idl, f.key, NULL, "kernel_info_reply", id);
    struct jp_msg m;
    ck_assert_int_eq(jp_recv(k, 5000, &m), 1);
    ck_assert_int_eq(m.channel, JP_SHELL);
    ck_assert_str_eq(m.type, "kernel_info_reply");
    ck_assert_str_eq(m.parent_id, id);
    ck_assert_str_eq(cJSON_GetObjectItem(m.content, "status")->valuestring, "ok");
    jp_msg_free(&m);
    ck_assert_int_eq((int)jp_dropped(k), 4);
    ck_assert_int_eq(jp_recv(k, 50, &m), 0);

    /* iopub: a topic frame first; the subscription takes a moment to reach the publisher. */
    int got = 0;
    for (int i = 0; i < 200 && !got; i++) {
        kernel_send(f.iopub, "kernel.1.status", 15, f.key, NULL, "status", id);
        got = jp_recv(k, 10, &m);
    }
    ck_assert_int_eq(got, 1);
    ck_assert_int_eq(m.channel, JP_IOPUB);
    ck_assert_str_eq(m.type, "status");
    jp_msg_free(&m);
    free(ident);
    jp_close(k);
    fake_stop(&f);
}
END_TEST

START_TEST(connection_file_names_what_the_kernel_needs)
{
    char key[JP_KEY_LEN + 1];
    struct sbxd_err err = {0};
    ck_assert_int_eq(jp_new_key(key, &err), 0);
    char *s = jp_connection_file(key, "python3");
    cJSON *o = cJSON_Parse(s);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "key")->valuestring, key);
    /* Unix sockets under a relative name, bound in the kernel's own directory: no TCP port
     * (which a command could take first, or connect to), nothing but "kernel-N" in
     * /proc/net/unix. */
    ck_assert_str_eq(cJSON_GetObjectItem(o, "transport")->valuestring, "ipc");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "ip")->valuestring, JP_IPC_NAME);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "signature_scheme")->valuestring, "hmac-sha256");
    static const char *const ports[] = {"shell_port", "iopub_port", "stdin_port", "control_port",
                                        "hb_port"};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(cJSON_GetObjectItem(o, ports[i])->valueint, i + 1);
    cJSON_Delete(o);
    free(s);
    /* A new key each time. */
    char key2[JP_KEY_LEN + 1];
    ck_assert_int_eq(jp_new_key(key2, &err), 0);
    ck_assert_str_ne(key, key2);
}
END_TEST

Suite *jupyter_suite(void)
{
    Suite *s = suite_create("jupyter");
    TCase *tc = tcase_create("protocol");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, requests_are_signed_and_bad_replies_dropped);
    tcase_add_test(tc, connection_file_names_what_the_kernel_needs);
    suite_add_tcase(s, tc);
    return s;
}
