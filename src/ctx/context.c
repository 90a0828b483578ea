/* Code contexts: persistent shell sessions (context.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/limits.h"
#include "sbxd/log.h"
#include "sbxd/outbuf.h"
#include "sbxd/timeutil.h"

/* The languages there are contexts for. */
static const char *const ctx_languages[] = {"bash", "sh", NULL};

#define TOKEN_LEN 32 /* hex digits: 128 random bits */
/* The longest marker: "\n\x1e" TOKEN " -2147483648\n". */
#define MARKER_MAX (2 + TOKEN_LEN + 13)

struct ctx {
    struct ctx *next; /* the registry, oldest first (under reg.lock) */
    bool listed;      /* under reg.lock */
    unsigned refs;    /* under reg.lock */
    char id[25];
    char language[8];
    char cwd[256];
    char *spec; /* the request the shell is started from (again at a restart) */
    int64_t created_real_ns;
    pthread_mutex_t admin; /* one restart or delete at a time */
    /* Under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* free again, or dead */
    bool busy;           /* an execution, or a (re)start, holds it */
    bool expiring;       /* ctx_sweep chose it: its delete is under way */
    bool dead;
    char dead_reason[320];
    struct bg_proc *shell; /* with a reference; NULL when dead */
    pid_t pid;
    unsigned execution_count;
    int64_t last_used_real_ns, last_used_mono_ns;
    struct ctx_run *run; /* the execution in progress */
};

static struct {
    pthread_mutex_t lock;
    struct ctx_config cfg;
    struct exec_service *svc;
    struct ctx *head;
    unsigned alive;
    char defaults[3][25]; /* the default context's id of each of ctx_languages ("" none) */
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
/* Markers                                                                              */

/* One output stream of an execution: bytes that may begin a marker are held back until the
 * rest shows whether they do. */
struct scan {
    uint8_t held[MARKER_MAX];
    size_t nheld;
    bool done;  /* the execution's marker was seen on this stream */
    int status; /* stdout's marker: the code's exit status */
};

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

struct ctx_run {
    struct ctx *c;         /* with a reference */
    struct bg_proc *shell; /* the shell it runs in, with a reference of its own */
    uint64_t off;          /* the shell's output is read up to here */
    char token[TOKEN_LEN + 1];
    int64_t start_ns, deadline_ns, grace_ns;
    bool interrupting; /* SIGINT sent, the marker asked for: waiting for it until grace_ns */
    bool timed_out;    /* ... because the timeout passed */
    bool asked;        /* atomic: ctx_interrupt sent SIGINT to this run */
    bool over;         /* the result is final */
    struct scan sc[3]; /* [1] stdout, [2] stderr */
    struct ctx_result res;
    uint8_t buf[SBXD_READ_CHUNK];
    uint8_t work[SBXD_READ_CHUNK + MARKER_MAX];
    size_t emit_len; /* the clean bytes at work */
};

/* The shell is gone (or must go): the context is dead. Under c->lock. */
static void mark_dead(struct ctx *c, const char *why)
{
    if (!c->dead)
        snprintf(c->dead_reason, sizeof(c->dead_reason), "%s", why);
    c->dead = true;
    c->pid = 0;
    pthread_cond_broadcast(&c->cond);
}

/* Why the shell ended, in words. */
static void ended_reason(struct bg_proc *p, char *out, size_t len)
{
    struct bg_info in;
    bg_info(p, &in);
    if (in.res.oom_killed)
        snprintf(out, len, "the shell was killed for running out of memory");
    else if (in.res.timed_out)
        snprintf(out, len, "the shell reached sbxd's longest lifetime for a process");
    else if (in.res.signal)
        snprintf(out, len, "the shell was killed by signal %d", in.res.signal);
    else
        snprintf(out, len, "the shell exited with status %d", in.res.exit_code);
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

/* SIGINT to the run's shell and everything it runs, and the marker asked for (status 130):
 * an interactive shell drops the rest of the line and reads the request next. */
static void send_interrupt(struct bg_proc *shell, const char *token)
{
    struct sbxd_err err = {0};
    bg_signal(shell, SIGINT, &err);
    char line[TOKEN_LEN + 48];
    int n = snprintf(line, sizeof(line), "__sbxd_mark %s 130\n", token);
    uint64_t written;
    bool open_after;
    bg_stdin(shell, line, (size_t)n, false, SBXD_CTX_GRACE_MS, -1, &written, &open_after, &err);
}

static void interrupt_run(struct ctx_run *r)
{
    if (r->interrupting || r->over)
        return;
    r->interrupting = true;
    r->res.interrupted = true;
    r->grace_ns = time_mono_ns() + (int64_t)SBXD_CTX_GRACE_MS * 1000000;
    send_interrupt(r->shell, r->token);
}

/* The run is over: its result is final, and the context free again (if it is still the
 * context's run: a restart or a delete may have let it go). */
static void finish(struct ctx_run *r, enum ctx_status status, const char *why)
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

/* The run's shell is gone (why): the context is dead if it was still its shell, and the run
 * ends as died. */
static void run_died(struct ctx_run *r, const char *why)
{
    struct ctx *c = r->c;
    pthread_mutex_lock(&c->lock);
    if (c->shell == r->shell)
        mark_dead(c, why);
    pthread_mutex_unlock(&c->lock);
    r->res.exit_code = -1;
    finish(r, CTX_DIED, why);
}

static int start_shell(struct ctx *c, struct sbxd_err *err);

/* The shell did not come back from the interrupt: a new one in its place (if it is still the
 * context's). */
static void restart_for(struct ctx_run *r)
{
    struct ctx *c = r->c;
    r->res.restarted = true;
    r->res.exit_code = 130;
    pthread_mutex_lock(&c->lock);
    bool current = c->shell == r->shell && c->run == r;
    if (current) {
        c->shell = NULL;
        c->run = NULL; /* still busy: the new shell starts */
    }
    pthread_mutex_unlock(&c->lock);
    struct bg_info in;
    bg_remove(r->shell, &in); /* kills what the old one ran */
    r->over = true;
    r->res.status = CTX_TIMEOUT;
    r->res.duration_ms = (double)(time_mono_ns() - r->start_ns) / 1e6;
    if (!current)
        return;
    bg_put(r->shell); /* the context's reference */
    struct sbxd_err err = {0};
    int rc = start_shell(c, &err);
    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        mark_dead(c, err.msg[0] ? err.msg : "the shell could not be started again");
    c->busy = false;
    c->last_used_real_ns = time_real_ns();
    c->last_used_mono_ns = time_mono_ns();
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

int ctx_run_next(struct ctx_run *r, int wait_ms, int *stream, const uint8_t **data, size_t *n)
{
    int64_t until = wait_ms < 0 ? 0 : time_mono_ns() + (int64_t)wait_ms * 1000000;
    for (;;) {
        if (r->over)
            return -1;
        if (r->sc[1].done && r->sc[2].done) {
            int st = r->sc[1].status;
            r->res.exit_code = st;
            finish(r, r->timed_out ? CTX_TIMEOUT : st == 0 ? CTX_OK : CTX_ERROR, NULL);
            return -1;
        }
        int64_t now = time_mono_ns();
        if (!r->interrupting && r->deadline_ns && now >= r->deadline_ns) {
            r->timed_out = true;
            interrupt_run(r);
        }
        if (r->interrupting && now >= r->grace_ns) {
            restart_for(r);
            return -1;
        }
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
            bg_read(r->shell, r->off, r->buf, sizeof(r->buf), false, ms, &got, &st, &next);
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
            ended_reason(r->shell, why, sizeof(why));
            run_died(r, why);
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

void ctx_run_end(struct ctx_run *r)
{
    if (!r)
        return;
    if (!r->over) {
        /* Its client left: stop the code, and read on to the end so that the context is
         * free (and in step) for the next execution. */
        interrupt_run(r);
        int st;
        const uint8_t *d;
        size_t n;
        while (ctx_run_next(r, -1, &st, &d, &n) >= 0) {
        }
    }
    bg_put(r->shell);
    ctx_put(r->c);
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
    if (!r) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    if (random_hex(r->token, TOKEN_LEN / 2) < 0) {
        free(r);
        sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for the execution's marker");
        return NULL;
    }
    /* The here-document's delimiter carries the token too: no line of the code can end it. */
    size_t cap = len + 3 * TOKEN_LEN + 128;
    char *text = malloc(cap);
    if (!text) {
        free(r);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    int head = snprintf(text, cap, "IFS= read -r -d '' __sbxd_c <<'SBXD_%s'\n", r->token);
    memcpy(text + head, code, len);
    size_t tl = (size_t)head + len;
    if (len && code[len - 1] != '\n')
        text[tl++] = '\n';
    tl += (size_t)snprintf(text + tl, cap - tl,
                           "SBXD_%s\neval \"$__sbxd_c\" </dev/null; __sbxd_mark %s $?\n", r->token,
                           r->token);

    pthread_mutex_lock(&c->lock);
    struct timespec until = time_after_ms(CLOCK_MONOTONIC, wait_ms < 0 ? 0 : wait_ms);
    while (c->busy && !c->dead)
        if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT)
            break;
    if (c->dead || c->busy || !c->shell) {
        bool dead = c->dead || !c->shell;
        char why[320];
        snprintf(why, sizeof(why), "%s", c->dead_reason[0] ? c->dead_reason : "no shell");
        pthread_mutex_unlock(&c->lock);
        free(text);
        free(r);
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
    r->shell = c->shell;
    pthread_mutex_unlock(&c->lock);
    bg_ref(r->shell); /* (c is busy: its shell stays until this run lets it go) */
    pthread_mutex_lock(&reg.lock);
    c->refs++;
    pthread_mutex_unlock(&reg.lock);
    r->c = c;
    /* What the shell printed between executions (background jobs) is not this one's. */
    struct bg_info in;
    bg_info(r->shell, &in);
    r->off = in.out_end;
    bg_hold(r->shell, r->off);
    r->start_ns = time_mono_ns();
    r->deadline_ns = timeout_ms ? r->start_ns + (int64_t)timeout_ms * 1000000 : 0;
    uint64_t written;
    bool open_after;
    enum bg_stdin_result wr =
        bg_stdin(r->shell, text, tl, false, SBXD_CTX_GRACE_MS, -1, &written, &open_after, err);
    free(text);
    if (wr != BG_STDIN_DONE) {
        /* The shell is gone, or takes nothing: the run ends here. */
        char why[320];
        snprintf(why, sizeof(why), "the shell did not take the code: %s", err->msg);
        memset(err, 0, sizeof(*err));
        if (bg_ended(r->shell))
            ended_reason(r->shell, why, sizeof(why));
        run_died(r, why);
    }
    return r;
}

/* ---------------------------------------------------------------------------------- */
/* Contexts                                                                             */

/* What every shell context runs first: an interactive bash quiet and safe for code (no
 * prompts, no history or its `!` expansion, no mail checks), and the marker function. */
static const char shell_init[] =
    "set +H +o history; unset HISTFILE MAILCHECK PROMPT_COMMAND; PS1=''; PS2=''; PS0=''\n"
    "__sbxd_mark() { local __sbxd_s=$2; unset __sbxd_c; printf '\\n\\036%s %d\\n' \"$1\" "
    "\"$__sbxd_s\"; printf '\\n\\036%s\\n' \"$1\" >&2; return \"$__sbxd_s\"; }\n";

/* Start c's shell and wait until it is ready: then it is c->shell (c->pid its pid), or -1
 * with err. */
static int start_shell(struct ctx *c, struct sbxd_err *err)
{
    struct request_policy pol;
    exec_service_policy(reg.svc, MX_BACKGROUND, &pol);
    struct exec_request req;
    if (exec_request_parse(c->spec, strlen(c->spec), &pol, &req, err) < 0)
        return -1;
    /* It lives until deleted, idle too long (ctx_sweep), or the daemon stops. */
    req.timeout_ms = SBXD_TIMEOUT_HARD_MAX_MS;
    struct bg_proc *p = exec_service_start_owned(reg.svc, &req, err);
    if (!p)
        return -1;
    struct ctx_run *r = calloc(1, sizeof(*r)); /* a run of nothing: the ready marker */
    int ok = r && random_hex(r->token, TOKEN_LEN / 2) == 0;
    if (ok) {
        char line[sizeof(shell_init) + TOKEN_LEN + 32];
        int n = snprintf(line, sizeof(line), "%s__sbxd_mark %s 0\n", shell_init, r->token);
        uint64_t written;
        bool open_after;
        ok = bg_stdin(p, line, (size_t)n, false, SBXD_CTX_START_MS, -1, &written, &open_after,
                      err) == BG_STDIN_DONE;
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
                            : bg_read(p, r->off, r->buf, sizeof(r->buf), false,
                                      (int)((deadline - now) / 1000000) + 1, &got, &st, &next);
        if (rr == BG_READ_END)
            ok = 0;
        if (rr == BG_READ_DATA || rr == BG_READ_DROPPED)
            r->off = next;
        if (rr == BG_READ_DATA && (st == 1 || st == 2))
            scan_feed(r, st, r->buf, got);
    }
    free(r);
    if (!ok) {
        char why[320];
        if (bg_ended(p))
            ended_reason(p, why, sizeof(why));
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
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* The request the shell starts from: the client's fields (cwd, env, limits) and bash. NULL
 * with err. */
static char *shell_spec(const char *body, size_t len, char *language, size_t langlen, char *cwd,
                        size_t cwdlen, struct sbxd_err *err)
{
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        sbxd_fail(err, SBXD_E_INVALID, 0, "the body must be a JSON object");
        return NULL;
    }
    static const char *const keys[] = {"language", "cwd", "env", "limits", NULL};
    for (cJSON *k = o->child; k; k = k->next) {
        bool known = false;
        for (const char *const *n = keys; *n; n++)
            known = known || strcmp(k->string, *n) == 0;
        if (!known || cJSON_GetObjectItemCaseSensitive(o, k->string) != k) {
            sbxd_fail(err, SBXD_E_INVALID, 0,
                      "%s field '%.64s' (known: language, cwd, env, limits)",
                      known ? "duplicate" : "unknown", k->string);
            cJSON_Delete(o);
            return NULL;
        }
    }
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "language");
    const char *l = cJSON_IsString(lang) ? lang->valuestring : lang ? NULL : "bash";
    bool posix = l && strcmp(l, "sh") == 0;
    if (!l || (strcmp(l, "bash") != 0 && !posix)) {
        sbxd_fail(err, SBXD_E_INVALID, 0,
                  "'language' must be \"bash\" or \"sh\" (a persistent shell session)%s",
                  l ? "; Jupyter kernels are not available in this sbxd yet" : "");
        cJSON_Delete(o);
        return NULL;
    }
    if (access("/bin/bash", X_OK) != 0) {
        sbxd_fail(err, SBXD_E_INVALID, 0,
                  "a %s context needs /bin/bash, which this sandbox does not have", l);
        cJSON_Delete(o);
        return NULL;
    }
    snprintf(language, langlen, "%s", l);
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(o, "cwd");
    snprintf(cwd, cwdlen, "%s", cJSON_IsString(cw) ? cw->valuestring : "");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "language");
    cJSON *argv = cJSON_CreateArray();
    const char *args[] = {"/bin/bash", "--noprofile",           "--norc", "--noediting", "-i",
                          "+m",        posix ? "--posix" : NULL};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]) && args[i]; i++)
        cJSON_AddItemToArray(argv, cJSON_CreateString(args[i]));
    /* (--posix is a long option: it must come before the others.) */
    if (posix) {
        cJSON_Delete(argv);
        argv = cJSON_CreateArray();
        const char *pa[] = {"/bin/bash",   "--posix", "--noprofile", "--norc",
                            "--noediting", "-i",      "+m"};
        for (size_t i = 0; i < sizeof(pa) / sizeof(pa[0]); i++)
            cJSON_AddItemToArray(argv, cJSON_CreateString(pa[i]));
    }
    cJSON_AddItemToObject(o, "argv", argv);
    /* No prompt from the very start, and no start-up file even in POSIX mode ($ENV). */
    cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
    if (!env) {
        env = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "env", env);
    }
    if (cJSON_IsObject(env)) {
        cJSON_DeleteItemFromObjectCaseSensitive(env, "PS1");
        cJSON_DeleteItemFromObjectCaseSensitive(env, "ENV");
        cJSON_AddStringToObject(env, "PS1", "");
        cJSON_AddStringToObject(env, "ENV", "");
    }
    char *spec = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!spec)
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return spec;
}

static void ctx_free(struct ctx *c)
{
    if (c->shell)
        bg_put(c->shell);
    free(c->spec);
    pthread_mutex_destroy(&c->admin);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

struct ctx *ctx_create(const char *body, size_t len, struct sbxd_err *err)
{
    struct ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->admin, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    c->spec = shell_spec(body, len, c->language, sizeof(c->language), c->cwd, sizeof(c->cwd), err);
    if (!c->spec || random_hex(c->id, 12) < 0) {
        if (c->spec)
            sbxd_fail(err, SBXD_E_INTERNAL, errno, "no random bytes for an id");
        ctx_free(c);
        return NULL;
    }
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
    c->busy = true; /* while it starts */
    if (start_shell(c, err) < 0) {
        pthread_mutex_lock(&reg.lock);
        reg.alive--;
        pthread_mutex_unlock(&reg.lock);
        ctx_free(c);
        return NULL;
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
    size_t k = 0;
    while (ctx_languages[k] && strcmp(ctx_languages[k], language) != 0)
        k++;
    if (!ctx_languages[k]) {
        sbxd_fail(err, SBXD_E_INVALID, 0,
                  "'language' must be \"bash\" or \"sh\" (a persistent shell session); "
                  "Jupyter kernels are not available in this sbxd yet");
        return NULL;
    }
    static pthread_mutex_t made = PTHREAD_MUTEX_INITIALIZER; /* one made at a time */
    pthread_mutex_lock(&made);
    struct ctx *c = reg.defaults[k][0] ? ctx_get(reg.defaults[k]) : NULL;
    if (!c) {
        char spec[64];
        snprintf(spec, sizeof(spec), "{\"language\":\"%s\"}", language);
        c = ctx_create(spec, strlen(spec), err);
        if (c)
            snprintf(reg.defaults[k], sizeof(reg.defaults[k]), "%s", c->id);
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

void ctx_info(struct ctx *c, struct ctx_info *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", c->id);
    snprintf(out->language, sizeof(out->language), "%s", c->language);
    snprintf(out->cwd, sizeof(out->cwd), "%s", c->cwd);
    out->created_real_ns = c->created_real_ns;
    pthread_mutex_lock(&c->lock);
    out->pid = c->pid;
    out->state = c->dead ? CTX_DEAD : c->busy ? CTX_BUSY : CTX_IDLE;
    out->execution_count = c->execution_count;
    out->last_used_real_ns = c->last_used_real_ns;
    snprintf(out->dead_reason, sizeof(out->dead_reason), "%s", c->dead_reason);
    pthread_mutex_unlock(&c->lock);
}

/* Take the shell from c and kill it: an execution in progress then ends as died (in its
 * own time: it holds a reference of its own to the shell) and no longer holds c, which is
 * left busy (a restart follows) or dead. Under c->admin. */
static void kill_shell(struct ctx *c, const char *why, bool restarting)
{
    pthread_mutex_lock(&c->lock);
    struct bg_proc *p = c->shell;
    c->shell = NULL;
    c->run = NULL;
    if (restarting) {
        c->busy = true;
    } else {
        c->busy = false;
        mark_dead(c, why);
    }
    c->pid = 0;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (p) {
        struct bg_info in;
        bg_remove(p, &in);
        bg_put(p);
    }
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
    int rc = start_shell(c, err);
    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        mark_dead(c, err->msg);
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
    char token[TOKEN_LEN + 1];
    if (r) {
        __atomic_store_n(&r->asked, true, __ATOMIC_RELEASE);
        memcpy(token, r->token, sizeof(token));
        bg_ref(shell); /* (the table's lock after c's: never the other way round) */
    }
    pthread_mutex_unlock(&c->lock);
    if (!shell)
        return false;
    send_interrupt(shell, token);
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
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        struct ctx *c = v[i];
        pthread_mutex_lock(&c->lock);
        struct bg_proc *p = c->shell;
        if (p)
            bg_ref(p); /* (the table's lock after c's) */
        mark_dead(c, "sbxd is shutting down");
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
    struct ctx **v;
    size_t n = ctx_list(&v);
    for (size_t i = 0; v && i < n; i++) {
        ctx_delete(v[i]);
        ctx_put(v[i]);
    }
    free(v);
}
