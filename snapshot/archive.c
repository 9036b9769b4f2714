// SPDX-License-Identifier: GPL-2.0
/*
 * Snapshot archives (snapshot/archive.h): a verified snapshot
 * directory streamed through libzstd into one file, and back. The
 * format around the files is ours (a few fixed fields); compression,
 * framing and the stream's checksum are zstd's.
 *
 * The unpacker treats the archive as hostile: it creates only the
 * names the archive's own manifest lists, each once, in a directory it
 * made, writes only inside each file's declared size, holds at most one
 * buffer of each kind and the manifest in memory, and verifies every
 * digest before it answers. On failure it removes what it made.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <jansson.h>
#include <zstd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "snapshot/archive.h"
#include "snapshot/file.h"

#define ARCHIVE_MAGIC_LEN (sizeof(SNAP_ARCHIVE_MAGIC) - 1)
#define ARCHIVE_COPY	  (1U << 20) /* bytes per read of a part */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* ---- the zstd stream both ways ----------------------------------- */

struct zout {
	int fd;
	uint64_t off; /* bytes written to fd */
	ZSTD_CCtx *cc;
	uint8_t *buf;
	size_t cap;
};

/* n bytes at p into the stream; ZSTD_e_end also ends the frame. */
static int zout_put(struct zout *z, const void *p, size_t n,
		    ZSTD_EndDirective mode)
{
	ZSTD_inBuffer in = { p, n, 0 };
	size_t rem;
	int ret;

	do {
		ZSTD_outBuffer out = { z->buf, z->cap, 0 };

		rem = ZSTD_compressStream2(z->cc, &out, &in, mode);
		if (ZSTD_isError(rem))
			return -EIO;
		ret = snap_file__pwrite_all(z->fd, z->buf, out.pos, z->off);
		if (ret)
			return ret;
		z->off += out.pos;
	} while (mode == ZSTD_e_end ? rem != 0 : in.pos < in.size);
	return 0;
}

static int zout_u16(struct zout *z, uint16_t v)
{
	v = htole16(v);
	return zout_put(z, &v, sizeof(v), ZSTD_e_continue);
}

static int zout_u64(struct zout *z, uint64_t v)
{
	v = htole64(v);
	return zout_put(z, &v, sizeof(v), ZSTD_e_continue);
}

struct zin {
	int fd;
	ZSTD_DCtx *dc;
	uint8_t *buf;
	ZSTD_inBuffer in;
	size_t frame; /* ZSTD_decompressStream's last answer: 0 at a frame's end */
	const char *why; /* what went wrong, for the message */
	bool zstd;	 /* why is zstd's */
};

/* More compressed bytes: 0, -EBADMSG at the end of the file, or -errno. */
static int zin_fill(struct zin *z)
{
	size_t cap = ZSTD_DStreamInSize();
	ssize_t r;

	do
		r = read(z->fd, z->buf, cap);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (!r) {
		z->why = "it ends early (truncated)";
		return -EBADMSG;
	}
	z->in = (ZSTD_inBuffer){ z->buf, (size_t)r, 0 };
	return 0;
}

/* Exactly n bytes out of the stream into p. */
static int zin_get(struct zin *z, void *p, size_t n)
{
	ZSTD_outBuffer out = { p, n, 0 };

	while (out.pos < out.size) {
		size_t before = out.pos;
		int ret;

		z->frame = ZSTD_decompressStream(z->dc, &out, &z->in);
		if (ZSTD_isError(z->frame)) {
			z->why = ZSTD_getErrorName(z->frame);
			z->zstd = true;
			return -EBADMSG;
		}
		if (out.pos == before && z->in.pos == z->in.size) {
			ret = zin_fill(z);
			if (ret)
				return ret;
		}
	}
	return 0;
}

static int zin_u16(struct zin *z, uint16_t *v)
{
	int ret = zin_get(z, v, sizeof(*v));

	*v = le16toh(*v);
	return ret;
}

static int zin_u64(struct zin *z, uint64_t *v)
{
	int ret = zin_get(z, v, sizeof(*v));

	*v = le64toh(*v);
	return ret;
}

/* The frame ends here and so does the file: nothing may follow. */
static int zin_end(struct zin *z)
{
	uint8_t extra;
	int ret;

	while (z->frame) {
		ZSTD_outBuffer out = { &extra, 1, 0 };
		size_t before = z->in.pos;

		z->frame = ZSTD_decompressStream(z->dc, &out, &z->in);
		if (ZSTD_isError(z->frame)) {
			z->why = ZSTD_getErrorName(z->frame);
			z->zstd = true;
			return -EBADMSG;
		}
		if (out.pos) {
			z->why = "data after its end record";
			return -EBADMSG;
		}
		if (z->frame && z->in.pos == before &&
		    z->in.pos == z->in.size) {
			ret = zin_fill(z);
			if (ret)
				return ret;
		}
	}
	if (z->in.pos < z->in.size || read(z->fd, &extra, 1) != 0) {
		z->why = "bytes after its zstd frame";
		return -EBADMSG;
	}
	return 0;
}

/* ---- pack ------------------------------------------------------------ */

/* One file of the directory dfd into the stream: header, chunks, end. */
static int pack_file(struct zout *z, int dfd, const char *name, uint8_t *buf,
		     char *err, size_t len)
{
	uint64_t pos = 0, size;
	struct stat st;
	int fd, ret;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", name, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		ret = errf(err, len, -EINVAL, "%s: not a regular file", name);
		goto out;
	}
	size = (uint64_t)st.st_size;
	ret = zout_u16(z, (uint16_t)strlen(name));
	if (!ret)
		ret = zout_put(z, name, strlen(name), ZSTD_e_continue);
	if (!ret)
		ret = zout_u64(z, size);
	while (!ret && pos < size) {
		off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
		off_t hole;

		if (data < 0 && errno == ENXIO)
			break; /* a hole to the end */
		hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		if (hole < 0) {
			ret = -errno;
			break;
		}
		ret = zout_u64(z, (uint64_t)data);
		if (!ret)
			ret = zout_u64(z, (uint64_t)(hole - data));
		for (pos = (uint64_t)data; !ret && pos < (uint64_t)hole;) {
			size_t n = (size_t)min_u64((uint64_t)hole - pos,
						   ARCHIVE_COPY);
			ssize_t r = pread(fd, buf, n, (off_t)pos);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				/* Shorter than it said: it changed meanwhile. */
				ret = r < 0 ? -errno : -EBUSY;
				break;
			}
			ret = zout_put(z, buf, (size_t)r, ZSTD_e_continue);
			pos += (uint64_t)r;
		}
	}
	if (!ret)
		ret = zout_u64(z, 0);
	if (!ret)
		ret = zout_u64(z, 0);
	if (ret && !err[0])
		errf(err, len, ret, "%s: %s", name,
		     ret == -EBUSY ? "changed while being packed" :
				     strerror(-ret));
out:
	close(fd);
	return ret;
}

static int pack_all(struct zout *z, int dfd, const json_t *manifest, char *err,
		    size_t len)
{
	const json_t *parts = json_object_get(manifest, "parts");
	uint8_t *buf = malloc(ARCHIVE_COPY);
	uint32_t version = htole32(SNAP_ARCHIVE_VERSION);
	int ret;

	if (!buf)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	ret = zout_put(z, SNAP_ARCHIVE_MAGIC, ARCHIVE_MAGIC_LEN,
		       ZSTD_e_continue);
	if (!ret)
		ret = zout_put(z, &version, sizeof(version), ZSTD_e_continue);
	if (!ret)
		ret = pack_file(z, dfd, SNAP_MANIFEST, buf, err, len);
	for (size_t i = 0; !ret && i < json_array_size(parts); i++) {
		const json_t *p = json_array_get(parts, i);

		ret = pack_file(z, dfd,
				json_string_value(json_object_get(p, "file")),
				buf, err, len);
	}
	if (!ret)
		ret = zout_u16(z, 0);
	if (!ret)
		ret = zout_put(z, NULL, 0, ZSTD_e_end);
	free(buf);
	return ret;
}

static int zout_init(struct zout *z, int fd, int level)
{
	z->fd = fd;
	z->cap = ZSTD_CStreamOutSize();
	z->buf = malloc(z->cap);
	z->cc = ZSTD_createCCtx();
	if (!z->buf || !z->cc)
		return -ENOMEM;
	if (ZSTD_isError(ZSTD_CCtx_setParameter(z->cc, ZSTD_c_compressionLevel,
						level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(z->cc, ZSTD_c_checksumFlag, 1)))
		return -EINVAL;
	return 0;
}

int snap_archive__pack(const char *dir, const char *file, int level, char *err,
		       size_t len)
{
	struct zout z = { .fd = -1 };
	json_t *manifest = NULL;
	int dfd = -1, fd, ret;
	char why[512] = "";

	err[0] = '\0';
	if (level < 1 || level > ZSTD_maxCLevel())
		return errf(err, len, -EINVAL,
			    "zstd level %d: not between 1 and %d", level,
			    ZSTD_maxCLevel());
	ret = snap_dir__verify(dir, &manifest, why, sizeof(why));
	if (ret)
		return errf(err, len, ret, "%s: not a snapshot to pack: %s",
			    dir, why);
	if (json_object_get(manifest, SNAP_ROOT_STATE)) {
		json_decref(manifest);
		return errf(err, len, -EXDEV,
			    "%s: its root disk is a persistent root's state "
			    "file outside the snapshot (%s in %s): an archive "
			    "holds only a whole snapshot",
			    dir, SNAP_ROOT_STATE, SNAP_MANIFEST);
	}
	dfd = openat(AT_FDCWD, dir, SNAP_OPEN_DIR);
	if (dfd < 0) {
		ret = errf(err, len, -errno, "%s: %s", dir, strerror(errno));
		goto out;
	}
	fd = open(file, SNAP_OPEN_NEW, SNAP_FILE_MODE);
	if (fd < 0) {
		ret = errf(err, len, -errno, "%s: %s", file, strerror(errno));
		goto out;
	}
	ret = fchmod(fd, SNAP_FILE_MODE) < 0 ? -errno : 0;
	if (ret)
		errf(err, len, ret, "%s: %s", file, strerror(-ret));
	else
		ret = zout_init(&z, fd, level);
	if (ret)
		errf(err, len, ret, "zstd: %s", strerror(-ret));
	if (!ret)
		ret = pack_all(&z, dfd, manifest, why, sizeof(why));
	if (ret && !err[0])
		errf(err, len, ret, "%s: %s", file,
		     why[0] ? why : strerror(-ret));
	if (!ret && fsync(fd) < 0)
		ret = errf(err, len, -errno, "%s: %s", file, strerror(errno));
	if (close(fd) < 0 && !ret)
		ret = errf(err, len, -errno, "%s: %s", file, strerror(errno));
	if (ret)
		unlink(file);
out:
	ZSTD_freeCCtx(z.cc);
	free(z.buf);
	if (dfd >= 0)
		close(dfd);
	json_decref(manifest);
	return ret;
}

/* ---- unpack ---------------------------------------------------------- */

/* A file the archive may hold: the manifest, or a part it names. */
struct member {
	const char *name; /* the manifest's (borrowed) */
	uint64_t bytes;	  /* UINT64_MAX: any, up to SNAP_MANIFEST_MAX */
	bool made;
};

struct unpack {
	struct zin z;
	int dfd;
	uint64_t written;   /* bytes of data written (not holes) */
	uint64_t write_max; /* SNAP_ARCHIVE_RATIO_MAX x the archive's size */
	struct member *members;
	size_t n;
	json_t *manifest;
	uint8_t *buf;
	char *text; /* the manifest, while it is read */
};

/* A name the manifest may give a part: as snap_dir__verify takes them. */
static bool plain_name(const char *s)
{
	return s && s[0] && s[0] != '.' && !strchr(s, '/') &&
	       strlen(s) <= SNAP_ARCHIVE_NAME_MAX;
}

/*
 * The most a part of this kind may declare (archive.h): 0 and a why when
 * it declares more.
 */
static uint64_t kind_max(const json_t *manifest, const char *kind,
			 const char **what)
{
	const json_t *mem = json_object_get(manifest, "memoryBytes");
	json_int_t mb = json_integer_value(mem);

	if (kind && !strcmp(kind, "memory")) {
		*what = "the manifest's memoryBytes";
		return json_is_integer(mem) && mb > 0 &&
				       (uint64_t)mb <= SNAP_ARCHIVE_MEMORY_MAX ?
			       (uint64_t)mb :
			       0;
	}
	if (kind && !strcmp(kind, SNAP_LAYER_KIND)) {
		*what = "SNAP_ARCHIVE_DISK_MAX";
		return SNAP_ARCHIVE_DISK_MAX;
	}
	*what = "SNAP_PART_MAX";
	return SNAP_PART_MAX;
}

/* The manifest's parts become the members after it; -EBADMSG if odd. */
static int members_from(struct unpack *u, char *err, size_t len)
{
	json_error_t jerr;
	const json_t *parts;
	size_t i, j;

	u->manifest = json_loads(u->text, JSON_REJECT_DUPLICATES, &jerr);
	parts = json_object_get(u->manifest, "parts");
	if (!json_is_object(u->manifest) || !json_is_array(parts))
		return errf(err, len, -EBADMSG, "%s: no parts (%s)",
			    SNAP_MANIFEST, u->manifest ? "" : jerr.text);
	u->members = calloc(json_array_size(parts) + 1, sizeof(*u->members));
	if (!u->members)
		return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	u->members[0] = (struct member){ SNAP_MANIFEST, UINT64_MAX, true };
	u->n = 1;
	for (i = 0; i < json_array_size(parts); i++) {
		const json_t *p = json_array_get(parts, i);
		const char *name =
			json_string_value(json_object_get(p, "file"));
		json_int_t bytes =
			json_integer_value(json_object_get(p, "bytes"));
		const char *kind =
			json_string_value(json_object_get(p, "kind"));
		const char *what;
		uint64_t max = kind_max(u->manifest, kind, &what);

		if (!plain_name(name) || bytes < 0)
			return errf(err, len, -EBADMSG,
				    "%s: part %zu has no plain file name "
				    "and size",
				    SNAP_MANIFEST, i);
		/* Memory is exactly what the manifest says the VM had. */
		if (!strcmp(kind ? kind : "", "memory") ?
			    (uint64_t)bytes != max :
			    (uint64_t)bytes > max)
			return errf(err, len, -EFBIG,
				    "%s: %" PRIu64
				    " bytes, not within its bound of %" PRIu64
				    " (%s)",
				    name, (uint64_t)bytes, max, what);
		for (j = 0; j < u->n; j++)
			if (!strcmp(u->members[j].name, name))
				return errf(err, len, -EBADMSG,
					    "%s: names %s twice", SNAP_MANIFEST,
					    name);
		u->members[u->n++] =
			(struct member){ name, (uint64_t)bytes, false };
	}
	return 0;
}

/*
 * Before data bytes are written: within what the archive's size allows,
 * and with them plus SNAP_ARCHIVE_FREE_MIN free where they go.
 */
static int data_room(struct unpack *u, int fd, const char *name, uint64_t bytes,
		     char *err, size_t len)
{
	struct statvfs sv;
	uint64_t avail;

	if (bytes > u->write_max - u->written)
		return errf(err, len, -EFBIG,
			    "%s: more data than %u times the archive's "
			    "%" PRIu64 " bytes (SNAP_ARCHIVE_RATIO_MAX)",
			    name, SNAP_ARCHIVE_RATIO_MAX,
			    u->write_max / SNAP_ARCHIVE_RATIO_MAX);
	if (fstatvfs(fd, &sv) < 0)
		return errf(err, len, -errno, "%s: statvfs: %s", name,
			    strerror(errno));
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (avail < SNAP_ARCHIVE_FREE_MIN ||
	    bytes > avail - SNAP_ARCHIVE_FREE_MIN)
		return errf(err, len, -ENOSPC,
			    "%s: %" PRIu64 " more bytes with %" PRIu64
			    " free (SNAP_ARCHIVE_FREE_MIN %llu kept)",
			    name, bytes, avail, SNAP_ARCHIVE_FREE_MIN);
	u->written += bytes;
	return 0;
}

/* The bytes of k at p that write_data() writes: its non-zero pages. */
static uint64_t data_bytes(const uint8_t *p, size_t k)
{
	static const uint8_t zeros[SNAP_PAGE_SIZE];
	uint64_t n = 0;

	for (size_t i = 0; i < k; i += SNAP_PAGE_SIZE) {
		size_t m = (size_t)min_u64(k - i, SNAP_PAGE_SIZE);

		if (memcmp(p + i, zeros, m))
			n += m;
	}
	return n;
}

/*
 * k bytes at off of a new file (all zeros after its ftruncate): pages
 * of zeros are left holes, so a file keeps its holes whatever the
 * packing host's file system kept, and zeros cost no disk.
 */
static int write_data(int fd, const uint8_t *p, size_t k, uint64_t off)
{
	static const uint8_t zeros[SNAP_PAGE_SIZE];

	for (size_t i = 0; i < k; i += SNAP_PAGE_SIZE) {
		size_t n = (size_t)min_u64(k - i, SNAP_PAGE_SIZE);
		int ret;

		if (!memcmp(p + i, zeros, n))
			continue;
		ret = snap_file__pwrite_all(fd, p + i, n, off + i);
		if (ret)
			return ret;
	}
	return 0;
}

/* The chunks of one file of size bytes, into fd (and u->text if set). */
static int unpack_chunks(struct unpack *u, int fd, const char *name,
			 uint64_t size, char *err, size_t len)
{
	uint64_t end = 0, off, n;
	int ret;

	for (;;) {
		ret = zin_u64(&u->z, &off);
		if (!ret)
			ret = zin_u64(&u->z, &n);
		if (ret)
			return ret;
		if (!n) {
			if (off)
				return errf(err, len, -EBADMSG,
					    "%s: a chunk end with offset "
					    "%" PRIu64,
					    name, off);
			return 0;
		}
		if (off < end || off > size || n > size - off)
			return errf(err, len, -EBADMSG,
				    "%s: a chunk of %" PRIu64
				    " bytes at %" PRIu64
				    " is outside its %" PRIu64
				    " bytes or out of order",
				    name, n, off, size);
		for (end = off + n; off < end;) {
			size_t k = (size_t)min_u64(end - off, ARCHIVE_COPY);

			ret = zin_get(&u->z, u->buf, k);
			if (!ret && u->text)
				memcpy(u->text + off, u->buf, k);
			if (!ret)
				ret = data_room(u, fd, name,
						data_bytes(u->buf, k), err,
						len);
			if (!ret)
				ret = write_data(fd, u->buf, k, off);
			if (ret)
				return ret;
			off += k;
		}
	}
}

/* The next file of the archive; *done at its end record. */
static int unpack_file(struct unpack *u, bool *done, char *err, size_t len)
{
	char name[SNAP_ARCHIVE_NAME_MAX + 1];
	struct member *m = NULL;
	uint64_t size;
	uint16_t n;
	int fd, ret;

	ret = zin_u16(&u->z, &n);
	if (ret)
		return ret;
	if (!n) {
		*done = true;
		return 0;
	}
	if (n > SNAP_ARCHIVE_NAME_MAX)
		return errf(err, len, -EBADMSG, "a name of %u bytes", n);
	ret = zin_get(&u->z, name, n);
	if (ret)
		return ret;
	name[n] = '\0';
	if (!u->manifest) {
		if (strcmp(name, SNAP_MANIFEST))
			return errf(err, len, -EBADMSG,
				    "its first file is not %s", SNAP_MANIFEST);
	} else {
		for (size_t i = 1; i < u->n && !m; i++)
			if (!strcmp(u->members[i].name, name))
				m = &u->members[i];
		if (!m || m->made)
			return errf(err, len, -EBADMSG, "\"%.*s\": %s",
				    SNAP_ARCHIVE_NAME_MAX, name,
				    m ? "twice in it" :
					"a file its manifest does not name");
	}
	ret = zin_u64(&u->z, &size);
	if (ret)
		return ret;
	if (m ? size != m->bytes : size > SNAP_MANIFEST_MAX)
		return errf(err, len, -EBADMSG,
			    "%s: %" PRIu64 " bytes, not the %s", name, size,
			    m ? "manifest's size" : "manifest's limit");
	if (!m) {
		u->text = calloc(1, (size_t)size + 1);
		if (!u->text)
			return errf(err, len, -ENOMEM, "%s", strerror(ENOMEM));
	}
	fd = openat(u->dfd, name, SNAP_OPEN_NEW, SNAP_FILE_MODE);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", name, strerror(errno));
	if (m)
		m->made = true;
	/* 0600 whatever the umask: the verify below wants exactly that. */
	ret = fchmod(fd, SNAP_FILE_MODE) < 0 || ftruncate(fd, (off_t)size) < 0 ?
		      -errno :
		      0;
	if (!ret)
		ret = unpack_chunks(u, fd, name, size, err, len);
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	close(fd);
	if (!ret && !m)
		ret = members_from(u, err, len);
	free(u->text);
	u->text = NULL;
	if (ret && !err[0] && ret != -EBADMSG)
		errf(err, len, ret, "%s: %s", name, strerror(-ret));
	return ret;
}

static int unpack_all(struct unpack *u, char *err, size_t len)
{
	uint8_t magic[ARCHIVE_MAGIC_LEN];
	uint32_t version;
	bool done = false;
	int ret;

	ret = zin_get(&u->z, magic, sizeof(magic));
	if (!ret)
		ret = zin_get(&u->z, &version, sizeof(version));
	if (ret)
		return ret;
	if (memcmp(magic, SNAP_ARCHIVE_MAGIC, sizeof(magic)) ||
	    le32toh(version) != SNAP_ARCHIVE_VERSION)
		return errf(err, len, -EBADMSG,
			    "not a snapshot archive of version %d",
			    SNAP_ARCHIVE_VERSION);
	while (!ret && !done)
		ret = unpack_file(u, &done, err, len);
	if (ret)
		return ret;
	if (!u->manifest)
		return errf(err, len, -EBADMSG, "it holds no %s",
			    SNAP_MANIFEST);
	for (size_t i = 1; i < u->n; i++)
		if (!u->members[i].made)
			return errf(err, len, -EBADMSG,
				    "%s: named by its manifest, not in it",
				    u->members[i].name);
	return zin_end(&u->z);
}

/* Remove what the unpacker made: its files, then the directory. */
static void unpack_undo(struct unpack *u, const char *dir)
{
	if (u->dfd >= 0 && !u->members) /* failed in the manifest, or before */
		unlinkat(u->dfd, SNAP_MANIFEST, 0);
	for (size_t i = 0; u->dfd >= 0 && i < u->n; i++)
		if (u->members[i].made)
			unlinkat(u->dfd, u->members[i].name, 0);
	rmdir(dir);
}

int snap_archive__unpack(const char *file, const char *dir, char *err,
			 size_t len)
{
	struct unpack u = { .dfd = -1, .z.fd = -1 };
	json_t *verified = NULL;
	char why[512] = "";
	struct stat st;
	int ret;

	err[0] = '\0';
	u.z.fd = open(file, O_RDONLY | O_CLOEXEC);
	if (u.z.fd < 0)
		return errf(err, len, -errno, "%s: %s", file, strerror(errno));
	if (fstat(u.z.fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		ret = errf(err, len, -EINVAL, "%s: not a regular file", file);
		close(u.z.fd);
		return ret;
	}
	u.write_max = (uint64_t)st.st_size * SNAP_ARCHIVE_RATIO_MAX;
	if (mkdir(dir, SNAP_DIR_MODE) < 0) {
		ret = errf(err, len, -errno, "%s: %s", dir,
			   errno == EEXIST ? "exists (unpack makes it)" :
					     strerror(errno));
		close(u.z.fd);
		return ret;
	}
	u.dfd = openat(AT_FDCWD, dir, SNAP_OPEN_DIR);
	u.z.dc = ZSTD_createDCtx();
	u.z.buf = malloc(ZSTD_DStreamInSize());
	u.buf = malloc(ARCHIVE_COPY);
	if (u.dfd < 0 || fchmod(u.dfd, SNAP_DIR_MODE) < 0)
		ret = -errno;
	else
		ret = u.z.dc && u.z.buf && u.buf ? 0 : -ENOMEM;
	if (!ret)
		ret = unpack_all(&u, why, sizeof(why));
	if (!ret && fsync(u.dfd) < 0)
		ret = -errno;
	if (!ret) {
		ret = snap_dir__verify(dir, &verified, why, sizeof(why));
		json_decref(verified);
	}
	if (ret) {
		if (why[0])
			errf(err, len, ret, "%s: %s", file, why);
		else if (ret == -EBADMSG)
			errf(err, len, ret, "%s: %s%s", file,
			     u.z.zstd ? "not a whole zstd stream: " : "",
			     u.z.why ? u.z.why : "corrupt");
		else
			errf(err, len, ret, "%s: %s", file, strerror(-ret));
		unpack_undo(&u, dir);
	}
	if (u.dfd >= 0)
		close(u.dfd);
	close(u.z.fd);
	ZSTD_freeDCtx(u.z.dc);
	free(u.z.buf);
	free(u.buf);
	free(u.text);
	free(u.members);
	json_decref(u.manifest);
	return ret;
}
