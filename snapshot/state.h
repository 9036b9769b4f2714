/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SNAPSHOT_STATE_H
#define KILN_SNAPSHOT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * A snapshot's binary state file (Documentation/snapshots.md, "State
 * files"): the KVM structures of one vCPU, or of the VM, each as the
 * ioctl gave it, in sections:
 *
 *	header	"KILNSNAP" (8 bytes), u32 version, u32 kind
 *	section	u32 tag, u32 length, length bytes, zeros to a multiple of 8
 *	...
 *
 * little-endian, in the order written. A reader checks the header, and
 * that every section lies inside the file; what a section must hold
 * (its size, which ioctl reads it back) is the restore's to check
 * against the tag.
 */

#define SNAP_STATE_MAGIC       "KILNSNAP"
#define SNAP_STATE_VERSION     1U
#define SNAP_STATE_ALIGN       8U
#define SNAP_STATE_MAX_SECTION (16U << 20) /* bytes: far above XSAVE */

enum snap_kind {
	SNAP_KIND_VCPU = 1,
	SNAP_KIND_VM = 2,
};

/* Tags: the ioctl whose structure the section holds. */
enum snap_tag {
	/* a vCPU */
	SNAP_VCPU_ID = 1,	  /* u32, the vCPU's id */
	SNAP_VCPU_MP_STATE = 2,	  /* struct kvm_mp_state */
	SNAP_VCPU_REGS = 3,	  /* struct kvm_regs */
	SNAP_VCPU_SREGS = 4,	  /* struct kvm_sregs */
	SNAP_VCPU_FPU = 5,	  /* struct kvm_fpu (without XSAVE) */
	SNAP_VCPU_XSAVE = 6,	  /* KVM_GET_XSAVE(2): the whole area */
	SNAP_VCPU_XCRS = 7,	  /* struct kvm_xcrs */
	SNAP_VCPU_MSRS = 8,	  /* struct kvm_msrs + entries actually read */
	SNAP_VCPU_LAPIC = 9,	  /* struct kvm_lapic_state */
	SNAP_VCPU_EVENTS = 10,	  /* struct kvm_vcpu_events */
	SNAP_VCPU_DEBUGREGS = 11, /* struct kvm_debugregs */
	SNAP_VCPU_CPUID = 12,	  /* struct kvm_cpuid2 + entries, as set */
	SNAP_VCPU_TSC_KHZ = 13,	  /* u32, KVM_GET_TSC_KHZ */
	/* the VM */
	SNAP_VM_PIC_MASTER = 0x100, /* struct kvm_irqchip, chip_id 0 */
	SNAP_VM_PIC_SLAVE = 0x101,  /* struct kvm_irqchip, chip_id 1 */
	SNAP_VM_IOAPIC = 0x102,	    /* struct kvm_irqchip, chip_id 2 */
	SNAP_VM_PIT2 = 0x103,	    /* struct kvm_pit_state2 */
	SNAP_VM_CLOCK = 0x104,	    /* struct kvm_clock_data */
	SNAP_VM_UART = 0x105,	    /* struct uart_regs (devices/uart.h) */
};

/* Grows a buffer; the first failure sticks (err) and later adds do nothing. */
struct snap_writer {
	uint8_t *buf;
	size_t len, cap;
	int err; /* 0 or the first -errno */
};

void snap_writer__init(struct snap_writer *w, enum snap_kind kind);
void snap_writer__add(struct snap_writer *w, uint32_t tag, const void *p,
		      size_t len);
void snap_writer__release(struct snap_writer *w);

struct snap_reader {
	const uint8_t *p;
	size_t len, at;
};

/* -EINVAL: not a state file of this version and kind. */
int __must_check snap_reader__init(struct snap_reader *r, const void *p,
				   size_t len, enum snap_kind kind);
/*
 * The next section: 1 with tag, data and its length; 0 at the end;
 * -EINVAL for a section that runs past the end or over
 * SNAP_STATE_MAX_SECTION.
 */
int __must_check snap_reader__next(struct snap_reader *r, uint32_t *tag,
				   const void **data, uint32_t *len);
/*
 * The first section with tag, exactly len bytes: 0 with *data; -ENOENT
 * when there is none; -EINVAL for a malformed file or another length.
 */
int __must_check snap_state__find(const void *p, size_t plen,
				  enum snap_kind kind, uint32_t tag, size_t len,
				  const void **data);
/* The same for a section of any length (MSRs, CPUID, XSAVE): in *len. */
int __must_check snap_state__find_var(const void *p, size_t plen,
				      enum snap_kind kind, uint32_t tag,
				      const void **data, size_t *len);

#endif
