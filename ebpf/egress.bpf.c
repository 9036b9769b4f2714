// SPDX-License-Identifier: GPL-2.0
/*
 * Default-deny egress for one VM: a tc clsact program (direct action) on
 * the tap's ingress, which is every frame the guest sends. Each frame gets
 * one verdict and one counter (egress.h). The program passes a frame only
 * to the kernel of the VM netns, for one of its local sockets: ARP to the
 * gateway address, DNS (port 53) to any address, the rest steered with bpf_sk_assign() to a
 * socket of the vmm's (or to the socket of a flow the vmm accepted). It
 * never forwards anything; everything else drops, except a SYN to a
 * destination no grant can match (the syn_grants map, egress.h): that
 * one is turned into an RST and sent back to the guest through the tap,
 * so that its connect() is refused. Documentation/network.md, "Design:
 * default-deny egress" and "What the guest sees of a denied TCP flow".
 *
 * Headers are copied out with bpf_skb_load_bytes(): the tap may leave them
 * outside the linear part (a guest's GSO frame says how much is linear),
 * and a copy is as good there as anywhere.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stdbool.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "egress.h"

/* Protocol numbers uapi headers do not carry for us (RFC 826, RFC 791). */
#define ARP_HTYPE_ETHER 1
#define ARP_OP_REQUEST	1
#define ARP_OP_REPLY	2
#define IPV4_ALEN	4
#define IPV4_IHL_MIN	5      /* 32-bit words: a header without options */
#define IPV4_MF		0x2000 /* frag_off: more fragments */
#define IPV4_OFFSET	0x1fff /* frag_off: fragment offset */
#define DNS_PORT	53
#define NET_ZERO	0x00000000 /* 0.0.0.0/8: "this network" */
#define NET_LOOPBACK	0x7f000000 /* 127.0.0.0/8 */
#define NET_MASK_8	0xff000000
#define NET_MULTICAST	0xe0000000 /* 224.0.0.0/4 */
#define NET_MASK_4	0xf0000000
#define ADDR_BROADCAST	0xffffffff
#define IPV4_DF		0x4000 /* frag_off: don't fragment */
#define RST_TTL		64     /* RFC 1700's default */
#define TCP_WORD	4      /* doff counts 32-bit words */

/* An Ethernet/IPv4 ARP packet (RFC 826); the addresses are unaligned. */
struct arp_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[IPV4_ALEN];
	__u8 tha[ETH_ALEN];
	__u8 tpa[IPV4_ALEN];
} __attribute__((packed));

/*
 * Set by the loader before load (network byte order); read-only once
 * loaded, so the verifier sees constants.
 */
const volatile __be32 gateway_ip; /* the tap's host side: ARP, DNS */
const volatile __be32 guest_ip;	  /* the one source address allowed */
const volatile __be32 netmask;	  /* of the guest's subnet */

/* The vmm's sockets, by enum egress_slot; an empty slot drops. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, EGRESS_NR_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} proxy_socks SEC(".maps");

/*
 * Nonzero: SYNs are checked against syn_grants. Written by the loader
 * through the skeleton's mapping of .bss; read once per SYN.
 */
volatile __u32 syn_check;

/* Destination prefixes a grant may allow, and their ports (egress.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGRESS_SYN_MAX_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egress_syn_key);
	__type(value, struct egress_syn_ports);
} syn_grants SEC(".maps");

/* Frames per enum egress_reason, per CPU; the loader sums them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGRESS_NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} verdicts SEC(".maps");

static __always_inline int verdict(struct __sk_buff *skb,
				   enum egress_reason reason)
{
	__u32 key = reason;
	__u64 *count = bpf_map_lookup_elem(&verdicts, &key);

	/* Per CPU, and tc programs do not migrate: no atomic needed. */
	if (count)
		*count += 1;
	/* The RST out of the tap (its egress): to the guest. */
	if (reason == EGRESS_TCP_REFUSED)
		return bpf_redirect(skb->ifindex, 0);
	return reason <= EGRESS_LAST_PASS ? TC_ACT_OK : TC_ACT_SHOT;
}

static __always_inline __be32 arp_addr(const __u8 a[IPV4_ALEN])
{
	__be32 addr;

	__builtin_memcpy(&addr, a, sizeof(addr));
	return addr;
}

/* Only the guest asking for (or answering) the gateway; the kernel replies. */
static __always_inline enum egress_reason classify_arp(struct __sk_buff *skb)
{
	struct arp_ipv4 arp;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &arp, sizeof(arp)))
		return EGRESS_ARP_DROP;
	if (arp.htype != bpf_htons(ARP_HTYPE_ETHER) ||
	    arp.ptype != bpf_htons(ETH_P_IP) || arp.hlen != ETH_ALEN ||
	    arp.plen != IPV4_ALEN)
		return EGRESS_ARP_DROP;
	if (arp.op != bpf_htons(ARP_OP_REQUEST) &&
	    arp.op != bpf_htons(ARP_OP_REPLY))
		return EGRESS_ARP_DROP;
	if (arp_addr(arp.tpa) != gateway_ip || arp_addr(arp.spa) != guest_ip)
		return EGRESS_ARP_DROP;
	return EGRESS_ARP_PASS;
}

/*
 * Gives the frame to sk and drops our reference, whatever happens. The
 * kernel then delivers it to sk whatever its destination address (the VM
 * netns routes every address on the tap to itself as local).
 */
static __always_inline enum egress_reason
assign(struct __sk_buff *skb, struct bpf_sock *sk, enum egress_reason ok)
{
	long err = bpf_sk_assign(skb, sk, 0);

	bpf_sk_release(sk);
	return err ? EGRESS_ASSIGN_FAILED : ok;
}

/* To the vmm's socket in slot; none there (or not listening) drops. */
static __always_inline enum egress_reason
assign_proxy(struct __sk_buff *skb, __u32 slot, enum egress_reason ok)
{
	struct bpf_sock *sk = bpf_map_lookup_elem(&proxy_socks, &slot);

	if (!sk)
		return EGRESS_NO_PROXY;
	if (slot == EGRESS_SLOT_TCP && sk->state != BPF_TCP_LISTEN) {
		bpf_sk_release(sk);
		return EGRESS_NO_PROXY;
	}
	return assign(skb, sk, ok);
}

/* The host side of the tap offers DNS and nothing else. */
static __always_inline enum egress_reason to_gateway(__be16 dport)
{
	if (dport == bpf_htons(DNS_PORT))
		return EGRESS_DNS;
	return EGRESS_TO_GATEWAY_OTHER;
}

/*
 * Port 53 at any address is the vmm's resolver's too: passed to the
 * kernel of the VM netns, where every address is local to what comes
 * from the tap and the resolver's sockets take port 53 at any address.
 * A guest that asks a server of its own choosing is still answered (and
 * decided) by the vmm, never by that server.
 */
static __always_inline bool is_dns(__be16 dport)
{
	return dport == bpf_htons(DNS_PORT);
}

/* Whether a grant may allow a TCP flow to daddr:dport (egress.h). */
static __always_inline bool syn_may_be_granted(__be32 daddr, __be16 dport)
{
	struct egress_syn_key key = { .prefixlen = EGRESS_SYN_ADDR_BITS,
				      .addr = daddr };
	const struct egress_syn_ports *v;
	__u16 port = bpf_ntohs(dport);

	if (!syn_check)
		return true;
	v = bpf_map_lookup_elem(&syn_grants, &key);
	if (!v)
		return false;
	for (__u32 i = 0; i < EGRESS_SYN_MAX_RANGES; i++) {
		if (i >= v->nr)
			break;
		if (port >= v->range[i].lo && port <= v->range[i].hi)
			return true;
	}
	return false;
}

/* The 32-bit one's complement sum folded to 16 bits (RFC 1071). */
static __always_inline __u16 csum_fold(__s64 sum)
{
	__u32 s = (__u32)sum;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* The TCP pseudo-header (RFC 793, 3.1), summed, folded. */
static __always_inline __u16 pseudo_sum(__be32 saddr, __be32 daddr,
					__u16 tcp_len)
{
	struct {
		__be32 saddr, daddr;
		__u8 zero, proto;
		__be16 len;
	} ph = { .saddr = saddr,
		 .daddr = daddr,
		 .proto = IPPROTO_TCP,
		 .len = bpf_htons(tcp_len) };

	return csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0));
}

/*
 * The RST-ACK that answers the guest's SYN, as a closed port does (RFC
 * 793, "Reset Generation": <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>),
 * from the destination it asked. pad puts the IP header on 4 bytes.
 */
struct rst_frame {
	__u8 pad[2];
	struct ethhdr eth;
	struct iphdr ip;
	struct tcphdr tcp;
};

#define RST_LEN \
	(sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct tcphdr))

/*
 * Turns the SYN in skb into the RST, in place: the frame cut to the
 * three headers, then rewritten. The checksum is the full one, unless
 * the SYN's own is a partial one (the guest left it to the tap,
 * VIRTIO_NET_HDR_F_NEEDS_CSUM: the field holds the pseudo-header's sum);
 * then the skb still says CHECKSUM_PARTIAL at the same offsets, and the
 * RST's field gets its pseudo-header's sum for whoever completes it. A
 * full SYN checksum that equals its pseudo-header's sum by chance (one
 * in 65536) costs that SYN's RST; the guest's retransmission is
 * answered.
 */
static __always_inline enum egress_reason refuse(struct __sk_buff *skb,
						 const struct ethhdr *eth,
						 const struct iphdr *ip,
						 const struct tcphdr *syn)
{
	__u16 syn_len = bpf_ntohs(ip->tot_len) - sizeof(*ip);
	__u32 data_len = syn_len - syn->doff * TCP_WORD;
	bool partial = syn->check == pseudo_sum(ip->saddr, ip->daddr, syn_len);
	struct rst_frame f = {};
	__s64 sum;

	if (syn->doff * TCP_WORD > syn_len)
		return EGRESS_MALFORMED;
	__builtin_memcpy(f.eth.h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(f.eth.h_source, eth->h_dest, ETH_ALEN);
	f.eth.h_proto = bpf_htons(ETH_P_IP);

	f.ip.version = 4;
	f.ip.ihl = IPV4_IHL_MIN;
	f.ip.tot_len = bpf_htons(sizeof(f.ip) + sizeof(f.tcp));
	f.ip.frag_off = bpf_htons(IPV4_DF);
	f.ip.ttl = RST_TTL;
	f.ip.protocol = IPPROTO_TCP;
	f.ip.saddr = ip->daddr;
	f.ip.daddr = ip->saddr;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&f.ip, sizeof(f.ip), 0);
	f.ip.check = (__u16)~csum_fold(sum);

	f.tcp.source = syn->dest;
	f.tcp.dest = syn->source;
	/* SEG.LEN: the SYN counts one, then its data (TCP Fast Open). */
	f.tcp.ack_seq = bpf_htonl(bpf_ntohl(syn->seq) + 1 + data_len);
	f.tcp.doff = sizeof(f.tcp) / TCP_WORD;
	f.tcp.rst = 1;
	f.tcp.ack = 1;
	/* The header summed with its check field still zero. */
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&f.tcp, sizeof(f.tcp),
			    pseudo_sum(f.ip.saddr, f.ip.daddr, sizeof(f.tcp)));
	f.tcp.check =
		partial ? pseudo_sum(f.ip.saddr, f.ip.daddr, sizeof(f.tcp)) :
			  (__u16)~csum_fold(sum);

	if (bpf_skb_change_tail(skb, RST_LEN, 0) ||
	    bpf_skb_store_bytes(skb, 0, &f.eth, RST_LEN, 0))
		return EGRESS_MALFORMED;
	return EGRESS_TCP_REFUSED;
}

static __always_inline enum egress_reason classify_tcp(struct __sk_buff *skb,
						       const struct ethhdr *eth,
						       const struct iphdr *ip,
						       __u32 l4)
{
	struct bpf_sock_tuple tuple = {};
	struct bpf_sock *sk;
	struct tcphdr tcp;

	if (bpf_skb_load_bytes(skb, l4, &tcp, sizeof(tcp)))
		return EGRESS_MALFORMED;
	if (ip->daddr == gateway_ip)
		return to_gateway(tcp.dest);
	if (is_dns(tcp.dest))
		return EGRESS_DNS;

	/*
	 * A flow the vmm took already: the accepted socket (or its request
	 * or time-wait socket) has the guest's 4-tuple. A listener found
	 * here is only one bound to the destination port: not ours to use.
	 */
	tuple.ipv4.saddr = ip->saddr;
	tuple.ipv4.daddr = ip->daddr;
	tuple.ipv4.sport = tcp.source;
	tuple.ipv4.dport = tcp.dest;
	sk = bpf_skc_lookup_tcp(skb, &tuple, sizeof(tuple.ipv4),
				BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		if (sk->state != BPF_TCP_LISTEN)
			return assign(skb, sk, EGRESS_TCP_ESTABLISHED);
		bpf_sk_release(sk);
	}
	if (!tcp.syn || tcp.ack)
		return EGRESS_TCP_STRAY;
	if (!syn_may_be_granted(ip->daddr, tcp.dest))
		return refuse(skb, eth, ip, &tcp);
	return assign_proxy(skb, EGRESS_SLOT_TCP, EGRESS_TCP_PROXY);
}

static __always_inline enum egress_reason
classify_udp(struct __sk_buff *skb, const struct iphdr *ip, __u32 l4)
{
	struct udphdr udp;

	if (bpf_skb_load_bytes(skb, l4, &udp, sizeof(udp)))
		return EGRESS_MALFORMED;
	if (ip->daddr == gateway_ip)
		return to_gateway(udp.dest);
	if (is_dns(udp.dest))
		return EGRESS_DNS;
	return assign_proxy(skb, EGRESS_SLOT_UDP, EGRESS_UDP_PROXY);
}

static __always_inline bool is_broadcast(__be32 daddr)
{
	__u32 dst = bpf_ntohl(daddr);

	return (dst & NET_MASK_4) == NET_MULTICAST || dst == ADDR_BROADCAST ||
	       (daddr | netmask) == (__be32)ADDR_BROADCAST;
}

static __always_inline bool is_bad_dest(__be32 daddr)
{
	__u32 dst = bpf_ntohl(daddr);

	return (dst & NET_MASK_8) == NET_ZERO ||
	       (dst & NET_MASK_8) == NET_LOOPBACK || daddr == guest_ip;
}

static __always_inline enum egress_reason
classify_ipv4(struct __sk_buff *skb, const struct ethhdr *eth)
{
	__u32 l4 = ETH_HLEN + sizeof(struct iphdr);
	struct iphdr ip;
	__u32 tot_len;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return EGRESS_MALFORMED;
	if (ip.version != 4 || ip.ihl < IPV4_IHL_MIN)
		return EGRESS_MALFORMED;
	if (ip.ihl != IPV4_IHL_MIN)
		return EGRESS_IP_OPTIONS;
	tot_len = bpf_ntohs(ip.tot_len);
	if (tot_len < sizeof(ip) || tot_len > skb->len - ETH_HLEN)
		return EGRESS_MALFORMED;
	/* No reassembly here: a fragment cannot be classified, so none goes. */
	if (ip.frag_off & bpf_htons(IPV4_MF | IPV4_OFFSET))
		return EGRESS_FRAGMENT;
	if (ip.saddr != guest_ip)
		return EGRESS_SPOOFED;
	if (skb->pkt_type == PACKET_BROADCAST ||
	    skb->pkt_type == PACKET_MULTICAST || is_broadcast(ip.daddr))
		return EGRESS_BROADCAST;
	if (skb->pkt_type != PACKET_HOST)
		return EGRESS_OTHER_HOST;
	if (is_bad_dest(ip.daddr))
		return EGRESS_BAD_DEST;

	switch (ip.protocol) {
	case IPPROTO_TCP:
		return classify_tcp(skb, eth, &ip, l4);
	case IPPROTO_UDP:
		return classify_udp(skb, &ip, l4);
	default:
		return EGRESS_NOT_TCP_UDP;
	}
}

static __always_inline enum egress_reason classify(struct __sk_buff *skb)
{
	struct ethhdr eth;

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)))
		return EGRESS_MALFORMED;
	/* The kernel takes a VLAN tag off before tc sees the frame. */
	if (skb->vlan_present)
		return EGRESS_NOT_IPV4;
	switch (bpf_ntohs(eth.h_proto)) {
	case ETH_P_ARP:
		return classify_arp(skb);
	case ETH_P_IP:
		return classify_ipv4(skb, &eth);
	default:
		return EGRESS_NOT_IPV4;
	}
}

SEC("tc")
int egress(struct __sk_buff *skb)
{
	return verdict(skb, classify(skb));
}

char LICENSE[] SEC("license") = "GPL";
