// SPDX-License-Identifier: GPL-2.0
/*
 * The `bind` backend: a host directory, confined beneath it. The full
 * design and what it guarantees is in Documentation/virtio-fs.md ("bind"); in
 * short:
 *
 * - One node per host inode (st_dev, st_ino) the guest has looked up, with
 *   an O_PATH | O_NOFOLLOW descriptor, a lookup count, and the directory
 *   node and name it was last found under. Node ids are handed out once
 *   and never reused (generation is always 0); FUSE_ROOT_ID is source.
 * - Every name is one component resolved relative to a node's descriptor
 *   with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 *   RESOLVE_NO_MAGICLINKS) and O_NOFOLLOW, or given to an *at() call that
 *   does not follow a final symlink. Symlinks are nodes of their own; the
 *   guest kernel resolves them in its own view.
 * - Files are opened for I/O again from their directory and name, then
 *   checked with fstat to be the node's inode (no /proc magic links);
 *   directories from their own descriptor and ".".
 * - Before an op resolves a name in a directory it checks that directory
 *   still hangs beneath source (the recorded chain of names first, a walk
 *   up ".." when that fails): a directory a host process moved out of the
 *   tree answers -ESTALE.
 * - Masks live in a trie of path components; a source directory node
 *   knows its place in it, so deciding whether (directory, name) is masked
 *   costs one scan of that trie node's children.
 *
 * Every op runs on the device's event loop thread: no locking.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/openat2.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "devices/fs/passthrough.h"
#include "lib/hashtable.h"

/* How every guest name is resolved: one component, never a symlink. */
#define PT_RESOLVE \
	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* The guest's open(2) flags we keep; the rest are ours or dropped. */
#define PT_OPEN_KEEP (O_ACCMODE | O_APPEND | O_DSYNC | O_SYNC)
/* Node and lookup flags every descriptor we open carries. */
#define PT_OPATH (O_PATH | O_NOFOLLOW | O_CLOEXEC)

/*
 * fchmodat2(2), Linux 6.6: the one chmod that works on an O_PATH
 * descriptor (AT_EMPTY_PATH). Syscalls from 424 on have the same number
 * on every architecture, and the C library headers may predate it.
 */
#define PT_NR_FCHMODAT2 452

/*
 * readdir cookies: getdents64 d_off values are non-negative loff_t, so
 * bit 63 is free to mark our own entries ("." is 1, ".." 2, the i-th mask
 * entry 3 + i).
 */
#define PT_SYN_OFF   (1ULL << 63)
#define PT_SYN_DOT   1ULL
#define PT_SYN_DDOT  2ULL
#define PT_SYN_MASK0 3ULL

#define PT_DIRENT_BUF	  (32U << 10) /* getdents64 buffer per open directory */
#define PT_MAX_WALK	  4096U /* parent hops: deeper counts as cut off */
#define PT_EAGAIN_RETRIES 8U	/* openat2 -EAGAIN: a racing rename */
#define PT_MIN_FDS	  64U	/* descriptors a mount may always hold */
#define PT_STORAGE_MODE	  0700	/* directories made inside mask_storage */
#define PT_HASH_MIN_BITS  6U
#define PT_HASH_MAX_BITS  26U

/* ---- objects ------------------------------------------------------- */

enum pt_tree {
	PT_SOURCE,  /* beneath source */
	PT_STORAGE, /* beneath mask_storage: a masked path or below one */
};

/* One component of the mask paths. The root is "/" (depth 0). */
struct pt_mask {
	char *name;
	struct pt_mask *parent;
	struct pt_mask *child; /* first child; siblings through next */
	struct pt_mask *next;
	unsigned int depth;
	bool masked; /* the path down to here is a mask path */
};

struct pt_node {
	struct hlink by_id;  /* key: id */
	struct hlink by_ino; /* key: ino_key(dev, ino) */
	uint64_t id;
	dev_t dev;
	ino_t ino;
	mode_t type; /* S_IFMT bits */
	int fd;	     /* O_PATH | O_NOFOLLOW */
	uint64_t nlookup;
	uint64_t nref; /* nodes whose parent this is, and pins */
	/*
	 * Where the guest last found it: the directory node and the name in
	 * it (NULL for the root). For a mask root the directory is the
	 * guest's parent in source; the host directory holding it is the
	 * one beneath storage for mask->parent.
	 */
	struct pt_node *parent;
	char *name;
	enum pt_tree tree;
	/*
	 * Source nodes: the trie node of their path, NULL when no mask path
	 * runs through it. Mask roots: their (masked) trie node.
	 */
	const struct pt_mask *mask;
	bool mask_root;
};

struct pt_handle {
	struct hlink link; /* key: fh */
	uint64_t nodeid;
	int fd;
	int flags; /* the open flags, O_ACCMODE among them */
	bool dir;
	char *dents; /* directories: PT_DIRENT_BUF bytes, on first readdir */
};

struct pt_backend {
	struct fs_backend fs;
	char *name;
	struct pt_node *root;
	int storage_fd; /* -1 without storage */
	dev_t storage_dev;
	ino_t storage_ino;
	struct pt_mask *masks; /* NULL without mask paths */
	struct hashtable by_id, by_ino, handles;
	uint64_t next_id, next_fh;
	size_t nr_fds, max_fds; /* descriptors held in nodes and handles */
	bool fds_warned;
	uid_t euid;
	gid_t egid;
};

/* Where (directory, name) lives on the host. */
struct pt_where {
	int dirfd;
	bool owned; /* dirfd is ours to close (a directory beneath storage) */
	enum pt_tree tree;
	const struct pt_mask *mask; /* the name's trie node, if any */
	bool mask_root;		    /* the name is a mask path: in storage */
};

/* At two entries a bucket a table doubles; a failed grow only costs time. */
static void hash_add(struct hashtable *h, struct hlink *l, uint64_t key)
{
	hashtable__add(h, l, key);
	if (h->count >= 2 * hashtable__buckets(h) && h->bits < PT_HASH_MAX_BITS)
		hashtable__resize(h, h->bits + 1);
}

static struct pt_backend *to_pt(struct fs_backend *fs)
{
	return (struct pt_backend *)((char *)fs -
				     offsetof(struct pt_backend, fs));
}

/* ---- system call helpers ------------------------------------------- */

static int pt_openat2(int dirfd, const char *path, int flags, mode_t mode,
		      uint64_t resolve)
{
	struct open_how how = {
		.flags = (uint64_t)(unsigned int)flags,
		.mode = mode,
		.resolve = resolve,
	};
	unsigned int i;
	long fd;

	/*
	 * -EAGAIN: the kernel could not rule out that a concurrent rename
	 * let ".." escape; we never pass "..", but retrying is what it asks.
	 */
	for (i = 0; i < PT_EAGAIN_RETRIES; i++) {
		fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		if (errno != EAGAIN)
			break;
	}
	return -errno;
}

/* The entry itself, a symlink too. */
static int open_path(int dirfd, const char *name)
{
	return pt_openat2(dirfd, name, PT_OPATH, 0, PT_RESOLVE);
}

static int open_dir(int dirfd, const char *name)
{
	return pt_openat2(dirfd, name, PT_OPATH | O_DIRECTORY, 0, PT_RESOLVE);
}

static int stat_fd(int fd, struct stat *st)
{
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		return -errno;
	return 0;
}

static int stat_at(int dirfd, const char *name, struct stat *st)
{
	return fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
}

static bool same_inode(const struct stat *st, dev_t dev, ino_t ino)
{
	return st->st_dev == dev && st->st_ino == ino;
}

/*
 * Whether the directory fd is (dev, ino) or lies beneath it, by walking
 * ".." up to "/" (at most PT_MAX_WALK hops). 1 yes, 0 no, or -errno.
 */
static int beneath(int fd, dev_t dev, ino_t ino)
{
	struct stat st, up_st;
	unsigned int hops;
	int cur = fd, up, ret = 0;

	ret = stat_fd(cur, &st);
	for (hops = 0; !ret && hops < PT_MAX_WALK; hops++) {
		if (same_inode(&st, dev, ino)) {
			ret = 1;
			break;
		}
		up = pt_openat2(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
				RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
		if (up < 0) {
			ret = up;
			break;
		}
		if (cur != fd)
			close(cur);
		cur = up;
		ret = stat_fd(cur, &up_st);
		if (!ret && same_inode(&up_st, st.st_dev, st.st_ino))
			break; /* ".." of "/" is "/": not beneath */
		st = up_st;
	}
	if (cur != fd)
		close(cur);
	return ret;
}

/* ---- names, modes, ids --------------------------------------------- */

/*
 * The server checks names already; the backend refuses what would not be
 * one component too, so that no caller can make it resolve a path.
 */
static int check_name(const char *name)
{
	size_t len;

	if (!name)
		return -EINVAL;
	len = strnlen(name, FS_NAME_MAX + 1);
	if (len > FS_NAME_MAX)
		return -ENAMETOOLONG;
	if (!len || strchr(name, '/') || !strcmp(name, ".") ||
	    !strcmp(name, ".."))
		return -EINVAL;
	return 0;
}

/*
 * The permission bits a guest asks for: its umask applied, set-user-ID
 * never (files are created as the vmm's user: a set-user-ID file would run
 * as that user on the host), set-group-ID only on directories (where it
 * means "inherit the group", not "run as").
 */
static mode_t guest_perm(uint32_t mode, uint32_t umask, bool dir)
{
	mode_t perm = mode & 07777 & ~umask;

	perm &= ~(mode_t)S_ISUID;
	if (!dir)
		perm &= ~(mode_t)S_ISGID;
	return perm;
}

/* The vmm's own ids are the guest's root; every other id as it is. */
static uint32_t guest_uid(const struct pt_backend *b, uid_t uid)
{
	return uid == b->euid ? 0 : (uint32_t)uid;
}

static uint32_t guest_gid(const struct pt_backend *b, gid_t gid)
{
	return gid == b->egid ? 0 : (uint32_t)gid;
}

/* fuse_attr.rdev is the kernel's new_encode_dev() format. */
static uint32_t encode_dev(dev_t dev)
{
	unsigned int maj = major(dev), min = minor(dev);

	return (min & 0xff) | (maj << 8) | ((min & ~0xffU) << 12);
}

static void to_attr(const struct pt_backend *b, const struct stat *st,
		    struct fuse_attr *a)
{
	*a = (struct fuse_attr){
		.ino = st->st_ino,
		.size = (uint64_t)st->st_size,
		.blocks = (uint64_t)st->st_blocks,
		.atime = (uint64_t)st->st_atim.tv_sec,
		.mtime = (uint64_t)st->st_mtim.tv_sec,
		.ctime = (uint64_t)st->st_ctim.tv_sec,
		.atimensec = (uint32_t)st->st_atim.tv_nsec,
		.mtimensec = (uint32_t)st->st_mtim.tv_nsec,
		.ctimensec = (uint32_t)st->st_ctim.tv_nsec,
		.mode = st->st_mode,
		.nlink = (uint32_t)st->st_nlink,
		.uid = guest_uid(b, st->st_uid),
		.gid = guest_gid(b, st->st_gid),
		.rdev = encode_dev(st->st_rdev),
		.blksize = (uint32_t)st->st_blksize,
	};
}

static uint64_t ino_key(dev_t dev, ino_t ino)
{
	return (uint64_t)ino ^ ((uint64_t)dev * 0xc2b2ae3d27d4eb4fULL);
}

/* ---- masks ---------------------------------------------------------- */

static const struct pt_mask *mask_child(const struct pt_mask *m,
					const char *name)
{
	for (m = m->child; m; m = m->next)
		if (!strcmp(m->name, name))
			return m;
	return NULL;
}

static void mask_free(struct pt_mask *m)
{
	struct pt_mask *c, *next;

	if (!m)
		return;
	for (c = m->child; c; c = next) {
		next = c->next;
		mask_free(c);
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
static int storage_dir(struct pt_backend *b, const struct pt_mask *m,
		       bool create, int *fdp)
{
	const struct pt_mask *a;
	unsigned int depth;
	int cur = b->storage_fd, next;

	if (cur < 0)
		return -ENOENT; /* read-only: masked paths are absent */
	for (depth = 1; depth <= m->depth; depth++) {
		for (a = m; a->depth > depth; a = a->parent)
			;
		next = open_dir(cur, a->name);
		if (next == -ENOENT && create) {
			if (mkdirat(cur, a->name, PT_STORAGE_MODE) < 0 &&
			    errno != EEXIST)
				next = -errno;
			else
				next = open_dir(cur, a->name);
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

static int where(struct pt_backend *b, const struct pt_node *dir,
		 const char *name, bool create, struct pt_where *w)
{
	const struct pt_mask *m = NULL;
	int ret;

	*w = (struct pt_where){ .dirfd = dir->fd, .tree = dir->tree };
	if (dir->tree == PT_SOURCE && dir->mask)
		m = mask_child(dir->mask, name);
	if (!m)
		return 0;
	w->mask = m;
	if (!m->masked)
		return 0;
	ret = storage_dir(b, m->parent, create, &w->dirfd);
	if (ret)
		return ret;
	w->owned = w->dirfd != b->storage_fd;
	w->tree = PT_STORAGE;
	w->mask_root = true;
	return 0;
}

static void where_done(struct pt_where *w)
{
	if (w->owned)
		close(w->dirfd);
	w->owned = false;
}

/* A source directory on the way to a mask path: renaming it would move
 * what the mask hides out from under it. */
static bool mask_ancestor(const struct pt_where *w)
{
	return w->tree == PT_SOURCE && w->mask && !w->mask->masked;
}

/* ---- nodes ---------------------------------------------------------- */

static struct pt_node *node_get(struct pt_backend *b, uint64_t id)
{
	struct hlink *l = hashtable__first(&b->by_id, id);

	return l ? hashtable__entry(l, struct pt_node, by_id) : NULL;
}

static int dir_get(struct pt_backend *b, uint64_t id, struct pt_node **np)
{
	struct pt_node *n = node_get(b, id);

	if (!n)
		return -ESTALE;
	if (!S_ISDIR(n->type))
		return -ENOTDIR;
	*np = n;
	return 0;
}

static struct pt_node *node_find(struct pt_backend *b, dev_t dev, ino_t ino)
{
	struct hlink *l;
	struct pt_node *n;

	for (l = hashtable__first(&b->by_ino, ino_key(dev, ino)); l;
	     l = hashtable__next(l)) {
		n = hashtable__entry(l, struct pt_node, by_ino);
		if (n->dev == dev && n->ino == ino)
			return n;
	}
	return NULL;
}

static void node_free(struct pt_backend *b, struct pt_node *n)
{
	hashtable__del(&b->by_id, &n->by_id);
	hashtable__del(&b->by_ino, &n->by_ino);
	close(n->fd);
	b->nr_fds--;
	free(n->name);
	free(n);
}

/* Frees n, then its parents, while nothing counts them any more. */
static void node_put(struct pt_backend *b, struct pt_node *n)
{
	struct pt_node *p;

	while (n && n != b->root && !n->nlookup && !n->nref) {
		p = n->parent;
		node_free(b, n);
		if (p)
			p->nref--;
		n = p;
	}
}

static void node_pin(struct pt_node *n)
{
	n->nref++;
}

static void node_unpin(struct pt_backend *b, struct pt_node *n)
{
	n->nref--;
	node_put(b, n);
}

/*
 * n is parent or one of its recorded ancestors. The recorded parents never
 * form a cycle (node_place() keeps it so), so the walk ends at the root.
 */
static bool node_above(const struct pt_node *n, const struct pt_node *parent)
{
	for (; parent; parent = parent->parent)
		if (parent == n)
			return true;
	return false;
}

/*
 * Records that n is found as name (ours now) in parent, placed as w says.
 * The root stays where it is, and so does a directory that would become
 * its own ancestor (a host bind mount can show a directory inside itself).
 */
static void node_place(struct pt_backend *b, struct pt_node *n,
		       struct pt_node *parent, char *name,
		       const struct pt_where *w)
{
	struct pt_node *old = n->parent;

	if (n == b->root || (S_ISDIR(n->type) && node_above(n, parent))) {
		free(name);
		return;
	}
	node_pin(parent);
	n->parent = parent;
	free(n->name);
	n->name = name;
	n->tree = w->tree;
	n->mask = w->mask;
	n->mask_root = w->mask_root;
	if (old)
		node_unpin(b, old);
}

static int fd_budget(struct pt_backend *b, size_t want)
{
	if (b->nr_fds + want <= b->max_fds)
		return 0;
	if (!b->fds_warned) {
		pr_warn("%s: holding %zu host file descriptors, as many as "
			"this mount may: lookups and opens fail with ENFILE "
			"until the guest forgets or closes some",
			b->name, b->nr_fds);
		b->fds_warned = true;
	}
	return -ENFILE;
}

static void fill_entry(const struct pt_backend *b, const struct pt_node *n,
		       const struct stat *st, struct fs_entry *out)
{
	out->nodeid = n->id;
	out->generation = 0;
	to_attr(b, st, &out->attr);
}

/*
 * Counts one lookup of the inode behind fd (an O_PATH descriptor of name
 * in dir, taken over: kept as a new node's or closed) and fills out.
 */
static int node_add(struct pt_backend *b, struct pt_node *dir, const char *name,
		    const struct pt_where *w, int fd, struct fs_entry *out)
{
	struct pt_node *n;
	struct stat st;
	char *nm;
	int ret;

	ret = stat_fd(fd, &st);
	nm = ret ? NULL : strdup(name);
	if (!ret && !nm)
		ret = -ENOMEM;
	if (ret) {
		close(fd);
		return ret;
	}
	n = node_find(b, st.st_dev, st.st_ino);
	if (n) {
		close(fd);
		node_place(b, n, dir, nm, w);
		n->nlookup++;
		fill_entry(b, n, &st, out);
		return 0;
	}
	ret = fd_budget(b, 1);
	n = ret ? NULL : calloc(1, sizeof(*n));
	if (!n) {
		close(fd);
		free(nm);
		return ret ? ret : -ENOMEM;
	}
	n->id = b->next_id++;
	n->dev = st.st_dev;
	n->ino = st.st_ino;
	n->type = st.st_mode & S_IFMT;
	n->fd = fd;
	n->nlookup = 1;
	hash_add(&b->by_id, &n->by_id, n->id);
	hash_add(&b->by_ino, &n->by_ino, ino_key(n->dev, n->ino));
	b->nr_fds++;
	node_place(b, n, dir, nm, w);
	fill_entry(b, n, &st, out);
	return 0;
}

static void node_forget(struct pt_backend *b, struct pt_node *n,
			uint64_t nlookup)
{
	if (n == b->root)
		return; /* the root lives from create to destroy */
	n->nlookup -= nlookup < n->nlookup ? nlookup : n->nlookup;
	node_put(b, n);
}

/*
 * The host directory that holds n's recorded name: *owned says whether
 * the caller closes it.
 */
static int node_dirfd(struct pt_backend *b, const struct pt_node *n, int *fdp,
		      bool *owned)
{
	int ret;

	*owned = false;
	if (n->mask_root) {
		ret = storage_dir(b, n->mask->parent, false, fdp);
		*owned = !ret && *fdp != b->storage_fd;
		return ret;
	}
	if (!n->parent)
		return -ESTALE;
	*fdp = n->parent->fd;
	return 0;
}

/* n's recorded name in its recorded directory is still n. */
static bool hop_ok(struct pt_backend *b, const struct pt_node *n)
{
	struct stat st;
	bool owned;
	int fd, ret;

	if (node_dirfd(b, n, &fd, &owned))
		return false;
	ret = stat_at(fd, n->name, &st);
	if (owned)
		close(fd);
	return !ret && same_inode(&st, n->dev, n->ino);
}

/*
 * Directory dir still lies beneath its tree's root (source, or storage
 * for masked paths): the recorded names checked hop by hop (a stat each),
 * and if one no longer matches (a host process renamed something) the
 * real parents walked up "..". -ESTALE: it was moved out of the tree (or
 * removed). A host process racing a move with the op can still get that
 * one op through: see the documentation.
 */
static int check_connected(struct pt_backend *b, const struct pt_node *dir)
{
	const struct pt_node *n = dir;
	unsigned int hops;
	dev_t dev;
	ino_t ino;
	int ret;

	for (hops = 0; n && n != b->root && hops < PT_MAX_WALK; hops++) {
		if (!hop_ok(b, n))
			break;
		if (n->mask_root)
			return 0; /* storage_dir() opened its way beneath */
		n = n->parent;
	}
	if (n == b->root)
		return 0;
	if (dir->tree == PT_STORAGE) {
		dev = b->storage_dev;
		ino = b->storage_ino;
	} else {
		dev = b->root->dev;
		ino = b->root->ino;
	}
	ret = beneath(dir->fd, dev, ino);
	return ret == 1 ? 0 : -ESTALE;
}

static int dir_begin(struct pt_backend *b, uint64_t parent, const char *name,
		     struct pt_node **dirp)
{
	int ret = check_name(name);

	if (!ret)
		ret = dir_get(b, parent, dirp);
	if (!ret)
		ret = check_connected(b, *dirp);
	return ret;
}

/*
 * A descriptor for I/O on regular file n (or, for chmod before Linux 6.6,
 * a FIFO opened for reading: that never blocks with O_NONBLOCK, and has
 * no other effect): opened again from its recorded
 * directory and name (never through /proc: magic links are what we
 * forbid), then checked to be n's inode. O_NONBLOCK while opening keeps a
 * FIFO a host process swapped in from blocking the thread; O_TRUNC is
 * applied only once the file is known to be n.
 */
static int reopen_file(struct pt_backend *b, const struct pt_node *n, int flags)
{
	struct stat st;
	bool owned;
	int dirfd, fd, fl, ret;

	if (!n->mask_root && n->parent) {
		ret = check_connected(b, n->parent);
		if (ret)
			return ret;
	}
	ret = node_dirfd(b, n, &dirfd, &owned);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret;
	fd = pt_openat2(dirfd, n->name,
			(flags & PT_OPEN_KEEP) | O_NOFOLLOW | O_CLOEXEC |
				O_NOCTTY | O_NONBLOCK,
			0, PT_RESOLVE);
	if (owned)
		close(dirfd);
	/* Gone, or a symlink in its place: the guest looks it up again. */
	if (fd == -ENOENT || fd == -ELOOP)
		return -ESTALE;
	if (fd < 0)
		return fd;
	ret = stat_fd(fd, &st);
	if (!ret && (!same_inode(&st, n->dev, n->ino) ||
		     (st.st_mode & S_IFMT) != n->type))
		ret = -ESTALE;
	fl = ret ? -1 : fcntl(fd, F_GETFL);
	if (!ret && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		ret = -errno;
	if (!ret && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY &&
	    ftruncate(fd, 0) < 0)
		ret = -errno;
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* chmod n; hfd, if >= 0, is an open descriptor of it. */
static int chmod_node(struct pt_backend *b, const struct pt_node *n,
		      mode_t mode, int hfd)
{
	int fd, ret;

	if (S_ISLNK(n->type))
		return -EOPNOTSUPP; /* Linux keeps symlinks' modes fixed */
	if (!syscall(PT_NR_FCHMODAT2, n->fd, "", mode, AT_EMPTY_PATH))
		return 0;
	if (errno != ENOSYS)
		return -errno;
	/* Before Linux 6.6: through a descriptor opened for reading. */
	if (hfd >= 0)
		return fchmod(hfd, mode) ? -errno : 0;
	if (S_ISDIR(n->type))
		fd = pt_openat2(n->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				0, PT_RESOLVE);
	else if (S_ISREG(n->type) || S_ISFIFO(n->type))
		fd = reopen_file(b, n, O_RDONLY);
	else
		return -EOPNOTSUPP;
	if (fd < 0)
		return fd;
	ret = fchmod(fd, mode) ? -errno : 0;
	close(fd);
	return ret;
}

/* ---- handles -------------------------------------------------------- */

static int handle_new(struct pt_backend *b, uint64_t nodeid, int fd, int flags,
		      bool dir, uint64_t *fh)
{
	struct pt_handle *h = calloc(1, sizeof(*h));

	if (!h) {
		close(fd);
		return -ENOMEM;
	}
	h->nodeid = nodeid;
	h->fd = fd;
	h->flags = flags;
	h->dir = dir;
	*fh = b->next_fh++;
	hash_add(&b->handles, &h->link, *fh);
	b->nr_fds++;
	return 0;
}

static struct pt_handle *handle_get(struct pt_backend *b, uint64_t nodeid,
				    uint64_t fh, bool dir)
{
	struct hlink *l = hashtable__first(&b->handles, fh);
	struct pt_handle *h;

	h = l ? hashtable__entry(l, struct pt_handle, link) : NULL;

	if (!h || h->nodeid != nodeid || h->dir != dir)
		return NULL;
	return h;
}

static void handle_free(struct pt_backend *b, struct pt_handle *h)
{
	hashtable__del(&b->handles, &h->link);
	close(h->fd);
	b->nr_fds--;
	free(h->dents);
	free(h);
}

/* ---- ops: names ----------------------------------------------------- */

static int pt_lookup(struct fs_backend *fs, uint64_t parent, const char *name,
		     struct fs_entry *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *dir;
	struct pt_where w;
	int fd, ret;

	ret = dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = where(b, dir, name, false, &w);
	if (ret)
		return ret;
	fd = open_path(w.dirfd, name);
	ret = fd < 0 ? fd : node_add(b, dir, name, &w, fd, out);
	where_done(&w);
	return ret;
}

static void pt_forget(struct fs_backend *fs, uint64_t nodeid, uint64_t nlookup)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = node_get(b, nodeid);

	if (n)
		node_forget(b, n, nlookup);
}

static int pt_getattr(struct fs_backend *fs, uint64_t nodeid,
		      struct fuse_attr *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = node_get(b, nodeid);
	struct stat st;
	int ret;

	if (!n)
		return -ESTALE;
	ret = stat_fd(n->fd, &st);
	if (!ret)
		to_attr(b, &st, out);
	return ret;
}

/*
 * The entry just made as name in w: counted as a lookup, checked to be of
 * the type made, and given the permission bits the process umask took
 * away (the guest's umask was applied already; the vmm's must not be).
 */
static int node_made(struct pt_backend *b, struct pt_node *dir,
		     const char *name, const struct pt_where *w, mode_t type,
		     mode_t perm, struct fs_entry *out)
{
	struct pt_node *n;
	struct stat st;
	int fd, ret;

	fd = open_path(w->dirfd, name);
	if (fd < 0)
		return fd;
	ret = node_add(b, dir, name, w, fd, out);
	if (ret)
		return ret;
	n = node_get(b, out->nodeid);
	if ((out->attr.mode & S_IFMT) != type) {
		node_forget(b, n, 1); /* a host process raced us */
		return -EIO;
	}
	if (type == S_IFLNK || !(perm & ~out->attr.mode & 07777))
		return 0;
	ret = chmod_node(b, n, (out->attr.mode & 07777) | perm, -1);
	if (ret == -EOPNOTSUPP)
		return 0; /* a socket before Linux 6.6: the host's mode stands */
	if (!ret)
		ret = stat_fd(n->fd, &st);
	if (ret) {
		node_forget(b, n, 1);
		return ret;
	}
	to_attr(b, &st, &out->attr);
	return 0;
}

static int pt_mknod(struct fs_backend *fs, const struct fs_ctx *ctx,
		    uint64_t parent, const char *name, uint32_t mode,
		    uint32_t rdev, uint32_t umask, struct fs_entry *out)
{
	struct pt_backend *b = to_pt(fs);
	mode_t type = mode & S_IFMT, perm;
	struct pt_node *dir;
	struct pt_where w;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	if (!type)
		type = S_IFREG;
	/*
	 * Device nodes would be the host's devices, made by the vmm's user
	 * (root, often) with modes the guest picks: host processes could
	 * use them. The guest's own devices belong in its own file systems.
	 */
	if (type == S_IFCHR || type == S_IFBLK)
		return -EPERM;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK)
		return -EINVAL;
	ret = dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = where(b, dir, name, true, &w);
	if (ret)
		return ret;
	perm = guest_perm(mode, umask, false);
	if (mknodat(w.dirfd, name, type | perm, 0) < 0)
		ret = -errno;
	else
		ret = node_made(b, dir, name, &w, type, perm, out);
	where_done(&w);
	return ret;
}

static int pt_mkdir(struct fs_backend *fs, const struct fs_ctx *ctx,
		    uint64_t parent, const char *name, uint32_t mode,
		    uint32_t umask, struct fs_entry *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *dir;
	struct pt_where w;
	mode_t perm;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	ret = dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = where(b, dir, name, true, &w);
	if (ret)
		return ret;
	perm = guest_perm(mode, umask, true);
	if (mkdirat(w.dirfd, name, perm) < 0)
		ret = -errno;
	else
		ret = node_made(b, dir, name, &w, S_IFDIR, perm, out);
	where_done(&w);
	return ret;
}

static int pt_symlink(struct fs_backend *fs, const struct fs_ctx *ctx,
		      uint64_t parent, const char *name, const char *target,
		      struct fs_entry *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *dir;
	struct pt_where w;
	size_t len;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	if (!target)
		return -EINVAL;
	len = strnlen(target, FS_PATH_MAX);
	if (len >= FS_PATH_MAX)
		return -ENAMETOOLONG;
	if (!len)
		return -ENOENT;
	ret = dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = where(b, dir, name, true, &w);
	if (ret)
		return ret;
	/* Stored as the guest wrote it; only the guest ever follows it. */
	if (symlinkat(target, w.dirfd, name) < 0)
		ret = -errno;
	else
		ret = node_made(b, dir, name, &w, S_IFLNK, 0, out);
	where_done(&w);
	return ret;
}

static ssize_t pt_readlink(struct fs_backend *fs, uint64_t nodeid, char *buf,
			   size_t size)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = node_get(b, nodeid);
	ssize_t len;

	if (!n)
		return -ESTALE;
	if (!S_ISLNK(n->type))
		return -EINVAL;
	len = readlinkat(n->fd, "", buf, size);
	return len < 0 ? -errno : len;
}

static int remove_entry(struct pt_backend *b, uint64_t parent, const char *name,
			int flags)
{
	struct pt_node *dir;
	struct pt_where w;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	ret = dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = where(b, dir, name, false, &w);
	if (ret)
		return ret;
	ret = unlinkat(w.dirfd, name, flags) ? -errno : 0;
	where_done(&w);
	return ret;
}

static int pt_unlink(struct fs_backend *fs, uint64_t parent, const char *name)
{
	return remove_entry(to_pt(fs), parent, name, 0);
}

static int pt_rmdir(struct fs_backend *fs, uint64_t parent, const char *name)
{
	return remove_entry(to_pt(fs), parent, name, AT_REMOVEDIR);
}

/* After a rename: the node of the inode st describes is now name in dir. */
static void node_moved(struct pt_backend *b, const struct stat *st,
		       struct pt_node *dir, const char *name,
		       const struct pt_where *w)
{
	struct pt_node *n = node_find(b, st->st_dev, st->st_ino);
	char *nm;

	if (!n)
		return;
	nm = strdup(name);
	if (nm)
		node_place(b, n, dir, nm, w);
	/* else the old name stays: the next lookup corrects it */
}

static int pt_rename(struct fs_backend *fs, uint64_t parent, const char *name,
		     uint64_t newparent, const char *newname, uint32_t flags)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_where wf = { .dirfd = -1 }, wt = { .dirfd = -1 };
	struct pt_node *from, *to;
	struct stat st_from, st_to;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	ret = dir_begin(b, parent, name, &from);
	if (!ret)
		ret = dir_begin(b, newparent, newname, &to);
	if (!ret)
		ret = where(b, from, name, false, &wf);
	if (ret)
		return ret;
	ret = where(b, to, newname, true, &wt);
	if (ret)
		goto out_from;
	if (wf.tree != wt.tree) {
		ret = -EXDEV; /* source and storage: two trees */
		goto out_to;
	}
	if (mask_ancestor(&wf) || mask_ancestor(&wt)) {
		ret = -EBUSY;
		goto out_to;
	}
	ret = stat_at(wf.dirfd, name, &st_from);
	if (!ret && (flags & RENAME_EXCHANGE))
		ret = stat_at(wt.dirfd, newname, &st_to);
	if (ret)
		goto out_to;
	if (renameat2(wf.dirfd, name, wt.dirfd, newname, flags) < 0) {
		ret = -errno;
		goto out_to;
	}
	node_pin(from);
	node_pin(to);
	node_moved(b, &st_from, to, newname, &wt);
	if (flags & RENAME_EXCHANGE)
		node_moved(b, &st_to, from, name, &wf);
	node_unpin(b, to);
	node_unpin(b, from);
out_to:
	where_done(&wt);
out_from:
	where_done(&wf);
	return ret;
}

/*
 * linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH. Without it: the node's
 * recorded name, in its directory (pt_link checked it is in the tree),
 * linked without following, and the new link checked to be the node's
 * inode (removed again if a host process swapped the name meanwhile).
 */
static int link_by_name(struct pt_backend *b, struct pt_node *n, int newdirfd,
			const char *newname)
{
	struct stat st;
	bool owned;
	int dirfd, ret;

	ret = node_dirfd(b, n, &dirfd, &owned);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret;
	ret = linkat(dirfd, n->name, newdirfd, newname, 0) ? -errno : 0;
	if (owned)
		close(dirfd);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret;
	ret = stat_at(newdirfd, newname, &st);
	if (!ret && same_inode(&st, n->dev, n->ino))
		return 0;
	if (!ret && unlinkat(newdirfd, newname, 0) < 0)
		pr_warn("%s: could not remove a mislinked %s: %s", b->name,
			newname, strerror(errno));
	return -ESTALE;
}

static int pt_link(struct fs_backend *fs, uint64_t nodeid, uint64_t newparent,
		   const char *newname, struct fs_entry *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n, *dir;
	struct pt_where w;
	struct stat st;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	n = node_get(b, nodeid);
	if (!n)
		return -ESTALE;
	if (S_ISDIR(n->type))
		return -EPERM;
	/* Not a file a host process moved out of the tree: no way back in. */
	if (!n->mask_root && n->parent) {
		ret = check_connected(b, n->parent);
		if (ret)
			return ret;
	}
	ret = dir_begin(b, newparent, newname, &dir);
	if (!ret)
		ret = where(b, dir, newname, true, &w);
	if (ret)
		return ret;
	if (w.tree != n->tree) {
		ret = -EXDEV;
		goto out;
	}
	ret = linkat(n->fd, "", w.dirfd, newname, AT_EMPTY_PATH) ? -errno : 0;
	if (ret == -ENOENT || ret == -EPERM)
		ret = link_by_name(b, n, w.dirfd, newname);
	if (!ret)
		ret = stat_fd(n->fd, &st);
	if (!ret) {
		n->nlookup++;
		fill_entry(b, n, &st, out);
	}
out:
	where_done(&w);
	return ret;
}

/* ---- ops: attributes ------------------------------------------------ */

static int truncate_node(struct pt_backend *b, const struct pt_node *n,
			 uint64_t size, const struct pt_handle *h)
{
	int fd, ret;

	if (S_ISDIR(n->type))
		return -EISDIR;
	if (!S_ISREG(n->type))
		return -EINVAL;
	if (size > INT64_MAX)
		return -EFBIG;
	if (h && (h->flags & O_ACCMODE) != O_RDONLY)
		return ftruncate(h->fd, (off_t)size) ? -errno : 0;
	fd = reopen_file(b, n, O_WRONLY);
	if (fd < 0)
		return fd;
	ret = ftruncate(fd, (off_t)size) ? -errno : 0;
	close(fd);
	return ret;
}

static int set_times(const struct pt_node *n, const struct fuse_setattr_in *in)
{
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
				  { .tv_nsec = UTIME_OMIT } };

	if (in->valid & FATTR_ATIME) {
		if (in->valid & FATTR_ATIME_NOW)
			ts[0].tv_nsec = UTIME_NOW;
		else
			ts[0] = (struct timespec){ .tv_sec = (time_t)in->atime,
						   .tv_nsec = in->atimensec };
	}
	if (in->valid & FATTR_MTIME) {
		if (in->valid & FATTR_MTIME_NOW)
			ts[1].tv_nsec = UTIME_NOW;
		else
			ts[1] = (struct timespec){ .tv_sec = (time_t)in->mtime,
						   .tv_nsec = in->mtimensec };
	}
	return utimensat(n->fd, "", ts, AT_EMPTY_PATH) ? -errno : 0;
}

/*
 * Ownership: files belong to the vmm's user, which the guest sees as 0.
 * chown to 0 (that user) or to the id the file already shows is a no-op
 * success; anything else would need privileges the guest's root does not
 * have on the host: -EPERM.
 */
static int check_chown(const struct pt_backend *b, const struct stat *st,
		       const struct fuse_setattr_in *in)
{
	if ((in->valid & FATTR_UID) && in->uid &&
	    in->uid != guest_uid(b, st->st_uid))
		return -EPERM;
	if ((in->valid & FATTR_GID) && in->gid &&
	    in->gid != guest_gid(b, st->st_gid))
		return -EPERM;
	return 0;
}

static int pt_setattr(struct fs_backend *fs, const struct fs_ctx *ctx,
		      uint64_t nodeid, const struct fuse_setattr_in *in,
		      struct fuse_attr *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = node_get(b, nodeid), *conn;
	const struct pt_handle *h = NULL;
	struct stat st;
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	if (!n)
		return -ESTALE;
	/* A file's own name may be gone (unlinked while open): its directory. */
	conn = S_ISDIR(n->type) ? n : n->parent;
	ret = conn ? check_connected(b, conn) : 0;
	if (!ret)
		ret = stat_fd(n->fd, &st);
	if (!ret)
		ret = check_chown(b, &st, in);
	if (ret)
		return ret;
	if (in->valid & FATTR_FH)
		h = handle_get(b, nodeid, in->fh, false);
	if (in->valid & FATTR_MODE)
		ret = chmod_node(b, n,
				 guest_perm(in->mode, 0, S_ISDIR(n->type)),
				 h ? h->fd : -1);
	if (!ret && (in->valid & FATTR_SIZE))
		ret = truncate_node(b, n, in->size, h);
	if (!ret && (in->valid & (FATTR_ATIME | FATTR_MTIME)))
		ret = set_times(n, in);
	if (!ret)
		ret = stat_fd(n->fd, &st);
	if (!ret)
		to_attr(b, &st, out);
	return ret;
}

static int pt_statfs(struct fs_backend *fs, uint64_t nodeid,
		     struct fuse_kstatfs *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = node_get(b, nodeid);
	struct statfs sf;

	if (!n)
		return -ESTALE;
	if (fstatfs(n->fd, &sf) < 0)
		return -errno;
	*out = (struct fuse_kstatfs){
		.blocks = sf.f_blocks,
		.bfree = sf.f_bfree,
		.bavail = sf.f_bavail,
		.files = sf.f_files,
		.ffree = sf.f_ffree,
		.bsize = (uint32_t)sf.f_bsize,
		.namelen = (uint32_t)sf.f_namelen,
		.frsize = (uint32_t)sf.f_frsize,
	};
	return 0;
}

/* ---- ops: files ----------------------------------------------------- */

static int check_open_flags(const struct pt_backend *b, uint32_t flags)
{
	uint32_t acc = flags & O_ACCMODE;

	if (acc == O_ACCMODE)
		return -EINVAL;
	if (b->fs.read_only && (acc != O_RDONLY || (flags & O_TRUNC)))
		return -EROFS;
	return 0;
}

static int pt_open(struct fs_backend *fs, uint64_t nodeid, uint32_t flags,
		   uint64_t *fh, uint32_t *open_flags)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = node_get(b, nodeid);
	int fd, ret;

	ret = check_open_flags(b, flags);
	if (ret)
		return ret;
	if (!n)
		return -ESTALE;
	if (S_ISDIR(n->type))
		return -EISDIR;
	if (S_ISLNK(n->type))
		return -ELOOP;
	/* FIFOs and sockets the guest kernel serves itself; never opened. */
	if (!S_ISREG(n->type))
		return -ENXIO;
	ret = fd_budget(b, 1);
	if (ret)
		return ret;
	fd = reopen_file(b, n, (int)(flags & (PT_OPEN_KEEP | O_TRUNC)));
	if (fd < 0)
		return fd;
	*open_flags = 0;
	return handle_new(b, nodeid, fd, (int)(flags & PT_OPEN_KEEP), false,
			  fh);
}

static int pt_create(struct fs_backend *fs, const struct fs_ctx *ctx,
		     uint64_t parent, const char *name, uint32_t mode,
		     uint32_t flags, uint32_t umask, struct fs_entry *out,
		     uint64_t *fh, uint32_t *open_flags)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *dir;
	struct pt_where w;
	struct stat st;
	bool created;
	mode_t perm;
	int fd, opath, oflags, fl, ret;

	if (b->fs.read_only)
		return -EROFS;
	ret = check_open_flags(b, flags);
	if (ret)
		return ret;
	if ((mode & S_IFMT) && !S_ISREG(mode))
		return -EINVAL;
	ret = fd_budget(b, 2);
	if (!ret)
		ret = dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = where(b, dir, name, true, &w);
	if (ret)
		return ret;
	perm = guest_perm(mode, umask, false);
	oflags = (int)(flags & PT_OPEN_KEEP) | O_CREAT | O_EXCL | O_NOFOLLOW |
		 O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	fd = pt_openat2(w.dirfd, name, oflags, perm, PT_RESOLVE);
	created = fd >= 0;
	/* Without O_EXCL an existing file is opened, as open(2) would. */
	if (fd == -EEXIST && !(flags & O_EXCL))
		fd = pt_openat2(w.dirfd, name, oflags & ~(O_CREAT | O_EXCL), 0,
				PT_RESOLVE);
	if (fd < 0) {
		ret = fd == -ELOOP ? -EEXIST : fd;
		goto out_where;
	}
	ret = stat_fd(fd, &st);
	if (!ret && !S_ISREG(st.st_mode))
		ret = S_ISDIR(st.st_mode) ? -EISDIR : -ENXIO;
	fl = ret ? -1 : fcntl(fd, F_GETFL);
	if (!ret && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		ret = -errno;
	if (!ret && !created && (flags & O_TRUNC) &&
	    (flags & O_ACCMODE) != O_RDONLY && ftruncate(fd, 0) < 0)
		ret = -errno;
	/* Bits the process umask took: the guest's umask was applied. */
	if (!ret && created && (perm & ~st.st_mode & 07777) &&
	    fchmod(fd, (st.st_mode & 07777) | perm) < 0)
		ret = -errno;
	if (ret)
		goto out_fd;
	opath = open_path(w.dirfd, name);
	if (opath < 0) {
		ret = opath;
		goto out_fd;
	}
	ret = node_add(b, dir, name, &w, opath, out);
	if (ret)
		goto out_fd;
	if (out->attr.ino != st.st_ino) {
		ret = -EIO; /* a host process swapped the name meanwhile */
		goto out_node;
	}
	ret = handle_new(b, out->nodeid, fd, (int)(flags & PT_OPEN_KEEP), false,
			 fh);
	if (ret) {
		/* handle_new() closed fd */
		node_forget(b, node_get(b, out->nodeid), 1);
		goto out_where;
	}
	*open_flags = 0;
	where_done(&w);
	return 0;

out_node:
	node_forget(b, node_get(b, out->nodeid), 1);
out_fd:
	close(fd);
out_where:
	where_done(&w);
	return ret;
}

static int pt_io_fd(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		    bool write)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = handle_get(b, nodeid, fh, false);
	int acc;

	if (!h)
		return -EBADF;
	if (write && b->fs.read_only)
		return -EROFS;
	acc = h->flags & O_ACCMODE;
	if (write ? acc == O_RDONLY : acc == O_WRONLY)
		return -EBADF;
	return h->fd;
}

static ssize_t pt_read(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		       const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct pt_handle *h = handle_get(to_pt(fs), nodeid, fh, false);
	ssize_t n;

	if (!h)
		return -EBADF;
	if (iovcnt < 0 || iovcnt > IOV_MAX || offset > INT64_MAX)
		return -EINVAL;
	n = preadv(h->fd, iov, iovcnt, (off_t)offset);
	return n < 0 ? -errno : n;
}

static ssize_t pt_write(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
			const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = handle_get(b, nodeid, fh, false);
	ssize_t n;

	if (b->fs.read_only)
		return -EROFS;
	if (!h)
		return -EBADF;
	if (iovcnt < 0 || iovcnt > IOV_MAX || offset > INT64_MAX)
		return -EINVAL;
	/* O_APPEND descriptors append whatever the offset (Linux pwritev). */
	n = pwritev(h->fd, iov, iovcnt, (off_t)offset);
	return n < 0 ? -errno : n;
}

static int pt_flush(struct fs_backend *fs, uint64_t nodeid, uint64_t fh)
{
	/* Nothing is buffered here; close(2) happens at release. */
	return handle_get(to_pt(fs), nodeid, fh, false) ? 0 : -EBADF;
}

static int pt_release(struct fs_backend *fs, uint64_t nodeid, uint64_t fh)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = handle_get(b, nodeid, fh, false);

	if (!h)
		return -EBADF;
	handle_free(b, h);
	return 0;
}

static int sync_fd(int fd, bool datasync)
{
	return (datasync ? fdatasync(fd) : fsync(fd)) ? -errno : 0;
}

static int pt_fsync(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		    bool datasync)
{
	struct pt_handle *h = handle_get(to_pt(fs), nodeid, fh, false);

	return h ? sync_fd(h->fd, datasync) : -EBADF;
}

static int pt_fallocate(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
			uint64_t offset, uint64_t length, uint32_t mode)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = handle_get(b, nodeid, fh, false);

	if (b->fs.read_only)
		return -EROFS;
	if (!h)
		return -EBADF;
	if (mode != 0 && mode != FALLOC_FL_KEEP_SIZE &&
	    mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (offset > INT64_MAX || length > INT64_MAX - offset)
		return -EFBIG;
	if (fallocate(h->fd, (int)mode, (off_t)offset, (off_t)length))
		return -errno;
	return 0;
}

static int64_t pt_lseek(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
			uint64_t offset, uint32_t whence)
{
	struct pt_handle *h = handle_get(to_pt(fs), nodeid, fh, false);
	off_t off;

	if (!h)
		return -EBADF;
	if ((whence != SEEK_DATA && whence != SEEK_HOLE) || offset > INT64_MAX)
		return -EINVAL;
	off = lseek(h->fd, (off_t)offset, (int)whence);
	return off < 0 ? -errno : off;
}

/* ---- ops: directories ----------------------------------------------- */

static int pt_opendir(struct fs_backend *fs, uint64_t nodeid, uint64_t *fh)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n;
	int fd, ret;

	ret = dir_get(b, nodeid, &n);
	if (!ret)
		ret = check_connected(b, n);
	if (!ret)
		ret = fd_budget(b, 1);
	if (ret)
		return ret;
	fd = pt_openat2(n->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
			PT_RESOLVE);
	if (fd < 0)
		return fd;
	return handle_new(b, nodeid, fd, O_RDONLY, true, fh);
}

/* The i-th (from 0) mask path in dir, if storage has it: false when full. */
static bool add_mask_entry(struct pt_backend *b, const struct pt_mask *m,
			   uint64_t cookie, struct fs_dirbuf *out)
{
	struct stat st;
	int fd, ret;

	if (storage_dir(b, m->parent, false, &fd))
		return true;
	ret = stat_at(fd, m->name, &st);
	if (fd != b->storage_fd)
		close(fd);
	if (ret)
		return true;
	return fs_dirbuf__add(out, m->name, strlen(m->name), st.st_ino,
			      IFTODT(st.st_mode), cookie);
}

/*
 * ".", ".." and the mask paths in this directory that storage holds, in
 * that order, each after its cookie. *full: out has no more room.
 */
static void add_synthetic(struct pt_backend *b, const struct pt_node *n,
			  const struct pt_mask *masks, uint64_t offset,
			  struct fs_dirbuf *out, bool *full)
{
	const struct pt_node *up = n->parent ? n->parent : n;
	const struct pt_mask *m;
	uint64_t done, i;

	*full = false;
	if (!offset)
		done = 0;
	else if (offset & PT_SYN_OFF)
		done = offset & ~PT_SYN_OFF;
	else
		return; /* in the host's entries already */
	if (done < PT_SYN_DOT && !fs_dirbuf__add(out, ".", 1, n->ino, DT_DIR,
						 PT_SYN_OFF | PT_SYN_DOT))
		goto full;
	if (done < PT_SYN_DDOT && !fs_dirbuf__add(out, "..", 2, up->ino, DT_DIR,
						  PT_SYN_OFF | PT_SYN_DDOT))
		goto full;
	if (!masks)
		return;
	for (m = masks->child, i = PT_SYN_MASK0; m; m = m->next) {
		if (!m->masked)
			continue;
		if (done < i && !add_mask_entry(b, m, PT_SYN_OFF | i, out))
			goto full;
		i++;
	}
	return;
full:
	*full = true;
}

static int add_host_entries(struct pt_backend *b, struct pt_handle *h,
			    const struct pt_mask *masks, uint64_t pos,
			    struct fs_dirbuf *out)
{
	size_t used = out->used, len;
	const struct pt_mask *m;
	struct dirent64 *d;
	ssize_t n, i;

	if (!h->dents) {
		h->dents = malloc(PT_DIRENT_BUF);
		if (!h->dents)
			return -ENOMEM;
	}
	if (lseek(h->fd, (off_t)pos, SEEK_SET) < 0)
		return out->used > used ? 0 : -errno;
	/* Ends: every getdents64 moves on, or says the directory is over. */
	for (;;) {
		n = getdents64(h->fd, h->dents, PT_DIRENT_BUF);
		if (n <= 0)
			return n < 0 && out->used == used ? -errno : 0;
		for (i = 0; i < n; i += d->d_reclen) {
			d = (struct dirent64 *)(h->dents + i);
			if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
				continue;
			m = masks ? mask_child(masks, d->d_name) : NULL;
			if (m && m->masked)
				continue; /* hidden; storage's is synthetic */
			/* A cookie we could not tell from ours: give up. */
			if (d->d_off <= 0 || ((uint64_t)d->d_off & PT_SYN_OFF))
				return out->used > used ? 0 : -EIO;
			len = strlen(d->d_name);
			if (!fs_dirbuf__add(out, d->d_name, len, d->d_ino,
					    d->d_type, (uint64_t)d->d_off))
				return 0;
		}
	}
}

static int pt_readdir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		      uint64_t offset, struct fs_dirbuf *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = handle_get(b, nodeid, fh, true);
	struct pt_node *n = node_get(b, nodeid);
	const struct pt_mask *masks;
	bool full;

	if (!h)
		return -EBADF;
	if (!n)
		return -ESTALE;
	masks = n->tree == PT_SOURCE ? n->mask : NULL;
	add_synthetic(b, n, masks, offset, out, &full);
	if (full)
		return 0;
	return add_host_entries(b, h, masks, (offset & PT_SYN_OFF) ? 0 : offset,
				out);
}

static int pt_releasedir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = handle_get(b, nodeid, fh, true);

	if (!h)
		return -EBADF;
	handle_free(b, h);
	return 0;
}

static int pt_fsyncdir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		       bool datasync)
{
	struct pt_handle *h = handle_get(to_pt(fs), nodeid, fh, true);

	return h ? sync_fd(h->fd, datasync) : -EBADF;
}

/* ---- create and destroy --------------------------------------------- */

static void pt_destroy(struct fs_backend *fs)
{
	struct pt_backend *b = to_pt(fs);
	struct hlink *l, *next;
	size_t i;

	hashtable__for_each_safe(&b->handles, i, l, next)
		handle_free(b, hashtable__entry(l, struct pt_handle, link));
	/* Every node at once: parents need not outlive children here. */
	hashtable__for_each_safe(&b->by_id, i, l, next)
		node_free(b, hashtable__entry(l, struct pt_node, by_id));
	hashtable__exit(&b->handles);
	hashtable__exit(&b->by_id);
	hashtable__exit(&b->by_ino);
	mask_free(b->masks);
	if (b->storage_fd >= 0)
		close(b->storage_fd);
	free(b->name);
	free(b);
}

static const struct fs_backend_ops pt_ops = {
	.lookup = pt_lookup,
	.forget = pt_forget,
	.getattr = pt_getattr,
	.setattr = pt_setattr,
	.readlink = pt_readlink,
	.mknod = pt_mknod,
	.mkdir = pt_mkdir,
	.symlink = pt_symlink,
	.unlink = pt_unlink,
	.rmdir = pt_rmdir,
	.rename = pt_rename,
	.link = pt_link,
	.open = pt_open,
	.create = pt_create,
	.io_fd = pt_io_fd,
	.read = pt_read,
	.write = pt_write,
	.flush = pt_flush,
	.release = pt_release,
	.fsync = pt_fsync,
	.opendir = pt_opendir,
	.readdir = pt_readdir,
	.releasedir = pt_releasedir,
	.fsyncdir = pt_fsyncdir,
	.statfs = pt_statfs,
	.fallocate = pt_fallocate,
	.lseek = pt_lseek,
	.destroy = pt_destroy,
};

/* An absolute host directory, opened O_PATH; st filled. */
static int open_host_dir(const char *name, const char *what, const char *path,
			 struct stat *st)
{
	int fd, ret;

	if (!path || path[0] != '/') {
		pr_err("%s: %s %s%s%s: must be an absolute path", name, what,
		       path ? "\"" : "", path ? path : "missing",
		       path ? "\"" : "");
		return -EINVAL;
	}
	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		pr_err("%s: %s %s: %s", name, what, path,
		       ret == -ENOTDIR ? "not a directory" : strerror(-ret));
		return ret;
	}
	ret = stat_fd(fd, st);
	if (ret) {
		pr_err("%s: %s %s: %s", name, what, path, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
}

static int create_masks(struct pt_backend *b, const struct fs_bind_params *p)
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
	int ret = beneath(b->storage_fd, src->st_dev, src->st_ino);

	if (ret == 0)
		ret = beneath(b->root->fd, sto->st_dev, sto->st_ino);
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

static int create_storage(struct pt_backend *b, const struct fs_bind_params *p,
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
	fd = open_host_dir(b->name, "mask storage", p->mask_storage, &st);
	if (fd < 0)
		return fd;
	b->storage_fd = fd;
	b->storage_dev = st.st_dev;
	b->storage_ino = st.st_ino;
	return check_storage(b, p, src, &st);
}

static int create_root(struct pt_backend *b, const struct fs_bind_params *p,
		       struct stat *st)
{
	struct pt_node *n;
	int fd;

	fd = open_host_dir(b->name, "source", p->source, st);
	if (fd < 0)
		return fd;
	n = calloc(1, sizeof(*n));
	if (!n) {
		close(fd);
		return -ENOMEM;
	}
	n->id = FUSE_ROOT_ID;
	n->dev = st->st_dev;
	n->ino = st->st_ino;
	n->type = S_IFDIR;
	n->fd = fd;
	n->nlookup = 1;
	n->tree = PT_SOURCE;
	n->mask = b->masks;
	hash_add(&b->by_id, &n->by_id, n->id);
	hash_add(&b->by_ino, &n->by_ino, ino_key(n->dev, n->ino));
	b->nr_fds++;
	b->root = n;
	return 0;
}

/*
 * At most half the process's descriptors (soft RLIMIT_NOFILE): the rest
 * stay for the vmm's other devices, however many files the guest keeps
 * looked up. The integrator raises the limit for big trees.
 */
static size_t fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return SIZE_MAX;
	if (rl.rlim_cur / 2 < PT_MIN_FDS)
		return PT_MIN_FDS;
	return (size_t)(rl.rlim_cur / 2);
}

int passthrough__create(struct fs_backend **out, const struct fs_bind_params *p)
{
	struct pt_backend *b;
	struct stat src;
	int ret;

	*out = NULL;
	if (!p)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->storage_fd = -1;
	b->next_id = FUSE_ROOT_ID + 1;
	b->next_fh = 1;
	b->euid = geteuid();
	b->egid = getegid();
	b->max_fds = fd_limit();
	b->fs.ops = &pt_ops;
	b->fs.read_only = p->read_only;
	if (p->name)
		b->name = strdup(p->name);
	else if (asprintf(&b->name, "bind:%s", p->source ? p->source : "?") < 0)
		b->name = NULL;
	if (!b->name) {
		free(b);
		return -ENOMEM;
	}
	b->fs.name = b->name;
	ret = hashtable__init(&b->by_id, PT_HASH_MIN_BITS);
	if (!ret)
		ret = hashtable__init(&b->by_ino, PT_HASH_MIN_BITS);
	if (!ret)
		ret = hashtable__init(&b->handles, PT_HASH_MIN_BITS);
	if (!ret)
		ret = create_masks(b, p);
	if (!ret)
		ret = create_root(b, p, &src);
	if (!ret)
		ret = create_storage(b, p, &src);
	if (ret) {
		pt_destroy(&b->fs);
		return ret;
	}
	*out = &b->fs;
	return 0;
}
