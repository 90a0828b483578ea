/*
 * ports.c - the TCP listeners in the sandbox (ports.h), read from the kernel's tables.
 *
 * /proc/net/tcp and tcp6 have a line per socket: "sl: LOCAL REMOTE ST tx:rx tr:when retr UID
 * timeout INODE ...", each address a hex dump of the kernel's own 32-bit words (so read back
 * into one word each, it is the address in network order whatever the machine's byte order).
 */
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/files.h"
#include "sbxd/isolation.h"
#include "sbxd/jsonw.h"
#include "sbxd/ports.h"
#include "sbxd/sandbox.h"

#define DIAG_BUF 32768 /* a sock_diag answer read at a time */

enum { TCP_ESTABLISHED = 0x01, TCP_SYN_RECV = 0x03, TCP_LISTEN = 0x0A };

/* One socket of a table line. */
struct tcp_line {
    int family;
    union {
        struct in_addr v4;
        struct in6_addr v6;
    } local;
    uint16_t lport, rport;
    unsigned state;
    uid_t uid;
    unsigned long inode;
};

/* A hex dump of nwords 32-bit words into dst. */
static bool parse_words(const char *hex, size_t nwords, void *dst)
{
    if (strlen(hex) != nwords * 8)
        return false;
    for (size_t i = 0; i < nwords; i++) {
        char word[9];
        memcpy(word, hex + i * 8, 8);
        word[8] = '\0';
        char *end;
        uint32_t v = (uint32_t)strtoul(word, &end, 16);
        if (*end)
            return false;
        memcpy((char *)dst + i * 4, &v, 4);
    }
    return true;
}

static bool parse_line(const char *s, int family, struct tcp_line *t)
{
    char lhex[40], rhex[40];
    unsigned lport, rport, state, uid;
    if (sscanf(s, " %*u: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %*s %*s %*s %u %*d %lu", lhex,
               &lport, rhex, &rport, &state, &uid, &t->inode) != 7 ||
        lport > 65535 || rport > 65535)
        return false;
    t->family = family;
    t->lport = (uint16_t)lport;
    t->rport = (uint16_t)rport;
    t->state = state;
    t->uid = (uid_t)uid;
    return parse_words(lhex, family == AF_INET ? 1 : 4, &t->local);
}

/* ---- the kernel's socket tables: sock_diag netlink, else /proc/net/tcp* ---- */

/* One answer of sock_diag as a table line. */
static void diag_line(const struct inet_diag_msg *m, struct tcp_line *t)
{
    memset(t, 0, sizeof(*t));
    t->family = m->idiag_family;
    memcpy(&t->local, m->id.idiag_src, m->idiag_family == AF_INET ? 4 : 16);
    t->lport = ntohs(m->id.idiag_sport);
    t->rport = ntohs(m->id.idiag_dport);
    t->state = m->idiag_state;
    t->uid = m->idiag_uid;
    t->inode = m->idiag_inode;
}

/*
 * Ask sock_diag (NETLINK_SOCK_DIAG: what ss(8) reads) for family's TCP sockets in states, or
 * for the one socket exact names; each to fn until it returns false. A few microseconds,
 * where /proc/net/tcp prints every socket of the machine as text (its TIME_WAITs too). -1
 * where the kernel has no sock_diag (gVisor): then the tables are read.
 */
static int diag_each(int family, uint32_t states, const struct inet_diag_sockid *exact,
                     bool (*fn)(const struct tcp_line *t, void *arg), void *arg)
{
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -1;
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 r;
    } req = {
        .nlh = {.nlmsg_len = sizeof(req),
                .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = (uint16_t)(NLM_F_REQUEST | (exact ? 0 : NLM_F_DUMP))},
        .r = {.sdiag_family = (uint8_t)family,
              .sdiag_protocol = IPPROTO_TCP,
              .idiag_states = states},
    };
    if (exact)
        req.r.id = *exact;
    struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
    if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0) {
        close(fd);
        return -1;
    }
    /* From the heap: a __thread buffer would be in every thread's static TLS, which glibc
     * zeroes at each thread's start (32 KiB more for each of libmicrohttpd's threads: the soak
     * saw sbxd 3.4 MiB larger after a load). */
    char *buf = malloc(DIAG_BUF);
    if (!buf) {
        close(fd);
        return -1;
    }
    int ret = 0;
    for (bool more = true; more;) {
        ssize_t n = recv(fd, buf, DIAG_BUF, 0);
        if (n <= 0) {
            ret = -1;
            break;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n) && more;
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                more = false;
            } else if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                /* An exact socket that is not there is an answer, not a failure. */
                ret = exact && e->error == -ENOENT ? 0 : -1;
                more = false;
            } else if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
                struct tcp_line t;
                diag_line(NLMSG_DATA(h), &t);
                if (!fn(&t, arg) || exact)
                    more = false;
            }
        }
    }
    free(buf);
    close(fd);
    return ret;
}

/* Each socket in states (a mask of 1 << state) to fn, until it returns false: from
 * sock_diag, else from both tables. Returns 0, or -1 when neither could be read. */
static int tcp_each(uint32_t states, bool (*fn)(const struct tcp_line *t, void *arg), void *arg)
{
    static const struct {
        const char *path;
        int family;
    } tables[] = {{"/proc/net/tcp", AF_INET}, {"/proc/net/tcp6", AF_INET6}};
    int read = 0;
    bool stop = false;
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]) && !stop; i++) {
        if (diag_each(tables[i].family, states, NULL, fn, arg) == 0) {
            read++;
            continue;
        }
        FILE *f = fopen(tables[i].path, "re");
        if (!f)
            continue;
        read++;
        char line[512];
        struct tcp_line t;
        if (fgets(line, sizeof(line), f)) /* (the heading) */
            while (!stop && fgets(line, sizeof(line), f))
                stop = parse_line(line, tables[i].family, &t) && (states & (1u << t.state)) &&
                       !fn(&t, arg);
        fclose(f);
    }
    return read ? 0 : -1;
}

static bool is_loopback(const struct tcp_line *t)
{
    if (t->family == AF_INET)
        return ((const uint8_t *)&t->local.v4)[0] == 127;
    if (IN6_IS_ADDR_LOOPBACK(&t->local.v6))
        return true;
    return IN6_IS_ADDR_V4MAPPED(&t->local.v6) && t->local.v6.s6_addr[12] == 127;
}

struct collect {
    struct port_listener *v;
    size_t n, cap;
    bool full;
};

static bool collect_listener(const struct tcp_line *t, void *arg)
{
    struct collect *c = arg;
    if (t->state != TCP_LISTEN)
        return true;
    if (c->n == c->cap) {
        if (c->cap >= PORTS_MAX_LISTENERS) {
            c->full = true;
            return false;
        }
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct port_listener *v = realloc(c->v, cap * sizeof(*v));
        if (!v) {
            c->full = true;
            return false;
        }
        c->v = v;
        c->cap = cap;
    }
    struct port_listener *p = &c->v[c->n++];
    memset(p, 0, sizeof(*p));
    p->family = t->family;
    inet_ntop(t->family, &t->local, p->addr, sizeof(p->addr));
    p->port = t->lport;
    p->loopback = is_loopback(t);
    p->uid = t->uid;
    p->inode = t->inode;
    return true;
}

static int by_port(const void *a, const void *b)
{
    const struct port_listener *x = a, *y = b;
    if (x->port != y->port)
        return x->port < y->port ? -1 : 1;
    if (x->family != y->family)
        return x->family == AF_INET ? -1 : 1;
    return strcmp(x->addr, y->addr);
}

static void read_cmdline(pid_t pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0)
        return;
    while (n > 0 && out[n - 1] == '\0')
        n--;
    for (ssize_t i = 0; i < n; i++)
        if (out[i] == '\0' || (unsigned char)out[i] < 0x20)
            out[i] = ' ';
    out[n] = '\0';
}

/* The listener whose socket inode is ino, or NULL. */
static struct port_listener *by_inode(struct port_listener *v, size_t n, unsigned long ino)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].inode == ino && ino != 0)
            return &v[i];
    return NULL;
}

/* Each socket of a descriptor directory ("/proc/PID/fd", "/proc/self/fd") to fn, by its
 * inode, until fn returns false. Whether the directory could be read. */
static bool each_socket(const char *dir, bool (*fn)(unsigned long ino, void *arg), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    struct dirent *e;
    bool more = true;
    while (more && (e = readdir(d))) {
        char target[64];
        unsigned long ino;
        ssize_t k = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        if (sscanf(target, "socket:[%lu]", &ino) == 1)
            more = fn(ino, arg);
    }
    closedir(d);
    return true;
}

struct scan {
    pid_t pid;
    struct port_listener *v;
    size_t n, *left;
};

static bool scan_one(unsigned long ino, void *arg)
{
    struct scan *sc = arg;
    struct port_listener *p = by_inode(sc->v, sc->n, ino);
    if (p && !p->pid) {
        p->pid = sc->pid;
        read_cmdline(sc->pid, p->cmdline, sizeof(p->cmdline));
        (*sc->left)--;
    }
    return *sc->left > 0;
}

/* Look through one process's descriptors for the listeners' sockets; false once each has its
 * process. */
static bool scan_process(pid_t pid, struct port_listener *v, size_t n, size_t *left)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    struct scan sc = {.pid = pid, .v = v, .n = n, .left = left};
    each_socket(path, scan_one, &sc);
    return *left > 0;
}

static void find_processes(struct port_listener *v, size_t n)
{
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
        left += v[i].inode != 0;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    unsigned looked = 0;
    while (left && looked < PORTS_MAX_PROCS && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        looked++;
        if (!scan_process((pid_t)atoi(e->d_name), v, n, &left))
            break;
    }
    closedir(d);
}

int ports_list(bool with_procs, struct port_listener **out, size_t *n, struct sbxd_err *err)
{
    struct collect c = {0};
    if (tcp_each(1u << TCP_LISTEN, collect_listener, &c) < 0) {
        free(c.v);
        return sbxd_fail_errno(err, SBXD_E_UNAVAILABLE, errno,
                               "cannot read the kernel's TCP tables (/proc/net/tcp)");
    }
    if (c.n > 1)
        qsort(c.v, c.n, sizeof(*c.v), by_port);
    if (with_procs && c.n)
        find_processes(c.v, c.n);
    *out = c.v;
    *n = c.n;
    return 0;
}

struct peer_find {
    uint16_t from, to;
    bool found, half_open;
    uid_t uid;
};

/* A connection still in SYN_RECV on the listener's side is half-open: a request the kernel
 * keeps for the listener, no socket of anyone's yet, which its tables name uid 0. That is
 * where a connection waits while the accept queue is full, and under TCP_DEFER_ACCEPT until
 * its first bytes: its owner is the listener's, which the caller then looks at. */
static bool match_peer(const struct tcp_line *t, void *arg)
{
    struct peer_find *f = arg;
    if ((t->state != TCP_ESTABLISHED && t->state != TCP_SYN_RECV) || t->lport != f->to ||
        t->rport != f->from || !is_loopback(t))
        return true;
    if (t->state == TCP_SYN_RECV) {
        f->half_open = true;
        return true;
    }
    f->found = true;
    f->uid = t->uid;
    return false;
}

int ports_peer_uid(int family, uint16_t from, uint16_t to, uid_t *uid)
{
    struct peer_find f = {.from = from, .to = to};
    /* The socket that took the connection, by its four names: local to, remote from (both
     * loopback: IPv4, or IPv6's ::1, or a dual-stack listener's v4-mapped 127.0.0.1). */
    struct inet_diag_sockid id = {.idiag_sport = htons(to),
                                  .idiag_dport = htons(from),
                                  .idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}};
    if (family == AF_INET) {
        id.idiag_src[0] = id.idiag_dst[0] = htonl(INADDR_LOOPBACK);
        if (diag_each(AF_INET, ~0u, &id, match_peer, &f) == 0 && f.found)
            goto out;
        id.idiag_src[2] = id.idiag_dst[2] = htonl(0xffff);
        id.idiag_src[3] = id.idiag_dst[3] = htonl(INADDR_LOOPBACK);
        id.idiag_src[0] = id.idiag_dst[0] = 0;
    } else {
        id.idiag_src[3] = id.idiag_dst[3] = htonl(1);
    }
    if (diag_each(AF_INET6, ~0u, &id, match_peer, &f) == 0 && f.found)
        goto out;
    tcp_each((1u << TCP_ESTABLISHED) | (1u << TCP_SYN_RECV), match_peer, &f);
out:
    if (!f.found)
        return f.half_open ? 1 : -1;
    *uid = f.uid;
    return 0;
}

pid_t ports_parent(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t k = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (k <= 0)
        return 0;
    buf[k] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so from the last ')'. */
    const char *r = strrchr(buf, ')');
    int ppid;
    if (!r || sscanf(r + 1, " %*c %d", &ppid) != 1 || ppid < 0)
        return 0;
    return (pid_t)ppid;
}

/* ---- the sandbox's view: whose listeners, and what the proxy may reach ---- */

/* The socket inodes sbxd holds, sorted (an array to free). */
struct inodes {
    unsigned long *v;
    size_t n, cap;
};

static bool add_inode(unsigned long ino, void *arg)
{
    struct inodes *in = arg;
    if (in->n == in->cap) {
        size_t cap = in->cap ? in->cap * 2 : 64;
        unsigned long *v = realloc(in->v, cap * sizeof(*v));
        if (!v)
            return false;
        in->v = v;
        in->cap = cap;
    }
    in->v[in->n++] = ino;
    return true;
}

static unsigned long *own_inodes(size_t *n)
{
    struct inodes in = {0};
    each_socket("/proc/self/fd", add_inode, &in);
    *n = in.n;
    return in.v;
}

static bool holds(const unsigned long *own, size_t n, unsigned long ino)
{
    for (size_t i = 0; i < n; i++)
        if (own[i] == ino)
            return true;
    return false;
}

/* Whether uid is one commands run as. When sbxd is not root, commands run as its own uid
 * (the port checks keep sbxd's own listeners out); root never is one. */
static bool command_uid(const struct sandbox *sb, uid_t uid)
{
    if (uid == 0)
        return false;
    struct fs_uid_span v[2];
    unsigned n = iso_command_uids(sb->harden, sb->iso, sb->cfg, v);
    if (!sb->harden->switch_user)
        return uid == geteuid();
    for (unsigned i = 0; i < n; i++)
        if (uid >= v[i].first && uid - v[i].first < v[i].count)
            return true;
    return false;
}

/* Whether a process of pid's tree (pid, its children from /proc's children lists, to a depth
 * and a count) holds the socket inode ino. */
struct holds_find {
    unsigned long ino;
    bool found;
};

static bool is_ino(unsigned long ino, void *arg)
{
    struct holds_find *f = arg;
    f->found = ino == f->ino;
    return !f->found;
}

/* Set once a children list was missing (gVisor has none): then a context's tree is found from
 * the holder up, by its parents. */
static bool no_children;

/* The process holding socket ino, by a look through every process's descriptors (bounded);
 * 0 when none. */
static pid_t holder_of(unsigned long ino)
{
    struct port_listener l = {.inode = ino};
    find_processes(&l, 1);
    return l.pid;
}

static bool tree_holds(pid_t pid, unsigned long ino, int depth, unsigned *budget)
{
    if (pid <= 0 || !*budget || depth > 8)
        return false;
    (*budget)--;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    struct holds_find hf = {.ino = ino};
    each_socket(path, is_ino, &hf);
    if (hf.found)
        return true;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT || errno == EINVAL) /* gVisor has no children lists */
            __atomic_store_n(&no_children, true, __ATOMIC_RELAXED);
        return false;
    }
    int child;
    bool found = false;
    while (!found && fscanf(f, "%d", &child) == 1)
        found = tree_holds((pid_t)child, ino, depth + 1, budget);
    fclose(f);
    return found;
}

/* Whether a code context's shell or kernel (or a process of its) holds the socket ino. */
static bool context_holds(unsigned long ino)
{
    pid_t pids[64];
    size_t n = ctx_pids(pids, sizeof(pids) / sizeof(pids[0]));
    unsigned budget = 256;
    for (size_t i = 0; i < n && ino; i++)
        if (tree_holds(pids[i], ino, 0, &budget))
            return true;
    if (!n || !ino || !__atomic_load_n(&no_children, __ATOMIC_RELAXED))
        return false;
    /* Without children lists: the holder, then its parents, against the contexts' own. */
    pid_t p = holder_of(ino);
    for (int depth = 0; p > 1 && depth < 64; depth++, p = ports_parent(p))
        for (size_t i = 0; i < n; i++)
            if (pids[i] == p)
                return true;
    return false;
}

static bool wildcard(const struct port_listener *l)
{
    return strcmp(l->addr, "0.0.0.0") == 0 || strcmp(l->addr, "::") == 0;
}

void ports_judge(const struct sandbox *sb, struct port_listener *l, const unsigned long *own,
                 size_t nown)
{
    l->own = holds(own, nown, l->inode);
    l->proxy = false;
    if (l->own)
        snprintf(l->why, sizeof(l->why), "port %u is sbxd's own", (unsigned)l->port);
    else if (l->uid == 0)
        snprintf(l->why, sizeof(l->why), "port %u is root's, not a command user's",
                 (unsigned)l->port);
    else if (!command_uid(sb, l->uid))
        snprintf(l->why, sizeof(l->why), "port %u is uid %u's, not a command user's",
                 (unsigned)l->port, (unsigned)l->uid);
    else if (context_holds(l->inode))
        snprintf(l->why, sizeof(l->why), "port %u is a code context's kernel's or shell's",
                 (unsigned)l->port);
    else if (!l->loopback && !wildcard(l))
        snprintf(l->why, sizeof(l->why), "port %u listens on %s only, not on loopback",
                 (unsigned)l->port, l->addr);
    else
        l->proxy = true;
}

/* Which background process pid descends from, into id ("" when none). */
static void find_process(pid_t pid, struct bg_proc **v, size_t n, char *id, size_t len)
{
    id[0] = '\0';
    for (int depth = 0; pid > 1 && depth < 64; depth++, pid = ports_parent(pid))
        for (size_t i = 0; i < n; i++) {
            struct bg_info in;
            bg_info(v[i], &in);
            if (!in.finished && in.pid == pid) {
                snprintf(id, len, "%s", in.id);
                return;
            }
        }
}

int ports_read(const struct sandbox *sb, struct port_listener **out, size_t *n,
               struct sbxd_err *err)
{
    if (ports_list(true, out, n, err) < 0)
        return -1;
    size_t nown;
    unsigned long *own = own_inodes(&nown);
    struct bg_proc **procs = NULL;
    size_t nprocs = bg_list(&procs);
    for (size_t i = 0; i < *n; i++) {
        ports_judge(sb, &(*out)[i], own, nown);
        if ((*out)[i].pid)
            find_process((*out)[i].pid, procs, nprocs, (*out)[i].process_id,
                         sizeof((*out)[i].process_id));
    }
    for (size_t i = 0; i < nprocs; i++)
        bg_put(procs[i]);
    free(procs);
    free(own);
    return 0;
}

int ports_target(const struct sandbox *sb, uint16_t port, struct sockaddr_storage *to,
                 socklen_t *len, struct sbxd_err *err)
{
    struct port_listener *v;
    size_t n;
    if (ports_list(false, &v, &n, err) < 0)
        return -1;
    size_t nown;
    unsigned long *own = own_inodes(&nown);
    bool any = false, v4 = false, v6 = false;
    char why[120] = "";
    /* A port one of sbxd's sockets listens on is sbxd's, whatever else listens there too. */
    for (size_t i = 0; i < n; i++)
        if (v[i].port == port && v[i].inode && holds(own, nown, v[i].inode)) {
            free(v);
            free(own);
            return sbxd_fail(err, SBXD_E_DENIED, 0, "port %u is sbxd's own", (unsigned)port);
        }
    for (size_t i = 0; i < n; i++) {
        if (v[i].port != port)
            continue;
        any = true;
        ports_judge(sb, &v[i], own, nown);
        if (!v[i].proxy) {
            snprintf(why, sizeof(why), "%s", v[i].why);
            continue;
        }
        if (v[i].family == AF_INET || strcmp(v[i].addr, "::") == 0 ||
            strncmp(v[i].addr, "::ffff:127.", 11) == 0)
            v4 = true;
        else
            v6 = true;
    }
    free(v);
    free(own);
    if (!any)
        return sbxd_fail(err, SBXD_E_NOT_FOUND, 0, "nothing listens on port %u", (unsigned)port);
    if (!v4 && !v6)
        return sbxd_fail(err, SBXD_E_DENIED, 0, "%s", why);
    memset(to, 0, sizeof(*to));
    if (v4) {
        struct sockaddr_in *a = (struct sockaddr_in *)to;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)to;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        a->sin6_addr = in6addr_loopback;
        *len = sizeof(*a);
    }
    return 0;
}

static uint16_t sock_port(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
                                          : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

int ports_check_peer(const struct sandbox *sb, int fd, struct sbxd_err *err)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot name the proxy's connection");
    uid_t uid = 0;
    /* The far end is in the table once the handshake is done, which may be a moment after
     * connect returned. */
    for (int i = 0; i < 40; i++) {
        int found = ports_peer_uid(me.ss_family, sock_port(&me), sock_port(&peer), &uid);
        if (found == 0) {
            if (command_uid(sb, uid))
                return 0;
            return sbxd_fail(err, SBXD_E_DENIED, 0,
                             "port %u was taken by uid %u, not a command user",
                             (unsigned)sock_port(&peer), (unsigned)uid);
        }
        if (found == 1)
            break; /* half-open: the listener's */
        usleep(2000);
    }
    /* A connection half-open on the listener's side (a full accept queue, TCP_DEFER_ACCEPT) is
     * the listener's, and gVisor's table lists a connection only once it is accepted: one an
     * app has not taken yet is not there. Then the listeners on the port are looked at again,
     * each of them a command user's (the window left is the connect's own). */
    struct port_listener *v;
    size_t n;
    bool ok = false;
    if (ports_list(false, &v, &n, err) == 0) {
        for (size_t i = 0; i < n; i++)
            if (v[i].port == sock_port(&peer)) {
                ok = command_uid(sb, v[i].uid);
                if (!ok)
                    break;
            }
        free(v);
    }
    if (ok)
        return 0;
    return sbxd_fail(err, SBXD_E_DENIED, 0, "the listener on port %u went away",
                     (unsigned)sock_port(&peer));
}

void ports_write(struct jsonw *w, const struct port_listener *l)
{
    jw_key(w, "address");
    jw_str(w, l->addr);
    jw_key(w, "port");
    jw_uint(w, l->port);
    jw_key(w, "family");
    jw_str(w, l->family == AF_INET ? "ipv4" : "ipv6");
    jw_key(w, "loopback");
    jw_bool(w, l->loopback);
    jw_key(w, "uid");
    jw_uint(w, l->uid);
    jw_key(w, "pid");
    if (l->pid)
        jw_uint(w, (uint64_t)l->pid);
    else
        jw_null(w);
    jw_key(w, "command");
    if (l->pid)
        jw_str(w, l->cmdline);
    else
        jw_null(w);
    jw_key(w, "process_id");
    if (l->process_id[0])
        jw_str(w, l->process_id);
    else
        jw_null(w);
    jw_key(w, "sbxd");
    jw_bool(w, l->own);
    jw_key(w, "proxy");
    jw_bool(w, l->proxy);
    if (!l->proxy) {
        jw_key(w, "why");
        jw_str(w, l->why);
    }
}

void ports_write_list(struct jsonw *w, const struct port_listener *v, size_t n)
{
    jw_key(w, "ports");
    jw_arr_begin(w);
    for (size_t i = 0; i < n; i++) {
        jw_obj_begin(w);
        ports_write(w, &v[i]);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}
