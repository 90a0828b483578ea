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
