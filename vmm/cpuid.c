// SPDX-License-Identifier: GPL-2.0
/*
 * Per-vCPU CPUID: what KVM supports, with the topology filled in so Linux
 * sees nr_cpus cores in one package, one thread each, APIC ID = vCPU index.
 */
#include <cpuid.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "vmm/cpuid.h"
#include "vmm/vm.h"

#define CPUID_LEAF_FEATURES	0x1
#define CPUID_LEAF_CACHE	0x4
#define CPUID_LEAF_TOPOLOGY	0xb
#define CPUID_LEAF_TOPOLOGY_V2	0x1f
#define CPUID_LEAF_AMD_SIZE	0x80000008
#define CPUID_LEAF_AMD_TOPOLOGY 0x8000001e
#define CPUID_4_EAX_CACHE_TYPE	0x1fU /* 0: no more caches */

#define CPUID_1_ECX_TSC_DEADLINE (1U << 24)
#define CPUID_1_ECX_HYPERVISOR	 (1U << 31)
#define CPUID_1_EDX_HTT		 (1U << 28)
#define CPUID_B_LEVEL_SMT	 1
#define CPUID_B_LEVEL_CORE	 2
#define CPUID_TOPOLOGY_SUBLEAVES 3 /* SMT, core, terminator */

static unsigned int order_base_2(unsigned int n)
{
	unsigned int o = 0;

	while ((1U << o) < n)
		o++;
	return o;
}

static void set_topology(struct kvm_cpuid_entry2 *e, unsigned int id,
			 unsigned int nr_cpus)
{
	unsigned int sub = e->index;

	e->edx = id; /* x2APIC ID */
	if (sub == 0) {
		e->eax = 0;
		e->ebx = 1;
		e->ecx = (CPUID_B_LEVEL_SMT << 8) | sub;
	} else if (sub == 1) {
		e->eax = order_base_2(nr_cpus);
		e->ebx = nr_cpus;
		e->ecx = (CPUID_B_LEVEL_CORE << 8) | sub;
	} else {
		e->eax = 0;
		e->ebx = 0;
		e->ecx = sub;
	}
}

static void patch_entry(struct kvm_cpuid_entry2 *e, unsigned int id,
			unsigned int nr_cpus)
{
	switch (e->function) {
	case CPUID_LEAF_FEATURES:
		e->ebx = (e->ebx & 0x0000ffff) | (id << 24) |
			 ((nr_cpus & 0xff) << 16);
		e->ecx |= CPUID_1_ECX_HYPERVISOR;
		if (nr_cpus > 1)
			e->edx |= CPUID_1_EDX_HTT;
		break;
	case CPUID_LEAF_CACHE:
		/* AMD leaves it all zero: no caches to describe here. */
		if (!(e->eax & CPUID_4_EAX_CACHE_TYPE))
			break;
		/* Cores per package - 1 in EAX[31:26]; caches per core. */
		e->eax = (e->eax & 0x03ffffff) | ((nr_cpus - 1) << 26);
		e->eax &= ~(0xfffU << 14);
		break;
	case CPUID_LEAF_TOPOLOGY:
	case CPUID_LEAF_TOPOLOGY_V2:
		set_topology(e, id, nr_cpus);
		break;
	case CPUID_LEAF_AMD_SIZE:
		/* NC (cores - 1) and ApicIdCoreIdSize. */
		e->ecx = (e->ecx & ~0xf0ffU) | (nr_cpus - 1) |
			 (order_base_2(nr_cpus) << 12);
		break;
	case CPUID_LEAF_AMD_TOPOLOGY:
		/*
		 * KVM zeroes it (no host topology): the extended APIC ID in
		 * EAX, in EBX the core ("compute unit") ID with one thread
		 * each, node 0 of one in ECX (AMD APM vol. 3, E.4.24).
		 */
		e->eax = id;
		e->ebx = id & 0xff;
		e->ecx = 0;
		e->edx = 0;
		break;
	}
}

static bool has_entry(const struct kvm_cpuid2 *c, unsigned int function,
		      unsigned int index)
{
	for (unsigned int i = 0; i < c->nent; i++)
		if (c->entries[i].function == function &&
		    c->entries[i].index == index)
			return true;
	return false;
}

/*
 * KVM lists a topology leaf's subleaves only as far as the host's own
 * go (one, on a host with one thread per package): add the ones
 * set_topology fills, so every guest sees its SMT and core levels.
 */
static void add_topology_subleaves(struct kvm_cpuid2 *c, unsigned int room)
{
	static const unsigned int leaves[] = { CPUID_LEAF_TOPOLOGY,
					       CPUID_LEAF_TOPOLOGY_V2 };

	for (unsigned int l = 0; l < sizeof(leaves) / sizeof(leaves[0]); l++) {
		if (!has_entry(c, leaves[l], 0))
			continue;
		for (unsigned int sub = 1; sub < CPUID_TOPOLOGY_SUBLEAVES;
		     sub++) {
			if (has_entry(c, leaves[l], sub) || c->nent >= room)
				continue;
			c->entries[c->nent++] = (struct kvm_cpuid_entry2){
				.function = leaves[l],
				.index = sub,
				.flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
			};
		}
	}
}

/*
 * What KVM emulates but leaves out of KVM_GET_SUPPORTED_CPUID because it
 * depends on the VM's set-up (api.rst, KVM_GET_SUPPORTED_CPUID): the
 * TSC-deadline timer, with the in-kernel LAPIC we always create. Arming
 * it is one WRMSR; without it Linux programs the LAPIC timer through
 * MMIO writes that KVM must decode and emulate, at every idle entry.
 */
void cpuid__add_emulated(int kvm_fd, struct kvm_cpuid2 *c, unsigned int room)
{
	unsigned int i;

	_Static_assert(2 * (CPUID_TOPOLOGY_SUBLEAVES - 1) <= CPUID_ADDED_MAX,
		       "room for both topology leaves' subleaves");
	add_topology_subleaves(c, room);
	if (ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_TSC_DEADLINE_TIMER) <= 0)
		return;
	for (i = 0; i < c->nent; i++)
		if (c->entries[i].function == CPUID_LEAF_FEATURES)
			c->entries[i].ecx |= CPUID_1_ECX_TSC_DEADLINE;
}

int cpuid__setup(int vcpu_fd, const struct kvm_cpuid2 *supported,
		 unsigned int id, unsigned int nr_cpus)
{
	size_t size = sizeof(*supported) +
		      supported->nent * sizeof(supported->entries[0]);
	struct kvm_cpuid2 *c = malloc(size);
	unsigned int i;
	int ret = 0;

	if (!c)
		return -ENOMEM;
	memcpy(c, supported, size);
	for (i = 0; i < c->nent; i++)
		patch_entry(&c->entries[i], id, nr_cpus);
	if (ioctl(vcpu_fd, KVM_SET_CPUID2, c) < 0)
		ret = -errno;
	free(c);
	return ret;
}

/*
 * True when the host CPU is AMD's (or Hygon's, the same design): KVM runs
 * guests with SVM there. From CPUID leaf 0's vendor string.
 */
bool cpuid__host_is_svm(void)
{
	unsigned int eax, ebx, ecx, edx;
	char vendor[13];

	if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
		return false;
	memcpy(vendor, &ebx, 4);
	memcpy(vendor + 4, &edx, 4);
	memcpy(vendor + 8, &ecx, 4);
	vendor[12] = '\0';
	return !strcmp(vendor, "AuthenticAMD") ||
	       !strcmp(vendor, "HygonGenuine");
}
