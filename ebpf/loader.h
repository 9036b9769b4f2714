/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_EBPF_LOADER_H
#define KILN_EBPF_LOADER_H

#include <netinet/in.h> /* struct in_addr */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "ebpf/egress.h"

/*
 * The default-deny egress program of one VM (egress.bpf.c), loaded from
 * its skeleton and attached to the tap's tc ingress: every frame the
 * guest sends is passed to a local socket of the VM netns or dropped
 * (Documentation/network.md, "Design: default-deny egress").
 *
 * Every call is made from within the VM netns, the one that holds the
 * tap and the vmm's proxy sockets: the tap's ifindex is looked up there
 * and a socket of another netns is refused.
 *
 *	struct egress *e;
 *	ret = egress__create(&e, &cfg, err, sizeof(err));
 *	ret = egress__set_proxy(e, EGRESS_SLOT_TCP, listen_fd, err, ...);
 *	ret = egress__set_proxy(e, EGRESS_SLOT_UDP, udp_fd, err, ...);
 *	ret = egress__attach(e, tap_ifindex, err, sizeof(err));
 *	...  egress__read_counters(e, counts, err, sizeof(err));
 *	egress__destroy(e);		after the tap's device is gone
 *
 * Fallible calls return 0 or -errno with "what: why" in err (errlen
 * bytes) for the caller to report once. They need CAP_BPF and
 * CAP_NET_ADMIN (root on a Debian 12 host).
 */

struct egress_config {
	struct in_addr gateway;	 /* the tap's host-side address (ARP, DNS) */
	struct in_addr guest;	 /* the guest's address: the only source */
	unsigned int prefix_len; /* of their subnet, 1..30 bits */
};

struct egress;

/*
 * Opens the skeleton, sets the config, loads the program and its maps.
 * Nothing is attached yet and both proxy slots are empty. -EINVAL for a
 * config that does not hold together (the gateway or the guest outside
 * the subnet, or either its network or broadcast address; the two equal),
 * -EPERM without the capabilities.
 */
int __must_check egress__create(struct egress **out,
				const struct egress_config *cfg, char *err,
				size_t errlen);

/*
 * Attaches the program to ifindex's tc ingress, creating the clsact
 * qdisc if the interface has none; -EEXIST if already attached (here,
 * or a filter of someone else's at the same handle and priority).
 */
int __must_check egress__attach(struct egress *e, int ifindex, char *err,
				size_t errlen);

/*
 * Puts the vmm's socket fd in slot: for EGRESS_SLOT_TCP a listening
 * IPv4 TCP socket, for EGRESS_SLOT_UDP a bound IPv4 UDP socket with
 * IP_RECVORIGDSTADDR, both with IP_TRANSPARENT and in the VM netns
 * (-EINVAL otherwise). The map
 * holds its own reference: the caller keeps and closes its fd, and the
 * slot empties itself when the socket is closed (then the program drops
 * what would have gone there).
 */
int __must_check egress__set_proxy(struct egress *e, enum egress_slot slot,
				   int fd, char *err, size_t errlen);

/* Empties slot (fine if it is empty already). */
int __must_check egress__clear_proxy(struct egress *e, enum egress_slot slot,
				     char *err, size_t errlen);

/*
 * The SYN filter (egress.h; Documentation/network.md, "What the guest
 * sees of a denied TCP flow"), off after create: every SYN goes to the
 * proxy. To fill it: egress__syn_check(e, false), egress__syn_clear(),
 * egress__syn_put() for each prefix, then egress__syn_check(e, true);
 * from then on a SYN to a destination no prefix holds with its port is
 * answered with an RST. -ENOSPC from egress__syn_put(): the trie holds
 * EGRESS_SYN_MAX_ENTRIES prefixes already.
 */
void egress__syn_check(struct egress *e, bool on);
int __must_check egress__syn_clear(struct egress *e, char *err, size_t errlen);
/* Sets (or replaces) the ports of key's prefix; v->nr checked. */
int __must_check egress__syn_put(struct egress *e,
				 const struct egress_syn_key *key,
				 const struct egress_syn_ports *v, char *err,
				 size_t errlen);
/*
 * The ports of the longest prefix holding addr (network byte order), as
 * the program sees them; -ENOENT when none does.
 */
int __must_check egress__syn_get(struct egress *e, uint32_t addr,
				 struct egress_syn_ports *v);

/* Frames per reason since create, summed over the CPUs. */
int __must_check egress__read_counters(struct egress *e,
				       uint64_t counts[EGRESS_NR_REASONS],
				       char *err, size_t errlen);

/* "arp_pass", "tcp_proxy", ... (NULL out of range). */
const char *egress__reason_name(enum egress_reason reason);

/* Whether frames counted under reason were passed (else dropped). */
bool egress__reason_passes(enum egress_reason reason);

/* The loaded program, for BPF_PROG_TEST_RUN in the tests. */
int egress__prog_fd(const struct egress *e);

/*
 * Detaches (and removes the clsact qdisc if attach made it), then frees
 * the program and maps. NULL and a half-built object are fine. An
 * interface that is gone already is fine too.
 */
void egress__destroy(struct egress *e);

#endif
