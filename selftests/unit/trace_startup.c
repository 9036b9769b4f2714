// SPDX-License-Identifier: GPL-2.0
/*
 * The start-up trace (vmm/trace-startup.c) on a fake clock: the first mark
 * wins, phases are monotonic and complete, the JSON of vm.metrics and the
 * --trace-startup lines, and the option itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "vmm/config.h"
#include "vmm/trace-startup.h"

/* A clock the test sets: one per test process (each TEST forks). */
static uint64_t fake_now = 1000000;

static uint64_t fake_clock(void)
{
	return fake_now;
}

/* Phase at start + us, on the fake clock. */
static void mark_at(struct startup_trace *t, enum trace_phase p, uint64_t us)
{
	fake_now = 1000000 + us * 1000;
	startup_trace__mark(t, p);
}

/* A boot with every phase, 100 µs apart (output and agent included). */
static void full_boot(struct startup_trace *t)
{
	fake_now = 1000000;
	startup_trace__init(t, fake_clock);
	for (int p = TRACE_OPTIONS; p < TRACE_NR; p++)
		mark_at(t, p, (uint64_t)(p - TRACE_START) * 100);
}

TEST(init_marks_the_origin)
{
	struct startup_trace t;

	fake_now = 5000;
	startup_trace__init(&t, fake_clock);
	EXPECT_EQ(0, startup_trace__us(&t, TRACE_START));
	EXPECT_EQ(-1, startup_trace__us(&t, TRACE_OPTIONS));
	EXPECT_EQ(-1, startup_trace__us(&t, TRACE_NONE));
	EXPECT_EQ(-1, startup_trace__us(&t, TRACE_NR));
	EXPECT_EQ(-1, t.fd);
}

TEST(first_mark_wins)
{
	struct startup_trace t;

	fake_now = 1000000;
	startup_trace__init(&t, fake_clock);
	mark_at(&t, TRACE_FIRST_RUN, 700);
	/* A second vCPU's first KVM_RUN, later: ignored. */
	mark_at(&t, TRACE_FIRST_RUN, 900);
	EXPECT_EQ(700, startup_trace__us(&t, TRACE_FIRST_RUN));
	/* Out of range and NULL: nothing, no crash. */
	startup_trace__mark(&t, TRACE_NONE);
	startup_trace__mark(&t, TRACE_NR);
	startup_trace__mark(&t, (enum trace_phase)99);
	startup_trace__mark(NULL, TRACE_EXIT);
	EXPECT_EQ(-1, startup_trace__us(&t, TRACE_EXIT));
}

TEST(complete_and_monotonic)
{
	char err[128] = "";
	struct startup_trace t;

	full_boot(&t);
	EXPECT_EQ(0, startup_trace__check(&t, TRACE_EXIT, err, sizeof(err)));
	EXPECT_STREQ("", err);
	for (int p = TRACE_START + 1; p < TRACE_NR; p++)
		EXPECT_LE(startup_trace__us(&t, p - 1),
			  startup_trace__us(&t, p));
}

TEST(a_missing_phase_is_named)
{
	char err[128] = "";
	struct startup_trace t;

	fake_now = 1000000;
	startup_trace__init(&t, fake_clock);
	mark_at(&t, TRACE_OPTIONS, 10);
	mark_at(&t, TRACE_KVM, 20);
	/* devices skipped */
	mark_at(&t, TRACE_LOADED, 40);
	EXPECT_EQ(0, startup_trace__check(&t, TRACE_KVM, err, sizeof(err)));
	EXPECT_EQ(-EINVAL,
		  startup_trace__check(&t, TRACE_LOADED, err, sizeof(err)));
	EXPECT_STREQ("devices not reached", err);
	EXPECT_EQ(-EINVAL,
		  startup_trace__check(&t, TRACE_NONE, err, sizeof(err)));
}

TEST(a_phase_out_of_order_is_named)
{
	char err[128] = "";
	struct startup_trace t;

	fake_now = 1000000;
	startup_trace__init(&t, fake_clock);
	mark_at(&t, TRACE_OPTIONS, 10);
	mark_at(&t, TRACE_DEVICES, 30);
	mark_at(&t, TRACE_KVM, 40); /* after devices: wrong */
	EXPECT_EQ(-EINVAL,
		  startup_trace__check(&t, TRACE_DEVICES, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "devices"));
	EXPECT_NE(NULL, strstr(err, "before kvm"));
}

TEST(guest_events_are_optional_but_not_before_the_first_run)
{
	char err[128] = "";
	struct startup_trace t;

	fake_now = 1000000;
	startup_trace__init(&t, fake_clock);
	for (int p = TRACE_OPTIONS; p <= TRACE_FIRST_RUN; p++)
		mark_at(&t, p, (uint64_t)p * 10);
	/* No output, no agent: still complete. */
	mark_at(&t, TRACE_POWER_OFF, 500);
	EXPECT_EQ(0,
		  startup_trace__check(&t, TRACE_POWER_OFF, err, sizeof(err)));
	/* Output stamped before the first KVM_RUN cannot be. */
	mark_at(&t, TRACE_FIRST_OUTPUT, 1);
	EXPECT_EQ(-EINVAL,
		  startup_trace__check(&t, TRACE_POWER_OFF, err, sizeof(err)));
	EXPECT_STREQ("firstOutput before firstRun", err);
}

TEST(metrics_json_has_the_startup_phases_only)
{
	struct startup_trace t;
	json_t *o;

	full_boot(&t);
	o = startup_trace__json(&t);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(TRACE_AGENT_READY - TRACE_START + 1,
		  (int)json_object_size(o));
	EXPECT_EQ(0, json_integer_value(json_object_get(o, "start")));
	EXPECT_EQ(700, json_integer_value(json_object_get(o, "firstRun")));
	EXPECT_EQ(900, json_integer_value(json_object_get(o, "agentReady")));
	EXPECT_EQ(NULL, json_object_get(o, "powerOff"));
	EXPECT_EQ(NULL, json_object_get(o, "exit"));
	json_decref(o);

	/* Early on: only what is reached so far. */
	fake_now = 1000000;
	startup_trace__init(&t, fake_clock);
	mark_at(&t, TRACE_OPTIONS, 3);
	o = startup_trace__json(&t);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(2, (int)json_object_size(o));
	EXPECT_EQ(3, json_integer_value(json_object_get(o, "options")));
	json_decref(o);
}

TEST(file_has_one_json_line_per_phase_in_order)
{
	char path[] = "/tmp/kiln-trace-XXXXXX", buf[4096], *line, *save;
	struct startup_trace t;
	json_error_t e;
	int fd, n = 0;
	ssize_t len;

	fd = mkstemp(path);
	ASSERT_LE(0, fd);
	close(fd);
	full_boot(&t);
	ASSERT_EQ(0, startup_trace__open(&t, path));
	ASSERT_EQ(0, startup_trace__write(&t, t.fd));
	startup_trace__exit(&t);
	EXPECT_EQ(-1, t.fd);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	unlink(path);
	ASSERT_LT(0, len);
	buf[len] = '\0';
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), n++) {
		json_t *o = json_loads(line, 0, &e);
		int p = TRACE_START + n;

		ASSERT_NE(NULL, o);
		EXPECT_STREQ(startup_trace__name(p),
			     json_string_value(json_object_get(o, "phase")));
		EXPECT_EQ((p - TRACE_START) * 100,
			  json_integer_value(json_object_get(o, "us")));
		EXPECT_EQ(1000000 + (p - TRACE_START) * 100000,
			  json_integer_value(json_object_get(o, "monoNs")));
		json_decref(o);
	}
	EXPECT_EQ(TRACE_NR - TRACE_START, n);
}

TEST(a_bad_file_path_is_an_error)
{
	struct startup_trace t;

	startup_trace__init(&t, NULL);
	EXPECT_EQ(-ENOENT,
		  startup_trace__open(&t, "/nonexistent-dir/kiln/trace"));
	EXPECT_EQ(-1, t.fd);
	/* The real clock: the origin is reached, never 0. */
	EXPECT_NE(0U, atomic_load(&t.at[TRACE_START]));
}

TEST(the_option_sets_the_path_and_refuses_an_empty_one)
{
	static const char *const head[] = { "run", "--kernel", "/k", NULL };
	char err[CONFIG_ERR_LEN] = "";
	struct vm_config c;

	config__init(&c);
	ASSERT_EQ(0, options_argv__parse(&c, head,
					 ARGS("--trace-startup", "/tmp/t.jsonl",
					      "--", "true")));
	ASSERT_NE(NULL, c.trace_startup_path);
	EXPECT_STREQ("/tmp/t.jsonl", c.trace_startup_path);
	config__free(&c);

	config__init(&c);
	ASSERT_EQ(0,
		  options_argv__parse(
			  &c, head, ARGS("--trace-startup", "", "--", "true")));
	EXPECT_EQ(-EINVAL, config__validate(&c, err, sizeof(err)));
	EXPECT_STREQ("trace-startup: empty path", err);
	config__free(&c);
}

TEST_HARNESS_MAIN
