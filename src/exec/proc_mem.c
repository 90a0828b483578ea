/* The resident memory of a process tree, from /proc (proc_mem.h). */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/proc_mem.h"

/* A process's parent and resident pages, from /proc: false when it is gone. */
static bool proc_rss(pid_t pid, pid_t *ppid, uint64_t *pages)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* (the command's name may hold anything) */
    int pp = 0;
    if (!close_paren || sscanf(close_paren + 1, " %*c %d", &pp) != 1)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    f = fopen(path, "re");
    unsigned long long size = 0, resident = 0;
    bool ok = f && fscanf(f, "%llu %llu", &size, &resident) == 2;
    if (f)
        fclose(f);
    *ppid = pp;
    *pages = ok ? resident : 0;
    return true;
}

/* Whether this kernel has /proc/PID/task/TID/children files (gVisor has none). */
static bool have_children_files(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        char p[64];
        snprintf(p, sizeof(p), "/proc/self/task/%ld/children", (long)syscall(SYS_gettid));
        h = access(p, R_OK) == 0;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

/* The resident pages of pid and of every process beneath it, found through the children
 * files of its threads; -1 when a tree is too wide or deep to be read this way. A process
 * gone meanwhile counts 0. */
static int64_t tree_pages(pid_t pid, int depth)
{
    if (depth > 16)
        return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0; /* gone */
    pid_t pp;
    uint64_t pages = 0;
    int64_t sum = proc_rss(pid, &pp, &pages) ? (int64_t)pages : 0;
    for (struct dirent *e; sum >= 0 && (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char cp[320], buf[1024];
        snprintf(cp, sizeof(cp), "/proc/%d/task/%.255s/children", (int)pid, e->d_name);
        FILE *f = fopen(cp, "re");
        if (!f)
            continue; /* the thread ended */
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        if (n == sizeof(buf) - 1) {
            sum = -1;
            break;
        }
        char *t = buf, *end;
        for (long child; sum >= 0 && (child = strtol(t, &end, 10)) > 0; t = end) {
            int64_t sub = tree_pages((pid_t)child, depth + 1);
            sum = sub < 0 ? -1 : sum + sub;
        }
    }
    closedir(d);
    return sum;
}

uint64_t proc_tree_rss(pid_t top)
{
    if (top <= 0)
        return 0;
    int64_t pages = have_children_files() ? tree_pages(top, 0) : -1;
    if (pages >= 0)
        return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    struct proc {
        pid_t pid, ppid;
        uint64_t pages;
        bool in;
    } *v = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 256;
            struct proc *nv = realloc(v, nc * sizeof(*nv));
            if (!nv)
                break;
            v = nv;
            cap = nc;
        }
        v[n].pid = (pid_t)atoi(e->d_name);
        v[n].in = v[n].pid == top;
        if (proc_rss(v[n].pid, &v[n].ppid, &v[n].pages))
            n++;
    }
    if (d)
        closedir(d);
    /* Mark the descendants: passes until none is added (a tree is shallow). */
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; !v[i].in && j < n; j++)
                if (v[j].in && v[i].ppid == v[j].pid)
                    v[i].in = more = true;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].in)
            sum += v[i].pages;
    free(v);
    return sum * (uint64_t)sysconf(_SC_PAGESIZE);
}
