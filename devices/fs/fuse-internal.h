/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_FUSE_INTERNAL_H
#define KILN_FS_FUSE_INTERNAL_H

/*
 * What the two halves of the FUSE server share (fuse.h is the outside's
 * view). fuse.c takes a request from the device: it checks its header,
 * gathers its arguments, refuses what a read-only mount may not do,
 * dispatches it to its op or forwards it whole to a relaying backend,
 * writes the replies into the guest's buffers and runs READ and WRITE on
 * the ring. fuse-ops.c has the ops: one handler per opcode, which
 * decodes the op's arguments, calls the backend and answers.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "devices/fs/fuse.h"

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

typedef int (*fuse_op_fn)(struct fuse_call *c);

/* How an opcode is handled: fuse-ops.c's table. */
struct fuse_op {
	fuse_op_fn fn;
	bool mutates;  /* refused on a read-only mount */
	bool no_reply; /* FORGET and BATCH_FORGET */
	bool data;     /* WRITE: only the fuse_write_in is gathered */
};

/* Room for a reply of body bytes after its header. */
static inline bool fuse_has_room(const struct fuse_req *req, size_t body)
{
	return req->in_len >= OUT_HDR + body;
}

/*
 * fuse.c: the log (the server's first problem only: a guest cannot flood
 * it), replies and READ and WRITE on the ring.
 */
void fuse_warn(struct fuse_server *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void fuse_reply_ok(struct fuse_req *req, const void *body, size_t len);
void fuse_reply_none(struct fuse_req *req);
void fuse_submit_io(struct fuse_server *s, struct fuse_req *req);
void fuse_finish_read(struct fuse_req *req);
void fuse_finish_write(struct fuse_req *req);

/* fuse-ops.c: the op of an opcode, NULL for one not known. */
const struct fuse_op *fuse_op_find(uint32_t opcode);
/* The op only answers -ENOSYS (one the backend is never asked). */
bool fuse_op_is_nosys(const struct fuse_op *op);

#endif
