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
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/test_host.h"
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

/* Root, and KVM to boot with (before the test makes anything). */
static bool can_boot(struct __test_metadata *_metadata)
{
	if (!is_root(_metadata))
		return false;
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
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
 * The guest's driver lets go of the device and takes it again (a reset)
 * while nothing comes from the tap: on Linux 6.1 the device's read of
 * the empty tap is parked in io_uring, and the reset, which must wait
 * for reads into the guest's buffers, cancels it instead of waiting for
 * a frame that never comes. The driver then works as before. (Before
 * the cancel this passed too whenever the host side of the tap sent
 * something, IPv6 chatter for one, that completed the read.)
 */
TEST_TIMEOUT(driver_rebinds_while_the_tap_is_idle, BOOT_TIMEOUT)
{
	struct spawn_result r;

	if (!is_root(_metadata))
		return;
	BOOT(NULL, ARGS("--net", "auto"),
	     ARGS("sh", "-c",
		  "d=$(basename $(readlink /sys/class/net/eth0/device)); "
		  "echo $d > /sys/bus/virtio/drivers/virtio_net/unbind && "
		  "echo $d > /sys/bus/virtio/drivers/virtio_net/bind && "
		  "ip link set eth0 up && "
		  "ip addr add 10.0.2.15/24 dev eth0 && "
		  "arping -c 1 -w 10 -I eth0 10.0.2.2 >/dev/null "
		  "&& echo gateway answers"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("gateway answers\n", r.out);
}

/*
 * Default deny, with no policy: a TCP connection (busybox nc) to an
 * address of no one is refused at connect(): nothing can grant it, so
 * the egress program answers its SYN with an RST and the proxy never
 * sees it; ICMP to it and to the gateway never gets past the program.
 */
TEST_TIMEOUT(nothing_leaves_by_default, BOOT_TIMEOUT)
{
	struct spawn_result r;

	if (!is_root(_metadata))
		return;
	BOOT(NULL, ARGS("--net", "auto"),
	     ARGS("sh", "-c",
		  "echo hi | nc -w 10 198.51.100.7 80 2>&1 "
		  "| grep -q 'Connection refused' "
		  "&& echo tcp refused || echo tcp not refused; "
		  "ping -c 1 -W 3 198.51.100.7 >/dev/null "
		  "&& echo icmp leaves || echo icmp denied; "
		  "ping -c 1 -W 3 10.0.2.2 >/dev/null "
		  "&& echo gateway pings || echo gateway silent"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("tcp refused\nicmp denied\ngateway silent\n", r.out)
	TH_LOG("stderr: %s", r.err);
	/* The proxy never had the flow to deny. */
	EXPECT_EQ(NULL, strstr(r.err, " -> 198.51.100.7:80: no grant"));
}

static int tcp_listener(struct __test_metadata *_metadata, const char *addr,
			int port);

/*
 * A policy's TCP grant: the guest's HTTP request (busybox nc: the
 * initramfs's static busybox wget crashes in its resolver) to the granted
 * host and port is relayed by the proxy (the egress program steers it
 * there) to the test host and the answer comes back. The same host on
 * another port, and another host, are refused at connect() (issue 39:
 * the egress program's RST, as a closed port's; no handshake), and the
 * test's listener on that other port never sees a connection.
 */
TEST_TIMEOUT(granted_tcp_reaches_the_test_host, BOOT_TIMEOUT)
{
	char policy[64];
	static const char grant[] =
		"{\"tcp\": [{\"to\": \"" TEST_HOST "\", \"ports\": [8080]}]}";
	struct spawn_result r;
	struct test_host h;
	int fd, other;

	test_tmp_name(policy, sizeof(policy), "kiln-net-policy-XXXXXX");
	if (!is_root(_metadata))
		return;
	ASSERT_TRUE(test_host_start(_metadata, &h));
	other = tcp_listener(_metadata, TEST_HOST, 8081);
	fd = mkstemp(policy);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)strlen(grant), write(fd, grant, strlen(grant)));
	close(fd);
	BOOT(NULL, ARGS("--net", "auto", "--net-policy", policy),
	     ARGS("sh", "-c",
		  "get() { printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
		  "nc -w 20 $1 $2 2>/dev/null | tail -n 1; }; "
		  "get " TEST_HOST " 8080; "
		  "refused() { nc -w 20 $1 $2 </dev/null 2>&1 "
		  "| grep -q 'Connection refused' && echo $3 refused "
		  "|| echo $3 not refused; }; "
		  "refused " TEST_HOST " 8081 'other port'; "
		  "refused 192.0.2.11 8080 'other host'"),
	     NULL, &r);
	unlink(policy);
	test_host_stop(&h);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(TEST_REPLY "\nother port refused\nother host refused\n",
		     r.out)
	TH_LOG("stderr: %s", r.err);
	/* No guest byte, nor even a connection, reached the other port. */
	EXPECT_FALSE(
		poll(&(struct pollfd){ .fd = other, .events = POLLIN }, 1, 0));
	close(other);
	/* The proxy never had those flows to deny. */
	EXPECT_EQ(NULL, strstr(r.err, " -> 192.0.2.11:8080: no grant"));
}

/*
 * The test's upstream resolver: UDP on TEST_DNS:53 in the test host's
 * namespace, answering every A query with TEST_HOST for TEST_DNS_TTL
 * seconds, and counting what it was asked.
 */
#define TEST_DNS     "192.0.2.53"
#define TEST_DNS_TTL 300
#define DNS_HDR_LEN  12
#define DNS_PORT     53
#define DNS_TYPE_A   1 /* RFC 1035 3.2.2 */
#define DNS_CLASS_IN 1 /* RFC 1035 3.2.4 */

/* A UDP server thread of the test's; got counts what it was sent. */
struct udp_server {
	int fd;
	pthread_t thread;
	unsigned int got;
};

/* Bound to addr:port (an address the test's netns has), serving. */
static bool udp_server_start(struct __test_metadata *_metadata,
			     struct udp_server *u, const char *addr, int port,
			     void *(*serve)(void *))
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(port) };

	inet_pton(AF_INET, addr, &sin.sin_addr);
	u->got = 0;
	u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, u->fd);
	ASSERT_EQ(0, bind(u->fd, (struct sockaddr *)&sin, sizeof(sin)));
	ASSERT_EQ(0, pthread_create(&u->thread, NULL, serve, u));
	return true;
}

static void udp_server_stop(struct udp_server *u)
{
	shutdown(u->fd, SHUT_RDWR); /* recvfrom() returns 0: the thread ends */
	pthread_join(u->thread, NULL);
	close(u->fd);
}

/* Whether the one question of query q (n bytes) is of type A, class IN. */
static bool dns_asks_for_a(const uint8_t *q, size_t n)
{
	size_t at = DNS_HDR_LEN;

	while (at < n && q[at])
		at += 1 + q[at]; /* a label: its length, then its bytes */
	return at + 5 <= n && q[at + 1] == 0 && q[at + 2] == DNS_TYPE_A &&
	       q[at + 3] == 0 && q[at + 4] == DNS_CLASS_IN;
}

/*
 * The answer to query msg (n bytes, room for 16 more) in place: A
 * questions get TEST_HOST, any other (curl asks AAAA too) no record.
 */
static size_t test_dns_answer(uint8_t *msg, size_t n)
{
	/* The answer: a pointer to the question's name (offset 12), A, IN. */
	static const uint8_t answer[] = { 0xc0,
					  DNS_HDR_LEN,
					  0,
					  1,
					  0,
					  1,
					  0,
					  0,
					  TEST_DNS_TTL >> 8,
					  TEST_DNS_TTL & 0xff,
					  0,
					  4 };

	msg[2] = 0x81; /* QR, RD */
	msg[3] = 0x80; /* RA, NOERROR */
	msg[8] = msg[9] = msg[10] = msg[11] = 0;
	if (!dns_asks_for_a(msg, n)) {
		msg[6] = msg[7] = 0;
		return n;
	}
	msg[6] = 0, msg[7] = 1; /* ANCOUNT 1 */
	memcpy(msg + n, answer, sizeof(answer));
	inet_pton(AF_INET, TEST_HOST, msg + n + sizeof(answer));
	return n + sizeof(answer) + 4;
}

/* Each query answered at once. */
static void *test_dns_serve(void *arg)
{
	struct udp_server *d = arg;
	struct sockaddr_in from;
	uint8_t msg[512 + 16];
	socklen_t fl;
	ssize_t n;

	for (;;) {
		fl = sizeof(from);
		n = recvfrom(d->fd, msg, 512, 0, (struct sockaddr *)&from, &fl);
		if (n < DNS_HDR_LEN)
			break; /* shut down, or nonsense: the test is over */
		__atomic_add_fetch(&d->got, 1, __ATOMIC_RELAXED);
		sendto(d->fd, msg, test_dns_answer(msg, (size_t)n), 0,
		       (struct sockaddr *)&from, fl);
	}
	return NULL;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Each query answered SLOW_DNS_MS after it came, as a recursive resolver
 * with a cold cache answers: later than the vmm's per-try timeout
 * (DNS_QUERY_TIMEOUT_MS, 2 s), well within glibc's 5 s. At most 32
 * answers wait; more queries are not answered.
 */
#define SLOW_DNS_MS   2600
#define SLOW_DNS_HELD 32

struct slow_answer {
	int64_t due;
	struct sockaddr_in to;
	size_t len;
	uint8_t msg[512 + 16];
};

static void *test_dns_serve_slow(void *arg)
{
	struct slow_answer *held = calloc(SLOW_DNS_HELD, sizeof(*held));
	struct udp_server *d = arg;
	struct pollfd pfd = { .fd = d->fd, .events = POLLIN };
	struct slow_answer *a;
	int64_t now, next;
	socklen_t fl;
	ssize_t n;

	for (; held;) {
		now = mono_ms();
		next = -1;
		for (int i = 0; i < SLOW_DNS_HELD; i++) {
			a = &held[i];
			if (a->len && a->due <= now) {
				sendto(d->fd, a->msg, a->len, 0,
				       (struct sockaddr *)&a->to,
				       sizeof(a->to));
				a->len = 0;
			} else if (a->len &&
				   (next < 0 || a->due - now < next)) {
				next = a->due - now;
			}
		}
		if (poll(&pfd, 1, (int)next) <= 0)
			continue;
		a = NULL;
		for (int i = 0; !a && i < SLOW_DNS_HELD; i++)
			if (!held[i].len)
				a = &held[i];
		if (!a) {
			uint8_t drop[512];

			if (recv(d->fd, drop, sizeof(drop), 0) <= 0)
				break;
			continue;
		}
		fl = sizeof(a->to);
		n = recvfrom(d->fd, a->msg, 512, 0, (struct sockaddr *)&a->to,
			     &fl);
		if (n < DNS_HDR_LEN)
			break; /* shut down: the test is over */
		__atomic_add_fetch(&d->got, 1, __ATOMIC_RELAXED);
		a->len = test_dns_answer(a->msg, (size_t)n);
		a->due = mono_ms() + SLOW_DNS_MS;
	}
	free(held);
	return NULL;
}

/* In the test host's namespace (test_host_start first), on lo:2. */
static bool test_dns_start(struct __test_metadata *_metadata,
			   struct udp_server *d)
{
	ASSERT_TRUE(test_host_alias(_metadata, "lo:2", TEST_DNS));
	return udp_server_start(_metadata, d, TEST_DNS, DNS_PORT,
				test_dns_serve);
}

/*
 * A hostname grant through trusted DNS: the guest asks the gateway
 * (busybox nslookup, its own resolver), the vmm asks only the policy's
 * resolver, relays the answer and binds the name to TEST_HOST; the
 * guest's connection to that address is then granted by the hostname
 * rule. The same rule gives nothing to an address DNS never returned.
 * A TXT question, and a question for a name no grant uses (issue 34's
 * exfiltration), are REFUSED by the vmm without leaving.
 */
TEST_TIMEOUT(hostname_grant_through_trusted_dns, BOOT_TIMEOUT)
{
	char policy[64];
	static const char grant[] =
		"{\"dns\": {\"resolvers\": [\"" TEST_DNS "\"]}, "
		"\"tcp\": [{\"to\": \"granted.test\", \"ports\": [8080]}]}";
	struct spawn_result r;
	struct test_host h;
	struct udp_server d;
	int fd;

	test_tmp_name(policy, sizeof(policy), "kiln-net-policy-XXXXXX");
	if (!is_root(_metadata))
		return;
	ASSERT_TRUE(test_host_start(_metadata, &h));
	ASSERT_TRUE(test_dns_start(_metadata, &d));
	fd = mkstemp(policy);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)strlen(grant), write(fd, grant, strlen(grant)));
	close(fd);
	BOOT(NULL, ARGS("--net", "auto", "--net-policy", policy),
	     ARGS("sh", "-c",
		  "get() { printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
		  "nc -w 20 $1 $2 2>/dev/null | tail -n 1; }; "
		  "get " TEST_HOST " 8080 | grep -q . "
		  "&& echo unresolved leaves || echo unresolved denied; "
		  "nslookup granted.test 10.0.2.2 | grep -q " TEST_HOST " "
		  "&& echo resolved || echo not resolved; "
		  "nslookup -type=txt granted.test 10.0.2.2 2>&1 "
		  "| grep -q REFUSED && echo txt refused; "
		  "nslookup 6b696c6e.leak.other.test 10.0.2.2 2>&1 "
		  "| grep -q REFUSED && echo other name refused; "
		  "get " TEST_HOST " 8080; "
		  "get 192.0.2.11 8080 | grep -q . "
		  "&& echo other host leaves || echo other host denied"),
	     NULL, &r);
	unlink(policy);
	udp_server_stop(&d);
	test_host_stop(&h);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("unresolved denied\nresolved\ntxt refused\n"
		     "other name refused\n" TEST_REPLY "\nother host denied\n",
		     r.out)
	TH_LOG("stderr: %s", r.err);
	EXPECT_LE(1, __atomic_load_n(&d.got, __ATOMIC_RELAXED));
	/* Issue 34: refused by the name rules, logged, never forwarded. */
	EXPECT_TRUE(strstr(r.err, "dns: refused TXT granted.test ") != NULL)
	TH_LOG("stderr: %s", r.err);
	EXPECT_TRUE(strstr(r.err, "6b696c6e.leak.other.test udp ") != NULL)
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

/* vm.facts: "network-* is VALUE", one fact per setting (api.md, "Facts"). */
TEST_TIMEOUT(facts_report_the_network, BOOT_TIMEOUT)
{
	char dir[64], sock[96], log[96];
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
#define NET_FACT(topic, value) \
	"\"topic\":\"" topic "\",\"relation\":\"is\",\"value\":\"" value "\""
	static const char *const want[] = {
		NET_FACT("network-egress", "deny"),
		NET_FACT("network-mode", "auto"),
		NET_FACT("network-address", "10.0.2.15/24"),
		NET_FACT("network-gateway", "10.0.2.2"),
		NET_FACT("network-dns", GUEST_DNS),
		NET_FACT("network-mtu", GUEST_MTU),
		NET_FACT("network-mac", GUEST_MAC),
	};
#undef NET_FACT
	struct spawn_result r;
	struct timespec t0, now;
	struct guest g;
	bool ready = false;
	pid_t vmm;

	test_tmp_name(dir, sizeof(dir), "kiln-net-XXXXXX");
	if (!can_boot(_metadata))
		return;
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

/* A file holding text; false on failure. */
static bool write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	bool ok = f && fputs(text, f) >= 0;

	if (f && fclose(f))
		ok = false;
	return ok;
}

/* A TCP listener on addr:port in the test's netns. */
static int tcp_listener(struct __test_metadata *_metadata, const char *addr,
			int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	ASSERT_LE(0, fd);
	inet_pton(AF_INET, addr, &sin.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ASSERT_EQ(0, bind(fd, (struct sockaddr *)&sin, sizeof(sin)));
	ASSERT_EQ(0, listen(fd, 8));
	return fd;
}

/* net-probe (selftests/helpers/net-probe.c) packed next to the vmm. */
static void net_probe_initrd(struct __test_metadata *_metadata,
			     const struct guest *g, const char *dir, char *out,
			     size_t len)
{
	const char *slash = strrchr(g->vmm, '/');
	char cpio[300], cmd[800];

	snprintf(cpio, sizeof(cpio), "%.*s/selftests/helpers/net-probe.cpio",
		 slash ? (int)(slash - g->vmm) : 1, slash ? g->vmm : ".");
	ASSERT_EQ(0, access(cpio, R_OK))
	TH_LOG("%s missing: make selftests", cpio);
	snprintf(out, len, "%s/initrd.cpio", dir);
	snprintf(cmd, sizeof(cmd), "cat '%s' '%s' > '%s'", g->initrd, cpio,
		 out);
	ASSERT_EQ(0, system(cmd));
}

/* A VM started in the background (vmm start), its agent ready. */
struct bg_vm {
	pid_t pid;
	char sock[128], log[128];
};

static bool bg_vm_start(struct __test_metadata *_metadata, struct bg_vm *v,
			const char *dir, const char *name,
			const char *const opts[])
{
	const char *argv[40];
	struct guest g;
	int i = 0;

	guest_paths(&g);
	snprintf(v->sock, sizeof(v->sock), "%s/%s.sock", dir, name);
	snprintf(v->log, sizeof(v->log), "%s/%s.log", dir, name);
	argv[i++] = g.vmm;
	argv[i++] = "start";
	argv[i++] = "--kernel";
	argv[i++] = g.vmlinux;
	argv[i++] = "--control-socket";
	argv[i++] = v->sock;
	/* The test initramfs unless opts names another. */
	if (strcmp(opts[0], "--initrd")) {
		argv[i++] = "--initrd";
		argv[i++] = g.initrd;
	}
	for (int j = 0; opts[j] && i < 38; j++)
		argv[i++] = opts[j];
	argv[i] = NULL;
	v->pid = spawn_logged(argv, v->log);
	ASSERT_LT(0, v->pid);
	ASSERT_TRUE(vmm_wait_ready(_metadata, &v->pid, v->sock, v->log,
				   READY_SECS));
	return true;
}

static void bg_vm_stop(struct __test_metadata *_metadata, struct bg_vm *v)
{
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct spawn_result r;

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "shutdown", v->sock), NULL, &r));
	EXPECT_EQ(0, wait_exit(v->pid, 60));
	if (_metadata->result->failed)
		vmm_log_show(_metadata, v->log);
	unlink(v->sock);
	unlink(v->log);
}

#define HOLD_PORT     8081
#define STR_HOLD_PORT "8081"
#define HOLD_SECS     "120" /* how long the guest's end stays open */

/*
 * The guest (VM v) holds a connection to TEST_HOST:HOLD_PORT open, its
 * stdin never ending (vmmctl exec in the background, its output in log,
 * its pid in *nc); the test host's end of it, accepted from lsn, open
 * and quiet.
 */
static int hold_flow(struct __test_metadata *_metadata, const struct bg_vm *v,
		     int lsn, const char *log, pid_t *nc)
{
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct pollfd pfd = { .fd = lsn, .events = POLLIN };
	int conn;

	*nc = spawn_logged(ARGS(vmmctl, "exec", v->sock, "--", "sh", "-c",
				"sleep " HOLD_SECS " | nc " TEST_HOST
				" " STR_HOLD_PORT),
			   log);
	ASSERT_LT(0, *nc);
	ASSERT_EQ(1, poll(&pfd, 1, 60000)) TH_LOG("the guest never connected");
	conn = accept4(lsn, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	pfd = (struct pollfd){ .fd = conn, .events = POLLIN };
	EXPECT_EQ(0, poll(&pfd, 1, 0)); /* open, quiet */
	return conn;
}

/* A policy file in dir. */
static void policy_file(struct __test_metadata *_metadata, char *out,
			size_t len, const char *dir, const char *name,
			const char *json)
{
	snprintf(out, len, "%s/%s", dir, name);
	ASSERT_TRUE(write_file(out, json));
}

/*
 * How long the test waits for the cut. The proxy cuts at its next wake,
 * milliseconds after the swap; the wait is long so that no verdict
 * depends on how busy the (nested) host is. A refused replacement is
 * watched for KEEP_SECS: a flow cut by mistake goes at once.
 */
#define CUT_SECS  60
#define KEEP_SECS 2

/*
 * Live replacement: a guest connection to a granted port of the test
 * host is held open; net.setPolicy (vmmctl policy) with a policy that
 * grants only another port cuts it within a second (the test host sees
 * its RST or FIN), vm.status counts the cut, and a refused policy
 * leaves the VM's in force.
 */
TEST_TIMEOUT(live_policy_replacement_cuts_a_running_flow, BOOT_TIMEOUT)
{
	char dir[64], nclog[96];
	char before[128], after[128], bad[128];
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct spawn_result r;
	struct test_host h;
	struct pollfd pfd;
	struct bg_vm v;
	int lsn, conn;
	pid_t nc;
	char c;

	test_tmp_name(dir, sizeof(dir), "kiln-net-live-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(test_host_start(_metadata, &h));
	lsn = tcp_listener(_metadata, TEST_HOST, HOLD_PORT);
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(nclog, sizeof(nclog), "%s/nc.log", dir);
	policy_file(_metadata, before, sizeof(before), dir, "before.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [8080, 8081]}]}");
	policy_file(_metadata, after, sizeof(after), dir, "after.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [8080]}]}");
	policy_file(_metadata, bad, sizeof(bad), dir, "bad.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [\"9-1\"]}]}");
	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "vm",
				ARGS("--net", "auto", "--net-policy", before)));

	conn = hold_flow(_metadata, &v, lsn, nclog, &nc);
	pfd = (struct pollfd){ .fd = conn, .events = POLLIN };

	/* Refused: the old policy stays, the flow with it. */
	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "policy", v.sock, bad), NULL, &r));
	EXPECT_EQ(125, r.status);
	EXPECT_TRUE(strstr(r.err, "policy.tcp[0].ports[0]") != NULL)
	TH_LOG("%s", r.err);
	EXPECT_EQ(0, poll(&pfd, 1, KEEP_SECS * 1000));

	/* Replaced: port 8081 is no longer granted, the flow is cut. */
	ASSERT_EQ(0,
		  spawn__run(ARGS(vmmctl, "policy", v.sock, after), NULL, &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	ASSERT_EQ(1, poll(&pfd, 1, CUT_SECS * 1000))
	TH_LOG("the flow was not cut within %d s", CUT_SECS);
	EXPECT_GE(0, read(conn, &c, 1)); /* RST or FIN, no data */

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "status", v.sock), NULL, &r));
	squeeze(r.out);
	EXPECT_TRUE(strstr(r.out, "\"tcp\":{\"allowed\":1,\"denied\":0,"
				  "\"open\":0,\"cut\":1}") != NULL)
	TH_LOG("%.2000s", r.out);
	EXPECT_TRUE(strstr(r.out, "\"tcp_proxy\":") != NULL)
	TH_LOG("%.2000s", r.out);

	kill(nc, SIGTERM); /* forwarded to the guest's command */
	wait_exit(nc, 30);
	bg_vm_stop(_metadata, &v);
	close(conn);
	close(lsn);
	test_host_stop(&h);
	unlink(nclog);
	unlink(before);
	unlink(after);
	unlink(bad);
	rmdir(dir);
}

#define CLONE_MAC "02:4b:4c:00:00:2b"

/*
 * What a VM of the baseline test sees: eth0's MAC, a granted request's
 * answer through the proxy, and the gateway's ARP answer (the tap of the
 * start's own namespace, not the snapshot's).
 */
static const char baseline_probe[] =
	"cat /sys/class/net/eth0/address; "
	"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
	"nc -w 20 " TEST_HOST " 8080 2>/dev/null | tail -n 1; "
	"arping -c 1 -w 10 -I eth0 10.0.2.2 >/dev/null && echo gateway answers";

static void baseline_vm_check(struct __test_metadata *_metadata,
			      const struct bg_vm *v, const char *result,
			      const char *mac)
{
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct spawn_result r;
	char want[160];

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "status", v->sock), NULL, &r));
	squeeze(r.out);
	snprintf(want, sizeof(want), "\"result\":\"%s\"", result);
	EXPECT_TRUE(strstr(r.out, want) != NULL) TH_LOG("%.2000s", r.out);
	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "exec", v->sock, "--", "sh", "-c",
				     baseline_probe),
				NULL, &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	snprintf(want, sizeof(want), "%s\n" TEST_REPLY "\ngateway answers\n",
		 mac);
	EXPECT_STREQ(want, r.out);
}

/*
 * A VM with a network in a baseline (Documentation/snapshots.md, "What
 * a clone changes"): the first start captures it, the second restores
 * it into a namespace and tap of its own, with its own MAC. Its eth0
 * takes that MAC (the agent's RESEED), its neighbours are the new tap's
 * (the gateway answers at once, no stale ARP entry), and a granted flow
 * goes through the new proxy: the virtio-net device came back with its
 * receive buffers and the tap's offloads.
 */
TEST_TIMEOUT(baseline_with_a_network_restores_with_its_own_mac,
	     2 * BOOT_TIMEOUT)
{
	char dir[64], cache[96], policy[128], cmd[128], *log;
	struct test_host h;
	struct bg_vm v;

	test_tmp_name(dir, sizeof(dir), "kiln-net-base-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(test_host_start(_metadata, &h));
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [8080]}]}");

	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "first",
				ARGS("--net", "auto", "--net-mac", GUEST_MAC,
				     "--net-policy", policy, "--baseline-cache",
				     cache)));
	baseline_vm_check(_metadata, &v, "captured", GUEST_MAC);
	bg_vm_stop(_metadata, &v);

	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "clone",
				ARGS("--net", "auto", "--net-mac", CLONE_MAC,
				     "--net-policy", policy, "--baseline-cache",
				     cache)));
	baseline_vm_check(_metadata, &v, "restored", CLONE_MAC);
	log = log_text(v.log);
	ASSERT_NE(NULL, log);
	EXPECT_TRUE(strstr(log, "eth0 has this VM's MAC and network") != NULL)
	TH_LOG("%.3000s", log);
	free(log);
	bg_vm_stop(_metadata, &v);

	test_host_stop(&h);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		(void)0;
}

/*
 * A policy with http grants puts this start's own interception CA in the
 * guest's trust, and its key is in this monitor only: a clone would
 * trust the capture's. So such a VM is not baselined: the start says
 * why, boots cold and leaves the cache empty. (The test initramfs has no
 * trust store, so its init then ends the VM: not what is tested here.)
 */
TEST_TIMEOUT(baseline_not_used_when_the_guest_trusts_its_own_ca, BOOT_TIMEOUT)
{
	char dir[64], cache[96], policy[128], sock[128], logp[128], cmd[160];
	struct guest g;
	char *log;
	pid_t pid;

	test_tmp_name(dir, sizeof(dir), "kiln-net-baseca-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	snprintf(sock, sizeof(sock), "%s/vm.sock", dir);
	snprintf(logp, sizeof(logp), "%s/vm.log", dir);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"http\": [{\"host\": \"api.kiln.test\", "
		    "\"ports\": [443]}]}");
	guest_paths(&g);
	pid = spawn_logged(ARGS(g.vmm, "start", "--kernel", g.vmlinux,
				"--initrd", g.initrd, "--control-socket", sock,
				"--net", "auto", "--net-policy", policy,
				"--baseline-cache", cache),
			   logp);
	ASSERT_LT(0, pid);
	EXPECT_NE(0, wait_exit(pid, 120));
	log = log_text(logp);
	ASSERT_NE(NULL, log);
	EXPECT_TRUE(strstr(log, ": not used: the guest trusts this start's "
				"own interception CA (the policy has http "
				"grants); booting cold") != NULL)
	TH_LOG("%.3000s", log);
	free(log);
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s' 2>/dev/null)\"",
		 cache);
	EXPECT_EQ(0, system(cmd)) TH_LOG("the cache holds an entry");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		(void)0;
}

/*
 * For a test on the Debian image: its descriptor in image, the test's
 * scratch directory dir made, the test host and its resolver up.
 */
/* The Debian agent image's descriptor, there to boot. */
static bool agent_image(struct __test_metadata *_metadata, char *image,
			size_t len)
{
	struct guest g;

	guest_paths(&g);
	snprintf(image, len, "%s/debian-12-agent.json", g.images);
	ASSERT_EQ(0, access(image, R_OK))
	TH_LOG("%s missing: make image", image);
	return true;
}

static bool debian_world(struct __test_metadata *_metadata, char *image,
			 size_t len, char *dir, struct test_host *h,
			 struct udp_server *d)
{
	ASSERT_TRUE(agent_image(_metadata, image, len));
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, h));
	ASSERT_TRUE(test_dns_start(_metadata, d));
	return true;
}

/*
 * The issue's own scenario on the Debian image: curl (glibc's resolver,
 * A and AAAA questions to the gateway) fetches a granted hostname's page;
 * the vmm asked only the policy's resolver, and the name's address on
 * another port, another address, and the name on an address DNS never
 * gave stay unreachable.
 */
TEST_TIMEOUT(curl_on_the_debian_image_through_trusted_dns, BOOT_TIMEOUT)
{
	char dir[64], policy[128], image[300];
	struct spawn_result r;
	struct test_host h;
	struct udp_server d;

	test_tmp_name(dir, sizeof(dir), "kiln-net-curl-XXXXXX");
	if (!is_root(_metadata))
		return;
	ASSERT_TRUE(debian_world(_metadata, image, sizeof(image), dir, &h, &d));
	policy_file(
		_metadata, policy, sizeof(policy), dir, "policy.json",
		"{\"dns\": {\"resolvers\": [\"" TEST_DNS "\"]}, "
		"\"tcp\": [{\"to\": \"granted.test\", \"ports\": [8080]}]}");
	BOOT_SPEC(
		(&(struct boot_spec){
			.initrd = "",
			.opts = ARGS("--rootfs", image, "--net", "auto",
				     "--net-policy", policy),
			.cmd = ARGS("bash", "-c",
				    "c() { curl -sS --max-time 30 \"$@\" "
				    "2>/dev/null; }; "
				    "c http://granted.test:8080/; "
				    "c http://granted.test:8081/ "
				    "|| echo other port denied $?; "
				    "c http://192.0.2.11:8080/ "
				    "|| echo other host denied $?; "
				    "c --resolve granted.test:8080:192.0.2.11 "
				    "http://granted.test:8080/ "
				    "|| echo unbound address denied $?") }),
		&r);
	udp_server_stop(&d);
	test_host_stop(&h);
	EXPECT_EQ(0, r.status);
	/*
	 * curl's 7, "Failed to connect": refused at connect() (issue 39),
	 * not accepted and reset (56). The address the name is bound to
	 * connected on its granted port: the resolver's binding was in
	 * the egress program's SYN filter before the answer reached curl.
	 */
	EXPECT_STREQ(TEST_REPLY "\nother port denied 7\nother host denied 7\n"
				"unbound address denied 7\n",
		     r.out)
	TH_LOG("stderr: %s", r.err);
	EXPECT_LE(1, __atomic_load_n(&d.got, __ATOMIC_RELAXED));
	unlink(policy);
	rmdir(dir);
}

/*
 * How many boots first_lookups_succeed_with_a_slow_upstream makes: each
 * costs about 20 s in the nested harness, so 3 by default;
 * KILN_FIRST_LOOKUP_BOOTS=20 runs the 20.
 */
#define FIRST_LOOKUP_BOOTS "3"

/* The guest's first actions, and what they print. */
#define FIRST_LOOKUPS                                          \
	"getent hosts granted.test; "                          \
	"python3 -c 'import socket; print(socket.getaddrinfo(" \
	"\"granted.test\", 8080, socket.AF_INET)[0][4][0])'; " \
	"curl -sS --max-time 30 http://granted.test:8080/"
#define FIRST_LOOKUPS_OUT \
	TEST_HOST "      granted.test\n" TEST_HOST "\n" TEST_REPLY "\n"

/*
 * The guest's first action is a lookup, and it succeeds on its first try,
 * boot after boot, with an upstream resolver slower than the vmm's
 * per-try timeout (SLOW_DNS_MS, as a recursive resolver with a cold
 * cache): `getent hosts` (AAAA, then A), Python's getaddrinfo (A), then
 * curl (A and AAAA at once) to the granted name. Before the resolver kept
 * its first try's socket open past the retry, the late answer was lost,
 * each query got SERVFAIL at 4 s and glibc gave up after its two
 * attempts: getent printed nothing, Python said "Temporary failure in
 * name resolution" (Documentation/network.md, "Slow upstreams"). No
 * command in the guest retries.
 */
TEST_TIMEOUT(first_lookups_succeed_with_a_slow_upstream, BOOT_TIMEOUT * 4)
{
	char dir[64], policy[128], image[300];
	struct spawn_result r;
	struct test_host h;
	struct udp_server d;
	int boots = atoi(env_or("KILN_FIRST_LOOKUP_BOOTS", FIRST_LOOKUP_BOOTS));

	test_tmp_name(dir, sizeof(dir), "kiln-net-first-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(agent_image(_metadata, image, sizeof(image)));
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	ASSERT_TRUE(test_host_alias(_metadata, "lo:2", TEST_DNS));
	ASSERT_TRUE(udp_server_start(_metadata, &d, TEST_DNS, DNS_PORT,
				     test_dns_serve_slow));
	policy_file(
		_metadata, policy, sizeof(policy), dir, "policy.json",
		"{\"dns\": {\"resolvers\": [\"" TEST_DNS "\"]}, "
		"\"tcp\": [{\"to\": \"granted.test\", \"ports\": [8080]}]}");
	for (int i = 0; i < boots; i++) {
		if (boot_spec(
			    _metadata,
			    &(struct boot_spec){
				    .initrd = "",
				    .opts = ARGS("--rootfs", image, "--net",
						 "auto", "--net-policy",
						 policy),
				    .cmd = ARGS("bash", "-c", FIRST_LOOKUPS) },
			    &r))
			break;
		EXPECT_EQ(0, r.status);
		EXPECT_STREQ(FIRST_LOOKUPS_OUT, r.out)
		TH_LOG("boot %d of %d: stdout: %s\nstderr: %s", i + 1, boots,
		       r.out, r.err);
		if (r.status || strcmp(r.out, FIRST_LOOKUPS_OUT))
			break; /* one failed boot says it all */
	}
	udp_server_stop(&d);
	test_host_stop(&h);
	unlink(policy);
	rmdir(dir);
}

/* UDP echo on TEST_HOST:UDP_PORT in the test host's netns. */
#define UDP_PORT 9000

static void *udp_echo_serve(void *arg)
{
	struct udp_server *u = arg;
	struct sockaddr_in from;
	char buf[512];
	socklen_t fl;
	ssize_t n;

	for (;;) {
		fl = sizeof(from);
		n = recvfrom(u->fd, buf, sizeof(buf), 0,
			     (struct sockaddr *)&from, &fl);
		if (n <= 0)
			break; /* shut down: the test is over */
		__atomic_add_fetch(&u->got, 1, __ATOMIC_RELAXED);
		sendto(u->fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

/*
 * A UDP grant: the guest's datagram reaches the test host's echo and the
 * reply comes back; another port, DNS straight to a resolver (not through
 * the gateway), and DNS through the gateway with no resolver in the
 * policy (REFUSED) get nothing, and the test host saw only the granted
 * datagram.
 */
TEST_TIMEOUT(udp_grant_gets_its_reply_and_nothing_else_leaves, BOOT_TIMEOUT)
{
	char dir[64], policy[128], initrd[128];
	struct spawn_result r;
	struct test_host h;
	struct udp_server d;
	struct udp_server u;
	struct guest g;

	test_tmp_name(dir, sizeof(dir), "kiln-net-udp-XXXXXX");
	if (!is_root(_metadata))
		return;
	guest_paths(&g);
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	net_probe_initrd(_metadata, &g, dir, initrd, sizeof(initrd));
	ASSERT_TRUE(test_host_start(_metadata, &h));
	ASSERT_TRUE(test_dns_start(_metadata, &d));
	ASSERT_TRUE(udp_server_start(_metadata, &u, TEST_HOST, UDP_PORT,
				     udp_echo_serve));
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"udp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [9000]}]}");
	BOOT_SPEC(
		(&(struct boot_spec){
			.initrd = initrd,
			.opts = ARGS("--net", "auto", "--net-policy", policy),
			.cmd = ARGS("sh", "-c",
				    "net-probe udp " TEST_HOST " 9000 ping 30; "
				    "net-probe udp " TEST_HOST " 9001 x 3; "
				    "net-probe udp " TEST_DNS " 53 x 3; "
				    "nslookup granted.test 10.0.2.2 "
				    ">/dev/null 2>&1 && echo dns answered "
				    "|| echo dns refused") }),
		&r);
	udp_server_stop(&u);
	udp_server_stop(&d);
	test_host_stop(&h);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("reply: ping\nno reply\nno reply\ndns refused\n", r.out)
	TH_LOG("stderr: %s", r.err);
	EXPECT_EQ(1, __atomic_load_n(&u.got, __ATOMIC_RELAXED));
	EXPECT_EQ(0, __atomic_load_n(&d.got, __ATOMIC_RELAXED));
	EXPECT_TRUE(strstr(r.err, "denied udp 10.0.2.15:") != NULL)
	TH_LOG("stderr: %s", r.err);
	unlink(initrd);
	unlink(policy);
	rmdir(dir);
}

/* One number of vm.status's output, after "key": (squeezed). */
static long long status_number(const char *out, const char *key)
{
	char needle[96];
	const char *at;

	snprintf(needle, sizeof(needle), "\"%s\":", key);
	at = strstr(out, needle);
	return at ? strtoll(at + strlen(needle), NULL, 10) : -1;
}

/* VmHWM of pid in KiB, -1 if unknown. */
static long peak_rss_kib(pid_t pid)
{
	char path[64], line[128];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

#define LOOP_PORT 7001 /* net-probe's LOOPBACK_PORT */

#define FLOOD_SECS "20" /* seconds */
#define GUEST_MIB  256	/* the vmm's default */
/* What the vmm may hold besides guest memory, flood or not. */
#define MONITOR_BOUND_MIB 64

/*
 * A guest writing garbage: one frame of each kind the egress program
 * must drop (IPv6, raw IP, a spoofed source, a SYN to the host's
 * loopback, a malformed header), then
 * FLOOD_SECS of random frames as fast as it can. Each kind is counted as
 * dropped under its reason, the test's listener on 127.0.0.1 sees
 * nothing, the vmm stays up with its peak memory within
 * guest memory + MONITOR_BOUND_MIB, and a granted flow still works after.
 */
TEST_TIMEOUT(garbage_frames_are_dropped_and_the_vmm_stays_up, BOOT_TIMEOUT)
{
	char dir[64], policy[128], initrd[128];
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct spawn_result r;
	struct test_host h;
	struct pollfd pfd;
	struct bg_vm v;
	struct guest g;
	long hwm;
	int loop;

	test_tmp_name(dir, sizeof(dir), "kiln-net-flood-XXXXXX");
	if (!can_boot(_metadata))
		return;
	guest_paths(&g);
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	net_probe_initrd(_metadata, &g, dir, initrd, sizeof(initrd));
	ASSERT_TRUE(test_host_start(_metadata, &h));
	loop = tcp_listener(_metadata, "127.0.0.1", LOOP_PORT);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [8080]}]}");
	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "vm",
				ARGS("--initrd", initrd, "--net", "auto",
				     "--net-policy", policy)));
	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "exec", v.sock, "--", "sh", "-c",
				     "net-probe frames; "
				     "net-probe flood " FLOOD_SECS "; "
				     "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
				     "nc -w 20 " TEST_HOST " 8080 2>/dev/null "
				     "| tail -n 1"),
				NULL, &r));
	EXPECT_EQ(0, r.status) TH_LOG("stderr: %s", r.err);
	/* ci50: the VM went away 4 s in, once; its log says how. */
	if (r.status)
		vmm_log_show(_metadata, v.log);
	EXPECT_TRUE(strstr(r.out, "sent 5 of 5 frames\n") != NULL)
	TH_LOG("%s, stderr: %s", r.out, r.err);
	EXPECT_TRUE(strstr(r.out, "flooded ") != NULL) TH_LOG("%s", r.out);
	EXPECT_TRUE(strstr(r.out, TEST_REPLY "\n") != NULL) TH_LOG("%s", r.out);

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "status", v.sock), NULL, &r));
	squeeze(r.out);
	EXPECT_LE(1, status_number(r.out, "not_ipv4")) TH_LOG("%.3000s", r.out);
	EXPECT_LE(1, status_number(r.out, "not_tcp_udp"))
	TH_LOG("%.3000s", r.out);
	EXPECT_LE(1, status_number(r.out, "spoofed")) TH_LOG("%.3000s", r.out);
	EXPECT_LE(1, status_number(r.out, "malformed"))
	TH_LOG("%.3000s", r.out);
	EXPECT_LE(1, status_number(r.out, "bad_dest")) TH_LOG("%.3000s", r.out);
	/* The SYN to 127.0.0.1 reached nothing of the host's. */
	pfd = (struct pollfd){ .fd = loop, .events = POLLIN };
	EXPECT_EQ(0, poll(&pfd, 1, 0));
	EXPECT_TRUE(strstr(r.out, "\"proxy\":\"running\"") != NULL)
	TH_LOG("%.3000s", r.out);
	hwm = peak_rss_kib(v.pid);
	ASSERT_LT(0, hwm);
	TH_LOG("vmm peak RSS %ld KiB after the flood", hwm);
	EXPECT_GT((GUEST_MIB + MONITOR_BOUND_MIB) * 1024L, hwm);
	bg_vm_stop(_metadata, &v);
	close(loop);
	test_host_stop(&h);
	unlink(initrd);
	unlink(policy);
	rmdir(dir);
}

#define PEER_PORT "7000"

/*
 * Isolation, granted or not: VM A listens on its own address; VM B, whose
 * policy grants TCP to every private address (a policy cannot grant
 * loopback), cannot reach A, nor a listener on the host's loopback, nor
 * the tap's host side (the egress program drops all but DNS to it); the
 * same policy does reach the test host (so the grants themselves work).
 */
TEST_TIMEOUT(two_vms_and_the_host_stay_apart, BOOT_TIMEOUT * 2)
{
	char dir[64], policy[128], nclog[128];
	char out[256] = "";
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct spawn_result r;
	struct test_host h;
	struct pollfd pfd;
	struct bg_vm a;
	size_t n;
	int loop;
	pid_t nc;
	FILE *f;

	test_tmp_name(dir, sizeof(dir), "kiln-net-two-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	loop = tcp_listener(_metadata, "127.0.0.1", LOOP_PORT);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"tcp\": [{\"to\": \"private\"}, "
		    "{\"to\": \"" TEST_HOST "\", \"ports\": [8080]}]}");

	ASSERT_TRUE(bg_vm_start(_metadata, &a, dir, "a",
				ARGS("--net", "auto", "--net-address",
				     "10.0.3.15/24", "--net-gateway",
				     "10.0.3.2", "--net-policy", policy)));
	snprintf(nclog, sizeof(nclog), "%s/nc.log", dir);
	nc = spawn_logged(ARGS(vmmctl, "exec", a.sock, "--", "sh", "-c",
			       "nc -l -p " PEER_PORT " && echo a was reached"),
			  nclog);
	ASSERT_LT(0, nc);

	BOOT(NULL, ARGS("--net", "auto", "--net-policy", policy),
	     ARGS("sh", "-c",
		  "get() { printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
		  "nc -w 20 $1 $2 2>/dev/null | tail -n 1; }; "
		  "get " TEST_HOST " 8080; "
		  "echo hi | nc -w 10 10.0.3.15 " PEER_PORT " 2>/dev/null "
		  "| grep -q . && echo a reached || echo a unreachable; "
		  "echo hi | nc -w 10 10.0.2.2 7001 2>/dev/null | grep -q . "
		  "&& echo gateway reached || echo gateway unreachable"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(TEST_REPLY "\na unreachable\ngateway unreachable\n", r.out)
	TH_LOG("stderr: %s", r.err);
	/* Nothing reached the host's loopback, nor A. */
	pfd = (struct pollfd){ .fd = loop, .events = POLLIN };
	EXPECT_EQ(0, poll(&pfd, 1, 0));
	kill(nc, SIGTERM);
	wait_exit(nc, 30);
	f = fopen(nclog, "r");
	if (f) {
		n = fread(out, 1, sizeof(out) - 1, f);
		out[n] = '\0';
		fclose(f);
	}
	EXPECT_EQ(NULL, strstr(out, "a was reached")) TH_LOG("%s", out);
	bg_vm_stop(_metadata, &a);
	close(loop);
	test_host_stop(&h);
	unlink(nclog);
	unlink(policy);
	rmdir(dir);
}

/* How long the kernel relay may take to pair a flow just accepted. */
#define PAIR_SECS 30

/*
 * Whether vm.status of VM v counts one flow in the kernel relay within
 * PAIR_SECS (the proxy pairs the two sockets just after upstream's
 * connect returned, which is when the test host accepted).
 */
static bool relayed_by_the_kernel(struct __test_metadata *_metadata,
				  const struct bg_vm *v)
{
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	struct spawn_result r;

	for (int i = 0; i < PAIR_SECS * 10; i++) {
		if (spawn__run(ARGS(vmmctl, "status", v->sock), NULL, &r) ||
		    r.status)
			return false;
		squeeze(r.out);
		if (strstr(r.out, "\"relay\":{\"mode\":\"kernel\","
				  "\"kernel\":1,\"splice\":0,\"batched\":0}"))
			return true;
		usleep(100 * 1000);
	}
	TH_LOG("not in the kernel relay: %.2000s", r.out);
	return false;
}

/*
 * The vmm killed outright with a flow open in the kernel relay
 * (--net-relay kernel, checked in vm.status): the test host's end sees
 * the flow end (EOF or a reset) within CUT_SECS, and a byte it then
 * sends is answered by a reset: the vmm's socket is gone, not merely
 * shut, so no map or work queue keeps relaying for it. The guest and
 * its end of the flow (a socket of the VM's namespace) die with the
 * process; what is left to see is upstream's. The VM's namespace, tap
 * and programs go with the process.
 */
TEST_TIMEOUT(a_killed_vmm_leaves_no_flow_open, BOOT_TIMEOUT)
{
	char dir[64], policy[128], nclog[128];
	struct test_host h;
	struct pollfd pfd;
	struct bg_vm v;
	socklen_t errlen = sizeof(int);
	int lsn, conn, err = 0;
	pid_t nc;
	char c;

	test_tmp_name(dir, sizeof(dir), "kiln-net-kill-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	lsn = tcp_listener(_metadata, TEST_HOST, HOLD_PORT);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [8081]}]}");
	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "vm",
				ARGS("--net", "auto", "--net-policy", policy,
				     "--net-relay", "kernel")));
	snprintf(nclog, sizeof(nclog), "%s/nc.log", dir);
	conn = hold_flow(_metadata, &v, lsn, nclog, &nc);
	ASSERT_TRUE(relayed_by_the_kernel(_metadata, &v));
	pfd = (struct pollfd){ .fd = conn, .events = POLLIN };

	ASSERT_EQ(0, kill(v.pid, SIGKILL));
	EXPECT_EQ(128 + SIGKILL, wait_exit(v.pid, 60));
	ASSERT_EQ(1, poll(&pfd, 1, CUT_SECS * 1000))
	TH_LOG("the flow outlived the vmm by %d s", CUT_SECS);
	EXPECT_GE(0, read(conn, &c, 1));
	/*
	 * Sent to a socket that no longer exists: its reset comes back.
	 * After a FIN, reads say EOF and poll says readable from the start:
	 * the reset shows as POLLERR and SO_ERROR (EPIPE: TCP's name for a
	 * reset in CLOSE_WAIT), or the send fails.
	 */
	c = 'x';
	if (send(conn, &c, 1, MSG_NOSIGNAL) < 0) {
		err = errno;
	} else {
		for (int i = 0; i < CUT_SECS * 10; i++) {
			pfd = (struct pollfd){ .fd = conn, .events = POLLIN };
			if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR))
				break;
			usleep(100 * 1000);
		}
		ASSERT_EQ(0, getsockopt(conn, SOL_SOCKET, SO_ERROR, &err,
					&errlen));
	}
	EXPECT_TRUE(err == ECONNRESET || err == EPIPE)
	TH_LOG("a byte sent after the vmm died: %s", strerror(err));
	kill(nc, SIGKILL);
	wait_exit(nc, 30);
	close(conn);
	close(lsn);
	test_host_stop(&h);
	unlink(v.sock);
	unlink(v.log);
	unlink(nclog);
	unlink(policy);
	rmdir(dir);
}

/*
 * The test's decision service on a Unix socket: grants TCP to
 * TEST_HOST:8080, denies everything else, never answers for port 8082
 * (the deadline denies it); what it was asked is kept for the test. An
 * HTTP request's question (issue 12) is answered grant-http, setting
 * authorization to HOOK_API_TOKEN, a secret only the hook holds.
 */
#define HOOK_SILENT_PORT ":8082\""
#define HOOK_API_TOKEN	 "Bearer kiln-h00k-s3cr3t-2b9e"

struct test_hook {
	int lsn;
	pthread_t thread;
	char path[108];
	char asked[4096];
	size_t asked_len;
	pthread_mutex_t lock;
};

static void *test_hook_serve(void *arg)
{
	struct test_hook *k = arg;
	char line[8192], reply[256];
	size_t got = 0;
	ssize_t n;
	int fd;

	fd = accept4(k->lsn, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	while ((n = read(fd, line + got, sizeof(line) - 1 - got)) > 0) {
		char *nl;

		got += (size_t)n;
		line[got] = '\0';
		while ((nl = strchr(line, '\n'))) {
			long id = -1;
			char *at = strstr(line, "\"id\": ");
			bool grant;

			*nl = '\0';
			if (at)
				id = strtol(at + 6, NULL, 10);
			pthread_mutex_lock(&k->lock);
			k->asked_len += (size_t)snprintf(
				k->asked + k->asked_len,
				sizeof(k->asked) - k->asked_len, "%s\n", line);
			if (k->asked_len >= sizeof(k->asked))
				k->asked_len = sizeof(k->asked) - 1;
			pthread_mutex_unlock(&k->lock);
			grant = strstr(line,
				       "\"dst\": \"" TEST_HOST ":8080\"") &&
				strstr(line, "\"proto\": \"tcp\"");
			if (strstr(line, "\"type\": \"http\"")) {
				n = snprintf(reply, sizeof(reply),
					     "{\"id\": %ld, \"verdict\": "
					     "\"grant-http\", \"set\": "
					     "{\"authorization\": "
					     "\"" HOOK_API_TOKEN "\"}}\n",
					     id);
				if (write(fd, reply, (size_t)n) != n)
					break;
			} else if (!strstr(line, HOOK_SILENT_PORT)) {
				n = snprintf(
					reply, sizeof(reply),
					"{\"id\": %ld, \"verdict\": \"%s\", "
					"\"reason\": \"test hook\"}\n",
					id, grant ? "grant" : "deny");
				if (write(fd, reply, (size_t)n) != n)
					break;
			}
			got -= (size_t)(nl + 1 - line);
			memmove(line, nl + 1, got + 1);
		}
	}
	close(fd);
	return NULL;
}

static bool test_hook_start(struct __test_metadata *_metadata,
			    struct test_hook *k, const char *dir)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	memset(k->asked, 0, sizeof(k->asked));
	k->asked_len = 0;
	pthread_mutex_init(&k->lock, NULL);
	snprintf(k->path, sizeof(k->path), "%s/hook.sock", dir);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", k->path);
	k->lsn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, k->lsn);
	ASSERT_EQ(0, bind(k->lsn, (struct sockaddr *)&sun, sizeof(sun)));
	ASSERT_EQ(0, listen(k->lsn, 4));
	ASSERT_EQ(0, pthread_create(&k->thread, NULL, test_hook_serve, k));
	return true;
}

static void test_hook_stop(struct test_hook *k)
{
	shutdown(k->lsn, SHUT_RDWR);
	pthread_cancel(k->thread);
	pthread_join(k->thread, NULL);
	close(k->lsn);
	unlink(k->path);
}

/*
 * The policy hook from a booted guest: with no rule for the test host,
 * the vmm asks the test's decision service about each new flow; its
 * grant lets the guest's HTTP request through, its deny and its silence
 * past the deadline leave the guest unconnected, and it was told the
 * flow's destination, protocol and address class.
 */
TEST_TIMEOUT(hook_grants_denies_and_times_out, BOOT_TIMEOUT)
{
	char dir[64], policy[128], doc[400];
	struct spawn_result r;
	struct test_host h;
	struct test_hook k;

	test_tmp_name(dir, sizeof(dir), "kiln-net-hook-XXXXXX");
	if (!is_root(_metadata))
		return;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	ASSERT_TRUE(test_hook_start(_metadata, &k, dir));
	/* A deadline long enough for the slowest harness, still finite. */
	snprintf(doc, sizeof(doc),
		 "{\"hook\": {\"socket\": \"%s\", \"timeoutMs\": 5000}}",
		 k.path);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json", doc);
	BOOT(NULL, ARGS("--net", "auto", "--net-policy", policy),
	     ARGS("sh", "-c",
		  "get() { printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
		  "nc -w 30 $1 $2 2>/dev/null | tail -n 1; }; "
		  "get " TEST_HOST " 8080; "
		  "get " TEST_HOST " 8081 | grep -q . "
		  "&& echo denied port leaves || echo denied port stays; "
		  "get " TEST_HOST " 8082 | grep -q . "
		  "&& echo silent port leaves || echo silent port stays"),
	     NULL, &r);
	test_hook_stop(&k);
	test_host_stop(&h);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(TEST_REPLY "\ndenied port stays\nsilent port stays\n",
		     r.out)
	TH_LOG("stderr: %s", r.err);
	EXPECT_TRUE(strstr(k.asked,
			   "\"proto\": \"tcp\", \"src\": \"10.0.2.15:") != NULL)
	TH_LOG("asked: %s", k.asked);
	EXPECT_TRUE(strstr(k.asked, "\"dst\": \"" TEST_HOST ":8081\", "
				    "\"class\": \"documentation\"") != NULL)
	TH_LOG("asked: %s", k.asked);
	EXPECT_TRUE(strstr(r.err, ":8081: hook deny") != NULL)
	TH_LOG("stderr: %s", r.err);
	EXPECT_TRUE(strstr(r.err, ":8082: hook timeout") != NULL)
	TH_LOG("stderr: %s", r.err);
	unlink(policy);
	rmdir(dir);
}

/*
 * The seed's scenario (issue 12): the host's HTTPS upstream for
 * api.kiln.test, with a certificate from a test CA of the test's own
 * (openssl), run by selftests/helpers/https-upstream.py in the test's
 * netns; the VM's policy grants that hostname over HTTP(S) with an
 * authorization header from the vmm's environment.
 */
#define API_HOST  "api.kiln.test"
#define API_TOKEN "Bearer kiln-s3cr3t-token-7f1c"
#define TOKEN_ENV "KILN_TEST_API_TOKEN"

/*
 * The HTTPS upstream that speaks HTTP/2 alone (h2-upstream.c), built
 * next to the vmm, into path.
 */
static void h2_upstream_path(struct __test_metadata *_metadata, char *path,
			     size_t len)
{
	const char *slash;
	struct guest g;

	guest_paths(&g);
	slash = strrchr(g.vmm, '/');
	snprintf(path, len, "%.*s/selftests/helpers/h2-upstream",
		 slash ? (int)(slash - g.vmm) : 1, slash ? g.vmm : ".");
	ASSERT_EQ(0, access(path, X_OK))
	TH_LOG("%s missing: make selftests", path);
}

/*
 * The test CA and upstream's certificate in dir, then the upstream on
 * TEST_HOST:443, its log dir/upstream.log: https-upstream.py (HTTP/1.1
 * alone), or with h2, h2-upstream (HTTP/2 alone).
 */
static bool https_upstream_start(struct __test_metadata *_metadata,
				 const char *dir, bool h2, pid_t *pid)
{
	char cmd[2048], crt[128], key[128], log[128], out[128], h2up[300];
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(443) };
	int fd, i;

	snprintf(
		cmd, sizeof(cmd),
		"set -e; cd '%s'; "
		"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		"-nodes -keyout ca.key -out ca.crt -subj /CN=kiln-test-ca "
		"-days 2 -addext basicConstraints=critical,CA:TRUE "
		"-addext keyUsage=critical,keyCertSign 2>/dev/null; "
		"openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		"-nodes -keyout srv.key -out srv.csr -subj /CN=" API_HOST
		" 2>/dev/null; "
		"printf 'subjectAltName=DNS:" API_HOST
		"\\nextendedKeyUsage=serverAuth\\n' > srv.ext; "
		"openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key "
		"-CAcreateserial -out srv.crt -days 2 -extfile srv.ext "
		"2>/dev/null",
		dir);
	ASSERT_EQ(0, system(cmd)) TH_LOG("openssl: the test CA");
	snprintf(crt, sizeof(crt), "%s/srv.crt", dir);
	snprintf(key, sizeof(key), "%s/srv.key", dir);
	snprintf(log, sizeof(log), "%s/upstream.log", dir);
	snprintf(out, sizeof(out), "%s/upstream.out", dir);
	if (h2) {
		h2_upstream_path(_metadata, h2up, sizeof(h2up));
		*pid = spawn_logged(ARGS(h2up, TEST_HOST, "443", crt, key, log),
				    out);
	} else {
		*pid = spawn_logged(ARGS("/usr/bin/python3",
					 "selftests/helpers/https-upstream.py",
					 TEST_HOST, "443", crt, key, log),
				    out);
	}
	ASSERT_LT(0, *pid);
	inet_pton(AF_INET, TEST_HOST, &sin.sin_addr);
	for (i = 0; i < READY_SECS * 10; i++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		ASSERT_LE(0, fd);
		if (!connect(fd, (struct sockaddr *)&sin, sizeof(sin))) {
			close(fd);
			return true;
		}
		close(fd);
		ASSERT_NE(*pid, waitpid(*pid, NULL, WNOHANG))
		TH_LOG("the HTTPS upstream died (%s)", out);
		usleep(100000);
	}
	ASSERT_TRUE(false) TH_LOG("the HTTPS upstream never listened");
	return false;
}

/* path's text, at most len - 1 bytes. */
static void read_text(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

/*
 * What the HTTPS tests share: the Debian world (test host, test DNS), an
 * HTTPS upstream with its test CA (HTTP/1.1, or HTTP/2 alone), the
 * policy, and a boot of the Debian image with them.
 */
struct https_world {
	char image[300], ca[128], log[128], policy[128];
	struct test_host h;
	struct udp_server d;
	pid_t up;
};

/* The guest's leak probe: its environments and files, then "done". */
#define LEAK_PROBE(token)                                         \
	"env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; " \
	"grep -rl " token " /etc /tmp /run /root 2>/dev/null; echo done"

static bool https_world_start(struct __test_metadata *_metadata,
			      struct https_world *w, char *dir, bool h2)
{
	ASSERT_TRUE(debian_world(_metadata, w->image, sizeof(w->image), dir,
				 &w->h, &w->d));
	ASSERT_TRUE(https_upstream_start(_metadata, dir, h2, &w->up));
	snprintf(w->ca, sizeof(w->ca), "%s/ca.crt", dir);
	snprintf(w->log, sizeof(w->log), "%s/upstream.log", dir);
	return true;
}

/* Boots the image with the network, w's policy and CA, bash -c script. */
static int https_world_boot(struct __test_metadata *_metadata,
			    struct https_world *w, const char *script,
			    struct spawn_result *r)
{
	return boot_spec(_metadata,
			 &(struct boot_spec){
				 .initrd = "",
				 .opts = ARGS("--rootfs", w->image, "--net",
					      "auto", "--net-policy", w->policy,
					      "--net-ca-bundle", w->ca),
				 .cmd = ARGS("bash", "-c", script) },
			 r);
}

static void https_world_stop(struct https_world *w)
{
	kill(w->up, SIGTERM);
	wait_exit(w->up, 30);
	udp_server_stop(&w->d);
	test_host_stop(&w->h);
}

/* The guest said "done" and neither it nor the vmm ever said token. */
static void expect_no_trace(struct __test_metadata *_metadata,
			    const struct spawn_result *r, const char *token)
{
	/* Read whole: no NUL ended it early. */
	EXPECT_EQ(strlen(r->out), r->out_len);
	EXPECT_TRUE(strstr(r->out, "\ndone\n") != NULL)
	TH_LOG("stdout: %.3000s", r->out);
	EXPECT_EQ(NULL, strstr(r->out, token));
	EXPECT_EQ(NULL, strstr(r->err, token));
}

static void remove_tree(struct __test_metadata *_metadata, const char *dir)
{
	char cmd[160];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		TH_LOG("cannot remove %s", dir);
}

#define API_POLICY                                                   \
	"{\"dns\": {\"resolvers\": [\"" TEST_DNS "\"]}, "            \
	"\"http\": [{\"host\": \"" API_HOST "\", \"ports\": [443], " \
	"\"headers\": {\"authorization\": "                          \
	"{\"from\": \"env:" TOKEN_ENV "\"}}}]}"

/*
 * The seed's scenario end to end on the Debian image: the guest's
 * ordinary `curl https://api.kiln.test/user` (and Python's urllib)
 * resolves through the vmm's trusted DNS, trusts the VM's CA (installed
 * by the init), and gets the upstream's answer; the upstream saw the
 * host's authorization header in place of the guest's; the guest saw no
 * trace of it (its output, environment, files), nor did the vmm's log.
 * A spoofed Host gets 421, an IP-literal HTTPS destination and an
 * ungranted name get nothing. No private key reached the guest: its
 * trust store and what init was given hold the CA's certificate only.
 */
TEST_TIMEOUT(https_credentials_injected_on_the_host_only, BOOT_TIMEOUT)
{
	char dir[64], seen[8192];
	struct spawn_result r;
	struct https_world w;
	int ret;

	test_tmp_name(dir, sizeof(dir), "kiln-net-https-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(https_world_start(_metadata, &w, dir, false));
	policy_file(_metadata, w.policy, sizeof(w.policy), dir, "policy.json",
		    API_POLICY);
	ASSERT_EQ(0, setenv(TOKEN_ENV, API_TOKEN, 1));
	ret = https_world_boot(
		_metadata, &w,
		"c() { curl -sS --max-time 60 \"$@\"; }; "
		"c -H 'Authorization: guest-own' "
		"https://" API_HOST "/user; "
		"python3 -c 'import urllib.request as u; "
		"print(u.urlopen(\"https://" API_HOST
		"/user\", timeout=60).read().decode(), "
		"end=\"\")'; "
		"c -o /dev/null -w '%{http_code}\\n' "
		"-H 'Host: evil.kiln.test' "
		"https://" API_HOST "/user; "
		"c https://192.0.2.10/user 2>/dev/null "
		"|| echo ip literal refused; "
		"c https://other.kiln.test/user 2>/dev/null "
		"|| echo ungranted name refused; "
		"grep -rlI 'PRIVATE KEY' /etc/ssl/certs "
		"/usr/local/share/ca-certificates /kiln /run "
		"/tmp /root 2>/dev/null; echo keys-checked; " LEAK_PROBE(
			"kiln-s3cr3t"),
		&r);
	unsetenv(TOKEN_ENV);
	https_world_stop(&w);
	if (ret)
		return;
	EXPECT_EQ(0, r.status);
	EXPECT_TRUE(strstr(r.out, "{\"login\": \"kiln-test-user\"}\n"
				  "{\"login\": \"kiln-test-user\"}\n421\n"
				  "ip literal refused\n"
				  "ungranted name refused\n"
				  "keys-checked\n") != NULL)
	TH_LOG("stdout: %.3000s\nstderr: %.3000s", r.out, r.err);
	/* No trace of the token anywhere the guest could read or say. */
	expect_no_trace(_metadata, &r, "kiln-s3cr3t");
	/* Upstream got the host's header, never the guest's. */
	read_text(w.log, seen, sizeof(seen));
	EXPECT_TRUE(strstr(seen, "GET /user HTTP/1.1\n") != NULL)
	TH_LOG("upstream saw: %s", seen);
	EXPECT_TRUE(strstr(seen, "authorization: " API_TOKEN "\n") != NULL)
	TH_LOG("upstream saw: %s", seen);
	EXPECT_EQ(NULL, strstr(seen, "guest-own"))
	TH_LOG("upstream saw: %s", seen);
	EXPECT_TRUE(strstr(seen, "host: " API_HOST "\n") != NULL)
	TH_LOG("upstream saw: %s", seen);
	/* The refused Host never reached it: two requests, both granted. */
	EXPECT_EQ(NULL, strstr(seen, "evil.kiln.test"));
	EXPECT_TRUE(strstr(r.err, "refused an http request of tcp ") != NULL)
	TH_LOG("stderr: %s", r.err);
	remove_tree(_metadata, dir);
}

/*
 * Issue 12, the hook's credentials: the grant's authorization comes
 * "from": "hook", asked for every request; the hook answers grant-http
 * with the header. The guest's curl and urllib get upstream's answer;
 * upstream saw the hook's header and never the guest's; the hook was
 * asked with the request (method, URL) and never the guest's own
 * credentials; the guest saw no trace of the hook's token.
 */
TEST_TIMEOUT(https_credentials_from_the_hook, BOOT_TIMEOUT)
{
	char dir[64], seen[8192], doc[512];
	struct spawn_result r;
	struct https_world w;
	struct test_hook k;
	int ret;

	test_tmp_name(dir, sizeof(dir), "kiln-net-hookhttp-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(https_world_start(_metadata, &w, dir, false));
	ASSERT_TRUE(test_hook_start(_metadata, &k, dir));
	snprintf(doc, sizeof(doc),
		 "{\"dns\": {\"resolvers\": [\"" TEST_DNS "\"]}, "
		 "\"http\": [{\"host\": \"" API_HOST "\", \"ports\": [443], "
		 "\"ask\": \"request\", \"headers\": {\"authorization\": "
		 "{\"from\": \"hook\"}}}], "
		 "\"hook\": {\"socket\": \"%s\", \"timeoutMs\": 5000}}",
		 k.path);
	policy_file(_metadata, w.policy, sizeof(w.policy), dir, "policy.json",
		    doc);
	ret = https_world_boot(_metadata, &w,
			       "c() { curl -sS --max-time 60 \"$@\"; }; "
			       "c -H 'Authorization: guest-own' "
			       "https://" API_HOST "/user; "
			       "python3 -c 'import urllib.request as u; "
			       "print(u.urlopen(\"https://" API_HOST
			       "/user\", timeout=60).read().decode(), "
			       "end=\"\")'; " LEAK_PROBE("kiln-h00k"),
			       &r);
	test_hook_stop(&k);
	https_world_stop(&w);
	if (ret)
		return;
	EXPECT_EQ(0, r.status);
	EXPECT_TRUE(strstr(r.out, "{\"login\": \"kiln-test-user\"}\n"
				  "{\"login\": \"kiln-test-user\"}\n") != NULL)
	TH_LOG("stdout: %.3000s\nstderr: %.3000s", r.out, r.err);
	/* No trace of the hook's token anywhere the guest could read. */
	expect_no_trace(_metadata, &r, "kiln-h00k");
	/* Upstream got the hook's header on both requests, not the guest's. */
	read_text(w.log, seen, sizeof(seen));
	EXPECT_TRUE(strstr(seen, "authorization: " HOOK_API_TOKEN "\n") != NULL)
	TH_LOG("upstream saw: %s", seen);
	EXPECT_EQ(NULL, strstr(seen, "guest-own"))
	TH_LOG("upstream saw: %s", seen);
	/* The hook was asked per request, and never saw the guest's own. */
	EXPECT_TRUE(strstr(k.asked, "\"url\": \"https://" API_HOST "/user\"") !=
		    NULL)
	TH_LOG("the hook was asked: %s", k.asked);
	EXPECT_TRUE(strstr(k.asked, "\"method\": \"GET\"") != NULL);
	EXPECT_EQ(NULL, strstr(k.asked, "guest-own"));
	remove_tree(_metadata, dir);
}

/*
 * The same scenario toward an upstream that speaks HTTP/2 alone
 * (h2-upstream: ALPN "h2" only): the guest's `curl --http2` is offered
 * h2 (upstream chose it) and goes through net/h2.c; its answer comes
 * back over h2 (curl says 2) and upstream saw an h2 request with the
 * host's authorization in place of the guest's. `curl --http1.1` on the
 * same grant gets the vmm's 502 `upstream tls failed`: its first
 * upstream connection (on h2) is dropped unused, the second offers
 * http/1.1 alone, which that upstream refuses (no_application_protocol);
 * so upstream saw one request only. The guest saw no trace of the token.
 */
TEST_TIMEOUT(https_h2_credentials_injected_on_the_host_only, BOOT_TIMEOUT)
{
	char dir[64], seen[8192];
	struct spawn_result r;
	struct https_world w;
	const char *p;
	int requests = 0, ret;

	test_tmp_name(dir, sizeof(dir), "kiln-net-h2-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(https_world_start(_metadata, &w, dir, true));
	policy_file(_metadata, w.policy, sizeof(w.policy), dir, "policy.json",
		    API_POLICY);
	ASSERT_EQ(0, setenv(TOKEN_ENV, API_TOKEN, 1));
	ret = https_world_boot(_metadata, &w,
			       "c() { curl -sS --max-time 60 \"$@\"; }; "
			       "c --http2 -H 'Authorization: guest-own' "
			       "-w ' %{http_version}\\n' "
			       "https://" API_HOST "/user; "
			       "c --http1.1 "
			       "-w '%{http_code} %{http_version}\\n' "
			       "https://" API_HOST
			       "/user; " LEAK_PROBE("kiln-s3cr3t"),
			       &r);
	unsetenv(TOKEN_ENV);
	https_world_stop(&w);
	if (ret)
		return;
	EXPECT_EQ(0, r.status);
	/* h2 end to end; then http/1.1 toward h2 alone: the vmm's 502. */
	EXPECT_TRUE(strstr(r.out, "{\"login\": \"kiln-test-user\"}\n 2\n"
				  "upstream tls failed\n502 1.1\n") != NULL)
	TH_LOG("stdout: %.3000s\nstderr: %.3000s", r.out, r.err);
	/* No trace of the token anywhere the guest could read or say. */
	expect_no_trace(_metadata, &r, "kiln-s3cr3t");
	/* Upstream got one request, on h2, the host's header in it. */
	read_text(w.log, seen, sizeof(seen));
	for (p = seen; (p = strstr(p, "h2 GET /user\n")); p++)
		requests++;
	EXPECT_EQ(1, requests) TH_LOG("upstream saw: %s", seen);
	EXPECT_TRUE(strstr(seen, "authorization: " API_TOKEN "\n") != NULL)
	TH_LOG("upstream saw: %s", seen);
	EXPECT_EQ(NULL, strstr(seen, "guest-own"))
	TH_LOG("upstream saw: %s", seen);
	EXPECT_TRUE(strstr(seen, ":authority: " API_HOST) != NULL)
	TH_LOG("upstream saw: %s", seen);
	/* The http/1.1 guest's second upstream connection was refused. */
	EXPECT_TRUE(strstr(r.err, "upstream failed for tcp ") != NULL)
	TH_LOG("stderr: %.3000s", r.err);
	remove_tree(_metadata, dir);
}

#define RELAY_PORT     8083
#define STR_RELAY_PORT "8083"
#define RELAY_BYTES    (1 << 20)

/*
 * A granted flow relayed by the kernel (--net-relay MODE, kernel or
 * split: the vmm does not start without its program; network.md, "The
 * kernel relay"): the guest's request and its FIN reach the test host,
 * vm.status counts the open flow as the kernel's, and a MiB back (by
 * the kernel, or split's pipe) and upstream's FIN reach the guest, every
 * byte counted. The guest's FIN comes 2 s after its line: a flow
 * half-closed before upstream answered would go to splice (the kernel's
 * map takes established sockets only).
 */
static void relayed_flow(struct __test_metadata *_metadata, const char *mode)
{
	char dir[64], policy[128], nclog[128], seen[256], buf[8] = "";
	char open_one[96], open_none[96];
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	static char mib[RELAY_BYTES];
	struct spawn_result r;
	struct test_host h;
	struct pollfd pfd;
	struct bg_vm v;
	int lsn, conn;
	size_t got = 0;
	ssize_t n;
	pid_t nc;

	snprintf(
		open_one, sizeof(open_one),
		"\"relay\":{\"mode\":\"%s\",\"kernel\":1,\"splice\":0,\"batched\":0}",
		mode);
	snprintf(
		open_none, sizeof(open_none),
		"\"relay\":{\"mode\":\"%s\",\"kernel\":0,\"splice\":0,\"batched\":0}",
		mode);
	test_tmp_name(dir, sizeof(dir), "kiln-net-relay-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	lsn = tcp_listener(_metadata, TEST_HOST, RELAY_PORT);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [" STR_RELAY_PORT "]}]}");
	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "vm",
				ARGS("--net", "auto", "--net-policy", policy,
				     "--net-relay", mode)));
	snprintf(nclog, sizeof(nclog), "%s/nc.log", dir);
	nc = spawn_logged(
		ARGS(vmmctl, "exec", v.sock, "--", "sh", "-c",
		     "(printf 'ping\\n'; sleep 2) | nc -w 60 " TEST_HOST
		     " " STR_RELAY_PORT " | wc -c"),
		nclog);
	ASSERT_LT(0, nc);
	pfd = (struct pollfd){ .fd = lsn, .events = POLLIN };
	ASSERT_EQ(1, poll(&pfd, 1, 60000)) TH_LOG("the guest never connected");
	conn = accept4(lsn, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	/* The guest's line, then its FIN (nc's stdin ended), in the kernel. */
	pfd = (struct pollfd){ .fd = conn, .events = POLLIN };
	while (got < sizeof(buf) && poll(&pfd, 1, 30000) == 1) {
		n = read(conn, buf + got, sizeof(buf) - got);
		if (n <= 0)
			break;
		got += n;
	}
	EXPECT_EQ(5U, got);
	EXPECT_EQ(0, memcmp(buf, "ping\n", 5));

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "status", v.sock), NULL, &r));
	squeeze(r.out);
	EXPECT_TRUE(strstr(r.out, open_one) != NULL)
	TH_LOG("%.2000s", r.out);

	memset(mib, 'k', sizeof(mib));
	EXPECT_EQ((ssize_t)sizeof(mib), write(conn, mib, sizeof(mib)));
	close(conn);
	EXPECT_EQ(0, wait_exit(nc, 120));
	read_text(nclog, seen, sizeof(seen));
	EXPECT_TRUE(strstr(seen, "1048576") != NULL) TH_LOG("guest: %s", seen);

	ASSERT_EQ(0, spawn__run(ARGS(vmmctl, "status", v.sock), NULL, &r));
	squeeze(r.out);
	EXPECT_TRUE(strstr(r.out, open_none) != NULL)
	TH_LOG("%.2000s", r.out);
	EXPECT_EQ(5, status_number(r.out, "bytesOut")) TH_LOG("%.2000s", r.out);
	EXPECT_EQ(RELAY_BYTES, status_number(r.out, "bytesIn"));

	bg_vm_stop(_metadata, &v);
	close(lsn);
	test_host_stop(&h);
	unlink(nclog);
	unlink(policy);
	rmdir(dir);
}

TEST_TIMEOUT(granted_flow_relayed_by_the_kernel, BOOT_TIMEOUT)
{
	relayed_flow(_metadata, "kernel");
}

/* The same split: the guest's bytes by the kernel, the MiB back by splice. */
TEST_TIMEOUT(granted_flow_relayed_split, BOOT_TIMEOUT)
{
	relayed_flow(_metadata, "split");
}

#define BATCH_PORT	8084
#define STR_BATCH_PORT	"8084"
#define BATCH_BYTES	(4 << 20)
#define STR_BATCH_BYTES "4194304"

/* Waits up to secs for text in the file at path. */
static bool file_says(const char *path, const char *text, int secs)
{
	char buf[4096];

	for (int i = 0; i < secs * 10; i++) {
		read_text(path, buf, sizeof(buf));
		if (strstr(buf, text))
			return true;
		usleep(100 * 1000);
	}
	return false;
}

/* The SIGUSR2 report's count of flows whose guest began batched reads. */
static long long batches_reported(const char *log)
{
	static char buf[256 << 10];
	const char *at;
	long long n = -1;

	read_text(log, buf, sizeof(buf));
	for (at = strstr(buf, "(directions batched "); at;
	     at = strstr(at + 1, "(directions batched "))
		sscanf(at, "(directions batched %*u, %lld times)", &n);
	return n;
}

/*
 * The guest's side: 4 MiB and a line at once, then all the test host
 * sends back (4 MiB and a line) read before it answers "ack" and closes.
 */
static const char batch_guest_py[] =
	"import socket\n"
	"s = socket.create_connection(('" TEST_HOST "', " STR_BATCH_PORT "))\n"
	"s.sendall(bytes(" STR_BATCH_BYTES ") + b'end\\n')\n"
	"n, last = 0, b''\n"
	"while n < " STR_BATCH_BYTES " + 5:\n"
	"    d = s.recv(1 << 20)\n"
	"    if not d:\n"
	"        break\n"
	"    n, last = n + len(d), (last + d)[-5:]\n"
	"print(n, last)\n"
	"s.sendall(b'ack\\n')\n"
	"s.close()\n";

/*
 * The default splice relay with a fast guest (network.md, "Batched
 * reads"), on the Debian image (python3: the initramfs's nc sends too
 * slowly to be batched): its 4 MiB and a line reach the test host while
 * it still holds its side open, waiting for the answer; 4 MiB and a line
 * back reach it while the test host holds its side open, waiting for its
 * "ack". A burst's last bytes wait for no FIN and no more bytes, and the
 * SIGUSR2 report says the guest's direction was read in batches.
 */
TEST_TIMEOUT(granted_flow_bursts_and_their_last_bytes, BOOT_TIMEOUT)
{
	char dir[64], policy[128], image[300], nclog[128], tail[5] = "", peek;
	const char *vmmctl = env_or("KILN_VMMCTL", "build/vmmctl");
	static char buf[BATCH_BYTES];
	struct test_host h;
	struct pollfd pfd;
	struct bg_vm v;
	int lsn, conn;
	size_t got = 0;
	ssize_t n;
	pid_t nc;

	test_tmp_name(dir, sizeof(dir), "kiln-net-batch-XXXXXX");
	if (!can_boot(_metadata))
		return;
	ASSERT_TRUE(agent_image(_metadata, image, sizeof(image)));
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	lsn = tcp_listener(_metadata, TEST_HOST, BATCH_PORT);
	policy_file(_metadata, policy, sizeof(policy), dir, "policy.json",
		    "{\"tcp\": [{\"to\": \"" TEST_HOST
		    "\", \"ports\": [" STR_BATCH_PORT "]}]}");
	ASSERT_TRUE(bg_vm_start(_metadata, &v, dir, "vm",
				ARGS("--rootfs", image, "--net", "auto",
				     "--net-policy", policy)));
	snprintf(nclog, sizeof(nclog), "%s/py.log", dir);
	nc = spawn_logged(ARGS(vmmctl, "exec", v.sock, "--", "python3", "-c",
			       batch_guest_py),
			  nclog);
	ASSERT_LT(0, nc);
	pfd = (struct pollfd){ .fd = lsn, .events = POLLIN };
	ASSERT_EQ(1, poll(&pfd, 1, 60000)) TH_LOG("the guest never connected");
	conn = accept4(lsn, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);

	pfd = (struct pollfd){ .fd = conn, .events = POLLIN };
	while (got < BATCH_BYTES + 4 && poll(&pfd, 1, 30000) == 1) {
		n = read(conn, buf, sizeof(buf));
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) { /* the last 4 bytes */
			memmove(tail, tail + 1, 3);
			tail[3] = buf[i];
		}
		got += n;
	}
	EXPECT_EQ((size_t)BATCH_BYTES + 4, got);
	EXPECT_EQ(0, memcmp(tail, "end\n", 4));
	/* The guest waits for the answer: nothing more to read, no FIN. */
	EXPECT_EQ(-1, recv(conn, &peek, 1, MSG_DONTWAIT | MSG_PEEK));
	EXPECT_EQ(EAGAIN, errno);

	memset(buf, 'k', sizeof(buf));
	EXPECT_EQ((ssize_t)sizeof(buf), write(conn, buf, sizeof(buf)));
	EXPECT_EQ(5, write(conn, "done\n", 5));
	memset(tail, 0, sizeof(tail));
	EXPECT_EQ(1, poll(&pfd, 1, 60000)) TH_LOG("no ack from the guest");
	EXPECT_EQ(4, read(conn, tail, 4));
	EXPECT_EQ(0, memcmp(tail, "ack\n", 4));

	ASSERT_EQ(0, kill(v.pid, SIGUSR2));
	EXPECT_TRUE(file_says(v.log, "times)", 30));
	EXPECT_LE(1, batches_reported(v.log));
	TH_LOG("the guest's direction began batched reads %lld times",
	       batches_reported(v.log));
	close(conn);
	EXPECT_EQ(0, wait_exit(nc, 60));
	read_text(nclog, buf, 4096);
	EXPECT_TRUE(strstr(buf, "4194309 b'done\\n'") != NULL)
	TH_LOG("the guest's python said: %s", buf);
	bg_vm_stop(_metadata, &v);
	close(lsn);
	test_host_stop(&h);
	unlink(nclog);
	unlink(policy);
	rmdir(dir);
}

TEST_HARNESS_MAIN
