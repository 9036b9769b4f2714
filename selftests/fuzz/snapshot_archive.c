// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz snapshot_archive - what `vmm snapshot unpack` reads from an
 * archive another host made (snapshot/archive.h): the stream inside
 * the zstd frame (names, sizes, chunks, the manifest and its parts).
 *
 * Input: the stream as it is before compression; the target compresses
 * it (zstd level 1, so the fuzzer works on our format and not on zstd's
 * checks) into a file under a directory of its own (made once, removed
 * at exit) and unpacks it into a new directory there.
 *
 * Checked for every input: the unpack succeeds, and then the directory
 * verifies as a restore would (snap_dir__verify) and holds only the
 * manifest's files; or it fails with a message and nothing of the
 * directory is left. Nothing is ever written outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "selftests/fuzz/fuzz.h"
#include "snapshot/archive.h"
#include "snapshot/file.h"

#define ERR_LEN 1024

static char base[64];

/* Every file in path, then path; the number of files. */
static int remove_tree(const char *path)
{
	struct dirent *de;
	DIR *d = opendir(path);
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char p[512];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
		fuzz_check(unlink(p) == 0);
		n++;
	}
	closedir(d);
	fuzz_check(rmdir(path) == 0);
	return n;
}

static void remove_base(void)
{
	remove_tree(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char file[128], out[128], err[ERR_LEN] = "";
	size_t cap = ZSTD_compressBound(size), n;
	json_t *m = NULL;
	uint8_t *packed;
	int fd, ret;

	if (!base[0]) {
		snprintf(base, sizeof(base), "/tmp/kiln-fuzz-archive-XXXXXX");
		fuzz_check(mkdtemp(base));
		atexit(remove_base);
	}
	packed = malloc(cap);
	fuzz_check(packed);
	n = ZSTD_compress(packed, cap, data, size, 1);
	fuzz_check(!ZSTD_isError(n));
	snprintf(file, sizeof(file), "%s/in.zst", base);
	snprintf(out, sizeof(out), "%s/out", base);
	unlink(file);
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	fuzz_check(fd >= 0);
	fuzz_check(write(fd, packed, n) == (ssize_t)n);
	close(fd);
	free(packed);

	ret = snap_archive__unpack(file, out, err, sizeof(err));
	if (ret) {
		fuzz_check(ret < 0 && err[0]);
		fuzz_check(access(out, F_OK) < 0 && errno == ENOENT);
	} else {
		fuzz_check(snap_dir__verify(out, &m, err, sizeof(err)) == 0);
		/* The manifest and its parts, nothing else. */
		fuzz_check(
			remove_tree(out) ==
			1 + (int)json_array_size(json_object_get(m, "parts")));
		json_decref(m);
	}
	/* Only in.zst (and out, gone now) were ever in base. */
	unlink(file);
	fuzz_check(remove_tree(base) == 0);
	fuzz_check(mkdir(base, 0700) == 0);
	return 0;
}
