/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_DNS_INTERNAL_H
#define KILN_VMM_DNS_INTERNAL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * Between dns.c, dns-msg.c and dns-hook.c (and the unit tests): DNS
 * messages (RFC
 * 1035 4.1) read from untrusted bytes, every length and offset checked
 * against the message. Both sides are untrusted: the guest's queries,
 * and upstream's answers, which become trusted bindings only after they
 * match the query they answer.
 */

#define DNS_HDR_LEN	  12U
#define DNS_NAME_WIRE_MAX 255U /* RFC 1035 3.1, length octets included */
#define DNS_LABEL_MAX	  63U
#define DNS_TCP_LEN	  2U /* a TCP message's length prefix (4.2.2) */
#define DNS_QUESTION_MAX  (DNS_NAME_WIRE_MAX + 4U) /* name, type, class */
/* A reply of a header and the question: REFUSED, SERVFAIL, TC. */
#define DNS_SHORT_REPLY_MAX (DNS_HDR_LEN + DNS_QUESTION_MAX)

/* Header flags (RFC 1035 4.1.1). */
#define DNS_FLAG_QR	0x8000U
#define DNS_OPCODE_MASK 0x7800U
#define DNS_FLAG_TC	0x0200U
#define DNS_FLAG_RD	0x0100U
#define DNS_FLAG_RA	0x0080U
#define DNS_RCODE_MASK	0x000fU

#define DNS_RCODE_NOERROR  0U
#define DNS_RCODE_FORMERR  1U
#define DNS_RCODE_SERVFAIL 2U
#define DNS_RCODE_NOTIMP   4U
#define DNS_RCODE_REFUSED  5U

#define DNS_TYPE_A     1U
#define DNS_TYPE_CNAME 5U
#define DNS_TYPE_AAAA  28U
#define DNS_TYPE_OPT   41U /* EDNS (RFC 6891) */
#define DNS_CLASS_IN   1U

/* Records of one answer looked at for bindings; CNAME hops followed. */
#define DNS_MAX_ANSWER_RRS 64U
#define DNS_MAX_CNAME_HOPS 8U
/* Additional records a query may carry (an OPT, maybe a cookie's). */
#define DNS_MAX_QUERY_ADDITIONAL 4U

struct dns_question {
	uint8_t name[DNS_NAME_WIRE_MAX]; /* uncompressed, lower case */
	size_t name_len;		 /* with the root label's 0 */
	uint16_t type, qclass;
	size_t end; /* offset just past it in its message */
};

enum dns_query_verdict {
	DNS_QUERY_OK,
	DNS_QUERY_DROP,	   /* not even a header, or a response: no answer */
	DNS_QUERY_FORMERR, /* answer FORMERR, header only */
	DNS_QUERY_NOTIMP,  /* an opcode other than QUERY */
};

struct dns_query_info {
	uint16_t id, flags;
	struct dns_question q;
	size_t len;	      /* the message without trailing bytes */
	size_t opt_class_off; /* the OPT record's payload size; 0: no OPT */
	unsigned int udp_max; /* the OPT's UDP payload size, as given */
};

/* One binding an answer gives: the question's name to addr for ttl_s. */
struct dns_a_record {
	uint32_t addr; /* network byte order */
	uint32_t ttl_s;
};

/* A record of an answer, as dns_msg__a_records reads it. */
struct dns_rr {
	uint8_t owner[DNS_NAME_WIRE_MAX];
	size_t owner_len;
	uint16_t type, rclass;
	uint32_t ttl_s;
	uint8_t target[DNS_NAME_WIRE_MAX]; /* a CNAME's */
	size_t target_len;
	uint32_t addr; /* an A record's */
};

/* Header fields at their offsets. */
#define DNS_OFF_ID	0U
#define DNS_OFF_FLAGS	2U
#define DNS_OFF_QDCOUNT 4U
#define DNS_OFF_ANCOUNT 6U
#define DNS_OFF_NSCOUNT 8U
#define DNS_OFF_ARCOUNT 10U

static inline uint16_t dns_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline void dns_put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

/* A message's RCODE (m has a header). */
static inline unsigned int dns_rcode(const uint8_t *m)
{
	return dns_get16(m + DNS_OFF_FLAGS) & DNS_RCODE_MASK;
}

/* A guest's query m[0, len): what it asks and what to do with it. */
enum dns_query_verdict dns_msg__parse_query(const uint8_t *m, size_t len,
					    struct dns_query_info *qi);
/*
 * Whether m[0, len) is a response with ID id to question q (name without
 * case, type and class).
 */
bool dns_msg__answers(const uint8_t *m, size_t len, uint16_t id,
		      const struct dns_question *q);
/*
 * A reply of our own into out (out_size bytes, at least DNS_HDR_LEN;
 * DNS_SHORT_REPLY_MAX holds any) to query qm (parsed as qi): the header
 * with id, QR, the opcode and RD of the query, extra flags and rcode;
 * the question too when with_question and it fits. Its length.
 */
size_t dns_msg__reply(uint8_t *out, size_t out_size, const uint8_t *qm,
		      const struct dns_query_info *qi, uint16_t extra_flags,
		      unsigned int rcode, bool with_question);
/*
 * The A records (class IN) answer m[0, len) gives q's name: directly, or
 * at the end of a CNAME chain in the same answer (each TTL then the
 * lowest along the chain). rrs is scratch of DNS_MAX_ANSWER_RRS. At most
 * max records into out; how many, or -EBADMSG for an answer that does
 * not parse (then nothing is bound from it).
 */
int __must_check dns_msg__a_records(const uint8_t *m, size_t len,
				    const struct dns_question *q,
				    struct dns_rr *rrs,
				    struct dns_a_record *out, unsigned int max);
/*
 * The lowest TTL of the answer section's records (the first
 * DNS_MAX_ANSWER_RRS, any type) into *ttl_s, UINT32_MAX when it has
 * none: how many it has, or -EBADMSG.
 */
int __must_check dns_msg__min_ttl(const uint8_t *m, size_t len,
				  uint32_t *ttl_s);
/*
 * A wire name as a hostname ("api.example.com"), for the bindings:
 * -EINVAL for the root, or a label with a byte that a hostname cannot
 * have (net_bindings__insert checks the rest).
 */
int __must_check dns_msg__name_text(const uint8_t *wire, size_t len, char *out,
				    size_t outlen);

/* ---- DNS through the hook (dns-hook.c) --------------------------------- */

/*
 * A guest's question put to the policy's hook when the policy has a hook
 * and no "dns" key (net_policy__dns_hook; Documentation/network.md, "DNS
 * through the hook"). Its line, its answer read and checked, and the
 * grants kept for their TTL so one lookup is not a question per retry.
 * All of it belongs to the resolver's thread: nothing here locks.
 */
#define DNS_HOOK_MAX_RESOLVERS 8U   /* in one grant-dns; more: invalid */
#define DNS_HOOK_CACHE_MAX     256U /* grants kept; full: soonest out */
#define DNS_HOOK_MIN_TTL_S     5U   /* a grant is kept at least this */
#define DNS_HOOK_MAX_TTL_S     300U /* and at most this */
/* A name as text: each wire byte at most "\DDD", and the NUL. */
#define DNS_HOOK_NAME_MAX (4U * DNS_NAME_WIRE_MAX + 1U)
/* The hook's reason text kept for the log (HOOK_DETAIL_MAX). */
#define DNS_HOOK_WHY_MAX 64U

/* What a question says; the build argument of hook__ask_line(). */
struct dns_hook_question {
	bool tcp;
	struct sockaddr_in src; /* the guest's address and port */
	struct sockaddr_in dst; /* where the guest sent it */
	const struct dns_question *q;
};

enum dns_hook_verdict {
	DNS_HOOK_GRANT,	  /* "grant-dns": forwarded to its resolvers */
	DNS_HOOK_DENY,	  /* "deny": REFUSED */
	DNS_HOOK_INVALID, /* a grant-dns that breaks a rule: SERVFAIL */
	DNS_HOOK_UNKNOWN, /* another verdict ("grant" included): SERVFAIL */
};

struct dns_hook_answer {
	enum dns_hook_verdict verdict;
	struct sockaddr_in resolvers[DNS_HOOK_MAX_RESOLVERS];
	unsigned int nr_resolvers;
	/* The hook's reason, the rule broken, or the verdict unknown. */
	char why[DNS_HOOK_WHY_MAX];
};

/*
 * A wire name (lower case, as dns_msg__parse_query reads it) as text:
 * labels joined by '.', no trailing dot, "." for the root; a byte that
 * is not a letter, digit, '-' or '_' as "\DDD" (RFC 1035 5.1). out
 * holds DNS_HOOK_NAME_MAX.
 */
void dns_hook__name(const uint8_t *wire, size_t len,
		    char out[DNS_HOOK_NAME_MAX]);
/* "A", "AAAA", ... or "TYPE%u" (RFC 3597 5) into out (16 bytes). */
void dns_hook__qtype(uint16_t type, char out[16]);
/*
 * The question line for arg (a struct dns_hook_question) with id into
 * buf (hook_line_build_fn): its length with the newline, no NUL, or
 * -ENOSPC, -ENOMEM.
 */
int dns_hook__question(char *buf, size_t len, uint64_t id, const void *arg);
/*
 * The answer line (n bytes, checked by the hook client: an object with
 * the id, a string verdict) to the question about q, into *a. Never
 * fails: what is wrong with it is the verdict (DNS_HOOK_INVALID, a->why
 * the rule).
 */
void dns_hook__answer(const char *line, size_t n, const struct dns_question *q,
		      struct dns_hook_answer *a);

/* Lines logged: at most DNS_HOOK_LOG_BURST a DNS_HOOK_LOG_WINDOW_MS. */
#define DNS_HOOK_LOG_WINDOW_MS 10000U
#define DNS_HOOK_LOG_BURST     20U
struct dns_hook_log {
	uint64_t window_ms;
	unsigned int lines;
	uint64_t suppressed;
};

/*
 * One line for a query the hook did not grant: refused (REFUSED) or
 * not (SERVFAIL), its type and name, who asked whom, the reason and the
 * hook's own detail ("" for none); rate-limited by l.
 */
void dns_hook__log(struct dns_hook_log *l, uint64_t now_ms,
		   const struct dns_question *q, bool tcp,
		   const struct sockaddr_in *src, const struct sockaddr_in *dst,
		   bool refused, const char *reason, const char *detail);

/* The grants kept (one resolver thread's: no locks). */
struct dns_hook_cache;

/* max 0: DNS_HOOK_CACHE_MAX. NULL on -ENOMEM. */
struct dns_hook_cache *dns_hook_cache__create(unsigned int max);
void dns_hook_cache__destroy(struct dns_hook_cache *c);
/*
 * The live grant for q's name and type at now_ms: its resolvers into
 * res (DNS_HOOK_MAX_RESOLVERS), how many; 0: none (asked again).
 */
unsigned int dns_hook_cache__lookup(const struct dns_hook_cache *c,
				    const struct dns_question *q,
				    uint64_t now_ms, struct sockaddr_in *res);
/*
 * A grant for q's name and type to nr resolvers res, kept ttl_s seconds
 * (clamped to DNS_HOOK_MIN_TTL_S..DNS_HOOK_MAX_TTL_S) from now_ms: the
 * entry made or replaced. Full: an expired entry goes, else the one that
 * expires soonest.
 */
void dns_hook_cache__insert(struct dns_hook_cache *c,
			    const struct dns_question *q,
			    const struct sockaddr_in *res, unsigned int nr,
			    uint32_t ttl_s, uint64_t now_ms);
/* Every grant forgotten (a policy replaced). */
void dns_hook_cache__flush(struct dns_hook_cache *c);
/* Entries held, expired ones not yet replaced included. */
unsigned int dns_hook_cache__count(const struct dns_hook_cache *c);

#endif
