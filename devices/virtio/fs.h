/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_FS_H
#define KILN_VIRTIO_FS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "devices/fs/backend.h"
#include "devices/irq.h"
#include "devices/virtio/device.h"
#include "devices/virtio/guest-mem.h"
#include "lib/log.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * virtio-fs (virtio 1.2, section 5.11): a FUSE file system the guest
 * mounts by its tag ("mount -t virtiofs TAG /mnt"). Queue 0 is the
 * high-priority queue (FORGET, INTERRUPT), then one request queue per
 * vCPU; every queue is served by the device's own io_uring event loop
 * (one thread), which hands each request to the FUSE server
 * (devices/fs/fuse.h) over the mount's backend. No DAX window (no shared
 * memory region) and no notification queue (VIRTIO_FS_F_NOTIFICATION is
 * not offered).
 */

#define VIRTIO_FS_MAX_QUEUES 32U /* request queues; more vCPUs share */

struct virtio_fs_params {
	const char *name;	    /* "virtio-fs0"; outlives the device */
	const char *tag;	    /* mount tag, 1..35 bytes (36 with NUL
				       * padding; the spec allows 36) */
	struct fs_backend *backend; /* owned by the device from a successful
				       * create on */
	unsigned int nr_queues; /* request queues, 1..VIRTIO_FS_MAX_QUEUES */
	unsigned int attr_timeout_ms; /* entry and attr validity given to the
				       * guest */
	const struct guest_mem *mem;
	struct irq_line irq;
};

struct virtio_fs;

/*
 * Sets the device up; its queues' kick_fd are eventfds, ready to bind.
 * -EINVAL for a missing backend, memory or tag, a tag of more than 36
 * bytes, or a queue count out of range. On failure the backend is still
 * the caller's.
 */
int __must_check virtio_fs__create(struct virtio_fs **out,
				   const struct virtio_fs_params *p);
struct virtio_device *virtio_fs__device(struct virtio_fs *f);
/*
 * Starts the event loop thread. Call it once the thread may run: it
 * inherits the caller's seccomp filter.
 */
int __must_check virtio_fs__start(struct virtio_fs *f,
				  const struct sock_fprog *filter);
/*
 * The backend's bytes against its limit (fs_backend_ops.usage), from any
 * thread: false when the backend keeps no such count (bind, virtual).
 */
bool virtio_fs__usage(const struct virtio_fs *f, uint64_t *used, uint64_t *max);
/*
 * Stops and joins the thread (I/O in flight completes first), destroys
 * the backend; NULL ok.
 */
void virtio_fs__destroy(struct virtio_fs *f);

#endif
