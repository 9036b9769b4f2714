// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-vsock over Unix sockets (see vsock.h). This file is the device:
 * its loop, ops and setup; vsock-conn.c holds the connections.
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
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/virtio/vsock-internal.h"
#include "lib/iovec.h"
#include "lib/resident.h"

static struct vsock *to_vsock(struct virtio_device *dev)
{
	return (struct vsock *)dev; /* vdev is the first member */
}

/* ---- the loop ------------------------------------------------------------ */

/* The loop's handlers run with the device lock held: begin, end. */
static bool eventfd_ok(struct vsock *v, int res)
{
	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		pr_err("%s: eventfd: %s", v->vdev.name, strerror(-res));
		evloop__stop(&v->loop);
		return false;
	}
	return true;
}

static void arm_rx_kick(struct vsock *v)
{
	evloop__read_eventfd(&v->loop, &v->rx_kick_src, v->vqs[RXQ].kick_fd,
			     &v->kick_buf[0]);
}

static void arm_tx_kick(struct vsock *v)
{
	evloop__read_eventfd(&v->loop, &v->tx_kick_src, v->vqs[TXQ].kick_fd,
			     &v->kick_buf[1]);
}

static void arm_ev_kick(struct vsock *v)
{
	evloop__read_eventfd(&v->loop, &v->ev_kick_src, v->vqs[EVQ].kick_fd,
			     &v->kick_buf[2]);
}

static void arm_wake(struct vsock *v)
{
	evloop__read_eventfd(&v->loop, &v->wake_src, v->wake_fd, &v->wake_buf);
}

/* New receive buffers: the pump runs every round anyway. */
static void rx_kick_done(void *arg, int res)
{
	struct vsock *v = arg;

	if (eventfd_ok(v, res))
		arm_rx_kick(v);
}

/* Event buffers given back: vsock__run_round looks at a transport reset. */
static void ev_kick_done(void *arg, int res)
{
	struct vsock *v = arg;

	if (eventfd_ok(v, res))
		arm_ev_kick(v);
}

static void tx_kick_done(void *arg, int res)
{
	struct vsock *v = arg;

	if (!eventfd_ok(v, res))
		return;
	arm_tx_kick(v);
	v->tx_kick = true;
}

static void wake_done(void *arg, int res)
{
	struct vsock *v = arg;

	if (!eventfd_ok(v, res))
		return;
	arm_wake(v);
	v->wake = true;
}

static void epoll_done(void *arg, int res)
{
	struct vsock *v = arg;

	v->ep_armed = false;
	/* A poll that cannot be armed would fail again at once. */
	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		pr_err("%s: polling the sockets: %s", v->vdev.name,
		       strerror(-res));
		evloop__stop(&v->loop);
		return;
	}
	v->ep_ready = true;
}

static void tick_done(void *arg, int res)
{
	struct vsock *v = arg;

	v->tick_armed = false;
	v->tick = true;
}

static void loop_begin(void *arg)
{
	struct vsock *v = arg;

	virtio_device__lock(&v->vdev);
}

static bool loop_end(void *arg)
{
	struct vsock *v = arg;
	bool more;

	if (!v->loop.stopping)
		vsock__run_round(v);
	more = v->more;
	v->more = false;
	virtio_device__unlock(&v->vdev);
	return more;
}

static const struct evloop_ops vsock_loop_ops = {
	.begin = loop_begin,
	.end = loop_end,
};

/* ---- device ops ------------------------------------------------------------ */

static void vsock_config_read(struct virtio_device *dev, unsigned int offset,
			      void *data, unsigned int len)
{
	memcpy(data, (uint8_t *)&to_vsock(dev)->config + offset, len);
}

/* A kick that came through the transport: wake the loop the same way. */
static void vsock_queue_notify(struct virtio_device *dev, unsigned int index)
{
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

/* Connections named in a report; the rest are only counted. */
#define DESCRIBE_CONNS 8U

static const char *const conn_state_names[] = {
	[CONN_HANDSHAKE] = "handshake",
	[CONN_CONNECTING] = "connecting",
	[CONN_ESTABLISHED] = "established",
	[CONN_CLOSED] = "closed",
};

/*
 * The loop's flags, and its connections when the report holds the device
 * lock (it only tries: a busy loop says so instead). Each
 * connection: state, host port:guest port, what it owes the guest (pend),
 * whether the guest knows it, bytes each way and its deadline's distance.
 */
static int vsock_describe(struct virtio_device *dev, bool locked, char *buf,
			  size_t len)
{
	struct vsock *v = to_vsock(dev);
	const struct vsock_conn *c;
	unsigned int n = 0, nrx = 0;
	size_t at;

	at = (size_t)snprintf(buf, len, "replies %u%s%s%s%s%s", v->nr_replies,
			      v->rx_held ? " rx-held" : "",
			      v->tx_stalled ? " tx-stalled" : "",
			      v->more ? " more" : "",
			      v->reset_pending ? " reset-pending" : "",
			      v->tick_armed ? " tick" : "");
	if (!locked) {
		at += (size_t)snprintf(buf + at, at < len ? len - at : 0,
				       "; loop busy, connections not read");
		return (int)at;
	}
	list_for_each_entry(c, &v->rxq, struct vsock_conn, rxnode) nrx++;
	at += (size_t)snprintf(buf + at, at < len ? len - at : 0,
			       "; conns %u owing %u", v->nr_conns, nrx);
	list_for_each_entry(c, &v->conns, struct vsock_conn, node)
	{
		if (n++ == DESCRIBE_CONNS || at >= len)
			break;
		at += (size_t)snprintf(
			buf + at, len - at,
			"; %s %u:%u pend %#x%s to-guest %u from-guest %u%s",
			conn_state_names[c->state], c->local_port, c->peer_port,
			c->pend, c->guest_knows ? " known" : "", c->tx_cnt,
			c->rx_cnt, c->deadline ? " deadline" : "");
	}
	return (int)(at < len ? at : len - 1);
}

/*
 * The loop does its work in rounds under the device lock, so a paused
 * device has nothing in flight (no quiesce op). Its connections are host
 * sockets and are not saved: a restored VM starts with none, the way a
 * migrated one does, and tells its guest with a transport reset event
 * (Documentation/snapshots.md). What is saved: the guest's CID and the
 * receive buffer held for the next packet, if any: the core's
 * lastAvailIdx counts it as taken, so a restore gives it back by
 * popping it again (rxHeldHead is its head, for a check).
 */
static int vsock_save(struct virtio_device *dev, json_t *obj, char *err,
		      size_t len)
{
	struct vsock *v = to_vsock(dev);
	int ret = 0;

	ret |= json_object_set_new(obj, "guestCid",
				   json_integer((json_int_t)v->guest_cid));
	ret |= json_object_set_new(obj, "rxHeld", json_boolean(v->rx_held));
	if (v->rx_held)
		ret |= json_object_set_new(obj, "rxHeldHead",
					   json_integer(v->rx_chain.head));
	ret |= json_object_set_new(obj, "connections",
				   json_integer(v->nr_conns));
	ret |= json_object_set_new(obj, "nextPort",
				   json_integer((json_int_t)v->next_port));
	return ret ? -ENOMEM : 0;
}

/*
 * The receive buffer the snapshot's device held (popped, not used) goes
 * back to the ring: the next pop takes it again. Its head must be the
 * one saved, or the ring is not the one the snapshot saw.
 */
static int give_back_held(struct vsock *v, const json_t *head, char *err,
			  size_t len)
{
	uint16_t h;

	if (!json_is_integer(head) || json_integer_value(head) < 0 ||
	    json_integer_value(head) > UINT16_MAX) {
		snprintf(err, len, "%s: rxHeld without a receive buffer head",
			 v->vdev.name);
		return -EINVAL;
	}
	h = (uint16_t)json_integer_value(head);
	if (virtqueue__unpop(&v->vqs[RXQ].vq, &h, 1)) {
		snprintf(err, len,
			 "%s: rxHeldHead %u is not the last receive buffer "
			 "taken from the ring",
			 v->vdev.name, h);
		return -EINVAL;
	}
	return 0;
}

/*
 * VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the event queue (virtio 1.2,
 * 5.10.6.6, "Device Events"): the driver resets every connection (its
 * listeners stay) and reads the guest CID again. A driver that posted
 * no event buffer is not told, and its connections end as the host
 * side answers their packets with RST.
 */
static void send_transport_reset(struct vsock *v)
{
	const struct virtio_vsock_event ev = {
		.id = htole32(VIRTIO_VSOCK_EVENT_TRANSPORT_RESET),
	};
	struct virtqueue *q = &v->vqs[EVQ].vq;
	struct vq_chain ch;
	int ret;

	if (!virtio_device__is_live(&v->vdev) || !q->ready)
		return; /* no driver yet, so no connections */
	ret = virtqueue__pop(q, &ch);
	if (ret <= 0) {
		pr_warn("%s: no event buffer for the transport reset (%s)",
			v->vdev.name, ret ? strerror(-ret) : "ring empty");
		return;
	}
	if (ch.in_len < sizeof(ev))
		pr_warn("%s: an event buffer of %llu bytes", v->vdev.name,
			(unsigned long long)ch.in_len);
	else
		iov__from_buf(ch.iov + ch.nr_out, ch.nr_in, 0, &ev, sizeof(ev));
	/*
	 * The driver's refill must kick us (reset_seen waits for it): with
	 * EVENT_IDX it kicks only past avail_event, which nothing else moves
	 * on this queue. Asked before the event is pushed, so before the
	 * refill; otherwise the held connects wait for the next TICK_MS.
	 */
	v->reset_avail = virtqueue__kick_on_next_avail(q);
	ret = virtqueue__push(q, ch.head,
			      ch.in_len < sizeof(ev) ? 0 : sizeof(ev));
	if (ret) {
		pr_warn("%s: the transport reset: %s", v->vdev.name,
			strerror(-ret));
		return;
	}
	/* Host connects wait for the driver's refill (vsock-internal.h). */
	v->reset_unseen = true;
	virtio_device__notify_queue(&v->vdev, EVQ);
}

/*
 * A restored device (vsock_save's counterpart): the same guest CID, the
 * held receive buffer given back, no connections (they were host
 * sockets), and the guest told so with a transport reset.
 */
static int vsock_restore(struct virtio_device *dev, const json_t *obj,
			 char *err, size_t len)
{
	struct vsock *v = to_vsock(dev);
	const json_t *cid = json_object_get(obj, "guestCid");
	const json_t *held = json_object_get(obj, "rxHeld");
	const json_t *port;
	int ret;

	if (!json_is_integer(cid) || !json_is_boolean(held)) {
		snprintf(err, len, "%s: guestCid or rxHeld missing", dev->name);
		return -EINVAL;
	}
	if ((uint64_t)json_integer_value(cid) != v->guest_cid) {
		snprintf(err, len,
			 "%s: the snapshot's guest CID is %" JSON_INTEGER_FORMAT
			 ", this one %llu",
			 dev->name, json_integer_value(cid),
			 (unsigned long long)v->guest_cid);
		return -EINVAL;
	}
	if (json_is_true(held)) {
		ret = give_back_held(v, json_object_get(obj, "rxHeldHead"), err,
				     len);
		if (ret)
			return ret;
	}
	/*
	 * Host ports go on from the snapshot's: a guest socket of an old
	 * connection, until the reset below reaches it, keeps its tuple,
	 * and a new connection on that tuple would meet its RST.
	 */
	port = json_object_get(obj, "nextPort");
	if (json_is_integer(port) &&
	    json_integer_value(port) >= VSOCK_HOST_PORT_BASE &&
	    json_integer_value(port) < UINT32_MAX)
		v->next_port = (uint32_t)json_integer_value(port);
	send_transport_reset(v);
	return 0;
}

static const struct virtio_device_ops vsock_ops = {
	.config_read = vsock_config_read,
	.describe = vsock_describe,
	.queue_notify = vsock_queue_notify,
	.reset = vsock_reset,
	.save = vsock_save,
	.restore = vsock_restore,
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
	static const uint8_t opcodes[] = { IORING_OP_POLL_ADD,
					   IORING_OP_TIMEOUT };
	/* At most six operations are ever in flight. */
	const struct evloop_params lp = {
		.sq_entries = SQ_ENTRIES,
		.opcodes = opcodes,
		.nr_opcodes = ARRAY_SIZE(opcodes),
	};
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
	/* Its scratch buffers are backed only when used (resident.h). */
	v = resident__table(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->listen_fd = v->ep_fd = v->wake_fd = -1;
	v->guest_cid = p->guest_cid;
	v->fds = p->fds;
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
	evloop__init(&v->loop, v->vdev.name);
	v->rx_kick_src = (struct ev_source){ .fn = rx_kick_done, .arg = v };
	v->tx_kick_src = (struct ev_source){ .fn = tx_kick_done, .arg = v };
	v->ev_kick_src = (struct ev_source){ .fn = ev_kick_done, .arg = v };
	v->wake_src = (struct ev_source){ .fn = wake_done, .arg = v };
	v->ep_src = (struct ev_source){ .fn = epoll_done, .arg = v };
	v->tick_src = (struct ev_source){ .fn = tick_done, .arg = v };
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
	ret = evloop__open(&v->loop, &lp);
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

int vsock__start(struct vsock *v, const struct sock_fprog *filter)
{
	arm_wake(v);
	arm_rx_kick(v);
	arm_tx_kick(v);
	arm_ev_kick(v);
	vsock__arm_epoll(v);
	/*
	 * Streams attached before the start, kicks before the thread: the
	 * first round takes them (the wake makes sure there is one).
	 */
	v->tx_kick = true;
	worker__wake(v->wake_fd, v->vdev.name, "wake");
	return evloop__start(&v->loop, &vsock_loop_ops, v, filter);
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
	if (v->vdev_ok)
		evloop__exit(&v->loop);
	/* The thread is gone: the lists are ours. */
	vsock__free_conns(v);
	for (unsigned int i = 0; i < v->nr_attach; i++)
		close(v->attach[i]);
	if (v->attach_lock_ok)
		pthread_mutex_destroy(&v->attach_lock);
	close_fd(v->listen_fd);
	close_fd(v->ep_fd);
	close_fd(v->wake_fd);
	if (v->vdev_ok)
		virtio_device__exit(&v->vdev);
	resident__free_table(v, 1, sizeof(*v));
}
