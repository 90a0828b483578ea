/*
 * ipc_clear.h - what some users left in the kernel's IPC objects removed (a reset's Clean):
 * System V shared memory segments, message queues and semaphore sets, and POSIX message
 * queues. They live outside every file tree a reset empties, and the next task would find them
 * by their keys or names (and read what they hold).
 *
 * System V objects are listed from /proc/sysvipc/{shm,msg,sem}; one whose owner or creator uid
 * is one of the users' is removed by its id (IPC_RMID) by the calling thread with that uid as
 * its effective uid, its capabilities gone with the switch: the kernel itself checks that the
 * object is still that user's when it removes it, so an id reused by another owner since the
 * listing is never removed. POSIX queues are listed in a mqueue file system that a helper
 * mounts in a mount namespace of its own (never seen outside it), where it unlinks the users'.
 */
#ifndef SBXD_IPC_CLEAR_H
#define SBXD_IPC_CLEAR_H

#include <stdbool.h>

#include "sbxd/files.h"

struct ipc_clear_stats {
    unsigned removed;     /* objects and queues removed */
    unsigned failed;      /* found, and could not be removed */
    int first_errno;      /* of the first failure */
    bool sysv_unlisted;   /* no /proc/sysvipc (gVisor): System V objects were not looked for */
    bool mqueue_unlisted; /* no mqueue file system could be mounted: POSIX queues neither */
};

/* Remove what the users of the spans own. Needs root (the uid switch, the helper's mount);
 * 0, or -1 when something found could not be removed (st says how many). */
int ipc_clear_users(const struct fs_uid_span *spans, unsigned n, struct ipc_clear_stats *st);

#endif
