// SPDX-License-Identifier: GPL-2.0
/*
 * The default guest (vmm/guest-default.c): the lookup order
 * (KILN_GUEST_DIR, the build tree the vmm runs from, the installed
 * directory; a chosen place without pins.json is an error, never a fall
 * through), the pins checked before anything is built (a changed file
 * refused naming its path and both digests, also when the verification
 * cache had vouched for its earlier state), and what `vmm run`, `vmm
 * facts` and `vmm --version` make of it. No boot: the refusals come
 * before /dev/kvm is opened. KILN_VMM names the binary (default
 * build/vmm).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/sha256.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"
#include "vmm/guest-default.h"

#define VMM_EXIT_VMM_ERROR 125
#define FAKE_RELEASE	   "6.1.99-kiln"

FIXTURE(guest)
{
	char dir[64];
	char env[96];	  /* a KILN_GUEST_DIR with a good guest */
	char tree[96];	  /* a build tree: .cflags, guest/ */
	char bare[96];	  /* a directory that is no build tree */
	char install[96]; /* an installed guest */
	char empty[96];	  /* no pins.json */
	char kdigest[GUEST_DIGEST_LEN];
};

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		abort();
	close(fd);
}

static void digest_of(const char *text, char out[GUEST_DIGEST_LEN])
{
	char hex[SHA256_HEX_LEN + 1];

	if (sha256__hex(text, strlen(text), hex))
		abort();
	snprintf(out, GUEST_DIGEST_LEN, "sha256:%s", hex);
}

static const char kernel_text[] =
	"\177ELF not really a kernel, but its banner: Linux version %s"
	"Linux version " FAKE_RELEASE " (kiln@test) #1 SMP\n";
static const char initrd_text[] = "070701 not really an initramfs\n";

/* dir/ with vmlinux, initramfs.cpio and their pins. */
static void make_guest(const char *dir, char kdigest[GUEST_DIGEST_LEN])
{
	char idigest[GUEST_DIGEST_LEN], pins[512];

	if (mkdir(dir, 0755) && errno != EEXIST)
		abort();
	write_file(dir, "vmlinux", kernel_text);
	write_file(dir, "initramfs.cpio", initrd_text);
	digest_of(kernel_text, kdigest);
	digest_of(initrd_text, idigest);
	snprintf(pins, sizeof(pins),
		 "{\n  \"vmlinux\": \"%s\",\n  \"initramfs.cpio\": \"%s\"\n}\n",
		 kdigest, idigest);
	write_file(dir, "pins.json", pins);
}

FIXTURE_SETUP(guest)
{
	char path[128];

	strcpy(self->dir, "/tmp/kiln-guest-XXXXXX");
	ASSERT_TRUE(mkdtemp(self->dir) != NULL);
	snprintf(self->env, sizeof(self->env), "%s/env", self->dir);
	snprintf(self->tree, sizeof(self->tree), "%s/build", self->dir);
	snprintf(self->bare, sizeof(self->bare), "%s/bin", self->dir);
	snprintf(self->install, sizeof(self->install), "%s/lib-kiln-guest",
		 self->dir);
	snprintf(self->empty, sizeof(self->empty), "%s/empty", self->dir);
	make_guest(self->env, self->kdigest);
	ASSERT_EQ(0, mkdir(self->tree, 0755));
	write_file(self->tree, GUEST_DEFAULT_TREE_MARK, "flags\n");
	snprintf(path, sizeof(path), "%s/guest", self->tree);
	make_guest(path, self->kdigest);
	ASSERT_EQ(0, mkdir(self->bare, 0755));
	make_guest(self->install, self->kdigest);
	ASSERT_EQ(0, mkdir(self->empty, 0755));
	/* Verification cache entries for these files stay in the test's. */
	snprintf(path, sizeof(path), "%s/cache", self->dir);
	ASSERT_EQ(0, setenv("KILN_CACHE", path, 1));
}

FIXTURE_TEARDOWN(guest)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

#define EXPECT_IN(hay, needle)                       \
	EXPECT_TRUE(strstr((hay), (needle)) != NULL) \
	TH_LOG("want '%s' in: %s", (needle), (hay))

/* KILN_GUEST_DIR first, then the build tree, then the installed one. */
TEST_F(guest, lookup_order)
{
	char err[1024], want[128];
	struct guest_default g;

	ASSERT_EQ(0, guest_default__find(&g, self->env, self->tree,
					 self->install, err, sizeof(err)));
	EXPECT_EQ(GUEST_FROM_ENV, g.source);
	EXPECT_STREQ(self->env, g.dir);

	/* Unset and empty are the same. */
	ASSERT_EQ(0, guest_default__find(&g, "", self->tree, self->install, err,
					 sizeof(err)));
	EXPECT_EQ(GUEST_FROM_TREE, g.source);
	snprintf(want, sizeof(want), "%s/guest", self->tree);
	EXPECT_STREQ(want, g.dir);

	ASSERT_EQ(0, guest_default__find(&g, NULL, self->bare, self->install,
					 err, sizeof(err)));
	EXPECT_EQ(GUEST_FROM_INSTALL, g.source);
	EXPECT_STREQ(self->install, g.dir);

	/* /proc/self/exe unreadable: the installed one. */
	ASSERT_EQ(0, guest_default__find(&g, NULL, NULL, self->install, err,
					 sizeof(err)));
	EXPECT_EQ(GUEST_FROM_INSTALL, g.source);
}

/* A place chosen but without pins.json is said, not skipped. */
TEST_F(guest, lookup_errors)
{
	char err[1024], tree_guest[128];
	struct guest_default g;

	EXPECT_EQ(-ENOENT,
		  guest_default__find(&g, self->empty, self->tree,
				      self->install, err, sizeof(err)));
	EXPECT_IN(err, "no kernel given");
	EXPECT_IN(err, "KILN_GUEST_DIR=");
	EXPECT_IN(err, self->empty);

	snprintf(tree_guest, sizeof(tree_guest), "%s/guest/pins.json",
		 self->tree);
	ASSERT_EQ(0, unlink(tree_guest));
	EXPECT_EQ(-ENOENT,
		  guest_default__find(&g, NULL, self->tree, self->install, err,
				      sizeof(err)));
	EXPECT_IN(err, tree_guest);
	EXPECT_IN(err, "make guest builds it");

	EXPECT_EQ(-ENOENT, guest_default__find(&g, NULL, self->bare,
					       self->empty, err, sizeof(err)));
	EXPECT_IN(err, "no installed guest");
	EXPECT_IN(err, "make install");
}

TEST_F(guest, verify_good_and_tampered)
{
	char err[1024], pin[GUEST_DIGEST_LEN], actual[GUEST_DIGEST_LEN];
	char bad[GUEST_DIGEST_LEN];
	static const char tampered[] = "\177ELF someone else's kernel\n";

	ASSERT_EQ(0, guest_default__verify(self->env, "vmlinux", pin, actual,
					   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ(self->kdigest, pin);
	EXPECT_STREQ(self->kdigest, actual);
	/* Again: the verification cache vouches now; same answer. */
	ASSERT_EQ(0, guest_default__verify(self->env, "vmlinux", pin, actual,
					   err, sizeof(err)));
	EXPECT_STREQ(self->kdigest, actual);

	/* Changed after the cache vouched for it: hashed, and refused. */
	write_file(self->env, "vmlinux", tampered);
	digest_of(tampered, bad);
	EXPECT_EQ(-EKEYREJECTED,
		  guest_default__verify(self->env, "vmlinux", pin, actual, err,
					sizeof(err)));
	EXPECT_STREQ(bad, actual);
	EXPECT_STREQ(self->kdigest, pin);
	EXPECT_IN(err, "/env/vmlinux has ");
	EXPECT_IN(err, bad);
	EXPECT_IN(err, self->kdigest);
	EXPECT_IN(err, "/env/pins.json");
	EXPECT_IN(err, "refusing to boot it");
}

TEST_F(guest, bad_pins)
{
	char err[1024];

	write_file(self->env, "pins.json", "{\"vmlinux\": \"sha256:00\"}");
	EXPECT_EQ(-EINVAL, guest_default__verify(self->env, "vmlinux", NULL,
						 NULL, err, sizeof(err)));
	EXPECT_IN(err, "no \"vmlinux\": \"sha256:<64 hex>\" entry");
	EXPECT_EQ(-EINVAL, guest_default__verify(self->env, "initramfs.cpio",
						 NULL, NULL, err, sizeof(err)));
	write_file(self->env, "pins.json", "{not json");
	EXPECT_EQ(-EINVAL, guest_default__verify(self->env, "vmlinux", NULL,
						 NULL, err, sizeof(err)));
	EXPECT_IN(err, "pins.json");
}

TEST_F(guest, kernel_release)
{
	char path[128], rel[64];

	snprintf(path, sizeof(path), "%s/vmlinux", self->env);
	/* The first "Linux version " is not followed by a release. */
	ASSERT_EQ(0, guest_default__kernel_release(path, rel, sizeof(rel)));
	EXPECT_STREQ(FAKE_RELEASE, rel);
	snprintf(path, sizeof(path), "%s/initramfs.cpio", self->env);
	EXPECT_EQ(-ENOENT,
		  guest_default__kernel_release(path, rel, sizeof(rel)));
}

/* The vmm itself: refused before /dev/kvm, exit 125, one line. */
TEST_F(guest, vmm_refuses_tampered)
{
	struct spawn_result r;
	char bad[GUEST_DIGEST_LEN];
	static const char tampered[] = "\177ELF a kernel nobody pinned\n";

	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", self->env, 1));
	write_file(self->env, "vmlinux", tampered);
	digest_of(tampered, bad);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_IN(r.err, "/env/vmlinux has ");
	EXPECT_IN(r.err, bad);
	EXPECT_IN(r.err, self->kdigest);
	EXPECT_TRUE(strstr(r.err, "/dev/kvm") == NULL) TH_LOG("%s", r.err);

	/* A tampered initramfs too, the kernel good again. */
	write_file(self->env, "vmlinux", kernel_text);
	write_file(self->env, "initramfs.cpio", tampered);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_IN(r.err, "/env/initramfs.cpio has ");
	EXPECT_IN(r.err, bad);

	/* No pins at all. */
	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", self->empty, 1));
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_IN(r.err, "no kernel given");
	unsetenv("KILN_GUEST_DIR");
}

/* vmm facts takes the default guest's paths; an explicit --kernel wins. */
TEST_F(guest, vmm_facts_paths)
{
	struct spawn_result r;
	char want[160];

	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", self->env, 1));
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "facts"), NULL, &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	snprintf(want, sizeof(want), "\"%s/vmlinux\"", self->env);
	EXPECT_IN(r.out, want);

	/* --kernel given: no pins are read, the default is not used. */
	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", self->empty, 1));
	snprintf(want, sizeof(want), "%s/vmlinux", self->install);
	ASSERT_EQ(0,
		  spawn__run(ARGS(spawn__vmm_path(), "facts", "--kernel", want),
			     NULL, &r));
	EXPECT_EQ(0, r.status) TH_LOG("%s", r.err);
	EXPECT_IN(r.out, want);
	unsetenv("KILN_GUEST_DIR");
}

TEST_F(guest, vmm_version)
{
	struct spawn_result r;
	char want[200];

	ASSERT_EQ(0, setenv("KILN_GUEST_DIR", self->env, 1));
	ASSERT_EQ(0,
		  spawn__run(ARGS(spawn__vmm_path(), "--version"), NULL, &r));
	EXPECT_EQ(0, r.status);
	EXPECT_IN(r.out, "vmm (Kiln) ");
	snprintf(want, sizeof(want), "default guest: %s (KILN_GUEST_DIR)",
		 self->env);
	EXPECT_IN(r.out, want);
	snprintf(want, sizeof(want),
		 "vmlinux, Linux " FAKE_RELEASE ", %s "
		 "(matches its pin)",
		 self->kdigest);
	EXPECT_IN(r.out, want);
	EXPECT_IN(r.out, "libbpf ");
	EXPECT_IN(r.out, "liburing ");
	EXPECT_IN(r.out, "zlib ");
	EXPECT_IN(r.out, "zstd ");

	write_file(self->env, "vmlinux", "changed\n");
	ASSERT_EQ(0,
		  spawn__run(ARGS(spawn__vmm_path(), "--version"), NULL, &r));
	snprintf(want, sizeof(want), "(does NOT match its pin %s)",
		 self->kdigest);
	EXPECT_IN(r.out, want);
	unsetenv("KILN_GUEST_DIR");
}

TEST_HARNESS_MAIN
