// SPDX-License-Identifier: GPL-2.0
/*
 * DNS through the hook (net/dns-hook.c, net/dns.c, net/hook.c's line
 * questions; Documentation/network.md "DNS through the hook").
 *
 * Without root: the question's exact line, grant-dns answers read and a
 * table of invalid ones, deny, other verdicts, the grants kept for their
 * TTL and bounded, the policy's rule for when the hook is asked, and the
 * hook client's line questions against a fake hook (an answer to an id
 * never asked ignored, a deadline passing). As root (a skip otherwise),
 * end to end in the namespaces of selftests/vmnet.h: the guest's query
 * put to the fake hook, granted to a resolver the hook names, denied
 * (REFUSED), failed (SERVFAIL), asked of another address than the
 * gateway (answered from that address), over TCP, and a retry within
 * the grant's TTL forwarded without a second question.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "net/dns-internal.h"
#include "net/dns.h"
#include "net/hook-internal.h"
#include "net/hook.h"
#include "net/policy.h"
#include "selftests/fakehook.h"
#include "selftests/kselftest.h"
#include "selftests/vmnet.h"

#define RES1	      "198.51.100.53" /* the resolver the hook names */
#define OTHER	      "192.0.2.99"    /* a server the guest picks itself */
#define WAIT_MS	      10000
#define STATS_POLL_US 10000
#define MS_PER_S      1000ULL
#define TTL_ANSWER    60

/* ---- messages -------------------------------------------------------- */

/* "a.b" as a wire name at p; its length. */
static size_t put_name(uint8_t *p, const char *name)
{
	size_t n = 0;

	while (*name) {
		const char *dot = strchr(name, '.');
		size_t l = dot ? (size_t)(dot - name) : strlen(name);

		p[n++] = (uint8_t)l;
		memcpy(p + n, name, l);
		n += l;
		name += l + (dot ? 1 : 0);
	}
	p[n++] = 0;
	return n;
}

static size_t build_query(uint8_t *p, uint16_t id, const char *name,
			  uint16_t type)
{
	size_t n;

	memset(p, 0, DNS_HDR_LEN);
	dns_put16(p + DNS_OFF_ID, id);
	dns_put16(p + DNS_OFF_FLAGS, DNS_FLAG_RD);
	dns_put16(p + DNS_OFF_QDCOUNT, 1);
	n = DNS_HDR_LEN + put_name(p + DNS_HDR_LEN, name);
	dns_put16(p + n, type);
	dns_put16(p + n + 2, DNS_CLASS_IN);
	return n + 4;
}

/* Query m (n bytes) answered in place with one A record addr for ttl. */
static size_t build_answer(uint8_t *m, size_t n, const char *addr, uint32_t ttl)
{
	struct in_addr a;

	dns_put16(m + DNS_OFF_FLAGS, DNS_FLAG_QR | DNS_FLAG_RD | DNS_FLAG_RA);
	dns_put16(m + DNS_OFF_ANCOUNT, 1);
	dns_put16(m + n, 0xc000U | DNS_HDR_LEN); /* the question's name */
	dns_put16(m + n + 2, DNS_TYPE_A);
	dns_put16(m + n + 4, DNS_CLASS_IN);
	dns_put16(m + n + 6, ttl >> 16);
	dns_put16(m + n + 8, ttl & 0xffff);
	dns_put16(m + n + 10, sizeof(a));
	inet_pton(AF_INET, addr, &a);
	memcpy(m + n + 12, &a, sizeof(a));
	return n + 12 + sizeof(a);
}

/* The question of query text name/type, parsed as the resolver does. */
static struct dns_question question(const char *name, uint16_t type)
{
	struct dns_query_info qi;
	uint8_t m[512];
	size_t n = build_query(m, 1, name, type);

	if (dns_msg__parse_query(m, n, &qi) != DNS_QUERY_OK)
		abort();
	return qi.q;
}

/* ---- the question ---------------------------------------------------- */

TEST(question_line_exact)
{
	struct dns_question q = question("Api.Example.COM", DNS_TYPE_A);
	struct dns_hook_question hq = {
		.src = vmnet__sin("10.0.2.15", 40000),
		.dst = vmnet__sin("10.0.2.2", 53),
		.q = &q,
	};
	static const char want[] =
		"{\"id\": 7, \"type\": \"dns\", \"proto\": \"udp\", \"src\": "
		"\"10.0.2.15:40000\", \"dst\": \"10.0.2.2:53\", \"name\": "
		"\"api.example.com\", \"qtype\": \"A\"}\n";
	char buf[HOOK_LINE_MAX];
	int n;

	n = dns_hook__question(buf, sizeof(buf), 7, &hq);
	ASSERT_EQ((int)strlen(want), n);
	EXPECT_EQ(0, memcmp(want, buf, n));
	/* One byte short is refused, not cut. */
	EXPECT_EQ(-ENOSPC, dns_hook__question(buf, strlen(want) - 1, 7, &hq));

	q = question("_http._tcp.example.com", DNS_TYPE_AAAA);
	hq.tcp = true;
	hq.dst = vmnet__sin(OTHER, 53);
	n = dns_hook__question(buf, sizeof(buf), 9007199254740991ULL, &hq);
	ASSERT_LT(0, n);
	buf[n] = '\0';
	EXPECT_NE(NULL, strstr(buf, "{\"id\": 9007199254740991, "
				    "\"type\": \"dns\", \"proto\": \"tcp\""));
	EXPECT_NE(NULL, strstr(buf, "\"dst\": \"" OTHER ":53\", \"name\": "
				    "\"_http._tcp.example.com\", \"qtype\": "
				    "\"AAAA\"}\n"));
}

TEST(question_name_and_type_texts)
{
	char name[DNS_HOOK_NAME_MAX], t[16];
	static const uint8_t odd[] = { 3, 'a', '.', 'b', 2, 0x01, 0xff, 0 };
	static const uint8_t root[] = { 0 };
	uint8_t longest[DNS_NAME_WIRE_MAX];
	size_t at = 0;

	dns_hook__name(odd, sizeof(odd), name);
	EXPECT_STREQ("a\\046b.\\001\\255", name);
	dns_hook__name(root, sizeof(root), name);
	EXPECT_STREQ(".", name);
	/* The longest name, each byte escaped, still fits. */
	while (at + 64 < sizeof(longest)) {
		longest[at] = 63;
		memset(longest + at + 1, 0xfe, 63);
		at += 64;
	}
	longest[at++] = 0;
	dns_hook__name(longest, at, name);
	EXPECT_EQ((at - 1) / 64 * (63 * 4 + 1) - 1, strlen(name));
	dns_hook__qtype(DNS_TYPE_A, t);
	EXPECT_STREQ("A", t);
	dns_hook__qtype(65, t);
	EXPECT_STREQ("HTTPS", t);
	dns_hook__qtype(65280, t);
	EXPECT_STREQ("TYPE65280", t);
}

/* ---- the answer ------------------------------------------------------ */

static struct dns_hook_answer answer(const char *line, const char *name)
{
	struct dns_question q = question(name, DNS_TYPE_A);
	struct dns_hook_answer a;

	dns_hook__answer(line, strlen(line), &q, &a);
	return a;
}

TEST(grant_dns_read)
{
	struct dns_hook_answer a;

	a = answer("{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		   "[\"" RES1 "\", \"203.0.113.7:5353\"], \"reason\": \"ok\"}",
		   "api.example.com");
	ASSERT_EQ(DNS_HOOK_GRANT, a.verdict);
	ASSERT_EQ(2, a.nr_resolvers);
	EXPECT_EQ(inet_addr(RES1), a.resolvers[0].sin_addr.s_addr);
	EXPECT_EQ(53, ntohs(a.resolvers[0].sin_port));
	EXPECT_EQ(inet_addr("203.0.113.7"), a.resolvers[1].sin_addr.s_addr);
	EXPECT_EQ(5353, ntohs(a.resolvers[1].sin_port));
	EXPECT_STREQ("ok", a.why);

	/* "name" echoing the question: any case, a trailing dot or not. */
	a = answer("{\"id\": 3, \"verdict\": \"grant-dns\", \"name\": "
		   "\"API.example.com.\", \"resolvers\": [\"" RES1 "\"]}",
		   "api.example.com");
	EXPECT_EQ(DNS_HOOK_GRANT, a.verdict);
	EXPECT_EQ(1, a.nr_resolvers);
}

TEST(grant_dns_invalid)
{
	static const struct {
		const char *line, *why;
	} bad[] = {
		{ "{\"id\": 3, \"verdict\": \"grant-dns\"}",
		  "resolvers not an array" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": []}",
		  "no resolvers" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		  "\"" RES1 "\"}",
		  "resolvers not an array" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": [53]}",
		  "resolver not a string" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		  "[\"999.1.1.1\"]}",
		  "resolver not an IPv4 unicast address[:port]" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		  "[\"" RES1 ":0\"]}",
		  "resolver not an IPv4 unicast address[:port]" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		  "[\"::1\"]}",
		  "resolver not an IPv4 unicast address[:port]" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		  "[\"224.0.0.1\"]}",
		  "resolver not an IPv4 unicast address[:port]" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": "
		  "[\"dns.example.com\"]}",
		  "resolver not an IPv4 unicast address[:port]" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"resolvers\": ["
		  "\"192.0.2.1\", \"192.0.2.2\", \"192.0.2.3\", \"192.0.2.4\", "
		  "\"192.0.2.5\", \"192.0.2.6\", \"192.0.2.7\", \"192.0.2.8\", "
		  "\"192.0.2.9\"]}",
		  "too many resolvers" },
		/* An answer for a name never asked. */
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"name\": "
		  "\"evil.example.net\", \"resolvers\": [\"" RES1 "\"]}",
		  "name not the question's" },
		{ "{\"id\": 3, \"verdict\": \"grant-dns\", \"name\": 7, "
		  "\"resolvers\": [\"" RES1 "\"]}",
		  "name not the question's" },
		{ "[1, 2]", "not a JSON object" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct dns_hook_answer a =
			answer(bad[i].line, "api.example.com");

		EXPECT_EQ(DNS_HOOK_INVALID, a.verdict)
		TH_LOG("%s", bad[i].line);
		EXPECT_EQ(0, a.nr_resolvers);
		EXPECT_STREQ(bad[i].why, a.why) TH_LOG("%s", bad[i].line);
	}
}

TEST(deny_and_other_verdicts)
{
	struct dns_hook_answer a;

	a = answer("{\"id\": 3, \"verdict\": \"deny\", \"reason\": "
		   "\"no \\u0007 tunnels\"}",
		   "api.example.com");
	EXPECT_EQ(DNS_HOOK_DENY, a.verdict);
	EXPECT_STREQ("no ? tunnels", a.why);
	EXPECT_EQ(0, a.nr_resolvers);
	/* A flow's grant is not a DNS grant. */
	a = answer("{\"id\": 3, \"verdict\": \"grant\"}", "api.example.com");
	EXPECT_EQ(DNS_HOOK_UNKNOWN, a.verdict);
	EXPECT_STREQ("grant", a.why);
	a = answer("{\"id\": 3, \"verdict\": \"grant-http\"}", "a.example");
	EXPECT_EQ(DNS_HOOK_UNKNOWN, a.verdict);
}

/* ---- the grants kept ------------------------------------------------- */

TEST(cache_hit_within_ttl_and_miss_after)
{
	struct dns_hook_cache *c = dns_hook_cache__create(0);
	struct dns_question a = question("api.example.com", DNS_TYPE_A);
	struct dns_question aaaa = question("api.example.com", DNS_TYPE_AAAA);
	struct dns_question other = question("www.example.com", DNS_TYPE_A);
	struct sockaddr_in res[DNS_HOOK_MAX_RESOLVERS];
	struct sockaddr_in r1 = vmnet__sin(RES1, 53);
	uint64_t t0 = 1000;

	ASSERT_NE(NULL, c);
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &a, t0, res));
	dns_hook_cache__insert(c, &a, &r1, 1, TTL_ANSWER, t0);
	ASSERT_EQ(1, dns_hook_cache__lookup(c, &a, t0, res));
	EXPECT_EQ(r1.sin_addr.s_addr, res[0].sin_addr.s_addr);
	EXPECT_EQ(1, dns_hook_cache__lookup(
			     c, &a, t0 + TTL_ANSWER * MS_PER_S - 1, res));
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &a, t0 + TTL_ANSWER * MS_PER_S,
					    res));
	/* Per name and type. */
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &aaaa, t0, res));
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &other, t0, res));

	/* TTLs bounded: 0 is kept DNS_HOOK_MIN_TTL_S, a day is not. */
	dns_hook_cache__insert(c, &a, &r1, 1, 0, t0);
	EXPECT_EQ(1,
		  dns_hook_cache__lookup(
			  c, &a, t0 + DNS_HOOK_MIN_TTL_S * MS_PER_S - 1, res));
	EXPECT_EQ(0, dns_hook_cache__lookup(
			     c, &a, t0 + DNS_HOOK_MIN_TTL_S * MS_PER_S, res));
	dns_hook_cache__insert(c, &a, &r1, 1, 86400, t0);
	EXPECT_EQ(0, dns_hook_cache__lookup(
			     c, &a, t0 + DNS_HOOK_MAX_TTL_S * MS_PER_S, res));
	EXPECT_EQ(1, dns_hook_cache__count(c)); /* replaced, not added */
	dns_hook_cache__flush(c);
	EXPECT_EQ(0, dns_hook_cache__count(c));
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &a, t0, res));
	dns_hook_cache__destroy(c);
}

TEST(cache_bounded)
{
	static const char *const names[] = { "a.test", "b.test", "c.test",
					     "d.test", "e.test" };
	struct dns_hook_cache *c = dns_hook_cache__create(4);
	struct sockaddr_in r1 = vmnet__sin(RES1, 53);
	struct sockaddr_in res[DNS_HOOK_MAX_RESOLVERS];
	struct dns_question q[ARRAY_SIZE(names)];

	ASSERT_NE(NULL, c);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		q[i] = question(names[i], DNS_TYPE_A);
	/* a expires first (10 s), then b, c, d (20, 30, 40 s). */
	for (size_t i = 0; i < 4; i++)
		dns_hook_cache__insert(c, &q[i], &r1, 1, 10 * (i + 1), 0);
	EXPECT_EQ(4, dns_hook_cache__count(c));
	dns_hook_cache__insert(c, &q[4], &r1, 1, 60, 0);
	EXPECT_EQ(4, dns_hook_cache__count(c));
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &q[0], 0, res));
	for (size_t i = 1; i < 5; i++)
		EXPECT_EQ(1, dns_hook_cache__lookup(c, &q[i], 0, res));
	/* An expired one goes before a live one expiring sooner. */
	dns_hook_cache__insert(c, &q[0], &r1, 1, 60, 25 * MS_PER_S);
	EXPECT_EQ(1, dns_hook_cache__lookup(c, &q[0], 25 * MS_PER_S, res));
	EXPECT_EQ(0, dns_hook_cache__lookup(c, &q[1], 25 * MS_PER_S, res));
	EXPECT_EQ(1, dns_hook_cache__lookup(c, &q[2], 25 * MS_PER_S, res));
	dns_hook_cache__destroy(c);
}

TEST(min_ttl_of_an_answer)
{
	uint8_t m[512];
	size_t n = build_query(m, 1, "api.example.com", DNS_TYPE_A);
	uint32_t ttl;

	EXPECT_EQ(0, dns_msg__min_ttl(m, n, &ttl));
	EXPECT_EQ(UINT32_MAX, ttl);
	n = build_answer(m, n, "192.0.2.10", 42);
	EXPECT_EQ(1, dns_msg__min_ttl(m, n, &ttl));
	EXPECT_EQ(42, ttl);
	EXPECT_EQ(-EBADMSG, dns_msg__min_ttl(m, n - 1, &ttl));
}

/* ---- when the hook is asked ------------------------------------------ */

static struct net_policy *policy_of(struct __test_metadata *_metadata,
				    const char *doc)
{
	struct net_policy *p = NULL;
	char err[256] = "";
	json_error_t jerr;
	json_t *obj = json_loads(doc, JSON_REJECT_DUPLICATES, &jerr);

	ASSERT_NE(NULL, obj) TH_LOG("%s", jerr.text);
	EXPECT_EQ(0, net_policy__parse(obj, "net.policy", &p, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(obj);
	return p;
}

TEST(policy_puts_dns_to_the_hook_without_a_dns_rule)
{
	struct net_policy *p;
	unsigned int ms = 0;

	p = policy_of(_metadata, "{\"hook\": {\"socket\": \"/run/h.sock\", "
				 "\"timeoutMs\": 900}}");
	EXPECT_STREQ("/run/h.sock", net_policy__dns_hook(p, &ms));
	EXPECT_EQ(900, ms);
	net_policy__free(p);
	/* A "dns" key decides alone, even one with no resolvers. */
	p = policy_of(_metadata, "{\"hook\": {\"socket\": \"/run/h.sock\"}, "
				 "\"dns\": {\"resolvers\": []}}");
	EXPECT_EQ(NULL, net_policy__dns_hook(p, &ms));
	net_policy__free(p);
	p = policy_of(_metadata, "{\"dns\": {\"resolvers\": [\"" RES1 "\"]}}");
	EXPECT_EQ(NULL, net_policy__dns_hook(p, &ms));
	net_policy__free(p);
	EXPECT_EQ(NULL, net_policy__dns_hook(NULL, &ms));
}

/* ---- the hook client's line questions -------------------------------- */

struct got {
	int calls;
	char line[512];
	const char *reason;
	void *cookie;
};

static void line_answer(void *opaque, void *cookie, const char *line, size_t n,
			const char *reason)
{
	struct got *g = opaque;

	g->calls++;
	g->cookie = cookie;
	g->reason = reason;
	snprintf(g->line, sizeof(g->line), "%.*s", (int)n, line ? line : "");
}

static int build_fixed(char *buf, size_t len, uint64_t id, const void *arg)
{
	int n = snprintf(buf, len, "{\"id\": %llu, \"type\": \"%s\"}\n",
			 (unsigned long long)id, (const char *)arg);

	return n < (int)len ? n : -ENOSPC;
}

/* Runs h until g has n calls, or WAIT_MS. */
static void run_until(struct hook *h, struct got *g, int n, uint64_t now)
{
	for (int i = 0; i < WAIT_MS / 10 && g->calls < n; i++) {
		fakehook__wait(hook__fd(h), POLLIN, 10);
		hook__run(h, now);
	}
}

TEST(line_questions_unknown_ids_and_deadlines)
{
	struct got g = { 0 };
	struct hook_params hp = { .line_answer = line_answer, .opaque = &g };
	struct hook_line_question q = { .timeout_ms = 50,
					.build = build_fixed,
					.arg = "dns" };
	struct fakehook fh;
	struct hook_stats st;
	struct hook *h;
	char line[FAKEHOOK_LINE_MAX];
	uint64_t id, id2;
	int cookie;

	ASSERT_EQ(0, fakehook__init(&fh, true));
	ASSERT_EQ(0, hook__create(&h, &hp));
	q.socket = fh.path;

	ASSERT_EQ(0, hook__ask_line(h, &q, &cookie, 0, &id));
	ASSERT_EQ(0, fakehook__accept(&fh));
	ASSERT_LT(0, fakehook__read_line(&fh, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "\"type\": \"dns\""));
	/* An answer to an id never asked: ignored, no call. */
	ASSERT_EQ(0, fakehook__answer(&fh, (long long)id + 100, "grant-dns",
				      NULL));
	ASSERT_EQ(0, fakehook__send(&fh, "{\"id\": 1, \"verdict\": "
					 "\"grant-dns\", \"resolvers\": "
					 "[\"" RES1 "\"]}\n"));
	run_until(h, &g, 1, 1);
	ASSERT_EQ(1, g.calls);
	EXPECT_EQ(&cookie, g.cookie);
	EXPECT_EQ(NULL, g.reason);
	EXPECT_NE(NULL, strstr(g.line, "\"resolvers\": [\"" RES1 "\"]"));
	hook__stats(h, &st);
	EXPECT_EQ(1, st.ignored);
	EXPECT_EQ(1, st.answers);

	/* Its deadline passes: a call with the reason, no line. */
	ASSERT_EQ(0, hook__ask_line(h, &q, &cookie, 100, &id2));
	EXPECT_NE(id, id2);
	hook__run(h, 100 + 50);
	ASSERT_EQ(2, g.calls);
	EXPECT_STREQ(HOOK_TIMEOUT, g.reason);
	EXPECT_STREQ("", g.line);
	/* Without a line_answer, or a builder: refused. */
	hp.line_answer = NULL;
	hook__destroy(h);
	ASSERT_EQ(0, hook__create(&h, &hp));
	EXPECT_EQ(-EINVAL, hook__ask_line(h, &q, &cookie, 0, &id));
	hook__destroy(h);
	fakehook__close(&fh);
}

/* ---- end to end, as root --------------------------------------------- */

FIXTURE(dnshook)
{
	struct vmnet net;
	struct fakehook hook;
	int up_udp, up_tcp;
	struct net_policy *policy;
	struct net_bindings *bindings;
	pthread_mutex_t lock;
	struct dns *dns;
};

FIXTURE_SETUP(dnshook)
{
	vmnet__init(&self->net);
	self->up_udp = self->up_tcp = -1;
	self->hook.lsn = self->hook.conn = -1;
	self->hook.dir[0] = self->hook.path[0] = '\0';
	pthread_mutex_init(&self->lock, NULL);
	if (geteuid())
		SKIP(return, "not root: network namespaces need "
			     "CAP_SYS_ADMIN and CAP_NET_ADMIN");
	vmnet__setup(_metadata, &self->net);
	VMNET_IP("addr", "add", RES1 "/32", "dev", "lo");
	self->up_udp = vmnet__server(_metadata, SOCK_DGRAM, RES1, DNS_PORT);
	self->up_tcp = vmnet__server(_metadata, SOCK_STREAM, RES1, DNS_PORT);
	self->bindings = net_bindings__create(NULL, NULL);
	ASSERT_NE(NULL, self->bindings);
	ASSERT_EQ(0, fakehook__init(&self->hook, true));
}

FIXTURE_TEARDOWN(dnshook)
{
	dns__destroy(self->dns);
	net_bindings__destroy(self->bindings);
	net_policy__free(self->policy);
	if (self->up_udp >= 0)
		close(self->up_udp);
	if (self->up_tcp >= 0)
		close(self->up_tcp);
	fakehook__close(&self->hook);
	vmnet__close(&self->net);
	pthread_mutex_destroy(&self->lock);
}

/* The resolver with a policy of a hook alone (its deadline timeout_ms). */
static void start(struct __test_metadata *_metadata,
		  FIXTURE_DATA(dnshook) * self, unsigned int timeout_ms)
{
	char doc[256], err[256] = "";
	struct dns_params p = {
		.netns_fd = self->net.vm_ns,
		.gateway.s_addr = inet_addr(VMNET_GATEWAY),
		.bindings = self->bindings,
		.bindings_lock = &self->lock,
		.timeout_ms = WAIT_MS,
	};

	snprintf(doc, sizeof(doc),
		 "{\"hook\": {\"socket\": \"%s\", \"timeoutMs\": %u}}",
		 self->hook.path, timeout_ms);
	self->policy = policy_of(_metadata, doc);
	p.policy = self->policy;
	ASSERT_EQ(0, dns__create(&self->dns, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, dns__start(self->dns, NULL));
}

/* The guest's query for name to to:53 over UDP; its socket. */
static int guest_ask(struct __test_metadata *_metadata,
		     FIXTURE_DATA(dnshook) * self, const char *to,
		     const char *name, uint16_t id)
{
	struct sockaddr_in dst = vmnet__sin(to, DNS_PORT);
	int g = vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
	uint8_t q[512];
	size_t n = build_query(q, id, name, DNS_TYPE_A);

	ASSERT_EQ((ssize_t)n,
		  sendto(g, q, n, 0, (struct sockaddr *)&dst, sizeof(dst)));
	return g;
}

/* The guest's answer from:53 (the address it asked); its rcode. */
static unsigned int guest_answer(struct __test_metadata *_metadata, int g,
				 const char *from, uint16_t id)
{
	struct sockaddr_in src;
	socklen_t slen = sizeof(src);
	uint8_t r[1024];
	ssize_t n;

	ASSERT_TRUE(vmnet__wait_for(g, POLLIN, WAIT_MS))
	TH_LOG("the guest got no answer");
	n = recvfrom(g, r, sizeof(r), 0, (struct sockaddr *)&src, &slen);
	ASSERT_LE(DNS_HDR_LEN, n);
	EXPECT_EQ(inet_addr(from), src.sin_addr.s_addr);
	EXPECT_EQ(DNS_PORT, ntohs(src.sin_port));
	EXPECT_EQ(id, dns_get16(r));
	return dns_rcode(r);
}

/* The hook's next question line; its id. */
static long long hook_question(struct __test_metadata *_metadata,
			       FIXTURE_DATA(dnshook) * self, char *line,
			       size_t len)
{
	char *at;

	if (self->hook.conn < 0)
		ASSERT_EQ(0, fakehook__accept(&self->hook));
	ASSERT_LT(0, fakehook__read_line(&self->hook, line, len));
	at = strstr(line, "\"id\": ");
	ASSERT_NE(NULL, at);
	return strtoll(at + 6, NULL, 10);
}

/* Upstream RES1 answers its next UDP query with addr. */
static void upstream_answers(struct __test_metadata *_metadata,
			     FIXTURE_DATA(dnshook) * self, const char *addr)
{
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	uint8_t m[512];
	ssize_t n;
	size_t an;

	ASSERT_TRUE(vmnet__wait_for(self->up_udp, POLLIN, WAIT_MS))
	TH_LOG(RES1 " got no query");
	n = recvfrom(self->up_udp, m, 400, 0, (struct sockaddr *)&from, &flen);
	ASSERT_LE(DNS_HDR_LEN, n);
	an = build_answer(m, (size_t)n, addr, TTL_ANSWER);
	ASSERT_EQ((ssize_t)an, sendto(self->up_udp, m, an, 0,
				      (struct sockaddr *)&from, flen));
}

static bool bound(FIXTURE_DATA(dnshook) * self, const char *host,
		  const char *addr)
{
	bool ret;

	pthread_mutex_lock(&self->lock);
	ret = net_bindings__lookup(self->bindings, host, inet_addr(addr));
	pthread_mutex_unlock(&self->lock);
	return ret;
}

TEST_F_TIMEOUT(dnshook, granted_forwarded_bound_and_kept, 60)
{
	char line[FAKEHOOK_LINE_MAX], ans[256];
	struct dns_stats s;
	long long id;
	int g;

	start(_metadata, self, WAIT_MS);
	g = guest_ask(_metadata, self, VMNET_GATEWAY, "api.example.com", 0x71);
	id = hook_question(_metadata, self, line, sizeof(line));
	EXPECT_NE(NULL, strstr(line, "\"type\": \"dns\", \"proto\": \"udp\", "
				     "\"src\": \"" VMNET_GUEST ":"));
	EXPECT_NE(NULL, strstr(line, "\"dst\": \"" VMNET_GATEWAY ":53\", "
				     "\"name\": \"api.example.com\", "
				     "\"qtype\": \"A\"}"))
	TH_LOG("%s", line);
	/* Nothing leaves before the hook answers. */
	EXPECT_FALSE(vmnet__wait_for(self->up_udp, POLLIN, 0));
	snprintf(ans, sizeof(ans),
		 "{\"id\": %lld, \"verdict\": \"grant-dns\", \"resolvers\": "
		 "[\"" RES1 "\"]}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->hook, ans));
	upstream_answers(_metadata, self, "192.0.2.10");
	EXPECT_EQ(DNS_RCODE_NOERROR,
		  guest_answer(_metadata, g, VMNET_GATEWAY, 0x71));
	EXPECT_TRUE(bound(self, "api.example.com", "192.0.2.10"));
	close(g);

	/* A retry within the TTL: forwarded, the hook not asked again. */
	g = guest_ask(_metadata, self, VMNET_GATEWAY, "api.example.com", 0x72);
	upstream_answers(_metadata, self, "192.0.2.10");
	EXPECT_EQ(DNS_RCODE_NOERROR,
		  guest_answer(_metadata, g, VMNET_GATEWAY, 0x72));
	EXPECT_FALSE(fakehook__wait(self->hook.conn, POLLIN, 0));
	dns__stats(self->dns, &s);
	EXPECT_EQ(1, s.hook_asked);
	EXPECT_EQ(1, s.hook_granted);
	EXPECT_EQ(1, s.hook_cached);
	close(g);
}

TEST_F_TIMEOUT(dnshook, denied_refused_and_nothing_leaves, 60)
{
	char line[FAKEHOOK_LINE_MAX];
	struct dns_stats s;
	long long id;
	int g;

	start(_metadata, self, WAIT_MS);
	g = guest_ask(_metadata, self, VMNET_GATEWAY, "evil.example.net", 9);
	id = hook_question(_metadata, self, line, sizeof(line));
	ASSERT_EQ(0, fakehook__answer(&self->hook, id, "deny", "no"));
	EXPECT_EQ(DNS_RCODE_REFUSED,
		  guest_answer(_metadata, g, VMNET_GATEWAY, 9));
	EXPECT_FALSE(vmnet__wait_for(self->up_udp, POLLIN, 0));
	dns__stats(self->dns, &s);
	EXPECT_EQ(1, s.hook_refused);
	EXPECT_EQ(0, s.forwarded);
	close(g);
}

/* A malformed grant, a timeout, no hook at all: SERVFAIL each. */
TEST_F_TIMEOUT(dnshook, failures_servfail, 60)
{
	char line[FAKEHOOK_LINE_MAX], ans[256];
	struct dns_stats s;
	long long id;
	int g;

	start(_metadata, self, 300);
	g = guest_ask(_metadata, self, VMNET_GATEWAY, "api.example.com", 1);
	id = hook_question(_metadata, self, line, sizeof(line));
	snprintf(ans, sizeof(ans),
		 "{\"id\": %lld, \"verdict\": \"grant-dns\", \"resolvers\": "
		 "[\"not-an-address\"]}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->hook, ans));
	EXPECT_EQ(DNS_RCODE_SERVFAIL,
		  guest_answer(_metadata, g, VMNET_GATEWAY, 1));
	close(g);
	/* Silence past the 300 ms deadline. */
	g = guest_ask(_metadata, self, VMNET_GATEWAY, "api.example.com", 2);
	hook_question(_metadata, self, line, sizeof(line));
	EXPECT_EQ(DNS_RCODE_SERVFAIL,
		  guest_answer(_metadata, g, VMNET_GATEWAY, 2));
	close(g);
	/* Nobody listening any more. */
	fakehook__close(&self->hook);
	g = guest_ask(_metadata, self, VMNET_GATEWAY, "api.example.com", 3);
	EXPECT_EQ(DNS_RCODE_SERVFAIL,
		  guest_answer(_metadata, g, VMNET_GATEWAY, 3));
	close(g);
	EXPECT_FALSE(vmnet__wait_for(self->up_udp, POLLIN, 0));
	dns__stats(self->dns, &s);
	EXPECT_EQ(3, s.hook_failed);
}

/*
 * The guest asks a server of its own choosing: the resolver still takes
 * it (its socket has port 53 at every address), the hook sees the
 * address the guest chose, and the answer comes from that address.
 */
TEST_F_TIMEOUT(dnshook, another_server_still_goes_through_the_hook, 60)
{
	char line[FAKEHOOK_LINE_MAX], ans[256];
	long long id;
	int g;

	start(_metadata, self, WAIT_MS);
	g = guest_ask(_metadata, self, OTHER, "api.example.com", 0x99);
	id = hook_question(_metadata, self, line, sizeof(line));
	EXPECT_NE(NULL, strstr(line, "\"dst\": \"" OTHER ":53\""))
	TH_LOG("%s", line);
	snprintf(ans, sizeof(ans),
		 "{\"id\": %lld, \"verdict\": \"grant-dns\", \"resolvers\": "
		 "[\"" RES1 "\"]}\n",
		 id);
	ASSERT_EQ(0, fakehook__send(&self->hook, ans));
	upstream_answers(_metadata, self, "192.0.2.10");
	EXPECT_EQ(DNS_RCODE_NOERROR, guest_answer(_metadata, g, OTHER, 0x99));
	close(g);
}

/* Over TCP, to another address: asked as "tcp", denied on the stream. */
TEST_F_TIMEOUT(dnshook, tcp_question_denied, 60)
{
	struct sockaddr_in dst = vmnet__sin(OTHER, DNS_PORT);
	char line[FAKEHOOK_LINE_MAX];
	uint8_t q[514], r[600];
	long long id;
	size_t n;
	ssize_t got = 0, k;
	int g;

	start(_metadata, self, WAIT_MS);
	g = vmnet__guest_socket(_metadata, &self->net, SOCK_STREAM);
	connect(g, (struct sockaddr *)&dst, sizeof(dst));
	ASSERT_TRUE(vmnet__wait_for(g, POLLOUT, WAIT_MS));
	n = build_query(q + DNS_TCP_LEN, 0x44, "api.example.com", DNS_TYPE_A);
	dns_put16(q, (uint16_t)n);
	ASSERT_EQ((ssize_t)(n + DNS_TCP_LEN), send(g, q, n + DNS_TCP_LEN, 0));
	id = hook_question(_metadata, self, line, sizeof(line));
	EXPECT_NE(NULL, strstr(line, "\"proto\": \"tcp\""));
	EXPECT_NE(NULL, strstr(line, "\"dst\": \"" OTHER ":53\""));
	ASSERT_EQ(0, fakehook__answer(&self->hook, id, "deny", NULL));
	while (got < (ssize_t)(DNS_TCP_LEN + DNS_HDR_LEN)) {
		ASSERT_TRUE(vmnet__wait_for(g, POLLIN, WAIT_MS));
		k = recv(g, r + got, sizeof(r) - got, 0);
		ASSERT_LT(0, k);
		got += k;
	}
	EXPECT_EQ(0x44, dns_get16(r + DNS_TCP_LEN));
	EXPECT_EQ(DNS_RCODE_REFUSED, dns_rcode(r + DNS_TCP_LEN));
	close(g);
}

TEST_HARNESS_MAIN
