/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_PROXY_H
#define KILN_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/filter.h>

#include "ebpf/loader.h"
#include "lib/compiler.h"
#include "net/flow.h"
#include "net/hook.h"
#include "net/intercept.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * The vmm's egress proxy for one VM (Documentation/network.md, "The
 * proxy"): transparent TCP and UDP sockets in the VM netns that the
 * egress program on the tap hands every guest flow to, a decision per
 * new flow, and the allowed ones re-originated from the vmm's own (host)
 * netns and relayed.
 *
 *	ret = proxy__create(&p, &params, err, sizeof(err));  before seccomp
 *	ret = proxy__start(p, filter);  its thread, under its seccomp filter
 *	proxy__stats(p, &stats);       from any thread
 *	proxy__recheck(p);             from any thread, after the decide
 *	                               function's answers changed
 *	proxy__destroy(p);             after the tap's device is gone
 *
 * Two threads: "the netns thread", which enters the VM netns at create
 * and stays there (it makes the listener, the UDP socket, loads and
 * attaches the program, then makes the UDP reply sockets on request and
 * finally detaches the program), and the proxy thread, an epoll loop in
 * the caller's netns that accepts, decides, connects upstream and relays.
 * A flow decide answers NET_VERDICT_ASK is held while the proxy thread
 * puts it to the policy's hook (net/hook.h) from the same loop; one it
 * answers NET_VERDICT_HTTP is intercepted (net/intercept.h), its
 * requests decided by decide_http.
 */

#define PROXY_TCP_PORT	    15001U /* the listener's, in the VM netns */
#define PROXY_UDP_PORT	    15002U /* the UDP socket's */
#define PROXY_MAX_TCP_FLOWS 1024U
#define PROXY_MAX_UDP_FLOWS 256U
/*
 * Descriptors the proxy may hold at most: per TCP flow its two sockets
 * and, relayed, a pipe each way; per UDP flow two sockets; the hook's
 * connection; the host addresses' netlink socket.
 */
#define PROXY_MAX_FDS	  (6U * PROXY_MAX_TCP_FLOWS + 2U * PROXY_MAX_UDP_FLOWS + 2U)
#define PROXY_REASONS_MAX 16U /* distinct reasons counted; more: "other" */
#define PROXY_REASON_LEN  64U /* sizeof(struct net_decision.reason) */

struct net_host_addrs; /* net/hostaddr.h */

/*
 * How a granted TCP flow that is not intercepted is relayed
 * (Documentation/network.md, "The kernel relay"): by the proxy thread
 * (splice() through a pipe each way), by the kernel (a sockmap program:
 * its bytes never wake the proxy), or split: the guest's bytes by the
 * kernel, upstream's by splice (each direction by the one that moves it
 * faster in the one-CPU harness, Documentation/benchmarks.md). Auto:
 * split when the program loads, else splice, saying why.
 */
enum proxy_relay {
	PROXY_RELAY_SPLICE,
	PROXY_RELAY_AUTO,
	PROXY_RELAY_KERNEL, /* proxy__create fails if it cannot load */
	PROXY_RELAY_SPLIT,  /* likewise */
};

#define PROXY_RELAY_ERR_LEN 160U /* why the kernel relay is not loaded */

struct proxy_params {
	int netns_fd;	    /* the VM netns; borrowed */
	const char *ifname; /* the tap, in that netns */
	struct egress_config egress;
	net_decide_fn decide; /* called on the proxy thread, per new flow */
	/*
	 * Each request of a flow decide answered NET_VERDICT_HTTP (the
	 * proxy intercepts it, net/intercept.h), with decide_opaque; NULL:
	 * such flows are denied ("http interception unavailable").
	 */
	net_decide_http_fn decide_http;
	void *decide_opaque;
	/*
	 * For decide_http's flows on TLS ports (net/intercept.h), borrowed:
	 * they outlive the proxy. All NULL: such flows are denied ("http
	 * tls unavailable").
	 */
	struct intercept_tls tls;
	/* 0: the defaults above (tests make them small). */
	unsigned int max_tcp_flows, max_udp_flows;
	unsigned int max_hook_pending; /* 0: HOOK_MAX_PENDING */
	unsigned int udp_idle_ms;      /* 0: 60 s */
	/*
	 * An intercepted TLS flow's setup (its ClientHello, upstream's
	 * connection and handshake, the guest's handshake), at most; past
	 * it the flow is reset (looked at once a second). 0: 10 s.
	 */
	unsigned int tls_setup_ms;
	/*
	 * An intercepted request's upstream may stay silent this long while
	 * it owes the response, then the guest gets a 504 (intercept.h,
	 * intercept__sweep(); looked at once a second); an http grant's
	 * "responseTimeoutMs" wins. 0: INTERCEPT_RESPONSE_MS.
	 */
	unsigned int http_response_ms;
	uint16_t tcp_port, udp_port; /* 0: PROXY_TCP_PORT, PROXY_UDP_PORT */
	enum proxy_relay relay;
	/*
	 * The host's own addresses (net/hostaddr.h), denied unless a grant
	 * names one: NULL, read from the netns proxy__create runs in and
	 * kept current; else this set, borrowed, as it is (tests, whose
	 * upstreams on that netns's lo stand in for the internet).
	 */
	const struct net_host_addrs *host_addrs;
};

struct proxy_reason_count {
	char reason[PROXY_REASON_LEN];
	uint8_t proto; /* IPPROTO_TCP, IPPROTO_UDP */
	enum net_verdict verdict;
	uint64_t flows; /* in http_reasons: requests */
};

struct proxy_stats {
	uint64_t tcp_allowed, tcp_denied; /* flows, since create */
	uint64_t udp_allowed, udp_denied;
	uint64_t tcp_open, udp_open; /* flows now */
	/*
	 * Entries of the flow tables ever used: the tables' pages are
	 * resident this deep, no deeper (at most max_tcp_flows, udp).
	 */
	unsigned int tcp_slots, udp_slots;
	uint64_t bytes_out, bytes_in; /* guest to upstream, and back */
	uint64_t upstream_failed;     /* allowed, but the connect failed */
	uint64_t udp_dropped;	      /* datagrams not sent (full, errors) */
	uint64_t tcp_cut, udp_cut;    /* open flows a recheck denied */
	uint64_t tcp_intercepted;     /* of tcp_allowed: an http grant's */
	uint64_t http_allowed, http_refused; /* their requests */
	struct hook_stats hook;		     /* the policy hook's questions */
	bool running;			     /* the proxy thread's loop */
	/*
	 * How new flows are relayed: splice, kernel or split, never auto
	 * (splice: relay_error says why the program did not load, "" when
	 * splice was asked for), and the open relayed flows by relay (a
	 * split flow is the kernel's).
	 */
	enum proxy_relay relay_mode;
	char relay_error[PROXY_RELAY_ERR_LEN];
	uint64_t tcp_kernel, tcp_splice;
	/*
	 * Of tcp_splice's flows, those whose guest's direction reads in
	 * batches now, and how many times one began to (proxy-internal.h,
	 * struct relay_dir).
	 */
	uint64_t relay_batched, relay_batches;
	unsigned int nr_reasons;
	struct proxy_reason_count reasons[PROXY_REASONS_MAX];
	/* Requests by verdict (allowed, denied) and reason, the same way. */
	unsigned int nr_http_reasons;
	struct proxy_reason_count http_reasons[PROXY_REASONS_MAX];
};

struct proxy;

/*
 * Makes the sockets in the VM netns, loads the egress program, fills
 * both of its slots and attaches it to ifname's ingress. 0, or -errno
 * with "what: why" in err; nothing is left behind on failure.
 */
int __must_check proxy__create(struct proxy **out, const struct proxy_params *p,
			       char *err, size_t errlen);
/* Starts the proxy thread. */
int __must_check proxy__start(struct proxy *p, const struct sock_fprog *filter);
/*
 * Stops the proxy thread, closes every socket (the program's slots empty
 * themselves: nothing more leaves), detaches and frees the program.
 * NULL and a half-built proxy are fine.
 */
void proxy__destroy(struct proxy *p);

/* A copy of the counters, from any thread. */
void proxy__stats(struct proxy *p, struct proxy_stats *s);
/*
 * Has the proxy thread ask decide again about every open flow, as soon
 * as it wakes (it is woken here): an allowed flow now denied is cut (TCP:
 * both sides reset; UDP: its sockets closed, later datagrams dropped),
 * counted in tcp_cut / udp_cut and logged like a denied flow. A UDP flow
 * that was denied is forgotten, so its next datagram is decided anew.
 * NET_VERDICT_ASK keeps a flow only if the hook granted it and decide
 * names the same hook socket (else: cut, "hook changed" or decide's
 * reason); a held flow keeps waiting for the same socket's answer, and
 * is otherwise settled now by decide's verdict ("hook changed" for
 * another socket). Call it after whatever decide reads has changed.
 */
void proxy__recheck(struct proxy *p);

/*
 * The egress program's frame counters (ebpf/loader.h), read by the
 * netns thread that owns the program. 0, or -errno with "what: why" in
 * err. From any thread between create and destroy.
 */
int __must_check proxy__egress_counters(struct proxy *p,
					uint64_t counts[EGRESS_NR_REASONS],
					char *err, size_t errlen);

/*
 * fn(arg) on the netns thread (in the VM's netns; under its own filter
 * once proxy__filter_ns_thread installed one), the caller waiting: its
 * return. From any thread between create and destroy, one call at a
 * time (the jail's capability hand-over, the interception's TLS set-up).
 */
int proxy__on_ns_thread(struct proxy *p, int (*fn)(void *arg), void *arg);

/*
 * The egress program, for a fn proxy__on_ns_thread() runs only (its maps
 * take bpf(), which the netns thread may use: net/synmap.h).
 */
struct egress *proxy__egress(struct proxy *p);

/*
 * The netns thread's seccomp program (lib/thread-filter.h), installed on
 * that thread for the rest of its life: once, after the jail's hand-over
 * and before the proxy's thread starts. NULL: none. 0 or -errno.
 */
int __must_check proxy__filter_ns_thread(struct proxy *p,
					 const struct sock_fprog *prog);

/* "allowed", "intercepted" (NET_VERDICT_HTTP) or "denied". */
const char *proxy__verdict_name(enum net_verdict v);
/* "splice", "auto", "kernel", "split" (netcfg__relays' names). */
const char *proxy__relay_name(enum proxy_relay r);

/* One line for the SIGUSR2 report. */
void proxy__report(struct proxy *p);

#endif
