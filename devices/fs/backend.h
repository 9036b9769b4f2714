/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_BACKEND_H
#define KILN_FS_BACKEND_H

#include <linux/fuse.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "lib/log.h"

/*
 * The file systems virtio-fs serves. The FUSE server (devices/fs/fuse.c)
 * decodes and checks every request the guest sends, then calls one typed
 * op of the mount's backend; the backend never sees a FUSE message, guest
 * memory or a ring. Backends:
 *
 *	devices/fs/passthrough.c  bind: a host directory, confined beneath it
 *	devices/fs/memfs.c        memory: an in-RAM POSIX file system
 *	devices/fs/virtual.c      virtual: FUSE messages relayed, as they are,
 *				  to a server the orchestrator runs
 *
 * The first two implement the typed ops below; the virtual backend only
 * .forward (the server then decodes nothing but the header).
 *
 * Rules every backend keeps:
 * - Every op is called from the device's one event loop thread, so a
 *   backend needs no locking of its own (.forward's completion is the one
 *   exception: it may come from another thread).
 * - Node ids are the backend's own 64-bit handles; FUSE_ROOT_ID (1) is the
 *   root of the mount and exists from create to destroy. A node id the
 *   guest sends that the backend does not know (never handed out, or
 *   forgotten) answers -ESTALE or -ENOENT, never a crash: the guest is
 *   hostile and may send anything.
 * - Each op that hands out a node id (lookup, mknod, mkdir, symlink, link,
 *   create) counts one lookup for it; forget() takes nlookup away and the
 *   node may go when its count reaches zero (and, for memfs, it has no
 *   links and no open handles).
 * - Names are single path components: the server has checked that they
 *   are non-empty, at most FS_NAME_MAX bytes, NUL-terminated, contain no
 *   '/' and are neither "." nor "..". Symlink targets and readlink results
 *   are at most FS_PATH_MAX bytes.
 * - Errors are negative errno values; the server puts them in the reply.
 * - Attributes are those the guest sees (struct fuse_attr from
 *   linux/fuse.h, ino = the node id is fine); the server sets the entry
 *   and attribute timeouts.
 */

#define FS_NAME_MAX 255U
#define FS_PATH_MAX 4096U

struct fs_backend;

/* Who asks: from fuse_in_header. uid/gid as the guest sees them. */
struct fs_ctx {
	uint32_t uid;
	uint32_t gid;
	uint32_t pid;
};

/* What lookup and every creating op answer. */
struct fs_entry {
	uint64_t nodeid;
	uint64_t generation;
	struct fuse_attr attr;
};

/*
 * A readdir answer being built: the backend adds entries in order with
 * fs_dirbuf__add() until it returns false (no room: that entry was not
 * added; stop there, the guest will ask again from its offset).
 */
struct fs_dirbuf {
	uint8_t *buf;
	size_t size; /* room, from the guest's fuse_read_in.size */
	size_t used;
};

/*
 * One entry: name (namelen bytes, need not be NUL-terminated), the inode
 * number and the DT_* type the guest sees, and off, the offset the guest
 * passes back to continue after this entry (nonzero, the backend's
 * own cookie). Defined in devices/fs/fuse.c.
 */
bool fs_dirbuf__add(struct fs_dirbuf *d, const char *name, size_t namelen,
		    uint64_t ino, uint32_t type, uint64_t off);

/*
 * A raw FUSE request for .forward: the guest's bytes as they are (header,
 * arguments and, for writes, the data), at most FS_FORWARD_MAX bytes. The
 * backend answers exactly once, through complete(req, reply, len) with a
 * whole FUSE reply (fuse_out_header first) that the server checks
 * (len == header len, unique matches, len within the guest's buffer),
 * or complete(req, NULL, -errno) for a failure the server answers with
 * that error (-EIO for a relay timeout or a dead server). complete may be
 * called from any thread, before or after forward returns. For FUSE_FORGET
 * and FUSE_BATCH_FORGET (which have no reply) the backend still calls
 * complete, with NULL and 0.
 */
#define FS_FORWARD_MAX ((1U << 20) + 4096U)

struct fs_forward_req {
	const void *msg;
	size_t len;
	uint64_t unique;
	uint32_t opcode;
	size_t reply_room; /* bytes the guest gave for the reply */
	void (*complete)(struct fs_forward_req *req, const void *reply,
			 ssize_t len);
	void *priv; /* the server's */
};

struct fs_backend_ops {
	/* Raw relay (virtual backend): if set, every other op is unused. */
	int (*forward)(struct fs_backend *b, struct fs_forward_req *req);

	int (*lookup)(struct fs_backend *b, uint64_t parent, const char *name,
		      struct fs_entry *out);
	void (*forget)(struct fs_backend *b, uint64_t nodeid, uint64_t nlookup);
	int (*getattr)(struct fs_backend *b, uint64_t nodeid,
		       struct fuse_attr *out);
	/* in->valid says which fields (FATTR_*); fh valid with FATTR_FH. */
	int (*setattr)(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t nodeid, const struct fuse_setattr_in *in,
		       struct fuse_attr *out);
	/* Fills buf (not NUL-terminated), returns the length. */
	ssize_t (*readlink)(struct fs_backend *b, uint64_t nodeid, char *buf,
			    size_t size);
	int (*mknod)(struct fs_backend *b, const struct fs_ctx *ctx,
		     uint64_t parent, const char *name, uint32_t mode,
		     uint32_t rdev, uint32_t umask, struct fs_entry *out);
	int (*mkdir)(struct fs_backend *b, const struct fs_ctx *ctx,
		     uint64_t parent, const char *name, uint32_t mode,
		     uint32_t umask, struct fs_entry *out);
	int (*symlink)(struct fs_backend *b, const struct fs_ctx *ctx,
		       uint64_t parent, const char *name, const char *target,
		       struct fs_entry *out);
	int (*unlink)(struct fs_backend *b, uint64_t parent, const char *name);
	int (*rmdir)(struct fs_backend *b, uint64_t parent, const char *name);
	/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (linux/fs.h). */
	int (*rename)(struct fs_backend *b, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, uint32_t flags);
	int (*link)(struct fs_backend *b, uint64_t nodeid, uint64_t newparent,
		    const char *newname, struct fs_entry *out);
	/* flags: the guest's open(2) flags (O_CREAT and O_EXCL not among). */
	int (*open)(struct fs_backend *b, uint64_t nodeid, uint32_t flags,
		    uint64_t *fh, uint32_t *open_flags);
	int (*create)(struct fs_backend *b, const struct fs_ctx *ctx,
		      uint64_t parent, const char *name, uint32_t mode,
		      uint32_t flags, uint32_t umask, struct fs_entry *out,
		      uint64_t *fh, uint32_t *open_flags);
	/*
	 * The data path. If io_fd is set and answers a host fd (>= 0, still
	 * owned by the backend, valid until release of fh), the server does
	 * the read or write itself on its io_uring, straight between that fd
	 * and guest memory, at the guest's offset (O_APPEND files: the fd
	 * was opened O_APPEND and the offset is ignored by the kernel). Else,
	 * or if io_fd answers -ENOTSUP, read/write are called with the guest
	 * buffers as iovecs and return bytes done or -errno.
	 */
	int (*io_fd)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		     bool write);
	ssize_t (*read)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			const struct iovec *iov, int iovcnt, uint64_t offset);
	ssize_t (*write)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			 const struct iovec *iov, int iovcnt, uint64_t offset);
	int (*flush)(struct fs_backend *b, uint64_t nodeid, uint64_t fh);
	int (*release)(struct fs_backend *b, uint64_t nodeid, uint64_t fh);
	int (*fsync)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		     bool datasync);
	int (*opendir)(struct fs_backend *b, uint64_t nodeid, uint64_t *fh);
	/* offset: 0 for the start, else an off from an earlier entry. */
	int (*readdir)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
		       uint64_t offset, struct fs_dirbuf *out);
	int (*releasedir)(struct fs_backend *b, uint64_t nodeid, uint64_t fh);
	int (*fsyncdir)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			bool datasync);
	int (*statfs)(struct fs_backend *b, uint64_t nodeid,
		      struct fuse_kstatfs *out);
	/* mode: 0 or FALLOC_FL_KEEP_SIZE / PUNCH_HOLE|KEEP_SIZE. */
	int (*fallocate)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			 uint64_t offset, uint64_t length, uint32_t mode);
	/* whence: SEEK_DATA or SEEK_HOLE; answers the new offset. */
	int64_t (*lseek)(struct fs_backend *b, uint64_t nodeid, uint64_t fh,
			 uint64_t offset, uint32_t whence);
	/*
	 * If set, the server grants FUSE_HANDLE_KILLPRIV_V2: the guest's
	 * kernel then leaves clearing set-user-ID and set-group-ID to us,
	 * and says when (a writer without CAP_FSETID): this op runs before
	 * a WRITE with FUSE_WRITE_KILL_SUIDGID and an OPEN with
	 * FUSE_OPEN_KILL_SUIDGID, after a CREATE with it; setattr sees
	 * FATTR_KILL_SUIDGID in in->valid (truncate, chown). It clears
	 * set-user-ID, and set-group-ID if group-executable, as Linux does.
	 */
	int (*kill_suidgid)(struct fs_backend *b, uint64_t nodeid);
	/*
	 * Optional, for vm.metrics: the bytes the backend holds against its
	 * limit. From any thread, without the backend's lock.
	 */
	void (*usage)(const struct fs_backend *b, uint64_t *used,
		      uint64_t *max);
	/*
	 * Optional: the FUSE session that handed out node ids and handles
	 * is over (the guest unmounted: DESTROY, or the driver reset the
	 * device) and a new one starts (INIT). Forget every lookup count
	 * and close every handle, as if each node had been forgotten and
	 * each handle released: the guest's new session knows none of
	 * them, and the old one's FORGETs were never sent (Linux stops its
	 * forget queue before DESTROY). What a file system holds stays.
	 */
	void (*end_session)(struct fs_backend *b);
	/* Frees the backend and everything it holds; called once, last. */
	void (*destroy)(struct fs_backend *b);
};

/*
 * Every backend's object starts with this (embed it first, as devices
 * embed struct virtio_device). An op left NULL answers -ENOSYS.
 */
struct fs_backend {
	const struct fs_backend_ops *ops;
	const char *name; /* for the log: "bind:/workspace"; the backend's */
	bool read_only;	  /* the server refuses mutations with -EROFS too */
};

/* NULL-safe. */
static inline void fs_backend__destroy(struct fs_backend *b)
{
	if (b)
		b->ops->destroy(b);
}

#endif
