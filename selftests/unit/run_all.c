// SPDX-License-Identifier: GPL-2.0
/*
 * run_all - tests of selftests/run_all.sh's resuming after a harness stall.
 *
 * Each test makes a fake build tree: two host suites (one run while the
 * harness runs, one after it, as vmtest's is) and three KVM suites
 * (kvm_a, kvm_b, kvm_c, shell scripts printing TAP and noting each run),
 * and a fake vmtest that runs its command in a process group of its own.
 * kvm_b "stalls" a given number of times: it prints part of its TAP, then
 * kills that process group, as the watchdog's kill of a stalled harness
 * VM would end run_kvm.sh, and the fake vmtest exits 124. The real
 * run_all.sh and run_kvm.sh run on it; KILN_KVM_DEVICE=/dev/null stands
 * in for /dev/kvm. The fake's files are per lane ($L: KILN_HARNESS_LANE),
 * as two or more fake harnesses may run side by side.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "selftests/kselftest.h"
#include "selftests/spawn.h"

struct tree {
	char dir[64];
	char o[96];
	char vmtest[96];
	char runs[96];
};

static int write_script(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f))
		return -errno;
	return chmod(path, 0755) ? -errno : 0;
}

/*
 * A KVM suite: notes its name (and its arguments) in $T/runs, prints two
 * results, leaving out those named with -x as a test binary does. kvm_a's
 * second fails. kvm_b stalls after its first while $T/stalls holds a
 * number above 0.
 */
static const char kvm_suite[] =
	"#!/bin/bash\n"
	"T=${KILN_FAKE_TREE:?} L=${KILN_HARNESS_LANE:-}\n"
	"n=${0##*/}\n"
	"echo \"$n${*:+ $*}\" >>\"$T/runs\"\n"
	"args=\" $* \"\n"
	"runs() { [[ $args != *\" -x $1 \"* ]]; }\n"
	"plan=0 i=0\n"
	"for t in first second; do runs $t && plan=$((plan + 1)); done\n"
	"echo 1..$plan\n"
	"if runs first; then i=$((i + 1)); echo \"ok $i first\"; fi\n"
	"if [ \"$n\" = kvm_b ] && [ \"$(cat \"$T/stalls\")\" -gt 0 ]; then\n"
	"	echo $(($(cat \"$T/stalls\") - 1)) >\"$T/stalls\"\n"
	"	touch \"$T/stalled$L\"\n"
	"	kill -KILL -- -\"$(cat \"$T/runner$L.pid\")\"\n"
	"	exit 0\n"
	"fi\n"
	"runs second || exit 0\n"
	"i=$((i + 1))\n"
	"if [ \"$n\" = kvm_a ]; then echo \"not ok $i second\"; exit 1; fi\n"
	"if [ \"$n\" = kvm_b ] && [ -e \"$T/leave\" ]; then\n"
	"	rm \"$T/leave\"\n"
	"	setsid \"$T/kiln-fake-vmm\" 600 </dev/null >/dev/null 2>&1 &\n"
	/* Left behind once it runs under its own name (ci54 looked too soon). */
	"	for i in $(seq 100); do pgrep -x kiln-fake-vmm >/dev/null && break;"
	" sleep 0.1; done\n"
	"fi\n"
	"echo \"ok $i second\"\n";

/*
 * host_ok runs while the harness does: it passes once kvm_a has run,
 * which a host suite run before the harness would wait for in vain.
 */
static const char host_suite[] =
	"#!/bin/bash\n"
	"T=${KILN_FAKE_TREE:?}\n"
	"echo 1..1\n"
	"for i in $(seq 150); do\n"
	"	grep -qx kvm_a \"$T/runs\" 2>/dev/null && break\n"
	"	sleep 0.1\n"
	"done\n"
	"if grep -qx kvm_a \"$T/runs\"; then echo 'ok 1 host'\n"
	"else echo 'not ok 1 host: ran before the harness'; fi\n"
	"echo '# kiln-test-time: host 3'\n";

/* The host suite named vmtest runs after the harness has ended. */
static const char host_after_suite[] =
	"#!/bin/bash\n"
	"T=${KILN_FAKE_TREE:?}\n"
	"echo 1..1\n"
	"if ls \"$T\"/harness.on* >/dev/null 2>&1; then\n"
	"	echo 'not ok 1 after: ran with the harness'\n"
	"else echo 'ok 1 after'; fi\n";

/*
 * vmtest --timeout N CMD...: CMD in its own group; if it "stalled", the
 * status in $T/rc: 124 as after a stall, 125 as after a harness crash.
 */
static const char fake_vmtest[] =
	"#!/bin/bash\n"
	"T=${KILN_FAKE_TREE:?} L=${KILN_HARNESS_LANE:-}\n"
	"[ \"$1\" = --timeout ] && shift 2\n"
	"echo \"${L:-none}\" >>\"$T/lanes\"\n"
	"touch \"$T/harness.on$L\"\n"
	"setsid \"$@\" &\n"
	"echo $! >\"$T/runner$L.pid\"\n"
	"wait $!\n"
	"rc=$?\n"
	"rm -f \"$T/harness.on$L\"\n"
	/*
	 * The harness VM is gone, and its processes with it: this tree's
	 * (by path: other runs of this test may have theirs), until reaped.
	 */
	"left=$(pgrep -f \"^$T/kiln-fake-vmm\")\n"
	"[ -z \"$left\" ] || kill -KILL $left\n"
	"for i in $(seq 50); do\n"
	"	for p in $left; do [ -d /proc/$p ] && break; p=; done\n"
	"	[ -z \"$p\" ] && break; sleep 0.1\n"
	"done\n"
	"if [ -e \"$T/stalled$L\" ]; then rm \"$T/stalled$L\"; exit \"$(cat "
	"\"$T/rc\")\"; fi\n"
	"exit $rc\n";

static int tree_make(struct tree *t)
{
	char path[160], cmd[160];
	/* kvm_d_long: make test-long's, never run here (lib.sh). */
	const char *names[] = { "kvm_a", "kvm_b", "kvm_c", "kvm_d_long" };
	int ret;

	snprintf(t->dir, sizeof(t->dir), "/tmp/kiln-run_all-XXXXXX");
	if (!mkdtemp(t->dir))
		return -errno;
	snprintf(t->o, sizeof(t->o), "%s/o", t->dir);
	snprintf(t->vmtest, sizeof(t->vmtest), "%s/vmtest", t->dir);
	snprintf(t->runs, sizeof(t->runs), "%s/runs", t->dir);
	snprintf(path, sizeof(path), "%s/selftests", t->o);
	if (mkdir(t->o, 0755) || mkdir(path, 0755))
		return -errno;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/selftests/%s", t->o, names[i]);
		ret = write_script(path, kvm_suite);
		if (ret)
			return ret;
	}
	snprintf(path, sizeof(path), "%s/selftests/host_ok", t->o);
	ret = write_script(path, host_suite);
	snprintf(path, sizeof(path), "%s/selftests/vmtest", t->o);
	if (!ret)
		ret = write_script(path, host_after_suite);
	if (!ret)
		ret = write_script(t->vmtest, fake_vmtest);
	/* A stand-in for a vmm a suite leaves behind (comm kiln-fake-vmm). */
	snprintf(cmd, sizeof(cmd), "cp /bin/sleep '%s/kiln-fake-vmm'", t->dir);
	if (!ret && system(cmd))
		ret = -EIO;
	return ret;
}

static void tree_remove(struct tree *t)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", t->dir);
}

FIXTURE(tree)
{
	struct tree t;
	struct spawn_result r; /* of run_all.sh */
	char runs[256];	       /* the suites' runs, a line each */
	char lanes[64];	       /* the fake harnesses' lanes, a line each */
	int nlanes;	       /* KILN_HARNESS_LANES; 0 for 1 */
};

FIXTURE_SETUP(tree)
{
	ASSERT_EQ(0, tree_make(&self->t));
}

FIXTURE_TEARDOWN(tree)
{
	if (_metadata->result->failed)
		TH_LOG("run_all.sh: exit %d, output:\n%s", self->r.status,
		       self->r.out);
	tree_remove(&self->t);
}

/*
 * run_all.sh on the tree, kvm_b stalling its first @stalls runs, the
 * fake vmtest then exiting @rc.
 */
static void run_stalling(struct __test_metadata *_metadata,
			 FIXTURE_DATA(tree) * self, int stalls, int rc)
{
	const char *argv[] = { "selftests/run_all.sh", self->t.o, NULL };
	char path[160], lanes[16];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/stalls", self->t.dir);
	f = fopen(path, "w");
	ASSERT_NE(NULL, f);
	fprintf(f, "%d\n", stalls);
	fclose(f);
	snprintf(path, sizeof(path), "%s/rc", self->t.dir);
	f = fopen(path, "w");
	ASSERT_NE(NULL, f);
	fprintf(f, "%d\n", rc);
	fclose(f);
	setenv("KILN_FAKE_TREE", self->t.dir, 1);
	setenv("KILN_VMTEST", self->t.vmtest, 1);
	setenv("KILN_KVM_DEVICE", "/dev/null", 1);
	/* The tree's own script suites (docs.sh, sdk.sh) are not the fake's. */
	setenv("KILN_KVM_SCRIPTS", "/nonexistent-kiln-scripts", 1);
	setenv("KILN_HARNESS_ATTEMPTS", "3", 1);
	snprintf(lanes, sizeof(lanes), "%d", self->nlanes ? self->nlanes : 1);
	setenv("KILN_HARNESS_LANES", lanes, 1);
	ASSERT_EQ(0, spawn__run(argv, NULL, &self->r));
	f = fopen(self->t.runs, "r");
	if (f) {
		n = fread(self->runs, 1, sizeof(self->runs) - 1, f);
		fclose(f);
	}
	self->runs[n] = '\0';
	n = 0;
	snprintf(path, sizeof(path), "%s/lanes", self->t.dir);
	f = fopen(path, "r");
	if (f) {
		n = fread(self->lanes, 1, sizeof(self->lanes) - 1, f);
		fclose(f);
	}
	self->lanes[n] = '\0';
}

/* How many times @needle is in @hay. */
static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static char *suite(struct tree *t, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/selftests/%s", t->o, name);
	return buf;
}

/*
 * A stall in kvm_b: kvm_a's results stand (its failure too, not run
 * again), kvm_b's first test, which had ended, keeps its result and
 * kvm_b resumes without it, then kvm_c; the stall is named above the
 * summary.
 */
TEST_F(tree, stall_resumes_at_the_cut_off_suite)
{
	const char *out = self->r.out;
	char name[160];

	run_stalling(_metadata, self, 1, 124);
	EXPECT_EQ(1, self->r.status);
	EXPECT_STREQ("kvm_a\nkvm_b\nkvm_b -x first\nkvm_c\n", self->runs);
	EXPECT_NE(NULL,
		  strstr(out, "\n7 passed, 1 failed, 1 harness stall(s)\n"));
	EXPECT_NE(NULL, strstr(out, "; resuming: the 1 tests of kvm_b that "
				    "had ended keep their results\n"));
	EXPECT_NE(NULL, strstr(out, "# FAILED: "));
	EXPECT_NE(NULL, strstr(out, "kvm_a: 2 second\n"));
	EXPECT_EQ(NULL, strstr(out, "timed out (exit 124)"));
	EXPECT_EQ(NULL, strstr(out, "cut off"));
	EXPECT_NE(NULL, strstr(out, "# HARNESS STALL, suites run again: "
				    "the harness VM stalled, timed out or "
				    "failed (exit 124) in "));
	EXPECT_NE(NULL,
		  strstr(out, suite(&self->t, "kvm_b", name, sizeof(name))));
	EXPECT_NE(NULL, strstr(out, "the 2 suites it did not finish"));
}

/* A harness that stalls every time: three runs, then it fails. */
TEST_F(tree, stall_every_time_fails_after_three_runs)
{
	const char *out = self->r.out;

	run_stalling(_metadata, self, 99, 124);
	EXPECT_EQ(1, self->r.status);
	EXPECT_STREQ("kvm_a\nkvm_b\nkvm_b -x first\nkvm_b -x first\n",
		     self->runs);
	EXPECT_NE(NULL, strstr(out, "(run 3 of at most 3)"));
	EXPECT_EQ(NULL, strstr(out, "(run 4"));
	EXPECT_NE(NULL, strstr(out, "kvm_b: cut off (the harness ended "
				    "mid-suite)\n"));
	EXPECT_NE(NULL, strstr(out, "timed out (exit 124)\n"));
	/*
	 * host_ok, vmtest, kvm_a 1 and kvm_b's first (from its first run,
	 * left out of the next two); three failures.
	 */
	EXPECT_NE(NULL,
		  strstr(out, "\n4 passed, 3 failed, 2 harness stall(s)\n"));
}

/* A harness kernel that crashed (vmtest 125) resumes as after a stall. */
TEST_F(tree, crash_resumes_like_a_stall)
{
	run_stalling(_metadata, self, 1, 125);
	EXPECT_EQ(1, self->r.status);
	EXPECT_STREQ("kvm_a\nkvm_b\nkvm_b -x first\nkvm_c\n", self->runs);
	EXPECT_NE(NULL, strstr(self->r.out,
			       "\n7 passed, 1 failed, 1 harness stall(s)\n"));
	EXPECT_EQ(NULL, strstr(self->r.out, "the harness failed (exit 125)"));
	EXPECT_NE(NULL, strstr(self->r.out, "or failed (exit 125) in "));
}

/*
 * A vmm that survives its SIGKILL after kvm_b (a thread stuck in the
 * harness kernel; here a stand-in and a signal it survives): its
 * threads are shown, that harness runs no more suites, and kvm_c runs
 * in the next one. Counted as a harness stall, not as kvm_b's failure.
 */
TEST_F(tree, unkillable_vmm_ends_the_harness_run)
{
	const char *out = self->r.out;
	char path[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/leave", self->t.dir);
	f = fopen(path, "w");
	ASSERT_NE(NULL, f);
	fclose(f);
	setenv("KILN_RUN_KVM_VMM_COMM", "kiln-fake-vmm", 1);
	setenv("KILN_RUN_KVM_LEFTOVER_SIGNAL", "0", 1);
	run_stalling(_metadata, self, 0, 124);
	unsetenv("KILN_RUN_KVM_VMM_COMM");
	unsetenv("KILN_RUN_KVM_LEFTOVER_SIGNAL");
	EXPECT_EQ(1, self->r.status);
	EXPECT_STREQ("kvm_a\nkvm_b\nkvm_c\n", self->runs);
	EXPECT_NE(NULL, strstr(out, "survived SIGKILL after "));
	EXPECT_NE(NULL,
		  strstr(out, "kvm_b: a thread stuck in the harness "
			      "kernel; this harness runs no more suites"));
	EXPECT_NE(NULL, strstr(out, "# kiln-harness-stuck: vmm "));
	EXPECT_EQ(NULL, strstr(out, "left vmm processes"));
	EXPECT_NE(NULL, strstr(out, "\n7 passed, 1 failed, 1 harness "
				    "stall(s)\n"));
}

/*
 * Two lanes: kvm_a and kvm_c in lane 0, kvm_b in lane 1 (the suites cost
 * the same, so each goes to the lane with less so far, lane 0 on a tie),
 * two fake harnesses side by side, every suite run once and counted
 * once, lane 1's output whole after lane 0's.
 */
TEST_F(tree, two_lanes_share_the_suites)
{
	const char *out = self->r.out, *l0, *l1, *end0;

	self->nlanes = 2;
	run_stalling(_metadata, self, 0, 124);
	EXPECT_EQ(1, self->r.status);
	EXPECT_EQ(1, count(self->runs, "kvm_a\n"));
	EXPECT_EQ(1, count(self->runs, "kvm_b\n"));
	EXPECT_EQ(1, count(self->runs, "kvm_c\n"));
	EXPECT_EQ(1, count(self->lanes, "0\n"));
	EXPECT_EQ(1, count(self->lanes, "1\n"));
	EXPECT_NE(NULL, strstr(out, "# kiln-harness-lane: 0 of 2 runs "
				    "kvm_a kvm_c\n"));
	EXPECT_NE(NULL, strstr(out, "# kiln-harness-lane: 1 of 2 runs "
				    "kvm_b\n"));
	l0 = strstr(out, "(2 suites, lane 0)\n");
	l1 = strstr(out, "(1 suites, lane 1)\n");
	ASSERT_NE(NULL, l0);
	ASSERT_NE(NULL, l1);
	EXPECT_LT(l0, l1);
	/* Lane 0's exit comes before lane 1's first line. */
	end0 = strstr(l0, "# kiln-harness-exit: ");
	ASSERT_NE(NULL, end0);
	EXPECT_LT(end0, l1);
	EXPECT_EQ(NULL, strstr(out, "HARNESS STALL"));
	EXPECT_NE(NULL, strstr(out, "\n7 passed, 1 failed\n"));
}

/*
 * A stall in lane 1 (kvm_b): that lane resumes kvm_b in a fresh harness
 * while lane 0 runs on; the counts are as with one lane.
 */
TEST_F(tree, stall_in_one_lane_resumes_in_that_lane)
{
	const char *out = self->r.out;

	self->nlanes = 2;
	run_stalling(_metadata, self, 1, 124);
	EXPECT_EQ(1, self->r.status);
	EXPECT_EQ(1, count(self->runs, "kvm_a\n"));
	EXPECT_EQ(1, count(self->runs, "kvm_b\n"));
	EXPECT_EQ(1, count(self->runs, "kvm_b -x first\n"));
	EXPECT_LT(strstr(self->runs, "kvm_b\n"),
		  strstr(self->runs, "kvm_b -x first\n"));
	EXPECT_EQ(1, count(self->runs, "kvm_c\n"));
	EXPECT_EQ(1, count(self->lanes, "0\n"));
	EXPECT_EQ(2, count(self->lanes, "1\n"));
	EXPECT_NE(NULL, strstr(out, "(1 suites, lane 1)\n# kiln-selftest: "));
	EXPECT_NE(NULL, strstr(out, "the 1 suites it did not finish run again "
				    "(run 2 of at most 3); resuming: the 1 "
				    "tests of kvm_b that had ended keep their "
				    "results\n"));
	EXPECT_NE(NULL, strstr(out, "\n7 passed, 1 failed, 1 harness "
				    "stall(s)\n"));
}

/* No stall: one run, nothing said about stalls. */
/* Each suite once, and kvm_d_long (make test-long's) not at all. */
TEST_F(tree, no_stall_runs_once)
{
	run_stalling(_metadata, self, 0, 124);
	EXPECT_EQ(1, self->r.status);
	EXPECT_STREQ("kvm_a\nkvm_b\nkvm_c\n", self->runs);
	EXPECT_EQ(NULL, strstr(self->r.out, "HARNESS STALL"));
	EXPECT_NE(NULL, strstr(self->r.out, "\n7 passed, 1 failed\n"));
	EXPECT_NE(NULL,
		  strstr(self->r.out, "\n# SLOW TEST: host_ok.host 3s\n"));
}

TEST_HARNESS_MAIN
