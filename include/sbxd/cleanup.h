/*
 * cleanup.h - resources released when their variable goes out of scope, so that every early
 * return is leak-free without a goto ladder:
 *     autoclose int fd = openat(...);   closed when >= 0
 *     autofree char *p = malloc(...);   freed (NULL is fine)
 */
#ifndef SBXD_CLEANUP_H
#define SBXD_CLEANUP_H

#include <stdlib.h>
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

#endif
