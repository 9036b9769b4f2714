// SPDX-License-Identifier: GPL-2.0
/* The host's virtio-fs mounts in the guest (see mounts.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "guest/agent/mounts.h"
#include "proto/agent.h"
#include "proto/mounts.h"

#define MOUNT_DIR_MODE 0755

/* mkdir -p. */
static int make_dirs(const char *path)
{
	char buf[PATH_MAX];
	size_t i, n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, MOUNT_DIR_MODE) && errno != EEXIST)
			return -errno;
		buf[i] = path[i];
	}
	return 0;
}

int mounts__attach_one(const char *tag, const char *path, bool read_only)
{
	int ret = make_dirs(path);

	if (ret)
		return ret;
	if (mount(tag, path, "virtiofs",
		  MS_NOSUID | MS_NODEV | (read_only ? MS_RDONLY : 0), NULL))
		return -errno;
	return 0;
}

/* Something is mounted at path: its device is not its parent's. */
static bool is_mount_point(const char *path)
{
	char parent[PATH_MAX];
	struct stat st, pst;

	if (snprintf(parent, sizeof(parent), "%s/..", path) >=
		    (int)sizeof(parent) ||
	    stat(path, &st) || stat(parent, &pst))
		return false;
	return st.st_dev != pst.st_dev;
}

/* The first failure's index in *at, or -1. */
static int attach_all(const struct kiln_mounts *ms, int *at)
{
	for (unsigned int i = 0; i < ms->nr; i++) {
		const struct kiln_mount *m = &ms->m[i];
		int ret;

		if (is_mount_point(m->path))
			continue;
		ret = mounts__attach_one(m->tag, m->path, m->read_only);
		if (ret) {
			*at = (int)i;
			return ret;
		}
	}
	return 0;
}

/*
 * Children first. Not lazily: a mount something still uses stays and
 * says EBUSY, so the host never takes a snapshot with it mounted. A
 * path with nothing mounted (EINVAL) or none at all is already done.
 */
static int detach_all(const struct kiln_mounts *ms, int *at)
{
	for (unsigned int i = ms->nr; i--;) {
		if (!umount2(ms->m[i].path, UMOUNT_NOFOLLOW) ||
		    errno == EINVAL || errno == ENOENT)
			continue;
		*at = (int)i;
		return -errno;
	}
	return 0;
}

void mounts__handle(struct conn *c, const struct frame *req)
{
	bool detach = req->type == KILN_MSG_MOUNTS_DETACH;
	struct kiln_mounts *ms;
	int ret, at = -1;

	ms = malloc(sizeof(*ms));
	if (!ms) {
		conn__error(c, ENOMEM, "mounts: out of memory");
		return;
	}
	ret = kiln_mounts__decode(req->data, req->len, ms);
	if (ret) {
		conn__error(c, EINVAL, "a bad mounts list: %s", strerror(-ret));
		goto out;
	}
	ret = detach ? detach_all(ms, &at) : attach_all(ms, &at);
	if (ret)
		conn__error(c, -ret, "%s %s (virtio-fs %s): %s",
			    detach ? "umount" : "mount", ms->m[at].path,
			    ms->m[at].tag, strerror(-ret));
	else
		conn__ok(c);
out:
	free(ms);
}
