// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz dns_msg - the DNS message reader (net/dns-msg.c) on any bytes,
 * read both as a guest's query and as an upstream's answer.
 *
 * An answer is only read for bindings after it matches its query, so the
 * bytes are also read as the answer to their own question: a copy with
 * QR cleared parsed as a query gives the question, the bytes as they are
 * the answer. Checked for every input: a query's question is at most
 * DNS_QUESTION_MAX bytes on the wire (a pointer in it is FORMERR), and
 * its reply fits DNS_SHORT_REPLY_MAX and repeats it byte for byte; an
 * answer gives at most the records asked for, -EBADMSG else; a name as
 * text is a hostname (no dot at either end, only [a-z0-9.-]).
 */
#include <errno.h>

#include "lib/compiler.h"
#include "net/dns-internal.h"
#include "selftests/fuzz/fuzz.h"

#define OUT_RECORDS 8U

static void check_name_text(const struct dns_question *q)
{
	char text[DNS_NAME_WIRE_MAX + 1];
	size_t n;

	if (dns_msg__name_text(q->name, q->name_len, text, sizeof(text)))
		return;
	n = strlen(text);
	fuzz_check(n > 0 && n < sizeof(text));
	fuzz_check(text[0] != '.' && text[n - 1] != '.');
	fuzz_check(strspn(text, "abcdefghijklmnopqrstuvwxyz0123456789-.") == n);
}

static void as_query(const uint8_t *m, size_t len)
{
	uint8_t reply[DNS_SHORT_REPLY_MAX];
	struct dns_query_info qi;
	enum dns_query_verdict v;
	size_t n;

	v = dns_msg__parse_query(m, len, &qi);
	if (v == DNS_QUERY_DROP)
		return;
	n = dns_msg__reply(reply, sizeof(reply), m, &qi, DNS_FLAG_RA,
			   DNS_RCODE_REFUSED, v == DNS_QUERY_OK);
	fuzz_check(n >= DNS_HDR_LEN && n <= sizeof(reply));
	fuzz_check(dns_get16(reply + DNS_OFF_FLAGS) & DNS_FLAG_QR);
	if (v != DNS_QUERY_OK)
		return;
	fuzz_check(qi.len <= len && qi.q.end <= qi.len);
	fuzz_check(qi.q.name_len >= 1 && qi.q.name_len <= DNS_NAME_WIRE_MAX);
	/* The question repeats whole: never longer than the longest. */
	fuzz_check(qi.q.end - DNS_HDR_LEN <= DNS_QUESTION_MAX);
	fuzz_check(n == qi.q.end);
	fuzz_check(
		!memcmp(reply + DNS_HDR_LEN, m + DNS_HDR_LEN, n - DNS_HDR_LEN));
	check_name_text(&qi.q);
}

static void as_answer(const uint8_t *m, size_t len)
{
	static struct dns_rr rrs[DNS_MAX_ANSWER_RRS];
	struct dns_a_record out[OUT_RECORDS];
	struct dns_query_info qi;
	uint8_t *copy;
	uint16_t flags;
	int n;

	if (len < DNS_HDR_LEN)
		return;
	copy = malloc(len);
	if (!copy)
		return;
	memcpy(copy, m, len);
	flags = dns_get16(copy + DNS_OFF_FLAGS);
	dns_put16(copy + DNS_OFF_FLAGS,
		  flags & ~DNS_FLAG_QR & ~DNS_OPCODE_MASK);
	/* Answers carry records: the query's own checks would refuse them. */
	dns_put16(copy + DNS_OFF_ANCOUNT, 0);
	dns_put16(copy + DNS_OFF_NSCOUNT, 0);
	dns_put16(copy + DNS_OFF_ARCOUNT, 0);
	if (dns_msg__parse_query(copy, len, &qi) == DNS_QUERY_OK) {
		fuzz_check(dns_msg__answers(m, len, qi.id, &qi.q) ==
			   !!(flags & DNS_FLAG_QR));
		n = dns_msg__a_records(m, len, &qi.q, rrs, out, OUT_RECORDS);
		fuzz_check(n == -EBADMSG || (n >= 0 && n <= (int)OUT_RECORDS));
	}
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	as_query(data, size);
	as_answer(data, size);
	return 0;
}
