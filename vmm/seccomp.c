// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <seccomp.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "vmm/seccomp.h"
#include "vmm/snapshot-file.h"

/* What the vCPU threads and the event loop do, and how they end. */
static const int allowed[] = {
	/* vCPU exits, console, eventfds and the ring */
	SCMP_SYS(read),
	SCMP_SYS(write),
	SCMP_SYS(pread64),
	SCMP_SYS(io_uring_setup),
	SCMP_SYS(io_uring_enter),
	SCMP_SYS(io_uring_register),
	/* threads: creation, kicks, joins, exits */
	SCMP_SYS(clone),
	SCMP_SYS(clone3),
	SCMP_SYS(set_robust_list),
	SCMP_SYS(rseq),
	SCMP_SYS(futex),
	SCMP_SYS(tgkill),
	SCMP_SYS(gettid),
	SCMP_SYS(getpid),
	SCMP_SYS(rt_sigprocmask),
	SCMP_SYS(rt_sigreturn),
	SCMP_SYS(rt_sigaction), /* glibc sets SIGCANCEL up on first thread */
	SCMP_SYS(sched_yield),
	SCMP_SYS(exit),
	SCMP_SYS(exit_group),
	/* memory: malloc, thread stacks, tear-down */
	SCMP_SYS(brk),
	SCMP_SYS(mmap),
	SCMP_SYS(munmap),
	SCMP_SYS(mprotect),
	SCMP_SYS(madvise),
	SCMP_SYS(mremap), /* realloc of a large (mmapped) block */
	/*
	 * The control API thread (vmm/api.c): its poll loop, clients
	 * accepted on the listening socket, nonblocking socket I/O with
	 * MSG_NOSIGNAL, one socketpair per agent connection (the vsock
	 * device takes the other end), the socket file removed at exit.
	 */
	SCMP_SYS(poll),
	SCMP_SYS(ppoll),
	SCMP_SYS(accept4),
	SCMP_SYS(sendto),
	SCMP_SYS(recvfrom),
	SCMP_SYS(fcntl),
	SCMP_SYS(socketpair),
	SCMP_SYS(unlink),
	/* start --detach, once the agent answers: the console to /dev/null */
	SCMP_SYS(dup2),
	SCMP_SYS(dup3),
	/*
	 * virtio-vsock's event loop (devices/virtio/vsock.c): an epoll set
	 * of Unix sockets, host clients accepted, bytes relayed with
	 * sendmsg/recvmsg, half-closes, and guest connections connected to
	 * "<socket>_PORT" (socket() itself is AF_UNIX only: see below).
	 */
	SCMP_SYS(epoll_wait),
	SCMP_SYS(epoll_pwait),
	SCMP_SYS(epoll_ctl),
	SCMP_SYS(accept4),
	SCMP_SYS(recvmsg),
	SCMP_SYS(sendmsg),
	SCMP_SYS(shutdown),
	SCMP_SYS(connect),
	/* tear-down */
	SCMP_SYS(close),
	SCMP_SYS(clock_gettime),
	SCMP_SYS(clock_nanosleep),
	/*
	 * The clocks' vDSO entries fall back to the system call when the
	 * clocksource has no vDSO read (a host with an unstable TSC, such
	 * as the nested harness): wolfSSL's certificate dates and timers
	 * (time(), gettimeofday()) reach the kernel there.
	 */
	SCMP_SYS(gettimeofday),
	SCMP_SYS(time),
	SCMP_SYS(clock_getres),
};

/*
 * virtio-fs over host directories (devices/fs/passthrough.c): every name
 * is resolved with openat2() beneath a directory fd (RESOLVE_BENEATH,
 * RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS), everything else is the
 * *at() family on those fds and plain fd calls; the data path is the
 * device's io_uring.
 */
static const int allowed_fs_bind[] = {
	SCMP_SYS(openat2),
	SCMP_SYS(newfstatat),
	SCMP_SYS(fstat),
	SCMP_SYS(statx),
	SCMP_SYS(fstatfs),
	SCMP_SYS(mkdirat),
	SCMP_SYS(mknodat),
	SCMP_SYS(symlinkat),
	SCMP_SYS(unlinkat),
	SCMP_SYS(renameat2),
	SCMP_SYS(renameat), /* glibc's renameat2() without flags */
	SCMP_SYS(linkat),
	SCMP_SYS(readlinkat),
	SCMP_SYS(fchmod),
	SCMP_SYS(fchmodat),
	SCMP_SYS(fchown),
	SCMP_SYS(fchownat),
	SCMP_SYS(utimensat),
	SCMP_SYS(ftruncate),
	SCMP_SYS(fallocate),
	SCMP_SYS(getdents64),
	SCMP_SYS(lseek),
	SCMP_SYS(fsync),
	SCMP_SYS(fdatasync),
	SCMP_SYS(preadv),
	SCMP_SYS(pwritev),
	SCMP_SYS(pwrite64),
	SCMP_SYS(dup),
	SCMP_SYS(geteuid),
	SCMP_SYS(getegid),
	/*
	 * Ownership "mapped": the user.kiln.stat xattr, of a directory
	 * through a descriptor, of anything else by its one-component name
	 * after fchdir() to its directory (in a working directory of the
	 * device thread's own: unshare(CLONE_FS), allowed below).
	 */
	SCMP_SYS(fgetxattr),
	SCMP_SYS(fsetxattr),
	SCMP_SYS(lgetxattr),
	SCMP_SYS(lsetxattr),
	SCMP_SYS(fchdir),
};

/*
 * ioctls allowed once running: the vCPU loop, IRQs, the halt probe, the
 * registers --verbose reports on a triple fault and SIGUSR2's report
 * (with KVM_TRANSLATE, read-only, to find the guest's stack), and
 * restoring the tty.
 */
static const unsigned long allowed_ioctls[] = {
	KVM_RUN,       KVM_IRQ_LINE, KVM_GET_MP_STATE, KVM_GET_REGS,
	KVM_GET_SREGS, KVM_TRANSLATE, TCGETS,	       TCSETS,
	TCSETSW,
};

/* vm.snapshot's: every one reads state, none changes it. */
static const unsigned long snapshot_ioctls[] = {
	KVM_GET_FPU,	KVM_GET_XSAVE,	 KVM_GET_XSAVE2,      KVM_GET_XCRS,
	KVM_GET_MSRS,	KVM_GET_LAPIC,	 KVM_GET_VCPU_EVENTS, KVM_GET_DEBUGREGS,
	KVM_GET_CPUID2, KVM_GET_TSC_KHZ, KVM_GET_IRQCHIP,     KVM_GET_PIT2,
	KVM_GET_CLOCK,
};

static const int snapshot_syscalls[] = {
	SCMP_SYS(mkdirat),    SCMP_SYS(fchmod),	 SCMP_SYS(fstat),
	SCMP_SYS(newfstatat), SCMP_SYS(geteuid), SCMP_SYS(pwrite64),
	SCMP_SYS(ftruncate),  SCMP_SYS(fsync),
};

/* The openat rules: see the EACCES for the others in seccomp__install. */
static int allow_snapshot(scmp_filter_ctx ctx)
{
	unsigned int i;
	int ret = 0;

	for (i = 0; !ret && i < ARRAY_SIZE(snapshot_syscalls); i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW,
				       snapshot_syscalls[i], 0);
	for (i = 0; !ret && i < ARRAY_SIZE(snapshot_ioctls); i++)
		ret = seccomp_rule_add(
			ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
			SCMP_A1(SCMP_CMP_EQ, snapshot_ioctls[i]));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
				       SCMP_A2(SCMP_CMP_EQ, SNAP_OPEN_NEW));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
				       SCMP_A2(SCMP_CMP_EQ, SNAP_OPEN_DIR));
	return ret;
}

#define SECCOMP_NR_FCHMODAT2 452 /* x86-64 */
#define SECCOMP_EXIT_STATUS 125 /* VMM_EXIT_VMM_ERROR */

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

	for (i = 0; i < 3; i++, nr /= 10)
		*digit-- = '0' + nr % 10;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		(void)0;
	_exit(SECCOMP_EXIT_STATUS);
}

/* socket()'s type argument without SOCK_NONBLOCK and SOCK_CLOEXEC. */
#define SECCOMP_SOCK_TYPE_MASK 0xf

/*
 * The egress proxy's run time, besides what the list above has (epoll,
 * accept4, connect, sendto/recvfrom, sendmsg/recvmsg, shutdown, close):
 * upstream TCP and UDP sockets and the few options it sets and reads.
 * The resolver (vmm/dns.c) needs a subset of the same: its upstream
 * sockets and SO_ERROR.
 */
static int allow_proxy(scmp_filter_ctx ctx)
{
	static const int types[] = { SOCK_STREAM, SOCK_DGRAM };
	int ret = 0;

	for (unsigned int i = 0; !ret && i < ARRAY_SIZE(types); i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2,
				       SCMP_A0(SCMP_CMP_EQ, AF_INET),
				       SCMP_A1(SCMP_CMP_MASKED_EQ,
					       SECCOMP_SOCK_TYPE_MASK,
					       types[i]));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW,
				       SCMP_SYS(setsockopt), 2,
				       SCMP_A1(SCMP_CMP_EQ, SOL_SOCKET),
				       SCMP_A2(SCMP_CMP_EQ, SO_LINGER));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW,
				       SCMP_SYS(getsockopt), 2,
				       SCMP_A1(SCMP_CMP_EQ, SOL_SOCKET),
				       SCMP_A2(SCMP_CMP_EQ, SO_ERROR));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW,
				       SCMP_SYS(getsockname), 0);
	/* A relayed flow's pipes, and the bytes spliced through them. */
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(pipe2), 0);
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(splice), 0);
	return ret;
}

/* Renames and opens beneath the console log's directory only. */
static int allow_console_log(scmp_filter_ctx ctx, int dirfd)
{
	int ret;

	ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat2), 1,
			       SCMP_A0(SCMP_CMP_EQ, dirfd));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(renameat),
				       2, SCMP_A0(SCMP_CMP_EQ, dirfd),
				       SCMP_A2(SCMP_CMP_EQ, dirfd));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(renameat2),
				       2, SCMP_A0(SCMP_CMP_EQ, dirfd),
				       SCMP_A2(SCMP_CMP_EQ, dirfd));
	return ret;
}

int seccomp__install(const struct seccomp_needs *needs)
{
	struct sigaction sa = { .sa_sigaction = on_sigsys,
				.sa_flags = SA_SIGINFO };
	scmp_filter_ctx ctx;
	unsigned int i;
	int ret = 0;

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) < 0)
		return -errno;
	ctx = seccomp_init(SCMP_ACT_TRAP);
	if (!ctx)
		return -ENOMEM;
	for (i = 0; !ret && i < ARRAY_SIZE(allowed); i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed[i], 0);
	for (i = 0; !ret && needs->fs_bind && i < ARRAY_SIZE(allowed_fs_bind);
	     i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed_fs_bind[i],
				       0);
	/*
	 * fchmodat2 (Linux 6.6), which glibc tries first for fchmodat():
	 * libseccomp 2.5 has no name for it yet. Older kernels answer
	 * ENOSYS and glibc falls back to what is allowed above.
	 */
	if (!ret && needs->fs_bind)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SECCOMP_NR_FCHMODAT2,
				       0);
	if (!ret && needs->fs_bind)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(unshare), 1,
				       SCMP_A0(SCMP_CMP_EQ, CLONE_FS));
	for (i = 0; !ret && i < ARRAY_SIZE(allowed_ioctls); i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				       SCMP_A1(SCMP_CMP_EQ, allowed_ioctls[i]));
	if (!ret && needs->net)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				       SCMP_A1(SCMP_CMP_EQ, TUNSETOFFLOAD));
	/* virtio-vsock's guest connections: Unix sockets, nothing else. */
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				       SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
	if (!ret && (needs->proxy || needs->dns))
		ret = allow_proxy(ctx);
	if (!ret && needs->console_log && !needs->fs_bind)
		ret = allow_console_log(ctx, needs->console_log_dirfd);
	if (!ret && needs->snapshot)
		ret = allow_snapshot(ctx);
	/*
	 * Opening files stays forbidden, but as an error, not a trap: glibc's
	 * malloc reads /proc/sys/vm/overcommit_memory the first time a
	 * thread's arena shrinks, and copes with the open failing.
	 */
	if (!ret && !needs->snapshot)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES),
				       SCMP_SYS(openat), 0);
	/*
	 * With the snapshot's two openat rules: an argument-less rule
	 * would override them (libseccomp), so the error is for every
	 * flags but a new file's, and the directory's rule, which
	 * overlaps it, wins (selftests/unit/seccomp.c).
	 */
	if (!ret && needs->snapshot)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES),
				       SCMP_SYS(openat), 1,
				       SCMP_A2(SCMP_CMP_NE, SNAP_OPEN_NEW));
	if (!ret)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES),
				       SCMP_SYS(open), 0);
	if (!ret)
		ret = seccomp_load(ctx);
	seccomp_release(ctx);
	return ret; /* libseccomp returns -errno already */
}
