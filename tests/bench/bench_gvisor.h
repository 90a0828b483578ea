/*
 * bench_gvisor.h - sbxd-bench --gvisor's fixtures (bench_gvisor.c): the floor helper run
 * inside the same gVisor sandbox as sbxd, and the memory of a sandbox.
 */
#ifndef SBXD_BENCH_GVISOR_H
#define SBXD_BENCH_GVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Serve the helper's requests on 127.0.0.1:port, to its first client only, dd's files in dir
 * (sbxd-bench --spawn-helper PORT DIR). */
int bench_spawn_helper_serve(int port, const char *dir);

/* A connection to the helper on port, tried until timeout_ms; -1 when none came. */
int bench_helper_connect(int port, double timeout_ms);

/* One request to the helper ("once", "rate T SECS", "dd-write NAME MIB", "dd-read NAME") and
 * its figure into value; -1 with err on failure. */
int bench_helper_ask(int fd, const char *request, double *value, char *err, size_t errlen);

/* A plain transfer of `bytes` between the bench and the helper over the loopback (the helper
 * connects to a port the bench listens on for it): to_bench, the helper sendfile()s DIR/name
 * to the bench; else the bench sends zeros that the helper writes to DIR/name and fsyncs. The
 * seconds from the connection to the last byte (received: to the helper's close, after its
 * fsync) into secs; -1 with err. */
int bench_helper_plain(int fd, bool to_bench, const char *name, uint64_t bytes, double *secs,
                       char *err, size_t errlen);

/* The proportional set size (KiB) of a gVisor sandbox: its sentry (the runsc-sandbox process
 * whose command line names tag) and the sentry's descendants; -1 when none is found. */
long bench_sandbox_pss_kb(const char *tag);

#endif
