#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxd/auth.h"
#include "sbxd/err.h"

/* A token travels in a header: printable ASCII without spaces (RFC 6750's token68 and then
 * some), so no header can be split or padded with it. */
static bool token_ok(const char *t, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return false;
    return true;
}

/* The token file's failures, said without the flag: auth_load puts it before them. */
static int read_file(const char *path, char *out, size_t outlen, struct sbxd_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        sbxd_fail_errno(err, SBXD_E_INVALID, errno, "cannot open '%s'", path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size >= (off_t)outlen) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "'%s' is not a regular file of under %zu bytes", path,
                  outlen);
        close(fd);
        return -1;
    }
    size_t n = 0;
    while (n + 1 < outlen) {
        ssize_t r = read(fd, out + n, outlen - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    out[n] = '\0';
    /* One trailing newline (echo > file, a Kubernetes secret written by hand) is not part of
     * the token. */
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    return 0;
}

int auth_load(const char *token_file, char **envp, char *out, size_t outlen, struct sbxd_err *err)
{
    out[0] = '\0';
    char *env_val = NULL;
    size_t env_idx = 0;
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], "SBXD_TOKEN=", 11) == 0) {
            env_val = envp[i] + 11;
            env_idx = i;
        }
    int rc = 0;
    if (token_file && *token_file && env_val) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "both --token-file and SBXD_TOKEN are set: use one");
        rc = -1;
    } else if (token_file && *token_file) {
        if ((rc = read_file(token_file, out, outlen, err)) < 0)
            sbxd_err_wrap(err, "--token-file: ");
    } else if (env_val) {
        size_t n = strlen(env_val);
        if (n >= outlen) {
            sbxd_fail(err, SBXD_E_INVALID, 0, "SBXD_TOKEN is longer than %zu bytes", outlen - 1);
            rc = -1;
        } else {
            memcpy(out, env_val, n + 1);
        }
    }
    if (env_val) {
        /* Wipe the bytes where the kernel put them (what /proc/PID/environ reads), then drop
         * the entry from envp. Every later copy of the environment is made without it. */
        volatile char *p = envp[env_idx];
        while (*p)
            *p++ = '\0';
        for (size_t i = env_idx; envp[i]; i++)
            envp[i] = envp[i + 1];
    }
    if (rc == 0 && out[0] && !token_ok(out, strlen(out))) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "the token has spaces or control characters");
        rc = -1;
    }
    if (rc == 0 && (token_file && *token_file) && !out[0]) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "--token-file: '%s' is empty", token_file);
        rc = -1;
    }
    if (rc == 0 && env_val && !out[0]) {
        sbxd_fail(err, SBXD_E_INVALID, 0, "SBXD_TOKEN is set but empty");
        rc = -1;
    }
    if (rc < 0) {
        volatile char *p = out;
        for (size_t i = 0; i < outlen; i++)
            p[i] = '\0';
    }
    return rc;
}

bool auth_check(const char *token, size_t token_len, const char *header)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return false;
    const char *got = header + 7;
    while (*got == ' ')
        got++;
    size_t got_len = strnlen(got, SBXD_TOKEN_MAX + 1);
    while (got_len > 0 && got[got_len - 1] == ' ')
        got_len--;
    /* Every byte of the token is looked at, whatever the guess: the time taken says only how
     * long the token is. */
    unsigned char diff = got_len != token_len;
    for (size_t i = 0; i < token_len; i++) {
        size_t in = i < got_len;
        unsigned char g = (unsigned char)got[i * in]; /* byte 0 stands in past the end */
        diff |= (unsigned char)(g ^ (unsigned char)token[i]);
    }
    return diff == 0;
}

/*
 * Whether uid:gid (no supplementary groups, no capabilities: a command's credentials) can
 * open path for reading. A child takes those ids and tries: the kernel then judges the mode,
 * the owner, ACLs and every ancestor's search permission exactly as for a command, with
 * nothing for sbxd to get wrong. 1 yes, 0 no, -1 unknown.
 */
static int can_read_as(const char *path, uid_t uid, gid_t gid)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
            _exit(3);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        _exit(fd >= 0 ? 0 : (errno == EACCES || errno == EPERM) ? 1 : 2);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) > 1)
        return -1;
    return WEXITSTATUS(st) == 0;
}

int auth_file_exposed(const char *path, const struct auth_readers *r, char *why, size_t whylen)
{
    static const char fix[] = "make it root's alone (chmod 0400; a Kubernetes Secret volume: "
                              "defaultMode: 0400)";
    struct stat st;
    if (stat(path, &st) < 0) {
        snprintf(why, whylen, "--token-file: cannot stat '%s': %s", path, strerror(errno));
        return -1;
    }
    /* Not root: every command runs as sbxd's own user, who reads what sbxd reads. */
    if (!r->switch_user) {
        snprintf(why, whylen,
                 "--token-file '%s' is readable by the commands: sbxd is not root, so they run "
                 "as its own user; pass the token in SBXD_TOKEN (wiped from sbxd's environment "
                 "at start) or run sbxd as root with --user",
                 path);
        return 1;
    }
    /* Under uid isolation a command may run as any uid of the range: one that owns the file
     * may read it (or chmod it) whatever its mode. The others stand for each other. */
    bool owned = r->range_count && st.st_uid >= r->range_first &&
                 st.st_uid - r->range_first < r->range_count;
    struct {
        uid_t uid;
        gid_t gid;
    } who[2] = {{r->user_uid, r->user_gid}, {r->range_first, r->user_gid}};
    size_t n = r->range_count ? 2 : 1;
    for (size_t i = 0; i < n; i++) {
        int ok = owned ? 1 : can_read_as(path, who[i].uid, who[i].gid);
        if (ok < 0) {
            snprintf(why, whylen,
                     "--token-file: cannot tell whether commands (uid %u, gid %u) can read "
                     "'%s'",
                     (unsigned)who[i].uid, (unsigned)who[i].gid, path);
            return -1;
        }
        if (ok) {
            snprintf(why, whylen,
                     "--token-file '%s' (mode %04o, owner %u:%u) is readable by the commands "
                     "(uid %u, gid %u): any command could read the token; %s",
                     path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid,
                     owned ? (unsigned)st.st_uid : (unsigned)who[i].uid, (unsigned)who[i].gid, fix);
            return 1;
        }
    }
    return 0;
}
