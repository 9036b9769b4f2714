// SPDX-License-Identifier: GPL-2.0
/*
 * DNS through the hook, booted (Documentation/network.md, "DNS through
 * the hook"): a policy made of a hook alone. The test's decision service
 * grants DNS for granted.test and direct.test to the test's own resolver
 * (named in its answer, not in the policy), denies every other name, and
 * grants the flow to the address granted.test resolved to. The guest
 * (busybox nslookup and nc) resolves the granted name, is REFUSED the
 * denied one, reaches the granted address, and asking a DNS server of its
 * own choosing (an address where nothing listens) still goes through the
 * vmm and the hook, which sees the address the guest chose.
 *
 * Root only. Every address is in a namespace the test makes (test_host.h)
 * or the vmm makes; nothing reaches any other network.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/test_host.h"
#include "selftests/kvm/test_tmp.h"
#include "selftests/kvm/vmm_util.h"

#define TEST_DNS     "192.0.2.53" /* the resolver the hook names */
#define GUEST_PICKS  "192.0.2.77" /* a server of the guest's choosing */
#define TEST_DNS_TTL 300
#define DNS_HDR_LEN  12
#define DNS_PORT     53
#define DNS_TYPE_A   1 /* RFC 1035 3.2.2 */
#define DNS_CLASS_IN 1 /* RFC 1035 3.2.4 */
#define HOOK_CONNS   4 /* the proxy's connection and the resolver's */

/* ---- the test's upstream resolver ---------------------------------- */

struct test_dns {
	int fd;
	pthread_t thread;
	unsigned int got;
	unsigned int got_denied; /* queries for denied.test: none, ever */
};

/* Whether the one question of query q (n bytes) is of type A, class IN. */
static bool asks_for_a(const uint8_t *q, size_t n)
{
	size_t at = DNS_HDR_LEN;

	while (at < n && q[at])
		at += 1 + q[at];
	return at + 5 <= n && q[at + 1] == 0 && q[at + 2] == DNS_TYPE_A &&
	       q[at + 3] == 0 && q[at + 4] == DNS_CLASS_IN;
}

/* Query msg (n bytes, room for 16 more) answered in place: A gets TEST_HOST. */
static size_t answer(uint8_t *msg, size_t n)
{
	static const uint8_t rr[] = { 0xc0,
				      DNS_HDR_LEN,
				      0,
				      DNS_TYPE_A,
				      0,
				      DNS_CLASS_IN,
				      0,
				      0,
				      TEST_DNS_TTL >> 8,
				      TEST_DNS_TTL & 0xff,
				      0,
				      4 };

	msg[2] = 0x81; /* QR, RD */
	msg[3] = 0x80; /* RA, NOERROR */
	msg[6] = msg[7] = msg[8] = msg[9] = msg[10] = msg[11] = 0;
	if (!asks_for_a(msg, n))
		return n;
	msg[7] = 1; /* ANCOUNT */
	memcpy(msg + n, rr, sizeof(rr));
	inet_pton(AF_INET, TEST_HOST, msg + n + sizeof(rr));
	return n + sizeof(rr) + 4;
}

static void *test_dns_serve(void *arg)
{
	struct test_dns *d = arg;
	struct sockaddr_in from;
	uint8_t msg[512 + 16];
	socklen_t fl;
	ssize_t n;

	for (;;) {
		fl = sizeof(from);
		n = recvfrom(d->fd, msg, 512, 0, (struct sockaddr *)&from, &fl);
		if (n < DNS_HDR_LEN)
			break; /* shut down: the test is over */
		__atomic_add_fetch(&d->got, 1, __ATOMIC_RELAXED);
		if (memmem(msg, (size_t)n, "\006denied", 7))
			__atomic_add_fetch(&d->got_denied, 1, __ATOMIC_RELAXED);
		sendto(d->fd, msg, answer(msg, (size_t)n), 0,
		       (struct sockaddr *)&from, fl);
	}
	return NULL;
}

/* On lo:2 of the test host's namespace (test_host_start first). */
static bool test_dns_start(struct __test_metadata *_metadata,
			   struct test_dns *d)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(DNS_PORT) };

	ASSERT_TRUE(test_host_alias(_metadata, "lo:2", TEST_DNS));
	inet_pton(AF_INET, TEST_DNS, &sin.sin_addr);
	d->got = d->got_denied = 0;
	d->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, d->fd);
	ASSERT_EQ(0, bind(d->fd, (struct sockaddr *)&sin, sizeof(sin)));
	ASSERT_EQ(0, pthread_create(&d->thread, NULL, test_dns_serve, d));
	return true;
}

static void test_dns_stop(struct test_dns *d)
{
	shutdown(d->fd, SHUT_RDWR);
	pthread_join(d->thread, NULL);
	close(d->fd);
}

/* ---- the test's decision service ----------------------------------- */

/*
 * Every connection the vmm makes (one per client: the proxy's for flows,
 * the resolver's for DNS), one JSON line each way; what it was asked is
 * kept for the test.
 */
struct test_hook {
	int lsn, stop[2];
	pthread_t thread;
	char path[108];
	char asked[8192];
	size_t asked_len;
	pthread_mutex_t lock;
};

struct hook_conn {
	int fd;
	char line[4096];
	size_t got;
};

/* The answer to question line q (id id) into reply. */
static void decide(const char *q, long id, char *reply, size_t len)
{
	bool dns = strstr(q, "\"type\": \"dns\"") != NULL;

	if (dns && (strstr(q, "\"name\": \"granted.test\"") ||
		    strstr(q, "\"name\": \"direct.test\"")))
		snprintf(reply, len,
			 "{\"id\": %ld, \"verdict\": \"grant-dns\", "
			 "\"resolvers\": [\"" TEST_DNS "\"]}\n",
			 id);
	else if (!dns && strstr(q, "\"dst\": \"" TEST_HOST ":8080\"") &&
		 strstr(q, "\"granted.test\""))
		snprintf(reply, len, "{\"id\": %ld, \"verdict\": \"grant\"}\n",
			 id);
	else
		snprintf(reply, len,
			 "{\"id\": %ld, \"verdict\": \"deny\", \"reason\": "
			 "\"test hook\"}\n",
			 id);
}

/* What c has read: each whole line answered; false when c is done. */
static bool hook_lines(struct test_hook *k, struct hook_conn *c)
{
	char *nl, *at, reply[256];
	ssize_t n;

	n = read(c->fd, c->line + c->got, sizeof(c->line) - 1 - c->got);
	if (n <= 0)
		return false;
	c->got += (size_t)n;
	c->line[c->got] = '\0';
	while ((nl = strchr(c->line, '\n'))) {
		*nl = '\0';
		at = strstr(c->line, "\"id\": ");
		pthread_mutex_lock(&k->lock);
		k->asked_len += (size_t)snprintf(
			k->asked + k->asked_len,
			sizeof(k->asked) - k->asked_len, "%s\n", c->line);
		if (k->asked_len >= sizeof(k->asked))
			k->asked_len = sizeof(k->asked) - 1;
		pthread_mutex_unlock(&k->lock);
		decide(c->line, at ? strtol(at + 6, NULL, 10) : -1, reply,
		       sizeof(reply));
		if (write(c->fd, reply, strlen(reply)) !=
		    (ssize_t)strlen(reply))
			return false;
		c->got -= (size_t)(nl + 1 - c->line);
		memmove(c->line, nl + 1, c->got + 1);
	}
	return c->got < sizeof(c->line) - 1;
}

static void *test_hook_serve(void *arg)
{
	struct test_hook *k = arg;
	struct hook_conn c[HOOK_CONNS];
	struct pollfd p[HOOK_CONNS + 2];
	int fd;

	for (int i = 0; i < HOOK_CONNS; i++)
		c[i].fd = -1;
	for (;;) {
		p[0] = (struct pollfd){ .fd = k->stop[0], .events = POLLIN };
		p[1] = (struct pollfd){ .fd = k->lsn, .events = POLLIN };
		for (int i = 0; i < HOOK_CONNS; i++)
			p[i + 2] = (struct pollfd){ .fd = c[i].fd,
						    .events = POLLIN };
		if (poll(p, HOOK_CONNS + 2, -1) < 0 || p[0].revents)
			break;
		for (int i = 0; i < HOOK_CONNS; i++)
			if (c[i].fd >= 0 && p[i + 2].revents &&
			    !hook_lines(k, &c[i])) {
				close(c[i].fd);
				c[i].fd = -1;
			}
		if (!(p[1].revents & POLLIN))
			continue;
		fd = accept4(k->lsn, NULL, NULL, SOCK_CLOEXEC);
		for (int i = 0; fd >= 0 && i < HOOK_CONNS; i++)
			if (c[i].fd < 0) {
				c[i] = (struct hook_conn){ .fd = fd };
				fd = -1;
			}
		if (fd >= 0)
			close(fd); /* more than the vmm makes */
	}
	for (int i = 0; i < HOOK_CONNS; i++)
		if (c[i].fd >= 0)
			close(c[i].fd);
	return NULL;
}

static bool test_hook_start(struct __test_metadata *_metadata,
			    struct test_hook *k, const char *dir)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	k->asked[0] = '\0';
	k->asked_len = 0;
	pthread_mutex_init(&k->lock, NULL);
	ASSERT_EQ(0, pipe2(k->stop, O_CLOEXEC));
	snprintf(k->path, sizeof(k->path), "%s/hook.sock", dir);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", k->path);
	k->lsn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, k->lsn);
	ASSERT_EQ(0, bind(k->lsn, (struct sockaddr *)&sun, sizeof(sun)));
	ASSERT_EQ(0, listen(k->lsn, HOOK_CONNS));
	ASSERT_EQ(0, pthread_create(&k->thread, NULL, test_hook_serve, k));
	return true;
}

static void test_hook_stop(struct test_hook *k)
{
	if (write(k->stop[1], "x", 1) != 1) {
		/* A pipe of our own with room: cannot happen. */
	}
	pthread_join(k->thread, NULL);
	close(k->stop[0]);
	close(k->stop[1]);
	close(k->lsn);
	unlink(k->path);
}

/* ---- the test ------------------------------------------------------ */

static bool is_root(struct __test_metadata *_metadata)
{
	if (geteuid())
		SKIP(return false, "needs root (network namespaces, taps)");
	return true;
}

/* Whether k was asked a line holding both a and b. */
static bool asked(struct test_hook *k, const char *a, const char *b)
{
	bool found = false;
	char *copy, *line, *save = NULL;

	pthread_mutex_lock(&k->lock);
	copy = strdup(k->asked);
	pthread_mutex_unlock(&k->lock);
	for (line = copy ? strtok_r(copy, "\n", &save) : NULL; line && !found;
	     line = strtok_r(NULL, "\n", &save))
		found = strstr(line, a) && strstr(line, b);
	free(copy);
	return found;
}

/*
 * A hook alone decides DNS and flows: granted.test resolves through the
 * resolver the hook names (the policy names none), denied.test is
 * REFUSED, the granted name's address is reachable once the hook grants
 * the flow, and a query the guest sends to a server of its own choosing
 * is still the vmm's, put to the hook with the address the guest chose.
 */
TEST_TIMEOUT(hook_alone_decides_dns, BOOT_TIMEOUT)
{
	char dir[64], policy[128], doc[256];
	struct spawn_result r;
	struct test_host h;
	struct test_hook k;
	struct test_dns d;
	FILE *f;

	test_tmp_name(dir, sizeof(dir), "kiln-dnshook-XXXXXX");
	if (!is_root(_metadata))
		return;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_TRUE(test_host_start(_metadata, &h));
	ASSERT_TRUE(test_dns_start(_metadata, &d));
	ASSERT_TRUE(test_hook_start(_metadata, &k, dir));
	/* A deadline long enough for the slowest harness, still finite. */
	snprintf(doc, sizeof(doc),
		 "{\"hook\": {\"socket\": \"%s\", \"timeoutMs\": 5000}}",
		 k.path);
	snprintf(policy, sizeof(policy), "%s/policy.json", dir);
	f = fopen(policy, "w");
	ASSERT_NE(NULL, f);
	ASSERT_LE(0, fputs(doc, f));
	ASSERT_EQ(0, fclose(f));
	BOOT(NULL, ARGS("--net", "auto", "--net-policy", policy),
	     ARGS("sh", "-c",
		  "get() { printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
		  "nc -w 30 $1 $2 2>/dev/null | tail -n 1; }; "
		  "nslookup granted.test 10.0.2.2 | grep -q " TEST_HOST " "
		  "&& echo granted resolved || echo granted not resolved; "
		  "nslookup denied.test 10.0.2.2 2>&1 | grep -q REFUSED "
		  "&& echo denied refused || echo denied not refused; "
		  "get " TEST_HOST " 8080; "
		  "nslookup direct.test " GUEST_PICKS " | grep -q " TEST_HOST
		  " && echo direct resolved || echo direct not resolved"),
	     NULL, &r);
	test_hook_stop(&k);
	test_dns_stop(&d);
	test_host_stop(&h);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("granted resolved\ndenied refused\n" TEST_REPLY
		     "\ndirect resolved\n",
		     r.out)
	TH_LOG("stderr: %s\nasked: %s", r.err, k.asked);
	/* What the hook saw: each question, with where the guest sent it. */
	EXPECT_TRUE(asked(&k, "\"type\": \"dns\", \"proto\": \"udp\"",
			  "\"dst\": \"10.0.2.2:53\", \"name\": "
			  "\"granted.test\", \"qtype\": \"A\""))
	TH_LOG("asked: %s", k.asked);
	EXPECT_TRUE(asked(&k, "\"dst\": \"10.0.2.2:53\"",
			  "\"name\": \"denied.test\""))
	TH_LOG("asked: %s", k.asked);
	EXPECT_TRUE(asked(&k, "\"dst\": \"" GUEST_PICKS ":53\"",
			  "\"name\": \"direct.test\""))
	TH_LOG("asked: %s", k.asked);
	EXPECT_TRUE(asked(&k, "\"dst\": \"" TEST_HOST ":8080\"",
			  "\"hostnames\": [\"granted.test\"]"))
	TH_LOG("asked: %s", k.asked);
	EXPECT_TRUE(strstr(r.err, "denied.test udp") &&
		    strstr(r.err, "hook deny (test hook)"))
	TH_LOG("stderr: %s", r.err);
	/* The granted names went upstream, the denied one never. */
	EXPECT_LE(2, __atomic_load_n(&d.got, __ATOMIC_RELAXED));
	EXPECT_EQ(0, __atomic_load_n(&d.got_denied, __ATOMIC_RELAXED));
	unlink(policy);
	rmdir(dir);
}

TEST_HARNESS_MAIN
