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

int init_trust__load(struct init_trust *t, const char *path)
{
	int ret;

	t->pem = NULL;
	t->len = 0;
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
	return 0;
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

int init_trust__install(const struct init_trust *t, const char *bundle,
			const char *run)
{
	char dir[256], *roots = NULL, *slash;
	struct stat st;
	size_t len = 0;
	int fd, ret;

	if (!t->pem)
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
