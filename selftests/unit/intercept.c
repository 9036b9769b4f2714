// SPDX-License-Identifier: GPL-2.0
/*
 * HTTP grants end to end, without a VM (net/intercept.c through the
 * proxy, net/proxy.c, deciding by a real policy, net/policy.c): the
 * namespaces of selftests/vmnet.h, the guest's sockets in the guest
 * netns, the test's upstream servers on the host netns's lo. Root only:
 * a skip otherwise.
 *
 * The policy grants http to api.example.test on ports 80 and 8080,
 * setting authorization from an environment variable the test sets, and
 * plain TCP to RAW_ADDR; the test binds api.example.test (and
 * other.example.test, which no grant names) to API_ADDR as the VM's DNS
 * would. It decides as the VM does (vmm/vm.c): under a lock, with the
 * bindings.
 *
 * Negative checks wait for the proxy's counters to show the decision,
 * then look at what upstream got: nothing.
 *
 * The hook's tests swap in a policy whose grant asks the test's fake
 * hook (selftests/fakehook.h) per request or per connection, and play
 * the hook by hand: its fields reach upstream only, its deny, its
 * silence and its absence are 403s that reach nothing upstream.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "lib/compiler.h"
#include "net/policy.h"
#include "net/hostaddr.h"
#include "net/proxy.h"
#include "net/tls.h"
#include "selftests/fakehook.h"
#include "selftests/kselftest.h"
#include "selftests/proxyfix.h"
#include "selftests/vmnet.h"
#include "vmm/seccomp.h"

#define API_ADDR    "198.51.100.7" /* RFC 5737, on the host netns's lo */
#define RAW_ADDR    "203.0.113.9"
#define API_HOST    "api.example.test"
#define HTTP_PORT   80
#define HTTPS_PORT  443
#define CLOSED_PORT 8080 /* granted, nobody listens upstream */
#define TOKEN_ENV   "KILN_TEST_INTERCEPT_TOKEN"
#define TOKEN	    "s3cret-token-5d1e"
#define TIMEOUT_MS  PROXYFIX_TIMEOUT_MS
/* Upstream's response deadline in the tests that wait it out. */
#define QUICK_DEADLINE_MS 200U
#define BUF_MAX		  (64U << 10)
#define MAX_TCP		  8

#define POLICY                                                                 \
	"{\"tcp\": [{\"to\": \"" RAW_ADDR "\"}],"                              \
	" \"http\": [{\"host\": \"" API_HOST "\", \"ports\": [80, 443, 8080]," \
	" \"clearText\": true,"                                                \
	" \"headers\": {\"Authorization\": {\"from\": \"env:" TOKEN_ENV        \
	"\"}}}]}"

#define RESPONSE "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"

static void test_decide(void *opaque, const struct net_flow *f,
			struct net_decision *d)
{
	proxyfix__decide(opaque, f, d);
}

static void test_decide_http(void *opaque, const struct net_flow *f,
			     const char *host, bool verified,
			     struct net_http_decision *d)
{
	struct proxyfix_policy *tp = opaque;

	pthread_mutex_lock(&tp->lock);
	net_policy__decide_http(tp->policy, f, host, verified, tp->bindings, d);
	pthread_mutex_unlock(&tp->lock);
}

/*
 * TLS: the VM's CA (its server mints what the guest sees; the guest's
 * client trusts it alone, from a file), upstream's CA (its server is the
 * test's upstream; the proxy's client trusts it alone) and another CA
 * nobody trusts (an upstream that must not be).
 */
struct test_tls {
	struct tls_ca *vm_ca, *up_ca, *evil_ca;
	struct tls_server *vm_srv, *up_srv, *evil_srv;
	struct tls_client *proxy_cli, *guest_cli;
	char vm_pem[64], up_pem[64];
};

FIXTURE(ic)
{
	struct vmnet net;
	struct proxy *proxy;
	struct proxyfix_policy policy;
	struct test_tls tls;
	int api, raw; /* upstream listeners: API_ADDR:80, RAW_ADDR:80 */
	int api_tls;  /* API_ADDR:443 */
	struct fakehook fh;
	unsigned int tls_setup_ms; /* the proxy's; 0: its default */
	unsigned int response_ms;  /* the same */
};

/* A CA's certificate into a file of its own; its path into path. */
static void pem_file(struct __test_metadata *_metadata, const struct tls_ca *ca,
		     char *path, size_t len)
{
	const char *pem;
	size_t n;
	int fd;

	snprintf(path, len, "/tmp/kiln-intercept-XXXXXX");
	fd = mkstemp(path);
	ASSERT_LE(0, fd);
	tls_ca__cert_pem(ca, &pem, &n);
	ASSERT_EQ((ssize_t)n, write(fd, pem, n));
	close(fd);
}

static void tls_setup(struct __test_metadata *_metadata, struct test_tls *t)
{
	const struct tls_ca_params cap = { 0 };
	char err[256] = "";

	ASSERT_EQ(0, tls_ca__create(&t->vm_ca, &cap, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, tls_ca__create(&t->up_ca, &cap, err, sizeof(err)));
	ASSERT_EQ(0, tls_ca__create(&t->evil_ca, &cap, err, sizeof(err)));
	ASSERT_EQ(0, tls_server__create(&t->vm_srv, t->vm_ca, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0,
		  tls_server__create(&t->up_srv, t->up_ca, err, sizeof(err)));
	ASSERT_EQ(0, tls_server__create(&t->evil_srv, t->evil_ca, err,
					sizeof(err)));
	pem_file(_metadata, t->vm_ca, t->vm_pem, sizeof(t->vm_pem));
	pem_file(_metadata, t->up_ca, t->up_pem, sizeof(t->up_pem));
	ASSERT_EQ(0, tls_client__create(&t->proxy_cli,
					&(struct tls_client_params){
						.ca_bundle = t->up_pem },
					err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, tls_client__create(&t->guest_cli,
					&(struct tls_client_params){
						.ca_bundle = t->vm_pem },
					err, sizeof(err)))
	TH_LOG("%s", err);
}

static void tls_teardown(struct test_tls *t)
{
	tls_client__destroy(t->guest_cli);
	tls_client__destroy(t->proxy_cli);
	tls_server__destroy(t->evil_srv);
	tls_server__destroy(t->up_srv);
	tls_server__destroy(t->vm_srv);
	tls_ca__destroy(t->evil_ca);
	tls_ca__destroy(t->up_ca);
	tls_ca__destroy(t->vm_ca);
	if (t->vm_pem[0])
		unlink(t->vm_pem);
	if (t->up_pem[0])
		unlink(t->up_pem);
}

/*
 * The proxy's thread under the vmm's own seccomp filter for it
 * (vmm/seccomp.c, SECCOMP_THREAD_EGRESS: opening a file is EACCES, a
 * syscall it does not list ends the process with status 125), as in a VM
 * with a network, its netns thread made before it and not under it; the
 * filter is the proxy thread's alone, not the test's thread's.
 */
static void proxy_up(struct __test_metadata *_metadata, FIXTURE_DATA(ic) * self,
		     bool filtered)
{
	struct proxy_params p = {
		.ifname = VMNET_VETH_VM,
		.egress = { .prefix_len = VMNET_PREFIX_LEN },
		.decide = test_decide,
		.decide_http = test_decide_http,
		.max_tcp_flows = MAX_TCP,
		.tls_setup_ms = self->tls_setup_ms,
		.http_response_ms = self->response_ms,
		.tls = { .ca = self->tls.vm_ca,
			 .server = self->tls.vm_srv,
			 .client = self->tls.proxy_cli },
	};
	char err[256] = "";

	p.netns_fd = self->net.vm_ns;
	/*
	 * The upstreams on the host netns's lo stand in for the internet:
	 * no address counts as the host's own here.
	 */
	static struct net_host_addrs *none;

	if (!none)
		none = net_host_addrs__create_empty();
	ASSERT_NE(NULL, none);
	p.host_addrs = none;
	p.decide_opaque = &self->policy;
	p.egress.gateway.s_addr = inet_addr(VMNET_GATEWAY);
	p.egress.guest.s_addr = inet_addr(VMNET_GUEST);
	ASSERT_EQ(0, proxy__create(&self->proxy, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	if (!filtered) {
		ASSERT_EQ(0, proxy__start(self->proxy, NULL));
		return;
	}
	ASSERT_EQ(0, proxyfix__start_filtered(self->proxy));
}

FIXTURE_SETUP(ic)
{
	vmnet__init(&self->net);
	self->api = self->raw = self->api_tls = -1;
	self->fh = (struct fakehook){ .lsn = -1, .conn = -1 };
	proxyfix__policy_init(&self->policy);
	if (geteuid())
		SKIP(return, PROXYFIX_NOT_ROOT);
	ASSERT_EQ(0, fakehook__init(&self->fh, true));
	ASSERT_EQ(0, setenv(TOKEN_ENV, "Bearer " TOKEN, 1));
	proxyfix__policy_set(_metadata, &self->policy, POLICY);
	/* Read at parse time: the environment no longer matters. */
	ASSERT_EQ(0, unsetenv(TOKEN_ENV));
	self->policy.bindings = net_bindings__create(NULL, NULL);
	ASSERT_NE(NULL, self->policy.bindings);
	ASSERT_EQ(0, net_bindings__insert(self->policy.bindings, API_HOST,
					  inet_addr(API_ADDR), 600));
	ASSERT_EQ(0, net_bindings__insert(self->policy.bindings,
					  "other.example.test",
					  inet_addr(API_ADDR), 600));

	vmnet__setup(_metadata, &self->net);
	VMNET_IP("addr", "add", API_ADDR "/32", "dev", "lo");
	VMNET_IP("addr", "add", RAW_ADDR "/32", "dev", "lo");
	self->api = vmnet__server(_metadata, SOCK_STREAM, API_ADDR, HTTP_PORT);
	self->raw = vmnet__server(_metadata, SOCK_STREAM, RAW_ADDR, HTTP_PORT);
	self->api_tls =
		vmnet__server(_metadata, SOCK_STREAM, API_ADDR, HTTPS_PORT);
	tls_setup(_metadata, &self->tls);
	proxy_up(_metadata, self, false);
}

FIXTURE_TEARDOWN(ic)
{
	proxy__destroy(self->proxy);
	if (self->api >= 0)
		close(self->api);
	if (self->raw >= 0)
		close(self->raw);
	if (self->api_tls >= 0)
		close(self->api_tls);
	tls_teardown(&self->tls);
	fakehook__close(&self->fh);
	vmnet__close(&self->net);
	proxyfix__policy_free(&self->policy);
}

/* ---- the guest and upstream ----------------------------------------- */

/* A guest connection to addr:port, established; then it sends req. */
static int guest_send(struct __test_metadata *_metadata,
		      FIXTURE_DATA(ic) * self, const char *addr, int port,
		      const char *req)
{
	int fd = proxyfix__guest_connect(_metadata, &self->net, addr, port);

	ASSERT_TRUE(vmnet__wait_for(fd, POLLOUT, TIMEOUT_MS));
	if (req)
		ASSERT_EQ((ssize_t)strlen(req), send(fd, req, strlen(req), 0));
	return fd;
}

/*
 * Reads into buf until it holds want bytes (0: until EOF), an error or
 * the timeout: how many, NUL-terminated. *eof: the peer's FIN was seen.
 */
static size_t read_until(int fd, char *buf, size_t len, size_t want, bool *eof)
{
	size_t n = 0;
	ssize_t r;

	*eof = false;
	while (n + 1 < len && (!want || n < want)) {
		if (!vmnet__wait_for(fd, POLLIN, TIMEOUT_MS))
			break;
		r = recv(fd, buf + n, len - 1 - n, MSG_DONTWAIT);
		if (r < 0 && errno == EAGAIN)
			continue;
		if (r <= 0) {
			*eof = !r;
			break;
		}
		n += r;
	}
	buf[n] = '\0';
	return n;
}

/* What upstream receives until it holds want (a string), or the timeout. */
static void up_expect(struct __test_metadata *_metadata, int fd,
		      const char *want)
{
	char *buf = malloc(BUF_MAX);
	bool eof;

	ASSERT_NE(NULL, buf);
	read_until(fd, buf, BUF_MAX, strlen(want), &eof);
	EXPECT_STREQ(want, buf);
	free(buf);
}

/*
 * One request through: upstream receives want, answers RESPONSE, and the
 * guest on g gets it as sent.
 */
static void exchange(struct __test_metadata *_metadata, int g, int up,
		     const char *want)
{
	char buf[4096];
	bool eof;

	up_expect(_metadata, up, want);
	ASSERT_EQ((ssize_t)strlen(RESPONSE),
		  send(up, RESPONSE, strlen(RESPONSE), 0));
	read_until(g, buf, sizeof(buf), strlen(RESPONSE), &eof);
	EXPECT_STREQ(RESPONSE, buf);
}

/*
 * The guest's connection g ends with an answer the proxy made: one that
 * begins with status_line and never holds the token; it into buf.
 */
static void expect_answer(struct __test_metadata *_metadata, int g, char *buf,
			  size_t len, const char *status_line)
{
	bool eof;

	read_until(g, buf, len, 0, &eof);
	EXPECT_TRUE(eof) TH_LOG("the guest's connection did not end");
	EXPECT_EQ(0, strncmp(buf, status_line, strlen(status_line)))
	TH_LOG("the guest got: %s", buf);
	EXPECT_EQ(NULL, strstr(buf, TOKEN));
}

static bool refused_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->http_refused >= n;
}

static uint64_t http_reason(const struct proxy_stats *s, const char *reason)
{
	for (unsigned int i = 0; i < s->nr_http_reasons; i++)
		if (!strcmp(s->http_reasons[i].reason, reason))
			return s->http_reasons[i].flows;
	return 0;
}

/*
 * A request the proxy refuses: the guest gets an error response with
 * status (and the connection's end), upstream nothing at all.
 */
static void expect_refused(struct __test_metadata *_metadata,
			   FIXTURE_DATA(ic) * self, const char *req,
			   const char *status_line, const char *reason)
{
	char buf[4096];
	struct proxy_stats s;
	uint64_t before, before_reason;
	int g;

	proxy__stats(self->proxy, &s);
	before = s.http_refused;
	before_reason = http_reason(&s, reason);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	expect_answer(_metadata, g, buf, sizeof(buf), status_line);
	EXPECT_NE(NULL, strstr(buf, reason)) TH_LOG("the guest got: %s", buf);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least,
					 before + 1, &s));
	EXPECT_EQ(before_reason + 1, http_reason(&s, reason))
	TH_LOG("%s", reason);
	/* Decided before upstream was ever connected: nothing there. */
	EXPECT_FALSE(vmnet__wait_for(self->api, POLLIN, 0));
	close(g);
}

/* ---- the tests -------------------------------------------------------- */

/*
 * The seed's scenario: the guest's GET reaches upstream with the host's
 * token in place of its own, and the guest gets upstream's response as
 * it was sent, never the token.
 */
TEST_F_TIMEOUT(ic, request_gets_the_grant_header, 60)
{
	const char *req = "GET /user HTTP/1.1\r\n"
			  "Host: " API_HOST "\r\n"
			  "User-Agent: curl/7.88.1\r\n"
			  "Authorization: Bearer guest-own\r\n"
			  "Accept: */*\r\n"
			  "\r\n";
	const char *want = "GET /user HTTP/1.1\r\n"
			   "Host: " API_HOST "\r\n"
			   "User-Agent: curl/7.88.1\r\n"
			   "authorization: Bearer " TOKEN "\r\n"
			   "Accept: */*\r\n"
			   "\r\n";
	struct proxy_stats s;
	char buf[4096];
	int g, up;
	bool eof;

	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want);

	/* Both ends close: so does the flow. */
	close(up);
	read_until(g, buf, sizeof(buf), 0, &eof);
	EXPECT_TRUE(eof);
	EXPECT_EQ(0, strlen(buf));
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_allowed);
	EXPECT_EQ(1, s.tcp_intercepted);
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(0, s.http_refused);
	EXPECT_EQ(1, http_reason(&s, "http grant 0"));
	EXPECT_EQ(strlen(req), s.bytes_out);
	EXPECT_EQ(strlen(RESPONSE), s.bytes_in);
}

/* Keep-alive: each request on the connection gets the header. */
TEST_F_TIMEOUT(ic, keep_alive_requests_each_get_it, 60)
{
	const char *req1 = "GET /a HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *req2 = "POST /b HTTP/1.1\r\nHost: " API_HOST
			   ":80\r\nContent-Length: 4\r\n\r\nbody";
	const char *want1 = "GET /a HTTP/1.1\r\nHost: " API_HOST
			    "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	const char *want2 = "POST /b HTTP/1.1\r\nHost: " API_HOST
			    ":80\r\nContent-Length: 4\r\nauthorization: "
			    "Bearer " TOKEN "\r\n\r\nbody";
	struct proxy_stats s;
	int g, up;

	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req1);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want1);
	ASSERT_EQ((ssize_t)strlen(req2), send(g, req2, strlen(req2), 0));
	exchange(_metadata, g, up, want2);
	/* One connection upstream for both. */
	EXPECT_FALSE(vmnet__wait_for(self->api, POLLIN, 0));
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(2, s.http_allowed);
	EXPECT_EQ(1, s.tcp_intercepted);
	close(g);
	close(up);
}

/*
 * What the guest names is checked against the bindings and the grants:
 * a name DNS never bound to the address (421), one bound there that no
 * grant names (403), an address (421); nothing reaches upstream.
 */
TEST_F_TIMEOUT(ic, spoofed_or_ungranted_host_refused, 60)
{
	struct proxy_stats s;

	expect_refused(_metadata, self,
		       "GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n",
		       "HTTP/1.1 421 ", "http host mismatch");
	expect_refused(_metadata, self,
		       "GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n",
		       "HTTP/1.1 403 ", "http no grant");
	expect_refused(_metadata, self,
		       "GET / HTTP/1.1\r\nHost: " API_ADDR "\r\n\r\n",
		       "HTTP/1.1 421 ", "http host not a name");
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(3, s.http_refused);
	EXPECT_EQ(0, s.http_allowed);
	EXPECT_EQ(3, s.tcp_intercepted);
}

/* Bytes that are not HTTP fail closed: 400, and upstream sees nothing. */
TEST_F_TIMEOUT(ic, non_http_bytes_refused, 60)
{
	expect_refused(_metadata, self, "SSH-2.0-OpenSSH_9.2\r\n\r\n",
		       "HTTP/1.1 400 ", "malformed request");
	expect_refused(_metadata, self,
		       "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
		       "HTTP/1.1 400 ", "malformed request");
}

/*
 * A refused request after an allowed one, in one write: the first goes
 * upstream and its response back, then the guest gets the refusal.
 */
TEST_F_TIMEOUT(ic, refusal_answers_after_earlier_responses, 60)
{
	const char *reqs = "GET /a HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n"
			   "GET /b HTTP/1.1\r\nHost: other.example.test\r\n"
			   "\r\n";
	const char *want = "GET /a HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	char buf[4096];
	int g, up;
	bool eof;

	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, reqs);
	up = proxyfix__up_accept(_metadata, self->api);
	up_expect(_metadata, up, want);
	ASSERT_EQ((ssize_t)strlen(RESPONSE),
		  send(up, RESPONSE, strlen(RESPONSE), 0));
	read_until(g, buf, sizeof(buf), 0, &eof);
	EXPECT_TRUE(eof);
	EXPECT_EQ(0, strncmp(buf, RESPONSE, strlen(RESPONSE)))
	TH_LOG("the guest got: %s", buf);
	EXPECT_NE(NULL, strstr(buf + strlen(RESPONSE), "HTTP/1.1 421 "))
	TH_LOG("the guest got: %s", buf);
	EXPECT_EQ(NULL, strstr(buf, TOKEN));
	/* The second request never went: upstream sees the end. */
	read_until(up, buf, sizeof(buf), 0, &eof);
	EXPECT_TRUE(eof);
	EXPECT_EQ(0, strlen(buf));
	close(g);
	close(up);
}

/* Upstream unreachable on a granted port: the guest gets a 502. */
TEST_F_TIMEOUT(ic, upstream_unreachable_is_502, 60)
{
	const char *req = "GET / HTTP/1.1\r\nHost: " API_HOST ":8080\r\n\r\n";
	struct proxy_stats s;
	char buf[4096];
	int g;

	g = guest_send(_metadata, self, API_ADDR, CLOSED_PORT, req);
	expect_answer(_metadata, g, buf, sizeof(buf), "HTTP/1.1 502 ");
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.upstream_failed);
	EXPECT_EQ(1, s.http_allowed);
}

/* The proxy again, upstream's response deadline made short. */
static void proxy_quick_deadline(struct __test_metadata *_metadata,
				 FIXTURE_DATA(ic) * self)
{
	proxy__destroy(self->proxy);
	self->proxy = NULL;
	self->response_ms = QUICK_DEADLINE_MS;
	proxy_up(_metadata, self, false);
}

static bool upstream_failed_at_least(const struct proxy_stats *s, uint64_t n)
{
	return s->upstream_failed >= n;
}

/*
 * Upstream takes the request and says nothing: past the deadline the
 * guest gets a 504 and the connection's end, the host counts it, and
 * nothing of the request (the token) is in the answer.
 */
TEST_F_TIMEOUT(ic, upstream_silent_is_504, 60)
{
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want = "GET /user HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	struct proxy_stats s;
	char buf[4096];
	int g, up;

	proxy_quick_deadline(_metadata, self);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->api);
	up_expect(_metadata, up, want);
	expect_answer(_metadata, g, buf, sizeof(buf), "HTTP/1.1 504 ");
	EXPECT_NE(NULL, strstr(buf, "upstream timed out"))
	TH_LOG("the guest got: %s", buf);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, upstream_failed_at_least,
					 1, &s));
	EXPECT_EQ(1, s.http_allowed);
	/* Upstream's side is closed with it. */
	EXPECT_EQ(0U, read_until(up, buf, sizeof(buf), 0, &(bool){ false }));
	close(g);
	close(up);
}

/*
 * Upstream that answered a keep-alive request, then owes the next and
 * says nothing: the first response reached the guest whole, the second
 * request gets the 504 after it.
 */
TEST_F_TIMEOUT(ic, upstream_silent_on_the_second_request_is_504, 60)
{
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want = "GET /user HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	char buf[4096];
	int g, up;

	proxy_quick_deadline(_metadata, self);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want);
	ASSERT_EQ((ssize_t)strlen(req), send(g, req, strlen(req), 0));
	up_expect(_metadata, up, want);
	expect_answer(_metadata, g, buf, sizeof(buf), "HTTP/1.1 504 ");
	close(g);
	close(up);
}

/*
 * Upstream stops in the middle of a response: a 504 cannot follow what
 * the guest already has, so both sides are reset (no FIN).
 */
TEST_F_TIMEOUT(ic, upstream_silent_mid_response_is_reset, 60)
{
	static const char part[] =
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel";
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	struct proxy_stats s;
	char buf[4096];
	bool eof;
	int g, up;

	proxy_quick_deadline(_metadata, self);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->api);
	ASSERT_EQ((ssize_t)sizeof(part) - 1,
		  send(up, part, sizeof(part) - 1, 0));
	EXPECT_EQ(sizeof(part) - 1, read_until(g, buf, sizeof(buf), 0, &eof));
	EXPECT_STREQ(part, buf);
	EXPECT_FALSE(eof) TH_LOG("a FIN would pass the part as the whole");
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, upstream_failed_at_least,
					 1, &s));
	close(g);
	close(up);
}

/*
 * Where the DNS bound no granted name, the http grant does not apply:
 * the tcp rule relays RAW_ADDR's bytes as they are (no header), and an
 * address nothing grants is reset.
 */
TEST_F_TIMEOUT(ic, unbound_destination_not_intercepted, 60)
{
	const char *req = "GET / HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	struct proxy_stats s;
	int g, up;

	g = guest_send(_metadata, self, RAW_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->raw);
	up_expect(_metadata, up, req);
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(0, s.tcp_intercepted);
	EXPECT_EQ(1, s.tcp_allowed);
	close(g);
	close(up);

	/* The granted name is bound elsewhere too; not to this address. */
	ASSERT_EQ(0, net_bindings__insert(self->policy.bindings, API_HOST,
					  inet_addr("198.51.100.8"), 600));
	g = vmnet__guest_socket(_metadata, &self->net, SOCK_STREAM);
	{
		struct sockaddr_in a = vmnet__sin("198.51.100.9", HTTP_PORT);

		connect(g, (struct sockaddr *)&a, sizeof(a));
	}
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy,
					 proxyfix__tcp_denied_at_least, 1, &s));
	EXPECT_EQ(0, s.tcp_intercepted);
	close(g);
}

/*
 * A policy replaced: an intercepted flow stays while an http grant still
 * covers it (the new grant's header then), and is cut when none does.
 */
TEST_F_TIMEOUT(ic, recheck_keeps_or_cuts_intercepted_flows, 60)
{
	const char *req = "GET / HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want1 = "GET / HTTP/1.1\r\nHost: " API_HOST
			    "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	const char *want2 = "GET / HTTP/1.1\r\nHost: " API_HOST
			    "\r\nx-new: rotated\r\n\r\n";
	struct proxy_stats s;
	char buf[4096];
	int g, up;
	bool eof;

	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want1);

	ASSERT_EQ(0, setenv("KILN_TEST_INTERCEPT_NEW", "rotated", 1));
	proxyfix__policy_set(
		_metadata, &self->policy,
		"{\"http\": [{\"host\": \"" API_HOST
		"\", \"clearText\": true, \"headers\": "
		"{\"x-new\": {\"from\": \"env:KILN_TEST_INTERCEPT_NEW\"}}}]}");
	proxy__recheck(self->proxy);
	/* The same connection, the new policy's field. */
	ASSERT_EQ((ssize_t)strlen(req), send(g, req, strlen(req), 0));
	exchange(_metadata, g, up, want2);

	proxyfix__policy_set(_metadata, &self->policy,
			     "{\"tcp\": [{\"to\": \"" API_ADDR "\"}]}");
	proxy__recheck(self->proxy);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_cut);
	read_until(g, buf, sizeof(buf), 0, &eof);
	close(g);
	close(up);
	unsetenv("KILN_TEST_INTERCEPT_NEW");
}

/* ---- TLS --------------------------------------------------------------- */

/* After -EAGAIN from a TLS call: waits for what it wants; false: timeout. */
static bool tls_wait(struct tls_conn *c, int fd)
{
	return vmnet__wait_for(fd, (short)tls_conn__wants(c), TIMEOUT_MS);
}

static int tls_handshake(struct tls_conn *c, int fd)
{
	int ret;

	while ((ret = tls_conn__handshake(c)) == -EAGAIN)
		if (!tls_wait(c, fd))
			return -ETIMEDOUT;
	return ret;
}

static int tls_write_all(struct tls_conn *c, int fd, const char *s)
{
	ssize_t ret;

	while ((ret = tls_conn__write(c, s, strlen(s))) == -EAGAIN)
		if (!tls_wait(c, fd))
			return -ETIMEDOUT;
	return ret < 0 ? (int)ret : 0;
}

/*
 * Reads until buf holds want bytes (0: until the end), the end, a
 * failure or the timeout: how many, NUL-terminated; *end: the peer's
 * end (or a failure) was seen.
 */
static size_t tls_read_until(struct tls_conn *c, int fd, char *buf, size_t len,
			     size_t want, bool *end)
{
	size_t n = 0;
	ssize_t r;

	*end = false;
	while (n + 1 < len && (!want || n < want)) {
		r = tls_conn__read(c, buf + n, len - 1 - n);
		if (r == -EAGAIN) {
			if (!tls_wait(c, fd))
				break;
			continue;
		}
		if (r <= 0) {
			*end = true;
			break;
		}
		n += r;
	}
	buf[n] = '\0';
	return n;
}

/*
 * The guest's TLS connection to API_ADDR:443 naming sni, offering alpn:
 * its ClientHello sent, the rest of the handshake to come (the proxy
 * answers it once upstream's handshake is done).
 */
static struct tls_conn *guest_tls_alpn(struct __test_metadata *_metadata,
				       FIXTURE_DATA(ic) * self, const char *sni,
				       const char *alpn, int *fd)
{
	struct tls_connect_params cp = { .host = sni, .alpn = alpn };
	struct tls_conn *c;

	*fd = guest_send(_metadata, self, API_ADDR, HTTPS_PORT, NULL);
	ASSERT_EQ(0, tls_conn__connect(&c, self->tls.guest_cli, *fd, &cp));
	/*
	 * Not done before upstream's handshake; a refusal (the proxy's
	 * alert) may already be in: kept, for the next call to return.
	 */
	ASSERT_NE(0, tls_conn__handshake(c));
	return c;
}

static struct tls_conn *guest_tls(struct __test_metadata *_metadata,
				  FIXTURE_DATA(ic) * self, const char *sni,
				  int *fd)
{
	return guest_tls_alpn(_metadata, self, sni, "http/1.1", fd);
}

static bool any_name(void *opaque, const char *sni)
{
	return true;
}

/*
 * Upstream's side of the proxy's connection, TLS by srv offering alpn
 * (a list); not shaken.
 */
static struct tls_conn *up_tls_alpn(struct __test_metadata *_metadata,
				    FIXTURE_DATA(ic) * self,
				    struct tls_server *srv, const char *alpn,
				    int *fd)
{
	struct tls_accept_params ap = { .sni_ok = any_name, .alpn = alpn };
	struct tls_conn *c;

	*fd = proxyfix__up_accept(_metadata, self->api_tls);
	ASSERT_EQ(0, fcntl(*fd, F_SETFL, O_NONBLOCK));
	ASSERT_EQ(0, tls_conn__accept(&c, srv, *fd, &ap));
	return c;
}

static struct tls_conn *up_tls(struct __test_metadata *_metadata,
			       FIXTURE_DATA(ic) * self, struct tls_server *srv,
			       int *fd)
{
	return up_tls_alpn(_metadata, self, srv, "http/1.1", fd);
}

/*
 * The order of an intercepted TLS flow: the guest's ClientHello, then
 * upstream's connection (its SNI the guest's) and handshake (by the
 * test's upstream server, HTTP/1.1), then the guest's handshake; then
 * the guest sends req. Upstream's side into *u, *ufd.
 */
static struct tls_conn *guest_tls_send(struct __test_metadata *_metadata,
				       FIXTURE_DATA(ic) * self, const char *req,
				       int *fd, struct tls_conn **u, int *ufd)
{
	struct tls_conn *c = guest_tls(_metadata, self, API_HOST, fd);

	*u = up_tls(_metadata, self, self->tls.up_srv, ufd);
	ASSERT_EQ(0, tls_handshake(*u, *ufd)) TH_LOG("%s", tls_conn__error(*u));
	EXPECT_STREQ(API_HOST, tls_conn__sni(*u));
	ASSERT_EQ(0, tls_handshake(c, *fd)) TH_LOG("%s", tls_conn__error(c));
	ASSERT_EQ(0, tls_write_all(c, *fd, req));
	return c;
}

/*
 * HTTPS: the guest's handshake with a certificate of the VM's CA for its
 * SNI, its GET reaching upstream (verified, SNI the same name) with the
 * grant's header, upstream's response back. Run with the proxy thread
 * free, and under the vmm's seccomp filter, which refuses to open files
 * (wolfSSL's connections and leaves are made on the netns thread).
 */
static void https_round_trip(struct __test_metadata *_metadata,
			     FIXTURE_DATA(ic) * self)
{
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST
			  "\r\nAuthorization: Bearer guest-own\r\n\r\n";
	const char *want = "GET /user HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	struct tls_conn *g, *u;
	struct proxy_stats s;
	char buf[4096];
	int gfd, ufd;
	bool end;

	g = guest_tls_send(_metadata, self, req, &gfd, &u, &ufd);
	EXPECT_STREQ("http/1.1", tls_conn__alpn(g));
	tls_read_until(u, ufd, buf, sizeof(buf), strlen(want), &end);
	EXPECT_STREQ(want, buf);
	ASSERT_EQ(0, tls_write_all(u, ufd, RESPONSE));
	tls_read_until(g, gfd, buf, sizeof(buf), strlen(RESPONSE), &end);
	EXPECT_STREQ(RESPONSE, buf);

	/* Upstream's close_notify reaches the guest as one. */
	ASSERT_EQ(0, tls_conn__shutdown(u));
	shutdown(ufd, SHUT_WR);
	EXPECT_EQ(0, tls_read_until(g, gfd, buf, sizeof(buf), 0, &end));
	EXPECT_TRUE(end);
	EXPECT_EQ(0, tls_conn__read(g, buf, sizeof(buf)));
	tls_conn__free(g);
	tls_conn__free(u);
	close(gfd);
	close(ufd);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_intercepted);
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(0, s.http_refused);
	EXPECT_EQ(0, s.upstream_failed);
}

TEST_F_TIMEOUT(ic, https_request_gets_the_grant_header, 60)
{
	https_round_trip(_metadata, self);
}

TEST_F_TIMEOUT(ic, https_under_the_vmm_seccomp_filter, 60)
{
	proxy__destroy(self->proxy);
	self->proxy = NULL;
	proxy_up(_metadata, self, true);
	https_round_trip(_metadata, self);
}

/*
 * An SNI DNS never bound to the address, or bound but not granted: the
 * handshake is aborted before any certificate, upstream gets nothing.
 */
TEST_F_TIMEOUT(ic, https_sni_refused, 60)
{
	static const char *const names[] = { "evil.example.test",
					     "other.example.test" };
	static const char *const reasons[] = { "http host mismatch",
					       "http no grant" };
	struct tls_conn *g;
	struct proxy_stats s;
	int gfd;

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		g = guest_tls(_metadata, self, names[i], &gfd);
		EXPECT_EQ(-EPROTO, tls_handshake(g, gfd))
		TH_LOG("%s", tls_conn__error(g));
		ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least,
						 i + 1, &s));
		EXPECT_EQ(1, http_reason(&s, reasons[i]))
		TH_LOG("%s", names[i]);
		tls_conn__free(g);
		close(gfd);
	}
	EXPECT_FALSE(vmnet__wait_for(self->api_tls, POLLIN, 0));
	EXPECT_EQ(0, s.http_allowed);
}

/*
 * Over TLS, Host must name the SNI's host: 421. Upstream was connected
 * for the SNI, before the guest's handshake; it gets no request.
 */
TEST_F_TIMEOUT(ic, https_host_must_be_the_sni, 60)
{
	const char *req = "GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n";
	struct tls_conn *g, *u;
	char buf[4096];
	bool end;
	int gfd, ufd;

	g = guest_tls_send(_metadata, self, req, &gfd, &u, &ufd);
	tls_read_until(g, gfd, buf, sizeof(buf), 0, &end);
	EXPECT_TRUE(end);
	EXPECT_EQ(0, strncmp(buf, "HTTP/1.1 421 ", strlen("HTTP/1.1 421 ")))
	TH_LOG("the guest got: %s", buf);
	EXPECT_EQ(0, tls_read_until(u, ufd, buf, sizeof(buf), 0, &end));
	EXPECT_TRUE(end);
	tls_conn__free(g);
	tls_conn__free(u);
	close(gfd);
	close(ufd);
}

/* Upstream's certificate from a CA the bundle lacks: the guest gets 502. */
TEST_F_TIMEOUT(ic, https_untrusted_upstream_is_502, 60)
{
	const char *req = "GET / HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	struct tls_conn *g, *u;
	struct proxy_stats s;
	char buf[4096];
	int gfd, ufd;
	bool end;

	g = guest_tls(_metadata, self, API_HOST, &gfd);
	u = up_tls(_metadata, self, self->tls.evil_srv, &ufd);
	EXPECT_NE(0, tls_handshake(u, ufd));
	/* The guest's handshake goes on, its request gets the 502. */
	ASSERT_EQ(0, tls_handshake(g, gfd)) TH_LOG("%s", tls_conn__error(g));
	ASSERT_EQ(0, tls_write_all(g, gfd, req));
	tls_read_until(g, gfd, buf, sizeof(buf), 0, &end);
	EXPECT_TRUE(end);
	EXPECT_EQ(0, strncmp(buf, "HTTP/1.1 502 ", strlen("HTTP/1.1 502 ")))
	TH_LOG("the guest got: %s", buf);
	EXPECT_NE(NULL, strstr(buf, "upstream certificate not trusted"));
	EXPECT_EQ(NULL, strstr(buf, TOKEN));
	tls_conn__free(g);
	tls_conn__free(u);
	close(gfd);
	close(ufd);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.upstream_failed);
}

/* Plain HTTP on the TLS port fails closed: no answer, nothing upstream. */
TEST_F_TIMEOUT(ic, https_port_plain_bytes_fail_closed, 60)
{
	struct proxy_stats s;
	char buf[4096];
	bool eof;
	int g;

	g = guest_send(_metadata, self, API_ADDR, HTTPS_PORT,
		       "GET / HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n");
	read_until(g, buf, sizeof(buf), 0, &eof);
	EXPECT_EQ(NULL, strstr(buf, "HTTP/1.1"));
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least, 1, &s));
	EXPECT_EQ(1, http_reason(&s, "tls handshake failed"));
	EXPECT_FALSE(vmnet__wait_for(self->api_tls, POLLIN, 0));
	close(g);
}

/* ---- HTTP/2 ------------------------------------------------------------ */

#define H2_STREAMS 2 /* the guest's: ids 1 and 3 */

/* One end of an HTTP/2 connection in the test: nghttp2 over a tls_conn. */
struct h2end {
	nghttp2_session *s;
	struct tls_conn *c;
	int fd;
	bool server;
	char head[H2_STREAMS][2048];
	size_t head_len[H2_STREAMS];
	char body[H2_STREAMS][256];
	size_t body_len[H2_STREAMS];
	int closed;
	bool eof;
	bool silent; /* upstream: takes requests, answers none */
};

static int h2end_idx(int32_t id)
{
	return id > 0 && id / 2 < H2_STREAMS ? id / 2 : -1;
}

static ssize_t h2end_hello(nghttp2_session *sess, int32_t id, uint8_t *buf,
			   size_t len, uint32_t *flags,
			   nghttp2_data_source *src, void *ud)
{
	memcpy(buf, "hello", 5);
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	return 5;
}

static int h2end_header(nghttp2_session *sess, const nghttp2_frame *fr,
			const uint8_t *n, size_t nlen, const uint8_t *v,
			size_t vlen, uint8_t flags, void *ud)
{
	struct h2end *e = ud;
	int i = h2end_idx(fr->hd.stream_id);
	size_t *len;

	if (i < 0)
		return 0;
	len = &e->head_len[i];
	*len += snprintf(e->head[i] + *len, sizeof(e->head[i]) - *len,
			 "%.*s: %.*s\n", (int)nlen, n, (int)vlen, v);
	if (*len >= sizeof(e->head[i]))
		*len = sizeof(e->head[i]) - 1;
	return 0;
}

static int h2end_data(nghttp2_session *sess, uint8_t flags, int32_t id,
		      const uint8_t *d, size_t len, void *ud)
{
	struct h2end *e = ud;
	int i = h2end_idx(id);

	if (i >= 0 && e->body_len[i] + len < sizeof(e->body[i])) {
		memcpy(e->body[i] + e->body_len[i], d, len);
		e->body_len[i] += len;
	}
	return 0;
}

/* Upstream answers every request, once it is complete: 200, "hello". */
static int h2end_frame(nghttp2_session *sess, const nghttp2_frame *fr, void *ud)
{
	struct h2end *e = ud;
	nghttp2_data_provider prd = { .read_callback = h2end_hello };
	nghttp2_nv nv = { (uint8_t *)":status", (uint8_t *)"200", 7, 3, 0 };

	if (e->server && !e->silent && fr->hd.flags & NGHTTP2_FLAG_END_STREAM &&
	    (fr->hd.type == NGHTTP2_HEADERS || fr->hd.type == NGHTTP2_DATA))
		nghttp2_submit_response(sess, fr->hd.stream_id, &nv, 1, &prd);
	return 0;
}

static int h2end_close(nghttp2_session *sess, int32_t id, uint32_t code,
		       void *ud)
{
	((struct h2end *)ud)->closed++;
	return 0;
}

static void h2end_init(struct __test_metadata *_metadata, struct h2end *e,
		       struct tls_conn *c, int fd, bool server)
{
	nghttp2_session_callbacks *cb;

	memset(e, 0, sizeof(*e));
	e->c = c;
	e->fd = fd;
	e->server = server;
	ASSERT_EQ(0, nghttp2_session_callbacks_new(&cb));
	nghttp2_session_callbacks_set_on_header_callback(cb, h2end_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
								  h2end_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2end_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2end_close);
	if (server)
		ASSERT_EQ(0, nghttp2_session_server_new(&e->s, cb, e));
	else
		ASSERT_EQ(0, nghttp2_session_client_new(&e->s, cb, e));
	nghttp2_session_callbacks_del(cb);
	ASSERT_EQ(0, nghttp2_submit_settings(e->s, 0, NULL, 0));
}

/* What the session has to send, sent; what came, read: -errno, or 0. */
static int h2end_io(struct h2end *e)
{
	const uint8_t *d;
	uint8_t buf[4096];
	ssize_t n, r;

	while ((n = nghttp2_session_mem_send(e->s, &d)) > 0)
		while ((r = tls_conn__write(e->c, d, n)) == -EAGAIN)
			if (!tls_wait(e->c, e->fd))
				return -ETIMEDOUT;
	if (n < 0)
		return -EPROTO;
	while (!e->eof) {
		r = tls_conn__read(e->c, buf, sizeof(buf));
		if (r == -EAGAIN)
			break;
		if (r <= 0) {
			e->eof = true;
			break;
		}
		if (nghttp2_session_mem_recv(e->s, buf, r) < 0)
			return -EPROTO;
	}
	return 0;
}

/* Both ends moved until the guest saw `closed` streams end. */
static bool h2_run(struct h2end *g, struct h2end *u, int closed)
{
	for (int i = 0; i < TIMEOUT_MS / 10 && g->closed < closed; i++) {
		struct pollfd p[2] = { { .fd = g->fd, .events = POLLIN },
				       { .fd = u ? u->fd : -1,
					 .events = POLLIN } };

		if (h2end_io(g) || (u && h2end_io(u)))
			return false;
		if (g->eof)
			break;
		poll(p, 2, 10);
	}
	return g->closed >= closed;
}

/*
 * A guest offering h2 and http/1.1 (as curl does), upstream's side by
 * the test's server offering h2 (into *uc, *ufd, shaken): the guest gets
 * h2 and sends two streams, one naming the SNI, one another host.
 */
static void h2_guest(struct __test_metadata *_metadata, FIXTURE_DATA(ic) * self,
		     struct h2end *g, struct tls_conn **uc, int *ufd)
{
	static const nghttp2_nv good[] = {
		{ (uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)API_HOST, 10,
		  sizeof(API_HOST) - 1, 0 },
		{ (uint8_t *)":path", (uint8_t *)"/user", 5, 5, 0 },
		{ (uint8_t *)"authorization", (uint8_t *)"Bearer guest-own", 13,
		  16, 0 },
	};
	static const nghttp2_nv spoof[] = {
		{ (uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"evil.example.test", 10,
		  17, 0 },
		{ (uint8_t *)":path", (uint8_t *)"/", 5, 1, 0 },
	};
	struct tls_conn *c;
	int fd;

	c = guest_tls_alpn(_metadata, self, API_HOST, "h2,http/1.1", &fd);
	*uc = up_tls_alpn(_metadata, self, self->tls.up_srv, "h2", ufd);
	ASSERT_EQ(0, tls_handshake(*uc, *ufd))
	TH_LOG("%s", tls_conn__error(*uc));
	EXPECT_STREQ("h2", tls_conn__alpn(*uc));
	ASSERT_EQ(0, tls_handshake(c, fd)) TH_LOG("%s", tls_conn__error(c));
	ASSERT_STREQ("h2", tls_conn__alpn(c));
	h2end_init(_metadata, g, c, fd, false);
	ASSERT_EQ(1, nghttp2_submit_request(g->s, NULL, good, ARRAY_SIZE(good),
					    NULL, NULL));
	ASSERT_EQ(3, nghttp2_submit_request(g->s, NULL, spoof,
					    ARRAY_SIZE(spoof), NULL, NULL));
	ASSERT_EQ(0, h2end_io(g));
}

static void h2end_free(struct h2end *e)
{
	nghttp2_session_del(e->s);
	tls_conn__free(e->c);
	if (e->fd >= 0)
		close(e->fd);
}

/*
 * HTTP/2 over TLS: upstream chooses h2, so the guest may (and does); the
 * stream naming the SNI reaches upstream with the grant's header in
 * place of the guest's, the stream naming another host gets 421 on the
 * same connection.
 */
TEST_F_TIMEOUT(ic, https_h2_streams_each_decided, 60)
{
	struct h2end g, u;
	struct proxy_stats s;
	struct tls_conn *uc;
	int ufd;

	h2_guest(_metadata, self, &g, &uc, &ufd);
	h2end_init(_metadata, &u, uc, ufd, true);
	ASSERT_TRUE(h2_run(&g, &u, 2));
	EXPECT_NE(NULL, strstr(u.head[0], "authorization: Bearer " TOKEN "\n"))
	TH_LOG("upstream got:\n%s", u.head[0]);
	EXPECT_EQ(NULL, strstr(u.head[0], "guest-own"));
	EXPECT_NE(NULL, strstr(u.head[0], ":path: /user\n"));
	EXPECT_EQ(0U, u.head_len[1]);
	EXPECT_NE(NULL, strstr(g.head[0], ":status: 200\n"));
	EXPECT_EQ(5U, g.body_len[0]);
	EXPECT_EQ(0, memcmp(g.body[0], "hello", 5));
	EXPECT_NE(NULL, strstr(g.head[1], ":status: 421\n"))
	TH_LOG("guest's second stream got:\n%s", g.head[1]);
	h2end_free(&g);
	h2end_free(&u);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_intercepted);
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(1, s.http_refused);
}

/*
 * h2, upstream takes the guest's stream and answers nothing: past the
 * deadline that stream gets a 504 on the same connection (the other,
 * refused, its 421), and upstream's stream is cancelled.
 */
TEST_F_TIMEOUT(ic, https_h2_silent_upstream_stream_is_504, 60)
{
	struct h2end g, u;
	struct proxy_stats s;
	struct tls_conn *uc;
	int ufd;

	proxy_quick_deadline(_metadata, self);
	h2_guest(_metadata, self, &g, &uc, &ufd);
	h2end_init(_metadata, &u, uc, ufd, true);
	u.silent = true;
	ASSERT_TRUE(h2_run(&g, &u, 2));
	EXPECT_NE(NULL, strstr(u.head[0], ":path: /user\n"));
	EXPECT_NE(NULL, strstr(g.head[0], ":status: 504\n"))
	TH_LOG("guest's first stream got:\n%s", g.head[0]);
	EXPECT_EQ(strlen("upstream timed out\n"), g.body_len[0]);
	EXPECT_EQ(0, memcmp(g.body[0], "upstream timed out\n", g.body_len[0]));
	EXPECT_NE(NULL, strstr(g.head[1], ":status: 421\n"));
	for (int i = 0; i < TIMEOUT_MS / 10 && !u.closed && !u.eof; i++) {
		struct pollfd p = { .fd = u.fd, .events = POLLIN };

		ASSERT_EQ(0, h2end_io(&u));
		poll(&p, 1, 10);
	}
	EXPECT_EQ(1, u.closed) TH_LOG("upstream's stream was not cancelled");
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, upstream_failed_at_least,
					 1, &s));
	h2end_free(&g);
	h2end_free(&u);
}

/*
 * A guest offering h2 and http/1.1 (curl's default), upstream speaking
 * HTTP/1.1 only: the guest is offered http/1.1 alone, and its GET gets
 * upstream's 200 with the grant's header upstream (it got 502 when the
 * guest was offered h2 before upstream was asked).
 */
TEST_F_TIMEOUT(ic, https_h2_guest_gets_http11_from_an_http11_upstream, 60)
{
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want = "GET /user HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	struct tls_conn *g, *u;
	struct proxy_stats s;
	char buf[4096];
	int gfd, ufd;
	bool end;

	g = guest_tls_alpn(_metadata, self, API_HOST, "h2,http/1.1", &gfd);
	u = up_tls_alpn(_metadata, self, self->tls.up_srv, "http/1.1", &ufd);
	ASSERT_EQ(0, tls_handshake(u, ufd)) TH_LOG("%s", tls_conn__error(u));
	EXPECT_STREQ("http/1.1", tls_conn__alpn(u));
	ASSERT_EQ(0, tls_handshake(g, gfd)) TH_LOG("%s", tls_conn__error(g));
	EXPECT_STREQ("http/1.1", tls_conn__alpn(g));
	ASSERT_EQ(0, tls_write_all(g, gfd, req));
	tls_read_until(u, ufd, buf, sizeof(buf), strlen(want), &end);
	EXPECT_STREQ(want, buf);
	ASSERT_EQ(0, tls_write_all(u, ufd, RESPONSE));
	tls_read_until(g, gfd, buf, sizeof(buf), strlen(RESPONSE), &end);
	EXPECT_STREQ(RESPONSE, buf);
	tls_conn__free(g);
	tls_conn__free(u);
	close(gfd);
	close(ufd);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(0, s.upstream_failed);
}

/*
 * A guest offering http/1.1 only, upstream choosing h2 when offered
 * both: the guest gets http/1.1, the h2 connection goes unused, and its
 * request gets a new upstream connection offered http/1.1 only.
 */
TEST_F_TIMEOUT(ic, https_http11_guest_with_an_h2_upstream, 60)
{
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want = "GET /user HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	struct tls_conn *g, *u, *u2;
	struct proxy_stats s;
	char buf[4096];
	int gfd, ufd, ufd2;
	bool end;

	g = guest_tls(_metadata, self, API_HOST, &gfd);
	u = up_tls_alpn(_metadata, self, self->tls.up_srv, "h2,http/1.1", &ufd);
	ASSERT_EQ(0, tls_handshake(u, ufd)) TH_LOG("%s", tls_conn__error(u));
	EXPECT_STREQ("h2", tls_conn__alpn(u));
	ASSERT_EQ(0, tls_handshake(g, gfd)) TH_LOG("%s", tls_conn__error(g));
	EXPECT_STREQ("http/1.1", tls_conn__alpn(g));
	/* The h2 connection ends without a byte of a request. */
	EXPECT_EQ(0, tls_read_until(u, ufd, buf, sizeof(buf), 0, &end));
	EXPECT_TRUE(end);
	ASSERT_EQ(0, tls_write_all(g, gfd, req));
	u2 = up_tls_alpn(_metadata, self, self->tls.up_srv, "h2,http/1.1",
			 &ufd2);
	ASSERT_EQ(0, tls_handshake(u2, ufd2)) TH_LOG("%s", tls_conn__error(u2));
	EXPECT_STREQ("http/1.1", tls_conn__alpn(u2));
	tls_read_until(u2, ufd2, buf, sizeof(buf), strlen(want), &end);
	EXPECT_STREQ(want, buf);
	ASSERT_EQ(0, tls_write_all(u2, ufd2, RESPONSE));
	tls_read_until(g, gfd, buf, sizeof(buf), strlen(RESPONSE), &end);
	EXPECT_STREQ(RESPONSE, buf);
	tls_conn__free(g);
	tls_conn__free(u);
	tls_conn__free(u2);
	close(gfd);
	close(ufd);
	close(ufd2);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(0, s.upstream_failed);
}

/*
 * A ClientHello that never completes (a record header announcing more
 * than ever comes): the flow is reset at the setup's deadline, counted
 * as a failed handshake, nothing upstream.
 */
TEST_F_TIMEOUT(ic, https_clienthello_never_completes_is_cut, 60)
{
	static const char partial[] = "\x16\x03\x01\x02\x00\x01\x00";
	struct proxy_stats s;
	char buf[256];
	bool eof;
	int g;

	proxy__destroy(self->proxy);
	self->proxy = NULL;
	self->tls_setup_ms = 200;
	proxy_up(_metadata, self, false);
	g = guest_send(_metadata, self, API_ADDR, HTTPS_PORT, NULL);
	ASSERT_EQ((ssize_t)sizeof(partial) - 1,
		  send(g, partial, sizeof(partial) - 1, 0));
	/* Reset: no FIN, no bytes, well within the wait. */
	EXPECT_EQ(0U, read_until(g, buf, sizeof(buf), 0, &eof));
	EXPECT_FALSE(eof);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, http_reason(&s, "tls handshake failed"));
	EXPECT_FALSE(vmnet__wait_for(self->api_tls, POLLIN, 0));
	close(g);
}

/*
 * A whole TLS record of garbage where the ClientHello should be: the
 * handshake fails as it always did, nothing upstream.
 */
TEST_F_TIMEOUT(ic, https_garbage_hello_fails_closed, 60)
{
	static const char garbage[] = "\x16\x03\x01\x00\x08\x01\x00\x00\x04"
				      "junk";
	struct proxy_stats s;
	char buf[256];
	bool eof;
	int g;

	g = guest_send(_metadata, self, API_ADDR, HTTPS_PORT, NULL);
	ASSERT_EQ((ssize_t)sizeof(garbage) - 1,
		  send(g, garbage, sizeof(garbage) - 1, 0));
	read_until(g, buf, sizeof(buf), 0, &eof);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least, 1, &s));
	EXPECT_EQ(1, http_reason(&s, "tls handshake failed"));
	EXPECT_EQ(0, s.http_allowed);
	EXPECT_FALSE(vmnet__wait_for(self->api_tls, POLLIN, 0));
	close(g);
}

/* ---- the hook, request by request ------------------------------------- */

#define HOOK_TOKEN "hook-t0ken-9c2a"

/* A grant of API_HOST whose authorization the hook sets; ask: its mode. */
static void hook_policy(struct __test_metadata *_metadata,
			FIXTURE_DATA(ic) * self, const char *socket,
			const char *ask, unsigned int timeout_ms)
{
	char doc[1024];

	snprintf(
		doc, sizeof(doc),
		"{\"http\": [{\"host\": \"" API_HOST "\", \"ports\": [80, "
		"443], \"clearText\": true,%s%s%s \"headers\": {\"Authorization\": {\"from\": "
		"\"hook\"}}}], \"hook\": {\"socket\": \"%s\", \"timeoutMs\": "
		"%u}}",
		ask ? " \"ask\": \"" : "", ask ? ask : "", ask ? "\"," : "",
		socket, timeout_ms);
	proxyfix__policy_set(_metadata, &self->policy, doc);
}

/*
 * The hook's next question: a request's, for url over protocol, that
 * holds nothing of the guest's credentials. Its id.
 */
static long long hook_question(struct __test_metadata *_metadata,
			       struct fakehook *fh, const char *url,
			       const char *protocol)
{
	char line[FAKEHOOK_LINE_MAX];
	long long id;
	json_t *q;

	ASSERT_LT(0, fakehook__read_line(fh, line, sizeof(line)));
	EXPECT_EQ(NULL, strstr(line, "guest-own")) TH_LOG("%s", line);
	EXPECT_EQ(NULL, strstr(line, "c=guest")) TH_LOG("%s", line);
	q = json_loads(line, 0, NULL);
	ASSERT_NE(NULL, q) TH_LOG("not JSON: %s", line);
	EXPECT_STREQ("http", json_string_value(json_object_get(q, "type")));
	EXPECT_STREQ(url, json_string_value(json_object_get(q, "url")));
	EXPECT_STREQ(protocol,
		     json_string_value(json_object_get(q, "protocol")));
	EXPECT_STREQ("GET", json_string_value(json_object_get(q, "method")));
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	return id;
}

/* grant-http: authorization set to "Bearer HOOK_TOKEN-n", cookie removed. */
static void hook_grant(struct __test_metadata *_metadata, struct fakehook *fh,
		       long long id, int n)
{
	char line[512];

	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", \"set\": "
		 "{\"authorization\": \"Bearer " HOOK_TOKEN "-%d\"}, "
		 "\"remove\": [\"cookie\"]}\n",
		 id, n);
	ASSERT_EQ(0, fakehook__send(fh, line));
}

/*
 * "ask": "request": each request is put to the hook, its answer applies
 * to it alone (a token each), the guest's own authorization and cookie
 * never reach upstream nor the hook, and nothing of the hook's answer
 * reaches the guest.
 */
TEST_F_TIMEOUT(ic, hook_headers_per_request_upstream_only, 60)
{
	const char *req = "GET /a HTTP/1.1\r\nHost: " API_HOST
			  "\r\nAuthorization: Bearer guest-own\r\nCookie: "
			  "c=guest\r\n\r\n";
	const char *want1 =
		"GET /a HTTP/1.1\r\nHost: " API_HOST
		"\r\nauthorization: Bearer " HOOK_TOKEN "-1\r\n\r\n";
	const char *want2 =
		"GET /a HTTP/1.1\r\nHost: " API_HOST
		"\r\nauthorization: Bearer " HOOK_TOKEN "-2\r\n\r\n";
	struct proxy_stats s;
	char buf[4096];
	int g, up;
	bool eof;

	hook_policy(_metadata, self, self->fh.path, "request", 5000);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	hook_grant(_metadata, &self->fh,
		   hook_question(_metadata, &self->fh, "http://" API_HOST "/a",
				 "HTTP/1.1"),
		   1);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want1);
	ASSERT_EQ((ssize_t)strlen(req), send(g, req, strlen(req), 0));
	hook_grant(_metadata, &self->fh,
		   hook_question(_metadata, &self->fh, "http://" API_HOST "/a",
				 "HTTP/1.1"),
		   2);
	exchange(_metadata, g, up, want2);
	close(up);
	read_until(g, buf, sizeof(buf), 0, &eof);
	EXPECT_TRUE(eof);
	EXPECT_EQ(NULL, strstr(buf, HOOK_TOKEN));
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(2, s.http_allowed);
	EXPECT_EQ(2, http_reason(&s, HOOK_GRANT));
	EXPECT_EQ(2, s.hook.questions);
	EXPECT_EQ(2, s.hook.answers);
}

/*
 * A field "from": "hook" without "ask": the connection's first request
 * is put to the hook, its answer serves the connection's others.
 */
TEST_F_TIMEOUT(ic, hook_asked_once_per_connection, 60)
{
	const char *req = "GET /a HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want = "GET /a HTTP/1.1\r\nHost: " API_HOST
			   "\r\nauthorization: Bearer " HOOK_TOKEN "-1\r\n\r\n";
	struct proxy_stats s;
	int g, up;

	hook_policy(_metadata, self, self->fh.path, NULL, 5000);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	hook_grant(_metadata, &self->fh,
		   hook_question(_metadata, &self->fh, "http://" API_HOST "/a",
				 "HTTP/1.1"),
		   1);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want);
	ASSERT_EQ((ssize_t)strlen(req), send(g, req, strlen(req), 0));
	exchange(_metadata, g, up, want);
	/* Decided before upstream got it: a question would be there now. */
	EXPECT_FALSE(fakehook__wait(self->fh.conn, POLLIN, 0));
	proxy__stats(self->proxy, &s);
	EXPECT_EQ(1, s.hook.questions);
	EXPECT_EQ(2, s.http_allowed);
	close(g);
	close(up);
}

/* The hook denies: 403 to the guest, nothing upstream, logged why. */
TEST_F_TIMEOUT(ic, hook_deny_is_403_nothing_upstream, 60)
{
	const char *req = "GET /a HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	struct proxy_stats s;
	char buf[4096];
	int g;

	hook_policy(_metadata, self, self->fh.path, "request", 5000);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	ASSERT_EQ(0, fakehook__answer(&self->fh,
				      hook_question(_metadata, &self->fh,
						    "http://" API_HOST "/a",
						    "HTTP/1.1"),
				      "deny", "not now"));
	expect_answer(_metadata, g, buf, sizeof(buf), "HTTP/1.1 403 ");
	EXPECT_NE(NULL, strstr(buf, HOOK_DENY)) TH_LOG("%s", buf);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least, 1, &s));
	EXPECT_EQ(1, http_reason(&s, HOOK_DENY));
	EXPECT_EQ(0, s.http_allowed);
	EXPECT_FALSE(vmnet__wait_for(self->api, POLLIN, 0));
	close(g);
}

/*
 * A hook that never answers (its deadline passes) and one that is not
 * there: 403 each, nothing upstream.
 */
TEST_F_TIMEOUT(ic, hook_timeout_or_unreachable_is_403, 60)
{
	const char *req = "GET /a HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";

	/* Listening, never accepting: the question waits in its socket. */
	hook_policy(_metadata, self, self->fh.path, "request", 50);
	expect_refused(_metadata, self, req, "HTTP/1.1 403 ", HOOK_TIMEOUT);
	hook_policy(_metadata, self, "/nonexistent/kiln/hook.sock", "request",
		    5000);
	expect_refused(_metadata, self, req, "HTTP/1.1 403 ", HOOK_UNREACHABLE);
}

/*
 * HTTP/2: the stream naming the SNI waits for the hook (asked with
 * protocol h2) and reaches upstream with its field in place of the
 * guest's; the spoofed stream gets 421 without asking.
 */
TEST_F_TIMEOUT(ic, hook_headers_on_an_h2_stream, 60)
{
	struct h2end g, u;
	struct proxy_stats s;
	struct tls_conn *uc;
	int ufd;

	hook_policy(_metadata, self, self->fh.path, "request", 5000);
	h2_guest(_metadata, self, &g, &uc, &ufd);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	hook_grant(_metadata, &self->fh,
		   hook_question(_metadata, &self->fh,
				 "https://" API_HOST "/user", "h2"),
		   1);
	h2end_init(_metadata, &u, uc, ufd, true);
	ASSERT_TRUE(h2_run(&g, &u, 2));
	EXPECT_NE(NULL,
		  strstr(u.head[0], "authorization: Bearer " HOOK_TOKEN "-1\n"))
	TH_LOG("upstream got:\n%s", u.head[0]);
	EXPECT_EQ(NULL, strstr(u.head[0], "guest-own"));
	EXPECT_NE(NULL, strstr(g.head[0], ":status: 200\n"));
	EXPECT_EQ(NULL, strstr(g.head[0], HOOK_TOKEN));
	EXPECT_NE(NULL, strstr(g.head[1], ":status: 421\n"));
	h2end_free(&g);
	h2end_free(&u);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.hook.questions);
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(1, http_reason(&s, HOOK_GRANT));
}

/* ---- the hook decides interception (issue 31) ------------------------- */

/* A policy of a hook alone: no rule, no grant. */
static void hook_only_policy(struct __test_metadata *_metadata,
			     FIXTURE_DATA(ic) * self)
{
	char doc[512];

	snprintf(doc, sizeof(doc),
		 "{\"hook\": {\"socket\": \"%s\", \"timeoutMs\": 5000}}",
		 self->fh.path);
	proxyfix__policy_set(_metadata, &self->policy, doc);
}

/* The hook's next line, parsed (the caller frees it). */
static json_t *hook_line(struct __test_metadata *_metadata, struct fakehook *fh)
{
	char line[FAKEHOOK_LINE_MAX];
	json_t *q;

	ASSERT_LT(0, fakehook__read_line(fh, line, sizeof(line)));
	q = json_loads(line, 0, NULL);
	ASSERT_NE(NULL, q) TH_LOG("not JSON: %s", line);
	return q;
}

/*
 * The flow's question (a flow's: no "type", the name bound to its
 * destination), answered grant-http with keys (tls, ask): its id.
 */
static long long hook_grant_flow(struct __test_metadata *_metadata,
				 struct fakehook *fh, const char *keys)
{
	char line[512];
	long long id;
	json_t *q = hook_line(_metadata, fh);

	EXPECT_EQ(NULL, json_object_get(q, "type"));
	EXPECT_STREQ(API_HOST, json_string_value(json_array_get(
				       json_object_get(q, "hostnames"), 0)));
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", %s}\n", id, keys);
	EXPECT_EQ(0, fakehook__send(fh, line));
	return id;
}

/*
 * A hook-only policy, clear text ("tls": "auto" on port 80): the flow
 * is intercepted, its request put to the hook with the flow's id, no
 * "tls", where it goes, and a value that is not ASCII byte for byte; the
 * hook sets a field no grant declared, saying "clearText" (the flow has
 * no TLS), which reaches upstream only.
 */
TEST_F_TIMEOUT(ic, hook_flow_grant_http_clear_text, 60)
{
	const char *req = "GET /v1?q=1 HTTP/1.1\r\nHost: " API_HOST
			  "\r\nX-Name: caf\xc3\xa9\r\n\r\n";
	const char *want = "GET /v1?q=1 HTTP/1.1\r\nHost: " API_HOST
			   "\r\nX-Name: caf\xc3\xa9\r\n"
			   "x-agent-policy: /v1?q=1\r\n\r\n";
	struct proxy_stats s;
	long long fid, id;
	char line[512];
	json_t *q, *dst;
	int g, up;

	hook_only_policy(_metadata, self);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	fid = hook_grant_flow(_metadata, &self->fh,
			      "\"tls\": \"auto\", \"ask\": \"request\"");
	q = hook_line(_metadata, &self->fh);
	EXPECT_STREQ("http", json_string_value(json_object_get(q, "type")));
	EXPECT_EQ(fid, json_integer_value(json_object_get(q, "flow")));
	EXPECT_EQ(NULL, json_object_get(q, "grant"));
	EXPECT_TRUE(json_is_null(json_object_get(q, "tls")));
	EXPECT_STREQ("http://" API_HOST "/v1?q=1",
		     json_string_value(json_object_get(q, "url")));
	dst = json_object_get(q, "destination");
	EXPECT_STREQ(API_HOST,
		     json_string_value(json_object_get(dst, "hostname")));
	EXPECT_STREQ(API_ADDR, json_string_value(json_object_get(
				       json_object_get(dst, "dst"), "ip")));
	EXPECT_EQ(HTTP_PORT, json_integer_value(json_object_get(
				     json_object_get(dst, "dst"), "port")));
	EXPECT_STREQ(VMNET_GUEST, json_string_value(json_object_get(
					  json_object_get(dst, "src"), "ip")));
	/* 0xc3 0xa9 as U+00C3 U+00A9: UTF-8 c3 83 c2 a9. */
	EXPECT_STREQ(
		"caf\xc3\x83\xc2\xa9",
		json_string_value(json_array_get(
			json_array_get(json_object_get(q, "headers"), 1), 1)));
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"flow\": %lld, \"verdict\": \"grant-http\", "
		 "\"set\": {\"X-Agent-Policy\": \"/v1?q=1\"}, "
		 "\"clearText\": true}\n",
		 id, fid);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want);
	close(g);
	close(up);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_intercepted);
	EXPECT_EQ(1, s.http_allowed);
	EXPECT_EQ(2, s.hook.questions);
}

/*
 * Issue 34, finding 7: a value the hook sets on a clear-text flow needs
 * "clearText" in its answer; without it the request is refused 403
 * ("http field in clear text"), nothing of it upstream, the value
 * nowhere. A removal alone needs none.
 */
TEST_F_TIMEOUT(ic, hook_flow_clear_text_needs_the_answers_opt_in, 60)
{
	const char *req = "GET /v1 HTTP/1.1\r\nHost: " API_HOST
			  "\r\nX-Gone: guest\r\n\r\n";
	const char *want = "GET /v1 HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	struct proxy_stats s;
	char line[512], buf[4096];
	long long fid, id;
	json_t *q;
	int g, up;

	hook_only_policy(_metadata, self);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	fid = hook_grant_flow(_metadata, &self->fh,
			      "\"tls\": \"auto\", \"ask\": \"request\"");
	q = hook_line(_metadata, &self->fh);
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"flow\": %lld, \"verdict\": \"grant-http\", "
		 "\"set\": {\"authorization\": \"Bearer " TOKEN "\"}}\n",
		 id, fid);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	expect_answer(_metadata, g, buf, sizeof(buf), "HTTP/1.1 403 ");
	EXPECT_NE(NULL, strstr(buf, "http field in clear text"))
	TH_LOG("%s", buf);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least, 1, &s));
	EXPECT_EQ(1, http_reason(&s, "http field in clear text"));
	EXPECT_EQ(0, s.http_allowed);
	EXPECT_FALSE(vmnet__wait_for(self->api, POLLIN, 0));
	close(g);

	/* A removal sends nothing: no opt-in needed. */
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	fid = hook_grant_flow(_metadata, &self->fh,
			      "\"tls\": \"auto\", \"ask\": \"request\"");
	q = hook_line(_metadata, &self->fh);
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"flow\": %lld, \"verdict\": \"grant-http\", "
		 "\"remove\": [\"x-gone\"]}\n",
		 id, fid);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want);
	close(g);
	close(up);
}

/*
 * Issue 34, finding 2: TRACE through a granted flow (its grant sets the
 * token) is refused 405 before anything goes upstream, in clear and
 * over TLS; the token is in no byte the guest gets, nor upstream.
 */
TEST_F_TIMEOUT(ic, trace_refused_on_a_grant_with_fields, 60)
{
	const char *req = "TRACE /user HTTP/1.1\r\nHost: " API_HOST
			  "\r\nAuthorization: Bearer guest-own\r\n\r\n";
	struct tls_conn *g, *u;
	char buf[4096];
	int gfd, ufd;
	bool end;

	expect_refused(_metadata, self, req, "HTTP/1.1 405 ",
		       "TRACE not allowed");
	/* Over TLS: upstream took the handshake, and never a byte more. */
	g = guest_tls_send(_metadata, self, req, &gfd, &u, &ufd);
	tls_read_until(g, gfd, buf, sizeof(buf), 0, &end);
	EXPECT_EQ(0, strncmp(buf, "HTTP/1.1 405 ", 13)) TH_LOG("%s", buf);
	EXPECT_NE(NULL, strstr(buf, "TRACE not allowed")) TH_LOG("%s", buf);
	EXPECT_EQ(NULL, strstr(buf, TOKEN));
	EXPECT_EQ(0, tls_read_until(u, ufd, buf, sizeof(buf), 0, &end));
	EXPECT_EQ(NULL, strstr(buf, TOKEN));
	tls_conn__free(g);
	tls_conn__free(u);
	close(gfd);
	close(ufd);
}

/*
 * A grant that says "trace": TRACE goes upstream with none of its
 * fields (the guest's own of those names removed too): an echo of it
 * could hand back nothing of the token; a GET on the same connection
 * still gets it.
 */
TEST_F_TIMEOUT(ic, trace_allowed_by_a_grant_carries_no_field, 60)
{
	const char *req = "TRACE /t HTTP/1.1\r\nHost: " API_HOST
			  "\r\nAuthorization: Bearer guest-own\r\n\r\n";
	const char *want = "TRACE /t HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *get = "GET /g HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want_get = "GET /g HTTP/1.1\r\nHost: " API_HOST
			       "\r\nauthorization: Bearer " TOKEN "\r\n\r\n";
	int g, up;

	ASSERT_EQ(0, setenv(TOKEN_ENV, "Bearer " TOKEN, 1));
	proxyfix__policy_set(
		_metadata, &self->policy,
		"{\"http\": [{\"host\": \"" API_HOST "\", \"ports\": [80],"
		" \"clearText\": true, \"trace\": true, \"headers\":"
		" {\"Authorization\": {\"from\": \"env:" TOKEN_ENV "\"}}}]}");
	ASSERT_EQ(0, unsetenv(TOKEN_ENV));
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, want);
	ASSERT_EQ((ssize_t)strlen(get), send(g, get, strlen(get), 0));
	exchange(_metadata, g, up, want_get);
	close(g);
	close(up);
}

/*
 * "ask": "connection": the flow's grant stands for its requests, none
 * is put to the hook, nothing is set; a framing field the hook sets on
 * a request of an "ask": "request" flow is refused (403) naming nothing
 * to the guest but the reason.
 */
TEST_F_TIMEOUT(ic, hook_flow_connection_then_framing_refused, 60)
{
	const char *req = "GET /a HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	struct proxy_stats s;
	char buf[4096], line[512];
	long long id;
	json_t *q;
	int g, up;

	hook_only_policy(_metadata, self);
	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	hook_grant_flow(_metadata, &self->fh,
			"\"tls\": false, \"ask\": \"connection\"");
	up = proxyfix__up_accept(_metadata, self->api);
	exchange(_metadata, g, up, req);
	ASSERT_EQ((ssize_t)strlen(req), send(g, req, strlen(req), 0));
	exchange(_metadata, g, up, req);
	EXPECT_FALSE(fakehook__wait(self->fh.conn, POLLIN, 0));
	close(g);
	close(up);

	g = guest_send(_metadata, self, API_ADDR, HTTP_PORT, req);
	hook_grant_flow(_metadata, &self->fh,
			"\"tls\": false, \"ask\": \"request\"");
	q = hook_line(_metadata, &self->fh);
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", \"set\": "
		 "{\"Content-Length\": \"0\"}}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	expect_answer(_metadata, g, buf, sizeof(buf), "HTTP/1.1 403 ");
	EXPECT_NE(NULL, strstr(buf, HOOK_INVALID)) TH_LOG("%s", buf);
	EXPECT_FALSE(vmnet__wait_for(self->api, POLLIN, 0));
	close(g);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(2, s.http_allowed);
	EXPECT_EQ(1, http_reason(&s, HOOK_INVALID));
	EXPECT_EQ(3, s.hook.questions);
}

/*
 * HTTPS by "tls": "auto" (the ClientHello says so): the request's
 * question has the SNI and the ALPN the guest chose, and the hook's
 * field reaches upstream. A second name the hook denies is reset.
 */
TEST_F_TIMEOUT(ic, hook_flow_grant_http_tls_auto, 60)
{
	const char *req = "GET /user HTTP/1.1\r\nHost: " API_HOST "\r\n\r\n";
	const char *want = "GET /user HTTP/1.1\r\nHost: " API_HOST
			   "\r\nx-agent-policy: allowed\r\n\r\n";
	struct tls_conn *g, *u;
	char buf[4096], line[512];
	struct proxy_stats s;
	int gfd, ufd;
	long long id;
	json_t *q, *tls;
	bool end;

	hook_only_policy(_metadata, self);
	g = guest_tls(_metadata, self, API_HOST, &gfd);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	hook_grant_flow(_metadata, &self->fh,
			"\"tls\": \"auto\", \"ask\": \"request\"");
	u = up_tls(_metadata, self, self->tls.up_srv, &ufd);
	ASSERT_EQ(0, tls_handshake(u, ufd)) TH_LOG("%s", tls_conn__error(u));
	ASSERT_EQ(0, tls_handshake(g, gfd)) TH_LOG("%s", tls_conn__error(g));
	ASSERT_EQ(0, tls_write_all(g, gfd, req));
	q = hook_line(_metadata, &self->fh);
	tls = json_object_get(q, "tls");
	EXPECT_STREQ(API_HOST, json_string_value(json_object_get(tls, "sni")));
	EXPECT_STREQ("http/1.1",
		     json_string_value(json_object_get(tls, "alpn")));
	EXPECT_STREQ("https://" API_HOST "/user",
		     json_string_value(json_object_get(q, "url")));
	id = json_integer_value(json_object_get(q, "id"));
	json_decref(q);
	snprintf(line, sizeof(line),
		 "{\"id\": %lld, \"verdict\": \"grant-http\", \"set\": "
		 "{\"x-agent-policy\": \"allowed\"}}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->fh, line));
	tls_read_until(u, ufd, buf, sizeof(buf), strlen(want), &end);
	EXPECT_STREQ(want, buf);
	ASSERT_EQ(0, tls_write_all(u, ufd, RESPONSE));
	tls_read_until(g, gfd, buf, sizeof(buf), strlen(RESPONSE), &end);
	EXPECT_STREQ(RESPONSE, buf);
	tls_conn__free(g);
	tls_conn__free(u);
	close(gfd);
	close(ufd);

	/* Another flow the hook denies: reset, never intercepted. */
	gfd = guest_send(_metadata, self, API_ADDR, HTTPS_PORT, NULL);
	q = hook_line(_metadata, &self->fh);
	EXPECT_EQ(0,
		  fakehook__answer(&self->fh,
				   json_integer_value(json_object_get(q, "id")),
				   "deny", "not this one"));
	json_decref(q);
	EXPECT_EQ(0, read_until(gfd, buf, sizeof(buf), 0, &end));
	close(gfd);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, proxyfix__tcp_open_is, 0,
					 &s));
	EXPECT_EQ(1, s.tcp_intercepted);
	EXPECT_EQ(1, s.http_allowed);
}

/*
 * "host" pins the flow to one name: a TLS server name that is another
 * name DNS binds to the same address is refused before any certificate
 * or upstream connection, with no request question.
 */
TEST_F_TIMEOUT(ic, hook_flow_host_pins_the_name, 60)
{
	struct proxy_stats s;
	struct tls_conn *g;
	int gfd;

	hook_only_policy(_metadata, self);
	g = guest_tls(_metadata, self, "other.example.test", &gfd);
	ASSERT_EQ(0, fakehook__accept(&self->fh));
	hook_grant_flow(_metadata, &self->fh,
			"\"tls\": true, \"ask\": \"request\", \"host\": "
			"\"" API_HOST "\"");
	EXPECT_NE(0, tls_handshake(g, gfd));
	tls_conn__free(g);
	close(gfd);
	ASSERT_TRUE(proxyfix__wait_stats(self->proxy, refused_at_least, 1, &s));
	EXPECT_EQ(1, http_reason(&s, "http host mismatch"));
	EXPECT_EQ(0, s.http_allowed);
	EXPECT_EQ(1, s.hook.questions);
	EXPECT_FALSE(vmnet__wait_for(self->api_tls, POLLIN, 0));
}

TEST_HARNESS_MAIN
