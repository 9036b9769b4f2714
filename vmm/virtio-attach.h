/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_ATTACH_H
#define KILN_VIRTIO_ATTACH_H

#include <stddef.h>

#include "lib/compiler.h"
#include "devices/irq.h"

/*
 * Where virtio-mmio devices live: windows from VIRTIO_MMIO_BASE up, each
 * with an edge-triggered ISA interrupt from VIRTIO_FIRST_GSI (the UART
 * has 4; 5 and up are free on our board). Each device has a fixed slot,
 * whether or not the others are present: 0 virtio-blk, 1 virtio-vsock,
 * 2 to 9 one virtio-fs device per mount (vmm/mounts.h), 10 virtio-net.
 */
#define VIRTIO_MMIO_BASE  0xd0000000ULL
#define VIRTIO_FIRST_GSI  5U
#define VIRTIO_MMIO_SLOTS 16U /* GSIs 5..20 */
#define VIRTIO_SLOT_BLK	  0U
#define VIRTIO_SLOT_VSOCK 1U
#define VIRTIO_SLOT_FS0	  2U
#define VIRTIO_SLOT_NET	  10U

struct vm;
struct virtio_device;

/*
 * One slot of struct vm. Reserved before anything is built, so that the
 * kernel command line can declare it; attached once its device exists.
 */
struct virtio_slot {
	char name[16];		   /* "virtio-fs0"; empty while free */
	int irq_fd;		   /* the interrupt's eventfd, while reserved */
	struct virtio_device *dev; /* while attached */
	unsigned int nr_kicks;	   /* queues bound as ioeventfds */
};

/*
 * Attaching a virtio-mmio device takes two calls, one before the device
 * exists, one after:
 *
 *	vm__reserve_virtio(vm, slot, "virtio-net0");	(step "slots")
 *	...
 *	p.name = vm__virtio_name(vm, slot);		(step "devices")
 *	p.irq = vm__virtio_irq(vm, slot);
 *	ret = net__create(&vm->net, &p);
 *	if (!ret)
 *		ret = vm__attach_virtio(vm, slot, net__device(vm->net));
 *
 * vm__detach_virtio() undoes every attach before the devices go;
 * vm__release_virtio() every reservation after them.
 */

/*
 * Claims slot (below VIRTIO_MMIO_SLOTS, not yet reserved) for the device
 * called name (at most 15 bytes) and opens its interrupt's eventfd.
 * Needs no KVM. -EINVAL, -EBUSY, -ENAMETOOLONG or -errno, reported here.
 */
int __must_check vm__reserve_virtio(struct vm *vm, unsigned int slot,
				    const char *name);
void vm__release_virtio(struct vm *vm);

/* A reserved slot's name, which outlives its device, and its line. */
const char *vm__virtio_name(const struct vm *vm, unsigned int slot);
struct irq_line vm__virtio_irq(struct vm *vm, unsigned int slot);

/*
 * " virtio_mmio.device=4K@0xd0000000:5" for each reserved slot in slot
 * order, at buf + *at (moved past it); -ENOSPC when buf is too short.
 */
int __must_check vm__virtio_cmdline(const struct vm *vm, char *buf, size_t len,
				    size_t *at);

/*
 * Wires dev into its reserved slot: the interrupt as an irqfd, each
 * queue's kick_fd as an ioeventfd on the notify register, the register
 * window on the MMIO bus. All or nothing: a failure is reported here,
 * naming the device, and undone.
 */
int __must_check vm__attach_virtio(struct vm *vm, unsigned int slot,
				   struct virtio_device *dev);
/*
 * Takes every device off the MMIO bus, before the devices go; their KVM
 * bindings go with the VM fd.
 */
void vm__detach_virtio(struct vm *vm);

/* Every attached device's state into the log (SIGUSR2: vm-run.c). */
void vm__report_virtio(struct vm *vm);

#endif
