// SPDX-License-Identifier: GPL-2.0
/*
 * The network policy (policy.h), deciding: each new flow and each
 * intercepted request matched against the parsed policy, default deny.
 * Hostname rules match through the trusted DNS bindings (bindings.c).
 * The policy is parsed from JSON, and checked key by key, in
 * policy-parse.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "net/policy-internal.h"
#include "net/policy.h"

/*
 * The address classes by their ranges, host byte order. The first range
 * that holds an address gives its class, so 255.255.255.255 is broadcast
 * before 240.0.0.0/4 makes it reserved; public-internet is what no range
 * holds.
 */
static const struct {
	enum net_addr_class cls;
	uint32_t base;
	unsigned int prefix;
	const char *rfc;
} class_ranges[] = {
	{ NET_CLASS_LOOPBACK, 0x7f000000, 8, "RFC 1122 3.2.1.3" },
	{ NET_CLASS_PRIVATE, 0x0a000000, 8, "RFC 1918" },
	{ NET_CLASS_PRIVATE, 0xac100000, 12, "RFC 1918" },
	{ NET_CLASS_PRIVATE, 0xc0a80000, 16, "RFC 1918" },
	{ NET_CLASS_PRIVATE, 0x64400000, 10, "RFC 6598 (shared, CGN)" },
	{ NET_CLASS_LINK_LOCAL, 0xa9fe0000, 16, "RFC 3927" },
	{ NET_CLASS_MULTICAST, 0xe0000000, 4, "RFC 5771" },
	{ NET_CLASS_BROADCAST, 0xffffffff, 32, "RFC 919 (limited broadcast)" },
	{ NET_CLASS_DOCUMENTATION, 0xc0000200, 24, "RFC 5737 TEST-NET-1" },
	{ NET_CLASS_DOCUMENTATION, 0xc6336400, 24, "RFC 5737 TEST-NET-2" },
	{ NET_CLASS_DOCUMENTATION, 0xcb007100, 24, "RFC 5737 TEST-NET-3" },
	{ NET_CLASS_RESERVED, 0x00000000, 8,
	  "RFC 1122 3.2.1.3 (this network)" },
	{ NET_CLASS_RESERVED, 0xc0000000, 24, "RFC 6890 (IETF assignments)" },
	{ NET_CLASS_RESERVED, 0xc0586300, 24, "RFC 7526 (6to4 relay anycast)" },
	{ NET_CLASS_RESERVED, 0xc6120000, 15, "RFC 2544 (benchmarking)" },
	{ NET_CLASS_RESERVED, 0xf0000000, 4, "RFC 1112 4 (class E)" },
};

_Static_assert(sizeof("public-internet") <= NET_CLASS_NAME_MAX,
	       "the longest class name fits in a question");

static const char *const class_names[] = {
	[NET_CLASS_LOOPBACK] = "loopback",
	[NET_CLASS_PRIVATE] = "private",
	[NET_CLASS_LINK_LOCAL] = "link-local",
	[NET_CLASS_MULTICAST] = "multicast",
	[NET_CLASS_BROADCAST] = "broadcast",
	[NET_CLASS_DOCUMENTATION] = "documentation",
	[NET_CLASS_RESERVED] = "reserved",
	[NET_CLASS_PUBLIC_INTERNET] = "public-internet",
};

enum net_addr_class net_policy__classify(uint32_t addr)
{
	uint32_t a = ntohl(addr);
	size_t i;

	for (i = 0; i < ARRAY_SIZE(class_ranges); i++)
		if ((a & net_prefix_mask(class_ranges[i].prefix)) ==
		    class_ranges[i].base)
			return class_ranges[i].cls;
	return NET_CLASS_PUBLIC_INTERNET;
}

const char *net_policy__class_name(enum net_addr_class c)
{
	if ((size_t)c < ARRAY_SIZE(class_names))
		return class_names[c];
	return "?";
}

int net_policy__class_by_name(const char *s)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(class_names); i++)
		if (!strcmp(s, class_names[i]))
			return i;
	return -1;
}

bool net_rule__port_matches(const struct rule *r, uint16_t port)
{
	unsigned int i;

	if (!r->nr_ports)
		return true;
	for (i = 0; i < r->nr_ports; i++)
		if (port >= r->ports[i].lo && port <= r->ports[i].hi)
			return true;
	return false;
}

bool net_http_grant__tls(const struct http_grant *g, uint16_t port)
{
	for (unsigned int i = 0; i < g->nr_tls; i++)
		if (g->tls[i] == port)
			return true;
	return false;
}

void net_policy__set_gateway(struct net_policy *p, uint32_t gateway)
{
	if (p)
		p->gateway = gateway;
}

int net_hostname__normalize(const char *s, char *out, bool allow_wildcard,
			    bool *wildcard)
{
	size_t n = strlen(s), i, label = 0;
	bool numeric = true;

	*wildcard = false;
	if (n && s[n - 1] == '.')
		n--; /* the root's dot */
	if (allow_wildcard && n > 2 && s[0] == '*' && s[1] == '.') {
		*wildcard = true;
		s += 2;
		n -= 2;
	}
	if (!n || n > NET_HOSTNAME_MAX)
		return -EINVAL;
	for (i = 0; i <= n; i++) {
		char c = i < n ? s[i] : '.';

		if (c == '.') {
			/* Empty, too long, or a hyphen at either end. */
			if (!label || label > NET_LABEL_MAX || s[i - 1] == '-')
				return -EINVAL;
			if (i == n)
				break;
			label = 0;
			numeric = true;
			out[i] = c;
			continue;
		}
		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (c == '-' && !label)
			return -EINVAL;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '-'))
			return -EINVAL;
		if (c < '0' || c > '9')
			numeric = false;
		out[i] = c;
		label++;
	}
	/* An all-numeric last label is an address, not a name (RFC 3696 2). */
	if (numeric)
		return -EINVAL;
	out[n] = '\0';
	return 0;
}

/* ---- what it holds --------------------------------------------------- */

static int proto_index(uint8_t proto)
{
	if (proto == IPPROTO_TCP)
		return PROTO_TCP;
	if (proto == IPPROTO_UDP)
		return PROTO_UDP;
	return -1;
}

unsigned int net_policy__nr_rules(const struct net_policy *p, uint8_t proto)
{
	int i = proto_index(proto);

	return p && i >= 0 ? p->nr_rules[i] : 0;
}

unsigned int net_policy__nr_resolvers(const struct net_policy *p)
{
	return p ? p->nr_resolvers : 0;
}

void net_policy__resolver(const struct net_policy *p, unsigned int i,
			  struct sockaddr_in *sa)
{
	*sa = p->resolvers[i];
}

const char *net_policy__hook(const struct net_policy *p,
			     unsigned int *timeout_ms)
{
	*timeout_ms = p ? p->hook_timeout_ms : 0;
	return p ? p->hook_socket : NULL;
}

const char *net_policy__dns_hook(const struct net_policy *p,
				 unsigned int *timeout_ms)
{
	if (p && p->has_dns)
		p = NULL; /* a static dns rule decides */
	return net_policy__hook(p, timeout_ms);
}

/* What a refused request gets (RFC 9110 15.5.4, 15.5.20). */
#define HTTP_STATUS_FORBIDDEN	403U
#define HTTP_STATUS_MISDIRECTED 421U

/* ---- deciding -------------------------------------------------------- */

static bool dest_matches(const struct rule *r, uint32_t dst,
			 const struct net_bindings *b)
{
	switch (r->kind) {
	case DEST_CIDR:
		return (ntohl(dst) & r->mask) == r->net;
	case DEST_CLASS:
		return net_policy__classify(dst) == r->cls;
	case DEST_HOST:
		return b && net_bindings__match(b, r->host, r->wildcard, dst);
	}
	return false;
}

/* Why f is denied whatever the rules; NULL: the rules decide. */
static const char *always_denied(const struct net_policy *p,
				 const struct net_flow *f)
{
	uint32_t dst = f->dst.sin_addr.s_addr;

	if (proto_index(f->proto) < 0 || f->dst.sin_family != AF_INET)
		return "not tcp or udp over ipv4";
	if (ntohl(dst) >> 24 == LOOPBACK_NET)
		return "host loopback";
	if (p && p->gateway && dst == p->gateway)
		return "host side of the tap";
	if (ntohl(dst) >> 24 == THIS_NETWORK_NET)
		return "this network";
	if (!f->dst.sin_port)
		return "port 0";
	return NULL;
}

/* What the proxy puts to the hook about f, copied out of p and b. */
static void ask_hook(const struct net_policy *p, const struct net_flow *f,
		     const struct net_bindings *b, struct net_decision *d)
{
	struct net_ask *a = &d->ask;
	uint32_t dst = f->dst.sin_addr.s_addr;

	d->verdict = NET_VERDICT_ASK;
	snprintf(a->socket, sizeof(a->socket), "%s", p->hook_socket);
	a->timeout_ms = p->hook_timeout_ms;
	snprintf(a->class_name, sizeof(a->class_name), "%s",
		 net_policy__class_name(net_policy__classify(dst)));
	a->nr_hostnames = b ? net_bindings__names(b, dst, a->hostnames,
						  NET_ASK_MAX_HOSTNAMES) :
			      0;
}

/*
 * Whether r names one address exactly: "A.B.C.D" (a /32), or a hostname
 * without a wildcard (through the bindings). Only such a rule opens an
 * address of the host's own (f->dst_local).
 */
static bool rule_exact(const struct rule *r)
{
	return (r->kind == DEST_CIDR && r->mask == ~0U) ||
	       (r->kind == DEST_HOST && !r->wildcard);
}

/*
 * The first http grant that covers a TCP flow to dst:port: the port is
 * one of its ports and b binds dst to a name it grants (exactly, when
 * only_exact). -1: none.
 */
static int http_flow_grant(const struct net_policy *p, uint32_t dst,
			   uint16_t port, const struct net_bindings *b,
			   bool only_exact)
{
	for (unsigned int i = 0; p && i < p->nr_http; i++)
		if ((!only_exact || rule_exact(&p->http[i].r)) &&
		    net_rule__port_matches(&p->http[i].r, port) &&
		    dest_matches(&p->http[i].r, dst, b))
			return i;
	return -1;
}

/* Whether the http grants' flows to port speak TLS (check_http_tls). */
static bool http_port_tls(const struct net_policy *p, uint16_t port)
{
	for (unsigned int i = 0; i < p->nr_http; i++)
		if (net_http_grant__tls(&p->http[i], port))
			return true;
	return false;
}

void net_policy__decide(const struct net_policy *p, const struct net_flow *f,
			const struct net_bindings *b, struct net_decision *d)
{
	const char *why = always_denied(p, f);
	uint16_t port = ntohs(f->dst.sin_port);
	int proto = proto_index(f->proto);
	unsigned int i;
	int g;

	d->verdict = NET_VERDICT_DENY;
	d->http_tls = false;
	if (why) {
		snprintf(d->reason, sizeof(d->reason), "%s", why);
		return;
	}
	/* Before the rules: a flow an http grant covers is intercepted. */
	g = proto == PROTO_TCP ? http_flow_grant(p, f->dst.sin_addr.s_addr,
						 port, b, f->dst_local) :
				 -1;
	if (g >= 0) {
		d->verdict = NET_VERDICT_HTTP;
		d->http_tls = http_port_tls(p, port);
		snprintf(d->reason, sizeof(d->reason), "http grant %d", g);
		return;
	}
	for (i = 0; p && i < p->nr_rules[proto]; i++) {
		const struct rule *r = &p->rules[proto][i];

		if (f->dst_local && !rule_exact(r))
			continue;
		if (net_rule__port_matches(r, port) &&
		    dest_matches(r, f->dst.sin_addr.s_addr, b)) {
			d->verdict = NET_VERDICT_ALLOW;
			snprintf(d->reason, sizeof(d->reason), "%s grant %u",
				 net_policy__proto_key(proto), i);
			return;
		}
	}
	/*
	 * The host's own address: denied unless named; the hook, asked
	 * about this exact address, may name it.
	 */
	snprintf(d->reason, sizeof(d->reason), "%s",
		 f->dst_local ? "host address" : "no grant");
	if (p && p->hook_socket)
		ask_hook(p, f, b, d);
}

/* Whether r names host (normalized) and covers port. */
static bool names_host(const struct rule *r, const char *host, uint16_t port)
{
	return r->kind == DEST_HOST && net_rule__port_matches(r, port) &&
	       net_hostname__matches(host, r->host, r->wildcard);
}

/* The first http grant, then rule, that names host: d filled, true. */
static bool check_name(const struct net_policy *p, int proto, const char *host,
		       uint16_t port, struct net_decision *d)
{
	unsigned int i;

	for (i = 0; p && proto == PROTO_TCP && i < p->nr_http; i++) {
		if (names_host(&p->http[i].r, host, port)) {
			d->verdict = NET_VERDICT_HTTP;
			d->http_tls = http_port_tls(p, port);
			snprintf(d->reason, sizeof(d->reason), "http grant %u",
				 i);
			return true;
		}
	}
	for (i = 0; p && i < p->nr_rules[proto]; i++) {
		if (names_host(&p->rules[proto][i], host, port)) {
			d->verdict = NET_VERDICT_ALLOW;
			snprintf(d->reason, sizeof(d->reason), "%s grant %u",
				 net_policy__proto_key(proto), i);
			return true;
		}
	}
	return false;
}

int net_policy__check(const struct net_policy *p, uint8_t proto, uint32_t addr,
		      uint16_t port, const char *hostname,
		      const struct net_bindings *b, struct net_decision *d)
{
	struct net_flow f = { .proto = proto };
	char host[NET_HOSTNAME_MAX + 1];
	int pi = proto_index(proto);
	bool wildcard;

	memset(d, 0, sizeof(*d));
	if (hostname &&
	    net_hostname__normalize(hostname, host, false, &wildcard))
		return -EINVAL;
	if (addr || !hostname) {
		f.dst.sin_family = AF_INET;
		f.dst.sin_addr.s_addr = addr;
		f.dst.sin_port = htons(port);
		net_policy__decide(p, &f, b, d);
		/* Granted, or denied whatever a name would say. */
		if (!hostname || d->verdict == NET_VERDICT_ALLOW ||
		    d->verdict == NET_VERDICT_HTTP || always_denied(p, &f))
			return 0;
	} else if (pi < 0 || !port) {
		snprintf(d->reason, sizeof(d->reason), "%s",
			 pi < 0 ? "not tcp or udp over ipv4" : "port 0");
		return 0;
	}
	if (pi >= 0 && check_name(p, pi, host, port, d))
		return 0;
	if (!addr) {
		d->verdict = p && p->hook_socket ? NET_VERDICT_ASK :
						   NET_VERDICT_DENY;
		snprintf(d->reason, sizeof(d->reason), "no grant names it");
	}
	return 0;
}

/*
 * Copies g's fields into d: the parser bounded them to its buffer. A
 * grant that asks the hook: NET_VERDICT_ASK, with where to ask.
 */
static void http_allow(const struct net_policy *p, const struct http_grant *g,
		       unsigned int i, struct net_http_decision *d)
{
	size_t used = 0, n;

	d->verdict = NET_VERDICT_ALLOW;
	snprintf(d->reason, sizeof(d->reason), "http grant %u", i);
	d->grant = i;
	d->response_ms = g->response_ms;
	d->trace = g->trace;
	d->clear_text = g->clear_text;
	if (g->ask != HTTP_ASK_NEVER && p->hook_socket) {
		d->verdict = NET_VERDICT_ASK;
		snprintf(d->hook_socket, sizeof(d->hook_socket), "%s",
			 p->hook_socket);
		d->hook_timeout_ms = p->hook_timeout_ms;
		d->ask_each_request = g->ask == HTTP_ASK_REQUEST;
	}
	for (unsigned int k = 0; k < g->nr_headers; k++) {
		const struct grant_header *h = &g->headers[k];

		n = strlen(h->name) + 1;
		d->headers[k].name = used;
		memcpy(d->buf + used, h->name, n);
		used += n;
		d->headers[k].value = used;
		d->headers[k].hook = h->from_hook;
		d->headers[k].remove = false;
		memcpy(d->buf + used, h->value, h->value_len + 1);
		used += h->value_len + 1;
	}
	d->nr_headers = g->nr_headers;
}

static void http_refuse(struct net_http_decision *d, unsigned int status,
			const char *reason)
{
	d->verdict = NET_VERDICT_DENY;
	d->status = status;
	snprintf(d->reason, sizeof(d->reason), "%s", reason);
}

/*
 * A request of a flow the hook's "grant-http" intercepts, its name
 * checked: put to the hook when the flow's grant says so, else allowed
 * with no field. A policy with no hook any more grants nothing (the
 * recheck cuts the flow).
 */
static void http_hook_flow(const struct net_policy *p,
			   struct net_http_decision *d)
{
	if (!p || !p->hook_socket)
		return http_refuse(d, HTTP_STATUS_FORBIDDEN, "http no grant");
	d->verdict = NET_VERDICT_ALLOW;
	snprintf(d->reason, sizeof(d->reason), "%s", NET_HOOK_GRANT_HTTP);
	d->grant = 0;
	d->response_ms = 0; /* the proxy's */
	d->ask_each_request = false;
	if (!d->hook_flow_each)
		return;
	d->verdict = NET_VERDICT_ASK;
	snprintf(d->hook_socket, sizeof(d->hook_socket), "%s", p->hook_socket);
	d->hook_timeout_ms = p->hook_timeout_ms;
	d->ask_each_request = true;
}

void net_policy__decide_http(const struct net_policy *p,
			     const struct net_flow *f, const char *host,
			     bool verified, const struct net_bindings *b,
			     struct net_http_decision *d)
{
	const char *why = always_denied(p, f);
	uint32_t dst = f->dst.sin_addr.s_addr;
	uint16_t port = ntohs(f->dst.sin_port);
	char name[NET_HOSTNAME_MAX + 1];
	bool wildcard;

	d->nr_headers = 0;
	d->trace = false;
	d->clear_text = false;
	if (why || f->proto != IPPROTO_TCP)
		return http_refuse(d, HTTP_STATUS_FORBIDDEN,
				   why ? why : "not tcp");
	/* An address, or no name at all, advertises no trusted name. */
	if (!host || net_hostname__normalize(host, name, false, &wildcard))
		return http_refuse(d, HTTP_STATUS_MISDIRECTED,
				   "http host not a name");
	if (!verified && !(b && net_bindings__match(b, name, false, dst)))
		return http_refuse(d, HTTP_STATUS_MISDIRECTED,
				   "http host mismatch");
	if (d->hook_flow && d->hook_host[0] && strcmp(name, d->hook_host))
		return http_refuse(d, HTTP_STATUS_MISDIRECTED,
				   "http host mismatch");
	/*
	 * The hook's grant-http answered this exact flow: like its tcp
	 * grant, it names the address, a host address included.
	 */
	if (d->hook_flow)
		return http_hook_flow(p, d);
	for (unsigned int i = 0; p && i < p->nr_http; i++) {
		const struct http_grant *g = &p->http[i];

		if (f->dst_local && !rule_exact(&g->r))
			continue;
		if (net_rule__port_matches(&g->r, port) &&
		    net_hostname__matches(name, g->r.host, g->r.wildcard))
			return http_allow(p, g, i, d);
	}
	http_refuse(d, HTTP_STATUS_FORBIDDEN,
		    f->dst_local ? "host address" : "http no grant");
}

unsigned int net_policy__nr_http(const struct net_policy *p)
{
	return p ? p->nr_http : 0;
}

/* ---- the resolver's names ------------------------------------------- */

struct net_dns_names {
	bool any;
	unsigned int nr;
	struct dns_name names[]; /* hosts in the same allocation, after */
};

/* Calls fn on each name p lets the resolver forward (but "*"). */
static void each_dns_name(const struct net_policy *p,
			  void (*fn)(void *arg, const char *host, bool wc),
			  void *arg)
{
	for (unsigned int i = 0; i < p->nr_dns_names; i++)
		fn(arg, p->dns_names[i].host, p->dns_names[i].wildcard);
	for (unsigned int proto = 0; proto < PROTO_COUNT; proto++)
		for (unsigned int i = 0; i < p->nr_rules[proto]; i++)
			if (p->rules[proto][i].kind == DEST_HOST)
				fn(arg, p->rules[proto][i].host,
				   p->rules[proto][i].wildcard);
	for (unsigned int i = 0; i < p->nr_http; i++)
		fn(arg, p->http[i].r.host, p->http[i].r.wildcard);
}

struct names_size {
	size_t nr, bytes;
};

static void names_size(void *arg, const char *host, bool wc)
{
	struct names_size *n = arg;

	(void)wc;
	n->nr++;
	n->bytes += strlen(host) + 1;
}

struct names_fill {
	struct net_dns_names *s;
	char *pool;
};

static void names_fill(void *arg, const char *host, bool wc)
{
	struct names_fill *f = arg;
	size_t n = strlen(host) + 1;

	memcpy(f->pool, host, n);
	f->s->names[f->s->nr++] =
		(struct dns_name){ .host = f->pool, .wildcard = wc };
	f->pool += n;
}

struct net_dns_names *net_policy__dns_names(const struct net_policy *p)
{
	struct names_size n = { 0 };
	struct net_dns_names *s;
	struct names_fill f;

	if (p)
		each_dns_name(p, names_size, &n);
	s = calloc(1, sizeof(*s) + n.nr * sizeof(s->names[0]) + n.bytes);
	if (!s || !p)
		return s;
	s->any = p->dns_any_name;
	f = (struct names_fill){ .s = s, .pool = (char *)&s->names[n.nr] };
	each_dns_name(p, names_fill, &f);
	return s;
}

void net_dns_names__free(struct net_dns_names *s)
{
	free(s);
}

bool net_dns_names__allows(const struct net_dns_names *s, const char *name)
{
	if (!s)
		return false;
	if (s->any)
		return true;
	for (unsigned int i = 0; i < s->nr; i++)
		if (net_hostname__matches(name, s->names[i].host,
					  s->names[i].wildcard))
			return true;
	return false;
}
