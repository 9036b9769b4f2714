// SPDX-License-Identifier: GPL-2.0
/*
 * The FUSE server's ops (see fuse.h and fuse-internal.h): one handler per
 * opcode, and the table fuse.c dispatches through.
 *
 * A handler gets the request with its header checked and its arguments
 * gathered (fuse.c); it decodes them with bounds checked at every step
 * (structs shorter than the op's, names that are not NUL-terminated inside
 * the arguments, names with '/', "." or "..", names over FS_NAME_MAX,
 * symlink targets over FS_PATH_MAX, READ and WRITE sizes over max_write or
 * past the guest's buffers all answer an errno, never reach the backend),
 * calls the backend and answers: REPLIED, or an errno fuse.c replies
 * with. Ops whose reply has a fixed size check there is room for it
 * before they call the backend, so nothing is done that cannot be told
 * (a CREATE's handle is never lost for want of reply space).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "devices/fs/fuse-internal.h"
#include "lib/iovec.h"

/*
 * Background requests (readahead, async writes) the kernel may keep in
 * flight, and where it starts to throttle: the device has 64 request
 * slots per queue, so more would only wait in the ring.
 */
#define MAX_BACKGROUND	     64
#define CONGESTION_THRESHOLD 48

/* INIT flags granted when the guest offers them: all done right here. */
#define INIT_FLAGS                                                  \
	(FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS | \
	 FUSE_MAX_PAGES)

/* Open flags the backend's answer may carry to the guest. */
#define FOPEN_KNOWN                                               \
	(FOPEN_DIRECT_IO | FOPEN_KEEP_CACHE | FOPEN_NONSEEKABLE | \
	 FOPEN_CACHE_DIR | FOPEN_STREAM | FOPEN_NOFLUSH |         \
	 FOPEN_PARALLEL_DIRECT_WRITES)

static void fill_entry(const struct fuse_server *s, struct fuse_entry_out *o,
		       const struct fs_entry *e)
{
	*o = (struct fuse_entry_out){
		.nodeid = e->nodeid,
		.generation = e->generation,
		.entry_valid = s->valid_sec,
		.attr_valid = s->valid_sec,
		.entry_valid_nsec = s->valid_nsec,
		.attr_valid_nsec = s->valid_nsec,
		.attr = e->attr,
	};
}

static int reply_entry(struct fuse_call *c, const struct fs_entry *e)
{
	struct fuse_entry_out o;

	fill_entry(c->s, &o, e);
	fuse_reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

static int reply_attr(struct fuse_call *c, const struct fuse_attr *attr)
{
	struct fuse_attr_out o = {
		.attr_valid = c->s->valid_sec,
		.attr_valid_nsec = c->s->valid_nsec,
		.attr = *attr,
	};

	fuse_reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

static int reply_open(struct fuse_call *c, uint64_t fh, uint32_t open_flags)
{
	struct fuse_open_out o = { .fh = fh,
				   .open_flags = open_flags & FOPEN_KNOWN };

	fuse_reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

/* An op's int answer: 0 is an empty reply, else the error. */
static int reply_status(struct fuse_call *c, int ret)
{
	if (ret)
		return ret;
	fuse_reply_ok(c->req, NULL, 0);
	return REPLIED;
}

/* ---- decoding ----------------------------------------------------------- */

static int take_arg(struct fuse_call *c, void *arg, size_t size)
{
	if (c->alen - c->pos < size)
		return -EINVAL;
	memcpy(arg, c->a + c->pos, size);
	c->pos += size;
	return 0;
}

/* A NUL-terminated string at the cursor; its length in *len. */
static int take_string(struct fuse_call *c, const char **str, size_t *len)
{
	const char *p = (const char *)c->a + c->pos;
	const char *nul = memchr(p, '\0', c->alen - c->pos);

	if (!nul)
		return -EINVAL;
	*str = p;
	*len = (size_t)(nul - p);
	c->pos += *len + 1;
	return 0;
}

/* One path component, as backend.h promises its backends. */
static int take_name(struct fuse_call *c, const char **name)
{
	size_t len;
	int ret = take_string(c, name, &len);

	if (ret)
		return ret;
	if (!len)
		return -EINVAL;
	if (len > FS_NAME_MAX)
		return -ENAMETOOLONG;
	if (memchr(*name, '/', len) || !strcmp(*name, ".") ||
	    !strcmp(*name, ".."))
		return -EINVAL;
	return 0;
}

/* The op has no backend function: the guest learns it is not there. */
#define HAS(c, op) ((c)->s->b->ops->op != NULL)

/* ---- the ops ------------------------------------------------------------ */

static int do_init(struct fuse_call *c)
{
	struct fuse_init_in in = { 0 };
	struct fuse_init_out out = { 0 };
	size_t body;

	/* Before 7.36 the struct ends at flags (16 bytes). */
	if (c->alen < offsetof(struct fuse_init_in, flags2))
		return -EINVAL;
	memcpy(&in, c->a, c->alen < sizeof(in) ? c->alen : sizeof(in));
	if (in.major != FUSE_KERNEL_VERSION || in.minor < FUSE_MIN_MINOR) {
		fuse_warn(c->s, "FUSE %" PRIu32 ".%" PRIu32 " not supported",
			  in.major, in.minor);
		return -EPROTO;
	}
	out.major = FUSE_KERNEL_VERSION;
	out.minor = in.minor < FUSE_KERNEL_MINOR_VERSION ?
			    in.minor :
			    FUSE_KERNEL_MINOR_VERSION;
	out.max_readahead = in.max_readahead;
	out.flags = in.flags & INIT_FLAGS;
	/*
	 * FUSE_HANDLE_KILLPRIV_V2 is not granted: with it, Linux 6.1 leaves
	 * a write's set-user-ID clearing to us (FUSE_WRITE_KILL_SUIDGID) but
	 * keeps the old mode in its attribute cache, so the writer's stat
	 * still shows 4755. Without it the guest kernel clears the bits
	 * itself with a SETATTR of the mode and caches the reply. The kill
	 * flags are still honoured if a driver sends them (backend.h).
	 */
	out.max_background = MAX_BACKGROUND;
	out.congestion_threshold = CONGESTION_THRESHOLD;
	out.max_write = FUSE_MAX_WRITE;
	out.time_gran = 1; /* nanoseconds */
	out.max_pages = MAX_PAGES;
	body = out.minor < 23 ? FUSE_COMPAT_22_INIT_OUT_SIZE : sizeof(out);
	if (!fuse_has_room(c->req, body))
		return -EINVAL;
	/*
	 * A new session after DESTROY (an unmount) or a device reset: the
	 * guest knows none of the old one's nodes and handles, and Linux
	 * sent no FORGET for them (its forget queue stops before DESTROY).
	 */
	if (c->s->had_session && HAS(c, end_session))
		c->s->b->ops->end_session(c->s->b);
	c->s->had_session = true;
	__atomic_store_n(&c->s->initialised, true, __ATOMIC_RELEASE);
	fuse_reply_ok(c->req, &out, body);
	return REPLIED;
}

static int do_destroy(struct fuse_call *c)
{
	__atomic_store_n(&c->s->initialised, false, __ATOMIC_RELEASE);
	return reply_status(c, 0);
}

static int do_lookup(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fs_entry e = { 0 };
	const char *name;
	int ret;

	ret = take_name(c, &name);
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(struct fuse_entry_out)))
		return -EINVAL;
	if (!HAS(c, lookup))
		return -ENOSYS;
	ret = b->ops->lookup(b, c->h.nodeid, name, &e);
	return ret ? ret : reply_entry(c, &e);
}

/* No reply, whatever happens. */
static int do_forget(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_forget_in in;

	if (!take_arg(c, &in, sizeof(in)) && HAS(c, forget))
		b->ops->forget(b, c->h.nodeid, in.nlookup);
	fuse_reply_none(c->req);
	return REPLIED;
}

static int do_batch_forget(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_batch_forget_in in;
	struct fuse_forget_one one;

	/* A count the arguments do not hold: forget nothing. */
	if (!take_arg(c, &in, sizeof(in)) &&
	    in.count <= (c->alen - c->pos) / sizeof(one) && HAS(c, forget)) {
		for (uint32_t i = 0; i < in.count; i++) {
			if (take_arg(c, &one, sizeof(one)))
				break;
			b->ops->forget(b, one.nodeid, one.nlookup);
		}
	}
	fuse_reply_none(c->req);
	return REPLIED;
}

static int do_getattr(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_getattr_in in;
	struct fuse_attr attr = { 0 };
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(struct fuse_attr_out)))
		return -EINVAL;
	if (!HAS(c, getattr))
		return -ENOSYS;
	ret = b->ops->getattr(b, c->h.nodeid, &attr);
	return ret ? ret : reply_attr(c, &attr);
}

static int do_setattr(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_setattr_in in;
	struct fuse_attr attr = { 0 };
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if ((in.valid & FATTR_SIZE) && in.size > INT64_MAX)
		return -EFBIG;
	if (!fuse_has_room(c->req, sizeof(struct fuse_attr_out)))
		return -EINVAL;
	if (!HAS(c, setattr))
		return -ENOSYS;
	ret = b->ops->setattr(b, &c->ctx, c->h.nodeid, &in, &attr);
	return ret ? ret : reply_attr(c, &attr);
}

static int do_readlink(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	ssize_t n;

	if (!HAS(c, readlink))
		return -ENOSYS;
	n = b->ops->readlink(b, c->h.nodeid, (char *)c->s->data, FS_PATH_MAX);
	if (n < 0)
		return (int)n;
	if ((size_t)n > FS_PATH_MAX)
		return -EIO;
	if (!fuse_has_room(c->req, (size_t)n))
		return -ENAMETOOLONG;
	fuse_reply_ok(c->req, c->s->data, (size_t)n);
	return REPLIED;
}

static int do_symlink(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fs_entry e = { 0 };
	const char *name, *target;
	size_t len;
	int ret;

	ret = take_name(c, &name);
	if (ret)
		return ret;
	ret = take_string(c, &target, &len);
	if (ret)
		return ret;
	if (!len)
		return -ENOENT;
	if (len > FS_PATH_MAX)
		return -ENAMETOOLONG;
	if (!fuse_has_room(c->req, sizeof(struct fuse_entry_out)))
		return -EINVAL;
	if (!HAS(c, symlink))
		return -ENOSYS;
	ret = b->ops->symlink(b, &c->ctx, c->h.nodeid, name, target, &e);
	return ret ? ret : reply_entry(c, &e);
}

static int do_mknod(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_mknod_in in;
	struct fs_entry e = { 0 };
	const char *name;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (!ret)
		ret = take_name(c, &name);
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(struct fuse_entry_out)))
		return -EINVAL;
	if (!HAS(c, mknod))
		return -ENOSYS;
	ret = b->ops->mknod(b, &c->ctx, c->h.nodeid, name, in.mode, in.rdev,
			    in.umask, &e);
	return ret ? ret : reply_entry(c, &e);
}

static int do_mkdir(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_mkdir_in in;
	struct fs_entry e = { 0 };
	const char *name;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (!ret)
		ret = take_name(c, &name);
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(struct fuse_entry_out)))
		return -EINVAL;
	if (!HAS(c, mkdir))
		return -ENOSYS;
	ret = b->ops->mkdir(b, &c->ctx, c->h.nodeid, name, in.mode, in.umask,
			    &e);
	return ret ? ret : reply_entry(c, &e);
}

static int do_unlink(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	const char *name;
	int ret;

	ret = take_name(c, &name);
	if (ret)
		return ret;
	if (c->h.opcode == FUSE_RMDIR) {
		if (!HAS(c, rmdir))
			return -ENOSYS;
		return reply_status(c, b->ops->rmdir(b, c->h.nodeid, name));
	}
	if (!HAS(c, unlink))
		return -ENOSYS;
	return reply_status(c, b->ops->unlink(b, c->h.nodeid, name));
}

static int do_rename(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	const char *name, *newname;
	uint64_t newdir;
	uint32_t flags = 0;
	int ret;

	if (c->h.opcode == FUSE_RENAME2) {
		struct fuse_rename2_in in;

		ret = take_arg(c, &in, sizeof(in));
		newdir = in.newdir;
		flags = in.flags;
	} else {
		struct fuse_rename_in in;

		ret = take_arg(c, &in, sizeof(in));
		newdir = in.newdir;
	}
	if (!ret)
		ret = take_name(c, &name);
	if (!ret)
		ret = take_name(c, &newname);
	if (ret)
		return ret;
	/* Not RENAME_WHITEOUT (overlayfs only), not both at once. */
	if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    flags == (RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if (!HAS(c, rename))
		return -ENOSYS;
	return reply_status(c, b->ops->rename(b, c->h.nodeid, name, newdir,
					      newname, flags));
}

static int do_link(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_link_in in;
	struct fs_entry e = { 0 };
	const char *name;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (!ret)
		ret = take_name(c, &name);
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(struct fuse_entry_out)))
		return -EINVAL;
	if (!HAS(c, link))
		return -ENOSYS;
	ret = b->ops->link(b, in.oldnodeid, c->h.nodeid, name, &e);
	return ret ? ret : reply_entry(c, &e);
}

static int do_open(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_open_in in;
	uint32_t open_flags = 0;
	uint64_t fh = 0;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(struct fuse_open_out)))
		return -EINVAL;
	if (c->h.opcode == FUSE_OPENDIR) {
		if (!HAS(c, opendir))
			return -ENOSYS;
		ret = b->ops->opendir(b, c->h.nodeid, &fh);
	} else {
		if (!HAS(c, open))
			return -ENOSYS;
		if ((in.open_flags & FUSE_OPEN_KILL_SUIDGID) &&
		    (in.flags & O_TRUNC) && HAS(c, kill_suidgid)) {
			ret = b->ops->kill_suidgid(b, c->h.nodeid);
			if (ret)
				return ret;
		}
		/* As backend.h says: creating is CREATE's business. */
		ret = b->ops->open(b, c->h.nodeid,
				   in.flags & ~(O_CREAT | O_EXCL | O_NOCTTY),
				   &fh, &open_flags);
	}
	return ret ? ret : reply_open(c, fh, open_flags);
}

static int do_create(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct {
		struct fuse_entry_out entry;
		struct fuse_open_out open;
	} o;
	struct fuse_create_in in;
	struct fs_entry e = { 0 };
	uint32_t open_flags = 0;
	const char *name;
	uint64_t fh = 0;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (!ret)
		ret = take_name(c, &name);
	if (ret)
		return ret;
	if (!fuse_has_room(c->req, sizeof(o)))
		return -EINVAL;
	if (!HAS(c, create))
		return -ENOSYS;
	ret = b->ops->create(b, &c->ctx, c->h.nodeid, name, in.mode,
			     in.flags & ~O_NOCTTY, in.umask, &e, &fh,
			     &open_flags);
	if (ret)
		return ret;
	/*
	 * After: the node exists only now. A failure cannot be answered
	 * without losing the handle, and leaves only the bits as they were.
	 */
	if ((in.open_flags & FUSE_OPEN_KILL_SUIDGID) && (in.flags & O_TRUNC) &&
	    HAS(c, kill_suidgid) && b->ops->kill_suidgid(b, e.nodeid))
		fuse_warn(c->s, "CREATE: could not clear set-user-ID");
	fill_entry(c->s, &o.entry, &e);
	o.open = (struct fuse_open_out){ .fh = fh,
					 .open_flags =
						 open_flags & FOPEN_KNOWN };
	fuse_reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

/*
 * The host fd for a READ or WRITE, or -ENOTSUP for the iovec path.
 * Anything else is the backend's error for the request.
 */
static int data_fd(struct fuse_call *c, uint64_t fh, bool write)
{
	struct fs_backend *b = c->s->b;

	if (!c->s->ring || !HAS(c, io_fd))
		return -ENOTSUP;
	return b->ops->io_fd(b, c->h.nodeid, fh, write);
}

/*
 * READ or WRITE of size bytes at offset, its checks done and req->io_iov
 * set: straight between the host fd and guest memory on the ring when the
 * backend has one for fh, else through the backend's read or write op.
 */
static int data_io(struct fuse_call *c, bool write, uint64_t fh,
		   uint64_t offset, uint32_t size)
{
	struct fs_backend *b = c->s->b;
	struct fuse_req *req = c->req;
	int fd = data_fd(c, fh, write);
	ssize_t n;

	if (fd >= 0) {
		req->write = write;
		req->fd = fd;
		req->offset = offset;
		req->done = 0;
		req->left = size;
		fuse_submit_io(c->s, req);
		return REPLIED;
	}
	if (fd != -ENOTSUP)
		return fd;
	if (write ? !HAS(c, write) : !HAS(c, read))
		return -ENOSYS;
	if (write)
		n = b->ops->write(b, c->h.nodeid, fh, req->io_iov,
				  (int)req->io_cnt, offset);
	else
		n = b->ops->read(b, c->h.nodeid, fh, req->io_iov,
				 (int)req->io_cnt, offset);
	if (n < 0)
		return (int)n;
	if ((uint64_t)n > size)
		return -EIO;
	req->done = (uint64_t)n;
	if (write)
		fuse_finish_write(req);
	else
		fuse_finish_read(req);
	return REPLIED;
}

static int do_read(struct fuse_call *c)
{
	struct fuse_req *req = c->req;
	struct fuse_read_in in;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (in.offset > INT64_MAX || in.size > FUSE_MAX_WRITE ||
	    !fuse_has_room(req, in.size))
		return -EINVAL;
	if (!in.size) {
		fuse_reply_ok(req, NULL, 0);
		return REPLIED;
	}
	ret = iov__sub(req->in, req->nr_in, 0, OUT_HDR, req->hdr_iov,
		       ARRAY_SIZE(req->hdr_iov));
	if (ret <= 0)
		return -EINVAL; /* cannot happen: has_room, 1-byte segments */
	req->nr_hdr = (unsigned int)ret;
	req->io_iov = iov__narrow(req->in, req->nr_in, OUT_HDR, in.size,
				  &req->io_cnt);

	return data_io(c, false, in.fh, in.offset, in.size);
}

static int do_write(struct fuse_call *c)
{
	struct fuse_req *req = c->req;
	struct fuse_write_in in;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	/* The data follows, and is exactly as long as the size says. */
	if (in.size != c->alen - sizeof(in) || in.size > FUSE_MAX_WRITE ||
	    in.offset > INT64_MAX)
		return -EINVAL;
	if (!fuse_has_room(req, sizeof(struct fuse_write_out)))
		return -EINVAL;
	req->done = 0;
	if ((in.write_flags & FUSE_WRITE_KILL_SUIDGID) &&
	    HAS(c, kill_suidgid)) {
		ret = c->s->b->ops->kill_suidgid(c->s->b, c->h.nodeid);
		if (ret)
			return ret;
	}
	if (!in.size) {
		fuse_finish_write(req);
		return REPLIED;
	}
	req->io_iov = iov__narrow(req->out, req->nr_out, IN_HDR + sizeof(in),
				  in.size, &req->io_cnt);

	return data_io(c, true, in.fh, in.offset, in.size);
}

static int do_statfs(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_statfs_out o = { 0 };
	int ret;

	if (!fuse_has_room(c->req, sizeof(o)))
		return -EINVAL;
	if (!HAS(c, statfs))
		return -ENOSYS;
	ret = b->ops->statfs(b, c->h.nodeid, &o.st);
	if (ret)
		return ret;
	fuse_reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

/* RELEASE and RELEASEDIR: the handle goes whatever the answer. */
static int do_release(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_release_in in;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (c->h.opcode == FUSE_RELEASEDIR)
		ret = HAS(c, releasedir) ?
			      b->ops->releasedir(b, c->h.nodeid, in.fh) :
			      -ENOSYS;
	else
		ret = HAS(c, release) ? b->ops->release(b, c->h.nodeid, in.fh) :
					-ENOSYS;
	return reply_status(c, ret);
}

static int do_flush(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_flush_in in;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (!HAS(c, flush))
		return -ENOSYS;
	return reply_status(c, b->ops->flush(b, c->h.nodeid, in.fh));
}

static int do_fsync(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_fsync_in in;
	bool datasync;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	datasync = in.fsync_flags & FUSE_FSYNC_FDATASYNC;
	if (c->h.opcode == FUSE_FSYNCDIR) {
		if (!HAS(c, fsyncdir))
			return -ENOSYS;
		ret = b->ops->fsyncdir(b, c->h.nodeid, in.fh, datasync);
	} else {
		if (!HAS(c, fsync))
			return -ENOSYS;
		ret = b->ops->fsync(b, c->h.nodeid, in.fh, datasync);
	}
	return reply_status(c, ret);
}

static int do_readdir(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_read_in in;
	struct fs_dirbuf d;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (in.size > FUSE_MAX_WRITE || !fuse_has_room(c->req, in.size))
		return -EINVAL;
	if (!HAS(c, readdir))
		return -ENOSYS;
	/* Fewer bytes than asked for is a valid answer: the guest goes on. */
	d = (struct fs_dirbuf){
		.buf = c->s->data,
		.size = in.size < FUSE_DIRBUF_MAX ? in.size : FUSE_DIRBUF_MAX,
	};
	ret = b->ops->readdir(b, c->h.nodeid, in.fh, in.offset, &d);
	if (ret)
		return ret;
	if (d.used > d.size)
		return -EIO;
	fuse_reply_ok(c->req, d.buf, d.used);
	return REPLIED;
}

static int do_fallocate(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_fallocate_in in;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	if (in.mode != 0 && in.mode != FALLOC_FL_KEEP_SIZE &&
	    in.mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (in.offset > INT64_MAX || !in.length || in.length > INT64_MAX ||
	    in.length > INT64_MAX - in.offset)
		return in.length ? -EFBIG : -EINVAL;
	if (!HAS(c, fallocate))
		return -ENOSYS;
	return reply_status(c,
			    b->ops->fallocate(b, c->h.nodeid, in.fh, in.offset,
					      in.length, in.mode));
}

static int do_lseek(struct fuse_call *c)
{
	struct fs_backend *b = c->s->b;
	struct fuse_lseek_in in;
	struct fuse_lseek_out o;
	int64_t off;
	int ret;

	ret = take_arg(c, &in, sizeof(in));
	if (ret)
		return ret;
	/* SEEK_SET, CUR and END the guest's kernel does itself. */
	if ((in.whence != SEEK_DATA && in.whence != SEEK_HOLE) ||
	    in.offset > INT64_MAX)
		return -EINVAL;
	if (!fuse_has_room(c->req, sizeof(o)))
		return -EINVAL;
	if (!HAS(c, lseek))
		return -ENOSYS;
	off = b->ops->lseek(b, c->h.nodeid, in.fh, in.offset, in.whence);
	if (off < 0)
		return off < -ERRNO_MAX ? -EIO : (int)off;
	o.offset = (uint64_t)off;
	fuse_reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

/*
 * ACCESS: ENOSYS, which the guest's kernel remembers (no_access) and then
 * grants; it checks permissions itself anyway (virtio-fs mounts with
 * default_permissions), against the attributes we give.
 */
static int do_nosys(struct fuse_call *c)
{
	return -ENOSYS;
}

static const struct fuse_op fuse_ops[] = {
	[FUSE_LOOKUP] = { do_lookup },
	[FUSE_FORGET] = { do_forget, .no_reply = true },
	[FUSE_GETATTR] = { do_getattr },
	[FUSE_SETATTR] = { do_setattr, .mutates = true },
	[FUSE_READLINK] = { do_readlink },
	[FUSE_SYMLINK] = { do_symlink, .mutates = true },
	[FUSE_MKNOD] = { do_mknod, .mutates = true },
	[FUSE_MKDIR] = { do_mkdir, .mutates = true },
	[FUSE_UNLINK] = { do_unlink, .mutates = true },
	[FUSE_RMDIR] = { do_unlink, .mutates = true },
	[FUSE_RENAME] = { do_rename, .mutates = true },
	[FUSE_LINK] = { do_link, .mutates = true },
	[FUSE_OPEN] = { do_open },
	[FUSE_READ] = { do_read },
	[FUSE_WRITE] = { do_write, .mutates = true, .data = true },
	[FUSE_STATFS] = { do_statfs },
	[FUSE_RELEASE] = { do_release },
	[FUSE_FSYNC] = { do_fsync },
	[FUSE_SETXATTR] = { do_nosys, .mutates = true },
	[FUSE_GETXATTR] = { do_nosys },
	[FUSE_LISTXATTR] = { do_nosys },
	[FUSE_REMOVEXATTR] = { do_nosys, .mutates = true },
	[FUSE_FLUSH] = { do_flush },
	[FUSE_INIT] = { do_init },
	[FUSE_OPENDIR] = { do_open },
	[FUSE_READDIR] = { do_readdir },
	[FUSE_RELEASEDIR] = { do_release },
	[FUSE_FSYNCDIR] = { do_fsync },
	[FUSE_ACCESS] = { do_nosys },
	[FUSE_CREATE] = { do_create, .mutates = true },
	[FUSE_DESTROY] = { do_destroy },
	[FUSE_BATCH_FORGET] = { do_batch_forget, .no_reply = true },
	[FUSE_FALLOCATE] = { do_fallocate, .mutates = true },
	[FUSE_RENAME2] = { do_rename, .mutates = true },
	[FUSE_LSEEK] = { do_lseek },
	/*
	 * Not implemented here; listed so that a read-only mount relays the
	 * ones that do not write (a relay's server may implement them).
	 */
	[FUSE_GETLK] = { do_nosys },
	[FUSE_SETLK] = { do_nosys },
	[FUSE_SETLKW] = { do_nosys },
	[FUSE_BMAP] = { do_nosys },
	[FUSE_IOCTL] = { do_nosys, .mutates = true },
	[FUSE_POLL] = { do_nosys },
	[FUSE_READDIRPLUS] = { do_nosys },
	[FUSE_COPY_FILE_RANGE] = { do_nosys, .mutates = true },
	[FUSE_SETUPMAPPING] = { do_nosys, .mutates = true },
	[FUSE_REMOVEMAPPING] = { do_nosys },
	[FUSE_SYNCFS] = { do_nosys },
	[FUSE_TMPFILE] = { do_nosys, .mutates = true },
};

const struct fuse_op *fuse_op_find(uint32_t opcode)
{
	if (opcode >= ARRAY_SIZE(fuse_ops) || !fuse_ops[opcode].fn)
		return NULL;
	return &fuse_ops[opcode];
}

bool fuse_op_is_nosys(const struct fuse_op *op)
{
	return op->fn == do_nosys;
}
