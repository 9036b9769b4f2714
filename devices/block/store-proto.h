/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_STORE_PROTO_H
#define KILN_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * The block-store protocol (Documentation/rootfs.md, "Block stores"): a
 * cow root's writable layer kept by a store the orchestrator serves on a
 * Unix stream socket. Every message is a frame:
 *
 *	u32 length (little-endian: the bytes after it, type included)
 *	u8  type
 *	... payload (every integer little-endian)
 *
 * The vmm sends a request and waits for its answer, one at a time. An
 * answer's type is the request's | STORE_REPLY, or STORE_ERROR. These
 * functions only build and check bytes: no I/O, no allocation.
 */

#define STORE_PROTO_VERSION 1U
#define STORE_BLOCK_SIZE    4096U      /* the only block size this vmm takes */
#define STORE_FRAME_HDR	    4U	       /* the length field */
#define STORE_MSG_MAX	    (2U << 20) /* bytes after the length field */
#define STORE_IO_BLOCKS	    256U       /* blocks in one read or write */
#define STORE_LIST_MAX	    65536U     /* block numbers in one list answer */
#define STORE_BASE_MAX	    128U       /* bytes of the base's identity */
#define STORE_ERRMSG_MAX    1024U      /* bytes of an error's text */
#define STORE_TOKEN_MAX	    64U	       /* bytes of a state token */

enum store_msg {
	STORE_HELLO = 0x01,
	STORE_LIST = 0x02,
	STORE_READ = 0x03,
	STORE_WRITE = 0x04,
	STORE_FLUSH = 0x05,
	STORE_STATE = 0x06, /* the store's state token now */
	STORE_REPLY = 0x80, /* ORed into the request's type */
	STORE_ERROR = 0xff,
};

#define STORE_HELLO_CLAIM 0x1U /* flags: this connection is the writer */

/* write entries: a block's bytes follow, or it reads as zeros */
enum store_chunk { STORE_CHUNK_DATA = 0, STORE_CHUNK_ZERO = 1 };

struct store_hello {
	uint32_t version;
	uint32_t block_size;
	uint64_t nr_blocks; /* the base's size in blocks */
	uint32_t flags;	    /* STORE_HELLO_CLAIM */
	const char *base;   /* "sha256:<64 hex>", the descriptor's digest */
};

/*
 * A state token (Documentation/rootfs.md, "State tokens"): opaque bytes
 * that name what the store holds, changed by every write a flush made
 * durable. len 0: the store gives none (a hello answer without one).
 */
struct store_token {
	uint8_t len; /* 0, or 1 to STORE_TOKEN_MAX */
	uint8_t bytes[STORE_TOKEN_MAX];
};

/* A token's bytes as hex ("none" for no token); out holds 2 * max + 1. */
#define STORE_TOKEN_HEX (2 * STORE_TOKEN_MAX + 1)
void store_proto__token_hex(const struct store_token *t,
			    char out[STORE_TOKEN_HEX]);
/* Hex back into a token: -EINVAL unless 2 to 2 * STORE_TOKEN_MAX digits. */
int __must_check store_proto__token_parse(const char *hex,
					  struct store_token *t);
bool store_proto__token_equal(const struct store_token *a,
			      const struct store_token *b);

struct store_hello_reply {
	uint32_t version;
	uint32_t block_size;
	uint64_t stored;	  /* blocks the store holds (list's total) */
	struct store_token token; /* optional: len 0 when absent */
};

struct store_range {
	uint64_t first; /* block number */
	uint32_t count; /* blocks */
};

/*
 * Builders: the whole frame (length field included) into buf, its size
 * returned; -E2BIG when cap is too small or a limit above is passed,
 * -EINVAL for a request no store could answer.
 */
int __must_check store_proto__hello(uint8_t *buf, size_t cap,
				    const struct store_hello *h);
int __must_check store_proto__list(uint8_t *buf, size_t cap, uint64_t cursor,
				   uint32_t max);
int __must_check store_proto__read(uint8_t *buf, size_t cap,
				   const struct store_range *r,
				   unsigned int nr);
int __must_check store_proto__flush(uint8_t *buf, size_t cap);
int __must_check store_proto__state(uint8_t *buf, size_t cap);
/*
 * A write is built in place: store_proto__write_start, then one
 * store_proto__write_add per block (data NULL: a zero block), then
 * store_proto__write_end; each -E2BIG past STORE_IO_BLOCKS or cap.
 */
struct store_write_buf {
	uint8_t *buf;
	size_t cap;
	size_t len;
	uint32_t nr;
	uint32_t block_size;
};
void store_proto__write_start(struct store_write_buf *w, uint8_t *buf,
			      size_t cap, uint32_t block_size);
int __must_check store_proto__write_add(struct store_write_buf *w,
					uint64_t block, const uint8_t *data);
int __must_check store_proto__write_end(struct store_write_buf *w);

/*
 * A frame's length field: 0 and the body's length, or -EPROTO (err
 * names it) for an empty or oversized one.
 */
int __must_check store_proto__frame_len(const uint8_t hdr[STORE_FRAME_HDR],
					uint32_t *len, char *err, size_t elen);

/*
 * An answer's body (type byte first) to request type: 0 when it is the
 * request's reply; an STORE_ERROR turns into -errno (the store's code,
 * -EIO when it is none the vmm knows) with err "store refused: <text>";
 * anything else -EPROTO with err naming what was wrong.
 */
int __must_check store_proto__check(uint8_t type, const uint8_t *body,
				    size_t len, char *err, size_t elen);

/*
 * The payloads of checked answers (body + 1, len - 1); -EPROTO + err. A
 * hello answer is its 16 fixed bytes, or those and a token (u16 n, then
 * n bytes, 1 to STORE_TOKEN_MAX); a state answer is a token alone.
 */
int __must_check store_proto__parse_hello(const uint8_t *p, size_t len,
					  struct store_hello_reply *r,
					  char *err, size_t elen);
int __must_check store_proto__parse_state(const uint8_t *p, size_t len,
					  struct store_token *t, char *err,
					  size_t elen);
/*
 * A list answer for cursor: *next (UINT64_MAX: the end) and *n block
 * numbers at *blocks (little-endian u64s, read with store_proto__u64),
 * each checked: ascending, >= cursor, < *next and < nr_blocks.
 */
int __must_check store_proto__parse_list(const uint8_t *p, size_t len,
					 uint64_t cursor, uint64_t nr_blocks,
					 uint64_t *next, const uint8_t **blocks,
					 uint32_t *n, char *err, size_t elen);
/* A read answer: exactly count blocks of block_size, *data the first. */
int __must_check store_proto__parse_read(const uint8_t *p, size_t len,
					 uint32_t count, uint32_t block_size,
					 const uint8_t **data, char *err,
					 size_t elen);
/* A write's or a flush's answer: empty. */
int __must_check store_proto__parse_empty(const uint8_t *p, size_t len,
					  const char *what, char *err,
					  size_t elen);

static inline uint64_t store_proto__u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#endif
