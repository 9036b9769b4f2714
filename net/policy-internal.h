/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_POLICY_INTERNAL_H
#define KILN_VMM_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/policy.h"

/*
 * Between policy.c and bindings.c only: how a rule's hostname matches
 * one, and the hostname rule's lookup (the one spelling of a hostname,
 * net_hostname__normalize(), is in policy.h).
 */

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
