// SPDX-License-Identifier: GPL-2.0
/*
 * The bind backend of virtio-fs (devices/fs/passthrough.c), its ops called
 * directly as the FUSE server would, on a fresh directory under /tmp:
 *
 *	TOP/src       the bind's source: file, dir/inner
 *	TOP/outside   what must stay out of reach: secret
 *	TOP/storage   mask storage, when a test uses masks
 *
 * The test plays both the guest (through the ops) and hostile host
 * processes (renaming directories out of the tree, swapping symlinks in).
 * Where a test says the source must come out unchanged, it compares a
 * snapshot of the whole tree (names, types, modes, sizes, mtimes,
 * contents, link targets) before and after.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/openat2.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/inotify.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "lib/compiler.h"
#include "devices/fs/passthrough.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define ROOT	     FUSE_ROOT_ID
#define NR_BIG	     2000 /* entries of the big readdir */
#define DIRBUF_SMALL 512  /* a readdir buffer that holds a few entries */
#define MAX_DENTS    (NR_BIG + 16)
#define SNAP_MAX     (1 << 20)
#define OTHER_UID    1234
#define OTHER_GID    5678
#define DROP_ID	     4242 /* the unprivileged vmm of the ownership test */

static const struct fs_ctx ctx = { .uid = 0, .gid = 0, .pid = 1 };

/*
 * For valgrind only: 3.19 (Debian 12) knows neither openat2 nor fchmodat2
 * and fails both with ENOSYS. This syscall() of the test binary stands in
 * for the C library's (the backend calls these two through it); when the
 * real call answers ENOSYS it plays openat2 by openat(2) with the same
 * flags. The backend only ever resolves one component (or "." and ".."),
 * and with O_NOFOLLOW openat(2) resolves a single component exactly as
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS does, so the escape tests keep
 * their meaning. fchmodat2 stays ENOSYS: the backend's older-kernel path
 * runs. On a real kernel the real calls answer and nothing is played.
 */
long syscall(long nr, ...)
{
	static long (*real)(long, ...);
	const struct open_how *how;
	long a[6], ret;
	va_list ap;
	int i;

	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	if (!real)
		abort();
	va_start(ap, nr);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	ret = real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (ret >= 0 || errno != ENOSYS || nr != SYS_openat2)
		return ret;
	how = (const struct open_how *)a[2];
	return openat((int)a[0], (const char *)a[1], (int)how->flags,
		      (mode_t)how->mode);
}

FIXTURE(bind)
{
	char top[64];
	char src[96];
	char out[96];
	char sto[96];
	struct fs_backend *b;
	enum fs_ownership own; /* of the binds bind_new() makes */
};

/* ---- host-side helpers ---------------------------------------------- */

static int put(const char *dir, const char *rel, const char *content)
{
	char path[512];
	ssize_t len = (ssize_t)strlen(content);
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, content, (size_t)len) != len) {
		close(fd);
		return -EIO;
	}
	close(fd);
	return 0;
}

/* The file's content (NUL-terminated in buf), or "" if it cannot be read. */
static const char *get(const char *dir, const char *rel, char *buf, size_t size)
{
	char path[512];
	ssize_t n;
	int fd;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return buf;
	n = read(fd, buf, size - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	return buf;
}

static bool exists(const char *dir, const char *rel)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return lstat(path, &st) == 0;
}

static int host_mkdir(const char *dir, const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return mkdir(path, 0755) ? -errno : 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	return remove(path) ? 0 : 0; /* best effort */
}

static void rm_rf(const char *path)
{
	nftw(path, rm_one, 64, FTW_DEPTH | FTW_PHYS);
}

/* Snapshot: one sorted line per entry beneath root. */
struct snap {
	char **lines;
	size_t n, cap;
};

static void snap_add(struct snap *s, const char *line)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->lines = realloc(s->lines, s->cap * sizeof(*s->lines));
		if (!s->lines)
			abort();
	}
	s->lines[s->n] = strdup(line);
	if (!s->lines[s->n++])
		abort();
}

static void snap_walk(struct snap *s, const char *root, const char *rel)
{
	char path[1024], line[2048], data[256], sub[1024];
	struct dirent *d;
	struct stat st;
	ssize_t n;
	DIR *dir;
	int fd;

	snprintf(path, sizeof(path), "%s%s", root, rel);
	if (lstat(path, &st))
		abort();
	data[0] = '\0';
	if (S_ISLNK(st.st_mode)) {
		n = readlink(path, data, sizeof(data) - 1);
		data[n > 0 ? n : 0] = '\0';
	} else if (S_ISREG(st.st_mode)) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd < 0 ? 0 : read(fd, data, sizeof(data) - 1);
		data[n > 0 ? n : 0] = '\0';
		if (fd >= 0)
			close(fd);
	}
	snprintf(line, sizeof(line), "%s %o %u:%u %lld %lld.%09ld %s",
		 rel[0] ? rel : "/", st.st_mode, st.st_uid, st.st_gid,
		 (long long)st.st_size, (long long)st.st_mtim.tv_sec,
		 st.st_mtim.tv_nsec, data);
	snap_add(s, line);
	if (!S_ISDIR(st.st_mode))
		return;
	dir = opendir(path);
	if (!dir)
		abort();
	while ((d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", rel, d->d_name);
		snap_walk(s, root, sub);
	}
	closedir(dir);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The whole tree as one string (malloc'ed). */
static char *snapshot(const char *root)
{
	struct snap s = { 0 };
	size_t i, len = 1;
	char *out;

	snap_walk(&s, root, "");
	qsort(s.lines, s.n, sizeof(*s.lines), cmp_str);
	for (i = 0; i < s.n; i++)
		len += strlen(s.lines[i]) + 1;
	out = malloc(len);
	if (!out)
		abort();
	out[0] = '\0';
	for (i = 0; i < s.n; i++) {
		strcat(out, s.lines[i]);
		strcat(out, "\n");
		free(s.lines[i]);
	}
	free(s.lines);
	return out;
}

/* The tree at root is still what snapshot() saw as before (freed). */
static void expect_same_tree(struct __test_metadata *_metadata, char *before,
			     const char *root)
{
	char *after = snapshot(root);

	EXPECT_STREQ(before, after);
	free(after);
	free(before);
}

/* ---- backend helpers ------------------------------------------------ */

/*
 * KILN_TEST_BIND_MAX_FDS=N runs every case with a descriptor budget of N,
 * so that node descriptors are closed and opened again all the time: a
 * knob for a run by hand (with 8, and again under `setpriv --bounding-set
 * -dac_read_search` for reopening by name, every case passes);
 * fs_bind_lru.c is what covers that in every run.
 */
static unsigned int bind_max_fds(void)
{
	const char *v = getenv("KILN_TEST_BIND_MAX_FDS");

	return v ? (unsigned int)strtoul(v, NULL, 10) : 0;
}

static int bind_new(FIXTURE_DATA(bind) * self, bool ro,
		    const char *const *masks, unsigned int nr, bool storage)
{
	struct fs_bind_params p = {
		.name = "bind:/test",
		.source = self->src,
		.read_only = ro,
		.mask_paths = masks,
		.nr_mask_paths = nr,
		.mask_storage = storage ? self->sto : NULL,
		.ownership = self->own,
		.max_fds = bind_max_fds(),
	};

	fs_backend__destroy(self->b);
	self->b = NULL;
	return passthrough__create(&self->b, &p);
}

static int lookup(struct fs_backend *b, uint64_t parent, const char *name,
		  uint64_t *id)
{
	struct fs_entry e;
	int ret = b->ops->lookup(b, parent, name, &e);

	if (id)
		*id = ret ? 0 : e.nodeid;
	return ret;
}

static int do_mkdir(struct fs_backend *b, uint64_t parent, const char *name,
		    uint64_t *id)
{
	struct fs_entry e;
	int ret = b->ops->mkdir(b, &ctx, parent, name, 0755, 022, &e);

	if (id)
		*id = ret ? 0 : e.nodeid;
	return ret;
}

static int do_create(struct fs_backend *b, uint64_t parent, const char *name,
		     uint32_t flags, uint64_t *id, uint64_t *fh)
{
	struct fs_entry e;
	uint32_t of;
	uint64_t h;
	int ret = b->ops->create(b, &ctx, parent, name, S_IFREG | 0644, flags,
				 022, &e, &h, &of);

	if (id)
		*id = ret ? 0 : e.nodeid;
	if (!ret && fh)
		*fh = h;
	else if (!ret)
		b->ops->release(b, e.nodeid, h);
	return ret;
}

static int do_symlink(struct fs_backend *b, uint64_t parent, const char *name,
		      const char *target, uint64_t *id)
{
	struct fs_entry e;
	int ret = b->ops->symlink(b, &ctx, parent, name, target, &e);

	if (id)
		*id = ret ? 0 : e.nodeid;
	return ret;
}

static ssize_t bwrite(struct fs_backend *b, uint64_t id, uint64_t fh,
		      const char *s, uint64_t off)
{
	struct iovec iov = { .iov_base = (void *)s, .iov_len = strlen(s) };

	return b->ops->write(b, id, fh, &iov, 1, off);
}

static ssize_t bread(struct fs_backend *b, uint64_t id, uint64_t fh, char *buf,
		     size_t size, uint64_t off)
{
	struct iovec iov = { .iov_base = buf, .iov_len = size - 1 };
	ssize_t n = b->ops->read(b, id, fh, &iov, 1, off);

	buf[n > 0 ? n : 0] = '\0';
	return n;
}

/* The file's content through the backend: open, read, release. */
static const char *bcat(struct fs_backend *b, uint64_t id, char *buf,
			size_t size)
{
	uint32_t of;
	uint64_t fh;

	buf[0] = '\0';
	if (b->ops->open(b, id, O_RDONLY, &fh, &of))
		return buf;
	bread(b, id, fh, buf, size, 0);
	b->ops->release(b, id, fh);
	return buf;
}

static int battr(struct fs_backend *b, uint64_t id, struct fuse_attr *a)
{
	return b->ops->getattr(b, id, a);
}

struct dent {
	uint64_t ino, off;
	uint32_t type;
	char name[FS_NAME_MAX + 1];
};

/* One readdir call into a buffer of size bytes: entries parsed, or -errno. */
static int readdir_once(struct fs_backend *b, uint64_t id, uint64_t fh,
			uint64_t off, size_t size, struct dent *out, int max)
{
	uint8_t *buf = malloc(size);
	struct fs_dirbuf d = { .buf = buf, .size = size };
	struct fuse_dirent de;
	size_t pos = 0;
	int ret, n = 0;

	if (!buf)
		return -ENOMEM;
	ret = b->ops->readdir(b, id, fh, off, &d);
	while (!ret && pos + FUSE_NAME_OFFSET <= d.used && n < max) {
		memcpy(&de, buf + pos, FUSE_NAME_OFFSET);
		out[n].ino = de.ino;
		out[n].off = de.off;
		out[n].type = de.type;
		memcpy(out[n].name, buf + pos + FUSE_NAME_OFFSET, de.namelen);
		out[n].name[de.namelen] = '\0';
		n++;
		pos += FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + de.namelen);
	}
	free(buf);
	return ret ? ret : n;
}

/* The whole directory, resumed from each call's last offset. */
static int list_dir(struct fs_backend *b, uint64_t id, size_t size,
		    struct dent *out, int max)
{
	uint64_t fh, off = 0;
	int n = 0, got, ret;

	ret = b->ops->opendir(b, id, &fh);
	if (ret)
		return ret;
	do {
		got = readdir_once(b, id, fh, off, size, out + n, max - n);
		if (got > 0) {
			n += got;
			off = out[n - 1].off;
		}
	} while (got > 0 && n < max);
	b->ops->releasedir(b, id, fh);
	return got < 0 ? got : n;
}

static bool listed(const struct dent *d, int n, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(d[i].name, name))
			return true;
	return false;
}

/* ---- the fixture ---------------------------------------------------- */

/*
 * Whether files in dir can hold user.* xattrs (the mapped ownership
 * keeps the guest's metadata in one): 1, 0, or -errno for a directory
 * we cannot use at all.
 */
static int holds_user_xattrs(const char *dir)
{
	char path[128];
	int fd, ret;

	snprintf(path, sizeof(path), "%s/kiln-xattr-probe-XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	ret = fsetxattr(fd, "user.kiln.probe", "1", 1, 0) ? -errno : 1;
	if (ret == -EOPNOTSUPP)
		ret = 0;
	close(fd);
	unlink(path);
	return ret;
}

/*
 * The tests' top directory: /tmp if its file system holds user xattrs,
 * else /var/tmp, else the working directory (the build tree). None: the
 * mapped tests fail, saying why (never a silent skip).
 */
static const char *top_parent(void)
{
	static const char *const dirs[] = { "/tmp", "/var/tmp", "." };
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(dirs); i++)
		if (holds_user_xattrs(dirs[i]) == 1)
			return dirs[i];
	return NULL;
}

FIXTURE_SETUP(bind)
{
	const char *parent = top_parent();
	char cwd[41];

	if (!parent)
		parent = "/tmp"; /* the mapped tests say it is not enough */
	if (!strcmp(parent, ".")) {
		ASSERT_NE(NULL, getcwd(cwd, sizeof(cwd)))
		TH_LOG("the working directory's path is too long");
		parent = cwd;
	}
	snprintf(self->top, sizeof(self->top), "%.40s/kiln-bind-XXXXXX",
		 parent);
	ASSERT_NE(NULL, mkdtemp(self->top));
	snprintf(self->src, sizeof(self->src), "%s/src", self->top);
	snprintf(self->out, sizeof(self->out), "%s/outside", self->top);
	snprintf(self->sto, sizeof(self->sto), "%s/storage", self->top);
	ASSERT_EQ(0, mkdir(self->src, 0755));
	ASSERT_EQ(0, mkdir(self->out, 0755));
	ASSERT_EQ(0, mkdir(self->sto, 0755));
	ASSERT_EQ(0, put(self->src, "file", "hello\n"));
	ASSERT_EQ(0, host_mkdir(self->src, "dir"));
	ASSERT_EQ(0, put(self->src, "dir/inner", "inner\n"));
	ASSERT_EQ(0, put(self->out, "secret", "SECRET\n"));
	/* The tests before "ownership" check squash, the historic mode. */
	self->own = FS_OWNERSHIP_SQUASH;
	ASSERT_EQ(0, bind_new(self, false, NULL, 0, false));
}

FIXTURE_TEARDOWN(bind)
{
	fs_backend__destroy(self->b);
	rm_rf(self->top);
}

/* ---- create --------------------------------------------------------- */

/* create() with p, expecting err and a log line naming want. */
static void expect_refused(struct __test_metadata *_metadata,
			   const struct fs_bind_params *p, int err,
			   const char *want)
{
	struct stderr_capture cap = { .saved = -1 };
	struct fs_backend *b = (void *)1;
	char log[4096];

	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(err, passthrough__create(&b, p));
	EXPECT_LE(1, stderr_capture__end(&cap, log, sizeof(log)));
	EXPECT_EQ(NULL, b);
	EXPECT_NE(NULL, strstr(log, want)) TH_LOG("log: %s", log);
}

TEST_F(bind, create_validates)
{
	const char *rel[] = { "relative" }, *root[] = { "/" },
		   *trail[] = { "/a/" }, *dbl[] = { "/a//b" },
		   *dot[] = { "/a/./b" }, *ddot[] = { "/a/../b" },
		   *dup[] = { "/x", "/y", "/x" }, *ok[] = { "/x" };
	char file[160], inside[160], missing[160];
	struct fs_bind_params p = { .source = self->src };

	snprintf(file, sizeof(file), "%s/file", self->src);
	snprintf(inside, sizeof(inside), "%s/dir", self->src);
	snprintf(missing, sizeof(missing), "%s/nope", self->top);

	p.source = missing;
	expect_refused(_metadata, &p, -ENOENT, missing);
	p.source = file;
	expect_refused(_metadata, &p, -ENOTDIR, "not a directory");
	p.source = "src";
	expect_refused(_metadata, &p, -EINVAL, "absolute");
	p.source = NULL;
	expect_refused(_metadata, &p, -EINVAL, "source");
	p.source = self->src;

	p.read_only = true;
	p.nr_mask_paths = 1;
	p.mask_paths = rel;
	expect_refused(_metadata, &p, -EINVAL, "not absolute");
	p.mask_paths = root;
	expect_refused(_metadata, &p, -EINVAL, "whole bind");
	p.mask_paths = trail;
	expect_refused(_metadata, &p, -EINVAL, "normalised");
	p.mask_paths = dbl;
	expect_refused(_metadata, &p, -EINVAL, "normalised");
	p.mask_paths = dot;
	expect_refused(_metadata, &p, -EINVAL, "\"..\" component");
	p.mask_paths = ddot;
	expect_refused(_metadata, &p, -EINVAL, "\"..\" component");
	p.mask_paths = dup;
	p.nr_mask_paths = 3;
	expect_refused(_metadata, &p, -EINVAL, "twice");
	p.mask_paths = NULL;
	expect_refused(_metadata, &p, -EINVAL, "no list");

	/* Storage: iff rw with masks, a directory, apart from source. */
	p.mask_paths = ok;
	p.nr_mask_paths = 1;
	p.mask_storage = self->sto;
	expect_refused(_metadata, &p, -EINVAL, "read-only");
	p.read_only = false;
	p.mask_storage = NULL;
	expect_refused(_metadata, &p, -EINVAL, "need a mask storage");
	p.mask_storage = missing;
	expect_refused(_metadata, &p, -ENOENT, missing);
	p.mask_storage = file;
	expect_refused(_metadata, &p, -ENOTDIR, "not a directory");
	p.mask_storage = inside;
	expect_refused(_metadata, &p, -EINVAL, "contain one another");
	p.mask_storage = self->src;
	expect_refused(_metadata, &p, -EINVAL, "contain one another");
	p.mask_storage = self->top; /* holds source */
	expect_refused(_metadata, &p, -EINVAL, "contain one another");
	p.nr_mask_paths = 0;
	p.mask_storage = self->sto;
	expect_refused(_metadata, &p, -EINVAL, "no mask paths");

	/* And what is right is taken, with read_only and name set. */
	p.nr_mask_paths = 1;
	fs_backend__destroy(self->b);
	self->b = NULL;
	ASSERT_EQ(0, passthrough__create(&self->b, &p));
	EXPECT_FALSE(self->b->read_only);
	EXPECT_NE(NULL, strstr(self->b->name, self->src));
	ASSERT_EQ(0, bind_new(self, true, ok, 1, false));
	EXPECT_TRUE(self->b->read_only);
	EXPECT_STREQ("bind:/test", self->b->name);
}

/* ---- names and attributes ------------------------------------------- */

TEST_F(bind, lookup_and_getattr)
{
	struct fs_backend *b = self->b;
	uint64_t file, dir, inner, again;
	struct fuse_attr a;
	struct fs_entry e;
	struct stat st;
	char path[160];

	ASSERT_EQ(0, b->ops->lookup(b, ROOT, "file", &e));
	file = e.nodeid;
	EXPECT_NE(ROOT, file);
	EXPECT_EQ(0, e.generation);
	snprintf(path, sizeof(path), "%s/file", self->src);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(6, e.attr.size);
	EXPECT_EQ(st.st_ino, e.attr.ino);
	EXPECT_EQ(S_IFREG | 0644, e.attr.mode);
	EXPECT_EQ(1, e.attr.nlink);
	EXPECT_EQ(st.st_mtim.tv_sec, (time_t)e.attr.mtime);
	EXPECT_EQ(st.st_mtim.tv_nsec, (long)e.attr.mtimensec);

	/* One node per inode: a second lookup is the same id. */
	ASSERT_EQ(0, lookup(b, ROOT, "file", &again));
	EXPECT_EQ(file, again);
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, lookup(b, dir, "inner", &inner));
	ASSERT_EQ(0, battr(b, inner, &a));
	EXPECT_EQ(6, a.size);
	ASSERT_EQ(0, battr(b, ROOT, &a));
	EXPECT_TRUE(S_ISDIR(a.mode));

	EXPECT_EQ(-ENOENT, lookup(b, ROOT, "missing", NULL));
	EXPECT_EQ(-ENOTDIR, lookup(b, file, "x", NULL));
	EXPECT_EQ(-ESTALE, lookup(b, 999999, "file", NULL));
	EXPECT_EQ(-ESTALE, lookup(b, 0, "file", NULL));
	EXPECT_EQ(-ESTALE, battr(b, 999999, &a));
	EXPECT_EQ(-ESTALE, battr(b, 0, &a));
}

/*
 * A new FUSE session (backend.h, end_session): every node the old one
 * looked up is forgotten (its id answers ESTALE; deep ones go with their
 * parents), every handle is closed (EBADF), the root stays, and the host
 * directory is as it was: the next session looks everything up anew.
 */
TEST_F(bind, end_session_forgets_nodes_and_closes_handles)
{
	struct fs_backend *b;
	struct fuse_attr a;
	uint64_t d, f, f2, fh;
	char buf[32];

	ASSERT_EQ(0, bind_new(self, false, NULL, 0, false));
	b = self->b;
	ASSERT_EQ(0, do_mkdir(b, FUSE_ROOT_ID, "d", &d));
	ASSERT_EQ(0, do_create(b, d, "f", O_RDWR, &f, &fh));
	ASSERT_EQ(2, bwrite(b, f, fh, "hi", 0));
	b->ops->end_session(b);
	EXPECT_EQ(-ESTALE, battr(b, f, &a));
	EXPECT_EQ(-ESTALE, battr(b, d, &a));
	EXPECT_NE(0, b->ops->release(b, f, fh));
	EXPECT_EQ(0, battr(b, FUSE_ROOT_ID, &a));
	EXPECT_STREQ("hi", get(self->src, "d/f", buf, sizeof(buf)));
	ASSERT_EQ(0, lookup(b, FUSE_ROOT_ID, "d", &d));
	ASSERT_EQ(0, lookup(b, d, "f", &f2));
	EXPECT_EQ(0, battr(b, f2, &a));
	EXPECT_EQ(2U, a.size);
}

TEST_F(bind, forget_and_node_lifetime)
{
	struct fs_backend *b = self->b;
	uint64_t dir, inner, file;
	struct fuse_attr a;

	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, lookup(b, ROOT, "file", NULL));
	b->ops->forget(b, file, 1);
	EXPECT_EQ(0, battr(b, file, &a));
	b->ops->forget(b, file, 1);
	EXPECT_EQ(-ESTALE, battr(b, file, &a));

	/* A child keeps its directory's node, forgotten or not. */
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, lookup(b, dir, "inner", &inner));
	b->ops->forget(b, dir, 1);
	EXPECT_EQ(0, battr(b, dir, &a));
	EXPECT_EQ(0, lookup(b, dir, "inner", NULL));
	b->ops->forget(b, inner, UINT64_MAX); /* more than counted */
	EXPECT_EQ(-ESTALE, battr(b, inner, &a));
	EXPECT_EQ(-ESTALE, battr(b, dir, &a));

	/* Hostile forgets: unknown ids, the root. */
	b->ops->forget(b, 0, 1);
	b->ops->forget(b, 123456789, 5);
	b->ops->forget(b, ROOT, UINT64_MAX);
	EXPECT_EQ(0, battr(b, ROOT, &a));
	EXPECT_EQ(0, lookup(b, ROOT, "file", NULL));
}

/* Every op that takes a name refuses what is not one component. */
TEST_F(bind, names_refused)
{
	static const char *const bad[] = { ".", "..", "a/b",
					   "",	"/",  "../../etc" };
	struct fs_backend *b = self->b;
	char longname[FS_NAME_MAX + 2];
	struct fs_entry e;
	uint64_t file, fh;
	uint32_t of;
	char *before;
	size_t i;

	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	before = snapshot(self->top);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		const char *n = bad[i];

		EXPECT_GT(0, b->ops->lookup(b, ROOT, n, &e)) TH_LOG("%s", n);
		EXPECT_GT(0, b->ops->mkdir(b, &ctx, ROOT, n, 0755, 0, &e));
		EXPECT_GT(0, b->ops->mknod(b, &ctx, ROOT, n, S_IFREG | 0644, 0,
					   0, &e));
		EXPECT_GT(0, b->ops->symlink(b, &ctx, ROOT, n, "x", &e));
		EXPECT_GT(0, b->ops->create(b, &ctx, ROOT, n, S_IFREG | 0644,
					    O_RDWR, 0, &e, &fh, &of));
		EXPECT_GT(0, b->ops->unlink(b, ROOT, n));
		EXPECT_GT(0, b->ops->rmdir(b, ROOT, n));
		EXPECT_GT(0, b->ops->rename(b, ROOT, n, ROOT, "new", 0));
		EXPECT_GT(0, b->ops->rename(b, ROOT, "file", ROOT, n, 0));
		EXPECT_GT(0, b->ops->link(b, file, ROOT, n, &e));
	}
	EXPECT_EQ(-EINVAL, lookup(b, ROOT, "..", NULL));
	EXPECT_EQ(-EINVAL, lookup(b, ROOT, ".", NULL));
	EXPECT_EQ(-EINVAL, lookup(b, ROOT, "dir/inner", NULL));
	EXPECT_EQ(-EINVAL, b->ops->lookup(b, ROOT, NULL, &e));
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	EXPECT_EQ(-ENAMETOOLONG, lookup(b, ROOT, longname, NULL));
	longname[FS_NAME_MAX] = '\0';
	EXPECT_EQ(-ENOENT, lookup(b, ROOT, longname, NULL));
	expect_same_tree(_metadata, before, self->top);
}

/* ---- making and removing -------------------------------------------- */

TEST_F(bind, mkdir_mknod_symlink_unlink_rmdir)
{
	struct fs_backend *b = self->b;
	uint64_t d, f, l, file;
	struct fs_entry e;
	char buf[64], path[160];
	struct stat st;
	ssize_t n;

	/* The vmm's own umask must not eat the guest's bits. */
	umask(077);
	ASSERT_EQ(0, do_mkdir(b, ROOT, "new", &d));
	snprintf(path, sizeof(path), "%s/new", self->src);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(S_IFDIR | 0755, st.st_mode);
	EXPECT_EQ(-EEXIST, do_mkdir(b, ROOT, "new", NULL));
	EXPECT_EQ(-EEXIST, do_mkdir(b, ROOT, "file", NULL));
	EXPECT_EQ(-ESTALE, do_mkdir(b, 999999, "x", NULL));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	EXPECT_EQ(-ENOTDIR, do_mkdir(b, file, "x", NULL));

	ASSERT_EQ(0, b->ops->mknod(b, &ctx, d, "fifo", S_IFIFO | 0666, 0, 022,
				   &e));
	EXPECT_EQ(S_IFIFO | 0644, e.attr.mode);
	ASSERT_EQ(0,
		  b->ops->mknod(b, &ctx, d, "reg", S_IFREG | 0600, 0, 0, &e));
	f = e.nodeid;
	EXPECT_EQ(S_IFREG | 0600, e.attr.mode);
	EXPECT_EQ(0, e.attr.size);
	/* Set-user-ID never lands on the host. */
	ASSERT_EQ(0,
		  b->ops->mknod(b, &ctx, d, "suid", S_IFREG | 04755, 0, 0, &e));
	EXPECT_EQ(S_IFREG | 0755, e.attr.mode);
	/* Device nodes are the host's devices: refused. */
	EXPECT_EQ(-EPERM, b->ops->mknod(b, &ctx, d, "mem", S_IFCHR | 0666,
					0x0101, 0, &e));
	EXPECT_EQ(-EPERM, b->ops->mknod(b, &ctx, d, "blk", S_IFBLK | 0666,
					0x0800, 0, &e));
	EXPECT_FALSE(exists(self->src, "new/mem"));
	EXPECT_EQ(-EEXIST,
		  b->ops->mknod(b, &ctx, d, "reg", S_IFREG | 0600, 0, 0, &e));

	ASSERT_EQ(0, do_symlink(b, d, "link", "../file", &l));
	ASSERT_EQ(0, battr(b, l, &e.attr));
	EXPECT_TRUE(S_ISLNK(e.attr.mode));
	n = b->ops->readlink(b, l, buf, sizeof(buf));
	ASSERT_EQ(7, n);
	EXPECT_EQ(0, memcmp(buf, "../file", 7));
	EXPECT_EQ(-EINVAL, b->ops->readlink(b, f, buf, sizeof(buf)));
	EXPECT_EQ(-EEXIST, do_symlink(b, d, "link", "x", NULL));
	EXPECT_EQ(-ENOENT, do_symlink(b, d, "empty", "", NULL));

	EXPECT_EQ(-ENOTEMPTY, b->ops->rmdir(b, ROOT, "new"));
	EXPECT_EQ(-ENOTDIR, b->ops->rmdir(b, d, "reg"));
	EXPECT_EQ(-EISDIR, b->ops->unlink(b, ROOT, "new"));
	EXPECT_EQ(-ENOENT, b->ops->unlink(b, d, "nope"));
	EXPECT_EQ(-ENOENT, b->ops->rmdir(b, d, "nope"));
	EXPECT_EQ(0, b->ops->unlink(b, d, "reg"));
	EXPECT_EQ(0, b->ops->unlink(b, d, "suid"));
	EXPECT_EQ(0, b->ops->unlink(b, d, "fifo"));
	EXPECT_EQ(0, b->ops->unlink(b, d, "link"));
	EXPECT_EQ(-ENOENT, lookup(b, d, "reg", NULL));
	/* The forgotten-later node of an unlinked file still answers. */
	EXPECT_EQ(0, battr(b, f, &e.attr));
	EXPECT_EQ(0, e.attr.nlink);
	EXPECT_EQ(0, b->ops->rmdir(b, ROOT, "new"));
	EXPECT_FALSE(exists(self->src, "new"));
}

TEST_F(bind, create_open_read_write)
{
	struct fs_backend *b = self->b;
	uint64_t id, fh, fh2, dir, file;
	struct fuse_attr a;
	struct fs_entry e;
	char buf[128];
	uint32_t of;
	int fd;

	umask(077);
	ASSERT_EQ(0, b->ops->create(b, &ctx, ROOT, "c", S_IFREG | 0666, O_RDWR,
				    022, &e, &fh, &of));
	id = e.nodeid;
	EXPECT_EQ(S_IFREG | 0644, e.attr.mode);
	EXPECT_EQ(6, bwrite(b, id, fh, "abcdef", 0));
	EXPECT_EQ(3, bread(b, id, fh, buf, 4, 1));
	EXPECT_STREQ("bcd", buf);
	/* io_fd: a real descriptor of the same file, for io_uring. */
	fd = b->ops->io_fd(b, id, fh, true);
	ASSERT_LE(0, fd);
	/* Opened without O_NONBLOCK: io_uring would answer -EAGAIN. */
	EXPECT_EQ(O_RDWR, fcntl(fd, F_GETFL) & (O_ACCMODE | O_NONBLOCK));
	EXPECT_EQ(2, pwrite(fd, "XY", 2, 6));
	EXPECT_EQ(fd, b->ops->io_fd(b, id, fh, false));
	EXPECT_STREQ("abcdefXY", get(self->src, "c", buf, sizeof(buf)));
	EXPECT_EQ(-EBADF, b->ops->io_fd(b, id, fh + 100, false));
	EXPECT_EQ(-EBADF, b->ops->io_fd(b, ROOT, fh, false));
	EXPECT_EQ(0, b->ops->flush(b, id, fh));
	EXPECT_EQ(0, b->ops->release(b, id, fh));
	EXPECT_EQ(-EBADF, b->ops->release(b, id, fh));
	EXPECT_EQ(-EBADF, b->ops->io_fd(b, id, fh, false));

	/* O_EXCL: an existing name; without: opened as open(2) would. */
	EXPECT_EQ(-EEXIST, b->ops->create(b, &ctx, ROOT, "c", S_IFREG | 0644,
					  O_RDWR | O_EXCL, 0, &e, &fh, &of));
	ASSERT_EQ(0, b->ops->create(b, &ctx, ROOT, "c", S_IFREG | 0600,
				    O_WRONLY | O_TRUNC, 0, &e, &fh, &of));
	EXPECT_EQ(id, e.nodeid);
	EXPECT_EQ(0, e.attr.size);
	EXPECT_EQ(S_IFREG | 0644, e.attr.mode); /* existing: mode kept */
	EXPECT_EQ(-EBADF, b->ops->io_fd(b, id, fh, false)); /* write-only */
	EXPECT_EQ(0, b->ops->release(b, id, fh));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	EXPECT_EQ(-EISDIR, b->ops->create(b, &ctx, ROOT, "dir", S_IFREG | 0644,
					  O_RDONLY, 0, &e, &fh, &of));
	EXPECT_EQ(-ENOTDIR, do_create(b, id, "x", O_RDWR, NULL, NULL));

	/* open: read-only, O_APPEND, O_TRUNC */
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, b->ops->open(b, file, O_RDONLY, &fh, &of));
	EXPECT_EQ(6, bread(b, file, fh, buf, sizeof(buf), 0));
	EXPECT_STREQ("hello\n", buf);
	EXPECT_EQ(-EBADF, bwrite(b, file, fh, "no", 0));
	EXPECT_EQ(-EBADF, b->ops->io_fd(b, file, fh, true));
	ASSERT_EQ(0, b->ops->open(b, file, O_WRONLY | O_APPEND, &fh2, &of));
	EXPECT_EQ(3, bwrite(b, file, fh2, "end", 0)); /* offset ignored */
	fd = b->ops->io_fd(b, file, fh2, true);
	ASSERT_LE(0, fd);
	EXPECT_EQ(O_WRONLY | O_APPEND,
		  fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
	EXPECT_EQ(1, pwrite(fd, "!", 1, 0));
	EXPECT_STREQ("hello\nend!", get(self->src, "file", buf, sizeof(buf)));
	EXPECT_EQ(0, b->ops->release(b, file, fh2));
	EXPECT_EQ(10, bread(b, file, fh, buf, sizeof(buf), 0));
	EXPECT_EQ(0, b->ops->release(b, file, fh));
	ASSERT_EQ(0, b->ops->open(b, file, O_RDWR | O_TRUNC, &fh, &of));
	EXPECT_EQ(0, battr(b, file, &a));
	EXPECT_EQ(0, a.size);
	EXPECT_EQ(0, b->ops->release(b, file, fh));
	EXPECT_EQ(-EISDIR, b->ops->open(b, dir, O_RDONLY, &fh, &of));
	EXPECT_EQ(-EINVAL, b->ops->open(b, file, O_ACCMODE, &fh, &of));
	EXPECT_EQ(-ESTALE, b->ops->open(b, 424242, O_RDONLY, &fh, &of));

	/* A file removed on the host: its node can no longer be opened. */
	snprintf(buf, sizeof(buf), "%s/c", self->src);
	ASSERT_EQ(0, unlink(buf));
	EXPECT_EQ(-ESTALE, b->ops->open(b, id, O_RDONLY, &fh, &of));
}

TEST_F(bind, setattr)
{
	struct fs_backend *b = self->b;
	struct fuse_setattr_in in;
	uint64_t file, dir, fh;
	char path[160], buf[64];
	struct fuse_attr a;
	struct stat st;
	uint32_t of;

	snprintf(path, sizeof(path), "%s/file", self->src);
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));

	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 0600 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(S_IFREG | 0600, a.mode);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(S_IFREG | 0600, st.st_mode);
	in.mode = 06755; /* set-user-ID dropped, set-group-ID too (a file) */
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(S_IFREG | 0755, a.mode);
	in.mode = 02775; /* a directory keeps set-group-ID */
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, dir, &in, &a));
	EXPECT_EQ(S_IFDIR | 02775, a.mode);

	in = (struct fuse_setattr_in){ .valid = FATTR_SIZE, .size = 2 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(2, a.size);
	EXPECT_STREQ("he", get(self->src, "file", buf, sizeof(buf)));
	EXPECT_EQ(-EISDIR, b->ops->setattr(b, &ctx, dir, &in, &a));
	ASSERT_EQ(0, b->ops->open(b, file, O_RDWR, &fh, &of));
	in = (struct fuse_setattr_in){ .valid = FATTR_SIZE | FATTR_FH,
				       .size = 100,
				       .fh = fh };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(100, a.size);
	/* Truncate through the handle after the name is gone. */
	ASSERT_EQ(0, unlink(path));
	in.size = 1;
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(1, a.size);
	EXPECT_EQ(0, b->ops->release(b, file, fh));
	ASSERT_EQ(0, put(self->src, "file", "hello\n"));
	b->ops->forget(b, file, 1);
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));

	in = (struct fuse_setattr_in){ .valid = FATTR_ATIME | FATTR_MTIME,
				       .atime = 1000000000,
				       .atimensec = 5,
				       .mtime = 1234567890,
				       .mtimensec = 999999999 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(1234567890, a.mtime);
	EXPECT_EQ(999999999, a.mtimensec);
	EXPECT_EQ(1000000000, a.atime);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(1234567890, st.st_mtim.tv_sec);
	in = (struct fuse_setattr_in){ .valid = FATTR_MTIME | FATTR_MTIME_NOW };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_LT(1234567890, a.mtime);
	EXPECT_EQ(1000000000, a.atime);
	in = (struct fuse_setattr_in){ .valid = FATTR_MTIME,
				       .mtimensec = 1000000000 };
	EXPECT_EQ(-EINVAL, b->ops->setattr(b, &ctx, file, &in, &a));
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE };
	EXPECT_EQ(-ESTALE, b->ops->setattr(b, &ctx, 4242, &in, &a));
}

TEST_F(bind, rename_and_link)
{
	struct fs_backend *b = self->b;
	uint64_t file, dir, sub, inner, fh, again;
	struct fuse_attr a;
	struct fs_entry e;
	char buf[64];
	uint32_t of;

	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, lookup(b, dir, "inner", &inner));
	ASSERT_EQ(0, do_mkdir(b, ROOT, "sub", &sub));

	/* The node follows its file: opened by its new name afterwards. */
	ASSERT_EQ(0, b->ops->rename(b, ROOT, "file", sub, "moved", 0));
	EXPECT_FALSE(exists(self->src, "file"));
	EXPECT_STREQ("hello\n", bcat(b, file, buf, sizeof(buf)));
	ASSERT_EQ(0, b->ops->rename(b, ROOT, "dir", sub, "d2", 0));
	EXPECT_STREQ("inner\n", bcat(b, inner, buf, sizeof(buf)));
	EXPECT_EQ(0, lookup(b, dir, "inner", NULL));

	EXPECT_EQ(-ENOENT, b->ops->rename(b, ROOT, "nope", ROOT, "x", 0));
	ASSERT_EQ(0, put(self->src, "other", "other\n"));
	EXPECT_EQ(-EEXIST, b->ops->rename(b, ROOT, "other", sub, "moved",
					  RENAME_NOREPLACE));
	ASSERT_EQ(0, b->ops->rename(b, ROOT, "other", sub, "moved",
				    RENAME_EXCHANGE));
	EXPECT_STREQ("hello\n", get(self->src, "other", buf, sizeof(buf)));
	EXPECT_STREQ("hello\n", bcat(b, file, buf, sizeof(buf)));
	EXPECT_EQ(-EINVAL,
		  b->ops->rename(b, ROOT, "other", ROOT, "x", 1U << 5));
	ASSERT_EQ(0, do_mkdir(b, ROOT, "empty", NULL));
	EXPECT_EQ(-ENOTEMPTY, b->ops->rename(b, ROOT, "empty", sub, "d2", 0));
	EXPECT_EQ(-EINVAL, b->ops->rename(b, ROOT, "sub", dir, "loop", 0));
	EXPECT_EQ(-ENOTDIR, b->ops->rename(b, file, "x", ROOT, "y", 0));
	EXPECT_EQ(-ESTALE, b->ops->rename(b, 4242, "x", ROOT, "y", 0));

	/* Hard links: the same node, nlink counted. */
	ASSERT_EQ(0, b->ops->link(b, file, ROOT, "hard", &e));
	EXPECT_EQ(file, e.nodeid);
	EXPECT_EQ(2, e.attr.nlink);
	EXPECT_STREQ("hello\n", get(self->src, "hard", buf, sizeof(buf)));
	EXPECT_EQ(-EEXIST, b->ops->link(b, file, ROOT, "hard", &e));
	EXPECT_EQ(-EPERM, b->ops->link(b, dir, ROOT, "dirlink", &e));
	EXPECT_EQ(-ENOTDIR, b->ops->link(b, file, file, "x", &e));
	EXPECT_EQ(-ESTALE, b->ops->link(b, 4242, ROOT, "x", &e));
	ASSERT_EQ(0, lookup(b, ROOT, "hard", &again));
	EXPECT_EQ(file, again);
	/* The recorded name unlinked: opened through another one later. */
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "hard"));
	ASSERT_EQ(0, battr(b, file, &a));
	EXPECT_EQ(1, a.nlink);
	EXPECT_EQ(-ESTALE, b->ops->open(b, file, O_RDONLY, &fh, &of));
	ASSERT_EQ(0, lookup(b, ROOT, "other", NULL));
	EXPECT_STREQ("hello\n", bcat(b, file, buf, sizeof(buf)));
}

/* ---- directories ---------------------------------------------------- */

TEST_F_TIMEOUT(bind, readdir_2000_resumed, 60)
{
	static struct dent all[MAX_DENTS], part[MAX_DENTS];
	struct fs_backend *b = self->b;
	char name[32], path[160];
	uint64_t big, fh;
	int n, i, k, got;
	bool *seen;

	ASSERT_EQ(0, host_mkdir(self->src, "big"));
	snprintf(path, sizeof(path), "%s/big", self->src);
	for (i = 0; i < NR_BIG; i++) {
		snprintf(name, sizeof(name), "big/entry-%04d", i);
		ASSERT_EQ(0, put(self->src, name, ""));
	}
	ASSERT_EQ(0, lookup(b, ROOT, "big", &big));
	n = list_dir(b, big, DIRBUF_SMALL, all, MAX_DENTS);
	ASSERT_EQ(NR_BIG + 2, n);
	EXPECT_STREQ(".", all[0].name);
	EXPECT_STREQ("..", all[1].name);
	EXPECT_EQ(DT_DIR, all[0].type);
	seen = calloc(NR_BIG, sizeof(*seen));
	ASSERT_NE(NULL, seen);
	for (i = 2; i < n; i++) {
		ASSERT_EQ(1, sscanf(all[i].name, "entry-%d", &k));
		ASSERT_LE(0, k);
		ASSERT_GT(NR_BIG, k);
		EXPECT_FALSE(seen[k]) TH_LOG("%s twice", all[i].name);
		seen[k] = true;
		EXPECT_EQ(DT_REG, all[i].type);
		EXPECT_NE(0, all[i].off);
	}
	free(seen);

	/*
	 * Resuming from any entry's offset, on a fresh handle, goes on with
	 * the entries after it: ".", "..", and a few in the middle.
	 */
	for (k = 0; k < n - 1; k += k < 4 ? 1 : 397) {
		ASSERT_EQ(0, b->ops->opendir(b, big, &fh));
		got = readdir_once(b, big, fh, all[k].off, 4096, part,
				   MAX_DENTS);
		ASSERT_LT(0, got);
		for (i = 0; i < got && k + 1 + i < n; i++)
			EXPECT_STREQ(all[k + 1 + i].name, part[i].name);
		EXPECT_EQ(0, b->ops->releasedir(b, big, fh));
	}
	/* Past the end: nothing; a hostile cookie: nothing, no crash. */
	ASSERT_EQ(0, b->ops->opendir(b, big, &fh));
	EXPECT_EQ(0, readdir_once(b, big, fh, all[n - 1].off, 4096, part,
				  MAX_DENTS));
	readdir_once(b, big, fh, (1ULL << 63) | 999, 4096, part, MAX_DENTS);
	readdir_once(b, big, fh, 0x7fffffffffffULL, 4096, part, MAX_DENTS);
	/* A buffer too small for one entry: nothing, and no error. */
	EXPECT_EQ(0, readdir_once(b, big, fh, 0, 8, part, MAX_DENTS));
	EXPECT_EQ(0, b->ops->fsyncdir(b, big, fh, false));
	EXPECT_EQ(-EBADF, b->ops->readdir(b, ROOT, fh, 0, NULL));
	EXPECT_EQ(-EBADF, b->ops->releasedir(b, ROOT, fh));
	EXPECT_EQ(0, b->ops->releasedir(b, big, fh));
	EXPECT_EQ(-EBADF, b->ops->releasedir(b, big, fh));
}

TEST_F(bind, opendir_and_listing)
{
	static struct dent d[16];
	struct fs_backend *b = self->b;
	uint64_t file, dir, fh;
	uint32_t of;
	int n;

	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	EXPECT_EQ(-ENOTDIR, b->ops->opendir(b, file, &fh));
	EXPECT_EQ(-ESTALE, b->ops->opendir(b, 4242, &fh));
	n = list_dir(b, ROOT, 4096, d, 16);
	ASSERT_EQ(4, n);
	EXPECT_TRUE(listed(d, n, "file"));
	EXPECT_TRUE(listed(d, n, "dir"));
	n = list_dir(b, dir, 4096, d, 16);
	ASSERT_EQ(3, n);
	EXPECT_STREQ("inner", d[2].name);
	/* A file handle is not a directory handle, nor the reverse. */
	ASSERT_EQ(0, b->ops->open(b, file, O_RDONLY, &fh, &of));
	EXPECT_EQ(-EBADF, b->ops->readdir(b, file, fh, 0, NULL));
	EXPECT_EQ(-EBADF, b->ops->releasedir(b, file, fh));
	EXPECT_EQ(0, b->ops->release(b, file, fh));
}

TEST_F(bind, statfs_sync_fallocate_lseek)
{
	struct fs_backend *b = self->b;
	struct fuse_kstatfs sf;
	struct fuse_attr a;
	uint64_t id, fh, rfh;
	struct iovec iov;
	uint32_t of;
	int64_t off;
	char *data;

	ASSERT_EQ(0, b->ops->statfs(b, ROOT, &sf));
	EXPECT_LT(0, sf.bsize);
	EXPECT_LT(0, sf.blocks);
	EXPECT_LE(255, sf.namelen);
	EXPECT_EQ(-ESTALE, b->ops->statfs(b, 4242, &sf));

	ASSERT_EQ(0, do_create(b, ROOT, "sparse", O_RDWR, &id, &fh));
	EXPECT_EQ(0, b->ops->fallocate(b, id, fh, 0, 1 << 20, 0));
	ASSERT_EQ(0, battr(b, id, &a));
	EXPECT_EQ(1 << 20, a.size);
	/* Data everywhere (preallocated space may count as a hole). */
	data = malloc(1 << 20);
	ASSERT_NE(NULL, data);
	memset(data, 'd', 1 << 20);
	iov = (struct iovec){ .iov_base = data, .iov_len = 1 << 20 };
	EXPECT_EQ(1 << 20, b->ops->write(b, id, fh, &iov, 1, 0));
	free(data);
	EXPECT_EQ(0, b->ops->fallocate(b, id, fh, 1 << 20, 1 << 20,
				       FALLOC_FL_KEEP_SIZE));
	ASSERT_EQ(0, battr(b, id, &a));
	EXPECT_EQ(1 << 20, a.size);
	EXPECT_EQ(0, b->ops->fallocate(b, id, fh, 0, 1 << 19,
				       FALLOC_FL_PUNCH_HOLE |
					       FALLOC_FL_KEEP_SIZE));
	EXPECT_EQ(-EOPNOTSUPP,
		  b->ops->fallocate(b, id, fh, 0, 1, FALLOC_FL_PUNCH_HOLE));
	EXPECT_EQ(-EFBIG, b->ops->fallocate(b, id, fh, INT64_MAX, 2, 0));
	EXPECT_EQ(-EBADF, b->ops->fallocate(b, id, fh + 9, 0, 1, 0));

	off = b->ops->lseek(b, id, fh, 0, SEEK_HOLE);
	EXPECT_EQ(0, off);
	off = b->ops->lseek(b, id, fh, 0, SEEK_DATA);
	EXPECT_LE(1 << 19, off); /* the hole punched */
	EXPECT_GT(1 << 20, off);
	EXPECT_EQ(-ENXIO, b->ops->lseek(b, id, fh, 1 << 20, SEEK_DATA));
	EXPECT_EQ(-EINVAL, b->ops->lseek(b, id, fh, 0, SEEK_SET));
	EXPECT_EQ(-EBADF, b->ops->lseek(b, id, fh + 9, 0, SEEK_DATA));

	EXPECT_EQ(0, b->ops->fsync(b, id, fh, false));
	EXPECT_EQ(0, b->ops->fsync(b, id, fh, true));
	EXPECT_EQ(-EBADF, b->ops->fsync(b, id, fh + 9, true));
	EXPECT_EQ(0, b->ops->flush(b, id, fh));
	EXPECT_EQ(-EBADF, b->ops->flush(b, ROOT, fh));
	ASSERT_EQ(0, b->ops->open(b, id, O_RDONLY, &rfh, &of));
	EXPECT_EQ(-EBADF, b->ops->fallocate(b, id, rfh, 0, 1, 0));
	EXPECT_EQ(0, b->ops->release(b, id, rfh));
	EXPECT_EQ(0, b->ops->release(b, id, fh));
}

/* ---- escapes -------------------------------------------------------- */

/* A guest symlink to target: served as a symlink, never followed. */
static void symlink_escape(struct __test_metadata *_metadata,
			   FIXTURE_DATA(bind) * self, const char *target)
{
	struct fs_backend *b = self->b;
	struct fuse_setattr_in in;
	uint64_t l, fh, again;
	struct fuse_attr a;
	struct fs_entry e;
	char buf[64];
	uint32_t of;
	char *before;
	ssize_t n;

	before = snapshot(self->out);
	ASSERT_EQ(0, do_symlink(b, ROOT, "esc", target, NULL));
	ASSERT_EQ(0, lookup(b, ROOT, "esc", &l));
	ASSERT_EQ(0, battr(b, l, &a));
	EXPECT_TRUE(S_ISLNK(a.mode));
	n = b->ops->readlink(b, l, buf, sizeof(buf));
	ASSERT_EQ((ssize_t)strlen(target), n);
	EXPECT_EQ(0, memcmp(buf, target, (size_t)n));

	/* Used as a directory: never. */
	EXPECT_EQ(-ENOTDIR, lookup(b, l, "etc", NULL));
	EXPECT_EQ(-ENOTDIR, lookup(b, l, "outside", NULL));
	EXPECT_EQ(-ENOTDIR, lookup(b, l, "tmp", NULL));
	EXPECT_EQ(-ENOTDIR, b->ops->opendir(b, l, &fh));
	EXPECT_EQ(-ENOTDIR, do_mkdir(b, l, "x", NULL));
	EXPECT_EQ(-ENOTDIR, do_create(b, l, "x", O_RDWR, NULL, NULL));
	EXPECT_EQ(-ENOTDIR,
		  b->ops->mknod(b, &ctx, l, "x", S_IFREG | 0644, 0, 0, &e));
	EXPECT_EQ(-ENOTDIR, do_symlink(b, l, "x", "y", NULL));
	EXPECT_EQ(-ENOTDIR, b->ops->unlink(b, l, "secret"));
	EXPECT_EQ(-ENOTDIR, b->ops->rename(b, ROOT, "file", l, "f", 0));
	EXPECT_EQ(-ENOTDIR, b->ops->rename(b, l, "secret", ROOT, "f", 0));
	/* Nor a file. */
	EXPECT_EQ(-ELOOP, b->ops->open(b, l, O_RDONLY, &fh, &of));
	/* Nor followed by create or mkdir over its name. */
	EXPECT_EQ(-EEXIST, do_create(b, ROOT, "esc", O_RDWR, NULL, NULL));
	EXPECT_EQ(-EEXIST, do_mkdir(b, ROOT, "esc", NULL));
	/* chmod of a symlink is not a chmod of its target. */
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 0777 };
	EXPECT_EQ(-EOPNOTSUPP, b->ops->setattr(b, &ctx, l, &in, &a));
	/* The host side of it is a plain symlink in source. */
	ASSERT_EQ(0, lookup(b, ROOT, "esc", &again));
	EXPECT_EQ(l, again);
	EXPECT_EQ(0, b->ops->unlink(b, ROOT, "esc"));
	expect_same_tree(_metadata, before, self->out);
}

TEST_F(bind, escape_symlink_to_root)
{
	symlink_escape(_metadata, self, "/");
}

TEST_F(bind, escape_symlink_dotdot)
{
	symlink_escape(_metadata, self, "../../..");
}

TEST_F(bind, escape_symlink_to_outside)
{
	symlink_escape(_metadata, self, self->out);
}

/*
 * A host process swaps a symlink in for a directory (and for a file)
 * between the guest's lookup and its next op on the child.
 */
TEST_F(bind, escape_host_symlink_swap)
{
	static struct dent d[16];
	struct fs_backend *b = self->b;
	char p1[160], p2[160], buf[64];
	uint64_t dir, inner, file, l, fh;
	struct fuse_setattr_in in;
	struct fuse_attr a;
	uint32_t of;
	char *before;
	int n;

	before = snapshot(self->out);
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, lookup(b, dir, "inner", &inner));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));

	/* The "host process": dir -> dir.away, dir -> symlink to outside. */
	snprintf(p1, sizeof(p1), "%s/dir", self->src);
	snprintf(p2, sizeof(p2), "%s/dir.away", self->src);
	ASSERT_EQ(0, rename(p1, p2));
	ASSERT_EQ(0, symlink(self->out, p1));
	/* and file -> file.away, file -> symlink to outside/secret */
	snprintf(p1, sizeof(p1), "%s/file", self->src);
	snprintf(p2, sizeof(p2), "%s/file.away", self->src);
	ASSERT_EQ(0, rename(p1, p2));
	snprintf(p2, sizeof(p2), "%s/secret", self->out);
	ASSERT_EQ(0, symlink(p2, p1));

	/* The held directory node is still the directory, moved. */
	EXPECT_EQ(-ENOENT, lookup(b, dir, "secret", NULL));
	EXPECT_EQ(0, lookup(b, dir, "inner", NULL));
	n = list_dir(b, dir, 4096, d, 16);
	ASSERT_EQ(3, n);
	EXPECT_STREQ("inner", d[2].name);
	EXPECT_EQ(0, do_mkdir(b, dir, "made", NULL));
	EXPECT_TRUE(exists(self->src, "dir.away/made"));
	EXPECT_FALSE(exists(self->out, "made"));
	EXPECT_STREQ("inner\n", bcat(b, inner, buf, sizeof(buf)));

	/* The held file node: its name is a symlink now, never followed. */
	EXPECT_EQ(-ESTALE, b->ops->open(b, file, O_RDONLY, &fh, &of));
	EXPECT_EQ(-ESTALE, b->ops->open(b, file, O_RDWR | O_TRUNC, &fh, &of));
	EXPECT_STREQ("SECRET\n", get(self->out, "secret", buf, sizeof(buf)));
	in = (struct fuse_setattr_in){ .valid = FATTR_SIZE, .size = 0 };
	EXPECT_EQ(-ESTALE, b->ops->setattr(b, &ctx, file, &in, &a));

	/* A fresh lookup finds the symlinks, and goes no further. */
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &l));
	ASSERT_EQ(0, battr(b, l, &a));
	EXPECT_TRUE(S_ISLNK(a.mode));
	EXPECT_EQ(-ENOTDIR, lookup(b, l, "secret", NULL));
	EXPECT_EQ(-ENOTDIR, b->ops->opendir(b, l, &fh));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &l));
	EXPECT_EQ(-ELOOP, b->ops->open(b, l, O_RDONLY, &fh, &of));
	expect_same_tree(_metadata, before, self->out);
}

/*
 * A host process renames another file over one the guest holds: the node
 * is the old inode, and is never opened as the new one.
 */
TEST_F(bind, reopen_checks_inode)
{
	struct fs_backend *b = self->b;
	uint64_t file, fresh, fh;
	char p1[160], p2[160], buf[64];
	uint32_t of;

	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, put(self->src, "other", "OTHER\n"));
	snprintf(p1, sizeof(p1), "%s/other", self->src);
	snprintf(p2, sizeof(p2), "%s/file", self->src);
	ASSERT_EQ(0, rename(p1, p2));
	EXPECT_EQ(-ESTALE, b->ops->open(b, file, O_RDONLY, &fh, &of));
	EXPECT_EQ(-ESTALE, b->ops->open(b, file, O_WRONLY | O_TRUNC, &fh, &of));
	EXPECT_STREQ("OTHER\n", get(self->src, "file", buf, sizeof(buf)));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &fresh));
	EXPECT_NE(file, fresh);
	EXPECT_STREQ("OTHER\n", bcat(b, fresh, buf, sizeof(buf)));
}

/*
 * A host process moves a directory the guest holds out of the tree: the
 * node answers -ESTALE to everything that would resolve or make a name in
 * it, so nothing outside is listed, made, or linked back in.
 */
TEST_F(bind, moved_out_of_tree)
{
	struct fs_backend *b = self->b;
	uint64_t dir, inner, sub, deep, fh;
	struct fuse_setattr_in in;
	char p1[160], p2[160];
	struct fuse_attr a;
	struct fs_entry e;
	uint32_t of;
	char *before;

	ASSERT_EQ(0, host_mkdir(self->src, "dir/sub"));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, lookup(b, dir, "inner", &inner));
	ASSERT_EQ(0, lookup(b, dir, "sub", &sub));
	ASSERT_EQ(0, do_mkdir(b, sub, "deep", &deep));

	/* Moved within the tree: still beneath source, still served. */
	ASSERT_EQ(0, host_mkdir(self->src, "elsewhere"));
	snprintf(p1, sizeof(p1), "%s/dir", self->src);
	snprintf(p2, sizeof(p2), "%s/elsewhere/dir", self->src);
	ASSERT_EQ(0, rename(p1, p2));
	EXPECT_EQ(0, lookup(b, dir, "inner", NULL));
	EXPECT_EQ(0, do_mkdir(b, deep, "ok", NULL));
	EXPECT_TRUE(exists(self->src, "elsewhere/dir/sub/deep/ok"));

	/* Out of the tree. */
	snprintf(p1, sizeof(p1), "%s/dir", self->out);
	ASSERT_EQ(0, rename(p2, p1));
	ASSERT_EQ(0, put(self->out, "dir/planted", "outside\n"));
	before = snapshot(self->out);
	EXPECT_EQ(-ESTALE, lookup(b, dir, "inner", NULL));
	EXPECT_EQ(-ESTALE, lookup(b, dir, "planted", NULL));
	EXPECT_EQ(-ESTALE, lookup(b, deep, "ok", NULL));
	EXPECT_EQ(-ESTALE, do_mkdir(b, dir, "x", NULL));
	EXPECT_EQ(-ESTALE, do_mkdir(b, deep, "x", NULL));
	EXPECT_EQ(-ESTALE, do_create(b, sub, "x", O_RDWR, NULL, NULL));
	EXPECT_EQ(-ESTALE,
		  b->ops->mknod(b, &ctx, dir, "x", S_IFIFO | 0644, 0, 0, &e));
	EXPECT_EQ(-ESTALE, do_symlink(b, dir, "x", "y", NULL));
	EXPECT_EQ(-ESTALE, b->ops->unlink(b, dir, "inner"));
	EXPECT_EQ(-ESTALE, b->ops->rmdir(b, sub, "deep"));
	EXPECT_EQ(-ESTALE, b->ops->rename(b, dir, "inner", ROOT, "stolen", 0));
	EXPECT_EQ(-ESTALE, b->ops->rename(b, ROOT, "file", dir, "given", 0));
	EXPECT_EQ(-ESTALE, b->ops->link(b, inner, ROOT, "stolen", &e));
	EXPECT_EQ(-ESTALE, b->ops->opendir(b, dir, &fh));
	EXPECT_EQ(-ESTALE, b->ops->opendir(b, deep, &fh));
	EXPECT_EQ(-ESTALE, b->ops->open(b, inner, O_RDONLY, &fh, &of));
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 0777 };
	EXPECT_EQ(-ESTALE, b->ops->setattr(b, &ctx, inner, &in, &a));
	EXPECT_EQ(-ESTALE, b->ops->setattr(b, &ctx, dir, &in, &a));
	EXPECT_FALSE(exists(self->src, "stolen"));
	expect_same_tree(_metadata, before, self->out);
	/* Moved back: served again. */
	snprintf(p2, sizeof(p2), "%s/dir", self->src);
	ASSERT_EQ(0, rename(p1, p2));
	EXPECT_EQ(0, lookup(b, dir, "inner", NULL));
	EXPECT_EQ(0, lookup(b, deep, "ok", NULL));
}

/*
 * A guest that looks up more files than the mount may hold descriptors
 * for (half the soft RLIMIT_NOFILE at create) still gets every one: node
 * descriptors are closed least recently used first and opened again. Open
 * files keep theirs (and their node's), so opening past the budget is
 * ENFILE, not a monitor out of descriptors; closing one frees room.
 */
TEST_F(bind, descriptor_budget)
{
	uint64_t ids[200], fhs[200];
	struct fuse_attr a;
	struct rlimit rl;
	struct fs_backend *b;
	char name[32];
	uint32_t of;
	int i, got = 0, ret = 0;

	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_max < 256)
		SKIP(return, "RLIMIT_NOFILE hard limit below 256");
	rl.rlim_cur = 256;
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	unsetenv("KILN_TEST_BIND_MAX_FDS"); /* the budget from the limit */
	ASSERT_EQ(0, bind_new(self, false, NULL, 0, false));
	b = self->b;
	for (i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		ASSERT_EQ(0, put(self->src, name, name));
	}
	for (i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		ASSERT_EQ(0, lookup(b, ROOT, name, &ids[i]));
	}
	for (i = 0; i < 200; i++)
		ASSERT_EQ(0, battr(b, ids[i], &a));
	/*
	 * 128 in all: the root's (and with file handles a directory
	 * descriptor of it), then a node's and a handle's per open.
	 */
	for (i = 0; i < 200; i++) {
		ret = b->ops->open(b, ids[i], O_RDONLY, &fhs[i], &of);
		if (ret)
			break;
		got++;
	}
	EXPECT_EQ(-ENFILE, ret);
	EXPECT_LT(50, got);
	EXPECT_GE(64, got);
	/* Two closed: their four descriptors serve a stat and an open. */
	ASSERT_EQ(0, b->ops->release(b, ids[0], fhs[0]));
	ASSERT_EQ(0, b->ops->release(b, ids[1], fhs[1]));
	EXPECT_EQ(0, battr(b, ids[199], &a));
	EXPECT_EQ(0, b->ops->open(b, ids[got], O_RDONLY, &fhs[got], &of));
}

/* ---- read-only ------------------------------------------------------ */

TEST_F(bind, read_only_refuses_every_mutation)
{
	struct fs_backend *b;
	uint64_t file, dir, fh;
	struct fuse_setattr_in in = { .valid = FATTR_MODE, .mode = 0777 };
	struct fuse_attr a;
	struct fs_entry e;
	char buf[64];
	uint32_t of;
	char *before;

	ASSERT_EQ(0, bind_new(self, true, NULL, 0, false));
	b = self->b;
	EXPECT_TRUE(b->read_only);
	before = snapshot(self->src);
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));

	EXPECT_EQ(-EROFS,
		  b->ops->mknod(b, &ctx, ROOT, "n", S_IFREG | 0644, 0, 0, &e));
	EXPECT_EQ(-EROFS, do_mkdir(b, ROOT, "n", NULL));
	EXPECT_EQ(-EROFS, do_symlink(b, ROOT, "n", "x", NULL));
	EXPECT_EQ(-EROFS, do_create(b, ROOT, "n", O_RDWR, NULL, NULL));
	EXPECT_EQ(-EROFS, do_create(b, ROOT, "n", O_RDONLY, NULL, NULL));
	EXPECT_EQ(-EROFS, b->ops->unlink(b, ROOT, "file"));
	EXPECT_EQ(-EROFS, b->ops->rmdir(b, ROOT, "dir"));
	EXPECT_EQ(-EROFS, b->ops->rename(b, ROOT, "file", ROOT, "n", 0));
	EXPECT_EQ(-EROFS, b->ops->link(b, file, ROOT, "n", &e));
	EXPECT_EQ(-EROFS, b->ops->setattr(b, &ctx, file, &in, &a));
	in = (struct fuse_setattr_in){ .valid = FATTR_SIZE };
	EXPECT_EQ(-EROFS, b->ops->setattr(b, &ctx, file, &in, &a));
	in = (struct fuse_setattr_in){ .valid = FATTR_MTIME_NOW | FATTR_MTIME };
	EXPECT_EQ(-EROFS, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(-EROFS, b->ops->open(b, file, O_WRONLY, &fh, &of));
	EXPECT_EQ(-EROFS, b->ops->open(b, file, O_RDWR, &fh, &of));
	EXPECT_EQ(-EROFS, b->ops->open(b, file, O_RDONLY | O_TRUNC, &fh, &of));

	/* Reading works; writing through a read handle does not. */
	ASSERT_EQ(0, b->ops->open(b, file, O_RDONLY, &fh, &of));
	EXPECT_EQ(6, bread(b, file, fh, buf, sizeof(buf), 0));
	EXPECT_EQ(-EROFS, bwrite(b, file, fh, "x", 0));
	EXPECT_EQ(-EROFS, b->ops->io_fd(b, file, fh, true));
	EXPECT_LE(0, b->ops->io_fd(b, file, fh, false));
	EXPECT_EQ(-EROFS, b->ops->fallocate(b, file, fh, 0, 10, 0));
	EXPECT_EQ(0, b->ops->release(b, file, fh));
	EXPECT_EQ(4, list_dir(b, ROOT, 4096, (struct dent[8]){ 0 }, 8));

	expect_same_tree(_metadata, before, self->src);
}

/* ---- masks ---------------------------------------------------------- */

TEST_F(bind, masks_read_only_are_absent)
{
	static const char *const masks[] = { "/secret", "/a/b/hidden",
					     "/nothere" };
	static struct dent d[16];
	struct fs_backend *b;
	uint64_t a, ab;
	char *before;
	int n;

	ASSERT_EQ(0, put(self->src, "secret", "s\n"));
	ASSERT_EQ(0, host_mkdir(self->src, "a"));
	ASSERT_EQ(0, host_mkdir(self->src, "a/b"));
	ASSERT_EQ(0, put(self->src, "a/b/hidden", "h\n"));
	ASSERT_EQ(0, put(self->src, "a/b/shown", "v\n"));
	ASSERT_EQ(0, put(self->src, "a/hidden", "not masked\n"));
	ASSERT_EQ(0, bind_new(self, true, masks, 3, false));
	b = self->b;
	before = snapshot(self->src);

	EXPECT_EQ(-ENOENT, lookup(b, ROOT, "secret", NULL));
	EXPECT_EQ(-ENOENT, lookup(b, ROOT, "nothere", NULL));
	ASSERT_EQ(0, lookup(b, ROOT, "a", &a));
	EXPECT_EQ(0, lookup(b, a, "hidden", NULL)); /* /a/hidden: not masked */
	ASSERT_EQ(0, lookup(b, a, "b", &ab));
	EXPECT_EQ(-ENOENT, lookup(b, ab, "hidden", NULL));
	EXPECT_EQ(0, lookup(b, ab, "shown", NULL));

	n = list_dir(b, ROOT, 4096, d, 16);
	EXPECT_FALSE(listed(d, n, "secret"));
	EXPECT_TRUE(listed(d, n, "file"));
	EXPECT_TRUE(listed(d, n, "a"));
	EXPECT_EQ(5, n); /* . .. file dir a */
	n = list_dir(b, ab, 4096, d, 16);
	EXPECT_EQ(3, n);
	EXPECT_FALSE(listed(d, n, "hidden"));
	EXPECT_TRUE(listed(d, n, "shown"));
	/* Small buffers: the hidden name is skipped across resumptions. */
	n = list_dir(b, ROOT, 40, d, 16);
	EXPECT_EQ(5, n);
	EXPECT_FALSE(listed(d, n, "secret"));

	expect_same_tree(_metadata, before, self->src);
}

TEST_F(bind, masks_read_write_use_storage)
{
	static const char *const masks[] = { "/node_modules", "/.env",
					     "/deep/x/y" };
	static struct dent d[32];
	struct fs_backend *b;
	uint64_t nm, pkg, f, env, deep, x, y, file, fh, again;
	struct fs_entry e;
	char buf[64];
	uint32_t of;
	char *before;
	int n;

	ASSERT_EQ(0, host_mkdir(self->src, "node_modules"));
	ASSERT_EQ(0, put(self->src, "node_modules/host-pkg", "host\n"));
	ASSERT_EQ(0, put(self->src, ".env", "TOKEN=host\n"));
	ASSERT_EQ(0, host_mkdir(self->src, "deep"));
	ASSERT_EQ(0, host_mkdir(self->src, "deep/x"));
	ASSERT_EQ(0, host_mkdir(self->src, "deep/x/y"));
	ASSERT_EQ(0, put(self->src, "deep/x/y/host", "host\n"));
	ASSERT_EQ(0, put(self->src, "deep/x/keep", "keep\n"));
	ASSERT_EQ(0, bind_new(self, false, masks, 3, true));
	b = self->b;
	before = snapshot(self->src);

	/* Storage empty: the masked paths are absent. */
	EXPECT_EQ(-ENOENT, lookup(b, ROOT, "node_modules", NULL));
	EXPECT_EQ(-ENOENT, lookup(b, ROOT, ".env", NULL));
	n = list_dir(b, ROOT, 4096, d, 32);
	EXPECT_FALSE(listed(d, n, "node_modules"));
	EXPECT_FALSE(listed(d, n, ".env"));
	EXPECT_TRUE(listed(d, n, "deep"));
	EXPECT_EQ(-ENOENT, b->ops->unlink(b, ROOT, ".env"));

	/* Made by the guest: in storage. */
	ASSERT_EQ(0, do_mkdir(b, ROOT, "node_modules", &nm));
	EXPECT_TRUE(exists(self->sto, "node_modules"));
	ASSERT_EQ(0, do_mkdir(b, nm, "pkg", &pkg));
	ASSERT_EQ(0, do_create(b, pkg, "index.js", O_RDWR, &f, &fh));
	EXPECT_EQ(4, bwrite(b, f, fh, "code", 0));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	EXPECT_STREQ("code",
		     get(self->sto, "node_modules/pkg/index.js", buf, 64));
	EXPECT_STREQ("code", bcat(b, f, buf, sizeof(buf)));
	ASSERT_EQ(0, do_symlink(b, nm, ".bin", "pkg/index.js", NULL));
	EXPECT_TRUE(exists(self->sto, "node_modules/.bin"));
	ASSERT_EQ(0, b->ops->mknod(b, &ctx, ROOT, ".env", S_IFREG | 0600, 0, 0,
				   &e));
	env = e.nodeid;
	EXPECT_TRUE(exists(self->sto, ".env"));
	ASSERT_EQ(0, b->ops->open(b, env, O_WRONLY, &fh, &of));
	EXPECT_EQ(10, bwrite(b, env, fh, "TOKEN=mine", 0));
	EXPECT_EQ(0, b->ops->release(b, env, fh));
	EXPECT_STREQ("TOKEN=mine", get(self->sto, ".env", buf, sizeof(buf)));
	ASSERT_EQ(0, lookup(b, ROOT, ".env", &again));
	EXPECT_EQ(env, again);
	ASSERT_EQ(0, lookup(b, ROOT, "node_modules", &again));
	EXPECT_EQ(nm, again);
	EXPECT_EQ(-ENOENT, lookup(b, nm, "host-pkg", NULL));

	/* The root lists storage's entries, each once, not source's. */
	n = list_dir(b, ROOT, 4096, d, 32);
	EXPECT_TRUE(listed(d, n, "node_modules"));
	EXPECT_TRUE(listed(d, n, ".env"));
	EXPECT_EQ(7, n); /* . .. node_modules .env file dir deep */
	n = list_dir(b, ROOT, 40, d, 32); /* resumed one at a time */
	EXPECT_EQ(7, n);
	n = list_dir(b, nm, 4096, d, 32);
	EXPECT_EQ(4, n); /* . .. pkg .bin */
	EXPECT_FALSE(listed(d, n, "host-pkg"));

	/* A deep mask: intermediate directories are source's. */
	ASSERT_EQ(0, lookup(b, ROOT, "deep", &deep));
	ASSERT_EQ(0, lookup(b, deep, "x", &x));
	EXPECT_EQ(0, lookup(b, x, "keep", NULL));
	EXPECT_EQ(-ENOENT, lookup(b, x, "y", NULL));
	n = list_dir(b, x, 4096, d, 32);
	EXPECT_EQ(3, n);
	EXPECT_FALSE(listed(d, n, "y"));
	ASSERT_EQ(0, do_mkdir(b, x, "y", &y));
	EXPECT_TRUE(exists(self->sto, "deep/x/y"));
	ASSERT_EQ(0, do_create(b, y, "new", O_RDWR, NULL, NULL));
	EXPECT_TRUE(exists(self->sto, "deep/x/y/new"));
	EXPECT_EQ(-ENOENT, lookup(b, y, "host", NULL));
	n = list_dir(b, x, 4096, d, 32);
	EXPECT_EQ(4, n);
	EXPECT_TRUE(listed(d, n, "y"));

	/* Nothing crosses between storage and source. */
	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	EXPECT_EQ(-EXDEV, b->ops->rename(b, pkg, "index.js", ROOT, "out", 0));
	EXPECT_EQ(-EXDEV, b->ops->rename(b, ROOT, "file", nm, "in", 0));
	EXPECT_EQ(-EXDEV, b->ops->rename(b, ROOT, "file", ROOT, ".env",
					 RENAME_EXCHANGE));
	EXPECT_EQ(-EXDEV,
		  b->ops->rename(b, ROOT, "node_modules", ROOT, "nm", 0));
	EXPECT_EQ(-EXDEV, b->ops->link(b, file, nm, "in", &e));
	EXPECT_EQ(-EXDEV, b->ops->link(b, f, ROOT, "out", &e));
	/* Moving a mask's ancestor would carry what it hides: refused. */
	EXPECT_EQ(-EBUSY, b->ops->rename(b, ROOT, "deep", ROOT, "deep2", 0));
	EXPECT_EQ(-EBUSY, b->ops->rename(b, deep, "x", ROOT, "x2", 0));
	EXPECT_EQ(-EBUSY, b->ops->rename(b, ROOT, "dir", ROOT, "deep",
					 RENAME_EXCHANGE));
	/* Within storage, all ops work. */
	EXPECT_EQ(0, b->ops->rename(b, pkg, "index.js", nm, "moved.js", 0));
	EXPECT_TRUE(exists(self->sto, "node_modules/moved.js"));
	EXPECT_EQ(0, b->ops->link(b, f, nm, "hard.js", &e));
	EXPECT_EQ(0, b->ops->unlink(b, nm, "hard.js"));
	EXPECT_EQ(0, b->ops->rmdir(b, nm, "pkg"));
	EXPECT_EQ(0, b->ops->unlink(b, ROOT, ".env"));
	EXPECT_FALSE(exists(self->sto, ".env"));
	EXPECT_EQ(-ENOTEMPTY, b->ops->rmdir(b, ROOT, "node_modules"));

	expect_same_tree(_metadata, before, self->src);

	/* Making things next to the mask is source's business
	 * (after the snapshot: this one does change source). */
	ASSERT_EQ(0, do_create(b, x, "beside", O_RDWR, NULL, NULL));
	EXPECT_TRUE(exists(self->src, "deep/x/beside"));
	ASSERT_EQ(0, b->ops->unlink(b, x, "beside"));
}

/* ---- ownership ------------------------------------------------------ */

static void check_ownership(struct __test_metadata *_metadata,
			    FIXTURE_DATA(bind) * self)
{
	struct fs_backend *b = self->b;
	struct fuse_setattr_in in;
	uint64_t mine, other;
	char path[160];
	struct fuse_attr a;
	struct stat st;

	/* Made by the guest: the vmm's user on the host, 0 in the guest. */
	ASSERT_EQ(0, do_create(b, ROOT, "mine", O_RDWR, &mine, NULL));
	snprintf(path, sizeof(path), "%s/mine", self->src);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(geteuid(), st.st_uid);
	EXPECT_EQ(getegid(), st.st_gid);
	ASSERT_EQ(0, battr(b, mine, &a));
	EXPECT_EQ(0, a.uid);
	EXPECT_EQ(0, a.gid);

	/* Someone else's: as it is. */
	ASSERT_EQ(0, lookup(b, ROOT, "other", &other));
	ASSERT_EQ(0, battr(b, other, &a));
	EXPECT_EQ(OTHER_UID, a.uid);
	EXPECT_EQ(OTHER_GID, a.gid);

	/* chown to 0, or to what it shows: no-op; anything else: EPERM. */
	in = (struct fuse_setattr_in){ .valid = FATTR_UID | FATTR_GID };
	EXPECT_EQ(0, b->ops->setattr(b, &ctx, mine, &in, &a));
	EXPECT_EQ(0, a.uid);
	in.uid = OTHER_UID;
	EXPECT_EQ(-EPERM, b->ops->setattr(b, &ctx, mine, &in, &a));
	in = (struct fuse_setattr_in){ .valid = FATTR_GID, .gid = OTHER_GID };
	EXPECT_EQ(-EPERM, b->ops->setattr(b, &ctx, mine, &in, &a));
	in = (struct fuse_setattr_in){ .valid = FATTR_UID | FATTR_GID,
				       .uid = OTHER_UID,
				       .gid = OTHER_GID };
	EXPECT_EQ(0, b->ops->setattr(b, &ctx, other, &in, &a));
	in.uid = 0;
	in.gid = 0;
	EXPECT_EQ(0, b->ops->setattr(b, &ctx, other, &in, &a));
	EXPECT_EQ(OTHER_UID, a.uid); /* a no-op: still theirs */
	in.uid = 99;
	EXPECT_EQ(-EPERM, b->ops->setattr(b, &ctx, other, &in, &a));
	/* Refused before anything else in the request is done. */
	in = (struct fuse_setattr_in){ .valid = FATTR_UID | FATTR_MODE,
				       .uid = 99,
				       .mode = 0777 };
	EXPECT_EQ(-EPERM, b->ops->setattr(b, &ctx, mine, &in, &a));
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(S_IFREG | 0644, st.st_mode);
	snprintf(path, sizeof(path), "%s/other", self->src);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(OTHER_UID, st.st_uid);
}

TEST_F(bind, ownership_mapping)
{
	char path[160];

	ASSERT_EQ(0, put(self->src, "other", "theirs\n"));
	snprintf(path, sizeof(path), "%s/other", self->src);
	if (chown(path, OTHER_UID, OTHER_GID))
		SKIP(return, "cannot chown a test file (not root)");
	check_ownership(_metadata, self);
}

/*
 * The same as an unprivileged vmm (uid and gid DROP_ID): its ids are
 * the guest's 0, root's files show as 0 too, and hard links go through
 * the named fallback (no CAP_DAC_READ_SEARCH for linkat AT_EMPTY_PATH).
 * Checked in a child, which drops its privileges for good.
 */
TEST_F(bind, ownership_mapping_unprivileged)
{
	char path[160];
	pid_t pid;
	int status;

	if (geteuid())
		SKIP(return, "needs root to become another user");
	ASSERT_EQ(0, put(self->src, "other", "theirs\n"));
	snprintf(path, sizeof(path), "%s/other", self->src);
	ASSERT_EQ(0, chown(path, OTHER_UID, OTHER_GID));
	ASSERT_EQ(0, chown(self->src, DROP_ID, DROP_ID));
	ASSERT_EQ(0, chmod(self->top, 0755));
	fs_backend__destroy(self->b);
	self->b = NULL;
	fflush(stdout);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct fs_bind_params p = { .source = self->src,
					    .ownership = FS_OWNERSHIP_SQUASH };
		struct fs_entry e;
		struct fuse_attr a;
		uint64_t root_file, mine;

		if (setgroups(0, NULL) ||
		    setresgid(DROP_ID, DROP_ID, DROP_ID) ||
		    setresuid(DROP_ID, DROP_ID, DROP_ID))
			_exit(2);
		if (passthrough__create(&self->b, &p))
			_exit(3);
		check_ownership(_metadata, self);
		if (lookup(self->b, ROOT, "file", &root_file) ||
		    battr(self->b, root_file, &a) || a.uid != 0)
			_exit(4);
		/* Without CAP_DAC_READ_SEARCH: the named fallback of link. */
		if (lookup(self->b, ROOT, "mine", &mine) ||
		    self->b->ops->link(self->b, mine, ROOT, "hard", &e) ||
		    e.nodeid != mine || e.attr.nlink != 2)
			_exit(5);
		fs_backend__destroy(self->b);
		_exit(_metadata->result->failed ? 1 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_TRUE(exists(self->src, "hard"));
}

/* ---- issue 15: hardening ------------------------------------------- */

/* IN_OPEN events inotify fd has queued (read without blocking). */
static int count_opens(int ifd)
{
	char buf[4096] __attribute__((aligned(8)));
	const struct inotify_event *ev;
	int opens = 0;
	ssize_t n, i;

	while ((n = read(ifd, buf, sizeof(buf))) > 0)
		for (i = 0; i < n; i += sizeof(*ev) + ev->len) {
			ev = (const struct inotify_event *)(buf + i);
			opens += !!(ev->mask & IN_OPEN);
		}
	return opens;
}

/*
 * FUSE_CREATE of a name a host process made a FIFO or a device node:
 * never opened (opening one has effects), answered -ENXIO.
 */
TEST_F(bind, create_never_opens_fifo_or_device)
{
	static const char *const names[] = { "fifo", "null" };
	struct fs_backend *b = self->b;
	char path[160];
	struct fs_entry e;
	unsigned int i;
	uint64_t fh;
	uint32_t of;
	int ifd;

	snprintf(path, sizeof(path), "%s/fifo", self->src);
	ASSERT_EQ(0, mkfifo(path, 0666));
	snprintf(path, sizeof(path), "%s/null", self->src);
	if (mknod(path, S_IFCHR | 0666, makedev(1, 3)))
		ASSERT_EQ(0, mkfifo(path, 0666)) TH_LOG("not root: two FIFOs");
	for (i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(path, sizeof(path), "%s/%s", self->src, names[i]);
		ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		ASSERT_LE(0, ifd);
		ASSERT_LE(0, inotify_add_watch(ifd, path, IN_OPEN));
		EXPECT_EQ(-ENXIO, b->ops->create(b, &ctx, ROOT, names[i],
						 S_IFREG | 0644, O_RDONLY, 0,
						 &e, &fh, &of))
		TH_LOG("%s", names[i]);
		EXPECT_EQ(-ENXIO,
			  b->ops->create(b, &ctx, ROOT, names[i],
					 S_IFREG | 0644, O_WRONLY | O_TRUNC, 0,
					 &e, &fh, &of))
		TH_LOG("%s", names[i]);
		EXPECT_EQ(0, count_opens(ifd)) TH_LOG("%s opened", names[i]);
		close(ifd);
	}
}

static mode_t host_mode(const char *dir, const char *rel)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return lstat(path, &st) ? 0 : st.st_mode;
}

static void host_chmod(struct __test_metadata *_metadata, const char *dir,
		       const char *rel, mode_t mode)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	ASSERT_EQ(0, chmod(path, mode));
}

/*
 * A set-user-ID host file the guest writes or truncates loses the bit on
 * the host, even with a root vmm (whose own writes keep it on Linux):
 * through write, the io_uring descriptor, truncate and O_TRUNC.
 */
TEST_F(bind, write_drops_host_setuid)
{
	struct fs_backend *b = self->b;
	struct fuse_setattr_in in;
	struct fuse_attr a;
	uint64_t file, fh;
	uint32_t of;
	int fd;

	ASSERT_EQ(0, lookup(b, ROOT, "file", &file));
	host_chmod(_metadata, self->src, "file", 06755);
	ASSERT_EQ(0, b->ops->open(b, file, O_WRONLY, &fh, &of));
	EXPECT_EQ(S_IFREG | 06755, host_mode(self->src, "file"));
	EXPECT_EQ(2, bwrite(b, file, fh, "hi", 0));
	EXPECT_EQ(S_IFREG | 0755, host_mode(self->src, "file"));
	EXPECT_EQ(0, b->ops->release(b, file, fh));

	host_chmod(_metadata, self->src, "file", 04755);
	ASSERT_EQ(0, b->ops->open(b, file, O_RDWR, &fh, &of));
	fd = b->ops->io_fd(b, file, fh, true);
	ASSERT_LE(0, fd);
	EXPECT_EQ(S_IFREG | 0755, host_mode(self->src, "file"));
	EXPECT_EQ(0, b->ops->release(b, file, fh));

	host_chmod(_metadata, self->src, "file", 04755);
	in = (struct fuse_setattr_in){ .valid = FATTR_SIZE, .size = 1 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(S_IFREG | 0755, a.mode);

	/* set-group-ID without group execute is not a privilege: kept */
	host_chmod(_metadata, self->src, "file", 04745 | S_ISGID);
	ASSERT_EQ(0, b->ops->open(b, file, O_WRONLY | O_TRUNC, &fh, &of));
	EXPECT_EQ(S_IFREG | 02745, host_mode(self->src, "file"));
	EXPECT_EQ(0, b->ops->release(b, file, fh));

	/* FATTR_KILL_SUIDGID, and the kill_suidgid op (KILLPRIV_V2) */
	host_chmod(_metadata, self->src, "file", 04755);
	in = (struct fuse_setattr_in){ .valid = FATTR_KILL_SUIDGID };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, file, &in, &a));
	EXPECT_EQ(S_IFREG | 0755, a.mode);
	host_chmod(_metadata, self->src, "file", 06775);
	ASSERT_NE(NULL, b->ops->kill_suidgid);
	EXPECT_EQ(0, b->ops->kill_suidgid(b, file));
	EXPECT_EQ(S_IFREG | 0775, host_mode(self->src, "file"));
	EXPECT_EQ(-ESTALE, b->ops->kill_suidgid(b, 424242));
}

/*
 * A file (not its directory) a host process moves out of the share:
 * neither chmod, chown, utimes nor link reach it any more.
 */
TEST_F(bind, moved_out_file_not_changed)
{
	struct fs_backend *b = self->b;
	struct fuse_setattr_in in;
	char p1[160], p2[160];
	uint64_t dir, inner;
	struct fuse_attr a;
	struct fs_entry e;

	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, lookup(b, dir, "inner", &inner));
	snprintf(p1, sizeof(p1), "%s/dir/inner", self->src);
	snprintf(p2, sizeof(p2), "%s/inner", self->out);
	ASSERT_EQ(0, rename(p1, p2));
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 0777 };
	EXPECT_EQ(-ESTALE, b->ops->setattr(b, &ctx, inner, &in, &a));
	in = (struct fuse_setattr_in){ .valid = FATTR_MTIME, .mtime = 1 };
	EXPECT_EQ(-ESTALE, b->ops->setattr(b, &ctx, inner, &in, &a));
	EXPECT_EQ(S_IFREG | 0644, host_mode(self->out, "inner"));
	EXPECT_EQ(-ESTALE, b->ops->link(b, inner, ROOT, "back", &e));
	EXPECT_FALSE(exists(self->src, "back"));
	/* Moved back: served again. */
	ASSERT_EQ(0, rename(p2, p1));
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 0600 };
	EXPECT_EQ(0, b->ops->setattr(b, &ctx, inner, &in, &a));
	EXPECT_EQ(0, b->ops->link(b, inner, ROOT, "back", &e));
}

/* ---- ownership "mapped" --------------------------------------------- */

static const struct fs_ctx agent = { .uid = 1000, .gid = 1000, .pid = 2 };

/* A mapped bind of self->src, failing loudly where it cannot be one. */
static void mapped_bind(struct __test_metadata *_metadata,
			FIXTURE_DATA(bind) * self, bool ro)
{
	ASSERT_EQ(1, holds_user_xattrs(self->top))
	TH_LOG("%s cannot hold user.* xattrs, nor could /tmp, /var/tmp or "
	       "the working directory: run the test from a build tree on "
	       "ext4, xfs, btrfs or tmpfs (Linux 6.6+)",
	       self->top);
	self->own = FS_OWNERSHIP_MAPPED;
	ASSERT_EQ(0, bind_new(self, ro, NULL, 0, false));
}

/* The raw user.kiln.stat of src/rel: its length, or -errno. */
static ssize_t raw_meta(const char *dir, const char *rel, uint8_t *buf,
			size_t size)
{
	char path[512];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	n = lgetxattr(path, "user.kiln.stat", buf, size);
	return n < 0 ? -errno : n;
}

static uint32_t le32_at(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void host_owned_safe(struct __test_metadata *_metadata, const char *dir,
			    const char *rel)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(geteuid(), st.st_uid) TH_LOG("%s", rel);
	EXPECT_EQ(0, st.st_mode & (S_ISUID | S_ISGID | S_ISVTX))
	TH_LOG("%s: %o", rel, st.st_mode);
	EXPECT_TRUE(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) ||
		    S_ISLNK(st.st_mode))
	TH_LOG("%s: %o", rel, st.st_mode);
	if (!S_ISLNK(st.st_mode))
		EXPECT_EQ(S_ISDIR(st.st_mode) ? 0700 : 0600,
			  st.st_mode & (S_ISDIR(st.st_mode) ? 0700 : 0600));
}

TEST_F(bind, mapped_create_chown_chmod)
{
	struct fuse_setattr_in in;
	struct fs_backend *b;
	uint64_t f, d, sub, fh;
	uint8_t raw[64];
	struct fuse_attr a;
	struct fs_entry e;
	uint32_t of;

	mapped_bind(_metadata, self, false);
	b = self->b;
	umask(077);
	/* A non-root guest user's set-user-ID program. */
	ASSERT_EQ(0, b->ops->create(b, &agent, ROOT, "prog", S_IFREG | 04755,
				    O_RDWR, 022, &e, &fh, &of));
	f = e.nodeid;
	EXPECT_EQ(S_IFREG | 04755, e.attr.mode);
	EXPECT_EQ(1000, e.attr.uid);
	EXPECT_EQ(1000, e.attr.gid);
	EXPECT_EQ(S_IFREG | 0755, host_mode(self->src, "prog"));
	host_owned_safe(_metadata, self->src, "prog");
	ASSERT_EQ(20, raw_meta(self->src, "prog", raw, sizeof(raw)));
	EXPECT_EQ(1, raw[0]);
	EXPECT_EQ(0, raw[1] | raw[2] | raw[3]);
	EXPECT_EQ(1000, le32_at(raw + 4));
	EXPECT_EQ(1000, le32_at(raw + 8));
	EXPECT_EQ(S_IFREG | 04755, le32_at(raw + 12));
	EXPECT_EQ(0, le32_at(raw + 16));
	/* A write by a writer without CAP_FSETID (KILLPRIV_V2) */
	EXPECT_EQ(0, b->ops->kill_suidgid(b, f));
	EXPECT_EQ(2, bwrite(b, f, fh, "#!", 0));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(S_IFREG | 0755, a.mode);
	EXPECT_EQ(2, a.size);
	EXPECT_EQ(0, b->ops->release(b, f, fh));

	/* chown and chmod: the xattr changes, the host owner does not. */
	in = (struct fuse_setattr_in){ .valid = FATTR_UID | FATTR_GID,
				       .uid = 2000,
				       .gid = 3000 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, f, &in, &a));
	EXPECT_EQ(2000, a.uid);
	EXPECT_EQ(3000, a.gid);
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 06711 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, f, &in, &a));
	EXPECT_EQ(S_IFREG | 06711, a.mode);
	EXPECT_EQ(S_IFREG | 0711, host_mode(self->src, "prog"));
	/* chown clears set-user-ID, and set-group-ID (group-executable) */
	in = (struct fuse_setattr_in){ .valid = FATTR_UID | FATTR_KILL_SUIDGID,
				       .uid = 1000 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, f, &in, &a));
	EXPECT_EQ(S_IFREG | 0711, a.mode);
	EXPECT_EQ(1000, a.uid);
	/* chmod 000 in the guest: the vmm's user still reads it */
	in = (struct fuse_setattr_in){ .valid = FATTR_MODE, .mode = 0 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, f, &in, &a));
	EXPECT_EQ(S_IFREG, a.mode);
	EXPECT_EQ(S_IFREG | 0600, host_mode(self->src, "prog"));
	b->ops->forget(b, f, 1);
	ASSERT_EQ(0, lookup(b, ROOT, "prog", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(S_IFREG, a.mode);
	EXPECT_EQ(1000, a.uid);
	EXPECT_EQ(3000, a.gid);

	/* Directories: sticky and set-group-ID in the guest only. */
	ASSERT_EQ(0, b->ops->mkdir(b, &agent, ROOT, "shared", 03777, 0, &e));
	d = e.nodeid;
	EXPECT_EQ(S_IFDIR | 03777, e.attr.mode);
	EXPECT_EQ(S_IFDIR | 0777, host_mode(self->src, "shared"));
	host_owned_safe(_metadata, self->src, "shared");
	/* In a set-group-ID directory: its group, and for a dir its bit. */
	ASSERT_EQ(0, b->ops->mkdir(b, &ctx, d, "sub", 0755, 022, &e));
	sub = e.nodeid;
	EXPECT_EQ(S_IFDIR | 02755, e.attr.mode);
	EXPECT_EQ(0, e.attr.uid);
	EXPECT_EQ(1000, e.attr.gid);
	ASSERT_EQ(0,
		  b->ops->mknod(b, &ctx, sub, "f", S_IFREG | 0644, 0, 0, &e));
	EXPECT_EQ(1000, e.attr.gid);
	host_owned_safe(_metadata, self->src, "shared/sub/f");

	/* Symlinks hold no xattr: chown to another id is EOPNOTSUPP. */
	ASSERT_EQ(0, b->ops->symlink(b, &agent, ROOT, "ln", "prog", &e));
	EXPECT_EQ(0, e.attr.uid);
	in = (struct fuse_setattr_in){ .valid = FATTR_UID, .uid = 1000 };
	EXPECT_EQ(-EOPNOTSUPP, b->ops->setattr(b, &ctx, e.nodeid, &in, &a));
	in.uid = 0;
	EXPECT_EQ(0, b->ops->setattr(b, &ctx, e.nodeid, &in, &a));
}

TEST_F(bind, mapped_special_files)
{
	static const struct {
		const char *name;
		uint32_t mode, rdev;
	} nodes[] = {
		{ "null", S_IFCHR | 0666, (1 << 8) | 3 },
		{ "sda", S_IFBLK | 0660, (8 << 8) | 0 },
		{ "fifo", S_IFIFO | 0620, 0 },
		{ "sock", S_IFSOCK | 0755, 0 },
	};
	struct fs_backend *b;
	struct fuse_attr a;
	struct fs_entry e;
	unsigned int i;
	uint64_t id, fh;
	uint32_t of;

	mapped_bind(_metadata, self, false);
	b = self->b;
	for (i = 0; i < ARRAY_SIZE(nodes); i++) {
		ASSERT_EQ(0, b->ops->mknod(b, &agent, ROOT, nodes[i].name,
					   nodes[i].mode, nodes[i].rdev, 0, &e))
		TH_LOG("%s", nodes[i].name);
		id = e.nodeid;
		EXPECT_EQ(nodes[i].mode, e.attr.mode);
		EXPECT_EQ(nodes[i].rdev, e.attr.rdev);
		EXPECT_EQ(1000, e.attr.uid);
		/* On the host: an empty regular file of the vmm's user. */
		EXPECT_EQ(S_IFREG | 0600, host_mode(self->src, nodes[i].name));
		host_owned_safe(_metadata, self->src, nodes[i].name);
		/* Never opened, whatever the host file is. */
		EXPECT_EQ(-ENXIO, b->ops->open(b, id, O_RDONLY, &fh, &of));
		EXPECT_EQ(-ENXIO, b->ops->create(b, &ctx, ROOT, nodes[i].name,
						 S_IFREG | 0644, O_RDWR, 0, &e,
						 &fh, &of));
		/* Written to on the host: still the guest's device. */
		ASSERT_EQ(0, put(self->src, nodes[i].name, "host data"));
		b->ops->forget(b, id, 2);
		ASSERT_EQ(0, lookup(b, ROOT, nodes[i].name, &id));
		ASSERT_EQ(0, battr(b, id, &a));
		EXPECT_EQ(nodes[i].mode, a.mode);
		EXPECT_EQ(0, a.size);
	}
}

/*
 * Files made on the host show their host owner (the vmm's as 0) and
 * real mode; renames and hard links carry the guest's metadata; a
 * read-only bind and mask storage show the same.
 */
TEST_F(bind, mapped_host_files_rename_link_ro_masks)
{
	const char *masks[] = { "/masked" };
	struct fs_backend *b;
	uint64_t f, other, m, dir;
	struct fuse_attr a;
	struct fs_entry e;
	char path[160];

	ASSERT_EQ(0, put(self->src, "other", "theirs\n"));
	snprintf(path, sizeof(path), "%s/other", self->src);
	ASSERT_EQ(0, chown(path, OTHER_UID, OTHER_GID));
	ASSERT_EQ(0, chmod(path, 0640));
	mapped_bind(_metadata, self, false);
	b = self->b;
	ASSERT_EQ(0, lookup(b, ROOT, "file", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(0, a.uid);
	EXPECT_EQ(S_IFREG | 0644, a.mode);
	ASSERT_EQ(0, lookup(b, ROOT, "other", &other));
	ASSERT_EQ(0, battr(b, other, &a));
	EXPECT_EQ(OTHER_UID, a.uid);
	EXPECT_EQ(OTHER_GID, a.gid);
	EXPECT_EQ(S_IFREG | 0640, a.mode);

	ASSERT_EQ(0, b->ops->mknod(b, &agent, ROOT, "mine", S_IFREG | 0604, 0,
				   0, &e));
	ASSERT_EQ(0, lookup(b, ROOT, "dir", &dir));
	ASSERT_EQ(0, b->ops->rename(b, ROOT, "mine", dir, "moved", 0));
	ASSERT_EQ(0, b->ops->link(b, e.nodeid, ROOT, "hard", &e));
	EXPECT_EQ(1000, e.attr.uid);
	EXPECT_EQ(2, e.attr.nlink);

	/* The same tree read-only: the same metadata. */
	mapped_bind(_metadata, self, true);
	b = self->b;
	ASSERT_EQ(0, lookup(b, ROOT, "hard", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(1000, a.uid);
	EXPECT_EQ(1000, a.gid);
	EXPECT_EQ(S_IFREG | 0604, a.mode);

	/* Masks: what the guest makes in storage carries it too. */
	ASSERT_EQ(0, bind_new(self, false, masks, 1, true));
	b = self->b;
	ASSERT_EQ(0, b->ops->mkdir(b, &agent, ROOT, "masked", 0750, 0, &e));
	m = e.nodeid;
	ASSERT_EQ(0, b->ops->mknod(b, &agent, m, "dev", S_IFCHR | 0600, 0x0105,
				   0, &e));
	EXPECT_FALSE(exists(self->src, "masked/dev"));
	host_owned_safe(_metadata, self->sto, "masked/dev");
	b->ops->forget(b, e.nodeid, 1);
	ASSERT_EQ(0, lookup(b, m, "dev", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(S_IFCHR | 0600, a.mode);
	EXPECT_EQ(0x0105, a.rdev);
	EXPECT_EQ(1000, a.uid);
}

/*
 * A host process writing user.kiln.stat: a record that does not fit
 * the host file (a "directory" that is a file, a bad size or version)
 * is ignored with one line; the server keeps the host's type.
 */
TEST_F(bind, mapped_hostile_host_xattrs)
{
	static const uint8_t dir_on_file[20] = {
		1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0xed, 0x41, 0, 0,
	}; /* version 1, uid 1, gid 1, S_IFDIR | 0755 */
	static const uint8_t v2[20] = { 2 };
	struct fuse_setattr_in in = { .valid = FATTR_UID, .uid = 7 };
	struct stderr_capture cap = { .saved = -1 };
	struct fs_backend *b;
	struct fuse_attr a;
	char path[160], log[2048];
	uint64_t f;

	mapped_bind(_metadata, self, false);
	b = self->b;
	snprintf(path, sizeof(path), "%s/file", self->src);
	ASSERT_EQ(0, lsetxattr(path, "user.kiln.stat", dir_on_file, 20, 0));
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(1, stderr_capture__end(&cap, log, sizeof(log)));
	EXPECT_NE(NULL, strstr(log, "user.kiln.stat")) TH_LOG("%s", log);
	EXPECT_EQ(S_IFREG | 0644, a.mode);
	EXPECT_EQ(0, a.uid);
	ASSERT_EQ(0, lsetxattr(path, "user.kiln.stat", v2, 20, 0));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(S_IFREG | 0644, a.mode);
	ASSERT_EQ(0, lsetxattr(path, "user.kiln.stat", v2, 7, 0));
	ASSERT_EQ(0, lookup(b, ROOT, "file", &f));
	ASSERT_EQ(0, battr(b, f, &a));
	EXPECT_EQ(S_IFREG | 0644, a.mode);
	/* The guest's own chown makes it a good record again. */
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, f, &in, &a));
	EXPECT_EQ(7, a.uid);
}

/*
 * A host file system without user xattrs (procfs stands in for tmpfs
 * before Linux 6.6 or NFS): "mapped" refuses with one line, the
 * default falls back to squash with one line.
 */
TEST_F(bind, mapped_needs_user_xattrs)
{
	struct fs_bind_params p = { .source = "/proc/sys",
				    .ownership = FS_OWNERSHIP_MAPPED };
	struct stderr_capture cap = { .saved = -1 };
	struct fs_backend *b = NULL;
	struct fuse_attr a;
	char log[2048];

	expect_refused(_metadata, &p, -EOPNOTSUPP,
		       "cannot hold user.* extended attributes");
	p.ownership = FS_OWNERSHIP_DEFAULT;
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(0, passthrough__create(&b, &p));
	EXPECT_EQ(1, stderr_capture__end(&cap, log, sizeof(log)));
	EXPECT_NE(NULL, strstr(log, "ownership \"squash\"")) TH_LOG("%s", log);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, battr(b, ROOT, &a));
	EXPECT_EQ(S_IFDIR, a.mode & S_IFMT);
	fs_backend__destroy(b);
	/* And a source that holds them: mapped by default, no line. */
	p.source = self->src;
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(0, passthrough__create(&b, &p));
	EXPECT_EQ(0, stderr_capture__end(&cap, log, sizeof(log)));
	ASSERT_NE(NULL, b);
	EXPECT_EQ(0, b->ops->mknod(b, &ctx, ROOT, "c", S_IFCHR | 0600, 0x0103,
				   0, &(struct fs_entry){ 0 }));
	fs_backend__destroy(b);
}

/* ---- ownership "passthrough" ---------------------------------------- */

TEST_F(bind, passthrough_real_owners)
{
	struct fuse_setattr_in in;
	struct fs_backend *b;
	struct fuse_attr a;
	struct fs_entry e;
	char path[160];
	struct stat st;
	pid_t pid;
	int status;

	if (geteuid())
		SKIP(return, "ownership passthrough needs root");
	self->own = FS_OWNERSHIP_PASSTHROUGH;
	ASSERT_EQ(0, bind_new(self, false, NULL, 0, false));
	b = self->b;
	ASSERT_EQ(0, b->ops->mknod(b, &agent, ROOT, "p", S_IFREG | 04755, 0,
				   022, &e));
	EXPECT_EQ(S_IFREG | 04755, e.attr.mode);
	snprintf(path, sizeof(path), "%s/p", self->src);
	ASSERT_EQ(0, lstat(path, &st));
	EXPECT_EQ(1000, st.st_uid);
	EXPECT_EQ(1000, st.st_gid);
	EXPECT_EQ(-EPERM, b->ops->mknod(b, &ctx, ROOT, "null", S_IFCHR | 0666,
					0x0103, 0, &e));
	in = (struct fuse_setattr_in){ .valid = FATTR_UID, .uid = 0 };
	ASSERT_EQ(0, b->ops->setattr(b, &ctx, e.nodeid, &in, &a));
	EXPECT_EQ(0, a.uid);
	/* Not root: refused at create, in one line. */
	ASSERT_EQ(0, chmod(self->top, 0755));
	fflush(stdout);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct fs_bind_params p = {
			.source = self->src,
			.ownership = FS_OWNERSHIP_PASSTHROUGH,
		};
		struct fs_backend *nb = NULL;

		if (setresuid(DROP_ID, DROP_ID, DROP_ID))
			_exit(2);
		_exit(passthrough__create(&nb, &p) == -EPERM && !nb ? 0 : 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, WEXITSTATUS(status));
}

TEST_HARNESS_MAIN
