/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_PROXY_INTERNAL_H
#define KILN_PROXY_INTERNAL_H

#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "net/endpoint.h"
#include "net/hook.h"
#include "net/hostaddr.h"
#include "net/intercept.h"
#include "net/krelay.h"
#include "net/nsthread.h"
#include "net/proxy.h"

/*
 * Between the egress proxy's files (callers see net/proxy.h only):
 *
 *	proxy.c      the proxy thread's loop, create/start/destroy, the
 *	             decisions (policy, hook, recheck), counters and log
 *	proxy-tcp.c  TCP flows: the splice relay and the HTTP interception
 *	proxy-udp.c  UDP flows: the datagram relay
 *	proxy-ns.c   the netns thread and its requests
 *
 * Everything here is the proxy thread's unless it says otherwise.
 */

#define PROXY_BACKLOG	     4096	  /* SYN cookies drop: keep them rare */
#define PROXY_RELAY_BUF	     (64U * 1024) /* bytes, per direction of a flow */
#define PROXY_RELAY_PIPE_MAX (256U * 1024) /* a bulk flow's pipe grows to */
#define PROXY_RELAY_LOWAT    (64U * 1024)  /* a fast guest's bytes wake it at */
#define PROXY_RELAY_BATCH_MS 5		   /* and after this at the latest */
#define PROXY_DGRAM_MAX	     65535U	   /* one UDP datagram */
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
/*
 * A kernel-relayed flow's FIN waits for the bytes before it to leave the
 * other side: looked at again this soon.
 */
#define PROXY_FIN_RETRY_MS 1

/* What a struct net_endpoint of the proxy's epoll set is. */
enum ep_kind {
	EP_STOP,
	EP_RECHECK,
	EP_LISTEN,
	EP_UDP,
	EP_TCP_GUEST,
	EP_TCP_UP,
	EP_UDP_UP,
	EP_HOOK,
	EP_HOSTADDR,
};

enum { SIDE_GUEST, SIDE_UP, NR_SIDES };

_Static_assert(SIDE_GUEST == (int)INTERCEPT_GUEST &&
		       SIDE_UP == (int)INTERCEPT_UP,
	       "an intercepted flow's sides are the proxy's");
_Static_assert(SIDE_GUEST == (int)KRELAY_A && SIDE_UP == (int)KRELAY_B,
	       "a kernel-relayed flow's sides are the proxy's");

/*
 * One direction of a relayed flow: what was read from one side and not
 * yet written to the other. Through a pipe when one could be had
 * (splice(): the bytes stay in the kernel, no copy through user space),
 * else through buf.
 */
/*
 * A bulk flow's relay pipe grows to PROXY_RELAY_PIPE_MAX once
 * (F_SETPIPE_SZ): a bulk flow then moves four times as much per wake-up
 * of the proxy thread (benchmarks.md, "Network benchmark", the eighth
 * run), while other flows keep PROXY_RELAY_BUF and the user's pipe
 * pages (pipe-user-pages-soft) go to the flows that use them.
 */
/*
 * The guest's direction reads in batches when it is fast: one that read
 * PROXY_RELAY_LOWAT bytes or more within PROXY_RELAY_BATCH_MS gets
 * SO_RCVLOWAT at PROXY_RELAY_LOWAT, so the proxy thread wakes for that
 * much rather than for every segment the guest sends (a 64 KiB segment
 * still wakes it; so do a FIN, an error and a receive window about to
 * close: tcp_poll()). Bytes under the mark are read PROXY_RELAY_BATCH_MS
 * after the last read at the latest: the direction then goes back to
 * waking for every byte (SO_RCVLOWAT 1, which wakes the reader for what
 * waits), until it is fast again. So a request-response flow is never
 * batched, and a bulk flow's last bytes wait at most
 * PROXY_RELAY_BATCH_MS more. Upstream's direction is not batched: its
 * segments come from the host's stack already 64 KiB large, and batching
 * it measured slower (Documentation/network.md, "Batched reads").
 */
struct relay_dir {
	bool piped;   /* pipe[] holds len bytes (off unused), else buf */
	int pipe[2];  /* piped: read end, write end */
	bool full;    /* piped: the last splice in found no room */
	bool grown;   /* piped: cap is as large as it gets */
	uint8_t *buf; /* PROXY_RELAY_BUF */
	size_t cap;   /* what pipe[] or buf holds at most */
	size_t off, len;
	bool eof;	    /* the reading side said FIN */
	bool shut;	    /* and the other side was told (SHUT_WR) */
	bool batched;	    /* piped: SO_RCVLOWAT is PROXY_RELAY_LOWAT */
	uint64_t window_ms; /* piped: when win_bytes started counting */
	size_t win_bytes;   /* read since window_ms */
	uint64_t read_ms;   /* batched: the last read */
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
	struct net_endpoint ep[NR_SIDES];
	struct relay_dir dir[NR_SIDES]; /* dir[s]: read from side s */
	/*
	 * Relayed by the kernel (no dir[] then): from upstream's connect
	 * on (kernel_on), its bytes so far counted in the stats.
	 */
	bool kernel, kernel_on;
	bool splice_on; /* relayed through pipes or buffers: counted */
	struct krelay_flow k;
	uint64_t k_counted[NR_SIDES];
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
	struct net_endpoint up; /* host netns, connected to dst */
	int reply_fd;		/* VM netns, bound to dst, connected to src */
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
	int lsn_fd, udp_fd;
	int recheck_fd; /* eventfd: proxy__recheck wakes the proxy thread */
	struct net_endpoints eps; /* the proxy thread's epoll set */
	struct net_endpoint ep_recheck, ep_lsn, ep_udp, ep_hook;
	struct hook *hook; /* the proxy thread's, in its epoll set */
	/*
	 * The host's own addresses (always denied): the params' set, or
	 * host_addrs_owned, kept current here.
	 */
	const struct net_host_addrs *host_addrs;
	struct net_host_addrs *host_addrs_owned;
	struct net_endpoint ep_hostaddr; /* its fd is host_addrs's */
	bool host_addrs_failed;		 /* its socket failed: logged */
	struct intercept_ops icpt_ops;	 /* every intercepted flow's */
	bool icpt_answers; /* the hook answered an intercepted flow's request */
	struct bytebudget icpt_budget; /* INTERCEPT_VM_BUDGET, all flows' */

	/*
	 * The netns thread and its one request at a time, under ns_lock;
	 * ns_ask_lock is held by the asker (the proxy thread, or whoever
	 * reads the counters) from setting the request up to taking its
	 * answer.
	 */
	struct nsthread ns;
	pthread_mutex_t ns_ask_lock;
	pthread_mutex_t ns_lock;
	pthread_cond_t ns_cv;
	enum ns_request ns_req;
	bool ns_done;
	int ns_ret, ns_fd; /* ns_ret: its set-up's (0: it serves) */
	struct sockaddr_in ns_bind, ns_peer;
	uint64_t *ns_counts; /* NS_COUNTERS: EGRESS_NR_REASONS of them */
	int ns_counts_ret;
	int (*ns_fn)(void *arg); /* NS_CALL: ns_fn(ns_arg), unfiltered */
	void *ns_arg;
	int ns_call_ret;
	char *ns_err;
	size_t ns_errlen;
	struct egress *egress; /* the netns thread's */

	struct relay_prog *relay; /* NULL: every flow through splice */
	/* The ways it relays: RELAY_A_TO_B (split) is the guest's only. */
	enum relay_ways relay_ways;
	/* Kernel-relayed flows wait to send a FIN on (PROXY_FIN_RETRY_MS). */
	bool fin_pending;
	/*
	 * Relay directions reading in batches, and the earliest time one of
	 * them may be due (its last read + PROXY_RELAY_BATCH_MS, or before).
	 */
	unsigned int nr_batched;
	uint64_t batch_due_ms;

	/*
	 * The flow tables (resident__table): entries from tcp_fresh and
	 * udp_fresh on were never used, never touched, so the pages are
	 * resident only as deep as the guest's flows ever went; every walk
	 * stops there.
	 */
	struct tcp_flow *tcp; /* max_tcp_flows */
	struct udp_flow *udp; /* max_udp_flows */
	unsigned int tcp_fresh, udp_fresh;
	uint8_t *dgram; /* PROXY_DGRAM_MAX */

	uint64_t log_window_ms;
	unsigned int log_lines;
	uint64_t log_suppressed;

	pthread_mutex_t stats_lock;
	struct proxy_stats stats;
};

static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void count_add(struct proxy *p, uint64_t *what, uint64_t n)
{
	pthread_mutex_lock(&p->stats_lock);
	*what += n;
	pthread_mutex_unlock(&p->stats_lock);
}

static inline void count_sub(struct proxy *p, uint64_t *what)
{
	pthread_mutex_lock(&p->stats_lock);
	*what -= 1;
	pthread_mutex_unlock(&p->stats_lock);
}

static inline bool allowed(const struct net_decision *d)
{
	return d->verdict == NET_VERDICT_ALLOW ||
	       d->verdict == NET_VERDICT_HTTP;
}

static inline void deny(struct net_decision *d, const char *reason)
{
	d->verdict = NET_VERDICT_DENY;
	snprintf(d->reason, sizeof(d->reason), "%s", reason);
}

/* proxy.c: counters, the log, decisions */
void proxy__count_reason(struct proxy_reason_count *tbl, unsigned int *nr,
			 uint8_t proto, enum net_verdict verdict,
			 const char *reason);
void proxy__count_flow(struct proxy *p, const struct net_flow *f,
		       const struct net_decision *d);
void proxy__hook_copy_stats(struct proxy *p);
void proxy__log_flow(struct proxy *p, const char *what,
		     const struct net_flow *f, const char *reason,
		     const char *detail);
void proxy__http_usable(struct proxy *p, const struct net_flow *f,
			struct net_decision *d);
/* Whether addr (network byte order) is the host's own now. */
bool proxy__host_addr(const struct proxy *p, uint32_t addr);
void proxy__ask_policy(struct proxy *p, const struct net_flow *f,
		       struct net_decision *d);
void proxy__settle(struct proxy *p, const struct net_flow *f,
		   const struct net_decision *d, const char *detail);
void proxy__decide(struct proxy *p, const struct net_flow *f,
		   struct net_decision *d);
bool proxy__hook_ask(struct proxy *p, const struct net_flow *f,
		     struct net_decision *d, void *cookie, uint64_t *id);
bool proxy__hook_still_grants(struct proxy *p, uint64_t gen,
			      const struct net_decision *d, const char **why);
bool proxy__recheck_held(struct proxy *p, uint64_t id, struct net_decision *d);

/*
 * The next never-used entry of a flow table, made like a closed one (its
 * sockets -1), the counters told; NULL: the table is full.
 */
struct tcp_flow *proxy__tcp_fresh(struct proxy *p);
struct udp_flow *proxy__udp_fresh(struct proxy *p);

/* proxy-tcp.c */
void proxy_tcp__init_intercept(struct proxy *p);
void proxy_tcp__accept(struct proxy *p);
void proxy_tcp__event(struct proxy *p, struct tcp_flow *t, int s,
		      uint32_t events);
void proxy_tcp__settled(struct proxy *p, struct tcp_flow *t,
			const struct net_decision *d, const char *detail,
			uint64_t hook_gen);
void proxy_tcp__http_answered(void *opaque, void *cookie, uint64_t id,
			      const struct net_http_decision *d,
			      const char *detail);
void proxy_tcp__answers_apply(struct proxy *p);
void proxy_tcp__recheck(struct proxy *p, struct tcp_flow *t);
void proxy_tcp__sweep(struct proxy *p, uint64_t now);
/* The kernel-relayed flows' FINs that wait: sent on if they can be. */
void proxy_tcp__fin_retry(struct proxy *p);
/*
 * The batched relay directions whose last read was PROXY_RELAY_BATCH_MS
 * ago or more: back to waking for every byte (what they hold is read on
 * the next wait).
 */
void proxy_tcp__batch_due(struct proxy *p, uint64_t now);
void proxy_tcp__close(struct proxy *p, struct tcp_flow *t, bool reset);

/* proxy-udp.c */
void proxy_udp__from_guest(struct proxy *p, uint64_t now);
void proxy_udp__from_upstream(struct proxy *p, struct udp_flow *u,
			      uint64_t now);
void proxy_udp__settled(struct proxy *p, struct udp_flow *u,
			const struct net_decision *d, const char *detail,
			uint64_t hook_gen);
void proxy_udp__recheck(struct proxy *p, struct udp_flow *u);
void proxy_udp__sweep(struct proxy *p, uint64_t now);
void proxy_udp__close(struct proxy *p, struct udp_flow *u);

/* proxy-ns.c */
/*
 * The netns thread started and its set-up done (the sockets, the program
 * attached): 0, or -errno with "what: why" in err.
 */
int proxy_ns__start(struct proxy *p, char *err, size_t errlen);
/* Tells it to detach the program and end, and joins it. */
void proxy_ns__stop(struct proxy *p);
/* A UDP flow's reply socket, made there: its fd or -errno. */
int proxy_ns__reply_socket(struct proxy *p, const struct sockaddr_in *from,
			   const struct sockaddr_in *to);

#endif
