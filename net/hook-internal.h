/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HOOK_INTERNAL_H
#define KILN_VMM_HOOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/flow.h"
#include "net/hook.h"
#include "net/http.h"

/*
 * Between hook.c and hook-msg.c (and the unit test): the hook's JSON
 * lines (Documentation/network.md, "The hook"). Questions are ours;
 * answers come from the orchestrator's process and are checked as
 * untrusted bytes.
 */

/* A flow's question line, its newline included. */
#define HOOK_LINE_MAX 4096U
/*
 * An HTTP request's question line: the fixed part, the URL (a request
 * line is at most HTTP1_REQUEST_LINE_MAX, each byte 2 once escaped) and
 * as many of its fields as fit (the rest left out, "truncated": true).
 */
#define HOOK_HTTP_LINE_MAX (32U << 10)
#define HOOK_HTTP_FIXED	   1024U /* id, addresses, grant, keys, protocol */
/* An answer line, its newline included: a grant-http's fields fit. */
#define HOOK_ANSWER_MAX (NET_HTTP_HEADERS_MAX + (8U << 10))
/* The hook's own reason text as kept for the log, its NUL included. */
#define HOOK_DETAIL_MAX 64U

enum hook_verdict {
	HOOK_VERDICT_GRANT,
	HOOK_VERDICT_DENY,
	HOOK_VERDICT_GRANT_HTTP, /* with "set" and "remove": a request's */
	HOOK_VERDICT_INVALID,	 /* grant-http whose fields cannot be */
	HOOK_VERDICT_UNKNOWN,	 /* a string we do not know */
};

/* A flow's "grant-http": how its first bytes are taken. */
enum hook_tls {
	HOOK_TLS_AUTO, /* "auto" (or left out): a ClientHello, or clear text */
	HOOK_TLS_YES,  /* true */
	HOOK_TLS_NO,   /* false */
};

struct hook_answer {
	uint64_t id;
	enum hook_verdict verdict;
	/* "flow": the flow question a request's answer names; 0: none. */
	uint64_t flow;
	/*
	 * "grant-http" as a flow's answer: "tls", and "ask" ("request", or
	 * left out: each_request; "connection": not). flow_invalid: NULL,
	 * or the rule it broke as a flow's answer (a value not one of
	 * those, "set" or "remove": a flow's has no fields). A request's
	 * answer ignores all three.
	 */
	enum hook_tls tls;
	bool each_request;
	const char *flow_invalid;
	/* "host", normalized: the flow's one name; "": any it is bound to. */
	char host[NET_HOSTNAME_MAX + 1];
	/* The verdict's text as sent, cut short: for the log. */
	char verdict_text[HOOK_DETAIL_MAX];
	/* "reason", printable ASCII only (others become '?'), cut short. */
	char reason[HOOK_DETAIL_MAX];
};

/*
 * The question line for f (id, a's class and hostnames) into buf, its
 * newline included, no NUL: its length, or -ENOSPC when it does not fit
 * in len bytes, -ENOMEM.
 */
int __must_check hook_msg__question(char *buf, size_t len, uint64_t id,
				    const struct net_flow *f,
				    const struct net_ask *a);

/*
 * One answer line of n bytes, its newline left off, into *a: 0, or
 * -EBADMSG when it is not an answer (not a JSON object, "id" or "flow"
 * not an integer from 1 to 2^53 - 1, "verdict" not a string, "reason"
 * there and not a string, a key twice). Other keys are left alone, but
 * for a "grant-http": "tls", "ask" and "host" (struct hook_answer), and its
 * "set" (an object of field name to value, each value's characters
 * U+0000 to U+00FF one byte each) and "remove" (an array of field names)
 * into *edits (NULL: not read): NET_VERDICT_ALLOW, each field's name in
 * lower case, removed ones with remove set, and its "clearText" (true:
 * what it sets may go on a clear-text flow) as clear_text. "clearText"
 * not a boolean, names a grant could not set
 * (http__editable_name), a value with a control byte or a character past
 * U+00FF, a name twice, more than NET_HTTP_MAX_HEADERS fields or
 * NET_HTTP_HEADERS_MAX bytes: the verdict is HOOK_VERDICT_INVALID,
 * a.reason says which rule (and which field or limit, never a value),
 * *edits holds nothing.
 */
int __must_check hook_msg__answer(const char *line, size_t n,
				  struct hook_answer *a,
				  struct net_http_decision *edits);

/*
 * The question line for request q of flow f into buf (len bytes), its
 * newline included, no NUL: its length, -ENOSPC, -ENOMEM. Values of
 * Authorization, Proxy-Authorization, Cookie and of the fields the grant
 * sets are left out (their names listed in "omitted"); the guest's texts
 * (fields, URL) go byte for byte, each byte the character of that code
 * (U+0000 to U+00FF, as ISO 8859-1 reads it), so none is lost.
 */
int __must_check hook_msg__http_question(char *buf, size_t len, uint64_t id,
					 const struct net_flow *f,
					 const struct hook_http_question *q);

#endif
