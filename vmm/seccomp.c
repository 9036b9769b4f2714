// SPDX-License-Identifier: GPL-2.0
/*
 * The running monitor's seccomp filters: one per thread type, compiled
 * from the groups below (each syscall with why it is there) and the
 * table that says which groups each thread type has. This file is the
 * one place the allowed sets are kept; Documentation/security.md
 * describes the layer.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <linux/io_uring.h>
#include <linux/sockios.h> /* SIOCOUTQ */
#include <linux/tcp.h>	   /* TCP_INFO */
#include <netinet/in.h>
#include <linux/kvm.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h> /* RENAME_NOREPLACE */
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/thread-filter.h"
#include "snapshot/file.h"
#include "vmm/seccomp.h"

#define SECCOMP_NR_FCHMODAT2 452 /* x86-64; libseccomp 2.5 has no name */
#define SECCOMP_EXIT_STATUS  125 /* VMM_EXIT_VMM_ERROR */
/* socket()'s type argument without SOCK_NONBLOCK and SOCK_CLOEXEC. */
#define SECCOMP_SOCK_TYPE_MASK 0xf
/*
 * A dirfd argument is an int: the kernel reads the low 32 bits only. A
 * descriptor (0..INT_MAX) has bit 31 clear and, as the int the callers
 * pass, the upper half zero; AT_FDCWD (-100) and every negative value
 * has bit 31 set, whatever the upper half holds.
 */
#define SECCOMP_FD_MASK	    0xffffffff80000000ULL
#define SECCOMP_FD_SIGN_BIT 0x80000000ULL

/* One syscall a group allows (or fails with err), maybe only for args. */
struct rule {
	int nr;		      /* SCMP_SYS() */
	int err;	      /* 0: allowed; else it fails with this errno */
	bool log_dirfd;	      /* the args compare with the console log's dir */
	unsigned int nr_args; /* up to 2 */
	struct scmp_arg_cmp args[2];
};

/* Initializers, so one rule is one line of the tables below. */
/* clang-format off */
#define ALLOW(name) { .nr = SCMP_SYS(name) }
#define ARG_EQ(i, v) { .arg = (i), .op = SCMP_CMP_EQ, .datum_a = (v) }
#define ARG_NE(i, v) { .arg = (i), .op = SCMP_CMP_NE, .datum_a = (v) }
#define NR_ARGS(...) ARRAY_SIZE(((struct scmp_arg_cmp[]){ __VA_ARGS__ }))
#define ALLOW_IF(name, ...)						\
	{								\
		.nr = SCMP_SYS(name),					\
		.nr_args = NR_ARGS(__VA_ARGS__),			\
		.args = { __VA_ARGS__ },				\
	}
#define ARG_MASKED(i, m, v)						\
	{ .arg = (i), .op = SCMP_CMP_MASKED_EQ, .datum_a = (m),		\
	  .datum_b = (v) }
/* Argument i is a descriptor, never AT_FDCWD or another negative. */
#define ARG_FD(i) ARG_MASKED(i, SECCOMP_FD_MASK, 0)
/* Argument i is negative as an int: AT_FDCWD's case. */
#define ARG_NOT_FD(i) ARG_MASKED(i, SECCOMP_FD_SIGN_BIT, SECCOMP_FD_SIGN_BIT)
#define REFUSE_IF(name, e, ...)						\
	{								\
		.nr = SCMP_SYS(name),					\
		.err = (e),						\
		.nr_args = NR_ARGS(__VA_ARGS__),			\
		.args = { __VA_ARGS__ },				\
	}
#define ALLOW_IOCTL(cmd) ALLOW_IF(ioctl, ARG_EQ(1, cmd))
/* clang-format on */

/* Every thread: memory, threads, signals, clocks, fds it was given. */
static const struct rule base[] = {
	/* eventfds, the console, pipes: the fds the thread was handed */
	ALLOW(read),
	ALLOW(write),
	ALLOW(pread64),
	ALLOW(close),
	/*
	 * The rings that exist (every one restricted, lib/evloop.c): submit,
	 * wait, and evloop__cancel()'s registration, nothing else. No
	 * io_uring_setup: no thread may make a ring after start.
	 */
	ALLOW(io_uring_enter),
	ALLOW_IF(io_uring_register, ARG_EQ(1, IORING_REGISTER_SYNC_CANCEL)),
	/*
	 * threads: creation (they inherit the filter), kicks, joins, exits.
	 * clone only with CLONE_THREAD: a thread, never a process (fork,
	 * which would be a way to execve's neighbours and to a child that
	 * outlives the checks). clone3's flags are in a struct the filter
	 * cannot read: ENOSYS, and glibc's pthread_create falls back to
	 * clone.
	 */
	ALLOW_IF(clone, ARG_MASKED(0, CLONE_THREAD, CLONE_THREAD)),
	{ .nr = SCMP_SYS(clone3), .err = ENOSYS },
	ALLOW(set_robust_list),
	ALLOW(rseq),
	ALLOW(futex),
	ALLOW(tgkill),
	ALLOW(gettid),
	ALLOW(getpid),
	ALLOW(rt_sigprocmask),
	ALLOW(rt_sigreturn),
	ALLOW(rt_sigaction), /* glibc sets SIGCANCEL up on first thread */
	ALLOW(sched_yield),
	ALLOW(exit),
	ALLOW(exit_group),
	/* memory: malloc, thread stacks, tear-down */
	ALLOW(brk),
	ALLOW(mmap),
	ALLOW(munmap),
	ALLOW(mprotect),
	ALLOW(madvise),
	ALLOW(mremap), /* realloc of a large (mmapped) block */
	ALLOW(clock_gettime),
	ALLOW(clock_nanosleep),
#if KILN_ASAN
	/*
	 * SAN=1 only (Documentation/fuzzing.md), never in a production
	 * build: what AddressSanitizer's runtime calls on its own as threads
	 * start and end and the process exits: its alternate signal stack,
	 * and the CPUs it may run on (its allocator's caches).
	 */
	ALLOW(sigaltstack),
	ALLOW(sched_getaffinity),
#endif
	/*
	 * The clocks' vDSO entries fall back to the system call when the
	 * clocksource has no vDSO read (a host with an unstable TSC, such
	 * as the nested harness): wolfSSL's certificate dates and timers
	 * (time(), gettimeofday()) reach the kernel there.
	 */
	ALLOW(gettimeofday),
	ALLOW(time),
	ALLOW(clock_getres),
	/* the tty the console set raw, restored at exit; isatty() */
	ALLOW_IOCTL(TCGETS),
	ALLOW_IOCTL(TCSETS),
	ALLOW_IOCTL(TCSETSW),
	/*
	 * Opening files stays forbidden, but as an error, not a trap:
	 * glibc's malloc reads /proc/sys/vm/overcommit_memory the first
	 * time a thread's arena shrinks, and copes with the open failing.
	 * openat's error is the group openat_refused (replaced by
	 * snapshot_files' on the one thread that makes files).
	 */
	{ .nr = SCMP_SYS(open), .err = EACCES },
};

/* Every thread's openat fails with EACCES, as base's open does. */
static const struct rule openat_refused[] = {
	{ .nr = SCMP_SYS(openat), .err = EACCES },
};

/* I/O on sockets the thread holds: poll loops, relays, replies. */
static const struct rule socket_io[] = {
	/* waiting: the API's and the backend relay's poll, vsock's epoll */
	ALLOW(poll),
	ALLOW(ppoll),
	ALLOW(epoll_wait),
	ALLOW(epoll_pwait),
	ALLOW(epoll_ctl),
	/* bytes both ways: MSG_NOSIGNAL writes, relays, fds passed */
	ALLOW(sendto),
	ALLOW(recvfrom),
	ALLOW(sendmsg),
	ALLOW(recvmsg),
	/* half-closes, and O_NONBLOCK on accepted sockets */
	ALLOW(shutdown),
	ALLOW(fcntl),
};

/*
 * New Unix sockets: clients accepted on a listener (the API's, virtio-
 * vsock's), one socketpair per agent connection (the API; the vsock
 * device takes the other end), guest connections connected to
 * "<socket>_PORT" (virtio-vsock), a virtual mount's server connected
 * again (devices/fs/virtual.c). socket() for AF_UNIX only.
 */
static const struct rule socket_unix[] = {
	ALLOW(accept4),
	ALLOW(connect),
	ALLOW(socketpair),
	ALLOW_IF(socket, ARG_EQ(0, AF_UNIX)),
	/* a virtual mount's reconnection: room for its largest packet */
	ALLOW_IF(setsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_SNDBUF)),
};

/*
 * The control API's socket file removed at exit, and start --detach,
 * once the agent answers: the console to /dev/null. vm.grant's scoped
 * sockets made (a stale one found and replaced, bound, mode 0600,
 * listening) and removed.
 */
static const struct rule api[] = {
	ALLOW(unlink), ALLOW(bind),	ALLOW(listen),
	ALLOW(chmod),  ALLOW(fchmodat), ALLOW(newfstatat), /* lstat() */
	ALLOW(dup2),   ALLOW(dup3),
};

/*
 * A vCPU's own: KVM_RUN, the halt probe (KVM_GET_MP_STATE, KVM_GET_REGS),
 * the registers --verbose reports on a triple fault and SIGUSR2's report
 * (KVM_GET_SREGS, KVM_TRANSLATE, read-only, to find the guest's stack;
 * KVM_GET_LAPIC, KVM_GET_MSRS, read-only, its timer and pending vectors).
 */
static const struct rule kvm_vcpu[] = {
	ALLOW_IOCTL(KVM_RUN),
	/* the halt probe */
	ALLOW_IOCTL(KVM_GET_MP_STATE),
	ALLOW_IOCTL(KVM_GET_REGS),
	/* the reports */
	ALLOW_IOCTL(KVM_GET_SREGS),
	ALLOW_IOCTL(KVM_TRANSLATE),
	ALLOW_IOCTL(KVM_GET_LAPIC), /* the timer, pending vectors */
	ALLOW_IOCTL(KVM_GET_MSRS),
};

/* An interrupt raised without an irqfd: the UART's, a device's. */
static const struct rule kvm_irq[] = {
	ALLOW_IOCTL(KVM_IRQ_LINE),
};

/*
 * A cow root over a block store (devices/block/store-cow.c): its worker
 * writes the blocks it fetched into the VM's local layer, the memfd the
 * disk opened at build time.
 */
static const struct rule block_store[] = {
	ALLOW(pwrite64),
};

/* virtio-net's activation tells the tap the driver's offloads. */
static const struct rule tun[] = {
	ALLOW_IOCTL(TUNSETOFFLOAD),
};

/*
 * vm.snapshot's reads of the KVM state (vmm/snapshot.c), made from the
 * API thread while every vCPU waits parked outside KVM_RUN; every one
 * reads, none changes anything. The vCPU's own thread never makes them.
 */
static const struct rule kvm_state[] = {
	/* a parked vCPU's fd (vcpu__save) */
	ALLOW_IOCTL(KVM_GET_MP_STATE),
	ALLOW_IOCTL(KVM_GET_REGS),
	ALLOW_IOCTL(KVM_GET_SREGS),
	ALLOW_IOCTL(KVM_GET_FPU),
	ALLOW_IOCTL(KVM_GET_XSAVE),
	ALLOW_IOCTL(KVM_GET_XSAVE2),
	ALLOW_IOCTL(KVM_GET_XCRS),
	ALLOW_IOCTL(KVM_GET_MSRS),
	ALLOW_IOCTL(KVM_GET_LAPIC),
	ALLOW_IOCTL(KVM_GET_VCPU_EVENTS),
	ALLOW_IOCTL(KVM_GET_DEBUGREGS),
	ALLOW_IOCTL(KVM_GET_CPUID2),
	ALLOW_IOCTL(KVM_GET_TSC_KHZ),
	/* the VM's fd: the irqchip, the PIT, the clock */
	ALLOW_IOCTL(KVM_GET_IRQCHIP),
	ALLOW_IOCTL(KVM_GET_PIT2),
	ALLOW_IOCTL(KVM_GET_CLOCK),
};

/*
 * vm.snapshot's files (snapshot/file.c): it makes its directory and
 * new files in it, writes them and never reads or reopens one. It
 * replaces openat_refused: an argument-less openat rule would override
 * any with arguments (libseccomp), so the error here is for every flags
 * but a new file's, and the directory's rule, which overlaps it, wins
 * (selftests/unit/seccomp.c writes a snapshot and checks both).
 */
static const struct rule snapshot_files[] = {
	/* the directory: made 0700, or taken if the monitor's and 0700 */
	ALLOW(mkdirat),
	ALLOW(fchmod),
	ALLOW(fstat),
	ALLOW(newfstatat), /* glibc's fstat() */
	ALLOW(geteuid),
	/*
	 * the root disk's writable layer, read where it has data (pread64
	 * is in base): a descriptor the disk opened at build time
	 */
	ALLOW(lseek),
	/* the parts: written, the memory file sparse, made durable */
	ALLOW(pwrite64),
	ALLOW(ftruncate),
	ALLOW(fsync),
	/*
	 * exactly a new file (O_CREAT | O_EXCL | O_NOFOLLOW) in the
	 * directory's descriptor; from AT_FDCWD (a file made at any
	 * absolute path) it is the trap, which snapshot/file.c never
	 * reaches (libseccomp 2.5 drops an error rule for that case that
	 * shares its flags argument with the allowing one); the directory
	 */
	ALLOW_IF(openat, ARG_FD(0), ARG_EQ(2, SNAP_OPEN_NEW)),
	ALLOW_IF(openat, ARG_EQ(2, SNAP_OPEN_DIR)),
	REFUSE_IF(openat, EACCES, ARG_NE(2, SNAP_OPEN_NEW)),
};

/*
 * A baseline's capture (vmm/baseline-vm.c): written as vm.snapshot
 * writes (snapshot_files), then renamed into place in the cache, with
 * RENAME_NOREPLACE so that it never replaces an entry.
 */
static const struct rule baseline_publish[] = {
	ALLOW_IF(renameat2, ARG_EQ(4, RENAME_NOREPLACE)),
};

/* The console log's rotation: beneath its directory's descriptor only. */
static const struct rule console_log[] = {
	{ .nr = SCMP_SYS(openat2),
	  .log_dirfd = true,
	  .nr_args = 1,
	  .args = { ARG_EQ(0, 0) } },
	{ .nr = SCMP_SYS(renameat),
	  .log_dirfd = true,
	  .nr_args = 2,
	  .args = { ARG_EQ(0, 0), ARG_EQ(2, 0) } },
	{ .nr = SCMP_SYS(renameat2),
	  .log_dirfd = true,
	  .nr_args = 2,
	  .args = { ARG_EQ(0, 0), ARG_EQ(2, 0) } },
};

/*
 * virtio-fs over host directories (devices/fs/passthrough.c): every name
 * is resolved with openat2() beneath a directory fd (RESOLVE_BENEATH,
 * RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS: a pointer argument, which
 * the filter cannot see, so the virtio-fs threads alone have it), the
 * rest is the *at() family on those fds and plain fd calls; the data
 * path is the device's ring (READV/WRITEV only).
 */
static const struct rule fs_bind[] = {
	/*
	 * Beneath a directory's descriptor only: from AT_FDCWD (any
	 * absolute path) EACCES, as base's open.
	 */
	ALLOW_IF(openat2, ARG_FD(0)),
	REFUSE_IF(openat2, EACCES, ARG_NOT_FD(0)),
	ALLOW(newfstatat),
	ALLOW(fstat),
	ALLOW(statx),
	ALLOW(fstatfs),
	ALLOW(mkdirat),
	/*
	 * Files, FIFOs and sockets (passthrough.c makes nothing else);
	 * a device node would be the host's device: EPERM.
	 */
	ALLOW_IF(mknodat, ARG_MASKED(2, S_IFMT, S_IFREG)),
	ALLOW_IF(mknodat, ARG_MASKED(2, S_IFMT, S_IFIFO)),
	ALLOW_IF(mknodat, ARG_MASKED(2, S_IFMT, S_IFSOCK)),
	REFUSE_IF(mknodat, EPERM, ARG_MASKED(2, S_IFMT, S_IFCHR)),
	REFUSE_IF(mknodat, EPERM, ARG_MASKED(2, S_IFMT, S_IFBLK)),
	ALLOW(symlinkat),
	ALLOW(unlinkat),
	ALLOW(renameat2),
	ALLOW(renameat), /* glibc's renameat2() without flags */
	ALLOW(linkat),
	ALLOW(readlinkat),
	ALLOW(fchmod),
	ALLOW(fchmodat),
	/*
	 * fchmodat2 (Linux 6.6), which glibc tries first for fchmodat().
	 * Older kernels answer ENOSYS and glibc falls back to fchmodat.
	 */
	{ .nr = SECCOMP_NR_FCHMODAT2 },
	ALLOW(fchown),
	ALLOW(fchownat),
	ALLOW(utimensat),
	ALLOW(ftruncate),
	ALLOW(fallocate),
	ALLOW(getdents64),
	ALLOW(lseek),
	ALLOW(fsync),
	ALLOW(fdatasync),
	ALLOW(preadv),
	ALLOW(pwritev),
	ALLOW(pwrite64),
	ALLOW(dup),
	ALLOW(geteuid),
	ALLOW(getegid),
	/*
	 * Ownership "mapped": the user.kiln.stat xattr, of a directory
	 * through a descriptor, of anything else by its one-component name
	 * after fchdir() to its directory (in a working directory of the
	 * device thread's own: unshare(CLONE_FS)).
	 */
	ALLOW(fgetxattr),
	ALLOW(fsetxattr),
	ALLOW(lgetxattr),
	ALLOW(lsetxattr),
	ALLOW(fchdir),
	ALLOW_IF(unshare, ARG_EQ(0, CLONE_FS)),
	/*
	 * Node descriptors closed for the budget and opened again
	 * (devices/fs/passthrough-fds.c): a node's file handle, and with
	 * CAP_DAC_READ_SEARCH the node opened by it (handles the backend
	 * took itself, never the guest's; a jailed vmm gets EPERM and goes
	 * by name).
	 */
	ALLOW(name_to_handle_at),
	ALLOW(open_by_handle_at),
};

/*
 * The egress proxy (net/proxy.c) and the resolver (net/dns.c): upstream
 * IPv4 TCP and UDP sockets. Their sockets in the VM netns are made before
 * the filter, or by the proxy's netns thread (netns below).
 */
static const struct rule egress[] = {
	ALLOW_IF(socket, ARG_EQ(0, AF_INET),
		 { .arg = 1,
		   .op = SCMP_CMP_MASKED_EQ,
		   .datum_a = SECCOMP_SOCK_TYPE_MASK,
		   .datum_b = SOCK_STREAM }),
	ALLOW_IF(socket, ARG_EQ(0, AF_INET),
		 { .arg = 1,
		   .op = SCMP_CMP_MASKED_EQ,
		   .datum_a = SECCOMP_SOCK_TYPE_MASK,
		   .datum_b = SOCK_DGRAM }),
	/* A relayed flow's pipes, and the bytes spliced through them. */
	ALLOW(pipe2),
	ALLOW(splice),
};

/*
 * The proxy's and the resolver's flows: SO_LINGER for the proxy's resets
 * (also when the main thread tears the proxy down with flows open),
 * SO_RCVLOWAT for a fast direction's batched reads (net/proxy-internal.h),
 * SO_ERROR after a connect, getsockname for an accepted flow's original
 * destination; a kernel-relayed flow's byte counts (TCP_INFO, SIOCINQ
 * for what it held unread when paired, and SIOCOUTQ for what its FIN
 * waits for: net/krelay.c).
 */
static const struct rule egress_flows[] = {
	ALLOW_IF(setsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_LINGER)),
	ALLOW_IF(setsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_RCVLOWAT)),
	ALLOW_IF(getsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_ERROR)),
	ALLOW_IF(getsockopt, ARG_EQ(1, IPPROTO_TCP), ARG_EQ(2, TCP_INFO)),
	ALLOW_IOCTL(SIOCINQ),
	ALLOW_IOCTL(SIOCOUTQ),
	ALLOW(getsockname),
};

/*
 * The proxy's netns thread (net/proxy-ns.c) once the VM runs, with
 * CAP_NET_RAW and CAP_BPF in a jail (vmm/vm-net.c): a UDP flow's reply
 * socket (IPv4 UDP, IP_TRANSPARENT, SO_REUSEADDR, bound to the flow's
 * destination, connected to the guest), the egress counters (a map
 * lookup) and its SYN filter (net/synmap.h: lookups, updates, deletes
 * and a walk of the keys: no other bpf() command), and the TLS set-ups
 * the proxy thread hands it (intercept.c: wolfSSL reads /dev/urandom,
 * O_RDONLY, for each new generator), and the kernel relay's pairings
 * (ebpf/relay.c: each socket's SO_COOKIE, SO_RCVLOWAT, a map update or
 * delete). No netlink (AF_NETLINK is EPERM: the egress
 * program's detach at exit fails, and the tap's removal takes it), no
 * other socket, no send, no exec. It replaces openat_refused.
 */
static const struct rule netns[] = {
	ALLOW_IF(socket, ARG_EQ(0, AF_INET),
		 { .arg = 1,
		   .op = SCMP_CMP_MASKED_EQ,
		   .datum_a = SECCOMP_SOCK_TYPE_MASK,
		   .datum_b = SOCK_DGRAM }),
	REFUSE_IF(socket, EPERM, ARG_EQ(0, AF_NETLINK)),
	ALLOW_IF(setsockopt, ARG_EQ(1, SOL_IP), ARG_EQ(2, IP_TRANSPARENT)),
	ALLOW_IF(setsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_REUSEADDR)),
	ALLOW_IF(setsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_RCVLOWAT)),
	ALLOW_IF(getsockopt, ARG_EQ(1, SOL_SOCKET), ARG_EQ(2, SO_COOKIE)),
	ALLOW(bind),
	ALLOW(connect),
	ALLOW_IF(bpf, ARG_EQ(0, BPF_MAP_LOOKUP_ELEM)),
	ALLOW_IF(bpf, ARG_EQ(0, BPF_MAP_UPDATE_ELEM)),
	ALLOW_IF(bpf, ARG_EQ(0, BPF_MAP_DELETE_ELEM)),
	ALLOW_IF(bpf, ARG_EQ(0, BPF_MAP_GET_NEXT_KEY)),
	ALLOW_IF(openat, ARG_EQ(2, O_RDONLY)),
	REFUSE_IF(openat, EACCES, ARG_NE(2, O_RDONLY)),
};

enum group_id {
	G_BASE,
	G_OPENAT_REFUSED,
	G_SOCKET_IO,
	G_SOCKET_UNIX,
	G_API,
	G_KVM_VCPU,
	G_KVM_IRQ,
	G_TUN,
	G_CONSOLE_LOG,
	G_FS_BIND,
	G_EGRESS,
	G_EGRESS_FLOWS,
	G_KVM_STATE,
	G_SNAPSHOT_FILES,
	G_BASELINE_PUBLISH,
	G_BLOCK_STORE,
	G_NETNS,
	NR_GROUPS,
};

/* What a group waits for in the VM (struct seccomp_needs). */
enum need {
	ALWAYS,
	NEED_NET,
	NEED_CONSOLE_LOG,
	NEED_FS_BIND,
	NEED_SNAPSHOT,
	NEED_BASELINE,
	NEED_BLOCK_STORE,
};

#define BIT(g) (1U << (g))

static const struct group {
	const struct rule *rules;
	unsigned int nr;
	enum need need;
	/* Groups it takes the place of on a thread that has it (BIT()s). */
	unsigned int replaces;
} groups[NR_GROUPS] = {
#define GROUP_REPLACING(id, r, n, rep) \
	[id] = { .rules = r, .nr = ARRAY_SIZE(r), .need = n, .replaces = rep }
#define GROUP(id, r, n) GROUP_REPLACING(id, r, n, 0)
	GROUP(G_BASE, base, ALWAYS),
	GROUP(G_OPENAT_REFUSED, openat_refused, ALWAYS),
	GROUP(G_SOCKET_IO, socket_io, ALWAYS),
	GROUP(G_SOCKET_UNIX, socket_unix, ALWAYS),
	GROUP(G_API, api, ALWAYS),
	GROUP(G_KVM_VCPU, kvm_vcpu, ALWAYS),
	GROUP(G_KVM_IRQ, kvm_irq, ALWAYS),
	GROUP(G_TUN, tun, NEED_NET),
	GROUP(G_CONSOLE_LOG, console_log, NEED_CONSOLE_LOG),
	GROUP(G_FS_BIND, fs_bind, NEED_FS_BIND),
	GROUP(G_EGRESS, egress, ALWAYS),
	GROUP(G_EGRESS_FLOWS, egress_flows, ALWAYS),
	GROUP(G_KVM_STATE, kvm_state, NEED_SNAPSHOT),
	GROUP_REPLACING(G_SNAPSHOT_FILES, snapshot_files, NEED_SNAPSHOT,
			BIT(G_OPENAT_REFUSED)),
	GROUP(G_BASELINE_PUBLISH, baseline_publish, NEED_BASELINE),
	GROUP(G_BLOCK_STORE, block_store, NEED_BLOCK_STORE),
	GROUP_REPLACING(G_NETNS, netns, ALWAYS, BIT(G_OPENAT_REFUSED)),
#undef GROUP
#undef GROUP_REPLACING
};

/* Every thread type's: the base set, and no file opened. */
#define BASE_GROUPS (BIT(G_BASE) | BIT(G_OPENAT_REFUSED))

/*
 * The table: which groups each thread type has. A thread type lists only
 * what its threads do once the guest runs; what they did while the VM
 * was built (opening images, taps, listeners, netns sockets) is done.
 */
static const unsigned int thread_groups[SECCOMP_NR_THREADS] = {
	/*
	 * The main loop reads its ring (signalfd, stdin, the wake eventfd,
	 * a timer), kicks vCPUs, writes the UART's input (its IRQ) and, when
	 * the VM ends, tears everything down: joins, closes, unlinks the API
	 * socket, resets the proxy's open flows, restores the tty. It may
	 * flush the console log.
	 */
	[SECCOMP_THREAD_MAIN] = BASE_GROUPS | BIT(G_SOCKET_IO) | BIT(G_API) |
				BIT(G_KVM_IRQ) | BIT(G_CONSOLE_LOG) |
				BIT(G_EGRESS_FLOWS),
	/*
	 * KVM_RUN and its exits: MMIO to the virtio transports (eventfd
	 * kicks, activations: TUNSETOFFLOAD), the UART's output (stdout,
	 * the console log) and IRQ, the halt probe and reports.
	 */
	[SECCOMP_THREAD_VCPU] = BASE_GROUPS | BIT(G_KVM_VCPU) | BIT(G_KVM_IRQ) |
				BIT(G_TUN) | BIT(G_CONSOLE_LOG),
	/* Their rings, eventfds, virtio-vsock's Unix sockets and epoll. */
	[SECCOMP_THREAD_DEVICE] = BASE_GROUPS | BIT(G_SOCKET_IO) |
				  BIT(G_SOCKET_UNIX) | BIT(G_KVM_IRQ) |
				  BIT(G_BLOCK_STORE),
	/* A device's, and the host directory of a bind mount beneath. */
	[SECCOMP_THREAD_FS] = BASE_GROUPS | BIT(G_SOCKET_IO) |
			      BIT(G_SOCKET_UNIX) | BIT(G_KVM_IRQ) |
			      BIT(G_FS_BIND),
	/*
	 * Its poll loop, clients, agent connections. With a control socket
	 * (needs.snapshot), vm.snapshot runs here: the parked vCPUs' and the
	 * VM's KVM state read, and the snapshot's new files written; no
	 * other thread has either. No other KVM call, no other file.
	 */
	[SECCOMP_THREAD_API] = BASE_GROUPS | BIT(G_SOCKET_IO) |
			       BIT(G_SOCKET_UNIX) | BIT(G_API) |
			       BIT(G_KVM_STATE) | BIT(G_SNAPSHOT_FILES) |
			       BIT(G_BASELINE_PUBLISH),
	/* The only threads with IPv4 sockets. */
	[SECCOMP_THREAD_EGRESS] = BASE_GROUPS | BIT(G_SOCKET_IO) |
				  BIT(G_SOCKET_UNIX) | BIT(G_EGRESS) |
				  BIT(G_EGRESS_FLOWS),
	/*
	 * The proxy's netns thread, once the tap, the egress program and
	 * the listeners exist: reply sockets, counters, TLS set-ups.
	 */
	[SECCOMP_THREAD_NETNS] = BASE_GROUPS | BIT(G_NETNS),
};

struct seccomp_filters {
	struct sock_fprog progs[SECCOMP_NR_THREADS];
};

/*
 * A blocked syscall is a monitor bug or an attack in progress: say which
 * one, once, with only async-signal-safe calls, and end the process.
 */
static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
	char msg[] = "vmm: seccomp: blocked system call 000, exiting\n";
	char *digit = strchr(msg, '0') + 2;
	int nr = si->si_syscall;
	int i;

	(void)sig;
	(void)uc;
	for (i = 0; i < 3; i++, nr /= 10)
		*digit-- = '0' + nr % 10;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		(void)0;
	_exit(SECCOMP_EXIT_STATUS);
}

static bool needed(const struct group *g, const struct seccomp_needs *needs)
{
	switch (g->need) {
	case NEED_NET:
		return needs->net;
	case NEED_CONSOLE_LOG:
		return needs->console_log;
	case NEED_FS_BIND:
		return needs->fs_bind;
	case NEED_SNAPSHOT:
		return needs->snapshot;
	case NEED_BASELINE:
		return needs->baseline;
	case NEED_BLOCK_STORE:
		return needs->block_store;
	default:
		return true;
	}
}

static int add_rule(scmp_filter_ctx ctx, const struct rule *r,
		    const struct seccomp_needs *needs)
{
	uint32_t action = r->err ? SCMP_ACT_ERRNO(r->err) : SCMP_ACT_ALLOW;
	scmp_datum_t dirfd = (scmp_datum_t)needs->console_log_dirfd;
	struct scmp_arg_cmp args[2];

	for (unsigned int i = 0; i < r->nr_args; i++) {
		args[i] = r->args[i];
		if (r->log_dirfd)
			args[i].datum_a = dirfd;
	}
	return seccomp_rule_add_array(ctx, action, r->nr, r->nr_args, args);
}

/* libseccomp's program for ctx, as the raw BPF the kernel takes. */
static int export_prog(scmp_filter_ctx ctx, struct sock_fprog *prog)
{
	struct stat st;
	void *buf = NULL;
	int fd, ret;

	fd = memfd_create("kiln-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = seccomp_export_bpf(ctx, fd);
	if (!ret && fstat(fd, &st))
		ret = -errno;
	if (!ret && (!st.st_size || st.st_size % sizeof(struct sock_filter) ||
		     st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS))
		ret = -E2BIG;
	if (!ret && !(buf = malloc(st.st_size)))
		ret = -ENOMEM;
	if (!ret && pread(fd, buf, st.st_size, 0) != st.st_size)
		ret = -EIO;
	close(fd);
	if (ret) {
		free(buf);
		return ret;
	}
	prog->filter = buf;
	prog->len = st.st_size / sizeof(struct sock_filter);
	return 0;
}

static int build_one(struct sock_fprog *prog, enum seccomp_thread type,
		     const struct seccomp_needs *needs)
{
	unsigned int have = 0;
	scmp_filter_ctx ctx;
	int ret;

	/* The type's groups this VM needs, less those another replaces. */
	for (unsigned int g = 0; g < NR_GROUPS; g++)
		if ((thread_groups[type] & BIT(g)) && needed(&groups[g], needs))
			have |= BIT(g);
	for (unsigned int g = 0; g < NR_GROUPS; g++)
		if (have & BIT(g))
			have &= ~groups[g].replaces;

	ctx = seccomp_init(SCMP_ACT_TRAP);
	if (!ctx)
		return -ENOMEM;
	/* Each thread its own filter: never synchronise the others. */
	ret = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 0);
	for (unsigned int g = 0; !ret && g < NR_GROUPS; g++) {
		if (!(have & BIT(g)))
			continue;
		for (unsigned int i = 0; !ret && i < groups[g].nr; i++)
			ret = add_rule(ctx, &groups[g].rules[i], needs);
	}
	if (!ret)
		ret = export_prog(ctx, prog);
	seccomp_release(ctx);
	return ret; /* libseccomp returns -errno already */
}

int seccomp__build(struct seccomp_filters **out,
		   const struct seccomp_needs *needs)
{
	struct sigaction sa = { .sa_sigaction = on_sigsys,
				.sa_flags = SA_SIGINFO };
	struct seccomp_filters *f;
	int ret = 0;

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) < 0)
		return -errno;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	for (unsigned int t = 0; !ret && t < SECCOMP_NR_THREADS; t++)
		if (!needs->threads || (needs->threads & BIT(t)))
			ret = build_one(&f->progs[t], t, needs);
	if (ret) {
		seccomp__destroy(f);
		return ret;
	}
	*out = f;
	return 0;
}

const struct sock_fprog *seccomp__filter(const struct seccomp_filters *filters,
					 enum seccomp_thread type)
{
	if (!filters || type >= SECCOMP_NR_THREADS)
		return NULL;
	return &filters->progs[type];
}

void seccomp__destroy(struct seccomp_filters *filters)
{
	if (!filters)
		return;
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++)
		free(filters->progs[t].filter);
	free(filters);
}

int seccomp__install(const struct seccomp_needs *needs,
		     enum seccomp_thread type)
{
	struct seccomp_filters *f;
	int ret;

	ret = seccomp__build(&f, needs);
	if (ret)
		return ret;
	ret = thread_filter__install(seccomp__filter(f, type));
	seccomp__destroy(f);
	return ret;
}
