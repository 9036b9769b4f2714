// SPDX-License-Identifier: GPL-2.0
/*
 * PROC_START's environment entries (proto/env.h) as both sides check
 * them: a good name and entry pass, each bad one is refused with the
 * phrase the vmm and the agent repeat, and the name shown in an error
 * is cut short and never carries a control byte. T_ENV_MERGE's number
 * and HELLO bit are pinned: they are wire format.
 */
#include <string.h>

#include "proto/agent.h"
#include "proto/env.h"
#include "selftests/kselftest.h"

#define S(lit) (lit), sizeof(lit) - 1

TEST(names)
{
	EXPECT_TRUE(kiln_env__name_ok(S("CI")));
	EXPECT_TRUE(kiln_env__name_ok(S("npm_config_cache-dir")));
	EXPECT_TRUE(kiln_env__name_ok(S("x")));
	EXPECT_FALSE(kiln_env__name_ok(S("")));
	EXPECT_FALSE(kiln_env__name_ok(S("A=B")));
	EXPECT_FALSE(kiln_env__name_ok(S("=")));
	EXPECT_FALSE(kiln_env__name_ok(S("A\0B")));
	/* Only len bytes count. */
	EXPECT_TRUE(kiln_env__name_ok("AB=C", 2));
}

TEST(entries)
{
	EXPECT_EQ(NULL, kiln_env__entry_error(S("CI=1")));
	EXPECT_EQ(NULL, kiln_env__entry_error(S("EMPTY=")));
	/* The value may hold '=': only the first one ends the name. */
	EXPECT_EQ(NULL, kiln_env__entry_error(S("OPTS=a=b")));
	EXPECT_STREQ("no '=' (expected NAME=value)",
		     kiln_env__entry_error(S("NOEQUALS")));
	EXPECT_STREQ("no '=' (expected NAME=value)",
		     kiln_env__entry_error(S("")));
	EXPECT_STREQ("an empty name", kiln_env__entry_error(S("=x")));
	EXPECT_STREQ("a NUL byte", kiln_env__entry_error(S("A\0B=1")));
	EXPECT_STREQ("a NUL byte", kiln_env__entry_error(S("A=1\0")));
	EXPECT_EQ(2, kiln_env__name_len(S("CI=1")));
	EXPECT_EQ(0, kiln_env__name_len(S("=x")));
	EXPECT_EQ(8, kiln_env__name_len(S("NOEQUALS")));
}

TEST(shown_names_are_printable_and_bounded)
{
	char out[8];

	kiln_env__show(S("A\0B\n\x7f"), out, sizeof(out));
	EXPECT_STREQ("A?B??", out);
	kiln_env__show(S("ABCDEFGHIJ"), out, sizeof(out));
	EXPECT_STREQ("ABCDEFG", out);
	kiln_env__show(S(""), out, sizeof(out));
	EXPECT_STREQ("", out);
}

TEST(wire_numbers)
{
	EXPECT_EQ(27, KILN_T_ENV_MERGE);
	EXPECT_EQ(0x8, KILN_FEATURE_ENV_MERGE);
}

TEST_HARNESS_MAIN
