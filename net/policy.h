/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_POLICY_H
#define KILN_VMM_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/flow.h"

/*
 * The VM's network policy ("net": {"policy": ...}, --net-policy,
 * Documentation/network.md "Policy"): which new TCP and UDP flows from
 * the guest may leave, default deny. Parsed completely, or refused with
 * one line naming the key, before it is used; decided on without
 * blocking. Hostname grants match only through this VM's trusted DNS
 * bindings (struct net_bindings), never through what the guest says.
 * Neither object locks: a caller with several threads (the proxy, the
 * resolver, the control API) serializes access itself.
 */

#define NET_POLICY_MAX_RULES		   256U /* per protocol */
#define NET_POLICY_MAX_RESOLVERS	   16U
#define NET_POLICY_MAX_DNS_NAMES	   256U /* "dns.names" entries */
#define NET_POLICY_MAX_PORTS		   64U	/* "ports" entries per rule */
#define NET_POLICY_DNS_PORT		   53U /* a resolver's port when not given */
#define NET_POLICY_MIN_PORT		   1U
#define NET_POLICY_MAX_PORT		   65535U
#define NET_POLICY_DEFAULT_HOOK_TIMEOUT_MS 200U
#define NET_POLICY_MAX_HOOK_TIMEOUT_MS	   10000U
/* An http grant's "responseTimeoutMs" at most: an hour. */
#define NET_POLICY_MAX_RESPONSE_TIMEOUT_MS (3600U * 1000U)
#define NET_POLICY_HOOK_PATH_MAX	   NET_HOOK_PATH_MAX /* flow.h */
#define NET_LABEL_MAX			   63U
/* An http grant's header value (env:NAME, file:/PATH) at most, bytes. */
#define NET_POLICY_SECRET_MAX (8U << 10)

/*
 * The one spelling of a hostname that the policy, the bindings and the
 * TLS interception (net/tls.h) compare: a DNS name s into out
 * (NET_HOSTNAME_MAX + 1 bytes), lower case, the trailing dot dropped.
 * Labels of letters, digits and inner hyphens, 1 to NET_LABEL_MAX long,
 * the last not all digits (that is an address). With allow_wildcard, a
 * leading "*." is taken off and *wildcard set. -EINVAL if s is not such
 * a name.
 */
int __must_check net_hostname__normalize(const char *s, char *out,
					 bool allow_wildcard, bool *wildcard);

/* The seed's address classes; each is a list of RFC ranges (policy.c). */
enum net_addr_class {
	NET_CLASS_LOOPBACK,
	NET_CLASS_PRIVATE,
	NET_CLASS_LINK_LOCAL,
	NET_CLASS_MULTICAST,
	NET_CLASS_BROADCAST,
	NET_CLASS_DOCUMENTATION,
	NET_CLASS_RESERVED,
	NET_CLASS_PUBLIC_INTERNET, /* none of the others */
	NET_CLASS_COUNT,
};

/* addr in network byte order, as in struct in_addr. */
enum net_addr_class net_policy__classify(uint32_t addr);
/* "loopback", "private", ..., "public-internet"; "?" out of range. */
const char *net_policy__class_name(enum net_addr_class c);

struct net_policy;
struct net_bindings;

/*
 * The policy object obj (a JSON object) into *out. path names obj in
 * messages ("net.policy"); err receives "PATH.KEY: why" on failure and
 * *out is left alone.
 */
int __must_check net_policy__parse(json_t *obj, const char *path,
				   struct net_policy **out, char *err,
				   size_t len);
/* NULL is fine. */
void net_policy__free(struct net_policy *p);
/*
 * The runtime context: the VM's gateway (the tap's host side, network
 * byte order), always denied. 0: none.
 */
void net_policy__set_gateway(struct net_policy *p, uint32_t gateway);
/*
 * Parse obj fully, then swap it in for *cur (carrying the runtime
 * context over) and free the old one. On any error *cur is untouched.
 * The caller makes sure no decision runs on *cur meanwhile.
 */
int __must_check net_policy__replace(struct net_policy **cur, json_t *obj,
				     const char *path, char *err, size_t len);

/*
 * One new flow: default deny ("no grant"). Always denied, whatever the
 * rules: 127.0.0.0/8 ("host loopback"), the gateway ("host side of the
 * tap"), 0.0.0.0/8 ("this network"), port 0 ("port 0"), anything but
 * TCP and UDP over IPv4 ("not tcp or udp over ipv4"). A flow to an
 * address of the host's own (f->dst_local) is matched only by rules and
 * http grants that name it exactly (an address, a /32, a hostname
 * without "*."), and is denied "host address" when none does (asked,
 * when the policy has a hook: its answer is about that exact address). Then a TCP flow
 * an http grant covers (its port granted, its destination bound by b to
 * a name the grant names) is NET_VERDICT_HTTP, "http grant N" (the
 * first), d->http_tls set when the port carries TLS. Otherwise the
 * first rule of the flow's protocol that matches its destination and
 * port allows it ("tcp grant N", N its index in "tcp"). A hostname rule
 * matches only an address b binds to that name now; b may be NULL (no
 * bindings). p NULL: the empty policy. No rule matched and the policy
 * has a hook: NET_VERDICT_ASK with reason "no grant" and d->ask filled
 * (the hook's socket and deadline, the destination's class, the names b
 * binds it to); else denied, "no grant".
 */
void net_policy__decide(const struct net_policy *p, const struct net_flow *f,
			const struct net_bindings *b, struct net_decision *d);

/*
 * net.check (Documentation/api.md): what net_policy__decide would answer
 * for a new flow of proto (IPPROTO_TCP, IPPROTO_UDP) to addr:port
 * (network byte order addr; port in host order), opening nothing. With
 * hostname (NULL: none), the flow is also taken as going to that name,
 * as if this VM's DNS had bound it to addr: a grant naming it allows it
 * too. addr 0 (a name alone): only the grants that name it can allow it
 * (address and class rules need the address), reason "no grant names
 * it" otherwise. d as net_policy__decide fills it; -EINVAL when hostname
 * is not a DNS name.
 */
int __must_check net_policy__check(const struct net_policy *p, uint8_t proto,
				   uint32_t addr, uint16_t port,
				   const char *hostname,
				   const struct net_bindings *b,
				   struct net_decision *d);

/*
 * One request of a flow net_policy__decide() answered NET_VERDICT_HTTP
 * (net_decide_http_fn, flow.h): host must be a DNS name, bound to the
 * flow's destination by b unless verified, and granted on its port by
 * an http grant ("http grant N", the first such; its fields copied into
 * d). Else denied: 421 "http host not a name", 421 "http host mismatch"
 * (not bound there), 403 "http no grant", or 403 and the reason the flow
 * is always denied. A grant that asks the hook ("ask", or a field "from":
 * "hook") answers NET_VERDICT_ASK instead of ALLOW, with its own fields,
 * the hook's marked, and the policy's hook socket and deadline. A flow
 * the hook's "grant-http" intercepts (d->hook_flow set by the caller):
 * host checked the same way (and it must be d->hook_host when that is
 * set: else 421 "http host mismatch"), then no grant is looked for:
 * NET_VERDICT_ASK
 * with the hook's socket and deadline when d->hook_flow_each, else ALLOW
 * with no field, NET_HOOK_GRANT_HTTP; 403 "http no grant" when the policy
 * has no hook any more.
 */
void net_policy__decide_http(const struct net_policy *p,
			     const struct net_flow *f, const char *host,
			     bool verified, const struct net_bindings *b,
			     struct net_http_decision *d);

/* What the parsed policy holds, for the DNS resolver and the hook. */
unsigned int net_policy__nr_rules(const struct net_policy *p, uint8_t proto);
unsigned int net_policy__nr_resolvers(const struct net_policy *p);
unsigned int net_policy__nr_http(const struct net_policy *p);
/* Resolver i (< nr_resolvers) as an IPv4 socket address. */
void net_policy__resolver(const struct net_policy *p, unsigned int i,
			  struct sockaddr_in *sa);
/* The hook's socket path (NULL: no hook) and its deadline in ms. */
const char *net_policy__hook(const struct net_policy *p,
			     unsigned int *timeout_ms);

/*
 * The hook the DNS resolver asks (Documentation/network.md, "DNS
 * through the hook"): the policy's hook socket when the policy has a
 * hook and no "dns" key (a "dns" key, even with no resolvers, is a
 * static rule and decides alone); else NULL.
 */
const char *net_policy__dns_hook(const struct net_policy *p,
				 unsigned int *timeout_ms);
/*
 * The names the resolver forwards questions about (Documentation/
 * network.md, "Which names"): "dns.names", and every hostname a tcp,
 * udp or http grant names (wildcards kept). A copy of its own, apart
 * from p (which may be replaced and freed meanwhile); p NULL: no name.
 * NULL on -ENOMEM: net_dns_names__allows() then allows nothing.
 */
struct net_dns_names;
struct net_dns_names *net_policy__dns_names(const struct net_policy *p);
/* NULL is fine. */
void net_dns_names__free(struct net_dns_names *s);
/*
 * Whether s allows name (lower case, no trailing dot): one of its names,
 * or below one of its wildcards, or any name when "dns.names" has "*".
 */
bool net_dns_names__allows(const struct net_dns_names *s, const char *name);

/*
 * A resolver's address "A.B.C.D" or "A.B.C.D:PORT" (port 53 when not
 * given) into *sa, as "dns.resolvers" takes it: NULL, or why it is not
 * one ("is not a unicast address", ...).
 */
const char *net_policy__parse_resolver(const char *s, struct sockaddr_in *sa);

/*
 * Trusted hostname -> IPv4 bindings, from this VM's DNS answers: a
 * bounded table, each binding kept for its answer's TTL clamped to
 * [NET_BINDING_MIN_TTL_S, NET_BINDING_MAX_TTL_S]. Names are compared
 * without case and without a trailing dot.
 */
#define NET_BINDINGS_MAX      4096U
#define NET_BINDING_MIN_TTL_S 5U    /* a TTL-0 answer still serves a connect */
#define NET_BINDING_MAX_TTL_S 3600U /* trust ends within the hour */

/* Milliseconds on a monotonic clock; injectable for tests. */
typedef uint64_t (*net_clock_fn)(void *opaque);

/* clock NULL: CLOCK_MONOTONIC. NULL on -ENOMEM. */
struct net_bindings *net_bindings__create(net_clock_fn clock, void *opaque);
void net_bindings__destroy(struct net_bindings *b);
/*
 * host (a DNS name) resolved to addr (network byte order) for ttl_s
 * seconds: adds the binding or renews it. A full table drops expired
 * bindings first, then the one that expires soonest. -EINVAL for a name
 * that is not a hostname.
 */
int __must_check net_bindings__insert(struct net_bindings *b, const char *host,
				      uint32_t addr, uint32_t ttl_s);
/* Whether host is bound to addr now. */
bool net_bindings__lookup(const struct net_bindings *b, const char *host,
			  uint32_t addr);
/*
 * The names bound to addr now, normalized, into names[max]: the lowest
 * max of them in strcmp order, sorted. Returns how many were written.
 */
unsigned int net_bindings__names(const struct net_bindings *b, uint32_t addr,
				 char (*names)[NET_HOSTNAME_MAX + 1],
				 unsigned int max);
/* Drops the expired bindings; returns how many. */
unsigned int net_bindings__expire(struct net_bindings *b);
/* Bindings held, expired ones not yet dropped included. */
size_t net_bindings__count(const struct net_bindings *b);

#endif
