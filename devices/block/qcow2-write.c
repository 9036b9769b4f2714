// SPDX-License-Identifier: GPL-2.0
/*
 * qcow2 version 3 images written in one pass, from the format's
 * specification (QEMU's docs/interop/qcow2.txt); the layout and its
 * invariants are in qcow2-write.h. All numbers in the file are big-endian.
 */
#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/block/qcow2-write.h"
#include "lib/errf.h"

/* The header (the spec's "Header", version 3 fields up to header_length). */
#define QCOW2_MAGIC		    0x514649fbU /* "QFI\xfb" */
#define QCOW2_VERSION		    3U
#define QCOW2_HDR_MAGIC		    0
#define QCOW2_HDR_VERSION	    4
#define QCOW2_HDR_CLUSTER_BITS	    20
#define QCOW2_HDR_SIZE		    24
#define QCOW2_HDR_L1_SIZE	    36
#define QCOW2_HDR_L1_OFFSET	    40
#define QCOW2_HDR_REFTABLE_OFFSET   48
#define QCOW2_HDR_REFTABLE_CLUSTERS 56
#define QCOW2_HDR_REFCOUNT_ORDER    96
#define QCOW2_HDR_HEADER_LENGTH	    100
#define QCOW2_V3_HEADER_LENGTH	    104U
/*
 * refcount_bits = 1 << refcount_order: 16-bit refcounts, the order
 * version 2 implies and QEMU's default.
 */
#define QCOW2_REFCOUNT_ORDER 4U
#define QCOW2_REFCOUNT_BYTES 2U
/* L1 and L2 entries: "1 if its refcount is exactly one". */
#define QCOW2_OFLAG_COPIED (1ULL << 63)
#define QCOW2_ENTRY_BYTES  8U
/* QEMU's implementation limits: larger tables it refuses to open. */
#define QCOW2_MAX_L1_BYTES	 (32ULL << 20)
#define QCOW2_MAX_REFTABLE_BYTES (8ULL << 20)

struct qcow2_writer {
	int fd;
	unsigned int cluster_bits;
	uint64_t cluster_size; /* bytes */
	uint64_t virtual_size; /* bytes */
	uint64_t l2_entries;   /* guest clusters per L2 table */
	uint64_t l1_size;      /* L1 entries */
	uint64_t *l1;	       /* host order; written big-endian */
	uint64_t *l2;	       /* the L2 table being filled, host order */
	uint64_t l2_at;	       /* its L1 index; l1_size: none yet */
	bool l2_dirty;	       /* it maps at least one cluster */
	uint64_t next_guest;   /* the lowest guest offset put may take */
	uint64_t next_host;    /* the next free host cluster, in clusters */
	uint8_t *buf;	       /* one cluster of metadata to write */
	bool finished;
};

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return a / b + !!(a % b);
}

static int write_at(struct qcow2_writer *w, const void *p, size_t n,
		    uint64_t off, const char *what, char *err, size_t len)
{
	const uint8_t *c = p;
	ssize_t k;

	while (n) {
		k = pwrite(w->fd, c, n, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return errf(err, len, k < 0 ? -errno : -EIO,
				    "qcow2: writing %s at %llu: %s", what,
				    (unsigned long long)off,
				    strerror(k < 0 ? errno : EIO));
		c += k;
		n -= k;
		off += k;
	}
	return 0;
}

int qcow2_writer__create(struct qcow2_writer **out, int fd,
			 uint64_t virtual_size, uint32_t cluster_size,
			 char *err, size_t len)
{
	struct qcow2_writer *w;
	uint64_t clusters;

	*out = NULL;
	if (cluster_size < QCOW2_WRITE_CLUSTER_MIN ||
	    cluster_size > QCOW2_WRITE_CLUSTER_MAX ||
	    (cluster_size & (cluster_size - 1)))
		return errf(err, len, -EINVAL,
			    "qcow2: cluster size %u: must be a power of two "
			    "from %u to %u bytes",
			    cluster_size, QCOW2_WRITE_CLUSTER_MIN,
			    QCOW2_WRITE_CLUSTER_MAX);
	if (!virtual_size)
		return errf(err, len, -EINVAL, "qcow2: virtual size 0");
	w = calloc(1, sizeof(*w));
	if (!w)
		return errf(err, len, -ENOMEM, "qcow2: %s", strerror(ENOMEM));
	w->fd = fd;
	w->cluster_size = cluster_size;
	w->cluster_bits = __builtin_ctz(cluster_size);
	w->virtual_size = virtual_size;
	w->l2_entries = cluster_size / QCOW2_ENTRY_BYTES;
	clusters = div_up(virtual_size, cluster_size);
	w->l1_size = div_up(clusters, w->l2_entries);
	w->l2_at = w->l1_size;
	w->next_host = 1; /* cluster 0: the header */
	if (w->l1_size * QCOW2_ENTRY_BYTES > QCOW2_MAX_L1_BYTES) {
		free(w);
		return errf(err, len, -EFBIG,
			    "qcow2: %llu bytes with %u-byte clusters needs an "
			    "L1 table over QEMU's limit of %llu bytes; use "
			    "larger clusters",
			    (unsigned long long)virtual_size, cluster_size,
			    (unsigned long long)QCOW2_MAX_L1_BYTES);
	}
	w->l1 = calloc(w->l1_size, QCOW2_ENTRY_BYTES);
	w->l2 = calloc(w->l2_entries, QCOW2_ENTRY_BYTES);
	w->buf = malloc(cluster_size);
	if (!w->l1 || !w->l2 || !w->buf) {
		qcow2_writer__destroy(w);
		return errf(err, len, -ENOMEM, "qcow2: %s", strerror(ENOMEM));
	}
	*out = w;
	return 0;
}

void qcow2_writer__destroy(struct qcow2_writer *w)
{
	if (!w)
		return;
	free(w->l1);
	free(w->l2);
	free(w->buf);
	free(w);
}

uint64_t qcow2_writer__file_size(const struct qcow2_writer *w)
{
	return w->next_host << w->cluster_bits;
}

/* The L2 table being filled goes after the data clusters it maps. */
static int l2_flush(struct qcow2_writer *w, char *err, size_t len)
{
	uint64_t *be = (uint64_t *)w->buf, host, i;
	int ret;

	if (!w->l2_dirty)
		return 0;
	for (i = 0; i < w->l2_entries; i++)
		be[i] = htobe64(w->l2[i]);
	host = w->next_host << w->cluster_bits;
	ret = write_at(w, w->buf, w->cluster_size, host, "an L2 table", err,
		       len);
	if (ret)
		return ret;
	w->next_host++;
	w->l1[w->l2_at] = host | QCOW2_OFLAG_COPIED;
	memset(w->l2, 0, w->l2_entries * QCOW2_ENTRY_BYTES);
	w->l2_dirty = false;
	return 0;
}

int qcow2_writer__put(struct qcow2_writer *w, uint64_t guest_offset,
		      const void *data, char *err, size_t len)
{
	uint64_t cluster = guest_offset >> w->cluster_bits, host;
	int ret;

	if (w->finished || guest_offset & (w->cluster_size - 1) ||
	    guest_offset >= w->virtual_size || guest_offset < w->next_guest)
		return errf(err, len, -EINVAL,
			    "qcow2: guest cluster at %llu: unaligned, past the "
			    "end or out of order",
			    (unsigned long long)guest_offset);
	if (cluster / w->l2_entries != w->l2_at) {
		ret = l2_flush(w, err, len);
		if (ret)
			return ret;
		w->l2_at = cluster / w->l2_entries;
	}
	host = w->next_host << w->cluster_bits;
	ret = write_at(w, data, w->cluster_size, host, "a data cluster", err,
		       len);
	if (ret)
		return ret;
	w->next_host++;
	w->l2[cluster % w->l2_entries] = host | QCOW2_OFLAG_COPIED;
	w->l2_dirty = true;
	w->next_guest = guest_offset + w->cluster_size;
	return 0;
}

/* The L1 table at the next free cluster, cluster by cluster. */
static int l1_write(struct qcow2_writer *w, uint64_t *offset, char *err,
		    size_t len)
{
	uint64_t per = w->cluster_size / QCOW2_ENTRY_BYTES, i, j, *be;
	uint64_t clusters = div_up(w->l1_size, per);
	int ret;

	*offset = w->next_host << w->cluster_bits;
	be = (uint64_t *)w->buf;
	for (i = 0; i < clusters; i++) {
		memset(w->buf, 0, w->cluster_size);
		for (j = 0; j < per && i * per + j < w->l1_size; j++)
			be[j] = htobe64(w->l1[i * per + j]);
		ret = write_at(w, w->buf, w->cluster_size,
			       (w->next_host + i) << w->cluster_bits,
			       "the L1 table", err, len);
		if (ret)
			return ret;
	}
	w->next_host += clusters;
	return 0;
}

/*
 * The refcount table and blocks go last and count themselves: with
 * `used` clusters before them, find the smallest numbers of table
 * clusters and blocks that cover used + themselves. Both only grow from
 * one round to the next, so this ends (in two or three rounds).
 */
static void refcount_layout(const struct qcow2_writer *w, uint64_t used,
			    uint64_t *table_clusters, uint64_t *blocks)
{
	uint64_t per_block = w->cluster_size / QCOW2_REFCOUNT_BYTES;
	uint64_t per_table = w->cluster_size / QCOW2_ENTRY_BYTES;
	uint64_t t = 0, b = 0, nt, nb;

	for (;;) {
		nb = div_up(used + t + b, per_block);
		nt = div_up(nb, per_table);
		if (nb == b && nt == t)
			break;
		b = nb;
		t = nt;
	}
	*table_clusters = t;
	*blocks = b;
}

static int refcounts_write(struct qcow2_writer *w, uint64_t *table_offset,
			   uint64_t *table_clusters, char *err, size_t len)
{
	uint64_t per_block = w->cluster_size / QCOW2_REFCOUNT_BYTES;
	uint64_t per_table = w->cluster_size / QCOW2_ENTRY_BYTES;
	uint64_t t, b, total, first_block, i, j, *be64;
	uint16_t *be16 = (uint16_t *)w->buf;
	int ret;

	refcount_layout(w, w->next_host, &t, &b);
	if (t * w->cluster_size > QCOW2_MAX_REFTABLE_BYTES)
		return errf(err, len, -EFBIG,
			    "qcow2: the refcount table would be over QEMU's "
			    "limit of %llu bytes; use larger clusters",
			    (unsigned long long)QCOW2_MAX_REFTABLE_BYTES);
	total = w->next_host + t + b;
	*table_offset = w->next_host << w->cluster_bits;
	*table_clusters = t;
	first_block = w->next_host + t;
	be64 = (uint64_t *)w->buf;
	for (i = 0; i < t; i++) {
		memset(w->buf, 0, w->cluster_size);
		for (j = 0; j < per_table && i * per_table + j < b; j++)
			be64[j] = htobe64((first_block + i * per_table + j)
					  << w->cluster_bits);
		ret = write_at(w, w->buf, w->cluster_size,
			       (w->next_host + i) << w->cluster_bits,
			       "the refcount table", err, len);
		if (ret)
			return ret;
	}
	for (i = 0; i < b; i++) {
		memset(w->buf, 0, w->cluster_size);
		for (j = 0; j < per_block && i * per_block + j < total; j++)
			be16[j] = htobe16(1);
		ret = write_at(w, w->buf, w->cluster_size,
			       (first_block + i) << w->cluster_bits,
			       "a refcount block", err, len);
		if (ret)
			return ret;
	}
	w->next_host = total;
	return 0;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static void put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

/*
 * Cluster 0: the header, then zeros, which read as the "end of the header
 * extension area" (type 0) right after header_length. Every field not
 * set here is 0: no backing file, no encryption, no snapshots, no
 * feature bits.
 */
static int header_write(struct qcow2_writer *w, uint64_t l1_offset,
			uint64_t table_offset, uint64_t table_clusters,
			char *err, size_t len)
{
	uint8_t *h = w->buf;

	memset(h, 0, w->cluster_size);
	put_be32(h + QCOW2_HDR_MAGIC, QCOW2_MAGIC);
	put_be32(h + QCOW2_HDR_VERSION, QCOW2_VERSION);
	put_be32(h + QCOW2_HDR_CLUSTER_BITS, w->cluster_bits);
	put_be64(h + QCOW2_HDR_SIZE, w->virtual_size);
	put_be32(h + QCOW2_HDR_L1_SIZE, (uint32_t)w->l1_size);
	put_be64(h + QCOW2_HDR_L1_OFFSET, l1_offset);
	put_be64(h + QCOW2_HDR_REFTABLE_OFFSET, table_offset);
	put_be32(h + QCOW2_HDR_REFTABLE_CLUSTERS, (uint32_t)table_clusters);
	put_be32(h + QCOW2_HDR_REFCOUNT_ORDER, QCOW2_REFCOUNT_ORDER);
	put_be32(h + QCOW2_HDR_HEADER_LENGTH, QCOW2_V3_HEADER_LENGTH);
	return write_at(w, h, w->cluster_size, 0, "the header", err, len);
}

int qcow2_writer__finish(struct qcow2_writer *w, char *err, size_t len)
{
	uint64_t l1_offset = 0, table_offset = 0, table_clusters = 0;
	int ret;

	if (w->finished)
		return errf(err, len, -EINVAL, "qcow2: finished already");
	ret = l2_flush(w, err, len);
	if (!ret)
		ret = l1_write(w, &l1_offset, err, len);
	if (!ret)
		ret = refcounts_write(w, &table_offset, &table_clusters, err,
				      len);
	if (!ret)
		ret = header_write(w, l1_offset, table_offset, table_clusters,
				   err, len);
	if (!ret)
		w->finished = true;
	return ret;
}
