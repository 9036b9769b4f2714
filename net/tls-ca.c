// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's interception CA (net/tls.h): generated for the VM or loaded
 * from the orchestrator's files, and the leaf certificates it mints, one
 * per hostname, in a bounded LRU cache. The ASN.1 is all wolfSSL's: its
 * certificate generator (struct Cert) makes and signs every certificate;
 * the one field 5.5.4's generator takes only as ready DER, the
 * subjectAltName, comes from wolfSSL's X509 layer (set_san()).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/error-ssl.h>
#include <wolfssl/openssl/evp.h>
#include <wolfssl/wolfcrypt/asn.h>
#include <wolfssl/wolfcrypt/asn_public.h>
#include <wolfssl/wolfcrypt/ecc.h>
#include <wolfssl/wolfcrypt/error-crypt.h>
#include <wolfssl/wolfcrypt/random.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "lib/list.h"
#include "net/policy.h"
#include "net/tls-internal.h"
#include "net/tls.h"

#define P256_BYTES   32U /* wc_ecc_make_key_ex()'s key size for P-256 */
#define CA_ID_BYTES  8U	 /* random bytes, in hex, in a generated CA's CN */
#define CA_CN_PREFIX "Kiln VM CA "
#define CERT_DER_MAX 4096U /* one certificate made here: ~400 to ~900 B */
#define KEY_DER_MAX  512U  /* an EC private key, DER (P-521: ~220 B) */
#define SECS_PER_DAY 86400L
/* What wc_SetKeyUsage() and wc_SetExtKeyUsage() read. */
#define CA_KEY_USAGE	   "keyCertSign,cRLSign"
#define LEAF_KEY_USAGE	   "digitalSignature"
#define LEAF_EXT_KEY_USAGE "serverAuth"

struct leaf {
	struct list_head lru; /* ca->leaves, most recently used first */
	time_t renew_at;      /* minted again from then on */
	uint8_t *der;
	size_t len;
	char host[]; /* normalized */
};

struct tls_ca {
	bool lib; /* tls__lib_get() held */
	WC_RNG rng;
	bool rng_ok;
	ecc_key key; /* the CA's: in this memory only, never written */
	bool key_ok;
	ecc_key leaf_key; /* every leaf's */
	bool leaf_key_ok;
	WOLFSSL_EVP_PKEY *leaf_pkey; /* the same, for the X509 layer */
	uint8_t leaf_key_der[KEY_DER_MAX];
	size_t leaf_key_len;
	uint8_t *cert_der;
	size_t cert_len;
	char *cert_pem;
	size_t pem_len;
	struct list_head leaves;
	unsigned int nr_leaves;
	uint64_t minted;
};

int tls__lib_get(void)
{
	return wolfSSL_Init() == WOLFSSL_SUCCESS ? 0 : -EIO;
}

void tls__lib_put(void)
{
	wolfSSL_Cleanup();
}

int tls__errno(int wolf_ret)
{
	switch (wolf_ret) {
	case 0:
		return 0;
	case MEMORY_E:
	case MEMORY_ERROR:
		return -ENOMEM;
	case BAD_FUNC_ARG:
		return -EINVAL;
	default:
		return -EIO;
	}
}

void tls_ca__leaf_key(const struct tls_ca *ca, const uint8_t **der, size_t *len)
{
	*der = ca->leaf_key_der;
	*len = ca->leaf_key_len;
}

/* ---- certificates ------------------------------------------------- */

/*
 * t as the DER Time the Cert's date fields hold (tag, length, text):
 * wolfSSL picks UTCTime or GeneralizedTime and writes the text.
 */
static int cert_date(time_t t, byte *out, int *len)
{
	WOLFSSL_ASN1_TIME at;

	memset(&at, 0, sizeof(at));
	if (!wolfSSL_ASN1_TIME_adj(&at, t, 0, 0))
		return ASN_TIME_E;
	if (at.length <= 0 || at.length + 2 > CTC_DATE_SIZE)
		return BUFFER_E;
	out[0] = (byte)at.type;
	out[1] = (byte)at.length;
	memcpy(out + 2, at.data, at.length);
	*len = at.length + 2;
	return 0;
}

/* now - TLS_BACKDATE_S .. now + days. wolfSSL's own start is now - 1 day. */
static int set_validity(Cert *cert, time_t now, unsigned int days)
{
	int ret;

	ret = cert_date(now - TLS_BACKDATE_S, cert->beforeDate,
			&cert->beforeDateSz);
	if (!ret)
		ret = cert_date(now + (time_t)days * SECS_PER_DAY,
				cert->afterDate, &cert->afterDateSz);
	return ret;
}

/*
 * cert for subject's public key, signed with issuer's key, into a new
 * DER buffer. wolfSSL draws the serial (serialSz 0: random, positive).
 */
static int make_signed(Cert *cert, ecc_key *subject, ecc_key *issuer,
		       WC_RNG *rng, uint8_t **der, size_t *len)
{
	uint8_t *buf = malloc(CERT_DER_MAX);
	int ret;

	if (!buf)
		return MEMORY_E;
	ret = wc_MakeCert_ex(cert, buf, CERT_DER_MAX, ECC_TYPE, subject, rng);
	if (ret >= 0)
		ret = wc_SignCert_ex(cert->bodySz, cert->sigType, buf,
				     CERT_DER_MAX, ECC_TYPE, issuer, rng);
	if (ret < 0) {
		free(buf);
		return ret;
	}
	*der = buf;
	*len = (size_t)ret;
	return 0;
}

/*
 * The subjectAltName dNSName host. wolfSSL 5.5.4's Cert takes SANs only
 * as DER copied from a certificate (wc_SetAltNamesBuffer()); its X509
 * layer is what encodes a name from text. So a throwaway X509 with the
 * name, signed by the leaf key (its dates make it parse), lends its
 * extension and is freed.
 */
static int set_san(struct tls_ca *ca, Cert *cert, const char *host, time_t now)
{
	WOLFSSL_ASN1_TIME before, after;
	const unsigned char *der;
	WOLFSSL_X509 *x;
	int ret = BAD_STATE_E, len;

	x = wolfSSL_X509_new();
	if (!x)
		return MEMORY_E;
	memset(&before, 0, sizeof(before));
	memset(&after, 0, sizeof(after));
	if (!wolfSSL_ASN1_TIME_adj(&before, now, 0, 0) ||
	    !wolfSSL_ASN1_TIME_adj(&after, now, 1, 0))
		goto out_free;
	if (wolfSSL_X509_set_version(x, 2) != WOLFSSL_SUCCESS ||
	    wolfSSL_X509_set_notBefore(x, &before) != WOLFSSL_SUCCESS ||
	    wolfSSL_X509_set_notAfter(x, &after) != WOLFSSL_SUCCESS ||
	    wolfSSL_X509_add_altname(x, host, ASN_DNS_TYPE) !=
		    WOLFSSL_SUCCESS ||
	    wolfSSL_X509_set_pubkey(x, ca->leaf_pkey) != WOLFSSL_SUCCESS ||
	    wolfSSL_X509_sign(x, ca->leaf_pkey, wolfSSL_EVP_sha256()) <= 0)
		goto out_free;
	der = wolfSSL_X509_get_der(x, &len);
	if (der)
		ret = wc_SetAltNamesBuffer(cert, der, len);
out_free:
	wolfSSL_X509_free(x);
	return ret;
}

static struct leaf *leaf_find(struct tls_ca *ca, const char *host)
{
	struct list_head *pos;
	struct leaf *l;

	for (pos = ca->leaves.next; pos != &ca->leaves; pos = pos->next) {
		l = list_entry(pos, struct leaf, lru);
		if (!strcmp(l->host, host))
			return l;
	}
	return NULL;
}

static void leaf_drop(struct tls_ca *ca, struct leaf *l)
{
	list_del(&l->lru);
	ca->nr_leaves--;
	free(l->der);
	free(l);
}

/* A leaf for host (normalized): CN and SAN host, serverAuth, AKI/SKI. */
static int leaf_mint(struct tls_ca *ca, const char *host, time_t now,
		     struct leaf **out)
{
	size_t n = strlen(host);
	struct leaf *l;
	Cert *cert;
	int ret;

	l = calloc(1, sizeof(*l) + n + 1);
	cert = wc_CertNew(NULL);
	if (!l || !cert) {
		ret = MEMORY_E;
		goto out_free;
	}
	memcpy(l->host, host, n + 1);
	/*
	 * The CN only when it fits (X.520 allows 64 characters, wolfSSL's
	 * field CTC_NAME_SIZE with its NUL); clients match the SAN, which
	 * is critical when the subject is left empty (RFC 5280 4.2.1.6).
	 */
	if (n < CTC_NAME_SIZE)
		memcpy(cert->subject.commonName, host, n + 1);
	else
		cert->altNamesCrit = 1;
	cert->sigType = CTC_SHA256wECDSA;
	ret = set_validity(cert, now, TLS_LEAF_DAYS);
	if (!ret)
		ret = wc_SetIssuerRaw(cert, ca->cert_der, (int)ca->cert_len);
	cert->selfSigned = 0;
	if (!ret)
		ret = set_san(ca, cert, host, now);
	if (!ret)
		ret = wc_SetKeyUsage(cert, LEAF_KEY_USAGE);
	if (!ret)
		ret = wc_SetExtKeyUsage(cert, LEAF_EXT_KEY_USAGE);
	if (!ret)
		ret = wc_SetSubjectKeyIdFromPublicKey_ex(cert, ECC_TYPE,
							 &ca->leaf_key);
	if (!ret)
		ret = wc_SetAuthKeyIdFromCert(cert, ca->cert_der,
					      (int)ca->cert_len);
	/* A loaded CA without a key identifier: its leaves name none. */
	if (ret == ASN_NO_SKID)
		ret = 0;
	if (!ret)
		ret = make_signed(cert, &ca->leaf_key, &ca->key, &ca->rng,
				  &l->der, &l->len);
	if (ret)
		goto out_free;
	l->renew_at = now + (time_t)TLS_LEAF_DAYS * SECS_PER_DAY -
		      (time_t)TLS_LEAF_RENEW_S;
	wc_CertFree(cert);
	*out = l;
	return 0;
out_free:
	if (cert)
		wc_CertFree(cert);
	free(l);
	return ret;
}

int tls_ca__leaf(struct tls_ca *ca, const char *host, const uint8_t **der,
		 size_t *len)
{
	char name[NET_HOSTNAME_MAX + 1];
	time_t now = time(NULL);
	bool wildcard;
	struct leaf *l;
	int ret;

	if (net_hostname__normalize(host, name, false, &wildcard))
		return -EINVAL;
	l = leaf_find(ca, name);
	if (l && now < l->renew_at) {
		list_del(&l->lru);
		list_add(&l->lru, &ca->leaves);
		goto out;
	}
	if (l)
		leaf_drop(ca, l);
	ret = leaf_mint(ca, name, now, &l);
	if (ret)
		return tls__errno(ret);
	if (ca->nr_leaves >= TLS_LEAF_CACHE_MAX)
		leaf_drop(ca, list_entry(ca->leaves.prev, struct leaf, lru));
	list_add(&l->lru, &ca->leaves);
	ca->nr_leaves++;
	ca->minted++;
out:
	*der = l->der;
	*len = l->len;
	return 0;
}

uint64_t tls_ca__minted(const struct tls_ca *ca)
{
	return ca->minted;
}

/* ---- the CA ----------------------------------------------------------- */

static int generate(struct tls_ca *ca, unsigned int days, char *err, size_t len)
{
	uint8_t id[CA_ID_BYTES];
	time_t now = time(NULL);
	size_t off, i;
	Cert *cert;
	int ret;

	ret = wc_ecc_init(&ca->key);
	if (ret)
		goto out_err;
	ca->key_ok = true;
	ret = wc_ecc_make_key_ex(&ca->rng, P256_BYTES, &ca->key, ECC_SECP256R1);
	if (!ret)
		ret = wc_RNG_GenerateBlock(&ca->rng, id, sizeof(id));
	if (ret)
		goto out_err;
	cert = wc_CertNew(NULL);
	if (!cert) {
		ret = MEMORY_E;
		goto out_err;
	}
	off = (size_t)snprintf(cert->subject.commonName, CTC_NAME_SIZE, "%s",
			       CA_CN_PREFIX);
	for (i = 0; i < sizeof(id); i++, off += 2)
		snprintf(cert->subject.commonName + off, CTC_NAME_SIZE - off,
			 "%02x", id[i]);
	/* Leaves only, no intermediates: pathLenConstraint 0. */
	cert->isCA = 1;
	cert->pathLen = 0;
	cert->pathLenSet = 1;
	cert->selfSigned = 1;
	cert->sigType = CTC_SHA256wECDSA;
	ret = set_validity(cert, now, days);
	if (!ret)
		ret = wc_SetKeyUsage(cert, CA_KEY_USAGE);
	if (!ret)
		ret = wc_SetSubjectKeyIdFromPublicKey_ex(cert, ECC_TYPE,
							 &ca->key);
	if (!ret)
		ret = wc_SetAuthKeyIdFromPublicKey_ex(cert, ECC_TYPE, &ca->key);
	if (!ret)
		ret = make_signed(cert, &ca->key, &ca->key, &ca->rng,
				  &ca->cert_der, &ca->cert_len);
	wc_CertFree(cert);
	if (!ret)
		return 0;
out_err:
	return errf(err, len, tls__errno(ret), "TLS CA: generating it: %s",
		    wc_GetErrorString(ret));
}

/*
 * path whole into a new buffer. With secret, the file must be a regular
 * file group and others have no access to (checked on the open file).
 */
static int read_file(const char *path, bool secret, char **out, size_t *n,
		     char *err, size_t len)
{
	struct stat st;
	ssize_t r = 0;
	size_t got = 0;
	char *buf;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st)) {
		ret = errf(err, len, -errno, "%s: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = errf(err, len, -EINVAL, "%s: not a regular file", path);
		goto out_close;
	}
	if (secret && (st.st_mode & (S_IRWXG | S_IRWXO))) {
		ret = errf(err, len, -EPERM,
			   "%s: a CA key with mode %04o: group or others may "
			   "get at it (chmod 0600)",
			   path, (unsigned int)(st.st_mode & 07777));
		goto out_close;
	}
	if (st.st_size <= 0 || st.st_size > (off_t)TLS_PEM_MAX) {
		ret = errf(err, len, -EINVAL, "%s: %lld bytes (1 to %u)", path,
			   (long long)st.st_size, TLS_PEM_MAX);
		goto out_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		ret = errf(err, len, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got != (size_t)st.st_size) {
		ret = errf(err, len, r < 0 ? -errno : -EIO, "%s: short read",
			   path);
		explicit_bzero(buf, (size_t)st.st_size);
		free(buf);
		goto out_close;
	}
	buf[got] = '\0';
	*out = buf;
	*n = got;
	ret = 0;
out_close:
	close(fd);
	return ret;
}

static int load_key(struct tls_ca *ca, const char *path, char *err, size_t len)
{
	word32 idx = 0, dlen;
	char *pem;
	uint8_t *der;
	size_t n;
	int ret;

	ret = read_file(path, true, &pem, &n, err, len);
	if (ret)
		return ret;
	der = malloc(n);
	if (!der) {
		ret = errf(err, len, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out_pem;
	}
	ret = wc_KeyPemToDer((const unsigned char *)pem, (int)n, der, (int)n,
			     NULL);
	if (ret < 0) {
		ret = errf(err, len, -EINVAL,
			   "%s: not an unencrypted PEM private key (%s)", path,
			   wc_GetErrorString(ret));
		goto out_der;
	}
	dlen = (word32)ret;
	ret = wc_ecc_init(&ca->key);
	if (ret) {
		ret = errf(err, len, tls__errno(ret), "%s: %s", path,
			   wc_GetErrorString(ret));
		goto out_der;
	}
	ca->key_ok = true;
	/*
	 * SEC 1 or PKCS #8, which wolfSSL unwraps itself (the curve from
	 * its algorithm). The public key, which either may leave out, is
	 * made from the private one: what check_cert() compares.
	 */
	ret = wc_EccPrivateKeyDecode(der, &idx, &ca->key, dlen);
	if (!ret)
		ret = wc_ecc_make_pub_ex(&ca->key, NULL, &ca->rng);
	if (ret)
		ret = errf(err, len, -EINVAL, "%s: not an EC private key (%s)",
			   path, wc_GetErrorString(ret));
out_der:
	explicit_bzero(der, n);
	free(der);
out_pem:
	explicit_bzero(pem, n);
	free(pem);
	return ret;
}

/*
 * The loaded certificate: a CA, in date, for the loaded key (its
 * SubjectPublicKeyInfo is the key's; wolfSSL_X509_check_private_key()
 * in 5.5.4 passes any EC key).
 */
static int check_cert(struct tls_ca *ca, const char *path, char *err,
		      size_t len)
{
	uint8_t ours[KEY_DER_MAX], theirs[KEY_DER_MAX];
	int ret, n, m = sizeof(theirs);
	WOLFSSL_X509 *x;

	x = wolfSSL_X509_load_certificate_buffer(
		ca->cert_der, (int)ca->cert_len, WOLFSSL_FILETYPE_ASN1);
	if (!x)
		return errf(err, len, -EINVAL, "%s: not an X.509 certificate",
			    path);
	if (wolfSSL_X509_get_isCA(x) != 1) {
		ret = errf(err, len, -EINVAL,
			   "%s: not a CA certificate (basicConstraints "
			   "CA:TRUE)",
			   path);
		goto out_free;
	}
	if (wolfSSL_X509_cmp_current_time(wolfSSL_X509_get_notAfter(x)) <= 0) {
		ret = errf(err, len, -EINVAL, "%s: expired", path);
		goto out_free;
	}
	n = wc_EccPublicKeyToDer(&ca->key, ours, sizeof(ours), 1);
	if (n <= 0 ||
	    wolfSSL_X509_get_pubkey_buffer(x, theirs, &m) != WOLFSSL_SUCCESS ||
	    n != m || memcmp(ours, theirs, (size_t)n)) {
		ret = errf(err, len, -EINVAL,
			   "%s: not the certificate of the CA key given", path);
		goto out_free;
	}
	ret = 0;
out_free:
	wolfSSL_X509_free(x);
	return ret;
}

static int load(struct tls_ca *ca, const struct tls_ca_params *p, char *err,
		size_t len)
{
	char *pem;
	size_t n;
	int ret;

	ret = load_key(ca, p->key_path, err, len);
	if (ret)
		return ret;
	ret = read_file(p->cert_path, false, &pem, &n, err, len);
	if (ret)
		return ret;
	ca->cert_der = malloc(n);
	if (!ca->cert_der) {
		free(pem);
		return errf(err, len, -ENOMEM, "%s: %s", p->cert_path,
			    strerror(ENOMEM));
	}
	ret = wc_CertPemToDer((const unsigned char *)pem, (int)n, ca->cert_der,
			      (int)n, CERT_TYPE);
	free(pem);
	if (ret < 0)
		return errf(err, len, -EINVAL, "%s: not a PEM certificate (%s)",
			    p->cert_path, wc_GetErrorString(ret));
	ca->cert_len = (size_t)ret;
	return check_cert(ca, p->cert_path, err, len);
}

/* The leaf key, as DER for wolfSSL_use_PrivateKey_buffer() and an EVP. */
static int make_leaf_key(struct tls_ca *ca, char *err, size_t len)
{
	const unsigned char *p = ca->leaf_key_der;
	int ret;

	ret = wc_ecc_init(&ca->leaf_key);
	if (ret)
		goto out_err;
	ca->leaf_key_ok = true;
	ret = wc_ecc_make_key_ex(&ca->rng, P256_BYTES, &ca->leaf_key,
				 ECC_SECP256R1);
	if (ret)
		goto out_err;
	ret = wc_EccKeyToDer(&ca->leaf_key, ca->leaf_key_der,
			     sizeof(ca->leaf_key_der));
	if (ret < 0)
		goto out_err;
	ca->leaf_key_len = (size_t)ret;
	ca->leaf_pkey = wolfSSL_d2i_PrivateKey(EVP_PKEY_EC, NULL, &p, ret);
	if (!ca->leaf_pkey) {
		ret = BAD_STATE_E;
		goto out_err;
	}
	return 0;
out_err:
	return errf(err, len, tls__errno(ret), "TLS CA: the leaf key: %s",
		    wc_GetErrorString(ret));
}

static int make_pem(struct tls_ca *ca, char *err, size_t len)
{
	/* Base64 (4 per 3 bytes), a newline per 64, the two armour lines. */
	size_t max = ca->cert_len * 2 + 128;
	int ret;

	ca->cert_pem = malloc(max + 1);
	if (!ca->cert_pem)
		return errf(err, len, -ENOMEM, "TLS CA: %s", strerror(ENOMEM));
	ret = wc_DerToPem(ca->cert_der, (word32)ca->cert_len,
			  (byte *)ca->cert_pem, (word32)max, CERT_TYPE);
	if (ret < 0)
		return errf(err, len, tls__errno(ret), "TLS CA: PEM: %s",
			    wc_GetErrorString(ret));
	ca->cert_pem[ret] = '\0';
	ca->pem_len = (size_t)ret;
	return 0;
}

/*
 * The CA certificate to path, TLS_CA_CERT_MODE whatever the umask: a
 * temporary file beside it, renamed over it when complete.
 */
static int write_cert(const struct tls_ca *ca, const char *path, char *err,
		      size_t len)
{
	char tmp[PATH_MAX];
	size_t done = 0;
	ssize_t w;
	int fd, ret = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return errf(err, len, -ENAMETOOLONG, "%s: %s", path,
			    strerror(ENAMETOOLONG));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		  TLS_CA_CERT_MODE);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", tmp, strerror(errno));
	if (fchmod(fd, TLS_CA_CERT_MODE))
		ret = -errno;
	while (!ret && done < ca->pem_len) {
		w = write(fd, ca->cert_pem + done, ca->pem_len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			ret = -errno;
		else
			done += (size_t)w;
	}
	if (close(fd) && !ret)
		ret = -errno;
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret) {
		unlink(tmp);
		return errf(err, len, ret, "%s: %s", path, strerror(-ret));
	}
	return 0;
}

/*
 * The keys' generation (and a loaded key's check) left wolfSSL's
 * fixed-point cache of the calling thread holding the P-256 generator's
 * precomputed multiples (FP_ECC, Debian's build: 256 points of ~3.2 KiB,
 * ~810 KiB of heap). This thread (the vmm's main one) does no more ECC
 * after start-up; the proxy's thread, which signs the leaves, builds its
 * own at its first signature. Freed: the whole cache of this thread.
 */
static void thread_cache_free(void)
{
#ifdef FP_ECC
	wc_ecc_fp_free();
#endif
}

int tls_ca__create(struct tls_ca **out, const struct tls_ca_params *p,
		   char *err, size_t len)
{
	struct tls_ca *ca;
	int ret;

	*out = NULL;
	if (!p->key_path != !p->cert_path)
		return errf(err, len, -EINVAL,
			    "TLS CA: a key file needs its certificate file "
			    "and the other way round");
	if (p->days && (p->days <= TLS_LEAF_DAYS || p->days > TLS_CA_MAX_DAYS))
		return errf(err, len, -EINVAL,
			    "TLS CA: %u days (more than a leaf's %u, at most "
			    "%u)",
			    p->days, TLS_LEAF_DAYS, TLS_CA_MAX_DAYS);
	ca = calloc(1, sizeof(*ca));
	if (!ca)
		return errf(err, len, -ENOMEM, "TLS CA: %s", strerror(ENOMEM));
	list_init(&ca->leaves);
	ret = tls__lib_get();
	if (ret) {
		errf(err, len, ret, "TLS CA: wolfSSL_Init failed");
		goto out_destroy;
	}
	ca->lib = true;
	ret = wc_InitRng(&ca->rng);
	if (ret) {
		ret = errf(err, len, tls__errno(ret), "TLS CA: RNG: %s",
			   wc_GetErrorString(ret));
		goto out_destroy;
	}
	ca->rng_ok = true;
	if (p->key_path)
		ret = load(ca, p, err, len);
	else
		ret = generate(ca, p->days ? p->days : TLS_CA_DAYS, err, len);
	if (!ret)
		ret = make_leaf_key(ca, err, len);
	if (!ret)
		ret = make_pem(ca, err, len);
	if (!ret && p->cert_out)
		ret = write_cert(ca, p->cert_out, err, len);
	if (ret)
		goto out_destroy;
	thread_cache_free();
	*out = ca;
	return 0;
out_destroy:
	thread_cache_free();
	tls_ca__destroy(ca);
	return ret;
}

void tls_ca__destroy(struct tls_ca *ca)
{
	struct leaf *l, *tmp;

	if (!ca)
		return;
	list_for_each_entry_safe(l, tmp, &ca->leaves, struct leaf, lru)
		leaf_drop(ca, l);
	wolfSSL_EVP_PKEY_free(ca->leaf_pkey);
	explicit_bzero(ca->leaf_key_der, sizeof(ca->leaf_key_der));
	if (ca->leaf_key_ok)
		wc_ecc_free(&ca->leaf_key);
	if (ca->key_ok)
		wc_ecc_free(&ca->key);
	if (ca->rng_ok)
		wc_FreeRng(&ca->rng);
	free(ca->cert_der);
	free(ca->cert_pem);
	if (ca->lib)
		tls__lib_put();
	free(ca);
}

void tls_ca__cert_pem(const struct tls_ca *ca, const char **pem, size_t *len)
{
	*pem = ca->cert_pem;
	*len = ca->pem_len;
}

void tls_ca__cert_der(const struct tls_ca *ca, const uint8_t **der, size_t *len)
{
	*der = ca->cert_der;
	*len = ca->cert_len;
}

/*
 * A value OpenSSL's canonical form leaves as it is, but for case:
 * printable ASCII, no space at either end, no two spaces in a row.
 * wolfSSL's canonical encoding (5.5.4) lowercases and re-tags as
 * UTF8String as OpenSSL's does, but keeps whitespace as it is where
 * OpenSSL trims and folds it; its hash is OpenSSL's only for these.
 */
static bool canon_as_openssl(const unsigned char *s, int n)
{
	int i;

	if (n <= 0 || s[0] == ' ' || s[n - 1] == ' ')
		return n == 0;
	for (i = 0; i < n; i++) {
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
		if (s[i] == ' ' && s[i + 1] == ' ')
			return false;
	}
	return true;
}

int tls__subject_hash(const uint8_t *der, size_t len, uint32_t *hash)
{
	const unsigned char *p = der;
	WOLFSSL_X509_NAME *name;
	WOLFSSL_X509 *x;
	int i, nr, ret = 0;

	if (!len || len > INT_MAX)
		return -EINVAL;
	x = wolfSSL_d2i_X509(NULL, &p, (int)len);
	if (!x)
		return -EINVAL;
	name = wolfSSL_X509_get_subject_name(x);
	nr = name ? wolfSSL_X509_NAME_entry_count(name) : 0;
	for (i = 0; i < nr && !ret; i++) {
		WOLFSSL_X509_NAME_ENTRY *e =
			wolfSSL_X509_NAME_get_entry(name, i);
		WOLFSSL_ASN1_STRING *v =
			e ? wolfSSL_X509_NAME_ENTRY_get_data(e) : NULL;

		if (!v || !canon_as_openssl(wolfSSL_ASN1_STRING_data(v),
					    wolfSSL_ASN1_STRING_length(v)))
			ret = -EOPNOTSUPP;
	}
	/* X509_NAME_hash: SHA-1's first four bytes, little-endian. */
	if (!ret)
		*hash = (uint32_t)wolfSSL_X509_subject_name_hash(x);
	wolfSSL_X509_free(x);
	return ret;
}
