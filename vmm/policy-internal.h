/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_POLICY_INTERNAL_H
#define KILN_VMM_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "vmm/policy.h"

/*
 * Between policy.c and bindings.c only: the one spelling of a hostname
 * both compare, how a rule's hostname matches one, and the hostname
 * rule's lookup.
 */

/*
 * A DNS name s into out (NET_HOSTNAME_MAX + 1 bytes): lower case, the
 * trailing dot dropped. Labels of letters, digits and inner hyphens, 1 to
 * NET_LABEL_MAX long, the last not all digits (that is an address). With
 * allow_wildcard, a leading "*." is taken off and *wildcard set. -EINVAL
 * if s is not such a name.
 */
int __must_check net_hostname__normalize(const char *s, char *out,
					 bool allow_wildcard, bool *wildcard);

/*
 * Whether name (normalized) is host, or with wildcard a name below it
 * ("a.host", "b.a.host", not "host").
 */
bool net_hostname__matches(const char *name, const char *host, bool wildcard);

/*
 * Whether b binds addr (network byte order) now to host (normalized), or
 * with wildcard to a name below host ("a.host", "b.a.host", not "host").
 */
bool net_bindings__match(const struct net_bindings *b, const char *host,
			 bool wildcard, uint32_t addr);

#endif
