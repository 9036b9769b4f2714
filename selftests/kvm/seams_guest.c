// SPDX-License-Identifier: GPL-2.0
/*
 * The guest's seams for an orchestrator, booted on KVM (issue 31, items
 * 6 and 9): a bare image booted read-only with a mount at a directory it
 * lacks (/workspace) gets the mount point from init's overlay, the guest
 * writes and reads there, / stays read-only, the facts say the point was
 * made and the image's bytes do not change; and exec's env with envMode
 * "merge" (vmmctl exec --env) adds to the image's default environment
 * (PATH, HOME) while "replace" (the default) still replaces it. The
 * small busybox test image (kiln-test.json) is hashed whole before and
 * after; the Debian agent image (make image: debian-12-agent.json), too
 * big to hash in the nested harness, is checked by what any write
 * through its file system changes (size, mtime, ctime).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

#define TEST_IMAGE   "kiln-test.json"
#define DEBIAN_IMAGE "debian-12-agent.json"
#define READY_SECS   (BOOT_TIMEOUT * 3 / 4)
#define MAX_ARGV     32

struct vm {
	char dir[64];
	char sock[128];
	char log[128];
	char rootfs[300]; /* the image's descriptor */
	char vmmctl[256];
	pid_t vmm;
};

static bool can_boot(struct __test_metadata *_metadata)
{
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
	return true;
}

static void vm_paths(struct __test_metadata *_metadata, struct vm *v,
		     const char *image)
{
	struct guest g;

	memset(v, 0, sizeof(*v));
	guest_paths(&g);
	test_tmp_name(v->dir, sizeof(v->dir), "kiln-seams-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(v->dir));
	snprintf(v->sock, sizeof(v->sock), "%s/vm.sock", v->dir);
	snprintf(v->log, sizeof(v->log), "%s/vmm.log", v->dir);
	snprintf(v->rootfs, sizeof(v->rootfs), "%s/%s", g.images, image);
	snprintf(v->vmmctl, sizeof(v->vmmctl), "%s",
		 env_or("KILN_VMMCTL", "build/vmmctl"));
	ASSERT_EQ(0, access(v->rootfs, R_OK))
	TH_LOG("%s missing: run make guest (test image) or make image",
	       v->rootfs);
}

static void vm_cleanup(struct vm *v)
{
	char cmd[128];

	if (v->vmm > 0) {
		kill(v->vmm, SIGKILL);
		waitpid(v->vmm, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", v->dir);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", v->dir);
}

/* A field of the descriptor, by asking python3 (the builders use it). */
static void descriptor_field(struct __test_metadata *_metadata,
			     const char *desc, const char *field, char *out,
			     size_t len)
{
	char cmd[512];
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "python3 -c 'import json,sys; "
		 "print(json.load(open(sys.argv[1]))[sys.argv[2]])' '%s' '%s'",
		 desc, field);
	p = popen(cmd, "r");
	ASSERT_NE(NULL, p);
	ASSERT_NE(NULL, fgets(out, len, p));
	pclose(p);
	out[strcspn(out, "\n")] = 0;
}

/* "sha256:<hex>" of the file at path. */
static void file_digest(struct __test_metadata *_metadata, const char *path,
			char *out, size_t len)
{
	char cmd[400], hex[80] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
	p = popen(cmd, "r");
	ASSERT_NE(NULL, p);
	ASSERT_NE(NULL, fgets(hex, sizeof(hex), p));
	pclose(p);
	hex[strcspn(hex, " ")] = 0;
	snprintf(out, len, "sha256:%s", hex);
}

static int ctl(struct vm *v, const char *const args[], struct spawn_result *r)
{
	const char *argv[MAX_ARGV];
	int i = 0;

	argv[i++] = v->vmmctl;
	for (; *args && i < MAX_ARGV - 1; args++)
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

/* vmm start with the image read-only and OPTS; true once the agent is. */
static bool vm_start(struct __test_metadata *_metadata, struct vm *v,
		     const char *const opts[])
{
	const char *argv[MAX_ARGV];
	struct guest g;
	int i = 0;

	guest_paths(&g);
	argv[i++] = g.vmm;
	argv[i++] = "start";
	argv[i++] = "--kernel";
	argv[i++] = g.vmlinux;
	argv[i++] = "--initrd";
	argv[i++] = g.initrd;
	argv[i++] = "--rootfs";
	argv[i++] = v->rootfs;
	argv[i++] = "--rootfs-mode";
	argv[i++] = "readonly";
	argv[i++] = "--control-socket";
	argv[i++] = v->sock;
	argv[i++] = "--agent-timeout-ms";
	argv[i++] = "45000";
	for (; opts && *opts && i < MAX_ARGV - 1; opts++)
		argv[i++] = *opts;
	argv[i] = NULL;
	v->vmm = spawn_logged(argv, v->log);
	if (v->vmm < 0)
		return false;
	return vmm_wait_ready(_metadata, &v->vmm, v->sock, v->log, READY_SECS);
}

static int vm_stop(struct vm *v)
{
	struct spawn_result r;
	int status;

	if (ctl(v, ARGS("shutdown", v->sock), &r) || r.status)
		return -1;
	status = wait_exit(v->vmm, 60);
	v->vmm = 0;
	return status;
}

/* Is {source, topic, relation, value} among the facts (vmmctl's output)? */
static bool has_fact(const char *text, const char *source, const char *topic,
		     const char *relation, const char *value)
{
	json_t *facts = json_loads(text, 0, NULL), *f;
	json_t *want =
		json_pack("{s:s, s:s, s:s, s:s}", "source", source, "topic",
			  topic, "relation", relation, "value", value);
	bool found = false;
	size_t i;

	json_array_foreach(facts, i, f) found |= json_equal(f, want) == 1;
	json_decref(want);
	json_decref(facts);
	return found;
}

/* What `vmmctl call SOCK exec PARAMS` printed as stdout, decoded. */
static void exec_stdout(struct __test_metadata *_metadata, const char *json,
			char *out, size_t len)
{
	json_t *res = json_loads(json, 0, NULL);
	const char *b64 =
		json_string_value(json_object_get(res, "stdout")) ?: "";
	char cmd[512];
	FILE *p;
	size_t n;

	ASSERT_LT(strlen(b64), 256);
	snprintf(cmd, sizeof(cmd), "printf %%s '%s' | base64 -d", b64);
	json_decref(res);
	p = popen(cmd, "r");
	ASSERT_NE(NULL, p);
	n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	pclose(p);
}

/*
 * The busybox image has no /workspace: booted read-only with a memory
 * mount there, the guest writes and reads it, nothing else of / is
 * writable, and the image hashes as before.
 */
TEST_TIMEOUT(readonly_image_takes_a_mount_unchanged, BOOT_TIMEOUT)
{
	char path[300], before[80], after[80], digest[80];
	struct spawn_result r;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(_metadata, &v, TEST_IMAGE);
	descriptor_field(_metadata, v.rootfs, "path", path, sizeof(path));
	descriptor_field(_metadata, v.rootfs, "digest", digest, sizeof(digest));
	file_digest(_metadata, path, before, sizeof(before));
	EXPECT_STREQ(digest, before);
	BOOT(NULL,
	     ARGS("--rootfs", v.rootfs, "--rootfs-mode", "readonly", "--mount",
		  "/workspace=memory"),
	     ARGS("sh", "-c",
		  "echo kept > /workspace/note && cat /workspace/note; "
		  "touch /root/x 2>/dev/null && echo wrote-root; "
		  "mkdir /other 2>/dev/null && echo made-dir; "
		  "cat /sys/block/vda/ro; "
		  "awk '$2 == \"/\" { split($4, o, \",\"); "
		  "print $3, o[1] }' /proc/mounts"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("kept\n1\noverlay ro\n", r.out);
	file_digest(_metadata, path, after, sizeof(after));
	EXPECT_STREQ(before, after);
	vm_cleanup(&v);
}

/* An image that has every mount's directory: no overlay, as before. */
TEST_TIMEOUT(readonly_image_with_the_directory_no_overlay, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(_metadata, &v, TEST_IMAGE);
	BOOT(NULL,
	     ARGS("--rootfs", v.rootfs, "--rootfs-mode", "readonly", "--mount",
		  "/tmp=memory"),
	     ARGS("sh", "-c",
		  "echo t > /tmp/t && cat /tmp/t; "
		  "awk '$2 == \"/\" { print $3 }' /proc/mounts"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("t\next4\n", r.out);
	vm_cleanup(&v);
}

/*
 * The seed's default, on the Debian image: read-only, /workspace mounted
 * (the image has none), the agent serving. The guest's facts name the
 * point made; exec --env adds CI to the image's PATH and HOME; env
 * without envMode still replaces the environment.
 */
TEST_TIMEOUT(debian_readonly_workspace_and_exec_env, BOOT_TIMEOUT)
{
	char path[300], got[256];
	struct stat before, after;
	struct spawn_result r;
	struct vm v;

	if (!can_boot(_metadata))
		return;
	vm_paths(_metadata, &v, DEBIAN_IMAGE);
	descriptor_field(_metadata, v.rootfs, "path", path, sizeof(path));
	ASSERT_EQ(0, stat(path, &before));
	ASSERT_TRUE(vm_start(
		_metadata, &v,
		ARGS("--mount", "/workspace=memory", "--cwd", "/workspace")));

	CTL(&v, &r, "exec", v.sock, "--", "sh", "-c",
	    "echo data > note && cat /workspace/note && pwd");
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("data\n/workspace\n", r.out);
	CTL(&v, &r, "exec", v.sock, "--", "sh", "-c",
	    "touch /etc/kiln-x || echo refused; mkdir /other || echo refused");
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("refused\nrefused\n", r.out);
	EXPECT_NE(NULL, strstr(r.err, "Read-only file system"));

	CTL(&v, &r, "facts", v.sock);
	EXPECT_EQ(0, r.status);
	EXPECT_TRUE(has_fact(r.out, "guest", "rootfs-mount-point", "created",
			     "/workspace"));
	EXPECT_TRUE(has_fact(r.out, "config", "rootfs-write-mode", "is",
			     "readonly"));

	/* --env adds: CI, and the image's PATH and HOME are still there. */
	CTL(&v, &r, "exec", "--env", "CI=1", v.sock, "--", "sh", "-c",
	    "echo \"$CI|$PATH|$HOME\"");
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("1|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
		     "/sbin:/bin|/root\n",
		     r.out);
	/* The API's own form, merge and then replace (the default). */
	CTL(&v, &r, "call", v.sock, "exec",
	    "{\"argv\":[\"/bin/sh\",\"-c\",\"echo \\\"$CI|${HOME-nohome}\\\"\"],"
	    "\"env\":{\"CI\":\"1\"},\"envMode\":\"merge\"}");
	EXPECT_EQ(0, r.status);
	exec_stdout(_metadata, r.out, got, sizeof(got));
	EXPECT_STREQ("1|/root\n", got);
	CTL(&v, &r, "call", v.sock, "exec",
	    "{\"argv\":[\"/bin/sh\",\"-c\",\"echo \\\"$CI|${HOME-nohome}\\\"\"],"
	    "\"env\":{\"CI\":\"1\"}}");
	EXPECT_EQ(0, r.status);
	exec_stdout(_metadata, r.out, got, sizeof(got));
	EXPECT_STREQ("1|nohome\n", got);
	/* A bad name never reaches the guest. */
	CTL(&v, &r, "call", v.sock, "exec",
	    "{\"argv\":[\"true\"],\"env\":{\"A=B\":\"x\"},"
	    "\"envMode\":\"merge\"}");
	EXPECT_NE(0, r.status);
	EXPECT_NE(NULL, strstr(r.err, "env: variable \"A=B\""));

	EXPECT_EQ(0, vm_stop(&v));
	ASSERT_EQ(0, stat(path, &after));
	EXPECT_EQ(before.st_size, after.st_size);
	EXPECT_EQ(before.st_ino, after.st_ino);
	EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
	EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
	EXPECT_EQ(before.st_ctim.tv_sec, after.st_ctim.tv_sec);
	EXPECT_EQ(before.st_ctim.tv_nsec, after.st_ctim.tv_nsec);
	vm_cleanup(&v);
}

TEST_HARNESS_MAIN
