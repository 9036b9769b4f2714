/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FLOW_H
#define KILN_FLOW_H

#include <netinet/in.h>
#include <stdint.h>

/*
 * One new flow from the guest, as the vmm's egress proxy sees it, and the
 * decision the policy gives it (Documentation/network.md, "The proxy").
 */

/* A DNS name in text, without its trailing dot (RFC 1035 2.3.4). */
#define NET_HOSTNAME_MAX 253U
/* sockaddr_un's sun_path (108 bytes) less its terminating NUL. */
#define NET_HOOK_PATH_MAX 107U
/* The hostnames a hook question carries (the lowest, in byte order). */
#define NET_ASK_MAX_HOSTNAMES 8U
/* "public-internet" and its NUL, the longest address class name. */
#define NET_CLASS_NAME_MAX 16U

struct net_flow {
	uint8_t proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	struct sockaddr_in src; /* the guest's address and port */
	struct sockaddr_in dst; /* where the guest sent it (original) */
};

/*
 * ASK: the rules did not decide; the proxy puts the flow to the policy's
 * hook (Documentation/network.md, "The hook") without holding any lock.
 */
enum net_verdict { NET_VERDICT_DENY, NET_VERDICT_ALLOW, NET_VERDICT_ASK };

/* What the proxy needs to ask the hook, copied out of the policy. */
struct net_ask {
	char socket[NET_HOOK_PATH_MAX + 1];  /* the hook's Unix socket */
	unsigned int timeout_ms;	     /* the question's deadline */
	char class_name[NET_CLASS_NAME_MAX]; /* the destination's class */
	unsigned int nr_hostnames;
	/* The names this VM's trusted DNS binds the destination to now. */
	char hostnames[NET_ASK_MAX_HOSTNAMES][NET_HOSTNAME_MAX + 1];
};

struct net_decision {
	enum net_verdict verdict;
	/*
	 * For the log and counters: "no grant", "tcp grant 2", ...; with
	 * ASK, why the rules alone would deny it ("no grant"): a recheck
	 * cuts by it a flow the hook did not grant.
	 */
	char reason[64];
	struct net_ask ask; /* NET_VERDICT_ASK only */
};
/*
 * Decides one new flow; must not block: a flow that needs the hook comes
 * back as NET_VERDICT_ASK and the caller asks.
 */
typedef void (*net_decide_fn)(void *opaque, const struct net_flow *f,
			      struct net_decision *d);

#endif
