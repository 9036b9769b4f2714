// SPDX-License-Identifier: GPL-2.0
/*
 * The `bind` backend's mask paths: a trie of path components, where a
 * (directory, name) lives on the host (source, or beneath mask_storage),
 * and the storage directories made for masks in a read-write bind.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/fs/passthrough-internal.h"

/* ---- masks ---------------------------------------------------------- */

const struct pt_mask *pt_mask_child(const struct pt_mask *m, const char *name)
{
	for (m = m->child; m; m = m->next)
		if (!strcmp(m->name, name))
			return m;
	return NULL;
}

void pt_mask_free(struct pt_mask *m)
{
	struct pt_mask *c, *next;

	if (!m)
		return;
	for (c = m->child; c; c = next) {
		next = c->next;
		pt_mask_free(c);
	}
	free(m->name);
	free(m);
}

static struct pt_mask *mask_new(struct pt_mask *parent, const char *name,
				size_t len)
{
	struct pt_mask *m = calloc(1, sizeof(*m)), **tail;

	if (!m)
		return NULL;
	m->name = strndup(name, len);
	if (!m->name) {
		free(m);
		return NULL;
	}
	m->parent = parent;
	if (parent) {
		m->depth = parent->depth + 1;
		for (tail = &parent->child; *tail; tail = &(*tail)->next)
			;
		*tail = m;
	}
	return m;
}

/* NULL when path is well formed, else why not. */
static const char *mask_path_problem(const char *path)
{
	const char *p, *end;
	size_t len;

	if (!path)
		return "is missing";
	if (strnlen(path, FS_PATH_MAX + 1) > FS_PATH_MAX)
		return "is longer than 4096 bytes";
	if (path[0] != '/')
		return "is not absolute";
	if (!path[1])
		return "is the whole bind (\"/\")";
	for (p = path + 1;; p = end + 1) {
		end = strchrnul(p, '/');
		len = (size_t)(end - p);
		if (!len)
			return "is not normalised (an empty component: \"//\" "
			       "or a trailing \"/\")";
		if ((len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return "has a \".\" or \"..\" component";
		if (len > FS_NAME_MAX)
			return "has a component longer than 255 bytes";
		if (!*end)
			return NULL;
	}
}

/* Adds a checked path; -EEXIST for a duplicate. */
static int mask_add(struct pt_mask *root, const char *path)
{
	struct pt_mask *m = root, *c;
	const char *p, *end;
	size_t len;

	for (p = path + 1;; p = end + 1) {
		end = strchrnul(p, '/');
		len = (size_t)(end - p);
		for (c = m->child; c; c = c->next)
			if (strlen(c->name) == len && !memcmp(c->name, p, len))
				break;
		if (!c)
			c = mask_new(m, p, len);
		if (!c)
			return -ENOMEM;
		m = c;
		if (!*end)
			break;
	}
	if (m->masked)
		return -EEXIST;
	/* A mask path below another one is redundant, and harmless. */
	m->masked = true;
	return 0;
}

/*
 * The directory beneath storage for trie node m (the parent of a mask
 * path), opened one component at a time from the storage root; with
 * create, missing components are made (PT_STORAGE_MODE). *fd is the
 * storage root's descriptor itself for the trie root: close it only if
 * it is not b->storage_fd.
 */
int pt_storage_dir(struct pt_backend *b, const struct pt_mask *m, bool create,
		   int *fdp)
{
	const struct pt_mask *a;
	unsigned int depth;
	int cur = b->storage_fd, next;

	if (cur < 0)
		return -ENOENT; /* read-only: masked paths are absent */
	for (depth = 1; depth <= m->depth; depth++) {
		for (a = m; a->depth > depth; a = a->parent)
			;
		next = pt_open_dir(cur, a->name);
		if (next == -ENOENT && create) {
			if (mkdirat(cur, a->name, PT_STORAGE_MODE) < 0 &&
			    errno != EEXIST)
				next = -errno;
			else
				next = pt_open_dir(cur, a->name);
		}
		if (cur != b->storage_fd)
			close(cur);
		if (next < 0)
			return next;
		cur = next;
	}
	*fdp = cur;
	return 0;
}

int pt_locate(struct pt_backend *b, struct pt_node *dir, const char *name,
	      bool create, struct pt_where *w)
{
	const struct pt_mask *m = NULL;
	int ret;

	*w = (struct pt_where){ .dirfd = -1, .tree = dir->tree };
	ret = pt_fd(b, dir);
	if (ret < 0)
		return ret;
	w->dirfd = ret;
	if (dir->tree == PT_SOURCE && dir->mask)
		m = pt_mask_child(dir->mask, name);
	if (!m)
		return 0;
	w->mask = m;
	if (!m->masked)
		return 0;
	ret = pt_storage_dir(b, m->parent, create, &w->dirfd);
	if (ret)
		return ret;
	w->owned = w->dirfd != b->storage_fd;
	w->tree = PT_STORAGE;
	w->mask_root = true;
	return 0;
}

void pt_locate_done(struct pt_where *w)
{
	if (w->owned)
		close(w->dirfd);
	w->owned = false;
}

/* A source directory on the way to a mask path: renaming it would move
 * what the mask hides out from under it. */
bool pt_mask_ancestor(const struct pt_where *w)
{
	return w->tree == PT_SOURCE && w->mask && !w->mask->masked;
}

/* ---- create --------------------------------------------------------- */

int pt_create_masks(struct pt_backend *b, const struct fs_bind_params *p)
{
	const char *why;
	unsigned int i;
	int ret;

	if (!p->nr_mask_paths)
		return 0;
	if (!p->mask_paths) {
		pr_err("%s: %u mask paths, but no list of them", b->name,
		       p->nr_mask_paths);
		return -EINVAL;
	}
	b->masks = mask_new(NULL, "", 0);
	if (!b->masks)
		return -ENOMEM;
	for (i = 0; i < p->nr_mask_paths; i++) {
		why = mask_path_problem(p->mask_paths[i]);
		if (why) {
			pr_err("%s: mask path %u \"%s\" %s", b->name, i,
			       p->mask_paths[i] ? p->mask_paths[i] : "", why);
			return -EINVAL;
		}
		ret = mask_add(b->masks, p->mask_paths[i]);
		if (ret == -EEXIST) {
			pr_err("%s: mask path \"%s\" is given twice", b->name,
			       p->mask_paths[i]);
			return -EINVAL;
		}
		if (ret)
			return ret;
	}
	return 0;
}

/* Neither directory may hold the other (nor be the other). */
static int check_storage(struct pt_backend *b, const struct fs_bind_params *p,
			 const struct stat *src, const struct stat *sto)
{
	int ret = pt_beneath(b->storage_fd, src->st_dev, src->st_ino);

	if (ret == 0)
		ret = pt_beneath(b->root->fd, sto->st_dev, sto->st_ino);
	if (ret < 0) {
		pr_err("%s: mask storage %s: %s", b->name, p->mask_storage,
		       strerror(-ret));
		return ret;
	}
	if (ret) {
		pr_err("%s: mask storage %s and source %s must not contain one "
		       "another",
		       b->name, p->mask_storage, p->source);
		return -EINVAL;
	}
	return 0;
}

int pt_create_storage(struct pt_backend *b, const struct fs_bind_params *p,
		      const struct stat *src)
{
	struct stat st;
	int fd;

	if (p->read_only || !p->nr_mask_paths) {
		if (!p->mask_storage)
			return 0;
		pr_err("%s: mask storage %s given, but the bind %s", b->name,
		       p->mask_storage,
		       p->read_only ? "is read-only (masked paths are absent)" :
				      "has no mask paths");
		return -EINVAL;
	}
	if (!p->mask_storage) {
		pr_err("%s: mask paths in a read-write bind need a mask "
		       "storage directory",
		       b->name);
		return -EINVAL;
	}
	fd = pt_open_host_dir(b->name, "mask storage", p->mask_storage, &st);
	if (fd < 0)
		return fd;
	b->storage_fd = fd;
	b->storage_dev = st.st_dev;
	b->storage_ino = st.st_ino;
	return check_storage(b, p, src, &st);
}
