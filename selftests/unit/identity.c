// SPDX-License-Identifier: GPL-2.0
/*
 * --hostname and --cwd (vmm/identity.c through the option table): the
 * names and paths accepted, the default hostname filled in, and the bad
 * ones refused in one line naming the value and why. In-process:
 * options__parse_argv, options__load_json, config__validate;
 * selftests/unit/cli.c checks that the vmm says it on stderr and exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "vmm/config.h"
#include "vmm/identity.h"
#include "vmm/options.h"

/* argv of `vmm run --kernel /k ARGS...`, parsed and validated. */
static int parse(struct vm_config *c, const char *const args[], char *err,
		 size_t len)
{
	return options_argv__run(c, args, err, len);
}

/* A JSON document through --config, then validated. */
static int parse_json(struct vm_config *c, const char *doc, char *err,
		      size_t len)
{
	char path[] = "/tmp/kiln-identity-XXXXXX";
	int fd = mkstemp(path), ret;

	if (fd < 0 || write(fd, doc, strlen(doc)) != (ssize_t)strlen(doc))
		abort();
	close(fd);
	config__init(c);
	err[0] = '\0';
	ret = options__load_json(c, path, err, len);
	unlink(path);
	if (!ret)
		ret = config__validate(c, err, len);
	return ret;
}

static bool one_line(const char *s)
{
	return s[0] && !strchr(s, '\n');
}

TEST(hostnames_accepted)
{
	static const char *const good[] = {
		"sandbox", "agent-42",	    "a",       "0",
		"A1-b2",   "x.example.com", "a-b.c-d",
	};
	char err[CONFIG_ERR_LEN], label[IDENTITY_LABEL_MAX + 1];
	char longest[IDENTITY_HOSTNAME_MAX + 1];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(good); i++)
		EXPECT_EQ(0,
			  identity__check_hostname(good[i], err, sizeof(err)))
	TH_LOG("%s: %s", good[i], err);
	/* One label of 63 bytes; 64 bytes in all (63 + "." is 64: a 1). */
	memset(label, 'l', IDENTITY_LABEL_MAX);
	label[IDENTITY_LABEL_MAX] = '\0';
	EXPECT_EQ(0, identity__check_hostname(label, err, sizeof(err)));
	memset(longest, 'h', IDENTITY_HOSTNAME_MAX);
	longest[IDENTITY_HOSTNAME_MAX] = '\0';
	longest[30] = '.';
	EXPECT_EQ(0, identity__check_hostname(longest, err, sizeof(err)))
	TH_LOG("%s", err);
}

TEST(hostnames_refused)
{
	static const struct {
		const char *name, *why;
	} bad[] = {
		{ "", "empty" },
		{ "bad_name", "character 4 is not a letter" },
		{ "has space", "character 4 is not a letter" },
		{ "caf\xc3\xa9", "character 4 is not a letter" },
		{ "-lead", "starts or ends with '-'" },
		{ "trail-", "starts or ends with '-'" },
		{ "a.-b", "starts or ends with '-'" },
		{ "a..b", "empty label" },
		{ ".a", "empty label" },
		{ "a.", "empty label" },
	};
	char err[CONFIG_ERR_LEN], label[IDENTITY_LABEL_MAX + 2];
	char toolong[IDENTITY_HOSTNAME_MAX + 2];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		err[0] = '\0';
		EXPECT_EQ(-EINVAL, identity__check_hostname(bad[i].name, err,
							    sizeof(err)))
		TH_LOG("\"%s\" accepted", bad[i].name);
		EXPECT_TRUE(one_line(err));
		EXPECT_TRUE(strstr(err, bad[i].why) != NULL)
		TH_LOG("want \"%s\" in: %s", bad[i].why, err);
		EXPECT_TRUE(!strncmp(err, "hostname \"", 10)) TH_LOG("%s", err);
	}
	memset(label, 'l', IDENTITY_LABEL_MAX + 1);
	label[IDENTITY_LABEL_MAX + 1] = '\0';
	EXPECT_EQ(-ENAMETOOLONG,
		  identity__check_hostname(label, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "label is longer than 63 bytes") != NULL)
	TH_LOG("%s", err);
	memset(toolong, 'h', IDENTITY_HOSTNAME_MAX + 1);
	toolong[IDENTITY_HOSTNAME_MAX + 1] = '\0';
	toolong[20] = '.';
	EXPECT_EQ(-ENAMETOOLONG,
		  identity__check_hostname(toolong, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "longer than 64 bytes") != NULL)
	TH_LOG("%s", err);
}

TEST(cwds)
{
	char err[CONFIG_ERR_LEN], big[IDENTITY_CWD_MAX + 2];

	EXPECT_EQ(0, identity__check_cwd("/", err, sizeof(err)));
	EXPECT_EQ(0, identity__check_cwd("/workspace", err, sizeof(err)));
	EXPECT_EQ(0, identity__check_cwd("/a/b c/.d/..e/", err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(-EINVAL, identity__check_cwd("workspace", err, sizeof(err)));
	EXPECT_STREQ("cwd \"workspace\": must be an absolute path", err);
	EXPECT_EQ(-EINVAL, identity__check_cwd("", err, sizeof(err)));
	EXPECT_EQ(-EINVAL, identity__check_cwd("/a/../b", err, sizeof(err)));
	EXPECT_STREQ("cwd \"/a/../b\": no \".\" or \"..\" components", err);
	EXPECT_EQ(-EINVAL, identity__check_cwd("/a/.", err, sizeof(err)));
	big[0] = '/';
	memset(big + 1, 'd', IDENTITY_CWD_MAX);
	big[IDENTITY_CWD_MAX + 1] = '\0';
	EXPECT_EQ(-ENAMETOOLONG, identity__check_cwd(big, err, sizeof(err)));
	EXPECT_TRUE(one_line(err));
	big[IDENTITY_CWD_MAX] = '\0';
	EXPECT_EQ(0, identity__check_cwd(big, err, sizeof(err)));
}

/* No --hostname: validation fills in the seed's "sandbox"; no --cwd: none. */
TEST(defaults)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, NULL, err, sizeof(err))) TH_LOG("%s", err);
	EXPECT_STREQ(IDENTITY_DEFAULT_HOSTNAME, c.hostname);
	EXPECT_STREQ("sandbox", c.hostname);
	EXPECT_EQ(NULL, c.cwd);
	config__free(&c);
}

TEST(command_line_and_json)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0,
		  parse(&c,
			ARGS("--hostname", "agent-42", "--cwd", "/workspace"),
			err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("agent-42", c.hostname);
	EXPECT_STREQ("/workspace", c.cwd);
	config__free(&c);

	ASSERT_EQ(0, parse_json(&c,
				"{\"kernel\": \"/k\", \"hostname\": \"h1\", "
				"\"cwd\": \"/srv\"}",
				err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("h1", c.hostname);
	EXPECT_STREQ("/srv", c.cwd);
	config__free(&c);

	/* The last one given wins. */
	ASSERT_EQ(0,
		  parse(&c, ARGS("--hostname", "first", "--hostname", "second"),
			err, sizeof(err)));
	EXPECT_STREQ("second", c.hostname);
	config__free(&c);
}

TEST(bad_values_name_the_option)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	EXPECT_EQ(-EINVAL,
		  parse(&c, ARGS("--hostname", "bad_name"), err, sizeof(err)));
	EXPECT_STREQ("hostname \"bad_name\": character 4 is not a letter, "
		     "digit, '-' or '.'",
		     err);
	config__free(&c);
	EXPECT_EQ(-EINVAL, parse(&c, ARGS("--cwd", "rel"), err, sizeof(err)));
	EXPECT_STREQ("cwd \"rel\": must be an absolute path", err);
	config__free(&c);
	EXPECT_EQ(-EINVAL,
		  parse_json(&c, "{\"kernel\": \"/k\", \"hostname\": 7}", err,
			     sizeof(err)));
	EXPECT_STREQ("\"hostname\" must be a string", err);
	config__free(&c);
	EXPECT_EQ(-EINVAL,
		  parse_json(&c, "{\"kernel\": \"/k\", \"hostname\": \"\"}",
			     err, sizeof(err)));
	EXPECT_STREQ("hostname \"\": empty", err);
	config__free(&c);
}

TEST_HARNESS_MAIN
