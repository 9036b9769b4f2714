// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-blk on io_uring (see blk.h).
 *
 * One event loop thread per device owns an io_uring. It reads each
 * queue's kick eventfd through the ring, pops requests, asks the disk
 * where their data lives and submits the I/O; completions push used
 * buffers. Everything guest-visible happens under the device lock, so a
 * reset from a vCPU thread never runs in the middle of it.
 *
 * Memory is bounded whatever the driver does: each queue has a fixed pool
 * of request slots (a queue with none free stops popping until one is
 * back), a read is done in windows of at most BLK_WINDOW_OPS extents, and
 * the completion ring is sized for every operation that can be in flight,
 * so it never overflows.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <linux/falloc.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "devices/virtio/blk.h"
#include "lib/iovec.h"
#include "lib/resident.h"
#include "lib/warn.h"
#include "lib/evloop.h"

#define BLK_QUEUE_SIZE	     128U	/* entries per queue, request slots */
#define BLK_SEG_MAX	     126U	/* data segments; + header + status */
#define BLK_SIZE_MAX	     (1U << 20) /* bytes in one segment */
#define BLK_WINDOW_OPS	     8U		/* reads: extents in flight */
#define BLK_WINDOW_BYTES     (1ULL << 20)
#define BLK_ZERO_MAX_SECTORS (1U << 21) /* 1 GiB per discard/zeroes */
#define BLK_SQ_ENTRIES	     256U
#define SECTOR_SHIFT	     9 /* virtio-blk sectors are 512 bytes */
#define SECTORS_PER_BLOCK    (DISK_BLOCK_SIZE >> SECTOR_SHIFT)

/* An I/O completion's user_data: a struct blk_op pointer and this. */
#define TAG_OP 0x1UL

#define FEAT(bit) (1ULL << (bit))

enum op_kind { OP_READ, OP_WRITE, OP_FLUSH, OP_ZERO };

struct blk_req;

struct blk_op {
	struct blk_req *req;
	enum op_kind kind;
	int fd;
	uint64_t offset;
	uint64_t len;	   /* bytes still to transfer, or to punch */
	struct iovec *iov; /* OP_READ/OP_WRITE: within the request */
	unsigned int iovcnt;
};

struct blk_req {
	struct blk_queue *q;
	struct blk_req *next_free;
	struct blk_req *next_wait; /* waiting for the block store's worker */
	uint16_t head;
	uint32_t gen; /* the device's at pop time */
	uint32_t type;
	uint64_t offset; /* bytes */
	uint64_t len;	 /* data bytes */
	uint8_t *status; /* the last writable byte, in guest memory */
	uint32_t used_len;
	bool failed;
	unsigned int pending; /* ops in flight */
	uint64_t done;	      /* reads: bytes of finished windows */
	uint64_t window;      /* reads: bytes of the window in flight */
	uint64_t reserved;    /* writes: the disk's reservation */
	unsigned int nr_data;
	struct iovec data[BLK_SEG_MAX];
	struct blk_op ops[BLK_WINDOW_OPS];
	struct iovec slice[BLK_SEG_MAX + BLK_WINDOW_OPS];
};

struct blk_queue {
	struct virtio_blk *b;
	unsigned int index;
	struct ev_source kick;
	uint64_t kick_buf;
	struct blk_req *reqs; /* BLK_QUEUE_SIZE slots */
	struct blk_req *free; /* freed after use */
	unsigned int fresh;   /* reqs[fresh..] never used, never touched */
	bool starved;	      /* stopped popping for want of a slot */
	bool pushed;	      /* used buffers since the last notification */
};

struct virtio_blk {
	struct virtio_device vdev;
	struct virtio_queue vqs[VIRTIO_BLK_MAX_QUEUES];
	struct blk_queue queues[VIRTIO_BLK_MAX_QUEUES];
	struct virtio_blk_config config;
	struct disk *disk;
	char serial[VIRTIO_BLK_ID_BYTES];
	unsigned int nr_queues;
	bool vdev_ok;
	uint32_t gen;	     /* bumped by a reset, under the device lock */
	unsigned int busy;   /* request slots taken, all queues */
	pthread_cond_t idle; /* busy fell to 0, with the device lock */
	bool idle_ok;

	/*
	 * A cow root's store layer ("cow roots" below): the request its job is
	 * for, the requests waiting for the job slot, its done eventfd.
	 */
	struct store_cow *cow;
	struct blk_req *cow_req;
	struct blk_req *wait_head, *wait_tail;
	struct ev_source cow_done;
	uint64_t cow_buf;

	struct evloop loop;
	bool warned;	       /* one message for the device's life */
	struct vq_chain chain; /* pop scratch, event loop only */
};

static struct virtio_blk *to_blk(struct virtio_device *dev)
{
	return (struct virtio_blk *)dev; /* vdev is the first member */
}

/* One message for the device's life: a driver that loops cannot flood. */
#define blk_warn(b, ...)                                           \
	warn__once(&(b)->warned, (b)->vdev.name,                   \
		   "; request failed (further errors not logged)", \
		   __VA_ARGS__)

/* ---- submission -------------------------------------------------------- */

static void op_submit(struct virtio_blk *b, struct blk_op *op)
{
	/* The completion ring holds every op in flight: see cq_entries. */
	struct io_uring_sqe *sqe = evloop__get_sqe(&b->loop);

	switch (op->kind) {
	case OP_READ:
		io_uring_prep_readv(sqe, op->fd, op->iov, op->iovcnt,
				    op->offset);
		break;
	case OP_WRITE:
		io_uring_prep_writev(sqe, op->fd, op->iov, op->iovcnt,
				     op->offset);
		break;
	case OP_FLUSH:
		io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
		break;
	case OP_ZERO:
		io_uring_prep_fallocate(
			sqe, op->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			op->offset, op->len);
		break;
	}
	io_uring_sqe_set_data64(sqe, (uintptr_t)op | TAG_OP);
}

static void arm_kick(struct blk_queue *q)
{
	evloop__read_eventfd(&q->b->loop, &q->kick, q->b->vqs[q->index].kick_fd,
			     &q->kick_buf);
}

static struct blk_op *new_op(struct blk_req *req, enum op_kind kind, int fd,
			     uint64_t offset, uint64_t len)
{
	struct blk_op *op = &req->ops[req->pending++];

	*op = (struct blk_op){
		.req = req, .kind = kind, .fd = fd, .offset = offset, .len = len
	};
	return op;
}

/* ---- requests ---------------------------------------------------------- */

/* Called with the device lock held, like everything below. */
static bool req_available(const struct blk_queue *q)
{
	return q->free || q->fresh < BLK_QUEUE_SIZE;
}

/*
 * A freed slot first, else the next one never used: the pool's pages
 * (~4.6 KiB a slot) become resident only as deep as the guest's queue
 * ever went, not all 128 slots at start.
 */
static struct blk_req *req_alloc(struct blk_queue *q)
{
	struct blk_req *req = q->free;

	if (req)
		q->free = req->next_free;
	else
		req = &q->reqs[q->fresh++];
	q->b->busy++;
	return req;
}

static void req_free(struct blk_req *req)
{
	struct blk_queue *q = req->q;

	req->next_free = q->free;
	q->free = req;
	if (!--q->b->busy)
		pthread_cond_broadcast(&q->b->idle);
}

static void req_complete(struct blk_req *req, uint8_t status)
{
	struct blk_queue *q = req->q;
	struct virtio_blk *b = q->b;

	if (status != VIRTIO_BLK_S_OK)
		virtio_device__count_error(&b->vdev);
	/* A reset since the pop: the buffers are no longer the device's. */
	if (req->gen == b->gen) {
		*req->status = status;
		if (virtqueue__push(&b->vqs[q->index].vq, req->head,
				    req->used_len) == 0)
			q->pushed = true;
	}
	req_free(req);
}

static void read_window(struct blk_req *req);

/* Every op of the request's current stage has completed. */
static void req_stage_done(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;

	switch (req->type) {
	case VIRTIO_BLK_T_IN:
		/* After a reset, no further windows into the old buffers. */
		if (req->failed || req->gen != b->gen)
			break;
		req->done += req->window;
		if (req->done < req->len) {
			read_window(req);
			return;
		}
		req->used_len = req->len + 1;
		break;
	case VIRTIO_BLK_T_OUT:
		disk__end_write(b->disk, req->offset, req->len, req->reserved,
				!req->failed);
		if (b->cow && !req->failed)
			store_cow__end_write(b->cow, req->offset, req->len,
					     false);
		break;
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		disk__end_zero(b->disk, req->offset, req->len, !req->failed);
		if (b->cow && !req->failed)
			store_cow__end_write(b->cow, req->offset, req->len,
					     true);
		break;
	}
	req_complete(req, req->failed ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK);
}

/*
 * The next piece of a read: as much of the rest as the disk describes in
 * BLK_WINDOW_OPS extents (at least one block). Zero extents are filled
 * here; the others go to the ring. Loops instead of recursing when a
 * window needs no I/O at all.
 */
static void read_window(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;
	struct disk_extent ext[BLK_WINDOW_OPS];
	unsigned int used;
	uint64_t pos;
	int n;

	while (req->done < req->len) {
		uint64_t win = req->len - req->done;

		if (win > BLK_WINDOW_BYTES)
			win = BLK_WINDOW_BYTES;
		for (;;) {
			n = disk__map_read(b->disk, req->offset + req->done,
					   win, ext, BLK_WINDOW_OPS);
			if (n != -E2BIG || win <= DISK_BLOCK_SIZE)
				break;
			win = (win / 2) & ~(uint64_t)(DISK_BLOCK_SIZE - 1);
			if (!win)
				win = DISK_BLOCK_SIZE;
		}
		if (n <= 0) {
			blk_warn(b,
				 "read of %" PRIu64 " bytes at %" PRIu64 ": %s",
				 req->len, req->offset,
				 strerror(n ? -n : EINVAL));
			req_complete(req, VIRTIO_BLK_S_IOERR);
			return;
		}
		req->window = win;
		pos = req->done;
		used = 0;
		for (int i = 0; i < n; i++) {
			struct iovec *iov = req->slice + used;
			int cnt = iov__sub(req->data, req->nr_data, pos,
					   ext[i].len, iov,
					   ARRAY_SIZE(req->slice) - used);

			if (cnt < 0) { /* cannot happen: slice has room */
				req->failed = true;
				break;
			}
			if (ext[i].fd < 0) {
				/* buf: valid until the next map_read */
				const uint8_t *src = ext[i].buf;

				for (int j = 0; j < cnt; j++) {
					if (src)
						memcpy(iov[j].iov_base, src,
						       iov[j].iov_len);
					else
						memset(iov[j].iov_base, 0,
						       iov[j].iov_len);
					src = src ? src + iov[j].iov_len : NULL;
				}
			} else {
				struct blk_op *op =
					new_op(req, OP_READ, ext[i].fd,
					       ext[i].offset, ext[i].len);

				op->iov = iov;
				op->iovcnt = cnt;
				op_submit(b, op);
			}
			used += cnt;
			pos += ext[i].len;
		}
		if (req->pending)
			return;
		if (req->failed) {
			req_complete(req, VIRTIO_BLK_S_IOERR);
			return;
		}
		req->done += win;
	}
	req->used_len = req->len + 1;
	req_complete(req, VIRTIO_BLK_S_OK);
}

/* The sector of a request as a byte offset; false when it overflows. */
static bool sector_offset(uint64_t sector, uint64_t *offset)
{
	if (sector > UINT64_MAX >> SECTOR_SHIFT)
		return false;
	*offset = sector << SECTOR_SHIFT;
	return true;
}

static bool cow_write_waits(struct blk_req *req);

static void start_write(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;
	struct disk_extent ext;
	struct blk_op *op;
	int ret;

	if (cow_write_waits(req))
		return;
	ret = b->cow ? store_cow__begin_write(b->cow, req->offset, req->len) :
		       0;
	if (!ret)
		ret = disk__begin_write(b->disk, req->offset, req->len, &ext,
					&req->reserved);
	if (ret) {
		if (ret == -ENOSPC)
			blk_warn(b,
				 "write of %" PRIu64 " bytes refused: "
				 "the writable layer is at its size limit",
				 req->len);
		else
			blk_warn(b,
				 "write of %" PRIu64 " bytes at %" PRIu64
				 ": %s",
				 req->len, req->offset, strerror(-ret));
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	op = new_op(req, OP_WRITE, ext.fd, ext.offset, req->len);
	op->iov = req->data;
	op->iovcnt = req->nr_data;
	op_submit(b, op);
}

static void start_zero_range(struct blk_req *req);

/* ---- cow roots ---------------------------------------------------------- */

/*
 * A cow root's requests that need the block store (store-cow.h): a read
 * of blocks still only in the store waits for their fetch, a flush for
 * the store's acknowledgement, a write or discard of blocks being
 * fetched for the fetch's end. One job runs at a time on the store's
 * worker thread; the others wait here, in order, each in its request
 * slot (so the queue is as bounded as the slots). A store that fails a
 * job (an error, its deadline, a cut connection) fails that request
 * with VIRTIO_BLK_S_IOERR; the layer logs it once and counts it.
 */
static void wait_for_store(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;

	req->next_wait = NULL;
	if (b->wait_tail)
		b->wait_tail->next_wait = req;
	else
		b->wait_head = req;
	b->wait_tail = req;
}

static void cow_read(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;

	if (!store_cow__missing(b->cow, req->offset, req->len)) {
		read_window(req);
		return;
	}
	if (store_cow__busy(b->cow)) {
		wait_for_store(req);
		return;
	}
	/* The first blocks missing; the rest on the next round. */
	if (store_cow__fetch(b->cow, req->offset, req->len)) {
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	b->cow_req = req;
}

static void cow_flush(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;

	if (store_cow__busy(b->cow)) {
		wait_for_store(req);
		return;
	}
	if (store_cow__flush(b->cow)) {
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	b->cow_req = req;
}

/* A write or discard may not land in blocks a fetch is filling. */
static bool cow_write_waits(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;

	if (!b->cow || !store_cow__fetching(b->cow, req->offset, req->len))
		return false;
	wait_for_store(req);
	return true;
}

/* A waiting request, again from where it stopped. */
static void cow_retry(struct blk_req *req)
{
	/* After a reset: no I/O into buffers that are the driver's again. */
	if (req->gen != req->q->b->gen) {
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	switch (req->type) {
	case VIRTIO_BLK_T_IN:
		cow_read(req);
		break;
	case VIRTIO_BLK_T_OUT:
		start_write(req);
		break;
	case VIRTIO_BLK_T_FLUSH:
		cow_flush(req);
		break;
	default: /* discard, write-zeroes */
		start_zero_range(req);
		break;
	}
}

static void arm_cow(struct virtio_blk *b)
{
	evloop__read_eventfd(&b->loop, &b->cow_done, store_cow__done_fd(b->cow),
			     &b->cow_buf);
}

/* The worker ran its job: finish it, then let the waiting requests on. */
static void cow_done(void *arg, int res)
{
	struct virtio_blk *b = arg;
	struct blk_req *req = b->cow_req, *wait;
	int ret;

	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		pr_err("%s: block store eventfd: %s", b->vdev.name,
		       strerror(-res));
		evloop__stop(&b->loop);
		return;
	}
	arm_cow(b);
	ret = store_cow__finish(b->cow);
	if (ret == -EAGAIN || store_cow__busy(b->cow))
		return; /* not done yet: a stale wake-up */
	b->cow_req = NULL;
	if (req) {
		if (ret)
			req_complete(req, VIRTIO_BLK_S_IOERR);
		else if (req->type == VIRTIO_BLK_T_FLUSH)
			req_complete(req, VIRTIO_BLK_S_OK);
		else
			cow_retry(req); /* more blocks to fetch, or its data */
	}
	/* Each either goes on, waits again, or takes the free job slot. */
	for (wait = b->wait_head, b->wait_head = b->wait_tail = NULL; wait;) {
		struct blk_req *next = wait->next_wait;

		cow_retry(wait);
		wait = next;
	}
}

/* Discard and write-zeroes: one segment (max_*_seg is 1). */
static void start_zero(struct blk_req *req, const struct vq_chain *c)
{
	struct virtio_blk *b = req->q->b;
	struct virtio_blk_discard_write_zeroes seg;
	uint32_t flags, allowed;

	if (c->out_len - sizeof(struct virtio_blk_outhdr) != sizeof(seg) ||
	    iov__to_buf(c->iov, c->nr_out, sizeof(struct virtio_blk_outhdr),
			&seg, sizeof(seg)) != sizeof(seg)) {
		blk_warn(b,
			 "discard/write-zeroes with %" PRIu64
			 " bytes of segments",
			 c->out_len - sizeof(struct virtio_blk_outhdr));
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	flags = le32toh(seg.flags);
	allowed = req->type == VIRTIO_BLK_T_WRITE_ZEROES ?
			  VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP :
			  0;
	if (flags & ~allowed) {
		req_complete(req, VIRTIO_BLK_S_UNSUPP);
		return;
	}
	if (le32toh(seg.num_sectors) > BLK_ZERO_MAX_SECTORS ||
	    !sector_offset(le64toh(seg.sector), &req->offset)) {
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	req->len = (uint64_t)le32toh(seg.num_sectors) << SECTOR_SHIFT;
	if (!req->len) {
		req_complete(req, VIRTIO_BLK_S_OK);
		return;
	}
	start_zero_range(req);
}

/* The range of a parsed discard or write-zeroes. */
static void start_zero_range(struct blk_req *req)
{
	struct virtio_blk *b = req->q->b;
	struct disk_extent ext;
	int ret;

	if (cow_write_waits(req))
		return;
	ret = disk__begin_zero(b->disk, req->offset, req->len, &ext);
	if (ret) {
		blk_warn(b, "zeroing %" PRIu64 " bytes at %" PRIu64 ": %s",
			 req->len, req->offset, strerror(-ret));
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	op_submit(b, new_op(req, OP_ZERO, ext.fd, ext.offset, ext.len));
}

static void start_get_id(struct blk_req *req, const struct vq_chain *c)
{
	struct virtio_blk *b = req->q->b;
	const struct iovec *in = c->iov + c->nr_out;
	uint64_t room = c->in_len - 1;
	size_t n = room < sizeof(b->serial) ? room : sizeof(b->serial);

	req->used_len = iov__from_buf(in, c->nr_in, 0, b->serial, n) + 1;
	req_complete(req, VIRTIO_BLK_S_OK);
}

/* A popped chain: parse it and start its request. */
static void start_request(struct blk_queue *q, const struct vq_chain *c)
{
	struct virtio_blk *b = q->b;
	struct blk_req *req = req_alloc(q);
	const struct iovec *last;
	struct virtio_blk_outhdr hdr;
	uint64_t data_len;
	int n;

	*req = (struct blk_req){
		.q = q, .head = c->head, .gen = b->gen, .used_len = 1
	};

	/* Without a header and a status byte there is no way to answer. */
	if (c->out_len < sizeof(hdr) || !c->in_len ||
	    iov__to_buf(c->iov, c->nr_out, 0, &hdr, sizeof(hdr)) !=
		    sizeof(hdr)) {
		blk_warn(b, "request without header or status byte");
		if (virtqueue__push(&b->vqs[q->index].vq, c->head, 0) == 0)
			q->pushed = true;
		req_free(req);
		return;
	}
	last = &c->iov[c->nr_out + c->nr_in - 1];
	req->status = (uint8_t *)last->iov_base + last->iov_len - 1;
	req->type = le32toh(hdr.type);

	switch (req->type) {
	case VIRTIO_BLK_T_IN:
	case VIRTIO_BLK_T_OUT:
		break;
	case VIRTIO_BLK_T_FLUSH: {
		int fd = disk__sync_fd(b->disk);

		if (b->cow)
			cow_flush(req);
		else if (fd < 0)
			req_complete(req, VIRTIO_BLK_S_OK);
		else
			op_submit(b, new_op(req, OP_FLUSH, fd, 0, 0));
		return;
	}
	case VIRTIO_BLK_T_GET_ID:
		start_get_id(req, c);
		return;
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		start_zero(req, c);
		return;
	default:
		req_complete(req, VIRTIO_BLK_S_UNSUPP);
		return;
	}

	if (!sector_offset(le64toh(hdr.sector), &req->offset)) {
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	if (req->type == VIRTIO_BLK_T_IN) {
		data_len = c->in_len - 1;
		n = iov__sub(c->iov + c->nr_out, c->nr_in, 0, data_len,
			     req->data, ARRAY_SIZE(req->data));
	} else {
		data_len = c->out_len - sizeof(hdr);
		n = iov__sub(c->iov, c->nr_out, sizeof(hdr), data_len,
			     req->data, ARRAY_SIZE(req->data));
	}
	if (n < 0) {
		blk_warn(b, "request with more than %u data segments",
			 BLK_SEG_MAX);
		req_complete(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	req->nr_data = n;
	req->len = data_len;
	if (!data_len) {
		req_complete(req, VIRTIO_BLK_S_OK);
		return;
	}
	if (req->type != VIRTIO_BLK_T_IN)
		start_write(req);
	else if (b->cow)
		cow_read(req);
	else
		read_window(req);
}

static void process_queue(struct blk_queue *q)
{
	struct virtio_blk *b = q->b;
	struct virtqueue *vq = &b->vqs[q->index].vq;
	struct vq_drain d;
	int ret;

	if (!virtio_device__is_live(&b->vdev) || !virtqueue__is_ready(vq))
		return;
	virtqueue__drain_start(&d, vq);
	for (;;) {
		if (!req_available(q)) {
			/* A completion frees a slot and comes back here. */
			if (!q->starved)
				virtio_device__count_queue_full(&b->vdev);
			q->starved = true;
			return;
		}
		ret = virtqueue__pop_or_rearm(&d, &b->chain);
		if (ret != 1)
			break;
		start_request(q, &b->chain);
	}
	/* A broken ring: the core logged it; the driver must reset us. */
	if (ret == -EIO)
		virtio_device__set_needs_reset(&b->vdev);
}

/* ---- completions and the loop ------------------------------------------ */

static void op_done(struct virtio_blk *b, struct blk_op *op, int res)
{
	struct blk_req *req = op->req;

	if (res == -EINTR || res == -EAGAIN) {
		op_submit(b, op);
		return;
	}
	if (res < 0) {
		blk_warn(b, "I/O error at %" PRIu64 ": %s", op->offset,
			 strerror(-res));
		req->failed = true;
	} else if ((op->kind == OP_READ || op->kind == OP_WRITE) &&
		   (uint64_t)res < op->len) {
		if (!res) {
			blk_warn(b, "short %s at %" PRIu64,
				 op->kind == OP_READ ? "read" : "write",
				 op->offset);
			req->failed = true;
		} else {
			/* Short I/O: go on from where it stopped. */
			iov__advance(&op->iov, &op->iovcnt, res);
			op->offset += res;
			op->len -= res;
			op_submit(b, op);
			return;
		}
	}
	if (--req->pending)
		return;
	req_stage_done(req);
}

/* The loop's handlers run with the device lock held: begin, end. */
static void io_done(void *arg, void *ptr, int res)
{
	op_done(arg, ptr, res);
}

static void kick_done(void *arg, int res)
{
	struct blk_queue *q = arg;
	struct virtio_blk *b = q->b;

	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		pr_err("%s: queue %u: kick eventfd: %s", b->vdev.name, q->index,
		       strerror(-res));
		evloop__stop(&b->loop);
		return;
	}
	arm_kick(q);
	process_queue(q);
}

static void loop_begin(void *arg)
{
	struct virtio_blk *b = arg;

	virtio_device__lock(&b->vdev);
}

static bool loop_end(void *arg)
{
	struct virtio_blk *b = arg;

	for (unsigned int i = 0; i < b->nr_queues; i++) {
		struct blk_queue *q = &b->queues[i];

		if (q->starved && req_available(q)) {
			q->starved = false;
			process_queue(q);
		}
		if (q->pushed) {
			q->pushed = false;
			virtio_device__notify_queue(&b->vdev, i);
		}
	}
	virtio_device__unlock(&b->vdev);
	return false;
}

static const struct evloop_ops blk_loop_ops = {
	.begin = loop_begin,
	.end = loop_end,
};

/* ---- device ops -------------------------------------------------------- */

static void blk_config_read(struct virtio_device *dev, unsigned int offset,
			    void *data, unsigned int len)
{
	memcpy(data, (uint8_t *)&to_blk(dev)->config + offset, len);
}

/*
 * Called with the device lock held and the status already 0. I/O in
 * flight may still write into buffers the driver takes back once it reads
 * the status as 0 (2.1.1: the device must not touch them after a reset),
 * so wait for it here: the condition variable releases the device lock,
 * letting the event loop finish the requests (into the void: gen) and no
 * read starts another window. Only a driver that resets with I/O in
 * flight ever waits, for as long as that I/O takes.
 */
static void blk_reset(struct virtio_device *dev)
{
	struct virtio_blk *b = to_blk(dev);

	b->gen++;
	while (b->busy)
		pthread_cond_wait(&b->idle, &dev->lock);
	for (unsigned int i = 0; i < b->nr_queues; i++)
		b->queues[i].pushed = false;
}

/* Pause: the requests in flight complete (and are pushed) first. */
static int blk_quiesce(struct virtio_device *dev,
		       const struct timespec *deadline)
{
	struct virtio_blk *b = to_blk(dev);

	while (b->busy)
		if (pthread_cond_timedwait(&b->idle, &dev->lock, deadline) ==
		    ETIMEDOUT)
			return b->busy ? -ETIMEDOUT : 0;
	return 0;
}

/*
 * Nothing of the rings beyond the core's: a paused device holds no
 * chain. What the disk is (its size, writable or not, the dirty bytes of
 * its layer) lets a restore check it has the same one; the layer's
 * contents are the snapshot's, not the device's (Documentation/
 * snapshots.md).
 */
static int blk_save(struct virtio_device *dev, json_t *obj, char *err,
		    size_t len)
{
	struct virtio_blk *b = to_blk(dev);
	int ret = 0;

	ret |= json_object_set_new(obj, "queues", json_integer(b->nr_queues));
	ret |= json_object_set_new(
		obj, "diskBytes",
		json_integer((json_int_t)disk__size(b->disk)));
	ret |= json_object_set_new(obj, "readOnly",
				   json_boolean(disk__read_only(b->disk)));
	/*
	 * A cow root's local layer is a cache of its store's blocks: the
	 * restore starts it empty, and the store's state token is what it
	 * checks (vmm/restore.c).
	 */
	if (!b->cow)
		ret |= json_object_set_new(
			obj, "dirtyBytes",
			json_integer((json_int_t)disk__dirty_bytes(b->disk)));
	return ret ? -ENOMEM : 0;
}

/*
 * The same disk as the snapshot's: its size, its mode and the queue
 * count (the core checked the queues' sizes), and a writable layer that
 * holds as many dirty bytes as the snapshot's did. The restore loaded
 * (ephemeral) or checked (persistent) the layer before any device was
 * made (Documentation/snapshots.md, "The root disk"); this catches a
 * layer that is not the one the guest's page cache saw.
 */
static int blk_restore(struct virtio_device *dev, const json_t *obj, char *err,
		       size_t len)
{
	struct virtio_blk *b = to_blk(dev);
	const json_t *q = json_object_get(obj, "queues");
	const json_t *bytes = json_object_get(obj, "diskBytes");
	const json_t *ro = json_object_get(obj, "readOnly");
	const json_t *dirty = json_object_get(obj, "dirtyBytes");

	if (!json_is_integer(q) || !json_is_integer(bytes) ||
	    !json_is_boolean(ro)) {
		snprintf(err, len, "%s: queues, diskBytes or readOnly missing",
			 dev->name);
		return -EINVAL;
	}
	if (json_integer_value(q) != (json_int_t)b->nr_queues ||
	    (uint64_t)json_integer_value(bytes) != disk__size(b->disk) ||
	    json_is_true(ro) != disk__read_only(b->disk)) {
		snprintf(err, len,
			 "%s: the snapshot's disk has %" JSON_INTEGER_FORMAT
			 " bytes%s on %" JSON_INTEGER_FORMAT
			 " queues; this one %" PRIu64 " bytes%s on %u",
			 dev->name, json_integer_value(bytes),
			 json_is_true(ro) ? " read-only" : "",
			 json_integer_value(q), disk__size(b->disk),
			 disk__read_only(b->disk) ? " read-only" : "",
			 b->nr_queues);
		return -EINVAL;
	}
	if (json_is_integer(dirty) &&
	    (uint64_t)json_integer_value(dirty) != disk__dirty_bytes(b->disk)) {
		snprintf(
			err, len,
			"%s: the snapshot's writable layer held %" JSON_INTEGER_FORMAT
			" dirty bytes, this one %" PRIu64,
			dev->name, json_integer_value(dirty),
			disk__dirty_bytes(b->disk));
		return -EINVAL;
	}
	return 0;
}

static const struct virtio_device_ops blk_ops = {
	.config_read = blk_config_read,
	.queue_notify = virtio_device__kick_eventfd,
	.reset = blk_reset,
	.quiesce = blk_quiesce,
	.save = blk_save,
	.restore = blk_restore,
};

static void fill_config(struct virtio_blk *b)
{
	struct virtio_blk_config *c = &b->config;

	c->capacity = htole64(disk__size(b->disk) >> SECTOR_SHIFT);
	c->size_max = htole32(BLK_SIZE_MAX);
	c->seg_max = htole32(BLK_SEG_MAX);
	c->blk_size = htole32(DISK_BLOCK_SIZE);
	c->min_io_size = htole16(1); /* in logical blocks */
	c->num_queues = htole16(b->nr_queues);
	c->max_discard_sectors = htole32(BLK_ZERO_MAX_SECTORS);
	c->max_discard_seg = htole32(1);
	c->discard_sector_alignment = htole32(SECTORS_PER_BLOCK);
	c->max_write_zeroes_sectors = htole32(BLK_ZERO_MAX_SECTORS);
	c->max_write_zeroes_seg = htole32(1);
	c->write_zeroes_may_unmap = 1;
}

static uint64_t blk_features(const struct virtio_blk *b)
{
	uint64_t f = FEAT(VIRTIO_F_VERSION_1) | FEAT(VIRTIO_RING_F_EVENT_IDX) |
		     FEAT(VIRTIO_RING_F_INDIRECT_DESC) |
		     FEAT(VIRTIO_BLK_F_SIZE_MAX) | FEAT(VIRTIO_BLK_F_SEG_MAX) |
		     FEAT(VIRTIO_BLK_F_BLK_SIZE) | FEAT(VIRTIO_BLK_F_FLUSH) |
		     FEAT(VIRTIO_BLK_F_TOPOLOGY) | FEAT(VIRTIO_BLK_F_MQ);

	if (disk__read_only(b->disk))
		return f | FEAT(VIRTIO_BLK_F_RO);
	return f | FEAT(VIRTIO_BLK_F_DISCARD) | FEAT(VIRTIO_BLK_F_WRITE_ZEROES);
}

/* Every op that can be in flight, plus the kicks and the stop. */
static unsigned int cq_entries(unsigned int nr_queues)
{
	unsigned int need = nr_queues * BLK_QUEUE_SIZE * BLK_WINDOW_OPS +
			    nr_queues + 2, /* + the block store's eventfd */
		n = BLK_SQ_ENTRIES;

	while (n < need)
		n <<= 1;
	return n;
}

int virtio_blk__create(struct virtio_blk **out,
		       const struct virtio_blk_params *p)
{
	static const uint8_t opcodes[] = { IORING_OP_READV, IORING_OP_WRITEV,
					   IORING_OP_FSYNC,
					   IORING_OP_FALLOCATE };
	struct evloop_params lp = {
		.sq_entries = BLK_SQ_ENTRIES,
		.opcodes = opcodes,
		.nr_opcodes = ARRAY_SIZE(opcodes),
	};
	struct virtio_device_params vp;
	struct virtio_blk *b;
	int ret;

	if (!p->disk || !p->nr_queues || p->nr_queues > VIRTIO_BLK_MAX_QUEUES)
		return -EINVAL;
	/* Its scratch buffers are backed only when used (resident.h). */
	b = resident__table(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->disk = p->disk;
	b->cow = p->store_cow;
	b->cow_done = (struct ev_source){ .fn = cow_done, .arg = b };
	pthread_cond_init(&b->idle, NULL);
	b->idle_ok = true;
	b->nr_queues = p->nr_queues;
	if (p->serial)
		memcpy(b->serial, p->serial,
		       strnlen(p->serial, sizeof(b->serial)));
	fill_config(b);

	vp = (struct virtio_device_params){
		.name = p->name ? p->name : "virtio-blk",
		.device_id = VIRTIO_ID_BLOCK,
		.features = blk_features(b),
		.config_size = sizeof(b->config),
		.ops = &blk_ops,
		.queues = b->vqs,
		.nr_queues = b->nr_queues,
		.queue_max_size = BLK_QUEUE_SIZE,
		.mem = p->mem,
		.irq = p->irq,
	};
	ret = virtio_device__init(&b->vdev, &vp);
	if (ret)
		goto out_destroy;
	b->vdev_ok = true;
	evloop__init(&b->loop, b->vdev.name);

	for (unsigned int i = 0; i < b->nr_queues; i++) {
		struct blk_queue *q = &b->queues[i];

		q->b = b;
		q->index = i;
		q->kick = (struct ev_source){ .fn = kick_done, .arg = q };
		/* Slots are touched only when used: a lazily backed pool. */
		q->reqs = resident__table(BLK_QUEUE_SIZE, sizeof(*q->reqs));
		if (!q->reqs) {
			ret = -ENOMEM;
			goto out_destroy;
		}
	}
	lp.cq_entries = cq_entries(b->nr_queues);
	ret = evloop__open(&b->loop, &lp);
	if (ret)
		goto out_destroy;
	evloop__set_tag_handler(&b->loop, TAG_OP, io_done, b);
	*out = b;
	return 0;

out_destroy:
	virtio_blk__destroy(b);
	return ret;
}

struct virtio_device *virtio_blk__device(struct virtio_blk *b)
{
	return &b->vdev;
}

int virtio_blk__start(struct virtio_blk *b, const struct sock_fprog *filter)
{
	int ret;

	if (b->cow) {
		ret = store_cow__start(b->cow, filter);
		if (ret)
			return ret;
		arm_cow(b);
	}
	for (unsigned int i = 0; i < b->nr_queues; i++)
		arm_kick(&b->queues[i]);
	return evloop__start(&b->loop, &blk_loop_ops, b, filter);
}

void virtio_blk__destroy(struct virtio_blk *b)
{
	if (!b)
		return;
	/* Waits for I/O in flight: it may still write into guest memory. */
	if (b->vdev_ok)
		evloop__exit(&b->loop);
	/* The changes since the guest's last flush go to the store. */
	store_cow__stop(b->cow);
	for (unsigned int i = 0; i < b->nr_queues; i++)
		resident__free_table(b->queues[i].reqs, BLK_QUEUE_SIZE,
				     sizeof(*b->queues[i].reqs));
	if (b->vdev_ok)
		virtio_device__exit(&b->vdev);
	if (b->idle_ok)
		pthread_cond_destroy(&b->idle);
	resident__free_table(b, 1, sizeof(*b));
}
