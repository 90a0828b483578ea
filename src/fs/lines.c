/*
 * lines.c - a range of a file's lines, streamed: the file is read a buffer at a time from its
 * open fd, never held whole, so a range of a 50 MB log costs what the buffer costs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/edit.h"
#include "sbxd/fs_limits.h"

#define LINES_BUF (64 * 1024)

struct fs_lines {
    int fd;
    uint64_t size;
    off_t off;       /* where the next read starts */
    uint64_t line;   /* the number of the line the next byte belongs to */
    uint64_t first;  /* the first line served */
    uint64_t end;    /* the last line to serve */
    uint64_t served; /* the last line served so far (0: none) */
    bool numbers, at_start, done, eof;
    bool partial; /* bytes of a line passed over since the last newline */
    size_t bpos, blen;
    char prefix[32];
    size_t ppos, plen;
    char buf[LINES_BUF];
};

/* A whole number of lines, maybe negative, within what the file could hold. */
static bool parse_num(const char *s, const char *end, int64_t *out)
{
    if (s == end)
        return false;
    bool neg = *s == '-';
    if (neg)
        s++;
    if (s == end || end - s > 18 || strspn(s, "0123456789") < (size_t)(end - s))
        return false;
    int64_t v = 0;
    for (; s < end; s++)
        v = v * 10 + (*s - '0');
    if (v == 0)
        return false; /* lines are numbered from 1, and -1 is the last */
    *out = neg ? -v : v;
    return true;
}

int fs_line_range_parse(const char *s, struct fs_line_range *r, struct sbxd_err *err)
{
    const char *colon = strchr(s, ':');
    const char *end = s + strlen(s);
    r->start = 1;
    r->end = 0;
    bool ok = colon ? (colon == s || parse_num(s, colon, &r->start)) &&
                          (colon + 1 == end || parse_num(colon + 1, end, &r->end))
                    : parse_num(s, end, &r->start);
    if (ok && !colon)
        r->end = r->start;
    if (ok && colon && colon == s && colon + 1 == end)
        ok = false; /* ":" alone names nothing */
    if (!ok)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "lines must be START:END, START:, :END or N (line numbers from 1; "
                         "negative counts from the end), not '%.64s'",
                         s);
    if (r->start > 0 && r->end > 0 && r->end < r->start)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "lines %" PRId64 ":%" PRId64 " ends before it starts", r->start, r->end);
    return 0;
}

static ssize_t read_at(int fd, char *buf, size_t n, off_t off)
{
    for (;;) {
        ssize_t r = pread(fd, buf, n, off);
        if (r >= 0 || errno != EINTR)
            return r;
    }
}

/* The number of lines in the file: its newlines, and a last line without one. */
static int count_lines(struct fs_lines *l, uint64_t *count, struct sbxd_err *err)
{
    uint64_t n = 0;
    char last = '\n';
    for (off_t off = 0;;) {
        ssize_t r = read_at(l->fd, l->buf, sizeof(l->buf), off);
        if (r < 0)
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read the file");
        if (r == 0)
            break;
        for (const char *p = l->buf, *e = l->buf + r; (p = memchr(p, '\n', (size_t)(e - p))); p++)
            n++;
        last = l->buf[r - 1];
        off += r;
    }
    *count = n + (last != '\n');
    return 0;
}

/* Resolve negative numbers against the file's line count into l->first and l->end. */
static int resolve_range(struct fs_lines *l, const struct fs_line_range *r, struct sbxd_err *err)
{
    uint64_t total = 0;
    if ((r->start < 0 || r->end < 0) && count_lines(l, &total, err) < 0)
        return -1;
    int64_t first = r->start < 0 ? (int64_t)total + r->start + 1 : r->start;
    int64_t end = r->end < 0 ? (int64_t)total + r->end + 1 : r->end;
    if (first < 1)
        first = 1;
    if (end != 0 && end < first) /* "-1:1" in a file of 5 lines, or "-2:-3" */
        return sbxd_fail(err, SBXD_E_RANGE, ERANGE,
                         "lines %" PRId64 ":%" PRId64 " select nothing in a file of %" PRIu64
                         " lines",
                         r->start, r->end, total);
    l->first = (uint64_t)first;
    l->end = end == 0 ? UINT64_MAX : (uint64_t)end;
    return 0;
}

/* Move to the first byte of line l->first: SBXD_E_RANGE when the file has fewer lines. */
static int seek_first(struct fs_lines *l, struct sbxd_err *err)
{
    while (l->line < l->first) {
        if (l->bpos == l->blen) {
            ssize_t r = read_at(l->fd, l->buf, sizeof(l->buf), l->off);
            if (r < 0)
                return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read the file");
            if (r == 0)
                break;
            l->off += r;
            l->bpos = 0;
            l->blen = (size_t)r;
        }
        char *nl = memchr(l->buf + l->bpos, '\n', l->blen - l->bpos);
        if (!nl) {
            l->partial = l->partial || l->bpos < l->blen;
            l->bpos = l->blen;
            continue;
        }
        l->bpos = (size_t)(nl - l->buf) + 1;
        l->line++;
        l->partial = false;
    }
    bool bytes_left = l->bpos < l->blen || (uint64_t)l->off < l->size;
    if (l->line == l->first && bytes_left)
        return 0;
    if (l->first == 1 && l->size == 0) {
        l->done = l->eof = true; /* an empty file: no line, and nothing wrong */
        return 0;
    }
    uint64_t lines = l->line - 1 + l->partial;
    return sbxd_fail(err, SBXD_E_RANGE, ERANGE,
                     "line %" PRIu64 " is past the end: the file has %" PRIu64 " lines", l->first,
                     lines);
}

struct fs_lines *fs_lines_open(int fd, const struct fs_line_range *r, bool numbers,
                               struct sbxd_err *err)
{
    struct fs_lines *l = calloc(1, sizeof(*l));
    struct stat st;
    if (!l) {
        close(fd);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    l->fd = fd;
    l->line = 1;
    l->numbers = numbers;
    l->at_start = true;
    if (fstat(fd, &st) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot stat the file");
        goto fail;
    }
    l->size = (uint64_t)st.st_size;
    /* A NUL early on is a binary file, as grep and git judge one: its "lines" are no text to
     * show, and a range of bytes (Range:) is the way to read it. */
    ssize_t got = read_at(fd, l->buf, SBXD_LINES_SNIFF, 0);
    if (got < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read the file");
        goto fail;
    }
    if (memchr(l->buf, 0, (size_t)got)) {
        sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                  "a binary file (a NUL byte) has no lines: read it without lines=");
        goto fail;
    }
    if (resolve_range(l, r, err) < 0 || seek_first(l, err) < 0)
        goto fail;
    return l;
fail:
    fs_lines_close(l);
    return NULL;
}

/* Start the line at hand: the end of the range, or its number's prefix. */
static void line_begin(struct fs_lines *l)
{
    l->at_start = false;
    if (l->line > l->end) {
        l->done = true;
        return;
    }
    l->served = l->line;
    if (l->numbers) {
        int n = snprintf(l->prefix, sizeof(l->prefix), "%6" PRIu64 "\t", l->line);
        l->plen = n > 0 ? (size_t)n : 0;
        l->ppos = 0;
    }
}

ssize_t fs_lines_read(struct fs_lines *l, char *out, size_t max, struct sbxd_err *err)
{
    size_t n = 0;
    while (n < max && !l->done) {
        if (l->ppos < l->plen) {
            size_t k = l->plen - l->ppos < max - n ? l->plen - l->ppos : max - n;
            memcpy(out + n, l->prefix + l->ppos, k);
            l->ppos += k;
            n += k;
            continue;
        }
        if (l->bpos == l->blen) {
            ssize_t r = read_at(l->fd, l->buf, sizeof(l->buf), l->off);
            if (r < 0)
                return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot read the file");
            if (r == 0) {
                l->done = l->eof = true;
                break;
            }
            l->off += r;
            l->bpos = 0;
            l->blen = (size_t)r;
        }
        if (l->at_start) {
            line_begin(l);
            continue;
        }
        size_t avail = l->blen - l->bpos, room = max - n;
        size_t k = avail < room ? avail : room;
        char *nl = memchr(l->buf + l->bpos, '\n', k);
        if (nl) {
            k = (size_t)(nl - (l->buf + l->bpos)) + 1;
            l->line++;
            l->at_start = true;
        }
        memcpy(out + n, l->buf + l->bpos, k);
        l->bpos += k;
        n += k;
    }
    if (l->done && !l->eof)
        l->eof = l->bpos == l->blen && (uint64_t)l->off >= l->size;
    return (ssize_t)n;
}

uint64_t fs_lines_first(const struct fs_lines *l)
{
    return l->first;
}

uint64_t fs_lines_last(const struct fs_lines *l)
{
    return l->served;
}

bool fs_lines_eof(const struct fs_lines *l)
{
    return l->eof;
}

void fs_lines_close(struct fs_lines *l)
{
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd);
    free(l);
}
