/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_QCOW2_INTERNAL_H
#define KILN_QCOW2_INTERNAL_H

/*
 * Shared by qcow2.c (header, L1 table, open) and qcow2-map.c (L2 tables,
 * compressed clusters, the caches). Names follow the qcow2 specification
 * (QEMU's docs/interop/qcow2.txt). All on-disk integers are big-endian.
 */

#include <stdbool.h>
#include <stdint.h>

#include "devices/block/qcow2.h"

#define QCOW2_MIN_CLUSTER_BITS 12   /* 4 KiB */
#define QCOW2_MAX_CLUSTER_BITS 21   /* 2 MiB */
#define QCOW2_SECTOR_SIZE      512U /* compressed sizes count these */

/* L1 and standard L2 entries: the host offset, bits 9-55. */
#define QCOW2_OFFSET_MASK      0x00fffffffffffe00ULL
#define QCOW2_OFLAG_COPIED     (1ULL << 63)
#define QCOW2_OFLAG_COMPRESSED (1ULL << 62)
#define QCOW2_OFLAG_ZERO       (1ULL << 0) /* version 3 standard entries */
/* Bits an L1 entry must leave clear: 0-8 and 56-62. */
#define QCOW2_L1E_RESERVED 0x7f000000000001ffULL
/* Bits a standard L2 entry must leave clear: 1-8 and 56-61. */
#define QCOW2_L2E_RESERVED 0x3f000000000001feULL

enum qcow2_compression {
	QCOW2_COMPRESSION_ZLIB = 0,
	QCOW2_COMPRESSION_ZSTD = 1,
};

/* A region of the file that no cluster may overlap: header or a table. */
struct qcow2_region {
	uint64_t start, end; /* bytes, [start, end) */
};

/* One cached L2 table. */
struct qcow2_l2_slot {
	uint64_t *table;   /* cluster_size bytes, big-endian entries */
	uint32_t l1_index; /* which table, when used */
	uint64_t last_use; /* q->clock at the last hit */
	bool used;
};

/* One inflated compressed cluster. */
struct qcow2_z_slot {
	uint8_t *data;	   /* cluster_size bytes */
	uint64_t entry;	   /* the L2 entry it was inflated from */
	uint64_t last_use; /* q->clock at the last hit */
	uint64_t read_gen; /* == q->read_gen: handed out in this read */
	bool used;
};

struct qcow2 {
	int fd; /* the caller's */
	char *path;
	uint64_t file_size;    /* bytes */
	uint64_t virtual_size; /* bytes */
	unsigned int version;  /* 2 or 3 */
	unsigned int cluster_bits;
	uint64_t cluster_size;
	unsigned int l2_bits; /* log2 of the entries in an L2 table */
	enum qcow2_compression compression;

	uint64_t *l1;	     /* l1_entries host-endian entries (validated) */
	uint32_t l1_entries; /* what the virtual size needs */
	/* The header cluster, the L1 and refcount tables, snapshots. */
	struct qcow2_region fixed[4];
	unsigned int nr_fixed;
	uint64_t *l2_offsets; /* sorted host offsets of the L2 tables */
	uint32_t nr_l2;

	/* L2 cache: l2_slot_of[l1 index] is a slot + 1, 0 when not cached. */
	uint16_t *l2_slot_of;
	struct qcow2_l2_slot *l2_cache;
	unsigned int nr_l2_slots;
	uint64_t clock;

	/* Inflated clusters; zin holds one compressed cluster's bytes. */
	struct qcow2_z_slot *z_cache;
	unsigned int nr_z_slots;
	uint8_t *zin; /* allocated at the first compressed cluster */
	void *zstd;   /* ZSTD_DCtx, made at the first zstd cluster */
	uint64_t read_gen;

	bool warned; /* a damaged entry was logged once already */
};

/* pread of exactly len bytes at off; -EIO when the file ends first. */
int qcow2_read(const struct qcow2 *q, void *buf, uint64_t len, uint64_t off);
/* Does [start, start + len) overlap the header or a table? */
bool qcow2_overlaps_metadata(const struct qcow2 *q, uint64_t start,
			     uint64_t len);
/* Sizes the caches; -ENOMEM. Called by qcow2__open once L1 is known. */
int qcow2_cache_init(struct qcow2 *q);
void qcow2_cache_free(struct qcow2 *q);

#endif
