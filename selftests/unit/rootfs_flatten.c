// SPDX-License-Identifier: GPL-2.0
/*
 * vmm rootfs flatten, describe and bytes, run as a user runs them: a raw
 * base and a persistent state file written through the disk API (data
 * over base data, data over zeros, zeroed base data, a data block of
 * zeros, the short last cluster), flattened to qcow2 with 4 KiB, 64 KiB
 * and 2 MiB clusters and checked by QEMU's own tools (qemu-img check,
 * compare against the composed raw, map: the all-zero region stays
 * unallocated), and to sparse raw; a block store's blocks over the
 * base (tools/kiln-store-mem), a qcow2 base made by qemu-img (compressed,
 * with a state file of its own), the image written into a block store;
 * describe against sha256sum and rootfs__load; bytes against the file;
 * every refusal one line and 125, with no half image left. No KVM needed.
 */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/block/qcow2-write.h"
#include "devices/block/store.h"
#include "lib/sha256.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"
#include "vmm/rootfs.h"

#define VMM_EXIT_VMM_ERROR 125
#define MIB		   (1ULL << 20)
/* Not a multiple of any cluster size: the last cluster is short. */
#define BASE_SIZE  (16 * MIB + 3 * 4096)
#define ZERO_START (8 * MIB) /* [ZERO_START, ZERO_END) reads as zeros */
#define ZERO_END   (16 * MIB)

FIXTURE(flatten)
{
	char dir[64];
	char path[18][128];
	uint8_t *base;	   /* BASE_SIZE bytes, as in base.raw */
	uint8_t *composed; /* base + the overlay */
	char digest[ROOTFS_DIGEST_LEN + 1];
};

enum {
	P_BASE,
	P_DESC,
	P_STATE,
	P_COMPOSED,
	P_OUT,
	P_CACHE,
	P_OTHER_BASE,
	P_OTHER_DESC,
	P_OTHER_STATE,
	P_BYTES,
	P_MAP,
	P_DESCRIBED,
	P_SOCK,
	P_QCOW2,
	P_QCOW2_DESC,
	P_QCOW2_STATE,
	P_OUT_SOCK,
	P_EXPECT,
};

static const char *const names[] = {
	[P_BASE] = "base.raw",
	[P_DESC] = "base.json",
	[P_STATE] = "state.kiln",
	[P_COMPOSED] = "composed.raw",
	[P_OUT] = "out.img",
	[P_CACHE] = "cache",
	[P_OTHER_BASE] = "other.raw",
	[P_OTHER_DESC] = "other.json",
	[P_OTHER_STATE] = "other.kiln",
	[P_BYTES] = "bytes.out",
	[P_MAP] = "map.json",
	[P_DESCRIBED] = "described.json",
	[P_SOCK] = "store.sock",
	[P_QCOW2] = "base.qcow2",
	[P_QCOW2_DESC] = "base-qcow2.json",
	[P_QCOW2_STATE] = "state-qcow2.kiln",
	[P_OUT_SOCK] = "out.sock",
	[P_EXPECT] = "expect.raw",
};

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
		abort();
	close(fd);
}

/* The whole file, malloc'ed; *len its size. */
static uint8_t *read_file(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st))
		return NULL;
	buf = malloc(st.st_size + 1);
	if (!buf || read(fd, buf, st.st_size + 1) != (ssize_t)st.st_size) {
		free(buf);
		close(fd);
		return NULL;
	}
	close(fd);
	*len = st.st_size;
	return buf;
}

static void digest_of(const void *buf, size_t len, char *out)
{
	char hex[SHA256_HEX_LEN + 1];

	if (sha256__hex(buf, len, hex))
		abort();
	snprintf(out, ROOTFS_DIGEST_LEN + 1, "sha256:%s", hex);
}

static void write_desc_as(const char *path, const char *image,
			  const char *format, const char *digest)
{
	char doc[512];

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"flatten-test\", \"path\": \"%s\", "
		 "\"format\": \"%s\", \"architecture\": \"x86_64\", "
		 "\"digest\": \"%s\", \"sizeBytes\": %llu}",
		 image, format, digest, (unsigned long long)BASE_SIZE);
	write_file(path, doc, strlen(doc));
}

static void write_desc(const char *path, const char *image, const char *digest)
{
	write_desc_as(path, image, "raw", digest);
}

static void fill(uint8_t *p, uint64_t from, uint64_t to, uint8_t seed)
{
	uint64_t i;

	for (i = from; i < to; i++)
		p[i] = (uint8_t)(seed + i / 4096 * 7 + i % 13) | 1;
}

/* Through the disk API, as the block device writes a state file. */
static void overlay_write(struct disk *d, uint8_t *composed, uint64_t off,
			  uint64_t len, int byte)
{
	struct disk_extent ext;
	uint64_t reserved;
	uint8_t *buf = malloc(len);

	memset(buf, byte, len);
	if (!buf || disk__begin_write(d, off, len, &ext, &reserved) ||
	    pwrite(ext.fd, buf, len, ext.offset) != (ssize_t)len)
		abort();
	disk__end_write(d, off, len, reserved, true);
	memcpy(composed + off, buf, len);
	free(buf);
}

static void overlay_zero(struct disk *d, uint8_t *composed, uint64_t off,
			 uint64_t len)
{
	struct disk_extent ext;

	if (disk__begin_zero(d, off, len, &ext) ||
	    fallocate(ext.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      ext.offset, ext.len))
		abort();
	disk__end_zero(d, off, len, true);
	memset(composed + off, 0, len);
}

static struct disk *open_state_as(const char *base, enum disk_format format,
				  const char *digest, const char *state)
{
	struct disk_params p = {
		.base_path = base,
		.base_format = format,
		.base_size = BASE_SIZE,
		.base_digest = digest,
		.mode = DISK_PERSISTENT,
		.state_path = state,
	};
	struct disk *d;

	if (disk__open(&d, &p))
		abort();
	return d;
}

static struct disk *open_state(const char *base, const char *digest,
			       const char *state)
{
	return open_state_as(base, DISK_FORMAT_RAW, digest, state);
}

FIXTURE_SETUP(flatten)
{
	struct disk *d;
	int i;

	strcpy(self->dir, "/tmp/kiln-flatten-XXXXXX");
	ASSERT_TRUE(mkdtemp(self->dir) != NULL);
	for (i = 0; i < (int)ARRAY_SIZE(names); i++)
		snprintf(self->path[i], sizeof(self->path[i]), "%s/%s",
			 self->dir, names[i]);
	ASSERT_EQ(0, setenv("KILN_CACHE", self->path[P_CACHE], 1));

	self->base = calloc(1, BASE_SIZE);
	self->composed = malloc(BASE_SIZE);
	ASSERT_TRUE(self->base && self->composed);
	fill(self->base, 0, 1 * MIB, 11);	   /* data */
	fill(self->base, 6 * MIB, 10 * MIB, 23);   /* data, zeroed below */
	fill(self->base, 16 * MIB, BASE_SIZE, 31); /* the short tail */
	write_file(self->path[P_BASE], self->base, BASE_SIZE);
	digest_of(self->base, BASE_SIZE, self->digest);
	write_desc(self->path[P_DESC], "base.raw", self->digest);
	memcpy(self->composed, self->base, BASE_SIZE);

	d = open_state(self->path[P_BASE], self->digest, self->path[P_STATE]);
	overlay_write(d, self->composed, 3 * 4096, 4096, 0xab);
	overlay_write(d, self->composed, 2 * MIB + 4096, 8192, 0xcd);
	overlay_zero(d, self->composed, 6 * MIB + MIB / 2, MIB / 2);
	overlay_zero(d, self->composed, 8 * MIB, 2 * MIB);
	overlay_write(d, self->composed, 12 * MIB, 4096, 0); /* DATA zeros */
	overlay_write(d, self->composed, BASE_SIZE - 4096, 4096, 0xee);
	disk__close(d);
	write_file(self->path[P_COMPOSED], self->composed, BASE_SIZE);
}

/* Another base of the same size, and a state file made for it. */
static void other_base(FIXTURE_DATA(flatten) * self)
{
	char other_digest[ROOTFS_DIGEST_LEN + 1];
	uint8_t *other = malloc(BASE_SIZE);

	if (!other)
		abort();
	memset(other, 0x5a, BASE_SIZE);
	write_file(self->path[P_OTHER_BASE], other, BASE_SIZE);
	digest_of(other, BASE_SIZE, other_digest);
	free(other);
	write_desc(self->path[P_OTHER_DESC], "other.raw", other_digest);
	disk__close(open_state(self->path[P_OTHER_BASE], other_digest,
			       self->path[P_OTHER_STATE]));
}

FIXTURE_TEARDOWN(flatten)
{
	char cmd[128];

	free(self->base);
	free(self->composed);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

/* vmm with args (argv[0] ignored). */
static void vmm(const char *const argv[], struct spawn_result *r)
{
	const char *args[32];
	int i = 0;

	args[i++] = spawn__vmm_path();
	while (argv[i] && i < 31) {
		args[i] = argv[i];
		i++;
	}
	args[i] = NULL;
	if (spawn__run(args, NULL, r))
		abort();
}

static void run(const char *const argv[], struct spawn_result *r)
{
	if (spawn__run(argv, NULL, r))
		abort();
}

#define EXPECT_BAD_INPUT(r, needle)                           \
	do {                                                  \
		EXPECT_EQ(VMM_EXIT_VMM_ERROR, (r)->status);   \
		EXPECT_EQ(1, spawn__count_lines((r)->err))    \
		TH_LOG("stderr: %s", (r)->err);               \
		EXPECT_TRUE(strstr((r)->err, needle) != NULL) \
		TH_LOG("want '%s' in: %s", needle, (r)->err); \
	} while (0)

/* Nothing in the directory but the fixture's files: no half image. */
static int stray_files(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd),
		 "test -z \"$(ls -A %s | grep -v -e '^base' -e '^state' "
		 "-e '^composed' -e '^other' -e '^cache$')\"",
		 dir);
	return system(cmd);
}

static uint32_t be32_at(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

/*
 * qemu-img map: some data, and nothing allocated in the all-zero region
 * [ZERO_START, ZERO_END).
 */
static void check_map(struct __test_metadata *_metadata, const char *map)
{
	json_error_t jerr;
	json_t *root = json_loads(map, 0, &jerr), *e;
	uint64_t start, len, data_bytes = 0;
	size_t i;

	ASSERT_TRUE(json_is_array(root)) TH_LOG("map: %s", map);
	json_array_foreach(root, i, e)
	{
		if (!json_is_true(json_object_get(e, "data")))
			continue;
		start = json_integer_value(json_object_get(e, "start"));
		len = json_integer_value(json_object_get(e, "length"));
		data_bytes += len;
		EXPECT_TRUE(start + len <= ZERO_START || start >= ZERO_END)
		TH_LOG("data at %llu+%llu in the zero region",
		       (unsigned long long)start, (unsigned long long)len);
	}
	EXPECT_TRUE(data_bytes > 0);
	json_decref(root);
}

/*
 * The writer's layout: the header, each cluster holding a nonzero byte,
 * one L2 table per L2 range with data, the L1 table, and (for a disk this
 * small) one refcount table cluster and one refcount block.
 */
static uint64_t expected_size(const uint8_t *disk, uint64_t cs)
{
	uint64_t clusters = (BASE_SIZE + cs - 1) / cs, per_l2 = cs / 8;
	uint64_t data = 0, l2 = 0, last_l2 = UINT64_MAX, c, n, i;

	for (c = 0; c < clusters; c++) {
		n = BASE_SIZE - c * cs < cs ? BASE_SIZE - c * cs : cs;
		for (i = 0; i < n && !disk[c * cs + i]; i++)
			;
		if (i == n)
			continue;
		data++;
		if (c / per_l2 != last_l2)
			l2++;
		last_l2 = c / per_l2;
	}
	return (1 + data + l2 +
		((clusters + per_l2 - 1) / per_l2 * 8 + cs - 1) / cs + 2) *
	       cs;
}

static void check_qcow2(struct __test_metadata *_metadata,
			FIXTURE_DATA(flatten) * self, const char *cluster,
			unsigned int cluster_bits)
{
	const char *out = self->path[P_OUT];
	struct spawn_result *r = malloc(sizeof(*r));
	char overlay[160];
	uint8_t *img;
	size_t len;

	ASSERT_TRUE(r != NULL);
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_STATE]);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--format", "qcow2", "--cluster-size",
		 cluster, "--out", out),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	EXPECT_STREQ("", r->err);

	run(ARGS("qemu-img", "check", "-f", "qcow2", out), r);
	EXPECT_EQ(0, r->status) TH_LOG("check: %s %s", r->out, r->err);
	EXPECT_TRUE(strstr(r->out, "No errors were found") != NULL)
	TH_LOG("check: %s", r->out);
	run(ARGS("qemu-img", "compare", "-f", "raw", "-F", "qcow2",
		 self->path[P_COMPOSED], out),
	    r);
	EXPECT_EQ(0, r->status) TH_LOG("compare: %s %s", r->out, r->err);
	run(ARGS("qemu-img", "map", "-f", "qcow2", "--output=json", out), r);
	EXPECT_EQ(0, r->status) TH_LOG("map: %s", r->err);
	check_map(_metadata, r->out);

	/* Version 3, this cluster size, no backing file, refcount order 4. */
	img = read_file(out, &len);
	ASSERT_TRUE(img != NULL && len >= 104);
	EXPECT_EQ(0, memcmp(img, "QFI\xfb", 4));
	EXPECT_EQ(3, be32_at(img + 4));
	EXPECT_EQ(0, be32_at(img + 8) | be32_at(img + 12));
	EXPECT_EQ(cluster_bits, be32_at(img + 20));
	EXPECT_EQ(4, be32_at(img + 96));
	EXPECT_EQ(104, be32_at(img + 100));
	/* Exactly what holds data, plus the header and the tables. */
	EXPECT_EQ(expected_size(self->composed, 1ULL << cluster_bits), len);
	/* Whole clusters: stored as 4 KiB blocks with no padding. */
	EXPECT_EQ(0, len % (1ULL << cluster_bits));
	EXPECT_EQ(0, len % 4096);
	free(img);
	free(r);
}

TEST_F(flatten, qcow2_4k)
{
	check_qcow2(_metadata, self, "4K", 12);
}

TEST_F(flatten, qcow2_64k)
{
	check_qcow2(_metadata, self, "65536", 16);
}

TEST_F(flatten, qcow2_2m)
{
	check_qcow2(_metadata, self, "2M", 21);
}

/* No --overlay, no --format: qcow2 of the base alone, 64 KiB clusters. */
TEST_F(flatten, qcow2_base_only)
{
	struct spawn_result *r = malloc(sizeof(*r));
	uint8_t *img;
	size_t len;

	ASSERT_TRUE(r != NULL);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--out", self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	run(ARGS("qemu-img", "compare", "-f", "raw", "-F", "qcow2",
		 self->path[P_BASE], self->path[P_OUT]),
	    r);
	EXPECT_EQ(0, r->status) TH_LOG("compare: %s %s", r->out, r->err);
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	EXPECT_EQ(16, be32_at(img + 20));
	free(img);
	free(r);
}

TEST_F(flatten, raw_sparse)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char overlay[160];
	struct stat st;
	uint8_t *img;
	size_t len;

	ASSERT_TRUE(r != NULL);
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_STATE]);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--format", "raw", "--out",
		 self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	ASSERT_EQ(BASE_SIZE, len);
	EXPECT_EQ(0, memcmp(img, self->composed, BASE_SIZE));
	free(img);
	ASSERT_EQ(0, stat(self->path[P_OUT], &st));
	EXPECT_TRUE((uint64_t)st.st_blocks * 512 < 8 * MIB)
	TH_LOG("%lld bytes allocated", (long long)st.st_blocks * 512);
	EXPECT_EQ(0600, st.st_mode & 07777);
	free(r);
}

TEST_F(flatten, describe_raw)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char err[512], sum[65];
	struct rootfs_image img;
	json_error_t jerr;
	json_t *d;

	ASSERT_TRUE(r != NULL);
	vmm(ARGS("vmm", "rootfs", "describe", self->path[P_BASE]), r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	d = json_loads(r->out, 0, &jerr);
	ASSERT_TRUE(d != NULL) TH_LOG("%s: %s", jerr.text, r->out);
	EXPECT_STREQ("raw", json_string_value(json_object_get(d, "format")));
	EXPECT_STREQ("base", json_string_value(json_object_get(d, "name")));
	EXPECT_STREQ(self->path[P_BASE],
		     json_string_value(json_object_get(d, "path")));
	EXPECT_EQ(BASE_SIZE,
		  json_integer_value(json_object_get(d, "sizeBytes")));
	write_file(self->path[P_DESCRIBED], r->out, r->out_len);

	run(ARGS("sha256sum", self->path[P_BASE]), r);
	ASSERT_EQ(0, r->status);
	snprintf(sum, sizeof(sum), "%.64s", r->out);
	EXPECT_TRUE(!strncmp(json_string_value(json_object_get(d, "digest")),
			     "sha256:", 7));
	EXPECT_STREQ(sum, json_string_value(json_object_get(d, "digest")) + 7);
	json_decref(d);

	/* Usable as a base: loads and verifies. */
	ASSERT_EQ(0,
		  rootfs__load(&img, self->path[P_DESCRIBED], err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(0, rootfs__verify_full(&img, err, sizeof(err)))
	TH_LOG("%s", err);
	rootfs__free(&img);
	free(r);
}

TEST_F(flatten, describe_qcow2)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char digest[ROOTFS_DIGEST_LEN + 1];
	json_error_t jerr;
	uint8_t *img;
	size_t len;
	json_t *d;

	ASSERT_TRUE(r != NULL);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--out", self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	vmm(ARGS("vmm", "rootfs", "describe", self->path[P_OUT], "--name",
		 "alpine:3.23-agent"),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	d = json_loads(r->out, 0, &jerr);
	ASSERT_TRUE(d != NULL) TH_LOG("%s: %s", jerr.text, r->out);
	EXPECT_STREQ("qcow2", json_string_value(json_object_get(d, "format")));
	EXPECT_STREQ("alpine:3.23-agent",
		     json_string_value(json_object_get(d, "name")));
	/* The virtual size, not the file's. */
	EXPECT_EQ(BASE_SIZE,
		  json_integer_value(json_object_get(d, "sizeBytes")));
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	digest_of(img, len, digest);
	free(img);
	EXPECT_STREQ(digest, json_string_value(json_object_get(d, "digest")));
	json_decref(d);
	free(r);
}

TEST_F(flatten, describe_refusals)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char odd[160], backed[160];

	ASSERT_TRUE(r != NULL);
	vmm(ARGS("vmm", "rootfs", "describe", self->path[P_BASE], "--format",
		 "qcow2"),
	    r);
	EXPECT_BAD_INPUT(r, "not a qcow2 image");
	vmm(ARGS("vmm", "rootfs", "describe", self->path[P_BASE], "--name",
		 "node:lts"),
	    r);
	EXPECT_BAD_INPUT(r, "moving alias");
	vmm(ARGS("vmm", "rootfs", "describe", self->path[P_BASE], "--format",
		 "vmdk"),
	    r);
	EXPECT_BAD_INPUT(r, "--format vmdk");
	snprintf(odd, sizeof(odd), "%s/odd.raw", self->dir);
	write_file(odd, "x", 1);
	vmm(ARGS("vmm", "rootfs", "describe", odd), r);
	EXPECT_BAD_INPUT(r, "not a nonzero multiple of 4096");
	snprintf(backed, sizeof(backed), "%s/backed.qcow2", self->dir);
	run(ARGS("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
		 self->path[P_BASE], backed),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("%s", r->err);
	vmm(ARGS("vmm", "rootfs", "describe", backed), r);
	EXPECT_BAD_INPUT(r, "has a backing file");
	vmm(ARGS("vmm", "rootfs", "describe", "/nonexistent/x.raw"), r);
	EXPECT_BAD_INPUT(r, "No such file");
	free(r);
}

TEST_F(flatten, bytes_match)
{
	struct spawn_result *r = malloc(sizeof(*r));
	uint8_t *out;
	size_t len;

	ASSERT_TRUE(r != NULL);
	run(ARGS("sh", "-c",
		 "exec \"$0\" rootfs bytes \"$1\" "
		 "--chunk-size 12K >\"$2\"",
		 spawn__vmm_path(), self->path[P_DESC], self->path[P_BYTES]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	EXPECT_STREQ("", r->err);
	out = read_file(self->path[P_BYTES], &len);
	ASSERT_TRUE(out != NULL);
	ASSERT_EQ(BASE_SIZE, len);
	EXPECT_EQ(0, memcmp(out, self->base, BASE_SIZE));
	free(out);
	free(r);
}

TEST_F(flatten, bytes_refusals)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char bad[128];

	ASSERT_TRUE(r != NULL);
	/* A digest that does not match: all streamed, then a failure. */
	write_desc(self->path[P_DESC], "base.raw",
		   "sha256:"
		   "00000000000000000000000000000000"
		   "00000000000000000000000000000000");
	run(ARGS("sh", "-c", "exec \"$0\" rootfs bytes \"$1\" >\"$2\"",
		 spawn__vmm_path(), self->path[P_DESC], self->path[P_BYTES]),
	    r);
	EXPECT_BAD_INPUT(r, "digest: expected sha256:0000");
	vmm(ARGS("vmm", "rootfs", "bytes", self->path[P_DESC], "--chunk-size",
		 "100"),
	    r);
	EXPECT_BAD_INPUT(r, "--chunk-size 100");
	snprintf(bad, sizeof(bad), "%s/missing.json", self->dir);
	vmm(ARGS("vmm", "rootfs", "bytes", bad), r);
	EXPECT_BAD_INPUT(r, "missing.json");
	vmm(ARGS("vmm", "rootfs", "bytes"), r);
	EXPECT_BAD_INPUT(r, "expected one DESCRIPTOR");
	free(r);
}

/* A reader that stops early: 141 (as SIGPIPE), nothing said. */
TEST_F(flatten, bytes_reader_gone)
{
	struct spawn_result *r = malloc(sizeof(*r));

	ASSERT_TRUE(r != NULL);
	run(ARGS("bash", "-c",
		 "set -o pipefail; \"$0\" rootfs bytes \"$1\" | head -c 1 "
		 ">/dev/null",
		 spawn__vmm_path(), self->path[P_DESC]),
	    r);
	EXPECT_EQ(141, r->status);
	EXPECT_STREQ("", r->err);
	free(r);
}

static const char qcow2_desc[] =
	"{\"name\": \"q\", \"path\": \"base.raw\", \"format\": \"qcow2\", "
	"\"architecture\": \"x86_64\", \"digest\": \"sha256:"
	"0000000000000000000000000000000000000000000000000000000000000000\", "
	"\"sizeBytes\": 4096}";

TEST_F(flatten, refusals)
{
	struct spawn_result *r = malloc(sizeof(*r));
	const char *desc = self->path[P_DESC], *out = self->path[P_OUT];
	const char *const sizes[] = { "1000", "512", "4M", "3K", "0", "x" };
	char overlay[160], missing[160];
	size_t i;

	ASSERT_TRUE(r != NULL);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", "/nonexistent/d.json",
		 "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "/nonexistent/d.json");

	/* A state file made for another base. */
	other_base(self);
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_OTHER_STATE]);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--overlay",
		 overlay, "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "was made for base image");

	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc,
			 "--cluster-size", sizes[i], "--out", out),
		    r);
		EXPECT_BAD_INPUT(r, "--cluster-size");
	}
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--format", "raw",
		 "--cluster-size", "64K", "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "only for --format qcow2");
	/* No store on the socket: named, and why. */
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--overlay",
		 "store:/nonexistent/store.sock", "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "--overlay store:/nonexistent/store.sock: store "
			    "socket \"/nonexistent/store.sock\": No such file");
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--out",
		 "store:/nonexistent/store.sock"),
	    r);
	EXPECT_BAD_INPUT(r, "--out store:/nonexistent/store.sock: store "
			    "socket \"/nonexistent/store.sock\": No such file");
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--overlay",
		 "store:", "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "must be persistent:STATEFILE or store:SOCKET");
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--out", "store:"),
	    r);
	EXPECT_BAD_INPUT(r, "must be FILE or store:SOCKET");
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--overlay",
		 self->path[P_STATE], "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "must be persistent:STATEFILE");
	snprintf(missing, sizeof(missing), "persistent:%s/nope.kiln",
		 self->dir);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--overlay",
		 missing, "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "nope.kiln");
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--format", "vmdk",
		 "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "--format vmdk");
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc), r);
	EXPECT_BAD_INPUT(r, "--out FILE are required");
	/* A "qcow2" base that is not one: the reader's refusal. */
	write_file(self->path[P_OTHER_DESC], qcow2_desc, strlen(qcow2_desc));
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_OTHER_DESC],
		 "--out", out),
	    r);
	EXPECT_BAD_INPUT(r, "base.raw: bad magic");
	vmm(ARGS("vmm", "rootfs", "flatten", "--bsae", desc), r);
	EXPECT_BAD_INPUT(r, "did you mean --base?");
	vmm(ARGS("vmm", "rootfs", "shrink"), r);
	EXPECT_BAD_INPUT(r, "expected describe");
	/* An existing --out is never replaced. */
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", desc, "--out",
		 self->path[P_COMPOSED]),
	    r);
	EXPECT_BAD_INPUT(r, "exists");
	EXPECT_EQ(0, stray_files(self->dir));
	free(r);
}

/*
 * A write that fails half way (the file size limit, SIGXFSZ ignored so
 * write says EFBIG): one line, 125, and no temporary file left.
 */
TEST_F(flatten, no_half_image)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char overlay[160];

	ASSERT_TRUE(r != NULL);
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_STATE]);
	run(ARGS("sh", "-c",
		 "trap '' XFSZ; ulimit -f 1024; exec \"$0\" rootfs flatten "
		 "--base \"$1\" --overlay \"$2\" --cluster-size 4K --out \"$3\"",
		 spawn__vmm_path(), self->path[P_DESC], overlay,
		 self->path[P_OUT]),
	    r);
	EXPECT_BAD_INPUT(r, "File too large");
	EXPECT_EQ(0, stray_files(self->dir));
	free(r);
}

/* tools/kiln-store-mem on sock: its pid once the socket is there, or -1. */
static pid_t store_start(const char *sock)
{
	pid_t pid = fork();

	if (!pid) {
		execl("/usr/bin/python3", "python3", "tools/kiln-store-mem",
		      sock, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 2000 && access(sock, F_OK); i++)
		usleep(10000);
	if (pid > 0 && access(sock, F_OK)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

static void store_stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* One block into the store (data NULL: a zero chunk), sending when full. */
static int store_put_block(struct store *st, uint64_t block,
			   const uint8_t *data, char *err, size_t len)
{
	int ret = store__write_add(st, block, data);

	if (ret != -E2BIG)
		return ret;
	ret = store__write_send(st, err, len);
	store__write_begin(st);
	return ret ? ret : store__write_add(st, block, data);
}

/*
 * The store's blocks, as a cow VM leaves them, into expect (the base's
 * bytes before): one over base data, a zero chunk over base data, 300
 * contiguous blocks in zeros (more than the 256 one read message
 * carries), 300 scattered ones (many ranges in one message), the last
 * block.
 */
static int store_fill(const char *sock, const char *digest, uint8_t *expect,
		      char *err, size_t len)
{
	struct store_params sp = { .socket_path = sock,
				   .base = digest,
				   .nr_blocks = BASE_SIZE / 4096,
				   .timeout_ms = 5000,
				   .claim = true };
	uint64_t blocks[1 + 300 + 300 + 1], b;
	struct store *st;
	unsigned int n = 0, i;
	int ret;

	blocks[n++] = 5;
	for (i = 0; i < 300; i++)
		blocks[n++] = 2 * MIB / 4096 + i;
	for (i = 0; i < 300; i++)
		blocks[n++] = 11 * MIB / 4096 + 2 * i;
	blocks[n++] = BASE_SIZE / 4096 - 1;
	ret = store__connect(&st, &sp, err, len);
	if (ret)
		return ret;
	store__write_begin(st);
	for (i = 0; i < n && !ret; i++) {
		b = blocks[i];
		fill(expect, b * 4096, (b + 1) * 4096, 77);
		ret = store_put_block(st, b, expect + b * 4096, err, len);
	}
	/* Zeros over base data: stored as a zero chunk. */
	memset(expect + 255 * 4096, 0, 4096);
	if (!ret)
		ret = store_put_block(st, 255, NULL, err, len);
	if (!ret)
		ret = store__write_send(st, err, len);
	if (!ret)
		ret = store__flush(st, err, len);
	store__close(st);
	return ret;
}

/*
 * --overlay store:: the listed blocks from the store, every other from
 * the base; qcow2 with 2 MiB clusters (512 blocks a read of the disk) and
 * raw, both equal to the expected disk. A store bound to another base
 * refuses the flatten, one line naming the socket.
 */
TEST_F(flatten, store_overlay)
{
	struct spawn_result *r = malloc(sizeof(*r));
	uint8_t *expect = malloc(BASE_SIZE), *img;
	const char *sock = self->path[P_SOCK];
	char overlay[160], err[256], want[512];
	size_t len;
	pid_t pid;

	ASSERT_TRUE(r != NULL && expect != NULL);
	pid = store_start(sock);
	ASSERT_LT(0, pid);
	memcpy(expect, self->base, BASE_SIZE);
	ASSERT_EQ(0, store_fill(sock, self->digest, expect, err, sizeof(err)))
	TH_LOG("%s", err);
	write_file(self->path[P_EXPECT], expect, BASE_SIZE);
	snprintf(overlay, sizeof(overlay), "store:%s", sock);

	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--cluster-size", "2M", "--out",
		 self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	EXPECT_STREQ("", r->err);
	run(ARGS("qemu-img", "check", "-f", "qcow2", self->path[P_OUT]), r);
	EXPECT_EQ(0, r->status) TH_LOG("check: %s %s", r->out, r->err);
	run(ARGS("qemu-img", "compare", "-f", "raw", "-F", "qcow2",
		 self->path[P_EXPECT], self->path[P_OUT]),
	    r);
	EXPECT_EQ(0, r->status) TH_LOG("compare: %s %s", r->out, r->err);
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	EXPECT_EQ(0, len % (2 * MIB));
	free(img);

	ASSERT_EQ(0, unlink(self->path[P_OUT]));
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--format", "raw", "--out",
		 self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	ASSERT_EQ(BASE_SIZE, len);
	EXPECT_EQ(0, memcmp(img, expect, BASE_SIZE));
	free(img);

	/* The store holds changes to base.raw, not to other.raw. */
	other_base(self);
	ASSERT_EQ(0, unlink(self->path[P_OUT]));
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_OTHER_DESC],
		 "--overlay", overlay, "--out", self->path[P_OUT]),
	    r);
	snprintf(want, sizeof(want),
		 "--overlay %s: hello: store refused: "
		 "this store holds changes to %s",
		 overlay, self->digest);
	EXPECT_BAD_INPUT(r, want);
	EXPECT_NE(0, access(self->path[P_OUT], F_OK));
	store_stop(pid);
	free(expect);
	free(r);
}

/*
 * A store that lists block 0, then closes the connection on the read:
 * one line naming the socket and why, 125, no image.
 */
static const char dying_store[] =
	"import socket, struct, sys\n"
	"s = socket.socket(socket.AF_UNIX)\n"
	"s.bind(sys.argv[1]); s.listen(1)\n"
	"c = s.accept()[0]\n"
	"def rx():\n"
	"    n = struct.unpack('<I', c.recv(4, socket.MSG_WAITALL))[0]\n"
	"    return c.recv(n, socket.MSG_WAITALL)\n"
	"def tx(t, p):\n"
	"    c.sendall(struct.pack('<IB', len(p) + 1, t) + p)\n"
	"rx(); tx(0x81, struct.pack('<IIQ', 1, 4096, 1))\n"
	"rx(); tx(0x82, struct.pack('<QIQ', 2**64 - 1, 1, 0))\n"
	"rx(); c.close()\n";

TEST_F(flatten, store_dies)
{
	struct spawn_result *r = malloc(sizeof(*r));
	const char *sock = self->path[P_SOCK];
	char overlay[160], want[256];
	pid_t pid;

	ASSERT_TRUE(r != NULL);
	pid = fork();
	if (!pid) {
		execl("/usr/bin/python3", "python3", "-c", dying_store, sock,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 2000 && access(sock, F_OK); i++)
		usleep(10000);
	snprintf(overlay, sizeof(overlay), "store:%s", sock);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--out", self->path[P_OUT]),
	    r);
	snprintf(want, sizeof(want),
		 "--overlay %s: read: the store closed the connection",
		 overlay);
	EXPECT_BAD_INPUT(r, want);
	EXPECT_NE(0, access(self->path[P_OUT], F_OK));
	store_stop(pid);
	free(r);
}

/*
 * A qcow2 base made by qemu-img (compressed, 64 KiB clusters) with a
 * state file of its own: flattened alone and with the state file, each
 * equal to its raw disk; the output whole 4 KiB clusters.
 */
TEST_F(flatten, qcow2_base)
{
	struct spawn_result *r = malloc(sizeof(*r));
	char digest[ROOTFS_DIGEST_LEN + 1], overlay[160];
	uint8_t *expect = malloc(BASE_SIZE), *img;
	struct disk *d;
	size_t len;

	ASSERT_TRUE(r != NULL && expect != NULL);
	run(ARGS("qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2",
		 "-o", "cluster_size=65536", self->path[P_BASE],
		 self->path[P_QCOW2]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("convert: %s", r->err);
	img = read_file(self->path[P_QCOW2], &len);
	ASSERT_TRUE(img != NULL);
	digest_of(img, len, digest);
	free(img);
	write_desc_as(self->path[P_QCOW2_DESC], "base.qcow2", "qcow2", digest);

	/* The base alone. */
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_QCOW2_DESC],
		 "--cluster-size", "4K", "--out", self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	run(ARGS("qemu-img", "compare", "-f", "raw", "-F", "qcow2",
		 self->path[P_BASE], self->path[P_OUT]),
	    r);
	EXPECT_EQ(0, r->status) TH_LOG("compare: %s %s", r->out, r->err);
	ASSERT_EQ(0, unlink(self->path[P_OUT]));

	/* With a persistent overlay written over the qcow2 base. */
	memcpy(expect, self->base, BASE_SIZE);
	d = open_state_as(self->path[P_QCOW2], DISK_FORMAT_QCOW2, digest,
			  self->path[P_QCOW2_STATE]);
	overlay_write(d, expect, 4096, 3 * 4096, 0x3c);
	overlay_write(d, expect, 7 * MIB, 64 * 1024, 0x4d);
	overlay_zero(d, expect, 6 * MIB, MIB);
	overlay_write(d, expect, BASE_SIZE - 8192, 8192, 0x5e);
	disk__close(d);
	write_file(self->path[P_EXPECT], expect, BASE_SIZE);
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_QCOW2_STATE]);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_QCOW2_DESC],
		 "--overlay", overlay, "--cluster-size", "4K", "--out",
		 self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	EXPECT_STREQ("", r->err);
	run(ARGS("qemu-img", "check", "-f", "qcow2", self->path[P_OUT]), r);
	EXPECT_EQ(0, r->status) TH_LOG("check: %s %s", r->out, r->err);
	run(ARGS("qemu-img", "compare", "-f", "raw", "-F", "qcow2",
		 self->path[P_EXPECT], self->path[P_OUT]),
	    r);
	EXPECT_EQ(0, r->status) TH_LOG("compare: %s %s", r->out, r->err);
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	EXPECT_EQ(0, len % 4096);
	free(img);

	/* The raw base's state file is not this base's. */
	ASSERT_EQ(0, unlink(self->path[P_OUT]));
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_STATE]);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_QCOW2_DESC],
		 "--overlay", overlay, "--out", self->path[P_OUT]),
	    r);
	EXPECT_BAD_INPUT(r, "was made for base image");
	free(expect);
	free(r);
}

struct listed {
	uint64_t n;
	bool ascending;
};

static void count_listed(void *arg, uint64_t block)
{
	struct listed *l = arg;

	l->ascending &= block == l->n;
	l->n++;
}

/*
 * --out store:: block i of the store is bytes [4096 i, 4096 (i + 1)) of
 * the same flatten written to a file; the hello's base is that file's
 * digest; stdout is the descriptor.
 */
TEST_F(flatten, out_store)
{
	struct spawn_result *r = malloc(sizeof(*r));
	const char *sock = self->path[P_OUT_SOCK];
	struct store_params sp = { .socket_path = sock, .timeout_ms = 5000 };
	char digest[ROOTFS_DIGEST_LEN + 1], overlay[160], out[160], err[256];
	struct listed l = { .ascending = true };
	struct store_range range;
	uint8_t *img, *got;
	json_error_t jerr;
	struct store *st;
	size_t len, b;
	json_t *d;
	pid_t pid;

	ASSERT_TRUE(r != NULL);
	pid = store_start(sock);
	ASSERT_LT(0, pid);
	snprintf(overlay, sizeof(overlay), "persistent:%s",
		 self->path[P_STATE]);
	snprintf(out, sizeof(out), "store:%s", sock);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--cluster-size", "4K", "--out", out),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	EXPECT_STREQ("", r->err);
	d = json_loads(r->out, 0, &jerr);
	ASSERT_TRUE(d != NULL) TH_LOG("%s: %s", jerr.text, r->out);
	vmm(ARGS("vmm", "rootfs", "flatten", "--base", self->path[P_DESC],
		 "--overlay", overlay, "--cluster-size", "4K", "--out",
		 self->path[P_OUT]),
	    r);
	ASSERT_EQ(0, r->status) TH_LOG("stderr: %s", r->err);
	img = read_file(self->path[P_OUT], &len);
	ASSERT_TRUE(img != NULL);
	ASSERT_EQ(0, len % 4096);
	digest_of(img, len, digest);

	EXPECT_STREQ(digest, json_string_value(json_object_get(d, "digest")));
	EXPECT_STREQ("qcow2", json_string_value(json_object_get(d, "format")));
	EXPECT_STREQ(sock, json_string_value(json_object_get(d, "store")));
	EXPECT_EQ(BASE_SIZE,
		  json_integer_value(json_object_get(d, "sizeBytes")));
	EXPECT_EQ(len, json_integer_value(json_object_get(d, "fileBytes")));
	EXPECT_TRUE(!strncmp(json_string_value(json_object_get(d, "name")),
			     "flattened-", 10));
	json_decref(d);

	/* Every block of the file, as the next reader finds them. */
	sp.base = digest;
	sp.nr_blocks = len / 4096;
	ASSERT_EQ(0, store__connect(&st, &sp, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(len / 4096, store__stored(st));
	ASSERT_EQ(0, store__list(st, count_listed, &l, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(len / 4096, l.n);
	EXPECT_TRUE(l.ascending);
	got = malloc(len);
	ASSERT_TRUE(got != NULL);
	for (b = 0; b < len / 4096; b += range.count) {
		range.first = b;
		range.count = len / 4096 - b < STORE_IO_BLOCKS ?
				      len / 4096 - b :
				      STORE_IO_BLOCKS;
		ASSERT_EQ(0, store__read(st, &range, 1, got + b * 4096, err,
					 sizeof(err)))
		TH_LOG("%s", err);
	}
	EXPECT_EQ(0, memcmp(img, got, len));
	store__close(st);
	store_stop(pid);
	free(got);
	free(img);
	free(r);
}

/* The writer's own refusals, before anything is written. */
TEST(qcow2_writer_refusals)
{
	uint8_t cluster[4096] = { 1 };
	struct qcow2_writer *w;
	char err[256];
	int fd = memfd_create("qcow2-test", MFD_CLOEXEC);

	ASSERT_TRUE(fd >= 0);
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__create(&w, fd, MIB, 4097, err, sizeof(err)));
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__create(&w, fd, MIB, 2048, err, sizeof(err)));
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__create(&w, fd, MIB, 4 * MIB, err, sizeof(err)));
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__create(&w, fd, 0, 4096, err, sizeof(err)));
	/* 2^50 bytes in 4 KiB clusters: an L1 table of 2 GiB. */
	EXPECT_EQ(-EFBIG, qcow2_writer__create(&w, fd, 1ULL << 50, 4096, err,
					       sizeof(err)));
	EXPECT_TRUE(strstr(err, "use larger clusters") != NULL)
	TH_LOG("%s", err);

	ASSERT_EQ(0, qcow2_writer__create(&w, fd, MIB, 4096, err, sizeof(err)));
	EXPECT_EQ(0, qcow2_writer__put(w, 8192, cluster, err, sizeof(err)));
	EXPECT_EQ(-EINVAL, qcow2_writer__put(w, 8192, cluster, err,
					     sizeof(err))); /* again */
	EXPECT_EQ(-EINVAL, qcow2_writer__put(w, 4096, cluster, err,
					     sizeof(err))); /* backwards */
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__put(w, 12288 + 1, cluster, err, sizeof(err)));
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__put(w, MIB, cluster, err, sizeof(err)));
	EXPECT_EQ(0, qcow2_writer__finish(w, err, sizeof(err)));
	EXPECT_EQ(-EINVAL, qcow2_writer__finish(w, err, sizeof(err)));
	EXPECT_EQ(-EINVAL,
		  qcow2_writer__put(w, 16384, cluster, err, sizeof(err)));
	qcow2_writer__destroy(w);
	close(fd);
}

/*
 * Tables past one cluster: a 2 GiB disk in 4 KiB clusters has a two-
 * cluster L1 table, and 4,097 data clusters need three refcount blocks
 * (2,048 refcounts each). QEMU's tools read back exactly what was put.
 */
TEST(qcow2_writer_big_tables)
{
	const uint64_t size = 2 * 1024 * MIB + 4096, dense = 4097;
	char dir[] = "/tmp/kiln-qcow2-XXXXXX", img[64], raw[64], cmd[160];
	struct spawn_result *r = malloc(sizeof(*r));
	struct qcow2_writer *w;
	uint8_t cluster[4096];
	char err[256];
	uint64_t i;
	int fd, rfd;

	ASSERT_TRUE(r != NULL && mkdtemp(dir) != NULL);
	snprintf(img, sizeof(img), "%s/w.qcow2", dir);
	snprintf(raw, sizeof(raw), "%s/w.raw", dir);
	fd = open(img, O_RDWR | O_CREAT | O_EXCL, 0600);
	rfd = open(raw, O_RDWR | O_CREAT | O_EXCL, 0600);
	ASSERT_TRUE(fd >= 0 && rfd >= 0);
	ASSERT_EQ(0, ftruncate(rfd, size));
	ASSERT_EQ(0, qcow2_writer__create(&w, fd, size, 4096, err, sizeof(err)))
	TH_LOG("%s", err);
	for (i = 0; i < dense + 1; i++) {
		/* dense clusters from 0, then the very last one */
		uint64_t off = i < dense ? i * 4096 : size - 4096;

		memset(cluster, (int)(i % 251) + 1, sizeof(cluster));
		ASSERT_EQ(0,
			  qcow2_writer__put(w, off, cluster, err, sizeof(err)))
		TH_LOG("%s", err);
		ASSERT_EQ((ssize_t)sizeof(cluster),
			  pwrite(rfd, cluster, sizeof(cluster), off));
	}
	ASSERT_EQ(0, qcow2_writer__finish(w, err, sizeof(err)))
	TH_LOG("%s", err);
	qcow2_writer__destroy(w);
	close(fd);
	close(rfd);
	run(ARGS("qemu-img", "check", "-f", "qcow2", img), r);
	EXPECT_EQ(0, r->status) TH_LOG("check: %s %s", r->out, r->err);
	run(ARGS("qemu-img", "compare", "-f", "raw", "-F", "qcow2", raw, img),
	    r);
	EXPECT_EQ(0, r->status) TH_LOG("compare: %s %s", r->out, r->err);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		TH_LOG("could not remove %s", dir);
	free(r);
}

TEST_HARNESS_MAIN
