// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-vsock connections (see vsock.c for the design): the state of
 * each, packets to the guest (rx), packets and bytes from it (tx), the
 * host's Unix sockets (listener, CONNECT handshake, edge-triggered
 * events) and the deadlines. All of it on the loop, under the device
 * lock.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/vsock-internal.h"
#include "lib/iovec.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool would_block(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK;
}

/*
 * v->iov receives the segments of the payload, len bytes behind the
 * header in segs (a chain's part, so they fit); returns how many. The
 * callers checked that the chain holds them.
 */
static unsigned int payload(struct vsock *v, const struct iovec *segs,
			    unsigned int n, uint64_t len)
{
	int ret = iov__sub(segs, n, HDR_LEN, len, v->iov, ARRAY_SIZE(v->iov));

	return ret < 0 ? 0 : (unsigned int)ret; /* not reached: checked */
}

static ssize_t send_iov(int fd, struct iovec *iov, unsigned int n)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = n };

	return sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static ssize_t recv_iov(int fd, struct iovec *iov, unsigned int n, int flags)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = n };

	return recvmsg(fd, &msg, MSG_DONTWAIT | flags);
}

/* ---- the ring ---------------------------------------------------------- */

void vsock__arm_epoll(struct vsock *v)
{
	evloop__poll(&v->loop, &v->ep_src, v->ep_fd, POLLIN);
	v->ep_armed = true;
}

static void arm_tick(struct vsock *v)
{
	if (v->tick_armed)
		return;
	evloop__timeout(&v->loop, &v->tick_src, &v->tick_ts,
			TICK_MS * 1000000ULL);
	v->tick_armed = true;
}

static void set_deadline(struct vsock *v, struct vsock_conn *c, uint64_t ms)
{
	c->deadline = now_ms() + ms;
	arm_tick(v);
}

/* ---- connection bookkeeping ---------------------------------------------- */

static struct list_head *bucket(struct vsock *v, uint32_t local, uint32_t peer)
{
	uint32_t h = (local * 0x9e3779b1U) ^ (peer * 0x85ebca77U);

	return &v->buckets[(h ^ (h >> 16)) % HASH_BUCKETS];
}

static struct vsock_conn *lookup(struct vsock *v, uint32_t local, uint32_t peer)
{
	struct list_head *head = bucket(v, local, peer);
	struct vsock_conn *c;

	list_for_each_entry(c, head, struct vsock_conn,
			    hnode) if (c->local_port == local &&
				       c->peer_port == peer) return c;
	return NULL;
}

static void hash_add(struct vsock *v, struct vsock_conn *c)
{
	list_add_tail(&c->hnode, bucket(v, c->local_port, c->peer_port));
}

/* How many payload bytes the guest can take now (5.10.6.3). */
static uint32_t peer_credit(const struct vsock_conn *c)
{
	uint32_t in_flight = c->tx_cnt - c->peer_fwd_cnt;

	/* A peer_fwd_cnt ahead of what we sent wraps to "no credit". */
	return in_flight >= c->peer_buf_alloc ? 0 :
						c->peer_buf_alloc - in_flight;
}

/*
 * Out of credit, a connection waits for the guest's next packet (every
 * one carries fwd_cnt): the device never sends CREDIT_REQUEST, as
 * vhost-vsock never does. Linux volunteers CREDIT_UPDATE after a read,
 * once it has read all but 64 KiB of its buf_alloc since its last packet
 * to us, or has read something since then and emptied its queue
 * (6.1.192; older kernels only the first): a reader that keeps reading
 * always tells us before we run dry. The unit test
 * linux_guest_stream_never_stalls models that guest.
 */
static bool can_read(const struct vsock_conn *c)
{
	return c->state == CONN_ESTABLISHED && c->readable && !c->host_eof &&
	       !(c->peer_shutdown & VIRTIO_VSOCK_SHUTDOWN_RCV) &&
	       peer_credit(c) > 0;
}

/* Put c on the rx queue if it has something for the guest. */
static void conn_update(struct vsock *v, struct vsock_conn *c)
{
	/* A host connect waits out a transport reset (reset_unseen). */
	if (v->reset_unseen && (c->pend & PEND_REQUEST))
		return;
	if ((c->pend || can_read(c)) && list_empty(&c->rxnode))
		list_add_tail(&c->rxnode, &v->rxq);
}

static struct vsock_conn *conn_new(struct vsock *v, int fd,
				   enum conn_state state)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLET };
	struct vsock_conn *c;

	if (v->fds && fd_budget__take(v->fds, 1)) {
		vsock_warn(v, "the monitor's descriptor budget is spent: "
			      "connection refused");
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto out_put;
	ev.data.ptr = c;
	if (epoll_ctl(v->ep_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		free(c);
		goto out_put;
	}
	c->fd = fd;
	c->state = state;
	c->writable = true;
	list_init(&c->hnode);
	list_init(&c->rxnode);
	list_add_tail(&c->node, &v->conns);
	v->nr_conns++;
	return c;
out_put:
	if (v->fds)
		fd_budget__put(v->fds, 1);
	return NULL;
}

/*
 * Watch for room to write only while blocked: otherwise every read by the
 * host process would wake the loop. Adding EPOLLOUT reports a socket that
 * is writable already, so no edge is lost in between.
 */
static void watch_out(struct vsock *v, struct vsock_conn *c, bool on)
{
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (on ? EPOLLOUT : 0),
		.data.ptr = c,
	};

	if (c->out_watched == on)
		return;
	if (epoll_ctl(v->ep_fd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->out_watched = on;
}

static void blocked(struct vsock *v, struct vsock_conn *c)
{
	c->writable = false;
	watch_out(v, c, true);
}

/* Off every list but dead: freed at the end of the loop iteration. */
static void conn_bury(struct vsock *v, struct vsock_conn *c)
{
	if (!list_empty(&c->rxnode))
		list_del(&c->rxnode);
	list_del(&c->node);
	list_add_tail(&c->node, &v->dead);
}

/*
 * Close the host side now; with rst, tell the guest (if it knows of the
 * connection) with an RST, which the connection itself then waits to
 * send. Safe on a connection already closed.
 */
static void conn_kill(struct vsock *v, struct vsock_conn *c, bool rst)
{
	if (c->state == CONN_CLOSED)
		return;
	epoll_ctl(v->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->buf_len = 0;
	if (!list_empty(&c->hnode))
		list_del(&c->hnode);
	c->state = CONN_CLOSED;
	c->deadline = 0;
	c->pend = rst && c->guest_knows ? PEND_RST : 0;
	if (c->pend)
		conn_update(v, c);
	else
		conn_bury(v, c);
}

static void free_dead(struct vsock *v)
{
	while (!list_empty(&v->dead)) {
		struct vsock_conn *c =
			list_first_entry(&v->dead, struct vsock_conn, node);

		list_del(&c->node);
		free(c);
		v->nr_conns--;
		if (v->fds)
			fd_budget__put(v->fds, 1);
	}
}

/* ---- packets to the guest -------------------------------------------------- */

static bool queue_live(struct vsock *v, unsigned int index)
{
	struct virtqueue *vq = &v->vqs[index].vq;

	return virtio_device__is_live(&v->vdev) && virtqueue__is_ready(vq) &&
	       !virtqueue__is_broken(vq);
}

/*
 * A receive buffer in rx_chain, kept (rx_held) until a packet fills it:
 * a read that finds nothing leaves it for the next one. False when the
 * driver has none to give.
 */
static bool rx_get_chain(struct vsock *v)
{
	struct virtqueue *vq = &v->vqs[RXQ].vq;
	int ret;

	/* Bounded: buffers too short to use are returned, a ring's worth. */
	for (unsigned int i = 0; i <= VSOCK_QUEUE_SIZE; i++) {
		if (v->rx_held)
			return true;
		ret = virtqueue__pop(vq, &v->rx_chain);
		if (ret == 0) {
			/* Empty: ask for a kick, then look once more. */
			virtqueue__set_notify_suppression(vq, false);
			ret = virtqueue__pop(vq, &v->rx_chain);
		}
		if (ret <= 0) {
			/* A broken ring: the core logged it. */
			if (ret == -EIO)
				virtio_device__set_needs_reset(&v->vdev);
			return false;
		}
		if (v->rx_chain.in_len >= HDR_LEN) {
			v->rx_held = true;
			return true;
		}
		vsock_warn(v, "receive buffer of %" PRIu64 " writable bytes",
			   v->rx_chain.in_len);
		if (virtqueue__push(vq, v->rx_chain.head, 0) == 0)
			v->pushed_rx = true;
	}
	return false;
}

/* Fill in every header field; ports are the host's, then the guest's. */
static void make_hdr(struct vsock *v, struct virtio_vsock_hdr *h,
		     uint64_t src_cid, uint32_t src_port, uint32_t dst_port,
		     uint16_t op, uint32_t flags, uint32_t len)
{
	memset(h, 0, sizeof(*h));
	h->src_cid = htole64(src_cid);
	h->dst_cid = htole64(v->guest_cid);
	h->src_port = htole32(src_port);
	h->dst_port = htole32(dst_port);
	h->len = htole32(len);
	h->type = htole16(VIRTIO_VSOCK_TYPE_STREAM);
	h->op = htole16(op);
	h->flags = htole32(flags);
}

/* The held buffer: header in front of len payload bytes already there. */
static void rx_complete(struct vsock *v, const struct virtio_vsock_hdr *h,
			uint32_t len)
{
	struct vq_chain *ch = &v->rx_chain;

	iov__from_buf(ch->iov + ch->nr_out, ch->nr_in, 0, h, sizeof(*h));
	v->rx_held = false;
	if (virtqueue__push(&v->vqs[RXQ].vq, ch->head, HDR_LEN + len) == 0)
		v->pushed_rx = true;
}

/* Every packet of a connection carries our credit (5.10.6.3). */
static void conn_packet(struct vsock *v, struct vsock_conn *c, uint16_t op,
			uint32_t flags, uint32_t len)
{
	struct virtio_vsock_hdr h;

	make_hdr(v, &h, VSOCK_HOST_CID, c->local_port, c->peer_port, op, flags,
		 len);
	h.buf_alloc = htole32(VSOCK_BUF_ALLOC);
	h.fwd_cnt = htole32(c->fwd_cnt);
	c->fwd_sent = c->fwd_cnt;
	c->pend &= ~PEND_CREDIT;
	rx_complete(v, &h, len);
}

static void send_reply(struct vsock *v)
{
	const struct reply *r = &v->replies[v->reply_head];
	struct virtio_vsock_hdr h;

	make_hdr(v, &h, r->src_cid, r->src_port, r->dst_port,
		 VIRTIO_VSOCK_OP_RST, 0, 0);
	v->reply_head = (v->reply_head + 1) % REPLY_MAX;
	v->nr_replies--;
	rx_complete(v, &h, 0);
}

/*
 * Host bytes for the guest, read straight into the held buffer. True when
 * the buffer was used (data, or the end of the host's stream).
 */
static bool conn_read(struct vsock *v, struct vsock_conn *c)
{
	struct vq_chain *ch = &v->rx_chain;
	uint64_t max = ch->in_len - HDR_LEN;
	unsigned int n;
	ssize_t r;

	if (max > MAX_PKT)
		max = MAX_PKT;
	if (max > peer_credit(c))
		max = peer_credit(c);
	if (!max) {
		/* A buffer with room for the header alone: a bare update. */
		c->pend |= PEND_CREDIT;
		return false;
	}
	n = payload(v, ch->iov + ch->nr_out, ch->nr_in, max);
	r = recv_iov(c->fd, v->iov, n, 0);
	if (r > 0) {
		c->tx_cnt += r;
		conn_packet(v, c, VIRTIO_VSOCK_OP_RW, 0, r);
		return true;
	}
	if (r == 0) {
		/*
		 * The host sends no more; if it closed outright, it takes
		 * nothing either, and the guest may as well know now.
		 */
		c->host_eof = true;
		c->readable = false;
		c->shut_sent = c->hup ? SHUT_BOTH : VIRTIO_VSOCK_SHUTDOWN_SEND;
		conn_packet(v, c, VIRTIO_VSOCK_OP_SHUTDOWN, c->shut_sent, 0);
		return true;
	}
	if (would_block(errno)) {
		c->readable = false;
		return false;
	}
	if (errno != EINTR)
		conn_kill(v, c, true);
	return false;
}

/* One packet for c into the held buffer, if it has one to send. */
static void conn_send(struct vsock *v, struct vsock_conn *c)
{
	if (c->pend & PEND_RST) {
		conn_packet(v, c, VIRTIO_VSOCK_OP_RST, 0, 0);
		c->pend = 0;
		conn_bury(v, c);
		return;
	}
	if (c->pend & PEND_REQUEST) {
		c->pend &= ~PEND_REQUEST;
		conn_packet(v, c, VIRTIO_VSOCK_OP_REQUEST, 0, 0);
		c->guest_knows = true;
		set_deadline(v, c, CONNECT_MS);
		return;
	}
	if (c->pend & PEND_RESPONSE) {
		c->pend &= ~PEND_RESPONSE;
		conn_packet(v, c, VIRTIO_VSOCK_OP_RESPONSE, 0, 0);
		return;
	}
	if (can_read(c) && conn_read(v, c))
		return;
	/* A failed read killed c: its RST goes next time round. */
	if (c->state == CONN_CLOSED)
		return;
	if (c->pend & PEND_SHUTDOWN) {
		c->pend &= ~PEND_SHUTDOWN;
		c->shut_sent = SHUT_BOTH;
		conn_packet(v, c, VIRTIO_VSOCK_OP_SHUTDOWN, SHUT_BOTH, 0);
		return;
	}
	if (c->pend & PEND_CREDIT)
		conn_packet(v, c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, 0);
}

/*
 * Everything owed to the guest, round-robin between connections, as far
 * as its receive buffers go. RSTs without a connection go first: the tx
 * queue waits for them.
 */
static void pump_rx(struct vsock *v)
{
	unsigned int budget = RX_BUDGET;

	if (!queue_live(v, RXQ))
		return;
	while (v->nr_replies || !list_empty(&v->rxq)) {
		struct vsock_conn *c;

		if (!budget--) {
			v->more = true;
			return;
		}
		if (!rx_get_chain(v))
			return;
		if (v->nr_replies) {
			send_reply(v);
			continue;
		}
		c = list_first_entry(&v->rxq, struct vsock_conn, rxnode);
		list_del(&c->rxnode);
		conn_send(v, c);
		if (c->state != CONN_CLOSED || c->pend)
			conn_update(v, c);
	}
}

/* ---- guest bytes to the host ------------------------------------------------- */

/* Tell the guest about forwarded bytes once its view of credit is low. */
static void credit_check(struct vsock *v, struct vsock_conn *c)
{
	uint32_t in_flight = c->rx_cnt - c->fwd_sent;
	uint32_t room =
		in_flight >= VSOCK_BUF_ALLOC ? 0 : VSOCK_BUF_ALLOC - in_flight;

	if (c->fwd_cnt != c->fwd_sent && room < CREDIT_LOW) {
		c->pend |= PEND_CREDIT;
		conn_update(v, c);
	}
}

/* The buffer is empty: carry out the guest's shutdown, if any. */
static void conn_drained(struct vsock *v, struct vsock_conn *c)
{
	if (c->buf_len || c->state != CONN_ESTABLISHED)
		return;
	if (c->peer_shutdown == SHUT_BOTH) {
		/* The guest closed: it waits for our RST to let go. */
		conn_kill(v, c, true);
		return;
	}
	if ((c->peer_shutdown & VIRTIO_VSOCK_SHUTDOWN_SEND) &&
	    !c->shut_wr_done) {
		shutdown(c->fd, SHUT_WR);
		c->shut_wr_done = true;
	}
}

/* One send of c's buffered bytes (the ring's one or two pieces). */
static ssize_t buf_send(struct vsock_conn *c)
{
	uint32_t first = VSOCK_BUF_ALLOC - c->buf_head;
	struct iovec iov[2];
	unsigned int n = 1;
	ssize_t r;

	iov[0].iov_base = c->buf + c->buf_head;
	iov[0].iov_len = first < c->buf_len ? first : c->buf_len;
	if (first < c->buf_len) {
		iov[1].iov_base = c->buf;
		iov[1].iov_len = c->buf_len - first;
		n = 2;
	}
	r = send_iov(c->fd, iov, n);
	if (r > 0) {
		c->buf_head = (c->buf_head + r) % VSOCK_BUF_ALLOC;
		c->buf_len -= r;
		c->fwd_cnt += r;
	}
	return r;
}

static void flush(struct vsock *v, struct vsock_conn *c)
{
	/* Until EAGAIN or empty: a few turns (two pieces, EINTR). */
	for (int i = 0; i < 8 && c->buf_len && c->writable; i++) {
		if (buf_send(c) >= 0)
			continue;
		if (would_block(errno)) {
			blocked(v, c);
			break;
		}
		if (errno == EINTR)
			continue;
		conn_kill(v, c, true);
		return;
	}
	if (!c->buf_len) {
		free(c->buf);
		c->buf = NULL;
		c->buf_head = 0;
		watch_out(v, c, false);
	}
	credit_check(v, c);
	conn_drained(v, c);
}

/* Append len bytes to c's ring; the credit check keeps them in bounds. */
static int buf_put(struct vsock_conn *c, const uint8_t *p, uint32_t len)
{
	if (!c->buf) {
		/* Touched only as far as used: a lazily backed mapping. */
		c->buf = malloc(VSOCK_BUF_ALLOC);
		if (!c->buf)
			return -ENOMEM;
		c->buf_head = 0;
	}
	while (len) {
		uint32_t at = (c->buf_head + c->buf_len) % VSOCK_BUF_ALLOC;
		uint32_t take = VSOCK_BUF_ALLOC - at;

		if (take > len)
			take = len;
		memcpy(c->buf + at, p, take);
		c->buf_len += take;
		p += take;
		len -= take;
	}
	return 0;
}

/*
 * A RW packet's payload, bytes [HDR_LEN, HDR_LEN + len) of the chain
 * (checked to be there): written through if the socket takes it, the rest
 * kept behind what is already buffered.
 */
static void guest_data(struct vsock *v, struct vsock_conn *c,
		       const struct vq_chain *ch, uint32_t len)
{
	uint32_t buffered = c->rx_cnt - c->fwd_cnt;
	struct iovec *rest;
	uint64_t done = 0;
	unsigned int n;
	ssize_t r;

	/*
	 * Credit is what we advertised: buf_alloc less what the guest sent
	 * and we did not forward yet. A guest going past it would make us
	 * buffer without bound (or drop bytes): reset it.
	 */
	if (len > VSOCK_BUF_ALLOC - buffered) {
		vsock_warn(v,
			   "guest port %" PRIu32 ": %" PRIu32
			   " bytes sent with %" PRIu32
			   " bytes of credit; connection reset",
			   c->peer_port, len, VSOCK_BUF_ALLOC - buffered);
		conn_kill(v, c, true);
		return;
	}
	if (!len)
		return;
	c->rx_cnt += len;
	n = payload(v, ch->iov, ch->nr_out, len);
	if (!c->buf_len && c->writable) {
		r = send_iov(c->fd, v->iov, n);
		if (r < 0 && would_block(errno)) {
			blocked(v, c);
		} else if (r < 0 && errno != EINTR) {
			conn_kill(v, c, true); /* EPIPE: the host is gone */
			return;
		} else if (r > 0) {
			done = r;
			c->fwd_cnt += r;
		}
	}
	/* What the socket did not take goes behind the buffered bytes. */
	rest = v->iov;
	iov__advance(&rest, &n, done);
	for (unsigned int i = 0; i < n; i++) {
		if (buf_put(c, rest[i].iov_base, rest[i].iov_len)) {
			pr_err("%s: out of memory", v->vdev.name);
			conn_kill(v, c, true);
			return;
		}
	}
	/* A short write that was not EAGAIN: try on, or learn we block. */
	if (c->buf_len && c->writable)
		flush(v, c);
	else
		credit_check(v, c);
}

/* ---- packets from the guest ------------------------------------------------ */

/* A header, decoded. */
struct pkt {
	uint64_t src_cid, dst_cid;
	uint32_t src_port, dst_port;
	uint32_t len;
	uint16_t type, op;
	uint32_t flags, buf_alloc, fwd_cnt;
};

static void decode_hdr(const struct virtio_vsock_hdr *h, struct pkt *p)
{
	p->src_cid = le64toh(h->src_cid);
	p->dst_cid = le64toh(h->dst_cid);
	p->src_port = le32toh(h->src_port);
	p->dst_port = le32toh(h->dst_port);
	p->len = le32toh(h->len);
	p->type = le16toh(h->type);
	p->op = le16toh(h->op);
	p->flags = le32toh(h->flags);
	p->buf_alloc = le32toh(h->buf_alloc);
	p->fwd_cnt = le32toh(h->fwd_cnt);
}

/* RST the sender of p, which has no connection; never an RST to an RST. */
static void reply_rst(struct vsock *v, const struct pkt *p)
{
	struct reply *r;

	if (p->op == VIRTIO_VSOCK_OP_RST)
		return;
	/* A packet the device refused: an error, for vm.metrics. */
	virtio_device__count_error(&v->vdev);
	/* process_tx stops popping while the ring is full. */
	if (v->nr_replies == REPLY_MAX)
		return;
	r = &v->replies[(v->reply_head + v->nr_replies) % REPLY_MAX];
	r->src_cid = p->dst_cid;
	r->src_port = p->dst_port;
	r->dst_port = p->src_port;
	v->nr_replies++;
}

/*
 * The guest connects to host port P: a connect() to "<uds_path>_P". A
 * Unix stream connect completes at once or fails (a full backlog is
 * EAGAIN, nonblocking): either way the guest gets its answer now.
 */
static void guest_connect(struct vsock *v, const struct pkt *p)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct vsock_conn *c;
	int fd, n;

	if (v->nr_conns >= VSOCK_MAX_CONNS) {
		vsock_warn(v, "more than %u connections: refused",
			   VSOCK_MAX_CONNS);
		reply_rst(v, p);
		return;
	}
	n = snprintf(addr.sun_path, sizeof(addr.sun_path), "%s_%" PRIu32,
		     v->uds_path, p->dst_port);
	if (!v->uds_path[0] || n < 0 || (size_t)n >= sizeof(addr.sun_path)) {
		reply_rst(v, p);
		return;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		reply_rst(v, p);
		return;
	}
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		reply_rst(v, p);
		return;
	}
	c = conn_new(v, fd, CONN_ESTABLISHED);
	if (!c) {
		close(fd);
		reply_rst(v, p);
		return;
	}
	c->local_port = p->dst_port;
	c->peer_port = p->src_port;
	c->guest_knows = true;
	c->peer_buf_alloc = p->buf_alloc;
	c->peer_fwd_cnt = p->fwd_cnt;
	c->pend = PEND_RESPONSE;
	hash_add(v, c);
	conn_update(v, c);
}

/* The guest accepted a host-initiated connection: tell the host. */
static void host_established(struct vsock *v, struct vsock_conn *c)
{
	struct iovec iov;
	char ok[24];
	int n;

	n = snprintf(ok, sizeof(ok), "OK %" PRIu32 "\n", c->local_port);
	iov = (struct iovec){ .iov_base = ok, .iov_len = n };
	/*
	 * The first bytes on a fresh socket: they fit its buffer unless the
	 * host process is gone, and then the guest's side goes too.
	 */
	if (send_iov(c->fd, &iov, 1) != n) {
		conn_kill(v, c, true);
		return;
	}
	c->state = CONN_ESTABLISHED;
	c->deadline = 0;
}

static void conn_packet_in(struct vsock *v, struct vsock_conn *c,
			   const struct pkt *p, const struct vq_chain *ch)
{
	c->peer_buf_alloc = p->buf_alloc;
	c->peer_fwd_cnt = p->fwd_cnt;

	switch (p->op) {
	case VIRTIO_VSOCK_OP_RESPONSE:
		if (c->state != CONN_CONNECTING || !c->guest_knows) {
			vsock_warn(v, "RESPONSE on port %" PRIu32 " unasked",
				   p->src_port);
			conn_kill(v, c, true);
			break;
		}
		host_established(v, c);
		break;
	case VIRTIO_VSOCK_OP_RST:
		conn_kill(v, c, false);
		break;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		if (c->state != CONN_ESTABLISHED) {
			conn_kill(v, c, true);
			break;
		}
		c->peer_shutdown |= p->flags & SHUT_BOTH;
		conn_drained(v, c);
		break;
	case VIRTIO_VSOCK_OP_RW:
		if (c->state != CONN_ESTABLISHED ||
		    (c->peer_shutdown & VIRTIO_VSOCK_SHUTDOWN_SEND)) {
			vsock_warn(v,
				   "data on port %" PRIu32 " %s; connection "
				   "reset",
				   p->src_port,
				   c->state != CONN_ESTABLISHED ?
					   "before it was accepted" :
					   "after SHUTDOWN");
			conn_kill(v, c, true);
			break;
		}
		guest_data(v, c, ch, p->len);
		break;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		break; /* the credit fields are all it carries */
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		c->pend |= PEND_CREDIT;
		break;
	case VIRTIO_VSOCK_OP_REQUEST:
		/* A second REQUEST for a live pair: neither can be trusted. */
		vsock_warn(v, "REQUEST from port %" PRIu32 " already connected",
			   p->src_port);
		conn_kill(v, c, true);
		break;
	default:
		vsock_warn(v, "unknown op %u on port %" PRIu32, p->op,
			   p->src_port);
		conn_kill(v, c, true);
		break;
	}
	if (c->state != CONN_CLOSED)
		conn_update(v, c);
}

static void handle_tx(struct vsock *v, const struct vq_chain *ch)
{
	struct virtio_vsock_hdr h;
	struct vsock_conn *c;
	struct pkt p;

	if (ch->out_len < HDR_LEN) {
		vsock_warn(v, "packet of %" PRIu64 " bytes: dropped",
			   ch->out_len);
		virtio_device__count_error(&v->vdev);
		return;
	}
	iov__to_buf(ch->iov, ch->nr_out, 0, &h, sizeof(h));
	decode_hdr(&h, &p);
	/* Not the guest's own address: nothing to answer to. */
	if (p.src_cid != v->guest_cid) {
		vsock_warn(v, "packet from CID %" PRIu64 ": dropped",
			   p.src_cid);
		virtio_device__count_error(&v->vdev);
		return;
	}
	c = p.dst_cid == VSOCK_HOST_CID ? lookup(v, p.dst_port, p.src_port) :
					  NULL;
	if (p.len > ch->out_len - HDR_LEN) {
		vsock_warn(v,
			   "packet length %" PRIu32 " in a %" PRIu64
			   "-byte buffer: reset",
			   p.len, ch->out_len);
		if (c)
			conn_kill(v, c, true);
		else
			reply_rst(v, &p);
		return;
	}
	/* Other CIDs (there are no sibling VMs) and types: refused. */
	if (p.dst_cid != VSOCK_HOST_CID || p.type != VIRTIO_VSOCK_TYPE_STREAM) {
		if (c)
			conn_kill(v, c, true);
		else
			reply_rst(v, &p);
		return;
	}
	if (c)
		conn_packet_in(v, c, &p, ch);
	else if (p.op == VIRTIO_VSOCK_OP_REQUEST)
		guest_connect(v, &p);
	else
		reply_rst(v, &p);
}

static void process_tx(struct vsock *v)
{
	struct virtqueue *vq = &v->vqs[TXQ].vq;
	unsigned int budget = TX_BUDGET;
	struct vq_drain d;
	int ret;

	v->tx_more = false;
	if (!queue_live(v, TXQ))
		return;
	virtqueue__drain_start(&d, vq);
	for (;;) {
		/* Each packet may need a reply: resumed as replies go. */
		if (v->nr_replies == REPLY_MAX) {
			if (!v->tx_stalled)
				virtio_device__count_queue_full(&v->vdev);
			v->tx_stalled = true;
			return;
		}
		if (!budget--) {
			v->tx_more = v->more = true;
			return;
		}
		ret = virtqueue__pop_or_rearm(&d, &v->tx_chain);
		if (ret != 1)
			break;
		handle_tx(v, &v->tx_chain);
		if (virtqueue__push(vq, v->tx_chain.head, 0) == 0)
			v->pushed_tx = true;
	}
	if (ret == -EIO)
		virtio_device__set_needs_reset(&v->vdev);
}

/* ---- host clients ------------------------------------------------------- */

/* "CONNECT <port>\n", port decimal without sign or leading junk. */
static bool parse_connect(const char *line, unsigned int len, uint32_t *port)
{
	static const char verb[] = "CONNECT ";
	const unsigned int vlen = sizeof(verb) - 1;
	uint64_t val = 0;
	unsigned int i;

	if (len < vlen + 2 || memcmp(line, verb, vlen) || line[len - 1] != '\n')
		return false;
	for (i = vlen; i < len - 1; i++) {
		if (line[i] < '0' || line[i] > '9' || i - vlen >= 10)
			return false;
		val = val * 10 + (line[i] - '0');
	}
	if (val >= UINT32_MAX) /* VMADDR_PORT_ANY */
		return false;
	*port = val;
	return true;
}

static uint32_t alloc_port(struct vsock *v, uint32_t guest_port)
{
	/* One of VSOCK_MAX_CONNS + 1 tries finds a free pair. */
	for (unsigned int i = 0; i <= VSOCK_MAX_CONNS; i++) {
		uint32_t port = v->next_port++;

		if (v->next_port == UINT32_MAX)
			v->next_port = VSOCK_HOST_PORT_BASE;
		if (!lookup(v, port, guest_port))
			return port;
	}
	return v->next_port; /* not reached */
}

/*
 * Read the CONNECT line: peek, then take up to the newline and no
 * further, so bytes the client sends right behind it stay in the socket
 * for the guest. At most VSOCK_CONNECT_LINE_MAX bytes in all.
 */
static void handshake(struct vsock *v, struct vsock_conn *c)
{
	uint32_t port;

	while (c->readable) {
		unsigned int room = sizeof(c->line) - c->line_len;
		struct iovec iov = { c->line + c->line_len, room };
		char *nl;
		ssize_t r;

		if (!room) {
			conn_kill(v, c, false); /* too long */
			return;
		}
		r = recv_iov(c->fd, &iov, 1, MSG_PEEK);
		if (r < 0 && would_block(errno)) {
			c->readable = false;
			return;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			conn_kill(v, c, false); /* gone, or an error */
			return;
		}
		nl = memchr(iov.iov_base, '\n', r);
		iov.iov_len = nl ? (size_t)(nl - (char *)iov.iov_base) + 1 :
				   (size_t)r;
		if (recv_iov(c->fd, &iov, 1, 0) != (ssize_t)iov.iov_len) {
			conn_kill(v, c, false);
			return;
		}
		c->line_len += iov.iov_len;
		if (nl)
			break;
	}
	if (!c->line_len || c->line[c->line_len - 1] != '\n')
		return;
	if (!parse_connect(c->line, c->line_len, &port)) {
		conn_kill(v, c, false);
		return;
	}
	c->state = CONN_CONNECTING;
	c->deadline = 0; /* until the REQUEST is delivered */
	c->peer_port = port;
	c->local_port = alloc_port(v, port);
	c->pend = PEND_REQUEST;
	hash_add(v, c);
	conn_update(v, c);
}

/* A new host stream, accepted or attached: it owes us a CONNECT line. */
static void add_client(struct vsock *v, int fd)
{
	struct vsock_conn *c;

	if (v->nr_conns >= VSOCK_MAX_CONNS) {
		close(fd);
		return;
	}
	c = conn_new(v, fd, CONN_HANDSHAKE);
	if (!c) {
		close(fd);
		return;
	}
	set_deadline(v, c, VSOCK_HANDSHAKE_MS);
}

static void host_warn(struct vsock *v, const char *what, int err)
{
	warn__once(&v->host_warned, v->vdev.name,
		   " (further errors not logged)", "%s: %s", what,
		   strerror(err));
}

static void accept_clients(struct vsock *v)
{
	int fd;

	v->listen_ready = false;
	for (unsigned int i = 0; i < ACCEPT_BUDGET; i++) {
		fd = accept4(v->listen_fd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			add_client(v, fd);
			continue;
		}
		if (would_block(errno))
			return;
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		/* Out of fds or memory: the clients wait, try again later. */
		host_warn(v, "accept", errno);
		v->listen_retry = true;
		arm_tick(v);
		return;
	}
	/* Edge-triggered: the rest will not be reported again. */
	v->listen_ready = v->more = true;
}

static void take_attached(struct vsock *v)
{
	int fds[ATTACH_MAX];
	unsigned int n;

	pthread_mutex_lock(&v->attach_lock);
	n = v->nr_attach;
	memcpy(fds, v->attach, n * sizeof(fds[0]));
	v->nr_attach = 0;
	pthread_mutex_unlock(&v->attach_lock);
	for (unsigned int i = 0; i < n; i++)
		add_client(v, fds[i]);
}

static void conn_event(struct vsock *v, struct vsock_conn *c, uint32_t ev)
{
	if (c->state == CONN_CLOSED)
		return; /* killed earlier in this batch */
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		c->readable = true;
	if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		c->writable = true;
	if (ev & (EPOLLHUP | EPOLLERR))
		c->hup = true;
	switch (c->state) {
	case CONN_HANDSHAKE:
		handshake(v, c);
		break;
	case CONN_CONNECTING:
		/* Gone before the guest answered (a half-close may wait). */
		if (c->hup)
			conn_kill(v, c, true);
		break;
	case CONN_ESTABLISHED:
		/*
		 * The read that saw the end may have come before the edge
		 * that says the host closed outright: say so again, then.
		 */
		if (c->hup && c->host_eof && c->shut_sent != SHUT_BOTH)
			c->pend |= PEND_SHUTDOWN;
		if (c->buf_len && c->writable)
			flush(v, c);
		break;
	case CONN_CLOSED:
		break;
	}
	if (c->state != CONN_CLOSED)
		conn_update(v, c);
}

static void handle_events(struct vsock *v)
{
	struct epoll_event ev[EP_BATCH];
	int n;

	n = epoll_wait(v->ep_fd, ev, EP_BATCH, 0);
	if (n < 0 && errno != EINTR) {
		pr_err("%s: epoll_wait: %s", v->vdev.name, strerror(errno));
		evloop__stop(&v->loop);
		return;
	}
	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 == EP_LISTEN)
			v->listen_ready = true;
		else
			conn_event(v, ev[i].data.ptr, ev[i].events);
	}
	if (n == EP_BATCH) {
		v->more = true; /* maybe more: look again, then re-arm */
		return;
	}
	v->ep_ready = false;
	vsock__arm_epoll(v);
}

static void check_deadlines(struct vsock *v)
{
	uint64_t now = now_ms();
	struct vsock_conn *c, *next;
	bool any = false;

	if (v->listen_retry) {
		v->listen_retry = false;
		v->listen_ready = true;
	}
	list_for_each_entry_safe(c, next, &v->conns, struct vsock_conn, node)
	{
		if (!c->deadline)
			continue;
		if (now < c->deadline) {
			any = true;
			continue;
		}
		/* A silent client, or a guest that never answered. */
		conn_kill(v, c, c->state == CONN_CONNECTING);
	}
	if (any)
		arm_tick(v);
}

/*
 * The driver reset the device: every connection it knew of is gone. Host
 * clients it never heard of (no CONNECT line yet, or a REQUEST not
 * delivered) wait for the next driver.
 */
static void teardown(struct vsock *v)
{
	struct vsock_conn *c, *next;

	v->reset_pending = false;
	v->reset_unseen = false; /* a new driver: no reset owed */
	v->nr_replies = 0;
	v->tx_more = v->tx_stalled = false;
	list_for_each_entry_safe(c, next, &v->conns, struct vsock_conn, node)
	{
		if (c->state == CONN_CLOSED) {
			c->pend = 0;
			conn_bury(v, c);
		} else if (c->guest_knows) {
			conn_kill(v, c, false);
		} else if (c->state == CONN_CONNECTING) {
			/* Its REQUEST goes to the next driver. */
			c->pend = PEND_REQUEST;
		}
	}
}

/*
 * The driver handled the transport reset once it gave an event buffer
 * back (Linux: virtio_transport_event_work resets its connections, then
 * refills): the host connects held meanwhile go to the guest now.
 */
static void reset_seen(struct vsock *v)
{
	struct virtqueue *q = &v->vqs[EVQ].vq;
	struct vsock_conn *c;

	if (q->ready && virtqueue__avail_idx(q) == v->reset_avail)
		return;
	v->reset_unseen = false;
	list_for_each_entry(c, &v->conns, struct vsock_conn, node)
		conn_update(v, c);
}

void vsock__run_round(struct vsock *v)
{
	if (v->reset_pending)
		teardown(v);
	if (v->reset_unseen)
		reset_seen(v);
	if (v->wake) {
		v->wake = false;
		take_attached(v);
	}
	if (v->tick) {
		v->tick = false;
		check_deadlines(v);
	}
	if (v->ep_ready)
		handle_events(v);
	if (v->listen_ready)
		accept_clients(v);
	if (v->tx_kick || v->tx_more) {
		v->tx_kick = false;
		process_tx(v);
	}
	pump_rx(v);
	/* Replies went out: the tx queue can go on (next round). */
	if (v->tx_stalled && v->nr_replies < REPLY_MAX) {
		v->tx_stalled = false;
		v->tx_more = v->more = true;
	}
	free_dead(v);
	if (v->pushed_rx) {
		v->pushed_rx = false;
		virtio_device__notify_queue(&v->vdev, RXQ);
	}
	if (v->pushed_tx) {
		v->pushed_tx = false;
		virtio_device__notify_queue(&v->vdev, TXQ);
	}
}

/*
 * Bytes the guest sent (its credit spent on them) that the host had no
 * room for yet: delivered before the sockets close, as a guest that
 * writes its last bytes and powers off expects. DRAIN_MS in all, so a
 * host that never reads cannot hold the exit; what is left is said.
 */
static void drain_conns(struct vsock *v)
{
	uint64_t end = now_ms() + DRAIN_MS;
	struct vsock_conn *c;

	list_for_each_entry(c, &v->conns, struct vsock_conn, node)
	{
		while (c->fd >= 0 && c->buf_len) {
			struct pollfd p = { .fd = c->fd, .events = POLLOUT };
			uint64_t now = now_ms();

			if (now >= end || poll(&p, 1, (int)(end - now)) <= 0 ||
			    (p.revents & (POLLERR | POLLHUP | POLLNVAL)))
				break;
			if (buf_send(c) < 0 && !would_block(errno) &&
			    errno != EINTR)
				break;
		}
		if (c->fd >= 0 && c->buf_len)
			pr_warn("%s: guest port %" PRIu32 ": %" PRIu32
				" bytes the host did not read dropped at exit",
				v->vdev.name, c->peer_port, c->buf_len);
	}
}

void vsock__free_conns(struct vsock *v)
{
	drain_conns(v);
	while (!list_empty(&v->conns)) {
		struct vsock_conn *c =
			list_first_entry(&v->conns, struct vsock_conn, node);

		list_del(&c->node);
		if (c->fd >= 0)
			close(c->fd);
		free(c->buf);
		free(c);
		if (v->fds)
			fd_budget__put(v->fds, 1);
	}
	free_dead(v);
}
