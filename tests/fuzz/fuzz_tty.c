/*
 * fuzz_tty - the WebSocket terminal's control messages (src/http/ws_control.c). An accepted
 * message is a resize within 1..WS_PTY_MAX, an input whose data is NUL-terminated at its
 * length, or a signal among those a client may send; a refused one says why and leaves
 * nothing to free.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_control m;
    char why[256];
    why[0] = '\0';
    if (ws_control_parse((const char *)data, size, &m, why, sizeof(why)) < 0) {
        check(why[0] != '\0');
        check(m.data == NULL);
        return 0;
    }
    switch (m.kind) {
    case WS_CTL_RESIZE:
        check(m.rows >= 1 && m.rows <= WS_PTY_MAX && m.cols >= 1 && m.cols <= WS_PTY_MAX);
        check(m.data == NULL);
        break;
    case WS_CTL_INPUT:
        check(m.data && strlen(m.data) == m.data_len && m.data_len < size);
        break;
    case WS_CTL_SIGNAL:
        check(m.signal == SIGINT || m.signal == SIGTERM || m.signal == SIGKILL ||
              m.signal == SIGHUP || m.signal == SIGQUIT || m.signal == SIGUSR1 ||
              m.signal == SIGUSR2 || m.signal == SIGCONT || m.signal == SIGSTOP);
        check(m.data == NULL);
        break;
    default:
        check(0);
    }
    free(m.data);
    return 0;
}
