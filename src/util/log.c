#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/jsonw.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"

static enum log_format log_fmt = LOG_FORMAT_JSON;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void log_init(enum log_format fmt)
{
    log_fmt = fmt;
}

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n <= 0)
            return; /* a closed or broken stderr must not stop the daemon */
        buf += n;
        len -= (size_t)n;
    }
}

/* Text format: values as they are, newlines folded so one event stays one line. */
static void put_text(struct jsonw *w, const char *s)
{
    for (const char *nl; (nl = strchr(s, '\n')) != NULL; s = nl + 1) {
        jw_raw(w, s, (size_t)(nl - s));
        jw_raw(w, " ", 1);
    }
    jw_raw(w, s, strlen(s));
}

void log_event(const char *level, const char *event, const struct log_field *fields,
               unsigned nfields)
{
    char ts[40];
    time_rfc3339(time_real_ns(), ts, sizeof(ts));
    struct jsonw w;
    jw_init(&w, 512);
    if (log_fmt == LOG_FORMAT_JSON) {
        jw_obj_begin(&w);
        jw_key(&w, "ts");
        jw_str(&w, ts);
        jw_key(&w, "level");
        jw_str(&w, level);
        jw_key(&w, "event");
        jw_str(&w, event);
        for (unsigned i = 0; i < nfields; i++) {
            const struct log_field *f = &fields[i];
            jw_key(&w, f->key);
            switch (f->type) {
            case LF_STR:
                jw_str(&w, f->v.s);
                break;
            case LF_INT:
                jw_int(&w, f->v.i);
                break;
            case LF_DBL:
                jw_double(&w, f->v.d, 3);
                break;
            case LF_BOOL:
                jw_bool(&w, f->v.b);
                break;
            case LF_NULL:
                jw_null(&w);
                break;
            }
        }
        jw_obj_end(&w);
    } else {
        put_text(&w, ts);
        put_text(&w, " ");
        put_text(&w, level);
        put_text(&w, " ");
        put_text(&w, event);
        for (unsigned i = 0; i < nfields; i++) {
            const struct log_field *f = &fields[i];
            char num[64];
            put_text(&w, " ");
            put_text(&w, f->key);
            put_text(&w, "=");
            switch (f->type) {
            case LF_STR:
                put_text(&w, f->v.s ? f->v.s : "-");
                break;
            case LF_INT:
                snprintf(num, sizeof(num), "%lld", (long long)f->v.i);
                put_text(&w, num);
                break;
            case LF_DBL:
                snprintf(num, sizeof(num), "%.3f", f->v.d);
                put_text(&w, num);
                break;
            case LF_BOOL:
                put_text(&w, f->v.b ? "true" : "false");
                break;
            case LF_NULL:
                put_text(&w, "-");
                break;
            }
        }
    }
    jw_newline(&w);
    size_t len;
    char *line = jw_finish(&w, &len);
    if (!line)
        return;
    pthread_mutex_lock(&log_lock);
    write_all(line, len);
    pthread_mutex_unlock(&log_lock);
    free(line);
}
