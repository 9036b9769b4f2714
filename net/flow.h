/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FLOW_H
#define KILN_FLOW_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * One new flow from the guest, as the vmm's egress proxy sees it, and the
 * decision the policy gives it (Documentation/network.md, "The proxy").
 */

/* A DNS name in text, without its trailing dot (RFC 1035 2.3.4). */
#define NET_HOSTNAME_MAX 253U
/* sockaddr_un's sun_path (108 bytes) less its terminating NUL. */
#define NET_HOOK_PATH_MAX 107U
/* The hostnames a hook question carries (the lowest, in byte order). */
#define NET_ASK_MAX_HOSTNAMES 8U
/* "public-internet" and its NUL, the longest address class name. */
#define NET_CLASS_NAME_MAX 16U

struct net_flow {
	uint8_t proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	struct sockaddr_in src; /* the guest's address and port */
	struct sockaddr_in dst; /* where the guest sent it (original) */
	/*
	 * dst is an address of the host's own interfaces (the netns the
	 * proxy originates from: net/hostaddr.h), set by the proxy: only
	 * a grant that names that exact address may open it.
	 */
	bool dst_local;
};

/*
 * ASK: the rules did not decide; the proxy puts the flow to the policy's
 * hook (Documentation/network.md, "The hook") without holding any lock.
 * HTTP: an http grant covers the flow (a TCP one whose destination this
 * VM's DNS binds to a granted name, on a granted port): the proxy
 * intercepts it and decides each request with a net_decide_http_fn
 * ("HTTP grants and interception").
 */
enum net_verdict {
	NET_VERDICT_DENY,
	NET_VERDICT_ALLOW,
	NET_VERDICT_ASK,
	NET_VERDICT_HTTP,
};

/* What the proxy needs to ask the hook, copied out of the policy. */
struct net_ask {
	char socket[NET_HOOK_PATH_MAX + 1];  /* the hook's Unix socket */
	unsigned int timeout_ms;	     /* the question's deadline */
	char class_name[NET_CLASS_NAME_MAX]; /* the destination's class */
	unsigned int nr_hostnames;
	/* The names this VM's trusted DNS binds the destination to now. */
	char hostnames[NET_ASK_MAX_HOSTNAMES][NET_HOSTNAME_MAX + 1];
};

struct net_decision {
	enum net_verdict verdict;
	/*
	 * For the log and counters: "no grant", "tcp grant 2", ...; with
	 * ASK, why the rules alone would deny it ("no grant"): a recheck
	 * cuts by it a flow the hook did not grant.
	 */
	char reason[64];
	struct net_ask ask; /* NET_VERDICT_ASK only */
	bool http_tls;	    /* NET_VERDICT_HTTP: the port carries TLS */
	/*
	 * NET_VERDICT_HTTP from the hook's "grant-http" to the flow's
	 * question (Documentation/network.md, "The hook intercepts"):
	 * hook_flow is that question's id (0: a static grant's flow), which
	 * the flow's request questions carry; http_tls_auto: the guest's
	 * first bytes say TLS or clear text ("tls": "auto"), else http_tls
	 * does; hook_each_request: every request is put to the hook ("ask":
	 * "request"), else none is ("connection"); http_host: the name the
	 * hook pinned it to ("host"; "": any name DNS binds to it).
	 */
	uint64_t hook_flow;
	bool http_tls_auto;
	bool hook_each_request;
	/* The hook's "host": the one name its requests may give; "": any. */
	char http_host[NET_HOSTNAME_MAX + 1];
};

/* The reason of a flow the hook's "grant-http" intercepts, and its requests'. */
#define NET_HOOK_GRANT_HTTP "hook grant-http"

/*
 * Decides one new flow; must not block: a flow that needs the hook comes
 * back as NET_VERDICT_ASK and the caller asks.
 */
typedef void (*net_decide_fn)(void *opaque, const struct net_flow *f,
			      struct net_decision *d);

/* Header fields an http grant sets on each request it allows. */
#define NET_HTTP_MAX_HEADERS 16U
/* Their names and values, NULs included (= HTTP_EDITS_MAX, http.h). */
#define NET_HTTP_HEADERS_MAX (16U << 10)

/*
 * One request of an intercepted flow, decided: ALLOW with the fields to
 * set upstream, DENY with the status the guest gets (403, 421), or ASK:
 * the grant puts its requests to the policy's hook (Documentation/
 * network.md, "The hook and HTTP requests"), which sets the fields
 * marked `hook` (their value "" here) and may remove others; the rest
 * are the grant's own. The values are secrets: whoever holds a decision
 * wipes it (explicit_bzero) once the fields are applied, and never logs
 * one.
 */
struct net_http_decision {
	enum net_verdict verdict; /* NET_VERDICT_ALLOW, _DENY or _ASK */
	unsigned int status;	  /* DENY: 403 or 421 */
	char reason[64];	  /* "http grant 0", "http no grant", ... */
	unsigned int nr_headers;
	struct {
		uint16_t name, value; /* offsets of NUL-terminated strings */
		bool hook;	      /* ASK: the hook's to set (value "") */
		bool remove;	      /* the hook's answer: remove it */
	} headers[NET_HTTP_MAX_HEADERS];
	char buf[NET_HTTP_HEADERS_MAX];
	/* NET_VERDICT_ASK: where and how long, and how often. */
	char hook_socket[NET_HOOK_PATH_MAX + 1];
	unsigned int hook_timeout_ms;
	bool ask_each_request; /* else once per connection, then kept */
	unsigned int grant;    /* the http grant's index */
	/* ALLOW: the grant's upstream response deadline; 0: the proxy's. */
	unsigned int response_ms;
	/* The grant lets TRACE through ("trace"), with none of its fields. */
	bool trace;
	/*
	 * Fields may be set on a clear-text flow: the grant's "clearText",
	 * or in a hook's answer to a request, the answer's.
	 */
	bool clear_text;
	/*
	 * In, set by the caller before the decision: the flow is the hook's
	 * "grant-http" (net_decision.hook_flow, its question's id; 0: a
	 * static grant's), its requests each put to the hook (ASK,
	 * ask_each_request) when hook_flow_each, else allowed with no field.
	 */
	uint64_t hook_flow;
	bool hook_flow_each;
	char hook_host[NET_HOSTNAME_MAX + 1]; /* its "host"; "": any bound */
};

/*
 * Decides one request of a flow decide answered NET_VERDICT_HTTP, by the
 * policy as it is now: host (what the guest named: the TLS server name,
 * or the first request's Host) must be granted on the flow's port, and
 * bound to its destination by this VM's DNS unless verified says it was
 * found bound already (an earlier request of the connection, or its TLS
 * handshake). Must not block.
 */
typedef void (*net_decide_http_fn)(void *opaque, const struct net_flow *f,
				   const char *host, bool verified,
				   struct net_http_decision *d);

#endif
