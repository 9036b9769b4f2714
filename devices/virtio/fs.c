// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-fs on io_uring (see fs.h).
 *
 * One event loop thread per device owns an io_uring. It reads each
 * queue's kick eventfd through the ring, pops requests into slots and
 * hands each to the FUSE server, which answers most of them right away
 * (the backend's ops are synchronous) and submits READ and WRITE data to
 * the same ring when the backend has a host fd for them.
 *
 * Locking. The device lock covers the rings (pop and push), the slot
 * pools, the generation and the busy count; the FUSE server and the
 * backend run without it, so a slow host file system never holds up a
 * vCPU touching the device's registers. The buffers of a popped chain are
 * the device's until a reset, which must not return while anything may
 * still write into them (2.1.1). So:
 *
 * - A request being decoded or answered on the loop, or with I/O on the
 *   ring, is busy; the reset op waits (releasing the device lock) until
 *   nothing is.
 * - A forwarded request (the virtual backend) is parked: it waits on a
 *   remote server, maybe for long, and the reset does not wait for it.
 *   Its answer reaches the guest only through done(), which copies it
 *   under the device lock and only if the generation is still the one it
 *   was popped in. A late answer just frees its slot.
 *
 * done() may come from any thread (a forwarded answer); off the loop it
 * notifies the driver itself and wakes the loop if its queue was waiting
 * for a slot. Lock order: the device lock, then the interrupt lock.
 *
 * Memory is bounded whatever the driver does: each queue has a fixed pool
 * of request slots (a queue with none free stops popping until one is
 * back), and the completion ring is sized for every operation that can
 * be in flight, so it never overflows.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <linux/virtio_config.h>
#include <linux/virtio_fs.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/fs/fuse.h"
#include "devices/virtio/fs.h"
#include "lib/iovec.h"
#include "lib/resident.h"
#include "lib/evloop.h"

#define FS_QUEUE_SIZE  128U /* entries per queue */
#define FS_QUEUE_SLOTS 64U  /* requests in flight per queue */
#define FS_SQ_ENTRIES  256U
#define FS_HIPRIO      0U /* queue 0: FORGET and INTERRUPT */
#define FS_TAG_MAX     sizeof(((struct virtio_fs_config *)0)->tag)

/* The FUSE server's I/O completions: a struct fuse_req and this tag. */
#define TAG_IO 0x3UL

#define FEAT(bit) (1ULL << (bit))

struct fs_queue;

struct fs_slot {
	struct fuse_req req;
	struct fs_queue *q;
	struct fs_slot *next_free;
	uint32_t gen; /* the device's at pop time */
	bool in_use;
	bool parked; /* forwarded: not busy */
	struct vq_chain chain;
};

struct fs_queue {
	struct virtio_fs *f;
	unsigned int index;
	struct ev_source kick;
	uint64_t kick_buf;
	struct fs_slot *slots; /* FS_QUEUE_SLOTS */
	struct fs_slot *free;  /* freed after use */
	unsigned int fresh;    /* slots[fresh..] never used, never touched */
	bool starved;	       /* stopped popping for want of a slot */
	bool pushed;	       /* used buffers since the last notification */
};

struct virtio_fs {
	struct virtio_device vdev;
	struct virtio_queue vqs[1 + VIRTIO_FS_MAX_QUEUES];
	struct fs_queue queues[1 + VIRTIO_FS_MAX_QUEUES];
	struct virtio_fs_config config;
	struct fs_backend *backend;
	struct fuse_server *server;
	unsigned int nr_vqs; /* hiprio + request queues */
	bool vdev_ok;
	uint32_t gen;	     /* bumped by a reset, under the device lock */
	unsigned int busy;   /* slots in use and not parked */
	pthread_cond_t idle; /* busy fell to 0, with the device lock */
	bool idle_ok;

	struct evloop loop;
	struct ev_source wake;
	int wake_fd; /* a slot came back off the loop */
	uint64_t wake_buf;
	bool joined; /* under the device lock */
};

static struct virtio_fs *to_fs(struct virtio_device *dev)
{
	return (struct virtio_fs *)dev; /* vdev is the first member */
}

static struct fs_slot *to_slot(struct fuse_req *req)
{
	return (struct fs_slot *)req; /* req is the first member */
}

/* ---- slots (device lock held) ------------------------------------------- */

static bool slot_available(const struct fs_queue *q)
{
	return q->free || q->fresh < FS_QUEUE_SLOTS;
}

/*
 * A freed slot first, else the next one never used: the pool's pages
 * become resident only as deep as the guest's queue ever went.
 */
static struct fs_slot *slot_alloc(struct fs_queue *q)
{
	struct fs_slot *slot = q->free;

	if (slot) {
		q->free = slot->next_free;
	} else {
		slot = &q->slots[q->fresh++];
		slot->q = q;
	}
	slot->in_use = true;
	slot->parked = false;
	q->f->busy++;
	return slot;
}

static void unbusy(struct virtio_fs *f)
{
	if (!--f->busy)
		pthread_cond_broadcast(&f->idle);
}

static void slot_free(struct fs_slot *slot)
{
	struct fs_queue *q = slot->q;

	if (!slot->parked)
		unbusy(q->f);
	slot->in_use = false;
	slot->next_free = q->free;
	q->free = slot;
}

static void wake_loop(struct virtio_fs *f)
{
	worker__wake(f->wake_fd, f->vdev.name, "wake");
}

/* ---- what the FUSE server calls ----------------------------------------- */

static void fs_req_park(struct fuse_req *req)
{
	struct fs_slot *slot = to_slot(req);
	struct virtio_fs *f = slot->q->f;

	virtio_device__lock(&f->vdev);
	slot->parked = true;
	unbusy(f);
	virtio_device__unlock(&f->vdev);
}

/* A reply that carries an error (fuse_out_header.error), for the count. */
static bool reply_failed(const void *reply, uint32_t len)
{
	struct fuse_out_header h;

	if (!reply || len < sizeof(h))
		return false;
	memcpy(&h, reply, sizeof(h));
	return h.error != 0;
}

static void fs_req_done(struct fuse_req *req, const void *reply, uint32_t len)
{
	struct fs_slot *slot = to_slot(req);
	struct fs_queue *q = slot->q;
	struct virtio_fs *f = q->f;
	struct virtqueue *vq = &f->vqs[q->index].vq;
	bool off_loop;

	virtio_device__lock(&f->vdev);
	off_loop = f->joined ||
		   !pthread_equal(pthread_self(), f->loop.worker.thread);
	if (reply_failed(reply, len))
		virtio_device__count_error(&f->vdev);
	/* A reset since the pop: the buffers are no longer the device's. */
	if (slot->gen == f->gen) {
		if (reply)
			len = (uint32_t)iov__from_buf(req->in, req->nr_in, 0,
						      reply, len);
		if (virtqueue__push(vq, slot->chain.head, len) == 0)
			q->pushed = true;
	}
	slot_free(slot);
	if (off_loop) {
		if (q->pushed) {
			q->pushed = false;
			virtio_device__notify_queue(&f->vdev, q->index);
		}
		if (q->starved && !f->joined)
			wake_loop(f);
	}
	virtio_device__unlock(&f->vdev);
}

static const struct fuse_req_ops fs_req_ops = {
	.park = fs_req_park,
	.done = fs_req_done,
};

/* ---- the loop ----------------------------------------------------------- */

static void arm_kick(struct fs_queue *q)
{
	evloop__read_eventfd(&q->f->loop, &q->kick, q->f->vqs[q->index].kick_fd,
			     &q->kick_buf);
}

/*
 * Pops what the queue holds (as many as it has free slots) under the
 * device lock, then hands each request to the server without it.
 */
static void process_queue(struct fs_queue *q)
{
	struct virtio_fs *f = q->f;
	struct virtqueue *vq = &f->vqs[q->index].vq;
	struct fs_slot *batch[FS_QUEUE_SLOTS];
	struct vq_drain d;
	unsigned int n = 0;
	int ret = 0;

	virtio_device__lock(&f->vdev);
	if (!virtio_device__is_live(&f->vdev) || !virtqueue__is_ready(vq)) {
		virtio_device__unlock(&f->vdev);
		return;
	}
	virtqueue__drain_start(&d, vq);
	for (;;) {
		struct fs_slot *slot;

		if (!slot_available(q)) {
			/* A completion frees a slot and comes back here. */
			if (!q->starved)
				virtio_device__count_queue_full(&f->vdev);
			q->starved = true;
			break;
		}
		slot = slot_alloc(q);
		ret = virtqueue__pop_or_rearm(&d, &slot->chain);
		if (ret != 1) {
			slot_free(slot);
			break;
		}
		slot->gen = f->gen;
		batch[n++] = slot;
	}
	/* A broken ring: the core logged it; the driver must reset us. */
	if (ret == -EIO)
		virtio_device__set_needs_reset(&f->vdev);
	virtio_device__unlock(&f->vdev);

	for (unsigned int i = 0; i < n; i++) {
		struct fs_slot *slot = batch[i];
		struct vq_chain *c = &slot->chain;
		struct fuse_req *req = &slot->req;

		req->ops = &fs_req_ops;
		req->out = c->iov;
		req->nr_out = c->nr_out;
		req->out_len = c->out_len;
		req->in = c->iov + c->nr_out;
		req->nr_in = c->nr_in;
		req->in_len = c->in_len;
		fuse_server__handle(f->server, req);
	}
}

static void io_done(void *arg, void *ptr, int res)
{
	struct virtio_fs *f = arg;

	fuse_server__io_complete(f->server, ptr, res);
}

static void kick_done(void *arg, int res)
{
	struct fs_queue *q = arg;
	struct virtio_fs *f = q->f;

	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		pr_err("%s: queue %u: kick eventfd: %s", f->vdev.name, q->index,
		       strerror(-res));
		evloop__stop(&f->loop);
		return;
	}
	arm_kick(q);
	process_queue(q);
}

/* The queues that wait for slots are looked at after the round. */
static void wake_done(void *arg, int res)
{
	struct virtio_fs *f = arg;

	evloop__read_eventfd(&f->loop, &f->wake, f->wake_fd, &f->wake_buf);
}

/*
 * After a batch of completions: queues that waited for a slot and have
 * one pop again, and the driver hears of what was pushed. True when some
 * queue still has work and a free slot (do not sleep).
 */
static bool service_queues(void *arg)
{
	struct virtio_fs *f = arg;
	bool more = false;

	for (unsigned int i = 0; i < f->nr_vqs; i++) {
		struct fs_queue *q = &f->queues[i];
		bool run;

		virtio_device__lock(&f->vdev);
		run = q->starved && slot_available(q);
		if (run)
			q->starved = false;
		virtio_device__unlock(&f->vdev);
		if (run)
			process_queue(q);
	}
	virtio_device__lock(&f->vdev);
	for (unsigned int i = 0; i < f->nr_vqs; i++) {
		struct fs_queue *q = &f->queues[i];

		if (q->pushed) {
			q->pushed = false;
			virtio_device__notify_queue(&f->vdev, i);
		}
		if (q->starved && slot_available(q))
			more = true;
	}
	virtio_device__unlock(&f->vdev);
	return more;
}

/* No begin: the device lock is taken around ring work only. */
static const struct evloop_ops fs_loop_ops = {
	.end = service_queues,
};

/* ---- device ops --------------------------------------------------------- */

static void fs_config_read(struct virtio_device *dev, unsigned int offset,
			   void *data, unsigned int len)
{
	memcpy(data, (uint8_t *)&to_fs(dev)->config + offset, len);
}

/*
 * Called with the device lock held and the status already 0. Requests on
 * the loop and I/O on the ring may still write into buffers the driver
 * takes back once it reads the status as 0, so wait for them (the
 * condition variable releases the device lock; they finish into the void:
 * gen). Forwarded requests are not waited for: they write nothing
 * without the lock, and the new generation keeps them out.
 */
static void fs_reset(struct virtio_device *dev)
{
	struct virtio_fs *f = to_fs(dev);

	f->gen++;
	fuse_server__reset(f->server);
	while (f->busy)
		pthread_cond_wait(&f->idle, &dev->lock);
	for (unsigned int i = 0; i < f->nr_vqs; i++)
		f->queues[i].pushed = false;
}

/* Read bare (see virtio_device_ops): a picture, maybe a torn one. */
static int fs_describe(struct virtio_device *dev, bool locked, char *buf,
		       size_t len)
{
	struct virtio_fs *f = to_fs(dev);
	size_t at;

	at = (size_t)snprintf(buf, len, "gen %u busy %u", f->gen, f->busy);
	for (unsigned int i = 0; i < f->nr_vqs && at < len; i++) {
		const struct fs_queue *q = &f->queues[i];
		unsigned int nfree = FS_QUEUE_SLOTS - q->fresh;

		for (const struct fs_slot *s = q->free;
		     s && nfree < FS_QUEUE_SLOTS; s = s->next_free)
			nfree++;
		at += (size_t)snprintf(buf + at, len - at,
				       "; q%u free slots %u%s%s", i, nfree,
				       q->starved ? " starved" : "",
				       q->pushed ? " pushed" : "");
	}
	return (int)at;
}

/*
 * Pause: slots in flight complete first. A forwarded (parked) request
 * waits on the file system server, not on us, and is not waited for;
 * the save op refuses while one is there.
 */
static int fs_quiesce(struct virtio_device *dev,
		      const struct timespec *deadline)
{
	struct virtio_fs *f = to_fs(dev);

	while (f->busy)
		if (pthread_cond_timedwait(&f->idle, &dev->lock, deadline) ==
		    ETIMEDOUT)
			return f->busy ? -ETIMEDOUT : 0;
	return 0;
}

/* The tag as the config space has it: NUL-padded, not terminated. */
static const char *tag_of(const struct virtio_fs *f, size_t *len)
{
	const char *tag = (const char *)f->config.tag;

	*len = strnlen(tag, FS_TAG_MAX);
	return tag;
}

/* Forwarded requests still waiting for their answer (device lock held). */
static unsigned int parked(const struct virtio_fs *f)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < f->nr_vqs; i++)
		for (unsigned int j = 0; j < f->queues[i].fresh; j++)
			n += f->queues[i].slots[j].in_use &&
			     f->queues[i].slots[j].parked;
	return n;
}

/*
 * Snapshot, paused: only the device's shape, never a mount. The FUSE
 * session (the server's nodes and handles, a memory mount's files) is
 * not saved, so a live one refuses: the guest must unmount first
 * (Documentation/snapshots.md, "Capture"), which ends it with DESTROY.
 */
static int fs_save(struct virtio_device *dev, json_t *obj, char *err,
		   size_t len)
{
	struct virtio_fs *f = to_fs(dev);
	unsigned int waiting = parked(f);
	size_t tag_len;
	const char *tag = tag_of(f, &tag_len);
	int ret = 0;

	if (fuse_server__live(f->server)) {
		snprintf(err, len,
			 "its FUSE session is live (the guest has %.*s "
			 "mounted): a snapshot never holds a mount",
			 (int)tag_len, tag);
		return -EBUSY;
	}
	if (f->busy || waiting) {
		snprintf(err, len, "%u FUSE requests in flight",
			 f->busy + waiting);
		return -EBUSY;
	}
	ret |= json_object_set_new(obj, "tag", json_stringn(tag, tag_len));
	ret |= json_object_set_new(obj, "requestQueues",
				   json_integer(f->nr_vqs - 1));
	return ret ? -ENOMEM : 0;
}

/*
 * Restore: the same tag and queue count as the snapshot's. The source
 * is this boot's (the device was made from this config, with a fresh
 * server): the snapshot has no session to take back, so the guest
 * mounts anew and its INIT starts one.
 */
static int fs_restore(struct virtio_device *dev, const json_t *obj, char *err,
		      size_t len)
{
	struct virtio_fs *f = to_fs(dev);
	const json_t *saved = json_object_get(obj, "tag");
	const json_t *q = json_object_get(obj, "requestQueues");
	size_t tag_len;
	const char *tag = tag_of(f, &tag_len);

	if (!json_is_string(saved) || !json_is_integer(q)) {
		snprintf(err, len, "%s: tag or requestQueues missing",
			 dev->name);
		return -EINVAL;
	}
	if (json_string_length(saved) != tag_len ||
	    memcmp(json_string_value(saved), tag, tag_len) ||
	    json_integer_value(q) != (json_int_t)(f->nr_vqs - 1)) {
		snprintf(err, len,
			 "%s: the snapshot's device has tag %.36s on "
			 "%" JSON_INTEGER_FORMAT " request queues; this one "
			 "%.*s on %u",
			 dev->name, json_string_value(saved),
			 json_integer_value(q), (int)tag_len, tag,
			 f->nr_vqs - 1);
		return -EINVAL;
	}
	return 0;
}

bool virtio_fs__usage(const struct virtio_fs *f, uint64_t *used, uint64_t *max)
{
	if (!f->backend->ops->usage)
		return false;
	f->backend->ops->usage(f->backend, used, max);
	return true;
}

static const struct virtio_device_ops fs_ops = {
	.config_read = fs_config_read,
	.describe = fs_describe,
	.queue_notify = virtio_device__kick_eventfd,
	.reset = fs_reset,
	.quiesce = fs_quiesce,
	.save = fs_save,
	.restore = fs_restore,
};

/* Every I/O that can be in flight (one per slot), kicks, wake and stop. */
static unsigned int cq_entries(unsigned int nr_vqs)
{
	unsigned int need = nr_vqs * FS_QUEUE_SLOTS + nr_vqs + 2,
		     n = FS_SQ_ENTRIES;

	while (n < need)
		n <<= 1;
	return n;
}

int virtio_fs__create(struct virtio_fs **out, const struct virtio_fs_params *p)
{
	static const uint8_t opcodes[] = { IORING_OP_READV, IORING_OP_WRITEV };
	struct evloop_params lp = {
		.sq_entries = FS_SQ_ENTRIES,
		.opcodes = opcodes,
		.nr_opcodes = ARRAY_SIZE(opcodes),
	};
	struct fuse_server_params sp;
	struct virtio_device_params vp;
	struct virtio_fs *f;
	size_t tag_len;
	int ret;

	if (!p->backend || !p->backend->ops || !p->mem || !p->tag ||
	    !p->nr_queues || p->nr_queues > VIRTIO_FS_MAX_QUEUES)
		return -EINVAL;
	tag_len = strnlen(p->tag, FS_TAG_MAX + 1);
	if (!tag_len || tag_len > FS_TAG_MAX)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->wake_fd = -1;
	pthread_cond_init(&f->idle, NULL);
	f->idle_ok = true;
	f->nr_vqs = 1 + p->nr_queues;
	memcpy(f->config.tag, p->tag, tag_len);
	f->config.num_request_queues = htole32(p->nr_queues);

	vp = (struct virtio_device_params){
		.name = p->name ? p->name : "virtio-fs",
		.device_id = VIRTIO_ID_FS,
		.features = FEAT(VIRTIO_F_VERSION_1) |
			    FEAT(VIRTIO_RING_F_EVENT_IDX) |
			    FEAT(VIRTIO_RING_F_INDIRECT_DESC),
		.config_size = sizeof(f->config),
		.ops = &fs_ops,
		.queues = f->vqs,
		.nr_queues = f->nr_vqs,
		.queue_max_size = FS_QUEUE_SIZE,
		.mem = p->mem,
		.irq = p->irq,
	};
	ret = virtio_device__init(&f->vdev, &vp);
	if (ret)
		goto out_destroy;
	f->vdev_ok = true;
	evloop__init(&f->loop, f->vdev.name);
	f->wake = (struct ev_source){ .fn = wake_done, .arg = f };

	for (unsigned int i = 0; i < f->nr_vqs; i++) {
		struct fs_queue *q = &f->queues[i];

		q->f = f;
		q->index = i;
		q->kick = (struct ev_source){ .fn = kick_done, .arg = q };
		/* Slots are touched only when used: a lazily backed pool. */
		q->slots = resident__table(FS_QUEUE_SLOTS, sizeof(*q->slots));
		if (!q->slots) {
			ret = -ENOMEM;
			goto out_destroy;
		}
	}
	f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->wake_fd < 0) {
		ret = -errno;
		goto out_destroy;
	}
	lp.cq_entries = cq_entries(f->nr_vqs);
	ret = evloop__open(&f->loop, &lp);
	if (ret)
		goto out_destroy;
	evloop__set_tag_handler(&f->loop, TAG_IO, io_done, f);

	sp = (struct fuse_server_params){
		.name = f->vdev.name,
		.backend = p->backend,
		.attr_timeout_ms = p->attr_timeout_ms,
		.ring = evloop__ring(&f->loop),
		.io_tag = TAG_IO,
	};
	ret = fuse_server__create(&f->server, &sp);
	if (ret)
		goto out_destroy;
	f->backend = p->backend; /* the device's from here on */
	*out = f;
	return 0;

out_destroy:
	virtio_fs__destroy(f);
	return ret;
}

struct virtio_device *virtio_fs__device(struct virtio_fs *f)
{
	return &f->vdev;
}

int virtio_fs__start(struct virtio_fs *f, const struct sock_fprog *filter)
{
	evloop__read_eventfd(&f->loop, &f->wake, f->wake_fd, &f->wake_buf);
	for (unsigned int i = 0; i < f->nr_vqs; i++)
		arm_kick(&f->queues[i]);
	return evloop__start(&f->loop, &fs_loop_ops, f, filter);
}

void virtio_fs__destroy(struct virtio_fs *f)
{
	if (!f)
		return;
	if (f->vdev_ok)
		evloop__exit(&f->loop);
	/*
	 * Forwarded requests may still be answered while the backend goes
	 * (its destroy may fail them): they reach no guest buffer now.
	 */
	if (f->vdev_ok) {
		virtio_device__lock(&f->vdev);
		f->joined = true;
		f->gen++;
		virtio_device__unlock(&f->vdev);
	}
	fs_backend__destroy(f->backend);
	for (unsigned int i = 0; i < f->nr_vqs; i++) {
		struct fs_queue *q = &f->queues[i];

		for (unsigned int j = 0; q->slots && j < q->fresh; j++)
			if (q->slots[j].in_use && q->slots[j].parked)
				fuse_server__abandon(f->server,
						     &q->slots[j].req);
		resident__free_table(q->slots, FS_QUEUE_SLOTS,
				     sizeof(*q->slots));
	}
	fuse_server__destroy(f->server);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	if (f->vdev_ok)
		virtio_device__exit(&f->vdev);
	if (f->idle_ok)
		pthread_cond_destroy(&f->idle);
	free(f);
}
