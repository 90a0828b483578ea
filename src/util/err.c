#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sbxd/err.h"

__attribute__((format(printf, 5, 0))) static int fail_v(struct sbxd_err *err,
                                                        enum sbxd_errkind kind, int sys_errno,
                                                        bool with_errno, const char *fmt,
                                                        va_list ap)
{
    if (!err)
        return -1;
    err->kind = kind;
    err->sys_errno = sys_errno;
    err->flags = 0; /* a flag is set by whoever makes the error, after this */
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    if (with_errno && n >= 0 && (size_t)n < sizeof(err->msg))
        snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", strerror(sys_errno));
    return -1;
}

int sbxd_fail(struct sbxd_err *err, enum sbxd_errkind kind, int sys_errno, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(err, kind, sys_errno, false, fmt, ap);
    va_end(ap);
    return -1;
}

int sbxd_fail_errno(struct sbxd_err *err, enum sbxd_errkind kind, int sys_errno, const char *fmt,
                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(err, kind, sys_errno, true, fmt, ap);
    va_end(ap);
    return -1;
}

int sbxd_err_wrap(struct sbxd_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char out[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof(out), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    size_t at = (size_t)n < sizeof(out) ? (size_t)n : sizeof(out) - 1;
    size_t room = sizeof(out) - 1 - at;
    size_t len = strnlen(err->msg, sizeof(err->msg) - 1);
    memcpy(out + at, err->msg, len < room ? len : room);
    out[at + (len < room ? len : room)] = '\0';
    memcpy(err->msg, out, sizeof(out));
    return -1;
}
