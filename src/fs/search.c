/*
 * Content and name search of a tree (search.h): walk.h's walk, each regular file read a
 * buffer at a time and matched a buffer at a time (one PCRE2 call finds the next matching
 * line among many), the lines around a match kept in a small ring.
 *
 * A content search on a machine of several CPUs reads and matches files on worker threads
 * (as many as the CPUs sbxd may run on, at most SBXD_SEARCH_THREADS), each with its own
 * buffer, ring and PCRE2 match data. The walk only reads directories: it hands each file to
 * search through a short queue as a name and a duplicate of the fd of its directory (never a
 * path from the root), which the worker opens as walk_open would (no symlink followed, as the
 * command user), and the matches reach the sink one at a time, under the pool's lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxd/fs_limits.h"
#include "sbxd/limits.h"
#include "sbxd/search.h"
#include "sbxd/walk.h"
#include "search_internal.h"

/* A line kept for context: its head (SBXD_SEARCH_LINE_MAX bytes). */
struct kept {
    uint64_t no; /* 0: none */
    bool matched;
    uint64_t column;
    struct search_line line;
    char text[SBXD_SEARCH_LINE_MAX];
};

/* A directory the workers open files in: the walk's fd for it, duplicated, closed by
 * whoever lets go of it last. */
struct dref {
    int fd;
    int src;       /* the walk's fd it duplicates (the walk's own check) */
    unsigned refs; /* atomic */
};

/* A file the walk found, for a worker to open (as the command user: the worker's fsuid is
 * the walk's) and search. */
struct fjob {
    struct dref *dir;
    char *path;       /* relative to the root, as shown; malloc'd */
    const char *name; /* its last component, within path */
};

#define SEARCH_QUEUE 64
#define SEARCH_BATCH 8

/* What the threads of one search share. */
struct pool {
    pthread_mutex_t lock; /* everything below, and each call of the sink */
    pthread_cond_t more, room;
    struct fjob q[SEARCH_QUEUE];
    unsigned head, n;
    unsigned idle;     /* workers waiting for more */
    bool walk_waiting; /* the walk waits for room */
    bool done;         /* the walk is over: the workers end once the queue is empty */
    bool stopped;      /* the sink ended it, or max_matches (also read without the lock: a hint) */
    int sink_failed;
    uint64_t matches;
    bool truncated;
};

struct search {
    const struct search_opts *o;
    const struct search_sink *sink;
    struct search_stats *st;
    struct search_stats own; /* a worker's counts (st points here), added up at the end */
    struct search_matcher *m;
    struct pool *pool; /* NULL: one thread does it all */
    pthread_t th;
    struct dref *dirs[SBXD_SEARCH_MAX_DEPTH + 2]; /* the walk's: of the entries at each depth */
    char *buf;                                    /* SBXD_SEARCH_BUF + 1 */
    struct kept *ring;                            /* 2 * context + 1 lines */
    unsigned nring;
    struct search_line *ctx; /* 2 * context: the before and after of one match */
    char path[PATH_MAX + NAME_MAX + 2];
    size_t lens[SBXD_SEARCH_MAX_DEPTH + 2]; /* the path's length before each depth's name */
    uint64_t carry; /* bytes of the buffer's first line in the buffers before (a long line) */
    bool stopped;   /* the sink ended it, or max_matches */
    int sink_failed;
};

/* The kept line no, or NULL. */
static struct kept *kept_line(struct search *s, uint64_t no)
{
    if (no == 0)
        return NULL;
    struct kept *k = &s->ring[no % s->nring];
    return k->no == no ? k : NULL;
}

/* Hand the kept match k to the sink, with the lines before it and up to last after it. */
static void emit(struct search *s, const struct kept *k, uint64_t last)
{
    if (s->stopped)
        return;
    unsigned n = s->o->context, nb = 0, na = 0;
    for (uint64_t no = k->no > n ? k->no - n : 1; no < k->no; no++) {
        struct kept *b = kept_line(s, no);
        if (b)
            s->ctx[nb++] = b->line;
    }
    for (uint64_t no = k->no + 1; no <= last && no <= k->no + n; no++) {
        struct kept *a = kept_line(s, no);
        if (a)
            s->ctx[n + na++] = a->line;
    }
    struct search_match m = {s->path, k->line, k->column, s->ctx, s->ctx + n, nb, na};
    struct pool *p = s->pool;
    if (!p) {
        s->st->matches++;
        s->st->lines_cut += k->line.cut;
        if (s->sink->match(s->sink->ctx, &m) < 0) {
            s->stopped = true;
            s->sink_failed = 1;
        } else if (s->st->matches >= s->o->max_matches) {
            s->st->truncated = true;
            s->stopped = true;
        }
        return;
    }
    pthread_mutex_lock(&p->lock);
    if (!p->stopped) {
        p->matches++;
        s->st->lines_cut += k->line.cut;
        if (s->sink->match(s->sink->ctx, &m) < 0) {
            p->stopped = true;
            p->sink_failed = 1;
        } else if (p->matches >= s->o->max_matches) {
            p->truncated = true;
            p->stopped = true;
        }
    }
    s->stopped = p->stopped;
    if (p->stopped)
        pthread_cond_broadcast(&p->room); /* (a walk waiting for room ends) */
    pthread_mutex_unlock(&p->lock);
}

/* Line no, text[0, len) (a piece of it when more follows), seen; matched at column (1-based
 * byte) or not (0). A line already kept (a long line's later piece) only gains its match. */
static void note_line(struct search *s, uint64_t no, const char *text, size_t len, bool more,
                      uint64_t column)
{
    struct kept *k = &s->ring[no % s->nring];
    if (k->no == no) {
        if (column && !k->matched) {
            k->matched = true;
            k->column = column;
            if (s->o->context == 0)
                emit(s, k, no);
        }
        return;
    }
    if (len && text[len - 1] == '\r' && !more)
        len--;
    k->no = no;
    k->matched = column != 0;
    k->column = column;
    k->line.no = no;
    k->line.cut = more || len > sizeof(k->text);
    k->line.len = len > sizeof(k->text) ? sizeof(k->text) : len;
    memcpy(k->text, text, k->line.len);
    k->line.text = k->text;
    unsigned n = s->o->context;
    struct kept *due = n == 0 ? k : kept_line(s, no - (no > n ? n : no));
    if (due && due->matched && due->no + n == no)
        emit(s, due, no);
}

/* The end of the file whose last line is last: the matches still waiting for lines after. */
static void flush_file(struct search *s, uint64_t last)
{
    unsigned n = s->o->context;
    for (uint64_t no = last > n ? last - n + 1 : 1; n > 0 && no <= last; no++) {
        struct kept *k = kept_line(s, no);
        if (k && k->matched)
            emit(s, k, last);
    }
}

/* Count the newlines of b[0, n). */
static uint64_t count_lines(const char *b, size_t n)
{
    uint64_t c = 0;
    for (const char *p = b, *end = b + n; (p = memchr(p, '\n', (size_t)(end - p))); p++)
        c++;
    return c;
}

/* The lines of buf[0, len), the first one numbered *no (*no is left at the number of the
 * line after). more: the last line goes on in the next buffer (a line longer than the
 * buffer). -1 when PCRE2 gave up. */
static int scan_lines(struct search *s, size_t len, bool more, uint64_t *no)
{
    const char *b = s->buf;
    size_t pos = 0;
    while (pos < len && !s->stopped) {
        size_t at;
        int f = search_pattern_find(s->o->pattern, s->m, b, len, pos, &at);
        if (f < 0)
            return -1;
        size_t upto = f ? at : len;
        /* The lines before the match: kept only for context. */
        while (pos < upto) {
            const char *nl = memchr(b + pos, '\n', upto - pos);
            if (!nl)
                break;
            if (s->o->context)
                note_line(s, *no, b + pos, (size_t)(nl - (b + pos)), false, 0);
            (*no)++;
            pos = (size_t)(nl - b) + 1;
            if (!s->o->context) { /* nothing to keep: count the rest at once */
                uint64_t c = count_lines(b + pos, upto - pos);
                *no += c;
                if (c) {
                    const char *lastnl = memrchr(b + pos, '\n', upto - pos);
                    pos = (size_t)(lastnl - b) + 1;
                }
                break;
            }
        }
        if (!f) {
            if (pos < len)
                note_line(s, *no, b + pos, len - pos, more, 0);
            if (!more && pos < len)
                (*no)++;
            return 0;
        }
        const char *nl = memchr(b + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - b) : len;
        note_line(s, *no, b + pos, end - pos, !nl && more, at - pos + 1 + (pos ? 0 : s->carry));
        if (nl || !more)
            (*no)++;
        pos = end + 1;
    }
    return 0;
}

/* Search the open regular file fd of size bytes (as fstat said: once that much is read, the
 * file is taken as ended, which saves a read per file; 0: read to the end). */
static void search_file(struct search *s, int fd, uint64_t size)
{
    size_t have = 0;
    uint64_t done = 0;
    uint64_t no = 1;
    bool first = true;
    s->carry = 0;
    for (unsigned i = 0; i < s->nring; i++)
        s->ring[i].no = 0; /* no line of the file before */
    for (s->st->files_scanned++; !s->stopped;) {
        if (s->pool && __atomic_load_n(&s->pool->stopped, __ATOMIC_ACQUIRE)) {
            s->stopped = true; /* another worker's match ended the search */
            break;
        }
        ssize_t r = read(fd, s->buf + have, SBXD_SEARCH_BUF - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            s->st->skipped_unreadable++;
            break;
        }
        s->st->bytes_read += (uint64_t)r;
        if (first && !s->o->include_binary && memchr(s->buf, 0, (size_t)r)) {
            s->st->skipped_binary++; /* a NUL in the first block: binary, as ripgrep says */
            return;
        }
        first = false;
        have += (size_t)r;
        done += (uint64_t)r;
        bool eof = r == 0 || (size > 0 && done >= size);
        const char *lastnl = eof ? NULL : memrchr(s->buf, '\n', have);
        size_t whole = eof ? have : lastnl ? (size_t)(lastnl - s->buf) + 1 : 0;
        bool piece = !eof && whole == 0 && have == SBXD_SEARCH_BUF;
        if (piece)
            whole = have; /* a line longer than the buffer: searched a buffer at a time */
        if (whole > 0 && scan_lines(s, whole, piece, &no) < 0) {
            s->st->skipped_limit++;
            return;
        }
        s->carry = piece ? s->carry + whole : 0;
        memmove(s->buf, s->buf + whole, have - whole);
        have -= whole;
        if (eof)
            break;
    }
    flush_file(s, no - 1);
}

static int entry_path(struct search *s, const struct walk_entry *e, size_t *len)
{
    size_t pre = s->lens[e->depth], nl = strlen(e->name);
    if (pre + nl + 2 > sizeof(s->path))
        return -1;
    memcpy(s->path + pre, e->name, nl + 1);
    *len = pre + nl;
    return 0;
}

static void dref_put(struct dref *d)
{
    if (d && __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        close(d->fd);
        free(d);
    }
}

/* The walk's reference to the directory holding e (made on its first file to search). */
static struct dref *dref_of(struct search *s, const struct walk_entry *e)
{
    struct dref **slot = &s->dirs[e->depth];
    if (*slot && (*slot)->src != e->parent) { /* (never, as the walk goes depth first) */
        dref_put(*slot);
        *slot = NULL;
    }
    if (!*slot) {
        struct dref *d = malloc(sizeof(*d));
        if (!d)
            return NULL;
        d->fd = fcntl(e->parent, F_DUPFD_CLOEXEC, 0);
        d->src = e->parent;
        d->refs = 1;
        if (d->fd < 0) {
            free(d);
            return NULL;
        }
        *slot = d;
    }
    return *slot;
}

/* Hand the file e (of path) to the workers: WALK_NEXT, or WALK_STOP once the search is over.
 * Waits while the queue is full. */
static int enqueue(struct search *s, const struct walk_entry *e, const char *path, size_t len)
{
    struct pool *p = s->pool;
    struct dref *d = dref_of(s, e);
    struct fjob j = {d, strdup(path), NULL};
    if (!d || !j.path) {
        free(j.path);
        return WALK_NEXT; /* (out of memory or descriptors: this file is passed over) */
    }
    j.name = j.path + len - strlen(e->name);
    __atomic_add_fetch(&d->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&p->lock);
    while (p->n == SEARCH_QUEUE && !p->stopped) {
        p->walk_waiting = true;
        pthread_cond_wait(&p->room, &p->lock);
    }
    p->walk_waiting = false;
    bool stopped = p->stopped;
    if (!stopped) {
        p->q[(p->head + p->n++) % SEARCH_QUEUE] = j;
        /* A worker that waits is woken once a batch is in (a wake-up per file cost more
         * than the file's search); the end of the walk wakes them all. */
        if (p->idle && p->n >= SEARCH_BATCH)
            pthread_cond_signal(&p->more);
    }
    pthread_mutex_unlock(&p->lock);
    if (stopped) {
        dref_put(d);
        free(j.path);
        return WALK_STOP;
    }
    return WALK_NEXT;
}

/* A job: the file opened as the walk would have (walk_openat: no symlink followed), then
 * searched when it is a regular file. */
static void work(struct search *s, const struct fjob *j)
{
    struct stat st;
    int fd = walk_openat(j->dir->fd, j->name, O_RDONLY, &st);
    if (fd < 0) {
        if (errno == EACCES || errno == EPERM)
            s->st->skipped_unreadable++;
        return;
    }
    if (S_ISREG(st.st_mode)) {
        snprintf(s->path, sizeof(s->path), "%s", j->path);
        search_file(s, fd, (uint64_t)st.st_size);
    }
    close(fd);
}

static void *worker(void *arg)
{
    struct search *s = arg;
    struct pool *p = s->pool;
    struct fjob mine[SEARCH_BATCH];
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (p->n == 0 && !p->done) {
            p->idle++;
            pthread_cond_wait(&p->more, &p->lock);
            p->idle--;
        }
        /* A batch at a time (its share when others wait too): one lock for several files. */
        unsigned k = p->n < SEARCH_BATCH ? p->n : SEARCH_BATCH;
        if (p->idle && k > 1)
            k = (k + 1) / 2;
        for (unsigned i = 0; i < k; i++) {
            mine[i] = p->q[p->head];
            p->head = (p->head + 1) % SEARCH_QUEUE;
        }
        p->n -= k;
        if (p->n && p->idle)
            pthread_cond_signal(&p->more); /* (the rest of the batch for another) */
        if (p->walk_waiting && p->n <= SEARCH_QUEUE / 2)
            pthread_cond_signal(&p->room); /* (half empty: not woken for each file) */
        pthread_mutex_unlock(&p->lock);
        if (k == 0)
            return NULL; /* the walk is over and nothing is left */
        for (unsigned i = 0; i < k; i++) {
            if (!s->stopped)
                work(s, &mine[i]);
            dref_put(mine[i].dir);
            free(mine[i].path);
        }
    }
}

static int visit(struct walk_entry *e, void *ctx)
{
    struct search *s = ctx;
    size_t len;
    if (s->stopped || (s->pool && __atomic_load_n(&s->pool->stopped, __ATOMIC_ACQUIRE)))
        return WALK_STOP;
    if (entry_path(s, e, &len) < 0)
        return WALK_NEXT;
    const char *rel = s->path + s->lens[0];
    bool dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN && walk_stat(e) == 0)
        dir = S_ISDIR(e->st.st_mode);
    /* .git holds a repository's objects: searched only when asked, as ripgrep does. */
    if (dir && !s->o->include_git && strcmp(e->name, ".git") == 0)
        return WALK_NEXT;
    if (s->o->exclude && search_globs_match(s->o->exclude, rel, e->name))
        return WALK_NEXT;
    bool take = !s->o->include || search_globs_match(s->o->include, rel, e->name);
    if (!s->o->pattern && take) {
        if (e->d_type != DT_UNKNOWN && walk_stat(e) < 0)
            return WALK_NEXT;
        s->st->matches++;
        if (s->sink->entry(s->sink->ctx, s->path, &e->st) < 0) {
            s->sink_failed = 1;
            return WALK_STOP;
        }
        if (s->st->matches >= s->o->max_matches) {
            s->st->truncated = true;
            return WALK_STOP;
        }
    }
    if (dir) {
        /* Entered through an fd opened with O_NOFOLLOW (walk_open): a symlink is never
         * followed, so no link, planted or swapped in, leads the search out of the tree. */
        if (walk_open(e, O_RDONLY | O_DIRECTORY) < 0) {
            s->st->skipped_unreadable++;
            return WALK_NEXT;
        }
        s->path[len] = '/';
        s->lens[e->depth + 1] = len + 1;
        if (e->depth + 1 < sizeof(s->dirs) / sizeof(s->dirs[0])) {
            dref_put(s->dirs[e->depth + 1]); /* its entries are in another directory now */
            s->dirs[e->depth + 1] = NULL;
        }
        return WALK_ENTER;
    }
    if (!s->o->pattern || !take || (e->d_type != DT_REG && e->d_type != DT_UNKNOWN))
        return WALK_NEXT;
    /* Several threads: a worker opens it (the walk only walks). */
    if (s->pool)
        return enqueue(s, e, s->path, len);
    /* Opened as the command user (the caller's fsuid): what it cannot read is skipped. */
    if (walk_open(e, O_RDONLY) < 0) {
        if (errno == EACCES || errno == EPERM)
            s->st->skipped_unreadable++;
        return WALK_NEXT;
    }
    if (!S_ISREG(e->st.st_mode))
        return WALK_NEXT;
    search_file(s, e->fd, (uint64_t)e->st.st_size);
    return s->stopped ? WALK_STOP : WALK_NEXT;
}

/* The threads that may search at once: the CPUs this thread may run on, within bounds. */
static unsigned search_threads(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > SBXD_SEARCH_THREADS ? SBXD_SEARCH_THREADS : (unsigned)n;
}

/* A searcher's own buffers (a pattern's: the read buffer, the ring, the matcher): 0 or -1. */
static int searcher_init(struct search *s)
{
    s->nring = 2 * s->o->context + 1;
    s->buf = s->o->pattern ? malloc(SBXD_SEARCH_BUF + 1) : NULL;
    s->ring = s->o->pattern ? calloc(s->nring, sizeof(*s->ring)) : NULL;
    s->ctx = calloc(2 * s->o->context + 1, sizeof(*s->ctx));
    s->m = s->o->pattern ? search_matcher_new(s->o->pattern) : NULL;
    if ((s->o->pattern && (!s->buf || !s->ring || !s->m)) || !s->ctx)
        return -1;
    return 0;
}

static void searcher_free(struct search *s)
{
    free(s->buf);
    free(s->ring);
    free(s->ctx);
    search_matcher_free(s->m);
}

static void stats_add(struct search_stats *to, const struct search_stats *w)
{
    to->files_scanned += w->files_scanned;
    to->bytes_read += w->bytes_read;
    to->skipped_binary += w->skipped_binary;
    to->skipped_unreadable += w->skipped_unreadable;
    to->skipped_limit += w->skipped_limit;
    to->lines_cut += w->lines_cut;
}

/* Workers for the walker s (up to n): how many run; none leaves s to search alone. */
static unsigned workers_start(struct search *s, struct pool *p, struct search *w, unsigned n)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, SBXD_THREAD_STACK);
    unsigned k = 0;
    for (; k < n; k++) {
        w[k] = (struct search){.o = s->o, .sink = s->sink, .pool = p};
        w[k].st = &w[k].own;
        if (searcher_init(&w[k]) < 0 || pthread_create(&w[k].th, &a, worker, &w[k]) != 0) {
            searcher_free(&w[k]);
            break;
        }
    }
    pthread_attr_destroy(&a);
    return k;
}

int search_run(int dirfd, const char *base, const struct search_opts *o,
               const struct search_sink *sink, struct search_stats *stats, struct sbxd_err *err)
{
    memset(stats, 0, sizeof(*stats));
    struct search s = {.o = o, .sink = sink, .st = stats};
    if (strcmp(base, ".") == 0)
        base = "";
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    if (bl + 2 > sizeof(s.path)) {
        close(dirfd);
        return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "the path is too long");
    }
    memcpy(s.path, base, bl);
    if (bl)
        s.path[bl++] = '/';
    /* The path shown is relative to the root: the directory searched, then the entry. */
    s.lens[0] = bl;
    /* Several CPUs: the walk only walks, the workers search. */
    struct pool p = {.lock = PTHREAD_MUTEX_INITIALIZER,
                     .more = PTHREAD_COND_INITIALIZER,
                     .room = PTHREAD_COND_INITIALIZER};
    unsigned want = o->pattern ? search_threads() : 1, nw = 0;
    struct search *w = want > 1 ? calloc(want, sizeof(*w)) : NULL;
    if (w && (nw = workers_start(&s, &p, w, want)) > 0)
        s.pool = &p;
    if (!s.pool && searcher_init(&s) < 0) {
        close(dirfd);
        searcher_free(&s);
        free(w);
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    }
    struct walk wk = {.max_entries = SBXD_SEARCH_MAX_ENTRIES,
                      .max_depth = SBXD_SEARCH_MAX_DEPTH,
                      .pre = visit,
                      .ctx = &s};
    walk_tree(dirfd, &wk);
    stats->walk_cut = wk.cut;
    for (size_t i = 0; i < sizeof(s.dirs) / sizeof(s.dirs[0]); i++)
        dref_put(s.dirs[i]);
    if (s.pool) {
        pthread_mutex_lock(&p.lock);
        p.done = true;
        pthread_cond_broadcast(&p.more);
        pthread_mutex_unlock(&p.lock);
        for (unsigned i = 0; i < nw; i++) {
            pthread_join(w[i].th, NULL);
            stats_add(stats, &w[i].own);
            searcher_free(&w[i]);
        }
        stats->matches = p.matches;
        stats->truncated = p.truncated;
        s.sink_failed = p.sink_failed;
    }
    searcher_free(&s);
    free(w);
    if (s.sink_failed)
        return sbxd_fail(err, SBXD_E_UNAVAILABLE, EPIPE, "the reader went away");
    return 0;
}
