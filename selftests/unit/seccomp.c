// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's seccomp filter (vmm/seccomp.c) from a child process: the
 * clocks work as raw system calls (what the vDSO falls back to on a host
 * whose clocksource it cannot read, such as the nested harness, where
 * wolfSSL's gettimeofday() once ended a VM), a call the filter does
 * not list ends the process with status 125, the console log rotates
 * under it by its directory's descriptor, which no other rename may use,
 * and a snapshot is written under it (with `snapshot`) while every other
 * open still fails with EACCES.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "vmm/console-log.h"
#include "vmm/seccomp.h"
#include "vmm/snapshot-file.h"

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

/* The console log of console_log_child, opened before its filter. */
static char log_path[64];

/* Under a filter that knows the log: write past the cap, rotate. */
static int console_log_child(void)
{
	struct seccomp_needs needs = { .console_log = true };
	struct console_log *l;
	char line[64], err[256];
	unsigned long long i;

	if (console_log__open(&l, log_path, CONSOLE_LOG_MIN_MAX_BYTES, 1, err,
			      sizeof(err)))
		return 3;
	needs.console_log_dirfd = console_log__dirfd(l);
	if (seccomp__install(&needs))
		return 2;
	memset(line, 'z', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\n';
	for (i = 0; i < 3 * CONSOLE_LOG_MIN_MAX_BYTES / sizeof(line); i++)
		console_log__write(l, line, sizeof(line));
	console_log__destroy(l);
	/* Any other directory stays closed to renames. */
	renameat(AT_FDCWD, log_path, AT_FDCWD, "/tmp/kiln-not-allowed");
	return 4;
}

TEST(console_log_rotates_under_the_filter_and_only_there)
{
	char dir[] = "/tmp/kiln-seccomp-XXXXXX", rotated[80];
	struct stat st;
	int status;
	pid_t pid;

	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(log_path, sizeof(log_path), "%s/console.log", dir);
	snprintf(rotated, sizeof(rotated), "%s.1", log_path);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(console_log_child());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	/* The rotations passed; the stray rename was the blocked call. */
	EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status));
	ASSERT_EQ(0, stat(rotated, &st));
	EXPECT_EQ(CONSOLE_LOG_MIN_MAX_BYTES, st.st_size);
	ASSERT_EQ(0, stat(log_path, &st));
	EXPECT_EQ(CONSOLE_LOG_MIN_MAX_BYTES, st.st_size);
	unlink(rotated);
	unlink(log_path);
	rmdir(dir);
}

/* The snapshot directory of snapshot_child. */
static char snap_path[96];

/* A whole snapshot, the way vmm/snapshot.c writes one, under the filter. */
static int snapshot_child(bool allowed)
{
	struct seccomp_needs needs = { .snapshot = allowed };
	static uint8_t mem[4 * SNAP_PAGE_SIZE];
	json_t *fields = json_object();
	struct snap_dir d;
	char err[256];
	int fd;

	mem[SNAP_PAGE_SIZE + 1] = 7;
	if (!fields || seccomp__install(&needs))
		return 2;
	if (snap_dir__create(&d, snap_path, err, sizeof(err)) ||
	    snap_dir__write_part(&d, "vm.state", "vm", "state", 5, err,
				 sizeof(err)) ||
	    snap_dir__write_memory(&d, "memory.raw", mem, sizeof(mem), err,
				   sizeof(err)) ||
	    snap_dir__finish(&d, fields, err, sizeof(err))) {
		fprintf(stderr, "# the writer under the filter: %s\n", err);
		return 3;
	}
	snap_dir__close(&d);
	/* Reading a file, or writing one that is there, is still refused. */
	fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
	if (fd >= 0 || errno != EACCES)
		return 4;
	fd = open(snap_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0 || errno != EACCES)
		return 5;
	return 0;
}

static int snapshot_allowed(void)
{
	return snapshot_child(true);
}

static int snapshot_not_allowed(void)
{
	return snapshot_child(false);
}

TEST(snapshot_written_under_the_filter_and_only_with_it)
{
	char dir[] = "/tmp/kiln-seccomp-XXXXXX", err[256], cmd[128];
	json_t *m = NULL;
	int status;
	pid_t pid;

	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(snap_path, sizeof(snap_path), "%s/snap", dir);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(snapshot_allowed());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_EQ(0, snap_dir__verify(snap_path, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(m);

	/* Without it, making the directory is a blocked call. */
	snprintf(snap_path, sizeof(snap_path), "%s/snap2", dir);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(snapshot_not_allowed());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		(void)0;
}

TEST_HARNESS_MAIN
