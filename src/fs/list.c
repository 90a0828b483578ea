/*
 * list.c - a directory listed a piece at a time (fs_list_*), in memory bounded whatever the
 * directory holds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/fs_limits.h"

#include "files_internal.h"

/*
 * A listing holds the directory (libc's DIR: one fixed buffer of getdents records) and, for a
 * sorted one, the names read ahead: one arena of NUL-terminated names and their offsets, grown
 * up to SBXD_LIST_SORT_BYTES and SBXD_LIST_SORT_MAX, and freed once handed out. A name read
 * past those bounds waits in `spill`; from then on names come straight from the directory.
 * What a listing holds is thus bounded whatever the directory holds: a 200,000-entry
 * directory, which 20 concurrent listings once turned into 1.5 GB of sbxd, is read through
 * the same bounded buffers as a small one.
 */
struct fs_lister {
    DIR *dir;
    bool eof;
    bool sorted;
    char *names;      /* the names read ahead */
    size_t names_len; /* bytes used */
    size_t names_cap;
    uint32_t *at; /* offset of each, in the order they are handed out */
    size_t count, cap, next;
    bool spilled; /* spill holds the name read after them */
    char spill[NAME_MAX + 1];
};

/* The next name from the directory ("." and ".." passed over), NULL at its end (l->eof) or
 * on an error (err). */
static const char *list_read(struct fs_lister *l, struct sbxd_err *err)
{
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(l->dir);
        if (!de) {
            if (errno == 0) {
                l->eof = true;
                return NULL;
            }
            int e = errno;
            sbxd_fail_errno(err, fs_errno_kind(e), e, "cannot read the directory");
            return NULL;
        }
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            return de->d_name;
    }
}

/* Keep name in the arena; false when the bounds leave no room for it (or memory ran out). */
static bool list_hold(struct fs_lister *l, const char *name)
{
    size_t n = strlen(name) + 1;
    if (l->count >= SBXD_LIST_SORT_MAX || l->names_len + n > SBXD_LIST_SORT_BYTES)
        return false;
    if (l->names_len + n > l->names_cap) {
        size_t cap = l->names_cap ? l->names_cap : 4096;
        while (cap < l->names_len + n)
            cap *= 2;
        if (cap > SBXD_LIST_SORT_BYTES)
            cap = SBXD_LIST_SORT_BYTES;
        char *nn = realloc(l->names, cap);
        if (!nn)
            return false;
        l->names = nn;
        l->names_cap = cap;
    }
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint32_t *na = realloc(l->at, cap * sizeof(*na));
        if (!na)
            return false;
        l->at = na;
        l->cap = cap;
    }
    memcpy(l->names + l->names_len, name, n);
    l->at[l->count++] = (uint32_t)l->names_len;
    l->names_len += n;
    return true;
}

static int name_cmp(const void *a, const void *b, void *names)
{
    return strcmp((const char *)names + *(const uint32_t *)a,
                  (const char *)names + *(const uint32_t *)b);
}

struct fs_lister *fs_list_open(int dfd, int flags, struct sbxd_err *err)
{
    struct fs_lister *l = calloc(1, sizeof(*l));
    if (!l) {
        close(dfd);
        sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    l->dir = fdopendir(dfd);
    if (!l->dir) {
        int e = errno;
        close(dfd);
        free(l);
        sbxd_fail_errno(err, SBXD_E_INTERNAL, e, "cannot read the directory");
        return NULL;
    }
    /* Read ahead: the whole directory when it is small enough to sort, else (and always
     * without sorting) one name, so that a directory that cannot be read fails here. */
    const char *name;
    while ((name = list_read(l, err))) {
        if ((flags & FS_LIST_SORTED) && list_hold(l, name))
            continue;
        snprintf(l->spill, sizeof(l->spill), "%s", name);
        l->spilled = true;
        break;
    }
    if (!name && !l->eof) {
        fs_list_close(l);
        return NULL;
    }
    if ((flags & FS_LIST_SORTED) && l->eof) {
        if (l->count > 1) /* an empty directory has no array at all */
            qsort_r(l->at, l->count, sizeof(*l->at), name_cmp, l->names);
        l->sorted = true;
    }
    return l;
}

/* The next name: those read ahead, then the spilled one, then the directory's. */
static const char *list_name(struct fs_lister *l, struct sbxd_err *err)
{
    if (l->next < l->count)
        return l->names + l->at[l->next++];
    if (l->names) {
        /* All handed out: the arena's memory goes back now, not at the listing's end. */
        free(l->names);
        free(l->at);
        l->names = NULL;
        l->at = NULL;
        l->names_len = l->names_cap = l->count = l->cap = l->next = 0;
    }
    if (l->spilled) {
        l->spilled = false;
        return l->spill;
    }
    if (l->eof)
        return NULL;
    return list_read(l, err);
}

int fs_list_next(struct fs_lister *l, struct fs_entry *e, struct sbxd_err *err)
{
    const char *name;
    while ((name = list_name(l, err))) {
        struct stat st;
        /* Relative to the listed directory's fd, and of the entry itself, never of what a
         * symlink names: no path is resolved again, so a rename or a planted link cannot make
         * the listing describe anything but this directory's entries. */
        if (fstatat(dirfd(l->dir), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        fs_entry_from_stat(e, name, &st);
        return 1;
    }
    return l->eof ? 0 : -1;
}

int fs_list_skip(struct fs_lister *l, uint64_t n, uint64_t *passed, struct sbxd_err *err)
{
    *passed = 0;
    while (*passed < n && list_name(l, err))
        (*passed)++;
    return (*passed == n || l->eof) ? 0 : -1;
}

int fs_list_dirfd(const struct fs_lister *l)
{
    return dirfd(l->dir);
}

bool fs_list_sorted(const struct fs_lister *l)
{
    return l->sorted;
}

void fs_list_close(struct fs_lister *l)
{
    if (!l)
        return;
    if (l->dir)
        closedir(l->dir);
    free(l->names);
    free(l->at);
    free(l);
}
