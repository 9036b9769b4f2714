// SPDX-License-Identifier: GPL-2.0
/*
 * The qcow2 data path: guest offset -> L1 entry -> L2 table -> cluster.
 * L2 tables and inflated compressed clusters are kept in two bounded
 * caches (QCOW2_L2_CACHE_BYTES, QCOW2_Z_CACHE_BYTES); data clusters are
 * never copied: the caller reads them from the file. Every entry read
 * from an L2 table is checked before use: a hostile one fails the request
 * with -EIO and is logged once per image.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "devices/block/qcow2-internal.h"
#include "lib/log.h"

/*
 * The caches' bounds, whatever the image says: L2 tables take at most
 * 4 MiB (1024 tables of 4 KiB clusters ... 2 of 2 MiB ones), inflated
 * clusters at most 4 MiB in at most 64 slots, never fewer than 2 of
 * either. With the compressed input buffer (2 clusters at most: the
 * specification's sector count) a reader holds at most 12 MiB besides
 * its L1 table.
 */
#define QCOW2_L2_CACHE_BYTES (4U << 20)
#define QCOW2_L2_MAX_SLOTS   1024U
#define QCOW2_Z_CACHE_BYTES  (4U << 20)
#define QCOW2_Z_MAX_SLOTS    64U
#define QCOW2_MIN_SLOTS	     2U
/* Raw deflate (no zlib header), any window size up to the largest. */
#define ZLIB_RAW_WINDOW_BITS (-15)

static unsigned int slots_for(const struct qcow2 *q, uint64_t bytes,
			      unsigned int max)
{
	uint64_t n = bytes / q->cluster_size;

	if (n > max)
		n = max;
	return n < QCOW2_MIN_SLOTS ? QCOW2_MIN_SLOTS : (unsigned int)n;
}

int qcow2_cache_init(struct qcow2 *q)
{
	q->nr_l2_slots = slots_for(q, QCOW2_L2_CACHE_BYTES, QCOW2_L2_MAX_SLOTS);
	q->nr_z_slots = slots_for(q, QCOW2_Z_CACHE_BYTES, QCOW2_Z_MAX_SLOTS);
	q->l2_slot_of = calloc(q->l1_entries, sizeof(*q->l2_slot_of));
	q->l2_cache = calloc(q->nr_l2_slots, sizeof(*q->l2_cache));
	q->z_cache = calloc(q->nr_z_slots, sizeof(*q->z_cache));
	if (!q->l2_slot_of || !q->l2_cache || !q->z_cache)
		return -ENOMEM;
	return 0;
}

void qcow2_cache_free(struct qcow2 *q)
{
	unsigned int i;

	for (i = 0; q->l2_cache && i < q->nr_l2_slots; i++)
		free(q->l2_cache[i].table);
	for (i = 0; q->z_cache && i < q->nr_z_slots; i++)
		free(q->z_cache[i].data);
	free(q->l2_cache);
	free(q->z_cache);
	free(q->l2_slot_of);
	free(q->zin);
	ZSTD_freeDCtx(q->zstd); /* NULL is fine */
}

/* A damaged entry: the request fails; the first one is logged. */
static int hostile(struct qcow2 *q, uint64_t offset, const char *why,
		   uint64_t entry)
{
	if (!q->warned)
		pr_warn("qcow2 image %s: guest offset %" PRIu64 ": %s (entry "
			"0x%016" PRIx64 "); its reads fail with EIO",
			q->path, offset, why, entry);
	q->warned = true;
	return -EIO;
}

/* ---- L2 tables ------------------------------------------------------- */

static int l2_get(struct qcow2 *q, uint32_t l1_index, const uint64_t **out)
{
	struct qcow2_l2_slot *s, *victim = NULL;
	unsigned int i;
	int ret;

	q->clock++;
	if (q->l2_slot_of[l1_index]) {
		s = &q->l2_cache[q->l2_slot_of[l1_index] - 1];
		s->last_use = q->clock;
		*out = s->table;
		return 0;
	}
	for (i = 0; i < q->nr_l2_slots; i++) {
		s = &q->l2_cache[i];
		if (!s->used) {
			victim = s;
			break;
		}
		if (!victim || s->last_use < victim->last_use)
			victim = s;
	}
	if (victim->used)
		q->l2_slot_of[victim->l1_index] = 0;
	victim->used = false;
	if (!victim->table) {
		victim->table = malloc(q->cluster_size);
		if (!victim->table)
			return -ENOMEM;
	}
	/* load_l1 checked the offset: aligned, inside, clear of tables. */
	ret = qcow2_read(q, victim->table, q->cluster_size,
			 q->l1[l1_index] & QCOW2_OFFSET_MASK);
	if (ret)
		return ret;
	victim->used = true;
	victim->l1_index = l1_index;
	victim->last_use = q->clock;
	q->l2_slot_of[l1_index] = (uint16_t)(victim - q->l2_cache + 1);
	*out = victim->table;
	return 0;
}

/* ---- compressed clusters --------------------------------------------- */

static int inflate_zlib(struct qcow2 *q, uint64_t in_len, uint8_t *dst)
{
	z_stream s = {
		.next_in = q->zin,
		.avail_in = (uInt)in_len,
		.next_out = dst,
		.avail_out = (uInt)q->cluster_size,
	};
	int r;

	if (inflateInit2(&s, ZLIB_RAW_WINDOW_BITS) != Z_OK)
		return -ENOMEM;
	/* Input past the stream's end is sector padding: not an error. */
	r = inflate(&s, Z_FINISH);
	inflateEnd(&s);
	if (r != Z_STREAM_END && r != Z_OK && r != Z_BUF_ERROR)
		return -EIO;
	return s.avail_out ? -EIO : 0;
}

static int inflate_zstd(struct qcow2 *q, uint64_t in_len, uint8_t *dst)
{
	ZSTD_inBuffer in = { q->zin, in_len, 0 };
	ZSTD_outBuffer out = { dst, q->cluster_size, 0 };
	size_t r, in_pos, out_pos;

	if (!q->zstd) {
		q->zstd = ZSTD_createDCtx();
		if (!q->zstd)
			return -ENOMEM;
	}
	ZSTD_DCtx_reset(q->zstd, ZSTD_reset_session_only);
	/* Each round moves in or out forward, or the loop ends. */
	while (out.pos < out.size) {
		in_pos = in.pos;
		out_pos = out.pos;
		r = ZSTD_decompressStream(q->zstd, &out, &in);
		if (ZSTD_isError(r))
			return -EIO;
		if (!r || (in.pos == in_pos && out.pos == out_pos))
			break;
	}
	return out.pos == out.size ? 0 : -EIO;
}

static struct qcow2_z_slot *z_find(struct qcow2 *q, uint64_t entry)
{
	unsigned int i;

	for (i = 0; i < q->nr_z_slots; i++)
		if (q->z_cache[i].used && q->z_cache[i].entry == entry)
			return &q->z_cache[i];
	return NULL;
}

/* The least recently used slot this read has not handed out; or NULL. */
static struct qcow2_z_slot *z_victim(struct qcow2 *q)
{
	struct qcow2_z_slot *s, *victim = NULL;
	unsigned int i;

	for (i = 0; i < q->nr_z_slots; i++) {
		s = &q->z_cache[i];
		if (s->used && s->read_gen == q->read_gen)
			continue;
		if (!s->used)
			return s;
		if (!victim || s->last_use < victim->last_use)
			victim = s;
	}
	return victim;
}

static int map_compressed(struct qcow2 *q, uint64_t offset, uint64_t entry,
			  struct qcow2_extent *ext)
{
	/* Bits 0..x-1: host offset; x..61: extra 512-byte sectors. */
	unsigned int x = 62 - (q->cluster_bits - 8);
	uint64_t host = entry & ((1ULL << x) - 1);
	uint64_t sectors = (entry >> x) & ((1ULL << (q->cluster_bits - 8)) - 1);
	uint64_t len = (sectors + 1) * QCOW2_SECTOR_SIZE -
		       (host & (QCOW2_SECTOR_SIZE - 1));
	struct qcow2_z_slot *s;
	int ret;

	s = z_find(q, entry);
	if (s)
		goto found;
	if (host < q->cluster_size || host >= q->file_size)
		return hostile(q, offset,
			       "compressed cluster in the header or past the "
			       "end of the file",
			       entry);
	/* The last cluster's sector count may run past the file's end. */
	if (len > q->file_size - host)
		len = q->file_size - host;
	if (qcow2_overlaps_metadata(q, host, len))
		return hostile(q, offset,
			       "compressed cluster over the header or a table",
			       entry);
	s = z_victim(q);
	if (!s)
		return -E2BIG;
	if (!q->zin) {
		/* At most 2^(cluster_bits - 8) sectors: two clusters. */
		q->zin = malloc(2 * q->cluster_size);
		if (!q->zin)
			return -ENOMEM;
	}
	if (!s->data) {
		s->data = malloc(q->cluster_size);
		if (!s->data)
			return -ENOMEM;
	}
	s->used = false;
	ret = qcow2_read(q, q->zin, len, host);
	if (ret)
		return ret;
	ret = q->compression == QCOW2_COMPRESSION_ZSTD ?
		      inflate_zstd(q, len, s->data) :
		      inflate_zlib(q, len, s->data);
	if (ret == -EIO)
		return hostile(q, offset,
			       "compressed cluster does not inflate to one "
			       "cluster",
			       entry);
	if (ret)
		return ret;
	s->used = true;
	s->entry = entry;
found:
	s->last_use = ++q->clock;
	s->read_gen = q->read_gen;
	ext->kind = QCOW2_EXTENT_BUFFER;
	ext->buf = s->data + (offset & (q->cluster_size - 1));
	return 0;
}

/* ---- lookup ------------------------------------------------------------ */

void qcow2__map_begin(struct qcow2 *q)
{
	q->read_gen++;
}

int qcow2__map(struct qcow2 *q, uint64_t offset, uint64_t len,
	       struct qcow2_extent *ext)
{
	uint64_t in = offset & (q->cluster_size - 1);
	uint64_t cluster = offset >> q->cluster_bits, entry, host;
	uint32_t l1_index = (uint32_t)(cluster >> q->l2_bits);
	const uint64_t *table;
	int ret;

	if (!len || offset >= q->virtual_size ||
	    len > q->virtual_size - offset || len > q->cluster_size - in)
		return -EINVAL;
	*ext = (struct qcow2_extent){ .kind = QCOW2_EXTENT_ZERO, .len = len };
	/* offset < virtual_size, so l1_index < l1_entries. */
	if (!(q->l1[l1_index] & QCOW2_OFFSET_MASK))
		return 0; /* no L2 table: unallocated, no backing file */
	ret = l2_get(q, l1_index, &table);
	if (ret)
		return ret;
	entry = be64toh(table[cluster & ((1ULL << q->l2_bits) - 1)]);
	if (entry & QCOW2_OFLAG_COMPRESSED)
		return map_compressed(q, offset, entry, ext);
	if (entry & QCOW2_L2E_RESERVED)
		return hostile(q, offset, "reserved bits set in an L2 entry",
			       entry);
	if (entry & QCOW2_OFLAG_ZERO) {
		if (q->version < 3)
			return hostile(q, offset,
				       "zero flag in a version 2 image", entry);
		return 0;
	}
	host = entry & QCOW2_OFFSET_MASK;
	if (!host)
		return 0; /* unallocated: zeros */
	if (host % q->cluster_size)
		return hostile(q, offset, "unaligned data cluster", entry);
	if (host > q->file_size || q->cluster_size > q->file_size - host)
		return hostile(q, offset,
			       "data cluster past the end of the file", entry);
	if (qcow2_overlaps_metadata(q, host, q->cluster_size))
		return hostile(q, offset,
			       "data cluster over the header or a table",
			       entry);
	ext->kind = QCOW2_EXTENT_FILE;
	ext->offset = host + in;
	return 0;
}
