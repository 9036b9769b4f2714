// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's seccomp filters (vmm/seccomp.c), one per thread type, from
 * child processes: the clocks work as raw system calls for every type
 * (what the vDSO falls back to on a host whose clocksource it cannot
 * read, such as the nested harness, where wolfSSL's gettimeofday() once
 * ended a VM), a call a filter does not list ends the process with
 * status 125, no thread makes a new io_uring, a device loop's thread
 * cannot open a file while the thread that started it can (per-thread
 * filters), a ring made before the filter refuses OPENAT and SOCKET
 * (io_uring cannot get around the filter: issue 15), and the console
 * log rotates under the vCPU filter by its directory's descriptor, which
 * no other rename may use, and with a control socket a snapshot is
 * written under the API thread's filter, and no other's, while every
 * other open still fails with EACCES.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/evloop.h"
#include "lib/thread-filter.h"
#include "selftests/kselftest.h"
#include "snapshot/baseline.h"
#include "snapshot/file.h"
#include "vmm/console-log.h"
#include "vmm/seccomp.h"

#define FILTERED_EXIT 125 /* vmm/seccomp.c: a blocked call */

static const char *const type_names[SECCOMP_NR_THREADS] = {
	[SECCOMP_THREAD_MAIN] = "main",	    [SECCOMP_THREAD_VCPU] = "vcpu",
	[SECCOMP_THREAD_DEVICE] = "device", [SECCOMP_THREAD_FS] = "fs",
	[SECCOMP_THREAD_API] = "api",	    [SECCOMP_THREAD_EGRESS] = "egress",
	[SECCOMP_THREAD_NETNS] = "netns",
};

/* A child under type's filter (a VM with everything) running fn. */
static int filtered(enum seccomp_thread type, int (*fn)(void))
{
	const struct seccomp_needs needs = { .net = true, .fs_bind = true };
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		if (seccomp__install(&needs, type))
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

/* Every thread may use the rings there are, none may make one. */
static int new_ring(void)
{
	struct io_uring_params p = { 0 };

	syscall(__NR_io_uring_setup, 4, &p);
	return 0;
}

/*
 * exit(), not _exit(): its handlers run under the filter, as the vmm's
 * do when main returns. Under SAN=1, LeakSanitizer's check is one of
 * them, and it once ended every filtered vmm by SIGSYS (status 125).
 */
static int exits(void)
{
	exit(0);
}

TEST(exit_runs_its_handlers_under_every_filter)
{
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++) {
		int status = filtered(t, exits);

		ASSERT_TRUE(WIFEXITED(status))
		TH_LOG("%s: status %#x", type_names[t], status);
		EXPECT_EQ(0, WEXITSTATUS(status)) TH_LOG("%s", type_names[t]);
	}
}

TEST(clocks_as_raw_system_calls_pass)
{
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++) {
		int status = filtered(t, raw_clocks);

		ASSERT_TRUE(WIFEXITED(status))
		TH_LOG("%s: status %#x", type_names[t], status);
		EXPECT_EQ(0, WEXITSTATUS(status)) TH_LOG("%s", type_names[t]);
	}
}

TEST(an_unlisted_call_ends_the_process)
{
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++) {
		int status = filtered(t, unlisted_call);

		ASSERT_TRUE(WIFEXITED(status))
		TH_LOG("%s: status %#x", type_names[t], status);
		EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status))
		TH_LOG("%s", type_names[t]);
	}
}

TEST(no_thread_makes_a_new_ring)
{
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++) {
		int status = filtered(t, new_ring);

		ASSERT_TRUE(WIFEXITED(status))
		TH_LOG("%s: status %#x", type_names[t], status);
		EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status))
		TH_LOG("%s", type_names[t]);
	}
}

/* ---- per-thread filters --------------------------------------------- */

static const char secret[] = "/etc/passwd"; /* readable, and a host file */

/* On a thread under the device-loop filter: 0 if open() failed EACCES. */
static void *device_open(void *arg)
{
	(void)arg;
	if (open(secret, O_RDONLY | O_CLOEXEC) >= 0)
		return (void *)1;
	return (void *)(intptr_t)(errno == EACCES ? 0 : 2);
}

/* The same thread type, by openat2 (the fs threads' call): a trap. */
static void *device_openat2(void *arg)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC };

	(void)arg;
	syscall(SYS_openat2, AT_FDCWD, secret, &how, sizeof(how));
	return (void *)3;
}

static int per_thread_child(void)
{
	/* A VM with a bind mount: the virtio-fs threads may openat2. */
	const struct seccomp_needs needs = { .fs_bind = true };
	struct seccomp_filters *f = NULL;
	const struct sock_fprog *device;
	pthread_t t;
	void *res;
	int fd;

	if (seccomp__build(&f, &needs))
		return 10;
	device = seccomp__filter(f, SECCOMP_THREAD_DEVICE);
	if (thread_filter__spawn(&t, device, device_open, NULL) ||
	    pthread_join(t, &res))
		return 11;
	if (res)
		return 12 + (int)(intptr_t)res; /* 13: opened; 14: errno */
	/* The filter is that thread's alone (no TSYNC): this one opens. */
	fd = open(secret, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 15;
	close(fd);
	if (thread_filter__spawn(&t, device, device_openat2, NULL) ||
	    pthread_join(t, &res))
		return 16;
	return 17; /* openat2 returned: not trapped */
}

/*
 * A device loop's thread cannot open a host file, by open() (EACCES) or
 * by openat2() (the trap), even in a VM whose virtio-fs threads may; the
 * thread that started it, not under its filter, still can.
 */
TEST(a_device_loop_thread_cannot_open_a_file)
{
	int status;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(per_thread_child());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status));
}

static void *never_runs(void *arg)
{
	return arg;
}

/*
 * Only the thread types a VM runs are compiled (vmm/vm-run.c): those
 * have programs; a type left out has an empty one, which the kernel
 * refuses, so a thread of it cannot start, filtered or not.
 */
TEST(a_type_not_built_fails_closed)
{
	const struct seccomp_needs needs = {
		.threads =
			1U << SECCOMP_THREAD_MAIN | 1U << SECCOMP_THREAD_VCPU,
	};
	const struct seccomp_needs all = { 0 };
	struct seccomp_filters *f = NULL, *g = NULL;
	pthread_t t;

	ASSERT_EQ(0, seccomp__build(&f, &needs));
	EXPECT_LT(0, seccomp__filter(f, SECCOMP_THREAD_MAIN)->len);
	EXPECT_LT(0, seccomp__filter(f, SECCOMP_THREAD_VCPU)->len);
	for (unsigned int type = SECCOMP_THREAD_DEVICE;
	     type < SECCOMP_NR_THREADS; type++)
		EXPECT_EQ(0, seccomp__filter(f, type)->len);
	EXPECT_EQ(-EINVAL, thread_filter__spawn(
				   &t, seccomp__filter(f, SECCOMP_THREAD_FS),
				   never_runs, NULL));
	/* 0: every type, as before. */
	ASSERT_EQ(0, seccomp__build(&g, &all));
	for (unsigned int type = 0; type < SECCOMP_NR_THREADS; type++)
		EXPECT_LT(0, seccomp__filter(g, type)->len);
	seccomp__destroy(f);
	seccomp__destroy(g);
}

/* ---- the rings ------------------------------------------------------ */

/* One submission on l's ring, its completion's result. */
static int ring_result(struct evloop *l, struct io_uring_sqe *sqe)
{
	struct io_uring *ring = evloop__ring(l);
	struct io_uring_cqe *cqe;
	int res;

	(void)sqe;
	if (io_uring_submit(ring) != 1 || io_uring_wait_cqe(ring, &cqe))
		return INT_MIN;
	res = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return res;
}

/*
 * Under the device-loop filter, with a ring made before it (as every
 * ring is) that declared no opcode: the forbidden syscall and the ring's
 * OPENAT and SOCKET all fail.
 */
static int ring_child(void)
{
	const struct evloop_params p = { .sq_entries = 4 };
	const struct seccomp_needs needs = { 0 };
	struct io_uring_sqe *sqe;
	struct evloop l;
	int res;

	evloop__init(&l, "test");
	if (evloop__open(&l, &p))
		return 10;
	if (seccomp__install(&needs, SECCOMP_THREAD_DEVICE))
		return 11;
	if (open(secret, O_RDONLY | O_CLOEXEC) >= 0 || errno != EACCES)
		return 12;
	sqe = evloop__get_sqe(&l);
	io_uring_prep_openat(sqe, AT_FDCWD, secret, O_RDONLY | O_CLOEXEC, 0);
	res = ring_result(&l, sqe);
	if (res != -EACCES)
		return res >= 0 ? 13 : 14; /* 13: the ring opened it */
	sqe = evloop__get_sqe(&l);
	io_uring_prep_socket(sqe, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0, 0);
	res = ring_result(&l, sqe);
	if (res != -EACCES)
		return res >= 0 ? 15 : 16; /* 15: an AF_INET socket */
	evloop__exit(&l);
	return 0;
}

TEST(a_restricted_ring_refuses_openat_and_socket_under_the_filter)
{
	int status;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(ring_child());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(0, WEXITSTATUS(status));
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
	/* The vCPU thread writes the UART's bytes, so rotates the log. */
	if (seccomp__install(&needs, SECCOMP_THREAD_VCPU))
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

/* ---- vm.snapshot ------------------------------------------------------ */

/* The snapshot directory of the children below. */
static char snap_path[96];

/* vm.snapshot's reads of the KVM state (vmm/snapshot.c, vcpu__save). */
static const unsigned long kvm_state_ioctls[] = {
	KVM_GET_MP_STATE,    KVM_GET_REGS,	KVM_GET_SREGS,
	KVM_GET_FPU,	     KVM_GET_XSAVE,	KVM_GET_XSAVE2,
	KVM_GET_XCRS,	     KVM_GET_MSRS,	KVM_GET_LAPIC,
	KVM_GET_VCPU_EVENTS, KVM_GET_DEBUGREGS, KVM_GET_CPUID2,
	KVM_GET_TSC_KHZ,     KVM_GET_IRQCHIP,	KVM_GET_PIT2,
	KVM_GET_CLOCK,
};

/*
 * A whole snapshot, the way vmm/snapshot.c writes one, under type's
 * filter: the KVM reads first (on /dev/null, which answers ENOTTY once
 * the filter let the call through), then the files.
 */
static int snapshot_child(enum seccomp_thread type, bool allowed)
{
	struct seccomp_needs needs = { .snapshot = allowed };
	static uint8_t mem[4 * SNAP_PAGE_SIZE];
	json_t *fields = json_object();
	struct snap_dir d;
	char err[256];
	int fd, null, layer;

	mem[SNAP_PAGE_SIZE + 1] = 7;
	null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* An ephemeral root's layer: a memfd the disk made before the filter. */
	layer = memfd_create("kiln-ephemeral", MFD_CLOEXEC);
	if (layer < 0 || ftruncate(layer, 16 * SNAP_PAGE_SIZE) ||
	    pwrite(layer, "layer", 5, 5 * SNAP_PAGE_SIZE) != 5)
		return 2;
	if (!fields || null < 0 || seccomp__install(&needs, type))
		return 2;
	for (unsigned int i = 0; i < ARRAY_SIZE(kvm_state_ioctls); i++)
		if (ioctl(null, kvm_state_ioctls[i], NULL) >= 0 ||
		    errno != ENOTTY)
			return 6;
	if (snap_dir__create(&d, snap_path, err, sizeof(err)) ||
	    snap_dir__write_part(&d, "vm.state", "vm", "state", 5, err,
				 sizeof(err)) ||
	    snap_dir__write_memory(&d, "memory.raw", mem, sizeof(mem), err,
				   sizeof(err)) ||
	    snap_dir__write_sparse(&d, SNAP_LAYER_FILE, SNAP_LAYER_KIND, layer,
				   16 * SNAP_PAGE_SIZE, err, sizeof(err)) ||
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
	return snapshot_child(SECCOMP_THREAD_API, true);
}

static int snapshot_not_allowed(void)
{
	return snapshot_child(SECCOMP_THREAD_API, false);
}

TEST(snapshot_written_under_the_api_filter_and_only_with_it)
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

	/* Without a control socket, the first KVM read is a blocked call. */
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

/*
 * Any other thread type of a VM that may snapshot: a new file's openat
 * still fails with EACCES (the snapshot's openat rules are the API
 * thread's alone), and a KVM read of the VM's state is a blocked call.
 */
static int snapshot_elsewhere(void)
{
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (openat(AT_FDCWD, snap_path, SNAP_OPEN_NEW, SNAP_FILE_MODE) >= 0)
		return 6;
	if (errno != EACCES)
		return 7;
	if (openat(AT_FDCWD, "/tmp", SNAP_OPEN_DIR) >= 0 || errno != EACCES)
		return 8;
	ioctl(null, KVM_GET_CLOCK, NULL);
	return 9;
}

TEST(snapshot_calls_are_the_api_threads_alone)
{
	const struct seccomp_needs needs = { .snapshot = true };
	char dir[] = "/tmp/kiln-seccomp-XXXXXX";
	struct stat st;

	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(snap_path, sizeof(snap_path), "%s/file", dir);
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++) {
		int status;
		pid_t pid;

		if (t == SECCOMP_THREAD_API)
			continue;
		pid = fork();
		ASSERT_LE(0, pid);
		if (pid == 0) {
			if (seccomp__install(&needs, t))
				_exit(2);
			_exit(snapshot_elsewhere());
		}
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFEXITED(status))
		TH_LOG("%s: status %#x", type_names[t], status);
		EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status))
		TH_LOG("%s", type_names[t]);
		EXPECT_NE(0, stat(snap_path, &st)) TH_LOG("%s", type_names[t]);
	}
	rmdir(dir);
}

/*
 * A baseline's capture as vmm/baseline-vm.c makes it: the temporary
 * directory made and locked before the filter (the build step), then,
 * under the API filter, the snapshot written into it and renamed into
 * place (RENAME_NOREPLACE). how: 0, that; 1, the same without
 * needs.baseline (the rename is a blocked call); 2, a plain rename
 * (flags 0) with it (blocked too).
 */
static char cache_path[96];
#define BASELINE_TEST_KEY \
	"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static int baseline_child(int how)
{
	struct seccomp_needs needs = { .snapshot = true, .baseline = how != 1 };
	static uint8_t mem[4 * SNAP_PAGE_SIZE];
	char tmp[BASELINE_TMP_NAME_LEN], path[256], err[256];
	json_t *fields = json_object();
	struct snap_dir d;
	int cache, fd;

	mem[1] = 7;
	if (!fields ||
	    baseline__open_cache(cache_path, &cache, err, sizeof(err)) ||
	    baseline__make_tmp(cache, BASELINE_TEST_KEY, &fd, tmp, err,
			       sizeof(err)))
		return 2;
	snprintf(path, sizeof(path), "%s/%s", cache_path, tmp);
	if (seccomp__install(&needs, SECCOMP_THREAD_API))
		return 2;
	if (snap_dir__create(&d, path, err, sizeof(err)) ||
	    snap_dir__write_memory(&d, "memory.raw", mem, sizeof(mem), err,
				   sizeof(err)) ||
	    snap_dir__finish(&d, fields, err, sizeof(err))) {
		fprintf(stderr, "# the writer under the filter: %s\n", err);
		return 3;
	}
	snap_dir__close(&d);
	if (how == 2) {
		renameat(cache, tmp, cache, BASELINE_TEST_KEY);
		return 4;
	}
	if (baseline__publish(cache, tmp, BASELINE_TEST_KEY, err,
			      sizeof(err))) {
		fprintf(stderr, "# publishing under the filter: %s\n", err);
		return 5;
	}
	close(fd);
	return 0;
}

TEST(a_baseline_is_published_under_the_api_filter_and_only_with_it)
{
	static const int want[] = { 0, FILTERED_EXIT, FILTERED_EXIT };
	char dir[] = "/tmp/kiln-seccomp-XXXXXX", err[256], cmd[256];
	json_t *m = NULL;

	ASSERT_NE(NULL, mkdtemp(dir));
	for (int how = 0; how < 3; how++) {
		int status;
		pid_t pid;

		snprintf(cache_path, sizeof(cache_path), "%s/cache%d", dir,
			 how);
		pid = fork();
		ASSERT_LE(0, pid);
		if (pid == 0)
			_exit(baseline_child(how));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
		EXPECT_EQ(want[how], WEXITSTATUS(status))
		TH_LOG("case %d", how);
		snprintf(cmd, sizeof(cmd), "%s/%s", cache_path,
			 BASELINE_TEST_KEY);
		if (!how) {
			EXPECT_EQ(0,
				  snap_dir__verify(cmd, &m, err, sizeof(err)))
			TH_LOG("%s", err);
			json_decref(m);
		} else {
			EXPECT_NE(0, access(cmd, F_OK)) TH_LOG("case %d", how);
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		(void)0;
}

/* ---- no process, no program, no file outside (issue 34) --------------- */

static int forks(void)
{
	pid_t pid = fork(); /* clone without CLONE_THREAD: the trap */

	if (pid == 0)
		_exit(0);
	return 3;
}

static int execs(void)
{
	static char sh[] = "/bin/sh", c[] = "-c", cmd[] = "exit 0";
	char *const argv[] = { sh, c, cmd, NULL };

	execve(sh, argv, NULL);
	return 3;
}

static void *nothing(void *arg)
{
	return arg;
}

/* pthread_create: clone3 says ENOSYS, glibc falls back to clone. */
static int makes_a_thread(void)
{
	pthread_t t;
	void *res = (void *)1;

	if (pthread_create(&t, NULL, nothing, NULL) || pthread_join(t, &res))
		return 3;
	return res ? 4 : 0;
}

/* Every thread type: threads yes, fork and execve end the process. */
TEST(no_thread_forks_or_execs_but_every_one_makes_threads)
{
	for (unsigned int t = 0; t < SECCOMP_NR_THREADS; t++) {
		int status = filtered(t, forks);

		ASSERT_TRUE(WIFEXITED(status))
		TH_LOG("%s: status %#x", type_names[t], status);
		EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status))
		TH_LOG("%s: fork", type_names[t]);
		status = filtered(t, execs);
		ASSERT_TRUE(WIFEXITED(status));
		EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status))
		TH_LOG("%s: execve", type_names[t]);
		status = filtered(t, makes_a_thread);
		ASSERT_TRUE(WIFEXITED(status));
		EXPECT_EQ(0, WEXITSTATUS(status))
		TH_LOG("%s: a thread", type_names[t]);
	}
}

static char fs_dir[64];

/*
 * The virtio-fs threads' filter: openat2 beneath a descriptor only,
 * never from AT_FDCWD (with any upper half), and no device node.
 */
static int fs_child(void)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC };
	const unsigned long cwd_zero_ext = (unsigned int)AT_FDCWD;
	int dfd = open(fs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	const struct seccomp_needs needs = { .fs_bind = true };
	int fd;

	if (dfd < 0 || seccomp__install(&needs, SECCOMP_THREAD_FS))
		return 2;
	fd = syscall(SYS_openat2, AT_FDCWD, "/etc/shadow", &how, sizeof(how));
	if (fd >= 0 || errno != EACCES)
		return 3;
	fd = syscall(SYS_openat2, cwd_zero_ext, "/etc/passwd", &how,
		     sizeof(how));
	if (fd >= 0 || errno != EACCES)
		return 4;
	fd = syscall(SYS_openat2, dfd, ".", &how, sizeof(how));
	if (fd < 0)
		return 5;
	close(fd);
	if (mknodat(dfd, "blk", S_IFBLK | 0600, makedev(8, 0)) == 0 ||
	    errno != EPERM)
		return 6;
	if (mknodat(dfd, "chr", S_IFCHR | 0600, makedev(1, 3)) == 0 ||
	    errno != EPERM)
		return 7;
	if (mknodat(dfd, "fifo", S_IFIFO | 0600, 0))
		return 8;
	return 0;
}

TEST(fs_thread_opens_beneath_only_and_makes_no_device)
{
	struct stat st;
	int status, dfd;
	pid_t pid;

	snprintf(fs_dir, sizeof(fs_dir), "/tmp/kiln-seccomp-fs-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(fs_dir));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(fs_child());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(0, WEXITSTATUS(status));
	dfd = open(fs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ASSERT_LE(0, dfd);
	EXPECT_NE(0, fstatat(dfd, "blk", &st, AT_SYMLINK_NOFOLLOW));
	EXPECT_NE(0, fstatat(dfd, "chr", &st, AT_SYMLINK_NOFOLLOW));
	EXPECT_EQ(0, fstatat(dfd, "fifo", &st, AT_SYMLINK_NOFOLLOW));
	EXPECT_TRUE(S_ISFIFO(st.st_mode));
	unlinkat(dfd, "fifo", 0);
	close(dfd);
	rmdir(fs_dir);
}

static char api_file[96];

/*
 * The API thread (snapshots on): a new file by an absolute path, the
 * snapshot's own flags from AT_FDCWD, ends the process; any other
 * flags there are EACCES.
 */
static int api_child(void)
{
	const struct seccomp_needs needs = { .snapshot = true };

	if (seccomp__install(&needs, SECCOMP_THREAD_API))
		return 2;
	if (open(api_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) >= 0 ||
	    errno != EACCES)
		return 3;
	openat(AT_FDCWD, api_file, SNAP_OPEN_NEW, 0644);
	return 4;
}

/*
 * The cron.d shape (an absolute path, a new file) refused on the API
 * thread: in a temporary directory here, so that a regression makes no
 * file where cron would run it.
 */
TEST(api_thread_makes_no_file_by_an_absolute_path)
{
	char dir[64] = "/tmp/kiln-seccomp-api-XXXXXX";
	int status;
	pid_t pid;

	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(api_file, sizeof(api_file), "%s/x", dir);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(api_child());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status));
	EXPECT_NE(0, access(api_file, F_OK));
	unlink(api_file);
	rmdir(dir);
}

/*
 * The proxy's netns thread: no netlink (EPERM), no file but read-only
 * ones (wolfSSL's /dev/urandom), its UDP reply sockets.
 */
static int netns_calls(void)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);

	if (fd >= 0 || errno != EPERM)
		return 3;
	fd = open("/dev/urandom", O_RDONLY);
	if (fd < 0)
		return 4;
	close(fd);
	fd = open("/tmp/kiln-netns-x", O_WRONLY | O_CREAT, 0600);
	if (fd >= 0 || errno != EACCES)
		return 5;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 6;
	close(fd);
	return 0;
}

static int netns_stream(void)
{
	socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	return 3;
}

TEST(netns_thread_has_no_netlink_and_no_stream_socket)
{
	int status = filtered(SECCOMP_THREAD_NETNS, netns_calls);

	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(0, WEXITSTATUS(status));
	status = filtered(SECCOMP_THREAD_NETNS, netns_stream);
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status %#x", status);
	EXPECT_EQ(FILTERED_EXIT, WEXITSTATUS(status));
}

TEST_HARNESS_MAIN
