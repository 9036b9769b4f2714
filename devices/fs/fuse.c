// SPDX-License-Identifier: GPL-2.0
/*
 * The FUSE server of virtio-fs (see fuse.h).
 *
 * Every request goes the same way: the 40-byte fuse_in_header is gathered
 * and checked against what the guest really gave (its len may not claim
 * more than the readable descriptors hold), then the op's arguments are
 * gathered into the server's buffer (WRITE: only its fuse_write_in; the
 * data stays in guest memory) and decoded with bounds checked at every
 * step: structs shorter than the op's, names that are not NUL-terminated
 * inside the arguments, names with '/', "." or "..", names over
 * FS_NAME_MAX, symlink targets over FS_PATH_MAX, READ and WRITE sizes over
 * max_write or past the guest's buffers all answer an errno, never reach
 * the backend. Ops whose reply has a fixed size check there is room for it
 * before they call the backend, so nothing is done that cannot be told
 * (a CREATE's handle is never lost for want of reply space).
 *
 * The virtual backend gets the request as it is (.forward): the server
 * checks only the header (and, for a read-only mount, that the op does not
 * write), copies the message, and checks the reply that comes back (from
 * any thread) before the device copies it into the guest's buffers.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "devices/fs/fuse.h"
#include "lib/iovec.h"

#define IN_HDR	sizeof(struct fuse_in_header)
#define OUT_HDR sizeof(struct fuse_out_header)

/*
 * Arguments of the largest request decoded here that carries no data:
 * SYMLINK, the header, a name and a target, both NUL-terminated (RENAME2
 * with two names is far smaller). Anything longer is not a valid request
 * of the ops we implement.
 */
#define ARGS_MAX (IN_HDR + FS_NAME_MAX + 1 + FS_PATH_MAX + 1)

/* Largest errno a reply may carry (the kernel's MAX_ERRNO). */
#define ERRNO_MAX 4095

/*
 * Pages of max_write: virtio-fs guests are x86-64 with 4 KiB pages; the
 * kernel caps max_pages at FUSE_MAX_MAX_PAGES (256) anyway.
 */
#define GUEST_PAGE_SIZE 4096U
#define MAX_PAGES	(FUSE_MAX_WRITE / GUEST_PAGE_SIZE)

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

#define NS_PER_MS 1000000U
#define MS_PER_S  1000U

struct fuse_server {
	const char *name;
	struct fs_backend *b;
	struct io_uring *ring;
	uint64_t io_tag;
	uint64_t valid_sec; /* entry and attr timeouts */
	uint32_t valid_nsec;
	bool initialised; /* atomic: forwarded INITs complete anywhere */
	bool had_session; /* an INIT was answered before: loop thread only */
	bool warned;	  /* atomic: one message for the server's life */
	/* The event loop's scratch: arguments, then READDIR and READLINK. */
	uint8_t args[ARGS_MAX] __attribute__((aligned(8)));
	uint8_t data[FUSE_DIRBUF_MAX] __attribute__((aligned(8)));
};

/* One request being decoded: its header and its gathered arguments. */
struct fuse_call {
	struct fuse_server *s;
	struct fuse_req *req;
	struct fuse_in_header h;
	struct fs_ctx ctx;
	const uint8_t *a; /* the arguments, after the header */
	size_t alen;	  /* their bytes, extensions left out */
	size_t pos;	  /* the decoder's cursor in them */
};

/* The handler replied (or will: I/O on the ring). */
#define REPLIED 1

static __attribute__((format(printf, 2, 3))) void
srv_warn(struct fuse_server *s, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	if (__atomic_exchange_n(&s->warned, true, __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	pr_warn("%s: %s; request failed (further errors not logged)", s->name,
		why);
}

/* ---- replies ------------------------------------------------------------ */

static bool has_room(const struct fuse_req *req, size_t body)
{
	return req->in_len >= OUT_HDR + body;
}

/*
 * The reply: header, then body (len bytes; the caller checked the room).
 * After a READ narrowed req->in, the header goes through hdr_iov and the
 * data is already in place. A guest that gave no room for even a header
 * gets its buffers back untouched.
 */
static void send_reply(struct fuse_req *req, int error, const void *body,
		       size_t len)
{
	struct fuse_out_header oh = {
		.len = (uint32_t)(OUT_HDR + len),
		.error = error,
		.unique = req->unique,
	};

	if (!has_room(req, 0)) {
		req->ops->done(req, NULL, 0);
		return;
	}
	if (!has_room(req, len)) {
		oh.len = OUT_HDR;
		oh.error = -EINVAL;
		len = 0;
	}
	if (req->nr_hdr) {
		iov__from_buf(req->hdr_iov, req->nr_hdr, 0, &oh, OUT_HDR);
	} else {
		iov__from_buf(req->in, req->nr_in, 0, &oh, OUT_HDR);
		if (body && len)
			iov__from_buf(req->in, req->nr_in, OUT_HDR, body, len);
	}
	req->ops->done(req, NULL, oh.len);
}

static void reply_err(struct fuse_req *req, int err)
{
	if (err >= 0 || err < -ERRNO_MAX)
		err = -EIO;
	send_reply(req, err, NULL, 0);
}

static void reply_ok(struct fuse_req *req, const void *body, size_t len)
{
	send_reply(req, 0, body, len);
}

static void reply_none(struct fuse_req *req)
{
	req->ops->done(req, NULL, 0);
}

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
	reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

static int reply_attr(struct fuse_call *c, const struct fuse_attr *attr)
{
	struct fuse_attr_out o = {
		.attr_valid = c->s->valid_sec,
		.attr_valid_nsec = c->s->valid_nsec,
		.attr = *attr,
	};

	reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

static int reply_open(struct fuse_call *c, uint64_t fh, uint32_t open_flags)
{
	struct fuse_open_out o = { .fh = fh,
				   .open_flags = open_flags & FOPEN_KNOWN };

	reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

/* An op's int answer: 0 is an empty reply, else the error. */
static int reply_status(struct fuse_call *c, int ret)
{
	if (ret)
		return ret;
	reply_ok(c->req, NULL, 0);
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
		srv_warn(c->s, "FUSE %" PRIu32 ".%" PRIu32 " not supported",
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
	if (!has_room(c->req, body))
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
	reply_ok(c->req, &out, body);
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
	if (!has_room(c->req, sizeof(struct fuse_entry_out)))
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
	reply_none(c->req);
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
	reply_none(c->req);
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
	if (!has_room(c->req, sizeof(struct fuse_attr_out)))
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
	if (!has_room(c->req, sizeof(struct fuse_attr_out)))
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
	if (!has_room(c->req, (size_t)n))
		return -ENAMETOOLONG;
	reply_ok(c->req, c->s->data, (size_t)n);
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
	if (!has_room(c->req, sizeof(struct fuse_entry_out)))
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
	if (!has_room(c->req, sizeof(struct fuse_entry_out)))
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
	if (!has_room(c->req, sizeof(struct fuse_entry_out)))
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
	if (!has_room(c->req, sizeof(struct fuse_entry_out)))
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
	if (!has_room(c->req, sizeof(struct fuse_open_out)))
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
	if (!has_room(c->req, sizeof(o)))
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
		srv_warn(c->s, "CREATE: could not clear set-user-ID");
	fill_entry(c->s, &o.entry, &e);
	o.open = (struct fuse_open_out){ .fh = fh,
					 .open_flags =
						 open_flags & FOPEN_KNOWN };
	reply_ok(c->req, &o, sizeof(o));
	return REPLIED;
}

/* READ and WRITE on the ring, straight between the fd and guest memory. */
static void submit_io(struct fuse_server *s, struct fuse_req *req)
{
	struct io_uring_sqe *sqe;

	/*
	 * The completion queue holds every request in flight (the caller
	 * sized it), so making room in the submission queue only takes a
	 * submit.
	 */
	while (!(sqe = io_uring_get_sqe(s->ring)))
		io_uring_submit(s->ring);
	if (req->write)
		io_uring_prep_writev(sqe, req->fd, req->io_iov, req->io_cnt,
				     req->offset);
	else
		io_uring_prep_readv(sqe, req->fd, req->io_iov, req->io_cnt,
				    req->offset);
	io_uring_sqe_set_data64(sqe, (uintptr_t)req | s->io_tag);
}

static void finish_read(struct fuse_req *req)
{
	send_reply(req, 0, NULL, req->done);
}

static void finish_write(struct fuse_req *req)
{
	struct fuse_write_out o = { .size = (uint32_t)req->done };

	reply_ok(req, &o, sizeof(o));
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
		submit_io(c->s, req);
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
		finish_write(req);
	else
		finish_read(req);
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
	    !has_room(req, in.size))
		return -EINVAL;
	if (!in.size) {
		reply_ok(req, NULL, 0);
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
	if (!has_room(req, sizeof(struct fuse_write_out)))
		return -EINVAL;
	req->done = 0;
	if ((in.write_flags & FUSE_WRITE_KILL_SUIDGID) &&
	    HAS(c, kill_suidgid)) {
		ret = c->s->b->ops->kill_suidgid(c->s->b, c->h.nodeid);
		if (ret)
			return ret;
	}
	if (!in.size) {
		finish_write(req);
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

	if (!has_room(c->req, sizeof(o)))
		return -EINVAL;
	if (!HAS(c, statfs))
		return -ENOSYS;
	ret = b->ops->statfs(b, c->h.nodeid, &o.st);
	if (ret)
		return ret;
	reply_ok(c->req, &o, sizeof(o));
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
	if (in.size > FUSE_MAX_WRITE || !has_room(c->req, in.size))
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
	reply_ok(c->req, d.buf, d.used);
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
	if (!has_room(c->req, sizeof(o)))
		return -EINVAL;
	if (!HAS(c, lseek))
		return -ENOSYS;
	off = b->ops->lseek(b, c->h.nodeid, in.fh, in.offset, in.whence);
	if (off < 0)
		return off < -ERRNO_MAX ? -EIO : (int)off;
	o.offset = (uint64_t)off;
	reply_ok(c->req, &o, sizeof(o));
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

typedef int (*fuse_op_fn)(struct fuse_call *c);

struct fuse_op {
	fuse_op_fn fn;
	bool mutates;  /* refused on a read-only mount */
	bool no_reply; /* FORGET and BATCH_FORGET */
	bool data;     /* WRITE: only the fuse_write_in is gathered */
};

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

static const struct fuse_op *find_op(uint32_t opcode)
{
	if (opcode >= ARRAY_SIZE(fuse_ops) || !fuse_ops[opcode].fn)
		return NULL;
	return &fuse_ops[opcode];
}

static bool is_no_reply(uint32_t opcode)
{
	return opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET ||
	       opcode == FUSE_INTERRUPT;
}

/*
 * A read-only mount refuses every op that would change it, before the
 * backend sees it: -EROFS, or 0. OPEN writes when it asks for write
 * access or truncation (an O_ACCMODE of 3 counts as writing). The op's
 * arguments must be gathered.
 */
static int ro_check(const struct fuse_call *c, const struct fuse_op *op)
{
	struct fuse_open_in in;

	if (!c->s->b->read_only)
		return 0;
	if (op && op->mutates)
		return -EROFS;
	if (c->h.opcode == FUSE_OPEN) {
		if (c->alen < sizeof(in))
			return -EINVAL;
		memcpy(&in, c->a, sizeof(in));
		if ((in.flags & O_ACCMODE) != O_RDONLY || (in.flags & O_TRUNC))
			return -EROFS;
	}
	/* Ops we do not know may write: the relay's server cannot tell. */
	if (!op && c->s->b->ops->forward && !is_no_reply(c->h.opcode))
		return -EROFS;
	return 0;
}

/* ---- forwarding ---------------------------------------------------------- */

static void forward_error(struct fuse_req *req, int err)
{
	struct fuse_out_header oh = { .len = OUT_HDR,
				      .error = err,
				      .unique = req->unique };

	if (!has_room(req, 0))
		req->ops->done(req, NULL, 0);
	else
		req->ops->done(req, &oh, OUT_HDR);
}

/*
 * The relay's INIT answer, made safe for us: max_write and max_pages no
 * larger than a forwarded message can carry. The session starts.
 */
static int forward_init(struct fuse_server *s, const void *reply, size_t len,
			uint8_t *buf, size_t size)
{
	struct fuse_init_out out = { 0 };

	if (len < OUT_HDR + FUSE_COMPAT_22_INIT_OUT_SIZE || len > size)
		return -EIO;
	memcpy(buf, reply, len);
	memcpy(&out, buf + OUT_HDR, len - OUT_HDR);
	if (out.major != FUSE_KERNEL_VERSION)
		return -EIO;
	if (out.max_write > FUSE_MAX_WRITE)
		out.max_write = FUSE_MAX_WRITE;
	if (out.max_pages > MAX_PAGES)
		out.max_pages = MAX_PAGES;
	memcpy(buf + OUT_HDR, &out, len - OUT_HDR);
	__atomic_store_n(&s->initialised, true, __ATOMIC_RELEASE);
	return 0;
}

/* The backend's complete(): any thread, exactly once. */
static void forward_complete(struct fs_forward_req *fwd, const void *reply,
			     ssize_t len)
{
	struct fuse_req *req =
		(struct fuse_req *)((uint8_t *)fwd -
				    offsetof(struct fuse_req, fwd));
	struct fuse_server *s = req->s;
	uint8_t init[OUT_HDR + sizeof(struct fuse_init_out)];
	struct fuse_out_header oh;

	free(req->msg);
	req->msg = NULL;
	if (is_no_reply(req->opcode)) {
		req->ops->done(req, NULL, 0);
		return;
	}
	if (!reply) {
		if (len >= 0 || len < -ERRNO_MAX) {
			srv_warn(s, "relay failed %" PRIu32 " without an errno",
				 req->opcode);
			len = -EIO;
		}
		forward_error(req, (int)len);
		return;
	}
	if (len < (ssize_t)OUT_HDR || (uint64_t)len > req->in_len ||
	    (size_t)len > FS_FORWARD_MAX) {
		srv_warn(s,
			 "relay's reply to %" PRIu32 ": %zd bytes for %" PRIu64,
			 req->opcode, len, req->in_len);
		goto bad;
	}
	memcpy(&oh, reply, sizeof(oh));
	if (oh.len != (uint64_t)len || oh.unique != req->unique ||
	    oh.error > 0 || oh.error < -ERRNO_MAX ||
	    (oh.error && len != (ssize_t)OUT_HDR)) {
		srv_warn(s, "relay's reply to %" PRIu32 " is malformed",
			 req->opcode);
		goto bad;
	}
	if (req->opcode == FUSE_INIT && !oh.error) {
		if (forward_init(s, reply, (size_t)len, init, sizeof(init))) {
			srv_warn(s, "relay's INIT reply is malformed");
			goto bad;
		}
		reply = init;
	}
	req->ops->done(req, reply, (uint32_t)len);
	return;
bad:
	forward_error(req, -EIO);
}

/*
 * The whole message to the backend. The request is parked first: from
 * there on the guest's buffers are written only through done's copy.
 */
static void do_forward(struct fuse_call *c)
{
	struct fuse_server *s = c->s;
	struct fuse_req *req = c->req;
	struct fs_backend *b = s->b;
	int ret;

	if (c->h.len > FS_FORWARD_MAX) {
		reply_err(req, -E2BIG);
		return;
	}
	req->msg = malloc(c->h.len);
	if (!req->msg) {
		reply_err(req, -ENOMEM);
		return;
	}
	iov__to_buf(req->out, req->nr_out, 0, req->msg, c->h.len);
	c->a = (const uint8_t *)req->msg + IN_HDR;
	ret = ro_check(c, find_op(c->h.opcode));
	if (ret) {
		free(req->msg);
		req->msg = NULL;
		reply_err(req, ret);
		return;
	}
	req->fwd = (struct fs_forward_req){
		.msg = req->msg,
		.len = c->h.len,
		.unique = req->unique,
		.opcode = req->opcode,
		.reply_room = req->in_len < FS_FORWARD_MAX ? req->in_len :
							     FS_FORWARD_MAX,
		.complete = forward_complete,
		.priv = s,
	};
	req->ops->park(req);
	ret = b->ops->forward(b, &req->fwd);
	if (ret)
		forward_complete(&req->fwd, NULL, ret < 0 ? ret : -EIO);
}

/* ---- requests ------------------------------------------------------------ */

void fuse_server__handle(struct fuse_server *s, struct fuse_req *req)
{
	struct fuse_call c = { .s = s, .req = req };
	const struct fuse_op *op;
	size_t ext, need;
	int ret;

	req->s = s;
	req->unique = 0;
	req->opcode = 0;
	req->nr_hdr = 0;
	req->msg = NULL;
	if (req->out_len < IN_HDR ||
	    iov__to_buf(req->out, req->nr_out, 0, &c.h, IN_HDR) != IN_HDR) {
		srv_warn(s, "request of %" PRIu64 " bytes, without a header",
			 req->out_len);
		reply_err(req, -EINVAL);
		return;
	}
	req->unique = c.h.unique;
	req->opcode = c.h.opcode;
	c.ctx = (struct fs_ctx){ .uid = c.h.uid,
				 .gid = c.h.gid,
				 .pid = c.h.pid };
	ext = (size_t)c.h.total_extlen * 8; /* in 8-byte units */
	if (c.h.len < IN_HDR || c.h.len > req->out_len ||
	    ext > c.h.len - IN_HDR) {
		srv_warn(s,
			 "request %" PRIu32 " claims %" PRIu32
			 " bytes, has %" PRIu64,
			 c.h.opcode, c.h.len, req->out_len);
		if (is_no_reply(c.h.opcode))
			reply_none(req);
		else
			reply_err(req, -EINVAL);
		return;
	}
	c.alen = c.h.len - IN_HDR - ext;

	/* Never sent by Linux's virtio-fs; there is nothing to cancel. */
	if (c.h.opcode == FUSE_INTERRUPT) {
		reply_none(req);
		return;
	}
	if (c.h.opcode != FUSE_INIT &&
	    !__atomic_load_n(&s->initialised, __ATOMIC_ACQUIRE)) {
		if (is_no_reply(c.h.opcode))
			reply_none(req);
		else
			reply_err(req, -EIO);
		return;
	}
	/* Nothing is done that the guest cannot be told about. */
	if (!is_no_reply(c.h.opcode) && !has_room(req, 0)) {
		srv_warn(s, "request %" PRIu32 " without room for a reply",
			 c.h.opcode);
		reply_none(req);
		return;
	}
	if (s->b->ops->forward) {
		do_forward(&c);
		return;
	}

	op = find_op(c.h.opcode);
	if (!op) {
		reply_err(req, -ENOSYS);
		return;
	}
	if (op->fn == do_nosys) {
		ret = ro_check(&c, op);
		reply_err(req, ret ? ret : -ENOSYS);
		return;
	}
	need = op->data ? sizeof(struct fuse_write_in) : c.alen;
	if (need > c.alen)
		need = c.alen;
	if (IN_HDR + need > sizeof(s->args)) {
		srv_warn(s, "request %" PRIu32 " with %zu bytes of arguments",
			 c.h.opcode, need);
		if (op->no_reply)
			reply_none(req);
		else
			reply_err(req, -EINVAL);
		return;
	}
	memcpy(s->args, &c.h, IN_HDR);
	iov__to_buf(req->out, req->nr_out, IN_HDR, s->args + IN_HDR, need);
	c.a = s->args + IN_HDR;
	/* WRITE: alen still counts the data, which stays in guest memory. */
	if (!op->data)
		c.alen = need;
	ret = ro_check(&c, op);
	if (!ret)
		ret = op->fn(&c);
	if (ret != REPLIED)
		reply_err(req, ret);
}

void fuse_server__io_complete(struct fuse_server *s, struct fuse_req *req,
			      int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		submit_io(s, req);
		return;
	}
	if (res < 0) {
		/* A write that got somewhere answers with what it did. */
		if (req->write && req->done)
			finish_write(req);
		else
			reply_err(req, res);
		return;
	}
	if ((uint64_t)res > req->left)
		res = (int)req->left; /* the kernel never does more */
	req->done += (uint64_t)res;
	req->left -= (uint64_t)res;
	if (!req->write) {
		/* A short read is a valid, short answer: end of file. */
		finish_read(req);
		return;
	}
	if (req->left && res > 0) {
		/* Short write: go on from where it stopped. */
		iov__advance(&req->io_iov, &req->io_cnt, (uint64_t)res);
		req->offset += (uint64_t)res;
		submit_io(s, req);
		return;
	}
	if (!req->done)
		reply_err(req, -EIO);
	else
		finish_write(req);
}

void fuse_server__reset(struct fuse_server *s)
{
	__atomic_store_n(&s->initialised, false, __ATOMIC_RELEASE);
}

bool fuse_server__live(const struct fuse_server *s)
{
	return __atomic_load_n(&s->initialised, __ATOMIC_ACQUIRE);
}

void fuse_server__abandon(struct fuse_server *s, struct fuse_req *req)
{
	free(req->msg);
	req->msg = NULL;
}

/* ---- readdir entries and the server's life ------------------------------ */

bool fs_dirbuf__add(struct fs_dirbuf *d, const char *name, size_t namelen,
		    uint64_t ino, uint32_t type, uint64_t off)
{
	struct fuse_dirent de = {
		.ino = ino,
		.off = off,
		.namelen = (uint32_t)namelen,
		.type = type,
	};
	size_t rec = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + namelen);

	/* A name no guest may see: dropped, the listing goes on. */
	if (!namelen || namelen > FS_NAME_MAX || memchr(name, '/', namelen))
		return true;
	if (d->used > d->size || rec > d->size - d->used)
		return false;
	memcpy(d->buf + d->used, &de, FUSE_NAME_OFFSET);
	memcpy(d->buf + d->used + FUSE_NAME_OFFSET, name, namelen);
	memset(d->buf + d->used + FUSE_NAME_OFFSET + namelen, 0,
	       rec - FUSE_NAME_OFFSET - namelen);
	d->used += rec;
	return true;
}

int fuse_server__create(struct fuse_server **out,
			const struct fuse_server_params *p)
{
	struct fuse_server *s;

	if (!p->backend || !p->backend->ops || p->io_tag >= 8)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->name = p->name ? p->name : "virtio-fs";
	s->b = p->backend;
	s->ring = p->ring;
	s->io_tag = p->io_tag;
	s->valid_sec = p->attr_timeout_ms / MS_PER_S;
	s->valid_nsec = p->attr_timeout_ms % MS_PER_S * NS_PER_MS;
	*out = s;
	return 0;
}

void fuse_server__destroy(struct fuse_server *s)
{
	free(s);
}
