// SPDX-License-Identifier: GPL-2.0
/*
 * Wiring a virtio-mmio device into the VM, the one place that does it:
 * its slot (window and GSI; the table is vmm/virtio-slots.c), the kernel
 * parameter that declares it, its interrupt as a KVM irqfd, each queue's
 * kick as a KVM ioeventfd and its register window on the MMIO bus, with
 * the undo of each.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/kvm.h>
#include <linux/virtio_mmio.h>

#include "devices/virtio/device.h"
#include "devices/virtio/mmio.h"
#include "vmm/mounts.h"
#include "vmm/virtio-attach.h"
#include "vmm/vm.h"

_Static_assert(VIRTIO_SLOT_FS0 + MOUNTS_MAX <= VIRTIO_SLOT_NET,
	       "a slot for every mount");
_Static_assert(VIRTIO_SLOT_NET < VIRTIO_MMIO_SLOTS, "a slot for virtio-net");
_Static_assert(VIRTIO_FIRST_GSI + VIRTIO_MMIO_SLOTS <= MPTABLE_NR_IRQS,
	       "a GSI on the IOAPIC for every slot");
_Static_assert(VIRTIO_MMIO_BASE >= MMIO_GAP_START &&
		       VIRTIO_MMIO_BASE + VIRTIO_MMIO_SLOTS *
						  VIRTIO_MMIO_WINDOW_SIZE <=
			       MMIO_GAP_END,
	       "every window in the MMIO gap");

static uint64_t slot_base(unsigned int slot)
{
	return VIRTIO_MMIO_BASE + (uint64_t)slot * VIRTIO_MMIO_WINDOW_SIZE;
}

static unsigned int slot_gsi(unsigned int slot)
{
	return VIRTIO_FIRST_GSI + slot;
}

static bool reserved(const struct virtio_slot *s)
{
	return s->name[0];
}

int vm__reserve_virtio(struct vm *vm, unsigned int slot, const char *name)
{
	return virtio_slots__reserve(vm->virtio, slot, name);
}

void vm__release_virtio(struct vm *vm)
{
	virtio_slots__release(vm->virtio);
}

const char *vm__virtio_name(const struct vm *vm, unsigned int slot)
{
	return vm->virtio[slot].name;
}

/*
 * A virtio interrupt through an irqfd: the core raises the line when its
 * interrupt status becomes nonzero and lowers it on the driver's ack. The
 * pin is edge-triggered (ISA), so a raise is one injection and a lower
 * needs nothing.
 */
static void irqfd_line(void *opaque, unsigned int gsi, int level)
{
	const struct virtio_slot *s = opaque;
	uint64_t one = 1;

	if (level && reserved(s) && write(s->irq_fd, &one, sizeof(one)) < 0)
		pr_debug("irqfd %u: %s", gsi, strerror(errno));
}

struct irq_line vm__virtio_irq(struct vm *vm, unsigned int slot)
{
	return (struct irq_line){ .set = irqfd_line,
				  .opaque = &vm->virtio[slot],
				  .gsi = slot_gsi(slot) };
}

int vm__virtio_cmdline(const struct vm *vm, char *buf, size_t len, size_t *at)
{
	int n;

	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++) {
		if (!reserved(&vm->virtio[i]))
			continue;
		if (len - *at < 2)
			return -ENOSPC;
		buf[(*at)++] = ' ';
		n = virtio_mmio__cmdline(slot_base(i), VIRTIO_MMIO_WINDOW_SIZE,
					 slot_gsi(i), buf + *at, len - *at);
		if (n < 0)
			return n;
		*at += n;
	}
	return 0;
}

static int set_irqfd(struct vm *vm, unsigned int slot, bool assign)
{
	struct kvm_irqfd irqfd = {
		.fd = vm->virtio[slot].irq_fd,
		.gsi = slot_gsi(slot),
		.flags = assign ? 0 : KVM_IRQFD_FLAG_DEASSIGN,
	};

	return ioctl(vm->vm_fd, KVM_IRQFD, &irqfd) < 0 ? -errno : 0;
}

/* Queue index's kick_fd, signalled by KVM on a write of its index. */
static int set_ioeventfd(struct vm *vm, unsigned int slot,
			 const struct virtio_device *dev, unsigned int index,
			 bool assign)
{
	struct kvm_ioeventfd e = {
		.datamatch = index,
		.addr = slot_base(slot) + VIRTIO_MMIO_QUEUE_NOTIFY,
		.len = 4,
		.fd = dev->queues[index].kick_fd,
		.flags = KVM_IOEVENTFD_FLAG_DATAMATCH |
			 (assign ? 0 : KVM_IOEVENTFD_FLAG_DEASSIGN),
	};

	return ioctl(vm->vm_fd, KVM_IOEVENTFD, &e) < 0 ? -errno : 0;
}

/*
 * Undoes what a failed attach did, in reverse, before any filter; the
 * slot keeps the device, for virtio_slots__destroy.
 */
static void detach(struct vm *vm, unsigned int slot, bool irqfd)
{
	struct virtio_slot *s = &vm->virtio[slot];
	int ret;

	while (s->nr_kicks) {
		ret = set_ioeventfd(vm, slot, s->dev, --s->nr_kicks, false);
		if (ret)
			pr_debug("%s: KVM_IOEVENTFD deassign: %s", s->name,
				 strerror(-ret));
	}
	if (irqfd) {
		ret = set_irqfd(vm, slot, false);
		if (ret)
			pr_debug("%s: KVM_IRQFD deassign: %s", s->name,
				 strerror(-ret));
	}
	s->dev = NULL;
}

int vm__attach_virtio(struct vm *vm, unsigned int slot,
		      struct virtio_device *dev,
		      const struct virtio_slot_ops *ops, void *priv)
{
	struct virtio_slot *s;
	int ret;

	ret = virtio_slots__attach(vm->virtio, slot, dev, ops, priv);
	if (ret)
		return ret;
	s = &vm->virtio[slot];
	ret = set_irqfd(vm, slot, true);
	if (ret) {
		pr_err("%s: KVM_IRQFD: %s", s->name, strerror(-ret));
		detach(vm, slot, false);
		return ret;
	}
	for (; s->nr_kicks < dev->nr_queues; s->nr_kicks++) {
		ret = set_ioeventfd(vm, slot, dev, s->nr_kicks, true);
		if (ret) {
			pr_err("%s: KVM_IOEVENTFD: %s", s->name,
			       strerror(-ret));
			detach(vm, slot, true);
			return ret;
		}
	}
	ret = bus__register(&vm->mmio, slot_base(slot), VIRTIO_MMIO_WINDOW_SIZE,
			    virtio_mmio__io, dev);
	if (ret) {
		pr_err("%s: registering MMIO: %s", s->name, strerror(-ret));
		detach(vm, slot, true);
		return ret;
	}
	return 0;
}

/*
 * The KVM bindings go with the VM fd (the kvm step's undo): after a run
 * the seccomp filter forbids the ioctls that would undo them one by one.
 */
void vm__detach_virtio(struct vm *vm)
{
	for (unsigned int i = VIRTIO_MMIO_SLOTS; i--;) {
		if (!vm->virtio[i].dev)
			continue;
		bus__unregister(&vm->mmio, slot_base(i));
		vm->virtio[i].nr_kicks = 0;
		vm->virtio[i].dev = NULL;
	}
}

void vm__report_virtio(struct vm *vm)
{
	virtio_slots__report(vm->virtio);
}
