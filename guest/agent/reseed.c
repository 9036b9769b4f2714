// SPDX-License-Identifier: GPL-2.0
/* RESEED: fresh entropy for a restored VM (see reseed.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "guest/agent/reseed.h"
#include "guest/init/net.h"
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

void reseed__handle(struct conn *c, const struct frame *req, bool in_vm)
{
	const uint8_t *seed, *mac = NULL;
	const char *net_text = NULL, *what = NULL;
	size_t len, net_len = 0;
	struct init_net net;
	bool has_net;
	int ret;

	ret = kiln_reseed__decode(req->data, req->len, &seed, &len);
	if (ret) {
		conn__error(c, -ret,
			    "RESEED wants one seed field of %u to %u bytes",
			    KILN_RESEED_MIN, KILN_RESEED_MAX);
		return;
	}
	ret = kiln_reseed__decode_net(req->data, req->len, &mac, &net_text,
				      &net_len);
	if (!ret && init_net__parse(net_text, net_len, &net))
		ret = -EINVAL;
	if (ret && ret != -ENOENT) {
		conn__error(c, EINVAL,
			    "RESEED's network wants one %u-byte MAC and one "
			    "ADDRESS/PREFIX,GATEWAY,MTU,DNS",
			    KILN_NET_MAC_LEN);
		return;
	}
	has_net = !ret;
	if (has_net && !in_vm) {
		conn__error(c, ENOTSUP, "not in a VM: %s is the host's",
			    INIT_NET_IFNAME);
		return;
	}
	ret = feed(seed, len);
	if (ret) {
		conn__error(c, -ret, "%s: %s", RESEED_DEV, strerror(-ret));
		return;
	}
	if (has_net) {
		ret = init_net__renew(mac, &net, &what);
		if (ret) {
			conn__error(c, -ret, "%s %s: %s", INIT_NET_IFNAME, what,
				    strerror(-ret));
			return;
		}
	}
	conn__ok(c);
}
