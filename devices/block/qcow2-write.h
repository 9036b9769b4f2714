/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_QCOW2_WRITE_H
#define KILN_QCOW2_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * A writer of standalone qcow2 images (QEMU's docs/interop/qcow2.txt),
 * version 3, in one pass: `vmm rootfs flatten` (Documentation/rootfs.md).
 * No backing file, no compression, no snapshots, refcount order 4 (16-bit
 * refcounts). The caller hands over the guest clusters that hold data, in
 * increasing guest order; every cluster it skips stays unallocated and
 * reads as zeros. The layout, in file order: the header cluster, then
 * each L2 table right after the data clusters it maps, then the L1
 * table, the refcount table and the refcount blocks. Every host cluster
 * is used exactly once, so every refcount is 1 and every L1 and L2 entry
 * carries the "copied" bit (refcount exactly one).
 *
 * The file must be empty and is written with pwrite only; the header is
 * written last, by qcow2_writer__finish: a writer that failed half way
 * leaves no valid image (the caller writes to a temporary file and
 * renames it). Memory: one L2 table and the L1 table (8 bytes per
 * cluster_size / 8 guest clusters).
 */

#define QCOW2_WRITE_CLUSTER_MIN (4U << 10) /* bytes: our smallest */
#define QCOW2_WRITE_CLUSTER_MAX (2U << 20) /* bytes: QEMU's largest */

struct qcow2_writer;

/*
 * A writer of an image of virtual_size bytes (> 0) with clusters of
 * cluster_size bytes (a power of two, QCOW2_WRITE_CLUSTER_MIN to _MAX)
 * into fd. err gets one line; -EINVAL for a bad size, -EFBIG for a
 * virtual size whose L1 table QEMU could not open, -ENOMEM.
 */
int __must_check qcow2_writer__create(struct qcow2_writer **out, int fd,
				      uint64_t virtual_size,
				      uint32_t cluster_size, char *err,
				      size_t errlen);

/*
 * The guest cluster at guest_offset (cluster aligned, below the virtual
 * size, past the last one given) holds data: cluster_size bytes at data
 * (the last cluster is padded with zeros by the caller). -EINVAL out of
 * order or range, -errno of a failed write.
 */
int __must_check qcow2_writer__put(struct qcow2_writer *w,
				   uint64_t guest_offset, const void *data,
				   char *err, size_t errlen);

/* The tables and the header; the caller syncs and renames the file. */
int __must_check qcow2_writer__finish(struct qcow2_writer *w, char *err,
				      size_t errlen);

/* Bytes of the file so far (after finish: the whole image). */
uint64_t qcow2_writer__file_size(const struct qcow2_writer *w);

void qcow2_writer__destroy(struct qcow2_writer *w); /* NULL is fine */

#endif
