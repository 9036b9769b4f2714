// SPDX-License-Identifier: GPL-2.0
/*
 * The network policy (policy.h): parsed from JSON and checked key by key,
 * then matched against each new flow, default deny. Hostname rules match
 * through the trusted DNS bindings (bindings.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "vmm/netcfg.h"
#include "vmm/policy.h"
#include "vmm/policy-internal.h"

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

/* The first octet of 127.0.0.0/8 and of 0.0.0.0/8, host byte order. */
#define LOOPBACK_NET	 127U
#define THIS_NETWORK_NET 0U

enum { PROTO_TCP, PROTO_UDP, PROTO_COUNT };
static const char *const proto_keys[PROTO_COUNT] = { "tcp", "udp" };

/* The mask of a prefix, host byte order. */
static uint32_t prefix_mask(unsigned int prefix)
{
	return prefix ? ~0U << (32 - prefix) : 0;
}

enum net_addr_class net_policy__classify(uint32_t addr)
{
	uint32_t a = ntohl(addr);
	size_t i;

	for (i = 0; i < ARRAY_SIZE(class_ranges); i++)
		if ((a & prefix_mask(class_ranges[i].prefix)) ==
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

static int class_by_name(const char *s)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(class_names); i++)
		if (!strcmp(s, class_names[i]))
			return i;
	return -1;
}

struct port_range {
	uint16_t lo, hi;
};

enum dest_kind {
	DEST_CIDR,  /* an address is a /32 */
	DEST_CLASS, /* an address class */
	DEST_HOST,  /* a hostname, through the bindings */
};

struct rule {
	enum dest_kind kind;
	uint32_t net, mask; /* DEST_CIDR, host byte order */
	enum net_addr_class cls;
	char *host;    /* DEST_HOST: lower case, no trailing dot, no "*." */
	bool wildcard; /* DEST_HOST: "*.host", names below host only */
	unsigned int nr_ports; /* 0: every port */
	struct port_range *ports;
};

struct net_policy {
	struct rule *rules[PROTO_COUNT];
	unsigned int nr_rules[PROTO_COUNT];
	struct sockaddr_in resolvers[NET_POLICY_MAX_RESOLVERS];
	unsigned int nr_resolvers;
	char *hook_socket; /* NULL: no hook */
	unsigned int hook_timeout_ms;
	uint32_t gateway; /* runtime context, network byte order; 0: none */
};

void net_policy__free(struct net_policy *p)
{
	unsigned int i, j;

	if (!p)
		return;
	for (i = 0; i < PROTO_COUNT; i++) {
		for (j = 0; j < p->nr_rules[i]; j++) {
			free(p->rules[i][j].host);
			free(p->rules[i][j].ports);
		}
		free(p->rules[i]);
	}
	free(p->hook_socket);
	free(p);
}

void net_policy__set_gateway(struct net_policy *p, uint32_t gateway)
{
	if (p)
		p->gateway = gateway;
}

/* ---- parsing -------------------------------------------------------- */

/* Each key of obj is one of keys[] (NULL-terminated). */
static int check_keys(json_t *obj, const char *const keys[], const char *path,
		      char *err, size_t len)
{
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach(obj, key, v)
	{
		for (i = 0; keys[i]; i++)
			if (!strcmp(key, keys[i]))
				break;
		if (!keys[i])
			return errf(err, len, -EINVAL, "%s: unknown key \"%s\"",
				    path, key);
	}
	return 0;
}

/* A decimal port 1..65535 in s[0, n), no sign, no leading zero. */
static bool parse_port(const char *s, size_t n, uint16_t *port)
{
	unsigned long v = 0;
	size_t i;

	if (!n || n > 5 || (s[0] == '0'))
		return false;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (v < NET_POLICY_MIN_PORT || v > NET_POLICY_MAX_PORT)
		return false;
	*port = v;
	return true;
}

static bool is_ipv6_literal(const char *s)
{
	struct in6_addr a6;
	char buf[INET6_ADDRSTRLEN + 8];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);

	if (n >= sizeof(buf) || !memchr(s, ':', n))
		return false;
	memcpy(buf, s, n);
	buf[n] = '\0';
	/* "[::1]:53" too */
	if (buf[0] == '[') {
		char *close = strchr(buf, ']');

		if (!close)
			return false;
		*close = '\0';
		return inet_pton(AF_INET6, buf + 1, &a6) == 1;
	}
	return inet_pton(AF_INET6, buf, &a6) == 1;
}

/* "A.B.C.D:PORT": the address and the port. */
static bool parse_addr_port(const char *s, uint32_t *addr, uint16_t *port)
{
	const char *colon = strrchr(s, ':');
	char ip[NET_ADDR_STRLEN];

	if (!colon || (size_t)(colon - s) >= sizeof(ip))
		return false;
	memcpy(ip, s, colon - s);
	ip[colon - s] = '\0';
	return !netcfg__parse_ipv4(ip, addr) &&
	       parse_port(colon + 1, strlen(colon + 1), port);
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

static int parse_ports(json_t *arr, struct rule *r, const char *path, char *err,
		       size_t len)
{
	size_t i, n;
	json_t *v;

	if (!json_is_array(arr))
		return errf(err, len, -EINVAL,
			    "%s.ports: must be an array of ports (443) and "
			    "ranges (\"8000-8100\")",
			    path);
	n = json_array_size(arr);
	if (!n)
		return errf(err, len, -EINVAL,
			    "%s.ports: empty (leave \"ports\" out for every "
			    "port)",
			    path);
	if (n > NET_POLICY_MAX_PORTS)
		return errf(err, len, -E2BIG,
			    "%s.ports: %zu entries, at most %u", path, n,
			    NET_POLICY_MAX_PORTS);
	r->ports = calloc(n, sizeof(*r->ports));
	if (!r->ports)
		return -ENOMEM;
	json_array_foreach(arr, i, v)
	{
		struct port_range *pr = &r->ports[i];
		const char *s, *dash;

		if (json_is_integer(v)) {
			json_int_t p = json_integer_value(v);

			if (p < NET_POLICY_MIN_PORT || p > NET_POLICY_MAX_PORT)
				return errf(err, len, -EINVAL,
					    "%s.ports[%zu]: %lld is not a port "
					    "(%u to %u)",
					    path, i, (long long)p,
					    NET_POLICY_MIN_PORT,
					    NET_POLICY_MAX_PORT);
			pr->lo = pr->hi = p;
			r->nr_ports++;
			continue;
		}
		if (!json_is_string(v))
			return errf(err, len, -EINVAL,
				    "%s.ports[%zu]: must be a port (443) or a "
				    "range (\"8000-8100\")",
				    path, i);
		s = json_string_value(v);
		dash = strchr(s, '-');
		if (!dash || !parse_port(s, dash - s, &pr->lo) ||
		    !parse_port(dash + 1, strlen(dash + 1), &pr->hi) ||
		    pr->lo > pr->hi)
			return errf(err, len, -EINVAL,
				    "%s.ports[%zu]: \"%s\" is not a port range "
				    "(\"A-B\", %u <= A <= B <= %u)",
				    path, i, s, NET_POLICY_MIN_PORT,
				    NET_POLICY_MAX_PORT);
		r->nr_ports++;
	}
	return 0;
}

static int loopback_refused(const char *to, const char *path, char *err,
			    size_t len)
{
	return errf(err, len, -EINVAL,
		    "%s.to: \"%s\" is loopback, which a grant cannot open: "
		    "the guest's is its own and never reaches the proxy, "
		    "the host's must stay closed",
		    path, to);
}

/* "to": an address, ADDRESS:PORT, a CIDR, a class or a hostname. */
static int parse_to(const char *to, struct rule *r, bool *has_port,
		    const char *path, char *err, size_t len)
{
	char host[NET_HOSTNAME_MAX + 1];
	unsigned int prefix;
	uint32_t addr;
	uint16_t port;
	int cls;

	*has_port = false;
	if (is_ipv6_literal(to))
		return errf(err, len, -EINVAL,
			    "%s.to: \"%s\" is IPv6, not supported yet (the "
			    "data path is IPv4-only)",
			    path, to);
	cls = class_by_name(to);
	if (cls == NET_CLASS_LOOPBACK)
		return loopback_refused(to, path, err, len);
	if (cls >= 0) {
		r->kind = DEST_CLASS;
		r->cls = cls;
		return 0;
	}
	if (strchr(to, '/')) {
		if (netcfg__parse_cidr(to, &addr, &prefix))
			return errf(err, len, -EINVAL,
				    "%s.to: \"%s\" is not a CIDR (A.B.C.D/N, "
				    "N 0 to 32)",
				    path, to);
		r->kind = DEST_CIDR;
		r->mask = prefix_mask(prefix);
		r->net = ntohl(addr);
		if (r->net & ~r->mask)
			return errf(err, len, -EINVAL,
				    "%s.to: \"%s\" has bits set past its "
				    "prefix",
				    path, to);
		if (prefix >= 8 && r->net >> 24 == LOOPBACK_NET)
			return loopback_refused(to, path, err, len);
		return 0;
	}
	*has_port = parse_addr_port(to, &addr, &port);
	if (*has_port || !netcfg__parse_ipv4(to, &addr)) {
		r->kind = DEST_CIDR;
		r->net = ntohl(addr);
		r->mask = ~0U;
		if (r->net >> 24 == LOOPBACK_NET)
			return loopback_refused(to, path, err, len);
		if (*has_port) {
			r->ports = calloc(1, sizeof(*r->ports));
			if (!r->ports)
				return -ENOMEM;
			r->ports[0].lo = r->ports[0].hi = port;
			r->nr_ports = 1;
		}
		return 0;
	}
	if (!net_hostname__normalize(to, host, true, &r->wildcard)) {
		r->kind = DEST_HOST;
		r->host = strdup(host);
		return r->host ? 0 : -ENOMEM;
	}
	return errf(err, len, -EINVAL,
		    "%s.to: \"%s\" is not an address, a CIDR, a hostname or "
		    "an address class",
		    path, to);
}

static int parse_rule(json_t *obj, struct rule *r, const char *path, char *err,
		      size_t len)
{
	static const char *const keys[] = { "to", "ports", NULL };
	json_t *to, *ports;
	bool has_port;
	int ret;

	if (!json_is_object(obj))
		return errf(err, len, -EINVAL,
			    "%s: must be an object ({\"to\": ..., "
			    "\"ports\": [...]})",
			    path);
	ret = check_keys(obj, keys, path, err, len);
	if (ret)
		return ret;
	to = json_object_get(obj, "to");
	if (!to)
		return errf(err, len, -EINVAL, "%s: needs \"to\"", path);
	if (!json_is_string(to))
		return errf(err, len, -EINVAL,
			    "%s.to: must be a string (an address, a CIDR, a "
			    "hostname or an address class)",
			    path);
	ret = parse_to(json_string_value(to), r, &has_port, path, err, len);
	if (ret)
		return ret;
	ports = json_object_get(obj, "ports");
	if (ports && has_port)
		return errf(err, len, -EINVAL,
			    "%s.ports: the port is in \"to\" already", path);
	return ports ? parse_ports(ports, r, path, err, len) : 0;
}

static int parse_rules(json_t *arr, struct net_policy *p, unsigned int proto,
		       const char *path, char *err, size_t len)
{
	char where[128];
	size_t i, n;
	json_t *v;
	int ret;

	if (!json_is_array(arr))
		return errf(err, len, -EINVAL,
			    "%s.%s: must be an array of rules ({\"to\": ...})",
			    path, proto_keys[proto]);
	n = json_array_size(arr);
	if (n > NET_POLICY_MAX_RULES)
		return errf(err, len, -E2BIG, "%s.%s: %zu rules, at most %u",
			    path, proto_keys[proto], n, NET_POLICY_MAX_RULES);
	if (!n)
		return 0;
	p->rules[proto] = calloc(n, sizeof(*p->rules[proto]));
	if (!p->rules[proto])
		return -ENOMEM;
	json_array_foreach(arr, i, v)
	{
		snprintf(where, sizeof(where), "%s.%s[%zu]", path,
			 proto_keys[proto], i);
		/* Counted first: the free path frees what half a rule has. */
		p->nr_rules[proto]++;
		ret = parse_rule(v, &p->rules[proto][i], where, err, len);
		if (ret)
			return ret;
	}
	return 0;
}

static int parse_resolver(json_t *v, struct sockaddr_in *sa, const char *path,
			  size_t i, char *err, size_t len)
{
	const char *s = json_is_string(v) ? json_string_value(v) : NULL;
	uint16_t port = NET_POLICY_DNS_PORT;
	enum net_addr_class cls;
	uint32_t addr;

	if (!s)
		return errf(err, len, -EINVAL,
			    "%s.dns.resolvers[%zu]: must be a string "
			    "(\"A.B.C.D\" or \"A.B.C.D:PORT\")",
			    path, i);
	if (is_ipv6_literal(s))
		return errf(err, len, -EINVAL,
			    "%s.dns.resolvers[%zu]: \"%s\" is IPv6, not "
			    "supported yet (the data path is IPv4-only)",
			    path, i, s);
	if (netcfg__parse_ipv4(s, &addr) && !parse_addr_port(s, &addr, &port))
		return errf(err, len, -EINVAL,
			    "%s.dns.resolvers[%zu]: \"%s\" is not an IPv4 "
			    "address (\"A.B.C.D\" or \"A.B.C.D:PORT\")",
			    path, i, s);
	cls = net_policy__classify(addr);
	if (cls == NET_CLASS_MULTICAST || cls == NET_CLASS_BROADCAST ||
	    ntohl(addr) >> 24 == THIS_NETWORK_NET)
		return errf(err, len, -EINVAL,
			    "%s.dns.resolvers[%zu]: \"%s\" is not a unicast "
			    "address",
			    path, i, s);
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = addr;
	sa->sin_port = htons(port);
	return 0;
}

static int parse_dns(json_t *obj, struct net_policy *p, const char *path,
		     char *err, size_t len)
{
	static const char *const keys[] = { "resolvers", NULL };
	char where[128];
	json_t *arr, *v;
	size_t i, n;
	int ret;

	snprintf(where, sizeof(where), "%s.dns", path);
	if (!json_is_object(obj))
		return errf(err, len, -EINVAL,
			    "%s: must be an object ({\"resolvers\": [...]})",
			    where);
	ret = check_keys(obj, keys, where, err, len);
	if (ret)
		return ret;
	arr = json_object_get(obj, "resolvers");
	if (!arr)
		return errf(err, len, -EINVAL, "%s: needs \"resolvers\"",
			    where);
	if (!json_is_array(arr))
		return errf(err, len, -EINVAL,
			    "%s.resolvers: must be an array of addresses",
			    where);
	n = json_array_size(arr);
	if (n > NET_POLICY_MAX_RESOLVERS)
		return errf(err, len, -E2BIG,
			    "%s.resolvers: %zu resolvers, at most %u", where, n,
			    NET_POLICY_MAX_RESOLVERS);
	json_array_foreach(arr, i, v)
	{
		ret = parse_resolver(v, &p->resolvers[i], path, i, err, len);
		if (ret)
			return ret;
		p->nr_resolvers++;
	}
	return 0;
}

static int parse_hook(json_t *obj, struct net_policy *p, const char *path,
		      char *err, size_t len)
{
	static const char *const keys[] = { "socket", "timeoutMs", NULL };
	json_t *sock, *timeout;
	char where[128];
	const char *s;
	int ret;

	snprintf(where, sizeof(where), "%s.hook", path);
	if (!json_is_object(obj))
		return errf(err, len, -EINVAL,
			    "%s: must be an object ({\"socket\": PATH, "
			    "\"timeoutMs\": MS})",
			    where);
	ret = check_keys(obj, keys, where, err, len);
	if (ret)
		return ret;
	sock = json_object_get(obj, "socket");
	if (!sock)
		return errf(err, len, -EINVAL, "%s: needs \"socket\"", where);
	s = json_is_string(sock) ? json_string_value(sock) : NULL;
	if (!s || !s[0])
		return errf(err, len, -EINVAL,
			    "%s.socket: must be a Unix socket's path", where);
	if (strlen(s) > NET_POLICY_HOOK_PATH_MAX)
		return errf(err, len, -ENAMETOOLONG,
			    "%s.socket: longer than %u bytes (a Unix socket "
			    "path)",
			    where, NET_POLICY_HOOK_PATH_MAX);
	p->hook_timeout_ms = NET_POLICY_DEFAULT_HOOK_TIMEOUT_MS;
	timeout = json_object_get(obj, "timeoutMs");
	if (timeout) {
		json_int_t ms = json_is_integer(timeout) ?
					json_integer_value(timeout) :
					-1;

		if (ms < 1 || ms > NET_POLICY_MAX_HOOK_TIMEOUT_MS)
			return errf(err, len, -EINVAL,
				    "%s.timeoutMs: must be an integer from 1 "
				    "to %u",
				    where, NET_POLICY_MAX_HOOK_TIMEOUT_MS);
		p->hook_timeout_ms = ms;
	}
	p->hook_socket = strdup(s);
	return p->hook_socket ? 0 : -ENOMEM;
}

int net_policy__parse(json_t *obj, const char *path, struct net_policy **out,
		      char *err, size_t len)
{
	static const char *const keys[] = { "dns", "tcp", "udp", "hook", NULL };
	struct net_policy *p;
	unsigned int i;
	json_t *v;
	int ret;

	if (!json_is_object(obj))
		return errf(err, len, -EINVAL,
			    "%s: must be an object (\"dns\", \"tcp\", "
			    "\"udp\", \"hook\")",
			    path);
	ret = check_keys(obj, keys, path, err, len);
	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	v = json_object_get(obj, "dns");
	if (v)
		ret = parse_dns(v, p, path, err, len);
	for (i = 0; i < PROTO_COUNT && !ret; i++) {
		v = json_object_get(obj, proto_keys[i]);
		if (v)
			ret = parse_rules(v, p, i, path, err, len);
	}
	v = json_object_get(obj, "hook");
	if (v && !ret)
		ret = parse_hook(v, p, path, err, len);
	if (ret) {
		net_policy__free(p);
		return ret;
	}
	*out = p;
	return 0;
}

int net_policy__replace(struct net_policy **cur, json_t *obj, const char *path,
			char *err, size_t len)
{
	struct net_policy *p;
	int ret;

	ret = net_policy__parse(obj, path, &p, err, len);
	if (ret)
		return ret;
	if (*cur)
		p->gateway = (*cur)->gateway;
	net_policy__free(*cur);
	*cur = p;
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

/* ---- deciding -------------------------------------------------------- */

static bool port_matches(const struct rule *r, uint16_t port)
{
	unsigned int i;

	if (!r->nr_ports)
		return true;
	for (i = 0; i < r->nr_ports; i++)
		if (port >= r->ports[i].lo && port <= r->ports[i].hi)
			return true;
	return false;
}

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

void net_policy__decide(const struct net_policy *p, const struct net_flow *f,
			const struct net_bindings *b, struct net_decision *d)
{
	const char *why = always_denied(p, f);
	uint16_t port = ntohs(f->dst.sin_port);
	int proto = proto_index(f->proto);
	unsigned int i;

	d->verdict = NET_VERDICT_DENY;
	if (why) {
		snprintf(d->reason, sizeof(d->reason), "%s", why);
		return;
	}
	for (i = 0; p && i < p->nr_rules[proto]; i++) {
		const struct rule *r = &p->rules[proto][i];

		if (port_matches(r, port) &&
		    dest_matches(r, f->dst.sin_addr.s_addr, b)) {
			d->verdict = NET_VERDICT_ALLOW;
			snprintf(d->reason, sizeof(d->reason), "%s grant %u",
				 proto_keys[proto], i);
			return;
		}
	}
	snprintf(d->reason, sizeof(d->reason), "no grant");
	if (p && p->hook_socket)
		ask_hook(p, f, b, d);
}
