// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-vsock over Unix sockets (see vsock.h).
 *
 * One event loop thread per device owns an io_uring. The ring reads the
 * rx and tx queues' kick eventfds, a wake eventfd (streams attached from
 * other threads, device resets), a stop eventfd, a timer while some
 * connection has a deadline, and polls one epoll set that holds the
 * listening socket and every connection's socket, edge-triggered. Edges
 * rather than a one-shot IORING_OP_POLL_ADD per socket: io_uring always
 * reports POLLRDHUP, so a poll for POLLOUT on a socket whose peer has
 * shut its write side completes at once, every time, and waiting for room
 * to write to a half-closed host process would spin. With edges the loop
 * keeps its own "readable" and "writable" flags, set by an event and
 * cleared by EAGAIN, and each socket is registered once (EPOLLOUT added
 * only while a write is blocked). All socket I/O is nonblocking
 * (MSG_DONTWAIT, whatever the fd's own mode).
 *
 * Everything guest-visible happens under the device lock, as does all the
 * connection state: a reset from a vCPU thread only flags the reset and
 * wakes the loop, which drops the connections the guest knew of before it
 * looks at the rings again.
 *
 * Memory is bounded whatever the guest or the host processes do: at most
 * VSOCK_MAX_CONNS connections (any state; beyond that a guest REQUEST is
 * reset and a host client closed), each with at most VSOCK_BUF_ALLOC
 * bytes the host has not read yet (allocated only while it has some; a
 * guest that sends past the credit that allows is reset), a fixed ring
 * of RSTs to send for packets that have no connection (the tx queue stops
 * while it is full, so the guest is throttled, not dropped), and control
 * packets owed to a connection kept as flags on it. Host-to-guest data is
 * read straight into the guest's receive buffer, only while the guest has
 * both credit and buffers, so a slow guest slows the host process down.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>
#include <linux/virtio_vsock.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/vsock.h"
#include "lib/worker.h"

#define VSOCK_QUEUE_SIZE 256U
#define RXQ		 0U /* device to driver */
#define TXQ		 1U /* driver to device */
#define EVQ		 2U /* events: never used by this device */
#define NR_QUEUES	 3U

#define MAX_PKT	       (64U * 1024)	      /* payload in one rx packet */
#define CREDIT_LOW     (VSOCK_BUF_ALLOC / 2U) /* tell the guest below this */
#define CONNECT_MS     5000U /* REQUEST delivered, RESPONSE or RST due */
#define REPLY_MAX      64U   /* RSTs for packets without a connection */
#define ATTACH_MAX     64U   /* attached streams not yet picked up */
#define HASH_BUCKETS   256U
#define EP_BATCH       64
#define ACCEPT_BUDGET  64U  /* per loop iteration */
#define RX_BUDGET      256U /* packets to the guest per iteration */
#define TX_BUDGET      256U /* packets from the guest per iteration */
#define TICK_MS	       1000U
#define SQ_ENTRIES     16U
#define LISTEN_BACKLOG 128

#define HDR_LEN	  sizeof(struct virtio_vsock_hdr) /* 44 bytes */
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)
#define FEAT(bit) (1ULL << (bit))

/* What rides in a CQE's user_data. */
enum loop_event {
	EV_RX_KICK = 1,
	EV_TX_KICK,
	EV_WAKE,
	EV_STOP,
	EV_EPOLL,
	EV_TICK,
};

/* epoll data: a struct vsock_conn pointer, or this for the listener. */
#define EP_LISTEN 1ULL

/* ---- a minimal intrusive list ------------------------------------------ */

struct list {
	struct list *next, *prev;
};

static void list_init(struct list *l)
{
	l->next = l->prev = l;
}

static bool list_empty(const struct list *l)
{
	return l->next == l;
}

static void list_add_tail(struct list *n, struct list *head)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

/* Unlinks n and leaves it empty: list_empty(n) says "not on a list". */
static void list_del(struct list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}

#define list_entry(ptr, type, member) \
	((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- connections --------------------------------------------------------- */

enum conn_state {
	CONN_HANDSHAKE,	  /* host client: waiting for "CONNECT <port>\n" */
	CONN_CONNECTING,  /* host-initiated: REQUEST owed or sent */
	CONN_ESTABLISHED, /* relaying */
	CONN_CLOSED,	  /* socket gone; maybe an RST still owed */
};

/* Control packets owed to the guest, in the order they go out. */
#define PEND_RST      0x01U
#define PEND_REQUEST  0x02U
#define PEND_RESPONSE 0x04U
#define PEND_SHUTDOWN 0x08U /* both ways: the host closed after its EOF */
#define PEND_CREDIT   0x10U

struct vsock_conn {
	struct list node;   /* v->conns, then v->dead */
	struct list hnode;  /* a hash bucket, while the guest may name it */
	struct list rxnode; /* v->rxq, while it has something for the guest */
	int fd;
	enum conn_state state;
	bool guest_knows;	/* REQUEST delivered, or the guest sent one */
	bool readable;		/* an edge said so, no EAGAIN since */
	bool writable;		/* no EAGAIN since the last EPOLLOUT */
	bool out_watched;	/* EPOLLOUT in the epoll set: while blocked */
	bool hup;		/* the host process closed both directions */
	bool host_eof;		/* read 0: the host sends no more */
	bool shut_wr_done;	/* passed the guest's SHUTDOWN(SEND) on */
	uint32_t local_port;	/* the host's side */
	uint32_t peer_port;	/* the guest's side */
	unsigned int pend;	/* PEND_* */
	uint32_t peer_shutdown; /* VIRTIO_VSOCK_SHUTDOWN_* from the guest */
	uint32_t shut_sent;	/* VIRTIO_VSOCK_SHUTDOWN_* sent to it */
	uint64_t deadline;	/* CLOCK_MONOTONIC ms, 0: none */

	/* Credit (virtio 1.1, 5.10.6.3); every counter wraps at 2^32. */
	uint32_t peer_buf_alloc;
	uint32_t peer_fwd_cnt;
	uint32_t tx_cnt;   /* payload bytes sent to the guest */
	uint32_t rx_cnt;   /* payload bytes received from the guest */
	uint32_t fwd_cnt;  /* of those, taken by the host socket */
	uint32_t fwd_sent; /* the fwd_cnt the guest last heard of */

	/* Guest bytes the host socket has not taken: a ring, or NULL. */
	uint8_t *buf;
	uint32_t buf_head, buf_len;

	uint8_t line_len;
	char line[VSOCK_CONNECT_LINE_MAX];
};

/* An RST for a packet that has no connection. */
struct reply {
	uint64_t src_cid; /* the address the guest wrote to */
	uint32_t src_port;
	uint32_t dst_port;
};

struct vsock {
	struct virtio_device vdev;
	struct virtio_queue vqs[NR_QUEUES];
	struct virtio_vsock_config config;
	uint64_t guest_cid;
	bool vdev_ok;
	char uds_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int ep_fd;
	int wake_fd;

	struct io_uring ring;
	bool ring_ok;
	struct worker worker;

	/* Streams handed over by other threads: their own lock. */
	pthread_mutex_t attach_lock;
	bool attach_lock_ok;
	int attach[ATTACH_MAX];
	unsigned int nr_attach;

	/* The rest: the loop's, under the device lock. */
	bool warned;	  /* one message about the guest, for its life */
	bool host_warned; /* one about the host side */
	bool reset_pending;
	bool stopping;
	bool more; /* work left: poll the ring, do not wait */
	bool wake, tick, tx_kick, tx_more, tx_stalled;
	bool ep_armed, ep_ready, tick_armed, listen_ready, listen_retry;
	bool pushed_rx, pushed_tx;
	uint64_t kick_buf[2], wake_buf;
	struct __kernel_timespec tick_ts;

	struct list conns; /* every live connection, any state */
	struct list dead;  /* closed, freed at the end of the iteration */
	struct list rxq;   /* connections with something for the guest */
	struct list buckets[HASH_BUCKETS];
	unsigned int nr_conns; /* on conns and dead */
	uint32_t next_port;

	struct reply replies[REPLY_MAX];
	unsigned int reply_head, nr_replies;

	bool rx_held; /* rx_chain was popped and not used yet */
	struct vq_chain rx_chain;
	struct vq_chain tx_chain;
	struct iovec iov[VQ_CHAIN_MAX_IOV]; /* payload part of a chain */
};

static struct vsock *to_vsock(struct virtio_device *dev)
{
	return (struct vsock *)dev; /* vdev is the first member */
}

/* The guest broke a rule: said once for the device's whole life. */
static __attribute__((format(printf, 2, 3))) void
vsock_warn(struct vsock *v, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	if (v->warned)
		return;
	v->warned = true;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	pr_warn("%s: %s (further errors not logged)", v->vdev.name, why);
}

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

/* ---- iovec helpers ----------------------------------------------------- */

static size_t iov_to_buf(const struct iovec *iov, unsigned int n, void *buf,
			 size_t len)
{
	size_t done = 0;

	for (unsigned int i = 0; i < n && done < len; i++) {
		size_t take = iov[i].iov_len < len - done ? iov[i].iov_len :
							    len - done;

		memcpy((uint8_t *)buf + done, iov[i].iov_base, take);
		done += take;
	}
	return done;
}

static size_t buf_to_iov(const struct iovec *iov, unsigned int n,
			 const void *buf, size_t len)
{
	size_t done = 0;

	for (unsigned int i = 0; i < n && done < len; i++) {
		size_t take = iov[i].iov_len < len - done ? iov[i].iov_len :
							    len - done;

		memcpy(iov[i].iov_base, (const uint8_t *)buf + done, take);
		done += take;
	}
	return done;
}

/*
 * dst receives the segments covering [skip, skip + len) of src; returns
 * how many. src is a chain's (at most VQ_CHAIN_MAX_IOV segments) and dst
 * as large, and the callers checked that src holds skip + len bytes.
 */
static unsigned int iov_sub(const struct iovec *src, unsigned int n,
			    uint64_t skip, uint64_t len, struct iovec *dst)
{
	unsigned int out = 0;

	for (unsigned int i = 0; i < n && len; i++) {
		uint64_t take;

		if (skip >= src[i].iov_len) {
			skip -= src[i].iov_len;
			continue;
		}
		take = src[i].iov_len - skip;
		if (take > len)
			take = len;
		dst[out].iov_base = (uint8_t *)src[i].iov_base + skip;
		dst[out].iov_len = take;
		out++;
		len -= take;
		skip = 0;
	}
	return out;
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

static struct io_uring_sqe *get_sqe(struct vsock *v)
{
	struct io_uring_sqe *sqe;

	/* At most six operations are ever in flight: a submit makes room. */
	while (!(sqe = io_uring_get_sqe(&v->ring)))
		io_uring_submit(&v->ring);
	return sqe;
}

static void arm_read(struct vsock *v, int fd, uint64_t *buf, enum loop_event ev)
{
	struct io_uring_sqe *sqe = get_sqe(v);

	io_uring_prep_read(sqe, fd, buf, sizeof(*buf), 0);
	io_uring_sqe_set_data64(sqe, ev);
}

static void arm_epoll(struct vsock *v)
{
	struct io_uring_sqe *sqe = get_sqe(v);

	io_uring_prep_poll_add(sqe, v->ep_fd, POLLIN);
	io_uring_sqe_set_data64(sqe, EV_EPOLL);
	v->ep_armed = true;
}

static void arm_tick(struct vsock *v)
{
	struct io_uring_sqe *sqe;

	if (v->tick_armed)
		return;
	sqe = get_sqe(v);
	v->tick_ts.tv_sec = TICK_MS / 1000;
	v->tick_ts.tv_nsec = (TICK_MS % 1000) * 1000000L;
	io_uring_prep_timeout(sqe, &v->tick_ts, 0, 0);
	io_uring_sqe_set_data64(sqe, EV_TICK);
	v->tick_armed = true;
}

static void set_deadline(struct vsock *v, struct vsock_conn *c, uint64_t ms)
{
	c->deadline = now_ms() + ms;
	arm_tick(v);
}

/* ---- connection bookkeeping ---------------------------------------------- */

static struct list *bucket(struct vsock *v, uint32_t local, uint32_t peer)
{
	uint32_t h = (local * 0x9e3779b1U) ^ (peer * 0x85ebca77U);

	return &v->buckets[(h ^ (h >> 16)) % HASH_BUCKETS];
}

static struct vsock_conn *lookup(struct vsock *v, uint32_t local, uint32_t peer)
{
	struct list *head = bucket(v, local, peer);

	for (struct list *l = head->next; l != head; l = l->next) {
		struct vsock_conn *c = list_entry(l, struct vsock_conn, hnode);

		if (c->local_port == local && c->peer_port == peer)
			return c;
	}
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

static bool can_read(const struct vsock_conn *c)
{
	return c->state == CONN_ESTABLISHED && c->readable && !c->host_eof &&
	       !(c->peer_shutdown & VIRTIO_VSOCK_SHUTDOWN_RCV) &&
	       peer_credit(c) > 0;
}

/* Put c on the rx queue if it has something for the guest. */
static void conn_update(struct vsock *v, struct vsock_conn *c)
{
	if ((c->pend || can_read(c)) && list_empty(&c->rxnode))
		list_add_tail(&c->rxnode, &v->rxq);
}

static struct vsock_conn *conn_new(struct vsock *v, int fd,
				   enum conn_state state)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLET };
	struct vsock_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	ev.data.ptr = c;
	if (epoll_ctl(v->ep_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		free(c);
		return NULL;
	}
	c->fd = fd;
	c->state = state;
	c->writable = true;
	list_init(&c->hnode);
	list_init(&c->rxnode);
	list_add_tail(&c->node, &v->conns);
	v->nr_conns++;
	return c;
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
			list_entry(v->dead.next, struct vsock_conn, node);

		list_del(&c->node);
		free(c);
		v->nr_conns--;
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

	buf_to_iov(ch->iov + ch->nr_out, ch->nr_in, h, sizeof(*h));
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
	n = iov_sub(ch->iov + ch->nr_out, ch->nr_in, HDR_LEN, max, v->iov);
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
		c = list_entry(v->rxq.next, struct vsock_conn, rxnode);
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

static void flush(struct vsock *v, struct vsock_conn *c)
{
	struct iovec iov[2];
	unsigned int n;
	ssize_t r;

	/* Until EAGAIN or empty: a few turns (two pieces, EINTR). */
	for (int i = 0; i < 8 && c->buf_len && c->writable; i++) {
		uint32_t first = VSOCK_BUF_ALLOC - c->buf_head;

		iov[0].iov_base = c->buf + c->buf_head;
		iov[0].iov_len = first < c->buf_len ? first : c->buf_len;
		n = 1;
		if (first < c->buf_len) {
			iov[1].iov_base = c->buf;
			iov[1].iov_len = c->buf_len - first;
			n = 2;
		}
		r = send_iov(c->fd, iov, n);
		if (r < 0) {
			if (would_block(errno)) {
				blocked(v, c);
				break;
			}
			if (errno == EINTR)
				continue;
			conn_kill(v, c, true);
			return;
		}
		c->buf_head = (c->buf_head + r) % VSOCK_BUF_ALLOC;
		c->buf_len -= r;
		c->fwd_cnt += r;
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
	n = iov_sub(ch->iov, ch->nr_out, HDR_LEN, len, v->iov);
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
	for (unsigned int i = 0; i < n && done; i++) {
		uint64_t seg = v->iov[i].iov_len;

		if (done >= seg) {
			done -= seg;
			v->iov[i].iov_len = 0;
			continue;
		}
		v->iov[i].iov_base = (uint8_t *)v->iov[i].iov_base + done;
		v->iov[i].iov_len -= done;
		done = 0;
	}
	for (unsigned int i = 0; i < n; i++) {
		if (v->iov[i].iov_len &&
		    buf_put(c, v->iov[i].iov_base, v->iov[i].iov_len)) {
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

	/* process_tx stops popping while the ring is full. */
	if (p->op == VIRTIO_VSOCK_OP_RST || v->nr_replies == REPLY_MAX)
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
		return;
	}
	iov_to_buf(ch->iov, ch->nr_out, &h, sizeof(h));
	decode_hdr(&h, &p);
	/* Not the guest's own address: nothing to answer to. */
	if (p.src_cid != v->guest_cid) {
		vsock_warn(v, "packet from CID %" PRIu64 ": dropped",
			   p.src_cid);
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
	bool asked = false;
	int ret = 0;

	v->tx_more = false;
	if (!queue_live(v, TXQ))
		return;
	virtqueue__set_notify_suppression(vq, true);
	for (;;) {
		/* Each packet may need a reply: resumed as replies go. */
		if (v->nr_replies == REPLY_MAX) {
			v->tx_stalled = true;
			return;
		}
		if (!budget--) {
			v->tx_more = v->more = true;
			return;
		}
		ret = virtqueue__pop(vq, &v->tx_chain);
		if (ret == 1) {
			handle_tx(v, &v->tx_chain);
			if (virtqueue__push(vq, v->tx_chain.head, 0) == 0)
				v->pushed_tx = true;
			/* See blk.c: ask again when next empty. */
			asked = false;
			continue;
		}
		if (ret < 0 || asked)
			break;
		virtqueue__set_notify_suppression(vq, false);
		asked = true;
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
	if (v->host_warned)
		return;
	v->host_warned = true;
	pr_warn("%s: %s: %s (further errors not logged)", v->vdev.name, what,
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
		v->stopping = true;
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
	arm_epoll(v);
}

static void check_deadlines(struct vsock *v)
{
	uint64_t now = now_ms();
	bool any = false;
	struct list *l, *next;

	if (v->listen_retry) {
		v->listen_retry = false;
		v->listen_ready = true;
	}
	for (l = v->conns.next; l != &v->conns; l = next) {
		struct vsock_conn *c = list_entry(l, struct vsock_conn, node);

		next = l->next;
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
	struct list *l, *next;

	v->reset_pending = false;
	v->nr_replies = 0;
	v->tx_more = v->tx_stalled = false;
	for (l = v->conns.next; l != &v->conns; l = next) {
		struct vsock_conn *c = list_entry(l, struct vsock_conn, node);

		next = l->next;
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

/* ---- the loop ------------------------------------------------------------ */

static void handle_cqe(struct vsock *v, const struct io_uring_cqe *cqe)
{
	uint64_t ev = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;

	switch (ev) {
	case EV_RX_KICK:
	case EV_TX_KICK:
	case EV_WAKE:
		if (res < 0 && res != -EINTR && res != -EAGAIN) {
			pr_err("%s: eventfd: %s", v->vdev.name, strerror(-res));
			v->stopping = true;
			break;
		}
		/* New receive buffers: the pump runs every round anyway. */
		if (ev == EV_RX_KICK) {
			arm_read(v, v->vqs[RXQ].kick_fd, &v->kick_buf[0], ev);
		} else if (ev == EV_TX_KICK) {
			arm_read(v, v->vqs[TXQ].kick_fd, &v->kick_buf[1], ev);
			v->tx_kick = true;
		} else {
			arm_read(v, v->wake_fd, &v->wake_buf, ev);
			v->wake = true;
		}
		break;
	case EV_STOP:
		v->stopping = true;
		break;
	case EV_EPOLL:
		v->ep_armed = false;
		/* A poll that cannot be armed would fail again at once. */
		if (res < 0 && res != -EINTR && res != -EAGAIN) {
			pr_err("%s: polling the sockets: %s", v->vdev.name,
			       strerror(-res));
			v->stopping = true;
			break;
		}
		v->ep_ready = true;
		break;
	case EV_TICK:
		v->tick_armed = false;
		v->tick = true;
		break;
	}
}

/* One round, under the device lock, after the completions. */
static void run_once(struct vsock *v)
{
	if (v->reset_pending)
		teardown(v);
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

static void *vsock_thread(void *arg)
{
	struct vsock *v = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret;

	worker__block_signals();
	virtio_device__lock(&v->vdev);
	arm_read(v, v->worker.stop_fd, &v->worker.stop_buf, EV_STOP);
	arm_read(v, v->wake_fd, &v->wake_buf, EV_WAKE);
	arm_read(v, v->vqs[RXQ].kick_fd, &v->kick_buf[0], EV_RX_KICK);
	arm_read(v, v->vqs[TXQ].kick_fd, &v->kick_buf[1], EV_TX_KICK);
	arm_epoll(v);
	/* Streams attached before the start, kicks before the thread. */
	v->wake = v->tx_kick = true;
	run_once(v);
	virtio_device__unlock(&v->vdev);

	while (!v->stopping) {
		if (v->more) {
			v->more = false;
			ret = io_uring_submit(&v->ring);
		} else {
			ret = io_uring_submit_and_wait(&v->ring, 1);
		}
		if (ret < 0 && ret != -EINTR) {
			pr_err("%s: io_uring: %s", v->vdev.name,
			       strerror(-ret));
			break;
		}
		virtio_device__lock(&v->vdev);
		seen = 0;
		io_uring_for_each_cqe(&v->ring, head, cqe)
		{
			handle_cqe(v, cqe);
			seen++;
		}
		io_uring_cq_advance(&v->ring, seen);
		if (!v->stopping)
			run_once(v);
		virtio_device__unlock(&v->vdev);
	}
	return NULL;
}

/* ---- device ops ------------------------------------------------------------ */

static void vsock_config_read(struct virtio_device *dev, unsigned int offset,
			      void *data, unsigned int len)
{
	memcpy(data, (uint8_t *)&to_vsock(dev)->config + offset, len);
}

/* A kick that came through the transport: wake the loop the same way. */
static void vsock_queue_notify(struct virtio_device *dev, unsigned int index)
{
	if (index != EVQ) /* EVQ: buffers for events we never send */
		virtio_device__kick_eventfd(dev, index);
}

/*
 * The loop drops the connections before it next looks at a ring (it
 * holds the device lock whenever it does); the held buffer is no longer
 * ours right now.
 */
static void vsock_reset(struct virtio_device *dev)
{
	struct vsock *v = to_vsock(dev);

	v->reset_pending = true;
	v->rx_held = false;
	v->pushed_rx = v->pushed_tx = false;
	worker__wake(v->wake_fd, dev->name, "wake");
}

static const struct virtio_device_ops vsock_ops = {
	.config_read = vsock_config_read,
	.queue_notify = vsock_queue_notify,
	.reset = vsock_reset,
};

/* ---- setup and tear-down ------------------------------------------------- */

static int bind_listen(int fd, const struct sockaddr_un *addr)
{
	if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0)
		return -errno;
	return listen(fd, LISTEN_BACKLOG) < 0 ? -errno : 0;
}

/*
 * A socket file left by a monitor that died is replaced; a live listener
 * or any other file is not ours to remove.
 */
static int open_listener(struct vsock *v)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, probe, ret;

	memcpy(addr.sun_path, v->uds_path, sizeof(addr.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ret = bind_listen(fd, &addr);
	if (ret == -EADDRINUSE && !lstat(v->uds_path, &st)) {
		if (!S_ISSOCK(st.st_mode)) {
			ret = -EEXIST;
			goto out_close;
		}
		/* Nonblocking: a full backlog is EAGAIN, not a wait. */
		probe = socket(AF_UNIX,
			       SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (probe < 0) {
			ret = -errno;
			goto out_close;
		}
		if (connect(probe, (struct sockaddr *)&addr, sizeof(addr)) <
			    0 &&
		    errno == ECONNREFUSED && !unlink(v->uds_path))
			ret = bind_listen(fd, &addr);
		close(probe);
	}
	if (ret)
		goto out_close;
	v->listen_fd = fd;
	return 0;

out_close:
	close(fd);
	return ret;
}

int vsock__create(struct vsock **out, const struct vsock_params *p)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET,
				  .data.u64 = EP_LISTEN };
	struct virtio_device_params vp;
	struct vsock *v;
	int ret;

	if (p->guest_cid < VSOCK_DEFAULT_GUEST_CID ||
	    p->guest_cid > VSOCK_MAX_GUEST_CID)
		return -EINVAL;
	/* Room for the listener's path and "_<port>" behind it. */
	if (p->uds_path &&
	    (!*p->uds_path ||
	     strlen(p->uds_path) + sizeof("_4294967295") > sizeof(v->uds_path)))
		return p->uds_path[0] ? -ENAMETOOLONG : -EINVAL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->listen_fd = v->ep_fd = v->wake_fd = -1;
	worker__init(&v->worker);
	v->guest_cid = p->guest_cid;
	v->config.guest_cid = htole64(p->guest_cid);
	v->next_port = VSOCK_HOST_PORT_BASE;
	if (p->uds_path)
		strcpy(v->uds_path, p->uds_path);
	list_init(&v->conns);
	list_init(&v->dead);
	list_init(&v->rxq);
	for (unsigned int i = 0; i < HASH_BUCKETS; i++)
		list_init(&v->buckets[i]);

	vp = (struct virtio_device_params){
		.name = p->name ? p->name : "virtio-vsock",
		.device_id = VIRTIO_ID_VSOCK,
		.features = FEAT(VIRTIO_F_VERSION_1) |
			    FEAT(VIRTIO_RING_F_EVENT_IDX) |
			    FEAT(VIRTIO_RING_F_INDIRECT_DESC),
		.config_size = sizeof(v->config),
		.ops = &vsock_ops,
		.queues = v->vqs,
		.nr_queues = NR_QUEUES,
		.queue_max_size = VSOCK_QUEUE_SIZE,
		.mem = p->mem,
		.irq = p->irq,
	};
	ret = virtio_device__init(&v->vdev, &vp);
	if (ret)
		goto out_destroy;
	v->vdev_ok = true;
	ret = pthread_mutex_init(&v->attach_lock, NULL);
	if (ret) {
		ret = -ret;
		goto out_destroy;
	}
	v->attach_lock_ok = true;

	v->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	v->ep_fd = epoll_create1(EPOLL_CLOEXEC);
	if (v->wake_fd < 0 || v->ep_fd < 0) {
		ret = -errno;
		goto out_destroy;
	}
	if (v->uds_path[0]) {
		ret = open_listener(v);
		if (ret)
			goto out_destroy;
		if (epoll_ctl(v->ep_fd, EPOLL_CTL_ADD, v->listen_fd, &ev) < 0) {
			ret = -errno;
			goto out_destroy;
		}
	}
	ret = io_uring_queue_init(SQ_ENTRIES, &v->ring, 0);
	if (ret)
		goto out_destroy;
	v->ring_ok = true;
	ret = worker__open(&v->worker);
	if (ret)
		goto out_destroy;
	*out = v;
	return 0;

out_destroy:
	vsock__destroy(v);
	return ret;
}

struct virtio_device *vsock__device(struct vsock *v)
{
	return &v->vdev;
}

int vsock__start(struct vsock *v)
{
	return worker__start(&v->worker, vsock_thread, v);
}

int vsock__attach_stream(struct vsock *v, int fd)
{
	if (fd < 0)
		return -EBADF;
	pthread_mutex_lock(&v->attach_lock);
	if (v->nr_attach == ATTACH_MAX) {
		pthread_mutex_unlock(&v->attach_lock);
		close(fd);
		return -EAGAIN;
	}
	v->attach[v->nr_attach++] = fd;
	pthread_mutex_unlock(&v->attach_lock);
	worker__wake(v->wake_fd, v->vdev.name, "wake");
	return 0;
}

static void close_fd(int fd)
{
	if (fd >= 0)
		close(fd);
}

void vsock__destroy(struct vsock *v)
{
	if (!v)
		return;
	worker__exit(&v->worker, v->vdev.name);
	if (v->ring_ok)
		io_uring_queue_exit(&v->ring);
	/* The thread is gone: the lists are ours. */
	while (!list_empty(&v->conns)) {
		struct vsock_conn *c =
			list_entry(v->conns.next, struct vsock_conn, node);

		list_del(&c->node);
		close_fd(c->fd);
		free(c->buf);
		free(c);
	}
	free_dead(v);
	for (unsigned int i = 0; i < v->nr_attach; i++)
		close(v->attach[i]);
	if (v->attach_lock_ok)
		pthread_mutex_destroy(&v->attach_lock);
	close_fd(v->listen_fd);
	close_fd(v->ep_fd);
	close_fd(v->wake_fd);
	if (v->vdev_ok)
		virtio_device__exit(&v->vdev);
	free(v);
}
