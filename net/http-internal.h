/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_HTTP_INTERNAL_H
#define KILN_VMM_HTTP_INTERNAL_H

/*
 * What net/http.c shares with the rewriters, net/http1.c and net/h2.c,
 * and nobody else: a decision's edits as the rewriters read them back,
 * the check of an authority (Host, :authority) against the flow's
 * trusted name, and the syntax rules both check a head by.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/http.h"

struct http_edit {
	bool remove;
	bool written; /* in the head being written */
	uint16_t name_off, name_len;
	uint16_t value_off, value_len;
};

struct http_edits {
	struct http_edit e[HTTP_MAX_EDITS];
	unsigned int nr;
	size_t used; /* of buf */
	char buf[HTTP_EDITS_MAX];
	unsigned int status;
	char reason[HTTP_REASON_MAX];
};

/* Empty again, for the next decision; what it held wiped. */
void http_edits__reset(struct http_edits *e);
/* Values wiped (they went out); names kept, for trailers. */
void http_edits__wipe_values(struct http_edits *e);
/* The edit of NAME (case-insensitive), or -1. */
int http_edits__find(const struct http_edits *e, const char *name, size_t len);
/*
 * The reason shares a run of bytes with a value the decision set: it
 * might carry (part of) a secret, so it must not reach the guest.
 */
bool http_edits__reason_leaks(const struct http_edits *e, const char *reason);
/*
 * An authority, uri-host [ ":" port ] (a name or an [IPv6] literal), names
 * hostname (case-insensitive) and port (none: 443 with tls, else 80).
 */
bool http__authority_matches(const char *hostname, uint16_t port, bool tls,
			     const char *v, size_t len);

/* a[0, alen) and b[0, blen) are the same but for ASCII case. */
bool http__same_nocase(const char *a, size_t alen, const char *b, size_t blen);
/* A token (RFC 9110 5.6.2): one or more tchars. */
bool http__is_token(const char *s, size_t len);
/* A field value: visible bytes, blanks and obs-text; no control bytes. */
bool http__is_value(const char *s, size_t len);
/*
 * An authority's port: none (given false: the port is dflt), or 1-5
 * digits naming want.
 */
bool http__port_is(uint16_t want, uint16_t dflt, const char *s, size_t len,
		   bool given);
/* Printable ASCII only, truncated: what may reach the guest as text. */
void http__text_copy(char *dst, size_t size, const char *src);

#endif
