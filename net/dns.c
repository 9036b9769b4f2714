// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's DNS resolver (dns.h, Documentation/network.md "DNS").
 *
 * Its two guest-facing sockets are made in the VM netns by a short-lived
 * thread (net/nsthread.h) and keep that netns; the resolver thread
 * never leaves the vmm's own, so every upstream socket it makes is the
 * host's. One epoll loop serves the guest's UDP socket, its TCP listener
 * and connections, and one upstream socket per query in flight.
 *
 * A query upstream carries an ID of ours (SipHash of a counter under a
 * key drawn at create), not the guest's, and goes out from a fresh
 * connected socket: an answer must come from the resolver asked, to that
 * socket's port, with that ID and the same question, before it is relayed
 * and its A records bound. A guest cannot choose what is trusted.
 *
 * A retry does not give up on the try before it: that try's socket stays
 * open until the query ends, and the first answer to either is relayed.
 * An upstream slower than the per-try timeout (a recursive resolver with
 * a cold cache) is still heard; closing the first try's socket at the
 * retry lost its answer, and the guest's first lookups failed
 * (Documentation/network.md, "Slow upstreams").
 *
 * New upstream tries start only after a batch of epoll events has been
 * handled: an event still in the batch never meets a socket made in a
 * slot it belonged to.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/errf.h"
#include "lib/log.h"
#include "lib/siphash.h"
#include "lib/worker.h"
#include "net/dns-internal.h"
#include "net/dns.h"
#include "net/endpoint.h"
#include "net/hook.h"
#include "net/nsthread.h"

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

struct dns {
	struct dns_params p;
	struct sockaddr_in resolvers[NET_POLICY_MAX_RESOLVERS];
	unsigned int nr_resolvers;
	/*
	 * DNS through the hook (net_policy__dns_hook): its socket ("": the
	 * policy's resolvers decide) and deadline. The hook client is this
	 * thread's own connection, apart from the proxy's: each has one
	 * owner, and nothing locks.
	 */
	char hook_socket[NET_HOOK_PATH_MAX + 1];
	unsigned int hook_timeout_ms;
	struct hook *hook;
	struct net_endpoint ep_hook;
	struct dns_hook_cache *cache;
	struct dns_hook_log log;
	int udp_fd, lsn_fd;
	unsigned int nr_up; /* upstream sockets open: at most max_pending */
	struct net_endpoints eps; /* the resolver thread's */
	struct net_endpoint ep_udp, ep_lsn;

	struct query *queries; /* max_pending */
	struct tcp_conn conns[DNS_MAX_TCP_CONNS];
	uint64_t seq;
	uint8_t id_key[SIPHASH__KEY_LEN];
	uint64_t id_counter;
	uint8_t *buf;	    /* one datagram, DNS_EDNS_MAX */
	struct dns_rr *rrs; /* DNS_MAX_ANSWER_RRS, scratch */

	pthread_mutex_t stats_lock; /* stats, and the resolvers handed over */
	struct dns_stats stats;
	/* dns__set_resolvers(): taken by the thread at its next wake. */
	struct sockaddr_in next_resolvers[NET_POLICY_MAX_RESOLVERS];
	unsigned int nr_next_resolvers;
	char next_hook_socket[NET_HOOK_PATH_MAX + 1];
	unsigned int next_hook_timeout_ms;
	bool resolvers_changed;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void count(struct dns *d, uint64_t *what, uint64_t n)
{
	pthread_mutex_lock(&d->stats_lock);
	*what += n;
	pthread_mutex_unlock(&d->stats_lock);
}

/* ---- guest TCP connections ----------------------------------------------- */

static void query_release(struct dns *d, struct query *q);

static void conn_close(struct dns *d, struct tcp_conn *c)
{
	if (c->q)
		query_release(d, c->q);
	net_endpoint__close(&c->ep);
	free(c->in);
	free(c->out);
	*c = (struct tcp_conn){ .ep.fd = -1 };
}

/* Writes what is left of the answer; 0 also when the socket is full. */
static int conn_flush(struct tcp_conn *c, uint64_t now)
{
	ssize_t n;

	while (c->out && c->out_off < c->out_len) {
		n = send(c->ep.fd, c->out + c->out_off, c->out_len - c->out_off,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->out_off += n;
		c->last_ms = now;
	}
	free(c->out);
	c->out = NULL;
	c->out_off = c->out_len = 0;
	return 0;
}

/* Queues msg (its length prefix added) and writes what the socket takes. */
static int conn_send(struct tcp_conn *c, const uint8_t *msg, size_t len,
		     uint64_t now)
{
	c->out = malloc(DNS_TCP_LEN + len);
	if (!c->out)
		return -ENOMEM;
	dns_put16(c->out, (uint16_t)len);
	memcpy(c->out + DNS_TCP_LEN, msg, len);
	c->out_off = 0;
	c->out_len = DNS_TCP_LEN + len;
	return conn_flush(c, now);
}

static uint32_t conn_interest(const struct tcp_conn *c)
{
	if (c->out)
		return EPOLLOUT;
	if (!c->q && c->in_len < DNS_TCP_LEN + DNS_TCP_MAX)
		return EPOLLIN;
	return 0; /* waiting for upstream: no more reading meanwhile */
}

/* ---- replies of our own -------------------------------------------------- */

/*
 * A datagram to the guest at to, from the address it sent its query to
 * (from): the gateway, or any address the egress program passed port 53
 * of (the socket is transparent, so that address may be its source).
 */
static int udp_send(struct dns *d, const void *m, size_t len,
		    const struct sockaddr_in *to,
		    const struct sockaddr_in *from)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct in_pktinfo))];
		struct cmsghdr align;
	} ctl = { 0 };
	struct iovec iov = { .iov_base = (void *)m, .iov_len = len };
	struct msghdr mh = { .msg_name = (void *)to,
			     .msg_namelen = sizeof(*to),
			     .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	struct in_pktinfo pi = { .ipi_spec_dst = from->sin_addr };

	cm->cmsg_level = SOL_IP;
	cm->cmsg_type = IP_PKTINFO;
	cm->cmsg_len = CMSG_LEN(sizeof(pi));
	memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
	return sendmsg(d->udp_fd, &mh, MSG_DONTWAIT) == (ssize_t)len ? 0 :
								       -errno;
}

/*
 * Our reply (REFUSED, FORMERR, SERVFAIL, TC) to the guest's query, from
 * local over UDP, or on connection c.
 */
static void reply_own(struct dns *d, const uint8_t *qm,
		      const struct dns_query_info *qi,
		      const struct sockaddr_in *guest,
		      const struct sockaddr_in *local, struct tcp_conn *c,
		      uint16_t flags, unsigned int rcode, bool with_question)
{
	uint8_t out[DNS_SHORT_REPLY_MAX];
	size_t n = dns_msg__reply(out, sizeof(out), qm, qi, flags, rcode,
				  with_question);
	int ret = 0;

	if (c)
		ret = conn_send(c, out, n, now_ms());
	else
		ret = udp_send(d, out, n, guest, local);
	if (ret)
		count(d, &d->stats.errors, 1);
}

/* ---- queries ------------------------------------------------------------- */

static void try_close(struct dns *d, struct up_try *t)
{
	if (t->ep.fd >= 0)
		d->nr_up--;
	net_endpoint__close(&t->ep);
	free(t->ans);
	t->ans = NULL;
	t->ans_len = t->sent = 0;
	t->connecting = false;
}

/* Every try's socket closed. */
static void up_close(struct dns *d, struct query *q)
{
	for (unsigned int i = 0; i < DNS_MAX_TRIES; i++)
		try_close(d, &q->up[i]);
}

static bool try_open_now(const struct up_try *t)
{
	return t->ep.fd >= 0;
}

static unsigned int tries_open(const struct query *q)
{
	unsigned int open = 0;

	for (unsigned int i = 0; i < q->tries; i++)
		open += try_open_now(&q->up[i]);
	return open;
}

/* An empty query slot: no tries, every socket closed. */
static void query_clear(struct query *q)
{
	*q = (struct query){ .used = false };
	for (unsigned int i = 0; i < DNS_MAX_TRIES; i++)
		q->up[i] = (struct up_try){ .q = q, .ep.fd = -1 };
}

static void query_release(struct dns *d, struct query *q)
{
	if (q->asking)
		hook__cancel(d->hook, q->hook_id);
	up_close(d, q);
	if (q->conn)
		q->conn->q = NULL;
	free(q->wire);
	query_clear(q);
}

/* A free slot, or the oldest query's, dropped (its guest gets nothing). */
static struct query *query_slot(struct dns *d)
{
	struct query *oldest = NULL;

	for (unsigned int i = 0; i < d->p.max_pending; i++) {
		struct query *q = &d->queries[i];

		if (!q->used)
			return q;
		if (!oldest || q->seq < oldest->seq)
			oldest = q;
	}
	count(d, &d->stats.dropped, 1);
	/* A TCP guest waits on its connection: closing it says so. */
	if (oldest->conn)
		conn_close(d, oldest->conn);
	else
		query_release(d, oldest);
	return oldest;
}

/* An ID the guest cannot predict: a keyed hash of a counter. */
static uint16_t query_id(struct dns *d)
{
	uint64_t h =
		siphash__24(d->id_key, &d->id_counter, sizeof(d->id_counter));

	d->id_counter++;
	return (uint16_t)h;
}

static unsigned int udp_limit(const struct dns_query_info *qi)
{
	if (!qi->opt_class_off || qi->udp_max < DNS_UDP_MAX)
		return DNS_UDP_MAX;
	return qi->udp_max < DNS_EDNS_MAX ? qi->udp_max : DNS_EDNS_MAX;
}

/* Where a guest's message came from and went to. */
struct guest_addr {
	const struct sockaddr_in *guest; /* UDP: the guest's; TCP: NULL */
	const struct sockaddr_in *local; /* UDP: what it was sent to */
	struct tcp_conn *c;		 /* TCP: its connection */
};

/*
 * A new query for upstream to nr resolvers res (none: it waits for the
 * hook's grant): the guest's message without trailing bytes, our ID in
 * it, an EDNS size over our cap lowered to it. It starts after this
 * batch. NULL when out of memory.
 */
static struct query *query_new(struct dns *d, const uint8_t *m,
			       const struct dns_query_info *qi,
			       const struct guest_addr *g,
			       const struct sockaddr_in *res, unsigned int nr)
{
	struct tcp_conn *c = g->c;
	struct query *q = query_slot(d);
	uint8_t *wire = malloc(DNS_TCP_LEN + qi->len);

	if (!wire) {
		count(d, &d->stats.errors, 1);
		return NULL;
	}
	query_clear(q);
	q->used = true;
	q->tcp = c != NULL;
	q->due = nr > 0;
	q->deadline_ms = nr ? 0 : UINT64_MAX; /* the hook's deadline rules */
	if (nr)
		memcpy(q->res, res, nr * sizeof(*res));
	q->nr_res = nr;
	q->seq = d->seq++;
	q->conn = c;
	q->qi = *qi;
	q->udp_max = udp_limit(qi);
	q->wire = wire;
	q->len = qi->len;
	if (g->guest) {
		q->guest = *g->guest;
		q->local = *g->local;
	}
	dns_put16(wire, (uint16_t)qi->len);
	memcpy(wire + DNS_TCP_LEN, m, qi->len);
	q->up_id = query_id(d);
	dns_put16(wire + DNS_TCP_LEN, q->up_id);
	if (qi->opt_class_off && qi->udp_max > DNS_EDNS_MAX)
		dns_put16(wire + DNS_TCP_LEN + qi->opt_class_off, DNS_EDNS_MAX);
	if (c)
		c->q = q;
	return q;
}

static void conn_after(struct dns *d, struct tcp_conn *c, uint64_t now);

/* Where q's guest is, and where it sent q. */
static void query_ends(const struct query *q, struct sockaddr_in *src,
		       struct sockaddr_in *dst)
{
	*src = q->conn ? q->conn->peer : q->guest;
	*dst = q->conn ? q->conn->local : q->local;
}

/* The hook did not grant q: rcode to the guest, counted and logged. */
static void hook_refuse(struct dns *d, struct query *q, unsigned int rcode,
			const char *reason, const char *detail)
{
	struct tcp_conn *c = q->conn;
	struct sockaddr_in src, dst;

	count(d,
	      rcode == DNS_RCODE_REFUSED ? &d->stats.hook_refused :
					   &d->stats.hook_failed,
	      1);
	query_ends(q, &src, &dst);
	dns_hook__log(&d->log, now_ms(), &q->qi.q, q->tcp, &src, &dst,
		      rcode == DNS_RCODE_REFUSED, reason, detail);
	reply_own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest, &q->local, c,
		  DNS_FLAG_RA, rcode, true);
	query_release(d, q);
	if (c)
		conn_after(d, c, now_ms());
}

/* The hook's answer to q's question (hook_line_answer_fn). */
static void hook_answered(void *opaque, void *cookie, const char *line,
			  size_t n, const char *reason)
{
	struct dns *d = opaque;
	struct query *q = cookie;
	struct dns_hook_answer a;

	q->asking = false;
	if (!line) {
		hook_refuse(d, q, DNS_RCODE_SERVFAIL, reason, "");
		return;
	}
	dns_hook__answer(line, n, &q->qi.q, &a);
	switch (a.verdict) {
	case DNS_HOOK_GRANT:
		count(d, &d->stats.hook_granted, 1);
		memcpy(q->res, a.resolvers, a.nr_resolvers * sizeof(*q->res));
		q->nr_res = a.nr_resolvers;
		q->granted = true;
		q->due = true;
		/* Kept meanwhile: a retry before the answer is not asked. */
		dns_hook_cache__insert(d->cache, &q->qi.q, q->res, q->nr_res,
				       DNS_HOOK_MIN_TTL_S, now_ms());
		break;
	case DNS_HOOK_DENY:
		hook_refuse(d, q, DNS_RCODE_REFUSED, HOOK_DENY, a.why);
		break;
	case DNS_HOOK_INVALID:
		hook_refuse(d, q, DNS_RCODE_SERVFAIL, HOOK_INVALID, a.why);
		break;
	case DNS_HOOK_UNKNOWN:
		hook_refuse(d, q, DNS_RCODE_SERVFAIL, HOOK_UNKNOWN, a.why);
		break;
	}
}

/*
 * A query the policy puts to the hook: a grant kept for its name and
 * type forwards it at once; else it waits for the hook's answer.
 */
static void hook_query(struct dns *d, const uint8_t *m,
		       const struct dns_query_info *qi,
		       const struct guest_addr *g)
{
	struct sockaddr_in res[DNS_HOOK_MAX_RESOLVERS];
	struct dns_hook_question hq = { .tcp = g->c != NULL, .q = &qi->q };
	struct hook_line_question lq = { .socket = d->hook_socket,
					 .timeout_ms = d->hook_timeout_ms,
					 .build = dns_hook__question,
					 .arg = &hq };
	uint64_t now = now_ms();
	unsigned int nr;
	struct query *q;
	int ret;

	nr = dns_hook_cache__lookup(d->cache, &qi->q, now, res);
	if (nr) {
		/* Its answer does not renew the grant: the hook is asked. */
		count(d, &d->stats.hook_cached, 1);
		query_new(d, m, qi, g, res, nr);
		return;
	}
	q = query_new(d, m, qi, g, NULL, 0);
	if (!q)
		return;
	query_ends(q, &hq.src, &hq.dst);
	count(d, &d->stats.hook_asked, 1);
	ret = hook__ask_line(d->hook, &lq, q, now, &q->hook_id);
	q->asking = !ret;
	if (ret)
		hook_refuse(d, q, DNS_RCODE_SERVFAIL, hook__failure(ret), "");
}

/* One guest message, from UDP (g->guest) or a TCP connection (g->c). */
static void guest_message(struct dns *d, const uint8_t *m, size_t len,
			  const struct guest_addr *g)
{
	struct dns_query_info qi;

	switch (dns_msg__parse_query(m, len, &qi)) {
	case DNS_QUERY_DROP:
		count(d, &d->stats.malformed, 1);
		return;
	case DNS_QUERY_FORMERR:
		count(d, &d->stats.malformed, 1);
		reply_own(d, m, &qi, g->guest, g->local, g->c, 0,
			  DNS_RCODE_FORMERR, false);
		return;
	case DNS_QUERY_NOTIMP:
		count(d, &d->stats.malformed, 1);
		reply_own(d, m, &qi, g->guest, g->local, g->c, 0,
			  DNS_RCODE_NOTIMP, false);
		return;
	case DNS_QUERY_OK:
		break;
	}
	count(d, &d->stats.queries, 1);
	if (d->hook_socket[0]) {
		hook_query(d, m, &qi, g);
		return;
	}
	if (!d->nr_resolvers) {
		/* Denied DNS: REFUSED, and nothing leaves. */
		count(d, &d->stats.refused, 1);
		reply_own(d, m, &qi, g->guest, g->local, g->c, 0,
			  DNS_RCODE_REFUSED, true);
		return;
	}
	query_new(d, m, &qi, g, d->resolvers, d->nr_resolvers);
}

/* The A records for the question's name, bound; how many. */
static unsigned int bind_answer(struct dns *d, const struct query *q,
				const uint8_t *m, size_t len)
{
	struct dns_a_record a[DNS_MAX_BINDINGS];
	char host[NET_HOSTNAME_MAX + 1];
	unsigned int bound = 0;
	int n;

	if (dns_rcode(m) != DNS_RCODE_NOERROR || q->qi.q.type != DNS_TYPE_A ||
	    q->qi.q.qclass != DNS_CLASS_IN ||
	    dns_msg__name_text(q->qi.q.name, q->qi.q.name_len, host,
			       sizeof(host)))
		return 0;
	n = dns_msg__a_records(m, len, &q->qi.q, d->rrs, a, ARRAY_SIZE(a));
	if (n < 0) {
		count(d, &d->stats.bad_answers, 1);
		return 0;
	}
	pthread_mutex_lock(d->p.bindings_lock);
	for (int i = 0; i < n; i++)
		if (!net_bindings__insert(d->p.bindings, host, a[i].addr,
					  a[i].ttl_s))
			bound++;
	pthread_mutex_unlock(d->p.bindings_lock);
	return bound;
}

/* A hook's grant is kept for the lowest TTL of the answer it led to. */
static void keep_grant(struct dns *d, const struct query *q, const uint8_t *m,
		       size_t len, uint64_t now)
{
	uint32_t ttl_s;

	if (dns_msg__min_ttl(m, len, &ttl_s) < 0)
		ttl_s = DNS_HOOK_MIN_TTL_S;
	dns_hook_cache__insert(d->cache, &q->qi.q, q->res, q->nr_res, ttl_s,
			       now);
}

/*
 * Upstream's answer m[0, len) (the first len bytes of a message of
 * full_len) to the guest, with its own ID, and its bindings.
 */
static void query_answered(struct dns *d, struct query *q, uint8_t *m,
			   size_t len, size_t full_len, uint64_t now)
{
	struct tcp_conn *c = q->conn;
	unsigned int bound = 0;
	int ret = 0;

	if (len == full_len)
		bound = bind_answer(d, q, m, len);
	if (len == full_len && q->granted)
		keep_grant(d, q, m, len, now);
	/* Counted before the guest can see the answer. */
	pthread_mutex_lock(&d->stats_lock);
	d->stats.answered++;
	d->stats.bindings += bound;
	pthread_mutex_unlock(&d->stats_lock);
	dns_put16(m, q->qi.id);
	if (c) {
		ret = conn_send(c, m, len, now);
	} else if (full_len > q->udp_max) {
		/* More than the guest takes: TC, and it asks over TCP. */
		reply_own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest,
			  &q->local, NULL, DNS_FLAG_TC | DNS_FLAG_RA,
			  DNS_RCODE_NOERROR, true);
	} else {
		ret = udp_send(d, m, len, &q->guest, &q->local);
	}
	if (ret)
		count(d, &d->stats.errors, 1);
	query_release(d, q);
	if (c)
		conn_after(d, c, now);
}

/* Every try has failed or timed out: SERVFAIL. */
static void query_servfail(struct dns *d, struct query *q, uint64_t now)
{
	struct tcp_conn *c = q->conn;

	count(d, &d->stats.servfail, 1);
	reply_own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest, &q->local, c,
		  DNS_FLAG_RA, DNS_RCODE_SERVFAIL, true);
	query_release(d, q);
	if (c)
		conn_after(d, c, now);
}

/*
 * The latest try's time is up (its socket stays open: a late answer to
 * it still counts): the next resolver after this batch, or SERVFAIL.
 */
static void try_timed_out(struct dns *d, struct query *q, uint64_t now)
{
	if (q->tries < DNS_MAX_TRIES) {
		q->due = true;
		return;
	}
	query_servfail(d, q, now);
}

/*
 * Try t failed outright (refused, closed early, a wrong answer on TCP):
 * its socket closed; if it was the latest, the next try after this
 * batch; SERVFAIL once no try is left open and none is to come.
 */
static void try_failed(struct dns *d, struct query *q, struct up_try *t,
		       uint64_t now)
{
	try_close(d, t);
	if (t == &q->up[q->tries - 1] && q->tries < DNS_MAX_TRIES) {
		q->due = true;
		return;
	}
	if (!tries_open(q) && q->tries == DNS_MAX_TRIES)
		query_servfail(d, q, now); /* else an earlier try may answer */
}

/* The oldest open try of q closed. */
static void close_oldest_try(struct dns *d, struct query *q)
{
	for (unsigned int i = 0; i < q->tries; i++)
		if (try_open_now(&q->up[i])) {
			try_close(d, &q->up[i]);
			return;
		}
}

/*
 * Room for q's next upstream socket: at most max_pending are open (the
 * vmm's descriptor budget counts one a query). When full, the oldest open
 * try of a query that has two open gives way, or else q's own earlier
 * try (as many queries as sockets: one each).
 */
static void up_room(struct dns *d, struct query *q)
{
	if (d->nr_up < d->p.max_pending)
		return;
	for (unsigned int i = 0; i < d->p.max_pending; i++)
		if (d->queries[i].used && tries_open(&d->queries[i]) >= 2) {
			close_oldest_try(d, &d->queries[i]);
			return;
		}
	close_oldest_try(d, q);
}

/* A socket to the resolver, from the host netns, and the query sent. */
static int try_open(struct dns *d, struct query *q, struct up_try *t,
		    const struct sockaddr_in *to)
{
	int type = q->tcp ? SOCK_STREAM : SOCK_DGRAM;
	int fd;

	up_room(d, q);
	fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	d->nr_up++;
	t->ep = (struct net_endpoint){
		.kind = EP_UP, .fd = fd, .events = UINT32_MAX, .owner = t
	};
	if (connect(fd, (const struct sockaddr *)to, sizeof(*to))) {
		if (!q->tcp || errno != EINPROGRESS)
			return -errno;
		t->connecting = true;
		return net_endpoints__set(&d->eps, &t->ep, EPOLLOUT);
	}
	if (q->tcp)
		return net_endpoints__set(&d->eps, &t->ep, EPOLLOUT);
	if (send(fd, q->wire + DNS_TCP_LEN, q->len, MSG_DONTWAIT) !=
	    (ssize_t)q->len)
		return -errno;
	return net_endpoints__set(&d->eps, &t->ep, EPOLLIN);
}

/* The next try: the next resolver in the list (the same one if alone). */
static void try_start(struct dns *d, struct query *q, uint64_t now)
{
	struct up_try *t;
	int ret;

	while (q->used && q->due && q->tries < DNS_MAX_TRIES) {
		q->due = false;
		q->deadline_ms = now + d->p.timeout_ms;
		count(d, &d->stats.forwarded, 1);
		t = &q->up[q->tries++];
		ret = try_open(d, q, t, &q->res[q->resolver]);
		q->resolver = (q->resolver + 1) % q->nr_res;
		if (ret) {
			pr_debug("%s: upstream: %s", DNS_NAME, strerror(-ret));
			count(d, &d->stats.errors, 1);
			try_failed(d, q, t, now);
		}
	}
}

/* Datagrams from the resolver: the first that answers the query counts. */
static void up_udp_event(struct dns *d, struct up_try *t, uint64_t now)
{
	struct query *q = t->q;
	ssize_t n;

	for (int i = 0; i < DNS_DGRAM_BUDGET; i++) {
		n = recv(t->ep.fd, d->buf, DNS_EDNS_MAX,
			 MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			/* ECONNREFUSED: nothing listens there. */
			count(d, &d->stats.errors, 1);
			try_failed(d, q, t, now);
			return;
		}
		if (!dns_msg__answers(d->buf,
				      (size_t)n < DNS_EDNS_MAX ? (size_t)n :
								 DNS_EDNS_MAX,
				      q->up_id, &q->qi.q)) {
			count(d, &d->stats.bad_answers, 1);
			continue;
		}
		query_answered(d, q, d->buf,
			       (size_t)n < DNS_EDNS_MAX ? (size_t)n :
							  DNS_EDNS_MAX,
			       (size_t)n, now);
		return;
	}
}

static int up_tcp_connected(struct up_try *t)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	if (getsockopt(t->ep.fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
		return -errno;
	if (soerr)
		return -soerr;
	t->connecting = false;
	return 0;
}

/* The query out, then the answer in; 1 when it is all there. */
static int up_tcp_io(struct up_try *t)
{
	const struct query *q = t->q;
	size_t total = DNS_TCP_LEN + q->len, want;
	ssize_t n;
	int ret;

	if (t->connecting) {
		ret = up_tcp_connected(t);
		if (ret)
			return ret;
	}
	while (t->sent < total) {
		n = send(t->ep.fd, q->wire + t->sent, total - t->sent,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		t->sent += n;
	}
	if (!t->ans) {
		t->ans = malloc(DNS_TCP_LEN + DNS_TCP_MAX);
		if (!t->ans)
			return -ENOMEM;
	}
	for (;;) {
		want = t->ans_len < DNS_TCP_LEN ?
			       DNS_TCP_LEN :
			       DNS_TCP_LEN + dns_get16(t->ans);
		if (t->ans_len >= DNS_TCP_LEN && t->ans_len == want)
			return 1;
		n = recv(t->ep.fd, t->ans + t->ans_len, want - t->ans_len,
			 MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		if (!n)
			return -ECONNRESET; /* closed before a whole answer */
		t->ans_len += n;
	}
}

static void up_tcp_event(struct dns *d, struct up_try *t, uint64_t now)
{
	struct query *q = t->q;
	size_t len;
	int ret;

	ret = up_tcp_io(t);
	if (ret == 1) {
		len = t->ans_len - DNS_TCP_LEN;
		if (dns_msg__answers(t->ans + DNS_TCP_LEN, len, q->up_id,
				     &q->qi.q)) {
			query_answered(d, q, t->ans + DNS_TCP_LEN, len, len,
				       now);
			return;
		}
		count(d, &d->stats.bad_answers, 1);
		ret = -EBADMSG; /* a stream that answers wrong is done */
	}
	if (!ret)
		ret = net_endpoints__set(
			&d->eps, &t->ep,
			t->sent < DNS_TCP_LEN + q->len ? EPOLLOUT : EPOLLIN);
	if (ret) {
		pr_debug("%s: tcp upstream: %s", DNS_NAME, strerror(-ret));
		count(d, &d->stats.errors, 1);
		try_failed(d, q, t, now);
	}
}

/* ---- the guest's sockets ------------------------------------------------- */

/* The address a datagram was sent to (IP_PKTINFO); false: not said. */
static bool sent_to(struct msghdr *mh, uint16_t port, struct sockaddr_in *to)
{
	struct in_pktinfo pi;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm;
	     cm = CMSG_NXTHDR(mh, cm))
		if (cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_PKTINFO &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(pi))) {
			memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
			*to = (struct sockaddr_in){ .sin_family = AF_INET,
						    .sin_port = htons(port),
						    .sin_addr = pi.ipi_addr };
			return true;
		}
	return false;
}

static void udp_from_guest(struct dns *d)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct in_pktinfo))];
		struct cmsghdr align;
	} ctl;
	struct sockaddr_in src, dst;
	struct iovec iov = { .iov_base = d->buf, .iov_len = DNS_EDNS_MAX };
	struct msghdr mh;
	ssize_t n;

	for (int i = 0; i < DNS_DGRAM_BUDGET; i++) {
		mh = (struct msghdr){ .msg_name = &src,
				      .msg_namelen = sizeof(src),
				      .msg_iov = &iov,
				      .msg_iovlen = 1,
				      .msg_control = ctl.buf,
				      .msg_controllen = sizeof(ctl.buf) };
		n = recvmsg(d->udp_fd, &mh, MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (mh.msg_namelen != sizeof(src) || (size_t)n > DNS_EDNS_MAX ||
		    !sent_to(&mh, d->p.port, &dst)) {
			count(d, &d->stats.malformed, 1);
			continue;
		}
		guest_message(
			d, d->buf, (size_t)n,
			&(struct guest_addr){ .guest = &src, .local = &dst });
	}
}

/*
 * Each whole message read, while nothing is in flight for the
 * connection and nothing is being written to it; then its interest.
 */
static void conn_after(struct dns *d, struct tcp_conn *c, uint64_t now)
{
	size_t len;
	int ret = 0;

	while (!c->q && !c->out && c->in_len >= DNS_TCP_LEN) {
		len = dns_get16(c->in);
		if (c->in_len < DNS_TCP_LEN + len)
			break;
		if (len < DNS_HDR_LEN) {
			/* Not even a header: no ID to answer to. */
			count(d, &d->stats.malformed, 1);
			conn_close(d, c);
			return;
		}
		guest_message(d, c->in + DNS_TCP_LEN, len,
			      &(struct guest_addr){ .c = c });
		c->in_len -= DNS_TCP_LEN + len;
		memmove(c->in, c->in + DNS_TCP_LEN + len, c->in_len);
	}
	ret = net_endpoints__set(&d->eps, &c->ep, conn_interest(c));
	if (ret) {
		count(d, &d->stats.errors, 1);
		conn_close(d, c);
	}
}

static void conn_event(struct dns *d, struct tcp_conn *c, uint32_t events,
		       uint64_t now)
{
	size_t room = DNS_TCP_LEN + DNS_TCP_MAX - c->in_len;
	ssize_t n;
	int ret = 0;

	/* Reset, or shut both ways: nobody to answer (and HUP never stops). */
	if (events & (EPOLLHUP | EPOLLERR)) {
		conn_close(d, c);
		return;
	}
	if (c->out)
		ret = conn_flush(c, now);
	if (!ret && !c->out && !c->q && room && (events & EPOLLIN)) {
		n = recv(c->ep.fd, c->in + c->in_len, room, MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			ret = -errno;
		else if (!n)
			ret = -ECONNRESET; /* the guest is done */
		else if (n > 0)
			c->in_len += n;
		c->last_ms = now;
	}
	if (ret) {
		conn_close(d, c);
		return;
	}
	conn_after(d, c, now);
}

static void tcp_accept(struct dns *d, uint64_t now)
{
	struct sockaddr_in peer, local;
	socklen_t plen, llen;
	struct tcp_conn *c;
	int fd;

	for (int i = 0; i < DNS_ACCEPT_BUDGET; i++) {
		plen = sizeof(peer);
		fd = accept4(d->lsn_fd, (struct sockaddr *)&peer, &plen,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == ECONNABORTED || errno == EINTR)
				continue;
			return;
		}
		c = NULL;
		for (unsigned int j = 0; !c && j < DNS_MAX_TCP_CONNS; j++)
			if (!d->conns[j].used)
				c = &d->conns[j];
		/* Full: this one is closed, the guest retries. */
		if (!c || !(c->in = malloc(DNS_TCP_LEN + DNS_TCP_MAX))) {
			count(d, &d->stats.dropped, 1);
			close(fd);
			continue;
		}
		c->used = true;
		c->last_ms = now;
		c->peer = peer;
		/* Where the guest connected: the gateway, or another address. */
		llen = sizeof(local);
		if (!getsockname(fd, (struct sockaddr *)&local, &llen))
			c->local = local;
		if (net_endpoints__add(&d->eps, &c->ep, EP_GUEST_TCP, fd, c,
				       EPOLLIN)) {
			count(d, &d->stats.errors, 1);
			c->ep.fd = fd;
			conn_close(d, c);
		}
	}
}

/* ---- the resolver thread ------------------------------------------------- */

/* Until the nearest deadline, at most a sweep away. */
static int loop_timeout(struct dns *d, uint64_t now)
{
	uint64_t next = now + DNS_SWEEP_MS;
	int hook_ms = hook__timeout(d->hook, now);

	if (hook_ms >= 0 && now + (uint64_t)hook_ms < next)
		next = now + (uint64_t)hook_ms;

	for (unsigned int i = 0; i < d->p.max_pending; i++) {
		struct query *q = &d->queries[i];

		if (q->used && q->deadline_ms < next)
			next = q->deadline_ms;
	}
	return next > now ? (int)(next - now) : 0;
}

static void sweep(struct dns *d, uint64_t now)
{
	pthread_mutex_lock(d->p.bindings_lock);
	net_bindings__expire(d->p.bindings);
	pthread_mutex_unlock(d->p.bindings_lock);
	for (unsigned int i = 0; i < DNS_MAX_TCP_CONNS; i++) {
		struct tcp_conn *c = &d->conns[i];

		if (c->used && !c->q && now - c->last_ms >= DNS_TCP_IDLE_MS)
			conn_close(d, c);
	}
}

static void event(struct dns *d, struct net_endpoint *e, uint32_t events,
		  uint64_t now)
{
	struct up_try *t;

	switch ((enum ep_kind)e->kind) {
	case EP_STOP:
	case EP_UDP:
	case EP_LISTEN:
	case EP_HOOK:
		break; /* the loop's */
	case EP_GUEST_TCP:
		conn_event(d, e->owner, events, now);
		break;
	case EP_UP:
		t = e->owner;
		if (t->q->tcp)
			up_tcp_event(d, t, now);
		else
			up_udp_event(d, t, now);
		break;
	}
}

/*
 * A replaced policy's resolvers: queries in flight start over on the new
 * list's first resolver (an answer from one the new policy dropped is
 * never relayed), or get REFUSED when the new list is empty.
 */
static void resolvers_take(struct dns *d, uint64_t now)
{
	bool changed;

	pthread_mutex_lock(&d->stats_lock);
	changed = d->resolvers_changed;
	if (changed) {
		memcpy(d->resolvers, d->next_resolvers, sizeof(d->resolvers));
		d->nr_resolvers = d->nr_next_resolvers;
		memcpy(d->hook_socket, d->next_hook_socket,
		       sizeof(d->hook_socket));
		d->hook_timeout_ms = d->next_hook_timeout_ms;
		d->resolvers_changed = false;
	}
	pthread_mutex_unlock(&d->stats_lock);
	if (!changed)
		return;
	/* The old policy's hook granted them: the new one decides anew. */
	dns_hook_cache__flush(d->cache);
	for (unsigned int i = 0; i < d->p.max_pending; i++) {
		struct query *q = &d->queries[i];
		struct tcp_conn *c = q->conn;

		if (!q->used)
			continue;
		up_close(d, q);
		if (d->hook_socket[0]) {
			/* The guest asks again, and the hook is asked. */
			hook_refuse(d, q, DNS_RCODE_SERVFAIL, HOOK_CHANGED, "");
			continue;
		}
		if (q->asking)
			hook__cancel(d->hook, q->hook_id);
		q->asking = q->granted = false;
		if (d->nr_resolvers) {
			memcpy(q->res, d->resolvers, sizeof(q->res));
			q->nr_res = d->nr_resolvers;
			q->resolver = q->tries = 0;
			q->due = true;
			continue;
		}
		count(d, &d->stats.refused, 1);
		reply_own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest,
			  &q->local, c, 0, DNS_RCODE_REFUSED, true);
		query_release(d, q);
		if (c)
			conn_after(d, c, now);
	}
}

static int dns_loop(struct dns *d)
{
	struct epoll_event evs[DNS_EPOLL_EVENTS];
	uint64_t now = now_ms(), last_sweep = now;
	bool udp_ready, accept_ready;
	int n;

	for (;;) {
		n = net_endpoints__wait(&d->eps, evs, DNS_EPOLL_EVENTS,
					loop_timeout(d, now));
		if (n < 0)
			return n;
		now = now_ms();
		udp_ready = accept_ready = false;
		for (int i = 0; i < n; i++) {
			struct net_endpoint *e = evs[i].data.ptr;

			if (e->fd < 0)
				continue; /* closed in this batch */
			if (e->kind == EP_STOP)
				return 0;
			udp_ready |= e->kind == EP_UDP;
			accept_ready |= e->kind == EP_LISTEN;
			event(d, e, evs[i].events, now);
		}
		if (udp_ready)
			udp_from_guest(d);
		if (accept_ready)
			tcp_accept(d, now);
		resolvers_take(d, now);
		/* Answers (or deadlines) of the hook: grants start below. */
		hook__run(d->hook, now);
		for (unsigned int i = 0; i < d->p.max_pending; i++) {
			struct query *q = &d->queries[i];

			if (q->used && !q->due && q->deadline_ms <= now)
				try_timed_out(d, q, now);
			try_start(d, q, now);
		}
		if (now - last_sweep >= DNS_SWEEP_MS) {
			sweep(d, now);
			last_sweep = now;
		}
	}
}

static void close_all(struct dns *d)
{
	for (unsigned int i = 0; i < DNS_MAX_TCP_CONNS; i++)
		if (d->conns[i].used)
			conn_close(d, &d->conns[i]);
	for (unsigned int i = 0; d->queries && i < d->p.max_pending; i++)
		if (d->queries[i].used)
			query_release(d, &d->queries[i]);
	if (d->udp_fd >= 0)
		close(d->udp_fd);
	if (d->lsn_fd >= 0)
		close(d->lsn_fd);
	d->udp_fd = d->lsn_fd = -1;
}

static void *dns_thread(void *arg)
{
	struct dns *d = arg;
	int ret;

	worker__block_signals();
	ret = dns_loop(d);
	if (ret)
		pr_err("%s: epoll_wait: %s; the guest's DNS gets no answers "
		       "from now on",
		       DNS_NAME, strerror(-ret));
	close_all(d);
	pthread_mutex_lock(&d->stats_lock);
	d->stats.running = false;
	pthread_mutex_unlock(&d->stats_lock);
	return NULL;
}

/* ---- the VM netns side --------------------------------------------------- */

static int gateway_socket(struct dns *d, int type, const char *what, char *err,
			  size_t errlen)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(d->p.port),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	char addr[INET_ADDRSTRLEN];
	int fd, ret = 0, one = 1;

	fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		ret = -errno;
	/*
	 * Every address of the VM netns is local to what the guest sends,
	 * so these get port 53 at any address the egress program passes;
	 * transparent, the answers may come from that address.
	 */
	if (!ret && setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof(one)))
		ret = -errno;
	if (!ret && type == SOCK_DGRAM &&
	    setsockopt(fd, SOL_IP, IP_PKTINFO, &one, sizeof(one)))
		ret = -errno;
	if (!ret && bind(fd, (struct sockaddr *)&a, sizeof(a)))
		ret = -errno;
	if (!ret && type == SOCK_STREAM && listen(fd, DNS_BACKLOG))
		ret = -errno;
	if (!ret)
		return fd;
	if (fd >= 0)
		close(fd);
	inet_ntop(AF_INET, &a.sin_addr, addr, sizeof(addr));
	return errf(err, errlen, ret, "%s: %s on %s:%u: %s", DNS_NAME, what,
		    addr, d->p.port, strerror(-ret));
}

struct ns_job {
	struct dns *d;
	char *err;
	size_t errlen;
};

/* In the VM netns, on a thread of its own; the sockets stay there. */
static int in_netns(void *arg)
{
	struct ns_job *j = arg;
	struct dns *d = j->d;

	d->udp_fd =
		gateway_socket(d, SOCK_DGRAM, "UDP socket", j->err, j->errlen);
	if (d->udp_fd < 0)
		return d->udp_fd;
	d->lsn_fd = gateway_socket(d, SOCK_STREAM, "TCP listener", j->err,
				   j->errlen);
	return d->lsn_fd < 0 ? d->lsn_fd : 0;
}

static int make_sockets(struct dns *d, char *err, size_t errlen)
{
	struct ns_job j = { .d = d, .err = err, .errlen = errlen };

	return nsthread__run(d->p.netns_fd, DNS_NAME, in_netns, &j, err,
			     errlen);
}

/* ---- create, start, destroy ---------------------------------------------- */

static int dns_alloc(struct dns *d, char *err, size_t errlen)
{
	int ret;

	d->queries = calloc(d->p.max_pending, sizeof(*d->queries));
	d->buf = malloc(DNS_EDNS_MAX);
	d->rrs = calloc(DNS_MAX_ANSWER_RRS, sizeof(*d->rrs));
	d->cache = dns_hook_cache__create(0);
	if (!d->queries || !d->buf || !d->rrs || !d->cache)
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    DNS_NAME);
	for (unsigned int i = 0; i < d->p.max_pending; i++)
		query_clear(&d->queries[i]);
	for (unsigned int i = 0; i < DNS_MAX_TCP_CONNS; i++)
		d->conns[i].ep.fd = -1;
	if (getrandom(d->id_key, sizeof(d->id_key), 0) !=
	    (ssize_t)sizeof(d->id_key))
		return errf(err, errlen, -EIO, "%s: getrandom: %s", DNS_NAME,
			    strerror(errno));
	ret = net_endpoints__open(&d->eps, EP_STOP);
	if (ret)
		return errf(err, errlen, ret, "%s: %s", DNS_NAME,
			    strerror(-ret));
	ret = hook__create(&d->hook,
			   &(struct hook_params){ .line_answer = hook_answered,
						  .opaque = d });
	if (ret)
		return errf(err, errlen, ret, "%s: hook: %s", DNS_NAME,
			    strerror(-ret));
	return 0;
}

/* The policy's resolvers and, when it puts DNS to it, its hook. */
static void policy_copy(const struct net_policy *policy,
			struct sockaddr_in *res, unsigned int *nr,
			char hook[NET_HOOK_PATH_MAX + 1], unsigned int *timeout)
{
	const char *sock = net_policy__dns_hook(policy, timeout);

	*nr = net_policy__nr_resolvers(policy);
	for (unsigned int i = 0; i < *nr; i++)
		net_policy__resolver(policy, i, &res[i]);
	snprintf(hook, NET_HOOK_PATH_MAX + 1, "%s", sock ? sock : "");
}

int dns__create(struct dns **out, const struct dns_params *params, char *err,
		size_t errlen)
{
	struct dns *d;
	int ret;

	*out = NULL;
	if (!params->bindings || !params->bindings_lock)
		return errf(err, errlen, -EINVAL, "%s: bad parameters",
			    DNS_NAME);
	d = calloc(1, sizeof(*d));
	if (!d)
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    DNS_NAME);
	d->p = *params;
	if (!d->p.timeout_ms)
		d->p.timeout_ms = DNS_QUERY_TIMEOUT_MS;
	if (!d->p.max_pending)
		d->p.max_pending = DNS_MAX_PENDING;
	if (!d->p.port)
		d->p.port = DNS_PORT;
	d->p.policy = NULL; /* copied below, not kept */
	policy_copy(params->policy, d->resolvers, &d->nr_resolvers,
		    d->hook_socket, &d->hook_timeout_ms);
	d->udp_fd = d->lsn_fd = -1;
	net_endpoints__init(&d->eps, DNS_NAME);
	pthread_mutex_init(&d->stats_lock, NULL);
	ret = dns_alloc(d, err, errlen);
	if (!ret)
		ret = make_sockets(d, err, errlen);
	if (ret)
		goto out_destroy;
	ret = net_endpoints__add(&d->eps, &d->ep_udp, EP_UDP, d->udp_fd, NULL,
				 EPOLLIN);
	if (!ret)
		ret = net_endpoints__add(&d->eps, &d->ep_lsn, EP_LISTEN,
					 d->lsn_fd, NULL, EPOLLIN);
	/* Its fd is its own epoll set's: the same for the hook's life. */
	if (!ret)
		ret = net_endpoints__add(&d->eps, &d->ep_hook, EP_HOOK,
					 hook__fd(d->hook), NULL, EPOLLIN);
	if (ret) {
		errf(err, errlen, ret, "%s: epoll: %s", DNS_NAME,
		     strerror(-ret));
		goto out_destroy;
	}
	*out = d;
	return 0;

out_destroy:
	dns__destroy(d);
	return ret;
}

int dns__start(struct dns *d, const struct sock_fprog *filter)
{
	int ret;

	pthread_mutex_lock(&d->stats_lock);
	d->stats.running = true;
	pthread_mutex_unlock(&d->stats_lock);
	ret = net_endpoints__start(&d->eps, filter, dns_thread, d);
	if (ret) {
		pthread_mutex_lock(&d->stats_lock);
		d->stats.running = false;
		pthread_mutex_unlock(&d->stats_lock);
	}
	return ret;
}

void dns__destroy(struct dns *d)
{
	if (!d)
		return;
	net_endpoints__exit(&d->eps);
	close_all(d);
	/* ep_hook's fd is the hook's, closed with it. */
	hook__destroy(d->hook);
	dns_hook_cache__destroy(d->cache);
	free(d->queries);
	free(d->buf);
	free(d->rrs);
	pthread_mutex_destroy(&d->stats_lock);
	free(d);
}

void dns__set_resolvers(struct dns *d, const struct net_policy *policy)
{
	pthread_mutex_lock(&d->stats_lock);
	policy_copy(policy, d->next_resolvers, &d->nr_next_resolvers,
		    d->next_hook_socket, &d->next_hook_timeout_ms);
	d->resolvers_changed = true;
	pthread_mutex_unlock(&d->stats_lock);
}

void dns__stats(struct dns *d, struct dns_stats *s)
{
	pthread_mutex_lock(&d->stats_lock);
	*s = d->stats;
	pthread_mutex_unlock(&d->stats_lock);
}

void dns__report(struct dns *d)
{
	struct dns_stats s;

	dns__stats(d, &s);
	pr_info("%s: %s; %u resolvers; queries %llu refused %llu forwarded "
		"%llu answered %llu servfail %llu dropped %llu malformed %llu "
		"bad answers %llu bindings %llu errors %llu; hook asked %llu "
		"granted %llu cached %llu refused %llu failed %llu",
		DNS_NAME, s.running ? "running" : "stopped", d->nr_resolvers,
		(unsigned long long)s.queries, (unsigned long long)s.refused,
		(unsigned long long)s.forwarded, (unsigned long long)s.answered,
		(unsigned long long)s.servfail, (unsigned long long)s.dropped,
		(unsigned long long)s.malformed,
		(unsigned long long)s.bad_answers,
		(unsigned long long)s.bindings, (unsigned long long)s.errors,
		(unsigned long long)s.hook_asked,
		(unsigned long long)s.hook_granted,
		(unsigned long long)s.hook_cached,
		(unsigned long long)s.hook_refused,
		(unsigned long long)s.hook_failed);
}
