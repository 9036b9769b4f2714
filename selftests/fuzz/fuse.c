// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz fuse - the FUSE request decoder (devices/fs/fuse.c) and the
 * in-memory file system behind it (devices/fs/memfs*.c), as a guest
 * drives them through virtio-fs: any requests, in any order, their
 * bytes split across segments as descriptors may split them. The
 * in-memory backend keeps the fuzzer off the host's files.
 *
 * Input: requests, each two bytes (little-endian) of its length, one of
 * the reply buffer's, a byte of how the two are split into segments,
 * and the request bytes (a fuse_in_header and its arguments). The
 * target opens the session with a FUSE_INIT of its own first, so
 * inputs start at the operations.
 *
 * Checked for every input: every request is answered (or, for those
 * that take none, not) at once, never parked; a reply fits the buffer
 * the guest gave, its header says its own length and the request's
 * unique, its error is 0 or a negative errno.
 */
#include <errno.h>
#include <linux/fuse.h>

#include "devices/fs/fuse.h"
#include "devices/fs/memfs.h"
#include "selftests/fuzz/fuzz.h"

#define MAX_REQUESTS	64
#define REPLY_MAX	((64U << 10) + 4096) /* a READDIR's and a bit */
#define MAX_SEGS	8U
#define MEMFS_MAX_BYTES (1U << 20)
#define INIT_UNIQUE	1
#define ROOT_NODE	1

struct fuzz_fuse {
	struct fuse_req req;
	struct iovec out[MAX_SEGS], in[MAX_SEGS];
	uint8_t *reply;
	bool done;
	uint32_t len;
};

static void on_park(struct fuse_req *req)
{
	fuzz_check(false); /* memfs answers every request at once */
}

static void on_done(struct fuse_req *req, const void *reply, uint32_t len)
{
	struct fuzz_fuse *f = (struct fuzz_fuse *)req;

	fuzz_check(!f->done && !reply);
	fuzz_check(len <= req->in_len);
	f->done = true;
	f->len = len;
}

static const struct fuse_req_ops ops = { .park = on_park, .done = on_done };

/* buf[0, len) as up to nr segments: cut at the split byte's choices. */
static unsigned int split(struct iovec *iov, uint8_t *buf, size_t len,
			  uint8_t how)
{
	unsigned int nr = 1 + how % MAX_SEGS, i;
	size_t off = 0, n;

	for (i = 0; i < nr - 1 && off < len; i++) {
		n = 1 + (how * (i + 7)) % (len - off);
		iov[i] = (struct iovec){ buf + off, n };
		off += n;
	}
	iov[i++] = (struct iovec){ buf + off, len - off };
	return i;
}

/* One request; the reply checked against what the guest can see. */
static void request(struct fuse_server *s, struct fuzz_fuse *f,
		    const uint8_t *p, size_t len, size_t reply_len, uint8_t how)
{
	struct fuse_in_header ih;
	struct fuse_out_header oh;
	uint8_t *copy = malloc(len ? len : 1);

	fuzz_check(copy);
	memcpy(copy, p, len);
	memset(&f->req, 0, sizeof(f->req));
	f->req.ops = &ops;
	f->req.out = f->out;
	f->req.nr_out = split(f->out, copy, len, how);
	f->req.out_len = len;
	f->req.in = f->in;
	f->req.nr_in = split(f->in, f->reply, reply_len, how >> 3);
	f->req.in_len = reply_len;
	f->done = false;
	fuse_server__handle(s, &f->req);
	fuzz_check(f->done);
	if (f->len >= sizeof(oh)) {
		memcpy(&oh, f->reply, sizeof(oh));
		fuzz_check(oh.len == f->len);
		fuzz_check(oh.error <= 0 && oh.error > -4096);
		if (len >= sizeof(ih)) {
			memcpy(&ih, copy, sizeof(ih));
			fuzz_check(oh.unique == ih.unique);
		}
	}
	free(copy);
}

static void init_session(struct fuse_server *s, struct fuzz_fuse *f)
{
	struct {
		struct fuse_in_header h;
		struct fuse_init_in in;
	} init = { .h = { .len = sizeof(init),
			  .opcode = FUSE_INIT,
			  .unique = INIT_UNIQUE,
			  .nodeid = ROOT_NODE },
		   .in = { .major = FUSE_KERNEL_VERSION,
			   .minor = FUSE_KERNEL_MINOR_VERSION,
			   .max_readahead = 1U << 17,
			   .flags = FUSE_ASYNC_READ | FUSE_BIG_WRITES |
				    FUSE_DO_READDIRPLUS |
				    FUSE_EXPORT_SUPPORT } };

	request(s, f, (const uint8_t *)&init, sizeof(init), REPLY_MAX, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct memfs_params mp = { .name = "fuzz",
					 .max_bytes = MEMFS_MAX_BYTES };
	struct fuse_server_params sp = { .name = "fuzz" };
	static struct fuzz_fuse f;
	struct fuse_server *s;
	struct fs_backend *b;
	struct fuzz_in in;

	fuzz__quiet();
	if (!f.reply) {
		f.reply = malloc(REPLY_MAX);
		fuzz_check(f.reply);
	}
	if (memfs__create(&b, &mp))
		return 0;
	sp.backend = b;
	if (fuse_server__create(&s, &sp)) {
		fs_backend__destroy(b);
		return 0;
	}
	init_session(s, &f);
	fuzz_in__init(&in, data, size);
	for (int i = 0; i < MAX_REQUESTS && in.left; i++) {
		size_t len, want = fuzz_in__u16(&in);
		size_t reply_len = fuzz_in__u16(&in) % (REPLY_MAX + 1);
		uint8_t how = fuzz_in__u8(&in);
		const uint8_t *p = fuzz_in__bytes(&in, want, &len);

		request(s, &f, p, len, reply_len, how);
	}
	fuse_server__reset(s);
	fuse_server__destroy(s);
	fs_backend__destroy(b);
	return 0;
}
