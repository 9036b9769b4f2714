/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HTTP_H
#define KILN_VMM_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * What HTTP/1.1 (net/http1.h) and HTTP/2 (net/h2.h) interception share
 * with their callers, the hook (net/hook.h) and the policy: a request as
 * the decision sees it, the decision's verdict and header edits, and
 * which fields a decision may edit. One decision callback serves both
 * protocols (http1_params.on_request, h2_params.on_request).
 *
 * Secrets: the values of header edits (an injected token) go into the
 * output for upstream and nowhere else; a refusal's reason reaches the
 * guest, so it is sanitized and never one of them.
 */

#define HTTP_MAX_EDITS	  16U
#define HTTP_EDITS_MAX	  (16U << 10) /* bytes of one decision's edits */
#define HTTP_HOSTNAME_MAX 253U
#define HTTP_REASON_MAX	  64U /* a refusal's reason, NUL included */

/* A field of a request head, as received (not NUL-terminated). */
struct http_header {
	const char *name;
	size_t name_len;
	const char *value; /* without leading and trailing blanks */
	size_t value_len;
};

/* A request head, valid during the on_request call only. */
struct http_request {
	uint64_t index;	    /* 0 for the connection's first request */
	const char *method; /* "GET", NUL-terminated */
	const char *target; /* as received: origin, absolute or "*" form */
	size_t target_len;
	const char *path; /* the target from its path on (may be empty) */
	size_t path_len;
	unsigned int version_minor;	   /* HTTP/1.0 or HTTP/1.1 */
	const struct http_header *headers; /* the guest's order */
	unsigned int nr_headers;
	bool upgrade;	      /* an Upgrade field or Connection: upgrade */
	const char *hostname; /* the flow's, from the params */
	uint16_t port;
};

/* What on_request returns. */
enum http_verdict {
	HTTP_ALLOW,	    /* forward it, with the edits */
	HTTP_ALLOW_UPGRADE, /* the same, and an upgrade may follow */
	HTTP_REFUSE,	    /* http_edits__refuse() returns it */
	/*
	 * Not decided yet (the hook is asked): the request waits, head
	 * kept, nothing more taken, until the caller resumes it and
	 * on_request is called again with the same request.
	 */
	HTTP_PENDING,
};

/*
 * A method whose response echoes the request it got: TRACE (RFC 9110
 * 9.3.8, where a client must not send sensitive fields) and TRACK (IIS's
 * old copy of it), in any case (h2's :method is any token). Such a
 * request never carries a field a decision set: the rewriters refuse it
 * (405, HTTP_ECHO_REFUSED) when on_request sets a value on it.
 */
bool http__echoes_request(const char *method);
#define HTTP_ECHO_REFUSED "TRACE not allowed"

/* A decision's header edits and refusal, filled by on_request. */
struct http_edits;

/* Whether e sets a value (a field upstream gets), not only removals. */
bool http_edits__sets(const struct http_edits *e);

/*
 * In on_request: have the forwarded head carry NAME: VALUE, in place of
 * every field of that name (case-insensitive; at the first one's place,
 * else after the last field). 0, -EINVAL (NAME not a token or one that
 * frames or routes the message: Host, Content-Length, Transfer-Encoding,
 * Connection, Upgrade, TE, Trailer, Keep-Alive; VALUE with a control
 * byte) or -ENOSPC. The value is copied, and wiped once written.
 */
int __must_check http_edits__set(struct http_edits *e, const char *name,
				 const char *value);
/*
 * Whether a decision may set or remove NAME: a token (RFC 9110 5.6.2)
 * that does not frame or route the message (the names above).
 */
bool http__editable_name(const char *name);
/* In on_request: have the forwarded head lose every NAME field. */
int __must_check http_edits__remove(struct http_edits *e, const char *name);
/*
 * In on_request: refuse with status (400-599, else 403) and a short
 * constant reason (printable ASCII; it reaches the guest). Returns
 * HTTP_REFUSE, for `return http_edits__refuse(e, 403, "not granted");`.
 */
int http_edits__refuse(struct http_edits *e, unsigned int status,
		       const char *reason);

#endif
