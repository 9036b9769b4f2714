// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <linux/kvm.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "vmm/seccomp.h"

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
	/* tear-down */
	SCMP_SYS(close),
	SCMP_SYS(clock_gettime),
	SCMP_SYS(clock_nanosleep),
};

/*
 * ioctls allowed once running: the vCPU loop, IRQs, the halt probe, and
 * restoring the tty.
 */
static const unsigned long allowed_ioctls[] = {
	KVM_RUN, KVM_IRQ_LINE, KVM_GET_MP_STATE, KVM_GET_REGS,
	TCGETS,	 TCSETS,       TCSETSW,
};

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

int seccomp__install(void)
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
	for (i = 0; !ret && i < ARRAY_SIZE(allowed_ioctls); i++)
		ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				       SCMP_A1(SCMP_CMP_EQ, allowed_ioctls[i]));
	if (!ret)
		ret = seccomp_load(ctx);
	seccomp_release(ctx);
	return ret; /* libseccomp returns -errno already */
}
