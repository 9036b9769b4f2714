// SPDX-License-Identifier: GPL-2.0
/*
 * The SYN filter's content for a policy (synmap.h): what the policy's
 * rules and the resolver's bindings can grant, as prefixes and ports.
 * Written to the program by synmap-egress.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "net/policy-internal.h"
#include "net/synmap.h"

#define PORT_MAX 65535U

static void all_ports(struct egress_syn_ports *v)
{
	*v = (struct egress_syn_ports){
		.nr = 1, .range[0] = { .lo = 0, .hi = PORT_MAX }
	};
}

static int range_cmp(const void *a, const void *b)
{
	const struct egress_port_range *x = a, *y = b;

	return (int)x->lo - (int)y->lo;
}

void net_synmap__union(struct egress_syn_ports *v,
		       const struct egress_syn_ports *add)
{
	struct egress_port_range r[2 * EGRESS_SYN_MAX_RANGES];
	unsigned int n = 0, out = 0;

	for (unsigned int i = 0; i < v->nr && i < EGRESS_SYN_MAX_RANGES; i++)
		r[n++] = v->range[i];
	for (unsigned int i = 0; i < add->nr && i < EGRESS_SYN_MAX_RANGES; i++)
		r[n++] = add->range[i];
	qsort(r, n, sizeof(r[0]), range_cmp);
	/* Overlapping or adjacent ranges become one. */
	for (unsigned int i = 0; i < n; i++) {
		if (out && (unsigned int)r[out - 1].hi + 1 >= r[i].lo) {
			if (r[i].hi > r[out - 1].hi)
				r[out - 1].hi = r[i].hi;
			continue;
		}
		r[out++] = r[i];
	}
	if (out > EGRESS_SYN_MAX_RANGES) {
		all_ports(v);
		return;
	}
	v->nr = out;
	memcpy(v->range, r, out * sizeof(r[0]));
}

bool net_synmap__port(const struct egress_syn_ports *v, uint16_t port)
{
	for (unsigned int i = 0; i < v->nr && i < EGRESS_SYN_MAX_RANGES; i++)
		if (port >= v->range[i].lo && port <= v->range[i].hi)
			return true;
	return false;
}

/* A rule's ports (none listed: every port) added to *v. */
static void rule_ports(const struct rule *r, struct egress_syn_ports *v)
{
	struct egress_syn_ports add = { 0 };

	if (!r->nr_ports) {
		all_ports(&add);
	} else {
		/* Up to NET_POLICY_MAX_PORTS: a chunk at a time. */
		for (unsigned int i = 0; i < r->nr_ports; i++) {
			if (add.nr == EGRESS_SYN_MAX_RANGES) {
				net_synmap__union(v, &add);
				add.nr = 0;
			}
			add.range[add.nr].lo = r->ports[i].lo;
			add.range[add.nr].hi = r->ports[i].hi;
			add.nr++;
		}
	}
	net_synmap__union(v, &add);
}

static bool host_rule_matches(const struct rule *r, const char *host)
{
	return r->kind == DEST_HOST &&
	       net_hostname__matches(host, r->host, r->wildcard);
}

void net_synmap__host_ports(const struct net_policy *p, const char *host,
			    struct egress_syn_ports *v)
{
	for (unsigned int i = 0; p && i < p->nr_rules[PROTO_TCP]; i++)
		if (host_rule_matches(&p->rules[PROTO_TCP][i], host))
			rule_ports(&p->rules[PROTO_TCP][i], v);
	for (unsigned int i = 0; p && i < p->nr_http; i++)
		if (host_rule_matches(&p->http[i].r, host))
			rule_ports(&p->http[i].r, v);
}

/* ---- building ------------------------------------------------------------ */

struct builder {
	const struct net_policy *p;
	struct net_synmap_entry *e;
	unsigned int nr, cap;
	int ret;
};

static void add(struct builder *bd, uint32_t addr, unsigned int prefix,
		const struct egress_syn_ports *ports)
{
	struct net_synmap_entry *e;

	if (bd->ret || !ports->nr)
		return;
	if (bd->nr == bd->cap) {
		unsigned int cap = bd->cap ? 2 * bd->cap : 64;

		e = reallocarray(bd->e, cap, sizeof(*e));
		if (!e) {
			bd->ret = -ENOMEM;
			return;
		}
		bd->e = e;
		bd->cap = cap;
	}
	e = &bd->e[bd->nr++];
	memset(e, 0, sizeof(*e));
	e->key.prefixlen = prefix;
	e->key.addr = addr & htonl(net_prefix_mask(prefix));
	e->ports = *ports;
}

static void add_binding(void *arg, const char *name, uint32_t addr)
{
	struct builder *bd = arg;
	struct egress_syn_ports ports = { 0 };

	net_synmap__host_ports(bd->p, name, &ports);
	add(bd, addr, EGRESS_SYN_ADDR_BITS, &ports);
}

static unsigned int mask_len(uint32_t mask)
{
	return mask ? 32U - (unsigned int)__builtin_ctz(mask) : 0;
}

static int entry_cmp(const void *a, const void *b)
{
	const struct net_synmap_entry *x = a, *y = b;
	uint32_t ax = ntohl(x->key.addr), ay = ntohl(y->key.addr);

	if (x->key.prefixlen != y->key.prefixlen)
		return x->key.prefixlen < y->key.prefixlen ? -1 : 1;
	return ax < ay ? -1 : ax > ay;
}

static bool holds(const struct egress_syn_key *outer,
		  const struct egress_syn_key *inner)
{
	uint32_t mask = htonl(net_prefix_mask(outer->prefixlen));

	return outer->prefixlen <= inner->prefixlen &&
	       (inner->addr & mask) == outer->addr;
}

/*
 * Sorted, then each prefix once (its ports merged), then each with the
 * ports of every shorter prefix that holds it: those come first, and
 * have theirs already.
 */
static void merge(struct builder *bd)
{
	unsigned int out = 0;

	if (!bd->nr) /* bd->e is NULL: nothing was added */
		return;
	qsort(bd->e, bd->nr, sizeof(bd->e[0]), entry_cmp);
	for (unsigned int i = 0; i < bd->nr; i++) {
		if (out && !entry_cmp(&bd->e[out - 1], &bd->e[i])) {
			net_synmap__union(&bd->e[out - 1].ports,
					  &bd->e[i].ports);
			continue;
		}
		bd->e[out++] = bd->e[i];
	}
	bd->nr = out;
	for (unsigned int i = 0; i < bd->nr; i++)
		for (unsigned int j = 0; j < i; j++) {
			if (bd->e[j].key.prefixlen >= bd->e[i].key.prefixlen)
				break;
			if (holds(&bd->e[j].key, &bd->e[i].key))
				net_synmap__union(&bd->e[i].ports,
						  &bd->e[j].ports);
		}
}

int net_synmap__build(struct net_synmap *m, const struct net_policy *p,
		      const struct net_bindings *b)
{
	struct builder bd = { .p = p };

	*m = (struct net_synmap){ 0 };
	if (p && p->hook_socket) {
		m->open = true;
		return 0;
	}
	for (unsigned int i = 0; p && i < p->nr_rules[PROTO_TCP]; i++) {
		const struct rule *r = &p->rules[PROTO_TCP][i];
		struct egress_syn_ports ports = { 0 };

		rule_ports(r, &ports);
		if (r->kind == DEST_CIDR)
			add(&bd, htonl(r->net), mask_len(r->mask), &ports);
		else if (r->kind == DEST_CLASS)
			add(&bd, 0, 0, &ports);
	}
	if (b)
		net_bindings__for_each(b, add_binding, &bd);
	if (bd.ret) {
		free(bd.e);
		return bd.ret;
	}
	merge(&bd);
	if (bd.nr > EGRESS_SYN_MAX_ENTRIES) {
		free(bd.e);
		m->open = true;
		return 0;
	}
	m->e = bd.e;
	m->nr = bd.nr;
	return 0;
}

void net_synmap__release(struct net_synmap *m)
{
	free(m->e);
	*m = (struct net_synmap){ 0 };
}

bool net_synmap__allows(const struct net_synmap *m, uint32_t addr,
			uint16_t port)
{
	const struct egress_syn_key k = { .prefixlen = EGRESS_SYN_ADDR_BITS,
					  .addr = addr };
	const struct net_synmap_entry *best = NULL;

	if (m->open)
		return true;
	for (unsigned int i = 0; i < m->nr; i++)
		if (holds(&m->e[i].key, &k) &&
		    (!best || m->e[i].key.prefixlen > best->key.prefixlen))
			best = &m->e[i];
	return best && net_synmap__port(&best->ports, port);
}
