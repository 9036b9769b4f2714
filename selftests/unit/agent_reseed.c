// SPDX-License-Identifier: GPL-2.0
/*
 * The agent protocol's RESEED message and HELLO's feature bits
 * (proto/reseed.h): what the vmm writes, the agent reads back exactly,
 * and every malformed payload is refused.
 */
#include <errno.h>
#include <string.h>

#include "proto/reseed.h"
#include "selftests/kselftest.h"

static void fill(uint8_t *p, size_t n, uint8_t start)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(start + i * 7);
}

TEST(encode_then_decode_gives_the_seed_back)
{
	uint8_t seed[KILN_RESEED_BYTES];
	const uint8_t *got;
	struct kiln_buf b;
	size_t len = 0;

	fill(seed, sizeof(seed), 3);
	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, sizeof(seed)));
	/* One field: its header and the bytes, nothing else. */
	EXPECT_EQ(sizeof(struct kiln_tlv) + sizeof(seed), b.len);
	ASSERT_EQ(0, kiln_reseed__decode(b.data, b.len, &got, &len));
	EXPECT_EQ(sizeof(seed), len);
	EXPECT_EQ(0, memcmp(seed, got, sizeof(seed)));
	/* It points into the payload, after the field header. */
	EXPECT_TRUE(got == b.data + sizeof(struct kiln_tlv));
	kiln_buf__free(&b);
}

TEST(wire_bytes_are_little_endian_tag_80)
{
	uint8_t seed[KILN_RESEED_MIN];
	struct kiln_buf b;

	memset(seed, 0xab, sizeof(seed));
	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, sizeof(seed)));
	ASSERT_EQ(8 + sizeof(seed), b.len);
	/* struct kiln_tlv: u16 tag 80, u16 0, u32 length 32. */
	EXPECT_EQ(80, b.data[0]);
	EXPECT_EQ(0, b.data[1]);
	EXPECT_EQ(0, b.data[2]);
	EXPECT_EQ(0, b.data[3]);
	EXPECT_EQ(32, b.data[4]);
	EXPECT_EQ(0, b.data[5] | b.data[6] | b.data[7]);
	EXPECT_EQ(0xab, b.data[8]);
	kiln_buf__free(&b);
}

TEST(encode_refuses_lengths_out_of_bounds)
{
	uint8_t seed[KILN_RESEED_MAX + 1] = { 0 };
	struct kiln_buf b;

	kiln_buf__init(&b);
	EXPECT_EQ(-EINVAL, kiln_reseed__encode(&b, seed, 0));
	EXPECT_EQ(-EINVAL, kiln_reseed__encode(&b, seed, KILN_RESEED_MIN - 1));
	EXPECT_EQ(-EINVAL, kiln_reseed__encode(&b, seed, KILN_RESEED_MAX + 1));
	EXPECT_EQ(0U, b.len);
	EXPECT_EQ(0, kiln_reseed__encode(&b, seed, KILN_RESEED_MAX));
	kiln_buf__free(&b);
}

TEST(decode_ignores_unknown_fields)
{
	uint8_t seed[KILN_RESEED_BYTES];
	const uint8_t *got;
	struct kiln_buf b;
	size_t len = 0;

	fill(seed, sizeof(seed), 9);
	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_tlv__put_u64(&b, 999, 42));
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, sizeof(seed)));
	ASSERT_EQ(0, kiln_tlv__put_str(&b, 1000, "later"));
	ASSERT_EQ(0, kiln_reseed__decode(b.data, b.len, &got, &len));
	EXPECT_EQ(sizeof(seed), len);
	EXPECT_EQ(0, memcmp(seed, got, sizeof(seed)));
	kiln_buf__free(&b);
}

TEST(decode_refuses_what_is_not_one_good_seed)
{
	uint8_t seed[KILN_RESEED_MAX + 1] = { 0 };
	const uint8_t *got = NULL;
	struct kiln_buf b;
	size_t len = 0;

	kiln_buf__init(&b);
	/* Empty: no seed at all. */
	EXPECT_EQ(-EINVAL, kiln_reseed__decode(NULL, 0, &got, &len));
	/* Too short, too long. */
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_SEED, seed,
					 KILN_RESEED_MIN - 1));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode(b.data, b.len, &got, &len));
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_SEED, seed,
					 KILN_RESEED_MAX + 1));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode(b.data, b.len, &got, &len));
	/* Two seeds: which one would count? Neither. */
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, KILN_RESEED_BYTES));
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, KILN_RESEED_BYTES));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode(b.data, b.len, &got, &len));
	/* A field cut short: not a TLV list. */
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, KILN_RESEED_BYTES));
	EXPECT_EQ(-EPROTO, kiln_reseed__decode(b.data, b.len - 1, &got, &len));
	EXPECT_TRUE(got == NULL);
	EXPECT_EQ(0U, len);
	kiln_buf__free(&b);
}

#define NET_VALUE "10.0.2.15/24,10.0.2.2,1500,10.0.2.2"

/* A restored VM's network after the seed: both fields back, exactly. */
TEST(net_encode_then_decode_gives_both_back)
{
	static const uint8_t mac[KILN_NET_MAC_LEN] = { 2, 0x4b, 0x4c, 1, 2, 3 };
	uint8_t seed[KILN_RESEED_BYTES];
	const uint8_t *got_mac = NULL, *got;
	const char *net = NULL;
	size_t len = 0, net_len = 0;
	struct kiln_buf b;

	fill(seed, sizeof(seed), 5);
	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, sizeof(seed)));
	/* Without the fields: none, and the seed alone is whole. */
	EXPECT_EQ(-ENOENT, kiln_reseed__decode_net(b.data, b.len, &got_mac,
						   &net, &net_len));
	ASSERT_EQ(0, kiln_reseed__encode_net(&b, mac, NET_VALUE));
	ASSERT_EQ(0, kiln_reseed__decode(b.data, b.len, &got, &len));
	EXPECT_EQ(sizeof(seed), len);
	ASSERT_EQ(0, kiln_reseed__decode_net(b.data, b.len, &got_mac, &net,
					     &net_len));
	EXPECT_EQ(0, memcmp(mac, got_mac, sizeof(mac)));
	ASSERT_EQ(strlen(NET_VALUE), net_len);
	EXPECT_EQ(0, memcmp(NET_VALUE, net, net_len));
	kiln_buf__free(&b);
}

TEST(net_refuses_what_is_not_one_mac_and_one_value)
{
	static const uint8_t mac[KILN_NET_MAC_LEN + 1] = { 2 };
	char longv[KILN_NET_MAX + 2];
	const uint8_t *got_mac = NULL;
	const char *net = NULL;
	size_t net_len = 0;
	struct kiln_buf b;

	memset(longv, '1', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	kiln_buf__init(&b);
	EXPECT_EQ(-EINVAL, kiln_reseed__encode_net(&b, mac, ""));
	EXPECT_EQ(-EINVAL, kiln_reseed__encode_net(&b, mac, longv));
	EXPECT_EQ(0U, b.len);
	/* A MAC alone, a value alone. */
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_NET_MAC, mac,
					 KILN_NET_MAC_LEN));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode_net(b.data, b.len, &got_mac,
						   &net, &net_len));
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_NET, NET_VALUE,
					 strlen(NET_VALUE)));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode_net(b.data, b.len, &got_mac,
						   &net, &net_len));
	/* A MAC of 7 bytes. */
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_NET_MAC, mac,
					 KILN_NET_MAC_LEN + 1));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode_net(b.data, b.len, &got_mac,
						   &net, &net_len));
	/* Both twice. */
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_reseed__encode_net(&b, mac, NET_VALUE));
	ASSERT_EQ(0, kiln_reseed__encode_net(&b, mac, NET_VALUE));
	EXPECT_EQ(-EINVAL, kiln_reseed__decode_net(b.data, b.len, &got_mac,
						   &net, &net_len));
	/* Cut short. */
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_reseed__encode_net(&b, mac, NET_VALUE));
	EXPECT_EQ(-EPROTO, kiln_reseed__decode_net(b.data, b.len - 1, &got_mac,
						   &net, &net_len));
	EXPECT_TRUE(got_mac == NULL);
	kiln_buf__free(&b);
}

TEST(hello_features_round_trip)
{
	uint64_t version = 7, features = 7;
	struct kiln_buf b;

	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_tlv__put_u64(&b, KILN_T_VERSION, KILN_AGENT_VERSION));
	ASSERT_EQ(0,
		  kiln_tlv__put_u64(&b, KILN_T_FEATURES, KILN_FEATURE_RESEED));
	ASSERT_EQ(0, kiln_hello__decode(b.data, b.len, &version, &features));
	EXPECT_EQ(KILN_AGENT_VERSION, version);
	EXPECT_EQ(KILN_FEATURE_RESEED, features);
	/* An agent from before the bits: no T_FEATURES, no features. */
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_tlv__put_u64(&b, KILN_T_VERSION, KILN_AGENT_VERSION));
	ASSERT_EQ(0, kiln_hello__decode(b.data, b.len, &version, &features));
	EXPECT_EQ(KILN_AGENT_VERSION, version);
	EXPECT_EQ(0U, features);
	/* A T_FEATURES that is not a u64. */
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_FEATURES, "abc", 3));
	EXPECT_EQ(-EPROTO,
		  kiln_hello__decode(b.data, b.len, &version, &features));
	kiln_buf__free(&b);
}

TEST_HARNESS_MAIN
