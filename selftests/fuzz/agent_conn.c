// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz agent_conn - the guest agent's side of the agent protocol
 * (guest/agent/, Documentation/agent-protocol.md): the bytes a host sends
 * on a connection, read as frames and served as the agent serves them.
 *
 * Input: two bytes (little-endian) that choose the pieces the stream
 * arrives in (0: CHUNK_MAX at a time; n: 1 to 2^(n % 13) bytes each,
 * sizes drawn from n), then the host's stream: frames (proto/agent.h),
 * whole, cut short or over KILN_FRAME_MAX.
 *
 * The stream goes two ways, each on a socketpair:
 *
 *  1. conn__recv_some() alone, called after each piece: the frames it
 *     gives are the stream's, byte for byte, wherever the pieces cut
 *     them; it waits (0) only having taken every byte sent, holding less
 *     than a frame; -EMSGSIZE exactly at a header over KILN_FRAME_MAX;
 *     -ECONNRESET once the host's end is shut.
 *  2. agent__serve_connection(), the code each agent connection runs, on
 *     a thread of its own: HELLO, the stream's first frame as the request,
 *     the rest as what follows it (a write's FS_DATA, a command's stdin),
 *     then the host's end shut. Its answer is whole frames: the agent's
 *     HELLO, then at most one last word (RESULT, ERROR), last; an
 *     ERROR's errno is a valid one under its own name (EPROTO for what is
 *     not a request, ENOTSUP for POWEROFF); a RESULT with T_MORE only
 *     for FS_READDIR; FS_DATA only for FS_READ, at most KILN_DATA_CHUNK,
 *     adding up to its T_SIZE; FS_WRITE's T_SIZE what the host's FS_DATA
 *     frames held up to the one with KILN_F_EOF; no command ever starts.
 *
 * The sandbox of 2: at its first input the process enters a user, mount
 * and network namespace of its own (no interfaces: nothing reaches a
 * network); the serving thread unshares its file system context and
 * chroots into a tmpfs (noexec, nodev, 16 MiB) mounted for the input on
 * a directory made under /tmp at the start, which holds a few files and
 * goes away after the input. So every path the host names is inside it;
 * PROC_START forks and fails to exec (nothing there runs), which leaves
 * a running command's relay (stdin, signals, resizes) unfuzzed; RESEED
 * finds no /dev/urandom; POWEROFF has no pid to signal (as
 * kiln-agent-host). Where the namespaces cannot be made (no user
 * namespaces), 2 is left out and the target says so once.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest/agent/agent.h"
#include "guest/agent/conn.h"
#include "guest/agent/fs.h"
#include "proto/reseed.h"
#include "proto/tlv.h"
#include "selftests/fuzz/fuzz.h"
#include "selftests/fuzz/sandbox.h"

#define HDR	      sizeof(struct kiln_frame)
#define CHUNK_MAX     (64U << 10) /* a piece, at most */
#define SPLIT_SHIFTS  13	  /* pieces of at most 1 to 4096 bytes */
#define ANSWER_MAX    (4U << 20)  /* far more than the sandbox holds */
#define BIG_FILE_SIZE (KILN_DATA_CHUNK + 4464) /* two FS_DATA frames */

int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- the stream ---------------------------------------------------- */

static uint32_t le32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

/* The stream cut into pieces as the input's first two bytes say. */
struct pieces {
	const uint8_t *p;
	size_t left;
	uint32_t rng;
	size_t max; /* 0: CHUNK_MAX each */
};

static void pieces__init(struct pieces *pc, const uint8_t *p, size_t len,
			 uint16_t split)
{
	pc->p = p;
	pc->left = len;
	pc->rng = split * 2654435761U | 1;
	pc->max = split ? 1U << (split % SPLIT_SHIFTS) : 0;
}

static size_t pieces__next(struct pieces *pc, const uint8_t **p)
{
	size_t n = CHUNK_MAX;

	if (pc->max) {
		pc->rng ^= pc->rng << 13;
		pc->rng ^= pc->rng >> 17;
		pc->rng ^= pc->rng << 5;
		n = 1 + pc->rng % pc->max;
	}
	if (n > pc->left)
		n = pc->left;
	*p = pc->p;
	pc->p += n;
	pc->left -= n;
	return n;
}

/*
 * The frame at @off of the @len bytes of @s, read here without the
 * agent's code: 1 whole (*plen its payload), 0 cut short, -EMSGSIZE.
 */
static int stream_frame(const uint8_t *s, size_t len, size_t off,
			uint32_t *plen)
{
	if (len - off < HDR)
		return 0;
	*plen = le32(s + off);
	if (*plen > KILN_FRAME_MAX)
		return -EMSGSIZE;
	return len - off - HDR >= *plen;
}

/* ---- 1: the frame reader ------------------------------------------- */

/*
 * Frames out of @c until it waits, each checked against the stream, of
 * which @sent bytes are sent; *off is where the next one starts. True
 * once the reader has refused a header.
 */
static bool take_frames(struct conn *c, const uint8_t *s, size_t sent,
			size_t *off)
{
	struct frame f;
	uint32_t len;
	int ret;

	while ((ret = conn__recv_some(c, &f)) == 1) {
		fuzz_check(stream_frame(s, sent, *off, &len) == 1);
		fuzz_check(f.len == len && f.type == le16(s + *off + 4) &&
			   f.flags == le16(s + *off + 6));
		fuzz_check(!len || !memcmp(f.data, s + *off + HDR, len));
		*off += HDR + len;
	}
	if (ret == -EMSGSIZE) {
		fuzz_check(stream_frame(s, sent, *off, &len) == -EMSGSIZE);
		return true;
	}
	fuzz_check(ret == 0);
	fuzz_check(*off + c->have == sent);
	fuzz_check(stream_frame(s, sent, *off, &len) == 0);
	return false;
}

static void read_frames(const uint8_t *s, size_t len, uint16_t split)
{
	bool refused = false;
	size_t off = 0, sent = 0, n;
	struct pieces pc;
	const uint8_t *p;
	struct frame f;
	struct conn c;
	int sv[2];
	ssize_t w;

	fuzz_check(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	fuzz_check(!conn__init(&c, sv[0]));
	pieces__init(&pc, s, len, split);
	while (!refused && pc.left) {
		n = pieces__next(&pc, &p);
		/* The reader empties the socket each time: room for more. */
		while (n && !refused) {
			w = send(sv[1], p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
			fuzz_check(w > 0);
			p += w;
			n -= w;
			sent += w;
			refused = take_frames(&c, s, sent, &off);
		}
	}
	if (!refused) {
		fuzz_check(!shutdown(sv[1], SHUT_WR));
		fuzz_check(conn__recv_some(&c, &f) == -ECONNRESET);
	}
	conn__destroy(&c);
	close(sv[0]);
	close(sv[1]);
}

/* ---- the sandbox --------------------------------------------------- */

static char sandbox[] = "/tmp/kiln-fuzz-agent-XXXXXX";
static int sandbox_err = 1; /* 1: not made yet; 0: ready; -errno */

/*
 * Once, while the process has one thread: libFuzzer calls
 * LLVMFuzzerInitialize() before it starts any; the replay has none.
 */
static void setup(void)
{
	if (sandbox_err <= 0)
		return;
	/* As agent__serve(): writes to a closed socket are errors. */
	signal(SIGPIPE, SIG_IGN);
	sandbox_err = fuzz_sandbox__enter(sandbox, false);
	if (sandbox_err)
		fprintf(stderr,
			"agent_conn: no sandbox (%s): frames read, "
			"requests not served\n",
			strerror(-sandbox_err));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	setup();
	return 0;
}

/* A fresh tmpfs with a little of everything the FS_* requests meet. */
static void fill_sandbox(void)
{
	static const char os_release[] = "ID=kiln\nVERSION_ID=\"1\"\n"
					 "PRETTY_NAME='Kiln \\\"fuzz\\\"'\n";
	static uint8_t big[BIG_FILE_SIZE];
	int dir;

	if (!big[1])
		for (size_t i = 0; i < sizeof(big); i++)
			big[i] = (uint8_t)(i * 31);
	fuzz_sandbox__mount(sandbox, "kiln-fuzz-agent");
	dir = open(sandbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fuzz_check(dir >= 0);
	fuzz_check(!mkdirat(dir, "etc", 0755) && !mkdirat(dir, "dir", 0755) &&
		   !mkdirat(dir, "dir/sub", 0700));
	fuzz_sandbox__put(dir, "etc/os-release", os_release,
			  sizeof(os_release) - 1);
	fuzz_sandbox__put(dir, "data", big, sizeof(big));
	fuzz_sandbox__put(dir, "dir/a", "a\n", 2);
	fuzz_sandbox__put(dir, "dir/sub/b", "", 0);
	fuzz_check(!symlinkat("../data", dir, "dir/link") &&
		   !symlinkat("/nowhere", dir, "dangling"));
	close(dir);
}

/* ---- 2: the agent serving the stream ------------------------------- */

/* The agent's answer, as the host end received it. */
struct answer {
	uint8_t *p;
	size_t len, cap;
};

/* One recv() into the answer: its result. */
static ssize_t answer__take(struct answer *a, int fd)
{
	uint8_t buf[16384];
	ssize_t n;

	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n <= 0)
		return n;
	fuzz_check(a->len + n <= ANSWER_MAX);
	if (a->len + n > a->cap) {
		a->cap = a->cap ? a->cap * 2 : sizeof(buf) * 4;
		a->p = realloc(a->p, a->cap);
		fuzz_check(a->p);
	}
	memcpy(a->p + a->len, buf, n);
	a->len += n;
	return n;
}

static void *agent_thread(void *arg)
{
	static const struct agent_config cfg = { .poweroff_pid = 0,
						 .default_cwd = "/dir" };
	int fd = *(int *)arg;

	/* Never served outside the sandbox. */
	fuzz_sandbox__chroot(sandbox);
	agent__serve_connection(fd, &cfg);
	close(fd);
	return NULL;
}

/*
 * The host's end: the pieces in order, each sent as the socket takes it
 * (the agent's reads may see them joined: that depends on the threads'
 * timing, which is why 1 cuts the stream for the reader alone), the
 * answer taken as it comes; the end shut once all is sent or the agent
 * stopped reading for good. Returns once the agent closed its end.
 */
static void host_end(int fd, struct pieces *pc, struct answer *a)
{
	struct pollfd pfd = { .fd = fd };
	const uint8_t *p = NULL;
	bool sending = true;
	size_t n = 0;
	ssize_t r;

	for (;;) {
		if (!n && pc->left)
			n = pieces__next(pc, &p);
		if (!n && sending) {
			shutdown(fd, SHUT_WR);
			sending = false;
		}
		pfd.events = POLLIN | (n ? POLLOUT : 0);
		if (poll(&pfd, 1, -1) < 0) {
			fuzz_check(errno == EINTR);
			continue;
		}
		if (n && pfd.revents & (POLLOUT | POLLERR | POLLHUP)) {
			r = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (r > 0) {
				p += r;
				n -= r;
			} else if (r < 0 && errno != EAGAIN) {
				n = pc->left = 0; /* the agent has gone */
			}
		}
		if (!(pfd.revents & (POLLIN | POLLERR | POLLHUP)))
			continue;
		r = answer__take(a, fd);
		/* ECONNRESET: it closed leaving some of the stream unread. */
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return;
		fuzz_check(r > 0 || errno == EAGAIN || errno == EINTR);
	}
}

/* The sum of the FS_DATA frames after the request up to KILN_F_EOF; -1. */
static int64_t write_size(const uint8_t *s, size_t len)
{
	size_t off = 0;
	int64_t sum = 0;
	uint32_t plen;
	bool first = true;

	while (stream_frame(s, len, off, &plen) == 1) {
		if (!first) {
			if (le16(s + off + 4) != KILN_MSG_FS_DATA)
				return -1;
			sum += plen;
			if (le16(s + off + 6) & KILN_F_EOF)
				return sum;
		}
		first = false;
		off += HDR + plen;
	}
	return -1;
}

static bool is_request(uint16_t type)
{
	return type == KILN_MSG_PROC_START || fs__is_request(type) ||
	       type == KILN_MSG_FACTS || type == KILN_MSG_POWEROFF ||
	       type == KILN_MSG_RESEED;
}

/* A TLV payload that walks to its end: @want's u64 in *v (if there). */
static bool tlv_u64(const uint8_t *p, uint32_t len, uint16_t want, uint64_t *v)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	bool found = false;
	uint32_t vlen;
	uint16_t tag;
	int ret;

	kiln_tlv__iter(&it, p, len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &vlen)) == 1)
		if (tag == want && !kiln_tlv__u64(val, vlen, v))
			found = true;
	fuzz_check(ret == 0);
	return found;
}

static void check_error(const uint8_t *p, uint32_t len, uint16_t req)
{
	struct kiln_tlv_iter it;
	const char *name = NULL;
	const uint8_t *val;
	uint64_t err = 0;
	uint32_t vlen;
	uint16_t tag;

	fuzz_check(tlv_u64(p, len, KILN_T_ERRNO, &err));
	fuzz_check(err > 0 && err < 4096);
	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_ERRNAME) {
			name = kiln_errno__name((int)err);
			fuzz_check(vlen == strlen(name) &&
				   !memcmp(val, name, vlen));
		}
	fuzz_check(name);
	if (!is_request(req))
		fuzz_check(err == EPROTO);
	if (req == KILN_MSG_POWEROFF)
		fuzz_check(err == ENOTSUP);
}

static void check_answer(const struct answer *a, const uint8_t *s, size_t len)
{
	uint64_t v, features, data = 0;
	bool has_req, last = false;
	uint16_t type, req = 0;
	const uint8_t *p;
	size_t off = HDR;
	uint32_t plen;

	fuzz_check(stream_frame(a->p, a->len, 0, &plen) == 1);
	fuzz_check(le16(a->p + 4) == KILN_MSG_HELLO);
	fuzz_check(!kiln_hello__decode(a->p + HDR, plen, &v, &features));
	fuzz_check(v == KILN_AGENT_VERSION &&
		   features == (KILN_FEATURE_RESEED | KILN_FEATURE_MOUNTS |
				KILN_FEATURE_NET_RENEW |
				KILN_FEATURE_ENV_MERGE | KILN_FEATURE_USER |
				KILN_FEATURE_CONTAINER | KILN_FEATURE_CONFINE));
	has_req = stream_frame(s, len, 0, &plen) == 1;
	if (has_req)
		req = le16(s + 4);
	off += le32(a->p);
	while (off < a->len) {
		fuzz_check(has_req && !last);
		fuzz_check(stream_frame(a->p, a->len, off, &plen) == 1);
		type = le16(a->p + off + 4);
		p = a->p + off + HDR;
		/* Not PROC_STARTED, output or PROC_EXIT: no command ran. */
		fuzz_check(type == KILN_MSG_FS_DATA ||
			   type == KILN_MSG_RESULT || type == KILN_MSG_ERROR);
		switch (type) {
		case KILN_MSG_FS_DATA:
			fuzz_check(req == KILN_MSG_FS_READ);
			fuzz_check(plen <= KILN_DATA_CHUNK);
			data += plen;
			break;
		case KILN_MSG_RESULT:
			if (tlv_u64(p, plen, KILN_T_MORE, &v) && v == 1) {
				fuzz_check(req == KILN_MSG_FS_READDIR);
				break;
			}
			last = true;
			fuzz_check(req != KILN_MSG_PROC_START &&
				   req != KILN_MSG_POWEROFF && is_request(req));
			if (req == KILN_MSG_FS_READ)
				fuzz_check(tlv_u64(p, plen, KILN_T_SIZE, &v) &&
					   v == data);
			if (req == KILN_MSG_FS_WRITE)
				fuzz_check(tlv_u64(p, plen, KILN_T_SIZE, &v) &&
					   (int64_t)v == write_size(s, len));
			break;
		case KILN_MSG_ERROR:
			last = true;
			check_error(p, plen, req);
			break;
		}
		off += HDR + plen;
	}
}

static void serve(const uint8_t *s, size_t len, uint16_t split)
{
	struct answer a = { 0 };
	struct pieces pc;
	pthread_t t;
	int sv[2];

	fill_sandbox();
	fuzz_check(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	fuzz_check(!pthread_create(&t, NULL, agent_thread, &sv[0]));
	pieces__init(&pc, s, len, split);
	host_end(sv[1], &pc, &a);
	fuzz_check(!pthread_join(t, NULL));
	close(sv[1]);
	fuzz_sandbox__umount(sandbox);
	check_answer(&a, s, len);
	free(a.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint16_t split;

	setup();
	if (size < 2)
		return 0;
	split = le16(data);
	read_frames(data + 2, size - 2, split);
	if (!sandbox_err)
		serve(data + 2, size - 2, split);
	return 0;
}
