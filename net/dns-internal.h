/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_DNS_INTERNAL_H
#define KILN_VMM_DNS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * Between dns.c and dns-msg.c (and the unit test): DNS messages (RFC
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
 * A wire name as a hostname ("api.example.com"), for the bindings:
 * -EINVAL for the root, or a label with a byte that a hostname cannot
 * have (net_bindings__insert checks the rest).
 */
int __must_check dns_msg__name_text(const uint8_t *wire, size_t len, char *out,
				    size_t outlen);

#endif
