/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_POLICY_INTERNAL_H
#define KILN_VMM_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/policy.h"

/*
 * Between policy.c (deciding), policy-parse.c (the JSON, the secrets)
 * and bindings.c: the parsed policy as both read it, how a rule's
 * hostname matches one, and the hostname rule's lookup (the one spelling
 * of a hostname, net_hostname__normalize(), is in policy.h).
 */

/* The first octet of 127.0.0.0/8 and of 0.0.0.0/8, host byte order. */
#define LOOPBACK_NET	 127U
#define THIS_NETWORK_NET 0U

enum { PROTO_TCP, PROTO_UDP, PROTO_COUNT };

/* The policy's key of a protocol's rules: "tcp", "udp". */
static inline const char *net_policy__proto_key(unsigned int proto)
{
	static const char *const keys[PROTO_COUNT] = { "tcp", "udp" };

	return keys[proto];
}

/* The mask of a prefix, host byte order. */
static inline uint32_t net_prefix_mask(unsigned int prefix)
{
	return prefix ? ~0U << (32 - prefix) : 0;
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

/* A header field an http grant sets; value is a secret (wiped at free). */
struct grant_header {
	char *name;  /* lower case, a token no framing field has */
	char *value; /* "" when from_hook */
	size_t value_len;
	bool from_hook; /* the hook's answer sets it, request by request */
};

/* When an http grant's requests go to the hook ("ask"). */
enum http_ask {
	HTTP_ASK_NEVER,
	HTTP_ASK_CONNECTION, /* the first request; its answer kept */
	HTTP_ASK_REQUEST,    /* every request */
};

/*
 * An http grant: its hostname and ports as a DEST_HOST rule, the ports of
 * those that carry TLS, the fields it sets.
 */
struct http_grant {
	struct rule r;
	unsigned int nr_tls;
	uint16_t tls[NET_POLICY_MAX_PORTS];
	unsigned int nr_headers;
	struct grant_header headers[NET_HTTP_MAX_HEADERS];
	enum http_ask ask;
	unsigned int response_ms; /* 0: the proxy's deadline */
	bool trace;	 /* "trace": TRACE requests pass, with no field */
	bool clear_text; /* "clearText": fields on its clear-text ports */
};

/* A "dns.names" entry (the resolver's names: Documentation/network.md). */
struct dns_name {
	char *host;    /* lower case, no trailing dot, no "*." */
	bool wildcard; /* "*.host": names below host only */
};

struct net_policy {
	struct rule *rules[PROTO_COUNT];
	unsigned int nr_rules[PROTO_COUNT];
	struct http_grant *http;
	unsigned int nr_http;
	struct sockaddr_in resolvers[NET_POLICY_MAX_RESOLVERS];
	unsigned int nr_resolvers;
	bool has_dns;		    /* a "dns" key, even with no resolvers */
	struct dns_name *dns_names; /* "dns.names" */
	unsigned int nr_dns_names;
	bool dns_any_name; /* "dns.names" holds "*" */
	char *hook_socket; /* NULL: no hook */
	unsigned int hook_timeout_ms;
	uint32_t gateway; /* runtime context, network byte order; 0: none */
};

/* An address class by its name ("private"), or -1. */
int net_policy__class_by_name(const char *s);
/* Whether r covers port (no ports: every one). */
bool net_rule__port_matches(const struct rule *r, uint16_t port);
/* Whether port is one of the ports g's flows speak TLS on. */
bool net_http_grant__tls(const struct http_grant *g, uint16_t port);

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

/*
 * fn(arg, name, addr) for each binding b holds now (name normalized,
 * addr in network byte order), in no order; fn must not change b.
 */
void net_bindings__for_each(const struct net_bindings *b,
			    void (*fn)(void *arg, const char *name,
				       uint32_t addr),
			    void *arg);

#endif
