// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's egress proxy (proxy.h, Documentation/network.md "The proxy"):
 * the proxy thread's loop, create, start and destroy, and the decisions
 * (the policy's, the hook's, a recheck's) with their counters and log.
 * The flows themselves are proxy-tcp.c's and proxy-udp.c's, the netns
 * thread proxy-ns.c's (proxy-internal.h).
 *
 * The proxy thread never leaves the caller's netns: its upstream sockets
 * are the host's. It is an epoll loop: a relay of nonblocking sockets
 * wants readiness, a bounded buffer per direction and calls io_uring has
 * no opcode for on Linux 6.1 (setsockopt, getsockname).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ebpf/relay.h"
#include "lib/errf.h"
#include "lib/log.h"
#include "lib/resident.h"
#include "lib/worker.h"
#include "net/proxy-internal.h"

static const char *proto_name(uint8_t proto)
{
	return proto == IPPROTO_TCP ? "tcp" : "udp";
}

/* ---- counters and the log ------------------------------------------------ */

/* One more under (proto, verdict, reason) in a table; stats_lock held. */
void proxy__count_reason(struct proxy_reason_count *tbl, unsigned int *nr,
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

void proxy__count_flow(struct proxy *p, const struct net_flow *f,
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
	proxy__count_reason(s->reasons, &s->nr_reasons, f->proto, d->verdict,
			    d->reason);
	pthread_mutex_unlock(&p->stats_lock);
}

/*
 * The hook's counters, copied before the flow they concern is counted:
 * whoever sees the flow settled sees its question's outcome too.
 */
void proxy__hook_copy_stats(struct proxy *p)
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
void proxy__log_flow(struct proxy *p, const char *what,
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

/*
 * An http grant's flow (the policy's or the hook's) the proxy cannot
 * intercept is denied: never relayed as it is. "tls": "auto" without
 * TLS takes clear text only.
 */
void proxy__http_usable(struct proxy *p, const struct net_flow *f,
			struct net_decision *d)
{
	if (d->verdict != NET_VERDICT_HTTP)
		return;
	if (f->proto != IPPROTO_TCP || !p->p.decide_http)
		deny(d, "http interception unavailable");
	else if (d->http_tls &&
		 (!p->p.tls.ca || !p->p.tls.server || !p->p.tls.client))
		deny(d, "http tls unavailable");
}

bool proxy__host_addr(const struct proxy *p, uint32_t addr)
{
	return net_host_addrs__contains(p->host_addrs, addr);
}

/*
 * Asks the policy, whether the destination is the host's own address
 * as it is now; a decision without a reason gets one.
 */
void proxy__ask_policy(struct proxy *p, const struct net_flow *f,
		       struct net_decision *d)
{
	struct net_flow now = *f;

	now.dst_local = proxy__host_addr(p, f->dst.sin_addr.s_addr);
	*d = (struct net_decision){ .verdict = NET_VERDICT_DENY };
	p->p.decide(p->p.decide_opaque, &now, d);
	d->reason[sizeof(d->reason) - 1] = '\0';
	d->ask.socket[sizeof(d->ask.socket) - 1] = '\0';
	proxy__http_usable(p, f, d);
	if (!d->reason[0])
		snprintf(d->reason, sizeof(d->reason), "%s",
			 allowed(d) ? "allowed" : "denied");
}

/* A new flow's final decision: counted, and logged when denied. */
void proxy__settle(struct proxy *p, const struct net_flow *f,
		   const struct net_decision *d, const char *detail)
{
	proxy__count_flow(p, f, d);
	if (!allowed(d))
		proxy__log_flow(p, "denied", f, d->reason, detail);
}

/* A new flow: asked, and settled unless the hook is to be asked. */
void proxy__decide(struct proxy *p, const struct net_flow *f,
		   struct net_decision *d)
{
	proxy__ask_policy(p, f, d);
	if (d->verdict != NET_VERDICT_ASK)
		proxy__settle(p, f, d, "");
}

/*
 * Puts a new flow to the policy's hook (d: NET_VERDICT_ASK), its answer
 * to come through hook_answered() with cookie, the flow. False when it
 * could not be asked: d is then denied, saying why, and settled.
 */
bool proxy__hook_ask(struct proxy *p, const struct net_flow *f,
		     struct net_decision *d, void *cookie, uint64_t *id)
{
	int ret;

	ret = hook__ask(p->hook, f, &d->ask, cookie, now_ms(), id);
	proxy__hook_copy_stats(p);
	if (!ret)
		return true;
	deny(d, hook__failure(ret));
	proxy__settle(p, f, d, ret == -EBUSY ? "" : strerror(-ret));
	return false;
}

/*
 * A recheck of a flow the hook granted under generation gen (0: it was
 * a rule's grant): it is kept while the policy would still put it to
 * the same hook socket. *why: the cut's reason otherwise.
 */
bool proxy__hook_still_grants(struct proxy *p, uint64_t gen,
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

/* ---- the hook --------------------------------------------------------------- */

/*
 * A question's answer; its cookie is the held flow, TCP or UDP. A
 * "grant-http" the proxy cannot carry out is denied.
 */
static void hook_answered(void *opaque, void *cookie,
			  const struct net_decision *answer, const char *detail)
{
	struct proxy *p = opaque;
	uintptr_t c = (uintptr_t)cookie, tcp = (uintptr_t)p->tcp;
	bool is_tcp =
		c >= tcp && c < tcp + p->p.max_tcp_flows * sizeof(*p->tcp);
	struct net_decision d = *answer;
	uint64_t gen;

	proxy__http_usable(p,
			   is_tcp ? &((struct tcp_flow *)cookie)->flow :
				    &(struct net_flow){ .proto = IPPROTO_UDP },
			   &d);
	gen = allowed(&d) ? hook__generation(p->hook) : 0;
	proxy__hook_copy_stats(p);
	if (is_tcp)
		proxy_tcp__settled(p, cookie, &d, detail, gen);
	else
		proxy_udp__settled(p, cookie, &d, detail, gen);
}

/*
 * Until the sweep, or sooner the hook's nearest deadline, or a kernel-
 * relayed flow's FIN that waits for its bytes.
 */
static int loop_timeout(struct proxy *p)
{
	int ms = hook__timeout(p->hook, now_ms());

	if (p->fin_pending && (ms < 0 || ms > PROXY_FIN_RETRY_MS))
		ms = PROXY_FIN_RETRY_MS;
	if (p->nr_batched) {
		uint64_t now = now_ms();
		int due = p->batch_due_ms > now ? (int)(p->batch_due_ms - now) :
						  0;

		if (ms < 0 || ms > due)
			ms = due;
	}
	return ms >= 0 && ms < PROXY_SWEEP_MS ? ms : PROXY_SWEEP_MS;
}

/* ---- the flow tables ------------------------------------------------------ */

struct tcp_flow *proxy__tcp_fresh(struct proxy *p)
{
	struct tcp_flow *t;

	if (p->tcp_fresh == p->p.max_tcp_flows)
		return NULL;
	t = &p->tcp[p->tcp_fresh++];
	for (int s = 0; s < NR_SIDES; s++)
		t->ep[s].fd = -1;
	pthread_mutex_lock(&p->stats_lock);
	p->stats.tcp_slots = p->tcp_fresh;
	pthread_mutex_unlock(&p->stats_lock);
	return t;
}

struct udp_flow *proxy__udp_fresh(struct proxy *p)
{
	struct udp_flow *u;

	if (p->udp_fresh == p->p.max_udp_flows)
		return NULL;
	u = &p->udp[p->udp_fresh++];
	*u = (struct udp_flow){ .up.fd = -1, .reply_fd = -1 };
	pthread_mutex_lock(&p->stats_lock);
	p->stats.udp_slots = p->udp_fresh;
	pthread_mutex_unlock(&p->stats_lock);
	return u;
}

/* ---- recheck --------------------------------------------------------------- */

/*
 * A held flow: still waiting when the policy would put it to the same
 * hook socket (its question stays); else the question is cancelled and
 * the caller settles it by d, now a rule's verdict or "hook changed".
 */
bool proxy__recheck_held(struct proxy *p, uint64_t id, struct net_decision *d)
{
	if (d->verdict == NET_VERDICT_ASK) {
		if (hook__is_target(p->hook, d->ask.socket))
			return true;
		deny(d, HOOK_CHANGED);
	}
	hook__cancel(p->hook, id);
	return false;
}

static void recheck_all(struct proxy *p)
{
	uint64_t n;

	/* Wakes that came meanwhile are served by this one pass. */
	if (read(p->recheck_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		pr_debug("%s: recheck eventfd: %s", PROXY_NAME,
			 strerror(errno));
	for (unsigned int i = 0; i < p->tcp_fresh; i++)
		if (p->tcp[i].used)
			proxy_tcp__recheck(p, &p->tcp[i]);
	for (unsigned int i = 0; i < p->udp_fresh; i++)
		if (p->udp[i].used)
			proxy_udp__recheck(p, &p->udp[i]);
}

void proxy__recheck(struct proxy *p)
{
	worker__wake(p->recheck_fd, PROXY_NAME, "recheck");
}

/* ---- the proxy thread -------------------------------------------------------- */

/*
 * The host's addresses changed: applied (new flows and rechecks see
 * them). A socket error is logged once; the set keeps what it has.
 */
static void host_addrs_changed(struct proxy *p)
{
	int ret = net_host_addrs__read(p->host_addrs_owned);

	if (ret && !p->host_addrs_failed)
		pr_err("%s: host addresses: %s; the set stays as it is",
		       PROXY_NAME, strerror(-ret));
	p->host_addrs_failed |= ret != 0;
}

static int proxy_loop(struct proxy *p)
{
	struct epoll_event evs[PROXY_EPOLL_EVENTS];
	uint64_t now, last_sweep = now_ms();
	bool accept_ready, udp_ready, recheck, hook_ready;
	int n;

	for (;;) {
		n = net_endpoints__wait(&p->eps, evs, PROXY_EPOLL_EVENTS,
					loop_timeout(p));
		if (n < 0)
			return n;
		now = now_ms();
		accept_ready = udp_ready = recheck = hook_ready = false;
		/*
		 * Flows close in this batch but none opens: a later event
		 * never meets another flow in a slot it had.
		 */
		for (int i = 0; i < n; i++) {
			struct net_endpoint *e = evs[i].data.ptr;

			if (e->fd < 0)
				continue; /* its flow closed in this batch */
			switch ((enum ep_kind)e->kind) {
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
				proxy_tcp__event(p, e->owner,
						 e->kind == EP_TCP_GUEST ?
							 SIDE_GUEST :
							 SIDE_UP,
						 evs[i].events);
				break;
			case EP_UDP_UP:
				proxy_udp__from_upstream(p, e->owner, now);
				break;
			case EP_HOOK:
				hook_ready = true;
				break;
			case EP_HOSTADDR:
				host_addrs_changed(p);
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
		proxy_tcp__answers_apply(p);
		proxy_tcp__fin_retry(p);
		proxy_tcp__batch_due(p, now);
		if (accept_ready)
			proxy_tcp__accept(p);
		if (udp_ready)
			proxy_udp__from_guest(p, now);
		if (now - last_sweep >= PROXY_SWEEP_MS) {
			proxy_udp__sweep(p, now);
			proxy_tcp__sweep(p, now);
			last_sweep = now;
		}
		proxy__hook_copy_stats(p);
	}
}

/* Fail closed: the sockets go, and with them the program's slots. */
static void close_all(struct proxy *p)
{
	for (unsigned int i = 0; i < p->tcp_fresh; i++)
		if (p->tcp[i].used)
			proxy_tcp__close(p, &p->tcp[i], true);
	for (unsigned int i = 0; i < p->udp_fresh; i++)
		if (p->udp[i].used)
			proxy_udp__close(p, &p->udp[i]);
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

	/*
	 * Untouched until flows use them (proxy__tcp_fresh, udp_fresh) and
	 * the first datagram comes.
	 */
	p->tcp = resident__table(p->p.max_tcp_flows, sizeof(*p->tcp));
	p->udp = resident__table(p->p.max_udp_flows, sizeof(*p->udp));
	p->dgram = resident__table(1, PROXY_DGRAM_MAX);
	if (!p->tcp || !p->udp || !p->dgram)
		return errf(err, errlen, -ENOMEM, "%s: out of memory",
			    PROXY_NAME);
	ret = hook__create(
		&p->hook,
		&(struct hook_params){ .answer = hook_answered,
				       .http_answer = proxy_tcp__http_answered,
				       .opaque = p,
				       .max_pending = p->p.max_hook_pending });
	if (ret)
		return errf(err, errlen, ret, "%s: the hook: %s", PROXY_NAME,
			    strerror(-ret));
	/* In the vmm's own netns, where the flows are re-originated. */
	p->host_addrs = p->p.host_addrs;
	if (!p->host_addrs) {
		ret = net_host_addrs__create(&p->host_addrs_owned, err, errlen);
		if (ret)
			return ret;
		p->host_addrs = p->host_addrs_owned;
	}
	ret = net_endpoints__open(&p->eps, EP_STOP);
	if (ret)
		return errf(err, errlen, ret, "%s: %s", PROXY_NAME,
			    strerror(-ret));
	p->recheck_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->recheck_fd < 0)
		return errf(err, errlen, -errno, "%s: %s", PROXY_NAME,
			    strerror(errno));
	return 0;
}

const char *proxy__relay_name(enum proxy_relay r)
{
	switch (r) {
	case PROXY_RELAY_SPLICE:
		return "splice";
	case PROXY_RELAY_AUTO:
		return "auto";
	case PROXY_RELAY_KERNEL:
		return "kernel";
	case PROXY_RELAY_SPLIT:
		return "split";
	}
	return "?";
}

/*
 * The kernel relay's program, unless splice was asked for; when it
 * cannot load, splice, saying why once (an error if the kernel or split
 * relay was asked for by name). Auto is split.
 */
static int relay_load(struct proxy *p, char *err, size_t errlen)
{
	char why[PROXY_RELAY_ERR_LEN] = "";
	enum proxy_relay want = p->p.relay;
	int ret;

	p->stats.relay_mode = PROXY_RELAY_SPLICE;
	if (want == PROXY_RELAY_SPLICE)
		return 0;
	ret = relay_prog__create(&p->relay, p->p.max_tcp_flows, why,
				 sizeof(why));
	if (ret && want != PROXY_RELAY_AUTO)
		return errf(err, errlen, ret, "%s: %s", PROXY_NAME, why);
	if (ret) {
		pr_warn("%s: %s; granted tcp flows relayed by splice",
			PROXY_NAME, why);
		snprintf(p->stats.relay_error, sizeof(p->stats.relay_error),
			 "%s", why);
		return 0;
	}
	p->stats.relay_mode = want == PROXY_RELAY_KERNEL ? PROXY_RELAY_KERNEL :
							   PROXY_RELAY_SPLIT;
	p->relay_ways = want == PROXY_RELAY_KERNEL ? RELAY_BOTH : RELAY_A_TO_B;
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
	proxy_tcp__init_intercept(p);
	snprintf(p->ifname, sizeof(p->ifname), "%s", params->ifname);
	p->p.ifname = p->ifname;
	p->lsn_fd = p->udp_fd = p->recheck_fd = -1;
	net_endpoints__init(&p->eps, PROXY_NAME);
	pthread_mutex_init(&p->ns_ask_lock, NULL);
	pthread_mutex_init(&p->ns_lock, NULL);
	pthread_cond_init(&p->ns_cv, NULL);
	pthread_mutex_init(&p->stats_lock, NULL);
	ret = proxy_alloc(p, err, errlen);
	if (!ret)
		ret = relay_load(p, err, errlen);
	if (ret)
		goto out_destroy;

	ret = proxy_ns__start(p, err, errlen);
	if (ret)
		goto out_destroy;

	ret = net_endpoints__add(&p->eps, &p->ep_recheck, EP_RECHECK,
				 p->recheck_fd, NULL, EPOLLIN);
	if (!ret)
		ret = net_endpoints__add(&p->eps, &p->ep_lsn, EP_LISTEN,
					 p->lsn_fd, NULL, EPOLLIN);
	if (!ret)
		ret = net_endpoints__add(&p->eps, &p->ep_udp, EP_UDP, p->udp_fd,
					 NULL, EPOLLIN);
	if (!ret)
		ret = net_endpoints__add(&p->eps, &p->ep_hook, EP_HOOK,
					 hook__fd(p->hook), NULL, EPOLLIN);
	if (!ret && p->host_addrs_owned)
		ret = net_endpoints__add(
			&p->eps, &p->ep_hostaddr, EP_HOSTADDR,
			net_host_addrs__fd(p->host_addrs_owned), NULL, EPOLLIN);
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
	ret = net_endpoints__start(&p->eps, filter, proxy_thread, p);
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
	net_endpoints__exit(&p->eps);
	close_all(p);
	proxy_ns__stop(p);
	if (p->recheck_fd >= 0)
		close(p->recheck_fd);
	hook__destroy(p->hook); /* after close_all cancelled its questions */
	relay_prog__destroy(p->relay); /* its sockets are closed */
	net_host_addrs__destroy(p->host_addrs_owned); /* ep_hostaddr's fd */
	resident__free_table(p->tcp, p->p.max_tcp_flows, sizeof(*p->tcp));
	resident__free_table(p->udp, p->p.max_udp_flows, sizeof(*p->udp));
	resident__free_table(p->dgram, 1, PROXY_DGRAM_MAX);
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
		"refused %llu; relay %s, open tcp kernel %llu splice %llu "
		"(directions batched %llu, %llu times)",
		PROXY_NAME, (unsigned long long)s.tcp_intercepted,
		(unsigned long long)s.http_allowed,
		(unsigned long long)s.http_refused,
		proxy__relay_name(s.relay_mode),
		(unsigned long long)s.tcp_kernel,
		(unsigned long long)s.tcp_splice,
		(unsigned long long)s.relay_batched,
		(unsigned long long)s.relay_batches);
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
