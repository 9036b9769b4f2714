/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_FUZZ_SANDBOX_H
#define KILN_SELFTESTS_FUZZ_SANDBOX_H

/*
 * Where a fuzz target that makes files does it (agent_conn, fuse_bind;
 * Documentation/fuzzing.md): at its first input the process enters a
 * user, mount and network namespace of its own (no interfaces: nothing
 * reaches a network; mounts stay in it); for each input it mounts a
 * small tmpfs on a directory made under /tmp at the start, and the
 * thread that runs the code under test unshares its file system context
 * and chroots into it. So every path that code names is in the tmpfs.
 * The directory goes at exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "selftests/fuzz/fuzz.h"

/* The sandbox's tmpfs: small, and nothing in it runs or is a device. */
#define FUZZ_SANDBOX_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)
#define FUZZ_SANDBOX_OPTS  "size=16m,nr_inodes=1024,mode=0755"

static const char *fuzz_sandbox_dir; /* for the exit handler */

static inline void fuzz_sandbox_remove(void)
{
	umount2(fuzz_sandbox_dir, MNT_DETACH);
	rmdir(fuzz_sandbox_dir);
}

static inline int fuzz_sandbox_write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

/* Our ids, mapped into the new user namespace, which owns the rest. */
static inline int fuzz_sandbox_unshare(bool as_root)
{
	char map[64];
	uid_t uid = getuid();
	gid_t gid = getgid();
	int ret;

	if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET))
		return -errno;
	snprintf(map, sizeof(map), "%u %u 1", as_root ? 0 : uid, uid);
	ret = fuzz_sandbox_write("/proc/self/uid_map", map);
	if (!ret)
		ret = fuzz_sandbox_write("/proc/self/setgroups", "deny");
	snprintf(map, sizeof(map), "%u %u 1", as_root ? 0 : gid, gid);
	if (!ret)
		ret = fuzz_sandbox_write("/proc/self/gid_map", map);
	/* Mounts here stay here. */
	if (!ret && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		ret = -errno;
	return ret;
}

/*
 * Once, while the process has one thread (libFuzzer calls
 * LLVMFuzzerInitialize() before it starts any; the replay has none):
 * makes dir, a mkdtemp() template the caller keeps, and enters the
 * namespaces, as root inside them if as_root (our own ids otherwise).
 * 0, or -errno with nothing left behind.
 */
static inline int fuzz_sandbox__enter(char *dir, bool as_root)
{
	int ret;

	if (!mkdtemp(dir))
		return -errno;
	ret = fuzz_sandbox_unshare(as_root);
	if (ret) {
		rmdir(dir);
		return ret;
	}
	fuzz_sandbox_dir = dir;
	atexit(fuzz_sandbox_remove);
	return 0;
}

/* An input's fresh tmpfs on the sandbox's directory. */
static inline void fuzz_sandbox__mount(const char *dir, const char *name)
{
	fuzz_check(!mount(name, dir, "tmpfs", FUZZ_SANDBOX_FLAGS,
			  FUZZ_SANDBOX_OPTS));
}

static inline void fuzz_sandbox__umount(const char *dir)
{
	fuzz_check(!umount2(dir, MNT_DETACH));
}

/*
 * In the thread that runs the code under test: its own root, dir. Never
 * run outside the sandbox: this stops the target if it cannot be.
 */
static inline void fuzz_sandbox__chroot(const char *dir)
{
	fuzz_check(!unshare(CLONE_FS));
	fuzz_check(!chroot(dir) && !chdir("/"));
}

/* A new file name beneath the directory fd dir, holding p[0, len). */
static inline void fuzz_sandbox__put(int dir, const char *name, const void *p,
				     size_t len)
{
	int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
			0644);

	fuzz_check(fd >= 0);
	fuzz_check(write(fd, p, len) == (ssize_t)len);
	close(fd);
}

#endif
