// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's DNS resolver (dns.h, Documentation/network.md "DNS"): the
 * guest's side, each question checked and decided, the thread; the
 * tries upstream and the answers are dns-up.c's.
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
#include "lib/resident.h"
#include "lib/siphash.h"
#include "lib/worker.h"
#include "net/dns-resolver-internal.h"
#include "net/nsthread.h"

/* ---- guest TCP connections ----------------------------------------------- */

static void conn_close(struct dns *d, struct tcp_conn *c)
{
	if (c->q)
		dns_query__release(d, c->q);
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
int dns_conn__send(struct tcp_conn *c, const uint8_t *msg, size_t len,
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
int dns_udp__send(struct dns *d, const void *m, size_t len,
		  const struct sockaddr_in *to, const struct sockaddr_in *from)
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
void dns_reply__own(struct dns *d, const uint8_t *qm,
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
		ret = dns_conn__send(c, out, n, dns_now_ms());
	else
		ret = dns_udp__send(d, out, n, guest, local);
	if (ret)
		dns_count(d, &d->stats.errors, 1);
}

/* ---- queries ------------------------------------------------------------- */

/* An empty query slot: no tries, every socket closed. */
static void query_clear(struct query *q)
{
	*q = (struct query){ .used = false };
	for (unsigned int i = 0; i < DNS_MAX_TRIES; i++)
		q->up[i] = (struct up_try){ .q = q, .ep.fd = -1 };
}

void dns_query__release(struct dns *d, struct query *q)
{
	if (q->asking)
		hook__cancel(d->hook, q->hook_id);
	dns_up__close(d, q);
	if (q->conn)
		q->conn->q = NULL;
	free(q->wire);
	query_clear(q);
}

/*
 * A free slot (one used before first, else the next never used), or the
 * oldest query's, dropped (its guest gets nothing).
 */
static struct query *query_slot(struct dns *d)
{
	struct query *oldest = NULL;

	for (unsigned int i = 0; i < d->fresh_queries; i++) {
		struct query *q = &d->queries[i];

		if (!q->used)
			return q;
		if (!oldest || q->seq < oldest->seq)
			oldest = q;
	}
	if (d->fresh_queries < d->p.max_pending) {
		struct query *q = &d->queries[d->fresh_queries++];

		query_clear(q);
		pthread_mutex_lock(&d->stats_lock);
		d->stats.query_slots = d->fresh_queries;
		pthread_mutex_unlock(&d->stats_lock);
		return q;
	}
	dns_count(d, &d->stats.dropped, 1);
	/* A TCP guest waits on its connection: closing it says so. */
	if (oldest->conn)
		conn_close(d, oldest->conn);
	else
		dns_query__release(d, oldest);
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
		dns_count(d, &d->stats.errors, 1);
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

	dns_count(d,
		  rcode == DNS_RCODE_REFUSED ? &d->stats.hook_refused :
					       &d->stats.hook_failed,
		  1);
	query_ends(q, &src, &dst);
	dns_hook__log(&d->log, dns_now_ms(), &q->qi.q, q->tcp, &src, &dst,
		      rcode == DNS_RCODE_REFUSED, reason, detail);
	dns_reply__own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest, &q->local,
		       c, DNS_FLAG_RA, rcode, true);
	dns_query__release(d, q);
	if (c)
		dns_conn__after(d, c, dns_now_ms());
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
		dns_count(d, &d->stats.hook_granted, 1);
		memcpy(q->res, a.resolvers, a.nr_resolvers * sizeof(*q->res));
		q->nr_res = a.nr_resolvers;
		q->granted = true;
		q->due = true;
		/* Kept meanwhile: a retry before the answer is not asked. */
		dns_hook_cache__insert(d->cache, &q->qi.q, q->res, q->nr_res,
				       DNS_HOOK_MIN_TTL_S, dns_now_ms());
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
	struct hook_line_question lq = { .socket = d->rules.hook_socket,
					 .timeout_ms = d->rules.hook_timeout_ms,
					 .build = dns_hook__question,
					 .arg = &hq };
	uint64_t now = dns_now_ms();
	unsigned int nr;
	struct query *q;
	int ret;

	nr = dns_hook_cache__lookup(d->cache, &qi->q, now, res);
	if (nr) {
		/* Its answer does not renew the grant: the hook is asked. */
		dns_count(d, &d->stats.hook_cached, 1);
		query_new(d, m, qi, g, res, nr);
		return;
	}
	q = query_new(d, m, qi, g, NULL, 0);
	if (!q)
		return;
	query_ends(q, &hq.src, &hq.dst);
	dns_count(d, &d->stats.hook_asked, 1);
	ret = hook__ask_line(d->hook, &lq, q, now, &q->hook_id);
	q->asking = !ret;
	if (ret)
		hook_refuse(d, q, DNS_RCODE_SERVFAIL, hook__failure(ret), "");
}

/*
 * Why the rules refuse question q (Documentation/network.md, "Which
 * names"), RULES_PASS when they let it through: a type other than A, AAAA and
 * CNAME or a class other than IN, or a name that is neither in
 * "dns.names" nor one a grant names.
 */
enum rules_verdict { RULES_PASS, RULES_TYPE, RULES_NAME };

static const char *const rules_why[] = {
	[RULES_TYPE] = "type not allowed",
	[RULES_NAME] = "name not granted",
};

static enum rules_verdict rules_refuse(const struct dns_rules *r,
				       const struct dns_question *q)
{
	char name[NET_HOSTNAME_MAX + 1];

	if (q->qclass != DNS_CLASS_IN ||
	    (q->type != DNS_TYPE_A && q->type != DNS_TYPE_AAAA &&
	     q->type != DNS_TYPE_CNAME))
		return RULES_TYPE;
	if (dns_msg__name_text(q->name, q->name_len, name, sizeof(name)) ||
	    !net_dns_names__allows(r->names, name))
		return RULES_NAME;
	return RULES_PASS;
}

/*
 * A question the rules refuse (why): REFUSED, counted by why, logged
 * (rate-limited); nothing leaves.
 */
static void rules_refused(struct dns *d, const uint8_t *m,
			  const struct dns_query_info *qi,
			  const struct sockaddr_in *guest,
			  const struct sockaddr_in *local, struct tcp_conn *c,
			  enum rules_verdict why)
{
	const struct sockaddr_in *src = c ? &c->peer : guest;
	const struct sockaddr_in *dst = c ? &c->local : local;

	dns_count(d,
		  why == RULES_TYPE ? &d->stats.refused_type :
				      &d->stats.refused_name,
		  1);
	dns_hook__log(&d->log, dns_now_ms(), &qi->q, c != NULL, src, dst, true,
		      rules_why[why], "");
	dns_reply__own(d, m, qi, guest, local, c, 0, DNS_RCODE_REFUSED, true);
}

/* One guest message, from UDP (g->guest) or a TCP connection (g->c). */
static void guest_message(struct dns *d, const uint8_t *m, size_t len,
			  const struct guest_addr *g)
{
	struct dns_query_info qi;
	enum rules_verdict why;

	switch (dns_msg__parse_query(m, len, &qi)) {
	case DNS_QUERY_DROP:
		dns_count(d, &d->stats.malformed, 1);
		return;
	case DNS_QUERY_FORMERR:
		dns_count(d, &d->stats.malformed, 1);
		dns_reply__own(d, m, &qi, g->guest, g->local, g->c, 0,
			       DNS_RCODE_FORMERR, false);
		return;
	case DNS_QUERY_NOTIMP:
		dns_count(d, &d->stats.malformed, 1);
		dns_reply__own(d, m, &qi, g->guest, g->local, g->c, 0,
			       DNS_RCODE_NOTIMP, false);
		return;
	case DNS_QUERY_OK:
		break;
	}
	dns_count(d, &d->stats.queries, 1);
	if (d->rules.hook_all) {
		hook_query(d, m, &qi, g);
		return;
	}
	if (!d->rules.nr_resolvers && !d->rules.hook_socket[0]) {
		/* Denied DNS: REFUSED, and nothing leaves. */
		dns_count(d, &d->stats.refused, 1);
		dns_reply__own(d, m, &qi, g->guest, g->local, g->c, 0,
			       DNS_RCODE_REFUSED, true);
		return;
	}
	why = rules_refuse(&d->rules, &qi.q);
	if (why == RULES_NAME && d->rules.hook_socket[0]) {
		/* A name no rule lets through: the hook decides it. */
		hook_query(d, m, &qi, g);
		return;
	}
	if (why) {
		rules_refused(d, m, &qi, g->guest, g->local, g->c, why);
		return;
	}
	if (!d->rules.nr_resolvers) {
		dns_count(d, &d->stats.refused, 1);
		dns_reply__own(d, m, &qi, g->guest, g->local, g->c, 0,
			       DNS_RCODE_REFUSED, true);
		return;
	}
	query_new(d, m, &qi, g, d->rules.resolvers, d->rules.nr_resolvers);
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
			dns_count(d, &d->stats.malformed, 1);
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
void dns_conn__after(struct dns *d, struct tcp_conn *c, uint64_t now)
{
	size_t len;
	int ret = 0;

	while (!c->q && !c->out && c->in_len >= DNS_TCP_LEN) {
		len = dns_get16(c->in);
		if (c->in_len < DNS_TCP_LEN + len)
			break;
		if (len < DNS_HDR_LEN) {
			/* Not even a header: no ID to answer to. */
			dns_count(d, &d->stats.malformed, 1);
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
		dns_count(d, &d->stats.errors, 1);
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
	dns_conn__after(d, c, now);
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
			dns_count(d, &d->stats.dropped, 1);
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
			dns_count(d, &d->stats.errors, 1);
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

	for (unsigned int i = 0; i < d->fresh_queries; i++) {
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
			dns_up__tcp_event(d, t, now);
		else
			dns_up__udp_event(d, t, now);
		break;
	}
}

/*
 * A replaced policy's rules: queries in flight start over on the new
 * list's first resolver (an answer from one the new policy dropped is
 * never relayed), or get REFUSED when the new list is empty or the new
 * rules refuse them; SERVFAIL when the new policy's hook is to decide
 * them (the guest asks again, and the hook is asked).
 */
static void resolvers_take(struct dns *d, uint64_t now)
{
	struct net_dns_names *old = NULL;
	enum rules_verdict why;
	bool changed;

	pthread_mutex_lock(&d->stats_lock);
	changed = d->resolvers_changed;
	if (changed) {
		old = d->rules.names;
		d->rules = d->next;
		d->next.names = NULL; /* the thread's now */
		d->resolvers_changed = false;
	}
	pthread_mutex_unlock(&d->stats_lock);
	net_dns_names__free(old);
	if (!changed)
		return;
	/* The old policy's hook granted them: the new one decides anew. */
	dns_hook_cache__flush(d->cache);
	for (unsigned int i = 0; i < d->fresh_queries; i++) {
		struct query *q = &d->queries[i];
		struct tcp_conn *c = q->conn;

		if (!q->used)
			continue;
		dns_up__close(d, q);
		why = rules_refuse(&d->rules, &q->qi.q);
		if (d->rules.hook_all ||
		    (why == RULES_NAME && d->rules.hook_socket[0])) {
			/* The guest asks again, and the hook is asked. */
			hook_refuse(d, q, DNS_RCODE_SERVFAIL, HOOK_CHANGED, "");
			continue;
		}
		if (q->asking)
			hook__cancel(d->hook, q->hook_id);
		q->asking = q->granted = false;
		if (why && d->rules.nr_resolvers) {
			rules_refused(d, q->wire + DNS_TCP_LEN, &q->qi,
				      &q->guest, &q->local, c, why);
			dns_query__release(d, q);
			if (c)
				dns_conn__after(d, c, now);
			continue;
		}
		if (d->rules.nr_resolvers) {
			memcpy(q->res, d->rules.resolvers, sizeof(q->res));
			q->nr_res = d->rules.nr_resolvers;
			q->resolver = q->tries = 0;
			q->due = true;
			continue;
		}
		dns_count(d, &d->stats.refused, 1);
		dns_reply__own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest,
			       &q->local, c, 0, DNS_RCODE_REFUSED, true);
		dns_query__release(d, q);
		if (c)
			dns_conn__after(d, c, now);
	}
}

static int dns_loop(struct dns *d)
{
	struct epoll_event evs[DNS_EPOLL_EVENTS];
	uint64_t now = dns_now_ms(), last_sweep = now;
	bool udp_ready, accept_ready;
	int n;

	for (;;) {
		n = net_endpoints__wait(&d->eps, evs, DNS_EPOLL_EVENTS,
					loop_timeout(d, now));
		if (n < 0)
			return n;
		now = dns_now_ms();
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
		for (unsigned int i = 0; i < d->fresh_queries; i++) {
			struct query *q = &d->queries[i];

			if (q->used && !q->due && q->deadline_ms <= now)
				dns_up__timed_out(d, q, now);
			dns_up__start(d, q, now);
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
	for (unsigned int i = 0; i < d->fresh_queries; i++)
		if (d->queries[i].used)
			dns_query__release(d, &d->queries[i]);
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

	/*
	 * Untouched until questions use them (query_slot) and answers are
	 * parsed (rrs).
	 */
	d->queries = resident__table(d->p.max_pending, sizeof(*d->queries));
	d->buf = malloc(DNS_EDNS_MAX);
	d->rrs = resident__table(DNS_MAX_ANSWER_RRS, sizeof(*d->rrs));
	d->cache = dns_hook_cache__create(0);
	if (!d->queries || !d->buf || !d->rrs || !d->cache)
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    DNS_NAME);
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

/*
 * The policy's resolvers, its hook, and the names its rules let through,
 * into r (whose names it replaces).
 */
static void policy_copy(const struct net_policy *policy, struct dns_rules *r)
{
	unsigned int timeout = 0;
	const char *sock = net_policy__hook(policy, &timeout);

	r->nr_resolvers = net_policy__nr_resolvers(policy);
	for (unsigned int i = 0; i < r->nr_resolvers; i++)
		net_policy__resolver(policy, i, &r->resolvers[i]);
	snprintf(r->hook_socket, sizeof(r->hook_socket), "%s",
		 sock ? sock : "");
	r->hook_timeout_ms = timeout;
	r->hook_all = net_policy__dns_hook(policy, &timeout) != NULL;
	net_dns_names__free(r->names);
	/* NULL (out of memory): no name is let through, fail closed. */
	r->names = net_policy__dns_names(policy);
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
	policy_copy(params->policy, &d->rules);
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
	resident__free_table(d->queries, d->p.max_pending, sizeof(*d->queries));
	free(d->buf);
	resident__free_table(d->rrs, DNS_MAX_ANSWER_RRS, sizeof(*d->rrs));
	net_dns_names__free(d->rules.names);
	net_dns_names__free(d->next.names);
	pthread_mutex_destroy(&d->stats_lock);
	free(d);
}

void dns__set_resolvers(struct dns *d, const struct net_policy *policy)
{
	pthread_mutex_lock(&d->stats_lock);
	policy_copy(policy, &d->next);
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
	pr_info("%s: %s; %u resolvers; queries %llu refused %llu (type %llu "
		"name %llu) forwarded "
		"%llu answered %llu servfail %llu dropped %llu malformed %llu "
		"bad answers %llu bindings %llu errors %llu; hook asked %llu "
		"granted %llu cached %llu refused %llu failed %llu",
		DNS_NAME, s.running ? "running" : "stopped",
		d->rules.nr_resolvers, (unsigned long long)s.queries,
		(unsigned long long)s.refused,
		(unsigned long long)s.refused_type,
		(unsigned long long)s.refused_name,
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
