#include <cap-ng.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sbxd/harden.h"
#include "sbxd/limits.h"

/*
 * The deny-list, each with the attack it stops. EPERM, not a kill: SECCOMP_RET_KILL_PROCESS
 * kills only the calling thread under gVisor, and a clean error is easier to understand.
 */
const char *const harden_denied_syscalls[] = {
    "ptrace",           /* reading or steering other processes of the same user */
    "process_vm_readv", /* the same, without ptrace */
    "process_vm_writev",
    "mount", /* changing what the filesystem shows */
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare", /* new namespaces: the doorway to most container escapes */
    "setns",
    "bpf", /* kernel attack surface */
    "perf_event_open",
    "userfaultfd",    /* a classic tool for winning kernel races */
    "io_uring_setup", /* large attack surface, bypasses syscall filtering */
    "io_uring_enter",
    "io_uring_register",
    "keyctl", /* the kernel keyring is not namespaced */
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at", /* opens files by handle, around path checks (the "shocker" escape) */
    "name_to_handle_at",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "iopl",
    "ioperm",
    "syslog",
    /* Another process's memory and fds, taken without ptrace: pidfd_getfd copies an fd out
     * of a process of the same user (another command's stdin pipe or a socket), kcmp probes
     * its fds and memory layout, process_madvise reaches into its memory. */
    "pidfd_getfd",
    "kcmp",
    "process_madvise",
    "modify_ldt", /* x86 segment descriptors: old kernel bugs, no use to a 64-bit program */
    NULL,
};

/* Namespace flags that clone(2) must not carry (the clone-based twin of unshare). */
static const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

enum filter_kind {
    FILTER_DENY_LIST,  /* the deny-list of harden_denied_syscalls and clone flags */
    FILTER_SPAWNER,    /* pidns mode, on spawning threads: the deny-list but what a namespace's
                        * init needs (mount; clone with CLONE_NEWPID, CLONE_NEWNS
                        * or, for a daemon without CAP_SYS_ADMIN, CLONE_NEWUSER) and
                        * what entering a namespace slot needs (setns) */
    FILTER_NS_INIT,    /* pidns mode, loaded by each init and each command in a namespace slot:
                        * exactly what FILTER_SPAWNER left out */
    FILTER_NO_NETWORK, /* only: sockets of AF_UNIX alone (stacked on the deny-list) */
};

/*
 * How an argument rule must be written. The kernel reads an `int` argument (socket's family,
 * personality's persona) from the low 32 bits of the register and ignores the rest, while a
 * seccomp filter sees all 64: a deny rule "a0 == AF_INET" is passed by 0x100000000|AF_INET,
 * which the kernel still takes as AF_INET. So a rule on a 32-bit argument is an allow-list
 * (deny "a0 != value": any high bit is refused too), or masks with 0xffffffff. clone's flags
 * are an unsigned long to the kernel: the masked tests of ns_flags see the whole value.
 */

/* personality(2) values a command may set: PER_LINUX, PER_LINUX32 and UNAME26 (0, 8,
 * 0x20000, 0x20008), and the query 0xffffffff, which changes nothing. Refused: the flags
 * that weaken a process's memory protections (READ_IMPLIES_EXEC makes every readable mapping
 * executable, MMAP_PAGE_ZERO maps page 0, ADDR_NO_RANDOMIZE and the ADDR_* layouts undo
 * randomisation) and the foreign execution domains. */
#define PERSONA_FREE (0x0008U | 0x0020000U)

/*
 * libseccomp allows one comparison per argument in a rule, and rules only add refusals, so
 * "persona not in the allowed set" is written as a union of masked tests on the low 32 bits:
 * among the bits outside PERSONA_FREE, some bit set next to some bit clear (going round them
 * in a ring: any value that is neither all-clear nor all-set has such a pair); or all of them
 * set with a free bit clear (only 0xffffffff itself may set them all); or any high bit.
 */
static int add_personality_rules(scmp_filter_ctx ctx)
{
    uint32_t ring[32];
    int n = 0;
    for (int b = 0; b < 32; b++)
        if (!(PERSONA_FREE & (1U << b)))
            ring[n++] = 1U << b;
    const uint32_t fixed = ~PERSONA_FREE;
    int e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                             SCMP_A0(SCMP_CMP_GT, 0xffffffffULL));
    for (int i = 0; !e && i < n; i++) {
        uint32_t set = ring[i], clear = ring[(i + 1) % n];
        e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, (uint64_t)(set | clear), (uint64_t)set));
    }
    for (int b = 0; !e && b < 32; b++) {
        uint32_t bit = 1U << b;
        if (!(PERSONA_FREE & bit))
            continue;
        e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, (uint64_t)(fixed | bit), (uint64_t)fixed));
    }
    return e;
}

/* In FILTER_SPAWNER's gap (see there). */
static bool init_needs(const char *syscall_name, uint64_t clone_flag)
{
    return (syscall_name &&
            (strcmp(syscall_name, "mount") == 0 || strcmp(syscall_name, "setns") == 0)) ||
           clone_flag == CLONE_NEWPID || clone_flag == CLONE_NEWNS || clone_flag == CLONE_NEWUSER;
}

/*
 * clone with CLONE_NEWIPC, which makes each command's IPC namespace: refused unless both its
 * child_tid and tls arguments are the key (which of the two is the 4th and which the 5th
 * argument depends on the architecture). The kernel reads neither without CLONE_CHILD_SETTID,
 * CLONE_CHILD_CLEARTID or CLONE_SETTLS, so sbxd's spawning threads pass the key there at no
 * cost, and every command inherits a filter that refuses the flag to it: it never knows the
 * key (64 random bits in sbxd's memory and in the filter, which only CAP_SYS_ADMIN may read
 * back). A second filter that each command loaded instead cost ~0.05 ms per command here (its
 * load and JIT), as much as the namespace itself. (Without CAP_SYS_ADMIN, which no command has,
 * the kernel refuses the flag too; the filter keeps the deny-list whole.)
 */
static int add_ipc_rules(scmp_filter_ctx ctx, uint64_t key)
{
    int e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 2,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWIPC, CLONE_NEWIPC),
                             SCMP_A3(SCMP_CMP_NE, key));
    return e ? e
             : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 2,
                                SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWIPC, CLONE_NEWIPC),
                                SCMP_A4(SCMP_CMP_NE, key));
}

/* ipc_key: 0, or the key that lets clone make an IPC namespace (add_ipc_rules). */
static int build(struct sock_fprog *out, enum filter_kind kind, uint64_t ipc_key,
                 struct sbxd_err *err)
{
    int rc = -1, mfd = -1;
    void *buf = NULL;
    /* Syscalls of another ABI (x32, i386 via int 0x80) are refused as a whole. */
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "seccomp_init failed");
    int e = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM));
    /* no_new_privs is set before the filter is loaded, by harden_thread. */
    if (!e)
        e = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    /* A binary tree over syscall numbers rather than a chain every allowed call walks. */
    if (!e)
        e = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (kind != FILTER_NO_NETWORK) {
        /* FILTER_SPAWNER takes what the init does not need, FILTER_NS_INIT the rest. */
        bool init_part = kind == FILTER_NS_INIT;
        for (int i = 0; !e && harden_denied_syscalls[i]; i++) {
            int nr = seccomp_syscall_resolve_name(harden_denied_syscalls[i]);
            if (nr == __NR_SCMP_ERROR)
                continue; /* not on this architecture */
            if (kind != FILTER_DENY_LIST && init_needs(harden_denied_syscalls[i], 0) != init_part)
                continue;
            e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        }
        for (size_t i = 0; !e && i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
            if (kind != FILTER_DENY_LIST && init_needs(NULL, ns_flags[i]) != init_part)
                continue;
            if (ns_flags[i] == CLONE_NEWIPC && ipc_key)
                e = add_ipc_rules(ctx, ipc_key);
            else
                e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
        }
        /* clone3 passes its flags in memory a filter cannot read. ENOSYS, not EPERM: libc
         * then falls back to clone, which the rules above do check. */
        if (!e && kind != FILTER_NS_INIT)
            e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        if (!e && kind != FILTER_NS_INIT)
            e = add_personality_rules(ctx);
    } else {
        /* An allow-list: AF_INET, AF_INET6, AF_PACKET, AF_NETLINK, AF_VSOCK and every family
         * a later kernel adds are all refused, and so is an AF_UNIX with high bits set. */
        e = e ? e
              : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                                 SCMP_A0(SCMP_CMP_NE, AF_UNIX));
        e = e ? e
              : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1,
                                 SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    }
    if (e) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, -e, "cannot build the seccomp filter");
        goto out;
    }
    /* libseccomp writes the BPF to an fd; keep it in memory for the children. */
    mfd = memfd_create("sbxd-seccomp", MFD_CLOEXEC);
    if (mfd < 0 || (e = seccomp_export_bpf(ctx, mfd)) < 0) {
        sbxd_fail_errno(err, SBXD_E_INTERNAL, mfd < 0 ? errno : -e, "cannot export seccomp BPF");
        goto out;
    }
    off_t len = lseek(mfd, 0, SEEK_END);
    if (len <= 0 || len % (off_t)sizeof(struct sock_filter) || !(buf = malloc((size_t)len)) ||
        pread(mfd, buf, (size_t)len, 0) != len) {
        sbxd_fail(err, SBXD_E_INTERNAL, EIO, "cannot read the seccomp BPF back");
        free(buf);
        goto out;
    }
    out->len = (unsigned short)(len / (off_t)sizeof(struct sock_filter));
    out->filter = buf;
    rc = 0;
out:
    if (mfd >= 0)
        close(mfd);
    seccomp_release(ctx);
    return rc;
}

/*
 * Landlock's ABI, declared here because the build host's headers may predate it: the
 * ruleset attribute grew a field for network rules (ABI 4) and one for scopes (ABI 6).
 */
struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_ACCESS_FS_MAKE_BLOCK   (1ULL << 11)
#define LL_ACCESS_FS_REFER        (1ULL << 13)
#define LL_RULE_PATH_BENEATH      1
#define LL_SCOPE_SIGNAL           (1ULL << 1)

struct ll_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

/*
 * The ruleset every command restricts itself with. What it forbids on files is what a
 * command cannot do anyway (make a block device: it has no CAP_MKNOD): Landlock wants one
 * handled right, and the point is the domain itself. From ABI 2 a domain also refuses to
 * move or link a file from one directory to another (the "refer" right, denied unless a rule
 * grants it: EXDEV, which made `mv a/f b/` copy and delete, and `ln a/f b/` fail): a rule on
 * "/" grants it everywhere. A process in a domain may not ptrace,
 * nor open /proc/PID/mem, nor take fds with pidfd_getfd from, a process outside it (ABI 1);
 * with the signal scope (ABI 6) it may not signal one either. Every command makes a domain
 * of its own from this ruleset, so two commands are outside each other's, and sbxd and its
 * helpers outside both. gVisor and kernels before 5.13 have no Landlock: 0.
 */
static void landlock_setup(struct harden_plan *p)
{
    p->landlock_fd = -1;
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
    if (abi < 1)
        return;
    struct ll_ruleset_attr attr = {.handled_access_fs = LL_ACCESS_FS_MAKE_BLOCK};
    size_t size = sizeof(attr.handled_access_fs);
    if (abi >= 6) {
        attr.scoped = LL_SCOPE_SIGNAL;
        size = sizeof(attr);
    }
    if (abi >= 2)
        attr.handled_access_fs |= LL_ACCESS_FS_REFER;
    int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (fd < 0)
        return;
    if (abi >= 2) {
        struct ll_path_beneath_attr rule = {.allowed_access = LL_ACCESS_FS_REFER,
                                            .parent_fd = open("/", O_PATH | O_CLOEXEC)};
        int rc = rule.parent_fd < 0
                     ? -1
                     : (int)syscall(SYS_landlock_add_rule, fd, LL_RULE_PATH_BENEATH, &rule, 0);
        if (rule.parent_fd >= 0)
            close(rule.parent_fd);
        if (rc < 0) { /* (a domain without the rule would refuse every move) */
            close(fd);
            return;
        }
    }
    p->landlock_fd = fd;
    p->landlock_abi = (int)abi;
}

enum harden_scope harden_landlock_scope(const struct harden_plan *p)
{
    if (p->landlock_fd < 0)
        return HARDEN_SCOPE_NONE;
    return p->landlock_abi >= 6 ? HARDEN_SCOPE_PTRACE_SIGNAL : HARDEN_SCOPE_PTRACE;
}

int harden_init(struct harden_plan *p, uid_t uid, gid_t gid, bool pidns, bool ipcns,
                struct sbxd_err *err)
{
    memset(p, 0, sizeof(*p));
    landlock_setup(p);
    p->switch_user = geteuid() == 0;
    p->uid = p->switch_user ? uid : geteuid();
    p->gid = p->switch_user ? gid : getegid();
    p->drop_caps = true;
    /*
     * The bounding set is emptied here, once, for the daemon itself: capabilities belong to
     * threads, threads inherit them from their creator and children from their parent, so
     * every command starts with an empty bounding set at no cost per command (dropping 41
     * capabilities one prctl at a time in each child cost ~0.1 ms). The daemon keeps its
     * permitted and effective sets (to switch users, chown, signal); the bounding set only
     * limits what an execve may grant, and sbxd never execs. This must run before any thread
     * exists. It takes CAP_SETPCAP: a daemon without it keeps the set, and /healthz says so.
     */
    if (capng_get_caps_process() == 0 && capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP)) {
        capng_clear(CAPNG_SELECT_BOUNDS);
        if (capng_apply(CAPNG_SELECT_BOUNDS) < 0) {
            harden_free(p);
            return sbxd_fail(err, SBXD_E_INTERNAL, EPERM,
                             "cannot empty the capability bounding set");
        }
        p->drop_bounding = true;
    }
    p->pidns = pidns;
    /* The key that lets the spawning threads' clone make a command's IPC namespace (never 0,
     * the value of an argument left out). */
    while (ipcns && p->clone_key == 0)
        if (getrandom(&p->clone_key, sizeof(p->clone_key), 0) != (ssize_t)sizeof(p->clone_key)) {
            harden_free(p);
            return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot draw a random key");
        }
    if (build(&p->filter, pidns ? FILTER_SPAWNER : FILTER_DENY_LIST, p->clone_key, err) < 0 ||
        (pidns && build(&p->filter_init, FILTER_NS_INIT, 0, err) < 0) ||
        build(&p->filter_nonet, FILTER_NO_NETWORK, 0, err) < 0) {
        harden_free(p);
        return -1;
    }
    p->seccomp = true;
    return 0;
}

void harden_free(struct harden_plan *p)
{
    free(p->filter.filter);
    free(p->filter_init.filter);
    free(p->filter_nonet.filter);
    if (p->landlock_fd >= 0)
        close(p->landlock_fd);
    memset(p, 0, sizeof(*p));
    p->landlock_fd = -1;
}

/*
 * Loading a filter costs ~0.1 ms (the kernel converts and JIT-compiles it), evaluating it a
 * few ns per syscall, and children inherit their parent thread's filter by reference. So
 * the deny-list is loaded once on each thread that spawns (with no_new_privs, which it
 * requires), and every command that thread starts inherits it for free. The daemon's own
 * spawning threads are then held to the deny-list too; sbxd needs none of those syscalls.
 */
static __thread bool thread_filtered;

int harden_thread(const struct harden_plan *p, struct sbxd_err *err)
{
    if (thread_filtered || !p->seccomp)
        return 0;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot set no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p->filter, 0, 0) < 0)
        return sbxd_fail_errno(err, SBXD_E_INTERNAL, errno, "cannot load the seccomp filter");
    thread_filtered = true;
    return 0;
}

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

NO_SANITIZE int harden_child_landlock(const struct harden_plan *p, const char **step)
{
    if (p->landlock_fd < 0)
        return 0;
    /* Landlock takes no_new_privs (or CAP_SYS_ADMIN); harden_child sets it again later. */
    if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        *step = "no_new_privs";
        return -1;
    }
    if (syscall(SYS_landlock_restrict_self, p->landlock_fd, 0) < 0) {
        *step = "landlock";
        return -1;
    }
    return 0;
}

NO_SANITIZE int harden_child(const struct harden_plan *p, bool network, uid_t uid,
                             const char **step)
{
    if (uid == (uid_t)-1)
        uid = p->uid;
    /* Files are shared with the other uids of the range through the group. */
    if (p->group_share)
        syscall(SYS_umask, 002);
    /* Under memory pressure the kernel kills a command, never the daemon (where its OOM
     * killer weighs the score at all: not gVisor's, where the write costs ~0.4 ms). */
    int fd = p->oom_adjust ? (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/oom_score_adj",
                                          O_WRONLY | O_CLOEXEC)
                           : -1;
    if (fd >= 0) {
        syscall(SYS_write, fd, "1000", 4);
        syscall(SYS_close, fd);
    }
    /* Below the daemon for the CPU: a command that spins on every core still leaves sbxd
     * the time to answer (CFS gives nice 10 about a ninth of nice 0's share). */
    syscall(SYS_setpriority, PRIO_PROCESS, 0, SBXD_COMMAND_NICE);
    /* (The bounding set is empty already: inherited from the daemon, see harden_init.) */
    if (p->drop_caps)
        syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    /* Raw syscalls: glibc's set*id wrappers signal every thread, which a vfork child must
     * not do. Groups first, while still allowed to change them. */
    if (p->switch_user) {
        if (syscall(SYS_setgroups, 0, NULL) < 0) {
            *step = "setgroups";
            return -1;
        }
        if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) < 0) {
            *step = "setresgid";
            return -1;
        }
        if (syscall(SYS_setresuid, uid, uid, uid) < 0) {
            *step = "setresuid";
            return -1;
        }
    }
    if (p->drop_caps) {
        /* Leaving uid 0 cleared permitted and effective; inheritable stays unless cleared,
         * and a non-root daemon's own capabilities are cleared here too. */
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2] = {{0, 0, 0}, {0, 0, 0}};
        if (syscall(SYS_capset, &hdr, data) < 0) {
            *step = "capset";
            return -1;
        }
    }
    /* execve of a setuid binary must not raise privileges. (Inherited already from the
     * spawning thread when seccomp is on; set it here in every case.) */
    if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        *step = "no_new_privs";
        return -1;
    }
    /* The deny-list is inherited (harden_thread); only a request without network pays for
     * loading a second, small filter on top of it. */
    if (p->seccomp && !network &&
        syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p->filter_nonet, 0, 0) < 0) {
        *step = "seccomp";
        return -1;
    }
    return 0;
}
