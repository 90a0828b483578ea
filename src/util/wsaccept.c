#include <nettle/sha1.h>
#include <string.h>

#include "sbxd/base64.h"
#include "sbxd/wsaccept.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

void ws_accept_of(const char *key, char out[WS_ACCEPT_LEN + 1])
{
    struct sha1_ctx h;
    uint8_t d[SHA1_DIGEST_SIZE];
    sha1_init(&h);
    sha1_update(&h, strlen(key), (const uint8_t *)key);
    sha1_update(&h, strlen(WS_GUID), (const uint8_t *)WS_GUID);
    sha1_digest(&h, sizeof(d), d);
    out[base64_encode(d, sizeof(d), out)] = '\0';
}
