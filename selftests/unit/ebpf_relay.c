// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel relay (ebpf/relay.bpf.c, its loader, net/krelay.c) on
 * loopback TCP, without any VM or proxy: each test unshares a netns of
 * its own and makes two connections, the "guest's" (the test holds
 * guest, the relay its accepted end a) and the "upstream's" (the relay
 * holds b, the test its accepted end up). The relay pairs a and b, and
 * the test drives krelay's events with its own epoll loop, as the proxy
 * does. Root only (loading BPF: a skip otherwise, saying so); a
 * program that does not load as root fails the test with libbpf's
 * reason.
 *
 * Negative checks ("nothing arrives") wait a fixed QUIET_MS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ebpf/relay.h"
#include "net/krelay.h"
#include "selftests/kselftest.h"
#include "selftests/vmnet.h"

#define TIMEOUT_MS 5000 /* something that should happen, happens */
#define QUIET_MS   300	/* something that should not, has not */
#define BIG_BYTES  (4U << 20)
#define MANY_FLOWS 1000
#define MANY_FDS   (4 * MANY_FLOWS + 64)
#define MAX_PAIRS  1024

struct pair {
	int guest, a; /* the guest's connection: its end, the relay's */
	int b, up;    /* upstream's: the relay's end, upstream's */
	struct krelay_flow k;
	bool started, done;
	int err; /* krelay's last error */
};

static bool be_root(struct __test_metadata *_metadata)
{
	if (geteuid()) {
		SKIP(return false, "not root: loading BPF and network "
				   "namespaces need CAP_BPF, CAP_NET_ADMIN "
				   "and CAP_SYS_ADMIN");
	}
	return true;
}

static struct relay_prog *load(struct __test_metadata *_metadata,
			       unsigned int pairs)
{
	struct relay_prog *r = NULL;
	char err[256] = "";

	ASSERT_EQ(0, relay_prog__create(&r, pairs, err, sizeof(err)))
	TH_LOG("the relay program does not load: %s", err);
	return r;
}

/* A listener on 127.0.0.1, any port. */
static int listener(struct __test_metadata *_metadata, struct sockaddr_in *at)
{
	socklen_t len = sizeof(*at);
	int fd;

	*at = (struct sockaddr_in){ .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bind(fd, (struct sockaddr *)at, sizeof(*at)));
	ASSERT_EQ(0, listen(fd, 4096));
	ASSERT_EQ(0, getsockname(fd, (struct sockaddr *)at, &len));
	return fd;
}

/* A connection to lsn: *c the connecting end, *s the accepted one. */
static void connection(struct __test_metadata *_metadata, int lsn,
		       const struct sockaddr_in *at, int *c, int *s)
{
	*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, *c);
	ASSERT_EQ(0, connect(*c, (const struct sockaddr *)at, sizeof(*at)))
	TH_LOG("connect: %s", strerror(errno));
	*s = accept4(lsn, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	ASSERT_LE(0, *s);
}

static void pair_open(struct __test_metadata *_metadata, struct pair *p,
		      int lsn, const struct sockaddr_in *at)
{
	int up_side;

	*p = (struct pair){ .guest = -1, .a = -1, .b = -1, .up = -1 };
	connection(_metadata, lsn, at, &p->guest, &p->a);
	/* The relay's upstream end connects; upstream accepts. */
	connection(_metadata, lsn, at, &p->b, &up_side);
	p->up = up_side;
	ASSERT_EQ(0, fcntl(p->b, F_SETFL, O_NONBLOCK));
}

static void pair_start_ways(struct __test_metadata *_metadata, struct pair *p,
			    struct relay_prog *r, enum relay_ways ways)
{
	char err[256] = "";

	ASSERT_EQ(0, krelay__start(&p->k, p->a, p->b, ways));
	ASSERT_EQ(0, relay_prog__pair(r, p->a, p->b, ways, err, sizeof(err)))
	TH_LOG("%s", err);
	p->started = true;
}

static void pair_start(struct __test_metadata *_metadata, struct pair *p,
		       struct relay_prog *r)
{
	pair_start_ways(_metadata, p, r, RELAY_BOTH);
}

static void pair_close(struct pair *p, struct relay_prog *r)
{
	if (p->started && r)
		krelay__stop(&p->k, r);
	if (p->guest >= 0)
		close(p->guest);
	if (p->a >= 0)
		close(p->a);
	if (p->b >= 0)
		close(p->b);
	if (p->up >= 0)
		close(p->up);
	*p = (struct pair){ .guest = -1, .a = -1, .b = -1, .up = -1 };
}

/*
 * The owner's part for every pair (epoll on a and b with krelay's
 * interest), until each is done or failed, or for ms at most.
 */
static void pump(struct __test_metadata *_metadata, struct pair *ps,
		 unsigned int n, int ms)
{
	struct epoll_event ev[64];
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct pollfd none = { .fd = -1 };
	int waited = 0;

	ASSERT_LE(0, ep);
	for (unsigned int i = 0; i < n; i++)
		for (int s = 0; s < KRELAY_SIDES && !ps[i].done; s++) {
			struct epoll_event e = {
				.events = krelay__interest(&ps[i].k, s),
				.data.u64 = (uint64_t)i << 1 | (uint64_t)s,
			};

			ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, ps[i].k.fd[s],
					       &e));
		}
	while (waited < ms) {
		bool pending = false, busy = false;
		int nr = epoll_wait(ep, ev, 64, 1);

		for (int j = 0; j < nr; j++) {
			struct pair *p = &ps[ev[j].data.u64 >> 1];
			int s = (int)(ev[j].data.u64 & 1), ret;
			struct epoll_event e = { .data = ev[j].data };

			if (p->done)
				continue;
			ret = krelay__event(&p->k, s, ev[j].events);
			if (ret) {
				p->done = true;
				p->err = ret < 0 ? ret : 0;
				continue;
			}
			e.events = krelay__interest(&p->k, s);
			epoll_ctl(ep, EPOLL_CTL_MOD, p->k.fd[s], &e);
		}
		for (unsigned int i = 0; i < n; i++) {
			int ret;

			if (ps[i].done)
				continue;
			busy = true;
			if (!krelay__pending(&ps[i].k))
				continue;
			pending = true;
			ret = krelay__retry(&ps[i].k);
			if (ret) {
				ps[i].done = true;
				ps[i].err = ret < 0 ? ret : 0;
			}
		}
		if (!busy)
			break;
		if (!nr && !pending)
			waited++;
	}
	poll(&none, 0, 0);
	close(ep);
}

/* Everything the peer sends until len bytes came (or EOF, or a timeout). */
static size_t read_all(int fd, void *buf, size_t len, int ms)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, ms) <= 0)
			break;
		n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
		if (n <= 0)
			break;
		got += n;
	}
	return got;
}

/* Whether fd's peer said FIN (a read of 0) within ms, nothing before. */
static bool reads_eof(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&pfd, 1, ms) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

/* Whether fd's peer reset it within ms (any bytes before it read). */
static bool reads_reset(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char buf[64];
	ssize_t n;

	do {
		if (poll(&pfd, 1, ms) != 1)
			return false;
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	} while (n > 0);
	return n < 0 && errno == ECONNRESET;
}

static bool quiet(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, QUIET_MS) == 0;
}

static void send_all(struct __test_metadata *_metadata, int fd, const void *buf,
		     size_t len)
{
	ASSERT_EQ((ssize_t)len, send(fd, buf, len, MSG_NOSIGNAL));
}

static void reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

FIXTURE(relay)
{
	struct relay_prog *r;
	int lsn;
	struct sockaddr_in at;
	struct pair p;
};

FIXTURE_SETUP(relay)
{
	self->lsn = -1;
	self->p = (struct pair){ .guest = -1, .a = -1, .b = -1, .up = -1 };
	if (!be_root(_metadata))
		return;
	vmnet__new_netns(_metadata);
	self->r = load(_metadata, MAX_PAIRS);
	self->lsn = listener(_metadata, &self->at);
	pair_open(_metadata, &self->p, self->lsn, &self->at);
}

FIXTURE_TEARDOWN(relay)
{
	pair_close(&self->p, self->r);
	if (self->lsn >= 0)
		close(self->lsn);
	relay_prog__destroy(self->r);
}

/* A line each way, and the map holds both sockets meanwhile. */
TEST_F(relay, bytes_both_ways)
{
	struct pair *p = &self->p;
	char buf[64] = "";

	pair_start(_metadata, p, self->r);
	EXPECT_EQ(2U, relay_prog__nr_socks(self->r));
	EXPECT_EQ(2U, relay_prog__nr_ways(self->r));
	send_all(_metadata, p->guest, "GET / HTTP/1.0\r\n\r\n", 18);
	ASSERT_EQ(18U, read_all(p->up, buf, 18, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "GET / HTTP/1.0\r\n\r\n", 18));
	send_all(_metadata, p->up, "HTTP/1.0 200 OK\r\n", 17);
	ASSERT_EQ(17U, read_all(p->guest, buf, 17, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "HTTP/1.0 200 OK\r\n", 17));
	/* The relay's ends had nothing to read themselves. */
	EXPECT_EQ(-1, recv(p->a, buf, sizeof(buf), MSG_DONTWAIT));
	EXPECT_EQ(-1, recv(p->b, buf, sizeof(buf), MSG_DONTWAIT));
}

/*
 * What each side sent before the pairing (the guest's request while
 * upstream connected, a server's banner) is relayed too.
 */
TEST_F(relay, bytes_sent_before_pairing)
{
	struct pair *p = &self->p;
	char buf[16] = "";

	send_all(_metadata, p->guest, "early", 5);
	send_all(_metadata, p->up, "banner", 6);
	usleep(50 * 1000); /* in their sockets' queues */
	pair_start(_metadata, p, self->r);
	ASSERT_EQ(5U, read_all(p->up, buf, 5, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "early", 5));
	ASSERT_EQ(6U, read_all(p->guest, buf, 6, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "banner", 6));
}

struct sender {
	int fd;
	size_t len;
	int err;
};

static void *send_big(void *arg)
{
	struct sender *s = arg;
	char *buf = malloc(s->len);
	size_t off = 0;
	ssize_t n;

	if (!buf) {
		s->err = ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < s->len; i++)
		buf[i] = (char)(i * 7 + i / 4096);
	while (off < s->len) {
		n = send(s->fd, buf + off, s->len - off, MSG_NOSIGNAL);
		if (n <= 0) {
			s->err = errno;
			break;
		}
		off += n;
	}
	free(buf);
	return NULL;
}

/*
 * Megabytes each way at once, byte for byte, then the guest's FIN after
 * its last byte and upstream's after its own: the flow is done, and its
 * counters are the bytes sent each way.
 */
TEST_F(relay, big_both_ways_then_fins_and_counters)
{
	struct pair *p = &self->p;
	struct sender out = { .fd = p->guest, .len = BIG_BYTES };
	struct sender in = { .fd = p->up, .len = BIG_BYTES };
	char *got_out = malloc(BIG_BYTES), *got_in = malloc(BIG_BYTES);
	uint64_t bytes[KRELAY_SIDES];
	pthread_t t1, t2;
	size_t n1, n2;

	ASSERT_NE(NULL, got_out);
	ASSERT_NE(NULL, got_in);
	pair_start(_metadata, p, self->r);
	ASSERT_EQ(0, pthread_create(&t1, NULL, send_big, &out));
	ASSERT_EQ(0, pthread_create(&t2, NULL, send_big, &in));
	n1 = read_all(p->up, got_out, BIG_BYTES, TIMEOUT_MS);
	n2 = read_all(p->guest, got_in, BIG_BYTES, TIMEOUT_MS);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	ASSERT_EQ(0, out.err);
	ASSERT_EQ(0, in.err);
	ASSERT_EQ(BIG_BYTES, n1);
	ASSERT_EQ(BIG_BYTES, n2);
	for (size_t i = 0; i < BIG_BYTES; i++) {
		ASSERT_EQ((char)(i * 7 + i / 4096), got_out[i])
		TH_LOG("guest to upstream: byte %zu", i);
		ASSERT_EQ((char)(i * 7 + i / 4096), got_in[i])
		TH_LOG("upstream to guest: byte %zu", i);
	}
	ASSERT_EQ(0, krelay__bytes(&p->k, bytes));
	EXPECT_EQ(BIG_BYTES, bytes[KRELAY_A]);
	EXPECT_EQ(BIG_BYTES, bytes[KRELAY_B]);

	ASSERT_EQ(0, shutdown(p->guest, SHUT_WR));
	pump(_metadata, p, 1, 200);
	EXPECT_TRUE(reads_eof(p->up, TIMEOUT_MS));
	EXPECT_FALSE(p->done);
	ASSERT_EQ(0, shutdown(p->up, SHUT_WR));
	pump(_metadata, p, 1, TIMEOUT_MS);
	EXPECT_TRUE(reads_eof(p->guest, TIMEOUT_MS));
	EXPECT_TRUE(p->done);
	EXPECT_EQ(0, p->err);
	/* The FINs are not bytes. */
	ASSERT_EQ(0, krelay__bytes(&p->k, bytes));
	EXPECT_EQ(BIG_BYTES, bytes[KRELAY_A]);
	EXPECT_EQ(BIG_BYTES, bytes[KRELAY_B]);
	free(got_out);
	free(got_in);
}

/*
 * The guest half-closes right after its last bytes: they arrive before
 * the FIN, and upstream may answer on the half-open flow.
 */
TEST_F(relay, guest_half_close)
{
	struct pair *p = &self->p;
	char *buf = malloc(BIG_BYTES), *got = malloc(BIG_BYTES);
	struct sender out = { .fd = p->guest, .len = BIG_BYTES };
	pthread_t t;

	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, got);
	pair_start(_metadata, p, self->r);
	ASSERT_EQ(0, pthread_create(&t, NULL, send_big, &out));
	pthread_join(t, NULL);
	ASSERT_EQ(0, out.err);
	ASSERT_EQ(0, shutdown(p->guest, SHUT_WR));
	/* The owner sees the FIN while bytes may still be on their way. */
	pump(_metadata, p, 1, 50);
	ASSERT_EQ(BIG_BYTES, read_all(p->up, got, BIG_BYTES, TIMEOUT_MS));
	pump(_metadata, p, 1, 200);
	EXPECT_TRUE(reads_eof(p->up, TIMEOUT_MS));
	send_all(_metadata, p->up, "reply", 5);
	ASSERT_EQ(5U, read_all(p->guest, buf, 5, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "reply", 5));
	EXPECT_FALSE(p->done);
	free(buf);
	free(got);
}

/* Upstream half-closes: the guest reads the bytes, then EOF, and goes on. */
TEST_F(relay, upstream_half_close)
{
	struct pair *p = &self->p;
	char buf[16] = "";

	pair_start(_metadata, p, self->r);
	send_all(_metadata, p->up, "bye", 3);
	ASSERT_EQ(0, shutdown(p->up, SHUT_WR));
	pump(_metadata, p, 1, 200);
	ASSERT_EQ(3U, read_all(p->guest, buf, 3, TIMEOUT_MS));
	EXPECT_TRUE(reads_eof(p->guest, TIMEOUT_MS));
	send_all(_metadata, p->guest, "more", 4);
	ASSERT_EQ(4U, read_all(p->up, buf, 4, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "more", 4));
	EXPECT_FALSE(p->done);
	ASSERT_EQ(0, shutdown(p->guest, SHUT_WR));
	pump(_metadata, p, 1, TIMEOUT_MS);
	EXPECT_TRUE(p->done);
	EXPECT_EQ(0, p->err);
	EXPECT_TRUE(reads_eof(p->up, TIMEOUT_MS));
}

/* Upstream resets: krelay says so; the owner's reset reaches the guest. */
TEST_F(relay, upstream_reset)
{
	struct pair *p = &self->p;

	pair_start(_metadata, p, self->r);
	reset(p->up);
	p->up = -1;
	pump(_metadata, p, 1, TIMEOUT_MS);
	ASSERT_TRUE(p->done);
	EXPECT_EQ(-ECONNRESET, p->err);
	krelay__stop(&p->k, self->r);
	p->started = false;
	reset(p->a);
	p->a = -1;
	EXPECT_TRUE(reads_reset(p->guest, TIMEOUT_MS));
}

/* The guest resets: the same the other way. */
TEST_F(relay, guest_reset)
{
	struct pair *p = &self->p;

	pair_start(_metadata, p, self->r);
	send_all(_metadata, p->guest, "x", 1);
	reset(p->guest);
	p->guest = -1;
	pump(_metadata, p, 1, TIMEOUT_MS);
	ASSERT_TRUE(p->done);
	EXPECT_EQ(-ECONNRESET, p->err);
	krelay__stop(&p->k, self->r);
	p->started = false;
	reset(p->b);
	p->b = -1;
	EXPECT_TRUE(reads_reset(p->up, TIMEOUT_MS));
}

/*
 * A cut flow (a policy replaced) leaves the map: nothing it sends is
 * relayed any more, even before its sockets are closed.
 */
TEST_F(relay, stop_relays_nothing_more)
{
	struct pair *p = &self->p;
	char buf[8];

	pair_start(_metadata, p, self->r);
	send_all(_metadata, p->guest, "one", 3);
	ASSERT_EQ(3U, read_all(p->up, buf, 3, TIMEOUT_MS));
	krelay__stop(&p->k, self->r);
	p->started = false;
	EXPECT_EQ(0U, relay_prog__nr_socks(self->r));
	EXPECT_EQ(0U, relay_prog__nr_ways(self->r));
	send_all(_metadata, p->guest, "two", 3);
	send_all(_metadata, p->up, "back", 4);
	EXPECT_TRUE(quiet(p->up));
	EXPECT_TRUE(quiet(p->guest));
	/* What came after stays in the relay's own ends, for the owner. */
	ASSERT_EQ(3U, read_all(p->a, buf, 3, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "two", 3));
}

/* A closed socket leaves the map by itself. */
TEST_F(relay, close_leaves_the_map)
{
	struct pair *p = &self->p;

	pair_start(_metadata, p, self->r);
	ASSERT_EQ(2U, relay_prog__nr_socks(self->r));
	p->started = false;
	close(p->a);
	close(p->b);
	p->a = p->b = -1;
	EXPECT_EQ(0U, relay_prog__nr_socks(self->r));
	EXPECT_EQ(0U, relay_prog__nr_ways(self->r));
}

/*
 * One way (split): the guest's bytes, including what it sent before
 * the pairing, reach upstream by the kernel; upstream's stay in the
 * relay's own end for its owner, who writes the guest's end itself;
 * krelay neither watches nor counts upstream's side.
 */
TEST_F(relay, one_way_leaves_the_other_to_the_owner)
{
	struct pair *p = &self->p;
	uint64_t bytes[KRELAY_SIDES];
	char buf[16] = "";

	send_all(_metadata, p->guest, "early", 5);
	usleep(50 * 1000);
	pair_start_ways(_metadata, p, self->r, RELAY_A_TO_B);
	EXPECT_EQ(1U, relay_prog__nr_socks(self->r));
	EXPECT_EQ(1U, relay_prog__nr_ways(self->r));
	EXPECT_EQ(0U, krelay__interest(&p->k, KRELAY_B));
	EXPECT_NE(0U, krelay__interest(&p->k, KRELAY_A));
	ASSERT_EQ(5U, read_all(p->up, buf, 5, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "early", 5));
	send_all(_metadata, p->up, "reply", 5);
	EXPECT_TRUE(quiet(p->guest));
	ASSERT_EQ(5U, read_all(p->b, buf, 5, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "reply", 5));
	send_all(_metadata, p->a, "owner", 5);
	ASSERT_EQ(5U, read_all(p->guest, buf, 5, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "owner", 5));
	/* The kernel's end read by nobody else. */
	EXPECT_EQ(-1, recv(p->a, buf, sizeof(buf), MSG_DONTWAIT));
	ASSERT_EQ(0, krelay__bytes(&p->k, bytes));
	EXPECT_EQ(5U, bytes[KRELAY_A]);
	EXPECT_EQ(0U, bytes[KRELAY_B]);
}

/*
 * One way, megabytes, then the guest's FIN: krelay sends it on after
 * the last byte and is done (its one way shut), while upstream's side
 * still carries bytes for the owner.
 */
TEST_F(relay, one_way_big_then_fin)
{
	struct pair *p = &self->p;
	struct sender out = { .fd = p->guest, .len = BIG_BYTES };
	char *got = malloc(BIG_BYTES), buf[8] = "";
	uint64_t bytes[KRELAY_SIDES];
	pthread_t t;

	ASSERT_NE(NULL, got);
	pair_start_ways(_metadata, p, self->r, RELAY_A_TO_B);
	ASSERT_EQ(0, pthread_create(&t, NULL, send_big, &out));
	ASSERT_EQ(BIG_BYTES, read_all(p->up, got, BIG_BYTES, TIMEOUT_MS));
	pthread_join(t, NULL);
	ASSERT_EQ(0, out.err);
	for (size_t i = 0; i < BIG_BYTES; i++) {
		ASSERT_EQ((char)(i * 7 + i / 4096), got[i])
		TH_LOG("byte %zu", i);
	}
	ASSERT_EQ(0, shutdown(p->guest, SHUT_WR));
	pump(_metadata, p, 1, TIMEOUT_MS);
	EXPECT_TRUE(p->done);
	EXPECT_EQ(0, p->err);
	EXPECT_TRUE(reads_eof(p->up, TIMEOUT_MS));
	send_all(_metadata, p->up, "late", 4);
	ASSERT_EQ(4U, read_all(p->b, buf, 4, TIMEOUT_MS));
	EXPECT_EQ(0, memcmp(buf, "late", 4));
	ASSERT_EQ(0, krelay__bytes(&p->k, bytes));
	EXPECT_EQ(BIG_BYTES, bytes[KRELAY_A]);
	free(got);
}

/* No way asked is refused, and nothing goes in the maps. */
TEST_F(relay, no_way_is_refused)
{
	struct pair *p = &self->p;
	char err[256] = "";

	EXPECT_EQ(-EINVAL,
		  relay_prog__pair(self->r, p->a, p->b, (enum relay_ways)0, err,
				   sizeof(err)));
	EXPECT_STRNE("", err);
	EXPECT_EQ(0U, relay_prog__nr_socks(self->r));
	EXPECT_EQ(0U, relay_prog__nr_ways(self->r));
}

/*
 * A flow whose guest sent its FIN before the pairing: the map takes
 * established sockets only, refuses the pair and keeps neither (the
 * proxy relays such a flow by splice).
 */
TEST_F(relay, half_closed_is_refused)
{
	struct pair *p = &self->p;
	struct pollfd pfd = { .fd = p->a, .events = POLLRDHUP };
	char err[256] = "";

	ASSERT_EQ(0, shutdown(p->guest, SHUT_WR));
	ASSERT_EQ(1, poll(&pfd, 1, TIMEOUT_MS));
	ASSERT_EQ(0, krelay__start(&p->k, p->a, p->b, RELAY_BOTH));
	EXPECT_GT(0, relay_prog__pair(self->r, p->a, p->b, RELAY_BOTH, err,
				      sizeof(err)));
	EXPECT_NE(0, err[0]);
	EXPECT_EQ(0U, relay_prog__nr_socks(self->r));
}

/* A full map refuses the pair and leaves neither socket in it. */
TEST(full_map_refuses)
{
	struct sockaddr_in at;
	struct relay_prog *r;
	struct pair p[2];
	char err[256] = "";
	int lsn;

	if (!be_root(_metadata))
		return;
	vmnet__new_netns(_metadata);
	r = load(_metadata, 1);
	lsn = listener(_metadata, &at);
	pair_open(_metadata, &p[0], lsn, &at);
	pair_open(_metadata, &p[1], lsn, &at);
	pair_start(_metadata, &p[0], r);
	EXPECT_EQ(-E2BIG, relay_prog__pair(r, p[1].a, p[1].b, RELAY_BOTH, err,
					   sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(2U, relay_prog__nr_socks(r));
	pair_close(&p[0], r);
	pair_close(&p[1], NULL);
	close(lsn);
	relay_prog__destroy(r);
}

/* Whether fd's flow ended (a FIN or a reset) within ms, nothing before. */
static bool ends(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;
	ssize_t n;

	if (poll(&pfd, 1, ms) != 1)
		return false;
	n = recv(fd, &c, 1, MSG_DONTWAIT);
	return !n || (n < 0 && errno == ECONNRESET);
}

/*
 * Whether a byte sent on fd, whose flow ended, is answered by a reset
 * within ms: its peer socket is closed, not merely shut for writing.
 * The FIN came first, so reads say EOF and poll says readable from the
 * start: the reset shows as POLLERR and SO_ERROR (EPIPE: TCP's name for
 * a reset in CLOSE_WAIT).
 */
static bool answered_by_reset(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	socklen_t len = sizeof(int);
	char c = 'x';
	int err = 0;

	if (send(fd, &c, 1, MSG_NOSIGNAL) < 0)
		return errno == EPIPE || errno == ECONNRESET;
	for (int i = 0; i < ms / 10; i++) {
		if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR))
			break;
		usleep(10 * 1000);
	}
	return !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) &&
	       (err == ECONNRESET || err == EPIPE);
}

/*
 * The owner of a relayed pair (the vmm: the program, its map and the
 * relay's two sockets, a child process here) killed outright: both
 * ends of the flow see it end within TIMEOUT_MS, and a byte either
 * then sends is answered by a reset; none reaches the other side.
 * Nothing of the relay outlives the process that held it.
 */
TEST(killed_owner_ends_the_flow)
{
	struct sockaddr_in at;
	int lsn, ready[2], status;
	char buf[2], c = 0;
	struct pair p;
	pid_t pid;

	if (!be_root(_metadata))
		return;
	vmnet__new_netns(_metadata);
	lsn = listener(_metadata, &at);
	pair_open(_metadata, &p, lsn, &at);
	ASSERT_EQ(0, pipe2(ready, O_CLOEXEC));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct relay_prog *r = NULL;
		char err[256];

		if (relay_prog__create(&r, 1, err, sizeof(err)) ||
		    krelay__start(&p.k, p.a, p.b, RELAY_BOTH) ||
		    relay_prog__pair(r, p.a, p.b, RELAY_BOTH, err, sizeof(err)))
			_exit(1);
		c = 'r';
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause(); /* until SIGKILL */
	}
	close(ready[1]);
	/* The relay's ends are the owner's alone. */
	close(p.a);
	close(p.b);
	p.a = p.b = -1;
	ASSERT_EQ(1, read(ready[0], &c, 1)) TH_LOG("the owner could not pair");
	close(ready[0]);
	send_all(_metadata, p.guest, "hi", 2);
	ASSERT_EQ(2U, read_all(p.up, buf, 2, TIMEOUT_MS));
	send_all(_metadata, p.up, "yo", 2);
	ASSERT_EQ(2U, read_all(p.guest, buf, 2, TIMEOUT_MS));

	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	EXPECT_TRUE(ends(p.guest, TIMEOUT_MS));
	EXPECT_TRUE(ends(p.up, TIMEOUT_MS));
	EXPECT_TRUE(answered_by_reset(p.guest, TIMEOUT_MS));
	EXPECT_TRUE(answered_by_reset(p.up, TIMEOUT_MS));
	pair_close(&p, NULL);
	close(lsn);
}

/* A thousand flows at once, each its own bytes each way, then FINs. */
TEST(thousand_flows)
{
	struct rlimit rl = { .rlim_cur = MANY_FDS, .rlim_max = MANY_FDS };
	struct pair *ps = calloc(MANY_FLOWS, sizeof(*ps));
	struct sockaddr_in at;
	struct relay_prog *r;
	unsigned int done = 0;
	char want[16], buf[16];
	int lsn;

	ASSERT_NE(NULL, ps);
	if (!be_root(_metadata))
		return;
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	vmnet__new_netns(_metadata);
	r = load(_metadata, MAX_PAIRS);
	lsn = listener(_metadata, &at);
	for (unsigned int i = 0; i < MANY_FLOWS; i++) {
		pair_open(_metadata, &ps[i], lsn, &at);
		pair_start(_metadata, &ps[i], r);
	}
	EXPECT_EQ(2U * MANY_FLOWS, relay_prog__nr_socks(r));
	for (unsigned int i = 0; i < MANY_FLOWS; i++) {
		snprintf(want, sizeof(want), "out%08u", i);
		send_all(_metadata, ps[i].guest, want, 11);
		snprintf(want, sizeof(want), "in%09u", i);
		send_all(_metadata, ps[i].up, want, 11);
	}
	for (unsigned int i = 0; i < MANY_FLOWS; i++) {
		snprintf(want, sizeof(want), "out%08u", i);
		ASSERT_EQ(11U, read_all(ps[i].up, buf, 11, TIMEOUT_MS))
		TH_LOG("flow %u", i);
		ASSERT_EQ(0, memcmp(buf, want, 11)) TH_LOG("flow %u", i);
		snprintf(want, sizeof(want), "in%09u", i);
		ASSERT_EQ(11U, read_all(ps[i].guest, buf, 11, TIMEOUT_MS))
		TH_LOG("flow %u", i);
		ASSERT_EQ(0, memcmp(buf, want, 11)) TH_LOG("flow %u", i);
		shutdown(ps[i].guest, SHUT_WR);
		shutdown(ps[i].up, SHUT_WR);
	}
	pump(_metadata, ps, MANY_FLOWS, TIMEOUT_MS);
	for (unsigned int i = 0; i < MANY_FLOWS; i++) {
		done += ps[i].done && !ps[i].err;
		pair_close(&ps[i], r);
	}
	EXPECT_EQ(MANY_FLOWS, done);
	EXPECT_EQ(0U, relay_prog__nr_socks(r));
	close(lsn);
	relay_prog__destroy(r);
	free(ps);
}

TEST_HARNESS_MAIN
