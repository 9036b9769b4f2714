// SPDX-License-Identifier: GPL-2.0
/*
 * A root disk: a read-only base image plus a writable delta (a memfd for an
 * ephemeral disk, a state file for a persistent one). Format and crash
 * rules: Documentation/rootfs.md, "Writable layer (delta) format".
 *
 * The map of the delta is mmap'ed MAP_SHARED, so every map store lands in
 * the page cache at once and survives the monitor being killed. The only
 * ordering rule is that a block is marked DISK_BLOCK_DATA after its data
 * write completed (disk__end_write), never before: a killed monitor then
 * leaves a map that names only blocks whose data is in the file.
 *
 * Open does all the checking and reports its own errors once; the data
 * path functions only answer with -errno (the block device logs, rate
 * limited, since a guest can make them fail at will).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "devices/block/disk.h"
#include "devices/block/qcow2.h"

/* ---- the delta header (all fields little-endian) ------------------- */

#define DELTA_MAGIC	  "KILNDLT1"
#define DELTA_MAGIC_LEN	  8
#define DELTA_VERSION	  1
#define DELTA_HEADER_SIZE 4096U
#define DELTA_DATA_ALIGN  (1024U * 1024U) /* data_offset is a MiB multiple */

#define HDR_MAGIC	0   /* char[8] "KILNDLT1" */
#define HDR_VERSION	8   /* le32 */
#define HDR_HEADER_SIZE 12  /* le32, bytes */
#define HDR_BLOCK_SIZE	16  /* le32, bytes */
#define HDR_CHECKSUM	20  /* le32, CRC-32C of the header, this field 0 */
#define HDR_BASE_SIZE	24  /* le64, bytes */
#define HDR_MAP_OFFSET	32  /* le64, bytes from the start of the file */
#define HDR_MAP_SIZE	40  /* le64, bytes: one per block */
#define HDR_DATA_OFFSET 48  /* le64, bytes, a multiple of 1 MiB */
#define HDR_DIGEST	56  /* char[256], NUL-padded */
#define HDR_DIGEST_SIZE 256 /* the digest is at most 255 characters */
#define HDR_FIELDS_END	(HDR_DIGEST + HDR_DIGEST_SIZE) /* zeros follow */

#define DISK_WHAT_LEN	 (PATH_MAX + 32) /* "state file PATH" */
#define LAYER_COPY_CHUNK (1024U * 1024U) /* bytes per read of a saved layer */

struct disk {
	enum disk_mode mode;
	uint64_t size;	    /* bytes */
	uint64_t nr_blocks; /* size / DISK_BLOCK_SIZE */
	int base_fd;
	struct qcow2 *qcow2; /* a qcow2 base's reader; NULL: raw */
	dev_t base_dev;	     /* to refuse the base as its own state file */
	ino_t base_ino;
	int delta_fd; /* -1 when read-only */
	uint64_t map_offset, data_offset;
	void *map_mem; /* the mapping: page aligned, covers the map */
	size_t map_mem_len;
	uint8_t *map;		  /* nr_blocks bytes of enum disk_block_state */
	uint64_t dirty_blocks;	  /* map bytes that are DISK_BLOCK_DATA */
	uint64_t reserved_blocks; /* begun writes that may add to it */
	uint64_t limit_blocks;	  /* max dirty blocks, UINT64_MAX: none */
};

static void put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static uint32_t get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

/* CRC-32C (Castagnoli), bitwise: it runs once per open on 4 KiB. */
static uint32_t crc32c(const uint8_t *p, size_t len)
{
	uint32_t crc = ~0U;
	int bit;

	while (len--) {
		crc ^= *p++;
		for (bit = 0; bit < 8; bit++)
			crc = (crc >> 1) ^ (0x82f63b78U & -(crc & 1));
	}
	return ~crc;
}

static uint32_t header_checksum(const uint8_t *hdr)
{
	uint8_t copy[DELTA_HEADER_SIZE];

	memcpy(copy, hdr, sizeof(copy));
	put_le32(copy + HDR_CHECKSUM, 0);
	return crc32c(copy, sizeof(copy));
}

static void header_build(const struct disk *d, const char *digest, uint8_t *hdr)
{
	memset(hdr, 0, DELTA_HEADER_SIZE);
	memcpy(hdr + HDR_MAGIC, DELTA_MAGIC, DELTA_MAGIC_LEN);
	put_le32(hdr + HDR_VERSION, DELTA_VERSION);
	put_le32(hdr + HDR_HEADER_SIZE, DELTA_HEADER_SIZE);
	put_le32(hdr + HDR_BLOCK_SIZE, DISK_BLOCK_SIZE);
	put_le64(hdr + HDR_BASE_SIZE, d->size);
	put_le64(hdr + HDR_MAP_OFFSET, d->map_offset);
	put_le64(hdr + HDR_MAP_SIZE, d->nr_blocks);
	put_le64(hdr + HDR_DATA_OFFSET, d->data_offset);
	if (digest)
		memcpy(hdr + HDR_DIGEST, digest, strlen(digest));
	put_le32(hdr + HDR_CHECKSUM, header_checksum(hdr));
}

/*
 * An existing delta's header (a state file's, or a saved layer's) must
 * describe exactly this base; the message names the field that differs.
 * The layout fields follow from the base size, so they can only differ
 * in a damaged file. what: "state file PATH", for the messages.
 */
static int header_check(const struct disk *d, const char *what,
			const char *base_digest, const uint8_t *hdr)
{
	const char *digest = (const char *)hdr + HDR_DIGEST;
	uint32_t v;

	if (memcmp(hdr + HDR_MAGIC, DELTA_MAGIC, DELTA_MAGIC_LEN)) {
		pr_err("%s is not a Kiln state file (bad magic)", what);
		return -EINVAL;
	}
	v = get_le32(hdr + HDR_VERSION);
	if (v != DELTA_VERSION) {
		pr_err("%s has format version %u, this monitor reads "
		       "version %u",
		       what, v, DELTA_VERSION);
		return -EINVAL;
	}
	if (get_le32(hdr + HDR_CHECKSUM) != header_checksum(hdr)) {
		pr_err("%s: header checksum mismatch (damaged file)", what);
		return -EINVAL;
	}
	v = get_le32(hdr + HDR_BLOCK_SIZE);
	if (v != DISK_BLOCK_SIZE) {
		pr_err("%s has block size %u, not %u", what, v,
		       DISK_BLOCK_SIZE);
		return -EINVAL;
	}
	if (memchr(digest, '\0', HDR_DIGEST_SIZE) == NULL) {
		pr_err("%s: base digest field is not terminated "
		       "(damaged file)",
		       what);
		return -EINVAL;
	}
	if (strcmp(digest, base_digest)) {
		pr_err("%s was made for base image %s not %s", what, digest,
		       base_digest);
		return -EINVAL;
	}
	if (get_le64(hdr + HDR_BASE_SIZE) != d->size) {
		pr_err("%s was made for a base image of %" PRIu64
		       " bytes, not %" PRIu64,
		       what, get_le64(hdr + HDR_BASE_SIZE), d->size);
		return -EINVAL;
	}
	if (get_le32(hdr + HDR_HEADER_SIZE) != DELTA_HEADER_SIZE ||
	    get_le64(hdr + HDR_MAP_OFFSET) != d->map_offset ||
	    get_le64(hdr + HDR_MAP_SIZE) != d->nr_blocks ||
	    get_le64(hdr + HDR_DATA_OFFSET) != d->data_offset) {
		pr_err("%s: map or data layout does not match its "
		       "base size (damaged file)",
		       what);
		return -EINVAL;
	}
	return 0;
}

/* ---- open ------------------------------------------------------------ */

static uint64_t delta_file_size(const struct disk *d)
{
	return d->data_offset + d->size;
}

/* open() with O_DIRECT fails with EINVAL where the filesystem lacks it. */
static const char *direct_hint(const struct disk_params *p, int err)
{
	return p->direct && err == -EINVAL ?
		       " (is direct I/O supported on that filesystem?)" :
		       "";
}

/*
 * A qcow2 base: the reader checks the header and L1 table; the guest
 * sees the virtual size. Its metadata and compressed clusters are read
 * at byte offsets, which O_DIRECT does not allow.
 */
static int qcow2_base_open(struct disk *d, const struct disk_params *p)
{
	char err[DISK_WHAT_LEN + 256];
	int ret;

	if (p->direct) {
		pr_err("base image %s: direct I/O is not supported on a qcow2 "
		       "base",
		       p->base_path);
		return -EINVAL;
	}
	ret = qcow2__open(&d->qcow2, d->base_fd, p->base_path, err,
			  sizeof(err));
	if (ret) {
		pr_err("%s", err);
		return ret;
	}
	if (qcow2__virtual_size(d->qcow2) != p->base_size) {
		pr_err("base image %s: qcow2 virtual size %" PRIu64
		       " bytes, its descriptor says %" PRIu64,
		       p->base_path, qcow2__virtual_size(d->qcow2),
		       p->base_size);
		return -EINVAL;
	}
	return 0;
}

static int base_open(struct disk *d, const struct disk_params *p)
{
	const char *path = p->base_path;
	uint64_t size;
	struct stat st;
	int ret;

	d->base_fd =
		open(path, O_RDONLY | O_CLOEXEC | (p->direct ? O_DIRECT : 0));
	if (d->base_fd < 0) {
		ret = -errno;
		pr_err("base image %s: %s%s", path, strerror(-ret),
		       direct_hint(p, ret));
		return ret;
	}
	if (fstat(d->base_fd, &st)) {
		ret = -errno;
		pr_err("base image %s: fstat: %s", path, strerror(-ret));
		return ret;
	}
	d->base_dev = st.st_dev;
	d->base_ino = st.st_ino;
	if (S_ISREG(st.st_mode)) {
		size = st.st_size;
	} else if (S_ISBLK(st.st_mode)) {
		if (ioctl(d->base_fd, BLKGETSIZE64, &size)) {
			ret = -errno;
			pr_err("base image %s: BLKGETSIZE64: %s", path,
			       strerror(-ret));
			return ret;
		}
	} else {
		pr_err("base image %s is not a regular file or block device",
		       path);
		return -EINVAL;
	}
	if (p->base_format == DISK_FORMAT_QCOW2)
		return qcow2_base_open(d, p);
	if (size != p->base_size) {
		pr_err("base image %s is %" PRIu64
		       " bytes, its descriptor says %" PRIu64,
		       path, size, p->base_size);
		return -EINVAL;
	}
	return 0;
}

/*
 * Gives the map's pages their blocks now. A store through the mapping
 * into a page that is still a hole needs a block at that moment; on a
 * full filesystem the kernel can only answer with SIGBUS, and a guest
 * that fills the filesystem (through this disk or a bind mount) and
 * then zeroes a block never touched would kill the monitor. Allocated
 * here, a full filesystem fails the open instead. A filesystem without
 * fallocate keeps the old risk, with a warning.
 */
static int map_reserve(struct disk *d, uint64_t start, const char *what)
{
	uint64_t page = sysconf(_SC_PAGESIZE);
	uint64_t len = (d->map_mem_len + page - 1) & ~(page - 1);
	int ret;

	/* Past the map's last page comes data_offset: len stays below it. */
	if (!fallocate(d->delta_fd, 0, start, len))
		return 0;
	ret = -errno;
	if (ret == -EOPNOTSUPP) {
		pr_warn("%s: cannot allocate the block map up front "
			"(fallocate: %s): a full filesystem may stop the VM",
			what, strerror(-ret));
		return 0;
	}
	pr_err("%s: allocating the block map (%" PRIu64 " bytes): %s", what,
	       len, strerror(-ret));
	return ret;
}

/* Maps the map; the file must already be delta_file_size() long. */
static int map_delta(struct disk *d, const char *what)
{
	uint64_t page = sysconf(_SC_PAGESIZE);
	uint64_t start = d->map_offset & ~(page - 1);
	int ret;

	d->map_mem_len = d->map_offset + d->nr_blocks - start;
	ret = map_reserve(d, start, what);
	if (ret)
		return ret;
	d->map_mem = mmap(NULL, d->map_mem_len, PROT_READ | PROT_WRITE,
			  MAP_SHARED, d->delta_fd, start);
	if (d->map_mem == MAP_FAILED) {
		ret = -errno;
		d->map_mem = NULL;
		pr_err("%s: mmap of the block map: %s", what, strerror(-ret));
		return ret;
	}
	d->map = (uint8_t *)d->map_mem + (d->map_offset - start);
	return 0;
}

/* One pwrite for the whole header, then the size: see rootfs.md. */
static int delta_init(struct disk *d, const char *digest, const char *what)
{
	uint8_t *hdr;
	ssize_t n;
	int ret;

	/* Aligned for an O_DIRECT state file. */
	hdr = aligned_alloc(DELTA_HEADER_SIZE, DELTA_HEADER_SIZE);
	if (!hdr) {
		pr_err("%s: %s", what, strerror(ENOMEM));
		return -ENOMEM;
	}
	header_build(d, digest, hdr);
	n = pwrite(d->delta_fd, hdr, DELTA_HEADER_SIZE, 0);
	ret = n == DELTA_HEADER_SIZE ? 0 : n < 0 ? -errno : -EIO;
	free(hdr);
	if (ret) {
		pr_err("%s: writing the header: %s", what, strerror(-ret));
		return ret;
	}
	if (ftruncate(d->delta_fd, delta_file_size(d))) {
		ret = -errno;
		pr_err("%s: ftruncate to %" PRIu64 " bytes: %s", what,
		       delta_file_size(d), strerror(-ret));
		return ret;
	}
	return 0;
}

static int ephemeral_open(struct disk *d, const struct disk_params *p)
{
	const char *what = "ephemeral writable layer";
	int ret;

	d->delta_fd = memfd_create("kiln-ephemeral", MFD_CLOEXEC);
	if (d->delta_fd < 0) {
		ret = -errno;
		pr_err("%s: memfd_create: %s", what, strerror(-ret));
		return ret;
	}
	ret = delta_init(d, p->base_digest, what);
	if (ret)
		return ret;
	return map_delta(d, what);
}

static int state_lock(struct disk *d, const char *path)
{
	int ret;

	if (!flock(d->delta_fd, LOCK_EX | LOCK_NB))
		return 0;
	ret = -errno;
	if (ret == -EWOULDBLOCK) {
		pr_err("%s: state file is in use by another VM", path);
		return -EBUSY;
	}
	pr_err("state file %s: flock: %s", path, strerror(-ret));
	return ret;
}

static int state_read_header(struct disk *d, const struct disk_params *p)
{
	char what[DISK_WHAT_LEN];
	uint8_t *hdr;
	ssize_t n;
	int ret;

	hdr = aligned_alloc(DELTA_HEADER_SIZE, DELTA_HEADER_SIZE);
	if (!hdr) {
		pr_err("state file %s: %s", p->state_path, strerror(ENOMEM));
		return -ENOMEM;
	}
	n = pread(d->delta_fd, hdr, DELTA_HEADER_SIZE, 0);
	if (n != DELTA_HEADER_SIZE) {
		ret = n < 0 ? -errno : -EINVAL;
		if (n < 0)
			pr_err("state file %s: reading the header: %s",
			       p->state_path, strerror(-ret));
		else
			pr_err("state file %s: header truncated (%zd of %u "
			       "bytes)",
			       p->state_path, n, DELTA_HEADER_SIZE);
		free(hdr);
		return ret;
	}
	snprintf(what, sizeof(what), "state file %s", p->state_path);
	ret = header_check(d, what, p->base_digest, hdr);
	free(hdr);
	return ret;
}

/*
 * Counts the DATA blocks; any byte that is not a block state is damage.
 * what: "state file PATH", for the message.
 */
static int map_scan(struct disk *d, const char *what)
{
	uint64_t i;

	for (i = 0; i < d->nr_blocks; i++) {
		switch (d->map[i]) {
		case DISK_BLOCK_DATA:
			d->dirty_blocks++;
			break;
		case DISK_BLOCK_BASE:
		case DISK_BLOCK_ZERO:
			break;
		default:
			pr_err("%s: block map entry %" PRIu64
			       " is %u, not a block state (damaged file)",
			       what, i, d->map[i]);
			return -EINVAL;
		}
	}
	return 0;
}

static int persistent_open(struct disk *d, const struct disk_params *p)
{
	const char *path = p->state_path;
	char what[DISK_WHAT_LEN];
	struct stat st;
	int ret;

	d->delta_fd = open(
		path, O_RDWR | O_CREAT | O_CLOEXEC | (p->direct ? O_DIRECT : 0),
		0600);
	if (d->delta_fd < 0) {
		ret = -errno;
		pr_err("state file %s: %s%s", path, strerror(-ret),
		       direct_hint(p, ret));
		return ret;
	}
	ret = state_lock(d, path);
	if (ret)
		return ret;
	if (fstat(d->delta_fd, &st)) {
		ret = -errno;
		pr_err("state file %s: fstat: %s", path, strerror(-ret));
		return ret;
	}
	if (!S_ISREG(st.st_mode)) {
		pr_err("state file %s is not a regular file", path);
		return -EINVAL;
	}
	if (st.st_dev == d->base_dev && st.st_ino == d->base_ino) {
		pr_err("state file %s is the base image itself", path);
		return -EINVAL;
	}

	/*
	 * Empty: new, or left by a run killed before its header was written.
	 * A run killed between the header and the ftruncate leaves a file
	 * that is only short: its missing tail reads as zeros, which is an
	 * all-BASE map and an empty data area, so growing it is the repair.
	 */
	if (st.st_size == 0) {
		ret = delta_init(d, p->base_digest, path);
		if (ret)
			return ret;
	} else {
		ret = state_read_header(d, p);
		if (ret)
			return ret;
		if ((uint64_t)st.st_size > delta_file_size(d)) {
			pr_err("state file %s is %" PRIu64
			       " bytes, more than the %" PRIu64
			       " its header allows (damaged file)",
			       path, (uint64_t)st.st_size, delta_file_size(d));
			return -EINVAL;
		}
		if ((uint64_t)st.st_size < delta_file_size(d) &&
		    ftruncate(d->delta_fd, delta_file_size(d))) {
			ret = -errno;
			pr_err("state file %s: ftruncate to %" PRIu64
			       " bytes: %s",
			       path, delta_file_size(d), strerror(-ret));
			return ret;
		}
	}
	ret = map_delta(d, path);
	if (ret)
		return ret;
	snprintf(what, sizeof(what), "state file %s", path);
	ret = map_scan(d, what);
	if (ret)
		return ret;
	if (d->dirty_blocks > d->limit_blocks)
		pr_warn("state file %s already holds %" PRIu64
			" bytes, over its limit of %" PRIu64
			": writes to new blocks will fail",
			path, d->dirty_blocks * DISK_BLOCK_SIZE,
			p->max_dirty_bytes);
	return 0;
}

static int params_check(const struct disk_params *p)
{
	if (!p->base_path) {
		pr_err("root disk: no base image path");
		return -EINVAL;
	}
	if (!p->base_size || p->base_size % DISK_BLOCK_SIZE) {
		pr_err("base image %s: size %" PRIu64
		       " is not a nonzero multiple of %u bytes",
		       p->base_path, p->base_size, DISK_BLOCK_SIZE);
		return -EINVAL;
	}
	if (p->base_digest && strlen(p->base_digest) >= HDR_DIGEST_SIZE) {
		pr_err("base image %s: digest longer than %u characters",
		       p->base_path, HDR_DIGEST_SIZE - 1);
		return -EINVAL;
	}
	switch (p->mode) {
	case DISK_READONLY:
	case DISK_EPHEMERAL:
		return 0;
	case DISK_PERSISTENT:
		break;
	default:
		pr_err("base image %s: unknown disk mode %d", p->base_path,
		       p->mode);
		return -EINVAL;
	}
	if (!p->state_path || p->state_path[0] != '/') {
		pr_err("state file %s: the path must be absolute",
		       p->state_path ? p->state_path : "(none)");
		return -EINVAL;
	}
	if (!p->base_digest || !p->base_digest[0]) {
		pr_err("state file %s: no base image digest to record",
		       p->state_path);
		return -EINVAL;
	}
	return 0;
}

int disk__open(struct disk **out, const struct disk_params *p)
{
	struct disk *d;
	int ret;

	*out = NULL;
	ret = params_check(p);
	if (ret)
		return ret;
	d = calloc(1, sizeof(*d));
	if (!d) {
		pr_err("base image %s: %s", p->base_path, strerror(ENOMEM));
		return -ENOMEM;
	}
	d->base_fd = -1;
	d->delta_fd = -1;
	d->mode = p->mode;
	d->size = p->base_size;
	d->nr_blocks = p->base_size / DISK_BLOCK_SIZE;
	d->map_offset = DELTA_HEADER_SIZE;
	d->data_offset = (d->map_offset + d->nr_blocks + DELTA_DATA_ALIGN - 1) /
			 DELTA_DATA_ALIGN * DELTA_DATA_ALIGN;
	d->limit_blocks = p->max_dirty_bytes ?
				  p->max_dirty_bytes / DISK_BLOCK_SIZE :
				  UINT64_MAX;

	ret = base_open(d, p);
	if (ret)
		goto out_close;
	switch (p->mode) {
	case DISK_READONLY:
		break;
	case DISK_EPHEMERAL:
		ret = ephemeral_open(d, p);
		break;
	case DISK_PERSISTENT:
		ret = persistent_open(d, p);
		break;
	}
	if (ret)
		goto out_close;
	*out = d;
	return 0;

out_close:
	disk__close(d);
	return ret;
}

/* Any half-built disk: every resource is checked before release. */
void disk__close(struct disk *d)
{
	if (!d)
		return;
	if (d->map_mem)
		munmap(d->map_mem, d->map_mem_len);
	/* Closing the last fd of the file description drops the flock. */
	if (d->delta_fd >= 0)
		close(d->delta_fd);
	qcow2__close(d->qcow2);
	if (d->base_fd >= 0)
		close(d->base_fd);
	free(d);
}

/* ---- queries ---------------------------------------------------------- */

uint64_t disk__size(const struct disk *d)
{
	return d->size;
}

bool disk__read_only(const struct disk *d)
{
	return d->mode == DISK_READONLY;
}

int disk__sync_fd(const struct disk *d)
{
	return d->mode == DISK_PERSISTENT ? d->delta_fd : -1;
}

uint64_t disk__dirty_bytes(const struct disk *d)
{
	return __atomic_load_n(&d->dirty_blocks, __ATOMIC_RELAXED) *
	       DISK_BLOCK_SIZE;
}

/* ---- the layer in a snapshot (Documentation/snapshots.md) ------------ */

int disk__layer_fd(const struct disk *d)
{
	return d->delta_fd;
}

uint64_t disk__layer_bytes(const struct disk *d)
{
	return d->mode == DISK_READONLY ? 0 : delta_file_size(d);
}

static int read_exact(int fd, void *p, size_t n, uint64_t off)
{
	ssize_t r;

	while (n) {
		r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p = (uint8_t *)p + r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int write_exact(int fd, const void *p, size_t n, uint64_t off)
{
	ssize_t w;

	while (n) {
		w = pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/*
 * The header of the saved layer, checked against this disk's own (the
 * memfd's, built for this base): the same checks as a state file's.
 */
static int layer_header_check(struct disk *d, int fd, const char *what)
{
	uint8_t *own, *hdr;
	int ret = -ENOMEM;

	own = malloc(DELTA_HEADER_SIZE);
	hdr = malloc(DELTA_HEADER_SIZE);
	if (!own || !hdr) {
		pr_err("%s: %s", what, strerror(ENOMEM));
		goto out_free;
	}
	ret = read_exact(d->delta_fd, own, DELTA_HEADER_SIZE, 0);
	if (ret) {
		pr_err("%s: reading this disk's header: %s", what,
		       strerror(-ret));
		goto out_free;
	}
	ret = read_exact(fd, hdr, DELTA_HEADER_SIZE, 0);
	if (ret) {
		pr_err("%s: reading its header: %s", what, strerror(-ret));
		goto out_free;
	}
	/* header_build NUL-terminates the digest in our own header. */
	ret = header_check(d, what, (const char *)own + HDR_DIGEST, hdr);
out_free:
	free(hdr);
	free(own);
	return ret;
}

/*
 * Copies what follows the header in fd's data extents (SEEK_DATA,
 * SEEK_HOLE): the map and the data blocks, at the same offsets. The
 * holes are already holes in the fresh memfd, so only data is written.
 */
static int layer_copy(struct disk *d, int fd, const char *what)
{
	uint64_t size = delta_file_size(d), off = DELTA_HEADER_SIZE, end, n;
	uint8_t *buf;
	off_t at;
	int ret = 0;

	buf = malloc(LAYER_COPY_CHUNK);
	if (!buf) {
		pr_err("%s: %s", what, strerror(ENOMEM));
		return -ENOMEM;
	}
	while (!ret && off < size) {
		at = lseek(fd, (off_t)off, SEEK_DATA);
		if (at < 0) {
			ret = errno == ENXIO ? 0 : -errno;
			break;
		}
		off = (uint64_t)at;
		at = lseek(fd, at, SEEK_HOLE);
		if (at < 0) {
			ret = -errno;
			break;
		}
		end = (uint64_t)at < size ? (uint64_t)at : size;
		for (; !ret && off < end; off += n) {
			n = end - off < LAYER_COPY_CHUNK ? end - off :
							   LAYER_COPY_CHUNK;
			ret = read_exact(fd, buf, n, off);
			if (!ret)
				ret = write_exact(d->delta_fd, buf, n, off);
		}
	}
	free(buf);
	if (ret)
		pr_err("%s: copying it into the new layer: %s", what,
		       strerror(-ret));
	return ret;
}

int disk__load_layer(struct disk *d, int fd, const char *what)
{
	struct stat st;
	int ret;

	if (d->mode != DISK_EPHEMERAL || d->dirty_blocks ||
	    d->reserved_blocks) {
		pr_err("%s: only a new ephemeral layer takes a saved one",
		       what);
		return -EINVAL;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		pr_err("%s: fstat: %s", what, strerror(-ret));
		return ret;
	}
	if (!S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != delta_file_size(d)) {
		pr_err("%s is %" PRIu64 " bytes, a layer of this base image "
		       "has %" PRIu64,
		       what, (uint64_t)st.st_size, delta_file_size(d));
		return -EINVAL;
	}
	ret = layer_header_check(d, fd, what);
	if (!ret)
		ret = layer_copy(d, fd, what);
	if (!ret)
		ret = map_scan(d, what);
	if (ret)
		return ret;
	if (d->dirty_blocks > d->limit_blocks)
		pr_warn("%s holds %" PRIu64 " bytes, over this disk's limit "
			"of %" PRIu64 ": writes to new blocks will fail",
			what, d->dirty_blocks * DISK_BLOCK_SIZE,
			d->limit_blocks * DISK_BLOCK_SIZE);
	return 0;
}

/* ---- the data path: offsets and lengths come from the guest ---------- */

/* Only the disk's thread writes it; vm.metrics reads it from another. */
static void set_dirty(struct disk *d, uint64_t blocks)
{
	__atomic_store_n(&d->dirty_blocks, blocks, __ATOMIC_RELAXED);
}

/* Aligned, nonempty and inside the disk, written so nothing can wrap. */
static bool range_ok(const struct disk *d, uint64_t offset, uint64_t len)
{
	return len && !(offset % DISK_BLOCK_SIZE) && !(len % DISK_BLOCK_SIZE) &&
	       offset <= d->size && len <= d->size - offset;
}

static enum disk_block_state block_state(const struct disk *d, uint64_t blk)
{
	return d->mode == DISK_READONLY ? DISK_BLOCK_BASE : d->map[blk];
}

/* Where block blk reads from: its extent of length DISK_BLOCK_SIZE. */
static struct disk_extent block_source(const struct disk *d, uint64_t blk)
{
	uint64_t off = blk * DISK_BLOCK_SIZE;

	switch (block_state(d, blk)) {
	case DISK_BLOCK_DATA:
		return (struct disk_extent){ d->delta_fd, d->data_offset + off,
					     DISK_BLOCK_SIZE };
	case DISK_BLOCK_ZERO:
		return (struct disk_extent){ -1, 0, DISK_BLOCK_SIZE };
	default:
		return (struct disk_extent){ d->base_fd, off, DISK_BLOCK_SIZE };
	}
}

/* Does next continue last: same fd, and (for files) the next offset? */
static bool extent_continues(const struct disk_extent *last,
			     const struct disk_extent *next)
{
	if (last->fd != next->fd)
		return false;
	if (last->fd >= 0)
		return last->offset + last->len == next->offset;
	if (!last->buf || !next->buf)
		return !last->buf && !next->buf;
	return (const uint8_t *)last->buf + last->len == next->buf;
}

/* A qcow2 base's block: in its file, zeros, or an inflated cluster. */
static int qcow2_source(const struct disk *d, uint64_t blk,
			struct disk_extent *e)
{
	struct qcow2_extent q;
	int ret;

	ret = qcow2__map(d->qcow2, blk * DISK_BLOCK_SIZE, DISK_BLOCK_SIZE, &q);
	if (ret)
		return ret;
	*e = (struct disk_extent){
		.fd = q.kind == QCOW2_EXTENT_FILE ? d->base_fd : -1,
		.offset = q.kind == QCOW2_EXTENT_FILE ? q.offset : 0,
		.len = DISK_BLOCK_SIZE,
		.buf = q.kind == QCOW2_EXTENT_BUFFER ? q.buf : NULL,
	};
	return 0;
}

int disk__map_read(const struct disk *d, uint64_t offset, uint64_t len,
		   struct disk_extent *ext, unsigned int max)
{
	uint64_t blk, first, end;
	unsigned int n = 0;
	int ret;

	if (!range_ok(d, offset, len))
		return -EINVAL;
	first = offset / DISK_BLOCK_SIZE;
	end = first + len / DISK_BLOCK_SIZE;
	if (d->qcow2)
		qcow2__map_begin(d->qcow2);
	/* Bounded by the disk size: range_ok checked end <= nr_blocks. */
	for (blk = first; blk < end; blk++) {
		struct disk_extent e = block_source(d, blk);

		if (d->qcow2 && e.fd == d->base_fd) {
			ret = qcow2_source(d, blk, &e);
			if (ret)
				return ret;
		}
		if (n && extent_continues(&ext[n - 1], &e)) {
			ext[n - 1].len += e.len;
			continue;
		}
		if (n == max)
			return -E2BIG;
		ext[n++] = e;
	}
	return n;
}

int disk__begin_write(struct disk *d, uint64_t offset, uint64_t len,
		      struct disk_extent *ext, uint64_t *reserved)
{
	uint64_t blk, first, end, fresh = 0;

	*reserved = 0;
	if (d->mode == DISK_READONLY)
		return -EROFS;
	if (!range_ok(d, offset, len))
		return -EINVAL;
	first = offset / DISK_BLOCK_SIZE;
	end = first + len / DISK_BLOCK_SIZE;
	for (blk = first; blk < end; blk++)
		fresh += d->map[blk] != DISK_BLOCK_DATA;
	/* Each term is at most nr_blocks times the writes in flight. */
	if (d->dirty_blocks + d->reserved_blocks + fresh > d->limit_blocks)
		return -ENOSPC;
	d->reserved_blocks += fresh;
	*reserved = fresh;
	*ext = (struct disk_extent){ d->delta_fd, d->data_offset + offset,
				     len };
	return 0;
}

void disk__end_write(struct disk *d, uint64_t offset, uint64_t len,
		     uint64_t reserved, bool ok)
{
	uint64_t blk, first, end;

	/* A caller bug must not wrap the counter into a permanent -ENOSPC. */
	d->reserved_blocks -=
		reserved < d->reserved_blocks ? reserved : d->reserved_blocks;
	if (!ok || d->mode == DISK_READONLY || !range_ok(d, offset, len))
		return;
	first = offset / DISK_BLOCK_SIZE;
	end = first + len / DISK_BLOCK_SIZE;
	/*
	 * The data write has completed (the caller saw its completion), so
	 * the map may now name it. A plain store into the MAP_SHARED page is
	 * in the page cache at once: no barrier or msync is needed for a
	 * killed process, and fdatasync on disk__sync_fd writes it back.
	 */
	for (blk = first; blk < end; blk++) {
		if (d->map[blk] == DISK_BLOCK_DATA)
			continue;
		d->map[blk] = DISK_BLOCK_DATA;
		set_dirty(d, d->dirty_blocks + 1);
	}
}

int disk__begin_zero(struct disk *d, uint64_t offset, uint64_t len,
		     struct disk_extent *ext)
{
	if (d->mode == DISK_READONLY)
		return -EROFS;
	if (!range_ok(d, offset, len))
		return -EINVAL;
	*ext = (struct disk_extent){ d->delta_fd, d->data_offset + offset,
				     len };
	return 0;
}

void disk__end_zero(struct disk *d, uint64_t offset, uint64_t len, bool ok)
{
	uint64_t blk, first, end;

	if (!ok || d->mode == DISK_READONLY || !range_ok(d, offset, len))
		return;
	first = offset / DISK_BLOCK_SIZE;
	end = first + len / DISK_BLOCK_SIZE;
	for (blk = first; blk < end; blk++) {
		if (d->map[blk] == DISK_BLOCK_DATA)
			set_dirty(d, d->dirty_blocks - 1);
		d->map[blk] = DISK_BLOCK_ZERO;
	}
}
