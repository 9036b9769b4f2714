/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NETNS_H
#define KILN_NETNS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/tap.h"

/*
 * The VM's network namespace and its tap (--net auto, --net netns:PATH;
 * Documentation/network.md). A short-lived thread enters the namespace
 * (unshare(CLONE_NEWNET) for a new one, setns() into a given one), keeps
 * an fd of it, opens the tap there (net/tap.c) and configures it over
 * rtnetlink: the gateway's address on the tap, lo up, and
 *
 *	local 0.0.0.0/0 dev lo table 100
 *	pref 100 iif <tap> lookup 100
 *
 * so that every destination is local for what the guest sends (and only
 * for that: the replies to the guest take the main table): the eBPF
 * program on the tap steers the guest's flows to the vmm's own sockets
 * there, and nothing is ever forwarded. The thread is joined before this returns;
 * the vmm's other threads never leave the host's namespace, where its
 * proxy opens upstream connections. Needs CAP_SYS_ADMIN (unshare, setns)
 * and CAP_NET_ADMIN in the namespace.
 *
 *	ret = netns__create_tap(&p, &ns_fd, &tap, err, sizeof(err));
 *	...
 *	tap__close(&tap);  after the device is gone
 *	close(ns_fd);      the namespace goes when nothing else holds it
 */

/* The routing table of the guest's packets, and its rule's priority. */
#define NETNS_STEER_TABLE 100U
#define NETNS_STEER_PREF  100U

struct netns_params {
	const char *path;     /* a namespace file; NULL: a new namespace */
	const char *tap_name; /* NET_TAP_NAME (the tap, or the veth's end) */
	unsigned int mtu;     /* bytes; 0: the kernel's default */
	uint32_t host_addr;   /* the tap's address, network byte order */
	unsigned int prefix;  /* its prefix length, bits */
};

/*
 * 0 with *ns_fd (O_CLOEXEC) and *tap, or -errno with "what: why" in err;
 * nothing is left open on failure (a new namespace goes with it).
 */
int __must_check netns__create_tap(const struct netns_params *p, int *ns_fd,
				   struct tap *tap, char *err, size_t errlen);

/*
 * The namespace launcher's link (vmm --isolation namespace): instead of
 * a tap, a veth pair whose near end (tap_name) is configured in the
 * namespace exactly as the tap would be (the gateway's address, lo up,
 * the steering route and rule, so the egress program attaches to it as
 * to a tap), and whose far end is made directly in the sandbox's own
 * network namespace (peer_ns_fd, borrowed) as peer_name with the
 * guest's MAC and the MTU, down and without an address: the sandbox
 * configures it as a guest configures eth0. The pair goes when either
 * namespace goes. 0 with *ns_fd (O_CLOEXEC), or -errno with "what: why"
 * in err; nothing is left on failure.
 */
#define NETNS_MAC_LEN 6U
struct netns_veth {
	int peer_ns_fd;
	const char *peer_name;
	const uint8_t *peer_mac; /* NETNS_MAC_LEN bytes */
};

int __must_check netns__create_veth(const struct netns_params *p,
				    const struct netns_veth *v, int *ns_fd,
				    char *err, size_t errlen);

#endif
