/* The Jupyter messaging protocol over ZeroMQ (jupyter_internal.h). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "jupyter_internal.h"
#include "context_internal.h"
#include "sbxd/timeutil.h"

#define DELIM   "<IDS|MSG>"
#define SIG_LEN (2 * crypto_auth_hmacsha256_BYTES)
/* Frames kept of one message: identities, the delimiter, the signature, four parts, and a
 * few buffers (which sbxd does not use: comm messages). */
#define MAX_FRAMES 16

struct jp_conn {
    void *sock[4]; /* by enum jp_channel */
    char key[JP_KEY_LEN + 1];
    char session[33];
    uint64_t seq;
    uint64_t dropped;
    unsigned rr;   /* which of shell, iopub, stdin is read first: in turn */
    unsigned refs; /* atomic: jp_open's and jp_hold's, each given back by jp_close */
    pthread_mutex_t control_lock;
};

/* libzmq is loaded at the first kernel, not linked: it is C++ and brings libstdc++, Kerberos
 * and multicast libraries, which would double the resident memory of a daemon that never
 * starts a kernel. */
#define ZMQ_LIBRARY "libzmq.so.5"
#define ZMQ_FUNCS(X)                                                                               \
    X(zmq_ctx_new)                                                                                 \
    X(zmq_ctx_set)                                                                                 \
    X(zmq_ctx_term)                                                                                \
    X(zmq_socket)                                                                                  \
    X(zmq_close)                                                                                   \
    X(zmq_setsockopt)                                                                              \
    X(zmq_connect)                                                                                 \
    X(zmq_send)                                                                                    \
    X(zmq_msg_init)                                                                                \
    X(zmq_msg_recv)                                                                                \
    X(zmq_msg_close)                                                                               \
    X(zmq_msg_data)                                                                                \
    X(zmq_msg_size)                                                                                \
    X(zmq_msg_more)                                                                                \
    X(zmq_poll)                                                                                    \
    X(zmq_errno)                                                                                   \
    X(zmq_strerror)

static struct {
#define ZMQ_DECL(f) __typeof__(&f) f;
    ZMQ_FUNCS(ZMQ_DECL)
#undef ZMQ_DECL
} z;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *zctx;
static char lib_error[200]; /* why there is no zctx */

static void lib_init(void)
{
    if (sodium_init() < 0) {
        snprintf(lib_error, sizeof(lib_error), "libsodium cannot be initialised");
        return;
    }
    void *h = dlopen(ZMQ_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(lib_error, sizeof(lib_error), "cannot load %s (Debian's libzmq5): %s", ZMQ_LIBRARY,
                 dlerror());
        return;
    }
#define ZMQ_LOAD(f)                                                                                \
    if (!(z.f = (__typeof__(&f))dlsym(h, #f))) {                                                   \
        snprintf(lib_error, sizeof(lib_error), "%s has no %s", ZMQ_LIBRARY, #f);                   \
        return;                                                                                    \
    }
    ZMQ_FUNCS(ZMQ_LOAD)
#undef ZMQ_LOAD
    zctx = z.zmq_ctx_new();
    if (!zctx) {
        snprintf(lib_error, sizeof(lib_error), "cannot make a ZeroMQ context");
        return;
    }
    z.zmq_ctx_set(zctx, ZMQ_IO_THREADS, 1);
    z.zmq_ctx_set(zctx, ZMQ_BLOCKY, 0); /* no waiting on unsent messages at the end */
}

void jp_shutdown(void)
{
    if (zctx)
        z.zmq_ctx_term(zctx);
    zctx = NULL;
}

static int hex_random(char *out, size_t bytes)
{
    uint8_t raw[32];
    if (bytes > sizeof(raw) || getrandom(raw, bytes, 0) != (ssize_t)bytes)
        return -1;
    sodium_bin2hex(out, 2 * bytes + 1, raw, bytes);
    return 0;
}

int jp_new_key(char key[JP_KEY_LEN + 1], struct sbxd_err *err)
{
    if (hex_random(key, JP_KEY_LEN / 2) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "no random bytes for a kernel's key");
    return 0;
}

char *jp_connection_file(const char *key, const char *kernel_name)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "shell_port", 1);
    cJSON_AddNumberToObject(o, "iopub_port", 2);
    cJSON_AddNumberToObject(o, "stdin_port", 3);
    cJSON_AddNumberToObject(o, "control_port", 4);
    cJSON_AddNumberToObject(o, "hb_port", 5);
    /* Relative: bound in the kernel's working directory as it starts (its own directory). */
    cJSON_AddStringToObject(o, "ip", JP_IPC_NAME);
    cJSON_AddStringToObject(o, "key", key);
    cJSON_AddStringToObject(o, "transport", "ipc");
    cJSON_AddStringToObject(o, "signature_scheme", "hmac-sha256");
    cJSON_AddStringToObject(o, "kernel_name", kernel_name);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

void jp_hold(struct jp_conn *k)
{
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_RELAXED);
}

void jp_close(struct jp_conn *k)
{
    if (!k || __atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (int i = 0; i < 4; i++)
        if (k->sock[i])
            z.zmq_close(k->sock[i]);
    pthread_mutex_destroy(&k->control_lock);
    sodium_memzero(k->key, sizeof(k->key));
    free(k);
}

struct jp_conn *jp_open(const char *dir, const char *key, int64_t max_msg, struct sbxd_err *err)
{
    pthread_once(&once, lib_init);
    if (!zctx) {
        sbxd_fail(err, SBXD_E_UNAVAILABLE, 0, "Jupyter kernels are unavailable: %s", lib_error);
        return NULL;
    }
    struct jp_conn *k = calloc(1, sizeof(*k));
    if (!k || hex_random(k->session, 16) < 0) {
        free(k);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&k->control_lock, NULL);
    k->refs = 1;
    snprintf(k->key, sizeof(k->key), "%s", key);
    const int type[4] = {ZMQ_DEALER, ZMQ_SUB, ZMQ_DEALER, ZMQ_DEALER};
    /* By enum jp_channel: the kernel's port numbers of jp_connection_file. */
    const int port[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        void *s = z.zmq_socket(zctx, type[i]);
        char ep[PATH_MAX + 32];
        snprintf(ep, sizeof(ep), "ipc://%s/%s-%d", dir, JP_IPC_NAME, port[i]);
        int zero = 0;
        /* What ZeroMQ's I/O thread reads ahead of sbxd is bounded: a few messages on iopub
         * (a kernel displaying hundreds of large images otherwise had them all queued in
         * sbxd: 173 MB), each of a bounded size. */
        int hwm = SBXD_KERNEL_RCVHWM;
        /* shell and stdin under one identity: the kernel asks for input on the stdin socket
         * of the client whose shell request runs. */
        if (!s || z.zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero)) < 0 ||
            z.zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_msg, sizeof(max_msg)) < 0 ||
            (type[i] == ZMQ_SUB && z.zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof(hwm)) < 0) ||
            (type[i] == ZMQ_SUB && z.zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0) < 0) ||
            (type[i] == ZMQ_DEALER &&
             z.zmq_setsockopt(s, ZMQ_ROUTING_ID, k->session, strlen(k->session)) < 0) ||
            z.zmq_connect(s, ep) < 0) {
            int e = z.zmq_errno();
            if (s)
                z.zmq_close(s);
            jp_close(k);
            sbxd_fail(err, SBXD_E_INTERNAL, e, "cannot connect to the kernel at %s: %s", ep,
                      z.zmq_strerror(e));
            return NULL;
        }
        k->sock[i] = s;
    }
    return k;
}

/* HMAC-SHA256 of the four parts, as hex. */
static void sign(const struct jp_conn *k, const void *const part[4], const size_t len[4],
                 char out[SIG_LEN + 1])
{
    crypto_auth_hmacsha256_state st;
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_init(&st, (const uint8_t *)k->key, strlen(k->key));
    for (int i = 0; i < 4; i++)
        crypto_auth_hmacsha256_update(&st, part[i], len[i]);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(out, SIG_LEN + 1, mac, sizeof(mac));
}

static int send_parts(void *s, const void *const part[4], const size_t len[4], const char *sig)
{
    if (z.zmq_send(s, DELIM, strlen(DELIM), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        z.zmq_send(s, sig, SIG_LEN, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    for (int i = 0; i < 4; i++)
        if (z.zmq_send(s, part[i], len[i], (i < 3 ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
            return -1;
    return 0;
}

/* Replies on the control channel are not waited for: drop what has come. */
static void drain(void *s)
{
    zmq_msg_t m;
    z.zmq_msg_init(&m);
    while (z.zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0) {
    }
    z.zmq_msg_close(&m);
}

int jp_send(struct jp_conn *k, enum jp_channel ch, const char *msg_type, const char *content,
            char *id, struct sbxd_err *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char date[40];
    size_t dl = strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(date + dl, sizeof(date) - dl, ".%06ldZ", ts.tv_nsec / 1000);
    uint64_t seq = __atomic_add_fetch(&k->seq, 1, __ATOMIC_RELAXED);
    snprintf(id, 48, "%s_%llu", k->session, (unsigned long long)seq);
    char header[320];
    int hl = snprintf(header, sizeof(header),
                      "{\"msg_id\":\"%s\",\"session\":\"%s\",\"username\":\"sbxd\",\"date\":\"%s\","
                      "\"msg_type\":\"%s\",\"version\":\"5.3\"}",
                      id, k->session, date, msg_type);
    if (!content)
        content = "{}";
    const void *part[4] = {header, "{}", "{}", content};
    size_t len[4] = {(size_t)hl, 2, 2, strlen(content)};
    char sig[SIG_LEN + 1];
    sign(k, part, len, sig);
    if (ch == JP_CONTROL)
        pthread_mutex_lock(&k->control_lock);
    if (ch == JP_CONTROL)
        drain(k->sock[ch]);
    int rc = send_parts(k->sock[ch], part, len, sig);
    int e = z.zmq_errno();
    if (ch == JP_CONTROL)
        pthread_mutex_unlock(&k->control_lock);
    if (rc < 0)
        return sbxd_fail(err, SBXD_E_CONFLICT, e, "the kernel takes no %s now: %s", msg_type,
                         z.zmq_strerror(e));
    return 0;
}

void jp_msg_free(struct jp_msg *m)
{
    cJSON_Delete(m->header);
    cJSON_Delete(m->parent);
    cJSON_Delete(m->content);
    memset(m, 0, sizeof(*m));
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* One whole message from s (ready): 1 with *m, 0 when it was dropped. */
static int take(struct jp_conn *k, void *s, enum jp_channel ch, struct jp_msg *m)
{
    zmq_msg_t f[MAX_FRAMES];
    int n = 0;
    bool more = true;
    while (more) {
        zmq_msg_t cur;
        z.zmq_msg_init(&cur);
        if (z.zmq_msg_recv(&cur, s, ZMQ_DONTWAIT) < 0) {
            z.zmq_msg_close(&cur);
            break;
        }
        more = z.zmq_msg_more(&cur);
        if (n < MAX_FRAMES)
            f[n++] = cur; /* (a zmq_msg_t may be moved by copy once received) */
        else
            z.zmq_msg_close(&cur);
    }
    int d = 0;
    while (d < n && !(z.zmq_msg_size(&f[d]) == strlen(DELIM) &&
                      memcmp(z.zmq_msg_data(&f[d]), DELIM, strlen(DELIM)) == 0))
        d++;
    int ok = 0;
    if (d + 5 < n) { /* the delimiter, the signature and the four parts */
        const void *part[4];
        size_t len[4];
        for (int i = 0; i < 4; i++) {
            part[i] = z.zmq_msg_data(&f[d + 2 + i]);
            len[i] = z.zmq_msg_size(&f[d + 2 + i]);
        }
        char want[SIG_LEN + 1];
        sign(k, part, len, want);
        if (z.zmq_msg_size(&f[d + 1]) == SIG_LEN &&
            sodium_memcmp(want, z.zmq_msg_data(&f[d + 1]), SIG_LEN) == 0) {
            m->channel = ch;
            m->header = cJSON_ParseWithLength(part[0], len[0]);
            m->parent = cJSON_ParseWithLength(part[1], len[1]);
            m->content = cJSON_ParseWithLength(part[3], len[3]);
            if (cJSON_IsObject(m->header) && cJSON_IsObject(m->parent) &&
                cJSON_IsObject(m->content)) {
                m->type = str_of(m->header, "msg_type");
                m->parent_id = str_of(m->parent, "msg_id");
                ok = 1;
            } else {
                jp_msg_free(m);
            }
        }
    }
    for (int i = 0; i < n; i++)
        z.zmq_msg_close(&f[i]);
    if (!ok)
        k->dropped++;
    return ok;
}

int jp_recv(struct jp_conn *k, int timeout_ms, struct jp_msg *m)
{
    memset(m, 0, sizeof(*m));
    static const enum jp_channel order[3] = {JP_SHELL, JP_IOPUB, JP_STDIN};
    int64_t until = timeout_ms < 0 ? 0 : time_mono_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        zmq_pollitem_t it[3];
        for (int i = 0; i < 3; i++)
            it[i] = (zmq_pollitem_t){.socket = k->sock[order[i]], .events = ZMQ_POLLIN};
        long wait = -1;
        if (until) {
            int64_t left = until - time_mono_ns();
            wait = left > 0 ? (long)((left + 999999) / 1000000) : 0;
        }
        int rc = z.zmq_poll(it, 3, wait);
        if (rc < 0 && z.zmq_errno() != EINTR)
            return 0;
        for (int j = 0; rc > 0 && j < 3; j++) {
            int i = (int)((k->rr + (unsigned)j) % 3);
            if (!(it[i].revents & ZMQ_POLLIN))
                continue;
            k->rr = (unsigned)i + 1;
            if (take(k, it[i].socket, order[i], m))
                return 1;
        }
        if (until && time_mono_ns() >= until)
            return 0;
    }
}

uint64_t jp_dropped(const struct jp_conn *k)
{
    return k->dropped;
}
