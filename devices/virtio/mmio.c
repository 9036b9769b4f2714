// SPDX-License-Identifier: GPL-2.0
/*
 * The virtio-mmio version 2 transport (virtio 1.1, section 4.2.2): the
 * register window of one device, decoded into calls to the device core
 * (device.c), and the kernel parameter that declares it. Every register
 * access runs under the device lock; a driver error is logged once per
 * device by the core and the access ignored.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <linux/virtio_mmio.h>

#include "lib/compiler.h"
#include "devices/virtio/mmio.h"

_Static_assert(VIRTIO_ISR_QUEUE == VIRTIO_MMIO_INT_VRING, "ISR bit");
_Static_assert(VIRTIO_ISR_CONFIG == VIRTIO_MMIO_INT_CONFIG, "ISR bit");

#define VIRTIO_MMIO_MAGIC     0x74726976 /* "virt" */
#define VIRTIO_MMIO_VERSION_2 2

/* ---- the register window ----------------------------------------- */

static struct virtio_queue *selected_queue(struct virtio_device *dev)
{
	if (dev->queue_sel >= dev->nr_queues)
		return NULL;
	return &dev->queues[dev->queue_sel];
}

static uint32_t reg_read(struct virtio_device *dev, uint64_t offset)
{
	struct virtio_queue *q = selected_queue(dev);

	switch (offset) {
	case VIRTIO_MMIO_MAGIC_VALUE:
		return VIRTIO_MMIO_MAGIC;
	case VIRTIO_MMIO_VERSION:
		return VIRTIO_MMIO_VERSION_2;
	case VIRTIO_MMIO_DEVICE_ID:
		return dev->device_id;
	case VIRTIO_MMIO_VENDOR_ID:
		return VIRTIO_MMIO_KILN_VENDOR_ID;
	case VIRTIO_MMIO_DEVICE_FEATURES:
		return virtio_device__device_features(dev);
	case VIRTIO_MMIO_QUEUE_NUM_MAX:
		return q ? q->max_size : 0;
	case VIRTIO_MMIO_QUEUE_READY:
		return q ? virtqueue__is_ready(&q->vq) : 0;
	case VIRTIO_MMIO_INTERRUPT_STATUS:
		return virtio_device__isr(dev);
	case VIRTIO_MMIO_STATUS:
		return virtio_device__status(dev);
	case VIRTIO_MMIO_SHM_LEN_LOW:
	case VIRTIO_MMIO_SHM_LEN_HIGH:
	case VIRTIO_MMIO_SHM_BASE_LOW:
	case VIRTIO_MMIO_SHM_BASE_HIGH:
		/* No shared memory regions: length -1 says so (4.2.2). */
		return UINT32_MAX;
	case VIRTIO_MMIO_CONFIG_GENERATION:
		return __atomic_load_n(&dev->config_generation,
				       __ATOMIC_ACQUIRE);
	default:
		/* Write-only, legacy (version 1) or reserved: zeros. */
		return 0;
	}
}

/* One 32-bit half of a ring address, which only moves while not ready. */
static void queue_addr_write(struct virtio_device *dev, struct virtio_queue *q,
			     uint64_t *gpa, bool high, uint32_t val)
{
	unsigned int shift = high ? 32 : 0;

	if (!q)
		return;
	if (virtqueue__is_ready(&q->vq)) {
		virtio_device__warn(dev, "%s: ring address changed while ready",
				    q->name);
		return;
	}
	*gpa = (*gpa & ~(0xffffffffULL << shift)) | ((uint64_t)val << shift);
}

static void reg_write(struct virtio_device *dev, uint64_t offset, uint32_t val)
{
	struct virtio_queue *q = selected_queue(dev);

	switch (offset) {
	case VIRTIO_MMIO_DEVICE_FEATURES_SEL:
		dev->device_features_sel = val;
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES:
		virtio_device__write_driver_features(dev, val);
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES_SEL:
		dev->driver_features_sel = val;
		break;
	case VIRTIO_MMIO_QUEUE_SEL:
		dev->queue_sel = val;
		break;
	case VIRTIO_MMIO_QUEUE_NUM:
		if (!q)
			break;
		if (virtqueue__is_ready(&q->vq))
			virtio_device__warn(dev, "%s: size changed while ready",
					    q->name);
		else
			q->size = val;
		break;
	case VIRTIO_MMIO_QUEUE_READY:
		if (q)
			virtio_device__write_queue_ready(dev, q, val);
		break;
	case VIRTIO_MMIO_QUEUE_NOTIFY:
		/* No VIRTIO_F_NOTIFICATION_DATA: the value is the index. */
		virtio_device__queue_notify_locked(dev, val);
		break;
	case VIRTIO_MMIO_INTERRUPT_ACK:
		virtio_device__ack_isr(dev, val);
		break;
	case VIRTIO_MMIO_STATUS:
		virtio_device__write_status(dev, val);
		break;
	case VIRTIO_MMIO_QUEUE_DESC_LOW:
	case VIRTIO_MMIO_QUEUE_DESC_HIGH:
		queue_addr_write(dev, q, q ? &q->desc_gpa : NULL,
				 offset == VIRTIO_MMIO_QUEUE_DESC_HIGH, val);
		break;
	case VIRTIO_MMIO_QUEUE_AVAIL_LOW:
	case VIRTIO_MMIO_QUEUE_AVAIL_HIGH:
		queue_addr_write(dev, q, q ? &q->driver_gpa : NULL,
				 offset == VIRTIO_MMIO_QUEUE_AVAIL_HIGH, val);
		break;
	case VIRTIO_MMIO_QUEUE_USED_LOW:
	case VIRTIO_MMIO_QUEUE_USED_HIGH:
		queue_addr_write(dev, q, q ? &q->device_gpa : NULL,
				 offset == VIRTIO_MMIO_QUEUE_USED_HIGH, val);
		break;
	case VIRTIO_MMIO_SHM_SEL:
		/* Every region is absent, whichever is selected. */
		break;
	default:
		/* Read-only, legacy (version 1) or reserved. */
		virtio_device__warn(
			dev, "write of %#" PRIx32 " to register %#" PRIx64, val,
			offset);
		break;
	}
}

void virtio_mmio__read(struct virtio_device *dev, uint64_t offset, void *data,
		       unsigned int len)
{
	uint32_t val;

	memset(data, 0, len);
	pthread_mutex_lock(&dev->lock);
	if (offset >= VIRTIO_MMIO_CONFIG) {
		virtio_device__read_config(dev, offset - VIRTIO_MMIO_CONFIG,
					   data, len);
	} else if (len != sizeof(val) || (offset & (sizeof(val) - 1))) {
		virtio_device__warn(dev, "%u-byte read of register %#" PRIx64,
				    len, offset);
	} else {
		val = htole32(reg_read(dev, offset));
		memcpy(data, &val, sizeof(val));
	}
	pthread_mutex_unlock(&dev->lock);
}

void virtio_mmio__write(struct virtio_device *dev, uint64_t offset,
			const void *data, unsigned int len)
{
	uint32_t val;

	pthread_mutex_lock(&dev->lock);
	if (offset >= VIRTIO_MMIO_CONFIG) {
		virtio_device__write_config(dev, offset - VIRTIO_MMIO_CONFIG,
					    data, len);
	} else if (len != sizeof(val) || (offset & (sizeof(val) - 1))) {
		virtio_device__warn(dev, "%u-byte write of register %#" PRIx64,
				    len, offset);
	} else {
		memcpy(&val, data, sizeof(val));
		reg_write(dev, offset, le32toh(val));
	}
	pthread_mutex_unlock(&dev->lock);
}

void virtio_mmio__io(void *opaque, uint64_t offset, uint8_t *data,
		     unsigned int size, bool is_write)
{
	if (is_write)
		virtio_mmio__write(opaque, offset, data, size);
	else
		virtio_mmio__read(opaque, offset, data, size);
}

/* ---- the kernel command line ------------------------------------- */

int virtio_mmio__cmdline(uint64_t base, uint64_t size, unsigned int irq,
			 char *buf, size_t len)
{
	static const char *const suffix[] = { "", "K", "M", "G" };
	unsigned int unit = 0;
	uint64_t n = size;
	int ret;

	if (!size || size - 1 > UINT64_MAX - base)
		return -EINVAL;
	if (!len)
		return -ENOSPC;
	while (unit + 1 < ARRAY_SIZE(suffix) && !(n % 1024)) {
		n /= 1024;
		unit++;
	}
	ret = snprintf(buf, len,
		       "virtio_mmio.device=%" PRIu64 "%s@0x%" PRIx64 ":%u", n,
		       suffix[unit], base, irq);
	if (ret < 0 || (size_t)ret >= len) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	return ret;
}
