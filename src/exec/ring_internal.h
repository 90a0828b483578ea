/*
 * ring_internal.h - the output of a background process: one byte sequence (stdout and stderr, or a
 * terminal's output, in the order they were read) of which the last `cap` bytes are kept,
 * addressed by absolute offsets from the process's first byte, with the stream each byte
 * came from.
 *
 * Memory grows with what is kept (from 64 KiB up to cap), never beyond it. A writer never
 * waits for a reader: the oldest bytes are overwritten, and a reader asking for them learns
 * from `start` how many it lost. Not locked: the owner (background.c) holds its own lock.
 */
#ifndef SBXD_RING_INTERNAL_H
#define SBXD_RING_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

struct ring_seg {
    uint64_t off; /* where a run of one stream starts */
    int stream;
};

struct ring {
    uint8_t *buf;
    size_t alloc;   /* bytes allocated */
    size_t cap;     /* most bytes kept */
    uint64_t start; /* offset of the oldest byte kept */
    uint64_t end;   /* offset after the newest byte: everything ever appended */
    /* Runs of one stream, oldest first, in a circular array: the first one may begin before
     * start (it covers start). */
    struct ring_seg *segs;
    size_t nseg, seg_head, seg_alloc, seg_max;
};

void ring_init(struct ring *r, size_t cap);
void ring_free(struct ring *r);

/* Append n bytes of stream. Never fails: without memory to grow, older bytes go sooner. */
void ring_append(struct ring *r, int stream, const void *data, size_t n);

/* Copy up to max bytes of one stream from offset off (start <= off < end) into out: the
 * bytes up to the next change of stream. Returns how many, 0 when off is not held; *stream
 * says whose they are. */
size_t ring_read(const struct ring *r, uint64_t off, void *out, size_t max, int *stream);

#endif
