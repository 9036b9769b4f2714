// SPDX-License-Identifier: GPL-2.0
/*
 * Configuration facts (vmm/facts.c): the vocabulary for a configuration
 * with everything in it, the offline path (`vmm facts`,
 * facts__config_offline) giving exactly what the booted path (vm.facts:
 * facts__config on the descriptor the VM loaded) gives for the same
 * configuration, and `vmm facts` itself: the same array for --config FILE
 * and for the same options on the command line, as a user who cannot
 * open /dev/kvm, and bad input refused in one line. KILN_VMM names the
 * binary (default build/vmm).
 */
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "selftests/spawn.h"
#include "vmm/config.h"
#include "vmm/facts.h"
#include "vmm/options.h"
#include "vmm/rootfs.h"

#define MAX_ARGS	   40
#define VMM_EXIT_VMM_ERROR 125

/* SHA-256 of 4096 zero bytes. */
#define ZERO_BLOCK_DIGEST \
	"sha256:"         \
	"ad7facb2586fc6e966c004d7d1d16b024f5805ff7cb47c7a85dabd8b48892ca7"

FIXTURE(cfg)
{
	char dir[64];
	char image[96];
	char desc[96];	 /* NAME.json */
	char ifacts[96]; /* NAME.facts.json, the builder's */
	char json[96];	 /* a --config file */
	char policy[96];
};

static void write_str(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		abort();
	close(fd);
}

FIXTURE_SETUP(cfg)
{
	char doc[512];
	int fd;

	strcpy(self->dir, "/tmp/kiln-facts-XXXXXX");
	ASSERT_TRUE(mkdtemp(self->dir) != NULL);
	/* Readable by the user the no-KVM case drops to. */
	ASSERT_EQ(0, chmod(self->dir, 0755));
	snprintf(self->image, 96, "%s/root.raw", self->dir);
	snprintf(self->desc, 96, "%s/test-root.json", self->dir);
	snprintf(self->ifacts, 96, "%s/test-root.facts.json", self->dir);
	snprintf(self->json, 96, "%s/vm.json", self->dir);
	snprintf(self->policy, 96, "%s/policy.json", self->dir);
	fd = open(self->image, O_WRONLY | O_CREAT, 0644);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, 4096));
	close(fd);
	snprintf(doc, sizeof(doc),
		 "{\"name\": \"test-root:1\", \"path\": \"%s\", \"format\": "
		 "\"raw\", \"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 4096}",
		 self->image, ZERO_BLOCK_DIGEST);
	write_str(self->desc, doc);
	write_str(self->ifacts,
		  "[{\"source\": \"config\", \"topic\": \"os\", \"relation\": "
		  "\"distribution\", \"value\": \"debian\"}]");
	write_str(self->policy, "{\"tcp\": [{\"to\": \"10.9.0.0/16\"}]}");
	/* No verification cache entries in ~/.cache from these files. */
	snprintf(doc, sizeof(doc), "%s/cache", self->dir);
	ASSERT_EQ(0, setenv("KILN_CACHE", doc, 1));
}

FIXTURE_TEARDOWN(cfg)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

/* `vmm facts ARGS...` parsed in-process: options, then validation. */
static int parse(struct vm_config *c, const char *const args[], char *err,
		 size_t len)
{
	config__init(c);
	c->facts = true;
	return options_argv__check(c, ARGS("facts"), args, err, len);
}

/* The options of a configuration with every kind of fact. */
#define FULL_ARGS(self)                                                       \
	"--kernel", "/boot/vmlinux", "--cpus", "2", "--memory", "512",        \
		"--hostname", "agent-42", "--cwd", "/workspace", "--rootfs",  \
		(self)->desc, "--rootfs-mode", "readonly", "--mount",         \
		"/workspace=memory", "--mount", "/src=bind:/tmp:ro", "--net", \
		"auto", "--net-mac", "02:4b:4c:01:02:03", "--net-policy",     \
		(self)->policy

static const char *const full_want[][3] = {
	{ "kernel-path", "is", "/boot/vmlinux" },
	{ "cpu-count", "is", "2" },
	{ "memory-mib", "is", "512" },
	{ "hostname", "is", "agent-42" },
	{ "cwd", "is", "/workspace" },
	{ "rootfs-image", "is", "test-root:1" },
	{ "rootfs-digest", "is", ZERO_BLOCK_DIGEST },
	{ "rootfs-write-mode", "is", "readonly" },
	{ "mount", "exists", "/workspace" },
	{ "mount:/workspace", "is", "memory" },
	{ "mount:/workspace", "access", "rw" },
	{ "mount", "exists", "/src" },
	{ "mount:/src", "is", "bind" },
	{ "mount:/src", "access", "ro" },
	{ "network-egress", "is", "policy" },
	{ "network-mode", "is", "auto" },
	{ "network-address", "is", "10.0.2.15/24" },
	{ "network-gateway", "is", "10.0.2.2" },
	{ "network-dns", "is", "10.0.2.2" },
	{ "network-mtu", "is", "1500" },
	{ "network-mac", "is", "02:4b:4c:01:02:03" },
	/* then the image builder's, as they are */
	{ "os", "distribution", "debian" },
};

static const char *field(json_t *fact, const char *key)
{
	return json_string_value(json_object_get(fact, key));
}

TEST_F(cfg, vocabulary)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;
	json_t *facts, *f;
	size_t i;

	ASSERT_EQ(0, parse(&c, ARGS(FULL_ARGS(self)), err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, facts__config_offline(&c, &facts, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(ARRAY_SIZE(full_want), json_array_size(facts));
	json_array_foreach(facts, i, f)
	{
		EXPECT_EQ(4, json_object_size(f));
		EXPECT_STREQ("config", field(f, "source"));
		EXPECT_STREQ(full_want[i][0], field(f, "topic"));
		EXPECT_STREQ(full_want[i][1], field(f, "relation"));
		/* Every value a string, as the guest's facts. */
		ASSERT_TRUE(json_is_string(json_object_get(f, "value")));
		EXPECT_STREQ(full_want[i][2], field(f, "value"));
	}
	json_decref(facts);
	config__free(&c);
}

/* The fewest facts: no disk, no mounts, no network, defaults. */
TEST_F(cfg, defaults)
{
	static const char *const want[][3] = {
		{ "kernel-path", "is", "/k" },
		{ "cpu-count", "is", "1" },
		{ "memory-mib", "is", "256" },
		{ "hostname", "is", "sandbox" },
		{ "network-egress", "is", "none" },
	};
	char err[CONFIG_ERR_LEN];
	struct vm_config c;
	json_t *facts, *f;
	size_t i, j;

	ASSERT_EQ(0, parse(&c, ARGS("--kernel", "/k"), err, sizeof(err)));
	ASSERT_EQ(0, facts__config_offline(&c, &facts, err, sizeof(err)));
	ASSERT_EQ(ARRAY_SIZE(want), json_array_size(facts));
	json_array_foreach(facts, i, f)
	{
		EXPECT_STREQ(want[i][0], field(f, "topic"));
		EXPECT_STREQ(want[i][1], field(f, "relation"));
		EXPECT_STREQ(want[i][2], field(f, "value"));
	}
	json_decref(facts);
	config__free(&c);

	/* A writable root says its limit; a random MAC is no fact. */
	ASSERT_EQ(0, parse(&c,
			   ARGS("--kernel", "/k", "--rootfs", self->desc,
				"--net", "auto"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, facts__config_offline(&c, &facts, err, sizeof(err)));
	json_array_foreach(facts, i, f)
	{
		EXPECT_STRNE("network-mac", field(f, "topic"));
		if (!strcmp(field(f, "topic"), "rootfs-write-mode"))
			EXPECT_STREQ("ephemeral", field(f, "value"));
		if (!strcmp(field(f, "topic"), "rootfs-max-dirty-bytes"))
			EXPECT_STREQ("67108864", field(f, "value"));
		if (!strcmp(field(f, "topic"), "network-egress"))
			EXPECT_STREQ("deny", field(f, "value"));
	}
	json_decref(facts);
	config__free(&c);

	/* A cow root: its mode and its cap on unflushed bytes. */
	ASSERT_EQ(0, parse(&c,
			   ARGS("--kernel", "/k", "--rootfs", self->desc,
				"--rootfs-mode", "cow:/run/store.sock"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, facts__config_offline(&c, &facts, err, sizeof(err)));
	i = 0;
	json_array_foreach(facts, j, f)
	{
		if (!strcmp(field(f, "topic"), "rootfs-write-mode"))
			i += !strcmp("cow", field(f, "value"));
		if (!strcmp(field(f, "topic"), "rootfs-max-dirty-bytes"))
			i += !strcmp("67108864", field(f, "value"));
	}
	EXPECT_EQ(2, i);
	json_decref(facts);
	config__free(&c);
}

/*
 * What vm.facts gives (vmm/control.c: facts__config on the descriptor
 * vm.c loaded into vm->rootfs) and what `vmm facts` gives
 * (facts__config_offline) for the same configuration.
 */
TEST_F(cfg, offline_equals_booted_path)
{
	char err[CONFIG_ERR_LEN];
	struct rootfs_image img = { 0 };
	json_t *offline, *booted;
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, ARGS(FULL_ARGS(self)), err, sizeof(err)));
	ASSERT_EQ(0, facts__config_offline(&c, &offline, err, sizeof(err)));
	ASSERT_EQ(0, rootfs__load(&img, c.rootfs.descriptor, err, sizeof(err)));
	booted = facts__config(&c, &img);
	ASSERT_NE(NULL, booted);
	EXPECT_TRUE(json_equal(offline, booted));
	json_decref(booted);
	json_decref(offline);
	rootfs__free(&img);
	config__free(&c);
}

/* vmm facts ARGS (as user 65534 with as_nobody): its stdout as JSON. */
static json_t *vmm_facts(struct __test_metadata *_metadata,
			 const char *const args[], bool as_nobody)
{
	const char *argv[MAX_ARGS];
	struct spawn_result r;
	json_error_t jerr;
	json_t *j;
	int n = 0;

	if (as_nobody) {
		argv[n++] = "setpriv";
		argv[n++] = "--reuid=65534";
		argv[n++] = "--regid=65534";
		argv[n++] = "--clear-groups";
	}
	argv[n++] = spawn__vmm_path();
	argv[n++] = "facts";
	for (; *args && n < MAX_ARGS - 1; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (spawn__run(argv, NULL, &r))
		abort();
	EXPECT_EQ(0, r.status) TH_LOG("stderr: %s", r.err);
	j = json_loads(r.out, 0, &jerr);
	EXPECT_TRUE(json_is_array(j)) TH_LOG("stdout: %s", r.out);
	return j;
}

/*
 * `vmm facts --config FILE` and the same settings as options print the
 * same array, which is what facts__config_offline makes of them.
 */
TEST_F(cfg, vmm_facts_config_file_and_options)
{
	char doc[1024], err[CONFIG_ERR_LEN];
	json_t *from_file, *from_args, *in_process;
	struct vm_config c;

	snprintf(doc, sizeof(doc),
		 "{\"kernel\": \"/boot/vmlinux\", \"cpus\": 2, \"memoryMiB\": "
		 "512, \"hostname\": \"agent-42\", \"cwd\": \"/workspace\", "
		 "\"rootfs\": {\"image\": \"%s\", \"mode\": \"readonly\"}, "
		 "\"mounts\": {\"/workspace\": {\"memory\": {}}, \"/src\": "
		 "{\"bind\": {\"source\": \"/tmp\", \"access\": \"ro\"}}}, "
		 "\"net\": {\"mode\": \"auto\", \"mac\": "
		 "\"02:4b:4c:01:02:03\", \"policy\": {\"tcp\": [{\"to\": "
		 "\"10.9.0.0/16\"}]}}, \"controlSocket\": \"%s/ctl.sock\"}",
		 self->desc, self->dir);
	write_str(self->json, doc);
	from_file = vmm_facts(_metadata, ARGS("--config", self->json), false);
	from_args = vmm_facts(_metadata, ARGS(FULL_ARGS(self)), false);
	ASSERT_EQ(0, parse(&c, ARGS(FULL_ARGS(self)), err, sizeof(err)));
	ASSERT_EQ(0, facts__config_offline(&c, &in_process, err, sizeof(err)));
	EXPECT_TRUE(json_equal(from_file, from_args));
	EXPECT_TRUE(json_equal(from_args, in_process));
	EXPECT_EQ(ARRAY_SIZE(full_want), json_array_size(from_file));
	json_decref(from_file);
	json_decref(from_args);
	json_decref(in_process);
	config__free(&c);
}

/* No KVM needed: a user who cannot open /dev/kvm gets the same facts. */
TEST_F(cfg, vmm_facts_without_kvm)
{
	json_t *mine, *nobodys;

	if (geteuid() != 0)
		SKIP(return, "needs root to drop to another user");
	mine = vmm_facts(_metadata, ARGS(FULL_ARGS(self)), false);
	nobodys = vmm_facts(_metadata, ARGS(FULL_ARGS(self)), true);
	EXPECT_TRUE(json_equal(mine, nobodys));
	json_decref(mine);
	json_decref(nobodys);
}

/*
 * The descriptor's own "facts" follow Kiln's, the one that repeats
 * "rootfs-image is NAME" once, then the builder's NAME.facts.json; `vmm
 * facts` prints them as vm.facts would give them.
 */
TEST_F(cfg, descriptor_facts)
{
	static const char *const want[][3] = {
		{ "rootfs-image", "is", "test-root:1" },
		{ "rootfs-write-mode", "is", "ephemeral" },
		{ "network-egress", "is", "none" },
		{ "distro", "is", "alpine" },
		{ "command", "exists", "apk" },
		{ "os", "distribution", "debian" },
	};
	char doc[1024];
	json_t *facts, *f;
	size_t i, j, seen;

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"test-root:1\", \"path\": \"%s\", \"format\": "
		 "\"raw\", \"architecture\": \"x64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 4096, \"facts\": ["
		 "{\"source\": \"config\", \"topic\": \"rootfs-image\", "
		 "\"relation\": \"is\", \"value\": \"test-root:1\"}, "
		 "{\"source\": \"config\", \"topic\": \"distro\", "
		 "\"relation\": \"is\", \"value\": \"alpine\"}, "
		 "{\"source\": \"config\", \"topic\": \"command\", "
		 "\"relation\": \"exists\", \"value\": \"apk\"}]}",
		 self->image, ZERO_BLOCK_DIGEST);
	write_str(self->desc, doc);
	facts = vmm_facts(
		_metadata,
		ARGS("--kernel", "/boot/vmlinux", "--rootfs", self->desc),
		false);
	ASSERT_TRUE(json_is_array(facts));
	for (i = 0; i < ARRAY_SIZE(want); i++) {
		seen = 0;
		json_array_foreach(facts, j, f)
		{
			if (!strcmp(field(f, "topic"), want[i][0]) &&
			    !strcmp(field(f, "relation"), want[i][1]) &&
			    !strcmp(field(f, "value"), want[i][2]))
				seen++;
			EXPECT_STREQ("config", field(f, "source"));
		}
		EXPECT_EQ(1, seen)
		TH_LOG("%s %s %s: %zu times", want[i][0], want[i][1],
		       want[i][2], seen);
	}
	/* In that order: Kiln's, the descriptor's, the builder's. */
	f = json_array_get(facts, json_array_size(facts) - 3);
	EXPECT_STREQ("distro", field(f, "topic"));
	f = json_array_get(facts, json_array_size(facts) - 1);
	EXPECT_STREQ("os", field(f, "topic"));
	json_decref(facts);
}

TEST_F(cfg, vmm_facts_bad_input)
{
	struct spawn_result r;
	char missing[128];

	snprintf(missing, sizeof(missing), "%s/none.json", self->dir);
	if (spawn__run(ARGS(spawn__vmm_path(), "facts", "--config", missing),
		       NULL, &r))
		abort();
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.err, "none.json") != NULL) TH_LOG("%s", r.err);
	EXPECT_EQ(0, r.out_len);
	if (spawn__run(ARGS(spawn__vmm_path(), "facts", "--kernel", "/k",
			    "--hostname", "no_way"),
		       NULL, &r))
		abort();
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.err, "hostname \"no_way\"") != NULL)
	TH_LOG("%s", r.err);
	/* A descriptor's bad fact: one line naming it. */
	write_str(
		self->desc,
		"{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
		"\"architecture\": \"x86_64\", \"digest\": \"" ZERO_BLOCK_DIGEST
		"\", \"sizeBytes\": 4096, \"facts\": [{\"source\": "
		"\"guest\", \"topic\": \"t\", \"relation\": \"is\", "
		"\"value\": \"v\"}]}");
	if (spawn__run(ARGS(spawn__vmm_path(), "facts", "--kernel", "/k",
			    "--rootfs", self->desc),
		       NULL, &r))
		abort();
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.err, "facts[0].source \"guest\"") != NULL)
	TH_LOG("%s", r.err);
}

TEST_HARNESS_MAIN
