/* Workspace changes from inotify, as events with offsets (watch.h). */
#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "sbxd/limits.h"
#include "sbxd/fs_limits.h"
#include "sbxd/log.h"
#include "sbxd/resolve.h"
#include "sbxd/timeutil.h"
#include "sbxd/watch.h"

#include "files_internal.h"

/* (No IN_DONT_FOLLOW: the directory is named by /proc/self/fd/N, a link to what resolve.h
 * opened beneath the root, which is what must be followed.) */
#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM |              \
     IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

struct ring_ev {
    enum watch_type type;
    bool is_dir;
    uint64_t missed;
    int64_t real_ns;
    char *path, *from;
};

struct dirw {
    int wd;
    char *path;
};

struct hub {
    struct hub *next;   /* W.head (under W.lock) */
    unsigned subs;      /* under W.lock */
    int64_t idle_since; /* under W.lock: when subs fell to 0 */
    bool thread_ended;  /* under W.lock: the last watch_close frees it */
    char *path;
    bool recursive;
    int ifd, stopfd;
    /* Under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct ring_ev ring[SBXD_WATCH_RING];
    uint64_t start, end; /* offsets the ring holds: [start, end) */
    uint64_t first;      /* the hub's first offset */
    bool gone;           /* WATCH_GONE is in the ring: nothing follows */
    /* The hub's thread's alone (and watch_open's before the thread starts): */
    struct dirw *dirs; /* sorted by wd (inotify gives them in increasing order) */
    size_t ndirs, capdirs;
    bool dirs_cut;
    int top_wd;
};

struct watch_sub {
    struct hub *h;
    uint64_t next;
    enum watch_pool pool;
    bool ended;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a hub ended */
    struct hub *head;
    unsigned subs[2], hubs; /* subs: per pool (enum watch_pool) */
    struct watch_limits lim;
    int rootfd;
    struct fs_user user;
    bool stopping;
} W = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .rootfd = -1};

const char *watch_type_name(enum watch_type t)
{
    static const char *const n[] = {"create", "write",    "remove", "rename",
                                    "attrib", "overflow", "gone"};
    return n[t];
}

void watch_init(const struct watch_limits *l, int rootfd, const struct fs_user *u)
{
    W.lim = *l;
    W.rootfd = rootfd;
    W.user = *u;
}

/* ---------------------------------------------------------------------------------- */
/* The ring                                                                             */

/* Append an event (path and from copied); one like the last on the same path within
 * SBXD_WATCH_COALESCE_MS is the same. Under h->lock. */
static void push_locked(struct hub *h, enum watch_type type, const char *path, bool is_dir,
                        const char *from, uint64_t missed)
{
    int64_t now = time_real_ns();
    if (h->end > h->start && type != WATCH_OVERFLOW) {
        struct ring_ev *last = &h->ring[(h->end - 1) % SBXD_WATCH_RING];
        if (last->type == type && strcmp(last->path, path) == 0 && !from && !last->from &&
            now - last->real_ns < (int64_t)SBXD_WATCH_COALESCE_MS * 1000000)
            return;
    }
    if (h->end - h->start == SBXD_WATCH_RING) {
        struct ring_ev *old = &h->ring[h->start % SBXD_WATCH_RING];
        free(old->path);
        free(old->from);
        h->start++;
    }
    struct ring_ev *e = &h->ring[h->end % SBXD_WATCH_RING];
    *e = (struct ring_ev){.type = type,
                          .is_dir = is_dir,
                          .missed = missed,
                          .real_ns = now,
                          .path = strdup(path),
                          .from = from ? strdup(from) : NULL};
    if (!e->path) /* (out of memory: the event is still one, with no path) */
        e->path = strdup("");
    h->end++;
    if (type == WATCH_GONE)
        h->gone = true;
    pthread_cond_broadcast(&h->cond);
}

static void push(struct hub *h, enum watch_type type, const char *path, bool is_dir,
                 const char *from)
{
    pthread_mutex_lock(&h->lock);
    if (!h->gone)
        push_locked(h, type, path, is_dir, from, 0);
    pthread_mutex_unlock(&h->lock);
}

/* ---------------------------------------------------------------------------------- */
/* Watched directories                                                                  */

static char *join(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    char *p = malloc(dl + nl + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    size_t at = dl;
    if (dl)
        p[at++] = '/';
    memcpy(p + at, name, nl + 1);
    return p;
}

static struct dirw *dir_of(struct hub *h, int wd)
{
    size_t lo = 0, hi = h->ndirs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->dirs[mid].wd == wd)
            return &h->dirs[mid];
        if (h->dirs[mid].wd < wd)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void dir_forget(struct hub *h, int wd)
{
    struct dirw *d = dir_of(h, wd);
    if (!d)
        return;
    free(d->path);
    size_t i = (size_t)(d - h->dirs);
    memmove(d, d + 1, (h->ndirs - i - 1) * sizeof(*d));
    h->ndirs--;
}

static void dir_record(struct hub *h, int wd, const char *path)
{
    struct dirw *d = dir_of(h, wd);
    if (d) { /* the same directory reached again (moved): its new path */
        char *p = strdup(path);
        if (p) {
            free(d->path);
            d->path = p;
        }
        return;
    }
    if (h->ndirs == h->capdirs) {
        size_t nc = h->capdirs ? 2 * h->capdirs : 16;
        struct dirw *nd = realloc(h->dirs, nc * sizeof(*nd));
        if (!nd)
            return;
        h->dirs = nd;
        h->capdirs = nc;
    }
    size_t i = h->ndirs;
    while (i > 0 && h->dirs[i - 1].wd > wd)
        i--;
    memmove(&h->dirs[i + 1], &h->dirs[i], (h->ndirs - i) * sizeof(h->dirs[0]));
    h->dirs[i] = (struct dirw){.wd = wd, .path = strdup(path)};
    h->ndirs++;
}

/* Watch the directory at path (beneath the root) and, for a recursive hub, those under it;
 * with announce, what it holds is reported as created (it appeared with it). depth bounds
 * the recursion. -1 with err for the top one only. */
static int add_tree(struct hub *h, const char *path, bool announce, unsigned depth,
                    struct sbxd_err *err)
{
    if (h->ndirs >= W.lim.max_dirs) {
        if (!h->dirs_cut)
            LOG_EVENT("warn", "watch_dirs_cut", LOG_S("path", h->path),
                      LOG_I("max_dirs", W.lim.max_dirs));
        h->dirs_cut = true;
        return sbxd_fail(err, SBXD_E_BUSY, 0,
                         "more than %u directories to watch (--watch-max-dirs)", W.lim.max_dirs);
    }
    int pfd = fs_resolve_beneath(W.rootfd, path, FS_RESOLVE_DIRECTORY, err);
    if (pfd < 0)
        return -1;
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
    int wd = inotify_add_watch(h->ifd, proc, WATCH_MASK);
    int e = errno;
    if (wd < 0) {
        close(pfd);
        return sbxd_fail_errno(err, e == ENOSPC ? SBXD_E_BUSY : fs_errno_kind(e), e,
                               "cannot watch '%.200s'", path);
    }
    dir_record(h, wd, path);
    if (!h->recursive && !announce) {
        close(pfd);
        return wd;
    }
    int dfd = fs_reopen(pfd, O_RDONLY | O_DIRECTORY);
    close(pfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return wd;
    }
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *child = join(path, de->d_name);
        if (!child)
            break;
        bool is_dir = de->d_type == DT_DIR;
        if (announce)
            push(h, WATCH_CREATE, child, is_dir, NULL);
        if (is_dir && h->recursive && depth < SBXD_WATCH_MAX_DEPTH) {
            struct sbxd_err sub = {0};
            add_tree(h, child, announce, depth + 1, &sub);
        }
        free(child);
    }
    closedir(d);
    return wd;
}

/* A directory that left the tree (moved out, or its name now elsewhere): no longer watched,
 * nor anything beneath it. */
static void unwatch_tree(struct hub *h, const char *path)
{
    size_t pl = strlen(path);
    for (size_t i = h->ndirs; i-- > 0;) {
        const char *p = h->dirs[i].path;
        if (strncmp(p, path, pl) == 0 && (p[pl] == '\0' || p[pl] == '/')) {
            inotify_rm_watch(h->ifd, h->dirs[i].wd);
            dir_forget(h, h->dirs[i].wd);
        }
    }
}

/* A directory renamed within the tree: the paths of it and of everything beneath. */
static void rename_tree(struct hub *h, const char *from, const char *to)
{
    size_t fl = strlen(from);
    for (size_t i = 0; i < h->ndirs; i++) {
        const char *p = h->dirs[i].path;
        if (strncmp(p, from, fl) != 0 || (p[fl] != '\0' && p[fl] != '/'))
            continue;
        char *np = malloc(strlen(to) + strlen(p + fl) + 1);
        if (!np)
            continue;
        strcpy(np, to);
        strcat(np, p + fl);
        free(h->dirs[i].path);
        h->dirs[i].path = np;
    }
}

/* ---------------------------------------------------------------------------------- */
/* The hub's thread                                                                     */

/* A rename's first half, waiting for its second (the next event of the same read). */
struct moving {
    uint32_t cookie;
    char *path;
    bool is_dir;
};

static void moved_away(struct hub *h, struct moving *m)
{
    if (!m->path)
        return;
    push(h, WATCH_REMOVE, m->path, m->is_dir, NULL);
    if (m->is_dir)
        unwatch_tree(h, m->path);
    free(m->path);
    m->path = NULL;
}

static void handle(struct hub *h, const struct inotify_event *ev, struct moving *m)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        pthread_mutex_lock(&h->lock);
        push_locked(h, WATCH_OVERFLOW, "", false, NULL, 0);
        pthread_mutex_unlock(&h->lock);
        return;
    }
    if (ev->wd == h->top_wd && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))) {
        moved_away(h, m);
        push(h, WATCH_GONE, h->path, true, NULL);
        return;
    }
    struct dirw *d = dir_of(h, ev->wd);
    if (ev->mask & IN_IGNORED) {
        dir_forget(h, ev->wd);
        return;
    }
    if (!d || !ev->len || (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)))
        return; /* (a subdirectory's own end: its parent reports it) */
    char *path = join(d->path, ev->name);
    if (!path)
        return;
    bool is_dir = ev->mask & IN_ISDIR;
    if (m->path && !((ev->mask & IN_MOVED_TO) && ev->cookie == m->cookie))
        moved_away(h, m);
    if (ev->mask & IN_MOVED_FROM) {
        m->cookie = ev->cookie;
        m->path = path;
        m->is_dir = is_dir;
        return;
    }
    if (ev->mask & IN_MOVED_TO) {
        if (m->path) {
            push(h, WATCH_RENAME, path, is_dir, m->path);
            if (is_dir)
                rename_tree(h, m->path, path);
            free(m->path);
            m->path = NULL;
        } else {
            push(h, WATCH_CREATE, path, is_dir, NULL);
            if (is_dir && h->recursive) {
                struct sbxd_err err = {0};
                add_tree(h, path, true, 1, &err);
            }
        }
    } else if (ev->mask & IN_CREATE) {
        push(h, WATCH_CREATE, path, is_dir, NULL);
        if (is_dir && h->recursive) {
            struct sbxd_err err = {0};
            add_tree(h, path, true, 1, &err);
        }
    } else if (ev->mask & IN_DELETE) {
        push(h, WATCH_REMOVE, path, is_dir, NULL);
    } else if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE)) {
        push(h, WATCH_WRITE, path, is_dir, NULL);
    } else if (ev->mask & IN_ATTRIB) {
        push(h, WATCH_ATTRIB, path, is_dir, NULL);
    }
    free(path);
}

static void hub_free(struct hub *h)
{
    for (uint64_t o = h->start; o < h->end; o++) {
        free(h->ring[o % SBXD_WATCH_RING].path);
        free(h->ring[o % SBXD_WATCH_RING].from);
    }
    for (size_t i = 0; i < h->ndirs; i++)
        free(h->dirs[i].path);
    free(h->dirs);
    free(h->path);
    close(h->ifd);
    close(h->stopfd);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h);
}

/* Whether the hub may end: nobody read it for SBXD_WATCH_LINGER_S, or sbxd stops. */
static bool hub_done(struct hub *h)
{
    pthread_mutex_lock(&W.lock);
    bool done = W.stopping || (h->subs == 0 && time_mono_ns() - h->idle_since >=
                                                   (int64_t)SBXD_WATCH_LINGER_S * 1000000000);
    pthread_mutex_unlock(&W.lock);
    return done;
}

static void *hub_main(void *arg)
{
    struct hub *h = arg;
    fs_user_enter(&W.user);
    struct moving m = {0};
    char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        struct pollfd p[2] = {{.fd = h->ifd, .events = POLLIN},
                              {.fd = h->stopfd, .events = POLLIN}};
        int n = poll(p, 2, 1000);
        if ((n > 0 && (p[1].revents & POLLIN)) || (n <= 0 && hub_done(h)))
            break;
        if (n <= 0 || !(p[0].revents & POLLIN))
            continue;
        ssize_t len = read(h->ifd, buf, sizeof(buf));
        for (ssize_t at = 0; len > 0 && at < len;) {
            const struct inotify_event *ev = (const struct inotify_event *)(buf + at);
            handle(h, ev, &m);
            at += (ssize_t)(sizeof(*ev) + ev->len);
        }
        /* A rename's first half alone at the end of a read: moved out of the tree. */
        moved_away(h, &m);
    }
    fs_user_leave(&W.user);
    /* Readers left may still wait on it: they see it gone. */
    pthread_mutex_lock(&h->lock);
    if (!h->gone)
        push_locked(h, WATCH_GONE, h->path, true, NULL, 0);
    pthread_mutex_unlock(&h->lock);
    pthread_mutex_lock(&W.lock);
    struct hub **pp = &W.head;
    while (*pp && *pp != h)
        pp = &(*pp)->next;
    if (*pp)
        *pp = h->next;
    bool free_now = h->subs == 0;
    h->thread_ended = true; /* (the last watch_close frees it) */
    W.hubs--;
    pthread_cond_broadcast(&W.cond);
    pthread_mutex_unlock(&W.lock);
    if (free_now)
        hub_free(h);
    return NULL;
}

/* Undo a hub whose thread never started: its descriptors, directories, path and locks. */
static void hub_discard(struct hub *h)
{
    if (h->ifd >= 0)
        close(h->ifd);
    if (h->stopfd >= 0)
        close(h->stopfd);
    for (size_t i = 0; i < h->ndirs; i++)
        free(h->dirs[i].path);
    free(h->dirs);
    free(h->path);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h);
}

/* A new hub watching path (taken: freed on failure) with one subscriber, its thread started
 * and the hub listed: the hub, or NULL with err. */
static struct hub *hub_start(char *path, bool recursive, struct sbxd_err *err)
{
    struct hub *h = calloc(1, sizeof(*h));
    if (!h) {
        free(path);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    h->path = path;
    h->recursive = recursive;
    h->subs = 1;
    pthread_mutex_init(&h->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    /* Offsets go on from one hub of a path to the next: a reader that comes back after
     * the old one ended is never taken to be in step. */
    h->first = h->start = h->end = (uint64_t)(time_real_ns() / 1000);
    h->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    h->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->ifd < 0 || h->stopfd < 0) {
        int e = errno;
        sbxd_fail_errno(err, e == EMFILE ? SBXD_E_BUSY : SBXD_E_INTERNAL, e,
                        "cannot set up a watch");
        hub_discard(h);
        return NULL;
    }
    fs_user_enter(&W.user);
    h->top_wd = add_tree(h, h->path, false, 0, err);
    fs_user_leave(&W.user);
    if (h->top_wd < 0) {
        hub_discard(h);
        return NULL;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK + 65536);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    pthread_mutex_lock(&W.lock);
    int rc = pthread_create(&th, &attr, hub_main, h);
    if (rc == 0) {
        h->next = W.head;
        W.head = h;
        W.hubs++;
    }
    pthread_mutex_unlock(&W.lock);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        sbxd_fail(err, SBXD_E_BUSY, rc, "cannot start a thread for the watch");
        hub_discard(h);
        return NULL;
    }
    return h;
}

/* ---------------------------------------------------------------------------------- */
/* Subscribers                                                                          */

struct watch_sub *watch_open(const char *path, bool recursive, uint64_t since, enum watch_pool pool,
                             struct sbxd_err *err)
{
    char *p = strdup(path);
    if (!p) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    size_t len = strlen(p);
    while (len && p[len - 1] == '/')
        p[--len] = '\0';
    struct watch_sub *s = calloc(1, sizeof(*s));
    pthread_mutex_lock(&W.lock);
    /* Each pool is bounded on its own: one front's watches never leave the other none. */
    if (!s || W.stopping || W.subs[pool] >= W.lim.max_watchers) {
        pthread_mutex_unlock(&W.lock);
        if (s)
            sbxd_fail(err, W.stopping ? SBXD_E_UNAVAILABLE : SBXD_E_BUSY, 0,
                      W.stopping ? "sbxd is shutting down"
                                 : "%u %swatches are open already (--max-watchers); close one or "
                                   "retry later",
                      W.lim.max_watchers, pool == WATCH_POOL_MCP ? "MCP subscription " : "");
        else
            sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        free(s);
        free(p);
        return NULL;
    }
    struct hub *h = W.head;
    while (h && !(h->recursive == recursive && strcmp(h->path, p) == 0 && !h->thread_ended))
        h = h->next;
    W.subs[pool]++; /* (held while a hub is made) */
    if (h) {
        h->subs++;
        pthread_mutex_unlock(&W.lock);
        free(p);
    } else {
        pthread_mutex_unlock(&W.lock);
        if (!(h = hub_start(p, recursive, err))) {
            pthread_mutex_lock(&W.lock);
            W.subs[pool]--;
            pthread_mutex_unlock(&W.lock);
            free(s);
            return NULL;
        }
    }
    s->h = h;
    s->pool = pool;
    pthread_mutex_lock(&h->lock);
    /* From now; or from since, where an offset the ring no longer holds (or one of an
     * earlier hub of this path) is reported by watch_next as an overflow. */
    s->next = since == UINT64_MAX || since > h->end ? h->end : since;
    pthread_mutex_unlock(&h->lock);
    return s;
}

uint64_t watch_offset(const struct watch_sub *s)
{
    return s->next;
}

int watch_next(struct watch_sub *s, int timeout_ms, struct watch_event *ev)
{
    if (s->ended)
        return -1;
    struct hub *h = s->h;
    struct timespec until = time_after_ms(CLOCK_MONOTONIC, timeout_ms < 0 ? 0 : timeout_ms);
    pthread_mutex_lock(&h->lock);
    while (s->next >= h->end && s->next >= h->start) {
        if (timeout_ms == 0 ||
            (timeout_ms > 0 && pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT)) {
            pthread_mutex_unlock(&h->lock);
            return 0;
        }
        if (timeout_ms < 0)
            pthread_cond_wait(&h->cond, &h->lock);
    }
    memset(ev, 0, offsetof(struct watch_event, path));
    ev->path[0] = ev->from[0] = '\0';
    if (s->next < h->start) {
        ev->type = WATCH_OVERFLOW;
        ev->offset = s->next;
        ev->missed = s->next >= h->first ? h->start - s->next : 0; /* (0: not known) */
        ev->real_ns = time_real_ns();
        s->next = h->start;
        pthread_mutex_unlock(&h->lock);
        return 1;
    }
    const struct ring_ev *r = &h->ring[s->next % SBXD_WATCH_RING];
    ev->type = r->type;
    ev->offset = s->next;
    ev->is_dir = r->is_dir;
    ev->missed = r->missed;
    ev->real_ns = r->real_ns;
    snprintf(ev->path, sizeof(ev->path), "%s", r->path);
    if (r->from)
        snprintf(ev->from, sizeof(ev->from), "%s", r->from);
    s->next++;
    if (r->type == WATCH_GONE)
        s->ended = true;
    pthread_mutex_unlock(&h->lock);
    return 1;
}

void watch_close(struct watch_sub *s)
{
    if (!s)
        return;
    struct hub *h = s->h;
    pthread_mutex_lock(&W.lock);
    W.subs[s->pool]--;
    bool free_now = --h->subs == 0 && h->thread_ended;
    if (h->subs == 0)
        h->idle_since = time_mono_ns();
    pthread_mutex_unlock(&W.lock);
    if (free_now)
        hub_free(h);
    free(s);
}

void watch_shutdown(void)
{
    pthread_mutex_lock(&W.lock);
    W.stopping = true;
    for (struct hub *h = W.head; h; h = h->next) {
        uint64_t one = 1;
        if (write(h->stopfd, &one, sizeof(one)) < 0) {
        }
    }
    struct timespec until = time_after_ms(CLOCK_REALTIME, 5000);
    while (W.hubs > 0)
        if (pthread_cond_timedwait(&W.cond, &W.lock, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&W.lock);
}
