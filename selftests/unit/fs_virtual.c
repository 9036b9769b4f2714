// SPDX-License-Identifier: GPL-2.0
/*
 * The virtual virtio-fs backend (devices/fs/virtual.c), driven through its
 * forward() op with hand-built FUSE messages, without a guest:
 *
 * - against tools/fs-example-server, started as a child: INIT, LOOKUP,
 *   READ, READDIR, READLINK, files created, written, truncated and
 *   removed, the server's --delay-ms (the timeout) and --die-after
 *   (server death), and malformed requests the server must survive;
 * - against a fake server in the test on a listening socket: replies out
 *   of order, a late reply after the timeout, invalid packets, the server
 *   dying with requests pending, a full socket, the in-flight cap, 1,000
 *   requests at once, the largest request and reply, destroy with
 *   requests pending.
 *
 * Completions come from the relay thread: the test waits for them on a
 * mutex and condition variable. KILN_FS_EXAMPLE_SERVER names the server
 * (default: tools/fs-example-server in the build directory this test
 * was built in).
 */
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "lib/compiler.h"
#include "devices/fs/virtual.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define WAIT_MS	     5000U /* for what must happen */
#define QUIET_MS     200U  /* to see that nothing more comes */
#define ROOM_DEFAULT 4096U
#define MANY	     1000U
#define MAX_SENT     256U /* VIRTUAL_FS_MAX_SENT in virtual.c */
#define HELLO	     "hello from the orchestrator\n"
#define REPLY_HDR    sizeof(struct fuse_out_header)

/*
 * The backend's timeout where a test is not about it: a day, so that a
 * timeout can never pass for what the test is about (a reply, a server
 * gone, a destroy), however slow the machine; a backend that waits for
 * it instead hangs the test until its own timeout fails it.
 */
#define NO_TIMEOUT_MS (24U * 3600 * 1000)
#define NO_TIMEOUT    "86400000" /* the same, for the server's --delay-ms */

/* ---- requests and their completions ----------------------------------- */

struct treq {
	struct fs_forward_req req; /* first: the completion casts back */
	uint8_t *msg;
	int done; /* times completed: must end at exactly 1 */
	ssize_t len;
	bool null_reply;
	uint8_t *reply;
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static unsigned int nr_done;

static void on_complete(struct fs_forward_req *req, const void *reply,
			ssize_t len)
{
	struct treq *t = (struct treq *)req;

	pthread_mutex_lock(&done_lock);
	t->done++;
	t->len = len;
	t->null_reply = !reply;
	free(t->reply);
	t->reply = NULL;
	if (reply && len > 0) {
		t->reply = malloc(len);
		if (t->reply)
			memcpy(t->reply, reply, len);
	}
	nr_done++;
	pthread_cond_broadcast(&done_cond);
	pthread_mutex_unlock(&done_lock);
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Waits until nr_done reaches n; false after ms. */
static bool wait_done(unsigned int n, unsigned int ms)
{
	struct timespec until;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&done_lock);
	while (nr_done < n)
		if (pthread_cond_timedwait(&done_cond, &done_lock, &until))
			break;
	ok = nr_done >= n;
	pthread_mutex_unlock(&done_lock);
	return ok;
}

static int done_of(struct treq *t)
{
	int d;

	pthread_mutex_lock(&done_lock);
	d = t->done;
	pthread_mutex_unlock(&done_lock);
	return d;
}

/* A request: header, then arg (alen bytes), then data (dlen bytes). */
static struct treq *treq_new(uint32_t opcode, uint64_t nodeid, uint64_t unique,
			     const void *arg, size_t alen, const void *data,
			     size_t dlen, size_t room)
{
	struct treq *t = calloc(1, sizeof(*t));
	struct fuse_in_header h = {
		.len = (uint32_t)(sizeof(h) + alen + dlen),
		.opcode = opcode,
		.unique = unique,
		.nodeid = nodeid,
		.uid = 1000,
		.gid = 1000,
		.pid = 42,
	};

	if (!t)
		return NULL;
	t->msg = malloc(h.len);
	if (!t->msg) {
		free(t);
		return NULL;
	}
	memcpy(t->msg, &h, sizeof(h));
	if (alen)
		memcpy(t->msg + sizeof(h), arg, alen);
	if (dlen)
		memcpy(t->msg + sizeof(h) + alen, data, dlen);
	t->req.msg = t->msg;
	t->req.len = h.len;
	t->req.unique = unique;
	t->req.opcode = opcode;
	t->req.reply_room = room;
	t->req.complete = on_complete;
	return t;
}

static void treq_free(struct treq *t)
{
	if (!t)
		return;
	free(t->msg);
	free(t->reply);
	free(t);
}

static struct fuse_out_header reply_hdr(const struct treq *t)
{
	struct fuse_out_header oh = { 0 };

	if (t->reply && t->len >= (ssize_t)sizeof(oh))
		memcpy(&oh, t->reply, sizeof(oh));
	return oh;
}

/* ---- files, sockets ------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static int listen_type(const char *path, int type)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 8)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static int listen_at(const char *path)
{
	return listen_type(path, SOCK_SEQPACKET);
}

/* One packet within ms into buf (size bytes); its length, or -1. */
static ssize_t recv_within(int fd, void *buf, size_t size, unsigned int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, (int)ms) != 1)
		return -1;
	return recv(fd, buf, size, MSG_DONTWAIT | MSG_TRUNC);
}

static int send_reply(int fd, uint64_t unique, int32_t error,
		      const void *payload, size_t len)
{
	struct fuse_out_header oh = {
		.len = (uint32_t)(sizeof(oh) + len),
		.error = error,
		.unique = unique,
	};
	struct iovec iov[2] = { { &oh, sizeof(oh) }, { (void *)payload, len } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };

	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)oh.len ? 0 : -1;
}

static int send_raw(int fd, const void *buf, size_t len)
{
	return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* ---- the fake server ---------------------------------------------------- */

FIXTURE(fake)
{
	char dir[64];
	char path[96];
	int lfd, cfd;
	int type; /* the listener's: SOCK_SEQPACKET unless relisten() */
	struct fs_backend *b;
	uint8_t *buf; /* FS_FORWARD_MAX + 1 */
};

FIXTURE_SETUP(fake)
{
	self->lfd = self->cfd = -1;
	strcpy(self->dir, "/tmp/kiln-vfs-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->path, sizeof(self->path), "%s/sock", self->dir);
	self->lfd = listen_at(self->path);
	self->type = SOCK_SEQPACKET;
	ASSERT_LE(0, self->lfd) TH_LOG("listen: %s", strerror(errno));
	self->buf = malloc(FS_FORWARD_MAX + 1);
	ASSERT_NE(NULL, self->buf);
}

FIXTURE_TEARDOWN(fake)
{
	fs_backend__destroy(self->b);
	if (self->cfd >= 0)
		close(self->cfd);
	if (self->lfd >= 0)
		close(self->lfd);
	free(self->buf);
	if (self->dir[0])
		nftw(self->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Creates the backend and takes its connection. */
static void fake_connect(struct __test_metadata *_metadata,
			 FIXTURE_DATA(fake) * self, unsigned int timeout_ms)
{
	struct virtual_fs_params p = {
		.name = "virtual:/test",
		.socket = self->path,
		.timeout_ms = timeout_ms,
	};

	ASSERT_EQ(0, virtual_fs__create(&self->b, &p));
	ASSERT_NE(NULL, self->b);
	ASSERT_NE(NULL, self->b->ops->forward);
	self->cfd = accept4(self->lfd, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, self->cfd);
}

static struct treq *forward_room(FIXTURE_DATA(fake) * self, uint32_t opcode,
				 uint64_t unique, size_t room)
{
	struct fuse_getattr_in gi = { 0 };
	struct treq *t = treq_new(opcode, FUSE_ROOT_ID, unique, &gi, sizeof(gi),
				  NULL, 0, room);

	if (!t)
		return NULL;
	if (self->b->ops->forward(self->b, &t->req)) {
		treq_free(t);
		return NULL;
	}
	return t;
}

static struct treq *forward_simple(struct __test_metadata *_metadata,
				   FIXTURE_DATA(fake) * self, uint32_t opcode,
				   uint64_t unique)
{
	return forward_room(self, opcode, unique, ROOM_DEFAULT);
}

/* Exactly len bytes of a stream within ms each wait; false if not. */
static bool read_exact(int fd, uint8_t *buf, size_t len, unsigned int ms)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, (int)ms) != 1)
			return false;
		n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

/* A stream's next message, framed by its header's len; its length or -1. */
static ssize_t stream_recv(int fd, uint8_t *buf, unsigned int ms)
{
	struct fuse_in_header h;

	if (!read_exact(fd, buf, sizeof(h), ms))
		return -1;
	memcpy(&h, buf, sizeof(h));
	if (h.len < sizeof(h) || h.len > FS_FORWARD_MAX)
		return -1;
	if (!read_exact(fd, buf + sizeof(h), h.len - sizeof(h), ms))
		return -1;
	return h.len;
}

/* The fake server's next request: its header; ASSERTs that it arrives. */
static struct fuse_in_header fake_recv(struct __test_metadata *_metadata,
				       FIXTURE_DATA(fake) * self, ssize_t *len)
{
	struct fuse_in_header h = { 0 };
	ssize_t n = self->type == SOCK_STREAM ?
			    stream_recv(self->cfd, self->buf, WAIT_MS) :
			    recv_within(self->cfd, self->buf,
					FS_FORWARD_MAX + 1, WAIT_MS);

	ASSERT_LE((ssize_t)sizeof(h), n);
	memcpy(&h, self->buf, sizeof(h));
	ASSERT_EQ((uint32_t)n, h.len);
	if (len)
		*len = n;
	return h;
}

TEST(create_missing_socket)
{
	struct virtual_fs_params p = {
		.name = "virtual:/x",
		.socket = "/tmp/kiln-vfs-no-such-dir/sock",
	};
	struct stderr_capture cap = { 0 };
	struct fs_backend *b = (void *)1;
	char log[1024];

	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(-ENOENT, virtual_fs__create(&b, &p));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(NULL, b);
	EXPECT_NE(NULL, strstr(log, "/tmp/kiln-vfs-no-such-dir/sock"))
	TH_LOG("log: %s", log);

	p.socket = "relative/sock";
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(-EINVAL, virtual_fs__create(&b, &p));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_NE(NULL, strstr(log, "relative/sock"));
}

TEST_F(fake, create_refused)
{
	struct virtual_fs_params p = { .name = "virtual:/x",
				       .socket = self->path };
	struct stderr_capture cap = { 0 };
	struct fs_backend *b = NULL;
	char log[1024];

	/* The socket file stays, nobody listens: ECONNREFUSED. */
	close(self->lfd);
	self->lfd = -1;
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	EXPECT_EQ(-ECONNREFUSED, virtual_fs__create(&b, &p));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(NULL, b);
	EXPECT_NE(NULL, strstr(log, self->path)) TH_LOG("log: %s", log);
}

TEST_F(fake, request_arrives_as_sent)
{
	static const char data[] = "some bytes to write";
	struct fuse_write_in wi = { .offset = 7, .size = sizeof(data) };
	struct treq *t;
	ssize_t n;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	t = treq_new(FUSE_WRITE, 5, 77, &wi, sizeof(wi), data, sizeof(data),
		     ROOM_DEFAULT);
	ASSERT_NE(NULL, t);
	ASSERT_EQ(0, self->b->ops->forward(self->b, &t->req));
	fake_recv(_metadata, self, &n);
	ASSERT_EQ((ssize_t)t->req.len, n);
	EXPECT_EQ(0, memcmp(self->buf, t->msg, n));
	EXPECT_EQ(0, done_of(t));

	/* The whole reply comes back as the server sent it. */
	struct fuse_write_out wo = { .size = sizeof(data) };

	ASSERT_EQ(0, send_reply(self->cfd, 77, 0, &wo, sizeof(wo)));
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	EXPECT_EQ(1, t->done);
	EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(wo)), t->len);
	ASSERT_NE(NULL, t->reply);
	EXPECT_EQ(77, reply_hdr(t).unique);
	EXPECT_EQ(0, memcmp(t->reply + REPLY_HDR, &wo, sizeof(wo)));
	treq_free(t);
}

TEST_F(fake, replies_out_of_order)
{
	struct treq *t[3];
	uint64_t tag;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	for (int i = 0; i < 3; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 100 + i);
		ASSERT_NE(NULL, t[i]);
	}
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(100 + i, fake_recv(_metadata, self, NULL).unique);
	/* Answered last to first, each with its unique as the payload. */
	for (int i = 2; i >= 0; i--) {
		tag = 100 + i;
		ASSERT_EQ(0, send_reply(self->cfd, tag, 0, &tag, sizeof(tag)));
		ASSERT_TRUE(wait_done(3 - i, WAIT_MS));
		EXPECT_EQ(1, done_of(t[i]));
		for (int j = 0; j < i; j++)
			EXPECT_EQ(0, done_of(t[j]));
	}
	for (int i = 0; i < 3; i++) {
		ASSERT_NE(NULL, t[i]->reply);
		memcpy(&tag, t[i]->reply + REPLY_HDR, sizeof(tag));
		EXPECT_EQ(100 + i, tag);
		EXPECT_EQ(100 + i, reply_hdr(t[i]).unique);
		treq_free(t[i]);
	}
}

TEST_F(fake, timeout_then_late_reply_dropped)
{
	struct stderr_capture cap = { 0 };
	struct treq *a, *b;
	uint64_t start, took, tag = 2;
	char log[2048];

	fake_connect(_metadata, self, 150);
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	start = ms_now();
	a = forward_simple(_metadata, self, FUSE_GETATTR, 1);
	ASSERT_NE(NULL, a);
	fake_recv(_metadata, self, NULL);
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	/* Not before the timeout; the log below names the 150 ms. */
	took = ms_now() - start;
	EXPECT_LE(150, took);
	EXPECT_EQ(1, a->done);
	EXPECT_TRUE(a->null_reply);
	EXPECT_EQ(-EIO, a->len);

	/* Too late: dropped, and a's completion is not called again. */
	ASSERT_EQ(0, send_reply(self->cfd, 1, 0, &tag, sizeof(tag)));
	b = forward_simple(_metadata, self, FUSE_GETATTR, 2);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(2, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, send_reply(self->cfd, 2, 0, &tag, sizeof(tag)));
	ASSERT_TRUE(wait_done(2, WAIT_MS));
	sleep_ms(QUIET_MS);
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(1, done_of(a));
	EXPECT_EQ(1, done_of(b));
	EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(tag)), b->len);
	EXPECT_NE(NULL, strstr(log, "unanswered after 150 ms"))
	TH_LOG("log: %s", log);
	treq_free(a);
	treq_free(b);
}

TEST_F(fake, invalid_packets_dropped_and_logged_once)
{
	struct fuse_out_header oh;
	struct stderr_capture cap = { 0 };
	struct treq *a;
	uint64_t tag = 10;
	char log[4096], *p;
	int lines = 0;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	a = forward_simple(_metadata, self, FUSE_GETATTR, 10);
	ASSERT_NE(NULL, a);
	ASSERT_EQ(10, fake_recv(_metadata, self, NULL).unique);

	ASSERT_EQ(0, stderr_capture__begin(&cap));
	/* Shorter than a header. */
	ASSERT_EQ(0, send_raw(self->cfd, "abc", 3));
	/* len is not the packet's length, either way. */
	oh = (struct fuse_out_header){ .len = 40, .unique = 10 };
	ASSERT_EQ(0, send_raw(self->cfd, &oh, sizeof(oh)));
	oh.len = 8;
	memset(self->buf, 0, 64);
	memcpy(self->buf, &oh, sizeof(oh));
	ASSERT_EQ(0, send_raw(self->cfd, self->buf, 24));
	/* Nobody's unique. */
	ASSERT_EQ(0, send_reply(self->cfd, 999, 0, &tag, sizeof(tag)));
	ASSERT_EQ(0, send_reply(self->cfd, 999, -ENOENT, NULL, 0));
	sleep_ms(QUIET_MS);
	EXPECT_EQ(0, done_of(a));

	/* The real one still gets through. */
	ASSERT_EQ(0, send_reply(self->cfd, 10, 0, &tag, sizeof(tag)));
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(1, a->done);
	EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(tag)), a->len);
	for (p = log; (p = strstr(p, "invalid reply from")); p++)
		lines++;
	EXPECT_EQ(1, lines) TH_LOG("log: %s", log);
	treq_free(a);
}

TEST_F(fake, wrong_replies_to_pending_requests_are_eio)
{
	struct treq *t[3];
	uint8_t big[ROOM_DEFAULT];
	uint64_t tag = 0;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	for (int i = 0; i < 3; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 20 + i);
		ASSERT_NE(NULL, t[i]);
		fake_recv(_metadata, self, NULL);
	}
	memset(big, 0, sizeof(big));
	/*
	 * A positive error; an error with a payload; more than the room.
	 * Only the replies can complete them: NO_TIMEOUT_MS is never reached.
	 */
	ASSERT_EQ(0, send_reply(self->cfd, 20, 5, NULL, 0));
	ASSERT_EQ(0, send_reply(self->cfd, 21, -ENOENT, &tag, sizeof(tag)));
	ASSERT_EQ(0, send_reply(self->cfd, 22, 0, big, sizeof(big)));
	ASSERT_TRUE(wait_done(3, WAIT_MS));
	for (int i = 0; i < 3; i++) {
		EXPECT_EQ(1, t[i]->done);
		EXPECT_TRUE(t[i]->null_reply);
		EXPECT_EQ(-EIO, t[i]->len);
		treq_free(t[i]);
	}
}

TEST_F(fake, error_replies_pass_through)
{
	struct treq *t;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	t = forward_simple(_metadata, self, FUSE_LOOKUP, 30);
	ASSERT_NE(NULL, t);
	fake_recv(_metadata, self, NULL);
	ASSERT_EQ(0, send_reply(self->cfd, 30, -ENOENT, NULL, 0));
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	EXPECT_EQ((ssize_t)REPLY_HDR, t->len);
	EXPECT_EQ(-ENOENT, reply_hdr(t).error);
	treq_free(t);
}

TEST_F(fake, forgets_complete_without_reply)
{
	struct fuse_forget_in fi = { .nlookup = 3 };
	struct {
		struct fuse_batch_forget_in in;
		struct fuse_forget_one one[2];
	} bf = { { .count = 2 }, { { 5, 1 }, { 6, 2 } } };
	struct treq *f, *bt, *g;
	ssize_t n;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	f = treq_new(FUSE_FORGET, 5, 40, &fi, sizeof(fi), NULL, 0, 0);
	bt = treq_new(FUSE_BATCH_FORGET, 0, 41, &bf, sizeof(bf), NULL, 0, 0);
	ASSERT_NE(NULL, f);
	ASSERT_NE(NULL, bt);
	ASSERT_EQ(0, self->b->ops->forward(self->b, &f->req));
	ASSERT_EQ(0, self->b->ops->forward(self->b, &bt->req));
	ASSERT_TRUE(wait_done(2, WAIT_MS));
	EXPECT_EQ(1, f->done);
	EXPECT_TRUE(f->null_reply);
	EXPECT_EQ(0, f->len);
	EXPECT_EQ(1, bt->done);
	EXPECT_EQ(0, bt->len);
	/* Both reached the server, as they were. */
	ASSERT_EQ(FUSE_FORGET, fake_recv(_metadata, self, &n).opcode);
	EXPECT_EQ(0, memcmp(self->buf, f->msg, n));
	ASSERT_EQ(FUSE_BATCH_FORGET, fake_recv(_metadata, self, &n).opcode);
	EXPECT_EQ((ssize_t)bt->req.len, n);
	/* A reply to a forget is nobody's; the next request still works. */
	ASSERT_EQ(0, send_reply(self->cfd, 40, 0, NULL, 0));
	g = forward_simple(_metadata, self, FUSE_GETATTR, 42);
	ASSERT_NE(NULL, g);
	ASSERT_EQ(42, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, send_reply(self->cfd, 42, 0, NULL, 0));
	ASSERT_TRUE(wait_done(3, WAIT_MS));
	EXPECT_EQ(1, done_of(f));
	EXPECT_EQ((ssize_t)REPLY_HDR, g->len);
	treq_free(f);
	treq_free(bt);
	treq_free(g);
}

TEST_F(fake, malformed_request_refused)
{
	struct treq *t;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	t = forward_simple(_metadata, self, FUSE_GETATTR, 50);
	ASSERT_NE(NULL, t);
	fake_recv(_metadata, self, NULL);
	ASSERT_EQ(0, send_reply(self->cfd, 50, 0, NULL, 0));
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	treq_free(t);

	/* Shorter than a header: refused on the spot, nothing sent. */
	t = treq_new(FUSE_GETATTR, 1, 51, NULL, 0, NULL, 0, ROOM_DEFAULT);
	ASSERT_NE(NULL, t);
	t->req.len = sizeof(struct fuse_in_header) - 1;
	ASSERT_EQ(0, self->b->ops->forward(self->b, &t->req));
	EXPECT_EQ(1, done_of(t));
	EXPECT_EQ(-EINVAL, t->len);
	treq_free(t);
	/* A header whose len or unique is not the request's. */
	t = treq_new(FUSE_GETATTR, 1, 52, NULL, 0, NULL, 0, ROOM_DEFAULT);
	ASSERT_NE(NULL, t);
	t->msg[0]++;
	ASSERT_EQ(0, self->b->ops->forward(self->b, &t->req));
	EXPECT_EQ(-EINVAL, t->len);
	treq_free(t);
	t = treq_new(FUSE_GETATTR, 1, 53, NULL, 0, NULL, 0, ROOM_DEFAULT);
	ASSERT_NE(NULL, t);
	t->req.unique = 54;
	ASSERT_EQ(0, self->b->ops->forward(self->b, &t->req));
	EXPECT_EQ(1, done_of(t));
	EXPECT_EQ(-EINVAL, t->len);
	treq_free(t);
	/* Unique 0 is the replayed FUSE_INIT's, never a guest's. */
	t = treq_new(FUSE_GETATTR, 1, 0, NULL, 0, NULL, 0, ROOM_DEFAULT);
	ASSERT_NE(NULL, t);
	ASSERT_EQ(0, self->b->ops->forward(self->b, &t->req));
	EXPECT_EQ(1, done_of(t));
	EXPECT_EQ(-EINVAL, t->len);
	treq_free(t);
	/* None of them reached the server. */
	EXPECT_GT(0, recv_within(self->cfd, self->buf, 64, QUIET_MS));
}

TEST_F(fake, server_death_fails_everything)
{
	struct stderr_capture cap = { 0 };
	struct treq *t[5], *late;
	char log[2048];

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	for (int i = 0; i < 5; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 60 + i);
		ASSERT_NE(NULL, t[i]);
		fake_recv(_metadata, self, NULL);
	}
	/* Only the close can complete them: NO_TIMEOUT_MS is never reached. */
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	close(self->cfd);
	self->cfd = -1;
	ASSERT_TRUE(wait_done(5, WAIT_MS));
	for (int i = 0; i < 5; i++) {
		EXPECT_EQ(1, done_of(t[i]));
		EXPECT_EQ(-EIO, t[i]->len);
		treq_free(t[i]);
	}
	/*
	 * Nothing listens any more (the socket file stays): later requests
	 * try to connect again, fail, and complete with EIO at once.
	 */
	close(self->lfd);
	self->lfd = -1;
	for (int i = 0; i < 3; i++) {
		late = forward_simple(_metadata, self, FUSE_GETATTR, 70 + i);
		ASSERT_NE(NULL, late);
		ASSERT_TRUE(wait_done(6 + i, WAIT_MS));
		EXPECT_EQ(1, done_of(late));
		EXPECT_EQ(-EIO, late->len);
		treq_free(late);
	}
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_NE(NULL, strstr(log, "closed the connection")) TH_LOG("%s", log);
	EXPECT_NE(NULL, strstr(log, "cannot reconnect")) TH_LOG("%s", log);
}

TEST_F(fake, full_socket_queues_in_order)
{
	enum { N = 64, SIZE = 64 * 1024 };
	struct fuse_write_in wi = { .size = SIZE };
	struct treq *t[N];
	uint8_t *data = calloc(1, SIZE);

	ASSERT_NE(NULL, data);
	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	/*
	 * 4 MiB: more than any send buffer holds. forward() never waits:
	 * nothing reads until all are forwarded, so one that waited for
	 * room would wait for ever (the test's timeout).
	 */
	for (int i = 0; i < N; i++) {
		wi.offset = (uint64_t)i * SIZE;
		t[i] = treq_new(FUSE_WRITE, 2, 1000 + i, &wi, sizeof(wi), data,
				SIZE, ROOM_DEFAULT);
		ASSERT_NE(NULL, t[i]);
		ASSERT_EQ(0, self->b->ops->forward(self->b, &t[i]->req));
	}
	/* They come out whole and in order; each is answered at once. */
	for (int i = 0; i < N; i++) {
		struct fuse_write_out wo = { .size = SIZE };
		ssize_t n;
		struct fuse_in_header h = fake_recv(_metadata, self, &n);

		ASSERT_EQ(1000 + i, h.unique);
		ASSERT_EQ((ssize_t)t[i]->req.len, n);
		ASSERT_EQ(0,
			  send_reply(self->cfd, h.unique, 0, &wo, sizeof(wo)));
	}
	ASSERT_TRUE(wait_done(N, WAIT_MS));
	for (int i = 0; i < N; i++) {
		EXPECT_EQ(1, t[i]->done);
		EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(struct fuse_write_out)),
			  t[i]->len);
		treq_free(t[i]);
	}
	free(data);
}

TEST_F(fake, at_most_256_at_the_server)
{
	enum { N = MAX_SENT + 44 };
	struct treq *t[N];
	unsigned int got = 0;
	ssize_t n;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	for (int i = 0; i < N; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 2000 + i);
		ASSERT_NE(NULL, t[i]);
	}
	while ((n = recv_within(self->cfd, self->buf, FS_FORWARD_MAX + 1,
				QUIET_MS)) > 0)
		got++;
	EXPECT_EQ(MAX_SENT, got);
	/* One answer lets exactly one more through. */
	ASSERT_EQ(0, send_reply(self->cfd, 2000, 0, NULL, 0));
	ASSERT_EQ(2000 + MAX_SENT, fake_recv(_metadata, self, NULL).unique);
	EXPECT_GT(0, recv_within(self->cfd, self->buf, 64, QUIET_MS));
	/* Answer the rest as they come. */
	for (int i = 1; i < N; i++) {
		ASSERT_EQ(0, send_reply(self->cfd, 2000 + i, 0, NULL, 0));
		if (i + MAX_SENT < N)
			ASSERT_EQ(2000 + i + MAX_SENT,
				  fake_recv(_metadata, self, NULL).unique);
	}
	ASSERT_TRUE(wait_done(N, WAIT_MS));
	for (int i = 0; i < N; i++) {
		EXPECT_EQ(1, t[i]->done);
		EXPECT_EQ((ssize_t)REPLY_HDR, t[i]->len);
		treq_free(t[i]);
	}
}

/* The fake server as a thread: answers in batches, each in reverse. */
struct echo_args {
	int fd;
	unsigned int count;
	uint8_t buf[512];
	int failed;
};

static void *echo_thread(void *arg)
{
	struct echo_args *a = arg;
	uint64_t batch[50];
	unsigned int seen = 0, nb;
	ssize_t n;

	while (seen < a->count) {
		for (nb = 0; nb < 50 && seen < a->count; nb++, seen++) {
			struct fuse_in_header h;

			n = recv_within(a->fd, a->buf, sizeof(a->buf),
					nb ? 20 : WAIT_MS);
			if (n < 0 && nb)
				break; /* nothing more for now: answer these */
			if (n < (ssize_t)sizeof(h)) {
				a->failed = 1;
				return NULL;
			}
			memcpy(&h, a->buf, sizeof(h));
			batch[nb] = h.unique;
		}
		while (nb--)
			if (send_reply(a->fd, batch[nb], 0, &batch[nb],
				       sizeof(batch[nb]))) {
				a->failed = 2;
				return NULL;
			}
	}
	return NULL;
}

TEST_F_TIMEOUT(fake, thousand_concurrent, 60)
{
	static struct treq *t[MANY];
	struct echo_args ea = { .count = MANY };
	pthread_t th;
	uint64_t tag;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	ea.fd = self->cfd;
	ASSERT_EQ(0, pthread_create(&th, NULL, echo_thread, &ea));
	for (unsigned int i = 0; i < MANY; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR,
				      1000000 + i);
		ASSERT_NE(NULL, t[i]);
	}
	EXPECT_TRUE(wait_done(MANY, 4 * WAIT_MS));
	pthread_join(th, NULL);
	EXPECT_EQ(0, ea.failed);
	for (unsigned int i = 0; i < MANY; i++) {
		EXPECT_EQ(1, t[i]->done);
		ASSERT_EQ((ssize_t)(REPLY_HDR + sizeof(tag)), t[i]->len);
		memcpy(&tag, t[i]->reply + REPLY_HDR, sizeof(tag));
		EXPECT_EQ(1000000 + i, tag);
		treq_free(t[i]);
	}
}

TEST_F(fake, queued_requests_time_out_too)
{
	enum { N = MAX_SENT + 44 };
	struct treq *t[N];
	uint64_t start, took;

	/* The server reads nothing: 256 sent, 44 never leave the queue. */
	fake_connect(_metadata, self, 200);
	start = ms_now();
	for (int i = 0; i < N; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 3000 + i);
		ASSERT_NE(NULL, t[i]);
	}
	/* Nothing else completes them: the server reads nothing. */
	ASSERT_TRUE(wait_done(N, WAIT_MS));
	took = ms_now() - start;
	EXPECT_LE(200, took);
	for (int i = 0; i < N; i++) {
		EXPECT_EQ(1, t[i]->done);
		EXPECT_EQ(-EIO, t[i]->len);
		treq_free(t[i]);
	}
}

TEST_F(fake, destroy_completes_pending)
{
	enum { N = MAX_SENT + 10 };
	struct treq *t[N];

	/* Sent ones, and queued ones beyond the cap. */
	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	for (int i = 0; i < N; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 80 + i);
		ASSERT_NE(NULL, t[i]);
	}
	fake_recv(_metadata, self, NULL);
	/* A destroy that waited for their timeout would never return. */
	fs_backend__destroy(self->b);
	self->b = NULL;
	/* Completed before destroy returned, each once. */
	for (int i = 0; i < N; i++) {
		EXPECT_EQ(1, done_of(t[i]));
		EXPECT_EQ(-EIO, t[i]->len);
		treq_free(t[i]);
	}
	/* And the server saw the connection close. */
	while (recv_within(self->cfd, self->buf, 64, WAIT_MS) > 0)
		;
	EXPECT_EQ(0, recv(self->cfd, self->buf, 64, MSG_DONTWAIT));
}

/* ---- reconnection and the stream transport ----------------------------- */

/* Replaces the listener with one of type at the same path. */
static void relisten(struct __test_metadata *_metadata,
		     FIXTURE_DATA(fake) * self, int type)
{
	if (self->lfd >= 0)
		close(self->lfd);
	unlink(self->path);
	self->lfd = listen_type(self->path, type);
	self->type = type;
	ASSERT_LE(0, self->lfd) TH_LOG("listen: %s", strerror(errno));
}

/* Takes the backend's next connection, within WAIT_MS. */
static void fake_accept(struct __test_metadata *_metadata,
			FIXTURE_DATA(fake) * self)
{
	struct pollfd p = { .fd = self->lfd, .events = POLLIN };

	if (self->cfd >= 0)
		close(self->cfd);
	self->cfd = -1;
	ASSERT_EQ(1, poll(&p, 1, (int)WAIT_MS)) TH_LOG("no new connection");
	self->cfd = accept4(self->lfd, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, self->cfd);
}

/* The guest's FUSE_INIT (unique 1), answered; *init is a copy of it. */
static void fake_init(struct __test_metadata *_metadata,
		      FIXTURE_DATA(fake) * self, struct treq **init)
{
	struct fuse_init_in in = { .major = 7,
				   .minor = 31,
				   .max_readahead = 65536 };
	struct fuse_init_out out = { .major = 7,
				     .minor = 31,
				     .max_write = 65536 };

	*init = treq_new(FUSE_INIT, 0, 1, &in, sizeof(in), NULL, 0,
			 ROOM_DEFAULT);
	ASSERT_NE(NULL, *init);
	ASSERT_EQ(0, self->b->ops->forward(self->b, &(*init)->req));
	ASSERT_EQ(1, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, send_reply(self->cfd, 1, 0, &out, sizeof(out)));
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	ASSERT_EQ((ssize_t)(REPLY_HDR + sizeof(out)), (*init)->len);
}

/*
 * The server drops the connection with a request pending and comes back
 * (on the same listener): the pending request fails with EIO, the next
 * one reconnects, and the new connection gets the guest's FUSE_INIT again
 * with unique 0, then the request.
 */
static void check_reconnect(struct __test_metadata *_metadata,
			    FIXTURE_DATA(fake) * self)
{
	struct stderr_capture cap = { 0 };
	struct treq *init, *lost, *t;
	struct fuse_in_header h;
	uint64_t tag = 3;
	char log[2048];
	ssize_t n;

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	fake_init(_metadata, self, &init);
	lost = forward_simple(_metadata, self, FUSE_GETATTR, 2);
	ASSERT_NE(NULL, lost);
	ASSERT_EQ(2, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	close(self->cfd);
	self->cfd = -1;
	/* Only the close completes it: NO_TIMEOUT_MS is never reached. */
	ASSERT_TRUE(wait_done(2, WAIT_MS));
	EXPECT_EQ(-EIO, lost->len);

	t = forward_simple(_metadata, self, FUSE_GETATTR, 3);
	ASSERT_NE(NULL, t);
	fake_accept(_metadata, self);
	h = fake_recv(_metadata, self, &n);
	EXPECT_EQ(FUSE_INIT, h.opcode);
	EXPECT_EQ(0, h.unique);
	ASSERT_EQ((ssize_t)init->req.len, n);
	/* The guest's bytes but the unique (offset 8, 8 bytes). */
	EXPECT_EQ(0, memcmp(self->buf, init->msg, 8));
	EXPECT_EQ(0, memcmp(self->buf + 16, init->msg + 16, n - 16));
	EXPECT_EQ(3, fake_recv(_metadata, self, NULL).unique);
	EXPECT_EQ(0, done_of(t));
	/* The answer to the replay is the backend's: nobody completes. */
	ASSERT_EQ(0, send_reply(self->cfd, 0, 0, NULL, 0));
	ASSERT_EQ(0, send_reply(self->cfd, 3, 0, &tag, sizeof(tag)));
	ASSERT_TRUE(wait_done(3, WAIT_MS));
	sleep_ms(QUIET_MS);
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(1, done_of(t));
	EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(tag)), t->len);
	EXPECT_EQ(1, done_of(init));
	EXPECT_NE(NULL, strstr(log, "closed the connection")) TH_LOG("%s", log);
	EXPECT_NE(NULL, strstr(log, "reconnected to")) TH_LOG("%s", log);
	/* The replay's answer was not taken for a stray reply. */
	EXPECT_EQ(NULL, strstr(log, "unknown unique")) TH_LOG("%s", log);
	treq_free(init);
	treq_free(lost);
	treq_free(t);
}

TEST_F(fake, reconnect_replays_init)
{
	check_reconnect(_metadata, self);
}

TEST_F(fake, stream_reconnect_replays_init)
{
	relisten(_metadata, self, SOCK_STREAM);
	check_reconnect(_metadata, self);
}

/*
 * Nothing listens: requests fail with EIO at once (one attempt per
 * VIRTUAL_FS_RETRY_MS, the others without one). A server that listens
 * again, of the other socket type, is reached by a later request. No
 * FUSE_INIT was seen, so none is replayed.
 */
TEST_F(fake, reconnect_waits_for_a_listener)
{
	struct stderr_capture cap = { 0 };
	struct treq *t[3], *ok;
	uint64_t tag = 9;
	char log[2048];

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	close(self->lfd);
	self->lfd = -1;
	close(self->cfd);
	self->cfd = -1;
	for (int i = 0; i < 3; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 5 + i);
		ASSERT_NE(NULL, t[i]);
		ASSERT_TRUE(wait_done(i + 1, WAIT_MS));
		EXPECT_EQ(-EIO, t[i]->len);
	}
	relisten(_metadata, self, SOCK_STREAM);
	sleep_ms(VIRTUAL_FS_RETRY_MS + 50);
	ok = forward_simple(_metadata, self, FUSE_GETATTR, 8);
	ASSERT_NE(NULL, ok);
	fake_accept(_metadata, self);
	ASSERT_EQ(8, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, send_reply(self->cfd, 8, 0, &tag, sizeof(tag)));
	ASSERT_TRUE(wait_done(4, WAIT_MS));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(tag)), ok->len);
	EXPECT_NE(NULL, strstr(log, "cannot reconnect")) TH_LOG("%s", log);
	EXPECT_NE(NULL, strstr(log, "SOCK_STREAM")) TH_LOG("%s", log);
	for (int i = 0; i < 3; i++)
		treq_free(t[i]);
	treq_free(ok);
}

/* A server that refuses the replayed FUSE_INIT is dropped again. */
TEST_F(fake, replay_refused_drops_the_server)
{
	struct stderr_capture cap = { 0 };
	struct treq *init, *t;
	char log[2048];

	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	fake_init(_metadata, self, &init);
	close(self->cfd);
	self->cfd = -1;
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	t = forward_simple(_metadata, self, FUSE_GETATTR, 2);
	ASSERT_NE(NULL, t);
	fake_accept(_metadata, self);
	ASSERT_EQ(0, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(2, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, send_reply(self->cfd, 0, -EPROTO, NULL, 0));
	ASSERT_TRUE(wait_done(2, WAIT_MS));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(-EIO, t->len);
	EXPECT_NE(NULL, strstr(log, "refused the replayed FUSE_INIT"))
	TH_LOG("%s", log);
	/* And the backend closed that connection. */
	while (recv_within(self->cfd, self->buf, 64, WAIT_MS) > 0)
		;
	EXPECT_EQ(0, recv(self->cfd, self->buf, 64, MSG_DONTWAIT));
	treq_free(init);
	treq_free(t);
}

/* A reply in three writes; two replies, and part of a third, in one. */
TEST_F(fake, stream_partial_and_joined_replies)
{
	struct fuse_out_header oh[3];
	uint8_t wire[3 * (REPLY_HDR + sizeof(uint64_t))];
	struct treq *t[3];
	size_t one = REPLY_HDR + sizeof(uint64_t);

	relisten(_metadata, self, SOCK_STREAM);
	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	for (int i = 0; i < 3; i++) {
		t[i] = forward_simple(_metadata, self, FUSE_GETATTR, 10 + i);
		ASSERT_NE(NULL, t[i]);
		ASSERT_EQ(10 + i, fake_recv(_metadata, self, NULL).unique);
	}
	for (int i = 0; i < 3; i++) {
		uint64_t tag = 10 + i;

		oh[i] = (struct fuse_out_header){ .len = (uint32_t)one,
						  .unique = tag };
		memcpy(wire + i * one, &oh[i], REPLY_HDR);
		memcpy(wire + i * one + REPLY_HDR, &tag, sizeof(tag));
	}
	/* 5 bytes (not even a header), then 10, then the rest. */
	ASSERT_EQ(0, send_raw(self->cfd, wire, 5));
	sleep_ms(QUIET_MS);
	EXPECT_EQ(0, done_of(t[0]));
	ASSERT_EQ(0, send_raw(self->cfd, wire + 5, 10));
	sleep_ms(QUIET_MS);
	EXPECT_EQ(0, done_of(t[0]));
	ASSERT_EQ(0, send_raw(self->cfd, wire + 15, one - 15));
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	EXPECT_EQ((ssize_t)one, t[0]->len);
	/* The second whole and 7 bytes of the third in one write. */
	ASSERT_EQ(0, send_raw(self->cfd, wire + one, one + 7));
	ASSERT_TRUE(wait_done(2, WAIT_MS));
	sleep_ms(QUIET_MS);
	EXPECT_EQ(1, done_of(t[1]));
	EXPECT_EQ(0, done_of(t[2]));
	ASSERT_EQ(0, send_raw(self->cfd, wire + 2 * one + 7, one - 7));
	ASSERT_TRUE(wait_done(3, WAIT_MS));
	for (int i = 0; i < 3; i++) {
		uint64_t tag = 0;

		EXPECT_EQ(1, done_of(t[i]));
		ASSERT_EQ((ssize_t)one, t[i]->len);
		memcpy(&tag, t[i]->reply + REPLY_HDR, sizeof(tag));
		EXPECT_EQ(10 + i, tag);
		treq_free(t[i]);
	}
}

/*
 * A len no reply can have ends the connection (the stream cannot be
 * resynchronised): every pending request fails with EIO, one line is
 * logged; the next request reconnects. Shorter than the header, then
 * longer than FS_FORWARD_MAX (which the backend must not wait for).
 */
TEST_F(fake, stream_bad_len_drops_the_server)
{
	static const uint32_t bad[] = { 8, FS_FORWARD_MAX + 1, 0xffffffffU };
	struct stderr_capture cap = { 0 };
	struct fuse_out_header oh;
	struct treq *a, *b;
	unsigned int done = 0;
	char log[4096];

	relisten(_metadata, self, SOCK_STREAM);
	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		a = forward_simple(_metadata, self, FUSE_GETATTR, 20 + 2 * i);
		b = forward_simple(_metadata, self, FUSE_GETATTR, 21 + 2 * i);
		ASSERT_NE(NULL, a);
		ASSERT_NE(NULL, b);
		if (i)
			fake_accept(_metadata, self);
		fake_recv(_metadata, self, NULL);
		fake_recv(_metadata, self, NULL);
		oh = (struct fuse_out_header){ .len = bad[i],
					       .unique = 20 + 2 * i };
		ASSERT_EQ(0, send_raw(self->cfd, &oh, sizeof(oh)));
		done += 2;
		ASSERT_TRUE(wait_done(done, WAIT_MS));
		EXPECT_EQ(-EIO, a->len);
		EXPECT_EQ(-EIO, b->len);
		treq_free(a);
		treq_free(b);
		/* The backend closed its end. */
		while (recv_within(self->cfd, self->buf, 64, WAIT_MS) > 0)
			;
		EXPECT_EQ(0, recv(self->cfd, self->buf, 64, MSG_DONTWAIT));
	}
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_NE(NULL, strstr(log, "reply len of 8 (not 16..1052672): "
				    "protocol error"))
	TH_LOG("%s", log);
	EXPECT_NE(NULL, strstr(log, "reply len of 1052673"));
	EXPECT_NE(NULL, strstr(log, "reply len of 4294967295"));
}

TEST_F(fake, stream_closed_in_a_message)
{
	struct stderr_capture cap = { 0 };
	struct fuse_out_header oh = { .len = REPLY_HDR + 8, .unique = 30 };
	struct treq *t;
	char log[2048];

	relisten(_metadata, self, SOCK_STREAM);
	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	t = forward_simple(_metadata, self, FUSE_GETATTR, 30);
	ASSERT_NE(NULL, t);
	fake_recv(_metadata, self, NULL);
	ASSERT_EQ(0, stderr_capture__begin(&cap));
	ASSERT_EQ(0, send_raw(self->cfd, &oh, sizeof(oh)));
	ASSERT_EQ(0, send_raw(self->cfd, "abcd", 4));
	close(self->cfd);
	self->cfd = -1;
	ASSERT_TRUE(wait_done(1, WAIT_MS));
	stderr_capture__end(&cap, log, sizeof(log));
	EXPECT_EQ(-EIO, t->len);
	EXPECT_NE(NULL, strstr(log, "in a message (20 bytes of it came)"))
	TH_LOG("%s", log);
	treq_free(t);
}

/*
 * A 1 MiB write the stream takes in part while the server reads nothing:
 * it times out (the guest's buffer is given back), yet the server later
 * reads it whole and intact, then the next request, framed as ever. The
 * request queued behind it expired unsent and never goes.
 */
TEST_F(fake, stream_large_request_outlives_its_timeout)
{
	enum { SIZE = 1U << 20 };
	struct fuse_write_in wi = { .size = SIZE };
	struct treq *w, *queued, *next;
	uint8_t *data = malloc(SIZE), *copy;
	uint64_t tag = 42;
	ssize_t n;

	ASSERT_NE(NULL, data);
	for (unsigned int i = 0; i < SIZE; i++)
		data[i] = (uint8_t)(i * 7 + i / 4096);
	relisten(_metadata, self, SOCK_STREAM);
	fake_connect(_metadata, self, 200);
	w = treq_new(FUSE_WRITE, 5, 40, &wi, sizeof(wi), data, SIZE,
		     ROOM_DEFAULT);
	ASSERT_NE(NULL, w);
	copy = malloc(w->req.len);
	ASSERT_NE(NULL, copy);
	memcpy(copy, w->msg, w->req.len);
	ASSERT_EQ(0, self->b->ops->forward(self->b, &w->req));
	queued = forward_simple(_metadata, self, FUSE_GETATTR, 41);
	ASSERT_NE(NULL, queued);
	ASSERT_TRUE(wait_done(2, WAIT_MS));
	EXPECT_EQ(-EIO, w->len);
	EXPECT_EQ(-EIO, queued->len);
	/* The guest's buffer is no longer the backend's to read. */
	memset(w->msg, 0xaa, w->req.len);
	n = stream_recv(self->cfd, self->buf, WAIT_MS);
	ASSERT_EQ((ssize_t)w->req.len, n);
	EXPECT_EQ(0, memcmp(self->buf, copy, n));

	next = forward_simple(_metadata, self, FUSE_GETATTR, 42);
	ASSERT_NE(NULL, next);
	ASSERT_EQ(42, fake_recv(_metadata, self, NULL).unique);
	ASSERT_EQ(0, send_reply(self->cfd, 42, 0, &tag, sizeof(tag)));
	ASSERT_TRUE(wait_done(3, WAIT_MS));
	EXPECT_EQ((ssize_t)(REPLY_HDR + sizeof(tag)), next->len);
	free(copy);
	free(data);
	treq_free(w);
	treq_free(queued);
	treq_free(next);
}

/* Whether a SOCK_SEQPACKET socket of ours can carry FS_FORWARD_MAX. */
static bool can_send_max(int fd)
{
	int sndbuf = FS_FORWARD_MAX + 4096;
	socklen_t len = sizeof(sndbuf);

	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len))
		return false;
	return sndbuf - 32 >= (int)FS_FORWARD_MAX;
}

TEST_F(fake, largest_request_and_reply)
{
	size_t dlen = FS_FORWARD_MAX - sizeof(struct fuse_in_header) -
		      sizeof(struct fuse_write_in);
	struct fuse_write_in wi = { .size = (uint32_t)dlen };
	uint8_t *data = malloc(FS_FORWARD_MAX);
	struct treq *w, *r, *after;
	bool fits;
	ssize_t n;

	ASSERT_NE(NULL, data);
	for (size_t i = 0; i < FS_FORWARD_MAX; i++)
		data[i] = (uint8_t)(i * 7);
	fake_connect(_metadata, self, NO_TIMEOUT_MS);
	/* The backend asks for the same send buffer: same clamp. */
	fits = can_send_max(self->cfd);
	w = treq_new(FUSE_WRITE, 2, 90, &wi, sizeof(wi), data, dlen,
		     ROOM_DEFAULT);
	ASSERT_NE(NULL, w);
	ASSERT_EQ(FS_FORWARD_MAX, w->req.len);
	ASSERT_EQ(0, self->b->ops->forward(self->b, &w->req));
	if (fits) {
		fake_recv(_metadata, self, &n);
		ASSERT_EQ((ssize_t)FS_FORWARD_MAX, n);
		EXPECT_EQ(0, memcmp(self->buf, w->msg, n));
		ASSERT_EQ(0, send_reply(self->cfd, 90, 0, NULL, 0));
		ASSERT_TRUE(wait_done(1, WAIT_MS));
		EXPECT_EQ((ssize_t)REPLY_HDR, w->len);
	} else {
		/* Too big for the socket: that request alone fails. */
		ASSERT_TRUE(wait_done(1, WAIT_MS));
		EXPECT_EQ(-EIO, w->len);
	}

	/* A reply of FS_FORWARD_MAX bytes, exactly the guest's room. */
	r = forward_room(self, FUSE_READ, 91, FS_FORWARD_MAX);
	ASSERT_NE(NULL, r);
	ASSERT_EQ(91, fake_recv(_metadata, self, NULL).unique);
	if (fits) {
		ASSERT_EQ(0, send_reply(self->cfd, 91, 0, data,
					FS_FORWARD_MAX - REPLY_HDR));
		ASSERT_TRUE(wait_done(2, WAIT_MS));
		ASSERT_EQ((ssize_t)FS_FORWARD_MAX, r->len);
		EXPECT_EQ(0, memcmp(r->reply + REPLY_HDR, data,
				    FS_FORWARD_MAX - REPLY_HDR));
	} else {
		ASSERT_EQ(0, send_reply(self->cfd, 91, 0, data, 1000));
		ASSERT_TRUE(wait_done(2, WAIT_MS));
	}
	/* One byte more than FS_FORWARD_MAX is never a reply. */
	after = forward_room(self, FUSE_READ, 92, FS_FORWARD_MAX);
	ASSERT_NE(NULL, after);
	ASSERT_EQ(92, fake_recv(_metadata, self, NULL).unique);
	if (fits) {
		ASSERT_EQ(0, send_reply(self->cfd, 92, 0, data,
					FS_FORWARD_MAX + 1 - REPLY_HDR));
		sleep_ms(QUIET_MS);
		EXPECT_EQ(0, done_of(after));
	}
	ASSERT_EQ(0, send_reply(self->cfd, 92, 0, NULL, 0));
	ASSERT_TRUE(wait_done(3, WAIT_MS));
	EXPECT_EQ((ssize_t)REPLY_HDR, after->len);
	treq_free(w);
	treq_free(r);
	treq_free(after);
	free(data);
}

/* ---- the example server ----------------------------------------------- */

/* build/selftests/fs_virtual -> build/tools/fs-example-server */
static void server_path(char *out, size_t size)
{
	const char *env = getenv("KILN_FS_EXAMPLE_SERVER");
	char self[PATH_MAX];
	ssize_t n;
	char *s;

	if (env) {
		snprintf(out, size, "%s", env);
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	for (int i = 0; i < 2; i++) {
		s = strrchr(self, '/');
		if (s)
			*s = '\0';
	}
	if (snprintf(out, size, "%s/tools/fs-example-server", self) >=
	    (int)size)
		out[0] = '\0';
}

FIXTURE(example)
{
	char dir[64];
	char path[96];
	pid_t pid;
	struct fs_backend *b;
	uint64_t unique;
};

FIXTURE_SETUP(example)
{
	strcpy(self->dir, "/tmp/kiln-vfs-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->path, sizeof(self->path), "%s/sock", self->dir);
	self->unique = 1;
}

FIXTURE_TEARDOWN(example)
{
	fs_backend__destroy(self->b);
	if (self->pid > 0) {
		kill(self->pid, SIGTERM);
		waitpid(self->pid, NULL, 0);
	}
	if (self->dir[0])
		nftw(self->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Starts the server with extra options (NULL-terminated); waits for it. */
static void start_server(struct __test_metadata *_metadata,
			 FIXTURE_DATA(example) * self, const char *opt1,
			 const char *val1)
{
	char bin[PATH_MAX];
	struct stat st;
	int i;

	server_path(bin, sizeof(bin));
	ASSERT_EQ(0, access(bin, X_OK))
	TH_LOG("%s: %s (make selftests builds it)", bin, strerror(errno));
	self->pid = fork();
	ASSERT_LE(0, self->pid);
	if (self->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (opt1 && val1)
			execl(bin, "fs-example-server", opt1, val1, self->path,
			      NULL);
		else if (opt1)
			execl(bin, "fs-example-server", opt1, self->path, NULL);
		else
			execl(bin, "fs-example-server", self->path, NULL);
		_exit(127);
	}
	/* The path appears once the server listens. */
	for (i = 0; i < 500 && stat(self->path, &st); i++)
		sleep_ms(10);
	ASSERT_EQ(0, stat(self->path, &st))
	TH_LOG("the server does not listen on %s", self->path);
}

static void example_connect(struct __test_metadata *_metadata,
			    FIXTURE_DATA(example) * self,
			    unsigned int timeout_ms)
{
	struct virtual_fs_params p = { .name = "virtual:/srv",
				       .socket = self->path,
				       .timeout_ms = timeout_ms };

	ASSERT_EQ(0, virtual_fs__create(&self->b, &p));
}

/*
 * One request through the backend, waited for: a copy of the reply is in
 * the returned treq (caller frees), NULL reply with the error otherwise.
 */
static struct treq *call(struct __test_metadata *_metadata,
			 FIXTURE_DATA(example) * self, uint32_t opcode,
			 uint64_t nodeid, const void *arg, size_t alen,
			 const void *data, size_t dlen, size_t room)
{
	unsigned int before;
	struct treq *t;

	t = treq_new(opcode, nodeid, self->unique++, arg, alen, data, dlen,
		     room ? room : ROOM_DEFAULT);
	if (!t)
		return NULL;
	pthread_mutex_lock(&done_lock);
	before = nr_done;
	pthread_mutex_unlock(&done_lock);
	if (self->b->ops->forward(self->b, &t->req) ||
	    !wait_done(before + 1, 2 * WAIT_MS) || done_of(t) != 1) {
		treq_free(t);
		return NULL;
	}
	return t;
}

/* A call that must succeed: the payload is copied to out (out_len). */
static int call_ok(struct __test_metadata *_metadata,
		   FIXTURE_DATA(example) * self, uint32_t opcode,
		   uint64_t nodeid, const void *arg, size_t alen,
		   const void *data, size_t dlen, void *out, size_t out_len)
{
	struct treq *t = call(_metadata, self, opcode, nodeid, arg, alen, data,
			      dlen, out_len + REPLY_HDR);
	struct fuse_out_header oh;
	int ret;

	if (!t)
		return -ETIMEDOUT;
	if (t->len < (ssize_t)REPLY_HDR) {
		ret = t->len < 0 ? (int)t->len : -EPROTO;
		treq_free(t);
		return ret;
	}
	oh = reply_hdr(t);
	ret = oh.error;
	if (!ret) {
		size_t got = (size_t)t->len - REPLY_HDR;

		if (out) {
			memset(out, 0, out_len);
			memcpy(out, t->reply + REPLY_HDR,
			       got < out_len ? got : out_len);
		}
		ret = (int)got;
	}
	treq_free(t);
	return ret;
}

static int do_init(struct __test_metadata *_metadata,
		   FIXTURE_DATA(example) * self, struct fuse_init_out *out)
{
	struct fuse_init_in in = { .major = FUSE_KERNEL_VERSION,
				   .minor = FUSE_KERNEL_MINOR_VERSION,
				   .max_readahead = 65536 };

	return call_ok(_metadata, self, FUSE_INIT, 0, &in, sizeof(in), NULL, 0,
		       out, sizeof(*out));
}

static int lookup(struct __test_metadata *_metadata,
		  FIXTURE_DATA(example) * self, uint64_t parent,
		  const char *name, struct fuse_entry_out *e)
{
	return call_ok(_metadata, self, FUSE_LOOKUP, parent, name,
		       strlen(name) + 1, NULL, 0, e, sizeof(*e));
}

static int read_file(struct __test_metadata *_metadata,
		     FIXTURE_DATA(example) * self, uint64_t nodeid,
		     uint64_t offset, char *buf, uint32_t size)
{
	struct fuse_read_in ri = { .offset = offset, .size = size };

	return call_ok(_metadata, self, FUSE_READ, nodeid, &ri, sizeof(ri),
		       NULL, 0, buf, size);
}

TEST_F(example, init_lookup_read)
{
	struct fuse_open_in oi = { .flags = O_RDONLY };
	struct fuse_getattr_in gi = { 0 };
	struct fuse_init_out init;
	struct fuse_entry_out e;
	struct fuse_open_out oo;
	struct fuse_attr_out ao;
	char buf[256];

	start_server(_metadata, self, NULL, NULL);
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_EQ((int)sizeof(init), do_init(_metadata, self, &init));
	EXPECT_EQ(FUSE_KERNEL_VERSION, init.major);
	EXPECT_EQ(FUSE_KERNEL_MINOR_VERSION, init.minor);
	EXPECT_EQ(128 * 1024, init.max_write);

	ASSERT_EQ((int)sizeof(e),
		  lookup(_metadata, self, FUSE_ROOT_ID, "hello.txt", &e));
	EXPECT_NE(0, e.nodeid);
	EXPECT_EQ(strlen(HELLO), e.attr.size);
	EXPECT_TRUE(S_ISREG(e.attr.mode));
	ASSERT_EQ((int)sizeof(oo),
		  call_ok(_metadata, self, FUSE_OPEN, e.nodeid, &oi, sizeof(oi),
			  NULL, 0, &oo, sizeof(oo)));
	ASSERT_EQ((int)strlen(HELLO),
		  read_file(_metadata, self, e.nodeid, 0, buf, sizeof(buf)));
	buf[strlen(HELLO)] = '\0';
	EXPECT_STREQ(HELLO, buf);
	/* From an offset, a short size, past the end. */
	ASSERT_EQ(4, read_file(_metadata, self, e.nodeid, 6, buf, 4));
	EXPECT_EQ(0, memcmp(buf, "from", 4));
	EXPECT_EQ(0, read_file(_metadata, self, e.nodeid, 1000, buf, 16));

	ASSERT_EQ((int)sizeof(ao),
		  call_ok(_metadata, self, FUSE_GETATTR, FUSE_ROOT_ID, &gi,
			  sizeof(gi), NULL, 0, &ao, sizeof(ao)));
	EXPECT_TRUE(S_ISDIR(ao.attr.mode));
	EXPECT_EQ(-ENOENT,
		  lookup(_metadata, self, FUSE_ROOT_ID, "missing", &e));
	EXPECT_EQ(-ENOENT, lookup(_metadata, self, 999, "x", &e));
}

/* The names in a READDIR reply, "name," each. */
static void dirent_names(const uint8_t *buf, int len, char *out, size_t size)
{
	struct fuse_dirent d;
	int off = 0;

	out[0] = '\0';
	while (len - off >= (int)FUSE_NAME_OFFSET) {
		memcpy(&d, buf + off, FUSE_NAME_OFFSET);
		if (off + (int)FUSE_DIRENT_SIZE(&d) > len)
			break;
		snprintf(out + strlen(out), size - strlen(out), "%.*s,",
			 (int)d.namelen,
			 (const char *)buf + off + FUSE_NAME_OFFSET);
		off += FUSE_DIRENT_SIZE(&d);
	}
}

/*
 * --stream: the same tree over SOCK_STREAM, found by the backend at
 * connect; a 128 KiB write and read go through in parts. Killed and
 * started again: the next request reaches the new process, which learns
 * the session from the replayed FUSE_INIT.
 */
TEST_F(example, stream_mode_and_restart)
{
	enum { SIZE = 128 * 1024 };
	struct fuse_create_in ci = { .flags = O_RDWR, .mode = S_IFREG | 0644 };
	struct fuse_write_in wi = { .size = SIZE };
	struct {
		struct fuse_entry_out e;
		struct fuse_open_out o;
	} co;
	struct fuse_entry_out e;
	uint8_t arg[sizeof(ci) + 8];
	char *data = malloc(SIZE), *back = malloc(SIZE);
	char buf[256];

	ASSERT_NE(NULL, data);
	ASSERT_NE(NULL, back);
	for (int i = 0; i < SIZE; i++)
		data[i] = (char)('a' + i % 23);
	start_server(_metadata, self, "--stream", NULL);
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_LT(0, do_init(_metadata, self, NULL));
	ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "hello.txt", &e));
	ASSERT_EQ((int)strlen(HELLO),
		  read_file(_metadata, self, e.nodeid, 0, buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, HELLO, strlen(HELLO)));
	memcpy(arg, &ci, sizeof(ci));
	memcpy(arg + sizeof(ci), "big", 4);
	ASSERT_EQ((int)sizeof(co),
		  call_ok(_metadata, self, FUSE_CREATE, FUSE_ROOT_ID, arg,
			  sizeof(ci) + 4, NULL, 0, &co, sizeof(co)));
	ASSERT_EQ((int)sizeof(struct fuse_write_out),
		  call_ok(_metadata, self, FUSE_WRITE, co.e.nodeid, &wi,
			  sizeof(wi), data, SIZE, buf,
			  sizeof(struct fuse_write_out)));
	ASSERT_EQ(SIZE, read_file(_metadata, self, co.e.nodeid, 0, back, SIZE));
	EXPECT_EQ(0, memcmp(data, back, SIZE));

	/* Killed: EIO while nothing listens; started again: served. */
	kill(self->pid, SIGKILL);
	waitpid(self->pid, NULL, 0);
	self->pid = 0;
	EXPECT_EQ(-EIO, lookup(_metadata, self, FUSE_ROOT_ID, "hello.txt", &e));
	/* start_server() waits for the path: not the dead server's. */
	unlink(self->path);
	start_server(_metadata, self, "--stream", NULL);
	sleep_ms(VIRTUAL_FS_RETRY_MS + 50);
	ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "hello.txt", &e));
	ASSERT_EQ((int)strlen(HELLO),
		  read_file(_metadata, self, e.nodeid, 0, buf, sizeof(buf)));
	free(data);
	free(back);
}

/* Documentation/virtual-fs.md, from the top of the tree or of the build. */
static FILE *open_doc(void)
{
	char self[PATH_MAX], path[PATH_MAX + 32];
	FILE *f = fopen("Documentation/virtual-fs.md", "r");
	ssize_t n;
	char *s;

	if (f)
		return f;
	/* build/selftests/fs_virtual -> the tree above build/ */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	for (int i = 0; i < 3; i++) {
		s = strrchr(self, '/');
		if (s)
			*s = '\0';
	}
	snprintf(path, sizeof(path), "%s/Documentation/virtual-fs.md", self);
	return fopen(path, "r");
}

/*
 * The Python stream server of Documentation/virtual-fs.md, as it stands:
 * the block after "<!-- stream-example -->" is run with python3 and
 * serves its tree through the backend (found to be a stream at connect),
 * then is killed and started again and serves the same node ids.
 */
TEST_F(example, doc_python_stream_server)
{
	static const char mark[] = "<!-- stream-example -->\n```python\n";
	struct fuse_read_in ri = { .size = 4096 };
	char *doc = calloc(1, 1 << 20), *code, *end, script[160], buf[256];
	struct fuse_entry_out e, a;
	size_t n;
	FILE *f;

	if (access("/usr/bin/python3", X_OK))
		SKIP(return, "no /usr/bin/python3 to run the example");
	ASSERT_NE(NULL, doc);
	f = open_doc();
	ASSERT_NE(NULL, f) TH_LOG("Documentation/virtual-fs.md not found");
	n = fread(doc, 1, (1 << 20) - 1, f);
	fclose(f);
	doc[n] = '\0';
	code = strstr(doc, mark);
	ASSERT_NE(NULL, code) TH_LOG("no stream-example block");
	code += strlen(mark);
	end = strstr(code, "\n```");
	ASSERT_NE(NULL, end);
	end[1] = '\0';
	snprintf(script, sizeof(script), "%s/serve.py", self->dir);
	f = fopen(script, "w");
	ASSERT_NE(NULL, f);
	fputs(code, f);
	ASSERT_EQ(0, fclose(f));
	free(doc);

	for (int round = 0; round < 2; round++) {
		self->pid = fork();
		ASSERT_LE(0, self->pid);
		if (self->pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			execl("/usr/bin/python3", "python3", script, self->path,
			      NULL);
			_exit(127);
		}
		for (int i = 0; i < 500 && access(self->path, F_OK); i++)
			sleep_ms(10);
		ASSERT_EQ(0, access(self->path, F_OK))
		TH_LOG("the example does not listen");
		if (!round) {
			example_connect(_metadata, self, NO_TIMEOUT_MS);
			ASSERT_LT(0, do_init(_metadata, self, NULL));
		} else {
			sleep_ms(VIRTUAL_FS_RETRY_MS + 50);
		}
		ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "hello.txt",
				    &e));
		ASSERT_EQ(18, read_file(_metadata, self, e.nodeid, 0, buf,
					sizeof(buf)));
		EXPECT_EQ(0, memcmp(buf, "hello from python\n", 18));
		ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "dir", &e));
		ASSERT_LT(0, lookup(_metadata, self, e.nodeid, "a.txt", &a));
		ASSERT_LT(0,
			  call_ok(_metadata, self, FUSE_READDIR, FUSE_ROOT_ID,
				  &ri, sizeof(ri), NULL, 0, buf, sizeof(buf)));
		EXPECT_TRUE(memmem(buf, sizeof(buf), "hello.txt", 9));
		EXPECT_TRUE(memmem(buf, sizeof(buf), "dir", 3));
		/* Killed: EIO while its socket file stays dead. */
		kill(self->pid, SIGKILL);
		waitpid(self->pid, NULL, 0);
		self->pid = 0;
		EXPECT_EQ(-EIO, lookup(_metadata, self, FUSE_ROOT_ID,
				       "hello.txt", &e));
		unlink(self->path);
	}
}

TEST_F(example, readdir_readlink_subdir)
{
	struct fuse_open_in oi = { 0 };
	struct fuse_read_in ri = { .size = 4096 };
	struct fuse_entry_out e, dir;
	struct fuse_open_out oo;
	uint8_t dents[4096];
	char names[512], buf[64];
	int n;

	start_server(_metadata, self, NULL, NULL);
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_LT(0, do_init(_metadata, self, NULL));
	ASSERT_EQ((int)sizeof(oo),
		  call_ok(_metadata, self, FUSE_OPENDIR, FUSE_ROOT_ID, &oi,
			  sizeof(oi), NULL, 0, &oo, sizeof(oo)));
	n = call_ok(_metadata, self, FUSE_READDIR, FUSE_ROOT_ID, &ri,
		    sizeof(ri), NULL, 0, dents, sizeof(dents));
	ASSERT_LT(0, n);
	dirent_names(dents, n, names, sizeof(names));
	EXPECT_STREQ(".,..,hello.txt,dir,link,", names);

	/* A room for one entry at a time still lists them all. */
	names[0] = '\0';
	for (int i = 0; i < 10; i++) {
		struct fuse_dirent d;
		char one[64];

		ri.size = 40;
		n = call_ok(_metadata, self, FUSE_READDIR, FUSE_ROOT_ID, &ri,
			    sizeof(ri), NULL, 0, dents, sizeof(dents));
		ASSERT_LE(0, n);
		if (!n)
			break;
		dirent_names(dents, n, one, sizeof(one));
		strcat(names, one);
		memcpy(&d, dents, FUSE_NAME_OFFSET);
		ri.offset = d.off;
	}
	EXPECT_STREQ(".,..,hello.txt,dir,link,", names);

	ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "link", &e));
	EXPECT_TRUE(S_ISLNK(e.attr.mode));
	n = call_ok(_metadata, self, FUSE_READLINK, e.nodeid, NULL, 0, NULL, 0,
		    buf, sizeof(buf));
	ASSERT_EQ((int)strlen("hello.txt"), n);
	EXPECT_EQ(0, memcmp(buf, "hello.txt", n));

	ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "dir", &dir));
	EXPECT_TRUE(S_ISDIR(dir.attr.mode));
	ASSERT_LT(0, lookup(_metadata, self, dir.nodeid, "b.txt", &e));
	ASSERT_EQ(2, read_file(_metadata, self, e.nodeid, 0, buf, 64));
	EXPECT_EQ(0, memcmp(buf, "b\n", 2));
}

TEST_F(example, create_write_truncate_remove)
{
	static const char text[] = "written by the guest";
	struct {
		struct fuse_create_in in;
		char name[16];
	} ci = { { .flags = O_CREAT | O_RDWR, .mode = S_IFREG | 0644 },
		 "new.txt" };
	struct {
		struct fuse_mkdir_in in;
		char name[8];
	} mi = { { .mode = 0755 }, "sub" };
	struct {
		struct fuse_entry_out e;
		struct fuse_open_out o;
	} co;
	struct fuse_write_in wi = { .offset = 0, .size = sizeof(text) - 1 };
	struct fuse_setattr_in si = { .valid = FATTR_SIZE, .size = 7 };
	struct fuse_getattr_in gi = { 0 };
	struct fuse_write_out wo;
	struct fuse_attr_out ao;
	struct fuse_statfs_out so;
	struct fuse_entry_out e;
	char buf[64];

	start_server(_metadata, self, NULL, NULL);
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_LT(0, do_init(_metadata, self, NULL));
	ASSERT_EQ((int)sizeof(co),
		  call_ok(_metadata, self, FUSE_CREATE, FUSE_ROOT_ID, &ci,
			  sizeof(ci.in) + strlen(ci.name) + 1, NULL, 0, &co,
			  sizeof(co)));
	EXPECT_TRUE(S_ISREG(co.e.attr.mode));
	EXPECT_EQ(1000, co.e.attr.uid);
	ASSERT_EQ((int)sizeof(wo),
		  call_ok(_metadata, self, FUSE_WRITE, co.e.nodeid, &wi,
			  sizeof(wi), text, wi.size, &wo, sizeof(wo)));
	EXPECT_EQ(wi.size, wo.size);
	ASSERT_EQ((int)wi.size,
		  read_file(_metadata, self, co.e.nodeid, 0, buf, 64));
	EXPECT_EQ(0, memcmp(buf, text, wi.size));
	/* Creating it again exclusively fails. */
	ci.in.flags |= O_EXCL;
	EXPECT_EQ(-EEXIST, call_ok(_metadata, self, FUSE_CREATE, FUSE_ROOT_ID,
				   &ci, sizeof(ci.in) + strlen(ci.name) + 1,
				   NULL, 0, &co, sizeof(co)));

	ASSERT_EQ((int)sizeof(ao),
		  call_ok(_metadata, self, FUSE_SETATTR, co.e.nodeid, &si,
			  sizeof(si), NULL, 0, &ao, sizeof(ao)));
	EXPECT_EQ(7, ao.attr.size);
	ASSERT_EQ((int)sizeof(ao),
		  call_ok(_metadata, self, FUSE_GETATTR, co.e.nodeid, &gi,
			  sizeof(gi), NULL, 0, &ao, sizeof(ao)));
	EXPECT_EQ(7, ao.attr.size);
	ASSERT_EQ(7, read_file(_metadata, self, co.e.nodeid, 0, buf, 64));
	EXPECT_EQ(0, memcmp(buf, "written", 7));

	ASSERT_EQ((int)sizeof(e),
		  call_ok(_metadata, self, FUSE_MKDIR, FUSE_ROOT_ID, &mi,
			  sizeof(mi.in) + strlen(mi.name) + 1, NULL, 0, &e,
			  sizeof(e)));
	EXPECT_TRUE(S_ISDIR(e.attr.mode));
	ASSERT_EQ((int)sizeof(so),
		  call_ok(_metadata, self, FUSE_STATFS, FUSE_ROOT_ID, NULL, 0,
			  NULL, 0, &so, sizeof(so)));
	EXPECT_EQ(4096, so.st.bsize);
	EXPECT_GT(so.st.blocks, so.st.bfree - 1);

	ASSERT_EQ(0, call_ok(_metadata, self, FUSE_UNLINK, FUSE_ROOT_ID,
			     "new.txt", 8, NULL, 0, NULL, 0));
	EXPECT_EQ(-ENOENT,
		  lookup(_metadata, self, FUSE_ROOT_ID, "new.txt", &e));
	EXPECT_EQ(-EISDIR, call_ok(_metadata, self, FUSE_UNLINK, FUSE_ROOT_ID,
				   "sub", 4, NULL, 0, NULL, 0));
	EXPECT_EQ(0, call_ok(_metadata, self, FUSE_RMDIR, FUSE_ROOT_ID, "sub",
			     4, NULL, 0, NULL, 0));
	/* A name with a slash is refused. */
	EXPECT_EQ(-EINVAL, call_ok(_metadata, self, FUSE_UNLINK, FUSE_ROOT_ID,
				   "dir/a.txt", 10, NULL, 0, NULL, 0));
}

/* What the conformance cases (posix-conform) need of the example server. */
TEST_F(example, special_nodes_setgid_dirs_long_names)
{
	struct {
		struct fuse_mknod_in in;
		char name[8];
	} ni = { { .mode = S_IFIFO | 0640 }, "fifo" };
	struct {
		struct fuse_mkdir_in in;
		char name[8];
	} mi = { { .mode = 02775 }, "sgid" };
	struct fuse_setattr_in si = { .valid = FATTR_GID, .gid = 4000 };
	struct fuse_attr_out ao;
	struct fuse_entry_out e, d;
	char longname[NAME_MAX + 2];

	start_server(_metadata, self, NULL, NULL);
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_LT(0, do_init(_metadata, self, NULL));
	/* FIFOs, sockets and devices are made; a device keeps its rdev. */
	ASSERT_EQ((int)sizeof(e),
		  call_ok(_metadata, self, FUSE_MKNOD, FUSE_ROOT_ID, &ni,
			  sizeof(ni.in) + strlen(ni.name) + 1, NULL, 0, &e,
			  sizeof(e)));
	EXPECT_EQ(S_IFIFO | 0640U, e.attr.mode);
	EXPECT_EQ(0U, e.attr.rdev);
	ni.in = (struct fuse_mknod_in){ .mode = S_IFCHR | 0620,
					.rdev = 0x10300801 };
	strcpy(ni.name, "chr");
	ASSERT_EQ((int)sizeof(e),
		  call_ok(_metadata, self, FUSE_MKNOD, FUSE_ROOT_ID, &ni,
			  sizeof(ni.in) + strlen(ni.name) + 1, NULL, 0, &e,
			  sizeof(e)));
	EXPECT_EQ(S_IFCHR | 0620U, e.attr.mode);
	EXPECT_EQ(0x10300801U, e.attr.rdev);
	ni.in = (struct fuse_mknod_in){ .mode = S_IFSOCK | 0600 };
	strcpy(ni.name, "sock");
	ASSERT_EQ((int)sizeof(e),
		  call_ok(_metadata, self, FUSE_MKNOD, FUSE_ROOT_ID, &ni,
			  sizeof(ni.in) + strlen(ni.name) + 1, NULL, 0, &e,
			  sizeof(e)));
	EXPECT_EQ(S_IFSOCK | 0600U, e.attr.mode);
	ni.in = (struct fuse_mknod_in){ .mode = S_IFDIR | 0755 };
	strcpy(ni.name, "dir");
	EXPECT_EQ(-EINVAL, call_ok(_metadata, self, FUSE_MKNOD, FUSE_ROOT_ID,
				   &ni, sizeof(ni.in) + strlen(ni.name) + 1,
				   NULL, 0, &e, sizeof(e)));

	/* Under a set-group-ID directory: its group, and for a directory
	 * the bit too. */
	ASSERT_EQ((int)sizeof(d),
		  call_ok(_metadata, self, FUSE_MKDIR, FUSE_ROOT_ID, &mi,
			  sizeof(mi.in) + strlen(mi.name) + 1, NULL, 0, &d,
			  sizeof(d)));
	ASSERT_EQ((int)sizeof(ao),
		  call_ok(_metadata, self, FUSE_SETATTR, d.nodeid, &si,
			  sizeof(si), NULL, 0, &ao, sizeof(ao)));
	EXPECT_EQ(4000U, ao.attr.gid);
	ni.in = (struct fuse_mknod_in){ .mode = S_IFREG | 0644 };
	strcpy(ni.name, "f");
	ASSERT_EQ((int)sizeof(e),
		  call_ok(_metadata, self, FUSE_MKNOD, d.nodeid, &ni,
			  sizeof(ni.in) + strlen(ni.name) + 1, NULL, 0, &e,
			  sizeof(e)));
	EXPECT_EQ(4000U, e.attr.gid);
	EXPECT_EQ(1000U, e.attr.uid);
	mi.in.mode = 0755;
	strcpy(mi.name, "sub");
	ASSERT_EQ((int)sizeof(e),
		  call_ok(_metadata, self, FUSE_MKDIR, d.nodeid, &mi,
			  sizeof(mi.in) + strlen(mi.name) + 1, NULL, 0, &e,
			  sizeof(e)));
	EXPECT_EQ(S_IFDIR | 02755U, e.attr.mode);
	EXPECT_EQ(4000U, e.attr.gid);

	/* A name longer than NAME_MAX: ENAMETOOLONG, as Linux says it. */
	memset(longname, 'n', NAME_MAX + 1);
	longname[NAME_MAX + 1] = '\0';
	EXPECT_EQ(-ENAMETOOLONG,
		  lookup(_metadata, self, FUSE_ROOT_ID, longname, &e));
}

TEST_F(example, delay_turns_into_eio)
{
	struct fuse_init_in in = { .major = FUSE_KERNEL_VERSION,
				   .minor = FUSE_KERNEL_MINOR_VERSION };
	struct treq *t;
	uint64_t start, took;

	/*
	 * The server answers after a day: the EIO can only be the backend's
	 * timeout, however slow the machine (with a delay of a second, a
	 * relay thread kept off the CPU that long would see the answer and
	 * the deadline at once). A late answer dropped is
	 * fake.timeout_then_late_reply_dropped, where the test sends it.
	 */
	start_server(_metadata, self, "--delay-ms", NO_TIMEOUT);
	example_connect(_metadata, self, 150);
	start = ms_now();
	t = call(_metadata, self, FUSE_INIT, 0, &in, sizeof(in), NULL, 0, 0);
	took = ms_now() - start;
	ASSERT_NE(NULL, t);
	EXPECT_EQ(-EIO, t->len);
	EXPECT_LE(150, took);
	treq_free(t);
	pthread_mutex_lock(&done_lock);
	EXPECT_EQ(1, nr_done);
	pthread_mutex_unlock(&done_lock);
}

TEST_F(example, server_death_is_eio)
{
	struct fuse_entry_out e;
	int status;

	start_server(_metadata, self, "--die-after", "2");
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_LT(0, do_init(_metadata, self, NULL));
	ASSERT_LT(0, lookup(_metadata, self, FUSE_ROOT_ID, "hello.txt", &e));
	/*
	 * The third request kills it: EIO from the server's death, as the
	 * timeout is never reached (call() gives up first, and fails).
	 */
	EXPECT_EQ(-EIO, lookup(_metadata, self, FUSE_ROOT_ID, "dir", &e));
	ASSERT_EQ(self->pid, waitpid(self->pid, &status, 0));
	self->pid = 0;
	EXPECT_TRUE(WIFEXITED(status));
	EXPECT_EQ(-EIO, lookup(_metadata, self, FUSE_ROOT_ID, "dir", &e));
}

TEST_F(example, once_exits_after_its_connection)
{
	int status;

	start_server(_metadata, self, "--once", NULL);
	example_connect(_metadata, self, NO_TIMEOUT_MS);
	ASSERT_LT(0, do_init(_metadata, self, NULL));
	fs_backend__destroy(self->b);
	self->b = NULL;
	ASSERT_EQ(self->pid, waitpid(self->pid, &status, 0));
	self->pid = 0;
	EXPECT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
}

/* Requests no vmm would pass on: the server answers or ignores them. */
TEST_F(example, survives_malformed_requests)
{
	struct fuse_in_header h = { .unique = 7, .nodeid = FUSE_ROOT_ID };
	uint8_t pkt[256], reply[256];
	struct fuse_out_header oh;
	int fd, status;
	ssize_t n;

	start_server(_metadata, self, NULL, NULL);
	fd = connect_to(self->path);
	ASSERT_LE(0, fd);

	/* No header: ignored. */
	ASSERT_EQ(0, send_raw(fd, "xy", 2));
	EXPECT_GT(0, recv_within(fd, reply, sizeof(reply), QUIET_MS));
	/* A header whose len lies: EINVAL. */
	h.opcode = FUSE_GETATTR;
	h.len = 4000;
	ASSERT_EQ(0, send_raw(fd, &h, sizeof(h)));
	ASSERT_EQ((ssize_t)sizeof(oh),
		  recv_within(fd, &oh, sizeof(oh), WAIT_MS));
	EXPECT_EQ(-EINVAL, oh.error);
	EXPECT_EQ(7, oh.unique);

	/* A name without its NUL, a write longer than its data. */
	static const struct {
		uint32_t opcode;
		size_t alen;
	} bad[] = {
		{ FUSE_LOOKUP, 8 },   { FUSE_MKDIR, 12 },  { FUSE_CREATE, 20 },
		{ FUSE_WRITE, 44 },   { FUSE_READ, 8 },	   { FUSE_SETATTR, 4 },
		{ FUSE_RENAME, 11 },  { FUSE_SYMLINK, 5 }, { FUSE_INIT, 4 },
		{ FUSE_READDIR, 39 },
	};
	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		h.opcode = bad[i].opcode;
		h.len = (uint32_t)(sizeof(h) + bad[i].alen);
		h.unique = 100 + i;
		memset(pkt, 'A', sizeof(pkt));
		memcpy(pkt, &h, sizeof(h));
		if (h.opcode == FUSE_WRITE) {
			struct fuse_write_in wi = { .size = 1 << 20 };

			memcpy(pkt + sizeof(h), &wi, sizeof(wi));
		}
		ASSERT_EQ(0, send_raw(fd, pkt, h.len));
		n = recv_within(fd, reply, sizeof(reply), WAIT_MS);
		ASSERT_EQ((ssize_t)sizeof(oh), n) TH_LOG("opcode %u", h.opcode);
		memcpy(&oh, reply, sizeof(oh));
		EXPECT_EQ(h.unique, oh.unique);
		EXPECT_GT(0, oh.error) TH_LOG("opcode %u", h.opcode);
	}
	/* A batch forget that claims more than it holds; no reply. */
	{
		struct fuse_batch_forget_in bf = { .count = 1000000 };

		h.opcode = FUSE_BATCH_FORGET;
		h.len = sizeof(h) + sizeof(bf) + 4;
		memcpy(pkt, &h, sizeof(h));
		memcpy(pkt + sizeof(h), &bf, sizeof(bf));
		ASSERT_EQ(0, send_raw(fd, pkt, h.len));
	}
	/* Still serving. */
	h.opcode = FUSE_GETATTR;
	h.len = sizeof(h);
	h.unique = 999;
	ASSERT_EQ(0, send_raw(fd, &h, sizeof(h)));
	n = recv_within(fd, reply, sizeof(reply), WAIT_MS);
	ASSERT_EQ((ssize_t)(sizeof(oh) + sizeof(struct fuse_attr_out)), n);
	memcpy(&oh, reply, sizeof(oh));
	EXPECT_EQ(999, oh.unique);
	EXPECT_EQ(0, oh.error);
	EXPECT_EQ(0, waitpid(self->pid, &status, WNOHANG));
	close(fd);
}

TEST_HARNESS_MAIN
