/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_NET_INTERNAL_H
#define KILN_VIRTIO_NET_INTERNAL_H

/*
 * What the two halves of virtio-net share (net.c: the device, its loop
 * and setup; net-io.c: frames both ways). Everything here runs on the
 * device's loop, under the device lock, unless it says otherwise.
 */
#include <linux/if_ether.h>
#include <linux/virtio_net.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "devices/virtio/net.h"
#include "lib/counter.h"
#include "lib/evloop.h"
#include "lib/warn.h"

#define NET_QUEUE_SIZE 256U
#define RXQ	       0U /* device to driver */
#define TXQ	       1U /* driver to device */
#define NR_QUEUES      2U

/* Both ways, whatever MRG_RXBUF says: VERSION_1 fixes it at 12 bytes. */
#define HDR_LEN sizeof(struct virtio_net_hdr_v1)

#define VLAN_HLEN 4U /* one 802.1Q tag */
/*
 * The largest frame either way, header not counted: a 64 KiB GSO packet
 * (Linux's GSO_MAX_SIZE) behind an Ethernet header and a VLAN tag. Also
 * above the largest MTU a tap takes (ETH_MAX_MTU, 65535) plus its header.
 */
#define MAX_FRAME (65536U + ETH_HLEN + VLAN_HLEN)
/* What one read of the tap may bring: the header and such a frame. */
#define RX_FRAME_MAX (HDR_LEN + MAX_FRAME)

/*
 * Segments of one chain, either way: Linux sends and posts at most
 * MAX_SKB_FRAGS + 2 (19, or 47 with the largest CONFIG_MAX_SKB_FRAGS).
 */
#define SEG_MAX 64U
/* Receive buffers popped and waiting for a frame (MRG_RXBUF). */
#define RX_HELD_MAX 64U
/* Segments of one read of the tap: IOV_MAX, what readv takes. */
#define RX_IOV_MAX 1024U
/* Chains looked at per refill, bad ones included: one ring's worth. */
#define RX_POP_BUDGET NET_QUEUE_SIZE
/* A reset waiting for a parked read: how often it cancels it again. */
#define RESET_RETRY_MS 10U
/* Writes to the tap in flight: one round's worth. */
#define TX_SLOTS VIRTIO_NET_TX_BUDGET
/* Submissions per round: every write, the read, poll and re-arms. */
#define SQ_ENTRIES 128U

/* A write's user_data: a struct tx_slot pointer and this. */
#define TAG_TX 0x1UL

#define FEAT(bit) (1ULL << (bit))

/* A receive buffer popped from the rx queue, not yet filled. */
struct rx_buf {
	uint16_t head;
	uint32_t len; /* writable bytes, at least HDR_LEN */
	unsigned int nr_iov;
	struct iovec iov[SEG_MAX];
};

/* One frame from the guest, on its way to the tap. */
struct tx_slot {
	struct tx_slot *next_free;
	uint16_t head;
	uint32_t gen; /* the device's at pop time */
	uint32_t len; /* bytes written: the header and the frame */
	struct virtio_net_hdr_v1 hdr; /* the guest's, copied and checked */
	unsigned int nr_iov;
	struct iovec iov[1 + SEG_MAX]; /* hdr, then the frame in guest RAM */
};

struct virtio_net {
	struct virtio_device vdev;
	struct virtio_queue vqs[NR_QUEUES];
	struct virtio_net_config config;
	int tap_fd;
	unsigned int tap_offloads; /* TUN_F_* the tap accepts */
	bool vdev_ok;
	bool idle_ok;
	uint32_t gen;	     /* bumped by a reset, under the device lock */
	unsigned int busy;   /* reads and writes in flight (guest memory) */
	pthread_cond_t idle; /* busy fell to 0, with the device lock */

	struct evloop loop;
	struct ev_source rx_kick_src, tx_kick_src, poll_src, read_src;
	uint64_t kick_buf[NR_QUEUES];

	/* The rest: the loop's, under the device lock. */
	bool warned;	  /* one message about the guest, for its life */
	bool host_warned; /* one about the tap */
	bool more;	  /* work left: poll the ring, do not wait */

	/* RWF_NOWAIT where the tap takes it, else 0 (net.c: tap_takes_nowait) */
	int rw_flags;

	/* Receive. */
	bool rx_reading;	 /* a read of the tap in flight */
	bool rx_polling;	 /* a poll of the tap in flight */
	bool rx_waiting;	 /* too few buffers: the tap is left alone */
	bool tap_dead;		 /* reading failed for good: receive stopped */
	bool rx_pushed;		 /* filled, not yet flushed */
	uint32_t rx_gen;	 /* the device's when the read went out */
	uint64_t rx_cap;	 /* bytes the read may fill, header included */
	unsigned int rx_nr_read; /* held buffers it (and the frame) covers */
	/*
	 * A frame read but larger than the buffers it was read into: its
	 * start is in the first rx_nr_read held buffers (rx_placed bytes,
	 * header included), the rest in rx_tail from frame byte rx_cap on.
	 * It waits there for more buffers; nothing else is read meanwhile.
	 */
	uint64_t rx_frame_len; /* 0: none waiting */
	uint64_t rx_placed;
	struct virtio_net_hdr_v1 rx_hdr; /* the tap writes it here */
	struct rx_buf *held;		 /* RX_HELD_MAX, a ring */
	unsigned int held_head, nr_held;
	uint64_t held_bytes;
	struct iovec rx_iov[RX_IOV_MAX];
	uint8_t *rx_tail; /* RX_FRAME_MAX: what the buffers did not take */

	/* Transmit. */
	bool tx_pending;	    /* kicked, or stopped early: pop again */
	bool tx_pushed;		    /* filled, not yet flushed */
	struct tx_slot *slots;	    /* TX_SLOTS */
	struct tx_slot *free_slots; /* freed after use */
	unsigned int fresh_slots;   /* slots[fresh_slots..] never touched */
	struct vq_chain chain;	    /* pop scratch, both queues */

	struct net_stats stats;
};

/* The guest broke a rule: said once for the device's whole life. */
#define net_warn(n, ...)                         \
	warn__once(&(n)->warned, (n)->vdev.name, \
		   "; dropped (further errors not logged)", __VA_ARGS__)

/* The tap failed us: said once too. */
#define net_host_warn(n, ...)                         \
	warn__once(&(n)->host_warned, (n)->vdev.name, \
		   " (further tap errors not logged)", __VA_ARGS__)

/* net-io.c */
/* Once per round, after the completions: move what can move. */
void virtio_net__rx_pump(struct virtio_net *n);
void virtio_net__tx_pump(struct virtio_net *n);
/*
 * At the end of a round: publish what was returned in it and decide on
 * one interrupt per queue.
 */
void virtio_net__flush(struct virtio_net *n);
/* Completions: the read and poll of the tap, a write (TAG_TX). */
void virtio_net__read_done(void *arg, int res);
void virtio_net__poll_done(void *arg, int res);
void virtio_net__write_done(void *arg, void *ptr, int res);
/* The head of held receive buffer i (0: the oldest), for a snapshot. */
uint16_t virtio_net__held_head(struct virtio_net *n, unsigned int i);
/* A reset, nothing in flight: forget the held receive buffers. */
void virtio_net__drop_buffers(struct virtio_net *n);
/* At create: every slot free. */
void virtio_net__init_slots(struct virtio_net *n);
/* A TX slot free: one freed after use, or one never used. */
bool virtio_net__slot_available(const struct virtio_net *n);

#endif
