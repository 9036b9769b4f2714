// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's egress proxy (net/proxy.c) end to end, without a VM. Root
 * only (BPF, namespaces, transparent sockets): a skip otherwise.
 *
 * Each test process makes three network namespaces of its own:
 * - the "host" one, this process's: where the proxy thread runs and
 *   connects upstream; the test servers listen on addresses of its lo
 *   (TEST_NET2, allowed by the test's policy; TEST_NET3, denied);
 * - the "VM netns", as net/netns.c makes it: a veth end standing in for
 *   the tap (same ingress), the gateway's address, the table 100 local
 *   route and its rule; the proxy's sockets and program go there;
 * - the "guest netns", the veth's other end with the guest's address
 *   and a default route via the gateway: the test's guest sockets.
 *
 * Nothing waits for a fixed time: negative checks wait for the proxy's
 * counters to show its decision, then look.
 *
 * The hook's tests decide by a real policy (net/policy.c) with a hook on
 * a Unix socket the test plays by hand (selftests/fakehook.h): the test
 * thread reads the proxy's questions and answers them while the proxy's
 * thread holds the guest's flow.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <jansson.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include "lib/compiler.h"
#include "net/policy.h"
#include "net/hostaddr.h"
#include "net/proxy-internal.h" /* PROXY_RELAY_PIPE_MAX */
#include "net/proxy.h"
#include "selftests/fakehook.h"
#include "selftests/kselftest.h"
#include "selftests/proxyfix.h"
#include "selftests/vmnet.h"
#include "vmm/seccomp.h"

#define ALLOWED "198.51.100.7" /* RFC 5737: on the host netns's lo */
#define DENIED	"203.0.113.9"

#define TCP_PORT      443
#define UDP_PORT      5000
#define MAX_TCP	      4 /* the proxy's flow limits, small for the test */
#define MAX_UDP	      4
#define OVER_LIMIT    20 /* connections past MAX_TCP */
#define TIMEOUT_MS    PROXYFIX_TIMEOUT_MS
#define STATS_POLL_US PROXYFIX_POLL_US
#define BULK	      (4U << 20) /* bytes each way through one flow */

static in_addr_t ip4(const char *s)
{
	return inet_addr(s);
}

/*
 * The test's policy: TCP and UDP to ALLOWED, nothing else; and, once a
 * test revokes it, nothing from the guest's source port revoked_port
 * (host byte order; 0: none). A hook test sets policy instead, a real
 * one, decided with bindings as the VM does (vmm/vm.c), under lock.
 */
struct test_policy {
	unsigned int calls;
	unsigned int revoked_port;
	struct proxyfix_policy real;
};

static void test_decide(void *opaque, const struct net_flow *f,
			struct net_decision *d)
{
	struct test_policy *tp = opaque;
	unsigned int revoked =
		__atomic_load_n(&tp->revoked_port, __ATOMIC_RELAXED);

	__atomic_add_fetch(&tp->calls, 1, __ATOMIC_RELAXED);
	if (proxyfix__decide(&tp->real, f, d))
		return;
	if (revoked && ntohs(f->src.sin_port) == revoked) {
		d->verdict = NET_VERDICT_DENY;
		snprintf(d->reason, sizeof(d->reason), "revoked");
	} else if (f->dst.sin_addr.s_addr == ip4(ALLOWED)) {
		d->verdict = NET_VERDICT_ALLOW;
		snprintf(d->reason, sizeof(d->reason), "test grant");
	} else {
		d->verdict = NET_VERDICT_DENY;
		snprintf(d->reason, sizeof(d->reason), "no grant");
	}
}

FIXTURE(px)
{
	struct vmnet net;
	struct proxy *proxy;
	struct test_policy policy;
	struct fakehook hook;
	int up_tcp, denied_tcp, up_udp, denied_udp;
};

/*
 * The fixture's proxy, made and started (filtered: under the vmm's
 * filter), its TCP flows relayed as relay says (the fixture's: auto).
 */
static void px_proxy_relay(struct __test_metadata *_metadata,
			   FIXTURE_DATA(px) * self, bool filtered,
			   enum proxy_relay relay)
{
	struct proxy_params p = {
		.ifname = VMNET_VETH_VM,
		.egress = { .prefix_len = VMNET_PREFIX_LEN },
		.decide = test_decide,
		.max_tcp_flows = MAX_TCP,
		.max_udp_flows = MAX_UDP,
		.relay = relay,
	};
	char err[256] = "";

	p.netns_fd = self->net.vm_ns;
	/*
	 * The upstreams on the host netns's lo stand in for the internet:
	 * no address counts as the host's own here.
	 */
	static struct net_host_addrs *none;

	if (!none)
		none = net_host_addrs__create_empty();
	ASSERT_NE(NULL, none);
	p.host_addrs = none;
	p.decide_opaque = &self->policy;
	p.egress.gateway.s_addr = ip4(VMNET_GATEWAY);
	p.egress.guest.s_addr = ip4(VMNET_GUEST);
	ASSERT_EQ(0, proxy__create(&self->proxy, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	if (filtered)
		ASSERT_EQ(0, proxyfix__start_filtered(self->proxy));
	else
		ASSERT_EQ(0, proxy__start(self->proxy, NULL));
}

static void px_proxy(struct __test_metadata *_metadata, FIXTURE_DATA(px) * self,
		     bool filtered)
{
	px_proxy_relay(_metadata, self, filtered, PROXY_RELAY_AUTO);
}

FIXTURE_SETUP(px)
{

	vmnet__init(&self->net);
	self->up_tcp = self->denied_tcp = self->up_udp = self->denied_udp = -1;
	self->hook = (struct fakehook){ .lsn = -1, .conn = -1 };
	proxyfix__policy_init(&self->policy.real);
	if (geteuid())
		SKIP(return, PROXYFIX_NOT_ROOT);

	vmnet__setup(_metadata, &self->net);
	VMNET_IP("addr", "add", ALLOWED "/32", "dev", "lo");
	VMNET_IP("addr", "add", DENIED "/32", "dev", "lo");

	self->up_tcp = vmnet__server(_metadata, SOCK_STREAM, ALLOWED, TCP_PORT);
	self->denied_tcp =
		vmnet__server(_metadata, SOCK_STREAM, DENIED, TCP_PORT);
	self->up_udp = vmnet__server(_metadata, SOCK_DGRAM, ALLOWED, UDP_PORT);
	self->denied_udp =
		vmnet__server(_metadata, SOCK_DGRAM, DENIED, UDP_PORT);
	px_proxy(_metadata, self, false);
}

FIXTURE_TEARDOWN(px)
{
	int fds[] = { self->up_tcp, self->denied_tcp, self->up_udp,
		      self->denied_udp };

	proxy__destroy(self->proxy);
	for (unsigned int i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	vmnet__close(&self->net);
	fakehook__close(&self->hook);
	proxyfix__policy_free(&self->policy.real);
}

static int so_error(int fd)
{
	int soerr = -1;
	socklen_t len = sizeof(soerr);

	getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
	return soerr;
}

/* The guest's connection ends with an error (RST, refusal): which. */
static int guest_error(int g)
{
	char c;
	int soerr;

	if (!vmnet__wait_for(g, POLLERR | POLLHUP, TIMEOUT_MS))
		return 0;
	soerr = so_error(g);
	if (soerr)
		return soerr;
	return recv(g, &c, 1, 0) < 0 ? errno : 0;
}

static ssize_t read_some(int fd, char *buf, size_t len)
{
	if (!vmnet__wait_for(fd, POLLIN, TIMEOUT_MS))
		return -ETIMEDOUT;
	return recv(fd, buf, len, 0);
}

/* The guest's SYN went out and got no answer: the kernel sent it again. */
static bool wait_syn_retransmitted(int g)
{
	struct tcp_info ti;
	socklen_t len;

	for (int waited = 0; waited < TIMEOUT_MS * 1000;
	     waited += STATS_POLL_US) {
		len = sizeof(ti);
		if (!getsockopt(g, IPPROTO_TCP, TCP_INFO, &ti, &len) &&
		    ti.tcpi_total_retrans >= 1)
			return ti.tcpi_state == TCP_SYN_SENT;
		usleep(STATS_POLL_US);
	}
	return false;
}

static bool udp_denied_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->udp_denied >= n;
}

static bool bytes_out_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->bytes_out >= n;
}

static uint64_t reason_flows(const struct proxy_stats *s, uint8_t proto,
			     const char *reason)
{
	for (unsigned int i = 0; i < s->nr_reasons; i++)
		if (s->reasons[i].proto == proto &&
		    !strcmp(s->reasons[i].reason, reason))
			return s->reasons[i].flows;
	return 0;
}

/* The guest's TCP flow g reset, denied for reason; the counters in *s. */
static void expect_reset(struct __test_metadata *_metadata,
			 FIXTURE_DATA(px) * self, int g, const char *reason,
			 struct proxy_stats *s)
{
	EXPECT_EQ(ECONNRESET, guest_error(g));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy,
					 proxyfix__tcp_denied_at_least, 1, s));
	EXPECT_EQ(1, reason_flows(s, IPPROTO_TCP, reason));
}

static void expect_addr(struct __test_metadata *_metadata,
			const struct sockaddr_in *a, const char *addr, int port)
{
	char s[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, s, sizeof(s));
	EXPECT_STREQ(addr, s);
	EXPECT_EQ(port, ntohs(a->sin_port));
}

TEST_F_TIMEOUT(px, tcp_allowed_relays_both_ways_and_half_close, 60)
{
	struct proxy_stats s;
	char buf[16] = "";
	int g, conn;

	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	ASSERT_TRUE(vmnet__wait_for(self->up_tcp, POLLIN, TIMEOUT_MS))
	TH_LOG("the upstream server got no connection");
	conn = accept4(self->up_tcp, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	ASSERT_TRUE(vmnet__wait_for(g, POLLOUT, TIMEOUT_MS));
	ASSERT_EQ(0, so_error(g));

	ASSERT_EQ(5, send(g, "hello", 5, 0));
	ASSERT_EQ(5, read_some(conn, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "hello", 5));
	ASSERT_EQ(6, send(conn, "world!", 6, 0));
	ASSERT_EQ(6, read_some(g, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "world!", 6));

	/* The guest's FIN reaches upstream; upstream can still answer. */
	ASSERT_EQ(0, shutdown(g, SHUT_WR));
	ASSERT_EQ(0, read_some(conn, buf, sizeof(buf)));
	ASSERT_EQ(3, send(conn, "bye", 3, 0));
	ASSERT_EQ(3, read_some(g, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "bye", 3));
	close(conn);
	ASSERT_EQ(0, read_some(g, buf, sizeof(buf)));

	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_allowed);
	EXPECT_EQ(0, s.tcp_denied);
	EXPECT_EQ(5, s.bytes_out);
	EXPECT_EQ(9, s.bytes_in);
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_TCP, "test grant"));
	/* A few bytes at a time: never read in batches. */
	EXPECT_EQ(0, s.relay_batches);
	close(g);
}

/* The pipes this process holds now. */
static unsigned int pipes_open(void)
{
	char link[64], path[300];
	unsigned int n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	ssize_t len;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0 && !strncmp(link, "pipe:", 5))
			n++;
	}
	closedir(d);
	return n;
}

/* This process's pipe descriptors of size bytes (F_GETPIPE_SZ). */
static unsigned int pipes_of_size(int size)
{
	char link[64], path[300];
	unsigned int n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	ssize_t len;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0 && !strncmp(link, "pipe:", 5) &&
		    fcntl(atoi(e->d_name), F_GETPIPE_SZ) == size)
			n++;
	}
	closedir(d);
	return n;
}

static uint8_t bulk_byte(size_t i, uint8_t seed)
{
	return (uint8_t)(i * 131 + (i >> 12) + seed);
}

/*
 * BULK bytes from `from` to `to`, sent until the relay pushes back (the
 * receiver not reading) before any is read, then both at once; every
 * byte checked in order. True when all came as sent.
 */
static bool bulk_one_way(int from, int to, uint8_t seed)
{
	static uint8_t buf[64 << 10];
	size_t sent = 0, got = 0;
	bool pushed_back = false;
	ssize_t n;

	while (got < BULK) {
		struct pollfd p[2] = { { .fd = from, .events = POLLOUT },
				       { .fd = to, .events = POLLIN } };

		if (sent < BULK) {
			size_t len = BULK - sent < sizeof(buf) ? BULK - sent :
								 sizeof(buf);

			for (size_t i = 0; i < len; i++)
				buf[i] = bulk_byte(sent + i, seed);
			n = send(from, buf, len, MSG_DONTWAIT);
			if (n > 0)
				sent += n;
			else if (n < 0 && errno != EAGAIN)
				return false;
			else
				pushed_back = true;
		}
		if (!pushed_back && sent < BULK)
			continue;
		n = recv(to, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return false;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != bulk_byte(got + i, seed))
				return false;
		if (n > 0)
			got += n;
		else if (poll(sent < BULK ? p : p + 1, sent < BULK ? 2 : 1,
			      TIMEOUT_MS) <= 0)
			return false;
	}
	return true;
}

/*
 * Megabytes each way through one relayed flow, under the vmm's seccomp
 * filter, with the receiver behind: every byte in order, the relay's
 * pipes (splice forced, no copy through the proxy) open while the flow
 * is and gone with it, the counters exact.
 */
TEST_F_TIMEOUT(px, tcp_bulk_relay_through_pipes_under_the_filter, 120)
{
	unsigned int before;
	struct proxy_stats s;
	int g, conn;

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	px_proxy_relay(_metadata, self, true, PROXY_RELAY_SPLICE);

	before = pipes_open();
	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	ASSERT_TRUE(vmnet__wait_for(self->up_tcp, POLLIN, TIMEOUT_MS));
	conn = accept4(self->up_tcp, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	ASSERT_TRUE(vmnet__wait_for(g, POLLOUT, TIMEOUT_MS));
	ASSERT_EQ(0, so_error(g));
	/* A pipe each way: two descriptors each. */
	EXPECT_EQ(before + 4, pipes_open());

	EXPECT_TRUE(bulk_one_way(g, conn, 1)) TH_LOG("guest to upstream");
	EXPECT_TRUE(bulk_one_way(conn, g, 2)) TH_LOG("upstream to guest");
	/* Each way's pipe was found full: both grew, and only once. */
	EXPECT_EQ(4U, pipes_of_size(PROXY_RELAY_PIPE_MAX));
	close(conn);
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(BULK, s.bytes_out);
	EXPECT_EQ(BULK, s.bytes_in);
	EXPECT_EQ(before, pipes_open());
	EXPECT_EQ(PROXY_RELAY_SPLICE, s.relay_mode);
	EXPECT_STREQ("", s.relay_error);
	EXPECT_EQ(0, s.tcp_splice);
}

static bool relay_batched_is(const struct proxy_stats *s, uint64_t n)
{
	return s->relay_batched == n;
}

static void tcp_pair(struct __test_metadata *_metadata, FIXTURE_DATA(px) * self,
		     int *g, int *conn);

/* A line from `from` to `to`, the flow open: true when it came whole. */
static bool line_one_way(int from, int to, const char *line)
{
	size_t len = strlen(line);
	char buf[64];

	return send(from, line, len, 0) == (ssize_t)len &&
	       read_some(to, buf, sizeof(buf)) == (ssize_t)len &&
	       !memcmp(buf, line, len);
}

/*
 * A fast guest's bytes are read in batches (SO_RCVLOWAT, under the vmm's
 * filter): megabytes in order, followed at once by a few bytes, fewer
 * than PROXY_RELAY_LOWAT, that still come with the flow open and nothing
 * after them. Quiet, the direction goes back to waking for every byte
 * (PROXY_RELAY_BATCH_MS after its last read). Upstream's megabytes are
 * never batched, nor is a request-response exchange; every byte counted.
 */
TEST_F_TIMEOUT(px, tcp_fast_guest_read_in_batches, 120)
{
	struct proxy_stats s;
	uint64_t batches;
	int g, conn;

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	px_proxy_relay(_metadata, self, true, PROXY_RELAY_SPLICE);
	tcp_pair(_metadata, self, &g, &conn);

	EXPECT_TRUE(bulk_one_way(g, conn, 1)) TH_LOG("guest to upstream");
	EXPECT_TRUE(line_one_way(g, conn, "tail\n")) TH_LOG("after the bulk");
	proxy__stats(self->proxy, &s);
	EXPECT_LE(1, s.relay_batches);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, relay_batched_is, 0, &s))
	TH_LOG("still batched: %llu", (unsigned long long)s.relay_batched);
	batches = s.relay_batches;

	EXPECT_TRUE(bulk_one_way(conn, g, 2)) TH_LOG("upstream to guest");
	EXPECT_TRUE(line_one_way(conn, g, "tail\n")) TH_LOG("after the bulk");
	for (int i = 0; i < 20; i++) {
		ASSERT_TRUE(line_one_way(g, conn, "ping\n"));
		ASSERT_TRUE(line_one_way(conn, g, "pong\n"));
	}
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(batches, s.relay_batches);
	close(conn);
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(2 + BULK + 5 + 20 * 5, s.bytes_out);
	EXPECT_EQ(BULK + 5 + 20 * 5, s.bytes_in);
	EXPECT_EQ(0, s.relay_batched);
}

static bool tcp_kernel_is(const struct proxy_stats *s, uint64_t n)
{
	return s->tcp_kernel == n;
}

static bool bytes_in_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->bytes_in >= n;
}

/*
 * The same through the kernel relay (forced: the test fails if its
 * program does not load), both threads under the vmm's filters: every
 * byte in order, no pipe, the flow counted as the kernel's, its bytes
 * counted while it is open (the sweep) and exact once it is closed.
 */
TEST_F_TIMEOUT(px, tcp_bulk_relay_in_the_kernel_under_the_filter, 120)
{
	unsigned int before;
	struct proxy_stats s;
	int g, conn;

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	px_proxy_relay(_metadata, self, true, PROXY_RELAY_KERNEL);

	before = pipes_open();
	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	conn = proxyfix__up_accept(_metadata, self->up_tcp);
	ASSERT_TRUE(vmnet__wait_for(g, POLLOUT, TIMEOUT_MS));
	ASSERT_EQ(0, so_error(g));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, tcp_kernel_is, 1, &s));
	EXPECT_EQ(PROXY_RELAY_KERNEL, s.relay_mode);
	EXPECT_EQ(0, s.tcp_splice);
	EXPECT_EQ(before, pipes_open());

	EXPECT_TRUE(bulk_one_way(g, conn, 1)) TH_LOG("guest to upstream");
	EXPECT_TRUE(bulk_one_way(conn, g, 2)) TH_LOG("upstream to guest");
	/* Counted while open: the proxy's once-a-second look. */
	ASSERT_TRUE(
		proxyfix__wait_stats(self->proxy, bytes_in_at_least, BULK, &s));
	EXPECT_EQ(BULK, s.bytes_out);
	ASSERT_EQ(0, shutdown(g, SHUT_WR));
	EXPECT_EQ(0, recv(conn, &(char){ 0 }, 1, 0)); /* its FIN */
	close(conn);
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(BULK, s.bytes_out);
	EXPECT_EQ(BULK, s.bytes_in);
	EXPECT_EQ(0, s.tcp_kernel);
}

/*
 * The same split (the guest's bytes by the kernel, upstream's through
 * one pipe): every byte in order both ways, one pipe, the flow counted
 * as the kernel's, upstream's FIN after its bytes and the guest's after
 * its own, counters exact.
 */
TEST_F_TIMEOUT(px, tcp_bulk_relay_split_under_the_filter, 120)
{
	unsigned int before;
	struct proxy_stats s;
	int g, conn;

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	px_proxy_relay(_metadata, self, true, PROXY_RELAY_SPLIT);

	before = pipes_open();
	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	conn = proxyfix__up_accept(_metadata, self->up_tcp);
	ASSERT_TRUE(vmnet__wait_for(g, POLLOUT, TIMEOUT_MS));
	ASSERT_EQ(0, so_error(g));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, tcp_kernel_is, 1, &s));
	EXPECT_EQ(PROXY_RELAY_SPLIT, s.relay_mode);
	EXPECT_EQ(0, s.tcp_splice);
	/* Upstream's way: two descriptors. */
	EXPECT_EQ(before + 2, pipes_open());

	EXPECT_TRUE(bulk_one_way(g, conn, 1)) TH_LOG("guest to upstream");
	EXPECT_TRUE(bulk_one_way(conn, g, 2)) TH_LOG("upstream to guest");
	ASSERT_EQ(0, shutdown(conn, SHUT_WR));
	ASSERT_TRUE(vmnet__wait_for(g, POLLIN, TIMEOUT_MS));
	EXPECT_EQ(0, recv(g, &(char){ 0 }, 1, 0)); /* upstream's FIN */
	ASSERT_EQ(0, shutdown(g, SHUT_WR));
	EXPECT_EQ(0, recv(conn, &(char){ 0 }, 1, 0)); /* the guest's */
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(BULK, s.bytes_out);
	EXPECT_EQ(BULK, s.bytes_in);
	EXPECT_EQ(0, s.tcp_kernel);
	EXPECT_EQ(before, pipes_open());
	close(conn);
	close(g);
}

TEST_F_TIMEOUT(px, tcp_denied_is_reset, 60)
{
	struct proxy_stats s;
	int g;

	g = proxyfix__guest_connect(_metadata, &self->net, DENIED, TCP_PORT);
	EXPECT_EQ(ECONNRESET, guest_error(g));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy,
					 proxyfix__tcp_denied_at_least, 1, &s));
	EXPECT_EQ(1, s.tcp_denied);
	EXPECT_EQ(0, s.tcp_allowed);
	EXPECT_EQ(0, s.tcp_open);
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_TCP, "no grant"));
	/* Decided before anything went upstream: nothing ever will. */
	EXPECT_FALSE(vmnet__wait_for(self->denied_tcp, POLLIN, 0));
	close(g);
}

static void udp_round_trip(struct __test_metadata *_metadata,
			   FIXTURE_DATA(px) * self)
{
	struct sockaddr_in dst = vmnet__sin(ALLOWED, UDP_PORT), from;
	struct proxy_stats s;
	socklen_t len = sizeof(from);
	char buf[16] = "";
	int g;

	g = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(vmnet__wait_for(self->up_udp, POLLIN, TIMEOUT_MS))
	TH_LOG("the upstream server got nothing");
	ASSERT_EQ(4, recvfrom(self->up_udp, buf, sizeof(buf), 0,
			      (struct sockaddr *)&from, &len));
	EXPECT_EQ(0, memcmp(buf, "ping", 4));
	ASSERT_EQ(4, sendto(self->up_udp, "pong", 4, 0,
			    (struct sockaddr *)&from, len));

	len = sizeof(from);
	ASSERT_TRUE(vmnet__wait_for(g, POLLIN, TIMEOUT_MS)) TH_LOG("no answer");
	ASSERT_EQ(4, recvfrom(g, buf, sizeof(buf), 0, (struct sockaddr *)&from,
			      &len));
	EXPECT_EQ(0, memcmp(buf, "pong", 4));
	expect_addr(_metadata, &from, ALLOWED, UDP_PORT);

	/* The same flow again: no new decision, the same way back. */
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(vmnet__wait_for(self->up_udp, POLLIN, TIMEOUT_MS));
	/* Counted just after the send: the server may see it first. */
	ASSERT_TRUE(
		proxyfix__wait_stats(self->proxy, bytes_out_at_least, 8, &s));
	EXPECT_EQ(1, s.udp_allowed);
	EXPECT_EQ(1, s.udp_open);
	EXPECT_EQ(1, __atomic_load_n(&self->policy.calls, __ATOMIC_RELAXED));
	EXPECT_EQ(8, s.bytes_out);
	EXPECT_EQ(4, s.bytes_in);
	close(g);
}

TEST_F_TIMEOUT(px, udp_allowed_round_trip, 60)
{
	udp_round_trip(_metadata, self);
}

/*
 * The same under the vmm's filters, the netns thread's included: its
 * reply socket (IP_TRANSPARENT, SO_REUSEADDR, bind, connect) and the
 * egress counters (a map lookup) are what that filter allows; the
 * proxy's destroy (the program's detach, netlink: EPERM) ends cleanly.
 */
TEST_F_TIMEOUT(px, udp_round_trip_and_counters_under_the_filters, 60)
{
	uint64_t counts[EGRESS_NR_REASONS];
	char err[256] = "";

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	px_proxy(_metadata, self, true);
	udp_round_trip(_metadata, self);
	EXPECT_EQ(0,
		  proxy__egress_counters(self->proxy, counts, err, sizeof(err)))
	TH_LOG("%s", err);
}

TEST_F_TIMEOUT(px, udp_denied_gets_nothing, 60)
{
	struct sockaddr_in dst = vmnet__sin(DENIED, UDP_PORT);
	struct proxy_stats s;
	char buf[16];
	int g;

	g = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(
		proxyfix__wait_stats(self->proxy, udp_denied_at_least, 1, &s));
	EXPECT_EQ(0, s.udp_allowed);
	EXPECT_EQ(0, s.udp_open);
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_UDP, "no grant"));
	/* The second datagram of the flow is dropped without a decision. */
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	EXPECT_FALSE(vmnet__wait_for(self->denied_udp, POLLIN, 0));
	EXPECT_EQ(-1, recv(g, buf, sizeof(buf), 0));
	close(g);
}

TEST_F_TIMEOUT(px, flows_past_the_limit_are_refused, 120)
{
	int kept[MAX_TCP], up[MAX_TCP], extra[OVER_LIMIT];
	struct proxy_stats s;

	for (int i = 0; i < MAX_TCP; i++) {
		kept[i] = proxyfix__guest_connect(_metadata, &self->net,
						  ALLOWED, TCP_PORT);
		up[i] = proxyfix__up_accept(_metadata, self->up_tcp);
	}
	for (int i = 0; i < OVER_LIMIT; i++) {
		extra[i] = proxyfix__guest_connect(_metadata, &self->net,
						   ALLOWED, TCP_PORT);
		EXPECT_EQ(ECONNRESET, guest_error(extra[i]));
	}
	ASSERT_TRUE(proxyfix__wait_stats(
		self->proxy, proxyfix__tcp_denied_at_least, OVER_LIMIT, &s));
	EXPECT_EQ(MAX_TCP, s.tcp_open);
	EXPECT_EQ(MAX_TCP, s.tcp_allowed);
	EXPECT_EQ(OVER_LIMIT, reason_flows(&s, IPPROTO_TCP, "flow limit"));
	EXPECT_EQ(MAX_TCP, s.tcp_slots); /* grown to its limit, no further */
	EXPECT_FALSE(vmnet__wait_for(self->up_tcp, POLLIN, 0));

	/* A flow that ends makes room again. */
	close(up[0]);
	close(kept[0]);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is,
					 MAX_TCP - 1, &s));
	kept[0] = proxyfix__guest_connect(_metadata, &self->net, ALLOWED,
					  TCP_PORT);
	up[0] = proxyfix__up_accept(_metadata, self->up_tcp);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is,
					 MAX_TCP, &s));
	EXPECT_EQ(MAX_TCP, s.tcp_slots);
	for (int i = 0; i < MAX_TCP; i++) {
		close(up[i]);
		close(kept[i]);
	}
	for (int i = 0; i < OVER_LIMIT; i++)
		close(extra[i]);
}

/*
 * The flow table is touched only as deep as the flows open at once went:
 * flows one after the other reuse its first entry, two at once take two.
 */
TEST_F_TIMEOUT(px, tcp_table_as_deep_as_flows_open_at_once, 60)
{
	struct proxy_stats s;
	int g[2], up[2];

	proxy__stats(self->proxy, &s);
	EXPECT_EQ(0, s.tcp_slots);
	for (int i = 0; i < 3; i++) {
		g[0] = proxyfix__guest_connect(_metadata, &self->net, ALLOWED,
					       TCP_PORT);
		up[0] = proxyfix__up_accept(_metadata, self->up_tcp);
		ASSERT_TRUE(proxyfix__wait_stats(self->proxy,
						 proxyfix__tcp_open_is, 1, &s));
		close(up[0]);
		close(g[0]);
		ASSERT_TRUE(proxyfix__wait_stats(self->proxy,
						 proxyfix__tcp_open_is, 0, &s));
	}
	EXPECT_EQ(3, s.tcp_allowed);
	EXPECT_EQ(1, s.tcp_slots);
	for (int i = 0; i < 2; i++) {
		g[i] = proxyfix__guest_connect(_metadata, &self->net, ALLOWED,
					       TCP_PORT);
		up[i] = proxyfix__up_accept(_metadata, self->up_tcp);
	}
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 2,
					 &s));
	EXPECT_EQ(2, s.tcp_slots);
	for (int i = 0; i < 2; i++) {
		close(up[i]);
		close(g[i]);
	}
}

TEST_F_TIMEOUT(px, upstream_refused_resets_the_guest, 60)
{
	struct proxy_stats s;
	int g;

	/* Granted, but nothing listens there upstream. */
	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED,
				    TCP_PORT + 1);
	EXPECT_EQ(ECONNRESET, guest_error(g));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_allowed);
	EXPECT_EQ(1, s.upstream_failed);
	close(g);
}

/* n flows decided, the table full (not one more: it has no room). */
static bool udp_allowed_table_full(const struct proxy_stats *s, uint64_t n)
{
	return s->udp_allowed >= n && s->udp_open == MAX_UDP;
}

TEST_F_TIMEOUT(px, udp_flows_bounded_lru, 60)
{
	struct sockaddr_in dst = vmnet__sin(ALLOWED, UDP_PORT);
	int g[MAX_UDP + 2];
	struct proxy_stats s;
	char buf[16];

	/* One flow per guest socket (its own source port). */
	for (unsigned int i = 0; i < ARRAY_SIZE(g); i++) {
		g[i] = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
		ASSERT_EQ(4, sendto(g[i], "ping", 4, 0, (struct sockaddr *)&dst,
				    sizeof(dst)));
		ASSERT_TRUE(vmnet__wait_for(self->up_udp, POLLIN, TIMEOUT_MS));
		ASSERT_EQ(4, recv(self->up_udp, buf, sizeof(buf), 0));
	}
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, udp_allowed_table_full,
					 ARRAY_SIZE(g), &s));
	EXPECT_EQ(MAX_UDP, s.udp_open);
	EXPECT_EQ(MAX_UDP, s.udp_slots); /* grown to its limit, no further */
	/* The first flow was the least recently used: evicted, decided anew. */
	ASSERT_EQ(4, sendto(g[0], "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, udp_allowed_table_full,
					 ARRAY_SIZE(g) + 1, &s));
	EXPECT_EQ(MAX_UDP, s.udp_open);
	EXPECT_EQ(MAX_UDP, s.udp_slots);
	for (unsigned int i = 0; i < ARRAY_SIZE(g); i++)
		close(g[i]);
}

static bool tcp_cut_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->tcp_cut >= n;
}

static bool udp_cut_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->udp_cut >= n;
}

static int local_port(int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len))
		return -1;
	return ntohs(a.sin_port);
}

/* A granted TCP flow, relaying: its guest and upstream sockets. */
static void tcp_pair(struct __test_metadata *_metadata, FIXTURE_DATA(px) * self,
		     int *g, int *conn)
{
	char buf[4];

	*g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	*conn = proxyfix__up_accept(_metadata, self->up_tcp);
	ASSERT_TRUE(vmnet__wait_for(*g, POLLOUT, TIMEOUT_MS));
	ASSERT_EQ(2, send(*g, "hi", 2, 0));
	ASSERT_EQ(2, read_some(*conn, buf, sizeof(buf)));
}

/*
 * The decide function stops granting one open flow: a recheck resets it
 * on both sides, the other keeps relaying, and new flows are decided by
 * the new answers.
 */
TEST_F_TIMEOUT(px, recheck_cuts_what_is_no_longer_granted, 60)
{
	struct proxy_stats s;
	int g1, c1, g2, c2, g3;
	char buf[8];

	tcp_pair(_metadata, self, &g1, &c1);
	tcp_pair(_metadata, self, &g2, &c2);
	ASSERT_LT(0, local_port(g1));

	/* Nothing changed: a recheck keeps both. */
	proxy__recheck(self->proxy);
	ASSERT_EQ(2, send(g1, "ok", 2, 0));
	ASSERT_EQ(2, read_some(c1, buf, sizeof(buf)));

	__atomic_store_n(&self->policy.revoked_port, local_port(g1),
			 __ATOMIC_RELAXED);
	proxy__recheck(self->proxy);
	EXPECT_EQ(ECONNRESET, guest_error(g1));
	EXPECT_GE(0, read_some(c1, buf, sizeof(buf))); /* RST or FIN */
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, tcp_cut_at_least, 1, &s));
	EXPECT_EQ(1, s.tcp_cut);
	EXPECT_EQ(1, s.tcp_open);
	EXPECT_EQ(2, s.tcp_allowed); /* a recheck is not a new flow */
	EXPECT_EQ(0, s.tcp_denied);

	/* The other flow still relays, both ways. */
	ASSERT_EQ(5, send(g2, "still", 5, 0));
	ASSERT_EQ(5, read_some(c2, buf, sizeof(buf)));
	ASSERT_EQ(3, send(c2, "yes", 3, 0));
	ASSERT_EQ(3, read_some(g2, buf, sizeof(buf)));

	/* A new flow is decided by the new answers too. */
	__atomic_store_n(&self->policy.revoked_port, local_port(g2),
			 __ATOMIC_RELAXED);
	g3 = proxyfix__guest_connect(_metadata, &self->net, DENIED, TCP_PORT);
	EXPECT_EQ(ECONNRESET, guest_error(g3));
	proxy__recheck(self->proxy);
	EXPECT_EQ(ECONNRESET, guest_error(g2));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, tcp_cut_at_least, 2, &s));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	close(g1);
	close(c1);
	close(g2);
	close(c2);
	close(g3);
}

/* A UDP flow no longer granted: its datagrams stop reaching upstream. */
TEST_F_TIMEOUT(px, recheck_drops_a_udp_flow, 60)
{
	struct sockaddr_in dst = vmnet__sin(ALLOWED, UDP_PORT);
	struct proxy_stats s;
	char buf[16];
	int g, g2;

	g = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(vmnet__wait_for(self->up_udp, POLLIN, TIMEOUT_MS));
	ASSERT_EQ(4, recv(self->up_udp, buf, sizeof(buf), 0));

	__atomic_store_n(&self->policy.revoked_port, local_port(g),
			 __ATOMIC_RELAXED);
	proxy__recheck(self->proxy);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, udp_cut_at_least, 1, &s));
	EXPECT_EQ(0, s.udp_open);
	ASSERT_EQ(4, sendto(g, "drop", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	/*
	 * Another flow's datagram, after it on the same proxy socket: once
	 * it is upstream, the first was dealt with (dropped as a known
	 * denied flow: no new decision, nothing sent).
	 */
	g2 = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
	ASSERT_EQ(4, sendto(g2, "pass", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(vmnet__wait_for(self->up_udp, POLLIN, TIMEOUT_MS));
	ASSERT_EQ(4, recv(self->up_udp, buf, sizeof(buf), 0));
	EXPECT_EQ(0, memcmp(buf, "pass", 4));
	EXPECT_FALSE(vmnet__wait_for(self->up_udp, POLLIN, 0));
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(2, s.udp_allowed);
	EXPECT_EQ(0, s.udp_denied);
	EXPECT_EQ(1, s.udp_open);
	close(g);
	close(g2);
}

TEST_F_TIMEOUT(px, egress_counters_through_the_proxy, 60)
{
	uint64_t counts[EGRESS_NR_REASONS];
	char err[256] = "";
	int g, conn;

	tcp_pair(_metadata, self, &g, &conn);
	ASSERT_EQ(0,
		  proxy__egress_counters(self->proxy, counts, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_LE(1, counts[EGRESS_TCP_PROXY]);
	EXPECT_LE(1, counts[EGRESS_TCP_ESTABLISHED]);
	close(g);
	close(conn);
}

TEST_F_TIMEOUT(px, destroyed_proxy_fails_closed, 60)
{
	char buf[4];
	int g, conn;

	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	conn = proxyfix__up_accept(_metadata, self->up_tcp);

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	/* The running flow is cut... */
	EXPECT_NE(0, guest_error(g));
	EXPECT_GE(0, read_some(conn, buf, sizeof(buf))); /* RST or FIN */
	close(conn);
	close(g);

	/*
	 * ...and a new one gets nowhere: the program went with the proxy
	 * and the VM netns has no socket for it; its kernel cannot even
	 * answer with an RST from an address that is not its own. Seen
	 * from the guest: its SYN goes unanswered, retransmitted.
	 */
	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	ASSERT_TRUE(wait_syn_retransmitted(g));
	EXPECT_FALSE(vmnet__wait_for(g, POLLOUT, 0));
	EXPECT_FALSE(vmnet__wait_for(self->up_tcp, POLLIN, 0));
	close(g);
}

/* ---- the hook --------------------------------------------------------------- */

#define HOOK_LONG_MS  5000 /* an answer the test gives always comes in time */
#define HOOK_SHORT_MS 100  /* a deadline the test lets pass */

/*
 * The policy decide uses from now on: the rules grant ALLOWED (TCP and
 * UDP) and grant_too if not NULL; with hook_path, the rest goes to the
 * hook there.
 */
static void set_policy(struct __test_metadata *_metadata,
		       FIXTURE_DATA(px) * self, const char *grant_too,
		       const char *hook_path, unsigned int timeout_ms)
{
	char doc[512], hook[256] = "", extra[64] = "";

	if (grant_too)
		snprintf(extra, sizeof(extra), ", {\"to\": \"%s\"}", grant_too);
	if (hook_path)
		snprintf(hook, sizeof(hook),
			 ", \"hook\": {\"socket\": \"%s\", \"timeoutMs\": %u}",
			 hook_path, timeout_ms);
	snprintf(
		doc, sizeof(doc),
		"{\"tcp\": [{\"to\": \"%s\"}%s], \"udp\": [{\"to\": \"%s\"}]%s}",
		ALLOWED, extra, ALLOWED, hook);
	proxyfix__policy_set(_metadata, &self->policy.real, doc);
}

/* The fake hook listening, and the policy asking it. */
static void hook_up(struct __test_metadata *_metadata, FIXTURE_DATA(px) * self,
		    unsigned int timeout_ms)
{
	ASSERT_EQ(0, fakehook__init(&self->hook, true));
	set_policy(_metadata, self, NULL, self->hook.path, timeout_ms);
}

/* The proxy's next question, as JSON (the caller's to free). */
static json_t *read_question(struct __test_metadata *_metadata,
			     struct fakehook *h)
{
	char line[FAKEHOOK_LINE_MAX];
	json_t *q;

	if (h->conn < 0)
		ASSERT_EQ(0, fakehook__accept(h));
	ASSERT_LT(0, fakehook__read_line(h, line, sizeof(line)));
	q = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
	ASSERT_TRUE(json_is_object(q)) TH_LOG("not a JSON object: %s", line);
	return q;
}

/*
 * The fake hook up (its deadline timeout_ms), a guest connection to
 * DENIED, which only the hook can grant, and the question it made: the
 * guest's socket, *q the question (the caller's to free).
 */
static int hook_asked(struct __test_metadata *_metadata,
		      FIXTURE_DATA(px) * self, unsigned int timeout_ms,
		      json_t **q)
{
	int g;

	hook_up(_metadata, self, timeout_ms);
	g = proxyfix__guest_connect(_metadata, &self->net, DENIED, TCP_PORT);
	*q = read_question(_metadata, &self->hook);
	return g;
}

static long long q_id(json_t *q)
{
	return json_integer_value(json_object_get(q, "id"));
}

static const char *q_str(json_t *q, const char *key)
{
	return json_string_value(json_object_get(q, key));
}

/* "10.0.2.15:PORT" for the guest socket g. */
static void guest_src(int g, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%d", VMNET_GUEST, local_port(g));
}

static bool tcp_allowed_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->tcp_allowed >= n;
}

static bool udp_dropped_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->udp_dropped >= n;
}

static bool hook_ignored_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->hook.ignored >= n;
}

/* The flow the hook granted relays both ways, the way it was asked. */
TEST_F_TIMEOUT(px, hook_grant_relays_the_flow, 60)
{
	char src[32], buf[16];
	struct proxy_stats s;
	int g, conn;
	json_t *q;

	g = hook_asked(_metadata, self, HOOK_LONG_MS, &q);
	guest_src(g, src, sizeof(src));
	EXPECT_STREQ("tcp", q_str(q, "proto"));
	EXPECT_STREQ(src, q_str(q, "src"));
	EXPECT_STREQ(DENIED ":443", q_str(q, "dst"));
	EXPECT_STREQ("documentation", q_str(q, "class"));
	EXPECT_EQ(0, json_array_size(json_object_get(q, "hostnames")));
	EXPECT_LT(0, q_id(q));
	/* Held: nothing goes upstream before the answer. */
	EXPECT_FALSE(vmnet__wait_for(self->denied_tcp, POLLIN, 0));

	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q), "grant", "ok"));
	ASSERT_TRUE(vmnet__wait_for(self->denied_tcp, POLLIN, TIMEOUT_MS))
	TH_LOG("granted, but nothing upstream");
	conn = accept4(self->denied_tcp, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	ASSERT_EQ(5, send(g, "hello", 5, 0));
	ASSERT_EQ(5, read_some(conn, buf, sizeof(buf)));
	ASSERT_EQ(3, send(conn, "hey", 3, 0));
	ASSERT_EQ(3, read_some(g, buf, sizeof(buf)));

	ASSERT_TRUE(
		proxyfix__wait_stats(self->proxy, tcp_allowed_at_least, 1, &s));
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_TCP, HOOK_GRANT));
	EXPECT_EQ(1, s.tcp_open);
	EXPECT_EQ(0, s.tcp_denied);
	EXPECT_EQ(1, s.hook.questions);
	EXPECT_EQ(1, s.hook.answers);
	EXPECT_EQ(0, s.hook.pending);
	json_decref(q);
	close(conn);
	close(g);
}

TEST_F_TIMEOUT(px, hook_deny_resets, 60)
{
	struct proxy_stats s;
	json_t *q;
	int g;

	g = hook_asked(_metadata, self, HOOK_LONG_MS, &q);
	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q), "deny", "no"));
	expect_reset(_metadata, self, g, HOOK_DENY, &s);
	EXPECT_EQ(0, s.tcp_allowed);
	EXPECT_EQ(0, s.tcp_open);
	EXPECT_FALSE(vmnet__wait_for(self->denied_tcp, POLLIN, 0));
	json_decref(q);
	close(g);
}

/* A hook that never answers: denied once the deadline passed. */
TEST_F_TIMEOUT(px, hook_timeout_denies, 60)
{
	struct proxy_stats s;
	json_t *q;
	int g;

	g = hook_asked(_metadata, self, HOOK_SHORT_MS, &q);
	expect_reset(_metadata, self, g, HOOK_TIMEOUT, &s);
	EXPECT_EQ(1, s.hook.timeouts);
	EXPECT_EQ(0, s.hook.pending);
	EXPECT_FALSE(vmnet__wait_for(self->denied_tcp, POLLIN, 0));
	json_decref(q);
	close(g);
}

/* Nothing at the hook's path: denied at once, nothing upstream. */
TEST_F_TIMEOUT(px, hook_unreachable_denies, 60)
{
	struct proxy_stats s;
	int g;

	ASSERT_EQ(0, fakehook__init(&self->hook, false));
	set_policy(_metadata, self, NULL, self->hook.path, HOOK_LONG_MS);
	g = proxyfix__guest_connect(_metadata, &self->net, DENIED, TCP_PORT);
	expect_reset(_metadata, self, g, HOOK_UNREACHABLE, &s);
	EXPECT_EQ(0, s.hook.questions);
	EXPECT_EQ(1, s.hook.failures);
	/* The rules still grant without the hook. */
	close(g);
	g = proxyfix__guest_connect(_metadata, &self->net, ALLOWED, TCP_PORT);
	ASSERT_TRUE(vmnet__wait_for(self->up_tcp, POLLIN, TIMEOUT_MS));
	close(g);
}

TEST_F_TIMEOUT(px, hook_garbage_denies, 60)
{
	struct proxy_stats s;
	json_t *q;
	int g;

	g = hook_asked(_metadata, self, HOOK_LONG_MS, &q);
	ASSERT_EQ(0, fakehook__send(&self->hook, "grant it, please\n"));
	expect_reset(_metadata, self, g, HOOK_ERROR, &s);
	json_decref(q);
	close(g);
}

/* Two flows held at once, answered in the other order. */
TEST_F_TIMEOUT(px, hook_answers_out_of_order, 60)
{
	json_t *q[2], *q1st, *q2nd;
	char src1[32], buf[4];
	struct proxy_stats s;
	int g1, g2, conn;

	hook_up(_metadata, self, HOOK_LONG_MS);
	g1 = proxyfix__guest_connect(_metadata, &self->net, DENIED, TCP_PORT);
	g2 = proxyfix__guest_connect(_metadata, &self->net, DENIED, TCP_PORT);
	q[0] = read_question(_metadata, &self->hook);
	q[1] = read_question(_metadata, &self->hook);
	guest_src(g1, src1, sizeof(src1));
	q1st = !strcmp(q_str(q[0], "src"), src1) ? q[0] : q[1];
	q2nd = q1st == q[0] ? q[1] : q[0];
	ASSERT_STREQ(src1, q_str(q1st, "src"));
	EXPECT_NE(q_id(q1st), q_id(q2nd));

	/* g2's grant first, then g1's denial. */
	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q2nd), "grant", NULL));
	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q1st), "deny", NULL));
	EXPECT_EQ(ECONNRESET, guest_error(g1));
	conn = proxyfix__up_accept(_metadata, self->denied_tcp);
	ASSERT_EQ(2, send(g2, "hi", 2, 0));
	ASSERT_EQ(2, read_some(conn, buf, sizeof(buf)));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy,
					 proxyfix__tcp_denied_at_least, 1, &s));
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_TCP, HOOK_GRANT));
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_TCP, HOOK_DENY));
	json_decref(q[0]);
	json_decref(q[1]);
	close(conn);
	close(g1);
	close(g2);
}

/* The question names what this VM's DNS bound the destination to. */
TEST_F_TIMEOUT(px, hook_gets_hostnames_from_bindings, 60)
{
	json_t *q, *names;
	int g;

	self->policy.real.bindings = net_bindings__create(NULL, NULL);
	ASSERT_NE(NULL, self->policy.real.bindings);
	pthread_mutex_lock(&self->policy.real.lock);
	ASSERT_EQ(0, net_bindings__insert(self->policy.real.bindings,
					  "www.example.com", ip4(DENIED), 60));
	ASSERT_EQ(0, net_bindings__insert(self->policy.real.bindings,
					  "API.example.com.", ip4(DENIED), 60));
	ASSERT_EQ(0,
		  net_bindings__insert(self->policy.real.bindings,
				       "other.example.com", ip4(ALLOWED), 60));
	pthread_mutex_unlock(&self->policy.real.lock);
	g = hook_asked(_metadata, self, HOOK_LONG_MS, &q);
	names = json_object_get(q, "hostnames");
	ASSERT_EQ(2, json_array_size(names));
	EXPECT_STREQ("api.example.com",
		     json_string_value(json_array_get(names, 0)));
	EXPECT_STREQ("www.example.com",
		     json_string_value(json_array_get(names, 1)));
	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q), "deny", NULL));
	EXPECT_EQ(ECONNRESET, guest_error(g));
	json_decref(q);
	close(g);
}

/*
 * A held UDP flow keeps its first datagrams (PROXY_UDP_HELD of them, the
 * rest dropped and counted) and sends them in order once granted.
 */
TEST_F_TIMEOUT(px, hook_udp_held_then_sent_in_order, 60)
{
	struct sockaddr_in dst = vmnet__sin(DENIED, UDP_PORT), from;
	socklen_t len = sizeof(from);
	const int sent = 6, kept = 4;
	struct proxy_stats s;
	char buf[16], want[8];
	json_t *q;
	int g;

	hook_up(_metadata, self, HOOK_LONG_MS);
	g = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
	for (int i = 0; i < sent; i++) {
		snprintf(want, sizeof(want), "d%d", i);
		ASSERT_EQ(2, sendto(g, want, 2, 0, (struct sockaddr *)&dst,
				    sizeof(dst)));
	}
	q = read_question(_metadata, &self->hook);
	EXPECT_STREQ("udp", q_str(q, "proto"));
	EXPECT_STREQ(DENIED ":5000", q_str(q, "dst"));
	/* All read while held: the ones past the bound are dropped. */
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, udp_dropped_at_least,
					 sent - kept, &s));
	EXPECT_FALSE(vmnet__wait_for(self->denied_udp, POLLIN, 0));

	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q), "grant", NULL));
	for (int i = 0; i < kept; i++) {
		snprintf(want, sizeof(want), "d%d", i);
		ASSERT_TRUE(
			vmnet__wait_for(self->denied_udp, POLLIN, TIMEOUT_MS));
		len = sizeof(from);
		ASSERT_EQ(2, recvfrom(self->denied_udp, buf, sizeof(buf), 0,
				      (struct sockaddr *)&from, &len));
		EXPECT_EQ(0, memcmp(buf, want, 2));
	}
	/* And the way back, from where the guest sent to. */
	ASSERT_EQ(4, sendto(self->denied_udp, "pong", 4, 0,
			    (struct sockaddr *)&from, len));
	ASSERT_TRUE(vmnet__wait_for(g, POLLIN, TIMEOUT_MS));
	len = sizeof(from);
	ASSERT_EQ(4, recvfrom(g, buf, sizeof(buf), 0, (struct sockaddr *)&from,
			      &len));
	expect_addr(_metadata, &from, DENIED, UDP_PORT);
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_UDP, HOOK_GRANT));
	EXPECT_EQ(sent - kept, s.udp_dropped);
	EXPECT_EQ(1, s.udp_open);
	json_decref(q);
	close(g);
}

static bool calls_at_least(struct test_policy *tp, unsigned int n)
{
	for (int waited = 0; waited < TIMEOUT_MS * 1000;
	     waited += STATS_POLL_US) {
		if (__atomic_load_n(&tp->calls, __ATOMIC_RELAXED) >= n)
			return true;
		usleep(STATS_POLL_US);
	}
	return false;
}

/*
 * A recheck keeps a flow the hook granted while the policy names the
 * same hook socket, and cuts it once it names another.
 */
TEST_F_TIMEOUT(px, hook_grant_kept_while_same_hook, 60)
{
	struct proxy_stats s;
	unsigned int calls;
	char buf[8];
	int g, conn;
	json_t *q;

	g = hook_asked(_metadata, self, HOOK_LONG_MS, &q);
	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q), "grant", NULL));
	conn = proxyfix__up_accept(_metadata, self->denied_tcp);

	/* The same socket, another deadline: kept. */
	calls = __atomic_load_n(&self->policy.calls, __ATOMIC_RELAXED);
	set_policy(_metadata, self, NULL, self->hook.path, HOOK_LONG_MS + 1);
	proxy__recheck(self->proxy);
	ASSERT_TRUE(calls_at_least(&self->policy, calls + 1));
	ASSERT_EQ(2, send(g, "ok", 2, 0));
	ASSERT_EQ(2, read_some(conn, buf, sizeof(buf)));
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(0, s.tcp_cut);

	/* Another socket: cut, both ways. */
	set_policy(_metadata, self, NULL, "/run/kiln-other-hook.sock",
		   HOOK_LONG_MS);
	proxy__recheck(self->proxy);
	EXPECT_EQ(ECONNRESET, guest_error(g));
	EXPECT_GE(0, read_some(conn, buf, sizeof(buf)));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, tcp_cut_at_least, 1, &s));
	EXPECT_EQ(0, s.tcp_open);
	EXPECT_EQ(1, s.hook.questions); /* a recheck asks no hook */
	json_decref(q);
	close(conn);
	close(g);
}

/*
 * A held flow when the policy is replaced by one whose rules grant it:
 * opened without waiting for the hook, whose late answer is ignored.
 */
TEST_F_TIMEOUT(px, hook_held_flow_settled_by_recheck, 60)
{
	struct proxy_stats s;
	char buf[4];
	int g, conn;
	json_t *q;

	g = hook_asked(_metadata, self, HOOK_LONG_MS, &q);
	set_policy(_metadata, self, DENIED, NULL, 0);
	proxy__recheck(self->proxy);
	ASSERT_TRUE(vmnet__wait_for(self->denied_tcp, POLLIN, TIMEOUT_MS))
	TH_LOG("the new rules' grant did not open the held flow");
	conn = accept4(self->denied_tcp, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	ASSERT_EQ(2, send(g, "hi", 2, 0));
	ASSERT_EQ(2, read_some(conn, buf, sizeof(buf)));

	ASSERT_EQ(0, fakehook__answer(&self->hook, q_id(q), "deny", NULL));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, hook_ignored_at_least, 1,
					 &s));
	EXPECT_EQ(1, reason_flows(&s, IPPROTO_TCP, "tcp grant 1"));
	EXPECT_EQ(0, s.tcp_denied);
	EXPECT_EQ(1, s.tcp_open);
	EXPECT_EQ(0, s.hook.pending);
	ASSERT_EQ(2, send(conn, "on", 2, 0));
	ASSERT_EQ(2, read_some(g, buf, sizeof(buf)));
	json_decref(q);
	close(conn);
	close(g);
}

TEST_HARNESS_MAIN
