// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's DNS resolver, forwarding (dns-resolver-internal.h): each try
 * of a query upstream on a fresh socket connected to one resolver from
 * the host netns, the retry, and the answer relayed to the guest and its
 * A records bound. What is asked, and whether, is dns.c's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/log.h"
#include "net/dns-resolver-internal.h"
#include "net/policy.h"

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
void dns_up__close(struct dns *d, struct query *q)
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

/* The A records for the question's name, bound; how many. */
static unsigned int bind_answer(struct dns *d, const struct query *q,
				const uint8_t *m, size_t len)
{
	struct dns_a_record a[DNS_MAX_BINDINGS];
	uint32_t addrs[DNS_MAX_BINDINGS];
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
		dns_count(d, &d->stats.bad_answers, 1);
		return 0;
	}
	pthread_mutex_lock(d->p.bindings_lock);
	for (int i = 0; i < n; i++)
		if (!net_bindings__insert(d->p.bindings, host, a[i].addr,
					  a[i].ttl_s))
			addrs[bound++] = a[i].addr;
	pthread_mutex_unlock(d->p.bindings_lock);
	if (bound && d->p.bound)
		d->p.bound(d->p.bound_opaque, host, addrs, bound);
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
		ret = dns_conn__send(c, m, len, now);
	} else if (full_len > q->udp_max) {
		/* More than the guest takes: TC, and it asks over TCP. */
		dns_reply__own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest,
			       &q->local, NULL, DNS_FLAG_TC | DNS_FLAG_RA,
			       DNS_RCODE_NOERROR, true);
	} else {
		ret = dns_udp__send(d, m, len, &q->guest, &q->local);
	}
	if (ret)
		dns_count(d, &d->stats.errors, 1);
	dns_query__release(d, q);
	if (c)
		dns_conn__after(d, c, now);
}

/* Every try has failed or timed out: SERVFAIL. */
static void query_servfail(struct dns *d, struct query *q, uint64_t now)
{
	struct tcp_conn *c = q->conn;

	dns_count(d, &d->stats.servfail, 1);
	dns_reply__own(d, q->wire + DNS_TCP_LEN, &q->qi, &q->guest, &q->local,
		       c, DNS_FLAG_RA, DNS_RCODE_SERVFAIL, true);
	dns_query__release(d, q);
	if (c)
		dns_conn__after(d, c, now);
}

/*
 * The latest try's time is up (its socket stays open: a late answer to
 * it still counts): the next resolver after this batch, or SERVFAIL.
 */
void dns_up__timed_out(struct dns *d, struct query *q, uint64_t now)
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
	for (unsigned int i = 0; i < d->fresh_queries; i++)
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
void dns_up__start(struct dns *d, struct query *q, uint64_t now)
{
	struct up_try *t;
	int ret;

	while (q->used && q->due && q->tries < DNS_MAX_TRIES) {
		q->due = false;
		q->deadline_ms = now + d->p.timeout_ms;
		dns_count(d, &d->stats.forwarded, 1);
		t = &q->up[q->tries++];
		ret = try_open(d, q, t, &q->res[q->resolver]);
		q->resolver = (q->resolver + 1) % q->nr_res;
		if (ret) {
			pr_debug("%s: upstream: %s", DNS_NAME, strerror(-ret));
			dns_count(d, &d->stats.errors, 1);
			try_failed(d, q, t, now);
		}
	}
}

/* Datagrams from the resolver: the first that answers the query counts. */
void dns_up__udp_event(struct dns *d, struct up_try *t, uint64_t now)
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
			dns_count(d, &d->stats.errors, 1);
			try_failed(d, q, t, now);
			return;
		}
		if (!dns_msg__answers(d->buf,
				      (size_t)n < DNS_EDNS_MAX ? (size_t)n :
								 DNS_EDNS_MAX,
				      q->up_id, &q->qi.q)) {
			dns_count(d, &d->stats.bad_answers, 1);
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

void dns_up__tcp_event(struct dns *d, struct up_try *t, uint64_t now)
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
		dns_count(d, &d->stats.bad_answers, 1);
		ret = -EBADMSG; /* a stream that answers wrong is done */
	}
	if (!ret)
		ret = net_endpoints__set(
			&d->eps, &t->ep,
			t->sent < DNS_TCP_LEN + q->len ? EPOLLOUT : EPOLLIN);
	if (ret) {
		pr_debug("%s: tcp upstream: %s", DNS_NAME, strerror(-ret));
		dns_count(d, &d->stats.errors, 1);
		try_failed(d, q, t, now);
	}
}
