/*
 * context.h - code contexts (/contexts): interpreters whose state persists from one execution
 * to the next. A shell context (language "bash", or "sh": bash in POSIX mode) is a bash that
 * sbxd starts as a background process of its own (bg_start_owned): contained as every command
 * is (the command user, no capabilities, seccomp, rlimits, the backend's tree kill), with the
 * working directory, exported variables, functions and aliases kept between executions.
 *
 * How one execution is told from the next: the code goes to the shell as a quoted
 * here-document, read into a variable and run with `eval` (stdin from /dev/null, so code that
 * reads stdin cannot eat what follows), and on the same line a call that prints a marker,
 * "\n\x1e<token> <status>\n" on stdout and "\n\x1e<token>\n" on stderr, the token 128 random
 * bits new for each execution. The reader strips every marker, so none reaches the output.
 * Each execution's text comes on a fifo of its own, which the shell takes as its stdin only
 * once the code before has ended (its name is in that code's text) and which is the only
 * channel it holds while the code runs, drained: no descriptor the code or its children hold
 * leads to a later execution. The shell is interactive (-i, without line editing or job
 * control): SIGINT aborts the whole line it runs and it reads on from its stdin, so a timeout
 * or an interrupt stops the foreground command without ending the session; sbxd then writes
 * `__sbxd_resume` into the execution's fifo, which takes the next fifo and prints the marker
 * (status 130). A shell
 * that does not come back within SBXD_CTX_GRACE_MS is restarted (its state is lost; the
 * answer says so). Code that ends the shell (`exit`) ends the context: status "died", until
 * a restart.
 *
 * Any other language is a Jupyter kernel (kernelspec.h: "python" is ipykernel's python3),
 * started as an owned background process too, and spoken to directly (jupyter_internal.h): each
 * execution is an execute_request, its output the iopub messages in reply to it (stream,
 * display_data, execute_result, error) until its execute_reply and the kernel's idle. The
 * connection file reaches the kernel as its stdin, a memfd it reads through /proc/self/fd/0,
 * emptied once the kernel answers: the key is in no file a command could open. The kernel
 * starts in a directory of its own (ctx_dir.c), where it binds its sockets (Unix sockets
 * under relative names) and keeps its IPython directory, out of every command's reach;
 * IPython's kernel is then moved to the context's cwd (kernel.c). A timeout or
 * an interrupt is SIGINT to the kernel (or interrupt_request on the control channel, for a
 * kernelspec with interrupt_mode "message"); a kernel that does not finish within
 * SBXD_CTX_GRACE_MS is restarted. A kernel that dies (its code called os._exit, or the memory
 * limit killed it) leaves the context dead, with the reason, until a restart.
 *
 * One registry per daemon; every ctx handed out carries a reference (ctx_put gives it back).
 * One execution at a time per context; another waits for it.
 */
#ifndef SBXD_CONTEXT_H
#define SBXD_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbxd/err.h"
#include "sbxd/exec_service.h"

struct ctx_config {
    unsigned max_contexts; /* alive at once (SBXD_E_BUSY beyond) */
    uint64_t idle_ms;      /* unused this long: shut down by ctx_sweep (0: never) */
    uint64_t max_output;   /* --max-output-bytes: what a kernel's messages are sized by */
};

void ctx_init(const struct ctx_config *cfg, struct exec_service *svc);

/* Keep n Python kernels started and idle (--warm-contexts; none when no python kernelspec is
 * installed), made one after the other on a thread of their own, and again as each is taken:
 * a POST /contexts whose kernel would start from the same spec (language "python", no cwd,
 * env or limits) takes one and answers at once. Outside --max-contexts until taken. */
void ctx_warm_start(unsigned n);
/* How many are ready now. */
unsigned ctx_warm_ready(void);

struct ctx;

enum ctx_state { CTX_IDLE, CTX_BUSY, CTX_DEAD };

struct ctx_info {
    char id[25];
    char language[32];
    char kernel[64];       /* the kernelspec's name, "shell" for a shell session */
    char cwd[256];         /* as asked, relative to the workspace ("" for its root) */
    pid_t pid;             /* the shell's or kernel's (0 when dead) */
    uint64_t memory_bytes; /* the resident memory of its processes, summed */
    enum ctx_state state;
    unsigned execution_count;
    int64_t created_real_ns, last_used_real_ns;
    char dead_reason[320];
};

/*
 * A context, its shell or kernel started and ready. `spec` is the JSON object of the request:
 * language ("bash" by default, "sh", or a kernel's language), kernel (a kernelspec's name),
 * and cwd, env, limits as /execute takes them. NULL with err: SBXD_E_INVALID (a field, no
 * such kernel, no bash), SBXD_E_BUSY (--max-contexts), or what the start met.
 */
struct ctx *ctx_create(const char *spec, size_t len, struct sbxd_err *err);

/* The context of that id, with a reference; NULL when unknown or deleted. */
struct ctx *ctx_get(const char *id);
void ctx_ref(struct ctx *c);
void ctx_put(struct ctx *c);

/* The default context of `language` (for POST /run_code), with a reference: made on first
 * use, and started again when it died. NULL with err as ctx_create's. */
struct ctx *ctx_default(const char *language, struct sbxd_err *err);

/* Every context, oldest first, each with a reference: an array to free. Returns how many. */
size_t ctx_list(struct ctx ***out);

/* The shell or kernel process of every context, the warm kernels' included (0 for one not
 * running), into out (at most max); how many. What a context listens on is its own channel:
 * the proxy keeps out of it (ports.h). */
size_t ctx_pids(pid_t *out, size_t max);

/* What c is and its state; with memory, also memory_bytes (a walk of its process tree in
 * /proc: not for each execution). */
void ctx_info(struct ctx *c, struct ctx_info *out, bool memory);

/* Kill the context's processes and forget it (it stays readable through references held). */
void ctx_delete(struct ctx *c);

/* A new shell in place of the old (killed): the state is lost. Waits for a running execution
 * to end first (it is interrupted). -1 with err when the new one cannot start (the context is
 * then dead). */
int ctx_restart(struct ctx *c, struct sbxd_err *err);

/* SIGINT to everything the context runs: the execution in progress ends with status 130.
 * Returns whether one was running. */
bool ctx_interrupt(struct ctx *c);

/* Shut down contexts unused for --context-idle-s (the main thread calls it now and then:
 * the deletes, which wait for the shells' ends, run on a thread of their own, as the main
 * thread may be the one that reaps them). */
void ctx_sweep(void);

/* Shutdown: kill every context's shell without waiting (the main thread drains on), and
 * take no new executions. */
void ctx_kill_all(void);

/* A reset (reset.h): the warm kernels are killed and no more are made until
 * ctx_warm_resume (one that was starting is not handed out either), and every context is
 * deleted (an execution in progress ends "died"; the next POST /run_code makes a new default
 * context). Returns how many contexts were deleted. */
unsigned ctx_reset(void);
void ctx_warm_resume(void);

/* Forget every context (after the server stopped). */
void ctx_shutdown(void);

/* ---------------------------------------------------------------------------------- */
/* One execution                                                                        */

enum ctx_status { CTX_OK, CTX_ERROR, CTX_TIMEOUT, CTX_DIED };

struct ctx_result {
    enum ctx_status status; /* OK: exit status 0 (a kernel: "ok"); ERROR: another; TIMEOUT; DIED */
    bool kernel;            /* a kernel's run: no exit code; errors come in error_json */
    int exit_code;          /* a shell's $? (130 after an interrupt); -1 when it died */
    unsigned execution_count;
    double duration_ms;
    bool interrupted; /* by ctx_interrupt or the timeout */
    bool restarted;   /* the shell did not come back from the interrupt: a new one runs */
    uint64_t stdout_bytes, stderr_bytes;
    char reason[320];      /* DIED: why */
    char *error_json;      /* a kernel's error: {"name","value","traceback":[...]} (NULL: none) */
    uint64_t result_bytes; /* display and result events' JSON, in all */
};

const char *ctx_status_name(enum ctx_status s);

struct ctx_run;

/*
 * Run `code` (len bytes, no NUL) in c. The execution takes a running slot as a command does
 * (exec_service_admit: past --max-running it waits its turn, adm saying whose client and
 * which drain flag end the wait; NULL: none), held until ctx_run_end; the context's process
 * itself holds none. Then it waits up to wait_ms for the context to be free. NULL with err:
 * what the admission said (SBXD_E_BUSY, SBXD_E_UNAVAILABLE, or adm->gone), SBXD_E_CONFLICT
 * (dead, or still busy after wait_ms), SBXD_E_INVALID (a NUL in the code). The timeout (ms)
 * interrupts the code.
 */
struct ctx_run *ctx_run_open(struct ctx *c, const char *code, size_t len, uint64_t timeout_ms,
                             int wait_ms, struct exec_admit *adm, struct sbxd_err *err);
/* ctx_run_open with no client socket or drain flag to end the wait for a slot. */
struct ctx_run *ctx_run_start(struct ctx *c, const char *code, size_t len, uint64_t timeout_ms,
                              int wait_ms, struct sbxd_err *err);

/* What ctx_run_next gives: output bytes, or (a kernel's) an object as JSON text. */
enum ctx_event {
    CTX_EV_STDOUT = 1,
    CTX_EV_STDERR = 2,
    CTX_EV_DISPLAY = 3, /* display_data: a MIME bundle, {"text/plain": ..., "image/png": ...} */
    CTX_EV_RESULT = 4,  /* execute_result: the same, with "is_main_result": true */
    CTX_EV_ERROR = 5,   /* {"name", "value", "traceback": [lines, without terminal colours]} */
};

/*
 * The next event of the run: waits up to wait_ms (-1: until there is one, or the end).
 * 1: *n bytes of event *type at *data, valid until the next call; 0: nothing within the
 * wait; -1: the run is over, its result final.
 */
int ctx_run_next(struct ctx_run *r, int wait_ms, int *type, const uint8_t **data, size_t *n);

const struct ctx_result *ctx_run_result(const struct ctx_run *r);

/* Let the context go (interrupting the code if it still runs: its client left), give the
 * running slot back, and free r. */
void ctx_run_end(struct ctx_run *r);

#endif
