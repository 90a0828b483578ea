/*
 * limits.h - the fixed limits several modules share. Each module's own are in its header
 * (exec_limits.h, fs_limits.h, context_internal.h, http_internal.h, server.h, mcp.h, reset.h,
 * main.c); configurable values have their defaults in config.c's option table instead.
 */
#ifndef SBXD_LIMITS_H
#define SBXD_LIMITS_H

/* Upper bound of any timeout a configuration or request may ask for: 7 days. */
#define SBXD_TIMEOUT_HARD_MAX_MS (7ULL * 24 * 3600 * 1000)

/* Bytes read from a child pipe per read(2). */
#define SBXD_READ_CHUNK 65536

/* Members of one JSON object in a request (jsonkeys.h): more is refused before its names are
 * checked for one given twice. Twice SBXD_MAX_ENV, the largest object a request needs. */
#define SBXD_JSON_MAX_MEMBERS 8192

/* Scheduling niceness of every command, and of sbxd itself where it may raise its priority:
 * the daemon keeps answering while commands spin on every CPU. */
#define SBXD_COMMAND_NICE 10

/* The listening socket's queue of connections not yet accepted. */
#define SBXD_LISTEN_BACKLOG 512

/* Addresses the HTTP API may listen on at once (--listen repeated, or a comma list). */
#define SBXD_LISTEN_MAX 8

/* Stack of the accepting thread. */
#define SBXD_FRONT_STACK (64 * 1024)

/* Stack of each connection thread. */
#define SBXD_THREAD_STACK (512 * 1024)

/* Stack of a background process's driver thread (its read buffer is on the heap). */
#define SBXD_DRIVER_STACK (128 * 1024)

#endif
