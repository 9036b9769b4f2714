// SPDX-License-Identifier: GPL-2.0
/*
 * vmmctl's command line: a bad option is one line naming it and the
 * nearest spelling, and exit 2, before any socket is opened; long names
 * are exact (getopt_long's prefixes are refused). KILN_VMMCTL names the
 * binary (default build/vmmctl). What vmmctl does with a VM is tested
 * against the API server in selftests/unit/api.c (vmmctl_*).
 */
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"

#define EXIT_USAGE  2
#define EXIT_VMMCTL 125

/* No VM listens there: a command that got past its options exits 125. */
#define NO_SOCK "/nonexistent/kiln-vmmctl-test.sock"

static const char *vmmctl_path(void)
{
	const char *p = getenv("KILN_VMMCTL");

	return p ? p : "build/vmmctl";
}

/* vmmctl with argv (argv[0] ignored). */
static void run_vmmctl(const char *const argv[], struct spawn_result *r)
{
	const char *args[16];
	int i = 0;

	args[i++] = vmmctl_path();
	while (argv[i] && i < 15) {
		args[i] = argv[i];
		i++;
	}
	args[i] = NULL;
	if (spawn__run(args, NULL, r))
		abort();
}

TEST(bad_options)
{
	static const struct {
		const char *argv[8];
		const char *want;
	} cases[] = {
		/* Was --timeout-ms 5: killed after 5 ms, exit 124. */
		{ { "", "exec", "--timeout", "5", NO_SOCK, "--", "true" },
		  "vmmctl: exec: unknown option --timeout (did you mean "
		  "--timeout-ms?)" },
		{ { "", "exec", "--timeout-m", "5", NO_SOCK, "--", "true" },
		  "vmmctl: exec: unknown option --timeout-m (did you mean "
		  "--timeout-ms?)" },
		{ { "", "exec", "--timeout-ms=5", "--cw", "/", NO_SOCK, "--" },
		  "vmmctl: exec: unknown option --cw (did you mean --cwd?)" },
		{ { "", "exec", "--evn", "A=1", NO_SOCK, "--", "true" },
		  "vmmctl: exec: unknown option --evn (did you mean --env?)" },
		{ { "", "exec", "--timeout-ms" },
		  "vmmctl: exec: --timeout-ms needs a value" },
		{ { "", "exec", "-x", NO_SOCK, "--", "true" },
		  "vmmctl: exec: unknown option -x" },
		{ { "", "shell", "--cd", "/", NO_SOCK },
		  "vmmctl: shell: unknown option --cd (did you mean --cwd?)" },
		{ { "", "cp", "--mod", "644", NO_SOCK, "a", ":/b" },
		  "vmmctl: cp: unknown option --mod (did you mean --mode?)" },
		{ { "", "cp", "--parents=yes", NO_SOCK, "a", ":/b" },
		  "vmmctl: cp: --parents takes no value" },
		{ { "", "fs", "rm", "--force", NO_SOCK, "/x" },
		  "vmmctl: fs: unknown option --force" },
		{ { "", "fs", "ls", "-x", NO_SOCK, "/" },
		  "vmmctl: fs: unknown option -x" },
		{ { "", "exce", NO_SOCK },
		  "vmmctl: unknown command 'exce' (vmmctl --help lists "
		  "them)" },
	};
	struct spawn_result *r = malloc(sizeof(*r));
	size_t i;

	ASSERT_TRUE(r != NULL);
	ASSERT_EQ(0, access(vmmctl_path(), X_OK))
	TH_LOG("%s is not built", vmmctl_path());
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		run_vmmctl(cases[i].argv, r);
		EXPECT_EQ(EXIT_USAGE, r->status) TH_LOG("case %zu", i);
		EXPECT_EQ(1, spawn__count_lines(r->err))
		TH_LOG("case %zu: %s", i, r->err);
		EXPECT_TRUE(strstr(r->err, cases[i].want) != NULL)
		TH_LOG("want '%s' in: %s", cases[i].want, r->err);
	}
	free(r);
}

/* The exact names, and the short forms, get past the options. */
TEST(exact_options_pass)
{
	static const char *const cases[][10] = {
		{ "", "exec", "--timeout-ms", "5", "--cwd", "/", "--env", "A=1",
		  NO_SOCK, "--" },
		{ "", "exec", "-t", "5", "-C", "/", "-e", "A=1", NO_SOCK,
		  "--" },
		{ "", "shell", "--cwd", "/", NO_SOCK },
		{ "", "cp", "-p", "--mode", "644", NO_SOCK, "/dev/null",
		  ":/b" },
		{ "", "fs", "rm", "-rf", NO_SOCK, "/x" },
	};
	struct spawn_result *r = malloc(sizeof(*r));
	const char *argv[12];
	size_t i, j;

	ASSERT_TRUE(r != NULL);
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		/* exec's command after the "--" that ends the row. */
		for (j = 0; j < 10 && cases[i][j]; j++)
			argv[j] = cases[i][j];
		if (!strcmp(argv[j - 1], "--"))
			argv[j++] = "true";
		argv[j] = NULL;
		run_vmmctl(argv, r);
		EXPECT_EQ(EXIT_VMMCTL, r->status)
		TH_LOG("case %zu: %s", i, r->err);
		EXPECT_TRUE(strstr(r->err, NO_SOCK) != NULL)
		TH_LOG("case %zu: %s", i, r->err);
	}
	free(r);
}

TEST_HARNESS_MAIN
