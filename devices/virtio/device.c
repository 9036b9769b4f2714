// SPDX-License-Identifier: GPL-2.0
/*
 * The virtio 1.x device core (virtio 1.1, sections 2 and 3.1): device
 * status, feature negotiation, the queues, the config space and the
 * interrupt status, whatever the transport. A transport (mmio.c) decodes
 * its registers and calls the transport side of device.h under the
 * device lock.
 *
 * The driver is hostile: every value it writes is checked where it is
 * used, a selector out of range selects nothing, an access of the wrong
 * width does nothing, and nothing here can fail the monitor. The first
 * misbehaviour of a device is logged; later ones are not, so a guest
 * cannot flood the log.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include <linux/virtio_config.h>
#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_ring.h>

#include "lib/compiler.h"
#include "devices/virtio/device.h"
#include "lib/counter.h"
#include "lib/worker.h"

_Static_assert(VIRTIO_CORE_FEATURES == ((1ULL << VIRTIO_RING_F_INDIRECT_DESC) |
					(1ULL << VIRTIO_RING_F_EVENT_IDX) |
					(1ULL << VIRTIO_F_VERSION_1)),
	       "core features");

/*
 * Feature bits 24..41 are reserved for the transport and the rings (virtio
 * 1.1, section 6, plus the legacy NOTIFY_ON_EMPTY and ANY_LAYOUT below
 * VIRTIO_TRANSPORT_F_START); a device offers only the ones we implement.
 */
#define TRANSPORT_FEATURES                              \
	(((1ULL << (VIRTIO_TRANSPORT_F_END + 1)) - 1) & \
	 ~((1ULL << VIRTIO_F_NOTIFY_ON_EMPTY) - 1))

/* Status bits the driver writes; NEEDS_RESET is the device's own. */
#define DRIVER_STATUS_BITS                                         \
	(VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |    \
	 VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK | \
	 VIRTIO_CONFIG_S_FAILED)

static bool is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

/*
 * Logged the first time for the device's whole life (resets included): a
 * guest cannot flood the log.
 */
void virtio_device__warn(struct virtio_device *dev, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	if (dev->warned)
		return;
	dev->warned = true;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	pr_warn("%s: driver error: %s; ignored (further errors not logged)",
		dev->name, why);
}

/* ---- setup ------------------------------------------------------- */

static void close_kick_fds(struct virtio_device *dev)
{
	for (unsigned int i = 0; i < dev->nr_queues; i++) {
		if (dev->queues[i].kick_fd >= 0)
			close(dev->queues[i].kick_fd);
		dev->queues[i].kick_fd = -1;
	}
}

/*
 * Every queue gets its kick eventfd here, so that a transport can bind it
 * (an ioeventfd) the same way for every device, and a device's event loop
 * can wait on it.
 */
static int open_kick_fds(struct virtio_device *dev)
{
	int ret;

	for (unsigned int i = 0; i < dev->nr_queues; i++) {
		dev->queues[i].kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (dev->queues[i].kick_fd < 0) {
			ret = -errno;
			close_kick_fds(dev);
			return ret;
		}
	}
	return 0;
}

int virtio_device__init(struct virtio_device *dev,
			const struct virtio_device_params *p)
{
	uint64_t f = p->features;
	unsigned int i;
	int ret;

	memset(dev, 0, sizeof(*dev));
	if (!p->ops || !p->ops->queue_notify || !p->mem || !p->queues ||
	    !p->nr_queues || p->nr_queues > UINT16_MAX)
		return -EINVAL;
	if (!(f & (1ULL << VIRTIO_F_VERSION_1)) ||
	    (f & TRANSPORT_FEATURES & ~VIRTIO_CORE_FEATURES))
		return -EINVAL;
	if (p->config_size > VIRTIO_CONFIG_MAX_SIZE ||
	    !is_pow2(p->queue_max_size) ||
	    p->queue_max_size > VIRTQUEUE_MAX_SIZE)
		return -EINVAL;

	dev->name = p->name ? p->name : "virtio";
	dev->device_id = p->device_id;
	dev->device_features = f;
	dev->config_size = p->config_size;
	dev->ops = p->ops;
	dev->queues = p->queues;
	dev->nr_queues = p->nr_queues;
	dev->mem = p->mem;
	dev->irq = p->irq;
	for (i = 0; i < dev->nr_queues; i++) {
		struct virtio_queue *q = &dev->queues[i];

		memset(q, 0, sizeof(*q));
		snprintf(q->name, sizeof(q->name), "%s q%u", dev->name, i);
		virtqueue__init(&q->vq, q->name);
		q->max_size = p->queue_max_size;
		q->size = q->max_size;
		q->kick_fd = -1;
	}
	ret = open_kick_fds(dev);
	if (ret) {
		memset(dev, 0, sizeof(*dev));
		return ret;
	}
	pthread_mutex_init(&dev->lock, NULL);
	pthread_mutex_init(&dev->irq_lock, NULL);
	return 0;
}

/*
 * A device whose init failed is all zeros: no queues, a valid, unlocked
 * mutex.
 */
void virtio_device__exit(struct virtio_device *dev)
{
	if (!dev)
		return;
	close_kick_fds(dev);
	pthread_mutex_destroy(&dev->irq_lock);
	pthread_mutex_destroy(&dev->lock);
}

int virtio_device__set_queue_max(struct virtio_device *dev, unsigned int index,
				 uint16_t max_size)
{
	struct virtio_queue *q;

	if (index >= dev->nr_queues || !is_pow2(max_size))
		return -EINVAL;
	q = &dev->queues[index];
	if (max_size > q->max_size)
		return -EINVAL;
	q->max_size = max_size;
	q->size = max_size;
	return 0;
}

struct virtqueue *virtio_device__queue(struct virtio_device *dev,
				       unsigned int index)
{
	return index < dev->nr_queues ? &dev->queues[index].vq : NULL;
}

bool virtio_device__has_feature(const struct virtio_device *dev,
				unsigned int bit)
{
	return bit < 64 && (dev->features & (1ULL << bit));
}

void virtio_device__lock(struct virtio_device *dev)
{
	pthread_mutex_lock(&dev->lock);
}

void virtio_device__unlock(struct virtio_device *dev)
{
	pthread_mutex_unlock(&dev->lock);
}

/* ---- status and interrupts --------------------------------------- */

/*
 * Status is written under the device lock and read without it by the
 * notification paths (device threads): one atomic byte each way.
 */
static uint8_t status_get(const struct virtio_device *dev)
{
	return __atomic_load_n(&dev->status, __ATOMIC_ACQUIRE);
}

static void status_set(struct virtio_device *dev, uint8_t status)
{
	__atomic_store_n(&dev->status, status, __ATOMIC_RELEASE);
}

/* The device may use its queues and interrupt the driver (3.1.2). */
static bool status_live(uint8_t status)
{
	return (status & VIRTIO_CONFIG_S_DRIVER_OK) &&
	       !(status &
		 (VIRTIO_CONFIG_S_NEEDS_RESET | VIRTIO_CONFIG_S_FAILED));
}

/*
 * The interrupt status and the line move together under irq_lock: the
 * line is high exactly while some bit is pending, and it is driven only
 * on a change, so a burst of used buffers costs one raise. Behind an
 * edge-triggered pin (vmm/virtio-attach.c) that raise is the only edge
 * until the driver acknowledges: one lost below us (KVM, a nested
 * hypervisor) is never repeated, and the device waits for good. The
 * report shows it as isr set with raises one ahead of lowers while the
 * vCPUs halt.
 */
static void isr_raise(struct virtio_device *dev, uint32_t bits)
{
	pthread_mutex_lock(&dev->irq_lock);
	if (!dev->isr) {
		irq_line__set(&dev->irq, 1);
		dev->irq_raises++;
	}
	dev->isr |= bits;
	pthread_mutex_unlock(&dev->irq_lock);
}

void virtio_device__ack_isr(struct virtio_device *dev, uint32_t bits)
{
	pthread_mutex_lock(&dev->irq_lock);
	if (dev->isr && !(dev->isr & ~bits)) {
		irq_line__set(&dev->irq, 0);
		dev->irq_lowers++;
	}
	dev->isr &= ~bits;
	pthread_mutex_unlock(&dev->irq_lock);
}

uint32_t virtio_device__isr(struct virtio_device *dev)
{
	uint32_t isr;

	pthread_mutex_lock(&dev->irq_lock);
	isr = dev->isr;
	pthread_mutex_unlock(&dev->irq_lock);
	return isr;
}

uint8_t virtio_device__status(const struct virtio_device *dev)
{
	return status_get(dev);
}

bool virtio_device__is_live(const struct virtio_device *dev)
{
	return status_live(status_get(dev)) &&
	       !__atomic_load_n(&dev->paused, __ATOMIC_ACQUIRE);
}

void virtio_device__report(struct virtio_device *dev)
{
	bool locked = pthread_mutex_trylock(&dev->lock) == 0;
	char line[768];

	if (dev->ops->describe)
		dev->ops->describe(dev, locked, line, sizeof(line));
	else
		line[0] = '\0';
	/* isr is read bare: irq_lock may be what the device is stuck on. */
	pr_info("%s: status %#x features %#" PRIx64
		" isr %#x (line raised %" PRIu64 ", lowered %" PRIu64 ")%s%s%s",
		dev->name, status_get(dev), dev->features,
		__atomic_load_n(&dev->isr, __ATOMIC_RELAXED), dev->irq_raises,
		dev->irq_lowers, locked ? "" : " (device lock held elsewhere)",
		line[0] ? " | " : "", line);
	for (unsigned int i = 0; i < dev->nr_queues; i++) {
		virtqueue__describe(&dev->queues[i].vq, line, sizeof(line));
		pr_info("%s", line);
	}
	if (locked)
		pthread_mutex_unlock(&dev->lock);
}

void virtio_device__count_error(struct virtio_device *dev)
{
	counter__add(&dev->errors, 1);
}

void virtio_device__count_queue_full(struct virtio_device *dev)
{
	counter__add(&dev->queue_full, 1);
}

void virtio_device__stats(const struct virtio_device *dev,
			  struct virtio_device_stats *s)
{
	memset(s, 0, sizeof(*s));
	for (unsigned int i = 0; i < dev->nr_queues; i++) {
		const struct vq_stats *q = &dev->queues[i].vq.stats;
		uint64_t popped = counter__get(&q->popped);
		uint64_t done =
			counter__get(&q->used) + counter__get(&q->forgotten);

		s->requests += popped;
		s->completed += counter__get(&q->used);
		/* Read apart from popped: never below zero for a reader. */
		s->in_flight += popped > done ? popped - done : 0;
		s->bytes_out += counter__get(&q->bytes_out);
		s->bytes_in += counter__get(&q->bytes_in);
	}
	s->errors = counter__get(&dev->errors);
	s->queue_full = counter__get(&dev->queue_full);
}

bool virtio_device__notify_queue(struct virtio_device *dev, unsigned int index)
{
	/* 3.1.2: no used buffer notification before DRIVER_OK. */
	if (index >= dev->nr_queues || !status_live(status_get(dev)))
		return false;
	if (!virtqueue__should_notify(&dev->queues[index].vq))
		return false;
	isr_raise(dev, VIRTIO_ISR_QUEUE);
	return true;
}

/*
 * Config generation: bumped before the interrupt, so a driver woken by it
 * re-reads and sees a new generation (4.2.2: ConfigGeneration).
 */
void virtio_device__notify_config(struct virtio_device *dev)
{
	__atomic_fetch_add(&dev->config_generation, 1, __ATOMIC_RELEASE);
	isr_raise(dev, VIRTIO_ISR_CONFIG);
}

/*
 * Something went wrong that only a reset repairs (2.1.1): say so, and
 * interrupt, which 2.1.2 requires once DRIVER_OK is set. Before that,
 * Linux has its handler installed by the time it sets queues up (where
 * this happens), and keeps the change pending until the driver is ready.
 */
static void set_needs_reset(struct virtio_device *dev)
{
	uint8_t status = status_get(dev);

	if (status & VIRTIO_CONFIG_S_NEEDS_RESET)
		return;
	status_set(dev, status | VIRTIO_CONFIG_S_NEEDS_RESET);
	isr_raise(dev, VIRTIO_ISR_CONFIG);
}

void virtio_device__set_needs_reset(struct virtio_device *dev)
{
	/* Not after a reset: there is no driver left to tell. */
	if (status_get(dev))
		set_needs_reset(dev);
}

/* Called with the device lock held; index is the driver's, unchecked. */
void virtio_device__queue_notify_locked(struct virtio_device *dev,
					uint32_t index)
{
	if (index >= dev->nr_queues) {
		virtio_device__warn(dev, "notify for queue %" PRIu32 " of %u",
				    index, dev->nr_queues);
		return;
	}
	/*
	 * A kick before DRIVER_OK is dropped (3.1.2: no buffers consumed
	 * before it); the kick at activation below makes up for it.
	 */
	if (!status_live(status_get(dev)) ||
	    !virtqueue__is_ready(&dev->queues[index].vq))
		return;
	dev->ops->queue_notify(dev, index);
	/*
	 * The driver broke the ring (the queue logged how): until the reset
	 * that repairs it, the device is of no use to it, so say so, once,
	 * for every device without each one having to.
	 */
	if (virtqueue__is_broken(&dev->queues[index].vq))
		set_needs_reset(dev);
}

void virtio_device__queue_notify(struct virtio_device *dev, unsigned int index)
{
	pthread_mutex_lock(&dev->lock);
	virtio_device__queue_notify_locked(dev, index);
	pthread_mutex_unlock(&dev->lock);
}

void virtio_device__kick_eventfd(struct virtio_device *dev, unsigned int index)
{
	worker__wake(dev->queues[index].kick_fd, dev->name, "kick");
}

/* ---- the driver's writes, through a transport ------------------- */

/*
 * Status 0 (2.1, 4.2.2.1): the device forgets everything the driver set.
 * Status goes first so that device threads stop interrupting; the config
 * generation survives, so a driver can never see an old value again.
 */
static void device_reset(struct virtio_device *dev)
{
	unsigned int i;

	status_set(dev, 0);
	if (dev->ops->reset)
		dev->ops->reset(dev);
	for (i = 0; i < dev->nr_queues; i++) {
		struct virtio_queue *q = &dev->queues[i];

		virtqueue__reset(&q->vq);
		q->size = q->max_size;
		q->desc_gpa = 0;
		q->driver_gpa = 0;
		q->device_gpa = 0;
	}
	dev->driver_features = 0;
	dev->features = 0;
	dev->device_features_sel = 0;
	dev->driver_features_sel = 0;
	dev->queue_sel = 0;
	virtio_device__ack_isr(dev, UINT32_MAX);
}

/*
 * FEATURES_OK (3.1.1 step 5): accepted only for a subset of what the
 * device offered that includes VERSION_1 (a legacy driver cannot drive a
 * version 2 device). Refused, FEATURES_OK stays clear and the driver,
 * reading it back, gives up.
 */
static bool features_accept(struct virtio_device *dev)
{
	uint64_t f = dev->driver_features;

	if (f & ~dev->device_features) {
		virtio_device__warn(dev,
				    "features %#" PRIx64 " were not offered",
				    f & ~dev->device_features);
		return false;
	}
	if (!(f & (1ULL << VIRTIO_F_VERSION_1))) {
		virtio_device__warn(dev, "VIRTIO_F_VERSION_1 not accepted");
		return false;
	}
	dev->features = f;
	return true;
}

/* DRIVER_OK has just been set: start the device, catch up on kicks. */
static void device_activate(struct virtio_device *dev)
{
	unsigned int i;
	int ret;

	if (dev->ops->activate) {
		ret = dev->ops->activate(dev);
		if (ret) {
			/* Once too: the driver can retry in a loop. */
			if (!dev->warned)
				pr_warn("%s: cannot start: %s", dev->name,
					strerror(-ret));
			dev->warned = true;
			set_needs_reset(dev);
			return;
		}
	}
	/*
	 * One kick per ready queue: a driver may have made buffers
	 * available (and kicked, dropped above) before DRIVER_OK. A
	 * spurious kick costs a look at an empty ring; a lost one hangs.
	 */
	for (i = 0; i < dev->nr_queues; i++)
		virtio_device__queue_notify_locked(dev, i);
}

/*
 * The driver writes the whole status each time. Bits only come in the
 * order of 3.1.1 (ACKNOWLEDGE, DRIVER, FEATURES_OK, DRIVER_OK), one or
 * several per write, and never go away but by a reset (writing 0). After
 * FAILED the driver has given up: only a reset is listened to.
 */
void virtio_device__write_status(struct virtio_device *dev, uint32_t val)
{
	static const uint8_t order[] = {
		VIRTIO_CONFIG_S_ACKNOWLEDGE,
		VIRTIO_CONFIG_S_DRIVER,
		VIRTIO_CONFIG_S_FEATURES_OK,
		VIRTIO_CONFIG_S_DRIVER_OK,
	};
	uint8_t old = status_get(dev), cur = old, add;
	unsigned int i;

	if (!val) {
		device_reset(dev);
		return;
	}
	if (old & VIRTIO_CONFIG_S_FAILED)
		return;
	if (val &
	    ~(uint32_t)(DRIVER_STATUS_BITS | VIRTIO_CONFIG_S_NEEDS_RESET)) {
		virtio_device__warn(dev, "status %#" PRIx32 " has unknown bits",
				    val);
		return;
	}
	if (old & DRIVER_STATUS_BITS & ~val) {
		virtio_device__warn(dev,
				    "status %#" PRIx32 " clears bits of %#x",
				    val, old);
		return;
	}
	if (val & VIRTIO_CONFIG_S_FAILED) {
		/* NEEDS_RESET, if set, stays: it is the device's bit. */
		status_set(dev, old | VIRTIO_CONFIG_S_FAILED);
		return;
	}

	add = val & ~old & DRIVER_STATUS_BITS;
	for (i = 0; i < ARRAY_SIZE(order); i++) {
		if (!(add & order[i]))
			continue;
		if (i && !(cur & order[i - 1])) {
			virtio_device__warn(dev, "status %#x set before %#x",
					    order[i], order[i - 1]);
			break;
		}
		if (order[i] == VIRTIO_CONFIG_S_FEATURES_OK &&
		    !features_accept(dev))
			break;
		cur |= order[i];
	}
	status_set(dev, cur);
	if ((cur & ~old) & VIRTIO_CONFIG_S_DRIVER_OK)
		device_activate(dev);
}

/* Driver features: a 32-bit half at a time, frozen at FEATURES_OK. */
void virtio_device__write_driver_features(struct virtio_device *dev,
					  uint32_t val)
{
	uint32_t sel = dev->driver_features_sel;

	if (status_get(dev) & VIRTIO_CONFIG_S_FEATURES_OK) {
		virtio_device__warn(dev, "features written after FEATURES_OK");
		return;
	}
	if (sel > 1)
		return;
	dev->driver_features &= ~(0xffffffffULL << (32 * sel));
	dev->driver_features |= (uint64_t)val << (32 * sel);
}

uint32_t virtio_device__device_features(const struct virtio_device *dev)
{
	uint32_t sel = dev->device_features_sel;

	return sel > 1 ? 0 : (uint32_t)(dev->device_features >> (32 * sel));
}

/*
 * QueueReady (4.2.3.2): 1 hands the rings over, checked once and for all
 * by virtqueue__configure(); 0 takes them back. A queue that cannot be
 * set up stays not ready and the device needs a reset: the driver reads
 * Ready back as 0 and sees NEEDS_RESET.
 */
void virtio_device__write_queue_ready(struct virtio_device *dev,
				      struct virtio_queue *q, uint32_t val)
{
	uint8_t status = status_get(dev);
	bool event_idx;

	if (val == 0) {
		virtqueue__reset(&q->vq);
		return;
	}
	if (val != 1) {
		virtio_device__warn(dev, "%s: QueueReady %#" PRIx32, q->name,
				    val);
		return;
	}
	if (virtqueue__is_ready(&q->vq))
		return;
	/* The ring format depends on the features: they must be final. */
	if (!(status & VIRTIO_CONFIG_S_FEATURES_OK) ||
	    (status & VIRTIO_CONFIG_S_FAILED)) {
		virtio_device__warn(dev, "%s: set ready before FEATURES_OK",
				    q->name);
		return;
	}
	if (!is_pow2(q->size) || q->size > q->max_size) {
		virtio_device__warn(dev,
				    "%s: size %" PRIu32
				    " is not a power of 2 in 1..%u",
				    q->name, q->size, q->max_size);
		set_needs_reset(dev);
		return;
	}
	event_idx = virtio_device__has_feature(dev, VIRTIO_RING_F_EVENT_IDX);
	/* On failure the queue logs why itself, once. */
	if (virtqueue__configure(&q->vq, dev->mem, (uint16_t)q->size,
				 q->desc_gpa, q->driver_gpa, q->device_gpa,
				 event_idx))
		set_needs_reset(dev);
}

/*
 * Config space: 8, 16, 32 and 64-bit accesses, naturally aligned (4.2.2.2
 * asks for aligned accesses of a field's width; 64-bit fields may come in
 * one access on x86). Bytes past the device's config space read as 0; a
 * write must fit inside it whole. Returns the bytes the access may touch.
 */
static unsigned int config_room(struct virtio_device *dev, uint64_t offset,
				unsigned int len)
{
	uint64_t room;

	if ((len != 1 && len != 2 && len != 4 && len != 8) ||
	    (offset & (len - 1))) {
		virtio_device__warn(dev, "%u-byte config access at %#" PRIx64,
				    len, offset);
		return 0;
	}
	if (offset >= dev->config_size)
		return 0;
	room = dev->config_size - offset;
	return len <= room ? len : (unsigned int)room;
}

void virtio_device__read_config(struct virtio_device *dev, uint64_t offset,
				void *data, unsigned int len)
{
	unsigned int n = config_room(dev, offset, len);

	if (n && dev->ops->config_read)
		dev->ops->config_read(dev, offset, data, n);
}

void virtio_device__write_config(struct virtio_device *dev, uint64_t offset,
				 const void *data, unsigned int len)
{
	unsigned int n = config_room(dev, offset, len);

	if (n && n == len && dev->ops->config_write)
		dev->ops->config_write(dev, offset, data, n);
}
