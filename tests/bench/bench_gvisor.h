/*
 * bench_gvisor.h - sbxd-bench --gvisor's fixtures (bench_gvisor.c): the floor helper run
 * inside the same gVisor sandbox as sbxd, and the memory of a sandbox.
 */
#ifndef SBXD_BENCH_GVISOR_H
#define SBXD_BENCH_GVISOR_H

#include <stddef.h>

/* Serve the helper's requests on 127.0.0.1:port, to its first client only, dd's files in dir
 * (sbxd-bench --spawn-helper PORT DIR). */
int bench_spawn_helper_serve(int port, const char *dir);

/* A connection to the helper on port, tried until timeout_ms; -1 when none came. */
int bench_helper_connect(int port, double timeout_ms);

/* One request to the helper ("once", "rate T SECS", "dd-write NAME MIB", "dd-read NAME") and
 * its figure into value; -1 with err on failure. */
int bench_helper_ask(int fd, const char *request, double *value, char *err, size_t errlen);

/* The proportional set size (KiB) of a gVisor sandbox: its sentry (the runsc-sandbox process
 * whose command line names tag) and the sentry's descendants; -1 when none is found. */
long bench_sandbox_pss_kb(const char *tag);

#endif
