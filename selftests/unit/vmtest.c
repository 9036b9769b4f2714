// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest - tests of tools/vmtest's handling of a harness VM gone wrong,
 * on the real harness: one whose heartbeat stops (the command hides the
 * heartbeat file under a bind mount of /dev/null) is killed and reported
 * as a stall (124) with where it was, and one whose kernel crashes (sysrq) is reported as
 * a harness failure (125) with the crash from its console. Where the
 * host has hardware KVM, vmtest runs commands directly and has no
 * harness VM to test: the tests skip there.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/spawn.h"

/* vmtest's own exit statuses (tools/vmtest). */
#define VMTEST_TIMEOUT 124
#define VMTEST_FAILED  125

static bool host_has_hw_kvm(void)
{
	return !access("/dev/kvm", F_OK) &&
	       (!access("/sys/module/kvm_intel", F_OK) ||
		!access("/sys/module/kvm_amd", F_OK));
}

/* The harness VM's CPUs: KILN_VMTEST_SMP, as tools/vmtest reads it. */
static int harness_cpus(void)
{
	const char *smp = getenv("KILN_VMTEST_SMP");

	return smp && atoi(smp) > 0 ? atoi(smp) : 1;
}

/* The harness's temp dir is on its kernel command line. */
#define HARNESS_DIR "$(sed 's/.*vmtest.dir=\\([^ ]*\\).*/\\1/' /proc/cmdline)"

/*
 * Its kernel ticks periodically on every CPU ("Tick Device: mode: 0" in
 * /proc/timer_list; 1 is one-shot), so a lost timer interrupt is raised
 * again at the next tick (Documentation/harness.md, "The idle stall").
 */
TEST_TIMEOUT(stalled_harness_is_killed, 240)
{
	const char *argv[] = {
		"tools/vmtest", "bash", "-c",
		"sed -n 's/^Tick Device: mode: */tick mode /p'"
		" /proc/timer_list; mount --bind /dev/null " HARNESS_DIR
		"/heartbeat && sleep 600;"
		" echo survived",
		NULL
	};
	struct spawn_result r;

	if (host_has_hw_kvm())
		SKIP(return, "hardware KVM: vmtest starts no harness VM here");
	setenv("KILN_VMTEST_STALL", "15", 1);
	ASSERT_EQ(0, spawn__run(argv, NULL, &r));
	EXPECT_EQ(VMTEST_TIMEOUT, r.status);
	EXPECT_EQ(NULL, strstr(r.out, "survived"));
	EXPECT_NE(NULL, strstr(r.err, "vmtest: the harness VM stalled: no "
				      "heartbeat from the harness for 15s"));
	/* The report: the console beat on past the file; each CPU's place. */
	EXPECT_NE(NULL, strstr(r.err, "vmtest: last beats at harness uptime "));
	EXPECT_NE(NULL, strstr(r.err, " s (console)\n"));
	/* Each CPU's place, interrupt flag, halt state and local APIC. */
	for (int cpu = 0; cpu < harness_cpus(); cpu++) {
		char at[40], apic[40];

		snprintf(at, sizeof(at), "vmtest: harness %d: at ", cpu);
		snprintf(apic, sizeof(apic), "vmtest: harness %d: apic ", cpu);
		EXPECT_NE(NULL, strstr(r.err, at)) TH_LOG("no '%s'", at);
		EXPECT_NE(NULL, strstr(r.err, apic)) TH_LOG("no '%s'", apic);
	}
	EXPECT_NE(NULL, strstr(r.err, " (last: IF="));
	EXPECT_NE(NULL, strstr(r.err, "; IRR "));
	EXPECT_NE(NULL, strstr(r.out, "tick mode 0\n"));
	EXPECT_EQ(NULL, strstr(r.out, "tick mode 1\n"));
	if (_metadata->result->failed)
		TH_LOG("exit %d, stdout %.200s, stderr %.2000s", r.status,
		       r.out, r.err);
}

/*
 * A harness whose init never beats (its vmtest.beat=0 comes first on the
 * command line, so init takes it) is killed once the boot limit passes,
 * with no beat on its console to report: the watchdog used to end there
 * under set -e, leaving a harness stuck at boot to the whole --timeout.
 */
TEST_TIMEOUT(harness_that_never_beats_is_killed, 300)
{
	const char *argv[] = { "tools/vmtest",
			       "--timeout",
			       "900",
			       "bash",
			       "-c",
			       "sleep 600; echo survived",
			       NULL };
	struct spawn_result r;

	if (host_has_hw_kvm())
		SKIP(return, "hardware KVM: vmtest starts no harness VM here");
	setenv("KILN_VMTEST_APPEND", "vmtest.beat=0", 1);
	setenv("KILN_VMTEST_BOOT_LIMIT", "10", 1);
	ASSERT_EQ(0, spawn__run(argv, NULL, &r));
	EXPECT_EQ(VMTEST_TIMEOUT, r.status);
	EXPECT_EQ(NULL, strstr(r.out, "survived"));
	EXPECT_NE(NULL, strstr(r.err, "vmtest: the harness VM stalled: no "
				      "heartbeat from the harness init 10s "
				      "after QEMU started"));
	if (_metadata->result->failed)
		TH_LOG("exit %d, stdout %.200s, stderr %.2000s", r.status,
		       r.out, r.err);
}

/*
 * --lanes: how many harness VMs run_all.sh runs side by side, one per
 * KILN_VMTEST_SMP host CPUs (at least one, at most four; fewer if memory
 * is short); one where vmtest runs commands directly. It boots nothing.
 */
TEST(lanes_are_one_per_harness_cpus)
{
	const char *argv[] = { "tools/vmtest", "--lanes", NULL };
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct spawn_result r;
	char smp[24];
	long n;

	ASSERT_LT(0, cpus);
	setenv("KILN_VMTEST_SMP", "1", 1);
	ASSERT_EQ(0, spawn__run(argv, NULL, &r));
	EXPECT_EQ(0, r.status);
	n = strtol(r.out, NULL, 10);
	if (host_has_hw_kvm()) {
		EXPECT_EQ(1, n);
	} else {
		EXPECT_LE(1, n);
		EXPECT_GE(cpus < 4 ? cpus : 4, n) TH_LOG("%ld CPUs", cpus);
	}
	/* A harness wanting every host CPU, or more: one lane. */
	for (int mul = 1; mul <= 2; mul++) {
		snprintf(smp, sizeof(smp), "%ld", cpus * mul);
		setenv("KILN_VMTEST_SMP", smp, 1);
		ASSERT_EQ(0, spawn__run(argv, NULL, &r));
		EXPECT_EQ(0, r.status);
		EXPECT_STREQ("1\n", r.out) TH_LOG("KILN_VMTEST_SMP=%s", smp);
	}
}

TEST_TIMEOUT(crashed_harness_is_reported_with_its_oops, 240)
{
	const char *argv[] = { "tools/vmtest", "bash", "-c",
			       "echo c > /proc/sysrq-trigger; sleep 600",
			       NULL };
	struct spawn_result r;

	if (host_has_hw_kvm())
		SKIP(return, "hardware KVM: vmtest starts no harness VM here");
	ASSERT_EQ(0, spawn__run(argv, NULL, &r));
	EXPECT_EQ(VMTEST_FAILED, r.status);
	EXPECT_NE(NULL, strstr(r.err, "vmtest: harness console: "));
	EXPECT_NE(NULL, strstr(r.err, "Kernel panic"));
	EXPECT_NE(NULL, strstr(r.err, "harness VM ended without reporting "
				      "a status"));
	if (_metadata->result->failed)
		TH_LOG("exit %d, stderr %.2000s", r.status, r.err);
}

TEST_HARNESS_MAIN
