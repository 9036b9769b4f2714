// SPDX-License-Identifier: GPL-2.0
/*
 * qcow2 images as read-only bases: the header and the L1 table, checked
 * at open against the file's size before anything is allocated from
 * them (Documentation/rootfs.md, "qcow2 bases"). The data path (L2
 * tables, compressed clusters, caches) is qcow2-map.c.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/block/qcow2-internal.h"
#include "lib/errf.h"

/* ---- the header (the specification's field names and offsets) ------- */

#define QCOW2_MAGIC 0x514649fbU /* "QFI\xfb" */

#define H_MAGIC			  0   /* be32 */
#define H_VERSION		  4   /* be32 */
#define H_BACKING_FILE_OFFSET	  8   /* be64 */
#define H_BACKING_FILE_SIZE	  16  /* be32 */
#define H_CLUSTER_BITS		  20  /* be32 */
#define H_SIZE			  24  /* be64, bytes */
#define H_CRYPT_METHOD		  32  /* be32 */
#define H_L1_SIZE		  36  /* be32, entries */
#define H_L1_TABLE_OFFSET	  40  /* be64 */
#define H_REFCOUNT_TABLE_OFFSET	  48  /* be64 */
#define H_REFCOUNT_TABLE_CLUSTERS 56  /* be32 */
#define H_NB_SNAPSHOTS		  60  /* be32 */
#define H_SNAPSHOTS_OFFSET	  64  /* be64 */
#define H_V2_LENGTH		  72  /* a version 2 header ends here */
#define H_INCOMPATIBLE_FEATURES	  72  /* be64, version 3 from here on */
#define H_COMPATIBLE_FEATURES	  80  /* be64 */
#define H_AUTOCLEAR_FEATURES	  88  /* be64 */
#define H_REFCOUNT_ORDER	  96  /* be32 */
#define H_HEADER_LENGTH		  100 /* be32 */
#define H_V3_MIN_LENGTH		  104
#define H_COMPRESSION_TYPE	  104 /* u8, when header_length > 104 */
#define H_READ_LENGTH		  112 /* what we read of the header */

/* incompatible_features bits */
#define INCOMPAT_DIRTY	     (UINT64_C(1) << 0)
#define INCOMPAT_CORRUPT     (UINT64_C(1) << 1)
#define INCOMPAT_DATA_FILE   (UINT64_C(1) << 2)
#define INCOMPAT_COMPRESSION (UINT64_C(1) << 3)
#define INCOMPAT_EXTL2	     (UINT64_C(1) << 4)
#define INCOMPAT_KNOWN	     INCOMPAT_COMPRESSION

#define V2_REFCOUNT_ORDER  4	  /* 16-bit refcounts, fixed in version 2 */
#define MAX_REFCOUNT_ORDER 6	  /* 64-bit refcounts */
#define MAX_NB_SNAPSHOTS   65536U /* the specification's limit */
/*
 * Bounds on what a header can make us allocate: the L1 table we read is
 * what the virtual size needs, at most 32 MiB (QEMU's own limit, 4 PiB
 * of 64 KiB clusters), and it must lie inside the file.
 */
#define MAX_L1_BYTES	 (32ULL << 20)
#define MAX_VIRTUAL_SIZE (1ULL << 60) /* bytes; no shift below overflows */

static uint32_t get_be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static uint64_t get_be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

int qcow2_read(const struct qcow2 *q, void *buf, uint64_t len, uint64_t off)
{
	ssize_t r;

	while (len) {
		r = pread(q->fd, buf, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		buf = (uint8_t *)buf + r;
		len -= (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static bool regions_overlap(uint64_t a, uint64_t alen, uint64_t b,
			    uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

bool qcow2_overlaps_metadata(const struct qcow2 *q, uint64_t start,
			     uint64_t len)
{
	const struct qcow2_region *r;
	uint64_t lo = 0, hi = q->nr_l2, first;

	for (r = q->fixed; r < q->fixed + q->nr_fixed; r++)
		if (regions_overlap(start, len, r->start, r->end - r->start))
			return true;
	/* The first L2 table that ends after start, by binary search. */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (q->l2_offsets[mid] + q->cluster_size <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	first = lo;
	return first < q->nr_l2 && q->l2_offsets[first] < start + len;
}

/*
 * A table of len bytes at off: cluster aligned, past the header cluster
 * and inside the file. what: "L1 table", for the message.
 */
static int table_check(const struct qcow2 *q, const char *what, uint64_t off,
		       uint64_t len, char *err, size_t errlen)
{
	if (off % q->cluster_size || off < q->cluster_size)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: %s offset %" PRIu64
			    " is not a cluster past the header",
			    q->path, what, off);
	if (off > q->file_size || len > q->file_size - off)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: %s (%" PRIu64 " bytes at %" PRIu64
			    ") runs past the end of the file (%" PRIu64
			    " bytes)",
			    q->path, what, len, off, q->file_size);
	return 0;
}

static int add_fixed(struct qcow2 *q, const char *what, uint64_t off,
		     uint64_t len, char *err, size_t errlen)
{
	unsigned int i;

	for (i = 0; i < q->nr_fixed; i++)
		if (regions_overlap(off, len, q->fixed[i].start,
				    q->fixed[i].end - q->fixed[i].start))
			return errf(err, errlen, -EINVAL,
				    "qcow2 image %s: %s at %" PRIu64
				    " overlaps the header or another table",
				    q->path, what, off);
	q->fixed[q->nr_fixed++] = (struct qcow2_region){ off, off + len };
	return 0;
}

/* Everything of version 3 past the version 2 fields. */
static int check_v3(struct qcow2 *q, const uint8_t *h, char *err, size_t errlen)
{
	uint64_t incompat = get_be64(h + H_INCOMPATIBLE_FEATURES);
	uint32_t order = get_be32(h + H_REFCOUNT_ORDER);
	uint32_t hlen = get_be32(h + H_HEADER_LENGTH);
	uint8_t type = 0;

	if (incompat & INCOMPAT_DIRTY)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: the dirty bit is set (refcounts "
			    "need repair: qemu-img check -r all)",
			    q->path);
	if (incompat & INCOMPAT_CORRUPT)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: marked corrupt", q->path);
	if (incompat & INCOMPAT_DATA_FILE)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: an external data file is not "
			    "supported",
			    q->path);
	if (incompat & INCOMPAT_EXTL2)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: extended L2 entries (subclusters) "
			    "are not supported",
			    q->path);
	if (incompat & ~INCOMPAT_KNOWN)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: unknown incompatible features "
			    "0x%" PRIx64,
			    q->path, incompat & ~INCOMPAT_KNOWN);
	if (order > MAX_REFCOUNT_ORDER)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: refcount order %u (at most %u)",
			    q->path, order, MAX_REFCOUNT_ORDER);
	if (hlen < H_V3_MIN_LENGTH || hlen > q->cluster_size || hlen % 8)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: header length %u (a multiple of "
			    "8 from %u to the cluster size)",
			    q->path, hlen, H_V3_MIN_LENGTH);
	if (hlen > H_COMPRESSION_TYPE)
		type = h[H_COMPRESSION_TYPE];
	if (type > QCOW2_COMPRESSION_ZSTD)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: unknown compression type %u",
			    q->path, type);
	if (type != QCOW2_COMPRESSION_ZLIB &&
	    !(incompat & INCOMPAT_COMPRESSION))
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: compression type %u without its "
			    "incompatible feature bit",
			    q->path, type);
	q->compression = type;
	return 0;
}

static int check_header(struct qcow2 *q, const uint8_t *h, char *err,
			size_t errlen)
{
	uint32_t magic = get_be32(h + H_MAGIC);
	uint64_t per_l1, needed;
	int ret;

	if (magic != QCOW2_MAGIC)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: bad magic 0x%08x (not a qcow2 "
			    "file)",
			    q->path, magic);
	q->version = get_be32(h + H_VERSION);
	if (q->version != 2 && q->version != 3)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: version %u (only 2 and 3)",
			    q->path, q->version);
	q->cluster_bits = get_be32(h + H_CLUSTER_BITS);
	if (q->cluster_bits < QCOW2_MIN_CLUSTER_BITS ||
	    q->cluster_bits > QCOW2_MAX_CLUSTER_BITS)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: cluster_bits %u (clusters of "
			    "4 KiB to 2 MiB only)",
			    q->path, q->cluster_bits);
	q->cluster_size = 1ULL << q->cluster_bits;
	q->l2_bits = q->cluster_bits - 3;
	if (get_be32(h + H_CRYPT_METHOD))
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: encrypted (method %u): not "
			    "supported",
			    q->path, get_be32(h + H_CRYPT_METHOD));
	if (get_be64(h + H_BACKING_FILE_OFFSET) ||
	    get_be32(h + H_BACKING_FILE_SIZE))
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: has a backing file: not supported "
			    "(make it standalone: qemu-img convert -O qcow2)",
			    q->path);
	if (q->version == 3) {
		ret = check_v3(q, h, err, errlen);
		if (ret)
			return ret;
	}
	q->virtual_size = get_be64(h + H_SIZE);
	if (!q->virtual_size || q->virtual_size > MAX_VIRTUAL_SIZE)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: virtual size %" PRIu64
			    " (1 byte to 1 EiB)",
			    q->path, q->virtual_size);
	per_l1 = q->cluster_bits + q->l2_bits; /* log2 bytes per L1 entry */
	needed = (q->virtual_size + (1ULL << per_l1) - 1) >> per_l1;
	if (needed > MAX_L1_BYTES / sizeof(uint64_t))
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: virtual size %" PRIu64
			    " needs %" PRIu64 " L1 entries (at most %llu)",
			    q->path, q->virtual_size, needed,
			    MAX_L1_BYTES / sizeof(uint64_t));
	q->l1_entries = (uint32_t)needed;
	return 0;
}

/* The header's tables: each inside the file, none overlapping another. */
static int check_tables(struct qcow2 *q, const uint8_t *h, char *err,
			size_t errlen)
{
	uint32_t l1_size = get_be32(h + H_L1_SIZE);
	uint64_t l1_off = get_be64(h + H_L1_TABLE_OFFSET);
	uint64_t rt_off = get_be64(h + H_REFCOUNT_TABLE_OFFSET);
	uint64_t rt_len = (uint64_t)get_be32(h + H_REFCOUNT_TABLE_CLUSTERS)
			  << q->cluster_bits;
	uint32_t nb_snap = get_be32(h + H_NB_SNAPSHOTS);
	uint64_t snap_off = get_be64(h + H_SNAPSHOTS_OFFSET);
	int ret;

	if (l1_size < q->l1_entries)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: L1 table of %u entries, the "
			    "virtual size needs %u",
			    q->path, l1_size, q->l1_entries);
	if ((uint64_t)l1_size * sizeof(uint64_t) > MAX_L1_BYTES)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: L1 table of %u entries (at most "
			    "%llu)",
			    q->path, l1_size, MAX_L1_BYTES / sizeof(uint64_t));
	q->fixed[q->nr_fixed++] = (struct qcow2_region){ 0, q->cluster_size };
	ret = table_check(q, "L1 table", l1_off, l1_size * sizeof(uint64_t),
			  err, errlen);
	if (!ret)
		ret = add_fixed(q, "L1 table", l1_off,
				l1_size * sizeof(uint64_t), err, errlen);
	if (!ret && !rt_len)
		ret = errf(err, errlen, -EINVAL,
			   "qcow2 image %s: no refcount table", q->path);
	if (!ret)
		ret = table_check(q, "refcount table", rt_off, rt_len, err,
				  errlen);
	if (!ret)
		ret = add_fixed(q, "refcount table", rt_off, rt_len, err,
				errlen);
	if (ret || !nb_snap)
		return ret;
	if (nb_snap > MAX_NB_SNAPSHOTS)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: %u snapshots (at most %u)",
			    q->path, nb_snap, MAX_NB_SNAPSHOTS);
	/* Never read: only its first cluster is kept clear of data. */
	ret = table_check(q, "snapshot table", snap_off, q->cluster_size, err,
			  errlen);
	return ret ? ret :
		     add_fixed(q, "snapshot table", snap_off, q->cluster_size,
			       err, errlen);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Reads the L1 entries the virtual size needs; checks each L2 table. */
static int load_l1(struct qcow2 *q, uint64_t l1_off, char *err, size_t errlen)
{
	uint32_t i, nr = 0;
	uint64_t e, off;
	int ret;

	q->l1 = calloc(q->l1_entries, sizeof(*q->l1));
	q->l2_offsets = calloc(q->l1_entries, sizeof(*q->l2_offsets));
	if (!q->l1 || !q->l2_offsets)
		return errf(err, errlen, -ENOMEM, "qcow2 image %s: %s", q->path,
			    strerror(ENOMEM));
	ret = qcow2_read(q, q->l1, q->l1_entries * sizeof(*q->l1), l1_off);
	if (ret)
		return errf(err, errlen, ret,
			    "qcow2 image %s: reading the L1 table: %s", q->path,
			    strerror(-ret));
	for (i = 0; i < q->l1_entries; i++) {
		e = be64toh(q->l1[i]);
		q->l1[i] = e;
		off = e & QCOW2_OFFSET_MASK;
		if (e & QCOW2_L1E_RESERVED)
			return errf(err, errlen, -EINVAL,
				    "qcow2 image %s: L1 entry %u has reserved "
				    "bits set (0x%016" PRIx64 ")",
				    q->path, i, e);
		if (!off)
			continue;
		if (off % q->cluster_size || off > q->file_size ||
		    q->cluster_size > q->file_size - off ||
		    qcow2_overlaps_metadata(q, off, q->cluster_size))
			return errf(err, errlen, -EINVAL,
				    "qcow2 image %s: L1 entry %u points to an "
				    "L2 table at %" PRIu64
				    " that is unaligned, past the end of the "
				    "file or over the header or a table",
				    q->path, i, off);
		q->l2_offsets[nr++] = off;
	}
	/* Sorted, then in use: qcow2_overlaps_metadata searches it. */
	qsort(q->l2_offsets, nr, sizeof(*q->l2_offsets), cmp_u64);
	q->nr_l2 = nr;
	/* Aligned clusters overlap only when they are the same. */
	for (i = 1; i < q->nr_l2; i++)
		if (q->l2_offsets[i] == q->l2_offsets[i - 1])
			return errf(err, errlen, -EINVAL,
				    "qcow2 image %s: two L1 entries share the "
				    "L2 table at %" PRIu64,
				    q->path, q->l2_offsets[i]);
	return 0;
}

static int file_size(struct qcow2 *q, char *err, size_t errlen)
{
	off_t end = lseek(q->fd, 0, SEEK_END);

	if (end < 0)
		return errf(err, errlen, -errno, "qcow2 image %s: lseek: %s",
			    q->path, strerror(errno));
	q->file_size = (uint64_t)end;
	if (q->file_size < H_READ_LENGTH)
		return errf(err, errlen, -EINVAL,
			    "qcow2 image %s: %" PRIu64
			    " bytes: too short for a qcow2 header",
			    q->path, q->file_size);
	return 0;
}

int qcow2__open(struct qcow2 **out, int fd, const char *path, char *err,
		size_t errlen)
{
	uint8_t h[H_READ_LENGTH];
	struct qcow2 *q;
	int ret;

	*out = NULL;
	q = calloc(1, sizeof(*q));
	if (!q || !(q->path = strdup(path))) {
		free(q);
		return errf(err, errlen, -ENOMEM, "qcow2 image %s: %s", path,
			    strerror(ENOMEM));
	}
	q->fd = fd;
	ret = file_size(q, err, errlen);
	if (ret)
		goto out_close;
	ret = qcow2_read(q, h, sizeof(h), 0);
	if (ret) {
		errf(err, errlen, ret, "qcow2 image %s: reading the header: %s",
		     path, strerror(-ret));
		goto out_close;
	}
	ret = check_header(q, h, err, errlen);
	if (!ret)
		ret = check_tables(q, h, err, errlen);
	if (!ret)
		ret = load_l1(q, get_be64(h + H_L1_TABLE_OFFSET), err, errlen);
	if (!ret) {
		ret = qcow2_cache_init(q);
		if (ret)
			errf(err, errlen, ret, "qcow2 image %s: caches: %s",
			     path, strerror(-ret));
	}
	if (ret)
		goto out_close;
	*out = q;
	return 0;

out_close:
	qcow2__close(q);
	return ret;
}

void qcow2__close(struct qcow2 *q)
{
	if (!q)
		return;
	qcow2_cache_free(q);
	free(q->l2_offsets);
	free(q->l1);
	free(q->path);
	free(q);
}

uint64_t qcow2__virtual_size(const struct qcow2 *q)
{
	return q->virtual_size;
}

uint32_t qcow2__cluster_size(const struct qcow2 *q)
{
	return (uint32_t)q->cluster_size;
}
