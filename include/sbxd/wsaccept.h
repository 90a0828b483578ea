/*
 * wsaccept.h - the WebSocket handshake's Sec-WebSocket-Accept (RFC 6455 4.2.2): base64 of
 * the SHA-1 (nettle's, loaded at the first call) of the client's key and the protocol's GUID.
 * sbxd answers with it (the terminal) and sbx checks it (attach, shell).
 */
#ifndef SBXD_WSACCEPT_H
#define SBXD_WSACCEPT_H

#define WS_ACCEPT_LEN 28 /* base64 of 20 bytes */

/* key's accept value into out (NUL-terminated): NULL, or why not (nettle cannot be loaded). */
const char *ws_accept_of(const char *key, char out[WS_ACCEPT_LEN + 1]);

#endif
