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
 * Every op runs on the device's event loop thread: no locking. This file
 * holds the ops on names and attributes, create and destroy; the map of
 * the others is in passthrough-internal.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/statfs.h>

#include "devices/fs/passthrough-internal.h"

/* ---- ops: names ----------------------------------------------------- */

static int pt_lookup(struct fs_backend *fs, uint64_t parent, const char *name,
		     struct fs_entry *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *dir;
	struct pt_where w;
	int fd, ret;

	pt_op_begin(b);
	ret = pt_dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = pt_locate(b, dir, name, false, &w);
	if (ret)
		return ret;
	fd = pt_open_path(w.dirfd, name);
	ret = fd < 0 ? fd : pt_node_add(b, dir, name, &w, fd, out);
	pt_locate_done(&w);
	return ret;
}

static void pt_forget(struct fs_backend *fs, uint64_t nodeid, uint64_t nlookup)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);

	if (n)
		pt_node_forget(b, n, nlookup);
}

static int pt_getattr(struct fs_backend *fs, uint64_t nodeid,
		      struct fuse_attr *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);
	struct stat st;
	int ret;

	pt_op_begin(b);
	if (!n)
		return -ESTALE;
	ret = pt_node_stat(b, n, &st);
	if (!ret)
		pt_node_attr(b, n, &st, out);
	return ret;
}

/*
 * The entry just made as name in w: counted as a lookup, checked to be of
 * the host type made, and given the permission bits the process umask
 * took away (the guest's umask was applied already; the vmm's must not
 * be).
 */
static int node_made(struct pt_backend *b, struct pt_node *dir,
		     const char *name, const struct pt_where *w, mode_t type,
		     mode_t perm, struct fs_entry *out)
{
	struct pt_node *n;
	struct stat st;
	int fd, ret;

	fd = pt_open_path(w->dirfd, name);
	if (fd < 0)
		return fd;
	ret = pt_node_add(b, dir, name, w, fd, out);
	if (ret)
		return ret;
	n = pt_node_get(b, out->nodeid);
	if (n->type != type) {
		pt_node_forget(b, n, 1); /* a host process raced us */
		return -EIO;
	}
	if (type == S_IFLNK)
		return 0;
	ret = pt_node_stat(b, n, &st);
	if (!ret && (perm & ~st.st_mode & 07777)) {
		ret = pt_chmod_node(b, n, (st.st_mode & 07777) | perm, -1);
		/* a socket before Linux 6.6: the host's mode stands */
		if (!ret)
			ret = pt_node_stat(b, n, &st);
		else if (ret == -EOPNOTSUPP)
			ret = 0;
	}
	if (ret) {
		pt_node_forget(b, n, 1);
		return ret;
	}
	pt_node_attr(b, n, &st, &out->attr);
	return 0;
}

/*
 * Ownership passthrough: the node just made in dir becomes the caller's,
 * with the group of a set-group-ID directory, then gets its full mode
 * back (chown clears set-user-ID, even for root).
 */
static int passthrough_owner(struct pt_backend *b, const struct fs_ctx *ctx,
			     struct pt_node *dir, struct fs_entry *out,
			     mode_t perm)
{
	struct pt_node *n = pt_node_get(b, out->nodeid);
	struct stat st, dst;
	gid_t gid = ctx->gid;
	int fd, ret;

	ret = pt_node_stat(b, dir, &dst);
	if (!ret && (dst.st_mode & S_ISGID))
		gid = dst.st_gid;
	fd = ret ? -1 : pt_fd(b, n);
	if (!ret && fd < 0)
		ret = fd;
	if (!ret && fchownat(fd, "", ctx->uid, gid,
			     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		ret = -errno;
	if (!ret && !S_ISLNK(n->type))
		ret = pt_chmod_node(b, n, perm, -1);
	if (!ret)
		ret = pt_node_stat(b, n, &st);
	if (ret) {
		pt_node_forget(b, n, 1);
		return ret;
	}
	pt_node_attr(b, n, &st, &out->attr);
	return 0;
}

/*
 * A mapped bind makes every node but a symlink as a host file or
 * directory the vmm's user owns, with host permissions safe on the host,
 * and the guest's metadata in its xattr: devices, FIFOs and sockets are
 * empty regular files. mode is the type and the guest's bits, its umask
 * applied. Undone if the xattr cannot be written.
 */
static int make_mapped(struct pt_backend *b, const struct fs_ctx *ctx,
		       struct pt_node *dir, const struct pt_where *w,
		       const char *name, uint32_t mode, uint32_t rdev,
		       struct fs_entry *out)
{
	bool isdir = S_ISDIR(mode);
	struct pt_meta m;
	mode_t hp;
	int fd, ret;

	ret = pt_meta_for_new(b, ctx, dir, mode, rdev, &m);
	if (ret)
		return ret;
	if (S_ISREG(mode) || isdir)
		hp = pt_host_perm(mode, isdir);
	else
		hp = PT_HOST_SPECIAL;
	if (isdir) {
		if (mkdirat(w->dirfd, name, hp) < 0)
			return -errno;
		fd = pt_openat2(w->dirfd, name,
				O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
				0, PT_RESOLVE);
	} else {
		fd = pt_openat2(w->dirfd, name,
				O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
					O_CLOEXEC | O_NONBLOCK,
				hp, PT_RESOLVE);
		if (fd < 0)
			return fd;
	}
	ret = fd;
	if (fd >= 0) {
		/* The vmm's umask may have taken the owner's bits. */
		ret = fchmod(fd, hp) ? -errno : 0;
		if (!ret)
			ret = pt_meta_write_fd(fd, &m);
		close(fd);
	}
	if (ret) {
		unlinkat(w->dirfd, name, isdir ? AT_REMOVEDIR : 0);
		return ret;
	}
	return node_made(b, dir, name, w, isdir ? S_IFDIR : S_IFREG, hp, out);
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

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	if (!type)
		type = S_IFREG;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK &&
	    type != S_IFCHR && type != S_IFBLK)
		return -EINVAL;
	/*
	 * Real device nodes would be the host's devices, made by the vmm's
	 * user (root, often) with modes the guest picks: host processes
	 * could use them. A mapped bind keeps the guest's device as an empty
	 * regular file and its numbers in the xattr; the others refuse.
	 */
	if ((type == S_IFCHR || type == S_IFBLK) && !pt_mapped(b))
		return -EPERM;
	ret = pt_dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = pt_locate(b, dir, name, true, &w);
	if (ret)
		return ret;
	if (pt_mapped(b)) {
		ret = make_mapped(b, ctx, dir, &w, name,
				  type | (mode & 07777 & ~umask), rdev, out);
		goto out;
	}
	if (b->own == FS_OWNERSHIP_PASSTHROUGH)
		perm = mode & 07777 & ~umask;
	else
		perm = pt_guest_perm(mode, umask, false);
	if (mknodat(w.dirfd, name, type | perm, 0) < 0)
		ret = -errno;
	else
		ret = node_made(b, dir, name, &w, type, perm, out);
	if (!ret && b->own == FS_OWNERSHIP_PASSTHROUGH)
		ret = passthrough_owner(b, ctx, dir, out, perm);
out:
	pt_locate_done(&w);
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

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	ret = pt_dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = pt_locate(b, dir, name, true, &w);
	if (ret)
		return ret;
	if (pt_mapped(b)) {
		ret = make_mapped(b, ctx, dir, &w, name,
				  S_IFDIR | (mode & 07777 & ~umask), 0, out);
		goto out;
	}
	if (b->own == FS_OWNERSHIP_PASSTHROUGH)
		perm = mode & 07777 & ~umask;
	else
		perm = pt_guest_perm(mode, umask, true);
	if (mkdirat(w.dirfd, name, perm) < 0)
		ret = -errno;
	else
		ret = node_made(b, dir, name, &w, S_IFDIR, perm, out);
	if (!ret && b->own == FS_OWNERSHIP_PASSTHROUGH)
		ret = passthrough_owner(b, ctx, dir, out, perm);
out:
	pt_locate_done(&w);
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

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	if (!target)
		return -EINVAL;
	len = strnlen(target, FS_PATH_MAX);
	if (len >= FS_PATH_MAX)
		return -ENAMETOOLONG;
	if (!len)
		return -ENOENT;
	ret = pt_dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = pt_locate(b, dir, name, true, &w);
	if (ret)
		return ret;
	/* Stored as the guest wrote it; only the guest ever follows it. */
	if (symlinkat(target, w.dirfd, name) < 0)
		ret = -errno;
	else
		ret = node_made(b, dir, name, &w, S_IFLNK, 0, out);
	if (!ret && b->own == FS_OWNERSHIP_PASSTHROUGH)
		ret = passthrough_owner(b, ctx, dir, out, 0);
	pt_locate_done(&w);
	return ret;
}

static ssize_t pt_readlink(struct fs_backend *fs, uint64_t nodeid, char *buf,
			   size_t size)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);
	ssize_t len;
	int fd;

	pt_op_begin(b);
	if (!n)
		return -ESTALE;
	if (!S_ISLNK(n->type))
		return -EINVAL;
	fd = pt_fd(b, n);
	if (fd < 0)
		return fd;
	len = readlinkat(fd, "", buf, size);
	return len < 0 ? -errno : len;
}

static int remove_entry(struct pt_backend *b, uint64_t parent, const char *name,
			int flags)
{
	struct pt_node *dir;
	struct pt_where w;
	int ret;

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	ret = pt_dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = pt_locate(b, dir, name, false, &w);
	if (ret)
		return ret;
	ret = unlinkat(w.dirfd, name, flags) ? -errno : 0;
	pt_locate_done(&w);
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
	struct pt_node *n = pt_node_find(b, st->st_dev, st->st_ino);
	char *nm;

	if (!n)
		return;
	nm = strdup(name);
	if (nm)
		pt_node_place(b, n, dir, nm, w);
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

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	ret = pt_dir_begin(b, parent, name, &from);
	if (!ret)
		ret = pt_dir_begin(b, newparent, newname, &to);
	if (!ret)
		ret = pt_locate(b, from, name, false, &wf);
	if (ret)
		return ret;
	ret = pt_locate(b, to, newname, true, &wt);
	if (ret)
		goto out_from;
	if (wf.tree != wt.tree) {
		ret = -EXDEV; /* source and storage: two trees */
		goto out_to;
	}
	if (pt_mask_ancestor(&wf) || pt_mask_ancestor(&wt)) {
		ret = -EBUSY;
		goto out_to;
	}
	ret = pt_stat_at(wf.dirfd, name, &st_from);
	if (!ret && (flags & RENAME_EXCHANGE))
		ret = pt_stat_at(wt.dirfd, newname, &st_to);
	if (ret)
		goto out_to;
	if (renameat2(wf.dirfd, name, wt.dirfd, newname, flags) < 0) {
		ret = -errno;
		goto out_to;
	}
	pt_node_pin(from);
	pt_node_pin(to);
	node_moved(b, &st_from, to, newname, &wt);
	if (flags & RENAME_EXCHANGE)
		node_moved(b, &st_to, from, name, &wf);
	pt_node_unpin(b, to);
	pt_node_unpin(b, from);
out_to:
	pt_locate_done(&wt);
out_from:
	pt_locate_done(&wf);
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

	ret = pt_node_dirfd(b, n, &dirfd, &owned);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret;
	ret = linkat(dirfd, n->name, newdirfd, newname, 0) ? -errno : 0;
	if (owned)
		close(dirfd);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret;
	ret = pt_stat_at(newdirfd, newname, &st);
	if (!ret && pt_same_inode(&st, n->dev, n->ino))
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
	int fd, ret;

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	n = pt_node_get(b, nodeid);
	if (!n)
		return -ESTALE;
	if (S_ISDIR(n->type))
		return -EPERM;
	/*
	 * Not a file a host process moved out of the tree (its directory,
	 * or the file itself): no way back in.
	 */
	ret = pt_check_self(b, n);
	if (ret)
		return ret;
	ret = pt_dir_begin(b, newparent, newname, &dir);
	if (!ret)
		ret = pt_locate(b, dir, newname, true, &w);
	if (ret)
		return ret;
	if (w.tree != n->tree) {
		ret = -EXDEV;
		goto out;
	}
	fd = pt_fd(b, n);
	ret = fd < 0 ? fd : 0;
	if (!ret && linkat(fd, "", w.dirfd, newname, AT_EMPTY_PATH))
		ret = -errno;
	if (ret == -ENOENT || ret == -EPERM)
		ret = link_by_name(b, n, w.dirfd, newname);
	if (!ret)
		ret = pt_node_stat(b, n, &st);
	if (!ret) {
		n->nlookup++;
		pt_fill_entry(b, n, &st, out);
	}
out:
	pt_locate_done(&w);
	return ret;
}

/* ---- ops: attributes ------------------------------------------------ */

static int truncate_node(struct pt_backend *b, struct pt_node *n, uint64_t size,
			 const struct pt_handle *h)
{
	int fd, ret;

	if (S_ISDIR(n->type))
		return -EISDIR;
	if (pt_guest_type(n) != S_IFREG)
		return -EINVAL;
	if (size > INT64_MAX)
		return -EFBIG;
	if (h && (h->flags & O_ACCMODE) != O_RDONLY)
		return ftruncate(h->fd, (off_t)size) ? -errno : 0;
	fd = pt_reopen_file(b, n, O_WRONLY);
	if (fd < 0)
		return fd;
	ret = ftruncate(fd, (off_t)size) ? -errno : 0;
	close(fd);
	return ret;
}

static int set_times(struct pt_backend *b, struct pt_node *n,
		     const struct fuse_setattr_in *in)
{
	int fd = pt_fd(b, n);

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
	if (fd < 0)
		return fd;
	return utimensat(fd, "", ts, AT_EMPTY_PATH) ? -errno : 0;
}

/*
 * Squash: files belong to the vmm's user, which the guest sees as 0.
 * chown to 0 (that user) or to the id the file already shows is a no-op
 * success; anything else would need privileges the guest's root does not
 * have on the host: -EPERM.
 */
static int check_chown(const struct pt_backend *b, const struct stat *st,
		       const struct fuse_setattr_in *in)
{
	if ((in->valid & FATTR_UID) && in->uid &&
	    in->uid != pt_guest_uid(b, st->st_uid))
		return -EPERM;
	if ((in->valid & FATTR_GID) && in->gid &&
	    in->gid != pt_guest_gid(b, st->st_gid))
		return -EPERM;
	return 0;
}

/*
 * Set-user-ID and set-group-ID (if group-executable) of n's host file
 * cleared, as Linux clears them on a write by someone without
 * CAP_FSETID: in a squash or mapped bind nothing the guest writes stays
 * set-user-ID on the host, whoever the guest says writes (a root vmm
 * keeps them otherwise).
 */
static int drop_host_suid(struct pt_backend *b, struct pt_node *n, int hfd)
{
	struct stat st;
	int ret;

	if (b->own == FS_OWNERSHIP_PASSTHROUGH || !S_ISREG(n->type))
		return 0;
	ret = pt_node_stat(b, n, &st);
	if (ret || !pt_host_suid(&st))
		return ret;
	return pt_chmod_node(b, n, pt_killed_mode(st.st_mode) & 07777, hfd);
}

/* Ownership squash: chown refused to others, modes as safe as the host's. */
static int squash_setattr(struct pt_backend *b, struct pt_node *n,
			  const struct fuse_setattr_in *in,
			  const struct stat *st, int hfd)
{
	int ret = check_chown(b, st, in);

	if (!ret && (in->valid & FATTR_MODE))
		ret = pt_chmod_node(
			b, n, pt_guest_perm(in->mode, 0, S_ISDIR(n->type)),
			hfd);
	if (!ret && (in->valid & FATTR_KILL_SUIDGID))
		ret = drop_host_suid(b, n, hfd);
	return ret;
}

/* Ownership passthrough: the host's real ids and modes. */
static int passthrough_setattr(struct pt_backend *b, struct pt_node *n,
			       const struct fuse_setattr_in *in, int hfd)
{
	uid_t uid = (in->valid & FATTR_UID) ? in->uid : (uid_t)-1;
	gid_t gid = (in->valid & FATTR_GID) ? in->gid : (gid_t)-1;
	struct stat st;
	int fd, ret = 0;

	fd = pt_fd(b, n);
	if (fd < 0)
		return fd;
	if ((in->valid & (FATTR_UID | FATTR_GID)) &&
	    fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		return -errno;
	if (in->valid & FATTR_MODE)
		ret = pt_chmod_node(b, n, in->mode & 07777, hfd);
	if (ret || !(in->valid & FATTR_KILL_SUIDGID) || !S_ISREG(n->type))
		return ret;
	ret = pt_node_stat(b, n, &st);
	if (ret || !pt_host_suid(&st))
		return ret;
	return pt_chmod_node(b, n, pt_killed_mode(st.st_mode) & 07777, hfd);
}

static int pt_setattr(struct fs_backend *fs, const struct fs_ctx *ctx,
		      uint64_t nodeid, const struct fuse_setattr_in *in,
		      struct fuse_attr *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);
	const struct pt_handle *h = NULL;
	struct stat st;
	int hfd, ret;

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	if (!n)
		return -ESTALE;
	if (in->valid & FATTR_FH)
		h = pt_handle_get(b, nodeid, in->fh, false);
	hfd = h ? h->fd : -1;
	/*
	 * Through the guest's open handle the file is the guest's wherever
	 * it went (as with any descriptor), if its directory is still in the
	 * tree; else n itself must still be in the tree.
	 */
	if (h)
		ret = n->parent && !n->mask_root ?
			      pt_check_connected(b, n->parent) :
			      0;
	else
		ret = pt_check_self(b, n);
	if (!ret)
		ret = pt_node_stat(b, n, &st);
	if (ret)
		return ret;
	if (b->own == FS_OWNERSHIP_MAPPED)
		ret = pt_meta_setattr(b, n, in, &st, hfd);
	else if (b->own == FS_OWNERSHIP_PASSTHROUGH)
		ret = passthrough_setattr(b, n, in, hfd);
	else
		ret = squash_setattr(b, n, in, &st, hfd);
	if (!ret && (in->valid & FATTR_SIZE)) {
		ret = truncate_node(b, n, in->size, h);
		if (!ret)
			ret = drop_host_suid(b, n, hfd);
	}
	if (!ret && (in->valid & (FATTR_ATIME | FATTR_MTIME)))
		ret = set_times(b, n, in);
	if (!ret)
		ret = pt_node_stat(b, n, &st);
	if (!ret)
		pt_node_attr(b, n, &st, out);
	return ret;
}

static int pt_statfs(struct fs_backend *fs, uint64_t nodeid,
		     struct fuse_kstatfs *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);
	struct statfs sf;
	int fd;

	pt_op_begin(b);
	if (!n)
		return -ESTALE;
	fd = pt_fd(b, n);
	if (fd < 0)
		return fd;
	if (fstatfs(fd, &sf) < 0)
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

/* ---- create and destroy --------------------------------------------- */

/*
 * The guest's new session knows no node but the root (backend.h): every
 * handle closed, every lookup forgotten, and each node freed once no
 * child counts it (children first: a walk frees the leaves, and the
 * next their parents).
 */
static void pt_end_session(struct fs_backend *fs)
{
	struct pt_backend *b = to_pt(fs);
	struct hlink *l, *next;
	struct pt_node *n;
	bool freed = true;
	size_t i;

	hashtable__for_each_safe(&b->handles, i, l, next)
		pt_handle_free(b, hashtable__entry(l, struct pt_handle, link));
	hashtable__for_each_safe(&b->by_id, i, l, next)
	{
		n = hashtable__entry(l, struct pt_node, by_id);
		n->nlookup = 0;
	}
	while (freed) {
		freed = false;
		hashtable__for_each_safe(&b->by_id, i, l, next)
		{
			n = hashtable__entry(l, struct pt_node, by_id);
			if (n == b->root || n->nref)
				continue;
			if (n->parent)
				n->parent->nref--;
			pt_node_free(b, n);
			freed = true;
		}
	}
}

static void pt_destroy(struct fs_backend *fs)
{
	struct pt_backend *b = to_pt(fs);
	struct hlink *l, *next;
	size_t i;

	hashtable__for_each_safe(&b->handles, i, l, next)
		pt_handle_free(b, hashtable__entry(l, struct pt_handle, link));
	/* Every node at once: parents need not outlive children here. */
	hashtable__for_each_safe(&b->by_id, i, l, next)
		pt_node_free(b, hashtable__entry(l, struct pt_node, by_id));
	hashtable__exit(&b->handles);
	hashtable__exit(&b->by_id);
	hashtable__exit(&b->by_ino);
	pt_mask_free(b->masks);
	pt_fds_destroy(b);
	pt_fd_unshare(b);
	if (b->storage_fd >= 0)
		close(b->storage_fd);
	free(b->name);
	free(b);
}

static const struct fs_backend_ops pt_ops = {
	.lookup = pt_lookup,
	.forget = pt_forget,
	.end_session = pt_end_session,
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
	.kill_suidgid = pt_kill_suidgid,
	.destroy = pt_destroy,
};

static int create_root(struct pt_backend *b, const struct fs_bind_params *p,
		       struct stat *st)
{
	struct pt_node *n;
	int fd;

	fd = pt_open_host_dir(b->name, "source", p->source, st);
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
	n->nlookup = 1;
	n->tree = PT_SOURCE;
	n->mask = b->masks;
	list_init(&n->lru);
	pt_hash_add(&b->by_id, &n->by_id, n->id);
	pt_hash_add(&b->by_ino, &n->by_ino, pt_ino_key(n->dev, n->ino));
	b->nr_nodes++;
	b->root = n;
	pt_fd_install(b, n, fd); /* the root's stays open: never listed */
	return 0;
}

/*
 * At most half the process's descriptors (soft RLIMIT_NOFILE, which the
 * vmm raises to the hard limit at start): the rest stay for the vmm's
 * other devices, however many files the guest keeps open; and never
 * more than PT_MAX_FDS. Node descriptors beyond it are closed, least
 * recently used first (passthrough-fds.c).
 */
static size_t fd_limit(const struct fs_bind_params *p)
{
	struct rlimit rl;

	if (p->max_fds)
		return p->max_fds < PT_MIN_FDS_PARAM ? PT_MIN_FDS_PARAM :
		       p->max_fds > PT_MAX_FDS	     ? PT_MAX_FDS :
						       p->max_fds;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return PT_MAX_FDS;
	if (rl.rlim_cur / 2 < PT_MIN_FDS)
		return PT_MIN_FDS;
	if (rl.rlim_cur / 2 > PT_MAX_FDS)
		return PT_MAX_FDS;
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
	b->mount_fd = b->storage_mount_fd = -1;
	list_init(&b->lru);
	b->next_id = FUSE_ROOT_ID + 1;
	b->next_fh = 1;
	b->euid = geteuid();
	b->egid = getegid();
	b->max_fds = fd_limit(p);
	b->shared = p->fds;
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
		ret = pt_create_masks(b, p);
	if (!ret)
		ret = create_root(b, p, &src);
	if (!ret)
		ret = pt_create_storage(b, p, &src);
	if (!ret)
		ret = pt_own_create(b, p);
	if (!ret)
		pt_fds_create(b);
	if (ret) {
		pt_destroy(&b->fs);
		return ret;
	}
	*out = &b->fs;
	return 0;
}
