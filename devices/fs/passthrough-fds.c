// SPDX-License-Identifier: GPL-2.0
/*
 * The `bind` backend's node descriptors: a node keeps its O_PATH
 * descriptor only while the mount's budget has room, least recently used
 * first out, and opens it again when an op needs it. A node remembers
 * its inode by the kernel's file handle (name_to_handle_at, which needs
 * no privilege); with CAP_DAC_READ_SEARCH it is opened again by that
 * handle (open_by_handle_at on its tree's root, as virtiofsd's
 * --inode-file-handles does), else by its recorded name from its
 * directory under the usual rules (openat2 beneath, no symlinks). Either
 * way the descriptor must be the node's inode (st_dev, st_ino, type, and
 * the same file handle, whose generation tells a reused inode number
 * from the file that had it): anything else is -ESTALE, never another
 * file. Documentation/virtio-fs.md, "Limits".
 *
 * What keeps a descriptor from closing under an op that uses it: each op
 * starts an epoch (pt_op_begin), every node an op touches is stamped with
 * it, and eviction takes only nodes stamped before; nodes with an open
 * handle and the root stay open and off the list.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/fs/passthrough-internal.h"

/* The largest handle the kernel hands out (MAX_HANDLE_SZ). */
struct pt_fh_buf {
	struct file_handle fh;
	unsigned char bytes[PT_HANDLE_MAX];
};

void pt_op_begin(struct pt_backend *b)
{
	b->epoch++;
	/* What the last op reserved and did not open goes back. */
	if (b->shared && b->reserved)
		fd_budget__put(b->shared, b->reserved);
	b->reserved = 0;
}

/*
 * The monitor's budget follows nr_fds: a descriptor opened takes the
 * op's reservation (pt_fd_budget), else one of its own; one that could
 * not (opened outside an op: create) is simply not charged, and closing
 * gives back only what was charged.
 */
void pt_fd_held(struct pt_backend *b)
{
	b->nr_fds++;
	if (!b->shared)
		return;
	if (b->reserved) {
		b->reserved--;
		b->charged++;
	} else if (!fd_budget__take(b->shared, 1)) {
		b->charged++;
	}
}

void pt_fd_released(struct pt_backend *b)
{
	b->nr_fds--;
	if (b->shared && b->charged > b->nr_fds) {
		b->charged--;
		fd_budget__put(b->shared, 1);
	}
}

void pt_fd_unshare(struct pt_backend *b)
{
	if (b->shared)
		fd_budget__put(b->shared, b->charged + b->reserved);
	b->charged = b->reserved = 0;
}

static bool on_lru(const struct pt_node *n)
{
	return !list_empty(&n->lru);
}

/* Used now: stamped with the op's epoch and first in line to stay. */
static void touch(struct pt_backend *b, struct pt_node *n)
{
	n->used = b->epoch;
	if (on_lru(n)) {
		list_del(&n->lru);
		list_add(&n->lru, &b->lru);
	}
}

void pt_fd_install(struct pt_backend *b, struct pt_node *n, int fd)
{
	n->fd = fd;
	pt_fd_held(b);
	if (n != b->root && !n->nopen)
		list_add(&n->lru, &b->lru);
	touch(b, n);
}

void pt_fd_close(struct pt_backend *b, struct pt_node *n)
{
	if (on_lru(n))
		list_del(&n->lru);
	if (n->fd >= 0) {
		close(n->fd);
		pt_fd_released(b);
	}
	n->fd = -1;
}

/*
 * Room for want more descriptors: the least recently used node
 * descriptors closed until there is, but none an op of this epoch uses.
 */
/* The least recently used node descriptor no op of this epoch uses. */
static bool evict_one(struct pt_backend *b)
{
	struct pt_node *n;

	for (struct list_head *l = b->lru.prev; l != &b->lru; l = l->prev) {
		n = list_entry(l, struct pt_node, lru);
		if (n->used != b->epoch) {
			pt_fd_close(b, n);
			return true;
		}
	}
	return false;
}

/*
 * The monitor's budget (shared by every bind mount, vsock, the API): the
 * op's want reserved from it, idle node descriptors closed while it
 * has no room. 0, or -EMFILE.
 */
static int shared_budget(struct pt_backend *b, size_t want)
{
	size_t need = want > b->reserved ? want - b->reserved : 0;

	if (!b->shared || !need)
		return 0;
	while (fd_budget__take(b->shared, need))
		if (!evict_one(b)) {
			if (!b->shared_warned)
				pr_warn("%s: the monitor's descriptor budget "
					"is spent: opens fail with EMFILE "
					"until the guest closes some",
					b->name);
			b->shared_warned = true;
			return -EMFILE;
		}
	b->reserved += need;
	return 0;
}

int pt_fd_budget(struct pt_backend *b, size_t want)
{
	struct list_head *l = b->lru.prev, *prev;
	struct pt_node *n;

	/* From the oldest; those of this op are few, and skipped. */
	while (b->nr_fds + want > b->max_fds && l != &b->lru) {
		prev = l->prev;
		n = list_entry(l, struct pt_node, lru);
		if (n->used != b->epoch)
			pt_fd_close(b, n);
		l = prev;
	}
	if (b->nr_fds + want <= b->max_fds)
		return shared_budget(b, want);
	if (!b->fds_warned) {
		pr_warn("%s: %zu host file descriptors in use, as many as this "
			"mount may, by open files and the op at hand: opens "
			"fail with ENFILE until the guest closes some",
			b->name, b->nr_fds);
		b->fds_warned = true;
	}
	return -ENFILE;
}

void pt_node_opened(struct pt_backend *b, struct pt_node *n)
{
	if (!n->nopen++ && on_lru(n))
		list_del(&n->lru);
}

void pt_node_closed(struct pt_backend *b, struct pt_node *n)
{
	if (!n->nopen || --n->nopen)
		return;
	if (n->fd >= 0 && n != b->root)
		list_add(&n->lru, &b->lru);
}

/* fd's file handle into buf, and its mount id: 0 or -errno. */
static int handle_of(int fd, struct pt_fh_buf *buf, int *mnt)
{
	buf->fh.handle_bytes = PT_HANDLE_MAX;
	if (name_to_handle_at(fd, "", &buf->fh, mnt, AT_EMPTY_PATH))
		return -errno;
	return 0;
}

/*
 * n remembers the file handle of fd, its descriptor: without one (a file
 * system that exports none: -EOPNOTSUPP) it is known by st_dev and st_ino
 * alone.
 */
void pt_node_set_handle(struct pt_node *n, int fd)
{
	struct pt_fh_buf buf;
	size_t size;

	free(n->fh);
	n->fh = NULL;
	if (handle_of(fd, &buf, &n->mnt_id))
		return;
	size = sizeof(buf.fh) + buf.fh.handle_bytes;
	n->fh = malloc(size);
	if (n->fh)
		memcpy(n->fh, &buf, size);
}

/*
 * fd (a descriptor of n's st_dev and st_ino) is n's file, not a later
 * one that got the same inode number: the same file handle.
 */
bool pt_node_same_file(const struct pt_node *n, int fd)
{
	struct pt_fh_buf buf;
	int mnt;

	if (!n->fh)
		return true; /* nothing more to tell them apart by */
	if (handle_of(fd, &buf, &mnt))
		return false;
	return buf.fh.handle_type == n->fh->handle_type &&
	       buf.fh.handle_bytes == n->fh->handle_bytes &&
	       !memcmp(buf.fh.f_handle, n->fh->f_handle, buf.fh.handle_bytes);
}

/*
 * n opened by its file handle on its tree's root: -EOPNOTSUPP when that
 * cannot be done here (no handle, another mount, no CAP_DAC_READ_SEARCH:
 * the next try goes by name), -ESTALE when the inode is gone.
 */
static int open_by_handle(struct pt_backend *b, struct pt_node *n)
{
	int mfd, mnt, fd;

	if (!b->by_handle || !n->fh)
		return -EOPNOTSUPP;
	mfd = n->tree == PT_STORAGE ? b->storage_mount_fd : b->mount_fd;
	mnt = n->tree == PT_STORAGE ? b->storage_mnt : b->root->mnt_id;
	if (mfd < 0 || n->mnt_id != mnt)
		return -EOPNOTSUPP;
	fd = open_by_handle_at(mfd, n->fh, PT_OPATH);
	if (fd >= 0)
		return fd;
	if (errno == EPERM) {
		/* The jail dropped the capability: names from now on. */
		pr_debug("%s: open_by_handle_at: %s: reopening by name",
			 b->name, strerror(errno));
		b->by_handle = false;
		return -EOPNOTSUPP;
	}
	if (errno == ESTALE || errno == ENOENT)
		return -ESTALE;
	return -errno;
}

/* n opened again by its recorded name, from its directory (open). */
static int open_by_name(struct pt_backend *b, struct pt_node *n)
{
	bool owned;
	int dirfd, fd, ret;

	ret = pt_node_dirfd(b, n, &dirfd, &owned);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret;
	fd = pt_open_path(dirfd, n->name);
	if (owned)
		close(dirfd);
	if (fd == -ENOENT || fd == -ENOTDIR)
		return -ESTALE; /* removed, or renamed by a host process */
	return fd;
}

/* One node opened again, its directory's descriptor open if it needs it. */
static int reopen_one(struct pt_backend *b, struct pt_node *n)
{
	struct stat st;
	bool by_name = false;
	int fd, ret;

	if (n->parent && !n->mask_root && n->parent->fd >= 0)
		touch(b, n->parent); /* not evicted to make the room */
	ret = pt_fd_budget(b, 1);
	if (ret)
		return ret;
	fd = open_by_handle(b, n);
	if (fd == -EOPNOTSUPP) {
		fd = open_by_name(b, n);
		by_name = true;
	}
	if (fd < 0)
		return fd;
	ret = pt_stat_fd(fd, &st);
	if (!ret && (!pt_same_inode(&st, n->dev, n->ino) ||
		     (st.st_mode & S_IFMT) != n->type ||
		     (by_name && !pt_node_same_file(n, fd))))
		ret = -ESTALE;
	if (ret) {
		close(fd);
		return ret;
	}
	pt_fd_install(b, n, fd);
	return 0;
}

/*
 * n's O_PATH descriptor, opened again if it was closed; it stays open
 * until the next op at least. -ESTALE: n's file is gone, or its name now
 * names another file; -ENFILE: no room.
 */
int pt_fd(struct pt_backend *b, struct pt_node *n)
{
	struct pt_node *a;
	unsigned int hops;
	int ret;

	for (hops = 0; n->fd < 0; hops++) {
		if (n->stale || hops > PT_MAX_WALK)
			return -ESTALE;
		/*
		 * By handle each node opens alone; by name the nearest
		 * closed ancestor whose directory is open goes first.
		 */
		a = n;
		if (!b->by_handle || !n->fh)
			while (!a->mask_root && a->parent &&
			       a->parent->fd < 0 && !a->parent->stale)
				a = a->parent;
		ret = reopen_one(b, a);
		if (ret)
			return ret;
	}
	touch(b, n);
	return n->fd;
}

/* A descriptor of directory dfd that open_by_handle_at takes, or -1. */
static int mount_fd(struct pt_backend *b, int dfd)
{
	int fd = pt_openat2(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
			    PT_RESOLVE);

	if (fd < 0)
		return -1;
	pt_fd_held(b);
	return fd;
}

/*
 * Whether file handles can reopen nodes here: the root's handle opens
 * the root again (CAP_DAC_READ_SEARCH, a file system that exports
 * handles). Else every node is reopened by name. Called at create, before
 * the seccomp filter (which allows both calls on the fs threads).
 */
void pt_fds_create(struct pt_backend *b)
{
	struct pt_fh_buf buf;
	struct stat st;
	int fd;

	pt_node_set_handle(b->root, b->root->fd);
	if (!b->root->fh)
		return;
	b->mount_fd = mount_fd(b, b->root->fd);
	if (b->mount_fd < 0)
		return;
	fd = open_by_handle_at(b->mount_fd, b->root->fh, PT_OPATH);
	if (fd >= 0) {
		b->by_handle = !pt_stat_fd(fd, &st) &&
			       pt_same_inode(&st, b->root->dev, b->root->ino);
		close(fd);
	}
	if (!b->by_handle) {
		pt_fds_destroy(b);
		return;
	}
	if (b->storage_fd >= 0 &&
	    !handle_of(b->storage_fd, &buf, &b->storage_mnt))
		b->storage_mount_fd = mount_fd(b, b->storage_fd);
}

void pt_fds_destroy(struct pt_backend *b)
{
	if (b->mount_fd >= 0) {
		close(b->mount_fd);
		pt_fd_released(b);
	}
	if (b->storage_mount_fd >= 0) {
		close(b->storage_mount_fd);
		pt_fd_released(b);
	}
	b->mount_fd = b->storage_mount_fd = -1;
}

/* The host's stat of n, through its descriptor (opened again if need be). */
int pt_node_stat(struct pt_backend *b, struct pt_node *n, struct stat *st)
{
	int fd = pt_fd(b, n);

	return fd < 0 ? fd : pt_stat_fd(fd, st);
}
