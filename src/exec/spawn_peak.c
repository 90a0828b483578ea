/*
 * The daemon's peak RSS, which a CLONE_VM child inherits at execve. spawn_init opens
 * /proc/self/clear_refs once (spawn_peak_init); whoever made the daemon hold a lot of memory
 * says so (spawn_note_daemon_peak, any thread); spawn_child resets the peak before its next
 * clone (spawn_peak_reset_if_grown). Children share the daemon's memory only where that reset
 * works: spawn_vm_shared() is fixed by spawn_peak_init and read by spawn.c and spawn_pool.c.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <unistd.h>

#include "sbxd/exec_limits.h"
#include "sbxd/spawn.h"
#include "spawn_internal.h"

/* Whether children share the daemon's memory until execve (fast, see spawn.h). Only where
 * the daemon's peak RSS can be reset: otherwise every command's memory_peak_bytes would
 * carry the daemon's all-time peak, so without clear_refs (gVisor) children get a copy. */
static bool share_vm;

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
}

bool spawn_vm_shared(void)
{
    return share_vm;
}
