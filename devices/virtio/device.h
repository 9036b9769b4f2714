/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_DEVICE_H
#define KILN_VIRTIO_DEVICE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "lib/compiler.h"
#include "devices/irq.h"
#include "devices/virtio/guest-mem.h"
#include "devices/virtio/queue.h"
#include "lib/log.h"

/*
 * The device side of virtio 1.x, whatever the transport: device status,
 * feature negotiation, the queues, the config space and the interrupt
 * status. A device is a private struct embedding struct virtio_device and
 * an array of struct virtio_queue, with its callbacks in one static const
 * struct virtio_device_ops; it never sees how the driver reaches it (the
 * transport, devices/virtio/mmio.h today, decodes registers and calls the
 * transport side below).
 *
 *	struct rng {
 *		struct virtio_device vdev;
 *		struct virtio_queue vqs[1];
 *	};
 *	static const struct virtio_device_ops rng_ops = {
 *		.queue_notify = rng__queue_notify,
 *		.reset = rng__reset,
 *	};
 *
 * Locking: the transport serialises every register access of a device
 * with its lock, and calls every op with that lock held. A device thread
 * that touches the queues outside an op (say, an I/O completion pushing a
 * used buffer) takes virtio_device__lock() around it, so a reset never
 * runs under its feet. The interrupt status has a lock of its own, so
 * virtio_device__notify_*() may be called with or without the device lock.
 * Ops must not call back into the transport or virtio_device__queue_notify.
 */

/* Interrupt status bits: the same values on every transport. */
#define VIRTIO_ISR_QUEUE  0x1 /* a used buffer notification */
#define VIRTIO_ISR_CONFIG 0x2 /* the config space (or status) changed */

/*
 * Largest device config space: what fits the MMIO window after its 0x100
 * bytes of registers; far above any device's (virtio-blk: 60 bytes).
 */
#define VIRTIO_CONFIG_MAX_SIZE 0xf00

/*
 * Transport feature bits (28..41) the core implements; a device may offer
 * these and its own device-specific bits, nothing else. Notably not
 * ACCESS_PLATFORM (there is no IOMMU), RING_PACKED (split rings only) or
 * NOTIFICATION_DATA (a notify carries only the queue index).
 */
#define VIRTIO_CORE_FEATURES                              \
	((1ULL << 28 /* VIRTIO_RING_F_INDIRECT_DESC */) | \
	 (1ULL << 29 /* VIRTIO_RING_F_EVENT_IDX */) |     \
	 (1ULL << 32 /* VIRTIO_F_VERSION_1, required */))

struct virtio_device;

/*
 * Everything but queue_notify is optional. Offsets and lengths given to
 * the config ops are already checked: [offset, offset + len) lies inside
 * the device's config_size and len is 1 to 8 (a read running past the end
 * is cut short there; the driver sees zeros beyond). Config space is
 * little-endian (virtio 1.x): data holds the driver's bytes as they are.
 */
struct virtio_device_ops {
	void (*config_read)(struct virtio_device *dev, unsigned int offset,
			    void *data, unsigned int len);
	void (*config_write)(struct virtio_device *dev, unsigned int offset,
			     const void *data, unsigned int len);
	/* The driver made buffers available on a ready queue. */
	void (*queue_notify)(struct virtio_device *dev, unsigned int index);
	/*
	 * The driver reset the device: stop using the queues (they are reset
	 * right after this returns) and forget requests in flight.
	 */
	void (*reset)(struct virtio_device *dev);
	/*
	 * DRIVER_OK after FEATURES_OK: the features are final and the queues
	 * the driver wants are ready. Nonzero (-errno) sets NEEDS_RESET.
	 */
	int (*activate)(struct virtio_device *dev);
	/*
	 * For a stuck-device report: one line on the device's own state
	 * (requests in flight, what its loop waits for), snprintf-style.
	 * Must not block: the report holds the device lock only if it was
	 * free (locked); without it, read nothing that may be freed.
	 */
	int (*describe)(struct virtio_device *dev, bool locked, char *buf,
			size_t len);
	/*
	 * Pause (virtio_device__pause), called with the device lock held
	 * and the device no longer live: wait, releasing the lock (the
	 * device's own condition variable), until no request the device
	 * started is still in flight (host I/O that writes guest memory or
	 * pushes used buffers), at most until deadline (CLOCK_REALTIME).
	 * 0, or -ETIMEDOUT. NULL: the device does all its work inside its
	 * loop's rounds, under the lock, so nothing is ever in flight.
	 */
	int (*quiesce)(struct virtio_device *dev,
		       const struct timespec *deadline);
	/*
	 * Snapshot (virtio_device__save), device lock held, the device
	 * paused: the device's own state beyond the core's (which covers
	 * status, features, queues and config space) as members of obj.
	 * 0 or -errno; a device that refuses to be saved in its present
	 * state (-EBUSY) says why in err, one line without its name. NULL:
	 * the device cannot be saved yet, and a snapshot of a VM that has
	 * it is refused, naming it.
	 */
	int (*save)(struct virtio_device *dev, json_t *obj, char *err,
		    size_t len);
	/*
	 * Restore (virtio_device__restore), device lock held, after the
	 * core's part is loaded and before the device's thread runs: obj
	 * is what save added. Check it against this device (one line in
	 * err, -EINVAL) and set what the device keeps of its own. NULL:
	 * the device cannot be restored, and a restore of a snapshot that
	 * has it is refused.
	 */
	int (*restore)(struct virtio_device *dev, const json_t *obj, char *err,
		       size_t len);
};

/*
 * One queue: the ring itself, the device's limit, and what the driver has
 * written so far (applied when it sets the queue ready).
 */
struct virtio_queue {
	struct virtqueue vq;
	char name[48];	   /* "virtio-blk0 q0", for the log */
	uint16_t max_size; /* power of 2, 1..VIRTQUEUE_MAX_SIZE */
	uint32_t size;	   /* as written: checked at ready time */
	uint64_t desc_gpa;
	uint64_t driver_gpa; /* the available ring */
	uint64_t device_gpa; /* the used ring */
	/*
	 * The device's wakeup for this queue: an eventfd the core opens at
	 * init and closes at exit. The VM binds it to the transport's
	 * notify register (an ioeventfd), so a guest kick reaches the
	 * device's event loop without a VM exit to user space; queue_notify
	 * covers kicks that still come that way.
	 */
	int kick_fd;
};

struct virtio_device_params {
	const char *name;     /* "virtio-blk0"; outlives the device */
	uint32_t device_id;   /* VIRTIO_ID_* from linux/virtio_ids.h */
	uint64_t features;    /* offered; must include VIRTIO_F_VERSION_1 */
	uint32_t config_size; /* bytes, <= VIRTIO_CONFIG_MAX_SIZE */
	const struct virtio_device_ops *ops;
	struct virtio_queue *queues; /* the device's array */
	unsigned int nr_queues;	     /* 1 .. 65535 */
	uint16_t queue_max_size;     /* every queue's, power of 2 */
	const struct guest_mem *mem;
	struct irq_line irq;
};

struct virtio_device {
	/* Fixed by virtio_device__init(). */
	const char *name;
	uint32_t device_id;
	uint64_t device_features;
	uint32_t config_size;
	const struct virtio_device_ops *ops;
	struct virtio_queue *queues;
	unsigned int nr_queues;
	const struct guest_mem *mem;
	struct irq_line irq;

	pthread_mutex_t lock; /* everything below but the interrupt state */
	uint8_t status;	      /* VIRTIO_CONFIG_S_*; atomic loads elsewhere */
	uint64_t driver_features; /* as written by the driver */
	uint64_t features;	  /* negotiated: set at FEATURES_OK */
	/* The driver's selections, for transports that have them. */
	uint32_t device_features_sel;
	uint32_t driver_features_sel;
	uint32_t queue_sel;
	bool warned; /* one message per device, for its whole life */
	/*
	 * virtio_device__pause: not live, whatever the status (atomic
	 * loads: device threads read it under the lock, the report bare).
	 */
	bool paused;

	uint32_t config_generation; /* atomic */

	pthread_mutex_t irq_lock;
	uint32_t isr; /* VIRTIO_ISR_*: the line is high iff nonzero */
	uint64_t irq_raises, irq_lowers; /* line changes, for the report */

	/*
	 * vm.metrics, counted by the device under its lock (lib/counter.h):
	 * requests it failed, and times it stopped taking requests for want
	 * of room of its own (request slots, buffers) until some came back.
	 */
	uint64_t errors;
	uint64_t queue_full;
};

/* A device's counters summed over its queues, for vm.metrics. */
struct virtio_device_stats {
	uint64_t requests;  /* chains taken from the driver */
	uint64_t completed; /* chains given back */
	uint64_t in_flight; /* taken, not yet given back (nor reset) */
	uint64_t bytes_out; /* readable bytes: driver to device */
	uint64_t bytes_in;  /* bytes written: device to driver */
	uint64_t errors;
	uint64_t queue_full;
};

/*
 * Set dev up from p, each queue with its kick_fd: -EINVAL for a device
 * without VIRTIO_F_VERSION_1 or with transport features the core does not
 * implement, no queues, a queue size that is not a power of 2 in
 * 1..32768, a config space over VIRTIO_CONFIG_MAX_SIZE or no queue_notify
 * op; -errno when an eventfd cannot be had. Undone by
 * virtio_device__exit(), which also accepts a device whose init failed.
 */
int __must_check virtio_device__init(struct virtio_device *dev,
				     const struct virtio_device_params *p);
void virtio_device__exit(struct virtio_device *dev);

/* Before the guest runs: a smaller limit for one queue (power of 2). */
int __must_check virtio_device__set_queue_max(struct virtio_device *dev,
					      unsigned int index,
					      uint16_t max_size);

/* The ring of queue index, NULL when out of range. */
struct virtqueue *virtio_device__queue(struct virtio_device *dev,
				       unsigned int index);

/* Was feature bit negotiated (FEATURES_OK accepted with it)? */
bool virtio_device__has_feature(const struct virtio_device *dev,
				unsigned int bit);

/*
 * DRIVER_OK and neither NEEDS_RESET nor FAILED: the device may consume
 * buffers. For event loops woken by an ioeventfd, which bypasses the
 * transport's own check. Call with the device lock held.
 */
bool virtio_device__is_live(const struct virtio_device *dev);

/* Around queue work done outside an op (see Locking above). */
void virtio_device__lock(struct virtio_device *dev);
void virtio_device__unlock(struct virtio_device *dev);

/*
 * Log the device's state, a line for it and one per queue (see
 * virtqueue__describe), at info level: what an operator or a timed-out
 * test looks at to see which side of a ring is waiting. Reads without
 * blocking on any lock, so a device stuck holding one is still shown.
 */
void virtio_device__report(struct virtio_device *dev);

/* Counters of struct virtio_device (lib/counter.h), from the device. */
void virtio_device__count_error(struct virtio_device *dev);
void virtio_device__count_queue_full(struct virtio_device *dev);
/*
 * The counters, read from any thread without the device lock: each is
 * whole, the sums may be a request apart.
 */
void virtio_device__stats(const struct virtio_device *dev,
			  struct virtio_device_stats *s);

/*
 * After pushing used buffers on queue index: interrupt the driver if it
 * wants one (virtqueue__should_notify) and the device is live (DRIVER_OK).
 * True when it did.
 */
bool virtio_device__notify_queue(struct virtio_device *dev, unsigned int index);

/*
 * The device cannot go on until the driver resets it (2.1.1): set
 * NEEDS_RESET and raise a config interrupt; queue notifies stop. Called
 * with the device lock held (from an op, or under virtio_device__lock()).
 * The core does it itself when a queue_notify op leaves its queue broken
 * (a hostile ring) and when a queue cannot be set up.
 */
void virtio_device__set_needs_reset(struct virtio_device *dev);

/* The device changed its config space: new generation, interrupt. */
void virtio_device__notify_config(struct virtio_device *dev);

/*
 * The driver kicked queue index (from a register write or, later, an
 * ioeventfd): calls ops->queue_notify if the device is live and the queue
 * ready, else does nothing. Any index is safe. Takes the device lock.
 */
void virtio_device__queue_notify(struct virtio_device *dev, unsigned int index);

/*
 * A queue_notify op for devices served by their own thread: adds one to
 * the queue's kick_fd, the eventfd that thread waits on (and that KVM
 * writes to directly when it is bound as an ioeventfd).
 */
void virtio_device__kick_eventfd(struct virtio_device *dev, unsigned int index);

/*
 * ---- Pause and snapshot (devices/virtio/device-state.c) ----
 *
 * Pause: the device stops taking buffers (virtio_device__is_live says
 * no, so its loop pops nothing, guest kick or host data alike), then
 * waits for what it has in flight (ops->quiesce). Used buffers that
 * those requests push still interrupt the driver: the interrupt lands
 * in the irqchip, which a snapshot saves with the rest. Resume makes it
 * live again and kicks every queue, so kicks that came while it was
 * paused (consumed and dropped by a device that was not live) are
 * looked at. 0, -EALREADY (paused twice, or resumed when running), or
 * quiesce's -ETIMEDOUT (the device is then live again).
 */
int __must_check virtio_device__pause(struct virtio_device *dev,
				      unsigned int timeout_ms);
int virtio_device__resume(struct virtio_device *dev);
bool virtio_device__is_paused(const struct virtio_device *dev);

#define VIRTIO_SAVE_WHY_LEN 256 /* a save op's refusal: one line */

/*
 * Of a paused device: its state as a JSON object (Documentation/
 * snapshots.md, "Device state"): device id, status, features both ways,
 * the selectors, config generation, interrupt status, the config space
 * (base64, as ops->config_read gives it) and each queue's size, ring
 * addresses, readiness and indices, plus "device": what ops->save adds.
 * -EOPNOTSUPP: no save op (the device cannot be saved yet); -EINVAL:
 * not paused; -ENOMEM; or the save op's -errno, with its reason in err
 * ("" when it gave none).
 */
int __must_check virtio_device__save(struct virtio_device *dev, json_t **out,
				     char *err, size_t len);

/*
 * Into a device just initialised with the same params (nothing the
 * driver wrote yet): the core's part of what virtio_device__save gave,
 * every field checked (device id, features a subset of the offered,
 * queue count and sizes, ring addresses inside guest memory, through
 * virtqueue__configure); the device's own part ("device") is for its
 * restore. 0, or -EINVAL with one line naming the field in err.
 */
int __must_check virtio_device__load(struct virtio_device *dev,
				     const json_t *state, char *err,
				     size_t len);

/*
 * A restore (Documentation/snapshots.md, "Restore"): virtio_device__load,
 * then ops->restore with "device", then every ready queue kicked (the
 * device's loop looks at the rings once it runs, as after a resume).
 * Call virtio_device__restore_irq once the irqchip is restored.
 * -EOPNOTSUPP: no restore op; -EINVAL with one line in err.
 */
int __must_check virtio_device__restore(struct virtio_device *dev,
					const json_t *state, char *err,
					size_t len);
/*
 * A restored device whose interrupt status is set raises its line once
 * more: the edge of its last raise may still have been in KVM's irqfd
 * work when the irqchip was saved. A second edge is harmless: the
 * driver reads the status.
 */
void virtio_device__restore_irq(struct virtio_device *dev);

/*
 * ---- The transport's side ----
 *
 * What a transport calls as it decodes the driver's accesses, each with
 * the device lock held. Values are the driver's, unchecked: the core
 * checks them, ignores what breaks a rule and logs the first such error
 * of the device.
 */

/* The driver broke a rule: logged once for the device's whole life. */
__attribute__((format(printf, 2, 3))) void
virtio_device__warn(struct virtio_device *dev, const char *fmt, ...);

/* Device status (VIRTIO_CONFIG_S_*), and the driver's write of it. */
uint8_t virtio_device__status(const struct virtio_device *dev);
void virtio_device__write_status(struct virtio_device *dev, uint32_t val);

/* The 32-bit halves selected by device/driver_features_sel (0 or 1). */
uint32_t virtio_device__device_features(const struct virtio_device *dev);
void virtio_device__write_driver_features(struct virtio_device *dev,
					  uint32_t val);

/*
 * Queue q ready (1) with the size and ring addresses written so far, or
 * taken back (0).
 */
void virtio_device__write_queue_ready(struct virtio_device *dev,
				      struct virtio_queue *q, uint32_t val);

/* A kick through a register: virtio_device__queue_notify, lock held. */
void virtio_device__queue_notify_locked(struct virtio_device *dev,
					uint32_t index);

/* Interrupt status (VIRTIO_ISR_*), and the driver's acknowledgement. */
uint32_t virtio_device__isr(struct virtio_device *dev);
void virtio_device__ack_isr(struct virtio_device *dev, uint32_t bits);

/*
 * Config space at offset: 1, 2, 4 or 8 bytes, naturally aligned, else
 * ignored (a read leaves data alone). Bytes past the device's config
 * space read as nothing; a write must fit inside it whole.
 */
void virtio_device__read_config(struct virtio_device *dev, uint64_t offset,
				void *data, unsigned int len);
void virtio_device__write_config(struct virtio_device *dev, uint64_t offset,
				 const void *data, unsigned int len);

#endif
