// SPDX-License-Identifier: GPL-2.0
/*
 * Ownership in the `bind` backend (Documentation/virtio-fs.md,
 * "Ownership"). In a mapped bind every host file belongs to the vmm's
 * user and has safe host permissions (never set-user-ID or set-group-ID,
 * always readable and writable by that user, a device node, FIFO or
 * socket is an empty regular file); what the guest sees (uid, gid, the
 * full mode with the type, and a device's numbers) is kept in the
 * user.kiln.stat xattr of that file, format in passthrough-internal.h.
 * A file without it (made on the host) shows the host's owner mapped as
 * in squash, and its real mode.
 *
 * Permission checks are the guest kernel's: virtio-fs mounts always have
 * default_permissions, so chown, chmod and utimes reach us only when the
 * guest's rules allowed them, and the guest's root may do anything in
 * its own view. What the host sees is decided here alone.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>
#include <sys/xattr.h>

#include "devices/fs/passthrough-internal.h"

bool pt_mapped(const struct pt_backend *b)
{
	return b->own == FS_OWNERSHIP_MAPPED;
}

/* The type the guest sees: the xattr's, else the host's. */
mode_t pt_guest_type(const struct pt_node *n)
{
	return n->meta.valid ? n->meta.mode & S_IFMT : n->type;
}

/*
 * The host mode of a mapped file or directory: the guest's rwx bits, the
 * vmm's user always able to read and write it (and search a directory),
 * and no set-user-ID, set-group-ID or sticky bit: those live in the xattr.
 */
mode_t pt_host_perm(uint32_t mode, bool dir)
{
	return (mode & 0777) | (dir ? PT_HOST_DIR_OWNER : PT_HOST_FILE_OWNER);
}

bool pt_host_suid(const struct stat *st)
{
	return (st->st_mode & S_ISUID) ||
	       (st->st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP);
}

/* What a write by a writer without CAP_FSETID leaves of mode (Linux). */
uint32_t pt_killed_mode(uint32_t mode)
{
	mode &= ~(uint32_t)S_ISUID;
	if (mode & S_IXGRP)
		mode &= ~(uint32_t)S_ISGID;
	return mode;
}

int pt_kill_host_suid(int fd, const struct stat *st)
{
	return fchmod(fd, pt_killed_mode(st->st_mode) & 07777) ? -errno : 0;
}

/* ---- the xattr ------------------------------------------------------- */

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void encode(const struct pt_meta *m, uint8_t *buf)
{
	memset(buf, 0, PT_META_SIZE);
	buf[0] = PT_META_VERSION;
	put_le32(buf + 4, m->uid);
	put_le32(buf + 8, m->gid);
	put_le32(buf + 12, m->mode);
	put_le32(buf + 16, m->rdev);
}

/* Whether a host inode of host_type can be what the xattr says. */
static bool type_fits(mode_t host_type, uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return host_type == S_IFDIR;
	case S_IFREG:
	case S_IFCHR:
	case S_IFBLK:
	case S_IFIFO:
	case S_IFSOCK:
		return host_type == S_IFREG;
	default:
		return false; /* symlinks cannot carry user xattrs */
	}
}

/* NULL when buf (len bytes) is a valid version 1 record, else why not. */
static const char *decode(const uint8_t *buf, ssize_t len, mode_t host_type,
			  struct pt_meta *m)
{
	if (len != PT_META_SIZE)
		return "not 20 bytes";
	if (buf[0] != PT_META_VERSION)
		return "an unknown version";
	if (buf[1] || buf[2] || buf[3])
		return "reserved bytes set";
	*m = (struct pt_meta){
		.valid = true,
		.uid = get_le32(buf + 4),
		.gid = get_le32(buf + 8),
		.mode = get_le32(buf + 12),
		.rdev = get_le32(buf + 16),
	};
	if (m->mode & ~(uint32_t)(S_IFMT | 07777))
		return "unknown mode bits";
	if (!type_fits(host_type, m->mode))
		return "a type the host file cannot be";
	if (!S_ISCHR(m->mode) && !S_ISBLK(m->mode) && m->rdev)
		return "device numbers on a file that is no device";
	return NULL;
}

/*
 * This thread's own working directory, so that fchdir() here moves no
 * other thread's (the vmm's other threads, or the test's).
 */
static int own_cwd(struct pt_backend *b)
{
	pthread_t self = pthread_self();

	if (b->cwd_private && pthread_equal(b->cwd_thread, self))
		return 0;
	if (unshare(CLONE_FS) < 0)
		return -errno;
	b->cwd_thread = self;
	b->cwd_private = true;
	return 0;
}

/*
 * Get (buf, size) or set (val, size) the xattr of name in dirfd, a file
 * that is not a directory: there is no *xattrat() before Linux 6.13 and
 * f*xattr() refuses O_PATH descriptors, so by name, from its directory.
 * The name is one component and l*xattr() does not follow a final
 * symlink, so this resolves exactly as fstatat(AT_SYMLINK_NOFOLLOW).
 */
static ssize_t xattr_at(struct pt_backend *b, int dirfd, const char *name,
			void *buf, const void *val, size_t size)
{
	ssize_t ret = own_cwd(b);

	if (ret)
		return ret;
	if (fchdir(dirfd) < 0)
		return -errno;
	if (val)
		ret = lsetxattr(name, PT_META_XATTR, val, size, 0);
	else
		ret = lgetxattr(name, PT_META_XATTR, buf, size);
	return ret < 0 ? -errno : ret;
}

/* A directory's: through a descriptor of it opened for reading. */
static ssize_t xattr_dir(int dfd, void *buf, const void *val, size_t size)
{
	ssize_t ret;
	int fd;

	fd = pt_openat2(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
			PT_RESOLVE);
	if (fd < 0)
		return fd;
	if (val)
		ret = fsetxattr(fd, PT_META_XATTR, val, size, 0);
	else
		ret = fgetxattr(fd, PT_META_XATTR, buf, size);
	ret = ret < 0 ? -errno : ret;
	close(fd);
	return ret;
}

/*
 * n's metadata from its xattr; n is name in dirfd (dirfd < 0: its
 * recorded place). No xattr, or one that is not valid for this file,
 * leaves n showing the host's metadata (a bad one is logged once).
 */
void pt_meta_load(struct pt_backend *b, struct pt_node *n, int dirfd,
		  const char *name)
{
	uint8_t buf[PT_META_SIZE + 1];
	const char *why;
	bool owned = false;
	ssize_t len;

	n->meta.valid = false;
	if (!pt_mapped(b))
		return;
	if (S_ISDIR(n->type)) {
		len = pt_fd(b, n);
		if (len >= 0)
			len = xattr_dir((int)len, buf, NULL, sizeof(buf));
	} else if (S_ISREG(n->type)) {
		if (dirfd < 0) {
			if (pt_node_dirfd(b, n, &dirfd, &owned))
				return;
			name = n->name;
		}
		len = xattr_at(b, dirfd, name, buf, NULL, sizeof(buf));
		if (owned)
			close(dirfd);
	} else {
		return; /* only files and directories hold user.* xattrs */
	}
	if (len == -ENODATA || len == -ENOENT || len == -EACCES)
		return;
	if (len < 0) {
		why = strerror((int)-len);
	} else {
		why = decode(buf, len, n->type, &n->meta);
		if (!why)
			return;
		n->meta.valid = false;
	}
	if (!b->meta_warned) {
		pr_warn("%s: %s: %s is %s: showing the host's owner and mode "
			"(further such files not logged)",
			b->name, n->name ? n->name : "/", PT_META_XATTR, why);
		b->meta_warned = true;
	}
}

int pt_meta_write_fd(int fd, const struct pt_meta *m)
{
	uint8_t buf[PT_META_SIZE];

	encode(m, buf);
	return fsetxattr(fd, PT_META_XATTR, buf, sizeof(buf), 0) ? -errno : 0;
}

/* n's xattr set to m; hfd, if >= 0, is an open descriptor of n. */
int pt_meta_write(struct pt_backend *b, struct pt_node *n,
		  const struct pt_meta *m, int hfd)
{
	uint8_t buf[PT_META_SIZE];
	bool owned;
	ssize_t ret;
	int dirfd;

	encode(m, buf);
	if (hfd >= 0) {
		ret = pt_meta_write_fd(hfd, m);
	} else if (S_ISDIR(n->type)) {
		ret = pt_fd(b, n);
		if (ret >= 0)
			ret = xattr_dir((int)ret, NULL, buf, sizeof(buf));
	} else if (S_ISREG(n->type)) {
		ret = pt_node_dirfd(b, n, &dirfd, &owned);
		if (ret)
			return ret == -ENOENT ? -ESTALE : (int)ret;
		ret = xattr_at(b, dirfd, n->name, NULL, buf, sizeof(buf));
		if (owned)
			close(dirfd);
	} else {
		return -EOPNOTSUPP;
	}
	if (ret < 0)
		return (int)ret;
	n->meta = *m;
	n->meta.valid = true;
	return 0;
}

/*
 * The metadata of a node the guest makes in dir: the caller's ids, the
 * mode (type and bits, the guest's umask applied), and as on Linux the
 * group of a set-group-ID directory (and, for a directory, its bit).
 */
int pt_meta_for_new(struct pt_backend *b, const struct fs_ctx *ctx,
		    struct pt_node *dir, uint32_t mode, uint32_t rdev,
		    struct pt_meta *m)
{
	struct fuse_attr da;
	struct stat st;
	int ret;

	ret = pt_node_stat(b, dir, &st);
	if (ret)
		return ret;
	pt_node_attr(b, dir, &st, &da);
	*m = (struct pt_meta){
		.valid = true,
		.uid = ctx->uid,
		.gid = ctx->gid,
		.mode = mode,
		.rdev = (S_ISCHR(mode) || S_ISBLK(mode)) ? rdev : 0,
	};
	if (da.mode & S_ISGID) {
		m->gid = da.gid;
		if (S_ISDIR(mode))
			m->mode |= S_ISGID;
	}
	return 0;
}

/* What the guest sees of n: the xattr over the host's attributes. */
void pt_meta_attr(const struct pt_node *n, struct fuse_attr *a)
{
	if (!n->meta.valid)
		return;
	a->uid = n->meta.uid;
	a->gid = n->meta.gid;
	a->mode = n->meta.mode;
	if (!S_ISREG(n->meta.mode) && !S_ISDIR(n->meta.mode)) {
		/* A device, FIFO or socket: nothing is stored in it. */
		a->rdev = n->meta.rdev;
		a->size = 0;
		a->blocks = 0;
	}
}

/*
 * chmod, chown and FATTR_KILL_SUIDGID of a mapped node: the xattr gets
 * the new metadata (made from the host's view if the file had none), and
 * a file or directory's host mode follows the guest's rwx bits. st is
 * n's host stat; hfd, if >= 0, an open descriptor of it.
 */
int pt_meta_setattr(struct pt_backend *b, struct pt_node *n,
		    const struct fuse_setattr_in *in, const struct stat *st,
		    int hfd)
{
	struct fuse_attr a;
	struct pt_meta m;
	mode_t hp;
	int ret;

	if (!(in->valid &
	      (FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_KILL_SUIDGID)))
		return 0;
	pt_node_attr(b, n, st, &a);
	m = (struct pt_meta){ .valid = true,
			      .uid = a.uid,
			      .gid = a.gid,
			      .mode = a.mode,
			      .rdev = n->meta.valid ? n->meta.rdev : 0 };
	if (in->valid & FATTR_UID)
		m.uid = in->uid;
	if (in->valid & FATTR_GID)
		m.gid = in->gid;
	if (in->valid & FATTR_MODE)
		m.mode = (m.mode & S_IFMT) | (in->mode & 07777);
	if (in->valid & FATTR_KILL_SUIDGID)
		m.mode = pt_killed_mode(m.mode);
	if (m.uid == a.uid && m.gid == a.gid && m.mode == a.mode)
		return 0;
	/*
	 * A symlink holds no user.* xattr (Linux refuses them): its owner
	 * and mode cannot change. chown(1) -R takes EOPNOTSUPP for a symlink
	 * as "not supported here" and goes on.
	 */
	if (S_ISLNK(n->type))
		return -EOPNOTSUPP;
	ret = pt_meta_write(b, n, &m, hfd);
	if (ret)
		return ret;
	if (pt_guest_type(n) != S_IFREG && pt_guest_type(n) != S_IFDIR)
		return 0; /* the host file of a device keeps PT_HOST_SPECIAL */
	hp = pt_host_perm(m.mode, S_ISDIR(n->type));
	if ((st->st_mode & 07777) == hp)
		return 0;
	return pt_chmod_node(b, n, hp, hfd);
}

/*
 * FUSE_WRITE_KILL_SUIDGID and FUSE_OPEN_KILL_SUIDGID: the guest's writer
 * lacks CAP_FSETID, so set-user-ID goes, and set-group-ID if the file is
 * group-executable, as a write on Linux does.
 */
int pt_kill_suidgid(struct fs_backend *fs, uint64_t nodeid)
{
	struct pt_backend *b = to_pt(fs);
	struct pt_node *n = pt_node_get(b, nodeid);
	struct pt_meta m;
	struct stat st;
	int ret;

	pt_op_begin(b);
	if (b->fs.read_only)
		return -EROFS;
	if (!n)
		return -ESTALE;
	if (n->meta.valid) {
		if (pt_killed_mode(n->meta.mode) == n->meta.mode)
			return 0;
		m = n->meta;
		m.mode = pt_killed_mode(m.mode);
		return pt_meta_write(b, n, &m, -1);
	}
	if (!S_ISREG(n->type))
		return 0;
	ret = pt_node_stat(b, n, &st);
	if (ret || !pt_host_suid(&st))
		return ret;
	return pt_chmod_node(b, n, pt_killed_mode(st.st_mode) & 07777, -1);
}

/* ---- create ----------------------------------------------------------- */

/* Whether the directory behind dfd can hold user.* xattrs. */
static int probe(int dfd)
{
	uint8_t buf[PT_META_SIZE + 1];
	ssize_t ret = xattr_dir(dfd, buf, NULL, sizeof(buf));

	if (ret == -EOPNOTSUPP || ret == -ENOTSUP)
		return 0;
	if (ret >= 0 || ret == -ENODATA || ret == -ERANGE || ret == -EACCES)
		return 1;
	return (int)ret;
}

/*
 * Resolves p->ownership once source and storage are open: passthrough
 * needs root; mapped needs user.* xattrs in source (and storage), and the
 * default falls back to squash without them, saying so in one line.
 */
int pt_own_create(struct pt_backend *b, const struct fs_bind_params *p)
{
	int ok;

	b->own = p->ownership;
	switch (p->ownership) {
	case FS_OWNERSHIP_SQUASH:
		return 0;
	case FS_OWNERSHIP_PASSTHROUGH:
		if (!b->euid)
			return 0;
		pr_err("%s: ownership \"passthrough\" needs a vmm running as "
		       "root (this one runs as uid %u)",
		       b->name, (unsigned int)b->euid);
		return -EPERM;
	case FS_OWNERSHIP_DEFAULT:
	case FS_OWNERSHIP_MAPPED:
		break;
	default:
		pr_err("%s: unknown ownership %d", b->name, (int)p->ownership);
		return -EINVAL;
	}
	ok = probe(b->root->fd);
	if (ok == 1 && b->storage_fd >= 0)
		ok = probe(b->storage_fd);
	if (ok < 0) {
		pr_err("%s: cannot read the %s xattr of %s: %s", b->name,
		       PT_META_XATTR, p->source, strerror(-ok));
		return ok;
	}
	if (ok) {
		b->own = FS_OWNERSHIP_MAPPED;
		return 0;
	}
	if (p->ownership == FS_OWNERSHIP_MAPPED) {
		pr_err("%s: ownership \"mapped\": the host file system of %s "
		       "cannot hold user.* extended attributes",
		       b->name, p->source);
		return -EOPNOTSUPP;
	}
	pr_warn("%s: the host file system of %s cannot hold user.* extended "
		"attributes: ownership \"squash\" (every file the vmm's "
		"user's, shown as 0)",
		b->name, p->source);
	b->own = FS_OWNERSHIP_SQUASH;
	return 0;
}
