/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_NET_H
#define KILN_VIRTIO_NET_H

#include <stdint.h>

#include "devices/irq.h"
#include "devices/virtio/device.h"
#include "devices/virtio/guest-mem.h"
#include "lib/compiler.h"
#include "lib/log.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * virtio-net (virtio 1.1, section 5.1) on a tap device: one receive queue
 * (0) and one transmit queue (1), no control queue. Frames go between
 * the guest's buffers and the tap with the 12-byte virtio_net_hdr_v1 in
 * front, which the tap (IFF_VNET_HDR, TUNSETVNETHDRSZ 12) reads and
 * writes as it is: checksum and segmentation offloads pass straight
 * through. The device never opens a tap: its creator hands one in
 * (net/tap.h makes one) together with the offloads the tap accepts, and
 * closes it after the device is gone.
 *
 * Offered: VERSION_1, EVENT_IDX, INDIRECT_DESC, MAC, STATUS (the link is
 * always up), MRG_RXBUF; and when the tap accepts TUN_F_CSUM, CSUM and
 * GUEST_CSUM, with TUN_F_TSO4/TSO6 HOST_ and GUEST_TSO4/TSO6, with
 * TUN_F_TSO_ECN HOST_ and GUEST_ECN. At DRIVER_OK the tap is told
 * (TUNSETOFFLOAD) what the driver accepted for the frames it receives.
 *
 * One event loop thread per device (io_uring) does all the I/O, bounded
 * both ways: at most VIRTIO_NET_TX_BUDGET frames from the guest per round
 * of the loop and one read of the tap in flight, and the tap is read only
 * while the guest has receive buffers posted (without them the kernel's
 * tap queue fills and drops, as a link would). A chain that breaks the
 * rules is returned unused, counted and logged once for the device.
 */

#define VIRTIO_NET_MAC_LEN   6U	 /* ETH_ALEN */
#define VIRTIO_NET_TX_BUDGET 64U /* guest frames per round of the loop */

struct virtio_net_params {
	const char *name; /* "virtio-net0"; outlives the device */
	/*
	 * Borrowed, outlives the device: a tap (IFF_TAP | IFF_NO_PI |
	 * IFF_VNET_HDR) with a 12-byte vnet header. Create makes it
	 * nonblocking and turns its offloads off until a driver accepts
	 * some.
	 */
	int tap_fd;
	unsigned int tap_offloads;	 /* TUN_F_* the tap accepts */
	uint8_t mac[VIRTIO_NET_MAC_LEN]; /* the guest's: unicast, nonzero */
	const struct guest_mem *mem;
	struct irq_line irq;
};

struct virtio_net;

/*
 * Frames each way, for the SIGUSR2 report and vm.metrics: counted by the
 * device's loop (lib/counter.h), monotonic.
 */
struct net_stats {
	uint64_t rx_frames, rx_bytes; /* delivered to the guest */
	uint64_t rx_dropped;	      /* read from the tap, not deliverable */
	uint64_t rx_held;	      /* frames that waited for buffers */
	uint64_t rx_bad;	      /* receive buffers returned unused */
	uint64_t tx_frames, tx_bytes; /* taken by the tap */
	uint64_t tx_dropped;	  /* chains refused: the guest broke a rule */
	uint64_t tx_errors;	  /* frames the tap refused */
	uint64_t tx_budget_stops; /* rounds cut short by the budget */
};

/* A copy of the counters, from any thread. */
void virtio_net__stats(const struct virtio_net *n, struct net_stats *s);

/*
 * Sets the device up; its queues' kick_fd are eventfds, ready to bind.
 * -EBADF for no fd, -EINVAL for an fd that is not such a tap, a multicast
 * or zero MAC, or offloads that are not TUN_F_CSUM/TSO4/TSO6/TSO_ECN;
 * -EOPNOTSUPP for a tap that cannot do nonblocking I/O per request
 * (RWF_NOWAIT).
 */
int __must_check virtio_net__create(struct virtio_net **out,
				    const struct virtio_net_params *p);
struct virtio_device *virtio_net__device(struct virtio_net *n);
/*
 * Starts the event loop thread. Call it once the thread may run: it
 * inherits the caller's seccomp filter.
 */
int __must_check virtio_net__start(struct virtio_net *n,
				   const struct sock_fprog *filter);
/* Stops and joins the thread (I/O in flight completes first); NULL ok. */
void virtio_net__destroy(struct virtio_net *n);

#endif
