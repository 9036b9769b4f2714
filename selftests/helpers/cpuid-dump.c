// SPDX-License-Identifier: GPL-2.0
/*
 * cpuid-dump: every CPUID leaf and subleaf a guest sees, on every CPU, one
 * line each, so that two monitors' guests can be diffed leaf by leaf
 * (Documentation/harness.md, tools/boot-census --cpuid). A static program,
 * packed as an extra initramfs archive with /bin/cpuid-dump.
 *
 *	cpuid-dump	"cpuN LEAF.SUB eax ebx ecx edx" for each CPU
 *
 * The APIC IDs in leaves 0x1, 0xb and 0x1f differ per CPU by design; the
 * rest should not.
 */
#include <cpuid.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#define LEAF_BASIC	0x00000000U
#define LEAF_HYPERVISOR 0x40000000U
#define LEAF_EXTENDED	0x80000000U
#define LEAF_SPAN_MAX	0x100U /* more leaves than any range has */
#define SUBLEAF_MAX	64U    /* XSAVE (0xd) has the most in use */

static unsigned int subleaves(unsigned int leaf)
{
	switch (leaf) {
	case 0x4:
	case 0x7:
	case 0xb:
	case 0xd:
	case 0xf:
	case 0x10:
	case 0x12:
	case 0x14:
	case 0x17:
	case 0x18:
	case 0x1d:
	case 0x1f:
	case 0x8000001d:
	case 0x80000020:
		return SUBLEAF_MAX;
	default:
		return 1;
	}
}

static void dump_range(int cpu, unsigned int base)
{
	unsigned int a, b, c, d, max;

	__cpuid_count(base, 0, max, b, c, d);
	if (max < base || max - base >= LEAF_SPAN_MAX)
		max = base;
	for (unsigned int leaf = base; leaf <= max; leaf++) {
		for (unsigned int sub = 0; sub < subleaves(leaf); sub++) {
			__cpuid_count(leaf, sub, a, b, c, d);
			/* Past the last subleaf: all zero (skip the rest). */
			if (sub && !a && !b && !c && !d)
				continue;
			printf("cpu%d %08x.%02x %08x %08x %08x %08x\n", cpu,
			       leaf, sub, a, b, c, d);
		}
	}
}

int main(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	for (int cpu = 0; cpu < n; cpu++) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			perror("cpuid-dump: sched_setaffinity");
			return 1;
		}
		dump_range(cpu, LEAF_BASIC);
		dump_range(cpu, LEAF_HYPERVISOR);
		dump_range(cpu, LEAF_EXTENDED);
	}
	return 0;
}
