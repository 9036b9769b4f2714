// SPDX-License-Identifier: GPL-2.0
/*
 * The operator's view of a VM, booted on KVM (issue 16): the boot's
 * identity seen from the guest (hostname and working directory, their
 * defaults and given values, through exec), `vmm facts` without a VM
 * giving exactly the config facts vm.facts gives on the running VM for
 * the same options, a detached VM's console log next to its control
 * socket holding the boot's output, and the console log stopping at its
 * cap however much the guest prints, and vm.metrics' counters moving with
 * a known workload (N execs, M bytes written to a bind and a memory
 * mount) in vmmctl metrics and in the --metrics file; and ten detached
 * VMs under one operator, followed, measured, one of them crashed, all
 * shut down. The initramfs guest
 * (busybox) with the agent; KILN_VMMCTL names the client (build/vmmctl).
 */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define READY_SECS (BOOT_TIMEOUT * 3 / 4)
#define MAX_ARGV   48
#define CONSOLE_CAP \
	4096 /* --console-log-max-bytes in the cap test: its least */
#define CONSOLE_KEEP 2
#define PRINTED	     25000 /* bytes the guest prints at the cap: each a UART exit */
#define METRIC_EXECS 5	   /* execs in the metrics test */
#define METRIC_BYTES (1 << 20) /* bytes it writes to each mount */

struct vm {
	char dir[64];
	char sock[128];
	char pidfile[128];
	char log[128]; /* a foreground vmm's stdout and stderr */
	char vmmctl[256];
	pid_t vmm;	/* foreground; 0 when detached or gone */
	pid_t detached; /* from the pid file */
};

static void vm_paths(struct vm *v)
{
	memset(v, 0, sizeof(*v));
	test_tmp_name(v->dir, sizeof(v->dir), "kiln-op-XXXXXX");
	if (!mkdtemp(v->dir))
		abort();
	snprintf(v->sock, sizeof(v->sock), "%s/vm1.sock", v->dir);
	snprintf(v->pidfile, sizeof(v->pidfile), "%s/vm1.pid", v->dir);
	snprintf(v->log, sizeof(v->log), "%s/vmm.log", v->dir);
	snprintf(v->vmmctl, sizeof(v->vmmctl), "%s",
		 env_or("KILN_VMMCTL", "build/vmmctl"));
}

/* argv: vmm CMD --kernel --initrd OPTS... (CMD "start" or "facts"). */
static void vmm_argv(const struct guest *g, const char *cmd,
		     const char *const opts[], const char *argv[MAX_ARGV])
{
	int i = 0;

	argv[i++] = g->vmm;
	argv[i++] = cmd;
	argv[i++] = "--kernel";
	argv[i++] = g->vmlinux;
	argv[i++] = "--initrd";
	argv[i++] = g->initrd;
	for (; opts && *opts && i < MAX_ARGV - 1; opts++)
		argv[i++] = *opts;
	argv[i] = NULL;
}

static int ctl(struct vm *v, const char *const args[], struct spawn_result *r)
{
	const char *argv[32];
	int i = 0;

	argv[i++] = v->vmmctl;
	for (; *args && i < 31; args++)
		argv[i++] = *args;
	argv[i] = NULL;
	return spawn__run(argv, NULL, r);
}

#define CTL(v, r, ...)                                                         \
	do {                                                                   \
		ASSERT_EQ(0, ctl(v, ARGS(__VA_ARGS__), r));                    \
		TH_LOG("vmmctl: exit %d, out %.300s, err %.300s", (r)->status, \
		       (r)->out, (r)->err);                                    \
	} while (0)

/* argv of `vmm CMD` with OPTS and the test's control socket. */
static void start_argv(const struct guest *g, struct vm *v, const char *cmd,
		       const char *const opts[], bool detach,
		       const char *argv[MAX_ARGV])
{
	const char *all[MAX_ARGV];
	int i = 0;

	for (; opts && *opts && i < MAX_ARGV - 16; opts++)
		all[i++] = *opts;
	all[i++] = "--control-socket";
	all[i++] = v->sock;
	all[i++] = "--agent-timeout-ms";
	all[i++] = "45000";
	if (detach) {
		all[i++] = "--detach";
		all[i++] = "--pid-file";
		all[i++] = v->pidfile;
	}
	all[i] = NULL;
	vmm_argv(g, cmd, all, argv);
}

/*
 * vmm start OPTS --control-socket SOCK, in the foreground (its output in
 * v->log) or with --detach --pid-file; true once the agent answers.
 */
static bool vm_start(struct __test_metadata *_metadata, struct vm *v,
		     const char *const opts[], bool detach)
{
	const char *argv[MAX_ARGV];
	struct spawn_result r;
	struct guest g;
	char buf[32] = "";
	FILE *f;

	guest_paths(&g);
	start_argv(&g, v, "start", opts, detach, argv);
	if (detach) {
		if (spawn__run(argv, NULL, &r))
			return false;
		TH_LOG("start --detach: exit %d, err %.600s", r.status, r.err);
		check_harness_flake(&r);
		f = fopen(v->pidfile, "r");
		if (f && fgets(buf, sizeof(buf), f))
			v->detached = atoi(buf);
		if (f)
			fclose(f);
		return r.status == 0 && v->detached > 0;
	}
	v->vmm = spawn_logged(argv, v->log);
	if (v->vmm < 0)
		return false;
	return vmm_wait_ready(_metadata, &v->vmm, v->sock, v->log, READY_SECS);
}

/* The detached vmm (not our child) is gone: its /proc entry with it. */
static bool gone(pid_t pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	return stat(path, &st) != 0;
}

/* vm.shutdown, then the vmm's end: 0, or what went wrong. */
static int vm_stop(struct vm *v)
{
	struct spawn_result r;
	int i;

	if (ctl(v, ARGS("shutdown", v->sock), &r) || r.status)
		return -1;
	if (v->vmm > 0) {
		i = wait_exit(v->vmm, 60);
		v->vmm = 0;
		return i;
	}
	for (i = 0; i < 600 && !gone(v->detached); i++)
		usleep(100000);
	return gone(v->detached) ? 0 : -1;
}

static void vm_cleanup(struct vm *v)
{
	char cmd[128];

	if (v->vmm > 0) {
		kill(v->vmm, SIGKILL);
		waitpid(v->vmm, NULL, 0);
	}
	if (v->detached > 0 && !gone(v->detached))
		kill(v->detached, SIGKILL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", v->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", v->dir);
}

/* exec CMD... in the guest: its stdout, last newline dropped. */
static const char *guest_line(struct __test_metadata *_metadata, struct vm *v,
			      const char *const args[], struct spawn_result *r)
{
	const char *argv[16];
	int i = 0;

	argv[i++] = "exec";
	for (; *args && i < 15; args++)
		argv[i++] = *args;
	argv[i] = NULL;
	if (ctl(v, argv, r))
		return "";
	TH_LOG("exec: exit %d, out %.200s, err %.200s", r->status, r->out,
	       r->err);
	if (r->out_len && r->out[r->out_len - 1] == '\n')
		r->out[--r->out_len] = '\0';
	return r->out;
}

/* Is {source, topic, "is", value} among the facts (vmmctl's output)? */
static bool has_fact(const char *text, const char *source, const char *topic,
		     const char *value)
{
	json_t *facts = json_loads(text, 0, NULL), *f;
	json_t *want =
		json_pack("{s:s, s:s, s:s, s:s}", "source", source, "topic",
			  topic, "relation", "is", "value", value);
	bool found = false;
	size_t i;

	json_array_foreach(facts, i, f) found |= json_equal(f, want) == 1;
	json_decref(want);
	json_decref(facts);
	return found;
}

static bool can_boot(struct __test_metadata *_metadata)
{
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
	return true;
}

/* No --hostname, no --cwd: "sandbox" and "/" from inside the guest. */
TEST_TIMEOUT(hostname_and_cwd_defaults, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	ASSERT_TRUE(vm_start(_metadata, &v, NULL, false));
	EXPECT_STREQ("sandbox", guest_line(_metadata, &v,
					   ARGS(v.sock, "--", "hostname"), &r));
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("/",
		     guest_line(_metadata, &v, ARGS(v.sock, "--", "pwd"), &r));
	EXPECT_EQ(0, r.status);
	EXPECT_EQ(0, vm_stop(&v));
	vm_cleanup(&v);
}

/*
 * --hostname and --cwd on a memory mount: both seen by exec, a request's
 * own cwd still wins, and the guest's facts say the hostname too.
 */
TEST_TIMEOUT(hostname_and_cwd_given, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	ASSERT_TRUE(vm_start(_metadata, &v,
			     ARGS("--hostname", "agent-42", "--cwd",
				  "/workspace", "--mount", "/workspace=memory"),
			     false));
	EXPECT_STREQ(
		"agent-42",
		guest_line(_metadata, &v, ARGS(v.sock, "--", "hostname"), &r));
	EXPECT_STREQ("agent-42", guest_line(_metadata, &v,
					    ARGS(v.sock, "--", "cat",
						 "/proc/sys/kernel/hostname"),
					    &r));
	/* Where Debian's tools look for it (hostname -f, sudo). */
	EXPECT_STREQ("agent-42",
		     guest_line(_metadata, &v,
				ARGS(v.sock, "--", "cat", "/etc/hostname"),
				&r));
	EXPECT_NE(
		NULL,
		strstr(guest_line(_metadata, &v,
				  ARGS(v.sock, "--", "cat", "/etc/hosts"), &r),
		       "127.0.1.1\tagent-42"));
	EXPECT_STREQ("/workspace",
		     guest_line(_metadata, &v, ARGS(v.sock, "--", "pwd"), &r));
	EXPECT_STREQ("/tmp",
		     guest_line(_metadata, &v,
				ARGS("--cwd", "/tmp", v.sock, "--", "pwd"),
				&r));
	CTL(&v, &r, "facts", v.sock);
	EXPECT_TRUE(has_fact(r.out, "guest", "hostname", "agent-42"));
	EXPECT_TRUE(has_fact(r.out, "config", "hostname", "agent-42"));
	EXPECT_TRUE(has_fact(r.out, "config", "cwd", "/workspace"));
	EXPECT_EQ(0, vm_stop(&v));
	vm_cleanup(&v);
}

/*
 * --hostname and --cwd with nothing else per boot (no mount, no command,
 * no interception CA): the guest still gets both, under `start` in the
 * foreground and with --detach alike (the archive that carries them was
 * once built only for a command, a mount or a CA).
 */
static void identity_without_mounts(struct __test_metadata *_metadata,
				    bool detach)
{
	struct spawn_result r;
	struct vm v;

	vm_paths(&v);
	ASSERT_TRUE(vm_start(_metadata, &v,
			     ARGS("--hostname", "agent-43", "--cwd", "/tmp"),
			     detach));
	EXPECT_STREQ(
		"agent-43",
		guest_line(_metadata, &v, ARGS(v.sock, "--", "hostname"), &r));
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("agent-43",
		     guest_line(_metadata, &v,
				ARGS(v.sock, "--", "cat", "/etc/hostname"),
				&r));
	EXPECT_STREQ("/tmp",
		     guest_line(_metadata, &v, ARGS(v.sock, "--", "pwd"), &r));
	EXPECT_EQ(0, r.status);
	CTL(&v, &r, "facts", v.sock);
	EXPECT_TRUE(has_fact(r.out, "guest", "hostname", "agent-43"));
	EXPECT_EQ(0, vm_stop(&v));
	vm_cleanup(&v);
}

TEST_TIMEOUT(hostname_and_cwd_without_mounts, BOOT_TIMEOUT)
{
	if (!can_boot(_metadata))
		return;
	identity_without_mounts(_metadata, false);
}

TEST_TIMEOUT(hostname_and_cwd_without_mounts_detached, BOOT_TIMEOUT)
{
	if (!can_boot(_metadata))
		return;
	identity_without_mounts(_metadata, true);
}

/* `vmm run` with a command and no mount: the command sees both too. */
TEST_TIMEOUT(hostname_and_cwd_under_run, BOOT_TIMEOUT)
{
	const char *argv[MAX_ARGV];
	struct spawn_result r;
	struct guest g;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	guest_paths(&g);
	vm_paths(&v);
	vmm_argv(&g, "run",
		 ARGS("--hostname", "agent-44", "--cwd", "/tmp", "--", "sh",
		      "-c", "echo $(hostname) $(pwd)"),
		 argv);
	ASSERT_EQ(0, spawn__run(argv, NULL, &r));
	EXPECT_EQ(0, r.status) TH_LOG("vmm run: %.600s", r.err);
	EXPECT_NE(NULL, strstr(r.out, "agent-44 /tmp"))
	TH_LOG("vmm run printed %.600s", r.out);
	vm_cleanup(&v);
}

/*
 * `vmm facts` with the options a VM is started with prints exactly the
 * config facts vm.facts gives on that VM: same triples, same order.
 */
TEST_TIMEOUT(offline_facts_equal_booted_config_facts, BOOT_TIMEOUT)
{
	const char *argv[MAX_ARGV];
	json_t *offline, *booted, *config, *f;
	struct spawn_result r;
	char image[300];
	struct guest g;
	struct vm v;
	size_t i;

	if (!can_boot(_metadata))
		return;
	guest_paths(&g);
	vm_paths(&v);
	snprintf(image, sizeof(image), "%s/kiln-test.json", g.images);
	{
		const char *const opts[] = {
			"--cpus",
			"2",
			"--memory",
			"320",
			"--hostname",
			"facts-vm",
			"--cwd",
			"/srv",
			"--rootfs",
			image,
			"--rootfs-mode",
			"ephemeral",
			"--mount",
			"/srv=memory",
			NULL,
		};

		/* Before the boot, with every option `vmm start` gets. */
		start_argv(&g, &v, "facts", opts, false, argv);
		ASSERT_EQ(0, spawn__run(argv, NULL, &r));
		ASSERT_EQ(0, r.status) TH_LOG("vmm facts: %s", r.err);
		offline = json_loads(r.out, 0, NULL);
		ASSERT_TRUE(json_is_array(offline)) TH_LOG("%s", r.out);
		ASSERT_TRUE(vm_start(_metadata, &v, opts, false));
	}
	CTL(&v, &r, "facts", v.sock);
	booted = json_loads(r.out, 0, NULL);
	ASSERT_TRUE(json_is_array(booted));
	config = json_array();
	json_array_foreach(booted, i, f) if (
		!strcmp(json_string_value(json_object_get(f, "source")) ?: "",
			"config")) json_array_append(config, f);
	EXPECT_LT(8, json_array_size(config));
	EXPECT_TRUE(json_equal(offline, config))
	TH_LOG("offline %s", json_dumps(offline, JSON_COMPACT));
	json_decref(config);
	json_decref(booted);
	json_decref(offline);
	EXPECT_EQ(0, vm_stop(&v));
	vm_cleanup(&v);
}

/* A file's whole contents, NUL-terminated (NULL: none); free() it. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *buf;

	if (!f)
		return NULL;
	buf = malloc(1 << 20);
	*len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	if (buf)
		buf[*len] = '\0';
	fclose(f);
	return buf;
}

static long long file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : (long long)st.st_size;
}

/* The console log at path holds what (its start in the TAP log if not). */
static void expect_console_has(struct __test_metadata *_metadata,
			       const char *path, const char *what)
{
	size_t len;
	char *text = slurp(path, &len);

	ASSERT_NE(NULL, text) TH_LOG("no console log at %s", path);
	EXPECT_NE(NULL, strstr(text, what))
	TH_LOG("console log: %.1000s", text);
	free(text);
}

/*
 * start --detach without --console-log: SOCKET less ".sock" plus
 * ".console.log" holds the boot's output (init's boot mark) and what the
 * guest prints on its console after the detach, up to its power-off.
 */
TEST_TIMEOUT(detached_console_log_holds_the_boot, BOOT_TIMEOUT)
{
	char path[160];
	struct spawn_result r;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	snprintf(path, sizeof(path), "%s/vm1.console.log", v.dir);
	ASSERT_TRUE(vm_start(_metadata, &v, ARGS("--cmdline", "kiln.bootmark"),
			     true));
	expect_console_has(_metadata, path, "kiln-init: boot mark");
	CTL(&v, &r, "exec", v.sock, "--", "sh", "-c",
	    "echo after-detach-marker >/dev/console");
	EXPECT_EQ(0, r.status);
	EXPECT_EQ(0, vm_stop(&v));
	expect_console_has(_metadata, path, "after-detach-marker");
	vm_cleanup(&v);
}

/*
 * A detached VM whose guest kernel panics (sysrq's crash, as a guest
 * driver bug would): the vmm ends on its own, and the console log next
 * to the socket keeps the guest's last words, the panic line.
 */
TEST_TIMEOUT(detached_guest_panic_leaves_its_last_words, BOOT_TIMEOUT)
{
	char path[160];
	struct spawn_result r;
	size_t len;
	char *text;
	struct vm v;
	int i;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	snprintf(path, sizeof(path), "%s/vm1.console.log", v.dir);
	ASSERT_TRUE(vm_start(_metadata, &v, NULL, true));
	/* Its answer never comes: the guest is gone before it could. */
	ctl(&v,
	    ARGS("exec", v.sock, "--", "sh", "-c",
		 "echo c >/proc/sysrq-trigger"),
	    &r);
	for (i = 0; i < 600 && !gone(v.detached); i++)
		usleep(100000);
	EXPECT_TRUE(gone(v.detached)) TH_LOG("the vmm outlived its guest");
	text = slurp(path, &len);
	ASSERT_NE(NULL, text) TH_LOG("no console log at %s", path);
	EXPECT_NE(NULL, strstr(text, "Kernel panic - not syncing"))
	TH_LOG("console log: %.3000s", len > 3000 ? text + len - 3000 : text);
	free(text);
	vm_cleanup(&v);
}

/*
 * A detached start whose guest never runs the agent (kiln.agent=off, the
 * user's word last; with no agent and no command the init serves a shell
 * on the console, whose input here is a FIFO that never ends): once
 * --ready-timeout-ms has passed, the VM process logs its devices' state
 * and stops, and vmm start returns 125 with the line that says why, the
 * pid file gone. The guest booted (its console log has the boot mark):
 * only the agent's answer was missing. However slow the machine, that
 * answer never comes.
 */
TEST_TIMEOUT(detached_start_gives_up_on_a_silent_guest, BOOT_TIMEOUT)
{
	const char *argv[MAX_ARGV];
	struct spawn_result r;
	struct guest g;
	char path[160], fifo[160];
	struct stat st;
	struct vm v;
	int hold;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	snprintf(path, sizeof(path), "%s/vm1.console.log", v.dir);
	snprintf(fifo, sizeof(fifo), "%s/console.in", v.dir);
	ASSERT_EQ(0, mkfifo(fifo, 0600));
	/* A writer that never writes: the console's input never ends. */
	hold = open(fifo, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, hold);
	guest_paths(&g);
	start_argv(&g, &v, "start",
		   ARGS("--cmdline", "kiln.bootmark kiln.agent=off",
			"--ready-timeout-ms", "20000"),
		   true, argv);
	ASSERT_EQ(0, spawn__run(argv, fifo, &r));
	close(hold);
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status) TH_LOG("err %.2000s", r.err);
	EXPECT_NE(NULL, strstr(r.err, "the guest agent did not answer within "
				      "20000 ms of the start "
				      "(--ready-timeout-ms)"))
	TH_LOG("err %.2000s", r.err);
	/* The main thread's report of the devices, before the stop. */
	EXPECT_NE(NULL, strstr(r.err, "virtio-vsock"))
	TH_LOG("err %.2000s", r.err);
	EXPECT_NE(0, stat(v.pidfile, &st)) TH_LOG("pid file left");
	expect_console_has(_metadata, path, "kiln-init: boot mark");
	vm_cleanup(&v);
}

/*
 * A detached start whose guest powers off before any agent answered (no
 * agent, and the console shell's input ends at once): the VM process has
 * nothing to report, so vmm start says it, 125, the pid file gone.
 */
TEST_TIMEOUT(detached_start_says_the_guest_powered_off, BOOT_TIMEOUT)
{
	const char *argv[MAX_ARGV];
	struct spawn_result r;
	struct guest g;
	struct stat st;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	guest_paths(&g);
	start_argv(&g, &v, "start", ARGS("--cmdline", "kiln.agent=off"), true,
		   argv);
	ASSERT_EQ(0, spawn__run(argv, NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status) TH_LOG("err %.2000s", r.err);
	EXPECT_NE(NULL, strstr(r.err, "vmm start: the guest powered off "
				      "before its agent answered"))
	TH_LOG("err %.2000s", r.err);
	EXPECT_NE(0, stat(v.pidfile, &st)) TH_LOG("pid file left");
	vm_cleanup(&v);
}

/*
 * A guest that prints far more than the cap: the live log never passes
 * it, the rotated ones are exactly the cap, and there are no more of them
 * than --console-log-keep: the disk holds at most (keep + 1) * cap.
 */
TEST_TIMEOUT(console_log_stops_at_its_cap, BOOT_TIMEOUT)
{
	char path[160], rotated[170], cap[16], keep[8], cmd[128];
	struct spawn_result r;
	long long total = 0, n;
	struct vm v;
	int i;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	snprintf(path, sizeof(path), "%s/capped.log", v.dir);
	snprintf(cap, sizeof(cap), "%d", CONSOLE_CAP);
	snprintf(keep, sizeof(keep), "%d", CONSOLE_KEEP);
	ASSERT_TRUE(
		vm_start(_metadata, &v,
			 ARGS("--console-log", path, "--console-log-max-bytes",
			      cap, "--console-log-keep", keep),
			 true));
	snprintf(cmd, sizeof(cmd),
		 "head -c %d /dev/zero | tr '\\0' x >/dev/console", PRINTED);
	CTL(&v, &r, "exec", "--timeout-ms", "240000", v.sock, "--", "sh", "-c",
	    cmd);
	EXPECT_EQ(0, r.status);
	/* The power-off drains the console; the vmm writes what it holds. */
	EXPECT_EQ(0, vm_stop(&v));
	n = file_size(path);
	EXPECT_LE(0, n);
	EXPECT_LE(n, CONSOLE_CAP);
	total += n;
	for (i = 1; i <= CONSOLE_KEEP + 1; i++) {
		snprintf(rotated, sizeof(rotated), "%s.%d", path, i);
		n = file_size(rotated);
		if (i <= CONSOLE_KEEP) {
			EXPECT_EQ(CONSOLE_CAP, n) TH_LOG("%s", rotated);
			total += n;
		} else {
			EXPECT_EQ(-1, n) TH_LOG("%s should not exist", rotated);
		}
	}
	EXPECT_LE(total, (CONSOLE_KEEP + 1) * CONSOLE_CAP);
	EXPECT_LT(total, PRINTED);
	vm_cleanup(&v);
}

/* vmmctl metrics: the object, or NULL. */
static json_t *metrics(struct __test_metadata *_metadata, struct vm *v)
{
	struct spawn_result r;

	if (ctl(v, ARGS("metrics", v->sock), &r) || r.status) {
		TH_LOG("vmmctl metrics: exit %d, err %.300s", r.status, r.err);
		return NULL;
	}
	return json_loads(r.out, 0, NULL);
}

static json_int_t jint(const json_t *o, const char *member, const char *key)
{
	if (member)
		o = json_object_get(o, member);
	return json_integer_value(json_object_get(o, key));
}

/* The device object of the virtio-fs device for the mount at guest. */
static const json_t *mount_dev(const json_t *m, const char *guest)
{
	const json_t *d;
	size_t i;

	json_array_foreach(json_object_get(m, "devices"), i, d)
	{
		const char *at = json_string_value(json_object_get(d, "mount"));

		if (at && !strcmp(at, guest))
			return d;
	}
	return NULL;
}

/* Every vCPU's exits, all kinds. */
static json_int_t all_exits(const json_t *m)
{
	json_int_t n = 0;
	const json_t *c;
	size_t i;

	json_array_foreach(json_object_get(m, "vcpus"), i, c) n +=
		jint(json_object_get(c, "exits"), NULL, "total");
	return n;
}

/*
 * The --metrics file's lines from byte `from` on, each parsed (NULL: a
 * line that is not JSON); *n receives how many.
 */
static json_t **file_lines(const char *path, long long from, size_t *n)
{
	size_t len, cap = 0;
	json_t **lines = NULL;
	char *text = slurp(path, &len), *p, *nl;

	*n = 0;
	if (!text || (size_t)from > len) {
		free(text);
		return NULL;
	}
	for (p = text + from; (nl = strchr(p, '\n')); p = nl + 1) {
		*nl = '\0';
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			lines = realloc(lines, cap * sizeof(*lines));
			if (!lines)
				abort();
		}
		lines[(*n)++] = json_loads(p, 0, NULL);
	}
	free(text);
	return lines;
}

static void free_lines(json_t **lines, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_decref(lines[i]);
	free(lines);
}

/*
 * The start-up phases of vm.metrics (vmm/trace-startup.h), every one a
 * VM with an agent reaches, in their order; the first output, if the
 * guest printed any, no earlier than the first KVM_RUN.
 */
static const char *const startup_order[] = {
	"start", "options",  "kvm",	 "devices",    "loaded",
	"built", "released", "firstRun", "agentReady",
};

static void check_startup(struct __test_metadata *_metadata, const json_t *m)
{
	const json_t *s = json_object_get(m, "startup");
	json_int_t prev = 0, us;

	ASSERT_TRUE(json_is_object(s));
	for (size_t i = 0; i < ARRAY_SIZE(startup_order); i++) {
		const char *p = startup_order[i];

		ASSERT_TRUE(json_is_integer(json_object_get(s, p)))
		TH_LOG("startup.%s missing", p);
		us = jint(s, NULL, p);
		EXPECT_LE(prev, us)
		TH_LOG("startup.%s before the one before", p);
		prev = us;
	}
	EXPECT_EQ(0, jint(s, NULL, "start"));
	if (json_object_get(s, "firstOutput"))
		EXPECT_LE(jint(s, NULL, "firstRun"),
			  jint(s, NULL, "firstOutput"));
	EXPECT_EQ(NULL, json_object_get(s, "powerOff"));
}

/*
 * --trace-startup FILE once the vmm exited: one JSON line per phase, in
 * order, start to exit, the tear-down's three last.
 */
static void check_trace_file(struct __test_metadata *_metadata,
			     const char *file)
{
	json_t **lines;
	json_int_t prev = -1;
	const char *last = NULL;
	bool off = false, drained = false;
	size_t n;

	lines = file_lines(file, 0, &n);
	ASSERT_LE(ARRAY_SIZE(startup_order) + 3, n);
	for (size_t i = 0; i < n; i++) {
		ASSERT_NE(NULL, lines[i]) TH_LOG("trace line %zu", i);
		last = json_string_value(json_object_get(lines[i], "phase"));
		ASSERT_NE(NULL, last);
		/* Written in phase order: the stamps too, but for output. */
		if (strcmp(last, "firstOutput") && strcmp(last, "agentReady")) {
			EXPECT_LE(prev, jint(lines[i], NULL, "us"))
			TH_LOG("%s before the phase before it", last);
			prev = jint(lines[i], NULL, "us");
		}
		off |= !strcmp(last, "powerOff");
		drained |= !strcmp(last, "drained");
	}
	EXPECT_STREQ("start",
		     json_string_value(json_object_get(lines[0], "phase")));
	EXPECT_STREQ("exit", last);
	EXPECT_TRUE(off);
	EXPECT_TRUE(drained);
	free_lines(lines, n);
}

/*
 * N execs make the agent's exec count exactly N higher; M bytes written
 * by dd to a bind mount add at least M to that device's bytes from the
 * guest, and to a memory mount at least M to its bytes in use; the vCPUs
 * exited and ran. The --metrics file meanwhile gets lines, each one
 * whole JSON, counters never going back, the ones after the workload
 * showing it (waited for, not timed), the last one written at the end.
 */
TEST_TIMEOUT(metrics_move_with_a_known_workload, BOOT_TIMEOUT)
{
	char file[160], share[160], mount[200], dd[160], trace[160];
	json_t *m0, *m1, **lines;
	const json_t *d0, *d1;
	long long before_size;
	struct spawn_result r;
	json_int_t execs0;
	size_t n, i;
	struct vm v;
	bool seen;

	if (!can_boot(_metadata))
		return;
	vm_paths(&v);
	snprintf(file, sizeof(file), "%s/metrics.jsonl", v.dir);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", v.dir);
	snprintf(share, sizeof(share), "%s/share", v.dir);
	ASSERT_EQ(0, mkdir(share, 0755));
	snprintf(mount, sizeof(mount), "/mnt/share=bind:%s", share);
	ASSERT_TRUE(vm_start(_metadata, &v,
			     ARGS("--mount", mount, "--mount",
				  "/mnt/mem=memory:8MiB", "--metrics", file,
				  "--metrics-interval-ms", "100",
				  "--trace-startup", trace),
			     false));
	/* A line exists before the workload (waited for). */
	for (i = 0; i < 600 && file_size(file) <= 0; i++)
		usleep(100000);
	before_size = file_size(file);
	ASSERT_LT(0, before_size);

	m0 = metrics(_metadata, &v);
	ASSERT_NE(NULL, m0);
	/* vmmctl exec streams its output: each is a "spawn" to the API. */
	execs0 = jint(m0, "agent", "spawns");
	for (i = 0; i < METRIC_EXECS; i++) {
		CTL(&v, &r, "exec", v.sock, "--", "true");
		EXPECT_EQ(0, r.status);
	}
	m1 = metrics(_metadata, &v);
	ASSERT_NE(NULL, m1);
	EXPECT_EQ(execs0 + METRIC_EXECS, jint(m1, "agent", "spawns"));
	check_startup(_metadata, m1);
	EXPECT_EQ(jint(m0, "agent", "exits") + METRIC_EXECS,
		  jint(m1, "agent", "exits"));
	EXPECT_LE(jint(m0, "agent", "connections") + METRIC_EXECS,
		  jint(m1, "agent", "connections"));
	json_decref(m1);

	snprintf(dd, sizeof(dd),
		 "dd if=/dev/zero of=/mnt/share/f bs=65536 count=%d && "
		 "dd if=/dev/zero of=/mnt/mem/f bs=65536 count=%d && sync",
		 METRIC_BYTES / 65536, METRIC_BYTES / 65536);
	CTL(&v, &r, "exec", v.sock, "--", "sh", "-c", dd);
	EXPECT_EQ(0, r.status);
	m1 = metrics(_metadata, &v);
	ASSERT_NE(NULL, m1);
	d0 = mount_dev(m0, "/mnt/share");
	d1 = mount_dev(m1, "/mnt/share");
	ASSERT_NE(NULL, d0);
	ASSERT_NE(NULL, d1);
	EXPECT_STREQ("virtio-fs",
		     json_string_value(json_object_get(d1, "type")));
	EXPECT_LE(jint(d0, NULL, "bytesFromGuest") + METRIC_BYTES,
		  jint(d1, NULL, "bytesFromGuest"));
	EXPECT_LT(jint(d0, NULL, "requests"), jint(d1, NULL, "requests"));
	d1 = mount_dev(m1, "/mnt/mem");
	ASSERT_NE(NULL, d1);
	EXPECT_LE(METRIC_BYTES, jint(d1, "memory", "bytes"));
	EXPECT_EQ(8 << 20, jint(d1, "memory", "limitBytes"));
	EXPECT_LT(all_exits(m0), all_exits(m1));
	EXPECT_LT(0, jint(json_array_get(json_object_get(m1, "vcpus"), 0), NULL,
			  "cpuNs"));
	EXPECT_LT(0, jint(m1, "process", "anonBytes"));
	EXPECT_LE(jint(m1, "process", "anonBytes"),
		  jint(m1, "process", "rssBytes"));

	/* A line showing the execs follows the size taken before them. */
	seen = false;
	for (i = 0; i < 600 && !seen; i++) {
		lines = file_lines(file, before_size, &n);
		for (size_t j = 0; j < n && !seen; j++)
			seen = jint(lines[j], "agent", "spawns") >=
			       execs0 + METRIC_EXECS;
		free_lines(lines, n);
		if (!seen)
			usleep(100000);
	}
	EXPECT_TRUE(seen);
	EXPECT_EQ(0, vm_stop(&v));
	check_trace_file(_metadata, trace);

	/* Whole lines, never going back; the last has everything. */
	lines = file_lines(file, 0, &n);
	ASSERT_LE(2, n);
	for (i = 0; i < n; i++) {
		ASSERT_NE(NULL, lines[i]) TH_LOG("line %zu is not JSON", i);
		if (!i)
			continue;
		EXPECT_LE(jint(lines[i - 1], "agent", "spawns"),
			  jint(lines[i], "agent", "spawns"));
		EXPECT_LE(all_exits(lines[i - 1]), all_exits(lines[i]));
	}
	EXPECT_LE(execs0 + METRIC_EXECS + 1,
		  jint(lines[n - 1], "agent", "spawns"));
	EXPECT_LT(jint(lines[0], "agent", "spawns"),
		  jint(lines[n - 1], "agent", "spawns"));
	free_lines(lines, n);
	json_decref(m0);
	json_decref(m1);
	vm_cleanup(&v);
}

/* ---- ten detached VMs under one operator ----------------------------- */

#define FLEET	    10
#define FLEET_PANIC 6	  /* the one whose guest panics */
#define FLEET_MEM   "128" /* MiB: the initramfs guest boots in it */
/*
 * Ten boots share the harness's two emulated CPUs: every wait is for
 * something to happen, bounded only so that a lost VM ends the test.
 */
#define FLEET_WAIT_SECS (BOOT_TIMEOUT * 3)
#define FLEET_TEST_SECS (BOOT_TIMEOUT * 4)
/* Every wait ends this long before the test's timeout: the teardown's. */
#define FLEET_TEARDOWN_SECS 60
#define FLEET_MAX_EVENTS    64

struct member {
	char sock[128], console[128], pidfile[128], log[128];
	char startlog[128], events[128], panicked[128];
	pid_t start;	/* vmm start --detach, until it returns */
	pid_t vmm;	/* the VM's process: ours to reap (a subreaper) */
	pid_t follower; /* vmmctl events --since 0 SOCK */
	pid_t crasher;	/* the exec that panics the guest */
};

FIXTURE(fleet)
{
	time_t end; /* no wait goes past it */
	char dir[64];
	char vmmctl[256];
	struct member m[FLEET];
};

/*
 * The test is the subreaper of what it starts: a detached vmm's parent
 * (`vmm start`) exits once the agent answers, and the vmm becomes the
 * test's child, whose exit status it can wait for.
 */
FIXTURE_SETUP(fleet)
{
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0));
	test_tmp_name(self->dir, sizeof(self->dir), "kiln-fleet-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->vmmctl, sizeof(self->vmmctl), "%s",
		 env_or("KILN_VMMCTL", "build/vmmctl"));
	for (int i = 0; i < FLEET; i++) {
		struct member *m = &self->m[i];
		const char *d = self->dir;

		snprintf(m->sock, sizeof(m->sock), "%s/vm%d.sock", d, i);
		snprintf(m->console, sizeof(m->console), "%s/vm%d.console.log",
			 d, i);
		snprintf(m->pidfile, sizeof(m->pidfile), "%s/vm%d.pid", d, i);
		snprintf(m->log, sizeof(m->log), "%s/vm%d.vmm.log", d, i);
		snprintf(m->startlog, sizeof(m->startlog), "%s/vm%d.start", d,
			 i);
		snprintf(m->events, sizeof(m->events), "%s/vm%d.events", d, i);
		snprintf(m->panicked, sizeof(m->panicked), "%s/vm%d.crash", d,
			 i);
	}
	self->end = time(NULL) + FLEET_TEST_SECS - FLEET_TEARDOWN_SECS;
}

/*
 * A wait's deadline: SECS from now, but never past the fleet's end, so
 * that a lost VM fails the test in time for the teardown to kill the
 * detached vmms (the harness's timeout kills only the process group).
 */
static time_t fleet_deadline(const FIXTURE_DATA(fleet) * self, int secs)
{
	time_t t = time(NULL) + secs;

	return t < self->end ? t : self->end;
}

static void fleet_kill(pid_t *pid)
{
	if (*pid <= 0)
		return;
	kill(*pid, SIGKILL);
	waitpid(*pid, NULL, 0);
	*pid = 0;
}

/*
 * Whatever else is our child: a vmm whose pid file was not read yet
 * (its `vmm start` killed above), anything orphaned below us.
 */
static void fleet_kill_orphans(void)
{
	DIR *d = opendir("/proc");
	char path[64], line[512], *p;
	struct dirent *e;
	FILE *f;

	while (d && (e = readdir(d))) {
		pid_t pid = atoi(e->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		f = fopen(path, "r");
		if (!f)
			continue;
		p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
		fclose(f);
		/* ") S PPID": state, then the parent. */
		if (p && atoi(p + 4) == getpid())
			fleet_kill(&pid);
	}
	if (d)
		closedir(d);
}

/* Every path ends here: whatever still runs is killed, the dir goes. */
FIXTURE_TEARDOWN(fleet)
{
	char cmd[128];

	for (int i = 0; i < FLEET; i++) {
		struct member *m = &self->m[i];

		fleet_kill(&m->start);
		fleet_kill(&m->vmm);
		fleet_kill(&m->follower);
		fleet_kill(&m->crasher);
	}
	fleet_kill_orphans();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", self->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", self->dir);
}

/* Our child's exit status (128+N: signal N), or -1 if still running. */
static int reap_by(pid_t *pid, time_t deadline)
{
	int status;

	while (*pid > 0) {
		pid_t got = waitpid(*pid, &status, WNOHANG);

		if (got < 0) /* not ours: no subreaper */
			return -1;
		if (got == *pid) {
			*pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) :
						   128 + WTERMSIG(status);
		}
		if (time(NULL) > deadline)
			return -1;
		usleep(100000);
	}
	return -1;
}

static int fleet_ctl(FIXTURE_DATA(fleet) * self, const char *const args[],
		     struct spawn_result *r)
{
	const char *argv[32];
	int i = 0;

	argv[i++] = self->vmmctl;
	for (; *args && i < 31; args++)
		argv[i++] = *args;
	argv[i] = NULL;
	return spawn__run(argv, NULL, r);
}

/* The follower's events so far, parsed, in order; *n how many. */
static void fleet_events(const char *path, json_t *ev[FLEET_MAX_EVENTS],
			 size_t *n)
{
	json_t **lines;
	size_t k;

	lines = file_lines(path, 0, &k);
	*n = 0;
	for (size_t j = 0; j < k; j++) {
		if (lines[j] && *n < FLEET_MAX_EVENTS)
			ev[(*n)++] = json_incref(lines[j]);
	}
	free_lines(lines, k);
}

static void fleet_events_free(json_t *ev[], size_t n)
{
	for (size_t j = 0; j < n; j++)
		json_decref(ev[j]);
}

static const char *ev_type(const json_t *e)
{
	return json_string_value(json_object_get(e, "type")) ?: "";
}

/* How many events of TYPE the follower has printed. */
static size_t fleet_count(const char *path, const char *type)
{
	json_t *ev[FLEET_MAX_EVENTS];
	size_t n, c = 0;

	fleet_events(path, ev, &n);
	for (size_t j = 0; j < n; j++)
		c += !strcmp(ev_type(ev[j]), type);
	fleet_events_free(ev, n);
	return c;
}

static bool fleet_wait_event(const char *path, const char *type, size_t count,
			     time_t deadline)
{
	while (fleet_count(path, type) < count) {
		if (time(NULL) > deadline)
			return false;
		usleep(200000);
	}
	return true;
}

/* A detached VM's own messages (--log), for a test that failed. */
static void fleet_show(struct __test_metadata *_metadata,
		       const struct member *m)
{
	TH_LOG("%s:", m->sock);
	vmm_log_show(_metadata, m->startlog);
	vmm_log_show(_metadata, m->log);
	vmm_log_show(_metadata, m->events);
	vmm_log_show(_metadata, m->console);
}

/*
 * A vCPU that triple-faults in the nested harness (vmm_util.h) shows as
 * a triple-fault event on a VM that was not told to crash.
 */
static void fleet_blame_triple_fault(const struct member *m)
{
	if (fleet_count(m->events, "triple-fault"))
		check_harness_flake_text("guest triple-faulted");
}

/* Exec `echo TOKEN` in member i; true if it printed exactly that. */
static bool fleet_echo(struct __test_metadata *_metadata,
		       FIXTURE_DATA(fleet) * self, int i, const char *what)
{
	char token[64], want[80];
	struct spawn_result r;

	snprintf(token, sizeof(token), "kiln-fleet-vm%d-%s", i, what);
	snprintf(want, sizeof(want), "%s\n", token);
	if (fleet_ctl(self, ARGS("exec", self->m[i].sock, "--", "echo", token),
		      &r))
		return false;
	if (r.status || strcmp(r.out, want)) {
		TH_LOG("vm%d: exec echo %s: exit %d, out %.200s, err %.300s", i,
		       token, r.status, r.out, r.err);
		fleet_blame_triple_fault(&self->m[i]);
		fleet_show(_metadata, &self->m[i]);
		return false;
	}
	return true;
}

/*
 * The events a follower printed for a VM that ran two execs and was shut
 * down: exactly these, seq without gaps, each exec exiting 0.
 */
static void fleet_check_events(struct __test_metadata *_metadata, int i,
			       const char *path)
{
	static const char *const want[] = {
		"agent-ready",	"exec-started", "exec-exited",
		"exec-started", "exec-exited",	"shutdown-requested",
		"shutdown",
	};
	json_t *ev[FLEET_MAX_EVENTS];
	size_t n, j;

	fleet_events(path, ev, &n);
	EXPECT_EQ(ARRAY_SIZE(want), n) TH_LOG("vm%d: %zu events", i, n);
	for (j = 0; j < n && j < ARRAY_SIZE(want); j++) {
		EXPECT_STREQ(want[j], ev_type(ev[j]))
		TH_LOG("vm%d, event %zu", i, j);
		EXPECT_EQ(j + 1, jint(ev[j], NULL, "seq"));
		if (!strcmp(want[j], "exec-exited"))
			EXPECT_EQ(0, jint(ev[j], NULL, "exitCode"));
	}
	if (n == ARRAY_SIZE(want)) {
		EXPECT_EQ(0, jint(ev[n - 1], NULL, "exitCode"));
	}
	fleet_events_free(ev, n);
}

/*
 * The panicked VM's events: agent-ready and the first exec as for the
 * others; then at most the crashing exec's start (the guest may die
 * before the agent reports it) and a guest-panic or triple-fault; last,
 * shutdown: a Linux guest's panic (panic=-1) resets the machine,
 * "guest-reset" with vmm start's status 123 (cli.md, "Exit status").
 */
static void fleet_check_panic_events(struct __test_metadata *_metadata,
				     const char *path)
{
	static const char *const first[] = { "agent-ready", "exec-started",
					     "exec-exited" };
	json_t *ev[FLEET_MAX_EVENTS];
	size_t n, j;

	fleet_events(path, ev, &n);
	ASSERT_LE(ARRAY_SIZE(first) + 1, n) TH_LOG("%zu events", n);
	for (j = 0; j < ARRAY_SIZE(first); j++)
		EXPECT_STREQ(first[j], ev_type(ev[j]));
	if (j < n - 1 && !strcmp(ev_type(ev[j]), "exec-started"))
		j++;
	if (j < n - 1 && (!strcmp(ev_type(ev[j]), "guest-panic") ||
			  !strcmp(ev_type(ev[j]), "triple-fault")))
		j++;
	EXPECT_EQ(n - 1, j) TH_LOG("unexpected event %s", ev_type(ev[j]));
	EXPECT_STREQ("shutdown", ev_type(ev[n - 1]));
	EXPECT_STREQ("guest-reset",
		     json_string_value(json_object_get(ev[n - 1], "reason")) ?:
			     "");
	EXPECT_EQ(VMM_EXIT_GUEST_CRASH, jint(ev[n - 1], NULL, "exitCode"));
	for (j = 0; j < n; j++)
		EXPECT_EQ(j + 1, jint(ev[j], NULL, "seq"));
	fleet_events_free(ev, n);
}

/*
 * What an orchestrator does with ten VMs, through the documented
 * interfaces only (cli.md, "Ten VMs"): ten `vmm start --detach` at once,
 * each with its socket, console log and vmm log in one directory; a
 * `vmmctl events --since 0` follower per VM; an exec per VM with its own
 * token; `vmmctl metrics` moved; every console log holds the boot. Then
 * one guest panics: its vmm ends with 123, its console log keeps the
 * panic, its follower saw the reset, and the nine others still answer.
 * Last, `vmmctl shutdown` for the nine: each vmm exits 0, each follower
 * saw every event in order and ended with the VM, no socket is left.
 */
TEST_F_TIMEOUT(fleet, ten_detached_vms_under_one_operator, FLEET_TEST_SECS)
{
	const char *argv[MAX_ARGV];
	struct spawn_result r;
	struct guest g;
	time_t deadline;
	size_t len;
	char *text;
	int i, st;

	if (!can_boot(_metadata))
		return;
	guest_paths(&g);
	/* All ten at once; then each is waited for. */
	for (i = 0; i < FLEET; i++) {
		struct member *m = &self->m[i];

		vmm_argv(&g, "start",
			 ARGS("--cpus", "1", "--memory", FLEET_MEM, "--cmdline",
			      "kiln.bootmark", "--control-socket", m->sock,
			      "--agent-timeout-ms", "120000", "--log", m->log,
			      "--detach", "--pid-file", m->pidfile),
			 argv);
		m->start = spawn_logged(argv, m->startlog);
		ASSERT_LT(0, m->start);
	}
	deadline = fleet_deadline(self, FLEET_WAIT_SECS);
	for (i = 0; i < FLEET; i++) {
		struct member *m = &self->m[i];
		char buf[32] = "";
		FILE *f;

		st = reap_by(&m->start, deadline);
		if (st)
			fleet_show(_metadata, m);
		ASSERT_EQ(0, st) TH_LOG("vm%d: vmm start --detach", i);
		f = fopen(m->pidfile, "r");
		ASSERT_NE(NULL, f);
		if (fgets(buf, sizeof(buf), f))
			m->vmm = atoi(buf);
		fclose(f);
		ASSERT_LT(0, m->vmm);
		m->follower = spawn_logged(
			ARGS(self->vmmctl, "events", "--since", "0", m->sock),
			m->events);
		ASSERT_LT(0, m->follower);
	}
	deadline = fleet_deadline(self, FLEET_WAIT_SECS);
	for (i = 0; i < FLEET; i++) {
		ASSERT_TRUE(fleet_wait_event(self->m[i].events, "agent-ready",
					     1, deadline))
		TH_LOG("vm%d: its follower never saw agent-ready", i);
	}

	/* One exec each, its token back; the follower sees it come and go. */
	for (i = 0; i < FLEET; i++) {
		EXPECT_TRUE(fleet_echo(_metadata, self, i, "first"));
		EXPECT_TRUE(fleet_wait_event(self->m[i].events, "exec-exited",
					     1, deadline))
		TH_LOG("vm%d: no exec-exited", i);
	}

	/* Counters that must have moved: counts, never times. */
	for (i = 0; i < FLEET; i++) {
		json_t *mt;

		ASSERT_EQ(0, fleet_ctl(self, ARGS("metrics", self->m[i].sock),
				       &r));
		ASSERT_EQ(0, r.status) TH_LOG("vm%d: metrics: %s", i, r.err);
		mt = json_loads(r.out, 0, NULL);
		ASSERT_NE(NULL, mt) TH_LOG("vm%d: %.300s", i, r.out);
		EXPECT_LE(1, jint(mt, "agent", "spawns"));
		EXPECT_LE(1, jint(mt, "agent", "exits"));
		EXPECT_LE(1, jint(mt, "agent", "connections"));
		EXPECT_EQ(1, json_array_size(json_object_get(mt, "vcpus")));
		EXPECT_LT(0, all_exits(mt));
		EXPECT_LT(0, jint(json_array_get(json_object_get(mt, "devices"),
						 0),
				  NULL, "requests"));
		json_decref(mt);
	}

	/* Every console log holds its boot. */
	for (i = 0; i < FLEET; i++) {
		text = slurp(self->m[i].console, &len);
		ASSERT_NE(NULL, text) TH_LOG("no %s", self->m[i].console);
		EXPECT_NE(NULL, strstr(text, "kiln-init: boot mark"))
		TH_LOG("vm%d: console log: %.1000s", i, text);
		free(text);
	}

	/* One guest panics; its answer never comes. */
	{
		struct member *m = &self->m[FLEET_PANIC];

		m->crasher = spawn_logged(ARGS(self->vmmctl, "exec", m->sock,
					       "--", "sh", "-c",
					       "echo c >/proc/sysrq-trigger"),
					  m->panicked);
		ASSERT_LT(0, m->crasher);
		deadline = fleet_deadline(self, FLEET_WAIT_SECS);
		st = reap_by(&m->vmm, deadline);
		if (st != VMM_EXIT_GUEST_CRASH)
			fleet_show(_metadata, m);
		EXPECT_EQ(VMM_EXIT_GUEST_CRASH, st);
		EXPECT_EQ(0, reap_by(&m->follower, deadline));
		/* The lost exec: vmmctl's failure, whatever it says. */
		EXPECT_LT(0, reap_by(&m->crasher, deadline));
		EXPECT_NE(0, access(m->sock, F_OK)) TH_LOG("%s left", m->sock);
		text = slurp(m->console, &len);
		ASSERT_NE(NULL, text);
		EXPECT_NE(NULL, strstr(text, "Kernel panic - not syncing"))
		TH_LOG("console log: %.3000s",
		       len > 3000 ? text + len - 3000 : text);
		free(text);
		fleet_check_panic_events(_metadata, m->events);
	}

	/* The nine others still answer. */
	for (i = 0; i < FLEET; i++)
		if (i != FLEET_PANIC)
			EXPECT_TRUE(fleet_echo(_metadata, self, i, "after"));

	/* Shut the nine down: each vmm exits 0, its follower with it. */
	for (i = 0; i < FLEET; i++) {
		if (i == FLEET_PANIC)
			continue;
		EXPECT_EQ(0, fleet_ctl(self, ARGS("shutdown", self->m[i].sock),
				       &r));
		EXPECT_EQ(0, r.status) TH_LOG("vm%d: shutdown: %s", i, r.err);
	}
	deadline = fleet_deadline(self, FLEET_WAIT_SECS);
	for (i = 0; i < FLEET; i++) {
		struct member *m = &self->m[i];

		if (i == FLEET_PANIC)
			continue;
		st = reap_by(&m->vmm, deadline);
		if (st) {
			fleet_blame_triple_fault(m);
			fleet_show(_metadata, m);
		}
		EXPECT_EQ(0, st) TH_LOG("vm%d: the vmm's exit status", i);
		EXPECT_EQ(0, reap_by(&m->follower, deadline))
		TH_LOG("vm%d: vmmctl events", i);
		EXPECT_NE(0, access(m->sock, F_OK)) TH_LOG("%s left", m->sock);
		fleet_check_events(_metadata, i, m->events);
	}
}

TEST_HARNESS_MAIN
