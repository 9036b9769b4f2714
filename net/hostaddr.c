// SPDX-License-Identifier: GPL-2.0
/*
 * The host's own IPv4 addresses (hostaddr.h): an rtnetlink dump at
 * create, then RTM_NEWADDR / RTM_DELADDR notifications. Every message is
 * read from kernel bytes with its lengths checked before use.
 */
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/errf.h"
#include "lib/log.h"
#include "net/hostaddr.h"

#define HOSTADDR_NAME	  "host addresses"
#define HOSTADDR_BUF	  8192U /* one read of the socket */
#define HOSTADDR_DUMP_SEQ 1U

struct net_host_addrs {
	uint32_t *addrs; /* network byte order, unordered */
	unsigned int nr, cap;
	bool full; /* past NET_HOST_ADDRS_MAX: every address counts */
	int fd;
	uint8_t *buf; /* HOSTADDR_BUF */
};

struct net_host_addrs *net_host_addrs__create_empty(void)
{
	struct net_host_addrs *h = calloc(1, sizeof(*h));

	if (h)
		h->fd = -1;
	return h;
}

void net_host_addrs__destroy(struct net_host_addrs *h)
{
	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	free(h->addrs);
	free(h->buf);
	free(h);
}

int net_host_addrs__fd(const struct net_host_addrs *h)
{
	return h ? h->fd : -1;
}

unsigned int net_host_addrs__count(const struct net_host_addrs *h)
{
	return h ? h->nr : 0;
}

bool net_host_addrs__contains(const struct net_host_addrs *h, uint32_t addr)
{
	if (!h)
		return false;
	if (h->full)
		return true; /* fail closed */
	for (unsigned int i = 0; i < h->nr; i++)
		if (h->addrs[i] == addr)
			return true;
	return false;
}

static int add(struct net_host_addrs *h, uint32_t addr)
{
	uint32_t *a;
	unsigned int cap;

	if (net_host_addrs__contains(h, addr))
		return 0;
	if (h->nr == NET_HOST_ADDRS_MAX) {
		if (!h->full)
			pr_err("%s: more than %u; every address now counts as "
			       "the host's",
			       HOSTADDR_NAME, NET_HOST_ADDRS_MAX);
		h->full = true;
		return 1;
	}
	if (h->nr == h->cap) {
		cap = h->cap ? 2 * h->cap : 16;
		a = realloc(h->addrs, cap * sizeof(*a));
		if (!a) {
			h->full = true; /* fail closed */
			return 1;
		}
		h->addrs = a;
		h->cap = cap;
	}
	h->addrs[h->nr++] = addr;
	return 1;
}

static int del(struct net_host_addrs *h, uint32_t addr)
{
	for (unsigned int i = 0; i < h->nr; i++)
		if (h->addrs[i] == addr) {
			h->addrs[i] = h->addrs[--h->nr];
			return 1;
		}
	return 0;
}

/* One RTM_NEWADDR or RTM_DELADDR message's address applied; -EBADMSG. */
static int apply_addr(struct net_host_addrs *h, const struct nlmsghdr *nh)
{
	const struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	size_t len = nh->nlmsg_len;
	const struct rtattr *rta;
	uint32_t local = 0, address = 0;
	bool has_local = false, has_address = false;
	unsigned int rlen;

	if (len < NLMSG_LENGTH(sizeof(*ifa)))
		return -EBADMSG;
	if (ifa->ifa_family != AF_INET)
		return 0;
	rlen = len - NLMSG_LENGTH(sizeof(*ifa));
	for (rta = IFA_RTA(ifa); RTA_OK(rta, rlen); rta = RTA_NEXT(rta, rlen)) {
		if (RTA_PAYLOAD(rta) != sizeof(uint32_t))
			continue;
		if (rta->rta_type == IFA_LOCAL) {
			memcpy(&local, RTA_DATA(rta), sizeof(local));
			has_local = true;
		} else if (rta->rta_type == IFA_ADDRESS) {
			memcpy(&address, RTA_DATA(rta), sizeof(address));
			has_address = true;
		}
	}
	/* On a point-to-point link IFA_ADDRESS is the peer's. */
	if (!has_local && !has_address)
		return 0;
	if (nh->nlmsg_type == RTM_NEWADDR)
		return add(h, has_local ? local : address);
	return del(h, has_local ? local : address);
}

int net_host_addrs__apply(struct net_host_addrs *h, const void *buf, size_t len)
{
	const struct nlmsghdr *nh;
	size_t off = 0;
	int changed = 0, ret;

	while (len - off >= sizeof(*nh)) {
		nh = (const void *)((const uint8_t *)buf + off);
		if (nh->nlmsg_len < sizeof(*nh) || nh->nlmsg_len > len - off)
			return -EBADMSG;
		if (nh->nlmsg_type == NLMSG_DONE)
			return changed;
		if (nh->nlmsg_type == RTM_NEWADDR ||
		    nh->nlmsg_type == RTM_DELADDR) {
			ret = apply_addr(h, nh);
			if (ret < 0)
				return ret;
			changed += ret;
		} /* else NLMSG_ERROR, NLMSG_NOOP, others: nothing to apply */
		off += NLMSG_ALIGN(nh->nlmsg_len);
		if (off > len)
			off = len; /* the last message's padding */
	}
	/* Bytes that are not even a header: cut or damaged. */
	return off == len ? changed : -EBADMSG;
}

static int dump_request(int fd)
{
	struct {
		struct nlmsghdr nh;
		struct ifaddrmsg ifa;
	} req = {
		.nh = { .nlmsg_len = NLMSG_LENGTH(sizeof(struct ifaddrmsg)),
			.nlmsg_type = RTM_GETADDR,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
			.nlmsg_seq = HOSTADDR_DUMP_SEQ },
		.ifa = { .ifa_family = AF_INET },
	};
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };

	if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&k,
		   sizeof(k)) != (ssize_t)req.nh.nlmsg_len)
		return -errno;
	return 0;
}

/* Whether buf[0, n) ends a dump (an NLMSG_DONE in it). */
static bool dump_done(const void *buf, size_t n)
{
	const struct nlmsghdr *nh = buf;

	for (; NLMSG_OK(nh, n); nh = NLMSG_NEXT(nh, n))
		if (nh->nlmsg_type == NLMSG_DONE ||
		    nh->nlmsg_type == NLMSG_ERROR)
			return true;
	return false;
}

int net_host_addrs__read(struct net_host_addrs *h)
{
	ssize_t n;
	int ret;

	for (;;) {
		n = recv(h->fd, h->buf, HOSTADDR_BUF, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			if (errno == ENOBUFS) {
				/* Notifications lost: ask for the whole set. */
				ret = dump_request(h->fd);
				if (ret)
					return ret;
				continue;
			}
			return -errno;
		}
		ret = net_host_addrs__apply(h, h->buf, (size_t)n);
		if (ret < 0)
			pr_warn("%s: a netlink message that does not parse",
				HOSTADDR_NAME);
	}
}

int net_host_addrs__create(struct net_host_addrs **out, char *err,
			   size_t errlen)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK,
				  .nl_groups = RTMGRP_IPV4_IFADDR };
	struct net_host_addrs *h = net_host_addrs__create_empty();
	ssize_t n;
	int ret = 0;

	*out = NULL;
	if (!h || !(h->buf = malloc(HOSTADDR_BUF))) {
		net_host_addrs__destroy(h);
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    HOSTADDR_NAME);
	}
	h->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (h->fd < 0 || bind(h->fd, (struct sockaddr *)&sa, sizeof(sa)))
		ret = -errno;
	if (!ret)
		ret = dump_request(h->fd);
	/* The dump, read whole now (blocking): the set is full at start. */
	while (!ret) {
		n = recv(h->fd, h->buf, HOSTADDR_BUF, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			break;
		}
		if (net_host_addrs__apply(h, h->buf, (size_t)n) < 0) {
			ret = -EBADMSG;
			break;
		}
		if (dump_done(h->buf, (size_t)n))
			break;
	}
	if (ret) {
		net_host_addrs__destroy(h);
		return errf(err, errlen, ret, "%s: rtnetlink: %s",
			    HOSTADDR_NAME, strerror(-ret));
	}
	*out = h;
	return 0;
}
