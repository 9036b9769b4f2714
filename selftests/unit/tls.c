// SPDX-License-Identifier: GPL-2.0
/*
 * TLS interception's building blocks (net/tls-ca.c, net/tls-conn.c).
 *
 * The CA: generated (a self-signed P-256 CA certificate, in PEM), or
 * loaded from files an "orchestrator" (this test, with wolfCrypt) wrote,
 * a key others may read refused. Leaves: checked with wolfSSL's own
 * verifier and host matching, cached, refused for addresses and
 * malformed names. Connections: both ends in this process on a
 * socketpair, nonblocking, driven by one poll loop; where a peer must
 * misbehave (no SNI, TLS 1.2 only, a certificate for another name), it
 * is plain wolfSSL. No network.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>
#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/openssl/x509v3.h>
#include <wolfssl/wolfcrypt/asn.h>
#include <wolfssl/wolfcrypt/asn_public.h>
#include <wolfssl/wolfcrypt/ecc.h>
#include <wolfssl/wolfcrypt/random.h>

#include "lib/compiler.h"
#include "net/policy.h"
#include "net/tls-internal.h"
#include "net/tls.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define HOST	      "api.example.test"
#define OTHER_HOST    "other.example.test"
#define ERR_LEN	      256
#define PATH_LEN      256
#define POLL_MS	      5000 /* a step that does not come within this: failed */
#define MAX_ROUNDS    1000 /* poll rounds for one handshake */
#define BIG_LEN	      (100U << 10) /* bytes each way: several records */
#define CHUNK	      1000U	   /* the reader's buffer: smaller than one */
#define SMALL_SOCKBUF 4096	   /* bytes: less than a full record */
#define FUZZ_ROUNDS   300
#define FUZZ_MAX      2048
#define FUZZ_SEED     0x6b696c6e746c73ULL
#define CACHE_EXTRA   10 /* names past the cache's size */
#define SECS_PER_DAY  86400L
#define SLACK_S	      120 /* between the module's clock and ours */
#define TEST_CA_DAYS  30
#define DER_MAX	      4096
#define PEM_MAX	      8192
#define P256_BYTES    32

/* ---- helpers ----------------------------------------------------------- */

static struct tls_ca *new_ca(void)
{
	struct tls_ca_params p = { 0 };
	struct tls_ca *ca = NULL;
	char err[ERR_LEN];

	if (tls_ca__create(&ca, &p, err, sizeof(err)))
		fprintf(stderr, "# tls_ca__create: %s\n", err);
	return ca;
}

static int write_file(const char *path, const void *buf, size_t len,
		      mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	if (fd < 0)
		return -errno;
	if (fchmod(fd, mode) || write(fd, buf, len) != (ssize_t)len) {
		close(fd);
		return -EIO;
	}
	return close(fd) ? -errno : 0;
}

static int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = '\0';
	return (int)n;
}

/* A fresh directory under /tmp into dir. */
static int temp_dir(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/kiln-tls-XXXXXX");
	return mkdtemp(dir) ? 0 : -errno;
}

static WOLFSSL_X509 *x509_der(const uint8_t *der, size_t len)
{
	return wolfSSL_X509_load_certificate_buffer(der, (int)len,
						    WOLFSSL_FILETYPE_ASN1);
}

/* Whether der verifies against ca's certificate with wolfSSL's checks. */
static bool verifies(struct tls_ca *ca, const uint8_t *der, size_t len)
{
	WOLFSSL_CERT_MANAGER *cm = wolfSSL_CertManagerNew();
	const uint8_t *ca_der;
	size_t ca_len;
	bool ok;

	tls_ca__cert_der(ca, &ca_der, &ca_len);
	ok = cm &&
	     wolfSSL_CertManagerLoadCABuffer(cm, ca_der, (long)ca_len,
					     WOLFSSL_FILETYPE_ASN1) ==
		     WOLFSSL_SUCCESS &&
	     wolfSSL_CertManagerVerifyBuffer(cm, der, (long)len,
					     WOLFSSL_FILETYPE_ASN1) ==
		     WOLFSSL_SUCCESS;
	wolfSSL_CertManagerFree(cm);
	return ok;
}

/* Seconds from now to t (negative: past); t from wolfSSL_X509_get_*. */
static long secs_from_now(const WOLFSSL_ASN1_TIME *t)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (wolfSSL_ASN1_TIME_to_tm(t, &tm) != WOLFSSL_SUCCESS)
		return 0;
	return (long)(timegm(&tm) - time(NULL));
}

/* ---- an orchestrator's CA, made with wolfCrypt ------------------------- */

/*
 * dir/key.pem (mode key_mode; PKCS #8 or SEC 1) and dir/cert.pem: a
 * self-signed P-256 CA, or, without ca, a certificate that is not one.
 */
static int make_orchestrator_ca(const char *dir, mode_t key_mode, bool pkcs8,
				bool ca, char *key_path, char *cert_path)
{
	static byte der[DER_MAX], pem[PEM_MAX];
	word32 der_len = sizeof(der);
	WC_RNG rng;
	ecc_key key;
	Cert cert;
	int ret, n;

	if (snprintf(key_path, PATH_LEN, "%s/key.pem", dir) >= PATH_LEN ||
	    snprintf(cert_path, PATH_LEN, "%s/cert.pem", dir) >= PATH_LEN)
		return -ENAMETOOLONG;
	if (wc_InitRng(&rng))
		return -EIO;
	wc_ecc_init(&key);
	ret = wc_ecc_make_key_ex(&rng, P256_BYTES, &key, ECC_SECP256R1);
	if (ret)
		goto out;
	if (pkcs8)
		ret = wc_EccPrivateKeyToPKCS8(&key, der, &der_len);
	else
		ret = wc_EccKeyToDer(&key, der, sizeof(der));
	if (ret < 0)
		goto out;
	n = wc_DerToPem(der, (word32)ret, pem, sizeof(pem),
			pkcs8 ? PKCS8_PRIVATEKEY_TYPE : ECC_PRIVATEKEY_TYPE);
	if (n < 0 || write_file(key_path, pem, (size_t)n, key_mode)) {
		ret = -EIO;
		goto out;
	}
	wc_InitCert(&cert);
	snprintf(cert.subject.commonName, CTC_NAME_SIZE, "Orchestrator CA");
	snprintf(cert.subject.org, CTC_NAME_SIZE, "Kiln tests");
	cert.isCA = ca;
	cert.sigType = CTC_SHA256wECDSA;
	cert.daysValid = TEST_CA_DAYS;
	ret = wc_MakeCert_ex(&cert, der, sizeof(der), ECC_TYPE, &key, &rng);
	if (ret >= 0)
		ret = wc_SignCert_ex(cert.bodySz, cert.sigType, der,
				     sizeof(der), ECC_TYPE, &key, &rng);
	if (ret < 0)
		goto out;
	n = wc_DerToPem(der, (word32)ret, pem, sizeof(pem), CERT_TYPE);
	ret = n < 0 ? -EIO : write_file(cert_path, pem, (size_t)n, 0644);
out:
	wc_ecc_free(&key);
	wc_FreeRng(&rng);
	return ret < 0 ? ret : 0;
}

/* ---- the CA ------------------------------------------------------------ */

TEST(generated_ca_is_a_self_signed_ca)
{
	WOLFSSL_CERT_MANAGER *cm;
	struct tls_ca *ca;
	WOLFSSL_X509 *x;
	WOLFSSL_X509_NAME *subject;
	char cn[CTC_NAME_SIZE];
	const char *pem;
	size_t len;
	long nb, na;

	ca = new_ca();
	ASSERT_NE(NULL, ca);
	tls_ca__cert_pem(ca, &pem, &len);
	ASSERT_EQ(strlen(pem), len);
	ASSERT_EQ(0, strncmp(pem, "-----BEGIN CERTIFICATE-----", 27));
	x = wolfSSL_X509_load_certificate_buffer(
		(const unsigned char *)pem, (int)len, WOLFSSL_FILETYPE_PEM);
	ASSERT_NE(NULL, x);
	EXPECT_EQ(1, wolfSSL_X509_get_isCA(x));
	EXPECT_EQ(1, wolfSSL_X509_get_isSet_pathLength(x));
	EXPECT_EQ(0, wolfSSL_X509_get_pathLength(x));
	/* Self-signed: issuer is subject, and its own key verifies it. */
	subject = wolfSSL_X509_get_subject_name(x);
	EXPECT_EQ(0, wolfSSL_X509_NAME_cmp(subject,
					   wolfSSL_X509_get_issuer_name(x)));
	cm = wolfSSL_CertManagerNew();
	ASSERT_NE(NULL, cm);
	EXPECT_EQ(WOLFSSL_SUCCESS, wolfSSL_CertManagerLoadCABuffer(
					   cm, (const unsigned char *)pem,
					   (long)len, WOLFSSL_FILETYPE_PEM));
	EXPECT_EQ(WOLFSSL_SUCCESS, wolfSSL_CertManagerVerifyBuffer(
					   cm, (const unsigned char *)pem,
					   (long)len, WOLFSSL_FILETYPE_PEM));
	wolfSSL_CertManagerFree(cm);
	ASSERT_LT(0, wolfSSL_X509_NAME_get_text_by_NID(subject, NID_commonName,
						       cn, sizeof(cn)));
	EXPECT_EQ(0, strncmp(cn, "Kiln VM CA ", 11));
	EXPECT_EQ(strlen("Kiln VM CA ") + 16, strlen(cn));
	EXPECT_TRUE(wolfSSL_X509_get_key_usage(x) & KEYUSE_KEY_CERT_SIGN);
	EXPECT_TRUE(wolfSSL_X509_get_key_usage(x) & KEYUSE_CRL_SIGN);
	EXPECT_FALSE(wolfSSL_X509_get_key_usage(x) & KEYUSE_DIGITAL_SIG);
	/* now - 1 h .. now + TLS_CA_DAYS */
	nb = secs_from_now(wolfSSL_X509_get_notBefore(x));
	na = secs_from_now(wolfSSL_X509_get_notAfter(x));
	EXPECT_LE(-(long)TLS_BACKDATE_S - SLACK_S, nb);
	EXPECT_GE(-(long)TLS_BACKDATE_S + SLACK_S, nb);
	EXPECT_LE((long)TLS_CA_DAYS * SECS_PER_DAY - SLACK_S, na);
	EXPECT_GE((long)TLS_CA_DAYS * SECS_PER_DAY + SLACK_S, na);
	wolfSSL_X509_free(x);
	tls_ca__destroy(ca);
}

TEST(two_generated_cas_differ)
{
	struct tls_ca *a = new_ca(), *b = new_ca();
	const char *pa, *pb;
	size_t la, lb;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	tls_ca__cert_pem(a, &pa, &la);
	tls_ca__cert_pem(b, &pb, &lb);
	EXPECT_STRNE(pa, pb);
	tls_ca__destroy(a);
	tls_ca__destroy(b);
}

/*
 * Heap a CA holds, wolfSSL's own start-up included: the CA, its leaf
 * key, the PEM, the RNG (a few KiB), far less than the ~810 KiB of
 * precomputed points generating the keys left in the thread's fixed-point
 * cache (FP_ECC) before tls_ca__create freed it.
 */
#define CA_HEAP_MAX (128U << 10)

TEST(generated_ca_leaves_no_ecc_cache_behind)
{
	size_t before = mallinfo2().uordblks, after;
	struct tls_ca *ca = new_ca();

	ASSERT_NE(NULL, ca);
	after = mallinfo2().uordblks;
	TH_LOG("heap in use %zu -> %zu bytes", before, after);
	/* The sanitizers' allocator is not malloc's: nothing to compare. */
	if (!KILN_ASAN) {
		EXPECT_GT(before + CA_HEAP_MAX, after);
	}
	tls_ca__destroy(ca);
}

TEST(cert_out_is_the_pem_0644_and_no_key_is_written)
{
	struct tls_ca_params p = { 0 };
	char dir[PATH_LEN], path[PATH_LEN], err[ERR_LEN], buf[PEM_MAX];
	struct tls_ca *ca;
	const char *pem;
	struct stat st;
	size_t len;
	mode_t old;

	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_GT(sizeof(path),
		  (size_t)snprintf(path, sizeof(path), "%s/kiln-ca.pem", dir));
	p.cert_out = path;
	old = umask(077); /* the mode is the module's, not the umask's */
	ASSERT_EQ(0, tls_ca__create(&ca, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	umask(old);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(TLS_CA_CERT_MODE, st.st_mode & 07777);
	tls_ca__cert_pem(ca, &pem, &len);
	ASSERT_EQ((int)len, read_file(path, buf, sizeof(buf)));
	EXPECT_STREQ(pem, buf);
	EXPECT_EQ(NULL, strstr(buf, "PRIVATE KEY"));
	/* Nothing else appeared: no key file, no temporary left. */
	ASSERT_GT(sizeof(buf), (size_t)snprintf(buf, sizeof(buf),
						"%s/kiln-ca.pem.tmp", dir));
	EXPECT_NE(0, access(buf, F_OK));
	tls_ca__destroy(ca);
	unlink(path);
	EXPECT_EQ(0, rmdir(dir)); /* fails if anything else is in it */
}

TEST(loaded_ca_key_readable_by_others_refused)
{
	char dir[PATH_LEN], key[PATH_LEN], cert[PATH_LEN], err[ERR_LEN];
	struct tls_ca_params p = { 0 };
	struct tls_ca *ca = NULL;

	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_EQ(0, make_orchestrator_ca(dir, 0644, false, true, key, cert));
	p.key_path = key;
	p.cert_path = cert;
	ASSERT_EQ(-EPERM, tls_ca__create(&ca, &p, err, sizeof(err)));
	EXPECT_EQ(NULL, ca);
	EXPECT_NE(NULL, strstr(err, key)) TH_LOG("%s", err);
	EXPECT_NE(NULL, strstr(err, "0644")) TH_LOG("%s", err);
	/* Group-readable only: refused too. */
	ASSERT_EQ(0, chmod(key, 0640));
	ASSERT_EQ(-EPERM, tls_ca__create(&ca, &p, err, sizeof(err)));
	ASSERT_EQ(0, chmod(key, 0600));
	ASSERT_EQ(0, tls_ca__create(&ca, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	tls_ca__destroy(ca);
	unlink(key);
	unlink(cert);
	rmdir(dir);
}

/* The loaded CA's certificate is the file's; its leaves verify against it. */
static void loaded_ca_mints(struct __test_metadata *_metadata, bool pkcs8)
{
	char dir[PATH_LEN], key[PATH_LEN], cert[PATH_LEN], err[ERR_LEN];
	char buf[PEM_MAX];
	struct tls_ca_params p = { 0 };
	struct tls_ca *ca;
	const uint8_t *der;
	const char *pem;
	size_t len;
	WOLFSSL_X509 *file, *ours;

	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_EQ(0, make_orchestrator_ca(dir, 0600, pkcs8, true, key, cert));
	p.key_path = key;
	p.cert_path = cert;
	ASSERT_EQ(0, tls_ca__create(&ca, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_LT(0, read_file(cert, buf, sizeof(buf)));
	tls_ca__cert_pem(ca, &pem, &len);
	file = wolfSSL_X509_load_certificate_buffer((const unsigned char *)buf,
						    (int)strlen(buf),
						    WOLFSSL_FILETYPE_PEM);
	ours = wolfSSL_X509_load_certificate_buffer(
		(const unsigned char *)pem, (int)len, WOLFSSL_FILETYPE_PEM);
	ASSERT_NE(NULL, file);
	ASSERT_NE(NULL, ours);
	EXPECT_EQ(0, wolfSSL_X509_cmp(file, ours));
	ASSERT_EQ(0, tls_ca__leaf(ca, HOST, &der, &len));
	EXPECT_TRUE(verifies(ca, der, len));
	wolfSSL_X509_free(file);
	wolfSSL_X509_free(ours);
	tls_ca__destroy(ca);
	unlink(key);
	unlink(cert);
	rmdir(dir);
}

TEST(loaded_ca_sec1_key_mints_verifiable_leaves)
{
	loaded_ca_mints(_metadata, false);
}

TEST(loaded_ca_pkcs8_key_mints_verifiable_leaves)
{
	loaded_ca_mints(_metadata, true);
}

TEST(loaded_ca_refuses_a_cert_that_is_no_ca_or_not_the_keys)
{
	char dir[PATH_LEN], key[PATH_LEN], cert[PATH_LEN], err[ERR_LEN];
	char dir2[PATH_LEN], key2[PATH_LEN], cert2[PATH_LEN];
	struct tls_ca_params p = { 0 };
	struct tls_ca *ca = NULL;

	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_EQ(0, make_orchestrator_ca(dir, 0600, false, false, key, cert));
	p.key_path = key;
	p.cert_path = cert;
	EXPECT_EQ(-EINVAL, tls_ca__create(&ca, &p, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "not a CA")) TH_LOG("%s", err);
	/* Another CA's certificate with this key. */
	ASSERT_EQ(0, temp_dir(dir2, sizeof(dir2)));
	ASSERT_EQ(0,
		  make_orchestrator_ca(dir2, 0600, false, true, key2, cert2));
	p.cert_path = cert2;
	EXPECT_EQ(-EINVAL, tls_ca__create(&ca, &p, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "not the certificate of the CA key"))
	TH_LOG("%s", err);
	/* Days a leaf would outlive, or too many. */
	p.key_path = p.cert_path = NULL;
	p.days = TLS_LEAF_DAYS;
	EXPECT_EQ(-EINVAL, tls_ca__create(&ca, &p, err, sizeof(err)));
	p.days = TLS_CA_MAX_DAYS + 1;
	EXPECT_EQ(-EINVAL, tls_ca__create(&ca, &p, err, sizeof(err)));
	p.days = 0;
	p.key_path = key;
	/* Half a pair, a missing file. */
	p.cert_path = NULL;
	EXPECT_EQ(-EINVAL, tls_ca__create(&ca, &p, err, sizeof(err)));
	p.cert_path = "/nonexistent/cert.pem";
	EXPECT_EQ(-ENOENT, tls_ca__create(&ca, &p, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "/nonexistent/cert.pem")) TH_LOG("%s", err);
	EXPECT_EQ(NULL, ca);
	unlink(key);
	unlink(cert);
	unlink(key2);
	unlink(cert2);
	rmdir(dir);
	rmdir(dir2);
}

/* ---- leaves ------------------------------------------------------------ */

TEST(leaf_verifies_for_its_name_only)
{
	struct tls_ca *ca = new_ca();
	WOLFSSL_X509 *x;
	const uint8_t *der;
	char cn[CTC_NAME_SIZE];
	char *alt;
	size_t len;
	long nb, na;

	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, tls_ca__leaf(ca, HOST, &der, &len));
	EXPECT_TRUE(verifies(ca, der, len));
	x = x509_der(der, len);
	ASSERT_NE(NULL, x);
	EXPECT_EQ(WOLFSSL_SUCCESS,
		  wolfSSL_X509_check_host(x, HOST, strlen(HOST), 0, NULL));
	EXPECT_NE(WOLFSSL_SUCCESS,
		  wolfSSL_X509_check_host(x, OTHER_HOST, strlen(OTHER_HOST), 0,
					  NULL));
	EXPECT_NE(WOLFSSL_SUCCESS,
		  wolfSSL_X509_check_host(x, "example.test", 12, 0, NULL));
	alt = wolfSSL_X509_get_next_altname(x);
	ASSERT_NE(NULL, alt);
	EXPECT_STREQ(HOST, alt);
	EXPECT_EQ(NULL, wolfSSL_X509_get_next_altname(x));
	ASSERT_LT(0, wolfSSL_X509_NAME_get_text_by_NID(
			     wolfSSL_X509_get_subject_name(x), NID_commonName,
			     cn, sizeof(cn)));
	EXPECT_STREQ(HOST, cn);
	EXPECT_NE(1, wolfSSL_X509_get_isCA(x));
	EXPECT_TRUE(wolfSSL_X509_get_key_usage(x) & KEYUSE_DIGITAL_SIG);
	EXPECT_FALSE(wolfSSL_X509_get_key_usage(x) & KEYUSE_KEY_CERT_SIGN);
	EXPECT_TRUE(wolfSSL_X509_get_extended_key_usage(x) & XKU_SSL_SERVER);
	nb = secs_from_now(wolfSSL_X509_get_notBefore(x));
	na = secs_from_now(wolfSSL_X509_get_notAfter(x));
	EXPECT_LE(-(long)TLS_BACKDATE_S - SLACK_S, nb);
	EXPECT_GE(-(long)TLS_BACKDATE_S + SLACK_S, nb);
	EXPECT_LE((long)TLS_LEAF_DAYS * SECS_PER_DAY - SLACK_S, na);
	EXPECT_GE((long)TLS_LEAF_DAYS * SECS_PER_DAY + SLACK_S, na);
	wolfSSL_X509_free(x);
	/* Not from another CA. */
	{
		struct tls_ca *other = new_ca();

		ASSERT_NE(NULL, other);
		EXPECT_FALSE(verifies(other, der, len));
		tls_ca__destroy(other);
	}
	tls_ca__destroy(ca);
}

TEST(leaf_is_cached_by_normalized_name)
{
	struct tls_ca *ca = new_ca();
	const uint8_t *a, *b, *c;
	size_t la, lb, lc;

	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, tls_ca__leaf(ca, HOST, &a, &la));
	EXPECT_EQ(1, tls_ca__minted(ca));
	ASSERT_EQ(0, tls_ca__leaf(ca, "API.Example.TEST.", &b, &lb));
	EXPECT_EQ(1, tls_ca__minted(ca));
	EXPECT_EQ(a, b);
	EXPECT_EQ(la, lb);
	ASSERT_EQ(0, tls_ca__leaf(ca, OTHER_HOST, &c, &lc));
	EXPECT_EQ(2, tls_ca__minted(ca));
	EXPECT_NE(a, c);
	tls_ca__destroy(ca);
}

TEST(leaf_cache_is_bounded_lru)
{
	struct tls_ca *ca = new_ca();
	char name[64];
	const uint8_t *der;
	size_t len;
	unsigned int i;

	ASSERT_NE(NULL, ca);
	for (i = 0; i < TLS_LEAF_CACHE_MAX; i++) {
		snprintf(name, sizeof(name), "h%u.example.test", i);
		ASSERT_EQ(0, tls_ca__leaf(ca, name, &der, &len));
	}
	EXPECT_EQ(TLS_LEAF_CACHE_MAX, tls_ca__minted(ca));
	/* h0 used again: the most recent; h1 is now the oldest. */
	ASSERT_EQ(0, tls_ca__leaf(ca, "h0.example.test", &der, &len));
	EXPECT_EQ(TLS_LEAF_CACHE_MAX, tls_ca__minted(ca));
	for (i = 0; i < CACHE_EXTRA; i++) {
		snprintf(name, sizeof(name), "x%u.example.test", i);
		ASSERT_EQ(0, tls_ca__leaf(ca, name, &der, &len));
	}
	EXPECT_EQ(TLS_LEAF_CACHE_MAX + CACHE_EXTRA, tls_ca__minted(ca));
	ASSERT_EQ(0, tls_ca__leaf(ca, "h0.example.test", &der, &len));
	EXPECT_EQ(TLS_LEAF_CACHE_MAX + CACHE_EXTRA, tls_ca__minted(ca));
	ASSERT_EQ(0, tls_ca__leaf(ca, "h1.example.test", &der, &len));
	EXPECT_EQ(TLS_LEAF_CACHE_MAX + CACHE_EXTRA + 1, tls_ca__minted(ca));
	tls_ca__destroy(ca);
}

TEST(leaf_refuses_addresses_and_bad_names)
{
	static const char *const bad[] = {
		"",
		"10.0.0.1",
		"192.168.1.1.",
		"::1",
		"[::1]",
		"2001:db8::1",
		"a..example.test",
		".example.test",
		"-a.example.test",
		"a-.example.test",
		"a_b.example.test",
		"*.example.test",
		"api.example.test:443",
		"api example.test",
		"api.example.test/x",
		"caf\xc3\xa9.example.test",
	};
	struct tls_ca *ca = new_ca();
	char name[NET_HOSTNAME_MAX + 2];
	const uint8_t *der;
	size_t len, i;

	ASSERT_NE(NULL, ca);
	for (i = 0; i < ARRAY_SIZE(bad); i++)
		EXPECT_EQ(-EINVAL, tls_ca__leaf(ca, bad[i], &der, &len))
	TH_LOG("\"%s\"", bad[i]);
	/* A 64-character label; 254 characters. */
	memset(name, 'a', 64);
	strcpy(name + 64, ".test");
	EXPECT_EQ(-EINVAL, tls_ca__leaf(ca, name, &der, &len));
	memset(name, 'a', NET_HOSTNAME_MAX + 1);
	for (i = 63; i < NET_HOSTNAME_MAX; i += 64)
		name[i] = '.';
	name[NET_HOSTNAME_MAX + 1] = '\0';
	EXPECT_EQ(-EINVAL, tls_ca__leaf(ca, name, &der, &len));
	EXPECT_EQ(0, tls_ca__minted(ca));
	tls_ca__destroy(ca);
}

TEST(leaf_for_a_253_byte_name_has_the_san_only)
{
	struct tls_ca *ca = new_ca();
	char name[NET_HOSTNAME_MAX + 1], cn[CTC_NAME_SIZE];
	const uint8_t *der;
	WOLFSSL_X509 *x;
	size_t len, i;
	int loc;

	ASSERT_NE(NULL, ca);
	memset(name, 'a', NET_HOSTNAME_MAX);
	for (i = 63; i < NET_HOSTNAME_MAX; i += 64)
		name[i] = '.';
	name[NET_HOSTNAME_MAX] = '\0';
	ASSERT_EQ(0, tls_ca__leaf(ca, name, &der, &len));
	EXPECT_TRUE(verifies(ca, der, len));
	x = x509_der(der, len);
	ASSERT_NE(NULL, x);
	EXPECT_EQ(WOLFSSL_SUCCESS,
		  wolfSSL_X509_check_host(x, name, strlen(name), 0, NULL));
	EXPECT_GE(0, wolfSSL_X509_NAME_get_text_by_NID(
			     wolfSSL_X509_get_subject_name(x), NID_commonName,
			     cn, sizeof(cn)));
	/* With the subject empty, the SAN is critical. */
	loc = wolfSSL_X509_get_ext_by_NID(x, NID_subject_alt_name, -1);
	ASSERT_LE(0, loc);
	EXPECT_EQ(1, wolfSSL_X509_EXTENSION_get_critical(
			     wolfSSL_X509_get_ext(x, loc)));
	wolfSSL_X509_free(x);
	tls_ca__destroy(ca);
}

/* ---- connections ------------------------------------------------------- */

/* The CA's certificate PEM in dir/ca.pem: a bundle a client can load. */
static int ca_bundle(struct tls_ca *ca, const char *dir, char *path, size_t len)
{
	const char *pem;
	size_t n;

	tls_ca__cert_pem(ca, &pem, &n);
	if ((size_t)snprintf(path, len, "%s/ca.pem", dir) >= len)
		return -ENAMETOOLONG;
	return write_file(path, pem, n, 0644);
}

/*
 * One end of a handshake: a module connection, or plain wolfSSL (raw)
 * for the peers that must misbehave.
 */
struct end {
	int fd;
	struct tls_conn *c;
	WOLFSSL *raw;
	bool raw_server;
	int ret;     /* 0 done, -EAGAIN, or failed */
	int raw_err; /* raw: wolfSSL_get_error() of the failure */
	short events;
};

static void end_step(struct end *e)
{
	int r, err;

	if (e->ret != -EAGAIN)
		return;
	if (e->c) {
		e->ret = tls_conn__handshake(e->c);
		e->events = (short)tls_conn__wants(e->c);
		return;
	}
	r = e->raw_server ? wolfSSL_accept(e->raw) : wolfSSL_connect(e->raw);
	if (r == WOLFSSL_SUCCESS) {
		e->ret = 0;
		return;
	}
	err = wolfSSL_get_error(e->raw, r);
	if (err == WOLFSSL_ERROR_WANT_READ || err == WOLFSSL_ERROR_WANT_WRITE) {
		e->events = err == WOLFSSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		return;
	}
	e->raw_err = err;
	e->ret = -EPROTO;
}

/*
 * Both handshakes to their ends. An end that fails shuts its socket
 * down (after its alert went out), so the other sees that rather than
 * waiting for ever. false if poll timed out.
 */
static bool drive(struct end *a, struct end *b)
{
	struct end *ends[2] = { a, b };
	struct pollfd pfd[2];
	int i, n, rounds;

	a->ret = b->ret = -EAGAIN;
	for (rounds = 0; rounds < MAX_ROUNDS; rounds++) {
		for (i = 0; i < 2; i++) {
			end_step(ends[i]);
			if (ends[i]->ret && ends[i]->ret != -EAGAIN)
				shutdown(ends[i]->fd, SHUT_RDWR);
		}
		if (a->ret != -EAGAIN && b->ret != -EAGAIN)
			return true;
		for (i = 0, n = 0; i < 2; i++)
			if (ends[i]->ret == -EAGAIN)
				pfd[n++] = (struct pollfd){
					.fd = ends[i]->fd,
					.events = ends[i]->events,
				};
		if (poll(pfd, (nfds_t)n, POLL_MS) <= 0)
			return false;
	}
	return false;
}

static int nonblocking_pair(int sv[2])
{
	return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			  0, sv) ?
		       -errno :
		       0;
}

static bool allow_all(void *opaque, const char *sni)
{
	return true;
}

static bool allow_host(void *opaque, const char *sni)
{
	int *calls = opaque;

	(*calls)++;
	return !strcmp(sni, HOST);
}

/* What the server's callback saw. */
static char seen_sni[TLS_REASON_LEN];

static bool refuse_all(void *opaque, const char *sni)
{
	snprintf(seen_sni, sizeof(seen_sni), "%s", sni);
	return false;
}

/*
 * A module server (on ca, with ap) and module client (bundle, cp) on a
 * fresh socketpair: their ends, ready to drive.
 */
struct duo {
	int sv[2];
	struct tls_server *srv;
	struct tls_client *cli;
	struct end s, c;
};

static int duo_open(struct duo *d, struct tls_ca *ca, const char *bundle,
		    const struct tls_accept_params *ap,
		    const struct tls_connect_params *cp)
{
	struct tls_client_params clp = { .ca_bundle = bundle };
	char err[ERR_LEN];
	int ret;

	memset(d, 0, sizeof(*d));
	d->sv[0] = d->sv[1] = -1;
	ret = nonblocking_pair(d->sv);
	if (!ret)
		ret = tls_server__create(&d->srv, ca, err, sizeof(err));
	if (!ret)
		ret = tls_client__create(&d->cli, &clp, err, sizeof(err));
	if (!ret)
		ret = tls_conn__accept(&d->s.c, d->srv, d->sv[0], ap);
	if (!ret)
		ret = tls_conn__connect(&d->c.c, d->cli, d->sv[1], cp);
	d->s.fd = d->sv[0];
	d->c.fd = d->sv[1];
	return ret;
}

static void duo_close(struct duo *d)
{
	tls_conn__free(d->s.c);
	tls_conn__free(d->c.c);
	tls_server__destroy(d->srv);
	tls_client__destroy(d->cli);
	if (d->sv[0] >= 0)
		close(d->sv[0]);
	if (d->sv[1] >= 0)
		close(d->sv[1]);
}

/*
 * A fresh CA, its certificate as a bundle in a new directory dir (both
 * PATH_LEN), and a duo trusting it: the CA.
 */
static struct tls_ca *duo_with_ca(struct __test_metadata *_metadata, char *dir,
				  char *bundle, struct duo *d,
				  const struct tls_accept_params *ap,
				  const struct tls_connect_params *cp)
{
	struct tls_ca *ca = new_ca();

	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, temp_dir(dir, PATH_LEN));
	ASSERT_EQ(0, ca_bundle(ca, dir, bundle, PATH_LEN));
	ASSERT_EQ(0, duo_open(d, ca, bundle, ap, cp));
	return ca;
}

static void duo_with_ca_close(struct duo *d, struct tls_ca *ca, const char *dir,
			      const char *bundle)
{
	duo_close(d);
	tls_ca__destroy(ca);
	unlink(bundle);
	rmdir(dir);
}

/* A plain wolfSSL client on fd, trusting ca, for what ours never does. */
static WOLFSSL *raw_client(WOLFSSL_CTX **ctx, WOLFSSL_METHOD *method,
			   struct tls_ca *ca, int fd)
{
	const uint8_t *der;
	size_t len;
	WOLFSSL *ssl;

	tls_ca__cert_der(ca, &der, &len);
	*ctx = wolfSSL_CTX_new(method);
	if (!*ctx || wolfSSL_CTX_load_verify_buffer(*ctx, der, (long)len,
						    WOLFSSL_FILETYPE_ASN1) !=
			     WOLFSSL_SUCCESS)
		return NULL;
	ssl = wolfSSL_new(*ctx);
	if (ssl)
		wolfSSL_set_fd(ssl, fd);
	return ssl;
}

/* Our server and a plain wolfSSL client, on a pair of sockets. */
struct raw_duo {
	struct tls_ca *ca;
	struct tls_server *srv;
	WOLFSSL_CTX *ctx;
	int sv[2];
	struct end s, c;
};

/*
 * A fresh CA, our server of it accepting by ap, and a raw client of
 * method trusting it (with SNI sni when not NULL); not shaken yet.
 */
static void raw_duo_open(struct __test_metadata *_metadata, struct raw_duo *rp,
			 const struct tls_accept_params *ap,
			 WOLFSSL_METHOD *method, const char *sni)
{
	char err[ERR_LEN];

	memset(rp, 0, sizeof(*rp));
	rp->ca = new_ca();
	ASSERT_NE(NULL, rp->ca);
	ASSERT_EQ(0, nonblocking_pair(rp->sv));
	ASSERT_EQ(0, tls_server__create(&rp->srv, rp->ca, err, sizeof(err)));
	ASSERT_EQ(0, tls_conn__accept(&rp->s.c, rp->srv, rp->sv[0], ap));
	rp->s.fd = rp->sv[0];
	rp->c.fd = rp->sv[1];
	rp->c.raw = raw_client(&rp->ctx, method, rp->ca, rp->sv[1]);
	ASSERT_NE(NULL, rp->c.raw);
	if (sni)
		ASSERT_EQ(WOLFSSL_SUCCESS,
			  wolfSSL_UseSNI(rp->c.raw, WOLFSSL_SNI_HOST_NAME, sni,
					 strlen(sni)));
}

static void raw_duo_close(struct raw_duo *rp)
{
	wolfSSL_free(rp->c.raw);
	wolfSSL_CTX_free(rp->ctx);
	tls_conn__free(rp->s.c);
	tls_server__destroy(rp->srv);
	tls_ca__destroy(rp->ca);
	close(rp->sv[0]);
	close(rp->sv[1]);
}

/* What relay() saw on the way. */
struct relay_seen {
	unsigned int write_again; /* writes that returned -EAGAIN */
	unsigned int pending;	  /* reads that left bytes buffered */
};

/* len bytes from w to r, written and read as the loop allows. */
static bool relay(struct tls_conn *w, int wfd, struct tls_conn *r, int rfd,
		  const uint8_t *data, size_t len, uint8_t *out,
		  struct relay_seen *seen)
{
	size_t sent = 0, got = 0;
	struct pollfd pfd[2];
	ssize_t n;
	int rounds, k;

	for (rounds = 0; got < len && rounds < MAX_ROUNDS * 10; rounds++) {
		k = 0;
		if (sent < len) {
			n = tls_conn__write(w, data + sent, len - sent);
			if (n > 0) {
				sent += (size_t)n;
			} else if (n == -EAGAIN) {
				seen->write_again++;
				pfd[k++] = (struct pollfd){
					.fd = wfd,
					.events = (short)tls_conn__wants(w),
				};
			} else {
				return false;
			}
		}
		/* Read until -EAGAIN: buffered records come out first. */
		while (got < len) {
			n = tls_conn__read(r, out + got,
					   len - got < CHUNK ? len - got :
							       CHUNK);
			if (n == -EAGAIN)
				break;
			if (n <= 0)
				return false;
			got += (size_t)n;
			if (tls_conn__pending(r))
				seen->pending++;
		}
		if (got == len)
			break;
		pfd[k++] = (struct pollfd){
			.fd = rfd,
			.events = (short)tls_conn__wants(r),
		};
		if (poll(pfd, (nfds_t)k, POLL_MS) <= 0)
			return false;
	}
	return got == len && !memcmp(data, out, len);
}

/* Small socket buffers: a record does not fit, writes must wait. */
static void small_buffers(int fd)
{
	int size = SMALL_SOCKBUF;

	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

TEST(handshake_and_data_both_ways)
{
	struct tls_accept_params ap = { .sni_ok = allow_host };
	struct tls_connect_params cp = { .host = HOST };
	char dir[PATH_LEN], bundle[PATH_LEN];
	uint8_t *data, *out;
	struct relay_seen seen = { 0 };
	struct tls_ca *ca;
	struct duo d;
	uint64_t seed = FUZZ_SEED;
	int calls = 0;
	size_t i;

	ap.opaque = &calls;
	ca = duo_with_ca(_metadata, dir, bundle, &d, &ap, &cp);
	EXPECT_EQ(NULL, tls_conn__sni(d.s.c));
	ASSERT_TRUE(drive(&d.s, &d.c));
	ASSERT_EQ(0, d.s.ret) TH_LOG("server: %s", tls_conn__error(d.s.c));
	ASSERT_EQ(0, d.c.ret) TH_LOG("client: %s", tls_conn__error(d.c.c));
	EXPECT_EQ(1, calls);
	EXPECT_STREQ(HOST, tls_conn__sni(d.s.c));
	EXPECT_STREQ("TLSv1.3", tls_conn__version(d.s.c));
	EXPECT_STREQ("TLSv1.3", tls_conn__version(d.c.c));
	EXPECT_EQ(NULL, tls_conn__alpn(d.s.c));
	EXPECT_STREQ("", tls_conn__error(d.c.c));
	data = malloc(BIG_LEN);
	out = malloc(BIG_LEN);
	ASSERT_NE(NULL, data);
	ASSERT_NE(NULL, out);
	for (i = 0; i < BIG_LEN; i++)
		data[i] = (uint8_t)prng__next(&seed);
	small_buffers(d.s.fd);
	small_buffers(d.c.fd);
	EXPECT_TRUE(
		relay(d.c.c, d.c.fd, d.s.c, d.s.fd, data, BIG_LEN, out, &seen));
	EXPECT_TRUE(
		relay(d.s.c, d.s.fd, d.c.c, d.c.fd, data, BIG_LEN, out, &seen));
	EXPECT_LT(0, seen.write_again);
	EXPECT_LT(0, seen.pending);
	/* The client's close_notify: the server reads an end. */
	EXPECT_EQ(0, tls_conn__shutdown(d.c.c));
	EXPECT_EQ(0, tls_conn__shutdown(d.c.c));
	EXPECT_EQ(0, tls_conn__read(d.s.c, out, CHUNK));
	EXPECT_EQ(0, tls_conn__read(d.s.c, out, CHUNK));
	free(data);
	free(out);
	duo_with_ca_close(&d, ca, dir, bundle);
}

TEST(peer_gone_without_close_notify_is_a_reset)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	struct tls_connect_params cp = { .host = HOST };
	char dir[PATH_LEN], bundle[PATH_LEN];
	uint8_t buf[CHUNK];
	struct tls_ca *ca;
	struct duo d;

	ca = duo_with_ca(_metadata, dir, bundle, &d, &ap, &cp);
	ASSERT_TRUE(drive(&d.s, &d.c));
	ASSERT_EQ(0, d.s.ret);
	ASSERT_EQ(0, d.c.ret);
	EXPECT_EQ(-EAGAIN, tls_conn__read(d.s.c, buf, sizeof(buf)));
	EXPECT_EQ(EPOLLIN, tls_conn__wants(d.s.c));
	shutdown(d.c.fd, SHUT_RDWR);
	EXPECT_EQ(-ECONNRESET, tls_conn__read(d.s.c, buf, sizeof(buf)));
	EXPECT_NE(NULL, strstr(tls_conn__error(d.s.c), "without close_notify"))
	TH_LOG("%s", tls_conn__error(d.s.c));
	/* Kept. */
	EXPECT_EQ(-ECONNRESET, tls_conn__write(d.s.c, buf, sizeof(buf)));
	duo_with_ca_close(&d, ca, dir, bundle);
}

/*
 * A write that waited for room, completed once the peer read, then
 * close_notify behind data the peer has not read yet: the peer reads
 * all of it, then the end.
 */
TEST(shutdown_behind_queued_data)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	struct tls_connect_params cp = { .host = HOST };
	char dir[PATH_LEN], bundle[PATH_LEN];
	uint8_t buf[CHUNK] = { 0 };
	size_t queued = 0, got = 0;
	struct pollfd pfd;
	struct tls_ca *ca;
	struct duo d;
	ssize_t n;
	int rounds;

	ca = duo_with_ca(_metadata, dir, bundle, &d, &ap, &cp);
	ASSERT_TRUE(drive(&d.s, &d.c));
	ASSERT_EQ(0, d.s.ret);
	ASSERT_EQ(0, d.c.ret);
	small_buffers(d.s.fd);
	small_buffers(d.c.fd);
	while ((n = tls_conn__write(d.c.c, buf, sizeof(buf))) > 0)
		queued += (size_t)n;
	ASSERT_EQ(-EAGAIN, n);
	EXPECT_EQ(EPOLLOUT, tls_conn__wants(d.c.c));
	for (rounds = 0; rounds < MAX_ROUNDS; rounds++) {
		n = tls_conn__write(d.c.c, buf, sizeof(buf));
		if (n > 0) {
			queued += (size_t)n;
			break;
		}
		ASSERT_EQ(-EAGAIN, n);
		/* Make room: the server reads what there is. */
		while ((n = tls_conn__read(d.s.c, buf, sizeof(buf))) > 0)
			got += (size_t)n;
		ASSERT_EQ(-EAGAIN, n);
	}
	ASSERT_EQ(0, tls_conn__shutdown(d.c.c));
	for (rounds = 0; rounds < MAX_ROUNDS; rounds++) {
		n = tls_conn__read(d.s.c, buf, sizeof(buf));
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n != -EAGAIN)
			break;
		pfd = (struct pollfd){ .fd = d.s.fd, .events = POLLIN };
		ASSERT_LT(0, poll(&pfd, 1, POLL_MS));
	}
	EXPECT_EQ(0, n) TH_LOG("%s", tls_conn__error(d.s.c));
	EXPECT_EQ(queued, got);
	/* Nothing after our close_notify. */
	EXPECT_EQ(-EPIPE, tls_conn__write(d.c.c, buf, sizeof(buf)));
	duo_with_ca_close(&d, ca, dir, bundle);
}

/*
 * A TLS 1.3 KeyUpdate asking for ours, arriving while our socket toward
 * the peer is full and a write of ours waits: wolfSSL 5.5.4 does not
 * make the read that takes it wait for room (it wants EPOLLIN, more
 * data); the waiting write and data both ways then go through under the
 * new keys.
 */
TEST(key_update_while_a_write_waits)
{
	struct raw_duo rp;
	struct tls_accept_params ap = { .sni_ok = allow_all };
	uint8_t buf[CHUNK] = { 0 };
	size_t queued = 0, got = 0;
	struct pollfd pfd;
	ssize_t n;
	int r, rounds;
	bool waiting = true;

	raw_duo_open(_metadata, &rp, &ap, wolfTLSv1_3_client_method(), HOST);
	ASSERT_TRUE(drive(&rp.s, &rp.c));
	ASSERT_EQ(0, rp.s.ret) TH_LOG("%s", tls_conn__error(rp.s.c));
	ASSERT_EQ(0, rp.c.ret);
	small_buffers(rp.sv[0]);
	small_buffers(rp.sv[1]);
	while ((n = tls_conn__write(rp.s.c, buf, sizeof(buf))) > 0)
		queued += (size_t)n;
	ASSERT_EQ(-EAGAIN, n);
	ASSERT_EQ(WOLFSSL_SUCCESS, wolfSSL_update_keys(rp.c.raw));
	EXPECT_EQ(-EAGAIN, tls_conn__read(rp.s.c, buf, sizeof(buf)));
	EXPECT_EQ(EPOLLIN, tls_conn__wants(rp.s.c));
	/* The client reads; the waiting write completes (same bytes). */
	for (rounds = 0; rounds < MAX_ROUNDS && (waiting || got < queued);
	     rounds++) {
		r = wolfSSL_read(rp.c.raw, buf, sizeof(buf));
		if (r > 0)
			got += (size_t)r;
		if (waiting && tls_conn__write(rp.s.c, buf, sizeof(buf)) > 0) {
			queued += sizeof(buf);
			waiting = false;
		}
		if (r <= 0) {
			pfd = (struct pollfd){ .fd = rp.sv[1],
					       .events = POLLIN };
			ASSERT_LT(0, poll(&pfd, 1, POLL_MS));
		}
	}
	EXPECT_FALSE(waiting);
	EXPECT_EQ(queued, got);
	/* And the client's data under its new keys reads fine. */
	ASSERT_EQ((int)sizeof(buf), wolfSSL_write(rp.c.raw, buf, sizeof(buf)));
	got = 0;
	for (rounds = 0; rounds < MAX_ROUNDS && got < sizeof(buf); rounds++) {
		n = tls_conn__read(rp.s.c, buf, sizeof(buf));
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		ASSERT_EQ(-EAGAIN, n) TH_LOG("%s", tls_conn__error(rp.s.c));
		pfd = (struct pollfd){ .fd = rp.sv[0],
				       .events =
					       (short)tls_conn__wants(rp.s.c) };
		ASSERT_LT(0, poll(&pfd, 1, POLL_MS));
	}
	EXPECT_EQ(sizeof(buf), got);
	raw_duo_close(&rp);
}

/* SIGPIPE is not ignored here: a write to a closed peer must not raise it. */
TEST(write_to_a_closed_peer_fails_without_sigpipe)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	struct tls_connect_params cp = { .host = HOST };
	char dir[PATH_LEN], bundle[PATH_LEN];
	uint8_t buf[CHUNK] = { 0 };
	struct tls_ca *ca;
	struct duo d;

	ca = duo_with_ca(_metadata, dir, bundle, &d, &ap, &cp);
	ASSERT_TRUE(drive(&d.s, &d.c));
	ASSERT_EQ(0, d.s.ret);
	ASSERT_EQ(0, d.c.ret);
	close(d.sv[1]);
	d.sv[1] = -1;
	EXPECT_EQ(-ECONNRESET, tls_conn__write(d.s.c, buf, sizeof(buf)))
	TH_LOG("%s", tls_conn__error(d.s.c));
	duo_with_ca_close(&d, ca, dir, bundle);
}

TEST(sni_refused_fails_both_ends)
{
	struct tls_accept_params ap = { .sni_ok = refuse_all };
	struct tls_connect_params cp = { .host = HOST };
	char dir[PATH_LEN], bundle[PATH_LEN];
	struct tls_ca *ca;
	struct duo d;

	ca = duo_with_ca(_metadata, dir, bundle, &d, &ap, &cp);
	ASSERT_TRUE(drive(&d.s, &d.c));
	EXPECT_STREQ(HOST, seen_sni);
	EXPECT_EQ(-EACCES, d.s.ret);
	EXPECT_STREQ("SNI " HOST " refused", tls_conn__error(d.s.c));
	EXPECT_STREQ(HOST, tls_conn__sni(d.s.c));
	EXPECT_EQ(-EPROTO, d.c.ret) TH_LOG("%s", tls_conn__error(d.c.c));
	EXPECT_NE(NULL, strstr(tls_conn__error(d.c.c), "alert"))
	TH_LOG("%s", tls_conn__error(d.c.c));
	EXPECT_NE(NULL, strstr(tls_conn__error(d.c.c), "112"))
	TH_LOG("%s", tls_conn__error(d.c.c));
	/* No leaf was minted for a refused name. */
	EXPECT_EQ(0, tls_ca__minted(ca));
	duo_with_ca_close(&d, ca, dir, bundle);
}

TEST(no_sni_is_refused)
{
	struct raw_duo rp;
	struct tls_accept_params ap = { .sni_ok = allow_all };

	raw_duo_open(_metadata, &rp, &ap, wolfSSLv23_client_method(), NULL);
	ASSERT_TRUE(drive(&rp.s, &rp.c));
	EXPECT_EQ(-EACCES, rp.s.ret);
	EXPECT_STREQ("no SNI in the ClientHello", tls_conn__error(rp.s.c));
	EXPECT_EQ(NULL, tls_conn__sni(rp.s.c));
	EXPECT_EQ(-EPROTO, rp.c.ret);
	EXPECT_EQ(0, tls_ca__minted(rp.ca));
	raw_duo_close(&rp);
}

/*
 * A TLS 1.3 client with no key share: the server's HelloRetryRequest
 * brings a second ClientHello, and the SNI is checked on each.
 */
TEST(hello_retry_request_checks_sni_again)
{
	struct raw_duo rp;
	struct tls_accept_params ap = { .sni_ok = allow_host };
	int calls = 0;

	ap.opaque = &calls;
	raw_duo_open(_metadata, &rp, &ap, wolfTLSv1_3_client_method(), HOST);
	ASSERT_EQ(WOLFSSL_SUCCESS, wolfSSL_NoKeyShares(rp.c.raw));
	ASSERT_TRUE(drive(&rp.s, &rp.c));
	EXPECT_EQ(0, rp.s.ret) TH_LOG("%s", tls_conn__error(rp.s.c));
	EXPECT_EQ(0, rp.c.ret);
	EXPECT_EQ(2, calls);
	raw_duo_close(&rp);
}

/* A plain client on our server, with SNI, limited to one version. */
static void raw_version(struct __test_metadata *_metadata,
			WOLFSSL_METHOD *method, int want)
{
	struct raw_duo rp;
	struct tls_accept_params ap = { .sni_ok = allow_all };

	raw_duo_open(_metadata, &rp, &ap, method, HOST);
	ASSERT_TRUE(drive(&rp.s, &rp.c));
	EXPECT_EQ(want, rp.s.ret) TH_LOG("%s", tls_conn__error(rp.s.c));
	if (!want) {
		EXPECT_EQ(0, rp.c.ret);
		EXPECT_STREQ("TLSv1.2", tls_conn__version(rp.s.c));
	}
	raw_duo_close(&rp);
}

TEST(server_takes_tls12)
{
	raw_version(_metadata, wolfTLSv1_2_client_method(), 0);
}

TEST(server_refuses_tls11)
{
	raw_version(_metadata, wolfTLSv1_1_client_method(), -EPROTO);
}

TEST(upstream_not_from_the_bundle_is_not_trusted)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	struct tls_connect_params cp = { .host = HOST };
	char dir[PATH_LEN], bundle[PATH_LEN];
	struct tls_ca *ca, *other;
	struct duo d;

	ca = new_ca();
	other = new_ca();
	ASSERT_NE(NULL, ca);
	ASSERT_NE(NULL, other);
	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_EQ(0, ca_bundle(other, dir, bundle, sizeof(bundle)));
	ASSERT_EQ(0, duo_open(&d, ca, bundle, &ap, &cp));
	ASSERT_TRUE(drive(&d.s, &d.c));
	EXPECT_EQ(-EACCES, d.c.ret);
	EXPECT_EQ(0, strncmp(tls_conn__error(d.c.c),
			     "upstream certificate not trusted: ", 34))
	TH_LOG("%s", tls_conn__error(d.c.c));
	EXPECT_NE(0, d.s.ret);
	duo_close(&d);
	tls_ca__destroy(ca);
	tls_ca__destroy(other);
	unlink(bundle);
	rmdir(dir);
}

TEST(upstream_certificate_for_another_name_fails)
{
	struct tls_connect_params cp = { .host = OTHER_HOST };
	struct tls_client_params clp = { 0 };
	char dir[PATH_LEN], bundle[PATH_LEN], err[ERR_LEN];
	const uint8_t *der, *key;
	size_t len, key_len;
	struct tls_client *cli;
	struct tls_ca *ca;
	WOLFSSL_CTX *ctx;
	struct end s = { 0 }, c = { 0 };
	int sv[2];

	ca = new_ca();
	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_EQ(0, ca_bundle(ca, dir, bundle, sizeof(bundle)));
	clp.ca_bundle = bundle;
	ASSERT_EQ(0, tls_client__create(&cli, &clp, err, sizeof(err)))
	TH_LOG("%s", err);
	/* A plain server presenting the leaf for HOST whatever is asked. */
	ASSERT_EQ(0, tls_ca__leaf(ca, HOST, &der, &len));
	tls_ca__leaf_key(ca, &key, &key_len);
	ctx = wolfSSL_CTX_new(wolfSSLv23_server_method());
	ASSERT_NE(NULL, ctx);
	ASSERT_EQ(WOLFSSL_SUCCESS,
		  wolfSSL_CTX_use_certificate_buffer(ctx, der, (long)len,
						     WOLFSSL_FILETYPE_ASN1));
	ASSERT_EQ(WOLFSSL_SUCCESS,
		  wolfSSL_CTX_use_PrivateKey_buffer(ctx, key, (long)key_len,
						    WOLFSSL_FILETYPE_ASN1));
	ASSERT_EQ(0, nonblocking_pair(sv));
	s.raw = wolfSSL_new(ctx);
	ASSERT_NE(NULL, s.raw);
	wolfSSL_set_fd(s.raw, sv[0]);
	s.raw_server = true;
	s.fd = sv[0];
	ASSERT_EQ(0, tls_conn__connect(&c.c, cli, sv[1], &cp));
	c.fd = sv[1];
	ASSERT_TRUE(drive(&s, &c));
	EXPECT_EQ(-EACCES, c.ret);
	EXPECT_STREQ("upstream certificate is not for " OTHER_HOST,
		     tls_conn__error(c.c));
	EXPECT_NE(0, s.ret);
	tls_conn__free(c.c);
	wolfSSL_free(s.raw);
	wolfSSL_CTX_free(ctx);
	tls_client__destroy(cli);
	tls_ca__destroy(ca);
	close(sv[0]);
	close(sv[1]);
	unlink(bundle);
	rmdir(dir);
}

/* Our server allowing srv_alpn, our client asking for cli_alpn. */
static void alpn_case(struct __test_metadata *_metadata, const char *srv_alpn,
		      const char *cli_alpn, int want, const char *proto)
{
	struct tls_accept_params ap = { .sni_ok = allow_all, .alpn = srv_alpn };
	struct tls_connect_params cp = { .host = HOST, .alpn = cli_alpn };
	char dir[PATH_LEN], bundle[PATH_LEN];
	struct tls_ca *ca;
	struct duo d;

	ca = duo_with_ca(_metadata, dir, bundle, &d, &ap, &cp);
	ASSERT_TRUE(drive(&d.s, &d.c));
	EXPECT_EQ(want, d.c.ret) TH_LOG("client: %s", tls_conn__error(d.c.c));
	if (!want) {
		EXPECT_EQ(0, d.s.ret);
		EXPECT_STREQ(proto, tls_conn__alpn(d.s.c));
		EXPECT_STREQ(proto, tls_conn__alpn(d.c.c));
	} else {
		TH_LOG("client: %s; server: %s", tls_conn__error(d.c.c),
		       tls_conn__error(d.s.c));
	}
	duo_with_ca_close(&d, ca, dir, bundle);
}

TEST(alpn_h2_negotiated)
{
	alpn_case(_metadata, "h2,http/1.1", "h2", 0, "h2");
}

TEST(alpn_http11_negotiated)
{
	alpn_case(_metadata, "h2,http/1.1", "http/1.1", 0, "http/1.1");
}

TEST(alpn_http11_implied_by_a_server_without_alpn)
{
	alpn_case(_metadata, NULL, "http/1.1", 0, NULL);
}

TEST(alpn_none_asked_none_chosen)
{
	alpn_case(_metadata, "h2,http/1.1", NULL, 0, NULL);
}

/*
 * A guest offering both, http/1.1 first: wolfSSL takes the guest's first
 * protocol the server allows, whatever the server's order.
 */
TEST(alpn_guest_preference_wins)
{
	struct raw_duo rp;
	struct tls_accept_params ap = { .sni_ok = allow_all,
					.alpn = "h2,http/1.1" };
	char offer[] = "http/1.1,h2";

	raw_duo_open(_metadata, &rp, &ap, wolfSSLv23_client_method(), HOST);
	ASSERT_EQ(WOLFSSL_SUCCESS,
		  wolfSSL_UseALPN(rp.c.raw, offer, strlen(offer),
				  WOLFSSL_ALPN_FAILED_ON_MISMATCH));
	ASSERT_TRUE(drive(&rp.s, &rp.c));
	ASSERT_EQ(0, rp.s.ret) TH_LOG("%s", tls_conn__error(rp.s.c));
	EXPECT_STREQ("http/1.1", tls_conn__alpn(rp.s.c));
	raw_duo_close(&rp);
}

/* Upstream offered both (the interception's list): its choice taken. */
TEST(alpn_list_offered_server_chooses)
{
	alpn_case(_metadata, "http/1.1", "h2,http/1.1", 0, "http/1.1");
	alpn_case(_metadata, "h2", "h2,http/1.1", 0, "h2");
	alpn_case(_metadata, NULL, "h2,http/1.1", 0, NULL);
}

TEST(alpn_h2_refused_by_a_server_without_alpn)
{
	alpn_case(_metadata, NULL, "h2", -EPROTO, NULL);
}

TEST(alpn_h2_refused_by_an_http11_server)
{
	alpn_case(_metadata, "http/1.1", "h2", -EPROTO, NULL);
}

/*
 * The bundle is opened at create and parsed at the first connection: an
 * empty one is refused at create; one with no certificate in it fails
 * every connection (-ENOKEY), and nothing is parsed before.
 */
TEST(ca_bundle_parsed_at_the_first_connection)
{
	static const char junk[] = "not a certificate\n";
	struct tls_connect_params cp = { .host = HOST };
	struct tls_client_params clp = { 0 };
	char dir[PATH_LEN], bundle[PATH_LEN], err[ERR_LEN];
	struct tls_client *cli;
	struct tls_conn *c = NULL;
	int sv[2];

	ASSERT_EQ(0, temp_dir(dir, sizeof(dir)));
	ASSERT_LT(0, snprintf(bundle, sizeof(bundle), "%s/b.pem", dir));
	clp.ca_bundle = bundle;
	ASSERT_EQ(0, write_file(bundle, "", 0, 0644));
	EXPECT_EQ(-EINVAL, tls_client__create(&cli, &clp, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, bundle)) TH_LOG("%s", err);
	ASSERT_EQ(0, write_file(bundle, junk, sizeof(junk) - 1, 0644));
	ASSERT_EQ(0, tls_client__create(&cli, &clp, err, sizeof(err)))
	TH_LOG("%s", err);
	/* Opened at create: gone from its path, it still loads (or not). */
	unlink(bundle);
	ASSERT_EQ(0, nonblocking_pair(sv));
	EXPECT_EQ(-ENOKEY, tls_conn__connect(&c, cli, sv[1], &cp));
	EXPECT_TRUE(c == NULL);
	EXPECT_EQ(-ENOKEY, tls_conn__connect(&c, cli, sv[1], &cp));
	close(sv[0]);
	close(sv[1]);
	tls_client__destroy(cli);
	rmdir(dir);
}

TEST(bad_params_refused)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	struct tls_connect_params cp = { .host = HOST };
	struct tls_client_params clp = { .ca_bundle = "/nonexistent.pem" };
	struct tls_server *srv;
	struct tls_client *cli;
	struct tls_conn *c = NULL;
	struct tls_ca *ca;
	char err[ERR_LEN];

	ca = new_ca();
	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, tls_server__create(&srv, ca, err, sizeof(err)));
	EXPECT_EQ(-ENOENT, tls_client__create(&cli, &clp, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "/nonexistent.pem")) TH_LOG("%s", err);
	clp.ca_bundle = NULL; /* the system's */
	if (access(TLS_DEFAULT_CA_BUNDLE, R_OK))
		SKIP(goto out_srv, "no %s", TLS_DEFAULT_CA_BUNDLE);
	ASSERT_EQ(0, tls_client__create(&cli, &clp, err, sizeof(err)))
	TH_LOG("%s", err);
	ap.sni_ok = NULL;
	EXPECT_EQ(-EINVAL, tls_conn__accept(&c, srv, 0, &ap));
	ap.sni_ok = allow_all;
	ap.alpn = "h2,,http/1.1";
	EXPECT_EQ(-EINVAL, tls_conn__accept(&c, srv, 0, &ap));
	ap.alpn = "";
	EXPECT_EQ(-EINVAL, tls_conn__accept(&c, srv, 0, &ap));
	cp.host = "10.0.0.1";
	EXPECT_EQ(-EINVAL, tls_conn__connect(&c, cli, 0, &cp));
	cp.host = HOST;
	cp.alpn = "h2,,http/1.1";
	EXPECT_EQ(-EINVAL, tls_conn__connect(&c, cli, 0, &cp));
	EXPECT_EQ(NULL, c);
	tls_client__destroy(cli);
out_srv:
	tls_server__destroy(srv);
	tls_ca__destroy(ca);
}

/*
 * Under a filter that refuses opening files, as the vmm's seccomp filter
 * does: wolfSSL cannot seed a connection's random generator from
 * /dev/urandom, and the connection is refused with -EIO (the integration
 * must give the proxy thread that file).
 */
TEST(no_connection_without_dev_urandom)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	struct tls_server *srv;
	struct tls_conn *c = NULL;
	struct tls_ca *ca;
	scmp_filter_ctx filter;
	char err[ERR_LEN];
	int sv[2];

	ca = new_ca();
	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, tls_server__create(&srv, ca, err, sizeof(err)));
	ASSERT_EQ(0, nonblocking_pair(sv));
	filter = seccomp_init(SCMP_ACT_ALLOW);
	ASSERT_NE(NULL, filter);
	ASSERT_EQ(0, seccomp_rule_add(filter, SCMP_ACT_ERRNO(EACCES),
				      SCMP_SYS(openat), 0));
	ASSERT_EQ(0, seccomp_rule_add(filter, SCMP_ACT_ERRNO(EACCES),
				      SCMP_SYS(open), 0));
	ASSERT_EQ(0, seccomp_load(filter));
	seccomp_release(filter);
	EXPECT_EQ(-EIO, tls_conn__accept(&c, srv, sv[0], &ap));
	EXPECT_EQ(NULL, c);
	tls_server__destroy(srv);
	tls_ca__destroy(ca);
	close(sv[0]);
	close(sv[1]);
}

/*
 * Garbage for a ClientHello, some of it behind a plausible record
 * header: the server conn fails (never succeeds, never crashes), and
 * mints nothing.
 */
TEST(random_bytes_handshake_never_crashes)
{
	struct tls_accept_params ap = { .sni_ok = allow_all };
	uint64_t seed = FUZZ_SEED;
	uint8_t buf[FUZZ_MAX];
	struct tls_server *srv;
	struct tls_conn *c;
	struct tls_ca *ca;
	struct pollfd pfd;
	char err[ERR_LEN];
	int sv[2], round, ret, steps;
	size_t n, i;

	ca = new_ca();
	ASSERT_NE(NULL, ca);
	ASSERT_EQ(0, tls_server__create(&srv, ca, err, sizeof(err)));
	for (round = 0; round < FUZZ_ROUNDS; round++) {
		ASSERT_EQ(0, nonblocking_pair(sv));
		ASSERT_EQ(0, tls_conn__accept(&c, srv, sv[0], &ap));
		n = 1 + prng__next(&seed) % FUZZ_MAX;
		for (i = 0; i < n; i++)
			buf[i] = (uint8_t)prng__next(&seed);
		if (round % 2 && n > 5) {
			/* handshake record, TLS 1.0 .. 1.3 legacy version */
			buf[0] = 0x16;
			buf[1] = 0x03;
			buf[2] = (uint8_t)(prng__next(&seed) % 4);
			buf[3] = (uint8_t)((n - 5) >> 8);
			buf[4] = (uint8_t)(n - 5);
			if (n > 5 && round % 4 == 1)
				buf[5] = 0x01; /* ClientHello */
		}
		ASSERT_EQ((ssize_t)n, write(sv[1], buf, n));
		shutdown(sv[1], SHUT_WR);
		for (steps = 0; steps < MAX_ROUNDS; steps++) {
			ret = tls_conn__handshake(c);
			if (ret != -EAGAIN)
				break;
			pfd = (struct pollfd){
				.fd = sv[0], .events = (short)tls_conn__wants(c)
			};
			ASSERT_LT(0, poll(&pfd, 1, POLL_MS));
		}
		EXPECT_NE(0, ret);
		EXPECT_NE(-EAGAIN, ret);
		EXPECT_NE('\0', tls_conn__error(c)[0]);
		tls_conn__free(c);
		close(sv[0]);
		close(sv[1]);
	}
	EXPECT_EQ(0, tls_ca__minted(ca));
	tls_server__destroy(srv);
	tls_ca__destroy(ca);
}

TEST_HARNESS_MAIN
