/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_BLK_H
#define KILN_VIRTIO_BLK_H

#include <linux/virtio_blk.h> /* VIRTIO_BLK_ID_BYTES: GET_ID answer */
#include <stdint.h>

#include "lib/compiler.h"
#include "devices/block/disk.h"
#include "devices/block/store-cow.h"
#include "devices/irq.h"
#include "devices/virtio/device.h"
#include "devices/virtio/guest-mem.h"
#include "lib/log.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * virtio-blk (virtio 1.1, section 5.2) over a struct disk: read, write,
 * flush, get-id, discard and write-zeroes, one request queue per vCPU,
 * every request serviced by the device's own io_uring event loop (one
 * thread for all its queues, no thread per request, no synchronous I/O
 * in the data path). The device advertises 4 KiB logical blocks, so the
 * driver only sends requests the disk can take; any other request fails
 * with VIRTIO_BLK_S_IOERR, as do writes to a read-only disk (which the
 * driver is told about with VIRTIO_BLK_F_RO).
 */

#define VIRTIO_BLK_MAX_QUEUES 32U /* the rest of the vCPUs share */

struct virtio_blk_params {
	const char *name;  /* "virtio-blk0"; outlives the device */
	struct disk *disk; /* borrowed: outlives the device */
	/* a cow root's layer over its store (on disk); NULL: none */
	struct store_cow *store_cow; /* borrowed: outlives the device */
	const char *serial;	     /* GET_ID, cut to 20 bytes */
	unsigned int nr_queues;	     /* 1..VIRTIO_BLK_MAX_QUEUES */
	const struct guest_mem *mem;
	struct irq_line irq;
};

struct virtio_blk;

/* Sets the device up; its queues' kick_fd are eventfds, ready to bind. */
int __must_check virtio_blk__create(struct virtio_blk **out,
				    const struct virtio_blk_params *p);
struct virtio_device *virtio_blk__device(struct virtio_blk *b);
/*
 * Starts the event loop thread. Call it once the thread may run: it
 * inherits the caller's seccomp filter.
 */
int __must_check virtio_blk__start(struct virtio_blk *b,
				   const struct sock_fprog *filter);
/* Stops and joins the thread (I/O in flight completes first); NULL ok. */
void virtio_blk__destroy(struct virtio_blk *b);

#endif
