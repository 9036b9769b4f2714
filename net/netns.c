// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's network namespace and its tap (netns.h): made on a thread of
 * its own (nsthread.h), configured over rtnetlink.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fib_rules.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/veth.h>
#include <linux/nsfs.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/errf.h"
#include "net/netns.h"
#include "net/nsthread.h"

#define THREAD_NS_PATH	"/proc/thread-self/ns/net"
#define NETLINK_MSG_MAX 256U  /* one request: a header and a few attributes */
#define NETLINK_ACK_MAX 1024U /* an error with the request echoed */

/* ---- rtnetlink ---------------------------------------------------------- */

struct nl_request {
	struct nlmsghdr h;
	uint8_t body[NETLINK_MSG_MAX];
};

static void nl_init(struct nl_request *r, uint16_t type, uint16_t flags,
		    const void *msg, size_t len)
{
	memset(r, 0, sizeof(*r));
	r->h.nlmsg_len = NLMSG_LENGTH(len);
	r->h.nlmsg_type = type;
	r->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	memcpy(NLMSG_DATA(&r->h), msg, len);
}

/* Every attribute we add fits NETLINK_MSG_MAX by construction. */
static void nl_attr(struct nl_request *r, uint16_t type, const void *data,
		    size_t len)
{
	struct rtattr *a =
		(struct rtattr *)((uint8_t *)r + NLMSG_ALIGN(r->h.nlmsg_len));

	a->rta_type = type;
	a->rta_len = RTA_LENGTH(len);
	memcpy(RTA_DATA(a), data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
}

/*
 * A nested attribute opened: its length is fixed by nl_nest_end once
 * everything in it was added.
 */
static struct rtattr *nl_nest(struct nl_request *r, uint16_t type)
{
	struct rtattr *a =
		(struct rtattr *)((uint8_t *)r + NLMSG_ALIGN(r->h.nlmsg_len));

	a->rta_type = type;
	a->rta_len = RTA_LENGTH(0);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

static void nl_nest_end(struct nl_request *r, struct rtattr *a)
{
	a->rta_len =
		(unsigned short)((uint8_t *)r + r->h.nlmsg_len - (uint8_t *)a);
}

/* Raw bytes inside a nested attribute (veth's peer ifinfomsg). */
static void nl_raw(struct nl_request *r, const void *data, size_t len)
{
	memcpy((uint8_t *)r + NLMSG_ALIGN(r->h.nlmsg_len), data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + NLMSG_ALIGN(len);
}

/* Sends the request and reads its acknowledgement: 0 or -errno. */
static int nl_talk(int sock, struct nl_request *r)
{
	uint8_t buf[NETLINK_ACK_MAX];
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	struct nlmsgerr *e;
	ssize_t n;

	if (send(sock, &r->h, r->h.nlmsg_len, 0) < 0)
		return -errno;
	n = recv(sock, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	if (!NLMSG_OK(h, (size_t)n) || h->nlmsg_type != NLMSG_ERROR ||
	    h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
		return -EPROTO;
	e = NLMSG_DATA(h);
	return e->error; /* 0 or -errno */
}

static int link_up(int sock, unsigned int ifindex)
{
	struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC,
				 .ifi_index = (int)ifindex,
				 .ifi_flags = IFF_UP,
				 .ifi_change = IFF_UP };
	struct nl_request r;

	nl_init(&r, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
	return nl_talk(sock, &r);
}

/* Replaces one the namespace may have already (an orchestrator's). */
static int add_address(int sock, unsigned int ifindex, uint32_t addr,
		       unsigned int prefix)
{
	struct ifaddrmsg ifa = { .ifa_family = AF_INET,
				 .ifa_prefixlen = prefix,
				 .ifa_scope = RT_SCOPE_UNIVERSE,
				 .ifa_index = ifindex };
	struct nl_request r;

	nl_init(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, &ifa,
		sizeof(ifa));
	nl_attr(&r, IFA_LOCAL, &addr, sizeof(addr));
	nl_attr(&r, IFA_ADDRESS, &addr, sizeof(addr));
	return nl_talk(sock, &r);
}

/*
 * The table of the guest's packets: "local 0.0.0.0/0 dev lo" in it makes
 * every destination local for what comes in from the tap, and only for
 * that (add_steer_rule): in table local it would make the guest's own
 * address local too, and the replies to it would go into lo.
 */
/* NETNS_STEER_PREF: before the main table's rule (32766). */
/* local 0.0.0.0/0 dev lo table NETNS_STEER_TABLE */
static int add_local_default(int sock, unsigned int lo)
{
	struct rtmsg rt = { .rtm_family = AF_INET,
			    .rtm_dst_len = 0,
			    .rtm_table = RT_TABLE_UNSPEC, /* RTA_TABLE says */
			    .rtm_protocol = RTPROT_BOOT,
			    .rtm_scope = RT_SCOPE_HOST,
			    .rtm_type = RTN_LOCAL };
	uint32_t table = NETNS_STEER_TABLE, oif = lo;
	struct nl_request r;

	nl_init(&r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt,
		sizeof(rt));
	nl_attr(&r, RTA_TABLE, &table, sizeof(table));
	nl_attr(&r, RTA_OIF, &oif, sizeof(oif));
	return nl_talk(sock, &r);
}

/* pref NETNS_STEER_PREF iif TAP lookup NETNS_STEER_TABLE */
static int add_steer_rule(int sock, const char *tap)
{
	struct fib_rule_hdr frh = { .family = AF_INET,
				    .table = RT_TABLE_UNSPEC,
				    .action = FR_ACT_TO_TBL };
	uint32_t table = NETNS_STEER_TABLE, pref = NETNS_STEER_PREF;
	struct nl_request r;

	/* Without NLM_F_EXCL, the same rule already there is no error. */
	nl_init(&r, RTM_NEWRULE, NLM_F_CREATE, &frh, sizeof(frh));
	nl_attr(&r, FRA_PRIORITY, &pref, sizeof(pref));
	nl_attr(&r, FRA_TABLE, &table, sizeof(table));
	nl_attr(&r, FRA_IFNAME, tap, strlen(tap) + 1);
	return nl_talk(sock, &r);
}

/* ---- the namespace ------------------------------------------------------- */

struct netns_job {
	const struct netns_params *p;
	const struct netns_veth *veth; /* NULL: a tap */
	int ns_fd;
	struct tap tap;
	const char *ifname; /* the tap's, or the veth's near end */
	bool veth_made;	    /* undone on a later failure */
	char *err;
	size_t errlen;
};

/*
 * The namespace at p->path, opened and checked here: its thread enters
 * it. A new one is made by its thread (ns_fd stays -1 until then).
 */
static int open_given(struct netns_job *j)
{
	const char *path = j->p->path;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errf(j->err, j->errlen, -errno, "net namespace %s: %s",
			    path, strerror(errno));
	j->ns_fd = fd;
	if (ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET)
		return errf(j->err, j->errlen, -EINVAL,
			    "net namespace %s: not a network namespace", path);
	return 0;
}

/* The gateway's address on the tap, lo up, the guest's local route. */
static int configure(struct netns_job *j)
{
	unsigned int lo, tap;
	const char *what;
	int sock, ret;

	lo = if_nametoindex("lo");
	tap = if_nametoindex(j->ifname);
	if (!lo || !tap)
		return errf(j->err, j->errlen, -ENODEV,
			    "net: %s: no such interface",
			    lo ? j->ifname : "lo");
	sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (sock < 0)
		return errf(j->err, j->errlen, -errno, "net: rtnetlink: %s",
			    strerror(errno));
	what = "lo up";
	ret = link_up(sock, lo);
	if (!ret) {
		what = "the tap's address";
		ret = add_address(sock, tap, j->p->host_addr, j->p->prefix);
	}
	if (!ret) {
		what = "the route local 0.0.0.0/0 dev lo table 100";
		ret = add_local_default(sock, lo);
	}
	if (!ret) {
		what = "the rule iif <tap> lookup 100";
		ret = add_steer_rule(sock, j->ifname);
	}
	close(sock);
	if (ret)
		return errf(j->err, j->errlen, ret, "net %s: %s: %s", j->ifname,
			    what, strerror(-ret));
	return 0;
}

/*
 * Runs in the namespace, on its thread (nsthread.h): the namespace lives
 * on in ns_fd and in the tap.
 */
static int in_netns(void *arg)
{
	struct netns_job *j = arg;
	struct tap_params tp = { .name = j->p->tap_name, .mtu = j->p->mtu };
	int ret;

	if (j->ns_fd < 0) {
		j->ns_fd = open(THREAD_NS_PATH, O_RDONLY | O_CLOEXEC);
		if (j->ns_fd < 0)
			return errf(j->err, j->errlen, -errno,
				    "net namespace %s: %s", THREAD_NS_PATH,
				    strerror(errno));
	}
	ret = tap__open(&j->tap, &tp, j->err, j->errlen);
	j->ifname = j->tap.name;
	if (!ret)
		ret = configure(j);
	return ret;
}

/*
 * ip link add NAME mtu MTU type veth peer name PEER address MAC mtu MTU
 * netns PEER_NS: the far end made straight in the sandbox's namespace.
 */
static int veth_add(int sock, const struct netns_params *p,
		    const struct netns_veth *v)
{
	struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
	struct rtattr *info, *data, *peer;
	uint32_t mtu = p->mtu, ns = (uint32_t)v->peer_ns_fd;
	struct nl_request r;

	nl_init(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
	nl_attr(&r, IFLA_IFNAME, p->tap_name, strlen(p->tap_name) + 1);
	if (mtu)
		nl_attr(&r, IFLA_MTU, &mtu, sizeof(mtu));
	info = nl_nest(&r, IFLA_LINKINFO);
	nl_attr(&r, IFLA_INFO_KIND, "veth", sizeof("veth"));
	data = nl_nest(&r, IFLA_INFO_DATA);
	peer = nl_nest(&r, VETH_INFO_PEER);
	nl_raw(&r, &ifi, sizeof(ifi));
	nl_attr(&r, IFLA_IFNAME, v->peer_name, strlen(v->peer_name) + 1);
	nl_attr(&r, IFLA_NET_NS_FD, &ns, sizeof(ns));
	nl_attr(&r, IFLA_ADDRESS, v->peer_mac, NETNS_MAC_LEN);
	if (mtu)
		nl_attr(&r, IFLA_MTU, &mtu, sizeof(mtu));
	nl_nest_end(&r, peer);
	nl_nest_end(&r, data);
	nl_nest_end(&r, info);
	return nl_talk(sock, &r);
}

static int veth_del(int sock, unsigned int ifindex)
{
	struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC,
				 .ifi_index = (int)ifindex };
	struct nl_request r;

	nl_init(&r, RTM_DELLINK, 0, &ifi, sizeof(ifi));
	return nl_talk(sock, &r);
}

/*
 * The veth's near end, up, then configured as the tap would be; on a
 * failure after its creation the pair goes again (a given namespace
 * would keep it).
 */
static int in_netns_veth(void *arg)
{
	struct netns_job *j = arg;
	unsigned int ifindex = 0;
	int sock, ret;

	if (j->ns_fd < 0) {
		j->ns_fd = open(THREAD_NS_PATH, O_RDONLY | O_CLOEXEC);
		if (j->ns_fd < 0)
			return errf(j->err, j->errlen, -errno,
				    "net namespace %s: %s", THREAD_NS_PATH,
				    strerror(errno));
	}
	j->ifname = j->p->tap_name;
	sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (sock < 0)
		return errf(j->err, j->errlen, -errno, "net: rtnetlink: %s",
			    strerror(errno));
	ret = veth_add(sock, j->p, j->veth);
	if (ret) {
		close(sock);
		return errf(j->err, j->errlen, ret,
			    "net %s: a veth pair to the sandbox's %s: %s%s",
			    j->ifname, j->veth->peer_name, strerror(-ret),
			    ret == -EOPNOTSUPP ? " (no veth module?)" : "");
	}
	ifindex = if_nametoindex(j->ifname);
	ret = ifindex ? link_up(sock, ifindex) : -ENODEV;
	if (ret)
		errf(j->err, j->errlen, ret, "net %s: link up: %s", j->ifname,
		     strerror(-ret));
	else
		ret = configure(j);
	if (ret && ifindex)
		veth_del(sock, ifindex);
	close(sock);
	return ret;
}

/* The namespace (given or new) entered on a thread running fn. */
static int run_job(struct netns_job *j, int (*fn)(void *))
{
	const struct netns_params *p = j->p;
	char name[sizeof("net namespace ") + PATH_MAX];
	int ret = 0;

	snprintf(name, sizeof(name), "%s%s", p->path ? "net namespace " : "net",
		 p->path ? p->path : "");
	if (p->path)
		ret = open_given(j);
	if (!ret)
		ret = nsthread__run(p->path ? j->ns_fd : NSTHREAD_NEW, name, fn,
				    j, j->err, j->errlen);
	return ret;
}

int netns__create_veth(const struct netns_params *p, const struct netns_veth *v,
		       int *ns_fd, char *err, size_t errlen)
{
	struct netns_job j = {
		.p = p,
		.veth = v,
		.ns_fd = -1,
		.tap = { .fd = -1 },
		.err = err,
		.errlen = errlen,
	};
	int ret = run_job(&j, in_netns_veth);

	if (ret) {
		if (j.ns_fd >= 0)
			close(j.ns_fd);
		return ret;
	}
	*ns_fd = j.ns_fd;
	return 0;
}

int netns__create_tap(const struct netns_params *p, int *ns_fd, struct tap *tap,
		      char *err, size_t errlen)
{
	struct netns_job j = {
		.p = p,
		.ns_fd = -1,
		.tap = { .fd = -1 },
		.err = err,
		.errlen = errlen,
	};
	int ret = run_job(&j, in_netns);

	if (ret) {
		tap__close(&j.tap);
		if (j.ns_fd >= 0)
			close(j.ns_fd);
		return ret;
	}
	*ns_fd = j.ns_fd;
	*tap = j.tap;
	return 0;
}
