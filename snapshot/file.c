// SPDX-License-Identifier: GPL-2.0
/*
 * A snapshot directory: its modes, its parts, the sparse memory file and
 * the manifest (snapshot/file.h). The writer runs in the monitor
 * under its seccomp filter: it creates (mkdirat, openat with O_EXCL) and
 * writes (pwrite64), never reopens; the one file it reads is the root
 * disk's writable layer it was handed (lseek, pread64). The verifier is
 * for a restore and the tests, before any filter.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/sha256.h"
#include "snapshot/file.h"
#include "snapshot/verified.h"

#define SNAP_READ_CHUNK (1U << 20) /* bytes per read while verifying */

static bool page_is_zero(const uint8_t *p)
{
	return !p[0] && !memcmp(p, p + 1, SNAP_PAGE_SIZE - 1);
}

/* One page for SNAP_DIGEST_PAGES: its offset, then its bytes. */
static int hash_page(struct sha256 *sha, uint64_t off, const uint8_t *p)
{
	uint64_t le = htole64(off);
	int ret = sha256__update(sha, &le, sizeof(le));

	if (!ret)
		ret = sha256__update(sha, p, SNAP_PAGE_SIZE);
	return ret;
}

static int hash_size(struct sha256 *sha, uint64_t size)
{
	uint64_t le = htole64(size);

	return sha256__update(sha, &le, sizeof(le));
}

int snap_file__pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (!w)
			return -EIO;
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

static int read_full(int fd, uint8_t *p, size_t n, uint64_t off);

/* ---- the directory ------------------------------------------------- */

int snap_dir__create(struct snap_dir *d, const char *path, char *err,
		     size_t len)
{
	bool made = true;
	struct stat st;
	int ret;

	d->fd = -1;
	d->parts = json_array();
	if (!d->parts)
		return -ENOMEM;
	if (mkdirat(AT_FDCWD, path, SNAP_DIR_MODE) < 0) {
		if (errno != EEXIST) {
			ret = -errno;
			snprintf(err, len, "%s: %s", path, strerror(errno));
			goto out_free;
		}
		made = false;
	}
	d->fd = openat(AT_FDCWD, path, SNAP_OPEN_DIR);
	if (d->fd < 0 || fstat(d->fd, &st) < 0) {
		ret = -errno;
		snprintf(err, len, "%s: %s", path,
			 errno == ELOOP ? "a symbolic link" : strerror(errno));
		goto out_free;
	}
	/* Ours: the umask may have taken bits off, never added any. */
	if (made && fchmod(d->fd, SNAP_DIR_MODE) < 0) {
		ret = -errno;
		snprintf(err, len, "%s: chmod: %s", path, strerror(errno));
		goto out_free;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, len, "%s: owned by uid %u, not ours (%u)", path,
			 (unsigned int)st.st_uid, (unsigned int)geteuid());
		ret = -EPERM;
		goto out_free;
	}
	if (!made && (st.st_mode & 07777) != SNAP_DIR_MODE) {
		snprintf(err, len, "%s: mode %04o, must be %04o (owner only)",
			 path, (unsigned int)(st.st_mode & 07777),
			 SNAP_DIR_MODE);
		ret = -EPERM;
		goto out_free;
	}
	return 0;

out_free:
	snap_dir__close(d);
	return ret;
}

void snap_dir__close(struct snap_dir *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
	json_decref(d->parts);
	d->parts = NULL;
}

/* A new 0600 file in the directory; -EEXIST if there is one. */
static int new_file(struct snap_dir *d, const char *file, char *err, size_t len)
{
	int fd, ret;

	if (strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..")) {
		snprintf(err, len, "%s: not a plain file name", file);
		return -EINVAL;
	}
	fd = openat(d->fd, file, SNAP_OPEN_NEW, SNAP_FILE_MODE);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, len, "%s: %s", file, strerror(-ret));
		return ret;
	}
	if (fchmod(fd, SNAP_FILE_MODE) < 0) {
		ret = -errno;
		snprintf(err, len, "%s: chmod: %s", file, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
}

static int add_part(struct snap_dir *d, const char *file, const char *kind,
		    uint64_t bytes, const char *digest, const char *hex,
		    uint64_t data_bytes)
{
	json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s}", "file", file, "kind",
			      kind, "bytes", (json_int_t)bytes, "digest",
			      digest, "sha256", hex);

	if (o && data_bytes != bytes)
		json_object_set_new(o, "dataBytes",
				    json_integer((json_int_t)data_bytes));
	return !o || json_array_append_new(d->parts, o) ? -ENOMEM : 0;
}

static int sync_close(int fd, const char *file, char *err, size_t len)
{
	int ret = 0;

	if (fsync(fd) < 0) {
		ret = -errno;
		snprintf(err, len, "%s: fsync: %s", file, strerror(-ret));
	}
	close(fd);
	return ret;
}

int snap_dir__write_part(struct snap_dir *d, const char *file, const char *kind,
			 const void *buf, size_t n, char *err, size_t len)
{
	char hex[SNAP_SHA256_HEX + 1];
	int fd, ret;

	fd = new_file(d, file, err, len);
	if (fd < 0)
		return fd;
	ret = snap_file__pwrite_all(fd, buf, n, 0);
	if (ret)
		snprintf(err, len, "%s: write: %s", file, strerror(-ret));
	if (!ret)
		ret = sync_close(fd, file, err, len);
	else
		close(fd);
	if (ret)
		return ret;
	ret = sha256__hex(buf, n, hex);
	if (!ret)
		ret = add_part(d, file, kind, n, SNAP_DIGEST_FILE, hex, n);
	if (ret)
		snprintf(err, len, "%s: digest: %s", file, strerror(-ret));
	return ret;
}

/*
 * The end of a sparse part whose pages went to fd and into sha (ret: how
 * that went): its size hashed and set, synced, closed, and named in the
 * manifest with its digest. fd is closed and sha released either way.
 */
static int finish_sparse(struct snap_dir *d, struct sha256 *sha, int fd,
			 int ret, const char *file, const char *kind,
			 uint64_t size, uint64_t data, char *err, size_t len)
{
	char hex[SNAP_SHA256_HEX + 1];

	if (!ret)
		ret = hash_size(sha, size);
	if (!ret && ftruncate(fd, (off_t)size) < 0)
		ret = -errno;
	if (ret) {
		sha256__free(sha);
		snprintf(err, len, "%s: %s", file, strerror(-ret));
		close(fd);
		return ret;
	}
	ret = sync_close(fd, file, err, len);
	if (!ret)
		ret = sha256__final_hex(sha, hex);
	else
		sha256__free(sha);
	if (!ret)
		ret = add_part(d, file, kind, size, SNAP_DIGEST_PAGES, hex,
			       data);
	if (ret && !err[0])
		snprintf(err, len, "%s: %s", file, strerror(-ret));
	return ret;
}

/*
 * Runs of pages that are not all zeros, each written with one pwrite;
 * the holes are what is never written, and ftruncate gives the file the
 * size of guest RAM. The pages read are guest RAM as KVM maps it: one
 * the guest never touched reads as the shared zero page, so nothing is
 * allocated by reading it (mincore or pagemap would tell touched from
 * untouched, but a touched page of zeros needs no room either).
 */
int snap_dir__write_memory(struct snap_dir *d, const char *file,
			   const uint8_t *mem, uint64_t size, char *err,
			   size_t len)
{
	uint64_t off, run = 0, data = 0;
	bool in_run = false;
	struct sha256 sha;
	int fd, ret;

	if (size % SNAP_PAGE_SIZE) {
		snprintf(err, len, "%s: %" PRIu64 " bytes: not whole pages",
			 file, size);
		return -EINVAL;
	}
	fd = new_file(d, file, err, len);
	if (fd < 0)
		return fd;
	ret = sha256__init(&sha);
	for (off = 0; !ret && off <= size; off += SNAP_PAGE_SIZE) {
		bool zero = off == size || page_is_zero(mem + off);

		if (!zero) {
			ret = hash_page(&sha, off, mem + off);
			data += SNAP_PAGE_SIZE;
			if (!in_run)
				run = off;
			in_run = true;
			continue;
		}
		if (in_run)
			ret = snap_file__pwrite_all(fd, mem + run, off - run,
						    run);
		in_run = false;
	}
	return finish_sparse(d, &sha, fd, ret, file, "memory", size, data, err,
			     len);
}

/* A run of non-zero pages [run, off) of buf, which starts at base. */
static int flush_run(int fd, const uint8_t *buf, uint64_t base, uint64_t run,
		     uint64_t off)
{
	return off > run ? snap_file__pwrite_all(fd, buf + (run - base),
						 off - run, run) :
			   0;
}

/*
 * One chunk of src at off: its pages that are not all zeros hashed and
 * written in runs (a zero page ends a run and is left a hole).
 */
static int copy_chunk(struct sha256 *sha, int fd, const uint8_t *buf,
		      uint64_t off, uint64_t n, uint64_t *data)
{
	uint64_t p, run = off;
	int ret = 0;

	for (p = off; !ret && p < off + n; p += SNAP_PAGE_SIZE) {
		if (page_is_zero(buf + (p - off))) {
			ret = flush_run(fd, buf, off, run, p);
			run = p + SNAP_PAGE_SIZE;
			continue;
		}
		ret = hash_page(sha, p, buf + (p - off));
		*data += SNAP_PAGE_SIZE;
	}
	return ret ? ret : flush_run(fd, buf, off, run, off + n);
}

/* Every data extent of src (SEEK_DATA, SEEK_HOLE), chunk by chunk. */
static int copy_sparse(struct sha256 *sha, int fd, int src, uint64_t size,
		       uint64_t *data)
{
	uint64_t off = 0, end, n;
	uint8_t *buf;
	off_t at;
	int ret = 0;

	/* Aligned: src may be an O_DIRECT state file. */
	buf = aligned_alloc(SNAP_PAGE_SIZE, SNAP_READ_CHUNK);
	if (!buf)
		return -ENOMEM;
	while (!ret && off < size) {
		at = lseek(src, (off_t)off, SEEK_DATA);
		if (at < 0) {
			ret = errno == ENXIO ? 0 : -errno;
			break;
		}
		off = (uint64_t)at & ~(uint64_t)(SNAP_PAGE_SIZE - 1);
		at = lseek(src, at, SEEK_HOLE);
		if (at < 0) {
			ret = -errno;
			break;
		}
		/* Whole pages: a hole starts on a block boundary. */
		end = ((uint64_t)at + SNAP_PAGE_SIZE - 1) &
		      ~(uint64_t)(SNAP_PAGE_SIZE - 1);
		if (end > size)
			end = size;
		for (; !ret && off < end; off += n) {
			n = end - off < SNAP_READ_CHUNK ? end - off :
							  SNAP_READ_CHUNK;
			ret = read_full(src, buf, n, off);
			if (!ret)
				ret = copy_chunk(sha, fd, buf, off, n, data);
		}
	}
	free(buf);
	return ret;
}

int snap_dir__write_sparse(struct snap_dir *d, const char *file,
			   const char *kind, int src, uint64_t size, char *err,
			   size_t len)
{
	uint64_t data = 0;
	struct sha256 sha;
	int fd, ret;

	if (size % SNAP_PAGE_SIZE) {
		snprintf(err, len, "%s: %" PRIu64 " bytes: not whole pages",
			 file, size);
		return -EINVAL;
	}
	fd = new_file(d, file, err, len);
	if (fd < 0)
		return fd;
	ret = sha256__init(&sha);
	if (ret) {
		close(fd);
		snprintf(err, len, "%s: %s", file, strerror(-ret));
		return ret;
	}
	ret = copy_sparse(&sha, fd, src, size, &data);
	return finish_sparse(d, &sha, fd, ret, file, kind, size, data, err,
			     len);
}

int snap_dir__finish(struct snap_dir *d, const json_t *fields, char *err,
		     size_t len)
{
	json_t *m = json_deep_copy(fields);
	char *text = NULL;
	int fd, ret = -ENOMEM;

	if (!m ||
	    json_object_set_new(m, "format",
				json_integer(SNAP_FORMAT_VERSION)) ||
	    json_object_set(m, "parts", d->parts))
		goto out;
	text = json_dumps(m, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text)
		goto out;
	fd = new_file(d, SNAP_MANIFEST, err, len);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	ret = snap_file__pwrite_all(fd, (const uint8_t *)text, strlen(text), 0);
	if (ret) {
		snprintf(err, len, "%s: write: %s", SNAP_MANIFEST,
			 strerror(-ret));
		close(fd);
		goto out;
	}
	ret = sync_close(fd, SNAP_MANIFEST, err, len);
	/* The new names last: a crash before leaves no manifest. */
	if (!ret && fsync(d->fd) < 0) {
		ret = -errno;
		snprintf(err, len, "the directory: fsync: %s", strerror(errno));
	}
out:
	if (ret == -ENOMEM && !err[0])
		snprintf(err, len, "%s: out of memory", SNAP_MANIFEST);
	free(text);
	json_decref(m);
	return ret;
}

/* ---- verifying ----------------------------------------------------- */

static int read_full(int fd, uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (!r)
			return -EIO; /* shorter than fstat said */
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int snap_file__sha256(int fd, char hex[SNAP_SHA256_HEX + 1])
{
	uint8_t *buf = malloc(SNAP_READ_CHUNK);
	struct sha256 sha;
	ssize_t r;
	uint64_t off = 0;
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = sha256__init(&sha);
	while (!ret) {
		r = pread(fd, buf, SNAP_READ_CHUNK, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ret = r < 0 ? -errno : 0;
			break;
		}
		ret = sha256__update(&sha, buf, r);
		off += (uint64_t)r;
	}
	free(buf);
	if (ret) {
		sha256__free(&sha);
		return ret;
	}
	return sha256__final_hex(&sha, hex);
}

/* SEEK_DATA and SEEK_HOLE: only the data is read. */
int snap_file__pages_sha256(int fd, char hex[SNAP_SHA256_HEX + 1])
{
	/* Aligned: fd may be an O_DIRECT state file. */
	uint8_t page[SNAP_PAGE_SIZE] __attribute__((aligned(SNAP_PAGE_SIZE)));
	struct stat st;
	uint64_t size, off = 0, end;
	struct sha256 sha;
	off_t at;
	int ret;

	if (fstat(fd, &st) < 0)
		return -errno;
	size = (uint64_t)st.st_size;
	if (size % SNAP_PAGE_SIZE)
		return -EBADMSG;
	ret = sha256__init(&sha);
	while (!ret && off < size) {
		at = lseek(fd, (off_t)off, SEEK_DATA);
		if (at < 0) {
			ret = errno == ENXIO ? 0 : -errno;
			break;
		}
		off = (uint64_t)at & ~(uint64_t)(SNAP_PAGE_SIZE - 1);
		at = lseek(fd, at, SEEK_HOLE);
		if (at < 0) {
			ret = -errno;
			break;
		}
		end = (uint64_t)at;
		for (; !ret && off < end && off < size; off += SNAP_PAGE_SIZE) {
			ret = read_full(fd, page, sizeof(page), off);
			if (!ret && !page_is_zero(page))
				ret = hash_page(&sha, off, page);
		}
	}
	if (!ret)
		ret = hash_size(&sha, size);
	if (ret) {
		sha256__free(&sha);
		return ret;
	}
	return sha256__final_hex(&sha, hex);
}

static int mode_check(int fd, mode_t want, const char *what, char *err,
		      size_t len)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		int e = errno;

		snprintf(err, len, "%s: %s", what, strerror(e));
		return -e;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 07777) != want) {
		snprintf(err, len,
			 "%s: mode %04o uid %u, must be %04o and ours", what,
			 (unsigned int)(st.st_mode & 07777),
			 (unsigned int)st.st_uid, (unsigned int)want);
		return -EPERM;
	}
	return 0;
}

static int read_manifest(int dfd, json_t **out, char *err, size_t len)
{
	char *text = NULL;
	json_error_t jerr;
	struct stat st;
	int fd, ret;

	fd = openat(dfd, SNAP_MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		snprintf(err, len, "%s: %s", SNAP_MANIFEST, strerror(e));
		return -e;
	}
	ret = mode_check(fd, SNAP_FILE_MODE, SNAP_MANIFEST, err, len);
	if (!ret && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		     st.st_size > SNAP_MANIFEST_MAX)) {
		snprintf(err, len, "%s: not a regular file under %u bytes",
			 SNAP_MANIFEST, SNAP_MANIFEST_MAX);
		ret = -EINVAL;
	}
	if (!ret) {
		text = malloc((size_t)st.st_size + 1);
		ret = text ? read_full(fd, (uint8_t *)text, (size_t)st.st_size,
				       0) :
			     -ENOMEM;
	}
	close(fd);
	if (ret) {
		free(text);
		if (!err[0])
			snprintf(err, len, "%s: %s", SNAP_MANIFEST,
				 strerror(-ret));
		return ret;
	}
	text[st.st_size] = '\0';
	*out = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (!*out || !json_is_object(*out)) {
		snprintf(err, len, "%s: line %d: %s", SNAP_MANIFEST, jerr.line,
			 *out ? "not an object" : jerr.text);
		json_decref(*out);
		*out = NULL;
		return -EINVAL;
	}
	return 0;
}

/* Below this, a part is hashed every time: cheaper than a cache entry. */
#define SNAP_VERIFIED_MIN_BYTES (1U << 20)

static int snap_hash(int fd, const char *kind, const char *want,
		     char hex[SNAP_SHA256_HEX + 1])
{
	int ret = strcmp(kind, SNAP_DIGEST_PAGES) ?
			  snap_file__sha256(fd, hex) :
			  snap_file__pages_sha256(fd, hex);

	return !ret && strcmp(hex, want) ? -EBADMSG : ret;
}

/*
 * fd's bytes against the manifest's sha256 (want) under the digest kind:
 * 0, -EBADMSG (hex has what they hash to), -EBUSY (changed meanwhile) or
 * an error. A good hash goes in the verification cache, so the next use
 * of an untouched file (every restore from one baseline) skips it.
 */
static int verify_bytes(int fd, const struct stat *st, const char *file,
			const char *kind, const char *want,
			char hex[SNAP_SHA256_HEX + 1])
{
	char digest[SNAP_SHA256_HEX + 64];
	struct verified v;
	int ret;

	snprintf(digest, sizeof(digest), "snapshot-%s:%.64s", kind, want);
	if (st->st_size < SNAP_VERIFIED_MIN_BYTES)
		return snap_hash(fd, kind, want, hex);
	if (verified__lookup(&v, st, digest)) {
		verified__release(&v);
		return 0;
	}
	ret = snap_hash(fd, kind, want, hex);
	if (!ret)
		ret = verified__remember(&v, fd, st, file);
	verified__release(&v);
	return ret;
}

static int verify_part(int dfd, const json_t *part, char *err, size_t len)
{
	const char *file = json_string_value(json_object_get(part, "file"));
	const char *digest = json_string_value(json_object_get(part, "digest"));
	const char *want = json_string_value(json_object_get(part, "sha256"));
	json_t *bytes = json_object_get(part, "bytes");
	char hex[SNAP_SHA256_HEX + 1];
	struct stat st;
	int fd, ret;

	if (!file || !digest || !want || !json_is_integer(bytes) ||
	    strchr(file, '/') || file[0] == '.' ||
	    (strcmp(digest, SNAP_DIGEST_FILE) &&
	     strcmp(digest, SNAP_DIGEST_PAGES))) {
		snprintf(err, len,
			 "%s: a part without file, bytes, digest "
			 "and sha256",
			 SNAP_MANIFEST);
		return -EINVAL;
	}
	fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		snprintf(err, len, "%s: %s", file, strerror(e));
		return -e;
	}
	ret = mode_check(fd, SNAP_FILE_MODE, file, err, len);
	if (!ret && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		     st.st_size != json_integer_value(bytes))) {
		snprintf(err, len,
			 "%s: not a regular file of %" JSON_INTEGER_FORMAT
			 " bytes",
			 file, json_integer_value(bytes));
		ret = -EBADMSG;
	}
	if (!ret) {
		ret = verify_bytes(fd, &st, file, digest, want, hex);
		if (ret == -EBUSY)
			snprintf(err, len, "%s: changed while being verified",
				 file);
	}
	close(fd);
	if (ret == -EBADMSG) {
		snprintf(err, len, "%s: sha256 %s, the manifest says %.64s",
			 file, hex, want);
		return ret;
	}
	if (ret && !err[0])
		snprintf(err, len, "%s: %s", file, strerror(-ret));
	return ret;
}

int snap_dir__verify(const char *path, json_t **manifest, char *err, size_t len)
{
	json_t *m = NULL, *parts;
	size_t i;
	int dfd, ret;

	err[0] = '\0';
	dfd = openat(AT_FDCWD, path, SNAP_OPEN_DIR);
	if (dfd < 0) {
		int e = errno;

		snprintf(err, len, "%s: %s", path,
			 e == ENOTDIR ? "not a directory (an archive? "
					"`vmm snapshot unpack` makes one)" :
					strerror(e));
		return -e;
	}
	ret = mode_check(dfd, SNAP_DIR_MODE, path, err, len);
	if (!ret)
		ret = read_manifest(dfd, &m, err, len);
	if (!ret && json_integer_value(json_object_get(m, "format")) !=
			    SNAP_FORMAT_VERSION) {
		snprintf(err, len, "%s: format is not %d", SNAP_MANIFEST,
			 SNAP_FORMAT_VERSION);
		ret = -EINVAL;
	}
	parts = json_object_get(m, "parts");
	if (!ret && !json_is_array(parts)) {
		snprintf(err, len, "%s: no parts", SNAP_MANIFEST);
		ret = -EINVAL;
	}
	for (i = 0; !ret && i < json_array_size(parts); i++)
		ret = verify_part(dfd, json_array_get(parts, i), err, len);
	close(dfd);
	if (ret) {
		json_decref(m);
		return ret;
	}
	*manifest = m;
	return 0;
}
