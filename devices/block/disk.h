/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_DISK_H
#define KILN_DISK_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * A root disk: a read-only base image shared by many VMs through the page
 * cache, plus this VM's writable layer.
 *
 * The writable layer is a "delta": a header, a map with one byte per
 * DISK_BLOCK_SIZE block of the base (DISK_BLOCK_BASE: read the base;
 * DISK_BLOCK_DATA: read the delta; DISK_BLOCK_ZERO: reads as zeros) and a
 * sparse data area where block n lives at data_offset + n * block size
 * (the same offset as in the base, so a write is one I/O whatever it
 * spans). The map is mapped MAP_SHARED, so a map store is in the page
 * cache at once: a monitor killed with SIGKILL leaves a state file whose
 * map only names blocks whose data write completed. Format and crash
 * rules: Documentation/rootfs.md.
 *
 * The disk does no I/O in the data path itself: the block device asks it
 * where to read or write (disk__map_read, disk__begin_write), does the
 * I/O on its io_uring, then reports back (disk__end_write, ...). It is
 * used from one thread only (the block device's event loop).
 */

#define DISK_BLOCK_SIZE 4096U /* bytes; requests must be aligned to it */

enum disk_mode {
	DISK_READONLY,	 /* no writable layer: writes are refused */
	DISK_EPHEMERAL,	 /* delta in a memfd, gone when the VM ends */
	DISK_PERSISTENT, /* delta in a state file, kept and reused */
};

enum disk_block_state {
	DISK_BLOCK_BASE = 0,
	DISK_BLOCK_DATA = 1,
	DISK_BLOCK_ZERO = 2,
};

enum disk_format {
	DISK_FORMAT_RAW = 0, /* the file is the disk */
	DISK_FORMAT_QCOW2,   /* devices/block/qcow2.h: read-only, v2 or v3 */
};

struct disk_params {
	const char *base_path; /* opened O_RDONLY, never written */
	enum disk_format base_format;
	/* bytes the guest sees (a qcow2 base: its virtual size), a multiple
	 * of DISK_BLOCK_SIZE */
	uint64_t base_size;
	const char *base_digest; /* "sha256:<64 hex>": recorded in the state */
	enum disk_mode mode;
	const char *state_path;	  /* DISK_PERSISTENT: absolute path */
	uint64_t max_dirty_bytes; /* 0: no limit */
	bool direct;		  /* O_DIRECT on the base and the state file */
};

/*
 * Where a piece of a request is: in a file, zeros (fd == -1, buf NULL),
 * or in memory (fd == -1, buf: a qcow2 base's inflated compressed
 * cluster, to copy before the next disk__map_read).
 */
struct disk_extent {
	int fd;		 /* -1: no I/O */
	uint64_t offset; /* in fd */
	uint64_t len;	 /* bytes */
	const void *buf; /* fd == -1: the bytes, or NULL for zeros */
};

struct disk;

/*
 * Opens the base and the writable layer. Persistent: creates the state
 * file (0600) or reuses it after checking its header against the base
 * (size, digest, block size), and holds an exclusive lock on it until
 * disk__close (-EBUSY when another process has it). Reports its own
 * errors once with pr_err, naming the file and the reason, and returns
 * -errno.
 */
int __must_check disk__open(struct disk **out, const struct disk_params *p);
void disk__close(struct disk *d); /* NULL is fine */

uint64_t disk__size(const struct disk *d); /* bytes, the base's */
bool disk__read_only(const struct disk *d);
/* The fd to fdatasync on a flush, -1 when there is nothing to sync. */
int disk__sync_fd(const struct disk *d);
/* Bytes in DISK_BLOCK_DATA blocks right now; from any thread. */
uint64_t disk__dirty_bytes(const struct disk *d);

/*
 * The writable layer as a snapshot saves it (Documentation/snapshots.md,
 * "The root disk"): its file (the memfd of an ephemeral disk, the state
 * file of a persistent one; -1 when read-only) and that file's length
 * (0 when read-only). Read it only while the block device is paused:
 * then no request is in flight and every map store is in the file.
 */
int disk__layer_fd(const struct disk *d);
uint64_t disk__layer_bytes(const struct disk *d);
/*
 * A fresh ephemeral disk (nothing written yet) takes over the layer
 * saved in fd (a sparse copy of an ephemeral delta): fd must be
 * disk__layer_bytes long, with a header for this base checked as a
 * state file's is; its map and data extents are copied into this
 * disk's memfd, and the map is checked and counted again. Each disk
 * restored from the same fd gets a copy of its own. Reports once with
 * pr_err naming what; -EINVAL (not this base, damaged), another -errno.
 */
int __must_check disk__load_layer(struct disk *d, int fd, const char *what);

/*
 * Splits the read of [offset, offset + len) into at most max extents,
 * merging neighbouring blocks with the same source. Returns the number
 * of extents, -EINVAL when the range is not block aligned or runs past
 * the end, -E2BIG when max extents (or a qcow2 base's inflated-cluster
 * buffers) are not enough: one block always fits. A qcow2 base may also
 * answer -EIO (a damaged table entry) or a read's -errno.
 */
int __must_check disk__map_read(const struct disk *d, uint64_t offset,
				uint64_t len, struct disk_extent *ext,
				unsigned int max);

/*
 * Before writing [offset, offset + len): one extent to write to (the
 * delta file). Reserves the blocks that would become dirty against
 * max_dirty_bytes: -ENOSPC past it, -EROFS on a read-only disk, -EINVAL
 * for an unaligned or out-of-range request. *reserved receives what to
 * hand back to disk__end_write.
 */
int __must_check disk__begin_write(struct disk *d, uint64_t offset,
				   uint64_t len, struct disk_extent *ext,
				   uint64_t *reserved);
/*
 * After the write: on success the blocks become DISK_BLOCK_DATA (map
 * store after the data, never before); either way the reservation ends.
 */
void disk__end_write(struct disk *d, uint64_t offset, uint64_t len,
		     uint64_t reserved, bool ok);

/*
 * Discard and write-zeroes of [offset, offset + len): the extent of the
 * delta to punch a hole in (fallocate PUNCH_HOLE|KEEP_SIZE), then
 * disk__end_zero marks the blocks DISK_BLOCK_ZERO. Same errors as
 * disk__begin_write but never -ENOSPC (zero blocks take no room).
 */
int __must_check disk__begin_zero(struct disk *d, uint64_t offset, uint64_t len,
				  struct disk_extent *ext);
void disk__end_zero(struct disk *d, uint64_t offset, uint64_t len, bool ok);

#endif
