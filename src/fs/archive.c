/*
 * Whole trees as tar or zip (archive.h): libarchive loaded at first use, and the names an
 * archive's entries may have. Packing is in archive_pack.c; an extraction of sbxd's own
 * making in archive_extract.c (its life), archive_tree.c (its entries) and archive_links.c
 * (where its symlinks lead).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/archive.h"

#include "archive_internal.h"

struct ar_lib ar_lib;
locale_t ar_utf8_locale;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[200]; /* why libarchive is not there ("" once loaded) */

static void load(void)
{
    ar_utf8_locale = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
    if (!ar_utf8_locale) {
        snprintf(load_error, sizeof(load_error), "no C.UTF-8 locale: %s", strerror(errno));
        return;
    }
    void *h = dlopen(AR_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof(load_error), "cannot load %s (Debian's libarchive13): %s",
                 AR_LIBRARY, dlerror());
        return;
    }
#define AR_LOAD(f)                                                                                 \
    if (!(ar_lib.f = (__typeof__(&f))dlsym(h, #f))) {                                              \
        snprintf(load_error, sizeof(load_error), "%s has no %s", AR_LIBRARY, #f);                  \
        return;                                                                                    \
    }
    AR_FUNCS(AR_LOAD)
#undef AR_LOAD
}

int ar_load(struct sbxd_err *err)
{
    snprintf(load_error, sizeof(load_error), "libarchive is not loaded");
    pthread_once(&load_once, load);
    if (ar_lib.archive_entry_mtime_is_set)
        return 0;
    return sbxd_fail(err, SBXD_E_UNAVAILABLE, ENOSYS, "archives are unavailable: %s", load_error);
}

const char *ar_why(struct archive *a)
{
    const char *s = ar_lib.archive_error_string(a);
    return s ? s : "unknown error";
}

bool ar_is_temp(const char *name)
{
    return strncmp(name, ".sbxd-upload-", 13) == 0 || strncmp(name, ".sbxd-copy-", 11) == 0 ||
           strncmp(name, ".sbxd-extract-", 14) == 0;
}

int ar_open_sub(int dfd, const char *name)
{
    struct stat ls, st;
    if (fstatat(dfd, name, &ls, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (!S_ISDIR(ls.st_mode)) {
        errno = S_ISLNK(ls.st_mode) ? ELOOP : ENOTDIR;
        return -1;
    }
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_dev != ls.st_dev || st.st_ino != ls.st_ino)) {
        close(fd);
        errno = ELOOP; /* swapped for a link since */
        return -1;
    }
    return fd;
}

/* ---------------------------------------------------------------------------------- */
/* Names and links                                                                      */

int ar_entry_name(const char *name, char *out, struct sbxd_err *err)
{
    if (!name)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "an entry has no name");
    if (name[0] == '/')
        return sbxd_fail(err, SBXD_E_DENIED, EPERM, "'%.200s' is an absolute name", name);
    size_t len = 0;
    const char *s = name;
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return sbxd_fail(err, SBXD_E_DENIED, EPERM, "'%.200s' holds \"..\"", name);
        if (n > NAME_MAX)
            return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "'%.200s' has a name too long",
                             name);
        if (n && !(n == 1 && s[0] == '.')) {
            if (len + n + 2 > PATH_MAX)
                return sbxd_fail(err, SBXD_E_INVALID, ENAMETOOLONG, "'%.200s' is too long", name);
            if (len)
                out[len++] = '/';
            memcpy(out + len, s, n);
            len += n;
        }
        s = *end ? end + 1 : end;
    }
    out[len] = '\0';
    return 0;
}

bool ar_link_inside(const char *name, const char *target, unsigned depth)
{
    if (!target || !*target || target[0] == '/')
        return false;
    /* The link's directory: the destination's depth, and the components of name but its
     * last. */
    long level = depth;
    for (const char *s = name; (s = strchr(s, '/')); s++)
        level++;
    const char *s = target;
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            if (--level < 0)
                return false;
        } else if (n && !(n == 1 && s[0] == '.')) {
            level++;
        }
        s = *end ? end + 1 : end;
    }
    return true;
}
