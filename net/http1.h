/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HTTP1_H
#define KILN_VMM_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/compiler.h"
#include "net/http.h"

/*
 * HTTP/1.1 interception of one guest connection (Documentation/network.md,
 * "HTTP/1.1 interception"): the guest's requests read with Debian's
 * http_parser, checked (Host against the flow's trusted hostname, no
 * request smuggling, no CONNECT, no unasked-for upgrade), decided one by
 * one by the caller (http.h), and re-written for upstream with the
 * decision's header edits; bodies stream through. No sockets, no threads,
 * no TLS: the caller moves the bytes.
 *
 *	ret = http1_req__create(&h, &params);
 *	ret = http1_resp__create(&r, h);       optional: response tracking
 *	n = http1_req__feed(h, buf, len);      guest bytes; n taken, or <0
 *	p = http1_req__output(h, &len);        bytes for upstream
 *	http1_req__drain(h, sent);
 *	ret = http1_resp__feed(r, buf, len);   upstream bytes, which the
 *	                                       caller relays unchanged
 *	http1_resp__idle(r);                   between exchanges?
 *	f = http1_req__refusal(h);             after feed failed
 *	n = http1__error_response(f->status, f->reason, buf, sizeof(buf));
 *	http1_resp__destroy(r); http1_req__destroy(h);
 *
 * Secrets: the values of header edits (an injected token) go into the
 * output for upstream and nowhere else. The module logs nothing, and a
 * refusal carries a status and a constant reason, never a request's or
 * an edit's bytes.
 */

#define HTTP1_REQUEST_LINE_MAX	 (8U << 10) /* as forwarded; longer: 414 */
#define HTTP1_HEAD_MAX		 (64U << 10) /* a head as received; longer: 431 */
#define HTTP1_MAX_HEADERS	 100U	     /* fields in a head; more: 431 */
#define HTTP1_OUTPUT_MAX	 (64U << 10) /* queued for upstream: feed stops */
#define HTTP1_MAX_PIPELINE	 64U  /* tracked requests awaiting an answer */
#define HTTP1_ERROR_RESPONSE_MAX 256U /* room for any error response */

struct http1_params {
	/*
	 * The hostname the flow was granted for (trusted: the policy's
	 * DNS bindings or the TLS server name), and its port. Copied.
	 * NULL: the first request's Host names the connection (a name,
	 * else 421), and on_request is where the caller checks that name
	 * (req->hostname) against what it trusts; every later request must
	 * name the same.
	 */
	const char *hostname;
	uint16_t port;
	bool tls; /* default port 443 and https, else 80 and http */
	/*
	 * Called once per request, when its head is complete and has
	 * passed the checks: an enum http_verdict. Anything else refuses
	 * it (500). It must not block; req is valid during the call only.
	 */
	int (*on_request)(void *opaque, const struct http_request *req,
			  struct http_edits *edits);
	void *opaque;
};

/* Why the transformer stopped; it answers request number `request`. */
struct http1_refusal {
	unsigned int status; /* 4xx or 5xx */
	char reason[HTTP_REASON_MAX];
	uint64_t request;
	/*
	 * The request's head already went upstream (its body broke): no
	 * response is coming for it; close both sides.
	 */
	bool head_sent;
};

struct http1_req;
struct http1_resp;

/* 0, -EINVAL (a bad hostname, port or no callback) or -ENOMEM. */
int __must_check http1_req__create(struct http1_req **out,
				   const struct http1_params *p);
/* Frees everything, wiping what held edit values. NULL is fine. */
void http1_req__destroy(struct http1_req *h);

/*
 * Takes guest bytes: how many (fewer than len while the output holds
 * HTTP1_OUTPUT_MAX bytes or, tracked, HTTP1_MAX_PIPELINE requests are
 * unanswered: feed the rest once the output drained or a response
 * completed), or -EPROTO when a request was refused, -ENOMEM. After a
 * negative return the transformer is dead: http1_req__refusal() says
 * why; the output still holds what earlier requests sent.
 */
ssize_t __must_check http1_req__feed(struct http1_req *h, const void *in,
				     size_t len);
/*
 * A request on_request left HTTP_PENDING: on_request is called again
 * for it (the same head, the same index) and its verdict applied. 0
 * (decided, or pending still: feed the rest), or as feed fails.
 */
ssize_t __must_check http1_req__resume(struct http1_req *h);
/* Whether a request waits for its decision (HTTP_PENDING). */
bool http1_req__pending(const struct http1_req *h);
/* The bytes ready for upstream: *len of them at the result. */
const uint8_t *http1_req__output(const struct http1_req *h, size_t *len);
/* n (<= *len above) of them were sent. */
void http1_req__drain(struct http1_req *h, size_t n);
/* Why feed failed; NULL while it has not. */
const struct http1_refusal *http1_req__refusal(const struct http1_req *h);

/*
 * A complete response for the guest: status (400-599), its phrase,
 * Connection: close and the reason (sanitized) as a text/plain body.
 * Its length, -EINVAL or -ENOSPC. Only status and reason go in.
 */
ssize_t __must_check http1__error_response(unsigned int status,
					   const char *reason, char *buf,
					   size_t len);

/*
 * The upstream side of h's connection, which it borrows (destroy r
 * first); made before the first feed. It only watches: where each
 * response ends (HEAD, 1xx, 204, 304, chunked, close-delimited), so the
 * caller knows when the connection is between exchanges.
 */
int __must_check http1_resp__create(struct http1_resp **out,
				    struct http1_req *h);
void http1_resp__destroy(struct http1_resp *r);
/*
 * Upstream bytes, in order, all of them: 0, or -EPROTO when they are not
 * HTTP/1.x responses to the requests sent (the tracking stops: the
 * connection is never idle again). A 101 makes the rest opaque.
 */
int __must_check http1_resp__feed(struct http1_resp *r, const void *in,
				  size_t len);
/* Upstream closed: 0 when that ended no response early, else -EPROTO. */
int __must_check http1_resp__eof(struct http1_resp *r);
/* Final responses seen complete: the refusal's turn is when it equals
 * refusal->request. */
uint64_t http1_resp__answered(const struct http1_resp *r);
/*
 * Requests forwarded whose final response was not seen complete: what
 * upstream owes (0 once the tracking stopped, or after a 101).
 */
uint64_t http1_resp__owed(const struct http1_resp *r);
/*
 * Bytes of a response went by and its end did not (or the tracking
 * stopped, or a 101 made the rest opaque): an answer of our own can no
 * longer be put in front of it.
 */
bool http1_resp__under_way(const struct http1_resp *r);
/*
 * Every request forwarded has had its whole response and no next one is
 * under way on either side.
 */
bool http1_resp__idle(const struct http1_resp *r);

#endif
