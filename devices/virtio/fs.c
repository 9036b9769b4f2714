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
#include <linux/virtio_config.h>
#include <linux/virtio_fs.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/fs/fuse.h"
#include "devices/virtio/fs.h"
#include "lib/worker.h"

#define FS_QUEUE_SIZE  128U /* entries per queue */
#define FS_QUEUE_SLOTS 64U  /* requests in flight per queue */
#define FS_SQ_ENTRIES  256U
#define FS_HIPRIO      0U /* queue 0: FORGET and INTERRUPT */
#define FS_TAG_MAX     sizeof(((struct virtio_fs_config *)0)->tag)

/* What rides in a CQE's user_data besides an 8-byte aligned pointer. */
#define TAG_MASK 0x7UL
#define TAG_KICK 0x1UL /* a struct fs_queue */
#define TAG_STOP 0x2UL
#define TAG_IO	 0x3UL /* a struct fuse_req: the FUSE server's I/O */
#define TAG_WAKE 0x4UL

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
	uint64_t kick_buf;
	struct fs_slot *slots; /* FS_QUEUE_SLOTS */
	struct fs_slot *free;
	bool starved; /* stopped popping for want of a slot */
	bool pushed;  /* used buffers since the last notification */
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

	struct io_uring ring;
	bool ring_ok;
	struct worker worker;
	int wake_fd; /* a slot came back off the loop */
	uint64_t wake_buf;
	bool stopping;
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

static struct fs_slot *slot_alloc(struct fs_queue *q)
{
	struct fs_slot *slot = q->free;

	q->free = slot->next_free;
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

static size_t copy_reply(const struct fuse_req *req, const void *reply,
			 uint32_t len)
{
	size_t done = 0;

	for (unsigned int i = 0; i < req->nr_in && done < len; i++) {
		size_t take = req->in[i].iov_len;

		if (take > len - done)
			take = len - done;
		memcpy(req->in[i].iov_base, (const uint8_t *)reply + done,
		       take);
		done += take;
	}
	return done;
}

static void fs_req_done(struct fuse_req *req, const void *reply, uint32_t len)
{
	struct fs_slot *slot = to_slot(req);
	struct fs_queue *q = slot->q;
	struct virtio_fs *f = q->f;
	struct virtqueue *vq = &f->vqs[q->index].vq;
	bool off_loop;

	virtio_device__lock(&f->vdev);
	off_loop =
		f->joined || !pthread_equal(pthread_self(), f->worker.thread);
	/* A reset since the pop: the buffers are no longer the device's. */
	if (slot->gen == f->gen) {
		if (reply)
			len = (uint32_t)copy_reply(req, reply, len);
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

static struct io_uring_sqe *get_sqe(struct virtio_fs *f)
{
	struct io_uring_sqe *sqe;

	/* The completion ring holds everything in flight: see create. */
	while (!(sqe = io_uring_get_sqe(&f->ring)))
		io_uring_submit(&f->ring);
	return sqe;
}

static void arm_read(struct virtio_fs *f, int fd, uint64_t *buf, uint64_t data)
{
	struct io_uring_sqe *sqe = get_sqe(f);

	io_uring_prep_read(sqe, fd, buf, sizeof(*buf), 0);
	io_uring_sqe_set_data64(sqe, data);
}

static void arm_kick(struct fs_queue *q)
{
	arm_read(q->f, q->f->vqs[q->index].kick_fd, &q->kick_buf,
		 (uintptr_t)q | TAG_KICK);
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
	unsigned int n = 0;
	bool asked = false;
	int ret = 0;

	virtio_device__lock(&f->vdev);
	if (!virtio_device__is_live(&f->vdev) || !virtqueue__is_ready(vq)) {
		virtio_device__unlock(&f->vdev);
		return;
	}
	virtqueue__set_notify_suppression(vq, true);
	for (;;) {
		struct fs_slot *slot;

		if (!q->free) {
			/* A completion frees a slot and comes back here. */
			q->starved = true;
			break;
		}
		slot = slot_alloc(q);
		ret = virtqueue__pop(vq, &slot->chain);
		if (ret == 1) {
			slot->gen = f->gen;
			batch[n++] = slot;
			/* As in blk.c: ask again once the ring is empty. */
			asked = false;
			continue;
		}
		slot_free(slot);
		if (ret < 0 || asked)
			break;
		/* Empty: ask for kicks again, then look once more. */
		virtqueue__set_notify_suppression(vq, false);
		asked = true;
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

static void handle_cqe(struct virtio_fs *f, const struct io_uring_cqe *cqe)
{
	uint64_t data = io_uring_cqe_get_data64(cqe);
	void *ptr = (void *)(uintptr_t)(data & ~TAG_MASK);
	struct fs_queue *q;

	switch (data & TAG_MASK) {
	case TAG_IO:
		fuse_server__io_complete(f->server, ptr, cqe->res);
		break;
	case TAG_KICK:
		q = ptr;
		if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -EAGAIN) {
			pr_err("%s: queue %u: kick eventfd: %s", f->vdev.name,
			       q->index, strerror(-cqe->res));
			f->stopping = true;
			break;
		}
		arm_kick(q);
		process_queue(q);
		break;
	case TAG_WAKE:
		/* The queues that wait for slots are looked at below. */
		arm_read(f, f->wake_fd, &f->wake_buf, TAG_WAKE);
		break;
	case TAG_STOP:
		f->stopping = true;
		break;
	}
}

/*
 * After a batch of completions: queues that waited for a slot and have
 * one pop again, and the driver hears of what was pushed. True when some
 * queue still has work and a free slot (do not sleep).
 */
static bool service_queues(struct virtio_fs *f)
{
	bool more = false;

	for (unsigned int i = 0; i < f->nr_vqs; i++) {
		struct fs_queue *q = &f->queues[i];
		bool run;

		virtio_device__lock(&f->vdev);
		run = q->starved && q->free;
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
		if (q->starved && q->free)
			more = true;
	}
	virtio_device__unlock(&f->vdev);
	return more;
}

static void *fs_thread(void *arg)
{
	struct virtio_fs *f = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	bool more = false;
	int ret;

	worker__block_signals();
	arm_read(f, f->worker.stop_fd, &f->worker.stop_buf, TAG_STOP);
	arm_read(f, f->wake_fd, &f->wake_buf, TAG_WAKE);
	for (unsigned int i = 0; i < f->nr_vqs; i++)
		arm_kick(&f->queues[i]);

	while (!f->stopping) {
		if (more)
			ret = io_uring_submit(&f->ring);
		else
			ret = io_uring_submit_and_wait(&f->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -EBUSY) {
			pr_err("%s: io_uring: %s", f->vdev.name,
			       strerror(-ret));
			break;
		}
		seen = 0;
		io_uring_for_each_cqe(&f->ring, head, cqe)
		{
			handle_cqe(f, cqe);
			seen++;
		}
		io_uring_cq_advance(&f->ring, seen);
		more = service_queues(f);
	}
	return NULL;
}

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

static const struct virtio_device_ops fs_ops = {
	.config_read = fs_config_read,
	.queue_notify = virtio_device__kick_eventfd,
	.reset = fs_reset,
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
	struct io_uring_params up = { .flags = IORING_SETUP_CQSIZE };
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
	worker__init(&f->worker);
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

	for (unsigned int i = 0; i < f->nr_vqs; i++) {
		struct fs_queue *q = &f->queues[i];

		q->f = f;
		q->index = i;
		/* Slots are touched only when used: a lazily backed pool. */
		q->slots = calloc(FS_QUEUE_SLOTS, sizeof(*q->slots));
		if (!q->slots) {
			ret = -ENOMEM;
			goto out_destroy;
		}
		for (unsigned int j = FS_QUEUE_SLOTS; j--;) {
			q->slots[j].q = q;
			q->slots[j].next_free = q->free;
			q->free = &q->slots[j];
		}
	}
	ret = worker__open(&f->worker);
	if (ret)
		goto out_destroy;
	f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->wake_fd < 0) {
		ret = -errno;
		goto out_destroy;
	}
	up.cq_entries = cq_entries(f->nr_vqs);
	ret = io_uring_queue_init_params(FS_SQ_ENTRIES, &f->ring, &up);
	if (ret)
		goto out_destroy;
	f->ring_ok = true;

	sp = (struct fuse_server_params){
		.name = f->vdev.name,
		.backend = p->backend,
		.attr_timeout_ms = p->attr_timeout_ms,
		.ring = &f->ring,
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

int virtio_fs__start(struct virtio_fs *f)
{
	return worker__start(&f->worker, fs_thread, f);
}

void virtio_fs__destroy(struct virtio_fs *f)
{
	if (!f)
		return;
	worker__exit(&f->worker, f->vdev.name);
	/* Waits for I/O in flight: it may still write into guest memory. */
	if (f->ring_ok)
		io_uring_queue_exit(&f->ring);
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

		for (unsigned int j = 0; q->slots && j < FS_QUEUE_SLOTS; j++)
			if (q->slots[j].in_use && q->slots[j].parked)
				fuse_server__abandon(f->server,
						     &q->slots[j].req);
		free(q->slots);
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
