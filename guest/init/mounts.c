// SPDX-License-Identifier: GPL-2.0
/*
 * Kiln's init: mount the host's virtio-fs file systems where the host
 * said, and on a read-only root make the directories they need in an
 * overlay (guest/init/mounts.h).
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
#include <linux/limits.h>

#include "guest/agent/mounts.h"
#include "guest/init/mounts.h"

#define MOUNTS_FILE_MAX (64 << 10) /* written by the host: bounded */
#define MOUNTS_MAX	16

/*
 * The overlay's layers while it is put together, in the initramfs: the
 * directories made (a small tmpfs) over the root disk. Both are
 * detached once the overlay holds them.
 */
#define LAYERS_DIR   "/kiln-layers"
#define STUBS_DIR    LAYERS_DIR "/points"
#define LOWER_DIR    LAYERS_DIR "/image"
#define STUBS_SIZE   "1m"  /* directories only: a few KiB */
#define STUBS_INODES "512" /* MOUNTS_MAX paths of up to ~30 components */
#define STUB_MODE    0755

struct init_mount {
	const char *tag;
	const char *path;
	bool read_only;
};

struct init_mounts {
	char *buf;
	unsigned int nr;
	struct init_mount m[MOUNTS_MAX];
	/* paths made in the overlay, NULL-terminated; points into buf */
	const char *made[MOUNTS_MAX + 1];
	unsigned int nr_made;
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

const char *const *init_mounts__made(const struct init_mounts *m)
{
	return m && m->nr_made ? m->made : NULL;
}

/* Is @path (absolute) @parent or below it? */
static bool path_under(const char *path, const char *parent)
{
	size_t n = strlen(parent);

	return !strncmp(path, parent, n) &&
	       (path[n] == '/' || path[n] == '\0' || n == 1);
}

/* Mounted inside an earlier mount: its directory is that mount's job. */
static bool inside_other(const struct init_mounts *m, unsigned int i)
{
	for (unsigned int j = 0; j < i; j++)
		if (strcmp(m->m[j].path, m->m[i].path) &&
		    path_under(m->m[i].path, m->m[j].path))
			return true;
	return false;
}

/* A "." or ".." component: no stub is made for such a path. */
static bool has_dot_component(const char *path)
{
	const char *c;

	for (c = path; (c = strchr(c, '/')); c++)
		if (c[1] == '.' && (c[2] == '/' || !c[2] ||
				    (c[2] == '.' && (c[3] == '/' || !c[3]))))
			return true;
	return false;
}

/*
 * Does @path lack a directory in the image at @root? Only when each
 * component that is there is a real directory: a symlink or a file on
 * the way is left to the mount itself, which then fails naming it (a
 * stub would hide what the image has there).
 */
static bool needs_point(const char *root, const char *path)
{
	size_t i, end, r = strlen(root);
	char buf[PATH_MAX];
	struct stat st;

	if (has_dot_component(path) ||
	    snprintf(buf, sizeof(buf), "%s%s", root, path) >= (int)sizeof(buf))
		return false;
	end = strlen(buf);
	for (i = r + 1; i <= end; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (lstat(buf, &st))
			return errno == ENOENT;
		if (!S_ISDIR(st.st_mode))
			return false;
		if (i < end)
			buf[i] = '/';
	}
	return false;
}

/* A stub directory looks as the image's own: mode, owner and times. */
static int copy_attrs(const char *stub, const struct stat *st)
{
	const struct timespec times[2] = { st->st_atim, st->st_mtim };

	if (chmod(stub, st->st_mode & 07777) ||
	    chown(stub, st->st_uid, st->st_gid) ||
	    utimensat(AT_FDCWD, stub, times, 0))
		return -errno;
	return 0;
}

/*
 * @path's directories in the stub layer: those the image has with its
 * attributes (the overlay shows the topmost layer's), the rest 0755.
 */
static int make_stub(const char *root, const char *path)
{
	char img[PATH_MAX], stub[PATH_MAX];
	size_t i, n = strlen(path);
	struct stat st;
	int ret;

	for (i = 1; i <= n; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		snprintf(img, sizeof(img), "%s%.*s", root, (int)i, path);
		snprintf(stub, sizeof(stub), STUBS_DIR "%.*s", (int)i, path);
		if (mkdir(stub, STUB_MODE) && errno != EEXIST)
			return -errno;
		if (!lstat(img, &st) && S_ISDIR(st.st_mode)) {
			ret = copy_attrs(stub, &st);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* The stub layer with the root's attributes and every missing point. */
static int make_stubs(struct init_mounts *m, const char *root)
{
	struct stat st;
	int ret;

	if (mkdir(LAYERS_DIR, STUB_MODE) && errno != EEXIST)
		return -errno;
	if ((mkdir(STUBS_DIR, STUB_MODE) && errno != EEXIST) ||
	    (mkdir(LOWER_DIR, STUB_MODE) && errno != EEXIST))
		return -errno;
	if (mount("kiln-points", STUBS_DIR, "tmpfs", MS_NOSUID | MS_NODEV,
		  "mode=0755,size=" STUBS_SIZE ",nr_inodes=" STUBS_INODES))
		return -errno;
	if (stat(root, &st))
		return -errno;
	ret = copy_attrs(STUBS_DIR, &st);
	for (unsigned int i = 0; !ret && i < m->nr_made; i++)
		ret = make_stub(root, m->made[i]);
	return ret;
}

/*
 * The stubs over the image, read-only: the root disk moves to
 * LOWER_DIR, the overlay takes its place at @root. Both layers are then
 * detached from the initramfs; the overlay keeps them.
 */
static int stack_overlay(const char *root)
{
	if (mount(root, LOWER_DIR, NULL, MS_MOVE, NULL))
		return -errno;
	if (mount("overlay", root, "overlay", MS_RDONLY,
		  "lowerdir=" STUBS_DIR ":" LOWER_DIR)) {
		int err = errno;

		/* Put the disk back: the boot goes on as without stubs. */
		if (mount(LOWER_DIR, root, NULL, MS_MOVE, NULL))
			fprintf(stderr, "kiln-init: cannot move %s back: %s\n",
				LOWER_DIR, strerror(errno));
		return -err;
	}
	umount2(LOWER_DIR, MNT_DETACH);
	umount2(STUBS_DIR, MNT_DETACH);
	return 0;
}

int init_mounts__make_points(struct init_mounts *m, const char *root)
{
	int ret;

	for (unsigned int i = 0; m && i < m->nr; i++)
		if (!inside_other(m, i) && needs_point(root, m->m[i].path))
			m->made[m->nr_made++] = m->m[i].path;
	if (!m || !m->nr_made)
		return 0;
	ret = make_stubs(m, root);
	if (!ret)
		ret = stack_overlay(root);
	if (ret) {
		umount2(STUBS_DIR, MNT_DETACH);
		fprintf(stderr,
			"kiln-init: cannot make mount points on the "
			"read-only root (%s first): %s\n",
			m->made[0], strerror(-ret));
		m->nr_made = 0;
		m->made[0] = NULL;
	}
	return ret;
}
