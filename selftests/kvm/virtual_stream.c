// SPDX-License-Identifier: GPL-2.0
/*
 * A virtual mount served over SOCK_STREAM by a Python server on the host
 * (selftests/helpers/vfs_stream_server.py, serving a host directory), and
 * that server killed (SIGKILL) and started again under the running VM:
 * the guest reads, writes and lists; during the outage each request fails
 * with EIO (Documentation/virtual-fs.md, "Reconnection"); once the server
 * is back the same mount works again, without restarting the VM.
 *
 * The guest and the test take turns through files in a bind mount (/c):
 * "phase1" (the guest is done with the first server), "killed" (the test
 * killed it), "outage-seen" (the guest has tried the mount), "restarted"
 * (the test started the new server).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define SERVER "selftests/helpers/vfs_stream_server.py"

struct vst {
	char dir[64];
	char root[128]; /* the served tree */
	char ctl[128];	/* the turn-taking bind mount */
	char sock[128];
	char log[128]; /* the server's output */
	char out[128]; /* the vmm's */
	char mnt_v[160], mnt_c[160];
};

static void put(struct __test_metadata *_metadata, const char *dir,
		const char *name, const char *content)
{
	char path[300];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ASSERT_NE(NULL, f);
	fputs(content, f);
	ASSERT_EQ(0, fclose(f));
}

static void get(const char *dir, const char *name, char *buf, size_t len)
{
	char path[300];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	buf[0] = '\0';
	f = fopen(path, "r");
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Waits for dir/name, at most secs, while vmm runs; false if not. */
static bool wait_file(const char *dir, const char *name, pid_t vmm, int secs)
{
	char path[300];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	for (int i = 0; i < secs * 10; i++) {
		if (!access(path, F_OK))
			return true;
		if (waitpid(vmm, NULL, WNOHANG) == vmm)
			return false;
		usleep(100000);
	}
	return false;
}

/* Whether the output's line that starts with tag also holds what. */
static bool line_has(const char *out, const char *tag, const char *what)
{
	const char *line = strstr(out, tag), *end, *hit;

	if (!line)
		return false;
	end = strchr(line, '\n');
	hit = strstr(line, what);
	return hit && (!end || hit < end);
}

/* Starts the server; waits for its socket (it appears once it listens). */
static pid_t start_server(const struct vst *s)
{
	pid_t pid = spawn_logged(
		ARGS("/usr/bin/python3", SERVER, s->sock, s->root), s->log);

	for (int i = 0; i < 200 && access(s->sock, F_OK); i++)
		usleep(50000);
	return pid;
}

static void stop_server(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/*
 * The guest: first server (read, list, write), turn, outage (read, list,
 * write each tried once), turn, the new server (retried until it answers,
 * for the reconnection's VIRTUAL_FS_RETRY_MS), then the same again.
 */
static const char guest_script[] =
	"wait_for() { i=0; while [ ! -e /c/$1 ]; do"
	"  i=$((i+1)); [ $i -gt 1200 ] && echo no-$1 && exit 1; sleep 0.1;"
	" done; };"
	"echo \"read1: $(cat /v/hello.txt)\";"
	"echo \"list1: $(ls /v /v/dir | tr '\\n' ' ')\";"
	"echo before > /v/before.txt && echo \"write1: $(cat /v/before.txt)\";"
	"mkdir /v/made && echo \"mkdir1: $(ls -d /v/made)\";"
	"touch /c/phase1; wait_for killed;"
	"echo \"read2: $(cat /v/hello.txt 2>&1)\";"
	"echo \"list2: $(ls /v 2>&1)\";"
	"echo \"write2: $( (echo x > /v/during.txt) 2>&1)\";"
	"touch /c/outage-seen; wait_for restarted;"
	"i=0; until cat /v/hello.txt >/dev/null 2>&1; do"
	"  i=$((i+1)); [ $i -gt 100 ] && break; sleep 0.2;"
	" done;"
	"echo \"read3: $(cat /v/hello.txt 2>&1)\";"
	"echo \"before3: $(cat /v/before.txt 2>&1)\";"
	"echo after > /v/after.txt && echo \"write3: $(cat /v/after.txt)\";"
	"echo more >> /v/dir/a.txt && echo \"append3: $(cat /v/dir/a.txt | tr"
	" '\\n' ' ')\";"
	"rm /v/before.txt && rmdir /v/made;"
	"echo \"list3: $(ls /v | tr '\\n' ' ')\";"
	"echo done";

TEST_TIMEOUT(stream_server_killed_and_restarted, BOOT_TIMEOUT * 2)
{
	struct boot_spec spec = { 0 };
	pid_t srv, vmm;
	char buf[256], *out;
	int fd, rc;
	struct vst s;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	ASSERT_EQ(0, access("/usr/bin/python3", X_OK))
	TH_LOG("the host's python3 runs the server");
	ASSERT_EQ(0, access(SERVER, R_OK)) TH_LOG("run from the tree's top");
	test_tmp_name(s.dir, sizeof(s.dir), "kiln-vst-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(s.dir));
	snprintf(s.root, sizeof(s.root), "%s/root", s.dir);
	snprintf(s.ctl, sizeof(s.ctl), "%s/ctl", s.dir);
	snprintf(s.sock, sizeof(s.sock), "%s/fs.sock", s.dir);
	snprintf(s.log, sizeof(s.log), "%s/server.log", s.dir);
	snprintf(s.out, sizeof(s.out), "%s/vmm.out", s.dir);
	ASSERT_EQ(0, mkdir(s.root, 0755));
	ASSERT_EQ(0, mkdir(s.ctl, 0755));
	snprintf(buf, sizeof(buf), "%s/dir", s.root);
	ASSERT_EQ(0, mkdir(buf, 0755));
	put(_metadata, s.root, "hello.txt", "hello over a stream\n");
	put(_metadata, s.root, "dir/a.txt", "a\n");
	snprintf(s.mnt_v, sizeof(s.mnt_v), "/v=virtual:%s", s.sock);
	snprintf(s.mnt_c, sizeof(s.mnt_c), "/c=bind:%s:rw", s.ctl);

	srv = start_server(&s);
	ASSERT_EQ(0, access(s.sock, F_OK)) TH_LOG("the server did not listen");
	fd = open(s.out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_LE(0, fd);
	spec.opts = ARGS("--mount", s.mnt_v, "--mount", s.mnt_c);
	spec.cmd = ARGS("sh", "-c", guest_script);
	vmm = vmm_start(&spec, fd);
	close(fd);
	ASSERT_LT(0, vmm);

	/* The guest is done with the first server: it dies, hard. */
	EXPECT_TRUE(wait_file(s.ctl, "phase1", vmm, BOOT_TIMEOUT));
	stop_server(srv);
	srv = 0;
	/* Its socket file stays: nothing listens there (ECONNREFUSED). */
	put(_metadata, s.ctl, "killed", "");
	EXPECT_TRUE(wait_file(s.ctl, "outage-seen", vmm, BOOT_TIMEOUT));
	/* The new one binds the path anew (its rename replaces the file). */
	srv = start_server(&s);
	put(_metadata, s.ctl, "restarted", "");
	rc = wait_exit(vmm, BOOT_TIMEOUT);
	stop_server(srv);

	out = log_text(s.out);
	ASSERT_NE(NULL, out);
	TH_LOG("exit %d, output: %.3000s", rc, out);
	check_harness_flake_text(out);
	EXPECT_EQ(0, rc);
	/* The first server: read, list, write, mkdir. */
	EXPECT_NE(NULL, strstr(out, "read1: hello over a stream"));
	EXPECT_NE(NULL, strstr(out, "a.txt"));
	EXPECT_NE(NULL, strstr(out, "write1: before"));
	EXPECT_NE(NULL, strstr(out, "mkdir1: /v/made"));
	/* The outage: EIO for each request, nothing blocks. */
	EXPECT_TRUE(line_has(out, "read2: ", "Input/output error"));
	EXPECT_TRUE(line_has(out, "list2: ", "Input/output error"));
	EXPECT_TRUE(line_has(out, "write2: ", "Input/output error"));
	/* The new server, same mount, same VM. */
	EXPECT_NE(NULL, strstr(out, "read3: hello over a stream"));
	EXPECT_NE(NULL, strstr(out, "before3: before"));
	EXPECT_NE(NULL, strstr(out, "write3: after"));
	EXPECT_NE(NULL, strstr(out, "append3: a more"));
	EXPECT_NE(NULL, strstr(out, "list3: after.txt dir hello.txt"));
	EXPECT_NE(NULL, strstr(out, "done"));
	free(out);

	/* And the host sees what the guest wrote through each server. */
	get(s.root, "after.txt", buf, sizeof(buf));
	EXPECT_STREQ("after\n", buf);
	get(s.root, "dir/a.txt", buf, sizeof(buf));
	EXPECT_STREQ("a\nmore\n", buf);
	snprintf(buf, sizeof(buf), "%s/during.txt", s.root);
	EXPECT_NE(0, access(buf, F_OK));
	snprintf(buf, sizeof(buf), "%s/before.txt", s.root);
	EXPECT_NE(0, access(buf, F_OK));
	if (!_metadata->result->failed) {
		snprintf(buf, sizeof(buf), "rm -rf '%s'", s.dir);
		if (system(buf))
			TH_LOG("cannot remove %s", s.dir);
	} else {
		vmm_log_show(_metadata, s.log);
	}
}

TEST_HARNESS_MAIN
