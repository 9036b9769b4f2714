/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_INTERCEPT_INTERNAL_H
#define KILN_VMM_INTERCEPT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/compiler.h"
#include "net/h2.h"
#include "net/http1.h"
#include "net/intercept.h"
#include "net/tls.h"

/*
 * Between intercept.c (the connection: its two sides, plain or TLS, the
 * handshakes, the buffers, the relay and the error answers) and
 * intercept-request.c (each request's decision: the policy, the hook's
 * questions and answers, the header edits that inject credentials).
 * Callers see intercept.h only.
 */

/* Questions to the hook a connection has out at once: every h2 stream. */
#define IC_MAX_ASKS (H2_MAX_STREAMS + 1U)
/* The index of a connection's question ("ask": "connection"). */
#define IC_CONNECTION UINT64_MAX

enum ic_state {
	IC_HELLO,     /* TLS: the guest's ClientHello peeked at, its SNI */
	IC_UPSTREAM,  /* TLS: upstream's connection and handshake */
	IC_HANDSHAKE, /* TLS: the guest's handshake, its SNI checked */
	IC_RELAY,     /* requests go up, responses come back */
	IC_REFUSED,   /* the responses before the refused request still come */
	IC_ANSWER,    /* the error response goes to the guest, then its end */
	IC_LINGER,    /* the guest's bytes dropped until its end */
};

struct ic_side {
	int fd;		      /* borrowed; -1: none (yet), or done with */
	struct tls_conn *tls; /* NULL: plain */
	bool eof;	      /* its peer's end was read */
	bool clean;	      /* TLS: that end was a close_notify */
	bool shut;	      /* ours was sent */
	bool shutting;	      /* TLS: our close_notify waits for room */
	uint32_t rwant;	      /* TLS: what a read that waited waits for */
	uint32_t wwant;	      /* TLS: the same for a write, or shutdown */
	size_t wpend;	      /* TLS: a write that waited: its length */
};

/*
 * A request's question to the hook (IC_CONNECTION: the connection's,
 * whose answer is kept for its later requests), and its answer once
 * come, until the request is decided again with it.
 */
struct ic_ask {
	bool used;
	bool answered;
	bool taken; /* decided with in this pass (intercept__apply_answers) */
	uint64_t index;
	uint64_t id;		       /* the hook's question */
	struct net_http_decision *ans; /* answered: a copy, wiped at free */
};

struct intercept {
	struct net_flow flow;
	void *owner;
	bool tls_auto;	    /* IC_HELLO: the first byte says TLS or not */
	uint64_t hook_flow; /* the hook's "grant-http" of the flow; 0: none */
	bool hook_each_request;
	char hook_host[NET_HOSTNAME_MAX + 1]; /* its "host"; "": any */
	struct bytebudget *budget; /* the VM's (h2's parent); NULL: none */
	struct intercept_ops ops;
	struct intercept_tls tls; /* all NULL: plain */
	struct ic_side side[INTERCEPT_SIDES];
	enum ic_state state;
	bool want_up;	/* upstream wanted: the SNI or a request allowed */
	bool asked_up;	/* the proxy answered (upstream or failed) */
	bool up_ready;	/* upstream connected, TLS handshake done */
	bool verified;	/* the name the guest gave was found bound */
	bool counted;	/* the refusal was reported already */
	bool up_closed; /* upstream's socket is not used: the proxy closes it */
	char host[HTTP_HOSTNAME_MAX + 1]; /* the guest's name, once passed */
	/* TLS: the ClientHello's SNI, allowed (IC_HELLO); "": none. */
	char peeked[NET_HOSTNAME_MAX + 1];
	uint8_t *hello; /* IC_HELLO: TLS_RECORD_MAX bytes peeked into */
	/* Upstream failed before the guest's handshake: its 502's reason. */
	const char *up_error;

	struct http1_req *req; /* from the end of the TLS handshake on */
	struct http1_resp *resp;
	bool resp_dead; /* the tracker stopped: no boundaries known */
	/*
	 * Or, the guest having chosen h2: both directions through it, and
	 * upstream's bytes wait in up_in until it takes them.
	 */
	struct h2 *h2;
	uint8_t *up_in;
	size_t up_len;
	bool eof_told[INTERCEPT_SIDES]; /* h2__eof() called */

	uint8_t *in; /* read from the guest, not yet taken by req */
	size_t in_len;
	uint8_t *back; /* for the guest: upstream's bytes, an error answer */
	size_t back_off, back_len;
	size_t lingered; /* guest bytes dropped in IC_LINGER */

	struct ic_ask asks[IC_MAX_ASKS];
	bool answers_new; /* an answer came: decide the pending again */

	/*
	 * HTTP/1.1's response deadline (h2 keeps one per stream): upstream
	 * may stay silent this long while it owes a response (an allowed
	 * request's grant may say, else the params'); a byte either way
	 * since the last sweep (up_heard) restarts it at that sweep.
	 */
	uint64_t response_ms;
	bool up_heard;
	uint64_t quiet_since; /* the sweep's clock; 0: nothing owed */
};

/* ---- intercept-request.c ----------------------------------------- */

/* The request side's report of a decision (intercept_ops.request). */
void intercept__report(struct intercept *ic, const char *detail, bool allowed,
		       const char *reason);
/*
 * The policy, now, on the name the guest gave. The decision holds the
 * fields' values (secrets): the caller wipes it.
 */
void intercept__decide(struct intercept *ic, const char *host,
		       struct net_http_decision *d);
/* A question cancelled if still out, its answer wiped; the slot free. */
void intercept__ask_free(struct intercept *ic, struct ic_ask *a);
/*
 * The HTTP/1.1 rewriter and response tracker (hostname NULL: the first
 * request's Host names the connection), or the h2 sessions, each
 * request decided by the request side. 0 or -errno.
 */
int __must_check intercept__make_http1(struct intercept *ic,
				       const char *hostname, bool tls);
int __must_check intercept__make_h2(struct intercept *ic);
/* Answers came: the requests waiting for them decided again. */
int intercept__apply_answers(struct intercept *ic);

/* ---- intercept.c ------------------------------------------------- */

/* The rewriter refused (feed's ret): report it, stop reading the guest. */
int intercept__refused(struct intercept *ic, ssize_t ret);

#endif
