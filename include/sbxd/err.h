/*
 * err.h - the error object every module fills and only the HTTP layer maps.
 *
 * Functions return 0 / -1 (or a pointer / NULL) and describe the failure in a
 * struct sbxd_err: a kind (what went wrong, independent of HTTP), the errno
 * that caused it when there is one, and a human sentence for the client.
 */
#ifndef SBXD_ERR_H
#define SBXD_ERR_H

enum sbxd_errkind {
    SBXD_E_NONE = 0,
    SBXD_E_INVALID,      /* the request is malformed or a value is out of range */
    SBXD_E_DENIED,       /* a path leaves the workspace, or access is refused */
    SBXD_E_NOT_FOUND,    /* the named thing does not exist */
    SBXD_E_CONFLICT,     /* the named thing is in a state that forbids it (a non-empty dir) */
    SBXD_E_RANGE,        /* a requested range lies outside the content */
    SBXD_E_TOO_LARGE,    /* a body or value is over its configured limit */
    SBXD_E_BUSY,         /* a capacity limit is reached; retry later */
    SBXD_E_UNAVAILABLE,  /* the daemon is draining or degraded */
    SBXD_E_NO_SPACE,     /* the filesystem is full */
    SBXD_E_PRECONDITION, /* a condition of the request (If-Match) does not hold */
    SBXD_E_INTERNAL,     /* sbxd itself failed (a syscall, memory) */
};

/* Finer reasons within a kind, for a caller that must tell them apart (the message is for
 * people and never inspected). sbxd_fail clears them; the function that documents one sets
 * it right after. */
enum sbxd_errflag {
    SBXD_EF_SPECIAL_FILE = 1, /* SBXD_E_INVALID: neither a regular file nor a directory */
    SBXD_EF_ENDED = 2,        /* SBXD_E_CONFLICT (job_stdin_write): the process has ended */
    SBXD_EF_INPUT_CLOSED = 4, /* SBXD_E_CONFLICT (job_stdin_write): it closed its stdin */
    SBXD_EF_NO_CWD = 8,       /* SBXD_E_INVALID (job_start): the cwd does not exist */
    SBXD_EF_GONE = 16,        /* SBXD_E_UNAVAILABLE (run_open): nobody is left to answer */
};

struct sbxd_err {
    enum sbxd_errkind kind;
    int sys_errno;
    unsigned flags; /* SBXD_EF_* */
    char msg[512];
};

/* Fill err (when not NULL) and return -1, so callers can `return sbxd_fail(...)`. */
int sbxd_fail(struct sbxd_err *err, enum sbxd_errkind kind, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Same, with ": strerror(sys_errno)" appended to the message. */
int sbxd_fail_errno(struct sbxd_err *err, enum sbxd_errkind kind, int sys_errno, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

/* Put a context before err's message ("--pass-env: " + "more than 256 items"), keeping its
 * kind, errno and flags, so a caller says where without re-making the error. The message is
 * cut at sizeof(msg) - 1 bytes as any other. Returns -1, as sbxd_fail. */
int sbxd_err_wrap(struct sbxd_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
