/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_RINGS_H
#define KILN_SELFTESTS_RINGS_H

/*
 * The io_uring instances this process holds, found by their descriptors
 * (/proc/self/fd, "anon_inode:[io_uring]"), and whether each is
 * restricted: a restricted ring refuses every registration it was not
 * given (IORING_REGISTER_PROBE among them) with EACCES, an unrestricted
 * one answers the probe. Devices' rings are private, so this looks at
 * them from outside, as an exploit would find them.
 */
#include <dirent.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ring_census {
	unsigned int restricted;
	unsigned int unrestricted;
};

static inline bool ring_fd_is_restricted(int fd)
{
	unsigned int nr = 256; /* sqe->opcode is a u8 */
	size_t size = sizeof(struct io_uring_probe) +
		      nr * sizeof(struct io_uring_probe_op);
	struct io_uring_probe *p = calloc(1, size);
	long ret;

	if (!p)
		return false;
	ret = syscall(__NR_io_uring_register, fd, IORING_REGISTER_PROBE, p, nr);
	free(p);
	return ret < 0 && errno == EACCES;
}

/* 0, or -errno if /proc/self/fd cannot be read. */
static inline int ring_census__take(struct ring_census *c)
{
	char path[64], target[64];
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	ssize_t n;

	*c = (struct ring_census){ 0 };
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, "anon_inode:[io_uring]"))
			continue;
		if (ring_fd_is_restricted(fd))
			c->restricted++;
		else
			c->unrestricted++;
	}
	closedir(d);
	return 0;
}

#endif
