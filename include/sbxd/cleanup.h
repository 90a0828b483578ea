/*
 * cleanup.h - resources released when their variable goes out of scope, so that every early
 * return is leak-free without a goto ladder:
 *     autoclose int fd = openat(...);   closed when >= 0
 *     autofree char *p = malloc(...);   freed (NULL is fine)
 * and, to hand a resource to a call that takes it over, leaving nothing for the cleanup:
 *     return STEAL(p);                   p's value, p set to NULL
 *     return STEAL_FD(fd);               fd's value, fd set to -1
 *     run_open(..., STEAL_STRUCT(&req)); a copy of *req the call takes, *req zeroed
 * A module's own cleanups sit with its type (request.h: autoreq).
 */
#ifndef SBXD_CLEANUP_H
#define SBXD_CLEANUP_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline void cleanup_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

static inline void cleanup_free_ptr(void *p)
{
    free(*(void **)p);
}

#define autoclose __attribute__((cleanup(cleanup_close_fd)))
#define autofree  __attribute__((cleanup(cleanup_free_ptr)))

/* The pointer p holds, p left NULL (its autofree then frees nothing). */
#define STEAL(p)                                                                                   \
    ({                                                                                             \
        __typeof__(p) stolen_ = (p);                                                               \
        (p) = NULL;                                                                                \
        stolen_;                                                                                   \
    })

/* The descriptor fd holds, fd left -1 (its autoclose then closes nothing). */
#define STEAL_FD(fd)                                                                               \
    ({                                                                                             \
        int stolen_fd_ = (fd);                                                                     \
        (fd) = -1;                                                                                 \
        stolen_fd_;                                                                                \
    })

static inline void *cleanup_steal_bytes(void *dst, void *src, size_t n)
{
    memcpy(dst, src, n);
    memset(src, 0, n);
    return dst;
}

/* A pointer to a copy of *p (a compound literal living to the end of the enclosing block),
 * *p zeroed: for a struct whose cleanup frees what it holds and frees nothing once zero. */
#define STEAL_STRUCT(p)                                                                            \
    ((__typeof__(*(p)) *)cleanup_steal_bytes(&(__typeof__(*(p))){0}, (p), sizeof(*(p))))

#endif
