/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HOOK_INTERNAL_H
#define KILN_VMM_HOOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "vmm/flow.h"

/*
 * Between hook.c and hook-msg.c (and the unit test): the hook's JSON
 * lines (Documentation/network.md, "The hook"). Questions are ours;
 * answers come from the orchestrator's process and are checked as
 * untrusted bytes.
 */

/* A question or an answer line, its newline included. */
#define HOOK_LINE_MAX 4096U
/* The hook's own reason text as kept for the log, its NUL included. */
#define HOOK_DETAIL_MAX 64U

enum hook_verdict {
	HOOK_VERDICT_GRANT,
	HOOK_VERDICT_DENY,
	HOOK_VERDICT_UNKNOWN, /* a string we do not know ("grant-http") */
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
 * and not a string, a key twice). Other keys are left alone.
 */
int __must_check hook_msg__answer(const char *line, size_t n,
				  struct hook_answer *a);

#endif
