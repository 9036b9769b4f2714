// SPDX-License-Identifier: GPL-2.0
/*
 * The bind backend under a tiny descriptor budget (16): a tree of 1,000
 * files walked, stat'ed, opened and read while the mount holds at most 16
 * host descriptors, node descriptors closed least recently used first and
 * opened again (devices/fs/passthrough-fds.c). Both ways of opening them
 * again: by file handle (CAP_DAC_READ_SEARCH) and by name (the capability
 * dropped before create, or after it, as the jail does). A file renamed
 * or removed on the host while its descriptor is closed answers ESTALE or
 * is still itself, never another file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "devices/fs/passthrough.h"
#include "selftests/kselftest.h"

#define ROOT	    FUSE_ROOT_ID
#define NR_DIRS	    10
#define NR_PER	    100 /* files per directory: 1,000 in all */
#define BUDGET	    16
#define MONITOR_FDS 24 /* the monitor's budget, in the last test */

FIXTURE(lru)
{
	char top[64];
	struct fs_backend *b;
	uint64_t dirs[NR_DIRS];
	uint64_t files[NR_DIRS][NR_PER];
	uint64_t inos[NR_DIRS][NR_PER];
};

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void host_path(char *buf, size_t size, const char *top, int d, int f)
{
	if (f < 0)
		snprintf(buf, size, "%s/d%d", top, d);
	else
		snprintf(buf, size, "%s/d%d/f%03d", top, d, f);
}

static int put(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fputs(content, f);
	return fclose(f) ? -errno : 0;
}

FIXTURE_SETUP(lru)
{
	char path[128], body[32];
	int d, f;

	snprintf(self->top, sizeof(self->top), "/tmp/kiln-lru-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->top));
	for (d = 0; d < NR_DIRS; d++) {
		host_path(path, sizeof(path), self->top, d, -1);
		ASSERT_EQ(0, mkdir(path, 0755));
		for (f = 0; f < NR_PER; f++) {
			host_path(path, sizeof(path), self->top, d, f);
			snprintf(body, sizeof(body), "d%d/f%03d\n", d, f);
			ASSERT_EQ(0, put(path, body));
		}
	}
	self->b = NULL;
}

FIXTURE_TEARDOWN(lru)
{
	fs_backend__destroy(self->b);
	nftw(self->top, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Descriptors open in this process. */
static int fds_open(void)
{
	struct dirent *e;
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;

	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* CAP_DAC_READ_SEARCH out of the effective set: 0 or -errno. */
static int drop_dac_read_search(void)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &hdr, data))
		return -errno;
	data[0].effective &= ~(1U << CAP_DAC_READ_SEARCH);
	return syscall(SYS_capset, &hdr, data) ? -errno : 0;
}

/* Whether file handles open files again here (the capability, the fs). */
static bool handles_work(const char *dir)
{
	struct {
		struct file_handle fh;
		unsigned char bytes[128];
	} h = { .fh.handle_bytes = 128 };
	int mnt, dfd, fd;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return false;
	fd = name_to_handle_at(dfd, "", &h.fh, &mnt, AT_EMPTY_PATH) ?
		     -1 :
		     open_by_handle_at(dfd, &h.fh, O_PATH | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static int bind_new(FIXTURE_DATA(lru) * self)
{
	struct fs_bind_params p = {
		.name = "bind:/lru",
		.source = self->top,
		.ownership = FS_OWNERSHIP_SQUASH,
		.max_fds = BUDGET,
	};

	return passthrough__create(&self->b, &p);
}

static int lookup(struct fs_backend *b, uint64_t parent, const char *name,
		  uint64_t *id, uint64_t *ino)
{
	struct fs_entry e;
	int ret = b->ops->lookup(b, parent, name, &e);

	*id = ret ? 0 : e.nodeid;
	if (ino)
		*ino = ret ? 0 : e.attr.ino;
	return ret;
}

/* The whole of node id's file, read through an open handle, into buf. */
static int cat(struct fs_backend *b, uint64_t id, char *buf, size_t size)
{
	struct iovec iov = { .iov_base = buf, .iov_len = size - 1 };
	uint64_t fh;
	uint32_t of;
	ssize_t n;
	int ret;

	buf[0] = '\0';
	ret = b->ops->open(b, id, O_RDONLY, &fh, &of);
	if (ret)
		return ret;
	n = b->ops->read(b, id, fh, &iov, 1, 0);
	if (n >= 0)
		buf[n] = '\0';
	ret = b->ops->release(b, id, fh);
	return n < 0 ? (int)n : ret;
}

/*
 * Every file looked up (and kept: the guest holds 1,010 nodes), stat'ed,
 * opened and read, then stat'ed again; the process never holds more
 * than the budget (and the few the test opens itself).
 */
static void walk_all(struct __test_metadata *_metadata,
		     FIXTURE_DATA(lru) * self)
{
	struct fs_backend *b = self->b;
	char name[16], buf[64], want[32];
	struct fuse_attr a;
	int d, f, base = fds_open();

	for (d = 0; d < NR_DIRS; d++) {
		snprintf(name, sizeof(name), "d%d", d);
		ASSERT_EQ(0, lookup(b, ROOT, name, &self->dirs[d], NULL));
		for (f = 0; f < NR_PER; f++) {
			snprintf(name, sizeof(name), "f%03d", f);
			ASSERT_EQ(0, lookup(b, self->dirs[d], name,
					    &self->files[d][f],
					    &self->inos[d][f]));
			ASSERT_EQ(0, b->ops->getattr(b, self->files[d][f], &a));
			snprintf(want, sizeof(want), "d%d/f%03d\n", d, f);
			ASSERT_EQ(strlen(want), a.size);
			ASSERT_EQ(0,
				  cat(b, self->files[d][f], buf, sizeof(buf)));
			ASSERT_STREQ(want, buf);
			ASSERT_GE(base + BUDGET, fds_open());
		}
	}
	/* Everything again, in another order: each opened again. */
	for (f = NR_PER - 1; f >= 0; f--)
		for (d = 0; d < NR_DIRS; d++) {
			ASSERT_EQ(0, b->ops->getattr(b, self->files[d][f], &a));
			ASSERT_EQ(self->inos[d][f], a.ino);
		}
	ASSERT_GE(base + BUDGET, fds_open());
}

/* Enough other nodes used that n's descriptor is closed. */
static void evict(FIXTURE_DATA(lru) * self, int d)
{
	struct fuse_attr a;
	int f;

	for (f = 0; f < 2 * BUDGET; f++)
		self->b->ops->getattr(self->b, self->files[d][f], &a);
}

/*
 * Renamed by a host process while closed: by handle still itself, by
 * name ESTALE; a file put at the old name is never served for it.
 */
static void renamed_while_closed(struct __test_metadata *_metadata,
				 FIXTURE_DATA(lru) * self, bool by_handle)
{
	struct fs_backend *b = self->b;
	uint64_t id = self->files[3][50], moved;
	char from[128], to[128], buf[64];
	struct fuse_attr a;
	int ret;

	evict(self, 7);
	host_path(from, sizeof(from), self->top, 3, 50);
	snprintf(to, sizeof(to), "%s/d3/moved", self->top);
	ASSERT_EQ(0, rename(from, to));
	ASSERT_EQ(0, put(from, "IMPOSTOR\n"));
	ret = b->ops->getattr(b, id, &a);
	if (by_handle) {
		ASSERT_EQ(0, ret);
		EXPECT_EQ(self->inos[3][50], a.ino);
	} else {
		EXPECT_EQ(-ESTALE, ret);
	}
	/* Opening goes by the recorded name: that is another file now. */
	EXPECT_EQ(-ESTALE, cat(b, id, buf, sizeof(buf)));
	EXPECT_STREQ("", buf);
	/* Looked up again under its new name: the same node, its data. */
	ASSERT_EQ(0, lookup(b, self->dirs[3], "moved", &moved, NULL));
	EXPECT_EQ(id, moved);
	ASSERT_EQ(0, cat(b, moved, buf, sizeof(buf)));
	EXPECT_STREQ("d3/f050\n", buf);
}

/*
 * Removed while closed: ESTALE, also when a new file takes the name (and
 * perhaps the inode number: ext4 hands freed ones out again), which gets
 * a node of its own.
 */
static void removed_while_closed(struct __test_metadata *_metadata,
				 FIXTURE_DATA(lru) * self)
{
	struct fs_backend *b = self->b;
	uint64_t id = self->files[5][10], again, ino;
	char path[128], buf[64];
	struct fuse_attr a;

	evict(self, 7);
	host_path(path, sizeof(path), self->top, 5, 10);
	ASSERT_EQ(0, unlink(path));
	EXPECT_EQ(-ESTALE, b->ops->getattr(b, id, &a));
	ASSERT_EQ(0, put(path, "NEW\n"));
	evict(self, 7);
	EXPECT_EQ(-ESTALE, b->ops->getattr(b, id, &a));
	EXPECT_EQ(-ESTALE, cat(b, id, buf, sizeof(buf)));
	ASSERT_EQ(0, lookup(b, self->dirs[5], "f010", &again, &ino));
	EXPECT_NE(id, again);
	ASSERT_EQ(0, cat(b, again, buf, sizeof(buf)));
	EXPECT_STREQ("NEW\n", buf);
	TH_LOG("the new file's inode number is %s",
	       ino == self->inos[5][10] ? "the old one's" : "another");
	EXPECT_EQ(-ESTALE, b->ops->getattr(b, id, &a));
}

TEST_F_TIMEOUT(lru, by_handle_1000_files_16_fds, 120)
{
	if (!handles_work(self->top))
		SKIP(return,
			   "open_by_handle_at refused here (no "
			   "CAP_DAC_READ_SEARCH, or no handles on %s)",
			   self->top);
	ASSERT_EQ(0, bind_new(self));
	walk_all(_metadata, self);
	renamed_while_closed(_metadata, self, true);
	removed_while_closed(_metadata, self);
}

TEST_F_TIMEOUT(lru, by_name_1000_files_16_fds, 120)
{
	ASSERT_EQ(0, drop_dac_read_search());
	ASSERT_FALSE(handles_work(self->top));
	ASSERT_EQ(0, bind_new(self));
	walk_all(_metadata, self);
	renamed_while_closed(_metadata, self, false);
	removed_while_closed(_metadata, self);
}

/* The jail drops the capability after create: names from then on. */
TEST_F_TIMEOUT(lru, capability_dropped_after_create, 120)
{
	if (!handles_work(self->top))
		SKIP(return, "open_by_handle_at refused here");
	ASSERT_EQ(0, bind_new(self));
	walk_all(_metadata, self);
	ASSERT_EQ(0, drop_dac_read_search());
	renamed_while_closed(_metadata, self, false);
	removed_while_closed(_metadata, self);
}

/* A directory path deeper than the budget cannot be held: ENFILE. */
TEST_F(lru, deeper_than_the_budget)
{
	char path[512], name[8];
	uint64_t id = ROOT, next;
	size_t len;
	int i, ret = 0;

	ASSERT_EQ(0, drop_dac_read_search());
	len = (size_t)snprintf(path, sizeof(path), "%s", self->top);
	for (i = 0; i < 2 * BUDGET; i++) {
		len += (size_t)snprintf(path + len, sizeof(path) - len, "/x");
		ASSERT_EQ(0, mkdir(path, 0755));
	}
	ASSERT_EQ(0, bind_new(self));
	for (i = 0; i < 2 * BUDGET; i++) {
		snprintf(name, sizeof(name), "x");
		ret = lookup(self->b, id, name, &next, NULL);
		if (ret)
			break;
		id = next;
	}
	/* Each level still works while the path fits in the budget. */
	EXPECT_LT(BUDGET / 2, i);
	if (ret)
		EXPECT_EQ(-ENFILE, ret);
}

/*
 * Bind mounts are on the monitor's descriptor budget (lib/fdbudget.h,
 * issue 34 finding 9): a guest holding open more files than it has gets
 * EMFILE on the bind (its idle node descriptors closed first); the
 * budget is never passed, the process holds no more, and once the guest
 * closes its files, opens work again and everything is given back.
 */
TEST_F(lru, open_files_past_the_monitors_budget)
{
	struct fs_backend *b;
	struct fd_budget fds = { 0 };
	struct fs_bind_params p = {
		.name = "bind:/lru",
		.source = self->top,
		.ownership = FS_OWNERSHIP_SQUASH,
		.max_fds = 4 * MONITOR_FDS,
		.fds = &fds,
	};
	uint64_t d0, id[NR_PER], fh[NR_PER], of_fh;
	char name[8], buf[32];
	int before, n = 0, ret = 0;
	uint32_t of;

	before = fds_open();
	ASSERT_EQ(0, passthrough__create(&self->b, &p));
	b = self->b;
	atomic_store(&fds.max, MONITOR_FDS);
	ASSERT_EQ(0, lookup(b, ROOT, "d0", &d0, NULL));
	for (n = 0; n < NR_PER; n++) {
		snprintf(name, sizeof(name), "f%03d", n);
		ret = lookup(b, d0, name, &id[n], NULL);
		if (!ret)
			ret = b->ops->open(b, id[n], O_RDONLY, &fh[n], &of);
		if (ret)
			break;
	}
	/* Refused before the budget, never past it. */
	EXPECT_EQ(-EMFILE, ret);
	EXPECT_LT(MONITOR_FDS / 4, n); /* a node and a handle each */
	EXPECT_GE(MONITOR_FDS, n);
	EXPECT_GE((size_t)MONITOR_FDS, atomic_load(&fds.held));
	EXPECT_GE(before + MONITOR_FDS + 8, fds_open());
	/* The guest closes its files: the mount serves again. */
	for (int i = 0; i < n; i++)
		EXPECT_EQ(0, b->ops->release(b, id[i], fh[i]));
	EXPECT_EQ(0, cat(b, id[0], buf, sizeof(buf)));
	EXPECT_STREQ("d0/f000\n", buf);
	EXPECT_EQ(0, b->ops->open(b, id[1], O_RDONLY, &of_fh, &of));
	EXPECT_EQ(0, b->ops->release(b, id[1], of_fh));
	fs_backend__destroy(self->b);
	self->b = NULL;
	EXPECT_EQ(0U, atomic_load(&fds.held));
}

TEST_HARNESS_MAIN
