/*
 * cmd_files.c - put, get, ls, rm and mkdir over /files/{path}; put -r and get -r move whole
 * trees as tar streams (?archive=tar), made and read by the local tar.
 *
 * Uploads are streamed from the file (never held in memory). Downloads go into a file that
 * has no name until it is complete (O_TMPFILE, linked and renamed into place at the end), so
 * a download that fails, or sbx killed half-way, leaves no partial file behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbx.h"

/* Directory listings are read in pages of this many entries: memory stays bounded whatever
 * the directory holds. */
#define SBX_LS_PAGE 1000

/* The last component of path (trailing slashes ignored) into out; false when there is none to
 * name a file after ("", "/", ".", ".."). */
static bool base_name(const char *path, char *out, size_t len)
{
    size_t n = strlen(path);
    while (n > 0 && path[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/')
        start--;
    size_t blen = n - start;
    if (blen == 0 || blen >= len || (blen == 1 && path[start] == '.') ||
        (blen == 2 && path[start] == '.' && path[start + 1] == '.'))
        return false;
    memcpy(out, path + start, blen);
    out[blen] = '\0';
    return true;
}

static bool ends_with_slash(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && s[n - 1] == '/';
}

/* "/files/<path encoded>" followed by a query (may be ""); NULL when out of memory. */
static char *files_path(const char *path, const char *query)
{
    char *p = url_path("/files/", path);
    if (!p || !*query)
        return p;
    char *q = malloc(strlen(p) + strlen(query) + 1);
    if (q) {
        strcpy(q, p);
        strcat(q, query);
    }
    free(p);
    return q;
}

/* ------------------------------------------------------------------ trees */

/* Where a download's body goes (get, and get -r's tar). */
struct get_sink {
    int fd;
    const char *what; /* for errors: the local file, or "stdout", or tar */
};

static int get_write(const char *p, size_t n, void *ud, char *err, size_t errlen)
{
    struct get_sink *g = ud;
    if (write_all(g->fd, p, n) == 0)
        return 0;
    snprintf(err, errlen, "cannot write '%s': %s", g->what, strerror(errno));
    return -1;
}

extern char **environ;

/* Start the local tar with argv, its stdin (to_tar) or its stdout (from tar) a pipe whose
 * other end is returned in *fd. The pid, or -1 after saying why. */
static pid_t tar_start(const char *cmd, char *const argv[], bool to_tar, int *fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fail(cmd, "cannot make a pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_tar ? p[0] : p[1], to_tar ? 0 : 1);
    pid_t pid;
    int e = posix_spawnp(&pid, "tar", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to_tar ? p[0] : p[1]);
    *fd = to_tar ? p[1] : p[0];
    if (e) {
        close(*fd);
        fail(cmd, "cannot run tar: %s (sbx uses the local tar for -r)", strerror(e));
        return -1;
    }
    return pid;
}

/* Wait for tar: true when it exited 0 (else said why on stderr). */
static bool tar_wait(const char *cmd, pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return false;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return true;
    if (WIFEXITED(st))
        fprintf(stderr, "sbx %s: tar exited with status %d\n", cmd, WEXITSTATUS(st));
    else
        fprintf(stderr, "sbx %s: tar was killed by signal %d\n", cmd, WTERMSIG(st));
    return false;
}

/* put -r: LOCAL's tree as a tar stream, extracted by sbxd into target (all or nothing). */
static int put_tree(const struct sbx *s, const struct sbx_cmd *cmd, const char *local,
                    const char *target, bool replace)
{
    char *const argv[] = {"tar", "-c", "-f", "-", "-C", (char *)local, ".", NULL};
    int fd;
    pid_t pid = tar_start(cmd->name, argv, false, &fd);
    if (pid < 0)
        return SBX_FAIL;
    char *path = files_path(target, replace ? "?archive=tar&replace=true" : "?archive=tar");
    int r = SBX_FAIL;
    struct response resp = {0};
    if (!path) {
        fail(cmd->name, "out of memory");
    } else {
        struct request req = {.method = "PUT",
                              .path = path,
                              .upload = true,
                              .upload_fd = fd,
                              .upload_size = -1,
                              .progress = true,
                              .progress_label = local};
        if (http_perform(s, cmd->name, &req, &resp) == 0)
            r = resp.status / 100 == 2 ? SBX_OK : http_report(cmd->name, &resp);
    }
    response_free(&resp);
    free(path);
    close(fd); /* (tar, if still writing, gets EPIPE) */
    if (!tar_wait(cmd->name, pid) && r == SBX_OK)
        r = fail(cmd->name,
                 "'%s' was not read whole: the tree in the workspace lacks what tar "
                 "could not read",
                 local);
    return r;
}

/* get -r: REMOTE's tree as a tar stream, extracted by the local tar into dir (made). */
static int get_tree(const struct sbx *s, const struct sbx_cmd *cmd, const char *remote,
                    const char *dir)
{
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return fail(cmd->name, "cannot make '%s': %s", dir, strerror(errno));
    char *const argv[] = {"tar", "-x", "-f", "-", "--no-same-owner", "-C", (char *)dir, NULL};
    int fd;
    pid_t pid = tar_start(cmd->name, argv, true, &fd);
    if (pid < 0)
        return SBX_FAIL;
    char *path = files_path(remote, "?archive=tar");
    struct get_sink t = {.fd = fd, .what = "the local tar's input"};
    int r = SBX_FAIL;
    if (!path) {
        fail(cmd->name, "out of memory");
    } else {
        struct request req = {.method = "GET",
                              .path = path,
                              .sink = get_write,
                              .sink_ud = &t,
                              .sink_type = "application/x-tar",
                              .progress = true,
                              .progress_label = remote};
        struct response resp;
        if (http_perform(s, cmd->name, &req, &resp) == 0)
            r = resp.status / 100 == 2 ? SBX_OK : http_report(cmd->name, &resp);
        response_free(&resp);
    }
    free(path);
    close(fd); /* the end of the archive */
    if (!tar_wait(cmd->name, pid) && r == SBX_OK)
        r = fail(cmd->name, "the local tar did not extract '%s' whole into '%s'", remote, dir);
    return r;
}

/* ------------------------------------------------------------------ put */

/* --mode: 755 or 0755 into "0755" (what sbxd takes); false when it is not that. */
static bool mode_parse(const char *s, char out[5])
{
    size_t n = strlen(s);
    if (n == 4 && s[0] == '0')
        s++, n--;
    if (n != 3 || strspn(s, "01234567") != 3)
        return false;
    snprintf(out, 5, "0%s", s);
    return true;
}

/* Upload the file local ("-": stdin) to target, with mode (octal, or "" for the default). */
static int put_file(const struct sbx *s, const struct sbx_cmd *cmd, const char *local,
                    const char *target, const char *mode, bool from_stdin)
{
    int fd = from_stdin ? STDIN_FILENO : open(local, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd > STDIN_FILENO)
            close(fd);
        return fail(cmd->name, "cannot open '%s': %s", local, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        if (fd != STDIN_FILENO)
            close(fd);
        return fail(cmd->name, "'%s' is a directory; put -r uploads a tree", local);
    }
    /* A regular file (stdin redirected from one too, from where it stands): its size is
     * known. A pipe, a terminal or a device: sent chunked. */
    int64_t size = -1;
    off_t at = S_ISREG(st.st_mode) ? lseek(fd, 0, SEEK_CUR) : -1;
    if (at >= 0 && at <= st.st_size)
        size = st.st_size - at;

    char query[16] = "";
    if (mode[0])
        snprintf(query, sizeof(query), "?mode=%s", mode);
    char *path = files_path(target, query);
    int r = SBX_FAIL;
    if (!path) {
        fail(cmd->name, "out of memory");
    } else {
        struct request req = {.method = "PUT",
                              .path = path,
                              .upload = true,
                              .upload_fd = fd,
                              .upload_size = size,
                              .progress = true,
                              .progress_label = from_stdin ? "stdin" : local};
        struct response resp;
        if (http_perform(s, cmd->name, &req, &resp) == 0)
            r = resp.status / 100 == 2 ? SBX_OK : http_report(cmd->name, &resp);
        response_free(&resp);
    }
    free(path);
    if (fd != STDIN_FILENO)
        close(fd);
    return r;
}

int cmd_put(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"mode", required_argument, NULL, 'm'},
                                          {"recursive", no_argument, NULL, 'r'},
                                          {"replace", no_argument, NULL, 'R'},
                                          {NULL, 0, NULL, 0}};
    char mode[5] = "";
    bool tree = false, replace = false;
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "m:r", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c == 'r' || c == 'R') {
            tree = true;
            replace |= c == 'R';
            continue;
        }
        if (c != 'm')
            return SBX_USAGE;
        if (!mode_parse(optarg, mode))
            return usage_error(cmd->name,
                               "--mode wants permissions in octal like 0644 or 755, "
                               "not '%s'",
                               optarg);
    }
    int n = argc - optind;
    if (n < 1 || n > 2)
        return usage_error(cmd->name, n < 1 ? "what to upload? sbx put LOCAL [REMOTE]"
                                            : "too many arguments: sbx put LOCAL [REMOTE]");
    const char *local = argv[optind], *remote = n == 2 ? argv[optind + 1] : NULL;
    bool from_stdin = strcmp(local, "-") == 0;
    char base[NAME_MAX + 1] = "";
    if (from_stdin && (!remote || ends_with_slash(remote)))
        return usage_error(cmd->name, "uploading stdin needs a REMOTE file name");
    if (tree && (from_stdin || mode[0]))
        return usage_error(cmd->name, "-r uploads a directory: neither '-' nor --mode");
    if (!from_stdin && !base_name(local, base, sizeof(base))) {
        if (!tree)
            return usage_error(cmd->name, "'%s' is not a file name", local);
        if (!remote)
            return usage_error(cmd->name, "'%s' names no directory; give REMOTE", local);
    }

    /* REMOTE omitted: the file's own name in the workspace root; REMOTE ending in '/': that
     * name in that directory, as cp and scp do. */
    char target[PATH_MAX + NAME_MAX + 2];
    if (!remote)
        snprintf(target, sizeof(target), "%s", base);
    else if (ends_with_slash(remote))
        snprintf(target, sizeof(target), "%s%s", remote, base);
    else
        snprintf(target, sizeof(target), "%s", remote);

    if (tree) {
        struct stat dst;
        if (stat(local, &dst) < 0 || !S_ISDIR(dst.st_mode))
            return fail(cmd->name, "'%s' is not a directory", local);
        return put_tree(s, cmd, local, target, replace);
    }
    return put_file(s, cmd, local, target, mode, from_stdin);
}

/* ------------------------------------------------------------------ get */

/*
 * Where a download is written until it is complete. Normally an O_TMPFILE: it has no name,
 * so if anything fails (sbx killed included) the kernel drops it and nothing is left. Where
 * the filesystem has no O_TMPFILE, a hidden ".NAME.sbx-XXXXXXXXXXXX" next to the target,
 * removed on failure and on SIGINT, SIGTERM, SIGHUP and SIGQUIT.
 */
struct tmpout {
    int dirfd;
    int fd;
    bool anonymous;
    char name[NAME_MAX + 1]; /* the temporary name, once it has one */
    char dest[NAME_MAX + 1]; /* the final name, in dirfd */
};

/* The only mutable global of sbx: a signal handler has nothing else to find the named
 * temporary file by. */
static volatile sig_atomic_t tmp_armed;
static int tmp_dirfd = -1;
static char tmp_name[NAME_MAX + 1];

static void tmp_on_signal(int sig)
{
    if (tmp_armed)
        unlinkat(tmp_dirfd, tmp_name, 0); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void tmp_arm(const struct tmpout *t)
{
    tmp_dirfd = t->dirfd;
    memcpy(tmp_name, t->name, sizeof(tmp_name));
    tmp_armed = 1;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], tmp_on_signal);
}

/* A random temporary name for dest: ".dest.sbx-" and 12 hex digits, cut to fit NAME_MAX. */
static void tmp_name_new(char *out, const char *dest)
{
    unsigned char rnd[6] = {0};
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        /* Good enough to avoid collisions: O_EXCL and EEXIST retries catch the rest. */
        unsigned v = (unsigned)getpid() ^ (unsigned)(uintptr_t)out;
        memcpy(rnd, &v, sizeof(v));
    }
    snprintf(out, NAME_MAX + 1, ".%.*s.sbx-%02x%02x%02x%02x%02x%02x", NAME_MAX - 22, dest, rnd[0],
             rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
}

static int tmp_open(const char *cmd, struct tmpout *t, const char *dest_path)
{
    memset(t, 0, sizeof(*t));
    t->fd = t->dirfd = -1;
    char dir[PATH_MAX];
    const char *slash = strrchr(dest_path, '/');
    if (slash)
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - dest_path + 1), dest_path);
    else
        snprintf(dir, sizeof(dir), ".");
    const char *name = slash ? slash + 1 : dest_path;
    if ((size_t)snprintf(t->dest, sizeof(t->dest), "%s", name) >= sizeof(t->dest))
        return fail(cmd, "cannot create '%s': %s", dest_path, strerror(ENAMETOOLONG));
    t->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (t->dirfd < 0)
        return fail(cmd, "cannot write into '%s': %s", dir, strerror(errno));
    t->fd = openat(t->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (t->fd >= 0) {
        t->anonymous = true;
        return SBX_OK;
    }
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT)
        return fail(cmd, "cannot write into '%s': %s", dir, strerror(errno));
    for (int attempt = 0; attempt < 16 && t->fd < 0; attempt++) {
        tmp_name_new(t->name, t->dest);
        t->fd = openat(t->dirfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (t->fd < 0 && errno != EEXIST)
            break;
    }
    if (t->fd < 0)
        return fail(cmd, "cannot create a file in '%s': %s", dir, strerror(errno));
    tmp_arm(t);
    return SBX_OK;
}

/* Drop what was written: nothing is left under any name. */
static void tmp_discard(struct tmpout *t)
{
    if (t->fd >= 0)
        close(t->fd);
    if (!t->anonymous && t->name[0])
        unlinkat(t->dirfd, t->name, 0);
    tmp_armed = 0;
    if (t->dirfd >= 0)
        close(t->dirfd);
    t->fd = t->dirfd = -1;
}

/* Give the complete file its name: flushed to disk first, so that the name never points at
 * an empty file after a crash; then renamed over the target in one step. */
static int tmp_commit(const char *cmd, struct tmpout *t, const char *dest_path)
{
    if (fsync(t->fd) < 0)
        return fail(cmd, "cannot write '%s': %s", dest_path, strerror(errno));
    if (t->anonymous) {
        /* linkat cannot replace a file: link under a temporary name, rename over the target. */
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", t->fd);
        int rc = -1;
        for (int attempt = 0; attempt < 16; attempt++) {
            tmp_name_new(t->name, t->dest);
            rc = linkat(AT_FDCWD, proc, t->dirfd, t->name, AT_SYMLINK_FOLLOW);
            if (rc < 0 && errno == ENOENT) /* no /proc: the privileged way, as root */
                rc = linkat(t->fd, "", t->dirfd, t->name, AT_EMPTY_PATH);
            if (rc == 0 || errno != EEXIST)
                break;
        }
        if (rc < 0) {
            t->name[0] = '\0';
            return fail(cmd, "cannot create '%s': %s", dest_path, strerror(errno));
        }
        t->anonymous = false; /* it has a name now: tmp_discard (or a signal) removes it */
        tmp_arm(t);
    }
    if (renameat(t->dirfd, t->name, t->dirfd, t->dest) < 0)
        return fail(cmd, "cannot create '%s': %s", dest_path, strerror(errno));
    tmp_armed = 0;
    t->name[0] = '\0';
    return SBX_OK;
}

/* GET /files/REMOTE (?lines= when lines) into fd; SBX_OK or an exit status. */
static int get_into(const struct sbx *s, const char *cmd, const char *remote, int fd,
                    const char *what, bool progress, const char *lines)
{
    char q[96] = "";
    if (lines)
        snprintf(q, sizeof(q), "?lines=%s%s", lines + 1, lines[0] == 'n' ? "&numbers=true" : "");
    char *path = files_path(remote, q);
    if (!path)
        return fail(cmd, "out of memory");
    struct get_sink g = {.fd = fd, .what = what};
    struct request req = {.method = "GET",
                          .path = path,
                          .sink = get_write,
                          .sink_ud = &g,
                          .sink_type = lines ? "text/plain" : "application/octet-stream",
                          .progress = progress,
                          .progress_label = remote};
    struct response resp;
    int r = SBX_FAIL;
    if (http_perform(s, cmd, &req, &resp) < 0)
        r = SBX_FAIL;
    else if (resp.status / 100 != 2)
        r = http_report(cmd, &resp);
    else if (response_is_json(&resp))
        r = fail(cmd, "'%s' is a directory; 'sbx ls' lists it", remote);
    else
        r = SBX_OK;
    response_free(&resp);
    free(path);
    return r;
}

int cmd_get(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"recursive", no_argument, NULL, 'r'},
                                          {"lines", required_argument, NULL, 'l'},
                                          {"numbers", no_argument, NULL, 'n'},
                                          {NULL, 0, NULL, 0}};
    int c;
    bool tree = false, numbers = false;
    char lines[80] = ""; /* 'n' or ' ' (numbers or not), then START:END as given */
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "rl:n", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c == 'l' &&
            (strlen(optarg) > 40 || !*optarg || strspn(optarg, "0123456789:-") != strlen(optarg)))
            return usage_error(cmd->name, "--lines takes START:END (line numbers), not '%s'",
                               optarg);
        if (c == 'l')
            snprintf(lines, sizeof(lines), " %s", optarg);
        else if (c == 'n')
            numbers = true;
        else if (c == 'r')
            tree = true;
        else
            return SBX_USAGE;
    }
    if (numbers && !lines[0])
        return usage_error(cmd->name, "--numbers goes with --lines");
    if (lines[0] && tree)
        return usage_error(cmd->name, "--lines reads a file, not a tree (-r)");
    if (numbers)
        lines[0] = 'n';
    const char *lq = lines[0] ? lines : NULL;
    int n = argc - optind;
    if (n < 1 || n > 2)
        return usage_error(cmd->name, n < 1 ? "what to download? sbx get REMOTE [LOCAL]"
                                            : "too many arguments: sbx get REMOTE [LOCAL]");
    const char *remote = argv[optind], *local = n == 2 ? argv[optind + 1] : NULL;
    if (local && !*local)
        return usage_error(cmd->name, "LOCAL is empty");
    if (tree) {
        char base[NAME_MAX + 1];
        if (local && strcmp(local, "-") == 0)
            return usage_error(cmd->name, "-r extracts into a directory, not '-'");
        if (!local && !base_name(remote, base, sizeof(base)))
            return usage_error(cmd->name, "'%s' names no directory; give LOCAL", remote);
        return get_tree(s, cmd, remote, local ? local : base);
    }
    if ((local && strcmp(local, "-") == 0) || (lq && !local))
        /* No bar over a terminal that shows the file itself. Lines go to stdout unless a
         * LOCAL is named. */
        return get_into(s, cmd->name, remote, STDOUT_FILENO, "stdout", !isatty(STDOUT_FILENO), lq);

    /* LOCAL omitted: the remote's name here; LOCAL a directory: that name in it. */
    char base[NAME_MAX + 1];
    bool named = base_name(remote, base, sizeof(base));
    struct stat st;
    char dest[PATH_MAX];
    bool into_dir =
        local && ((stat(local, &st) == 0 && S_ISDIR(st.st_mode)) || ends_with_slash(local));
    if (!local || into_dir) {
        if (!named)
            return usage_error(cmd->name, "'%s' names no file; give LOCAL", remote);
        if (local)
            snprintf(dest, sizeof(dest), "%s%s%s", local, ends_with_slash(local) ? "" : "/", base);
        else
            snprintf(dest, sizeof(dest), "%s", base);
    } else {
        snprintf(dest, sizeof(dest), "%s", local);
    }
    if (!dest[0] || ends_with_slash(dest))
        return usage_error(cmd->name, "'%s' is not a file name", dest);

    struct tmpout t;
    int r = tmp_open(cmd->name, &t, dest);
    if (r == SBX_OK)
        r = get_into(s, cmd->name, remote, t.fd, dest, true, lq);
    if (r == SBX_OK)
        r = tmp_commit(cmd->name, &t, dest);
    tmp_discard(&t);
    return r;
}

/* ------------------------------------------------------------------ ls */

/* One row: mode, size, modified_at, name ('/' after a directory, '@' after a symlink). */
static void ls_row(const cJSON *e, const char *name)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(e, "mode");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(e, "size");
    const cJSON *mtime = cJSON_GetObjectItemCaseSensitive(e, "modified_at");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    printf("%-4s  %12.0f  %-24s  ", cJSON_IsString(mode) ? mode->valuestring : "?",
           cJSON_IsNumber(size) ? size->valuedouble : 0.0,
           cJSON_IsString(mtime) ? mtime->valuestring : "?");
    put_escaped(stdout, name);
    fputs(strcmp(t, "directory") == 0 ? "/\n" : strcmp(t, "symlink") == 0 ? "@\n" : "\n", stdout);
}

/*
 * Page through the listing of dir. Without want, print every entry; with want, print only the
 * entry of that name (shown as label) and set *found. SBX_OK or an exit status.
 */
static int ls_dir(const struct sbx *s, const char *cmd, const char *dir, const char *want,
                  const char *label, bool *found)
{
    for (long offset = 0;;) {
        char query[64];
        snprintf(query, sizeof(query), "?offset=%ld&limit=%d", offset, SBX_LS_PAGE);
        char *path = files_path(dir, query);
        if (!path)
            return fail(cmd, "out of memory");
        struct request req = {.method = "GET", .path = path};
        struct response resp;
        int rc = http_perform(s, cmd, &req, &resp);
        free(path);
        if (rc < 0) {
            response_free(&resp);
            return SBX_FAIL;
        }
        if (resp.status != 200) {
            int r = http_report(cmd, &resp);
            response_free(&resp);
            return r;
        }
        const cJSON *entries = cJSON_GetObjectItemCaseSensitive(resp.json, "entries");
        const cJSON *total = cJSON_GetObjectItemCaseSensitive(resp.json, "total");
        if (!cJSON_IsArray(entries) || !cJSON_IsNumber(total)) {
            response_free(&resp);
            return fail(cmd, "sbxd's listing of '%s' is malformed", dir);
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, entries)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (!cJSON_IsString(name))
                continue;
            if (!want) {
                ls_row(e, name->valuestring);
            } else if (strcmp(name->valuestring, want) == 0) {
                ls_row(e, label);
                *found = true;
            }
        }
        int got = cJSON_GetArraySize(entries);
        offset += got;
        bool more = got > 0 && (double)offset < total->valuedouble && !(found && *found);
        response_free(&resp);
        if (!more)
            break;
    }
    return fflush(stdout) == 0 ? SBX_OK : fail(cmd, "cannot write to stdout: %s", strerror(errno));
}

int cmd_ls(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    int c;
    opt_reset();
    if ((c = opt_next(cmd->name, argc, argv, "", NULL)) != -1)
        return c == 'h' ? cmd_print_help(cmd) : SBX_USAGE;
    if (argc - optind > 1)
        return usage_error(cmd->name, "one path at a time: sbx ls [PATH]");
    const char *path = optind < argc ? argv[optind] : "";

    /* HEAD says whether it is a directory (JSON) or a file, without downloading the file. */
    char *hp = files_path(path, "");
    if (!hp)
        return fail(cmd->name, "out of memory");
    struct request head = {.method = "HEAD", .path = hp};
    struct response resp;
    int r = http_perform(s, cmd->name, &head, &resp);
    bool is_dir = response_is_json(&resp);
    long status = resp.status;
    response_free(&resp);
    if (r < 0) {
        free(hp);
        return SBX_FAIL;
    }
    if (status != 200) {
        /* A HEAD answer has no body: ask again with GET for sbxd's message. */
        struct request get = {.method = "GET", .path = hp};
        r = http_perform(s, cmd->name, &get, &resp) < 0 ? SBX_FAIL
            : resp.status / 100 != 2                    ? http_report(cmd->name, &resp)
                                                        : fail(cmd->name, "'%s' changed", path);
        response_free(&resp);
        free(hp);
        return r;
    }
    free(hp);
    if (is_dir)
        return ls_dir(s, cmd->name, path, NULL, NULL, NULL);

    /* A file: its row, from the listing of its parent (which has its mode and exact time). */
    char name[NAME_MAX + 1];
    if (!base_name(path, name, sizeof(name)))
        return fail(cmd->name, "'%s' names no file", path);
    char parent[PATH_MAX];
    size_t plen = strlen(path);
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    plen -= strlen(name);
    snprintf(parent, sizeof(parent), "%.*s", (int)plen, path);
    bool found = false;
    r = ls_dir(s, cmd->name, parent, name, path, &found);
    if (r == SBX_OK && !found)
        r = fail(cmd->name, "'%s' vanished while it was listed", path);
    return r;
}

/* ------------------------------------------------------------------ rm, mkdir */

/* One request per path; every path is tried, and the status says whether all worked. */
static int each_path(const struct sbx *s, const char *cmd, int argc, char **argv,
                     const char *method, const char *query, bool ignore_missing)
{
    int r = SBX_OK;
    for (int i = optind; i < argc; i++) {
        char *path = files_path(argv[i], query);
        if (!path)
            return fail(cmd, "out of memory");
        struct request req = {.method = method, .path = path};
        struct response resp;
        if (http_perform(s, cmd, &req, &resp) < 0) {
            /* No answer: the next paths would fare no better. */
            response_free(&resp);
            free(path);
            return SBX_FAIL;
        }
        if (resp.status / 100 != 2 && !(ignore_missing && resp.status == 404)) {
            r = http_report(cmd, &resp);
        }
        response_free(&resp);
        free(path);
    }
    return r;
}

int cmd_rm(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"recursive", no_argument, NULL, 'r'},
                                          {"force", no_argument, NULL, 'f'},
                                          {NULL, 0, NULL, 0}};
    bool recursive = false, force = false;
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "rRf", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c == 'r' || c == 'R')
            recursive = true;
        else if (c == 'f')
            force = true;
        else
            return SBX_USAGE;
    }
    if (optind >= argc)
        return usage_error(cmd->name, "what to delete? sbx rm [-r] [-f] PATH...");
    return each_path(s, cmd->name, argc, argv, "DELETE", recursive ? "?recursive=true" : "", force);
}

int cmd_mkdir(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    int c;
    opt_reset();
    /* -p is what sbxd always does; accepted so that habits do not fail. */
    while ((c = opt_next(cmd->name, argc, argv, "p", NULL)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c != 'p')
            return SBX_USAGE;
    }
    if (optind >= argc)
        return usage_error(cmd->name, "which directory? sbx mkdir PATH...");
    return each_path(s, cmd->name, argc, argv, "PUT", "?type=directory", false);
}
