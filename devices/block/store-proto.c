// SPDX-License-Identifier: GPL-2.0
/*
 * The block-store protocol's bytes (see store-proto.h): builders for the
 * requests and checks for the answers. Every length an answer states is
 * checked against the bytes that came before anything is read.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "devices/block/store-proto.h"

#define HELLO_FIXED	 (4 + 4 + 8 + 4 + 2) /* before the base's bytes */
#define HELLO_REPLY_LEN	 (4 + 4 + 8)
#define LIST_REPLY_FIXED (8 + 4)
#define RANGE_LEN	 (8 + 4)
#define ERROR_FIXED	 (4 + 2)
#define TOKEN_FIXED	 2 /* u16 n before a token's bytes */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

static uint16_t get16(const uint8_t *p)
{
	return p[0] | (uint16_t)p[1] << 8;
}

static uint32_t get32(const uint8_t *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static int proto_err(char *err, size_t elen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int proto_err(char *err, size_t elen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, elen, fmt, ap);
	va_end(ap);
	return -EPROTO;
}

/* The frame header and type for a payload of len bytes; NULL: no room. */
static uint8_t *frame(uint8_t *buf, size_t cap, uint8_t type, size_t len)
{
	if (len + 1 > STORE_MSG_MAX || cap < STORE_FRAME_HDR + 1 + len)
		return NULL;
	put32(buf, (uint32_t)(len + 1));
	buf[STORE_FRAME_HDR] = type;
	return buf + STORE_FRAME_HDR + 1;
}

int store_proto__hello(uint8_t *buf, size_t cap, const struct store_hello *h)
{
	size_t blen = h->base ? strlen(h->base) : 0;
	uint8_t *p;

	if (!blen || blen > STORE_BASE_MAX)
		return -EINVAL;
	p = frame(buf, cap, STORE_HELLO, HELLO_FIXED + blen);
	if (!p)
		return -E2BIG;
	put32(p, h->version);
	put32(p + 4, h->block_size);
	put64(p + 8, h->nr_blocks);
	put32(p + 16, h->flags);
	put16(p + 20, (uint16_t)blen);
	memcpy(p + HELLO_FIXED, h->base, blen);
	return STORE_FRAME_HDR + 1 + HELLO_FIXED + blen;
}

int store_proto__list(uint8_t *buf, size_t cap, uint64_t cursor, uint32_t max)
{
	uint8_t *p;

	if (!max || max > STORE_LIST_MAX)
		return -EINVAL;
	p = frame(buf, cap, STORE_LIST, 12);
	if (!p)
		return -E2BIG;
	put64(p, cursor);
	put32(p + 8, max);
	return STORE_FRAME_HDR + 1 + 12;
}

int store_proto__read(uint8_t *buf, size_t cap, const struct store_range *r,
		      unsigned int nr)
{
	uint64_t total = 0;
	uint8_t *p;

	if (!nr || nr > STORE_IO_BLOCKS)
		return -EINVAL;
	for (unsigned int i = 0; i < nr; i++) {
		if (!r[i].count || r[i].first > UINT64_MAX - r[i].count)
			return -EINVAL;
		total += r[i].count;
	}
	if (total > STORE_IO_BLOCKS)
		return -E2BIG;
	p = frame(buf, cap, STORE_READ, 4 + (size_t)nr * RANGE_LEN);
	if (!p)
		return -E2BIG;
	put32(p, nr);
	for (unsigned int i = 0; i < nr; i++) {
		put64(p + 4 + i * RANGE_LEN, r[i].first);
		put32(p + 4 + i * RANGE_LEN + 8, r[i].count);
	}
	return STORE_FRAME_HDR + 1 + 4 + nr * RANGE_LEN;
}

int store_proto__flush(uint8_t *buf, size_t cap)
{
	if (!frame(buf, cap, STORE_FLUSH, 0))
		return -E2BIG;
	return STORE_FRAME_HDR + 1;
}

int store_proto__state(uint8_t *buf, size_t cap)
{
	if (!frame(buf, cap, STORE_STATE, 0))
		return -E2BIG;
	return STORE_FRAME_HDR + 1;
}

/* Frame header, type and the entry count come first: 9 bytes. */
#define WRITE_FIXED (STORE_FRAME_HDR + 1 + 4)

void store_proto__write_start(struct store_write_buf *w, uint8_t *buf,
			      size_t cap, uint32_t block_size)
{
	*w = (struct store_write_buf){
		.buf = buf,
		.cap = cap,
		.len = WRITE_FIXED,
		.block_size = block_size,
	};
}

int store_proto__write_add(struct store_write_buf *w, uint64_t block,
			   const uint8_t *data)
{
	size_t need = 9 + (data ? w->block_size : 0);

	if (w->nr >= STORE_IO_BLOCKS || w->len + need > w->cap ||
	    w->len + need - STORE_FRAME_HDR > STORE_MSG_MAX)
		return -E2BIG;
	put64(w->buf + w->len, block);
	w->buf[w->len + 8] = data ? STORE_CHUNK_DATA : STORE_CHUNK_ZERO;
	if (data)
		memcpy(w->buf + w->len + 9, data, w->block_size);
	w->len += need;
	w->nr++;
	return 0;
}

int store_proto__write_end(struct store_write_buf *w)
{
	if (!w->nr || w->cap < WRITE_FIXED)
		return -EINVAL;
	put32(w->buf, (uint32_t)(w->len - STORE_FRAME_HDR));
	w->buf[STORE_FRAME_HDR] = STORE_WRITE;
	put32(w->buf + STORE_FRAME_HDR + 1, w->nr);
	return (int)w->len;
}

int store_proto__frame_len(const uint8_t hdr[STORE_FRAME_HDR], uint32_t *len,
			   char *err, size_t elen)
{
	uint32_t n = get32(hdr);

	if (!n)
		return proto_err(err, elen, "an empty frame (no type byte)");
	if (n > STORE_MSG_MAX)
		return proto_err(err, elen,
				 "a frame of %" PRIu32 " bytes (at most %u)", n,
				 STORE_MSG_MAX);
	*len = n;
	return 0;
}

/* The errno values a store may answer with; any other is EIO. */
static int known_errno(uint32_t code)
{
	switch (code) {
	case EBUSY:
	case EINVAL:
	case EIO:
	case ENOENT:
	case ENOSPC:
	case EPERM:
	case EACCES:
	case EROFS:
		return (int)code;
	default:
		return EIO;
	}
}

static int parse_error(const uint8_t *p, size_t len, char *err, size_t elen)
{
	uint16_t mlen;

	if (len < ERROR_FIXED)
		return proto_err(err, elen,
				 "an error answer of %zu bytes (at least %d)",
				 len, ERROR_FIXED);
	mlen = get16(p + 4);
	if (mlen > STORE_ERRMSG_MAX || len != ERROR_FIXED + (size_t)mlen)
		return proto_err(err, elen,
				 "an error answer whose text is %u bytes in "
				 "%zu",
				 mlen, len - ERROR_FIXED);
	/* The text is the store's: only its printable bytes are shown. */
	{
		char text[STORE_ERRMSG_MAX + 1];
		size_t i;

		for (i = 0; i < mlen; i++) {
			uint8_t c = p[ERROR_FIXED + i];

			text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
		}
		text[i] = '\0';
		snprintf(err, elen, "store refused: %s (%s)", text,
			 strerror(known_errno(get32(p))));
	}
	return -known_errno(get32(p));
}

int store_proto__check(uint8_t type, const uint8_t *body, size_t len, char *err,
		       size_t elen)
{
	if (!len)
		return proto_err(err, elen, "an answer without a type");
	if (body[0] == STORE_ERROR)
		return parse_error(body + 1, len - 1, err, elen);
	if (body[0] != (type | STORE_REPLY))
		return proto_err(err, elen,
				 "answer type 0x%02x to request 0x%02x "
				 "(expected 0x%02x)",
				 body[0], type, type | STORE_REPLY);
	return 0;
}

/* A token (u16 n, n bytes) that is exactly the len bytes at p. */
static int parse_token(const uint8_t *p, size_t len, const char *what,
		       struct store_token *t, char *err, size_t elen)
{
	uint16_t n;

	if (len < TOKEN_FIXED)
		return proto_err(err, elen,
				 "a %s answer whose token is cut short (%zu "
				 "bytes)",
				 what, len);
	n = get16(p);
	if (!n || n > STORE_TOKEN_MAX || len != TOKEN_FIXED + (size_t)n)
		return proto_err(err, elen,
				 "a %s answer with a %u-byte token in %zu "
				 "bytes (1 to %u)",
				 what, n, len - TOKEN_FIXED, STORE_TOKEN_MAX);
	t->len = (uint8_t)n;
	memcpy(t->bytes, p + TOKEN_FIXED, n);
	return 0;
}

int store_proto__parse_hello(const uint8_t *p, size_t len,
			     struct store_hello_reply *r, char *err,
			     size_t elen)
{
	if (len < HELLO_REPLY_LEN)
		return proto_err(err, elen,
				 "a hello answer of %zu bytes (expected %d, "
				 "or more with a state token)",
				 len, HELLO_REPLY_LEN);
	r->version = get32(p);
	r->block_size = get32(p + 4);
	r->stored = store_proto__u64(p + 8);
	r->token.len = 0;
	if (len == HELLO_REPLY_LEN)
		return 0; /* a store that gives no token */
	return parse_token(p + HELLO_REPLY_LEN, len - HELLO_REPLY_LEN, "hello",
			   &r->token, err, elen);
}

int store_proto__parse_state(const uint8_t *p, size_t len,
			     struct store_token *t, char *err, size_t elen)
{
	return parse_token(p, len, "state", t, err, elen);
}

void store_proto__token_hex(const struct store_token *t,
			    char out[STORE_TOKEN_HEX])
{
	static const char digits[] = "0123456789abcdef";
	unsigned int i;

	if (!t->len) {
		strcpy(out, "none");
		return;
	}
	for (i = 0; i < t->len && i < STORE_TOKEN_MAX; i++) {
		out[2 * i] = digits[t->bytes[i] >> 4];
		out[2 * i + 1] = digits[t->bytes[i] & 0xf];
	}
	out[2 * i] = '\0';
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int store_proto__token_parse(const char *hex, struct store_token *t)
{
	size_t n = hex ? strlen(hex) : 0;

	if (!n || n % 2 || n > 2 * STORE_TOKEN_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		t->bytes[i] = (uint8_t)(hi << 4 | lo);
	}
	t->len = (uint8_t)(n / 2);
	return 0;
}

bool store_proto__token_equal(const struct store_token *a,
			      const struct store_token *b)
{
	return a->len == b->len && !memcmp(a->bytes, b->bytes, a->len);
}

int store_proto__parse_list(const uint8_t *p, size_t len, uint64_t cursor,
			    uint64_t nr_blocks, uint64_t *next,
			    const uint8_t **blocks, uint32_t *n, char *err,
			    size_t elen)
{
	uint64_t prev = 0;
	uint32_t count;

	if (len < LIST_REPLY_FIXED)
		return proto_err(err, elen,
				 "a list answer of %zu bytes (at least %d)",
				 len, LIST_REPLY_FIXED);
	*next = store_proto__u64(p);
	count = get32(p + 8);
	if (count > STORE_LIST_MAX ||
	    len != LIST_REPLY_FIXED + (size_t)count * 8)
		return proto_err(err, elen,
				 "a list answer of %" PRIu32
				 " blocks in %zu bytes",
				 count, len);
	if (*next != UINT64_MAX && *next <= cursor)
		return proto_err(err, elen,
				 "a list answer whose next cursor %" PRIu64
				 " does not move past %" PRIu64,
				 *next, cursor);
	for (uint32_t i = 0; i < count; i++) {
		uint64_t b = store_proto__u64(p + LIST_REPLY_FIXED + i * 8);

		if (b < cursor || b >= nr_blocks || b >= *next ||
		    (i && b <= prev))
			return proto_err(err, elen,
					 "a list answer with block %" PRIu64
					 " (cursor %" PRIu64 ", next %" PRIu64
					 ", %" PRIu64 " blocks, ascending)",
					 b, cursor, *next, nr_blocks);
		prev = b;
	}
	*blocks = p + LIST_REPLY_FIXED;
	*n = count;
	return 0;
}

int store_proto__parse_read(const uint8_t *p, size_t len, uint32_t count,
			    uint32_t block_size, const uint8_t **data,
			    char *err, size_t elen)
{
	uint32_t n;

	if (len < 4)
		return proto_err(err, elen, "a read answer of %zu bytes", len);
	n = get32(p);
	if (n != count)
		return proto_err(err, elen,
				 "a read answer of %" PRIu32 " blocks (%" PRIu32
				 " asked for)",
				 n, count);
	if (len - 4 != (size_t)count * block_size)
		return proto_err(err, elen,
				 "a read answer of %zu data bytes "
				 "(%" PRIu32 " blocks of %" PRIu32 ")",
				 len - 4, count, block_size);
	*data = p + 4;
	return 0;
}

int store_proto__parse_empty(const uint8_t *p, size_t len, const char *what,
			     char *err, size_t elen)
{
	if (len)
		return proto_err(err, elen,
				 "a %s answer of %zu bytes (empty "
				 "expected)",
				 what, len);
	return 0;
}
