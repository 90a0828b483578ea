/* Code contexts that are Jupyter kernels (context.h, jupyter.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/kernelspec.h"
#include "sbxd/log.h"
#include "sbxd/timeutil.h"
#include "context_internal.h"

/* How often a run looks whether its kernel still lives while it waits for messages. */
#define ALIVE_CHECK_MS 100

/* s with every `from` replaced by `to`: a string to free (NULL when out of memory). */
static char *replace_all(const char *s, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + fl, from))
        n++;
    char *out = malloc(strlen(s) + n * tl + 1);
    if (!out)
        return NULL;
    char *w = out;
    for (const char *p; (p = strstr(s, from));) {
        memcpy(w, s, (size_t)(p - s));
        w += p - s;
        memcpy(w, to, tl);
        w += tl;
        s = p + fl;
    }
    strcpy(w, s);
    return out;
}

/* Whether a program is a Python interpreter (python, python3, python3.11, by any path). */
static bool is_python(const char *prog)
{
    const char *b = strrchr(prog, '/');
    return strncmp(b ? b + 1 : prog, "python", 6) == 0;
}

/* Whether a kernelspec's argv starts IPython's kernel (ipykernel_launcher, or python -m
 * ipykernel): it takes IPython's configuration on its command line. */
static bool is_ipykernel(const cJSON *argv)
{
    for (const cJSON *a = argv ? argv->child : NULL; a; a = a->next)
        if (cJSON_IsString(a) && (strcmp(a->valuestring, "ipykernel_launcher") == 0 ||
                                  strcmp(a->valuestring, "ipykernel") == 0))
            return true;
    return false;
}

char *kernel_spec(struct ctx *c, cJSON *o, const char *language, const char *kernel,
                  struct sbxd_err *err)
{
    struct kspec ks;
    if (kspec_find(kernel, language, &ks, err) < 0)
        return NULL;
    snprintf(c->language, sizeof(c->language), "%s", language ? language : ks.language);
    snprintf(c->kernel_name, sizeof(c->kernel_name), "%s", ks.name);
    c->interrupt_message = ks.interrupt_message;
    /* The kernel reads its connection file from its stdin (context.h). */
    cJSON *argv = cJSON_CreateArray();
    bool ok = argv != NULL;
    c->ipykernel = is_ipykernel(ks.argv);
    for (const cJSON *a = ks.argv->child; ok && a; a = a->next) {
        char *x = replace_all(a->valuestring, "{connection_file}", "/proc/self/fd/0");
        char *y = x ? replace_all(x, "{resource_dir}", ks.dir) : NULL;
        ok = y && cJSON_AddItemToArray(argv, cJSON_CreateString(y));
        free(x);
        free(y);
        /* IPython's kernel starts without the user site (-s): HOME is the workspace, and a
         * .pth file any command can plant in its site-packages would run in the kernel as it
         * starts, its key on its stdin. The set-up after the start puts the directory back on
         * the path (its packages import; its .pth files are not run). */
        if (ok && a == ks.argv->child && c->ipykernel && is_python(a->valuestring))
            ok = cJSON_AddItemToArray(argv, cJSON_CreateString("-s"));
    }
    /* IPython's kernel keeps no history file: a context's history is its own session's (In,
     * Out, %history work from memory), and writing the file cost each execution a database
     * transaction on disk (its IPython directory is beneath /tmp, not the workspace). */
    if (ok && is_ipykernel(ks.argv))
        ok = cJSON_AddItemToArray(argv, cJSON_CreateString("--HistoryManager.enabled=False"));
    cJSON_AddItemToObject(o, "argv", argv);
    /* The kernelspec's environment under the client's; the kernel may write its connection
     * file back (ipykernel does) though sbxd's memfd is not 0600 (jupyter_core checks). */
    cJSON *env = ctx_spec_env(o);
    for (const cJSON *e = env && ks.env ? ks.env->child : NULL; e; e = e->next)
        if (!cJSON_GetObjectItemCaseSensitive(env, e->string))
            cJSON_AddStringToObject(env, e->string, e->valuestring);
    if (env && !cJSON_GetObjectItemCaseSensitive(env, "PYDEVD_DISABLE_FILE_VALIDATION"))
        cJSON_AddStringToObject(env, "PYDEVD_DISABLE_FILE_VALIDATION", "1");
    ctx_env_force(env, "JUPYTER_ALLOW_INSECURE_WRITES", "1");
    kspec_free(&ks);
    char *spec = ok ? cJSON_PrintUnformatted(o) : NULL;
    if (!spec)
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    return spec;
}

/* The last bytes the kernel wrote to its stderr (its own words on why it did not start),
 * on one line. */
static void stderr_tail(struct bg_proc *p, char *out, size_t len)
{
    out[0] = '\0';
    struct bg_info in;
    bg_info(p, &in);
    char buf[4096];
    size_t have = 0;
    uint64_t off = in.out_start;
    for (;;) {
        size_t n = 0;
        int st = 0;
        uint64_t next = 0;
        char chunk[2048];
        enum bg_read_result rr = bg_read(p, off, chunk, sizeof(chunk), false, 0, &n, &st, &next);
        if (rr == BG_READ_DROPPED) {
            off = next;
            continue;
        }
        if (rr != BG_READ_DATA)
            break;
        off = next;
        if (st != 2)
            continue;
        if (have + n > sizeof(buf)) { /* (n <= sizeof(chunk) < sizeof(buf)) */
            memmove(buf, buf + have + n - sizeof(buf), sizeof(buf) - n);
            have = sizeof(buf) - n;
        }
        memcpy(buf + have, chunk, n);
        have += n;
    }
    while (have && (buf[have - 1] == '\n' || buf[have - 1] == ' '))
        have--;
    size_t from = have > len - 1 ? have - (len - 1) : 0;
    size_t k = 0;
    for (size_t i = from; i < have && k + 1 < len; i++)
        out[k++] = buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t' ? ' ' : buf[i];
    out[k] = '\0';
}

/* Wait for the kernel to answer a kernel_info_request on shell, and for iopub to carry its
 * messages (a subscription takes a moment to reach the kernel: until then it publishes to
 * nobody). 0, or -1 with why. */
static int handshake(struct bg_proc *p, struct jp_conn *jc, char *why, size_t len)
{
    int64_t deadline = time_mono_ns() + (int64_t)SBXD_KERNEL_START_MS * 1000000;
    int64_t next_send = 0;
    bool replied = false, heard = false;
    while (!(replied && heard)) {
        int64_t now = time_mono_ns();
        if (now >= deadline) {
            snprintf(why, len, "it did not answer within %d ms", SBXD_KERNEL_START_MS);
            return -1;
        }
        if (bg_ended(p)) {
            char tail[200];
            ctx_ended_reason(p, "kernel", why, len);
            stderr_tail(p, tail, sizeof(tail));
            if (tail[0]) {
                size_t l = strlen(why);
                snprintf(why + l, len - l, " (its stderr: %s)", tail);
            }
            return -1;
        }
        if (now >= next_send) {
            char id[48];
            struct sbxd_err err = {0};
            jp_send(jc, JP_SHELL, "kernel_info_request", NULL, id, &err);
            next_send = now + (replied ? 50 : 500) * 1000000LL;
        }
        struct jp_msg m;
        if (jp_recv(jc, ALIVE_CHECK_MS / 2, &m) == 1) {
            if (m.channel == JP_SHELL && strcmp(m.type, "kernel_info_reply") == 0)
                replied = true;
            if (m.channel == JP_IOPUB)
                heard = true;
            jp_msg_free(&m);
        }
    }
    return 0;
}

/* Run code silently (no output, no history) in the kernel p and wait for its reply: set-up.
 * 0 once it ran without error, else -1 with why (at once if the kernel ends meanwhile, as
 * when sbxd stops and kills it: never the whole wait for an answer that cannot come). */
static int run_silent(struct bg_proc *p, struct jp_conn *jc, const char *code, char *why,
                      size_t len)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "code", code);
    cJSON_AddBoolToObject(o, "silent", true);
    cJSON_AddBoolToObject(o, "store_history", false);
    cJSON_AddBoolToObject(o, "allow_stdin", false);
    char *content = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char id[48];
    struct sbxd_err err = {0};
    if (!content || jp_send(jc, JP_SHELL, "execute_request", content, id, &err) < 0) {
        free(content);
        snprintf(why, len, "it took no request: %s", err.msg[0] ? err.msg : "out of memory");
        return -1;
    }
    free(content);
    snprintf(why, len, "it did not answer within %d ms", SBXD_CTX_START_MS);
    int rc = -1;
    int64_t deadline = time_mono_ns() + (int64_t)SBXD_CTX_START_MS * 1000000;
    for (bool done = false; !done && time_mono_ns() < deadline;) {
        if (bg_ended(p)) {
            ctx_ended_reason(p, "kernel", why, len);
            return -1;
        }
        struct jp_msg m;
        if (jp_recv(jc, ALIVE_CHECK_MS, &m) != 1)
            continue;
        done = m.channel == JP_SHELL && strcmp(m.type, "execute_reply") == 0 &&
               strcmp(m.parent_id, id) == 0;
        if (done) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(m.content, "status");
            const cJSON *en = cJSON_GetObjectItemCaseSensitive(m.content, "ename");
            const cJSON *ev = cJSON_GetObjectItemCaseSensitive(m.content, "evalue");
            rc = cJSON_IsString(st) && strcmp(st->valuestring, "ok") == 0 ? 0 : -1;
            snprintf(why, len, "%s: %s", cJSON_IsString(en) ? en->valuestring : "error",
                     cJSON_IsString(ev) ? ev->valuestring : "");
        }
        jp_msg_free(&m);
    }
    return rc;
}

/*
 * IPython's kernel once it answers: undumpable, which closes its memory, environment and
 * descriptors (the key) to other processes of its user, as /proc's are to non-root; then into
 * the working directory the client asked for, which takes the place of the kernel's own
 * directory on its path (as Jupyter starts a kernel in the notebook's directory: its modules
 * import), and the user site back on the path (-s: kernel_spec), its .pth files not run. Run in
 * a namespace of its own: nothing is left in the user's.
 */
static char *setup_code(const char *dir, const char *cwd)
{
    static const char body[] =
        "import ctypes, os, site, sys\n"
        "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
        "os.chdir(W)\n"
        "sys.path[:] = [W if p == D else p for p in sys.path]\n"
        "if W not in sys.path:\n"
        "    sys.path.insert(0, W)\n"
        "u = site.getusersitepackages()\n"
        "if not os.environ.get('PYTHONNOUSERSITE') and os.path.isdir(u) and u not in sys.path:\n"
        "    i = [k for k, p in enumerate(sys.path) if p.endswith(('site-packages', "
        "'dist-packages'))]\n"
        "    sys.path.insert(i[0] if i else len(sys.path), u)\n"
        "    site.ENABLE_USER_SITE = True\n";
    cJSON *b = cJSON_CreateString(body), *d = cJSON_CreateString(dir), *w = cJSON_CreateString(cwd);
    char *bs = b ? cJSON_PrintUnformatted(b) : NULL;
    char *ds = d ? cJSON_PrintUnformatted(d) : NULL;
    char *ws = w ? cJSON_PrintUnformatted(w) : NULL;
    cJSON_Delete(b);
    cJSON_Delete(d);
    cJSON_Delete(w);
    char *code = NULL;
    /* (A JSON string is a Python string literal.) */
    if (bs && ds && ws && asprintf(&code, "exec(%s, {'D': %s, 'W': %s})", bs, ds, ws) < 0)
        code = NULL;
    free(bs);
    free(ds);
    free(ws);
    return code;
}

int kernel_start(struct ctx *c, struct sbxd_err *err)
{
    char key[JP_KEY_LEN + 1], name[KDIR_NAME_LEN + 1], dir[PATH_MAX];
    if (jp_new_key(key, err) < 0)
        return -1;
    if (kdir_make(name, dir, sizeof(dir), err) < 0) {
        memset(key, 0, sizeof(key));
        return -1;
    }
    pthread_mutex_lock(&c->lock);
    snprintf(c->kdir, sizeof(c->kdir), "%s", name);
    pthread_mutex_unlock(&c->lock);
    char *conn = jp_connection_file(key, c->kernel_name);
    int mfd = conn ? memfd_create("sbxd-kernel-connection", MFD_CLOEXEC) : -1;
    size_t cl = conn ? strlen(conn) : 0;
    /* Readable and writable through /proc/self/fd/0 by the kernel's user, whoever that is:
     * the descriptor, which only the kernel has, is what guards it. */
    bool ok = mfd >= 0 && write(mfd, conn, cl) == (ssize_t)cl && fchmod(mfd, 0666) == 0;
    if (conn)
        memset(conn, 0, cl);
    free(conn);
    if (!ok) {
        int e = errno;
        if (mfd >= 0)
            close(mfd);
        memset(key, 0, sizeof(key));
        ctx_kdir_remove(c);
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot write a kernel's connection file");
    }
    /* It starts in its own directory, where it binds its sockets (jupyter.h). */
    char cwd[PATH_MAX];
    struct bg_proc *p = ctx_spawn(c, mfd, dir, cwd, sizeof(cwd), err);
    struct jp_conn *jc = p ? jp_open(dir, key, ctx_kernel_msg_max(), err) : NULL;
    memset(key, 0, sizeof(key));
    char why[400] = "";
    int rc = jc ? handshake(p, jc, why, sizeof(why)) : -1;
    /* The key is no longer in any file. */
    if (ftruncate(mfd, 0) < 0 && rc == 0) {
        snprintf(why, sizeof(why), "its connection file could not be emptied: %s", strerror(errno));
        rc = -1;
    }
    close(mfd);
    char *setup = rc == 0 && c->ipykernel ? setup_code(dir, cwd) : NULL;
    char swhy[300] = "out of memory";
    if (rc == 0 && c->ipykernel && (!setup || run_silent(p, jc, setup, swhy, sizeof(swhy)) < 0)) {
        snprintf(why, sizeof(why), "its set-up failed (%s)", swhy);
        rc = -1;
    }
    free(setup);
    if (rc < 0) {
        ctx_proc_release(c, p, jc);
        if (why[0])
            sbxd_fail(err, SBXD_E_INTERNAL, 0, "the %s kernel did not start: %s", c->kernel_name,
                      why);
        return -1;
    }
    struct bg_info in;
    bg_info(p, &in);
    pthread_mutex_lock(&c->lock);
    c->shell = p;
    c->jc = jc;
    c->pid = in.pid;
    c->dead = false;
    c->dead_reason[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int kernel_run_begin(struct ctx_run *r, const char *code, size_t len, struct sbxd_err *err)
{
    char *src = malloc(len + 1);
    cJSON *o = cJSON_CreateObject();
    if (src) {
        memcpy(src, code, len);
        src[len] = '\0';
        cJSON_AddStringToObject(o, "code", src);
    }
    free(src);
    cJSON_AddBoolToObject(o, "silent", false);
    cJSON_AddBoolToObject(o, "store_history", true);
    cJSON_AddItemToObject(o, "user_expressions", cJSON_CreateObject());
    /* No stdin: input() fails at once (StdinNotImplementedError) rather than waiting. */
    cJSON_AddBoolToObject(o, "allow_stdin", false);
    /* Executions in a context run one at a time, so there is never a queue to abort on an
     * error; with stop_on_error the kernel aborted a request that reached it before it had
     * finished handling the last one's error, and the code after an error sometimes did not
     * run at all ("Aborted"). */
    cJSON_AddBoolToObject(o, "stop_on_error", false);
    char *content = src ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!content)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    int rc = jp_send(r->jc, JP_SHELL, "execute_request", content, r->msg_id, err);
    free(content);
    return rc;
}

void kernel_interrupt(struct bg_proc *p, struct jp_conn *jc, bool message)
{
    struct sbxd_err err = {0};
    char id[48];
    if (message && jc)
        jp_send(jc, JP_CONTROL, "interrupt_request", NULL, id, &err);
    else
        bg_signal(p, SIGINT, &err);
}

/* Terminal colours and other escape sequences out of s (a traceback's line), in place. */
static void strip_escapes(char *s)
{
    char *w = s;
    for (const char *p = s; *p;) {
        if (*p != 0x1b) {
            *w++ = *p++;
            continue;
        }
        p++;
        if (*p == '[') { /* CSI: parameters and intermediates, then one final byte */
            p++;
            while (*p && !(*p >= 0x40 && *p <= 0x7e))
                p++;
        }
        if (*p)
            p++;
    }
    *w = '\0';
}

/* The error object of docs/api.md from an error message or an execute_reply. */
static char *error_json(const cJSON *content)
{
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(content, "ename");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(content, "evalue");
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(content, "traceback");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", cJSON_IsString(en) ? en->valuestring : "Error");
    cJSON_AddStringToObject(o, "value", cJSON_IsString(ev) ? ev->valuestring : "");
    cJSON *lines = cJSON_AddArrayToObject(o, "traceback");
    for (const cJSON *l = cJSON_IsArray(tb) ? tb->child : NULL; l; l = l->next) {
        if (!cJSON_IsString(l))
            continue;
        strip_escapes(l->valuestring); /* (shortens it: the tree stays valid) */
        cJSON_AddItemToArray(lines, cJSON_CreateString(l->valuestring));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A MIME bundle event from display_data or execute_result: content's data, with
 * is_main_result. */
static char *bundle_json(const cJSON *content, bool main)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(content, "data");
    cJSON *o = cJSON_IsObject(data) ? cJSON_Duplicate(data, true) : cJSON_CreateObject();
    /* Images as plain base64: kernels may end or wrap it with newlines. */
    for (cJSON *v = o->child; v; v = v->next)
        if (cJSON_IsString(v) && strncmp(v->string, "image/", 6) == 0 &&
            strcmp(v->string, "image/svg+xml") != 0) {
            char *w = v->valuestring;
            for (const char *r = v->valuestring; *r; r++)
                if (*r != '\n' && *r != '\r' && *r != ' ')
                    *w++ = *r;
            *w = '\0';
        }
    cJSON_AddBoolToObject(o, "is_main_result", main);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* One message of the run's: an event (1, with *type, *data, *n) or nothing to show (0). */
static int take(struct ctx_run *r, int *type, const uint8_t **data, size_t *n)
{
    struct jp_msg *m = &r->msg;
    const cJSON *ct = m->content;
    if (m->channel == JP_SHELL) {
        if (strcmp(m->type, "execute_reply") != 0)
            return 0;
        r->replied = true;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(ct, "status");
        const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(ct, "execution_count");
        bool ok = cJSON_IsString(st) && strcmp(st->valuestring, "ok") == 0;
        r->res.exit_code = ok ? 0 : 1;
        if (cJSON_IsNumber(cnt) && cnt->valuedouble >= 1 && cnt->valuedouble < 4e9) {
            r->res.execution_count = (unsigned)cnt->valuedouble;
            pthread_mutex_lock(&r->c->lock);
            r->c->execution_count = r->res.execution_count;
            pthread_mutex_unlock(&r->c->lock);
        }
        if (!ok && !r->res.error_json) {
            if (cJSON_GetObjectItemCaseSensitive(ct, "ename"))
                r->res.error_json = error_json(ct);
            else /* "aborted" */
                r->res.error_json = strdup("{\"name\":\"Aborted\",\"value\":\"the kernel did "
                                           "not run the code\",\"traceback\":[]}");
        }
        return 0;
    }
    if (m->channel != JP_IOPUB)
        return 0;
    if (strcmp(m->type, "status") == 0) {
        const cJSON *es = cJSON_GetObjectItemCaseSensitive(ct, "execution_state");
        if (cJSON_IsString(es) && strcmp(es->valuestring, "idle") == 0)
            r->idle = true;
        return 0;
    }
    if (strcmp(m->type, "stream") == 0) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(ct, "name");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(ct, "text");
        if (!cJSON_IsString(name) || !cJSON_IsString(text) || !text->valuestring[0])
            return 0;
        *type = strcmp(name->valuestring, "stderr") == 0 ? CTX_EV_STDERR : CTX_EV_STDOUT;
        *data = (const uint8_t *)text->valuestring;
        *n = strlen(text->valuestring);
        if (*type == CTX_EV_STDOUT)
            r->res.stdout_bytes += *n;
        else
            r->res.stderr_bytes += *n;
        return 1;
    }
    bool result = strcmp(m->type, "execute_result") == 0;
    if (result || strcmp(m->type, "display_data") == 0 ||
        strcmp(m->type, "update_display_data") == 0) {
        r->ev = bundle_json(ct, result);
        *type = result ? CTX_EV_RESULT : CTX_EV_DISPLAY;
    } else if (strcmp(m->type, "error") == 0) {
        r->ev = error_json(ct);
        free(r->res.error_json);
        r->res.error_json = r->ev ? strdup(r->ev) : NULL;
        *type = CTX_EV_ERROR;
    } else {
        return 0; /* execute_input, clear_output, comm messages */
    }
    if (!r->ev)
        return 0;
    *data = (const uint8_t *)r->ev;
    *n = strlen(r->ev);
    if (*type != CTX_EV_ERROR)
        r->res.result_bytes += *n;
    return 1;
}

int kernel_run_next(struct ctx_run *r, int wait_ms, int *type, const uint8_t **data, size_t *n)
{
    jp_msg_free(&r->msg);
    free(r->ev);
    r->ev = NULL;
    int64_t until = wait_ms < 0 ? 0 : time_mono_ns() + (int64_t)wait_ms * 1000000;
    for (;;) {
        if (r->over)
            return -1;
        int64_t now = time_mono_ns();
        if (r->replied && !r->idle && now - r->heard_ns >= (int64_t)SBXD_CTX_GRACE_MS * 1000000) {
            /* The reply came and then nothing for a while: iopub's idle was lost (ZeroMQ drops
             * what overflows a subscriber's queue, a flood read slowly). Nothing more is on its
             * way: the run is over. */
            LOG_EVENT("warn", "kernel_idle_missing", LOG_S("context", r->c->id));
            r->idle = true;
        }
        if (r->replied && r->idle) {
            ctx_finish(r,
                       r->timed_out            ? CTX_TIMEOUT
                       : r->res.exit_code == 0 ? CTX_OK
                                               : CTX_ERROR,
                       NULL);
            return -1;
        }
        if (ctx_run_timers(r, now))
            return -1;
        /* A kernel ignores SIGINT between executions: one that came before the code began
         * (or while its reply was on its way) is lost. So an interrupt is sent again until
         * the run is over. */
        bool asked = __atomic_load_n(&r->asked, __ATOMIC_ACQUIRE) || r->interrupting;
        if (asked && !r->replied && now >= r->resend_ns) {
            if (r->resend_ns)
                kernel_interrupt(r->shell, r->jc, r->c->interrupt_message);
            r->resend_ns = now + (int64_t)SBXD_KERNEL_REINTERRUPT_MS * 1000000;
        }
        bool ended = bg_ended(r->shell);
        int64_t wake = now + (int64_t)ALIVE_CHECK_MS * 1000000;
        int64_t limit = r->interrupting ? r->grace_ns : r->deadline_ns;
        if (limit && limit < wake)
            wake = limit;
        if (until && until < wake)
            wake = until;
        int ms = ended ? 0 : wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
        if (jp_recv(r->jc, ms, &r->msg) == 1) {
            r->heard_ns = time_mono_ns();
            if (strcmp(r->msg.parent_id, r->msg_id) == 0 && take(r, type, data, n))
                return 1;
            jp_msg_free(&r->msg);
            continue;
        }
        if (ended) { /* and every message it sent was read */
            char why[320];
            ctx_ended_reason(r->shell, "kernel", why, sizeof(why));
            ctx_run_died(r, why);
            return -1;
        }
        if (until && time_mono_ns() >= until)
            return 0;
    }
}

void kernel_run_free(struct ctx_run *r)
{
    jp_msg_free(&r->msg);
    free(r->ev);
    r->ev = NULL;
    free(r->res.error_json);
    r->res.error_json = NULL;
    jp_close(r->jc);
    r->jc = NULL;
}
