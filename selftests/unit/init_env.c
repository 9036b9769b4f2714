// SPDX-License-Identifier: GPL-2.0
/*
 * The image's /etc/environment as the guest init reads it
 * (guest/init/env.c, built into this test as it is into the init): the
 * pam_env forms are set, everything else is skipped, and the file's and
 * the count's bounds hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest/init/env.c"
#include "selftests/kselftest.h"

struct file {
	char path[64];
};

static void put(struct __test_metadata *_metadata, struct file *f,
		const char *text, size_t len)
{
	int fd;

	snprintf(f->path, sizeof(f->path), "/tmp/kiln-env-XXXXXX");
	fd = mkstemp(f->path);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)len, write(fd, text, len));
	close(fd);
}

TEST(pam_env_forms)
{
	static const char text[] = "# comment\n"
				   "\n"
				   "LANG=C.UTF-8\n"
				   "  export KILN_E1=\"two words\"\n"
				   "KILN_E2='single'\r\n"
				   "KILN_E3=a=b\n"
				   "KILN_E4=\n"
				   "KILN_E5=\"unbalanced\n"
				   "not a variable\n"
				   "1BAD=x\n"
				   "BAD-NAME=x\n"
				   "KILN_E6=last";
	struct file f;

	unsetenv("KILN_E4");
	put(_metadata, &f, text, sizeof(text) - 1);
	EXPECT_EQ(7, init_env__load(f.path));
	EXPECT_STREQ("C.UTF-8", getenv("LANG"));
	EXPECT_STREQ("two words", getenv("KILN_E1"));
	EXPECT_STREQ("single", getenv("KILN_E2"));
	EXPECT_STREQ("a=b", getenv("KILN_E3"));
	ASSERT_NE(NULL, getenv("KILN_E4"));
	EXPECT_STREQ("", getenv("KILN_E4"));
	EXPECT_STREQ("\"unbalanced", getenv("KILN_E5"));
	EXPECT_STREQ("last", getenv("KILN_E6"));
	EXPECT_EQ(NULL, getenv("1BAD"));
	EXPECT_EQ(NULL, getenv("BAD-NAME"));
	unlink(f.path);
}

/* Set over what init had: the image's PATH wins. */
TEST(overrides_init_defaults)
{
	static const char text[] = "PATH=/opt/image/bin:/usr/bin\n";
	struct file f;

	setenv("PATH", "/usr/bin:/bin", 1);
	put(_metadata, &f, text, sizeof(text) - 1);
	EXPECT_EQ(1, init_env__load(f.path));
	EXPECT_STREQ("/opt/image/bin:/usr/bin", getenv("PATH"));
	unlink(f.path);
}

TEST(no_file_is_no_variable)
{
	EXPECT_EQ(0, init_env__load("/nonexistent/kiln/environment"));
	EXPECT_EQ(-EISDIR, init_env__load("/"));
}

TEST(bounded)
{
	size_t len = 0, cap = (INIT_ENV_MAX + 10) * 24;
	char *text = malloc(cap), past[32];
	struct file f;

	ASSERT_NE(NULL, text);
	for (int i = 0; i < INIT_ENV_MAX + 10; i++)
		len += snprintf(text + len, cap - len, "KILN_B%d=%d\n", i, i);
	put(_metadata, &f, text, len);
	EXPECT_EQ(INIT_ENV_MAX, init_env__load(f.path));
	EXPECT_STREQ("0", getenv("KILN_B0"));
	snprintf(past, sizeof(past), "KILN_B%d", INIT_ENV_MAX);
	EXPECT_EQ(NULL, getenv(past));
	unlink(f.path);
	free(text);
}

TEST_HARNESS_MAIN
