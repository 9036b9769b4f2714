// SPDX-License-Identifier: GPL-2.0
/*
 * The `bind` backend's ops on open files and directories: open, create,
 * I/O on the host descriptor, and readdir with the synthetic entries
 * (".", ".." and mask paths) beside the host's own.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/fs/passthrough-internal.h"

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

/*
 * The handle of fd, opened with the guest's flags on nodeid (fresh: the
 * file was just made). A host file that is set-user-ID (or set-group-ID
 * and group-executable) loses those bits when the guest truncated it
 * (O_TRUNC), or else at its first write through this handle, unless the
 * bind is ownership passthrough.
 */
static int handle_for(struct pt_backend *b, uint64_t nodeid, int fd,
		      uint32_t flags, bool fresh, uint64_t *fh)
{
	struct pt_handle *h;
	struct stat st;
	bool kill = false;
	int ret;

	if (!fresh && (flags & O_ACCMODE) != O_RDONLY &&
	    b->own != FS_OWNERSHIP_PASSTHROUGH) {
		ret = pt_stat_fd(fd, &st);
		if (!ret && pt_host_suid(&st)) {
			if (flags & O_TRUNC)
				ret = pt_kill_host_suid(fd, &st);
			else
				kill = true;
		}
		if (ret) {
			close(fd);
			return ret;
		}
	}
	ret = pt_handle_new(b, nodeid, fd, (int)(flags & PT_OPEN_KEEP), false,
			    fh);
	if (ret)
		return ret;
	h = pt_handle_get(b, nodeid, *fh, false);
	h->kill_host_suid = kill;
	return 0;
}

/* Before the first write through h: see handle_for(). */
static int write_begins(struct pt_handle *h)
{
	struct stat st;
	int ret;

	if (!h->kill_host_suid)
		return 0;
	ret = pt_stat_fd(h->fd, &st);
	if (!ret && pt_host_suid(&st))
		ret = pt_kill_host_suid(h->fd, &st);
	if (!ret)
		h->kill_host_suid = false;
	return ret;
}

/*
 * An existing name for CREATE without O_EXCL: only a regular file is
 * opened, and it is checked to be so before, so that no device node or
 * FIFO a host process put there is ever opened (opening one can have
 * effects: a FIFO's writer wakes up, a tape rewinds). The open is then
 * checked to have found the same inode.
 */
static int open_existing(int dirfd, const char *name, int oflags)
{
	struct stat before, st;
	int opath, fd, ret;

	opath = pt_open_path(dirfd, name);
	if (opath < 0)
		return opath;
	ret = pt_stat_fd(opath, &before);
	close(opath);
	if (ret)
		return ret;
	if (S_ISDIR(before.st_mode))
		return -EISDIR;
	if (S_ISLNK(before.st_mode))
		return -EEXIST;
	if (!S_ISREG(before.st_mode))
		return -ENXIO;
	fd = pt_openat2(dirfd, name, oflags, 0, PT_RESOLVE);
	if (fd < 0)
		return fd == -ELOOP ? -EEXIST : fd;
	ret = pt_stat_fd(fd, &st);
	if (!ret && !pt_same_inode(&st, before.st_dev, before.st_ino))
		ret = -EIO; /* a host process swapped the name meanwhile */
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * A file CREATE just made, open as fd (st its stat): the permission bits
 * the vmm's umask took given back, and its owner as the bind's ownership
 * says (mapped: the xattr; passthrough: the caller's ids).
 */
static int created_setup(struct pt_backend *b, const struct fs_ctx *ctx,
			 struct pt_node *dir, int fd, const struct stat *st,
			 uint32_t mode, uint32_t umask, mode_t perm)
{
	struct pt_meta m;
	struct stat dst;
	gid_t gid;
	int ret;

	if (b->own == FS_OWNERSHIP_MAPPED) {
		if ((st->st_mode & 07777) != perm && fchmod(fd, perm) < 0)
			return -errno;
		ret = pt_meta_for_new(b, ctx, dir,
				      S_IFREG | (mode & 07777 & ~umask), 0, &m);
		return ret ? ret : pt_meta_write_fd(fd, &m);
	}
	if (b->own == FS_OWNERSHIP_PASSTHROUGH) {
		ret = pt_node_stat(b, dir, &dst);
		if (ret)
			return ret;
		gid = (dst.st_mode & S_ISGID) ? dst.st_gid : ctx->gid;
		if (fchown(fd, ctx->uid, gid) < 0 || fchmod(fd, perm) < 0)
			return -errno;
		return 0;
	}
	/* Bits the process umask took: the guest's umask was applied. */
	if ((perm & ~st->st_mode & 07777) &&
	    fchmod(fd, (st->st_mode & 07777) | perm) < 0)
		return -errno;
	return 0;
}

int pt_open(struct fs_backend *fs, uint64_t nodeid, uint32_t flags,
	    uint64_t *fh, uint32_t *open_flags)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);
	int fd, ret;

	pt_op_begin(b);
	ret = check_open_flags(b, flags);
	if (ret)
		return ret;
	if (!n)
		return -ESTALE;
	if (S_ISDIR(n->type))
		return -EISDIR;
	if (S_ISLNK(n->type))
		return -ELOOP;
	/*
	 * FIFOs, sockets and devices the guest kernel serves itself; never
	 * opened (in a mapped bind they are empty files on the host).
	 */
	if (pt_guest_type(n) != S_IFREG)
		return -ENXIO;
	/* n's own first: it stays open while the handle is (pt_handle_new) */
	ret = pt_fd(b, n);
	if (ret >= 0)
		ret = pt_fd_budget(b, 1);
	if (ret < 0)
		return ret;
	fd = pt_reopen_file(b, n, (int)(flags & (PT_OPEN_KEEP | O_TRUNC)));
	if (fd < 0)
		return fd;
	*open_flags = 0;
	return handle_for(b, nodeid, fd, flags, false, fh);
}

int pt_create(struct fs_backend *fs, const struct fs_ctx *ctx, uint64_t parent,
	      const char *name, uint32_t mode, uint32_t flags, uint32_t umask,
	      struct fs_entry *out, uint64_t *fh, uint32_t *open_flags)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *dir, *n;
	struct pt_where w;
	struct stat st;
	bool created;
	mode_t perm;
	int fd, opath, oflags, fl, ret;

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	ret = check_open_flags(b, flags);
	if (ret)
		return ret;
	if ((mode & S_IFMT) && !S_ISREG(mode))
		return -EINVAL;
	ret = pt_fd_budget(b, 2);
	if (!ret)
		ret = pt_dir_begin(b, parent, name, &dir);
	if (!ret)
		ret = pt_locate(b, dir, name, true, &w);
	if (ret)
		return ret;
	if (b->own == FS_OWNERSHIP_MAPPED)
		perm = pt_host_perm(mode & ~umask, false);
	else if (b->own == FS_OWNERSHIP_PASSTHROUGH)
		perm = mode & 07777 & ~umask;
	else
		perm = pt_guest_perm(mode, umask, false);
	oflags = (int)(flags & PT_OPEN_KEEP) | O_CREAT | O_EXCL | O_NOFOLLOW |
		 O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	fd = pt_openat2(w.dirfd, name, oflags, perm, PT_RESOLVE);
	created = fd >= 0;
	/* Without O_EXCL an existing file is opened, as open(2) would. */
	if (fd == -EEXIST && !(flags & O_EXCL))
		fd = open_existing(w.dirfd, name, oflags & ~(O_CREAT | O_EXCL));
	if (fd < 0) {
		ret = fd == -ELOOP ? -EEXIST : fd;
		goto out_where;
	}
	ret = pt_stat_fd(fd, &st);
	if (!ret && !S_ISREG(st.st_mode))
		ret = S_ISDIR(st.st_mode) ? -EISDIR : -ENXIO;
	fl = ret ? -1 : fcntl(fd, F_GETFL);
	if (!ret && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		ret = -errno;
	if (!ret && created)
		ret = created_setup(b, ctx, dir, fd, &st, mode, umask, perm);
	if (ret && created)
		unlinkat(w.dirfd, name, 0);
	if (ret)
		goto out_fd;
	opath = pt_open_path(w.dirfd, name);
	if (opath < 0) {
		ret = opath;
		goto out_fd;
	}
	ret = pt_node_add(b, dir, name, &w, opath, out);
	if (ret)
		goto out_fd;
	if (out->attr.ino != st.st_ino) {
		ret = -EIO; /* a host process swapped the name meanwhile */
		goto out_node;
	}
	/* A mapped FIFO, socket or device: its host file is not opened. */
	n = pt_node_get(b, out->nodeid);
	if (pt_guest_type(n) != S_IFREG) {
		ret = -ENXIO;
		goto out_node;
	}
	/* O_TRUNC of an existing file only now that it is known to be it. */
	if (!created && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) {
		ret = ftruncate(fd, 0) ? -errno : pt_stat_fd(fd, &st);
		if (ret)
			goto out_node;
		pt_node_attr(b, n, &st, &out->attr);
	}
	ret = handle_for(b, out->nodeid, fd, flags, created, fh);
	if (ret) {
		/* pt_handle_new() closed fd */
		pt_node_forget(b, pt_node_get(b, out->nodeid), 1);
		goto out_where;
	}
	*open_flags = 0;
	pt_locate_done(&w);
	return 0;

out_node:
	pt_node_forget(b, pt_node_get(b, out->nodeid), 1);
out_fd:
	close(fd);
out_where:
	pt_locate_done(&w);
	return ret;
}

int pt_io_fd(struct fs_backend *fs, uint64_t nodeid, uint64_t fh, bool write)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = pt_handle_get(b, nodeid, fh, false);
	int acc, ret;

	if (!h)
		return -EBADF;
	if (write && b->fs.read_only)
		return -EROFS;
	acc = h->flags & O_ACCMODE;
	if (write ? acc == O_RDONLY : acc == O_WRONLY)
		return -EBADF;
	if (write) {
		ret = write_begins(h);
		if (ret)
			return ret;
	}
	return h->fd;
}

ssize_t pt_read(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct pt_handle *h = pt_handle_get(to_pt(fs), nodeid, fh, false);
	ssize_t n;

	if (!h)
		return -EBADF;
	if (iovcnt < 0 || iovcnt > IOV_MAX || offset > INT64_MAX)
		return -EINVAL;
	n = preadv(h->fd, iov, iovcnt, (off_t)offset);
	return n < 0 ? -errno : n;
}

ssize_t pt_write(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		 const struct iovec *iov, int iovcnt, uint64_t offset)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = pt_handle_get(b, nodeid, fh, false);
	ssize_t n;

	if (b->fs.read_only)
		return -EROFS;
	if (!h)
		return -EBADF;
	if (iovcnt < 0 || iovcnt > IOV_MAX || offset > INT64_MAX)
		return -EINVAL;
	if ((h->flags & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	n = write_begins(h);
	if (n)
		return n;
	/* O_APPEND descriptors append whatever the offset (Linux pwritev). */
	n = pwritev(h->fd, iov, iovcnt, (off_t)offset);
	return n < 0 ? -errno : n;
}

int pt_flush(struct fs_backend *fs, uint64_t nodeid, uint64_t fh)
{
	/* Nothing is buffered here; close(2) happens at release. */
	return pt_handle_get(to_pt(fs), nodeid, fh, false) ? 0 : -EBADF;
}

int pt_release(struct fs_backend *fs, uint64_t nodeid, uint64_t fh)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = pt_handle_get(b, nodeid, fh, false);

	if (!h)
		return -EBADF;
	pt_handle_free(b, h);
	return 0;
}

static int sync_fd(int fd, bool datasync)
{
	return (datasync ? fdatasync(fd) : fsync(fd)) ? -errno : 0;
}

int pt_fsync(struct fs_backend *fs, uint64_t nodeid, uint64_t fh, bool datasync)
{
	struct pt_handle *h = pt_handle_get(to_pt(fs), nodeid, fh, false);

	return h ? sync_fd(h->fd, datasync) : -EBADF;
}

int pt_fallocate(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		 uint64_t offset, uint64_t length, uint32_t mode)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = pt_handle_get(b, nodeid, fh, false);
	int ret;

	if (b->fs.read_only)
		return -EROFS;
	if (!h)
		return -EBADF;
	if (mode != 0 && mode != FALLOC_FL_KEEP_SIZE &&
	    mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (offset > INT64_MAX || length > INT64_MAX - offset)
		return -EFBIG;
	ret = write_begins(h);
	if (ret)
		return ret;
	if (fallocate(h->fd, (int)mode, (off_t)offset, (off_t)length))
		return -errno;
	return 0;
}

int64_t pt_lseek(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		 uint64_t offset, uint32_t whence)
{
	struct pt_handle *h = pt_handle_get(to_pt(fs), nodeid, fh, false);
	off_t off;

	if (!h)
		return -EBADF;
	if ((whence != SEEK_DATA && whence != SEEK_HOLE) || offset > INT64_MAX)
		return -EINVAL;
	off = lseek(h->fd, (off_t)offset, (int)whence);
	return off < 0 ? -errno : off;
}

/* ---- ops: directories ----------------------------------------------- */

int pt_opendir(struct fs_backend *fs, uint64_t nodeid, uint64_t *fh)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n;
	int fd, ret;

	pt_op_begin(b);
	ret = pt_dir_get(b, nodeid, &n);
	if (!ret)
		ret = pt_check_connected(b, n);
	if (!ret)
		ret = pt_fd(b, n);
	if (ret >= 0)
		ret = pt_fd_budget(b, 1);
	if (ret < 0)
		return ret;
	fd = pt_openat2(n->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
			PT_RESOLVE);
	if (fd < 0)
		return fd;
	return pt_handle_new(b, nodeid, fd, O_RDONLY, true, fh);
}

/* The i-th (from 0) mask path in dir, if storage has it: false when full. */
static bool add_mask_entry(struct pt_backend *b, const struct pt_mask *m,
			   uint64_t cookie, struct fs_dirbuf *out)
{
	struct stat st;
	int fd, ret;

	if (pt_storage_dir(b, m->parent, false, &fd))
		return true;
	ret = pt_stat_at(fd, m->name, &st);
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
			m = masks ? pt_mask_child(masks, d->d_name) : NULL;
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

int pt_readdir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
	       uint64_t offset, struct fs_dirbuf *out)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = pt_handle_get(b, nodeid, fh, true);
	struct pt_node *n = pt_node_get(b, nodeid);
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

int pt_releasedir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_handle *h = pt_handle_get(b, nodeid, fh, true);

	if (!h)
		return -EBADF;
	pt_handle_free(b, h);
	return 0;
}

int pt_fsyncdir(struct fs_backend *fs, uint64_t nodeid, uint64_t fh,
		bool datasync)
{
	struct pt_handle *h = pt_handle_get(to_pt(fs), nodeid, fh, true);

	return h ? sync_fd(h->fd, datasync) : -EBADF;
}
