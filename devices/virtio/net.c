// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-net on a tap (see net.h). This file is the device: its loop,
 * ops and setup; net-io.c moves the frames.
 *
 * One event loop thread per device owns an io_uring. The ring reads the
 * rx and tx queues' kick eventfds and the stop eventfd, and carries the
 * tap I/O: writes of the guest's frames, one read (or, when the tap has
 * nothing, one poll) for frames to the guest. Everything guest-visible
 * happens under the device lock, so a reset from a vCPU thread never
 * runs in the middle of it; a reset waits for reads and writes in flight
 * (they touch guest memory), which on a nonblocking tap complete at once.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/if_tun.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_ring.h>
#include <net/if.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <time.h>

#include "devices/virtio/net-internal.h"
#include "lib/resident.h"
#include "lib/timespec.h"

/* A snapshot waits this long for the parked read to be taken back. */
#define NET_SAVE_TIMEOUT_MS 5000U

/* The offloads a tap may be told about (TUNSETOFFLOAD). */
#define TAP_OFFLOADS (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN)
/* What the tap must be: frames with the virtio header, no extra header. */
#define TAP_FLAGS (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR)

static struct virtio_net *to_net(struct virtio_device *dev)
{
	return (struct virtio_net *)dev; /* vdev is the first member */
}

/* ---- the loop ------------------------------------------------------------ */

static void arm_kick(struct virtio_net *n, unsigned int index)
{
	evloop__read_eventfd(&n->loop,
			     index == RXQ ? &n->rx_kick_src : &n->tx_kick_src,
			     n->vqs[index].kick_fd, &n->kick_buf[index]);
}

/* The loop's handlers run with the device lock held: begin, end. */
static bool kick_ok(struct virtio_net *n, unsigned int index, int res)
{
	if (res < 0 && res != -EINTR && res != -EAGAIN) {
		pr_err("%s: queue %u: kick eventfd: %s", n->vdev.name, index,
		       strerror(-res));
		evloop__stop(&n->loop);
		return false;
	}
	arm_kick(n, index);
	return true;
}

/* New receive buffers: the pump runs every round anyway. */
static void rx_kick_done(void *arg, int res)
{
	kick_ok(arg, RXQ, res);
}

static void tx_kick_done(void *arg, int res)
{
	struct virtio_net *n = arg;

	if (kick_ok(n, TXQ, res))
		n->tx_pending = true;
}

static void loop_begin(void *arg)
{
	struct virtio_net *n = arg;

	virtio_device__lock(&n->vdev);
}

static bool loop_end(void *arg)
{
	struct virtio_net *n = arg;
	bool more;

	if (!n->loop.stopping) {
		virtio_net__tx_pump(n);
		virtio_net__rx_pump(n);
	}
	virtio_net__flush(n);
	more = n->more;
	n->more = false;
	virtio_device__unlock(&n->vdev);
	return more;
}

static const struct evloop_ops net_loop_ops = {
	.begin = loop_begin,
	.end = loop_end,
};

/* ---- device ops ------------------------------------------------------------ */

static void net_config_read(struct virtio_device *dev, unsigned int offset,
			    void *data, unsigned int len)
{
	memcpy(data, (uint8_t *)&to_net(dev)->config + offset, len);
}

/* The offloads for frames to the guest: what its driver accepted. */
static unsigned int guest_offloads(const struct virtio_device *dev)
{
	unsigned int off;

	if (!virtio_device__has_feature(dev, VIRTIO_NET_F_GUEST_CSUM))
		return 0; /* TSO needs it too (5.1.3.1) */
	off = TUN_F_CSUM;
	if (virtio_device__has_feature(dev, VIRTIO_NET_F_GUEST_TSO4))
		off |= TUN_F_TSO4;
	if (virtio_device__has_feature(dev, VIRTIO_NET_F_GUEST_TSO6))
		off |= TUN_F_TSO6;
	if ((off & (TUN_F_TSO4 | TUN_F_TSO6)) &&
	    virtio_device__has_feature(dev, VIRTIO_NET_F_GUEST_ECN))
		off |= TUN_F_TSO_ECN;
	return off;
}

/*
 * DRIVER_OK: the tap may now hand over what the driver can take. Runs on
 * the vCPU thread: the seccomp filter must allow this ioctl there.
 */
static int net_activate(struct virtio_device *dev)
{
	struct virtio_net *n = to_net(dev);

	if (ioctl(n->tap_fd, TUNSETOFFLOAD, guest_offloads(dev)) < 0)
		return -errno;
	return 0;
}

/*
 * Called with the device lock held and the status already 0. Reads and
 * writes in flight use buffers the driver takes back once it reads the
 * status as 0 (2.1.1), so wait for them: the condition variable releases
 * the device lock, the loop completes them into the void (gen). Writes
 * and a read with RWF_NOWAIT take no time; a read of an empty tap that
 * io_uring parked instead (Linux 6.1: a tun without FMODE_NOWAIT) would
 * wait for the next frame, maybe for ever, so it is cancelled. The read
 * may still sit unsubmitted in the loop's ring: try again until it is
 * gone.
 */
static void net_reset(struct virtio_device *dev)
{
	struct virtio_net *n = to_net(dev);
	struct timespec until;

	n->gen++;
	while (n->busy) {
		if (n->rx_reading)
			evloop__cancel(&n->loop, &n->read_src);
		timespec__deadline_in(&until, CLOCK_REALTIME, RESET_RETRY_MS);
		pthread_cond_timedwait(&n->idle, &dev->lock, &until);
	}
	virtio_net__drop_buffers(n);
	n->tx_pending = false;
	n->tx_pushed = false;
}

/*
 * Read bare when the report could not take the lock (see
 * virtio_device_ops): counters may be a round behind, nothing is freed.
 */
static int net_describe(struct virtio_device *dev, bool locked, char *buf,
			size_t len)
{
	const struct virtio_net *n = to_net(dev);
	const struct net_stats *s = &n->stats;

	return snprintf(
		buf, len,
		"rx frames %" PRIu64 " bytes %" PRIu64 " dropped %" PRIu64
		" bad-buffers %" PRIu64 " frames-held %" PRIu64
		" held %u%s%s%s%s%s; tx frames %" PRIu64 " bytes %" PRIu64
		" dropped %" PRIu64 " tap-errors %" PRIu64
		" budget-stops %" PRIu64 "; in flight %u",
		s->rx_frames, s->rx_bytes, s->rx_dropped, s->rx_bad, s->rx_held,
		n->nr_held, n->rx_waiting ? " waiting-for-buffers" : "",
		n->rx_frame_len ? " holding-a-frame" : "",
		n->rx_reading ? " reading" : "",
		n->rx_polling ? " polling" : "", n->tap_dead ? " tap-dead" : "",
		s->tx_frames, s->tx_bytes, s->tx_dropped, s->tx_errors,
		s->tx_budget_stops, n->busy);
}

/*
 * Pause: writes to the tap and reads that found a frame complete first.
 * A read parked on an empty tap (see net_reset) is not waited for: it
 * may never end. A frame that comes while paused still lands in buffers
 * the guest gave before, as if it came just before the pause. A
 * snapshot takes that read back (net_save).
 */
static int net_quiesce(struct virtio_device *dev,
		       const struct timespec *deadline)
{
	struct virtio_net *n = to_net(dev);

	while (n->busy > (n->rx_reading ? 1U : 0U))
		if (pthread_cond_timedwait(&n->idle, &dev->lock, deadline) ==
		    ETIMEDOUT)
			return n->busy > (n->rx_reading ? 1U : 0U) ?
				       -ETIMEDOUT :
				       0;
	return 0;
}

/*
 * The parked read, if any, taken back (cancelled) and waited for, with
 * the device lock held (the condition variable releases it). A read
 * that found a frame first completes as usual: the frame is delivered.
 * 0, or -ETIMEDOUT after NET_SAVE_TIMEOUT_MS.
 */
static int take_back_read(struct virtio_net *n)
{
	unsigned int tries = NET_SAVE_TIMEOUT_MS / RESET_RETRY_MS;
	struct timespec until;

	while (n->busy) {
		if (!tries--)
			return -ETIMEDOUT;
		if (n->rx_reading)
			evloop__cancel(&n->loop, &n->read_src);
		timespec__deadline_in(&until, CLOCK_REALTIME, RESET_RETRY_MS);
		pthread_cond_timedwait(&n->idle, &n->vdev.lock, &until);
	}
	return 0;
}

/*
 * A snapshot (paused; net_quiesce let the writes finish): nothing may
 * write guest memory once the state is taken, so the parked read goes
 * first; the round after the resume reads again. The receive buffers
 * the device holds (popped, not used) are the last ones taken from the
 * ring: saved by head, in order, and a restore gives them back to the
 * ring. A frame waiting in them for more buffers is not saved: a VM
 * restored from the snapshot never gets it (a link may lose a frame),
 * this one still does. The tap is the host's and is not saved; the MAC
 * is, for the record (a restored VM has its own, net/netcfg.h).
 */
static int net_save(struct virtio_device *dev, json_t *obj, char *err,
		    size_t len)
{
	struct virtio_net *n = to_net(dev);
	uint16_t heads[RX_HELD_MAX];
	char mac[3 * VIRTIO_NET_MAC_LEN];
	json_t *held;
	int ret;

	if (take_back_read(n)) {
		snprintf(err, len,
			 "%s: a read of the tap did not end within %u ms",
			 dev->name, NET_SAVE_TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	for (unsigned int i = 0; i < n->nr_held; i++)
		heads[i] = virtio_net__held_head(n, i);
	if (n->nr_held &&
	    !virtqueue__popped_last(&n->vqs[RXQ].vq, heads, n->nr_held)) {
		/* Only a driver that posted a bad buffer after good ones. */
		snprintf(err, len,
			 "%s: the %u receive buffers held are not the last "
			 "ones taken from the ring (a refused one came after "
			 "them)",
			 dev->name, n->nr_held);
		return -EBUSY;
	}
	held = json_array();
	if (!held)
		return -ENOMEM;
	for (unsigned int i = 0; i < n->nr_held; i++)
		if (json_array_append_new(held, json_integer(heads[i]))) {
			json_decref(held);
			return -ENOMEM;
		}
	snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x",
		 n->config.mac[0], n->config.mac[1], n->config.mac[2],
		 n->config.mac[3], n->config.mac[4], n->config.mac[5]);
	ret = json_object_set_new(obj, "rxHeld", held);
	ret |= json_object_set_new(obj, "mac", json_string(mac));
	return ret ? -ENOMEM : 0;
}

/*
 * A restored device (net_save's counterpart) on this VM's own tap: the
 * held receive buffers go back to the ring, and the tap is told what
 * offloads the snapshot's driver accepted, as at its DRIVER_OK. The
 * config space keeps this device's MAC: the guest's driver read the
 * snapshot's at probe, and its agent takes the new one with the reseed
 * (proto/agent.h, KILN_MSG_RESEED).
 */
static int net_restore(struct virtio_device *dev, const json_t *obj, char *err,
		       size_t len)
{
	struct virtio_net *n = to_net(dev);
	const json_t *held = json_object_get(obj, "rxHeld");
	uint16_t heads[RX_HELD_MAX];
	size_t nr, i;

	if (!json_is_array(held) || json_array_size(held) > RX_HELD_MAX) {
		snprintf(err, len,
			 "%s: rxHeld is not an array of at most %u heads",
			 dev->name, RX_HELD_MAX);
		return -EINVAL;
	}
	nr = json_array_size(held);
	for (i = 0; i < nr; i++) {
		const json_t *h = json_array_get(held, i);

		if (!json_is_integer(h) || json_integer_value(h) < 0 ||
		    json_integer_value(h) > UINT16_MAX) {
			snprintf(err, len, "%s: rxHeld[%zu] is not a head",
				 dev->name, i);
			return -EINVAL;
		}
		heads[i] = (uint16_t)json_integer_value(h);
	}
	if (nr && virtqueue__unpop(&n->vqs[RXQ].vq, heads, (unsigned int)nr)) {
		snprintf(err, len,
			 "%s: the %zu held receive buffers are not the last "
			 "ones the ring says were taken",
			 dev->name, nr);
		return -EINVAL;
	}
	if ((virtio_device__status(dev) & VIRTIO_CONFIG_S_DRIVER_OK) &&
	    ioctl(n->tap_fd, TUNSETOFFLOAD, guest_offloads(dev)) < 0) {
		int e = errno;

		snprintf(err, len, "%s: the tap's offloads: %s", dev->name,
			 strerror(e));
		return -e;
	}
	n->tx_pending = true;
	return 0;
}

void virtio_net__stats(const struct virtio_net *n, struct net_stats *s)
{
	const struct net_stats *c = &n->stats;

	s->rx_frames = counter__get(&c->rx_frames);
	s->rx_bytes = counter__get(&c->rx_bytes);
	s->rx_dropped = counter__get(&c->rx_dropped);
	s->rx_held = counter__get(&c->rx_held);
	s->rx_bad = counter__get(&c->rx_bad);
	s->tx_frames = counter__get(&c->tx_frames);
	s->tx_bytes = counter__get(&c->tx_bytes);
	s->tx_dropped = counter__get(&c->tx_dropped);
	s->tx_errors = counter__get(&c->tx_errors);
	s->tx_budget_stops = counter__get(&c->tx_budget_stops);
}

static const struct virtio_device_ops net_ops = {
	.activate = net_activate,
	.config_read = net_config_read,
	.describe = net_describe,
	.queue_notify = virtio_device__kick_eventfd,
	.reset = net_reset,
	.quiesce = net_quiesce,
	.save = net_save,
	.restore = net_restore,
};

/* ---- setup and tear-down ------------------------------------------------- */

static uint64_t net_features(unsigned int tap_offloads)
{
	uint64_t f = FEAT(VIRTIO_F_VERSION_1) | FEAT(VIRTIO_RING_F_EVENT_IDX) |
		     FEAT(VIRTIO_RING_F_INDIRECT_DESC) |
		     FEAT(VIRTIO_NET_F_MAC) | FEAT(VIRTIO_NET_F_STATUS) |
		     FEAT(VIRTIO_NET_F_MRG_RXBUF);

	/* 5.1.3.1: TSO needs CSUM, ECN needs TSO; the tap has the same. */
	if (!(tap_offloads & TUN_F_CSUM))
		return f;
	f |= FEAT(VIRTIO_NET_F_CSUM) | FEAT(VIRTIO_NET_F_GUEST_CSUM);
	if (tap_offloads & TUN_F_TSO4)
		f |= FEAT(VIRTIO_NET_F_HOST_TSO4) |
		     FEAT(VIRTIO_NET_F_GUEST_TSO4);
	if (tap_offloads & TUN_F_TSO6)
		f |= FEAT(VIRTIO_NET_F_HOST_TSO6) |
		     FEAT(VIRTIO_NET_F_GUEST_TSO6);
	if ((tap_offloads & TUN_F_TSO_ECN) &&
	    (tap_offloads & (TUN_F_TSO4 | TUN_F_TSO6)))
		f |= FEAT(VIRTIO_NET_F_HOST_ECN) | FEAT(VIRTIO_NET_F_GUEST_ECN);
	return f;
}

static bool mac_ok(const uint8_t *mac)
{
	static const uint8_t zero[VIRTIO_NET_MAC_LEN];

	/* The I/G bit: a group address cannot be a station's. */
	return !(mac[0] & 1) && memcmp(mac, zero, sizeof(zero));
}

/*
 * Does the tap take RWF_NOWAIT (net-io.c)? A tun without FMODE_NOWAIT
 * (Linux 6.1, Debian 12's) refuses it with EOPNOTSUPP; there io_uring
 * parks a read of an empty tap instead of saying EAGAIN. An empty tap
 * says EAGAIN here; a frame queued before there is any guest is read
 * (too short a buffer: EINVAL) and dropped.
 */
static bool tap_takes_nowait(int fd)
{
	uint8_t byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = sizeof(byte) };

	return preadv2(fd, &iov, 1, -1, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP;
}

/*
 * fd is a tap the way we need it; made nonblocking (reads say EAGAIN,
 * not wait) and with its offloads off until a driver accepts some.
 */
static int tap_check(int fd)
{
	struct ifreq ifr = { 0 };
	int hdr_len = 0, fl;

	if (fd < 0)
		return -EBADF;
	if (ioctl(fd, TUNGETIFF, &ifr) < 0 ||
	    (ifr.ifr_flags & TAP_FLAGS) != TAP_FLAGS ||
	    ioctl(fd, TUNGETVNETHDRSZ, &hdr_len) < 0 || hdr_len != HDR_LEN)
		return -EINVAL;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	if (ioctl(fd, TUNSETOFFLOAD, 0) < 0)
		return -errno;
	return 0;
}

int virtio_net__create(struct virtio_net **out,
		       const struct virtio_net_params *p)
{
	static const uint8_t opcodes[] = { IORING_OP_READV, IORING_OP_WRITEV,
					   IORING_OP_POLL_ADD };
	/* Two kicks, the stop, a read or a poll, and every write. */
	const struct evloop_params lp = {
		.sq_entries = SQ_ENTRIES,
		.opcodes = opcodes,
		.nr_opcodes = ARRAY_SIZE(opcodes),
	};
	struct virtio_device_params vp;
	struct virtio_net *n;
	int ret;

	if (!mac_ok(p->mac) || (p->tap_offloads & ~TAP_OFFLOADS))
		return -EINVAL;
	ret = tap_check(p->tap_fd);
	if (ret)
		return ret;
	/* Its scratch buffers are backed only when used (resident.h). */
	n = resident__table(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->tap_fd = p->tap_fd;
	n->rw_flags = tap_takes_nowait(p->tap_fd) ? RWF_NOWAIT : 0;
	n->tap_offloads = p->tap_offloads;
	memcpy(n->config.mac, p->mac, sizeof(n->config.mac));
	n->config.status = htole16(VIRTIO_NET_S_LINK_UP);
	ret = -pthread_cond_init(&n->idle, NULL);
	if (ret)
		goto out_destroy;
	n->idle_ok = true;
	/* Touched only when used: lazily backed (resident__table). */
	n->held = resident__table(RX_HELD_MAX, sizeof(*n->held));
	n->slots = resident__table(TX_SLOTS, sizeof(*n->slots));
	n->rx_tail = resident__table(1, RX_FRAME_MAX);
	if (!n->held || !n->slots || !n->rx_tail) {
		ret = -ENOMEM;
		goto out_destroy;
	}
	virtio_net__init_slots(n);

	vp = (struct virtio_device_params){
		.name = p->name ? p->name : "virtio-net",
		.device_id = VIRTIO_ID_NET,
		.features = net_features(p->tap_offloads),
		/* mac and status: the rest needs features we do not offer */
		.config_size =
			offsetof(struct virtio_net_config, max_virtqueue_pairs),
		.ops = &net_ops,
		.queues = n->vqs,
		.nr_queues = NR_QUEUES,
		.queue_max_size = NET_QUEUE_SIZE,
		.mem = p->mem,
		.irq = p->irq,
	};
	ret = virtio_device__init(&n->vdev, &vp);
	if (ret)
		goto out_destroy;
	n->vdev_ok = true;
	evloop__init(&n->loop, n->vdev.name);
	n->rx_kick_src = (struct ev_source){ .fn = rx_kick_done, .arg = n };
	n->tx_kick_src = (struct ev_source){ .fn = tx_kick_done, .arg = n };
	n->poll_src =
		(struct ev_source){ .fn = virtio_net__poll_done, .arg = n };
	n->read_src =
		(struct ev_source){ .fn = virtio_net__read_done, .arg = n };
	ret = evloop__open(&n->loop, &lp);
	if (ret)
		goto out_destroy;
	evloop__set_tag_handler(&n->loop, TAG_TX, virtio_net__write_done, n);
	*out = n;
	return 0;

out_destroy:
	virtio_net__destroy(n);
	return ret;
}

struct virtio_device *virtio_net__device(struct virtio_net *n)
{
	return &n->vdev;
}

int virtio_net__start(struct virtio_net *n, const struct sock_fprog *filter)
{
	arm_kick(n, RXQ);
	arm_kick(n, TXQ);
	/* Kicks before the thread: the first round takes them. */
	n->tx_pending = true;
	return evloop__start(&n->loop, &net_loop_ops, n, filter);
}

void virtio_net__destroy(struct virtio_net *n)
{
	if (!n)
		return;
	/* Waits for I/O in flight: it may still write into guest memory. */
	if (n->vdev_ok)
		evloop__exit(&n->loop);
	if (n->vdev_ok)
		virtio_device__exit(&n->vdev);
	resident__free_table(n->rx_tail, 1, RX_FRAME_MAX);
	resident__free_table(n->slots, TX_SLOTS, sizeof(*n->slots));
	resident__free_table(n->held, RX_HELD_MAX, sizeof(*n->held));
	if (n->idle_ok)
		pthread_cond_destroy(&n->idle);
	resident__free_table(n, 1, sizeof(*n));
}
