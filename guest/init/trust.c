// SPDX-License-Identifier: GPL-2.0
/* The host's interception CA in the guest's trust store (trust.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest/init/trust.h"

#define PEM_BEGIN "-----BEGIN CERTIFICATE-----"
#define PEM_END	  "-----END CERTIFICATE-----"

static void warn_trust(const char *what, const char *path, int err)
{
	fprintf(stderr, "kiln-init: %s %s: %s\n", what, path, strerror(err));
}

/*
 * path whole into a new buffer, at most max bytes (-EFBIG past it). The
 * buffer is max + 1 bytes of address space; only what is read is touched.
 */
static int read_whole(const char *path, size_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf;
	size_t got = 0;
	ssize_t n;
	int ret = 0;

	if (fd < 0)
		return -errno;
	buf = malloc(max + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got <= max) {
		n = read(fd, buf + got, max + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : 0;
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (!ret && got > max)
		ret = -EFBIG;
	if (ret) {
		free(buf);
		return ret;
	}
	*out = buf;
	*len = got;
	return 0;
}

/* hash_path's KILN_CA_HASH_LEN lowercase hex digits into t->hash. */
static int load_hash(struct init_trust *t, const char *hash_path)
{
	char *buf = NULL;
	size_t len = 0, i;
	int ret;

	ret = read_whole(hash_path, KILN_CA_HASH_LEN, &buf, &len);
	if (ret == -ENOENT)
		return 0;
	if (ret && ret != -EFBIG) {
		warn_trust("cannot read the host's CA hash", hash_path, -ret);
		return ret;
	}
	ret = len == KILN_CA_HASH_LEN ? 0 : -EINVAL;
	for (i = 0; !ret && i < len; i++)
		if (!buf[i] || !strchr("0123456789abcdef", buf[i]))
			ret = -EINVAL;
	if (!ret) {
		memcpy(t->hash, buf, len);
		t->hash[len] = '\0';
	} else {
		fprintf(stderr,
			"kiln-init: %s is not %u lowercase hex digits\n",
			hash_path, KILN_CA_HASH_LEN);
	}
	free(buf);
	return ret;
}

int init_trust__load(struct init_trust *t, const char *path,
		     const char *hash_path)
{
	int ret;

	t->pem = NULL;
	t->len = 0;
	t->hash[0] = '\0';
	t->optional = false;
	ret = read_whole(path, INIT_TRUST_CA_MAX, &t->pem, &t->len);
	if (ret == -ENOENT)
		return 0;
	if (ret) {
		warn_trust("cannot read the host's CA", path, -ret);
		return ret;
	}
	/* A certificate, nothing else: the host never sends a key. */
	if (!t->len || !memmem(t->pem, t->len, PEM_BEGIN, strlen(PEM_BEGIN)) ||
	    !memmem(t->pem, t->len, PEM_END, strlen(PEM_END)) ||
	    memmem(t->pem, t->len, "PRIVATE KEY", strlen("PRIVATE KEY"))) {
		fprintf(stderr, "kiln-init: %s is not a PEM certificate\n",
			path);
		init_trust__free(t);
		return -EINVAL;
	}
	ret = load_hash(t, hash_path);
	if (ret)
		init_trust__free(t);
	return ret;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* path's directory into dir (len bytes): -ENAMETOOLONG, -EINVAL. */
static int dir_of(const char *path, char *dir, size_t len)
{
	char *slash;

	if ((size_t)snprintf(dir, len, "%s", path) >= len)
		return -ENAMETOOLONG;
	slash = strrchr(dir, '/');
	if (!slash)
		return -EINVAL;
	if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	return 0;
}

static int make_dir(const char *path)
{
	int err;

	if (mkdir(path, 0755) && errno != EEXIST) {
		err = errno;
		warn_trust("cannot make", path, err);
		return -err;
	}
	return 0;
}

/*
 * An overlay over certs (the bundle's directory) whose upper layer is in
 * base (run's directory, tmpfs): the image is never written. Option
 * strings split on ',' and ':', so paths holding them are refused.
 */
static int overlay_certs(const char *certs, const char *base)
{
	char upper[256], work[256], opts[800];
	int ret;

	if ((size_t)snprintf(upper, sizeof(upper), "%s/certs.upper", base) >=
		    sizeof(upper) ||
	    (size_t)snprintf(work, sizeof(work), "%s/certs.work", base) >=
		    sizeof(work) ||
	    (size_t)snprintf(opts, sizeof(opts),
			     "lowerdir=%s,upperdir=%s,workdir=%s", certs, upper,
			     work) >= sizeof(opts)) {
		warn_trust("path too long for an overlay over", certs,
			   ENAMETOOLONG);
		return -ENAMETOOLONG;
	}
	if (strpbrk(certs, ",:\\") || strpbrk(base, ",:\\")) {
		warn_trust("cannot overlay", certs, EINVAL);
		return -EINVAL;
	}
	ret = make_dir(upper);
	if (!ret)
		ret = make_dir(work);
	if (ret)
		return ret;
	if (mount("overlay", certs, "overlay", MS_NOSUID | MS_NODEV, opts)) {
		ret = -errno;
		warn_trust("cannot overlay", certs, -ret);
		return ret;
	}
	return 0;
}

/* The CA as certs/HASH.N, N the first free: OpenSSL's -CApath entry. */
static int write_hashed(const struct init_trust *t, const char *certs)
{
	char path[320];
	unsigned int n;
	int fd = -1, ret;

	for (n = 0; n < INIT_TRUST_HASH_SUFFIXES && fd < 0; n++) {
		snprintf(path, sizeof(path), "%s/%s.%u", certs, t->hash, n);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno != EEXIST) {
			ret = -errno;
			warn_trust("cannot write", path, -ret);
			return ret;
		}
	}
	if (fd < 0) {
		fprintf(stderr,
			"kiln-init: %s/%s.0 to .%u are all taken: no room for "
			"the host's CA\n",
			certs, t->hash, INIT_TRUST_HASH_SUFFIXES - 1);
		return -ENOSPC;
	}
	ret = write_all(fd, t->pem, t->len);
	if (close(fd) && !ret)
		ret = -errno;
	if (ret)
		warn_trust("cannot write", path, -ret);
	return ret;
}

static int install_hashed(const struct init_trust *t, const char *bundle,
			  const char *run)
{
	char certs[256], base[256];
	int ret;

	if (!t->hash[0])
		return 0;
	ret = dir_of(bundle, certs, sizeof(certs));
	if (!ret)
		ret = dir_of(run, base, sizeof(base));
	if (ret) {
		warn_trust("no directory for the hashed entry of", bundle,
			   -ret);
		return ret;
	}
	ret = overlay_certs(certs, base);
	if (!ret)
		ret = write_hashed(t, certs);
	return ret;
}

int init_trust__install(const struct init_trust *t, const char *bundle,
			const char *run)
{
	char dir[256], *roots = NULL, *slash;
	struct stat st;
	size_t len = 0;
	int fd, ret;

	if (!t->pem)
		return 0;
	/*
	 * Silent: the console is the command's output, and a hook that
	 * never intercepts must not change it (network.md).
	 */
	if ((stat(bundle, &st) || !S_ISREG(st.st_mode)) && t->optional)
		return 0;
	if (stat(bundle, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr,
			"kiln-init: the host intercepts HTTPS for this VM, but "
			"the root has no trust store (%s): nothing would trust "
			"the host's CA\n",
			bundle);
		return -ENOENT;
	}
	ret = read_whole(bundle, INIT_TRUST_BUNDLE_MAX, &roots, &len);
	if (ret) {
		warn_trust("cannot read", bundle, -ret);
		return ret;
	}
	snprintf(dir, sizeof(dir), "%s", run);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) && errno != EEXIST) {
			ret = -errno;
			warn_trust("cannot make", dir, -ret);
			free(roots);
			return ret;
		}
	}
	fd = open(run, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
	} else {
		ret = write_all(fd, roots, len);
		/* A bundle not ending in a newline still parses after ours. */
		if (!ret && len && roots[len - 1] != '\n')
			ret = write_all(fd, "\n", 1);
		if (!ret)
			ret = write_all(fd, t->pem, t->len);
		if (close(fd) && !ret)
			ret = -errno;
	}
	free(roots);
	if (ret) {
		warn_trust("cannot write", run, -ret);
		return ret;
	}
	/* The overlay first: the bind over the bundle is then on top. */
	ret = install_hashed(t, bundle, run);
	if (ret)
		return ret;
	if (mount(run, bundle, NULL, MS_BIND, NULL)) {
		ret = -errno;
		warn_trust("cannot bind the trust store over", bundle, -ret);
		return ret;
	}
	return 0;
}

void init_trust__free(struct init_trust *t)
{
	free(t->pem);
	t->pem = NULL;
	t->len = 0;
}
