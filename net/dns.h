/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_DNS_H
#define KILN_VMM_DNS_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/policy.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * The VM's DNS resolver (Documentation/network.md, "DNS"): a UDP socket
 * and a TCP listener on port 53 in the VM netns (the gateway's, and any
 * other address the guest sends port 53 to), served by
 * a thread in the vmm's own (host) netns. Each guest query goes to the
 * policy's upstream resolvers only (REFUSED when there are none), or,
 * when the policy has a hook and no "dns", to the resolvers the hook's
 * answer names; the answer back to the guest, and the A records for the
 * question's name into the VM's trusted bindings.
 *
 *	ret = dns__create(&d, &params, err, sizeof(err));  before seccomp
 *	ret = dns__start(d, filter);  its thread, under its seccomp filter
 *	dns__stats(d, &stats);      from any thread
 *	dns__set_resolvers(d, np);  from any thread, after a policy change
 *	dns__destroy(d);            stops the thread, closes every socket
 */

#define DNS_PORT	     53U
#define DNS_MAX_PENDING	     256U   /* queries upstream; full: oldest dropped */
#define DNS_QUERY_TIMEOUT_MS 2000U  /* per upstream try; one retry */
#define DNS_MAX_TCP_CONNS    16U    /* guest TCP connections at once */
#define DNS_UDP_MAX	     512U   /* RFC 1035 4.2.1, without EDNS */
#define DNS_EDNS_MAX	     4096U  /* what a guest's EDNS may raise it to */
#define DNS_TCP_MAX	     65535U /* a TCP message (its 2-byte length) */

struct dns_params {
	int netns_fd; /* the VM netns; borrowed */
	/* The guest's resolver; the sockets take port 53 at any address. */
	struct in_addr gateway;
	/* Read at create: its resolvers (none: every query REFUSED). */
	const struct net_policy *policy;
	/* Where answers become bindings; taken under bindings_lock. */
	struct net_bindings *bindings;
	pthread_mutex_t *bindings_lock;
	/*
	 * After an answer's bindings are made and before the guest gets
	 * the answer: host (normalized) bound to addrs[n] (network byte
	 * order), on the resolver's thread, no lock held. NULL: none.
	 */
	void (*bound)(void *opaque, const char *host, const uint32_t *addrs,
		      unsigned int n);
	void *bound_opaque;
	/* 0: the defaults above (tests make them small). */
	unsigned int timeout_ms, max_pending;
	uint16_t port; /* 0: DNS_PORT */
};

struct dns_stats {
	uint64_t queries; /* well-formed guest queries, UDP and TCP */
	uint64_t refused; /* answered REFUSED: no resolvers */
	/* REFUSED by the rules (Documentation/network.md, "Which names"). */
	uint64_t refused_type; /* not A, AAAA or CNAME of class IN */
	uint64_t refused_name; /* not a name the policy lets through */
	uint64_t forwarded;    /* upstream tries, retries included */
	uint64_t answered;     /* upstream answers relayed to the guest */
	uint64_t servfail;     /* every try timed out or failed: SERVFAIL */
	uint64_t dropped;      /* queries dropped for newer ones, TCP refused */
	uint64_t malformed;    /* guest messages refused (FORMERR) or dropped */
	uint64_t bad_answers;  /* upstream messages ignored (wrong ID, ...) */
	uint64_t bindings; /* hostname -> address bindings made or renewed */
	uint64_t errors;   /* socket errors on either side */
	/*
	 * Entries of the query table ever used: its pages are resident this
	 * deep, no deeper (at most max_pending).
	 */
	unsigned int query_slots;
	/* DNS through the hook (Documentation/network.md). */
	uint64_t hook_asked;   /* questions put to the hook */
	uint64_t hook_granted; /* grant-dns answers: forwarded */
	uint64_t hook_cached;  /* forwarded on a grant kept, not asked */
	uint64_t hook_refused; /* deny answers: REFUSED */
	uint64_t hook_failed;  /* no valid answer: SERVFAIL */
	bool running;	       /* the resolver thread's loop */
};

struct dns;

/*
 * The sockets in the VM netns (a short-lived thread of its own makes
 * them there), the resolvers copied from the policy. 0, or -errno with
 * "what: why" in err; nothing is left behind on failure.
 */
int __must_check dns__create(struct dns **out, const struct dns_params *p,
			     char *err, size_t errlen);
/* Starts the resolver thread. */
int __must_check dns__start(struct dns *d, const struct sock_fprog *filter);
/* Stops the thread, closes every socket. NULL and half-built are fine. */
void dns__destroy(struct dns *d);

/*
 * A replaced policy's resolvers and DNS hook (net_policy__dns_hook),
 * from any thread (policy is only read here). The resolver thread takes
 * them at its next wake, within a second (it wakes at least once a
 * second) and forgets the hook's grants it kept: queries in flight start
 * over on the new list, are REFUSED if it is empty, or SERVFAIL ("hook
 * changed") when the new policy puts DNS to a hook.
 */
void dns__set_resolvers(struct dns *d, const struct net_policy *policy);
/* A copy of the counters, from any thread. */
void dns__stats(struct dns *d, struct dns_stats *s);
/* One line for the SIGUSR2 report. */
void dns__report(struct dns *d);

#endif
