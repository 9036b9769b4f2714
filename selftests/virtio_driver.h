/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_VIRTIO_DRIVER_H
#define KILN_SELFTESTS_VIRTIO_DRIVER_H

/*
 * The fake virtio-mmio driver the device unit tests share: guest RAM
 * between two guard areas, the register file read and written through
 * devices/virtio/mmio.c as a vCPU would, feature negotiation, queue set-up,
 * the kick decision of virtqueue_kick() and the interrupt line. Each test
 * keeps its own queue bookkeeping and layout of guest memory.
 *
 *	struct vdrv d;
 *	vdrv_init(&d, RAM_SIZE);         guest memory, mapped at GPA 0
 *	... create the device with .mem = &d.mem and
 *	    .irq = { .set = vdrv_irq_set, .opaque = &d.irq }, then
 *	d.vdev = its virtio_device;
 *	vdrv_exit(&d);                   after the device is destroyed
 *
 * Header-only.
 */
#include <endian.h>
#include <errno.h>
#include <linux/virtio_config.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/virtio/guest-mem.h"
#include "devices/virtio/mmio.h"
#include "selftests/kselftest.h"

#define VDRV_GUARD_SIZE 4096
#define VDRV_GUARD_BYTE 0xa5

struct vdrv_irq {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	int level;
	unsigned int raises;
};

struct vdrv {
	struct virtio_device *vdev;
	uint8_t *block; /* guard, RAM, guard */
	uint8_t *ram;
	size_t ram_size;
	struct guest_mem mem;
	struct vdrv_irq irq;
	uint64_t features; /* negotiated */
};

static inline long vdrv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Zeroed RAM of ram_size bytes between guards; 0 or -errno. */
static inline int vdrv_init(struct vdrv *d, size_t ram_size)
{
	size_t total = VDRV_GUARD_SIZE + ram_size + VDRV_GUARD_SIZE;
	pthread_condattr_t ca;
	int ret;

	memset(d, 0, sizeof(*d));
	d->block = aligned_alloc(4096, total);
	if (!d->block)
		return -ENOMEM;
	memset(d->block, VDRV_GUARD_BYTE, total);
	d->ram = d->block + VDRV_GUARD_SIZE;
	d->ram_size = ram_size;
	memset(d->ram, 0, ram_size);
	guest_mem__init(&d->mem);
	ret = guest_mem__add(&d->mem, 0, ram_size, d->ram);
	if (ret) {
		free(d->block);
		d->block = d->ram = NULL;
		return ret;
	}
	pthread_mutex_init(&d->irq.lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->irq.cond, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

static inline void vdrv_exit(struct vdrv *d)
{
	if (!d->block)
		return;
	pthread_cond_destroy(&d->irq.cond);
	pthread_mutex_destroy(&d->irq.lock);
	free(d->block);
	d->block = d->ram = NULL;
	d->vdev = NULL;
}

/* Nothing was written outside guest RAM. */
static inline bool vdrv_guards_intact(const struct vdrv *d)
{
	for (size_t i = 0; i < VDRV_GUARD_SIZE; i++)
		if (d->block[i] != VDRV_GUARD_BYTE ||
		    d->block[VDRV_GUARD_SIZE + d->ram_size + i] !=
			    VDRV_GUARD_BYTE)
			return false;
	return true;
}

/* ---- guest memory, as the driver sees it --------------------------- */

static inline uint16_t vdrv_load16(const struct vdrv *d, uint64_t gpa)
{
	return le16toh(__atomic_load_n((const uint16_t *)(d->ram + gpa),
				       __ATOMIC_ACQUIRE));
}

static inline void vdrv_store16(struct vdrv *d, uint64_t gpa, uint16_t v)
{
	__atomic_store_n((uint16_t *)(d->ram + gpa), htole16(v),
			 __ATOMIC_RELEASE);
}

static inline uint32_t vdrv_get32(const struct vdrv *d, uint64_t gpa)
{
	uint32_t v;

	memcpy(&v, d->ram + gpa, sizeof(v));
	return le32toh(v);
}

/* ---- registers ---------------------------------------------------- */

static inline uint32_t vdrv_rd32(struct vdrv *d, uint64_t off)
{
	uint32_t v = 0xdeadbeef; /* what an unanswered read leaves */

	virtio_mmio__read(d->vdev, off, &v, sizeof(v));
	return le32toh(v);
}

static inline void vdrv_wr32(struct vdrv *d, uint64_t off, uint32_t v)
{
	v = htole32(v);
	virtio_mmio__write(d->vdev, off, &v, sizeof(v));
}

static inline uint32_t vdrv_status(struct vdrv *d)
{
	return vdrv_rd32(d, VIRTIO_MMIO_STATUS);
}

static inline void vdrv_add_status(struct vdrv *d, uint32_t bits)
{
	vdrv_wr32(d, VIRTIO_MMIO_STATUS, vdrv_status(d) | bits);
}

static inline uint64_t vdrv_device_features(struct vdrv *d)
{
	uint64_t v;

	vdrv_wr32(d, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	v = (uint64_t)vdrv_rd32(d, VIRTIO_MMIO_DEVICE_FEATURES) << 32;
	vdrv_wr32(d, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	return v | vdrv_rd32(d, VIRTIO_MMIO_DEVICE_FEATURES);
}

/*
 * After a reset (STATUS 0, the test's rings cleared): ACKNOWLEDGE,
 * DRIVER, the driver's features, FEATURES_OK. False if the device did not
 * keep FEATURES_OK; else d->features is what was accepted.
 */
static inline bool vdrv_negotiate(struct vdrv *d, uint64_t features)
{
	vdrv_add_status(d, VIRTIO_CONFIG_S_ACKNOWLEDGE);
	vdrv_add_status(d, VIRTIO_CONFIG_S_DRIVER);
	vdrv_wr32(d, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	vdrv_wr32(d, VIRTIO_MMIO_DRIVER_FEATURES, features >> 32);
	vdrv_wr32(d, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	vdrv_wr32(d, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)features);
	vdrv_add_status(d, VIRTIO_CONFIG_S_FEATURES_OK);
	if (!(vdrv_status(d) & VIRTIO_CONFIG_S_FEATURES_OK))
		return false;
	d->features = features;
	return true;
}

/* Queue q of size entries, its three rings at those GPAs (below 4 GiB). */
static inline void vdrv_setup_queue(struct vdrv *d, unsigned int q,
				    uint16_t size, uint64_t desc,
				    uint64_t avail, uint64_t used)
{
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_SEL, q);
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_NUM, size);
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)desc);
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_DESC_HIGH, (uint32_t)(desc >> 32));
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_AVAIL_LOW, (uint32_t)avail);
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_AVAIL_HIGH, (uint32_t)(avail >> 32));
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_USED_LOW, (uint32_t)used);
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_USED_HIGH, (uint32_t)(used >> 32));
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_READY, 1);
}

/*
 * virtqueue_kick_prepare(): having moved avail->idx from old to cur on
 * the queue whose used ring (of size entries) is at used, does the
 * device want a notification? Through avail_event with EVENT_IDX, else
 * VRING_USED_F_NO_NOTIFY. A device that forgets to ask again before it
 * idles loses the request.
 */
static inline bool vdrv_need_kick(struct vdrv *d, uint64_t used, uint16_t size,
				  uint16_t old, uint16_t cur)
{
	/* virtio_mb: our avail->idx before we read the device's wishes. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (d->features & (1ULL << VIRTIO_RING_F_EVENT_IDX))
		return vring_need_event(vdrv_load16(d, used + 4 + 8 * size),
					cur, old);
	return !(vdrv_load16(d, used) & VRING_USED_F_NO_NOTIFY);
}

/* Descriptor i of the table at desc, as a driver writes it. */
static inline void vdrv_put_desc(struct vdrv *d, uint64_t desc, uint16_t i,
				 uint64_t addr, uint32_t len, uint16_t flags,
				 uint16_t next)
{
	struct vring_desc v = {
		.addr = htole64(addr),
		.len = htole32(len),
		.flags = htole16(flags),
		.next = htole16(next),
	};

	memcpy(d->ram + desc + (uint64_t)i * sizeof(v), &v, sizeof(v));
}

/* Makes head available in the ring at avail (size entries). */
static inline void vdrv_publish(struct vdrv *d, uint64_t avail, uint16_t size,
				uint16_t *avail_idx, uint16_t head)
{
	vdrv_store16(d, avail + 4 + 2 * (*avail_idx % size), head);
	/* virtio_wmb: the entry before the index. */
	(*avail_idx)++;
	vdrv_store16(d, avail + 2, *avail_idx);
}

/*
 * virtqueue_kick(): notify queue q, whose used ring is at used, only when
 * the device asked for it since *kicked (then moved to avail_idx).
 */
static inline void vdrv_kick(struct vdrv *d, unsigned int q, uint64_t used,
			     uint16_t size, uint16_t *kicked,
			     uint16_t avail_idx)
{
	uint16_t old = *kicked;

	*kicked = avail_idx;
	if (vdrv_need_kick(d, used, size, old, avail_idx))
		vdrv_wr32(d, VIRTIO_MMIO_QUEUE_NOTIFY, q);
}

/* ---- the interrupt line ------------------------------------------- */

/* The device's irq callback; opaque is &d->irq. */
static inline void vdrv_irq_set(void *opaque, unsigned int gsi, int level)
{
	struct vdrv_irq *r = opaque;

	(void)gsi;
	pthread_mutex_lock(&r->lock);
	r->raises += level && !r->level;
	r->level = level;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static inline unsigned int vdrv_irq_raises(struct vdrv *d)
{
	unsigned int n;

	pthread_mutex_lock(&d->irq.lock);
	n = d->irq.raises;
	pthread_mutex_unlock(&d->irq.lock);
	return n;
}

/*
 * Waits until ms from now for an interrupt and acknowledges it, as
 * vm_interrupt() would. The line stays high until acknowledged, so an
 * interrupt raised before the wait is not lost.
 */
static inline void vdrv_irq_wait(struct vdrv *d, long ms)
{
	struct timespec ts;
	int level;

	if (ms <= 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += ms % 1000 * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&d->irq.lock);
	while (!d->irq.level)
		if (pthread_cond_timedwait(&d->irq.cond, &d->irq.lock, &ts))
			break;
	level = d->irq.level;
	pthread_mutex_unlock(&d->irq.lock);
	if (level)
		vdrv_wr32(d, VIRTIO_MMIO_INTERRUPT_ACK,
			  vdrv_rd32(d, VIRTIO_MMIO_INTERRUPT_STATUS));
}

/*
 * Waits up to timeout_ms for the device to set bits in its status; false
 * on timeout. Only woken by interrupts: NEEDS_RESET must come with a
 * config interrupt.
 */
static inline bool vdrv_wait_status(struct vdrv *d, uint32_t bits,
				    long timeout_ms)
{
	long deadline = vdrv_now_ms() + timeout_ms;

	while ((vdrv_status(d) & bits) != bits) {
		if (vdrv_now_ms() >= deadline)
			return false;
		vdrv_irq_wait(d, deadline - vdrv_now_ms());
	}
	return true;
}

/*
 * The device gave up on a hostile ring: NEEDS_RESET (with a config
 * interrupt, within timeout_ms) on top of a live status, nothing returned
 * in the used ring at used, no byte outside RAM touched.
 */
static inline void vdrv_expect_broken(struct __test_metadata *_metadata,
				      struct vdrv *d, uint64_t used,
				      long timeout_ms, const char *what)
{
	const uint32_t live =
		VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
		VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK;

	ASSERT_TRUE(
		vdrv_wait_status(d, VIRTIO_CONFIG_S_NEEDS_RESET, timeout_ms))
	TH_LOG("%s", what);
	EXPECT_EQ(live | VIRTIO_CONFIG_S_NEEDS_RESET, vdrv_status(d))
	TH_LOG("%s", what);
	EXPECT_EQ(0, vdrv_load16(d, used + 2)) TH_LOG("%s", what);
	EXPECT_TRUE(vdrv_guards_intact(d)) TH_LOG("%s", what);
}

#endif
