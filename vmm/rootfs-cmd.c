// SPDX-License-Identifier: GPL-2.0
/*
 * vmm rootfs: root images handled offline (Documentation/rootfs.md,
 * "Images out of a machine").
 *
 *   describe FILE: a descriptor for a raw or qcow2 file, to use as a base;
 *   bytes DESC: the image's bytes on stdout, checked against its digest;
 *   flatten: base + a persistent state file as one standalone image,
 *	qcow2 (devices/block/qcow2-write.c) or sparse raw.
 *
 * Each reports one line at its edge (main.c maps the result to the exit
 * status); flatten reads base + overlay through the disk API, the same
 * map the block device serves the guest from.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/block/qcow2-write.h"
#include "lib/errf.h"
#include "lib/getopt-exact.h"
#include "lib/log.h"
#include "lib/parse.h"
#include "lib/sha256.h"
#include "vmm/rootfs-cmd.h"
#include "vmm/rootfs.h"

#define CMD_ERR_LEN	1024
#define CHUNK_DEFAULT	(1U << 20)  /* bytes per read: bytes, describe */
#define CHUNK_MAX	(64U << 20) /* bytes: --chunk-size's bound */
#define CLUSTER_DEFAULT (64U << 10) /* bytes: QEMU's default too */
#define RAW_CHUNK	(1U << 20)  /* bytes per read: flatten raw */
#define MAX_POSITIONAL	2
/* The qcow2 header fields describe reads (QEMU's docs/interop/qcow2.txt). */
#define QCOW2_MAGIC_BE	   "QFI\xfb"
#define QCOW2_HDR_PEEK	   36 /* through crypt_method */
#define QCOW2_HDR_VERSION  4
#define QCOW2_HDR_BACKING  8
#define QCOW2_HDR_SIZE	   24
#define QCOW2_HDR_CRYPT	   32
#define OVERLAY_PERSISTENT "persistent:"
#define OVERLAY_STORE	   "store:"
#define DESC_ARCHITECTURE  "x86_64"

/* ---- shared ----------------------------------------------------------- */

/*
 * Options, then positionals anywhere between them: getopt_exact stops at
 * the first word that is not an option ("+"), so each is collected here
 * and the scan goes on after it. Returns the option, -1 at the end, '?'
 * with err set.
 */
static int next_arg(int argc, char **argv, const struct option *lo,
		    const char **pos, int *npos, char *err, size_t len)
{
	int opt;

	for (;;) {
		while (optind < argc &&
		       (argv[optind][0] != '-' || !argv[optind][1])) {
			if (*npos == MAX_POSITIONAL) {
				snprintf(err, len, "unexpected argument %s",
					 argv[optind]);
				return '?';
			}
			pos[(*npos)++] = argv[optind++];
		}
		if (optind >= argc)
			return -1;
		opt = getopt_exact__next(argc, argv, "+:", lo, err, len);
		if (opt != -1)
			return opt;
		/* "--": the rest are positionals. */
		while (optind < argc) {
			if (*npos == MAX_POSITIONAL) {
				snprintf(err, len, "unexpected argument %s",
					 argv[optind]);
				return '?';
			}
			pos[(*npos)++] = argv[optind++];
		}
		return -1;
	}
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	ssize_t k;

	while (n) {
		k = write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		c += k;
		n -= k;
	}
	return 0;
}

/*
 * Read fd from its start to its end in chunks of chunk bytes, hashing
 * every byte into digest ("sha256:<hex>") and, with out >= 0, writing it
 * there as it goes. *total: bytes read. A write to a reader that is gone
 * returns ROOTFS_CMD_EPIPE with err untouched.
 */
static int stream(int fd, int out, size_t chunk, const char *what,
		  char digest[ROOTFS_DIGEST_LEN + 1], uint64_t *total,
		  char *err, size_t len)
{
	char hex[SHA256_HEX_LEN + 1];
	struct sha256 sha;
	ssize_t n;
	void *buf;
	int ret;

	*total = 0;
	buf = malloc(chunk);
	if (!buf)
		return errf(err, len, -ENOMEM, "%s: %s", what,
			    strerror(ENOMEM));
	ret = sha256__init(&sha);
	if (ret) {
		free(buf);
		return errf(err, len, ret, "%s: sha256: %s", what,
			    strerror(-ret));
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		n = pread(fd, buf, chunk, *total);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = errf(err, len, -errno, "%s: reading: %s", what,
				   strerror(errno));
			goto out_free;
		}
		if (n == 0)
			break;
		ret = sha256__update(&sha, buf, n);
		if (ret) {
			errf(err, len, ret, "%s: sha256: %s", what,
			     strerror(-ret));
			goto out_free;
		}
		if (out >= 0) {
			ret = write_all(out, buf, n);
			if (ret == -EPIPE)
				goto out_free;
			if (ret) {
				errf(err, len, ret, "stdout: %s",
				     strerror(-ret));
				goto out_free;
			}
		}
		*total += n;
	}
	free(buf);
	ret = sha256__final_hex(&sha, hex);
	if (ret)
		return errf(err, len, ret, "%s: sha256: %s", what,
			    strerror(-ret));
	snprintf(digest, ROOTFS_DIGEST_LEN + 1, "%s%s", ROOTFS_DIGEST_PREFIX,
		 hex);
	return 0;
out_free:
	sha256__free(&sha);
	free(buf);
	return ret;
}

/* A regular file, read-only; O_NONBLOCK: a FIFO is refused, not waited on. */
static int open_regular(const char *path, const char *what, struct stat *st,
			char *err, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return errf(err, len, -errno, "%s %s: %s", what, path,
			    strerror(errno));
	if (fstat(fd, st) || !S_ISREG(st->st_mode)) {
		errf(err, len, -EINVAL, "%s %s: not a regular file", what,
		     path);
		close(fd);
		return -EINVAL;
	}
	return fd;
}

static int parse_bytes(const char *opt, const char *s, uint64_t min,
		       uint64_t max, bool pow2, uint64_t *out, char *err,
		       size_t len)
{
	if (parse__size(s, max, out) || *out < min ||
	    (pow2 && (*out & (*out - 1))))
		return errf(err, len, -EINVAL,
			    "%s %s: must be %sfrom %llu to %llu bytes "
			    "(K, M suffixes allowed)",
			    opt, s, pow2 ? "a power of two " : "",
			    (unsigned long long)min, (unsigned long long)max);
	return 0;
}

/* ---- describe --------------------------------------------------------- */

/*
 * qcow2: the virtual size from the header (version 2 or 3, no backing
 * file, no encryption: a base stands alone). The rest of the image is
 * the reader's business (devices/block/qcow2.c), not a descriptor's.
 */
static int qcow2_size(int fd, const char *path, uint64_t *size, char *err,
		      size_t len)
{
	uint8_t h[QCOW2_HDR_PEEK];
	uint32_t v32;
	uint64_t v64;

	if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h, QCOW2_MAGIC_BE, 4))
		return errf(err, len, -EINVAL,
			    "%s: not a qcow2 image (no \"QFI\\xfb\" header)",
			    path);
	memcpy(&v32, h + QCOW2_HDR_VERSION, 4);
	if (be32toh(v32) != 2 && be32toh(v32) != 3)
		return errf(err, len, -EINVAL,
			    "%s: qcow2 version %u, only 2 and 3 are read", path,
			    be32toh(v32));
	memcpy(&v64, h + QCOW2_HDR_BACKING, 8);
	if (v64)
		return errf(err, len, -EINVAL,
			    "%s: has a backing file; a base must stand alone "
			    "(qemu-img convert it first)",
			    path);
	memcpy(&v32, h + QCOW2_HDR_CRYPT, 4);
	if (v32)
		return errf(err, len, -EINVAL,
			    "%s: encrypted qcow2 images cannot be bases", path);
	memcpy(&v64, h + QCOW2_HDR_SIZE, 8);
	*size = be64toh(v64);
	return 0;
}

static bool is_qcow2(int fd)
{
	char magic[4];

	return pread(fd, magic, sizeof(magic), 0) == sizeof(magic) &&
	       !memcmp(magic, QCOW2_MAGIC_BE, sizeof(magic));
}

/* The file's name without its directory and last extension. */
static char *default_name(const char *path)
{
	char *copy = strdup(path), *name, *dot;

	if (!copy)
		return NULL;
	name = strdup(basename(copy));
	free(copy);
	dot = name ? strrchr(name, '.') : NULL;
	if (dot && dot != name)
		*dot = 0;
	return name;
}

struct describe_opts {
	const char *file;
	const char *format; /* NULL: qcow2 if it starts with its magic */
	const char *name;   /* NULL: default_name(file) */
};

static int describe_parse(int argc, char **argv, struct describe_opts *o,
			  char *err, size_t len)
{
	static const struct option lo[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "name", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pos[MAX_POSITIONAL];
	int opt, npos = 0;

	optind = 1;
	while ((opt = next_arg(argc, argv, lo, pos, &npos, err, len)) != -1) {
		switch (opt) {
		case 'f':
			o->format = optarg;
			break;
		case 'n':
			o->name = optarg;
			break;
		default:
			return -EINVAL;
		}
	}
	if (npos != 1)
		return errf(err, len, -EINVAL,
			    "expected one FILE [--format raw|qcow2] "
			    "[--name NAME]");
	o->file = pos[0];
	if (o->format && strcmp(o->format, "raw") && strcmp(o->format, "qcow2"))
		return errf(err, len, -EINVAL,
			    "--format %s: must be raw or qcow2", o->format);
	return 0;
}

static int describe_print(const struct describe_opts *o, const char *name,
			  const char *path, uint64_t size, const char *digest,
			  char *err, size_t len)
{
	json_t *d;
	char *text;
	int ret = 0;

	d = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "name", name, "path",
		      path, "format", o->format, "architecture",
		      DESC_ARCHITECTURE, "digest", digest, "sizeBytes",
		      (json_int_t)size);
	text = d ? json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
	if (!text)
		ret = errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	else if (puts(text) < 0 || fflush(stdout))
		ret = errf(err, len, -EIO, "stdout: %s", strerror(errno));
	free(text);
	json_decref(d);
	return ret;
}

static int describe(int argc, char **argv, char *err, size_t len)
{
	char digest[ROOTFS_DIGEST_LEN + 1], *name = NULL, *path = NULL;
	struct describe_opts o = { .file = NULL };
	uint64_t size, total;
	struct stat st;
	int fd, ret;

	ret = describe_parse(argc, argv, &o, err, len);
	if (ret)
		return ret;
	fd = open_regular(o.file, "image", &st, err, len);
	if (fd < 0)
		return fd;
	if (!o.format)
		o.format = is_qcow2(fd) ? "qcow2" : "raw";
	size = st.st_size;
	if (!strcmp(o.format, "qcow2"))
		ret = qcow2_size(fd, o.file, &size, err, len);
	if (!ret && (!size || size % ROOTFS_BLOCK_SIZE))
		ret = errf(err, len, -EINVAL,
			   "%s: %s size %llu is not a nonzero multiple of %u "
			   "(the disk block size)",
			   o.file, o.format, (unsigned long long)size,
			   ROOTFS_BLOCK_SIZE);
	name = o.name ? strdup(o.name) : default_name(o.file);
	path = realpath(o.file, NULL);
	if (!ret && (!name || !path))
		ret = errf(err, len, -ENOMEM, "%s: %s", o.file,
			   strerror(ENOMEM));
	if (!ret) {
		ret = rootfs__check_name(o.name ? "--name" : o.file, name, err,
					 len);
		/* A name made from the file's: say how to give another. */
		if (ret && !o.name && strlen(err) + 16 < len)
			strcat(err, " (pass --name)");
	}
	if (!ret)
		ret = stream(fd, -1, CHUNK_DEFAULT, o.file, digest, &total, err,
			     len);
	if (!ret && total != (uint64_t)st.st_size)
		ret = errf(err, len, -EIO, "%s: changed while being hashed",
			   o.file);
	if (!ret)
		ret = describe_print(&o, name, path, size, digest, err, len);
	free(name);
	free(path);
	close(fd);
	return ret;
}

/* ---- bytes ------------------------------------------------------------ */

static int bytes(int argc, char **argv, char *err, size_t len)
{
	static const struct option lo[] = {
		{ "chunk-size", required_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	char digest[ROOTFS_DIGEST_LEN + 1];
	uint64_t chunk = CHUNK_DEFAULT, total;
	const char *pos[MAX_POSITIONAL];
	struct rootfs_image img;
	int opt, npos = 0, fd, ret;
	struct stat st;

	optind = 1;
	while ((opt = next_arg(argc, argv, lo, pos, &npos, err, len)) != -1) {
		if (opt != 'c')
			return -EINVAL;
		ret = parse_bytes("--chunk-size", optarg, ROOTFS_BLOCK_SIZE,
				  CHUNK_MAX, false, &chunk, err, len);
		if (ret)
			return ret;
	}
	if (npos != 1)
		return errf(err, len, -EINVAL,
			    "expected one DESCRIPTOR [--chunk-size N]");
	ret = rootfs__load(&img, pos[0], err, len);
	if (ret)
		goto out;
	fd = open_regular(img.path, "image", &st, err, len);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	/* A raw image is sizeBytes long; a qcow2's is its virtual size. */
	if (!strcmp(img.format, "raw") &&
	    (uint64_t)st.st_size != img.size_bytes) {
		ret = errf(err, len, -EINVAL,
			   "%s: sizeBytes: the descriptor says %llu, \"%s\" "
			   "has %lld bytes",
			   pos[0], (unsigned long long)img.size_bytes, img.path,
			   (long long)st.st_size);
		goto out_close;
	}
	/* A reader that goes away is EPIPE from write, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	ret = stream(fd, STDOUT_FILENO, chunk, img.path, digest, &total, err,
		     len);
	if (!ret && strcmp(digest, img.digest))
		ret = errf(err, len, -EINVAL,
			   "%s: digest: expected %s, \"%s\" has %s (the bytes "
			   "written are not the image's)",
			   pos[0], img.digest, img.path, digest);
out_close:
	close(fd);
out:
	rootfs__free(&img);
	return ret;
}

/* ---- flatten ---------------------------------------------------------- */

struct flatten_opts {
	const char *base;    /* descriptor */
	const char *overlay; /* "persistent:PATH" or NULL */
	const char *format;  /* "qcow2" (default) or "raw" */
	uint64_t cluster_size;
	bool cluster_size_set;
	const char *out;
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
	const char *pos[MAX_POSITIONAL];
	int opt, npos = 0, ret;

	optind = 1;
	while ((opt = next_arg(argc, argv, lo, pos, &npos, err, len)) != -1) {
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
			ret = parse_bytes("--cluster-size", optarg,
					  QCOW2_WRITE_CLUSTER_MIN,
					  QCOW2_WRITE_CLUSTER_MAX, true,
					  &o->cluster_size, err, len);
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
	if (!strncmp(o->out, OVERLAY_STORE, strlen(OVERLAY_STORE)))
		return errf(err, len, -EOPNOTSUPP,
			    "--out %s: writing to a block store is not "
			    "supported yet (write a file)",
			    o->out);
	if (o->overlay &&
	    !strncmp(o->overlay, OVERLAY_STORE, strlen(OVERLAY_STORE)))
		return errf(err, len, -EOPNOTSUPP,
			    "--overlay %s: block-store overlays are not "
			    "supported yet (use persistent:STATEFILE)",
			    o->overlay);
	if (o->overlay && (strncmp(o->overlay, OVERLAY_PERSISTENT,
				   strlen(OVERLAY_PERSISTENT)) ||
			   !o->overlay[strlen(OVERLAY_PERSISTENT)]))
		return errf(err, len, -EINVAL,
			    "--overlay %s: must be persistent:STATEFILE",
			    o->overlay);
	return 0;
}

/*
 * The composed disk: base + overlay, read through the disk's map. One
 * extent per block at most, so any chunk maps in one call.
 */
struct source {
	struct disk *disk;
	uint64_t size; /* bytes, a multiple of DISK_BLOCK_SIZE */
	struct disk_extent *ext;
	unsigned int max_ext;
};

static bool all_zero(const uint8_t *p, size_t n)
{
	return !n || (!p[0] && !memcmp(p, p + 1, n - 1));
}

/*
 * [off, off + n) of the composed disk into buf; *zero: every byte is 0
 * (buf is then undefined when no extent needed I/O).
 */
static int source_read(struct source *s, uint64_t off, uint8_t *buf, uint64_t n,
		       bool *zero, char *err, size_t len)
{
	uint64_t at = 0, done;
	int nr, i;
	ssize_t k;

	nr = disk__map_read(s->disk, off, n, s->ext, s->max_ext);
	if (nr < 0)
		return errf(err, len, nr, "mapping %llu+%llu: %s",
			    (unsigned long long)off, (unsigned long long)n,
			    strerror(-nr));
	*zero = true;
	for (i = 0; i < nr; i++)
		if (s->ext[i].fd >= 0)
			*zero = false;
	if (*zero)
		return 0;
	for (i = 0; i < nr; at += s->ext[i].len, i++) {
		if (s->ext[i].fd < 0) {
			memset(buf + at, 0, s->ext[i].len);
			continue;
		}
		for (done = 0; done < s->ext[i].len; done += k) {
			k = pread(s->ext[i].fd, buf + at + done,
				  s->ext[i].len - done,
				  s->ext[i].offset + done);
			if (k < 0 && errno == EINTR) {
				k = 0;
				continue;
			}
			if (k <= 0)
				return errf(
					err, len, k ? -errno : -EIO,
					"reading %llu bytes at %llu: %s",
					(unsigned long long)s->ext[i].len,
					(unsigned long long)s->ext[i].offset,
					k ? strerror(errno) :
					    "unexpected end of file");
		}
	}
	*zero = all_zero(buf, n);
	return 0;
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

/*
 * Base + overlay through the disk API: the overlay's header is checked
 * against the base (its recorded digest and size) and the state file is
 * locked while it is read, so no VM writes it meanwhile. The disk says
 * what is wrong itself (pr_err): err stays empty then.
 */
static int source_open(struct source *s, const struct rootfs_image *img,
		       const char *state, char *err, size_t len)
{
	struct disk_params p = {
		.base_path = img->path,
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
	ret = disk__open(&s->disk, &p);
	if (ret)
		err[0] = 0;
	return ret;
}

static void source_close(struct source *s)
{
	disk__close(s->disk);
	free(s->ext);
}

/* Into a temporary file beside out, renamed over nothing once complete. */
static int flatten_write(struct source *s, const struct flatten_opts *o,
			 char *err, size_t len)
{
	char inner[CMD_ERR_LEN] = "";
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
	if (!strcmp(o->format, "qcow2"))
		ret = flatten_qcow2(s, fd, (uint32_t)o->cluster_size, inner,
				    sizeof(inner));
	else
		ret = flatten_raw(s, fd, inner, sizeof(inner));
	if (ret)
		errf(err, len, ret, "--out %s: %s", o->out, inner);
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

static int flatten(int argc, char **argv, char *err, size_t len)
{
	struct flatten_opts o = {
		.format = "qcow2",
		.cluster_size = CLUSTER_DEFAULT,
	};
	struct source s = { .disk = NULL };
	struct rootfs_image img;
	char *state = NULL;
	struct stat st;
	int ret;

	memset(&img, 0, sizeof(img));
	ret = flatten_parse(argc, argv, &o, err, len);
	if (ret)
		return ret;
	if (!lstat(o.out, &st))
		return errf(err, len, -EEXIST,
			    "--out %s: exists (flatten writes a new file)",
			    o.out);
	ret = rootfs__load(&img, o.base, err, len);
	/*
	 * The disk's map gives offsets in a raw base; a qcow2 base needs
	 * the reader's translation first.
	 */
	if (!ret && strcmp(img.format, "raw"))
		ret = errf(err, len, -EOPNOTSUPP,
			   "--base %s: format \"%s\": flatten reads raw bases "
			   "only",
			   o.base, img.format);
	if (!ret)
		ret = rootfs__verify(&img, err, len);
	if (!ret && o.overlay) {
		state = realpath(o.overlay + strlen(OVERLAY_PERSISTENT), NULL);
		if (!state)
			ret = errf(err, len, -errno, "--overlay %s: %s",
				   o.overlay, strerror(errno));
	}
	if (!ret)
		ret = source_open(&s, &img, state, err, len);
	if (!ret)
		ret = flatten_write(&s, &o, err, len);
	source_close(&s);
	free(state);
	rootfs__free(&img);
	return ret;
}

/* ---- dispatch --------------------------------------------------------- */

static const struct {
	const char *name;
	int (*run)(int argc, char **argv, char *err, size_t len);
} subcommands[] = {
	{ "describe", describe },
	{ "bytes", bytes },
	{ "flatten", flatten },
};

int rootfs_cmd__main(int argc, char **argv)
{
	char err[CMD_ERR_LEN] = "";
	size_t i;
	int ret;

	for (i = 0; argc > 1 && i < ARRAY_SIZE(subcommands); i++)
		if (!strcmp(argv[1], subcommands[i].name))
			break;
	if (argc < 2 || i == ARRAY_SIZE(subcommands)) {
		pr_err("rootfs: expected describe FILE, bytes DESC or flatten "
		       "--base DESC ... --out FILE (vmm --help)");
		return -EINVAL;
	}
	ret = subcommands[i].run(argc - 1, argv + 1, err, sizeof(err));
	if (ret && ret != ROOTFS_CMD_EPIPE && err[0])
		pr_err("rootfs %s: %s", subcommands[i].name, err);
	return ret;
}
