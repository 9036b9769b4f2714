// SPDX-License-Identifier: GPL-2.0
/*
 * TLS interception's CA (vmm/tls-ca.c).
 *
 * The CA: generated (a self-signed P-256 CA certificate, in PEM), or
 * loaded from files an "orchestrator" (this test, with wolfCrypt) wrote,
 * a key others may read refused. Leaves: checked with wolfSSL's own
 * verifier and host matching, cached, refused for addresses and
 * malformed names. No network.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/openssl/x509v3.h>
#include <wolfssl/wolfcrypt/asn.h>
#include <wolfssl/wolfcrypt/asn_public.h>
#include <wolfssl/wolfcrypt/ecc.h>
#include <wolfssl/wolfcrypt/random.h>

#include "lib/compiler.h"
#include "vmm/policy.h"
#include "vmm/tls-internal.h"
#include "vmm/tls.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define HOST	      "api.example.test"
#define OTHER_HOST    "other.example.test"
#define ERR_LEN	      256
#define PATH_LEN      256
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

TEST_HARNESS_MAIN
