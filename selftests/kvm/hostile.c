// SPDX-License-Identifier: GPL-2.0
/*
 * hostile - real Kiln devices against a hostile guest driver in a real KVM
 * VM (issue 15, deliverable 6).
 *
 * Each test builds a kvm_util VM (kvm_util.h) and wires a real device into
 * it the way vmm/virtio-attach.c does: the device's virtio-mmio register
 * window on an MMIO bus (vmm/bus.h) that the vCPU loop below feeds with
 * KVM_EXIT_MMIO exits, every queue's kick_fd bound as a KVM ioeventfd on
 * QueueNotify (datamatch: the queue index), and guest RAM handed to the
 * device as its struct guest_mem. The device runs its own event loop
 * thread, concurrently with the vCPU, as in the vmm. The VM has no
 * irqchip: the guest runs with interrupts off and polls its rings, and the
 * device's interrupt line is a stub that counts raises.
 *
 * The guest is freestanding code of this binary acting as a hostile
 * driver: it scribbles over its rings while the device works, builds
 * descriptor loops and a 100000-hop chain, points descriptors outside
 * guest RAM or across its end, floods QueueNotify, and for vsock floods
 * credit updates, data for unknown connections and a packet of length
 * 0xffffffff. After each abuse the guest resets the device (it may have
 * set DEVICE_NEEDS_RESET, as virtio 1.1 2.1.1 allows) and a well-formed
 * request must complete correctly. The host checks that its resident
 * memory stayed bounded (VmRSS, generous), that a canary area of guest
 * RAM no request pointed at is intact (guest RAM itself lies between
 * PROT_NONE guard areas, so a device stepping out of it faults), and,
 * with a second VM and device in the same process, that another VM is
 * served normally while the first is abused.
 *
 * No timing assertions: guest waits are bounded spin counts far above
 * what a working device needs, and each test has a generous timeout.
 * Without /dev/kvm every test skips.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ids.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <linux/virtio_vsock.h>

#include "devices/block/disk.h"
#include "devices/virtio/blk.h"
#include "devices/virtio/device.h"
#include "devices/virtio/guest-mem.h"
#include "devices/virtio/mmio.h"
#include "devices/virtio/vsock.h"
#include "vmm/bus.h"
#include "selftests/kselftest.h"
#include "selftests/kvm/kvm_util.h"
#include "selftests/kvm/test_tmp.h"

/* ---- shared by guest and host: the guest's physical layout --------- */

/*
 * The device's register window: inside the 1 GiB the guest maps, above
 * its RAM, so every access is an MMIO exit (or an ioeventfd).
 */
#define MMIO_GPA 0x30000000ULL

#define QSIZE	 128U /* every queue the guest sets up */
#define NR_RINGS 3U   /* vsock's rx, tx and event queues; blk uses one */

#define LAYOUT_GPA	 GUEST_HEAP_GPA
#define RING_GPA(q)	 (LAYOUT_GPA + (uint64_t)(q)*0x4000)
#define DESC_GPA(q)	 RING_GPA(q)
#define AVAIL_GPA(q)	 (RING_GPA(q) + 0x1000)
#define USED_GPA(q)	 (RING_GPA(q) + 0x2000)
#define RINGS_SIZE	 (NR_RINGS * 0x4000ULL)
#define SLOT_GPA	 (LAYOUT_GPA + 0x10000) /* request headers */
#define SLOT_SIZE	 32ULL			/* header, status at +16 */
#define SLOT_STATUS	 16
#define DATA_GPA	 (LAYOUT_GPA + 0x100000) /* data buffers */
#define DATA_SIZE	 0x100000ULL
#define JUNK_GPA	 (LAYOUT_GPA + 0x200000) /* where scribbles point */
#define JUNK_SIZE	 0x100000ULL
#define JUNK_LEN_MAX	 0x1000U /* a scribbled length into the junk */
#define TABLE_GPA	 (LAYOUT_GPA + 0x400000) /* the long indirect chain */
#define CANARY_GPA	 (LAYOUT_GPA + 0x800000) /* nothing points here */
#define CANARY_SIZE	 0x400000ULL
#define LAYOUT_SIZE	 0xc00000ULL
#define CANARY_BYTE(off) ((uint8_t)(0x5a ^ ((off) >> 12) ^ (off)))

#define CHAIN_HOPS 100000U /* descriptors in the long indirect chain */
_Static_assert(TABLE_GPA + CHAIN_HOPS * 16ULL <= CANARY_GPA,
	       "the long chain fits before the canary");
_Static_assert(LAYOUT_GPA + LAYOUT_SIZE <= GUEST_HEAP_END,
	       "the layout fits the guest heap");

/* What the guest reports (GUEST_SYNC2(step, value)). */
enum step {
	STEP_BROKE = 1, /* value: how the device answered one abuse */
	STEP_RECOVERED, /* value: 0, or what failed after the reset */
	STEP_ROUNDS,	/* value: abuse rounds done */
	STEP_SERVED,	/* value: well-formed requests served (other VM) */
	STEP_CONNECTED, /* value: the op that answered a vsock REQUEST */
};

/* How the device answered an abuse (STEP_BROKE). */
enum answer {
	ANSWER_NONE = 0,	/* nothing within the spin bound */
	ANSWER_USED = 1,	/* it gave the chain back */
	ANSWER_NEEDS_RESET = 2, /* it set DEVICE_NEEDS_RESET */
};

/* Recovery failures (STEP_RECOVERED): 0 is success. */
enum recover_err {
	RECOVER_OK = 0,
	RECOVER_NO_FEATURES_OK,
	RECOVER_NOT_LIVE,
	RECOVER_WRITE_STUCK,
	RECOVER_WRITE_STATUS,
	RECOVER_READ_STUCK,
	RECOVER_READ_STATUS,
	RECOVER_READ_DATA,
	RECOVER_NO_RESPONSE,
};

/*
 * Guest spin bound while waiting for the device: far above what any
 * working device needs (it answers in microseconds), low enough that a
 * dead one is reported by the guest before the test's timeout.
 */
#define GUEST_SPIN_MAX	  (1ULL << 30)
#define GUEST_STATUS_POLL 4096U /* spins between STATUS register reads */

#define BLK_NR_BLOCKS 64U
#define BLK_DISK_SIZE ((uint64_t)BLK_NR_BLOCKS * DISK_BLOCK_SIZE)
#define BLK_SPB	      (DISK_BLOCK_SIZE / 512) /* sectors per block */
/* What a scribbled chain into the junk can make the device write. */
_Static_assert(JUNK_GPA + JUNK_SIZE + BLK_DISK_SIZE <= TABLE_GPA,
	       "device writes through the junk stay below the table");

#define SCRIBBLE_ROUNDS	 16U
#define SCRIBBLES	 4096U	 /* per round, each followed by a kick */
#define NOTIFY_FLOOD	 100000U /* QueueNotify writes, bound as ioeventfd */
#define NOTIFY_FLOOD_BAD 40000U	 /* of bad indices, through user space */
#define OTHER_VM_REQS	 200U

#define VS_GUEST_CID	 3U
#define VS_LISTEN_PORT	 5000U /* the host listens on "<uds>_5000" */
#define VS_NR_RX	 32U   /* receive buffers: two descriptors each */
#define VS_RX_DATA	 4096U
#define VS_RX_GPA(b)	 (DATA_GPA + (uint64_t)(b)*0x2000)
#define VS_TX_SLOTS	 32U /* packets in flight: two descriptors each */
#define VS_TXHDR_GPA(p)	 (SLOT_GPA + (uint64_t)(p)*64)
#define VS_TXDATA_GPA(p) (DATA_GPA + 0x80000 + (uint64_t)(p)*0x1000)
#define VS_FLOOD	 20000U /* packets per kind of flood */
#define VS_RXQ		 0U
#define VS_TXQ		 1U
#define VS_EVQ		 2U
#define VS_HDR		 ((uint32_t)sizeof(struct virtio_vsock_hdr))
#define VS_PING		 0x676e6970U /* "ping", the liveness payload */
_Static_assert(VS_RX_GPA(VS_NR_RX) <= VS_TXDATA_GPA(0), "rx before tx");
_Static_assert(VS_TXDATA_GPA(VS_TX_SLOTS) <= DATA_GPA + DATA_SIZE, "tx");

#define FEAT(bit) (1ULL << (bit))

#define ST_ACK	     VIRTIO_CONFIG_S_ACKNOWLEDGE
#define ST_DRIVER    VIRTIO_CONFIG_S_DRIVER
#define ST_FEATURES  VIRTIO_CONFIG_S_FEATURES_OK
#define ST_DRIVER_OK VIRTIO_CONFIG_S_DRIVER_OK
#define ST_NEEDS_RST VIRTIO_CONFIG_S_NEEDS_RESET
#define ST_LIVE	     (ST_ACK | ST_DRIVER | ST_FEATURES | ST_DRIVER_OK)

/* ---- guest side: a freestanding virtio-mmio driver ------------------ */

/* The driver's view of one split queue. */
struct gq {
	unsigned int index;
	uint16_t avail_idx; /* next avail->idx */
	uint16_t last_used; /* used entries consumed */
	volatile struct vring_desc *desc;
	volatile struct vring_avail *avail;
	volatile struct vring_used *used;
};

static inline __attribute__((always_inline)) void gw32(uint64_t off, uint32_t v)
{
	*(volatile uint32_t *)(MMIO_GPA + off) = v;
}

static inline __attribute__((always_inline)) uint32_t gr32(uint64_t off)
{
	return *(volatile uint32_t *)(MMIO_GPA + off);
}

static inline __attribute__((always_inline)) void gbarrier(void)
{
	/* Orders ring stores against the device on another CPU. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static inline __attribute__((always_inline)) void gpause(void)
{
	asm volatile("pause" : : : "memory");
}

/* xorshift64: the guest's own random numbers, from a host seed. */
static uint64_t __guest_code grand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

/* Byte off of a data pattern: every 8-byte word differs per seed. */
static inline __attribute__((always_inline)) uint8_t pat(uint64_t off,
							 uint64_t seed)
{
	uint64_t w = ((off >> 3) + 1) * 0x9e3779b97f4a7c15ULL;

	w ^= seed * 0xbf58476d1ce4e5b9ULL;
	return (uint8_t)(w >> ((off & 7) * 8));
}

static void __guest_code gzero(uint64_t gpa, uint64_t len)
{
	volatile uint64_t *p = (volatile uint64_t *)gpa;
	uint64_t i;

	for (i = 0; i < len / 8; i++)
		p[i] = 0;
}

static void __guest_code gq_init(struct gq *q, unsigned int index)
{
	q->index = index;
	q->avail_idx = 0;
	q->last_used = 0;
	q->desc = (volatile struct vring_desc *)DESC_GPA(index);
	q->avail = (volatile struct vring_avail *)AVAIL_GPA(index);
	q->used = (volatile struct vring_used *)USED_GPA(index);
	gzero(RING_GPA(index), 0x4000);
	gw32(VIRTIO_MMIO_QUEUE_SEL, index);
	gw32(VIRTIO_MMIO_QUEUE_NUM, QSIZE);
	gw32(VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)DESC_GPA(index));
	gw32(VIRTIO_MMIO_QUEUE_DESC_HIGH, 0);
	gw32(VIRTIO_MMIO_QUEUE_AVAIL_LOW, (uint32_t)AVAIL_GPA(index));
	gw32(VIRTIO_MMIO_QUEUE_AVAIL_HIGH, 0);
	gw32(VIRTIO_MMIO_QUEUE_USED_LOW, (uint32_t)USED_GPA(index));
	gw32(VIRTIO_MMIO_QUEUE_USED_HIGH, 0);
	gw32(VIRTIO_MMIO_QUEUE_READY, 1);
}

/*
 * Reset, negotiate want (of what the device offers) and set up nr_queues
 * queues in qs; returns the status read back, ST_LIVE when all went well.
 */
static uint32_t __guest_code gdev_up(struct gq *qs, unsigned int nr_queues,
				     uint64_t want)
{
	uint64_t offered;
	uint32_t st;
	unsigned int i;

	gw32(VIRTIO_MMIO_STATUS, 0);
	gw32(VIRTIO_MMIO_STATUS, ST_ACK);
	gw32(VIRTIO_MMIO_STATUS, ST_ACK | ST_DRIVER);
	gw32(VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	offered = (uint64_t)gr32(VIRTIO_MMIO_DEVICE_FEATURES) << 32;
	gw32(VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	offered |= gr32(VIRTIO_MMIO_DEVICE_FEATURES);
	want &= offered;
	gw32(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	gw32(VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)(want >> 32));
	gw32(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	gw32(VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)want);
	gw32(VIRTIO_MMIO_STATUS, ST_ACK | ST_DRIVER | ST_FEATURES);
	st = gr32(VIRTIO_MMIO_STATUS);
	if (!(st & ST_FEATURES))
		return st;
	for (i = 0; i < nr_queues; i++)
		gq_init(&qs[i], i);
	gw32(VIRTIO_MMIO_STATUS, ST_LIVE);
	return gr32(VIRTIO_MMIO_STATUS);
}

static void __guest_code gq_put_desc(struct gq *q, uint16_t i, uint64_t addr,
				     uint32_t len, uint16_t flags,
				     uint16_t next)
{
	q->desc[i].addr = addr;
	q->desc[i].len = len;
	q->desc[i].flags = flags;
	q->desc[i].next = next;
}

static void __guest_code gq_publish(struct gq *q, uint16_t head)
{
	q->avail->ring[q->avail_idx % QSIZE] = head;
	gbarrier(); /* the entry before the index */
	q->avail_idx++;
	q->avail->idx = q->avail_idx;
	gbarrier();
}

static void __guest_code gq_kick(struct gq *q)
{
	gw32(VIRTIO_MMIO_QUEUE_NOTIFY, q->index);
}

/*
 * Wait until the device has used want entries in all (used->idx), or set
 * NEEDS_RESET, within GUEST_SPIN_MAX spins.
 */
static enum answer __guest_code gq_wait(struct gq *q, uint16_t want)
{
	uint64_t i;

	for (i = 0; i < GUEST_SPIN_MAX; i++) {
		if ((uint16_t)(q->used->idx - want) < 0x8000)
			return ANSWER_USED;
		if (i % GUEST_STATUS_POLL == 0 &&
		    (gr32(VIRTIO_MMIO_STATUS) & ST_NEEDS_RST))
			return ANSWER_NEEDS_RESET;
		gpause();
	}
	return ANSWER_NONE;
}

/* ---- guest side: virtio-blk requests ------------------------------- */

/*
 * A three-descriptor request in slot s (descriptors 3s..3s+2): header,
 * len bytes of data at data, status byte; not yet published.
 */
static void __guest_code blk_build(struct gq *q, unsigned int s, uint32_t type,
				   uint64_t block, uint64_t data, uint32_t len)
{
	volatile struct virtio_blk_outhdr *h =
		(volatile struct virtio_blk_outhdr *)(SLOT_GPA + s * SLOT_SIZE);
	volatile uint8_t *status =
		(volatile uint8_t *)(SLOT_GPA + s * SLOT_SIZE + SLOT_STATUS);
	uint16_t d = (uint16_t)(3 * s);

	h->type = type;
	h->ioprio = 0;
	h->sector = block * BLK_SPB;
	*status = 0xff;
	gq_put_desc(q, d, (uint64_t)(uintptr_t)h, sizeof(*h), VRING_DESC_F_NEXT,
		    d + 1);
	gq_put_desc(q, d + 1, data, len,
		    VRING_DESC_F_NEXT |
			    (type == VIRTIO_BLK_T_IN ? VRING_DESC_F_WRITE : 0),
		    d + 2);
	gq_put_desc(q, d + 2, (uint64_t)(uintptr_t)status, 1,
		    VRING_DESC_F_WRITE, 0);
}

/* The same, published (not kicked). */
static void __guest_code blk_post(struct gq *q, unsigned int s, uint32_t type,
				  uint64_t block, uint64_t data, uint32_t len)
{
	blk_build(q, s, type, block, data, len);
	gq_publish(q, (uint16_t)(3 * s));
}

static uint8_t __guest_code blk_status(unsigned int s)
{
	return *(volatile uint8_t *)(SLOT_GPA + s * SLOT_SIZE + SLOT_STATUS);
}

/*
 * The device serves again: bring it up, write block with a pattern of
 * seed, read it back elsewhere and compare. RECOVER_OK or what failed.
 */
static enum recover_err __guest_code blk_roundtrip(struct gq *q, uint64_t block,
						   uint64_t seed)
{
	volatile uint8_t *out = (volatile uint8_t *)DATA_GPA;
	volatile uint8_t *in = (volatile uint8_t *)(DATA_GPA + DISK_BLOCK_SIZE);
	uint32_t st;
	uint64_t i;

	st = gdev_up(q, 1,
		     FEAT(VIRTIO_F_VERSION_1) |
			     FEAT(VIRTIO_RING_F_INDIRECT_DESC));
	if (!(st & ST_FEATURES))
		return RECOVER_NO_FEATURES_OK;
	if (st != ST_LIVE)
		return RECOVER_NOT_LIVE;
	for (i = 0; i < DISK_BLOCK_SIZE; i++) {
		out[i] = pat(block * DISK_BLOCK_SIZE + i, seed);
		in[i] = 0;
	}
	blk_post(q, 0, VIRTIO_BLK_T_OUT, block, DATA_GPA, DISK_BLOCK_SIZE);
	gq_kick(q);
	if (gq_wait(q, 1) != ANSWER_USED)
		return RECOVER_WRITE_STUCK;
	if (blk_status(0) != VIRTIO_BLK_S_OK)
		return RECOVER_WRITE_STATUS;
	blk_post(q, 1, VIRTIO_BLK_T_IN, block, DATA_GPA + DISK_BLOCK_SIZE,
		 DISK_BLOCK_SIZE);
	gq_kick(q);
	if (gq_wait(q, 2) != ANSWER_USED)
		return RECOVER_READ_STUCK;
	if (blk_status(1) != VIRTIO_BLK_S_OK)
		return RECOVER_READ_STATUS;
	for (i = 0; i < DISK_BLOCK_SIZE; i++)
		if (in[i] != pat(block * DISK_BLOCK_SIZE + i, seed))
			return RECOVER_READ_DATA;
	return RECOVER_OK;
}

/* Publishes head, kicks, reports how the device answered, resets. */
static void __guest_code blk_abuse(struct gq *q, uint16_t head)
{
	gq_publish(q, head);
	gq_kick(q);
	GUEST_SYNC2(STEP_BROKE, gq_wait(q, 1));
}

static void __guest_code blk_up(struct gq *q)
{
	GUEST_ASSERT_EQ(gdev_up(q, 1,
				FEAT(VIRTIO_F_VERSION_1) |
					FEAT(VIRTIO_RING_F_INDIRECT_DESC)),
			ST_LIVE);
}

/* (a) Scribbles over the rings while the device works on requests. */
static void __guest_code guest_blk_scribble(uint64_t seed)
{
	struct gq q;
	unsigned int round, i, s;
	uint64_t r, off, word;
	bool is_addr;

	for (round = 0; round < SCRIBBLE_ROUNDS; round++) {
		blk_up(&q);
		/* Real work in flight: reads of every other block. */
		for (s = 0; s < 16; s++)
			blk_post(&q, s, VIRTIO_BLK_T_IN,
				 (s * 2 + round) % BLK_NR_BLOCKS,
				 DATA_GPA + s * DISK_BLOCK_SIZE,
				 DISK_BLOCK_SIZE);
		gq_kick(&q);
		for (i = 0; i < SCRIBBLES; i++) {
			r = grand(&seed);
			/* Any 8-byte word of the three rings. */
			off = (r >> 8) % (0x3000 / 8) * 8;
			word = grand(&seed);
			/*
			 * A descriptor's address is either fully random
			 * (outside RAM but for a 2^-38 chance) or points
			 * into the junk, never at the guest's code, page
			 * tables, stack or the canary: the device may
			 * write there, and up to the disk's size at most.
			 */
			is_addr = off < 0x1000 && !(off & 8);
			switch (r & 3) {
			case 0:
				/* A plausible descriptor into the junk. */
				if (is_addr)
					word = JUNK_GPA + word % (JUNK_SIZE -
								  JUNK_LEN_MAX);
				else if (off < 0x1000)
					word = (word & ~0xffffffffULL) |
					       word % JUNK_LEN_MAX;
				break;
			case 1:
				/* Small heads, indices, lengths, nexts. */
				if (!is_addr)
					word &= 0x00ff00ff00ff00ffULL;
				break;
			default:
				break;
			}
			*(volatile uint64_t *)(RING_GPA(0) + off) = word;
			gq_kick(&q);
		}
		GUEST_SYNC2(STEP_ROUNDS, round + 1);
	}
	GUEST_SYNC2(STEP_RECOVERED, blk_roundtrip(&q, 3, seed | 1));
	GUEST_DONE();
}

/* (b) Descriptor loops and a chain of CHAIN_HOPS indirect hops. */
static void __guest_code guest_blk_loops(void)
{
	volatile struct vring_desc *t = (volatile struct vring_desc *)TABLE_GPA;
	struct gq q;
	uint32_t i;

	/* 0 -> 1 -> 0 -> ... */
	blk_up(&q);
	gq_put_desc(&q, 0, JUNK_GPA, 16, VRING_DESC_F_NEXT, 1);
	gq_put_desc(&q, 1, JUNK_GPA + 16, 16, VRING_DESC_F_NEXT, 0);
	blk_abuse(&q, 0);

	/* A writable descriptor that is its own next. */
	blk_up(&q);
	gq_put_desc(&q, 3, JUNK_GPA, 16, VRING_DESC_F_NEXT, 0);
	gq_put_desc(&q, 0, JUNK_GPA, 16, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT,
		    0);
	blk_abuse(&q, 3);

	/* Every descriptor of the ring, in a circle. */
	blk_up(&q);
	for (i = 0; i < QSIZE; i++)
		gq_put_desc(&q, i, JUNK_GPA + 64 * i, 16,
			    VRING_DESC_F_NEXT | (i ? VRING_DESC_F_WRITE : 0),
			    (i + 1) % QSIZE);
	blk_abuse(&q, 0);

	/* An indirect table of CHAIN_HOPS descriptors, each next the next. */
	blk_up(&q);
	for (i = 0; i < CHAIN_HOPS; i++) {
		t[i].addr = JUNK_GPA + (i % 256) * 16;
		t[i].len = 16;
		t[i].flags = i + 1 < CHAIN_HOPS ? VRING_DESC_F_NEXT : 0;
		t[i].next = (uint16_t)(i + 1);
	}
	gq_put_desc(&q, 5, TABLE_GPA, CHAIN_HOPS * 16, VRING_DESC_F_INDIRECT,
		    0);
	blk_abuse(&q, 5);

	/* The same table, but its last entry loops back to the first. */
	blk_up(&q);
	t[CHAIN_HOPS - 1].flags = VRING_DESC_F_NEXT;
	t[CHAIN_HOPS - 1].next = 0;
	gq_put_desc(&q, 5, TABLE_GPA, CHAIN_HOPS * 16, VRING_DESC_F_INDIRECT,
		    0);
	blk_abuse(&q, 5);

	/* An indirect table inside an indirect table, and a 4-entry loop. */
	blk_up(&q);
	for (i = 0; i < 4; i++) {
		t[i].addr = JUNK_GPA;
		t[i].len = 16;
		t[i].flags = VRING_DESC_F_NEXT;
		t[i].next = (uint16_t)((i + 1) % 4);
	}
	t[1].addr = TABLE_GPA;
	t[1].len = 4 * 16;
	t[1].flags = VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT;
	gq_put_desc(&q, 9, TABLE_GPA, 4 * 16, VRING_DESC_F_INDIRECT, 0);
	blk_abuse(&q, 9);

	/* A chain of every descriptor, each next the next, no loop. */
	blk_up(&q);
	for (i = 0; i < QSIZE; i++)
		gq_put_desc(&q, i, JUNK_GPA + 64 * i, 16,
			    i + 1 < QSIZE ? VRING_DESC_F_NEXT : 0,
			    (uint16_t)(i + 1));
	blk_abuse(&q, 0);

	GUEST_SYNC2(STEP_RECOVERED, blk_roundtrip(&q, 5, 77));
	GUEST_DONE();
}

/* (c) Buffers outside guest RAM, across its end, in the MMIO window. */
#define NR_BAD	 8U
#define NR_WHERE 5U /* read data, write data, status, header, table */

static void __guest_code guest_blk_out_of_range(void)
{
	uint64_t gpa[NR_BAD];
	uint32_t len[NR_BAD];
	unsigned int i, where, n = 0;
	uint16_t head;
	struct gq q;

	gpa[n] = GUEST_MEM_SIZE; /* just past the end */
	len[n++] = DISK_BLOCK_SIZE;
	gpa[n] = GUEST_MEM_SIZE - 2048; /* across the end */
	len[n++] = DISK_BLOCK_SIZE;
	gpa[n] = GUEST_MEM_SIZE - 1;
	len[n++] = 2;
	gpa[n] = 1ULL << 40;
	len[n++] = DISK_BLOCK_SIZE;
	gpa[n] = UINT64_MAX - 1000; /* wraps */
	len[n++] = DISK_BLOCK_SIZE;
	gpa[n] = MMIO_GPA; /* the device's own registers */
	len[n++] = DISK_BLOCK_SIZE;
	gpa[n] = DATA_GPA; /* inside, but 4 GiB long */
	len[n++] = 0xffffffff;
	gpa[n] = 0;
	len[n++] = 0xffffffff;

	for (i = 0; i < n; i++) {
		for (where = 0; where < NR_WHERE; where++) {
			blk_up(&q);
			blk_build(&q, 0,
				  where == 1 ? VIRTIO_BLK_T_OUT :
					       VIRTIO_BLK_T_IN,
				  1, DATA_GPA, DISK_BLOCK_SIZE);
			head = 0;
			switch (where) {
			case 0:
			case 1:
				q.desc[1].addr = gpa[i];
				q.desc[1].len = len[i];
				break;
			case 2:
				q.desc[2].addr = gpa[i];
				q.desc[2].len = len[i];
				break;
			case 3:
				q.desc[0].addr = gpa[i];
				q.desc[0].len = len[i];
				break;
			default:
				head = 7;
				gq_put_desc(&q, head, gpa[i], len[i] & ~15U,
					    VRING_DESC_F_INDIRECT, 0);
				break;
			}
			blk_abuse(&q, head);
		}
	}
	GUEST_SYNC2(STEP_RECOVERED, blk_roundtrip(&q, 2, 1234));
	GUEST_DONE();
}

/* Reads block into DATA slot s and checks it against the base image. */
static enum recover_err __guest_code blk_read_base(struct gq *q, unsigned int s,
						   uint64_t block)
{
	volatile uint8_t *in =
		(volatile uint8_t *)(DATA_GPA + s * DISK_BLOCK_SIZE);
	uint16_t want = q->avail_idx + 1;
	uint64_t i;

	for (i = 0; i < DISK_BLOCK_SIZE; i++)
		in[i] = 0;
	blk_post(q, s, VIRTIO_BLK_T_IN, block, DATA_GPA + s * DISK_BLOCK_SIZE,
		 DISK_BLOCK_SIZE);
	gq_kick(q);
	if (gq_wait(q, want) != ANSWER_USED)
		return RECOVER_READ_STUCK;
	if (blk_status(s) != VIRTIO_BLK_S_OK)
		return RECOVER_READ_STATUS;
	for (i = 0; i < DISK_BLOCK_SIZE; i++)
		if (in[i] != pat(block * DISK_BLOCK_SIZE + i, 0))
			return RECOVER_READ_DATA;
	return RECOVER_OK;
}

/*
 * (d) A hundred thousand kicks through the ioeventfd, a request in the middle of
 * them; then kicks of queues that do not exist, through user space.
 */
static void __guest_code guest_blk_notify_flood(void)
{
	static const uint32_t bad_index[] = { 1, QSIZE, 0xffff, 0x80000000U,
					      0xffffffffU };
	volatile uint8_t *in = (volatile uint8_t *)DATA_GPA;
	enum recover_err err = RECOVER_OK;
	struct gq q;
	uint64_t i;

	blk_up(&q);
	for (i = 0; i < DISK_BLOCK_SIZE; i++)
		in[i] = 0;
	for (i = 0; i < NOTIFY_FLOOD; i++) {
		if (i == NOTIFY_FLOOD / 2)
			blk_post(&q, 0, VIRTIO_BLK_T_IN, 7, DATA_GPA,
				 DISK_BLOCK_SIZE);
		gq_kick(&q);
	}
	if (gq_wait(&q, 1) != ANSWER_USED)
		err = RECOVER_READ_STUCK;
	else if (blk_status(0) != VIRTIO_BLK_S_OK)
		err = RECOVER_READ_STATUS;
	for (i = 0; !err && i < DISK_BLOCK_SIZE; i++)
		if (in[i] != pat(7 * DISK_BLOCK_SIZE + i, 0))
			err = RECOVER_READ_DATA;
	GUEST_SYNC2(STEP_SERVED, err);

	for (i = 0; i < NOTIFY_FLOOD_BAD; i++)
		gw32(VIRTIO_MMIO_QUEUE_NOTIFY,
		     bad_index[i % (sizeof(bad_index) / sizeof(bad_index[0]))]);
	GUEST_SYNC2(STEP_SERVED, blk_read_base(&q, 1, 9));
	GUEST_SYNC2(STEP_RECOVERED, blk_roundtrip(&q, 4, 99));
	GUEST_DONE();
}

/* The other VM: well-formed reads of the base image, one at a time. */
static void __guest_code guest_blk_served(uint64_t n)
{
	enum recover_err err = RECOVER_OK;
	struct gq q;
	uint64_t i, served = 0;

	blk_up(&q);
	for (i = 0; i < n && !err; i++) {
		err = blk_read_base(&q, i % 16, i % BLK_NR_BLOCKS);
		served += !err;
	}
	GUEST_SYNC2(STEP_RECOVERED, err);
	GUEST_SYNC2(STEP_SERVED, served);
	GUEST_DONE();
}

/* ---- guest side: virtio-vsock ---------------------------------------- */

struct gvs {
	struct gq q[NR_RINGS];
	unsigned int batch; /* tx packets queued since the last flush */
	uint32_t want_port; /* our port awaiting RESPONSE or RST */
	uint16_t answer;    /* what came for want_port, 0: nothing yet */
	uint64_t ops[8];    /* packets received, by op */
	uint64_t rx_bad;    /* used entries naming no receive buffer */
	enum answer worst;  /* of the flushes since it was cleared */
};

static void __guest_code vs_rx_post(struct gvs *g, unsigned int b)
{
	struct gq *q = &g->q[VS_RXQ];
	uint16_t d = (uint16_t)(2 * b);

	gq_put_desc(q, d, VS_RX_GPA(b), VS_HDR,
		    VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, d + 1);
	gq_put_desc(q, d + 1, VS_RX_GPA(b) + VS_HDR, VS_RX_DATA,
		    VRING_DESC_F_WRITE, 0);
	gq_publish(q, d);
}

static uint32_t __guest_code vs_up(struct gvs *g)
{
	uint32_t st;
	unsigned int b;

	g->batch = 0;
	g->answer = 0;
	st = gdev_up(g->q, NR_RINGS, FEAT(VIRTIO_F_VERSION_1));
	if (st != ST_LIVE)
		return st;
	for (b = 0; b < VS_NR_RX; b++)
		vs_rx_post(g, b);
	gq_kick(&g->q[VS_RXQ]);
	return st;
}

/* Takes what the device put in receive buffers and posts them again. */
static void __guest_code vs_rx_reap(struct gvs *g)
{
	struct gq *q = &g->q[VS_RXQ];
	volatile struct virtio_vsock_hdr *h;
	unsigned int n = 0;
	uint32_t id;

	while (q->last_used != q->used->idx) {
		id = q->used->ring[q->last_used % QSIZE].id;
		q->last_used++;
		if (id >= 2 * VS_NR_RX || (id & 1)) {
			g->rx_bad++;
			continue;
		}
		h = (volatile struct virtio_vsock_hdr *)VS_RX_GPA(id / 2);
		if (h->op < 8)
			g->ops[h->op]++;
		if ((h->op == VIRTIO_VSOCK_OP_RESPONSE ||
		     h->op == VIRTIO_VSOCK_OP_RST) &&
		    h->dst_port == g->want_port && !g->answer)
			g->answer = h->op;
		vs_rx_post(g, id / 2);
		n++;
	}
	if (n)
		gq_kick(q);
}

/* Kicks tx and waits until every packet queued is consumed. */
static enum answer __guest_code vs_flush(struct gvs *g)
{
	struct gq *q = &g->q[VS_TXQ];
	enum answer a = ANSWER_NONE;
	uint64_t i;

	gq_kick(q);
	for (i = 0; i < GUEST_SPIN_MAX; i++) {
		vs_rx_reap(g);
		if (q->used->idx == q->avail_idx) {
			a = ANSWER_USED;
			break;
		}
		if (i % GUEST_STATUS_POLL == 0 &&
		    (gr32(VIRTIO_MMIO_STATUS) & ST_NEEDS_RST)) {
			a = ANSWER_NEEDS_RESET;
			break;
		}
		gpause();
	}
	g->batch = 0;
	/* Worst first: no answer, then NEEDS_RESET, then all used. */
	if (a != ANSWER_USED && (g->worst == ANSWER_USED || a == ANSWER_NONE))
		g->worst = a;
	return a;
}

/*
 * Queues one packet: a header descriptor, and payload_len bytes in a
 * second descriptor of desc_len bytes when payload_len or desc_len.
 * Flushes when every tx slot is taken.
 */
static void __guest_code vs_queue(struct gvs *g, uint16_t op, uint32_t src,
				  uint32_t dst, uint32_t hdr_len,
				  uint32_t buf_alloc, uint32_t fwd_cnt,
				  uint32_t desc_len)
{
	struct gq *q = &g->q[VS_TXQ];
	unsigned int p = g->batch++;
	volatile struct virtio_vsock_hdr *h =
		(volatile struct virtio_vsock_hdr *)VS_TXHDR_GPA(p);
	uint16_t d = (uint16_t)(2 * p);

	h->src_cid = VS_GUEST_CID;
	h->dst_cid = VSOCK_HOST_CID;
	h->src_port = src;
	h->dst_port = dst;
	h->len = hdr_len;
	h->type = VIRTIO_VSOCK_TYPE_STREAM;
	h->op = op;
	h->flags = 0;
	h->buf_alloc = buf_alloc;
	h->fwd_cnt = fwd_cnt;
	*(volatile uint32_t *)VS_TXDATA_GPA(p) = VS_PING;
	gq_put_desc(q, d, VS_TXHDR_GPA(p), VS_HDR,
		    desc_len ? VRING_DESC_F_NEXT : 0, d + 1);
	gq_put_desc(q, d + 1, VS_TXDATA_GPA(p), desc_len, 0, 0);
	gq_publish(q, d);
	if (g->batch == VS_TX_SLOTS)
		vs_flush(g);
}

/*
 * Connects our port to the host's listener and sends "ping" on it:
 * returns the op that answered the REQUEST (RESPONSE, RST, or 0).
 */
static uint16_t __guest_code vs_connect(struct gvs *g, uint32_t port)
{
	uint64_t i;

	g->want_port = port;
	g->answer = 0;
	vs_queue(g, VIRTIO_VSOCK_OP_REQUEST, port, VS_LISTEN_PORT, 0,
		 VSOCK_BUF_ALLOC, 0, 0);
	vs_flush(g);
	for (i = 0; i < GUEST_SPIN_MAX && !g->answer; i++) {
		vs_rx_reap(g);
		if (i % GUEST_STATUS_POLL == 0 &&
		    (gr32(VIRTIO_MMIO_STATUS) & ST_NEEDS_RST))
			break;
		gpause();
	}
	if (g->answer == VIRTIO_VSOCK_OP_RESPONSE) {
		vs_queue(g, VIRTIO_VSOCK_OP_RW, port, VS_LISTEN_PORT, 4,
			 VSOCK_BUF_ALLOC, 0, 4);
		vs_flush(g);
	}
	return g->answer;
}

/* After abuse: reset if the device asked for it, then connect anew. */
static void __guest_code vs_recover(struct gvs *g, uint32_t port)
{
	GUEST_SYNC2(STEP_BROKE, g->worst);
	if (gr32(VIRTIO_MMIO_STATUS) != ST_LIVE)
		GUEST_ASSERT_EQ(vs_up(g), ST_LIVE);
	GUEST_SYNC2(STEP_CONNECTED, vs_connect(g, port));
	GUEST_SYNC2(STEP_RECOVERED, g->rx_bad);
}

static void __guest_code vs_init(struct gvs *g)
{
	unsigned int i;

	for (i = 0; i < 8; i++)
		g->ops[i] = 0;
	g->rx_bad = 0;
	g->worst = ANSWER_USED;
	GUEST_ASSERT_EQ(vs_up(g), ST_LIVE);
}

/* (e1) Credit floods: bogus buf_alloc and fwd_cnt, credit requests. */
static void __guest_code guest_vsock_credit(uint64_t seed)
{
	struct gvs g;
	uint32_t i, r;

	vs_init(&g);
	GUEST_SYNC2(STEP_CONNECTED, vs_connect(&g, 1000));
	for (i = 0; i < VS_FLOOD; i++) {
		r = (uint32_t)grand(&seed);
		switch (i % 4) {
		case 0:
			vs_queue(&g, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 1000,
				 VS_LISTEN_PORT, 0, r, (uint32_t)grand(&seed),
				 0);
			break;
		case 1:
			vs_queue(&g, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 1000,
				 VS_LISTEN_PORT, 0, 0xffffffffU, 0xffffffffU,
				 0);
			break;
		case 2:
			vs_queue(&g, VIRTIO_VSOCK_OP_CREDIT_REQUEST, 1000,
				 VS_LISTEN_PORT, 0, r, 0, 0);
			break;
		default:
			/* Credit talk for connections that do not exist. */
			vs_queue(&g,
				 r & 1 ? VIRTIO_VSOCK_OP_CREDIT_REQUEST :
					 VIRTIO_VSOCK_OP_CREDIT_UPDATE,
				 2000 + r % 1000, VS_LISTEN_PORT + 1 + r % 7, 0,
				 r, r, 0);
			break;
		}
	}
	vs_flush(&g);
	GUEST_SYNC2(STEP_ROUNDS, g.ops[VIRTIO_VSOCK_OP_CREDIT_UPDATE]);
	vs_recover(&g, 1001);
	GUEST_DONE();
}

/* (e2) Data for unknown connections, and impossible lengths. */
static void __guest_code guest_vsock_unknown(uint64_t seed)
{
	struct gvs g;
	uint32_t i, r;

	vs_init(&g);
	for (i = 0; i < VS_FLOOD; i++) {
		r = (uint32_t)grand(&seed);
		vs_queue(&g, i % 8 ? VIRTIO_VSOCK_OP_RW : (uint16_t)r,
			 r % 0x10000, (r >> 16) | 1, 4, r, r, 4);
	}
	vs_flush(&g);
	GUEST_SYNC2(STEP_ROUNDS, g.ops[VIRTIO_VSOCK_OP_RST]);

	/* len 0xffffffff with a 4-byte payload, and with none. */
	vs_queue(&g, VIRTIO_VSOCK_OP_RW, 3000, VS_LISTEN_PORT, 0xffffffffU,
		 VSOCK_BUF_ALLOC, 0, 4);
	vs_queue(&g, VIRTIO_VSOCK_OP_RW, 3001, VS_LISTEN_PORT, 0xffffffffU,
		 VSOCK_BUF_ALLOC, 0, 0);
	vs_flush(&g);
	GUEST_SYNC2(STEP_BROKE, g.worst);
	g.worst = ANSWER_USED;
	/* The same on a live connection. */
	if (gr32(VIRTIO_MMIO_STATUS) != ST_LIVE)
		GUEST_ASSERT_EQ(vs_up(&g), ST_LIVE);
	GUEST_SYNC2(STEP_CONNECTED, vs_connect(&g, 3002));
	vs_queue(&g, VIRTIO_VSOCK_OP_RW, 3002, VS_LISTEN_PORT, 0xffffffffU,
		 VSOCK_BUF_ALLOC, 0, 4);
	vs_flush(&g);
	/* A payload descriptor 4 GiB long: outside guest RAM. */
	vs_queue(&g, VIRTIO_VSOCK_OP_RW, 3003, VS_LISTEN_PORT, 0xffffffffU,
		 VSOCK_BUF_ALLOC, 0, 0xffffffffU);
	vs_flush(&g);
	vs_recover(&g, 3004);
	GUEST_DONE();
}

/* ---- host side: a VM with one device, wired as the vmm wires it ----- */

enum hdev_kind { HDEV_BLK, HDEV_VSOCK };

struct hvm {
	struct kvm_vm *vm;
	struct kvm_vcpu *vcpu;
	struct guest_mem mem;
	struct bus mmio;
	unsigned int irq_raises; /* atomic: the interrupt stub's count */
	char dir[48];
	char path[80]; /* the base image, or the vsock socket */
	struct disk *disk;
	struct virtio_blk *blk;
	struct vsock *vs;
	struct virtio_device *vdev;
	int listen_fd; /* vsock: "<uds>_VS_LISTEN_PORT" */
};

/*
 * The device's interrupt line. The VM has no irqchip (the guest polls
 * with interrupts off): count raises, so a test can see they happen.
 */
static void hvm_irq(void *opaque, unsigned int gsi, int level)
{
	struct hvm *h = opaque;

	if (level)
		__atomic_add_fetch(&h->irq_raises, 1, __ATOMIC_RELAXED);
}

static long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f;

	f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/*
 * Budget for the monitor's own growth during an abuse, far above what
 * the devices allocate (their request slots and rings exist before it
 * starts) and far below what an allocation per kick or per packet
 * would add up to over a flood.
 */
#define RSS_SLACK_KIB (32L * 1024)

static int write_base(const char *path)
{
	uint8_t buf[DISK_BLOCK_SIZE];
	uint64_t blk, i;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	for (blk = 0; blk < BLK_NR_BLOCKS; blk++) {
		for (i = 0; i < sizeof(buf); i++)
			buf[i] = pat(blk * DISK_BLOCK_SIZE + i, 0);
		if (pwrite(fd, buf, sizeof(buf), blk * DISK_BLOCK_SIZE) !=
		    (ssize_t)sizeof(buf)) {
			close(fd);
			return -EIO;
		}
	}
	close(fd);
	return 0;
}

/* Each queue's kick_fd as an ioeventfd, as vmm/virtio-attach.c binds. */
static void hvm_attach(struct hvm *h)
{
	struct virtio_device *dev = h->vdev;
	unsigned int i;

	for (i = 0; i < dev->nr_queues; i++) {
		struct kvm_ioeventfd e = {
			.datamatch = i,
			.addr = MMIO_GPA + VIRTIO_MMIO_QUEUE_NOTIFY,
			.len = 4,
			.fd = dev->queues[i].kick_fd,
			.flags = KVM_IOEVENTFD_FLAG_DATAMATCH,
		};

		if (e.fd < 0)
			continue;
		vm_ioctl(h->vm, KVM_IOEVENTFD, &e);
	}
	TEST_ASSERT(!bus__register(&h->mmio, MMIO_GPA, VIRTIO_MMIO_WINDOW_SIZE,
				   virtio_mmio__io, dev),
		    "bus__register");
}

static void canary_fill(struct hvm *h)
{
	uint8_t *c = addr_gpa2hva(h->vm, CANARY_GPA);
	uint64_t i;

	for (i = 0; i < CANARY_SIZE; i++)
		c[i] = CANARY_BYTE(i);
}

static uint64_t canary_damage(struct hvm *h)
{
	const uint8_t *c = addr_gpa2hva(h->vm, CANARY_GPA);
	uint64_t i, bad = 0;

	for (i = 0; i < CANARY_SIZE; i++)
		bad += c[i] != CANARY_BYTE(i);
	return bad;
}

/*
 * A VM whose vCPU starts in guest_code, with a device of kind and its
 * thread running. Guest RAM is faulted in first, so VmRSS afterwards
 * measures the monitor, not the guest.
 */
static void hvm_create(struct hvm *h, enum hdev_kind kind,
		       void (*guest_code)(void))
{
	volatile uint8_t *ram;
	uint64_t off;
	int ret;

	memset(h, 0, sizeof(*h));
	h->listen_fd = -1;
	h->vm = vm_create();
	h->vcpu = vm_vcpu_add(h->vm, guest_code);
	TEST_ASSERT(vm_vaddr_alloc(h->vm, LAYOUT_SIZE) == LAYOUT_GPA,
		    "guest layout not at the heap's start");
	ram = h->vm->mem;
	for (off = 0; off < h->vm->mem_size; off += GUEST_PAGE_SIZE)
		ram[off] = ram[off];
	canary_fill(h);
	guest_mem__init(&h->mem);
	TEST_ASSERT(!guest_mem__add(&h->mem, 0, h->vm->mem_size, h->vm->mem),
		    "guest_mem__add");
	bus__init(&h->mmio, "mmio", 1ULL << 32);

	test_tmp_name(h->dir, sizeof(h->dir), "kiln-hostile-XXXXXX");
	TEST_ASSERT(mkdtemp(h->dir), "mkdtemp: %s", strerror(errno));
	if (kind == HDEV_BLK) {
		struct disk_params dp = {
			.base_size = BLK_DISK_SIZE,
			.base_digest = "sha256:0123456789abcdef0123456789abcdef"
				       "0123456789abcdef0123456789abcdef",
			.mode = DISK_EPHEMERAL,
			.max_dirty_bytes = BLK_DISK_SIZE,
		};
		struct virtio_blk_params bp = {
			.name = "virtio-blk0",
			.serial = "kiln-hostile",
			.nr_queues = 1,
			.mem = &h->mem,
			.irq = { .set = hvm_irq, .opaque = h, .gsi = 5 },
		};

		snprintf(h->path, sizeof(h->path), "%s/base.img", h->dir);
		ret = write_base(h->path);
		TEST_ASSERT(!ret, "%s: %s", h->path, strerror(-ret));
		dp.base_path = h->path;
		ret = disk__open(&h->disk, &dp);
		TEST_ASSERT(!ret, "disk__open: %s", strerror(-ret));
		bp.disk = h->disk;
		ret = virtio_blk__create(&h->blk, &bp);
		TEST_ASSERT(!ret, "virtio_blk__create: %s", strerror(-ret));
		h->vdev = virtio_blk__device(h->blk);
		ret = virtio_blk__start(h->blk, NULL);
		TEST_ASSERT(!ret, "virtio_blk__start: %s", strerror(-ret));
	} else {
		struct vsock_params vp = {
			.name = "virtio-vsock0",
			.guest_cid = VS_GUEST_CID,
			.mem = &h->mem,
			.irq = { .set = hvm_irq, .opaque = h, .gsi = 6 },
		};
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		snprintf(h->path, sizeof(h->path), "%s/v.sock", h->dir);
		vp.uds_path = h->path;
		ret = vsock__create(&h->vs, &vp);
		TEST_ASSERT(!ret, "vsock__create: %s", strerror(-ret));
		h->vdev = vsock__device(h->vs);
		ret = vsock__start(h->vs, NULL);
		TEST_ASSERT(!ret, "vsock__start: %s", strerror(-ret));
		/* Where a guest connection to VS_LISTEN_PORT goes. */
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s_%u", h->path,
			 VS_LISTEN_PORT);
		h->listen_fd = socket(
			AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		TEST_ASSERT(h->listen_fd >= 0, "socket: %s", strerror(errno));
		TEST_ASSERT(!bind(h->listen_fd, (struct sockaddr *)&sa,
				  sizeof(sa)) &&
				    !listen(h->listen_fd, 16),
			    "%s: %s", sa.sun_path, strerror(errno));
	}
	hvm_attach(h);
}

/* Devices first: their threads may still use guest memory. */
static void hvm_destroy(struct hvm *h)
{
	struct dirent *e;
	DIR *dir;

	virtio_blk__destroy(h->blk);
	h->blk = NULL;
	vsock__destroy(h->vs);
	h->vs = NULL;
	disk__close(h->disk);
	h->disk = NULL;
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	h->listen_fd = -1;
	kvm_vm_free(h->vm);
	h->vm = NULL;
	if (!h->dir[0])
		return;
	dir = opendir(h->dir);
	if (dir) {
		while ((e = readdir(dir)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				unlinkat(dirfd(dir), e->d_name, 0);
		closedir(dir);
	}
	rmdir(h->dir);
	h->dir[0] = '\0';
}

/*
 * Runs the vCPU until its next ucall, serving MMIO exits on the bus the
 * way vmm/vcpu.c does (an unclaimed read sees all ones). Returns the
 * ucall's command, or -errno / -EPROTO for an exit that is neither.
 * Safe from any thread: it fails no test itself.
 */
static int64_t hvm_run(struct hvm *h, struct ucall *uc)
{
	struct kvm_run *run = h->vcpu->run;
	uint64_t cmd;
	int ret;

	for (;;) {
		ret = __vcpu_run(h->vcpu);
		if (ret)
			return ret;
		if (run->exit_reason != KVM_EXIT_MMIO)
			break;
		if (run->mmio.len > sizeof(run->mmio.data))
			return -EPROTO;
		bus__access(&h->mmio, run->mmio.phys_addr, run->mmio.data,
			    run->mmio.len, run->mmio.is_write);
	}
	cmd = get_ucall(h->vcpu, uc);
	return cmd == UCALL_NONE ? -EPROTO : (int64_t)cmd;
}

/*
 * A triple fault of a guest whose page tables, descriptor tables, code and
 * canary are as they were: no write of the guest or of the device to
 * guest RAM broke them, so the vCPU's state was lost under it. Inside the
 * nested harness that is the harness's failure mode (vmm_util.h,
 * check_harness_flake_text), and the test runs again; the message says
 * which it was either way.
 */
static void hvm_check_shutdown(struct hvm *h, char *buf, size_t len)
{
	uint64_t canary = canary_damage(h);

	if (h->vcpu->run->exit_reason != KVM_EXIT_SHUTDOWN)
		return;
	if (vm_check_fixed(h->vm, buf, len)) {
		return;
	} else if (canary) {
		snprintf(buf, len, "%llu canary bytes changed",
			 (unsigned long long)canary);
		return;
	}
	snprintf(buf, len,
		 "page tables, GDT, TSS, IDT, code and canary intact");
	if (getenv("KILN_IN_HARNESS"))
		ksft_blame_environment("a test guest triple-faulted in the "
				       "nested harness with its tables intact");
}

/* The same from the test's thread: anything but a SYNC or DONE fails. */
static uint64_t hvm_ucall(struct hvm *h, struct ucall *uc)
{
	char buf[512], why[128] = "";
	int64_t cmd = hvm_run(h, uc);

	if (cmd == -EPROTO)
		hvm_check_shutdown(h, why, sizeof(why));
	TEST_ASSERT(cmd != -EPROTO, "unexpected exit: %s%s%s",
		    vcpu_describe_exit(h->vcpu, buf, sizeof(buf)),
		    why[0] ? "; " : "", why);
	TEST_ASSERT(cmd >= 0, "KVM_RUN: %s", strerror((int)-cmd));
	TEST_ASSERT(cmd == UCALL_SYNC || cmd == UCALL_DONE, "%s",
		    ucall_describe(h->vm, uc, buf, sizeof(buf)));
	return (uint64_t)cmd;
}

/* What a guest reported over its whole run. */
struct report {
	unsigned int broke[3];	/* by enum answer */
	unsigned int recovered; /* STEP_RECOVERED seen */
	uint64_t recover_err;	/* the last STEP_RECOVERED value */
	unsigned int served;	/* STEP_SERVED seen */
	uint64_t served_val[4];
	unsigned int connected;
	uint64_t connected_val[4];
	uint64_t rounds;
};

static void report_note(struct report *r, const struct ucall *uc)
{
	uint64_t v = uc->args[1];

	switch (uc->args[0]) {
	case STEP_BROKE:
		if (v < 3)
			r->broke[v]++;
		break;
	case STEP_RECOVERED:
		r->recovered++;
		r->recover_err = v;
		break;
	case STEP_SERVED:
		if (r->served < 4)
			r->served_val[r->served] = v;
		r->served++;
		break;
	case STEP_CONNECTED:
		if (r->connected < 4)
			r->connected_val[r->connected] = v;
		r->connected++;
		break;
	case STEP_ROUNDS:
		r->rounds = v;
		break;
	default:
		break;
	}
}

/* Runs the guest to GUEST_DONE, noting every report. */
static void hvm_run_to_done(struct hvm *h, struct report *r)
{
	struct ucall uc;

	memset(r, 0, sizeof(*r));
	while (hvm_ucall(h, &uc) == UCALL_SYNC)
		report_note(r, &uc);
}

/*
 * What every test checks once its guest is done: the device is still
 * live after the guest's last reset and request, nothing outside what
 * the guest pointed at changed, and the monitor did not grow.
 */
static void hvm_check_after(struct __test_metadata *_metadata, struct hvm *h,
			    long rss_before)
{
	long rss_after = rss_kib();

	EXPECT_EQ(ST_LIVE, virtio_device__status(h->vdev));
	EXPECT_EQ(0, canary_damage(h));
	ASSERT_LT(0, rss_before);
	EXPECT_GT(rss_before + RSS_SLACK_KIB, rss_after)
	TH_LOG("VmRSS grew from %ld to %ld KiB", rss_before, rss_after);
	TH_LOG("VmRSS %ld -> %ld KiB, %u interrupts raised", rss_before,
	       rss_after, __atomic_load_n(&h->irq_raises, __ATOMIC_RELAXED));
}

FIXTURE(hostile)
{
	struct hvm a, b;
	struct report ra, rb;
};

FIXTURE_SETUP(hostile)
{
	memset(self, 0, sizeof(*self));
	self->a.listen_fd = self->b.listen_fd = -1;
}

FIXTURE_TEARDOWN(hostile)
{
	hvm_destroy(&self->a);
	hvm_destroy(&self->b);
}

/* ---- (a)-(d): virtio-blk ---------------------------------------------- */

TEST_F_TIMEOUT(hostile, blk_scribbled_rings, 600)
{
	struct hvm *h = &self->a;
	struct report *r = &self->ra;
	long rss;

	hvm_create(h, HDEV_BLK, (void (*)(void))guest_blk_scribble);
	vcpu_args_set(h->vcpu, 1, 0x2545f4914f6cdd1dULL);
	rss = rss_kib();
	hvm_run_to_done(h, r);
	EXPECT_EQ(SCRIBBLE_ROUNDS, r->rounds);
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(RECOVER_OK, r->recover_err);
	hvm_check_after(_metadata, h, rss);
}

TEST_F_TIMEOUT(hostile, blk_descriptor_loops, 300)
{
	struct hvm *h = &self->a;
	struct report *r = &self->ra;
	long rss;

	hvm_create(h, HDEV_BLK, guest_blk_loops);
	rss = rss_kib();
	hvm_run_to_done(h, r);
	/* Each abuse was answered: the chain failed, or the queue broke. */
	EXPECT_EQ(0, r->broke[ANSWER_NONE]);
	EXPECT_EQ(7, r->broke[ANSWER_USED] + r->broke[ANSWER_NEEDS_RESET]);
	TH_LOG("%u chains given back, %u NEEDS_RESET", r->broke[ANSWER_USED],
	       r->broke[ANSWER_NEEDS_RESET]);
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(RECOVER_OK, r->recover_err);
	hvm_check_after(_metadata, h, rss);
}

TEST_F_TIMEOUT(hostile, blk_buffers_out_of_range, 300)
{
	struct hvm *h = &self->a;
	struct report *r = &self->ra;
	long rss;

	hvm_create(h, HDEV_BLK, guest_blk_out_of_range);
	rss = rss_kib();
	hvm_run_to_done(h, r);
	EXPECT_EQ(0, r->broke[ANSWER_NONE]);
	/* Nothing outside RAM can be used: every one breaks the queue. */
	EXPECT_EQ(NR_BAD * NR_WHERE, r->broke[ANSWER_NEEDS_RESET]);
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(RECOVER_OK, r->recover_err);
	hvm_check_after(_metadata, h, rss);
}

TEST_F_TIMEOUT(hostile, blk_notify_flood, 900)
{
	struct hvm *h = &self->a;
	struct report *r = &self->ra;
	long rss;

	hvm_create(h, HDEV_BLK, guest_blk_notify_flood);
	rss = rss_kib();
	hvm_run_to_done(h, r);
	ASSERT_EQ(2, r->served);
	EXPECT_EQ(RECOVER_OK, r->served_val[0]) TH_LOG("mid-flood request");
	EXPECT_EQ(RECOVER_OK, r->served_val[1]) TH_LOG("after bad indices");
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(RECOVER_OK, r->recover_err);
	hvm_check_after(_metadata, h, rss);
}

/* ---- another VM in the same process is served meanwhile ------------- */

struct abuser {
	struct hvm *h;
	struct report r;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool started; /* the guest reported once: the abuse is on */
	bool done;
	int64_t last; /* the last hvm_run result */
};

/* No TEST_ASSERT here: only the test's main thread may fail the test. */
static void *abuser_thread(void *arg)
{
	struct abuser *a = arg;
	struct ucall uc;

	for (;;) {
		a->last = hvm_run(a->h, &uc);
		pthread_mutex_lock(&a->lock);
		a->started = true;
		if (a->last == UCALL_SYNC)
			report_note(&a->r, &uc);
		else
			a->done = true;
		pthread_cond_broadcast(&a->cond);
		pthread_mutex_unlock(&a->lock);
		if (a->last != UCALL_SYNC)
			break;
	}
	return NULL;
}

TEST_F_TIMEOUT(hostile, other_vm_unaffected, 900)
{
	struct abuser ab = { .h = &self->a };
	struct report *r = &self->rb;
	pthread_t thread;
	long rss;

	hvm_create(&self->a, HDEV_BLK, (void (*)(void))guest_blk_scribble);
	vcpu_args_set(self->a.vcpu, 1, 0x9e3779b97f4a7c15ULL);
	hvm_create(&self->b, HDEV_BLK, (void (*)(void))guest_blk_served);
	vcpu_args_set(self->b.vcpu, 1, (uint64_t)OTHER_VM_REQS);
	pthread_mutex_init(&ab.lock, NULL);
	pthread_cond_init(&ab.cond, NULL);
	rss = rss_kib();

	ASSERT_EQ(0, pthread_create(&thread, NULL, abuser_thread, &ab));
	/* Start the well-behaved VM once the abuse is under way. */
	pthread_mutex_lock(&ab.lock);
	while (!ab.started)
		pthread_cond_wait(&ab.cond, &ab.lock);
	pthread_mutex_unlock(&ab.lock);

	hvm_run_to_done(&self->b, r);
	pthread_mutex_lock(&ab.lock);
	TH_LOG("the other VM was served while %s",
	       ab.done ? "the abuser had finished" : "the abuse went on");
	pthread_mutex_unlock(&ab.lock);
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(RECOVER_OK, r->recover_err);
	ASSERT_EQ(1, r->served);
	EXPECT_EQ(OTHER_VM_REQS, r->served_val[0]);

	pthread_join(thread, NULL);
	if (ab.last == -EPROTO) {
		char why[128] = "not a triple fault";

		hvm_check_shutdown(&self->a, why, sizeof(why));
		TH_LOG("the abuser's vCPU stopped: %s", why);
	}
	EXPECT_EQ(UCALL_DONE, ab.last);
	EXPECT_EQ(SCRIBBLE_ROUNDS, ab.r.rounds);
	ASSERT_EQ(1, ab.r.recovered);
	EXPECT_EQ(RECOVER_OK, ab.r.recover_err);
	hvm_check_after(_metadata, &self->a, rss);
	EXPECT_EQ(ST_LIVE, virtio_device__status(self->b.vdev));
	EXPECT_EQ(0, canary_damage(&self->b));
	pthread_cond_destroy(&ab.cond);
	pthread_mutex_destroy(&ab.lock);
}

/* ---- (e): virtio-vsock ------------------------------------------------ */

/*
 * Accepts up to max connections the device made to the listener for the
 * guest and counts those that delivered "ping" (each connection gets a
 * generous wait: the guest sent it before it finished).
 */
static unsigned int vs_pings(struct hvm *h, unsigned int max)
{
	unsigned int n, pings = 0;
	uint32_t word;
	struct pollfd p;
	ssize_t got;
	int fd;

	for (n = 0; n < max; n++) {
		p = (struct pollfd){ .fd = h->listen_fd, .events = POLLIN };
		if (poll(&p, 1, 10000) != 1)
			break;
		fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			break;
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		word = 0;
		got = poll(&p, 1, 10000) == 1 ?
			      recv(fd, &word, sizeof(word), MSG_WAITALL) :
			      -1;
		pings += got == sizeof(word) && word == VS_PING;
		close(fd);
	}
	return pings;
}

TEST_F_TIMEOUT(hostile, vsock_credit_flood, 600)
{
	struct hvm *h = &self->a;
	struct report *r = &self->ra;
	long rss;

	hvm_create(h, HDEV_VSOCK, (void (*)(void))guest_vsock_credit);
	vcpu_args_set(h->vcpu, 1, 0x853c49e6748fea9bULL);
	rss = rss_kib();
	hvm_run_to_done(h, r);
	ASSERT_EQ(2, r->connected);
	EXPECT_EQ(VIRTIO_VSOCK_OP_RESPONSE, r->connected_val[0]);
	EXPECT_EQ(VIRTIO_VSOCK_OP_RESPONSE, r->connected_val[1]);
	TH_LOG("%llu credit updates received", (unsigned long long)r->rounds);
	/* Every packet of the flood was taken (or the device asked for a reset). */
	EXPECT_EQ(0, r->broke[ANSWER_NONE]);
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(0, r->recover_err) TH_LOG("used entries naming no buffer");
	/* The connection made after the flood carried its data. */
	EXPECT_LE(1, vs_pings(h, 2));
	hvm_check_after(_metadata, h, rss);
}

TEST_F_TIMEOUT(hostile, vsock_unknown_connections_and_huge_len, 600)
{
	struct hvm *h = &self->a;
	struct report *r = &self->ra;
	long rss;

	hvm_create(h, HDEV_VSOCK, (void (*)(void))guest_vsock_unknown);
	vcpu_args_set(h->vcpu, 1, 0xda942042e4dd58b5ULL);
	rss = rss_kib();
	hvm_run_to_done(h, r);
	/* Data for no connection is answered with RSTs. */
	EXPECT_LT(0, r->rounds);
	TH_LOG("%llu RSTs received", (unsigned long long)r->rounds);
	EXPECT_EQ(0, r->broke[ANSWER_NONE]);
	ASSERT_EQ(2, r->connected);
	EXPECT_EQ(VIRTIO_VSOCK_OP_RESPONSE, r->connected_val[0]);
	EXPECT_EQ(VIRTIO_VSOCK_OP_RESPONSE, r->connected_val[1]);
	ASSERT_EQ(1, r->recovered);
	EXPECT_EQ(0, r->recover_err) TH_LOG("used entries naming no buffer");
	EXPECT_LE(1, vs_pings(h, 2));
	hvm_check_after(_metadata, h, rss);
}

TEST_HARNESS_MAIN
