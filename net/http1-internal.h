/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HTTP1_INTERNAL_H
#define KILN_VMM_HTTP1_INTERNAL_H

/*
 * What net/http1.c shares with net/h2.c and nobody else: a decision's
 * edits as the rewriters read them back, and the check of an authority
 * (Host, :authority) against the flow's trusted name. One decision
 * callback type serves both protocols (http1_params.on_request).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/http1.h"

struct http1_edit {
	bool remove;
	bool written; /* in the head being written */
	uint16_t name_off, name_len;
	uint16_t value_off, value_len;
};

struct http1_edits {
	struct http1_edit e[HTTP1_MAX_EDITS];
	unsigned int nr;
	size_t used; /* of buf */
	char buf[HTTP1_EDITS_MAX];
	unsigned int status;
	char reason[HTTP1_REASON_MAX];
};

/* Empty again, for the next decision; what it held wiped. */
void http1_edits__reset(struct http1_edits *e);
/* Values wiped (they went out); names kept, for trailers. */
void http1_edits__wipe_values(struct http1_edits *e);
/* The edit of NAME (case-insensitive), or -1. */
int http1_edits__find(const struct http1_edits *e, const char *name,
		      size_t len);
/*
 * The reason shares a run of bytes with a value the decision set: it
 * might carry (part of) a secret, so it must not reach the guest.
 */
bool http1_edits__reason_leaks(const struct http1_edits *e, const char *reason);
/*
 * An authority, uri-host [ ":" port ] (a name or an [IPv6] literal), names
 * hostname (case-insensitive) and port (none: 443 with tls, else 80).
 */
bool http1__authority_matches(const char *hostname, uint16_t port, bool tls,
			      const char *v, size_t len);

#endif
