/*
 * ws_control.c - the terminal's control messages (ws_tty.c), JSON text frames from a viewer:
 * {"type":"resize","rows":R,"cols":C}, {"type":"input","data":"..."},
 * {"type":"signal","signal":"SIGINT"}. Decoded here, apart from any process, so the decoder
 * can be fuzzed alone (tests/fuzz/fuzz_tty.c).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "sbxd/background.h"

int ws_control_parse(const char *text, size_t n, struct ws_control *out, char *why, size_t len)
{
    memset(out, 0, sizeof(*out));
    cJSON *j = n <= WS_CONTROL_MAX ? cJSON_ParseWithLength(text, n) : NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    int rc = -1;
    if (n > WS_CONTROL_MAX) {
        snprintf(why, len, "a control message is at most %d bytes", WS_CONTROL_MAX);
    } else if (!cJSON_IsObject(j) || !cJSON_IsString(type)) {
        snprintf(why, len,
                 "a text message is a JSON object with a \"type\": resize, input or "
                 "signal");
    } else if (strcmp(type->valuestring, "resize") == 0) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "rows");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "cols");
        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(c) || r->valuedouble < 1 ||
            r->valuedouble > WS_PTY_MAX || c->valuedouble < 1 || c->valuedouble > WS_PTY_MAX ||
            r->valuedouble != (unsigned)r->valuedouble ||
            c->valuedouble != (unsigned)c->valuedouble) {
            snprintf(why, len, "resize takes rows and cols, whole numbers from 1 to %d",
                     WS_PTY_MAX);
        } else {
            out->kind = WS_CTL_RESIZE;
            out->rows = (unsigned)r->valuedouble;
            out->cols = (unsigned)c->valuedouble;
            rc = 0;
        }
    } else if (strcmp(type->valuestring, "input") == 0) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
        if (!cJSON_IsString(d)) {
            snprintf(why, len, "input takes data, a string");
        } else if (!(out->data = strdup(d->valuestring))) {
            snprintf(why, len, "out of memory");
        } else {
            out->kind = WS_CTL_INPUT;
            out->data_len = strlen(out->data);
            rc = 0;
        }
    } else if (strcmp(type->valuestring, "signal") == 0) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "signal");
        const char *canonical;
        int sig = cJSON_IsString(s) ? bg_signal_named(s->valuestring, &canonical) : 0;
        if (!sig) {
            snprintf(why, len, "signal takes one of " BG_SIGNAL_NAMES);
        } else {
            out->kind = WS_CTL_SIGNAL;
            out->signal = sig;
            rc = 0;
        }
    } else {
        snprintf(why, len, "unknown message type: resize, input and signal are known");
    }
    cJSON_Delete(j);
    return rc;
}
