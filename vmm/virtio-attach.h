/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_ATTACH_H
#define KILN_VIRTIO_ATTACH_H

#include <jansson.h>
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
struct sock_fprog;

/*
 * What the VM does with an attached device without knowing its type,
 * each called with the dev pointer given to the attach.
 */
struct virtio_slot_ops {
	const char *type; /* vm.metrics' "type": "virtio-blk" */
	/*
	 * The seccomp filter its thread starts under (enum seccomp_thread,
	 * vmm/seccomp.h): an index into the walk's filters.
	 */
	unsigned int thread;
	/* Its thread, under filter (NULL: none); 0 or -errno. */
	int (*start)(void *dev, const struct sock_fprog *filter);
	/* Its own members added to its vm.metrics object; may be NULL. */
	void (*metrics)(void *dev, json_t *o);
	/* Stops its thread and frees it (the device accepts NULL). */
	void (*destroy)(void *dev);
};

/*
 * One slot of struct vm. Reserved before anything is built, so that the
 * kernel command line can declare it; attached once its device exists.
 */
struct virtio_slot {
	char name[16];		   /* "virtio-fs0"; empty while free */
	int irq_fd;		   /* the interrupt's eventfd, while reserved */
	struct virtio_device *dev; /* while attached to the VM */
	unsigned int nr_kicks;	   /* queues bound as ioeventfds */
	/* The device's, from its attach until the slots' destroy. */
	const struct virtio_slot_ops *ops;
	void *priv;
};

/*
 * Attaching a virtio-mmio device takes two calls, one before the device
 * exists, one after:
 *
 *	vm__reserve_virtio(vm, slot, "virtio-net0");	(step "slots")
 *	...
 *	p.name = vm__virtio_name(vm, slot);		(step "devices")
 *	p.irq = vm__virtio_irq(vm, slot);
 *	ret = virtio_net__create(&n, &p);
 *	if (!ret)
 *		ret = vm__attach_virtio(vm, slot, virtio_net__device(n),
 *					&net_slot_ops, n);
 *
 * From then on the slot is the device's only owner: vm__run starts it
 * (virtio_slots__start), vm.metrics reports it (virtio_slots__metrics),
 * the devices step's undo detaches it (vm__detach_virtio) and destroys
 * it (virtio_slots__destroy); vm__release_virtio releases every
 * reservation after them.
 */

/*
 * The slot table, KVM-free (vmm/virtio-slots.c): slots is an array of
 * VIRTIO_MMIO_SLOTS (struct vm's virtio), zeroed to begin with.
 *
 * virtio_slots__reserve claims slot (below VIRTIO_MMIO_SLOTS, not yet
 * reserved) for the device called name (at most 15 bytes) and opens its
 * interrupt's eventfd: -EINVAL, -EBUSY, -ENAMETOOLONG or -errno, reported
 * here. virtio_slots__release undoes every reservation.
 */
int __must_check virtio_slots__reserve(struct virtio_slot *slots,
				       unsigned int slot, const char *name);
void virtio_slots__release(struct virtio_slot *slots);
/*
 * The record's half of an attach: the reserved, unowned slot takes
 * priv (destroyed by virtio_slots__destroy from now on, whatever the
 * return) and records dev. -EINVAL, reported here, when the slot is not
 * reserved or owned already: priv is then destroyed at once.
 */
int __must_check virtio_slots__attach(struct virtio_slot *slots,
				      unsigned int slot,
				      struct virtio_device *dev,
				      const struct virtio_slot_ops *ops,
				      void *priv);
/*
 * Starts every attached device's thread in slot order, each under
 * filters[its ops' thread] (filters has SECCOMP_NR_THREADS entries, NULL
 * for none). A failure is reported here, naming the device; the threads
 * started run until virtio_slots__destroy.
 */
int __must_check virtio_slots__start(struct virtio_slot *slots,
				     const struct sock_fprog *const *filters);
/* vm.metrics' "devices" array: one object per attached device. */
json_t *virtio_slots__metrics(const struct virtio_slot *slots);
/* Every attached device's state into the log. */
void virtio_slots__report(const struct virtio_slot *slots);
/* Stops and frees every device the slots own, the last slot first. */
void virtio_slots__destroy(struct virtio_slot *slots);

/* The same for struct vm's slots (vmm/virtio-attach.c). */
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
 * Hands the device to its reserved slot (virtio_slots__attach: the slot
 * owns priv whatever the return), then wires dev into it: the interrupt
 * as an irqfd, each queue's kick_fd as an ioeventfd on the notify
 * register, the register window on the MMIO bus. All or nothing: a
 * failure is reported here, naming the device, and undone.
 */
int __must_check vm__attach_virtio(struct vm *vm, unsigned int slot,
				   struct virtio_device *dev,
				   const struct virtio_slot_ops *ops,
				   void *priv);
/*
 * Takes every device off the MMIO bus, before the devices go
 * (virtio_slots__destroy); their KVM bindings go with the VM fd.
 */
void vm__detach_virtio(struct vm *vm);

/* Every attached device's state into the log (SIGUSR2: vm-run.c). */
void vm__report_virtio(struct vm *vm);

#endif
