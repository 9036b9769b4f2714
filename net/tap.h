/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_TAP_H
#define KILN_VMM_TAP_H

#include <net/if.h> /* IFNAMSIZ */
#include <stddef.h>

#include "lib/compiler.h"

/*
 * A tap interface the way virtio-net wants it (devices/virtio/net.h):
 * IFF_TAP | IFF_NO_PI | IFF_VNET_HDR with the 12-byte virtio_net_hdr_v1,
 * nonblocking, up. Opening one needs CAP_NET_ADMIN in the network
 * namespace of the caller; the interface lives as long as the fd (it is
 * not made persistent).
 *
 *	struct tap tap;
 *	ret = tap__open(&tap, &(struct tap_params){ .name = "kiln0" },
 *			err, sizeof(err));
 *	... virtio_net_params .tap_fd = tap.fd, .tap_offloads = tap.offloads
 *	tap__close(&tap);                  after the device is gone
 */

struct tap_params {
	const char *name; /* NULL or "": the kernel picks ("tap%d") */
	unsigned int mtu; /* bytes; 0: the kernel's default (1500) */
};

struct tap {
	int fd;		       /* -1 when closed */
	char name[IFNAMSIZ];   /* as the kernel named it */
	unsigned int offloads; /* TUN_F_* it accepts (TUNSETOFFLOAD) */
};

/*
 * Creates the interface (or attaches to an existing one of that name
 * that has the same flags), sets the header size, finds the offloads it
 * accepts (and leaves them off), sets the MTU and brings the link up.
 * 0, or -errno with "what: why" in err (errlen bytes): -ENAMETOOLONG,
 * -EPERM without CAP_NET_ADMIN, -EINVAL for a name or MTU the kernel
 * refuses, ... Nothing is left open on failure.
 */
int __must_check tap__open(struct tap *t, const struct tap_params *p, char *err,
			   size_t errlen);
/*
 * Takes an open tap from elsewhere (an orchestrator's, --net tap-fd:N):
 * checks it is IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, sets the 12-byte
 * header, finds its offloads (and leaves them off); its address, MTU and
 * link state stay as they are. 0 with t->fd = fd, or -errno with "what:
 * why" in err and fd left as it was, the caller's: -EBADF for a closed
 * fd, -EINVAL for one that is not such a tap.
 */
int __must_check tap__adopt(struct tap *t, int fd, char *err, size_t errlen);
/* Closes the fd (the interface goes with it); a closed tap is fine. */
void tap__close(struct tap *t);

#endif
