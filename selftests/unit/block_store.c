// SPDX-License-Identifier: GPL-2.0
/*
 * The block-store protocol of cow roots (devices/block/store-proto.h):
 * its codec on bytes written out by hand, the client (store.h) against
 * scripted stores (a child process that answers each request as the test
 * says: an error, a short read, nothing at all, a cut), and the cow layer
 * (store-cow.h) over a disk, against scripted stores and the reference
 * in-memory store (tools/kiln-store-mem, python3).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/block/store-cow.h"
#include "devices/block/store-proto.h"
#include "devices/block/store.h"
#include "lib/compiler.h"
#include "selftests/kselftest.h"

#define BS	  STORE_BLOCK_SIZE
#define NR_BLOCKS 64
#define BASE	  "sha256:0123456789abcdef"
#define BUF_BYTES (STORE_FRAME_HDR + STORE_MSG_MAX)

static uint8_t buf[BUF_BYTES];
static char err[512];

/* ---- bytes ----------------------------------------------------------- */

static void le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

TEST(hello_bytes)
{
	struct store_hello h = { .version = 1,
				 .block_size = BS,
				 .nr_blocks = 0x0102030405ULL,
				 .flags = STORE_HELLO_CLAIM,
				 .base = "sha256:ab" };
	static const uint8_t want[] = {
		32,  0,	  0,   0,   STORE_HELLO, /* length, type */
		1,   0,	  0,   0,   0,		 0x10, 0,   0, /* version, block size */
		5,   4,	  3,   2,   1,		 0,    0,   0, /* blocks */
		1,   0,	  0,   0,   9,		 0, /* flags, base length */
		's', 'h', 'a', '2', '5',	 '6',  ':', 'a', 'b',
	};

	ASSERT_EQ((int)sizeof(want), store_proto__hello(buf, sizeof(buf), &h));
	ASSERT_EQ(0, memcmp(want, buf, sizeof(want)));
	ASSERT_EQ(-E2BIG, store_proto__hello(buf, sizeof(want) - 1, &h));
	h.base = "";
	ASSERT_EQ(-EINVAL, store_proto__hello(buf, sizeof(buf), &h));
}

TEST(frame_length_bounds)
{
	uint8_t hdr[4];
	uint32_t n;

	le32(hdr, 0);
	ASSERT_EQ(-EPROTO, store_proto__frame_len(hdr, &n, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "empty frame"));
	le32(hdr, STORE_MSG_MAX + 1);
	ASSERT_EQ(-EPROTO, store_proto__frame_len(hdr, &n, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "frame of 2097153 bytes"));
	le32(hdr, STORE_MSG_MAX);
	ASSERT_EQ(0, store_proto__frame_len(hdr, &n, err, sizeof(err)));
	ASSERT_EQ(STORE_MSG_MAX, n);
}

TEST(error_answers)
{
	uint8_t b[64] = { STORE_ERROR };

	le32(b + 1, EBUSY);
	b[5] = 4;
	memcpy(b + 7, "held", 4);
	ASSERT_EQ(-EBUSY,
		  store_proto__check(STORE_HELLO, b, 11, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "store refused: held"));
	/* An errno the vmm does not know is EIO. */
	le32(b + 1, 9999);
	ASSERT_EQ(-EIO,
		  store_proto__check(STORE_HELLO, b, 11, err, sizeof(err)));
	/* The text's length is not the bytes there are. */
	b[5] = 5;
	ASSERT_EQ(-EPROTO,
		  store_proto__check(STORE_HELLO, b, 11, err, sizeof(err)));
	/* Another request's answer. */
	b[0] = STORE_READ | STORE_REPLY;
	ASSERT_EQ(-EPROTO,
		  store_proto__check(STORE_FLUSH, b, 1, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "answer type 0x83 to request 0x05"));
	ASSERT_EQ(0, store_proto__check(STORE_READ, b, 1, err, sizeof(err)));
}

/* A list answer: next, then the blocks. */
static size_t list_answer(uint8_t *p, uint64_t next, const uint64_t *b,
			  uint32_t n)
{
	le64(p, next);
	le32(p + 8, n);
	for (uint32_t i = 0; i < n; i++)
		le64(p + 12 + 8 * i, b[i]);
	return 12 + 8 * n;
}

TEST(list_answers_checked)
{
	const uint64_t good[] = { 3, 9, 40 }, down[] = { 9, 3 },
		       past[] = { 3, NR_BLOCKS };
	const uint8_t *blocks;
	uint64_t next;
	uint32_t n;
	size_t len;

	len = list_answer(buf, UINT64_MAX, good, 3);
	ASSERT_EQ(0, store_proto__parse_list(buf, len, 0, NR_BLOCKS, &next,
					     &blocks, &n, err, sizeof(err)));
	ASSERT_EQ(3, n);
	ASSERT_EQ(40, store_proto__u64(blocks + 16));
	len = list_answer(buf, UINT64_MAX, down, 2);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_list(buf, len, 0, NR_BLOCKS, &next,
					  &blocks, &n, err, sizeof(err)));
	len = list_answer(buf, UINT64_MAX, past, 2);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_list(buf, len, 0, NR_BLOCKS, &next,
					  &blocks, &n, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "block 64"));
	/* A block before the cursor; a cursor that does not move. */
	len = list_answer(buf, UINT64_MAX, good, 3);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_list(buf, len, 4, NR_BLOCKS, &next,
					  &blocks, &n, err, sizeof(err)));
	len = list_answer(buf, 5, NULL, 0);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_list(buf, len, 5, NR_BLOCKS, &next,
					  &blocks, &n, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "does not move"));
	/* The count says more than the bytes hold. */
	len = list_answer(buf, UINT64_MAX, good, 3);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_list(buf, len - 1, 0, NR_BLOCKS, &next,
					  &blocks, &n, err, sizeof(err)));
}

TEST(read_requests_and_answers)
{
	struct store_range r[2] = { { 1, 200 }, { 300, 57 } };
	const uint8_t *data;

	ASSERT_EQ(-E2BIG, store_proto__read(buf, sizeof(buf), r, 2));
	r[1].count = 56;
	ASSERT_EQ(4 + 1 + 4 + 24, store_proto__read(buf, sizeof(buf), r, 2));
	r[1].count = 0;
	ASSERT_EQ(-EINVAL, store_proto__read(buf, sizeof(buf), r, 2));

	le32(buf, 2);
	ASSERT_EQ(0, store_proto__parse_read(buf, 4 + 2 * BS, 2, BS, &data, err,
					     sizeof(err)));
	ASSERT_EQ(buf + 4, data);
	/* One block fewer than asked, and a block cut short. */
	ASSERT_EQ(-EPROTO, store_proto__parse_read(buf, 4 + 2 * BS, 3, BS,
						   &data, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "2 blocks (3 asked for)"));
	ASSERT_EQ(-EPROTO, store_proto__parse_read(buf, 4 + 2 * BS - 1, 2, BS,
						   &data, err, sizeof(err)));
}

TEST(write_is_bounded)
{
	static uint8_t block[BS];
	struct store_write_buf w;

	store_proto__write_start(&w, buf, sizeof(buf), BS);
	ASSERT_EQ(0, store_proto__write_add(&w, 7, NULL));
	for (unsigned int i = 1; i < STORE_IO_BLOCKS; i++)
		ASSERT_EQ(0, store_proto__write_add(&w, i, block));
	ASSERT_EQ(-E2BIG, store_proto__write_add(&w, 9, NULL));
	ASSERT_EQ((int)(9 + 9 * STORE_IO_BLOCKS + (STORE_IO_BLOCKS - 1) * BS),
		  store_proto__write_end(&w));
	ASSERT_EQ(STORE_WRITE, buf[4]);
	ASSERT_EQ(0, buf[5]); /* 256 blocks: 0x100 */
	ASSERT_EQ(1, buf[6]);
	ASSERT_EQ(7, buf[9]);			 /* the zero block's number */
	ASSERT_EQ(STORE_CHUNK_ZERO, buf[9 + 8]); /* and its kind */
	/* Nothing to send is a caller's mistake. */
	store_proto__write_start(&w, buf, sizeof(buf), BS);
	ASSERT_EQ(-EINVAL, store_proto__write_end(&w));
}

/* A hello answer's payload: 16 fixed bytes, then a token of n bytes. */
static size_t hello_answer(uint8_t *p, uint16_t n, size_t token_bytes)
{
	le32(p, 1);
	le32(p + 4, BS);
	le64(p + 8, 3);
	p[16] = n;
	p[17] = n >> 8;
	for (size_t i = 0; i < token_bytes; i++)
		p[18 + i] = 0xa0 + i;
	return 18 + token_bytes;
}

TEST(hello_answer_with_and_without_a_token)
{
	struct store_hello_reply r;
	char hex[STORE_TOKEN_HEX];

	/* The fixed 16 bytes alone: a store that gives no token. */
	hello_answer(buf, 0, 0);
	memset(&r, 0xff, sizeof(r));
	ASSERT_EQ(0, store_proto__parse_hello(buf, 16, &r, err, sizeof(err)));
	ASSERT_EQ(3, r.stored);
	ASSERT_EQ(0, r.token.len);
	store_proto__token_hex(&r.token, hex);
	ASSERT_STREQ("none", hex);
	/* A 3-byte token. */
	ASSERT_EQ(0, store_proto__parse_hello(buf, hello_answer(buf, 3, 3), &r,
					      err, sizeof(err)));
	ASSERT_EQ(3, r.token.len);
	store_proto__token_hex(&r.token, hex);
	ASSERT_STREQ("a0a1a2", hex);
	/* The largest token, and one byte more. */
	ASSERT_EQ(0, store_proto__parse_hello(
			     buf, hello_answer(buf, STORE_TOKEN_MAX, 64), &r,
			     err, sizeof(err)));
	ASSERT_EQ(STORE_TOKEN_MAX, r.token.len);
	ASSERT_EQ(0xa0 + 63, r.token.bytes[63]);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_hello(buf, hello_answer(buf, 65, 65), &r,
					   err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "a 65-byte token in 65 bytes (1 to 64)"));
}

TEST(hello_answer_malformed_lengths)
{
	struct store_hello_reply r;

	/* Short of the fixed part. */
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_hello(buf, 15, &r, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "a hello answer of 15 bytes"));
	/* One byte of the token's length. */
	hello_answer(buf, 1, 1);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_hello(buf, 17, &r, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "token is cut short"));
	/* An empty token: not the way to say there is none. */
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_hello(buf, hello_answer(buf, 0, 0), &r,
					   err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "a 0-byte token"));
	/* The length says more, and less, than the bytes there are. */
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_hello(buf, hello_answer(buf, 5, 4), &r,
					   err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "a 5-byte token in 4 bytes"));
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_hello(buf, hello_answer(buf, 4, 5), &r,
					   err, sizeof(err)));
}

TEST(state_request_and_answer)
{
	static const uint8_t want[] = { 1, 0, 0, 0, STORE_STATE };
	struct store_token t, u;

	ASSERT_EQ((int)sizeof(want), store_proto__state(buf, sizeof(buf)));
	ASSERT_EQ(0, memcmp(want, buf, sizeof(want)));
	ASSERT_EQ(-E2BIG, store_proto__state(buf, sizeof(want) - 1));
	/* Its answer is a token alone: u16 n, n bytes. */
	buf[0] = 2;
	buf[1] = 0;
	buf[2] = 0xbe;
	buf[3] = 0xef;
	ASSERT_EQ(0, store_proto__parse_state(buf, 4, &t, err, sizeof(err)));
	ASSERT_EQ(2, t.len);
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_state(buf, 3, &u, err, sizeof(err)));
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_state(buf, 1, &u, err, sizeof(err)));
	ASSERT_EQ(-EPROTO,
		  store_proto__parse_state(buf, 0, &u, err, sizeof(err)));
	/* Hex and back, as a snapshot's manifest keeps it. */
	ASSERT_EQ(0, store_proto__token_parse("beef", &u));
	ASSERT_TRUE(store_proto__token_equal(&t, &u));
	ASSERT_EQ(0, store_proto__token_parse("beee", &u));
	ASSERT_FALSE(store_proto__token_equal(&t, &u));
	ASSERT_EQ(0, store_proto__token_parse("beefbe", &u));
	ASSERT_FALSE(store_proto__token_equal(&t, &u)); /* a longer one */
	ASSERT_EQ(-EINVAL, store_proto__token_parse("bee", &u));
	ASSERT_EQ(-EINVAL, store_proto__token_parse("BEEF", &u));
	ASSERT_EQ(-EINVAL, store_proto__token_parse("", &u));
	ASSERT_EQ(-EINVAL, store_proto__token_parse(NULL, &u));
	memset(buf, 'a', 2 * STORE_TOKEN_MAX + 2);
	buf[2 * STORE_TOKEN_MAX + 2] = '\0';
	ASSERT_EQ(-EINVAL, store_proto__token_parse((char *)buf, &u));
	buf[2 * STORE_TOKEN_MAX] = '\0';
	ASSERT_EQ(0, store_proto__token_parse((char *)buf, &u));
	ASSERT_EQ(STORE_TOKEN_MAX, u.len);
}

/* ---- scripted stores --------------------------------------------------- */

struct scripted {
	char dir[64];
	char path[128];
	pid_t pid;
};

/* The child's side: one frame in, its type (or -1 at the end). */
static int next_frame(int fd, uint8_t *p, uint32_t *len)
{
	uint8_t hdr[4];
	size_t got = 0;

	while (got < 4) {
		ssize_t n = read(fd, hdr + got, 4 - got);

		if (n <= 0)
			return -1;
		got += n;
	}
	*len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24;
	for (got = 0; got < *len;) {
		ssize_t n = read(fd, p + got, *len - got);

		if (n <= 0)
			return -1;
		got += n;
	}
	return p[0];
}

static void answer(int fd, uint8_t type, const void *payload, uint32_t len)
{
	uint8_t hdr[5];

	le32(hdr, len + 1);
	hdr[4] = type;
	if (write(fd, hdr, 5) != 5 ||
	    (len && write(fd, payload, len) != (ssize_t)len))
		_exit(3);
}

static void answer_error(int fd, uint32_t code, const char *text)
{
	uint8_t p[64];
	size_t n = strlen(text);

	le32(p, code);
	p[4] = n;
	p[5] = 0;
	memcpy(p + 6, text, n);
	answer(fd, STORE_ERROR, p, 6 + n);
}

/* hello: the block size given, n blocks stored. */
static void serve_hello(int fd, uint32_t block_size, uint32_t n)
{
	static uint8_t p[BUF_BYTES];
	uint8_t hello[16];
	uint32_t len;

	if (next_frame(fd, p, &len) != STORE_HELLO)
		_exit(4);
	le32(hello, 1);
	le32(hello + 4, block_size);
	le64(hello + 8, n);
	answer(fd, STORE_HELLO | STORE_REPLY, hello, sizeof(hello));
}

static void serve_list(int fd, const uint64_t *blocks, uint32_t n)
{
	static uint8_t p[BUF_BYTES];
	uint32_t len;

	if (next_frame(fd, p, &len) != STORE_LIST)
		_exit(5);
	answer(fd, STORE_LIST | STORE_REPLY, p,
	       list_answer(p, UINT64_MAX, blocks, n));
}

/* Listens at a fresh path; the child accepts once and runs serve. */
static void scripted_start(struct __test_metadata *_metadata,
			   struct scripted *s, void (*serve)(int fd))
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd;

	strcpy(s->dir, "/tmp/kiln-store-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(s->dir));
	snprintf(s->path, sizeof(s->path), "%s/sock", s->dir);
	strcpy(sa.sun_path, s->path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, lfd);
	ASSERT_EQ(0, bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_EQ(0, listen(lfd, 4));
	s->pid = fork();
	ASSERT_LE(0, s->pid);
	if (!s->pid) {
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0)
			_exit(2);
		serve(fd);
		pause(); /* until killed: the connection stays open */
		_exit(0);
	}
	close(lfd);
}

static void scripted_stop(struct scripted *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
	}
	unlink(s->path);
	rmdir(s->dir);
}

static int connect_to(const char *path, unsigned int timeout_ms,
		      struct store **out)
{
	struct store_params p = { .socket_path = path,
				  .base = BASE,
				  .nr_blocks = NR_BLOCKS,
				  .timeout_ms = timeout_ms,
				  .claim = true };

	return store__connect(out, &p, err, sizeof(err));
}

static void serve_write_refused(int fd)
{
	static uint8_t p[BUF_BYTES];
	uint32_t len;

	serve_hello(fd, BS, 0);
	if (next_frame(fd, p, &len) != STORE_WRITE)
		_exit(6);
	answer_error(fd, ENOSPC, "bucket full");
	if (next_frame(fd, p, &len) != STORE_FLUSH)
		_exit(7);
	answer(fd, STORE_FLUSH | STORE_REPLY, NULL, 0);
}

TEST(store_error_keeps_the_connection)
{
	struct scripted s = { 0 };
	struct store *st;

	scripted_start(_metadata, &s, serve_write_refused);
	ASSERT_EQ(0, connect_to(s.path, 2000, &st));
	store__write_begin(st);
	ASSERT_EQ(0, store__write_add(st, 3, NULL));
	ASSERT_EQ(-ENOSPC, store__write_send(st, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "write: store refused: bucket full"));
	ASSERT_FALSE(store__broken(st));
	ASSERT_EQ(0, store__flush(st, err, sizeof(err)));
	store__close(st);
	scripted_stop(&s);
}

static void serve_short_read(int fd)
{
	static uint8_t p[BUF_BYTES];
	uint32_t len;

	serve_hello(fd, BS, 0);
	if (next_frame(fd, p, &len) != STORE_READ)
		_exit(6);
	memset(p, 0xab, sizeof(p));
	le32(p, 1); /* one block of the two asked for */
	answer(fd, STORE_READ | STORE_REPLY, p, 4 + BS);
}

TEST(short_read_breaks_the_connection)
{
	struct store_range r = { .first = 2, .count = 2 };
	static uint8_t out[2 * BS];
	struct scripted s = { 0 };
	struct store *st;

	scripted_start(_metadata, &s, serve_short_read);
	ASSERT_EQ(0, connect_to(s.path, 2000, &st));
	ASSERT_EQ(-EIO, store__read(st, &r, 1, out, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "1 blocks (2 asked for)"));
	ASSERT_TRUE(store__broken(st));
	/* Where the stream stands is unknown: nothing more is asked. */
	ASSERT_EQ(-EIO, store__flush(st, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "failed earlier"));
	store__close(st);
	scripted_stop(&s);
}

static void serve_silent(int fd)
{
	serve_hello(fd, BS, 0);
}

TEST(store_that_never_answers_times_out)
{
	struct scripted s = { 0 };
	struct store *st;

	scripted_start(_metadata, &s, serve_silent);
	ASSERT_EQ(0, connect_to(s.path, 200, &st));
	ASSERT_EQ(-ETIMEDOUT, store__flush(st, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "flush: no answer within 200 ms"));
	ASSERT_TRUE(store__broken(st));
	store__close(st);
	scripted_stop(&s);
}

static void serve_claim_held(int fd)
{
	static uint8_t p[BUF_BYTES];
	uint32_t len;

	if (next_frame(fd, p, &len) != STORE_HELLO)
		_exit(4);
	answer_error(fd, EBUSY, "claimed by vm 1");
}

TEST(second_claim_refused_by_scripted_store)
{
	struct scripted s = { 0 };
	struct store *st = NULL;

	scripted_start(_metadata, &s, serve_claim_held);
	ASSERT_EQ(-EBUSY, connect_to(s.path, 2000, &st));
	ASSERT_NE(NULL, strstr(err, "store refused: claimed by vm 1"));
	ASSERT_EQ(NULL, st);
	scripted_stop(&s);
}

static void serve_small_blocks(int fd)
{
	serve_hello(fd, 512, 0);
}

TEST(other_block_size_refused)
{
	struct scripted s = { 0 };
	struct store *st = NULL;

	scripted_start(_metadata, &s, serve_small_blocks);
	ASSERT_EQ(-EIO, connect_to(s.path, 2000, &st));
	ASSERT_NE(NULL, strstr(err, "block size 512 (this vmm needs 4096)"));
	scripted_stop(&s);
}

static void serve_oversized(int fd)
{
	static uint8_t p[BUF_BYTES];
	uint8_t hdr[4];
	uint32_t len;

	serve_hello(fd, BS, 0);
	if (next_frame(fd, p, &len) != STORE_FLUSH)
		_exit(6);
	le32(hdr, STORE_MSG_MAX + 1);
	if (write(fd, hdr, 4) != 4)
		_exit(3);
}

TEST(oversized_answer_is_a_protocol_error)
{
	struct scripted s = { 0 };
	struct store *st;

	scripted_start(_metadata, &s, serve_oversized);
	ASSERT_EQ(0, connect_to(s.path, 2000, &st));
	ASSERT_EQ(-EIO, store__flush(st, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "flush: a frame of 2097153 bytes"));
	store__close(st);
	scripted_stop(&s);
}

/* ---- the cow layer ------------------------------------------------------ */

static int claim_again(const char *path, unsigned int timeout_ms,
		       struct store **out);

struct layer {
	char dir[64];
	char base[128];
	struct disk *disk;
	struct store_cow *cow;
};

static void layer_open(struct __test_metadata *_metadata, struct layer *l,
		       const char *sock, unsigned int timeout_ms,
		       uint64_t max_dirty)
{
	struct disk_params dp;
	struct store_cow_params cp = { .name = "test-cow",
				       .max_dirty_bytes = max_dirty };
	static uint8_t block[BS];
	int fd;

	strcpy(l->dir, "/tmp/kiln-cow-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(l->dir));
	snprintf(l->base, sizeof(l->base), "%s/base", l->dir);
	fd = open(l->base, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ASSERT_LE(0, fd);
	memset(block, 0x5a, sizeof(block));
	for (int i = 0; i < NR_BLOCKS; i++)
		ASSERT_EQ(BS, pwrite(fd, block, BS, (off_t)i * BS));
	close(fd);
	dp = (struct disk_params){ .base_path = l->base,
				   .base_size = NR_BLOCKS * BS,
				   .base_digest = BASE,
				   .mode = DISK_EPHEMERAL };
	ASSERT_EQ(0, disk__open(&l->disk, &dp));
	ASSERT_EQ(0, claim_again(sock, timeout_ms, &cp.store));
	cp.disk = l->disk;
	ASSERT_EQ(0, store_cow__open(&l->cow, &cp, err, sizeof(err)));
	ASSERT_EQ(0, store_cow__start(l->cow, NULL));
}

static void layer_close(struct layer *l)
{
	store_cow__stop(l->cow);
	store_cow__close(l->cow);
	disk__close(l->disk);
	unlink(l->base);
	rmdir(l->dir);
}

/* The block device's part: the job has run, finish it. */
static int layer_wait(struct layer *l)
{
	struct pollfd pfd = { .fd = store_cow__done_fd(l->cow),
			      .events = POLLIN };
	uint64_t v;

	if (poll(&pfd, 1, 20000) != 1 || read(pfd.fd, &v, sizeof(v)) != 8)
		return -ETIME;
	return store_cow__finish(l->cow);
}

/* A guest write of block n, filled with byte, as the device does it. */
static int guest_write(struct layer *l, uint64_t n, uint8_t byte)
{
	static uint8_t block[BS];
	struct disk_extent ext;
	uint64_t reserved;
	int ret;

	ret = store_cow__begin_write(l->cow, n * BS, BS);
	if (ret)
		return ret;
	ret = disk__begin_write(l->disk, n * BS, BS, &ext, &reserved);
	if (ret)
		return ret;
	memset(block, byte, sizeof(block));
	if (pwrite(ext.fd, block, BS, ext.offset) != BS)
		return -EIO;
	disk__end_write(l->disk, n * BS, BS, reserved, true);
	store_cow__end_write(l->cow, n * BS, BS, false);
	return 0;
}

/* Block n as the guest reads it: its one extent's first byte. */
static int guest_byte(struct layer *l, uint64_t n)
{
	struct disk_extent ext;
	uint8_t b;

	if (disk__map_read(l->disk, n * BS, BS, &ext, 1) != 1)
		return -1;
	if (ext.fd < 0)
		return 0;
	if (pread(ext.fd, &b, 1, ext.offset) != 1)
		return -1;
	return b;
}

static void serve_cut_mid_flush(int fd)
{
	static uint8_t p[BUF_BYTES];
	uint32_t len;

	serve_hello(fd, BS, 0);
	serve_list(fd, NULL, 0);
	/* The write arrives, and the store goes away. */
	if (next_frame(fd, p, &len) != STORE_WRITE)
		_exit(6);
	_exit(0);
}

TEST(cow_disconnect_mid_flush_keeps_the_changes)
{
	struct scripted s = { 0 };
	struct layer l = { 0 };

	scripted_start(_metadata, &s, serve_cut_mid_flush);
	layer_open(_metadata, &l, s.path, 2000, 0);
	ASSERT_EQ(0, guest_write(&l, 3, 0x33));
	ASSERT_EQ(BS, store_cow__dirty_bytes(l.cow));
	ASSERT_EQ(0, store_cow__flush(l.cow));
	ASSERT_EQ(-EBUSY, store_cow__flush(l.cow));
	ASSERT_EQ(-EIO, layer_wait(&l));
	/* Nothing was acknowledged: the block is still to be sent. */
	ASSERT_EQ(BS, store_cow__dirty_bytes(l.cow));
	ASSERT_EQ(1, store_cow__errors(l.cow));
	ASSERT_EQ(0x33, guest_byte(&l, 3));
	/* Later jobs fail at once; the layer still serves its blocks. */
	ASSERT_EQ(0, store_cow__flush(l.cow));
	ASSERT_EQ(-EIO, layer_wait(&l));
	ASSERT_EQ(2, store_cow__errors(l.cow));
	layer_close(&l);
	scripted_stop(&s);
}

static void serve_stall_on_read(int fd)
{
	const uint64_t blocks[] = { 4 };

	serve_hello(fd, BS, 1);
	serve_list(fd, blocks, 1);
}

TEST(cow_stalled_store_fails_the_read)
{
	struct scripted s = { 0 };
	struct layer l = { 0 };

	scripted_start(_metadata, &s, serve_stall_on_read);
	layer_open(_metadata, &l, s.path, 200, 0);
	ASSERT_TRUE(store_cow__missing(l.cow, 0, 8 * BS));
	ASSERT_FALSE(store_cow__missing(l.cow, 5 * BS, 3 * BS));
	ASSERT_EQ(-EINVAL, store_cow__fetch(l.cow, 5 * BS, BS));
	ASSERT_EQ(0, store_cow__fetch(l.cow, 0, 8 * BS));
	ASSERT_TRUE(store_cow__fetching(l.cow, 4 * BS, BS));
	ASSERT_EQ(-EIO, layer_wait(&l));
	ASSERT_FALSE(store_cow__fetching(l.cow, 4 * BS, BS));
	/* Still only in the store: the base's bytes are not shown for it. */
	ASSERT_TRUE(store_cow__missing(l.cow, 4 * BS, BS));
	ASSERT_EQ(1, store_cow__errors(l.cow));
	layer_close(&l);
	scripted_stop(&s);
}

TEST(cow_dirty_cap)
{
	struct scripted s = { 0 };
	struct layer l = { 0 };

	scripted_start(_metadata, &s, serve_stall_on_read);
	layer_open(_metadata, &l, s.path, 200, 2 * BS);
	ASSERT_EQ(0, guest_write(&l, 1, 1));
	ASSERT_EQ(0, guest_write(&l, 2, 2));
	ASSERT_EQ(0, guest_write(&l, 2, 3)); /* already dirty: no more room */
	ASSERT_EQ(-ENOSPC, guest_write(&l, 9, 4));
	ASSERT_EQ(2 * BS, store_cow__dirty_bytes(l.cow));
	/* A write over a block only in the store needs no fetch. */
	ASSERT_EQ(-ENOSPC, store_cow__begin_write(l.cow, 4 * BS, BS));
	layer_close(&l);
	scripted_stop(&s);
}

static void serve_no_token(int fd)
{
	static uint8_t p[BUF_BYTES];
	uint32_t len;

	serve_hello(fd, BS, 0);
	serve_list(fd, NULL, 0);
	/* Nothing more is asked: the end of the stream, not a frame. */
	_exit(next_frame(fd, p, &len) >= 0 ? 8 : 0);
}

TEST(cow_snapshot_needs_a_state_token)
{
	struct scripted s = { 0 };
	struct layer l = { 0 };
	struct store_token t;
	int status;

	scripted_start(_metadata, &s, serve_no_token);
	layer_open(_metadata, &l, s.path, 2000, 0);
	ASSERT_EQ(0, store_cow__hello_token(l.cow)->len);
	ASSERT_EQ(0, guest_write(&l, 3, 0x33));
	ASSERT_EQ(-EOPNOTSUPP, store_cow__settle(l.cow, &t, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "gave no state token"));
	/* Refused before anything was sent: the block is still dirty. */
	ASSERT_EQ(BS, store_cow__dirty_bytes(l.cow));
	ASSERT_EQ(0, store_cow__errors(l.cow));
	store_cow__close(l.cow); /* no stop: nothing is flushed */
	disk__close(l.disk);
	unlink(l.base);
	rmdir(l.dir);
	/* The store saw the end of the stream, no other request. */
	ASSERT_EQ(s.pid, waitpid(s.pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));
	s.pid = 0;
	scripted_stop(&s);
}

/* ---- against the reference in-memory store ------------------------------ */

struct mem_store {
	char dir[64];
	char path[128];
	pid_t pid;
};

/* blocks: NULL for tools/kiln-store-mem, else kiln-store-dir's DIR. */
static void store_spawn(struct __test_metadata *_metadata, struct mem_store *m,
			const char *blocks)
{
	unlink(m->path);
	m->pid = fork();
	ASSERT_LE(0, m->pid);
	if (!m->pid) {
		if (blocks)
			execl("/usr/bin/python3", "python3",
			      "tools/kiln-store-dir", blocks, m->path,
			      (char *)NULL);
		else
			execl("/usr/bin/python3", "python3",
			      "tools/kiln-store-mem", m->path, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 2000 && access(m->path, F_OK); i++)
		usleep(10000);
	ASSERT_EQ(0, access(m->path, F_OK))
	TH_LOG("the reference store did not make %s", m->path);
}

static void mem_start(struct __test_metadata *_metadata, struct mem_store *m)
{
	strcpy(m->dir, "/tmp/kiln-mem-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(m->dir));
	snprintf(m->path, sizeof(m->path), "%s/sock", m->dir);
	store_spawn(_metadata, m, NULL);
}

static void mem_stop(struct mem_store *m)
{
	if (m->pid > 0) {
		kill(m->pid, SIGTERM);
		waitpid(m->pid, NULL, 0);
	}
	unlink(m->path);
	rmdir(m->dir);
}

/*
 * The store sees a closed connection's end (and lets its claim go) a
 * moment after close() returns here: a new claim waits for that.
 */
static int claim_again(const char *path, unsigned int timeout_ms,
		       struct store **out)
{
	int ret = -EBUSY;

	for (int i = 0; i < 500 && ret == -EBUSY; i++) {
		ret = connect_to(path, timeout_ms, out);
		if (ret == -EBUSY)
			usleep(10000);
	}
	return ret;
}

static void collect(void *arg, uint64_t block)
{
	uint64_t *mask = arg;

	*mask |= 1ULL << block;
}

TEST(cow_round_trip_through_the_memory_store)
{
	struct store_range r = { .first = 1, .count = 1 };
	static uint8_t data[BS];
	struct mem_store m = { 0 };
	struct layer l = { 0 };
	struct store *st, *second = NULL;
	uint64_t listed = 0;

	mem_start(_metadata, &m);
	/* An earlier VM's changes: blocks 1 and 2. */
	ASSERT_EQ(0, connect_to(m.path, 5000, &st));
	memset(data, 0x11, sizeof(data));
	store__write_begin(st);
	ASSERT_EQ(0, store__write_add(st, 1, data));
	ASSERT_EQ(0, store__write_add(st, 2, NULL));
	ASSERT_EQ(0, store__write_send(st, err, sizeof(err)));
	ASSERT_EQ(0, store__flush(st, err, sizeof(err)));
	store__close(st);
	layer_open(_metadata, &l, m.path, 5000, 0);
	/* The writer's claim is this layer's while it lives. */
	ASSERT_EQ(-EBUSY, connect_to(m.path, 5000, &second));
	ASSERT_NE(NULL, strstr(err, "writer claim"));
	ASSERT_TRUE(store_cow__missing(l.cow, BS, BS));
	ASSERT_EQ(0x5a, guest_byte(&l, 0)); /* never changed: the base */
	ASSERT_EQ(0, store_cow__fetch(l.cow, 0, 4 * BS));
	ASSERT_EQ(0, layer_wait(&l));
	ASSERT_FALSE(store_cow__missing(l.cow, 0, 4 * BS));
	ASSERT_EQ(0x11, guest_byte(&l, 1));
	ASSERT_EQ(0, guest_byte(&l, 2));
	ASSERT_EQ(0, store_cow__dirty_bytes(l.cow)); /* fetched, not dirty */
	/* A write, flushed; another, sent at the stop. */
	ASSERT_EQ(0, guest_write(&l, 5, 0x55));
	ASSERT_EQ(0, store_cow__flush(l.cow));
	ASSERT_EQ(0, layer_wait(&l));
	ASSERT_EQ(0, store_cow__dirty_bytes(l.cow));
	ASSERT_EQ(0, guest_write(&l, 7, 0x77));
	layer_close(&l);

	/* The claim ended with the layer; every change is there. */
	ASSERT_EQ(0, claim_again(m.path, 5000, &st));
	ASSERT_EQ(4, store__stored(st));
	ASSERT_EQ(0, store__list(st, collect, &listed, err, sizeof(err)));
	ASSERT_EQ((1ULL << 1) | (1ULL << 2) | (1ULL << 5) | (1ULL << 7),
		  listed);
	r.first = 7;
	ASSERT_EQ(0, store__read(st, &r, 1, data, err, sizeof(err)));
	ASSERT_EQ(0x77, data[BS - 1]);
	/* A block the store does not hold is its refusal, not a break. */
	r.first = 9;
	ASSERT_EQ(-ENOENT, store__read(st, &r, 1, data, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "block 9 is not stored"));
	ASSERT_FALSE(store__broken(st));
	store__close(st);
	mem_stop(&m);
}

TEST(directory_store_keeps_flushed_blocks)
{
	struct store_range r = { .first = 6, .count = 1 };
	struct store_params other = { .base = "sha256:other",
				      .nr_blocks = NR_BLOCKS,
				      .timeout_ms = 5000 };
	static uint8_t data[BS];
	struct mem_store m = { 0 };
	char blocks[128], cmd[256];
	uint64_t listed = 0;
	struct store *st;

	strcpy(m.dir, "/tmp/kiln-dir-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(m.dir));
	snprintf(m.path, sizeof(m.path), "%s/sock", m.dir);
	snprintf(blocks, sizeof(blocks), "%s/blocks", m.dir);
	store_spawn(_metadata, &m, blocks);
	ASSERT_EQ(0, connect_to(m.path, 5000, &st));
	memset(data, 0x66, sizeof(data));
	store__write_begin(st);
	ASSERT_EQ(0, store__write_add(st, 6, data));
	ASSERT_EQ(0, store__write_send(st, err, sizeof(err)));
	ASSERT_EQ(0, store__flush(st, err, sizeof(err)));
	/* Written, never flushed: not the store's to keep. */
	store__write_begin(st);
	ASSERT_EQ(0, store__write_add(st, 8, data));
	ASSERT_EQ(0, store__write_send(st, err, sizeof(err)));
	store__close(st);
	kill(m.pid, SIGKILL);
	waitpid(m.pid, NULL, 0);

	store_spawn(_metadata, &m, blocks);
	ASSERT_EQ(0, connect_to(m.path, 5000, &st));
	ASSERT_EQ(0, store__list(st, collect, &listed, err, sizeof(err)));
	ASSERT_EQ(1ULL << 6, listed);
	memset(data, 0, sizeof(data));
	ASSERT_EQ(0, store__read(st, &r, 1, data, err, sizeof(err)));
	ASSERT_EQ(0x66, data[0]);
	store__close(st);
	/* Another base's VM is refused: the deltas are this base's. */
	other.socket_path = m.path;
	ASSERT_EQ(-EINVAL, store__connect(&st, &other, err, sizeof(err)));
	ASSERT_NE(NULL, strstr(err, "holds changes to " BASE));
	mem_stop(&m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", m.dir);
	ASSERT_EQ(0, system(cmd));
}

/* ---- state tokens (snapshots of cow roots) ------------------------------ */

/* A connection without the writer's claim: its hello's token into t. */
static int token_of(const char *path, struct store_token *t)
{
	struct store_params p = { .socket_path = path,
				  .base = BASE,
				  .nr_blocks = NR_BLOCKS,
				  .timeout_ms = 5000 };
	struct store *st;
	int ret = store__connect(&st, &p, err, sizeof(err));

	if (ret)
		return ret;
	*t = *store__hello_token(st);
	store__close(st);
	return 0;
}

static int write_block(struct store *st, uint64_t n, uint8_t byte)
{
	static uint8_t data[BS];

	memset(data, byte, sizeof(data));
	store__write_begin(st);
	if (store__write_add(st, n, data))
		return -E2BIG;
	return store__write_send(st, err, sizeof(err));
}

/*
 * tools/kiln-store-mem: a token in every hello (the store's 16-byte
 * identity and a u64 generation); a flush after a write moves it on, a
 * write alone or a flush of nothing does not. A cow layer's settle (a
 * snapshot's) flushes its dirty blocks and gets the token every new
 * connection then sees.
 */
TEST(memory_store_token_moves_on_flush)
{
	struct store_token t0, t1, t2, t;
	struct mem_store m = { 0 };
	struct layer l = { 0 };
	struct store *st;

	mem_start(_metadata, &m);
	ASSERT_EQ(0, connect_to(m.path, 5000, &st));
	t0 = *store__hello_token(st);
	ASSERT_EQ(24, t0.len);
	ASSERT_EQ(0, store__state(st, &t, err, sizeof(err)));
	ASSERT_TRUE(store_proto__token_equal(&t0, &t));
	ASSERT_EQ(0, store__flush(st, err, sizeof(err)));
	ASSERT_EQ(0, store__state(st, &t, err, sizeof(err)));
	ASSERT_TRUE(store_proto__token_equal(&t0, &t));
	ASSERT_EQ(0, write_block(st, 2, 0x22));
	ASSERT_EQ(0, store__state(st, &t, err, sizeof(err)));
	ASSERT_TRUE(store_proto__token_equal(&t0, &t));
	ASSERT_EQ(0, store__flush(st, err, sizeof(err)));
	ASSERT_EQ(0, store__state(st, &t1, err, sizeof(err)));
	ASSERT_FALSE(store_proto__token_equal(&t0, &t1));
	ASSERT_EQ(0, memcmp(t0.bytes, t1.bytes, 16)); /* the same store */
	ASSERT_EQ(0, token_of(m.path, &t));
	ASSERT_TRUE(store_proto__token_equal(&t1, &t));
	store__close(st);

	layer_open(_metadata, &l, m.path, 5000, 0);
	ASSERT_TRUE(
		store_proto__token_equal(&t1, store_cow__hello_token(l.cow)));
	ASSERT_EQ(0, guest_write(&l, 5, 0x55));
	ASSERT_EQ(0, store_cow__settle(l.cow, &t2, err, sizeof(err)));
	ASSERT_EQ(0, store_cow__dirty_bytes(l.cow));
	ASSERT_FALSE(store_proto__token_equal(&t1, &t2));
	ASSERT_EQ(0, token_of(m.path, &t));
	ASSERT_TRUE(store_proto__token_equal(&t2, &t));
	/* Nothing dirty: the same token again. */
	ASSERT_EQ(0, store_cow__settle(l.cow, &t, err, sizeof(err)));
	ASSERT_TRUE(store_proto__token_equal(&t2, &t));
	layer_close(&l); /* nothing to send at the stop */
	ASSERT_EQ(0, token_of(m.path, &t));
	ASSERT_TRUE(store_proto__token_equal(&t2, &t));
	mem_stop(&m);

	/* Another store's token, even at the same generation. */
	mem_start(_metadata, &m);
	ASSERT_EQ(0, token_of(m.path, &t));
	ASSERT_FALSE(store_proto__token_equal(&t0, &t));
	mem_stop(&m);
}

/*
 * tools/kiln-store-dir keeps its token in DIR/state: a restart gives
 * the token of the last flush, and a write it lost (never flushed)
 * changed nothing.
 */
TEST(directory_store_token_survives_a_restart)
{
	struct store_token t0, t1, t;
	struct mem_store m = { 0 };
	char blocks[128], cmd[256];
	struct store *st;

	strcpy(m.dir, "/tmp/kiln-dir-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(m.dir));
	snprintf(m.path, sizeof(m.path), "%s/sock", m.dir);
	snprintf(blocks, sizeof(blocks), "%s/blocks", m.dir);
	store_spawn(_metadata, &m, blocks);
	ASSERT_EQ(0, connect_to(m.path, 5000, &st));
	t0 = *store__hello_token(st);
	ASSERT_EQ(24, t0.len);
	ASSERT_EQ(0, write_block(st, 6, 0x66));
	ASSERT_EQ(0, store__flush(st, err, sizeof(err)));
	ASSERT_EQ(0, store__state(st, &t1, err, sizeof(err)));
	ASSERT_FALSE(store_proto__token_equal(&t0, &t1));
	ASSERT_EQ(0, write_block(st, 8, 0x88)); /* never flushed */
	store__close(st);
	kill(m.pid, SIGKILL);
	waitpid(m.pid, NULL, 0);

	store_spawn(_metadata, &m, blocks);
	ASSERT_EQ(0, token_of(m.path, &t));
	ASSERT_TRUE(store_proto__token_equal(&t1, &t));
	mem_stop(&m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", m.dir);
	ASSERT_EQ(0, system(cmd));
}

TEST_HARNESS_MAIN
