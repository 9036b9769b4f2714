// SPDX-License-Identifier: GPL-2.0
/*
 * A bind mount far bigger than its descriptor budget (issue 40, item 5),
 * shared by kvm_bind_nofile (make test: 2,000 files under a hard
 * RLIMIT_NOFILE of 512, a budget of 256) and kvm_bind_nofile_long (make
 * test-long: the 20,000 files under 4096, a budget of 2048): a
 * host-made git repository bind-mounted rw into the Debian agent image,
 * the vmm started under the hard limit (soft lower: the vmm raises it,
 * and a mount's budget is then half of it). In the guest `chown -R` of the whole tree reports no
 * error (to 0: the tree is on the harness's tmpfs, which holds no xattrs,
 * so the bind is squash), `git status` (an lstat of every file, the
 * index read) is clean, and files read back as written:
 * node descriptors are closed and opened again instead of held, by file
 * handle (a root vmm) or, with CAP_DAC_READ_SEARCH out of its bounding
 * set, by name.
 */
#ifndef KILN_SELFTESTS_BIND_NOFILE_H
#define KILN_SELFTESTS_BIND_NOFILE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <linux/capability.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/test_tmp.h"
#include "selftests/kvm/vmm_util.h"

#define NR_PER_DIR 100

/* The tree: d000/f00 ... dNNN/f99, each "dDDD/fFF\n" (9 bytes). */
static void make_repo(struct __test_metadata *_metadata, const char *src,
		      int nr_dirs)
{
	char path[256], cmd[512];
	int d, f;
	FILE *fp;

	ASSERT_EQ(0, mkdir(src, 0755));
	for (d = 0; d < nr_dirs; d++) {
		snprintf(path, sizeof(path), "%s/d%03d", src, d);
		ASSERT_EQ(0, mkdir(path, 0755));
		for (f = 0; f < NR_PER_DIR; f++) {
			snprintf(path, sizeof(path), "%s/d%03d/f%02d", src, d,
				 f);
			fp = fopen(path, "w");
			ASSERT_NE(NULL, fp);
			fprintf(fp, "d%03d/f%02d\n", d, f);
			ASSERT_EQ(0, fclose(fp));
		}
	}
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && git init -q && git config gc.auto 0 && "
		 "git add -A && "
		 "git -c user.email=host@kiln -c user.name=host "
		 "commit -q -m 'made on the host'",
		 src);
	/*
	 * gc.auto 0: else the commit's 20,000 loose objects start a `git gc
	 * --auto` in the background, which packs and removes them while the
	 * guest walks .git (chown then rightly says ENOENT).
	 */
	ASSERT_EQ(0, system(cmd)) TH_LOG("git on the host: %s", cmd);
}

/*
 * nr_dirs directories of NR_PER_DIR files under a hard limit of hard
 * descriptors (soft a quarter of it), by name or by file handle.
 */
static void run(struct __test_metadata *_metadata, int nr_dirs, rlim_t hard,
		bool by_name)
{
	struct rlimit rl = { .rlim_cur = hard / 4, .rlim_max = hard };
	char dir[64], src[128], opt[200], desc[300], want[64], cmd[200];
	char last[32];
	struct spawn_result r;
	struct guest g;

	guest_paths(&g);
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	snprintf(desc, sizeof(desc), "%s/debian-12-agent.json", g.images);
	ASSERT_EQ(0, access(desc, R_OK)) TH_LOG("%s missing: make image", desc);
	test_tmp_name(dir, sizeof(dir), "kiln-nofile-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(src, sizeof(src), "%s/src", dir);
	make_repo(_metadata, src, nr_dirs);
	/* This test's own process: the vmm inherits both. */
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	if (by_name)
		ASSERT_EQ(0,
			  prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0));
	/* Squash where the tree cannot hold xattrs: chown to 0 then. */
	snprintf(opt, sizeof(opt), "/workspace=bind:%s:rw", src);
	BOOT_SPEC((&(struct boot_spec){
			  .initrd = "",
			  .opts = ARGS("--cpus", "2", "--memory", "1024",
				       "--rootfs", desc, "--mount", opt),
			  .cmd = ARGS(
				  "bash", "-c",
				  "set -e; cd /workspace;"
				  "chown -R 0:0 /workspace 2>/tmp/err || true;"
				  "echo chown-errors=$(wc -l < /tmp/err);"
				  "head -3 /tmp/err;"
				  "git config --global --add safe.directory"
				  " /workspace;"
				  "echo files=$(git ls-files | wc -l);"
				  "git status --porcelain > /tmp/st;"
				  "echo status-lines=$(wc -l < /tmp/st);"
				  "head -3 /tmp/st;"
				  "stat -c 'st %s %n' d012/f45 d019/f99;"
				  "cat d000/f00 d012/f45 d019/f99;"
				  "cat $(ls -d d* | tail -1)/f99;"
				  "echo done") }),
		  &r);
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.out);
	snprintf(want, sizeof(want), "files=%d\n", nr_dirs * NR_PER_DIR);
	EXPECT_NE(NULL, strstr(r.out, want)) TH_LOG("%s", r.out);
	EXPECT_NE(NULL, strstr(r.out, "chown-errors=0\n")) TH_LOG("%s", r.out);
	EXPECT_NE(NULL, strstr(r.out, "status-lines=0\n")) TH_LOG("%s", r.out);
	EXPECT_NE(NULL, strstr(r.out, "st 9 d012/f45\nst 9 d019/f99\n"
				      "d000/f00\nd012/f45\nd019/f99\n"))
	TH_LOG("%s", r.out);
	/* The last directory's last file, read through the same walk. */
	snprintf(last, sizeof(last), "d%03d/f%02d", nr_dirs - 1,
		 NR_PER_DIR - 1);
	EXPECT_NE(NULL, strstr(r.out, last)) TH_LOG("%s", r.out);
	EXPECT_NE(NULL, strstr(r.out, "done"));
	EXPECT_EQ(NULL, strstr(r.err, "as many as this mount may"))
	TH_LOG("%s", r.err);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", dir);
}

#endif
