/* util.c - sbx's small helpers: errors, option parsing, writing, escaping, signals, base64. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sbx.h"
#include "sbxd/base64.h"

__attribute__((format(printf, 2, 0))) static void vreport(const char *cmd, const char *fmt,
                                                          va_list ap)
{
    /* One line, flushed before anything the caller prints next. */
    fflush(stdout);
    fputs("sbx: ", stderr);
    if (cmd)
        fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    return SBX_FAIL;
}

int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "Try 'sbx %s --help'.\n", cmd);
    else
        fputs("Try 'sbx --help'.\n", stderr);
    return SBX_USAGE;
}

int cmd_print_help(const struct sbx_cmd *cmd)
{
    printf("Usage: sbx [--url URL] %s %s\n\n%s.\n\n%s", cmd->name, cmd->synopsis, cmd->summary,
           cmd->help);
    return fflush(stdout) == 0 ? SBX_OK
                               : fail(cmd->name, "cannot write the help: %s", strerror(errno));
}

void opt_reset(void)
{
    optind = 0; /* glibc: 0 also resets its internal state (a half-read "-rf" cluster) */
    opterr = 0; /* our own messages, with the command's name */
}

int opt_next(const char *cmd, int argc, char **argv, const char *shorts, const struct option *longs)
{
    /* '+': stop at the first operand, so `sbx exec ls -la` gives "-la" to ls;
     * ':': tell a missing value apart from an unknown option. */
    char spec[64];
    snprintf(spec, sizeof(spec), "+:%sh", shorts);
    struct option all[24];
    size_t n = 0;
    for (; longs && longs[n].name && n < 22; n++)
        all[n] = longs[n];
    all[n++] = (struct option){"help", no_argument, NULL, 'h'};
    all[n] = (struct option){0};

    int c = getopt_long(argc, argv, spec, all, NULL);
    if (c != '?' && c != ':')
        return c;
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    if (c == ':')
        usage_error(cmd, "option '%s' needs a value", arg);
    else if (cmd && strncmp(arg, "--url", 5) == 0 && (arg[5] == '\0' || arg[5] == '='))
        usage_error(cmd, "--url goes before the command: sbx --url URL %s ...", cmd);
    else if (strncmp(arg, "--", 2) == 0)
        usage_error(cmd, "unknown option '%s'", arg);
    else
        usage_error(cmd, "unknown option '-%c'", optopt);
    return '?';
}

int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

void put_escaped(FILE *f, const char *s)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '\n')
            fputs("\\n", f);
        else if (*c == '\t')
            fputs("\\t", f);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(f, "\\x%02x", *c);
        else
            fputc(*c, f);
    }
}

unsigned char *b64_decode(const char *in, size_t *out_len)
{
    size_t n = strlen(in);
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        return NULL;
    long len = base64_decode(in, n, out);
    if (len < 0) {
        free(out);
        return NULL;
    }
    *out_len = (size_t)len;
    return out;
}

long parse_duration_ms(const char *s)
{
    if (*s < '0' || *s > '9') /* strtol would take " 5", "+5" and "-5" */
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || v <= 0)
        return -1;
    long scale = 1;
    if (strcmp(end, "s") == 0)
        scale = 1000;
    else if (strcmp(end, "m") == 0)
        scale = 60 * 1000;
    else if (*end && strcmp(end, "ms") != 0)
        return -1;
    return v > LONG_MAX / scale ? -1 : v * scale;
}

/* The signals sbxd sends to a background process (POST /processes/{id}/signal). Numbers come
 * from <signal.h>, so `kill -s 10` means SIGUSR1 on this machine's architecture. */
static const struct {
    int sig;
    const char *name;
} sbxd_signals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
    {SIGTERM, "SIGTERM"}, {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},
};

const char *signal_name(int sig)
{
    for (size_t i = 0; i < sizeof(sbxd_signals) / sizeof(sbxd_signals[0]); i++)
        if (sbxd_signals[i].sig == sig)
            return sbxd_signals[i].name;
    return "";
}

const char *signal_parse(const char *s)
{
    if (*s >= '0' && *s <= '9') {
        char *end;
        long n = strtol(s, &end, 10);
        if (*end || n < 1 || n > 31)
            return NULL;
        const char *name = signal_name((int)n);
        return *name ? name : NULL;
    }
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof(sbxd_signals) / sizeof(sbxd_signals[0]); i++)
        if (strcasecmp(s, sbxd_signals[i].name + 3) == 0)
            return sbxd_signals[i].name;
    return NULL;
}

const char *signal_describe(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

int read_stdin_all(const char *cmd, struct buf *b, size_t max, const char *too_big,
                   const char *has_nul)
{
    char chunk[65536];
    for (;;) {
        ssize_t k = read(STDIN_FILENO, chunk, sizeof(chunk));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return fail(cmd, "cannot read stdin: %s", strerror(errno));
        if (k == 0)
            break;
        if (b->len + (size_t)k > max)
            return fail(cmd, "%s", too_big);
        if (buf_append(b, chunk, (size_t)k) < 0)
            return fail(cmd, "out of memory");
    }
    if (memchr(b->p ? b->p : "", '\0', b->len))
        return fail(cmd, "%s", has_nul);
    return SBX_OK;
}

int opt_json_only(const struct sbx_cmd *cmd, int argc, char **argv, bool *json)
{
    static const struct option longs[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    *json = false;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "jh", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c != 'j')
            return SBX_USAGE;
        *json = true;
    }
    if (optind < argc)
        return usage_error(cmd->name, "%s takes no arguments", cmd->name);
    return -1;
}
