// SPDX-License-Identifier: GPL-2.0
/*
 * The egress program's SYN filter for a policy (net/synmap.c): which
 * policies give which prefixes and ports, that every flow the policy
 * grants gets through (the filter is a superset), that what no grant
 * can match does not, and the port sets' merging. In-process; no BPF.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <stdlib.h>

#include "lib/compiler.h"
#include "net/flow.h"
#include "net/policy.h"
#include "net/synmap.h"
#include "selftests/kselftest.h"

#define ERR_LEN 512
#define DOC_MAX 4096

/* The policy in doc, with ' for " so the tables read. */
static struct net_policy *parse(struct __test_metadata *_metadata,
				const char *doc)
{
	struct net_policy *p = NULL;
	char buf[DOC_MAX], err[ERR_LEN] = "";
	json_error_t jerr;
	json_t *obj;
	size_t i;

	for (i = 0; doc[i] && i + 1 < sizeof(buf); i++)
		buf[i] = doc[i] == '\'' ? '"' : doc[i];
	buf[i] = '\0';
	obj = json_loads(buf, JSON_REJECT_DUPLICATES, &jerr);
	ASSERT_NE(NULL, obj) TH_LOG("bad test JSON: %s", jerr.text);
	EXPECT_EQ(0, net_policy__parse(obj, "net.policy", &p, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(obj);
	return p;
}

static uint32_t ip(const char *s)
{
	return inet_addr(s);
}

static uint64_t fake_clock(void *opaque)
{
	return *(uint64_t *)opaque;
}

static bool allows(const struct net_synmap *m, const char *addr, int port)
{
	return net_synmap__allows(m, ip(addr), (uint16_t)port);
}

/* Whether the policy itself grants a TCP flow to addr:port. */
static bool granted(const struct net_policy *p, const struct net_bindings *b,
		    const char *addr, int port)
{
	struct net_flow f = { .proto = IPPROTO_TCP };
	struct net_decision d;

	f.dst.sin_family = AF_INET;
	f.dst.sin_addr.s_addr = ip(addr);
	f.dst.sin_port = htons(port);
	net_policy__decide(p, &f, b, &d);
	return d.verdict != NET_VERDICT_DENY;
}

static const struct egress_syn_ports *find(const struct net_synmap *m,
					   const char *addr, unsigned int len)
{
	for (unsigned int i = 0; i < m->nr; i++)
		if (m->e[i].key.addr == ip(addr) &&
		    m->e[i].key.prefixlen == len)
			return &m->e[i].ports;
	return NULL;
}

TEST(empty_policy_refuses_everything)
{
	struct net_synmap m;

	ASSERT_EQ(0, net_synmap__build(&m, NULL, NULL));
	EXPECT_FALSE(m.open);
	EXPECT_EQ(0, m.nr);
	EXPECT_FALSE(allows(&m, "203.0.113.9", 443));
	net_synmap__release(&m);
}

TEST(hook_opens_everything)
{
	struct net_policy *p = parse(
		_metadata, "{'tcp': [{'to': '10.9.0.0/16', 'ports': [22]}],"
			   " 'hook': {'socket': '/run/h.sock'}}");
	struct net_synmap m;

	ASSERT_EQ(0, net_synmap__build(&m, p, NULL));
	EXPECT_TRUE(m.open);
	EXPECT_EQ(0, m.nr);
	EXPECT_TRUE(allows(&m, "198.51.100.7", 5));
	net_synmap__release(&m);
	net_policy__free(p);
}

TEST(prefixes_and_ports)
{
	struct net_policy *p = parse(
		_metadata,
		"{'tcp': [{'to': '203.0.113.0/24', 'ports': [443, '8000-8100']},"
		"         {'to': '203.0.113.9', 'ports': [22]},"
		"         {'to': '192.0.2.1'}],"
		" 'udp': [{'to': '198.51.100.7', 'ports': [5000]}]}");
	const struct egress_syn_ports *v;
	struct net_synmap m;

	ASSERT_EQ(0, net_synmap__build(&m, p, NULL));
	EXPECT_FALSE(m.open);
	ASSERT_EQ(3, m.nr);
	/* Shortest first; the /32 inside the /24 has the /24's ports too. */
	EXPECT_EQ(24, m.e[0].key.prefixlen);
	v = find(&m, "203.0.113.0", 24);
	ASSERT_NE(NULL, v);
	ASSERT_EQ(2, v->nr);
	EXPECT_EQ(443, v->range[0].lo);
	EXPECT_EQ(443, v->range[0].hi);
	EXPECT_EQ(8000, v->range[1].lo);
	EXPECT_EQ(8100, v->range[1].hi);
	v = find(&m, "203.0.113.9", 32);
	ASSERT_NE(NULL, v);
	EXPECT_EQ(3, v->nr);
	v = find(&m, "192.0.2.1", 32);
	ASSERT_NE(NULL, v);
	ASSERT_EQ(1, v->nr);
	EXPECT_EQ(0, v->range[0].lo);
	EXPECT_EQ(65535, v->range[0].hi);

	EXPECT_TRUE(allows(&m, "203.0.113.200", 443));
	EXPECT_TRUE(allows(&m, "203.0.113.200", 8050));
	EXPECT_FALSE(allows(&m, "203.0.113.200", 22));
	EXPECT_TRUE(allows(&m, "203.0.113.9", 22));
	EXPECT_TRUE(allows(&m, "203.0.113.9", 443));
	EXPECT_FALSE(allows(&m, "203.0.113.9", 80));
	EXPECT_TRUE(allows(&m, "192.0.2.1", 1234));
	EXPECT_FALSE(allows(&m, "192.0.2.2", 1234));
	/* UDP rules are not the filter's: it sees TCP only. */
	EXPECT_FALSE(allows(&m, "198.51.100.7", 5000));
	net_synmap__release(&m);
	net_policy__free(p);
}

/* A class is not a prefix the trie holds: any address, its ports. */
TEST(class_is_every_address_with_its_ports)
{
	struct net_policy *p =
		parse(_metadata,
		      "{'tcp': [{'to': 'private', 'ports': [22]},"
		      "         {'to': '198.51.100.0/24', 'ports': [80]}]}");
	struct net_synmap m;

	ASSERT_EQ(0, net_synmap__build(&m, p, NULL));
	ASSERT_EQ(2, m.nr);
	EXPECT_NE(NULL, find(&m, "0.0.0.0", 0));
	EXPECT_TRUE(allows(&m, "10.1.2.3", 22));
	EXPECT_TRUE(allows(&m, "203.0.113.9", 22)); /* a superset */
	EXPECT_FALSE(allows(&m, "10.1.2.3", 80));
	EXPECT_TRUE(allows(&m, "198.51.100.9", 80));
	EXPECT_TRUE(allows(&m, "198.51.100.9", 22)); /* the /0's too */
	net_synmap__release(&m);
	net_policy__free(p);
}

/* Hostname rules and http grants: only the addresses bound to them. */
TEST(hostnames_through_bindings)
{
	struct net_policy *p = parse(
		_metadata,
		"{'tcp': [{'to': 'api.example.com', 'ports': [443]},"
		"         {'to': '*.example.org', 'ports': ['9000-9001']}],"
		" 'http': [{'host': 'git.example.net'}]}");
	struct egress_syn_ports v = { 0 };
	struct net_bindings *b;
	struct net_synmap m;
	uint64_t now = 1000;

	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_synmap__build(&m, p, b));
	EXPECT_EQ(0, m.nr); /* nothing bound yet */
	EXPECT_FALSE(allows(&m, "198.51.100.10", 443));
	net_synmap__release(&m);

	ASSERT_EQ(0, net_bindings__insert(b, "api.example.com",
					  ip("198.51.100.10"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "a.example.org",
					  ip("198.51.100.11"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "git.example.net",
					  ip("198.51.100.12"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "evil.example.com",
					  ip("198.51.100.13"), 60));
	/* Two names at one address: both names' ports. */
	ASSERT_EQ(0, net_bindings__insert(b, "git.example.net",
					  ip("198.51.100.10"), 60));
	ASSERT_EQ(0, net_synmap__build(&m, p, b));
	EXPECT_EQ(3, m.nr);
	EXPECT_TRUE(allows(&m, "198.51.100.10", 443));
	EXPECT_TRUE(allows(&m, "198.51.100.10", 80));
	EXPECT_FALSE(allows(&m, "198.51.100.10", 22));
	EXPECT_TRUE(allows(&m, "198.51.100.11", 9001));
	EXPECT_FALSE(allows(&m, "198.51.100.11", 443));
	EXPECT_TRUE(allows(&m, "198.51.100.12", 80));
	EXPECT_TRUE(allows(&m, "198.51.100.12", 443));
	EXPECT_FALSE(allows(&m, "198.51.100.12", 8080));
	EXPECT_FALSE(allows(&m, "198.51.100.13", 443));
	net_synmap__release(&m);

	/* The one-name form the resolver's bindings use. */
	net_synmap__host_ports(p, "b.example.org", &v);
	EXPECT_EQ(1, v.nr);
	EXPECT_TRUE(net_synmap__port(&v, 9000));
	net_synmap__host_ports(p, "example.org", &v); /* not below it */
	EXPECT_EQ(1, v.nr);
	net_synmap__host_ports(p, "git.example.net", &v);
	EXPECT_EQ(3, v.nr);
	EXPECT_TRUE(net_synmap__port(&v, 80));
	EXPECT_TRUE(net_synmap__port(&v, 443));

	/* Expired bindings are not built in. */
	now += 60 * 1000;
	ASSERT_EQ(0, net_synmap__build(&m, p, b));
	EXPECT_EQ(0, m.nr);
	net_synmap__release(&m);
	net_bindings__destroy(b);
	net_policy__free(p);
}

/*
 * The superset: for every destination and port sampled, what the policy
 * grants, the filter lets through.
 */
TEST(never_refuses_a_granted_flow)
{
	static const char *const addrs[] = {
		"203.0.113.1", "203.0.113.9", "198.51.100.10", "192.0.2.1",
		"10.0.0.1",    "8.8.8.8",     "172.16.5.4",    "198.51.100.200",
	};
	static const int ports[] = { 1, 22, 80, 443, 8000, 8100, 8101, 65535 };
	struct net_policy *p = parse(
		_metadata,
		"{'tcp': [{'to': '203.0.113.0/24', 'ports': [443, '8000-8100']},"
		"         {'to': 'api.example.com', 'ports': [22]},"
		"         {'to': '198.51.100.0/25', 'ports': [1, 3, 5, 7, 9,"
		"           11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33]},"
		"         {'to': 'public-internet', 'ports': [8000]}],"
		" 'http': [{'host': 'api.example.com', 'ports': [80]}]}");
	struct net_bindings *b = net_bindings__create(NULL, NULL);
	struct net_synmap m;

	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.com",
					  ip("198.51.100.10"), 60));
	ASSERT_EQ(0, net_synmap__build(&m, p, b));
	for (unsigned int i = 0; i < ARRAY_SIZE(addrs); i++)
		for (unsigned int j = 0; j < ARRAY_SIZE(ports); j++)
			if (granted(p, b, addrs[i], ports[j]))
				EXPECT_TRUE(allows(&m, addrs[i], ports[j]))
	TH_LOG("%s:%d granted, filtered", addrs[i], ports[j]);
	/* 17 single ports do not fit: every port at that /25. */
	EXPECT_TRUE(allows(&m, "198.51.100.10", 2));
	EXPECT_FALSE(allows(&m, "198.51.100.200", 2));
	net_synmap__release(&m);
	net_bindings__destroy(b);
	net_policy__free(p);
}

TEST(port_set_union)
{
	struct egress_syn_ports v = { 0 }, add = { 0 };

	add.nr = 2;
	add.range[0] = (struct egress_port_range){ 100, 200 };
	add.range[1] = (struct egress_port_range){ 10, 20 };
	net_synmap__union(&v, &add);
	ASSERT_EQ(2, v.nr);
	EXPECT_EQ(10, v.range[0].lo);
	EXPECT_EQ(100, v.range[1].lo);
	/* Adjacent and overlapping ranges merge. */
	add.nr = 2;
	add.range[0] = (struct egress_port_range){ 21, 99 };
	add.range[1] = (struct egress_port_range){ 150, 300 };
	net_synmap__union(&v, &add);
	ASSERT_EQ(1, v.nr);
	EXPECT_EQ(10, v.range[0].lo);
	EXPECT_EQ(300, v.range[0].hi);
	EXPECT_FALSE(net_synmap__port(&v, 9));
	EXPECT_TRUE(net_synmap__port(&v, 10));
	EXPECT_TRUE(net_synmap__port(&v, 300));
	EXPECT_FALSE(net_synmap__port(&v, 301));

	/* More than fit: every port. */
	v.nr = 0;
	add.nr = EGRESS_SYN_MAX_RANGES;
	for (unsigned int i = 0; i < add.nr; i++)
		add.range[i] =
			(struct egress_port_range){ 2 * i + 1, 2 * i + 1 };
	net_synmap__union(&v, &add);
	EXPECT_EQ(EGRESS_SYN_MAX_RANGES, v.nr);
	add.nr = 1;
	add.range[0] = (struct egress_port_range){ 1000, 1000 };
	net_synmap__union(&v, &add);
	ASSERT_EQ(1, v.nr);
	EXPECT_EQ(0, v.range[0].lo);
	EXPECT_EQ(65535, v.range[0].hi);
	/* A count past the array is read as the array. */
	v.nr = 1000;
	EXPECT_TRUE(net_synmap__port(&v, 5));
}

TEST_HARNESS_MAIN
