// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-net's frames (see net.h): the guest's transmit chains written to
 * the tap, frames read from the tap into the guest's receive buffers.
 * Everything here runs on the device's loop with the device lock held.
 *
 * Transmit: a kick pops at most VIRTIO_NET_TX_BUDGET chains per round
 * (the next round goes on without waiting), each checked, its header
 * copied out of guest memory before it is checked (the guest cannot
 * change it under us), and written with the frame, still in guest
 * memory, as one IORING_OP_WRITEV. The chain goes back when the write
 * completes; at most TX_SLOTS writes are in flight.
 *
 * Receive: only while the guest has buffers posted. Buffers are popped
 * ahead (with MRG_RXBUF up to RX_HELD_MAX of them, or enough for the
 * largest frame; without it one, which takes a whole frame), then one
 * IORING_OP_READV of the tap fills them: the header into our own copy,
 * the frame straight into guest memory, and what does not fit into a
 * tail of our own (the tap would cut a frame short without a word). A
 * frame larger than the buffers held when it was read is held too, its
 * start in those buffers and its rest in the tail, until the guest posts
 * more (MRG_RXBUF); the tap is not read meanwhile, so the device holds
 * at most one frame and the tap's own queue takes the rest. Only a frame
 * the buffers can never take (one buffer without MRG_RXBUF, RX_HELD_MAX
 * with it) is dropped. A frame's buffers are returned together, and
 * used->idx is published, and the interrupt decided, once at the end of
 * the round that filled them (net.c). Reads
 * and writes carry RWF_NOWAIT where the tap takes it, so that a read of
 * an empty tap says EAGAIN; EAGAIN arms one IORING_OP_POLL_ADD for
 * POLLIN, and the read goes out again when it fires. A tap without
 * NOWAIT support (Linux 6.1, Debian 12's) gets no flag, and there
 * io_uring parks the read of an empty tap (it polls for it internally)
 * until a frame comes: the rx side then shows "reading" while idle, a
 * reset cancels the read (net.c), and nothing published may wait for
 * that read to complete. Nothing is read or polled while the guest has
 * no buffers, so the loop never spins and never blocks. One read is in
 * flight at a time: one frame per round.
 *
 * Transmit chains go back the same way: filled as their writes complete,
 * published with one interrupt decision at the end of the round.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <poll.h>
#include <string.h>
#include <sys/uio.h>

#include "devices/virtio/net-internal.h"
#include "lib/iovec.h"

static bool has_feature(const struct virtio_net *n, unsigned int bit)
{
	return virtio_device__has_feature(&n->vdev, bit);
}

static bool queue_live(struct virtio_net *n, unsigned int index)
{
	return virtio_device__is_live(&n->vdev) &&
	       virtqueue__is_ready(&n->vqs[index].vq);
}

static void busy_put(struct virtio_net *n)
{
	if (!--n->busy)
		pthread_cond_broadcast(&n->idle);
}

/*
 * Give a chain back, unpublished until virtio_net__flush(); a broken
 * queue is the core's to report.
 */
static void push(struct virtio_net *n, unsigned int index, uint16_t head,
		 uint32_t len)
{
	if (virtqueue__fill(&n->vqs[index].vq, head, len))
		return;
	if (index == RXQ)
		n->rx_pushed = true;
	else
		n->tx_pushed = true;
}

void virtio_net__flush(struct virtio_net *n)
{
	if (n->tx_pushed) {
		n->tx_pushed = false;
		virtqueue__flush(&n->vqs[TXQ].vq);
		virtio_device__notify_queue(&n->vdev, TXQ);
	}
	/*
	 * Every round, even with the next read out: on Linux 6.1 (a tun
	 * without FMODE_NOWAIT) io_uring parks a read of an empty tap until
	 * a frame comes, so waiting for it to complete before publishing
	 * would keep what was delivered from the guest, maybe for ever.
	 */
	if (!n->rx_pushed)
		return;
	n->rx_pushed = false;
	virtqueue__flush(&n->vqs[RXQ].vq);
	virtio_device__notify_queue(&n->vdev, RXQ);
}

/* ---- receive ------------------------------------------------------------ */

static struct rx_buf *held_at(struct virtio_net *n, unsigned int i)
{
	return &n->held[(n->held_head + i) % RX_HELD_MAX];
}

/* A receive chain the driver got wrong goes back empty. */
static void rx_refuse(struct virtio_net *n, const struct vq_chain *c,
		      const char *why)
{
	net_warn(n, "receive buffer %u: %s", c->head, why);
	counter__add(&n->stats.rx_bad, 1);
	push(n, RXQ, c->head, 0);
}

static void rx_hold(struct virtio_net *n, const struct vq_chain *c)
{
	struct rx_buf *b;

	if (c->nr_out) {
		rx_refuse(n, c, "has device-readable descriptors");
		return;
	}
	if (c->in_len < HDR_LEN) {
		rx_refuse(n, c, "shorter than the 12-byte header");
		return;
	}
	if (c->nr_in > SEG_MAX) {
		rx_refuse(n, c, "too many segments");
		return;
	}
	b = held_at(n, n->nr_held++);
	b->head = c->head;
	/* Below 2^32: chains are capped at VQ_CHAIN_MAX_BYTES. */
	b->len = c->in_len > UINT32_MAX ? UINT32_MAX : (uint32_t)c->in_len;
	b->nr_iov = c->nr_in;
	memcpy(b->iov, c->iov, c->nr_in * sizeof(b->iov[0]));
	n->held_bytes += b->len;
}

/*
 * Pop receive buffers until the held ones take the largest frame (one
 * buffer without MRG_RXBUF: it must take a whole frame), RX_HELD_MAX are
 * held or the ring is empty (kicks asked for again). At most
 * RX_POP_BUDGET chains a round, so a guest posting only bad buffers
 * cannot keep the loop here.
 */
static void rx_refill(struct virtio_net *n)
{
	unsigned int want = has_feature(n, VIRTIO_NET_F_MRG_RXBUF) ?
				    RX_HELD_MAX :
				    1,
		     budget = RX_POP_BUDGET;
	struct vq_drain d;
	int ret = 0;

	if (n->nr_held >= want || n->held_bytes >= RX_FRAME_MAX)
		return;
	virtqueue__drain_start(&d, &n->vqs[RXQ].vq);
	while (n->nr_held < want && n->held_bytes < RX_FRAME_MAX) {
		if (!budget--) {
			n->more = true;
			return;
		}
		ret = virtqueue__pop_or_rearm(&d, &n->chain);
		if (ret != 1)
			break;
		rx_hold(n, &n->chain);
	}
	/* A broken ring: the core logged it; the driver must reset us. */
	if (ret == -EIO)
		virtio_device__set_needs_reset(&n->vdev);
}

/*
 * One read into the held buffers: the header into rx_hdr, the frame from
 * byte HDR_LEN of the first buffer on (and on into the next ones with
 * MRG_RXBUF), as many buffers as RX_IOV_MAX segments take, then rx_tail
 * up to the largest frame.
 */
static void rx_read(struct virtio_net *n)
{
	bool mrg = has_feature(n, VIRTIO_NET_F_MRG_RXBUF);
	unsigned int nr = 1, i;
	uint64_t cap = HDR_LEN;
	struct io_uring_sqe *sqe;

	n->rx_iov[0] =
		(struct iovec){ .iov_base = &n->rx_hdr, .iov_len = HDR_LEN };
	for (i = 0; i < n->nr_held && (mrg || !i); i++) {
		const struct rx_buf *b = held_at(n, i);
		uint64_t skip = i ? 0 : HDR_LEN;
		int cnt = iov__sub(b->iov, b->nr_iov, skip, b->len - skip,
				   n->rx_iov + nr, RX_IOV_MAX - 1 - nr);

		if (cnt < 0)
			break;
		nr += cnt;
		cap += b->len - skip;
	}
	n->rx_nr_read = i;
	n->rx_cap = cap;
	if (cap < RX_FRAME_MAX)
		n->rx_iov[nr++] = (struct iovec){
			.iov_base = n->rx_tail,
			.iov_len = RX_FRAME_MAX - cap,
		};
	n->rx_gen = n->gen;
	n->rx_reading = true;
	n->busy++;
	sqe = evloop__get_sqe(&n->loop);
	io_uring_prep_readv(sqe, n->tap_fd, n->rx_iov, nr, 0);
	sqe->rw_flags = n->rw_flags;
	io_uring_sqe_set_data(sqe, &n->read_src);
}

static void rx_poll(struct virtio_net *n)
{
	n->rx_polling = true;
	evloop__poll(&n->loop, &n->poll_src, n->tap_fd, POLLIN);
}

static void rx_deliver(struct virtio_net *n, uint64_t len);

/*
 * The waiting frame: what rx_tail holds of it goes into the held buffers
 * past those it covers, and it is delivered once whole. A frame the
 * buffers can never take (no MRG_RXBUF: the one buffer is too small;
 * with it, RX_HELD_MAX buffers are) is dropped: the guest posts buffers
 * too small for what it negotiated. The buffers it was copied into stay
 * held for the next frame.
 */
static void rx_place(struct virtio_net *n)
{
	bool mrg = has_feature(n, VIRTIO_NET_F_MRG_RXBUF);
	uint64_t len = n->rx_frame_len;

	while (mrg && n->rx_placed < len && n->rx_nr_read < n->nr_held) {
		const struct rx_buf *b = held_at(n, n->rx_nr_read);
		uint64_t skip = n->rx_nr_read ? 0 : HDR_LEN;
		uint64_t take = b->len - skip;

		if (take > len - n->rx_placed)
			take = len - n->rx_placed;
		/* rx_tail holds the frame from byte rx_cap on. */
		iov__from_buf(b->iov, b->nr_iov, skip,
			      n->rx_tail + (n->rx_placed - n->rx_cap), take);
		n->rx_placed += take;
		n->rx_nr_read++;
	}
	if (n->rx_placed == len) {
		n->rx_frame_len = 0;
		rx_deliver(n, len);
	} else if (!mrg || n->nr_held == RX_HELD_MAX) {
		n->rx_frame_len = 0;
		counter__add(&n->stats.rx_dropped, 1);
	}
}

void virtio_net__rx_pump(struct virtio_net *n)
{
	if (n->rx_reading || n->rx_polling || n->tap_dead ||
	    !queue_live(n, RXQ))
		return;
	rx_refill(n);
	if (n->rx_frame_len) {
		rx_place(n);
		/* Still short: the refill asked for a kick. */
		n->rx_waiting = n->rx_frame_len;
		if (n->rx_waiting)
			return;
	}
	n->rx_waiting = !n->nr_held;
	if (n->nr_held)
		rx_read(n);
}

/*
 * The header as the guest may see it, or NULL: what the tap wrote, for
 * the offloads the driver accepted. A frame queued in the tap while a
 * previous driver had more offloads can carry what this one cannot take.
 */
static const char *rx_fix_header(struct virtio_net *n,
				 struct virtio_net_hdr_v1 *h, uint16_t nbufs)
{
	uint8_t gso = h->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;

	if (!has_feature(n, VIRTIO_NET_F_GUEST_CSUM)) {
		/* 5.1.6.4.1: no flags; a partial checksum cannot be sent. */
		if (h->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM)
			return "partial checksum";
		h->flags = 0;
	}
	if ((gso == VIRTIO_NET_HDR_GSO_TCPV4 &&
	     !has_feature(n, VIRTIO_NET_F_GUEST_TSO4)) ||
	    (gso == VIRTIO_NET_HDR_GSO_TCPV6 &&
	     !has_feature(n, VIRTIO_NET_F_GUEST_TSO6)) ||
	    (gso != VIRTIO_NET_HDR_GSO_NONE &&
	     gso != VIRTIO_NET_HDR_GSO_TCPV4 &&
	     gso != VIRTIO_NET_HDR_GSO_TCPV6) ||
	    ((h->gso_type & VIRTIO_NET_HDR_GSO_ECN) &&
	     !has_feature(n, VIRTIO_NET_F_GUEST_ECN)))
		return "segmentation offload";
	/* 5.1.6.4: 1 without MRG_RXBUF, the buffers used with it. */
	h->num_buffers = htole16(nbufs);
	return NULL;
}

/* A frame of len bytes (header included) is in the held buffers. */
static void rx_deliver(struct virtio_net *n, uint64_t len)
{
	struct virtio_net_hdr_v1 hdr = n->rx_hdr;
	unsigned int k = 0;
	uint64_t left;

	/*
	 * Buffers used: they were filled in order, each to its end, and
	 * len is at most rx_cap, what the read's buffers hold.
	 */
	for (left = len; left && k < n->rx_nr_read; k++)
		left -= left < held_at(n, k)->len ? left : held_at(n, k)->len;
	if (rx_fix_header(n, &hdr, k)) {
		counter__add(&n->stats.rx_dropped, 1);
		return;
	}
	iov__from_buf(held_at(n, 0)->iov, held_at(n, 0)->nr_iov, 0, &hdr,
		      HDR_LEN);
	for (left = len; k--;) {
		const struct rx_buf *b = held_at(n, 0);
		uint32_t used = left < b->len ? (uint32_t)left : b->len;

		push(n, RXQ, b->head, used);
		left -= used;
		n->held_bytes -= b->len;
		n->held_head = (n->held_head + 1) % RX_HELD_MAX;
		n->nr_held--;
	}
	counter__add(&n->stats.rx_frames, 1);
	counter__add(&n->stats.rx_bytes, len - HDR_LEN);
}

void virtio_net__read_done(void *arg, int res)
{
	struct virtio_net *n = arg;

	n->rx_reading = false;
	busy_put(n);
	/* A reset since: the buffers are no longer ours (nor held). */
	if (n->rx_gen != n->gen)
		return;
	if (res == -EAGAIN) {
		rx_poll(n);
		return;
	}
	/* ECANCELED: a snapshot took the parked read back (net.c). */
	if (res == -EINTR || res == -ECANCELED)
		return; /* the next round reads again */
	/*
	 * EBADFD: the interface went away; polling would spin. Nor does a
	 * tap with IFF_VNET_HDR ever read less than the header: reading
	 * again and again would.
	 */
	if (res < 0 || (uint64_t)res < HDR_LEN) {
		net_host_warn(n, "reading the tap: %s; receive stopped",
			      res < 0 ? strerror(-res) : "short read");
		n->tap_dead = true;
		return;
	}
	if ((uint64_t)res <= n->rx_cap) {
		rx_deliver(n, (uint64_t)res);
		return;
	}
	/* Into rx_tail: more than the buffers held take. */
	n->rx_frame_len = (uint64_t)res;
	n->rx_placed = n->rx_cap;
	rx_place(n);
	if (n->rx_frame_len)
		counter__add(&n->stats.rx_held, 1);
}

void virtio_net__poll_done(void *arg, int res)
{
	struct virtio_net *n = arg;

	n->rx_polling = false;
	/* A poll that cannot be armed would fail again at once. */
	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		net_host_warn(n, "polling the tap: %s; receive stopped",
			      strerror(-res));
		n->tap_dead = true;
	}
}

uint16_t virtio_net__held_head(struct virtio_net *n, unsigned int i)
{
	return held_at(n, i)->head;
}

void virtio_net__drop_buffers(struct virtio_net *n)
{
	n->held_head = n->nr_held = 0;
	n->held_bytes = 0;
	n->rx_frame_len = 0;
	n->rx_waiting = false;
	n->rx_pushed = false;
}

/* ---- transmit ----------------------------------------------------------- */

/*
 * A freed slot first, else the next one never used: the slots' pages
 * become resident only as deep as the guest's writes in flight ever went.
 */
void virtio_net__init_slots(struct virtio_net *n)
{
	n->free_slots = NULL;
	n->fresh_slots = 0;
}

bool virtio_net__slot_available(const struct virtio_net *n)
{
	return n->free_slots || n->fresh_slots < TX_SLOTS;
}

static struct tx_slot *slot_take(struct virtio_net *n)
{
	struct tx_slot *s = n->free_slots;

	if (s)
		n->free_slots = s->next_free;
	else
		s = &n->slots[n->fresh_slots++];
	return s;
}

static void slot_free(struct virtio_net *n, struct tx_slot *s)
{
	s->next_free = n->free_slots;
	n->free_slots = s;
}

/*
 * What is wrong with a transmit header (a copy), or NULL. Only what the
 * driver accepted may be asked of the tap: 5.1.6.2.1 for the flags, the
 * GSO type its HOST_ feature, a checksum inside the frame.
 */
static const char *tx_check_header(const struct virtio_net *n,
				   const struct virtio_net_hdr_v1 *h,
				   uint64_t frame_len)
{
	uint8_t gso = h->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
	bool csum = h->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM;

	if (h->flags & ~VIRTIO_NET_HDR_F_NEEDS_CSUM)
		return "flags other than NEEDS_CSUM";
	if (csum && !has_feature(n, VIRTIO_NET_F_CSUM))
		return "NEEDS_CSUM without VIRTIO_NET_F_CSUM";
	if (csum && (uint64_t)le16toh(h->csum_start) + le16toh(h->csum_offset) +
				    sizeof(uint16_t) >
			    frame_len)
		return "checksum past the end of the frame";
	if (gso == VIRTIO_NET_HDR_GSO_NONE)
		return h->gso_type ? "ECN without segmentation" : NULL;
	if (gso == VIRTIO_NET_HDR_GSO_TCPV4) {
		if (!has_feature(n, VIRTIO_NET_F_HOST_TSO4))
			return "TCPv4 segmentation not negotiated";
	} else if (gso == VIRTIO_NET_HDR_GSO_TCPV6) {
		if (!has_feature(n, VIRTIO_NET_F_HOST_TSO6))
			return "TCPv6 segmentation not negotiated";
	} else {
		return "unknown segmentation type";
	}
	if ((h->gso_type & VIRTIO_NET_HDR_GSO_ECN) &&
	    !has_feature(n, VIRTIO_NET_F_HOST_ECN))
		return "ECN segmentation not negotiated";
	if (!csum)
		return "segmentation without NEEDS_CSUM";
	if (!h->gso_size)
		return "segmentation with gso_size 0";
	return NULL;
}

/* A transmit chain the driver got wrong goes back unsent. */
static void tx_refuse(struct virtio_net *n, const struct vq_chain *c,
		      const char *why)
{
	net_warn(n, "transmit chain %u (%" PRIu64 " bytes): %s", c->head,
		 c->out_len, why);
	counter__add(&n->stats.tx_dropped, 1);
	push(n, TXQ, c->head, 0);
}

static const char *tx_check_chain(const struct vq_chain *c)
{
	if (c->nr_in)
		return "has device-writable descriptors";
	if (c->out_len < HDR_LEN + ETH_HLEN)
		return "shorter than a header and an Ethernet header";
	if (c->out_len - HDR_LEN > MAX_FRAME)
		return "frame over 64 KiB";
	return NULL;
}

static void tx_start(struct virtio_net *n, const struct vq_chain *c)
{
	struct tx_slot *s;
	struct io_uring_sqe *sqe;
	const char *why;
	int cnt;

	why = tx_check_chain(c);
	if (why) {
		tx_refuse(n, c, why);
		return;
	}
	s = slot_take(n);
	iov__to_buf(c->iov, c->nr_out, 0, &s->hdr, HDR_LEN);
	why = tx_check_header(n, &s->hdr, c->out_len - HDR_LEN);
	if (why) {
		slot_free(n, s);
		tx_refuse(n, c, why);
		return;
	}
	cnt = iov__sub(c->iov, c->nr_out, HDR_LEN, c->out_len - HDR_LEN,
		       s->iov + 1, SEG_MAX);
	if (cnt < 0) {
		slot_free(n, s);
		tx_refuse(n, c, "too many segments");
		return;
	}
	s->hdr.num_buffers = 0; /* 5.1.6.2: the driver's, meaningless */
	s->iov[0] = (struct iovec){ .iov_base = &s->hdr, .iov_len = HDR_LEN };
	s->nr_iov = 1 + (unsigned int)cnt;
	s->head = c->head;
	s->gen = n->gen;
	s->len = (uint32_t)c->out_len;
	n->busy++;
	sqe = evloop__get_sqe(&n->loop);
	io_uring_prep_writev(sqe, n->tap_fd, s->iov, s->nr_iov, 0);
	sqe->rw_flags = n->rw_flags;
	io_uring_sqe_set_data64(sqe, (uintptr_t)s | TAG_TX);
}

void virtio_net__tx_pump(struct virtio_net *n)
{
	unsigned int budget = VIRTIO_NET_TX_BUDGET;
	struct vq_drain d;
	int ret = 0;

	if (!n->tx_pending || !queue_live(n, TXQ))
		return;
	virtqueue__drain_start(&d, &n->vqs[TXQ].vq);
	for (;;) {
		if (!budget--) {
			counter__add(&n->stats.tx_budget_stops, 1);
			n->more = true;
			return;
		}
		/* A completion frees a slot; tx_pending brings us back. */
		if (!virtio_net__slot_available(n))
			return;
		ret = virtqueue__pop_or_rearm(&d, &n->chain);
		if (ret != 1)
			break;
		tx_start(n, &n->chain);
	}
	n->tx_pending = false;
	if (ret == -EIO)
		virtio_device__set_needs_reset(&n->vdev);
}

/*
 * A write completed. The tap takes a frame whole or not at all; it
 * refuses one while the interface is down (EIO), a header it does not
 * like (EINVAL), and with a send buffer limit (TUNSETSNDBUF) it may say
 * EAGAIN: the frame is dropped then, as a congested link would.
 */
void virtio_net__write_done(void *arg, void *ptr, int res)
{
	struct virtio_net *n = arg;
	struct tx_slot *s = ptr;

	if (s->gen == n->gen) {
		if (res == (int)s->len) {
			counter__add(&n->stats.tx_frames, 1);
			counter__add(&n->stats.tx_bytes, s->len - HDR_LEN);
		} else {
			counter__add(&n->stats.tx_errors, 1);
			net_host_warn(n, "writing a frame of %u bytes: %s",
				      s->len,
				      res < 0 ? strerror(-res) : "short write");
		}
		push(n, TXQ, s->head, 0);
	}
	slot_free(n, s);
	busy_put(n);
}
