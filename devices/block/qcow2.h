/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_QCOW2_H
#define KILN_QCOW2_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * A read-only qcow2 image (versions 2 and 3) as a root disk's base:
 * where each piece of the guest's disk lives in the file, so the block
 * device reads data clusters straight from it on its io_uring.
 * Unallocated and zero clusters read as zeros; compressed clusters (zlib,
 * or zstd in version 3) are inflated into a small cache of the reader's.
 * Backing files, encryption, external data files, subclusters and images
 * marked dirty or corrupt are refused at open. Limits, refusals and the
 * cache bounds: Documentation/rootfs.md, "qcow2 bases".
 *
 * One thread uses a reader at a time (the block device's event loop).
 */

struct qcow2;

enum qcow2_extent_kind {
	QCOW2_EXTENT_ZERO,   /* reads as zeros, no I/O */
	QCOW2_EXTENT_FILE,   /* offset is in the image file */
	QCOW2_EXTENT_BUFFER, /* buf holds the bytes (an inflated cluster) */
};

struct qcow2_extent {
	enum qcow2_extent_kind kind;
	uint64_t offset; /* QCOW2_EXTENT_FILE: bytes into the file */
	const void *buf; /* QCOW2_EXTENT_BUFFER: valid until the next
			  * qcow2__map_begin */
	uint64_t len;	 /* bytes */
};

/*
 * Reads and checks the header and the L1 table of the image open at fd
 * (not taken over: the caller closes it after qcow2__close). path names
 * the file in messages. On a refusal err receives one line, "qcow2 image
 * PATH: why", and the return is -EINVAL (not a usable image) or another
 * -errno (reading failed).
 */
int __must_check qcow2__open(struct qcow2 **out, int fd, const char *path,
			     char *err, size_t errlen);
void qcow2__close(struct qcow2 *q); /* NULL is fine */

uint64_t qcow2__virtual_size(const struct qcow2 *q); /* bytes */
uint32_t qcow2__cluster_size(const struct qcow2 *q); /* bytes */

/*
 * Starts a new read: buffers handed out by qcow2__map since the last
 * call may now be reused. Until the next call, every buffer qcow2__map
 * returns stays valid and unchanged.
 */
void qcow2__map_begin(struct qcow2 *q);

/*
 * Where the guest's bytes [offset, offset + len) are; the range must lie
 * inside one cluster and inside the disk (-EINVAL otherwise). -EIO for a
 * damaged or hostile table entry or compressed cluster (logged once per
 * image), -E2BIG when this read already holds every inflated-cluster
 * buffer (map less at a time), another -errno when reading the file
 * failed.
 */
int __must_check qcow2__map(struct qcow2 *q, uint64_t offset, uint64_t len,
			    struct qcow2_extent *ext);

#endif
