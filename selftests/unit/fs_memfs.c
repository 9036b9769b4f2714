// SPDX-License-Identifier: GPL-2.0
/*
 * The `memory` virtio-fs backend (devices/fs/memfs.c), driven through its
 * ops as the FUSE server would: the seed, every op's success and error
 * cases, rename, links, sparse files, accounting against max_bytes,
 * readdir resumed under churn, hostile node ids and a random-ops fuzz.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/compiler.h"
#include "devices/fs/memfs.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define ROOT	 FUSE_ROOT_ID
#define KiB	 1024ULL
#define MiB	 (1024 * KiB)
#define TiB	 (1024 * 1024 * MiB)
#define PAGE	 4096U
#define UMASK	 022U
#define BOGUS_ID 0x7777777777ULL

static const struct fs_ctx ctx = { .uid = 1000, .gid = 100, .pid = 42 };

/* ---- helpers -------------------------------------------------------- */

static struct fs_backend *make_fs(struct __test_metadata *_metadata,
				  const struct memfs_file *files,
				  unsigned int nr, uint64_t max_bytes)
{
	struct memfs_params p = {
		.name = "test",
		.files = files,
		.nr_files = nr,
		.max_bytes = max_bytes,
	};
	struct fs_backend *b = NULL;

	ASSERT_EQ(0, memfs__create(&b, &p));
	ASSERT_NE(NULL, b);
	return b;
}

static int lookup(struct fs_backend *b, uint64_t parent, const char *name,
		  struct fs_entry *e)
{
	return b->ops->lookup(b, parent, name, e);
}

/* The node id of parent/name, or a negative errno. */
static int64_t id_of(struct fs_backend *b, uint64_t parent, const char *name)
{
	struct fs_entry e;
	int err = lookup(b, parent, name, &e);

	return err ? err : (int64_t)e.nodeid;
}

static struct fuse_attr attr_of(struct __test_metadata *_metadata,
				struct fs_backend *b, uint64_t id)
{
	struct fuse_attr a;

	ASSERT_EQ(0, b->ops->getattr(b, id, &a));
	return a;
}

static uint64_t mkfile(struct __test_metadata *_metadata, struct fs_backend *b,
		       uint64_t parent, const char *name, uint32_t mode)
{
	struct fs_entry e;

	ASSERT_EQ(0, b->ops->mknod(b, &ctx, parent, name, S_IFREG | mode, 0,
				   UMASK, &e));
	return e.nodeid;
}

static uint64_t mkdir_(struct __test_metadata *_metadata, struct fs_backend *b,
		       uint64_t parent, const char *name)
{
	struct fs_entry e;

	ASSERT_EQ(0, b->ops->mkdir(b, &ctx, parent, name, 0777, UMASK, &e));
	return e.nodeid;
}

static uint64_t open_(struct __test_metadata *_metadata, struct fs_backend *b,
		      uint64_t id, uint32_t flags)
{
	uint32_t oflags;
	uint64_t fh;

	ASSERT_EQ(0, b->ops->open(b, id, flags, &fh, &oflags));
	return fh;
}

static ssize_t pwrite_(struct fs_backend *b, uint64_t id, uint64_t fh,
		       const void *buf, size_t len, uint64_t off)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return b->ops->write(b, id, fh, &iov, 1, off);
}

static ssize_t pread_(struct fs_backend *b, uint64_t id, uint64_t fh, void *buf,
		      size_t len, uint64_t off)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return b->ops->read(b, id, fh, &iov, 1, off);
}

/* Whole content of a file (up to len bytes) into buf, NUL-terminated. */
static ssize_t slurp(struct __test_metadata *_metadata, struct fs_backend *b,
		     uint64_t id, char *buf, size_t len)
{
	uint64_t fh = open_(_metadata, b, id, O_RDONLY);
	ssize_t n = pread_(b, id, fh, buf, len - 1, 0);

	ASSERT_EQ(0, b->ops->release(b, id, fh));
	ASSERT_LE(0, n);
	buf[n] = '\0';
	return n;
}

static struct fuse_kstatfs statfs_(struct __test_metadata *_metadata,
				   struct fs_backend *b)
{
	struct fuse_kstatfs st;

	ASSERT_EQ(0, b->ops->statfs(b, ROOT, &st));
	return st;
}

static int setattr_(struct fs_backend *b, uint64_t id,
		    struct fuse_setattr_in *in, struct fuse_attr *out)
{
	return b->ops->setattr(b, &ctx, id, in, out);
}

static int truncate_(struct fs_backend *b, uint64_t id, uint64_t size)
{
	struct fuse_setattr_in in = { .valid = FATTR_SIZE, .size = size };
	struct fuse_attr a;

	return setattr_(b, id, &in, &a);
}

static int64_t ts_ns(uint64_t sec, uint32_t nsec)
{
	return (int64_t)sec * 1000000000LL + nsec;
}

/*
 * The free space, exactly. statfs counts whole 4 KiB blocks; a symlink
 * of target length L charges a fixed cost A plus L + 1 bytes, so over
 * L = 1..4096 the free block count drops by one exactly once, at an L
 * that gives the free bytes modulo 4096. Returns bfree(L = 1) * 4096 plus
 * that L (0 when there is no drop): equal values mean equal free bytes.
 */
static uint64_t free_fingerprint(struct __test_metadata *_metadata,
				 struct fs_backend *b)
{
	static char target[FS_PATH_MAX + 1];
	unsigned int lo = 1, hi = FS_PATH_MAX, mid;
	uint64_t base;
	struct fs_entry e;

	memset(target, 'x', FS_PATH_MAX);
#define PROBE(len)                                                            \
	({                                                                    \
		struct fuse_kstatfs __st;                                     \
		target[len] = '\0';                                           \
		ASSERT_EQ(0, b->ops->symlink(b, &ctx, ROOT, "~probe", target, \
					     &e));                            \
		ASSERT_EQ(0, b->ops->statfs(b, ROOT, &__st));                 \
		ASSERT_EQ(0, b->ops->unlink(b, ROOT, "~probe"));              \
		b->ops->forget(b, e.nodeid, 1);                               \
		target[len] = 'x';                                            \
		__st.bfree;                                                   \
	})
	base = PROBE(1);
	if (PROBE(FS_PATH_MAX) == base)
		return base * PAGE;
	/* The smallest L whose bfree is below base. */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (PROBE(mid) < base)
			hi = mid;
		else
			lo = mid + 1;
	}
#undef PROBE
	return base * PAGE + lo;
}

/* Lists a directory with a buffer of bufsize, from offset 0 to the end. */
struct listing {
	char names[64][FS_NAME_MAX + 1];
	uint64_t ino[64];
	uint32_t type[64];
	unsigned int n;
};

static void list_dir(struct __test_metadata *_metadata, struct fs_backend *b,
		     uint64_t dir, struct listing *l)
{
	uint8_t buf[4096];
	struct fs_dirbuf db;
	uint64_t fh, off = 0;
	size_t pos;

	l->n = 0;
	ASSERT_EQ(0, b->ops->opendir(b, dir, &fh));
	for (;;) {
		db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
		ASSERT_EQ(0, b->ops->readdir(b, dir, fh, off, &db));
		if (!db.used)
			break;
		for (pos = 0; pos < db.used;) {
			struct fuse_dirent *de = (void *)(buf + pos);

			ASSERT_LT(l->n, 64U);
			memcpy(l->names[l->n], de->name, de->namelen);
			l->names[l->n][de->namelen] = '\0';
			l->ino[l->n] = de->ino;
			l->type[l->n] = de->type;
			l->n++;
			ASSERT_GT(de->off, off);
			off = de->off;
			pos += FUSE_DIRENT_SIZE(de);
		}
	}
	ASSERT_EQ(0, b->ops->releasedir(b, dir, fh));
}

/* ---- the seed ------------------------------------------------------- */

TEST(seed)
{
	static const char conf[] = "token=abc\n";
	struct memfs_file files[] = {
		{ "/etc/agent.conf", conf, sizeof(conf) - 1 },
		{ "/etc/kiln/a/b", "bee", 3 },
		{ "/empty", NULL, 0 },
	};
	struct fs_backend *b = make_fs(_metadata, files, 3, 0);
	struct fuse_attr a;
	struct listing l;
	int64_t etc, kiln, id;
	char buf[64];

	EXPECT_STREQ("memory:test", b->name);
	EXPECT_FALSE(b->read_only);
	etc = id_of(b, ROOT, "etc");
	ASSERT_LT(1, etc);
	a = attr_of(_metadata, b, etc);
	EXPECT_EQ(S_IFDIR | 0755U, a.mode);
	EXPECT_EQ(3U, a.nlink); /* ".", its entry and kiln's ".." */
	EXPECT_EQ(0U, a.uid);
	EXPECT_EQ(
		3U,
		attr_of(_metadata, b, ROOT).nlink); /* etc; /empty is a file */

	id = id_of(b, etc, "agent.conf");
	ASSERT_LT(1, id);
	a = attr_of(_metadata, b, id);
	EXPECT_EQ(S_IFREG | 0644U, a.mode);
	EXPECT_EQ(sizeof(conf) - 1, a.size);
	EXPECT_EQ(1U, a.nlink);
	EXPECT_EQ(8U, a.blocks);
	EXPECT_EQ((ssize_t)sizeof(conf) - 1, slurp(_metadata, b, id, buf, 64));
	EXPECT_STREQ(conf, buf);

	kiln = id_of(b, etc, "kiln");
	id = id_of(b, id_of(b, kiln, "a"), "b");
	ASSERT_LT(1, id);
	slurp(_metadata, b, id, buf, 64);
	EXPECT_STREQ("bee", buf);

	id = id_of(b, ROOT, "empty");
	ASSERT_LT(1, id);
	EXPECT_EQ(0U, attr_of(_metadata, b, id).size);
	EXPECT_EQ(0U, attr_of(_metadata, b, id).blocks);

	list_dir(_metadata, b, ROOT, &l);
	ASSERT_EQ(4U, l.n);
	EXPECT_STREQ(".", l.names[0]);
	EXPECT_STREQ("..", l.names[1]);
	EXPECT_EQ(ROOT, l.ino[1]);
	EXPECT_STREQ("etc", l.names[2]);
	EXPECT_EQ(DT_DIR, l.type[2]);
	EXPECT_STREQ("empty", l.names[3]);
	EXPECT_EQ(DT_REG, l.type[3]);
	fs_backend__destroy(b);
	fs_backend__destroy(NULL);
}

static void expect_bad_seed(struct __test_metadata *_metadata,
			    const struct memfs_file *files, unsigned int nr,
			    uint64_t max_bytes, int want, const char *path,
			    const char *why)
{
	struct memfs_params p = {
		.name = "bad",
		.files = files,
		.nr_files = nr,
		.max_bytes = max_bytes,
	};
	struct stderr_capture cap = { 0 };
	struct fs_backend *b = NULL;
	char log[1024];

	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(want, memfs__create(&b, &p));
	EXPECT_EQ(1, stderr_capture__end(&cap, log, sizeof(log)));
	EXPECT_EQ(NULL, b);
	EXPECT_NE(NULL, strstr(log, path)) TH_LOG("log: %s", log);
	EXPECT_NE(NULL, strstr(log, why)) TH_LOG("log: %s", log);
}

TEST(seed_rejects)
{
	char longname[FS_NAME_MAX + 3], path[FS_NAME_MAX + 8];
	struct memfs_file f[2] = { 0 };
	static char big[64 * 1024];

	f[0] = (struct memfs_file){ "etc/x", "", 0 };
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, "etc/x", "absolute");
	f[0].path = "/etc/./x";
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, "/etc/./x", "\"..\"");
	f[0].path = "/etc/../x";
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, "/etc/../x", "\"..\"");
	f[0].path = "/etc//x";
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, "/etc//x", "empty");
	f[0].path = "/etc/";
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, "/etc/", "empty");
	f[0].path = "/";
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, "\"/\"", "empty");

	memset(longname, 'n', FS_NAME_MAX + 1);
	longname[FS_NAME_MAX + 1] = '\0';
	snprintf(path, sizeof(path), "/%s", longname);
	f[0].path = path;
	expect_bad_seed(_metadata, f, 1, 0, -EINVAL, longname, "longer");
	/* 255 bytes is fine. */
	longname[FS_NAME_MAX] = '\0';
	snprintf(path, sizeof(path), "/%s", longname);
	fs_backend__destroy(make_fs(_metadata, f, 1, 0));

	f[0] = (struct memfs_file){ "/a/b", "1", 1 };
	f[1] = (struct memfs_file){ "/a/b", "2", 1 };
	expect_bad_seed(_metadata, f, 2, 0, -EINVAL, "/a/b", "duplicate");
	f[1].path = "/a/b/c";
	expect_bad_seed(_metadata, f, 2, 0, -EINVAL, "/a/b/c",
			"parent is also a seed file");
	f[0].path = "/a/b/c";
	f[1].path = "/a/b";
	expect_bad_seed(_metadata, f, 2, 0, -EINVAL, "/a/b", "also a parent");

	/* Seed data counts against max_bytes. */
	f[0] = (struct memfs_file){ "/big", big, sizeof(big) };
	expect_bad_seed(_metadata, f, 1, 32 * KiB, -ENOSPC, "/big",
			"does not fit");
	fs_backend__destroy(make_fs(_metadata, f, 1, 128 * KiB));
}

/* ---- creating ops --------------------------------------------------- */

TEST(create_modes_owner_types)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	struct fs_entry e, e2;
	struct fuse_attr a;
	uint64_t f, d, fh, sgid;
	char buf[16];
	uint32_t of;

	f = mkfile(_metadata, b, ROOT, "f", 0666);
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(S_IFREG | 0644U, a.mode);
	EXPECT_EQ(1000U, a.uid);
	EXPECT_EQ(100U, a.gid);
	EXPECT_EQ(f, a.ino);
	EXPECT_EQ(4096U, a.blksize);
	EXPECT_NE(0U, a.mtime);

	d = mkdir_(_metadata, b, ROOT, "d");
	a = attr_of(_metadata, b, d);
	EXPECT_EQ(S_IFDIR | 0755U, a.mode);
	EXPECT_EQ(2U, a.nlink);
	EXPECT_EQ(3U, attr_of(_metadata, b, ROOT).nlink);

	ASSERT_EQ(0,
		  b->ops->mknod(b, &ctx, d, "fifo", S_IFIFO | 0640, 0, 0, &e));
	EXPECT_EQ(S_IFIFO | 0640U, e.attr.mode);
	ASSERT_EQ(0, b->ops->mknod(b, &ctx, d, "sock", S_IFSOCK | 0777, 0, 07,
				   &e));
	EXPECT_EQ(S_IFSOCK | 0770U, e.attr.mode);
	/* Device nodes keep the guest's numbers and are never opened. */
	ASSERT_EQ(0, b->ops->mknod(b, &ctx, d, "chr", S_IFCHR | 0620, 0x0103, 0,
				   &e));
	EXPECT_EQ(S_IFCHR | 0620U, e.attr.mode);
	EXPECT_EQ(0x0103U, e.attr.rdev);
	EXPECT_EQ(0U, e.attr.size);
	EXPECT_EQ(0x0103U, attr_of(_metadata, b, e.nodeid).rdev);
	EXPECT_EQ(-ENXIO, b->ops->open(b, e.nodeid, O_RDWR, &fh, &of));
	ASSERT_EQ(0, b->ops->mknod(b, &ctx, d, "blk", S_IFBLK | 0600,
				   0x10300801, 0, &e));
	EXPECT_EQ(S_IFBLK | 0600U, e.attr.mode);
	EXPECT_EQ(0x10300801U, e.attr.rdev);
	/* Other types carry no device number, whatever the request says. */
	ASSERT_EQ(0, b->ops->mknod(b, &ctx, d, "fifo2", S_IFIFO | 0600, 0x0103,
				   0, &e));
	EXPECT_EQ(0U, e.attr.rdev);
	EXPECT_EQ(-EINVAL,
		  b->ops->mknod(b, &ctx, d, "dir", S_IFDIR | 0755, 0, 0, &e));

	EXPECT_EQ(-EEXIST,
		  b->ops->mknod(b, &ctx, ROOT, "f", S_IFREG | 0600, 0, 0, &e));
	EXPECT_EQ(-EEXIST, b->ops->mkdir(b, &ctx, ROOT, "d", 0700, 0, &e));
	EXPECT_EQ(-EEXIST, b->ops->symlink(b, &ctx, ROOT, "f", "x", &e));
	EXPECT_EQ(-EEXIST, b->ops->create(b, &ctx, ROOT, "d", 0600, O_RDWR, 0,
					  &e, &fh, &of));
	/* A file is no directory. */
	EXPECT_EQ(-ENOTDIR,
		  b->ops->mknod(b, &ctx, f, "x", S_IFREG | 0600, 0, 0, &e));
	EXPECT_EQ(-ENOTDIR, b->ops->mkdir(b, &ctx, f, "x", 0700, 0, &e));
	EXPECT_EQ(-ENOTDIR, b->ops->symlink(b, &ctx, f, "x", "y", &e));
	EXPECT_EQ(-ENOTDIR, b->ops->create(b, &ctx, f, "x", 0600, O_RDWR, 0, &e,
					   &fh, &of));
	EXPECT_EQ(-ENOTDIR, lookup(b, f, "x", &e));
	EXPECT_EQ(-ENOTDIR, b->ops->unlink(b, f, "x"));
	EXPECT_EQ(-ENOTDIR, b->ops->rmdir(b, f, "x"));
	EXPECT_EQ(-ENOTDIR, b->ops->opendir(b, f, &fh));
	EXPECT_EQ(-ENOTDIR, b->ops->link(b, f, f, "x", &e));
	EXPECT_EQ(-ENOTDIR, b->ops->rename(b, f, "x", ROOT, "y", 0));
	/* Missing. */
	EXPECT_EQ(-ENOENT, lookup(b, ROOT, "nope", &e));
	EXPECT_EQ(-ENOENT, b->ops->unlink(b, ROOT, "nope"));
	EXPECT_EQ(-ENOENT, b->ops->rmdir(b, ROOT, "nope"));
	EXPECT_EQ(-ENOENT, b->ops->rename(b, ROOT, "nope", ROOT, "x", 0));

	/* create opens what it makes. */
	ASSERT_EQ(0, b->ops->create(b, &ctx, d, "new", 0777, O_RDWR, 027, &e,
				    &fh, &of));
	EXPECT_EQ(S_IFREG | 0750U, e.attr.mode);
	EXPECT_EQ(3, pwrite_(b, e.nodeid, fh, "abc", 3, 0));
	EXPECT_EQ(0, b->ops->flush(b, e.nodeid, fh));
	EXPECT_EQ(0, b->ops->fsync(b, e.nodeid, fh, true));
	EXPECT_EQ(0, b->ops->release(b, e.nodeid, fh));
	EXPECT_EQ(-EBADF, b->ops->release(b, e.nodeid, fh));
	ASSERT_EQ(0, lookup(b, d, "new", &e2));
	EXPECT_EQ(e.nodeid, e2.nodeid);
	EXPECT_EQ(3U, e2.attr.size);

	/* Symlinks. */
	ASSERT_EQ(0, b->ops->symlink(b, &ctx, ROOT, "ln", "d/new", &e));
	EXPECT_EQ(S_IFLNK | 0777U, e.attr.mode);
	EXPECT_EQ(5U, e.attr.size);
	EXPECT_EQ(5, b->ops->readlink(b, e.nodeid, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "d/new", 5));
	EXPECT_EQ(2, b->ops->readlink(b, e.nodeid, buf, 2));
	EXPECT_EQ(-EINVAL, b->ops->readlink(b, f, buf, sizeof(buf)));
	EXPECT_EQ(-ELOOP, b->ops->open(b, e.nodeid, O_RDONLY, &fh, &of));
	EXPECT_EQ(-EISDIR, b->ops->open(b, d, O_RDONLY, &fh, &of));
	EXPECT_EQ(-ENOENT, b->ops->symlink(b, &ctx, ROOT, "empty", "", &e));

	/* A set-group-ID directory hands its group down. */
	sgid = mkdir_(_metadata, b, ROOT, "sgid");
	{
		struct fuse_setattr_in in = { .valid = FATTR_MODE | FATTR_GID,
					      .mode = 02775,
					      .gid = 4242 };

		ASSERT_EQ(0, setattr_(b, sgid, &in, &a));
	}
	ASSERT_EQ(0, b->ops->mkdir(b, &ctx, sgid, "sub", 0777, UMASK, &e));
	EXPECT_EQ(4242U, e.attr.gid);
	EXPECT_EQ(S_IFDIR | 02755U, e.attr.mode);
	ASSERT_EQ(0, b->ops->mknod(b, &ctx, sgid, "file", S_IFREG | 0644, 0,
				   UMASK, &e));
	EXPECT_EQ(4242U, e.attr.gid);
	EXPECT_EQ(S_IFREG | 0644U, e.attr.mode);
	fs_backend__destroy(b);
}

TEST(dir_nlink_rmdir_unlink)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	uint64_t a, c, f;
	struct fs_entry e;

	a = mkdir_(_metadata, b, ROOT, "a");
	mkdir_(_metadata, b, a, "b");
	c = mkdir_(_metadata, b, a, "c");
	f = mkfile(_metadata, b, c, "f", 0644);
	EXPECT_EQ(3U, attr_of(_metadata, b, ROOT).nlink);
	EXPECT_EQ(4U, attr_of(_metadata, b, a).nlink);
	EXPECT_EQ(2U, attr_of(_metadata, b, c).nlink); /* files do not count */

	EXPECT_EQ(-ENOTEMPTY, b->ops->rmdir(b, a, "c"));
	EXPECT_EQ(-ENOTEMPTY, b->ops->rmdir(b, ROOT, "a"));
	EXPECT_EQ(-ENOTDIR, b->ops->rmdir(b, c, "f"));
	EXPECT_EQ(-EISDIR, b->ops->unlink(b, a, "b"));
	EXPECT_EQ(0, b->ops->unlink(b, c, "f"));
	EXPECT_EQ(0U, attr_of(_metadata, b, f).nlink); /* still looked up */
	EXPECT_EQ(0, b->ops->rmdir(b, a, "c"));
	EXPECT_EQ(0U, attr_of(_metadata, b, c).nlink);
	EXPECT_EQ(3U, attr_of(_metadata, b, a).nlink);
	EXPECT_EQ(-ENOENT, id_of(b, a, "c"));
	/* A removed directory takes no new entries. */
	EXPECT_EQ(-ENOENT,
		  b->ops->mknod(b, &ctx, c, "x", S_IFREG | 0644, 0, 0, &e));
	EXPECT_EQ(-ENOENT, b->ops->mkdir(b, &ctx, c, "x", 0755, 0, &e));
	EXPECT_EQ(-ENOENT, b->ops->rename(b, a, "b", c, "b", 0));
	EXPECT_EQ(0, b->ops->rmdir(b, a, "b"));
	EXPECT_EQ(0, b->ops->rmdir(b, ROOT, "a"));
	EXPECT_EQ(2U, attr_of(_metadata, b, ROOT).nlink);
	/* Forgetting the last lookups frees them: ids turn stale. */
	b->ops->forget(b, f, 1);
	b->ops->forget(b, c, 1);
	{
		struct fuse_attr at;

		EXPECT_EQ(-ESTALE, b->ops->getattr(b, f, &at));
		EXPECT_EQ(-ESTALE, b->ops->getattr(b, c, &at));
		EXPECT_EQ(0, b->ops->getattr(b, a, &at)); /* not forgotten */
	}
	fs_backend__destroy(b);
}

TEST(hard_links)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	struct fs_entry e;
	uint64_t f, d, fh;
	char buf[16];

	f = mkfile(_metadata, b, ROOT, "f", 0644);
	d = mkdir_(_metadata, b, ROOT, "d");
	ASSERT_EQ(0, b->ops->link(b, f, d, "g", &e));
	EXPECT_EQ(f, e.nodeid);
	EXPECT_EQ(2U, e.attr.nlink);
	ASSERT_EQ(0, b->ops->link(b, f, ROOT, "h", &e));
	EXPECT_EQ(3U, attr_of(_metadata, b, f).nlink);
	EXPECT_EQ(f, (uint64_t)id_of(b, d, "g"));
	EXPECT_EQ(-EEXIST, b->ops->link(b, f, ROOT, "d", &e));
	EXPECT_EQ(-EPERM, b->ops->link(b, d, ROOT, "dl", &e));
	EXPECT_EQ(-ESTALE, b->ops->link(b, BOGUS_ID, ROOT, "x", &e));

	/* One inode: data written through one name reads through another. */
	fh = open_(_metadata, b, f, O_WRONLY);
	EXPECT_EQ(4, pwrite_(b, f, fh, "data", 4, 0));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	slurp(_metadata, b, id_of(b, d, "g"), buf, sizeof(buf));
	EXPECT_STREQ("data", buf);

	EXPECT_EQ(0, b->ops->unlink(b, ROOT, "f"));
	EXPECT_EQ(2U, attr_of(_metadata, b, f).nlink);
	EXPECT_EQ(0, b->ops->unlink(b, d, "g"));
	EXPECT_EQ(1U, attr_of(_metadata, b, f).nlink);
	slurp(_metadata, b, id_of(b, ROOT, "h"), buf, sizeof(buf));
	EXPECT_STREQ("data", buf);
	EXPECT_EQ(0, b->ops->unlink(b, ROOT, "h"));
	EXPECT_EQ(0U, attr_of(_metadata, b, f).nlink);
	/* Unlinked: no name can bring it back. */
	EXPECT_EQ(-ENOENT, b->ops->link(b, f, ROOT, "back", &e));
	fs_backend__destroy(b);
}

TEST(unlink_while_open)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 1 * MiB);
	static char data[64 * 1024];
	uint64_t before, f, fh, fh2;
	char buf[8];
	struct fs_entry e;
	struct fuse_attr a;
	uint32_t of;

	before = free_fingerprint(_metadata, b);
	memset(data, 'q', sizeof(data));
	ASSERT_EQ(0, b->ops->create(b, &ctx, ROOT, "f", 0644, O_RDWR, UMASK, &e,
				    &fh, &of));
	f = e.nodeid;
	ASSERT_EQ((ssize_t)sizeof(data),
		  pwrite_(b, f, fh, data, sizeof(data), 0));
	fh2 = open_(_metadata, b, f, O_RDONLY);
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "f"));
	EXPECT_EQ(-ENOENT, id_of(b, ROOT, "f"));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(0U, a.nlink);
	EXPECT_EQ(sizeof(data), a.size);
	/* The data lives, and still takes space. */
	EXPECT_LT(free_fingerprint(_metadata, b), before - 16 * PAGE);
	EXPECT_EQ(8, pread_(b, f, fh2, buf, 8, 1000));
	EXPECT_EQ(0, memcmp(buf, "qqqqqqqq", 8));
	EXPECT_EQ(8, pwrite_(b, f, fh, "12345678", 8, 0));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	EXPECT_EQ(0, b->ops->getattr(b, f, &a));
	b->ops->forget(b, f, 1);
	/* A handle still holds it. */
	EXPECT_EQ(0, b->ops->getattr(b, f, &a));
	EXPECT_EQ(0, b->ops->release(b, f, fh2));
	EXPECT_EQ(-ESTALE, b->ops->getattr(b, f, &a));
	EXPECT_EQ(before, free_fingerprint(_metadata, b));
	fs_backend__destroy(b);
}

/*
 * The session that looked files up and opened them is over (an unmount,
 * then a new INIT): its handles close and its lookups are forgotten, so
 * an unlinked file it still held goes and gives its bytes back, while
 * the files the mount holds stay, with their contents.
 */
TEST(end_session_keeps_files_and_drops_what_the_session_held)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 1 * MiB);
	static char data[64 * 1024];
	uint64_t before, gone, kept, fh, fh2;
	struct fuse_attr a;
	char buf[4];

	before = free_fingerprint(_metadata, b);
	memset(data, 'z', sizeof(data));
	gone = mkfile(_metadata, b, ROOT, "gone", 0644);
	kept = mkfile(_metadata, b, ROOT, "kept", 0644);
	fh = open_(_metadata, b, gone, O_RDWR);
	ASSERT_EQ((ssize_t)sizeof(data),
		  pwrite_(b, gone, fh, data, sizeof(data), 0));
	fh2 = open_(_metadata, b, kept, O_RDWR);
	ASSERT_EQ(4, pwrite_(b, kept, fh2, "kept", 4, 0));
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "gone"));
	EXPECT_LT(free_fingerprint(_metadata, b), before - 16 * PAGE);

	b->ops->end_session(b);
	EXPECT_EQ(-ESTALE, b->ops->getattr(b, gone, &a));
	EXPECT_EQ(-EBADF, b->ops->release(b, kept, fh2));
	EXPECT_EQ((int64_t)kept, id_of(b, ROOT, "kept"));
	fh2 = open_(_metadata, b, kept, O_RDONLY);
	EXPECT_EQ(4, pread_(b, kept, fh2, buf, 4, 0));
	EXPECT_EQ(0, memcmp(buf, "kept", 4));
	EXPECT_EQ(0, b->ops->release(b, kept, fh2));
	/* A second end with nothing held is harmless. */
	b->ops->end_session(b);
	EXPECT_EQ(0, b->ops->unlink(b, ROOT, "kept"));
	EXPECT_EQ(before, free_fingerprint(_metadata, b));
	fs_backend__destroy(b);
}

/* ---- rename --------------------------------------------------------- */

TEST(rename_matrix)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	uint64_t a, a1, x, y, d1, d2, full, f1, f2;
	struct listing l;
	struct fs_entry e;
	char buf[16];

	a = mkdir_(_metadata, b, ROOT, "a");
	a1 = mkdir_(_metadata, b, a, "a1");
	x = mkdir_(_metadata, b, ROOT, "x");
	f1 = mkfile(_metadata, b, ROOT, "f1", 0644);
	f2 = mkfile(_metadata, b, ROOT, "f2", 0644);
	{
		uint64_t fh = open_(_metadata, b, f1, O_WRONLY);

		ASSERT_EQ(3, pwrite_(b, f1, fh, "one", 3, 0));
		ASSERT_EQ(0, b->ops->release(b, f1, fh));
	}
	ASSERT_EQ(0, b->ops->link(b, f2, x, "f2link", &e));

	/* Over an existing file: it is replaced and loses a link. */
	EXPECT_EQ(0, b->ops->rename(b, ROOT, "f1", ROOT, "f2", 0));
	EXPECT_EQ(-ENOENT, id_of(b, ROOT, "f1"));
	EXPECT_EQ(f1, (uint64_t)id_of(b, ROOT, "f2"));
	EXPECT_EQ(1U, attr_of(_metadata, b, f2).nlink);
	slurp(_metadata, b, f1, buf, sizeof(buf));
	EXPECT_STREQ("one", buf);

	/* Hard links to one file: nothing happens. */
	ASSERT_EQ(0, b->ops->link(b, f1, ROOT, "f1b", &e));
	EXPECT_EQ(0, b->ops->rename(b, ROOT, "f2", ROOT, "f1b", 0));
	EXPECT_EQ(f1, (uint64_t)id_of(b, ROOT, "f2"));
	EXPECT_EQ(f1, (uint64_t)id_of(b, ROOT, "f1b"));
	EXPECT_EQ(2U, attr_of(_metadata, b, f1).nlink);
	EXPECT_EQ(0, b->ops->rename(b, ROOT, "f2", ROOT, "f2", 0));
	EXPECT_EQ(-EEXIST,
		  b->ops->rename(b, ROOT, "f2", ROOT, "f2", RENAME_NOREPLACE));

	/* Over an empty directory; over a non-empty one. */
	d1 = mkdir_(_metadata, b, ROOT, "d1");
	d2 = mkdir_(_metadata, b, x, "d2");
	EXPECT_EQ(5U, attr_of(_metadata, b, ROOT).nlink);
	full = mkdir_(_metadata, b, ROOT, "full");
	mkfile(_metadata, b, full, "inside", 0644);
	EXPECT_EQ(-ENOTEMPTY, b->ops->rename(b, ROOT, "d1", ROOT, "full", 0));
	EXPECT_EQ(0, b->ops->rename(b, ROOT, "d1", x, "d2", 0));
	EXPECT_EQ(d1, (uint64_t)id_of(b, x, "d2"));
	EXPECT_EQ(0U, attr_of(_metadata, b, d2).nlink);
	EXPECT_EQ(3U, attr_of(_metadata, b, x).nlink);
	EXPECT_EQ(5U, attr_of(_metadata, b, ROOT).nlink); /* a, x, full */
	list_dir(_metadata, b, d1, &l);
	ASSERT_EQ(2U, l.n);
	EXPECT_EQ(x, l.ino[1]); /* ".." followed the move */

	/* Type mismatches. */
	EXPECT_EQ(-ENOTDIR, b->ops->rename(b, ROOT, "a", ROOT, "f2", 0));
	EXPECT_EQ(-EISDIR, b->ops->rename(b, ROOT, "f2", ROOT, "a", 0));
	/* Into its own subtree, or onto itself as a parent. */
	EXPECT_EQ(-EINVAL, b->ops->rename(b, ROOT, "a", a1, "a", 0));
	EXPECT_EQ(-EINVAL, b->ops->rename(b, ROOT, "a", a, "z", 0));
	EXPECT_EQ(-ENOTEMPTY, b->ops->rename(b, a, "a1", ROOT, "a", 0));
	/* Flags. */
	EXPECT_EQ(-EEXIST,
		  b->ops->rename(b, ROOT, "f2", ROOT, "a", RENAME_NOREPLACE));
	EXPECT_EQ(0,
		  b->ops->rename(b, ROOT, "f2", ROOT, "f3", RENAME_NOREPLACE));
	EXPECT_EQ(-EINVAL, b->ops->rename(b, ROOT, "f3", ROOT, "f4",
					  RENAME_NOREPLACE | RENAME_EXCHANGE));
	EXPECT_EQ(-EINVAL,
		  b->ops->rename(b, ROOT, "f3", ROOT, "f4", RENAME_WHITEOUT));
	EXPECT_EQ(-ENOENT,
		  b->ops->rename(b, ROOT, "f3", ROOT, "f4", RENAME_EXCHANGE));

	/* Exchange a file and a directory across parents. */
	y = mkdir_(_metadata, b, a, "y");
	EXPECT_EQ(4U, attr_of(_metadata, b, a).nlink);
	EXPECT_EQ(0, b->ops->rename(b, ROOT, "f3", a, "y", RENAME_EXCHANGE));
	EXPECT_EQ(f1, (uint64_t)id_of(b, a, "y"));
	EXPECT_EQ(y, (uint64_t)id_of(b, ROOT, "f3"));
	EXPECT_EQ(3U, attr_of(_metadata, b, a).nlink);
	EXPECT_EQ(6U, attr_of(_metadata, b, ROOT).nlink);
	list_dir(_metadata, b, y, &l);
	EXPECT_EQ(ROOT, l.ino[1]);
	/* Exchange refuses to put a directory beneath itself. */
	EXPECT_EQ(-EINVAL,
		  b->ops->rename(b, ROOT, "a", a, "a1", RENAME_EXCHANGE));
	EXPECT_EQ(-EINVAL,
		  b->ops->rename(b, a, "a1", ROOT, "a", RENAME_EXCHANGE));
	/* Two directories in one parent. */
	EXPECT_EQ(0,
		  b->ops->rename(b, ROOT, "x", ROOT, "full", RENAME_EXCHANGE));
	EXPECT_EQ(x, (uint64_t)id_of(b, ROOT, "full"));
	EXPECT_EQ(full, (uint64_t)id_of(b, ROOT, "x"));
	EXPECT_EQ(6U, attr_of(_metadata, b, ROOT).nlink);

	/* Bad ids and names. */
	EXPECT_EQ(-ESTALE, b->ops->rename(b, BOGUS_ID, "a", ROOT, "b", 0));
	EXPECT_EQ(-ESTALE, b->ops->rename(b, ROOT, "a", BOGUS_ID, "b", 0));
	fs_backend__destroy(b);
}

/* ---- data ----------------------------------------------------------- */

TEST(sparse_terabyte)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 1 * MiB);
	struct fuse_kstatfs st0 = statfs_(_metadata, b), st1;
	uint64_t f, fh, fp;
	struct fuse_attr a;
	char buf[8192];
	size_t i;

	f = mkfile(_metadata, b, ROOT, "big", 0644);
	fh = open_(_metadata, b, f, O_RDWR);
	fp = free_fingerprint(_metadata, b);
	ASSERT_EQ(1, pwrite_(b, f, fh, "Z", 1, 1 * TiB - 1));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(1 * TiB, a.size);
	EXPECT_EQ(PAGE / 512, a.blocks); /* one chunk */
	st1 = statfs_(_metadata, b);
	/* One chunk plus the inode, entry and a few radix nodes. */
	EXPECT_GT(st0.bfree, st1.bfree);
	EXPECT_LE(st0.bfree - 3, st1.bfree);

	memset(buf, 1, sizeof(buf));
	ASSERT_EQ((ssize_t)sizeof(buf), pread_(b, f, fh, buf, sizeof(buf), 0));
	for (i = 0; i < sizeof(buf); i++)
		ASSERT_EQ(0, buf[i]);
	ASSERT_EQ((ssize_t)sizeof(buf),
		  pread_(b, f, fh, buf, sizeof(buf), TiB / 2));
	EXPECT_EQ(0, buf[4095]);
	/* Reads stop at the end of the file. */
	EXPECT_EQ(1, pread_(b, f, fh, buf, sizeof(buf), 1 * TiB - 1));
	EXPECT_EQ('Z', buf[0]);
	EXPECT_EQ(0, pread_(b, f, fh, buf, sizeof(buf), 1 * TiB));
	EXPECT_EQ(0, pread_(b, f, fh, buf, sizeof(buf), UINT64_MAX));
	EXPECT_EQ(4, pread_(b, f, fh, buf, 4, 1 * TiB - 4));
	EXPECT_EQ(0, memcmp(buf, "\0\0\0Z", 4));

	/* Past the guest kernel's largest file: EFBIG. */
	EXPECT_EQ(-EFBIG, pwrite_(b, f, fh, "x", 1, (uint64_t)INT64_MAX));
	EXPECT_EQ(-EFBIG, pwrite_(b, f, fh, "x", 1, UINT64_MAX - 1));
	EXPECT_EQ(-EFBIG, truncate_(b, f, (uint64_t)INT64_MAX + 1));
	ASSERT_EQ(1, pwrite_(b, f, fh, "y", 1, (uint64_t)INT64_MAX - 1));
	EXPECT_EQ((uint64_t)INT64_MAX, attr_of(_metadata, b, f).size);
	EXPECT_EQ(2 * PAGE / 512, attr_of(_metadata, b, f).blocks);

	ASSERT_EQ(0, truncate_(b, f, 0));
	EXPECT_EQ(0U, attr_of(_metadata, b, f).blocks);
	EXPECT_EQ(fp, free_fingerprint(_metadata, b));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fs_backend__destroy(b);
}

TEST(seek_data_hole)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	static char chunk[PAGE];
	uint64_t f, fh;

	f = mkfile(_metadata, b, ROOT, "s", 0644);
	fh = open_(_metadata, b, f, O_RDWR);
	memset(chunk, 7, sizeof(chunk));
	/* data [0, 8K), hole [8K, 1M), data [1M, 1M+100), hole to 2M */
	ASSERT_EQ(PAGE, pwrite_(b, f, fh, chunk, PAGE, 0));
	ASSERT_EQ(PAGE, pwrite_(b, f, fh, chunk, PAGE, PAGE));
	ASSERT_EQ(100, pwrite_(b, f, fh, chunk, 100, 1 * MiB));
	ASSERT_EQ(0, truncate_(b, f, 2 * MiB));

	EXPECT_EQ(0, b->ops->lseek(b, f, fh, 0, SEEK_DATA));
	EXPECT_EQ(100, b->ops->lseek(b, f, fh, 100, SEEK_DATA));
	EXPECT_EQ(2 * PAGE, b->ops->lseek(b, f, fh, 0, SEEK_HOLE));
	EXPECT_EQ(2 * PAGE, b->ops->lseek(b, f, fh, 5000, SEEK_HOLE));
	EXPECT_EQ((int64_t)MiB, b->ops->lseek(b, f, fh, 2 * PAGE, SEEK_DATA));
	EXPECT_EQ(2 * PAGE + 1,
		  b->ops->lseek(b, f, fh, 2 * PAGE + 1, SEEK_HOLE));
	EXPECT_EQ((int64_t)MiB + 50,
		  b->ops->lseek(b, f, fh, MiB + 50, SEEK_DATA));
	EXPECT_EQ((int64_t)MiB + PAGE, b->ops->lseek(b, f, fh, MiB, SEEK_HOLE));
	EXPECT_EQ(-ENXIO, b->ops->lseek(b, f, fh, MiB + PAGE, SEEK_DATA));
	EXPECT_EQ(-ENXIO, b->ops->lseek(b, f, fh, 2 * MiB, SEEK_DATA));
	EXPECT_EQ(-ENXIO, b->ops->lseek(b, f, fh, 2 * MiB, SEEK_HOLE));
	EXPECT_EQ(-EINVAL, b->ops->lseek(b, f, fh, 0, SEEK_END));
	/* A file that ends in data: the hole is at st_size. */
	ASSERT_EQ(0, truncate_(b, f, MiB + 100));
	EXPECT_EQ((int64_t)MiB + 100, b->ops->lseek(b, f, fh, MiB, SEEK_HOLE));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fs_backend__destroy(b);
}

TEST(truncate_up_down)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	struct fuse_attr a;
	uint64_t f, d, fh;
	char buf[PAGE * 3];
	size_t i;

	f = mkfile(_metadata, b, ROOT, "t", 0644);
	d = mkdir_(_metadata, b, ROOT, "d");
	fh = open_(_metadata, b, f, O_RDWR);
	memset(buf, 'a', sizeof(buf));
	ASSERT_EQ((ssize_t)sizeof(buf), pwrite_(b, f, fh, buf, sizeof(buf), 0));
	EXPECT_EQ(3 * PAGE / 512, attr_of(_metadata, b, f).blocks);

	/* Down inside a chunk: the chunks past it go, the tail is zeroed. */
	ASSERT_EQ(0, truncate_(b, f, 100));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(100U, a.size);
	EXPECT_EQ(PAGE / 512, a.blocks);
	/* Up: sparse, reading zeroes where the old data was. */
	ASSERT_EQ(0, truncate_(b, f, 3 * PAGE));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(3 * PAGE, a.size);
	EXPECT_EQ(PAGE / 512, a.blocks);
	memset(buf, 1, sizeof(buf));
	ASSERT_EQ((ssize_t)sizeof(buf), pread_(b, f, fh, buf, sizeof(buf), 0));
	for (i = 0; i < 100; i++)
		ASSERT_EQ('a', buf[i]);
	for (; i < sizeof(buf); i++)
		ASSERT_EQ(0, buf[i]) TH_LOG("byte %zu", i);
	/* A write past the end leaves a hole of zeroes too. */
	ASSERT_EQ(1, pwrite_(b, f, fh, "b", 1, 5 * PAGE));
	ASSERT_EQ(1, pread_(b, f, fh, buf, 1, 4 * PAGE));
	EXPECT_EQ(0, buf[0]);
	ASSERT_EQ(0, truncate_(b, f, 0));
	EXPECT_EQ(0U, attr_of(_metadata, b, f).blocks);
	EXPECT_EQ(0, pread_(b, f, fh, buf, 1, 0));

	EXPECT_EQ(-EISDIR, truncate_(b, d, 0));
	EXPECT_EQ(-ESTALE, truncate_(b, BOGUS_ID, 0));
	/* O_TRUNC on open. */
	ASSERT_EQ(3, pwrite_(b, f, fh, "abc", 3, 0));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fh = open_(_metadata, b, f, O_RDONLY | O_TRUNC);
	EXPECT_EQ(3U, attr_of(_metadata, b, f).size); /* read-only: kept */
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fh = open_(_metadata, b, f, O_WRONLY | O_TRUNC);
	EXPECT_EQ(0U, attr_of(_metadata, b, f).size);
	/* O_APPEND writes at the end whatever the offset. */
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fh = open_(_metadata, b, f, O_WRONLY | O_APPEND);
	ASSERT_EQ(2, pwrite_(b, f, fh, "12", 2, 0));
	ASSERT_EQ(2, pwrite_(b, f, fh, "34", 2, 0));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	slurp(_metadata, b, f, buf, sizeof(buf));
	EXPECT_STREQ("1234", buf);
	fs_backend__destroy(b);
}

TEST(read_write_iovecs_and_modes)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	char a[3] = "abc", c[5] = "defgh", out[16] = { 0 };
	struct iovec w[2] = { { a, 3 }, { c, 5 } };
	struct iovec r[3] = { { out, 2 }, { out + 2, 4 }, { out + 6, 10 } };
	uint64_t f, g, fh, ro, wo;

	f = mkfile(_metadata, b, ROOT, "f", 0644);
	fh = open_(_metadata, b, f, O_RDWR);
	ASSERT_EQ(8, b->ops->write(b, f, fh, w, 2, PAGE - 4));
	ASSERT_EQ(8, b->ops->read(b, f, fh, r, 3, PAGE - 4));
	EXPECT_EQ(0, memcmp(out, "abcdefgh", 8));
	EXPECT_EQ(0, b->ops->write(b, f, fh, w, 0, 0));

	ro = open_(_metadata, b, f, O_RDONLY);
	wo = open_(_metadata, b, f, O_WRONLY);
	EXPECT_EQ(-EBADF, pwrite_(b, f, ro, "x", 1, 0));
	EXPECT_EQ(-EBADF, pread_(b, f, wo, out, 1, 0));
	EXPECT_EQ(-EBADF, b->ops->fallocate(b, f, ro, 0, 10, 0));
	/* A handle belongs to its node. */
	g = mkfile(_metadata, b, ROOT, "g", 0644);
	EXPECT_EQ(-EBADF, pread_(b, g, ro, out, 1, 0));
	EXPECT_EQ(-EBADF, b->ops->release(b, g, ro));
	EXPECT_EQ(0, b->ops->release(b, f, ro));
	EXPECT_EQ(0, b->ops->release(b, f, wo));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fs_backend__destroy(b);
}

TEST(fallocate_modes)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 1 * MiB);
	struct fuse_attr a;
	uint64_t f, fh, fp;
	char buf[PAGE * 4];
	size_t i;

	f = mkfile(_metadata, b, ROOT, "f", 0644);
	fh = open_(_metadata, b, f, O_RDWR);
	/* mode 0: allocates and extends. */
	ASSERT_EQ(0, b->ops->fallocate(b, f, fh, 0, 3 * PAGE + 1, 0));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(3 * PAGE + 1, a.size);
	EXPECT_EQ(4 * PAGE / 512, a.blocks);
	/* KEEP_SIZE: allocates past the end, size stays. */
	ASSERT_EQ(0, b->ops->fallocate(b, f, fh, 8 * PAGE, 2 * PAGE,
				       FALLOC_FL_KEEP_SIZE));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(3 * PAGE + 1, a.size);
	EXPECT_EQ(6 * PAGE / 512, a.blocks);
	/* Already allocated: counts nothing twice. */
	ASSERT_EQ(0, b->ops->fallocate(b, f, fh, 0, 2 * PAGE, 0));
	EXPECT_EQ(6 * PAGE / 512, attr_of(_metadata, b, f).blocks);

	memset(buf, 'w', sizeof(buf));
	ASSERT_EQ((ssize_t)sizeof(buf), pwrite_(b, f, fh, buf, sizeof(buf), 0));
	/* PUNCH_HOLE|KEEP_SIZE: whole chunks freed, edges zeroed. */
	ASSERT_EQ(0, b->ops->fallocate(b, f, fh, 100, 2 * PAGE,
				       FALLOC_FL_PUNCH_HOLE |
					       FALLOC_FL_KEEP_SIZE));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(4 * PAGE, a.size);
	EXPECT_EQ(5 * PAGE / 512, a.blocks); /* chunk 1 went */
	ASSERT_EQ((ssize_t)sizeof(buf), pread_(b, f, fh, buf, sizeof(buf), 0));
	for (i = 0; i < sizeof(buf); i++)
		ASSERT_EQ(i < 100 || i >= 100 + 2 * PAGE ? 'w' : 0, buf[i])
	TH_LOG("byte %zu", i);
	/* Within one chunk. */
	ASSERT_EQ(0, b->ops->fallocate(b, f, fh, 3 * PAGE + 10, 5,
				       FALLOC_FL_PUNCH_HOLE |
					       FALLOC_FL_KEEP_SIZE));
	ASSERT_EQ(7, pread_(b, f, fh, buf, 7, 3 * PAGE + 9));
	EXPECT_EQ(0, memcmp(buf, "w\0\0\0\0\0w", 7));
	/* Punching past the end frees the KEEP_SIZE chunks. */
	ASSERT_EQ(0, b->ops->fallocate(b, f, fh, 4 * PAGE, 100 * PAGE,
				       FALLOC_FL_PUNCH_HOLE |
					       FALLOC_FL_KEEP_SIZE));
	EXPECT_EQ(3 * PAGE / 512, attr_of(_metadata, b, f).blocks);

	EXPECT_EQ(-EOPNOTSUPP,
		  b->ops->fallocate(b, f, fh, 0, 10, FALLOC_FL_PUNCH_HOLE));
	EXPECT_EQ(-EOPNOTSUPP,
		  b->ops->fallocate(b, f, fh, 0, 10, FALLOC_FL_COLLAPSE_RANGE));
	EXPECT_EQ(-EINVAL, b->ops->fallocate(b, f, fh, 0, 0, 0));
	EXPECT_EQ(-EFBIG, b->ops->fallocate(b, f, fh, UINT64_MAX - 10, 100, 0));

	/* More than fits: ENOSPC, and nothing was allocated. */
	fp = free_fingerprint(_metadata, b);
	EXPECT_EQ(-ENOSPC, b->ops->fallocate(b, f, fh, 0, 2 * MiB, 0));
	EXPECT_EQ(-ENOSPC, b->ops->fallocate(b, f, fh, 0, 1 * TiB, 0));
	EXPECT_EQ(fp, free_fingerprint(_metadata, b));
	EXPECT_EQ(4 * PAGE, attr_of(_metadata, b, f).size);
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fs_backend__destroy(b);
}

/* ---- metadata ------------------------------------------------------- */

TEST(timestamps)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	struct fuse_setattr_in in = { 0 };
	struct fuse_attr a, a2;
	uint64_t f, d, fh;
	struct fs_entry e;

	d = mkdir_(_metadata, b, ROOT, "d");
	f = mkfile(_metadata, b, d, "f", 0644);

	/* utimens sets exact values, to the nanosecond. */
	in.valid = FATTR_ATIME | FATTR_MTIME;
	in.atime = 12345;
	in.atimensec = 678;
	in.mtime = 23456;
	in.mtimensec = 999999999;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	EXPECT_EQ(12345U, a.atime);
	EXPECT_EQ(678U, a.atimensec);
	EXPECT_EQ(23456U, a.mtime);
	EXPECT_EQ(999999999U, a.mtimensec);
	a2 = attr_of(_metadata, b, f);
	EXPECT_EQ(0, memcmp(&a, &a2, sizeof(a)));
	EXPECT_GT(ts_ns(a.ctime, a.ctimensec), ts_ns(a.mtime, a.mtimensec));

	/* Bad nanoseconds: refused, nothing changed. */
	in.valid = FATTR_MODE | FATTR_MTIME;
	in.mode = 0600;
	in.mtimensec = 1000000000;
	EXPECT_EQ(-EINVAL, setattr_(b, f, &in, &a));
	a = attr_of(_metadata, b, f);
	EXPECT_EQ(S_IFREG | 0644U, a.mode);
	EXPECT_EQ(23456U, a.mtime);

	/* A write moves mtime and ctime to now. */
	in.valid = FATTR_CTIME;
	in.ctime = 1000;
	in.ctimensec = 5;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	EXPECT_EQ(1000U, a.ctime);
	EXPECT_EQ(5U, a.ctimensec);
	fh = open_(_metadata, b, f, O_RDWR);
	ASSERT_EQ(1, pwrite_(b, f, fh, "x", 1, 0));
	a = attr_of(_metadata, b, f);
	EXPECT_GT(a.mtime, 1000000000U); /* past 2001: now */
	EXPECT_EQ(a.mtime, a.ctime);
	EXPECT_EQ(a.mtimensec, a.ctimensec);
	EXPECT_EQ(12345U, a.atime);

	/* chmod moves ctime only. */
	in.valid = FATTR_MTIME | FATTR_CTIME;
	in.mtime = 2000;
	in.mtimensec = 0;
	in.ctime = 2000;
	in.ctimensec = 0;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	in.valid = FATTR_MODE;
	in.mode = 04751;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	EXPECT_EQ(S_IFREG | 04751U, a.mode);
	EXPECT_GT(a.ctime, 1000000000U);
	EXPECT_EQ(2000U, a.mtime);
	/* chown too; and the kill-suid flag. */
	in.valid = FATTR_UID | FATTR_GID | FATTR_KILL_SUIDGID;
	in.uid = 7;
	in.gid = 8;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	EXPECT_EQ(7U, a.uid);
	EXPECT_EQ(8U, a.gid);
	EXPECT_EQ(S_IFREG | 0751U, a.mode);

	/* *_NOW. */
	in.valid =
		FATTR_ATIME | FATTR_ATIME_NOW | FATTR_MTIME | FATTR_MTIME_NOW;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	EXPECT_GT(a.atime, 1000000000U);
	EXPECT_GT(a.mtime, 1000000000U);

	/* Truncation moves mtime. */
	in.valid = FATTR_MTIME;
	in.mtime = 3000;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	ASSERT_EQ(0, truncate_(b, f, 10));
	EXPECT_GT(attr_of(_metadata, b, f).mtime, 1000000000U);

	/* A directory's mtime and ctime move with its entries. */
#define OLD_DIR()                                      \
	do {                                           \
		in.valid = FATTR_MTIME | FATTR_CTIME;  \
		in.mtime = in.ctime = 4000;            \
		ASSERT_EQ(0, setattr_(b, d, &in, &a)); \
	} while (0)
#define DIR_MOVED()                              \
	do {                                     \
		a = attr_of(_metadata, b, d);    \
		EXPECT_GT(a.mtime, 1000000000U); \
		EXPECT_GT(a.ctime, 1000000000U); \
	} while (0)
	OLD_DIR();
	mkfile(_metadata, b, d, "g", 0644);
	DIR_MOVED();
	OLD_DIR();
	ASSERT_EQ(0, b->ops->rename(b, d, "g", d, "h", 0));
	DIR_MOVED();
	OLD_DIR();
	ASSERT_EQ(0, b->ops->unlink(b, d, "h"));
	DIR_MOVED();
	OLD_DIR();
	ASSERT_EQ(0, b->ops->link(b, f, d, "l", &e));
	DIR_MOVED();
	/* The link moved the file's ctime. */
	in.valid = FATTR_CTIME;
	in.ctime = 5000;
	ASSERT_EQ(0, setattr_(b, f, &in, &a));
	ASSERT_EQ(0, b->ops->unlink(b, d, "l"));
	EXPECT_GT(attr_of(_metadata, b, f).ctime, 1000000000U);
#undef OLD_DIR
#undef DIR_MOVED
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	fs_backend__destroy(b);
}

/* ---- space ---------------------------------------------------------- */

TEST(max_bytes_enospc)
{
	const uint64_t max = 256 * KiB;
	struct fs_backend *b = make_fs(_metadata, NULL, 0, max);
	struct fuse_kstatfs st0, st;
	static char big[1 * MiB];
	static char target[FS_PATH_MAX + 1];
	uint64_t base, f, fh;
	struct fs_entry e;
	unsigned int n, i;
	char name[32];
	ssize_t w;

	st0 = statfs_(_metadata, b);
	EXPECT_EQ(max / 4096, st0.blocks);
	EXPECT_EQ(4096U, st0.bsize);
	EXPECT_EQ(4096U, st0.frsize);
	EXPECT_EQ(FS_NAME_MAX, st0.namelen);
	EXPECT_LE(st0.blocks - 1, st0.bfree);
	EXPECT_EQ(st0.bfree, st0.bavail);
	EXPECT_EQ(st0.files, st0.ffree + 1); /* the root */
	base = free_fingerprint(_metadata, b);

	/* A write that only partly fits writes whole chunks, short. */
	f = mkfile(_metadata, b, ROOT, "f", 0644);
	fh = open_(_metadata, b, f, O_RDWR);
	w = pwrite_(b, f, fh, big, sizeof(big), 0);
	ASSERT_LT(0, w);
	ASSERT_GT((ssize_t)max, w);
	EXPECT_EQ(0, w % PAGE);
	EXPECT_EQ((uint64_t)w, attr_of(_metadata, b, f).size);
	EXPECT_EQ(-ENOSPC, pwrite_(b, f, fh, big, PAGE, w));
	EXPECT_EQ(-ENOSPC, pwrite_(b, f, fh, "x", 1, 10 * MiB));
	st = statfs_(_metadata, b);
	EXPECT_GE(1U, st.bfree);
	/* Rewriting allocated chunks needs no space. */
	EXPECT_EQ(w, pwrite_(b, f, fh, big, w, 0));
	/* Truncating down makes room. */
	ASSERT_EQ(0, truncate_(b, f, 0));
	EXPECT_EQ(PAGE, pwrite_(b, f, fh, big, PAGE, 0));
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "f"));
	b->ops->forget(b, f, 1);
	EXPECT_EQ(base, free_fingerprint(_metadata, b));

	/* Empty files cost space too. */
	for (n = 0;; n++) {
		int err;

		snprintf(name, sizeof(name), "file%05u", n);
		err = b->ops->mknod(b, &ctx, ROOT, name, S_IFREG | 0644, 0, 0,
				    &e);
		if (err) {
			ASSERT_EQ(-ENOSPC, err);
			break;
		}
		b->ops->forget(b, e.nodeid, 1);
		ASSERT_LT(n, 100000U);
	}
	EXPECT_LT(100U, n);
	EXPECT_GE(1U, statfs_(_metadata, b).ffree);
	EXPECT_EQ(-ENOSPC,
		  b->ops->mkdir(b, &ctx, ROOT, "dir000000", 0755, 0, &e));
	/* A long symlink does not fit where a short one does. */
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "file00000"));
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "file00001"));
	memset(target, 't', FS_PATH_MAX);
	EXPECT_EQ(-ENOSPC, b->ops->symlink(b, &ctx, ROOT, "s", target, &e));
	ASSERT_EQ(0, b->ops->symlink(b, &ctx, ROOT, "s", "t", &e));
	b->ops->forget(b, e.nodeid, 1);
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "s"));
	/* Freeing makes room again. */
	for (i = 2; i < n; i++) {
		snprintf(name, sizeof(name), "file%05u", i);
		ASSERT_EQ(0, b->ops->unlink(b, ROOT, name));
	}
	EXPECT_EQ(base, free_fingerprint(_metadata, b));
	ASSERT_EQ(0, b->ops->symlink(b, &ctx, ROOT, "s", target, &e));
	EXPECT_EQ(FS_PATH_MAX, e.attr.size);
	st = statfs_(_metadata, b);
	EXPECT_GT(st0.bfree, st.bfree);
	EXPECT_EQ(st.files, st.ffree + 2);
	fs_backend__destroy(b);
}

TEST(open_handles_bounded)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	static uint64_t fhs[65536];
	uint64_t f, fh, d;
	struct fs_entry e;
	unsigned int i;
	uint32_t of;

	f = mkfile(_metadata, b, ROOT, "f", 0644);
	d = mkdir_(_metadata, b, ROOT, "d");
	for (i = 0; i < 65536; i++)
		ASSERT_EQ(0, b->ops->open(b, f, O_RDONLY, &fhs[i], &of));
	EXPECT_EQ(-ENFILE, b->ops->open(b, f, O_RDONLY, &fh, &of));
	EXPECT_EQ(-ENFILE, b->ops->opendir(b, d, &fh));
	EXPECT_EQ(-ENFILE, b->ops->create(b, &ctx, ROOT, "c", 0644, O_RDWR, 0,
					  &e, &fh, &of));
	EXPECT_EQ(-ENOENT, id_of(b, ROOT, "c")); /* nothing made */
	ASSERT_EQ(0, b->ops->release(b, f, fhs[100]));
	ASSERT_EQ(0, b->ops->opendir(b, d, &fh));
	EXPECT_EQ(-EBADF, b->ops->release(b, d, fh)); /* a dir handle */
	EXPECT_EQ(0, b->ops->releasedir(b, d, fh));
	/* Destroy frees what is still open (valgrind checks). */
	fs_backend__destroy(b);
}

/* ---- readdir -------------------------------------------------------- */

#define NR_ENTRIES 5000
#define NR_ADDED   (NR_ENTRIES * 2)

TEST_TIMEOUT(readdir_resumed_under_churn, 120)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	static unsigned char seen[NR_ENTRIES], gone[NR_ENTRIES];
	static unsigned char seen_new[NR_ADDED];
	uint64_t dir, fh, off = 0, rng = 0x5eed, last_off = 0;
	unsigned int i, calls = 0, added = 0, dots = 0, nseen = 0;
	char last[64] = "", name[64];
	uint8_t buf[1024];
	struct fs_entry e;
	struct fs_dirbuf db;
	size_t pos;

	dir = mkdir_(_metadata, b, ROOT, "big");
	for (i = 0; i < NR_ENTRIES; i++) {
		snprintf(name, sizeof(name), "f%04u", i);
		ASSERT_EQ(0, b->ops->mknod(b, &ctx, dir, name, S_IFREG | 0644,
					   0, 0, &e));
		b->ops->forget(b, e.nodeid, 1);
	}
	ASSERT_EQ(0, b->ops->opendir(b, dir, &fh));
	for (;;) {
		db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
		ASSERT_EQ(0, b->ops->readdir(b, dir, fh, off, &db));
		calls++;
		if (!db.used)
			break;
		for (pos = 0; pos < db.used;) {
			struct fuse_dirent *de = (void *)(buf + pos);

			ASSERT_LT(de->namelen, sizeof(name));
			memcpy(name, de->name, de->namelen);
			name[de->namelen] = '\0';
			ASSERT_GT(de->off, off) TH_LOG("%s", name);
			off = de->off;
			pos += FUSE_DIRENT_SIZE(de);
			if (!strcmp(name, ".") || !strcmp(name, "..")) {
				EXPECT_EQ(0U, (unsigned int)(calls > 1));
				dots++;
				continue;
			}
			if (name[0] == 'f') {
				i = (unsigned int)atoi(name + 1);
				ASSERT_LT(i, NR_ENTRIES);
				EXPECT_FALSE(gone[i]) TH_LOG("%s", name);
				EXPECT_EQ(0, seen[i]) TH_LOG("twice: %s", name);
				seen[i]++;
			} else {
				i = (unsigned int)atoi(name + 1);
				ASSERT_LT(i, NR_ADDED);
				EXPECT_EQ(0, seen_new[i]) TH_LOG("%s", name);
				seen_new[i]++;
			}
			strcpy(last, name);
			last_off = off;
		}
		/*
		 * Churn: delete the entry the guest resumes after, two more
		 * at random (seen or not), and add three.
		 */
		if (last[0] == 'f' && !gone[atoi(last + 1)]) {
			ASSERT_EQ(0, b->ops->unlink(b, dir, last));
			gone[atoi(last + 1)] = 1;
		}
		for (int k = 0; k < 2; k++) {
			i = prng__next(&rng) % NR_ENTRIES;
			snprintf(name, sizeof(name), "f%04u", i);
			EXPECT_EQ(gone[i] ? -ENOENT : 0,
				  b->ops->unlink(b, dir, name));
			gone[i] = 1;
		}
		for (int k = 0; k < 3 && added < NR_ADDED; k++, added++) {
			snprintf(name, sizeof(name), "g%05u", added);
			ASSERT_EQ(0, b->ops->mknod(b, &ctx, dir, name,
						   S_IFREG | 0644, 0, 0, &e));
			b->ops->forget(b, e.nodeid, 1);
		}
		ASSERT_LT(calls, 100000U);
	}
	EXPECT_EQ(2U, dots);
	EXPECT_LT(100U, calls);
	EXPECT_NE(0U, last_off);
	/* Every entry that was never deleted was seen exactly once. */
	for (i = 0; i < NR_ENTRIES; i++)
		if (!gone[i])
			ASSERT_EQ(1, seen[i]) TH_LOG("f%04u", i);
	/* Entries made while listing: those made after the end was passed
	 * can be missed, but many were appended ahead of the cursor. */
	for (i = 0; i < added; i++)
		nseen += seen_new[i];
	EXPECT_LT(0U, nseen);
	/* Offsets past everything answer nothing. */
	db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
	EXPECT_EQ(0, b->ops->readdir(b, dir, fh, UINT64_MAX, &db));
	EXPECT_EQ(0U, db.used);
	/* A buffer too small for one entry: nothing, no error. */
	db = (struct fs_dirbuf){ .buf = buf, .size = 8 };
	EXPECT_EQ(0, b->ops->readdir(b, dir, fh, 0, &db));
	EXPECT_EQ(0U, db.used);
	EXPECT_EQ(0, b->ops->releasedir(b, dir, fh));
	fs_backend__destroy(b);
}

/* ---- hostile ids ---------------------------------------------------- */

TEST(bogus_ids)
{
	struct fs_backend *b = make_fs(_metadata, NULL, 0, 0);
	struct fuse_setattr_in in = { .valid = FATTR_MODE, .mode = 0 };
	uint64_t ids[] = { 0, 2, 3, BOGUS_ID, UINT64_MAX, 1ULL << 63 };
	uint64_t f, d, k, fh, dfh, id;
	struct fuse_kstatfs st;
	struct fs_dirbuf db;
	struct fuse_attr a;
	struct fs_entry e;
	char longname[FS_NAME_MAX + 2];
	uint8_t buf[256];
	unsigned int i;
	uint32_t of;

	/* Ids 2 and 3 exist once made; forget them first to make stale. */
	f = mkfile(_metadata, b, ROOT, "f", 0644);
	d = mkdir_(_metadata, b, ROOT, "d");
	ASSERT_EQ(0, b->ops->unlink(b, ROOT, "f"));
	ASSERT_EQ(0, b->ops->rmdir(b, ROOT, "d"));
	b->ops->forget(b, f, 1);
	b->ops->forget(b, d, 1);
	b->ops->forget(b, d, 1000); /* again: ignored */
	k = mkfile(_metadata, b, ROOT, "keep", 0644);
	for (i = 0; i < ARRAY_SIZE(ids); i++) {
		id = ids[i];
		EXPECT_EQ(-ESTALE, b->ops->getattr(b, id, &a));
		EXPECT_EQ(-ESTALE, lookup(b, id, "x", &e));
		EXPECT_EQ(-ESTALE, setattr_(b, id, &in, &a));
		EXPECT_EQ(-ESTALE, b->ops->readlink(b, id, (char *)buf, 10));
		EXPECT_EQ(-ESTALE, b->ops->mknod(b, &ctx, id, "x",
						 S_IFREG | 0644, 0, 0, &e));
		EXPECT_EQ(-ESTALE,
			  b->ops->mkdir(b, &ctx, id, "x", 0755, 0, &e));
		EXPECT_EQ(-ESTALE, b->ops->symlink(b, &ctx, id, "x", "y", &e));
		EXPECT_EQ(-ESTALE, b->ops->unlink(b, id, "x"));
		EXPECT_EQ(-ESTALE, b->ops->rmdir(b, id, "x"));
		EXPECT_EQ(-ESTALE, b->ops->link(b, id, ROOT, "x", &e));
		EXPECT_EQ(-ESTALE, b->ops->link(b, k, id, "x", &e));
		EXPECT_EQ(-ESTALE, b->ops->open(b, id, O_RDONLY, &fh, &of));
		EXPECT_EQ(-ESTALE, b->ops->create(b, &ctx, id, "x", 0644,
						  O_RDWR, 0, &e, &fh, &of));
		EXPECT_EQ(-ESTALE, pread_(b, id, 1, buf, 1, 0));
		EXPECT_EQ(-ESTALE, pwrite_(b, id, 1, buf, 1, 0));
		EXPECT_EQ(-ESTALE, b->ops->flush(b, id, 1));
		EXPECT_EQ(-ESTALE, b->ops->release(b, id, 1));
		EXPECT_EQ(-ESTALE, b->ops->fsync(b, id, 1, false));
		EXPECT_EQ(-ESTALE, b->ops->opendir(b, id, &fh));
		db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
		EXPECT_EQ(-ESTALE, b->ops->readdir(b, id, 1, 0, &db));
		EXPECT_EQ(-ESTALE, b->ops->releasedir(b, id, 1));
		EXPECT_EQ(-ESTALE, b->ops->fsyncdir(b, id, 1, false));
		EXPECT_EQ(-ESTALE, b->ops->statfs(b, id, &st));
		EXPECT_EQ(-ESTALE, b->ops->fallocate(b, id, 1, 0, 1, 0));
		EXPECT_EQ(-ESTALE, b->ops->lseek(b, id, 1, 0, SEEK_DATA));
		b->ops->forget(b, id, 1);
	}
	/* The root survives any forget. */
	b->ops->forget(b, ROOT, UINT64_MAX);
	EXPECT_EQ(0, b->ops->getattr(b, ROOT, &a));

	/* Real nodes, bogus or mismatched handles. */
	f = mkfile(_metadata, b, ROOT, "f2", 0644);
	fh = open_(_metadata, b, f, O_RDWR);
	ASSERT_EQ(0, b->ops->opendir(b, ROOT, &dfh));
	EXPECT_EQ(-EBADF, pread_(b, f, fh + 1000, buf, 1, 0));
	EXPECT_EQ(-EBADF, pwrite_(b, f, 0, buf, 1, 0));
	EXPECT_EQ(-EBADF, pread_(b, f, dfh, buf, 1, 0)); /* dir handle */
	EXPECT_EQ(-EBADF, pread_(b, ROOT, dfh, buf, 1, 0));
	db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
	EXPECT_EQ(-EBADF, b->ops->readdir(b, ROOT, fh, 0, &db));
	EXPECT_EQ(-EBADF, b->ops->readdir(b, ROOT, UINT64_MAX, 0, &db));
	EXPECT_EQ(-EBADF, b->ops->releasedir(b, ROOT, fh));
	EXPECT_EQ(-EBADF, b->ops->release(b, ROOT, dfh));
	EXPECT_EQ(-EBADF, b->ops->lseek(b, f, dfh, 0, SEEK_DATA));
	EXPECT_EQ(-EINVAL, b->ops->write(b, f, fh, NULL, -1, 0));
	/* Names the server should have refused. */
	EXPECT_EQ(-EINVAL, b->ops->mknod(b, &ctx, ROOT, "", S_IFREG, 0, 0, &e));
	EXPECT_EQ(-EINVAL,
		  b->ops->mknod(b, &ctx, ROOT, "a/b", S_IFREG, 0, 0, &e));
	EXPECT_EQ(-EINVAL, b->ops->mkdir(b, &ctx, ROOT, "..", 0755, 0, &e));
	memset(longname, 'l', sizeof(longname) - 1);
	longname[FS_NAME_MAX + 1] = '\0';
	EXPECT_EQ(-ENAMETOOLONG,
		  b->ops->mknod(b, &ctx, ROOT, longname, S_IFREG, 0, 0, &e));
	/* "." and ".." lookups (NFS export) answer the right nodes. */
	ASSERT_EQ(0, lookup(b, ROOT, "..", &e));
	EXPECT_EQ(ROOT, e.nodeid);
	ASSERT_EQ(0, lookup(b, ROOT, ".", &e));
	EXPECT_EQ(ROOT, e.nodeid);
	EXPECT_EQ(0, b->ops->release(b, f, fh));
	EXPECT_EQ(0, b->ops->releasedir(b, ROOT, dfh));
	fs_backend__destroy(b);
}

/* ---- fuzz ----------------------------------------------------------- */

#define FUZZ_OPS     20000
#define FUZZ_NAMES   6
#define FUZZ_HANDLES 16
#define FUZZ_MAXIDS  (FUZZ_OPS * 2)

struct fuzz {
	struct fs_backend *b;
	uint64_t rng;
	uint64_t ids[FUZZ_MAXIDS]; /* one per lookup handed out */
	unsigned int nr_ids;
	uint64_t dirs[64]; /* directory ids seen (maybe stale by now) */
	unsigned int nr_dirs;
	struct {
		uint64_t id, fh;
		bool dir;
	} open[FUZZ_HANDLES];
	unsigned int nr_open;
};

static uint64_t fz_rand(struct fuzz *z, uint64_t n)
{
	return prng__next(&z->rng) % n;
}

static const char *fz_name(struct fuzz *z)
{
	static const char *const names[FUZZ_NAMES] = { "a",  "b",   "c",
						       "dd", "eee", "f" };

	return names[fz_rand(z, FUZZ_NAMES)];
}

static uint64_t fz_dir(struct fuzz *z)
{
	if (!z->nr_dirs || !fz_rand(z, 4))
		return ROOT;
	return z->dirs[fz_rand(z, z->nr_dirs)];
}

static void fz_got(struct fuzz *z, const struct fs_entry *e)
{
	if (z->nr_ids < FUZZ_MAXIDS)
		z->ids[z->nr_ids++] = e->nodeid;
	else
		z->b->ops->forget(z->b, e->nodeid, 1);
	if (S_ISDIR(e->attr.mode)) {
		if (z->nr_dirs < ARRAY_SIZE(z->dirs))
			z->dirs[z->nr_dirs++] = e->nodeid;
		else
			z->dirs[fz_rand(z, z->nr_dirs)] = e->nodeid;
	}
}

/* Errors a correct file system may answer to a random op. */
static bool fz_ok(int64_t r)
{
	switch (r) {
	case -ENOENT:
	case -EEXIST:
	case -ENOTDIR:
	case -EISDIR:
	case -ENOTEMPTY:
	case -EINVAL:
	case -ESTALE:
	case -ENOSPC:
	case -EPERM:
	case -EBADF:
	case -ENXIO:
	case -ELOOP:
	case -EFBIG:
		return true;
	default:
		return r >= 0;
	}
}

static int64_t fz_step(struct fuzz *z)
{
	static uint8_t data[3 * PAGE];
	struct fs_backend *b = z->b;
	uint64_t dir = fz_dir(z), off, id;
	struct fs_entry e;
	struct fuse_attr a;
	uint32_t of;
	int64_t r = 0;
	unsigned int h;

	switch (fz_rand(z, 16)) {
	case 0:
		r = b->ops->mknod(b, &ctx, dir, fz_name(z), S_IFREG | 0644, 0,
				  0, &e);
		break;
	case 1:
		r = b->ops->mkdir(b, &ctx, dir, fz_name(z), 0755, 0, &e);
		break;
	case 2:
		r = b->ops->symlink(b, &ctx, dir, fz_name(z),
				    fz_rand(z, 2) ? "tgt" : "/a/long/target",
				    &e);
		break;
	case 3:
		r = b->ops->unlink(b, dir, fz_name(z));
		return r;
	case 4:
		r = b->ops->rmdir(b, dir, fz_name(z));
		return r;
	case 5: {
		static const uint32_t flags[] = { 0, 0, RENAME_NOREPLACE,
						  RENAME_EXCHANGE };

		r = b->ops->rename(b, dir, fz_name(z), fz_dir(z), fz_name(z),
				   flags[fz_rand(z, 4)]);
		return r;
	}
	case 6:
		r = lookup(b, dir, fz_name(z), &e);
		if (r)
			return r;
		fz_got(z, &e);
		r = b->ops->link(b, e.nodeid, fz_dir(z), fz_name(z), &e);
		break;
	case 7:
		r = lookup(b, dir, fz_name(z), &e);
		break;
	case 8:
		if (z->nr_open == FUZZ_HANDLES)
			return 0;
		r = lookup(b, dir, fz_name(z), &e);
		if (r)
			return r;
		fz_got(z, &e);
		h = z->nr_open;
		if (S_ISDIR(e.attr.mode)) {
			r = b->ops->opendir(b, e.nodeid, &z->open[h].fh);
			z->open[h].dir = true;
		} else {
			r = b->ops->open(b, e.nodeid, O_RDWR, &z->open[h].fh,
					 &of);
			z->open[h].dir = false;
		}
		if (!r) {
			z->open[h].id = e.nodeid;
			z->nr_open++;
		}
		return r;
	case 9:
		if (z->nr_open == FUZZ_HANDLES)
			return 0;
		h = z->nr_open;
		r = b->ops->create(b, &ctx, dir, fz_name(z), 0644, O_RDWR, 0,
				   &e, &z->open[h].fh, &of);
		if (!r) {
			z->open[h].id = e.nodeid;
			z->open[h].dir = false;
			z->nr_open++;
		}
		break;
	case 10:
	case 11:
		if (!z->nr_open)
			return 0;
		h = fz_rand(z, z->nr_open);
		if (z->open[h].dir)
			return 0;
		off = fz_rand(z, 8) ? fz_rand(z, 256 * KiB) :
				      fz_rand(z, 1ULL << 45);
		if (fz_rand(z, 2))
			return pwrite_(b, z->open[h].id, z->open[h].fh, data,
				       1 + fz_rand(z, sizeof(data)), off);
		return pread_(b, z->open[h].id, z->open[h].fh, data,
			      1 + fz_rand(z, sizeof(data)), off);
	case 12:
		if (!z->nr_open || z->open[h = fz_rand(z, z->nr_open)].dir)
			return 0;
		id = z->open[h].id;
		switch (fz_rand(z, 4)) {
		case 0:
			return truncate_(b, id, fz_rand(z, 512 * KiB));
		case 1:
			return b->ops->fallocate(
				b, id, z->open[h].fh, fz_rand(z, 256 * KiB),
				1 + fz_rand(z, 64 * KiB),
				fz_rand(z, 2) ? FALLOC_FL_KEEP_SIZE : 0);
		case 2:
			return b->ops->fallocate(
				b, id, z->open[h].fh, fz_rand(z, 256 * KiB),
				1 + fz_rand(z, 64 * KiB),
				FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE);
		default:
			return b->ops->lseek(
				b, id, z->open[h].fh, fz_rand(z, 256 * KiB),
				fz_rand(z, 2) ? SEEK_DATA : SEEK_HOLE);
		}
	case 13:
		if (!z->nr_open)
			return 0;
		h = fz_rand(z, z->nr_open);
		r = z->open[h].dir ?
			    b->ops->releasedir(b, z->open[h].id,
					       z->open[h].fh) :
			    b->ops->release(b, z->open[h].id, z->open[h].fh);
		z->open[h] = z->open[--z->nr_open];
		return r;
	case 14:
		/* Forget a random lookup early (the kernel does). */
		if (!z->nr_ids)
			return 0;
		h = fz_rand(z, z->nr_ids);
		b->ops->forget(b, z->ids[h], 1);
		z->ids[h] = z->ids[--z->nr_ids];
		return 0;
	default:
		id = z->nr_ids ? z->ids[fz_rand(z, z->nr_ids)] : ROOT;
		return b->ops->getattr(b, id, &a);
	}
	if (!r)
		fz_got(z, &e);
	return r;
}

/*
 * Walks the tree from dir: checks every directory's nlink (2 + its
 * subdirectories) and removes everything beneath dir. Lookups it makes
 * are forgotten.
 */
static void fz_check_and_clear(struct __test_metadata *_metadata,
			       struct fs_backend *b, uint64_t dir,
			       unsigned int depth)
{
	uint8_t buf[4096];
	struct fs_dirbuf db;
	struct fs_entry e;
	uint64_t fh;
	char name[FS_NAME_MAX + 1];
	size_t pos;

	ASSERT_LT(depth, 1000U);
	ASSERT_EQ(0, b->ops->opendir(b, dir, &fh));
	/* Read all names first, removal comes after. */
	for (;;) {
		db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
		ASSERT_EQ(0, b->ops->readdir(b, dir, fh, 0, &db));
		pos = 0;
		/* Skip "." and "..". */
		for (int k = 0; k < 2 && pos < db.used; k++)
			pos += FUSE_DIRENT_SIZE(
				(struct fuse_dirent *)(buf + pos));
		if (pos >= db.used)
			break;
		{
			struct fuse_dirent *de = (void *)(buf + pos);

			memcpy(name, de->name, de->namelen);
			name[de->namelen] = '\0';
		}
		ASSERT_EQ(0, lookup(b, dir, name, &e));
		if (S_ISDIR(e.attr.mode)) {
			fz_check_and_clear(_metadata, b, e.nodeid, depth + 1);
			ASSERT_EQ(0, b->ops->rmdir(b, dir, name));
		} else {
			ASSERT_LE(1U, e.attr.nlink);
			ASSERT_EQ(0, b->ops->unlink(b, dir, name));
		}
		b->ops->forget(b, e.nodeid, 1);
	}
	ASSERT_EQ(0, b->ops->releasedir(b, dir, fh));
}

/* 2 + subdirectories, for every directory beneath dir. */
static void fz_check_nlink(struct __test_metadata *_metadata,
			   struct fs_backend *b, uint64_t dir,
			   unsigned int depth)
{
	uint8_t buf[4096];
	struct fs_dirbuf db;
	struct fs_entry e;
	uint64_t fh, off = 0;
	unsigned int subdirs = 0;
	char name[FS_NAME_MAX + 1];
	size_t pos;

	ASSERT_LT(depth, 1000U);
	ASSERT_EQ(0, b->ops->opendir(b, dir, &fh));
	for (;;) {
		db = (struct fs_dirbuf){ .buf = buf, .size = sizeof(buf) };
		ASSERT_EQ(0, b->ops->readdir(b, dir, fh, off, &db));
		if (!db.used)
			break;
		for (pos = 0; pos < db.used;) {
			struct fuse_dirent *de = (void *)(buf + pos);

			off = de->off;
			pos += FUSE_DIRENT_SIZE(de);
			memcpy(name, de->name, de->namelen);
			name[de->namelen] = '\0';
			if (!strcmp(name, ".") || !strcmp(name, ".."))
				continue;
			ASSERT_EQ(0, lookup(b, dir, name, &e));
			EXPECT_EQ(de->ino, e.nodeid);
			EXPECT_EQ(de->type, (e.attr.mode & S_IFMT) >> 12);
			if (de->type == DT_DIR) {
				subdirs++;
				fz_check_nlink(_metadata, b, e.nodeid,
					       depth + 1);
			} else if (de->type == DT_REG) {
				EXPECT_EQ(e.attr.blocks * 512 / PAGE * PAGE,
					  e.attr.blocks * 512);
			}
			b->ops->forget(b, e.nodeid, 1);
		}
	}
	ASSERT_EQ(0, b->ops->releasedir(b, dir, fh));
	EXPECT_EQ(2 + subdirs, attr_of(_metadata, b, dir).nlink);
}

TEST_TIMEOUT(fuzz_random_ops, 120)
{
	static struct fuzz z;
	unsigned int i, nr_ok = 0, nr_nospc = 0;
	struct fuse_kstatfs st;
	uint64_t base;
	int64_t r;

	z.b = make_fs(_metadata, NULL, 0, 2 * MiB);
	z.rng = 0x6b696c6e; /* fixed seed: a failure reproduces */
	base = free_fingerprint(_metadata, z.b);
	for (i = 0; i < FUZZ_OPS; i++) {
		r = fz_step(&z);
		ASSERT_TRUE(fz_ok(r)) TH_LOG("op %u: %lld", i, (long long)r);
		nr_ok += r >= 0;
		nr_nospc += r == -ENOSPC;
		if (i % 2000 == 1999)
			fz_check_nlink(_metadata, z.b, ROOT, 0);
	}
	fz_check_nlink(_metadata, z.b, ROOT, 0);
	TH_LOG("%u ops: %u succeeded, %u ENOSPC, %u lookups held", FUZZ_OPS,
	       nr_ok, nr_nospc, z.nr_ids);
	EXPECT_LT(FUZZ_OPS / 4, nr_ok);
	/* Give everything back: handles, lookups, then every name. */
	for (i = 0; i < z.nr_open; i++) {
		if (z.open[i].dir)
			ASSERT_EQ(0, z.b->ops->releasedir(z.b, z.open[i].id,
							  z.open[i].fh));
		else
			ASSERT_EQ(0, z.b->ops->release(z.b, z.open[i].id,
						       z.open[i].fh));
	}
	for (i = 0; i < z.nr_ids; i++)
		z.b->ops->forget(z.b, z.ids[i], 1);
	fz_check_and_clear(_metadata, z.b, ROOT, 0);
	EXPECT_EQ(2U, attr_of(_metadata, z.b, ROOT).nlink);
	/* Accounting back to the byte where it started. */
	EXPECT_EQ(base, free_fingerprint(_metadata, z.b));
	st = statfs_(_metadata, z.b);
	EXPECT_EQ(st.files, st.ffree + 1);
	/* And every node id handed out is gone. */
	for (i = 0; i < z.nr_ids; i++) {
		struct fuse_attr a;

		if (z.ids[i] != ROOT)
			EXPECT_EQ(-ESTALE,
				  z.b->ops->getattr(z.b, z.ids[i], &a));
	}
	fs_backend__destroy(z.b);
}

TEST_HARNESS_MAIN
