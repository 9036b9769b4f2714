// SPDX-License-Identifier: GPL-2.0
/*
 * The interception CA in the guest without a static grant (issue 31,
 * item 4): which configurations give the guest the CA at boot
 * (netcfg__guest_ca: http grants, a hook, or --net-intercept-ca /
 * "net.interceptCa"), the flag's forms and its refusal without a proxy,
 * and the subject hash naming the CA's file in /etc/ssl/certs
 * (tls__subject_hash) against OpenSSL's own value.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/wolfcrypt/asn_public.h>

#include "net/netcfg.h"
#include "net/tls.h"
#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "vmm/config.h"
#include "vmm/options.h"

/*
 * Made once with
 *   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
 *	-keyout /dev/null -days 36500 \
 *	-subj "/C=DE/O=Kiln Test Org/OU=Unit Tests/CN=Mixed CASE Root"
 * and its hash taken with `openssl x509 -noout -subject_hash` (OpenSSL
 * 3.0.19): four RDNs, upper and lower case (the canonical form lowers it).
 */
#define KNOWN_PEM                                                            \
	"-----BEGIN CERTIFICATE-----\n"                                      \
	"MIICADCCAaWgAwIBAgIUezBR0XOvJwXLysx2HLAk/FUQq/AwCgYIKoZIzj0EAwIw\n" \
	"VDELMAkGA1UEBhMCREUxFjAUBgNVBAoMDUtpbG4gVGVzdCBPcmcxEzARBgNVBAsM\n" \
	"ClVuaXQgVGVzdHMxGDAWBgNVBAMMD01peGVkIENBU0UgUm9vdDAgFw0yNjEyMDYw\n" \
	"ODM0MDhaGA8yMTI2MTExMjA4MzQwOFowVDELMAkGA1UEBhMCREUxFjAUBgNVBAoM\n" \
	"DUtpbG4gVGVzdCBPcmcxEzARBgNVBAsMClVuaXQgVGVzdHMxGDAWBgNVBAMMD01p\n" \
	"eGVkIENBU0UgUm9vdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABCrGr+OrYnb9\n" \
	"ILXtDimisgkq//1G6GUPIVqCtyzJTQD/7dixLdCUj5SLwuO4lyfWWPNwjADFIYWt\n" \
	"FEoM6oi2iJqjUzBRMB0GA1UdDgQWBBSALZvoIR6NuP+8X/kVlB40lTUuODAfBgNV\n" \
	"HSMEGDAWgBSALZvoIR6NuP+8X/kVlB40lTUuODAPBgNVHRMBAf8EBTADAQH/MAoG\n" \
	"CCqGSM49BAMCA0kAMEYCIQCk91//d4D+OENfX+DDNWLGlB47/OJcBRtHoNPuZdBO\n" \
	"rgIhAIZIZVKDxz+UKV4Tskt+IbEsPBHNwJybILHt72uz3/5y\n"                 \
	"-----END CERTIFICATE-----\n"
#define KNOWN_HASH 0xba21135dU

/* The same way, -subj "/CN=two  spaces": OpenSSL folds the two spaces. */
#define SPACED_PEM                                                           \
	"-----BEGIN CERTIFICATE-----\n"                                      \
	"MIIBhDCCASmgAwIBAgIUGBwuShn+D4S7dSRmgJQpaiYfsWMwCgYIKoZIzj0EAwIw\n" \
	"FjEUMBIGA1UEAwwLdHdvICBzcGFjZXMwIBcNMjYxMjA2MDgzNDA5WhgPMjEyNjEx\n" \
	"MTIwODM0MDlaMBYxFDASBgNVBAMMC3R3byAgc3BhY2VzMFkwEwYHKoZIzj0CAQYI\n" \
	"KoZIzj0DAQcDQgAERbfszdTcvALBgtXS4bMqme9niW4mtqkPfyazb8oy8KB8dE0J\n" \
	"uzWbQXgLujnzka6/G/pauiLQ98yUVvSVxjnHTaNTMFEwHQYDVR0OBBYEFEZWwLuq\n" \
	"HGOh1RgaPC5Hn1GCLQFlMB8GA1UdIwQYMBaAFEZWwLuqHGOh1RgaPC5Hn1GCLQFl\n" \
	"MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIhAPpR/bJ/4GDOTXMj\n" \
	"jFLFY8Q1XsvMyE9CYCNJUYUKxyf3AiEApyfcpaeIK0z3CFmKWvLfNe+/p0zwrB/R\n" \
	"IVSgRBEdCIQ=\n"                                                     \
	"-----END CERTIFICATE-----\n"

static int pem_der(const char *pem, uint8_t *der, size_t len)
{
	return wc_CertPemToDer((const unsigned char *)pem, (int)strlen(pem),
			       der, (int)len, CERT_TYPE);
}

/* `vmm run --kernel /k ARGS...` with "net" from json (NULL: none). */
static int parse(struct vm_config *c, const char *json,
		 const char *const args[], char *err, size_t len)
{
	char path[] = "/tmp/kiln-guest-ca-XXXXXX";
	int fd, ret;
	FILE *f;

	config__init(c);
	err[0] = '\0';
	if (json) {
		fd = mkstemp(path);
		f = fd < 0 ? NULL : fdopen(fd, "w");
		if (!f || fputs(json, f) < 0 || fclose(f))
			abort();
		ret = options__load_json(c, path, err, len);
		unlink(path);
		if (ret)
			return ret;
	}
	if (!c->kernel_path)
		c->kernel_path = strdup("/k");
	ret = options_argv__parse(c, ARGS("run"), args);
	if (ret)
		return ret;
	return config__validate(c, err, len);
}

/* Whether a VM with this net config and policy gets the CA at boot. */
static int gets_ca(const char *net_json, const char *const args[])
{
	char err[CONFIG_ERR_LEN], doc[1024];
	struct vm_config c;
	int ret;

	snprintf(doc, sizeof(doc), "{\"net\": %s}", net_json);
	ret = parse(&c, doc, args, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "# %s: %s\n", doc, err);
		config__free(&c);
		return ret;
	}
	ret = netcfg__guest_ca(&c.net, c.net.policy);
	config__free(&c);
	return ret;
}

TEST(hook_only_policy_gets_the_ca)
{
	EXPECT_EQ(1, gets_ca("{\"mode\": \"auto\", \"policy\": {\"hook\": "
			     "{\"socket\": \"/run/h.sock\"}}}",
			     NULL));
}

TEST(http_grant_gets_the_ca)
{
	EXPECT_EQ(1, gets_ca("{\"mode\": \"auto\", \"policy\": {\"http\": "
			     "[{\"host\": \"example.com\"}]}}",
			     NULL));
}

TEST(intercept_ca_flag_gets_the_ca)
{
	/* No policy at all, and one that cannot intercept. */
	EXPECT_EQ(1,
		  gets_ca("{\"mode\": \"auto\", \"interceptCa\": true}", NULL));
	EXPECT_EQ(1,
		  gets_ca("{\"mode\": \"auto\"}", ARGS("--net-intercept-ca")));
	EXPECT_EQ(1, gets_ca("{\"mode\": \"netns\", \"netns\": \"/n\", "
			     "\"interceptCa\": true, \"policy\": {\"tcp\": "
			     "[{\"to\": \"10.1.0.0/16\"}]}}",
			     NULL));
}

TEST(neither_gets_no_ca)
{
	EXPECT_EQ(0, gets_ca("{\"mode\": \"auto\"}", NULL));
	EXPECT_EQ(0, gets_ca("{\"mode\": \"auto\", \"interceptCa\": false}",
			     NULL));
	EXPECT_EQ(0, gets_ca("{\"mode\": \"auto\", \"policy\": {\"tcp\": "
			     "[{\"to\": \"10.1.0.0/16\"}], \"dns\": "
			     "{\"resolvers\": [\"10.1.0.53\"]}}}",
			     NULL));
}

/* Without the egress proxy there is no CA: the flag is refused. */
TEST(intercept_ca_needs_a_proxy)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	EXPECT_EQ(-EINVAL, parse(&c, NULL, ARGS("--net-intercept-ca"), err,
				 sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "interceptCa: only with an egress proxy"))
	TH_LOG("%s", err);
	config__free(&c);
	EXPECT_EQ(-EINVAL,
		  parse(&c,
			"{\"net\": {\"mode\": \"tap-fd\", \"tapFd\": 9, "
			"\"interceptCa\": true}}",
			NULL, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "mode is tap-fd")) TH_LOG("%s", err);
	config__free(&c);
	/* A boolean, nothing else. */
	EXPECT_NE(0, parse(&c,
			   "{\"net\": {\"mode\": \"auto\", "
			   "\"interceptCa\": \"yes\"}}",
			   NULL, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "net.interceptCa")) TH_LOG("%s", err);
	config__free(&c);
}

TEST(subject_hash_is_openssls)
{
	uint8_t der[2048];
	uint32_t hash = 0;
	int n = pem_der(KNOWN_PEM, der, sizeof(der));

	ASSERT_LT(0, n);
	ASSERT_EQ(0, tls__subject_hash(der, (size_t)n, &hash));
	EXPECT_EQ(KNOWN_HASH, hash);
}

TEST(subject_hash_refuses_what_it_cannot_match)
{
	uint8_t der[2048];
	uint32_t hash = 0;
	int n = pem_der(SPACED_PEM, der, sizeof(der));

	ASSERT_LT(0, n);
	EXPECT_EQ(-EOPNOTSUPP, tls__subject_hash(der, (size_t)n, &hash));
	n = pem_der(KNOWN_PEM, der, sizeof(der));
	ASSERT_LT(0, n);
	EXPECT_EQ(-EINVAL, tls__subject_hash(der, (size_t)n / 2, &hash));
	EXPECT_EQ(-EINVAL, tls__subject_hash(der, 0, &hash));
	memset(der, 0x30, 64);
	EXPECT_EQ(-EINVAL, tls__subject_hash(der, 64, &hash));
}

/* A generated CA's subject ("Kiln VM CA <hex>") always has its hash. */
TEST(generated_ca_has_a_hash)
{
	struct tls_ca_params p = { 0 };
	char err[CONFIG_ERR_LEN];
	struct tls_ca *ca = NULL;
	const uint8_t *der;
	uint32_t hash = 0;
	size_t len;

	ASSERT_EQ(0, tls_ca__create(&ca, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	tls_ca__cert_der(ca, &der, &len);
	EXPECT_EQ(0, tls__subject_hash(der, len, &hash));
	EXPECT_NE(0, hash);
	tls_ca__destroy(ca);
}

TEST_HARNESS_MAIN
