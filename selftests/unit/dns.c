// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's DNS resolver (net/dns.c, net/dns-msg.c).
 *
 * The message reader first, on hand-made and random bytes (anyone). Then
 * end to end across namespaces (root only, a skip otherwise;
 * selftests/vmnet.h): the resolver's sockets on the gateway's port 53 in
 * the VM netns (no egress program: the sockets are bound there, which is
 * all the resolver needs), the guest asking from the guest netns, and
 * fake upstream resolvers on the host netns's lo that this test answers
 * by hand: an A record, a CNAME chain, a wrong answer, or nothing.
 *
 * Nothing waits for a fixed time: negative checks come after the
 * resolver's counters or the guest's answer show the query was handled.
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
#include "lib/log.h"
#include "net/dns-internal.h"
#include "net/dns.h"
#include "net/policy.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "selftests/vmnet.h"

#define RES1	     "198.51.100.53" /* listed first */
#define RES2	     "198.51.100.54" /* listed second */
#define UNLISTED     "203.0.113.53"  /* a resolver the policy does not list */
#define NR_UPSTREAMS 3

#define POLICY_TWO                                                \
	"{\"dns\": {\"resolvers\": [\"" RES1 "\", \"" RES2 "\"]," \
	" \"names\": [\"www.example.com\"]},"                     \
	" \"tcp\": [{\"to\": \"api.example.com\", \"ports\": [443]}]}"
#define POLICY_ONE                                   \
	"{\"dns\": {\"resolvers\": [\"" RES1 "\"], " \
	"\"names\": [\"*.example.com\"]}}"
/* The policy: one hostname grant, and the resolver it needs. */
#define POLICY_GRANT                                  \
	"{\"dns\": {\"resolvers\": [\"" RES1 "\"]}, " \
	"\"tcp\": [{\"to\": \"api.example.com\", \"ports\": [443]}]}"
/* CIDR grants only: the names are dns.names's alone. */
#define POLICY_NAMES                                            \
	"{\"dns\": {\"resolvers\": [\"" RES1 "\"], \"names\": " \
	"[\"*.corp.example\", \"exact.example.org\"]}, "        \
	"\"tcp\": [{\"to\": \"198.51.100.0/24\"}]}"
#define DNS_TYPE_TXT 16U /* RFC 1035 3.2.2 */
#define POLICY_NONE  "{\"dns\": {\"resolvers\": []}}"

#define TEST_TIMEOUT_MS 300   /* the resolver's per-try timeout here */
#define SLOW_TRY_MS	2000  /* per-try: room to answer a try late */
#define MAX_PENDING	4     /* its pending queries, small for the test */
#define WAIT_MS		10000 /* what should happen does, well within this */
#define STATS_POLL_US	10000
#define FUZZ_ROUNDS	20000
#define FUZZ_SEED	0x6b696c6e646e73ULL
#define TTL_LONG	300
#define TTL_SHORT	60
#define MS_PER_S	1000ULL
#define BIG_ANSWER_RRS	40 /* past 512 bytes */

/* ---- building messages ------------------------------------------------- */

/* "a.b" as a wire name at p; its length. */
static size_t put_name(uint8_t *p, const char *name)
{
	size_t n = 0;
	const char *dot;

	while (*name) {
		dot = strchr(name, '.');
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

struct rec {
	const char *owner; /* NULL: the question's name, as a pointer */
	uint16_t type;
	uint32_t ttl;
	const char *data; /* A: an address; CNAME: a name */
};

#define QNAME_POINTER 0xc00cU /* to the question's name at offset 12 */

/* An answer to query q (its header and question copied) with records r. */
static size_t build_answer(uint8_t *p, const uint8_t *q, size_t qlen,
			   unsigned int rcode, const struct rec *r,
			   unsigned int n)
{
	struct dns_query_info qi;
	size_t off, rd;
	struct in_addr a;

	if (dns_msg__parse_query(q, qlen, &qi) != DNS_QUERY_OK)
		abort();
	memcpy(p, q, qi.q.end);
	dns_put16(p + DNS_OFF_FLAGS,
		  DNS_FLAG_QR | DNS_FLAG_RD | DNS_FLAG_RA | rcode);
	dns_put16(p + DNS_OFF_ANCOUNT, n);
	dns_put16(p + DNS_OFF_NSCOUNT, 0);
	dns_put16(p + DNS_OFF_ARCOUNT, 0);
	off = qi.q.end;
	for (unsigned int i = 0; i < n; i++) {
		if (r[i].owner) {
			off += put_name(p + off, r[i].owner);
		} else {
			dns_put16(p + off, QNAME_POINTER);
			off += 2;
		}
		dns_put16(p + off, r[i].type);
		dns_put16(p + off + 2, DNS_CLASS_IN);
		dns_put16(p + off + 4, r[i].ttl >> 16);
		dns_put16(p + off + 6, r[i].ttl & 0xffff);
		rd = off + 10;
		if (r[i].type == DNS_TYPE_A) {
			inet_pton(AF_INET, r[i].data, &a);
			memcpy(p + rd, &a, sizeof(a));
			off = rd + sizeof(a);
		} else {
			off = rd + put_name(p + rd, r[i].data);
		}
		dns_put16(p + rd - 2, (uint16_t)(off - rd)); /* RDLENGTH */
	}
	return off;
}

/* ---- the message reader, without namespaces -------------------------- */

TEST(parse_query_verdicts)
{
	uint8_t m[DNS_SHORT_REPLY_MAX + 64], r[DNS_SHORT_REPLY_MAX];
	struct dns_query_info qi;
	size_t n;

	n = build_query(m, 0x1234, "API.Example.com", DNS_TYPE_A);
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(m, n, &qi));
	EXPECT_EQ(0x1234, qi.id);
	EXPECT_EQ(DNS_TYPE_A, qi.q.type);
	EXPECT_EQ(n, qi.len);
	EXPECT_EQ(0, qi.opt_class_off);
	/* Lower case, uncompressed: "\3api\7example\3com\0". */
	EXPECT_EQ(17, qi.q.name_len);
	EXPECT_EQ(0, memcmp(qi.q.name, "\3api\7example\3com", 17));

	/* Trailing bytes are not forwarded. */
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(m, n + 5, &qi));
	EXPECT_EQ(n, qi.len);

	/* REFUSED: the header and the question, as asked. */
	EXPECT_EQ(n, dns_msg__reply(r, sizeof(r), m, &qi, 0, DNS_RCODE_REFUSED,
				    true));
	EXPECT_EQ(DNS_RCODE_REFUSED, dns_rcode(r));
	EXPECT_EQ(0, memcmp(r + DNS_HDR_LEN, m + DNS_HDR_LEN, n - DNS_HDR_LEN));

	EXPECT_EQ(DNS_QUERY_DROP,
		  dns_msg__parse_query(m, DNS_HDR_LEN - 1, &qi));
	/* A header only: no question. */
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, DNS_HDR_LEN, &qi));
	/* The name runs past the end. */
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, n - 6, &qi));

	dns_put16(m + DNS_OFF_FLAGS, DNS_FLAG_QR);
	EXPECT_EQ(DNS_QUERY_DROP, dns_msg__parse_query(m, n, &qi));
	dns_put16(m + DNS_OFF_FLAGS, 1U << 11); /* opcode IQUERY */
	EXPECT_EQ(DNS_QUERY_NOTIMP, dns_msg__parse_query(m, n, &qi));
	dns_put16(m + DNS_OFF_FLAGS, 0);
	dns_put16(m + DNS_OFF_QDCOUNT, 2);
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, n, &qi));
	dns_put16(m + DNS_OFF_QDCOUNT, 1);

	/* A pointer in the question: nothing before it to point at. */
	dns_put16(m + DNS_HDR_LEN, QNAME_POINTER);
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, n, &qi));
}

TEST(parse_query_edns)
{
	uint8_t m[128];
	struct dns_query_info qi;
	size_t n;

	n = build_query(m, 1, "example.com", DNS_TYPE_AAAA);
	dns_put16(m + DNS_OFF_ARCOUNT, 1);
	m[n] = 0; /* the root */
	dns_put16(m + n + 1, DNS_TYPE_OPT);
	dns_put16(m + n + 3, 8192); /* the UDP size it takes */
	memset(m + n + 5, 0, 6);    /* TTL (flags), RDLENGTH 0 */
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(m, n + 11, &qi));
	EXPECT_EQ(8192, qi.udp_max);
	EXPECT_EQ(n + 3, qi.opt_class_off);
	EXPECT_EQ(n + 11, qi.len);
	/* The OPT record cut short. */
	EXPECT_EQ(DNS_QUERY_FORMERR, dns_msg__parse_query(m, n + 9, &qi));
}

static const uint8_t *wire(const char *name, uint8_t *buf, size_t *len)
{
	*len = put_name(buf, name);
	return buf;
}

TEST(a_records_and_cname_chains)
{
	struct dns_rr *rrs = calloc(DNS_MAX_ANSWER_RRS, sizeof(*rrs));
	uint8_t q[128], a[1024];
	struct dns_a_record out[8];
	struct dns_query_info qi;
	size_t qn, an;
	const struct rec direct[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
		{ "other.example.net", DNS_TYPE_A, TTL_LONG, "192.0.2.66" },
		{ NULL, DNS_TYPE_A, TTL_SHORT, "192.0.2.11" },
	};
	const struct rec chain[] = {
		{ "edge.example.org", DNS_TYPE_A, TTL_LONG, "192.0.2.20" },
		{ NULL, DNS_TYPE_CNAME, 100, "cdn.example.net" },
		{ "cdn.example.net", DNS_TYPE_CNAME, 50, "edge.example.org" },
	};
	const struct rec loop[] = {
		{ NULL, DNS_TYPE_CNAME, 100, "b.example.com" },
		{ "b.example.com", DNS_TYPE_CNAME, 100, "www.example.com" },
	};
	int n;

	ASSERT_NE(NULL, rrs);
	qn = build_query(q, 7, "www.example.com", DNS_TYPE_A);
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(q, qn, &qi));

	an = build_answer(a, q, qn, DNS_RCODE_NOERROR, direct, 3);
	EXPECT_TRUE(dns_msg__answers(a, an, 7, &qi.q));
	EXPECT_FALSE(dns_msg__answers(a, an, 8, &qi.q));
	n = dns_msg__a_records(a, an, &qi.q, rrs, out, ARRAY_SIZE(out));
	ASSERT_EQ(2, n);
	EXPECT_EQ(inet_addr("192.0.2.10"), out[0].addr);
	EXPECT_EQ(TTL_LONG, out[0].ttl_s);
	EXPECT_EQ(inet_addr("192.0.2.11"), out[1].addr);
	EXPECT_EQ(TTL_SHORT, out[1].ttl_s);
	/* Each record cut short: the whole answer binds nothing. */
	for (size_t cut = qn; cut < an; cut++)
		EXPECT_GE(0, dns_msg__a_records(a, cut, &qi.q, rrs, out,
						ARRAY_SIZE(out)));

	/* The chain in any order; the lowest TTL along it. */
	an = build_answer(a, q, qn, DNS_RCODE_NOERROR, chain, 3);
	n = dns_msg__a_records(a, an, &qi.q, rrs, out, ARRAY_SIZE(out));
	ASSERT_EQ(1, n);
	EXPECT_EQ(inet_addr("192.0.2.20"), out[0].addr);
	EXPECT_EQ(50, out[0].ttl_s);

	/* A loop ends after the bounded hops, with nothing. */
	an = build_answer(a, q, qn, DNS_RCODE_NOERROR, loop, 2);
	EXPECT_EQ(0,
		  dns_msg__a_records(a, an, &qi.q, rrs, out, ARRAY_SIZE(out)));

	/* A forward pointer in a record's owner. */
	an = build_answer(a, q, qn, DNS_RCODE_NOERROR, direct, 1);
	dns_put16(a + qn, 0xc000U | (uint16_t)(qn + 2));
	EXPECT_EQ(-EBADMSG,
		  dns_msg__a_records(a, an, &qi.q, rrs, out, ARRAY_SIZE(out)));
	free(rrs);
}

TEST(name_text)
{
	char out[NET_HOSTNAME_MAX + 1];
	uint8_t buf[DNS_NAME_WIRE_MAX];
	const uint8_t *w;
	size_t len;

	w = wire("api.example.com", buf, &len);
	ASSERT_EQ(0, dns_msg__name_text(w, len, out, sizeof(out)));
	EXPECT_STREQ("api.example.com", out);
	w = wire("", buf, &len);
	EXPECT_EQ(-EINVAL, dns_msg__name_text(w, len, out, sizeof(out)));
	w = wire("a b.example.com", buf, &len);
	EXPECT_EQ(-EINVAL, dns_msg__name_text(w, len, out, sizeof(out)));
	w = wire("a\x01.example.com", buf, &len);
	EXPECT_EQ(-EINVAL, dns_msg__name_text(w, len, out, sizeof(out)));
}

/* Random bytes and random damage to good messages: answers, no crash. */
TEST(random_messages_never_crash)
{
	struct dns_rr *rrs = calloc(DNS_MAX_ANSWER_RRS, sizeof(*rrs));
	uint8_t q[128], a[1024], m[1024];
	struct dns_a_record out[8];
	struct dns_query_info qi, mi;
	uint64_t seed = FUZZ_SEED, r;
	const struct rec recs[] = {
		{ NULL, DNS_TYPE_CNAME, 100, "cdn.example.net" },
		{ "cdn.example.net", DNS_TYPE_A, TTL_LONG, "192.0.2.20" },
	};
	size_t qn, an, len;

	ASSERT_NE(NULL, rrs);
	qn = build_query(q, 7, "www.example.com", DNS_TYPE_A);
	ASSERT_EQ(DNS_QUERY_OK, dns_msg__parse_query(q, qn, &qi));
	an = build_answer(a, q, qn, DNS_RCODE_NOERROR, recs, 2);
	for (int i = 0; i < FUZZ_ROUNDS; i++) {
		r = prng__next(&seed);
		if (i % 2) {
			len = r % sizeof(m);
			for (size_t j = 0; j < len; j++)
				m[j] = (uint8_t)prng__next(&seed);
		} else {
			len = an;
			memcpy(m, a, an);
			for (int k = 0; k < 1 + (int)(r % 4); k++)
				m[prng__next(&seed) % an] =
					(uint8_t)prng__next(&seed);
		}
		(void)dns_msg__parse_query(m, len, &mi);
		(void)dns_msg__answers(m, len, 7, &qi.q);
		if (dns_msg__a_records(m, len, &qi.q, rrs, out,
				       ARRAY_SIZE(out)) > (int)ARRAY_SIZE(out))
			ASSERT_TRUE(false);
	}
	free(rrs);
}

/* ---- end to end ------------------------------------------------------- */

struct upstream {
	const char *addr;
	int udp, tcp;
};

FIXTURE(dns)
{
	struct vmnet net;
	struct upstream up[NR_UPSTREAMS]; /* RES1, RES2, UNLISTED */
	struct net_policy *policy;
	struct net_bindings *bindings;
	pthread_mutex_t lock;
	uint64_t clock_ms;
	struct dns *dns;
};

static uint64_t test_clock(void *opaque)
{
	return __atomic_load_n((uint64_t *)opaque, __ATOMIC_RELAXED);
}

static void advance_s(FIXTURE_DATA(dns) * self, uint64_t s)
{
	__atomic_add_fetch(&self->clock_ms, s * MS_PER_S, __ATOMIC_RELAXED);
}

FIXTURE_SETUP(dns)
{
	static const char *const addrs[NR_UPSTREAMS] = { RES1, RES2, UNLISTED };

	vmnet__init(&self->net);
	for (int i = 0; i < NR_UPSTREAMS; i++)
		self->up[i] = (struct upstream){ addrs[i], -1, -1 };
	pthread_mutex_init(&self->lock, NULL);
	self->clock_ms = 1;
	if (geteuid())
		SKIP(return, "not root: network namespaces need "
			     "CAP_SYS_ADMIN and CAP_NET_ADMIN");
	vmnet__setup(_metadata, &self->net);
	for (int i = 0; i < NR_UPSTREAMS; i++) {
		char cidr[32];

		snprintf(cidr, sizeof(cidr), "%s/32", addrs[i]);
		VMNET_IP("addr", "add", cidr, "dev", "lo");
		self->up[i].udp = vmnet__server(_metadata, SOCK_DGRAM, addrs[i],
						DNS_PORT);
		self->up[i].tcp = vmnet__server(_metadata, SOCK_STREAM,
						addrs[i], DNS_PORT);
	}
	self->bindings = net_bindings__create(test_clock, &self->clock_ms);
	ASSERT_NE(NULL, self->bindings);
}

FIXTURE_TEARDOWN(dns)
{
	dns__destroy(self->dns);
	net_bindings__destroy(self->bindings);
	net_policy__free(self->policy);
	for (int i = 0; i < NR_UPSTREAMS; i++) {
		if (self->up[i].udp >= 0)
			close(self->up[i].udp);
		if (self->up[i].tcp >= 0)
			close(self->up[i].tcp);
	}
	vmnet__close(&self->net);
	pthread_mutex_destroy(&self->lock);
}

/*
 * The resolver with policy doc (NULL: no policy at all), running. A test
 * that answers gives it WAIT_MS per try: a slow test machine must not
 * make it retry elsewhere meanwhile.
 */
static void start(struct __test_metadata *_metadata, FIXTURE_DATA(dns) * self,
		  const char *doc, unsigned int max_pending,
		  unsigned int timeout_ms)
{
	struct dns_params p = {
		.netns_fd = self->net.vm_ns,
		.gateway.s_addr = inet_addr(VMNET_GATEWAY),
		.bindings = self->bindings,
		.bindings_lock = &self->lock,
		.timeout_ms = timeout_ms,
		.max_pending = max_pending,
	};
	char err[256] = "";
	json_error_t jerr;
	json_t *obj;

	if (doc) {
		obj = json_loads(doc, JSON_REJECT_DUPLICATES, &jerr);
		ASSERT_NE(NULL, obj) TH_LOG("%s", jerr.text);
		ASSERT_EQ(0, net_policy__parse(obj, "net.policy", &self->policy,
					       err, sizeof(err)))
		TH_LOG("%s", err);
		json_decref(obj);
	}
	p.policy = self->policy;
	ASSERT_EQ(0, dns__create(&self->dns, &p, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, dns__start(self->dns, NULL));
}

static bool bound(FIXTURE_DATA(dns) * self, const char *host, const char *addr)
{
	bool ret;

	pthread_mutex_lock(&self->lock);
	ret = net_bindings__lookup(self->bindings, host, inet_addr(addr));
	pthread_mutex_unlock(&self->lock);
	return ret;
}

typedef bool (*stats_pred)(const struct dns_stats *s, uint64_t n);

static bool malformed_at_least(const struct dns_stats *s, uint64_t n)
{
	return s->malformed >= n;
}

static bool dropped_at_least(const struct dns_stats *s, uint64_t n)
{
	return s->dropped >= n;
}

static bool bad_answers_at_least(const struct dns_stats *s, uint64_t n)
{
	return s->bad_answers >= n;
}

static bool wait_stats(struct dns *d, stats_pred pred, uint64_t n,
		       struct dns_stats *s)
{
	for (int waited = 0; waited < WAIT_MS * 1000; waited += STATS_POLL_US) {
		dns__stats(d, s);
		if (pred(s, n))
			return true;
		usleep(STATS_POLL_US);
	}
	return false;
}

/* The guest's UDP socket, and a message from it to the gateway's 53. */
static int guest_udp(struct __test_metadata *_metadata,
		     FIXTURE_DATA(dns) * self)
{
	return vmnet__guest_socket(_metadata, &self->net, SOCK_DGRAM);
}

static void guest_send(struct __test_metadata *_metadata, int g,
		       const uint8_t *m, size_t len)
{
	struct sockaddr_in gw = vmnet__sin(VMNET_GATEWAY, DNS_PORT);

	ASSERT_EQ((ssize_t)len,
		  sendto(g, m, len, 0, (struct sockaddr *)&gw, sizeof(gw)));
}

/* The guest's answer, from the gateway's port 53; its length. */
static size_t guest_recv(struct __test_metadata *_metadata, int g, uint8_t *m,
			 size_t cap)
{
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	ssize_t n;

	ASSERT_TRUE(vmnet__wait_for(g, POLLIN, WAIT_MS))
	TH_LOG("the guest got no answer");
	n = recvfrom(g, m, cap, 0, (struct sockaddr *)&from, &flen);
	ASSERT_LE(DNS_HDR_LEN, n);
	EXPECT_EQ(inet_addr(VMNET_GATEWAY), from.sin_addr.s_addr);
	EXPECT_EQ(DNS_PORT, ntohs(from.sin_port));
	return (size_t)n;
}

/* A query at upstream u's UDP socket; its length, and who sent it. */
static size_t up_recv(struct __test_metadata *_metadata, struct upstream *u,
		      uint8_t *m, size_t cap, struct sockaddr_in *from)
{
	socklen_t flen = sizeof(*from);
	ssize_t n;

	ASSERT_TRUE(vmnet__wait_for(u->udp, POLLIN, WAIT_MS))
	TH_LOG("%s got no query", u->addr);
	n = recvfrom(u->udp, m, cap, 0, (struct sockaddr *)from, &flen);
	ASSERT_LE(DNS_HDR_LEN, n);
	return (size_t)n;
}

/* Nothing ever reached upstream u, on UDP or TCP. */
static bool untouched(struct upstream *u)
{
	return !vmnet__wait_for(u->udp, POLLIN, 0) &&
	       !vmnet__wait_for(u->tcp, POLLIN, 0);
}

static void up_answer(struct __test_metadata *_metadata, struct upstream *u,
		      const uint8_t *a, size_t len,
		      const struct sockaddr_in *to)
{
	ASSERT_EQ((ssize_t)len,
		  sendto(u->udp, a, len, 0, (const struct sockaddr *)to,
			 sizeof(*to)));
}

TEST_F_TIMEOUT(dns, a_answer_relayed_and_bound_for_its_ttl, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec recs[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
		{ NULL, DNS_TYPE_A, TTL_SHORT, "192.0.2.11" },
		{ "evil.example.net", DNS_TYPE_A, TTL_LONG, "192.0.2.66" },
	};
	struct sockaddr_in from;
	struct dns_stats s;
	size_t qn, mn, an, rn;
	int g;

	start(_metadata, self, POLICY_TWO, 0, WAIT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x1234, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);

	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	/* The same question, under an ID of the resolver's own. */
	ASSERT_EQ(qn, mn);
	EXPECT_EQ(0, memcmp(m + 2, q + 2, qn - 2));
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, recs, 3);
	up_answer(_metadata, &self->up[0], a, an, &from);

	rn = guest_recv(_metadata, g, r, sizeof(r));
	ASSERT_EQ(an, rn);
	EXPECT_EQ(0x1234, dns_get16(r));
	EXPECT_EQ(0, memcmp(r + 2, a + 2, an - 2));

	EXPECT_TRUE(bound(self, "api.example.com", "192.0.2.10"));
	EXPECT_TRUE(bound(self, "API.example.com.", "192.0.2.11"));
	EXPECT_FALSE(bound(self, "api.example.com", "192.0.2.66"));
	EXPECT_FALSE(bound(self, "evil.example.net", "192.0.2.66"));
	EXPECT_FALSE(bound(self, "api.example.com", "192.0.2.99"));
	/* Each for its own TTL. */
	advance_s(self, TTL_SHORT + 1);
	EXPECT_TRUE(bound(self, "api.example.com", "192.0.2.10"));
	EXPECT_FALSE(bound(self, "api.example.com", "192.0.2.11"));
	advance_s(self, TTL_LONG - TTL_SHORT);
	EXPECT_FALSE(bound(self, "api.example.com", "192.0.2.10"));

	dns__stats(self->dns, &s);
	EXPECT_EQ(1, s.queries);
	EXPECT_EQ(1, s.forwarded);
	EXPECT_EQ(1, s.answered);
	EXPECT_EQ(2, s.bindings);
	EXPECT_EQ(0, s.refused);
	EXPECT_TRUE(untouched(&self->up[1]));
	EXPECT_TRUE(untouched(&self->up[2]));
	close(g);
}

/* A parsed policy doc, for dns__set_resolvers(). */
static struct net_policy *policy_of(struct __test_metadata *_metadata,
				    const char *doc)
{
	struct net_policy *np = NULL;
	char err[256] = "";
	json_error_t jerr;
	json_t *obj;

	obj = json_loads(doc, JSON_REJECT_DUPLICATES, &jerr);
	ASSERT_NE(NULL, obj) TH_LOG("%s", jerr.text);
	ASSERT_EQ(0,
		  net_policy__parse(obj, "net.policy", &np, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(obj);
	return np;
}

/*
 * A replaced policy's resolvers reach the running resolver: a query in
 * flight at RES1 when the new policy lists only RES2 starts over at RES2
 * and RES2's answer is relayed (RES1's, late, is not); then with no
 * resolvers the next query is REFUSED and nothing leaves.
 */
TEST_F_TIMEOUT(dns, replaced_resolvers_take_over, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec recs[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.20" },
	};
	struct sockaddr_in from, from1;
	struct net_policy *np;
	struct dns_stats s;
	size_t qn, mn, an, rn;
	int g;

	start(_metadata, self, POLICY_ONE, 0, WAIT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x4242, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from1);
	ASSERT_EQ(qn, mn);

	np = policy_of(_metadata, "{\"dns\": {\"resolvers\": [\"" RES2
				  "\"], \"names\": [\"api.example.com\"]}}");
	dns__set_resolvers(self->dns, np);
	net_policy__free(np);
	mn = up_recv(_metadata, &self->up[1], m, sizeof(m), &from);
	ASSERT_EQ(qn, mn);
	/* RES1 answers late, to a socket that is gone: nothing relayed. */
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, recs, 1);
	sendto(self->up[0].udp, a, an, 0, (struct sockaddr *)&from1,
	       sizeof(from1));
	up_answer(_metadata, &self->up[1], a, an, &from);
	rn = guest_recv(_metadata, g, r, sizeof(r));
	ASSERT_EQ(an, rn);
	EXPECT_EQ(0x4242, dns_get16(r));
	EXPECT_TRUE(bound(self, "api.example.com", "192.0.2.20"));
	EXPECT_FALSE(vmnet__wait_for(g, POLLIN, 0));

	np = policy_of(_metadata, POLICY_NONE);
	dns__set_resolvers(self->dns, np);
	net_policy__free(np);
	/* Taken at the thread's next wake: the query below wakes it. */
	qn = build_query(q, 0x4343, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	rn = guest_recv(_metadata, g, r, sizeof(r));
	EXPECT_EQ(0x4343, dns_get16(r));
	EXPECT_EQ(DNS_RCODE_REFUSED, dns_rcode(r));
	dns__stats(self->dns, &s);
	EXPECT_EQ(1, s.refused);
	EXPECT_EQ(1, s.answered);
	for (int i = 0; i < NR_UPSTREAMS; i++)
		EXPECT_TRUE(untouched(&self->up[i]));
	close(g);
}

TEST_F_TIMEOUT(dns, cname_chain_binds_the_question_name, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec recs[] = {
		{ NULL, DNS_TYPE_CNAME, 100, "cdn.example.net" },
		{ "cdn.example.net", DNS_TYPE_CNAME, 50, "edge.example.org" },
		{ "edge.example.org", DNS_TYPE_A, TTL_LONG, "192.0.2.20" },
	};
	struct sockaddr_in from;
	size_t qn, mn, an;
	int g;

	start(_metadata, self, POLICY_TWO, 0, WAIT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x4242, "www.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, recs, 3);
	up_answer(_metadata, &self->up[0], a, an, &from);
	ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(0x4242, dns_get16(r));

	EXPECT_TRUE(bound(self, "www.example.com", "192.0.2.20"));
	/* Only the question's name. */
	EXPECT_FALSE(bound(self, "edge.example.org", "192.0.2.20"));
	EXPECT_FALSE(bound(self, "cdn.example.net", "192.0.2.20"));
	/* For the lowest TTL along the chain. */
	advance_s(self, 49);
	EXPECT_TRUE(bound(self, "www.example.com", "192.0.2.20"));
	advance_s(self, 2);
	EXPECT_FALSE(bound(self, "www.example.com", "192.0.2.20"));
	close(g);
}

/* No resolvers (an empty list, or no policy): REFUSED, nothing leaves. */
static void expect_refused(struct __test_metadata *_metadata,
			   FIXTURE_DATA(dns) * self)
{
	static uint8_t q[512], r[1024];
	struct dns_stats s;
	size_t qn, rn;
	int g;

	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x5151, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	rn = guest_recv(_metadata, g, r, sizeof(r));
	ASSERT_EQ(qn, rn);
	EXPECT_EQ(0x5151, dns_get16(r));
	EXPECT_EQ(DNS_RCODE_REFUSED, dns_rcode(r));
	EXPECT_TRUE(dns_get16(r + DNS_OFF_FLAGS) & DNS_FLAG_QR);
	EXPECT_EQ(0,
		  memcmp(r + DNS_HDR_LEN, q + DNS_HDR_LEN, qn - DNS_HDR_LEN));
	dns__stats(self->dns, &s);
	EXPECT_EQ(1, s.refused);
	EXPECT_EQ(0, s.forwarded);
	for (int i = 0; i < NR_UPSTREAMS; i++)
		EXPECT_TRUE(untouched(&self->up[i]));
	close(g);
}

/*
 * The guest asks name (type) on a socket of its own: forwarded to RES1
 * (the same question), or answered REFUSED with nothing upstream.
 */
static void ask_expect(struct __test_metadata *_metadata,
		       FIXTURE_DATA(dns) * self, const char *name,
		       uint16_t type, bool forwarded)
{
	static uint8_t q[512], m[512];
	struct sockaddr_in from;
	size_t qn, n;
	int g;

	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x7e57, name, type);
	guest_send(_metadata, g, q, qn);
	if (forwarded) {
		n = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
		ASSERT_EQ(qn, n);
		EXPECT_EQ(0, memcmp(m + 2, q + 2, qn - 2))
		TH_LOG("%s: another question upstream", name);
	} else {
		n = guest_recv(_metadata, g, m, sizeof(m));
		EXPECT_EQ(DNS_RCODE_REFUSED, dns_rcode(m))
		TH_LOG("%s type %u: rcode %u", name, type, dns_rcode(m));
		EXPECT_EQ(0x7e57, dns_get16(m));
		EXPECT_TRUE(untouched(&self->up[0]))
		TH_LOG("%s type %u reached upstream", name, type);
	}
	close(g);
}

/* dns__report()'s line, through the log into a file, holds want. */
static void expect_report(struct __test_metadata *_metadata, struct dns *d,
			  const char *want)
{
	char path[] = "/tmp/kiln-dns-report-XXXXXX", line[1024] = "";
	ssize_t n;
	int fd;

	fd = mkstemp(path);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, log__open(path));
	dns__report(d);
	log__close();
	n = pread(fd, line, sizeof(line) - 1, 0);
	unlink(path);
	close(fd);
	ASSERT_LT(0, n);
	EXPECT_NE(NULL, strstr(line, want))
	TH_LOG("the report: %s", line);
	EXPECT_NE(NULL, strstr(line, "dns: running; "))
	TH_LOG("the report: %s", line);
}

/*
 * Issue 34, finding 5: under a policy that grants only tcp to
 * api.example.com, a TXT question (even for the granted name) and an A
 * question for any other name (data in its labels) are REFUSED and
 * counted, nothing upstream; the granted name's A and AAAA go on.
 */
TEST_F_TIMEOUT(dns, exfiltration_refused_under_a_hostname_grant, 60)
{
	struct dns_stats s;

	start(_metadata, self, POLICY_GRANT, 0, WAIT_MS);
	ask_expect(_metadata, self, "api.example.com", DNS_TYPE_TXT, false);
	ask_expect(_metadata, self,
		   "6b696c6e2d736563726574.x1.exfil.example.net", DNS_TYPE_A,
		   false);
	ask_expect(_metadata, self, "example.com", DNS_TYPE_A, false);
	ask_expect(_metadata, self, "a.api.example.com", DNS_TYPE_A, false);
	ask_expect(_metadata, self, "api.example.com", DNS_TYPE_A, true);
	ask_expect(_metadata, self, "api.example.com", DNS_TYPE_AAAA, true);
	dns__stats(self->dns, &s);
	EXPECT_EQ(6, s.queries);
	EXPECT_EQ(1, s.refused_type);
	EXPECT_EQ(3, s.refused_name);
	EXPECT_EQ(0, s.refused);
	EXPECT_EQ(2, s.forwarded);
	EXPECT_TRUE(untouched(&self->up[1]));
	EXPECT_TRUE(untouched(&self->up[2]));
	/* SIGUSR2's line as Documentation/network.md shows it. */
	expect_report(_metadata, self->dns,
		      "queries 6 refused 0 (type 1 name 3) forwarded 2 ");
}

/*
 * dns.names with CIDR grants only: its names and what is below its
 * wildcards go on, nothing else (not the wildcard's own name).
 */
TEST_F_TIMEOUT(dns, dns_names_and_wildcards, 60)
{
	struct dns_stats s;

	start(_metadata, self, POLICY_NAMES, 0, WAIT_MS);
	ask_expect(_metadata, self, "a.corp.example", DNS_TYPE_A, true);
	ask_expect(_metadata, self, "B.a.Corp.example", DNS_TYPE_A, true);
	ask_expect(_metadata, self, "corp.example", DNS_TYPE_A, false);
	ask_expect(_metadata, self, "exact.example.org", DNS_TYPE_A, true);
	ask_expect(_metadata, self, "x.exact.example.org", DNS_TYPE_A, false);
	ask_expect(_metadata, self, "a.corp.example", DNS_TYPE_TXT, false);
	dns__stats(self->dns, &s);
	EXPECT_EQ(2, s.refused_name);
	EXPECT_EQ(1, s.refused_type);
	EXPECT_EQ(3, s.forwarded);
}

TEST_F_TIMEOUT(dns, no_resolvers_refused_and_nothing_leaves, 60)
{
	start(_metadata, self, POLICY_NONE, 0, WAIT_MS);
	expect_refused(_metadata, self);
}

TEST_F_TIMEOUT(dns, no_policy_refused, 60)
{
	start(_metadata, self, NULL, 0, WAIT_MS);
	expect_refused(_metadata, self);
}

/*
 * Both listed resolvers silent: each asked once (the retry goes to the
 * next one), then SERVFAIL (not a guest timeout); the unlisted one never.
 */
TEST_F_TIMEOUT(dns, upstream_silent_servfail_after_retry, 60)
{
	static uint8_t q[512], m[512], r[1024];
	struct sockaddr_in from;
	struct dns_stats s;
	size_t qn;
	int g;

	start(_metadata, self, POLICY_TWO, 0, TEST_TIMEOUT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x7777, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	up_recv(_metadata, &self->up[1], m, sizeof(m), &from);
	ASSERT_EQ(qn, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(0x7777, dns_get16(r));
	EXPECT_EQ(DNS_RCODE_SERVFAIL, dns_rcode(r));
	dns__stats(self->dns, &s);
	EXPECT_EQ(1, s.servfail);
	EXPECT_EQ(2, s.forwarded);
	EXPECT_EQ(0, s.answered);
	EXPECT_TRUE(untouched(&self->up[0]));
	EXPECT_TRUE(untouched(&self->up[2]));
	close(g);
}

/* One resolver listed: its retry goes to it again, never elsewhere. */
TEST_F_TIMEOUT(dns, unlisted_resolver_never_asked, 60)
{
	static uint8_t q[512], m[512], r[1024];
	struct sockaddr_in from;
	size_t qn;
	int g;

	start(_metadata, self, POLICY_ONE, 0, TEST_TIMEOUT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x0101, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	ASSERT_EQ(qn, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(DNS_RCODE_SERVFAIL, dns_rcode(r));
	EXPECT_TRUE(untouched(&self->up[1]));
	EXPECT_TRUE(untouched(&self->up[2]));
	close(g);
}

/*
 * An upstream slower than the per-try timeout: the retry does not close
 * the first try's socket, and the first try's late answer (after the
 * retry went out, before the last try's time is up) is relayed, not a
 * SERVFAIL. Closing it lost the answers of a cold resolver, and glibc
 * failed the guest's first lookups (Documentation/network.md, "Slow
 * upstreams").
 */
TEST_F_TIMEOUT(dns, late_answer_to_the_first_try_relayed, 60)
{
	static uint8_t q[512], m1[512], m2[512], a[1024], r[1024];
	const struct rec recs[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
	};
	struct sockaddr_in from1, from2;
	struct dns_stats s;
	size_t qn, mn, an;
	int g;

	start(_metadata, self, POLICY_ONE, 0, SLOW_TRY_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x2468, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m1, sizeof(m1), &from1);
	/* The retry, from another socket: the first one is still open. */
	up_recv(_metadata, &self->up[0], m2, sizeof(m2), &from2);
	EXPECT_NE(from1.sin_port, from2.sin_port);
	an = build_answer(a, m1, mn, DNS_RCODE_NOERROR, recs, 1);
	up_answer(_metadata, &self->up[0], a, an, &from1);

	ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(0x2468, dns_get16(r));
	EXPECT_EQ(DNS_RCODE_NOERROR, dns_rcode(r));
	EXPECT_TRUE(bound(self, "api.example.com", "192.0.2.10"));
	dns__stats(self->dns, &s);
	EXPECT_EQ(2, s.forwarded);
	EXPECT_EQ(1, s.answered);
	EXPECT_EQ(0, s.servfail);
	/* The retry's own answer, later, finds no query: nothing more. */
	an = build_answer(a, m2, mn, DNS_RCODE_NOERROR, recs, 1);
	up_answer(_metadata, &self->up[0], a, an, &from2);
	EXPECT_FALSE(vmnet__wait_for(g, POLLIN, 2 * SLOW_TRY_MS));
	close(g);
}

/* Answers with another ID or question are ignored; the right one counts. */
TEST_F_TIMEOUT(dns, wrong_answers_ignored, 60)
{
	static uint8_t q[512], m[512], w[512], a[1024], r[1024];
	const struct rec evil[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.66" },
	};
	const struct rec good[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
	};
	struct sockaddr_in from;
	struct dns_stats s;
	size_t qn, mn, wn, an;
	int g;

	start(_metadata, self, POLICY_TWO, 0, WAIT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x2222, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);

	/* Another ID, then another question under the right ID. */
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, evil, 1);
	dns_put16(a, dns_get16(m) ^ 1);
	up_answer(_metadata, &self->up[0], a, an, &from);
	wn = build_query(w, dns_get16(m), "api.example.org", DNS_TYPE_A);
	an = build_answer(a, w, wn, DNS_RCODE_NOERROR, evil, 1);
	up_answer(_metadata, &self->up[0], a, an, &from);
	ASSERT_TRUE(wait_stats(self->dns, bad_answers_at_least, 2, &s));
	EXPECT_FALSE(vmnet__wait_for(g, POLLIN, 0));

	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, good, 1);
	up_answer(_metadata, &self->up[0], a, an, &from);
	ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_TRUE(bound(self, "api.example.com", "192.0.2.10"));
	EXPECT_FALSE(bound(self, "api.example.com", "192.0.2.66"));
	EXPECT_FALSE(bound(self, "api.example.org", "192.0.2.66"));
	close(g);
}

TEST_F_TIMEOUT(dns, malformed_queries_counted_and_survived, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec good[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
	};
	struct sockaddr_in from;
	struct dns_stats s;
	size_t qn, mn, an;
	int g;

	start(_metadata, self, POLICY_ONE, 0, WAIT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x3333, "api.example.com", DNS_TYPE_A);

	guest_send(_metadata, g, q, 5); /* not even a header: dropped */
	dns_put16(q + DNS_OFF_FLAGS, DNS_FLAG_QR); /* a response: dropped */
	guest_send(_metadata, g, q, qn);
	dns_put16(q + DNS_OFF_FLAGS, DNS_FLAG_RD);
	guest_send(_metadata, g, q, qn - 8); /* the name cut: FORMERR */
	ASSERT_EQ(DNS_HDR_LEN, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(0x3333, dns_get16(r));
	EXPECT_EQ(DNS_RCODE_FORMERR, dns_rcode(r));
	/* A pointer to itself. */
	dns_put16(q + DNS_HDR_LEN, QNAME_POINTER);
	guest_send(_metadata, g, q, qn);
	ASSERT_EQ(DNS_HDR_LEN, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(DNS_RCODE_FORMERR, dns_rcode(r));
	ASSERT_TRUE(wait_stats(self->dns, malformed_at_least, 4, &s));
	EXPECT_EQ(4, s.malformed);
	EXPECT_EQ(0, s.queries);
	EXPECT_TRUE(untouched(&self->up[0]));

	/* Still serving. */
	qn = build_query(q, 0x3334, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, good, 1);
	up_answer(_metadata, &self->up[0], a, an, &from);
	ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(0x3334, dns_get16(r));
	close(g);
}

/* Over 512 bytes for a guest without EDNS: TC, but bound all the same. */
TEST_F_TIMEOUT(dns, large_answer_truncated_for_udp, 60)
{
	static uint8_t q[512], m[512], a[4096], r[4096];
	struct rec recs[BIG_ANSWER_RRS];
	char addrs[BIG_ANSWER_RRS][INET_ADDRSTRLEN];
	struct sockaddr_in from;
	size_t qn, mn, an;
	int g;

	for (int i = 0; i < BIG_ANSWER_RRS; i++) {
		snprintf(addrs[i], sizeof(addrs[i]), "192.0.2.%d", i + 1);
		recs[i] = (struct rec){ NULL, DNS_TYPE_A, TTL_LONG, addrs[i] };
	}
	start(_metadata, self, POLICY_ONE, 0, WAIT_MS);
	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x4444, "big.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, recs, BIG_ANSWER_RRS);
	ASSERT_LT(DNS_UDP_MAX, an);
	up_answer(_metadata, &self->up[0], a, an, &from);
	ASSERT_EQ(qn, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_TRUE(dns_get16(r + DNS_OFF_FLAGS) & DNS_FLAG_TC);
	EXPECT_EQ(0x4444, dns_get16(r));
	EXPECT_TRUE(bound(self, "big.example.com", "192.0.2.1"));
	close(g);
}

TEST_F_TIMEOUT(dns, pending_bounded_oldest_dropped, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec good[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
	};
	struct sockaddr_in from[MAX_PENDING + 2];
	struct dns_stats s;
	size_t qn, mn = 0, an;
	int g;

	start(_metadata, self, POLICY_ONE, MAX_PENDING, WAIT_MS);
	g = guest_udp(_metadata, self);
	for (int i = 0; i < MAX_PENDING + 2; i++) {
		qn = build_query(q, (uint16_t)(0x100 + i), "api.example.com",
				 DNS_TYPE_A);
		guest_send(_metadata, g, q, qn);
		mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from[i]);
	}
	ASSERT_TRUE(wait_stats(self->dns, dropped_at_least, 2, &s));
	EXPECT_EQ(2, s.dropped);
	/* The table grew to its limit, one entry at a time, no further. */
	EXPECT_EQ(MAX_PENDING, s.query_slots);
	/* The newest is still pending: its answer gets through. */
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, good, 1);
	up_answer(_metadata, &self->up[0], a, an, &from[MAX_PENDING + 1]);
	ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));
	EXPECT_EQ(0x100 + MAX_PENDING + 1, dns_get16(r));
	close(g);
}

static bool queries_at_least(const struct dns_stats *s, uint64_t n)
{
	return s->queries >= n;
}

/*
 * The query table is touched only as deep as questions in flight went:
 * answered one after the other they reuse its first entry; in flight
 * together they take one entry each.
 */
TEST_F_TIMEOUT(dns, query_table_as_deep_as_questions_in_flight, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec good[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
	};
	struct sockaddr_in from;
	struct dns_stats s;
	size_t qn, mn, an;
	int g;

	start(_metadata, self, POLICY_ONE, MAX_PENDING, WAIT_MS);
	dns__stats(self->dns, &s);
	EXPECT_EQ(0, s.query_slots);
	g = guest_udp(_metadata, self);
	for (int i = 0; i < 3; i++) {
		qn = build_query(q, (uint16_t)(0x200 + i), "api.example.com",
				 DNS_TYPE_A);
		guest_send(_metadata, g, q, qn);
		mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
		an = build_answer(a, m, mn, DNS_RCODE_NOERROR, good, 1);
		up_answer(_metadata, &self->up[0], a, an, &from);
		ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));
	}
	dns__stats(self->dns, &s);
	EXPECT_EQ(3, s.answered);
	EXPECT_EQ(1, s.query_slots);
	for (int i = 0; i < MAX_PENDING - 1; i++) {
		qn = build_query(q, (uint16_t)(0x300 + i), "api.example.com",
				 DNS_TYPE_A);
		guest_send(_metadata, g, q, qn);
		up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	}
	ASSERT_TRUE(wait_stats(self->dns, queries_at_least, 3 + MAX_PENDING - 1,
			       &s));
	EXPECT_EQ(MAX_PENDING - 1, s.query_slots);
	EXPECT_EQ(0, s.dropped);
	close(g);
}

/* TCP: length-prefixed, forwarded over TCP, answered on the connection. */
TEST_F_TIMEOUT(dns, tcp_query_answered_and_bound, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec good[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.30" },
	};
	struct sockaddr_in gw = vmnet__sin(VMNET_GATEWAY, DNS_PORT);
	size_t qn, an;
	ssize_t n;
	int g, c;

	start(_metadata, self, POLICY_ONE, 0, WAIT_MS);
	g = vmnet__guest_socket(_metadata, &self->net, SOCK_STREAM);
	ASSERT_EQ(-1, connect(g, (struct sockaddr *)&gw, sizeof(gw)));
	ASSERT_EQ(EINPROGRESS, errno);
	ASSERT_TRUE(vmnet__wait_for(g, POLLOUT, WAIT_MS));
	qn = build_query(q + DNS_TCP_LEN, 0x5555, "tcp.example.com",
			 DNS_TYPE_A);
	dns_put16(q, (uint16_t)qn);
	ASSERT_EQ((ssize_t)(qn + DNS_TCP_LEN), send(g, q, qn + DNS_TCP_LEN, 0));

	ASSERT_TRUE(vmnet__wait_for(self->up[0].tcp, POLLIN, WAIT_MS))
	TH_LOG("no TCP connection upstream");
	c = accept4(self->up[0].tcp, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_LE(0, c);
	ASSERT_TRUE(vmnet__wait_for(c, POLLIN, WAIT_MS));
	n = recv(c, m, sizeof(m), 0);
	ASSERT_EQ((ssize_t)(qn + DNS_TCP_LEN), n);
	ASSERT_EQ(qn, dns_get16(m));
	an = build_answer(a + DNS_TCP_LEN, m + DNS_TCP_LEN, qn,
			  DNS_RCODE_NOERROR, good, 1);
	dns_put16(a, (uint16_t)an);
	ASSERT_EQ((ssize_t)(an + DNS_TCP_LEN), send(c, a, an + DNS_TCP_LEN, 0));

	ASSERT_TRUE(vmnet__wait_for(g, POLLIN, WAIT_MS));
	n = recv(g, r, sizeof(r), 0);
	ASSERT_EQ((ssize_t)(an + DNS_TCP_LEN), n);
	EXPECT_EQ(an, dns_get16(r));
	EXPECT_EQ(0x5555, dns_get16(r + DNS_TCP_LEN));
	EXPECT_TRUE(bound(self, "tcp.example.com", "192.0.2.30"));
	EXPECT_TRUE(untouched(&self->up[2]));
	close(c);
	close(g);
}

static void decide(FIXTURE_DATA(dns) * self, const char *dst, int port,
		   struct net_decision *d)
{
	struct net_flow f = {
		.proto = IPPROTO_TCP,
		.src = vmnet__sin(VMNET_GUEST, 40000),
		.dst = vmnet__sin(dst, port),
	};

	pthread_mutex_lock(&self->lock);
	net_policy__decide(self->policy, &f, self->bindings, d);
	pthread_mutex_unlock(&self->lock);
}

/* A hostname rule allows what the resolver bound to it, and only that. */
TEST_F_TIMEOUT(dns, bound_hostname_opens_its_policy_rule, 60)
{
	static uint8_t q[512], m[512], a[1024], r[1024];
	const struct rec good[] = {
		{ NULL, DNS_TYPE_A, TTL_LONG, "192.0.2.10" },
	};
	struct sockaddr_in from;
	struct net_decision d;
	size_t qn, mn, an;
	int g;

	start(_metadata, self, POLICY_TWO, 0, WAIT_MS);
	decide(self, "192.0.2.10", 443, &d);
	EXPECT_EQ(NET_VERDICT_DENY, d.verdict);

	g = guest_udp(_metadata, self);
	qn = build_query(q, 0x6666, "api.example.com", DNS_TYPE_A);
	guest_send(_metadata, g, q, qn);
	mn = up_recv(_metadata, &self->up[0], m, sizeof(m), &from);
	an = build_answer(a, m, mn, DNS_RCODE_NOERROR, good, 1);
	up_answer(_metadata, &self->up[0], a, an, &from);
	ASSERT_EQ(an, guest_recv(_metadata, g, r, sizeof(r)));

	decide(self, "192.0.2.10", 443, &d);
	EXPECT_EQ(NET_VERDICT_ALLOW, d.verdict);
	EXPECT_STREQ("tcp grant 0", d.reason);
	decide(self, "192.0.2.99", 443, &d);
	EXPECT_EQ(NET_VERDICT_DENY, d.verdict);
	EXPECT_STREQ("no grant", d.reason);
	decide(self, "192.0.2.10", 80, &d);
	EXPECT_EQ(NET_VERDICT_DENY, d.verdict);
	close(g);
}

TEST_HARNESS_MAIN
