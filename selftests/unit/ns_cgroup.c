// SPDX-License-Identifier: GPL-2.0
/*
 * The namespace sandbox's cgroup (vmm/isolate-ns-cgroup.h) without a
 * cgroup file system: the VM's sizing as limits, and ns_cgroup__apply
 * and ns_cgroup__freeze against plain files laid out as a cgroup v2
 * parent and child are: every limit written where each controller is
 * offered, and the one warning line naming each file and why where one
 * is not. The real hierarchy: selftests/unit/isolate_ns.c (freezing, on
 * this host's v2) and selftests/kvm/ns_cgroup.sh (the limits, in the
 * harness, whose v2 root has the controllers).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "vmm/config.h"
#include "vmm/isolate-ns-cgroup.h"
#include "vmm/options.h"

static void put(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		abort();
	fputs(text, f);
	fclose(f);
}

/* dir/name's content, "" when empty, "(none)" when missing. */
static const char *get(const char *dir, const char *name)
{
	static char buf[256];
	char path[PATH_MAX];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		return "(none)";
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

FIXTURE(cg)
{
	char top[64], parent[96], dir[128];
	struct ns_cgroup_limits l;
	char warn[NS_CGROUP_WARN_LEN];
};

/*
 * parent/ with cgroup.controllers and an empty cgroup.subtree_control,
 * parent/kiln-ns-1-0/ with the limit files, empty; 1 GiB, 2 CPUs.
 */
FIXTURE_SETUP(cg)
{
	snprintf(self->top, sizeof(self->top), "/tmp/kiln-nscg-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->top));
	snprintf(self->parent, sizeof(self->parent), "%s/root", self->top);
	snprintf(self->dir, sizeof(self->dir), "%s/kiln-ns-1-0", self->parent);
	ASSERT_EQ(0, mkdir(self->parent, 0755));
	ASSERT_EQ(0, mkdir(self->dir, 0755));
	put(self->parent, "cgroup.controllers",
	    "cpuset cpu io memory hugetlb pids rdma misc\n");
	put(self->parent, "cgroup.subtree_control", "");
	put(self->dir, "memory.max", "");
	put(self->dir, "memory.swap.max", "");
	put(self->dir, "cpu.max", "");
	put(self->dir, "pids.max", "");
	self->l = (struct ns_cgroup_limits){ .memory_max = 1ULL << 30,
					     .cpu_quota_us = 200000,
					     .cpu_period_us = 100000,
					     .pids_max = 8192 };
}

FIXTURE_TEARDOWN(cg)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->top);
	if (system(cmd))
		TH_LOG("%s failed", cmd);
}

static void limits_of(const char *const args[], struct ns_cgroup_limits *l)
{
	struct vm_config c;

	config__init(&c);
	if (options_argv__parse(&c, ARGS("run"), args))
		abort();
	ns_cgroup__limits(&c, l);
	config__free(&c);
}

/* --memory and --cpus as memory.max, cpu.max and pids.max. */
TEST(limits_from_the_vms_sizing)
{
	struct ns_cgroup_limits l;
	struct vm_config c;

	limits_of(ARGS("--isolation", "namespace"), &l);
	EXPECT_EQ((uint64_t)CONFIG_DEFAULT_MEM_MIB << 20, l.memory_max);
	EXPECT_EQ(NS_CPU_PERIOD_US, l.cpu_quota_us);
	EXPECT_EQ(NS_CPU_PERIOD_US, l.cpu_period_us);
	EXPECT_EQ(2048, l.pids_max); /* 256 MiB / 128 KiB */

	limits_of(ARGS("--memory", "1024", "--cpus", "2"), &l);
	EXPECT_EQ(1ULL << 30, l.memory_max);
	EXPECT_EQ(2 * NS_CPU_PERIOD_US, l.cpu_quota_us);
	EXPECT_EQ(8192, l.pids_max);

	limits_of(ARGS("--memory", "16"), &l);
	EXPECT_EQ(16ULL << 20, l.memory_max);
	EXPECT_EQ(128, l.pids_max);

	/* Below the kernel's floor (no --memory gives it: the minimum). */
	config__init(&c);
	c.mem_mib = 1;
	ns_cgroup__limits(&c, &l);
	EXPECT_EQ(NS_PIDS_MIN, l.pids_max);
	config__free(&c);
}

TEST_F(cg, every_limit_set_where_each_controller_is_offered)
{
	EXPECT_EQ(0, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	EXPECT_STREQ("", self->warn);
	EXPECT_STREQ("1073741824", get(self->dir, "memory.max"));
	EXPECT_STREQ("0", get(self->dir, "memory.swap.max"));
	EXPECT_STREQ("200000 100000", get(self->dir, "cpu.max"));
	EXPECT_STREQ("8192", get(self->dir, "pids.max"));
	/* Each controller enabled in turn: pids the last. */
	EXPECT_STREQ("+pids", get(self->parent, "cgroup.subtree_control"));
}

/* Enabled already: nothing written to the parent; no swap file: fine. */
TEST_F(cg, controllers_enabled_already_and_no_swap_accounting)
{
	char path[PATH_MAX];

	put(self->parent, "cgroup.subtree_control", "cpu memory pids\n");
	snprintf(path, sizeof(path), "%s/memory.swap.max", self->dir);
	ASSERT_EQ(0, unlink(path));
	EXPECT_EQ(0, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	EXPECT_STREQ("cpu memory pids\n",
		     get(self->parent, "cgroup.subtree_control"));
	EXPECT_STREQ("1073741824", get(self->dir, "memory.max"));
	EXPECT_STREQ("(none)", get(self->dir, "memory.swap.max"));
}

/* This host's v2 root: only hugetlb (v1 holds the rest): one line. */
TEST_F(cg, controllers_missing_one_warning)
{
	char want[NS_CGROUP_WARN_LEN];

	put(self->parent, "cgroup.controllers", "hugetlb\n");
	EXPECT_EQ(3, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	snprintf(want, sizeof(want),
		 "namespace sandbox: cgroup %s: %s/cgroup.controllers: no "
		 "memory, cpu, pids controller (held by a cgroup v1 "
		 "hierarchy?): it runs without memory.max, cpu.max, pids.max",
		 self->dir, self->parent);
	EXPECT_STREQ(want, self->warn);
	EXPECT_STREQ("", get(self->dir, "memory.max"));
	EXPECT_STREQ("", get(self->dir, "cpu.max"));
	EXPECT_STREQ("", get(self->dir, "pids.max"));
	EXPECT_STREQ("", get(self->parent, "cgroup.subtree_control"));

	/* One of three missing: the others set, the one named. */
	put(self->parent, "cgroup.controllers", "memory pids\n");
	EXPECT_EQ(1, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	EXPECT_TRUE(strstr(self->warn, "no cpu controller") != NULL)
	TH_LOG("%s", self->warn);
	EXPECT_TRUE(strstr(self->warn, ": it runs without cpu.max") != NULL)
	TH_LOG("%s", self->warn);
	EXPECT_STREQ("1073741824", get(self->dir, "memory.max"));
	EXPECT_STREQ("8192", get(self->dir, "pids.max"));
	EXPECT_EQ(NULL, strchr(self->warn, '\n'));
}

/* Each file that fails is named with its errno's text. */
TEST_F(cg, files_that_fail_are_named)
{
	char path[PATH_MAX], want[NS_CGROUP_WARN_LEN];

	snprintf(path, sizeof(path), "%s/pids.max", self->dir);
	ASSERT_EQ(0, unlink(path));
	EXPECT_EQ(1, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	snprintf(want, sizeof(want),
		 "namespace sandbox: cgroup %s: %s/pids.max: No such file or "
		 "directory: it runs without pids.max",
		 self->dir, self->dir);
	EXPECT_STREQ(want, self->warn);
	EXPECT_STREQ("200000 100000", get(self->dir, "cpu.max"));

	/* The parent's subtree_control refused (EBUSY for a cgroup with
	 * processes in it; here a directory): each controller named. */
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", self->parent);
	ASSERT_EQ(0, unlink(path));
	ASSERT_EQ(0, mkdir(path, 0755));
	EXPECT_EQ(3, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	EXPECT_TRUE(
		strstr(self->warn,
		       "/cgroup.subtree_control: +memory: Is a directory; ") !=
		NULL)
	TH_LOG("%s", self->warn);
	EXPECT_TRUE(strstr(self->warn, "+pids: Is a directory: it runs "
				       "without memory.max, cpu.max, "
				       "pids.max") != NULL)
	TH_LOG("%s", self->warn);

	/* No cgroup.controllers at all. */
	snprintf(path, sizeof(path), "%s/cgroup.controllers", self->parent);
	ASSERT_EQ(0, unlink(path));
	EXPECT_EQ(3, ns_cgroup__apply(self->parent, self->dir, &self->l,
				      self->warn, sizeof(self->warn)));
	EXPECT_TRUE(strstr(self->warn, "/cgroup.controllers: No such file or "
				       "directory: it runs without") != NULL)
	TH_LOG("%s", self->warn);
}

/* vm.pause without a cgroup: refused, saying why. */
TEST(freeze_without_a_cgroup)
{
	char err[256];
	struct ns_cgroup cg;

	ns_cgroup__init(&cg);
	EXPECT_EQ(-EOPNOTSUPP, ns_cgroup__freeze(&cg, true, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "has no cgroup") != NULL) TH_LOG("%s", err);
	EXPECT_FALSE(cg.frozen);
}

/*
 * The freezer's protocol on plain files: cgroup.freeze written, then
 * cgroup.events read for "frozen"; twice is EALREADY; no cgroup.freeze
 * is EOPNOTSUPP; a freeze cgroup.events never confirms is ETIMEDOUT
 * after NS_FREEZE_MS, the cgroup thawed again.
 */
TEST_F(cg, freeze_and_thaw)
{
	char err[256], path[PATH_MAX];
	struct ns_cgroup cg;

	ns_cgroup__init(&cg);
	snprintf(cg.path, sizeof(cg.path), "%s", self->dir);
	put(self->dir, "cgroup.freeze", "0\n");
	put(self->dir, "cgroup.events", "populated 1\nfrozen 1\n");
	EXPECT_EQ(0, ns_cgroup__freeze(&cg, true, err, sizeof(err)));
	EXPECT_STREQ("1", get(self->dir, "cgroup.freeze"));
	EXPECT_TRUE(cg.frozen);
	EXPECT_EQ(-EALREADY, ns_cgroup__freeze(&cg, true, err, sizeof(err)));
	EXPECT_STREQ("the sandbox is paused already", err);

	put(self->dir, "cgroup.events", "populated 1\nfrozen 0\n");
	EXPECT_EQ(0, ns_cgroup__freeze(&cg, false, err, sizeof(err)));
	EXPECT_STREQ("0", get(self->dir, "cgroup.freeze"));
	EXPECT_FALSE(cg.frozen);
	EXPECT_EQ(-EALREADY, ns_cgroup__freeze(&cg, false, err, sizeof(err)));
	EXPECT_STREQ("the sandbox is not paused", err);

	/* Never confirmed: thawed, and the sandbox runs on. */
	EXPECT_EQ(-ETIMEDOUT, ns_cgroup__freeze(&cg, true, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "did not all stop within 5000 ms; the "
				"sandbox runs on") != NULL)
	TH_LOG("%s", err);
	EXPECT_STREQ("0", get(self->dir, "cgroup.freeze"));
	EXPECT_FALSE(cg.frozen);

	snprintf(path, sizeof(path), "%s/cgroup.freeze", self->dir);
	ASSERT_EQ(0, unlink(path));
	EXPECT_EQ(-EOPNOTSUPP, ns_cgroup__freeze(&cg, true, err, sizeof(err)));
	EXPECT_TRUE(strstr(err,
			   "/cgroup.freeze: No such file or directory "
			   "(the cgroup v2 freezer needs Linux 5.2") != NULL)
	TH_LOG("%s", err);
}

TEST_HARNESS_MAIN
