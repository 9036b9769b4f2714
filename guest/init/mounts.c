// SPDX-License-Identifier: GPL-2.0
/*
 * Kiln's init: mount the host's virtio-fs file systems where the host
 * said (guest/init/mounts.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest/agent/mounts.h"
#include "guest/init/mounts.h"

#define MOUNTS_FILE_MAX (64 << 10) /* written by the host: bounded */
#define MOUNTS_MAX	16

struct init_mount {
	const char *tag;
	const char *path;
	bool read_only;
};

struct init_mounts {
	char *buf;
	unsigned int nr;
	struct init_mount m[MOUNTS_MAX];
};

static char *slurp(const char *path, size_t max, size_t *len)
{
	size_t at = 0;
	ssize_t n;
	char *buf;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	buf = malloc(max + 1);
	if (!buf) {
		close(fd);
		return NULL;
	}
	while (at < max && (n = read(fd, buf + at, max - at)) > 0)
		at += n;
	close(fd);
	buf[at] = '\0';
	*len = at;
	return buf;
}

/* The next NUL-terminated field at *at, or NULL past the end. */
static const char *field(const char *buf, size_t len, size_t *at)
{
	const char *f = buf + *at;
	const char *nul;

	if (*at >= len)
		return NULL;
	nul = memchr(f, '\0', len - *at);
	if (!nul)
		return NULL;
	*at += nul - f + 1;
	return f;
}

struct init_mounts *init_mounts__load(void)
{
	struct init_mounts *m;
	size_t len, at = 0;
	const char *tag, *path, *mode;

	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->buf = slurp(KILN_MOUNTS_FILE, MOUNTS_FILE_MAX, &len);
	if (!m->buf) {
		free(m);
		return NULL;
	}
	while (m->nr < MOUNTS_MAX && (tag = field(m->buf, len, &at)) &&
	       (path = field(m->buf, len, &at)) &&
	       (mode = field(m->buf, len, &at))) {
		if (path[0] != '/') {
			fprintf(stderr,
				"kiln-init: %s: mount path \"%s\" is "
				"not absolute, skipped\n",
				KILN_MOUNTS_FILE, path);
			continue;
		}
		m->m[m->nr++] = (struct init_mount){
			.tag = tag,
			.path = path,
			.read_only = !strcmp(mode, "ro"),
		};
	}
	return m;
}

int init_mounts__mount(const struct init_mounts *m)
{
	unsigned int i;
	int ret;

	for (i = 0; m && i < m->nr; i++) {
		const struct init_mount *e = &m->m[i];

		ret = mounts__attach_one(e->tag, e->path, e->read_only);
		if (ret) {
			fprintf(stderr,
				"kiln-init: cannot mount %s (virtio-fs %s): "
				"%s\n",
				e->path, e->tag, strerror(-ret));
			return ret;
		}
	}
	return 0;
}
