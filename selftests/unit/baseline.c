// SPDX-License-Identifier: GPL-2.0
/*
 * The baseline cache on disk (snapshot/baseline.h), without KVM: the entry
 * name an identity gives; a cache that is not owner-only is refused;
 * a valid entry is found and leased; an entry whose memory, manifest or
 * identity is wrong is discarded (removed) and one under an exclusive
 * lease is left alone; a capture appears whole and never replaces an
 * entry; eviction removes the least recently used first, skips a
 * leased one, and sweeps a dead capture's leftovers.
 *
 * Leases are flock(2)s, per open file description: a second open() in
 * this process contends with the first as another process would.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "snapshot/baseline.h"
#include "snapshot/file.h"
#include "snapshot/load.h"
#include "snapshot/state.h"

#define MEM_SIZE (1ULL << 20) /* a guest of 1 MiB */
#define VCPUS	 1U
#define VMM	 "0.1.0"
#define HEX_A	 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define HEX_B	 "1111111111111111111111111111111111111111111111111111111111111111"
#define HEX_C	 "2222222222222222222222222222222222222222222222222222222222222222"
#define ID_A	 "sha256:" HEX_A

struct cache {
	char base[64]; /* mkdtemp'ed */
	char path[96]; /* base/cache */
	int fd;
};

static void cache_make(struct __test_metadata *_metadata, struct cache *c)
{
	char err[512] = "";

	snprintf(c->base, sizeof(c->base), "/tmp/kiln-baseline-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(c->base));
	snprintf(c->path, sizeof(c->path), "%s/cache", c->base);
	ASSERT_EQ(0, baseline__open_cache(c->path, &c->fd, err, sizeof(err)))
	TH_LOG("%s", err);
}

static void cache_clean(struct cache *c)
{
	char cmd[128];

	if (c->fd >= 0)
		close(c->fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->base);
	if (system(cmd))
		(void)0;
}

static bool exists(const struct cache *c, const char *name)
{
	struct stat st;

	return !fstatat(c->fd, name, &st, AT_SYMLINK_NOFOLLOW);
}

/* Names in the cache other than entries: leftovers. */
static int leftovers(const struct cache *c)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s' | grep '^\\.')\"",
		 c->path);
	return system(cmd) ? 1 : 0;
}

static const struct snap_expect want_a = {
	.vmm = VMM,
	.identity_digest = ID_A,
	.vcpus = VCPUS,
	.memory_bytes = MEM_SIZE,
};

/*
 * An entry as a capture lays it out (vm.snapshot's files) for identity
 * "sha256:<hex>", with pages non-zero pages of memory (its data bytes).
 */
static int write_entry(const struct cache *c, const char *hex,
		       unsigned int pages, char *err, size_t len)
{
	static uint8_t mem[MEM_SIZE];
	char dir[200], id[80];
	struct snap_writer w;
	struct snap_dir d;
	json_t *fields;
	uint32_t v = 0;
	int ret;

	memset(mem, 0, sizeof(mem));
	for (unsigned int i = 0; i < pages; i++)
		memset(mem + i * SNAP_PAGE_SIZE, 0x5a, SNAP_PAGE_SIZE);
	snprintf(dir, sizeof(dir), "%s/%s", c->path, hex);
	snprintf(id, sizeof(id), "sha256:%s", hex);
	fields = json_pack("{s:s, s:i, s:I, s:s}", "vmm", VMM, "vcpus",
			   (int)VCPUS, "memoryBytes", (json_int_t)MEM_SIZE,
			   "identityDigest", id);
	if (!fields)
		return -ENOMEM;
	ret = snap_dir__create(&d, dir, err, len);
	if (ret)
		goto out;
	snap_writer__init(&w, SNAP_KIND_VCPU);
	snap_writer__add(&w, 1, &v, sizeof(v));
	ret = w.err ? w.err :
		      snap_dir__write_part(&d, "vcpu0.state", "vcpu", w.buf,
					   w.len, err, len);
	snap_writer__release(&w);
	if (!ret) {
		snap_writer__init(&w, SNAP_KIND_VM);
		snap_writer__add(&w, 1, &v, sizeof(v));
		ret = w.err ? w.err :
			      snap_dir__write_part(&d, "vm.state", "vm", w.buf,
						   w.len, err, len);
		snap_writer__release(&w);
	}
	if (!ret)
		ret = snap_dir__write_part(&d, "devices.json", "devices", "[]",
					   2, err, len);
	if (!ret)
		ret = snap_dir__write_memory(&d, "memory.raw", mem, MEM_SIZE,
					     err, len);
	if (!ret)
		ret = snap_dir__finish(&d, fields, err, len);
	snap_dir__close(&d);
out:
	json_decref(fields);
	return ret;
}

/* The entry's last use (its directory's mtime), seconds ago. */
static void set_used(struct __test_metadata *_metadata, const struct cache *c,
		     const char *hex, time_t ago)
{
	struct timespec t[2];

	clock_gettime(CLOCK_REALTIME, &t[0]);
	t[0].tv_sec -= ago;
	t[1] = t[0];
	ASSERT_EQ(0, utimensat(c->fd, hex, t, AT_SYMLINK_NOFOLLOW));
}

static int open_entry(const struct cache *c, const char *name)
{
	return openat(c->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void flip_byte(struct __test_metadata *_metadata, const struct cache *c,
		      const char *hex, const char *file, off_t off)
{
	char path[256];
	uint8_t b;
	int fd;

	snprintf(path, sizeof(path), "%s/%s/%s", c->path, hex, file);
	fd = open(path, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(1, pread(fd, &b, 1, off));
	b ^= 0x80;
	ASSERT_EQ(1, pwrite(fd, &b, 1, off));
	close(fd);
}

/* ---- the key -------------------------------------------------------- */

TEST(the_key_is_the_identity_digests_hex_and_nothing_else)
{
	static const char *const bad[] = {
		HEX_A, /* no prefix */
		"sha1:" HEX_A,
		"sha256:00112233445566778899AABBCCDDEEFF00112233445566778899"
		"aabbccddeeff",	     /* upper case */
		"sha256:" HEX_A "0", /* too long */
		"sha256:0011",	     /* too short */
		"sha256:../../../../../../../../../../../../../../../../../"
		"../../../etc", /* a path */
		"",
	};
	char key[BASELINE_KEY_LEN + 1];

	ASSERT_EQ(0, baseline__key(ID_A, key));
	EXPECT_STREQ(HEX_A, key);
	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++)
		EXPECT_EQ(-EINVAL, baseline__key(bad[i], key))
	TH_LOG("case %u: %s", i, bad[i]);
	EXPECT_EQ(-EINVAL, baseline__key(NULL, key));
}

/* ---- the cache's modes ---------------------------------------------- */

TEST(a_cache_that_is_not_owner_only_is_refused)
{
	char base[64], path[96], link[96], err[512] = "";
	struct stat st;
	int fd, ret;

	snprintf(base, sizeof(base), "/tmp/kiln-baseline-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(base));
	snprintf(path, sizeof(path), "%s/cache", base);
	/* Missing: made 0700, whatever the umask. */
	umask(022);
	ASSERT_EQ(0, baseline__open_cache(path, &fd, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, fstat(fd, &st));
	EXPECT_EQ(0700, st.st_mode & 07777);
	close(fd);
	/* Taken again as it is. */
	ASSERT_EQ(0, baseline__open_cache(path, &fd, err, sizeof(err)));
	close(fd);
	/* Group- or world-readable: refused, the mode named. */
	ASSERT_EQ(0, chmod(path, 0750));
	EXPECT_EQ(-EPERM, baseline__open_cache(path, &fd, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "mode 0750")) TH_LOG("%s", err);
	EXPECT_NE(NULL, strstr(err, "owner-only")) TH_LOG("%s", err);
	EXPECT_EQ(-1, fd);
	ASSERT_EQ(0, chmod(path, 0700));
	/* A symbolic link to it: not followed. */
	snprintf(link, sizeof(link), "%s/link", base);
	ASSERT_EQ(0, symlink(path, link));
	ret = baseline__open_cache(link, &fd, err, sizeof(err));
	/* O_NOFOLLOW with O_DIRECTORY: ENOTDIR on Linux, ELOOP in POSIX. */
	EXPECT_TRUE(ret == -ELOOP || ret == -ENOTDIR) TH_LOG("%d", ret);
	EXPECT_NE(NULL, strstr(err, "symbolic link")) TH_LOG("%s", err);
	/* A file: not a directory. */
	snprintf(link, sizeof(link), "%s/file", base);
	close(open(link, O_CREAT | O_WRONLY, 0600));
	EXPECT_EQ(-ENOTDIR, baseline__open_cache(link, &fd, err, sizeof(err)));
	snprintf(link, sizeof(link), "rm -rf '%s'", base);
	if (system(link))
		(void)0;
}

/* ---- lookup -------------------------------------------------------- */

TEST(a_valid_entry_is_found_and_leased)
{
	char err[512] = "", why[512] = "";
	struct snap_load l;
	struct cache c;
	struct stat st;
	int lease, other;

	cache_make(_metadata, &c);
	EXPECT_EQ(-ENOENT, baseline__lookup(c.fd, c.path, HEX_A, &want_a, &l,
					    &lease, why, sizeof(why)));
	EXPECT_EQ(-1, lease);
	ASSERT_EQ(0, write_entry(&c, HEX_A, 2, err, sizeof(err)))
	TH_LOG("%s", err);
	set_used(_metadata, &c, HEX_A, 3600);
	ASSERT_EQ(0, baseline__lookup(c.fd, c.path, HEX_A, &want_a, &l, &lease,
				      why, sizeof(why)))
	TH_LOG("%s", why);
	EXPECT_LE(0, l.mem_fd);
	EXPECT_EQ(MEM_SIZE, l.mem_bytes);
	snap_load__close(&l);
	/* Shared: another VM may restore too; an eviction may not. */
	other = open_entry(&c, HEX_A);
	ASSERT_LE(0, other);
	EXPECT_EQ(0, flock(other, LOCK_SH | LOCK_NB));
	EXPECT_EQ(0, flock(other, LOCK_UN));
	EXPECT_EQ(-1, flock(other, LOCK_EX | LOCK_NB));
	EXPECT_EQ(EWOULDBLOCK, errno);
	EXPECT_EQ(0, baseline__evict(c.fd, 0, 1)); /* bounds of nothing */
	EXPECT_TRUE(exists(&c, HEX_A));
	/* Used now: its mtime moved on from an hour ago. */
	ASSERT_EQ(0, fstat(lease, &st));
	EXPECT_LT(time(NULL) - 60, st.st_mtime);
	close(lease);
	EXPECT_EQ(0, flock(other, LOCK_EX | LOCK_NB));
	close(other);
	cache_clean(&c);
}

static void corrupt_memory(struct __test_metadata *_metadata,
			   const struct cache *c)
{
	flip_byte(_metadata, c, HEX_A, "memory.raw", 100);
}

/* Cut to 10 bytes, as the booted test does: not JSON any more. */
static void corrupt_manifest(struct __test_metadata *_metadata,
			     const struct cache *c)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s/%s", c->path, HEX_A, SNAP_MANIFEST);
	ASSERT_EQ(0, truncate(path, 10));
}

static void corrupt_vcpu(struct __test_metadata *_metadata,
			 const struct cache *c)
{
	flip_byte(_metadata, c, HEX_A, "vcpu0.state", 20);
}

TEST(a_corrupt_entry_is_discarded)
{
	static const struct {
		void (*corrupt)(struct __test_metadata *_metadata,
				const struct cache *c);
		int ret;
		const char *says;
	} cases[] = {
		{ corrupt_memory, -EBADMSG, "memory.raw" },
		{ corrupt_manifest, -EINVAL, "manifest.json" },
		{ corrupt_vcpu, -EBADMSG, "vcpu0.state" },
	};
	char err[512] = "", why[512] = "";
	struct snap_load l;
	struct cache c;
	int lease;

	cache_make(_metadata, &c);
	for (unsigned int i = 0; i < ARRAY_SIZE(cases); i++) {
		ASSERT_EQ(0, write_entry(&c, HEX_A, 2, err, sizeof(err)))
		TH_LOG("%s", err);
		cases[i].corrupt(_metadata, &c);
		EXPECT_EQ(cases[i].ret,
			  baseline__lookup(c.fd, c.path, HEX_A, &want_a, &l,
					   &lease, why, sizeof(why)))
		TH_LOG("case %u: %s", i, why);
		EXPECT_NE(NULL, strstr(why, cases[i].says))
		TH_LOG("case %u: %s", i, why);
		EXPECT_EQ(-1, lease);
		/* Gone, leftovers and all: the next start captures anew. */
		EXPECT_FALSE(exists(&c, HEX_A)) TH_LOG("case %u", i);
		EXPECT_EQ(0, leftovers(&c)) TH_LOG("case %u", i);
	}
	cache_clean(&c);
}

TEST(an_entry_of_another_identity_is_discarded)
{
	static const struct snap_expect want_b = {
		.vmm = VMM,
		.identity_digest = "sha256:" HEX_B,
		.vcpus = VCPUS,
		.memory_bytes = MEM_SIZE,
	};
	char err[512] = "", why[512] = "";
	char from[256], to[256];
	struct snap_load l;
	struct cache c;
	int lease;

	cache_make(_metadata, &c);
	/* A's snapshot under B's name (a copy, a bug, a hand). */
	ASSERT_EQ(0, write_entry(&c, HEX_A, 1, err, sizeof(err)));
	snprintf(from, sizeof(from), "%s/%s", c.path, HEX_A);
	snprintf(to, sizeof(to), "%s/%s", c.path, HEX_B);
	ASSERT_EQ(0, rename(from, to));
	EXPECT_EQ(-EINVAL, baseline__lookup(c.fd, c.path, HEX_B, &want_b, &l,
					    &lease, why, sizeof(why)));
	EXPECT_NE(NULL, strstr(why, "identityDigest")) TH_LOG("%s", why);
	EXPECT_FALSE(exists(&c, HEX_B));
	cache_clean(&c);
}

TEST(an_entry_under_an_exclusive_lease_is_left_alone)
{
	char err[512] = "", why[512] = "";
	struct snap_load l;
	struct cache c;
	int lease, held;

	cache_make(_metadata, &c);
	ASSERT_EQ(0, write_entry(&c, HEX_A, 1, err, sizeof(err)));
	held = open_entry(&c, HEX_A);
	ASSERT_LE(0, held);
	ASSERT_EQ(0, flock(held, LOCK_EX | LOCK_NB));
	EXPECT_EQ(-EWOULDBLOCK, baseline__lookup(c.fd, c.path, HEX_A, &want_a,
						 &l, &lease, why, sizeof(why)));
	EXPECT_NE(NULL, strstr(why, "exclusive lease")) TH_LOG("%s", why);
	EXPECT_TRUE(exists(&c, HEX_A));
	close(held);
	/* Released: found. */
	ASSERT_EQ(0, baseline__lookup(c.fd, c.path, HEX_A, &want_a, &l, &lease,
				      why, sizeof(why)))
	TH_LOG("%s", why);
	snap_load__close(&l);
	close(lease);
	cache_clean(&c);
}

/* A corrupt entry that another VM still leases stays for it. */
TEST(a_corrupt_entry_leased_by_another_stays)
{
	char err[512] = "", why[512] = "";
	struct snap_load l;
	struct cache c;
	int lease, other;

	cache_make(_metadata, &c);
	ASSERT_EQ(0, write_entry(&c, HEX_A, 1, err, sizeof(err)));
	other = open_entry(&c, HEX_A);
	ASSERT_LE(0, other);
	ASSERT_EQ(0, flock(other, LOCK_SH | LOCK_NB));
	corrupt_memory(_metadata, &c);
	EXPECT_EQ(-EBADMSG, baseline__lookup(c.fd, c.path, HEX_A, &want_a, &l,
					     &lease, why, sizeof(why)));
	EXPECT_TRUE(exists(&c, HEX_A));
	close(other);
	cache_clean(&c);
}

/* ---- capture ------------------------------------------------------- */

TEST(a_capture_appears_whole_and_never_replaces)
{
	char err[512] = "", why[512] = "", tmp[BASELINE_TMP_NAME_LEN];
	char tmp2[BASELINE_TMP_NAME_LEN], dir[256], hexdir[256];
	struct snap_load l;
	struct cache c;
	int fd, fd2, lease;

	cache_make(_metadata, &c);
	ASSERT_EQ(0,
		  baseline__make_tmp(c.fd, HEX_A, &fd, tmp, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(0, strncmp(tmp, BASELINE_TMP_PREFIX,
			     strlen(BASELINE_TMP_PREFIX)));
	/* Being written: an eviction's sweep leaves it. */
	EXPECT_EQ(0, baseline__evict(c.fd, 8, 1ULL << 40));
	EXPECT_TRUE(exists(&c, tmp));
	/*
	 * The snapshot written into it (write_entry writes cache/<hex>:
	 * written there, then moved in its place).
	 */
	snprintf(dir, sizeof(dir), "%s/%s", c.path, tmp);
	ASSERT_EQ(0, write_entry(&c, HEX_C, 1, err, sizeof(err)));
	snprintf(hexdir, sizeof(hexdir), "%s/%s", c.path, HEX_C);
	ASSERT_EQ(0, rmdir(dir));
	ASSERT_EQ(0, rename(hexdir, dir));
	/* Nothing under A's name until it is published. */
	EXPECT_EQ(-ENOENT, baseline__lookup(c.fd, c.path, HEX_A, &want_a, &l,
					    &lease, why, sizeof(why)));
	ASSERT_EQ(0, baseline__publish(c.fd, tmp, HEX_A, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_FALSE(exists(&c, tmp));
	EXPECT_TRUE(exists(&c, HEX_A));
	close(fd);
	/* A second capture of the same identity does not replace it. */
	ASSERT_EQ(0, baseline__make_tmp(c.fd, HEX_A, &fd2, tmp2, err,
					sizeof(err)));
	EXPECT_EQ(-EEXIST,
		  baseline__publish(c.fd, tmp2, HEX_A, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_TRUE(exists(&c, tmp2));
	/* Its monitor gone (the lease with it): swept. */
	close(fd2);
	EXPECT_EQ(0, baseline__evict(c.fd, 8, 1ULL << 40));
	EXPECT_FALSE(exists(&c, tmp2));
	EXPECT_TRUE(exists(&c, HEX_A));
	cache_clean(&c);
}

/* ---- eviction ------------------------------------------------------ */

TEST(eviction_takes_the_least_recently_used_and_skips_leases)
{
	char err[512] = "";
	struct cache c;
	int lease;

	cache_make(_metadata, &c);
	ASSERT_EQ(0, write_entry(&c, HEX_A, 1, err, sizeof(err)));
	ASSERT_EQ(0, write_entry(&c, HEX_B, 1, err, sizeof(err)));
	ASSERT_EQ(0, write_entry(&c, HEX_C, 1, err, sizeof(err)));
	set_used(_metadata, &c, HEX_A, 100); /* the oldest */
	set_used(_metadata, &c, HEX_B, 300);
	set_used(_metadata, &c, HEX_C, 200);
	/* Within the bounds: nothing. */
	EXPECT_EQ(0, baseline__evict(c.fd, 3, 1ULL << 40));
	/* One too many: B, the least recently used. */
	EXPECT_EQ(1, baseline__evict(c.fd, 2, 1ULL << 40));
	EXPECT_FALSE(exists(&c, HEX_B));
	EXPECT_TRUE(exists(&c, HEX_A));
	EXPECT_TRUE(exists(&c, HEX_C));
	/* C is next, but leased: A goes instead. */
	lease = open_entry(&c, HEX_C);
	ASSERT_LE(0, lease);
	ASSERT_EQ(0, flock(lease, LOCK_SH));
	EXPECT_EQ(1, baseline__evict(c.fd, 1, 1ULL << 40));
	EXPECT_TRUE(exists(&c, HEX_C));
	EXPECT_FALSE(exists(&c, HEX_A));
	/* Every one leased: the bound waits. */
	EXPECT_EQ(0, baseline__evict(c.fd, 0, 1ULL << 40));
	EXPECT_TRUE(exists(&c, HEX_C));
	close(lease);
	EXPECT_EQ(0, leftovers(&c));
	cache_clean(&c);
}

/* An entry's data bytes as the cache counts them: its files' st_blocks. */
static uint64_t entry_bytes(const struct cache *c, const char *hex)
{
	static const char *const files[] = { "vcpu0.state", "vm.state",
					     "devices.json", "memory.raw",
					     SNAP_MANIFEST };
	uint64_t n = 0;
	char path[256];
	struct stat st;

	for (unsigned int i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", c->path, hex,
			 files[i]);
		if (!stat(path, &st))
			n += (uint64_t)st.st_blocks * 512;
	}
	return n;
}

static void write_three(struct __test_metadata *_metadata,
			const struct cache *c)
{
	char err[512] = "";

	/* A holds 64 pages of memory, B and C one each; B is the oldest. */
	ASSERT_EQ(0, write_entry(c, HEX_A, 64, err, sizeof(err)));
	ASSERT_EQ(0, write_entry(c, HEX_B, 1, err, sizeof(err)));
	ASSERT_EQ(0, write_entry(c, HEX_C, 1, err, sizeof(err)));
	set_used(_metadata, c, HEX_A, 100);
	set_used(_metadata, c, HEX_B, 300);
	set_used(_metadata, c, HEX_C, 200);
}

TEST(eviction_keeps_the_data_bytes_within_max_bytes)
{
	uint64_t a, b, cc;
	struct cache c;

	cache_make(_metadata, &c);
	write_three(_metadata, &c);
	a = entry_bytes(&c, HEX_A);
	b = entry_bytes(&c, HEX_B);
	cc = entry_bytes(&c, HEX_C);
	ASSERT_LT(b, a)
	TH_LOG("A %llu bytes, B %llu", (unsigned long long)a,
	       (unsigned long long)b);
	/* All of it fits: nothing. */
	EXPECT_EQ(0, baseline__evict(c.fd, 8, a + b + cc));
	/* A and C fit, but not with B: B (oldest), then C, until A fits. */
	EXPECT_EQ(2, baseline__evict(c.fd, 8, a + cc - 1));
	EXPECT_TRUE(exists(&c, HEX_A));
	EXPECT_FALSE(exists(&c, HEX_B));
	EXPECT_FALSE(exists(&c, HEX_C));
	/* Not even A fits: all of them go, the oldest first. */
	cache_clean(&c);
	cache_make(_metadata, &c);
	write_three(_metadata, &c);
	EXPECT_EQ(3, baseline__evict(c.fd, 8, a - 1));
	EXPECT_FALSE(exists(&c, HEX_A));
	EXPECT_EQ(0, leftovers(&c));
	cache_clean(&c);
}

TEST_HARNESS_MAIN
