/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_DNS_RESOLVER_INTERNAL_H
#define KILN_VMM_DNS_RESOLVER_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "lib/siphash.h"
#include "net/dns-internal.h"
#include "net/dns.h"
#include "net/endpoint.h"
#include "net/hook.h"

/*
 * The resolver's own state, between dns.c (the guest's side: its
 * sockets, each question checked and decided, the thread, create and
 * destroy) and dns-up.c (forwarding: the tries upstream, their sockets,
 * the answers relayed and bound). Every field belongs to the resolver's
 * thread but stats and the next_* hand-over, which stats_lock guards.
 * (dns-internal.h is the message layer below both, which the fuzz
 * targets and unit tests link alone.)
 */

#define DNS_NAME	  "dns"
#define DNS_MAX_TRIES	  2U	 /* the first resolver, then the next one */
#define DNS_TCP_IDLE_MS	  10000U /* a guest connection with nothing asked */
#define DNS_BACKLOG	  64
#define DNS_EPOLL_EVENTS  64
#define DNS_DGRAM_BUDGET  32	/* guest datagrams per round */
#define DNS_ACCEPT_BUDGET 8	/* guest connections per round */
#define DNS_SWEEP_MS	  1000U /* bindings expired, idle connections */
#define DNS_MAX_BINDINGS  32U	/* A records bound per answer */

enum ep_kind { EP_STOP, EP_UDP, EP_LISTEN, EP_GUEST_TCP, EP_UP, EP_HOOK };

struct query;

/* One try upstream: a socket connected to one resolver (host netns). */
struct up_try {
	struct query *q;
	struct net_endpoint ep; /* EP_UP, owner: this try */
	/* TCP: bytes of the query sent, the answer read so far. */
	bool connecting;
	size_t sent;
	uint8_t *ans;
	size_t ans_len;
};

/* A guest TCP connection: length-prefixed messages, one query at a time. */
struct tcp_conn {
	bool used;
	struct net_endpoint ep;
	struct sockaddr_in peer,
		local; /* the guest's, and where it connected */
	uint8_t *in;   /* DNS_TCP_LEN + DNS_TCP_MAX, read ahead */
	size_t in_len;
	uint8_t *out; /* an answer being written, with its prefix */
	size_t out_off, out_len;
	struct query *q; /* in flight for this connection */
	uint64_t last_ms;
};

struct query {
	bool used;
	bool tcp;		  /* asked over TCP, forwarded over TCP */
	bool due;		  /* its next try starts after this batch */
	uint64_t seq;		  /* age: the oldest is dropped when full */
	struct sockaddr_in guest; /* UDP: where the answer goes */
	struct sockaddr_in local; /* UDP: what it was sent to: the source */
	struct tcp_conn *conn;	  /* TCP: the same */
	/* The resolvers it goes to: the policy's, or a hook's grant. */
	struct sockaddr_in res[NET_POLICY_MAX_RESOLVERS];
	unsigned int nr_res;
	bool asking;	  /* waiting for the hook's answer (hook_id) */
	bool granted;	  /* by a hook's answer: its TTL keeps the grant */
	uint64_t hook_id; /* hook__cancel's */
	struct dns_query_info qi; /* the guest's ID, flags, question */
	uint16_t up_id;
	unsigned int udp_max;  /* bytes the guest takes over UDP */
	uint8_t *wire;	       /* 2-byte length, then the query (our ID) */
	size_t len;	       /* of the query, without the prefix */
	unsigned int resolver; /* of the next try */
	unsigned int tries;   /* started; each keeps its socket until the end */
	uint64_t deadline_ms; /* of the latest try */
	struct up_try up[DNS_MAX_TRIES];
};

/*
 * What the resolver takes from a policy (dns.c's policy_copy): where
 * questions go, and which the rules let through (Documentation/
 * network.md, "Which names").
 */
struct dns_rules {
	struct sockaddr_in resolvers[NET_POLICY_MAX_RESOLVERS];
	unsigned int nr_resolvers;
	/*
	 * The policy's hook: its socket ("": none) and deadline. hook_all
	 * (a hook and no "dns" key, net_policy__dns_hook): every question
	 * goes to it; else only those the name rules do not let through.
	 */
	char hook_socket[NET_HOOK_PATH_MAX + 1];
	unsigned int hook_timeout_ms;
	bool hook_all;
	struct net_dns_names *names; /* owned; NULL: no name */
};

struct dns {
	struct dns_params p;
	struct dns_rules rules;
	/*
	 * The hook client is this thread's own connection, apart from the
	 * proxy's: each has one owner, and nothing locks.
	 */
	struct hook *hook;
	struct net_endpoint ep_hook;
	struct dns_hook_cache *cache;
	struct dns_hook_log log;
	int udp_fd, lsn_fd;
	unsigned int nr_up; /* upstream sockets open: at most max_pending */
	struct net_endpoints eps; /* the resolver thread's */
	struct net_endpoint ep_udp, ep_lsn;

	/*
	 * resident__table: queries[fresh_queries..] were never used, never
	 * touched, so the pages are resident only as deep as the guest's
	 * questions in flight ever went; every walk stops there.
	 */
	struct query *queries; /* max_pending */
	unsigned int fresh_queries;
	struct tcp_conn conns[DNS_MAX_TCP_CONNS];
	uint64_t seq;
	uint8_t id_key[SIPHASH__KEY_LEN];
	uint64_t id_counter;
	uint8_t *buf;	    /* one datagram, DNS_EDNS_MAX */
	struct dns_rr *rrs; /* DNS_MAX_ANSWER_RRS, scratch */

	pthread_mutex_t stats_lock; /* stats, and the resolvers handed over */
	struct dns_stats stats;
	/* dns__set_resolvers(): taken by the thread at its next wake. */
	struct dns_rules next;
	bool resolvers_changed;
};

static inline uint64_t dns_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void dns_count(struct dns *d, uint64_t *what, uint64_t n)
{
	pthread_mutex_lock(&d->stats_lock);
	*what += n;
	pthread_mutex_unlock(&d->stats_lock);
}

/* ---- dns.c: the guest's side, for dns-up.c ----------------------------- */

/* Queues msg (its length prefix added) and writes what the socket takes. */
int dns_conn__send(struct tcp_conn *c, const uint8_t *msg, size_t len,
		   uint64_t now);
/*
 * Each whole message read, while nothing is in flight for the
 * connection and nothing is being written to it; then its interest.
 */
void dns_conn__after(struct dns *d, struct tcp_conn *c, uint64_t now);
/* A datagram to the guest at to, from the address it asked (from). */
int dns_udp__send(struct dns *d, const void *m, size_t len,
		  const struct sockaddr_in *to, const struct sockaddr_in *from);
/*
 * Our reply (REFUSED, FORMERR, SERVFAIL, TC) to the guest's query, from
 * local over UDP, or on connection c.
 */
void dns_reply__own(struct dns *d, const uint8_t *qm,
		    const struct dns_query_info *qi,
		    const struct sockaddr_in *guest,
		    const struct sockaddr_in *local, struct tcp_conn *c,
		    uint16_t flags, unsigned int rcode, bool with_question);
/* q ended: its tries, its hook question, its slot. */
void dns_query__release(struct dns *d, struct query *q);

/* ---- dns-up.c: forwarding ---------------------------------------------- */

/* Every try's socket of q closed. */
void dns_up__close(struct dns *d, struct query *q);
/* q's next try when it is due: the next resolver in its list. */
void dns_up__start(struct dns *d, struct query *q, uint64_t now);
/* q's latest try's time is up: the next try is due, or SERVFAIL. */
void dns_up__timed_out(struct dns *d, struct query *q, uint64_t now);
/* Events on an upstream try's socket, UDP and TCP. */
void dns_up__udp_event(struct dns *d, struct up_try *t, uint64_t now);
void dns_up__tcp_event(struct dns *d, struct up_try *t, uint64_t now);

#endif
