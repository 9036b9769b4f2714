/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_FLOW_H
#define KILN_VMM_FLOW_H

#include <netinet/in.h>
#include <stdint.h>

/*
 * One new flow from the guest, as the proxy sees it, and the verdict on
 * it: what the proxy asks the policy (Documentation/network.md).
 */
struct net_flow {
	uint8_t proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	struct sockaddr_in src; /* the guest's address and port */
	struct sockaddr_in dst; /* where the guest sent it (original destination) */
};
enum net_verdict { NET_VERDICT_DENY, NET_VERDICT_ALLOW };
struct net_decision {
	enum net_verdict verdict;
	char reason[64]; /* for the log and counters: "no grant", "tcp grant 2", ... */
};
/* Decides one new flow; must not block (a hook that must ask someone is the policy's business, later). */
typedef void (*net_decide_fn)(void *opaque, const struct net_flow *f, struct net_decision *d);

#endif
