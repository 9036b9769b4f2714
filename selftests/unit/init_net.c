// SPDX-License-Identifier: GPL-2.0
/*
 * The guest init's network (guest/init/net.c, built into this test as it
 * is into the init): kiln.net's parser, what net/netcfg.c writes read
 * back, and the configuration itself run against a tap named eth0 in a
 * network namespace of the test's own, and resolv.conf in a mount
 * namespace of its own with a tmpfs on /run (root only: a skip
 * otherwise). Nothing outside those namespaces is touched.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include "guest/init/net.c"

#include "net/netcfg.h"
#include "net/tap.h"
#include "selftests/kselftest.h"
#include "vmm/config.h"

#define PARAM(s) (s), strlen(s)
#define BUF_LEN	 4096

static const char *ip(struct in_addr a, char buf[INET_ADDRSTRLEN])
{
	return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

TEST(parses_what_the_vmm_writes)
{
	char line[NET_CMDLINE_MAX], err[CONFIG_ERR_LEN], b[INET_ADDRSTRLEN];
	struct net_config c = { .mode = NET_AUTO };
	struct init_net n;
	const char *val;

	ASSERT_EQ(0, netcfg__validate(&c, err, sizeof(err))) TH_LOG("%s", err);
	ASSERT_EQ(0, netcfg__cmdline(&c, line, sizeof(line)));
	val = strchr(line, '=') + 1;
	ASSERT_EQ(0, init_net__parse(PARAM(val), &n));
	EXPECT_STREQ("10.0.2.15", ip(n.address, b));
	EXPECT_EQ(24, n.prefix);
	EXPECT_STREQ("10.0.2.2", ip(n.gateway, b));
	EXPECT_EQ(1500, n.mtu);
	EXPECT_STREQ("10.0.2.2", ip(n.dns, b));

	/* Only len bytes count: the rest of the command line is not ours. */
	ASSERT_EQ(0, init_net__parse("192.168.9.3/28,192.168.9.1,9000,"
				     "192.0.2.53 quiet",
				     strlen("192.168.9.3/28,192.168.9.1,9000,"
					    "192.0.2.53"),
				     &n));
	EXPECT_STREQ("192.0.2.53", ip(n.dns, b));
	EXPECT_EQ(28, n.prefix);
	EXPECT_EQ(9000, n.mtu);
}

TEST(refuses_the_malformed)
{
	static const char *const bad[] = {
		"",
		"10.0.2.15/24",
		"10.0.2.15/24,10.0.2.2,1500",
		"10.0.2.15/24,10.0.2.2,1500,10.0.2.2,",
		"10.0.2.15/24,10.0.2.2,1500,10.0.2.2,x",
		"10.0.2.15,10.0.2.2,1500,10.0.2.2",
		"10.0.2.15/0,10.0.2.2,1500,10.0.2.2",
		"10.0.2.15/31,10.0.2.2,1500,10.0.2.2",
		"10.0.2.15/x,10.0.2.2,1500,10.0.2.2",
		"10.0.2.15/24,10.0.2,1500,10.0.2.2",
		"10.0.2.15/24,10.0.2.2,67,10.0.2.2",
		"10.0.2.15/24,10.0.2.2,65536,10.0.2.2",
		"10.0.2.15/24,10.0.2.2,-1,10.0.2.2",
		"10.0.2.15/24,10.0.2.2,1500,dns.example",
		"10.0.2.15/24,,1500,10.0.2.2",
		"100000000000000000000.0.2.15/24,10.0.2.2,1500,10.0.2.2",
	};
	struct init_net n = { .mtu = 7 };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		EXPECT_EQ(-EINVAL, init_net__parse(PARAM(bad[i]), &n))
	TH_LOG("accepted '%s'", bad[i]);
	EXPECT_EQ(7, n.mtu); /* untouched */
}

/* "Iface Destination Gateway Flags ..." lines of /proc/net/route. */
static bool has_default_via(const char *dev, struct in_addr gw)
{
	char line[256], ifname[IFNAMSIZ + 1];
	unsigned int dst, via, flags;
	bool found = false;
	FILE *f = fopen("/proc/net/route", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%16s %x %x %x", ifname, &dst, &via, &flags) ==
			    4 &&
		    !strcmp(ifname, dev) && dst == 0 && via == gw.s_addr &&
		    (flags & RTF_GATEWAY))
			found = true;
	fclose(f);
	return found;
}

/*
 * A network namespace of the test's own with a tap named eth0 standing
 * in for the virtio-net interface; false (a skip) without root or tun.
 */
static bool own_eth0(struct __test_metadata *_metadata, struct tap *tap)
{
	char err[256] = "";

	if (geteuid() || access("/dev/net/tun", R_OK | W_OK))
		SKIP(return false, "needs root and /dev/net/tun");
	ASSERT_EQ(0, unshare(CLONE_NEWNET)) TH_LOG("%s", strerror(errno));
	ASSERT_EQ(0, tap__open(tap,
			       &(struct tap_params){ .name = INIT_NET_IFNAME },
			       err, sizeof(err)))
	TH_LOG("%s", err);
	return true;
}

TEST(configures_eth0_and_lo)
{
	char b[INET_ADDRSTRLEN];
	struct init_net n;
	struct ifreq ifr;
	struct tap tap;
	int sock;

	if (!own_eth0(_metadata, &tap))
		return;
	ASSERT_EQ(0, init_net__parse(PARAM("10.0.2.15/24,10.0.2.2,1280,"
					   "10.0.2.3"),
				     &n));
	init_net__lo_up();
	ASSERT_EQ(0, init_net__configure(&n));

	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	ifr_for(&ifr, "lo");
	ASSERT_EQ(0, ioctl(sock, SIOCGIFFLAGS, &ifr));
	EXPECT_TRUE(ifr.ifr_flags & IFF_UP);
	ifr_for(&ifr, INIT_NET_IFNAME);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFFLAGS, &ifr));
	EXPECT_TRUE(ifr.ifr_flags & IFF_UP);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFMTU, &ifr));
	EXPECT_EQ(1280, ifr.ifr_mtu);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFADDR, &ifr));
	EXPECT_STREQ("10.0.2.15",
		     ip(((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, b));
	ASSERT_EQ(0, ioctl(sock, SIOCGIFNETMASK, &ifr));
	EXPECT_STREQ("255.255.255.0",
		     ip(((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, b));
	close(sock);
	EXPECT_TRUE(has_default_via(INIT_NET_IFNAME, n.gateway));
	tap__close(&tap);
}

/* A completed ARP entry for addr on eth0, as a reply would leave. */
static int arp_set(int sock, struct in_addr addr, const uint8_t *mac)
{
	struct arpreq r = { .arp_flags = ATF_COM };

	set_sin(&r.arp_pa, addr);
	r.arp_ha.sa_family = ARPHRD_ETHER;
	memcpy(r.arp_ha.sa_data, mac, INIT_NET_MAC_LEN);
	snprintf(r.arp_dev, sizeof(r.arp_dev), "%s", INIT_NET_IFNAME);
	return ioctl(sock, SIOCSARP, &r) ? -errno : 0;
}

static bool arp_has(int sock, struct in_addr addr)
{
	struct arpreq r = { 0 };

	set_sin(&r.arp_pa, addr);
	snprintf(r.arp_dev, sizeof(r.arp_dev), "%s", INIT_NET_IFNAME);
	return !ioctl(sock, SIOCGARP, &r) && (r.arp_flags & ATF_COM);
}

/*
 * A restored VM's eth0 (the agent's RESEED): the new MAC, the same
 * address, MTU and default route, and no neighbour left from the
 * snapshot's host side (its tap had another MAC).
 */
TEST(renew_gives_eth0_the_new_mac_and_forgets_its_neighbours)
{
	static const uint8_t old_gw[INIT_NET_MAC_LEN] = { 0x02, 0x11, 0x22,
							  0x33, 0x44, 0x55 };
	static const uint8_t mac[INIT_NET_MAC_LEN] = { 0x02, 0x4b, 0x4c,
						       0x0a, 0x0b, 0x0c };
	char b[INET_ADDRSTRLEN];
	const char *what = NULL;
	struct init_net n;
	struct ifreq ifr;
	struct tap tap;
	int sock;

	if (!own_eth0(_metadata, &tap))
		return;
	ASSERT_EQ(0, init_net__parse(PARAM("10.0.2.15/24,10.0.2.2,1280,"
					   "10.0.2.2"),
				     &n));
	ASSERT_EQ(0, init_net__configure(&n));
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, sock);
	ASSERT_EQ(0, arp_set(sock, n.gateway, old_gw));
	ASSERT_TRUE(arp_has(sock, n.gateway));

	EXPECT_EQ(0, init_net__renew(mac, &n, &what)) TH_LOG("%s", what);

	ifr_for(&ifr, INIT_NET_IFNAME);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFHWADDR, &ifr));
	EXPECT_EQ(0, memcmp(ifr.ifr_hwaddr.sa_data, mac, sizeof(mac)));
	ASSERT_EQ(0, ioctl(sock, SIOCGIFFLAGS, &ifr));
	EXPECT_TRUE(ifr.ifr_flags & IFF_UP);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFMTU, &ifr));
	EXPECT_EQ(1280, ifr.ifr_mtu);
	ASSERT_EQ(0, ioctl(sock, SIOCGIFADDR, &ifr));
	EXPECT_STREQ("10.0.2.15",
		     ip(((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, b));
	EXPECT_TRUE(has_default_via(INIT_NET_IFNAME, n.gateway));
	EXPECT_FALSE(arp_has(sock, n.gateway));

	/* Twice (a RESEED sent again): the same end. */
	EXPECT_EQ(0, init_net__renew(mac, &n, &what)) TH_LOG("%s", what);
	EXPECT_TRUE(has_default_via(INIT_NET_IFNAME, n.gateway));

	/* No eth0: the failing step is named. */
	tap__close(&tap);
	EXPECT_EQ(-ENODEV, init_net__renew(mac, &n, &what));
	EXPECT_STREQ("link down", what);
	close(sock);
}

static void read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);

	buf[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

/*
 * The root's own /etc/resolv.conf (the host's, here) is bound over, not
 * written: in a mount namespace of the test's own, with /run a tmpfs.
 */
TEST(resolv_conf_bound_over_the_roots)
{
	char before[BUF_LEN], now[BUF_LEN];
	struct init_net n;

	if (geteuid())
		SKIP(return, "needs root (mount namespace)");
	if (access(INIT_NET_RESOLV_CONF, F_OK))
		SKIP(return, "no " INIT_NET_RESOLV_CONF " to bind over");
	ASSERT_EQ(0, unshare(CLONE_NEWNS)) TH_LOG("%s", strerror(errno));
	ASSERT_EQ(0, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
	ASSERT_EQ(0, mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"));
	read_text(INIT_NET_RESOLV_CONF, before, sizeof(before));
	ASSERT_EQ(0, init_net__parse(PARAM("10.0.2.15/24,10.0.2.2,1500,"
					   "192.0.2.53"),
				     &n));
	ASSERT_EQ(0, init_net__resolv_conf(&n));
	read_text(INIT_NET_RESOLV_CONF, now, sizeof(now));
	EXPECT_STREQ("nameserver 192.0.2.53\n", now);
	/* Undone, the root's own file is as it was. */
	ASSERT_EQ(0, umount(INIT_NET_RESOLV_CONF));
	read_text(INIT_NET_RESOLV_CONF, now, sizeof(now));
	EXPECT_STREQ(before, now);
}

/*
 * The hostname in /etc/hostname and /etc/hosts, bound over the root's
 * own (the host's, here, in a mount namespace of the test's own): the
 * root's other hosts lines kept, its 127.0.1.1 lines replaced by one
 * naming the VM; undone, the root's files are as they were.
 */
TEST(hostname_files_bound_over_the_roots)
{
	char before[BUF_LEN], now[BUF_LEN], hosts_before[BUF_LEN];

	if (geteuid())
		SKIP(return, "needs root (mount namespace)");
	if (access(INIT_NET_HOSTS, F_OK) || access(INIT_NET_HOSTNAME, F_OK))
		SKIP(return, "no /etc/hosts or /etc/hostname to bind over");
	ASSERT_EQ(0, unshare(CLONE_NEWNS)) TH_LOG("%s", strerror(errno));
	ASSERT_EQ(0, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
	ASSERT_EQ(0, mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"));
	read_text(INIT_NET_HOSTNAME, before, sizeof(before));
	read_text(INIT_NET_HOSTS, hosts_before, sizeof(hosts_before));
	/* The root's file as the image has it, with a 127.0.1.1 line. */
	ASSERT_EQ(0, mount("tmpfs", "/mnt", "tmpfs", 0, "mode=0755"));
	ASSERT_EQ(0, write_all("/mnt/hosts", O_CREAT | O_TRUNC,
			       "127.0.0.1\tlocalhost\n"
			       "127.0.1.1\tkiln\n"
			       "  127.0.1.1 kiln.local kiln\n"
			       "127.0.1.10\tother\n"
			       "::1\tlocalhost ip6-localhost\n"));
	ASSERT_EQ(0, mount("/mnt/hosts", INIT_NET_HOSTS, NULL, MS_BIND, NULL));

	ASSERT_EQ(0, init_net__hostname_files("sandbox-7"));
	read_text(INIT_NET_HOSTNAME, now, sizeof(now));
	EXPECT_STREQ("sandbox-7\n", now);
	read_text(INIT_NET_HOSTS, now, sizeof(now));
	EXPECT_STREQ("127.0.0.1\tlocalhost\n"
		     "127.0.1.10\tother\n"
		     "::1\tlocalhost ip6-localhost\n"
		     "127.0.1.1\tsandbox-7\n",
		     now);
	ASSERT_EQ(0, umount(INIT_NET_HOSTNAME));
	ASSERT_EQ(0, umount(INIT_NET_HOSTS));
	ASSERT_EQ(0, umount(INIT_NET_HOSTS));
	read_text(INIT_NET_HOSTNAME, now, sizeof(now));
	EXPECT_STREQ(before, now);
	read_text(INIT_NET_HOSTS, now, sizeof(now));
	EXPECT_STREQ(hosts_before, now);
}

TEST_HARNESS_MAIN
