// SPDX-License-Identifier: GPL-2.0
/*
 * What a restore reads of a snapshot before it touches KVM
 * (snapshot/load.h): a whole snapshot loads, with its parts' bytes;
 * and every way it can be wrong is refused with one line that names the
 * file or the manifest's field: another vmm version, format, identity,
 * vCPU count or memory size; a part's bytes or the manifest's digest
 * changed; a part missing from the directory or from the manifest; no
 * manifest at all (an unfinished snapshot).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "snapshot/file.h"
#include "snapshot/load.h"
#include "snapshot/state.h"

#define MEM_SIZE (1ULL << 20) /* a guest of 1 MiB */
#define VCPUS	 2U
#define VMM	 "0.1.0"
#define IDENTITY                                                            \
	"sha256:00112233445566778899aabbccddeeff00112233445566778899aabbcc" \
	"ddeeff"

static const struct snap_expect good = {
	.vmm = VMM,
	.identity_digest = IDENTITY,
	.vcpus = VCPUS,
	.memory_bytes = MEM_SIZE,
};

/* A state file of kind holding one u32 section (tag 1) of value v. */
static int add_state(struct snap_dir *d, const char *file, enum snap_kind kind,
		     uint32_t v, char *err, size_t len)
{
	struct snap_writer w;
	int ret;

	snap_writer__init(&w, kind);
	snap_writer__add(&w, 1, &v, sizeof(v));
	ret = w.err ? w.err :
		      snap_dir__write_part(
			      d, file, kind == SNAP_KIND_VCPU ? "vcpu" : "vm",
			      w.buf, w.len, err, len);
	snap_writer__release(&w);
	return ret;
}

/*
 * A snapshot as vm.snapshot lays it out, of a 2-vCPU 1 MiB guest; with
 * layer >= 0, that file as an ephemeral root's layer.
 */
static int write_snapshot_layer(const char *dir, int layer, uint64_t bytes,
				char *err, size_t len)
{
	static uint8_t mem[MEM_SIZE];
	json_t *fields;
	struct snap_dir d;
	int ret;

	memset(mem + 3 * SNAP_PAGE_SIZE, 0x5a, 100);
	fields = json_pack("{s:s, s:i, s:I, s:s}", "vmm", VMM, "vcpus",
			   (int)VCPUS, "memoryBytes", (json_int_t)MEM_SIZE,
			   "identityDigest", IDENTITY);
	if (!fields)
		return -ENOMEM;
	ret = snap_dir__create(&d, dir, err, len);
	if (ret)
		goto out;
	ret = add_state(&d, "vcpu0.state", SNAP_KIND_VCPU, 0, err, len);
	if (!ret)
		ret = add_state(&d, "vcpu1.state", SNAP_KIND_VCPU, 1, err, len);
	if (!ret)
		ret = add_state(&d, "vm.state", SNAP_KIND_VM, 7, err, len);
	if (!ret)
		ret = snap_dir__write_part(&d, "devices.json", "devices",
					   "[{\"slot\": 1}]", 13, err, len);
	if (!ret)
		ret = snap_dir__write_memory(&d, "memory.raw", mem, MEM_SIZE,
					     err, len);
	if (!ret && layer >= 0)
		ret = snap_dir__write_sparse(&d, SNAP_LAYER_FILE,
					     SNAP_LAYER_KIND, layer, bytes, err,
					     len);
	if (!ret)
		ret = snap_dir__finish(&d, fields, err, len);
	snap_dir__close(&d);
out:
	json_decref(fields);
	return ret;
}

static int write_snapshot(const char *dir, char *err, size_t len)
{
	return write_snapshot_layer(dir, -1, 0, err, len);
}

/* The manifest changed by edit(m), written back in place (mode kept). */
static void edit_manifest(struct __test_metadata *_metadata, const char *dir,
			  void (*edit)(json_t *m))
{
	char path[160];
	json_t *m;

	snprintf(path, sizeof(path), "%s/%s", dir, SNAP_MANIFEST);
	m = json_load_file(path, 0, NULL);
	ASSERT_NE(NULL, m);
	edit(m);
	ASSERT_EQ(0, json_dump_file(m, path, JSON_SORT_KEYS));
	json_decref(m);
}

static json_t *part(json_t *m, const char *file)
{
	json_t *parts = json_object_get(m, "parts"), *p;
	size_t i;

	json_array_foreach(parts, i, p)
	{
		if (!strcmp(json_string_value(json_object_get(p, "file")),
			    file))
			return p;
	}
	return NULL;
}

TEST(a_whole_snapshot_loads)
{
	struct snap_load l;
	char err[512] = "";
	const void *d;
	uint32_t v;
	struct snap_tmp t;

	ASSERT_TRUE(snap_tmp__make(&t, "kiln-load"));
	ASSERT_EQ(0, write_snapshot(t.dir, err, sizeof(err))) TH_LOG("%s", err);
	ASSERT_EQ(0, snap_load__open(&l, t.dir, &good, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(VCPUS, l.vcpus);
	/* Each vCPU's own file, by its number. */
	ASSERT_EQ(0, snap_state__find(l.vcpu_state[1].p, l.vcpu_state[1].len,
				      SNAP_KIND_VCPU, 1, sizeof(v), &d));
	memcpy(&v, d, sizeof(v));
	EXPECT_EQ(1U, v);
	ASSERT_EQ(0, snap_state__find(l.vm_state.p, l.vm_state.len,
				      SNAP_KIND_VM, 1, sizeof(v), &d));
	memcpy(&v, d, sizeof(v));
	EXPECT_EQ(7U, v);
	EXPECT_EQ(1, json_array_size(l.devices));
	EXPECT_LE(0, l.mem_fd);
	EXPECT_EQ(MEM_SIZE, l.mem_bytes);
	snap_load__close(&l);
	EXPECT_EQ(-1, l.mem_fd);
	EXPECT_EQ(NULL, l.manifest);
	snap_tmp__clean(&t);
}

/* One expectation changed: refused, the field named, the values said. */
TEST(another_monitor_or_config_is_refused)
{
	static const struct {
		struct snap_expect want;
		const char *says;
	} cases[] = {
		{ { "0.2.0", IDENTITY, VCPUS, MEM_SIZE },
		  "manifest.json: vmm: the snapshot is of vmm 0.1.0, this is "
		  "0.2.0" },
		{ { VMM, "sha256:ff", VCPUS, MEM_SIZE },
		  "manifest.json: identityDigest: " },
		{ { VMM, IDENTITY, 4, MEM_SIZE },
		  "manifest.json: vcpus: the snapshot has 2, the config 4" },
		{ { VMM, IDENTITY, VCPUS, 2 * MEM_SIZE },
		  "manifest.json: memoryBytes: the snapshot has 1048576, the "
		  "config 2097152" },
	};
	struct snap_load l;
	char err[512] = "";
	struct snap_tmp t;

	ASSERT_TRUE(snap_tmp__make(&t, "kiln-load"));
	ASSERT_EQ(0, write_snapshot(t.dir, err, sizeof(err))) TH_LOG("%s", err);
	for (unsigned int i = 0; i < ARRAY_SIZE(cases); i++) {
		EXPECT_EQ(-EINVAL, snap_load__open(&l, t.dir, &cases[i].want,
						   err, sizeof(err)));
		EXPECT_EQ(0, strncmp(err, cases[i].says, strlen(cases[i].says)))
		TH_LOG("case %u: %s", i, err);
		EXPECT_EQ(-1, l.mem_fd);
	}
	snap_tmp__clean(&t);
}

static void add_identity(json_t *m)
{
	json_object_set_new(m, "identity",
			    json_pack("{s:s, s:s, s:i}", "cmdline",
				      "console=ttyS0 quiet kiln.console=raw",
				      "kernel", "sha256:aa", "cpus", 2));
}

/*
 * A digest that differs says what of the identity does: the fields by
 * name, the command line's words that only one side has, and why vmm
 * adds kiln.console=raw; without this config's identity, what may differ.
 */
TEST(another_identity_says_what_differs)
{
	json_t *ours = json_pack("{s:s, s:s, s:i, s:s}", "cmdline",
				 "console=ttyS0 quiet foo=1", "kernel",
				 "sha256:aa", "cpus", 2, "initrd", "sha256:bb");
	struct snap_expect want = good;
	struct snap_load l;
	char err[1024] = "";
	struct snap_tmp t;

	ASSERT_NE(NULL, ours);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-load"));
	ASSERT_EQ(0, write_snapshot(t.dir, err, sizeof(err))) TH_LOG("%s", err);
	edit_manifest(_metadata, t.dir, add_identity);
	want.identity_digest = "sha256:ff";
	want.identity = ours;
	EXPECT_EQ(-EINVAL, snap_load__open(&l, t.dir, &want, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, ": cmdline, initrd differ; only the "
				    "snapshot's command line has "
				    "\"kiln.console=raw\"; only this config's "
				    "command line has \"foo=1\" (vmm adds "
				    "kiln.console=raw when its stdin is not a "
				    "terminal"))
	TH_LOG("%s", err);
	EXPECT_EQ(NULL, strstr(err, "kernel")) TH_LOG("%s", err);

	/* Only the console word: one field, no word of ours. */
	json_object_set_new(ours, "cmdline",
			    json_string("console=ttyS0 quiet"));
	json_object_del(ours, "initrd");
	EXPECT_EQ(-EINVAL, snap_load__open(&l, t.dir, &want, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, ": cmdline differs; only the snapshot's "
				    "command line has \"kiln.console=raw\" ("))
	TH_LOG("%s", err);
	EXPECT_EQ(NULL, strstr(err, "this config's command line"))
	TH_LOG("%s", err);

	/* Without ours: the general list. */
	want.identity = NULL;
	EXPECT_EQ(-EINVAL, snap_load__open(&l, t.dir, &want, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, ": kernel, initrd, command line, cpus, "
				    "memory, devices or mounts differ"))
	TH_LOG("%s", err);
	json_decref(ours);
	snap_tmp__clean(&t);
}

static void bad_vm_digest(json_t *m)
{
	json_object_set_new(part(m, "vm.state"), "sha256",
			    json_string("0000000000000000000000000000000000"
					"000000000000000000000000000000"));
}

static void format_two(json_t *m)
{
	json_object_set_new(m, "format", json_integer(2));
}

static void drop_vm_state(json_t *m)
{
	json_t *parts = json_object_get(m, "parts"), *p;
	size_t i;

	json_array_foreach(parts, i, p)
	{
		if (!strcmp(json_string_value(json_object_get(p, "file")),
			    "vm.state")) {
			json_array_remove(parts, i);
			return;
		}
	}
}

static void flip_byte(struct __test_metadata *_metadata, const char *dir,
		      const char *file, off_t off)
{
	char path[160];
	uint8_t b;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(1, pread(fd, &b, 1, off));
	b ^= 0x80;
	ASSERT_EQ(1, pwrite(fd, &b, 1, off));
	close(fd);
}

static void unlink_part(struct __test_metadata *_metadata, const char *dir,
			const char *file)
{
	char path[160];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	ASSERT_EQ(0, unlink(path));
}

TEST(a_damaged_snapshot_is_refused_naming_the_file)
{
	enum { FLIP, UNLINK, EDIT };
	static const struct {
		int how;
		const char *file;
		void (*edit)(json_t *m);
		int err;
		const char *says;
	} cases[] = {
		/* A part's bytes changed. */
		{ FLIP, "vcpu1.state", NULL, -EBADMSG, "vcpu1.state: sha256 " },
		{ FLIP, "memory.raw", NULL, -EBADMSG, "memory.raw: sha256 " },
		/* The manifest's digest changed. */
		{ EDIT, NULL, bad_vm_digest, -EBADMSG, "vm.state: sha256 " },
		{ EDIT, NULL, format_two, -EINVAL,
		  "manifest.json: format is not 1" },
		/* A part the restore needs is not in the manifest. */
		{ EDIT, NULL, drop_vm_state, -EINVAL,
		  "manifest.json: no part vm.state of kind vm" },
		/* Missing files. */
		{ UNLINK, "vcpu0.state", NULL, -ENOENT,
		  "vcpu0.state: No such file" },
		{ UNLINK, "memory.raw", NULL, -ENOENT,
		  "memory.raw: No such file" },
		{ UNLINK, SNAP_MANIFEST, NULL, -ENOENT,
		  "manifest.json: No such file" },
	};
	struct snap_load l;
	char err[512];

	for (unsigned int i = 0; i < ARRAY_SIZE(cases); i++) {
		struct snap_tmp t;

		ASSERT_TRUE(snap_tmp__make(&t, "kiln-load"));
		err[0] = '\0';
		ASSERT_EQ(0, write_snapshot(t.dir, err, sizeof(err)))
		TH_LOG("%s", err);
		if (cases[i].how == FLIP)
			flip_byte(_metadata, t.dir, cases[i].file,
				  strcmp(cases[i].file, "memory.raw") ?
					  20 :
					  3 * SNAP_PAGE_SIZE + 1);
		else if (cases[i].how == UNLINK)
			unlink_part(_metadata, t.dir, cases[i].file);
		else
			edit_manifest(_metadata, t.dir, cases[i].edit);
		EXPECT_EQ(cases[i].err,
			  snap_load__open(&l, t.dir, &good, err, sizeof(err)))
		TH_LOG("case %u: %s", i, err);
		EXPECT_EQ(0, strncmp(err, cases[i].says, strlen(cases[i].says)))
		TH_LOG("case %u: %s", i, err);
		EXPECT_EQ(NULL, l.manifest);
		snap_tmp__clean(&t);
	}
}

/*
 * An ephemeral root (root_layer): the layer part must be there, and is
 * opened and hashed again; a layer changed after the snapshot is
 * refused naming it. Without root_layer it is not looked at.
 */
TEST(an_ephemeral_root_needs_its_layer)
{
	struct snap_expect want = good;
	uint8_t page[SNAP_PAGE_SIZE];
	char err[512] = "", path[192];
	struct snap_load l;
	struct snap_tmp t;
	int src, fd;

	want.root_layer = true;
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-load"));
	ASSERT_EQ(0, write_snapshot(t.dir, err, sizeof(err))) TH_LOG("%s", err);
	EXPECT_EQ(-EINVAL, snap_load__open(&l, t.dir, &want, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "no part disk.delta of kind disk"))
	TH_LOG("%s", err);
	snap_tmp__clean(&t);

	/* A 64 KiB "layer" with one page of data, sparse. */
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-load"));
	snprintf(path, sizeof(path), "%s/src", t.base);
	src = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ASSERT_LE(0, src);
	memset(page, 0xa5, sizeof(page));
	ASSERT_EQ((ssize_t)sizeof(page), pwrite(src, page, sizeof(page), 8192));
	ASSERT_EQ(0, ftruncate(src, 65536));
	ASSERT_EQ(0, write_snapshot_layer(t.dir, src, 65536, err, sizeof(err)))
	TH_LOG("%s", err);
	close(src);
	ASSERT_EQ(0, snap_load__open(&l, t.dir, &want, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_LE(0, l.layer_fd);
	EXPECT_EQ(65536U, l.layer_bytes);
	ASSERT_EQ((ssize_t)sizeof(page),
		  pread(l.layer_fd, page, sizeof(page), 8192));
	EXPECT_EQ(0xa5, page[100]);
	snap_load__close(&l);
	EXPECT_EQ(-1, l.layer_fd);
	/* A boot's config: the layer is not opened. */
	ASSERT_EQ(0, snap_load__open(&l, t.dir, &good, err, sizeof(err)));
	EXPECT_EQ(-1, l.layer_fd);
	snap_load__close(&l);

	/* One byte of its data changed: the verifier names it. */
	snprintf(path, sizeof(path), "%s/%s", t.dir, SNAP_LAYER_FILE);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(1, pwrite(fd, "x", 1, 8192 + 7));
	close(fd);
	EXPECT_EQ(-EBADMSG,
		  snap_load__open(&l, t.dir, &want, err, sizeof(err)));
	EXPECT_EQ(0, strncmp(err, "disk.delta: sha256 ", 19)) TH_LOG("%s", err);
	snap_tmp__clean(&t);
}

TEST_HARNESS_MAIN
