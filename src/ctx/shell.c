/* Code contexts of the shell kind: persistent bash sessions (context.h), their channels and
 * markers. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/limits.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

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
    if (ctx_random_hex(n, TOKEN_LEN / 2) < 0)
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
static void shell_interrupt(const struct ctx_intr *in)
{
    struct sbxd_err err = {0};
    bg_signal(in->proc, SIGINT, &err);
    char line[TOKEN_LEN + 32];
    int n = snprintf(line, sizeof(line), "__sbxd_resume %s\n", in->token);
    if (in->fd >= 0 && write(in->fd, line, (size_t)n) != n) {
        /* (A fifo the shell never read: it does not come back, and is restarted.) */
    }
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

/* What a shell's run holds: its fifos (the next one unlinked if still named). */
static void shell_run_free(struct ctx_run *r)
{
    if (r->code_fd >= 0)
        close(r->code_fd);
    r->code_fd = -1;
    chan_close(&r->next_fd, r->next_name);
    free(r->text);
    r->text = NULL;
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

/* Start c's shell and wait until it is ready: then it is c->shell (c->pid its pid), or -1
 * with err. */
static int start_shell(struct ctx *c, struct sbxd_err *err)
{
    struct bg_proc *p = ctx_spawn(c, 0, NULL, NULL, NULL, 0, err);
    if (!p)
        return -1;
    struct ctx_run *r = calloc(1, sizeof(*r)); /* a run of nothing: the ready marker */
    if (r) {
        r->buf = malloc(SBXD_READ_CHUNK);
        r->work = malloc(SBXD_READ_CHUNK + MARKER_MAX);
        r->next_fd = -1;
    }
    struct sbxd_err step = {0}; /* why a step failed, if one did */
    int ok = r && r->buf && r->work && ctx_random_hex(r->token, TOKEN_LEN / 2) == 0 &&
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
            snprintf(why, sizeof(why), "%.*s", (int)sizeof(why) - 1, step.msg);
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

/* The shell's part of c's spec: bash (in POSIX mode for "sh"), without prompts. */
static int shell_spec(struct ctx *c, cJSON *o, const char *language, const char *kernel,
                      struct sbxd_err *err)
{
    (void)kernel;
    bool posix = strcmp(language, "sh") == 0;
    if (access("/bin/bash", X_OK) != 0)
        return sbxd_fail(err, SBXD_E_INVALID, 0,
                         "a %s context needs /bin/bash, which this sandbox does not have",
                         posix ? "sh" : "bash");
    snprintf(c->language, sizeof(c->language), "%s", language);
    snprintf(c->kernel_name, sizeof(c->kernel_name), "shell");
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

/* A shell session is what "bash" (the default: no language, no kernel) and "sh" ask for. */
static bool shell_claims(const char *language, const char *kernel)
{
    return !kernel && (!language || strcmp(language, "bash") == 0 || strcmp(language, "sh") == 0);
}

/* The run's buffers, its token, the fifo for the next run's code (the one made ahead while
 * the last run's code ran, or a new one) and the text the shell is given. */
static int shell_run_prepare(struct ctx *c, struct ctx_run *r, const char *code, size_t len,
                             struct sbxd_err *err)
{
    r->buf = malloc(SBXD_READ_CHUNK);
    r->work = malloc(SBXD_READ_CHUNK + MARKER_MAX);
    if (ctx_random_hex(r->token, TOKEN_LEN / 2) < 0)
        return sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for the execution's marker");
    pthread_mutex_lock(&c->lock);
    r->next_fd = c->spare_fd;
    memcpy(r->next_name, c->spare_name, sizeof(r->next_name));
    c->spare_fd = -1;
    c->spare_name[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    if (r->next_fd < 0 && (r->next_fd = chan_make(r->next_name, err)) < 0)
        return -1;
    r->text = r->buf && r->work ? shell_text(r, code, len, &r->text_len) : NULL;
    if (!r->text)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

/* What the shell printed between executions (background jobs) is not this run's; its text
 * goes to its fifo; and a fifo is made ahead for the run after the next while the code
 * runs. */
static int shell_run_begin(struct ctx_run *r, const char *code, size_t len, struct sbxd_err *err)
{
    (void)code;
    (void)len;
    struct bg_info in;
    bg_info(r->shell, &in);
    r->off = in.out_end;
    bg_hold(r->shell, r->off);
    int rc = chan_write(r->code_fd, r->shell, r->text, r->text_len, err);
    free(r->text);
    r->text = NULL;
    make_spare(r->c);
    return rc;
}

/* The shell ended: what was held back as a possible marker's start is output after all
 * (1, an event), else the run ended as died (-1). */
static int shell_ended(struct ctx_run *r, int *stream, const uint8_t **data, size_t *n)
{
    for (int i = 1; i <= 2; i++)
        if (r->sc[i].nheld && !r->sc[i].done) {
            memcpy(r->work, r->sc[i].held, r->sc[i].nheld);
            r->emit_len = r->sc[i].nheld;
            r->sc[i].nheld = 0;
            *(i == 1 ? &r->res.stdout_bytes : &r->res.stderr_bytes) += r->emit_len;
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

/* The run's output read and scanned up to the marker (ms: the wait for some, -1: none). 1:
 * an event; 2: bytes that make none (read on); 0: nothing within ms; -1: the run is over. */
static int shell_read(struct ctx_run *r, int ms, int *stream, const uint8_t **data, size_t *n)
{
    size_t got = 0;
    int st = 0;
    uint64_t next = 0;
    enum bg_read_result rr =
        bg_read(r->shell, r->off, r->buf, SBXD_READ_CHUNK, false, ms, &got, &st, &next);
    if (rr == BG_READ_DROPPED) {
        r->off = next; /* (not while held: output from before the run) */
        return 2;
    }
    if (rr == BG_READ_END)
        return shell_ended(r, stream, data, n);
    if (rr != BG_READ_DATA)
        return 0;
    r->off = next;
    bg_hold(r->shell, r->off);
    if (st != 1 && st != 2)
        return 2;
    scan_feed(r, st, r->buf, got);
    if (!r->emit_len)
        return 2;
    *(st == 1 ? &r->res.stdout_bytes : &r->res.stderr_bytes) += r->emit_len;
    *stream = st;
    *data = r->work;
    *n = r->emit_len;
    return 1;
}

static int shell_run_next(struct ctx_run *r, int wait_ms, int *stream, const uint8_t **data,
                          size_t *n)
{
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
        int k = shell_read(r, ms, stream, data, n);
        if (k == 2)
            continue;
        if (k != 0)
            return k;
        if (until && time_mono_ns() >= until)
            return 0;
    }
}

/* The channels a shell context holds. */
static void shell_release(struct ctx *c)
{
    if (c->chan_fd >= 0)
        close(c->chan_fd);
    c->chan_fd = -1;
    chan_close(&c->spare_fd, c->spare_name);
}

const struct ctx_kind_ops ctx_shell_kind = {
    .what = "shell",
    .rich_results = false,
    .claims = shell_claims,
    .spec = shell_spec,
    .start = start_shell,
    .run_prepare = shell_run_prepare,
    .run_begin = shell_run_begin,
    .run_next = shell_run_next,
    .interrupt = shell_interrupt,
    .run_free = shell_run_free,
    .release = shell_release,
};
