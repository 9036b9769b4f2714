// SPDX-License-Identifier: GPL-2.0
/*
 * vmm --isolation namespace (vmm/isolate-ns.c, Documentation/design.md
 * "Namespace isolation"), booted on this host: no KVM, the real vmm and
 * kiln-agent-ns on a small ext4 image made here (busybox, mkfs.ext4 -d).
 * The control API's exec, fs.writeFile and fs.readFile, spawn's stdout;
 * the sandbox's own PID, network, UTS, user and cgroup namespaces, its
 * seccomp filter; the image never written, the overlay gone with the
 * sandbox (or kept, persistent), a read-only root, binds read-write and
 * read-only; --net auto's egress (a granted and a denied TCP flow, a
 * DNS lookup through the vmm's resolver); vm.pause and vm.resume through
 * the cgroup's freezer, vm.snapshot refused; the cgroup's limits and what
 * they stop (where the controllers are: the harness, selftests/kvm/
 * ns_cgroup.sh); and bad input refused in one line. Needs root (a loop device), mkfs.ext4 and a static busybox:
 * skipped, saying which, without them.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "selftests/jsonrpc_client.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"
#include "vmm/isolate-ns.h"

#define BUSYBOX	   "/bin/busybox"
#define IMAGE_MIB  "8M"
#define VMM_ERROR  125
#define START_WAIT 10000 /* ms for the control socket to answer */

static const char *const applets[] = {
	"sh",	"cat",	    "ls",	"echo",	    "id",    "touch",
	"test", "readlink", "grep",	"hostname", "sleep", "tr",
	"stat", "wget",	    "nslookup", "timeout",  "dd"
};

/* A shell command; its exit status, or -1. */
static int shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int shell(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return st < 0 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

FIXTURE(ns)
{
	char why[128]; /* set: the host lacks something, skipped */
	char dir[96];
	char desc[160], image[160], copy[160], sock[160];
	pid_t vmm;
	struct tc t;
};

/* The image: busybox and its applets, /etc/motd; a copy to compare. */
static int make_image(FIXTURE_DATA(ns) * self)
{
	char sum[65] = "", cmd[256];
	FILE *f;
	int ret;

	ret = shell("set -e; cd %s; mkdir -p root/bin root/etc root/tmp "
		    "root/root; cp " BUSYBOX " root/bin/; chmod 1777 root/tmp; "
		    "echo image > root/etc/motd",
		    self->dir);
	for (size_t i = 0; !ret && i < ARRAY_SIZE(applets); i++)
		ret = shell("ln -sf busybox %s/root/bin/%s", self->dir,
			    applets[i]);
	if (!ret)
		ret = shell("mkfs.ext4 -q -F -b 4096 -d %s/root %s " IMAGE_MIB
			    " >/dev/null 2>&1 && cp %s %s",
			    self->dir, self->image, self->image, self->copy);
	if (ret)
		return -1;
	snprintf(cmd, sizeof(cmd), "sha256sum %s", self->image);
	f = popen(cmd, "r");
	if (!f || fscanf(f, "%64s", sum) != 1) {
		if (f)
			pclose(f);
		return -1;
	}
	pclose(f);
	f = fopen(self->desc, "w");
	if (!f)
		return -1;
	fprintf(f,
		"{\"name\": \"ns-test\", \"path\": \"image.ext4\", \"format\": "
		"\"raw\", \"architecture\": \"x86_64\", \"digest\": "
		"\"sha256:%s\", \"sizeBytes\": %d}\n",
		sum, 8 << 20);
	return fclose(f) ? -1 : 0;
}

FIXTURE_SETUP(ns)
{
	self->vmm = -1;
	self->t.fd = -1;
	if (geteuid()) {
		snprintf(self->why, sizeof(self->why),
			 "not root: the image needs a loop device");
		return;
	}
	if (access(BUSYBOX, X_OK) || shell("command -v mkfs.ext4 >/dev/null")) {
		snprintf(self->why, sizeof(self->why),
			 "no " BUSYBOX " or no mkfs.ext4 for the test image");
		return;
	}
	/* TMPDIR: the harness's own tmpfs (its /tmp is virtio-fs). */
	snprintf(self->dir, sizeof(self->dir), "%s/kiln-nstest-XXXXXX",
		 getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") :
							 "/tmp");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->desc, sizeof(self->desc), "%s/image.json", self->dir);
	snprintf(self->image, sizeof(self->image), "%s/image.ext4", self->dir);
	snprintf(self->copy, sizeof(self->copy), "%s/copy.ext4", self->dir);
	snprintf(self->sock, sizeof(self->sock), "%s/c.sock", self->dir);
	ASSERT_EQ(0, make_image(self));
}

FIXTURE_TEARDOWN(ns)
{
	int st;

	tc_close(&self->t);
	if (self->vmm > 0) {
		kill(self->vmm, SIGKILL);
		waitpid(self->vmm, &st, 0);
	}
	if (self->dir[0])
		shell("rm -rf %s", self->dir);
}

/* vmm start --isolation namespace ... extra, its API connected. */
static int start(FIXTURE_DATA(ns) * self, const char *const extra[])
{
	const char *argv[32] = { spawn__vmm_path(),  "start",
				 "--isolation",	     "namespace",
				 "--rootfs",	     self->desc,
				 "--control-socket", self->sock,
				 "--hostname",	     "nstest" };
	size_t n = 10;
	uint64_t end = ms_now() + START_WAIT;
	json_t *m;

	for (size_t i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	self->vmm = fork();
	if (self->vmm == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	while (ms_now() < end) {
		if (!tc_open(&self->t, self->sock)) {
			m = tc_call(&self->t, 1, "vm.status", NULL);
			if (m) {
				json_decref(m);
				return 0;
			}
			tc_close(&self->t);
		}
		sleep_ms(20);
	}
	return -ETIMEDOUT;
}

/* exec of sh -c script: its stdout (malloc'ed) and exit code. */
static char *run_sh(struct tc *t, const char *script, json_int_t *code)
{
	json_t *m =
		tc_call(t, 2, "exec",
			json_pack("{s:[s, s, s]}", "argv", "sh", "-c", script));
	char *out = NULL;

	*code = -1;
	if (m && result(m)) {
		out = b64_str(result(m), "stdout", NULL);
		*code = res_int(m, "exitCode");
	}
	json_decref(m);
	return out;
}

/* vmm run --isolation namespace ... -- sh -c script. */
static int run(FIXTURE_DATA(ns) * self, const char *const extra[],
	       const char *script, struct spawn_result *r)
{
	const char *argv[32] = { spawn__vmm_path(), "run",	"--isolation",
				 "namespace",	    "--rootfs", self->desc };
	size_t n = 6;

	for (size_t i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n++] = "--";
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = script;
	argv[n] = NULL;
	return spawn__run(argv, NULL, r);
}

/* vm.shutdown: the vmm ends with 0 and leaves nothing behind. */
static int shutdown_vmm(FIXTURE_DATA(ns) * self)
{
	json_t *m = tc_call(&self->t, 99, "vm.shutdown", NULL);
	int st = -1;

	json_decref(m);
	if (waitpid(self->vmm, &st, 0) != self->vmm)
		return -1;
	self->vmm = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST_F(ns, exec_files_spawn)
{
	char out[256], *s;
	json_int_t code, stream;
	json_t *m, *ex;
	size_t n;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	ASSERT_EQ(0, start(self, NULL));
	s = run_sh(&self->t, "cat /etc/motd; exit 3", &code);
	EXPECT_STREQ("image\n", s);
	EXPECT_EQ(3, code);
	free(s);

	m = tc_call(&self->t, 3, "fs.writeFile",
		    json_pack("{s:s, s:o, s:b}", "path", "/root/new/f", "data",
			      b64_json("hello", 5), "createParents", 1));
	ASSERT_TRUE(m && result(m)) TH_LOG("error %lld", err_code(m));
	json_decref(m);
	m = fs_call(&self->t, 4, "fs.readFile", "/root/new/f");
	ASSERT_TRUE(m && result(m));
	s = b64_str(result(m), "data", &n);
	EXPECT_STREQ("hello", s);
	free(s);
	json_decref(m);
	/* The guest's own errno, as a VM's agent answers it. */
	m = fs_call(&self->t, 5, "fs.readFile", "/no/such");
	EXPECT_STREQ("ENOENT", err_errno(m));
	json_decref(m);

	m = tc_call(&self->t, 6, "spawn",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
			      "echo one; sleep 0.1; echo two"));
	ASSERT_TRUE(m && result(m));
	stream = res_int(m, "stream");
	json_decref(m);
	ex = collect_stream(&self->t, stream, out, sizeof(out), NULL);
	ASSERT_TRUE(ex != NULL);
	EXPECT_STREQ("one\ntwo\n", out);
	EXPECT_EQ(0, json_integer_value(json_object_get(ex, "exitCode")));
	json_decref(ex);

	m = tc_call(&self->t, 8, "vm.status", NULL);
	EXPECT_STREQ("namespace", json_string_value(json_object_get(
					  result(m), "isolation")));
	json_decref(m);
	EXPECT_EQ(0, shutdown_vmm(self));
	/* Its run directory and socket went with it. */
	EXPECT_NE(0, access(self->sock, F_OK));
}

/* Its own PID, network, UTS, user, cgroup namespaces; its filter. */
TEST_F(ns, namespaces)
{
	static const char *const kinds[] = { "pid",  "net", "uts",
					     "user", "ipc", "mnt" };
	char script[512], host[64], *s, *line;
	json_int_t code;
	ssize_t k;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	ASSERT_EQ(0, start(self, NULL));
	s = run_sh(&self->t,
		   "cat /proc/1/cmdline | tr '\\0' ' ' 2>/dev/null || "
		   "cat /proc/1/comm; echo; hostname; ls /sys/class/net; "
		   "grep -c . /proc/net/dev; cat /proc/self/uid_map; "
		   "grep '^Seccomp:' /proc/self/status; cat /proc/self/cgroup",
		   &code);
	ASSERT_TRUE(s != NULL);
	EXPECT_EQ(0, code);
	/* PID 1 is its agent; the hostname its own; lo its one device. */
	EXPECT_TRUE(strstr(s, "kiln-agent-ns") != NULL) TH_LOG("%s", s);
	EXPECT_TRUE(strstr(s, "\nnstest\nlo\n3\n") != NULL) TH_LOG("%s", s);
	EXPECT_TRUE(strstr(s, "0     100000      65536") != NULL)
	TH_LOG("%s", s);
	EXPECT_TRUE(strstr(s, "Seccomp:\t2") != NULL) TH_LOG("%s", s);
	EXPECT_TRUE(strstr(s, "0::/\n") != NULL) TH_LOG("%s", s);
	free(s);
	/* Each namespace other than this process's. */
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
		snprintf(script, sizeof(script), "/proc/self/ns/%s", kinds[i]);
		k = readlink(script, host, sizeof(host) - 1);
		ASSERT_LT(0, k);
		host[k] = '\0';
		snprintf(script, sizeof(script), "readlink /proc/self/ns/%s",
			 kinds[i]);
		s = run_sh(&self->t, script, &code);
		ASSERT_TRUE(s != NULL);
		line = strtok(s, "\n");
		ASSERT_TRUE(line != NULL);
		EXPECT_STRNE(host, line) TH_LOG("%s", kinds[i]);
		free(s);
	}
	EXPECT_EQ(0, shutdown_vmm(self));
}

/*
 * The image is never written: a change lands in the overlay, which goes
 * with the sandbox; readonly refuses it; persistent keeps it.
 */
TEST_F(ns, root_and_overlay)
{
	char state[160], mode[200];
	struct spawn_result r;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	/* A run directory below one the sandbox's root may not cross. */
	ASSERT_EQ(0, setenv("TMPDIR", self->dir, 1));
	ASSERT_EQ(0, run(self, NULL,
			 "echo changed > /etc/motd && cat /etc/motd && "
			 "touch /written && exit 7",
			 &r));
	EXPECT_EQ(7, r.status) TH_LOG("%s", r.err);
	EXPECT_STREQ("changed\n", r.out);
	EXPECT_EQ(0, shell("cmp -s %s %s", self->image, self->copy));
	ASSERT_EQ(0,
		  run(self, NULL, "test ! -e /written && cat /etc/motd", &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_STREQ("image\n", r.out);

	ASSERT_EQ(0,
		  run(self, ARGS("--rootfs-mode", "readonly"), "touch /x", &r));
	EXPECT_NE(0, r.status);
	EXPECT_TRUE(strstr(r.err, "Read-only file system") != NULL)
	TH_LOG("%s", r.err);

	snprintf(state, sizeof(state), "%s/state", self->dir);
	snprintf(mode, sizeof(mode), "persistent:%s", state);
	ASSERT_EQ(0, run(self, ARGS("--rootfs-mode", mode),
			 "echo kept > /root/kept", &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	ASSERT_EQ(0,
		  run(self, ARGS("--rootfs-mode", mode), "cat /root/kept", &r));
	EXPECT_STREQ("kept\n", r.out) TH_LOG("%s", r.err);
	EXPECT_EQ(0, shell("cmp -s %s %s", self->image, self->copy));
}

/* --mount binds, id-mapped: the sandbox's root writes as the host's. */
TEST_F(ns, binds)
{
	char rw[128], ro[128], a[200], b[200], path[160];
	struct spawn_result r;
	struct stat st;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	snprintf(rw, sizeof(rw), "%s/rw", self->dir);
	snprintf(ro, sizeof(ro), "%s/ro", self->dir);
	ASSERT_EQ(0, shell("mkdir %s %s && echo host > %s/f", rw, ro, ro));
	snprintf(a, sizeof(a), "/data=bind:%s:rw", rw);
	snprintf(b, sizeof(b), "/in/ro=bind:%s:ro", ro);
	ASSERT_EQ(0, run(self, ARGS("--mount", a, "--mount", b),
			 "echo inside > /data/g && cat /in/ro/f && "
			 "! touch /in/ro/h 2>/dev/null",
			 &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_STREQ("host\n", r.out);
	snprintf(path, sizeof(path), "%s/g", rw);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(0, st.st_uid);
	snprintf(path, sizeof(path), "%s/h", ro);
	EXPECT_NE(0, access(path, F_OK));
}

/*
 * Mounts the kernel cannot make (memory with seeded files here; virtual
 * and masked binds likewise) served over /dev/fuse by the vmm's FUSE
 * server; /tmp and /run the tmpfs the VM's init makes.
 */
TEST_F(ns, fuse_mounts)
{
	char config[160];
	struct spawn_result r;
	FILE *f;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	snprintf(config, sizeof(config), "%s/config.json", self->dir);
	f = fopen(config, "w");
	ASSERT_TRUE(f != NULL);
	fprintf(f, "{\"mounts\": {\"/seed\": {\"memory\": {\"files\": "
		   "{\"/a/b.txt\": \"seeded\\n\"}}}}}\n");
	ASSERT_EQ(0, fclose(f));
	ASSERT_EQ(0, run(self, ARGS("--config", config),
			 "cat /seed/a/b.txt && echo new > /seed/c && "
			 "cat /seed/c && grep -c ' /seed fuse ' /proc/mounts "
			 "&& stat -f -c %T /tmp /run",
			 &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_STREQ("seeded\nnew\n1\ntmpfs\ntmpfs\n", r.out)
	TH_LOG("%s", r.err);
}

/* stderr holds exactly one line, with want in it. */
static bool one_line(const struct spawn_result *r, const char *want)
{
	const char *nl = strchr(r->err, '\n');

	return nl && !nl[1] && strstr(r->err, want);
}

/* Bad input and a host without user namespaces: one line, status 125. */
TEST_F(ns, bad_input)
{
	char missing[160];
	struct spawn_result r;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	snprintf(missing, sizeof(missing), "%s/none.json", self->dir);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--isolation",
				     "namespace", "--rootfs", missing, "--",
				     "true"),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, missing)) TH_LOG("%s", r.err);

	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--isolation",
				     "namespace", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, "needs --rootfs")) TH_LOG("%s", r.err);

	snprintf(missing, sizeof(missing), "/v=virtual:%s/none.sock",
		 self->dir);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--isolation",
				     "namespace", "--rootfs", self->desc,
				     "--mount", missing, "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, "none.sock")) TH_LOG("%s", r.err);

	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--isolation",
				     "namespace", "--rootfs", self->desc,
				     "--net", "tap-fd:3", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, "--net tap-fd:N")) TH_LOG("%s", r.err);

	/* vmm facts for a sandbox: no kernel looked for (none here). */
	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", self->dir, 1));
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "facts", "--isolation",
				     "namespace", "--rootfs", self->desc),
				NULL, &r));
	unsetenv("KILN_GUEST_DIR");
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.out, "\"namespace\"") != NULL) TH_LOG("%s", r.out);
	EXPECT_EQ(NULL, strstr(r.out, "kernel-path"));

	/* No VM state: no restore, no baseline, each said so. */
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "start", "--isolation",
				     "namespace", "--rootfs", self->desc,
				     "--control-socket", self->sock,
				     "--restore", self->dir),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, "--restore (the namespace launcher has no VM "
				 "state to snapshot or restore"))
	TH_LOG("%s", r.err);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "start", "--isolation",
				     "namespace", "--rootfs", self->desc,
				     "--control-socket", self->sock,
				     "--baseline-cache", self->dir),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, "--baseline-cache (the namespace launcher has "
				 "no VM state"))
	TH_LOG("%s", r.err);

	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--isolation",
				     "jail", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(one_line(&r, "isolation")) TH_LOG("%s", r.err);
}

/*
 * No user namespaces: clone3 refused (EPERM) by a filter on the vmm, as
 * a host with them disabled refuses it.
 */
TEST_F(ns, no_user_namespaces)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = ARRAY_SIZE(f), .filter = f };
	int err[2], st;
	char buf[2048] = "", *line;
	ssize_t n;
	pid_t pid;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	ASSERT_EQ(0, pipe(err));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		dup2(err[1], 2);
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
			_exit(99);
		execl(spawn__vmm_path(), "vmm", "run", "--isolation",
		      "namespace", "--rootfs", self->desc, "--", "true",
		      (char *)NULL);
		_exit(98);
	}
	close(err[1]);
	n = 0;
	for (ssize_t k; (k = read(err[0], buf + n, sizeof(buf) - 1 - n)) > 0;)
		n += k;
	close(err[0]);
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st));
	EXPECT_EQ(VMM_ERROR, WEXITSTATUS(st));
	ASSERT_LT(0, n);
	buf[n] = '\0';
	/* A host without the cgroup's controllers warns first (once). */
	line = buf;
	if (!strncmp(line, "vmm: warning: namespace sandbox: cgroup ", 40))
		line = strchr(line, '\n') + 1;
	EXPECT_TRUE(strstr(line, "user, mount, pid, net, ipc and uts "
				 "namespaces: Operation not permitted") != NULL)
	TH_LOG("%s", buf);
	EXPECT_TRUE(strchr(line, '\n') == buf + n - 1) TH_LOG("%s", buf);
}

/* ---- --net auto ---------------------------------------------------------- */

/*
 * The upstream side, in this test's own network namespace (the vmm's:
 * its proxy re-originates granted flows there): TEST-NET-1 addresses on
 * lo, an HTTP service on UP_ADDR:UP_GRANTED (granted), another on
 * UP_ADDR:UP_DENIED (not), a resolver on DNS_ADDR answering every A
 * question with UP_ADDR. A child serves them and reports each accept
 * and question as one byte on a pipe: 'G', 'D', 'Q'.
 */
#define UP_ADDR	    "192.0.2.10"
#define DNS_ADDR    "192.0.2.53"
#define UP_GRANTED  80
#define UP_DENIED   81
#define DNS_PORT    53
#define DNS_HDR	    12
#define DNS_TYPE_A  1
#define DNS_TTL_S   60
#define HTTP_ANSWER "HTTP/1.0 200 OK\r\nContent-Length: 8\r\n\r\ngranted\n"

static int listen_on(int type, const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), one = 1;

	inet_pton(AF_INET, addr, &a.sin_addr);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    (type == SOCK_STREAM && listen(fd, 8)))
		return -1;
	return fd;
}

/* One A answer (UP_ADDR) for an A question, none for another type. */
static void dns_answer(int fd)
{
	uint8_t b[512];
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	struct in_addr up;
	ssize_t n = recvfrom(fd, b, sizeof(b) - 16, 0, (struct sockaddr *)&from,
			     &fl);
	size_t q = DNS_HDR, end;
	bool a;

	if (n <= DNS_HDR)
		return;
	while (q < (size_t)n && b[q])
		q += (size_t)b[q] + 1;
	end = q + 5; /* the root label, type, class */
	if (end > (size_t)n)
		return;
	a = b[q + 1] == 0 && b[q + 2] == DNS_TYPE_A;
	b[2] = 0x81; /* QR, RD */
	b[3] = 0x80; /* RA, NOERROR */
	b[6] = 0;
	b[7] = a;
	memset(b + 8, 0, 4);
	n = (ssize_t)end;
	if (a) {
		const uint8_t rr[] = { 0xc0, DNS_HDR, 0, DNS_TYPE_A, 0, 1,
				       0,    0,	      0, DNS_TTL_S,  0, 4 };

		memcpy(b + n, rr, sizeof(rr));
		n += (ssize_t)sizeof(rr);
		inet_pton(AF_INET, UP_ADDR, &up);
		memcpy(b + n, &up, 4);
		n += 4;
	}
	sendto(fd, b, (size_t)n, 0, (struct sockaddr *)&from, fl);
}

static void __attribute__((noreturn)) serve_upstream(int fds[3], int report)
{
	struct pollfd p[3];
	char req[512];

	for (int i = 0; i < 3; i++)
		p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	for (;;) {
		if (poll(p, 3, -1) < 0)
			_exit(1);
		for (int i = 0; i < 2; i++) {
			int c;

			if (!p[i].revents)
				continue;
			c = accept(fds[i], NULL, NULL);
			if (c < 0)
				continue;
			if (write(report, i ? "D" : "G", 1) != 1)
				_exit(1);
			if (read(c, req, sizeof(req)) > 0 &&
			    write(c, HTTP_ANSWER, strlen(HTTP_ANSWER)) < 0)
				_exit(1);
			close(c);
		}
		if (p[2].revents) {
			if (write(report, "Q", 1) != 1)
				_exit(1);
			dns_answer(fds[2]);
		}
	}
}

static int count_char(const char *s, char c)
{
	int n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

/*
 * --isolation namespace --net auto: the sandbox's eth0 and resolver as a
 * VM's; a granted TCP flow reaches its upstream, a denied one is refused
 * and never reaches it, a name resolves through the vmm's resolver and
 * the policy's upstream resolver; net.check agrees; net.setPolicy swaps
 * the two ports live; net.status counts the proxy's flows.
 */
TEST_F(ns, net_egress)
{
	char policy[160], seen[64] = "", *s;
	const char *extra[] = { "--net", "auto", "--net-policy", policy, NULL };
	int fds[3], rep[2];
	json_int_t code;
	pid_t server;
	ssize_t n;
	FILE *f;
	json_t *m, *tcp;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	ASSERT_EQ(0, unshare(CLONE_NEWNET));
	ASSERT_EQ(0, shell("ip link set lo up && ip addr add " UP_ADDR
			   "/32 dev lo && ip addr add " DNS_ADDR "/32 dev lo"));
	fds[0] = listen_on(SOCK_STREAM, UP_ADDR, UP_GRANTED);
	fds[1] = listen_on(SOCK_STREAM, UP_ADDR, UP_DENIED);
	fds[2] = listen_on(SOCK_DGRAM, DNS_ADDR, DNS_PORT);
	ASSERT_TRUE(fds[0] >= 0 && fds[1] >= 0 && fds[2] >= 0);
	ASSERT_EQ(0, pipe2(rep, O_CLOEXEC));
	server = fork();
	ASSERT_LE(0, server);
	if (server == 0) {
		close(rep[0]);
		serve_upstream(fds, rep[1]);
	}
	close(rep[1]);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	snprintf(policy, sizeof(policy), "%s/policy.json", self->dir);
	f = fopen(policy, "w");
	ASSERT_TRUE(f != NULL);
	fprintf(f,
		"{\"dns\": {\"resolvers\": [\"" DNS_ADDR "\"], "
		"\"names\": [\"api.example.test\"]}, \"tcp\": "
		"[{\"to\": \"" UP_ADDR "\", \"ports\": [%d]}]}\n",
		UP_GRANTED);
	ASSERT_EQ(0, fclose(f));

	ASSERT_EQ(0, start(self, extra));
	s = run_sh(&self->t,
		   "ls /sys/class/net | tr '\\n' ' '; echo; "
		   "cat /etc/resolv.conf; "
		   "timeout 20 wget -q -O - http://" UP_ADDR "/; "
		   "timeout 20 wget -q -O - http://" UP_ADDR ":81/ >/dev/null "
		   "2>&1 || echo denied; "
		   "nslookup api.example.test | grep -c '" UP_ADDR "'",
		   &code);
	ASSERT_TRUE(s != NULL);
	EXPECT_EQ(0, code) TH_LOG("%s", s);
	EXPECT_STREQ("eth0 lo \nnameserver 10.0.2.2\ngranted\ndenied\n1\n", s);
	free(s);

	/* net.check answers as the proxy decided. */
	m = tc_call(
		&self->t, 10, "net.check",
		json_pack("{s:s, s:s}", "proto", "tcp", "dst", UP_ADDR ":80"));
	EXPECT_STREQ("allow",
		     json_string_value(json_object_get(result(m), "verdict")));
	json_decref(m);
	m = tc_call(
		&self->t, 11, "net.check",
		json_pack("{s:s, s:s}", "proto", "tcp", "dst", UP_ADDR ":81"));
	EXPECT_STREQ("deny",
		     json_string_value(json_object_get(result(m), "verdict")));
	json_decref(m);
	/* net.setPolicy: port 81 granted instead, live (the SYN filter too). */
	m = tc_call(&self->t, 12, "net.setPolicy",
		    json_pack("{s:{s:[{s:s, s:[i]}]}}", "policy", "tcp", "to",
			      UP_ADDR, "ports", UP_DENIED));
	EXPECT_TRUE(m && result(m)) TH_LOG("%s", m ? json_dumps(m, 0) : "?");
	json_decref(m);
	s = run_sh(&self->t,
		   "timeout 20 wget -q -O - http://" UP_ADDR ":81/; "
		   "timeout 20 wget -q -O - http://" UP_ADDR "/ >/dev/null "
		   "2>&1 || echo denied",
		   &code);
	EXPECT_STREQ("granted\ndenied\n", s);
	free(s);

	m = tc_call(&self->t, 9, "net.status", NULL);
	tcp = json_object_get(result(m), "tcp");
	EXPECT_STREQ("running",
		     json_string_value(json_object_get(result(m), "proxy")));
	EXPECT_EQ(2, json_integer_value(json_object_get(tcp, "allowed")))
	TH_LOG("%s", m ? json_dumps(m, 0) : "no answer");
	json_decref(m);
	EXPECT_EQ(0, shutdown_vmm(self));

	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	n = read(rep[0], seen, sizeof(seen) - 1);
	close(rep[0]);
	ASSERT_LT(0, n);
	seen[n] = '\0';
	/*
	 * One connection to each port, each while it was granted; the
	 * resolver asked.
	 */
	EXPECT_EQ(1, count_char(seen, 'G')) TH_LOG("%s", seen);
	EXPECT_EQ(1, count_char(seen, 'D')) TH_LOG("%s", seen);
	EXPECT_TRUE(strchr(seen, 'Q') != NULL) TH_LOG("%s", seen);
}

/*
 * An http grant intercepts: the sandbox trusts the vmm's CA through its
 * root's bundle (a copy with the CA appended, bound over it), and a root
 * without one is refused in one line, as a VM's init refuses it.
 */
TEST_F(ns, net_trust_ca)
{
	char policy[160], bundle[160];
	const char *extra[] = { "--net", "auto", "--net-policy", policy, NULL };
	struct spawn_result r;
	FILE *f;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	snprintf(policy, sizeof(policy), "%s/policy.json", self->dir);
	f = fopen(policy, "w");
	ASSERT_TRUE(f != NULL);
	fprintf(f, "{\"http\": [{\"host\": \"api.example.test\"}]}\n");
	ASSERT_EQ(0, fclose(f));
	ASSERT_EQ(0, run(self, extra, "true", &r));
	EXPECT_EQ(VMM_ERROR, r.status);
	EXPECT_TRUE(strstr(r.err, "no trust store") != NULL)
	TH_LOG("%s", r.err);

	snprintf(bundle, sizeof(bundle), "%s/root/etc/ssl/certs", self->dir);
	ASSERT_EQ(0, shell("mkdir -p %s && echo '# the image bundle' > "
			   "%s/ca-certificates.crt",
			   bundle, bundle));
	ASSERT_EQ(0, make_image(self));
	ASSERT_EQ(0, run(self, extra,
			 "head -n 2 /etc/ssl/certs/ca-certificates.crt; "
			 "grep -c 'END CERTIFICATE' "
			 "/etc/ssl/certs/ca-certificates.crt",
			 &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_STREQ("# the image bundle\n-----BEGIN CERTIFICATE-----\n1\n",
		     r.out);
}

/* The error's message; "" when the message is no error. */
static const char *err_msg(json_t *m)
{
	const char *s = json_string_value(
		json_object_get(json_object_get(m, "error"), "message"));

	return s ? s : "";
}

/* vm.status's string key ("" when absent). */
static char *status_str(struct tc *t, const char *key, char *out, size_t len)
{
	json_t *m = tc_call(t, 90, "vm.status", NULL);
	const char *v = json_string_value(json_object_get(result(m), key));

	snprintf(out, len, "%s", v ? v : "");
	json_decref(m);
	return out;
}

/* dir/name's content (at most len - 1 bytes), "" when unreadable. */
static char *cg_read(const char *dir, const char *name, char *out, size_t len)
{
	char path[PATH_MAX];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, out, len - 1);
		close(fd);
	}
	out[n > 0 ? n : 0] = '\0';
	return out;
}

/* The number after "key " in a flat keyed file (cgroup.events...). */
static long long cg_key(const char *dir, const char *name, const char *key)
{
	char buf[1024], *p;
	size_t n = strlen(key);

	cg_read(dir, name, buf, sizeof(buf));
	for (p = buf; (p = strstr(p, key)); p += n)
		if ((p == buf || p[-1] == '\n') && p[n] == ' ')
			return atoll(p + n + 1);
	return -1;
}

/*
 * vm.pause and vm.resume freeze and thaw the sandbox's cgroup (the host's
 * cgroup v2 needs no controller for it); twice is EALREADY as for a VM;
 * a paused sandbox shuts down. vm.snapshot is refused, naming the
 * namespace launcher. Skipped where the vmm made no cgroup.
 */
TEST_F(ns, pause_resume_and_no_snapshot)
{
	char cg[PATH_MAX], state[32], *s;
	json_int_t code;
	json_t *m;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	ASSERT_EQ(0, start(self, NULL));
	m = tc_call(&self->t, 10, "vm.snapshot",
		    json_pack("{s:s}", "dir", "/tmp/kiln-ns-no-snapshot"));
	EXPECT_EQ(-32005, err_code(m));
	EXPECT_STREQ("EOPNOTSUPP", err_errno(m));
	EXPECT_TRUE(strstr(err_msg(m), "vm.snapshot: the namespace launcher "
				       "(--isolation namespace) cannot "
				       "snapshot") != NULL)
	TH_LOG("%s", err_msg(m));
	json_decref(m);
	EXPECT_NE(0, access("/tmp/kiln-ns-no-snapshot", F_OK));

	m = tc_call(&self->t, 17, "vm.status", NULL);
	EXPECT_EQ(256, res_int(m, "memoryMiB"));
	EXPECT_EQ(1, res_int(m, "cpus"));
	json_decref(m);
	status_str(&self->t, "cgroup", cg, sizeof(cg));
	if (!cg[0]) {
		m = tc_call(&self->t, 11, "vm.pause", NULL);
		EXPECT_STREQ("EOPNOTSUPP", err_errno(m));
		json_decref(m);
		EXPECT_EQ(0, shutdown_vmm(self));
		SKIP(return, "no cgroup v2 writable here: vm.pause refused");
	}
	m = tc_call(&self->t, 12, "vm.pause", NULL);
	EXPECT_TRUE(m && result(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	EXPECT_EQ(1, cg_key(cg, "cgroup.events", "frozen"));
	EXPECT_STREQ("paused",
		     status_str(&self->t, "state", state, sizeof(state)));
	m = tc_call(&self->t, 13, "vm.pause", NULL);
	EXPECT_EQ(-32005, err_code(m));
	EXPECT_STREQ("EALREADY", err_errno(m));
	EXPECT_STREQ("vm.pause: the sandbox is paused already", err_msg(m));
	json_decref(m);

	m = tc_call(&self->t, 14, "vm.resume", NULL);
	EXPECT_TRUE(m && result(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	EXPECT_EQ(0, cg_key(cg, "cgroup.events", "frozen"));
	EXPECT_STREQ("running",
		     status_str(&self->t, "state", state, sizeof(state)));
	s = run_sh(&self->t, "echo alive", &code);
	EXPECT_STREQ("alive\n", s);
	free(s);
	m = tc_call(&self->t, 15, "vm.resume", NULL);
	EXPECT_STREQ("EALREADY", err_errno(m));
	EXPECT_STREQ("vm.resume: the sandbox is not paused", err_msg(m));
	json_decref(m);

	/* Paused, then shut down: thawed, its agent powers it off. */
	m = tc_call(&self->t, 16, "vm.pause", NULL);
	EXPECT_TRUE(m && result(m));
	json_decref(m);
	EXPECT_EQ(0, shutdown_vmm(self));
	EXPECT_NE(0, access(cg, F_OK));
}

/*
 * The cgroup's limits from --memory and --cpus (vmm/isolate-ns-cgroup.h),
 * and what they stop: a memory hog OOM-killed at memory.max, a fork bomb
 * held at pids.max, the sandbox's agent serving on after each. Needs a
 * cgroup v2 root offering the memory, cpu and pids controllers: the
 * harness's (selftests/kvm/ns_cgroup.sh mounts it). On a host whose v1
 * hierarchies hold them (this development host), what is checked is
 * that the sandbox runs without them and leaves no cgroup behind.
 */
TEST_F(ns, cgroup_limits)
{
	const char *extra[] = { "--memory", "32", "--cpus", "1", NULL };
	char cg[PATH_MAX - 16], buf[256], root[PATH_MAX], *s, *sl;
	long long pid1;
	json_int_t code;
	json_t *m;
	FILE *f;

	if (self->why[0])
		SKIP(return, "%s", self->why);
	ASSERT_EQ(0, start(self, extra));
	status_str(&self->t, "cgroup", cg, sizeof(cg));
	if (!cg[0]) {
		EXPECT_EQ(0, shutdown_vmm(self));
		SKIP(return, "no cgroup v2 hierarchy writable here");
	}
	snprintf(root, sizeof(root), "%s", cg);
	sl = strrchr(root, '/');
	ASSERT_TRUE(sl != NULL);
	*sl = '\0';
	cg_read(root, "cgroup.controllers", buf, sizeof(buf));
	if (!strstr(buf, "memory") || !strstr(buf, "pids") ||
	    !strstr(buf, "cpu")) {
		/*
		 * A host whose v1 hierarchies hold them (this development
		 * host): the sandbox runs without the limits it cannot have,
		 * never with a half-made cgroup (the warning's words are
		 * ns_cgroup's unit test).
		 */
		static const char *const ctl[][2] = { { "memory",
							"memory.max" },
						      { "cpu", "cpu.max" },
						      { "pids", "pids.max" } };
		char path[PATH_MAX];

		TH_LOG("%s/cgroup.controllers offers \"%.*s\": the limits' "
		       "effects are checked in the harness (ns_cgroup.sh)",
		       root, (int)strcspn(buf, "\n"), buf);
		for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
			if (strstr(buf, ctl[i][0]))
				continue;
			snprintf(path, sizeof(path), "%s/%s", cg, ctl[i][1]);
			EXPECT_NE(0, access(path, F_OK)) TH_LOG("%s", path);
		}
		s = run_sh(&self->t, "echo alive", &code);
		EXPECT_STREQ("alive\n", s);
		free(s);
		EXPECT_EQ(0, shutdown_vmm(self));
		EXPECT_NE(0, access(cg, F_OK));
		return;
	}
	EXPECT_STREQ("33554432\n", cg_read(cg, "memory.max", buf, sizeof(buf)));
	EXPECT_STREQ("100000 100000\n",
		     cg_read(cg, "cpu.max", buf, sizeof(buf)));
	EXPECT_STREQ("256\n", cg_read(cg, "pids.max", buf, sizeof(buf)));

	/* 64 MiB touched in a 32 MiB cgroup: the OOM killer ends dd. */
	s = run_sh(&self->t,
		   "dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; "
		   "echo $?",
		   &code);
	EXPECT_STREQ("137\n", s);
	free(s);
	EXPECT_LE(1, cg_key(cg, "memory.events", "oom_kill"));
	s = run_sh(&self->t, "echo alive", &code);
	EXPECT_STREQ("alive\n", s);
	free(s);

	/* A fork bomb: held at pids.max; the host still forks. */
	m = tc_call(&self->t, 20, "spawn",
		    json_pack("{s:[s, s, s]}", "argv", "sh", "-c",
			      "exec 2>/dev/null; b() { b | b & }; b; "
			      "sleep 1000"));
	ASSERT_TRUE(m && result(m));
	json_decref(m);
	/* Until the limit refused a fork (a bound, not a timed check). */
	for (int i = 0; i < 6000 && cg_key(cg, "pids.events", "max") < 1; i++)
		sleep_ms(20);
	EXPECT_LE(1, cg_key(cg, "pids.events", "max"));
	cg_read(cg, "pids.current", buf, sizeof(buf));
	EXPECT_GE(256, atoll(buf)) TH_LOG("pids.current %s", buf);
	EXPECT_LE(200, atoll(buf)) TH_LOG("pids.current %s", buf);
	EXPECT_EQ(0, shell("true"));

	/* Stopped: paused, every task but the agent killed, resumed. */
	m = tc_call(&self->t, 21, "vm.status", NULL);
	pid1 = res_int(m, "sandboxPid");
	json_decref(m);
	ASSERT_LT(1, pid1);
	m = tc_call(&self->t, 22, "vm.pause", NULL);
	EXPECT_TRUE(m && result(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	snprintf(root, sizeof(root), "%s/cgroup.procs", cg);
	f = fopen(root, "re");
	ASSERT_TRUE(f != NULL);
	for (long long p; fscanf(f, "%lld", &p) == 1;)
		if (p != pid1)
			kill((pid_t)p, SIGKILL);
	fclose(f);
	m = tc_call(&self->t, 23, "vm.resume", NULL);
	EXPECT_TRUE(m && result(m)) TH_LOG("%s", err_msg(m));
	json_decref(m);
	s = run_sh(&self->t, "echo alive", &code);
	EXPECT_STREQ("alive\n", s);
	free(s);
	EXPECT_EQ(0, shutdown_vmm(self));
	EXPECT_NE(0, access(cg, F_OK));
}

TEST_HARNESS_MAIN
