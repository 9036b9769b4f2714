/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_QUEUE_H
#define KILN_VIRTIO_QUEUE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "lib/compiler.h"
#include "devices/virtio/guest-mem.h"
#include "lib/log.h"

/*
 * The device side of a split virtqueue (virtio 1.1, section 2.6), hardened
 * against a hostile driver: every index, length and address the guest
 * writes is checked before use, every loop it can influence is bounded,
 * and the first violation stops the queue ("broken"): it is logged once,
 * and every later pop or push fails until the device is reset.
 *
 * One thread at a time per queue: the device serialises pop, push and the
 * notification calls; the guest runs concurrently on other CPUs.
 */

#define VIRTQUEUE_MAX_SIZE 32768 /* the spec's maximum Queue Size */

/*
 * Segments one chain may have, readable and writable together: IOV_MAX, so
 * a chain always fits a single preadv/pwritev. A device advertises a lower
 * limit to the driver (virtio-blk seg_max, ...) and a driver that goes past
 * this one is broken.
 */
#define VQ_CHAIN_MAX_IOV 1024

/* Default cap on a chain's total bytes: 2.6.5 forbids chains over 2^32. */
#define VQ_CHAIN_MAX_BYTES (1ULL << 32)

/*
 * A popped chain: iov[0 .. nr_out) are readable (driver to device),
 * iov[nr_out .. nr_out + nr_in) writable (device to driver). Every
 * segment is nonempty and lies inside guest memory.
 */
struct vq_chain {
	uint16_t head; /* pass back to virtqueue__push() */
	unsigned int nr_out;
	unsigned int nr_in;
	uint64_t out_len; /* bytes in the readable segments */
	uint64_t in_len;  /* bytes in the writable segments */
	struct iovec iov[VQ_CHAIN_MAX_IOV];
};

/*
 * What went through a queue, for vm.metrics: counted by the queue's
 * writer (the device, under its lock), read by any thread with
 * counter__get (lib/counter.h). Monotonic: a reset keeps them.
 */
struct vq_stats {
	uint64_t popped;    /* chains taken from the driver */
	uint64_t used;	    /* chains given back */
	uint64_t forgotten; /* taken, then dropped by a reset */
	uint64_t bytes_out; /* readable bytes of the chains taken */
	uint64_t bytes_in;  /* bytes written into the chains given back */
};

struct virtqueue {
	const char *name; /* for the log: "virtio-blk0 rq0" */
	const struct guest_mem *mem;

	/* As configured by the driver, checked by virtqueue__configure(). */
	uint16_t size; /* power of 2, 0 while not configured */
	uint64_t desc_gpa;
	uint64_t avail_gpa;
	uint64_t used_gpa;
	bool event_idx; /* VIRTIO_RING_F_EVENT_IDX negotiated */
	uint64_t max_chain_bytes;

	/* Host views of the three areas, valid while ready. */
	uint8_t *desc;
	uint8_t *avail;
	uint8_t *used;

	/* Device state, never read back from guest memory. */
	uint16_t last_avail_idx; /* next avail entry to pop */
	uint16_t used_idx;	 /* next used entry; published by a flush */
	uint16_t signalled_used; /* used_idx when we last decided */
	bool signalled_used_valid;
	/* For virtqueue__describe: the last decision's inputs and outcome. */
	uint16_t seen_used_event; /* used_event it read */
	uint16_t notified_used;	  /* used_idx at the last notification */

	bool ready;
	bool broken;
	bool warned;	       /* survives resets: one message per queue */
	struct vq_stats stats; /* survives resets */
};

/* The driver's avail idx as it is now (the queue must be ready). */
uint16_t virtqueue__avail_idx(const struct virtqueue *q);

/* Once, when the device is created: name must outlive the queue. */
void virtqueue__init(struct virtqueue *q, const char *name);

/*
 * The driver set the queue up (QueueReady): check size (power of 2,
 * 1..32768), alignment (16/2/4 bytes) and that all three areas lie in
 * guest memory. -EINVAL otherwise, and the queue is broken until reset.
 */
int __must_check virtqueue__configure(struct virtqueue *q,
				      const struct guest_mem *mem,
				      uint16_t size, uint64_t desc_gpa,
				      uint64_t avail_gpa, uint64_t used_gpa,
				      bool event_idx);

/* Device reset: back to unconfigured, not broken. */
void virtqueue__reset(struct virtqueue *q);

/* Lower the per-chain byte cap (a device's own request size limit). */
void virtqueue__set_max_chain_bytes(struct virtqueue *q, uint64_t max);

/*
 * Take the next available chain: 1 with *chain filled, 0 when the ring is
 * empty, -EIO when the queue is (now) broken, -ENODEV when not configured.
 */
int __must_check virtqueue__pop(struct virtqueue *q, struct vq_chain *chain);

/*
 * Return chain head to the driver with len bytes written into its
 * writable part, and publish it. -EIO on a broken queue, -EINVAL for a
 * head that is out of range or more pushes than pops (device bugs).
 */
int __must_check virtqueue__push(struct virtqueue *q, uint16_t head,
				 uint32_t len);

/*
 * virtqueue__push() in two halves, for a device that returns several
 * chains at once: fill writes the used element (same checks and errors
 * as push) but leaves used->idx alone; flush publishes every element
 * filled since, in one store. The driver sees none of them before the
 * flush, so what belongs together (the buffers of one merged receive
 * frame) reaches it together. Call virtqueue__should_notify() after the
 * flush, never between.
 */
int __must_check virtqueue__fill(struct virtqueue *q, uint16_t head,
				 uint32_t len);
void virtqueue__flush(struct virtqueue *q);

/*
 * After one or more pushes: does the driver want an interrupt now? Honours
 * VRING_AVAIL_F_NO_INTERRUPT, or used_event with VIRTIO_RING_F_EVENT_IDX.
 */
bool virtqueue__should_notify(struct virtqueue *q);

/*
 * Ask the driver not to notify us (suppress) while we are busy popping,
 * or to notify again (!suppress). With event indexes, !suppress asks for a
 * kick on the next buffer (avail_event = last_avail_idx) and suppress is
 * a no-op (the driver only kicks when it crosses avail_event anyway).
 * After !suppress the caller must pop once more: a buffer made available
 * just before the driver saw the request would otherwise sit unnoticed.
 */
void virtqueue__set_notify_suppression(struct virtqueue *q, bool suppress);

/*
 * A kick for the next buffer the driver makes available, however many it
 * made available that were not taken (a queue the device takes from only
 * now and then: vsock's events). With event indexes that is avail_event
 * = avail->idx now; set_notify_suppression(false) asks for one past the
 * last taken, which a driver already beyond it never kicks for. Returns
 * the avail idx it read.
 */
uint16_t virtqueue__kick_on_next_avail(struct virtqueue *q);

/*
 * Draining a queue, as every device does when kicked: notifications off
 * while popping, and once the ring looks empty, on again and one more
 * look, or a buffer made available in between sits unnoticed.
 *
 *	struct vq_drain d;
 *
 *	virtqueue__drain_start(&d, vq);
 *	while (have_room && (ret = virtqueue__pop_or_rearm(&d, c)) == 1)
 *		handle(c);
 *	if (ret == -EIO)	the queue broke: set NEEDS_RESET
 *
 * The caller may stop early (no slot for the next chain): the queue then
 * stays quiet until it drains again, which it must do when the slot is
 * back. Found after asking, a chain makes the request stale (with
 * EVENT_IDX, avail_event lags the chain taken), so the next empty ring
 * asks again, or the driver skips the kick for its next buffer and the
 * device idles.
 */
struct vq_drain {
	struct virtqueue *q;
	bool asked; /* notifications on since the last chain */
};

void virtqueue__drain_start(struct vq_drain *d, struct virtqueue *q);

/*
 * 1 with *chain filled; 0 when the ring is empty and kicks are asked for
 * again; -EIO or -ENODEV as virtqueue__pop().
 */
int __must_check virtqueue__pop_or_rearm(struct vq_drain *d,
					 struct vq_chain *chain);

/*
 * For a snapshot: are heads[0 .. nr) the chains of the last nr avail
 * entries popped (the ones just before last_avail_idx, in order)? A
 * device that holds popped chains it has not used saves them this way,
 * and its restore gives them back with virtqueue__unpop.
 */
bool virtqueue__popped_last(const struct virtqueue *q, const uint16_t *heads,
			    unsigned int nr);
/*
 * A restore: the last nr chains popped go back to the ring (the next pop
 * takes them again), when they are heads[0 .. nr) as saved. 0, or
 * -EINVAL when the queue is not ready or its ring does not hold them
 * there: not the ring the snapshot saw.
 */
int __must_check virtqueue__unpop(struct virtqueue *q, const uint16_t *heads,
				  unsigned int nr);

/*
 * One line on the state of q and of the driver's side of its ring, for a
 * stuck-device report: snprintf's return. Takes no lock.
 */
int virtqueue__describe(const struct virtqueue *q, char *buf, size_t len);

static inline bool virtqueue__is_broken(const struct virtqueue *q)
{
	return q->broken;
}

static inline bool virtqueue__is_ready(const struct virtqueue *q)
{
	return q->ready;
}

#endif
