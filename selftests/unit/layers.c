// SPDX-License-Identifier: GPL-2.0
/*
 * layers - tools/check-layers, the one-way include rule between folders.
 *
 * The real tree must pass; small fake trees show that each kind of back
 * edge (a device including vmm/, the bootloader including devices/, lib/
 * including anything above it, ebpf/ including devices/, the host
 * including guest/, net/ or snapshot/ including vmm/ or each other, or
 * naming struct vm or KVM) is caught and named with its file and line,
 * and that allowed edges are not.
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
	const char *argv[] = { "tools/check-layers", tree, NULL };

	return spawn__run(argv, NULL, r);
}

TEST(real_tree_has_no_back_edge)
{
	static struct spawn_result r;

	ASSERT_EQ(0, check(".", &r));
	EXPECT_STREQ("", r.err);
	EXPECT_EQ(0, r.status);
}

static const struct {
	const char *file, *text, *want; /* want NULL: allowed */
} cases[] = {
	{ "devices/virtio/x.c", "#include \"vmm/vm.h\"\n",
	  "devices/virtio/x.c:1: devices/ may not include vmm/vm.h" },
	{ "devices/x.h", "\n#include <stdio.h>\n#include \"guest/agent/a.h\"\n",
	  "devices/x.h:3: devices/ may not include guest/agent/a.h" },
	{ "bootloader/b.c", "#include \"devices/uart.h\"\n",
	  "bootloader/b.c:1: bootloader/ may not include devices/uart.h" },
	{ "lib/l.c", "#  include \"proto/tlv.h\"\n",
	  "lib/l.c:1: lib/ may not include proto/tlv.h" },
	{ "vmm/v.c", "#include \"guest/init/mounts.h\"\n",
	  "vmm/v.c:1: vmm/ may not include guest/init/mounts.h" },
	{ "tools/t.c", "#include \"guest/agent/fs.h\"\n",
	  "tools/t.c:1: tools/ may not include guest/agent/fs.h" },
	{ "ebpf/e.c", "#include \"devices/virtio/net.h\"\n",
	  "ebpf/e.c:1: ebpf/ may not include devices/virtio/net.h" },
	{ "ebpf/ok.c", "#include \"lib/log.h\"\n#include \"ebpf/egress.h\"\n",
	  NULL },
	{ "vmm/ebpf.c", "#include \"ebpf/loader.h\"\n", NULL },
	{ "devices/ok.c",
	  "#include \"lib/log.h\"\n#include \"proto/agent.h\"\n"
	  "#include \"devices/virtio/queue.h\"\n#include \"local.h\"\n",
	  NULL },
	{ "vmm/ok.c", "#include \"devices/uart.h\"\n#include \"proto/tlv.h\"\n",
	  NULL },
	{ "guest/ok.c", "#include \"proto/agent.h\"\n", NULL },
	{ "net/n.c", "#include \"vmm/vm.h\"\n",
	  "net/n.c:1: net/ may not include vmm/vm.h" },
	{ "net/d.h", "#include \"devices/virtio/net.h\"\n",
	  "net/d.h:1: net/ may not include devices/virtio/net.h" },
	{ "net/s.c", "#include \"snapshot/file.h\"\n",
	  "net/s.c:1: net/ may not include snapshot/file.h" },
	{ "net/v.c", "\nstruct vm;\n",
	  "net/v.c:2: net/ may not see struct vm" },
	{ "net/ok.c",
	  "#include \"lib/log.h\"\n#include \"ebpf/loader.h\"\n"
	  "#include \"net/flow.h\"\nstruct vm_config;\n",
	  NULL },
	{ "snapshot/s.c", "#include \"vmm/vm.h\"\n",
	  "snapshot/s.c:1: snapshot/ may not include vmm/vm.h" },
	{ "snapshot/n.c", "#include \"net/policy.h\"\n",
	  "snapshot/n.c:1: snapshot/ may not include net/policy.h" },
	{ "snapshot/k.c", "#include <errno.h>\n#include <linux/kvm.h>\n",
	  "snapshot/k.c:2: snapshot/ may not include <linux/kvm.h>" },
	{ "snapshot/v.h", "int f(struct vm *vm);\n",
	  "snapshot/v.h:1: snapshot/ may not see struct vm" },
	{ "snapshot/ok.c",
	  "#include \"lib/sha256.h\"\n#include \"snapshot/file.h\"\n", NULL },
	{ "vmm/layers.c",
	  "#include \"net/proxy.h\"\n#include \"snapshot/load.h\"\n", NULL },
};

TEST(each_back_edge_is_named)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-layers.XXXXXX";
	char cmd[128];
	size_t i;

	ASSERT_TRUE(mkdtemp(root) != NULL);
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		char sub[160];

		/* One fake tree per case, so each verdict is its own. */
		snprintf(sub, sizeof(sub), "%s/%zu", root, i);
		ASSERT_EQ(0, faketree__put(sub, cases[i].file, cases[i].text));
		ASSERT_EQ(0, check(sub, &r));
		if (cases[i].want) {
			EXPECT_EQ(1, r.status);
			EXPECT_TRUE(strstr(r.err, cases[i].want) != NULL);
			EXPECT_EQ(1, spawn__count_lines(r.err));
		} else {
			EXPECT_EQ(0, r.status);
			EXPECT_STREQ("", r.err);
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	EXPECT_EQ(0, system(cmd));
}

/* n lines of "int x;" as root/rel. */
static int put_lines(const char *root, const char *rel, unsigned int n)
{
	char *text = malloc(n * 7 + 1);
	int ret;

	if (!text)
		return -ENOMEM;
	text[0] = '\0';
	for (unsigned int i = 0; i < n; i++)
		memcpy(text + i * 7, "int x;\n", 8);
	ret = faketree__put(root, rel, text);
	free(text);
	return ret;
}

/* One job per file: 1500 lines at most, for the layers, not the tests. */
TEST(a_file_over_1500_lines_is_named)
{
	static struct spawn_result r;
	char root[] = "/tmp/kiln-layers-long.XXXXXX";
	char cmd[128];

	ASSERT_TRUE(mkdtemp(root) != NULL);
	ASSERT_EQ(0, put_lines(root, "net/ok.c", 1500));
	ASSERT_EQ(0, put_lines(root, "selftests/unit/big.c", 3000));
	ASSERT_EQ(0, check(root, &r));
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("", r.err);
	ASSERT_EQ(0, put_lines(root, "vmm/long.c", 1501));
	ASSERT_EQ(0, check(root, &r));
	EXPECT_EQ(1, r.status);
	EXPECT_STREQ("vmm/long.c: 1501 lines, over 1500: split it by job\n",
		     r.err);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	EXPECT_EQ(0, system(cmd));
}

TEST_HARNESS_MAIN
