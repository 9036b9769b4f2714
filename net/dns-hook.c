// SPDX-License-Identifier: GPL-2.0
/*
 * DNS through the hook (dns-internal.h, Documentation/network.md "DNS
 * through the hook"): a guest's question as a hook line, the hook's
 * answer read as untrusted bytes, and the grants kept per name and type
 * for their answer's TTL. The resolver's thread owns all of it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/compiler.h"
#include "lib/log.h"
#include "lib/resident.h"
#include "net/dns-internal.h"
#include "net/policy.h"

/* "255.255.255.255:65535" and its NUL. */
#define ADDR_PORT_STRLEN (INET_ADDRSTRLEN + sizeof(":65535") - 1)
#define ASCII_FIRST	 ' '
#define ASCII_LAST	 '~'
#define MS_PER_S	 1000ULL

static void addr_port(const struct sockaddr_in *a, char out[ADDR_PORT_STRLEN])
{
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(out, ADDR_PORT_STRLEN, "%s:%u", ip, ntohs(a->sin_port));
}

static bool name_byte_plain(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '_';
}

void dns_hook__name(const uint8_t *wire, size_t len,
		    char out[DNS_HOOK_NAME_MAX])
{
	size_t pos = 0, n = 0;
	uint8_t l;

	/* A parsed name: its labels fit in len and end with the root's 0. */
	while (pos < len && (l = wire[pos]) && pos + 1 + l <= len) {
		if (n)
			out[n++] = '.';
		for (unsigned int i = 0; i < l; i++) {
			uint8_t c = wire[pos + 1 + i];

			if (name_byte_plain(c))
				out[n++] = (char)c;
			else
				n += (size_t)snprintf(out + n,
						      DNS_HOOK_NAME_MAX - n,
						      "\\%03u", c);
		}
		pos += 1 + l;
	}
	if (!n)
		out[n++] = '.';
	out[n] = '\0';
}

/* The types a hook is likely to decide on, by their mnemonic. */
static const struct {
	uint16_t type;
	const char *name;
} qtypes[] = {
	{ 1, "A" },	{ 2, "NS" },	 { 5, "CNAME" }, { 6, "SOA" },
	{ 12, "PTR" },	{ 15, "MX" },	 { 16, "TXT" },	 { 28, "AAAA" },
	{ 33, "SRV" },	{ 35, "NAPTR" }, { 64, "SVCB" }, { 65, "HTTPS" },
	{ 255, "ANY" }, { 257, "CAA" },
};

void dns_hook__qtype(uint16_t type, char out[16])
{
	for (size_t i = 0; i < ARRAY_SIZE(qtypes); i++)
		if (qtypes[i].type == type) {
			snprintf(out, 16, "%s", qtypes[i].name);
			return;
		}
	snprintf(out, 16, "TYPE%u", type);
}

int dns_hook__question(char *buf, size_t len, uint64_t id, const void *arg)
{
	const struct dns_hook_question *q = arg;
	char src[ADDR_PORT_STRLEN], dst[ADDR_PORT_STRLEN];
	char name[DNS_HOOK_NAME_MAX], qtype[16];
	json_t *o;
	size_t n;

	addr_port(&q->src, src);
	addr_port(&q->dst, dst);
	dns_hook__name(q->q->name, q->q->name_len, name);
	dns_hook__qtype(q->q->type, qtype);
	o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s, s:s}", "id",
		      (json_int_t)id, "type", "dns", "proto",
		      q->tcp ? "tcp" : "udp", "src", src, "dst", dst, "name",
		      name, "qtype", qtype);
	if (!o)
		return -ENOMEM;
	n = json_dumpb(o, buf, len, 0);
	json_decref(o);
	if (!n)
		return -ENOMEM;
	if (n + 1 > len)
		return -ENOSPC;
	buf[n] = '\n';
	return (int)(n + 1);
}

/* s as printable ASCII (else '?') into a->why, cut short. */
static void set_why(struct dns_hook_answer *a, const char *s)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < sizeof(a->why); i++)
		a->why[i] =
			s[i] >= ASCII_FIRST && s[i] <= ASCII_LAST ? s[i] : '?';
	a->why[i] = '\0';
}

/* "resolvers" into a: NULL, or the rule it broke. */
static const char *read_resolvers(json_t *arr, struct dns_hook_answer *a)
{
	json_t *v;
	size_t i;

	if (!json_is_array(arr))
		return "resolvers not an array";
	if (!json_array_size(arr))
		return "no resolvers";
	if (json_array_size(arr) > DNS_HOOK_MAX_RESOLVERS)
		return "too many resolvers";
	json_array_foreach(arr, i, v)
	{
		if (!json_is_string(v))
			return "resolver not a string";
		if (net_policy__parse_resolver(json_string_value(v),
					       &a->resolvers[i]))
			return "resolver not an IPv4 unicast address[:port]";
	}
	a->nr_resolvers = (unsigned int)i;
	return NULL;
}

/* Whether s names q's name: without case, a trailing dot or not. */
static bool names_question(const char *s, const struct dns_question *q)
{
	char name[DNS_HOOK_NAME_MAX];
	size_t n = strlen(s), m;

	dns_hook__name(q->name, q->name_len, name);
	m = strlen(name);
	if (n > 1 && s[n - 1] == '.')
		n--;
	return n == m && !strncasecmp(s, name, n);
}

static void read_answer(json_t *o, const struct dns_question *q,
			struct dns_hook_answer *a)
{
	const char *v = json_string_value(json_object_get(o, "verdict"));
	json_t *reason = json_object_get(o, "reason");
	json_t *name = json_object_get(o, "name");
	const char *why = NULL;

	if (!v) {
		a->verdict = DNS_HOOK_INVALID;
		set_why(a, "verdict not a string");
		return;
	}
	if (!strcmp(v, "deny")) {
		a->verdict = DNS_HOOK_DENY;
		set_why(a, json_is_string(reason) ? json_string_value(reason) :
						    "");
		return;
	}
	if (strcmp(v, "grant-dns")) {
		a->verdict = DNS_HOOK_UNKNOWN;
		set_why(a, v);
		return;
	}
	if (name && (!json_is_string(name) ||
		     !names_question(json_string_value(name), q)))
		why = "name not the question's";
	if (!why)
		why = read_resolvers(json_object_get(o, "resolvers"), a);
	if (why) {
		a->verdict = DNS_HOOK_INVALID;
		a->nr_resolvers = 0;
		set_why(a, why);
		return;
	}
	a->verdict = DNS_HOOK_GRANT;
	set_why(a, json_is_string(reason) ? json_string_value(reason) : "");
}

void dns_hook__answer(const char *line, size_t n, const struct dns_question *q,
		      struct dns_hook_answer *a)
{
	json_error_t err;
	json_t *o;

	*a = (struct dns_hook_answer){ .verdict = DNS_HOOK_INVALID };
	o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &err);
	if (!json_is_object(o))
		set_why(a, "not a JSON object");
	else
		read_answer(o, q, a);
	json_decref(o);
}

void dns_hook__log(struct dns_hook_log *l, uint64_t now_ms,
		   const struct dns_question *q, bool tcp,
		   const struct sockaddr_in *src, const struct sockaddr_in *dst,
		   bool refused, const char *reason, const char *detail)
{
	char s[ADDR_PORT_STRLEN], t[ADDR_PORT_STRLEN];
	char name[DNS_HOOK_NAME_MAX], qtype[16];

	if (now_ms - l->window_ms >= DNS_HOOK_LOG_WINDOW_MS) {
		if (l->suppressed)
			pr_warn("dns: %llu more refusals not logged",
				(unsigned long long)l->suppressed);
		l->window_ms = now_ms;
		l->lines = 0;
		l->suppressed = 0;
	}
	if (l->lines >= DNS_HOOK_LOG_BURST) {
		l->suppressed++;
		return;
	}
	l->lines++;
	addr_port(src, s);
	addr_port(dst, t);
	dns_hook__name(q->name, q->name_len, name);
	dns_hook__qtype(q->type, qtype);
	pr_warn("dns: %s %s %s %s %s -> %s: %s%s%s%s",
		refused ? "refused" : "servfail", qtype, name,
		tcp ? "tcp" : "udp", s, t, reason, detail[0] ? " (" : "",
		detail, detail[0] ? ")" : "");
}

/* ---- the grants kept ----------------------------------------------------- */

struct grant {
	bool used;
	uint8_t name[DNS_NAME_WIRE_MAX];
	size_t name_len;
	uint16_t type;
	uint64_t expires_ms;
	struct sockaddr_in res[DNS_HOOK_MAX_RESOLVERS];
	unsigned int nr_res;
};

struct dns_hook_cache {
	unsigned int max;
	struct grant *g; /* max */
};

struct dns_hook_cache *dns_hook_cache__create(unsigned int max)
{
	struct dns_hook_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->max = max ? max : DNS_HOOK_CACHE_MAX;
	/* Untouched until grants are kept (resident__table). */
	c->g = resident__table(c->max, sizeof(*c->g));
	if (!c->g) {
		free(c);
		return NULL;
	}
	return c;
}

void dns_hook_cache__destroy(struct dns_hook_cache *c)
{
	if (!c)
		return;
	resident__free_table(c->g, c->max, sizeof(*c->g));
	free(c);
}

static bool grant_is(const struct grant *g, const struct dns_question *q)
{
	return g->used && g->type == q->type && g->name_len == q->name_len &&
	       !memcmp(g->name, q->name, q->name_len);
}

unsigned int dns_hook_cache__lookup(const struct dns_hook_cache *c,
				    const struct dns_question *q,
				    uint64_t now_ms, struct sockaddr_in *res)
{
	for (unsigned int i = 0; i < c->max; i++) {
		const struct grant *g = &c->g[i];

		if (!grant_is(g, q) || g->expires_ms <= now_ms)
			continue;
		memcpy(res, g->res, g->nr_res * sizeof(*res));
		return g->nr_res;
	}
	return 0;
}

/* q's own entry, a free or expired one, or the one expiring soonest. */
static struct grant *slot_for(struct dns_hook_cache *c,
			      const struct dns_question *q, uint64_t now_ms)
{
	struct grant *free_g = NULL, *soonest = NULL;

	for (unsigned int i = 0; i < c->max; i++) {
		struct grant *g = &c->g[i];

		if (grant_is(g, q))
			return g;
		if (!free_g && (!g->used || g->expires_ms <= now_ms))
			free_g = g;
		if (g->used &&
		    (!soonest || g->expires_ms < soonest->expires_ms))
			soonest = g;
	}
	return free_g ? free_g : soonest;
}

void dns_hook_cache__insert(struct dns_hook_cache *c,
			    const struct dns_question *q,
			    const struct sockaddr_in *res, unsigned int nr,
			    uint32_t ttl_s, uint64_t now_ms)
{
	struct grant *g;

	if (!nr || nr > DNS_HOOK_MAX_RESOLVERS ||
	    q->name_len > DNS_NAME_WIRE_MAX)
		return;
	if (ttl_s < DNS_HOOK_MIN_TTL_S)
		ttl_s = DNS_HOOK_MIN_TTL_S;
	if (ttl_s > DNS_HOOK_MAX_TTL_S)
		ttl_s = DNS_HOOK_MAX_TTL_S;
	g = slot_for(c, q, now_ms);
	*g = (struct grant){ .used = true,
			     .name_len = q->name_len,
			     .type = q->type,
			     .expires_ms = now_ms + ttl_s * MS_PER_S,
			     .nr_res = nr };
	memcpy(g->name, q->name, q->name_len);
	memcpy(g->res, res, nr * sizeof(*res));
}

/* Only the entries in use are written: the others may be untouched. */
void dns_hook_cache__flush(struct dns_hook_cache *c)
{
	for (unsigned int i = 0; i < c->max; i++)
		if (c->g[i].used)
			c->g[i] = (struct grant){ .used = false };
}

unsigned int dns_hook_cache__count(const struct dns_hook_cache *c)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < c->max; i++)
		n += c->g[i].used;
	return n;
}
