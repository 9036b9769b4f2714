// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz fuse - the FUSE request decoder (devices/fs/fuse.c) and the
 * in-memory file system behind it (devices/fs/memfs*.c), as a guest
 * drives them through virtio-fs: any requests, in any order, their
 * bytes split across segments as descriptors may split them. The
 * in-memory backend keeps the fuzzer off the host's files (fuse_bind
 * runs the same session over the bind backend, in a sandbox).
 *
 * Input and checks: selftests/fuzz/fuse-session.h. Every request is
 * answered at once: memfs has no io_fd, so the server has no ring.
 */
#include "devices/fs/memfs.h"
#include "selftests/fuzz/fuse-session.h"

#define MEMFS_MAX_BYTES (1U << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct memfs_params mp = { .name = "fuzz",
					 .max_bytes = MEMFS_MAX_BYTES };
	struct fuse_server_params sp = { .name = "fuzz" };
	static struct fuzz_fuse f;
	struct fuse_server *s;
	struct fs_backend *b;

	fuzz__quiet();
	if (memfs__create(&b, &mp))
		return 0;
	sp.backend = b;
	if (fuse_server__create(&s, &sp)) {
		fs_backend__destroy(b);
		return 0;
	}
	fuzz_fuse__run(s, &f, data, size);
	fuse_server__reset(s);
	fuse_server__destroy(s);
	fs_backend__destroy(b);
	return 0;
}
