// SPDX-License-Identifier: GPL-2.0
/*
 * The network policy (net/policy.c, net/bindings.c): the JSON accepted
 * and each refusal's one line, the address classes at their edges, CIDR
 * and port matching, hostname grants only through trusted DNS bindings
 * (and their expiry), what is denied whatever the rules, replacement
 * keeping the old policy on error, and the config's "net.policy" and
 * --net-policy. In-process; no VM, no sockets.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "net/flow.h"
#include "net/hostaddr.h"
#include "net/netcfg.h"
#include "net/policy.h"
#include "selftests/kselftest.h"
#include "vmm/config.h"
#include "vmm/options.h"

#define ERR_LEN	 512
#define DOC_MAX	 (64 * 1024)
#define MAX_ARGS 16

/*
 * The policy in doc, with ' for " so the tables read. 0 or -errno; err
 * gets the line.
 */
static int parse(const char *doc, struct net_policy **p, char *err, size_t len)
{
	char buf[DOC_MAX];
	json_error_t jerr;
	json_t *obj;
	size_t i;
	int ret;

	for (i = 0; doc[i] && i + 1 < sizeof(buf); i++)
		buf[i] = doc[i] == '\'' ? '"' : doc[i];
	buf[i] = '\0';
	obj = json_loads(buf, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj) {
		snprintf(err, len, "bad test JSON: %s", jerr.text);
		return -EBADMSG;
	}
	err[0] = '\0';
	*p = NULL;
	ret = net_policy__parse(obj, "net.policy", p, err, len);
	json_decref(obj);
	return ret;
}

static uint32_t ip(const char *s)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1)
		abort();
	return a.s_addr;
}

/* The verdict on proto to dst:port from the guest; reason in d. */
static enum net_verdict decide(const struct net_policy *p,
			       const struct net_bindings *b, uint8_t proto,
			       const char *dst, unsigned int port,
			       struct net_decision *d)
{
	struct net_flow f = {
		.proto = proto,
		.src = { .sin_family = AF_INET,
			 .sin_addr.s_addr = ip("10.0.2.15"),
			 .sin_port = htons(40000) },
		.dst = { .sin_family = AF_INET,
			 .sin_addr.s_addr = ip(dst),
			 .sin_port = htons(port) },
	};

	memset(d, 0, sizeof(*d));
	strcpy(d->reason, "unset");
	net_policy__decide(p, &f, b, d);
	return d->verdict;
}

#define TCP   IPPROTO_TCP
#define UDP   IPPROTO_UDP
#define ALLOW NET_VERDICT_ALLOW
#define DENY  NET_VERDICT_DENY
#define ASK   NET_VERDICT_ASK

/* Documentation/network.md's example; the rules alone, and with its hook. */
#define EXAMPLE_RULES                                                     \
	"{'dns': {'resolvers': ['9.9.9.9', '1.1.1.1:5353']},"             \
	" 'tcp': [{'to': '203.0.113.0/24', 'ports': [443, '8000-8100']}," \
	"         {'to': 'api.example.com', 'ports': [443]},"             \
	"         {'to': 'public-internet'}],"                            \
	" 'udp': [{'to': '198.51.100.7', 'ports': [5000]}]"
static const char example[] = EXAMPLE_RULES
	", 'hook': {'socket': '/run/policy.sock', 'timeoutMs': 250}}";
static const char example_rules[] = EXAMPLE_RULES "}";

TEST(parse_example)
{
	struct net_policy *p;
	struct sockaddr_in sa;
	char err[ERR_LEN];
	unsigned int ms;

	ASSERT_EQ(0, parse(example, &p, err, sizeof(err))) TH_LOG("%s", err);
	EXPECT_EQ(3, net_policy__nr_rules(p, TCP));
	EXPECT_EQ(1, net_policy__nr_rules(p, UDP));
	EXPECT_EQ(0, net_policy__nr_rules(p, IPPROTO_ICMP));
	ASSERT_EQ(2, net_policy__nr_resolvers(p));
	net_policy__resolver(p, 0, &sa);
	EXPECT_EQ(AF_INET, sa.sin_family);
	EXPECT_EQ(ip("9.9.9.9"), sa.sin_addr.s_addr);
	EXPECT_EQ(53, ntohs(sa.sin_port));
	net_policy__resolver(p, 1, &sa);
	EXPECT_EQ(ip("1.1.1.1"), sa.sin_addr.s_addr);
	EXPECT_EQ(5353, ntohs(sa.sin_port));
	EXPECT_STREQ("/run/policy.sock", net_policy__hook(p, &ms));
	EXPECT_EQ(250, ms);
	net_policy__free(p);
}

TEST(parse_minimal_forms)
{
	struct net_policy *p;
	char err[ERR_LEN];
	unsigned int ms;

	/* Nothing granted, no resolver, no hook. */
	ASSERT_EQ(0, parse("{}", &p, err, sizeof(err))) TH_LOG("%s", err);
	EXPECT_EQ(0, net_policy__nr_rules(p, TCP));
	EXPECT_EQ(0, net_policy__nr_resolvers(p));
	EXPECT_EQ(NULL, net_policy__hook(p, &ms));
	net_policy__free(p);

	ASSERT_EQ(0, parse("{'dns': {'resolvers': []}, 'tcp': [], 'udp': [],"
			   " 'hook': {'socket': 's'}}",
			   &p, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("s", net_policy__hook(p, &ms));
	EXPECT_EQ(NET_POLICY_DEFAULT_HOOK_TIMEOUT_MS, ms);
	net_policy__free(p);

	/* Every class but loopback; names; wildcards; trailing dots. */
	ASSERT_EQ(0, parse("{'tcp': [{'to': 'private'}, {'to': 'link-local'},"
			   " {'to': 'multicast'}, {'to': 'broadcast'},"
			   " {'to': 'documentation'}, {'to': 'reserved'},"
			   " {'to': 'public-internet'}, {'to': 'localhost'},"
			   " {'to': '*.Example.COM.'}, {'to': 'a-b.c0'},"
			   " {'to': '0.0.0.0/0'}, {'to': '1.2.3.4:80'},"
			   " {'to': 'x', 'ports': ['1-65535', 1, 65535]}]}",
			   &p, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(13, net_policy__nr_rules(p, TCP));
	net_policy__free(p);
	net_policy__free(NULL);
}

static const struct {
	const char *doc, *err;
} refusals[] = {
	{ "[]", "net.policy: must be an object (\"dns\", \"tcp\", \"udp\", "
		"\"http\", \"hook\")" },
	{ "{'tcp': [], 'https': []}", "net.policy: unknown key \"https\"" },
	{ "{'tcp': [{'to': '10.0.0.1'}, {'to': 'api..example.com'}]}",
	  "net.policy.tcp[1].to: \"api..example.com\" is not an address, a "
	  "CIDR, a hostname or an address class" },
	{ "{'tcp': {}}",
	  "net.policy.tcp: must be an array of rules ({\"to\": ...})" },
	{ "{'udp': ['x']}", "net.policy.udp[0]: must be an object ({\"to\": "
			    "..., \"ports\": [...]})" },
	{ "{'tcp': [{'to': 'a.com', 'port': [1]}]}",
	  "net.policy.tcp[0]: unknown key \"port\"" },
	{ "{'udp': [{'ports': [1]}]}", "net.policy.udp[0]: needs \"to\"" },
	{ "{'tcp': [{'to': 5}]}",
	  "net.policy.tcp[0].to: must be a string (an address, a CIDR, a "
	  "hostname or an address class)" },
	{ "{'tcp': [{'to': 'loopback'}]}",
	  "net.policy.tcp[0].to: \"loopback\" is loopback, which a grant "
	  "cannot open: the guest's is its own and never reaches the proxy, "
	  "the host's must stay closed" },
	{ "{'tcp': [{'to': '127.0.0.1'}]}",
	  "net.policy.tcp[0].to: \"127.0.0.1\" is loopback, which a grant "
	  "cannot open: the guest's is its own and never reaches the proxy, "
	  "the host's must stay closed" },
	{ "{'udp': [{'to': '127.0.0.0/8'}]}",
	  "net.policy.udp[0].to: \"127.0.0.0/8\" is loopback, which a grant "
	  "cannot open: the guest's is its own and never reaches the proxy, "
	  "the host's must stay closed" },
	{ "{'tcp': [{'to': '127.1.0.0/16'}]}",
	  "net.policy.tcp[0].to: \"127.1.0.0/16\" is loopback, which a grant "
	  "cannot open: the guest's is its own and never reaches the proxy, "
	  "the host's must stay closed" },
	{ "{'tcp': [{'to': '127.0.0.1:22'}]}",
	  "net.policy.tcp[0].to: \"127.0.0.1:22\" is loopback, which a grant "
	  "cannot open: the guest's is its own and never reaches the proxy, "
	  "the host's must stay closed" },
	{ "{'tcp': [{'to': '::1'}]}",
	  "net.policy.tcp[0].to: \"::1\" is IPv6, not supported yet (the data "
	  "path is IPv4-only)" },
	{ "{'tcp': [{'to': '2001:db8::/32'}]}",
	  "net.policy.tcp[0].to: \"2001:db8::/32\" is IPv6, not supported yet "
	  "(the data path is IPv4-only)" },
	{ "{'tcp': [{'to': '10.0.0.0/33'}]}",
	  "net.policy.tcp[0].to: \"10.0.0.0/33\" is not a CIDR (A.B.C.D/N, N "
	  "0 to 32)" },
	{ "{'tcp': [{'to': '10.0.0.1/8'}]}",
	  "net.policy.tcp[0].to: \"10.0.0.1/8\" has bits set past its prefix" },
	{ "{'tcp': [{'to': '300.1.2.3'}]}",
	  "net.policy.tcp[0].to: \"300.1.2.3\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': '1.2.3.4:0'}]}",
	  "net.policy.tcp[0].to: \"1.2.3.4:0\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': '-a.com'}]}",
	  "net.policy.tcp[0].to: \"-a.com\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': 'a-.com'}]}",
	  "net.policy.tcp[0].to: \"a-.com\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': 'a_b.com'}]}",
	  "net.policy.tcp[0].to: \"a_b.com\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': '*'}]}",
	  "net.policy.tcp[0].to: \"*\" is not an address, a CIDR, a hostname "
	  "or an address class" },
	{ "{'tcp': [{'to': '*.*.a.com'}]}",
	  "net.policy.tcp[0].to: \"*.*.a.com\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': 'a.*.com'}]}",
	  "net.policy.tcp[0].to: \"a.*.com\" is not an address, a CIDR, a "
	  "hostname or an address class" },
	{ "{'tcp': [{'to': ''}]}",
	  "net.policy.tcp[0].to: \"\" is not an address, a CIDR, a hostname "
	  "or an address class" },
	{ "{'tcp': [{'to': "
	  "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
	  "com'}]}",
	  "net.policy.tcp[0].to: "
	  "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
	  "com\" is not an address, a CIDR, a hostname or an address class" },
	{ "{'tcp': [{'to': 'a.com', 'ports': 443}]}",
	  "net.policy.tcp[0].ports: must be an array of ports (443) and "
	  "ranges (\"8000-8100\")" },
	{ "{'tcp': [{'to': 'a.com', 'ports': []}]}",
	  "net.policy.tcp[0].ports: empty (leave \"ports\" out for every "
	  "port)" },
	{ "{'tcp': [{'to': 'a.com', 'ports': [80, 0]}]}",
	  "net.policy.tcp[0].ports[1]: 0 is not a port (1 to 65535)" },
	{ "{'udp': [{'to': 'a.com', 'ports': [65536]}]}",
	  "net.policy.udp[0].ports[0]: 65536 is not a port (1 to 65535)" },
	{ "{'tcp': [{'to': 'a.com', 'ports': ['8100-8000']}]}",
	  "net.policy.tcp[0].ports[0]: \"8100-8000\" is not a port range "
	  "(\"A-B\", 1 <= A <= B <= 65535)" },
	{ "{'tcp': [{'to': 'a.com', 'ports': ['0-10']}]}",
	  "net.policy.tcp[0].ports[0]: \"0-10\" is not a port range (\"A-B\", "
	  "1 <= A <= B <= 65535)" },
	{ "{'tcp': [{'to': 'a.com', 'ports': ['80']}]}",
	  "net.policy.tcp[0].ports[0]: \"80\" is not a port range (\"A-B\", 1 "
	  "<= A <= B <= 65535)" },
	{ "{'tcp': [{'to': 'a.com', 'ports': [true]}]}",
	  "net.policy.tcp[0].ports[0]: must be a port (443) or a range "
	  "(\"8000-8100\")" },
	{ "{'tcp': [{'to': '1.2.3.4:443', 'ports': [443]}]}",
	  "net.policy.tcp[0].ports: the port is in \"to\" already" },
	{ "{'dns': []}",
	  "net.policy.dns: must be an object ({\"resolvers\": [...], "
	  "\"names\": [...]})" },
	{ "{'dns': {}}", "net.policy.dns: needs \"resolvers\"" },
	{ "{'dns': {'resolvers': [], 'search': []}}",
	  "net.policy.dns: unknown key \"search\"" },
	{ "{'dns': {'resolvers': [], 'names': 'a.com'}}",
	  "net.policy.dns.names: must be an array of hostnames" },
	{ "{'dns': {'resolvers': [], 'names': ['a.com', 7]}}",
	  "net.policy.dns.names[1]: must be a string (a hostname, \"*.NAME\" "
	  "or \"*\")" },
	{ "{'dns': {'resolvers': [], 'names': ['a..com']}}",
	  "net.policy.dns.names[0]: \"a..com\" is not a hostname "
	  "(\"api.example.com\", \"*.example.com\") or \"*\"" },
	{ "{'dns': {'resolvers': [], 'names': ['*']}, 'x': 1}",
	  "net.policy: unknown key \"x\"" },
	{ "{'dns': {'resolvers': [], 'names': ['a.*.com']}}",
	  "net.policy.dns.names[0]: \"a.*.com\" is not a hostname "
	  "(\"api.example.com\", \"*.example.com\") or \"*\"" },
	{ "{'dns': {'resolvers': [], 'names': ['10.0.0.1']}}",
	  "net.policy.dns.names[0]: \"10.0.0.1\" is not a hostname "
	  "(\"api.example.com\", \"*.example.com\") or \"*\"" },
	{ "{'dns': {'resolvers': [], 'names': ['**.a.com']}}",
	  "net.policy.dns.names[0]: \"**.a.com\" is not a hostname "
	  "(\"api.example.com\", \"*.example.com\") or \"*\"" },
	{ "{'dns': {'resolvers': '1.1.1.1'}}",
	  "net.policy.dns.resolvers: must be an array of addresses" },
	{ "{'dns': {'resolvers': ['1.1.1.1', 'dns.google']}}",
	  "net.policy.dns.resolvers[1]: \"dns.google\" is not an IPv4 address "
	  "(\"A.B.C.D\" or \"A.B.C.D:PORT\")" },
	{ "{'dns': {'resolvers': [53]}}",
	  "net.policy.dns.resolvers[0]: must be a string (\"A.B.C.D\" or "
	  "\"A.B.C.D:PORT\")" },
	{ "{'dns': {'resolvers': ['2620:fe::fe']}}",
	  "net.policy.dns.resolvers[0]: \"2620:fe::fe\" is IPv6, not "
	  "supported yet (the data path is IPv4-only)" },
	{ "{'dns': {'resolvers': ['[2620:fe::fe]:53']}}",
	  "net.policy.dns.resolvers[0]: \"[2620:fe::fe]:53\" is IPv6, not "
	  "supported yet (the data path is IPv4-only)" },
	{ "{'dns': {'resolvers': ['224.0.0.251']}}",
	  "net.policy.dns.resolvers[0]: \"224.0.0.251\" is not a unicast "
	  "address" },
	{ "{'dns': {'resolvers': ['0.0.0.0']}}",
	  "net.policy.dns.resolvers[0]: \"0.0.0.0\" is not a unicast "
	  "address" },
	{ "{'hook': '/run/p.sock'}",
	  "net.policy.hook: must be an object ({\"socket\": PATH, "
	  "\"timeoutMs\": MS})" },
	{ "{'hook': {'timeoutMs': 5}}", "net.policy.hook: needs \"socket\"" },
	{ "{'hook': {'socket': ''}}",
	  "net.policy.hook.socket: must be a Unix socket's path" },
	{ "{'hook': {'socket': 's', 'timeoutMs': 0}}",
	  "net.policy.hook.timeoutMs: must be an integer from 1 to 10000" },
	{ "{'hook': {'socket': 's', 'timeoutMs': 10001}}",
	  "net.policy.hook.timeoutMs: must be an integer from 1 to 10000" },
	{ "{'hook': {'socket': 's', 'timeout': 1}}",
	  "net.policy.hook: unknown key \"timeout\"" },
	{ "{'http': {}}",
	  "net.policy.http: must be an array of grants ({\"host\": ...})" },
	{ "{'http': ['a.com']}",
	  "net.policy.http[0]: must be an object ({\"host\": ..., \"ports\": "
	  "[...], \"tls\": [...], \"headers\": {...}, \"ask\": ..., "
	  "\"responseTimeoutMs\": ..., \"trace\": ..., \"clearText\": "
	  "...})" },
	{ "{'http': [{'host': 'a.com', 'responseTimeoutMs': 0}]}",
	  "net.policy.http[0].responseTimeoutMs: must be an integer from 1 to "
	  "3600000" },
	{ "{'http': [{'host': 'a.com', 'responseTimeoutMs': '5'}]}",
	  "net.policy.http[0].responseTimeoutMs: must be an integer from 1 to "
	  "3600000" },
	{ "{'http': [{'host': 'a.com'}, {'ports': [80]}]}",
	  "net.policy.http[1]: needs \"host\"" },
	{ "{'http': [{'host': 'a.com', 'to': 'b.com'}]}",
	  "net.policy.http[0]: unknown key \"to\"" },
	{ "{'http': [{'host': 5}]}",
	  "net.policy.http[0].host: must be a string (\"api.example.com\" or "
	  "\"*.example.com\")" },
	{ "{'http': [{'host': '198.51.100.7'}]}",
	  "net.policy.http[0].host: \"198.51.100.7\" is not a hostname "
	  "(\"api.example.com\" or \"*.example.com\")" },
	{ "{'http': [{'host': 'a..com'}]}",
	  "net.policy.http[0].host: \"a..com\" is not a hostname "
	  "(\"api.example.com\" or \"*.example.com\")" },
	{ "{'http': [{'host': 'a.com', 'ports': []}]}",
	  "net.policy.http[0].ports: empty (leave \"ports\" out for every "
	  "port)" },
	{ "{'http': [{'host': 'a.com', 'ports': [0]}]}",
	  "net.policy.http[0].ports[0]: 0 is not a port (1 to 65535)" },
	{ "{'http': [{'host': 'a.com', 'tls': 443}]}",
	  "net.policy.http[0].tls: must be an array of ports (443)" },
	{ "{'http': [{'host': 'a.com', 'ports': [80], 'tls': [443]}]}",
	  "net.policy.http[0].tls[0]: must be one of the grant's ports" },
	{ "{'http': [{'host': 'a.com', 'tls': ['443']}]}",
	  "net.policy.http[0].tls[0]: must be one of the grant's ports" },
	{ "{'http': [{'host': 'a.com'}, {'host': 'b.com', 'tls': []}]}",
	  "net.policy.http[0].tls: port 443 is TLS here and not in http[1], "
	  "which has it too" },
	{ "{'http': [{'host': 'a.com', 'ports': ['8000-8500']},"
	  " {'host': 'b.com', 'ports': [8443], 'tls': [8443]}]}",
	  "net.policy.http[1].tls: port 8443 is TLS here and not in http[0], "
	  "which has it too" },
	{ "{'http': [{'host': 'a.com', 'headers': []}]}",
	  "net.policy.http[0].headers: must be an object ({\"authorization\": "
	  "{\"from\": ...}})" },
	{ "{'http': [{'host': 'a.com', 'headers': {'bad name': {}}}]}",
	  "net.policy.http[0].headers: \"bad name\" is not a field a grant "
	  "may set (a token, and not one that frames or routes the message: "
	  "host, content-length, transfer-encoding, connection, upgrade, te, "
	  "trailer, keep-alive)" },
	{ "{'http': [{'host': 'a.com', 'headers': {'Host': {}}}]}",
	  "net.policy.http[0].headers: \"Host\" is not a field a grant may "
	  "set (a token, and not one that frames or routes the message: host, "
	  "content-length, transfer-encoding, connection, upgrade, te, "
	  "trailer, keep-alive)" },
	{ "{'http': [{'host': 'a.com', 'headers': {'Transfer-Encoding': {}}}]}",
	  "net.policy.http[0].headers: \"Transfer-Encoding\" is not a field a "
	  "grant may set (a token, and not one that frames or routes the "
	  "message: host, content-length, transfer-encoding, connection, "
	  "upgrade, te, trailer, keep-alive)" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': 'env:A'}}]}",
	  "net.policy.http[0].headers.x-a: must be an object ({\"from\": "
	  "\"env:NAME\", \"file:/PATH\" or \"hook\"})" },
	{ "{'http': [{'host': 'a.com', 'headers': {'X-A': {}}}]}",
	  "net.policy.http[0].headers.x-a: needs \"from\" (\"env:NAME\", "
	  "\"file:/PATH\" or \"hook\")" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': 'env:A',"
	  " 'value': 'v'}}}]}",
	  "net.policy.http[0].headers.x-a: unknown key \"value\"" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': 'A'}}}]}",
	  "net.policy.http[0].headers.x-a.from: must be \"env:NAME\", "
	  "\"file:/PATH\" or \"hook\"" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': 'env:'}}}]}",
	  "net.policy.http[0].headers.x-a.from: \"env:\" is not env:NAME with "
	  "NAME a variable's name" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
	  "'env:1A'}}}]}",
	  "net.policy.http[0].headers.x-a.from: \"env:1A\" is not env:NAME "
	  "with NAME a variable's name" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
	  "'env:KILN_TEST_NEVER_SET'}}}]}",
	  "net.policy.http[0].headers.x-a.from: env:KILN_TEST_NEVER_SET is not "
	  "set" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
	  "'file:secret'}}}]}",
	  "net.policy.http[0].headers.x-a.from: \"file:secret\" is not "
	  "file:/PATH with an absolute PATH" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
	  "'file:/nonexistent/kiln-secret'}}}]}",
	  "net.policy.http[0].headers.x-a.from: file:/nonexistent/kiln-secret: "
	  "No such file or directory" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
	  "'file:/'}}}]}",
	  "net.policy.http[0].headers.x-a.from: file:/: not a regular file" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': 'hook'}}}]}",
	  "net.policy.http[0]: asks the hook (\"ask\", or a field \"from\": "
	  "\"hook\") and the policy has no \"hook\"" },
	{ "{'http': [{'host': 'a.com', 'ask': 'always'}], "
	  "'hook': {'socket': 's'}}",
	  "net.policy.http[0].ask: must be \"request\" or \"connection\"" },
	{ "{'http': [{'host': 'a.com', 'ask': 'request'}]}",
	  "net.policy.http[0]: asks the hook (\"ask\", or a field \"from\": "
	  "\"hook\") and the policy has no \"hook\"" },
	/* Issue 34: "trace" and "clearText", and fields sent in clear. */
	{ "{'http': [{'host': 'a.com', 'trace': 'yes'}]}",
	  "net.policy.http[0].trace: must be true or false" },
	{ "{'http': [{'host': 'a.com', 'trace': 1}]}",
	  "net.policy.http[0].trace: must be true or false" },
	{ "{'http': [{'host': 'a.com', 'clearText': null}]}",
	  "net.policy.http[0].clearText: must be true or false" },
	{ "{'http': [{'host': 'a.com', 'clearText': 'true'}]}",
	  "net.policy.http[0].clearText: must be true or false" },
	{ "{'http': [{'host': 'a.com', 'cleartext': true}]}",
	  "net.policy.http[0]: unknown key \"cleartext\"" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': 'hook'}}}],"
	  " 'hook': {'socket': 's'}}",
	  "net.policy.http[0].headers: would be sent in clear text on port 80 "
	  "(not in \"tls\"): grant only TLS ports, or say \"clearText\": "
	  "true" },
	{ "{'http': [{'host': 'a.com', 'ports': [443]},"
	  " {'host': 'b.com', 'ports': [443, 8080], 'clearText': false,"
	  " 'headers': {'x-a': {'from': 'hook'}}}], 'hook': {'socket': 's'}}",
	  "net.policy.http[1].headers: would be sent in clear text on port "
	  "8080 (not in \"tls\"): grant only TLS ports, or say "
	  "\"clearText\": true" },
	{ "{'http': [{'host': 'a.com', 'ports': ['440-450'], 'tls': [440, 441],"
	  " 'headers': {'x-a': {'from': 'hook'}}}], 'hook': {'socket': 's'}}",
	  "net.policy.http[0].headers: would be sent in clear text on port 442 "
	  "(not in \"tls\"): grant only TLS ports, or say \"clearText\": "
	  "true" },
	{ "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': 'hook'}}}]}",
	  "net.policy.http[0]: asks the hook (\"ask\", or a field \"from\": "
	  "\"hook\") and the policy has no \"hook\"" },
};

TEST(refusals)
{
	struct net_policy *p;
	char err[ERR_LEN];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(refusals); i++) {
		p = NULL;
		EXPECT_NE(0, parse(refusals[i].doc, &p, err, sizeof(err)))
		TH_LOG("accepted: %s", refusals[i].doc);
		EXPECT_STREQ(refusals[i].err, err)
		TH_LOG("for: %s", refusals[i].doc);
		EXPECT_EQ(NULL, p);
	}
}

TEST(refusal_hook_path_too_long)
{
	char doc[512], path[NET_POLICY_HOOK_PATH_MAX + 2], err[ERR_LEN];
	struct net_policy *p;

	memset(path, 'a', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	snprintf(doc, sizeof(doc), "{'hook': {'socket': '%s'}}", path);
	EXPECT_EQ(-ENAMETOOLONG, parse(doc, &p, err, sizeof(err)));
	EXPECT_STREQ("net.policy.hook.socket: longer than 107 bytes (a Unix "
		     "socket path)",
		     err);
	path[sizeof(path) - 2] = '\0';
	snprintf(doc, sizeof(doc), "{'hook': {'socket': '%s'}}", path);
	ASSERT_EQ(0, parse(doc, &p, err, sizeof(err))) TH_LOG("%s", err);
	net_policy__free(p);
}

/* A policy with n tcp rules, each with nports ports, and nres resolvers. */
static void bounded_doc(char *doc, size_t len, unsigned int n,
			unsigned int nports, unsigned int nres)
{
	size_t at = 0;
	unsigned int i, j;

	at += snprintf(doc + at, len - at, "{'dns': {'resolvers': [");
	for (i = 0; i < nres; i++)
		at += snprintf(doc + at, len - at, "%s'10.0.0.%u'",
			       i ? ", " : "", i + 1);
	at += snprintf(doc + at, len - at, "]}, 'tcp': [");
	for (i = 0; i < n; i++) {
		at += snprintf(doc + at, len - at,
			       "%s{'to': 'h%u.example', 'ports': [",
			       i ? ", " : "", i);
		for (j = 0; j < nports; j++)
			at += snprintf(doc + at, len - at, "%s%u",
				       j ? ", " : "", j + 1);
		at += snprintf(doc + at, len - at, "]}");
	}
	snprintf(doc + at, len - at, "]}");
}

TEST(bounds)
{
	static char doc[DOC_MAX];
	struct net_policy *p;
	char err[ERR_LEN];

	bounded_doc(doc, sizeof(doc), NET_POLICY_MAX_RULES, 1,
		    NET_POLICY_MAX_RESOLVERS);
	ASSERT_EQ(0, parse(doc, &p, err, sizeof(err))) TH_LOG("%s", err);
	EXPECT_EQ(NET_POLICY_MAX_RULES, net_policy__nr_rules(p, TCP));
	EXPECT_EQ(NET_POLICY_MAX_RESOLVERS, net_policy__nr_resolvers(p));
	net_policy__free(p);

	bounded_doc(doc, sizeof(doc), NET_POLICY_MAX_RULES + 1, 1, 0);
	EXPECT_EQ(-E2BIG, parse(doc, &p, err, sizeof(err)));
	EXPECT_STREQ("net.policy.tcp: 257 rules, at most 256", err);

	bounded_doc(doc, sizeof(doc), 0, 0, NET_POLICY_MAX_RESOLVERS + 1);
	EXPECT_EQ(-E2BIG, parse(doc, &p, err, sizeof(err)));
	EXPECT_STREQ("net.policy.dns.resolvers: 17 resolvers, at most 16", err);

	bounded_doc(doc, sizeof(doc), 1, NET_POLICY_MAX_PORTS, 0);
	ASSERT_EQ(0, parse(doc, &p, err, sizeof(err))) TH_LOG("%s", err);
	net_policy__free(p);
	bounded_doc(doc, sizeof(doc), 1, NET_POLICY_MAX_PORTS + 1, 0);
	EXPECT_EQ(-E2BIG, parse(doc, &p, err, sizeof(err)));
	EXPECT_STREQ("net.policy.tcp[0].ports: 65 entries, at most 64", err);
}

static const struct {
	const char *addr;
	enum net_addr_class cls;
} class_edges[] = {
	{ "127.0.0.0", NET_CLASS_LOOPBACK },
	{ "127.255.255.255", NET_CLASS_LOOPBACK },
	{ "126.255.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "128.0.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "10.0.0.0", NET_CLASS_PRIVATE },
	{ "10.255.255.255", NET_CLASS_PRIVATE },
	{ "9.255.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "11.0.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "172.16.0.0", NET_CLASS_PRIVATE },
	{ "172.31.255.255", NET_CLASS_PRIVATE },
	{ "172.15.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "172.32.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "192.168.0.0", NET_CLASS_PRIVATE },
	{ "192.168.255.255", NET_CLASS_PRIVATE },
	{ "192.167.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "192.169.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "100.64.0.0", NET_CLASS_PRIVATE },
	{ "100.127.255.255", NET_CLASS_PRIVATE },
	{ "100.63.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "100.128.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "169.254.0.0", NET_CLASS_LINK_LOCAL },
	{ "169.254.255.255", NET_CLASS_LINK_LOCAL },
	{ "169.253.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "169.255.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "224.0.0.0", NET_CLASS_MULTICAST },
	{ "239.255.255.255", NET_CLASS_MULTICAST },
	{ "223.255.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "240.0.0.0", NET_CLASS_RESERVED },
	{ "255.255.255.254", NET_CLASS_RESERVED },
	{ "255.255.255.255", NET_CLASS_BROADCAST },
	{ "192.0.2.0", NET_CLASS_DOCUMENTATION },
	{ "192.0.2.255", NET_CLASS_DOCUMENTATION },
	{ "192.0.1.255", NET_CLASS_PUBLIC_INTERNET },
	{ "192.0.3.0", NET_CLASS_PUBLIC_INTERNET },
	{ "198.51.100.0", NET_CLASS_DOCUMENTATION },
	{ "198.51.100.255", NET_CLASS_DOCUMENTATION },
	{ "198.51.99.255", NET_CLASS_PUBLIC_INTERNET },
	{ "198.51.101.0", NET_CLASS_PUBLIC_INTERNET },
	{ "203.0.113.0", NET_CLASS_DOCUMENTATION },
	{ "203.0.113.255", NET_CLASS_DOCUMENTATION },
	{ "203.0.112.255", NET_CLASS_PUBLIC_INTERNET },
	{ "203.0.114.0", NET_CLASS_PUBLIC_INTERNET },
	{ "0.0.0.0", NET_CLASS_RESERVED },
	{ "0.255.255.255", NET_CLASS_RESERVED },
	{ "1.0.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "192.0.0.0", NET_CLASS_RESERVED },
	{ "192.0.0.255", NET_CLASS_RESERVED },
	{ "191.255.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "192.88.99.0", NET_CLASS_RESERVED },
	{ "192.88.99.255", NET_CLASS_RESERVED },
	{ "192.88.98.255", NET_CLASS_PUBLIC_INTERNET },
	{ "192.88.100.0", NET_CLASS_PUBLIC_INTERNET },
	{ "198.18.0.0", NET_CLASS_RESERVED },
	{ "198.19.255.255", NET_CLASS_RESERVED },
	{ "198.17.255.255", NET_CLASS_PUBLIC_INTERNET },
	{ "198.20.0.0", NET_CLASS_PUBLIC_INTERNET },
	{ "8.8.8.8", NET_CLASS_PUBLIC_INTERNET },
};

TEST(class_membership)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(class_edges); i++)
		EXPECT_STREQ(net_policy__class_name(class_edges[i].cls),
			     net_policy__class_name(net_policy__classify(
				     ip(class_edges[i].addr))))
	TH_LOG("%s", class_edges[i].addr);
	EXPECT_STREQ("?", net_policy__class_name(NET_CLASS_COUNT));
}

/* Each class grant allows its members and nothing else (loopback aside). */
TEST(class_grants)
{
	char doc[128], err[ERR_LEN];
	struct net_decision d;
	struct net_policy *p;
	size_t i;
	int c;

	for (c = NET_CLASS_PRIVATE; c < NET_CLASS_COUNT; c++) {
		snprintf(doc, sizeof(doc), "{'udp': [{'to': '%s'}]}",
			 net_policy__class_name(c));
		ASSERT_EQ(0, parse(doc, &p, err, sizeof(err)))
		TH_LOG("%s", err);
		for (i = 0; i < ARRAY_SIZE(class_edges); i++) {
			const char *a = class_edges[i].addr;
			enum net_verdict want = DENY;

			if (class_edges[i].cls == (enum net_addr_class)c &&
			    strncmp(a, "0.", 2))
				want = ALLOW;
			EXPECT_EQ(want, decide(p, NULL, UDP, a, 53, &d))
			TH_LOG("%s to %s: %s", doc, a, d.reason);
			if (want == ALLOW)
				EXPECT_STREQ("udp grant 0", d.reason);
		}
		net_policy__free(p);
	}
}

TEST(cidr_edges)
{
	struct net_decision d;
	struct net_policy *p;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse("{'tcp': [{'to': '0.0.0.0/0'}]}", &p, err,
			   sizeof(err)));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "1.2.3.4", 80, &d));
	EXPECT_STREQ("tcp grant 0", d.reason);
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "255.255.255.255", 80, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "10.0.2.2", 80, &d))
	TH_LOG("no gateway set: nothing special about it");
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "127.0.0.1", 80, &d));
	EXPECT_STREQ("host loopback", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "0.1.2.3", 80, &d));
	EXPECT_STREQ("this network", d.reason);
	net_policy__free(p);

	ASSERT_EQ(0, parse("{'tcp': [{'to': '203.0.113.7/32'},"
			   " {'to': '198.51.100.6/31'}, {'to': '10.0.0.0/8'}]}",
			   &p, err, sizeof(err)));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "203.0.113.7", 1, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "203.0.113.6", 1, &d));
	EXPECT_STREQ("no grant", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "203.0.113.8", 1, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "198.51.100.5", 1, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "198.51.100.6", 1, &d));
	EXPECT_STREQ("tcp grant 1", d.reason);
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "198.51.100.7", 1, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "198.51.100.8", 1, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "10.0.0.0", 1, &d));
	EXPECT_STREQ("tcp grant 2", d.reason);
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "10.255.255.255", 1, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "11.0.0.0", 1, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "9.255.255.255", 1, &d));
	net_policy__free(p);
}

TEST(ports)
{
	struct net_decision d;
	struct net_policy *p;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse("{'tcp': [{'to': '203.0.113.0/24', 'ports': [443, "
			   "'8000-8100']}, {'to': '198.51.100.1:5432'},"
			   " {'to': '198.51.100.2', 'ports': ['1-65535']},"
			   " {'to': '198.51.100.3'}]}",
			   &p, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "203.0.113.1", 443, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "203.0.113.1", 442, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "203.0.113.1", 444, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "203.0.113.1", 7999, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "203.0.113.1", 8000, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "203.0.113.1", 8050, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "203.0.113.1", 8100, &d));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "203.0.113.1", 8101, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "198.51.100.1", 5432, &d));
	EXPECT_STREQ("tcp grant 1", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "198.51.100.1", 5433, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "198.51.100.2", 1, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "198.51.100.2", 65535, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "198.51.100.3", 65535, &d));
	EXPECT_STREQ("tcp grant 3", d.reason);
	/* Port 0 is no port, whatever a rule says. */
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "198.51.100.3", 0, &d));
	EXPECT_STREQ("port 0", d.reason);
	net_policy__free(p);
}

TEST(tcp_and_udp_apart)
{
	struct net_decision d;
	struct net_policy *p;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse(example_rules, &p, err, sizeof(err)));
	EXPECT_EQ(ALLOW, decide(p, NULL, UDP, "198.51.100.7", 5000, &d));
	EXPECT_STREQ("udp grant 0", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "198.51.100.7", 5000, &d));
	EXPECT_STREQ("no grant", d.reason);
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "8.8.8.8", 22, &d));
	EXPECT_STREQ("tcp grant 2", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, UDP, "8.8.8.8", 22, &d));
	EXPECT_EQ(ALLOW, decide(p, NULL, TCP, "203.0.113.5", 443, &d));
	EXPECT_STREQ("tcp grant 0", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, UDP, "203.0.113.5", 443, &d));
	EXPECT_EQ(DENY, decide(p, NULL, IPPROTO_ICMP, "8.8.8.8", 1, &d));
	EXPECT_STREQ("not tcp or udp over ipv4", d.reason);
	net_policy__free(p);
}

TEST(default_deny)
{
	struct net_decision d;
	struct net_policy *p;
	char err[ERR_LEN];

	EXPECT_EQ(DENY, decide(NULL, NULL, TCP, "8.8.8.8", 443, &d));
	EXPECT_STREQ("no grant", d.reason);
	ASSERT_EQ(0, parse("{}", &p, err, sizeof(err)));
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "8.8.8.8", 443, &d));
	EXPECT_STREQ("no grant", d.reason);
	EXPECT_EQ(DENY, decide(p, NULL, UDP, "9.9.9.9", 53, &d));
	EXPECT_STREQ("no grant", d.reason);
	net_policy__free(p);
}

/* The test's clock: milliseconds it sets. */
static uint64_t fake_clock(void *opaque)
{
	return *(uint64_t *)opaque;
}

TEST(hostname_only_through_bindings)
{
	struct net_bindings *b;
	struct net_decision d;
	struct net_policy *p;
	uint64_t now = 1000;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse(example_rules, &p, err, sizeof(err)));
	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	/* 198.51.100.10 is documentation, so only the hostname can grant. */
	EXPECT_EQ(DENY, decide(p, NULL, TCP, "198.51.100.10", 443, &d));
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.10", 443, &d));
	EXPECT_STREQ("no grant", d.reason);
	ASSERT_EQ(0, net_bindings__insert(b, "API.Example.com.",
					  ip("198.51.100.10"), 60));
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "198.51.100.10", 443, &d));
	EXPECT_STREQ("tcp grant 1", d.reason);
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.10", 80, &d));
	EXPECT_EQ(DENY, decide(p, b, UDP, "198.51.100.10", 443, &d));
	/* An address DNS never returned for the name. */
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.11", 443, &d));
	/* Another name bound to an address: not this rule's. */
	ASSERT_EQ(0, net_bindings__insert(b, "evil.example.com",
					  ip("198.51.100.12"), 60));
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.12", 443, &d));
	/* Expired: denied again. */
	now += 60 * 1000 - 1;
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "198.51.100.10", 443, &d));
	now += 1;
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.10", 443, &d));
	EXPECT_STREQ("no grant", d.reason);
	/* Renewed by a new answer. */
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.com",
					  ip("198.51.100.10"), 60));
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "198.51.100.10", 443, &d));
	net_bindings__destroy(b);
	net_policy__free(p);
}

/*
 * With a hook, what no rule grants is put to it: ASK, "no grant" the
 * reason without it, the hook's socket and deadline, the destination's
 * class and the names this VM's DNS binds it to. Rule grants and what is
 * always denied never reach it.
 */
TEST(hook_asked_when_no_rule_grants)
{
	struct net_bindings *b;
	struct net_decision d;
	struct net_policy *p;
	uint64_t now = 1000;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse(example, &p, err, sizeof(err))) TH_LOG("%s", err);
	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_bindings__insert(b, "www.example.org",
					  ip("198.51.100.10"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "cdn.example.net",
					  ip("198.51.100.10"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "other.example.org",
					  ip("198.51.100.11"), 60));

	EXPECT_EQ(ASK, decide(p, b, TCP, "198.51.100.10", 8080, &d));
	EXPECT_STREQ("no grant", d.reason);
	EXPECT_STREQ("/run/policy.sock", d.ask.socket);
	EXPECT_EQ(250, d.ask.timeout_ms);
	EXPECT_STREQ("documentation", d.ask.class_name);
	ASSERT_EQ(2, d.ask.nr_hostnames);
	EXPECT_STREQ("cdn.example.net", d.ask.hostnames[0]);
	EXPECT_STREQ("www.example.org", d.ask.hostnames[1]);
	/* No bindings table, or none for the address: no names. */
	EXPECT_EQ(ASK, decide(p, NULL, UDP, "10.1.2.3", 53, &d));
	EXPECT_STREQ("private", d.ask.class_name);
	EXPECT_EQ(0, d.ask.nr_hostnames);
	/* Expired bindings are not sent. */
	now += 60 * 1000;
	EXPECT_EQ(ASK, decide(p, b, TCP, "198.51.100.10", 8080, &d));
	EXPECT_EQ(0, d.ask.nr_hostnames);

	/* A rule's grant, and what is always denied, are not asked. */
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "8.8.8.8", 22, &d));
	EXPECT_STREQ("tcp grant 2", d.reason);
	EXPECT_EQ(DENY, decide(p, b, TCP, "127.0.0.1", 22, &d));
	EXPECT_STREQ("host loopback", d.reason);
	EXPECT_EQ(DENY, decide(p, b, UDP, "8.8.8.8", 0, &d));
	EXPECT_STREQ("port 0", d.reason);
	net_policy__set_gateway(p, ip("10.0.2.2"));
	EXPECT_EQ(DENY, decide(p, b, TCP, "10.0.2.2", 80, &d));
	EXPECT_STREQ("host side of the tap", d.reason);
	net_bindings__destroy(b);
	net_policy__free(p);
}

/* The names for an address: sorted, the lowest few, expired ones left out. */
TEST(bindings_names_by_address)
{
	char names[NET_ASK_MAX_HOSTNAMES][NET_HOSTNAME_MAX + 1];
	char host[32];
	struct net_bindings *b;
	uint64_t now = 0;

	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	EXPECT_EQ(0, net_bindings__names(b, ip("8.8.8.8"), names,
					 NET_ASK_MAX_HOSTNAMES));
	/* Inserted from the highest name down, twice: no duplicates. */
	for (int round = 0; round < 2; round++) {
		for (int i = 2 * NET_ASK_MAX_HOSTNAMES - 1; i >= 0; i--) {
			snprintf(host, sizeof(host), "n%02d.example", i);
			ASSERT_EQ(0, net_bindings__insert(b, host,
							  ip("8.8.8.8"), 60));
		}
	}
	ASSERT_EQ(0,
		  net_bindings__insert(b, "Short.Example.", ip("8.8.8.8"), 5));
	ASSERT_EQ(0, net_bindings__insert(b, "a.example", ip("8.8.4.4"), 60));
	ASSERT_EQ(NET_ASK_MAX_HOSTNAMES,
		  net_bindings__names(b, ip("8.8.8.8"), names,
				      NET_ASK_MAX_HOSTNAMES));
	for (unsigned int i = 0; i < NET_ASK_MAX_HOSTNAMES; i++) {
		snprintf(host, sizeof(host), "n%02u.example", i);
		EXPECT_STREQ(host, names[i]);
	}
	ASSERT_EQ(3, net_bindings__names(b, ip("8.8.8.8"), names, 3));
	EXPECT_STREQ("n02.example", names[2]);
	/* "short.example" sorts last; past 5 s it is gone anyway. */
	now += 5 * 1000;
	ASSERT_EQ(1, net_bindings__names(b, ip("8.8.4.4"), names,
					 NET_ASK_MAX_HOSTNAMES));
	EXPECT_STREQ("a.example", names[0]);
	now += 55 * 1000;
	EXPECT_EQ(0, net_bindings__names(b, ip("8.8.8.8"), names,
					 NET_ASK_MAX_HOSTNAMES));
	net_bindings__destroy(b);
}

TEST(wildcards)
{
	struct net_bindings *b;
	struct net_decision d;
	struct net_policy *p;
	uint64_t now = 0;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse("{'tcp': [{'to': '*.Example.com'}]}", &p, err,
			   sizeof(err)));
	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0,
		  net_bindings__insert(b, "a.example.com", ip("8.8.8.1"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "b.a.EXAMPLE.com.", ip("8.8.8.2"),
					  60));
	ASSERT_EQ(0, net_bindings__insert(b, "example.com", ip("8.8.8.3"), 60));
	ASSERT_EQ(0,
		  net_bindings__insert(b, "notexample.com", ip("8.8.8.4"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "example.com.evil", ip("8.8.8.5"),
					  60));
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "8.8.8.1", 443, &d));
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "8.8.8.2", 443, &d));
	EXPECT_EQ(DENY, decide(p, b, TCP, "8.8.8.3", 443, &d));
	EXPECT_EQ(DENY, decide(p, b, TCP, "8.8.8.4", 443, &d));
	EXPECT_EQ(DENY, decide(p, b, TCP, "8.8.8.5", 443, &d));
	EXPECT_EQ(DENY, decide(p, b, TCP, "8.8.8.6", 443, &d));
	net_bindings__destroy(b);
	net_policy__free(p);
}

TEST(bindings_table)
{
	struct net_bindings *b;
	uint64_t now = 0;
	char name[32];
	unsigned int i;

	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	EXPECT_EQ(-EINVAL, net_bindings__insert(b, "a..b", ip("8.8.8.8"), 1));
	EXPECT_EQ(-EINVAL, net_bindings__insert(b, "*.a.b", ip("8.8.8.8"), 1));
	EXPECT_EQ(-EINVAL,
		  net_bindings__insert(b, "1.2.3.4", ip("8.8.8.8"), 1));
	EXPECT_EQ(0, net_bindings__count(b));

	/* Case and the trailing dot do not matter. */
	ASSERT_EQ(0, net_bindings__insert(b, "Dns.Example.", ip("8.8.8.8"), 0));
	EXPECT_TRUE(net_bindings__lookup(b, "dns.example", ip("8.8.8.8")));
	EXPECT_TRUE(net_bindings__lookup(b, "DNS.EXAMPLE.", ip("8.8.8.8")));
	EXPECT_FALSE(net_bindings__lookup(b, "dns.example", ip("8.8.4.4")));
	EXPECT_FALSE(net_bindings__lookup(b, "x.dns.example", ip("8.8.8.8")));
	/* TTL 0 is clamped up to the minimum... */
	now = NET_BINDING_MIN_TTL_S * 1000 - 1;
	EXPECT_TRUE(net_bindings__lookup(b, "dns.example", ip("8.8.8.8")));
	now++;
	EXPECT_FALSE(net_bindings__lookup(b, "dns.example", ip("8.8.8.8")));
	EXPECT_EQ(1, net_bindings__expire(b));
	EXPECT_EQ(0, net_bindings__count(b));
	/* ...and a long one down to the maximum. */
	now = 0;
	ASSERT_EQ(0, net_bindings__insert(b, "long.example", ip("8.8.8.8"),
					  UINT32_MAX));
	now = NET_BINDING_MAX_TTL_S * 1000ULL - 1;
	EXPECT_TRUE(net_bindings__lookup(b, "long.example", ip("8.8.8.8")));
	now++;
	EXPECT_FALSE(net_bindings__lookup(b, "long.example", ip("8.8.8.8")));
	EXPECT_EQ(1, net_bindings__expire(b));

	/* Full: bounded, the soonest to expire goes first. */
	now = 0;
	for (i = 0; i < NET_BINDINGS_MAX; i++) {
		snprintf(name, sizeof(name), "h%u.example", i);
		ASSERT_EQ(0,
			  net_bindings__insert(b, name, htonl(0x08000000 + i),
					       i == 7 ? 10 : 100));
	}
	EXPECT_EQ(NET_BINDINGS_MAX, net_bindings__count(b));
	ASSERT_EQ(0,
		  net_bindings__insert(b, "new.example", ip("9.9.9.9"), 100));
	EXPECT_EQ(NET_BINDINGS_MAX, net_bindings__count(b));
	EXPECT_FALSE(net_bindings__lookup(b, "h7.example", htonl(0x08000007)));
	EXPECT_TRUE(net_bindings__lookup(b, "h8.example", htonl(0x08000008)));
	EXPECT_TRUE(net_bindings__lookup(b, "new.example", ip("9.9.9.9")));
	/* Renewing one already there takes no room. */
	ASSERT_EQ(0, net_bindings__insert(b, "h9.example", htonl(0x08000009),
					  100));
	EXPECT_EQ(NET_BINDINGS_MAX, net_bindings__count(b));
	/* Expired ones make room before live ones are dropped. */
	now = 100 * 1000;
	ASSERT_EQ(0,
		  net_bindings__insert(b, "later.example", ip("9.9.9.8"), 100));
	EXPECT_EQ(1, net_bindings__count(b));
	net_bindings__destroy(b);
	net_bindings__destroy(NULL);
}

/* Whether p's resolver names allow name. */
static bool dns_allows(const struct net_policy *p, const char *name)
{
	struct net_dns_names *s = net_policy__dns_names(p);
	bool ret = net_dns_names__allows(s, name);

	net_dns_names__free(s);
	return ret;
}

/*
 * Issue 34, finding 5: the names the resolver forwards are "dns.names"
 * and the names the grants use (tcp, udp, http; wildcards as in rules),
 * none by default; "*" is every name.
 */
TEST(dns_names)
{
	struct net_policy *p;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse("{'dns': {'resolvers': ['9.9.9.9'], 'names': "
			   "['Extra.Example.', '*.corp.example']},"
			   " 'tcp': [{'to': 'api.example.com', 'ports': [443]},"
			   " {'to': '203.0.113.0/24'}],"
			   " 'udp': [{'to': '*.udp.example'}],"
			   " 'http': [{'host': 'gh.example'}]}",
			   &p, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_TRUE(dns_allows(p, "api.example.com"));
	EXPECT_TRUE(dns_allows(p, "extra.example"));
	EXPECT_TRUE(dns_allows(p, "a.corp.example"));
	EXPECT_TRUE(dns_allows(p, "b.a.corp.example"));
	EXPECT_TRUE(dns_allows(p, "x.udp.example"));
	EXPECT_TRUE(dns_allows(p, "gh.example"));
	EXPECT_FALSE(dns_allows(p, "corp.example"));
	EXPECT_FALSE(dns_allows(p, "udp.example"));
	EXPECT_FALSE(dns_allows(p, "example.com"));
	EXPECT_FALSE(dns_allows(p, "x.api.example.com"));
	EXPECT_FALSE(dns_allows(p, "x.gh.example"));
	EXPECT_FALSE(dns_allows(p, "leak.evil.example"));
	net_policy__free(p);

	/* CIDR grants only: no name at all. */
	ASSERT_EQ(0, parse("{'dns': {'resolvers': ['9.9.9.9']},"
			   " 'tcp': [{'to': 'public-internet'}]}",
			   &p, err, sizeof(err)));
	EXPECT_FALSE(dns_allows(p, "example.com"));
	net_policy__free(p);
	ASSERT_EQ(0,
		  parse("{'dns': {'resolvers': ['9.9.9.9'], 'names': ['*']}}",
			&p, err, sizeof(err)));
	EXPECT_TRUE(dns_allows(p, "anything.example"));
	net_policy__free(p);
	EXPECT_FALSE(dns_allows(NULL, "example.com"));
	EXPECT_FALSE(net_dns_names__allows(NULL, "example.com"));
}

/* decide() with the destination one of the host's own addresses. */
static enum net_verdict decide_local(const struct net_policy *p,
				     const struct net_bindings *b,
				     uint8_t proto, const char *dst,
				     unsigned int port, struct net_decision *d)
{
	struct net_flow f = {
		.proto = proto,
		.src = { .sin_family = AF_INET,
			 .sin_addr.s_addr = ip("10.0.2.15"),
			 .sin_port = htons(40000) },
		.dst = { .sin_family = AF_INET,
			 .sin_addr.s_addr = ip(dst),
			 .sin_port = htons(port) },
		.dst_local = true,
	};

	memset(d, 0, sizeof(*d));
	net_policy__decide(p, &f, b, d);
	return d->verdict;
}

/*
 * Issue 34, finding 6: a class or CIDR grant covering a host address does
 * not open it (denied "host address", or put to the hook, whose answer
 * is about that exact address); a grant of that exact address, or of an
 * exact hostname bound to it, does.
 */
TEST(host_addresses_denied_unless_named)
{
	struct net_bindings *b;
	struct net_decision d;
	struct net_policy *p;
	uint64_t now = 0;
	char err[ERR_LEN];

	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0,
		  net_bindings__insert(b, "h.example", ip("192.168.1.5"), 60));
	ASSERT_EQ(0, parse("{'tcp': [{'to': 'private'}, {'to': '0.0.0.0/0'},"
			   " {'to': '*.example'}],"
			   " 'hook': {'socket': '/run/h.sock'}}",
			   &p, err, sizeof(err)));
	/* No rule opens it: the hook is asked about the exact address. */
	EXPECT_EQ(ASK, decide_local(p, b, TCP, "192.168.1.5", 22, &d));
	EXPECT_STREQ("host address", d.reason);
	EXPECT_EQ(ASK, decide_local(p, b, TCP, "203.0.113.1", 22, &d));
	EXPECT_STREQ("host address", d.reason);
	/* The same address, not the host's: the grant opens it. */
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "192.168.1.5", 22, &d));
	net_policy__free(p);

	ASSERT_EQ(0, parse("{'tcp': [{'to': '0.0.0.0/0', 'ports': [80]},"
			   " {'to': '192.168.1.5', 'ports': [8080]},"
			   " {'to': 'h.example', 'ports': [9000]}],"
			   " 'udp': [{'to': '192.168.1.5/32'}]}",
			   &p, err, sizeof(err)));
	EXPECT_EQ(ALLOW, decide_local(p, b, TCP, "192.168.1.5", 8080, &d));
	EXPECT_STREQ("tcp grant 1", d.reason);
	EXPECT_EQ(ALLOW, decide_local(p, b, TCP, "192.168.1.5", 9000, &d));
	EXPECT_STREQ("tcp grant 2", d.reason);
	EXPECT_EQ(ALLOW, decide_local(p, b, UDP, "192.168.1.5", 53, &d));
	/* The exact grant's port only: the /0 grant does not count here. */
	EXPECT_EQ(DENY, decide_local(p, b, TCP, "192.168.1.5", 80, &d));
	EXPECT_STREQ("host address", d.reason);
	net_policy__free(p);
	net_bindings__destroy(b);
}

/* RTM_NEWADDR / RTM_DELADDR bytes for addr (AF_INET, IFA_LOCAL). */
static size_t addr_msg(uint8_t *buf, uint16_t type, const char *addr,
		       bool with_local)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	struct rtattr *rta;
	uint32_t a = ip(addr);

	memset(buf, 0, NLMSG_SPACE(sizeof(*ifa)) + 2 * RTA_SPACE(4));
	nh->nlmsg_type = type;
	nh->nlmsg_len = NLMSG_LENGTH(sizeof(*ifa));
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = 24;
	rta = (struct rtattr *)(buf + NLMSG_ALIGN(nh->nlmsg_len));
	rta->rta_type = with_local ? IFA_LOCAL : IFA_ADDRESS;
	rta->rta_len = RTA_LENGTH(4);
	memcpy(RTA_DATA(rta), &a, 4);
	nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + RTA_SPACE(4);
	return nh->nlmsg_len;
}

/* The host-address set kept from netlink messages read from bytes. */
TEST(host_addresses_from_netlink)
{
	struct net_host_addrs *h = net_host_addrs__create_empty();
	uint32_t buf[256];
	uint8_t *m = (uint8_t *)buf;
	size_t n;

	ASSERT_NE(NULL, h);
	n = addr_msg(m, RTM_NEWADDR, "192.168.1.5", true);
	n += addr_msg(m + n, RTM_NEWADDR, "203.0.113.1", false);
	EXPECT_EQ(2, net_host_addrs__apply(h, m, n));
	EXPECT_TRUE(net_host_addrs__contains(h, ip("192.168.1.5")));
	EXPECT_TRUE(net_host_addrs__contains(h, ip("203.0.113.1")));
	EXPECT_FALSE(net_host_addrs__contains(h, ip("192.168.1.6")));
	/* Again: no change; then one deleted. */
	EXPECT_EQ(0, net_host_addrs__apply(h, m, n));
	n = addr_msg(m, RTM_DELADDR, "192.168.1.5", true);
	EXPECT_EQ(1, net_host_addrs__apply(h, m, n));
	EXPECT_FALSE(net_host_addrs__contains(h, ip("192.168.1.5")));
	EXPECT_EQ(1, net_host_addrs__count(h));
	/* Cut, or a length past the bytes: refused, nothing applied. */
	n = addr_msg(m, RTM_NEWADDR, "10.9.9.9", true);
	EXPECT_EQ(-EBADMSG, net_host_addrs__apply(h, m, n - 1));
	EXPECT_EQ(-EBADMSG, net_host_addrs__apply(h, m, 3));
	((struct nlmsghdr *)m)->nlmsg_len = 4;
	EXPECT_EQ(-EBADMSG, net_host_addrs__apply(h, m, n));
	EXPECT_FALSE(net_host_addrs__contains(h, ip("10.9.9.9")));
	net_host_addrs__destroy(h);
}

TEST(always_denied)
{
	struct net_bindings *b;
	struct net_decision d;
	struct net_policy *p;
	struct net_flow f;
	uint64_t now = 0;
	char err[ERR_LEN];

	ASSERT_EQ(0,
		  parse("{'tcp': [{'to': '0.0.0.0/0'}, {'to': 'lo.example'}],"
			" 'udp': [{'to': '0.0.0.0/0'}]}",
			&p, err, sizeof(err)));
	net_policy__set_gateway(p, ip("10.0.2.2"));
	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0,
		  net_bindings__insert(b, "lo.example", ip("127.0.0.1"), 60));
	ASSERT_EQ(0, net_bindings__insert(b, "lo.example", ip("10.0.2.2"), 60));

	EXPECT_EQ(DENY, decide(p, b, TCP, "127.0.0.1", 80, &d));
	EXPECT_STREQ("host loopback", d.reason);
	EXPECT_EQ(DENY, decide(p, b, UDP, "127.255.255.254", 53, &d));
	EXPECT_STREQ("host loopback", d.reason);
	EXPECT_EQ(DENY, decide(p, b, TCP, "10.0.2.2", 22, &d));
	EXPECT_STREQ("host side of the tap", d.reason);
	EXPECT_EQ(DENY, decide(p, b, UDP, "10.0.2.2", 53, &d));
	EXPECT_STREQ("host side of the tap", d.reason);
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "10.0.2.3", 22, &d));
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "128.0.0.1", 22, &d));
	EXPECT_EQ(ALLOW, decide(p, b, TCP, "126.255.255.255", 22, &d));

	/* Not IPv4. */
	memset(&f, 0, sizeof(f));
	f.proto = TCP;
	f.dst.sin_family = AF_INET6;
	f.dst.sin_port = htons(80);
	net_policy__decide(p, &f, b, &d);
	EXPECT_EQ(DENY, d.verdict);
	EXPECT_STREQ("not tcp or udp over ipv4", d.reason);
	net_bindings__destroy(b);
	net_policy__free(p);
}

static json_t *load(const char *doc)
{
	char buf[DOC_MAX];
	size_t i;

	for (i = 0; doc[i] && i + 1 < sizeof(buf); i++)
		buf[i] = doc[i] == '\'' ? '"' : doc[i];
	buf[i] = '\0';
	return json_loads(buf, 0, NULL);
}

TEST(replace_keeps_old_on_error)
{
	struct net_policy *cur, *was;
	struct net_decision d;
	char err[ERR_LEN];
	json_t *bad, *good;

	ASSERT_EQ(0, parse("{'tcp': [{'to': '198.51.100.7'}]}", &cur, err,
			   sizeof(err)));
	net_policy__set_gateway(cur, ip("198.51.100.8"));
	was = cur;
	bad = load("{'tcp': [{'to': '8.8.8.8'}, {'to': 'nope..'}]}");
	good = load("{'tcp': [{'to': '8.8.8.8'}, {'to': '198.51.100.0/24'}]}");
	ASSERT_NE(NULL, bad);
	ASSERT_NE(NULL, good);

	EXPECT_EQ(-EINVAL,
		  net_policy__replace(&cur, bad, "policy", err, sizeof(err)));
	EXPECT_STREQ("policy.tcp[1].to: \"nope..\" is not an address, a CIDR, "
		     "a hostname or an address class",
		     err);
	EXPECT_EQ(was, cur);
	EXPECT_EQ(ALLOW, decide(cur, NULL, TCP, "198.51.100.7", 1, &d));
	EXPECT_EQ(DENY, decide(cur, NULL, TCP, "8.8.8.8", 1, &d));

	ASSERT_EQ(0,
		  net_policy__replace(&cur, good, "policy", err, sizeof(err)));
	EXPECT_EQ(ALLOW, decide(cur, NULL, TCP, "8.8.8.8", 1, &d));
	EXPECT_EQ(ALLOW, decide(cur, NULL, TCP, "198.51.100.7", 1, &d));
	EXPECT_STREQ("tcp grant 1", d.reason);
	/* The runtime context came along. */
	EXPECT_EQ(DENY, decide(cur, NULL, TCP, "198.51.100.8", 1, &d));
	EXPECT_STREQ("host side of the tap", d.reason);

	/* From nothing. */
	net_policy__free(cur);
	cur = NULL;
	ASSERT_EQ(0,
		  net_policy__replace(&cur, good, "policy", err, sizeof(err)));
	EXPECT_NE(NULL, cur);
	net_policy__free(cur);
	json_decref(bad);
	json_decref(good);
}

/* ---- the config: "net.policy" and --net-policy ----------------------- */

static void write_file(const char *path, const char *doc)
{
	char buf[DOC_MAX];
	size_t i;
	int fd;

	for (i = 0; doc[i] && i + 1 < sizeof(buf); i++)
		buf[i] = doc[i] == '\'' ? '"' : doc[i];
	buf[i] = '\0';
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, buf, i) != (ssize_t)i)
		abort();
	close(fd);
}

/* A config document, loaded and validated. */
static int config_json(struct vm_config *c, const char *doc, char *err,
		       size_t len)
{
	char path[] = "/tmp/kiln-policy-XXXXXX";
	int fd = mkstemp(path), ret;

	if (fd < 0)
		abort();
	close(fd);
	write_file(path, doc);
	config__init(c);
	err[0] = '\0';
	ret = options__load_json(c, path, err, len);
	unlink(path);
	if (!ret)
		ret = config__validate(c, err, len);
	return ret;
}

/* `vmm run --kernel /k --net auto --net-policy FILE` with FILE holding doc. */
static int config_cli(struct vm_config *c, const char *doc, char *err,
		      size_t len)
{
	char path[] = "/tmp/kiln-policy-XXXXXX";
	char *argv[MAX_ARGS] = { (char *)"run",	 (char *)"--kernel",
				 (char *)"/k",	 (char *)"--net",
				 (char *)"auto", (char *)"--net-policy",
				 path,		 NULL };
	int fd = mkstemp(path), ret, saved;
	FILE *out;

	if (fd < 0)
		abort();
	close(fd);
	write_file(path, doc);
	config__init(c);
	err[0] = '\0';
	/* Its one line goes to stderr: kept in err for the test. */
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	out = tmpfile();
	if (saved < 0 || !out || dup2(fileno(out), STDERR_FILENO) < 0)
		abort();
	ret = options__parse_argv(c, 7, argv);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(out);
	if (!fgets(err, len, out))
		err[0] = '\0';
	err[strcspn(err, "\n")] = '\0';
	fclose(out);
	unlink(path);
	if (!ret)
		ret = config__validate(c, err, len);
	return ret;
}

TEST(config_json)
{
	struct net_decision d;
	struct vm_config c;
	char err[CONFIG_ERR_LEN];

	ASSERT_EQ(0, config_json(&c,
				 "{'kernel': '/k', 'net': {'mode': 'auto', "
				 "'policy': {'tcp': [{'to': '0.0.0.0/0'}]}}}",
				 err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_NE(NULL, c.net.policy);
	EXPECT_EQ(ALLOW, decide(c.net.policy, NULL, TCP, "8.8.8.8", 1, &d));
	/* The default gateway, handed over by validation. */
	EXPECT_EQ(DENY, decide(c.net.policy, NULL, TCP, "10.0.2.2", 1, &d));
	EXPECT_STREQ("host side of the tap", d.reason);
	config__free(&c);

	EXPECT_EQ(-EINVAL, config_json(&c,
				       "{'kernel': '/k', 'net': {'mode': "
				       "'auto', 'policy': {'tcp': [{'to': "
				       "'a..b'}]}}}",
				       err, sizeof(err)));
	EXPECT_STREQ("net.policy.tcp[0].to: \"a..b\" is not an address, a "
		     "CIDR, a hostname or an address class",
		     err);
	config__free(&c);

	EXPECT_EQ(-EINVAL,
		  config_json(&c, "{'kernel': '/k', 'net': {'policy': {}}}",
			      err, sizeof(err)));
	EXPECT_STREQ("net options given without a network (--net MODE or "
		     "\"net\": {\"mode\": ...})",
		     err);
	config__free(&c);
}

TEST(config_cli)
{
	struct net_decision d;
	struct vm_config c;
	char err[CONFIG_ERR_LEN];

	ASSERT_EQ(0, config_cli(&c,
				"{'udp': [{'to': '198.51.100.7', "
				"'ports': [5000]}]}",
				err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_NE(NULL, c.net.policy);
	EXPECT_EQ(ALLOW,
		  decide(c.net.policy, NULL, UDP, "198.51.100.7", 5000, &d));
	config__free(&c);

	/* Refused in one line naming the file and the key. */
	EXPECT_EQ(-EINVAL,
		  config_cli(&c, "{'udp': [{'to': '::1'}]}", err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, ": net.policy.udp[0].to: \"::1\" is "
				    "IPv6, not supported yet (the data path "
				    "is IPv4-only)"))
	TH_LOG("%s", err);
	EXPECT_EQ(0, strncmp(err, "vmm: --net-policy /tmp/kiln-policy-", 35))
	TH_LOG("%s", err);
	EXPECT_EQ(NULL, c.net.policy);
	config__free(&c);
	EXPECT_EQ(-EINVAL, config_cli(&c, "{'udp': [", err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, ": line 1 column 9: ")) TH_LOG("%s", err);
	config__free(&c);
}

/* ---- http grants ------------------------------------------------------ */

#define SECRET		"s3cret-7f3a9c0d"
#define SECRET_ENV	"KILN_TEST_HTTP_SECRET"
#define OTHER_ENV	"KILN_TEST_HTTP_OTHER"
#define API_ADDR	"198.51.100.7"
#define SECRET_PATH_MAX 64

/* A temporary file holding len bytes of data; its path into path. */
static void secret_file(struct __test_metadata *_metadata, char *path,
			const void *data, size_t len)
{
	int fd;

	snprintf(path, SECRET_PATH_MAX, "/tmp/kiln-net-policy-XXXXXX");
	fd = mkstemp(path);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)len, write(fd, data, len));
	close(fd);
}

/* A hook's grant-http flow for decide_http() (0: a static grant's). */
static uint64_t test_hook_flow;
static bool test_hook_flow_each;
static const char *test_hook_host = "";

/* The request to API_ADDR:port naming host: d filled. */
static enum net_verdict decide_http(const struct net_policy *p,
				    const struct net_bindings *b,
				    const char *host, unsigned int port,
				    bool verified, struct net_http_decision *d)
{
	struct net_flow f = {
		.proto = IPPROTO_TCP,
		.src = { .sin_family = AF_INET,
			 .sin_addr.s_addr = ip("10.0.2.15"),
			 .sin_port = htons(40000) },
		.dst = { .sin_family = AF_INET,
			 .sin_addr.s_addr = ip(API_ADDR),
			 .sin_port = htons(port) },
	};

	memset(d, 0xa5, sizeof(*d));
	/* The inputs: a static grant's flow (0), unless the test says. */
	d->hook_flow = test_hook_flow;
	d->hook_flow_each = test_hook_flow_each;
	snprintf(d->hook_host, sizeof(d->hook_host), "%s", test_hook_host);
	net_policy__decide_http(p, &f, host, verified, b, d);
	return d->verdict;
}

static const char *field_name(const struct net_http_decision *d, unsigned i)
{
	return d->buf + d->headers[i].name;
}

static const char *field_value(const struct net_http_decision *d, unsigned i)
{
	return d->buf + d->headers[i].value;
}

/*
 * A flow to an address this VM's DNS binds to a granted name is
 * intercepted (before any tcp rule); without the binding, or on another
 * port, the tcp rules decide as ever; UDP never is.
 */
TEST(http_grant_flows_through_bindings)
{
	struct net_bindings *b;
	struct net_decision d;
	struct net_policy *p;
	uint64_t now = 1000;
	char err[ERR_LEN];

	setenv(SECRET_ENV, SECRET, 1);
	ASSERT_EQ(
		0,
		parse("{'tcp': [{'to': '" API_ADDR "'}],"
		      " 'http': [{'host': 'api.example.test', 'clearText': true,"
		      "  'headers': {'Authorization': {'from': 'env:" SECRET_ENV
		      "'}}},"
		      " {'host': '*.cdn.test', 'ports': [8080, 8443],"
		      "  'tls': [8443]}]}",
		      &p, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(2, net_policy__nr_http(p));
	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);

	/* No binding yet: the tcp rule relays it as it is. */
	EXPECT_EQ(ALLOW, decide(p, b, TCP, API_ADDR, 80, &d));
	EXPECT_STREQ("tcp grant 0", d.reason);
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.test", ip(API_ADDR),
					  60));
	EXPECT_EQ(NET_VERDICT_HTTP, decide(p, b, TCP, API_ADDR, 80, &d));
	EXPECT_STREQ("http grant 0", d.reason);
	EXPECT_FALSE(d.http_tls);
	EXPECT_EQ(NET_VERDICT_HTTP, decide(p, b, TCP, API_ADDR, 443, &d));
	EXPECT_TRUE(d.http_tls);
	/* Not a port of the grant; not TCP. */
	EXPECT_EQ(ALLOW, decide(p, b, TCP, API_ADDR, 8080, &d));
	EXPECT_EQ(DENY, decide(p, b, UDP, API_ADDR, 80, &d));
	/* Another address: the name is not bound there. */
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.8", 80, &d));
	/* A wildcard grant: names below it only. */
	ASSERT_EQ(0,
		  net_bindings__insert(b, "cdn.test", ip("198.51.100.8"), 60));
	EXPECT_EQ(DENY, decide(p, b, TCP, "198.51.100.8", 8443, &d));
	ASSERT_EQ(0, net_bindings__insert(b, "a.cdn.test", ip("198.51.100.8"),
					  60));
	EXPECT_EQ(NET_VERDICT_HTTP,
		  decide(p, b, TCP, "198.51.100.8", 8443, &d));
	EXPECT_STREQ("http grant 1", d.reason);
	EXPECT_TRUE(d.http_tls);
	EXPECT_EQ(NET_VERDICT_HTTP,
		  decide(p, b, TCP, "198.51.100.8", 8080, &d));
	EXPECT_FALSE(d.http_tls);
	/* Always denied stays denied. */
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.test",
					  ip("127.0.0.1"), 60));
	EXPECT_EQ(DENY, decide(p, b, TCP, "127.0.0.1", 80, &d));
	EXPECT_STREQ("host loopback", d.reason);
	/* Expired: the tcp rule again. */
	now += 60 * 1000;
	EXPECT_EQ(ALLOW, decide(p, b, TCP, API_ADDR, 80, &d));
	net_bindings__destroy(b);
	net_policy__free(p);
	unsetenv(SECRET_ENV);
}

/* Each request: the name the guest gave, bound and granted, or refused. */
TEST(http_request_decisions)
{
	struct net_http_decision d;
	struct net_bindings *b;
	struct net_policy *p;
	uint64_t now = 1000;
	char err[ERR_LEN];

	setenv(SECRET_ENV, "Bearer " SECRET, 1);
	setenv(OTHER_ENV, "kiln", 1);
	ASSERT_EQ(
		0,
		parse("{'http': [{'host': 'api.example.test', 'ports': "
		      "[80], 'clearText': true, 'trace': true,"
		      " 'headers': {'Authorization': {'from': 'env:" SECRET_ENV
		      "'}, 'X-Agent': {'from': 'env:" OTHER_ENV
		      "'}}}, {'host': '*.example.test',"
		      " 'ports': [80, 8080], 'responseTimeoutMs': 900000}]}",
		      &p, err, sizeof(err)))
	TH_LOG("%s", err);
	/* The environment is read once, at parse time. */
	unsetenv(SECRET_ENV);
	b = net_bindings__create(fake_clock, &now);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.test", ip(API_ADDR),
					  60));
	ASSERT_EQ(0, net_bindings__insert(b, "www.example.test", ip(API_ADDR),
					  60));
	ASSERT_EQ(0, net_bindings__insert(b, "other.test", ip(API_ADDR), 60));

	ASSERT_EQ(ALLOW, decide_http(p, b, "API.Example.Test.", 80, false, &d));
	EXPECT_STREQ("http grant 0", d.reason);
	ASSERT_EQ(2, d.nr_headers);
	EXPECT_STREQ("authorization", field_name(&d, 0));
	EXPECT_STREQ("Bearer " SECRET, field_value(&d, 0));
	EXPECT_STREQ("x-agent", field_name(&d, 1));
	EXPECT_STREQ("kiln", field_value(&d, 1));
	/* No deadline of its own: the proxy's. */
	EXPECT_EQ(0, d.response_ms);
	/* Its "clearText" and "trace" come with its fields. */
	EXPECT_TRUE(d.clear_text);
	EXPECT_TRUE(d.trace);
	/* The wildcard grant, which sets nothing but its deadline. */
	ASSERT_EQ(ALLOW,
		  decide_http(p, b, "www.example.test", 8080, false, &d));
	EXPECT_STREQ("http grant 1", d.reason);
	EXPECT_EQ(0, d.nr_headers);
	EXPECT_EQ(900000, d.response_ms);
	EXPECT_FALSE(d.clear_text);
	EXPECT_FALSE(d.trace);
	/* Bound there, but no grant names it; granted, not on that port. */
	EXPECT_EQ(DENY, decide_http(p, b, "other.test", 80, false, &d));
	EXPECT_EQ(403, d.status);
	EXPECT_STREQ("http no grant", d.reason);
	EXPECT_EQ(0, d.nr_headers);
	EXPECT_EQ(DENY, decide_http(p, b, "api.example.test", 8081, false, &d));
	EXPECT_STREQ("http no grant", d.reason);
	/* Granted, but not bound to this address: what the guest claims. */
	EXPECT_EQ(DENY, decide_http(p, b, "new.example.test", 80, false, &d));
	EXPECT_EQ(421, d.status);
	EXPECT_STREQ("http host mismatch", d.reason);
	EXPECT_EQ(DENY,
		  decide_http(p, NULL, "api.example.test", 80, false, &d));
	EXPECT_STREQ("http host mismatch", d.reason);
	/* An address or no name: nothing trusted to match. */
	EXPECT_EQ(DENY, decide_http(p, b, API_ADDR, 80, false, &d));
	EXPECT_EQ(421, d.status);
	EXPECT_STREQ("http host not a name", d.reason);
	EXPECT_EQ(DENY, decide_http(p, b, NULL, 80, false, &d));
	EXPECT_EQ(DENY, decide_http(p, b, "a_b.example.test", 80, false, &d));
	/* Once verified (the connection's first request), expiry is fine. */
	now += 60 * 1000;
	EXPECT_EQ(DENY, decide_http(p, b, "api.example.test", 80, false, &d));
	EXPECT_EQ(ALLOW, decide_http(p, b, "api.example.test", 80, true, &d));
	/* No policy: nothing granted. */
	EXPECT_EQ(DENY, decide_http(NULL, b, "api.example.test", 80, true, &d));
	EXPECT_STREQ("http no grant", d.reason);
	net_bindings__destroy(b);
	net_policy__free(p);
	unsetenv(OTHER_ENV);
}

/*
 * Issue 34, finding 7: a grant's fields go only on its TLS ports unless
 * it says "clearText": the shapes it accepts (the refusals are in the
 * table), and what a decision then carries. The docs' example and a
 * grant without fields keep their default ports, 80 included.
 */
TEST(http_fields_on_tls_ports_unless_clear_text)
{
	static const char *const ok[] = {
		"{'http': [{'host': 'a.com', 'ports': [443], 'headers': "
		"{'x-a': {'from': 'env:" SECRET_ENV "'}}}]}",
		"{'http': [{'host': 'a.com', 'ports': [8443], 'tls': [8443], "
		"'headers': {'x-a': {'from': 'env:" SECRET_ENV "'}}}]}",
		"{'http': [{'host': 'a.com', 'ports': ['8440-8443'], 'tls': "
		"[8440, 8441, 8442, 8443], 'headers': {'x-a': {'from': 'env:" SECRET_ENV
		"'}}}]}",
		"{'http': [{'host': 'a.com', 'clearText': true, 'headers': "
		"{'x-a': {'from': 'env:" SECRET_ENV "'}}}]}",
		"{'http': [{'host': '*.example.com'}]}",
		"{'http': [{'host': 'a.com', 'ask': 'request', 'trace': false}],"
		" 'hook': {'socket': 's'}}",
	};
	struct net_http_decision d;
	struct net_bindings *b;
	struct net_policy *p;
	char err[ERR_LEN];

	setenv(SECRET_ENV, SECRET, 1);
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		EXPECT_EQ(0, parse(ok[i], &p, err, sizeof(err)))
		TH_LOG("%s: %s", ok[i], err);
		net_policy__free(p);
	}
	/* Not said: neither TRACE nor clear text for its fields. */
	ASSERT_EQ(0, parse(ok[0], &p, err, sizeof(err))) TH_LOG("%s", err);
	b = net_bindings__create(NULL, NULL);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_bindings__insert(b, "a.com", ip(API_ADDR), 60));
	ASSERT_EQ(ALLOW, decide_http(p, b, "a.com", 443, false, &d));
	EXPECT_EQ(1, d.nr_headers);
	EXPECT_FALSE(d.trace);
	EXPECT_FALSE(d.clear_text);
	net_policy__free(p);
	ASSERT_EQ(0, parse(ok[3], &p, err, sizeof(err))) TH_LOG("%s", err);
	ASSERT_EQ(ALLOW, decide_http(p, b, "a.com", 80, false, &d));
	EXPECT_TRUE(d.clear_text);
	EXPECT_FALSE(d.trace);
	net_policy__free(p);
	net_bindings__destroy(b);
	unsetenv(SECRET_ENV);
}

/*
 * A flow the hook's grant-http intercepts (issue 31): no static grant
 * is looked for; its name is checked as a grant's is, then each request
 * is put to the hook ("ask": "request") or allowed with no field
 * ("connection"); a policy with no hook any more grants nothing.
 */
TEST(http_request_of_a_hook_flow)
{
	struct net_http_decision d;
	struct net_bindings *b;
	struct net_policy *p, *none;
	char err[ERR_LEN];

	ASSERT_EQ(0, parse("{'hook': {'socket': '/run/h.sock', 'timeoutMs': "
			   "300}}",
			   &p, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, parse("{'tcp': [{'to': '203.0.113.7/32'}]}", &none, err,
			   sizeof(err)))
	TH_LOG("%s", err);
	b = net_bindings__create(NULL, NULL);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.test", ip(API_ADDR),
					  60));
	test_hook_flow = 7;
	test_hook_flow_each = true;
	ASSERT_EQ(NET_VERDICT_ASK,
		  decide_http(p, b, "api.example.test", 443, false, &d));
	EXPECT_STREQ(NET_HOOK_GRANT_HTTP, d.reason);
	EXPECT_STREQ("/run/h.sock", d.hook_socket);
	EXPECT_EQ(300, d.hook_timeout_ms);
	EXPECT_TRUE(d.ask_each_request);
	EXPECT_EQ(0, d.nr_headers);
	EXPECT_EQ(0, d.response_ms);
	/* The name is checked as a static grant's: bound there, a name. */
	EXPECT_EQ(DENY, decide_http(p, b, "new.example.test", 443, false, &d));
	EXPECT_STREQ("http host mismatch", d.reason);
	EXPECT_EQ(DENY, decide_http(p, b, API_ADDR, 443, false, &d));
	EXPECT_STREQ("http host not a name", d.reason);
	/* Pinned to one name ("host"): another bound there is a mismatch. */
	ASSERT_EQ(0, net_bindings__insert(b, "www.example.test", ip(API_ADDR),
					  60));
	test_hook_host = "api.example.test";
	EXPECT_EQ(NET_VERDICT_ASK,
		  decide_http(p, b, "API.example.test", 443, false, &d));
	EXPECT_EQ(DENY, decide_http(p, b, "www.example.test", 443, false, &d));
	EXPECT_EQ(421, d.status);
	EXPECT_STREQ("http host mismatch", d.reason);
	test_hook_host = "";
	EXPECT_EQ(NET_VERDICT_ASK,
		  decide_http(p, b, "www.example.test", 443, false, &d));
	/* "ask": "connection": allowed, nothing set, no question. */
	test_hook_flow_each = false;
	ASSERT_EQ(ALLOW, decide_http(p, b, "api.example.test", 80, false, &d));
	EXPECT_STREQ(NET_HOOK_GRANT_HTTP, d.reason);
	EXPECT_EQ(0, d.nr_headers);
	EXPECT_EQ(0, d.response_ms);
	/* The policy replaced by one without a hook: no grant. */
	EXPECT_EQ(DENY,
		  decide_http(none, b, "api.example.test", 80, false, &d));
	EXPECT_EQ(403, d.status);
	EXPECT_STREQ("http no grant", d.reason);
	/* The same policy, a static grant's flow: no grant covers it. */
	test_hook_flow = 0;
	EXPECT_EQ(DENY, decide_http(p, b, "api.example.test", 80, false, &d));
	EXPECT_STREQ("http no grant", d.reason);
	net_bindings__destroy(b);
	net_policy__free(none);
	net_policy__free(p);
}

/* A file's value: read whole, its one trailing newline (or CR LF) dropped. */
TEST(http_header_from_file)
{
	char doc[512], path[SECRET_PATH_MAX], err[ERR_LEN];
	static const char *const files[] = { SECRET "\n", SECRET "\r\n",
					     SECRET };
	struct net_http_decision d;
	struct net_bindings *b;
	struct net_policy *p;

	b = net_bindings__create(NULL, NULL);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, net_bindings__insert(b, "api.example.test", ip(API_ADDR),
					  60));
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		secret_file(_metadata, path, files[i], strlen(files[i]));
		snprintf(doc, sizeof(doc),
			 "{'http': [{'host': 'api.example.test', 'headers': "
			 "{'x-token': {'from': 'file:%s'}}, 'ports': [443]}]}",
			 path);
		ASSERT_EQ(0, parse(doc, &p, err, sizeof(err)))
		TH_LOG("%s", err);
		unlink(path);
		ASSERT_EQ(ALLOW, decide_http(p, b, "api.example.test", 443,
					     false, &d));
		ASSERT_EQ(1, d.nr_headers);
		EXPECT_STREQ(SECRET, field_value(&d, 0));
		net_policy__free(p);
	}
	net_bindings__destroy(b);
}

/* Refused with a line that names the source, never a byte of the value. */
static void expect_refused(struct __test_metadata *_metadata, const char *doc,
			   const char *want)
{
	struct net_policy *p = NULL;
	char err[ERR_LEN];

	EXPECT_NE(0, parse(doc, &p, err, sizeof(err))) TH_LOG("%s", doc);
	EXPECT_EQ(NULL, p);
	EXPECT_STREQ(want, err);
	EXPECT_EQ(NULL, strstr(err, "s3cret")) TH_LOG("%s", err);
}

TEST(http_header_values_refused_without_showing_them)
{
	char doc[DOC_MAX], path[SECRET_PATH_MAX], want[ERR_LEN];
	char big[NET_POLICY_SECRET_MAX + 2];
	size_t n;

	/* Control bytes: a CR LF in a value would inject a field. */
	setenv(SECRET_ENV, SECRET "\r\nX-Evil: 1", 1);
	expect_refused(_metadata,
		       "{'http': [{'host': 'a.com', 'headers': {'x-a': "
		       "{'from': 'env:" SECRET_ENV "'}}}]}",
		       "net.policy.http[0].headers.x-a.from: env:" SECRET_ENV
		       " holds control bytes, which a header value cannot");
	setenv(SECRET_ENV, "", 1);
	expect_refused(_metadata,
		       "{'http': [{'host': 'a.com', 'headers': {'x-a': "
		       "{'from': 'env:" SECRET_ENV "'}}}]}",
		       "net.policy.http[0].headers.x-a.from: env:" SECRET_ENV
		       " is empty");
	/* Too long: 8 KiB at most, from the environment or a file. */
	memset(big, 's', sizeof(big));
	memcpy(big, SECRET, strlen(SECRET));
	big[NET_POLICY_SECRET_MAX + 1] = '\0';
	setenv(SECRET_ENV, big, 1);
	expect_refused(_metadata,
		       "{'http': [{'host': 'a.com', 'headers': {'x-a': "
		       "{'from': 'env:" SECRET_ENV "'}}}]}",
		       "net.policy.http[0].headers.x-a.from: env:" SECRET_ENV
		       " is longer than 8192 bytes");
	secret_file(_metadata, path, big, NET_POLICY_SECRET_MAX + 1);
	snprintf(doc, sizeof(doc),
		 "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
		 "'file:%s'}}}]}",
		 path);
	snprintf(want, sizeof(want),
		 "net.policy.http[0].headers.x-a.from: file:%s: longer than "
		 "8192 bytes",
		 path);
	expect_refused(_metadata, doc, want);
	unlink(path);
	/* A file of 8 KiB exactly, its newline dropped, is fine. */
	big[NET_POLICY_SECRET_MAX - 1] = '\n';
	secret_file(_metadata, path, big, NET_POLICY_SECRET_MAX);
	snprintf(doc, sizeof(doc),
		 "{'http': [{'host': 'a.com', 'headers': {'x-a': {'from': "
		 "'file:%s'}}, 'clearText': true}]}",
		 path);
	{
		struct net_policy *p;
		char err[ERR_LEN];

		ASSERT_EQ(0, parse(doc, &p, err, sizeof(err)))
		TH_LOG("%s", err);
		net_policy__free(p);
	}
	unlink(path);

	/* Three 8000-byte values: past a grant's 16 KiB of fields. */
	big[8000] = '\0';
	setenv(SECRET_ENV, big, 1);
	expect_refused(_metadata,
		       "{'http': [{'host': 'a.com', 'headers': {'x-a': "
		       "{'from': 'env:" SECRET_ENV
		       "'}, 'x-b': {'from': 'env:" SECRET_ENV
		       "'}, 'x-c': {'from': 'env:" SECRET_ENV "'}}}]}",
		       "net.policy.http[0].headers: 24015 bytes of names and "
		       "values, at most 16384");
	/* Seventeen fields. */
	setenv(SECRET_ENV, SECRET, 1);
	n = snprintf(doc, sizeof(doc),
		     "{'http': [{'host': 'a.com', 'headers': {");
	for (int i = 0; i <= (int)NET_HTTP_MAX_HEADERS; i++)
		n += snprintf(doc + n, sizeof(doc) - n,
			      "%s'x-%d': {'from': 'env:" SECRET_ENV "'}",
			      i ? ", " : "", i);
	snprintf(doc + n, sizeof(doc) - n, "}}]}");
	expect_refused(_metadata, doc,
		       "net.policy.http[0].headers: 17 fields, at most 16");
	/* Twice, by case. */
	expect_refused(_metadata,
		       "{'http': [{'host': 'a.com', 'headers': {'X-A': "
		       "{'from': 'env:" SECRET_ENV
		       "'}, 'x-a': {'from': 'env:" SECRET_ENV "'}}}]}",
		       "net.policy.http[0].headers: \"x-a\" twice (names are "
		       "compared without case)");
	/* A later refusal after a value was read: still not in the line. */
	expect_refused(_metadata,
		       "{'http': [{'host': 'a.com', 'headers': {'x-a': "
		       "{'from': 'env:" SECRET_ENV "'}}}, {'host': 'a..com'}]}",
		       "net.policy.http[1].host: \"a..com\" is not a hostname "
		       "(\"api.example.com\" or \"*.example.com\")");
	unsetenv(SECRET_ENV);
}

TEST(http_grants_bounded)
{
	char *doc = malloc(DOC_MAX);
	struct net_policy *p;
	char err[ERR_LEN];
	size_t n;

	ASSERT_NE(NULL, doc);
	for (unsigned int want = NET_POLICY_MAX_RULES;
	     want <= NET_POLICY_MAX_RULES + 1; want++) {
		n = snprintf(doc, DOC_MAX, "{'http': [");
		for (unsigned int i = 0; i < want; i++)
			n += snprintf(doc + n, DOC_MAX - n,
				      "%s{'host': 'h%u.test'}", i ? "," : "",
				      i);
		snprintf(doc + n, DOC_MAX - n, "]}");
		p = NULL;
		if (want == NET_POLICY_MAX_RULES) {
			EXPECT_EQ(0, parse(doc, &p, err, sizeof(err)))
			TH_LOG("%s", err);
			EXPECT_EQ(NET_POLICY_MAX_RULES, net_policy__nr_http(p));
		} else {
			EXPECT_NE(0, parse(doc, &p, err, sizeof(err)));
			EXPECT_STREQ("net.policy.http: 257 grants, at most 256",
				     err);
		}
		net_policy__free(p);
	}
	free(doc);
}

TEST_HARNESS_MAIN
