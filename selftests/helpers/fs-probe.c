// SPDX-License-Identifier: GPL-2.0
/*
 * fs-probe: the guest side of the virtio-fs KVM test (selftests/kvm/
 * virtiofs.c), for what busybox cannot do. A static program, packed as an
 * extra initramfs archive with /bin/fs-probe.
 *
 *	fs-probe mmap FILE		print FILE's bytes, read through mmap
 *	fs-probe sparse FILE OFFSET	write one byte at OFFSET; print
 *					"size S blocks B" (st_blocks)
 *	fs-probe writers DIR N KIB	N processes at once, each writes
 *					DIR/wI (KIB KiB of a pattern of its
 *					own) with fsync, then reads it back;
 *					prints "writers ok" or why not
 *	fs-probe errno OP PATH [PATH2]	print the errno name OP gets:
 *					OP one of open-w, mkdir, unlink,
 *					rmdir, rename, link, symlink, creat,
 *					truncate; "OK" on success
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int do_mmap(const char *path)
{
	struct stat st;
	void *p;
	int fd;

	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st)) {
		perror(path);
		return 1;
	}
	if (!st.st_size)
		return 0;
	p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (fwrite(p, 1, st.st_size, stdout) != (size_t)st.st_size)
		return 1;
	munmap(p, st.st_size);
	close(fd);
	return 0;
}

static int do_sparse(const char *path, const char *offset)
{
	off_t off = strtoll(offset, NULL, 0);
	struct stat st;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pwrite(fd, "x", 1, off) != 1 || fsync(fd) ||
	    fstat(fd, &st)) {
		perror(path);
		return 1;
	}
	close(fd);
	printf("size %lld blocks %lld\n", (long long)st.st_size,
	       (long long)st.st_blocks);
	return 0;
}

static uint8_t pattern(int who, size_t at)
{
	return (uint8_t)(who * 31 + at * 7 + (at >> 12));
}

static int writer(const char *dir, int who, size_t kib)
{
	uint8_t buf[4096];
	char path[512];
	size_t at, i;
	int fd;

	snprintf(path, sizeof(path), "%s/w%d", dir, who);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 1;
	for (at = 0; at < kib * 1024; at += sizeof(buf)) {
		for (i = 0; i < sizeof(buf); i++)
			buf[i] = pattern(who, at + i);
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			return 2;
	}
	if (fsync(fd) || lseek(fd, 0, SEEK_SET))
		return 3;
	for (at = 0; at < kib * 1024; at += sizeof(buf)) {
		if (read(fd, buf, sizeof(buf)) != sizeof(buf))
			return 4;
		for (i = 0; i < sizeof(buf); i++)
			if (buf[i] != pattern(who, at + i))
				return 5;
	}
	close(fd);
	return 0;
}

static int do_writers(const char *dir, int n, size_t kib)
{
	int i, status, bad = 0;

	for (i = 0; i < n; i++)
		if (fork() == 0)
			_exit(writer(dir, i, kib));
	for (i = 0; i < n; i++) {
		if (wait(&status) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status)) {
			printf("writer failed: status %d\n", status);
			bad = 1;
		}
	}
	if (!bad)
		printf("writers ok\n");
	return bad;
}

static int do_errno(const char *op, const char *a, const char *b)
{
	int ret = -1, fd;

	if (!strcmp(op, "open-w")) {
		fd = open(a, O_WRONLY);
		ret = fd < 0 ? -1 : close(fd);
	} else if (!strcmp(op, "creat")) {
		fd = open(a, O_WRONLY | O_CREAT | O_EXCL, 0644);
		ret = fd < 0 ? -1 : close(fd);
	} else if (!strcmp(op, "mkdir")) {
		ret = mkdir(a, 0755);
	} else if (!strcmp(op, "unlink")) {
		ret = unlink(a);
	} else if (!strcmp(op, "rmdir")) {
		ret = rmdir(a);
	} else if (!strcmp(op, "rename") && b) {
		ret = rename(a, b);
	} else if (!strcmp(op, "link") && b) {
		ret = link(a, b);
	} else if (!strcmp(op, "symlink") && b) {
		ret = symlink(a, b);
	} else if (!strcmp(op, "truncate")) {
		ret = truncate(a, 0);
	} else {
		fprintf(stderr, "fs-probe: unknown op %s\n", op);
		return 2;
	}
	if (!ret)
		printf("OK\n");
	else
		printf("%s\n",
		       strerrorname_np(errno) ? strerrorname_np(errno) : "E?");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "mmap"))
		return do_mmap(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "sparse"))
		return do_sparse(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "writers"))
		return do_writers(argv[2], atoi(argv[3]), atoi(argv[4]));
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "errno"))
		return do_errno(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
	fprintf(stderr, "usage: see selftests/helpers/fs-probe.c\n");
	return 2;
}
