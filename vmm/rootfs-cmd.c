// SPDX-License-Identifier: GPL-2.0
/*
 * vmm rootfs: root images handled offline (Documentation/rootfs.md,
 * "Images out of a machine").
 *
 *   describe FILE: a descriptor for a raw or qcow2 file, to use as a base;
 *   bytes DESC: the image's bytes on stdout, checked against its digest;
 *   flatten: base + overlay as one standalone image (rootfs-flatten.c).
 *
 * Each reports one line at its edge (main.c maps the result to the exit
 * status).
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

#include "lib/errf.h"
#include "lib/getopt-exact.h"
#include "lib/log.h"
#include "lib/parse.h"
#include "lib/sha256.h"
#include "vmm/rootfs-cmd-internal.h"
#include "vmm/rootfs-cmd.h"
#include "vmm/rootfs.h"

#define CHUNK_DEFAULT (1U << 20)  /* bytes per read: bytes, describe */
#define CHUNK_MAX     (64U << 20) /* bytes: --chunk-size's bound */
/* The qcow2 header fields describe reads (QEMU's docs/interop/qcow2.txt). */
#define QCOW2_MAGIC_BE	  "QFI\xfb"
#define QCOW2_HDR_PEEK	  36 /* through crypt_method */
#define QCOW2_HDR_VERSION 4
#define QCOW2_HDR_BACKING 8
#define QCOW2_HDR_SIZE	  24
#define QCOW2_HDR_CRYPT	  32
#define DESC_ARCHITECTURE "x86_64"

/* ---- shared ----------------------------------------------------------- */

/*
 * Options, then positionals anywhere between them: getopt_exact stops at
 * the first word that is not an option ("+"), so each is collected here
 * and the scan goes on after it. Returns the option, -1 at the end, '?'
 * with err set.
 */
int rootfs_cmd__next_arg(int argc, char **argv, const struct option *lo,
			 const char **pos, int *npos, char *err, size_t len)
{
	int opt;

	for (;;) {
		while (optind < argc &&
		       (argv[optind][0] != '-' || !argv[optind][1])) {
			if (*npos == ROOTFS_CMD_MAX_POS) {
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
			if (*npos == ROOTFS_CMD_MAX_POS) {
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
int rootfs_cmd__stream(int fd, int out, size_t chunk, const char *what,
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

int rootfs_cmd__parse_bytes(const char *opt, const char *s, uint64_t min,
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
char *rootfs_cmd__default_name(const char *path)
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
	const char *name;   /* NULL: rootfs_cmd__default_name(file) */
};

static int describe_parse(int argc, char **argv, struct describe_opts *o,
			  char *err, size_t len)
{
	static const struct option lo[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "name", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pos[ROOTFS_CMD_MAX_POS];
	int opt, npos = 0;

	optind = 1;
	while ((opt = rootfs_cmd__next_arg(argc, argv, lo, pos, &npos, err,
					   len)) != -1) {
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
	name = o.name ? strdup(o.name) : rootfs_cmd__default_name(o.file);
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
		ret = rootfs_cmd__stream(fd, -1, CHUNK_DEFAULT, o.file, digest,
					 &total, err, len);
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
	const char *pos[ROOTFS_CMD_MAX_POS];
	struct rootfs_image img;
	int opt, npos = 0, fd, ret;
	struct stat st;

	optind = 1;
	while ((opt = rootfs_cmd__next_arg(argc, argv, lo, pos, &npos, err,
					   len)) != -1) {
		if (opt != 'c')
			return -EINVAL;
		ret = rootfs_cmd__parse_bytes("--chunk-size", optarg,
					      ROOTFS_BLOCK_SIZE, CHUNK_MAX,
					      false, &chunk, err, len);
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
	ret = rootfs_cmd__stream(fd, STDOUT_FILENO, chunk, img.path, digest,
				 &total, err, len);
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

/* ---- dispatch --------------------------------------------------------- */

static const struct {
	const char *name;
	int (*run)(int argc, char **argv, char *err, size_t len);
} subcommands[] = {
	{ "describe", describe },
	{ "bytes", bytes },
	{ "flatten", rootfs_cmd__flatten },
};

int rootfs_cmd__main(int argc, char **argv)
{
	char err[ROOTFS_CMD_ERR_LEN] = "";
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
