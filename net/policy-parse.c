// SPDX-License-Identifier: GPL-2.0
/*
 * The network policy (policy.h), parsed: from JSON, checked key by key,
 * an http grant's header values (secrets) read from the environment or
 * a file now, never logged. Its deciding is policy.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "net/http.h"
#include "net/addr.h"
#include "net/policy-internal.h"
#include "net/policy.h"

/* ---- freeing ------------------------------------------------------- */

static void rule_free(struct rule *r)
{
	free(r->host);
	free(r->ports);
}

static void http_grant_free(struct http_grant *g)
{
	unsigned int i;

	rule_free(&g->r);
	for (i = 0; i < g->nr_headers; i++) {
		struct grant_header *h = &g->headers[i];

		if (h->value)
			explicit_bzero(h->value, h->value_len);
		free(h->value);
		free(h->name);
	}
}

void net_policy__free(struct net_policy *p)
{
	unsigned int i, j;

	if (!p)
		return;
	for (i = 0; i < PROTO_COUNT; i++) {
		for (j = 0; j < p->nr_rules[i]; j++)
			rule_free(&p->rules[i][j]);
		free(p->rules[i]);
	}
	for (i = 0; i < p->nr_http; i++)
		http_grant_free(&p->http[i]);
	free(p->http);
	for (i = 0; i < p->nr_dns_names; i++)
		free(p->dns_names[i].host);
	free(p->dns_names);
	free(p->hook_socket);
	free(p);
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

/*
 * obj is an object whose keys are all in keys[]; shape is what one looks
 * like, for the refusal.
 */
static int check_object(json_t *obj, const char *const keys[],
			const char *shape, const char *path, char *err,
			size_t len)
{
	if (!json_is_object(obj))
		return errf(err, len, -EINVAL, "%s: must be an object (%s)",
			    path, shape);
	return check_keys(obj, keys, path, err, len);
}

/* obj's key, which it must have: 0 with *v set, or -EINVAL. */
static int need_key(json_t *obj, const char *key, json_t **v, const char *path,
		    char *err, size_t len)
{
	*v = json_object_get(obj, key);
	if (!*v)
		return errf(err, len, -EINVAL, "%s: needs \"%s\"", path, key);
	return 0;
}

/*
 * path.key is an array of at most max: its size, or -errno. what says what
 * it holds, noun what its size counts.
 */
static ssize_t check_array(json_t *arr, const char *path, const char *key,
			   const char *what, const char *noun, unsigned int max,
			   char *err, size_t len)
{
	size_t n;

	if (!json_is_array(arr))
		return errf(err, len, -EINVAL, "%s.%s: must be an array of %s",
			    path, key, what);
	n = json_array_size(arr);
	if (n > max)
		return errf(err, len, -E2BIG, "%s.%s: %zu %s, at most %u", path,
			    key, n, noun, max);
	return n;
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
	return !net_addr__parse_ipv4(ip, addr) &&
	       parse_port(colon + 1, strlen(colon + 1), port);
}

/* r's ports: each of ports[n] alone. */
static int rule_set_ports(struct rule *r, const uint16_t ports[],
			  unsigned int n)
{
	unsigned int i;

	r->ports = calloc(n, sizeof(*r->ports));
	if (!r->ports)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		r->ports[i].lo = r->ports[i].hi = ports[i];
	r->nr_ports = n;
	return 0;
}

/*
 * r a DEST_HOST rule for the hostname s ("*.name" too): 0, -EINVAL when s
 * is no hostname, -ENOMEM.
 */
static int rule_set_host(struct rule *r, const char *s)
{
	char host[NET_HOSTNAME_MAX + 1];

	if (net_hostname__normalize(s, host, true, &r->wildcard))
		return -EINVAL;
	r->kind = DEST_HOST;
	r->host = strdup(host);
	return r->host ? 0 : -ENOMEM;
}

static int parse_ports(json_t *arr, struct rule *r, const char *path, char *err,
		       size_t len)
{
	ssize_t n;
	size_t i;
	json_t *v;

	n = check_array(arr, path, "ports",
			"ports (443) and ranges (\"8000-8100\")", "entries",
			NET_POLICY_MAX_PORTS, err, len);
	if (n < 0)
		return n;
	if (!n)
		return errf(err, len, -EINVAL,
			    "%s.ports: empty (leave \"ports\" out for every "
			    "port)",
			    path);
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
	unsigned int prefix;
	uint32_t addr;
	uint16_t port;
	int cls, ret;

	*has_port = false;
	if (is_ipv6_literal(to))
		return errf(err, len, -EINVAL,
			    "%s.to: \"%s\" is IPv6, not supported yet (the "
			    "data path is IPv4-only)",
			    path, to);
	cls = net_policy__class_by_name(to);
	if (cls == NET_CLASS_LOOPBACK)
		return loopback_refused(to, path, err, len);
	if (cls >= 0) {
		r->kind = DEST_CLASS;
		r->cls = cls;
		return 0;
	}
	if (strchr(to, '/')) {
		if (net_addr__parse_cidr(to, &addr, &prefix))
			return errf(err, len, -EINVAL,
				    "%s.to: \"%s\" is not a CIDR (A.B.C.D/N, "
				    "N 0 to 32)",
				    path, to);
		r->kind = DEST_CIDR;
		r->mask = net_prefix_mask(prefix);
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
	if (*has_port || !net_addr__parse_ipv4(to, &addr)) {
		r->kind = DEST_CIDR;
		r->net = ntohl(addr);
		r->mask = ~0U;
		if (r->net >> 24 == LOOPBACK_NET)
			return loopback_refused(to, path, err, len);
		return *has_port ? rule_set_ports(r, &port, 1) : 0;
	}
	ret = rule_set_host(r, to);
	if (ret != -EINVAL)
		return ret;
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

	ret = check_object(obj, keys, "{\"to\": ..., \"ports\": [...]}", path,
			   err, len);
	if (!ret)
		ret = need_key(obj, "to", &to, path, err, len);
	if (ret)
		return ret;
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
	ssize_t n;
	size_t i;
	json_t *v;
	int ret;

	n = check_array(arr, path, net_policy__proto_key(proto),
			"rules ({\"to\": ...})", "rules", NET_POLICY_MAX_RULES,
			err, len);
	if (n <= 0)
		return n;
	p->rules[proto] = calloc(n, sizeof(*p->rules[proto]));
	if (!p->rules[proto])
		return -ENOMEM;
	json_array_foreach(arr, i, v)
	{
		snprintf(where, sizeof(where), "%s.%s[%zu]", path,
			 net_policy__proto_key(proto), i);
		/* Counted first: the free path frees what half a rule has. */
		p->nr_rules[proto]++;
		ret = parse_rule(v, &p->rules[proto][i], where, err, len);
		if (ret)
			return ret;
	}
	return 0;
}

const char *net_policy__parse_resolver(const char *s, struct sockaddr_in *sa)
{
	uint16_t port = NET_POLICY_DNS_PORT;
	enum net_addr_class cls;
	uint32_t addr;

	if (is_ipv6_literal(s))
		return "is IPv6, not supported yet (the data path is "
		       "IPv4-only)";
	if (net_addr__parse_ipv4(s, &addr) && !parse_addr_port(s, &addr, &port))
		return "is not an IPv4 address (\"A.B.C.D\" or "
		       "\"A.B.C.D:PORT\")";
	cls = net_policy__classify(addr);
	if (cls == NET_CLASS_MULTICAST || cls == NET_CLASS_BROADCAST ||
	    ntohl(addr) >> 24 == THIS_NETWORK_NET)
		return "is not a unicast address";
	*sa = (struct sockaddr_in){ .sin_family = AF_INET,
				    .sin_addr.s_addr = addr,
				    .sin_port = htons(port) };
	return NULL;
}

static int parse_resolver(json_t *v, struct sockaddr_in *sa, const char *path,
			  size_t i, char *err, size_t len)
{
	const char *s = json_is_string(v) ? json_string_value(v) : NULL;
	const char *why;

	if (!s)
		return errf(err, len, -EINVAL,
			    "%s.dns.resolvers[%zu]: must be a string "
			    "(\"A.B.C.D\" or \"A.B.C.D:PORT\")",
			    path, i);
	why = net_policy__parse_resolver(s, sa);
	if (why)
		return errf(err, len, -EINVAL,
			    "%s.dns.resolvers[%zu]: \"%s\" %s", path, i, s,
			    why);
	return 0;
}

/*
 * "dns.names": the names the resolver forwards besides the grants'
 * ("Which names"): hostnames, "*.example.com", or "*" for every name.
 */
static int parse_dns_names(json_t *arr, struct net_policy *p, const char *where,
			   char *err, size_t len)
{
	char name[NET_HOSTNAME_MAX + 1];
	struct dns_name *e;
	const char *s;
	ssize_t n;
	size_t i;
	json_t *v;

	n = check_array(arr, where, "names", "hostnames", "names",
			NET_POLICY_MAX_DNS_NAMES, err, len);
	if (n < 0)
		return n;
	p->dns_names = calloc(n ? n : 1, sizeof(*p->dns_names));
	if (!p->dns_names)
		return errf(err, len, -ENOMEM, "%s.names: out of memory",
			    where);
	json_array_foreach(arr, i, v)
	{
		s = json_is_string(v) ? json_string_value(v) : NULL;
		if (!s)
			return errf(err, len, -EINVAL,
				    "%s.names[%zu]: must be a string (a "
				    "hostname, \"*.NAME\" or \"*\")",
				    where, i);
		if (!strcmp(s, "*")) {
			p->dns_any_name = true;
			continue;
		}
		e = &p->dns_names[p->nr_dns_names];
		if (net_hostname__normalize(s, name, true, &e->wildcard))
			return errf(err, len, -EINVAL,
				    "%s.names[%zu]: \"%s\" is not a hostname "
				    "(\"api.example.com\", \"*.example.com\") "
				    "or \"*\"",
				    where, i, s);
		e->host = strdup(name);
		if (!e->host)
			return errf(err, len, -ENOMEM,
				    "%s.names: out of memory", where);
		p->nr_dns_names++;
	}
	return 0;
}

static int parse_dns(json_t *obj, struct net_policy *p, const char *path,
		     char *err, size_t len)
{
	static const char *const keys[] = { "resolvers", "names", NULL };
	char where[128];
	json_t *arr, *v;
	ssize_t n;
	size_t i;
	int ret;

	snprintf(where, sizeof(where), "%s.dns", path);
	p->has_dns = true;
	ret = check_object(obj, keys,
			   "{\"resolvers\": [...], \"names\": [...]}", where,
			   err, len);
	if (!ret)
		ret = need_key(obj, "resolvers", &arr, where, err, len);
	if (ret)
		return ret;
	n = check_array(arr, where, "resolvers", "addresses", "resolvers",
			NET_POLICY_MAX_RESOLVERS, err, len);
	if (n < 0)
		return n;
	json_array_foreach(arr, i, v)
	{
		ret = parse_resolver(v, &p->resolvers[i], path, i, err, len);
		if (ret)
			return ret;
		p->nr_resolvers++;
	}
	v = json_object_get(obj, "names");
	return v ? parse_dns_names(v, p, where, err, len) : 0;
}

/* where.key: a duration in ms, an integer from 1 to max, into *out. */
static int parse_ms(json_t *v, unsigned int max, const char *where,
		    const char *key, unsigned int *out, char *err, size_t len)
{
	json_int_t ms = json_is_integer(v) ? json_integer_value(v) : -1;

	if (ms < 1 || ms > max)
		return errf(err, len, -EINVAL,
			    "%s.%s: must be an integer from 1 to %u", where,
			    key, max);
	*out = (unsigned int)ms;
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
	ret = check_object(obj, keys, "{\"socket\": PATH, \"timeoutMs\": MS}",
			   where, err, len);
	if (!ret)
		ret = need_key(obj, "socket", &sock, where, err, len);
	if (ret)
		return ret;
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
		ret = parse_ms(timeout, NET_POLICY_MAX_HOOK_TIMEOUT_MS, where,
			       "timeoutMs", &p->hook_timeout_ms, err, len);
		if (ret)
			return ret;
	}
	p->hook_socket = strdup(s);
	return p->hook_socket ? 0 : -ENOMEM;
}
/* ---- http grants ------------------------------------------------------ */

/* An http grant's ports and TLS ports when left out. */
#define HTTP_PORT  80U
#define HTTPS_PORT 443U
#define ASCII_DEL  0x7fU
/* Where a header's value comes from. */
#define FROM_ENV  "env:"
#define FROM_FILE "file:"
#define FROM_HOOK "hook"

/* A shell variable's name: a letter or _, then letters, digits and _. */
static bool env_name_valid(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++) {
		char c = s[i];

		if (!(c == '_' || (c >= 'a' && c <= 'z') ||
		      (c >= 'A' && c <= 'Z') || (i && c >= '0' && c <= '9')))
			return false;
	}
	return i > 0;
}

/* What a header value may hold: no control bytes (a CR LF would inject). */
static bool header_value_valid(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = s[i];

		if ((c < ' ' && c != '\t') || c == ASCII_DEL)
			return false;
	}
	return true;
}

/*
 * The regular file at path, whole, into buf (NET_POLICY_SECRET_MAX + 1
 * bytes): its length, or -errno (-EFBIG: longer than
 * NET_POLICY_SECRET_MAX, -EINVAL: not a regular file).
 */
static ssize_t read_secret_file(const char *path, char *buf)
{
	size_t n = 0;
	struct stat st;
	int fd, ret = 0;
	ssize_t r;

	/* O_NONBLOCK: a FIFO put there must not stall the parse. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st))
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		ret = -EINVAL;
	while (!ret && n <= NET_POLICY_SECRET_MAX) {
		r = read(fd, buf + n, NET_POLICY_SECRET_MAX + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			ret = -errno;
		if (r <= 0)
			break;
		n += r;
	}
	close(fd);
	if (ret)
		return ret;
	return n > NET_POLICY_SECRET_MAX ? -EFBIG : (ssize_t)n;
}

/*
 * "from": the value, resolved now, into h. Error lines name where it was
 * to come from (the variable, the path), never a byte of it.
 */
static int parse_header_from(json_t *spec, struct grant_header *h,
			     const char *where, char *err, size_t len)
{
	static const char *const keys[] = { "from", NULL };
	char buf[NET_POLICY_SECRET_MAX + 1];
	const char *from, *value = NULL;
	size_t n = 0;
	ssize_t r;
	int ret;

	ret = check_object(spec, keys,
			   "{\"from\": \"env:NAME\", \"file:/PATH\" or "
			   "\"hook\"}",
			   where, err, len);
	if (ret)
		return ret;
	from = json_string_value(json_object_get(spec, "from"));
	if (!from)
		return errf(err, len, -EINVAL,
			    "%s: needs \"from\" (\"env:NAME\", "
			    "\"file:/PATH\" or \"hook\")",
			    where);
	if (!strcmp(from, FROM_HOOK)) {
		/* Its value comes with each answer (the policy's "hook"). */
		h->from_hook = true;
		h->value = strdup("");
		return h->value ? 0 : -ENOMEM;
	}
	if (!strncmp(from, FROM_ENV, strlen(FROM_ENV))) {
		if (!env_name_valid(from + strlen(FROM_ENV)))
			return errf(err, len, -EINVAL,
				    "%s.from: \"%s\" is not env:NAME with "
				    "NAME a variable's name",
				    where, from);
		value = getenv(from + strlen(FROM_ENV));
		if (!value)
			return errf(err, len, -ENOENT, "%s.from: %s is not set",
				    where, from);
		n = strlen(value);
		if (n > NET_POLICY_SECRET_MAX)
			return errf(err, len, -E2BIG,
				    "%s.from: %s is longer than %u bytes",
				    where, from, NET_POLICY_SECRET_MAX);
	} else if (!strncmp(from, FROM_FILE, strlen(FROM_FILE))) {
		if (from[strlen(FROM_FILE)] != '/')
			return errf(err, len, -EINVAL,
				    "%s.from: \"%s\" is not file:/PATH with an "
				    "absolute PATH",
				    where, from);
		r = read_secret_file(from + strlen(FROM_FILE), buf);
		if (r < 0)
			return errf(err, len, r, "%s.from: %s: %s", where, from,
				    r == -EFBIG	 ? "longer than 8192 bytes" :
				    r == -EINVAL ? "not a regular file" :
						   strerror(-r));
		/* One line: its newline is the file's, not the value's. */
		n = r;
		if (n && buf[n - 1] == '\n')
			n--;
		if (n && buf[n - 1] == '\r')
			n--;
		value = buf;
	} else {
		return errf(err, len, -EINVAL,
			    "%s.from: must be \"env:NAME\", \"file:/PATH\" "
			    "or \"hook\"",
			    where);
	}
	if (!n)
		ret = errf(err, len, -EINVAL, "%s.from: %s is empty", where,
			   from);
	else if (!header_value_valid(value, n))
		ret = errf(err, len, -EINVAL,
			   "%s.from: %s holds control bytes, which a header "
			   "value cannot",
			   where, from);
	else if (!(h->value = malloc(n + 1)))
		ret = -ENOMEM;
	if (!ret) {
		memcpy(h->value, value, n);
		h->value[n] = '\0';
		h->value_len = n;
	}
	explicit_bzero(buf, sizeof(buf));
	return ret;
}

static int parse_http_headers(json_t *obj, struct http_grant *g,
			      const char *path, char *err, size_t len)
{
	char where[256];
	size_t total = 0;
	const char *key;
	json_t *v;
	int ret;

	if (!json_is_object(obj))
		return errf(
			err, len, -EINVAL,
			"%s.headers: must be an object ({\"authorization\": "
			"{\"from\": ...}})",
			path);
	if (json_object_size(obj) > NET_HTTP_MAX_HEADERS)
		return errf(err, len, -E2BIG,
			    "%s.headers: %zu fields, at most %u", path,
			    json_object_size(obj), NET_HTTP_MAX_HEADERS);
	json_object_foreach(obj, key, v)
	{
		struct grant_header *h = &g->headers[g->nr_headers];

		if (!http__editable_name(key))
			return errf(err, len, -EINVAL,
				    "%s.headers: \"%s\" is not a field a grant "
				    "may set (a token, and not one that frames "
				    "or routes the message: host, "
				    "content-length, transfer-encoding, "
				    "connection, upgrade, te, trailer, "
				    "keep-alive)",
				    path, key);
		/* Counted first: the free path frees what half a one has. */
		g->nr_headers++;
		h->name = strdup(key);
		if (!h->name)
			return -ENOMEM;
		for (char *c = h->name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c += 'a' - 'A';
		for (unsigned int i = 0; i + 1 < g->nr_headers; i++)
			if (!strcmp(g->headers[i].name, h->name))
				return errf(err, len, -EINVAL,
					    "%s.headers: \"%s\" twice (names "
					    "are compared without case)",
					    path, h->name);
		snprintf(where, sizeof(where), "%s.headers.%s", path, h->name);
		ret = parse_header_from(v, h, where, err, len);
		if (ret)
			return ret;
		total += strlen(h->name) + 1 + h->value_len + 1;
		if (h->from_hook && g->ask == HTTP_ASK_NEVER)
			g->ask = HTTP_ASK_CONNECTION;
	}
	if (total > NET_HTTP_HEADERS_MAX)
		return errf(err, len, -E2BIG,
			    "%s.headers: %zu bytes of names and values, at "
			    "most %u",
			    path, total, NET_HTTP_HEADERS_MAX);
	return 0;
}

/* "tls": which of the grant's ports carry TLS, numbers only. */
static int parse_http_tls(json_t *arr, struct http_grant *g, const char *path,
			  char *err, size_t len)
{
	json_int_t port;
	ssize_t n;
	size_t i;
	json_t *v;

	n = check_array(arr, path, "tls", "ports (443)", "entries",
			NET_POLICY_MAX_PORTS, err, len);
	if (n < 0)
		return n;
	json_array_foreach(arr, i, v)
	{
		port = json_is_integer(v) ? json_integer_value(v) : 0;
		if (port < NET_POLICY_MIN_PORT || port > NET_POLICY_MAX_PORT ||
		    !net_rule__port_matches(&g->r, port))
			return errf(err, len, -EINVAL,
				    "%s.tls[%zu]: must be one of the grant's "
				    "ports",
				    path, i);
		g->tls[g->nr_tls++] = port;
	}
	return 0;
}
/*
 * "ask": "request" (the hook is asked for every request) or "connection"
 * (for the first, its answer kept for the connection's others); a field
 * "from": "hook" without "ask" means "connection".
 */
static int parse_http_ask(json_t *v, struct http_grant *g, const char *path,
			  char *err, size_t len)
{
	const char *s = json_string_value(v);

	if (s && !strcmp(s, "request"))
		g->ask = HTTP_ASK_REQUEST;
	else if (s && !strcmp(s, "connection"))
		g->ask = HTTP_ASK_CONNECTION;
	else
		return errf(err, len, -EINVAL,
			    "%s.ask: must be \"request\" or \"connection\"",
			    path);
	return 0;
}

/* path.key, when given: true or false into *out. */
static int parse_flag(json_t *obj, const char *key, bool *out, const char *path,
		      char *err, size_t len)
{
	json_t *v = json_object_get(obj, key);

	if (v && !json_is_boolean(v))
		return errf(err, len, -EINVAL, "%s.%s: must be true or false",
			    path, key);
	*out = json_is_true(v);
	return 0;
}

/* g's first port that carries no TLS (its fields would go in clear), or 0. */
static unsigned int http_clear_port(const struct http_grant *g)
{
	const struct port_range every = { NET_POLICY_MIN_PORT,
					  NET_POLICY_MAX_PORT };
	const struct port_range *r = g->r.nr_ports ? g->r.ports : &every;
	unsigned int n = g->r.nr_ports ? g->r.nr_ports : 1;

	/* At most NET_POLICY_MAX_PORTS + 1 ports of a range are looked at. */
	for (unsigned int i = 0; i < n; i++)
		for (unsigned int port = r[i].lo; port <= r[i].hi; port++)
			if (!net_http_grant__tls(g, port))
				return port;
	return 0;
}

/*
 * Fields go in clear text only where the grant says so: a grant that
 * sets any on a port without TLS needs "clearText": true (finding 7 of
 * issue 34: its default ports, [80, 443], had them sent on 80).
 */
static int check_http_clear_text(const struct net_policy *p, const char *path,
				 char *err, size_t len)
{
	for (unsigned int i = 0; i < p->nr_http; i++) {
		const struct http_grant *g = &p->http[i];
		unsigned int port;

		if (!g->nr_headers || g->clear_text)
			continue;
		port = http_clear_port(g);
		if (port)
			return errf(err, len, -EINVAL,
				    "%s.http[%u].headers: would be sent in "
				    "clear text on port %u (not in \"tls\"): "
				    "grant only TLS ports, or say "
				    "\"clearText\": true",
				    path, i, port);
	}
	return 0;
}

static int parse_http_grant(json_t *obj, struct http_grant *g, const char *path,
			    char *err, size_t len)
{
	static const char *const keys[] = { "host",  "ports",
					    "tls",   "headers",
					    "ask",   "responseTimeoutMs",
					    "trace", "clearText",
					    NULL };
	static const uint16_t default_ports[] = { HTTP_PORT, HTTPS_PORT };
	const char *s;
	json_t *v;
	int ret;

	ret = check_object(obj, keys,
			   "{\"host\": ..., \"ports\": [...], \"tls\": [...], "
			   "\"headers\": {...}, \"ask\": ..., "
			   "\"responseTimeoutMs\": ..., \"trace\": ..., "
			   "\"clearText\": ...}",
			   path, err, len);
	if (!ret)
		ret = need_key(obj, "host", &v, path, err, len);
	if (ret)
		return ret;
	s = json_string_value(v);
	if (!s)
		return errf(err, len, -EINVAL,
			    "%s.host: must be a string (\"api.example.com\" "
			    "or \"*.example.com\")",
			    path);
	ret = rule_set_host(&g->r, s);
	if (ret == -EINVAL)
		return errf(err, len, -EINVAL,
			    "%s.host: \"%s\" is not a hostname "
			    "(\"api.example.com\" or \"*.example.com\")",
			    path, s);
	if (ret)
		return ret;
	v = json_object_get(obj, "ports");
	if (v)
		ret = parse_ports(v, &g->r, path, err, len);
	else
		ret = rule_set_ports(&g->r, default_ports,
				     ARRAY_SIZE(default_ports));
	if (ret)
		return ret;
	v = json_object_get(obj, "tls");
	if (v)
		ret = parse_http_tls(v, g, path, err, len);
	else if (net_rule__port_matches(&g->r, HTTPS_PORT))
		g->tls[g->nr_tls++] = HTTPS_PORT;
	if (ret)
		return ret;
	v = json_object_get(obj, "ask");
	if (v)
		ret = parse_http_ask(v, g, path, err, len);
	if (ret)
		return ret;
	v = json_object_get(obj, "responseTimeoutMs");
	if (v)
		ret = parse_ms(v, NET_POLICY_MAX_RESPONSE_TIMEOUT_MS, path,
			       "responseTimeoutMs", &g->response_ms, err, len);
	if (ret)
		return ret;
	ret = parse_flag(obj, "trace", &g->trace, path, err, len);
	if (!ret)
		ret = parse_flag(obj, "clearText", &g->clear_text, path, err,
				 len);
	v = json_object_get(obj, "headers");
	if (v && !ret)
		ret = parse_http_headers(v, g, path, err, len);
	return ret;
}

/* A grant that asks the hook needs the policy to have one. */
static int check_http_hook(const struct net_policy *p, const char *path,
			   char *err, size_t len)
{
	for (unsigned int i = 0; i < p->nr_http; i++)
		if (p->http[i].ask != HTTP_ASK_NEVER && !p->hook_socket)
			return errf(err, len, -EINVAL,
				    "%s.http[%u]: asks the hook (\"ask\", or "
				    "a field \"from\": \"hook\") and the "
				    "policy has no \"hook\"",
				    path, i);
	return 0;
}

/*
 * A port carries TLS in every grant that has it, or in none: which way a
 * flow is intercepted depends on its port alone.
 */
static int check_http_tls(const struct net_policy *p, const char *path,
			  char *err, size_t len)
{
	for (unsigned int i = 0; i < p->nr_http; i++) {
		const struct http_grant *g = &p->http[i];

		for (unsigned int t = 0; t < g->nr_tls; t++)
			for (unsigned int j = 0; j < p->nr_http; j++)
				if (net_rule__port_matches(&p->http[j].r,
							   g->tls[t]) &&
				    !net_http_grant__tls(&p->http[j],
							 g->tls[t]))
					return errf(
						err, len, -EINVAL,
						"%s.http[%u].tls: port %u "
						"is TLS here and not in "
						"http[%u], which has it too",
						path, i, g->tls[t], j);
	}
	return 0;
}

static int parse_http(json_t *arr, struct net_policy *p, const char *path,
		      char *err, size_t len)
{
	char where[128];
	ssize_t n;
	size_t i;
	json_t *v;
	int ret;

	n = check_array(arr, path, "http", "grants ({\"host\": ...})", "grants",
			NET_POLICY_MAX_RULES, err, len);
	if (n <= 0)
		return n;
	p->http = calloc(n, sizeof(*p->http));
	if (!p->http)
		return -ENOMEM;
	json_array_foreach(arr, i, v)
	{
		snprintf(where, sizeof(where), "%s.http[%zu]", path, i);
		p->nr_http++;
		ret = parse_http_grant(v, &p->http[i], where, err, len);
		if (ret)
			return ret;
	}
	return check_http_tls(p, path, err, len);
}

int net_policy__parse(json_t *obj, const char *path, struct net_policy **out,
		      char *err, size_t len)
{
	static const char *const keys[] = { "dns",  "tcp",  "udp",
					    "http", "hook", NULL };
	struct net_policy *p;
	unsigned int i;
	json_t *v;
	int ret;

	ret = check_object(obj, keys,
			   "\"dns\", \"tcp\", \"udp\", \"http\", \"hook\"",
			   path, err, len);
	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	v = json_object_get(obj, "dns");
	if (v)
		ret = parse_dns(v, p, path, err, len);
	for (i = 0; i < PROTO_COUNT && !ret; i++) {
		v = json_object_get(obj, net_policy__proto_key(i));
		if (v)
			ret = parse_rules(v, p, i, path, err, len);
	}
	v = json_object_get(obj, "http");
	if (v && !ret)
		ret = parse_http(v, p, path, err, len);
	v = json_object_get(obj, "hook");
	if (v && !ret)
		ret = parse_hook(v, p, path, err, len);
	if (!ret)
		ret = check_http_hook(p, path, err, len);
	if (!ret)
		ret = check_http_clear_text(p, path, err, len);
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
