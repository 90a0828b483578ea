/*
 * The daemon's peak RSS, which a CLONE_VM child inherits at execve. spawn_init opens
 * /proc/self/clear_refs once (spawn_peak_init); whoever made the daemon hold a lot of memory
 * says so (spawn_note_daemon_peak, any thread); spawn_child resets the peak before its next
 * clone (spawn_peak_reset_if_grown). Where that reset works, children always share the
 * daemon's memory (spawn_peak_resets(), fixed at start: spawn_pool.c needs it). Where it does
 * not (gVisor), each spawn looks: a child shares the daemon's memory only while the daemon's
 * all-time peak is within SBXD_SHARED_PEAK_SLACK_KB of its current size (spawn_vm_shared()).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sbxd/exec_limits.h"
#include "sbxd/spawn.h"
#include "spawn_internal.h"

/* Whether the daemon's peak RSS can be reset (clear_refs): then children always share its
 * memory until execve (fast, see spawn.h). */
static bool share_vm;

/* Without the reset: /proc/self/statm, kept open, for the daemon's current size. */
static int statm_fd = -1;
static long page_kb = 4;

/* /proc/self/clear_refs, kept open, and whether the daemon's peak RSS may have grown since
 * it was last reset: see spawn_peak_reset_if_grown. */
static int clear_refs_fd = -1;
static int peak_stale = 1;

/*
 * At execve the kernel folds the outgoing mm's peak RSS into the child's maxrss, and a CLONE_VM
 * child's outgoing mm is the daemon's. So once one large request has raised the daemon's peak,
 * every later command would report it as its own memory_peak_bytes. Whoever makes the daemon
 * hold a lot of memory for a while says so (spawn_note_daemon_peak), and the next spawn resets
 * the peak to the current size (value 5 of clear_refs). The reset takes the mm's write lock,
 * so it is done only then, not on every spawn. (Best effort: gVisor has no clear_refs.)
 */
void spawn_peak_reset_if_grown(void)
{
    if (clear_refs_fd < 0 || !__atomic_exchange_n(&peak_stale, 0, __ATOMIC_ACQ_REL))
        return;
    if (write(clear_refs_fd, "5", 1) < 0) {
        close(clear_refs_fd);
        clear_refs_fd = -1;
    }
}

void spawn_note_daemon_peak(size_t bytes)
{
    if (bytes >= (size_t)SBXD_PEAK_SLACK_KB * 1024)
        __atomic_store_n(&peak_stale, 1, __ATOMIC_RELEASE);
}

void spawn_peak_init(void)
{
    clear_refs_fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    share_vm = clear_refs_fd >= 0 && write(clear_refs_fd, "5", 1) == 1;
    if (!share_vm) {
        statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
        long ps = sysconf(_SC_PAGESIZE);
        page_kb = ps >= 1024 ? ps / 1024 : 4;
    }
}

bool spawn_peak_resets(void)
{
    return share_vm;
}

/*
 * Without the reset, a child that shares the daemon's memory reports the daemon's all-time
 * peak (getrusage's maxrss of the daemon: what the kernel folds in at execve) as the floor of
 * its memory_peak_bytes, where a copy reports the daemon's current size. So it shares only
 * while the two are within SBXD_SHARED_PEAK_SLACK_KB: the floor is then at most that much
 * above a copy's, and the spawn is the fast one (under gVisor a copy costs a new address
 * space: about 5 ms, a third of the command). Once the daemon has held a lot (a large output,
 * a large body), children are copies until its size comes back near that peak. Two calls a
 * spawn, a few microseconds.
 */
bool spawn_vm_shared(void)
{
    if (share_vm)
        return true;
    struct rusage ru;
    char buf[128];
    if (statm_fd < 0 || getrusage(RUSAGE_SELF, &ru) < 0)
        return false;
    ssize_t n = pread(statm_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char *end;
    (void)strtol(buf, &end, 10); /* the first field is the size; the resident set is next */
    long resident = strtol(end, &end, 10);
    if (resident <= 0)
        return false;
    return (long)ru.ru_maxrss <= resident * page_kb + SBXD_SHARED_PEAK_SLACK_KB;
}
