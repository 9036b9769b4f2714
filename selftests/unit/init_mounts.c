// SPDX-License-Identifier: GPL-2.0
/*
 * Mount points on a read-only root (guest/init/mounts.c, built into this
 * test as it is into the init): in a child process with a mount
 * namespace of its own, chrooted into a tmpfs laid out as the initramfs
 * is (/kiln/mounts, /newroot), a read-only "image" at /newroot gets the
 * directories its mounts lack from an overlay that stays read-only,
 * shows the image's files and directories with their attributes, and
 * leaves the image itself without them. Root only (mounts): a skip
 * otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/init/mounts.c"
#include "selftests/kselftest.h"

/* init_mounts__mount()'s, not called here (guest/agent/mounts.c). */
int mounts__attach_one(const char *tag, const char *path, bool read_only)
{
	return -ENOSYS;
}

#define NEWROOT "/newroot"
#define IMAGE	"/image" /* the read-only image's own files */

/* Each check in the child: the line that failed is its exit status. */
#define CHECK(cond)                                \
	do {                                       \
		if (!(cond))                       \
			_exit(__LINE__ % 250 + 1); \
	} while (0)

static void put(const char *path, const char *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	CHECK(fd >= 0);
	CHECK(write(fd, text, len) == (ssize_t)len);
	close(fd);
}

static bool is_dir(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && S_ISDIR(st.st_mode);
}

/*
 * The child's world: a tmpfs as /, the image (a few directories, a file
 * and a symlink) bound read-only at NEWROOT, and the manifest of
 * @manifest_len bytes.
 */
static void setup(const char *scratch, const char *manifest,
		  size_t manifest_len)
{
	CHECK(!unshare(CLONE_NEWNS));
	CHECK(!mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
	CHECK(!mount("kiln-test", scratch, "tmpfs", 0, "mode=0755"));
	CHECK(!chroot(scratch) && !chdir("/"));
	CHECK(!mkdir("/kiln", 0755) && !mkdir(IMAGE, 0755) &&
	      !mkdir(NEWROOT, 0755));
	put(KILN_MOUNTS_FILE, manifest, manifest_len);
	CHECK(!mkdir(IMAGE "/home", 0711) && !mkdir(IMAGE "/etc", 0755));
	CHECK(!chown(IMAGE "/home", 0, 1234));
	put(IMAGE "/etc/os-release", "ID=test\n", 8);
	put(IMAGE "/file", "x", 1);
	CHECK(!symlink("etc", IMAGE "/link"));
	CHECK(!mount(IMAGE, NEWROOT, NULL, MS_BIND, NULL));
	CHECK(!mount(NULL, NEWROOT, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY,
		     NULL));
}

/* Runs @child in a process of its own: its exit status (0: passed). */
static int in_child(struct __test_metadata *_metadata,
		    void (*child)(const char *scratch))
{
	char scratch[] = "/tmp/kiln-points-XXXXXX";
	int st;
	pid_t pid;

	ASSERT_NE(NULL, mkdtemp(scratch));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		child(scratch);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	rmdir(scratch); /* the tmpfs went with the child's namespace */
	return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

#define MANIFEST                                                        \
	"t0\0/workspace\0rw\0t1\0/workspace/cache\0ro\0t2\0/home/u/w\0" \
	"rw\0t3\0/etc\0ro\0t4\0/link/x\0rw\0t5\0/file/x\0rw\0"

static void makes_points(const char *scratch)
{
	const char *const *made;
	struct init_mounts *m;
	struct stat st;

	setup(scratch, MANIFEST, sizeof(MANIFEST) - 1);
	m = init_mounts__load();
	CHECK(m && m->nr == 6);
	/* The image refuses a mkdir: the case at hand. */
	CHECK(mkdir(NEWROOT "/workspace", 0755) && errno == EROFS);
	CHECK(!init_mounts__make_points(m, NEWROOT));
	/*
	 * Made: /workspace and /home/u/w. Not /workspace/cache (inside
	 * another mount), /etc (there), nor what passes a symlink or a file.
	 */
	made = init_mounts__made(m);
	CHECK(made && !strcmp(made[0], "/workspace") &&
	      !strcmp(made[1], "/home/u/w") && !made[2]);
	CHECK(is_dir(NEWROOT "/workspace") && is_dir(NEWROOT "/home/u/w"));
	CHECK(!is_dir(NEWROOT "/workspace/cache"));
	/* The image shows through, its attributes too. */
	CHECK(!access(NEWROOT "/etc/os-release", R_OK));
	CHECK(!lstat(NEWROOT "/link", &st) && S_ISLNK(st.st_mode));
	CHECK(!lstat(NEWROOT "/home", &st) && (st.st_mode & 07777) == 0711 &&
	      st.st_gid == 1234);
	CHECK(!lstat(NEWROOT "/home/u", &st) && (st.st_mode & 07777) == 0755);
	/* Still read-only, everywhere. */
	CHECK(mkdir(NEWROOT "/other", 0755) && errno == EROFS);
	CHECK(mkdir(NEWROOT "/workspace/x", 0755) && errno == EROFS);
	CHECK(open(NEWROOT "/file", O_WRONLY) < 0 && errno == EROFS);
	/* A mount takes the point. */
	CHECK(!mount("kiln-ws", NEWROOT "/workspace", "tmpfs", 0, NULL));
	put(NEWROOT "/workspace/note", "hi", 2);
	/* The image has none of it; the layers are gone from the initramfs. */
	CHECK(!is_dir(IMAGE "/workspace") && !is_dir(IMAGE "/home/u"));
	CHECK(access(LOWER_DIR "/etc", F_OK) &&
	      access(STUBS_DIR "/workspace", F_OK));
	free(m->buf);
	free(m);
}

static void nothing_missing_changes_nothing(const char *scratch)
{
	static const char manifest[] = "t0\0/etc\0ro\0t1\0/link/x\0rw\0";
	struct init_mounts *m;
	struct stat before, after;

	setup(scratch, manifest, sizeof(manifest) - 1);
	m = init_mounts__load();
	CHECK(m && m->nr == 2);
	CHECK(!stat(NEWROOT, &before));
	CHECK(!init_mounts__make_points(m, NEWROOT));
	CHECK(!init_mounts__made(m));
	/* No overlay: the same file system at NEWROOT. */
	CHECK(!stat(NEWROOT, &after) && before.st_dev == after.st_dev);
	CHECK(access(LAYERS_DIR, F_OK));
	free(m->buf);
	free(m);
}

TEST(read_only_root_gets_its_mount_points)
{
	int st;

	if (geteuid())
		SKIP(return, "needs root (mount namespace, overlay)");
	st = in_child(_metadata, makes_points);
	EXPECT_EQ(0, st)
	TH_LOG("the child's check at line %d (modulo 250) failed", st - 1);
}

TEST(nothing_missing_no_overlay)
{
	if (geteuid())
		SKIP(return, "needs root (mount namespace)");
	EXPECT_EQ(0, in_child(_metadata, nothing_missing_changes_nothing));
}

TEST(dot_components_are_not_made)
{
	EXPECT_TRUE(has_dot_component("/a/../b"));
	EXPECT_TRUE(has_dot_component("/a/."));
	EXPECT_TRUE(has_dot_component("/.."));
	EXPECT_FALSE(has_dot_component("/.hidden/..x/a.b"));
	EXPECT_TRUE(path_under("/w/c", "/w"));
	EXPECT_FALSE(path_under("/wx", "/w"));
	EXPECT_TRUE(path_under("/anything", "/"));
}

TEST_HARNESS_MAIN
