// SPDX-License-Identifier: GPL-2.0
/*
 * kvm-hold - keep one idle KVM VM, with one vCPU and the in-kernel
 * irqchip, open for the harness VM's whole life; started by init.sh.
 *
 * Why: creating the first VM, and destroying the last, flips static keys
 * in the harness kernel (the preempt notifiers that __schedule tests;
 * the "LAPIC software-disabled" key that KVM's interrupt paths test, also
 * flipped when a nested guest's CPU enables its local APIC), and each
 * flip rewrites kernel code under the other CPU with int3 breakpoints
 * (text_poke_bp). QEMU's multi-threaded TCG has been caught running a
 * CPU on stale code after such a rewrite: it looped on an int3 the other
 * CPU had already removed, in __schedule, while that CPU spun on a lock
 * (Documentation/harness.md, "Stalls"). With this VM held, every count
 * stays above zero and the tests' VMs coming and going rewrite nothing.
 * The vCPU never runs, so its local APIC stays software-disabled.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "kvm-hold: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(void)
{
	int kvm, vm, vcpu;

	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		return fail("/dev/kvm");
	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		return fail("KVM_CREATE_VM");
	if (ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0)
		return fail("KVM_CREATE_IRQCHIP");
	vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (vcpu < 0)
		return fail("KVM_CREATE_VCPU");
	for (;;)
		pause();
}
