// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz snapshot - what a restore reads back from a snapshot directory
 * (Documentation/snapshots.md): the binary state files (vmm/
 * snapshot-state.c: a header, then tagged sections) and the manifest
 * that names every part with its size and SHA-256 (snapshot/file.c,
 * snap_dir__verify).
 *
 * Input: a byte that picks what the rest is: a vCPU's or the VM's state
 * file, walked section by section and searched for each tag a restore
 * asks for; or manifest.json in a directory (0700, under /tmp, made once
 * and removed at exit) that also holds two parts, one checked by its
 * file digest, one by its pages digest.
 *
 * Checked for every input: a state file's sections lie inside it, one
 * after the other at multiples of 8 bytes, at most
 * SNAP_STATE_MAX_SECTION each, and the walk ends exactly at the end or
 * with -EINVAL; a search finds the first section of its tag with the
 * size asked for, or says why not. A manifest verifies, or fails with
 * one of its documented errors and a message; one that verifies is an
 * object of this format whose every part is one of the two files, with
 * their true sizes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"

#include "selftests/fuzz/fuzz.h"
#include "snapshot/file.h"
#include "snapshot/state.h"

#define MAX_SECTIONS	4096
#define HEADER_LEN	16U /* magic, version, kind */
#define SECTION_HDR_LEN 8U  /* tag, length */
#define PART_A		"vcpu0.state"
#define PART_MEM	"memory"
#define PART_A_LEN	100U
#define PART_MEM_LEN	(3U * SNAP_PAGE_SIZE) /* a hole, data, zeros */
#define ERR_LEN		256

/* The tags a restore looks for, and sizes it may ask for. */
static const uint32_t tags[] = {
	SNAP_VCPU_ID,	 SNAP_VCPU_REGS,     SNAP_VCPU_XSAVE, SNAP_VCPU_MSRS,
	SNAP_VCPU_CPUID, SNAP_VM_PIC_MASTER, SNAP_VM_CLOCK,   0xffffffffU,
};

static char dir[64];

static void remove_dir(void)
{
	static const char *const names[] = { SNAP_MANIFEST, PART_A, PART_MEM };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		char path[128];

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

static void write_file(const char *name, const void *p, size_t len)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
		  SNAP_FILE_MODE);
	fuzz_check(fd >= 0);
	fuzz_check(fchmod(fd, SNAP_FILE_MODE) == 0); /* whatever the umask */
	fuzz_check(pwrite(fd, p, len, 0) == (ssize_t)len);
	close(fd);
}

static void make_dir(void)
{
	uint8_t a[PART_A_LEN], page[SNAP_PAGE_SIZE];
	char path[128];
	int fd;

	strcpy(dir, "/tmp/kiln-fuzz-snap-XXXXXX");
	fuzz_check(mkdtemp(dir));
	fuzz_check(chmod(dir, SNAP_DIR_MODE) == 0);
	atexit(remove_dir);
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)i;
	write_file(PART_A, a, sizeof(a));
	/* The memory: a hole, a page of data, a page of zeros. */
	for (size_t i = 0; i < sizeof(page); i++)
		page[i] = (uint8_t)(i * 7 + 1);
	snprintf(path, sizeof(path), "%s/%s", dir, PART_MEM);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
		  SNAP_FILE_MODE);
	fuzz_check(fd >= 0);
	fuzz_check(fchmod(fd, SNAP_FILE_MODE) == 0);
	fuzz_check(pwrite(fd, page, sizeof(page), SNAP_PAGE_SIZE) ==
		   (ssize_t)sizeof(page));
	fuzz_check(ftruncate(fd, PART_MEM_LEN) == 0);
	close(fd);
}

static void state_file(const uint8_t *p, size_t len, enum snap_kind kind)
{
	struct snap_reader r;
	const void *data;
	uint32_t tag, n;
	size_t at = HEADER_LEN;
	int ret, i;

	if (snap_reader__init(&r, p, len, kind))
		return;
	for (i = 0; i < MAX_SECTIONS; i++) {
		ret = snap_reader__next(&r, &tag, &data, &n);
		if (ret != 1)
			break;
		fuzz_check(n <= SNAP_STATE_MAX_SECTION);
		fuzz_check((const uint8_t *)data == p + at + SECTION_HDR_LEN);
		fuzz_check(n <= len - at - SECTION_HDR_LEN);
		at += SECTION_HDR_LEN + (n + SNAP_STATE_ALIGN - 1) /
						SNAP_STATE_ALIGN *
						SNAP_STATE_ALIGN;
		fuzz_check(at <= len && at == r.at);
	}
	if (i < MAX_SECTIONS)
		fuzz_check(ret == 0 ? at == len : ret == -EINVAL);

	for (size_t t = 0; t < ARRAY_SIZE(tags); t++) {
		/* Each size a restore may want: 4 bytes, or what is there. */
		ret = snap_state__find(p, len, kind, tags[t], sizeof(uint32_t),
				       &data);
		fuzz_check(ret == 0 || ret == -ENOENT || ret == -EINVAL);
		if (!ret)
			fuzz_check((const uint8_t *)data >= p + HEADER_LEN &&
				   (const uint8_t *)data + sizeof(uint32_t) <=
					   p + len);
	}
}

static void check_manifest(const json_t *m)
{
	const json_t *parts = json_object_get(m, "parts"), *part;
	size_t i;

	fuzz_check(json_is_object(m));
	fuzz_check(json_integer_value(json_object_get(m, "format")) ==
		   SNAP_FORMAT_VERSION);
	fuzz_check(json_is_array(parts));
	json_array_foreach(parts, i, part)
	{
		const char *file =
			json_string_value(json_object_get(part, "file"));
		json_int_t bytes =
			json_integer_value(json_object_get(part, "bytes"));

		fuzz_check(file);
		fuzz_check(!strcmp(file, PART_A) || !strcmp(file, PART_MEM) ||
			   !strcmp(file, SNAP_MANIFEST));
		fuzz_check(strcmp(file, PART_A) || bytes == PART_A_LEN);
		fuzz_check(strcmp(file, PART_MEM) || bytes == PART_MEM_LEN);
	}
}

static void manifest(const uint8_t *p, size_t len)
{
	char err[ERR_LEN];
	json_t *m = NULL;
	int ret;

	write_file(SNAP_MANIFEST, p, len);
	ret = snap_dir__verify(dir, &m, err, sizeof(err));
	if (ret) {
		fuzz_check(ret == -EINVAL || ret == -EBADMSG ||
			   ret == -ENOENT || ret == -ELOOP || ret == -EISDIR ||
			   ret == -EPERM || ret == -ENOTDIR ||
			   ret == -ENAMETOOLONG);
		fuzz_check(err[0]);
		return;
	}
	check_manifest(m);
	json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz__quiet();
	if (!size)
		return 0;
	switch (data[0] % 3) {
	case 0:
		state_file(data + 1, size - 1, SNAP_KIND_VCPU);
		break;
	case 1:
		state_file(data + 1, size - 1, SNAP_KIND_VM);
		break;
	default:
		if (!dir[0])
			make_dir();
		manifest(data + 1, size - 1);
		break;
	}
	return 0;
}
