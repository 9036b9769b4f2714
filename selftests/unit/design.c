// SPDX-License-Identifier: GPL-2.0
/*
 * design - tools/check-design, Documentation/design.md against the code.
 *
 * The real tree must pass: the builder's steps in design.md are
 * vm_steps[] in order, and its Layout names every C file of vmm/, net/
 * and snapshot/ and no file that is not there. Small fake trees show
 * that a missing step, two steps swapped, a file the Layout does not
 * name and a name with no file are each caught and named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "lib/compiler.h"
#include "selftests/faketree.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"

static int check(const char *tree, struct spawn_result *r)
{
	const char *argv[] = { "tools/check-design", tree, NULL };

	return spawn__run(argv, NULL, r);
}

TEST(real_tree_matches_design_md)
{
	static struct spawn_result r;

	ASSERT_EQ(0, check(".", &r));
	EXPECT_STREQ("", r.err);
	EXPECT_EQ(0, r.status);
}

#define VM_C                                         \
	"static const struct step {\n"               \
	"\tint x;\n"                                 \
	"} vm_steps[] = {\n"                         \
	"\t{ \"slots\", slots_init, slots_exit },\n" \
	"\t/* a comment */\n"                        \
	"\t{ \"kvm\", kvm_init, NULL },\n"           \
	"};\n"

#define LAYOUT \
	"# Kiln design\n\n## Layout\n\n| `vmm/` | `vmm/vm.c`, `net/a.c` |\n\n"

static const struct {
	const char *doc, *want; /* want NULL: passes */
	int lines;		/* of stderr */
} cases[] = {
	{ LAYOUT "## Building a VM\n\n1. **slots**: x\n2. **kvm**: y\n"
		 "## Running\n3. **not a step**\n",
	  NULL, 0 },
	{ LAYOUT "## Building a VM\n\n1. **slots**: x\n",
	  "vmm/vm.c: step \"kvm\" is not where design.md lists it", 1 },
	/* One step moved: where the doc has it, and where the code does. */
	{ LAYOUT "## Building a VM\n\n1. **kvm**: y\n2. **slots**: x\n",
	  "design.md: step \"slots\" is not where vmm/vm.c has it", 2 },
	{ "## Layout\n\n`vmm/vm.c`\n\n## Building a VM\n\n"
	  "1. **slots**\n2. **kvm**\n",
	  "design.md: Layout does not name net/a.c", 1 },
	{ "## Layout\n\n`vmm/vm.c`, `net/a.c`, `net/gone.c`\n\n"
	  "## Building a VM\n\n1. **slots**\n2. **kvm**\n",
	  "design.md: Layout names net/gone.c, which does not exist", 1 },
};

TEST(each_mismatch_is_named)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-design.XXXXXX";
	char cmd[128];
	size_t i;

	ASSERT_TRUE(mkdtemp(root) != NULL);
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		char sub[160];

		/* One fake tree per case, so each verdict is its own. */
		snprintf(sub, sizeof(sub), "%s/%zu", root, i);
		ASSERT_EQ(0, faketree__put(sub, "vmm/vm.c", VM_C));
		ASSERT_EQ(0, faketree__put(sub, "net/a.c", "int a;\n"));
		ASSERT_EQ(0, faketree__put(sub, "Documentation/design.md",
					   cases[i].doc));
		ASSERT_EQ(0, check(sub, &r));
		if (cases[i].want) {
			EXPECT_EQ(1, r.status);
			EXPECT_TRUE(strstr(r.err, cases[i].want) != NULL);
			EXPECT_EQ(cases[i].lines, spawn__count_lines(r.err));
		} else {
			EXPECT_EQ(0, r.status);
			EXPECT_STREQ("", r.err);
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	EXPECT_EQ(0, system(cmd));
}

TEST_HARNESS_MAIN
