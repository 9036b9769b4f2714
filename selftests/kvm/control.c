// SPDX-License-Identifier: GPL-2.0
/*
 * The control socket end to end on KVM: `vmm start` boots the test image
 * with the guest agent, build/vmmctl drives it (exec, timeouts, files,
 * concurrency, facts) and vm.shutdown powers the guest off cleanly.
 * KILN_VMMCTL names the client (build/vmmctl).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

struct vmctl {
	char dir[64];
	char sock[128];
	char pidfile[128];
	char image[300];
	char vmmctl[256];
	pid_t vmm; /* foreground start; 0 when detached */
};

static int ctl_run(struct vmctl *c, const char *const args[],
		   struct spawn_result *r)
{
	const char *argv[32];
	int i = 0;

	argv[i++] = c->vmmctl;
	for (int j = 0; args[j] && i < 31; j++)
		argv[i++] = args[j];
	argv[i] = NULL;
	return spawn__run(argv, NULL, r);
}

#define CTL(c, r, ...)                                                         \
	do {                                                                   \
		ASSERT_EQ(0, ctl_run(c, ARGS(__VA_ARGS__), r));                \
		TH_LOG("vmmctl: exit %d, out %.200s, err %.200s", (r)->status, \
		       (r)->out, (r)->err);                                    \
	} while (0)

static void start_argv(struct vmctl *c, const struct guest *g, bool detach,
		       const char *argv[32])
{
	int i = 0;

	argv[i++] = g->vmm;
	argv[i++] = "start";
	argv[i++] = "--kernel";
	argv[i++] = g->vmlinux;
	argv[i++] = "--initrd";
	argv[i++] = g->initrd;
	argv[i++] = "--rootfs";
	argv[i++] = c->image;
	argv[i++] = "--cpus";
	argv[i++] = "2";
	/* Room in the ephemeral layer for the 64 MiB file test. */
	argv[i++] = "--max-dirty-bytes";
	argv[i++] = "256M";
	argv[i++] = "--control-socket";
	argv[i++] = c->sock;
	if (detach) {
		argv[i++] = "--detach";
		argv[i++] = "--pid-file";
		argv[i++] = c->pidfile;
	}
	argv[i] = NULL;
}

/* Boots; true once the agent answers vm.status with "agent": "ready". */
static bool vm_start(struct __test_metadata *_metadata, struct vmctl *c,
		     bool detach)
{
	const char *argv[32];
	struct spawn_result r;
	struct guest g;

	guest_paths(&g);
	snprintf(c->dir, sizeof(c->dir), "/tmp/kiln-ctl-XXXXXX");
	if (!mkdtemp(c->dir))
		return false;
	snprintf(c->sock, sizeof(c->sock), "%s/ctl.sock", c->dir);
	snprintf(c->pidfile, sizeof(c->pidfile), "%s/vm.pid", c->dir);
	snprintf(c->image, sizeof(c->image), "%s/kiln-test.json", g.images);
	snprintf(c->vmmctl, sizeof(c->vmmctl), "%s",
		 env_or("KILN_VMMCTL", "build/vmmctl"));
	start_argv(c, &g, detach, argv);
	c->vmm = 0;
	if (detach) {
		if (spawn__run(argv, NULL, &r))
			return false;
		TH_LOG("start --detach: exit %d, err %.300s", r.status, r.err);
		return r.status == 0;
	}
	c->vmm = fork();
	if (c->vmm == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 0);
		dup2(null, 1);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 1200; i++) {
		if (!ctl_run(c, ARGS("status", c->sock), &r) && !r.status &&
		    strstr(r.out, "\"agent\": \"ready\""))
			return true;
		if (waitpid(c->vmm, NULL, WNOHANG) == c->vmm) {
			c->vmm = 0;
			return false;
		}
		usleep(100000);
	}
	return false;
}

/* Running: not gone, and not a zombie nobody has reaped yet. */
static bool alive(pid_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;
	bool ret = false;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f)) {
		p = strrchr(buf, ')');
		ret = p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
	}
	fclose(f);
	return ret;
}

static void vm_cleanup(struct vmctl *c)
{
	char cmd[128];

	if (c->vmm > 0) {
		kill(c->vmm, SIGKILL);
		waitpid(c->vmm, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", c->dir);
}

TEST_TIMEOUT(exec_files_and_shutdown, BOOT_TIMEOUT)
{
	char src[200], back[200], cmd[600];
	struct spawn_result r;
	struct vmctl c;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	ASSERT_TRUE(vm_start(_metadata, &c, false));

	/* Separate streams, the status, the timeout. */
	CTL(&c, &r, "exec", c.sock, "--", "sh", "-c",
	    "echo out; echo err >&2; exit 3");
	EXPECT_EQ(3, r.status);
	EXPECT_STREQ("out\n", r.out);
	EXPECT_STREQ("err\n", r.err);
	CTL(&c, &r, "exec", "--timeout-ms", "1000", c.sock, "--", "sh", "-c",
	    "sleep 30 & sleep 30");
	EXPECT_EQ(124, r.status);
	CTL(&c, &r, "exec", c.sock, "--", "sh", "-c",
	    "ps -o comm | grep -c sleep");
	EXPECT_STREQ("0\n", r.out);
	CTL(&c, &r, "exec", c.sock, "--", "/no/such/command");
	EXPECT_EQ(127, r.status);

	/*
	 * A 64 MiB file both ways, byte for byte (streamed in chunks), on
	 * the guest's tmpfs: the test image has 32 MiB of disk.
	 */
	snprintf(src, sizeof(src), "%s/src.bin", c.dir);
	snprintf(back, sizeof(back), "%s/back.bin", c.dir);
	snprintf(cmd, sizeof(cmd), "head -c 67108864 /dev/urandom > '%s'", src);
	ASSERT_EQ(0, system(cmd));
	CTL(&c, &r, "cp", c.sock, src, ":/tmp/blob");
	ASSERT_EQ(0, r.status);
	CTL(&c, &r, "exec", c.sock, "--", "sh", "-c", "wc -c < /tmp/blob");
	EXPECT_STREQ("67108864\n", r.out);
	CTL(&c, &r, "cp", c.sock, ":/tmp/blob", back);
	ASSERT_EQ(0, r.status);
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", src, back);
	EXPECT_EQ(0, system(cmd));

	/* fs: listing, a missing path's errno. */
	CTL(&c, &r, "fs", "ls", c.sock, "/tmp");
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "blob"));
	CTL(&c, &r, "fs", "stat", c.sock, "/no/such/file");
	EXPECT_NE(0, r.status);
	EXPECT_NE(NULL, strstr(r.err, "ENOENT"));

	/* Facts from the guest. */
	CTL(&c, &r, "facts", c.sock);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "\"guest\""));

	/* A clean power off: the VM exits 0. */
	CTL(&c, &r, "shutdown", c.sock);
	EXPECT_EQ(0, r.status);
	EXPECT_EQ(0, wait_exit(c.vmm, 60));
	c.vmm = 0;
	vm_cleanup(&c);
}

TEST_TIMEOUT(concurrent_execs, BOOT_TIMEOUT)
{
	enum { N = 20 };
	pid_t pids[N];
	struct spawn_result r;
	struct vmctl c;
	int ok = 0;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	ASSERT_TRUE(vm_start(_metadata, &c, false));
	for (int i = 0; i < N; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			char code[8];

			snprintf(code, sizeof(code), "exit %d", i);
			execl(c.vmmctl, c.vmmctl, "exec", c.sock, "--", "sh",
			      "-c", code, (char *)NULL);
			_exit(126);
		}
	}
	for (int i = 0; i < N; i++)
		ok += wait_exit(pids[i], 120) == i;
	EXPECT_EQ(N, ok);
	CTL(&c, &r, "shutdown", c.sock);
	EXPECT_EQ(0, wait_exit(c.vmm, 60));
	c.vmm = 0;
	vm_cleanup(&c);
}

TEST_TIMEOUT(detached_start, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct vmctl c;
	char buf[32] = "";
	pid_t pid = 0;
	FILE *f;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	ASSERT_TRUE(vm_start(_metadata, &c, true));
	f = fopen(c.pidfile, "r");
	ASSERT_NE(NULL, f);
	if (fgets(buf, sizeof(buf), f))
		pid = atoi(buf);
	fclose(f);
	ASSERT_GT(pid, 0);
	EXPECT_TRUE(alive(pid));
	CTL(&c, &r, "exec", c.sock, "--", "cat", "/etc/os-release");
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "Kiln test"));
	CTL(&c, &r, "shutdown", c.sock);
	for (int i = 0; i < 600 && alive(pid); i++)
		usleep(100000);
	EXPECT_FALSE(alive(pid));
	vm_cleanup(&c);
}

TEST_HARNESS_MAIN
