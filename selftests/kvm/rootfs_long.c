// SPDX-License-Identifier: GPL-2.0
/*
 * Issue 33's crash case, in make test-long: a cow root over the directory
 * store (tools/kiln-store-dir) on the small busybox test image
 * (build/images/kiln-test.json), and the vmm killed with SIGKILL 20 times
 * while the guest appends numbered lines to a file and fsyncs it, saying
 * "acked N" on its stdout after each fsync returned. After every kill:
 *
 *  - the base with the store's durable blocks written over it (the files
 *    DIR/blocks/<16 hex digits>, block N at N * 4096) is composed into one
 *    image, its journal replayed as a mount would (e2fsck -E journal_only),
 *    and e2fsck -fn finds it clean;
 *  - every line any boot so far acknowledged is in that image's /root/log,
 *    and every line there is whole.
 *
 * The store's unflushed blocks (in its memory, not its directory) are
 * left out on purpose: only what a flush made durable counts. In the
 * one-CPU harness a boot, its kill and the checks take about 22 s: the
 * case 437 s (2026-12-06), 3 to 17 acknowledged lines a boot.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <string.h>
#include <time.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define KILLS	   20
#define SEQ_STRIDE 100000 /* boot k numbers its lines from k * SEQ_STRIDE */
#define LINE_MAX_  256

struct crash {
	char dir[64];
	char rootfs[300]; /* the test image's descriptor */
	char base[300];	  /* its raw file */
	char store[128], sock[128], store_log[128], vmm_log[128];
	char image[128]; /* base + the store's blocks */
	pid_t store_pid;
	long first[KILLS], last[KILLS]; /* acknowledged, per boot; last < first:
					 * none */
};

static void shell(struct __test_metadata *_metadata, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A shell command that must exit 0; its output goes to the TAP log. */
static void shell(struct __test_metadata *_metadata, const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	ASSERT_EQ(0, rc) TH_LOG("%s: status %d", cmd, rc);
}

/* A descriptor's field (the builders' python3 reads them too). */
static void descriptor_path(struct __test_metadata *_metadata, const char *desc,
			    char *out, size_t len)
{
	char cmd[512];
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "python3 -c 'import json,sys; "
		 "print(json.load(open(sys.argv[1]))[\"path\"])' '%s'",
		 desc);
	p = popen(cmd, "r");
	ASSERT_NE(NULL, p);
	ASSERT_NE(NULL, fgets(out, len, p));
	pclose(p);
	out[strcspn(out, "\n")] = 0;
}

/* argv in the background, sig to it when the test's process ends. */
static pid_t spawn_tied(const char *const argv[], int out_fd, const char *log,
			int sig)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		int err = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		prctl(PR_SET_PDEATHSIG, sig);
		dup2(null, 0);
		dup2(out_fd >= 0 ? out_fd : err, 1);
		dup2(err, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static bool crash_init(struct __test_metadata *_metadata, struct crash *c)
{
	const char *const argv[] = { "/usr/bin/python3", "tools/kiln-store-dir",
				     c->store, c->sock, NULL };
	struct guest g;
	int i;

	guest_paths(&g);
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
	test_tmp_name(c->dir, sizeof(c->dir), "kiln-crash-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(c->dir));
	snprintf(c->rootfs, sizeof(c->rootfs), "%s/kiln-test.json", g.images);
	ASSERT_EQ(0, access(c->rootfs, R_OK))
	TH_LOG("%s missing: run make guest", c->rootfs);
	descriptor_path(_metadata, c->rootfs, c->base, sizeof(c->base));
	snprintf(c->store, sizeof(c->store), "%s/store", c->dir);
	snprintf(c->sock, sizeof(c->sock), "%s/store.sock", c->dir);
	snprintf(c->store_log, sizeof(c->store_log), "%s/store.log", c->dir);
	snprintf(c->vmm_log, sizeof(c->vmm_log), "%s/vmm.log", c->dir);
	snprintf(c->image, sizeof(c->image), "%s/composed.img", c->dir);
	c->store_pid = spawn_tied(argv, -1, c->store_log, SIGTERM);
	if (c->store_pid <= 0)
		return false;
	for (i = 0; i < 300 && access(c->sock, F_OK); i++)
		usleep(100000);
	if (access(c->sock, F_OK))
		vmm_log_show(_metadata, c->store_log);
	EXPECT_EQ(0, access(c->sock, F_OK));
	return !access(c->sock, F_OK);
}

/* The vmm in the background: stdout to out_fd, stderr to the log. */
static pid_t vmm_boot(struct crash *c, long start, int out_fd)
{
	char mode[160], script[512];
	const char *argv[64];
	struct guest g;

	snprintf(mode, sizeof(mode), "cow:%s", c->sock);
	/* The churn file keeps unflushed blocks in flight at the kill. */
	snprintf(script, sizeof(script),
		 "n=%ld; while :; do echo \"seq $n\" >>/root/log && "
		 "sync /root/log && echo \"acked $n\"; "
		 "dd if=/dev/urandom of=/root/churn bs=4k count=32 "
		 "conv=notrunc 2>/dev/null; n=$((n + 1)); done",
		 start);
	guest_paths(&g);
	boot_argv(&g,
		  &(struct boot_spec){ .opts = ARGS("--rootfs", c->rootfs,
						    "--rootfs-mode", mode),
				       .cmd = ARGS("sh", "-c", script) },
		  argv);
	return spawn_tied(argv, out_fd, c->vmm_log, SIGKILL);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The guest's stdout, line by line: each "acked N" raises *last (they
 * come in order). Reads until *last reaches want or, want < 0, until the
 * end of the stream; false at the deadline.
 */
static bool read_acks(int fd, char *buf, size_t *len, long want, long *last,
		      int64_t deadline)
{
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char *nl;
		ssize_t n;
		int64_t left;

		while ((nl = memchr(buf, '\n', *len))) {
			long v;

			*nl = 0;
			if (sscanf(buf, "acked %ld", &v) == 1 && v > *last)
				*last = v;
			*len -= nl + 1 - buf;
			memmove(buf, nl + 1, *len);
			if (want >= 0 && *last >= want)
				return true;
		}
		if (*len >= LINE_MAX_ - 1)
			*len = 0; /* a line too long is nothing of ours */
		left = deadline - mono_ms();
		if (left <= 0)
			return false;
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			return false;
		if (!(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		n = read(fd, buf + *len, LINE_MAX_ - 1 - *len);
		if (n == 0)
			return want < 0;
		if (n < 0 && errno != EINTR)
			return false;
		if (n > 0)
			*len += n;
	}
}

/*
 * Boot k: waits for a few acknowledged lines, then a little more, and
 * kills the vmm with SIGKILL; what it acknowledged lands in c->last[k].
 * A boot refused because the store still held the killed VM's claim
 * (its connection's end not yet seen) is tried again.
 */
static void boot_and_kill(struct __test_metadata *_metadata, struct crash *c,
			  int k)
{
	long start = (long)(k + 1) * SEQ_STRIDE;
	long want = start + 2 + k % 6;
	char buf[LINE_MAX_];
	int fds[2], try;
	size_t len = 0;
	pid_t pid;
	bool ok;

	c->first[k] = start;
	c->last[k] = start - 1;
	for (try = 0; try < 5; try++) {
		ASSERT_EQ(0, pipe(fds));
		pid = vmm_boot(c, start, fds[1]);
		close(fds[1]);
		ASSERT_LT(0, pid);
		len = 0;
		ok = read_acks(fds[0], buf, &len, want, &c->last[k],
			       mono_ms() + BOOT_TIMEOUT * 1000);
		if (ok || c->last[k] >= start)
			break;
		/* Ended (or stalled) before a single fsync returned. */
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(fds[0]);
		{
			char *log = log_text(c->vmm_log);
			bool busy = log && strstr(log, "claim");

			free(log);
			if (!busy)
				break;
		}
		usleep(500000);
	}
	if (c->last[k] < start) {
		vmm_log_show(_metadata, c->vmm_log);
		ASSERT_LE(start, c->last[k])
		TH_LOG("boot %d: no fsync acknowledged", k);
	}
	/* Somewhere in the next fsync, or the churn after it. */
	usleep((useconds_t)((k * 53) % 400) * 1000);
	ASSERT_EQ(0, kill(pid, SIGKILL));
	/* What it said before it died was acknowledged all the same. */
	read_acks(fds[0], buf, &len, -1, &c->last[k], mono_ms() + 10000);
	close(fds[0]);
	EXPECT_EQ(128 + SIGKILL, wait_exit(pid, 30));
}

/* Base + the store's durable blocks, journal replayed, e2fsck -fn clean. */
static void check_image(struct __test_metadata *_metadata, struct crash *c,
			int k)
{
	long found[KILLS] = { 0 }, seen = 0, v;
	char cmd[600], line[LINE_MAX_];
	FILE *p;
	int j;

	shell(_metadata,
	      "python3 -c 'import os,sys,shutil\n"
	      "base, blocks, out = sys.argv[1:]\n"
	      "shutil.copyfile(base, out)\n"
	      "with open(out, \"r+b\") as f:\n"
	      "    for n in os.listdir(blocks):\n"
	      "        if len(n) == 16:\n"
	      "            f.seek(int(n, 16) * 4096)\n"
	      "            f.write(open(os.path.join(blocks, n), \"rb\").read())"
	      "' '%s' '%s/blocks' '%s'",
	      c->base, c->store, c->image);
	/* As a mount would: e2fsck's status 0 nothing to do, 1 replayed. */
	shell(_metadata,
	      "e2fsck -y -E journal_only '%s' >%s/e2fsck.log 2>&1; "
	      "[ $? -le 1 ] || { cat %s/e2fsck.log; exit 1; }",
	      c->image, c->dir, c->dir);
	shell(_metadata,
	      "e2fsck -fn '%s' >%s/e2fsck.log 2>&1 || "
	      "{ echo 'after kill %d:'; cat %s/e2fsck.log; exit 1; }",
	      c->image, c->dir, k, c->dir);

	/* Every line whole and in order, each acknowledged one there. */
	snprintf(cmd, sizeof(cmd),
		 "debugfs -R 'cat /root/log' '%s' 2>/dev/null", c->image);
	p = popen(cmd, "r");
	ASSERT_NE(NULL, p);
	while (fgets(line, sizeof(line), p)) {
		char end = 0;

		if (sscanf(line, "seq %ld%c", &v, &end) != 2 || end != '\n') {
			pclose(p);
			ASSERT_TRUE(false)
			TH_LOG("after kill %d, a broken line in /root/log: "
			       "\"%.60s\"",
			       k, line);
		}
		EXPECT_LT(seen, v)
		TH_LOG("after kill %d: seq %ld after %ld", k, v, seen);
		seen = v;
		j = (int)(v / SEQ_STRIDE) - 1;
		if (j >= 0 && j <= k && v >= c->first[j] && v <= c->last[j])
			found[j]++;
	}
	pclose(p);
	for (j = 0; j <= k; j++)
		EXPECT_EQ(c->last[j] - c->first[j] + 1, found[j])
	TH_LOG("after kill %d: boot %d acknowledged seq %ld to %ld, %ld of "
	       "them in the log",
	       k, j, c->first[j], c->last[j], found[j]);
}

TEST_TIMEOUT(cow_root_survives_20_kills_of_the_vmm, BOOT_TIMEOUT * 6)
{
	struct crash c = { .dir = "" };
	int k;

	if (!crash_init(_metadata, &c))
		return;
	for (k = 0; k < KILLS; k++) {
		boot_and_kill(_metadata, &c, k);
		check_image(_metadata, &c, k);
		TH_LOG("kill %d: seq %ld to %ld acknowledged, image clean", k,
		       c.first[k], c.last[k]);
	}
	kill(c.store_pid, SIGTERM);
	EXPECT_EQ(0, wait_exit(c.store_pid, 30));
	shell(_metadata, "rm -rf '%s'", c.dir);
}

TEST_HARNESS_MAIN
