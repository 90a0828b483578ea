/*
 * log.h - structured logging to stderr: one JSON object per line (default) or
 * human-readable text. Each line is written with a single write(2) under a lock,
 * so lines from concurrent threads never interleave.
 */
#ifndef SBXD_LOG_H
#define SBXD_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum log_format { LOG_FORMAT_JSON, LOG_FORMAT_TEXT };

enum log_field_type { LF_STR, LF_INT, LF_DBL, LF_BOOL, LF_NULL };

struct log_field {
    const char *key;
    enum log_field_type type;
    union {
        const char *s;
        int64_t i;
        double d;
        bool b;
    } v;
};

#define LOG_S(k, x) ((struct log_field){.key = (k), .type = LF_STR, .v.s = (x)})
#define LOG_I(k, x) ((struct log_field){.key = (k), .type = LF_INT, .v.i = (int64_t)(x)})
#define LOG_D(k, x) ((struct log_field){.key = (k), .type = LF_DBL, .v.d = (x)})
#define LOG_B(k, x) ((struct log_field){.key = (k), .type = LF_BOOL, .v.b = (x)})
#define LOG_NULL(k) ((struct log_field){.key = (k), .type = LF_NULL})

void log_init(enum log_format fmt);

/* level: "info", "warn", "error"; event: a short stable name ("listening", "exec"). A NULL
 * string field is written as null. */
void log_event(const char *level, const char *event, const struct log_field *fields,
               unsigned nfields);

#define LOG_EVENT(level, event, ...)                                                               \
    do {                                                                                           \
        const struct log_field log_f_[] = {__VA_ARGS__};                                           \
        log_event((level), (event), log_f_, sizeof(log_f_) / sizeof(log_f_[0]));                   \
    } while (0)

#endif
