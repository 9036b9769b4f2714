// SPDX-License-Identifier: GPL-2.0
/*
 * Intel MultiProcessor Specification 1.4 tables: how Linux finds every vCPU
 * and the IOAPIC without ACPI. Placed at the start of the EBDA, which Linux
 * scans for the floating pointer.
 */
#include <errno.h>
#include <string.h>

#include "bootloader/boot.h"

#define MPF_SIGNATURE		"_MP_"
#define MPC_SIGNATURE		"PCMP"
#define MP_SPEC_REV		4 /* 1.4 */
#define MP_PROCESSOR		0
#define MP_BUS			1
#define MP_IOAPIC		2
#define MP_INTSRC		3
#define MP_LINTSRC		4
#define MP_CPU_ENABLED		(1 << 0)
#define MP_CPU_BSP		(1 << 1)
#define MP_IOAPIC_USABLE	(1 << 0)
#define MP_IRQ_INT		0
#define MP_IRQ_NMI		1
#define MP_IRQ_EXTINT		3
#define MP_IRQ_DEFAULT_POLARITY 0 /* conforms to the bus: ISA edge/high */
#define MP_BUS_ISA_ID		0
#define MP_LAPIC_VERSION	0x14
#define MP_IOAPIC_VERSION	0x11
#define MP_ALL_LAPICS		0xff
#define MP_CPU_SIGNATURE	0x600 /* family 6 */
#define MP_CPU_FEATURES		0x201 /* FPU | APIC */

struct mpf_intel {
	char signature[4];
	uint32_t physptr;
	uint8_t length; /* in 16-byte units */
	uint8_t specification;
	uint8_t checksum;
	uint8_t feature[5];
} __attribute__((packed));

struct mpc_table {
	char signature[4];
	uint16_t length;
	uint8_t spec;
	uint8_t checksum;
	char oem[8];
	char productid[12];
	uint32_t oemptr;
	uint16_t oemsize;
	uint16_t oemcount;
	uint32_t lapic;
	uint32_t reserved;
} __attribute__((packed));

struct mpc_cpu {
	uint8_t type;
	uint8_t apicid;
	uint8_t apicver;
	uint8_t cpuflag;
	uint32_t cpufeature;
	uint32_t featureflag;
	uint32_t reserved[2];
} __attribute__((packed));

struct mpc_bus {
	uint8_t type;
	uint8_t busid;
	char bustype[6];
} __attribute__((packed));

struct mpc_ioapic {
	uint8_t type;
	uint8_t apicid;
	uint8_t apicver;
	uint8_t flags;
	uint32_t apicaddr;
} __attribute__((packed));

struct mpc_intsrc {
	uint8_t type;
	uint8_t irqtype;
	uint16_t irqflag;
	uint8_t srcbus;
	uint8_t srcbusirq;
	uint8_t dstapic;
	uint8_t dstirq;
} __attribute__((packed));

static uint8_t mp_checksum(const uint8_t *p, size_t len)
{
	uint8_t sum = 0;

	while (len--)
		sum += *p++;
	return (uint8_t)(-sum);
}

static size_t mptable_size(unsigned int ncpus, unsigned int nr_irqs)
{
	return sizeof(struct mpf_intel) + sizeof(struct mpc_table) +
	       ncpus * sizeof(struct mpc_cpu) + sizeof(struct mpc_bus) +
	       sizeof(struct mpc_ioapic) +
	       (nr_irqs + 2) * sizeof(struct mpc_intsrc);
}

static uint8_t *put_cpus(uint8_t *p, unsigned int ncpus)
{
	unsigned int i;

	for (i = 0; i < ncpus; i++) {
		struct mpc_cpu c = {
			.type = MP_PROCESSOR,
			.apicid = i,
			.apicver = MP_LAPIC_VERSION,
			.cpuflag = MP_CPU_ENABLED | (i == 0 ? MP_CPU_BSP : 0),
			.cpufeature = MP_CPU_SIGNATURE,
			.featureflag = MP_CPU_FEATURES,
		};
		memcpy(p, &c, sizeof(c));
		p += sizeof(c);
	}
	return p;
}

static uint8_t *put_irqs(uint8_t *p, uint8_t ioapic_id, unsigned int nr_irqs)
{
	struct mpc_intsrc s = {
		.type = MP_INTSRC,
		.irqtype = MP_IRQ_INT,
		.irqflag = MP_IRQ_DEFAULT_POLARITY,
		.srcbus = MP_BUS_ISA_ID,
		.dstapic = ioapic_id,
	};
	unsigned int i;

	/* ISA IRQ n is IOAPIC pin n, as KVM's default GSI routing has it. */
	for (i = 0; i < nr_irqs; i++) {
		s.srcbusirq = i;
		s.dstirq = i;
		memcpy(p, &s, sizeof(s));
		p += sizeof(s);
	}
	/* LINT0 is the 8259's ExtINT, LINT1 NMI, on every local APIC. */
	s.type = MP_LINTSRC;
	s.irqtype = MP_IRQ_EXTINT;
	s.srcbusirq = 0;
	s.dstapic = MP_ALL_LAPICS;
	s.dstirq = 0;
	memcpy(p, &s, sizeof(s));
	p += sizeof(s);
	s.irqtype = MP_IRQ_NMI;
	s.dstirq = 1;
	memcpy(p, &s, sizeof(s));
	return p + sizeof(s);
}

int mptable__setup(const struct boot_mem *m, unsigned int ncpus,
		   unsigned int nr_irqs)
{
	uint8_t *base = m->ram + BOOT_EBDA_START;
	struct mpf_intel *mpf = (struct mpf_intel *)base;
	uint8_t *table = base + sizeof(*mpf);
	struct mpc_table *mpc = (struct mpc_table *)table;
	struct mpc_bus bus = { .type = MP_BUS,
			       .busid = MP_BUS_ISA_ID,
			       .bustype = "ISA   " };
	struct mpc_ioapic io = { .type = MP_IOAPIC,
				 .apicid = ncpus,
				 .apicver = MP_IOAPIC_VERSION,
				 .flags = MP_IOAPIC_USABLE,
				 .apicaddr = MPTABLE_IOAPIC_ADDR };
	size_t size = mptable_size(ncpus, nr_irqs);
	uint8_t *p;

	if (!ncpus || ncpus > KILN_MAX_CPUS || nr_irqs > MPTABLE_NR_IRQS ||
	    size > BOOT_HIMEM_START - BOOT_EBDA_START)
		return -EINVAL;
	memset(base, 0, size);

	memcpy(mpf->signature, MPF_SIGNATURE, 4);
	mpf->physptr = BOOT_EBDA_START + sizeof(*mpf);
	mpf->length = 1;
	mpf->specification = MP_SPEC_REV;

	memcpy(mpc->signature, MPC_SIGNATURE, 4);
	mpc->spec = MP_SPEC_REV;
	memcpy(mpc->oem, "KILN    ", 8);
	memcpy(mpc->productid, "MICROVM     ", 12);
	mpc->lapic = MPTABLE_LAPIC_ADDR;

	p = put_cpus(table + sizeof(*mpc), ncpus);
	memcpy(p, &bus, sizeof(bus));
	p += sizeof(bus);
	memcpy(p, &io, sizeof(io));
	p += sizeof(io);
	p = put_irqs(p, ncpus, nr_irqs);

	mpc->length = p - table;
	mpc->oemcount = ncpus + 2 + nr_irqs + 2; /* cpus, bus, ioapic, irqs */
	mpc->checksum = mp_checksum(table, mpc->length);
	mpf->checksum = mp_checksum(base, sizeof(*mpf));
	return 0;
}
