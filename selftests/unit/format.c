// SPDX-License-Identifier: GPL-2.0
/*
 * format - tools/check-format, the C sources against .clang-format.
 *
 * The real tree must be formatted (`make format` fixes it). Small fake
 * trees, each with the real .clang-format, show that a misformatted file
 * is named on a line of its own and a formatted one is not, that --fix
 * formats in place, that in a git tree only tracked files count and the
 * fuzz corpora never do, and that a missing clang-format 14 is said as
 * such. Without clang-format 14 every case is a skip with the reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "selftests/faketree.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"

#define FORMATTED    "int main(void)\n{\n\treturn 0;\n}\n"
#define MISFORMATTED "int  main( void ){ return 0; }\n"

/* root/rel's text, NUL-terminated, in buf (truncated to size). */
static int get(const char *root, const char *rel, char *buf, size_t size)
{
	char path[256];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	n = fread(buf, 1, size - 1, f);
	buf[n] = 0;
	fclose(f);
	return 0;
}

/* A fake tree in root (mkdtemp), with the real tree's .clang-format. */
static int make_tree(char *root)
{
	char cmd[160];

	if (!mkdtemp(root))
		return -errno;
	snprintf(cmd, sizeof(cmd), "cp .clang-format '%s/'", root);
	return system(cmd) ? -1 : 0;
}

static void remove_tree(const char *root)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd))
		fprintf(stderr, "# could not remove %s\n", root);
}

static int check(const char *tree, bool fix, struct spawn_result *r)
{
	const char *argv[] = { "tools/check-format", tree, NULL };
	const char *fix_argv[] = { "tools/check-format", "--fix", tree, NULL };

	return spawn__run(fix ? fix_argv : argv, NULL, r);
}

/* Exit 4: no clang-format 14 here; what the checker said is the reason. */
#define SKIP_WITHOUT_CLANG_FORMAT(r)                                       \
	do {                                                               \
		if ((r)->status == 4)                                      \
			SKIP(return, "%.*s", (int)strcspn((r)->err, "\n"), \
				   (r)->err);                              \
	} while (0)

TEST_TIMEOUT(real_tree_is_formatted, 120)
{
	static struct spawn_result r;
	const char *line, *nl;
	int n;

	ASSERT_EQ(0, check(".", false, &r));
	SKIP_WITHOUT_CLANG_FORMAT(&r);
	/* The checker's lines as diagnostics: one per file, or its trouble. */
	for (line = r.err; *line; line = nl + 1) {
		nl = strchrnul(line, '\n');
		printf("# %.*s\n", (int)(nl - line), line);
		if (!*nl)
			break;
	}
	n = spawn__count_lines(r.err);
	EXPECT_EQ(0, n) TH_LOG("%d files are not clang-formatted", n);
	EXPECT_EQ(0, r.status);
}

TEST(formatted_tree_passes)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-format.XXXXXX";

	ASSERT_EQ(0, make_tree(root));
	ASSERT_EQ(0, faketree__put(root, "lib/good.c", FORMATTED));
	ASSERT_EQ(0,
		  faketree__put(root, "lib/good.h", "int f(int a, int b);\n"));
	ASSERT_EQ(0, check(root, false, &r));
	remove_tree(root);
	SKIP_WITHOUT_CLANG_FORMAT(&r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("", r.err);
}

TEST(each_misformatted_file_is_named)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-format.XXXXXX";

	ASSERT_EQ(0, make_tree(root));
	ASSERT_EQ(0, faketree__put(root, "lib/good.c", FORMATTED));
	ASSERT_EQ(0, faketree__put(root, "lib/bad.c", MISFORMATTED));
	ASSERT_EQ(0, faketree__put(root, "devices/x/bad.h",
				   "int  f(int a,int b);\n"));
	/* Inputs, not source, whatever their name; and the build. */
	ASSERT_EQ(0, faketree__put(root, "selftests/fuzz/corpus/t/seed.c",
				   MISFORMATTED));
	ASSERT_EQ(0, faketree__put(root, "build/gen.c", MISFORMATTED));
	ASSERT_EQ(0, check(root, false, &r));
	remove_tree(root);
	SKIP_WITHOUT_CLANG_FORMAT(&r);
	EXPECT_EQ(1, r.status);
	EXPECT_EQ(2, spawn__count_lines(r.err));
	EXPECT_TRUE(strstr(r.err, "lib/bad.c: not clang-formatted "
				  "(make format)\n") != NULL);
	EXPECT_TRUE(strstr(r.err, "devices/x/bad.h: not clang-formatted "
				  "(make format)\n") != NULL);
	EXPECT_TRUE(strstr(r.err, "good") == NULL);
	EXPECT_TRUE(strstr(r.err, "corpus") == NULL);
	EXPECT_TRUE(strstr(r.err, "build") == NULL);
}

TEST(fix_formats_in_place)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-format.XXXXXX";
	char text[256];

	ASSERT_EQ(0, make_tree(root));
	ASSERT_EQ(0, faketree__put(root, "lib/bad.c", MISFORMATTED));
	ASSERT_EQ(0, faketree__put(root, "lib/good.c", FORMATTED));
	ASSERT_EQ(0, check(root, true, &r));
	if (r.status == 4)
		remove_tree(root);
	SKIP_WITHOUT_CLANG_FORMAT(&r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("", r.err);
	EXPECT_STREQ("  FORMAT  lib/bad.c\n", r.out);
	EXPECT_EQ(0, get(root, "lib/bad.c", text, sizeof(text)));
	EXPECT_STREQ(FORMATTED, text);
	EXPECT_EQ(0, check(root, false, &r));
	EXPECT_EQ(0, r.status);
	remove_tree(root);
}

/* In a git work tree the files are git's: an untracked one is not seen. */
TEST(only_tracked_files_count_in_git)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-format.XXXXXX";
	char cmd[160];

	ASSERT_EQ(0, make_tree(root));
	ASSERT_EQ(0, faketree__put(root, "lib/tracked.c", MISFORMATTED));
	ASSERT_EQ(0, faketree__put(root, "lib/untracked.c", MISFORMATTED));
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && git init -q && git add lib/tracked.c", root);
	if (system(cmd)) {
		remove_tree(root);
		SKIP(return, "git init or add failed (no git?)");
	}
	ASSERT_EQ(0, check(root, false, &r));
	remove_tree(root);
	SKIP_WITHOUT_CLANG_FORMAT(&r);
	EXPECT_EQ(1, r.status);
	EXPECT_STREQ("lib/tracked.c: not clang-formatted (make format)\n",
		     r.err);
}

/* Never a pass without the pinned tool: a skip that says what is missing. */
TEST(missing_clang_format_is_said)
{
	static struct spawn_result r;

	ASSERT_EQ(0, setenv("CLANG_FORMAT", "/nonexistent/clang-format-14", 1));
	ASSERT_EQ(0, check(".", false, &r));
	EXPECT_EQ(4, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err));
	EXPECT_TRUE(strstr(r.err, "clang-format 14 is needed") != NULL);
	EXPECT_TRUE(strstr(r.err, "apt-get install clang-format") != NULL);
}

TEST_HARNESS_MAIN
