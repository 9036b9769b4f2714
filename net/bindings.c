// SPDX-License-Identifier: GPL-2.0
/*
 * Trusted DNS bindings (policy.h): hostname -> IPv4 address, each for its
 * answer's clamped TTL, in a bounded table indexed by address, the way a
 * new flow asks ("which names does this VM's DNS bind to this address?").
 * The names come from upstream answers a guest can steer, so the index
 * is keyed with SipHash and the table never grows past NET_BINDINGS_MAX.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "lib/compiler.h"
#include "lib/hashtable.h"
#include "lib/siphash.h"
#include "net/policy-internal.h"
#include "net/policy.h"

/* 1 << 12 buckets: one per binding when the table is full. */
#define BINDINGS_HASH_BITS 12U
#define MS_PER_S	   1000U
#define NS_PER_MS	   1000000U

struct binding {
	struct hlink link; /* keyed by the address's SipHash */
	uint32_t addr;	   /* network byte order */
	uint64_t expires;  /* clock ms; expired from then on */
	char name[];	   /* normalized (net_hostname__normalize) */
};

struct net_bindings {
	struct hashtable index;
	uint8_t key[SIPHASH__KEY_LEN];
	net_clock_fn clock;
	void *opaque;
};

static uint64_t monotonic_ms(void *opaque)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * MS_PER_S + ts.tv_nsec / NS_PER_MS;
}

static uint64_t now(const struct net_bindings *b)
{
	return b->clock(b->opaque);
}

static uint64_t addr_key(const struct net_bindings *b, uint32_t addr)
{
	return siphash__24(b->key, &addr, sizeof(addr));
}

struct net_bindings *net_bindings__create(net_clock_fn clock, void *opaque)
{
	struct net_bindings *b;
	uint64_t t;

	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	if (hashtable__init(&b->index, BINDINGS_HASH_BITS)) {
		free(b);
		return NULL;
	}
	b->clock = clock ? clock : monotonic_ms;
	b->opaque = opaque;
	/*
	 * No entropy yet (early boot): the clock still makes the key
	 * unknown in advance, which is all the index needs.
	 */
	if (getrandom(b->key, sizeof(b->key), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(b->key)) {
		t = monotonic_ms(NULL) ^ (uintptr_t)b;
		memcpy(b->key, &t, sizeof(t));
	}
	return b;
}

static void drop(struct net_bindings *b, struct binding *e)
{
	hashtable__del(&b->index, &e->link);
	free(e);
}

void net_bindings__destroy(struct net_bindings *b)
{
	struct hlink *l, *n;
	size_t i;

	if (!b)
		return;
	hashtable__for_each_safe(&b->index, i, l, n)
		drop(b, hashtable__entry(l, struct binding, link));
	hashtable__exit(&b->index);
	free(b);
}

unsigned int net_bindings__expire(struct net_bindings *b)
{
	uint64_t t = now(b);
	unsigned int dropped = 0;
	struct hlink *l, *n;
	size_t i;

	hashtable__for_each_safe(&b->index, i, l, n)
	{
		struct binding *e = hashtable__entry(l, struct binding, link);

		if (t >= e->expires) {
			drop(b, e);
			dropped++;
		}
	}
	return dropped;
}

/* Room for one more: the expired go first, then the soonest to expire. */
static void make_room(struct net_bindings *b)
{
	struct binding *soonest = NULL;
	struct hlink *l, *n;
	size_t i;

	if (b->index.count < NET_BINDINGS_MAX || net_bindings__expire(b))
		return;
	hashtable__for_each_safe(&b->index, i, l, n)
	{
		struct binding *e = hashtable__entry(l, struct binding, link);

		if (!soonest || e->expires < soonest->expires)
			soonest = e;
	}
	if (soonest)
		drop(b, soonest);
}

static struct binding *find(const struct net_bindings *b, const char *name,
			    uint32_t addr)
{
	struct hlink *l;

	for (l = hashtable__first(&b->index, addr_key(b, addr)); l;
	     l = hashtable__next(l)) {
		struct binding *e = hashtable__entry(l, struct binding, link);

		if (e->addr == addr && !strcmp(e->name, name))
			return e;
	}
	return NULL;
}

static uint64_t clamp_ttl(uint32_t ttl_s)
{
	if (ttl_s < NET_BINDING_MIN_TTL_S)
		ttl_s = NET_BINDING_MIN_TTL_S;
	if (ttl_s > NET_BINDING_MAX_TTL_S)
		ttl_s = NET_BINDING_MAX_TTL_S;
	return (uint64_t)ttl_s * MS_PER_S;
}

int net_bindings__insert(struct net_bindings *b, const char *host,
			 uint32_t addr, uint32_t ttl_s)
{
	char name[NET_HOSTNAME_MAX + 1];
	struct binding *e;
	bool wildcard;
	size_t n;

	if (net_hostname__normalize(host, name, false, &wildcard))
		return -EINVAL;
	e = find(b, name, addr);
	if (e) {
		e->expires = now(b) + clamp_ttl(ttl_s);
		return 0;
	}
	make_room(b);
	n = strlen(name) + 1;
	e = malloc(sizeof(*e) + n);
	if (!e)
		return -ENOMEM;
	e->addr = addr;
	e->expires = now(b) + clamp_ttl(ttl_s);
	memcpy(e->name, name, n);
	hashtable__add(&b->index, &e->link, addr_key(b, addr));
	return 0;
}

bool net_hostname__matches(const char *name, const char *host, bool wildcard)
{
	size_t n = strlen(name), h = strlen(host);

	if (!wildcard)
		return !strcmp(name, host);
	return n > h + 1 && name[n - h - 1] == '.' &&
	       !strcmp(name + n - h, host);
}

bool net_bindings__match(const struct net_bindings *b, const char *host,
			 bool wildcard, uint32_t addr)
{
	uint64_t t = now(b);
	struct hlink *l;

	for (l = hashtable__first(&b->index, addr_key(b, addr)); l;
	     l = hashtable__next(l)) {
		struct binding *e = hashtable__entry(l, struct binding, link);

		if (e->addr == addr && t < e->expires &&
		    net_hostname__matches(e->name, host, wildcard))
			return true;
	}
	return false;
}

bool net_bindings__lookup(const struct net_bindings *b, const char *host,
			  uint32_t addr)
{
	char name[NET_HOSTNAME_MAX + 1];
	bool wildcard;

	if (net_hostname__normalize(host, name, false, &wildcard))
		return false;
	return net_bindings__match(b, name, false, addr);
}

/*
 * name into the sorted names[*n] (at most max): in its place, the
 * highest falling off a full array; a name already there is skipped.
 */
static void insert_sorted(char (*names)[NET_HOSTNAME_MAX + 1], unsigned int *n,
			  unsigned int max, const char *name)
{
	unsigned int i = *n;
	int cmp = 1;

	while (i > 0 && (cmp = strcmp(names[i - 1], name)) > 0)
		i--;
	if ((i > 0 && !cmp) || i == max)
		return;
	if (*n < max)
		(*n)++;
	memmove(names[i + 1], names[i], (*n - 1 - i) * sizeof(names[0]));
	snprintf(names[i], sizeof(names[i]), "%s", name);
}

unsigned int net_bindings__names(const struct net_bindings *b, uint32_t addr,
				 char (*names)[NET_HOSTNAME_MAX + 1],
				 unsigned int max)
{
	uint64_t t = now(b);
	unsigned int n = 0;
	struct hlink *l;

	for (l = hashtable__first(&b->index, addr_key(b, addr)); l;
	     l = hashtable__next(l)) {
		struct binding *e = hashtable__entry(l, struct binding, link);

		if (e->addr == addr && t < e->expires)
			insert_sorted(names, &n, max, e->name);
	}
	return n;
}

void net_bindings__for_each(const struct net_bindings *b,
			    void (*fn)(void *arg, const char *name,
				       uint32_t addr),
			    void *arg)
{
	uint64_t t = now(b);
	struct hlink *l, *n;
	size_t i;

	hashtable__for_each_safe(&b->index, i, l, n)
	{
		struct binding *e = hashtable__entry(l, struct binding, link);

		if (t < e->expires)
			fn(arg, e->name, e->addr);
	}
}

size_t net_bindings__count(const struct net_bindings *b)
{
	return b->index.count;
}
