/* Code contexts: persistent shell sessions (context.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/files.h"
#include "sbxd/kernelspec.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/proc_mem.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

/* Languages with a default context (POST /run_code) at most. */
#define DEFAULTS_MAX 8

static struct {
    pthread_mutex_t lock;
    struct ctx_config cfg;
    struct exec_service *svc;
    struct ctx *head;
    unsigned alive;
    struct {
        char language[32];
        char id[25];
    } defaults[DEFAULTS_MAX]; /* each language's default context ("" none) */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

void ctx_init(const struct ctx_config *cfg, struct exec_service *svc)
{
    reg.cfg = *cfg;
    reg.svc = svc;
}

const char *ctx_status_name(enum ctx_status s)
{
    static const char *const names[] = {"ok", "error", "timeout", "died"};
    return names[s];
}

/* 2n hex digits of random bytes into out; -1 when the kernel gives none (a marker token must
 * not be guessable: no fallback). */
static int random_hex(char *out, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[16];
    if (n > sizeof(raw) || getrandom(raw, n, 0) != (ssize_t)n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * n] = '\0';
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* A shell's channel                                                                    */

/*
 * Each execution's code reaches the shell on a fifo of its own, and no descriptor the code
 * runs with leads to a later execution. The code used to come on the shell's stdin, which
 * bash keeps open while it runs the code (as fd 10, where it saves stdin for eval's
 * redirection): code could hand it to a background child, which then read the next
 * execution's request, marker token included, and answered in its place with forged output
 * and status.
 *
 * The fifo of execution N+1 is made ahead (make_spare), in sbxd's directory for contexts
 * (ctx_dir.c), which commands can pass through but not list, under a name of 128 random bits that
 * only N's request carries (so only the shell knows it: in its memory, in no descriptor, file or
 * environment). The marker function opens it as the shell's stdin, which closes N's, then prints
 * N's marker; on that marker sbxd unlinks it and makes it 0600 (sbxd's): nobody can open it by name
 * any longer, nor reopen it through the shell's /proc/PID/fd. While N's code runs, the shell holds
 * only N's fifo (bash's saved stdin), drained by then, which sbxd writes into again only to
 * end N after an interrupt (`__sbxd_resume`: bash reads on there after SIGINT). The shell's
 * stdin from sbxd serves the start alone and is closed before any code runs. What code may
 * do to its own shell (its functions, traps, the shell's memory) is the context's own
 * business: docs/security.md.
 */
/* A new fifo in the directory under a random name (into name): sbxd's fd of it, open for
 * reading and writing (so that the shell's open does not wait, and sbxd's writes never meet
 * a closed end), or -1 with err. Readable by the shell's user (0604) until chan_seal. */
static int chan_make(char name[TOKEN_LEN + 1], struct sbxd_err *err)
{
    name[0] = '\0';
    int dfd = ctx_dir_fd(err);
    if (dfd < 0)
        return -1;
    char n[TOKEN_LEN + 1];
    if (random_hex(n, TOKEN_LEN / 2) < 0)
        return sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for a shell's channel");
    if (mkfifoat(dfd, n, 0600) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot make a shell's channel");
    int fd = openat(dfd, n, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0604) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        unlinkat(dfd, n, 0);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot open a shell's channel");
    }
    memcpy(name, n, sizeof(n));
    return fd;
}

/* The shell has opened it (it printed the marker after): nobody else may from now on. */
static void chan_seal(int fd, char name[TOKEN_LEN + 1])
{
    if (fd >= 0)
        fchmod(fd, 0600);
    if (name[0])
        unlinkat(ctx_dir_fd(NULL), name, 0);
    name[0] = '\0';
}

static void chan_close(int *fd, char name[TOKEN_LEN + 1])
{
    chan_seal(*fd, name);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Write a run's text to the shell's fifo, as the shell reads it (SBXD_CTX_GRACE_MS at most,
 * and not past the shell's end). 0, or -1 with err. */
static int chan_write(int fd, struct bg_proc *shell, const char *text, size_t len,
                      struct sbxd_err *err)
{
    if (fd < 0)
        return sbxd_fail(err, SBXD_E_INTERNAL, 0, "the shell has no channel");
    int64_t deadline = time_mono_ns() + (int64_t)SBXD_CTX_GRACE_MS * 1000000;
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, text + done, len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot write to the shell");
        if (bg_ended(shell))
            return sbxd_fail(err, SBXD_E_INTERNAL, 0, "the shell ended");
        int64_t left = deadline - time_mono_ns();
        if (left <= 0)
            return sbxd_fail(err, SBXD_E_INTERNAL, 0, "it read nothing for %d ms",
                             SBXD_CTX_GRACE_MS);
        /* (In slices: the shell's end shows in no event of this fd, sbxd holding both ends.) */
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, left > 50000000 ? 50 : (int)(left / 1000000) + 1);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Markers                                                                              */

/* One output stream of an execution: bytes that may begin a marker are held back until the
 * rest shows whether they do. */
static bool is_hex(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

enum mark { MARK_NO, MARK_PARTIAL, MARK_YES };

/* Is there a marker at b[0] ('\n')? MARK_YES with its length and token (and status, for
 * stdout's); MARK_PARTIAL when b ends before it could tell. */
static enum mark marker_at(const uint8_t *b, size_t len, int stream, size_t *mlen,
                           const uint8_t **token, int *status)
{
    if (len < 2)
        return MARK_PARTIAL;
    if (b[1] != 0x1e)
        return MARK_NO;
    size_t h = 2;
    while (h < len && h - 2 < TOKEN_LEN && is_hex(b[h]))
        h++;
    if (h == len)
        return MARK_PARTIAL;
    if (h - 2 != TOKEN_LEN)
        return MARK_NO;
    *token = b + 2;
    if (stream == 2) {
        if (b[h] != '\n')
            return MARK_NO;
        *mlen = h + 1;
        return MARK_YES;
    }
    if (b[h] != ' ')
        return MARK_NO;
    size_t d = h + 1;
    if (d < len && b[d] == '-')
        d++;
    size_t digits = d;
    while (d < len && d - digits < 10 && b[d] >= '0' && b[d] <= '9')
        d++;
    if (d == len)
        return MARK_PARTIAL;
    if (d == digits || b[d] != '\n')
        return MARK_NO;
    *status = (int)strtol((const char *)b + h + 1, NULL, 10);
    *mlen = d + 1;
    return MARK_YES;
}

/* ---------------------------------------------------------------------------------- */
/* One execution                                                                        */

void ctx_mark_dead(struct ctx *c, const char *why)
{
    if (!c->dead)
        snprintf(c->dead_reason, sizeof(c->dead_reason), "%s", why);
    c->dead = true;
    c->pid = 0;
    pthread_cond_broadcast(&c->cond);
}

void ctx_ended_reason(struct bg_proc *p, const char *what, char *out, size_t len)
{
    struct bg_info in;
    bg_info(p, &in);
    if (in.res.oom_killed)
        snprintf(out, len, "the %s was killed for running out of memory", what);
    else if (in.res.timed_out)
        snprintf(out, len, "the %s reached sbxd's longest lifetime for a process", what);
    else if (in.res.signal)
        snprintf(out, len, "the %s was killed by signal %d", what, in.res.signal);
    else
        snprintf(out, len, "the %s exited with status %d", what, in.res.exit_code);
}

/* Feed n bytes of stream st through its scan: the clean bytes are then r->work[0 ..
 * r->emit_len). */
static void scan_feed(struct ctx_run *r, int st, const uint8_t *data, size_t n)
{
    struct scan *s = &r->sc[st];
    uint8_t *w = r->work;
    size_t len = s->nheld;
    memcpy(w, s->held, s->nheld);
    memcpy(w + len, data, n);
    len += n;
    s->nheld = 0;
    r->emit_len = 0;
    if (s->done)
        return;     /* after the execution's end: not its output */
    size_t out = 0; /* clean bytes are compacted to w[0 .. out) */
    size_t i = 0;
    while (i < len) {
        uint8_t *nl = memchr(w + i, '\n', len - i);
        size_t j = nl ? (size_t)(nl - w) : len;
        memmove(w + out, w + i, j - i);
        out += j - i;
        if (!nl)
            break;
        size_t mlen = 0;
        const uint8_t *tok = NULL;
        int status = 0;
        enum mark m = marker_at(w + j, len - j, st, &mlen, &tok, &status);
        if (m == MARK_PARTIAL) {
            memmove(s->held, w + j, len - j);
            s->nheld = len - j;
            break;
        }
        if (m == MARK_NO) {
            w[out++] = '\n';
            i = j + 1;
            continue;
        }
        if (memcmp(tok, r->token, TOKEN_LEN) == 0) {
            s->done = true;
            if (st == 1)
                s->status = status;
            break; /* what follows is past the execution */
        }
        i = j + mlen; /* an earlier execution's: dropped */
    }
    r->emit_len = out;
}

/* SIGINT to the run's shell and everything it runs, and the line that ends the run (status
 * 130), written to the run's fifo (fd): an interactive shell drops the rest of the line it
 * runs and reads on from its stdin, which is that fifo again; `__sbxd_resume` takes the next
 * run's fifo and prints the marker (once: a second one for the same run does nothing). */
static void send_interrupt(struct bg_proc *shell, int fd, const char *token)
{
    struct sbxd_err err = {0};
    bg_signal(shell, SIGINT, &err);
    char line[TOKEN_LEN + 32];
    int n = snprintf(line, sizeof(line), "__sbxd_resume %s\n", token);
    if (fd >= 0 && write(fd, line, (size_t)n) != n) {
        /* (A fifo the shell never read: it does not come back, and is restarted.) */
    }
}

void ctx_interrupt_run(struct ctx_run *r)
{
    if (r->interrupting || r->over)
        return;
    r->interrupting = true;
    r->res.interrupted = true;
    r->grace_ns = time_mono_ns() + (int64_t)SBXD_CTX_GRACE_MS * 1000000;
    if (r->c->kernel)
        kernel_interrupt(r->shell, r->jc, r->c->interrupt_message);
    else
        send_interrupt(r->shell, r->code_fd, r->token);
}

/* (A restart or a delete may have let the context go already.) */
void ctx_finish(struct ctx_run *r, enum ctx_status status, const char *why)
{
    struct ctx *c = r->c;
    r->over = true;
    if (__atomic_load_n(&r->asked, __ATOMIC_ACQUIRE))
        r->res.interrupted = true;
    r->res.status = status;
    r->res.duration_ms = (double)(time_mono_ns() - r->start_ns) / 1e6;
    if (why)
        snprintf(r->res.reason, sizeof(r->res.reason), "%s", why);
    bg_hold(r->shell, BG_NO_HOLD);
    pthread_mutex_lock(&c->lock);
    if (c->run == r) {
        c->run = NULL;
        c->busy = false;
        c->last_used_real_ns = time_real_ns();
        c->last_used_mono_ns = time_mono_ns();
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
}

void ctx_run_died(struct ctx_run *r, const char *why)
{
    struct ctx *c = r->c;
    pthread_mutex_lock(&c->lock);
    if (c->shell == r->shell)
        ctx_mark_dead(c, why);
    pthread_mutex_unlock(&c->lock);
    r->res.exit_code = -1;
    ctx_finish(r, CTX_DIED, why);
}

static int start_proc(struct ctx *c, struct sbxd_err *err);

/* (If it is still the context's.) */
void ctx_restart_for(struct ctx_run *r)
{
    struct ctx *c = r->c;
    r->res.restarted = true;
    r->res.exit_code = 130;
    pthread_mutex_lock(&c->lock);
    bool current = c->shell == r->shell && c->run == r;
    struct jp_conn *jc = NULL;
    if (current) {
        c->shell = NULL;
        c->run = NULL; /* still busy: the new process starts */
        jc = c->jc;
        c->jc = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    jp_close(jc); /* (the run holds it still) */
    struct bg_info in;
    bg_remove(r->shell, &in); /* kills what the old one ran */
    r->over = true;
    r->res.status = CTX_TIMEOUT;
    r->res.duration_ms = (double)(time_mono_ns() - r->start_ns) / 1e6;
    if (!current)
        return;
    bg_put(r->shell); /* the context's reference */
    struct sbxd_err err = {0};
    int rc = start_proc(c, &err);
    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        ctx_mark_dead(c, err.msg[0] ? err.msg : "it could not be started again");
    c->busy = false;
    c->last_used_real_ns = time_real_ns();
    c->last_used_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

bool ctx_run_timers(struct ctx_run *r, int64_t now)
{
    if (!r->interrupting && r->deadline_ns && now >= r->deadline_ns) {
        r->timed_out = true;
        ctx_interrupt_run(r);
    }
    if (r->interrupting && now >= r->grace_ns) {
        ctx_restart_for(r);
        return true;
    }
    return false;
}

/* The run's marker came: the shell has opened the next run's fifo (it prints the marker
 * after), which is sealed and becomes the context's channel. */
static void shell_took_next(struct ctx_run *r)
{
    if (r->next_fd < 0)
        return;
    chan_seal(r->next_fd, r->next_name);
    struct ctx *c = r->c;
    pthread_mutex_lock(&c->lock);
    if (c->shell == r->shell && c->chan_fd < 0) {
        c->chan_fd = r->next_fd;
        r->next_fd = -1;
    }
    pthread_mutex_unlock(&c->lock);
}

int ctx_run_next(struct ctx_run *r, int wait_ms, int *stream, const uint8_t **data, size_t *n)
{
    if (r->c->kernel)
        return kernel_run_next(r, wait_ms, stream, data, n);
    int64_t until = wait_ms < 0 ? 0 : time_mono_ns() + (int64_t)wait_ms * 1000000;
    for (;;) {
        if (r->over)
            return -1;
        if (r->sc[1].done && r->sc[2].done) {
            shell_took_next(r);
            int st = r->sc[1].status;
            r->res.exit_code = st;
            ctx_finish(r, r->timed_out ? CTX_TIMEOUT : st == 0 ? CTX_OK : CTX_ERROR, NULL);
            return -1;
        }
        int64_t now = time_mono_ns();
        if (ctx_run_timers(r, now))
            return -1;
        int64_t wake = r->interrupting ? r->grace_ns : r->deadline_ns;
        if (until && (!wake || until < wake))
            wake = until;
        int ms = -1;
        if (wake)
            ms = wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
        size_t got = 0;
        int st = 0;
        uint64_t next = 0;
        enum bg_read_result rr =
            bg_read(r->shell, r->off, r->buf, SBXD_READ_CHUNK, false, ms, &got, &st, &next);
        if (rr == BG_READ_DROPPED) {
            r->off = next; /* (not while held: output from before the run) */
            continue;
        }
        if (rr == BG_READ_END) {
            /* What was held back as a possible marker's start is output after all. */
            for (int i = 1; i <= 2; i++)
                if (r->sc[i].nheld && !r->sc[i].done) {
                    memcpy(r->work, r->sc[i].held, r->sc[i].nheld);
                    r->emit_len = r->sc[i].nheld;
                    r->sc[i].nheld = 0;
                    if (i == 1)
                        r->res.stdout_bytes += r->emit_len;
                    else
                        r->res.stderr_bytes += r->emit_len;
                    *stream = i;
                    *data = r->work;
                    *n = r->emit_len;
                    return 1;
                }
            char why[320];
            ctx_ended_reason(r->shell, "shell", why, sizeof(why));
            ctx_run_died(r, why);
            return -1;
        }
        if (rr == BG_READ_DATA) {
            r->off = next;
            bg_hold(r->shell, r->off);
            if (st != 1 && st != 2)
                continue;
            scan_feed(r, st, r->buf, got);
            if (r->emit_len) {
                if (st == 1)
                    r->res.stdout_bytes += r->emit_len;
                else
                    r->res.stderr_bytes += r->emit_len;
                *stream = st;
                *data = r->work;
                *n = r->emit_len;
                return 1;
            }
            continue;
        }
        if (until && time_mono_ns() >= until)
            return 0;
    }
}

const struct ctx_result *ctx_run_result(const struct ctx_run *r)
{
    return &r->res;
}

/* What a shell's run holds: its fifos (the next one unlinked if still named). */
static void shell_run_free(struct ctx_run *r)
{
    if (r->code_fd >= 0)
        close(r->code_fd);
    r->code_fd = -1;
    chan_close(&r->next_fd, r->next_name);
}

void ctx_run_end(struct ctx_run *r)
{
    if (!r)
        return;
    if (!r->over) {
        /* Its client left: stop the code, and read on to the end so that the context is
         * free (and in step) for the next execution. */
        ctx_interrupt_run(r);
        int st;
        const uint8_t *d;
        size_t n;
        while (ctx_run_next(r, -1, &st, &d, &n) >= 0) {
        }
    }
    if (r->c->kernel)
        kernel_run_free(r);
    else
        shell_run_free(r);
    bg_put(r->shell);
    ctx_put(r->c);
    free(r->buf);
    free(r->work);
    free(r);
}

/* The text a shell is given for the run's code: a here-document whose delimiter carries the
 * token (no line of the code can end it), the next run's fifo named, the code eval'ed with
 * stdin from /dev/null (bash keeps this run's fifo, the stdin it replaces, close-on-exec
 * meanwhile: no program the code runs gets it), and the marker, which takes the next fifo
 * first. NULL when out of memory. */
static char *shell_text(const struct ctx_run *r, const char *code, size_t len, size_t *tl)
{
    /* The code and about 170 bytes of protocol, three tokens, a fifo's path and name. */
    size_t cap = len + 4 * TOKEN_LEN + CTX_DIR_PATH_MAX + 256;
    char *text = malloc(cap);
    if (!text)
        return NULL;
    int head = snprintf(text, cap, "IFS= read -r -d '' __sbxd_c <<'SBXD_%s'\n", r->token);
    memcpy(text + head, code, len);
    size_t at = (size_t)head + len;
    if (len && code[len - 1] != '\n')
        text[at++] = '\n';
    int tail = snprintf(text + at, cap - at,
                        "SBXD_%s\n__sbxd_next=%s/%s; eval \"$__sbxd_c\" </dev/null; "
                        "__sbxd_mark %s $?\n",
                        r->token, ctx_dir_path(), r->next_name, r->token);
    if (tail < 0 || (size_t)tail >= cap - at) {
        free(text);
        return NULL;
    }
    *tl = at + (size_t)tail;
    return text;
}

/* Give the run's code to its process: the run ends as died when it takes nothing. */
static void run_begin(struct ctx_run *r, const char *code, size_t len, const char *text, size_t tl)
{
    struct sbxd_err err = {0};
    bool taken;
    if (r->c->kernel) {
        taken = kernel_run_begin(r, code, len, &err) == 0;
    } else {
        taken = chan_write(r->code_fd, r->shell, text, tl, &err) == 0;
    }
    if (taken)
        return;
    const char *what = r->c->kernel ? "kernel" : "shell";
    char why[320];
    snprintf(why, sizeof(why), "the %s did not take the code: %s", what, err.msg);
    if (bg_ended(r->shell))
        ctx_ended_reason(r->shell, what, why, sizeof(why));
    ctx_run_died(r, why);
}

/* A fifo made ahead for c's run after the next one, while the shell runs this one's code:
 * making one (mknodat, openat: about 25 us here) is then off every execution's path. (None
 * made: that run makes its own.) */
static void make_spare(struct ctx *c)
{
    pthread_mutex_lock(&c->lock);
    bool need = c->spare_fd < 0;
    pthread_mutex_unlock(&c->lock);
    if (!need)
        return;
    char name[TOKEN_LEN + 1];
    struct sbxd_err err = {0};
    int fd = chan_make(name, &err);
    if (fd < 0)
        return;
    pthread_mutex_lock(&c->lock);
    bool kept = c->spare_fd < 0;
    if (kept) {
        c->spare_fd = fd;
        memcpy(c->spare_name, name, sizeof(name));
    }
    pthread_mutex_unlock(&c->lock);
    if (!kept)
        chan_close(&fd, name);
}

/* A run that did not start, let go (with its text). */
static void run_discard(struct ctx_run *r, char *text)
{
    free(text);
    if (!r)
        return;
    chan_close(&r->next_fd, r->next_name);
    free(r->buf);
    free(r->work);
    free(r);
}

struct ctx_run *ctx_run_start(struct ctx *c, const char *code, size_t len, uint64_t timeout_ms,
                              int wait_ms, struct sbxd_err *err)
{
    if (memchr(code, '\0', len)) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "'code' must not contain NUL characters");
        return NULL;
    }
    struct ctx_run *r = calloc(1, sizeof(*r));
    char *text = NULL;
    size_t tl = 0;
    if (r)
        r->code_fd = r->next_fd = -1;
    if (r && !c->kernel) {
        r->buf = malloc(SBXD_READ_CHUNK);
        r->work = malloc(SBXD_READ_CHUNK + MARKER_MAX);
        if (random_hex(r->token, TOKEN_LEN / 2) < 0) {
            run_discard(r, NULL);
            sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for the execution's marker");
            return NULL;
        }
        /* The fifo for the next run's code: the one made ahead while the last run's code ran,
         * or a new one. */
        pthread_mutex_lock(&c->lock);
        r->next_fd = c->spare_fd;
        memcpy(r->next_name, c->spare_name, sizeof(r->next_name));
        c->spare_fd = -1;
        c->spare_name[0] = '\0';
        pthread_mutex_unlock(&c->lock);
        if (r->next_fd < 0)
            r->next_fd = chan_make(r->next_name, err);
        if (r->next_fd < 0) {
            run_discard(r, NULL);
            return NULL;
        }
        text = r->buf && r->work ? shell_text(r, code, len, &tl) : NULL;
    }
    if (!r || (!c->kernel && !text)) {
        run_discard(r, text);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }

    pthread_mutex_lock(&c->lock);
    struct timespec until = time_after_ms(CLOCK_MONOTONIC, wait_ms < 0 ? 0 : wait_ms);
    while (c->busy && !c->dead)
        if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT)
            break;
    if (c->dead || c->busy || !c->shell) {
        bool dead = c->dead || !c->shell;
        char why[320];
        snprintf(why, sizeof(why), "%s", c->dead_reason[0] ? c->dead_reason : "no process");
        pthread_mutex_unlock(&c->lock);
        run_discard(r, text);
        if (dead)
            sbxd_fail(err, SBXD_E_CONFLICT, 0, "the context is dead (%s); restart it first", why);
        else
            sbxd_fail(err, SBXD_E_CONFLICT, 0,
                      "the context is still running another execution; retry later");
        return NULL;
    }
    c->busy = true;
    c->run = r;
    c->execution_count++;
    r->res.execution_count = c->execution_count;
    r->res.kernel = c->kernel;
    r->shell = c->shell;
    r->jc = c->jc;
    if (r->jc)
        jp_hold(r->jc);
    r->code_fd = c->chan_fd; /* the run's now: the next one's channel comes back with it */
    c->chan_fd = -1;
    pthread_mutex_unlock(&c->lock);
    bg_ref(r->shell); /* (c is busy: its process stays until this run lets it go) */
    pthread_mutex_lock(&reg.lock);
    c->refs++;
    pthread_mutex_unlock(&reg.lock);
    r->c = c;
    if (!c->kernel) {
        /* What the shell printed between executions (background jobs) is not this one's. */
        struct bg_info in;
        bg_info(r->shell, &in);
        r->off = in.out_end;
        bg_hold(r->shell, r->off);
    }
    r->start_ns = time_mono_ns();
    r->deadline_ns = timeout_ms ? r->start_ns + (int64_t)timeout_ms * 1000000 : 0;
    run_begin(r, code, len, text, tl);
    free(text);
    if (!c->kernel)
        make_spare(c);
    return r;
}

/* ---------------------------------------------------------------------------------- */
/* Contexts                                                                             */

/* What every shell context runs first: an interactive bash quiet and safe for code (no
 * prompts, no history or its `!` expansion, no mail checks); the marker function, which takes
 * the next run's fifo as stdin first; and the end of a run after an interrupt, once (a second
 * `__sbxd_resume` for the same run does nothing). */
static const char shell_init[] =
    "set +H +o history; unset HISTFILE MAILCHECK PROMPT_COMMAND; PS1=''; PS2=''; PS0=''\n"
    "__sbxd_mark() { local __sbxd_s=$2; __sbxd_done=$1; exec 0<\"$__sbxd_next\"; unset __sbxd_c; "
    "printf '\\n\\036%s %d\\n' \"$1\" \"$__sbxd_s\"; printf '\\n\\036%s\\n' \"$1\" >&2; "
    "return \"$__sbxd_s\"; }\n"
    "__sbxd_resume() { [ \"$__sbxd_done\" = \"$1\" ] || __sbxd_mark \"$1\" 130; }\n";

/* The spec c's process starts from (malloc'd; NULL when out of memory): a shell's as it is;
 * a kernel's with its IPython directory in its own directory (ctx_dir.c: no command can
 * reach it, and nothing is put in the workspace, which `git clone URL .` needs empty), unless
 * the client named one, and without the cwd (ctx_spawn). */
static char *spec_for_spawn(struct ctx *c, const char *start_dir)
{
    if (!c->kernel)
        return strdup(c->spec);
    cJSON *o = cJSON_Parse(c->spec);
    cJSON *env = o ? ctx_spec_env(o) : NULL;
    if (env && start_dir && !cJSON_GetObjectItemCaseSensitive(env, "IPYTHONDIR")) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/ipython", start_dir);
        cJSON_AddStringToObject(env, "IPYTHONDIR", dir);
    }
    char *spec = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return spec;
}

void ctx_proc_release(struct ctx *c, struct bg_proc *p, struct jp_conn *jc)
{
    if (p) {
        struct bg_info in;
        bg_remove(p, &in);
        bg_put(p);
    }
    jp_close(jc);
    ctx_kdir_remove(c);
}

void ctx_kdir_remove(struct ctx *c)
{
    char name[sizeof(c->kdir)];
    pthread_mutex_lock(&c->lock);
    snprintf(name, sizeof(name), "%s", c->kdir);
    c->kdir[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    kdir_remove(name);
}

int64_t ctx_kernel_msg_max(void)
{
    uint64_t m = reg.cfg.max_output > (uint64_t)SBXD_KERNEL_MSG_MAX / 4
                     ? (uint64_t)SBXD_KERNEL_MSG_MAX
                     : 4 * reg.cfg.max_output;
    return m < (uint64_t)SBXD_KERNEL_MSG_MIN ? SBXD_KERNEL_MSG_MIN : (int64_t)m;
}

struct bg_proc *ctx_spawn(struct ctx *c, int stdin_file, const char *start_dir, char *cwd_out,
                          size_t cwd_len, struct sbxd_err *err)
{
    struct request_policy pol;
    exec_service_policy(reg.svc, MX_BACKGROUND, &pol);
    struct exec_request req;
    char *spec = spec_for_spawn(c, start_dir);
    if (!spec) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    int rc = exec_request_parse(spec, strlen(spec), &pol, &req, err);
    free(spec);
    if (rc < 0)
        return NULL;
    if (cwd_out)
        snprintf(cwd_out, cwd_len, "%s%s%s", pol.workspace, req.cwd[0] ? "/" : "", req.cwd);
    /* It lives until deleted, idle too long (ctx_sweep), or the daemon stops. */
    req.timeout_ms = SBXD_TIMEOUT_HARD_MAX_MS;
    return exec_service_start_owned(reg.svc, &req, stdin_file, start_dir, err);
}

/* Start c's shell and wait until it is ready: then it is c->shell (c->pid its pid), or -1
 * with err. */
static int start_shell(struct ctx *c, struct sbxd_err *err)
{
    struct bg_proc *p = ctx_spawn(c, 0, NULL, NULL, 0, err);
    if (!p)
        return -1;
    struct ctx_run *r = calloc(1, sizeof(*r)); /* a run of nothing: the ready marker */
    if (r) {
        r->buf = malloc(SBXD_READ_CHUNK);
        r->work = malloc(SBXD_READ_CHUNK + MARKER_MAX);
        r->next_fd = -1;
    }
    struct sbxd_err step = {0}; /* why a step failed, if one did */
    int ok = r && r->buf && r->work && random_hex(r->token, TOKEN_LEN / 2) == 0 &&
             (r->next_fd = chan_make(r->next_name, &step)) >= 0;
    if (ok) {
        char line[sizeof(shell_init) + 2 * TOKEN_LEN + CTX_DIR_PATH_MAX + 64];
        int n = snprintf(line, sizeof(line), "%s__sbxd_next=%s/%s; __sbxd_mark %s 0\n", shell_init,
                         ctx_dir_path(), r->next_name, r->token);
        ok = n > 0 && (size_t)n < sizeof(line);
        uint64_t written;
        bool open_after;
        ok = ok && bg_stdin(p, line, (size_t)n, false, SBXD_CTX_START_MS, -1, &written, &open_after,
                            &step) == BG_STDIN_DONE;
    }
    /* Everything before the marker (bash's words about job control) is dropped. */
    int64_t deadline = time_mono_ns() + (int64_t)SBXD_CTX_START_MS * 1000000;
    while (ok && !(r->sc[1].done && r->sc[2].done)) {
        int64_t now = time_mono_ns();
        size_t got = 0;
        int st = 0;
        uint64_t next = 0;
        enum bg_read_result rr =
            now >= deadline ? BG_READ_END
                            : bg_read(p, r->off, r->buf, SBXD_READ_CHUNK, false,
                                      (int)((deadline - now) / 1000000) + 1, &got, &st, &next);
        if (rr == BG_READ_END)
            ok = 0;
        if (rr == BG_READ_DATA || rr == BG_READ_DROPPED)
            r->off = next;
        if (rr == BG_READ_DATA && (st == 1 || st == 2))
            scan_feed(r, st, r->buf, got);
    }
    int chan_fd = -1;
    if (r) {
        if (ok) {
            chan_seal(r->next_fd, r->next_name); /* opened by the shell: its first channel */
            chan_fd = r->next_fd;
            r->next_fd = -1;
        }
        chan_close(&r->next_fd, r->next_name);
        free(r->buf);
        free(r->work);
    }
    free(r);
    if (!ok) {
        char why[320];
        if (bg_ended(p))
            ctx_ended_reason(p, "shell", why, sizeof(why));
        else if (step.msg[0])
            snprintf(why, sizeof(why), "%s", step.msg);
        else
            snprintf(why, sizeof(why), "it did not answer within %d ms", SBXD_CTX_START_MS);
        struct bg_info in;
        bg_remove(p, &in);
        bg_put(p);
        return sbxd_fail(err, SBXD_E_INTERNAL, 0, "the context's shell did not start: %s", why);
    }
    struct bg_info in;
    bg_info(p, &in);
    pthread_mutex_lock(&c->lock);
    c->shell = p;
    c->pid = in.pid;
    c->dead = false;
    c->dead_reason[0] = '\0';
    int old = c->chan_fd; /* (the channel of the shell this one replaces) */
    c->chan_fd = chan_fd;
    pthread_mutex_unlock(&c->lock);
    if (old >= 0)
        close(old);
    return 0;
}

cJSON *ctx_spec_env(cJSON *o)
{
    cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
    if (!env) {
        env = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "env", env);
    }
    return cJSON_IsObject(env) ? env : NULL;
}

void ctx_env_force(cJSON *env, const char *name, const char *value)
{
    if (!env)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(env, name);
    cJSON_AddStringToObject(env, name, value);
}

/* The shell's part of c's spec: bash (in POSIX mode for "sh"), without prompts. */
static int shell_spec(cJSON *o, bool posix, struct sbxd_err *err)
{
    if (access("/bin/bash", X_OK) != 0)
        return sbxd_fail(err, SBXD_E_INVALID, 0,
                         "a %s context needs /bin/bash, which this sandbox does not have",
                         posix ? "sh" : "bash");
    cJSON *argv = cJSON_CreateArray();
    /* (--posix is a long option: it must come before the others.) */
    const char *args[] = {"/bin/bash",   "--posix", "--noprofile", "--norc",
                          "--noediting", "-i",      "+m"};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++)
        if (posix || i != 1)
            cJSON_AddItemToArray(argv, cJSON_CreateString(args[i]));
    cJSON_AddItemToObject(o, "argv", argv);
    /* No prompt from the very start, and no start-up file even in POSIX mode ($ENV). */
    cJSON *env = ctx_spec_env(o);
    ctx_env_force(env, "PS1", "");
    ctx_env_force(env, "ENV", "");
    return 0;
}

/* c's spec, the request its process starts from (again at each restart): the client's
 * fields (cwd, env, limits) with a shell's or a kernel's command. -1 with err. */
static int make_spec(struct ctx *c, const char *body, size_t len, struct sbxd_err *err)
{
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return sbxd_fail(err, SBXD_E_INVALID, 0, "the body must be a JSON object");
    }
    static const char *const keys[] = {"language", "kernel", "cwd", "env", "limits", NULL};
    for (cJSON *k = o->child; k; k = k->next) {
        bool known = false;
        for (const char *const *n = keys; *n; n++)
            known = known || strcmp(k->string, *n) == 0;
        if (!known || cJSON_GetObjectItemCaseSensitive(o, k->string) != k) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "%s field '%.64s' (known: language, kernel, cwd, env, limits)",
                      known ? "duplicate" : "unknown", k->string);
            cJSON_Delete(o);
            return -1;
        }
    }
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "language");
    const cJSON *kern = cJSON_GetObjectItemCaseSensitive(o, "kernel");
    int rc = 0;
    if ((lang && !cJSON_IsString(lang)) || (kern && !cJSON_IsString(kern)))
        rc = sbxd_fail(err, SBXD_E_INVALID, 0,
                       "'language' and 'kernel' must be strings (GET /kernels lists the kernels)");
    char lbuf[sizeof(c->language)] = "";
    if (cJSON_IsString(lang))
        snprintf(lbuf, sizeof(lbuf), "%s", lang->valuestring);
    if (cJSON_IsString(lang) && strlen(lang->valuestring) >= sizeof(lbuf))
        rc = sbxd_fail(err, SBXD_E_INVALID, 0, "no context for language '%.32s...'",
                       lang->valuestring);
    const char *l = lang ? lbuf : kern ? NULL : "bash";
    bool shell = rc == 0 && !kern && (strcmp(l, "bash") == 0 || strcmp(l, "sh") == 0);
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(o, "cwd");
    snprintf(c->cwd, sizeof(c->cwd), "%s", cJSON_IsString(cw) ? cw->valuestring : "");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "language");
    if (rc == 0 && shell) {
        snprintf(c->language, sizeof(c->language), "%s", l);
        snprintf(c->kernel_name, sizeof(c->kernel_name), "shell");
        rc = shell_spec(o, strcmp(l, "sh") == 0, err);
        c->spec = rc == 0 ? cJSON_PrintUnformatted(o) : NULL;
    } else if (rc == 0) {
        c->kernel = true;
        const char *k = kern ? kern->valuestring : NULL;
        char kname[64];
        snprintf(kname, sizeof(kname), "%s", k ? k : "");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "kernel");
        c->spec = kernel_spec(c, o, l, k ? kname : NULL, err);
        rc = c->spec ? 0 : -1;
    }
    cJSON_Delete(o);
    if (rc == 0 && !c->spec)
        rc = sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return rc;
}

/* Start c's shell or kernel (and wait until it answers). */
static int start_proc(struct ctx *c, struct sbxd_err *err)
{
    return c->kernel ? kernel_start(c, err) : start_shell(c, err);
}

static void ctx_free(struct ctx *c)
{
    if (c->shell)
        bg_put(c->shell);
    if (c->chan_fd >= 0)
        close(c->chan_fd);
    chan_close(&c->spare_fd, c->spare_name);
    ctx_kdir_remove(c); /* (a kernel that never started) */
    free(c->spec);
    pthread_mutex_destroy(&c->admin);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

static void kill_shell(struct ctx *c, const char *why, bool restarting);

/* A context made from a request, not started. NULL with err. */
static struct ctx *ctx_alloc(const char *body, size_t len, struct sbxd_err *err)
{
    struct ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    c->chan_fd = c->spare_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->admin, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (make_spec(c, body, len, err) < 0 || random_hex(c->id, 12) < 0) {
        if (c->spec)
            sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for an id");
        ctx_free(c);
        return NULL;
    }
    return c;
}

/* ---------------------------------------------------------------------------------- */
/* Warm kernels: started before they are asked for                                      */

/* What a warm kernel is made from: the request of the common case. */
static const char warm_request[] = "{\"language\":\"python\"}";

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned want;
    struct ctx *ready[SBXD_WARM_MAX]; /* started, idle, not in the registry */
    unsigned have;
    bool stop, running;
    bool paused;  /* a reset is under way: make none (ctx_reset, ctx_warm_resume) */
    unsigned gen; /* bumped by each reset: a kernel started before it is not handed out */
    pthread_t thread;
} warm = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* A warm kernel started from exactly this spec, taken out of the pool (NULL: none). */
static struct ctx *warm_take(const char *spec)
{
    struct ctx *w = NULL;
    pthread_mutex_lock(&warm.lock);
    for (unsigned i = 0; i < warm.have && !w; i++)
        if (strcmp(warm.ready[i]->spec, spec) == 0) {
            w = warm.ready[i];
            warm.ready[i] = warm.ready[--warm.have];
        }
    if (w)
        pthread_cond_broadcast(&warm.cond); /* make another */
    pthread_mutex_unlock(&warm.lock);
    if (!w)
        return NULL;
    /* It may have died while it waited (a kernel killed from inside the sandbox). */
    pthread_mutex_lock(&w->lock);
    bool dead = w->dead || !w->shell || bg_ended(w->shell);
    pthread_mutex_unlock(&w->lock);
    if (!dead)
        return w;
    kill_shell(w, "a warm kernel that died", false);
    ctx_put(w);
    return NULL;
}

static void *warm_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&warm.lock);
    while (!warm.stop) {
        if (warm.have >= warm.want || warm.paused) {
            pthread_cond_wait(&warm.cond, &warm.lock);
            continue;
        }
        unsigned gen = warm.gen;
        pthread_mutex_unlock(&warm.lock);
        struct sbxd_err err = {0};
        struct ctx *c = ctx_alloc(warm_request, strlen(warm_request), &err);
        int rc = c ? start_proc(c, &err) : -1;
        if (rc < 0) {
            LOG_EVENT("warn", "warm_context_failed", LOG_S("error", err.msg),
                      LOG_I("retry_s", SBXD_WARM_RETRY_S));
            if (c)
                ctx_free(c);
            pthread_mutex_lock(&warm.lock);
            struct timespec until = time_after_ms(CLOCK_REALTIME, SBXD_WARM_RETRY_S * 1000);
            if (!warm.stop)
                pthread_cond_timedwait(&warm.cond, &warm.lock, &until);
            continue;
        }
        c->refs = 1; /* the pool's, then the registry's */
        pthread_mutex_lock(&warm.lock);
        if (warm.stop || warm.gen != gen) {
            /* Shutdown; or a reset began while it started: it may have seen what the reset
             * removed, so it goes, and another is made once the reset is over. */
            bool stop = warm.stop;
            pthread_mutex_unlock(&warm.lock);
            kill_shell(c, stop ? "sbxd is shutting down" : "the sandbox was reset", false);
            ctx_put(c);
            pthread_mutex_lock(&warm.lock);
            if (stop)
                break;
            continue;
        }
        warm.ready[warm.have++] = c;
    }
    pthread_mutex_unlock(&warm.lock);
    return NULL;
}

void ctx_warm_start(unsigned n)
{
    struct kspec ks;
    struct sbxd_err err = {0};
    if (n > SBXD_WARM_MAX)
        n = SBXD_WARM_MAX;
    if (!n || kspec_find(NULL, "python", &ks, &err) < 0)
        return; /* no python kernel here: nothing to keep warm */
    kspec_free(&ks);
    warm.want = n;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
    warm.running = pthread_create(&warm.thread, &attr, warm_main, NULL) == 0;
    pthread_attr_destroy(&attr);
}

unsigned ctx_warm_ready(void)
{
    pthread_mutex_lock(&warm.lock);
    unsigned n = warm.have;
    pthread_mutex_unlock(&warm.lock);
    return n;
}

/* Stop making warm kernels and kill those there are (wait: join the maker first). */
static void warm_stop(bool wait)
{
    pthread_mutex_lock(&warm.lock);
    warm.stop = true;
    pthread_cond_broadcast(&warm.cond);
    struct ctx *v[SBXD_WARM_MAX];
    unsigned n = warm.have;
    memcpy(v, warm.ready, n * sizeof(v[0]));
    warm.have = 0;
    pthread_mutex_unlock(&warm.lock);
    for (unsigned i = 0; i < n; i++) {
        if (wait) {
            kill_shell(v[i], "sbxd is shutting down", false);
            ctx_put(v[i]);
            continue;
        }
        /* (The main thread may be the one that reaps: signal, do not wait.) */
        pthread_mutex_lock(&v[i]->lock);
        struct bg_proc *p = v[i]->shell;
        if (p)
            bg_ref(p);
        pthread_mutex_unlock(&v[i]->lock);
        if (p) {
            struct sbxd_err err = {0};
            bg_signal(p, SIGKILL, &err);
            bg_put(p);
        }
        pthread_mutex_lock(&warm.lock); /* back: ctx_shutdown ends them */
        warm.ready[warm.have++] = v[i];
        pthread_mutex_unlock(&warm.lock);
    }
    if (wait && warm.running) {
        pthread_join(warm.thread, NULL);
        warm.running = false;
    }
}

/* The warm kernels, taken out of the pool and killed (waiting for their ends); the maker
 * makes none until ctx_warm_resume. */
static void warm_discard(void)
{
    pthread_mutex_lock(&warm.lock);
    warm.paused = true;
    warm.gen++;
    struct ctx *v[SBXD_WARM_MAX];
    unsigned n = warm.have;
    memcpy(v, warm.ready, n * sizeof(v[0]));
    warm.have = 0;
    pthread_mutex_unlock(&warm.lock);
    for (unsigned i = 0; i < n; i++) {
        kill_shell(v[i], "the sandbox was reset", false);
        ctx_put(v[i]);
    }
}

void ctx_warm_resume(void)
{
    pthread_mutex_lock(&warm.lock);
    warm.paused = false;
    pthread_cond_broadcast(&warm.cond); /* (also ends a wait to retry a failed start) */
    pthread_mutex_unlock(&warm.lock);
}

unsigned ctx_reset(void)
{
    warm_discard();
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        ctx_delete(v[i]);
        ctx_put(v[i]);
    }
    free(v);
    return (unsigned)n;
}

struct ctx *ctx_create(const char *body, size_t len, struct sbxd_err *err)
{
    struct ctx *c = ctx_alloc(body, len, err);
    if (!c)
        return NULL;
    pthread_mutex_lock(&reg.lock);
    if (reg.alive >= reg.cfg.max_contexts) {
        unsigned max = reg.cfg.max_contexts;
        pthread_mutex_unlock(&reg.lock);
        ctx_free(c);
        sbxd_fail(err, SBXD_E_BUSY, 0,
                  "%u contexts are alive already (--max-contexts); delete one or retry later", max);
        return NULL;
    }
    reg.alive++;
    pthread_mutex_unlock(&reg.lock);
    struct ctx *w = c->kernel ? warm_take(c->spec) : NULL;
    if (w) {
        /* Started from the same spec: it is this request's, under the name it asked for. */
        snprintf(w->language, sizeof(w->language), "%s", c->language);
        ctx_free(c);
        c = w;
    } else {
        c->busy = true; /* while it starts */
        if (start_proc(c, err) < 0) {
            pthread_mutex_lock(&reg.lock);
            reg.alive--;
            pthread_mutex_unlock(&reg.lock);
            ctx_free(c);
            return NULL;
        }
    }
    c->created_real_ns = time_real_ns();
    c->last_used_real_ns = c->created_real_ns;
    c->last_used_mono_ns = time_mono_ns();
    c->busy = false;
    pthread_mutex_lock(&reg.lock);
    c->refs = 2; /* the registry's, the caller's */
    c->listed = true;
    struct ctx **pp = &reg.head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = c;
    pthread_mutex_unlock(&reg.lock);
    return c;
}

struct ctx *ctx_get(const char *id)
{
    struct ctx *found = NULL;
    pthread_mutex_lock(&reg.lock);
    for (struct ctx *c = reg.head; c && !found; c = c->next)
        if (strcmp(c->id, id) == 0) {
            found = c;
            c->refs++;
        }
    pthread_mutex_unlock(&reg.lock);
    return found;
}

void ctx_ref(struct ctx *c)
{
    pthread_mutex_lock(&reg.lock);
    c->refs++;
    pthread_mutex_unlock(&reg.lock);
}

struct ctx *ctx_default(const char *language, struct sbxd_err *err)
{
    if (strlen(language) >= sizeof(reg.defaults[0].language)) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "no context for language '%.32s...'", language);
        return NULL;
    }
    static pthread_mutex_t made = PTHREAD_MUTEX_INITIALIZER; /* one made at a time */
    pthread_mutex_lock(&made);
    size_t k = 0;
    while (k < DEFAULTS_MAX && reg.defaults[k].language[0] &&
           strcmp(reg.defaults[k].language, language) != 0)
        k++;
    struct ctx *c = k < DEFAULTS_MAX && reg.defaults[k].id[0] ? ctx_get(reg.defaults[k].id) : NULL;
    if (!c) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "language", language);
        char *spec = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        c = spec ? ctx_create(spec, strlen(spec), err) : NULL;
        if (!spec)
            sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        free(spec);
        if (c && k < DEFAULTS_MAX) { /* (past DEFAULTS_MAX languages: a new one each time) */
            snprintf(reg.defaults[k].language, sizeof(reg.defaults[k].language), "%s", language);
            snprintf(reg.defaults[k].id, sizeof(reg.defaults[k].id), "%s", c->id);
        }
    }
    pthread_mutex_unlock(&made);
    if (!c)
        return NULL;
    pthread_mutex_lock(&c->lock);
    bool dead = c->dead;
    pthread_mutex_unlock(&c->lock);
    if (dead && ctx_restart(c, err) < 0) {
        ctx_put(c);
        return NULL;
    }
    return c;
}

void ctx_put(struct ctx *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&reg.lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&reg.lock);
    if (last)
        ctx_free(c);
}

size_t ctx_list(struct ctx ***out)
{
    pthread_mutex_lock(&reg.lock);
    size_t n = 0;
    for (struct ctx *c = reg.head; c; c = c->next)
        n++;
    struct ctx **v = calloc(n ? n : 1, sizeof(*v));
    size_t i = 0;
    for (struct ctx *c = reg.head; v && c; c = c->next) {
        c->refs++;
        v[i++] = c;
    }
    pthread_mutex_unlock(&reg.lock);
    *out = v;
    return i;
}

void ctx_info(struct ctx *c, struct ctx_info *out, bool memory)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", c->id);
    snprintf(out->language, sizeof(out->language), "%s", c->language);
    snprintf(out->kernel, sizeof(out->kernel), "%s", c->kernel_name);
    snprintf(out->cwd, sizeof(out->cwd), "%s", c->cwd);
    out->created_real_ns = c->created_real_ns;
    pthread_mutex_lock(&c->lock);
    out->pid = c->pid;
    out->state = c->dead ? CTX_DEAD : c->busy ? CTX_BUSY : CTX_IDLE;
    out->execution_count = c->execution_count;
    out->last_used_real_ns = c->last_used_real_ns;
    snprintf(out->dead_reason, sizeof(out->dead_reason), "%s", c->dead_reason);
    pthread_mutex_unlock(&c->lock);
    out->memory_bytes = memory ? proc_tree_rss(out->pid) : 0;
}

/* Take the shell from c and kill it: an execution in progress then ends as died (in its
 * own time: it holds a reference of its own to the shell) and no longer holds c, which is
 * left busy (a restart follows) or dead. Under c->admin. */
static void kill_shell(struct ctx *c, const char *why, bool restarting)
{
    pthread_mutex_lock(&c->lock);
    struct bg_proc *p = c->shell;
    struct jp_conn *jc = c->jc;
    c->shell = NULL;
    c->jc = NULL;
    c->run = NULL;
    if (restarting) {
        c->busy = true;
    } else {
        c->busy = false;
        ctx_mark_dead(c, why);
    }
    c->pid = 0;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    ctx_proc_release(c, p, jc);
}

void ctx_delete(struct ctx *c)
{
    pthread_mutex_lock(&c->admin);
    pthread_mutex_lock(&reg.lock);
    bool was = c->listed;
    if (c->listed) {
        struct ctx **pp = &reg.head;
        while (*pp != c)
            pp = &(*pp)->next;
        *pp = c->next;
        c->listed = false;
        reg.alive--;
    }
    pthread_mutex_unlock(&reg.lock);
    kill_shell(c, "deleted", false);
    pthread_mutex_unlock(&c->admin);
    if (was)
        ctx_put(c); /* the registry's reference */
}

int ctx_restart(struct ctx *c, struct sbxd_err *err)
{
    pthread_mutex_lock(&c->admin);
    pthread_mutex_lock(&reg.lock);
    bool listed = c->listed;
    pthread_mutex_unlock(&reg.lock);
    if (!listed) {
        pthread_mutex_unlock(&c->admin);
        return sbxd_fail(err, SBXD_E_NOT_FOUND, 0, "the context was deleted");
    }
    kill_shell(c, "restarting", true);
    int rc = start_proc(c, err);
    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        ctx_mark_dead(c, err->msg);
    c->busy = false;
    c->execution_count = 0;
    c->last_used_real_ns = time_real_ns();
    c->last_used_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->admin);
    return rc;
}

bool ctx_interrupt(struct ctx *c)
{
    pthread_mutex_lock(&c->lock);
    struct ctx_run *r = c->run;
    struct bg_proc *shell = r ? r->shell : NULL;
    struct jp_conn *jc = r ? r->jc : NULL;
    char token[TOKEN_LEN + 1];
    int fd = -1;
    if (r) {
        __atomic_store_n(&r->asked, true, __ATOMIC_RELEASE);
        memcpy(token, r->token, sizeof(token));
        /* (The run closes its fifo only once it is no longer c->run.) */
        fd = r->code_fd >= 0 ? fcntl(r->code_fd, F_DUPFD_CLOEXEC, 3) : -1;
        bg_ref(shell); /* (the table's lock after c's: never the other way round) */
        if (jc)
            jp_hold(jc);
    }
    pthread_mutex_unlock(&c->lock);
    if (!shell)
        return false;
    if (c->kernel)
        kernel_interrupt(shell, jc, c->interrupt_message);
    else
        send_interrupt(shell, fd, token);
    if (fd >= 0)
        close(fd);
    jp_close(jc);
    bg_put(shell);
    return true;
}

struct expired {
    size_t n;
    struct ctx *v[];
};

static void *expire_main(void *arg)
{
    struct expired *e = arg;
    for (size_t i = 0; i < e->n; i++) {
        ctx_delete(e->v[i]);
        ctx_put(e->v[i]);
    }
    free(e);
    return NULL;
}

void ctx_sweep(void)
{
    if (!reg.cfg.idle_ms)
        return;
    int64_t old = time_mono_ns() - (int64_t)reg.cfg.idle_ms * 1000000;
    struct ctx **v;
    size_t n = ctx_list(&v);
    struct expired *e = v ? malloc(sizeof(*e) + n * sizeof(e->v[0])) : NULL;
    size_t k = 0;
    for (size_t i = 0; v && i < n; i++) {
        pthread_mutex_lock(&v[i]->lock);
        bool idle = e && !v[i]->busy && !v[i]->expiring && v[i]->last_used_mono_ns < old;
        if (idle)
            v[i]->expiring = true;
        pthread_mutex_unlock(&v[i]->lock);
        if (idle) {
            LOG_EVENT("info", "context_expired", LOG_S("id", v[i]->id),
                      LOG_I("idle_s", (int64_t)(reg.cfg.idle_ms / 1000)));
            e->v[k++] = v[i]; /* its reference goes with it */
        } else {
            ctx_put(v[i]);
        }
    }
    free(v);
    if (!k) {
        free(e);
        return;
    }
    e->n = k;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SBXD_DRIVER_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, expire_main, e) != 0) {
        for (size_t i = 0; i < k; i++) { /* the next sweep tries again */
            pthread_mutex_lock(&e->v[i]->lock);
            e->v[i]->expiring = false;
            pthread_mutex_unlock(&e->v[i]->lock);
            ctx_put(e->v[i]);
        }
        free(e);
    }
    pthread_attr_destroy(&attr);
}

void ctx_kill_all(void)
{
    warm_stop(false);
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        struct ctx *c = v[i];
        pthread_mutex_lock(&c->lock);
        struct bg_proc *p = c->shell;
        if (p)
            bg_ref(p); /* (the table's lock after c's) */
        ctx_mark_dead(c, "sbxd is shutting down");
        pthread_mutex_unlock(&c->lock);
        if (p) {
            struct sbxd_err err = {0};
            bg_signal(p, SIGKILL, &err);
            bg_put(p);
        }
        ctx_put(c);
    }
    free(v);
}

void ctx_shutdown(void)
{
    warm_stop(true);
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        ctx_delete(v[i]);
        ctx_put(v[i]);
    }
    free(v);
    ctx_dir_remove();
}
