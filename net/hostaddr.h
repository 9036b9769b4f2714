/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_HOSTADDR_H
#define KILN_NET_HOSTADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * The IPv4 addresses of the interfaces of the netns the proxy originates
 * its flows from (the vmm's own: Documentation/network.md, "Always
 * denied"): read at create with an RTM_GETADDR dump, kept current from
 * an rtnetlink RTMGRP_IPV4_IFADDR subscription whose socket the proxy's
 * loop polls. One owner, one thread: nothing locks. (IPv6 flows are
 * always denied: the data path is IPv4 only, so only IPv4 is read.)
 *
 *	ret = net_host_addrs__create(&h, err, sizeof(err));  host netns
 *	fd = net_host_addrs__fd(h);        EPOLLIN: net_host_addrs__read(h)
 *	net_host_addrs__contains(h, addr);
 *	net_host_addrs__destroy(h);
 */

/* Addresses kept at most; past it every address counts as the host's. */
#define NET_HOST_ADDRS_MAX 4096U

struct net_host_addrs;

/*
 * The set and its netlink socket (in the calling thread's netns), filled
 * from a dump. 0, or -errno with "what: why" in err.
 */
int __must_check net_host_addrs__create(struct net_host_addrs **out, char *err,
					size_t errlen);
/* An empty set with no socket (tests, and none to read). NULL: -ENOMEM. */
struct net_host_addrs *net_host_addrs__create_empty(void);
/* NULL is fine. */
void net_host_addrs__destroy(struct net_host_addrs *h);
/* The subscription's socket (-1: none), non-blocking. */
int net_host_addrs__fd(const struct net_host_addrs *h);
/*
 * Every notification waiting on the socket applied. A lost batch
 * (ENOBUFS) asks for a new dump: what it adds is added, nothing is
 * dropped until a deletion is seen (a stale address stays denied).
 * 0, or -errno of the socket.
 */
int net_host_addrs__read(struct net_host_addrs *h);
/*
 * Netlink messages buf[0, len) (RTM_NEWADDR adds its IFA_LOCAL, else
 * IFA_ADDRESS, RTM_DELADDR removes it; AF_INET only, others ignored):
 * how many addresses changed, or -EBADMSG for a message that does not
 * parse (those before it are applied). 1 more when NLMSG_DONE ends a
 * dump is not counted.
 */
int __must_check net_host_addrs__apply(struct net_host_addrs *h,
				       const void *buf, size_t len);
/* Whether addr (network byte order) is one of the host's. */
bool net_host_addrs__contains(const struct net_host_addrs *h, uint32_t addr);
/* How many are held. */
unsigned int net_host_addrs__count(const struct net_host_addrs *h);

#endif
