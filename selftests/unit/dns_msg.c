// SPDX-License-Identifier: GPL-2.0
/*
 * dns_msg - the resolver's own replies (net/dns-msg.c) to queries at the
 * edge of what DNS allows: a question name of the greatest length, and
 * one that would only reach it through a compression pointer.
 *
 * A query's question must be uncompressed (Documentation/network.md,
 * "DNS": FORMERR otherwise): its reply repeats the question byte for
 * byte, and the reply buffer holds a header and the longest question
 * there is, DNS_SHORT_REPLY_MAX. A 254-byte run of labels followed by a
 * pointer to a root label elsewhere decodes to 255 bytes, within the
 * name's limit, yet is 260 bytes on the wire: it once made a 272-byte
 * reply in a 271-byte stack buffer (issue 34, finding 1).
 */
#include <string.h>

#include "lib/compiler.h"
#include "net/dns-internal.h"
#include "selftests/kselftest.h"

#define MSG_MAX 512

/* Header for one question with RD; the question is the caller's. */
static void put_header(uint8_t *m, uint16_t id)
{
	memset(m, 0, DNS_HDR_LEN);
	dns_put16(m + DNS_OFF_ID, id);
	dns_put16(m + DNS_OFF_FLAGS, DNS_FLAG_RD);
	dns_put16(m + DNS_OFF_QDCOUNT, 1);
}

/*
 * Labels at m + off filling exactly wire bytes (length octets included,
 * no root label), each byte of content 'a' but for a single 0 in the
 * first label's first byte when zero_at_start. Where they end.
 */
static size_t put_labels(uint8_t *m, size_t off, size_t wire,
			 bool zero_at_start)
{
	bool first = true;

	while (wire) {
		size_t l = wire - 1 > DNS_LABEL_MAX ? DNS_LABEL_MAX : wire - 1;

		/* Never leave a 1-byte remainder: it could hold no label. */
		if (wire - (l + 1) == 1)
			l--;
		m[off] = (uint8_t)l;
		memset(m + off + 1, 'a', l);
		if (first && zero_at_start)
			m[off + 1] = 0;
		first = false;
		off += l + 1;
		wire -= l + 1;
	}
	return off;
}

static size_t put_tail(uint8_t *m, size_t off)
{
	dns_put16(m + off, DNS_TYPE_A);
	dns_put16(m + off + 2, DNS_CLASS_IN);
	return off + 4;
}

TEST(longest_plain_name_replied_with_its_question)
{
	uint8_t m[MSG_MAX], reply[DNS_SHORT_REPLY_MAX];
	struct dns_query_info qi;
	size_t off, n;

	put_header(m, 7);
	/* 254 bytes of labels and the root: a 255-byte name. */
	off = put_labels(m, DNS_HDR_LEN, DNS_NAME_WIRE_MAX - 1, false);
	m[off++] = 0;
	off = put_tail(m, off);
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(m, off, &qi));
	EXPECT_EQ(DNS_NAME_WIRE_MAX, qi.q.name_len);
	n = dns_msg__reply(reply, sizeof(reply), m, &qi, 0, DNS_RCODE_REFUSED,
			   true);
	EXPECT_EQ(off, n);
	EXPECT_EQ(sizeof(reply), n);
	EXPECT_EQ(0, memcmp(reply + DNS_HDR_LEN, m + DNS_HDR_LEN,
			    n - DNS_HDR_LEN));
}

TEST(pointer_in_a_query_is_formerr)
{
	uint8_t m[MSG_MAX];
	struct dns_query_info qi;
	size_t off;

	put_header(m, 8);
	/*
	 * 254 bytes of labels whose first content byte is 0, then a
	 * pointer to that byte: the name decodes to 254 + the root's 1.
	 */
	off = put_labels(m, DNS_HDR_LEN, DNS_NAME_WIRE_MAX - 1, true);
	dns_put16(m + off, 0xc000 | (DNS_HDR_LEN + 1));
	off = put_tail(m, off + 2);
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, off, &qi));

	/* A short name through a pointer: refused just the same. */
	put_header(m, 9);
	off = put_labels(m, DNS_HDR_LEN, 4, true);
	dns_put16(m + off, 0xc000 | (DNS_HDR_LEN + 1));
	off = put_tail(m, off + 2);
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, off, &qi));
}

/* A buffer too small for the question gets the header alone. */
TEST(reply_never_passes_its_buffer)
{
	uint8_t m[MSG_MAX], reply[DNS_SHORT_REPLY_MAX + 8];
	struct dns_query_info qi;
	size_t off, n;

	put_header(m, 10);
	off = put_labels(m, DNS_HDR_LEN, 20, false);
	m[off++] = 0;
	off = put_tail(m, off);
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(m, off, &qi));
	memset(reply, 0x5a, sizeof(reply));
	n = dns_msg__reply(reply, off - 1, m, &qi, 0, DNS_RCODE_REFUSED, true);
	EXPECT_EQ(DNS_HDR_LEN, n);
	EXPECT_EQ(0, dns_get16(reply + DNS_OFF_QDCOUNT));
	EXPECT_EQ(0x5a, reply[DNS_HDR_LEN]);
}

TEST_HARNESS_MAIN
