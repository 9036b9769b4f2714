// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz disk_state - the writable layer's state file (devices/block/
 * disk.c, Documentation/rootfs.md "Writable layer (delta) format"), as
 * a persistent disk reuses it: the header, the block map, the file's
 * size; then, if it opens, the block device's calls on it (reads mapped,
 * writes and zeroes begun and ended, ok or not), and the file opened
 * again as the next run of the VM would.
 *
 * Input: a byte of set-up (which base image size: 1, 7, 64 or 5000
 * blocks; whether to fix the header's CRC-32C up after the patches, so
 * the fuzzer gets past it; the file's size: as it should be, or chosen),
 * maybe that size, then patches (an offset in the first 12 KiB, bytes)
 * applied to a state file the disk itself wrote (a valid header, an
 * all-BASE map), then calls. Base and state file are memfds named
 * through /proc/self/fd: nothing touches the host's file systems.
 *
 * Checked for every input: an open that fails leaves nothing behind (the
 * state file opens again afterwards); one that succeeds counts as dirty
 * exactly the map's DATA bytes, and every map byte it accepted is a block
 * state; a read maps to extents that tile the range, each zeros or inside
 * the base or the state file's data area; writes and zeroes change the
 * dirty count as the map says; the state file opens again with the same
 * dirty count.
 */
#include <endian.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "selftests/fuzz/fuzz.h"

#define DIGEST \
	"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEADER_SIZE   4096U /* DELTA_HEADER_SIZE */
#define HDR_CHECKSUM  20    /* le32, CRC-32C with this field 0 */
#define MAP_OFFSET    HEADER_SIZE
#define DATA_ALIGN    (1U << 20)  /* DELTA_DATA_ALIGN */
#define TEMPLATE_SIZE (12U << 10) /* header and the largest map */
#define NR_BASES      4
#define MAX_PATCHES   32
#define PATCH_MAX     32U
#define MAX_CALLS     64
#define MAX_EXT	      16
#define CRC32C_POLY   0x82f63b78U /* reflected Castagnoli */

static const uint64_t base_blocks[NR_BASES] = { 1, 7, 64, 5000 };

enum call { CALL_READ, CALL_WRITE, CALL_ZERO, NR_CALLS };

struct base {
	int fd;
	char path[64];
	uint64_t size;
	uint8_t template[TEMPLATE_SIZE]; /* a fresh state file's start */
};

struct fuzz_disk {
	struct base bases[NR_BASES];
	uint8_t file[TEMPLATE_SIZE];
};

static uint64_t data_offset(uint64_t nr_blocks)
{
	return (MAP_OFFSET + nr_blocks + DATA_ALIGN - 1) / DATA_ALIGN *
	       DATA_ALIGN;
}

static uint32_t crc32c(const uint8_t *p, size_t len)
{
	uint32_t crc = ~0U;

	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (CRC32C_POLY & -(crc & 1));
	}
	return ~crc;
}

static void fix_checksum(uint8_t *hdr)
{
	uint32_t crc;

	memset(hdr + HDR_CHECKSUM, 0, 4);
	crc = htole32(crc32c(hdr, HEADER_SIZE));
	memcpy(hdr + HDR_CHECKSUM, &crc, 4);
}

static int new_memfd(char *path, size_t len)
{
	int fd = memfd_create("fuzz-disk-state", MFD_CLOEXEC);

	fuzz_check(fd >= 0);
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return fd;
}

static int open_state(const struct base *b, const char *state,
		      struct disk **out)
{
	struct disk_params p = { .base_path = b->path,
				 .base_size = b->size,
				 .base_digest = DIGEST,
				 .mode = DISK_PERSISTENT,
				 .state_path = state };

	return disk__open(out, &p);
}

/* Each base, and the start of the state file the disk makes for it. */
static void setup(struct fuzz_disk *f)
{
	for (int i = 0; i < NR_BASES; i++) {
		struct base *b = &f->bases[i];
		struct disk *d;
		char path[64];
		int fd;

		b->size = base_blocks[i] * DISK_BLOCK_SIZE;
		b->fd = new_memfd(b->path, sizeof(b->path));
		fuzz_check(!ftruncate(b->fd, b->size));
		fd = new_memfd(path, sizeof(path));
		fuzz_check(!open_state(b, path, &d));
		disk__close(d);
		fuzz_check(pread(fd, b->template, TEMPLATE_SIZE, 0) ==
			   TEMPLATE_SIZE);
		close(fd);
	}
}

/* The map bytes as the file holds them: zeros past its end. */
static uint64_t count_data(const struct fuzz_disk *f, const struct base *b,
			   uint64_t file_size)
{
	uint64_t n = 0, nr = b->size / DISK_BLOCK_SIZE;

	for (uint64_t i = 0; i < nr; i++)
		if (MAP_OFFSET + i < file_size &&
		    f->file[MAP_OFFSET + i] == DISK_BLOCK_DATA)
			n++;
	return n;
}

/*
 * Extents that tile [off, off + len): zeros, the base at the disk's own
 * offset, or the state file's data area at data_offset + offset (the
 * only choice for a write: delta_only).
 */
static void check_extents(const struct base *b, uint64_t off, uint64_t len,
			  const struct disk_extent *ext, int n, bool delta_only)
{
	uint64_t sum = 0, doff = data_offset(b->size / DISK_BLOCK_SIZE);

	fuzz_check(n >= 1 && n <= MAX_EXT);
	for (int i = 0; i < n; i++) {
		const struct disk_extent *e = &ext[i];
		bool in_delta = e->fd >= 0 && e->offset == doff + off + sum;
		bool in_base = e->fd >= 0 && e->offset == off + sum;

		fuzz_check(e->len && !(e->len % DISK_BLOCK_SIZE));
		fuzz_check(delta_only ? in_delta :
					(e->fd < 0 || in_delta || in_base));
		fuzz_check(e->len <= len - sum);
		sum += e->len;
	}
	fuzz_check(sum == len);
}

static uint64_t pick_off(struct fuzz_in *in, const struct base *b)
{
	uint16_t v = fuzz_in__u16(in);

	if (v & 0x8000) /* anything: unaligned, past the end */
		return (uint64_t)(v & 0x7fff) * 512;
	return (uint64_t)v % (b->size / DISK_BLOCK_SIZE) * DISK_BLOCK_SIZE;
}

static uint64_t pick_len(struct fuzz_in *in)
{
	uint8_t v = fuzz_in__u8(in);

	if (v & 0x80)
		return (uint64_t)(v & 0x7f) * 512;
	return (uint64_t)(v % 16) * DISK_BLOCK_SIZE;
}

/* The block device's calls, on a disk that opened. */
static void calls(struct disk *d, const struct base *b, struct fuzz_in *in)
{
	struct disk_extent ext[MAX_EXT];
	uint64_t dirty = disk__dirty_bytes(d), reserved;

	for (int i = 0; i < MAX_CALLS && in->left; i++) {
		uint8_t c = fuzz_in__u8(in);
		uint64_t off = pick_off(in, b), len = pick_len(in);
		bool ok = c & 0x80;
		int n;

		switch ((enum call)(c % NR_CALLS)) {
		case CALL_READ:
			n = disk__map_read(d, off, len, ext, MAX_EXT);
			if (n > 0)
				check_extents(b, off, len, ext, n, false);
			else
				fuzz_check(n == -EINVAL || n == -E2BIG);
			break;
		case CALL_WRITE:
			n = disk__begin_write(d, off, len, ext, &reserved);
			if (n) {
				fuzz_check(n == -EINVAL || n == -ENOSPC);
				break;
			}
			check_extents(b, off, len, ext, 1, true);
			disk__end_write(d, off, len, reserved, ok);
			fuzz_check(ok || disk__dirty_bytes(d) == dirty);
			fuzz_check(disk__dirty_bytes(d) >= dirty);
			fuzz_check(disk__dirty_bytes(d) <= dirty + len);
			fuzz_check(!ok || disk__dirty_bytes(d) <= b->size);
			dirty = disk__dirty_bytes(d);
			break;
		default:
			n = disk__begin_zero(d, off, len, ext);
			if (n) {
				fuzz_check(n == -EINVAL);
				break;
			}
			disk__end_zero(d, off, len, ok);
			fuzz_check(disk__dirty_bytes(d) <= dirty);
			dirty = disk__dirty_bytes(d);
			break;
		}
	}
}

static void run(struct fuzz_disk *f, struct fuzz_in *in)
{
	uint8_t opt = fuzz_in__u8(in);
	const struct base *b = &f->bases[opt % NR_BASES];
	uint64_t nr = b->size / DISK_BLOCK_SIZE;
	uint64_t size = data_offset(nr) + b->size, dirty;
	struct disk *d;
	char path[64];
	int fd, ret;

	if (opt & 0x10) /* a damaged size: short, empty or long */
		size = (uint64_t)fuzz_in__u32(in) %
		       (size + 2 * DISK_BLOCK_SIZE);
	memcpy(f->file, b->template, TEMPLATE_SIZE);
	for (int i = 0; i < MAX_PATCHES && in->left; i++) {
		uint16_t at = fuzz_in__u16(in) % TEMPLATE_SIZE;
		size_t len;
		const uint8_t *p =
			fuzz_in__bytes(in, fuzz_in__u8(in) % PATCH_MAX, &len);

		/* A zero-length patch ends them: the calls follow. */
		if (!len)
			break;
		if (len > TEMPLATE_SIZE - at)
			len = TEMPLATE_SIZE - at;
		memcpy(f->file + at, p, len);
	}
	if (opt & 0x20)
		fix_checksum(f->file);

	fd = new_memfd(path, sizeof(path));
	fuzz_check(pwrite(fd, f->file,
			  size < TEMPLATE_SIZE ? size : TEMPLATE_SIZE, 0) ==
		   (ssize_t)(size < TEMPLATE_SIZE ? size : TEMPLATE_SIZE));
	fuzz_check(!ftruncate(fd, size));

	ret = open_state(b, path, &d);
	if (ret) {
		fuzz_check(ret == -EINVAL);
		fuzz_check(!d);
		/* Nothing left locked: it opens again (and fails alike). */
		fuzz_check(open_state(b, path, &d) == ret);
		close(fd);
		return;
	}
	/* An empty file is made anew: all BASE. */
	dirty = size ? count_data(f, b, size) : 0;
	fuzz_check(disk__dirty_bytes(d) == dirty * DISK_BLOCK_SIZE);
	for (uint64_t i = 0; i < nr && MAP_OFFSET + i < size; i++)
		fuzz_check(f->file[MAP_OFFSET + i] <= DISK_BLOCK_ZERO);
	calls(d, b, in);
	dirty = disk__dirty_bytes(d);
	disk__close(d);
	fuzz_check(!open_state(b, path, &d));
	fuzz_check(disk__dirty_bytes(d) == dirty);
	disk__close(d);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fuzz_disk *f;
	struct fuzz_in in;

	fuzz__quiet();
	if (!f) {
		f = calloc(1, sizeof(*f));
		fuzz_check(f);
		setup(f);
	}
	fuzz_in__init(&in, data, size);
	run(f, &in);
	return 0;
}
