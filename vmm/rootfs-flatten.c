// SPDX-License-Identifier: GPL-2.0
/*
 * vmm rootfs flatten (Documentation/rootfs.md, "vmm rootfs flatten"):
 * base + overlay as one standalone image, qcow2
 * (devices/block/qcow2-write.c) or sparse raw.
 *
 * The base (raw or qcow2) and a persistent state file are read through
 * the disk API, the same map the block device serves the guest from; a
 * block store's blocks (devices/block/store.h, no claim: list and read
 * only) are laid over that. The image goes to a new file, or into a
 * block store as 4096-byte blocks of its file's bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/block/qcow2-write.h"
#include "devices/block/store.h"
#include "lib/errf.h"
#include "lib/log.h"
#include "vmm/rootfs-cmd-internal.h"
#include "vmm/rootfs.h"

#define CLUSTER_DEFAULT	   (64U << 10) /* bytes: QEMU's default too */
#define RAW_CHUNK	   (1U << 20)  /* bytes per read: flatten raw */
#define HASH_CHUNK	   (1U << 20)  /* bytes per read: --out store: */
#define OVERLAY_PERSISTENT "persistent:"
#define OVERLAY_STORE	   "store:"
#define DESC_ARCHITECTURE  "x86_64"
#define NAME_PREFIX	   "flattened-"
#define NAME_HEX	   12	      /* digest hex digits in a default name */
#define TMPDIR_DEFAULT	   "/var/tmp" /* --out store:'s file, on disk */

static bool has_prefix(const char *s, const char *prefix)
{
	return s && !strncmp(s, prefix, strlen(prefix));
}

struct flatten_opts {
	const char *base;    /* descriptor */
	const char *overlay; /* "persistent:PATH", "store:SOCKET" or NULL */
	const char *format;  /* "qcow2" (default) or "raw" */
	uint64_t cluster_size;
	bool cluster_size_set;
	const char *out; /* FILE or "store:SOCKET" */
};

static int flatten_parse(int argc, char **argv, struct flatten_opts *o,
			 char *err, size_t len)
{
	static const struct option lo[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "overlay", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, 'f' },
		{ "cluster-size", required_argument, NULL, 'c' },
		{ "out", required_argument, NULL, 'O' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pos[ROOTFS_CMD_MAX_POS];
	int opt, npos = 0, ret;

	optind = 1;
	while ((opt = rootfs_cmd__next_arg(argc, argv, lo, pos, &npos, err,
					   len)) != -1) {
		switch (opt) {
		case 'b':
			o->base = optarg;
			break;
		case 'o':
			o->overlay = optarg;
			break;
		case 'f':
			o->format = optarg;
			break;
		case 'c':
			ret = rootfs_cmd__parse_bytes("--cluster-size", optarg,
						      QCOW2_WRITE_CLUSTER_MIN,
						      QCOW2_WRITE_CLUSTER_MAX,
						      true, &o->cluster_size,
						      err, len);
			if (ret)
				return ret;
			o->cluster_size_set = true;
			break;
		case 'O':
			o->out = optarg;
			break;
		default:
			return -EINVAL;
		}
	}
	if (npos)
		return errf(err, len, -EINVAL, "unexpected argument %s",
			    pos[0]);
	if (!o->base || !o->out)
		return errf(err, len, -EINVAL,
			    "--base DESC and --out FILE are required");
	if (strcmp(o->format, "qcow2") && strcmp(o->format, "raw"))
		return errf(err, len, -EINVAL,
			    "--format %s: must be qcow2 or raw", o->format);
	if (o->cluster_size_set && strcmp(o->format, "qcow2"))
		return errf(err, len, -EINVAL,
			    "--cluster-size: only for --format qcow2");
	if (has_prefix(o->out, OVERLAY_STORE) && !o->out[strlen(OVERLAY_STORE)])
		return errf(err, len, -EINVAL,
			    "--out %s: must be FILE or store:SOCKET", o->out);
	if (o->overlay && ((!has_prefix(o->overlay, OVERLAY_PERSISTENT) &&
			    !has_prefix(o->overlay, OVERLAY_STORE)) ||
			   !o->overlay[strcspn(o->overlay, ":") + 1]))
		return errf(err, len, -EINVAL,
			    "--overlay %s: must be persistent:STATEFILE or "
			    "store:SOCKET",
			    o->overlay);
	return 0;
}

/*
 * The composed disk: the base and a state file through the disk's map
 * (one extent per block at most, so any chunk maps in one call unless a
 * qcow2 base runs out of inflated-cluster buffers), then a block store's
 * blocks over them.
 */
struct source {
	struct disk *disk;
	uint64_t size; /* bytes, a multiple of DISK_BLOCK_SIZE */
	struct disk_extent *ext;
	unsigned int max_ext;
	/* --overlay store: */
	struct store *store;
	const char *overlay; /* "store:SOCKET", for messages */
	uint64_t *stored;    /* bitmap: the blocks the store listed */
	uint8_t *batch;	     /* STORE_IO_BLOCKS blocks read in one message */
};

static bool all_zero(const uint8_t *p, size_t n)
{
	return !n || (!p[0] && !memcmp(p, p + 1, n - 1));
}

static bool is_stored(const struct source *s, uint64_t block)
{
	return s->stored[block / 64] >> (block % 64) & 1;
}

/* The extents disk__map_read gave, into buf, in order. */
static int extents_read(struct source *s, int nr, uint8_t *buf, char *err,
			size_t len)
{
	const struct disk_extent *e;
	uint64_t at = 0, done;
	ssize_t k;
	int i;

	for (i = 0; i < nr; at += s->ext[i].len, i++) {
		e = &s->ext[i];
		if (e->fd < 0) {
			/* zeros, or a qcow2 base's inflated cluster */
			if (e->buf)
				memcpy(buf + at, e->buf, e->len);
			else
				memset(buf + at, 0, e->len);
			continue;
		}
		for (done = 0; done < e->len; done += k) {
			k = pread(e->fd, buf + at + done, e->len - done,
				  e->offset + done);
			if (k < 0 && errno == EINTR) {
				k = 0;
				continue;
			}
			if (k <= 0)
				return errf(err, len, k ? -errno : -EIO,
					    "reading %llu bytes at %llu: %s",
					    (unsigned long long)e->len,
					    (unsigned long long)e->offset,
					    k ? strerror(errno) :
						"unexpected end of file");
		}
	}
	return 0;
}

static int map_failed(int ret, uint64_t off, uint64_t n, char *err, size_t len)
{
	return errf(err, len, ret, "mapping %llu+%llu: %s",
		    (unsigned long long)off, (unsigned long long)n,
		    strerror(-ret));
}

/*
 * [off, off + n) of base + state file into buf; *zero: every byte is 0
 * (buf is then undefined when no extent needed I/O or a copy).
 */
static int base_read(struct source *s, uint64_t off, uint8_t *buf, uint64_t n,
		     bool *zero, char *err, size_t len)
{
	uint64_t b;
	int nr, i, ret;

	nr = disk__map_read(s->disk, off, n, s->ext, s->max_ext);
	if (nr == -E2BIG) {
		/* A qcow2 base's inflated clusters: one block always fits. */
		for (b = 0; b < n; b += DISK_BLOCK_SIZE) {
			nr = disk__map_read(s->disk, off + b, DISK_BLOCK_SIZE,
					    s->ext, s->max_ext);
			if (nr < 0)
				return map_failed(nr, off + b, DISK_BLOCK_SIZE,
						  err, len);
			ret = extents_read(s, nr, buf + b, err, len);
			if (ret)
				return ret;
		}
		*zero = all_zero(buf, n);
		return 0;
	}
	if (nr < 0)
		return map_failed(nr, off, n, err, len);
	*zero = true;
	for (i = 0; i < nr; i++)
		if (s->ext[i].fd >= 0 || s->ext[i].buf)
			*zero = false;
	if (*zero)
		return 0;
	ret = extents_read(s, nr, buf, err, len);
	if (!ret)
		*zero = all_zero(buf, n);
	return ret;
}

/* One read message for ranges r (count blocks in all), into buf. */
static int store_batch(struct source *s, const struct store_range *r,
		       unsigned int nr, uint64_t first, uint8_t *buf, char *err,
		       size_t len)
{
	char inner[ROOTFS_CMD_ERR_LEN] = "";
	const uint8_t *p = s->batch;
	unsigned int i;
	int ret;

	ret = store__read(s->store, r, nr, s->batch, inner, sizeof(inner));
	if (ret)
		return errf(err, len, ret, "--overlay %s: %s", s->overlay,
			    inner[0] ? inner : strerror(-ret));
	for (i = 0; i < nr; i++) {
		memcpy(buf + (r[i].first - first) * STORE_BLOCK_SIZE, p,
		       (size_t)r[i].count * STORE_BLOCK_SIZE);
		p += (size_t)r[i].count * STORE_BLOCK_SIZE;
	}
	return 0;
}

/*
 * The store's blocks in [off, off + n) over buf: runs of listed blocks
 * as ranges, up to STORE_IO_BLOCKS blocks per read message.
 */
static int store_overlay(struct source *s, uint64_t off, uint8_t *buf,
			 uint64_t n, char *err, size_t len)
{
	struct store_range r[STORE_IO_BLOCKS];
	uint64_t first = off / STORE_BLOCK_SIZE;
	uint64_t end = first + n / STORE_BLOCK_SIZE, b;
	unsigned int nr = 0, count = 0;
	int ret;

	for (b = first; b < end; b++) {
		if (!is_stored(s, b))
			continue;
		if (count == STORE_IO_BLOCKS) {
			ret = store_batch(s, r, nr, first, buf, err, len);
			if (ret)
				return ret;
			nr = count = 0;
		}
		if (nr && r[nr - 1].first + r[nr - 1].count == b)
			r[nr - 1].count++;
		else
			r[nr++] =
				(struct store_range){ .first = b, .count = 1 };
		count++;
	}
	return count ? store_batch(s, r, nr, first, buf, err, len) : 0;
}

static bool store_holds_any(const struct source *s, uint64_t off, uint64_t n)
{
	uint64_t b;

	if (!s->store)
		return false;
	for (b = off / STORE_BLOCK_SIZE; b < (off + n) / STORE_BLOCK_SIZE; b++)
		if (is_stored(s, b))
			return true;
	return false;
}

/*
 * [off, off + n) of the composed disk into buf; *zero: every byte is 0
 * (buf is then undefined when nothing needed I/O).
 */
static int source_read(struct source *s, uint64_t off, uint8_t *buf, uint64_t n,
		       bool *zero, char *err, size_t len)
{
	int ret;

	ret = base_read(s, off, buf, n, zero, err, len);
	if (ret || !store_holds_any(s, off, n))
		return ret;
	if (*zero)
		memset(buf, 0, n);
	ret = store_overlay(s, off, buf, n, err, len);
	if (!ret)
		*zero = all_zero(buf, n);
	return ret;
}

static int flatten_qcow2(struct source *s, int fd, uint32_t cluster, char *err,
			 size_t len)
{
	struct qcow2_writer *w;
	uint64_t off, n;
	uint8_t *buf;
	bool zero;
	int ret;

	ret = qcow2_writer__create(&w, fd, s->size, cluster, err, len);
	if (ret)
		return ret;
	buf = malloc(cluster);
	if (!buf) {
		qcow2_writer__destroy(w);
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	}
	for (off = 0; off < s->size && !ret; off += cluster) {
		n = s->size - off < cluster ? s->size - off : cluster;
		ret = source_read(s, off, buf, n, &zero, err, len);
		if (ret || zero)
			continue;
		memset(buf + n, 0, cluster - n); /* the last, short one */
		ret = qcow2_writer__put(w, off, buf, err, len);
	}
	if (!ret)
		ret = qcow2_writer__finish(w, err, len);
	free(buf);
	qcow2_writer__destroy(w);
	return ret;
}

static int pwrite_all(int fd, const uint8_t *p, uint64_t n, uint64_t off)
{
	ssize_t k;

	while (n) {
		k = pwrite(fd, p, n, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		p += k;
		n -= k;
		off += k;
	}
	return 0;
}

/* Sparse: only runs of blocks that hold a nonzero byte are written. */
static int flatten_raw(struct source *s, int fd, char *err, size_t len)
{
	uint64_t off, n, b, run;
	uint8_t *buf;
	bool zero;
	int ret = 0;

	buf = malloc(RAW_CHUNK);
	if (!buf)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	for (off = 0; off < s->size && !ret; off += RAW_CHUNK) {
		n = s->size - off < RAW_CHUNK ? s->size - off : RAW_CHUNK;
		ret = source_read(s, off, buf, n, &zero, err, len);
		for (b = 0; !ret && !zero && b < n; b += run) {
			run = DISK_BLOCK_SIZE;
			if (all_zero(buf + b, DISK_BLOCK_SIZE))
				continue;
			while (b + run < n &&
			       !all_zero(buf + b + run, DISK_BLOCK_SIZE))
				run += DISK_BLOCK_SIZE;
			ret = pwrite_all(fd, buf + b, run, off + b);
			if (ret)
				errf(err, len, ret, "writing at %llu: %s",
				     (unsigned long long)(off + b),
				     strerror(-ret));
		}
	}
	free(buf);
	if (!ret && ftruncate(fd, s->size))
		ret = errf(err, len, -errno, "ftruncate: %s", strerror(errno));
	return ret;
}

static void store_listed(void *arg, uint64_t block)
{
	uint64_t *bits = arg;

	bits[block / 64] |= 1ULL << (block % 64);
}

/*
 * --overlay store:SOCKET: hello without the claim (a flatten only reads;
 * a VM may even be running on the store, whose flushed blocks are what
 * is read), the base's digest as its identity, then the list.
 */
static int store_open(struct source *s, const struct rootfs_image *img,
		      const char *overlay, char *err, size_t len)
{
	struct store_params p = {
		.socket_path = overlay + strlen(OVERLAY_STORE),
		.base = img->digest,
		.nr_blocks = img->size_bytes / STORE_BLOCK_SIZE,
	};
	char inner[ROOTFS_CMD_ERR_LEN] = "";
	int ret;

	s->overlay = overlay;
	s->stored = calloc(p.nr_blocks / 64 + 1, sizeof(*s->stored));
	s->batch = malloc((size_t)STORE_IO_BLOCKS * STORE_BLOCK_SIZE);
	if (!s->stored || !s->batch)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	ret = store__connect(&s->store, &p, inner, sizeof(inner));
	if (!ret)
		ret = store__list(s->store, store_listed, s->stored, inner,
				  sizeof(inner));
	if (ret)
		return errf(err, len, ret, "--overlay %s: %s", overlay,
			    inner[0] ? inner : strerror(-ret));
	return 0;
}

/*
 * Base + overlay through the disk API: a state file's header is checked
 * against the base (its recorded digest and size) and the file is
 * locked while it is read, so no VM writes it meanwhile. The disk says
 * what is wrong itself (pr_err): err stays empty then.
 */
static int source_open(struct source *s, const struct rootfs_image *img,
		       const char *state, const char *store, char *err,
		       size_t len)
{
	struct disk_params p = {
		.base_path = img->path,
		.base_format = img->qcow2 ? DISK_FORMAT_QCOW2 : DISK_FORMAT_RAW,
		.base_size = img->size_bytes,
		.base_digest = img->digest,
		.mode = state ? DISK_PERSISTENT : DISK_READONLY,
		.state_path = state,
	};
	struct stat st;
	int ret;

	s->size = img->size_bytes;
	s->max_ext = RAW_CHUNK > QCOW2_WRITE_CLUSTER_MAX ?
			     RAW_CHUNK / DISK_BLOCK_SIZE :
			     QCOW2_WRITE_CLUSTER_MAX / DISK_BLOCK_SIZE;
	s->ext = calloc(s->max_ext, sizeof(*s->ext));
	if (!s->ext)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	/* The disk would make a missing or empty one: a new, empty state. */
	if (state && stat(state, &st))
		return errf(err, len, -errno, "--overlay %s: %s", state,
			    strerror(errno));
	if (state && S_ISREG(st.st_mode) && !st.st_size)
		return errf(err, len, -EINVAL,
			    "--overlay %s: empty, not a state file", state);
	if (state) {
		ret = rootfs__check_state_path(img, state, err, len);
		if (ret)
			return ret;
	}
	if (store) {
		ret = store_open(s, img, store, err, len);
		if (ret)
			return ret;
	}
	ret = disk__open(&s->disk, &p);
	if (ret)
		err[0] = 0;
	return ret;
}

static void source_close(struct source *s)
{
	store__close(s->store);
	disk__close(s->disk);
	free(s->stored);
	free(s->batch);
	free(s->ext);
}

static int image_write(struct source *s, const struct flatten_opts *o, int fd,
		       char *err, size_t len)
{
	char inner[ROOTFS_CMD_ERR_LEN] = "";
	int ret;

	if (!strcmp(o->format, "qcow2"))
		ret = flatten_qcow2(s, fd, (uint32_t)o->cluster_size, inner,
				    sizeof(inner));
	else
		ret = flatten_raw(s, fd, inner, sizeof(inner));
	if (ret)
		errf(err, len, ret, "--out %s: %s", o->out, inner);
	return ret;
}

/* Into a temporary file beside out, renamed over nothing once complete. */
static int flatten_to_file(struct source *s, const struct flatten_opts *o,
			   char *err, size_t len)
{
	char *tmp;
	int fd, ret;

	if (asprintf(&tmp, "%s.tmp-XXXXXX", o->out) < 0)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	fd = mkostemp(tmp, O_CLOEXEC); /* 0600: machine state is private */
	if (fd < 0) {
		ret = errf(err, len, -errno, "--out %s: %s", o->out,
			   strerror(errno));
		free(tmp);
		return ret;
	}
	ret = image_write(s, o, fd, err, len);
	if (!ret && fdatasync(fd))
		ret = errf(err, len, -errno, "--out %s: fdatasync: %s", o->out,
			   strerror(errno));
	if (!ret &&
	    renameat2(AT_FDCWD, tmp, AT_FDCWD, o->out, RENAME_NOREPLACE))
		ret = errf(err, len, -errno, "--out %s: %s", o->out,
			   strerror(errno));
	if (ret)
		unlink(tmp);
	close(fd);
	free(tmp);
	return ret;
}

/*
 * The image file's bytes into the store as blocks: block i is bytes
 * [4096 i, 4096 (i + 1)), an all-zero block sent as a zero chunk. The
 * file's length is a multiple of 4096 (whole clusters, or a raw disk's
 * sizeBytes), so no block is short.
 */
static int store_put(struct store *st, int fd, uint64_t file_bytes, char *err,
		     size_t len)
{
	uint8_t *buf = malloc(HASH_CHUNK), *blk;
	uint64_t off, n, b;
	ssize_t k;
	int ret = 0;

	if (!buf)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	store__write_begin(st);
	for (off = 0; off < file_bytes && !ret; off += n) {
		n = file_bytes - off < HASH_CHUNK ? file_bytes - off :
						    HASH_CHUNK;
		k = pread(fd, buf, n, off);
		if (k != (ssize_t)n) {
			ret = errf(err, len, k < 0 ? -errno : -EIO,
				   "reading the image at %llu: %s",
				   (unsigned long long)off,
				   k < 0 ? strerror(errno) : "short read");
			break;
		}
		for (b = 0; b < n && !ret; b += STORE_BLOCK_SIZE) {
			blk = buf + b;
			if (all_zero(blk, STORE_BLOCK_SIZE))
				blk = NULL;
			ret = store__write_add(st, (off + b) / STORE_BLOCK_SIZE,
					       blk);
			if (ret != -E2BIG)
				continue;
			/* Full: send it and start the next message. */
			ret = store__write_send(st, err, len);
			store__write_begin(st);
			if (!ret)
				ret = store__write_add(
					st, (off + b) / STORE_BLOCK_SIZE, blk);
		}
	}
	free(buf);
	if (!ret && store__write_count(st))
		ret = store__write_send(st, err, len);
	if (!ret)
		ret = store__flush(st, err, len);
	if (ret && !err[0])
		errf(err, len, ret, "%s", strerror(-ret));
	return ret;
}

static int store_print(const struct flatten_opts *o, const char *digest,
		       uint64_t size, uint64_t file_bytes, char *err,
		       size_t len)
{
	char name[sizeof(NAME_PREFIX) + NAME_HEX];
	json_t *d;
	char *text;
	int ret = 0;

	snprintf(name, sizeof(name), "%s%.*s", NAME_PREFIX, NAME_HEX,
		 digest + strlen(ROOTFS_DIGEST_PREFIX));
	d = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s}", "name", name,
		      "format", o->format, "architecture", DESC_ARCHITECTURE,
		      "digest", digest, "sizeBytes", (json_int_t)size,
		      "fileBytes", (json_int_t)file_bytes, "store",
		      o->out + strlen(OVERLAY_STORE));
	text = d ? json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
	if (!text)
		ret = errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	else if (puts(text) < 0 || fflush(stdout))
		ret = errf(err, len, -EIO, "stdout: %s", strerror(errno));
	free(text);
	json_decref(d);
	return ret;
}

/*
 * --out store:SOCKET: the image into an unlinked temporary file (under
 * $TMPDIR, else /var/tmp: it may be large), hashed, then its bytes into
 * the store under the claim, with the image's own digest as the hello's
 * base, and flushed; the descriptor on stdout.
 */
static int flatten_to_store(struct source *s, const struct flatten_opts *o,
			    char *err, size_t len)
{
	char digest[ROOTFS_DIGEST_LEN + 1], inner[ROOTFS_CMD_ERR_LEN] = "";
	const char *dir = getenv("TMPDIR");
	struct store_params p = {
		.socket_path = o->out + strlen(OVERLAY_STORE),
		.base = digest,
		.claim = true,
	};
	struct store *st = NULL;
	uint64_t file_bytes = 0;
	char *tmp;
	int fd, ret;

	if (asprintf(&tmp, "%s/kiln-flatten-XXXXXX",
		     dir && dir[0] ? dir : TMPDIR_DEFAULT) < 0)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		ret = errf(err, len, -errno, "--out %s: temporary file %s: %s",
			   o->out, tmp, strerror(errno));
		free(tmp);
		return ret;
	}
	unlink(tmp);
	free(tmp);
	ret = image_write(s, o, fd, err, len);
	if (!ret)
		ret = rootfs_cmd__stream(fd, -1, HASH_CHUNK, "the image",
					 digest, &file_bytes, inner,
					 sizeof(inner));
	if (!ret && file_bytes % STORE_BLOCK_SIZE)
		ret = errf(inner, sizeof(inner), -EIO,
			   "the image is %llu bytes, not whole %u-byte "
			   "blocks",
			   (unsigned long long)file_bytes, STORE_BLOCK_SIZE);
	p.nr_blocks = file_bytes / STORE_BLOCK_SIZE;
	if (!ret)
		ret = store__connect(&st, &p, inner, sizeof(inner));
	if (!ret)
		ret = store_put(st, fd, file_bytes, inner, sizeof(inner));
	if (ret && inner[0])
		errf(err, len, ret, "--out %s: %s", o->out, inner);
	store__close(st);
	close(fd);
	if (!ret)
		ret = store_print(o, digest, s->size, file_bytes, err, len);
	return ret;
}

int rootfs_cmd__flatten(int argc, char **argv, char *err, size_t len)
{
	struct flatten_opts o = {
		.format = "qcow2",
		.cluster_size = CLUSTER_DEFAULT,
	};
	struct source s = { .disk = NULL };
	bool to_store, from_store;
	struct rootfs_image img;
	char *state = NULL;
	struct stat st;
	int ret;

	memset(&img, 0, sizeof(img));
	ret = flatten_parse(argc, argv, &o, err, len);
	if (ret)
		return ret;
	to_store = has_prefix(o.out, OVERLAY_STORE);
	from_store = has_prefix(o.overlay, OVERLAY_STORE);
	if (!to_store && !lstat(o.out, &st))
		return errf(err, len, -EEXIST,
			    "--out %s: exists (flatten writes a new file)",
			    o.out);
	ret = rootfs__load(&img, o.base, err, len);
	if (!ret)
		ret = rootfs__verify(&img, err, len);
	if (!ret && o.overlay && !from_store) {
		state = realpath(o.overlay + strlen(OVERLAY_PERSISTENT), NULL);
		if (!state)
			ret = errf(err, len, -errno, "--overlay %s: %s",
				   o.overlay, strerror(errno));
	}
	if (!ret)
		ret = source_open(&s, &img, state,
				  from_store ? o.overlay : NULL, err, len);
	if (!ret)
		ret = to_store ? flatten_to_store(&s, &o, err, len) :
				 flatten_to_file(&s, &o, err, len);
	source_close(&s);
	free(state);
	rootfs__free(&img);
	return ret;
}
