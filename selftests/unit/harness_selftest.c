// SPDX-License-Identifier: GPL-2.0
/*
 * harness_selftest - tests of selftests/kselftest.h itself.
 *
 * The behaviour that cannot be checked from inside a passing test (a
 * failing EXPECT, an ASSERT that stops, a crash, a timeout, the exit
 * status and the TAP text) is checked end to end: the "sample_" tests are
 * TEST_MANUAL, so they never run by default, and the real tests re-run this
 * binary with "-t sample_..." and inspect its output and exit status.
 */
#include <fcntl.h>
#include <limits.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/harness_watch.h"

#define SAMPLE_OUT_MAX 8192

struct sample_run {
	int status; /* exit status, or 128 + signal */
	char out[SAMPLE_OUT_MAX];
};

/*
 * Run this binary with @args (and KILN_TEST_TIMEOUT=@timeout_env when
 * given), collecting its stdout and stderr. Returns 0 or -errno.
 */
static int run_self(const char *const args[], const char *timeout_env,
		    struct sample_run *run)
{
	size_t len = 0;
	int pipefd[2], status;
	ssize_t n;
	pid_t pid;

	memset(run, 0, sizeof(*run));
	if (pipe2(pipefd, O_CLOEXEC))
		return -errno;
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return -errno;
	}
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		dup2(pipefd[1], STDERR_FILENO);
		if (timeout_env)
			setenv(KSFT_TIMEOUT_ENV, timeout_env, 1);
		else
			unsetenv(KSFT_TIMEOUT_ENV);
		execv("/proc/self/exe", (char *const *)args);
		_exit(127);
	}
	close(pipefd[1]);
	while ((n = read(pipefd[0], run->out + len,
			 sizeof(run->out) - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += n;
		if (len == sizeof(run->out) - 1)
			break;
	}
	close(pipefd[0]);
	if (waitpid(pid, &status, 0) != pid)
		return -errno;
	run->status = WIFEXITED(status) ? WEXITSTATUS(status) :
					  128 + WTERMSIG(status);
	return 0;
}

/* This binary with "-t @name": see run_self(). */
static int run_sample(const char *name, const char *timeout_env,
		      struct sample_run *run)
{
	const char *const args[] = { "harness_selftest", "-t", name, NULL };

	return run_self(args, timeout_env, run);
}

/* ---- samples: run only through run_sample() ------------------------ */

enum { sample_expect_line = __LINE__ + 5 };
TEST_MANUAL(sample_expect_continues)
{
	int three = 3;

	EXPECT_EQ(three, 4);
	printf("# reached the line after EXPECT\n");
}

enum { sample_assert_line = __LINE__ + 5 };
TEST_MANUAL(sample_assert_stops)
{
	unsigned long zero = 0;

	ASSERT_GT(-1, zero) TH_LOG("extra message %d", 42);
	printf("# reached the line after ASSERT\n");
}

TEST_MANUAL(sample_skip)
{
	SKIP(return, "because %d", 42);
	printf("# reached the line after SKIP\n");
}

TEST_MANUAL(sample_crash)
{
	/* A sanitizer (SAN=1) catches SIGSEGV to report it: not here. */
	signal(SIGSEGV, SIG_DFL);
	raise(SIGSEGV);
}

TEST_MANUAL(sample_exit_nonzero)
{
	exit(3);
}

TEST_MANUAL_TIMEOUT(sample_timeout, 1)
{
	pause();
}

/* No explicit timeout: KILN_TEST_TIMEOUT decides. */
TEST_MANUAL(sample_sleep_3s)
{
	sleep(3);
}

TEST_MANUAL(sample_multiline_log)
{
	TH_LOG("first\nnot ok 9 fake");
}

/*
 * Counts a run in the file KILN_SAMPLE_COUNTER names; true while the
 * runs before it are fewer than KILN_SAMPLE_FAILS: this run is to fail.
 */
static bool sample_counted_run_fails(struct __test_metadata *_metadata)
{
	const char *path = getenv("KILN_SAMPLE_COUNTER");
	int fails = atoi(getenv("KILN_SAMPLE_FAILS") ?: "0");
	int runs = 0;
	FILE *f;

	ASSERT_NE(NULL, path);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", &runs) != 1)
			runs = 0;
		fclose(f);
	}
	f = fopen(path, "w");
	ASSERT_NE(NULL, f);
	fprintf(f, "%d\n", runs + 1);
	fclose(f);
	return runs < fails;
}

/* Blames the environment, then fails while it is to (see above). */
TEST_MANUAL(sample_environment)
{
	bool fail = sample_counted_run_fails(_metadata);

	ksft_blame_environment("the sample's machine misbehaved");
	EXPECT_FALSE(fail);
}

/* Times out while it is to fail, blaming nothing itself. */
TEST_MANUAL_TIMEOUT(sample_watched, 1)
{
	if (sample_counted_run_fails(_metadata))
		sleep(3);
}

/* The environment watch of these samples: KILN_SAMPLE_WATCH=blame. */
static void sample_watch_start(void)
{
}

static bool sample_watch_check(char *why, size_t len)
{
	const char *w = getenv("KILN_SAMPLE_WATCH");

	if (!w || strcmp(w, "blame"))
		return false;
	snprintf(why, len, "the sample watch saw trouble");
	return true;
}

/* KILN_SAMPLE_WATCH=stuck: the timed-out test's processes were stuck. */
static bool sample_watch_timed_out(pid_t pgid, char *why, size_t len)
{
	const char *w = getenv("KILN_SAMPLE_WATCH");

	if (!w || strcmp(w, "stuck") || kill(-pgid, 0))
		return false;
	snprintf(why, len, "the sample watch saw it stuck");
	return true;
}

static const struct ksft_environment_watch sample_watch = {
	.start = sample_watch_start,
	.timed_out = sample_watch_timed_out,
	.check = sample_watch_check,
};

__attribute__((constructor)) static void sample_watch_init(void)
{
	ksft_watch_environment(&sample_watch);
}

TEST_MANUAL(sample_streq)
{
	const char *word = "kiln";

	EXPECT_STREQ("kilns", word);
	EXPECT_STRNE("kiln", word);
	EXPECT_STREQ("two\nlines", word);
}

FIXTURE(sample_fx)
{
	int value;
};

FIXTURE_SETUP(sample_fx)
{
	self->value = 7;
	printf("# setup ran\n");
}

FIXTURE_TEARDOWN(sample_fx)
{
	printf("# teardown ran, value %d\n", self->value);
}

TEST_F_MANUAL(sample_fx, assert_then_teardown)
{
	self->value = 8;
	ASSERT_EQ(0, self->value);
	self->value = 9;
}

FIXTURE(sample_skipfx)
{
	int unused;
};

FIXTURE_SETUP(sample_skipfx)
{
	SKIP(return, "setup cannot run here");
}

FIXTURE_TEARDOWN(sample_skipfx)
{
	printf("# skip teardown ran\n");
}

TEST_F_MANUAL(sample_skipfx, body)
{
	printf("# skipped body ran\n");
}

/* ---- the real tests ------------------------------------------------- */

TEST(comparisons_pass)
{
	int minus_one = -1;
	unsigned int big = UINT_MAX;
	size_t four = 4;
	char c = 'k';
	const char *s = "kiln";

	ASSERT_EQ(4, four);
	ASSERT_NE(minus_one, big); /* by value, not after conversion */
	ASSERT_LT(minus_one, big);
	ASSERT_LE(four, 4);
	ASSERT_GT(big, minus_one);
	ASSERT_GE(0, minus_one);
	ASSERT_EQ('k', c);
	ASSERT_EQ(NULL, (void *)0);
	ASSERT_NE(NULL, s);
	ASSERT_TRUE(four == 4);
	ASSERT_FALSE(four == 5);
	ASSERT_STREQ("kiln", s);
	ASSERT_STRNE("kilns", s);
	EXPECT_EQ(INT64_MIN, (int64_t)INT64_MIN);
	EXPECT_LT(INT64_MIN, UINT64_MAX);
	EXPECT_TRUE(s);
}

TEST(dangling_else_safe)
{
	int taken = 0;

	if (taken)
		ASSERT_EQ(0, 1);
	else
		taken = 1;
	ASSERT_EQ(1, taken);
}

TEST(args_evaluated_once)
{
	int calls = 0;

	ASSERT_EQ(1, ++calls);
	EXPECT_EQ(1, calls);
}

FIXTURE(counter)
{
	int value;
	bool setup_done;
};

FIXTURE_SETUP(counter)
{
	self->value = 41;
	self->setup_done = true;
}

FIXTURE_TEARDOWN(counter)
{
}

TEST_F(counter, setup_runs_first)
{
	ASSERT_TRUE(self->setup_done);
	self->value++;
	ASSERT_EQ(42, self->value);
}

TEST_F(counter, fresh_per_test)
{
	/* The previous test's increment happened in another process. */
	ASSERT_EQ(41, self->value);
}

TEST(expect_continues)
{
	struct sample_run run;
	char diag[128];

	ASSERT_EQ(0, run_sample("sample_expect_continues", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL, strstr(run.out, "TAP version 13\n1..1\n"));
	EXPECT_NE(NULL, strstr(run.out, "# reached the line after EXPECT"));
	EXPECT_NE(NULL,
		  strstr(run.out, "\nnot ok 1 sample_expect_continues\n"));
	snprintf(diag, sizeof(diag),
		 "# selftests/unit/harness_selftest.c:%d: Expected three (3) "
		 "== 4 (4)\n",
		 sample_expect_line);
	EXPECT_NE(NULL, strstr(run.out, diag)) TH_LOG("output:\n%s", run.out);
	EXPECT_NE(NULL, strstr(run.out, "# Totals: pass:0 fail:1 skip:0\n"));
}

TEST(assert_stops)
{
	struct sample_run run;
	char diag[128];

	ASSERT_EQ(0, run_sample("sample_assert_stops", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_EQ(NULL, strstr(run.out, "reached the line after ASSERT"));
	/* By value -1 > 0ul is false, though C's conversion makes it true. */
	snprintf(diag, sizeof(diag),
		 "harness_selftest.c:%d: Expected -1 (-1) > zero (0)\n",
		 sample_assert_line);
	EXPECT_NE(NULL, strstr(run.out, diag)) TH_LOG("output:\n%s", run.out);
	EXPECT_NE(NULL, strstr(run.out, "extra message 42"));
	EXPECT_NE(NULL, strstr(run.out, "\nnot ok 1 sample_assert_stops\n"));
}

TEST(skip_reported)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("sample_skip", NULL, &run));
	EXPECT_EQ(KSFT_SKIP, run.status);
	EXPECT_NE(NULL,
		  strstr(run.out, "\nok 1 sample_skip # SKIP because 42\n"));
	EXPECT_EQ(NULL, strstr(run.out, "reached the line after SKIP"));
	EXPECT_NE(NULL, strstr(run.out, "# Totals: pass:0 fail:0 skip:1\n"));
}

TEST(crash_fails)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("sample_crash", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL, strstr(run.out, "killed by signal 11"));
	EXPECT_NE(NULL, strstr(run.out, "\nnot ok 1 sample_crash\n"));
}

TEST(exit_status_fails)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("sample_exit_nonzero", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL, strstr(run.out, "exited with status 3"));
	EXPECT_NE(NULL, strstr(run.out, "\nnot ok 1 sample_exit_nonzero\n"));
}

TEST(timeout_kills)
{
	struct sample_run run;

	/*
	 * The sample pauses for ever: only the runner's kill ends it, and the
	 * line names the timeout it used (its own 1 s, not the default). A
	 * runner that never kills hangs this test until its own timeout.
	 */
	ASSERT_EQ(0, run_sample("sample_timeout", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL,
		  strstr(run.out,
			 "\nnot ok 1 sample_timeout # TIMEOUT after 1 s\n"))
	TH_LOG("output:\n%s", run.out);
}

TEST(timeout_env_override)
{
	struct sample_run run;

	/* The default (30 s) lets it finish... */
	ASSERT_EQ(0, run_sample("sample_sleep_3s", NULL, &run));
	EXPECT_EQ(KSFT_PASS, run.status);
	EXPECT_NE(NULL, strstr(run.out, "\nok 1 sample_sleep_3s\n"));
	/* ...one second from the environment does not. */
	ASSERT_EQ(0, run_sample("sample_sleep_3s", "1", &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL, strstr(run.out,
			       "not ok 1 sample_sleep_3s # TIMEOUT after 1 s"));
}

TEST(log_lines_stay_comments)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("sample_multiline_log", NULL, &run));
	EXPECT_EQ(KSFT_PASS, run.status);
	EXPECT_NE(NULL, strstr(run.out, ": first\n# not ok 9 fake\n"))
	TH_LOG("output:\n%s", run.out);
	EXPECT_EQ(NULL, strstr(run.out, "\nnot ok"));
}

TEST(string_diagnostics)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("sample_streq", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL,
		  strstr(run.out,
			 "Expected \"kilns\" \"kilns\" == word \"kiln\""));
	EXPECT_NE(NULL, strstr(run.out,
			       "Expected \"kiln\" \"kiln\" != word \"kiln\""));
	/* Escaped, so the diagnostic stays one "# " line. */
	EXPECT_NE(NULL, strstr(run.out, "\"two\\nlines\" == word \"kiln\"\n"))
	TH_LOG("output:\n%s", run.out);
}

TEST(teardown_after_assert)
{
	struct sample_run run;
	char *setup, *teardown;

	ASSERT_EQ(0, run_sample("sample_fx.assert_then_teardown", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	setup = strstr(run.out, "# setup ran\n");
	teardown = strstr(run.out, "# teardown ran, value 8\n");
	ASSERT_NE(NULL, setup) TH_LOG("output:\n%s", run.out);
	ASSERT_NE(NULL, teardown) TH_LOG("output:\n%s", run.out);
	EXPECT_LT(setup, teardown);
	EXPECT_NE(NULL, strstr(run.out,
			       "\nnot ok 1 sample_fx.assert_then_teardown\n"));
}

TEST(skip_in_setup)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("sample_skipfx.body", NULL, &run));
	EXPECT_EQ(KSFT_SKIP, run.status);
	EXPECT_EQ(NULL, strstr(run.out, "skipped body ran"));
	EXPECT_NE(NULL, strstr(run.out, "skip teardown ran"));
	EXPECT_NE(NULL, strstr(run.out, "ok 1 sample_skipfx.body # SKIP setup "
					"cannot run here\n"));
}

TEST(unknown_test_name)
{
	struct sample_run run;

	ASSERT_EQ(0, run_sample("no_such_test", NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL, strstr(run.out, "no test named 'no_such_test'"));
}

/*
 * -x leaves a test out of the plan and the run (how run_all.sh resumes a
 * suite a crashed harness cut off); a name it does not know is refused.
 */
TEST(excluded_tests_left_out)
{
	const char *const args[] = {
		"harness_selftest", "-t", "sample_expect_continues", "-t",
		"sample_skip",	    "-x", "sample_expect_continues", NULL
	};
	const char *const unknown[] = { "harness_selftest", "-x",
					"no_such_test", NULL };
	struct sample_run run;

	ASSERT_EQ(0, run_self(args, NULL, &run));
	EXPECT_EQ(KSFT_SKIP, run.status);
	EXPECT_NE(NULL, strstr(run.out, "\n1..1\n"));
	EXPECT_NE(NULL, strstr(run.out, "\nok 1 sample_skip # SKIP"));
	EXPECT_EQ(NULL, strstr(run.out, "sample_expect_continues"));
	if (_metadata->result->failed)
		TH_LOG("output:\n%s", run.out);

	ASSERT_EQ(0, run_self(unknown, NULL, &run));
	EXPECT_EQ(KSFT_FAIL, run.status);
	EXPECT_NE(NULL, strstr(run.out, "no test named 'no_such_test'"));
}

TEST(manual_tests_not_planned)
{
	struct __test_metadata *t;
	unsigned int manual = 0, last_line = 0;

	/* The list is in declaration order and holds the samples too. */
	for (t = __ksft_tests; t; t = t->next) {
		EXPECT_LE(last_line, t->line);
		last_line = t->line;
		manual += t->manual;
	}
	EXPECT_EQ(13, manual);
}

/* Runs sample @name with its first @fails runs failing. */
static int run_counted_sample(const char *name, int fails,
			      struct sample_run *run, int *runs)
{
	char path[] = "/tmp/kiln-ksft-env-XXXXXX", n[16];
	int fd = mkstemp(path), ret;
	FILE *f;

	if (fd < 0)
		return -errno;
	close(fd);
	snprintf(n, sizeof(n), "%d", fails);
	setenv("KILN_SAMPLE_COUNTER", path, 1);
	setenv("KILN_SAMPLE_FAILS", n, 1);
	ret = run_sample(name, NULL, run);
	*runs = -1;
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", runs) != 1)
			*runs = -1;
		fclose(f);
	}
	unlink(path);
	return ret;
}

/*
 * After ksft_blame_environment() (sample_environment), or when the
 * environment watch says the machine misbehaved (sample_watched, which
 * times out: after it, or while its processes still run, before they are
 * killed, "stuck"): a failure runs again and the last run counts; never
 * more than KSFT_ENVIRONMENT_RUNS runs in all; a pass is left as it is; a
 * quiet watch runs nothing again.
 */
TEST(environment_blamed)
{
	static const struct {
		const char *sample, *watch, *why;
		int fails, runs, status;
		const char *tap;
	} cases[] = {
		{ "sample_environment", "quiet",
		  "the sample's machine misbehaved", 1, 2, KSFT_PASS,
		  "\nok 1 sample_environment\n" },
		{ "sample_environment", "quiet",
		  "the sample's machine misbehaved", 2, 3, KSFT_PASS,
		  "\nok 1 sample_environment\n" },
		{ "sample_environment", "quiet",
		  "the sample's machine misbehaved", 5, 3, KSFT_FAIL,
		  "\nnot ok 1 sample_environment\n" },
		{ "sample_environment", "quiet", NULL, 0, 1, KSFT_PASS,
		  "\nok 1 sample_environment\n" },
		{ "sample_watched", "blame", "the sample watch saw trouble", 1,
		  2, KSFT_PASS, "\nok 1 sample_watched\n" },
		{ "sample_watched", "blame", "the sample watch saw trouble", 5,
		  3, KSFT_FAIL,
		  "\nnot ok 1 sample_watched # TIMEOUT after 1 s\n" },
		{ "sample_watched", "quiet", NULL, 1, 1, KSFT_FAIL,
		  "\nnot ok 1 sample_watched # TIMEOUT after 1 s\n" },
		{ "sample_watched", "stuck", "the sample watch saw it stuck", 1,
		  2, KSFT_PASS, "\nok 1 sample_watched\n" },
	};
	struct sample_run run;
	char again[256], ok[64];
	int runs;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *at;

		snprintf(
			again, sizeof(again),
			"# kiln-harness-flake: %s: %s; running it again (run 2 "
			"of at most %d)\n",
			cases[i].sample, cases[i].why ?: "",
			KSFT_ENVIRONMENT_RUNS);
		snprintf(ok, sizeof(ok), "ok 1 %s", cases[i].sample);
		setenv("KILN_SAMPLE_WATCH", cases[i].watch, 1);
		ASSERT_EQ(0, run_counted_sample(cases[i].sample, cases[i].fails,
						&run, &runs));
		EXPECT_EQ(cases[i].runs, runs) TH_LOG("case %zu", i);
		EXPECT_EQ(cases[i].status, run.status)
		TH_LOG("case %zu, output:\n%s", i, run.out);
		EXPECT_EQ(cases[i].why != NULL, strstr(run.out, again) != NULL)
		TH_LOG("case %zu, output:\n%s", i, run.out);
		at = strstr(run.out, cases[i].tap);
		ASSERT_NE(NULL, at) TH_LOG("case %zu, output:\n%s", i, run.out);
		/* One result line however many runs. */
		EXPECT_EQ(NULL, strstr(at + strlen(cases[i].tap), ok))
		TH_LOG("case %zu", i);
	}
	unsetenv("KILN_SAMPLE_WATCH");
}

/*
 * The watch's reading of a stuck vmm's report (harness_line_settled):
 * only a guest that every device has served in full is blamed. The lines
 * are from real timeouts in the harness (2026-12-01), and edits of them.
 */
TEST(report_settled_lines)
{
	static const char dev[] =
		"vmm: virtio-fs0: status 0xf features 0x130000000 isr 0 (line "
		"raised 27, lowered 27) | gen 1 busy 0; q0 free slots 64";
	static const char q_idle[] =
		"vmm: virtio-fs0 q1: size 128 avail idx 73 flags 0 taken 73 | "
		"used idx 73 flags 0 signalled 73 notified 68 | used_event 66 "
		"(last read 66) avail_event 73";
	static const struct {
		const char *line;
		bool settled;
		int vcpus;
		bool unread;
	} cases[] = {
		{ dev, true, 0 },
		{ q_idle, true, 0, true },
		{ "vmm: virtio-fs0 q0: size 128 avail idx 0 flags 0 taken 0 | "
		  "used idx 0 flags 0 signalled 0 (none yet) notified 0 | "
		  "used_event 0 (last read 0) avail_event 0",
		  true, 0 },
		{ "vmm: virtio-fs0 q3: not ready", true, 0 },
		{ "vmm: vcpu0: halted, rip 0xffffffff813b0b03 rsp "
		  "0xffffffff81a03ed0 rflags 0x246 cr3 0x8b4000; text on the "
		  "stack: none",
		  true, 1 },
		/* A vCPU still running the guest. */
		{ "vmm: vcpu1: runnable, rip 0xffffffffc062adcc rsp "
		  "0xffffce934141ba30 rflags 0x10246 cr3 0x102362000; text on "
		  "the stack: none",
		  false, 1 },
		/* Four buffers made available and not taken: a lost kick. */
		{ "vmm: virtio-fs0 q1: size 128 avail idx 1801 flags 0 taken "
		  "1797 | used idx 1797 flags 0 signalled 1797 notified 1796 | "
		  "used_event 1797 (last read 1794) avail_event 1797",
		  false, 0 },
		/* The line is up and the driver never acknowledged it. */
		{ "vmm: virtio-fs0: status 0xf features 0x130000000 isr 0x1 "
		  "(line raised 44, lowered 43) | gen 1 busy 0",
		  false, 0 },
		/* A request still in the device's hands. */
		{ "vmm: virtio-fs0: status 0xf features 0x130000000 isr 0 (line "
		  "raised 3, lowered 3) | gen 1 busy 1",
		  false, 0 },
		/* Used past used_event, and the driver never told. */
		{ "vmm: virtio-fs0 q1: size 128 avail idx 73 flags 0 taken 73 | "
		  "used idx 73 flags 0 signalled 73 notified 68 | used_event 70 "
		  "(last read 66) avail_event 73",
		  false, 0 },
		/* Taken and not used yet. */
		{ "vmm: virtio-fs0 q1: size 128 avail idx 73 flags 0 taken 73 | "
		  "used idx 72 flags 0 signalled 72 notified 72 | used_event 72 "
		  "(last read 72) avail_event 73",
		  false, 0 },
		/* Across the 16-bit wrap: notified 3 is past used_event 65534. */
		{ "vmm: virtio-fs0 q1: size 128 avail idx 5 flags 0 taken 5 | "
		  "used idx 5 flags 0 signalled 5 notified 3 | used_event 65534 "
		  "(last read 65534) avail_event 5",
		  true, 0, true },
		/* A guest that read all it was given: settled, nothing unread. */
		{ "vmm: virtio-fs0 q1: size 128 avail idx 8 flags 0 taken 8 | "
		  "used idx 8 flags 0 signalled 8 notified 8 | used_event 8 "
		  "(last read 8) avail_event 8",
		  true, 0 },
		{ "vmm: something else entirely", false, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool unread = false, rx_idle = false;
		int vcpus = 0;

		EXPECT_EQ(cases[i].settled,
			  harness_line_settled(cases[i].line, &vcpus, &unread,
					       &rx_idle))
		TH_LOG("case %zu: %s", i, cases[i].line);
		EXPECT_EQ(cases[i].vcpus, vcpus) TH_LOG("case %zu", i);
		if (cases[i].settled) {
			EXPECT_EQ(cases[i].unread, unread)
			TH_LOG("case %zu", i);
		}
	}
}

/*
 * virtio-vsock's receive queue: buffers the guest posted and the device
 * had no use for are settled when the device owes nothing, and read in
 * order (the device line first). From ci19 (2026-12-02): a 64 MiB cp
 * into the guest stopped with the guest told of used entries up to 8484
 * and its used_event still at 8409, every vCPU halted.
 */
TEST(report_vsock_receive_queue)
{
	static const char dev_idle[] =
		"vmm: virtio-vsock0: status 0xf features 0x130000000 isr 0 "
		"(line raised 1103, lowered 1103) | replies 0; conns 1 owing 0; "
		"established 1073741832:1024 pend 0 known to-guest 29709025 "
		"from-guest 40";
	static const char dev_owing[] =
		"vmm: virtio-vsock0: status 0xf features 0x130000000 isr 0 "
		"(line raised 1103, lowered 1103) | replies 0; conns 1 owing 1; "
		"established 1073741832:1024 pend 0 known to-guest 29709025 "
		"from-guest 40";
	static const char rxq[] =
		"vmm: virtio-vsock0 q0: size 256 avail idx 8539 flags 0 taken "
		"8484 | used idx 8484 flags 0 signalled 8484 notified 8419 | "
		"used_event 8409 (last read 8409) avail_event 0";
	static const char txq_untaken[] =
		"vmm: virtio-vsock0 q1: size 256 avail idx 610 flags 0 taken "
		"608 | used idx 608 flags 0 signalled 608 notified 608 | "
		"used_event 608 (last read 607) avail_event 608";
	static const char evq[] =
		"vmm: virtio-vsock0 q2: size 256 avail idx 8 flags 0 taken 0 | "
		"used idx 0 flags 0 signalled 0 (none yet) notified 0 | "
		"used_event 0 (last read 0) avail_event 0";
	bool unread = false, rx_idle = false;
	int vcpus = 0;

	EXPECT_TRUE(harness_line_settled(dev_idle, &vcpus, &unread, &rx_idle));
	EXPECT_TRUE(rx_idle);
	EXPECT_TRUE(harness_line_settled(rxq, &vcpus, &unread, &rx_idle));
	EXPECT_TRUE(unread);
	/* Its event queue: buffers for events that never came. */
	EXPECT_TRUE(harness_line_settled(evq, &vcpus, &unread, &rx_idle));
	/* Not its transmit queue: buffers there not taken are a lost kick. */
	EXPECT_FALSE(
		harness_line_settled(txq_untaken, &vcpus, &unread, &rx_idle));
	/* A connection with something to send: the device's move. */
	unread = false;
	EXPECT_FALSE(
		harness_line_settled(dev_owing, &vcpus, &unread, &rx_idle));
	EXPECT_FALSE(rx_idle);
	EXPECT_FALSE(harness_line_settled(rxq, &vcpus, &unread, &rx_idle));
}

TEST_HARNESS_MAIN
