// SPDX-License-Identifier: GPL-2.0
/*
 * memfs.c - the `memory` mount source: an in-RAM POSIX file system.
 *
 * Objects:
 *  - inodes, found by node id in a hash table (ids are handed out from a
 *    64-bit counter and never reused, so a stale or forged id misses);
 *  - directory entries, found by (directory, name) in one hash table
 *    keyed with SipHash (the guest picks the names: a keyed hash keeps it
 *    from flooding one bucket), and listed per directory in an array
 *    kept in cookie order for readdir;
 *  - file data in MEMFS_CHUNK_SIZE chunks in a radix tree per file, so a
 *    sparse file costs only the chunks written;
 *  - open handles, found by fh in a hash table, at most MEMFS_MAX_HANDLES.
 *
 * Everything the guest can make us allocate is charged to `used`, which
 * never exceeds max_bytes: inodes, entries and their names, symlink
 * targets, data chunks, radix tree nodes, directories' slot arrays and the
 * inode and entry tables' buckets, each at its size. Open handles are
 * bounded by count instead. The charge is the memory held up to malloc's
 * own overhead.
 *
 * All ops run on the device's one event loop thread: no locking. This
 * file holds the ops on names, attributes, handles and directories, and
 * create and destroy; the map of the others is in memfs-internal.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs/memfs-internal.h"
#include "lib/compiler.h"

/* ---- ops ------------------------------------------------------------ */

static int memfs_lookup(struct fs_backend *b, uint64_t parent, const char *name,
			struct fs_entry *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *dir, *ino;
	struct memfs_dirent *d;
	size_t len;
	int err;

	err = memfs_dir_get(fs, parent, &dir);
	if (err)
		return err;
	/* "." and ".." only come from the guest's NFS export paths. */
	if (!strcmp(name, ".")) {
		memfs_fill_entry(dir, out);
		return 0;
	}
	if (!strcmp(name, "..")) {
		if (!dir->u.dir.parent)
			return -ENOENT;
		memfs_fill_entry(dir->u.dir.parent, out);
		return 0;
	}
	err = memfs_name_check(name, &len);
	if (err)
		return err;
	d = memfs_dent_find(fs, dir, name, len);
	if (!d)
		return -ENOENT;
	ino = d->inode;
	memfs_fill_entry(ino, out);
	return 0;
}

static void memfs_forget(struct fs_backend *b, uint64_t nodeid,
			 uint64_t nlookup)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = memfs_inode_get(fs, nodeid);

	if (!ino)
		return;
	ino->nlookup -= min_u64(nlookup, ino->nlookup);
	memfs_inode_put(fs, ino);
}

static int memfs_getattr(struct fs_backend *b, uint64_t nodeid,
			 struct fuse_attr *out)
{
	struct memfs_inode *ino = memfs_inode_get(to_memfs(b), nodeid);

	if (!ino)
		return -ESTALE;
	memfs_fill_attr(ino, out);
	return 0;
}

static int set_time(struct timespec *ts, uint64_t sec, uint32_t nsec)
{
	if (nsec >= NSEC_PER_SEC)
		return -EINVAL;
	ts->tv_sec = (time_t)sec;
	ts->tv_nsec = nsec;
	return 0;
}

static int memfs_setattr(struct fs_backend *b, const struct fs_ctx *ctx,
			 uint64_t nodeid, const struct fuse_setattr_in *in,
			 struct fuse_attr *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = memfs_inode_get(fs, nodeid);
	struct timespec t = memfs_now(), atime, mtime, ctime = t;
	uint32_t valid = in->valid;
	bool mtime_set = false;

	if (!ino)
		return -ESTALE;
	/* Check everything first: a refused setattr changes nothing. */
	atime = ino->atime;
	mtime = ino->mtime;
	if (valid & FATTR_SIZE) {
		if (S_ISDIR(ino->mode))
			return -EISDIR;
		if (!S_ISREG(ino->mode))
			return -EINVAL;
		if (in->size > MEMFS_MAX_FILE_SIZE)
			return -EFBIG;
	}
	if (valid & FATTR_ATIME) {
		if (valid & FATTR_ATIME_NOW)
			atime = t;
		else if (set_time(&atime, in->atime, in->atimensec))
			return -EINVAL;
	}
	if (valid & FATTR_MTIME) {
		mtime_set = true;
		if (valid & FATTR_MTIME_NOW)
			mtime = t;
		else if (set_time(&mtime, in->mtime, in->mtimensec))
			return -EINVAL;
	}
	if ((valid & FATTR_CTIME) && set_time(&ctime, in->ctime, in->ctimensec))
		return -EINVAL;

	if (valid & FATTR_MODE)
		ino->mode = (ino->mode & S_IFMT) | (in->mode & 07777);
	if (valid & FATTR_UID)
		ino->uid = in->uid;
	if (valid & FATTR_GID)
		ino->gid = in->gid;
	if ((valid & FATTR_KILL_SUIDGID) && S_ISREG(ino->mode)) {
		ino->mode &= ~S_ISUID;
		if (ino->mode & S_IXGRP)
			ino->mode &= ~S_ISGID;
	}
	if ((valid & FATTR_SIZE) && in->size != ino->size) {
		memfs_data_truncate(fs, ino, in->size);
		if (!mtime_set)
			mtime = t;
	}
	ino->atime = atime;
	ino->mtime = mtime;
	if (valid &
	    (FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_SIZE | FATTR_ATIME |
	     FATTR_MTIME | FATTR_CTIME | FATTR_KILL_SUIDGID))
		ino->ctime = ctime;
	memfs_fill_attr(ino, out);
	return 0;
}

static ssize_t memfs_readlink(struct fs_backend *b, uint64_t nodeid, char *buf,
			      size_t size)
{
	struct memfs_inode *ino = memfs_inode_get(to_memfs(b), nodeid);
	size_t n;

	if (!ino)
		return -ESTALE;
	if (!S_ISLNK(ino->mode))
		return -EINVAL;
	n = min_u64(size, ino->size);
	memcpy(buf, ino->u.target, n);
	return (ssize_t)n;
}

static int create_node(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, uint32_t mode,
		       uint32_t rdev, const char *target,
		       struct memfs_inode **ino)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *dir;
	int err;

	err = memfs_dir_get(fs, parent, &dir);
	if (err)
		return err;
	return memfs_make_node(fs, ctx, dir, name, mode, rdev, target, ino);
}

static int memfs_mknod(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, uint32_t mode,
		       uint32_t rdev, uint32_t umask, struct fs_entry *out)
{
	struct memfs_inode *ino;
	uint32_t type = mode & S_IFMT;
	int err;

	switch (type) {
	case 0:
		type = S_IFREG;
		fallthrough;
	case S_IFREG:
	case S_IFIFO:
	case S_IFSOCK:
		rdev = 0;
		break;
	case S_IFCHR:
	case S_IFBLK:
		/*
		 * The guest's own device numbers, as tmpfs keeps them: only
		 * the guest kernel can open one (and not on its nodev
		 * mount); the backend never opens anything but a regular
		 * file (open_check()).
		 */
		break;
	default:
		return -EINVAL;
	}
	err = create_node(b, ctx, parent, name, type | (mode & ~umask & 07777),
			  rdev, NULL, &ino);
	if (err)
		return err;
	memfs_fill_entry(ino, out);
	return 0;
}

static int memfs_mkdir(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, uint32_t mode,
		       uint32_t umask, struct fs_entry *out)
{
	struct memfs_inode *ino;
	int err;

	err = create_node(b, ctx, parent, name,
			  S_IFDIR | (mode & ~umask & 07777), 0, NULL, &ino);
	if (err)
		return err;
	memfs_fill_entry(ino, out);
	return 0;
}

static int memfs_symlink(struct fs_backend *b, const struct fs_ctx *ctx,
			 uint64_t parent, const char *name, const char *target,
			 struct fs_entry *out)
{
	struct memfs_inode *ino;
	int err;

	err = create_node(b, ctx, parent, name, S_IFLNK | 0777, 0, target,
			  &ino);
	if (err)
		return err;
	memfs_fill_entry(ino, out);
	return 0;
}

static int find_entry(struct memfs *fs, uint64_t parent, const char *name,
		      struct memfs_dirent **out)
{
	struct memfs_inode *dir;
	size_t len;
	int err;

	err = memfs_dir_get(fs, parent, &dir);
	if (err)
		return err;
	err = memfs_name_check(name, &len);
	if (err)
		return err;
	*out = memfs_dent_find(fs, dir, name, len);
	return *out ? 0 : -ENOENT;
}

static int memfs_unlink(struct fs_backend *b, uint64_t parent, const char *name)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_dirent *d;
	struct memfs_inode *ino;
	int err;

	err = find_entry(fs, parent, name, &d);
	if (err)
		return err;
	ino = d->inode;
	if (S_ISDIR(ino->mode))
		return -EISDIR;
	memfs_drop_entry(fs, d, memfs_now());
	memfs_inode_put(fs, ino);
	return 0;
}

static int memfs_rmdir(struct fs_backend *b, uint64_t parent, const char *name)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_dirent *d;
	struct memfs_inode *ino;
	int err;

	err = find_entry(fs, parent, name, &d);
	if (err)
		return err;
	ino = d->inode;
	if (!S_ISDIR(ino->mode))
		return -ENOTDIR;
	if (ino->u.dir.live)
		return -ENOTEMPTY;
	memfs_drop_entry(fs, d, memfs_now());
	memfs_inode_put(fs, ino);
	return 0;
}

static int rename_exchange(struct memfs *fs, struct memfs_dirent *od,
			   struct memfs_dirent *nd)
{
	struct memfs_inode *a = od->inode, *b = nd->inode;
	struct memfs_inode *odir = od->dir, *ndir = nd->dir;
	struct timespec t;

	if (a == b)
		return 0;
	if (S_ISDIR(a->mode) && memfs_in_subtree(fs, ndir, a))
		return -EINVAL;
	if (S_ISDIR(b->mode) && memfs_in_subtree(fs, odir, b))
		return -EINVAL;
	od->inode = b;
	nd->inode = a;
	if (odir != ndir) {
		if (S_ISDIR(a->mode)) {
			a->u.dir.parent = ndir;
			odir->nlink--;
			ndir->nlink++;
		}
		if (S_ISDIR(b->mode)) {
			b->u.dir.parent = odir;
			ndir->nlink--;
			odir->nlink++;
		}
	}
	t = memfs_now();
	a->ctime = t;
	b->ctime = t;
	memfs_touch_dir(odir, t);
	memfs_touch_dir(ndir, t);
	return 0;
}

static int memfs_rename(struct fs_backend *b, uint64_t parent, const char *name,
			uint64_t newparent, const char *newname, uint32_t flags)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *odir, *ndir, *src, *dst = NULL;
	struct memfs_dirent *od, *nd, *moved;
	uint64_t cost, release;
	struct timespec t;
	size_t newlen;
	int err;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	err = find_entry(fs, parent, name, &od);
	if (err)
		return err;
	err = memfs_dir_get(fs, newparent, &ndir);
	if (err)
		return err;
	err = memfs_name_check(newname, &newlen);
	if (err)
		return err;
	if (!ndir->nlink)
		return -ENOENT;
	odir = od->dir;
	src = od->inode;
	nd = memfs_dent_find(fs, ndir, newname, newlen);
	if (flags & RENAME_EXCHANGE) {
		if (!nd)
			return -ENOENT;
		return rename_exchange(fs, od, nd);
	}
	if (nd && (flags & RENAME_NOREPLACE))
		return -EEXIST;
	if (nd) {
		dst = nd->inode;
		/* Two links to one file: POSIX says do nothing. */
		if (dst == src)
			return 0;
		if (S_ISDIR(src->mode) && !S_ISDIR(dst->mode))
			return -ENOTDIR;
		if (!S_ISDIR(src->mode) && S_ISDIR(dst->mode))
			return -EISDIR;
		if (S_ISDIR(dst->mode) && dst->u.dir.live)
			return -ENOTEMPTY;
	}
	if (S_ISDIR(src->mode) && memfs_in_subtree(fs, ndir, src))
		return -EINVAL;
	if (S_ISDIR(src->mode) && odir != ndir && !dst &&
	    ndir->nlink >= MEMFS_LINK_MAX)
		return -EMLINK;

	/* The net change in charge must fit; then nothing below fails. */
	cost = DIRENT_COST(newlen);
	release =
		DIRENT_COST(od->namelen) + (nd ? DIRENT_COST(nd->namelen) : 0);
	if (cost > release && cost - release > fs->max_bytes - fs->used)
		return -ENOSPC;
	err = memfs_dir_reserve(fs, ndir);
	if (err)
		return err;
	moved = memfs_dent_alloc(ndir, newname, newlen, src);
	if (!moved)
		return -ENOMEM;

	/*
	 * The new entry goes in first, into the slot reserved for it: taking
	 * the old ones out may shrink or free ndir's slot array.
	 */
	t = memfs_now();
	fs->used += cost;
	memfs_dent_attach(fs, moved);
	if (nd)
		memfs_drop_entry(fs, nd, t);
	memfs_dent_detach(fs, od);
	memfs_uncharge(fs, DIRENT_COST(od->namelen));
	free(od);
	if (S_ISDIR(src->mode) && odir != ndir) {
		src->u.dir.parent = ndir;
		odir->nlink--;
		ndir->nlink++;
	}
	src->ctime = t;
	memfs_touch_dir(odir, t);
	memfs_touch_dir(ndir, t);
	if (dst)
		memfs_inode_put(fs, dst);
	return 0;
}

static int memfs_link(struct fs_backend *b, uint64_t nodeid, uint64_t newparent,
		      const char *newname, struct fs_entry *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = memfs_inode_get(fs, nodeid), *dir;
	struct memfs_dirent *d;
	struct timespec t;
	size_t len;
	int err;

	if (!ino)
		return -ESTALE;
	if (S_ISDIR(ino->mode))
		return -EPERM;
	err = memfs_dir_get(fs, newparent, &dir);
	if (err)
		return err;
	err = memfs_name_check(newname, &len);
	if (err)
		return err;
	if (!dir->nlink)
		return -ENOENT;
	if (memfs_dent_find(fs, dir, newname, len))
		return -EEXIST;
	if (!ino->nlink)
		return -ENOENT; /* unlinked: cannot come back */
	if (ino->nlink >= MEMFS_LINK_MAX)
		return -EMLINK;
	if (memfs_charge(fs, DIRENT_COST(len)))
		return -ENOSPC;
	err = memfs_dir_reserve(fs, dir);
	if (err)
		goto out_uncharge;
	d = memfs_dent_alloc(dir, newname, len, ino);
	if (!d) {
		err = -ENOMEM;
		goto out_uncharge;
	}
	memfs_dent_attach(fs, d);
	ino->nlink++;
	t = memfs_now();
	ino->ctime = t;
	memfs_touch_dir(dir, t);
	memfs_fill_entry(ino, out);
	return 0;

out_uncharge:
	memfs_uncharge(fs, DIRENT_COST(len));
	return err;
}

static int open_check(const struct memfs_inode *ino)
{
	if (S_ISDIR(ino->mode))
		return -EISDIR;
	if (S_ISLNK(ino->mode))
		return -ELOOP;
	if (!S_ISREG(ino->mode))
		return -ENXIO; /* FIFOs and sockets: the guest kernel's */
	return 0;
}

static int memfs_open(struct fs_backend *b, uint64_t nodeid, uint32_t flags,
		      uint64_t *fh, uint32_t *open_flags)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino = memfs_inode_get(fs, nodeid);
	struct memfs_handle *h;
	struct timespec t;
	int err;

	if (!ino)
		return -ESTALE;
	err = open_check(ino);
	if (err)
		return err;
	err = memfs_handle_new(fs, &h);
	if (err)
		return err;
	/* FUSE_ATOMIC_O_TRUNC: the truncation comes with the open. */
	if ((flags & O_TRUNC) && memfs_can_write(flags)) {
		memfs_data_truncate(fs, ino, 0);
		t = memfs_now();
		ino->mtime = t;
		ino->ctime = t;
	}
	memfs_handle_attach(fs, h, ino, flags, false, fh);
	*open_flags = 0;
	return 0;
}

static int memfs_create(struct fs_backend *b, const struct fs_ctx *ctx,
			uint64_t parent, const char *name, uint32_t mode,
			uint32_t flags, uint32_t umask, struct fs_entry *out,
			uint64_t *fh, uint32_t *open_flags)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	struct memfs_inode *ino;
	int err;

	err = memfs_handle_new(fs, &h);
	if (err)
		return err;
	err = create_node(b, ctx, parent, name,
			  S_IFREG | (mode & ~umask & 07777), 0, NULL, &ino);
	if (err) {
		free(h);
		return err;
	}
	memfs_handle_attach(fs, h, ino, flags, false, fh);
	memfs_fill_entry(ino, out);
	*open_flags = 0;
	return 0;
}

static ssize_t memfs_read(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			  const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	uint64_t done = 0, n;
	int err, i;

	err = memfs_file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (!memfs_can_read(h->flags))
		return -EBADF;
	if (iovcnt < 0)
		return -EINVAL;
	if (offset >= h->inode->size)
		return 0;
	for (i = 0; i < iovcnt && done < SSIZE_MAX; i++) {
		n = memfs_data_read(h->inode, iov[i].iov_base,
				    min_u64(iov[i].iov_len, SSIZE_MAX - done),
				    offset + done);
		done += n;
		if (n < iov[i].iov_len)
			break;
	}
	memfs_touch_atime(h->inode);
	return (ssize_t)done;
}

static ssize_t memfs_write(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			   const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino;
	struct memfs_handle *h;
	uint64_t done = 0;
	struct timespec t;
	int64_t n = 0;
	int err, i;

	err = memfs_file_handle(fs, nodeid, fh, &h);
	if (err)
		return err;
	if (!memfs_can_write(h->flags))
		return -EBADF;
	if (iovcnt < 0)
		return -EINVAL;
	ino = h->inode;
	if (h->flags & O_APPEND)
		offset = ino->size;
	for (i = 0; i < iovcnt && done < SSIZE_MAX; i++) {
		if (offset > MEMFS_MAX_FILE_SIZE - done) {
			n = -EFBIG;
			break;
		}
		n = memfs_data_write(fs, ino, iov[i].iov_base,
				     min_u64(iov[i].iov_len, SSIZE_MAX - done),
				     offset + done);
		if (n < 0)
			break;
		done += (uint64_t)n;
		if ((uint64_t)n < iov[i].iov_len)
			break;
	}
	if (!done)
		return n < 0 ? n : 0;
	t = memfs_now();
	ino->mtime = t;
	ino->ctime = t;
	return (ssize_t)done;
}

static int memfs_flush(struct fs_backend *b, uint64_t nodeid, uint64_t fh)
{
	struct memfs_handle *h;

	return memfs_file_handle(to_memfs(b), nodeid, fh, &h);
}

static int memfs_release(struct fs_backend *b, uint64_t nodeid, uint64_t fh)
{
	return memfs_handle_release(to_memfs(b), nodeid, fh, false);
}

static int memfs_fsync(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		       bool datasync)
{
	struct memfs_handle *h;

	return memfs_file_handle(to_memfs(b), nodeid, fh, &h);
}

static int memfs_opendir(struct fs_backend *b, uint64_t nodeid, uint64_t *fh)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_handle *h;
	struct memfs_inode *dir;
	int err;

	err = memfs_dir_get(fs, nodeid, &dir);
	if (err)
		return err;
	err = memfs_handle_new(fs, &h);
	if (err)
		return err;
	memfs_handle_attach(fs, h, dir, O_RDONLY, true, fh);
	return 0;
}

static uint32_t dt_type(uint32_t mode)
{
	return (mode & S_IFMT) >> 12; /* DT_* = S_IF* >> 12 */
}

static int memfs_readdir(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			 uint64_t offset, struct fs_dirbuf *out)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *dir;
	struct memfs_handle *h;
	struct memfs_dir *md;
	struct memfs_dirent *d;
	size_t i;
	int err;

	err = memfs_handle_get(fs, nodeid, fh, true, &h);
	if (err)
		return err;
	dir = h->inode;
	md = &dir->u.dir;
	if (!md->parent)
		return -ENOENT; /* removed, as getdents(2) on Linux */
	if (offset < COOKIE_DOT &&
	    !fs_dirbuf__add(out, ".", 1, dir->link.key, DT_DIR, COOKIE_DOT))
		return 0;
	if (offset < COOKIE_DOTDOT &&
	    !fs_dirbuf__add(out, "..", 2, md->parent->link.key, DT_DIR,
			    COOKIE_DOTDOT))
		return 0;
	for (i = memfs_dir_search(md, offset > COOKIE_DOTDOT ? offset :
							       COOKIE_DOTDOT);
	     i < md->nr; i++) {
		d = md->slots[i].d;
		if (!d)
			continue;
		if (!fs_dirbuf__add(out, d->name, d->namelen,
				    d->inode->link.key, dt_type(d->inode->mode),
				    d->cookie))
			break;
	}
	memfs_touch_atime(dir);
	return 0;
}

static int memfs_releasedir(struct fs_backend *b, uint64_t nodeid, uint64_t fh)
{
	return memfs_handle_release(to_memfs(b), nodeid, fh, true);
}

static int memfs_fsyncdir(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			  bool datasync)
{
	struct memfs_handle *h;

	return memfs_handle_get(to_memfs(b), nodeid, fh, true, &h);
}

/* What creating one more (short-named) file charges. */
#define FILE_COST (INODE_COST + DIRENT_COST(1))

static void memfs_usage(const struct fs_backend *b, uint64_t *used,
			uint64_t *max)
{
	const struct memfs *fs = container_of(b, const struct memfs, b);

	*used = __atomic_load_n(&fs->used, __ATOMIC_RELAXED);
	*max = fs->max_bytes;
}

static int memfs_statfs(struct fs_backend *b, uint64_t nodeid,
			struct fuse_kstatfs *out)
{
	struct memfs *fs = to_memfs(b);
	uint64_t avail = fs->max_bytes - fs->used;

	if (!memfs_inode_get(fs, nodeid))
		return -ESTALE;
	memset(out, 0, sizeof(*out));
	out->bsize = MEMFS_BLOCK_SIZE;
	out->frsize = MEMFS_BLOCK_SIZE;
	out->blocks = fs->max_bytes / MEMFS_BLOCK_SIZE;
	out->bfree = avail / MEMFS_BLOCK_SIZE;
	out->bavail = out->bfree;
	out->ffree = avail / FILE_COST;
	out->files = fs->nr_inodes + out->ffree;
	out->namelen = FS_NAME_MAX;
	return 0;
}

/*
 * One handle, or one inode nothing names once its lookups are gone:
 * released, and true. Removing may shrink its table, so each walk
 * starts again after one.
 */
static bool end_one(struct memfs *fs)
{
	struct memfs_handle *h;
	struct memfs_inode *ino;
	struct hlink *l, *next;
	size_t i;

	hashtable__for_each_safe(&fs->handles, i, l, next)
	{
		h = hashtable__entry(l, struct memfs_handle, link);
		return !memfs_handle_release(fs, h->inode->link.key,
					     h->link.key, h->dir);
	}
	hashtable__for_each_safe(&fs->inodes, i, l, next)
	{
		ino = hashtable__entry(l, struct memfs_inode, link);
		if (!ino->nlookup)
			continue;
		ino->nlookup = 0;
		memfs_inode_put(fs, ino);
		return true;
	}
	return false;
}

/* The files stay: only what the old session held goes (backend.h). */
static void memfs_end_session(struct fs_backend *b)
{
	struct memfs *fs = to_memfs(b);

	while (end_one(fs))
		;
}

static void memfs_destroy(struct fs_backend *b)
{
	struct memfs *fs = to_memfs(b);
	struct memfs_inode *ino;
	struct hlink *l, *next;
	size_t i;

	hashtable__for_each_safe(&fs->dents, i, l, next)
		free(hashtable__entry(l, struct memfs_dirent, hlink));
	hashtable__for_each_safe(&fs->handles, i, l, next)
		free(hashtable__entry(l, struct memfs_handle, link));
	hashtable__for_each_safe(&fs->inodes, i, l, next)
	{
		ino = hashtable__entry(l, struct memfs_inode, link);
		if (S_ISREG(ino->mode))
			memfs_data_free(fs, &ino->u.data);
		else if (S_ISLNK(ino->mode))
			free(ino->u.target);
		else if (S_ISDIR(ino->mode))
			free(ino->u.dir.slots);
		free(ino);
	}
	hashtable__exit(&fs->dents);
	hashtable__exit(&fs->handles);
	hashtable__exit(&fs->inodes);
	free(fs->name);
	free(fs);
}

static const struct fs_backend_ops memfs_ops = {
	.lookup = memfs_lookup,
	.forget = memfs_forget,
	.end_session = memfs_end_session,
	.getattr = memfs_getattr,
	.setattr = memfs_setattr,
	.readlink = memfs_readlink,
	.mknod = memfs_mknod,
	.mkdir = memfs_mkdir,
	.symlink = memfs_symlink,
	.unlink = memfs_unlink,
	.rmdir = memfs_rmdir,
	.rename = memfs_rename,
	.link = memfs_link,
	.open = memfs_open,
	.create = memfs_create,
	.read = memfs_read,
	.write = memfs_write,
	.flush = memfs_flush,
	.release = memfs_release,
	.fsync = memfs_fsync,
	.opendir = memfs_opendir,
	.readdir = memfs_readdir,
	.releasedir = memfs_releasedir,
	.fsyncdir = memfs_fsyncdir,
	.statfs = memfs_statfs,
	.usage = memfs_usage,
	.fallocate = memfs_fallocate,
	.lseek = memfs_lseek,
	.destroy = memfs_destroy,
};

/* ---- create and seed ------------------------------------------------ */

static const struct fs_ctx seed_owner = { .uid = 0, .gid = 0 };

static int seed_fail(const struct memfs *fs, const char *path, const char *why)
{
	pr_err("%s: seed file \"%s\": %s", fs->b.name, path ? path : "(null)",
	       why);
	return -EINVAL;
}

static int seed_nospc(const struct memfs *fs, const char *path)
{
	pr_err("%s: seed file \"%s\": does not fit in maxBytes (%llu bytes)",
	       fs->b.name, path, (unsigned long long)fs->max_bytes);
	return -ENOSPC;
}

static int seed_file(struct memfs *fs, const struct memfs_file *f)
{
	const char *path = f->path, *p, *end;
	char name[FS_NAME_MAX + 1];
	struct memfs_inode *cur = fs->root, *ino = NULL;
	struct memfs_dirent *d;
	int64_t n;
	size_t len;
	bool last;
	int err;

	if (!path || path[0] != '/')
		return seed_fail(fs, path, "not an absolute path");
	if (f->len && !f->data)
		return seed_fail(fs, path, "no data");
	for (p = path + 1;; p = end + 1) {
		end = strchrnul(p, '/');
		len = end - p;
		last = !*end;
		if (!len)
			return seed_fail(fs, path, "empty path component");
		if (len > FS_NAME_MAX)
			return seed_fail(
				fs, path,
				"path component longer than 255 bytes");
		if ((len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return seed_fail(fs, path,
					 "\".\" or \"..\" path component");
		memcpy(name, p, len);
		name[len] = '\0';
		d = memfs_dent_find(fs, cur, name, len);
		if (d && !last) {
			if (!S_ISDIR(d->inode->mode))
				return seed_fail(
					fs, path,
					"a parent is also a seed file");
			cur = d->inode;
			continue;
		}
		if (d)
			return seed_fail(
				fs, path,
				S_ISDIR(d->inode->mode) ?
					"also a parent of another seed file" :
					"duplicate path");
		err = memfs_make_node(fs, &seed_owner, cur, name,
				      last ? S_IFREG | 0644 : S_IFDIR | 0755, 0,
				      NULL, &ino);
		if (err == -ENOSPC)
			return seed_nospc(fs, path);
		if (err)
			return err;
		if (last)
			break;
		cur = ino;
	}
	if (!f->len)
		return 0;
	n = memfs_data_write(fs, ino, f->data, f->len, 0);
	if (n == -ENOSPC || (n >= 0 && (size_t)n < f->len))
		return seed_nospc(fs, path);
	return n < 0 ? (int)n : 0;
}

static void seed_key(struct memfs *fs)
{
	uint64_t k[2];
	struct timespec t;

	if (getrandom(fs->key, sizeof(fs->key), GRND_NONBLOCK) ==
	    sizeof(fs->key))
		return;
	/* No entropy yet: still a per-instance key, if a guessable one. */
	clock_gettime(CLOCK_MONOTONIC, &t);
	k[0] = (uint64_t)t.tv_nsec ^ (uint64_t)(uintptr_t)fs;
	k[1] = (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 32);
	memcpy(fs->key, k, sizeof(fs->key));
}

int memfs__create(struct fs_backend **out, const struct memfs_params *p)
{
	struct memfs *fs;
	struct memfs_inode *root;
	struct timespec t;
	unsigned int i;
	int err;

	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->b.ops = &memfs_ops;
	if (asprintf(&fs->name, "memory:%s", p->name ? p->name : "") < 0) {
		fs->name = NULL;
		err = -ENOMEM;
		goto out_destroy;
	}
	fs->b.name = fs->name;
	fs->max_bytes = p->max_bytes ? p->max_bytes : MEMFS_DEFAULT_MAX_BYTES;
	fs->next_id = FUSE_ROOT_ID + 1;
	fs->next_fh = 1;
	fs->next_cookie = COOKIE_FIRST;
	seed_key(fs);
	memfs_data_setup(fs);
	err = hashtable__init(&fs->inodes, TABLE_MIN_BITS);
	if (!err)
		err = hashtable__init(&fs->handles, TABLE_MIN_BITS);
	if (!err)
		err = hashtable__init(&fs->dents, TABLE_MIN_BITS);
	if (err)
		goto out_destroy;

	/* The root and the two charged tables' first buckets. */
	if (memfs_charge(fs,
			 INODE_COST + 2 * TABLE_MIN_BUCKETS * sizeof(void *))) {
		pr_err("%s: maxBytes %llu is too small for the root",
		       fs->b.name, (unsigned long long)fs->max_bytes);
		err = -ENOSPC;
		goto out_destroy;
	}
	root = calloc(1, sizeof(*root));
	if (!root) {
		err = -ENOMEM;
		goto out_destroy;
	}
	t = memfs_now();
	root->link.key = FUSE_ROOT_ID;
	root->mode = S_IFDIR | 0755;
	root->nlink = 2;
	root->atime = root->mtime = root->ctime = t;
	root->u.dir.parent = root;
	memfs_table_insert(fs, &fs->inodes, &root->link, root->link.key);
	fs->nr_inodes = 1;
	fs->root = root;

	for (i = 0; i < p->nr_files; i++) {
		err = seed_file(fs, &p->files[i]);
		if (err)
			goto out_destroy;
	}
	*out = &fs->b;
	return 0;

out_destroy:
	memfs_destroy(&fs->b);
	return err;
}
