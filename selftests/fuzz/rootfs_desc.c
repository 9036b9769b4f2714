// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz rootfs_desc - the root image descriptor (vmm/rootfs.c,
 * Documentation/images.md): any bytes as the JSON file `--rootfs` names,
 * loaded as the monitor loads it, from a file (a temporary one per
 * fuzzing process).
 *
 * Checked for every input: a refusal says why, naming the descriptor; a
 * descriptor that loads has every field, a pinned name, a "raw" or
 * "qcow2" x86_64 image (amd64 normalized), a digest of its documented
 * form, and a size that is a positive multiple of the block size.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "vmm/rootfs.h"
#include "selftests/fuzz/fuzz.h"

static const char *descriptor_path(void)
{
	static char path[64];

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/kiln-fuzz-rootfs-%d.json",
			 getpid());
	return path;
}

static bool write_file(const char *path, const uint8_t *p, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	bool ok;

	if (fd < 0)
		return false;
	ok = write(fd, p, len) == (ssize_t)len;
	close(fd);
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = descriptor_path();
	struct rootfs_image img;
	char err[512] = "";
	int ret;

	fuzz__quiet();
	if (!write_file(path, data, size))
		return 0;
	ret = rootfs__load(&img, path, err, sizeof(err));
	if (ret) {
		fuzz_check(ret < 0 && strstr(err, path));
	} else {
		fuzz_check(img.name && img.path && img.format &&
			   img.architecture && img.digest);
		fuzz_check(*img.name && strlen(img.name) <= ROOTFS_NAME_MAX);
		fuzz_check(!strcmp(img.format, img.qcow2 ? "qcow2" : "raw"));
		fuzz_check(!strcmp(img.architecture, "x86_64"));
		fuzz_check(strlen(img.digest) == ROOTFS_DIGEST_LEN);
		fuzz_check(!strncmp(img.digest, ROOTFS_DIGEST_PREFIX,
				    strlen(ROOTFS_DIGEST_PREFIX)));
		fuzz_check(img.size_bytes &&
			   img.size_bytes % ROOTFS_BLOCK_SIZE == 0);
	}
	rootfs__free(&img);
	unlink(path);
	return 0;
}
