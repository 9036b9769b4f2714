// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's network end to end (Documentation/network.md): `--net auto`
 * gives the guest lo up, eth0 with the configured address, MTU, MAC and
 * default route, /etc/resolv.conf naming the DNS server, and an ARP
 * answer from the gateway (the tap's host side in the VM's namespace,
 * which the eBPF program will keep answering); `--net tap-fd:N` does the
 * same on a tap this test makes in a namespace of its own; vm.facts
 * reports the network. Root only (namespaces, taps). Every address is in
 * a namespace the vmm or the test made; nothing reaches any other
 * network.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define GUEST_MAC  "02:4b:4c:00:00:2a"
#define GUEST_MTU  "1400"
#define GUEST_DNS  "10.0.2.3"
#define VNET_HDR   12 /* sizeof(struct virtio_net_hdr_v1) */
#define READY_SECS 240

/*
 * What the guest sees of its network, one line each: lo's flags, eth0's
 * MTU, MAC and address, the default route (/proc/net/route: gateway in
 * hex, little-endian), resolv.conf, lo answering, the gateway answering
 * ARP on eth0.
 */
static const char probe[] =
	"cat /sys/class/net/lo/flags; "
	"cat /sys/class/net/eth0/mtu; "
	"cat /sys/class/net/eth0/address; "
	"ip -o -4 addr show dev eth0 | grep -o 'inet [0-9./]*'; "
	"awk '$2 == \"00000000\" { print \"default\", $1, $3 }' "
	"/proc/net/route; "
	"cat /etc/resolv.conf; "
	"ping -c 1 -W 5 127.0.0.1 >/dev/null && echo lo answers; "
	"arping -c 1 -w 10 -I eth0 10.0.2.2 >/dev/null && echo gateway answers";

static const char expected[] = "0x9\n" /* IFF_UP | IFF_LOOPBACK */
	GUEST_MTU "\n" GUEST_MAC "\n"
			       "inet 10.0.2.15/24\n"
			       "default eth0 0202000A\n"
			       "nameserver " GUEST_DNS "\n"
			       "lo answers\n"
			       "gateway answers\n";

static bool is_root(struct __test_metadata *_metadata)
{
	if (geteuid())
		SKIP(return false, "needs root (network namespaces, taps)");
	return true;
}

TEST_TIMEOUT(net_auto_configures_the_guest, BOOT_TIMEOUT)
{
	struct spawn_result r;

	if (!is_root(_metadata))
		return;
	BOOT(NULL,
	     ARGS("--net", "auto", "--net-mtu", GUEST_MTU, "--net-mac",
		  GUEST_MAC, "--net-dns", GUEST_DNS),
	     ARGS("sh", "-c", probe), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(expected, r.out);
}

/*
 * Default deny, with no policy: a TCP connection to an address of no one
 * is steered by the egress program to the vmm's proxy, which refuses it
 * (and says so once on stderr); ICMP to it and to the gateway never gets
 * past the program.
 */
TEST_TIMEOUT(nothing_leaves_by_default, BOOT_TIMEOUT)
{
	struct spawn_result r;

	if (!is_root(_metadata))
		return;
	BOOT(NULL, ARGS("--net", "auto"),
	     ARGS("sh", "-c",
		  "wget -q -T 10 -O /dev/null http://198.51.100.7/ "
		  "&& echo tcp leaves || echo tcp denied; "
		  "ping -c 1 -W 3 198.51.100.7 >/dev/null "
		  "&& echo icmp leaves || echo icmp denied; "
		  "ping -c 1 -W 3 10.0.2.2 >/dev/null "
		  "&& echo gateway pings || echo gateway silent"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("tcp denied\nicmp denied\ngateway silent\n", r.out);
	EXPECT_TRUE(strstr(r.err, "denied tcp 10.0.2.15:") != NULL)
	TH_LOG("stderr: %s", r.err);
	EXPECT_TRUE(strstr(r.err, " -> 198.51.100.7:80: no policy") != NULL)
	TH_LOG("stderr: %s", r.err);
}

/* Without --net the guest still has lo, and no eth0. */
TEST_TIMEOUT(no_net_still_lo, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL,
	     ARGS("sh", "-c",
		  "cat /sys/class/net/lo/flags; "
		  "test -e /sys/class/net/eth0 || echo no eth0; "
		  "ping -c 1 -W 5 127.0.0.1 >/dev/null && echo lo answers"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("0x9\nno eth0\nlo answers\n", r.out);
}

/*
 * An orchestrator's tap: made here, in a namespace of this test process's
 * own, with the gateway's address on it, and handed to the vmm open.
 */
static int orchestrator_tap(struct __test_metadata *_metadata)
{
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd, sock, hdr = VNET_HDR;

	if (unshare(CLONE_NEWNET))
		return -1;
	fd = open("/dev/net/tun", O_RDWR); /* inherited by the vmm */
	if (fd < 0)
		return -1;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "orch0");
	if (ioctl(fd, TUNSETIFF, &ifr) || ioctl(fd, TUNSETVNETHDRSZ, &hdr))
		return -1;
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "10.0.2.2", &sin.sin_addr);
	memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
	if (sock < 0 || ioctl(sock, SIOCSIFADDR, &ifr))
		return -1;
	inet_pton(AF_INET, "255.255.255.0", &sin.sin_addr);
	memcpy(&ifr.ifr_netmask, &sin, sizeof(sin));
	if (ioctl(sock, SIOCSIFNETMASK, &ifr) ||
	    ioctl(sock, SIOCGIFFLAGS, &ifr))
		return -1;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sock, SIOCSIFFLAGS, &ifr))
		return -1;
	close(sock);
	return fd;
}

TEST_TIMEOUT(net_tap_fd_from_the_orchestrator, BOOT_TIMEOUT)
{
	struct spawn_result r;
	char mode[32];
	int fd;

	if (!is_root(_metadata))
		return;
	fd = orchestrator_tap(_metadata);
	ASSERT_LE(0, fd) TH_LOG("the orchestrator's tap: %s", strerror(errno));
	snprintf(mode, sizeof(mode), "tap-fd:%d", fd);
	BOOT(NULL,
	     ARGS("--net", mode, "--net-mtu", GUEST_MTU, "--net-mac", GUEST_MAC,
		  "--net-dns", GUEST_DNS),
	     ARGS("sh", "-c", probe), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(expected, r.out);
	close(fd);
}

/* Drops every space and newline (none is in the values looked for). */
static void squeeze(char *s)
{
	char *to = s;

	for (; *s; s++)
		if (*s != ' ' && *s != '\n')
			*to++ = *s;
	*to = '\0';
}

/* vm.facts: topic "net", one fact per setting. */
TEST_TIMEOUT(facts_report_the_network, BOOT_TIMEOUT)
{
	char dir[] = "/tmp/kiln-net-XXXXXX", sock[96], log[96];
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	static const char *const want[] = {
		"\"topic\":\"net\",\"relation\":\"mode\",\"value\":\"auto\"",
		"\"relation\":\"address\",\"value\":\"10.0.2.15/24\"",
		"\"relation\":\"gateway\",\"value\":\"10.0.2.2\"",
		"\"relation\":\"dns\",\"value\":\"" GUEST_DNS "\"",
		"\"relation\":\"mtu\",\"value\":" GUEST_MTU "}",
		"\"relation\":\"mac\",\"value\":\"" GUEST_MAC "\"",
		"\"relation\":\"tap\",\"value\":\"kiln0\"",
	};
	struct spawn_result r;
	struct timespec t0, now;
	struct guest g;
	bool ready = false;
	pid_t vmm;

	if (!is_root(_metadata))
		return;
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	guest_paths(&g);
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(sock, sizeof(sock), "%s/ctl.sock", dir);
	snprintf(log, sizeof(log), "%s/vmm.log", dir);
	vmm = spawn_logged(ARGS(g.vmm, "start", "--kernel", g.vmlinux,
				"--initrd", g.initrd, "--net", "auto",
				"--net-mtu", GUEST_MTU, "--net-mac", GUEST_MAC,
				"--net-dns", GUEST_DNS, "--control-socket",
				sock),
			   log);
	ASSERT_LT(0, vmm);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (!spawn__run(ARGS(vmmctl, "status", sock), NULL, &r) &&
		    !r.status && strstr(r.out, "\"agent\": \"ready\""))
			ready = true;
		else
			usleep(100000);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (!ready && now.tv_sec - t0.tv_sec < READY_SECS &&
		 waitpid(vmm, NULL, WNOHANG) != vmm);
	if (!ready)
		vmm_log_show(_metadata, log);
	ASSERT_TRUE(ready);

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "facts", sock), NULL, &r));
	EXPECT_EQ(0, r.status);
	squeeze(r.out); /* vmmctl indents: no spaces, no lines */
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		EXPECT_TRUE(strstr(r.out, want[i]) != NULL)
	TH_LOG("want %s in %.2000s", want[i], r.out);

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "shutdown", sock), NULL, &r));
	EXPECT_EQ(0, wait_exit(vmm, 60));
	unlink(sock);
	unlink(log);
	rmdir(dir);
}

TEST_HARNESS_MAIN
