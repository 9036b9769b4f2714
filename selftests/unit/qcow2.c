// SPDX-License-Identifier: GPL-2.0
/*
 * qcow2 bases (devices/block/qcow2.c, qcow2-map.c) against images made by
 * QEMU's own tools: each image is converted from one raw file, and every
 * byte read through the reader (and through the disk, read-only and with
 * a writable layer) must equal the raw file's. Then hand-made hostile
 * headers, each refused with its reason, and hostile L2 entries, each
 * read as -EIO while the rest of the image still reads.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "devices/block/disk.h"
#include "devices/block/qcow2.h"
#include "lib/compiler.h"
#include "lib/sha256.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "vmm/rootfs.h"

#define BS	 DISK_BLOCK_SIZE
#define RAW_SIZE (6ULL << 20) /* 3 L2 tables of 4 KiB clusters, 3 of 2M */
#define ERR_LEN	 512
#define MAX_EXT	 64
#define K64	 65536ULL

FIXTURE(qcow2)
{
	char dir[64];
	char raw[128];
	char img[128];
	char cache[128];
	uint8_t *data; /* the raw file's bytes */
	char err[ERR_LEN];
};

/*
 * The raw file, per 64 KiB: random (incompressible: stored as is even
 * with -c), a repeating text (compresses), or zeros (left unallocated),
 * and inside the random ones the odd zero 4 KiB block.
 */
static void make_raw(uint8_t *buf)
{
	uint64_t seed = 0x9c0ffee, off, i;

	for (off = 0; off < RAW_SIZE; off += K64) {
		switch ((off / K64) % 5) {
		case 0:
		case 3:
			for (i = 0; i < K64; i++)
				buf[off + i] = (uint8_t)prng__next(&seed);
			memset(buf + off + 2 * BS, 0, BS);
			break;
		case 1:
		case 4:
			for (i = 0; i < K64; i++)
				buf[off + i] = "kiln qcow2 base "[i % 16] ^
					       (uint8_t)(off / K64);
			break;
		default:
			memset(buf + off, 0, K64);
		}
	}
	/* The last block non-zero: the image's end is read too. */
	memset(buf + RAW_SIZE - BS, 0x5a, BS);
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

FIXTURE_SETUP(qcow2)
{
	int fd;

	strcpy(self->dir, "/tmp/kiln-qcow2-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->raw, sizeof(self->raw), "%s/raw.img", self->dir);
	snprintf(self->img, sizeof(self->img), "%s/img.qcow2", self->dir);
	snprintf(self->cache, sizeof(self->cache), "%s/cache", self->dir);
	ASSERT_EQ(0, setenv("KILN_CACHE", self->cache, 1));
	self->data = malloc(RAW_SIZE);
	ASSERT_NE(NULL, self->data);
	make_raw(self->data);
	fd = open(self->raw, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)RAW_SIZE, pwrite(fd, self->data, RAW_SIZE, 0));
	close(fd);
	if (run("command -v qemu-img >/dev/null"))
		SKIP(return, "qemu-img (Debian's qemu-utils) is not installed");
}

FIXTURE_TEARDOWN(qcow2)
{
	free(self->data);
	if (run("rm -rf %s", self->dir))
		TH_LOG("could not remove %s", self->dir);
}

/* qemu-img convert of the raw file into self->img with these options. */
static int convert(FIXTURE_DATA(qcow2) * self, const char *opts)
{
	unlink(self->img);
	return run("qemu-img convert -q -f raw -O qcow2 %s %s %s", opts,
		   self->raw, self->img);
}

/* ---- reading ------------------------------------------------------- */

/* Reads [off, off + len) inside one cluster through the reader. */
static int q_read(struct qcow2 *q, int fd, uint64_t off, uint64_t len,
		  uint8_t *out)
{
	struct qcow2_extent e;
	int ret;

	ret = qcow2__map(q, off, len, &e);
	if (ret)
		return ret;
	if (e.len != len)
		return -ERANGE;
	switch (e.kind) {
	case QCOW2_EXTENT_ZERO:
		memset(out, 0, len);
		return 0;
	case QCOW2_EXTENT_BUFFER:
		memcpy(out, e.buf, len);
		return 0;
	case QCOW2_EXTENT_FILE:
		return pread(fd, out, len, e.offset) == (ssize_t)len ? 0 : -EIO;
	}
	return -EINVAL;
}

/* Every 4 KiB block of the image through the reader, against want. */
static int q_compare(struct qcow2 *q, int fd, const uint8_t *want,
		     uint64_t size)
{
	uint8_t buf[BS];
	uint64_t off;
	int ret;

	for (off = 0; off < size; off += BS) {
		qcow2__map_begin(q);
		ret = q_read(q, fd, off, BS, buf);
		if (ret)
			return ret;
		if (memcmp(buf, want + off, BS)) {
			fprintf(stderr, "# differs at %llu\n",
				(unsigned long long)off);
			return -EBADMSG;
		}
	}
	return 0;
}

static int open_img(const char *path, struct qcow2 **q, char *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = qcow2__open(q, fd, path, err, ERR_LEN);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* The image, opened and read whole through the reader. */
static void check_image(FIXTURE_DATA(qcow2) * self,
			struct __test_metadata *_metadata)
{
	struct qcow2 *q;
	int fd;

	fd = open_img(self->img, &q, self->err);
	ASSERT_LE(0, fd) TH_LOG("%s", self->err);
	EXPECT_EQ(RAW_SIZE, qcow2__virtual_size(q));
	EXPECT_EQ(0, q_compare(q, fd, self->data, RAW_SIZE));
	/* A second pass: from the caches now. */
	EXPECT_EQ(0, q_compare(q, fd, self->data, RAW_SIZE));
	qcow2__close(q);
	close(fd);
}

/* Reads the whole disk through disk__map_read as the block device does. */
static int disk_read_all(struct disk *d, uint8_t *out, uint64_t window)
{
	struct disk_extent ext[MAX_EXT];
	uint64_t off, pos;
	int n, i;

	for (off = 0; off < disk__size(d); off += window) {
		n = disk__map_read(d, off, window, ext, MAX_EXT);
		if (n < 0)
			return n;
		for (i = 0, pos = off; i < n; pos += ext[i++].len) {
			if (ext[i].fd >= 0) {
				if (pread(ext[i].fd, out + pos, ext[i].len,
					  ext[i].offset) != (ssize_t)ext[i].len)
					return -EIO;
			} else if (ext[i].buf) {
				memcpy(out + pos, ext[i].buf, ext[i].len);
			} else {
				memset(out + pos, 0, ext[i].len);
			}
		}
		if (pos != off + window)
			return -ERANGE;
	}
	return 0;
}

static const struct {
	const char *name;
	const char *opts;
} images[] = {
	{ "v2 64k", "-o compat=0.10" },
	{ "v2 4k zlib", "-c -o compat=0.10,cluster_size=4096" },
	{ "v3 4k", "-o cluster_size=4096" },
	{ "v3 64k", "" },
	{ "v3 2M", "-o cluster_size=2M" },
	{ "v3 4k zlib", "-c -o cluster_size=4096" },
	{ "v3 64k zlib", "-c" },
	{ "v3 2M zlib", "-c -o cluster_size=2M" },
	{ "v3 4k zstd", "-c -o compression_type=zstd,cluster_size=4096" },
	{ "v3 64k zstd", "-c -o compression_type=zstd" },
	{ "v3 2M zstd", "-c -o compression_type=zstd,cluster_size=2M" },
};

TEST_F(qcow2, qemu_images_read_as_the_raw_file)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(images); i++) {
		TH_LOG("%s", images[i].name);
		ASSERT_EQ(0, convert(self, images[i].opts));
		check_image(self, _metadata);
	}
}

/* The compressed images really hold compressed clusters. */
TEST_F(qcow2, compressed_images_are_smaller)
{
	struct stat plain, packed;

	ASSERT_EQ(0, convert(self, ""));
	ASSERT_EQ(0, stat(self->img, &plain));
	ASSERT_EQ(0, convert(self, "-c -o compression_type=zstd"));
	ASSERT_EQ(0, stat(self->img, &packed));
	EXPECT_LT(packed.st_size + (off_t)(RAW_SIZE / 4), plain.st_size);
}

/* An empty image (qemu-img create) has no L2 table: all zeros. */
TEST_F(qcow2, created_image_reads_zeros)
{
	uint8_t *zero = calloc(1, RAW_SIZE);

	ASSERT_NE(NULL, zero);
	ASSERT_EQ(0, run("qemu-img create -q -f qcow2 %s %llu", self->img,
			 RAW_SIZE));
	memcpy(self->data, zero, RAW_SIZE);
	check_image(self, _metadata);
	free(zero);
}

/* The disk over a qcow2 base: read-only, ephemeral, persistent. */
TEST_F(qcow2, disk_layers_over_a_qcow2_base)
{
	static const enum disk_mode modes[] = { DISK_READONLY, DISK_EPHEMERAL,
						DISK_PERSISTENT };
	struct disk_extent ext;
	struct disk_params p;
	uint64_t reserved;
	uint8_t *buf = malloc(RAW_SIZE), blk[BS];
	char state[160];
	struct disk *d;
	size_t m;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, convert(self, "-c -o cluster_size=2M"));
	snprintf(state, sizeof(state), "%s/state", self->dir);
	for (m = 0; m < ARRAY_SIZE(modes); m++) {
		p = (struct disk_params){
			.base_path = self->img,
			.base_format = DISK_FORMAT_QCOW2,
			.base_size = RAW_SIZE,
			.base_digest = "sha256:0123456789abcdef0123456789abcdef"
				       "0123456789abcdef0123456789abcdef",
			.mode = modes[m],
			.state_path = state,
		};
		ASSERT_EQ(0, disk__open(&d, &p));
		EXPECT_EQ(RAW_SIZE, disk__size(d));
		/* Block by block, then in 1 MiB windows. */
		memset(buf, 0xee, RAW_SIZE);
		EXPECT_EQ(0, disk_read_all(d, buf, BS));
		EXPECT_EQ(0, memcmp(buf, self->data, RAW_SIZE));
		memset(buf, 0xee, RAW_SIZE);
		EXPECT_EQ(0, disk_read_all(d, buf, 1ULL << 20));
		EXPECT_EQ(0, memcmp(buf, self->data, RAW_SIZE));
		if (modes[m] == DISK_READONLY) {
			EXPECT_EQ(-EROFS,
				  disk__begin_write(d, 0, BS, &ext, &reserved));
			disk__close(d);
			continue;
		}
		/* A write lands in the layer; the rest still reads the base. */
		ASSERT_EQ(0, disk__begin_write(d, 5 * BS, BS, &ext, &reserved));
		memset(blk, 0xa5, BS);
		ASSERT_EQ((ssize_t)BS, pwrite(ext.fd, blk, BS, ext.offset));
		disk__end_write(d, 5 * BS, BS, reserved, true);
		memcpy(self->data + 5 * BS, blk, BS);
		EXPECT_EQ(0, disk_read_all(d, buf, 1ULL << 20));
		EXPECT_EQ(0, memcmp(buf, self->data, RAW_SIZE));
		disk__close(d);
		make_raw(self->data);
	}
	/* The persistent layer kept the write, for this base's digest. */
	ASSERT_EQ(0, disk__open(&d, &p));
	EXPECT_EQ(BS, disk__dirty_bytes(d));
	disk__close(d);
	p.base_size = RAW_SIZE + BS;
	EXPECT_EQ(-EINVAL, disk__open(&d, &p));
	p.base_size = RAW_SIZE;
	p.direct = true;
	EXPECT_EQ(-EINVAL, disk__open(&d, &p));
	free(buf);
}

/*
 * One read may hold only as many inflated clusters as the cache has
 * slots (2 of 2 MiB): a window over three compressed 2 MiB clusters is
 * -E2BIG, and the block device's smaller windows then read it.
 */
TEST_F(qcow2, inflated_buffers_of_one_read_stay_valid)
{
	struct qcow2_extent e[3];
	struct qcow2 *q;
	uint8_t *b0;
	int fd;

	ASSERT_EQ(0, convert(self, "-c -o cluster_size=2M"));
	fd = open_img(self->img, &q, self->err);
	ASSERT_LE(0, fd) TH_LOG("%s", self->err);
	qcow2__map_begin(q);
	ASSERT_EQ(0, qcow2__map(q, K64, BS, &e[0]));
	ASSERT_EQ(QCOW2_EXTENT_BUFFER, e[0].kind);
	b0 = malloc(BS);
	ASSERT_NE(NULL, b0);
	memcpy(b0, e[0].buf, BS);
	ASSERT_EQ(0, qcow2__map(q, (2ULL << 20) + K64, BS, &e[1]));
	EXPECT_EQ(-E2BIG, qcow2__map(q, (4ULL << 20) + K64, BS, &e[2]));
	EXPECT_EQ(0, memcmp(b0, e[0].buf, BS));
	EXPECT_EQ(0, memcmp(self->data + K64, e[0].buf, BS));
	qcow2__map_begin(q);
	EXPECT_EQ(0, qcow2__map(q, (4ULL << 20) + K64, BS, &e[2]));
	EXPECT_EQ(0, memcmp(self->data + (4ULL << 20) + K64, e[2].buf, BS));
	/* Out of range or across a cluster: -EINVAL. */
	EXPECT_EQ(-EINVAL, qcow2__map(q, RAW_SIZE, BS, &e[0]));
	EXPECT_EQ(-EINVAL, qcow2__map(q, (2ULL << 20) - BS, 2 * BS, &e[0]));
	free(b0);
	qcow2__close(q);
	close(fd);
}

/*
 * More L2 tables than the cache holds (1024 of 4 KiB clusters): a sparse
 * 3 GiB disk with one block every 2 MiB (1536 L2 tables) reads right
 * twice over, through evictions.
 */
TEST_F(qcow2, l2_cache_evicts)
{
	const uint64_t size = 3ULL << 30, step = 2ULL << 20;
	uint8_t blk[BS], got[BS];
	struct qcow2 *q;
	uint64_t off;
	int fd, pass;

	fd = open(self->raw, O_WRONLY | O_TRUNC | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, size));
	for (off = 0; off < size; off += step) {
		memset(blk, (int)(off / step) | 1, BS);
		ASSERT_EQ((ssize_t)BS, pwrite(fd, blk, BS, off + BS));
	}
	close(fd);
	ASSERT_EQ(0, convert(self, "-o cluster_size=4096"));
	fd = open_img(self->img, &q, self->err);
	ASSERT_LE(0, fd) TH_LOG("%s", self->err);
	for (pass = 0; pass < 2; pass++) {
		for (off = 0; off < size; off += step) {
			memset(blk, (int)(off / step) | 1, BS);
			ASSERT_EQ(0, q_read(q, fd, off + BS, BS, got));
			ASSERT_EQ(0, memcmp(blk, got, BS));
			ASSERT_EQ(0, q_read(q, fd, off, BS, got));
			memset(blk, 0, BS);
			ASSERT_EQ(0, memcmp(blk, got, BS));
		}
	}
	qcow2__close(q);
	close(fd);
}

/* ---- the descriptor ------------------------------------------------ */

static void digest_file(const char *path, char *out)
{
	char hex[SHA256_HEX_LEN + 1];
	static uint8_t buf[1 << 16];
	struct sha256 s;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || sha256__init(&s))
		abort();
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (sha256__update(&s, buf, n))
			abort();
	close(fd);
	if (sha256__final_hex(&s, hex))
		abort();
	sprintf(out, "sha256:%s", hex);
}

static int write_desc(FIXTURE_DATA(qcow2) * self, uint64_t size,
		      const char *digest, struct rootfs_image *img)
{
	char desc[160], doc[1024];
	FILE *f;

	snprintf(desc, sizeof(desc), "%s/img.json", self->dir);
	snprintf(doc, sizeof(doc),
		 "{\"name\": \"q-1\", \"path\": \"img.qcow2\", "
		 "\"format\": \"qcow2\", \"architecture\": \"x86_64\", "
		 "\"digest\": \"%s\", \"sizeBytes\": %llu}",
		 digest, (unsigned long long)size);
	f = fopen(desc, "w");
	if (!f || fputs(doc, f) < 0 || fclose(f))
		abort();
	return rootfs__load(img, desc, self->err, ERR_LEN);
}

/* sizeBytes is the virtual size; the digest is the qcow2 file's. */
TEST_F(qcow2, descriptor_of_a_qcow2_image)
{
	char digest[ROOTFS_DIGEST_LEN + 1];
	struct rootfs_image img;
	struct stat st;

	ASSERT_EQ(0, convert(self, "-c"));
	ASSERT_EQ(0, stat(self->img, &st));
	ASSERT_NE(RAW_SIZE, (uint64_t)st.st_size);
	digest_file(self->img, digest);
	ASSERT_EQ(0, write_desc(self, RAW_SIZE, digest, &img))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(img.qcow2);
	EXPECT_STREQ("qcow2", img.format);
	EXPECT_EQ(0, rootfs__verify_full(&img, self->err, ERR_LEN))
	TH_LOG("%s", self->err);
	rootfs__free(&img);

	/* The file's own size is not the disk's. */
	ASSERT_EQ(0, write_desc(self, (st.st_size + BS - 1) / BS * BS, digest,
				&img));
	EXPECT_EQ(-EINVAL, rootfs__verify_full(&img, self->err, ERR_LEN));
	EXPECT_NE(NULL, strstr(self->err, "virtual size of 6291456 bytes"))
	TH_LOG("%s", self->err);
	rootfs__free(&img);

	/* The digest of the raw content is not the file's. */
	digest_file(self->raw, digest);
	ASSERT_EQ(0, write_desc(self, RAW_SIZE, digest, &img));
	EXPECT_EQ(-EINVAL, rootfs__verify_full(&img, self->err, ERR_LEN));
	EXPECT_NE(NULL, strstr(self->err, "digest: expected"))
	TH_LOG("%s", self->err);
	rootfs__free(&img);

	/* A raw file called qcow2 in its descriptor is refused. */
	digest_file(self->raw, digest);
	rename(self->raw, self->img);
	ASSERT_EQ(0, write_desc(self, RAW_SIZE, digest, &img));
	EXPECT_EQ(-EINVAL, rootfs__verify_full(&img, self->err, ERR_LEN));
	EXPECT_NE(NULL, strstr(self->err, "bad magic")) TH_LOG("%s", self->err);
	rootfs__free(&img);
}

/* ---- hostile images ----------------------------------------------- */

#define QCOW2_HDR_SIZE	    24 /* be64 field offsets of the specification */
#define QCOW2_HDR_L1_OFFSET 40
#define QCOW2_HDR_RT_OFFSET 48
#define QCOW2_OFFSET_MASK   0x00fffffffffffe00ULL
#define QCOW2_COMPRESSED    (1ULL << 62)
#define QCOW2_COPIED	    (1ULL << 63)

static void copy_file(const char *from, const char *to)
{
	static uint8_t buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ssize_t n;

	if (in < 0 || out < 0)
		abort();
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			abort();
	close(in);
	close(out);
}

static uint64_t get_be64_at(const char *path, uint64_t off)
{
	uint64_t v = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || pread(fd, &v, sizeof(v), off) != sizeof(v))
		abort();
	close(fd);
	return be64toh(v);
}

/* Writes width (1, 4 or 8) big-endian bytes of v at off. */
static void patch(const char *path, uint64_t off, int width, uint64_t v)
{
	uint8_t b[8];
	int fd = open(path, O_WRONLY | O_CLOEXEC), i;

	for (i = 0; i < width; i++)
		b[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
	if (fd < 0 || pwrite(fd, b, width, off) != width)
		abort();
	close(fd);
}

static uint64_t file_end(const char *path)
{
	struct stat st;

	if (stat(path, &st))
		abort();
	return ((uint64_t)st.st_size + K64 - 1) / K64 * K64 + 16 * K64;
}

enum hval {
	V_LIT,	     /* the value as given */
	V_PAST_END,  /* a cluster well past the end of the file */
	V_L1_OFFSET, /* the L1 table's offset */
	V_L1_ENTRY,  /* L1 entry 0 as it is */
};

struct hpatch {
	int at; /* offset; -1: L1 entry 0, -2: L1 entry 1; 0 width: none */
	int width;
	enum hval kind;
	uint64_t v;
};

static const struct {
	const char *why;
	struct hpatch p[3];
} bad_headers[] = {
	{ "bad magic 0x514649fa", { { 0, 4, V_LIT, 0x514649fa } } },
	{ "version 4 (only 2 and 3)", { { 4, 4, V_LIT, 4 } } },
	{ "cluster_bits 11", { { 20, 4, V_LIT, 11 } } },
	{ "cluster_bits 22", { { 20, 4, V_LIT, 22 } } },
	{ "encrypted (method 1)", { { 32, 4, V_LIT, 1 } } },
	{ "has a backing file",
	  { { 8, 8, V_LIT, 0x200 }, { 16, 4, V_LIT, 4 } } },
	{ "the dirty bit is set", { { 72, 8, V_LIT, 1 } } },
	{ "marked corrupt", { { 72, 8, V_LIT, 2 } } },
	{ "an external data file", { { 72, 8, V_LIT, 4 } } },
	{ "extended L2 entries", { { 72, 8, V_LIT, 0x10 } } },
	{ "unknown incompatible features 0x80", { { 72, 8, V_LIT, 0x80 } } },
	{ "refcount order 7", { { 96, 4, V_LIT, 7 } } },
	{ "header length 96", { { 100, 4, V_LIT, 96 } } },
	{ "unknown compression type 2",
	  { { 72, 8, V_LIT, 8 }, { 104, 1, V_LIT, 2 } } },
	{ "compression type 1 without", { { 104, 1, V_LIT, 1 } } },
	{ "virtual size 0", { { QCOW2_HDR_SIZE, 8, V_LIT, 0 } } },
	{ "virtual size 4611686018427387904",
	  { { QCOW2_HDR_SIZE, 8, V_LIT, 1ULL << 62 } } },
	{ "L1 entries (at most 4194304)",
	  { { QCOW2_HDR_SIZE, 8, V_LIT, 1ULL << 59 } } },
	{ "L1 table of 1 entries, the virtual size needs 2048",
	  { { QCOW2_HDR_SIZE, 8, V_LIT, 1ULL << 40 } } },
	{ "L1 table of 134217728 entries (at most",
	  { { 36, 4, V_LIT, 1U << 27 } } },
	{ "L1 table (", { { 36, 4, V_LIT, 1U << 20 } } },
	{ "L1 table (8 bytes at", { { QCOW2_HDR_L1_OFFSET, 8, V_PAST_END } } },
	{ "L1 table offset 0 is not a cluster past the header",
	  { { QCOW2_HDR_L1_OFFSET, 8, V_LIT, 0 } } },
	{ "L1 table offset 65537",
	  { { QCOW2_HDR_L1_OFFSET, 8, V_LIT, K64 + 1 } } },
	{ "refcount table at", { { QCOW2_HDR_RT_OFFSET, 8, V_L1_OFFSET } } },
	{ "no refcount table", { { 56, 4, V_LIT, 0 } } },
	{ "refcount table (", { { 56, 4, V_LIT, 1U << 20 } } },
	{ "70000 snapshots", { { 60, 4, V_LIT, 70000 } } },
	{ "L1 entry 0 points", { { -1, 8, V_PAST_END } } },
	{ "L1 entry 0 points", { { -1, 8, V_L1_OFFSET } } },
	{ "L1 entry 0 has reserved bits", { { -1, 8, V_LIT, 0x10001 } } },
	{ "two L1 entries share",
	  { { QCOW2_HDR_SIZE, 8, V_LIT, 1ULL << 30 },
	    { 36, 4, V_LIT, 2 },
	    { -2, 8, V_L1_ENTRY } } },
};

static void apply(const char *path, const struct hpatch *p)
{
	uint64_t l1 = get_be64_at(path, QCOW2_HDR_L1_OFFSET), v = p->v;
	uint64_t at = p->at >= 0 ? (uint64_t)p->at : l1 + 8 * (-p->at - 1);

	if (!p->width)
		return;
	if (p->kind == V_PAST_END)
		v = file_end(path);
	else if (p->kind == V_L1_OFFSET)
		v = l1;
	else if (p->kind == V_L1_ENTRY)
		v = get_be64_at(path, l1);
	patch(path, at, p->width, v);
}

TEST_F(qcow2, hostile_headers_are_refused)
{
	char good[160];
	struct qcow2 *q;
	size_t i, j;
	int fd;

	ASSERT_EQ(0, convert(self, ""));
	snprintf(good, sizeof(good), "%s.good", self->img);
	copy_file(self->img, good);
	for (i = 0; i < ARRAY_SIZE(bad_headers); i++) {
		copy_file(good, self->img);
		for (j = 0; j < ARRAY_SIZE(bad_headers[i].p); j++)
			apply(self->img, &bad_headers[i].p[j]);
		self->err[0] = '\0';
		fd = open_img(self->img, &q, self->err);
		EXPECT_EQ(-EINVAL, fd) TH_LOG("case %zu", i);
		if (fd >= 0) {
			qcow2__close(q);
			close(fd);
		}
		EXPECT_NE(NULL, strstr(self->err, bad_headers[i].why))
		TH_LOG("want \"%s\", got \"%s\"", bad_headers[i].why,
		       self->err);
		EXPECT_NE(NULL, strstr(self->err, self->img));
		EXPECT_EQ(NULL, strchr(self->err, '\n'));
	}
	/* Too short for a header at all. */
	ASSERT_EQ(0, convert(self, ""));
	ASSERT_EQ(0, truncate(self->img, 50));
	EXPECT_EQ(-EINVAL, open_img(self->img, &q, self->err));
	EXPECT_NE(NULL, strstr(self->err, "too short")) TH_LOG("%s", self->err);
}

enum l2val {
	L2_PAST_END,   /* a data cluster past the end of the file */
	L2_UNALIGNED,  /* the data cluster + 4 KiB */
	L2_L1,	       /* the L1 table's cluster */
	L2_REFCOUNT,   /* the refcount table's cluster */
	L2_ITSELF,     /* the L2 table's own cluster */
	L2_RESERVED,   /* bit 57 set */
	L2_Z_HEADER,   /* compressed, 100 bytes into the header */
	L2_Z_GARBAGE,  /* compressed, over the random data cluster */
	L2_Z_PAST_END, /* compressed, past the end */
	L2_V2_ZERO,    /* the zero flag in a version 2 image */
};

/*
 * Guest cluster 0 holds random data: its L2 entry turned hostile makes
 * its reads -EIO, through the reader and the disk, and cluster 3 (random
 * data too) still reads right.
 */
TEST_F(qcow2, hostile_l2_entries_read_as_eio)
{
	struct disk_extent ext[MAX_EXT];
	struct disk_params p;
	uint64_t l1, l2, e, host, v = 0;
	uint8_t got[BS];
	struct qcow2 *q;
	struct disk *d;
	int kind, fd;

	for (kind = L2_PAST_END; kind <= L2_V2_ZERO; kind++) {
		ASSERT_EQ(0,
			  convert(self,
				  kind == L2_V2_ZERO ? "-o compat=0.10" : ""));
		l1 = get_be64_at(self->img, QCOW2_HDR_L1_OFFSET);
		l2 = get_be64_at(self->img, l1) & QCOW2_OFFSET_MASK;
		e = get_be64_at(self->img, l2);
		host = e & QCOW2_OFFSET_MASK;
		ASSERT_NE(0, host);
		switch (kind) {
		case L2_PAST_END:
			v = file_end(self->img);
			break;
		case L2_UNALIGNED:
			v = host + BS;
			break;
		case L2_L1:
			v = l1;
			break;
		case L2_REFCOUNT:
			v = get_be64_at(self->img, QCOW2_HDR_RT_OFFSET);
			break;
		case L2_ITSELF:
			v = l2;
			break;
		case L2_RESERVED:
			v = host | (1ULL << 57);
			break;
		case L2_Z_HEADER:
			v = QCOW2_COMPRESSED | 100;
			break;
		case L2_Z_GARBAGE:
			/* x = 62 - (16 - 8) = 54: 127 more sectors */
			v = QCOW2_COMPRESSED | (127ULL << 54) | host;
			break;
		case L2_Z_PAST_END:
			v = QCOW2_COMPRESSED | file_end(self->img);
			break;
		case L2_V2_ZERO:
			v = e | 1;
			break;
		}
		if (kind < L2_Z_HEADER)
			v |= QCOW2_COPIED;
		patch(self->img, l2, 8, v);
		fd = open_img(self->img, &q, self->err);
		ASSERT_LE(0, fd) TH_LOG("kind %d: %s", kind, self->err);
		qcow2__map_begin(q);
		EXPECT_EQ(-EIO, q_read(q, fd, BS, BS, got))
		TH_LOG("kind %d", kind);
		EXPECT_EQ(-EIO, q_read(q, fd, 0, BS, got));
		EXPECT_EQ(0, q_read(q, fd, 3 * K64, BS, got));
		EXPECT_EQ(0, memcmp(got, self->data + 3 * K64, BS));
		qcow2__close(q);
		close(fd);

		p = (struct disk_params){ .base_path = self->img,
					  .base_format = DISK_FORMAT_QCOW2,
					  .base_size = RAW_SIZE,
					  .mode = DISK_READONLY };
		ASSERT_EQ(0, disk__open(&d, &p));
		EXPECT_EQ(-EIO, disk__map_read(d, 0, 8 * BS, ext, MAX_EXT));
		EXPECT_EQ(1, disk__map_read(d, 3 * K64, BS, ext, MAX_EXT));
		disk__close(d);
	}
}

/* A version 3 zero flag reads zeros, even with a cluster allocated. */
TEST_F(qcow2, zero_flag_reads_zeros)
{
	uint64_t l1, l2, e;

	ASSERT_EQ(0, convert(self, ""));
	l1 = get_be64_at(self->img, QCOW2_HDR_L1_OFFSET);
	l2 = get_be64_at(self->img, l1) & QCOW2_OFFSET_MASK;
	e = get_be64_at(self->img, l2);
	ASSERT_NE(0, e & QCOW2_OFFSET_MASK);
	patch(self->img, l2, 8, e | 1);
	memset(self->data, 0, K64);
	check_image(self, _metadata);
}

TEST_HARNESS_MAIN
