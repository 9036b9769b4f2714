// SPDX-License-Identifier: GPL-2.0
/*
 * net-probe: the guest side of the network tests (selftests/kvm/net.c),
 * a static program packed as /bin/net-probe next to the test initramfs.
 *
 *	net-probe udp IP PORT MSG SECS   one datagram, then the first reply
 *	net-probe frames                 one frame of each kind the egress
 *	                                 program must drop, on eth0 (IPv6,
 *	                                 raw IP, a spoofed source, a SYN to
 *	                                 127.0.0.1, a malformed header)
 *	net-probe flood SECS             garbage frames on eth0 for SECS s
 *
 * "frames" and "flood" write whole Ethernet frames through an AF_PACKET
 * socket, addressed to the gateway's MAC (resolved by the kernel first)
 * so that only the egress program stands between them and the host. Each prints one line saying what it did; exit 0, or 1 with the
 * reason on stderr.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/if_arp.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IFNAME	      "eth0"
#define GATEWAY	      "10.0.2.2"
#define GUEST	      "10.0.2.15"
#define SPOOFED	      "10.0.2.99"
#define TARGET	      "192.0.2.10" /* the tests' host */
#define TARGET6	      "2001:db8::10"
#define LOOPBACK      "127.0.0.1"
#define LOOPBACK_PORT 7001 /* the test's listener on the host's loopback */
#define PROTO_EXP     253  /* RFC 3692: for experimentation */
#define FRAME_MIN     ETH_HLEN
#define FRAME_MAX     (ETH_HLEN + ETH_DATA_LEN)
#define MSG_MAX	      512
#define DISCARD_PORT  9 /* RFC 863 */
#define ARP_POLL_MS   100
#define ARP_RETRY_MS  1000
#define ARP_WAIT_MS   30000

static int fail(const char *what)
{
	fprintf(stderr, "net-probe: %s: %s\n", what, strerror(errno));
	return 1;
}

static int udp(char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct pollfd p = { .events = POLLIN };
	char buf[MSG_MAX + 1];
	ssize_t n;

	sin.sin_port = htons((uint16_t)atoi(argv[1]));
	if (inet_pton(AF_INET, argv[0], &sin.sin_addr) != 1) {
		fprintf(stderr, "net-probe: %s: not an IPv4 address\n",
			argv[0]);
		return 1;
	}
	p.fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (p.fd < 0)
		return fail("socket");
	if (connect(p.fd, (struct sockaddr *)&sin, sizeof(sin)))
		return fail("connect");
	if (send(p.fd, argv[2], strlen(argv[2]), 0) < 0)
		return fail("send");
	if (poll(&p, 1, atoi(argv[3]) * 1000) != 1) {
		printf("no reply\n");
		return 0;
	}
	n = recv(p.fd, buf, MSG_MAX, 0);
	if (n < 0) {
		/* ICMP unreachable from somewhere: still no reply. */
		printf("no reply (%s)\n", strerror(errno));
		return 0;
	}
	buf[n] = '\0';
	printf("reply: %s\n", buf);
	return 0;
}

/* The gateway's MAC if the ARP cache has it complete. */
static bool arp_lookup(uint8_t mac[ETH_ALEN])
{
	char line[256], ip[64], hw[64];
	FILE *f = fopen("/proc/net/arp", "r");
	unsigned int flags;
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%63s %*s %x %63s", ip, &flags, hw) == 3 &&
			!strcmp(ip, GATEWAY) && (flags & ATF_COM) &&
			sscanf(hw, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0],
			       &mac[1], &mac[2], &mac[3], &mac[4],
			       &mac[5]) == ETH_ALEN;
	fclose(f);
	return found;
}

/*
 * The gateway's MAC: a datagram to its discard port makes the kernel
 * resolve it (the egress program drops the datagram itself).
 */
static int gateway_mac(uint8_t mac[ETH_ALEN])
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(DISCARD_PORT) };
	int fd, i;

	inet_pton(AF_INET, GATEWAY, &sin.sin_addr);
	for (i = 0; i < ARP_WAIT_MS / ARP_POLL_MS; i++) {
		if (arp_lookup(mac))
			return 0;
		if (!(i % (ARP_RETRY_MS / ARP_POLL_MS))) {
			fd = socket(AF_INET, SOCK_DGRAM, 0);
			if (fd < 0)
				return fail("socket");
			sendto(fd, "", 1, 0, (struct sockaddr *)&sin,
			       sizeof(sin));
			close(fd);
		}
		usleep(ARP_POLL_MS * 1000);
	}
	fprintf(stderr, "net-probe: " GATEWAY " never answered ARP\n");
	return 1;
}

struct link {
	int fd;
	struct sockaddr_ll to;
	uint8_t src[ETH_ALEN], dst[ETH_ALEN];
};

static int link_open(struct link *l)
{
	struct ifreq ifr = { 0 };

	if (gateway_mac(l->dst))
		return 1;
	l->fd = socket(AF_PACKET, SOCK_RAW, 0);
	if (l->fd < 0)
		return fail("AF_PACKET socket");
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), IFNAME);
	if (ioctl(l->fd, SIOCGIFHWADDR, &ifr))
		return fail("SIOCGIFHWADDR " IFNAME);
	memcpy(l->src, ifr.ifr_hwaddr.sa_data, ETH_ALEN);
	l->to = (struct sockaddr_ll){ .sll_family = AF_PACKET,
				      .sll_ifindex =
					      (int)if_nametoindex(IFNAME),
				      .sll_halen = ETH_ALEN };
	memcpy(l->to.sll_addr, l->dst, ETH_ALEN);
	return l->to.sll_ifindex ? 0 : fail(IFNAME);
}

static int link_send(struct link *l, const void *frame, size_t len)
{
	return sendto(l->fd, frame, len, 0, (struct sockaddr *)&l->to,
		      sizeof(l->to)) == (ssize_t)len ?
		       0 :
		       -errno;
}

static void eth(const struct link *l, uint8_t *f, uint16_t type)
{
	struct ether_header *e = (struct ether_header *)f;

	memcpy(e->ether_dhost, l->dst, ETH_ALEN);
	memcpy(e->ether_shost, l->src, ETH_ALEN);
	e->ether_type = htons(type);
}

/* The IPv4 header's checksum (RFC 791). */
static uint16_t ip_sum(const void *hdr, size_t len)
{
	const uint8_t *b = hdr;
	uint32_t s = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		s += (uint32_t)b[i] << 8 | b[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return htons((uint16_t)~s);
}

static size_t ipv4(uint8_t *f, const char *src, const char *dst, uint8_t proto,
		   size_t payload)
{
	struct iphdr *ip = (struct iphdr *)(f + ETH_HLEN);

	*ip = (struct iphdr){ .version = 4,
			      .ihl = sizeof(*ip) / 4,
			      .ttl = 64,
			      .protocol = proto,
			      .tot_len = htons(sizeof(*ip) + payload) };
	inet_pton(AF_INET, src, &ip->saddr);
	inet_pton(AF_INET, dst, &ip->daddr);
	ip->check = ip_sum(ip, sizeof(*ip));
	return ETH_HLEN + sizeof(*ip) + payload;
}

/* A TCP SYN from src to dst:port. */
static int syn(struct link *l, uint8_t *f, const char *src, const char *dst,
	       uint16_t port)
{
	struct tcphdr *tcp;
	size_t len;

	memset(f, 0, FRAME_MAX);
	eth(l, f, ETHERTYPE_IP);
	len = ipv4(f, src, dst, IPPROTO_TCP, sizeof(*tcp));
	tcp = (struct tcphdr *)(f + ETH_HLEN + sizeof(struct iphdr));
	tcp->source = htons(40001);
	tcp->dest = htons(port);
	tcp->doff = sizeof(*tcp) / 4;
	tcp->syn = 1;
	return link_send(l, f, len);
}

/* One frame of each kind the egress program drops; says which went out. */
static int frames(void)
{
	uint8_t f[FRAME_MAX];
	struct link l;
	struct ip6_hdr *ip6 = (struct ip6_hdr *)(f + ETH_HLEN);
	struct udphdr *u;
	size_t len;
	int sent = 0;

	if (link_open(&l))
		return 1;

	/* IPv6 UDP to the tests' host's IPv6 twin. */
	memset(f, 0, sizeof(f));
	eth(&l, f, ETHERTYPE_IPV6);
	ip6->ip6_flow = htonl(6U << 28);
	ip6->ip6_plen = htons(sizeof(*u) + 4);
	ip6->ip6_nxt = IPPROTO_UDP;
	ip6->ip6_hlim = 64;
	inet_pton(AF_INET6, "fe80::1", &ip6->ip6_src);
	inet_pton(AF_INET6, TARGET6, &ip6->ip6_dst);
	u = (struct udphdr *)(ip6 + 1);
	*u = (struct udphdr){ .source = htons(40000),
			      .dest = htons(9000),
			      .len = htons(sizeof(*u) + 4) };
	sent += !link_send(&l, f, ETH_HLEN + sizeof(*ip6) + sizeof(*u) + 4);

	/* Raw IP: an experimental protocol number. */
	memset(f, 0, sizeof(f));
	eth(&l, f, ETHERTYPE_IP);
	len = ipv4(f, GUEST, TARGET, PROTO_EXP, 8);
	sent += !link_send(&l, f, len);

	/* A TCP SYN from an address that is not the guest's. */
	sent += !syn(&l, f, SPOOFED, TARGET, 8080);
	/* One to the host's loopback, from the guest's own address. */
	sent += !syn(&l, f, GUEST, LOOPBACK, LOOPBACK_PORT);

	/* IPv4 claiming a header of 4 bytes (IHL 1): malformed. */
	memset(f, 0, sizeof(f));
	eth(&l, f, ETHERTYPE_IP);
	len = ipv4(f, GUEST, TARGET, IPPROTO_UDP, 8);
	f[ETH_HLEN] = 0x41;
	sent += !link_send(&l, f, len);

	printf("sent %d of 5 frames\n", sent);
	return 0;
}

/* xorshift64: the flood's bytes; seeded from the clock. */
static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int flood(int secs)
{
	uint8_t f[FRAME_MAX];
	struct timespec now, end;
	unsigned long n = 0, refused = 0;
	uint64_t seed;
	struct link l;

	if (link_open(&l))
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &end);
	seed = (uint64_t)end.tv_nsec | 1;
	end.tv_sec += secs;
	do {
		size_t len =
			FRAME_MIN + next(&seed) % (FRAME_MAX - FRAME_MIN + 1);

		for (size_t i = 0; i < len; i += sizeof(uint64_t)) {
			uint64_t r = next(&seed);

			memcpy(f + i, &r,
			       len - i < sizeof(r) ? len - i : sizeof(r));
		}
		/* Half of them to the gateway, looking like IPv4. */
		if (n & 1) {
			eth(&l, f, ETHERTYPE_IP);
			f[ETH_HLEN] = 0x45;
		}
		if (link_send(&l, f, len))
			refused++;
		n++;
		if (!(n & 63))
			clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((n & 63) || now.tv_sec < end.tv_sec ||
		 (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
	printf("flooded %lu frames (%lu refused by the guest's kernel)\n", n,
	       refused);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "udp"))
		return udp(argv + 2);
	if (argc == 2 && !strcmp(argv[1], "frames"))
		return frames();
	if (argc == 3 && !strcmp(argv[1], "flood"))
		return flood(atoi(argv[2]));
	fprintf(stderr, "usage: net-probe udp IP PORT MSG SECS | frames | "
			"flood SECS\n");
	return 2;
}
