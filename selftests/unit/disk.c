// SPDX-License-Identifier: GPL-2.0
/*
 * Root disk: base image plus writable delta. Each test gets a fresh
 * directory under /tmp holding a 64-block base image filled with a
 * per-block pattern, and plays the block device's part: map, pwrite or
 * punch the returned extents, report back. The base image must come out
 * of every test byte for byte unchanged.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/loop.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "devices/block/disk.h"
#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "snapshot/file.h"

#define BS	  DISK_BLOCK_SIZE
#define NR_BLOCKS 64
#define BASE_SIZE ((uint64_t)NR_BLOCKS * BS)
#define DIGEST    \
	"sha256:" \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DIGEST_2  \
	"sha256:" \
	"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define DATA_OFFSET (1024 * 1024) /* 64 map bytes after the header: 1 MiB */
#define MAX_EXT	    64

FIXTURE(disk)
{
	char dir[64];
	char base[128];
	char state[128];
	struct disk_params p;
};

static uint8_t base_byte(uint64_t blk, size_t i)
{
	return (uint8_t)(blk * 37 + i * 7 + 1);
}

static uint8_t data_byte(uint64_t blk, size_t i, uint8_t seed)
{
	return (uint8_t)(blk * 11 + i * 13 + seed) | 0x80;
}

static void write_base(const char *path, uint64_t nr_blocks)
{
	uint8_t buf[BS];
	uint64_t b;
	size_t i;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		abort();
	for (b = 0; b < nr_blocks; b++) {
		for (i = 0; i < BS; i++)
			buf[i] = base_byte(b, i);
		if (pwrite(fd, buf, BS, b * BS) != BS)
			abort();
	}
	close(fd);
}

FIXTURE_SETUP(disk)
{
	strcpy(self->dir, "/tmp/kiln-disk-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->base, sizeof(self->base), "%s/base.img", self->dir);
	snprintf(self->state, sizeof(self->state), "%s/state", self->dir);
	write_base(self->base, NR_BLOCKS);
	self->p = (struct disk_params){
		.base_path = self->base,
		.base_size = BASE_SIZE,
		.base_digest = DIGEST,
		.mode = DISK_EPHEMERAL,
		.state_path = self->state,
	};
}

FIXTURE_TEARDOWN(disk)
{
	struct dirent *e;
	DIR *dir;

	dir = opendir(self->dir);
	if (!dir)
		return;
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(dir), e->d_name, 0);
	closedir(dir);
	rmdir(self->dir);
}

/* ---- playing the block device ------------------------------------- */

/* Reads [offset, offset + len) the way the block device would. */
static int disk_read(struct disk *d, uint64_t offset, uint64_t len,
		     uint8_t *buf)
{
	struct disk_extent ext[MAX_EXT];
	int n, i;

	n = disk__map_read(d, offset, len, ext, MAX_EXT);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		if (ext[i].fd < 0)
			memset(buf, 0, ext[i].len);
		else if (pread(ext[i].fd, buf, ext[i].len, ext[i].offset) !=
			 (ssize_t)ext[i].len)
			return -EIO;
		buf += ext[i].len;
	}
	return 0;
}

/* Writes blocks [blk, blk + count) with data_byte(seed). */
static int disk_write(struct disk *d, uint64_t blk, uint64_t count,
		      uint8_t seed)
{
	struct disk_extent ext;
	uint64_t reserved, b;
	uint8_t *buf;
	size_t i;
	int ret;

	ret = disk__begin_write(d, blk * BS, count * BS, &ext, &reserved);
	if (ret)
		return ret;
	/* Aligned, so it also serves an O_DIRECT state file. */
	buf = aligned_alloc(BS, count * BS);
	if (!buf)
		abort();
	for (b = 0; b < count; b++)
		for (i = 0; i < BS; i++)
			buf[b * BS + i] = data_byte(blk + b, i, seed);
	ret = pwrite(ext.fd, buf, ext.len, ext.offset) == (ssize_t)ext.len ?
		      0 :
		      -EIO;
	free(buf);
	disk__end_write(d, blk * BS, count * BS, reserved, !ret);
	return ret;
}

static int disk_zero(struct disk *d, uint64_t blk, uint64_t count)
{
	struct disk_extent ext;
	int ret;

	ret = disk__begin_zero(d, blk * BS, count * BS, &ext);
	if (ret)
		return ret;
	ret = fallocate(ext.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			ext.offset, ext.len) ?
		      -errno :
		      0;
	disk__end_zero(d, blk * BS, count * BS, !ret);
	return ret;
}

/* 'b' base, 'z' zeros, or the seed of data_byte(): checks one block. */
static bool block_is(struct disk *d, uint64_t blk, int what)
{
	uint8_t buf[BS];
	size_t i;

	if (disk_read(d, blk * BS, BS, buf))
		return false;
	for (i = 0; i < BS; i++) {
		uint8_t want = what == 'b' ? base_byte(blk, i) :
			       what == 'z' ? 0 :
					     data_byte(blk, i, what);

		if (buf[i] != want)
			return false;
	}
	return true;
}

static bool base_unchanged(const char *path, uint64_t nr_blocks)
{
	uint8_t buf[BS];
	struct stat st;
	bool same = true;
	uint64_t b;
	size_t i;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_size != nr_blocks * BS)
		same = false;
	for (b = 0; same && b < nr_blocks; b++) {
		if (pread(fd, buf, BS, b * BS) != BS)
			same = false;
		for (i = 0; same && i < BS; i++)
			same = buf[i] == base_byte(b, i);
	}
	if (fd >= 0)
		close(fd);
	return same;
}

/* disk__open with stderr captured into msg; returns its result. */
static int open_quiet(struct disk **d, const struct disk_params *p, char *msg,
		      size_t len)
{
	struct stderr_capture c = { 0 };
	int ret;

	if (stderr_capture__begin(&c))
		abort();
	ret = disk__open(d, p);
	stderr_capture__end(&c, msg, len);
	return ret;
}

static int file_size(const char *path, uint64_t *size)
{
	struct stat st;

	if (stat(path, &st))
		return -errno;
	*size = st.st_size;
	return 0;
}

/* ---- read-only ----------------------------------------------------- */

TEST_F(disk, readonly_maps_base_and_refuses_writes)
{
	struct disk_extent ext[MAX_EXT];
	uint64_t reserved = 7;
	struct disk *d;

	self->p.mode = DISK_READONLY;
	self->p.state_path = NULL;
	self->p.base_digest = NULL;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_TRUE(disk__read_only(d));
	EXPECT_EQ(BASE_SIZE, disk__size(d));
	EXPECT_EQ(-1, disk__sync_fd(d));
	EXPECT_EQ(0, disk__dirty_bytes(d));

	ASSERT_EQ(1, disk__map_read(d, 0, BASE_SIZE, ext, MAX_EXT));
	EXPECT_LE(0, ext[0].fd);
	EXPECT_EQ(0, ext[0].offset);
	EXPECT_EQ(BASE_SIZE, ext[0].len);
	ASSERT_EQ(1, disk__map_read(d, 5 * BS, 3 * BS, ext, 1));
	EXPECT_EQ(5 * BS, ext[0].offset);
	EXPECT_EQ(3 * BS, ext[0].len);
	EXPECT_TRUE(block_is(d, 0, 'b'));
	EXPECT_TRUE(block_is(d, NR_BLOCKS - 1, 'b'));

	EXPECT_EQ(-EROFS, disk__begin_write(d, 0, BS, ext, &reserved));
	EXPECT_EQ(0, reserved);
	EXPECT_EQ(-EROFS, disk__begin_zero(d, 0, BS, ext));
	/* Stray end calls are ignored. */
	disk__end_write(d, 0, BS, 0, true);
	disk__end_zero(d, 0, BS, true);
	EXPECT_EQ(0, disk__dirty_bytes(d));
	ASSERT_EQ(1, disk__map_read(d, 0, BASE_SIZE, ext, MAX_EXT));
	disk__close(d);
	disk__close(NULL);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

/* ---- ephemeral ----------------------------------------------------- */

TEST_F(disk, ephemeral_write_then_read)
{
	struct disk_extent ext[MAX_EXT];
	int base_fd, delta_fd;
	struct disk *d;

	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_FALSE(disk__read_only(d));
	EXPECT_EQ(-1, disk__sync_fd(d)); /* memory: nothing to sync */
	ASSERT_EQ(1, disk__map_read(d, 0, BS, ext, MAX_EXT));
	base_fd = ext[0].fd;

	ASSERT_EQ(0, disk_write(d, 3, 3, 1));
	EXPECT_EQ(3 * BS, disk__dirty_bytes(d));

	ASSERT_EQ(3, disk__map_read(d, 0, BASE_SIZE, ext, MAX_EXT));
	EXPECT_EQ(base_fd, ext[0].fd);
	EXPECT_EQ(0, ext[0].offset);
	EXPECT_EQ(3 * BS, ext[0].len);
	delta_fd = ext[1].fd;
	EXPECT_NE(base_fd, delta_fd);
	EXPECT_LE(0, delta_fd);
	EXPECT_EQ(DATA_OFFSET + 3 * BS, ext[1].offset);
	EXPECT_EQ(3 * BS, ext[1].len);
	EXPECT_EQ(base_fd, ext[2].fd);
	EXPECT_EQ(6 * BS, ext[2].offset);
	EXPECT_EQ(BASE_SIZE - 6 * BS, ext[2].len);

	EXPECT_TRUE(block_is(d, 2, 'b'));
	EXPECT_TRUE(block_is(d, 3, 1));
	EXPECT_TRUE(block_is(d, 4, 1));
	EXPECT_TRUE(block_is(d, 5, 1));
	EXPECT_TRUE(block_is(d, 6, 'b'));

	/* A rewrite that overlaps: only block 6 is new. */
	ASSERT_EQ(0, disk_write(d, 5, 2, 2));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 4, 1));
	EXPECT_TRUE(block_is(d, 5, 2));
	EXPECT_TRUE(block_is(d, 6, 2));
	/* The last block, and the whole disk in one write. */
	ASSERT_EQ(0, disk_write(d, NR_BLOCKS - 1, 1, 3));
	EXPECT_TRUE(block_is(d, NR_BLOCKS - 1, 3));
	ASSERT_EQ(0, disk_write(d, 0, NR_BLOCKS, 4));
	EXPECT_EQ(BASE_SIZE, disk__dirty_bytes(d));
	ASSERT_EQ(1, disk__map_read(d, 0, BASE_SIZE, ext, MAX_EXT));
	EXPECT_EQ(delta_fd, ext[0].fd);
	EXPECT_EQ(DATA_OFFSET, ext[0].offset);
	disk__close(d);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

TEST_F(disk, failed_write_leaves_blocks_alone)
{
	struct disk_extent ext;
	uint64_t reserved;
	struct disk *d;

	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk__begin_write(d, 8 * BS, 2 * BS, &ext, &reserved));
	EXPECT_EQ(2, reserved);
	disk__end_write(d, 8 * BS, 2 * BS, reserved, false);
	EXPECT_EQ(0, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 8, 'b'));
	EXPECT_TRUE(block_is(d, 9, 'b'));
	disk__close(d);
}

TEST_F(disk, zero_blocks_read_as_zeros)
{
	struct disk_extent ext[MAX_EXT];
	struct disk *d;

	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, 10, 3, 5));
	EXPECT_EQ(3 * BS, disk__dirty_bytes(d));
	/* Over two DATA blocks, a BASE block and another BASE block. */
	ASSERT_EQ(0, disk_zero(d, 11, 4));
	EXPECT_EQ(1 * BS, disk__dirty_bytes(d));

	ASSERT_EQ(2, disk__map_read(d, 10 * BS, 5 * BS, ext, MAX_EXT));
	EXPECT_LE(0, ext[0].fd);
	EXPECT_EQ(DATA_OFFSET + 10 * BS, ext[0].offset);
	EXPECT_EQ(BS, ext[0].len);
	EXPECT_EQ(-1, ext[1].fd);
	EXPECT_EQ(0, ext[1].offset);
	EXPECT_EQ(4 * BS, ext[1].len);
	EXPECT_TRUE(block_is(d, 10, 5));
	EXPECT_TRUE(block_is(d, 11, 'z'));
	EXPECT_TRUE(block_is(d, 14, 'z'));
	EXPECT_TRUE(block_is(d, 15, 'b'));

	/* Zeroing again changes nothing; a write makes a block DATA again. */
	ASSERT_EQ(0, disk_zero(d, 11, 1));
	EXPECT_EQ(1 * BS, disk__dirty_bytes(d));
	ASSERT_EQ(0, disk_write(d, 12, 1, 6));
	EXPECT_EQ(2 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 12, 6));
	EXPECT_TRUE(block_is(d, 13, 'z'));

	/* A failed zero leaves the blocks as they were. */
	ASSERT_EQ(0, disk__begin_zero(d, 10 * BS, BS, ext));
	disk__end_zero(d, 10 * BS, BS, false);
	EXPECT_EQ(2 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 10, 5));
	disk__close(d);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

TEST_F(disk, extents_merge_and_run_out)
{
	struct disk_extent ext[MAX_EXT];
	struct disk *d;

	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, 1, 1, 1));
	ASSERT_EQ(0, disk_write(d, 3, 1, 1));
	ASSERT_EQ(0, disk_write(d, 5, 1, 1));
	/* base, data, base, data, base, data, base (6 and 7) */
	EXPECT_EQ(-E2BIG, disk__map_read(d, 0, 8 * BS, ext, 6));
	ASSERT_EQ(7, disk__map_read(d, 0, 8 * BS, ext, 7));
	EXPECT_EQ(2 * BS, ext[6].len);
	EXPECT_EQ(-E2BIG, disk__map_read(d, 0, BS, ext, 0));

	/* Two writes side by side read back as one extent. */
	ASSERT_EQ(0, disk_write(d, 20, 1, 2));
	ASSERT_EQ(0, disk_write(d, 21, 2, 3));
	ASSERT_EQ(1, disk__map_read(d, 20 * BS, 3 * BS, ext, 1));
	EXPECT_EQ(DATA_OFFSET + 20 * BS, ext[0].offset);
	EXPECT_EQ(3 * BS, ext[0].len);

	/* So do two zeroed runs side by side. */
	ASSERT_EQ(0, disk_zero(d, 30, 1));
	ASSERT_EQ(0, disk_zero(d, 31, 2));
	ASSERT_EQ(1, disk__map_read(d, 30 * BS, 3 * BS, ext, 1));
	EXPECT_EQ(-1, ext[0].fd);
	EXPECT_EQ(3 * BS, ext[0].len);

	/* Alternating every block across the whole disk. */
	ASSERT_EQ(0, disk_write(d, 0, NR_BLOCKS, 4));
	for (uint64_t b = 0; b < NR_BLOCKS; b += 2)
		ASSERT_EQ(0, disk_zero(d, b, 1));
	EXPECT_EQ(-E2BIG, disk__map_read(d, 0, BASE_SIZE, ext, NR_BLOCKS - 1));
	ASSERT_EQ(NR_BLOCKS, disk__map_read(d, 0, BASE_SIZE, ext, MAX_EXT));
	EXPECT_EQ(NR_BLOCKS / 2 * BS, disk__dirty_bytes(d));
	disk__close(d);
}

/* Every data-path entry point, for one bad range. */
static void expect_range_refused(struct __test_metadata *_metadata,
				 struct disk *d, uint64_t offset, uint64_t len)
{
	struct disk_extent ext[MAX_EXT];
	uint64_t dirty = disk__dirty_bytes(d);
	uint64_t reserved = 1;

	EXPECT_EQ(-EINVAL, disk__map_read(d, offset, len, ext, MAX_EXT))
	TH_LOG("offset %#jx len %#jx", (uintmax_t)offset, (uintmax_t)len);
	EXPECT_EQ(-EINVAL, disk__begin_write(d, offset, len, ext, &reserved))
	TH_LOG("offset %#jx len %#jx", (uintmax_t)offset, (uintmax_t)len);
	EXPECT_EQ(0, reserved);
	EXPECT_EQ(-EINVAL, disk__begin_zero(d, offset, len, ext))
	TH_LOG("offset %#jx len %#jx", (uintmax_t)offset, (uintmax_t)len);
	/* The end calls must not touch a map they could overrun. */
	disk__end_write(d, offset, len, 0, true);
	disk__end_zero(d, offset, len, true);
	EXPECT_EQ(dirty, disk__dirty_bytes(d));
}

TEST_F(disk, hostile_ranges_refused)
{
	static const struct {
		uint64_t offset, len;
	} bad[] = {
		{ 0, 0 },
		{ 1, BS },
		{ 512, BS },
		{ 0, BS - 1 },
		{ 0, BS + 512 },
		{ BASE_SIZE, BS },
		{ BASE_SIZE, 0 },
		{ BASE_SIZE - BS, 2 * BS },
		{ 0, BASE_SIZE + BS },
		{ BASE_SIZE + BS, BS },
		/* offset + len wraps to a small, in-range value */
		{ UINT64_MAX - BS + 1, 2 * BS },
		{ BS, UINT64_MAX - BS + 1 },
		{ UINT64_MAX - BS + 1, UINT64_MAX - BS + 1 },
		{ 1ULL << 63, 1ULL << 63 },
		{ UINT64_MAX, 1 },
	};
	struct disk *d;
	size_t i;

	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, 0, 1, 1));
	for (i = 0; i < ARRAY_SIZE(bad); i++)
		expect_range_refused(_metadata, d, bad[i].offset, bad[i].len);
	EXPECT_EQ(BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 0, 1));
	EXPECT_TRUE(block_is(d, 1, 'b'));
	disk__close(d);

	/* Read-only disks check the range of a read too. */
	self->p.mode = DISK_READONLY;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		struct disk_extent ext[MAX_EXT];

		EXPECT_EQ(-EINVAL, disk__map_read(d, bad[i].offset, bad[i].len,
						  ext, MAX_EXT));
	}
	disk__close(d);
}

TEST_F(disk, dirty_limit)
{
	struct disk_extent ext;
	uint64_t r1, r2;
	struct disk *d;

	self->p.max_dirty_bytes = 4 * BS;
	ASSERT_EQ(0, disk__open(&d, &self->p));

	/* A reservation counts until its write ends... */
	ASSERT_EQ(0, disk__begin_write(d, 0, 3 * BS, &ext, &r1));
	EXPECT_EQ(3, r1);
	EXPECT_EQ(-ENOSPC, disk__begin_write(d, 10 * BS, 2 * BS, &ext, &r2));
	/* ...and a failed write gives it back. */
	disk__end_write(d, 0, 3 * BS, r1, false);
	EXPECT_EQ(0, disk__dirty_bytes(d));
	ASSERT_EQ(0, disk__begin_write(d, 10 * BS, 2 * BS, &ext, &r2));
	EXPECT_EQ(2, r2);
	disk__end_write(d, 10 * BS, 2 * BS, r2, false);

	ASSERT_EQ(0, disk_write(d, 0, 4, 1));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
	/* At the limit: rewrites are fine, new blocks are not. */
	EXPECT_EQ(0, disk_write(d, 1, 2, 2));
	EXPECT_EQ(-ENOSPC, disk_write(d, 3, 2, 3));
	EXPECT_EQ(-ENOSPC, disk_write(d, 20, 1, 3));
	EXPECT_TRUE(block_is(d, 4, 'b'));
	/* Zeroing never needs room, and makes some. */
	ASSERT_EQ(0, disk_zero(d, 40, 10));
	ASSERT_EQ(0, disk_zero(d, 0, 1));
	EXPECT_EQ(3 * BS, disk__dirty_bytes(d));
	EXPECT_EQ(0, disk_write(d, 20, 1, 3));
	EXPECT_EQ(-ENOSPC, disk_write(d, 21, 1, 3));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
	disk__close(d);

	/* A limit below one block allows no new block at all. */
	self->p.max_dirty_bytes = BS - 1;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(-ENOSPC, disk_write(d, 0, 1, 1));
	disk__close(d);
}

/* ---- persistent ---------------------------------------------------- */

TEST_F(disk, persistent_keeps_data_across_opens)
{
	uint64_t size = 0;
	struct stat st;
	struct disk *d;

	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_LE(0, disk__sync_fd(d));
	EXPECT_EQ(0, disk__dirty_bytes(d));
	ASSERT_EQ(0, disk_write(d, 0, 2, 1));
	ASSERT_EQ(0, disk_write(d, 7, 5, 2));
	ASSERT_EQ(0, disk_zero(d, 9, 4));
	ASSERT_EQ(0, fdatasync(disk__sync_fd(d)));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
	disk__close(d);

	ASSERT_EQ(0, stat(self->state, &st));
	EXPECT_EQ(0600, st.st_mode & 0777);
	ASSERT_EQ(0, file_size(self->state, &size));
	EXPECT_EQ(DATA_OFFSET + BASE_SIZE, size);
	/* Sparse: the header, map and 4 data blocks, give or take. */
	EXPECT_GT(2 * DATA_OFFSET, (uint64_t)st.st_blocks * 512);

	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 0, 1));
	EXPECT_TRUE(block_is(d, 1, 1));
	EXPECT_TRUE(block_is(d, 2, 'b'));
	EXPECT_TRUE(block_is(d, 7, 2));
	EXPECT_TRUE(block_is(d, 8, 2));
	EXPECT_TRUE(block_is(d, 9, 'z'));
	EXPECT_TRUE(block_is(d, 12, 'z'));
	EXPECT_TRUE(block_is(d, 13, 'b'));
	ASSERT_EQ(0, disk_write(d, 9, 1, 3));
	disk__close(d);

	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(5 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 9, 3));
	disk__close(d);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

/* The on-disk format, byte for byte, as Documentation/rootfs.md has it. */
TEST_F(disk, persistent_file_format)
{
	uint8_t hdr[BS], map[NR_BLOCKS], data[BS];
	uint64_t v64;
	uint32_t v32;
	struct disk *d;
	int fd;

	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, 2, 1, 9));
	ASSERT_EQ(0, disk_zero(d, 5, 1));
	disk__close(d);

	fd = open(self->state, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(BS, pread(fd, hdr, BS, 0));
	ASSERT_EQ(NR_BLOCKS, pread(fd, map, NR_BLOCKS, 4096));
	ASSERT_EQ(BS, pread(fd, data, BS, DATA_OFFSET + 2 * BS));
	close(fd);

	EXPECT_EQ(0, memcmp(hdr, "KILNDLT1", 8));
	memcpy(&v32, hdr + 8, 4);
	EXPECT_EQ(1, le32toh(v32)); /* version */
	memcpy(&v32, hdr + 12, 4);
	EXPECT_EQ(4096, le32toh(v32)); /* header size */
	memcpy(&v32, hdr + 16, 4);
	EXPECT_EQ(BS, le32toh(v32)); /* block size */
	memcpy(&v64, hdr + 24, 8);
	EXPECT_EQ(BASE_SIZE, le64toh(v64));
	memcpy(&v64, hdr + 32, 8);
	EXPECT_EQ(4096, le64toh(v64)); /* map offset */
	memcpy(&v64, hdr + 40, 8);
	EXPECT_EQ(NR_BLOCKS, le64toh(v64)); /* map size */
	memcpy(&v64, hdr + 48, 8);
	EXPECT_EQ(DATA_OFFSET, le64toh(v64));
	EXPECT_STREQ(DIGEST, (char *)hdr + 56);

	EXPECT_EQ(DISK_BLOCK_BASE, map[1]);
	EXPECT_EQ(DISK_BLOCK_DATA, map[2]);
	EXPECT_EQ(DISK_BLOCK_ZERO, map[5]);
	EXPECT_EQ(data_byte(2, 0, 9), data[0]);
	EXPECT_EQ(data_byte(2, BS - 1, 9), data[BS - 1]);
}

TEST_F(disk, persistent_second_open_is_busy)
{
	struct disk *d, *d2 = NULL;
	char msg[1024];

	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, 1, 1, 1));
	/* flock is per open file description: this process conflicts too. */
	EXPECT_EQ(-EBUSY, open_quiet(&d2, &self->p, msg, sizeof(msg)));
	EXPECT_EQ(NULL, d2);
	EXPECT_NE(NULL, strstr(msg, "state file is in use by another VM"))
	TH_LOG("message: %s", msg);
	EXPECT_NE(NULL, strstr(msg, self->state));
	/* The refused open left the first one working. */
	EXPECT_TRUE(block_is(d, 1, 1));
	disk__close(d);

	ASSERT_EQ(0, disk__open(&d2, &self->p));
	EXPECT_TRUE(block_is(d2, 1, 1));
	disk__close(d2);
}

TEST_F(disk, persistent_header_must_match)
{
	struct disk_params p2 = self->p;
	char base2[160], msg[1024];
	struct disk *d;

	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, 4, 1, 1));
	disk__close(d);

	/* Another base digest. */
	p2 = self->p;
	p2.base_digest = DIGEST_2;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &p2, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "was made for base image " DIGEST
				    " not " DIGEST_2))
	TH_LOG("message: %s", msg);

	/* Another base size (a real base of that size). */
	snprintf(base2, sizeof(base2), "%s/base2.img", self->dir);
	write_base(base2, 2 * NR_BLOCKS);
	p2 = self->p;
	p2.base_path = base2;
	p2.base_size = 2 * BASE_SIZE;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &p2, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "was made for a base image of 262144 "
				    "bytes, not 524288"))
	TH_LOG("message: %s", msg);

	/* Refusing left the file as it was. */
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 4, 1));
	disk__close(d);
}

TEST_F(disk, persistent_empty_file_is_initialised)
{
	uint64_t size = 0;
	struct disk *d;
	int fd;

	/* As a run killed before it wrote the header would leave it. */
	fd = open(self->state, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ASSERT_LE(0, fd);
	close(fd);

	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(0, disk__dirty_bytes(d));
	ASSERT_EQ(0, disk_write(d, 0, 1, 1));
	disk__close(d);
	ASSERT_EQ(0, file_size(self->state, &size));
	EXPECT_EQ(DATA_OFFSET + BASE_SIZE, size);
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_TRUE(block_is(d, 0, 1));
	disk__close(d);
}

TEST_F(disk, persistent_short_file_is_grown)
{
	uint64_t size = 0;
	struct disk *d;

	/* Header written, killed before the ftruncate. */
	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	disk__close(d);
	ASSERT_EQ(0, truncate(self->state, 4096));

	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(0, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, NR_BLOCKS - 1, 'b'));
	ASSERT_EQ(0, disk_write(d, NR_BLOCKS - 1, 1, 1));
	disk__close(d);
	ASSERT_EQ(0, file_size(self->state, &size));
	EXPECT_EQ(DATA_OFFSET + BASE_SIZE, size);
}

/* Writes len bytes of buf at off in the state file. */
static int poke(const char *path, const void *buf, size_t len, off_t off)
{
	ssize_t n;
	int fd;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = pwrite(fd, buf, len, off);
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

/* Makes a fresh, valid state file, damages it, expects a refusal. */
static void expect_damage_refused(struct __test_metadata *_metadata,
				  const struct disk_params *p, const void *buf,
				  size_t len, off_t off, const char *why)
{
	struct disk *d = NULL;
	char msg[1024];

	unlink(p->state_path);
	ASSERT_EQ(0, disk__open(&d, p));
	disk__close(d);
	ASSERT_EQ(0, poke(p->state_path, buf, len, off));
	EXPECT_EQ(-EINVAL, open_quiet(&d, p, msg, sizeof(msg)))
	TH_LOG("%s", why);
	EXPECT_EQ(NULL, d);
	EXPECT_NE(NULL, strstr(msg, why)) TH_LOG("message: %s", msg);
}

TEST_F(disk, persistent_damaged_file_refused)
{
	uint8_t junk[BS], byte;
	struct disk *d = NULL;
	char msg[1024];
	uint32_t v32;
	int fd;

	self->p.mode = DISK_PERSISTENT;

	/* A header cut short. */
	fd = open(self->state, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	ASSERT_LE(0, fd);
	ASSERT_EQ(100, write(fd, DIGEST DIGEST, 100));
	close(fd);
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "header truncated")) TH_LOG("%s", msg);

	/* A whole header of garbage. */
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 17 + 3);
	expect_damage_refused(_metadata, &self->p, junk, sizeof(junk), 0,
			      "bad magic");
	/* A later format version. */
	v32 = htole32(2);
	expect_damage_refused(_metadata, &self->p, &v32, 4, 8,
			      "format version 2");
	/* One flipped byte in the digest: only the checksum can tell. */
	expect_damage_refused(_metadata, &self->p, "7", 1, 56 + 10, "checksum");
	/* A map byte that is no block state. */
	byte = 7;
	expect_damage_refused(_metadata, &self->p, &byte, 1, 4096 + 3,
			      "block map entry 3 is 7");
	/* Grown past its data area. */
	expect_damage_refused(_metadata, &self->p, "x", 1,
			      DATA_OFFSET + BASE_SIZE, "more than");
	/* The base image given as its own state file. */
	self->p.state_path = self->base;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "is the base image itself"))
	TH_LOG("%s", msg);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

/* A sparse 4 GiB base: a map of many pages and data past 2 MiB. */
TEST_F(disk, persistent_large_sparse_base)
{
	const uint64_t nr = 1024 * 1024, size = nr * BS;
	struct disk_extent ext[MAX_EXT];
	char big[160];
	uint8_t buf[BS];
	struct disk *d;
	int fd;

	snprintf(big, sizeof(big), "%s/big.img", self->dir);
	fd = open(big, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, size));
	close(fd);
	self->p.base_path = big;
	self->p.base_size = size;
	self->p.mode = DISK_PERSISTENT;

	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_EQ(0, disk_write(d, nr - 1, 1, 1));
	ASSERT_EQ(0, disk_write(d, nr / 2, 1, 2));
	disk__close(d);

	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(2 * BS, disk__dirty_bytes(d));
	ASSERT_EQ(2, disk__map_read(d, size - 3 * BS, 3 * BS, ext, MAX_EXT));
	EXPECT_EQ(2 * BS, ext[0].len);
	/* round_up(4096 + 2^20 map bytes, 1 MiB) */
	EXPECT_EQ(2 * 1024 * 1024 + size - BS, ext[1].offset);
	ASSERT_EQ(BS, pread(ext[1].fd, buf, BS, ext[1].offset));
	EXPECT_EQ(data_byte(nr - 1, 0, 1), buf[0]);
	EXPECT_EQ(data_byte(nr - 1, BS - 1, 1), buf[BS - 1]);
	ASSERT_EQ(0, disk_read(d, nr / 2 * BS, BS, buf));
	EXPECT_EQ(data_byte(nr / 2, 5, 2), buf[5]);
	ASSERT_EQ(1, disk__map_read(d, 0, size / 2, ext, 1));
	EXPECT_EQ(size / 2, ext[0].len);
	disk__close(d);
}

/* ---- bad parameters ------------------------------------------------ */

TEST_F(disk, base_of_wrong_size_refused)
{
	struct disk *d = NULL;
	char msg[1024];

	self->p.base_size = BASE_SIZE - BS;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, self->base));
	EXPECT_NE(NULL, strstr(msg, "is 262144 bytes")) TH_LOG("%s", msg);
	self->p.base_size = BASE_SIZE + BS;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	self->p.base_size = BASE_SIZE - 512;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "multiple")) TH_LOG("%s", msg);
	self->p.base_size = 0;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));

	/* Right size, the wrong length on disk. */
	self->p.base_size = BASE_SIZE;
	ASSERT_EQ(0, truncate(self->base, BASE_SIZE + 512));
	self->p.mode = DISK_READONLY;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_EQ(NULL, d);

	self->p.base_path = "/nonexistent/kiln/base.img";
	EXPECT_EQ(-ENOENT, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "/nonexistent/kiln/base.img: No such"))
	TH_LOG("%s", msg);
	EXPECT_TRUE(strchr(msg, '\n') == strrchr(msg, '\n'))
	TH_LOG("reported more than once: %s", msg);
}

TEST_F(disk, state_path_must_be_absolute)
{
	struct disk *d = NULL;
	char msg[1024];

	/* Run where a wrong implementation would create it: our own dir. */
	ASSERT_EQ(0, chdir(self->dir));
	self->p.mode = DISK_PERSISTENT;
	self->p.state_path = "state.img";
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "state.img: the path must be absolute"))
	TH_LOG("%s", msg);
	EXPECT_NE(0, access("state.img", F_OK));
	self->p.state_path = NULL;
	EXPECT_EQ(-EINVAL, open_quiet(&d, &self->p, msg, sizeof(msg)));
	/* A state directory that does not exist. */
	self->p.state_path = "/nonexistent/kiln/state";
	EXPECT_EQ(-ENOENT, open_quiet(&d, &self->p, msg, sizeof(msg)));
	EXPECT_EQ(NULL, d);
}

TEST_F(disk, direct_io)
{
	struct disk *d;
	int ret;

	self->p.mode = DISK_PERSISTENT;
	self->p.direct = true;
	ret = disk__open(&d, &self->p);
	if (ret == -EINVAL)
		SKIP(return, "no O_DIRECT on the filesystem of %s", self->dir);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, disk_write(d, 6, 2, 1));
	disk__close(d);

	self->p.direct = false;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(2 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 6, 1));
	EXPECT_TRUE(block_is(d, 7, 1));
	EXPECT_TRUE(block_is(d, 8, 'b'));
	disk__close(d);
}

/* ---- a monitor killed in the middle -------------------------------- */

/* The child: 3 full writes, a zero, then killed before the 4th write ends. */
static void crash_child(const struct disk_params *p)
{
	struct disk_extent ext;
	uint8_t buf[BS];
	uint64_t reserved;
	struct disk *d;
	size_t i;

	if (disk__open(&d, p))
		_exit(10);
	if (disk_write(d, 0, 2, 1) || disk_write(d, 10, 1, 2) ||
	    disk_write(d, 11, 1, 2) || disk_zero(d, 20, 2))
		_exit(11);
	if (disk__begin_write(d, 30 * BS, BS, &ext, &reserved))
		_exit(12);
	for (i = 0; i < BS; i++)
		buf[i] = data_byte(30, i, 3);
	if (pwrite(ext.fd, buf, BS, ext.offset) != BS)
		_exit(13);
	/* disk__end_write(d, 30 * BS, BS, reserved, true) never runs. */
	kill(getpid(), SIGKILL);
	_exit(14);
}

TEST_F(disk, persistent_survives_sigkill)
{
	struct disk *d;
	int status;
	pid_t pid;

	self->p.mode = DISK_PERSISTENT;
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		crash_child(&self->p);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status))
	TH_LOG("child exited with %d", WEXITSTATUS(status));
	ASSERT_EQ(SIGKILL, WTERMSIG(status));

	/* The lock died with the child. */
	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 0, 1));
	EXPECT_TRUE(block_is(d, 1, 1));
	EXPECT_TRUE(block_is(d, 10, 2));
	EXPECT_TRUE(block_is(d, 11, 2));
	EXPECT_TRUE(block_is(d, 20, 'z'));
	EXPECT_TRUE(block_is(d, 21, 'z'));
	/* Its data reached the file, but the map never named it. */
	EXPECT_TRUE(block_is(d, 30, 'b'));
	EXPECT_TRUE(block_is(d, 31, 'b'));
	disk__close(d);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

/* ---- a full host filesystem (issue 15, item 2) ----------------------- */

/* Bytes the state file really holds (allocated, not sparse). */
static uint64_t file_allocated(const char *path)
{
	struct stat st;

	if (stat(path, &st))
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

/*
 * The block map's page has its block from the open on: a map store must
 * never be the first write into a hole (on a full filesystem that is
 * SIGBUS). New files, and files whose map page is a hole (made by an
 * older monitor), alike.
 */
TEST_F(disk, persistent_map_allocated_at_open)
{
	uint64_t with_map;
	struct disk *d;
	int fd;

	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	/* The header's block and the map's, nothing written yet. */
	with_map = file_allocated(self->state);
	EXPECT_LE(2 * BS, with_map);
	ASSERT_EQ(0, disk_write(d, 3, 1, 5));
	disk__close(d);

	/* An older state file: its map page a hole (an all-BASE map). */
	fd = open(self->state, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, BS, BS)) {
		close(fd);
		SKIP(return, "fallocate(PUNCH_HOLE): %s", strerror(errno));
	}
	close(fd);
	ASSERT_GT(with_map, file_allocated(self->state) - BS)
	TH_LOG("the punched map page still takes room");

	ASSERT_EQ(0, disk__open(&d, &self->p));
	EXPECT_LE(with_map, file_allocated(self->state) - BS);
	EXPECT_EQ(0, disk__dirty_bytes(d));
	EXPECT_TRUE(block_is(d, 3, 'b'));
	ASSERT_EQ(0, disk_zero(d, 7, 1));
	EXPECT_TRUE(block_is(d, 7, 'z'));
	disk__close(d);
}

#define SMALL_FS_BYTES (8U << 20)

/* A loop device on image, mounted at dir: 0, or -errno. */
static int loop_mount(const char *image, const char *dir, int *loop_fd)
{
	char dev[32];
	int ctl, img, nr, fd, ret = 0;

	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	if (nr < 0)
		return -errno;
	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	fd = open(dev, O_RDWR | O_CLOEXEC);
	img = open(image, O_RDWR | O_CLOEXEC);
	if (fd < 0 || img < 0 || ioctl(fd, LOOP_SET_FD, img) < 0)
		ret = -errno;
	/* Detached by the kernel once unmounted, however the test ends. */
	if (!ret &&
	    ioctl(fd, LOOP_SET_STATUS64,
		  &(struct loop_info64){ .lo_flags = LO_FLAGS_AUTOCLEAR }))
		ret = -errno;
	if (img >= 0)
		close(img);
	if (!ret && mount(dev, dir, "ext4", 0, NULL)) {
		ret = -errno;
		ioctl(fd, LOOP_CLR_FD, 0);
	}
	if (ret && fd >= 0)
		close(fd);
	else
		*loop_fd = fd;
	return ret;
}

/* An ext4 of SMALL_FS_BYTES in image, no journal, nothing reserved. */
static int make_small_fs(const char *image)
{
	char cmd[256];
	int fd, ret;

	fd = open(image, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = ftruncate(fd, SMALL_FS_BYTES) ? -errno : 0;
	close(fd);
	if (ret)
		return ret;
	snprintf(cmd, sizeof(cmd),
		 "mkfs.ext4 -q -F -m 0 -O ^has_journal %s >/dev/null 2>&1",
		 image);
	return system(cmd) ? -ENOEXEC : 0;
}

/* Writes a file until the filesystem says ENOSPC: true if it did. */
static bool fill_fs(const char *path)
{
	static uint8_t junk[BS];
	bool full = false;
	ssize_t n;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	memset(junk, 0xa5, sizeof(junk));
	for (;;) {
		n = write(fd, junk, sizeof(junk));
		if (n < 0) {
			full = errno == ENOSPC;
			break;
		}
	}
	close(fd);
	return full;
}

/*
 * The reproduction: the state file on a small ext4 that the
 * guest has filled (here: a file written until ENOSPC), then a discard
 * of blocks never touched. The map store must not be SIGBUS; a write to
 * a new block fails as an I/O error would, and the disk goes on.
 */
TEST_F(disk, full_filesystem_is_not_fatal)
{
	char image[96], mnt[96], filler[128];
	struct disk *d;
	int loop_fd = -1, ret;

	if (geteuid())
		SKIP(return, "needs root for a loop device and a mount");
	if (access("/dev/loop-control", R_OK | W_OK))
		SKIP(return, "no /dev/loop-control");
	snprintf(image, sizeof(image), "%s/fs.img", self->dir);
	snprintf(mnt, sizeof(mnt), "%s/mnt", self->dir);
	ASSERT_EQ(0, mkdir(mnt, 0700));
	if (make_small_fs(image))
		SKIP(return, "mkfs.ext4 failed (not installed?)");
	/* A private mount namespace: the mount dies with this test. */
	ASSERT_EQ(0, unshare(CLONE_NEWNS));
	ASSERT_EQ(0, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
	ret = loop_mount(image, mnt, &loop_fd);
	if (ret)
		SKIP(return, "loop mount: %s", strerror(-ret));

	snprintf(self->state, sizeof(self->state), "%s/state", mnt);
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	self->p.mode = DISK_PERSISTENT;
	ASSERT_EQ(0, disk__open(&d, &self->p));
	ASSERT_TRUE(fill_fs(filler));
	sync();

	/* Never touched: before the fix, the map store here was SIGBUS. */
	EXPECT_EQ(0, disk_zero(d, 40, 8));
	EXPECT_TRUE(block_is(d, 40, 'z'));
	/* No room for data: the write fails, the map does not change. */
	EXPECT_EQ(-EIO, disk_write(d, 50, 1, 6));
	EXPECT_TRUE(block_is(d, 50, 'b'));
	EXPECT_EQ(0, disk__dirty_bytes(d));
	disk__close(d);

	umount2(mnt, MNT_DETACH);
	ioctl(loop_fd, LOOP_CLR_FD, 0);
	close(loop_fd);
	rmdir(mnt);
}

/* ---- the writable layer in a snapshot ----------------------------- */

/*
 * The layer of d saved as a snapshot saves it (snap_dir__write_sparse)
 * into the fixture's directory (0700, ours) as file; its digest from
 * the part into hex. Returns the saved file's fd (O_RDONLY), or -errno.
 */
static int save_layer(FIXTURE_DATA(disk) * self, struct disk *d,
		      const char *file, char hex[SNAP_SHA256_HEX + 1])
{
	struct snap_dir sd;
	char err[256] = "", path[192];
	json_t *part;
	int ret;

	ret = snap_dir__create(&sd, self->dir, err, sizeof(err));
	if (ret)
		return ret;
	ret = snap_dir__write_sparse(&sd, file, SNAP_LAYER_KIND,
				     disk__layer_fd(d), disk__layer_bytes(d),
				     err, sizeof(err));
	part = json_array_get(sd.parts, 0);
	if (!ret)
		snprintf(hex, SNAP_SHA256_HEX + 1, "%s",
			 json_string_value(json_object_get(part, "sha256")));
	snap_dir__close(&sd);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/%s", self->dir, file);
	ret = open(path, O_RDONLY | O_CLOEXEC);
	return ret < 0 ? -errno : ret;
}

static int load_quiet(struct disk *d, int fd, char *msg, size_t len)
{
	struct stderr_capture c = { 0 };
	int ret;

	if (stderr_capture__begin(&c))
		abort();
	ret = disk__load_layer(d, fd, "disk.delta");
	stderr_capture__end(&c, msg, len);
	return ret;
}

/*
 * Saved from one ephemeral disk and loaded into two new ones: each reads
 * what the first held (data, zeros, base), and a write in one is seen in
 * neither the other nor the first. The saved file is sparse, its digest
 * the one the verifier computes, and it and the base stay unchanged.
 */
TEST_F(disk, ephemeral_layer_saved_and_loaded_into_two_clones)
{
	char hex[SNAP_SHA256_HEX + 1], again[SNAP_SHA256_HEX + 1];
	struct disk *a, *b, *c;
	struct stat st;
	int fd;

	ASSERT_EQ(0, disk__open(&a, &self->p));
	ASSERT_EQ(0, disk_write(a, 1, 3, 5));
	ASSERT_EQ(0, disk_write(a, 10, 1, 6));
	ASSERT_EQ(0, disk_zero(a, 20, 1));
	EXPECT_EQ((uint64_t)DATA_OFFSET + BASE_SIZE, disk__layer_bytes(a));

	fd = save_layer(self, a, SNAP_LAYER_FILE, hex);
	ASSERT_LE(0, fd) TH_LOG("saving: %s", strerror(-fd));
	ASSERT_EQ(0, fstat(fd, &st));
	EXPECT_EQ((off_t)disk__layer_bytes(a), st.st_size);
	/* The header, a map page and four data blocks; not the 1 MiB+. */
	EXPECT_GT((off_t)(DATA_OFFSET / 2), st.st_blocks * 512);
	ASSERT_EQ(0, snap_file__pages_sha256(fd, again));
	EXPECT_STREQ(hex, again);

	ASSERT_EQ(0, disk__open(&b, &self->p));
	ASSERT_EQ(0, disk__open(&c, &self->p));
	ASSERT_EQ(0, disk__load_layer(b, fd, "disk.delta"));
	ASSERT_EQ(0, disk__load_layer(c, fd, "disk.delta"));
	for (struct disk *d = b; d; d = d == b ? c : NULL) {
		EXPECT_EQ(4 * BS, disk__dirty_bytes(d));
		EXPECT_TRUE(block_is(d, 0, 'b'));
		for (uint64_t blk = 1; blk < 4; blk++)
			EXPECT_TRUE(block_is(d, blk, 5));
		EXPECT_TRUE(block_is(d, 4, 'b'));
		EXPECT_TRUE(block_is(d, 10, 6));
		EXPECT_TRUE(block_is(d, 20, 'z'));
		EXPECT_TRUE(block_is(d, 63, 'b'));
	}

	/* A write in one clone: its own only. */
	ASSERT_EQ(0, disk_write(b, 1, 1, 9));
	ASSERT_EQ(0, disk_write(b, 30, 1, 9));
	EXPECT_TRUE(block_is(b, 1, 9));
	EXPECT_TRUE(block_is(b, 30, 9));
	EXPECT_TRUE(block_is(c, 1, 5));
	EXPECT_TRUE(block_is(c, 30, 'b'));
	EXPECT_TRUE(block_is(a, 1, 5));
	EXPECT_TRUE(block_is(a, 30, 'b'));
	EXPECT_EQ(5 * BS, disk__dirty_bytes(b));
	EXPECT_EQ(4 * BS, disk__dirty_bytes(c));

	ASSERT_EQ(0, snap_file__pages_sha256(fd, again));
	EXPECT_STREQ(hex, again);
	close(fd);
	disk__close(c);
	disk__close(b);
	disk__close(a);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

/* Writes len bytes of buf at off in the file at path. */
static int patch_file(const char *path, const void *buf, size_t len,
		      uint64_t off)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (pwrite(fd, buf, len, off) != (ssize_t)len)
		ret = -EIO;
	close(fd);
	return ret;
}

/*
 * What a layer must be to be loaded: for this base (digest, size), not
 * damaged (map bytes), into a new ephemeral disk only; each refusal is
 * -EINVAL with a line naming the layer and the reason.
 */
TEST_F(disk, saved_layer_refused_unless_it_fits)
{
	char hex[SNAP_SHA256_HEX + 1], msg[512], path[192];
	struct disk_params other = self->p;
	struct disk *a, *b;
	uint8_t bad = 7;
	int fd;

	ASSERT_EQ(0, disk__open(&a, &self->p));
	ASSERT_EQ(0, disk_write(a, 2, 1, 3));
	fd = save_layer(self, a, "layer", hex);
	ASSERT_LE(0, fd);

	/* Another base image. */
	other.base_digest = DIGEST_2;
	ASSERT_EQ(0, disk__open(&b, &other));
	EXPECT_EQ(-EINVAL, load_quiet(b, fd, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "disk.delta was made for base image"))
	TH_LOG("%s", msg);
	disk__close(b);

	/* A clone that has written already, a read-only disk. */
	ASSERT_EQ(0, disk__open(&b, &self->p));
	ASSERT_EQ(0, disk_write(b, 5, 1, 1));
	EXPECT_EQ(-EINVAL, load_quiet(b, fd, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "only a new ephemeral layer"));
	disk__close(b);
	other = self->p;
	other.mode = DISK_READONLY;
	ASSERT_EQ(0, disk__open(&b, &other));
	EXPECT_EQ(-EINVAL, load_quiet(b, fd, msg, sizeof(msg)));
	disk__close(b);
	close(fd);

	/* A damaged map byte. */
	snprintf(path, sizeof(path), "%s/layer", self->dir);
	ASSERT_EQ(0, patch_file(path, &bad, 1, 4096 + 9));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, disk__open(&b, &self->p));
	EXPECT_EQ(-EINVAL, load_quiet(b, fd, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "block map entry 9 is 7"))
	TH_LOG("%s", msg);
	disk__close(b);

	/* Cut short. */
	ASSERT_EQ(0, truncate(path, DATA_OFFSET));
	ASSERT_EQ(0, disk__open(&b, &self->p));
	EXPECT_EQ(-EINVAL, load_quiet(b, fd, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, "a layer of this base image has"))
	TH_LOG("%s", msg);
	disk__close(b);
	close(fd);
	disk__close(a);
	EXPECT_TRUE(base_unchanged(self->base, NR_BLOCKS));
}

TEST_HARNESS_MAIN
