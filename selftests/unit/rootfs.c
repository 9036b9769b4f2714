// SPDX-License-Identifier: GPL-2.0
/*
 * rootfs: image descriptors (every malformed field named in the error,
 * moving aliases refused), verification of the base file against its size
 * and digest, and the verification cache (a hit skips the hash; a touched
 * or rewritten file is hashed again). Also the rootfs part of the config:
 * sizes with suffixes and the mode-dependent defaults. No KVM needed.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <wolfssl/options.h>
#include <wolfssl/wolfcrypt/sha256.h>

#include "lib/compiler.h"
#include "lib/parse.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "snapshot/verified.h"
#include "vmm/config.h"
#include "vmm/rootfs.h"

#define IMG_SIZE (3 * 4096)

FIXTURE(rootfs)
{
	char dir[64];
	char cache[96];
	char image[96];
	char desc[96];
	char digest[ROOTFS_DIGEST_LEN + 1]; /* of image */
	char err[CONFIG_ERR_LEN];
};

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
		abort();
	close(fd);
}

static void digest_of(const void *buf, size_t len, char *out)
{
	unsigned char md[WC_SHA256_DIGEST_SIZE];
	wc_Sha256 sha;
	size_t i;

	if (wc_InitSha256(&sha) || wc_Sha256Update(&sha, buf, len) ||
	    wc_Sha256Final(&sha, md))
		abort();
	wc_Sha256Free(&sha);
	strcpy(out, "sha256:");
	for (i = 0; i < sizeof(md); i++)
		sprintf(out + 7 + 2 * i, "%02x", md[i]);
}

static void fill(unsigned char *buf, size_t len, uint64_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = prng__next(&seed);
}

/* A descriptor for the fixture's image, with one field's JSON replaced. */
static void write_desc(FIXTURE_DATA(rootfs) * self, const char *json)
{
	write_file(self->desc, json, strlen(json));
}

static void write_good_desc(FIXTURE_DATA(rootfs) * self)
{
	char doc[1024];

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"test-image-1\", \"path\": \"%s\", "
		 "\"format\": \"raw\", \"architecture\": \"x86_64\", "
		 "\"digest\": \"%s\", \"sizeBytes\": %d}",
		 self->image, self->digest, IMG_SIZE);
	write_desc(self, doc);
}

FIXTURE_SETUP(rootfs)
{
	unsigned char buf[IMG_SIZE];

	strcpy(self->dir, "/tmp/kiln-rootfs-XXXXXX");
	ASSERT_TRUE(mkdtemp(self->dir) != NULL);
	snprintf(self->cache, 96, "%s/cache", self->dir);
	snprintf(self->image, 96, "%s/image.raw", self->dir);
	snprintf(self->desc, 96, "%s/image.json", self->dir);
	fill(buf, sizeof(buf), 42);
	write_file(self->image, buf, sizeof(buf));
	digest_of(buf, sizeof(buf), self->digest);
	write_good_desc(self);
	ASSERT_EQ(0, setenv("KILN_CACHE", self->cache, 1));
}

FIXTURE_TEARDOWN(rootfs)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

/* Load the fixture's descriptor; on failure err holds the message. */
static int load(FIXTURE_DATA(rootfs) * self, struct rootfs_image *img)
{
	self->err[0] = '\0';
	return rootfs__load(img, self->desc, self->err, sizeof(self->err));
}

TEST_F(rootfs, load_good)
{
	struct rootfs_image img;

	ASSERT_EQ(0, load(self, &img)) TH_LOG("%s", self->err);
	EXPECT_STREQ("test-image-1", img.name);
	EXPECT_STREQ(self->image, img.path);
	EXPECT_STREQ("raw", img.format);
	EXPECT_STREQ("x86_64", img.architecture);
	EXPECT_STREQ(self->digest, img.digest);
	EXPECT_EQ(IMG_SIZE, img.size_bytes);
	rootfs__free(&img);
	rootfs__free(&img); /* twice is fine: fields are cleared */
}

/* A relative path is relative to the descriptor's directory; amd64 is x86_64. */
TEST_F(rootfs, relative_path_and_amd64)
{
	struct rootfs_image img;
	char doc[1024];

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"img\", \"path\": \"image.raw\", "
		 "\"format\": \"raw\", \"architecture\": \"amd64\", "
		 "\"digest\": \"%s\", \"sizeBytes\": %d}",
		 self->digest, IMG_SIZE);
	write_desc(self, doc);
	ASSERT_EQ(0, load(self, &img)) TH_LOG("%s", self->err);
	EXPECT_STREQ(self->image, img.path);
	EXPECT_STREQ("x86_64", img.architecture);
	EXPECT_EQ(0, rootfs__verify(&img, self->err, sizeof(self->err)))
	TH_LOG("%s", self->err);
	rootfs__free(&img);
}

static const char good_digest[] =
	"sha256:"
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* Each bad descriptor and what its one-line error must say. */
static const struct {
	const char *json;
	const char *needle;
} bad_descriptors[] = {
	{ "[]", "top level must be an object" },
	{ "{\"name\": ", "line 1" },
	{ "{\"name\": \"a\", \"name\": \"b\"}", "duplicate" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096, \"size\": 1}",
	  "unknown key \"size\"" },
	{ "{\"path\": \"/x\", \"format\": \"raw\", \"architecture\": "
	  "\"x86_64\", \"digest\": \"D\", \"sizeBytes\": 4096}",
	  "name: missing" },
	{ "{\"name\": \"a\", \"format\": \"raw\", \"architecture\": "
	  "\"x86_64\", \"digest\": \"D\", \"sizeBytes\": 4096}",
	  "path: missing" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"architecture\": "
	  "\"x86_64\", \"digest\": \"D\", \"sizeBytes\": 4096}",
	  "format: missing" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"digest\": \"D\", \"sizeBytes\": 4096}",
	  "architecture: missing" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"sizeBytes\": 4096}",
	  "digest: missing" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\"}",
	  "sizeBytes: missing" },
	{ "{\"name\": 1, \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "name: must be a string" },
	{ "{\"name\": \"a\", \"path\": \"\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "path: must be a non-empty string" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"vmdk\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "format \"vmdk\": must be \"raw\" or \"qcow2\"" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"aarch64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "architecture \"aarch64\": this host runs only \"x86_64\"" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"X64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "architecture \"X64\"" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"sha256:abc\", "
	  "\"sizeBytes\": 4096}",
	  "digest \"sha256:abc\": must be" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": "
	  "\"sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789"
	  "abcdef\", \"sizeBytes\": 4096}",
	  "lowercase hex" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": "
	  "\"md5:0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
	  "cdef\", \"sizeBytes\": 4096}",
	  "digest \"md5:" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": 0}",
	  "sizeBytes: must be a positive integer" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "-4096}",
	  "sizeBytes: must be a positive integer" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "\"4096\"}",
	  "sizeBytes: must be a positive integer" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096.0}",
	  "sizeBytes: must be a positive integer" },
	{ "{\"name\": \"a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "5000}",
	  "sizeBytes: 5000 is not a multiple of 4096" },
	{ "{\"name\": \"-a\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "name \"-a\": must start with a letter or digit" },
	{ "{\"name\": \"a b\", \"path\": \"/x\", \"format\": \"raw\", "
	  "\"architecture\": \"x86_64\", \"digest\": \"D\", \"sizeBytes\": "
	  "4096}",
	  "name \"a b\": only letters" },
};

/* Replace the placeholder "D" with a well-formed digest. */
static void expand_digest(const char *in, char *out, size_t len)
{
	const char *d = strstr(in, "\"D\"");

	if (!d) {
		snprintf(out, len, "%s", in);
		return;
	}
	snprintf(out, len, "%.*s\"%s\"%s", (int)(d - in), in, good_digest,
		 d + 3);
}

TEST_F(rootfs, descriptor_errors)
{
	struct rootfs_image img;
	char doc[1024];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad_descriptors); i++) {
		expand_digest(bad_descriptors[i].json, doc, sizeof(doc));
		write_desc(self, doc);
		EXPECT_NE(0, load(self, &img)) TH_LOG("accepted: %s", doc);
		EXPECT_TRUE(strstr(self->err, bad_descriptors[i].needle) !=
			    NULL)
		TH_LOG("want '%s' in: %s", bad_descriptors[i].needle,
		       self->err);
		/* Every message starts with the descriptor's path. */
		EXPECT_EQ(0, strncmp(self->err, self->desc, strlen(self->desc)))
		TH_LOG("%s", self->err);
		EXPECT_TRUE(strchr(self->err, '\n') == NULL);
		rootfs__free(&img);
	}
}

TEST_F(rootfs, descriptor_file_errors)
{
	struct rootfs_image img;
	char path[128];

	snprintf(path, sizeof(path), "%s/nope.json", self->dir);
	EXPECT_EQ(-ENOENT,
		  rootfs__load(&img, path, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "nope.json: No such file") != NULL)
	TH_LOG("%s", self->err);
	rootfs__free(&img);
	EXPECT_EQ(-EISDIR,
		  rootfs__load(&img, self->dir, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "is a directory") != NULL);
	rootfs__free(&img);
	snprintf(path, sizeof(path), "%s/fifo", self->dir);
	ASSERT_EQ(0, mkfifo(path, 0644));
	EXPECT_EQ(-EINVAL,
		  rootfs__load(&img, path, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "not a regular file") != NULL);
	rootfs__free(&img);
}

static int load_named(FIXTURE_DATA(rootfs) * self, const char *name)
{
	struct rootfs_image img;
	char doc[1024];
	int ret;

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"%s\", \"path\": \"/x\", \"format\": \"raw\", "
		 "\"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 4096}",
		 name, good_digest);
	write_desc(self, doc);
	ret = load(self, &img);
	rootfs__free(&img);
	return ret;
}

TEST_F(rootfs, moving_aliases)
{
	static const char *const refused[] = {
		"latest",	  "debian:latest",     "debian-12-agent:stable",
		"Current",	  "registry/img:edge", "agent-nightly",
		"debian-testing", "debian_sid",	       "img@HEAD",
		"node:lts",	  "ubuntu-LTS",
	};
	static const char *const accepted[] = {
		"debian-12-agent", "debian:12.8",
		"agent-20250101",  "latestness",
		"alts-2",	   "my.registry/img:1.2.3+build4",
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(refused); i++) {
		EXPECT_EQ(-EINVAL, load_named(self, refused[i]))
		TH_LOG("accepted alias %s", refused[i]);
		EXPECT_TRUE(strstr(self->err, "is a moving alias") != NULL)
		TH_LOG("%s", self->err);
		EXPECT_TRUE(strstr(self->err, "name \"") != NULL);
	}
	for (i = 0; i < ARRAY_SIZE(accepted); i++)
		EXPECT_EQ(0, load_named(self, accepted[i]))
	TH_LOG("%s", self->err);
}

/* The descriptor with "facts": FACTS (JSON text) loaded into img. */
static int load_facts(FIXTURE_DATA(rootfs) * self, const char *facts,
		      struct rootfs_image *img)
{
	size_t n = strlen(facts) + 512;
	char *doc = malloc(n);
	int ret;

	if (!doc)
		abort();
	snprintf(doc, n,
		 "{\"name\": \"alpine:3.23-agent\", \"path\": \"/x\", "
		 "\"format\": \"raw\", \"architecture\": \"x64\", "
		 "\"digest\": \"%s\", \"sizeBytes\": 4096, \"facts\": %s}",
		 good_digest, facts);
	write_desc(self, doc);
	free(doc);
	ret = load(self, img);
	return ret;
}

/* x64 (Node's process.arch) and amd64 are x86_64; others are refused. */
TEST_F(rootfs, architecture_aliases)
{
	struct rootfs_image img;

	ASSERT_EQ(0, load_facts(self, "[]", &img)) TH_LOG("%s", self->err);
	EXPECT_STREQ("x86_64", img.architecture);
	rootfs__free(&img);
}

TEST_F(rootfs, facts_good)
{
	struct rootfs_image img;
	json_t *f;

	ASSERT_EQ(0, load_facts(self,
				"[{\"source\": \"config\", \"topic\": "
				"\"rootfs-image\", \"relation\": \"is\", "
				"\"value\": \"alpine:3.23-agent\"}, "
				"{\"value\": \"/bin/sh\", \"relation\": "
				"\"exists\", \"topic\": \"command\", "
				"\"source\": \"config\"}]",
				&img))
	TH_LOG("%s", self->err);
	ASSERT_EQ(2, json_array_size(img.facts));
	f = json_array_get(img.facts, 1);
	EXPECT_STREQ("config", json_string_value(json_object_get(f, "source")));
	EXPECT_STREQ("command", json_string_value(json_object_get(f, "topic")));
	EXPECT_STREQ("exists",
		     json_string_value(json_object_get(f, "relation")));
	EXPECT_STREQ("/bin/sh", json_string_value(json_object_get(f, "value")));
	rootfs__free(&img);
	/* None given: none, and the descriptor is valid without them. */
	write_good_desc(self);
	ASSERT_EQ(0, load(self, &img)) TH_LOG("%s", self->err);
	EXPECT_TRUE(img.facts == NULL);
	rootfs__free(&img);
}

/* ROOTFS_FACTS_MAX facts are fine; one more is refused, counted. */
TEST_F(rootfs, facts_at_most_256)
{
	static const char one[] = "{\"source\": \"config\", \"topic\": "
				  "\"command\", \"relation\": \"exists\", "
				  "\"value\": \"sh\"}";
	size_t n = (ROOTFS_FACTS_MAX + 1) * (sizeof(one) + 1) + 4;
	struct rootfs_image img;
	char *facts = malloc(n);
	unsigned int i;
	size_t at;

	ASSERT_TRUE(facts != NULL);
	for (int extra = 0; extra < 2; extra++) {
		at = snprintf(facts, n, "[");
		for (i = 0; i < ROOTFS_FACTS_MAX + extra; i++)
			at += snprintf(facts + at, n - at, "%s%s", i ? "," : "",
				       one);
		snprintf(facts + at, n - at, "]");
		if (!extra) {
			EXPECT_EQ(0, load_facts(self, facts, &img))
			TH_LOG("%s", self->err);
			EXPECT_EQ(ROOTFS_FACTS_MAX, json_array_size(img.facts));
		} else {
			EXPECT_EQ(-EINVAL, load_facts(self, facts, &img));
			EXPECT_TRUE(strstr(self->err,
					   "facts: 257 entries, at most 256") !=
				    NULL)
			TH_LOG("%s", self->err);
		}
		rootfs__free(&img);
	}
	free(facts);
}

TEST_F(rootfs, facts_errors)
{
	static const struct {
		const char *facts, *needle;
	} bad[] = {
		{ "{}", "facts: must be an array" },
		{ "[\"rootfs-image is a\"]", "facts[0]: must be an object" },
		{ "[{\"source\": \"config\", \"topic\": \"\", \"relation\": "
		  "\"is\", \"value\": \"a\"}]",
		  "facts[0].topic: must be a non-empty string of printable "
		  "ASCII" },
		{ "[{\"source\": \"config\", \"topic\": \"t\", \"relation\": "
		  "\"\", \"value\": \"a\"}]",
		  "facts[0].relation: must be a non-empty" },
		{ "[{\"source\": \"config\", \"topic\": \"t\", \"relation\": "
		  "\"is\", \"value\": \"\"}]",
		  "facts[0].value: must be a non-empty" },
		{ "[{\"source\": \"config\", \"topic\": \"t\", \"relation\": "
		  "\"is\", \"value\": \"a\"}, {\"source\": \"config\", "
		  "\"topic\": \"t\", \"relation\": \"is\", \"value\": "
		  "\"caf\\u00e9\"}]",
		  "facts[1].value: must be a non-empty string of printable "
		  "ASCII" },
		{ "[{\"source\": \"config\", \"topic\": \"t\\nx\", "
		  "\"relation\": \"is\", \"value\": \"a\"}]",
		  "facts[0].topic: must be a non-empty string of printable" },
		{ "[{\"source\": \"config\", \"topic\": \"t\", \"relation\": "
		  "\"is\", \"value\": \"a\\u007fb\"}]",
		  "facts[0].value: must be a non-empty string of printable" },
		{ "[{\"source\": \"guest\", \"topic\": \"t\", \"relation\": "
		  "\"is\", \"value\": \"a\"}]",
		  "facts[0].source \"guest\": must be \"config\"" },
		{ "[{\"topic\": \"t\", \"relation\": \"is\", \"value\": "
		  "\"a\"}]",
		  "facts[0].source: missing" },
		{ "[{\"source\": \"config\", \"topic\": \"t\", \"relation\": "
		  "\"is\", \"value\": 3}]",
		  "facts[0].value: must be a non-empty string" },
		{ "[{\"source\": \"config\", \"topic\": \"t\", \"relation\": "
		  "\"is\", \"value\": \"a\", \"since\": \"2025\"}]",
		  "facts[0]: unknown key \"since\"" },
	};
	struct rootfs_image img;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		EXPECT_EQ(-EINVAL, load_facts(self, bad[i].facts, &img))
		TH_LOG("accepted: %s", bad[i].facts);
		EXPECT_TRUE(strstr(self->err, bad[i].needle) != NULL)
		TH_LOG("want '%s' in: %s", bad[i].needle, self->err);
		EXPECT_EQ(0, strncmp(self->err, self->desc, strlen(self->desc)))
		TH_LOG("%s", self->err);
		EXPECT_TRUE(strchr(self->err, '\n') == NULL);
		rootfs__free(&img);
	}
}

/* Verify with debug messages captured; returns the verify result. */
static int verify_logged(FIXTURE_DATA(rootfs) * self, bool full, char *log,
			 size_t loglen)
{
	struct stderr_capture cap = { .saved = -1 };
	struct rootfs_image img;
	int ret;

	if (load(self, &img))
		abort();
	log__set_verbose(true);
	if (stderr_capture__begin(&cap))
		abort();
	self->err[0] = '\0';
	ret = full ? rootfs__verify_full(&img, self->err, sizeof(self->err)) :
		     rootfs__verify(&img, self->err, sizeof(self->err));
	stderr_capture__end(&cap, log, loglen);
	log__set_verbose(false);
	rootfs__free(&img);
	return ret;
}

/*
 * Timestamps come from a coarse clock: wait until the image is old enough
 * to be cached (vmm/rootfs.c: 100 ms, 2 s without nanoseconds).
 */
static void let_image_settle(FIXTURE_DATA(rootfs) * self)
{
	struct stat st;

	if (stat(self->image, &st) || !st.st_ctim.tv_nsec)
		usleep(2100 * 1000);
	else
		usleep(250 * 1000);
}

TEST_F(rootfs, verify_good)
{
	char log[4096];

	let_image_settle(self);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "hashed 12288 bytes") != NULL)
	TH_LOG("%s", log);
}

TEST_F(rootfs, size_mismatch)
{
	char doc[1024];
	struct rootfs_image img;

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"img\", \"path\": \"%s\", \"format\": \"raw\", "
		 "\"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 16384}",
		 self->image, self->digest);
	write_desc(self, doc);
	ASSERT_EQ(0, load(self, &img));
	EXPECT_EQ(-EINVAL, rootfs__verify(&img, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "sizeBytes") != NULL)
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(self->err, "16384") != NULL);
	EXPECT_TRUE(strstr(self->err, "12288") != NULL);
	rootfs__free(&img);
}

TEST_F(rootfs, digest_mismatch)
{
	char doc[1024];
	struct rootfs_image img;

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"img\", \"path\": \"%s\", \"format\": \"raw\", "
		 "\"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": %d}",
		 self->image, good_digest, IMG_SIZE);
	write_desc(self, doc);
	ASSERT_EQ(0, load(self, &img));
	EXPECT_EQ(-EINVAL, rootfs__verify(&img, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, ": digest: ") != NULL)
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(self->err, good_digest) != NULL)
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(self->err, self->digest) != NULL)
	TH_LOG("%s", self->err);
	rootfs__free(&img);
}

TEST_F(rootfs, image_not_usable)
{
	struct rootfs_image img;
	char doc[1024];

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"img\", \"path\": \"%s\", \"format\": \"raw\", "
		 "\"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 4096}",
		 self->dir, good_digest);
	write_desc(self, doc);
	ASSERT_EQ(0, load(self, &img));
	EXPECT_NE(0, rootfs__verify(&img, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "not a regular file") != NULL)
	TH_LOG("%s", self->err);
	rootfs__free(&img);

	snprintf(doc, sizeof(doc),
		 "{\"name\": \"img\", \"path\": \"missing.raw\", \"format\": "
		 "\"raw\", \"architecture\": \"x86_64\", \"digest\": \"%s\", "
		 "\"sizeBytes\": 4096}",
		 good_digest);
	write_desc(self, doc);
	ASSERT_EQ(0, load(self, &img));
	EXPECT_EQ(-ENOENT, rootfs__verify(&img, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "missing.raw\": No such file") != NULL)
	TH_LOG("%s", self->err);
	rootfs__free(&img);
}

/* The verification cache's entries (file names), counted. */
static int cache_entries(FIXTURE_DATA(rootfs) * self, char *first, size_t len)
{
	char path[128];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/verified", self->cache);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (!n++ && first &&
		    strlen(path) + strlen(e->d_name) + 2 <= len)
			sprintf(first, "%s/%s", path, e->d_name);
	}
	closedir(d);
	return n;
}

TEST_F(rootfs, cache_skips_hash)
{
	unsigned char buf[IMG_SIZE];
	char log[4096];

	let_image_settle(self);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "hashed") != NULL) TH_LOG("%s", log);
	ASSERT_EQ(1, cache_entries(self, NULL, 0));

	/* Same file, same times, same digest: no hash. */
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "vouched for by the verification cache") !=
		    NULL)
	TH_LOG("%s", log);
	EXPECT_TRUE(strstr(log, "hashed") == NULL) TH_LOG("%s", log);

	/* Full verification hashes whatever the cache says. */
	ASSERT_EQ(0, verify_logged(self, true, log, sizeof(log)));
	EXPECT_TRUE(strstr(log, "hashed") != NULL) TH_LOG("%s", log);

	/* touch: new times, so the entry no longer matches: hashed again. */
	ASSERT_EQ(0, utimensat(AT_FDCWD, self->image, NULL, 0));
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)));
	EXPECT_TRUE(strstr(log, "hashed") != NULL) TH_LOG("%s", log);
	EXPECT_TRUE(strstr(log, "cache") == NULL ||
		    strstr(log, "too recently") != NULL)
	TH_LOG("%s", log);

	/* Same size, other content: the cache must not vouch for it. */
	fill(buf, sizeof(buf), 7);
	write_file(self->image, buf, sizeof(buf));
	EXPECT_EQ(-EINVAL, verify_logged(self, false, log, sizeof(log)));
	EXPECT_TRUE(strstr(self->err, ": digest: ") != NULL)
	TH_LOG("%s", self->err);
}

/*
 * A memo (what a snapshot's identity uses for the kernel and initrd):
 * the digest noted for a file comes back for the file in the same state
 * and kind only; an entry others may write, or a file touched since, is
 * not believed.
 */
TEST_F(rootfs, memo_recalls_a_digest_until_the_file_changes)
{
	char got[80], entry[256];
	struct stat st;
	int fd;

	let_image_settle(self);
	fd = open(self->image, O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fstat(fd, &st));
	EXPECT_FALSE(verified__recall(&st, "k", got, sizeof(got)));
	verified__note(fd, &st, "k", "0123abcd", "the image");
	ASSERT_EQ(1, cache_entries(self, entry, sizeof(entry)));
	ASSERT_TRUE(verified__recall(&st, "k", got, sizeof(got)));
	EXPECT_STREQ("0123abcd", got);
	EXPECT_FALSE(verified__recall(&st, "other", got, sizeof(got)));
	/* Too small a buffer for the digest: no recall. */
	EXPECT_FALSE(verified__recall(&st, "k", got, 4));

	ASSERT_EQ(0, chmod(entry, 0666));
	EXPECT_FALSE(verified__recall(&st, "k", got, sizeof(got)));
	ASSERT_EQ(0, chmod(entry, 0600));
	ASSERT_TRUE(verified__recall(&st, "k", got, sizeof(got)));

	ASSERT_EQ(0, utimensat(AT_FDCWD, self->image, NULL, 0));
	ASSERT_EQ(0, fstat(fd, &st));
	EXPECT_FALSE(verified__recall(&st, "k", got, sizeof(got)));
	/* Changed this moment: not noted (racily clean). */
	verified__note(fd, &st, "k", "0123abcd", "the image");
	EXPECT_FALSE(verified__recall(&st, "k", got, sizeof(got)));
	close(fd);
}

/* A file changed within the last clock tick or two is not cached. */
TEST_F(rootfs, fresh_file_not_cached)
{
	char log[4096];

	ASSERT_EQ(0, utimensat(AT_FDCWD, self->image, NULL, 0));
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)));
	EXPECT_TRUE(strstr(log, "too recently") != NULL) TH_LOG("%s", log);
	EXPECT_EQ(0, cache_entries(self, NULL, 0));
}

/* An entry that does not hold exactly the key is ignored and rewritten. */
static void cache_plant(const char *dir, const char *name, time_t mtime)
{
	char path[256];
	struct timespec t[2] = { { .tv_sec = mtime }, { .tv_sec = mtime } };
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "x", 1) != 1 || futimens(fd, t) || close(fd))
		abort();
}

/*
 * Entries for file states long gone are not kept for ever: a store into
 * a cache over its bound removes the oldest down to VERIFIED_ENTRIES_KEEP,
 * and a dead writer's old temporary file, but keeps what is not an entry,
 * a young temporary file, and the entry just made.
 */
TEST_F(rootfs, cache_is_bounded)
{
	char dir[128], name[256], log[4096];
	unsigned int i, planted = VERIFIED_ENTRIES_MAX + 9;

	snprintf(dir, sizeof(dir), "%s/verified", self->cache);
	ASSERT_EQ(0, mkdir(self->cache, 0700));
	ASSERT_EQ(0, mkdir(dir, 0700));
	for (i = 0; i < planted; i++) {
		snprintf(name, sizeof(name), "%064x", i);
		cache_plant(dir, name, 1000000 + i);
	}
	cache_plant(dir, ".tmp-old", 1000);
	cache_plant(dir, ".tmp-young", time(NULL));
	cache_plant(dir, "README", 1000);

	let_image_settle(self);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "hashed") != NULL) TH_LOG("%s", log);
	/* The entries kept, and README. */
	EXPECT_EQ(VERIFIED_ENTRIES_KEEP + 1, cache_entries(self, NULL, 0));
	snprintf(name, sizeof(name), "%s/%064x", dir, 0U);
	EXPECT_NE(0, access(name, F_OK)) TH_LOG("the oldest entry stayed");
	snprintf(name, sizeof(name), "%s/%064x", dir, planted - 1);
	EXPECT_EQ(0, access(name, F_OK)) TH_LOG("the newest planted went");
	snprintf(name, sizeof(name), "%s/.tmp-old", dir);
	EXPECT_NE(0, access(name, F_OK)) TH_LOG("a dead writer's file stayed");
	snprintf(name, sizeof(name), "%s/.tmp-young", dir);
	EXPECT_EQ(0, access(name, F_OK)) TH_LOG("a live writer's file went");
	snprintf(name, sizeof(name), "%s/README", dir);
	EXPECT_EQ(0, access(name, F_OK)) TH_LOG("not an entry, but removed");

	/* The entry just made is among those kept. */
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "vouched for by the verification cache") !=
		    NULL)
	TH_LOG("%s", log);
}

TEST_F(rootfs, cache_entry_tampered)
{
	char entry[256], log[4096];

	let_image_settle(self);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)));
	ASSERT_EQ(1, cache_entries(self, entry, sizeof(entry)));
	write_file(entry, "yes\n", 4);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)));
	EXPECT_TRUE(strstr(log, "hashed") != NULL) TH_LOG("%s", log);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)));
	EXPECT_TRUE(strstr(log, "vouched for") != NULL) TH_LOG("%s", log);

	/* Writable by others: not trusted either. */
	ASSERT_EQ(0, chmod(entry, 0666));
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)));
	EXPECT_TRUE(strstr(log, "hashed") != NULL) TH_LOG("%s", log);
}

/* Failing to write the cache costs a warning, never the boot. */
TEST_F(rootfs, cache_unwritable)
{
	char log[4096], file[128];

	snprintf(file, sizeof(file), "%s/plainfile", self->dir);
	write_file(file, "x", 1);
	ASSERT_EQ(0, setenv("KILN_CACHE", file, 1));
	let_image_settle(self);
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "warning: verification cache") != NULL)
	TH_LOG("%s", log);

	/* No cache at all: fine too. */
	ASSERT_EQ(0, unsetenv("KILN_CACHE"));
	ASSERT_EQ(0, unsetenv("HOME"));
	ASSERT_EQ(0, verify_logged(self, false, log, sizeof(log)))
	TH_LOG("%s", self->err);
	EXPECT_TRUE(strstr(log, "no verification cache") != NULL)
	TH_LOG("%s", log);
}

TEST_F(rootfs, state_path_checks)
{
	struct rootfs_image img;
	char link[128];

	ASSERT_EQ(0, load(self, &img));
	EXPECT_EQ(-EINVAL,
		  rootfs__check_state_path(&img, self->image, self->err,
					   sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "is the base image") != NULL)
	TH_LOG("%s", self->err);
	snprintf(link, sizeof(link), "%s/alias.raw", self->dir);
	ASSERT_EQ(0, symlink(self->image, link));
	EXPECT_EQ(-EINVAL, rootfs__check_state_path(&img, link, self->err,
						    sizeof(self->err)));
	EXPECT_EQ(-EINVAL, rootfs__check_state_path(&img, self->desc, self->err,
						    sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "is the image descriptor") != NULL);
	snprintf(link, sizeof(link), "%s/state", self->dir);
	EXPECT_EQ(0, rootfs__check_state_path(&img, link, self->err,
					      sizeof(self->err)));
	rootfs__free(&img);
}

TEST(parse_size)
{
	uint64_t v;

	ASSERT_EQ(0, parse__size("0", INT64_MAX, &v));
	EXPECT_EQ(0, v);
	ASSERT_EQ(0, parse__size("4096", INT64_MAX, &v));
	EXPECT_EQ(4096, v);
	ASSERT_EQ(0, parse__size("64M", INT64_MAX, &v));
	EXPECT_EQ(64ULL << 20, v);
	ASSERT_EQ(0, parse__size("64MiB", INT64_MAX, &v));
	EXPECT_EQ(64ULL << 20, v);
	ASSERT_EQ(0, parse__size("3K", INT64_MAX, &v));
	EXPECT_EQ(3072, v);
	ASSERT_EQ(0, parse__size("2GiB", INT64_MAX, &v));
	EXPECT_EQ(2ULL << 30, v);
	ASSERT_EQ(0, parse__size("1T", INT64_MAX, &v));
	EXPECT_EQ(1ULL << 40, v);
	EXPECT_EQ(-EINVAL, parse__size("", INT64_MAX, &v));
	EXPECT_EQ(-EINVAL, parse__size("-1", INT64_MAX, &v));
	EXPECT_EQ(-EINVAL, parse__size("1.5G", INT64_MAX, &v));
	EXPECT_EQ(-EINVAL, parse__size("12X", INT64_MAX, &v));
	EXPECT_EQ(-EINVAL, parse__size("12 M", INT64_MAX, &v));
	EXPECT_EQ(-EINVAL, parse__size("12MB", INT64_MAX, &v));
	EXPECT_EQ(-EINVAL, parse__size("M", INT64_MAX, &v));
	EXPECT_EQ(-ERANGE, parse__size("99999999999999999999", INT64_MAX, &v));
	EXPECT_EQ(-ERANGE, parse__size("8388608T", INT64_MAX, &v));
	EXPECT_EQ(-ERANGE, parse__size("2K", 2047, &v));
}

/* The mode-dependent defaults config__validate fills in. */
TEST_F(rootfs, config_defaults)
{
	struct vm_config c;
	char state[128];

	config__init(&c);
	c.kernel_path = strdup("/k");
	c.rootfs.descriptor = strdup(self->desc);
	ASSERT_EQ(0, config__validate(&c, self->err, sizeof(self->err)))
	TH_LOG("%s", self->err);
	EXPECT_EQ(ROOTFS_EPHEMERAL, c.rootfs.mode);
	EXPECT_EQ(64ULL << 20, c.rootfs.max_dirty_bytes);

	snprintf(state, sizeof(state), "%s/state", self->dir);
	c.rootfs.mode = ROOTFS_PERSISTENT;
	c.rootfs.state_path = strdup(state);
	ASSERT_EQ(0, config__validate(&c, self->err, sizeof(self->err)))
	TH_LOG("%s", self->err);
	EXPECT_EQ(0, c.rootfs.max_dirty_bytes);

	c.rootfs.max_dirty_set = true;
	c.rootfs.max_dirty_bytes = 1 << 20;
	ASSERT_EQ(0, config__validate(&c, self->err, sizeof(self->err)));
	EXPECT_EQ(1 << 20, c.rootfs.max_dirty_bytes);

	free(c.rootfs.state_path);
	c.rootfs.state_path = strdup(self->image);
	EXPECT_EQ(-EINVAL, config__validate(&c, self->err, sizeof(self->err)));
	EXPECT_TRUE(strstr(self->err, "is the base image") != NULL)
	TH_LOG("%s", self->err);
	config__free(&c);
}

TEST_HARNESS_MAIN
