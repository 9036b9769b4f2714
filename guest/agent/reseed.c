// SPDX-License-Identifier: GPL-2.0
/* RESEED: fresh entropy for a restored VM (see reseed.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "guest/agent/reseed.h"
#include "proto/reseed.h"

#define RESEED_DEV "/dev/urandom"

/* RNDADDENTROPY, then RNDRESEEDCRNG: 0 or -errno. */
static int feed(const uint8_t *seed, size_t len)
{
	struct rand_pool_info *info;
	int fd, ret = 0;

	info = calloc(1, sizeof(*info) + len);
	if (!info)
		return -ENOMEM;
	/* Credited in full: the bytes are the host's getrandom() output. */
	info->entropy_count = (int)(len * 8);
	info->buf_size = (int)len;
	memcpy(info->buf, seed, len);
	fd = open(RESEED_DEV, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		goto out_free;
	}
	if (ioctl(fd, RNDADDENTROPY, info) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0)
		ret = -errno;
	close(fd);
out_free:
	/* No copy of the seed outlives the request. */
	explicit_bzero(info->buf, len);
	free(info);
	return ret;
}

void reseed__handle(struct conn *c, const struct frame *req)
{
	const uint8_t *seed;
	size_t len;
	int ret;

	ret = kiln_reseed__decode(req->data, req->len, &seed, &len);
	if (ret) {
		conn__error(c, -ret,
			    "RESEED wants one seed field of %u to %u bytes",
			    KILN_RESEED_MIN, KILN_RESEED_MAX);
		return;
	}
	ret = feed(seed, len);
	if (ret) {
		conn__error(c, -ret, "%s: %s", RESEED_DEV, strerror(-ret));
		return;
	}
	conn__ok(c);
}
