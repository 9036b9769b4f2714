// SPDX-License-Identifier: GPL-2.0
/*
 * kvm-hold - keep KVM's static keys from flipping in the harness kernel:
 * two idle VMs, held open for the harness VM's whole life; started by
 * init.sh.
 *
 * Why: creating the first VM, and destroying the last, flips static keys
 * in the harness kernel (the preempt notifiers that __schedule tests;
 * the "LAPIC software-disabled" key that KVM's interrupt paths test, also
 * flipped when a nested guest's CPU enables its local APIC), and each
 * flip rewrites kernel code under the other CPU with int3 breakpoints
 * (text_poke_bp). QEMU's multi-threaded TCG has been caught running a
 * CPU on stale code after such a rewrite: it looped on an int3 the other
 * CPU had already removed, in __schedule, while that CPU spun on a lock
 * (Documentation/harness.md, "Stalls"). With these VMs held, every count
 * stays above zero and the tests' VMs coming and going rewrite nothing:
 *
 *   - the first VM has the in-kernel irqchip and one vCPU, whose local
 *     APIC stays software-disabled (it never runs) and is turned off in
 *     its APIC base MSR, holding apic_sw_disabled and apic_hw_disabled;
 *   - the second has no irqchip and one vCPU, holding
 *     kvm_has_noapic_vcpu, which every vCPU made without an in-kernel
 *     local APIC counts (the hostile suite's VMs are such, and a busy
 *     stall, both harness CPUs spinning on a lock, came in that suite:
 *     harness.md, ci46). lapic_in_kernel() tests it on KVM's hot paths.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MSR_IA32_APICBASE	  0x1b
#define APIC_DEFAULT_PHYS_BASE	  0xfee00000ULL
#define MSR_IA32_APICBASE_BSP	  (1ULL << 8)

static int fail(const char *what)
{
	fprintf(stderr, "kvm-hold: %s: %s\n", what, strerror(errno));
	return 1;
}

/* The vCPU's local APIC off (APIC base without its enable bit). */
static int apic_off(int vcpu)
{
	struct {
		struct kvm_msrs hdr;
		struct kvm_msr_entry e;
	} m;

	memset(&m, 0, sizeof(m));
	m.hdr.nmsrs = 1;
	m.e.index = MSR_IA32_APICBASE;
	m.e.data = APIC_DEFAULT_PHYS_BASE | MSR_IA32_APICBASE_BSP;
	return ioctl(vcpu, KVM_SET_MSRS, &m) == 1 ? 0 : -1;
}

int main(void)
{
	int kvm, vm, vcpu, bare, bare_vcpu;

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
	if (apic_off(vcpu))
		return fail("KVM_SET_MSRS (APIC base, disabled)");
	bare = ioctl(kvm, KVM_CREATE_VM, 0);
	if (bare < 0)
		return fail("KVM_CREATE_VM (no irqchip)");
	bare_vcpu = ioctl(bare, KVM_CREATE_VCPU, 0);
	if (bare_vcpu < 0)
		return fail("KVM_CREATE_VCPU (no irqchip)");
	/* To /dev/kmsg (init.sh), at info level: not a warning. */
	fprintf(stderr, "<6>kvm-hold: holding a VM with an irqchip (its APIC "
			"off) and one without\n");
	for (;;)
		pause();
}
