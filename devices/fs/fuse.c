// SPDX-License-Identifier: GPL-2.0
/*
 * The FUSE server of virtio-fs (see fuse.h): requests in, replies out. The
 * ops that answer them are in fuse-ops.c (fuse-internal.h between them).
 *
 * Every request goes the same way: the 40-byte fuse_in_header is gathered
 * and checked against what the guest really gave (its len may not claim
 * more than the readable descriptors hold), then the op's arguments are
 * gathered into the server's buffer (WRITE: only its fuse_write_in; the
 * data stays in guest memory) for the op to decode (fuse-ops.c).
 *
 * The virtual backend gets the request as it is (.forward): the server
 * checks only the header (and, for a read-only mount, that the op does not
 * write), copies the message, and checks the reply that comes back (from
 * any thread) before the device copies it into the guest's buffers.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "devices/fs/fuse-internal.h"
#include "lib/iovec.h"
#include "lib/resident.h"

#define NS_PER_MS 1000000U
#define MS_PER_S  1000U

void fuse_warn(struct fuse_server *s, const char *fmt, ...)
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

	if (!fuse_has_room(req, 0)) {
		req->ops->done(req, NULL, 0);
		return;
	}
	if (!fuse_has_room(req, len)) {
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

void fuse_reply_ok(struct fuse_req *req, const void *body, size_t len)
{
	send_reply(req, 0, body, len);
}

void fuse_reply_none(struct fuse_req *req)
{
	req->ops->done(req, NULL, 0);
}

/* ---- READ and WRITE on the ring ----------------------------------------- */

/* Straight between the fd and guest memory. */
void fuse_submit_io(struct fuse_server *s, struct fuse_req *req)
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

/* A READ's or WRITE's answer once its data moved: req->done bytes. */
void fuse_finish_read(struct fuse_req *req)
{
	send_reply(req, 0, NULL, req->done);
}

void fuse_finish_write(struct fuse_req *req)
{
	struct fuse_write_out o = { .size = (uint32_t)req->done };

	fuse_reply_ok(req, &o, sizeof(o));
}

/* ---- checks -------------------------------------------------------------- */

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

	if (!fuse_has_room(req, 0))
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
			fuse_warn(s,
				  "relay failed %" PRIu32 " without an errno",
				  req->opcode);
			len = -EIO;
		}
		forward_error(req, (int)len);
		return;
	}
	if (len < (ssize_t)OUT_HDR || (uint64_t)len > req->in_len ||
	    (size_t)len > FS_FORWARD_MAX) {
		fuse_warn(s,
			  "relay's reply to %" PRIu32
			  ": %zd bytes for %" PRIu64,
			  req->opcode, len, req->in_len);
		goto bad;
	}
	memcpy(&oh, reply, sizeof(oh));
	if (oh.len != (uint64_t)len || oh.unique != req->unique ||
	    oh.error > 0 || oh.error < -ERRNO_MAX ||
	    (oh.error && len != (ssize_t)OUT_HDR)) {
		fuse_warn(s, "relay's reply to %" PRIu32 " is malformed",
			  req->opcode);
		goto bad;
	}
	if (req->opcode == FUSE_INIT && !oh.error) {
		if (forward_init(s, reply, (size_t)len, init, sizeof(init))) {
			fuse_warn(s, "relay's INIT reply is malformed");
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
	ret = ro_check(c, fuse_op_find(c->h.opcode));
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
		fuse_warn(s, "request of %" PRIu64 " bytes, without a header",
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
		fuse_warn(s,
			  "request %" PRIu32 " claims %" PRIu32
			  " bytes, has %" PRIu64,
			  c.h.opcode, c.h.len, req->out_len);
		if (is_no_reply(c.h.opcode))
			fuse_reply_none(req);
		else
			reply_err(req, -EINVAL);
		return;
	}
	c.alen = c.h.len - IN_HDR - ext;

	/* Never sent by Linux's virtio-fs; there is nothing to cancel. */
	if (c.h.opcode == FUSE_INTERRUPT) {
		fuse_reply_none(req);
		return;
	}
	if (c.h.opcode != FUSE_INIT &&
	    !__atomic_load_n(&s->initialised, __ATOMIC_ACQUIRE)) {
		if (is_no_reply(c.h.opcode))
			fuse_reply_none(req);
		else
			reply_err(req, -EIO);
		return;
	}
	/* Nothing is done that the guest cannot be told about. */
	if (!is_no_reply(c.h.opcode) && !fuse_has_room(req, 0)) {
		fuse_warn(s, "request %" PRIu32 " without room for a reply",
			  c.h.opcode);
		fuse_reply_none(req);
		return;
	}
	if (s->b->ops->forward) {
		do_forward(&c);
		return;
	}

	op = fuse_op_find(c.h.opcode);
	if (!op) {
		reply_err(req, -ENOSYS);
		return;
	}
	if (fuse_op_is_nosys(op)) {
		ret = ro_check(&c, op);
		reply_err(req, ret ? ret : -ENOSYS);
		return;
	}
	need = op->data ? sizeof(struct fuse_write_in) : c.alen;
	if (need > c.alen)
		need = c.alen;
	if (IN_HDR + need > sizeof(s->args)) {
		fuse_warn(s, "request %" PRIu32 " with %zu bytes of arguments",
			  c.h.opcode, need);
		if (op->no_reply)
			fuse_reply_none(req);
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
		fuse_submit_io(s, req);
		return;
	}
	if (res < 0) {
		/* A write that got somewhere answers with what it did. */
		if (req->write && req->done)
			fuse_finish_write(req);
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
		fuse_finish_read(req);
		return;
	}
	if (req->left && res > 0) {
		/* Short write: go on from where it stopped. */
		iov__advance(&req->io_iov, &req->io_cnt, (uint64_t)res);
		req->offset += (uint64_t)res;
		fuse_submit_io(s, req);
		return;
	}
	if (!req->done)
		reply_err(req, -EIO);
	else
		fuse_finish_write(req);
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
	/* Its scratch buffers are backed only when used (resident.h). */
	s = resident__table(1, sizeof(*s));
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
	resident__free_table(s, 1, sizeof(*s));
}
