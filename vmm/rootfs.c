// SPDX-License-Identifier: GPL-2.0
/*
 * Root image descriptors: parse one (jansson), then check the base file it
 * names (raw, or qcow2: devices/block/qcow2.h) against its size and
 * SHA-256 digest (wolfSSL) before the guest
 * boots. Hashing a few hundred MiB is slow on a nested or emulated host, so
 * a good hash is remembered in a small verification cache keyed by the
 * file's identity and timestamps (Documentation/rootfs.md).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devices/block/qcow2.h"
#include "lib/compiler.h"
#include "lib/errf.h"
#include "lib/sha256.h"
#include "snapshot/verified.h"
#include "vmm/rootfs.h"

#define DESCRIPTOR_MAX (64U << 10) /* bytes: a descriptor is ~300 */
#define HASH_CHUNK     (1U << 20)  /* bytes per read while hashing */

void rootfs__free(struct rootfs_image *img)
{
	free(img->name);
	free(img->path);
	free(img->format);
	free(img->architecture);
	free(img->digest);
	free(img->descriptor);
	json_decref(img->facts);
	memset(img, 0, sizeof(*img));
}

/* ---- the descriptor ------------------------------------------------ */

/*
 * Words that name whatever is newest rather than one build. A name is
 * refused when any of its words (runs of letters and digits, so the tag
 * after ':' counts too) is one of these, whatever the case.
 */
static const char *const moving_aliases[] = {
	"latest", "stable",  "current", "edge",	    "nightly", "head",
	"newest", "rolling", "testing", "unstable", "sid",     "lts",
};

static const char *moving_word(const char *name)
{
	const char *p = name, *start;
	size_t i, n;

	while (*p) {
		while (*p && !isalnum((unsigned char)*p))
			p++;
		start = p;
		while (isalnum((unsigned char)*p))
			p++;
		n = p - start;
		for (i = 0; n && i < ARRAY_SIZE(moving_aliases); i++)
			if (strlen(moving_aliases[i]) == n &&
			    !strncasecmp(start, moving_aliases[i], n))
				return moving_aliases[i];
	}
	return NULL;
}

static bool name_char_ok(char c)
{
	return isalnum((unsigned char)c) || strchr("._+:/@-", c);
}

static int check_name(const char *desc, const char *name, char *err, size_t len)
{
	const char *alias;
	size_t i, n = strlen(name);

	if (!n || n > ROOTFS_NAME_MAX)
		return errf(err, len, -EINVAL,
			    "%s: name: must be 1 to %u characters", desc,
			    ROOTFS_NAME_MAX);
	if (!isalnum((unsigned char)name[0]))
		return errf(
			err, len, -EINVAL,
			"%s: name \"%s\": must start with a letter or digit",
			desc, name);
	for (i = 0; i < n; i++)
		if (!name_char_ok(name[i]))
			return errf(err, len, -EINVAL,
				    "%s: name \"%s\": only letters, digits and "
				    "._+:/@- are allowed",
				    desc, name);
	alias = moving_word(name);
	if (alias)
		return errf(err, len, -EINVAL,
			    "%s: name \"%s\": \"%s\" is a moving alias; name "
			    "one fixed image",
			    desc, name, alias);
	return 0;
}

int rootfs__check_name(const char *desc, const char *name, char *err,
		       size_t len)
{
	return check_name(desc, name, err, len);
}

static bool digest_ok(const char *d)
{
	const size_t plen = strlen(ROOTFS_DIGEST_PREFIX);
	size_t i;

	if (strlen(d) != ROOTFS_DIGEST_LEN ||
	    strncmp(d, ROOTFS_DIGEST_PREFIX, plen))
		return false;
	for (i = plen; d[i]; i++)
		if (!isdigit((unsigned char)d[i]) && (d[i] < 'a' || d[i] > 'f'))
			return false;
	return true;
}

/* A relative path is relative to the descriptor's directory. */
static char *resolve_path(const char *desc, const char *path)
{
	const char *slash = strrchr(desc, '/');
	char *out;
	int dirlen;

	if (path[0] == '/' || !slash)
		return strdup(path);
	dirlen = slash == desc ? 1 : (int)(slash - desc);
	if (asprintf(&out, "%.*s/%s", dirlen, desc, path) < 0)
		return NULL;
	/* "/" + "/x" would give "//x": harmless, but keep it tidy. */
	if (dirlen == 1 && desc[0] == '/')
		memmove(out + 1, out + 2, strlen(out + 2) + 1);
	return out;
}

enum field {
	F_NAME,
	F_PATH,
	F_FORMAT,
	F_ARCH,
	F_DIGEST,
	F_SIZE,
	F_FACTS, /* optional: the first one after the required ones */
	NR_FIELDS,
};

static const char *const field_names[NR_FIELDS] = {
	[F_NAME] = "name",     [F_PATH] = "path",
	[F_FORMAT] = "format", [F_ARCH] = "architecture",
	[F_DIGEST] = "digest", [F_SIZE] = "sizeBytes",
	[F_FACTS] = "facts",
};

/* What else a descriptor may call x86_64: Debian's name, and Node's. */
static const char *const x86_64_aliases[] = { "amd64", "x64" };

/* The keys of a fact, in the order vm.facts gives them. */
static const char *const fact_keys[] = { "source", "topic", "relation",
					 "value" };

static bool printable_ascii(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

/*
 * facts[i]: an object of exactly fact_keys, each a non-empty printable
 * ASCII string, source "config"; appended to out as a new object.
 */
static int get_fact(const char *desc, size_t i, json_t *f, json_t *out,
		    char *err, size_t len)
{
	json_t *copy, *v;
	const char *key;
	size_t k;

	if (!json_is_object(f))
		return errf(err, len, -EINVAL,
			    "%s: facts[%zu]: must be an object {\"source\", "
			    "\"topic\", \"relation\", \"value\"}",
			    desc, i);
	json_object_foreach(f, key, v)
	{
		for (k = 0; k < ARRAY_SIZE(fact_keys); k++)
			if (!strcmp(key, fact_keys[k]))
				break;
		if (k == ARRAY_SIZE(fact_keys))
			return errf(err, len, -EINVAL,
				    "%s: facts[%zu]: unknown key \"%.64s\"",
				    desc, i, key);
	}
	copy = json_object();
	if (!copy)
		return -ENOMEM;
	for (k = 0; k < ARRAY_SIZE(fact_keys); k++) {
		v = json_object_get(f, fact_keys[k]);
		if (!v) {
			json_decref(copy);
			return errf(err, len, -EINVAL,
				    "%s: facts[%zu].%s: missing", desc, i,
				    fact_keys[k]);
		}
		if (!json_is_string(v) || !json_string_length(v) ||
		    !printable_ascii(json_string_value(v),
				     json_string_length(v))) {
			json_decref(copy);
			return errf(err, len, -EINVAL,
				    "%s: facts[%zu].%s: must be a non-empty "
				    "string of printable ASCII",
				    desc, i, fact_keys[k]);
		}
		if (json_object_set(copy, fact_keys[k], v)) {
			json_decref(copy);
			return -ENOMEM;
		}
	}
	if (strcmp(json_string_value(json_object_get(copy, "source")),
		   "config")) {
		json_decref(copy);
		return errf(err, len, -EINVAL,
			    "%s: facts[%zu].source \"%.64s\": must be "
			    "\"config\" (guest facts come from the guest)",
			    desc, i,
			    json_string_value(json_object_get(f, "source")));
	}
	return json_array_append_new(out, copy) ? -ENOMEM : 0;
}

static int get_facts(const char *desc, json_t *v, json_t **out, char *err,
		     size_t len)
{
	size_t i, n;
	json_t *f;
	int ret;

	if (!json_is_array(v))
		return errf(err, len, -EINVAL,
			    "%s: facts: must be an array of facts", desc);
	n = json_array_size(v);
	if (n > ROOTFS_FACTS_MAX)
		return errf(err, len, -EINVAL,
			    "%s: facts: %zu entries, at most %u", desc, n,
			    ROOTFS_FACTS_MAX);
	*out = json_array();
	if (!*out)
		return -ENOMEM;
	json_array_foreach(v, i, f)
	{
		ret = get_fact(desc, i, f, *out, err, len);
		if (ret)
			return ret;
	}
	return 0;
}

static int get_str(const char *desc, json_t *v, enum field f, char **out,
		   char *err, size_t len)
{
	const char *s;

	if (!json_is_string(v))
		return errf(err, len, -EINVAL, "%s: %s: must be a string", desc,
			    field_names[f]);
	s = json_string_value(v);
	if (!*s || strlen(s) != json_string_length(v))
		return errf(err, len, -EINVAL,
			    "%s: %s: must be a non-empty string without NUL",
			    desc, field_names[f]);
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

static int get_size(const char *desc, json_t *v, uint64_t *out, char *err,
		    size_t len)
{
	json_int_t n;

	if (!json_is_integer(v) || json_integer_value(v) <= 0)
		return errf(err, len, -EINVAL,
			    "%s: sizeBytes: must be a positive integer", desc);
	n = json_integer_value(v);
	if (n % ROOTFS_BLOCK_SIZE)
		return errf(err, len, -EINVAL,
			    "%s: sizeBytes: %lld is not a multiple of %u (the "
			    "disk block size)",
			    desc, (long long)n, ROOTFS_BLOCK_SIZE);
	*out = n;
	return 0;
}

static int parse_fields(struct rootfs_image *img, json_t *root, char *err,
			size_t len)
{
	const char *desc = img->descriptor;
	json_t *v[NR_FIELDS] = { NULL };
	char *path = NULL;
	const char *key;
	json_t *val;
	int f, ret;

	json_object_foreach(root, key, val)
	{
		for (f = 0; f < NR_FIELDS; f++)
			if (!strcmp(key, field_names[f]))
				break;
		if (f == NR_FIELDS)
			return errf(err, len, -EINVAL, "%s: unknown key \"%s\"",
				    desc, key);
		v[f] = val;
	}
	for (f = 0; f < F_FACTS; f++)
		if (!v[f])
			return errf(err, len, -EINVAL,
				    "%s: %s: missing (every field is required)",
				    desc, field_names[f]);

	ret = get_str(desc, v[F_NAME], F_NAME, &img->name, err, len);
	if (!ret)
		ret = check_name(desc, img->name, err, len);
	if (!ret)
		ret = get_str(desc, v[F_FORMAT], F_FORMAT, &img->format, err,
			      len);
	if (!ret && strcmp(img->format, "raw") && strcmp(img->format, "qcow2"))
		ret = errf(err, len, -EINVAL,
			   "%s: format \"%.64s\": must be \"raw\" or "
			   "\"qcow2\"",
			   desc, img->format);
	if (!ret)
		img->qcow2 = !strcmp(img->format, "qcow2");
	if (!ret)
		ret = get_str(desc, v[F_ARCH], F_ARCH, &img->architecture, err,
			      len);
	for (f = 0; !ret && f < (int)ARRAY_SIZE(x86_64_aliases); f++) {
		if (strcmp(img->architecture, x86_64_aliases[f]))
			continue;
		free(img->architecture);
		img->architecture = strdup("x86_64");
		if (!img->architecture)
			ret = -ENOMEM;
	}
	if (!ret && strcmp(img->architecture, "x86_64"))
		ret = errf(err, len, -EINVAL,
			   "%s: architecture \"%.64s\": this host runs only "
			   "\"x86_64\" guests (also written \"amd64\" or "
			   "\"x64\")",
			   desc, img->architecture);
	if (!ret)
		ret = get_str(desc, v[F_DIGEST], F_DIGEST, &img->digest, err,
			      len);
	if (!ret && !digest_ok(img->digest))
		ret = errf(err, len, -EINVAL,
			   "%s: digest \"%.80s\": must be \"sha256:\" and 64 "
			   "lowercase hex digits",
			   desc, img->digest);
	if (!ret)
		ret = get_size(desc, v[F_SIZE], &img->size_bytes, err, len);
	if (!ret && v[F_FACTS])
		ret = get_facts(desc, v[F_FACTS], &img->facts, err, len);
	if (!ret)
		ret = get_str(desc, v[F_PATH], F_PATH, &path, err, len);
	if (!ret) {
		img->path = resolve_path(desc, path);
		if (!img->path)
			ret = -ENOMEM;
	}
	free(path);
	if (ret == -ENOMEM)
		errf(err, len, ret, "%s: %s", desc, strerror(-ret));
	return ret;
}

int rootfs__load(struct rootfs_image *img, const char *descriptor_path,
		 char *err, size_t len)
{
	const char *desc = descriptor_path;
	json_error_t jerr;
	struct stat st;
	json_t *root;
	int fd, ret;

	memset(img, 0, sizeof(*img));
	img->descriptor = strdup(desc);
	if (!img->descriptor)
		return errf(err, len, -ENOMEM, "%s: %s", desc,
			    strerror(ENOMEM));
	/* O_NONBLOCK: a FIFO must be refused, not wait for a writer. */
	fd = open(desc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", desc, strerror(errno));
	if (fstat(fd, &st)) {
		ret = errf(err, len, -errno, "%s: %s", desc, strerror(errno));
		goto out_close;
	}
	if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
		ret = errf(err, len, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
			   "%s: %s", desc,
			   S_ISDIR(st.st_mode) ? "is a directory" :
						 "not a regular file");
		goto out_close;
	}
	if (st.st_size > DESCRIPTOR_MAX) {
		ret = errf(err, len, -EFBIG,
			   "%s: %lld bytes: too large for an image descriptor",
			   desc, (long long)st.st_size);
		goto out_close;
	}
	root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		ret = errf(err, len, -EINVAL, "%s: line %d column %d: %s", desc,
			   jerr.line, jerr.column, jerr.text);
		goto out_close;
	}
	if (json_is_object(root))
		ret = parse_fields(img, root, err, len);
	else
		ret = errf(err, len, -EINVAL, "%s: top level must be an object",
			   desc);
	json_decref(root);
out_close:
	close(fd);
	return ret;
}

/* ---- hashing --------------------------------------------------------- */

/*
 * Hash the first size bytes of fd into "sha256:<hex>". The file was
 * checked to be exactly that size; one that shrinks meanwhile is an error.
 */
static int hash_file(const struct rootfs_image *img, int fd, uint64_t size,
		     char out[ROOTFS_DIGEST_LEN + 1], char *err, size_t len)
{
	char hex[SHA256_HEX_LEN + 1];
	struct sha256 sha;
	uint64_t off = 0;
	ssize_t n;
	void *buf;
	int ret;

	buf = malloc(HASH_CHUNK);
	if (!buf)
		return errf(err, len, -ENOMEM, "%s: hashing: %s", img->path,
			    strerror(ENOMEM));
	ret = sha256__init(&sha);
	if (ret) {
		free(buf);
		return errf(err, len, ret, "%s: sha256: %s", img->path,
			    strerror(-ret));
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	while (off < size) {
		size_t want = size - off < HASH_CHUNK ? size - off : HASH_CHUNK;

		n = pread(fd, buf, want, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = errf(err, len, -errno, "%s: reading: %s",
				   img->path, strerror(errno));
			goto out_free;
		}
		if (n == 0) {
			ret = errf(err, len, -EIO,
				   "%s: ended at %llu bytes while being hashed",
				   img->path, (unsigned long long)off);
			goto out_free;
		}
		ret = sha256__update(&sha, buf, n);
		if (ret) {
			ret = errf(err, len, ret, "%s: sha256: %s", img->path,
				   strerror(-ret));
			goto out_free;
		}
		off += n;
	}
	free(buf);
	ret = sha256__final_hex(&sha, hex);
	if (ret)
		return errf(err, len, ret, "%s: sha256: %s", img->path,
			    strerror(-ret));
	snprintf(out, ROOTFS_DIGEST_LEN + 1, "%s%s", ROOTFS_DIGEST_PREFIX, hex);
	return 0;
out_free:
	sha256__free(&sha);
	free(buf);
	return ret;
}

/* ---- verification ---------------------------------------------------- */

/*
 * sizeBytes is the disk the guest sees: a raw file's size, or a qcow2
 * image's virtual size (its header, checked whole here so that a bad
 * image is refused before anything is built).
 */
static int check_size(const struct rootfs_image *img, const char *desc, int fd,
		      const struct stat *st, char *err, size_t len)
{
	struct qcow2 *q;
	uint64_t vsize;
	int ret;

	if (!img->qcow2) {
		if ((uint64_t)st->st_size == img->size_bytes)
			return 0;
		return errf(err, len, -EINVAL,
			    "%s: sizeBytes: the descriptor says %llu, \"%s\" "
			    "has %lld bytes",
			    desc, (unsigned long long)img->size_bytes,
			    img->path, (long long)st->st_size);
	}
	ret = qcow2__open(&q, fd, img->path, err, len);
	if (ret)
		return ret;
	vsize = qcow2__virtual_size(q);
	qcow2__close(q);
	if (vsize == img->size_bytes)
		return 0;
	return errf(err, len, -EINVAL,
		    "%s: sizeBytes: the descriptor says %llu, the qcow2 image "
		    "\"%s\" has a virtual size of %llu bytes",
		    desc, (unsigned long long)img->size_bytes, img->path,
		    (unsigned long long)vsize);
}

static int verify(const struct rootfs_image *img, bool use_cache, char *err,
		  size_t len)
{
	const char *desc = img->descriptor ? img->descriptor : img->path;
	char actual[ROOTFS_DIGEST_LEN + 1];
	struct verified v = { .keylen = 0 };
	struct stat st;
	int fd, ret;

	/* O_NONBLOCK: a FIFO must be refused, not wait for a writer. */
	fd = open(img->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return errf(err, len, -errno, "%s: path \"%s\": %s", desc,
			    img->path, strerror(errno));
	if (fstat(fd, &st)) {
		ret = errf(err, len, -errno, "%s: path \"%s\": %s", desc,
			   img->path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = errf(err, len, -EINVAL,
			   "%s: path \"%s\": not a regular file", desc,
			   img->path);
		goto out;
	}
	ret = check_size(img, desc, fd, &st, err, len);
	if (ret)
		goto out;

	if (use_cache && verified__lookup(&v, &st, img->digest)) {
		pr_debug("%s: digest vouched for by the verification cache "
			 "(%s)",
			 img->path, v.entry);
		ret = 0;
		goto out;
	}

	ret = hash_file(img, fd, (uint64_t)st.st_size, actual, err, len);
	if (ret)
		goto out;
	if (strcmp(actual, img->digest)) {
		ret = errf(err, len, -EINVAL,
			   "%s: digest: expected %s, \"%s\" has %s", desc,
			   img->digest, img->path, actual);
		goto out;
	}
	pr_debug("%s: hashed %llu bytes, digest matches", img->path,
		 (unsigned long long)st.st_size);
	if (!use_cache)
		verified__lookup(&v, &st, img->digest);
	if (verified__remember(&v, fd, &st, img->path))
		ret = errf(err, len, -EBUSY,
			   "%s: path \"%s\": changed while being verified",
			   desc, img->path);
out:
	verified__release(&v);
	close(fd);
	return ret;
}

int rootfs__verify(const struct rootfs_image *img, char *err, size_t len)
{
	return verify(img, true, err, len);
}

int rootfs__verify_full(const struct rootfs_image *img, char *err, size_t len)
{
	return verify(img, false, err, len);
}

int rootfs__check_state_path(const struct rootfs_image *img,
			     const char *state_path, char *err, size_t len)
{
	const char *const other[] = { img->path, img->descriptor };
	const char *const what[] = { "the base image", "the image descriptor" };
	struct stat s, o;
	bool have_state = !stat(state_path, &s);
	size_t i;

	for (i = 0; i < ARRAY_SIZE(other); i++) {
		if (!other[i])
			continue;
		if (!strcmp(state_path, other[i]) ||
		    (have_state && !stat(other[i], &o) &&
		     s.st_dev == o.st_dev && s.st_ino == o.st_ino))
			return errf(err, len, -EINVAL,
				    "rootfs state file \"%s\": is %s (\"%s\"), "
				    "which is never written",
				    state_path, what[i], other[i]);
	}
	return 0;
}
