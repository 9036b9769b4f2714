/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_INTERCEPT_H
#define KILN_VMM_INTERCEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/bytequeue.h"
#include "lib/compiler.h"
#include "net/flow.h"
#include "net/hook.h"
#include "net/tls.h"

/*
 * HTTP interception of one guest TCP flow that a policy's http grant
 * covers (Documentation/network.md, "HTTP grants and interception"):
 * what the guest sends goes through the HTTP/1.1 rewriter (net/http1.h),
 * each request decided by ops->decide (the policy as it is then) and
 * forwarded with the grant's header fields set; what upstream sends comes
 * back unchanged. A refused request gets an error response and the
 * connection ends; bytes that are not HTTP are refused the same way
 * (400): nothing of them goes upstream. On a TLS port both sides are TLS
 * (net/tls.h): the guest's SNI is decided as a request's name is before
 * any certificate is minted for it, requests must name that host, and
 * upstream's certificate must be for it (else 502). A TLS guest that
 * chooses h2 by ALPN goes through net/h2.h instead, stream by stream;
 * it is offered h2 only when upstream chose h2.
 *
 * It owns no socket: the proxy owns both, connects upstream when asked
 * (plain: not before the first request is allowed, so a flow that is
 * refused, or never speaks HTTP, never reaches upstream; TLS: once the
 * ClientHello's SNI is allowed, before the guest's handshake, so that
 * the guest is offered only the protocol upstream chose) and calls it
 * from its epoll loop. Nonblocking throughout; a buffer of INTERCEPT_BUF per direction,
 * a side read only while the other can take what it gives.
 *
 *	ret = intercept__create(&ic, &params);
 *	ret = intercept__run(ic, side, events);   each readiness of a side:
 *	                                  0, INTERCEPT_DONE or -errno
 *	intercept__wants_upstream(ic)     then the proxy connects, and:
 *	ret = intercept__upstream(ic, fd);        connected
 *	ret = intercept__upstream_failed(ic);     or not: 502 to the guest
 *	intercept__upstream_done(ic)      upstream's socket may be closed
 *	intercept__hook_answer(ic, id, d) a request's answer (ops->ask),
 *	                                  then intercept__run(ic, side, 0)
 *	intercept__interest(ic, side)     what the proxy's epoll watches
 *	intercept__setting_up(ic)         TLS setup not done: past the
 *	ret = intercept__expire(ic);      deadline, cut (-ETIMEDOUT)
 *	ret = intercept__sweep(ic, now);  once a second: responses overdue
 *	                                  get 504s; as intercept__run()
 *	intercept__destroy(ic);           then the proxy closes the sockets
 */

#define INTERCEPT_BUF (16U << 10) /* bytes per direction */
/*
 * The bytes all of a VM's h2 interceptions hold at most (each
 * connection's at most H2_CONN_BUDGET): past it, new streams are
 * refused and a connection that needs more fails.
 */
#define INTERCEPT_VM_BUDGET (128U << 20)
/* Guest bytes read and dropped after a refusal, at most: then a reset. */
#define INTERCEPT_LINGER_MAX (64U << 10)
/*
 * How long upstream may stay silent while it owes a response, unless
 * the params or the request's grant ("responseTimeoutMs") say: long
 * enough for a model API that thinks before its first byte.
 */
#define INTERCEPT_RESPONSE_MS (120U * 1000U)
/* intercept__run(): the flow ended cleanly; close both sides (no RST). */
#define INTERCEPT_DONE 1

enum intercept_side { INTERCEPT_GUEST, INTERCEPT_UP, INTERCEPT_SIDES };

struct intercept_ops {
	/* Each request, when its head is complete: never blocks. */
	net_decide_http_fn decide;
	void *decide_opaque;
	/*
	 * A request (or a TLS server name) allowed or refused, and why
	 * ("http grant 0", "http no grant", "malformed request", "tls
	 * handshake failed": a few constant strings, never a header value);
	 * detail, for the log: the name the guest gave, or why its TLS
	 * handshake failed; NULL: nothing.
	 */
	void (*request)(void *opaque, const struct net_flow *f,
			const char *detail, bool allowed, const char *reason);
	/* Upstream's TLS failed (why: its certificate...): the guest gets 502. */
	void (*upstream_failed)(void *opaque, const struct net_flow *f,
				const char *why);
	/*
	 * A request whose grant asks the hook (decide said
	 * NET_VERDICT_ASK): q put to the hook for owner (the params'),
	 * its answer to come through intercept__hook_answer() later,
	 * never from within this call. 0 and *id, or -errno: the request
	 * is refused, 403 and hook__failure(ret). NULL: every such
	 * request is refused ("hook unreachable").
	 */
	int (*ask)(void *opaque, void *owner, const struct net_flow *f,
		   const struct hook_http_question *q, uint64_t *id);
	/* A question asked and not answered whose request went away. */
	void (*cancel)(void *opaque, uint64_t id);
	/* Bytes read from the guest (out) and from upstream (in). */
	void (*bytes)(void *opaque, size_t out, size_t in);
	/*
	 * Runs fn(arg) and returns what it does, on a thread that may open
	 * files: wolfSSL seeds every new TLS connection from /dev/urandom,
	 * which the proxy thread's seccomp filter does not allow. NULL:
	 * fn runs on the caller's thread.
	 */
	int (*unfiltered)(void *opaque, int (*fn)(void *arg), void *arg);
	void *opaque;
};

/* A VM's TLS interception (net/tls.h); its objects outlive the flows. */
struct intercept_tls {
	struct tls_ca *ca;	   /* the VM's: the guest trusts it */
	struct tls_server *server; /* on ca: certificates per SNI */
	struct tls_client *client; /* upstream's verified (the CA bundle) */
};

struct intercept_params {
	struct net_flow flow; /* as decided: its destination is upstream */
	int guest_fd;	      /* nonblocking, connected; borrowed */
	const struct intercept_ops *ops; /* borrowed; outlives it */
	const struct intercept_tls *tls; /* a TLS port's flow; NULL: plain */
	void *owner;			 /* for ops->ask */
	/* Upstream's silence owing a response, at most; 0: the default. */
	unsigned int response_ms;
	/*
	 * With tls: the guest's first byte says which (a TLS handshake
	 * record: TLS; anything else: clear-text HTTP), the hook's "tls":
	 * "auto".
	 */
	bool tls_auto;
	/*
	 * A flow the hook's "grant-http" intercepts: its question's id,
	 * which each request's decision (net_http_decision.hook_flow) and
	 * question ("flow") carry; 0: a static grant's flow.
	 */
	uint64_t hook_flow;
	bool hook_each_request; /* its requests put to the hook each */
	const char *hook_host;	/* the one name it may give; NULL, "": any */
	/*
	 * The VM's bound on interception memory (INTERCEPT_VM_BUDGET),
	 * which each h2 connection's (H2_CONN_BUDGET) is charged to as
	 * well; NULL: none. Borrowed; the proxy thread's alone.
	 */
	struct bytebudget *budget;
};

struct intercept;

/* 0, -EINVAL or -ENOMEM. */
int __must_check intercept__create(struct intercept **out,
				   const struct intercept_params *p);
/* Wipes and frees; closes nothing. NULL is fine. */
void intercept__destroy(struct intercept *ic);

/*
 * A side is ready for events (EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR):
 * reads and writes what it can, both ways. 0: go on (ask
 * intercept__interest() again, and intercept__wants_upstream()),
 * INTERCEPT_DONE: the flow ended, close both sides; -errno: reset both.
 */
int __must_check intercept__run(struct intercept *ic, enum intercept_side side,
				uint32_t events);
/* The epoll events to watch on a side now (0: none; no fd yet). */
uint32_t intercept__interest(const struct intercept *ic,
			     enum intercept_side side);
/*
 * Upstream is wanted and was not asked for yet: TLS, once the
 * ClientHello's SNI is allowed; else once a request is.
 */
bool intercept__wants_upstream(const struct intercept *ic);
/*
 * TLS: the flow is still being set up (the ClientHello, upstream's
 * connection and handshake, the guest's handshake), which the proxy
 * bounds by a deadline of its own.
 */
bool intercept__setting_up(const struct intercept *ic);
/*
 * The deadline passed while setting up: reported ("tls handshake
 * failed"), -ETIMEDOUT: the proxy resets both sides.
 */
int __must_check intercept__expire(struct intercept *ic);
/*
 * The proxy's sweep, about once a second, now on its clock (ms, never
 * 0): upstream owes a response (HTTP/1.1: a request forwarded and its
 * response not complete; h2: each stream) and neither sent nor took a
 * byte of that exchange since the sweep that first saw it quiet, the
 * deadline or more before now: reported (ops->upstream_failed, "no
 * response within N ms"), and the guest gets a 504 "upstream timed
 * out" if none of that response reached it yet (HTTP/1.1: the
 * connection then ends, as after a 502; h2: that stream only), else a
 * reset (HTTP/1.1: both sides, -ETIMEDOUT; h2: the stream). Bytes that
 * wait for the guest to read them stop the clock: its turn, not
 * upstream's. As intercept__run() returns.
 */
int __must_check intercept__sweep(struct intercept *ic, uint64_t now);
/*
 * The hook's answer to question id (ops->ask), d as hook.h's
 * hook_http_answer_fn gives it: kept (copied) for its request, and
 * applied at the next intercept__run() (any side, any events, 0
 * included), which the caller makes once it is out of the hook's
 * callback. An id it does not wait for is ignored.
 */
void intercept__hook_answer(struct intercept *ic, uint64_t id,
			    const struct net_http_decision *d);
/* Whether an answer waits to be applied by intercept__run(). */
bool intercept__has_answers(const struct intercept *ic);

/*
 * The upstream connection the proxy made for it: connected, nonblocking,
 * borrowed. What was allowed goes out. 0 or -errno (reset both).
 */
int __must_check intercept__upstream(struct intercept *ic, int fd);
/*
 * It could not be made (nor, on a TLS port, upstream's handshake: then
 * the interception says so itself): the guest gets a 502 and the flow
 * ends; never asked again. As intercept__run() returns.
 */
int __must_check intercept__upstream_failed(struct intercept *ic);
/*
 * Upstream is not used any more (an error response is on its way to the
 * guest, or it failed): the proxy closes its socket now, so that its
 * peer's end does not keep waking the loop.
 */
bool intercept__upstream_done(const struct intercept *ic);

#endif
