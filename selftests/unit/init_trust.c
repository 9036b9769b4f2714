// SPDX-License-Identifier: GPL-2.0
/*
 * The guest init's side of HTTPS interception (guest/init/trust.c): the
 * host's CA read from the initramfs, refused when it is not a lone PEM
 * certificate, and bound into the root's bundle without writing the
 * root; its subject hash read, and the CA written as HASH.N into an
 * overlay over the bundle's directory (OpenSSL's -CApath); a root
 * without a bundle refused. Root for the mounts, in a mount namespace of
 * the test's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "guest/init/trust.c"
#include "lib/compiler.h"
#include "selftests/kselftest.h"

#define CA_PEM \
	"-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
#define HASH  "0a1b2c3d"
#define ROOTS "-----BEGIN CERTIFICATE-----\nMIIBroot\n-----END CERTIFICATE-----"

struct dir {
	char path[64], ca[96], hash[96], certs[80], bundle[128], run[96];
};

static void dir_make(struct __test_metadata *_metadata, struct dir *d)
{
	snprintf(d->path, sizeof(d->path), "/tmp/kiln-trust-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(d->path));
	snprintf(d->ca, sizeof(d->ca), "%s/ca.pem", d->path);
	snprintf(d->hash, sizeof(d->hash), "%s/ca.hash", d->path);
	/* The overlay's upper layer (beside run) may not be in certs. */
	snprintf(d->certs, sizeof(d->certs), "%s/certs", d->path);
	snprintf(d->bundle, sizeof(d->bundle), "%s/bundle.crt", d->certs);
	snprintf(d->run, sizeof(d->run), "%s/kiln/bundle.crt", d->path);
	ASSERT_EQ(0, mkdir(d->certs, 0755));
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

static void enter_namespace(struct __test_metadata *_metadata)
{
	ASSERT_EQ(0, unshare(CLONE_NEWNS)) TH_LOG("%s", strerror(errno));
	ASSERT_EQ(0, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
}

TEST(load_takes_one_certificate_only)
{
	static char big[INIT_TRUST_CA_MAX + 2];
	struct init_trust t;
	struct dir d;

	dir_make(_metadata, &d);
	/* None: no interception, nothing to do. */
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_EQ(NULL, t.pem);
	EXPECT_EQ(0, init_trust__install(&t, d.bundle, d.run));

	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	ASSERT_NE(NULL, t.pem);
	EXPECT_EQ(strlen(CA_PEM), t.len);
	init_trust__free(&t);

	/* A key is never taken, even next to a certificate. */
	put(_metadata, d.ca,
	    CA_PEM
	    "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
	    strlen(CA_PEM) + 56);
	EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca, d.hash));
	EXPECT_EQ(NULL, t.pem);
	put(_metadata, d.ca, "garbage\n", 8);
	EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca, d.hash));
	put(_metadata, d.ca, "", 0);
	EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca, d.hash));
	memset(big, 'A', sizeof(big));
	put(_metadata, d.ca, big, sizeof(big));
	EXPECT_EQ(-EFBIG, init_trust__load(&t, d.ca, d.hash));
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
	enter_namespace(_metadata);
	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	put(_metadata, d.bundle, ROOTS, strlen(ROOTS));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	ASSERT_EQ(0, init_trust__install(&t, d.bundle, d.run));
	get(d.bundle, now, sizeof(now));
	EXPECT_STREQ(ROOTS "\n" CA_PEM, now);
	ASSERT_EQ(0, umount(d.bundle));
	get(d.bundle, now, sizeof(now));
	EXPECT_STREQ(ROOTS, now);
	init_trust__free(&t);
	dir_remove(&d);
}

/* The hash: KILN_CA_HASH_LEN lowercase hex digits, only with a CA. */
TEST(load_takes_the_hash)
{
	static const char *const bad[] = { "0A1B2C3D",	 "0a1b2c3",
					   "0a1b2c3d\n", "0a1b2c3d0",
					   "0a1b2c3g",	 "" };
	struct init_trust t;
	struct dir d;
	size_t i;

	dir_make(_metadata, &d);
	/* A hash without a CA is nothing to install. */
	put(_metadata, d.hash, HASH, strlen(HASH));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_EQ(NULL, t.pem);
	EXPECT_STREQ("", t.hash);

	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_STREQ(HASH, t.hash);
	init_trust__free(&t);
	ASSERT_EQ(0, unlink(d.hash));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_STREQ("", t.hash);
	init_trust__free(&t);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		put(_metadata, d.hash, bad[i], strlen(bad[i]));
		EXPECT_EQ(-EINVAL, init_trust__load(&t, d.ca, d.hash))
		TH_LOG("hash \"%s\"", bad[i]);
		EXPECT_EQ(NULL, t.pem);
	}
	dir_remove(&d);
}

/*
 * The CA as certs/HASH.N over an overlay: the first free N (a CA of the
 * root's with the same hash keeps HASH.0), the bundle bound on top, the
 * directory itself untouched once the mounts are gone.
 */
TEST(install_writes_the_hashed_entry_in_an_overlay)
{
	char now[1024], path[160];
	struct init_trust t;
	struct dir d;

	if (geteuid())
		SKIP(return, "needs root (mount namespace)");
	dir_make(_metadata, &d);
	enter_namespace(_metadata);
	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	put(_metadata, d.hash, HASH, strlen(HASH));
	put(_metadata, d.bundle, ROOTS, strlen(ROOTS));
	snprintf(path, sizeof(path), "%s/" HASH ".0", d.certs);
	put(_metadata, path, ROOTS, strlen(ROOTS));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	ASSERT_EQ(0, init_trust__install(&t, d.bundle, d.run));
	get(path, now, sizeof(now));
	EXPECT_STREQ(ROOTS, now);
	snprintf(path, sizeof(path), "%s/" HASH ".1", d.certs);
	get(path, now, sizeof(now));
	EXPECT_STREQ(CA_PEM, now);
	get(d.bundle, now, sizeof(now));
	EXPECT_STREQ(ROOTS "\n" CA_PEM, now);
	ASSERT_EQ(0, umount(d.bundle));
	ASSERT_EQ(0, umount(d.certs)) TH_LOG("%s", strerror(errno));
	EXPECT_NE(0, access(path, F_OK));
	get(d.bundle, now, sizeof(now));
	EXPECT_STREQ(ROOTS, now);
	init_trust__free(&t);
	dir_remove(&d);
}

/* HASH.0 to HASH.9 all taken: no room, the VM would end. */
TEST(install_with_every_suffix_taken_fails)
{
	char path[160];
	struct init_trust t;
	struct dir d;
	unsigned int n;

	if (geteuid())
		SKIP(return, "needs root (mount namespace)");
	dir_make(_metadata, &d);
	enter_namespace(_metadata);
	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	put(_metadata, d.hash, HASH, strlen(HASH));
	put(_metadata, d.bundle, ROOTS, strlen(ROOTS));
	for (n = 0; n < INIT_TRUST_HASH_SUFFIXES; n++) {
		snprintf(path, sizeof(path), "%s/" HASH ".%u", d.certs, n);
		put(_metadata, path, ROOTS, strlen(ROOTS));
	}
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_EQ(-ENOSPC, init_trust__install(&t, d.bundle, d.run));
	EXPECT_EQ(0, umount(d.certs));
	init_trust__free(&t);
	dir_remove(&d);
}

TEST(no_trust_store_fails_closed)
{
	struct init_trust t;
	struct dir d;

	dir_make(_metadata, &d);
	put(_metadata, d.ca, CA_PEM, strlen(CA_PEM));
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_EQ(-ENOENT, init_trust__install(&t, d.bundle, d.run));
	/* With a hash, no hashed entry either: the bundle comes first. */
	put(_metadata, d.hash, HASH, strlen(HASH));
	init_trust__free(&t);
	ASSERT_EQ(0, init_trust__load(&t, d.ca, d.hash));
	EXPECT_EQ(-ENOENT, init_trust__install(&t, d.bundle, d.run));
	EXPECT_NE(0, access(d.run, F_OK));
	/* A directory where the bundle should be is no bundle either. */
	ASSERT_EQ(0, mkdir(d.bundle, 0755));
	EXPECT_EQ(-ENOENT, init_trust__install(&t, d.bundle, d.run));
	init_trust__free(&t);
	dir_remove(&d);
}

TEST_HARNESS_MAIN
