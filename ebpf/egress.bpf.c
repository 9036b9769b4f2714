// SPDX-License-Identifier: GPL-2.0
/*
 * Default-deny egress for one VM: a tc clsact program (direct action) on
 * the tap's ingress, which is every frame the guest sends. Each frame gets
 * one verdict and one counter (egress.h). The program passes a frame only
 * to the kernel of the VM netns, for one of its local sockets: ARP to the
 * gateway address, DNS (port 53) to any address, the rest steered with bpf_sk_assign() to a
 * socket of the vmm's (or to the socket of a flow the vmm accepted). It
 * never redirects, rewrites or forwards anything; everything else drops.
 * Documentation/network.md, "Design: default-deny egress".
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

/* Frames per enum egress_reason, per CPU; the loader sums them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGRESS_NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} verdicts SEC(".maps");

static __always_inline int verdict(enum egress_reason reason)
{
	__u32 key = reason;
	__u64 *count = bpf_map_lookup_elem(&verdicts, &key);

	/* Per CPU, and tc programs do not migrate: no atomic needed. */
	if (count)
		*count += 1;
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

static __always_inline enum egress_reason
classify_tcp(struct __sk_buff *skb, const struct iphdr *ip, __u32 l4)
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

static __always_inline enum egress_reason classify_ipv4(struct __sk_buff *skb)
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
		return classify_tcp(skb, &ip, l4);
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
		return classify_ipv4(skb);
	default:
		return EGRESS_NOT_IPV4;
	}
}

SEC("tc")
int egress(struct __sk_buff *skb)
{
	return verdict(classify(skb));
}

char LICENSE[] SEC("license") = "GPL";
