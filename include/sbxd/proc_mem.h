/*
 * proc_mem.h - the resident memory of a process tree, read from /proc: a long-lived process
 * sbxd started (a context's shell or kernel, a PID namespace's init) and everything beneath
 * it. A walk of /proc, not for each execution.
 */
#ifndef SBXD_PROC_MEM_H
#define SBXD_PROC_MEM_H

#include <stdint.h>
#include <sys/types.h>

/* The resident bytes of top and of every process beneath it, summed (0 when it is gone, or
 * top <= 0). Through its threads' children files where the kernel has them, a few files
 * read; else one pass over /proc (gVisor has no children files). */
uint64_t proc_tree_rss(pid_t top);

#endif
