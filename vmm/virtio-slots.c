// SPDX-License-Identifier: GPL-2.0
/*
 * The virtio-mmio slot table, without KVM: reserving a slot (its name and
 * interrupt eventfd), the device each attached slot owns with its ops,
 * and the walks the VM runs over them: start, vm.metrics, report,
 * destroy. vmm/virtio-attach.c wires the slots into KVM.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/virtio/device.h"
#include "lib/log.h"
#include "vmm/metrics.h"
#include "vmm/virtio-attach.h"

static bool reserved(const struct virtio_slot *s)
{
	return s->name[0];
}

int virtio_slots__reserve(struct virtio_slot *slots, unsigned int slot,
			  const char *name)
{
	struct virtio_slot *s;
	int ret;

	if (slot >= VIRTIO_MMIO_SLOTS || !name || !name[0]) {
		pr_err("%s: no virtio-mmio slot %u", name ? name : "?", slot);
		return -EINVAL;
	}
	s = &slots[slot];
	if (reserved(s)) {
		pr_err("%s: virtio-mmio slot %u is %s's", name, slot, s->name);
		return -EBUSY;
	}
	if (strlen(name) >= sizeof(s->name)) {
		pr_err("%s: name too long for a virtio-mmio slot", name);
		return -ENAMETOOLONG;
	}
	s->irq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->irq_fd < 0) {
		ret = -errno;
		pr_err("%s: eventfd: %s", name, strerror(errno));
		return ret;
	}
	strcpy(s->name, name);
	return 0;
}

void virtio_slots__release(struct virtio_slot *slots)
{
	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++) {
		struct virtio_slot *s = &slots[i];

		if (reserved(s))
			close(s->irq_fd);
		memset(s, 0, sizeof(*s));
	}
}

int virtio_slots__attach(struct virtio_slot *slots, unsigned int slot,
			 struct virtio_device *dev,
			 const struct virtio_slot_ops *ops, void *priv)
{
	struct virtio_slot *s = slot < VIRTIO_MMIO_SLOTS ? &slots[slot] : NULL;

	if (!s || !reserved(s) || s->ops) {
		pr_err("%s: virtio-mmio slot %u is not reserved for it",
		       dev->name, slot);
		ops->destroy(priv);
		return -EINVAL;
	}
	s->ops = ops;
	s->priv = priv;
	s->dev = dev;
	return 0;
}

int virtio_slots__start(struct virtio_slot *slots,
			const struct sock_fprog *const *filters)
{
	int ret;

	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++) {
		struct virtio_slot *s = &slots[i];

		if (!s->dev)
			continue;
		ret = s->ops->start(s->priv, filters[s->ops->thread]);
		if (ret) {
			pr_err("%s: starting its thread: %s", s->name,
			       strerror(-ret));
			return ret;
		}
	}
	return 0;
}

json_t *virtio_slots__metrics(const struct virtio_slot *slots)
{
	json_t *a = json_array();

	for (unsigned int i = 0; a && i < VIRTIO_MMIO_SLOTS; i++) {
		const struct virtio_slot *s = &slots[i];
		struct virtio_device_stats st;
		json_t *o;

		if (!s->dev)
			continue;
		virtio_device__stats(s->dev, &st);
		o = metrics__device_json(s->name, s->ops->type, &st);
		if (o && s->ops->metrics)
			s->ops->metrics(s->priv, o);
		json_array_append_new(a, o);
	}
	return a;
}

void virtio_slots__report(const struct virtio_slot *slots)
{
	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++)
		if (slots[i].dev)
			virtio_device__report(slots[i].dev);
}

void virtio_slots__destroy(struct virtio_slot *slots)
{
	for (unsigned int i = VIRTIO_MMIO_SLOTS; i--;) {
		struct virtio_slot *s = &slots[i];

		if (!s->ops)
			continue;
		s->dev = NULL;
		s->ops->destroy(s->priv);
		s->ops = NULL;
		s->priv = NULL;
	}
}
