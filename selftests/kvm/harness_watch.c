// SPDX-License-Identifier: GPL-2.0
/*
 * The KVM tests' environment watch (selftests/kvm/harness_watch.h) on the
 * real harness: the "sample_" tests are TEST_MANUAL, and the real tests
 * run this binary with "-t sample_..." and read its TAP. A test whose
 * guest spins on its vCPU past the timeout is run again (each run spins,
 * so it runs KSFT_ENVIRONMENT_RUNS times), one whose guest sleeps is not
 * (and the state of its devices is shown, from the vmm's SIGUSR2 report);
 * a failure after the harness kernel logged a soft lockup is run again,
 * one after a quiet log is not. The watch is
 * only on inside the harness (KILN_IN_HARNESS): elsewhere these skip.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define SAMPLE_TIMEOUT 20 /* seconds; the guest boots in a few */
/*
 * The spinning guest's: its vCPU thread runs non-stop from the first
 * KVM_RUN, booting or spinning, so its timeout needs no room for the
 * boot; it runs KSFT_ENVIRONMENT_RUNS times.
 */
#define SPIN_TIMEOUT 10

TEST_MANUAL_TIMEOUT(sample_spinning_guest, SPIN_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("sh", "-c", "while :; do :; done"), NULL, &r);
}

TEST_MANUAL_TIMEOUT(sample_sleeping_guest, SAMPLE_TIMEOUT)
{
	struct spawn_result r;

	/* A virtio-fs device: the watch shows its rings (SIGUSR2). */
	BOOT(NULL, ARGS("--mount", "/m=memory"), ARGS("sleep", "600"), NULL,
	     &r);
}

/*
 * The same guest with the vmm's output in a log file (as the control and
 * network tests' `vmm start` have it), the test waiting on nothing.
 */
TEST_MANUAL_TIMEOUT(sample_logged_sleeping_guest, SAMPLE_TIMEOUT)
{
	char log[64];
	struct guest g;
	int fd;

	test_tmp_name(log, sizeof(log), "kiln-watch-log-XXXXXX");
	fd = mkstemp(log);
	ASSERT_LE(0, fd);
	close(fd);
	guest_paths(&g);
	ASSERT_LT(0, spawn_logged(ARGS(g.vmm, "run", "--kernel", g.vmlinux,
				       "--initrd", g.initrd, "--mount",
				       "/m=memory", "--", "sleep", "600"),
				  log));
	unlink(log); /* the vmm keeps it open */
	for (;;)
		pause();
}

/* Fails after logging @msg to the harness kernel (KILN_SAMPLE_KMSG). */
TEST_MANUAL(sample_kmsg_then_fail)
{
	const char *msg = getenv("KILN_SAMPLE_KMSG");
	int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);

	ASSERT_NE(NULL, msg);
	ASSERT_LE(0, fd);
	EXPECT_LT(0, write(fd, msg, strlen(msg)));
	close(fd);
	EXPECT_STREQ("this run", "fails");
}

/* This binary with "-t @name"; stdout and stderr in @r. */
static int run_sample(const char *name, struct spawn_result *r)
{
	const char *argv[] = { "/proc/self/exe", "-t", name, NULL };

	return spawn__run(argv, NULL, r);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

#define NEED_HARNESS()                                                       \
	do {                                                                 \
		if (!getenv("KILN_IN_HARNESS"))                              \
			SKIP(return, "the watch is on in the harness only"); \
		if (access("/dev/kvm", R_OK | W_OK))                         \
			SKIP(return, "no usable /dev/kvm");                  \
	} while (0)

TEST_TIMEOUT(spinning_guest_at_timeout_runs_again,
	     (KSFT_ENVIRONMENT_RUNS + 2) * SAMPLE_TIMEOUT)
{
	struct spawn_result r;

	NEED_HARNESS();
	ASSERT_EQ(0, run_sample("sample_spinning_guest", &r));
	EXPECT_EQ(KSFT_FAIL, r.status);
	EXPECT_EQ(KSFT_ENVIRONMENT_RUNS,
		  count(r.out, "# RUN sample_spinning_guest\n"));
	EXPECT_NE(NULL, strstr(r.out, "# kiln-harness-flake: "
				      "sample_spinning_guest: vmm thread "));
	EXPECT_NE(NULL, strstr(r.out, "ran its guest non-stop"));
	EXPECT_NE(NULL, strstr(r.out, "on its last run: the failure stands"));
	EXPECT_NE(NULL, strstr(r.out, ": state R, wait "));
	if (_metadata->result->failed)
		TH_LOG("exit %d, output:\n%s", r.status, r.out);
}

TEST_TIMEOUT(sleeping_guest_at_timeout_is_not_blamed, 4 * SAMPLE_TIMEOUT)
{
	struct spawn_result r;

	NEED_HARNESS();
	ASSERT_EQ(0, run_sample("sample_sleeping_guest", &r));
	EXPECT_EQ(KSFT_FAIL, r.status);
	EXPECT_EQ(1, count(r.out, "# RUN sample_sleeping_guest\n"));
	EXPECT_EQ(NULL, strstr(r.out, "kiln-harness-flake"));
	/* Its threads are still shown. */
	EXPECT_NE(NULL, strstr(r.out, "# harness watch: vmm "));
	EXPECT_NE(NULL, strstr(r.out, "not ok 1 sample_sleeping_guest # "
				      "TIMEOUT"));
	/* And the state of its devices, from the vmm itself. */
	EXPECT_NE(NULL, strstr(r.out, "# vmm state: "));
	EXPECT_NE(NULL, strstr(r.out, ": virtio-fs0: status "));
	EXPECT_NE(NULL, strstr(r.out, " busy "));
	EXPECT_NE(NULL, strstr(r.out, ": virtio-fs0 q1: "));
	if (_metadata->result->failed)
		TH_LOG("exit %d, output:\n%s", r.status, r.out);
}

TEST_TIMEOUT(logged_vmm_still_reports, 4 * SAMPLE_TIMEOUT)
{
	struct spawn_result r;

	NEED_HARNESS();
	ASSERT_EQ(0, run_sample("sample_logged_sleeping_guest", &r));
	EXPECT_EQ(KSFT_FAIL, r.status);
	EXPECT_EQ(1, count(r.out, "# RUN sample_logged_sleeping_guest\n"));
	/* Read from the log file's end: the report, not the boot. */
	EXPECT_NE(NULL, strstr(r.out, "# vmm state: "));
	EXPECT_NE(NULL, strstr(r.out, ": virtio-fs0 q1: "));
	if (_metadata->result->failed)
		TH_LOG("exit %d, output:\n%s", r.status, r.out);
}

TEST(kernel_lockup_report_runs_again)
{
	static const struct {
		const char *msg;
		int runs;
	} cases[] = {
		{ "<4>watchdog: BUG: soft lockup - CPU#1 stuck for 99s! "
		  "[kiln-sample:1]\n",
		  KSFT_ENVIRONMENT_RUNS },
		{ "<4>kiln-sample: a warning that names no stall\n", 1 },
	};
	struct spawn_result r;

	NEED_HARNESS();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setenv("KILN_SAMPLE_KMSG", cases[i].msg, 1);
		ASSERT_EQ(0, run_sample("sample_kmsg_then_fail", &r));
		EXPECT_EQ(KSFT_FAIL, r.status) TH_LOG("case %zu", i);
		EXPECT_EQ(cases[i].runs,
			  count(r.out, "# RUN sample_kmsg_then_fail\n"))
		TH_LOG("case %zu, output:\n%s", i, r.out);
		/* The warning is shown either way. */
		EXPECT_NE(NULL, strstr(r.out, "# harness kernel: "))
		TH_LOG("case %zu", i);
	}
	unsetenv("KILN_SAMPLE_KMSG");
}

TEST_HARNESS_MAIN
