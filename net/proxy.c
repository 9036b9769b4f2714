// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's egress proxy (proxy.h, Documentation/network.md "The proxy").
 *
 * The netns thread lives in the VM netns from create to destroy: every
 * socket that must be there (the listener, the UDP socket, each UDP
 * flow's reply socket) is made by it, and it loads, attaches and detaches
 * the egress program (the loader's netlink and netns checks are the
 * calling thread's). The proxy thread never leaves the caller's netns:
 * its upstream sockets are the host's. It is an epoll loop: a relay of
 * nonblocking sockets wants readiness, a bounded buffer per direction and
 * calls io_uring has no opcode for on Linux 6.1 (setsockopt, getsockname).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/errf.h"
#include "lib/log.h"
#include "lib/worker.h"
#include "net/hook.h"
#include "net/intercept.h"
#include "net/proxy.h"

#define PROXY_BACKLOG	     4096	  /* SYN cookies drop: keep them rare */
#define PROXY_RELAY_BUF	     (64U * 1024) /* bytes, per direction of a flow */
#define PROXY_DGRAM_MAX	     65535U	  /* one UDP datagram */
#define PROXY_UDP_IDLE_MS    60000U
#define PROXY_TLS_SETUP_MS   10000U /* an intercepted TLS flow's setup */
#define PROXY_EPOLL_EVENTS   64
#define PROXY_ACCEPT_BUDGET  32	  /* connections accepted per round */
#define PROXY_DGRAM_BUDGET   32	  /* datagrams per socket per round */
#define PROXY_SWEEP_MS	     1000 /* idle UDP flows looked for */
#define PROXY_LOG_BURST	     10	  /* denied-flow lines per window */
#define PROXY_LOG_WINDOW_MS  1000
#define PROXY_UDP_HELD	     4		  /* datagrams a held UDP flow keeps */
#define PROXY_UDP_HELD_BYTES (16U * 1024) /* and their bytes at most */
#define PROXY_NAME	     "egress proxy"

enum ep_kind {
	EP_STOP,
	EP_RECHECK,
	EP_LISTEN,
	EP_UDP,
	EP_TCP_GUEST,
	EP_TCP_UP,
	EP_UDP_UP,
	EP_HOOK,
};
enum { SIDE_GUEST, SIDE_UP, NR_SIDES };
_Static_assert(SIDE_GUEST == (int)INTERCEPT_GUEST &&
		       SIDE_UP == (int)INTERCEPT_UP,
	       "an intercepted flow's sides are the proxy's");

/* What epoll_event.data points at. */
struct endpoint {
	enum ep_kind kind;
	int fd;		 /* -1: closed */
	uint32_t events; /* registered with epoll */
	void *owner;	 /* the flow */
};

/* Bytes read from one side, not yet written to the other. */
/*
 * One direction of a relayed flow: what was read from one side and not
 * yet written to the other. Through a pipe when one could be had
 * (splice(): the bytes stay in the kernel, no copy through user space),
 * else through buf.
 */
struct relay_dir {
	bool piped;   /* pipe[] holds len bytes (off unused), else buf */
	int pipe[2];  /* piped: read end, write end */
	bool full;    /* piped: the last splice in found no room */
	uint8_t *buf; /* PROXY_RELAY_BUF */
	size_t off, len;
	bool eof;  /* the reading side said FIN */
	bool shut; /* and the other side was told (SHUT_WR) */
};

/*
 * A flow the hook is asked about is "held": its question out (hook_id),
 * nothing upstream yet. One it granted keeps the hook's generation
 * (hook_gen, 0: not the hook's grant), for a recheck.
 */
struct tcp_flow {
	bool used;
	bool asking;	      /* held: the guest's socket only, not in epoll */
	bool connecting;      /* upstream */
	struct net_flow flow; /* as decided, for a recheck */
	uint64_t hook_id, hook_gen;
	struct endpoint ep[NR_SIDES];
	struct relay_dir dir[NR_SIDES]; /* dir[s]: read from side s */
	/* An http grant's flow: intercepted, not relayed (no dir[] then). */
	struct intercept *ic;
	bool tls;
	uint64_t setup_deadline_ms; /* TLS: its setup is cut after it */
};

struct udp_flow {
	bool used;
	bool allowed;
	bool asking; /* held: its datagrams wait in held[] */
	struct sockaddr_in src, dst;
	uint64_t hook_id, hook_gen;
	struct endpoint up; /* host netns, connected to dst */
	int reply_fd;	    /* VM netns, bound to dst, connected to src */
	uint64_t last_ms;
	unsigned int nr_held;
	size_t held_bytes;
	uint8_t *held[PROXY_UDP_HELD];
	size_t held_len[PROXY_UDP_HELD];
};

enum ns_request { NS_NONE, NS_REPLY_SOCKET, NS_COUNTERS, NS_CALL, NS_EXIT };

struct proxy {
	struct proxy_params p;
	char ifname[IFNAMSIZ];
	int lsn_fd, udp_fd, epoll_fd;
	int recheck_fd; /* eventfd: proxy__recheck wakes the proxy thread */
	struct endpoint ep_stop, ep_recheck, ep_lsn, ep_udp, ep_hook;
	struct hook *hook; /* the proxy thread's, in its epoll set */
	struct intercept_ops icpt_ops; /* every intercepted flow's */
	bool icpt_answers; /* the hook answered an intercepted flow's request */
	struct worker worker;

	/*
	 * The netns thread and its one request at a time, under ns_lock;
	 * ns_ask_lock is held by the asker (the proxy thread, or whoever
	 * reads the counters) from setting the request up to taking its
	 * answer.
	 */
	pthread_t ns_thread;
	bool ns_started;
	pthread_mutex_t ns_ask_lock;
	pthread_mutex_t ns_lock;
	pthread_cond_t ns_cv;
	enum ns_request ns_req;
	bool ns_done;
	int ns_ret, ns_fd;
	struct sockaddr_in ns_bind, ns_peer;
	uint64_t *ns_counts; /* NS_COUNTERS: EGRESS_NR_REASONS of them */
	int ns_counts_ret;
	int (*ns_fn)(void *arg); /* NS_CALL: ns_fn(ns_arg), unfiltered */
	void *ns_arg;
	int ns_call_ret;
	char *ns_err;
	size_t ns_errlen;
	struct egress *egress; /* the netns thread's */

	struct tcp_flow *tcp; /* max_tcp_flows */
	struct udp_flow *udp; /* max_udp_flows */
	uint8_t *dgram;	      /* PROXY_DGRAM_MAX */

	uint64_t log_window_ms;
	unsigned int log_lines;
	uint64_t log_suppressed;

	pthread_mutex_t stats_lock;
	struct proxy_stats stats;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *proto_name(uint8_t proto)
{
	return proto == IPPROTO_TCP ? "tcp" : "udp";
}

/* ---- counters and the log ------------------------------------------------ */

/* One more under (proto, verdict, reason) in a table; stats_lock held. */
static void count_reason(struct proxy_reason_count *tbl, unsigned int *nr,
			 uint8_t proto, enum net_verdict verdict,
			 const char *reason)
{
	struct proxy_reason_count *r = NULL;
	unsigned int i;

	for (i = 0; i < *nr; i++) {
		r = &tbl[i];
		if (r->proto == proto && r->verdict == verdict &&
		    !strncmp(r->reason, reason, sizeof(r->reason)))
			break;
	}
	if (i == *nr) {
		/* The last slot takes every reason there is no room for. */
		r = &tbl[i < PROXY_REASONS_MAX ? i : i - 1];
		if (i < PROXY_REASONS_MAX) {
			(*nr)++;
			snprintf(r->reason, sizeof(r->reason), "%s",
				 i + 1 < PROXY_REASONS_MAX ? reason : "other");
			r->proto = proto;
			r->verdict = verdict;
		}
	}
	r->flows++;
}

static void count_flow(struct proxy *p, const struct net_flow *f,
		       const struct net_decision *d)
{
	struct proxy_stats *s = &p->stats;
	bool allow = d->verdict == NET_VERDICT_ALLOW ||
		     d->verdict == NET_VERDICT_HTTP;

	pthread_mutex_lock(&p->stats_lock);
	if (f->proto == IPPROTO_TCP)
		allow ? s->tcp_allowed++ : s->tcp_denied++;
	else
		allow ? s->udp_allowed++ : s->udp_denied++;
	if (d->verdict == NET_VERDICT_HTTP)
		s->tcp_intercepted++;
	count_reason(s->reasons, &s->nr_reasons, f->proto, d->verdict,
		     d->reason);
	pthread_mutex_unlock(&p->stats_lock);
}

static void count_add(struct proxy *p, uint64_t *what, uint64_t n)
{
	pthread_mutex_lock(&p->stats_lock);
	*what += n;
	pthread_mutex_unlock(&p->stats_lock);
}

static void count_sub(struct proxy *p, uint64_t *what)
{
	pthread_mutex_lock(&p->stats_lock);
	*what -= 1;
	pthread_mutex_unlock(&p->stats_lock);
}

/*
 * The hook's counters, copied before the flow they concern is counted:
 * whoever sees the flow settled sees its question's outcome too.
 */
static void hook_copy_stats(struct proxy *p)
{
	struct hook_stats hs;

	hook__stats(p->hook, &hs);
	pthread_mutex_lock(&p->stats_lock);
	p->stats.hook = hs;
	pthread_mutex_unlock(&p->stats_lock);
}

/*
 * One line per denied (or, after a recheck, cut) flow, at most
 * PROXY_LOG_BURST a window.
 */
static void log_flow(struct proxy *p, const char *what,
		     const struct net_flow *f, const char *reason,
		     const char *detail)
{
	char src[INET_ADDRSTRLEN], dst[INET_ADDRSTRLEN];
	uint64_t now = now_ms();

	if (now - p->log_window_ms >= PROXY_LOG_WINDOW_MS) {
		if (p->log_suppressed)
			pr_warn("%s: %llu more denied flows not logged",
				PROXY_NAME,
				(unsigned long long)p->log_suppressed);
		p->log_window_ms = now;
		p->log_lines = 0;
		p->log_suppressed = 0;
	}
	if (p->log_lines >= PROXY_LOG_BURST) {
		p->log_suppressed++;
		return;
	}
	p->log_lines++;
	inet_ntop(AF_INET, &f->src.sin_addr, src, sizeof(src));
	inet_ntop(AF_INET, &f->dst.sin_addr, dst, sizeof(dst));
	pr_warn("%s: %s %s %s:%u -> %s:%u: %s%s%s%s", PROXY_NAME, what,
		proto_name(f->proto), src, ntohs(f->src.sin_port), dst,
		ntohs(f->dst.sin_port), reason, detail[0] ? " (" : "", detail,
		detail[0] ? ")" : "");
}

static bool allowed(const struct net_decision *d)
{
	return d->verdict == NET_VERDICT_ALLOW ||
	       d->verdict == NET_VERDICT_HTTP;
}

static void deny(struct net_decision *d, const char *reason)
{
	d->verdict = NET_VERDICT_DENY;
	snprintf(d->reason, sizeof(d->reason), "%s", reason);
}

/*
 * Asks the policy; a decision without a reason gets one. An http grant's
 * flow the proxy cannot intercept is denied: never relayed as it is.
 */
static void ask_policy(struct proxy *p, const struct net_flow *f,
		       struct net_decision *d)
{
	*d = (struct net_decision){ .verdict = NET_VERDICT_DENY };
	p->p.decide(p->p.decide_opaque, f, d);
	d->reason[sizeof(d->reason) - 1] = '\0';
	d->ask.socket[sizeof(d->ask.socket) - 1] = '\0';
	if (d->verdict == NET_VERDICT_HTTP &&
	    (f->proto != IPPROTO_TCP || !p->p.decide_http))
		deny(d, "http interception unavailable");
	else if (d->verdict == NET_VERDICT_HTTP && d->http_tls &&
		 (!p->p.tls.ca || !p->p.tls.server || !p->p.tls.client))
		deny(d, "http tls unavailable");
	if (!d->reason[0])
		snprintf(d->reason, sizeof(d->reason), "%s",
			 allowed(d) ? "allowed" : "denied");
}

/* A new flow's final decision: counted, and logged when denied. */
static void settle(struct proxy *p, const struct net_flow *f,
		   const struct net_decision *d, const char *detail)
{
	count_flow(p, f, d);
	if (!allowed(d))
		log_flow(p, "denied", f, d->reason, detail);
}

/* A new flow: asked, and settled unless the hook is to be asked. */
static void decide(struct proxy *p, const struct net_flow *f,
		   struct net_decision *d)
{
	ask_policy(p, f, d);
	if (d->verdict != NET_VERDICT_ASK)
		settle(p, f, d, "");
}

/*
 * Puts a new flow to the policy's hook (d: NET_VERDICT_ASK), its answer
 * to come through hook_answered() with cookie, the flow. False when it
 * could not be asked: d is then denied, saying why, and settled.
 */
static bool hook_ask(struct proxy *p, const struct net_flow *f,
		     struct net_decision *d, void *cookie, uint64_t *id)
{
	int ret;

	ret = hook__ask(p->hook, f, &d->ask, cookie, now_ms(), id);
	hook_copy_stats(p);
	if (!ret)
		return true;
	deny(d, hook__failure(ret));
	settle(p, f, d, ret == -EBUSY ? "" : strerror(-ret));
	return false;
}

/*
 * A recheck of a flow the hook granted under generation gen (0: it was
 * a rule's grant): it is kept while the policy would still put it to
 * the same hook socket. *why: the cut's reason otherwise.
 */
static bool hook_still_grants(struct proxy *p, uint64_t gen,
			      const struct net_decision *d, const char **why)
{
	*why = d->reason;
	if (d->verdict != NET_VERDICT_ASK)
		return false;
	if (gen && gen == hook__generation(p->hook) &&
	    hook__is_target(p->hook, d->ask.socket))
		return true;
	if (gen)
		*why = HOOK_CHANGED;
	return false;
}

/* ---- the netns thread ---------------------------------------------------- */

static int sockopt_on(int fd, int level, int name)
{
	int one = 1;

	return setsockopt(fd, level, name, &one, sizeof(one)) ? -errno : 0;
}

static struct sockaddr_in any_port(uint16_t port)
{
	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_port = htons(port),
				     .sin_addr.s_addr = htonl(INADDR_ANY) };
}

/* A transparent socket on 0.0.0.0:port of the VM netns. */
static int proxy_socket(struct proxy *p, int type, uint16_t port,
			const char *what)
{
	struct sockaddr_in a = any_port(port);
	int fd, ret;

	fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errf(p->ns_err, p->ns_errlen, -errno, "%s: %s: %s",
			    PROXY_NAME, what, strerror(errno));
	ret = sockopt_on(fd, SOL_IP, IP_TRANSPARENT);
	if (!ret && type == SOCK_DGRAM)
		ret = sockopt_on(fd, SOL_IP, IP_RECVORIGDSTADDR);
	if (!ret && bind(fd, (struct sockaddr *)&a, sizeof(a)))
		ret = -errno;
	if (!ret && type == SOCK_STREAM && listen(fd, PROXY_BACKLOG))
		ret = -errno;
	if (ret) {
		close(fd);
		return errf(p->ns_err, p->ns_errlen, ret,
			    "%s: %s on port %u: %s", PROXY_NAME, what, port,
			    strerror(-ret));
	}
	return fd;
}

/* In the VM netns: the sockets, the program, its slots, attached. */
static int ns_setup(struct proxy *p)
{
	char *err = p->ns_err;
	size_t len = p->ns_errlen;
	unsigned int ifindex;
	int ret;

	if (setns(p->p.netns_fd, CLONE_NEWNET))
		return errf(err, len, -errno, "%s: setns: %s", PROXY_NAME,
			    strerror(errno));
	p->lsn_fd = proxy_socket(p, SOCK_STREAM, p->p.tcp_port, "TCP listener");
	if (p->lsn_fd < 0)
		return p->lsn_fd;
	p->udp_fd = proxy_socket(p, SOCK_DGRAM, p->p.udp_port, "UDP socket");
	if (p->udp_fd < 0)
		return p->udp_fd;
	ifindex = if_nametoindex(p->ifname);
	if (!ifindex)
		return errf(err, len, -errno, "%s: %s: %s", PROXY_NAME,
			    p->ifname, strerror(errno));
	ret = egress__create(&p->egress, &p->p.egress, err, len);
	if (!ret)
		ret = egress__set_proxy(p->egress, EGRESS_SLOT_TCP, p->lsn_fd,
					err, len);
	if (!ret)
		ret = egress__set_proxy(p->egress, EGRESS_SLOT_UDP, p->udp_fd,
					err, len);
	if (!ret)
		ret = egress__attach(p->egress, (int)ifindex, err, len);
	return ret;
}

/* A UDP flow's reply socket: from its original destination, to the guest. */
static int reply_socket(const struct sockaddr_in *from,
			const struct sockaddr_in *to)
{
	int fd, ret;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Other flows to the same destination have one bound there too. */
	ret = sockopt_on(fd, SOL_IP, IP_TRANSPARENT);
	if (!ret)
		ret = sockopt_on(fd, SOL_SOCKET, SO_REUSEADDR);
	if (!ret && bind(fd, (const struct sockaddr *)from, sizeof(*from)))
		ret = -errno;
	if (!ret && connect(fd, (const struct sockaddr *)to, sizeof(*to)))
		ret = -errno;
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

static void ns_finish(struct proxy *p)
{
	p->ns_req = NS_NONE;
	p->ns_done = true;
	pthread_cond_broadcast(&p->ns_cv);
}

static void *ns_thread(void *arg)
{
	struct proxy *p = arg;
	enum ns_request req;
	int ret;

	worker__block_signals();
	ret = ns_setup(p);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_ret = ret;
	ns_finish(p);
	for (req = NS_NONE; !ret && req != NS_EXIT;) {
		while (p->ns_req == NS_NONE)
			pthread_cond_wait(&p->ns_cv, &p->ns_lock);
		req = p->ns_req;
		if (req == NS_REPLY_SOCKET)
			p->ns_fd = reply_socket(&p->ns_bind, &p->ns_peer);
		if (req == NS_COUNTERS)
			p->ns_counts_ret =
				egress__read_counters(p->egress, p->ns_counts,
						      p->ns_err, p->ns_errlen);
		if (req == NS_CALL)
			p->ns_call_ret = p->ns_fn(p->ns_arg);
		if (req != NS_EXIT)
			ns_finish(p);
	}
	pthread_mutex_unlock(&p->ns_lock);
	/* Detached in the netns it was attached in; then the answer. */
	egress__destroy(p->egress);
	p->egress = NULL;
	if (req == NS_EXIT) {
		pthread_mutex_lock(&p->ns_lock);
		ns_finish(p);
		pthread_mutex_unlock(&p->ns_lock);
	}
	return NULL;
}

/*
 * Asks the netns thread and waits for its answer; the caller holds
 * ns_ask_lock, set the request's inputs up and takes its answer.
 */
static void ns_ask(struct proxy *p, enum ns_request req)
{
	pthread_mutex_lock(&p->ns_lock);
	p->ns_req = req;
	p->ns_done = false;
	pthread_cond_broadcast(&p->ns_cv);
	while (!p->ns_done)
		pthread_cond_wait(&p->ns_cv, &p->ns_lock);
	pthread_mutex_unlock(&p->ns_lock);
}

/* ---- epoll ----------------------------------------------------------------- */

static int ep_set(struct proxy *p, struct endpoint *e, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = e };
	int op = e->events == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;

	if (e->events == events)
		return 0;
	if (epoll_ctl(p->epoll_fd, op, e->fd, &ev))
		return -errno;
	e->events = events;
	return 0;
}

static int ep_add(struct proxy *p, struct endpoint *e, enum ep_kind kind,
		  int fd, void *owner, uint32_t events)
{
	*e = (struct endpoint){
		.kind = kind, .fd = fd, .events = UINT32_MAX, .owner = owner
	};
	return ep_set(p, e, events);
}

/* Closing the fd takes it out of the epoll set too. */
static void ep_close(struct endpoint *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
}

/* ---- TCP ------------------------------------------------------------------- */

/* Closes with an RST rather than a FIN: the peer learns it failed. */
static void close_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		pr_debug("%s: SO_LINGER: %s", PROXY_NAME, strerror(errno));
	close(fd);
}

/* A held flow's question is cancelled: it was never open. */
static void tcp_close(struct proxy *p, struct tcp_flow *t, bool reset)
{
	bool was_open = !t->asking;

	if (t->asking)
		hook__cancel(p->hook, t->hook_id);
	t->asking = false;
	/* It borrows the sockets: gone before they are. */
	intercept__destroy(t->ic);
	t->ic = NULL;
	for (int s = 0; s < NR_SIDES; s++) {
		if (t->ep[s].fd >= 0 && reset) {
			close_reset(t->ep[s].fd);
			t->ep[s].fd = -1;
		}
		ep_close(&t->ep[s]);
		if (t->dir[s].piped) {
			close(t->dir[s].pipe[0]);
			close(t->dir[s].pipe[1]);
		}
		free(t->dir[s].buf);
		t->dir[s] = (struct relay_dir){ 0 };
	}
	t->used = false;
	if (was_open)
		count_sub(p, &p->stats.tcp_open);
}

static uint32_t tcp_interest(const struct tcp_flow *t, int s)
{
	const struct relay_dir *in = &t->dir[s], *out = &t->dir[!s];
	uint32_t ev = 0;

	if (s == SIDE_UP && t->connecting)
		return EPOLLOUT;
	if (t->ic)
		return intercept__interest(t->ic, s);
	if (!in->eof && in->len < PROXY_RELAY_BUF && !in->full)
		ev |= EPOLLIN;
	if (out->off < out->len)
		ev |= EPOLLOUT;
	return ev;
}

/*
 * Into the pipe, as far as it has room. EAGAIN with bytes in it: taken
 * as no room (the socket may have been empty instead; either way the
 * next write to the other side clears it and reading goes on).
 */
static ssize_t relay_splice_in(struct tcp_flow *t, int s)
{
	struct relay_dir *d = &t->dir[s];
	ssize_t n;

	n = splice(t->ep[s].fd, NULL, d->pipe[1], NULL, PROXY_RELAY_BUF - d->len,
		   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0 && errno == EAGAIN && d->len)
		d->full = true;
	return n;
}

/* Reads what side s has, as far as its buffer has room. */
static int relay_read(struct proxy *p, struct tcp_flow *t, int s)
{
	struct relay_dir *d = &t->dir[s];
	ssize_t n;

	if (d->eof)
		return 0;
	if (d->piped) {
		if (d->len == PROXY_RELAY_BUF || d->full)
			return 0;
		n = relay_splice_in(t, s);
		goto count;
	}
	if (d->off) {
		memmove(d->buf, d->buf + d->off, d->len - d->off);
		d->len -= d->off;
		d->off = 0;
	}
	if (d->len == PROXY_RELAY_BUF)
		return 0; /* back-pressure: the other side drains first */
	n = recv(t->ep[s].fd, d->buf + d->len, PROXY_RELAY_BUF - d->len,
		 MSG_DONTWAIT);
count:
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (!n)
		d->eof = true;
	d->len += n;
	count_add(p, s == SIDE_GUEST ? &p->stats.bytes_out : &p->stats.bytes_in,
		  n);
	return 0;
}

/* Writes to side s what the other side sent; its FIN once all is out. */
static int relay_write(struct tcp_flow *t, int s)
{
	struct relay_dir *d = &t->dir[!s];
	ssize_t n;

	if (s == SIDE_UP && t->connecting)
		return 0;
	while (d->piped && d->len) {
		n = splice(d->pipe[0], NULL, t->ep[s].fd, NULL, d->len,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		d->len -= n;
		d->full = false;
	}
	while (d->off < d->len) {
		n = send(t->ep[s].fd, d->buf + d->off, d->len - d->off,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		d->off += n;
	}
	d->off = d->len = 0;
	if (d->eof && !d->shut) {
		if (shutdown(t->ep[s].fd, SHUT_WR))
			return -errno;
		d->shut = true;
	}
	return 0;
}

static int upstream_connected(struct tcp_flow *t)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	if (getsockopt(t->ep[SIDE_UP].fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
		return -errno;
	if (soerr)
		return -soerr;
	t->connecting = false;
	return 0;
}

static void icpt_event(struct proxy *p, struct tcp_flow *t, int s,
		       uint32_t events);

static void tcp_event(struct proxy *p, struct tcp_flow *t, int s,
		      uint32_t events)
{
	int ret = 0;

	if (t->ic) {
		icpt_event(p, t, s, events);
		return;
	}
	if (s == SIDE_UP && t->connecting) {
		ret = upstream_connected(t);
		if (ret) {
			count_add(p, &p->stats.upstream_failed, 1);
			goto fail;
		}
		ret = relay_write(t, SIDE_UP);
	}
	if (!ret && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
		ret = relay_read(p, t, s);
		/* Straight on to the other side, and its FIN with it. */
		if (!ret)
			ret = relay_write(t, !s);
	}
	if (!ret && (events & EPOLLOUT))
		ret = relay_write(t, s);
	if (ret)
		goto fail;
	if (t->dir[SIDE_GUEST].shut && t->dir[SIDE_UP].shut) {
		tcp_close(p, t, false);
		return;
	}
	for (int i = 0; !ret && i < NR_SIDES; i++)
		ret = ep_set(p, &t->ep[i], tcp_interest(t, i));
	if (!ret)
		return;
fail:
	pr_debug("%s: tcp flow: %s", PROXY_NAME, strerror(-ret));
	tcp_close(p, t, true);
}

static struct tcp_flow *tcp_slot(struct proxy *p)
{
	for (unsigned int i = 0; i < p->p.max_tcp_flows; i++)
		if (!p->tcp[i].used)
			return &p->tcp[i];
	return NULL;
}

/* A connection to dst from the host netns, under way: its fd, or -errno. */
static int upstream_socket(const struct sockaddr_in *dst)
{
	int fd, ret;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) &&
	    errno != EINPROGRESS) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * A pipe for the direction (PROXY_RELAY_BUF of room: the default size
 * on Linux, set in case it is not); out of descriptors or pipe memory,
 * a buffer instead. 0 or -ENOMEM.
 */
static int relay_dir_init(struct relay_dir *d)
{
	if (!pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC)) {
		d->piped = true;
		if (fcntl(d->pipe[1], F_SETPIPE_SZ, PROXY_RELAY_BUF) < 0)
			pr_debug("%s: a relay pipe's size: %s", PROXY_NAME,
				 strerror(errno));
		return 0;
	}
	pr_debug("%s: a relay pipe: %s: relayed through a buffer", PROXY_NAME,
		 strerror(errno));
	d->buf = malloc(PROXY_RELAY_BUF);
	return d->buf ? 0 : -ENOMEM;
}

/* An allowed flow: its upstream connection, from the host netns. */
static int tcp_open(struct proxy *p, struct tcp_flow *t, int guest_fd,
		    const struct net_flow *f)
{
	int up, ret;

	*t = (struct tcp_flow){ .used = true, .connecting = true, .flow = *f };
	t->ep[SIDE_GUEST].fd = guest_fd;
	t->ep[SIDE_UP].fd = -1;
	count_add(p, &p->stats.tcp_open, 1);
	for (int s = 0; s < NR_SIDES; s++) {
		ret = relay_dir_init(&t->dir[s]);
		if (ret)
			return ret;
	}
	up = upstream_socket(&f->dst);
	if (up < 0)
		return up;
	t->ep[SIDE_UP].fd = up;
	ret = ep_add(p, &t->ep[SIDE_GUEST], EP_TCP_GUEST, guest_fd, t,
		     tcp_interest(t, SIDE_GUEST));
	if (!ret)
		ret = ep_add(p, &t->ep[SIDE_UP], EP_TCP_UP, up, t,
			     tcp_interest(t, SIDE_UP));
	return ret;
}

/* ---- HTTP interception ------------------------------------------------------ */

static void icpt_request(void *opaque, const struct net_flow *f,
			 const char *detail, bool ok, const char *reason)
{
	struct proxy *p = opaque;

	pthread_mutex_lock(&p->stats_lock);
	ok ? p->stats.http_allowed++ : p->stats.http_refused++;
	count_reason(p->stats.http_reasons, &p->stats.nr_http_reasons,
		     IPPROTO_TCP, ok ? NET_VERDICT_ALLOW : NET_VERDICT_DENY,
		     reason);
	pthread_mutex_unlock(&p->stats_lock);
	if (!ok)
		log_flow(p, "refused an http request of", f, reason,
			 detail ? detail : "");
}

static void icpt_upstream_failed(void *opaque, const struct net_flow *f,
				 const char *why)
{
	struct proxy *p = opaque;

	count_add(p, &p->stats.upstream_failed, 1);
	log_flow(p, "upstream failed for", f, why, "");
}

/*
 * fn(arg) on the netns thread, which runs without the seccomp filter
 * (it was started before it): wolfSSL opens /dev/urandom for each new
 * TLS connection. The proxy thread waits, so only one thread at a time
 * uses what fn touches.
 */
static int icpt_unfiltered(void *opaque, int (*fn)(void *arg), void *arg)
{
	return proxy__on_ns_thread(opaque, fn, arg);
}

int proxy__on_ns_thread(struct proxy *p, int (*fn)(void *arg), void *arg)
{
	int ret;

	pthread_mutex_lock(&p->ns_ask_lock);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_fn = fn;
	p->ns_arg = arg;
	pthread_mutex_unlock(&p->ns_lock);
	ns_ask(p, NS_CALL);
	ret = p->ns_call_ret;
	pthread_mutex_unlock(&p->ns_ask_lock);
	return ret;
}

/* A request put to the hook; its cookie is the flow (owner). */
static int icpt_ask(void *opaque, void *owner, const struct net_flow *f,
		    const struct hook_http_question *q, uint64_t *id)
{
	struct proxy *p = opaque;
	int ret;

	ret = hook__ask_http(p->hook, f, q, owner, now_ms(), id);
	hook_copy_stats(p);
	if (ret && ret != -EBUSY)
		pr_debug("%s: the hook: %s", PROXY_NAME, strerror(-ret));
	return ret;
}

static void icpt_cancel(void *opaque, uint64_t id)
{
	struct proxy *p = opaque;

	hook__cancel(p->hook, id);
}

static void icpt_bytes(void *opaque, size_t out, size_t in)
{
	struct proxy *p = opaque;

	pthread_mutex_lock(&p->stats_lock);
	p->stats.bytes_out += out;
	p->stats.bytes_in += in;
	pthread_mutex_unlock(&p->stats_lock);
}

/*
 * A flow an http grant covers: the guest's side only, until a request
 * is allowed and the interception asks for upstream (icpt_connect).
 */
static void tcp_intercept(struct proxy *p, struct tcp_flow *t, int fd,
			  const struct net_flow *f,
			  const struct net_decision *d)
{
	struct intercept_params ip = { .flow = *f,
				       .guest_fd = fd,
				       .ops = &p->icpt_ops,
				       .owner = t,
				       .response_ms = p->p.http_response_ms };
	int ret;

	if (d->http_tls)
		ip.tls = &p->p.tls;
	*t = (struct tcp_flow){ .used = true, .flow = *f, .tls = d->http_tls };
	if (d->http_tls)
		t->setup_deadline_ms = now_ms() + p->p.tls_setup_ms;
	t->ep[SIDE_GUEST].fd = fd;
	t->ep[SIDE_UP].fd = -1;
	count_add(p, &p->stats.tcp_open, 1);
	ret = intercept__create(&t->ic, &ip);
	if (!ret)
		ret = ep_add(p, &t->ep[SIDE_GUEST], EP_TCP_GUEST, fd, t,
			     intercept__interest(t->ic, INTERCEPT_GUEST));
	if (ret) {
		pr_debug("%s: tcp interception: %s", PROXY_NAME,
			 strerror(-ret));
		tcp_close(p, t, true);
	}
}

/* Upstream's connection failed: the guest gets the interception's 502. */
static int icpt_connect_failed(struct proxy *p, struct tcp_flow *t)
{
	count_add(p, &p->stats.upstream_failed, 1);
	t->connecting = false;
	ep_close(&t->ep[SIDE_UP]);
	return intercept__upstream_failed(t->ic);
}

/* Upstream, asked for by the interception once a request was allowed. */
static int icpt_connect(struct proxy *p, struct tcp_flow *t)
{
	int fd = upstream_socket(&t->flow.dst);

	if (fd < 0)
		return icpt_connect_failed(p, t);
	t->connecting = true;
	return ep_add(p, &t->ep[SIDE_UP], EP_TCP_UP, fd, t, EPOLLOUT);
}

/*
 * What the interception said (intercept__run() and the like) carried
 * out: upstream asked for or closed, the flow closed or reset, or its
 * sides watched for what it waits for now.
 */
static void icpt_settle(struct proxy *p, struct tcp_flow *t, int ret)
{
	if (!ret && t->ep[SIDE_UP].fd < 0 && intercept__wants_upstream(t->ic))
		ret = icpt_connect(p, t);
	if (ret == INTERCEPT_DONE) {
		tcp_close(p, t, false);
		return;
	}
	if (!ret && t->ep[SIDE_UP].fd >= 0 && intercept__upstream_done(t->ic))
		ep_close(&t->ep[SIDE_UP]);
	for (int i = 0; !ret && i < NR_SIDES; i++)
		if (t->ep[i].fd >= 0)
			ret = ep_set(p, &t->ep[i], tcp_interest(t, i));
	if (ret) {
		pr_debug("%s: intercepted tcp flow: %s", PROXY_NAME,
			 strerror(-ret));
		tcp_close(p, t, true);
	}
}

static void icpt_event(struct proxy *p, struct tcp_flow *t, int s,
		       uint32_t events)
{
	int ret;

	if (s == SIDE_UP && t->connecting)
		ret = upstream_connected(t) ?
			      icpt_connect_failed(p, t) :
			      intercept__upstream(t->ic, t->ep[SIDE_UP].fd);
	else
		ret = intercept__run(t->ic, s, events);
	icpt_settle(p, t, ret);
}

/* An allowed flow, opened; one whose upstream fails is reset. */
static void tcp_start(struct proxy *p, struct tcp_flow *t, int guest_fd,
		      const struct net_flow *f, uint64_t hook_gen)
{
	int ret;

	ret = tcp_open(p, t, guest_fd, f);
	t->hook_gen = hook_gen;
	if (ret) {
		pr_debug("%s: tcp upstream: %s", PROXY_NAME, strerror(-ret));
		count_add(p, &p->stats.upstream_failed, 1);
		tcp_close(p, t, true);
	}
}

/*
 * The guest's connection held while the hook is asked: accepted, not
 * read (what the guest sends waits in its socket), nothing upstream.
 */
static void tcp_hold(struct proxy *p, struct tcp_flow *t, int fd,
		     const struct net_flow *f, struct net_decision *d)
{
	*t = (struct tcp_flow){ .used = true, .asking = true, .flow = *f };
	t->ep[SIDE_GUEST].fd = fd;
	t->ep[SIDE_UP].fd = -1;
	if (hook_ask(p, f, d, t, &t->hook_id))
		return;
	t->asking = false; /* no question to cancel, not open */
	t->ep[SIDE_GUEST].fd = -1;
	t->used = false;
	close_reset(fd);
}

/*
 * A held flow decided, its question answered or cancelled: by the hook
 * (hook_gen, its generation) or by a recheck's rules (0).
 */
static void tcp_settled(struct proxy *p, struct tcp_flow *t,
			const struct net_decision *d, const char *detail,
			uint64_t hook_gen)
{
	struct net_flow f = t->flow;
	int fd = t->ep[SIDE_GUEST].fd;

	/* Still asking, so a denied one is closed as never open. */
	settle(p, &f, d, detail);
	if (d->verdict == NET_VERDICT_ALLOW) {
		tcp_start(p, t, fd, &f, hook_gen);
	} else if (d->verdict == NET_VERDICT_HTTP) {
		t->asking = false; /* its question is answered or cancelled */
		tcp_intercept(p, t, fd, &f, d);
	} else {
		tcp_close(p, t, true);
	}
}

static void tcp_accept_one(struct proxy *p, int fd,
			   const struct sockaddr_in *peer)
{
	struct net_flow f = { .proto = IPPROTO_TCP, .src = *peer };
	socklen_t len = sizeof(f.dst);
	struct net_decision d;
	struct tcp_flow *t;

	/* A transparent socket's own address is where the guest went. */
	if (getsockname(fd, (struct sockaddr *)&f.dst, &len)) {
		close_reset(fd);
		return;
	}
	t = tcp_slot(p);
	if (!t) {
		d = (struct net_decision){ .verdict = NET_VERDICT_DENY,
					   .reason = "flow limit" };
		count_flow(p, &f, &d);
		log_flow(p, "denied", &f, d.reason, "");
		close_reset(fd);
		return;
	}
	decide(p, &f, &d);
	if (d.verdict == NET_VERDICT_ASK)
		tcp_hold(p, t, fd, &f, &d);
	else if (d.verdict == NET_VERDICT_ALLOW)
		tcp_start(p, t, fd, &f, 0);
	else if (d.verdict == NET_VERDICT_HTTP)
		tcp_intercept(p, t, fd, &f, &d);
	else
		close_reset(fd);
}

static void tcp_accept(struct proxy *p)
{
	struct sockaddr_in peer;
	socklen_t len;
	int fd;

	for (int i = 0; i < PROXY_ACCEPT_BUDGET; i++) {
		len = sizeof(peer);
		fd = accept4(p->lsn_fd, (struct sockaddr *)&peer, &len,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == ECONNABORTED || errno == EINTR)
				continue;
			if (errno != EAGAIN)
				pr_debug("%s: accept: %s", PROXY_NAME,
					 strerror(errno));
			return;
		}
		tcp_accept_one(p, fd, &peer);
	}
}

/* ---- UDP ------------------------------------------------------------------- */

/* A held flow's datagrams, dropped (not counted: the flow never sent). */
static void udp_free_held(struct udp_flow *u)
{
	for (unsigned int i = 0; i < u->nr_held; i++)
		free(u->held[i]);
	u->nr_held = 0;
	u->held_bytes = 0;
}

/* A held flow's question is cancelled. */
static void udp_close(struct proxy *p, struct udp_flow *u)
{
	if (u->allowed)
		count_sub(p, &p->stats.udp_open);
	if (u->asking)
		hook__cancel(p->hook, u->hook_id);
	udp_free_held(u);
	ep_close(&u->up);
	if (u->reply_fd >= 0)
		close(u->reply_fd);
	*u = (struct udp_flow){ .reply_fd = -1, .up.fd = -1 };
}

static bool same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr &&
	       a->sin_port == b->sin_port;
}

static struct udp_flow *udp_find(struct proxy *p, const struct sockaddr_in *src,
				 const struct sockaddr_in *dst)
{
	for (unsigned int i = 0; i < p->p.max_udp_flows; i++) {
		struct udp_flow *u = &p->udp[i];

		if (u->used && same_addr(&u->src, src) &&
		    same_addr(&u->dst, dst))
			return u;
	}
	return NULL;
}

/* A free entry, or the least recently used one, evicted. */
static struct udp_flow *udp_slot(struct proxy *p)
{
	struct udp_flow *lru = NULL;

	for (unsigned int i = 0; i < p->p.max_udp_flows; i++) {
		struct udp_flow *u = &p->udp[i];

		if (!u->used)
			return u;
		if (!lru || u->last_ms < lru->last_ms)
			lru = u;
	}
	udp_close(p, lru);
	return lru;
}

/* An allowed flow's two sockets: upstream here, the reply one there. */
static int udp_open(struct proxy *p, struct udp_flow *u)
{
	int fd;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	u->up.fd = fd;
	if (connect(fd, (const struct sockaddr *)&u->dst, sizeof(u->dst)))
		return -errno;
	pthread_mutex_lock(&p->ns_ask_lock);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_bind = u->dst;
	p->ns_peer = u->src;
	pthread_mutex_unlock(&p->ns_lock);
	ns_ask(p, NS_REPLY_SOCKET);
	fd = p->ns_fd;
	pthread_mutex_unlock(&p->ns_ask_lock);
	if (fd < 0)
		return fd;
	u->reply_fd = fd;
	return ep_add(p, &u->up, EP_UDP_UP, u->up.fd, u, EPOLLIN);
}

/*
 * An allowed flow's sockets (hook_gen: the hook's generation if it
 * granted it, else 0). False when they failed: the entry is gone.
 */
static bool udp_start(struct proxy *p, struct udp_flow *u, uint64_t hook_gen)
{
	int ret;

	u->allowed = true;
	u->hook_gen = hook_gen;
	count_add(p, &p->stats.udp_open, 1);
	ret = udp_open(p, u);
	if (!ret)
		return true;
	pr_debug("%s: udp upstream: %s", PROXY_NAME, strerror(-ret));
	count_add(p, &p->stats.upstream_failed, 1);
	udp_close(p, u);
	return false;
}

static void udp_send(struct proxy *p, struct udp_flow *u, const void *buf,
		     size_t n)
{
	if (send(u->up.fd, buf, n, MSG_DONTWAIT) == (ssize_t)n)
		count_add(p, &p->stats.bytes_out, n);
	else
		count_add(p, &p->stats.udp_dropped, 1);
}

/* A datagram of a held flow, kept for its grant if there is room. */
static void udp_hold(struct proxy *p, struct udp_flow *u, const void *buf,
		     size_t n)
{
	uint8_t *copy;

	if (u->nr_held == PROXY_UDP_HELD ||
	    u->held_bytes + n > PROXY_UDP_HELD_BYTES ||
	    !(copy = malloc(n ? n : 1))) {
		count_add(p, &p->stats.udp_dropped, 1);
		return;
	}
	memcpy(copy, buf, n);
	u->held[u->nr_held] = copy;
	u->held_len[u->nr_held++] = n;
	u->held_bytes += n;
}

/*
 * A held flow decided, its question answered or cancelled: by the hook
 * (hook_gen, its generation) or by a recheck's rules (0). Granted: its
 * held datagrams go upstream in order. Denied: it stays as a denied
 * entry, like a flow the rules denied.
 */
static void udp_settled(struct proxy *p, struct udp_flow *u,
			const struct net_decision *d, const char *detail,
			uint64_t hook_gen)
{
	struct net_flow f = { .proto = IPPROTO_UDP,
			      .src = u->src,
			      .dst = u->dst };

	u->asking = false;
	settle(p, &f, d, detail);
	if (d->verdict != NET_VERDICT_ALLOW) {
		udp_free_held(u);
		return;
	}
	if (!udp_start(p, u, hook_gen))
		return;
	for (unsigned int i = 0; i < u->nr_held; i++)
		udp_send(p, u, u->held[i], u->held_len[i]);
	udp_free_held(u);
}

static struct udp_flow *udp_new(struct proxy *p, const struct sockaddr_in *src,
				const struct sockaddr_in *dst)
{
	struct net_flow f = { .proto = IPPROTO_UDP, .src = *src, .dst = *dst };
	struct udp_flow *u = udp_slot(p);
	struct net_decision d;

	decide(p, &f, &d);
	/* A denied flow is remembered too: decided and logged once. */
	*u = (struct udp_flow){ .used = true,
				.src = *src,
				.dst = *dst,
				.up.fd = -1,
				.reply_fd = -1 };
	if (d.verdict == NET_VERDICT_ASK) {
		/* Held (its datagrams kept) or, not asked, denied. */
		u->asking = hook_ask(p, &f, &d, u, &u->hook_id);
		return u;
	}
	if (d.verdict != NET_VERDICT_ALLOW)
		return u;
	return udp_start(p, u, 0) ? u : NULL;
}

static const struct sockaddr_in *orig_dst(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct sockaddr_in)))
			return (const struct sockaddr_in *)CMSG_DATA(c);
	return NULL;
}

/* Datagrams from the guest, each to its flow's upstream socket. */
static void udp_from_guest(struct proxy *p, uint64_t now)
{
	char cbuf[CMSG_SPACE(sizeof(struct sockaddr_in))];
	struct sockaddr_in src, dst;
	const struct sockaddr_in *orig;
	struct iovec iov = { .iov_base = p->dgram, .iov_len = PROXY_DGRAM_MAX };
	struct msghdr m;
	struct udp_flow *u;
	ssize_t n;

	for (int i = 0; i < PROXY_DGRAM_BUDGET; i++) {
		m = (struct msghdr){ .msg_name = &src,
				     .msg_namelen = sizeof(src),
				     .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		n = recvmsg(p->udp_fd, &m, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		orig = orig_dst(&m);
		if (!orig || m.msg_namelen != sizeof(src))
			continue;
		dst = *orig;
		u = udp_find(p, &src, &dst);
		if (!u)
			u = udp_new(p, &src, &dst);
		if (!u)
			continue;
		u->last_ms = now;
		if (u->asking)
			udp_hold(p, u, p->dgram, n);
		else if (u->allowed)
			udp_send(p, u, p->dgram, n);
	}
}

/* Upstream's answers, back to the guest from where it sent to. */
static void udp_from_upstream(struct proxy *p, struct udp_flow *u, uint64_t now)
{
	ssize_t n;

	for (int i = 0; i < PROXY_DGRAM_BUDGET; i++) {
		n = recv(u->up.fd, p->dgram, PROXY_DGRAM_MAX, MSG_DONTWAIT);
		if (n < 0) {
			/* ECONNREFUSED and the like: an ICMP error, no data. */
			if (errno == EAGAIN)
				return;
			continue;
		}
		u->last_ms = now;
		if (send(u->reply_fd, p->dgram, n, MSG_DONTWAIT) == n)
			count_add(p, &p->stats.bytes_in, n);
		else
			count_add(p, &p->stats.udp_dropped, 1);
	}
}

/*
 * Intercepted TLS flows whose setup (the ClientHello, upstream, the
 * guest's handshake) passed its deadline: reset, counted by the
 * interception. The others: their responses' deadlines.
 */
static void tcp_sweep(struct proxy *p, uint64_t now)
{
	for (unsigned int i = 0; i < p->p.max_tcp_flows; i++) {
		struct tcp_flow *t = &p->tcp[i];

		if (!t->used || !t->ic)
			continue;
		if (t->setup_deadline_ms && !intercept__setting_up(t->ic))
			t->setup_deadline_ms = 0;
		if (!t->setup_deadline_ms) {
			icpt_settle(p, t, intercept__sweep(t->ic, now));
			continue;
		}
		if (now < t->setup_deadline_ms)
			continue;
		pr_debug("%s: intercepted tcp flow: %s", PROXY_NAME,
			 strerror(-intercept__expire(t->ic)));
		tcp_close(p, t, true);
	}
}

static void udp_sweep(struct proxy *p, uint64_t now)
{
	for (unsigned int i = 0; i < p->p.max_udp_flows; i++) {
		struct udp_flow *u = &p->udp[i];

		if (u->used && now - u->last_ms >= p->p.udp_idle_ms)
			udp_close(p, u);
	}
}

/* ---- the hook --------------------------------------------------------------- */

/* A question's answer; its cookie is the held flow, TCP or UDP. */
static void hook_answered(void *opaque, void *cookie,
			  const struct net_decision *d, const char *detail)
{
	struct proxy *p = opaque;
	uintptr_t c = (uintptr_t)cookie, tcp = (uintptr_t)p->tcp;
	uint64_t gen =
		d->verdict == NET_VERDICT_ALLOW ? hook__generation(p->hook) : 0;

	hook_copy_stats(p);
	if (c >= tcp && c < tcp + p->p.max_tcp_flows * sizeof(*p->tcp))
		tcp_settled(p, cookie, d, detail, gen);
	else
		udp_settled(p, cookie, d, detail, gen);
}

/*
 * A request's answer; its cookie is the intercepted flow (its question
 * is cancelled when the flow closes). Kept by the interception, applied
 * by icpt_answers_apply() once hook__run() returned: the hook takes no
 * question from within its callback, and a request decided may ask.
 */
static void hook_http_answered(void *opaque, void *cookie, uint64_t id,
			       const struct net_http_decision *d,
			       const char *detail)
{
	struct proxy *p = opaque;
	struct tcp_flow *t = cookie;

	(void)detail; /* the request's refusal is logged with its reason */
	hook_copy_stats(p);
	if (!t->used || !t->ic)
		return;
	intercept__hook_answer(t->ic, id, d);
	p->icpt_answers = true;
}

/* The intercepted flows whose requests the hook answered, run. */
static void icpt_answers_apply(struct proxy *p)
{
	if (!p->icpt_answers)
		return;
	p->icpt_answers = false;
	for (unsigned int i = 0; i < p->p.max_tcp_flows; i++) {
		struct tcp_flow *t = &p->tcp[i];

		if (t->used && t->ic && intercept__has_answers(t->ic))
			icpt_event(p, t, SIDE_GUEST, 0);
	}
}

/* Until the sweep, or sooner the hook's nearest deadline. */
static int loop_timeout(struct proxy *p)
{
	int ms = hook__timeout(p->hook, now_ms());

	return ms >= 0 && ms < PROXY_SWEEP_MS ? ms : PROXY_SWEEP_MS;
}

/* ---- recheck --------------------------------------------------------------- */

/*
 * A held flow: still waiting when the policy would put it to the same
 * hook socket (its question stays); else the question is cancelled and
 * the caller settles it by d, now a rule's verdict or "hook changed".
 */
static bool recheck_held(struct proxy *p, uint64_t id, struct net_decision *d)
{
	if (d->verdict == NET_VERDICT_ASK) {
		if (hook__is_target(p->hook, d->ask.socket))
			return true;
		deny(d, HOOK_CHANGED);
	}
	hook__cancel(p->hook, id);
	return false;
}

/* An open TCP flow the decide function no longer allows: reset both ways. */
static void tcp_recheck(struct proxy *p, struct tcp_flow *t)
{
	struct net_decision d;
	const char *why;

	ask_policy(p, &t->flow, &d);
	if (t->asking) {
		if (!recheck_held(p, t->hook_id, &d))
			tcp_settled(p, t, &d, "", 0);
		return;
	}
	if (t->ic) {
		/* Intercepted while an http grant covers it, the same way. */
		if (d.verdict == NET_VERDICT_HTTP && d.http_tls == t->tls)
			return;
		why = d.verdict == NET_VERDICT_HTTP ? "http tls changed" :
		      allowed(&d)		    ? "no http grant" :
						      d.reason;
	} else if (d.verdict == NET_VERDICT_ALLOW ||
		   hook_still_grants(p, t->hook_gen, &d, &why)) {
		return;
	} else if (d.verdict == NET_VERDICT_HTTP) {
		/* Relayed as it is no more: an http grant's is intercepted. */
		why = "intercepted from now on";
	}
	log_flow(p, "cut", &t->flow, why, "");
	tcp_close(p, t, true);
	/* After the close: whoever sees the cut sees one flow less open. */
	count_add(p, &p->stats.tcp_cut, 1);
}

/*
 * An allowed UDP flow now denied loses its sockets and stays as a denied
 * entry (its datagrams dropped until it is idle); a denied one is
 * forgotten, to be decided anew on its next datagram.
 */
static void udp_recheck(struct proxy *p, struct udp_flow *u)
{
	struct net_flow f = { .proto = IPPROTO_UDP,
			      .src = u->src,
			      .dst = u->dst };
	struct net_decision d;
	uint64_t last_ms = u->last_ms;
	const char *why;

	if (u->asking) {
		ask_policy(p, &f, &d);
		if (!recheck_held(p, u->hook_id, &d))
			udp_settled(p, u, &d, "", 0);
		return;
	}
	if (!u->allowed) {
		udp_close(p, u);
		return;
	}
	ask_policy(p, &f, &d);
	if (d.verdict == NET_VERDICT_ALLOW ||
	    hook_still_grants(p, u->hook_gen, &d, &why))
		return;
	log_flow(p, "cut", &f, why, "");
	udp_close(p, u);
	*u = (struct udp_flow){ .used = true,
				.src = f.src,
				.dst = f.dst,
				.up.fd = -1,
				.reply_fd = -1,
				.last_ms = last_ms };
	count_add(p, &p->stats.udp_cut, 1);
}

static void recheck_all(struct proxy *p)
{
	uint64_t n;

	/* Wakes that came meanwhile are served by this one pass. */
	if (read(p->recheck_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		pr_debug("%s: recheck eventfd: %s", PROXY_NAME,
			 strerror(errno));
	for (unsigned int i = 0; i < p->p.max_tcp_flows; i++)
		if (p->tcp[i].used)
			tcp_recheck(p, &p->tcp[i]);
	for (unsigned int i = 0; i < p->p.max_udp_flows; i++)
		if (p->udp[i].used)
			udp_recheck(p, &p->udp[i]);
}

void proxy__recheck(struct proxy *p)
{
	worker__wake(p->recheck_fd, PROXY_NAME, "recheck");
}

/* ---- the proxy thread -------------------------------------------------------- */

static int proxy_loop(struct proxy *p)
{
	struct epoll_event evs[PROXY_EPOLL_EVENTS];
	uint64_t now, last_sweep = now_ms();
	bool accept_ready, udp_ready, recheck, hook_ready;
	int n;

	for (;;) {
		n = epoll_wait(p->epoll_fd, evs, PROXY_EPOLL_EVENTS,
			       loop_timeout(p));
		if (n < 0 && errno != EINTR)
			return -errno;
		now = now_ms();
		accept_ready = udp_ready = recheck = hook_ready = false;
		/*
		 * Flows close in this batch but none opens: a later event
		 * never meets another flow in a slot it had.
		 */
		for (int i = 0; i < n; i++) {
			struct endpoint *e = evs[i].data.ptr;

			if (e->fd < 0)
				continue; /* its flow closed in this batch */
			switch (e->kind) {
			case EP_STOP:
				return 0;
			case EP_RECHECK:
				recheck = true;
				break;
			case EP_LISTEN:
				accept_ready = true;
				break;
			case EP_UDP:
				udp_ready = true;
				break;
			case EP_TCP_GUEST:
			case EP_TCP_UP:
				tcp_event(p, e->owner,
					  e->kind == EP_TCP_GUEST ? SIDE_GUEST :
								    SIDE_UP,
					  evs[i].events);
				break;
			case EP_UDP_UP:
				udp_from_upstream(p, e->owner, now);
				break;
			case EP_HOOK:
				hook_ready = true;
				break;
			}
		}
		/*
		 * Before new flows: those are decided anew anyway. Answers,
		 * like new flows, open flows after the batch.
		 */
		if (recheck)
			recheck_all(p);
		if (hook_ready || !hook__timeout(p->hook, now))
			hook__run(p->hook, now);
		icpt_answers_apply(p);
		if (accept_ready)
			tcp_accept(p);
		if (udp_ready)
			udp_from_guest(p, now);
		if (now - last_sweep >= PROXY_SWEEP_MS) {
			udp_sweep(p, now);
			tcp_sweep(p, now);
			last_sweep = now;
		}
		hook_copy_stats(p);
	}
}

/* Fail closed: the sockets go, and with them the program's slots. */
static void close_all(struct proxy *p)
{
	for (unsigned int i = 0; p->tcp && i < p->p.max_tcp_flows; i++)
		if (p->tcp[i].used)
			tcp_close(p, &p->tcp[i], true);
	for (unsigned int i = 0; p->udp && i < p->p.max_udp_flows; i++)
		if (p->udp[i].used)
			udp_close(p, &p->udp[i]);
	if (p->lsn_fd >= 0)
		close(p->lsn_fd);
	if (p->udp_fd >= 0)
		close(p->udp_fd);
	p->lsn_fd = p->udp_fd = -1;
}

static void *proxy_thread(void *arg)
{
	struct proxy *p = arg;
	int ret;

	worker__block_signals();
	ret = proxy_loop(p);
	if (ret)
		pr_err("%s: epoll_wait: %s; nothing leaves the VM from now on",
		       PROXY_NAME, strerror(-ret));
	close_all(p);
	pthread_mutex_lock(&p->stats_lock);
	p->stats.running = false;
	pthread_mutex_unlock(&p->stats_lock);
	return NULL;
}

/* ---- create, start, destroy ------------------------------------------------ */

static int proxy_alloc(struct proxy *p, char *err, size_t errlen)
{
	int ret;

	p->tcp = calloc(p->p.max_tcp_flows, sizeof(*p->tcp));
	p->udp = calloc(p->p.max_udp_flows, sizeof(*p->udp));
	p->dgram = malloc(PROXY_DGRAM_MAX);
	if (!p->tcp || !p->udp || !p->dgram)
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    PROXY_NAME);
	for (unsigned int i = 0; i < p->p.max_tcp_flows; i++)
		for (int s = 0; s < NR_SIDES; s++)
			p->tcp[i].ep[s].fd = -1;
	for (unsigned int i = 0; i < p->p.max_udp_flows; i++)
		p->udp[i] = (struct udp_flow){ .up.fd = -1, .reply_fd = -1 };
	ret = hook__create(
		&p->hook,
		&(struct hook_params){ .answer = hook_answered,
				       .http_answer = hook_http_answered,
				       .opaque = p,
				       .max_pending = p->p.max_hook_pending });
	if (ret)
		return errf(err, errlen, ret, "%s: the hook: %s", PROXY_NAME,
			    strerror(-ret));
	p->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	p->recheck_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->epoll_fd < 0 || p->recheck_fd < 0 || worker__open(&p->worker))
		return errf(err, errlen, -errno, "%s: %s", PROXY_NAME,
			    strerror(errno));
	return 0;
}

static void set_defaults(struct proxy_params *q)
{
	if (!q->max_tcp_flows)
		q->max_tcp_flows = PROXY_MAX_TCP_FLOWS;
	if (!q->max_udp_flows)
		q->max_udp_flows = PROXY_MAX_UDP_FLOWS;
	if (!q->udp_idle_ms)
		q->udp_idle_ms = PROXY_UDP_IDLE_MS;
	if (!q->tls_setup_ms)
		q->tls_setup_ms = PROXY_TLS_SETUP_MS;
	if (!q->tcp_port)
		q->tcp_port = PROXY_TCP_PORT;
	if (!q->udp_port)
		q->udp_port = PROXY_UDP_PORT;
}

int proxy__create(struct proxy **out, const struct proxy_params *params,
		  char *err, size_t errlen)
{
	struct proxy *p;
	int ret;

	*out = NULL;
	if (!params->decide || !params->ifname ||
	    strlen(params->ifname) >= IFNAMSIZ)
		return errf(err, errlen, -EINVAL, "%s: bad parameters",
			    PROXY_NAME);
	p = calloc(1, sizeof(*p));
	if (!p)
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    PROXY_NAME);
	p->p = *params;
	set_defaults(&p->p);
	p->icpt_ops =
		(struct intercept_ops){ .decide = params->decide_http,
					.decide_opaque = params->decide_opaque,
					.request = icpt_request,
					.upstream_failed = icpt_upstream_failed,
					.ask = icpt_ask,
					.cancel = icpt_cancel,
					.bytes = icpt_bytes,
					.unfiltered = icpt_unfiltered,
					.opaque = p };
	snprintf(p->ifname, sizeof(p->ifname), "%s", params->ifname);
	p->p.ifname = p->ifname;
	p->lsn_fd = p->udp_fd = p->epoll_fd = p->recheck_fd = -1;
	worker__init(&p->worker);
	pthread_mutex_init(&p->ns_ask_lock, NULL);
	pthread_mutex_init(&p->ns_lock, NULL);
	pthread_cond_init(&p->ns_cv, NULL);
	pthread_mutex_init(&p->stats_lock, NULL);
	ret = proxy_alloc(p, err, errlen);
	if (ret)
		goto out_destroy;

	p->ns_err = err;
	p->ns_errlen = errlen;
	ret = -pthread_create(&p->ns_thread, NULL, ns_thread, p);
	if (ret) {
		errf(err, errlen, ret, "%s: a thread: %s", PROXY_NAME,
		     strerror(-ret));
		goto out_destroy;
	}
	p->ns_started = true;
	pthread_mutex_lock(&p->ns_lock);
	while (!p->ns_done)
		pthread_cond_wait(&p->ns_cv, &p->ns_lock);
	ret = p->ns_ret;
	p->ns_err = NULL;
	pthread_mutex_unlock(&p->ns_lock);
	if (ret)
		goto out_destroy;

	ret = ep_add(p, &p->ep_stop, EP_STOP, p->worker.stop_fd, NULL, EPOLLIN);
	if (!ret)
		ret = ep_add(p, &p->ep_recheck, EP_RECHECK, p->recheck_fd, NULL,
			     EPOLLIN);
	if (!ret)
		ret = ep_add(p, &p->ep_lsn, EP_LISTEN, p->lsn_fd, NULL,
			     EPOLLIN);
	if (!ret)
		ret = ep_add(p, &p->ep_udp, EP_UDP, p->udp_fd, NULL, EPOLLIN);
	if (!ret)
		ret = ep_add(p, &p->ep_hook, EP_HOOK, hook__fd(p->hook), NULL,
			     EPOLLIN);
	if (ret) {
		errf(err, errlen, ret, "%s: epoll: %s", PROXY_NAME,
		     strerror(-ret));
		goto out_destroy;
	}
	*out = p;
	return 0;

out_destroy:
	proxy__destroy(p);
	return ret;
}

int proxy__start(struct proxy *p, const struct sock_fprog *filter)
{
	int ret;

	pthread_mutex_lock(&p->stats_lock);
	p->stats.running = true;
	pthread_mutex_unlock(&p->stats_lock);
	ret = worker__start(&p->worker, filter, proxy_thread, p);
	if (ret) {
		pthread_mutex_lock(&p->stats_lock);
		p->stats.running = false;
		pthread_mutex_unlock(&p->stats_lock);
	}
	return ret;
}

void proxy__destroy(struct proxy *p)
{
	if (!p)
		return;
	worker__exit(&p->worker, PROXY_NAME);
	close_all(p);
	if (p->ns_started) {
		/* A thread whose setup failed has ended already. */
		if (!p->ns_ret) {
			pthread_mutex_lock(&p->ns_ask_lock);
			ns_ask(p, NS_EXIT);
			pthread_mutex_unlock(&p->ns_ask_lock);
		}
		pthread_join(p->ns_thread, NULL);
	}
	if (p->epoll_fd >= 0)
		close(p->epoll_fd);
	if (p->recheck_fd >= 0)
		close(p->recheck_fd);
	hook__destroy(p->hook); /* after close_all cancelled its questions */
	free(p->tcp);
	free(p->udp);
	free(p->dgram);
	pthread_cond_destroy(&p->ns_cv);
	pthread_mutex_destroy(&p->ns_lock);
	pthread_mutex_destroy(&p->ns_ask_lock);
	pthread_mutex_destroy(&p->stats_lock);
	free(p);
}

void proxy__stats(struct proxy *p, struct proxy_stats *s)
{
	pthread_mutex_lock(&p->stats_lock);
	*s = p->stats;
	pthread_mutex_unlock(&p->stats_lock);
}

int proxy__egress_counters(struct proxy *p, uint64_t counts[EGRESS_NR_REASONS],
			   char *err, size_t errlen)
{
	int ret;

	pthread_mutex_lock(&p->ns_ask_lock);
	pthread_mutex_lock(&p->ns_lock);
	p->ns_counts = counts;
	p->ns_err = err;
	p->ns_errlen = errlen;
	pthread_mutex_unlock(&p->ns_lock);
	ns_ask(p, NS_COUNTERS);
	ret = p->ns_counts_ret;
	p->ns_err = NULL;
	pthread_mutex_unlock(&p->ns_ask_lock);
	return ret;
}

void proxy__report(struct proxy *p)
{
	struct proxy_stats s;

	proxy__stats(p, &s);
	pr_info("%s: %s; tcp allowed %llu denied %llu open %llu; udp allowed "
		"%llu denied %llu open %llu; bytes out %llu in %llu; upstream "
		"failed %llu; udp dropped %llu; cut tcp %llu udp %llu; hook "
		"questions %llu answers %llu timeouts %llu failures %llu "
		"pending %llu",
		PROXY_NAME, s.running ? "running" : "stopped (fail closed)",
		(unsigned long long)s.tcp_allowed,
		(unsigned long long)s.tcp_denied,
		(unsigned long long)s.tcp_open,
		(unsigned long long)s.udp_allowed,
		(unsigned long long)s.udp_denied,
		(unsigned long long)s.udp_open, (unsigned long long)s.bytes_out,
		(unsigned long long)s.bytes_in,
		(unsigned long long)s.upstream_failed,
		(unsigned long long)s.udp_dropped,
		(unsigned long long)s.tcp_cut, (unsigned long long)s.udp_cut,
		(unsigned long long)s.hook.questions,
		(unsigned long long)s.hook.answers,
		(unsigned long long)s.hook.timeouts,
		(unsigned long long)s.hook.failures,
		(unsigned long long)s.hook.pending);
	pr_info("%s: tcp intercepted %llu; http requests allowed %llu "
		"refused %llu",
		PROXY_NAME, (unsigned long long)s.tcp_intercepted,
		(unsigned long long)s.http_allowed,
		(unsigned long long)s.http_refused);
	for (unsigned int i = 0; i < s.nr_reasons; i++)
		pr_info("%s: %s %s \"%s\": %llu flows", PROXY_NAME,
			proto_name(s.reasons[i].proto),
			proxy__verdict_name(s.reasons[i].verdict),
			s.reasons[i].reason,
			(unsigned long long)s.reasons[i].flows);
	for (unsigned int i = 0; i < s.nr_http_reasons; i++)
		pr_info("%s: http %s \"%s\": %llu requests", PROXY_NAME,
			proxy__verdict_name(s.http_reasons[i].verdict),
			s.http_reasons[i].reason,
			(unsigned long long)s.http_reasons[i].flows);
}

const char *proxy__verdict_name(enum net_verdict v)
{
	switch (v) {
	case NET_VERDICT_ALLOW:
		return "allowed";
	case NET_VERDICT_HTTP:
		return "intercepted";
	case NET_VERDICT_DENY:
	case NET_VERDICT_ASK:
		break;
	}
	return "denied";
}
