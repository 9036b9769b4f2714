// SPDX-License-Identifier: GPL-2.0
/*
 * DNS messages for the VM's resolver (dns-internal.h): the guest's query
 * read and checked, upstream's answer matched to it, the A records for
 * the question's name found. Every read is bounds-checked against the
 * message; compression pointers may only point backwards, past the
 * header, a bounded number of times, so no message makes a loop.
 */
#include <errno.h>
#include <string.h>

#include "net/dns-internal.h"

#define DNS_PTR_MASK	 0xc0U /* a label's top two bits: 11 is a pointer */
#define DNS_PTR_OFF_MASK 0x3fffU
#define DNS_MAX_PTR_HOPS 32U
#define DNS_RR_FIXED	 10U	     /* type, class, TTL, RDLENGTH */
#define DNS_TTL_MAX	 0x7fffffffU /* RFC 2181 8: larger means 0 */
#define DNS_IPV4_LEN	 4U

static uint8_t ascii_lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/*
 * The name at *off into out (uncompressed, lower case); *off moves past
 * it where it sits (past the first pointer, if any).
 */
static int name_read(const uint8_t *m, size_t len, size_t *off, uint8_t *out,
		     size_t *out_len, bool pointers)
{
	size_t pos = *off, next = 0, n = 0, to;
	unsigned int hops = 0;
	uint8_t l;

	for (;;) {
		if (pos >= len)
			return -EBADMSG;
		l = m[pos];
		if ((l & DNS_PTR_MASK) == DNS_PTR_MASK) {
			if (!pointers || pos + 1 >= len)
				return -EBADMSG;
			to = dns_get16(m + pos) & DNS_PTR_OFF_MASK;
			/* Backwards only, never into the header: no loops. */
			if (to >= pos || to < DNS_HDR_LEN ||
			    ++hops > DNS_MAX_PTR_HOPS)
				return -EBADMSG;
			if (!next)
				next = pos + 2;
			pos = to;
			continue;
		}
		if (l & DNS_PTR_MASK)
			return -EBADMSG; /* 01 and 10: extended label types */
		if (pos + 1 + l > len || n + 1 + l > DNS_NAME_WIRE_MAX)
			return -EBADMSG;
		out[n++] = l;
		for (unsigned int i = 0; i < l; i++)
			out[n++] = ascii_lower(m[pos + 1 + i]);
		pos += 1 + l;
		if (!l)
			break;
	}
	*off = next ? next : pos;
	*out_len = n;
	return 0;
}

static bool same_name(const uint8_t *a, size_t alen, const uint8_t *b,
		      size_t blen)
{
	return alen == blen && !memcmp(a, b, alen);
}

/*
 * A query's question is read with pointers refused (query is true): it
 * is the first thing after the header, so there is nothing earlier a
 * pointer could save repeating, and a reply repeats it as it is, within
 * DNS_QUESTION_MAX. An answer's may be compressed.
 */
static int question_read(const uint8_t *m, size_t len, size_t off,
			 struct dns_question *q, bool query)
{
	int ret = name_read(m, len, &off, q->name, &q->name_len, !query);

	if (ret)
		return ret;
	if (off + 4 > len)
		return -EBADMSG;
	q->type = dns_get16(m + off);
	q->qclass = dns_get16(m + off + 2);
	q->end = off + 4;
	return 0;
}

/* One record at *off: its owner, fixed fields and where its data is. */
struct rr_at {
	uint8_t owner[DNS_NAME_WIRE_MAX];
	size_t owner_len;
	uint16_t type, rclass;
	uint32_t ttl_s;
	size_t rdata, rdlen;
};

static int rr_read(const uint8_t *m, size_t len, size_t *off, struct rr_at *r)
{
	size_t at = *off;
	int ret;

	ret = name_read(m, len, &at, r->owner, &r->owner_len, true);
	if (ret)
		return ret;
	if (at + DNS_RR_FIXED > len)
		return -EBADMSG;
	r->type = dns_get16(m + at);
	r->rclass = dns_get16(m + at + 2);
	r->ttl_s =
		(uint32_t)dns_get16(m + at + 4) << 16 | dns_get16(m + at + 6);
	if (r->ttl_s > DNS_TTL_MAX)
		r->ttl_s = 0;
	r->rdlen = dns_get16(m + at + 8);
	r->rdata = at + DNS_RR_FIXED;
	if (r->rdata + r->rdlen > len)
		return -EBADMSG;
	*off = r->rdata + r->rdlen;
	return 0;
}

/* The additional records: an OPT raises the UDP size, up to its cap. */
static int query_additional(const uint8_t *m, size_t len, size_t *off,
			    unsigned int count, struct dns_query_info *qi)
{
	struct rr_at r;
	int ret;

	if (count > DNS_MAX_QUERY_ADDITIONAL)
		return -EBADMSG;
	for (unsigned int i = 0; i < count; i++) {
		ret = rr_read(m, len, off, &r);
		if (ret)
			return ret;
		if (r.type != DNS_TYPE_OPT)
			continue;
		/* One OPT, owned by the root (RFC 6891 6.1.1). */
		if (qi->opt_class_off || r.owner_len != 1)
			return -EBADMSG;
		qi->opt_class_off = r.rdata - DNS_RR_FIXED + 2;
		qi->udp_max = r.rclass;
	}
	return 0;
}

enum dns_query_verdict dns_msg__parse_query(const uint8_t *m, size_t len,
					    struct dns_query_info *qi)
{
	size_t off;

	memset(qi, 0, sizeof(*qi));
	if (len < DNS_HDR_LEN)
		return DNS_QUERY_DROP;
	qi->id = dns_get16(m + DNS_OFF_ID);
	qi->flags = dns_get16(m + DNS_OFF_FLAGS);
	/* A response sent to the resolver is never answered: no loops. */
	if (qi->flags & DNS_FLAG_QR)
		return DNS_QUERY_DROP;
	if (qi->flags & DNS_OPCODE_MASK)
		return DNS_QUERY_NOTIMP;
	if (dns_get16(m + DNS_OFF_QDCOUNT) != 1 ||
	    dns_get16(m + DNS_OFF_ANCOUNT) || dns_get16(m + DNS_OFF_NSCOUNT))
		return DNS_QUERY_FORMERR;
	if (question_read(m, len, DNS_HDR_LEN, &qi->q, true))
		return DNS_QUERY_FORMERR;
	off = qi->q.end;
	if (query_additional(m, len, &off, dns_get16(m + DNS_OFF_ARCOUNT), qi))
		return DNS_QUERY_FORMERR;
	qi->len = off;
	return DNS_QUERY_OK;
}

bool dns_msg__answers(const uint8_t *m, size_t len, uint16_t id,
		      const struct dns_question *q)
{
	struct dns_question a;

	if (len < DNS_HDR_LEN || dns_get16(m + DNS_OFF_ID) != id ||
	    !(dns_get16(m + DNS_OFF_FLAGS) & DNS_FLAG_QR) ||
	    dns_get16(m + DNS_OFF_QDCOUNT) != 1)
		return false;
	if (question_read(m, len, DNS_HDR_LEN, &a, false))
		return false;
	return same_name(a.name, a.name_len, q->name, q->name_len) &&
	       a.type == q->type && a.qclass == q->qclass;
}

size_t dns_msg__reply(uint8_t *out, size_t out_size, const uint8_t *qm,
		      const struct dns_query_info *qi, uint16_t extra_flags,
		      unsigned int rcode, bool with_question)
{
	uint16_t flags = DNS_FLAG_QR |
			 (qi->flags & (DNS_OPCODE_MASK | DNS_FLAG_RD)) |
			 extra_flags | (rcode & DNS_RCODE_MASK);
	size_t qlen = with_question ? qi->q.end - DNS_HDR_LEN : 0;

	memset(out, 0, DNS_HDR_LEN);
	dns_put16(out + DNS_OFF_ID, qi->id);
	dns_put16(out + DNS_OFF_FLAGS, flags);
	/*
	 * A parsed query's question is uncompressed: at most
	 * DNS_QUESTION_MAX bytes, which DNS_SHORT_REPLY_MAX holds. Checked
	 * all the same: without its question a reply is still an answer.
	 */
	if (!qlen || qlen > out_size - DNS_HDR_LEN)
		return DNS_HDR_LEN;
	dns_put16(out + DNS_OFF_QDCOUNT, 1);
	memcpy(out + DNS_HDR_LEN, qm + DNS_HDR_LEN, qlen);
	return DNS_HDR_LEN + qlen;
}

/* The answer section's records into rrs; how many were kept. */
static int answer_read(const uint8_t *m, size_t len, size_t off,
		       struct dns_rr *rrs)
{
	unsigned int count = dns_get16(m + DNS_OFF_ANCOUNT), n = 0;
	struct rr_at r;
	size_t at;
	int ret;

	if (count > DNS_MAX_ANSWER_RRS)
		count = DNS_MAX_ANSWER_RRS; /* the rest is relayed, not bound */
	for (unsigned int i = 0; i < count; i++) {
		ret = rr_read(m, len, &off, &r);
		if (ret)
			return ret;
		if (r.rclass != DNS_CLASS_IN ||
		    (r.type != DNS_TYPE_A && r.type != DNS_TYPE_CNAME))
			continue;
		rrs[n] = (struct dns_rr){ .type = r.type,
					  .rclass = r.rclass,
					  .ttl_s = r.ttl_s,
					  .owner_len = r.owner_len };
		memcpy(rrs[n].owner, r.owner, r.owner_len);
		if (r.type == DNS_TYPE_A) {
			if (r.rdlen != DNS_IPV4_LEN)
				return -EBADMSG;
			memcpy(&rrs[n].addr, m + r.rdata, DNS_IPV4_LEN);
		} else {
			at = r.rdata;
			ret = name_read(m, len, &at, rrs[n].target,
					&rrs[n].target_len, true);
			if (ret || at != r.rdata + r.rdlen)
				return -EBADMSG;
		}
		n++;
	}
	return (int)n;
}

int dns_msg__a_records(const uint8_t *m, size_t len,
		       const struct dns_question *q, struct dns_rr *rrs,
		       struct dns_a_record *out, unsigned int max)
{
	const uint8_t *name = q->name;
	size_t name_len = q->name_len;
	uint32_t chain_ttl = UINT32_MAX;
	unsigned int found = 0, hop, i;
	struct dns_question a;
	int n;

	if (len < DNS_HDR_LEN || question_read(m, len, DNS_HDR_LEN, &a, false))
		return -EBADMSG;
	n = answer_read(m, len, a.end, rrs);
	if (n < 0)
		return n;
	/* Follow the chain from the question's name, a bounded number of hops. */
	for (hop = 0; hop < DNS_MAX_CNAME_HOPS; hop++) {
		for (i = 0; i < (unsigned int)n; i++)
			if (rrs[i].type == DNS_TYPE_CNAME &&
			    same_name(rrs[i].owner, rrs[i].owner_len, name,
				      name_len))
				break;
		if (i == (unsigned int)n)
			break;
		name = rrs[i].target;
		name_len = rrs[i].target_len;
		if (rrs[i].ttl_s < chain_ttl)
			chain_ttl = rrs[i].ttl_s;
	}
	for (i = 0; i < (unsigned int)n && found < max; i++) {
		if (rrs[i].type != DNS_TYPE_A ||
		    !same_name(rrs[i].owner, rrs[i].owner_len, name, name_len))
			continue;
		out[found].addr = rrs[i].addr;
		out[found].ttl_s =
			rrs[i].ttl_s < chain_ttl ? rrs[i].ttl_s : chain_ttl;
		found++;
	}
	return (int)found;
}

static bool hostname_byte(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

int dns_msg__name_text(const uint8_t *wire, size_t len, char *out,
		       size_t outlen)
{
	size_t pos = 0, n = 0;
	uint8_t l;

	while (pos < len && (l = wire[pos])) {
		if (pos + 1 + l > len || n + l + 1 >= outlen)
			return -EINVAL;
		if (n)
			out[n++] = '.';
		for (unsigned int i = 0; i < l; i++) {
			if (!hostname_byte(wire[pos + 1 + i]))
				return -EINVAL;
			out[n++] = (char)wire[pos + 1 + i];
		}
		pos += 1 + l;
	}
	if (!n)
		return -EINVAL;
	out[n] = '\0';
	return 0;
}

int dns_msg__min_ttl(const uint8_t *m, size_t len, uint32_t *ttl_s)
{
	unsigned int count;
	struct dns_question a;
	struct rr_at r;
	size_t off;

	*ttl_s = UINT32_MAX;
	if (len < DNS_HDR_LEN || question_read(m, len, DNS_HDR_LEN, &a, false))
		return -EBADMSG;
	count = dns_get16(m + DNS_OFF_ANCOUNT);
	if (count > DNS_MAX_ANSWER_RRS)
		count = DNS_MAX_ANSWER_RRS;
	off = a.end;
	for (unsigned int i = 0; i < count; i++) {
		if (rr_read(m, len, &off, &r))
			return -EBADMSG;
		if (r.ttl_s < *ttl_s)
			*ttl_s = r.ttl_s;
	}
	return (int)count;
}
