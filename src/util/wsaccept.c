/*
 * wsaccept.c - Sec-WebSocket-Accept (wsaccept.h). nettle's SHA-1 is loaded at the first
 * handshake, not at start: linked, the library cost every sbxd 216 KiB of resident memory
 * for a hash only a terminal needs (as libzmq and libarchive are loaded at first use).
 */
#include <dlfcn.h>
#include <nettle/sha1.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "sbxd/base64.h"
#include "sbxd/wsaccept.h"

#define WS_GUID        "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define NETTLE_LIBRARY "libnettle.so.8"

static struct {
    __typeof__(&nettle_sha1_init) init;
    __typeof__(&nettle_sha1_update) update;
    __typeof__(&nettle_sha1_digest) digest;
} n;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[200];

static void load(void)
{
    void *h = dlopen(NETTLE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof(load_error), "cannot load %s (Debian's libnettle8): %s",
                 NETTLE_LIBRARY, dlerror());
        return;
    }
    n.init = (__typeof__(n.init))dlsym(h, "nettle_sha1_init");
    n.update = (__typeof__(n.update))dlsym(h, "nettle_sha1_update");
    n.digest = (__typeof__(n.digest))dlsym(h, "nettle_sha1_digest");
    if (!n.init || !n.update || !n.digest) {
        snprintf(load_error, sizeof(load_error), "%s has no SHA-1", NETTLE_LIBRARY);
        n.init = NULL;
    }
}

const char *ws_accept_of(const char *key, char out[WS_ACCEPT_LEN + 1])
{
    pthread_once(&once, load);
    if (!n.init)
        return load_error;
    struct sha1_ctx h;
    uint8_t d[SHA1_DIGEST_SIZE];
    n.init(&h);
    n.update(&h, strlen(key), (const uint8_t *)key);
    n.update(&h, strlen(WS_GUID), (const uint8_t *)WS_GUID);
    n.digest(&h, sizeof(d), d);
    out[base64_encode(d, sizeof(d), out)] = '\0';
    return NULL;
}
