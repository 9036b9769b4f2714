// SPDX-License-Identifier: GPL-2.0
/*
 * --die-with-parent and "dieWithParent" (vmm/options.c): off unless asked,
 * set from the command line and from a --config file, a JSON value that is
 * not a boolean and a flag given a value refused in one line naming it;
 * --help lists it. What it does to a running VM (the parent killed, the
 * VM and its sockets gone) needs KVM: selftests/kvm/die_with_parent.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "selftests/spawn.h"
#include "selftests/testutil.h"
#include "vmm/config.h"
#include "vmm/options.h"

/* A --config file holding doc; its path in path (a mkstemp template). */
static void write_config(char *path, const char *doc)
{
	int fd = mkstemp(path);

	if (fd < 0 || write(fd, doc, strlen(doc)) != (ssize_t)strlen(doc))
		abort();
	close(fd);
}

TEST(off_unless_asked)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, options_argv__run(&c, NULL, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_FALSE(c.die_with_parent);
	config__free(&c);
}

TEST(command_line)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, options_argv__run(&c, ARGS("--die-with-parent"), err,
				       sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_TRUE(c.die_with_parent);
	config__free(&c);
	/* vmm start takes it as run does. */
	config__init(&c);
	c.start = true;
	ASSERT_EQ(0, options_argv__check(
			     &c,
			     ARGS("start", "--kernel", "/k", "--control-socket",
				  "/tmp/c.sock"),
			     ARGS("--die-with-parent"), err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_TRUE(c.die_with_parent);
	config__free(&c);
}

TEST(config_file)
{
	char path[] = "/tmp/kiln-dwp-XXXXXX", err[CONFIG_ERR_LEN];
	struct vm_config c;

	write_config(path, "{\"dieWithParent\": true}");
	ASSERT_EQ(0, options_argv__run(&c, ARGS("--config", path), err,
				       sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_TRUE(c.die_with_parent);
	config__free(&c);
	unlink(path);

	strcpy(path, "/tmp/kiln-dwp-XXXXXX");
	write_config(path, "{\"dieWithParent\": false}");
	ASSERT_EQ(0, options_argv__run(&c, ARGS("--config", path), err,
				       sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_FALSE(c.die_with_parent);
	config__free(&c);
	unlink(path);
}

TEST(bad_input)
{
	char path[] = "/tmp/kiln-dwp-XXXXXX", err[CONFIG_ERR_LEN];
	struct stderr_capture cap = { .saved = -1 };
	char log[1024] = "";
	struct vm_config c;
	int ret;

	write_config(path, "{\"dieWithParent\": \"yes\"}");
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	ret = options_argv__run(&c, ARGS("--config", path), err, sizeof(err));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(-EINVAL, ret);
	EXPECT_TRUE(strstr(log, "\"dieWithParent\" must be true or false") !=
		    NULL)
	TH_LOG("%s", log);
	config__free(&c);
	unlink(path);

	log[0] = 0;
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	ret = options_argv__run(&c, ARGS("--die-with-parent=yes"), err,
				sizeof(err));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_NE(0, ret);
	EXPECT_TRUE(strstr(log, "die-with-parent") != NULL) TH_LOG("%s", log);
	EXPECT_EQ(1, spawn__count_lines(log)) TH_LOG("%s", log);
	config__free(&c);
}

TEST(help_lists_it)
{
	struct spawn_result r;

	if (spawn__run(ARGS(spawn__vmm_path(), "--help"), NULL, &r))
		abort();
	EXPECT_EQ(0, r.status);
	EXPECT_TRUE(strstr(r.out, "  --die-with-parent\n") != NULL)
	TH_LOG("%s", r.out);
}

TEST_HARNESS_MAIN
