/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HOOK_H
#define KILN_VMM_HOOK_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/flow.h"
#include "net/http.h"

/*
 * The policy hook's client (Documentation/network.md, "The hook"): flows
 * the policy's rules did not decide are put to the orchestrator's
 * decision service, one JSON line each way on one Unix stream connection,
 * each question with a deadline. Nothing here blocks and nothing locks:
 * one thread owns each client and runs it from its epoll loop (the
 * proxy's for flows and requests, the DNS resolver's a client of its own).
 *
 *	ret = hook__create(&h, &params);
 *	epoll_ctl(ADD, hook__fd(h), EPOLLIN)    once, in the owner's set
 *	ret = hook__ask(h, f, ask, cookie, now, &id);  a question out
 *	ret = hook__ask_http(h, f, q, cookie, now, &id);  a request's
 *	ret = hook__ask_line(h, lq, cookie, now, &id);  another type's
 *	hook__cancel(h, id);          the flow went away first
 *	ms = hook__timeout(h, now);   for the owner's epoll_wait
 *	hook__run(h, now);            hook__fd readable, or the timeout
 *	                              passed: answers through params.answer
 *	hook__destroy(h);
 *
 * Every question asked gets exactly one call of params.answer (a
 * request's: params.http_answer; a line question's: params.line_answer),
 * from hook__run (never from hook__ask),
 * unless it is cancelled first.
 */

#define HOOK_MAX_PENDING 256U /* questions waiting for an answer */

/* The reasons of the decisions it gives, for the counters and the log. */
#define HOOK_GRANT	 "hook grant"
#define HOOK_DENY	 "hook deny"
#define HOOK_UNKNOWN	 "hook verdict unknown"
#define HOOK_TIMEOUT	 "hook timeout"
#define HOOK_UNREACHABLE "hook unreachable"
#define HOOK_ERROR	 "hook error"
#define HOOK_BUSY	 "hook busy"
#define HOOK_CHANGED	 "hook changed"
#define HOOK_INVALID	 "hook answer invalid" /* a grant-http's fields */
#define HOOK_GRANT_HTTP	 NET_HOOK_GRANT_HTTP   /* a flow's, intercepted */

/*
 * A question's answer: d is NET_VERDICT_ALLOW or NET_VERDICT_DENY with
 * one of the reasons above, or NET_VERDICT_HTTP (HOOK_GRANT_HTTP: the
 * hook's "grant-http", d->hook_flow the question's id, d->http_tls,
 * d->http_tls_auto, d->hook_each_request and d->http_host as it said);
 * detail is the
 * hook's own reason text ("" when it gave none, or for a failure ours;
 * HOOK_INVALID: which rule the answer broke), printable ASCII. The
 * callback may cancel questions, not ask new ones.
 */
typedef void (*hook_answer_fn)(void *opaque, void *cookie,
			       const struct net_decision *d,
			       const char *detail);

/*
 * An HTTP request's answer (hook__ask_http()): d->verdict is
 * NET_VERDICT_ALLOW ("grant-http" or "grant", reason HOOK_GRANT) with
 * the hook's fields to set and remove, or NET_VERDICT_DENY, status 403,
 * with one of the reasons above. The values are secrets: d is wiped
 * after the call; the callback copies what it keeps and logs none.
 */
typedef void (*hook_http_answer_fn)(void *opaque, void *cookie, uint64_t id,
				    const struct net_http_decision *d,
				    const char *detail);

/*
 * A question of another type, whose line its asker writes and whose
 * answer line it reads (hook__ask_line(); the DNS resolver's,
 * net/dns-hook.c). build writes the question for id into buf (len
 * bytes), its newline included, no NUL: its length, -ENOSPC, -ENOMEM.
 */
typedef int (*hook_line_build_fn)(char *buf, size_t len, uint64_t id,
				  const void *arg);
struct hook_line_question {
	const char *socket; /* the hook's Unix socket */
	unsigned int timeout_ms;
	hook_line_build_fn build;
	const void *arg; /* build's, read during hook__ask_line() only */
};

/*
 * Its answer: line (n bytes, its newline left off) is an answer line
 * with this question's id, a verdict and maybe a reason, as
 * hook_msg__answer() checks them; the asker reads the rest. Or line
 * NULL when none came: reason says why (HOOK_TIMEOUT, HOOK_UNREACHABLE,
 * HOOK_ERROR, HOOK_CHANGED). The line is wiped after the call.
 */
typedef void (*hook_line_answer_fn)(void *opaque, void *cookie,
				    const char *line, size_t n,
				    const char *reason);

/* An HTTP request put to the hook (hook__ask_http()). */
struct hook_http_question {
	const char *socket; /* the hook's Unix socket */
	unsigned int timeout_ms;
	unsigned int grant; /* the http grant's index, when flow is 0 */
	/* The hook's "grant-http" of the flow: its question's id; 0: none. */
	uint64_t flow;
	const char *host; /* the trusted hostname */
	uint16_t port;
	bool tls;
	const char *sni;  /* tls: the guest's server name */
	const char *alpn; /* tls: the protocol it chose by ALPN; NULL: none */
	const char *protocol; /* "HTTP/1.1", "HTTP/1.0", "h2" */
	const char *method;
	const char *path; /* from the path on (origin form) */
	size_t path_len;
	const struct http_header *fields; /* the guest's, in its order */
	unsigned int nr_fields;
	/* The grant's own fields: their names' values stay out too. */
	const struct net_http_decision *grant_fields;
};

struct hook_params {
	hook_answer_fn answer;
	hook_http_answer_fn http_answer; /* NULL: hook__ask_http refused */
	hook_line_answer_fn line_answer; /* NULL: hook__ask_line refused */
	void *opaque;
	unsigned int max_pending; /* 0: HOOK_MAX_PENDING */
};

struct hook_stats {
	uint64_t questions; /* sent, or queued to be */
	uint64_t answers;   /* lines that answered a pending question */
	uint64_t timeouts;  /* questions past their deadline */
	uint64_t ignored;   /* answers to no pending question (late ones) */
	uint64_t failures;  /* questions failed: unreachable, error, busy */
	uint64_t connects;  /* connections made */
	uint64_t pending;   /* questions waiting now */
};

struct hook;

/* Its epoll set; no connection yet. -ENOMEM, -EMFILE... */
int __must_check hook__create(struct hook **out, const struct hook_params *p);
/* Closes the connection; pending questions get no answer. NULL is fine. */
void hook__destroy(struct hook *h);

/* An epoll fd, readable when hook__run has I/O to do; the same for life. */
int hook__fd(const struct hook *h);

/*
 * Puts f to the hook at ask->socket, deadline ask->timeout_ms from now
 * (ms, CLOCK_MONOTONIC), connecting first if there is no connection to
 * that socket (a connection to another socket is closed, its pending
 * questions answered HOOK_CHANGED). 0 and *id (for hook__cancel) when
 * the question is out; else -errno and the caller decides now, denied
 * with hook__failure(ret): -EBUSY (max_pending questions wait, or the
 * hook reads none of ours), -ENOMEM, or the socket's error (missing,
 * refusing, ...).
 */
int __must_check hook__ask(struct hook *h, const struct net_flow *f,
			   const struct net_ask *ask, void *cookie,
			   uint64_t now, uint64_t *id);
/*
 * Puts request q of flow f to the hook at q->socket, as hook__ask does
 * a flow (the same connection, deadline and errors); its answer comes
 * through params.http_answer. -EINVAL without one.
 */
int __must_check hook__ask_http(struct hook *h, const struct net_flow *f,
				const struct hook_http_question *q,
				void *cookie, uint64_t now, uint64_t *id);
/*
 * Puts question q to the hook at q->socket, as hook__ask does a flow
 * (the same connection, deadline and errors); its answer comes through
 * params.line_answer. -EINVAL without one.
 */
int __must_check hook__ask_line(struct hook *h,
				const struct hook_line_question *q,
				void *cookie, uint64_t now, uint64_t *id);
/* hook__ask's error as a reason: HOOK_BUSY, HOOK_ERROR, HOOK_UNREACHABLE. */
const char *hook__failure(int err);
/* The question will get no answer call; an id answered already is fine. */
void hook__cancel(struct hook *h, uint64_t id);

/* Milliseconds from now to the nearest deadline; -1: no question waits. */
int hook__timeout(const struct hook *h, uint64_t now);
/* Sends, reads and answers; questions past their deadline: HOOK_TIMEOUT. */
void hook__run(struct hook *h, uint64_t now);

/*
 * Which socket the connection is (or was last) for. A generation that
 * changes each time it is another socket: the proxy keeps a flow's grant
 * only while the socket that granted it is still the policy's.
 */
bool hook__is_target(const struct hook *h, const char *socket);
uint64_t hook__generation(const struct hook *h);

void hook__stats(const struct hook *h, struct hook_stats *s);

#endif
