/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_FUSE_H
#define KILN_FS_FUSE_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "lib/compiler.h"
#include "devices/fs/backend.h"
#include "lib/log.h"

/*
 * The FUSE protocol server of virtio-fs (protocol 7.x, linux/fuse.h). It
 * takes one request at a time as the guest laid it out (the readable
 * descriptors: fuse_in_header, the op's arguments, data; the writable ones
 * for the reply), checks and decodes it, calls the mount's backend
 * (devices/fs/backend.h) and writes the reply (fuse_out_header, the op's
 * answer). It knows nothing of rings: the device (devices/virtio/fs.c)
 * pops chains and pushes them back when the server says a request is done.
 *
 * Threads: fuse_server__handle() and fuse_server__io_complete() run on the
 * device's event loop thread only, as do the backend's ops. A request the
 * server forwards (backend .forward) completes on whatever thread the
 * backend answers from; see struct fuse_req_ops.
 *
 * Data: READ and WRITE go straight between guest memory and the backend:
 * on the caller's io_uring when the backend offers io_fd (readv into the
 * guest's reply buffers after the fuse_out_header, writev from the guest's
 * request buffers after the fuse_write_in), else through backend->read and
 * ->write with the guest buffers as iovecs. Nothing else is large: the
 * header, the arguments and names are gathered into the server's own
 * buffer before they are checked, so the guest cannot change them under
 * the server's feet.
 */

#define FUSE_MAX_WRITE	(1U << 20)  /* max_write, and the largest READ */
#define FUSE_MIN_MINOR	12	    /* oldest protocol we speak: umask */
#define FUSE_DIRBUF_MAX (64U << 10) /* a READDIR answers at most this */
/* Segments a 16-byte fuse_out_header can span (each is >= 1 byte). */
#define FUSE_HDR_SEGS 16

struct fuse_server;
struct fuse_req;

/*
 * How the server hands a request back. Both may be called from any thread
 * for a forwarded request (the backend's), else from the event loop.
 */
struct fuse_req_ops {
	/*
	 * The request now waits on another thread (it was forwarded): until
	 * done, the server writes nothing into its buffers except through
	 * done's copy.
	 */
	void (*park)(struct fuse_req *req);
	/*
	 * The request is over; the server never touches req again. With
	 * reply NULL, len bytes of reply are in req->in already (0: no
	 * reply, as for FORGET). With reply set (a parked request), the
	 * caller copies len bytes (at most req->in_len) into req->in, if the
	 * buffers are still the guest's (no reset since).
	 */
	void (*done)(struct fuse_req *req, const void *reply, uint32_t len);
};

/*
 * One request. The caller fills the first block and keeps the iovec
 * arrays (which the server may narrow in place) and the struct alive
 * until done. The rest is the server's.
 */
struct fuse_req {
	const struct fuse_req_ops *ops;
	struct iovec *out; /* readable: the request */
	unsigned int nr_out;
	uint64_t out_len;
	struct iovec *in; /* writable: the reply */
	unsigned int nr_in;
	uint64_t in_len;

	/* The server's from here on. */
	struct fuse_server *s;
	uint64_t unique;
	uint32_t opcode;
	/* A READ or WRITE on the ring. */
	bool write;
	int fd;
	uint64_t offset; /* of the next transfer */
	uint64_t done;	 /* bytes so far */
	uint64_t left;	 /* bytes still to go */
	struct iovec *io_iov;
	unsigned int io_cnt;
	/* A READ's reply header: 16 bytes span at most 16 segments. */
	unsigned int nr_hdr;
	struct iovec hdr_iov[FUSE_HDR_SEGS];
	/* A forwarded request. */
	struct fs_forward_req fwd;
	void *msg;
};

struct fuse_server_params {
	const char *name;	      /* for the log; outlives the server */
	struct fs_backend *backend;   /* borrowed: outlives the server */
	unsigned int attr_timeout_ms; /* entry and attr validity */
	/*
	 * The event loop's ring, for READ and WRITE through io_fd. Each
	 * SQE's user_data is the struct fuse_req pointer ORed with io_tag
	 * (a value below 8: requests are 8-byte aligned); its completion goes
	 * to fuse_server__io_complete(). The ring's completion queue must
	 * hold one entry per request in flight.
	 */
	struct io_uring *ring;
	uint64_t io_tag;
};

int __must_check fuse_server__create(struct fuse_server **out,
				     const struct fuse_server_params *p);
/* NULL ok. Does not destroy the backend. */
void fuse_server__destroy(struct fuse_server *s);

/* Takes a request; its ops->done follows, now or later. */
void fuse_server__handle(struct fuse_server *s, struct fuse_req *req);

/* A CQE of one of the server's SQEs: res as the kernel gave it. */
void fuse_server__io_complete(struct fuse_server *s, struct fuse_req *req,
			      int res);

/*
 * The driver reset the device: the session is over, a new INIT comes
 * next. Any thread; the caller keeps its own generation for buffers.
 */
void fuse_server__reset(struct fuse_server *s);

/*
 * A FUSE session is open: the guest's INIT was answered and no DESTROY
 * or device reset has ended it since (the guest has the file system
 * mounted, or is mounting it). Any thread.
 */
bool fuse_server__live(const struct fuse_server *s);

/*
 * A parked request whose backend was destroyed before it answered: free
 * what the server holds for it (done is not called).
 */
void fuse_server__abandon(struct fuse_server *s, struct fuse_req *req);

#endif
