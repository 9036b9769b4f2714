// SPDX-License-Identifier: GPL-2.0
/*
 * lib/sha256 and lib/parse: the digest against FIPS 180-2's own examples,
 * in one piece and in many, and the number readers' edges.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "lib/parse.h"
#include "lib/sha256.h"
#include "selftests/kselftest.h"

/* FIPS 180-2, appendix B.1 and the empty message. */
#define ABC_HEX \
	"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define EMPTY_HEX \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* B.2: "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq". */
#define TWO_BLOCK_HEX \
	"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"

TEST(known_digests)
{
	char hex[SHA256_HEX_LEN + 1];

	ASSERT_EQ(0, sha256__hex("abc", 3, hex));
	EXPECT_STREQ(ABC_HEX, hex);
	ASSERT_EQ(0, sha256__hex("", 0, hex));
	EXPECT_STREQ(EMPTY_HEX, hex);
}

TEST(pieces_make_the_same_digest)
{
	const char *msg =
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char hex[SHA256_HEX_LEN + 1];
	struct sha256 s;

	ASSERT_EQ(0, sha256__init(&s));
	for (size_t i = 0; msg[i]; i++)
		ASSERT_EQ(0, sha256__update(&s, msg + i, 1));
	ASSERT_EQ(0, sha256__final_hex(&s, hex));
	EXPECT_STREQ(TWO_BLOCK_HEX, hex);
	/* An abandoned hash is released without a digest. */
	ASSERT_EQ(0, sha256__init(&s));
	ASSERT_EQ(0, sha256__update(&s, "x", 1));
	sha256__free(&s);
}

TEST(numbers_and_sizes)
{
	uint64_t v = 7;

	EXPECT_EQ(0, parse__uint("42", 100, &v));
	EXPECT_EQ(42, v);
	EXPECT_EQ(-ERANGE, parse__uint("101", 100, &v));
	EXPECT_EQ(-EINVAL, parse__uint("-1", 100, &v));
	EXPECT_EQ(-EINVAL, parse__uint("4x", 100, &v));
	EXPECT_EQ(-EINVAL, parse__uint("", 100, &v));
	EXPECT_EQ(-ERANGE, parse__uint("99999999999999999999", UINT64_MAX, &v));
	EXPECT_EQ(0, parse__size("3K", UINT64_MAX, &v));
	EXPECT_EQ(3072, v);
	EXPECT_EQ(0, parse__size("2GiB", UINT64_MAX, &v));
	EXPECT_EQ(2ULL << 30, v);
	EXPECT_EQ(-EINVAL, parse__size("2Q", UINT64_MAX, &v));
	EXPECT_EQ(-ERANGE, parse__size("2M", (2ULL << 20) - 1, &v));
	EXPECT_EQ(0, parse__size("2M", 2ULL << 20, &v));
	EXPECT_EQ(2ULL << 20, v);
}

TEST_HARNESS_MAIN
