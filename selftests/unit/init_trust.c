// SPDX-License-Identifier: GPL-2.0
/*
 * The guest init's side of HTTPS interception (guest/init/trust.c): the
 * host's CA read from the initramfs, refused when it is not a lone PEM
 * certificate, and bound into the root's bundle without writing the
 * root; a root without a bundle refused. Root for the bind mounts, in a
 * mount namespace of the test's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "guest/init/trust.c"
#include "selftests/kselftest.h"

#define CA_PEM \
	"-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
#define ROOTS "-----BEGIN CERTIFICATE-----\nMIIBroot\n-----END CERTIFICATE-----"

struct dir {
	char path[64], ca[96], bundle[96], run[96];
};

static void dir_make(struct __test_metadata *_metadata, struct dir *d)
{
	snprintf(d->path, sizeof(d->path), "/tmp/kiln-trust-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(d->path));
	snprintf(d->ca, sizeof(d->ca), "%s/ca.pem", d->path);
	snprintf(d->bundle, sizeof(d->bundle), "%s/bundle.crt", d->path);
	snprintf(d->run, sizeof(d->run), "%s/kiln/bundle.crt", d->path);
}

static void dir_remove(struct dir *d)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
	if (system(cmd))
		fprintf(stderr, "# cannot remove %s\n", d->path);
}

static void put(struct __test_metadata *_metadata, const char *path,
		const char *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)len, write(fd, text, len));
	close(fd);
}

static void get(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);

	buf[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

TEST(load_takes_one_certificate_only)
{
	static char big[INIT_TRUST_CA_MAX + 2];
	struct init_trust t;
	struct dir d;

	dir_make(_metadata, &d);
	/* None: no interception, nothing to do. */
	ASSERT_EQ(0, init_trust__load(&t, d.ca));
	EXPECT_EQ(NULL, t.pem);
	EXPECT_EQ(0, init_trust__install(&t, d.bundle, d.run));

	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	ASSERT_EQ(0, init_trust__load(&t, d.ca));
	ASSERT_NE(NULL, t.pem);
	EXPECT_EQ(strlen(CA_PEM), t.len);
	init_trust__free(&t);

	/* A key is never taken, even next to a certificate. */
	put(_metadata, d.ca,
	    CA_PEM
	    "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
	    strlen(CA_PEM) + 56);
	EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca));
	EXPECT_EQ(NULL, t.pem);
	put(_metadata, d.ca, "garbage\n", 8);
	EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca));
	put(_metadata, d.ca, "", 0);
	EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca));
	memset(big, 'A', sizeof(big));
	put(_metadata, d.ca, big, sizeof(big));
	EXPECT_EQ(-EFBIG, init_trust__load(&t, d.ca));
	dir_remove(&d);
}

/* The root's bundle (no final newline) + the CA, bound over, undone clean. */
TEST(install_binds_the_bundle_with_the_ca)
{
	char now[1024];
	struct init_trust t;
	struct dir d;

	if (geteuid())
		SKIP(return, "needs root (mount namespace)");
	dir_make(_metadata, &d);
	ASSERT_EQ(0, unshare(CLONE_NEWNS)) TH_LOG("%s", strerror(errno));
	ASSERT_EQ(0, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	put(_metadata, d.bundle, ROOTS, strlen(ROOTS));
	ASSERT_EQ(0, init_trust__load(&t, d.ca));
	ASSERT_EQ(0, init_trust__install(&t, d.bundle, d.run));
	get(d.bundle, now, sizeof(now));
	EXPECT_STREQ(ROOTS "\n" CA_PEM, now);
	ASSERT_EQ(0, umount(d.bundle));
	get(d.bundle, now, sizeof(now));
	EXPECT_STREQ(ROOTS, now);
	init_trust__free(&t);
	dir_remove(&d);
}

TEST(no_trust_store_fails_closed)
{
	struct init_trust t;
	struct dir d;

	dir_make(_metadata, &d);
	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	ASSERT_EQ(0, init_trust__load(&t, d.ca));
	EXPECT_EQ(-ENOENT, init_trust__install(&t, d.bundle, d.run));
	/* A directory where the bundle should be is no bundle either. */
	ASSERT_EQ(0, mkdir(d.bundle, 0755));
	EXPECT_EQ(-ENOENT, init_trust__install(&t, d.bundle, d.run));
	init_trust__free(&t);
	dir_remove(&d);
}

TEST_HARNESS_MAIN
