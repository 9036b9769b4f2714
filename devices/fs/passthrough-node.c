// SPDX-License-Identifier: GPL-2.0
/*
 * The `bind` backend's nodes (one per host inode the guest has looked
 * up) and open handles, and the system calls every op resolves names
 * with: one component at a time, never following a symlink.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "devices/fs/passthrough-internal.h"

/* ---- system call helpers ------------------------------------------- */

int pt_openat2(int dirfd, const char *path, int flags, mode_t mode,
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
int pt_open_path(int dirfd, const char *name)
{
	return pt_openat2(dirfd, name, PT_OPATH, 0, PT_RESOLVE);
}

int pt_open_dir(int dirfd, const char *name)
{
	return pt_openat2(dirfd, name, PT_OPATH | O_DIRECTORY, 0, PT_RESOLVE);
}

int pt_stat_fd(int fd, struct stat *st)
{
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		return -errno;
	return 0;
}

int pt_stat_at(int dirfd, const char *name, struct stat *st)
{
	return fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
}

bool pt_same_inode(const struct stat *st, dev_t dev, ino_t ino)
{
	return st->st_dev == dev && st->st_ino == ino;
}

/*
 * Whether the directory fd is (dev, ino) or lies beneath it, by walking
 * ".." up to "/" (at most PT_MAX_WALK hops). 1 yes, 0 no, or -errno.
 */
int pt_beneath(int fd, dev_t dev, ino_t ino)
{
	struct stat st, up_st;
	unsigned int hops;
	int cur = fd, up, ret = 0;

	ret = pt_stat_fd(cur, &st);
	for (hops = 0; !ret && hops < PT_MAX_WALK; hops++) {
		if (pt_same_inode(&st, dev, ino)) {
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
		ret = pt_stat_fd(cur, &up_st);
		if (!ret && pt_same_inode(&up_st, st.st_dev, st.st_ino))
			break; /* ".." of "/" is "/": not beneath */
		st = up_st;
	}
	if (cur != fd)
		close(cur);
	return ret;
}

/* An absolute host directory, opened O_PATH; st filled. */
int pt_open_host_dir(const char *name, const char *what, const char *path,
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
	ret = pt_stat_fd(fd, st);
	if (ret) {
		pr_err("%s: %s %s: %s", name, what, path, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
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
mode_t pt_guest_perm(uint32_t mode, uint32_t umask, bool dir)
{
	mode_t perm = mode & 07777 & ~umask;

	perm &= ~(mode_t)S_ISUID;
	if (!dir)
		perm &= ~(mode_t)S_ISGID;
	return perm;
}

/*
 * The vmm's own ids are the guest's root; every other id as it is. With
 * ownership passthrough every id is as it is.
 */
uint32_t pt_guest_uid(const struct pt_backend *b, uid_t uid)
{
	if (b->own == FS_OWNERSHIP_PASSTHROUGH)
		return (uint32_t)uid;
	return uid == b->euid ? 0 : (uint32_t)uid;
}

uint32_t pt_guest_gid(const struct pt_backend *b, gid_t gid)
{
	if (b->own == FS_OWNERSHIP_PASSTHROUGH)
		return (uint32_t)gid;
	return gid == b->egid ? 0 : (uint32_t)gid;
}

/* fuse_attr.rdev is the kernel's new_encode_dev() format. */
static uint32_t encode_dev(dev_t dev)
{
	unsigned int maj = major(dev), min = minor(dev);

	return (min & 0xff) | (maj << 8) | ((min & ~0xffU) << 12);
}

void pt_to_attr(const struct pt_backend *b, const struct stat *st,
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
		.uid = pt_guest_uid(b, st->st_uid),
		.gid = pt_guest_gid(b, st->st_gid),
		.rdev = encode_dev(st->st_rdev),
		.blksize = (uint32_t)st->st_blksize,
	};
}

/* What the guest sees of node n, whose host stat is st. */
void pt_node_attr(const struct pt_backend *b, const struct pt_node *n,
		  const struct stat *st, struct fuse_attr *a)
{
	pt_to_attr(b, st, a);
	pt_meta_attr(n, a);
}

uint64_t pt_ino_key(dev_t dev, ino_t ino)
{
	return (uint64_t)ino ^ ((uint64_t)dev * 0xc2b2ae3d27d4eb4fULL);
}

/* At two entries a bucket a table doubles; a failed grow only costs time. */
void pt_hash_add(struct hashtable *h, struct hlink *l, uint64_t key)
{
	hashtable__add(h, l, key);
	if (h->count >= 2 * hashtable__buckets(h) && h->bits < PT_HASH_MAX_BITS)
		hashtable__resize(h, h->bits + 1);
}

/* ---- nodes ---------------------------------------------------------- */

struct pt_node *pt_node_get(struct pt_backend *b, uint64_t id)
{
	struct hlink *l = hashtable__first(&b->by_id, id);

	return l ? hashtable__entry(l, struct pt_node, by_id) : NULL;
}

int pt_dir_get(struct pt_backend *b, uint64_t id, struct pt_node **np)
{
	struct pt_node *n = pt_node_get(b, id);

	if (!n)
		return -ESTALE;
	if (!S_ISDIR(n->type))
		return -ENOTDIR;
	*np = n;
	return 0;
}

struct pt_node *pt_node_find(struct pt_backend *b, dev_t dev, ino_t ino)
{
	struct hlink *l;
	struct pt_node *n;

	for (l = hashtable__first(&b->by_ino, pt_ino_key(dev, ino)); l;
	     l = hashtable__next(l)) {
		n = hashtable__entry(l, struct pt_node, by_ino);
		if (n->dev == dev && n->ino == ino)
			return n;
	}
	return NULL;
}

void pt_node_free(struct pt_backend *b, struct pt_node *n)
{
	hashtable__del(&b->by_id, &n->by_id);
	if (!n->stale)
		hashtable__del(&b->by_ino, &n->by_ino);
	pt_fd_close(b, n);
	b->nr_nodes--;
	free(n->fh);
	free(n->name);
	free(n);
}

/* Frees n, then its parents, while nothing counts them any more. */
static void node_put(struct pt_backend *b, struct pt_node *n)
{
	struct pt_node *p;

	while (n && n != b->root && !n->nlookup && !n->nref) {
		p = n->parent;
		pt_node_free(b, n);
		if (p)
			p->nref--;
		n = p;
	}
}

void pt_node_pin(struct pt_node *n)
{
	n->nref++;
}

void pt_node_unpin(struct pt_backend *b, struct pt_node *n)
{
	n->nref--;
	node_put(b, n);
}

/*
 * n is parent or one of its recorded ancestors. The recorded parents never
 * form a cycle (pt_node_place() keeps it so), so the walk ends at the root.
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
void pt_node_place(struct pt_backend *b, struct pt_node *n,
		   struct pt_node *parent, char *name, const struct pt_where *w)
{
	struct pt_node *old = n->parent;

	if (n == b->root || (S_ISDIR(n->type) && node_above(n, parent))) {
		free(name);
		return;
	}
	pt_node_pin(parent);
	n->parent = parent;
	free(n->name);
	n->name = name;
	n->tree = w->tree;
	n->mask = w->mask;
	n->mask_root = w->mask_root;
	if (old)
		pt_node_unpin(b, old);
}

void pt_fill_entry(const struct pt_backend *b, const struct pt_node *n,
		   const struct stat *st, struct fs_entry *out)
{
	out->nodeid = n->id;
	out->generation = 0;
	pt_node_attr(b, n, st, &out->attr);
}

/*
 * The node of the inode behind fd, if there is one. A node whose
 * descriptor was closed may have lost its inode meanwhile, and its
 * number gone to a new file: then (another file handle) it is stale,
 * out of the inode table, and the new file gets a node of its own. A
 * node found without a descriptor takes fd over (*fdp then -1).
 */
static struct pt_node *node_of(struct pt_backend *b, const struct stat *st,
			       int *fdp)
{
	struct pt_node *n = pt_node_find(b, st->st_dev, st->st_ino);

	if (!n || n->fd >= 0)
		return n;
	if (!pt_node_same_file(n, *fdp) || (st->st_mode & S_IFMT) != n->type) {
		hashtable__del(&b->by_ino, &n->by_ino);
		n->stale = true;
		return NULL;
	}
	if (!pt_fd_budget(b, 1)) {
		pt_fd_install(b, n, *fdp);
		*fdp = -1;
	}
	return n;
}

static int node_new(struct pt_backend *b, const struct stat *st, int fd,
		    struct pt_node **np)
{
	struct pt_node *n;
	int ret;

	if (b->nr_nodes >= PT_MAX_NODES) {
		if (!b->nodes_warned)
			pr_warn("%s: the guest holds %zu files looked up, as "
				"many as a mount may: lookups fail with ENFILE "
				"until it forgets some",
				b->name, b->nr_nodes);
		b->nodes_warned = true;
		return -ENFILE;
	}
	ret = pt_fd_budget(b, 1);
	n = ret ? NULL : calloc(1, sizeof(*n));
	if (!n)
		return ret ? ret : -ENOMEM;
	n->id = b->next_id++;
	n->dev = st->st_dev;
	n->ino = st->st_ino;
	n->type = st->st_mode & S_IFMT;
	n->fd = -1;
	list_init(&n->lru);
	pt_node_set_handle(n, fd);
	pt_hash_add(&b->by_id, &n->by_id, n->id);
	pt_hash_add(&b->by_ino, &n->by_ino, pt_ino_key(n->dev, n->ino));
	b->nr_nodes++;
	pt_fd_install(b, n, fd);
	*np = n;
	return 0;
}

/*
 * Counts one lookup of the inode behind fd (an O_PATH descriptor of name
 * in dir, taken over: kept as a node's or closed) and fills out.
 */
int pt_node_add(struct pt_backend *b, struct pt_node *dir, const char *name,
		const struct pt_where *w, int fd, struct fs_entry *out)
{
	struct pt_node *n;
	struct stat st;
	char *nm;
	int ret;

	ret = pt_stat_fd(fd, &st);
	nm = ret ? NULL : strdup(name);
	if (!ret && !nm)
		ret = -ENOMEM;
	if (ret) {
		close(fd);
		return ret;
	}
	n = node_of(b, &st, &fd);
	if (n) {
		if (fd >= 0)
			close(fd);
		pt_node_place(b, n, dir, nm, w);
		n->nlookup++;
		pt_meta_load(b, n, w->dirfd, name);
		pt_fill_entry(b, n, &st, out);
		return 0;
	}
	ret = node_new(b, &st, fd, &n);
	if (ret) {
		close(fd);
		free(nm);
		return ret;
	}
	n->nlookup = 1;
	pt_node_place(b, n, dir, nm, w);
	pt_meta_load(b, n, w->dirfd, name);
	pt_fill_entry(b, n, &st, out);
	return 0;
}

void pt_node_forget(struct pt_backend *b, struct pt_node *n, uint64_t nlookup)
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
int pt_node_dirfd(struct pt_backend *b, const struct pt_node *n, int *fdp,
		  bool *owned)
{
	int ret;

	*owned = false;
	if (n->mask_root) {
		ret = pt_storage_dir(b, n->mask->parent, false, fdp);
		*owned = !ret && *fdp != b->storage_fd;
		return ret;
	}
	if (!n->parent)
		return -ESTALE;
	ret = pt_fd(b, n->parent);
	if (ret < 0)
		return ret;
	*fdp = ret;
	return 0;
}

/* n's recorded name in its recorded directory is still n. */
static bool hop_ok(struct pt_backend *b, const struct pt_node *n)
{
	struct stat st;
	bool owned;
	int fd, ret;

	if (pt_node_dirfd(b, n, &fd, &owned))
		return false;
	ret = pt_stat_at(fd, n->name, &st);
	if (owned)
		close(fd);
	return !ret && pt_same_inode(&st, n->dev, n->ino);
}

/*
 * Directory dir still lies beneath its tree's root (source, or storage
 * for masked paths): the recorded names checked hop by hop (a stat each),
 * and if one no longer matches (a host process renamed something) the
 * real parents walked up "..". -ESTALE: it was moved out of the tree (or
 * removed). A host process racing a move with the op can still get that
 * one op through: see the documentation.
 */
int pt_check_connected(struct pt_backend *b, struct pt_node *dir)
{
	const struct pt_node *n = dir;
	unsigned int hops;
	dev_t dev;
	ino_t ino;
	int fd, ret;

	for (hops = 0; n && n != b->root && hops < PT_MAX_WALK; hops++) {
		if (!hop_ok(b, n))
			break;
		if (n->mask_root)
			return 0; /* pt_storage_dir() opened its way beneath */
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
	fd = pt_fd(b, dir);
	if (fd < 0)
		return fd;
	ret = pt_beneath(fd, dev, ino);
	return ret == 1 ? 0 : -ESTALE;
}

/*
 * Node n itself is still in the tree, for ops that act on its inode
 * through its own descriptor (chmod, chown, utimes, link): a directory
 * as pt_check_connected() says; anything else must still be its
 * recorded name in a connected directory, or have no name left at all
 * (unlinked, still open in the guest). A file a host process moved out
 * of the tree answers -ESTALE, so the guest cannot change it or link it
 * back in.
 */
int pt_check_self(struct pt_backend *b, struct pt_node *n)
{
	struct stat st;
	int fd, ret;

	if (S_ISDIR(n->type) || n == b->root)
		return pt_check_connected(b, n);
	if (!n->mask_root && n->parent) {
		ret = pt_check_connected(b, n->parent);
		if (ret)
			return ret;
	}
	if (hop_ok(b, n))
		return 0;
	fd = pt_fd(b, n);
	ret = fd < 0 ? fd : pt_stat_fd(fd, &st);
	if (ret)
		return ret;
	return st.st_nlink ? -ESTALE : 0;
}

int pt_dir_begin(struct pt_backend *b, uint64_t parent, const char *name,
		 struct pt_node **dirp)
{
	int ret = check_name(name);

	if (!ret)
		ret = pt_dir_get(b, parent, dirp);
	if (!ret)
		ret = pt_check_connected(b, *dirp);
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
int pt_reopen_file(struct pt_backend *b, struct pt_node *n, int flags)
{
	struct stat st;
	bool owned;
	int dirfd, fd, fl, ret;

	if (!n->mask_root && n->parent) {
		ret = pt_check_connected(b, n->parent);
		if (ret)
			return ret;
	}
	ret = pt_node_dirfd(b, n, &dirfd, &owned);
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
	ret = pt_stat_fd(fd, &st);
	if (!ret && (!pt_same_inode(&st, n->dev, n->ino) ||
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
int pt_chmod_node(struct pt_backend *b, struct pt_node *n, mode_t mode, int hfd)
{
	int fd, nfd, ret;

	if (S_ISLNK(n->type))
		return -EOPNOTSUPP; /* Linux keeps symlinks' modes fixed */
	nfd = pt_fd(b, n);
	if (nfd < 0)
		return nfd;
	if (!syscall(PT_NR_FCHMODAT2, nfd, "", mode, AT_EMPTY_PATH))
		return 0;
	if (errno != ENOSYS)
		return -errno;
	/* Before Linux 6.6: through a descriptor opened for reading. */
	if (hfd >= 0)
		return fchmod(hfd, mode) ? -errno : 0;
	if (S_ISDIR(n->type))
		fd = pt_openat2(nfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
				PT_RESOLVE);
	else if (S_ISREG(n->type) || S_ISFIFO(n->type))
		fd = pt_reopen_file(b, n, O_RDONLY);
	else
		return -EOPNOTSUPP;
	if (fd < 0)
		return fd;
	ret = fchmod(fd, mode) ? -errno : 0;
	close(fd);
	return ret;
}

/* ---- handles -------------------------------------------------------- */

int pt_handle_new(struct pt_backend *b, uint64_t nodeid, int fd, int flags,
		  bool dir, uint64_t *fh)
{
	struct pt_node *n = pt_node_get(b, nodeid);
	struct pt_handle *h;
	int ret;

	/*
	 * The node's own descriptor stays open while a handle is: a file
	 * the guest unlinks while it holds it open has no name to be
	 * opened by again.
	 */
	ret = n ? pt_fd(b, n) : -ESTALE;
	h = ret < 0 ? NULL : calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		return ret < 0 ? ret : -ENOMEM;
	}
	pt_node_opened(b, n);
	h->nodeid = nodeid;
	h->fd = fd;
	h->flags = flags;
	h->dir = dir;
	*fh = b->next_fh++;
	pt_hash_add(&b->handles, &h->link, *fh);
	pt_fd_held(b);
	return 0;
}

struct pt_handle *pt_handle_get(struct pt_backend *b, uint64_t nodeid,
				uint64_t fh, bool dir)
{
	struct hlink *l = hashtable__first(&b->handles, fh);
	struct pt_handle *h;

	h = l ? hashtable__entry(l, struct pt_handle, link) : NULL;

	if (!h || h->nodeid != nodeid || h->dir != dir)
		return NULL;
	return h;
}

void pt_handle_free(struct pt_backend *b, struct pt_handle *h)
{
	struct pt_node *n = pt_node_get(b, h->nodeid);

	if (n)
		pt_node_closed(b, n);
	hashtable__del(&b->handles, &h->link);
	close(h->fd);
	pt_fd_released(b);
	free(h->dents);
	free(h);
}
