// SPDX-License-Identifier: GPL-2.0
/*
 * The agent protocol's MOUNTS_DETACH and MOUNTS_ATTACH list
 * (proto/mounts.h): what the vmm writes, the agent reads back exactly,
 * and every malformed list is refused.
 */
#include <errno.h>
#include <string.h>

#include "proto/agent.h"
#include "proto/mounts.h"
#include "selftests/kselftest.h"

static const struct kiln_mount two[] = {
	{ .tag = "kiln0", .path = "/workspace", .read_only = false },
	{ .tag = "kiln1", .path = "/workspace/ro", .read_only = true },
};

TEST(encode_then_decode_gives_the_mounts_back_in_order)
{
	static struct kiln_mounts got;
	struct kiln_buf b;

	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_mounts__encode(&b, two, 2));
	ASSERT_EQ(0, kiln_mounts__decode(b.data, b.len, &got));
	ASSERT_EQ(2U, got.nr);
	for (unsigned int i = 0; i < 2; i++) {
		EXPECT_STREQ(two[i].tag, got.m[i].tag);
		EXPECT_STREQ(two[i].path, got.m[i].path);
		EXPECT_EQ(two[i].read_only, got.m[i].read_only);
	}
	/* No mount: an empty payload, an empty list. */
	ASSERT_EQ(0, kiln_mounts__decode(NULL, 0, &got));
	EXPECT_EQ(0U, got.nr);
	kiln_buf__free(&b);
}

/* One T_MOUNT holding the fields a test writes by hand. */
static int decode_fields(struct kiln_buf *inner, struct kiln_mounts *out)
{
	struct kiln_buf b;
	int ret;

	kiln_buf__init(&b);
	ret = kiln_tlv__put_bytes(&b, KILN_T_MOUNT, inner->data, inner->len);
	if (!ret)
		ret = kiln_mounts__decode(b.data, b.len, out);
	kiln_buf__free(&b);
	kiln_buf__reset(inner);
	return ret;
}

TEST(malformed_lists_are_refused)
{
	static struct kiln_mounts got;
	static char long_path[KILN_MOUNT_PATH_MAX + 1];
	struct kiln_buf in, b;
	uint8_t junk[3] = { 1, 2, 3 };

	kiln_buf__init(&in);
	/* No tag; no path; a relative path. */
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_str(&in, KILN_T_PATH, "w");
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	/* Two tags; a tag of 37 bytes; a NUL in the path; an empty tag. */
	kiln_tlv__put_str(&in, KILN_T_TAG, "a");
	kiln_tlv__put_str(&in, KILN_T_TAG, "b");
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	kiln_tlv__put_str(&in, KILN_T_TAG,
			  "0123456789012345678901234567890123456");
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_bytes(&in, KILN_T_PATH, "/w\0x", 4);
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	kiln_tlv__put_bytes(&in, KILN_T_TAG, "", 0);
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	/* A path as long as PATH_MAX with no room for its NUL. */
	memset(long_path, 'p', KILN_MOUNT_PATH_MAX);
	long_path[0] = '/';
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_str(&in, KILN_T_PATH, long_path);
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	/* read-only 2, and one that is not a u64. */
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	kiln_tlv__put_u64(&in, KILN_T_READ_ONLY, 2);
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	kiln_tlv__put_bytes(&in, KILN_T_READ_ONLY, junk, sizeof(junk));
	EXPECT_EQ(-EINVAL, decode_fields(&in, &got));
	/* A nested list cut short; unknown fields are ignored. */
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	in.len -= 1;
	EXPECT_EQ(-EPROTO, decode_fields(&in, &got));
	kiln_tlv__put_str(&in, KILN_T_TAG, "kiln0");
	kiln_tlv__put_str(&in, KILN_T_PATH, "/w");
	kiln_tlv__put_u64(&in, KILN_T_SIZE, 9);
	EXPECT_EQ(0, decode_fields(&in, &got));
	EXPECT_EQ(1U, got.nr);
	EXPECT_FALSE(got.m[0].read_only);
	kiln_buf__free(&in);

	/* More than KILN_MOUNTS_MAX mounts; a payload cut short. */
	kiln_buf__init(&b);
	for (unsigned int i = 0; i <= KILN_MOUNTS_MAX; i++)
		ASSERT_EQ(0, kiln_mounts__encode(&b, two, 1));
	EXPECT_EQ(-EINVAL, kiln_mounts__decode(b.data, b.len, &got));
	EXPECT_EQ(-EPROTO, kiln_mounts__decode(b.data, 5, &got));
	kiln_buf__free(&b);
}

TEST(encode_refuses_what_would_not_decode)
{
	struct kiln_mount bad = { .tag = "kiln0", .path = "relative" };
	static struct kiln_mount many[KILN_MOUNTS_MAX + 1];
	struct kiln_buf b;

	kiln_buf__init(&b);
	EXPECT_EQ(-EINVAL, kiln_mounts__encode(&b, &bad, 1));
	bad = (struct kiln_mount){ .tag = "", .path = "/w" };
	EXPECT_EQ(-EINVAL, kiln_mounts__encode(&b, &bad, 1));
	for (unsigned int i = 0; i <= KILN_MOUNTS_MAX; i++)
		many[i] = two[0];
	EXPECT_EQ(-EINVAL, kiln_mounts__encode(&b, many, KILN_MOUNTS_MAX + 1));
	EXPECT_EQ(0U, b.len);
	kiln_buf__free(&b);
}

TEST_HARNESS_MAIN
