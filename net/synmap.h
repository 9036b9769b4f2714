/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_SYNMAP_H
#define KILN_NET_SYNMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ebpf/egress.h"
#include "lib/compiler.h"
#include "net/policy.h"

/*
 * What the egress program's SYN filter holds for a policy (ebpf/egress.h;
 * Documentation/network.md, "What the guest sees of a denied TCP flow"):
 * a superset of the TCP flows the policy can grant, as destination
 * prefixes with the ports a grant may allow there. A SYN the filter does
 * not hold is answered with an RST; one it holds still goes to the proxy,
 * which decides. The proxy's decision stays the policy; the filter only
 * has to never refuse what the policy would grant.
 *
 *	struct net_synmap m;
 *	ret = net_synmap__build(&m, policy, bindings);  under their locks
 *	ret = net_synmap__apply(&m, egress, err, sizeof(err));  netns thread
 *	net_synmap__release(&m);
 *
 * and, for each name the resolver binds before its answer reaches the
 * guest:
 *
 *	net_synmap__host_ports(policy, host, &ports);  under the policy's lock
 *	ret = net_synmap__bind(egress, addr, &ports, err, sizeof(err));
 */

struct net_synmap_entry {
	struct egress_syn_key key;
	struct egress_syn_ports ports;
};

struct net_synmap {
	/* Every SYN may be granted (a hook decides): the filter stays off. */
	bool open;
	unsigned int nr;
	struct net_synmap_entry *e; /* by prefix length, then address */
};

/*
 * The filter for p (NULL: the empty policy, which grants nothing) and the
 * bindings b holds now (NULL: none) into *m:
 * - an address or prefix rule: its prefix, with its ports;
 * - an address class rule: 0.0.0.0/0 with its ports (a superset);
 * - a hostname rule or http grant: each address b binds to a name it
 *   matches, a /32 with its ports;
 * - a policy with a hook: open (the hook may grant anything).
 * Each prefix's ports include those of every shorter prefix that holds
 * it (the program reads the longest only). More than
 * EGRESS_SYN_MAX_RANGES ranges at one prefix: every port there; more
 * than EGRESS_SYN_MAX_ENTRIES prefixes: open. 0 or -ENOMEM.
 */
int __must_check net_synmap__build(struct net_synmap *m,
				   const struct net_policy *p,
				   const struct net_bindings *b);
/* Frees m's entries; m is empty after. */
void net_synmap__release(struct net_synmap *m);

/*
 * Whether m lets a SYN to addr:port (network, host byte order) through to
 * the proxy, as the program decides: for the tests.
 */
bool net_synmap__allows(const struct net_synmap *m, uint32_t addr,
			uint16_t port);

/*
 * The ports p's hostname rules (tcp) and http grants allow at an address
 * bound to host (normalized), added to *v.
 */
void net_synmap__host_ports(const struct net_policy *p, const char *host,
			    struct egress_syn_ports *v);

/*
 * *v gets add's ports too; ranges merged, and every port when they do
 * not fit in EGRESS_SYN_MAX_RANGES.
 */
void net_synmap__union(struct egress_syn_ports *v,
		       const struct egress_syn_ports *add);

/* Whether v holds port. */
bool net_synmap__port(const struct egress_syn_ports *v, uint16_t port);

struct egress;

/*
 * m into e's filter: turned off, emptied, filled, turned on unless m is
 * open. On an error the filter stays off (every SYN to the proxy, as
 * without it) and err says why. From the thread that may use bpf() on
 * e's maps (the proxy's netns thread).
 */
int __must_check net_synmap__apply(const struct net_synmap *m, struct egress *e,
				   char *err, size_t errlen);

/*
 * addr (network byte order) newly bound to a name whose grants allow
 * *ports: its /32 gets them, with what the filter lets through to addr
 * already. Nothing when ports is empty. On an error (the filter full:
 * -ENOSPC) the filter is turned off and err says why.
 */
int __must_check net_synmap__bind(struct egress *e, uint32_t addr,
				  const struct egress_syn_ports *ports,
				  char *err, size_t errlen);

#endif
