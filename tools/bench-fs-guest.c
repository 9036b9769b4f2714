// SPDX-License-Identifier: GPL-2.0
/*
 * bench-fs-guest: the guest side of the virtio-fs benchmark (tools/bench-fs,
 * Documentation/benchmarks.md), a static program appended to the initramfs
 * as /bin/bench-fs-guest.
 *
 *	bench-fs-guest [--dir DIR] [--tag TAG] [--files N] [--size MIB]
 *		       [--settle MS] [--keep NAME]
 *
 * On the virtio-fs mount at DIR (/bench; mounted from TAG, kiln0, if the
 * init has not done so) it times, with CLOCK_MONOTONIC, in this order:
 *
 *	create	N empty files: open(O_CREAT | O_EXCL) + close each
 *	stat	stat() each
 *	unlink	unlink() each
 *	write	one file of MIB MiB in 1 MiB write()s, fsync and close counted
 *	read	the same file back in 1 MiB read()s after dropping the page
 *		cache, so that every byte comes through the device
 *
 * Before stat, unlink and read it sleeps MS milliseconds (1500), longer
 * than the 1 s entry and attribute timeouts both servers give, so that each
 * stat and unlink starts with a lookup, the same on either side, and the
 * FORGETs of the cache drop are handled before read starts. N = 0 or
 * MIB = 0 skips those tests.
 *
 * With --keep NAME it then makes the empty file DIR/NAME (mode 0644) and
 * leaves it there, the one file of the run the host can look at
 * afterwards: tools/bench-fs checks that a bind with ownership "mapped"
 * kept the guest's metadata in its xattr, and one with "squash" did not.
 *
 * Output, one line each, for tools/bench-fs to parse:
 *
 *	kiln-bench-fs: mount DIR tag=TAG by=init|self
 *	kiln-bench-fs: begin TEST
 *	kiln-bench-fs: end TEST n=OPS bytes=BYTES ns=NS usr_ns=U sys_ns=S
 *	kiln-bench-fs: info KEY=VALUE		(dropcache=HOW, keep=NAME)
 *	kiln-bench-fs: done
 *
 * n counts the operations (files, or 1 MiB requests), ns is the elapsed
 * time of the test and usr_ns / sys_ns this process's CPU time over it.
 * On failure it prints "kiln-bench-fs: error WHAT: REASON" and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define FUSE_SUPER_MAGIC 0x65735546
#define CHUNK		 (1U << 20) /* one write() or read() */
#define PREFIX		 "kiln-bench-fs: "

struct opts {
	const char *dir;
	const char *tag;
	unsigned int files;
	unsigned int size_mib;
	unsigned int settle_ms;
	const char *keep; /* a file left in dir, or NULL */
};

/* Where a test started: the clock and this process's CPU time. */
struct mark {
	uint64_t t;
	uint64_t usr;
	uint64_t sys;
};

static int fail(const char *what, const char *arg)
{
	printf(PREFIX "error %s%s%s: %s\n", what, arg ? " " : "",
	       arg ? arg : "", strerror(errno));
	fflush(stdout);
	return 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t tv_ns(const struct timeval *tv)
{
	return (uint64_t)tv->tv_sec * 1000000000ULL + tv->tv_usec * 1000ULL;
}

static void begin(const char *test, struct mark *m)
{
	struct rusage ru;

	printf(PREFIX "begin %s\n", test);
	fflush(stdout);
	getrusage(RUSAGE_SELF, &ru);
	m->usr = tv_ns(&ru.ru_utime);
	m->sys = tv_ns(&ru.ru_stime);
	m->t = now_ns();
}

static void end(const char *test, const struct mark *m, unsigned long n,
		unsigned long long bytes)
{
	uint64_t t = now_ns();
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	printf(PREFIX "end %s n=%lu bytes=%llu ns=%llu usr_ns=%llu "
		      "sys_ns=%llu\n",
	       test, n, bytes, (unsigned long long)(t - m->t),
	       (unsigned long long)(tv_ns(&ru.ru_utime) - m->usr),
	       (unsigned long long)(tv_ns(&ru.ru_stime) - m->sys));
	fflush(stdout);
}

static void settle(const struct opts *o)
{
	struct timespec ts = { .tv_sec = o->settle_ms / 1000,
			       .tv_nsec = (o->settle_ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * The init mounts /kiln/mounts before the command runs; an init from
 * before that (or a run without the manifest) leaves it to us.
 */
static int ensure_mount(const struct opts *o)
{
	struct statfs sf;
	const char *by = "init";

	if (statfs(o->dir, &sf) || sf.f_type != FUSE_SUPER_MAGIC) {
		by = "self";
		/* One level, as the init makes it: /bench by default. */
		if (mkdir(o->dir, 0755) && errno != EEXIST)
			return fail("mkdir", o->dir);
		if (mount(o->tag, o->dir, "virtiofs", MS_NOSUID | MS_NODEV,
			  NULL))
			return fail("mount virtiofs", o->tag);
		if (statfs(o->dir, &sf) || sf.f_type != FUSE_SUPER_MAGIC) {
			errno = EINVAL;
			return fail("not virtio-fs after mount:", o->dir);
		}
	}
	printf(PREFIX "mount %s tag=%s by=%s\n", o->dir, o->tag, by);
	return 0;
}

static void name(char *buf, size_t len, const char *dir, unsigned int i)
{
	snprintf(buf, len, "%s/f%06u", dir, i);
}

static int metadata(const struct opts *o)
{
	char dir[4096], path[4200];
	struct mark m;
	struct stat st;
	unsigned int i;
	int fd;

	snprintf(dir, sizeof(dir), "%s/meta", o->dir);
	if (mkdir(dir, 0755))
		return fail("mkdir", dir);

	begin("create", &m);
	for (i = 0; i < o->files; i++) {
		name(path, sizeof(path), dir, i);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return fail("create", path);
		if (close(fd))
			return fail("close", path);
	}
	end("create", &m, o->files, 0);

	settle(o);
	begin("stat", &m);
	for (i = 0; i < o->files; i++) {
		name(path, sizeof(path), dir, i);
		if (stat(path, &st))
			return fail("stat", path);
		if (!S_ISREG(st.st_mode) || st.st_size) {
			errno = EINVAL;
			return fail("stat: not an empty file:", path);
		}
	}
	end("stat", &m, o->files, 0);

	settle(o);
	begin("unlink", &m);
	for (i = 0; i < o->files; i++) {
		name(path, sizeof(path), dir, i);
		if (unlink(path))
			return fail("unlink", path);
	}
	end("unlink", &m, o->files, 0);

	if (rmdir(dir))
		return fail("rmdir", dir);
	return 0;
}

/* Each chunk says which it is at both ends: cheap to check on read. */
static void stamp(uint8_t *buf, uint64_t i)
{
	memcpy(buf, &i, sizeof(i));
	memcpy(buf + CHUNK - sizeof(i), &i, sizeof(i));
}

static bool stamped(const uint8_t *buf, uint64_t i)
{
	return !memcmp(buf, &i, sizeof(i)) &&
	       !memcmp(buf + CHUNK - sizeof(i), &i, sizeof(i));
}

/* Everything written back, then the guest's page cache dropped. */
static const char *drop_cache(const char *path)
{
	int fd;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		bool ok = write(fd, "3\n", 2) == 2;

		close(fd);
		if (ok)
			return "drop_caches";
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)) {
		close(fd);
		return NULL;
	}
	close(fd);
	return "fadvise";
}

static int data(const struct opts *o)
{
	unsigned long long total = 0,
			   want = (unsigned long long)o->size_mib * CHUNK;
	char path[4200];
	const char *how;
	struct mark m;
	uint8_t *buf;
	unsigned int i;
	ssize_t n;
	int fd;

	buf = aligned_alloc(4096, CHUNK);
	if (!buf)
		return fail("malloc", NULL);
	memset(buf, 0x5a, CHUNK);
	snprintf(path, sizeof(path), "%s/data.bin", o->dir);

	begin("write", &m);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail("create", path);
	for (i = 0; i < o->size_mib; i++) {
		size_t done = 0;

		stamp(buf, i);
		while (done < CHUNK) {
			n = write(fd, buf + done, CHUNK - done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return fail("write", path);
			done += n;
		}
	}
	if (fsync(fd))
		return fail("fsync", path);
	if (close(fd))
		return fail("close", path);
	end("write", &m, o->size_mib, want);

	how = drop_cache(path);
	if (!how)
		return fail("dropping the page cache of", path);
	printf(PREFIX "info dropcache=%s\n", how);
	settle(o);

	begin("read", &m);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open", path);
	for (i = 0;; i++) {
		size_t got = 0;

		while (got < CHUNK) {
			n = read(fd, buf + got, CHUNK - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return fail("read", path);
			if (!n)
				break;
			got += n;
		}
		total += got;
		if (!got)
			break;
		if (got != CHUNK || !stamped(buf, i)) {
			errno = EIO;
			return fail("read: wrong data in", path);
		}
	}
	if (close(fd))
		return fail("close", path);
	end("read", &m, i, total);
	if (total != want) {
		errno = EIO;
		return fail("read: short file", path);
	}

	if (unlink(path))
		return fail("unlink", path);
	free(buf);
	return 0;
}

/* The file the host checks afterwards; no test times it. */
static int keep(const struct opts *o)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", o->dir, o->keep);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail("create", path);
	if (close(fd))
		return fail("close", path);
	printf(PREFIX "info keep=%s\n", o->keep);
	return 0;
}

static bool number(const char *s, unsigned int max, unsigned int *out)
{
	char *e;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &e, 10);
	if (errno || e == s || *e || v > max)
		return false;
	*out = v;
	return true;
}

/* A name in DIR, not a path: no slash, not empty. */
static bool one_name(const char *s, const char **out)
{
	if (!*s || strchr(s, '/'))
		return false;
	*out = s;
	return true;
}

static int usage(void)
{
	fprintf(stderr, "usage: bench-fs-guest [--dir DIR] [--tag TAG] "
			"[--files N] [--size MIB] [--settle MS] "
			"[--keep NAME]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct opts o = { .dir = "/bench",
			  .tag = "kiln0",
			  .files = 10000,
			  .size_mib = 256,
			  .settle_ms = 1500 };
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool ok = v != NULL;

		if (!strcmp(a, "--dir") && ok)
			o.dir = v;
		else if (!strcmp(a, "--tag") && ok)
			o.tag = v;
		else if (!strcmp(a, "--files") && ok)
			ok = number(v, 10000000, &o.files);
		else if (!strcmp(a, "--size") && ok)
			ok = number(v, 1 << 20, &o.size_mib);
		else if (!strcmp(a, "--settle") && ok)
			ok = number(v, 600000, &o.settle_ms);
		else if (!strcmp(a, "--keep") && ok)
			ok = one_name(v, &o.keep);
		else
			ok = false;
		if (!ok)
			return usage();
		i++;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (ensure_mount(&o))
		return 1;
	if (o.files && metadata(&o))
		return 1;
	if (o.size_mib && data(&o))
		return 1;
	if (o.keep && keep(&o))
		return 1;
	printf(PREFIX "done\n");
	return 0;
}
