/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_VIRTIO_DRIVER_H
#define KILN_SELFTESTS_VIRTIO_DRIVER_H

/*
 * The fake virtio-mmio driver the device unit tests share: guest RAM
 * between two guard areas, the register file read and written through
 * devices/virtio/mmio.c as a vCPU would, feature negotiation, queue set-up,
 * the kick decision of virtqueue_kick() and the interrupt line, and
 * struct vdrv_queue: one queue's bookkeeping (free descriptors, chains
 * in flight, the indices), as drivers/virtio/virtio_ring.c keeps it.
 * Each test keeps its own layout of guest memory.
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
	/*
	 * virtio_wmb: the entry and the descriptors before the index (the
	 * index is a release store).
	 */
	(*avail_idx)++;
	vdrv_store16(d, avail + 2, *avail_idx);
}

/* ---- one queue, as a driver keeps it ------------------------------- */

#define VDRV_QUEUE_MAX 256 /* entries of the largest queue a test sets up */

/*
 * The driver's side of one split virtqueue (struct vring_virtqueue): where
 * its rings are, its indices, the free descriptors and the chains in
 * flight by head. Zeroed (size 0) it is not set up and reaps nothing.
 */
struct vdrv_queue {
	unsigned int index;	    /* QueueSel, QueueNotify */
	uint64_t desc, avail, used; /* GPAs of the rings */
	uint16_t size;		    /* 0: not set up */
	uint16_t avail_idx;
	uint16_t last_used;
	uint16_t kicked; /* avail_idx at the last kick decision */
	uint16_t nr_free;
	uint16_t free[VDRV_QUEUE_MAX];	   /* popped from the end */
	uint16_t link[VDRV_QUEUE_MAX];	   /* the driver's copy of each next */
	uint16_t ndesc[VDRV_QUEUE_MAX];	   /* by head: held, 0: none */
	uint32_t used_len[VDRV_QUEUE_MAX]; /* by head: what the device said */
	void *data[VDRV_QUEUE_MAX];	   /* by head: the caller's */
};

/*
 * vm_setup_vq(): queue index of size entries (at most VDRV_QUEUE_MAX),
 * its rings at those GPAs (below 4 GiB), every descriptor free. Heads
 * come out 0, 1, 2, ... at first. The rings are not cleared.
 */
static inline void vdrv_queue_setup(struct vdrv *d, struct vdrv_queue *vq,
				    unsigned int index, uint16_t size,
				    uint64_t desc, uint64_t avail,
				    uint64_t used)
{
	memset(vq, 0, sizeof(*vq));
	vq->index = index;
	vq->desc = desc;
	vq->avail = avail;
	vq->used = used;
	vdrv_setup_queue(d, index, size, desc, avail, used);
	vq->size = size;
	for (unsigned int i = 0; i < size; i++)
		vq->free[i] = size - 1 - i;
	vq->nr_free = size;
}

/* The descriptor the next vdrv_queue_alloc() returns; nr_free > 0. */
static inline uint16_t vdrv_queue_peek(const struct vdrv_queue *vq)
{
	return vq->free[vq->nr_free - 1];
}

/* Takes a free descriptor; nr_free > 0. */
static inline uint16_t vdrv_queue_alloc(struct vdrv_queue *vq)
{
	return vq->free[--vq->nr_free];
}

/* Descriptor i of vq's table, written as it is. */
static inline void vdrv_queue_desc(struct vdrv *d, struct vdrv_queue *vq,
				   uint16_t i, uint64_t addr, uint32_t len,
				   uint16_t flags, uint16_t next)
{
	vdrv_put_desc(d, vq->desc, i, addr, len, flags, next);
}

/* Records head as in flight, holding ndesc descriptors, with data. */
static inline void vdrv_queue_track(struct vdrv_queue *vq, uint16_t head,
				    uint16_t ndesc, void *data)
{
	vq->ndesc[head] = ndesc;
	vq->data[head] = data;
	vq->used_len[head] = UINT32_MAX;
}

/*
 * virtqueue_add(): the n descriptors of chain (addr, len and flags in CPU
 * order; NEXT and next are filled in) in free descriptors of vq, in
 * flight with data, not yet available. Returns the head, or -ENOSPC.
 */
static inline int vdrv_queue_add(struct vdrv *d, struct vdrv_queue *vq,
				 const struct vring_desc *chain, unsigned int n,
				 void *data)
{
	uint16_t idx[VDRV_QUEUE_MAX];
	unsigned int i;

	if (!n || n > vq->nr_free)
		return -ENOSPC;
	for (i = 0; i < n; i++)
		idx[i] = vdrv_queue_alloc(vq);
	for (i = 0; i < n; i++) {
		bool more = i + 1 < n;

		vdrv_queue_desc(d, vq, idx[i], chain[i].addr, chain[i].len,
				chain[i].flags | (more ? VRING_DESC_F_NEXT : 0),
				more ? idx[i + 1] : 0);
		if (more)
			vq->link[idx[i]] = idx[i + 1];
	}
	vdrv_queue_track(vq, idx[0], n, data);
	return idx[0];
}

/*
 * The same, the chain in an indirect table at table (linked 0, 1, 2, ...)
 * behind one descriptor of vq. Returns the head, or -ENOSPC.
 */
static inline int vdrv_queue_add_indirect(struct vdrv *d, struct vdrv_queue *vq,
					  uint64_t table,
					  const struct vring_desc *chain,
					  unsigned int n, void *data)
{
	uint16_t head;

	if (!n || !vq->nr_free)
		return -ENOSPC;
	for (unsigned int i = 0; i < n; i++) {
		bool more = i + 1 < n;

		vdrv_put_desc(d, table, i, chain[i].addr, chain[i].len,
			      chain[i].flags | (more ? VRING_DESC_F_NEXT : 0),
			      more ? i + 1 : 0);
	}
	head = vdrv_queue_alloc(vq);
	vdrv_queue_desc(d, vq, head, table, n * sizeof(*chain),
			VRING_DESC_F_INDIRECT, 0);
	vdrv_queue_track(vq, head, 1, data);
	return head;
}

/* Makes head available (the end of virtqueue_add()). */
static inline void vdrv_queue_publish(struct vdrv *d, struct vdrv_queue *vq,
				      uint16_t head)
{
	vdrv_publish(d, vq->avail, vq->size, &vq->avail_idx, head);
}

/* The QueueNotify write, whether the device asked for it or not. */
static inline void vdrv_queue_notify(struct vdrv *d,
				     const struct vdrv_queue *vq)
{
	vdrv_wr32(d, VIRTIO_MMIO_QUEUE_NOTIFY, vq->index);
}

/* virtqueue_kick(): notifies only when the device asked; true if so. */
static inline bool vdrv_queue_kick(struct vdrv *d, struct vdrv_queue *vq)
{
	uint16_t old = vq->kicked;

	vq->kicked = vq->avail_idx;
	if (!vdrv_need_kick(d, vq->used, vq->size, old, vq->avail_idx))
		return false;
	vdrv_queue_notify(d, vq);
	return true;
}

/* The device's used->idx (an acquire: entries are read after it). */
static inline uint16_t vdrv_queue_used_idx(const struct vdrv *d,
					   const struct vdrv_queue *vq)
{
	return vdrv_load16(d, vq->used + 2);
}

/*
 * The next used entry, if the device returned one: its id and length,
 * taken (last_used moves on). False when none, or vq is not set up.
 */
static inline bool vdrv_queue_pop_used(const struct vdrv *d,
				       struct vdrv_queue *vq, uint32_t *id,
				       uint32_t *len)
{
	uint64_t elem;

	if (!vq->size || vq->last_used == vdrv_queue_used_idx(d, vq))
		return false;
	elem = vq->used + 4 + 8 * (vq->last_used % vq->size);
	*id = vdrv_get32(d, elem);
	*len = vdrv_get32(d, elem + 4);
	vq->last_used++;
	return true;
}

/* Whether id names a chain in flight. */
static inline bool vdrv_queue_in_flight(const struct vdrv_queue *vq,
					uint32_t id)
{
	return id < vq->size && vq->ndesc[id];
}

/* The chain at head back to the free list; returns its data. */
static inline void *vdrv_queue_release(struct vdrv_queue *vq, uint16_t head)
{
	void *data = vq->data[head];

	for (uint16_t i = head, k = 0; k < vq->ndesc[head]; k++) {
		vq->free[vq->nr_free++] = i;
		i = vq->link[i];
	}
	vq->ndesc[head] = 0;
	vq->data[head] = NULL;
	return data;
}

/*
 * virtqueue_get_buf() until the used ring is empty: each chain returned
 * goes back to the free list with its used_len set, then done(arg, data,
 * len) when given. Entries naming no chain in flight count in *bad.
 * Returns how many entries were taken.
 */
static inline unsigned int
vdrv_queue_reap(struct vdrv *d, struct vdrv_queue *vq,
		void (*done)(void *arg, void *data, uint32_t len), void *arg,
		unsigned int *bad)
{
	unsigned int n = 0;
	uint32_t id, len;
	void *data;

	while (vdrv_queue_pop_used(d, vq, &id, &len)) {
		n++;
		if (!vdrv_queue_in_flight(vq, id)) {
			(*bad)++;
			continue;
		}
		vq->used_len[id] = len;
		data = vdrv_queue_release(vq, id);
		if (done)
			done(arg, data, len);
	}
	return n;
}

/*
 * vdrv_queue_reap(), then virtqueue_enable_cb(): with EVENT_IDX, asks for
 * an interrupt at the next used entry (used_event), and looks again.
 */
static inline unsigned int
vdrv_queue_reap_cb(struct vdrv *d, struct vdrv_queue *vq,
		   void (*done)(void *arg, void *data, uint32_t len), void *arg,
		   unsigned int *bad)
{
	unsigned int n = 0;

	if (!vq->size)
		return 0;
	while (vdrv_queue_used_idx(d, vq) != vq->last_used) {
		n += vdrv_queue_reap(d, vq, done, arg, bad);
		vdrv_store16(d, vq->avail + 4 + 2 * vq->size, vq->last_used);
		/*
		 * virtio_mb: used_event before we look at used->idx again.
		 * The device may have pushed and read the old used_event
		 * meanwhile, and then it does not interrupt: look again.
		 */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	}
	return n;
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
