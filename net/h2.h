/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_H2_H
#define KILN_VMM_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/bytequeue.h"
#include "lib/compiler.h"
#include "net/http.h"

/*
 * HTTP/2 interception of one guest connection (Documentation/network.md,
 * "HTTP/2"): a man in the middle built on Debian's nghttp2, a server
 * session toward the guest and a client session toward upstream (the
 * same hostname; upstream chose h2 by ALPN). Each guest stream's request
 * head is checked (:scheme https, :authority and Host naming the flow's
 * trusted hostname, no CONNECT, no connection-specific field), decided
 * by the caller with the same callback as HTTP/1.1 (http.h), and sent
 * upstream as a new stream with the decision's edits; bodies, responses
 * and trailers stream through under both sessions' flow control; resets
 * pass both ways. A refused stream is answered alone (its status, a
 * short text body); the other streams of the connection go on. No
 * sockets, no threads, no TLS: the caller moves the bytes.
 *
 *	ret = h2__create(&h, &params);
 *	n = h2__feed(h, H2_GUEST, buf, len);   bytes read from a side: n
 *	                                       taken, or <0 (reset both)
 *	p = h2__output(h, H2_UP, &len);        bytes for a side
 *	h2__drain(h, H2_UP, sent);
 *	h2__eof(h, side);                      a side's peer ended
 *	h2__upstream_failed(h, 502, why);      no upstream after all
 *	n = h2__expire(h, now, limit, 504, why);  each sweep: silent streams
 *	h2__done(h, side)                      that side is over: shut it
 *	h2__destroy(h);
 *
 * Secrets: values a decision sets go upstream as never-indexed HPACK
 * literals (RFC 7541 7.1.3), the memory upstream's session frees is
 * wiped, and the module logs nothing; a refusal carries a status and a
 * constant reason, never a request's or an edit's bytes.
 */

/*
 * Concurrent guest streams (SETTINGS_MAX_CONCURRENT_STREAMS), and the
 * streams a connection holds at most: a guest's reset stream upstream
 * still holds counts until upstream lets it go. Past it: REFUSED_STREAM.
 */
#define H2_MAX_STREAMS	   100U
#define H2_HEADER_LIST_MAX (64U << 10)	/* RFC 9113 6.5.2 size; more: 431 */
#define H2_MAX_FIELDS	   256U		/* fields of one header block */
#define H2_STREAM_WINDOW   65535U	/* per stream, each way */
#define H2_CONN_WINDOW	   (256U << 10) /* per connection, each way */
#define H2_OUTPUT_MAX	   (64U << 10)	/* queued for a side: feed stops */
#define H2_FEED_CHUNK	   (16U << 10)	/* bytes given nghttp2 at a time */
#define H2_REFUSAL_MAX	   128U		/* a refusal's body */
/* Requests waiting for upstream's concurrency, past it: REFUSED_STREAM. */
#define H2_QUEUED_MAX 16U
/*
 * Bytes one connection holds at most (its buffers, both nghttp2
 * sessions, its streams); a new stream needs H2_STREAM_RESERVE of it
 * free (its head, and upstream's session's copy), else REFUSED_STREAM.
 */
#define H2_CONN_BUDGET	  (4U << 20)
#define H2_STREAM_RESERVE (2U * H2_HEADER_LIST_MAX)

enum h2_side { H2_GUEST, H2_UP, H2_SIDES };

struct h2_params {
	/* The flow's trusted hostname (the TLS server name) and port. */
	const char *hostname;
	uint16_t port;
	/*
	 * Each stream's request, when its head is complete and passed the
	 * checks, as for HTTP/1.1 (http1_params.on_request): the method and
	 * :path (target and path), the fields but the pseudo-headers,
	 * version_minor 1, never an upgrade. HTTP_ALLOW (or _UPGRADE):
	 * forwarded with the edits; HTTP_REFUSE: that stream answered with
	 * the edits' status and reason; anything else: 500.
	 */
	int (*on_request)(void *opaque, const struct http_request *req,
			  struct http_edits *edits);
	/*
	 * A stream this module refused before any decision (status, a
	 * constant reason), for the log; NULL: not told.
	 */
	void (*on_refused)(void *opaque, unsigned int status,
			   const char *reason);
	void *opaque;
	/*
	 * The VM's budget the connection's (H2_CONN_BUDGET) is charged
	 * to as well; NULL: none. Borrowed: outlives it; one thread.
	 */
	struct bytebudget *budget;
};

struct h2;

/* 0, -EINVAL (no hostname, no callback) or -ENOMEM. */
int __must_check h2__create(struct h2 **out, const struct h2_params *p);
/* Frees everything. NULL is fine. */
void h2__destroy(struct h2 *h);

/*
 * Bytes read from a side: how many were taken (fewer than len while
 * either side's output holds H2_OUTPUT_MAX: feed the rest once drained),
 * or -EPROTO (not HTTP/2, or its session failed: reset both), -ENOMEM,
 * -ENOBUFS (the connection's or the VM's budget would be passed).
 * A side that is over takes and drops everything.
 */
ssize_t __must_check h2__feed(struct h2 *h, enum h2_side side, const void *in,
			      size_t len);
/* The bytes ready for a side, *len of them (filled up to H2_OUTPUT_MAX). */
const uint8_t *h2__output(struct h2 *h, enum h2_side side, size_t *len);
/* What h2__output() holds already, without making more. */
size_t h2__pending(const struct h2 *h, enum h2_side side);
/* n (<= *len above) of them were sent. */
void h2__drain(struct h2 *h, enum h2_side side, size_t n);
/*
 * A side's peer ended its bytes: its streams are reset on the other
 * side, and that one is told to go away.
 */
void h2__eof(struct h2 *h, enum h2_side side);
/*
 * Upstream could not be had (connect, TLS, ALPN): every forwarded stream
 * and every later one is answered with status and reason (constant),
 * and the guest told to go away.
 */
void h2__upstream_failed(struct h2 *h, unsigned int status, const char *reason);
/*
 * Once per sweep, now on the caller's clock (ms): each stream upstream
 * owes a response to (forwarded, upstream's end not read) whose frames
 * neither went nor came since the sweep that first saw it quiet, limit
 * or more before now, is cut: answered with status and reason (constant)
 * if no response head went to the guest yet, else reset; upstream's
 * stream is cancelled. The other streams go on. How many were cut, or
 * -errno (reset both).
 */
int __must_check h2__expire(struct h2 *h, uint64_t now, uint64_t limit,
			    unsigned int status, const char *reason);
/*
 * The streams on_request left HTTP_PENDING (their heads kept, their
 * bodies waiting under their windows) are decided again: on_request
 * is called for each with the same request. 0, or -errno (reset both).
 * Trailers that come before a stream's decision reset that stream.
 */
int __must_check h2__resume(struct h2 *h);
/* Whether a stream waits for its decision. */
bool h2__waiting(const struct h2 *h);
/* The bytes the connection holds now (its budget's). */
size_t h2__held(const struct h2 *h);
/* Streams refused with REFUSED_STREAM past a bound, so far. */
uint64_t h2__refused_streams(const struct h2 *h);
/* A request was allowed: upstream is needed. */
bool h2__wants_upstream(const struct h2 *h);
/* A side's session is over and its output sent: its end may go. */
bool h2__done(const struct h2 *h, enum h2_side side);

#endif
