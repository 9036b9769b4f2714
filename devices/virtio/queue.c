// SPDX-License-Identifier: GPL-2.0
/*
 * Split virtqueue, device side (virtio 1.1, section 2.6).
 *
 * Guest memory is shared with a driver that may be hostile and runs
 * concurrently. Three habits keep that safe:
 *  - indices and ring entries are loaded exactly once (atomic loads), and
 *    a descriptor is copied out of guest memory whole before any check, so
 *    the guest cannot change a value between check and use;
 *  - every address goes through guest_mem__ptr() with its full length;
 *  - every loop is bounded by a size fixed at configure time, not by
 *    anything the guest can change afterwards.
 * All ring fields are little-endian (virtio 1.x), hence the le*toh().
 */
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_ring.h>

#include "devices/virtio/queue.h"
#include "lib/counter.h"
#include "lib/warn.h"

/* Entries an indirect table may hold: more could never fit a chain. */
#define VQ_INDIRECT_MAX VQ_CHAIN_MAX_IOV

/* ---- the ring layout (2.6: always with the event index fields) ---- */

static uint64_t desc_area_size(uint16_t size)
{
	return (uint64_t)size * sizeof(struct vring_desc);
}

/* flags, idx, ring[size], used_event */
static uint64_t avail_area_size(uint16_t size)
{
	return offsetof(struct vring_avail, ring) +
	       (uint64_t)size * sizeof(uint16_t) + sizeof(uint16_t);
}

/* flags, idx, ring[size], avail_event */
static uint64_t used_area_size(uint16_t size)
{
	return offsetof(struct vring_used, ring) +
	       (uint64_t)size * sizeof(struct vring_used_elem) +
	       sizeof(uint16_t);
}

/*
 * Shared-memory accessors. Relaxed atomics: each is one load or store the
 * compiler may neither split, repeat nor merge (READ_ONCE/WRITE_ONCE);
 * ordering comes from the explicit, commented fences below. Every pointer
 * is aligned: configure checked the areas, and the offsets keep it.
 */
static uint16_t load16(const uint8_t *p)
{
	return le16toh(__atomic_load_n((const uint16_t *)(const void *)p,
				       __ATOMIC_RELAXED));
}

static void store16(uint8_t *p, uint16_t v)
{
	__atomic_store_n((uint16_t *)(void *)p, htole16(v), __ATOMIC_RELAXED);
}

static void store32(uint8_t *p, uint32_t v)
{
	__atomic_store_n((uint32_t *)(void *)p, htole32(v), __ATOMIC_RELAXED);
}

static uint8_t *avail_flags(const struct virtqueue *q)
{
	return q->avail + offsetof(struct vring_avail, flags);
}

static uint8_t *avail_idx(const struct virtqueue *q)
{
	return q->avail + offsetof(struct vring_avail, idx);
}

static uint8_t *avail_ring(const struct virtqueue *q, uint16_t i)
{
	return q->avail + offsetof(struct vring_avail, ring) +
	       (size_t)i * sizeof(uint16_t);
}

uint16_t virtqueue__avail_idx(const struct virtqueue *q)
{
	return load16(avail_idx(q));
}

/* used_event sits right after the avail ring: avail->ring[size]. */
static uint8_t *used_event(const struct virtqueue *q)
{
	return avail_ring(q, q->size);
}

static uint8_t *used_flags(const struct virtqueue *q)
{
	return q->used + offsetof(struct vring_used, flags);
}

static uint8_t *used_idx(const struct virtqueue *q)
{
	return q->used + offsetof(struct vring_used, idx);
}

static uint8_t *used_elem(const struct virtqueue *q, uint16_t i)
{
	return q->used + offsetof(struct vring_used, ring) +
	       (size_t)i * sizeof(struct vring_used_elem);
}

/* avail_event sits right after the used ring: used->ring[size]. */
static uint8_t *avail_event(const struct virtqueue *q)
{
	return used_elem(q, q->size);
}

/* ---- breaking a queue --------------------------------------------- */

/*
 * The driver broke the ring contract. There is no way to tell which of its
 * other entries can still be trusted, so the queue stops: every later pop
 * and push fails until the driver resets the device. Logged once per
 * queue, for its whole life, so a guest resetting and breaking the queue
 * in a loop cannot flood the log.
 */
static __attribute__((format(printf, 2, 3))) int vq_break(struct virtqueue *q,
							  const char *fmt, ...)
{
	va_list ap;

	q->broken = true;
	va_start(ap, fmt);
	warn__vonce(&q->warned, q->name ? q->name : "virtqueue",
		    "; queue stopped until device reset", fmt, ap);
	va_end(ap);
	return -EIO;
}

/* ---- setup -------------------------------------------------------- */

void virtqueue__init(struct virtqueue *q, const char *name)
{
	memset(q, 0, sizeof(*q));
	q->name = name;
	q->max_chain_bytes = VQ_CHAIN_MAX_BYTES;
}

void virtqueue__reset(struct virtqueue *q)
{
	const char *name = q->name;
	uint64_t max = q->max_chain_bytes;
	bool warned = q->warned;
	struct vq_stats stats = q->stats;

	virtqueue__init(q, name);
	q->max_chain_bytes = max;
	q->warned = warned;
	/* What the driver gave and never got back is no longer in flight. */
	counter__add(&stats.forgotten,
		     stats.popped - stats.used - stats.forgotten);
	q->stats = stats;
}

void virtqueue__set_max_chain_bytes(struct virtqueue *q, uint64_t max)
{
	if (max && max <= VQ_CHAIN_MAX_BYTES)
		q->max_chain_bytes = max;
}

/*
 * The host view of a ring area: inside guest memory, and aligned both as
 * a guest address (the spec's rule) and as a host address (our atomics).
 */
static uint8_t *map_area(const struct guest_mem *mem, uint64_t gpa,
			 uint64_t len, unsigned int align)
{
	uint8_t *p;

	if (gpa & (align - 1))
		return NULL;
	p = guest_mem__ptr(mem, gpa, len);
	if (!p || ((uintptr_t)p & (align - 1)))
		return NULL;
	return p;
}

int virtqueue__configure(struct virtqueue *q, const struct guest_mem *mem,
			 uint16_t size, uint64_t desc_gpa, uint64_t avail_gpa,
			 uint64_t used_gpa, bool event_idx)
{
	uint8_t *desc, *avail, *used;

	virtqueue__reset(q);
	if (!size || (size & (size - 1)) || size > VIRTQUEUE_MAX_SIZE) {
		vq_break(q, "queue size %u is not a power of 2 in 1..%u", size,
			 VIRTQUEUE_MAX_SIZE);
		return -EINVAL;
	}
	desc = map_area(mem, desc_gpa, desc_area_size(size),
			VRING_DESC_ALIGN_SIZE);
	avail = map_area(mem, avail_gpa, avail_area_size(size),
			 VRING_AVAIL_ALIGN_SIZE);
	used = map_area(mem, used_gpa, used_area_size(size),
			VRING_USED_ALIGN_SIZE);
	if (!desc || !avail || !used) {
		vq_break(q, "rings %#llx/%#llx/%#llx size %u: %s",
			 (unsigned long long)desc_gpa,
			 (unsigned long long)avail_gpa,
			 (unsigned long long)used_gpa, size,
			 "misaligned or outside guest memory");
		return -EINVAL;
	}
	/*
	 * The areas may overlap each other: that only hurts the driver that
	 * asked for it, as we never write outside the used area.
	 */
	q->mem = mem;
	q->size = size;
	q->desc_gpa = desc_gpa;
	q->avail_gpa = avail_gpa;
	q->used_gpa = used_gpa;
	q->desc = desc;
	q->avail = avail;
	q->used = used;
	q->event_idx = event_idx;
	/*
	 * Both indices start at 0 with the queue (the driver zeroes the
	 * rings); ours live in q and the guest's copies are never read back.
	 */
	q->ready = true;
	return 0;
}

/* ---- pop ---------------------------------------------------------- */

/* One descriptor, copied out of guest memory before anything checks it. */
static void read_desc(const uint8_t *table, uint32_t i, struct vring_desc *d)
{
	memcpy(d, table + (size_t)i * sizeof(*d), sizeof(*d));
	d->addr = le64toh(d->addr);
	d->len = le32toh(d->len);
	d->flags = le16toh(d->flags);
	d->next = le16toh(d->next);
}

/* Append one direct descriptor (already copied) to the chain. */
static int add_segment(struct virtqueue *q, struct vq_chain *c,
		       const struct vring_desc *d)
{
	bool writable = d->flags & VRING_DESC_F_WRITE;
	void *p;

	/*
	 * Zero-length descriptors: virtio 1.1 neither allows nor forbids
	 * them, no driver we know of makes them, and QEMU rejects them too.
	 * We treat one as a ring violation, so that every segment a device
	 * sees is a nonempty range inside guest memory.
	 */
	if (!d->len)
		return vq_break(q, "chain %u: zero-length descriptor", c->head);
	/* 2.6.5: all readable descriptors come before writable ones. */
	if (!writable && c->nr_in)
		return vq_break(
			q, "chain %u: readable descriptor after a writable one",
			c->head);
	if (c->nr_out + c->nr_in >= VQ_CHAIN_MAX_IOV)
		return vq_break(q, "chain %u: more than %u segments", c->head,
				VQ_CHAIN_MAX_IOV);
	p = guest_mem__ptr(q->mem, d->addr, d->len);
	if (!p)
		return vq_break(
			q, "chain %u: buffer %#llx+%#x is outside guest memory",
			c->head, (unsigned long long)d->addr, d->len);
	/* Both sums stay far below 2^64: at most 1024 * 2^32. */
	if (c->out_len + c->in_len + d->len > q->max_chain_bytes)
		return vq_break(q, "chain %u: longer than %llu bytes", c->head,
				(unsigned long long)q->max_chain_bytes);

	c->iov[c->nr_out + c->nr_in] = (struct iovec){
		.iov_base = p,
		.iov_len = d->len,
	};
	if (writable) {
		c->nr_in++;
		c->in_len += d->len;
	} else {
		c->nr_out++;
		c->out_len += d->len;
	}
	return 0;
}

/* Where a chain walk is: the table it reads and how long that is. */
struct walk {
	const uint8_t *table;
	uint32_t entries;
	bool indirect; /* in the (one) indirect table */
};

/* Switch the walk to the indirect table that d (a copy) points to. */
static int enter_indirect(struct virtqueue *q, const struct vq_chain *c,
			  const struct vring_desc *d, struct walk *w)
{
	/* 2.6.5.3: one table per descriptor, no nesting. */
	if (w->indirect)
		return vq_break(q, "chain %u: nested indirect table", c->head);
	/* 2.6.5.3: INDIRECT and NEXT are exclusive. */
	if (d->flags & VRING_DESC_F_NEXT)
		return vq_break(q, "chain %u: INDIRECT with NEXT", c->head);
	if (!d->len || d->len % sizeof(*d) ||
	    d->len / sizeof(*d) > VQ_INDIRECT_MAX)
		return vq_break(q, "chain %u: indirect table length %u",
				c->head, d->len);
	/* The WRITE flag of d itself is ignored (2.6.5.3). */
	w->table = guest_mem__ptr(q->mem, d->addr, d->len);
	if (!w->table)
		return vq_break(q, "chain %u: indirect table %#llx+%#x: %s",
				c->head, (unsigned long long)d->addr, d->len,
				"outside guest memory");
	w->entries = d->len / sizeof(*d);
	w->indirect = true;
	return 0;
}

/*
 * Walk the chain at c->head. Each table is walked at most entries steps,
 * so a looping chain ends as an error; the descriptor table may hand over
 * to one indirect table, which may not hand over again. Total work: at
 * most size + VQ_INDIRECT_MAX steps, whatever the guest wrote.
 */
static int walk_chain(struct virtqueue *q, struct vq_chain *c)
{
	struct walk w = { .table = q->desc, .entries = q->size };
	uint32_t i = c->head, steps = 0;
	struct vring_desc d;
	int ret;

	for (;;) {
		if (i >= w.entries)
			return vq_break(q, "chain %u: index %u out of %u",
					c->head, i, w.entries);
		if (++steps > w.entries)
			return vq_break(q,
					"chain %u: over %u descriptors (loop)",
					c->head, w.entries);
		read_desc(w.table, i, &d);

		if (d.flags & VRING_DESC_F_INDIRECT) {
			ret = enter_indirect(q, c, &d, &w);
			if (ret)
				return ret;
			i = 0;
			steps = 0;
			continue;
		}

		ret = add_segment(q, c, &d);
		if (ret)
			return ret;
		if (!(d.flags & VRING_DESC_F_NEXT))
			return 0;
		i = d.next;
	}
}

int virtqueue__pop(struct virtqueue *q, struct vq_chain *chain)
{
	uint16_t idx, pending, head;
	int ret;

	if (q->broken)
		return -EIO;
	if (!q->ready)
		return -ENODEV;

	idx = load16(avail_idx(q));
	pending = idx - q->last_avail_idx;
	if (!pending)
		return 0;
	/*
	 * A malformed avail->idx. A driver can never have more than size
	 * buffers outstanding, so an index more than size ahead of what we
	 * consumed means a corrupt or hostile driver: we can no longer tell
	 * fresh entries from stale ones. Deliberate decision: do not guess
	 * (say, process the last size entries), stop the queue; the driver
	 * recovers by resetting the device.
	 */
	if (pending > q->size)
		return vq_break(q, "avail idx %u jumped %u past %u (size %u)",
				idx, pending, q->last_avail_idx, q->size);
	/*
	 * Read barrier (virtio_rmb): the driver writes the ring entry and its
	 * descriptors before it bumps avail->idx (with a write barrier);
	 * without this fence we could read them before the index, stale.
	 */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);

	head = load16(avail_ring(q, q->last_avail_idx & (q->size - 1)));
	memset(chain, 0, offsetof(struct vq_chain, iov));
	chain->head = head;
	ret = walk_chain(q, chain);
	if (ret)
		return ret;
	/*
	 * Only a good chain is consumed; a bad one has broken the queue, and
	 * last_avail_idx no longer matters until the reset.
	 */
	q->last_avail_idx++;
	counter__add(&q->stats.popped, 1);
	counter__add(&q->stats.bytes_out, chain->out_len);
	return 1;
}

/* ---- push and notifications --------------------------------------- */

int virtqueue__fill(struct virtqueue *q, uint16_t head, uint32_t len)
{
	uint8_t *elem;

	if (q->broken)
		return -EIO;
	if (!q->ready)
		return -ENODEV;
	/* Device bugs, not the guest's: more pushes than pops, bad head. */
	if (head >= q->size || q->used_idx == q->last_avail_idx)
		return -EINVAL;

	elem = used_elem(q, q->used_idx & (q->size - 1));
	store32(elem + offsetof(struct vring_used_elem, id), head);
	store32(elem + offsetof(struct vring_used_elem, len), len);
	q->used_idx++;
	counter__add(&q->stats.used, 1);
	counter__add(&q->stats.bytes_in, len);
	return 0;
}

void virtqueue__flush(struct virtqueue *q)
{
	if (q->broken || !q->ready)
		return;
	/*
	 * Write barrier (virtio_wmb): the elements must be visible before the
	 * index that hands them to the driver, or it could read a stale id.
	 */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	store16(used_idx(q), q->used_idx);
}

int virtqueue__push(struct virtqueue *q, uint16_t head, uint32_t len)
{
	int ret = virtqueue__fill(q, head, len);

	if (!ret)
		virtqueue__flush(q);
	return ret;
}

bool virtqueue__should_notify(struct virtqueue *q)
{
	uint16_t old, event;
	bool valid;

	if (q->broken || !q->ready)
		return false;
	/*
	 * Full barrier (virtio_mb): our used->idx store must be visible
	 * before we read the driver's flags or used_event. Otherwise a store
	 * and a load pass each other: the driver re-enables interrupts after
	 * checking an old used->idx, we read the old "no interrupt" and it
	 * waits forever for a buffer we already returned.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);

	if (!q->event_idx)
		return !(load16(avail_flags(q)) & VRING_AVAIL_F_NO_INTERRUPT);

	old = q->signalled_used;
	valid = q->signalled_used_valid;
	q->signalled_used = q->used_idx;
	q->signalled_used_valid = true;
	/* The first decision has no "old": notify, to be safe. */
	if (!valid) {
		q->notified_used = q->used_idx;
		return true;
	}
	event = load16(used_event(q));
	q->seen_used_event = event;
	/* 2.6.7: interrupt when used->idx moved past used_event. */
	if (!vring_need_event(event, q->used_idx, old))
		return false;
	q->notified_used = q->used_idx;
	return true;
}

void virtqueue__set_notify_suppression(struct virtqueue *q, bool suppress)
{
	if (q->broken || !q->ready)
		return;
	if (q->event_idx) {
		if (suppress)
			return;
		/* Kick us as soon as the entry after the last one we took. */
		store16(avail_event(q), q->last_avail_idx);
	} else {
		store16(used_flags(q), suppress ? VRING_USED_F_NO_NOTIFY : 0);
	}
	/*
	 * Full barrier (virtio_mb): the request must be visible before the
	 * caller re-reads avail->idx in its next pop. Otherwise the driver
	 * may add a buffer, read the old suppression state and not kick,
	 * while we read the old avail->idx and go idle: a lost wakeup.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

uint16_t virtqueue__kick_on_next_avail(struct virtqueue *q)
{
	uint16_t idx;

	if (q->broken || !q->ready)
		return 0;
	if (!q->event_idx) {
		virtqueue__set_notify_suppression(q, false);
		return virtqueue__avail_idx(q);
	}
	idx = virtqueue__avail_idx(q);
	store16(avail_event(q), idx);
	/* As above: the request before the caller's next look at idx. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return idx;
}

/* ---- giving popped chains back (snapshots) ------------------------ */

bool virtqueue__popped_last(const struct virtqueue *q, const uint16_t *heads,
			    unsigned int nr)
{
	/* Popped and not used: last_avail_idx - used_idx at most. */
	if (!q->ready || !q->size || nr > q->size ||
	    nr > (uint16_t)(q->last_avail_idx - q->used_idx))
		return false;
	for (unsigned int i = 0; i < nr; i++) {
		uint16_t idx = (uint16_t)(q->last_avail_idx - nr + i);

		if (load16(avail_ring(q, idx & (q->size - 1))) != heads[i])
			return false;
	}
	return true;
}

int virtqueue__unpop(struct virtqueue *q, const uint16_t *heads,
		     unsigned int nr)
{
	if (!virtqueue__popped_last(q, heads, nr))
		return -EINVAL;
	q->last_avail_idx = (uint16_t)(q->last_avail_idx - nr);
	return 0;
}

/* ---- describing a queue ------------------------------------------ */

int virtqueue__describe(const struct virtqueue *q, char *buf, size_t len)
{
	if (!q->ready)
		return snprintf(buf, len, "%s: not ready", q->name);
	/*
	 * The driver's fields are read once each, without a lock: a picture
	 * of the moment, for a reader who wants to see which side is waiting
	 * (avail idx past taken: a kick we did not see; used idx past
	 * used_event with the interrupt status set: an interrupt the driver
	 * did not take).
	 */
	return snprintf(
		buf, len,
		"%s: size %u%s avail idx %u flags %#x taken %u | used "
		"idx %u flags %#x signalled %u%s notified %u | "
		"used_event %u (last read %u) avail_event %u",
		q->name, q->size, q->broken ? " BROKEN" : "",
		load16(avail_idx(q)), load16(avail_flags(q)), q->last_avail_idx,
		q->used_idx, load16(used_flags(q)), q->signalled_used,
		q->signalled_used_valid ? "" : " (none yet)", q->notified_used,
		q->event_idx ? load16(used_event(q)) : 0, q->seen_used_event,
		q->event_idx ? load16(avail_event(q)) : 0);
}

void virtqueue__drain_start(struct vq_drain *d, struct virtqueue *q)
{
	d->q = q;
	d->asked = false;
	virtqueue__set_notify_suppression(q, true);
}

int virtqueue__pop_or_rearm(struct vq_drain *d, struct vq_chain *chain)
{
	int ret;

	for (;;) {
		ret = virtqueue__pop(d->q, chain);
		if (ret == 1) {
			d->asked = false;
			return 1;
		}
		if (ret < 0 || d->asked)
			return ret;
		/* Empty: ask for kicks again, then look once more. */
		virtqueue__set_notify_suppression(d->q, false);
		d->asked = true;
	}
}
