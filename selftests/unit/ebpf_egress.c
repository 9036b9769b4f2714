// SPDX-License-Identifier: GPL-2.0
/*
 * The default-deny egress program (ebpf/egress.bpf.c) and its loader,
 * without any VM. Root only (loading BPF, namespaces): a skip otherwise.
 * Each test process unshares a network namespace of its own.
 *
 * - Verdicts that need no socket: hand-built frames through
 *   BPF_PROG_TEST_RUN, each checked for its verdict and its counter;
 *   the SYN filter's, and the RST it sends back, byte by byte.
 *   The test run hands the frame to the program as if it came in on
 *   `lo`, whose MAC is all zeroes: unicast frames go to that MAC.
 * - The whole path with real kernel stacks: a veth pair stands in for
 *   the tap (the same ingress), its VM end in this process's netns (the
 *   "VM netns", the program on its ingress, the proxy sockets here) and
 *   its other end in a second netns, the "guest netns", where the test
 *   makes the guest's sockets. Every address is one of the two
 *   namespaces'; nothing leaves them.
 *
 * Negative checks ("this connection never happens") wait a fixed
 * QUIET_MS and then look; the counters say why it did not happen.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "lib/compiler.h"
#include "ebpf/loader.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "selftests/spawn.h"

#define GATEWAY	   "10.0.2.2"
#define GUEST	   "10.0.2.15"
#define PREFIX_LEN 24
#define TEST_NET1  "192.0.2.1" /* RFC 5737 documentation addresses */
#define TEST_NET2  "198.51.100.7"
#define TEST_NET3  "203.0.113.9"

#define DNS_PORT       53
#define SSH_PORT       22
#define HTTPS_PORT     443
#define UDP_TEST_PORT  5000
#define PROXY_TCP_PORT 15001 /* the vmm's listener, in the VM netns */
#define PROXY_UDP_PORT 15002
#define GUEST_PORT     40000 /* a source port for hand-built frames */

#define VETH_VM	     "kiln-vm0"
#define VETH_GUEST   "kiln-guest0"
#define LOCAL_TABLE  "100" /* routes every address on the VETH_VM to lo */
#define LOCAL_RULE   "100" /* its rule's preference */
#define TIMEOUT_MS   5000  /* something that should happen, happens */
#define QUIET_MS     1000  /* something that should not, has not */
#define FRAME_MAX    128
#define IPV4_MF	     0x2000
#define IPV4_OFF_ONE 0x0001 /* fragment offset of 8 bytes */
#define ARP_LEN	     28	    /* Ethernet/IPv4 ARP (RFC 826) */

static const uint8_t lo_mac[ETH_ALEN];
static const uint8_t bcast_mac[ETH_ALEN] = {
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff
};
static const uint8_t other_mac[ETH_ALEN] = {
	0x02, 0x4b, 0x69, 0x6c, 0x6e, 0x09
};
static const uint8_t guest_mac[ETH_ALEN] = {
	0x02, 0x4b, 0x69, 0x6c, 0x6e, 0x01
};

static in_addr_t ip4(const char *s)
{
	return inet_addr(s);
}

static bool be_root(struct __test_metadata *_metadata)
{
	if (geteuid()) {
		SKIP(return false, "not root: loading BPF and network "
				   "namespaces need CAP_BPF, CAP_NET_ADMIN "
				   "and CAP_SYS_ADMIN");
	}
	return true;
}

static struct egress *load(struct __test_metadata *_metadata)
{
	struct egress_config cfg = { .prefix_len = PREFIX_LEN };
	struct egress *e = NULL;
	char err[256] = "";

	cfg.gateway.s_addr = ip4(GATEWAY);
	cfg.guest.s_addr = ip4(GUEST);
	ASSERT_EQ(0, egress__create(&e, &cfg, err, sizeof(err)))
	TH_LOG("%s", err);
	return e;
}

static void read_counters(struct __test_metadata *_metadata, struct egress *e,
			  uint64_t c[EGRESS_NR_REASONS])
{
	char err[256] = "";

	ASSERT_EQ(0, egress__read_counters(e, c, err, sizeof(err)))
	TH_LOG("%s", err);
}

/* ---- hand-built frames ------------------------------------------- */

struct frame {
	/*
	 * NET_IP_ALIGN, as drivers do: the IP header after the 14-byte
	 * Ethernet header lands 4-byte aligned, as struct iphdr wants.
	 */
	uint8_t pad[2];
	uint8_t b[FRAME_MAX];
	size_t len;
};

static void *eth(struct frame *f, const uint8_t dst[ETH_ALEN], uint16_t proto)
{
	struct ethhdr *h = (struct ethhdr *)f->b;

	memset(f, 0, sizeof(*f));
	memcpy(h->h_dest, dst, ETH_ALEN);
	memcpy(h->h_source, guest_mac, ETH_ALEN);
	h->h_proto = htons(proto);
	f->len = ETH_HLEN;
	return f->b + ETH_HLEN;
}

static void arp(struct frame *f, const uint8_t dst[ETH_ALEN], uint16_t op,
		const char *spa, const char *tpa)
{
	uint8_t *a = eth(f, dst, ETH_P_ARP);
	in_addr_t s = ip4(spa), t = ip4(tpa);

	a[1] = 1; /* htype Ethernet */
	a[2] = ETH_P_IP >> 8;
	a[3] = ETH_P_IP & 0xff;
	a[4] = ETH_ALEN;
	a[5] = sizeof(in_addr_t);
	a[7] = op;
	memcpy(a + 8, guest_mac, ETH_ALEN);
	memcpy(a + 14, &s, sizeof(s));
	memcpy(a + 24, &t, sizeof(t));
	f->len += ARP_LEN;
}

/* An IPv4 header without options; the caller adds l4len bytes after it. */
static struct iphdr *ipv4(struct frame *f, const uint8_t dst_mac[ETH_ALEN],
			  const char *src, const char *dst, uint8_t proto,
			  size_t l4len)
{
	struct iphdr *ip = eth(f, dst_mac, ETH_P_IP);

	ip->version = 4;
	ip->ihl = sizeof(*ip) / 4;
	ip->tot_len = htons(sizeof(*ip) + l4len);
	ip->ttl = 64;
	ip->protocol = proto;
	ip->saddr = ip4(src);
	ip->daddr = ip4(dst);
	f->len += sizeof(*ip) + l4len;
	return ip;
}

static struct iphdr *tcp(struct frame *f, const char *src, const char *dst,
			 uint16_t dport, bool syn, bool ack)
{
	struct iphdr *ip =
		ipv4(f, lo_mac, src, dst, IPPROTO_TCP, sizeof(struct tcphdr));
	struct tcphdr *t = (struct tcphdr *)(ip + 1);

	t->source = htons(GUEST_PORT);
	t->dest = htons(dport);
	t->doff = sizeof(*t) / 4;
	t->syn = syn;
	t->ack = ack;
	t->window = htons(1024);
	return ip;
}

static struct iphdr *udp(struct frame *f, const uint8_t dst_mac[ETH_ALEN],
			 const char *src, const char *dst, uint16_t dport)
{
	struct iphdr *ip =
		ipv4(f, dst_mac, src, dst, IPPROTO_UDP, sizeof(struct udphdr));
	struct udphdr *u = (struct udphdr *)(ip + 1);

	u->source = htons(GUEST_PORT);
	u->dest = htons(dport);
	u->len = htons(sizeof(*u));
	return ip;
}

static void icmp_echo(struct frame *f, const char *dst)
{
	struct iphdr *ip = ipv4(f, lo_mac, GUEST, dst, IPPROTO_ICMP,
				sizeof(struct icmphdr));
	struct icmphdr *i = (struct icmphdr *)(ip + 1);

	i->type = ICMP_ECHO;
}

/* The program's verdict on f (TC_ACT_OK or TC_ACT_SHOT). */
static int run(struct __test_metadata *_metadata, struct egress *e,
	       const struct frame *f)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = f->b,
		    .data_size_in = f->len, .repeat = 1);

	ASSERT_EQ(0, bpf_prog_test_run_opts(egress__prog_fd(e), &opts))
	TH_LOG("BPF_PROG_TEST_RUN (%zu bytes, EtherType %02x%02x): %s", f->len,
	       f->b[12], f->b[13], strerror(errno));
	return opts.retval;
}

/*
 * Runs f and checks its verdict and that exactly one counter, reason's,
 * went up by one.
 */
#define EXPECT_VERDICT(e, f, reason) \
	expect_verdict(_metadata, e, f, reason, __LINE__)

static void expect_verdict(struct __test_metadata *_metadata, struct egress *e,
			   const struct frame *f, enum egress_reason reason,
			   int line)
{
	uint64_t before[EGRESS_NR_REASONS], after[EGRESS_NR_REASONS];
	int want = egress__reason_passes(reason) ? TC_ACT_OK : TC_ACT_SHOT;

	if (reason == EGRESS_TCP_REFUSED)
		want = TC_ACT_REDIRECT; /* the RST, back out of the tap */

	read_counters(_metadata, e, before);
	EXPECT_EQ(want, run(_metadata, e, f))
	TH_LOG("line %d: verdict for %s", line, egress__reason_name(reason));
	read_counters(_metadata, e, after);
	for (int r = 0; r < EGRESS_NR_REASONS; r++) {
		EXPECT_EQ(before[r] + (r == (int)reason), after[r])
		TH_LOG("line %d: counter %s, expected %s", line,
		       egress__reason_name(r), egress__reason_name(reason));
	}
}

FIXTURE(prog)
{
	struct egress *e;
	struct frame f;
};

FIXTURE_SETUP(prog)
{
	if (!be_root(_metadata))
		return;
	ASSERT_EQ(0, unshare(CLONE_NEWNET))
	TH_LOG("unshare(CLONE_NEWNET): %s", strerror(errno));
	self->e = load(_metadata);
}

FIXTURE_TEARDOWN(prog)
{
	egress__destroy(self->e);
}

TEST_F(prog, arp_for_gateway_passes)
{
	arp(&self->f, bcast_mac, 1, GUEST, GATEWAY);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_PASS);
	arp(&self->f, lo_mac, 2, GUEST, GATEWAY); /* a reply */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_PASS);
}

TEST_F(prog, other_arp_drops)
{
	arp(&self->f, bcast_mac, 1, GUEST, "10.0.2.3");
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_DROP);
	arp(&self->f, bcast_mac, 1, GUEST, GUEST); /* gratuitous */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_DROP);
	arp(&self->f, bcast_mac, 1, "10.0.2.99", GATEWAY); /* not the guest's */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_DROP);
	arp(&self->f, bcast_mac, 3, GUEST, GATEWAY); /* RARP request */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_DROP);
	arp(&self->f, bcast_mac, 1, GUEST, GATEWAY);
	self->f.len = ETH_HLEN + ARP_LEN - 1; /* cut short */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_ARP_DROP);
}

TEST_F(prog, ipv6_and_other_ethertypes_drop)
{
	eth(&self->f, lo_mac, ETH_P_IPV6);
	self->f.b[ETH_HLEN] = 0x60;
	self->f.len += 40;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NOT_IPV4);
	eth(&self->f, lo_mac, ETH_P_8021Q); /* a tag the kernel kept */
	self->f.len += 4 + 20;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NOT_IPV4);
	eth(&self->f, bcast_mac, ETH_P_802_EX1);
	self->f.len += 46;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NOT_IPV4);
}

TEST_F(prog, icmp_drops)
{
	icmp_echo(&self->f, TEST_NET2);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NOT_TCP_UDP);
	icmp_echo(&self->f, GATEWAY);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NOT_TCP_UDP);
}

TEST_F(prog, fragments_drop)
{
	struct iphdr *ip;

	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->frag_off = htons(IPV4_MF); /* the first fragment */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_FRAGMENT);
	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->frag_off = htons(IPV4_OFF_ONE); /* the last one */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_FRAGMENT);
	ip = tcp(&self->f, GUEST, GATEWAY, DNS_PORT, true, false);
	ip->frag_off = htons(IPV4_MF | IPV4_OFF_ONE); /* even DNS */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_FRAGMENT);
}

TEST_F(prog, garbage_drops)
{
	struct iphdr *ip;

	/*
	 * The test run refuses IPv4 frames shorter than an IP header
	 * (-EINVAL), so a cut-short one is tested at the TCP and UDP
	 * headers below; zeroes where the IP header should be here.
	 */
	eth(&self->f, lo_mac, ETH_P_IP);
	self->f.len += sizeof(*ip);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);

	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->version = 6;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);
	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->ihl = 4;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);
	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->ihl = 6;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_IP_OPTIONS);
	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->tot_len = htons(self->f.len); /* past the frame's end */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);
	ip = udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	ip->tot_len = htons(sizeof(*ip) - 1);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);

	tcp(&self->f, GUEST, TEST_NET2, HTTPS_PORT, true, false);
	self->f.len -= 1; /* TCP header cut short */
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);
	udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	self->f.len -= 1;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);

	/* Noise: whatever it is, it does not pass. */
	for (unsigned int i = 0; i < sizeof(self->f.b); i++)
		self->f.b[i] = (uint8_t)(i * 37 + 11);
	self->f.len = sizeof(self->f.b);
	EXPECT_EQ(TC_ACT_SHOT, run(_metadata, self->e, &self->f));
}

TEST_F(prog, no_proxy_socket_fails_closed)
{
	tcp(&self->f, GUEST, TEST_NET2, HTTPS_PORT, true, false);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	/* Not a SYN, and no socket has the flow. */
	tcp(&self->f, GUEST, TEST_NET2, HTTPS_PORT, false, true);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_STRAY);
	tcp(&self->f, GUEST, TEST_NET2, HTTPS_PORT, true, true);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_STRAY);
}

TEST_F(prog, gateway_offers_only_dns)
{
	udp(&self->f, lo_mac, GUEST, GATEWAY, DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_DNS);
	tcp(&self->f, GUEST, GATEWAY, DNS_PORT, true, false);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_DNS);
	tcp(&self->f, GUEST, GATEWAY, SSH_PORT, true, false);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TO_GATEWAY_OTHER);
	udp(&self->f, lo_mac, GUEST, GATEWAY, 67);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TO_GATEWAY_OTHER);
}

/*
 * Port 53 at any other address is the vmm's resolver's too (issue 31):
 * passed to the VM netns's own sockets, never to the proxy, whatever the
 * proxy's slots hold; a segment of a DNS stream as well as its SYN.
 */
TEST_F(prog, dns_to_any_address_passes_to_the_resolver)
{
	udp(&self->f, lo_mac, GUEST, TEST_NET3, DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_DNS);
	tcp(&self->f, GUEST, TEST_NET2, DNS_PORT, true, false);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_DNS);
	tcp(&self->f, GUEST, TEST_NET2, DNS_PORT, false, true);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_DNS);
	/* Another port there still goes to the proxy (no slot here). */
	udp(&self->f, lo_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
}

TEST_F(prog, addresses_checked)
{
	udp(&self->f, lo_mac, "10.0.2.16", TEST_NET3, UDP_TEST_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_SPOOFED);
	udp(&self->f, lo_mac, TEST_NET1, GATEWAY, DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_SPOOFED);
	udp(&self->f, lo_mac, GUEST, "10.0.2.255", DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BROADCAST);
	udp(&self->f, bcast_mac, GUEST, "255.255.255.255", 67);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BROADCAST);
	udp(&self->f, lo_mac, GUEST, "224.0.0.251", 5353);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BROADCAST);
	udp(&self->f, bcast_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BROADCAST);
	udp(&self->f, other_mac, GUEST, TEST_NET3, UDP_TEST_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_OTHER_HOST);
	udp(&self->f, lo_mac, GUEST, "127.0.0.1", DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BAD_DEST);
	udp(&self->f, lo_mac, GUEST, "0.1.2.3", DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BAD_DEST);
	tcp(&self->f, GUEST, GUEST, HTTPS_PORT, true, false);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_BAD_DEST);
}

/* ---- the SYN filter: refused with an RST ------------------------- */

/* The one's complement sum of n bytes, folded, not inverted (RFC 1071). */
static uint16_t sum16(const void *data, size_t n, uint32_t sum)
{
	const uint8_t *b = data;

	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)b[i] << 8 | b[i + 1];
	if (n & 1)
		sum += (uint32_t)b[n - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

/* The TCP pseudo-header's sum for ip's addresses and len bytes of TCP. */
static uint16_t pseudo16(const struct iphdr *ip, uint16_t len)
{
	uint8_t ph[12] = { 0 };

	memcpy(ph, &ip->saddr, 4);
	memcpy(ph + 4, &ip->daddr, 4);
	ph[9] = IPPROTO_TCP;
	ph[10] = len >> 8;
	ph[11] = len & 0xff;
	return sum16(ph, sizeof(ph), 0);
}

/* A SYN with a sequence number, an option and a full checksum. */
static struct iphdr *syn(struct frame *f, const char *dst, uint16_t dport)
{
	struct iphdr *ip = ipv4(f, lo_mac, GUEST, dst, IPPROTO_TCP,
				sizeof(struct tcphdr) + 4);
	struct tcphdr *t = (struct tcphdr *)(ip + 1);
	uint8_t *mss = (uint8_t *)(t + 1);

	t->source = htons(GUEST_PORT);
	t->dest = htons(dport);
	t->seq = htonl(0xfffffff0); /* its + 1 wraps nowhere near */
	t->doff = (sizeof(*t) + 4) / 4;
	t->syn = 1;
	t->window = htons(1024);
	mss[0] = 2; /* MSS, 4 bytes, 1460 */
	mss[1] = 4;
	mss[2] = 1460 >> 8;
	mss[3] = 1460 & 0xff;
	ip->check = htons(~sum16(ip, sizeof(*ip), 0) & 0xffff);
	t->check =
		htons(~sum16(t, sizeof(*t) + 4, pseudo16(ip, sizeof(*t) + 4)) &
		      0xffff);
	return ip;
}

/* The program's verdict on f, and the frame it leaves in *out. */
static int run_out(struct __test_metadata *_metadata, struct egress *e,
		   const struct frame *f, struct frame *out)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = f->b,
		    .data_size_in = f->len, .data_out = out->b,
		    .data_size_out = sizeof(out->b), .repeat = 1);

	memset(out, 0, sizeof(*out));
	ASSERT_EQ(0, bpf_prog_test_run_opts(egress__prog_fd(e), &opts))
	TH_LOG("BPF_PROG_TEST_RUN: %s", strerror(errno));
	out->len = opts.data_size_out;
	return opts.retval;
}

static void syn_put(struct __test_metadata *_metadata, struct egress *e,
		    const char *addr, unsigned int prefix, uint16_t lo,
		    uint16_t hi)
{
	struct egress_syn_key key = { .prefixlen = prefix, .addr = ip4(addr) };
	struct egress_syn_ports v = { .nr = 1, .range[0] = { lo, hi } };
	char err[256] = "";

	ASSERT_EQ(0, egress__syn_put(e, &key, &v, err, sizeof(err)))
	TH_LOG("%s", err);
}

/* Off (as loaded): every SYN goes on to the proxy, as before the filter. */
TEST_F(prog, syn_filter_off_passes_every_syn)
{
	syn(&self->f, TEST_NET2, SSH_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	syn_put(_metadata, self->e, TEST_NET2, 32, HTTPS_PORT, HTTPS_PORT);
	syn(&self->f, TEST_NET2, SSH_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
}

TEST_F(prog, syn_filter_decides_by_prefix_and_port)
{
	char err[256] = "";

	syn_put(_metadata, self->e, TEST_NET2, 32, HTTPS_PORT, HTTPS_PORT);
	syn_put(_metadata, self->e, "203.0.113.0", 24, 8000, 8100);
	syn_put(_metadata, self->e, "0.0.0.0", 0, SSH_PORT, SSH_PORT);
	egress__syn_check(self->e, true);

	syn(&self->f, TEST_NET2, HTTPS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	/* The longest prefix alone decides: its ports, not the /0's. */
	syn(&self->f, TEST_NET2, SSH_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_REFUSED);
	syn(&self->f, TEST_NET3, 8000);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	syn(&self->f, TEST_NET3, 8101);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_REFUSED);
	syn(&self->f, TEST_NET1, SSH_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	syn(&self->f, TEST_NET1, HTTPS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_REFUSED);

	/* Only a SYN is refused; the rest stays as it was. */
	tcp(&self->f, GUEST, TEST_NET1, HTTPS_PORT, false, true);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_STRAY);
	udp(&self->f, lo_mac, GUEST, TEST_NET1, UDP_TEST_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	icmp_echo(&self->f, TEST_NET1);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NOT_TCP_UDP);
	syn(&self->f, TEST_NET1, DNS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_DNS);
	syn(&self->f, GATEWAY, SSH_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TO_GATEWAY_OTHER);

	/* Cleared: off again, and empty. */
	ASSERT_EQ(0, egress__syn_clear(self->e, err, sizeof(err)))
	TH_LOG("%s", err);
	syn(&self->f, TEST_NET1, HTTPS_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	egress__syn_check(self->e, true);
	syn(&self->f, TEST_NET1, SSH_PORT);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_TCP_REFUSED);
}

TEST_F(prog, syn_filter_map_calls)
{
	struct egress_syn_key key = { .prefixlen = 24,
				      .addr = ip4("203.0.113.0") };
	struct egress_syn_ports v = { .nr = EGRESS_SYN_MAX_RANGES + 1 };
	char err[256] = "";

	EXPECT_EQ(-EINVAL,
		  egress__syn_put(self->e, &key, &v, err, sizeof(err)));
	v.nr = 1;
	key.prefixlen = 33;
	EXPECT_EQ(-EINVAL,
		  egress__syn_put(self->e, &key, &v, err, sizeof(err)));
	EXPECT_EQ(-ENOENT, egress__syn_get(self->e, ip4(TEST_NET3), &v));
	syn_put(_metadata, self->e, "203.0.113.0", 24, 8000, 8100);
	memset(&v, 0, sizeof(v));
	ASSERT_EQ(0, egress__syn_get(self->e, ip4(TEST_NET3), &v));
	EXPECT_EQ(1, v.nr);
	EXPECT_EQ(8000, v.range[0].lo);
	EXPECT_EQ(8100, v.range[0].hi);
	EXPECT_EQ(-ENOENT, egress__syn_get(self->e, ip4(TEST_NET2), &v));
}

/* The RST: what a closed port would send, from where the guest asked. */
TEST_F(prog, refused_syn_becomes_an_rst)
{
	struct {
		struct iphdr ip;
		struct tcphdr t;
	} h; /* copied out: out.b has no room before it for the alignment */
	const struct iphdr *ip = &h.ip, *sip;
	const struct tcphdr *t = &h.t, *st;
	const struct ethhdr *eth;
	struct frame out;
	struct iphdr *in;

	egress__syn_check(self->e, true);
	in = syn(&self->f, TEST_NET2, SSH_PORT);
	sip = in;
	st = (const struct tcphdr *)(sip + 1);
	ASSERT_EQ(TC_ACT_REDIRECT, run_out(_metadata, self->e, &self->f, &out));
	ASSERT_EQ(ETH_HLEN + sizeof(*ip) + sizeof(*t), out.len);
	eth = (const struct ethhdr *)out.b;
	EXPECT_EQ(0, memcmp(eth->h_dest, guest_mac, ETH_ALEN));
	EXPECT_EQ(0, memcmp(eth->h_source, lo_mac, ETH_ALEN));
	EXPECT_EQ(ETH_P_IP, ntohs(eth->h_proto));
	memcpy(&h, out.b + ETH_HLEN, sizeof(h));
	EXPECT_EQ(4, (int)ip->version);
	EXPECT_EQ(5, (int)ip->ihl);
	EXPECT_EQ(sizeof(h), ntohs(ip->tot_len));
	EXPECT_EQ(IPPROTO_TCP, ip->protocol);
	EXPECT_LT(0, ip->ttl);
	EXPECT_EQ(ip4(TEST_NET2), ip->saddr);
	EXPECT_EQ(ip4(GUEST), ip->daddr);
	EXPECT_EQ(0xffff, sum16(ip, sizeof(*ip), 0)) TH_LOG("IP checksum");
	EXPECT_EQ(st->dest, t->source);
	EXPECT_EQ(st->source, t->dest);
	EXPECT_EQ(0, t->seq);
	EXPECT_EQ(ntohl(st->seq) + 1, ntohl(t->ack_seq));
	EXPECT_EQ(5, (int)t->doff);
	EXPECT_TRUE(t->rst);
	EXPECT_TRUE(t->ack);
	EXPECT_FALSE(t->syn);
	EXPECT_FALSE(t->fin);
	EXPECT_FALSE(t->psh);
	EXPECT_EQ(0xffff, sum16(t, sizeof(*t), pseudo16(ip, sizeof(*t))))
	TH_LOG("TCP checksum");

	/*
	 * A SYN whose checksum the guest left to the tap (its field holds
	 * the pseudo-header's sum): the RST's holds its own, for whoever
	 * completes it.
	 */
	in = syn(&self->f, TEST_NET2, SSH_PORT);
	((struct tcphdr *)(in + 1))->check =
		htons(pseudo16(in, sizeof(struct tcphdr) + 4));
	ASSERT_EQ(TC_ACT_REDIRECT, run_out(_metadata, self->e, &self->f, &out));
	memcpy(&h, out.b + ETH_HLEN, sizeof(h));
	EXPECT_EQ(pseudo16(ip, sizeof(*t)), ntohs(t->check));
	EXPECT_EQ(0xffff, sum16(ip, sizeof(*ip), 0));

	/* A SYN with data (TCP Fast Open): the ACK covers it too. */
	in = syn(&self->f, TEST_NET2, SSH_PORT);
	in->tot_len = htons(ntohs(in->tot_len) + 3);
	self->f.len += 3;
	ASSERT_EQ(TC_ACT_REDIRECT, run_out(_metadata, self->e, &self->f, &out));
	memcpy(&h, out.b + ETH_HLEN, sizeof(h));
	EXPECT_EQ(0xfffffff0U + 1 + 3, ntohl(t->ack_seq));

	/* A data offset past the segment: dropped, not answered. */
	in = syn(&self->f, TEST_NET2, SSH_PORT);
	((struct tcphdr *)(in + 1))->doff = 15;
	EXPECT_VERDICT(self->e, &self->f, EGRESS_MALFORMED);
}

/* ---- the loader ---------------------------------------------------- */

TEST(reason_names)
{
	for (int r = 0; r < EGRESS_NR_REASONS; r++) {
		EXPECT_NE(NULL, egress__reason_name(r));
		EXPECT_EQ(r <= EGRESS_LAST_PASS, egress__reason_passes(r));
	}
	EXPECT_EQ(NULL, egress__reason_name(EGRESS_NR_REASONS));
	EXPECT_STREQ("tcp_proxy", egress__reason_name(EGRESS_TCP_PROXY));
	EXPECT_STREQ("no_proxy", egress__reason_name(EGRESS_NO_PROXY));
}

TEST(bad_config_refused)
{
	static const struct {
		const char *gateway, *guest;
		unsigned int prefix_len;
	} bad[] = {
		{ GATEWAY, GUEST, 0 },
		{ GATEWAY, GUEST, 31 },
		{ GATEWAY, "10.0.3.15", 24 }, /* not one subnet */
		{ GATEWAY, GATEWAY, 24 },
		{ "10.0.2.0", GUEST, 24 },     /* the network's address */
		{ GATEWAY, "10.0.2.255", 24 }, /* its broadcast */
	};
	struct egress *e = (struct egress *)&e; /* create must clear it */
	char err[256];

	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		struct egress_config cfg = { .prefix_len = bad[i].prefix_len };

		cfg.gateway.s_addr = ip4(bad[i].gateway);
		cfg.guest.s_addr = ip4(bad[i].guest);
		err[0] = 0;
		EXPECT_EQ(-EINVAL, egress__create(&e, &cfg, err, sizeof(err)))
		TH_LOG("case %u", i);
		EXPECT_EQ(NULL, e);
		EXPECT_NE(0, err[0]);
	}
}

static int proxy_socket(int type, bool transparent, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port) };
	int one = 1, fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if ((transparent &&
	     setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof(one))) ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    (type == SOCK_DGRAM &&
	     setsockopt(fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof(one))) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    (type == SOCK_STREAM && listen(fd, SOMAXCONN))) {
		close(fd);
		return -1;
	}
	return fd;
}

TEST_F(prog, wrong_proxy_sockets_refused)
{
	int plain = proxy_socket(SOCK_STREAM, false, PROXY_TCP_PORT);
	int lsn = proxy_socket(SOCK_STREAM, true, PROXY_TCP_PORT + 10);
	int dgram = proxy_socket(SOCK_DGRAM, true, PROXY_UDP_PORT);
	int unbound = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int blind = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int one = 1;
	char err[256];

	ASSERT_LE(0, plain);
	ASSERT_LE(0, lsn);
	ASSERT_LE(0, dgram);
	ASSERT_LE(0, unbound);
	ASSERT_LE(0, blind);
	ASSERT_EQ(0, setsockopt(unbound, SOL_IP, IP_TRANSPARENT, &one,
				sizeof(one)));
	ASSERT_EQ(0,
		  setsockopt(blind, SOL_IP, IP_TRANSPARENT, &one, sizeof(one)));
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_SLOT_TCP, plain,
					     err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_SLOT_TCP, dgram,
					     err, sizeof(err)));
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_SLOT_TCP, unbound,
					     err, sizeof(err)));
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_SLOT_UDP, lsn, err,
					     sizeof(err)));
	/* No IP_RECVORIGDSTADDR: the vmm would not see the destination. */
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_SLOT_UDP, blind,
					     err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_NR_SLOTS, lsn, err,
					     sizeof(err)));
	EXPECT_EQ(-ENOTSOCK, egress__set_proxy(self->e, EGRESS_SLOT_TCP, 0, err,
					       sizeof(err)));

	/* The right ones go in, and out again. */
	EXPECT_EQ(0, egress__set_proxy(self->e, EGRESS_SLOT_TCP, lsn, err,
				       sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(0, egress__set_proxy(self->e, EGRESS_SLOT_UDP, dgram, err,
				       sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(0, egress__clear_proxy(self->e, EGRESS_SLOT_TCP, err,
					 sizeof(err)));
	EXPECT_EQ(0, egress__clear_proxy(self->e, EGRESS_SLOT_TCP, err,
					 sizeof(err)));
	tcp(&self->f, GUEST, TEST_NET2, HTTPS_PORT, true, false);
	EXPECT_VERDICT(self->e, &self->f, EGRESS_NO_PROXY);
	close(plain);
	close(lsn);
	close(dgram);
	close(unbound);
	close(blind);
}

/* A socket of another netns is refused: the kernel could not assign it. */
TEST_F(prog, proxy_of_another_netns_refused)
{
	int here = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	int lsn;
	char err[256] = "";

	ASSERT_LE(0, here);
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	lsn = proxy_socket(SOCK_STREAM, true, PROXY_TCP_PORT);
	ASSERT_LE(0, lsn);
	ASSERT_EQ(0, setns(here, CLONE_NEWNET));
	EXPECT_EQ(-EINVAL, egress__set_proxy(self->e, EGRESS_SLOT_TCP, lsn, err,
					     sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "netns")) TH_LOG("%s", err);
	close(lsn);
	close(here);
}

/* ---- end to end: a veth pair between a VM netns and a guest netns --- */

FIXTURE(e2e)
{
	int vm_ns, guest_ns;
	struct egress *e;
	int lsn, udp, dns_udp, dns_tcp, ssh;
};

static void ip_cmd(struct __test_metadata *_metadata, const char *const argv[])
{
	static struct spawn_result r;
	char cmd[256] = "";

	for (int i = 0; argv[i]; i++) {
		strncat(cmd, argv[i], sizeof(cmd) - strlen(cmd) - 2);
		strcat(cmd, " ");
	}
	ASSERT_EQ(0, spawn__run(argv, NULL, &r)) TH_LOG("%s", cmd);
	ASSERT_EQ(0, r.status) TH_LOG("%s: %s", cmd, r.err);
}

#define IP(...) \
	ip_cmd(_metadata, (const char *const[]){ "ip", __VA_ARGS__, NULL })

static void enter(struct __test_metadata *_metadata, int ns)
{
	ASSERT_EQ(0, setns(ns, CLONE_NEWNET))
	TH_LOG("setns: %s", strerror(errno));
}

/* A socket of the guest netns. */
static int guest_socket(struct __test_metadata *_metadata,
			FIXTURE_DATA(e2e) * self, int type, int proto)
{
	int fd;

	enter(_metadata, self->guest_ns);
	fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, proto);
	enter(_metadata, self->vm_ns);
	ASSERT_LE(0, fd) TH_LOG("socket: %s", strerror(errno));
	return fd;
}

static int bound_socket(struct __test_metadata *_metadata, int type,
			const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = ip4(addr) };
	int one = 1, fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	ASSERT_LE(0, fd);
	ASSERT_EQ(0,
		  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	ASSERT_EQ(0, bind(fd, (struct sockaddr *)&a, sizeof(a)))
	TH_LOG("bind %s:%d: %s", addr, port, strerror(errno));
	if (type == SOCK_STREAM)
		ASSERT_EQ(0, listen(fd, SOMAXCONN));
	return fd;
}

FIXTURE_SETUP(e2e)
{
	char guest_ns_path[64], err[256] = "";

	self->vm_ns = self->guest_ns = -1;
	self->lsn = self->udp = self->dns_udp = self->dns_tcp = self->ssh = -1;
	if (!be_root(_metadata))
		return;

	/* The VM netns is this process's; the guest's is held by an fd. */
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	test_quiet_ipv6();
	self->vm_ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, self->vm_ns);
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	test_quiet_ipv6();
	/* Without O_CLOEXEC: `ip` finds it as /proc/self/fd/N. */
	self->guest_ns = open("/proc/thread-self/ns/net", O_RDONLY);
	ASSERT_LE(0, self->guest_ns);
	snprintf(guest_ns_path, sizeof(guest_ns_path), "/proc/self/fd/%d",
		 self->guest_ns);

	IP("link", "set", "lo", "up");
	enter(_metadata, self->vm_ns);

	IP("link", "set", "lo", "up");
	IP("link", "add", VETH_VM, "type", "veth", "peer", "name", VETH_GUEST,
	   "netns", guest_ns_path);
	IP("addr", "add", GATEWAY "/24", "dev", VETH_VM);
	IP("link", "set", VETH_VM, "up");
	/*
	 * Whatever the guest sends is for this netns itself: its own table,
	 * chosen by the interface it came in on. Replies (not from VETH_VM)
	 * still use the main table's route to the guest.
	 */
	IP("route", "add", "local", "0.0.0.0/0", "dev", "lo", "table",
	   LOCAL_TABLE);
	IP("rule", "add", "pref", LOCAL_RULE, "iif", VETH_VM, "lookup",
	   LOCAL_TABLE);

	enter(_metadata, self->guest_ns);
	IP("addr", "add", GUEST "/24", "dev", VETH_GUEST);
	IP("link", "set", VETH_GUEST, "up");
	IP("route", "add", "default", "via", GATEWAY);
	enter(_metadata, self->vm_ns);

	self->e = load(_metadata);
	self->lsn = proxy_socket(SOCK_STREAM, true, PROXY_TCP_PORT);
	ASSERT_LE(0, self->lsn) TH_LOG("TCP proxy: %s", strerror(errno));
	self->udp = proxy_socket(SOCK_DGRAM, true, PROXY_UDP_PORT);
	ASSERT_LE(0, self->udp) TH_LOG("UDP proxy: %s", strerror(errno));
	ASSERT_EQ(0, egress__set_proxy(self->e, EGRESS_SLOT_TCP, self->lsn, err,
				       sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, egress__set_proxy(self->e, EGRESS_SLOT_UDP, self->udp, err,
				       sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, egress__attach(self->e, if_nametoindex(VETH_VM), err,
				    sizeof(err)))
	TH_LOG("%s", err);

	/* The resolver's sockets, and one the program must keep out of reach. */
	self->dns_udp = bound_socket(_metadata, SOCK_DGRAM, GATEWAY, DNS_PORT);
	self->dns_tcp = bound_socket(_metadata, SOCK_STREAM, GATEWAY, DNS_PORT);
	self->ssh = bound_socket(_metadata, SOCK_STREAM, "0.0.0.0", SSH_PORT);
}

FIXTURE_TEARDOWN(e2e)
{
	int fds[] = { self->lsn, self->udp,   self->dns_udp, self->dns_tcp,
		      self->ssh, self->vm_ns, self->guest_ns };

	egress__destroy(self->e);
	for (unsigned int i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static bool wait_for(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	return poll(&p, 1, ms) == 1 && (p.revents & events);
}

static struct sockaddr_in sin_of(const char *addr, int port)
{
	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_port = htons(port),
				     .sin_addr.s_addr = ip4(addr) };
}

/* A nonblocking connect from the guest; the caller waits for it. */
static int guest_connect(struct __test_metadata *_metadata,
			 FIXTURE_DATA(e2e) * self, const char *addr, int port)
{
	struct sockaddr_in a = sin_of(addr, port);
	int fd = guest_socket(_metadata, self, SOCK_STREAM, 0);

	ASSERT_EQ(-1, connect(fd, (struct sockaddr *)&a, sizeof(a)));
	ASSERT_EQ(EINPROGRESS, errno);
	return fd;
}

static bool connected(int fd)
{
	int soerr = -1;
	socklen_t len = sizeof(soerr);

	if (!wait_for(fd, POLLOUT, 0))
		return false;
	return !getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) && !soerr;
}

static void expect_addr(struct __test_metadata *_metadata,
			const struct sockaddr_in *a, const char *addr, int port)
{
	char s[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, s, sizeof(s));
	EXPECT_STREQ(addr, s);
	EXPECT_EQ(port, ntohs(a->sin_port));
}

static uint64_t counter(struct __test_metadata *_metadata, struct egress *e,
			enum egress_reason r)
{
	uint64_t c[EGRESS_NR_REASONS];

	read_counters(_metadata, e, c);
	return c[r];
}

TEST_F_TIMEOUT(e2e, tcp_to_anywhere_reaches_the_proxy, 60)
{
	struct sockaddr_in local, peer;
	socklen_t len = sizeof(peer);
	char buf[16] = "";
	int g, conn;

	g = guest_connect(_metadata, self, TEST_NET2, HTTPS_PORT);
	ASSERT_TRUE(wait_for(self->lsn, POLLIN, TIMEOUT_MS))
	TH_LOG("the listener got no connection");
	conn = accept4(self->lsn, (struct sockaddr *)&peer, &len, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	len = sizeof(local);
	ASSERT_EQ(0, getsockname(conn, (struct sockaddr *)&local, &len));
	expect_addr(_metadata, &local, TEST_NET2, HTTPS_PORT);
	EXPECT_STREQ(GUEST, inet_ntoa(peer.sin_addr));
	ASSERT_TRUE(wait_for(g, POLLOUT, TIMEOUT_MS));
	ASSERT_TRUE(connected(g));

	/* Both ways: the guest's data in, the proxy's out. */
	ASSERT_EQ(5, write(g, "hello", 5));
	ASSERT_TRUE(wait_for(conn, POLLIN, TIMEOUT_MS));
	ASSERT_EQ(5, read(conn, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "hello", 5));
	ASSERT_EQ(6, write(conn, "world!", 6));
	ASSERT_TRUE(wait_for(g, POLLIN, TIMEOUT_MS));
	ASSERT_EQ(6, read(g, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "world!", 6));

	EXPECT_EQ(1, counter(_metadata, self->e, EGRESS_TCP_PROXY));
	EXPECT_LE(2, counter(_metadata, self->e, EGRESS_TCP_ESTABLISHED));
	EXPECT_LE(1, counter(_metadata, self->e, EGRESS_ARP_PASS));
	close(conn);
	close(g);
}

TEST_F_TIMEOUT(e2e, udp_to_anywhere_reaches_the_proxy, 60)
{
	struct sockaddr_in dst = sin_of(TEST_NET3, UDP_TEST_PORT), src, from;
	char buf[16] = "", cbuf[CMSG_SPACE(sizeof(struct sockaddr_in))];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr msg = { .msg_name = &src,
			      .msg_namelen = sizeof(src),
			      .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct sockaddr_in *orig = NULL;
	socklen_t len = sizeof(from);
	int g, reply, one = 1;

	g = guest_socket(_metadata, self, SOCK_DGRAM, 0);
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(wait_for(self->udp, POLLIN, TIMEOUT_MS))
	TH_LOG("the UDP proxy got nothing");
	ASSERT_EQ(4, recvmsg(self->udp, &msg, 0));
	EXPECT_EQ(0, memcmp(buf, "ping", 4));
	EXPECT_STREQ(GUEST, inet_ntoa(src.sin_addr));
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c;
	     c = CMSG_NXTHDR(&msg, c))
		if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR)
			orig = (struct sockaddr_in *)CMSG_DATA(c);
	ASSERT_NE(NULL, orig) TH_LOG("no IP_ORIGDSTADDR");
	expect_addr(_metadata, orig, TEST_NET3, UDP_TEST_PORT);
	EXPECT_EQ(1, counter(_metadata, self->e, EGRESS_UDP_PROXY));

	/* The answer goes back from the address the guest asked. */
	reply = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, reply);
	ASSERT_EQ(0,
		  setsockopt(reply, SOL_IP, IP_TRANSPARENT, &one, sizeof(one)));
	ASSERT_EQ(0, bind(reply, (struct sockaddr *)orig, sizeof(*orig)));
	ASSERT_EQ(4, sendto(reply, "pong", 4, 0, (struct sockaddr *)&src,
			    sizeof(src)));
	ASSERT_TRUE(wait_for(g, POLLIN, TIMEOUT_MS));
	ASSERT_EQ(4, recvfrom(g, buf, sizeof(buf), 0, (struct sockaddr *)&from,
			      &len));
	EXPECT_EQ(0, memcmp(buf, "pong", 4));
	expect_addr(_metadata, &from, TEST_NET3, UDP_TEST_PORT);
	close(reply);
	close(g);
}

TEST_F_TIMEOUT(e2e, dns_reaches_the_gateway, 60)
{
	struct sockaddr_in dst = sin_of(GATEWAY, DNS_PORT);
	char buf[16];
	int g, conn;

	g = guest_socket(_metadata, self, SOCK_DGRAM, 0);
	ASSERT_EQ(5, sendto(g, "query", 5, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	ASSERT_TRUE(wait_for(self->dns_udp, POLLIN, TIMEOUT_MS));
	EXPECT_EQ(5, recv(self->dns_udp, buf, sizeof(buf), 0));
	close(g);

	g = guest_connect(_metadata, self, GATEWAY, DNS_PORT);
	ASSERT_TRUE(wait_for(self->dns_tcp, POLLIN, TIMEOUT_MS));
	conn = accept4(self->dns_tcp, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	ASSERT_TRUE(wait_for(g, POLLOUT, TIMEOUT_MS));
	EXPECT_TRUE(connected(g));
	EXPECT_LE(2, counter(_metadata, self->e, EGRESS_DNS));
	EXPECT_EQ(0, counter(_metadata, self->e, EGRESS_UDP_PROXY));
	EXPECT_EQ(0, counter(_metadata, self->e, EGRESS_TCP_PROXY));
	close(conn);
	close(g);
}

TEST_F_TIMEOUT(e2e, gateway_ssh_unreachable, 60)
{
	int g = guest_connect(_metadata, self, GATEWAY, SSH_PORT);

	/* A listener is there: only the program keeps the guest away. */
	usleep(QUIET_MS * 1000);
	EXPECT_FALSE(connected(g));
	EXPECT_FALSE(wait_for(self->ssh, POLLIN, 0));
	EXPECT_LE(1, counter(_metadata, self->e, EGRESS_TO_GATEWAY_OTHER));
	EXPECT_EQ(0, counter(_metadata, self->e, EGRESS_TCP_PROXY));
	close(g);
}

/* The error a nonblocking connect ended with, once it ended. */
static int connect_error(struct __test_metadata *_metadata, int fd)
{
	int soerr = -1;
	socklen_t len = sizeof(soerr);

	EXPECT_TRUE(wait_for(fd, POLLOUT, TIMEOUT_MS))
	TH_LOG("the connect never ended");
	EXPECT_EQ(0, getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len));
	return soerr;
}

/*
 * The guest's kernel takes the program's RST: its connect() is refused
 * at once, and the proxy's listener never sees the flow; a destination
 * the filter holds still connects.
 */
TEST_F_TIMEOUT(e2e, syn_nothing_grants_is_refused, 60)
{
	struct egress_syn_key key = { .prefixlen = 32, .addr = ip4(TEST_NET2) };
	struct egress_syn_ports v = { .nr = 1,
				      .range[0] = { HTTPS_PORT, HTTPS_PORT } };
	char err[256] = "";
	int g, conn;

	ASSERT_EQ(0, egress__syn_put(self->e, &key, &v, err, sizeof(err)))
	TH_LOG("%s", err);
	egress__syn_check(self->e, true);

	g = guest_connect(_metadata, self, TEST_NET2, SSH_PORT);
	EXPECT_EQ(ECONNREFUSED, connect_error(_metadata, g));
	close(g);
	g = guest_connect(_metadata, self, TEST_NET1, HTTPS_PORT);
	EXPECT_EQ(ECONNREFUSED, connect_error(_metadata, g));
	close(g);
	EXPECT_FALSE(wait_for(self->lsn, POLLIN, 0));
	EXPECT_EQ(2, counter(_metadata, self->e, EGRESS_TCP_REFUSED));
	EXPECT_EQ(0, counter(_metadata, self->e, EGRESS_TCP_PROXY));

	g = guest_connect(_metadata, self, TEST_NET2, HTTPS_PORT);
	ASSERT_TRUE(wait_for(self->lsn, POLLIN, TIMEOUT_MS));
	conn = accept4(self->lsn, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	EXPECT_EQ(0, connect_error(_metadata, g));
	EXPECT_EQ(1, counter(_metadata, self->e, EGRESS_TCP_PROXY));
	close(conn);
	close(g);
}

TEST_F_TIMEOUT(e2e, ping_dropped, 60)
{
	const char *dsts[] = { GATEWAY, TEST_NET2 };
	int g = guest_socket(_metadata, self, SOCK_RAW, IPPROTO_ICMP);
	char buf[256];

	for (unsigned int i = 0; i < ARRAY_SIZE(dsts); i++) {
		struct icmphdr echo = { .type = ICMP_ECHO };
		struct sockaddr_in a = sin_of(dsts[i], 0);
		uint32_t sum = 0;
		uint16_t *w = (uint16_t *)&echo;

		echo.un.echo.sequence = htons(i + 1);
		for (unsigned int k = 0; k < sizeof(echo) / 2; k++)
			sum += w[k];
		sum = (sum & 0xffff) + (sum >> 16);
		echo.checksum = (uint16_t)~sum;
		ASSERT_EQ((ssize_t)sizeof(echo),
			  sendto(g, &echo, sizeof(echo), 0,
				 (struct sockaddr *)&a, sizeof(a)));
	}
	/* Without the program this netns would answer both. */
	usleep(QUIET_MS * 1000);
	while (recv(g, buf, sizeof(buf), 0) > 0) {
		struct iphdr *ip = (struct iphdr *)buf;
		struct icmphdr *icmp = (struct icmphdr *)(buf + ip->ihl * 4);

		/* A raw socket sees what it sent, too; no replies. */
		EXPECT_NE(ICMP_ECHOREPLY, icmp->type);
	}
	EXPECT_EQ(2, counter(_metadata, self->e, EGRESS_NOT_TCP_UDP));
	close(g);
}

TEST_F_TIMEOUT(e2e, proxy_gone_fails_closed, 60)
{
	struct sockaddr_in dst = sin_of(TEST_NET3, UDP_TEST_PORT);
	int g, conn;

	/* It works while the listener is there... */
	g = guest_connect(_metadata, self, TEST_NET2, HTTPS_PORT);
	ASSERT_TRUE(wait_for(self->lsn, POLLIN, TIMEOUT_MS));
	conn = accept4(self->lsn, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, conn);
	close(conn);
	close(g);

	/* ...and nothing does once the vmm's sockets are closed. */
	close(self->lsn);
	self->lsn = -1;
	close(self->udp);
	self->udp = -1;
	g = guest_connect(_metadata, self, TEST_NET2, HTTPS_PORT);
	usleep(QUIET_MS * 1000);
	EXPECT_FALSE(connected(g));
	EXPECT_LE(1, counter(_metadata, self->e, EGRESS_NO_PROXY));
	close(g);

	g = guest_socket(_metadata, self, SOCK_DGRAM, 0);
	ASSERT_EQ(4, sendto(g, "ping", 4, 0, (struct sockaddr *)&dst,
			    sizeof(dst)));
	usleep(QUIET_MS * 1000);
	EXPECT_LE(2, counter(_metadata, self->e, EGRESS_NO_PROXY));
	EXPECT_EQ(0, counter(_metadata, self->e, EGRESS_UDP_PROXY));
	close(g);
}

TEST_HARNESS_MAIN
