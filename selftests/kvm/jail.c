// SPDX-License-Identifier: GPL-2.0
/*
 * The jail on KVM (vmm/jail.h, Documentation/security.md "The jail"):
 * `vmm start --jail DIR --uid 65534 --gid 65534 --detach` boots the test
 * kernel and initramfs with the guest agent; from the host, the test then
 * reads what the jailed vmm is: its ids, capabilities, no_new_privs and
 * limits (/proc/PID/status, /proc/PID/limits), its namespaces against
 * the test's own, and what its root holds (/proc/PID/root): the VM's
 * files, not a marker file the test made outside it. The guest still
 * runs a command. Root only (the jail needs it); KILN_VMMCTL names the
 * client (build/vmmctl).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/kvm/test_host.h"
#include "selftests/kvm/vmm_util.h"

#define NOBODY	      "65534"
#define NOBODY_ID     65534U
#define AGENT_TIMEOUT "45000" /* ms; the nested harness is slow */
#define JAIL_NOFILE   "4096"
#define JAIL_NPROC    "4096"
#define JAIL_AS	      "17179869184" /* 16 GiB: guest RAM and threads */

struct jailed {
	char dir[64];  /* the test's scratch */
	char root[96]; /* --jail */
	char run[96];  /* the control socket's directory */
	char sock[128];
	char pidfile[128];
	char log[128];
	char marker[128]; /* outside the jail */
	char vmmctl[256];
	pid_t pid; /* the jailed vmm, host's view */
};

static bool can_jail(struct __test_metadata *_metadata)
{
	if (geteuid())
		SKIP(return false, "the jail needs root");
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
	return true;
}

/* The value of "Key:" in /proc/PID/status (tabs and all); "" if none. */
static void status_field(pid_t pid, const char *key, char *out, size_t len)
{
	char path[64], line[256];
	size_t n = strlen(key);
	FILE *f;

	out[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			snprintf(out, len, "%s",
				 line + n + 1 + strspn(line + n + 1, " \t"));
			out[strcspn(out, "\n")] = 0;
			break;
		}
	fclose(f);
}

/* The soft limit's column of "Max NAME" in /proc/PID/limits. */
static void limit_soft(pid_t pid, const char *name, char *out, size_t len)
{
	char path[64], line[256];
	FILE *f;

	out[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, strlen(name)) &&
		    sscanf(line + 26, "%31s", out) == 1) /* "Limit" column */
			break;
	fclose(f);
}

static bool same_ns(pid_t pid, const char *ns)
{
	char a[64], b[64], la[64] = "", lb[64] = "";

	snprintf(a, sizeof(a), "/proc/%d/ns/%s", (int)pid, ns);
	snprintf(b, sizeof(b), "/proc/self/ns/%s", ns);
	if (readlink(a, la, sizeof(la) - 1) < 0 ||
	    readlink(b, lb, sizeof(lb) - 1) < 0)
		return true; /* unreadable: counts as not shown different */
	return !strcmp(la, lb);
}

/* path as the jailed vmm sees it: /proc/PID/root/path. */
static bool jail_sees(pid_t pid, const char *path)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "/proc/%d/root%s", (int)pid, path);
	return !access(p, F_OK);
}

/* Jailed, with --net auto under net_policy (a file) unless NULL. */
/*
 * Whether the vmm under test is a SAN=1 build (its --version says so),
 * which refuses --rlimit-as: the test process itself is built without
 * the sanitizers, so KILN_ASAN here says nothing of the vmm.
 */
static bool vmm_asan(const char *vmm)
{
	struct spawn_result r;

	return !spawn__run(ARGS(vmm, "--version"), NULL, &r) &&
	       strstr(r.out, "sanitizers: AddressSanitizer");
}

static bool start_jailed(struct __test_metadata *_metadata, struct jailed *j,
			 const char *net_policy)
{
	struct spawn_result r;
	struct guest g;
	char buf[32] = "";
	bool san;
	FILE *f;
	int fd;

	guest_paths(&g);
	san = vmm_asan(g.vmm);
	test_tmp_name(j->dir, sizeof(j->dir), "kiln-jail-XXXXXX");
	if (!mkdtemp(j->dir))
		return false;
	snprintf(j->root, sizeof(j->root), "%s/root", j->dir);
	snprintf(j->run, sizeof(j->run), "%s/run", j->dir);
	snprintf(j->sock, sizeof(j->sock), "%s/ctl.sock", j->run);
	snprintf(j->pidfile, sizeof(j->pidfile), "%s/vm.pid", j->dir);
	snprintf(j->log, sizeof(j->log), "%s/vmm.log", j->dir);
	snprintf(j->marker, sizeof(j->marker), "%s/outside-marker", j->dir);
	snprintf(j->vmmctl, sizeof(j->vmmctl), "%s",
		 env_or("KILN_VMMCTL", "build/vmmctl"));
	if (mkdir(j->root, 0755) || mkdir(j->run, 0755) ||
	    chown(j->run, NOBODY_ID, NOBODY_ID)) /* its console log rotates */
		return false;
	fd = open(j->marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return false;
	close(fd);
	{
		const char *argv[40] = {
			g.vmm,
			"start",
			"--kernel",
			g.vmlinux,
			"--initrd",
			g.initrd,
			"--control-socket",
			j->sock,
			"--agent-timeout-ms",
			AGENT_TIMEOUT,
			"--detach",
			"--pid-file",
			j->pidfile,
			"--log",
			j->log,
			"--jail",
			j->root,
			"--uid",
			NOBODY,
			"--gid",
			NOBODY,
			"--rlimit-nofile",
			JAIL_NOFILE,
			"--rlimit-nproc",
			JAIL_NPROC,
			/* SAN=1: refused (AddressSanitizer's shadow). */
			san ? NULL : "--rlimit-as",
			JAIL_AS,
		};
		int n = san ? 25 : 27;

		if (net_policy) {
			argv[n++] = "--net";
			argv[n++] = "auto";
			argv[n++] = "--net-policy";
			argv[n++] = net_policy;
		}
		argv[n] = NULL;
		if (spawn__run(argv, NULL, &r))
			return false;
	}
	TH_LOG("start --jail --detach: exit %d, err %.300s", r.status, r.err);
	check_harness_flake(&r);
	if (r.status) {
		vmm_log_show(_metadata, j->log);
		return false;
	}
	f = fopen(j->pidfile, "r");
	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f))
		j->pid = atoi(buf);
	fclose(f);
	return j->pid > 0;
}

static void stop_jailed(struct jailed *j)
{
	char cmd[128];

	if (j->pid > 0)
		kill(j->pid, SIGKILL);
	for (int i = 0; i < 100 && j->pid > 0 && !kill(j->pid, 0); i++)
		usleep(100000);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", j->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", j->dir);
}

TEST_TIMEOUT(jailed_vmm_sees_only_its_jail, BOOT_TIMEOUT)
{
	static const char *const namespaces[] = { "mnt", "pid", "ipc", "uts" };
	struct jailed j = { .pid = 0 };
	struct spawn_result r;
	char v[128];
	unsigned int i;

	if (!can_jail(_metadata))
		return;
	ASSERT_TRUE(start_jailed(_metadata, &j, NULL))
	{
		stop_jailed(&j);
	}

	/* The ids, every one of the four, and nothing to raise them. */
	status_field(j.pid, "Uid", v, sizeof(v));
	EXPECT_STREQ("65534\t65534\t65534\t65534", v);
	status_field(j.pid, "Gid", v, sizeof(v));
	EXPECT_STREQ("65534\t65534\t65534\t65534", v);
	status_field(j.pid, "Groups", v, sizeof(v));
	EXPECT_STREQ("", v);
	status_field(j.pid, "CapEff", v, sizeof(v));
	EXPECT_STREQ("0000000000000000", v);
	status_field(j.pid, "CapPrm", v, sizeof(v));
	EXPECT_STREQ("0000000000000000", v);
	status_field(j.pid, "CapInh", v, sizeof(v));
	EXPECT_STREQ("0000000000000000", v);
	status_field(j.pid, "CapBnd", v, sizeof(v));
	EXPECT_STREQ("0000000000000000", v);
	status_field(j.pid, "CapAmb", v, sizeof(v));
	EXPECT_STREQ("0000000000000000", v);
	status_field(j.pid, "NoNewPrivs", v, sizeof(v));
	EXPECT_STREQ("1", v);
	/* PID 1 of its own namespace. */
	status_field(j.pid, "NSpid", v, sizeof(v));
	EXPECT_TRUE(strrchr(v, '\t') && !strcmp(strrchr(v, '\t'), "\t1"))
	TH_LOG("NSpid: %s", v);

	limit_soft(j.pid, "Max open files", v, sizeof(v));
	EXPECT_STREQ(JAIL_NOFILE, v);
	limit_soft(j.pid, "Max processes", v, sizeof(v));
	EXPECT_STREQ(JAIL_NPROC, v);
	limit_soft(j.pid, "Max address space", v, sizeof(v));
	EXPECT_STREQ(vmm_asan(env_or("KILN_VMM", "build/vmm")) ? "unlimited" :
								 JAIL_AS,
		     v);
	limit_soft(j.pid, "Max core file size", v, sizeof(v));
	EXPECT_STREQ("0", v);

	for (i = 0; i < ARRAY_SIZE(namespaces); i++)
		EXPECT_FALSE(same_ns(j.pid, namespaces[i]))
	TH_LOG("the jailed vmm shares the test's %s namespace", namespaces[i]);

	/* Its root: the VM's files and devices, nothing of the host. */
	EXPECT_TRUE(jail_sees(j.pid, "/kiln/kernel"));
	EXPECT_TRUE(jail_sees(j.pid, "/kiln/initrd"));
	EXPECT_TRUE(jail_sees(j.pid, "/kiln/d0/ctl.sock"));
	EXPECT_TRUE(jail_sees(j.pid, "/dev/kvm"));
	EXPECT_TRUE(jail_sees(j.pid, "/dev/urandom"));
	EXPECT_FALSE(jail_sees(j.pid, j.marker)) TH_LOG("%s", j.marker);
	EXPECT_FALSE(jail_sees(j.pid, j.dir));
	EXPECT_FALSE(jail_sees(j.pid, "/dev/sda"));
	EXPECT_FALSE(jail_sees(j.pid, "/etc/passwd"));
	EXPECT_FALSE(jail_sees(j.pid, "/usr"));
	EXPECT_FALSE(jail_sees(j.pid, "/tmp"));

	/* The guest still runs commands. */
	ASSERT_EQ(0, spawn__run(ARGS(j.vmmctl, "exec", j.sock, "--", "sh", "-c",
				     "echo jailed-$((6 * 7))"),
				NULL, &r));
	TH_LOG("exec: exit %d, out %.200s, err %.200s", r.status, r.out, r.err);
	EXPECT_EQ(0, r.status);
	EXPECT_NE(NULL, strstr(r.out, "jailed-42"));
	if (r.status)
		vmm_log_show(_metadata, j.log);
	ASSERT_EQ(0, spawn__run(ARGS(j.vmmctl, "shutdown", j.sock), NULL, &r));
	EXPECT_EQ(0, r.status);
	for (i = 0; i < 600 && !kill(j.pid, 0); i++)
		usleep(100000);
	EXPECT_NE(0, kill(j.pid, 0)) TH_LOG("the jailed vmm outlived shutdown");
	stop_jailed(&j);
}

/*
 * The jailed vmm's threads by their effective capabilities: how many
 * have none, how many exactly want (hex as in /proc status), and how
 * many something else.
 */
static void thread_caps(pid_t pid, const char *want, int *none, int *kept,
			int *other)
{
	char path[64], line[256];
	struct dirent *de;
	DIR *d;

	*none = *kept = *other = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d))) {
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status",
			 (int)pid, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "CapEff:\t", 8)) {
				line[strcspn(line, "\n")] = '\0';
				if (!strcmp(line + 8, "0000000000000000"))
					(*none)++;
				else if (!strcmp(line + 8, want))
					(*kept)++;
				else
					(*other)++;
			}
		fclose(f);
	}
	closedir(d);
}

/* CAP_NET_RAW (13) and CAP_BPF (39), as /proc/PID/status shows them. */
#define PROXY_CAPS "0000008000002000"

/*
 * --net auto in a jail: a granted TCP flow from the guest reaches the
 * test host (in the test's own network namespace) through the egress
 * proxy, while exactly one thread of the vmm (the proxy's netns thread)
 * holds CAP_NET_RAW and CAP_BPF and every other thread holds nothing.
 */
TEST_TIMEOUT(jailed_vmm_relays_a_granted_flow, BOOT_TIMEOUT)
{
	static const char grant[] =
		"{\"tcp\": [{\"to\": \"" TEST_HOST "\", \"ports\": [8080]}]}";
	struct jailed j = { .pid = 0 };
	char policy[160], v[128];
	struct spawn_result r;
	struct test_host h;
	int none, kept, other;
	FILE *f;

	if (!can_jail(_metadata))
		return;
	ASSERT_TRUE(test_host_start(_metadata, &h));
	snprintf(policy, sizeof(policy), "%s/kiln-jail-policy-%d", test_tmp(),
		 (int)getpid());
	f = fopen(policy, "w");
	ASSERT_NE(NULL, f);
	fputs(grant, f);
	fclose(f);
	ASSERT_TRUE(start_jailed(_metadata, &j, policy))
	{
		unlink(policy);
		test_host_stop(&h);
		stop_jailed(&j);
	}
	unlink(policy);

	status_field(j.pid, "Uid", v, sizeof(v));
	EXPECT_STREQ("65534\t65534\t65534\t65534", v);
	thread_caps(j.pid, PROXY_CAPS, &none, &kept, &other);
	EXPECT_EQ(1, kept);
	EXPECT_EQ(0, other);
	EXPECT_LT(2, none) TH_LOG("%d threads without capabilities", none);

	ASSERT_EQ(0,
		  spawn__run(ARGS(j.vmmctl, "exec", j.sock, "--", "sh", "-c",
				  "printf 'GET / HTTP/1.0\\r\\n\\r\\n' |"
				  " nc -w 20 " TEST_HOST " 8080 | tail -n 1"),
			     NULL, &r));
	TH_LOG("exec: exit %d, out %.200s, err %.200s", r.status, r.out, r.err);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(TEST_REPLY "\n", r.out);
	if (r.status || strcmp(r.out, TEST_REPLY "\n"))
		vmm_log_show(_metadata, j.log);
	ASSERT_EQ(0, spawn__run(ARGS(j.vmmctl, "shutdown", j.sock), NULL, &r));
	test_host_stop(&h);
	stop_jailed(&j);
}

/* Without root: one line saying so, exit 125, nothing made. */
/*
 * `vmm run --jail` in the foreground: the jail's PID 1 runs the VM and
 * the relay left outside ends with the command's status. Until
 * 2026-12-07 PID 1 took its parent outside the namespace (getppid() 0)
 * for a dead one and ended 125 before it booted anything.
 */
TEST_TIMEOUT(run_jailed_ends_with_the_commands_status, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct guest g;
	char dir[64], root[96];
	char cmd[128];

	test_tmp_name(dir, sizeof(dir), "kiln-jail-XXXXXX");
	if (!can_jail(_metadata))
		return;
	guest_paths(&g);
	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(root, sizeof(root), "%s/root", dir);
	ASSERT_EQ(0, mkdir(root, 0755));
	ASSERT_EQ(0, spawn__run(ARGS(g.vmm, "run", "--kernel", g.vmlinux,
				     "--initrd", g.initrd, "--jail", root,
				     "--uid", NOBODY, "--gid", NOBODY, "--",
				     "sh", "-c", "echo jailed-run; exit 7"),
				NULL, &r));
	TH_LOG("exit %d, err %.300s", r.status, r.err);
	check_harness_flake(&r);
	EXPECT_EQ(7, r.status);
	EXPECT_NE(NULL, strstr(r.out, "jailed-run"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", dir);
}

TEST_TIMEOUT(jail_refused_without_root, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct guest g;
	char dir[64], sock[96];
	char cmd[128];

	test_tmp_name(dir, sizeof(dir), "kiln-jail-XXXXXX");
	if (!can_jail(_metadata))
		return;
	guest_paths(&g);
	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/ctl.sock", dir);
	ASSERT_EQ(0, chmod(dir, 0777));
	/* setpriv(1) from util-linux: the vmm as nobody, nothing kept. */
	ASSERT_EQ(0,
		  spawn__run(ARGS("setpriv", "--reuid", NOBODY, "--regid",
				  NOBODY, "--clear-groups", g.vmm, "start",
				  "--kernel", g.vmlinux, "--initrd", g.initrd,
				  "--control-socket", sock, "--jail", dir,
				  "--uid", NOBODY, "--gid", NOBODY),
			     NULL, &r));
	TH_LOG("exit %d, err %.300s", r.status, r.err);
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_NE(NULL, strstr(r.err, "needs root"));
	EXPECT_NE(0, access(sock, F_OK));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", dir);
}

TEST_HARNESS_MAIN
