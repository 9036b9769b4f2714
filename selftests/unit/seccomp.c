// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's seccomp filter (vmm/seccomp.c) from a child process: the
 * clocks work as raw system calls (what the vDSO falls back to on a host
 * whose clocksource it cannot read, such as the nested harness, where
 * wolfSSL's gettimeofday() once ended a VM), and a call the filter does
 * not list ends the process with status 125.
 */
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "vmm/seccomp.h"

#define FILTERED_EXIT 125 /* vmm/seccomp.c: a blocked call */

/* A child under the filter running fn; its wait status. */
static int filtered(int (*fn)(void))
{
	const struct seccomp_needs needs = { .net = true,
					     .proxy = true,
					     .dns = true };
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		if (seccomp__install(&needs))
			_exit(2);
		_exit(fn());
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

static int raw_clocks(void)
{
	struct timespec ts;
	struct timeval tv;
	time_t t;

	if (syscall(SYS_gettimeofday, &tv, NULL))
		return 3;
	if (syscall(SYS_time, &t) < 0)
		return 4;
	if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts))
		return 5;
	if (syscall(SYS_clock_getres, CLOCK_MONOTONIC, &ts))
		return 6;
	return 0;
}

static int unlisted_call(void)
{
	/* ptrace is no part of the vmm's work. */
	syscall(SYS_ptrace, 0, 0, NULL, NULL);
	return 0;
}

TEST(clocks_as_raw_system_calls_pass)
{
	int status = filtered(raw_clocks);

	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(0, WEXITSTATUS(status));
}

TEST(an_unlisted_call_ends_the_process)
{
	int status = filtered(unlisted_call);

	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status));
}

TEST_HARNESS_MAIN
