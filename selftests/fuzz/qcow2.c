// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz qcow2 - a qcow2 base (devices/block/qcow2.c, qcow2-map.c,
 * Documentation/rootfs.md "qcow2 bases"): patches over a small valid
 * version 3 image made here (4 KiB clusters, 64 KiB virtual: one L2
 * table whose entries name a data cluster, a zero cluster, a zlib
 * compressed cluster and nothing), the file cut or grown, then every
 * cluster mapped (256 of them spread over a larger virtual size), twice.
 *
 * Input: a byte of file size choice, maybe that size, then patches (an
 * offset in the template's 24 KiB, up to 16 bytes). The image is a memfd.
 *
 * Checked for every input: a refusal is one line naming the file; an
 * image that opens maps each cluster to zeros, a buffer, or a range of
 * the file past the header cluster and inside the file, or fails with
 * -EIO or -E2BIG only.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <zlib.h>

#include "devices/block/qcow2.h"
#include "selftests/fuzz/fuzz.h"

#define CS	      4096U /* cluster size: cluster_bits 12 */
#define NR_CLUSTERS   6	    /* header, refcounts, L1, L2, data, zdata */
#define TEMPLATE_SIZE (NR_CLUSTERS * CS)
#define VIRTUAL_SIZE  (16U * CS)
#define MAX_PATCHES   32
#define PATCH_MAX     16U
#define MAX_MAPS      256U
#define L2_COMPRESSED (1ULL << 62)
#define L2_COPIED     (1ULL << 63)
#define ERR_LEN	      512

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

/* Raw deflate of one cluster of a pattern into out; its length. */
static size_t deflate_cluster(uint8_t *out, size_t room)
{
	uint8_t in[CS];
	z_stream s = { 0 };
	size_t i, n;

	for (i = 0; i < CS; i++)
		in[i] = (uint8_t)("fuzz"[i % 4] + i / 512);
	fuzz_check(deflateInit2(&s, Z_BEST_COMPRESSION, Z_DEFLATED, -12, 9,
				Z_DEFAULT_STRATEGY) == Z_OK);
	s.next_in = in;
	s.avail_in = CS;
	s.next_out = out;
	s.avail_out = (uInt)room;
	fuzz_check(deflate(&s, Z_FINISH) == Z_STREAM_END);
	n = room - s.avail_out;
	deflateEnd(&s);
	return n;
}

static void make_template(uint8_t *t)
{
	uint8_t *l2 = t + 3 * CS;
	size_t zlen;

	memset(t, 0, TEMPLATE_SIZE);
	put_be32(t + 0, 0x514649fb); /* magic */
	put_be32(t + 4, 3);	     /* version */
	put_be32(t + 20, 12);	     /* cluster_bits */
	put_be64(t + 24, VIRTUAL_SIZE);
	put_be32(t + 36, 1);	  /* l1_size */
	put_be64(t + 40, 2 * CS); /* l1_table_offset */
	put_be64(t + 48, 1 * CS); /* refcount_table_offset */
	put_be32(t + 56, 1);	  /* refcount_table_clusters */
	put_be32(t + 96, 4);	  /* refcount_order */
	put_be32(t + 100, 112);	  /* header_length */
	put_be64(t + 2 * CS, L2_COPIED | 3 * CS);
	put_be64(l2 + 0, L2_COPIED | 4 * CS); /* data */
	put_be64(l2 + 8, 1);		      /* zero flag */
	memset(t + 4 * CS, 0xab, CS);
	zlen = deflate_cluster(t + 5 * CS, CS);
	/* x = 62 - (12 - 8) = 58: sectors past the first above bit 58 */
	put_be64(l2 + 16,
		 L2_COMPRESSED | ((uint64_t)((zlen - 1) / 512) << 58) | 5 * CS);
}

static void check_map(struct qcow2 *q, uint64_t file_size)
{
	uint64_t vsize = qcow2__virtual_size(q), step, off;
	struct qcow2_extent e;
	unsigned int i;
	int ret;

	step = vsize / MAX_MAPS > CS ? vsize / MAX_MAPS / CS * CS : CS;
	for (i = 0, off = 0; i < MAX_MAPS && off < vsize; i++, off += step) {
		uint64_t len = vsize - off < CS ? vsize - off : CS;

		qcow2__map_begin(q);
		ret = qcow2__map(q, off, len, &e);
		fuzz_check(!ret || ret == -EIO || ret == -E2BIG);
		if (ret)
			continue;
		fuzz_check(e.len == len);
		if (e.kind == QCOW2_EXTENT_FILE)
			fuzz_check(e.offset >= CS && e.offset <= file_size &&
				   e.len <= file_size - e.offset);
		else if (e.kind == QCOW2_EXTENT_BUFFER)
			fuzz_check(e.buf != NULL);
		else
			fuzz_check(e.kind == QCOW2_EXTENT_ZERO);
	}
}

/* The template as made: data, zeros, the inflated pattern, nothing. */
static void check_template(struct qcow2 *q)
{
	struct qcow2_extent e;
	const uint8_t *p;
	size_t i;

	qcow2__map_begin(q);
	fuzz_check(!qcow2__map(q, 0, CS, &e) && e.kind == QCOW2_EXTENT_FILE &&
		   e.offset == 4 * CS);
	fuzz_check(!qcow2__map(q, CS, CS, &e) && e.kind == QCOW2_EXTENT_ZERO);
	fuzz_check(!qcow2__map(q, 2 * CS, CS, &e) &&
		   e.kind == QCOW2_EXTENT_BUFFER);
	p = e.buf;
	for (i = 0; i < CS; i++)
		fuzz_check(p[i] == (uint8_t)("fuzz"[i % 4] + i / 512));
	fuzz_check(!qcow2__map(q, 3 * CS, CS, &e) &&
		   e.kind == QCOW2_EXTENT_ZERO);
}

static void run(const uint8_t *template, struct fuzz_in *in)
{
	static uint8_t img[TEMPLATE_SIZE];
	char path[64], err[ERR_LEN] = "";
	uint64_t file_size = TEMPLATE_SIZE;
	struct qcow2 *q;
	const uint8_t *b;
	unsigned int n;
	size_t len;
	int fd, ret, pass;

	memcpy(img, template, TEMPLATE_SIZE);
	if (fuzz_in__u8(in) & 1)
		file_size = fuzz_in__u16(in);
	for (n = 0; n < MAX_PATCHES && in->left; n++) {
		uint16_t at = fuzz_in__u16(in) % TEMPLATE_SIZE;

		b = fuzz_in__bytes(in, PATCH_MAX, &len);
		if (len > TEMPLATE_SIZE - at)
			len = TEMPLATE_SIZE - at;
		memcpy(img + at, b, len);
	}
	fd = memfd_create("fuzz-qcow2", MFD_CLOEXEC);
	fuzz_check(fd >= 0);
	fuzz_check(pwrite(fd, img, TEMPLATE_SIZE, 0) == TEMPLATE_SIZE);
	fuzz_check(!ftruncate(fd, (off_t)file_size));
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ret = qcow2__open(&q, fd, path, err, sizeof(err));
	if (ret) {
		fuzz_check(ret < 0 && strstr(err, path) && !strchr(err, '\n'));
	} else {
		if (!n && file_size == TEMPLATE_SIZE)
			check_template(q);
		for (pass = 0; pass < 2; pass++)
			check_map(q, file_size);
		qcow2__close(q);
	}
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t template[TEMPLATE_SIZE];
	static bool made;
	struct fuzz_in in;

	fuzz__quiet();
	if (!made) {
		make_template(template);
		made = true;
	}
	fuzz_in__init(&in, data, size);
	run(template, &in);
	return 0;
}
