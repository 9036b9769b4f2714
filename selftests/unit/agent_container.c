// SPDX-License-Identifier: GPL-2.0
/*
 * The agent's terminal for a process in a container
 * (container__open_ptmx(), guest/agent/container.c), on this host: a
 * root made here with a devpts instance of its own at dev/pts, in a
 * private mount namespace. The master comes from that instance through
 * the root's own /dev/ptmx, however its link is written (absolute, or
 * climbing above the root), its peer is the root's /dev/pts/0, and a
 * root without a ptmx is ENOENT rather than the host's terminal. Needs
 * root (a mount namespace, a devpts mount): skipped, saying so, without.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest/agent/container.h"
#include "selftests/kselftest.h"

#define PTS_OPTS "newinstance,ptmxmode=0666,mode=0620"

FIXTURE(ptmx)
{
	char root[64];
	char pts[96];
	char link[96];
	struct container_exec x;
	const char *why;
};

FIXTURE_SETUP(ptmx)
{
	char dev[80];

	container__exec_init(&self->x);
	self->why = NULL;
	snprintf(self->root, sizeof(self->root), "/tmp/kiln-ctr-XXXXXX");
	if (geteuid()) {
		self->why = "needs root (a mount namespace and devpts)";
		return;
	}
	/* Each test is a process of its own: the namespace goes with it. */
	if (unshare(CLONE_NEWNS) ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		self->why = "no private mount namespace here";
		return;
	}
	ASSERT_TRUE(mkdtemp(self->root) != NULL);
	snprintf(dev, sizeof(dev), "%s/dev", self->root);
	snprintf(self->pts, sizeof(self->pts), "%s/dev/pts", self->root);
	snprintf(self->link, sizeof(self->link), "%s/dev/ptmx", self->root);
	ASSERT_EQ(0, mkdir(dev, 0755));
	ASSERT_EQ(0, mkdir(self->pts, 0755));
	ASSERT_EQ(0, mount("devpts", self->pts, "devpts", 0, PTS_OPTS))
	TH_LOG("mount devpts: %s", strerror(errno));
	self->x.id = strdup("c1");
	self->x.root_fd = open(self->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ASSERT_LE(0, self->x.root_fd);
}

FIXTURE_TEARDOWN(ptmx)
{
	char dev[80];

	container__exec_free(&self->x);
	if (self->why || self->root[strlen(self->root) - 1] == 'X')
		return;
	umount2(self->pts, MNT_DETACH);
	unlink(self->link);
	rmdir(self->pts);
	snprintf(dev, sizeof(dev), "%s/dev", self->root);
	rmdir(dev);
	rmdir(self->root);
}

/*
 * The master from @link's ptmx: in the root's devpts (not the host's),
 * and its peer the root's dev/pts/0.
 */
static void master_in_root(struct __test_metadata *_metadata,
			   FIXTURE_DATA(ptmx) * self, const char *target)
{
	struct stat inst, m, host, peer, zero;
	char path[128];
	int fd, pty, hostfd;

	ASSERT_EQ(0, symlink(target, self->link));
	snprintf(path, sizeof(path), "%s/ptmx", self->pts);
	ASSERT_EQ(0, stat(path, &inst));
	fd = container__open_ptmx(&self->x);
	ASSERT_LE(0, fd) TH_LOG("link %s: %s", target, strerror(-fd));
	ASSERT_EQ(0, fstat(fd, &m));
	EXPECT_EQ(inst.st_dev, m.st_dev) TH_LOG("link %s", target);
	/* The host's own ptmx is another instance: this one is not it. */
	hostfd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (hostfd >= 0) {
		ASSERT_EQ(0, fstat(hostfd, &host));
		EXPECT_NE(host.st_dev, m.st_dev);
		close(hostfd);
	}
	ASSERT_EQ(0, unlockpt(fd));
	pty = ioctl(fd, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	ASSERT_LE(0, pty) TH_LOG("TIOCGPTPEER: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/0", self->pts);
	ASSERT_EQ(0, stat(path, &zero)) TH_LOG("no %s", path);
	ASSERT_EQ(0, fstat(pty, &peer));
	EXPECT_EQ(zero.st_dev, peer.st_dev);
	EXPECT_EQ(zero.st_ino, peer.st_ino);
	EXPECT_EQ(zero.st_rdev, peer.st_rdev);
	close(pty);
	close(fd);
}

/* /dev/ptmx -> pts/ptmx, as the agent makes it. */
TEST_F(ptmx, relative_link)
{
	if (self->why)
		SKIP(return, "%s", self->why);
	master_in_root(_metadata, self, "pts/ptmx");
}

/* An absolute link is the root's path, not the host's. */
TEST_F(ptmx, absolute_link_resolves_in_the_root)
{
	if (self->why)
		SKIP(return, "%s", self->why);
	master_in_root(_metadata, self, "/dev/pts/ptmx");
}

/* ".." above the root stays at the root. */
TEST_F(ptmx, link_climbing_out_stays_inside)
{
	if (self->why)
		SKIP(return, "%s", self->why);
	master_in_root(_metadata, self, "../../../../../dev/pts/ptmx");
}

/* No ptmx in the root: ENOENT, never a terminal from elsewhere. */
TEST_F(ptmx, no_ptmx_is_enoent)
{
	if (self->why)
		SKIP(return, "%s", self->why);
	EXPECT_EQ(-ENOENT, container__open_ptmx(&self->x));
	/* A link to a path only the host has: not followed out of the
	 * root (the host's /dev/null would open). */
	ASSERT_EQ(0, symlink("/dev/null", self->link));
	EXPECT_EQ(-ENOENT, container__open_ptmx(&self->x));
}

/* Outside a container: the host's (the guest's) own ptmx. */
TEST(no_container_is_the_own_devpts)
{
	struct container_exec x;
	struct stat a, b;
	int fd, ref;

	container__exec_init(&x);
	ref = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (ref < 0)
		SKIP(return, "no ptmx here: %s", strerror(errno));
	fd = container__open_ptmx(&x);
	ASSERT_LE(0, fd) TH_LOG("%s", strerror(-fd));
	ASSERT_EQ(0, fstat(fd, &a));
	ASSERT_EQ(0, fstat(ref, &b));
	EXPECT_EQ(b.st_dev, a.st_dev);
	EXPECT_NE(0, fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	close(ref);
	container__exec_free(&x);
}

TEST_HARNESS_MAIN
