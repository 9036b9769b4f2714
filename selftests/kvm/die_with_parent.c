// SPDX-License-Identifier: GPL-2.0
/*
 * --die-with-parent on KVM (Documentation/cli.md, "Dying with the
 * orchestrator"): a parent process runs `vmm start --die-with-parent`
 * and is killed with SIGKILL; the vmm powers the guest off and is gone,
 * its control and vsock sockets removed, within the documented bound
 * (polled with a generous deadline: this checks that it happens, not how
 * fast). Without the flag the VM outlives its parent and still answers,
 * then stops cleanly. `vmm run --die-with-parent` without a control
 * socket stops at once. The first VM boots from a descriptor written as
 * an image package writes it ("architecture": "x64", "facts"), and its
 * vm.facts carry those facts (Documentation/rootfs.md, "Image facts").
 *
 * The test makes itself a child subreaper, so that the vmm, orphaned by
 * its parent's death, is reparented to the test, which reaps it and
 * reads its status.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

/*
 * Documented: the VM stops within 5 s of the parent's exit and the vmm
 * is gone within 10 s. Waited for far longer: the nested harness may
 * leave the guest unscheduled for seconds.
 */
#define GONE_DEADLINE_S 120
/* Seconds a start may take until the agent answers. */
#define READY_S (BOOT_TIMEOUT * 3 / 4)
/* Past PARENT_GONE_GRACE_MS (5 s): a VM that should not die has not. */
#define OUTLIVE_S 8

struct dvm {
	char dir[64];
	char sock[128];	 /* control socket */
	char vsock[128]; /* --vsock-socket listener */
	char log[128];	 /* the vmm's stdout and stderr */
	char desc[128];	 /* the image descriptor, with facts */
	char vmmctl[256];
	pid_t parent; /* the process that ran the vmm */
	pid_t vmm;    /* its child; ours to reap once it is orphaned */
};

static void dvm_paths(struct dvm *d)
{
	test_tmp_name(d->dir, sizeof(d->dir), "kiln-dwp-XXXXXX");
	if (!mkdtemp(d->dir))
		abort();
	snprintf(d->sock, sizeof(d->sock), "%s/ctl.sock", d->dir);
	snprintf(d->vsock, sizeof(d->vsock), "%s/vm.vsock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/vmm.log", d->dir);
	snprintf(d->desc, sizeof(d->desc), "%s/image.json", d->dir);
	snprintf(d->vmmctl, sizeof(d->vmmctl), "%s",
		 env_or("KILN_VMMCTL", "build/vmmctl"));
	d->parent = d->vmm = 0;
}

/*
 * The test image's descriptor as an image package writes it: Node's
 * "x64", and facts of its own. Its path is absolute (make image's is).
 */
static bool write_descriptor(const struct guest *g, const struct dvm *d)
{
	char src[300];
	json_t *desc, *facts;
	bool ok;

	snprintf(src, sizeof(src), "%s/kiln-test.json", g->images);
	desc = json_load_file(src, 0, NULL);
	if (!json_is_object(desc))
		return false;
	facts = json_pack("[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]",
			  "source", "config", "topic", "distro", "relation",
			  "is", "value", "kiln-test-os", "source", "config",
			  "topic", "command", "relation", "exists", "value",
			  "kiln-probe");
	ok = facts && !json_object_set_new(desc, "facts", facts) &&
	     !json_object_set_new(desc, "architecture", json_string("x64")) &&
	     !json_dump_file(desc, d->desc, JSON_INDENT(2));
	json_decref(desc);
	return ok;
}

/*
 * A parent process (which dies with the test) that runs argv, its
 * stdout and stderr to d->log, tells us the child's pid and waits to be
 * killed.
 */
static bool start_under_parent(struct dvm *d, const char *const argv[])
{
	int p[2];
	pid_t vmm;

	if (pipe(p))
		return false;
	d->parent = fork();
	if (d->parent < 0)
		return false;
	if (d->parent == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		vmm = spawn_logged(argv, d->log);
		if (write(p[1], &vmm, sizeof(vmm)) != sizeof(vmm))
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &vmm, sizeof(vmm)) != sizeof(vmm))
		vmm = -1;
	close(p[0]);
	d->vmm = vmm;
	return vmm > 0;
}

/*
 * The same for `vmm start --detach`: the parent waits for it to return
 * (the agent answered) and tells us its status; the VM process, whose
 * own parent (that vmm start) has exited by then, is ours already. Its
 * pid from pid_file; false when the start failed.
 */
static bool start_detached_under_parent(struct dvm *d, const char *const argv[],
					const char *pid_file)
{
	int p[2], status = -1;
	FILE *f;

	if (pipe(p))
		return false;
	d->parent = fork();
	if (d->parent < 0)
		return false;
	if (d->parent == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		if (waitpid(spawn_logged(argv, d->log), &status, 0) < 0)
			status = -1;
		if (write(p[1], &status, sizeof(status)) != sizeof(status))
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &status, sizeof(status)) != sizeof(status))
		status = -1;
	close(p[0]);
	if (status)
		return false;
	f = fopen(pid_file, "r");
	if (!f || fscanf(f, "%d", &d->vmm) != 1)
		d->vmm = 0;
	if (f)
		fclose(f);
	return d->vmm > 0;
}

static void kill_parent(struct dvm *d)
{
	kill(d->parent, SIGKILL);
	waitpid(d->parent, NULL, 0);
	d->parent = 0;
}

/* The orphaned vmm reaped (it is ours: subreaper): its status, or -1. */
static int wait_vmm(struct dvm *d, int secs)
{
	int ret = wait_exit(d->vmm, secs);

	d->vmm = 0;
	return ret;
}

static bool gone(const char *path)
{
	struct stat st;

	return lstat(path, &st) && errno == ENOENT;
}

static void dvm_cleanup(struct dvm *d)
{
	char cmd[128];

	if (d->parent > 0)
		kill_parent(d);
	if (d->vmm > 0) {
		kill(d->vmm, SIGKILL);
		waitpid(d->vmm, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", d->dir);
}

static int ctl(const struct dvm *d, const char *const args[],
	       struct spawn_result *r)
{
	const char *argv[16];
	int i = 0;

	argv[i++] = d->vmmctl;
	for (int j = 0; args[j] && i < 15; j++)
		argv[i++] = args[j];
	argv[i] = NULL;
	return spawn__run(argv, NULL, r);
}

/* How many of facts are {config, topic, relation, value}. */
static int count_fact(json_t *facts, const char *topic, const char *relation,
		      const char *value)
{
	const char *t, *rel, *v, *s;
	size_t i;
	json_t *f;
	int n = 0;

	json_array_foreach(facts, i, f)
	{
		s = json_string_value(json_object_get(f, "source"));
		t = json_string_value(json_object_get(f, "topic"));
		rel = json_string_value(json_object_get(f, "relation"));
		v = json_string_value(json_object_get(f, "value"));
		n += s && t && rel && v && !strcmp(s, "config") &&
		     !strcmp(t, topic) && !strcmp(rel, relation) &&
		     !strcmp(v, value);
	}
	return n;
}

FIXTURE(dwp)
{
	struct guest g;
	struct dvm d;
};

FIXTURE_SETUP(dwp)
{
	struct stat st;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	guest_paths(&self->g);
	ASSERT_EQ(0, stat(self->g.initrd, &st)) TH_LOG("no guest: make guest");
	/* Orphans come to us, so that we can reap the vmm. */
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
	dvm_paths(&self->d);
}

FIXTURE_TEARDOWN(dwp)
{
	dvm_cleanup(&self->d);
}

/* vmm start ... --control-socket --vsock-socket EXTRA into argv. */
static void start_argv(const struct guest *g, const struct dvm *d,
		       const char *image, const char *extra,
		       const char *argv[24])
{
	int i = 0;

	argv[i++] = g->vmm;
	argv[i++] = "start";
	argv[i++] = "--kernel";
	argv[i++] = g->vmlinux;
	argv[i++] = "--initrd";
	argv[i++] = g->initrd;
	argv[i++] = "--rootfs";
	argv[i++] = image;
	argv[i++] = "--control-socket";
	argv[i++] = d->sock;
	argv[i++] = "--vsock-socket";
	argv[i++] = d->vsock;
	argv[i++] = "--agent-timeout-ms";
	argv[i++] = "45000";
	if (extra)
		argv[i++] = extra;
	argv[i] = NULL;
}

TEST_F_TIMEOUT(dwp, dies_with_its_parent, 2 * BOOT_TIMEOUT)
{
	struct dvm *d = &self->d;
	struct spawn_result r;
	const char *argv[24];
	json_t *facts;
	char *log;
	int status;

	ASSERT_TRUE(write_descriptor(&self->g, d));
	start_argv(&self->g, d, d->desc, "--die-with-parent", argv);
	ASSERT_TRUE(start_under_parent(d, argv));
	ASSERT_TRUE(
		vmm_wait_ready(_metadata, &d->vmm, d->sock, d->log, READY_S));

	/* The descriptor's facts are the VM's, after Kiln's own. */
	ASSERT_EQ(0, ctl(d, ARGS("facts", d->sock), &r));
	ASSERT_EQ(0, r.status) TH_LOG("vmmctl facts: %s", r.err);
	facts = json_loads(r.out, 0, NULL);
	ASSERT_TRUE(json_is_array(facts)) TH_LOG("%.300s", r.out);
	EXPECT_EQ(1, count_fact(facts, "distro", "is", "kiln-test-os"));
	EXPECT_EQ(1, count_fact(facts, "command", "exists", "kiln-probe"));
	EXPECT_EQ(1, count_fact(facts, "rootfs-image", "is", "kiln-test"));
	json_decref(facts);
	ASSERT_FALSE(gone(d->sock));
	ASSERT_FALSE(gone(d->vsock));

	/* The parent dies; the vmm, orphaned, is reparented to us. */
	kill_parent(d);
	status = wait_vmm(d, GONE_DEADLINE_S);
	log = log_text(d->log);
	/*
	 * Status 0 either way: the guest powered off when asked, or (a
	 * guest the harness left unscheduled) was stopped 5 s later.
	 */
	EXPECT_EQ(0, status);
	EXPECT_TRUE(log && strstr(log, "the parent process exited "
				       "(--die-with-parent): shutting the VM "
				       "down"));
	TH_LOG("the guest %s", log && strstr(log, "stopped the VM") ?
				       "did not power off in time: stopped" :
				       "powered off");
	if (status)
		vmm_log_show(_metadata, d->log);
	free(log);
	EXPECT_TRUE(gone(d->sock)) TH_LOG("%s is left", d->sock);
	EXPECT_TRUE(gone(d->vsock)) TH_LOG("%s is left", d->vsock);
}

/*
 * start --detach: the process that ran `vmm start` is the parent, not
 * the vmm start that forked the VM process and returned (the reason for
 * a pidfd rather than PR_SET_PDEATHSIG).
 */
TEST_F_TIMEOUT(dwp, detached_dies_with_the_process_that_ran_it,
	       2 * BOOT_TIMEOUT)
{
	struct dvm *d = &self->d;
	struct spawn_result r;
	const char *argv[24];
	char image[300], pid_file[160];
	int i;

	snprintf(image, sizeof(image), "%s/kiln-test.json", self->g.images);
	snprintf(pid_file, sizeof(pid_file), "%s/vm.pid", d->dir);
	start_argv(&self->g, d, image, "--die-with-parent", argv);
	for (i = 0; argv[i]; i++)
		;
	argv[i++] = "--detach";
	argv[i++] = "--pid-file";
	argv[i++] = pid_file;
	argv[i] = NULL;
	if (!start_detached_under_parent(d, argv, pid_file))
		vmm_log_show(_metadata, d->log);
	ASSERT_TRUE(d->vmm > 0);
	/* vmm start has returned: the VM runs on, its parent alive. */
	ASSERT_EQ(0, ctl(d, ARGS("exec", d->sock, "--", "echo", "here"), &r));
	EXPECT_EQ(0, r.status) TH_LOG("vmmctl exec: %s", r.err);
	EXPECT_STREQ("here\n", r.out);
	kill_parent(d);
	EXPECT_EQ(0, wait_vmm(d, GONE_DEADLINE_S));
	EXPECT_TRUE(gone(d->sock)) TH_LOG("%s is left", d->sock);
	EXPECT_TRUE(gone(d->vsock)) TH_LOG("%s is left", d->vsock);
}

TEST_F_TIMEOUT(dwp, outlives_its_parent_without_the_flag, 2 * BOOT_TIMEOUT)
{
	struct dvm *d = &self->d;
	struct spawn_result r;
	const char *argv[24];
	char image[300];

	snprintf(image, sizeof(image), "%s/kiln-test.json", self->g.images);
	start_argv(&self->g, d, image, NULL, argv);
	ASSERT_TRUE(start_under_parent(d, argv));
	ASSERT_TRUE(
		vmm_wait_ready(_metadata, &d->vmm, d->sock, d->log, READY_S));
	kill_parent(d);
	sleep(OUTLIVE_S);
	/* Still there, still answering, its sockets in place. */
	ASSERT_EQ(0, ctl(d, ARGS("exec", d->sock, "--", "echo", "here"), &r));
	EXPECT_EQ(0, r.status) TH_LOG("vmmctl exec: %s", r.err);
	EXPECT_STREQ("here\n", r.out);
	EXPECT_FALSE(gone(d->sock));
	EXPECT_FALSE(gone(d->vsock));
	/* Then a clean stop, sockets removed as on any exit. */
	ASSERT_EQ(0, ctl(d, ARGS("shutdown", d->sock), &r));
	EXPECT_EQ(0, r.status) TH_LOG("vmmctl shutdown: %s", r.err);
	EXPECT_EQ(0, wait_vmm(d, GONE_DEADLINE_S));
	EXPECT_TRUE(gone(d->sock));
	EXPECT_TRUE(gone(d->vsock));
}

/*
 * vmm run without a control socket: no agent to ask, the VM is stopped
 * at once, the vsock socket removed. The command says when it runs.
 */
TEST_F_TIMEOUT(dwp, run_without_an_agent_stops_at_once, 2 * BOOT_TIMEOUT)
{
	struct dvm *d = &self->d;
	const char *argv[24];
	char *log = NULL;
	int i = 0, status;
	time_t end;

	argv[i++] = self->g.vmm;
	argv[i++] = "run";
	argv[i++] = "--kernel";
	argv[i++] = self->g.vmlinux;
	argv[i++] = "--initrd";
	argv[i++] = self->g.initrd;
	argv[i++] = "--vsock-socket";
	argv[i++] = d->vsock;
	argv[i++] = "--die-with-parent";
	argv[i++] = "--";
	argv[i++] = "sh";
	argv[i++] = "-c";
	argv[i++] = "echo kiln-dwp-running; sleep 600";
	argv[i] = NULL;
	ASSERT_TRUE(start_under_parent(d, argv));
	for (end = time(NULL) + READY_S; time(NULL) < end; usleep(100000)) {
		free(log);
		log = log_text(d->log);
		if (log && strstr(log, "kiln-dwp-running"))
			break;
	}
	if (!log || !strstr(log, "kiln-dwp-running"))
		vmm_log_show(_metadata, d->log);
	ASSERT_TRUE(log && strstr(log, "kiln-dwp-running"));
	free(log);
	ASSERT_FALSE(gone(d->vsock));
	kill_parent(d);
	status = wait_vmm(d, GONE_DEADLINE_S);
	EXPECT_EQ(0, status);
	log = log_text(d->log);
	EXPECT_TRUE(log && strstr(log, "the parent process exited "
				       "(--die-with-parent): stopped the VM"));
	if (status)
		vmm_log_show(_metadata, d->log);
	free(log);
	EXPECT_TRUE(gone(d->vsock)) TH_LOG("%s is left", d->vsock);
}

TEST_HARNESS_MAIN
