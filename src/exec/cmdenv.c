/*
 * cmdenv.c - the environment commands start from (cmdenv.h): sbxd's own, through the
 * allow-list of --pass-env, read once at start-up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbxd/cmdenv.h"
#include "sbxd/err.h"
#include "sbxd/exec_limits.h"
#include "sbxd/secret.h"

struct item {
    const char *s;
    size_t len;
    bool prefix; /* PREFIX*: s is the prefix */
};

static bool name_char(char c, bool first)
{
    return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (!first && c >= '0' && c <= '9');
}

static bool is_sbxd_name(const char *name, size_t len)
{
    return len >= 5 && strncasecmp(name, "SBXD_", 5) == 0;
}

/* Split list (comma-separated, blanks around items ignored) into items[*n...]. 0, or -1 with
 * err (SBXD_E_INVALID). The items point into list. */
static int parse_list(const char *list, struct item *items, size_t *n, struct sbxd_err *err)
{
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        const char *s = p;
        p += len + (p[len] == ',');
        while (len && (*s == ' ' || *s == '\t'))
            s++, len--;
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
            len--;
        if (!len)
            continue;
        bool prefix = s[len - 1] == '*';
        size_t nl = len - prefix;
        bool ok = true;
        for (size_t i = 0; i < nl && ok; i++)
            ok = name_char(s[i], i == 0);
        if (!ok || (!prefix && !nl)) {
            return sbxd_fail(err, SBXD_E_INVALID, 0,
                             "'%.*s' is not a variable's NAME or a PREFIX* (letters, digits "
                             "and _, not a digit first)",
                             (int)(len > 64 ? 64 : len), s);
        }
        /* Refused rather than ignored: the operator would believe it passed. No SBXD_ name
         * ever reaches a command (the token's variable, SBXD_TOKEN, is one). */
        if (!prefix && is_sbxd_name(s, nl)) {
            return sbxd_fail(err, SBXD_E_INVALID, 0, "%.*s is sbxd's own setting and never passed",
                             (int)(nl > 64 ? 64 : nl), s);
        }
        if (*n >= SBXD_PASS_ENV_MAX_ITEMS) {
            return sbxd_fail(err, SBXD_E_INVALID, 0, "more than %d items", SBXD_PASS_ENV_MAX_ITEMS);
        }
        items[(*n)++] = (struct item){.s = s, .len = nl, .prefix = prefix};
    }
    return 0;
}

/* Whether the variable entry ("NAME=value", its name len bytes) passes by items. */
static bool passes(const struct item *items, size_t n, const char *entry, size_t len)
{
    /* sbxd's own settings, its token among them, whatever the list says. */
    if (is_sbxd_name(entry, len))
        return false;
    bool by_prefix = false;
    for (size_t i = 0; i < n; i++) {
        if (!items[i].prefix && items[i].len == len && memcmp(items[i].s, entry, len) == 0)
            return true; /* named: passed as it is, whatever it looks like */
        if (items[i].prefix && items[i].len <= len && memcmp(items[i].s, entry, items[i].len) == 0)
            by_prefix = true;
    }
    /* A pattern passes what the operator may not know is there: a credential a pod was given
     * for sbxd's neighbours (a cloud key, a registry password, a connection string), which
     * untrusted code would read from its environment. Never by a pattern, then; and HOME
     * stays the workspace unless named. */
    return by_prefix && !(len == 4 && memcmp(entry, "HOME", 4) == 0) && !secret_name(entry, len) &&
           !secret_url_userinfo(entry + len + 1);
}

static void free_strv(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

void cmdenv_free(struct cmdenv *ce)
{
    free_strv(ce->vars);
    free_strv(ce->passed);
    memset(ce, 0, sizeof(*ce));
}

/* Whether vars[0..n) already holds the name (len bytes). */
static bool has_name(char *const *vars, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strncmp(vars[i], name, len) == 0 && vars[i][len] == '=')
            return true;
    return false;
}

int cmdenv_init(struct cmdenv *ce, const char *spec, char *const *envp, struct sbxd_err *err)
{
    memset(ce, 0, sizeof(*ce));
    struct item items[SBXD_PASS_ENV_MAX_ITEMS];
    size_t n = 0;
    bool plus = spec[0] == '+'; /* the default list, and these */
    if ((plus && parse_list(SBXD_PASS_ENV_DEFAULT, items, &n, err) < 0) ||
        parse_list(spec + plus, items, &n, err) < 0)
        return sbxd_err_wrap(err, "--pass-env: ");
    ce->empty = n == 0;
    size_t nenv = 0;
    for (char *const *e = envp; e && *e; e++)
        nenv++;
    ce->vars = calloc(nenv + 3, sizeof(char *));
    ce->passed = calloc(nenv + 1, sizeof(char *));
    if (!ce->vars || !ce->passed)
        goto nomem;
    for (char *const *e = envp; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : 0;
        /* The first of a name given twice, as getenv takes it. */
        if (!len || !passes(items, n, *e, len) || has_name(ce->vars, ce->nvars, *e, len))
            continue;
        if (!(ce->vars[ce->nvars] = strdup(*e)) || !(ce->passed[ce->npassed] = strndup(*e, len)))
            goto nomem;
        ce->nvars++;
        ce->npassed++;
        ce->home = ce->home || (len == 4 && memcmp(*e, "HOME", 4) == 0);
    }
    if (!has_name(ce->vars, ce->nvars, "PATH", 4) &&
        !(ce->vars[ce->nvars++] = strdup("PATH=" SBXD_BASE_PATH)))
        goto nomem;
    if (!has_name(ce->vars, ce->nvars, "LANG", 4) &&
        !(ce->vars[ce->nvars++] = strdup("LANG=" SBXD_BASE_LANG)))
        goto nomem;
    return 0;
nomem:
    cmdenv_free(ce);
    return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "--pass-env: out of memory");
}

const struct cmdenv *cmdenv_minimal(void)
{
    static char *vars[] = {"PATH=" SBXD_BASE_PATH, "LANG=" SBXD_BASE_LANG, NULL};
    static char *none[] = {NULL};
    static const struct cmdenv minimal = {
        .vars = vars, .nvars = 2, .passed = none, .npassed = 0, .home = false, .empty = true};
    return &minimal;
}
