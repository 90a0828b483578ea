/*
 * context_internal.h - what the files of src/ctx share: a context and an execution, the
 * steps both kinds take (context.c), and the kinds themselves behind one table of operations
 * (struct ctx_kind_ops: shell.c, a bash session; kernel.c, a Jupyter kernel). The kind is
 * chosen once, from the request that makes the context (ctx_kind_for); nothing outside the
 * kinds' own files asks which it is. The registry (registry.c), the warm pool (warm.c) and
 * the sweeper (sweep.c) sit apart.
 */
#ifndef SBXD_CONTEXT_INTERNAL_H
#define SBXD_CONTEXT_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "jupyter_internal.h"
#include "sbxd/request.h"

#define TOKEN_LEN 32 /* hex digits: 128 random bits */
/* A kernel's directory's name: 128 random bits in hex. */
#define KDIR_NAME_LEN 32
/* The longest marker: "\n\x1e" TOKEN " -2147483648\n". */
#define MARKER_MAX (2 + TOKEN_LEN + 13)

struct ctx_kind_ops;

struct ctx {
    struct ctx *next; /* the registry, oldest first (under reg.lock) */
    bool listed;      /* under reg.lock */
    unsigned refs;    /* under reg.lock */
    char id[25];
    char language[32];
    char kernel_name[64];            /* the kernelspec's name; "shell" for a shell session */
    const struct ctx_kind_ops *kind; /* chosen once, from the request (ctx_kind_for) */
    bool interrupt_message;
    char cwd[256];
    /* The request the process is started from (again at a restart), parsed and checked once
     * when the context is made; and its text, what the warm pool matches a request by. */
    struct exec_request tmpl;
    char *spec;
    bool ipykernel; /* a kernel that is IPython's (kernelspec.h): set up by sbxd once started */
    bool ipython_dir_own; /* the request names IPYTHONDIR: a kernel's is not put in its directory */
    /* A kernel's own directory (ctx_dir.c), the name its process was given ("": none;
     * under lock): removed when the process is gone. */
    char kdir[KDIR_NAME_LEN + 1];
    int64_t created_real_ns;
    pthread_mutex_t admin; /* one restart or delete at a time */
    /* Under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* free again, or dead */
    bool busy;           /* an execution, or a (re)start, holds it */
    bool expiring;       /* ctx_sweep chose it: its delete is under way */
    bool dead;
    char dead_reason[320];
    struct bg_proc *shell; /* the shell or kernel, with a reference; NULL when dead */
    struct jp_conn *jc;    /* a kernel's connection, held; NULL when dead */
    pid_t pid;
    unsigned execution_count;
    int64_t last_used_real_ns, last_used_mono_ns;
    struct ctx_run *run; /* the execution in progress */
    /* A shell's: the fifo its next execution's code is written to (held by sbxd, already
     * opened by the shell and unlinked; -1: none); and a fifo made ahead for the execution
     * after it, named in no text yet (-1: none). */
    int chan_fd;
    int spare_fd;
    char spare_name[TOKEN_LEN + 1];
};

/* One output stream of a shell execution: bytes that may begin a marker are held back until
 * the rest shows whether they do. */
struct scan {
    uint8_t held[MARKER_MAX];
    size_t nheld;
    bool done;  /* the execution's marker was seen on this stream */
    int status; /* stdout's marker: the code's exit status */
};

struct ctx_run {
    struct ctx *c;         /* with a reference */
    struct bg_proc *shell; /* the process it runs in, with a reference of its own */
    int64_t start_ns, deadline_ns, grace_ns;
    bool interrupting; /* interrupted: waiting for the end until grace_ns */
    bool timed_out;    /* ... because the timeout passed */
    bool asked;        /* atomic: ctx_interrupt interrupted this run */
    bool over;         /* the result is final */
    bool admitted;     /* it holds a running slot (exec_service_admit) until ctx_run_end */
    struct ctx_result res;
    /* A shell's: */
    uint64_t off; /* the shell's output is read up to here */
    char *text;   /* the text the shell is given for the code (shell_text) */
    size_t text_len;
    char token[TOKEN_LEN + 1];
    struct scan sc[3]; /* [1] stdout, [2] stderr */
    uint8_t *buf;      /* SBXD_READ_CHUNK */
    uint8_t *work;     /* SBXD_READ_CHUNK + MARKER_MAX */
    size_t emit_len;   /* the clean bytes at work */
    int code_fd;       /* the fifo the shell reads this run's code from (-1: none) */
    int next_fd;       /* the fifo made for the next run's code (-1: none), and its name in */
    char next_name[TOKEN_LEN + 1]; /* the channels' directory while it has one ("": none) */
    /* A kernel's: */
    struct jp_conn *jc; /* held */
    char msg_id[48];    /* of the execute_request */
    bool replied, idle; /* its execute_reply came, and iopub's status idle for it */
    int64_t heard_ns;   /* when the last message came (of any parent) */
    int64_t resend_ns;  /* an interrupt is sent again from then (0: none sent) */
    struct jp_msg msg;  /* the message the last event's bytes are in */
    char *ev;           /* the last event's JSON (display, result, error) */
};

/* What an interrupt is sent to: the run's process, a kernel's connection, a shell's fifo
 * and the run's token (ctx_interrupt takes them under c's lock, with references). */
struct ctx_intr {
    struct bg_proc *proc;
    struct jp_conn *jc;
    int fd;
    const char *token;
    bool message; /* the kernelspec's interrupt_mode is "message" */
};

/* A kind of context: how its process is made, started, given code, read and interrupted. */
struct ctx_kind_ops {
    const char *what;  /* its process in words: "shell", "kernel" */
    bool rich_results; /* its runs have no exit code: errors come as objects (ctx_result) */
    /* Whether a request for language and kernel (either NULL) is this kind's. */
    bool (*claims)(const char *language, const char *kernel);
    /* Its part of c's spec into o (the client's request, its cwd, env and limits kept): the
     * command and its environment; c's language, kernel_name and what the kind keeps of
     * it set. -1 with err. */
    int (*spec)(struct ctx *c, cJSON *o, const char *language, const char *kernel,
                struct sbxd_err *err);
    /* Start c's process and wait until it answers: then c->shell (c->jc) and c->pid are set.
     * -1 with err. */
    int (*start)(struct ctx *c, struct sbxd_err *err);
    /* What a run of code (len bytes) needs before it takes c (buffers, tokens, channels).
     * -1 with err, r then let go by run_free. */
    int (*run_prepare)(struct ctx *c, struct ctx_run *r, const char *code, size_t len,
                       struct sbxd_err *err);
    /* Give the code to the run's process (r holds c). -1 with err when it takes nothing. */
    int (*run_begin)(struct ctx_run *r, const char *code, size_t len, struct sbxd_err *err);
    /* ctx_run_next for this kind. */
    int (*run_next)(struct ctx_run *r, int wait_ms, int *type, const uint8_t **data, size_t *n);
    /* Interrupt what the process runs. */
    void (*interrupt)(const struct ctx_intr *in);
    /* What a run holds, let go (safe on a run that did not start). */
    void (*run_free)(struct ctx_run *r);
    /* What c holds for its kind, let go (c is being freed). */
    void (*release)(struct ctx *c);
};

extern const struct ctx_kind_ops ctx_shell_kind, ctx_kernel_kind;

/* The kind of a request for language and kernel (either NULL): every kind's claims asked in
 * turn, the kernel's last (it takes any language a kernelspec has). */
const struct ctx_kind_ops *ctx_kind_for(const char *language, const char *kernel);

/* 2n hex digits of random bytes into out; -1 when the kernel gives none (a marker token or
 * a context's id must not be guessable: no fallback). */
int ctx_random_hex(char *out, size_t n);

/* Start c's process from its template (stdin_file > 0: its stdin; env: one more variable,
 * "NAME=value", set over the template's, or NULL): an owned background process that lives
 * until killed. A kernel (start_dir: its directory) starts there, not in its cwd; the
 * absolute path of the cwd it asked for goes to cwd_out. NULL with err. */
struct bg_proc *ctx_spawn(struct ctx *c, int stdin_file, const char *start_dir, const char *env,
                          char *cwd_out, size_t cwd_len, struct sbxd_err *err);
/* The largest message a kernel's connection takes (jupyter_internal.h), from --max-output-bytes. */
int64_t ctx_kernel_msg_max(void);
/* Forget c's kernel directory and remove it (its process is gone). */
void ctx_kdir_remove(struct ctx *c);
/* c's process (killed and forgotten), its connection and its directory given up: it is gone,
 * or never came. */
void ctx_proc_release(struct ctx *c, struct bg_proc *p, struct jp_conn *jc);

/* ctx_dir.c: sbxd's own directory for its contexts (shells' fifos, kernels' directories),
 * made at the first use: its fd (-1 with err, which may be NULL), its path (once made), its
 * removal with whatever is left in it at shutdown. */
#define CTX_DIR_PATH_MAX 32 /* "/dev/shm/sbxd-ctx.XXXXXX" */
int ctx_dir_fd(struct sbxd_err *err);
const char *ctx_dir_path(void);
void ctx_dir_remove(void);
/* A new kernel directory in it (its name and absolute path), or -1 with err; its removal,
 * with whatever the kernel left in it. */
int kdir_make(char name[KDIR_NAME_LEN + 1], char *path, size_t len, struct sbxd_err *err);
void kdir_remove(const char *name);
/* Under c->lock: the process is gone (or must go), the context is dead. */
void ctx_mark_dead(struct ctx *c, const char *why);
/* Why p (what: "shell", "kernel") ended, in words. */
void ctx_ended_reason(struct bg_proc *p, const char *what, char *out, size_t len);
/* The run is over with status (why: DIED's reason); the context is free again. */
void ctx_finish(struct ctx_run *r, enum ctx_status status, const char *why);
/* The run's process is gone: the context is dead (if it was still its process). */
void ctx_run_died(struct ctx_run *r, const char *why);
/* The process did not come back from an interrupt: a new one in its place. */
void ctx_restart_for(struct ctx_run *r);
/* The run's timeout (the code interrupted) and grace (its process restarted, the run over:
 * true) at time now. */
bool ctx_run_timers(struct ctx_run *r, int64_t now);
/* The env object of a spec o (made when missing; NULL when the client's is not an object:
 * exec_request_from_json then refuses it), and a variable set in it whatever the client
 * said. */
cJSON *ctx_spec_env(cJSON *o);
void ctx_env_force(cJSON *env, const char *name, const char *value);
/* Interrupt the run (the timeout, or its client left), once. */
void ctx_interrupt_run(struct ctx_run *r);

/* context.c: a context made from a request, not started (NULL with err); freed; started
 * (its kind's start); its process taken and killed (an execution in progress then ends as
 * died, in its own time), leaving it busy (restarting) or dead (why). */
struct ctx *ctx_alloc(const char *body, size_t len, struct sbxd_err *err);
void ctx_free(struct ctx *c);
int ctx_start_proc(struct ctx *c, struct sbxd_err *err);
void ctx_kill_proc(struct ctx *c, const char *why, bool restarting);

/* registry.c: the daemon's configuration and exec service (ctx_init). */
const struct ctx_config *ctx_cfg(void);
struct exec_service *ctx_svc(void);

/* warm.c: a warm kernel started from exactly this spec, taken out of the pool (NULL: none);
 * the pool stopped (wait: its maker joined, its kernels killed and waited for; else only
 * signalled); its kernels discarded for a reset, none made until ctx_warm_resume. */
/* The processes of the warm kernels now, into out (at most max); how many. */
size_t ctx_warm_pids(pid_t *out, size_t max);
struct ctx *ctx_warm_take(const char *spec);
void ctx_warm_stop(bool wait);
void ctx_warm_discard(void);

/* registry.c: whether c is still in the registry (not deleted). */
bool ctx_listed(struct ctx *c);

/* The contexts' fixed limits (configurable ones are config.c's options). */

/* Code contexts: how long a shell has to come back from an interrupt (then it is restarted),
 * and to start and answer its first marker. */
#define SBXD_CTX_GRACE_MS 2000
#define SBXD_CTX_START_MS 10000

/* A Jupyter kernel's start (an interpreter and its libraries: seconds, more under gVisor or
 * an emulated machine), and the largest message sbxd takes from one: a bigger one drops the
 * kernel's connection (a guard on sbxd's memory, far above a chart or a page of output). */
#define SBXD_KERNEL_START_MS 60000

/* An interrupt is sent to a kernel again this often until the code stops (one that came
 * before the code began is lost). */
#define SBXD_KERNEL_REINTERRUPT_MS 250

/* A kernel's message is received up to max(4 x --max-output-bytes, SBXD_KERNEL_MSG_MIN)
 * bytes, never more than SBXD_KERNEL_MSG_MAX (a larger one is dropped with its connection,
 * which ZeroMQ makes again), and at most SBXD_KERNEL_RCVHWM of iopub's wait in sbxd: the
 * rest wait in the kernel's own memory. */
#define SBXD_KERNEL_MSG_MIN (16LL << 20)
#define SBXD_KERNEL_MSG_MAX (64LL << 20)
#define SBXD_KERNEL_RCVHWM  4

/* Warm kernels (--warm-contexts) at most, and how long a failed start waits to try again. */
#define SBXD_WARM_MAX     8
#define SBXD_WARM_RETRY_S 30

#endif
