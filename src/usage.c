/*
 * usage.c - how full the sandbox is (usage.h): a few small files of sbxd's cgroup v2 or of
 * /proc, two statvfs and the counters of the exec service, the background processes and
 * the contexts. No fork, no directory walk: GET /usage is polled.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "sbxd/background.h"
#include "sbxd/cgroup.h"
#include "sbxd/context.h"
#include "sbxd/exec_service.h"
#include "sbxd/timeutil.h"
#include "sbxd/usage.h"

#define CG2_MOUNT "/sys/fs/cgroup"

/* Where CPU use is read from: the cgroup's cpu.stat; /proc/stat (the machine's); else, as
 * under gVisor, whose /proc/stat is all zeros, sbxd's rusage and its reaped children's. */
enum cpu_src { CPU_NONE, CPU_CGROUP, CPU_PROC, CPU_RUSAGE };
static const char *const CPU_SRC_NAMES[] = {"none", "cgroup", "proc", "rusage"};

/* CPU time used and what it is a share of, at one moment. */
struct cpu_sample {
    int64_t t_ns;     /* monotonic */
    uint64_t busy;    /* cgroup, rusage: microseconds; /proc/stat: ticks not idle */
    uint64_t total;   /* /proc/stat: every tick (0 for the others) */
    enum cpu_src src; /* CPU_NONE: nothing could be read */
};

static struct {
    pthread_mutex_t lock;
    int cgfd; /* sbxd's cgroup v2 (O_PATH), -1 when it has none */
    int rootfd;
    const char *workspace;
    const struct exec_service *exec;
    struct cpu_sample last, prior; /* the last two samples at least the interval apart */
} U = {.lock = PTHREAD_MUTEX_INITIALIZER, .cgfd = -1, .rootfd = -1};

/* A small file's text (at most len - 1 bytes) into buf: its length, or -1. */
static ssize_t read_small(int dirfd, const char *path, char *buf, size_t len)
{
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n + 1 < len) {
        ssize_t r = read(fd, buf + n, len - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* The value after `key` (at a line's start) in text, as a number; false when absent. */
static bool keyed_u64(const char *text, const char *key, uint64_t *v)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, kl) == 0) {
            char *end;
            *v = strtoull(p + kl, &end, 10);
            return end != p + kl;
        }
    return false;
}

/* sbxd's cgroup v2 directory when the probe did not claim one: the "0::" line of
 * /proc/self/cgroup beneath the cgroup2 mount; -1 when there is none (cgroup v1, no mount). */
static int own_cgroup(void)
{
    char buf[1024], path[PATH_MAX];
    if (read_small(AT_FDCWD, "/proc/self/cgroup", buf, sizeof(buf)) < 0)
        return -1;
    const char *l = strstr(buf, "0::");
    if (l != buf && (!l || l[-1] != '\n'))
        return -1;
    l += 3;
    int n = (int)strcspn(l, "\n");
    if (snprintf(path, sizeof(path), CG2_MOUNT "%.*s", n, l) >= (int)sizeof(path))
        return -1;
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct statfs sf;
    /* Only a cgroup2 mount: on a v1 host /sys/fs/cgroup holds other controllers' files. */
    if (fd >= 0 && (fstatfs(fd, &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void cpu_sample_take(struct cpu_sample *s)
{
    char buf[512];
    *s = (struct cpu_sample){.t_ns = time_mono_ns()};
    if (U.cgfd >= 0 && read_small(U.cgfd, "cpu.stat", buf, sizeof(buf)) > 0 &&
        keyed_u64(buf, "usage_usec ", &s->busy)) {
        s->src = CPU_CGROUP;
        return;
    }
    /* The first line of /proc/stat: user nice system idle iowait irq softirq steal. */
    unsigned long long v[8] = {0};
    if (read_small(AT_FDCWD, "/proc/stat", buf, sizeof(buf)) > 0 &&
        sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) >= 4) {
        s->busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        s->total = s->busy + v[3] + v[4];
        if (s->total) {
            s->src = CPU_PROC;
            return;
        }
    }
    /* A command's time counts here once it has ended and was reaped. */
    struct rusage self, kids;
    if (getrusage(RUSAGE_SELF, &self) == 0 && getrusage(RUSAGE_CHILDREN, &kids) == 0) {
        const struct timeval *tv[] = {&self.ru_utime, &self.ru_stime, &kids.ru_utime,
                                      &kids.ru_stime};
        s->busy = s->total = 0;
        for (int i = 0; i < 4; i++)
            s->busy += (uint64_t)tv[i]->tv_sec * 1000000 + (uint64_t)tv[i]->tv_usec;
        s->src = CPU_RUSAGE;
    }
}

void usage_init(const struct cg_root *cg, int rootfd, const char *workspace,
                const struct exec_service *exec)
{
    U.rootfd = rootfd;
    U.workspace = workspace;
    U.exec = exec;
    /* The probe's base holds sbxd and every command's leaf: the whole sandbox's use. */
    U.cgfd = cg && cg->available ? fcntl(cg->basefd, F_DUPFD_CLOEXEC, 0) : own_cgroup();
    cpu_sample_take(&U.last);
    U.prior = U.last;
}

/* CPUs available: the cgroup's cpu.max quota (limit, in CPUs) where it sets one, at most the
 * affinity mask's count. */
static unsigned cpus_available(double *limit)
{
    cpu_set_t set;
    unsigned n = sched_getaffinity(0, sizeof(set), &set) == 0 ? (unsigned)CPU_COUNT(&set) : 0;
    if (!n) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (unsigned)c : 1;
    }
    *limit = 0;
    char buf[64];
    unsigned long long quota, period;
    if (U.cgfd >= 0 && read_small(U.cgfd, "cpu.max", buf, sizeof(buf)) > 0 &&
        sscanf(buf, "%llu %llu", &quota, &period) == 2 && quota && period) {
        *limit = (double)quota / (double)period;
        if (*limit < n)
            n = (unsigned)(*limit + 0.999);
    }
    return n ? n : 1;
}

/* cpu_used_pct against the sample taken at least the interval before now. */
static void cpu_used(struct usage *u)
{
    struct cpu_sample now;
    cpu_sample_take(&now);
    pthread_mutex_lock(&U.lock);
    bool spaced = now.t_ns - U.last.t_ns >= (int64_t)USAGE_MIN_INTERVAL_MS * 1000000;
    struct cpu_sample from = spaced ? U.last : U.prior;
    if (spaced) {
        U.prior = U.last;
        U.last = now;
    }
    pthread_mutex_unlock(&U.lock);
    u->cpu_source = CPU_SRC_NAMES[now.src];
    int64_t dt = now.t_ns - from.t_ns;
    u->cpu_interval_ms = dt > 0 ? (uint64_t)(dt / 1000000) : 0;
    double pct = 0;
    if (now.src != CPU_NONE && now.src == from.src && dt > 0 && now.busy >= from.busy) {
        double cpus = u->cpu_limit > 0 ? u->cpu_limit : u->cpu_count;
        if (now.src != CPU_PROC)
            pct = (double)(now.busy - from.busy) * 1e5 / ((double)dt / 1e3 * cpus);
        else if (now.total > from.total)
            pct = (double)(now.busy - from.busy) * 100.0 / (double)(now.total - from.total);
    }
    u->cpu_used_pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
}

/* Memory used and its limit: memory.current and memory.max of the cgroup, else (or for an
 * unlimited one, the total) MemTotal - MemAvailable and MemTotal of /proc/meminfo. */
static void memory(struct usage *u)
{
    char buf[2048];
    uint64_t cur = 0, max = 0, total = 0, avail = 0;
    bool has_cur = U.cgfd >= 0 && read_small(U.cgfd, "memory.current", buf, sizeof(buf)) > 0 &&
                   sscanf(buf, "%" SCNu64, &cur) == 1;
    bool has_max = has_cur && read_small(U.cgfd, "memory.max", buf, sizeof(buf)) > 0 &&
                   sscanf(buf, "%" SCNu64, &max) == 1;
    if (has_max) {
        u->mem_used = cur;
        u->mem_total = max;
        u->memory_source = "cgroup";
        return;
    }
    if (read_small(AT_FDCWD, "/proc/meminfo", buf, sizeof(buf)) > 0) {
        keyed_u64(buf, "MemTotal:", &total);
        if (!keyed_u64(buf, "MemAvailable:", &avail))
            keyed_u64(buf, "MemFree:", &avail);
    }
    total *= 1024;
    avail *= 1024;
    u->mem_total = total;
    u->mem_used = has_cur ? cur : total > avail ? total - avail : 0;
    u->memory_source = has_cur ? "cgroup+meminfo" : "meminfo";
}

static void disk(struct usage_disk *d, const char *name, int fd, const char *path)
{
    struct statvfs v;
    *d = (struct usage_disk){.name = name, .path = path};
    if ((fd >= 0 ? fstatvfs(fd, &v) : statvfs(path, &v)) < 0)
        return;
    d->ok = true;
    d->total = (uint64_t)v.f_blocks * v.f_frsize;
    d->used = (uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize;
    d->free = (uint64_t)v.f_bavail * v.f_frsize;
}

void usage_read(struct usage *u)
{
    *u = (struct usage){0};
    u->cpu_count = cpus_available(&u->cpu_limit);
    cpu_used(u);
    memory(u);
    disk(&u->disks[0], "workspace", U.rootfd, U.workspace ? U.workspace : "");
    disk(&u->disks[1], "tmp", -1, "/tmp");
    u->commands = U.exec ? exec_service_running(U.exec) : 0;
    u->processes = bg_running();
    struct ctx **all = NULL;
    size_t n = ctx_list(&all);
    for (size_t i = 0; i < n; i++)
        ctx_put(all[i]);
    free(all);
    u->contexts = (unsigned)n;
}

static void disk_write(struct jsonw *w, const struct usage_disk *d)
{
    jw_obj_begin(w);
    jw_key(w, "name");
    jw_str(w, d->name);
    jw_key(w, "path");
    jw_str(w, d->path);
    const char *keys[] = {"used", "total", "free"};
    const uint64_t vals[] = {d->used, d->total, d->free};
    for (int i = 0; i < 3; i++) {
        jw_key(w, keys[i]);
        if (d->ok)
            jw_uint(w, vals[i]);
        else
            jw_null(w);
    }
    jw_obj_end(w);
}

void usage_write(struct jsonw *w, const struct usage *u)
{
    jw_key(w, "ts");
    jw_int(w, (int64_t)time(NULL));
    jw_key(w, "cpu_count");
    jw_uint(w, u->cpu_count);
    jw_key(w, "cpu_limit");
    if (u->cpu_limit > 0)
        jw_double(w, u->cpu_limit, 3);
    else
        jw_null(w);
    jw_key(w, "cpu_used_pct");
    jw_double(w, u->cpu_used_pct, 2);
    jw_key(w, "cpu_interval_ms");
    jw_uint(w, u->cpu_interval_ms);
    jw_key(w, "cpu_source");
    jw_str(w, u->cpu_source);
    jw_key(w, "mem_used");
    jw_uint(w, u->mem_used);
    jw_key(w, "mem_total");
    jw_uint(w, u->mem_total);
    jw_key(w, "memory_source");
    jw_str(w, u->memory_source);
    /* E2B's disk_used and disk_total: the workspace's file system. */
    jw_key(w, "disk_used");
    jw_uint(w, u->disks[0].used);
    jw_key(w, "disk_total");
    jw_uint(w, u->disks[0].total);
    jw_key(w, "disks");
    jw_arr_begin(w);
    for (int i = 0; i < 2; i++)
        disk_write(w, &u->disks[i]);
    jw_arr_end(w);
    jw_key(w, "commands_running");
    jw_uint(w, u->commands);
    jw_key(w, "processes_running");
    jw_uint(w, u->processes);
    jw_key(w, "contexts");
    jw_uint(w, u->contexts);
}
