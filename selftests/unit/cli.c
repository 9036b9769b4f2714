// SPDX-License-Identifier: GPL-2.0
/*
 * `vmm run` bad input: every case gives one line on stderr naming the file
 * or option and the reason, and exit status 125, before KVM is touched (so
 * these run on any host). KILN_VMM names the binary (default build/vmm).
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/fake_kernel.h"
#include "selftests/spawn.h"

#define VMM_EXIT_VMM_ERROR 125

/* Run vmm with argv (argv[0] ignored), as user uid when given. */
static void run_vmm(const char *const argv[], const char *uid,
		    struct spawn_result *r)
{
	const char *args[64];
	int i = 0, j = 1;

	if (uid) {
		args[i++] = "setpriv";
		args[i++] = uid;
		args[i++] = "--regid=65534";
		args[i++] = "--clear-groups";
	}
	args[i++] = spawn__vmm_path();
	while (argv[j] && i < 63)
		args[i++] = argv[j++];
	args[i] = NULL;
	if (spawn__run(args, NULL, r))
		abort();
}

#define EXPECT_BAD_INPUT(r, needle)                           \
	do {                                                  \
		EXPECT_EQ(VMM_EXIT_VMM_ERROR, (r)->status);   \
		EXPECT_EQ(1, spawn__count_lines((r)->err))    \
		TH_LOG("stderr: %s", (r)->err);               \
		EXPECT_TRUE(strstr((r)->err, needle) != NULL) \
		TH_LOG("want '%s' in: %s", needle, (r)->err); \
	} while (0)

FIXTURE(files)
{
	char dir[64];
	char kernel[96]; /* a valid fake ELF vmlinux */
	char text[96];	 /* not a kernel */
	char big[96];	 /* ELF that needs 80 MiB */
	char initrd[96]; /* 40 MiB, sparse */
	char fifo[96];
	char secret[96]; /* mode 0600, owned by root */
	char json[96];
	char rootimg[96];  /* 4 KiB of zeros */
	char rootdesc[96]; /* its descriptor */
};

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
		abort();
	close(fd);
}

/* SHA-256 of 4096 zero bytes. */
#define ZERO_BLOCK_DIGEST \
	"sha256:"         \
	"ad7facb2586fc6e966c004d7d1d16b024f5805ff7cb47c7a85dabd8b48892ca7"

static void write_descriptor(const char *path, const char *name,
			     const char *image, const char *digest)
{
	char doc[512];

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"%s\", \"path\": \"%s\", \"format\": \"raw\", "
		 "\"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 4096}",
		 name, image, digest);
	write_file(path, doc, strlen(doc));
}

FIXTURE_SETUP(files)
{
	struct fake_elf f;
	char path[128];
	int fd;

	strcpy(self->dir, "/tmp/kiln-cli-XXXXXX");
	ASSERT_TRUE(mkdtemp(self->dir) != NULL);
	snprintf(self->kernel, 96, "%s/vmlinux", self->dir);
	snprintf(self->text, 96, "%s/notes.txt", self->dir);
	snprintf(self->big, 96, "%s/big-vmlinux", self->dir);
	snprintf(self->initrd, 96, "%s/initrd", self->dir);
	snprintf(self->fifo, 96, "%s/fifo", self->dir);
	snprintf(self->secret, 96, "%s/secret", self->dir);
	snprintf(self->json, 96, "%s/vm.json", self->dir);
	snprintf(self->rootimg, 96, "%s/root.raw", self->dir);
	snprintf(self->rootdesc, 96, "%s/root.json", self->dir);

	make_elf(&f);
	write_file(self->kernel, &f, sizeof(f));
	write_file(self->text, "hello\n", 6);
	f.ph[1].p_memsz = 80ULL << 20;
	write_file(self->big, &f, sizeof(f));
	fd = open(self->initrd, O_WRONLY | O_CREAT, 0644);
	ASSERT_EQ(0, ftruncate(fd, 40 << 20));
	close(fd);
	ASSERT_EQ(0, mkfifo(self->fifo, 0644));
	make_elf(&f);
	write_file(self->secret, &f, sizeof(f));
	ASSERT_EQ(0, chmod(self->secret, 0600));
	fd = open(self->rootimg, O_WRONLY | O_CREAT, 0644);
	ASSERT_EQ(0, ftruncate(fd, 4096));
	close(fd);
	write_descriptor(self->rootdesc, "test-root-1", self->rootimg,
			 ZERO_BLOCK_DIGEST);
	/* Keep verification cache entries for these files out of ~/.cache. */
	snprintf(path, sizeof(path), "%s/cache", self->dir);
	ASSERT_EQ(0, setenv("KILN_CACHE", path, 1));
}

FIXTURE_TEARDOWN(files)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

TEST_F(files, missing_kernel)
{
	char path[128];
	struct spawn_result r;

	snprintf(path, sizeof(path), "%s/nope", self->dir);
	run_vmm((const char *[]){ "", "run", "--kernel", path, NULL }, NULL,
		&r);
	EXPECT_BAD_INPUT(&r, "No such file or directory");
	EXPECT_TRUE(strstr(r.err, path) != NULL);
	/* Not where the Makefile builds one: no make target named. */
	EXPECT_TRUE(strstr(r.err, "make") == NULL) TH_LOG("%s", r.err);
}

TEST_F(files, missing_initrd)
{
	char path[128];
	struct spawn_result r;

	snprintf(path, sizeof(path), "%s/nope.cpio", self->dir);
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--initrd", path, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "nope.cpio: No such file or directory");
}

TEST_F(files, unreadable_kernel)
{
	struct spawn_result r;

	if (geteuid() != 0)
		SKIP(return, "needs root to drop to another user");
	run_vmm((const char *[]){ "", "run", "--kernel", self->secret, NULL },
		"--reuid=65534", &r);
	EXPECT_BAD_INPUT(&r, "Permission denied");
}

TEST_F(files, directory_and_fifo)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->dir, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "is a directory");
	/* A FIFO must be refused, not block the vmm forever. */
	run_vmm((const char *[]){ "", "run", "--kernel", self->fifo, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "not a regular file");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--initrd", self->fifo, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "not a regular file");
}

TEST_F(files, not_a_kernel)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->text, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r,
			 "notes.txt: not an ELF64 x86-64 vmlinux or bzImage");
	run_vmm((const char *[]){ "", "run", "--kernel", "/bin/sh", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "/bin/sh: ELF file is not an executable kernel");
}

TEST_F(files, kernel_too_big_for_memory)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->big, "--memory",
				  "64", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "kernel does not fit in guest memory");
	EXPECT_TRUE(strstr(r.err, self->big) != NULL);
}

TEST_F(files, initrd_too_big_for_memory)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--initrd", self->initrd, "--memory", "48",
				  NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "initrd does not fit");
	EXPECT_TRUE(strstr(r.err, self->initrd) != NULL);
}

TEST_F(files, cmdline_over_limit)
{
	char *cmd = malloc(3000);
	struct spawn_result r;

	memset(cmd, 'a', 2999);
	cmd[2999] = 0;
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--cmdline", cmd, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "command line longer than the boot protocol");
	free(cmd);
}

TEST_F(files, cpu_counts)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel, "--cpus",
				  "0", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "cpus 0: must be between 1 and 64");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel, "--cpus",
				  "65", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "cpus 65: must be between 1 and 64");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel, "--cpus",
				  "99999999999999999999", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "out of range");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel, "--cpus",
				  "-1", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "not a decimal number");
}

TEST_F(files, memory_sizes)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--memory", "0", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "memory 0 MiB: must be between");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--memory", "4000000", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "memory 4000000 MiB: must be between");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--memory", "12abc", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--memory 12abc: not a size (MiB, or bytes with "
			     "a K, M, G or T suffix: 256, 512M, 2G)");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--memory", "1536K", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--memory 1536K: not a whole number of MiB");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--memory", "8M", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "memory 8 MiB: must be between");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--memory", "99999T", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--memory 99999T: out of range");
}

/*
 * --memory and "memoryMiB" take a size: a plain number is MiB, as it
 * always was; a suffix makes it bytes (K, M, G, T, KiB...). vmm facts
 * says what was understood, without KVM.
 */
TEST_F(files, memory_size_suffixes)
{
	static const struct {
		const char *arg, *mib;
	} cases[] = {
		{ "300", "\"300\"" },	{ "256M", "\"256\"" },
		{ "2G", "\"2048\"" },	{ "512MiB", "\"512\"" },
		{ "65536K", "\"64\"" }, { "1GiB", "\"1024\"" },
	};
	struct spawn_result r;
	char doc[256];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		run_vmm((const char *[]){ "", "facts", "--kernel", self->kernel,
					  "--memory", cases[i].arg, NULL },
			NULL, &r);
		EXPECT_EQ(0, r.status)
		TH_LOG("--memory %s: %s", cases[i].arg, r.err);
		EXPECT_TRUE(strstr(r.out, "\"memory-mib\"") != NULL);
		EXPECT_TRUE(strstr(r.out, cases[i].mib) != NULL)
		TH_LOG("--memory %s: want %s in %s", cases[i].arg, cases[i].mib,
		       r.out);
	}
	snprintf(doc, sizeof(doc),
		 "{\"kernel\": \"%s\", \"memoryMiB\": \"1G\"}", self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "facts", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.out, "\"1024\"") != NULL) TH_LOG("%s", r.out);
	snprintf(doc, sizeof(doc),
		 "{\"kernel\": \"%s\", \"memoryMiB\": \"lots\"}", self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "\"memoryMiB\" lots: not a size");
	snprintf(doc, sizeof(doc), "{\"kernel\": \"%s\", \"memoryMiB\": -1}",
		 self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "\"memoryMiB\" must be an integer from 0 to "
			     "4294967295, or a string such as \"2G\"");
}

TEST_F(files, json_config_errors)
{
	char doc[512];
	struct spawn_result r;

	snprintf(doc, sizeof(doc), "{\"kernel\": \"%s\", \"cpu\": 2}",
		 self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "unknown key \"cpu\"");

	snprintf(doc, sizeof(doc), "{\"kernel\": \"%s\", \"cpus\": \"2\"}",
		 self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "\"cpus\" must be an integer");

	write_file(self->json, "{\"kernel\": ", 11);
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "vm.json: line 1");

	snprintf(doc, sizeof(doc), "{\"kernel\": \"%s\", \"cpus\": 0}",
		 self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "cpus 0: must be between 1 and 64");

	snprintf(doc, sizeof(doc), "{\"kernel\": \"%s\", \"command\": []}",
		 self->kernel);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "\"command\" must be a non-empty array");
}

TEST_F(files, rootfs_options)
{
	char state[128];
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  "bogus", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--rootfs-mode bogus: must be ephemeral, "
			     "readonly, persistent:/abs/path or "
			     "cow:/path/store.sock");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  "cow", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "give the block store's socket: "
			     "cow:/path/store.sock");
	/* A store that is not there: said before anything is built. */
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  "cow:/nonexistent/store.sock", NULL },
		NULL, &r);
	EXPECT_NE(0, r.status);
	EXPECT_NE(NULL, strstr(r.err, "rootfs block store "
				      "\"/nonexistent/store.sock\": store "
				      "socket \"/nonexistent/store.sock\": No "
				      "such file or directory"))
	TH_LOG("stderr: %s", r.err);
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  "persistent", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "give the state file: persistent:/abs/path");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  "persistent:state.delta", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "\"state.delta\": must be an absolute path");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  "readonly", "--max-dirty-bytes", "1M", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "only for a writable root (mode is readonly)");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc,
				  "--max-dirty-bytes", "12X", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--max-dirty-bytes 12X: not a byte count");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc,
				  "--max-dirty-bytes", "99999999999T", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--max-dirty-bytes 99999999999T: out of range");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs-mode", "readonly", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "rootfs options given without a root image");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-verify",
				  "sometimes", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--rootfs-verify sometimes: must be full or "
			     "cached");
	/* The base image is never written: not as a state file either. */
	snprintf(state, sizeof(state), "persistent:%s", self->rootimg);
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, "--rootfs-mode",
				  state, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "is the base image");
}

TEST_F(files, rootfs_descriptors)
{
	char path[128];
	struct spawn_result r;

	snprintf(path, sizeof(path), "%s/nope.json", self->dir);
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", path, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "nope.json: No such file or directory");

	write_descriptor(self->rootdesc, "debian:latest", self->rootimg,
			 ZERO_BLOCK_DIGEST);
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "name \"debian:latest\": \"latest\" is a "
			     "moving alias");
	EXPECT_TRUE(strstr(r.err, self->rootdesc) != NULL);

	write_descriptor(self->rootdesc, "test-root-1", self->rootimg,
			 "sha256:0000");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--rootfs", self->rootdesc, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "digest \"sha256:0000\": must be");
}

TEST_F(files, rootfs_json_errors)
{
	static const struct {
		const char *rootfs; /* the "rootfs" value; DESC: descriptor */
		const char *needle;
	} cases[] = {
		{ "\"DESC\"", "\"rootfs\" must be an object" },
		{ "{\"image\": \"DESC\", \"mode\": \"temp\"}",
		  "\"rootfs.mode\" must be \"ephemeral\", \"readonly\", "
		  "\"persistent\" or \"cow\"" },
		{ "{\"image\": \"DESC\", \"size\": 1}",
		  "unknown key \"rootfs.size\"" },
		{ "{\"image\": \"DESC\", \"maxDirtyBytes\": \"lots\"}",
		  "\"rootfs.maxDirtyBytes\" must be a byte count" },
		{ "{\"image\": \"DESC\", \"maxDirtyBytes\": -1}",
		  "\"rootfs.maxDirtyBytes\" must be a byte count" },
		{ "{\"image\": \"DESC\", \"direct\": \"yes\"}",
		  "\"rootfs.direct\" must be true or false" },
		{ "{\"image\": \"DESC\", \"verify\": \"never\"}",
		  "\"rootfs.verify\" must be \"cached\" or \"full\"" },
		{ "{\"image\": \"DESC\", \"statePath\": 5}",
		  "\"rootfs.statePath\" must be a string" },
		{ "{\"image\": \"DESC\", \"mode\": \"persistent\"}",
		  "rootfs mode persistent needs a state file" },
		{ "{\"image\": \"DESC\", \"statePath\": \"/tmp/x\"}",
		  "only the persistent mode keeps one (mode is ephemeral)" },
		{ "{\"image\": \"DESC\", \"mode\": \"readonly\", "
		  "\"maxDirtyBytes\": \"1MiB\"}",
		  "only for a writable root" },
		{ "{\"mode\": \"readonly\"}",
		  "rootfs options given without a root image" },
		{ "{\"image\": \"DESC\", \"mode\": \"cow\"}",
		  "rootfs mode cow needs a block store's socket" },
		{ "{\"image\": \"DESC\", \"storeSocket\": \"/tmp/s\"}",
		  "only the cow mode uses one (mode is ephemeral)" },
	};
	char doc[1024], val[512];
	struct spawn_result r;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *d = strstr(cases[i].rootfs, "DESC");

		if (d)
			snprintf(val, sizeof(val), "%.*s%s%s",
				 (int)(d - cases[i].rootfs), cases[i].rootfs,
				 self->rootdesc, d + 4);
		else
			snprintf(val, sizeof(val), "%s", cases[i].rootfs);
		snprintf(doc, sizeof(doc),
			 "{\"kernel\": \"%s\", \"rootfs\": %s}", self->kernel,
			 val);
		write_file(self->json, doc, strlen(doc));
		run_vmm((const char *[]){ "", "run", "--config", self->json,
					  NULL },
			NULL, &r);
		EXPECT_BAD_INPUT(&r, cases[i].needle);
	}
}

/*
 * A good rootfs section passes validation: the run then stops at the next
 * check (a kernel too big for the memory). An option after --config
 * overrides the file's mode, state file included.
 */
TEST_F(files, rootfs_json_override)
{
	char doc[1024];
	struct spawn_result r;

	snprintf(doc, sizeof(doc),
		 "{\"kernel\": \"%s\", \"memoryMiB\": 64, \"rootfs\": "
		 "{\"image\": \"%s\", \"mode\": \"persistent\", "
		 "\"statePath\": \"%s/state\", \"maxDirtyBytes\": \"1GiB\", "
		 "\"direct\": false, \"verify\": \"full\"}}",
		 self->big, self->rootdesc, self->dir);
	write_file(self->json, doc, strlen(doc));
	run_vmm((const char *[]){ "", "run", "--config", self->json, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "kernel does not fit in guest memory");
	run_vmm((const char *[]){ "", "run", "--config", self->json,
				  "--rootfs-mode", "ephemeral", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "kernel does not fit in guest memory");
}

static bool host_has_hw_virt(void)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/cpuinfo", "re");

	while (f && !found && fgets(line, sizeof(line), f))
		found = !strncmp(line, "flags", 5) &&
			(strstr(line, " vmx") || strstr(line, " svm"));
	if (f)
		fclose(f);
	return found;
}

/* On a software-only KVM (kvm_pvm) vmm says so, once, and points on. */
TEST_F(files, software_kvm_warning)
{
	struct spawn_result r;
	const char *w;

	if (access("/sys/module/kvm_pvm", F_OK) || host_has_hw_virt())
		SKIP(return, "host KVM is not the software kvm_pvm backend");
	/*
	 * The warning comes before the guest runs; what the fake kernel's
	 * garbage code then does under the emulator is not ours to test,
	 * so the run is cut short.
	 */
	ASSERT_EQ(0, spawn__run((const char *[]){ "timeout", "-k", "5", "5",
						  spawn__vmm_path(), "run",
						  "--kernel", self->kernel,
						  "--", "true", NULL },
				NULL, &r));
	w = strstr(r.err, "software PVM backend");
	ASSERT_TRUE(w != NULL) TH_LOG("stderr: %s", r.err);
	EXPECT_TRUE(strstr(w, "use tools/vmtest") != NULL);
	EXPECT_TRUE(strstr(w + 1, "software PVM backend") == NULL);
}

/*
 * vmm probe-kvm: one JSON line, exit 0 (usable) or 1 (not, with the
 * reason this host gives), never 125 without a bad argument.
 */
TEST(probe_kvm)
{
	struct spawn_result r;
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int open_errno = errno;

	run_vmm((const char *[]){ "", "probe-kvm", NULL }, NULL, &r);
	EXPECT_EQ(1, spawn__count_lines(r.out)) TH_LOG("stdout: %s", r.out);
	if (fd < 0) {
		EXPECT_EQ(1, r.status);
		EXPECT_TRUE(
			strstr(r.out, "{\"usable\": false, \"reason\": \"") ==
			r.out)
		TH_LOG("stdout: %s", r.out);
		EXPECT_TRUE(strstr(r.out, strerror(open_errno)) != NULL)
		TH_LOG("want '%s' in: %s", strerror(open_errno), r.out);
	} else if (!access("/sys/module/kvm_pvm", F_OK) &&
		   !host_has_hw_virt()) {
		EXPECT_EQ(1, r.status);
		EXPECT_TRUE(strstr(r.out, "software PVM backend") != NULL)
		TH_LOG("stdout: %s", r.out);
	} else {
		/* a real KVM: usable unless it lacks a capability */
		EXPECT_TRUE(r.status == 0 ?
				    !strcmp(r.out, "{\"usable\": true}\n") :
				    strstr(r.out, "KVM lacks") != NULL)
		TH_LOG("status %d, stdout: %s", r.status, r.out);
	}
	if (fd >= 0)
		close(fd);
	run_vmm((const char *[]){ "", "probe-kvm", "--verbose", NULL }, NULL,
		&r);
	EXPECT_BAD_INPUT(&r, "probe-kvm: takes no arguments");
}

TEST(usage_errors)
{
	struct spawn_result r;

	/* No kernel and no default guest (selftests/unit/guest_default.c). */
	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", "/nonexistent", 1));
	run_vmm((const char *[]){ "", "run", NULL }, NULL, &r);
	unsetenv("KILN_GUEST_DIR");
	EXPECT_BAD_INPUT(&r, "no kernel given");
	run_vmm((const char *[]){ "", "frobnicate", NULL }, NULL, &r);
	EXPECT_BAD_INPUT(&r, "unknown command 'frobnicate'");
	run_vmm((const char *[]){ "", "run", "--kernel", "x", "stray", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "unexpected argument 'stray'");
}

/*
 * A mistyped option: one line naming it and the nearest spelling, exit
 * 125, never the usage. Names are exact: a prefix getopt_long would have
 * taken ("--kern" for --kernel) is refused like any unknown name.
 */
TEST(unknown_options)
{
	static const struct {
		const char *argv[6];
		const char *want;
	} cases[] = {
		{ { "", "run", "--memroy", "256" },
		  "run: unknown option --memroy (did you mean --memory?)" },
		{ { "", "run", "--cpu", "2" },
		  "run: unknown option --cpu (did you mean --cpus?)" },
		{ { "", "run", "--mem", "256" },
		  "run: unknown option --mem (did you mean --memory?)" },
		{ { "", "run", "--kern", "/k" },
		  "run: unknown option --kern (did you mean --kernel?)" },
		{ { "", "run", "--kernel=/k", "--cpus=2", "--memroy=64" },
		  "run: unknown option --memroy (did you mean --memory?)" },
		{ { "", "start", "--control-sock", "/tmp/x.sock" },
		  "start: unknown option --control-sock (did you mean "
		  "--control-socket?)" },
		{ { "", "facts", "--hostnme", "h" },
		  "facts: unknown option --hostnme (did you mean --hostname?)" },
		{ { "", "run", "--frobnicate" },
		  "run: unknown option --frobnicate" },
		{ { "", "run", "--kernel", "/k", "--cpus" },
		  "run: --cpus needs a value" },
		{ { "", "run", "--verbose=yes" },
		  "run: --verbose takes no value" },
		{ { "", "run", "-x" }, "run: unknown option -x" },
	};
	struct spawn_result r;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		run_vmm(cases[i].argv, NULL, &r);
		EXPECT_BAD_INPUT(&r, cases[i].want);
		EXPECT_TRUE(strstr(r.err, "usage") == NULL);
	}
	/* Nothing close: the name alone, no suggestion. */
	run_vmm((const char *[]){ "", "run", "--frobnicate", NULL }, NULL, &r);
	EXPECT_TRUE(strstr(r.err, "did you mean") == NULL) TH_LOG("%s", r.err);
}

/*
 * A kernel, initrd or image that is not there, at the path the Makefile
 * builds it at (DIR/guest/..., DIR/images/...): the line says which make
 * target builds it, with O=DIR unless DIR is named build. Elsewhere, the
 * plain message.
 */
TEST_F(files, missing_build_outputs)
{
	char kernel[160], other[160], initrd[160], image[160], want[512];
	struct spawn_result r;

	snprintf(kernel, sizeof(kernel), "%s/build/guest/vmlinux", self->dir);
	snprintf(other, sizeof(other), "%s/out/guest/bzImage", self->dir);
	snprintf(initrd, sizeof(initrd), "%s/build/guest/initramfs.cpio",
		 self->dir);
	snprintf(image, sizeof(image), "%s/build/images/debian-12-agent.json",
		 self->dir);

	run_vmm((const char *[]){ "", "run", "--kernel", kernel, "--", "true",
				  NULL },
		NULL, &r);
	snprintf(want, sizeof(want),
		 "%s: No such file or directory (make guest builds it)",
		 kernel);
	EXPECT_BAD_INPUT(&r, want);
	run_vmm((const char *[]){ "", "run", "--kernel", other, NULL }, NULL,
		&r);
	snprintf(want, sizeof(want),
		 "%s: No such file or directory (make O=%s/out guest builds "
		 "it)",
		 other, self->dir);
	EXPECT_BAD_INPUT(&r, want);
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--initrd", initrd, NULL },
		NULL, &r);
	snprintf(want, sizeof(want),
		 "%s: No such file or directory (make guest builds it)",
		 initrd);
	EXPECT_BAD_INPUT(&r, want);
	run_vmm((const char *[]){ "", "start", "--kernel", self->kernel,
				  "--control-socket", "/tmp/x.sock", "--rootfs",
				  image, NULL },
		NULL, &r);
	snprintf(want, sizeof(want),
		 "%s: No such file or directory (make image builds it)", image);
	EXPECT_BAD_INPUT(&r, want);

	/* Another name in the same place: no target to name. */
	snprintf(other, sizeof(other), "%s/build/guest/vmlinux.old", self->dir);
	run_vmm((const char *[]){ "", "run", "--kernel", other, NULL }, NULL,
		&r);
	EXPECT_BAD_INPUT(&r, "No such file or directory");
	EXPECT_TRUE(strstr(r.err, "make") == NULL) TH_LOG("%s", r.err);
}

TEST(help_and_version)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "--help", NULL }, NULL, &r);
	EXPECT_EQ(0, r.status);
	run_vmm((const char *[]){ "", "--version", NULL }, NULL, &r);
	EXPECT_EQ(0, r.status);
}

/* vmm start and the control socket: refused before anything is built. */
TEST_F(files, start_bad_input)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "start", "--kernel", self->kernel, NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "vmm start needs --control-socket");
	run_vmm((const char *[]){ "", "start", "--kernel", self->kernel,
				  "--control-socket", "/tmp/x.sock", "--",
				  "true", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "vmm start takes no command");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--detach", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--detach is for vmm start");
	run_vmm((const char *[]){ "", "start", "--kernel", self->kernel,
				  "--control-socket", "/tmp/x.sock",
				  "--pid-file", "/tmp/x.pid", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--pid-file needs --detach");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--ready-timeout-ms", "1000", "--", "true",
				  NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "--ready-timeout-ms needs --control-socket");
	run_vmm((const char *[]){ "", "start", "--kernel", self->kernel,
				  "--control-socket", "", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "control socket: empty path");
}

/* --hostname and --cwd: one line naming the value, before KVM. */
TEST_F(files, identity_bad_input)
{
	struct spawn_result r;

	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--hostname", "bad_name", "--", "true",
				  NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "hostname \"bad_name\": character 4 is not");
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel,
				  "--hostname", "-x", "--", "true", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "starts or ends with '-'");
	run_vmm((const char *[]){ "", "start", "--kernel", self->kernel,
				  "--control-socket", "/tmp/x.sock", "--cwd",
				  "workspace", NULL },
		NULL, &r);
	EXPECT_BAD_INPUT(&r, "cwd \"workspace\": must be an absolute path");
}

static void write_str(const char *path, const char *text)
{
	write_file(path, text, strlen(text));
}

/* --mount and "mounts": refused with the mount named, before KVM. */
TEST_F(files, mount_bad_input)
{
	char missing[160], nosock[160], spec[200];
	struct spawn_result r;

#define RUN_MOUNT(...)                                                 \
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel, \
				  __VA_ARGS__, "--", "true", NULL },   \
		NULL, &r)
	RUN_MOUNT("--mount", "nothing");
	EXPECT_BAD_INPUT(&r, "--mount nothing: expected GUEST_PATH=");
	RUN_MOUNT("--mount", "rel=bind:/tmp:rw");
	EXPECT_BAD_INPUT(&r, "mount \"rel\": guest path must be an absolute");
	RUN_MOUNT("--mount", "/=bind:/tmp:rw");
	EXPECT_BAD_INPUT(&r, "guest path cannot be /");
	RUN_MOUNT("--mount", "/w/../x=bind:/tmp:rw");
	EXPECT_BAD_INPUT(&r, "has a . or .. component");
	RUN_MOUNT("--mount", "/w=bind:relative/dir");
	EXPECT_BAD_INPUT(&r, "bind source \"relative/dir\" must be an "
			     "absolute path");
	RUN_MOUNT("--mount", "/w=memory:lots");
	EXPECT_BAD_INPUT(&r, "memory size \"lots\" is not a byte count");
	RUN_MOUNT("--mount", "/w=nfs:server");
	EXPECT_BAD_INPUT(&r, "--mount /w=nfs:server: unknown source");
	RUN_MOUNT("--mount", "/w=bind:/tmp", "--mount", "/w/=memory");
	EXPECT_BAD_INPUT(&r, "mount /w: given twice");

	/* Host sides that are not there: named by the backend. */
	snprintf(missing, sizeof(missing), "%s/no-such-dir", self->dir);
	snprintf(spec, sizeof(spec), "/w=bind:%s", missing);
	RUN_MOUNT("--mount", spec);
	EXPECT_BAD_INPUT(&r, missing);
	snprintf(spec, sizeof(spec), "/w=bind:%s", self->text);
	RUN_MOUNT("--mount", spec);
	EXPECT_BAD_INPUT(&r, self->text);
	snprintf(nosock, sizeof(nosock), "%s/no.sock", self->dir);
	snprintf(spec, sizeof(spec), "/v=virtual:%s", nosock);
	RUN_MOUNT("--mount", spec);
	EXPECT_BAD_INPUT(&r, nosock);

	/* JSON: unknown keys and types, by their full name. */
	write_str(self->json,
		  "{\"mounts\": {\"/w\": {\"bind\": {\"sorce\": \"/tmp\"}}}}");
	RUN_MOUNT("--config", self->json);
	EXPECT_BAD_INPUT(&r, "unknown key \"mounts[\"/w\"].bind.sorce\"");
	write_str(self->json,
		  "{\"mounts\": {\"/w\": {\"bind\": {\"source\": \"/tmp\", "
		  "\"mask\": {\"paths\": [\"/x\"]}}}}}");
	RUN_MOUNT("--config", self->json);
	EXPECT_BAD_INPUT(&r, "needs mask.storage");
	write_str(self->json, "{\"mounts\": {\"/m\": {\"memory\": {\"files\": "
			      "{\"rel\": \"x\"}}}}}");
	RUN_MOUNT("--config", self->json);
	EXPECT_BAD_INPUT(&r, "memory file \"rel\" must be an absolute path");
	write_str(self->json, "{\"mounts\": [\"/w\"]}");
	RUN_MOUNT("--config", self->json);
	EXPECT_BAD_INPUT(&r, "\"mounts\" must be an object");
#undef RUN_MOUNT
}

/* --net and "net": one line naming the option or key, before KVM. */
TEST_F(files, net_bad_input)
{
	struct spawn_result r;

#define RUN_NET(...)                                                   \
	run_vmm((const char *[]){ "", "run", "--kernel", self->kernel, \
				  __VA_ARGS__, "--", "true", NULL },   \
		NULL, &r)
	RUN_NET("--net", "bridge");
	EXPECT_BAD_INPUT(&r, "--net bridge: must be auto, netns:/path, "
			     "tap-fd:N or none");
	RUN_NET("--net", "tap-fd:1");
	EXPECT_BAD_INPUT(&r, "net tap fd 1: must be 3 or more");
	RUN_NET("--net-mtu", "1500");
	EXPECT_BAD_INPUT(&r, "net options given without a network");
	RUN_NET("--net", "auto", "--net-address", "10.0.2.15");
	EXPECT_BAD_INPUT(&r, "--net-address 10.0.2.15: not an IPv4 address "
			     "with a prefix length");
	RUN_NET("--net", "auto", "--net-gateway", "10.1.0.1");
	EXPECT_BAD_INPUT(&r, "net gateway 10.1.0.1 (--net-gateway, "
			     "\"net.gateway\"): must be another host");
	RUN_NET("--net", "auto", "--net-mac", "01:00:5e:00:00:01");
	EXPECT_BAD_INPUT(&r, "must be a nonzero unicast address");
	RUN_NET("--net", "auto", "--net-mtu", "70000");
	EXPECT_BAD_INPUT(&r, "net MTU 70000 (--net-mtu, \"net.mtu\")");
	/* A tap-fd that is not open: refused before KVM (net step). */
	RUN_NET("--net", "tap-fd:77");
	EXPECT_BAD_INPUT(&r, "net tap fd 77: Bad file descriptor");
	RUN_NET("--net", "netns:/no/such/netns");
	EXPECT_BAD_INPUT(&r, "net namespace /no/such/netns: No such file");

	write_str(self->json, "{\"net\": {\"mode\": \"auto\", \"mtu\": 20}}");
	RUN_NET("--config", self->json);
	EXPECT_BAD_INPUT(&r, "net MTU 20 (--net-mtu, \"net.mtu\")");
	write_str(self->json, "{\"net\": {\"mode\": \"netns\"}}");
	RUN_NET("--config", self->json);
	EXPECT_BAD_INPUT(&r, "net mode netns needs the namespace's path");
	write_str(self->json, "{\"net\": {\"mode\": \"auto\", \"dns\": 53}}");
	RUN_NET("--config", self->json);
	EXPECT_BAD_INPUT(&r, "\"net.dns\" must be an IPv4 address");
#undef RUN_NET
}

TEST_HARNESS_MAIN
