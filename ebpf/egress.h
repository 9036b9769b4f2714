/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_EBPF_EGRESS_H
#define KILN_EBPF_EGRESS_H

/*
 * What the egress program (egress.bpf.c) and its loader (loader.c) share.
 * Plain enums and fixed-size structs only: the BPF side includes this too.
 */
#include <linux/types.h>

/* Slots of the proxy socket map: the vmm's sockets in the VM netns. */
enum egress_slot {
	EGRESS_SLOT_TCP, /* transparent TCP listener: new guest connections */
	EGRESS_SLOT_UDP, /* transparent UDP socket: every guest datagram */
	EGRESS_NR_SLOTS,
};

/*
 * Why the program passed or dropped a frame, one counter each. The ones
 * up to EGRESS_LAST_PASS pass; every other one drops. Documented in
 * Documentation/network.md ("Counters").
 */
enum egress_reason {
	EGRESS_ARP_PASS, /* ARP from the guest's address for the gateway */
	EGRESS_DNS,	 /* TCP or UDP to port 53, the gateway's or any */
	EGRESS_TCP_ESTABLISHED, /* TCP of a flow the VM netns has a socket for */
	EGRESS_TCP_PROXY,	/* SYN given to the vmm's TCP listener */
	EGRESS_UDP_PROXY,	/* datagram given to the vmm's UDP socket */
	EGRESS_LAST_PASS = EGRESS_UDP_PROXY,
	EGRESS_ARP_DROP,   /* any other ARP */
	EGRESS_NOT_IPV4,   /* IPv6, VLAN tags, any other EtherType */
	EGRESS_MALFORMED,  /* too short, bad version or lengths */
	EGRESS_IP_OPTIONS, /* IPv4 header longer than 20 bytes */
	EGRESS_FRAGMENT,   /* any fragment, the first one included */
	EGRESS_SPOOFED,	   /* IPv4 source is not the guest's address */
	EGRESS_BROADCAST,  /* link or IP broadcast or multicast */
	EGRESS_OTHER_HOST, /* unicast to a MAC that is not the tap's */
	EGRESS_BAD_DEST,   /* 0.0.0.0/8, 127.0.0.0/8 or the guest itself */
	EGRESS_TO_GATEWAY_OTHER, /* to the gateway, not TCP or UDP port 53 */
	EGRESS_NOT_TCP_UDP,	 /* ICMP, raw IP and every other protocol */
	EGRESS_TCP_STRAY,	 /* TCP that is neither a flow's nor a SYN */
	EGRESS_TCP_REFUSED,   /* SYN no grant can match: answered with an RST */
	EGRESS_NO_PROXY,      /* the vmm's socket for it is gone: fail closed */
	EGRESS_ASSIGN_FAILED, /* the kernel refused the socket */
	EGRESS_NR_REASONS,
};

/*
 * The SYN filter (Documentation/network.md, "What the guest sees of a
 * denied TCP flow"): an LPM trie of destination prefixes, each with the
 * ports a grant may allow there, kept by the vmm as a superset of what
 * its policy can grant. The longest prefix holding a SYN's destination
 * decides; no prefix, or a port outside its ranges, and the program
 * answers the SYN with an RST (EGRESS_TCP_REFUSED). While the filter is
 * off (at load, and while the vmm refills it) every SYN goes to the
 * proxy.
 */
#define EGRESS_SYN_MAX_RANGES  16U   /* port ranges per prefix */
#define EGRESS_SYN_MAX_ENTRIES 8192U /* prefixes in the trie */
#define EGRESS_SYN_ADDR_BITS   32U   /* an IPv4 address, a /32 */

struct egress_syn_key {
	__u32 prefixlen; /* 0..EGRESS_SYN_ADDR_BITS */
	__be32 addr;	 /* network byte order, host bits zero */
};

struct egress_port_range {
	__u16 lo, hi; /* host byte order, inclusive */
};

struct egress_syn_ports {
	__u32 nr; /* ranges used, at most EGRESS_SYN_MAX_RANGES */
	struct egress_port_range range[EGRESS_SYN_MAX_RANGES];
};

#endif
