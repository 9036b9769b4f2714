// SPDX-License-Identifier: GPL-2.0
/* Tap interfaces for virtio-net (see tap.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/errf.h"
#include "net/tap.h"

#define TUN_PATH  "/dev/net/tun"
#define TAP_FLAGS (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR)

/*
 * Each offload on top of the ones before it: the tap takes TSO only with
 * CSUM and ECN only with TSO, and refuses (EINVAL) a flag it does not
 * know, which is how one asks (if_tun.h).
 */
static unsigned int probe_offloads(int fd)
{
	static const unsigned int steps[] = { TUN_F_CSUM, TUN_F_TSO4,
					      TUN_F_TSO6, TUN_F_TSO_ECN };
	unsigned int ok = 0;

	for (unsigned int i = 0; i < ARRAY_SIZE(steps); i++) {
		if (i && !(ok & TUN_F_CSUM))
			break;
		if (!ioctl(fd, TUNSETOFFLOAD, ok | steps[i]))
			ok |= steps[i];
	}
	if (!(ok & (TUN_F_TSO4 | TUN_F_TSO6)))
		ok &= ~TUN_F_TSO_ECN;
	return ok;
}

/* MTU, then IFF_UP, through any socket of the namespace. */
static int link_up(struct tap *t, unsigned int mtu, char *err, size_t errlen)
{
	struct ifreq ifr = { 0 };
	int sock, ret = 0;

	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return errf(err, errlen, -errno, "tap %s: socket: %s", t->name,
			    strerror(errno));
	memcpy(ifr.ifr_name, t->name, sizeof(ifr.ifr_name));
	ifr.ifr_mtu = (int)mtu;
	if (mtu && ioctl(sock, SIOCSIFMTU, &ifr) < 0) {
		ret = errf(err, errlen, -errno, "tap %s: MTU %u: %s", t->name,
			   mtu, strerror(errno));
		goto out_close;
	}
	if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0) {
		ret = errf(err, errlen, -errno, "tap %s: SIOCGIFFLAGS: %s",
			   t->name, strerror(errno));
		goto out_close;
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0)
		ret = errf(err, errlen, -errno, "tap %s: link up: %s", t->name,
			   strerror(errno));
out_close:
	close(sock);
	return ret;
}

static int tap_setup(struct tap *t, const struct tap_params *p, char *err,
		     size_t errlen)
{
	struct ifreq ifr = { .ifr_flags = TAP_FLAGS };
	int hdr_len = sizeof(struct virtio_net_hdr_v1);
	const char *name = p->name ? p->name : "";

	if (strlen(name) >= sizeof(ifr.ifr_name))
		return errf(err, errlen, -ENAMETOOLONG,
			    "tap %s: name longer than %zu bytes", name,
			    sizeof(ifr.ifr_name) - 1);
	memcpy(ifr.ifr_name, name, strlen(name));
	t->fd = open(TUN_PATH, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (t->fd < 0)
		return errf(err, errlen, -errno, "%s: %s", TUN_PATH,
			    strerror(errno));
	if (ioctl(t->fd, TUNSETIFF, &ifr) < 0)
		return errf(err, errlen, -errno, "tap %s: TUNSETIFF: %s",
			    *name ? name : "(any)", strerror(errno));
	memcpy(t->name, ifr.ifr_name, sizeof(t->name));
	t->name[sizeof(t->name) - 1] = '\0';
	if (ioctl(t->fd, TUNSETVNETHDRSZ, &hdr_len) < 0)
		return errf(err, errlen, -errno,
			    "tap %s: TUNSETVNETHDRSZ %d: %s", t->name, hdr_len,
			    strerror(errno));
	t->offloads = probe_offloads(t->fd);
	if (ioctl(t->fd, TUNSETOFFLOAD, 0) < 0)
		return errf(err, errlen, -errno, "tap %s: TUNSETOFFLOAD: %s",
			    t->name, strerror(errno));
	return link_up(t, p->mtu, err, errlen);
}

int tap__open(struct tap *t, const struct tap_params *p, char *err,
	      size_t errlen)
{
	int ret;

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	ret = tap_setup(t, p, err, errlen);
	if (ret)
		tap__close(t);
	return ret;
}

int tap__adopt(struct tap *t, int fd, char *err, size_t errlen)
{
	int hdr_len = sizeof(struct virtio_net_hdr_v1);
	struct ifreq ifr = { 0 };

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	if (fcntl(fd, F_GETFD) < 0)
		return errf(err, errlen, -errno, "tap fd %d: %s", fd,
			    strerror(errno));
	if (ioctl(fd, TUNGETIFF, &ifr) < 0)
		return errf(err, errlen, -EINVAL, "tap fd %d: not a tap (%s)",
			    fd, strerror(errno));
	memcpy(t->name, ifr.ifr_name, sizeof(t->name));
	t->name[sizeof(t->name) - 1] = '\0';
	if ((ifr.ifr_flags & (TAP_FLAGS | IFF_TUN)) != TAP_FLAGS)
		return errf(err, errlen, -EINVAL,
			    "tap fd %d (%s): must be IFF_TAP with IFF_NO_PI "
			    "and IFF_VNET_HDR",
			    fd, t->name);
	if (ioctl(fd, TUNSETVNETHDRSZ, &hdr_len) < 0)
		return errf(err, errlen, -errno,
			    "tap fd %d (%s): TUNSETVNETHDRSZ %d: %s", fd,
			    t->name, hdr_len, strerror(errno));
	t->offloads = probe_offloads(fd);
	if (ioctl(fd, TUNSETOFFLOAD, 0) < 0)
		return errf(err, errlen, -errno,
			    "tap fd %d (%s): TUNSETOFFLOAD: %s", fd, t->name,
			    strerror(errno));
	t->fd = fd;
	return 0;
}

void tap__close(struct tap *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
}
