/*
 * context_internal.h - what context.c (the registry and shell sessions) and kernel.c
 * (Jupyter kernels) share: a context and an execution, and the steps both kinds take.
 */
#ifndef SBXD_CONTEXT_INTERNAL_H
#define SBXD_CONTEXT_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbxd/background.h"
#include "sbxd/context.h"
#include "sbxd/jupyter.h"
#include "sbxd/limits.h"

#define TOKEN_LEN 32 /* hex digits: 128 random bits */
/* A kernel's directory's name: 128 random bits in hex. */
#define KDIR_NAME_LEN 32
/* The longest marker: "\n\x1e" TOKEN " -2147483648\n". */
#define MARKER_MAX (2 + TOKEN_LEN + 13)

struct ctx {
    struct ctx *next; /* the registry, oldest first (under reg.lock) */
    bool listed;      /* under reg.lock */
    unsigned refs;    /* under reg.lock */
    char id[25];
    char language[32];
    char kernel_name[64]; /* the kernelspec's name; "shell" for a shell session */
    bool kernel;          /* a Jupyter kernel, else a shell session */
    bool interrupt_message;
    char cwd[256];
    char *spec;     /* the request the process is started from (again at a restart) */
    bool ipykernel; /* a kernel that is IPython's (kernelspec.h): set up by sbxd once started */
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
    struct ctx_result res;
    /* A shell's: */
    uint64_t off; /* the shell's output is read up to here */
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

/* Start c's process from its spec (stdin_file > 0: its stdin): an owned background process
 * that lives until killed. A kernel (start_dir: its directory) starts there, not in its cwd,
 * with its IPython directory there too unless the client named one; the absolute path of
 * the cwd it asked for goes to cwd_out. NULL with err. */
struct bg_proc *ctx_spawn(struct ctx *c, int stdin_file, const char *start_dir, char *cwd_out,
                          size_t cwd_len, struct sbxd_err *err);
/* The largest message a kernel's connection takes (jupyter.h), from --max-output-bytes. */
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
 * exec_request_parse then refuses it), and a variable set in it whatever the client said. */
cJSON *ctx_spec_env(cJSON *o);
void ctx_env_force(cJSON *env, const char *name, const char *value);
/* Interrupt the run (the timeout, or its client left), once. */
void ctx_interrupt_run(struct ctx_run *r);

/* kernel.c. The exec request a kernel of `language` (or the kernelspec `kernel`) starts
 * from, o being the client's request (its cwd, env, limits): NULL with err. Sets c's
 * language, kernel_name and interrupt_message. */
char *kernel_spec(struct ctx *c, cJSON *o, const char *language, const char *kernel,
                  struct sbxd_err *err);
/* Start c's kernel and wait until it answers: then c->shell, c->jc and c->pid are set. */
int kernel_start(struct ctx *c, struct sbxd_err *err);
/* Send the run's code (execute_request). -1 with err when the kernel takes nothing. */
int kernel_run_begin(struct ctx_run *r, const char *code, size_t len, struct sbxd_err *err);
/* ctx_run_next for a kernel. */
int kernel_run_next(struct ctx_run *r, int wait_ms, int *type, const uint8_t **data, size_t *n);
/* Interrupt what the kernel runs: SIGINT, or interrupt_request for interrupt_mode
 * "message". */
void kernel_interrupt(struct bg_proc *p, struct jp_conn *jc, bool message);
/* What a kernel's run holds, let go. */
void kernel_run_free(struct ctx_run *r);

#endif
