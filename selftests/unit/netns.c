// SPDX-License-Identifier: GPL-2.0
/*
 * --net auto's and netns:PATH's host side (net/netns.c), and tap-fd:N's
 * check (tap__adopt): the namespace made or entered on a thread while the
 * caller stays where it was, the tap kiln0 in it with the gateway's
 * address and MTU, lo up, the route local 0.0.0.0/0 dev lo in table 100
 * and the rule that sends what comes in from the tap there, looked at
 * from inside the namespace with ioctls and rtnetlink dumps, and shown to
 * work: a datagram the guest sends (written into the tap) to an address
 * nobody has is delivered to a socket of the namespace, while the
 * namespace's own datagram to it finds no route. Root only (a skip
 * otherwise); every namespace is the test's own, nothing leaves them.
 * The namespace launcher's veth (netns__create_veth): its near end
 * configured as the tap is, its far end made in another namespace with
 * the guest's MAC and MTU, and a datagram from there to nobody's address
 * delivered in the near end's namespace, as from the tap.
 * And the thread all of net/ enters a namespace with (net/nsthread.c):
 * its function runs there, its caller stays, a bad fd is an error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fib_rules.h>
#include <linux/if_ether.h>
#include <linux/if_tun.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <net/route.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/netcfg.h"
#include "net/netns.h"
#include "net/nsthread.h"
#include "net/tap.h"
#include "selftests/kselftest.h"

#define GATEWAY	    "10.0.2.2"
#define GUEST	    "10.0.2.15"
#define PREFIX	    24
#define TEST_MTU    1400
#define NOBODY_ADDR "198.51.100.7" /* TEST-NET-2: nobody's */
#define TEST_PORT   5300
#define DUMP_BUF    16384
#define POLL_MS	    2000
#define ERR_LEN	    256

static bool can_unshare(struct __test_metadata *_metadata)
{
	if (geteuid())
		SKIP(return false, "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)");
	if (access("/dev/net/tun", R_OK | W_OK))
		SKIP(return false, "/dev/net/tun: %s", strerror(errno));
	return true;
}

static ino_t ns_inode(int fd)
{
	struct stat st;

	return fd >= 0 && !fstat(fd, &st) ? st.st_ino : 0;
}

static ino_t my_ns(void)
{
	int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	ino_t ino = ns_inode(fd);

	close(fd);
	return ino;
}

static short if_flags(int sock, const char *name)
{
	struct ifreq ifr = { 0 };

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	return ioctl(sock, SIOCGIFFLAGS, &ifr) ? 0 : ifr.ifr_flags;
}

/*
 * An rtnetlink dump of type (RTM_GETROUTE, RTM_GETRULE) for IPv4: does
 * match() say yes to one of its messages?
 */
static bool nl_dump_finds(uint16_t type,
			  bool (*match)(const struct nlmsghdr *h,
					const void *arg),
			  const void *arg)
{
	struct {
		struct nlmsghdr h;
		struct rtgenmsg g;
	} req = {
		.h = { .nlmsg_len = sizeof(req),
		       .nlmsg_type = type,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.g = { .rtgen_family = AF_INET },
	};
	static uint8_t buf[DUMP_BUF];
	bool found = false, done = false;
	int sock;
	ssize_t n;

	sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (sock < 0 || send(sock, &req, sizeof(req), 0) < 0)
		return false;
	while (!done && (n = recv(sock, buf, sizeof(buf), 0)) > 0) {
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		for (; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_DONE ||
			    h->nlmsg_type == NLMSG_ERROR) {
				done = true;
				break;
			}
			found = found || match(h, arg);
		}
	}
	close(sock);
	return found;
}

/* "local 0.0.0.0/0 dev lo" in the steering table; arg: lo's index. */
static bool is_local_default(const struct nlmsghdr *h, const void *arg)
{
	const struct rtmsg *rt = NLMSG_DATA(h);
	const struct rtattr *a = RTM_RTA(rt);
	int len = RTM_PAYLOAD(h);
	uint32_t table = rt->rtm_table, oif = 0;

	for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		if (a->rta_type == RTA_TABLE)
			memcpy(&table, RTA_DATA(a), 4);
		if (a->rta_type == RTA_OIF)
			memcpy(&oif, RTA_DATA(a), 4);
	}
	return rt->rtm_dst_len == 0 && rt->rtm_type == RTN_LOCAL &&
	       table == NETNS_STEER_TABLE && oif == *(const unsigned int *)arg;
}

/* "pref 100 iif <tap> lookup 100"; arg: the tap's name. */
static bool is_steer_rule(const struct nlmsghdr *h, const void *arg)
{
	const struct fib_rule_hdr *frh = NLMSG_DATA(h);
	const struct rtattr *a = (const struct rtattr *)(frh + 1);
	int len = (int)h->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*frh));
	uint32_t table = frh->table, pref = 0;
	const char *iif = "";

	for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		if (a->rta_type == FRA_TABLE)
			memcpy(&table, RTA_DATA(a), 4);
		if (a->rta_type == FRA_PRIORITY)
			memcpy(&pref, RTA_DATA(a), 4);
		if (a->rta_type == FRA_IFNAME)
			iif = RTA_DATA(a);
	}
	return table == NETNS_STEER_TABLE && pref == NETNS_STEER_PREF &&
	       !strcmp(iif, arg) && frh->action == FR_ACT_TO_TBL;
}

static bool has_local_default(unsigned int lo)
{
	return nl_dump_finds(RTM_GETROUTE, is_local_default, &lo);
}

static bool has_steer_rule(const char *tap)
{
	return nl_dump_finds(RTM_GETRULE, is_steer_rule, tap);
}

/* RFC 1071's sum over an IPv4 header. */
static uint16_t ip_checksum(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint32_t sum = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)b[i] << 8 | b[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return htons((uint16_t)~sum);
}

/*
 * A UDP datagram "from the guest" (10.0.2.15) to NOBODY_ADDR:TEST_PORT,
 * written into the tap as the device would: a zero virtio-net header,
 * then the frame, to the tap's own MAC.
 */
static bool guest_sends(int tap_fd, const uint8_t mac[ETH_ALEN])
{
	struct __attribute__((packed)) {
		uint8_t vnet[12];
		struct ethhdr eth;
		struct iphdr ip;
		struct udphdr udp;
		char data[4];
	} f = { 0 };

	memcpy(f.eth.h_dest, mac, ETH_ALEN);
	memcpy(f.eth.h_source, "\x02\x4b\x4c\x00\x00\x01", ETH_ALEN);
	f.eth.h_proto = htons(ETH_P_IP);
	f.ip.version = 4;
	f.ip.ihl = 5;
	f.ip.tot_len = htons(sizeof(f) - sizeof(f.vnet) - sizeof(f.eth));
	f.ip.ttl = 64;
	f.ip.protocol = IPPROTO_UDP;
	inet_pton(AF_INET, GUEST, &f.ip.saddr);
	inet_pton(AF_INET, NOBODY_ADDR, &f.ip.daddr);
	f.ip.check = ip_checksum(&f.ip, sizeof(f.ip));
	f.udp.source = htons(TEST_PORT + 1);
	f.udp.dest = htons(TEST_PORT);
	f.udp.len = htons(sizeof(f.udp) + sizeof(f.data));
	memcpy(f.data, "ping", 4); /* UDP checksum 0: none */
	return write(tap_fd, &f, sizeof(f)) == (ssize_t)sizeof(f);
}

/*
 * Inside the namespace of ns_fd (this test process moves there): what
 * netns__create_tap promised, and the route at work.
 */
static void check_inside(struct __test_metadata *_metadata, int ns_fd,
			 int tap_fd)
{
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_port = htons(TEST_PORT) };
	struct sockaddr_in any = to;
	struct ifreq ifr = { 0 };
	char buf[8] = "", a[INET_ADDRSTRLEN];
	int sock, rx, tx;
	struct pollfd p;

	ASSERT_EQ(0, setns(ns_fd, CLONE_NEWNET)) TH_LOG("%s", strerror(errno));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	EXPECT_TRUE(if_flags(sock, "lo") & IFF_UP);
	EXPECT_TRUE(if_flags(sock, NET_TAP_NAME) & IFF_UP);

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), NET_TAP_NAME);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFMTU, &ifr));
	EXPECT_EQ(TEST_MTU, ifr.ifr_mtu);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFADDR, &ifr));
	inet_ntop(AF_INET, &((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, a,
		  sizeof(a));
	EXPECT_STREQ(GATEWAY, a);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFNETMASK, &ifr));
	inet_ntop(AF_INET, &((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, a,
		  sizeof(a));
	EXPECT_STREQ("255.255.255.0", a);
	close(sock);

	EXPECT_TRUE(has_local_default(if_nametoindex("lo")));
	EXPECT_TRUE(has_steer_rule(NET_TAP_NAME));

	/* The namespace's own traffic is not made local, nor sent out. */
	tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, tx);
	inet_pton(AF_INET, NOBODY_ADDR, &to.sin_addr);
	EXPECT_EQ(-1,
		  sendto(tx, "ping", 4, 0, (struct sockaddr *)&to, sizeof(to)));
	EXPECT_EQ(ENETUNREACH, errno);
	close(tx);

	/* What comes in from the tap is local, whatever its destination. */
	rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, rx);
	any.sin_addr.s_addr = htonl(INADDR_ANY);
	ASSERT_EQ(0, bind(rx, (struct sockaddr *)&any, sizeof(any)));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), NET_TAP_NAME);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFHWADDR, &ifr));
	close(sock);
	ASSERT_TRUE(guest_sends(tap_fd, (uint8_t *)ifr.ifr_hwaddr.sa_data))
	TH_LOG("write to the tap: %s", strerror(errno));
	p = (struct pollfd){ .fd = rx, .events = POLLIN };
	ASSERT_EQ(1, poll(&p, 1, POLL_MS));
	EXPECT_EQ(4, recv(rx, buf, sizeof(buf), 0));
	EXPECT_STREQ("ping", buf);
	close(rx);
}

static const struct netns_params *params(const char *path)
{
	static struct netns_params p;

	p = (struct netns_params){ .path = path,
				   .tap_name = NET_TAP_NAME,
				   .mtu = TEST_MTU,
				   .prefix = PREFIX };
	inet_pton(AF_INET, GATEWAY, &p.host_addr);
	return &p;
}

TEST(auto_makes_a_namespace_with_the_tap)
{
	char err[ERR_LEN] = "";
	ino_t before = my_ns();
	struct tap tap;
	int ns_fd = -1;

	if (!can_unshare(_metadata))
		return;
	ASSERT_EQ(0, netns__create_tap(params(NULL), &ns_fd, &tap, err,
				       sizeof(err)))
	TH_LOG("%s", err);
	/* The caller never left its namespace; the tap is elsewhere. */
	EXPECT_EQ(before, my_ns());
	EXPECT_NE(before, ns_inode(ns_fd));
	EXPECT_EQ(0, if_nametoindex(NET_TAP_NAME));
	EXPECT_STREQ(NET_TAP_NAME, tap.name);
	EXPECT_LE(0, tap.fd);
	EXPECT_TRUE(fcntl(ns_fd, F_GETFD) & FD_CLOEXEC);
	check_inside(_metadata, ns_fd, tap.fd);
	tap__close(&tap);
	close(ns_fd);
}

/* An orchestrator's namespace, named by a file (here /proc/self/fd/N). */
TEST(netns_path_enters_the_given_namespace)
{
	char err[ERR_LEN] = "", path[64];
	int orig, given, ns_fd = -1;
	struct tap tap;

	if (!can_unshare(_metadata))
		return;
	orig = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, orig);
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	given = open("/proc/thread-self/ns/net", O_RDONLY);
	ASSERT_LE(0, given);
	ASSERT_EQ(0, setns(orig, CLONE_NEWNET));
	snprintf(path, sizeof(path), "/proc/self/fd/%d", given);

	ASSERT_EQ(0, netns__create_tap(params(path), &ns_fd, &tap, err,
				       sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(ns_inode(orig), my_ns());
	EXPECT_EQ(ns_inode(given), ns_inode(ns_fd));
	check_inside(_metadata, ns_fd, tap.fd);
	tap__close(&tap);
	close(ns_fd);
	close(given);
	close(orig);
}

TEST(netns_path_refused)
{
	char err[ERR_LEN] = "";
	struct tap tap;
	int ns_fd = -1;

	if (!can_unshare(_metadata))
		return;
	EXPECT_EQ(-ENOENT, netns__create_tap(params("/no/such/netns"), &ns_fd,
					     &tap, err, sizeof(err)));
	EXPECT_STREQ("net namespace /no/such/netns: No such file or directory",
		     err);
	EXPECT_EQ(-EINVAL, netns__create_tap(params("/proc/self/ns/uts"),
					     &ns_fd, &tap, err, sizeof(err)));
	EXPECT_STREQ("net namespace /proc/self/ns/uts: not a network namespace",
		     err);
	EXPECT_EQ(-1, ns_fd);
}

/* tap-fd:N: a tap of the right kind is taken, anything else refused. */
/* ip addr add GUEST/PREFIX dev eth0; ip link set eth0 up; default via GW */
static int far_end_up(int sock)
{
	struct ifreq ifr = { .ifr_name = "eth0" };
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	struct rtentry rt = { .rt_flags = RTF_UP | RTF_GATEWAY,
			      .rt_dev = (char *)"eth0" };

	sin->sin_family = AF_INET;
	inet_pton(AF_INET, GUEST, &sin->sin_addr);
	if (ioctl(sock, SIOCSIFADDR, &ifr))
		return -errno;
	inet_pton(AF_INET, "255.255.255.0", &sin->sin_addr);
	if (ioctl(sock, SIOCSIFNETMASK, &ifr) ||
	    ioctl(sock, SIOCGIFFLAGS, &ifr))
		return -errno;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sock, SIOCSIFFLAGS, &ifr))
		return -errno;
	sin = (struct sockaddr_in *)&rt.rt_gateway;
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, GATEWAY, &sin->sin_addr);
	((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
	((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
	return ioctl(sock, SIOCADDRT, &rt) ? -errno : 0;
}

TEST(veth_far_end_in_the_sandbox_namespace)
{
	static const uint8_t mac[NETNS_MAC_LEN] = { 0x02, 0x4b, 0x4c, 1, 2, 3 };
	struct netns_veth v = { .peer_name = "eth0", .peer_mac = mac };
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_port = htons(TEST_PORT) };
	struct ifreq ifr = { .ifr_name = "eth0" };
	char err[ERR_LEN] = "", buf[8] = "", a[INET_ADDRSTRLEN], path[64];
	int orig, sandbox, ns_fd = -1, second = -1, sock, rx;
	struct pollfd p;

	if (!can_unshare(_metadata))
		return;
	orig = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, orig);
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	sandbox = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, sandbox);
	ASSERT_EQ(0, setns(orig, CLONE_NEWNET));
	v.peer_ns_fd = sandbox;

	ASSERT_EQ(0, netns__create_veth(params(NULL), &v, &ns_fd, err,
					sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(ns_inode(orig), my_ns());
	EXPECT_EQ(0, if_nametoindex(NET_TAP_NAME));
	/* A second pair in the same namespace: kiln0 is taken, one line. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ns_fd);
	EXPECT_EQ(-EEXIST, netns__create_veth(params(path), &v, &second, err,
					      sizeof(err)));
	EXPECT_STREQ(
		"net kiln0: a veth pair to the sandbox's eth0: File exists",
		err);
	EXPECT_EQ(-1, second);

	/* The far end: in the sandbox's namespace, down, MAC and MTU set. */
	ASSERT_EQ(0, setns(sandbox, CLONE_NEWNET));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	EXPECT_FALSE(if_flags(sock, "eth0") & IFF_UP);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFMTU, &ifr));
	EXPECT_EQ(TEST_MTU, ifr.ifr_mtu);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFHWADDR, &ifr));
	EXPECT_EQ(0, memcmp(mac, ifr.ifr_hwaddr.sa_data, sizeof(mac)));
	ASSERT_EQ(0, far_end_up(sock)) TH_LOG("%s", strerror(errno));
	close(sock);

	/* The near end: configured as the tap; what comes from it is local. */
	ASSERT_EQ(0, setns(ns_fd, CLONE_NEWNET));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	EXPECT_TRUE(if_flags(sock, NET_TAP_NAME) & IFF_UP);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), NET_TAP_NAME);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFADDR, &ifr));
	inet_ntop(AF_INET, &((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, a,
		  sizeof(a));
	EXPECT_STREQ(GATEWAY, a);
	close(sock);
	EXPECT_TRUE(has_local_default(if_nametoindex("lo")));
	EXPECT_TRUE(has_steer_rule(NET_TAP_NAME));
	rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, rx);
	to.sin_addr.s_addr = htonl(INADDR_ANY);
	ASSERT_EQ(0, bind(rx, (struct sockaddr *)&to, sizeof(to)));

	ASSERT_EQ(0, setns(sandbox, CLONE_NEWNET));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	inet_pton(AF_INET, NOBODY_ADDR, &to.sin_addr);
	EXPECT_EQ(4, sendto(sock, "ping", 4, 0, (struct sockaddr *)&to,
			    sizeof(to)))
	TH_LOG("%s", strerror(errno));
	close(sock);
	p = (struct pollfd){ .fd = rx, .events = POLLIN };
	ASSERT_EQ(1, poll(&p, 1, POLL_MS));
	EXPECT_EQ(4, recv(rx, buf, sizeof(buf), 0));
	EXPECT_STREQ("ping", buf);
	close(rx);
	ASSERT_EQ(0, setns(orig, CLONE_NEWNET));
	close(ns_fd);
	close(sandbox);
	close(orig);
}

TEST(tap_fd_adopted_or_refused)
{
	char err[ERR_LEN] = "";
	struct tap made, taken;
	struct ifreq ifr = { 0 };
	int pipefd[2], plain;

	if (!can_unshare(_metadata))
		return;
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	ASSERT_EQ(0, tap__open(&made, &(struct tap_params){ .name = "orch0" },
			       err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, tap__adopt(&taken, made.fd, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(made.fd, taken.fd);
	EXPECT_STREQ("orch0", taken.name);
	EXPECT_EQ(made.offloads, taken.offloads);

	ASSERT_EQ(0, pipe(pipefd));
	EXPECT_EQ(-EINVAL, tap__adopt(&taken, pipefd[0], err, sizeof(err)));
	EXPECT_TRUE(strstr(err, ": not a tap (") != NULL) TH_LOG("%s", err);
	EXPECT_EQ(-1, taken.fd);
	close(pipefd[0]);
	EXPECT_EQ(-EBADF, tap__adopt(&taken, pipefd[0], err, sizeof(err)));
	close(pipefd[1]);

	/* No IFF_VNET_HDR: the device could not pass headers through. */
	plain = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, plain);
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "plain0");
	ASSERT_EQ(0, ioctl(plain, TUNSETIFF, &ifr));
	EXPECT_EQ(-EINVAL, tap__adopt(&taken, plain, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "(plain0): must be IFF_TAP with IFF_NO_PI "
				"and IFF_VNET_HDR") != NULL)
	TH_LOG("%s", err);
	close(plain);
	tap__close(&made);
}

/* ---- net/nsthread.c ------------------------------------------------------ */

struct ns_probe {
	int fd;	   /* the namespace the function ran in, opened there */
	ino_t ino; /* its inode */
	int ret;   /* what the function returns */
	bool ran, served;
};

static int probe_ns(void *arg)
{
	struct ns_probe *pr = arg;

	pr->ran = true;
	pr->fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	pr->ino = ns_inode(pr->fd);
	return pr->ret;
}

static void probe_serve(void *arg)
{
	struct ns_probe *pr = arg;

	pr->served = my_ns() == pr->ino;
}

static bool is_root(struct __test_metadata *_metadata)
{
	if (geteuid())
		SKIP(return false, "needs root (CAP_SYS_ADMIN)");
	return true;
}

TEST(nsthread_runs_in_a_new_or_given_namespace)
{
	struct ns_probe made = { .fd = -1 }, given = { .fd = -1 };
	char err[ERR_LEN] = "";
	ino_t before = my_ns();

	if (!is_root(_metadata))
		return;
	ASSERT_EQ(0, nsthread__run(NSTHREAD_NEW, "test", probe_ns, &made, err,
				   sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_TRUE(made.ran);
	ASSERT_LE(0, made.fd);
	EXPECT_NE(before, made.ino);
	EXPECT_EQ(before, my_ns());

	/* Into the one just made, and the function's return is the run's. */
	given.ret = -ENOTSUP;
	EXPECT_EQ(-ENOTSUP, nsthread__run(made.fd, "test", probe_ns, &given,
					  err, sizeof(err)));
	EXPECT_EQ(made.ino, given.ino);
	EXPECT_EQ(before, my_ns());
	close(given.fd);
	close(made.fd);
}

TEST(nsthread_refuses_a_bad_fd)
{
	struct ns_probe pr = { .fd = -1 };
	char err[ERR_LEN] = "";
	int pipefd[2];

	ASSERT_EQ(0, pipe(pipefd));
	EXPECT_EQ(-EINVAL, nsthread__run(pipefd[0], "test", probe_ns, &pr, err,
					 sizeof(err)));
	EXPECT_STREQ("test: setns: Invalid argument", err);
	close(pipefd[0]);
	close(pipefd[1]);
	EXPECT_EQ(-EBADF, nsthread__run(pipefd[0], "test", probe_ns, &pr, err,
					sizeof(err)));
	EXPECT_STREQ("test: setns: Bad file descriptor", err);
	EXPECT_FALSE(pr.ran);
}

/* A thread that stays: serve runs there after set-up, only if it worked. */
TEST(nsthread_serves_after_its_setup)
{
	struct nsthread t = { 0 };
	struct ns_probe pr = { .fd = -1 }, bad = { .fd = -1, .ret = -EIO };
	struct nsthread_params p = { .ns_fd = NSTHREAD_NEW,
				     .name = "test",
				     .setup = probe_ns,
				     .serve = probe_serve,
				     .arg = &pr };
	char err[ERR_LEN] = "";

	if (!is_root(_metadata))
		return;
	ASSERT_EQ(0, nsthread__start(&t, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	nsthread__join(&t);
	EXPECT_TRUE(pr.served);
	EXPECT_FALSE(t.started);
	nsthread__join(&t); /* again: nothing */
	close(pr.fd);

	p.arg = &bad;
	EXPECT_EQ(-EIO, nsthread__start(&t, &p, err, sizeof(err)));
	EXPECT_TRUE(t.started);
	nsthread__join(&t);
	EXPECT_TRUE(bad.ran);
	EXPECT_FALSE(bad.served);
	close(bad.fd);
}

TEST_HARNESS_MAIN
