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

struct hook_answer {
	uint64_t id;
	enum hook_verdict verdict;
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
 * -EBADMSG when it is not an answer (not a JSON object, "id" not an
 * integer from 1 to 2^53 - 1, "verdict" not a string, "reason" there
 * and not a string, a key twice). Other keys are left alone, but for a
 * "grant-http": its "set" (an object of field name to value) and
 * "remove" (an array of field names) into *edits (NULL: not read):
 * NET_VERDICT_ALLOW, each field's name in lower case, removed ones with
 * remove set. Names a grant could not set (http__editable_name), a
 * value with a control byte, a name twice, more than
 * NET_HTTP_MAX_HEADERS fields or NET_HTTP_HEADERS_MAX bytes: the
 * verdict is HOOK_VERDICT_INVALID, a.reason says which rule (never a
 * value), *edits holds nothing.
 */
int __must_check hook_msg__answer(const char *line, size_t n,
				  struct hook_answer *a,
				  struct net_http_decision *edits);

/*
 * The question line for request q of flow f into buf (len bytes), its
 * newline included, no NUL: its length, -ENOSPC, -ENOMEM. Values of
 * Authorization, Proxy-Authorization, Cookie and of the fields the grant
 * sets are left out (their names listed in "omitted"); texts that are
 * not printable ASCII get '?' for each such byte.
 */
int __must_check hook_msg__http_question(char *buf, size_t len, uint64_t id,
					 const struct net_flow *f,
					 const struct hook_http_question *q);

#endif
